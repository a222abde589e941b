//! ERNIE 1.0's knowledge masking (Sun et al. 2019, "ERNIE: Enhanced Representation through
//! Knowledge Integration", section 3.2): a sentence is cut into *units*, and a chosen unit is
//! masked whole, so that the model must recover a phrase or an entity from the context rather
//! than from its other half. Three levels, trained in sequence:
//!
//! - basic: every word is a unit (whole-word masking);
//! - phrase: multi-word phrases are units ([`find_phrases`]: collocations scored as word2phrase
//!   scores them, or a list given by the user);
//! - entity: named entities are units (a list of surface forms given by the user).
//!
//! Units come from a [`Lexicon`] of word sequences, matched on word boundaries (longest match
//! first, left to right); the words outside a match are units of one word. Words are compared
//! by their text, the tokenizer's pieces joined without their word-boundary markers (`##`,
//! `Ġ`, `▁`), so that a phrase tokenized on its own matches it inside a sentence whatever the
//! tokenizer. The 15% budget and the 80/10/10 replacement are BERT's, one decision per unit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::masking::{words, MaskingConfig, MaskingInput, MaskingStrategy};
use crate::pretraining::Segment;
use crate::tokenizer::Tokenizer;

/// Why a lexicon file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LexiconError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// The file is not UTF-8 text.
    #[error("{path} is not UTF-8 text")]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// A line the tokenizer cannot encode, or that has no word.
    #[error("{path}:{line}: {reason}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// No entry in the whole file.
    #[error("{path} lists no phrase or entity (one per line)")]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// The text of every token id without its word-boundary marker: how words are compared.
#[derive(Clone, Debug, Default)]
pub struct WordText {
    pieces: Vec<String>,
}

impl WordText {
    /// The pieces of `tokenizer`'s vocabulary.
    pub fn new(tokenizer: &Tokenizer) -> Self {
        let pieces = (0..tokenizer.vocab_size() as u32)
            .map(|id| {
                let token = tokenizer.id_to_token(id).unwrap_or_default();
                let bare = token.strip_prefix("##").or_else(|| token.strip_prefix('Ġ')).or_else(|| token.strip_prefix('▁')).unwrap_or(&token);
                bare.to_string()
            })
            .collect();
        Self { pieces }
    }

    /// The text of the word made of `ids`.
    pub fn word(&self, ids: impl IntoIterator<Item = u32>) -> String {
        ids.into_iter().map(|id| self.pieces.get(id as usize).map_or("\u{fffd}", String::as_str)).collect()
    }

    /// The words of a tokenized text (no special tokens).
    pub fn words_of(&self, segment: &Segment) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (i, (&id, &start)) in segment.ids.iter().zip(&segment.word_start).enumerate() {
            let piece = self.word([id]);
            match out.last_mut() {
                Some(word) if !start && i > 0 => word.push_str(&piece),
                _ => out.push(piece),
            }
        }
        out
    }
}

/// Units of several words masked whole: phrases or entities, each a sequence of words.
#[derive(Clone, Debug, Default)]
pub struct Lexicon {
    /// The entries by their first word, longest first.
    by_first: HashMap<String, Vec<Vec<String>>>,
    text: WordText,
    entries: usize,
}

impl Lexicon {
    /// A lexicon of `entries` (each a sequence of words, as [`WordText`] writes them).
    pub fn new(entries: impl IntoIterator<Item = Vec<String>>, text: WordText) -> Self {
        let mut by_first: HashMap<String, Vec<Vec<String>>> = HashMap::new();
        for entry in entries {
            if let Some(first) = entry.first() {
                let list = by_first.entry(first.clone()).or_default();
                if !list.contains(&entry) {
                    list.push(entry);
                }
            }
        }
        let mut entries = 0;
        for list in by_first.values_mut() {
            list.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
            entries += list.len();
        }
        Self { by_first, text, entries }
    }

