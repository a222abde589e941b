//! Tokenizer training whose result depends only on the corpus and the settings: the same
//! vocabulary files in every process and on any number of cores, so that `--seed` reproduces
//! a run that trains its own tokenizer.
//!
//! tokenizers' trainers count the corpus's words in a randomly seeded hash map and let its
//! order decide ties (huggingface/tokenizers#1794): in BPE and WordPiece, which of two equally
//! frequent pairs merges first (WordPiece's `##` letters get their ids, which break the ties,
//! in that order); in Unigram, the order of the sentences (and with the thread count, the
//! grouping of its EM sums) and the scores of the characters no piece covers. Here the words
//! are counted in sorted order through the tokenizer's own normaliser and pre-tokeniser;
//! BPE and WordPiece merges are learnt by [`learn_merges`], tokenizers' algorithm with every id
//! fixed by the tokens' text; Unigram runs tokenizers' own EM on the sorted sentences on one
//! thread, and its last step's ties are broken by the pieces' text.

use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::cmp::Reverse;

use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::models::unigram::{Unigram, UnigramTrainer};
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::models::ModelWrapper;
use tokenizers::{AddedToken, Trainer};

/// What to train, with tokenizers' settings for it.
#[derive(Clone, Debug)]
pub(crate) enum Recipe {
    /// BERT's WordPiece: BPE merges over words split into a first letter and `##` letters.
    WordPiece {
        /// The unknown-word token.
        unk: String,
    },
    /// Byte-level BPE over GPT-2's 256-byte alphabet.
    ByteLevelBpe,
    /// SentencePiece's Unigram language model.
    Unigram {
        /// The unknown-word token.
        unk: String,
    },
}

/// Pairs (BPE, WordPiece) seen fewer times are never merged (Sesame's setting before, with
/// tokenizers' trainers).
const MIN_FREQUENCY: u64 = 2;

/// A `tokenizers::Trainer` that counts words in sorted order and trains by [`Recipe`].
pub(crate) struct SortedTrainer {
    recipe: Recipe,
    vocab_size: usize,
    /// Special tokens, ids 0, 1, … in this order.
    specials: Vec<String>,
    words: BTreeMap<String, u64>,
}

impl SortedTrainer {
    pub(crate) fn new(recipe: Recipe, vocab_size: usize, specials: Vec<String>) -> Self {
        Self { recipe, vocab_size, specials, words: BTreeMap::new() }
    }

    fn added_specials(&self) -> Vec<AddedToken> {
        self.specials.iter().map(|t| AddedToken::from(t.clone(), true)).collect()
    }
}

impl Trainer for SortedTrainer {
    type Model = ModelWrapper;

    fn should_show_progress(&self) -> bool {
        false
    }

    fn feed<I, S, F>(&mut self, iterator: I, process: F) -> tokenizers::Result<()>
    where
        I: Iterator<Item = S> + Send,
        S: AsRef<str> + Send,
        F: Fn(&str) -> tokenizers::Result<Vec<String>> + Sync,
    {
        use rayon::prelude::*;
        // Counts are integers, so their sum does not depend on how the threads split the text.
        let counts = iterator
            .par_bridge()
            .try_fold(HashMap::<String, u64>::new, |mut counts, text| {
                for word in process(text.as_ref())? {
                    *counts.entry(word).or_default() += 1;
                }
                Ok::<_, tokenizers::Error>(counts)
            })
            .try_reduce(HashMap::new, |mut a, b| {
                for (word, n) in b {
                    *a.entry(word).or_default() += n;
                }
                Ok(a)
            })?;
        for (word, n) in counts {
            *self.words.entry(word).or_default() += n;
        }
        Ok(())
    }

    fn train(&self, model: &mut ModelWrapper) -> tokenizers::Result<Vec<AddedToken>> {
        *model = match &self.recipe {
            Recipe::WordPiece { unk } => {
                let learnt = learn_merges(&self.words, &self.specials, &[], Some("##"), self.vocab_size, MIN_FREQUENCY);
                let vocab: Vocab = canonical_wordpiece_order(learnt.tokens, self.specials.len(), "##")
                    .into_iter()
                    .enumerate()
                    .map(|(id, token)| (token, id as u32))
                    .collect();
                WordPiece::builder().vocab(vocab).unk_token(unk.clone()).continuing_subword_prefix("##".into()).build()?.into()
            }
            Recipe::ByteLevelBpe => {
                let alphabet: Vec<char> = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet().into_iter().collect();
                let learnt = learn_merges(&self.words, &self.specials, &alphabet, None, self.vocab_size, MIN_FREQUENCY);
                let vocab: Vocab = learnt.tokens.into_iter().enumerate().map(|(id, token)| (token, id as u32)).collect();
                BPE::builder().vocab_and_merges(vocab, learnt.merges).build()?.into()
            }
            Recipe::Unigram { unk } => train_unigram(&self.words, &self.specials, unk, self.vocab_size)?.into(),
        };
        Ok(self.added_specials())
    }
}

/// A learnt BPE vocabulary: tokens in id order, and the merges in the order they were made.
#[derive(Debug, PartialEq)]
pub(crate) struct Merges {
    pub tokens: Vec<String>,
    pub merges: Vec<(String, String)>,
}

/// tokenizers' `BpeTrainer` algorithm: words split into characters (every one after the first
/// prefixed by `prefix`, for WordPiece), then the most frequent adjacent pair merged until the
/// vocabulary has `vocab_size` tokens or no pair is seen `min_frequency` times. Ids: the
/// specials, the alphabet (`initial_alphabet` and every character of `words`) by code point, the
/// prefixed letters by code point, then the merged tokens as they are made; of equally frequent
/// pairs the one with the smaller ids merges first. tokenizers numbers the prefixed letters in
/// its hash map's order, so its ties fall differently in each process.
pub(crate) fn learn_merges(
    words: &BTreeMap<String, u64>,
    specials: &[String],
    initial_alphabet: &[char],
    prefix: Option<&str>,
    vocab_size: usize,
    min_frequency: u64,
) -> Merges {
    let mut tokens: Vec<String> = Vec::new();
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut intern = |token: String, tokens: &mut Vec<String>| -> u32 {
        *ids.entry(token.clone()).or_insert_with(|| {
            tokens.push(token);
            tokens.len() as u32 - 1
        })
    };
    for special in specials {
        intern(special.clone(), &mut tokens);
    }
    let mut alphabet: Vec<char> = words.keys().flat_map(|w| w.chars()).chain(initial_alphabet.iter().copied()).collect();
    alphabet.sort_unstable();
    alphabet.dedup();
    for c in &alphabet {
        intern(c.to_string(), &mut tokens);
    }
    if let Some(prefix) = prefix {
        let mut letters: Vec<char> = words.keys().flat_map(|w| w.chars().skip(1)).collect();
        letters.sort_unstable();
        letters.dedup();
        for c in letters {
            intern(format!("{prefix}{c}"), &mut tokens);
        }
    }
    let letter = |i: usize, c: char| match (i, prefix) {
        (0, _) | (_, None) => c.to_string(),
        (_, Some(prefix)) => format!("{prefix}{c}"),
    };
    let (mut split, counts): (Vec<Vec<u32>>, Vec<i64>) = words
        .iter()
        .map(|(w, &n)| (w.chars().enumerate().map(|(i, c)| intern(letter(i, c), &mut tokens)).collect(), n as i64))
        .unzip();

    type Pair = (u32, u32);
    let mut pair_counts: HashMap<Pair, i64> = HashMap::new();
    // The words each pair may occur in (a superset: merging a word without it changes nothing).
    let mut occurs: HashMap<Pair, HashSet<usize>> = HashMap::new();
    for (w, symbols) in split.iter().enumerate() {
        for pair in symbols.windows(2).map(|p| (p[0], p[1])) {
            *pair_counts.entry(pair).or_default() += counts[w];
            occurs.entry(pair).or_default().insert(w);
        }
    }
    // Most frequent first, then the smaller pair; stale entries are re-queued when popped.
    let mut queue: BinaryHeap<(i64, Reverse<Pair>)> = pair_counts.iter().map(|(&p, &n)| (n, Reverse(p))).collect();
    let mut merges = Vec::new();
    while tokens.len() < vocab_size {
        let Some((count, Reverse(pair))) = queue.pop() else { break };
        let current = pair_counts.get(&pair).copied().unwrap_or(0);
        if current != count {
            if current > 0 {
                queue.push((current, Reverse(pair)));
            }
            continue;
        }
        if count < 1 || (count as u64) < min_frequency {
            break;
        }
        let (a, b) = (tokens[pair.0 as usize].clone(), tokens[pair.1 as usize].clone());
        let tail = prefix.and_then(|p| b.strip_prefix(p)).unwrap_or(&b);
        let new = intern(format!("{a}{tail}"), &mut tokens);
        merges.push((a, b));
        let mut touched = HashSet::new();
        for w in occurs.remove(&pair).unwrap_or_default() {
            let symbols = &mut split[w];
            if !symbols.windows(2).any(|p| (p[0], p[1]) == pair) {
                continue;
            }
            for p in symbols.windows(2) {
                *pair_counts.entry((p[0], p[1])).or_default() -= counts[w];
            }
            *symbols = merge_pair(symbols, pair, new);
            for p in symbols.windows(2).map(|p| (p[0], p[1])) {
                *pair_counts.entry(p).or_default() += counts[w];
                occurs.entry(p).or_default().insert(w);
                touched.insert(p);
            }
        }
        for p in touched {
            let n = pair_counts[&p];
            if n > 0 {
                queue.push((n, Reverse(p)));
            }
        }
    }
    Merges { tokens, merges }
}