    /// The entries of a file, one per line (blank lines skipped), each tokenized by
    /// `tokenizer` into its words.
    pub fn read(path: &Path, tokenizer: &Tokenizer) -> Result<Self, LexiconError> {
        let bytes = std::fs::read(path).map_err(|source| LexiconError::Io { path: path.to_path_buf(), source })?;
        let text = String::from_utf8(bytes).map_err(|_| LexiconError::NotText { path: path.to_path_buf() })?;
        let words = WordText::new(tokenizer);
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let fail = |reason: String| LexiconError::Line { path: path.to_path_buf(), line: i + 1, reason };
            let segment = tokenizer.tokenize(line).map_err(|e| fail(e.to_string()))?;
            if segment.ids.is_empty() {
                return Err(fail(format!("{line:?} has no token")));
            }
            entries.push(words.words_of(&segment));
        }
        if entries.is_empty() {
            return Err(LexiconError::Empty { path: path.to_path_buf() });
        }
        Ok(Self::new(entries, words))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Every entry, in a fixed order (by first word, then longest first).
    pub fn entries(&self) -> Vec<&[String]> {
        let mut firsts: Vec<&String> = self.by_first.keys().collect();
        firsts.sort();
        firsts.into_iter().flat_map(|f| self.by_first[f].iter().map(Vec::as_slice)).collect()
    }

    /// The units of `input`: the entries found in it (on word boundaries, without crossing
    /// a special token; the longest at the leftmost word first), and every other word alone.
    /// Each unit lists its positions.
    pub fn units(&self, input: MaskingInput<'_>) -> Vec<Vec<usize>> {
        let words = words(input);
        let text: Vec<String> = words.iter().map(|w| self.text.word(w.iter().map(|&i| input.ids[i]))).collect();
        // Whether word j + 1 follows word j with nothing between them.
        let adjacent = |j: usize| words[j + 1][0] == words[j][words[j].len() - 1] + 1;
        let mut units = Vec::new();
        let mut i = 0;
        while i < words.len() {
            // Entries are sorted longest first: the first that matches is the longest.
            let matched = self.by_first.get(&text[i]).and_then(|entries| {
                entries.iter().map(Vec::len).zip(entries).find(|&(n, e)| i + n <= words.len() && e[..] == text[i..i + n] && (i..i + n - 1).all(adjacent))
            });
            let n = matched.map_or(1, |(n, _)| n);
            units.push(words[i..i + n].iter().flatten().copied().collect());
            i += n;
        }
        units
    }
}

/// How phrases are found in a corpus: word2phrase's collocation score (Mikolov et al. 2013,
/// "Distributed Representations of Words and Phrases", eq. 6),
/// `(count(a b) − min_count) · N / (count(a) · count(b))` over `N` words, above `threshold`;
/// each pass joins the pairs found into one unit, so that `passes` passes find phrases of up
/// to `2^passes` words.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhraseConfig {
    /// Pairs seen fewer times are not phrases (word2phrase's `min_count`, the discount δ).
    pub min_count: usize,
    /// Score above which a pair is a phrase (word2phrase's default 100).
    pub threshold: f64,
    /// Passes over the corpus (word2phrase's scripts run it twice).
    pub passes: usize,
}

impl Default for PhraseConfig {
    fn default() -> Self {
        Self { min_count: 5, threshold: 100.0, passes: 2 }
    }
}