/// `symbols` with every occurrence of `pair`, left to right, replaced by `new`.
fn merge_pair(symbols: &[u32], pair: (u32, u32), new: u32) -> Vec<u32> {
    let mut out = Vec::with_capacity(symbols.len());
    let mut i = 0;
    while i < symbols.len() {
        if i + 1 < symbols.len() && (symbols[i], symbols[i + 1]) == pair {
            out.push(new);
            i += 2;
        } else {
            out.push(symbols[i]);
            i += 1;
        }
    }
    out
}

/// A WordPiece vocabulary in the order Sesame writes it: the `specials` first specials keep
/// their ids, the other tokens follow shortest first (letters, then `##` letters, then longer
/// pieces), then by their text. WordPiece splits text by the set of tokens alone, so the
/// order is free, and this one reads well in `vocab.txt`.
fn canonical_wordpiece_order(tokens: Vec<String>, specials: usize, prefix: &str) -> Vec<String> {
    let mut rest = tokens[specials.min(tokens.len())..].to_vec();
    rest.sort_by_cached_key(|t| {
        let stem = t.strip_prefix(prefix);
        (stem.unwrap_or(t).chars().count(), stem.is_some(), t.clone())
    });
    tokens.into_iter().take(specials).chain(rest).collect()
}

/// tokenizers' Unigram EM on the sentences in sorted order, on one thread (its E-step sums
/// floats in chunks of `sentences / threads`), then [`canonical_unigram`].
fn train_unigram(words: &BTreeMap<String, u64>, specials: &[String], unk: &str, vocab_size: usize) -> tokenizers::Result<Unigram> {
    let trainer = UnigramTrainer::builder()
        .vocab_size(vocab_size as u32)
        .show_progress(false)
        .special_tokens(specials.iter().map(|t| AddedToken::from(t.clone(), true)).collect())
        .unk_token(Some(unk.to_string()))
        .build()?;
    let sentences: Vec<(String, u32)> = words.iter().map(|(w, &n)| (w.clone(), n.min(u32::MAX as u64) as u32)).collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let mut model = Unigram::default();
    pool.install(|| trainer.do_train(sentences, &mut model))?;
    let unk_id = specials.iter().position(|t| t == unk);
    canonical_unigram(&model, specials.len(), unk_id)
}

/// The scores SentencePiece's last step gives are decided in a hash map's order in two places:
/// characters no piece covers get `min + k·0.0001` for k = 0, 1, … in that order, and pieces of
/// equal score keep it. Both are undone from the pieces and scores alone: those characters
/// (with any other single character on that grid) take the grid's scores in code-point order,
/// and pieces of equal score are ordered by their text.
fn canonical_unigram(model: &Unigram, specials: usize, unk_id: Option<usize>) -> tokenizers::Result<Unigram> {
    const PENALTY: f64 = 0.0001;
    let pieces: Vec<(String, f64)> = model.iter().map(|(p, s)| (p.clone(), *s)).collect();
    let (head, rest) = pieces.split_at(specials.min(pieces.len()));
    let mut rest = rest.to_vec();
    let min = rest.iter().map(|(_, s)| *s).fold(f64::INFINITY, f64::min);
    let on_grid = |(piece, score): &(String, f64)| {
        let k = (score - min) / PENALTY;
        piece.chars().count() == 1 && k.is_finite() && (k - k.round()).abs() < 1e-6 && k.round() < rest.len() as f64
    };
    let grid: Vec<usize> = (0..rest.len()).filter(|&i| on_grid(&rest[i])).collect();
    let mut chars: Vec<String> = grid.iter().map(|&i| rest[i].0.clone()).collect();
    let mut scores: Vec<f64> = grid.iter().map(|&i| rest[i].1).collect();
    chars.sort();
    scores.sort_by(f64::total_cmp);
    for (&i, (piece, score)) in grid.iter().zip(chars.into_iter().zip(scores)) {
        rest[i] = (piece, score);
    }
    rest.sort_by(|(pa, sa), (pb, sb)| sb.total_cmp(sa).then_with(|| pa.cmp(pb)));
    let vocab: Vec<(String, f64)> = head.iter().cloned().chain(rest).collect();
    Ok(Unigram::from(vocab, unk_id, model.byte_fallback())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for w in text.split_whitespace() {
            *counts.entry(w.to_string()).or_default() += 1;
        }
        counts
    }

    #[test]
    fn merges_the_most_frequent_pair_first_and_breaks_ties_by_ids() {
        // "u g" occurs 20 times, "h u" 15, "u n" 16 …: the classic example of the BPE paper.
        let corpus = "hug ".repeat(10) + &"pug ".repeat(5) + &"pun ".repeat(12) + &"bun ".repeat(4) + &"hugs ".repeat(5);
        let learnt = learn_merges(&words(&corpus), &["<unk>".into()], &[], None, 100, 2);
        assert_eq!(learnt.merges[0], ("u".into(), "g".into()));
        assert_eq!(learnt.merges[1], ("u".into(), "n".into()));
        assert_eq!(learnt.merges[2], ("h".into(), "ug".into()));
        assert_eq!(&learnt.tokens[..8], ["<unk>", "b", "g", "h", "n", "p", "s", "u"]);
        // A tie: "a b" and "c d" both twice; the pair of smaller ids merges first.
        let learnt = learn_merges(&words("cd ab cd ab"), &[], &[], None, 100, 2);
        assert_eq!(learnt.merges, [("a".to_string(), "b".to_string()), ("c".to_string(), "d".to_string())]);
    }

    #[test]
    fn wordpiece_letters_are_numbered_by_code_point_and_merged_without_their_prefix() {
        let learnt = learn_merges(&words("ab ab ba"), &[], &[], Some("##"), 100, 2);
        assert_eq!(learnt.tokens[..4], ["a", "b", "##a", "##b"]);
        assert_eq!(learnt.merges, [("a".to_string(), "##b".to_string())]);
        assert_eq!(learnt.tokens[4], "ab");
    }

    #[test]
    fn overlapping_pairs_merge_left_to_right() {
        assert_eq!(merge_pair(&[1, 1, 1], (1, 1), 9), [9, 1]);
        assert_eq!(merge_pair(&[1, 1, 1, 1], (1, 1), 9), [9, 9]);
        assert_eq!(merge_pair(&[2, 1, 1], (1, 1), 9), [2, 9]);
    }

    #[test]
    fn stops_at_the_vocabulary_size_and_the_minimum_frequency() {
        let corpus = words(&"abcd ".repeat(3));
        assert_eq!(learn_merges(&corpus, &[], &[], None, 5, 2).tokens.len(), 5);
        assert!(learn_merges(&corpus, &[], &[], None, 100, 4).merges.is_empty());
    }
}