/// The phrases of `sentences` (tokenized text, one sentence each), as sequences of words,
/// sorted. Only words with a letter or digit join phrases.
pub fn find_phrases(sentences: &[Segment], text: &WordText, config: PhraseConfig) -> Vec<Vec<String>> {
    let wordy = |w: &str| w.chars().any(char::is_alphanumeric);
    // Each sentence as units; a unit is its words.
    let mut corpus: Vec<Vec<Vec<String>>> =
        sentences.iter().map(|s| text.words_of(s).into_iter().map(|w| vec![w]).collect()).collect();
    for _ in 0..config.passes {
        let mut unigrams: HashMap<&[String], usize> = HashMap::new();
        let mut bigrams: HashMap<(&[String], &[String]), usize> = HashMap::new();
        let mut total = 0usize;
        for sentence in &corpus {
            for (k, unit) in sentence.iter().enumerate() {
                total += 1;
                *unigrams.entry(unit).or_default() += 1;
                if let Some(next) = sentence.get(k + 1) {
                    *bigrams.entry((unit, next)).or_default() += 1;
                }
            }
        }
        let score = |a: &[String], b: &[String]| -> f64 {
            let ab = bigrams.get(&(a, b)).copied().unwrap_or(0);
            if ab <= config.min_count || !a.iter().chain(b).all(|w| wordy(w)) {
                return 0.0;
            }
            (ab - config.min_count) as f64 * total as f64 / (unigrams[a] as f64 * unigrams[b] as f64)
        };
        // Join the phrases left to right, as word2phrase rewrites its corpus.
        let joined: Vec<Vec<Vec<String>>> = corpus
            .iter()
            .map(|sentence| {
                let mut out: Vec<Vec<String>> = Vec::new();
                let mut k = 0;
                while k < sentence.len() {
                    if k + 1 < sentence.len() && score(&sentence[k], &sentence[k + 1]) > config.threshold {
                        out.push(sentence[k].iter().chain(&sentence[k + 1]).cloned().collect());
                        k += 2;
                    } else {
                        out.push(sentence[k].clone());
                        k += 1;
                    }
                }
                out
            })
            .collect();
        corpus = joined;
    }
    let mut phrases: Vec<Vec<String>> = corpus.into_iter().flatten().filter(|u| u.len() > 1).collect();
    phrases.sort();
    phrases.dedup();
    phrases
}

/// Masking of whole units of a [`Lexicon`] (ERNIE's phrase-level or entity-level masking; an
/// empty lexicon gives its basic level, whole words): units drawn in random order until the
/// budget is covered (one that would overshoot it is skipped, unless nothing is chosen yet),
/// each unit one 80/10/10 decision.
#[derive(Clone, Debug, Default)]
pub struct UnitMasking {
    /// Fractions.
    pub config: MaskingConfig,
    /// The multi-word units.
    pub lexicon: Arc<Lexicon>,
}

impl UnitMasking {
    /// Units of `lexicon` with BERT's fractions.
    pub fn new(lexicon: Arc<Lexicon>) -> Self {
        Self { config: MaskingConfig::default(), lexicon }
    }
}

impl MaskingStrategy for UnitMasking {
    fn choose(&self, input: MaskingInput<'_>, budget: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
        let mut units = self.lexicon.units(input);
        units.shuffle(rng);
        let mut chosen = Vec::new();
        let mut covered = 0;
        for unit in units {
            if covered >= budget {
                break;
            }
            if covered + unit.len() > budget && covered > 0 {
                continue;
            }
            covered += unit.len();
            chosen.push(unit);
        }
        chosen
    }

    fn config(&self) -> MaskingConfig {
        self.config
    }
}

/// ERNIE's three levels in sequence over a run: basic (whole words) for the first third of
/// its training batches, then phrases, then entities. Batches not of the run (held out) are
/// masked at the basic level, so that held-out losses stay comparable along the run.
#[derive(Clone, Debug)]
pub struct ErnieMasking {
    /// The levels, in order.
    pub stages: [UnitMasking; 3],
    /// Training batches of each stage but the last (which runs to the end).
    pub batches_per_stage: u64,
}

impl ErnieMasking {
    /// The three levels over a run of `batches` training batches (micro-batches), with the
    /// phrases and the entities to mask whole.
    pub fn new(phrases: Arc<Lexicon>, entities: Arc<Lexicon>, batches: u64) -> Self {
        let basic = UnitMasking::new(Arc::new(Lexicon::default()));
        Self { stages: [basic, UnitMasking::new(phrases), UnitMasking::new(entities)], batches_per_stage: batches.div_ceil(3).max(1) }
    }
}

impl MaskingStrategy for ErnieMasking {
    fn choose(&self, input: MaskingInput<'_>, budget: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
        self.stages[0].choose(input, budget, rng)
    }

    fn config(&self) -> MaskingConfig {
        self.stages[0].config
    }

    fn stage(&self, batch: u64) -> Option<&dyn MaskingStrategy> {
        let stage = (batch / self.batches_per_stage).min(2) as usize;
        Some(&self.stages[stage])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::masking::{MaskVocab, NOT_PREDICTED};
    use crate::tokenizer::TokenizerKind;
    use rand::SeedableRng;

    /// Hand-made text: "new york", "sperm whale" and "captain ahab" recur together (60 times
    /// in 900 words: a collocation score of 55 · 900 / 60², 13.75), every other pair of words
    /// at most 5 times (the fillers rotate).
    fn text() -> Vec<String> {
        let fillers = ["the", "ship", "sailed", "from", "a", "port", "near", "old", "harbour", "at", "dawn", "with", "men"];
        (0..60)
            .map(|i| {
                let f = |k: usize| fillers[(i * 7 + k * 3) % fillers.len()];
                format!("{} new york {} {} sperm whale {} captain ahab {} .", f(0), f(1), f(2), f(3), f(4))
            })
            .collect()
    }

    fn kinds() -> [TokenizerKind; 3] {
        [TokenizerKind::WordPiece, TokenizerKind::ByteLevelBpe, TokenizerKind::Unigram]
    }

    fn tokenizer(kind: TokenizerKind) -> Tokenizer {
        let text = text();
        Tokenizer::train(kind, text.iter().map(String::as_str), 120, &kind.config()).unwrap()
    }

    fn masking_input(tokenizer: &Tokenizer, sentence: &str) -> (Vec<u32>, Vec<bool>, Vec<bool>) {
        let s = tokenizer.tokenize(sentence).unwrap();
        let maskable = vec![true; s.ids.len()];
        (s.ids, maskable, s.word_start)
    }

    #[test]
    fn phrases_found_by_collocation_are_the_recurring_pairs_only() {
        for kind in kinds() {
            let tokenizer = tokenizer(kind);
            let sentences: Vec<Segment> = text().iter().map(|s| tokenizer.tokenize(s).unwrap()).collect();
            let phrases = find_phrases(&sentences, &WordText::new(&tokenizer), PhraseConfig { passes: 1, min_count: 5, threshold: 5.0 });
            let joined: Vec<String> = phrases.iter().map(|p| p.join(" ")).collect();
            assert_eq!(joined, ["captain ahab", "new york", "sperm whale"], "{kind:?}");
        }
    }

    #[test]
    fn entities_and_phrases_are_masked_whole_within_the_budget() {
        for kind in kinds() {
            let tokenizer = tokenizer(kind);
            let path = std::env::temp_dir().join(format!("sesame-entities-{kind:?}-{}.txt", std::process::id()));
            // Matched as the tokenizer writes the words: case-sensitive for byte-level BPE.
            std::fs::write(&path, "captain ahab\n\nsperm whale\nnew york city\n").unwrap();
            let lexicon = Arc::new(Lexicon::read(&path, &tokenizer).unwrap());
            std::fs::remove_file(&path).unwrap();
            assert_eq!(lexicon.len(), 3);
            let sentence = "the ship sailed from new york with captain ahab and a sperm whale near the harbour at dawn .";
            let (ids, maskable, word_start) = masking_input(&tokenizer, sentence);
            let input = MaskingInput { ids: &ids, maskable: &maskable, word_start: &word_start };
            let text = WordText::new(&tokenizer);
            let units: Vec<String> = lexicon.units(input).iter().map(|u| text.word(u.iter().map(|&i| ids[i]))).collect();
            assert!(units.contains(&"captainahab".to_string()) && units.contains(&"spermwhale".to_string()), "{kind:?}: {units:?}");
            // "new york" alone is not an entry ("new york city" is): two units of one word.
            assert!(units.contains(&"new".to_string()) && units.contains(&"york".to_string()), "{kind:?}: {units:?}");
            let masking = UnitMasking::new(lexicon.clone());
            let vocab = MaskVocab { mask_id: tokenizer.mask_token_id().unwrap(), vocab_size: tokenizer.vocab_size() as u32, special_ids: vec![] };
            let unit_positions = lexicon.units(input);
            let candidates = ids.len();
            let budget = ((candidates as f64 * 0.15).round() as usize).max(1);
            let mut whole_entity_masked = 0;
            for seed in 0..200 {
                let masked = masking.mask(input, &vocab, &mut StdRng::seed_from_u64(seed));
                let chosen: Vec<usize> = (0..ids.len()).filter(|&i| masked.labels[i] != NOT_PREDICTED).collect();
                // Every unit is predicted whole or not at all.
                for unit in &unit_positions {
                    let n = unit.iter().filter(|i| chosen.contains(i)).count();
                    assert!(n == 0 || n == unit.len(), "{kind:?}: unit {unit:?} cut by {chosen:?}");
                }
                // The budget: overshot only by a first unit larger than it, and short of it
                // only when every unit left would overshoot it.
                let largest = unit_positions.iter().map(Vec::len).max().unwrap();
                assert!(chosen.len() <= budget.max(largest), "{kind:?}: {} of budget {budget}", chosen.len());
                let mut left = unit_positions.iter().filter(|u| !chosen.contains(&u[0]));
                assert!(chosen.len() >= budget || left.all(|u| chosen.len() + u.len() > budget), "{kind:?}: {} of budget {budget}, a unit left fits", chosen.len());
                if unit_positions.iter().filter(|u| u.len() > 1).any(|u| u.iter().all(|i| chosen.contains(i))) {
                    whole_entity_masked += 1;
                }
            }
            assert!(whole_entity_masked > 20, "{kind:?}: a multi-word unit masked whole in {whole_entity_masked} of 200");
        }
    }

    #[test]
    fn ernie_masks_words_then_phrases_then_entities_over_the_run() {
        let tokenizer = tokenizer(TokenizerKind::WordPiece);
        let text = WordText::new(&tokenizer);
        let entry = |s: &str| text.words_of(&tokenizer.tokenize(s).unwrap());
        let phrases = Arc::new(Lexicon::new([entry("new york")], text.clone()));
        let entities = Arc::new(Lexicon::new([entry("captain ahab")], text.clone()));
        let ernie = ErnieMasking::new(phrases, entities, 300);
        let (ids, maskable, word_start) = masking_input(&tokenizer, "new york and captain ahab");
        let input = MaskingInput { ids: &ids, maskable: &maskable, word_start: &word_start };
        let units = |batch: u64| ernie.stage(batch).unwrap().choose(input, 100, &mut StdRng::seed_from_u64(1)).len();
        // Five words; then "new york" one unit; then "captain ahab" one unit.
        assert_eq!([units(0), units(99), units(100), units(199), units(200), units(10_000)], [5, 5, 4, 4, 4, 4]);
        let second = ernie.stage(150).unwrap().choose(input, 100, &mut StdRng::seed_from_u64(1));
        let third = ernie.stage(250).unwrap().choose(input, 100, &mut StdRng::seed_from_u64(1));
        assert!(second.iter().any(|u| u.len() == 2 && text.word(u.iter().map(|&i| ids[i])) == "newyork"));
        assert!(third.iter().any(|u| u.len() == 2 && text.word(u.iter().map(|&i| ids[i])) == "captainahab"));
        // Held-out batches (not of the run): the basic level.
        assert_eq!(ernie.choose(input, 100, &mut StdRng::seed_from_u64(1)).len(), 5);
    }

    #[test]
    fn a_lexicon_file_without_entries_or_with_a_bad_line_is_refused_by_name() {
        let tokenizer = tokenizer(TokenizerKind::WordPiece);
        let path = std::env::temp_dir().join(format!("sesame-empty-lexicon-{}.txt", std::process::id()));
        std::fs::write(&path, "\n  \n").unwrap();
        let e = Lexicon::read(&path, &tokenizer).unwrap_err().to_string();
        assert!(e.contains(&path.display().to_string()) && e.contains("no phrase or entity"), "{e}");
        std::fs::write(&path, [b'a', 0xff, b'\n']).unwrap();
        let e = Lexicon::read(&path, &tokenizer).unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
        std::fs::remove_file(&path).unwrap();
        let e = Lexicon::read(Path::new("/nonexistent/entities.txt"), &tokenizer).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/entities.txt"), "{e}");
    }
}
