//! BART's text corruption, fairseq's `DenoisingDataset` algorithm for algorithm: sentence
//! permutation, whole-word / span masking (text infilling with Poisson span lengths, where a
//! span of length 0 inserts a mask), insertion noise and document rotation, applied in that
//! order to one example `<s> … </s>`. Unlike the others, this corruption changes the length.
//! [`sentence_blocks`] lays a corpus out as fairseq's `complete_doc` blocks.
//!
//! Unlike fairseq (numpy and torch generators seeded per epoch and index), every draw comes from
//! the caller's seeded generator, so the same seed gives the same noise on every machine.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use crate::pretraining::Segment;

/// How masked spans are measured (fairseq `--mask-length`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MaskLength {
    /// One token per mask.
    Subword,
    /// One word per mask (words from `word_start`).
    Word,
    /// Spans of Poisson(`lambda`) words (0 allowed: an inserted mask) — BART's text infilling.
    SpanPoisson {
        /// The mean span length (BART: 3.5).
        lambda: f64,
    },
}

/// The noise of one example (fairseq's denoising arguments).
#[derive(Clone, Debug, PartialEq)]
pub struct DenoisingConfig {
    /// Fraction of words to mask (`--mask`; BART: 0.3).
    pub mask: f64,
    /// Of the masks, the fraction that are random tokens instead (`--mask-random`; BART: 0.1).
    pub mask_random: f64,
    /// Inserted masks, as a fraction of the tokens (`--insert`; BART: 0).
    pub insert: f64,
    /// Probability of rotating the document (`--rotate`; BART: 0).
    pub rotate: f64,
    /// Fraction of sentences permuted (`--permute-sentences`; BART: 1).
    pub permute_sentences: f64,
    /// A masked span becomes: -1 a mask per token, 0 nothing (deletion), 1 one mask (BART: 1).
    pub replace_length: i8,
    /// How spans are measured (BART: Poisson spans of λ = 3.5).
    pub mask_length: MaskLength,
}

impl Default for DenoisingConfig {
    /// The recipe BART was trained with (fairseq's `bart.large` pre-training command).
    fn default() -> Self {
        Self { mask: 0.3, mask_random: 0.1, insert: 0.0, rotate: 0.0, permute_sentences: 1.0, replace_length: 1, mask_length: MaskLength::SpanPoisson { lambda: 3.5 } }
    }
}

/// Why a configuration is refused (fairseq's checks, and ranges).
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("denoising `{field}`: {reason}")]
pub struct DenoisingError {
    /// The setting.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl DenoisingConfig {
    /// Refuse what fairseq refuses, and fractions outside [0, 1].
    pub fn validate(&self) -> Result<(), DenoisingError> {
        let bad = |field, reason: String| Err(DenoisingError { field, reason });
        for (v, f) in [(self.mask, "mask"), (self.mask_random, "mask_random"), (self.insert, "insert"), (self.rotate, "rotate"), (self.permute_sentences, "permute_sentences")] {
            if !(0.0..=1.0).contains(&v) {
                return bad(f, format!("{v} is not a fraction in [0, 1]"));
            }
        }
        if ![-1, 0, 1].contains(&self.replace_length) {
            return bad("replace_length", format!("{} is not -1, 0 or 1", self.replace_length));
        }
        if self.mask_length == MaskLength::Subword && self.replace_length == -1 {
            return bad("replace_length", "-1 needs words or spans; with subwords use 0 or 1".into());
        }
        if let MaskLength::SpanPoisson { lambda } = self.mask_length {
            if !(lambda > 0.0 && lambda.is_finite()) {
                return bad("poisson_lambda", format!("{lambda} is not a positive number"));
            }
        }
        Ok(())
    }
}

/// What the noise needs of the vocabulary.
#[derive(Clone, Debug)]
pub struct NoiseVocab {
    /// The mask token.
    pub mask_id: u32,
    /// The end-of-sentence token that separates sentences (`.`; fairseq uses the GPT-2 id of
    /// `.` with GPT-2 BPE, else `</s>`).
    pub full_stop_id: u32,
    /// Vocabulary size: random tokens are drawn from `1..vocab_size`, as fairseq draws them.
    pub vocab_size: u32,
}

/// The Poisson(λ) probabilities fairseq samples span lengths from: P(k) for k = 0, 1, … until
/// one falls below 1e-7 (at most 128), normalised.
pub fn poisson_span_probabilities(lambda: f64) -> Vec<f64> {
    let (mut ps, mut power, mut factorial) = (Vec::new(), 1.0, 1.0);
    let e = (-lambda).exp();
    for k in 0..128 {
        ps.push(e * power / factorial);
        power *= lambda;
        factorial *= (k + 1) as f64;
        if *ps.last().expect("pushed") < 1e-7 {
            break;
        }
    }
    let total: f64 = ps.iter().sum();
    ps.iter().map(|p| p / total).collect()
}

fn sample(probabilities: &[f64], rng: &mut StdRng) -> usize {
    let u: f64 = rng.random();
    let mut mass = 0.0;
    for (k, p) in probabilities.iter().enumerate() {
        mass += p;
        if u < mass {
            return k;
        }
    }
    probabilities.len() - 1
}

fn permutation(n: usize, rng: &mut StdRng) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(rng);
    order
}

fn random_token(vocab: &NoiseVocab, rng: &mut StdRng) -> u32 {
    rng.random_range(1..vocab.vocab_size.max(2))
}

/// A corrupted example: the source the encoder reads, and which tokens of the target (the
/// uncorrupted example) it still shows unchanged.
#[derive(Clone, Debug, PartialEq)]
pub struct Noised {
    /// The noised tokens, `<s> … </s>`.
    pub source: Vec<u32>,
    /// `kept[i]`: target token `i` appears in `source` as it was (moved by permutation or
    /// rotation at most); false where it was masked, replaced by a random token or deleted.
    pub kept: Vec<bool>,
}

/// Corrupt `tokens` (`<s> … </s>`, at least those two) as BART's pre-training does; the target
/// is `tokens` itself. `word_start[i]`: whether token `i` begins a word (`None`: every token
/// does, fairseq without whole-word masking). `sentence_end[i]`: whether token `i` ends a
/// sentence (`None`: fairseq's rule, a sentence ends at `vocab.full_stop_id`).
pub fn denoise(
    tokens: &[u32],
    word_start: Option<&[bool]>,
    sentence_end: Option<&[bool]>,
    config: &DenoisingConfig,
    vocab: &NoiseVocab,
    rng: &mut StdRng,
) -> Noised {
    let n = tokens.len();
    let mut source = Tracked { ids: tokens.to_vec(), origin: (0..n).map(Some).collect() };
    let mut starts: Vec<bool> = word_start.map_or_else(|| vec![true; n], <[bool]>::to_vec);
    if n >= 3 {
        if config.permute_sentences > 0.0 {
            let ends = sentence_ends(tokens, sentence_end, vocab.full_stop_id);
            (source, starts) = permute_sentences(&source, &starts, &ends, config.permute_sentences, rng);
        }
        if config.mask > 0.0 {
            source = whole_word_mask(source, &starts, config, vocab, rng);
        }
        if config.insert > 0.0 {
            source = insertion_noise(source, config.insert, config.mask_random, vocab, rng);
        }
        if config.rotate > 0.0 && rng.random::<f64>() < config.rotate {
            source = rotate(source, rng);
        }
    }
    let mut kept = vec![false; n];
    source.origin.iter().flatten().for_each(|&i| kept[i] = true);
    Noised { source: source.ids, kept }
}

/// One example of BART's pre-training: `<s> sentences… </s>` with its word starts and
/// sentence ends (the target the model reconstructs, and what [`denoise`] needs).
#[derive(Clone, Debug, PartialEq)]
pub struct DenoisingExample {
    /// Token ids, `<s>` and `</s>` included.
    pub ids: Vec<u32>,
    /// Whether each token begins a word (false at `<s>` and `</s>`).
    pub word_start: Vec<bool>,
    /// Whether each token is the last of a sentence.
    pub sentence_end: Vec<bool>,
}

impl DenoisingExample {
    /// Corrupt this example (see [`denoise`]).
    pub fn denoise(&self, config: &DenoisingConfig, vocab: &NoiseVocab, rng: &mut StdRng) -> Noised {
        denoise(&self.ids, Some(&self.word_start), Some(&self.sentence_end), config, vocab, rng)
    }
}

/// fairseq's `complete_doc` blocks, as BART was trained on: each document's sentences in
/// order, as many whole sentences per block as fit in `max_len` tokens with `<s>` (`bos`) and
/// `</s>` (`eos`); a longer sentence is cut into pieces of its own; no block spans two
/// documents. Empty sentences are skipped.
pub fn sentence_blocks(documents: &[Vec<Segment>], max_len: usize, bos: u32, eos: u32) -> Vec<DenoisingExample> {
    let piece = max_len.saturating_sub(2).max(1);
    let mut blocks = Vec::new();
    let open = || DenoisingExample { ids: vec![bos], word_start: vec![false], sentence_end: vec![false] };
    let close = |mut block: DenoisingExample, blocks: &mut Vec<DenoisingExample>| {
        if block.ids.len() > 1 {
            block.ids.push(eos);
            block.word_start.push(false);
            block.sentence_end.push(false);
            blocks.push(block);
        }
    };
    for document in documents {
        let mut block = open();
        for sentence in document {
            for (ids, starts) in sentence.ids.chunks(piece).zip(sentence.word_start.chunks(piece)) {
                if block.ids.len() + ids.len() + 1 > max_len.max(3) {
                    close(std::mem::replace(&mut block, open()), &mut blocks);
                }
                block.ids.extend_from_slice(ids);
                block.word_start.extend_from_slice(starts);
                block.word_start[block.ids.len() - ids.len()] = true;
                block.sentence_end.extend(std::iter::repeat_n(false, ids.len() - 1).chain([true]));
            }
        }
        close(block, &mut blocks);
    }
    blocks
}

/// Tokens with the position each came from in the uncorrupted example (`None`: a mask or a
/// random token).
#[derive(Clone, Debug)]
struct Tracked {
    ids: Vec<u32>,
    origin: Vec<Option<usize>>,
}

impl Tracked {
    fn len(&self) -> usize {
        self.ids.len()
    }

    /// Put `id`, which shows no token of the target, at `i`.
    fn replace(&mut self, i: usize, id: u32) {
        self.ids[i] = id;
        self.origin[i] = None;
    }

    /// The tokens at `indices`, in that order.
    fn pick(&self, indices: impl Iterator<Item = usize>) -> Self {
        let (ids, origin) = indices.map(|i| (self.ids[i], self.origin[i])).unzip();
        Self { ids, origin }
    }
}

/// The exclusive end of each sentence of `tokens` (`<s> … </s>`), the last one ending before
/// `</s>`: after each token flagged in `sentence_end`, or else fairseq's rule (a run of full
/// stops ends a sentence, which runs to just after its first).
fn sentence_ends(tokens: &[u32], sentence_end: Option<&[bool]>, full_stop: u32) -> Vec<usize> {
    let n = tokens.len();
    match sentence_end {
        Some(flags) => {
            let mut ends: Vec<usize> = (1..n - 2).filter(|&j| flags.get(j).copied().unwrap_or(false)).map(|j| j + 1).collect();
            ends.push(n - 1);
            ends
        }
        None => {
            let mut full_stops: Vec<bool> = tokens.iter().map(|&t| t == full_stop).collect();
            full_stops[n - 2] = true;
            (0..n - 1).filter(|&j| full_stops[j + 1] && !full_stops[j]).map(|j| j + 2).collect()
        }
    }
}

/// Permute a fraction `p` of the sentences (ending at `ends`), keeping `<s>` and `</s>` in
/// place; the word starts move with their tokens.
fn permute_sentences(source: &Tracked, starts: &[bool], ends: &[usize], p: f64, rng: &mut StdRng) -> (Tracked, Vec<bool>) {
    let count = ends.len();
    let to_permute = ((count as f64 * 2.0 * p) / 2.0).ceil() as usize;
    let substitutions: Vec<usize> = permutation(count, rng).into_iter().take(to_permute).collect();
    let mut ordering: Vec<usize> = (0..count).collect();
    let shuffled = permutation(to_permute, rng);
    for (k, &s) in substitutions.iter().enumerate() {
        ordering[s] = substitutions[shuffled[k]];
    }
    let n = source.len();
    let order: Vec<usize> = std::iter::once(0)
        .chain(ordering.iter().flat_map(|&i| (if i > 0 { ends[i - 1] } else { 1 })..ends[i]))
        .chain(ends[count - 1]..n)
        .collect();
    let out_starts = order.iter().map(|&j| starts[j]).collect();
    (source.pick(order.into_iter()), out_starts)
}

/// fairseq's `add_whole_word_mask`: mask `ceil(words × mask)` words in spans.
fn whole_word_mask(mut source: Tracked, starts: &[bool], config: &DenoisingConfig, vocab: &NoiseVocab, rng: &mut StdRng) -> Tracked {
    let n = source.len();
    // Word starts as counts: <s> and </s> never start a span; </s> counts as a long word so
    // that no span runs over the end.
    let mut is_start: Vec<i64> = starts.iter().map(|&s| i64::from(s)).collect();
    is_start[0] = 0;
    is_start[n - 1] = 0;
    let words: i64 = is_start.iter().sum();
    let mut to_mask = (words as f64 * config.mask).ceil() as usize;
    if to_mask == 0 {
        return source;
    }
    let mut inserts = 0;
    let mut lengths: Vec<i64> = match config.mask_length {
        MaskLength::SpanPoisson { lambda } => {
            let ps = poisson_span_probabilities(lambda);
            let mut lengths: Vec<i64> = Vec::new();
            // Draw batches of `to_mask` lengths until they cover the budget, then trim.
            while lengths.iter().sum::<i64>() < to_mask as i64 {
                lengths.extend((0..to_mask).map(|_| sample(&ps, rng) as i64));
            }
            let mut cum = 0;
            let mut i = 0;
            while cum + lengths[i] < to_mask as i64 {
                cum += lengths[i];
                i += 1;
            }
            lengths[i] = to_mask as i64 - cum;
            lengths.truncate(i + 1);
            let total = lengths.len();
            lengths.retain(|&l| l > 0);
            inserts = total - lengths.len();
            to_mask = lengths.len();
            if to_mask == 0 {
                let p = inserts as f64 / n as f64;
                return insertion_noise(source, p, config.mask_random, vocab, rng);
            }
            lengths
        }
        _ => vec![1; to_mask],
    };
    let word_starts: Vec<usize> = (0..n).filter(|&i| is_start[i] != 0).collect();
    let mut indices: Vec<usize> = permutation(word_starts.len(), rng).into_iter().take(to_mask).map(|k| word_starts[k]).collect();
    lengths.truncate(indices.len());
    let mut random: Vec<bool> = (0..indices.len()).map(|_| rng.random::<f64>() < config.mask_random).collect();
    let mut keep = vec![true; n];
    is_start[n - 1] = 255;
    let replace = |source: &mut Tracked, indices: &[usize], random: &[bool], rng: &mut StdRng| {
        for &i in indices {
            source.replace(i, vocab.mask_id);
        }
        for (&i, _) in indices.iter().zip(random).filter(|(_, &r)| r) {
            source.replace(i, random_token(vocab, rng));
        }
    };
    if config.replace_length == 0 {
        indices.iter().for_each(|&i| keep[i] = false);
    } else {
        replace(&mut source, &indices, &random, rng);
    }
    let spans = matches!(config.mask_length, MaskLength::SpanPoisson { .. });
    if spans {
        lengths.iter_mut().for_each(|l| *l -= 1);
    }
    while !indices.is_empty() {
        // Each span moves one token on while it has words left (spans) or its word goes on.
        let mut next = (Vec::new(), Vec::new(), Vec::new());
        for (k, &i) in indices.iter().enumerate() {
            let goes_on = if spans {
                lengths[k] -= is_start[i + 1];
                lengths[k] >= 0
            } else {
                is_start[i + 1] == 0
            };
            if goes_on {
                next.0.push(i + 1);
                next.1.push(random[k]);
                next.2.push(lengths.get(k).copied().unwrap_or(0));
            }
        }
        (indices, random) = (next.0, next.1);
        if spans {
            lengths = next.2;
        }
        if config.replace_length != -1 {
            indices.iter().for_each(|&i| keep[i] = false);
        } else {
            replace(&mut source, &indices, &random, rng);
        }
    }
    let source = source.pick((0..n).filter(|&i| keep[i]));
    if inserts > 0 {
        let p = inserts as f64 / source.len() as f64;
        return insertion_noise(source, p, config.mask_random, vocab, rng);
    }
    source
}

/// fairseq's `add_insertion_noise`: `ceil(len × p)` masks (a `mask_random` fraction of them
/// random tokens) inserted at random places between `<s>` and `</s>`.
fn insertion_noise(tokens: Tracked, p: f64, mask_random: f64, vocab: &NoiseVocab, rng: &mut StdRng) -> Tracked {
    if p == 0.0 {
        return tokens;
    }
    let len = tokens.len();
    let n = (len as f64 * p).ceil() as usize;
    let noise: Vec<usize> = permutation(len + n - 2, rng).into_iter().take(n).map(|i| i + 1).collect();
    let num_random = (n as f64 * mask_random).ceil() as usize;
    let mut result: Vec<Option<u32>> = vec![None; len + n];
    for &i in &noise[num_random..] {
        result[i] = Some(vocab.mask_id);
    }
    for &i in &noise[..num_random] {
        result[i] = Some(random_token(vocab, rng));
    }
    let mut rest = tokens.ids.into_iter().zip(tokens.origin);
    let (ids, origin) = result
        .into_iter()
        .map(|t| match t {
            Some(id) => (id, None),
            None => rest.next().expect("one token per free place"),
        })
        .unzip();
    Tracked { ids, origin }
}

/// fairseq's `add_rolling_noise`: the document (between `<s>` and `</s>`) rotated to start at
/// a random token.
fn rotate(tokens: Tracked, rng: &mut StdRng) -> Tracked {
    let n = tokens.len();
    let offset = rng.random_range(1..=(n - 1).max(1));
    tokens.pick(std::iter::once(0).chain(offset..n - 1).chain(1..offset).chain(std::iter::once(n - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const MASK: u32 = 4;
    const STOP: u32 = 5;
    fn vocab() -> NoiseVocab {
        NoiseVocab { mask_id: MASK, full_stop_id: STOP, vocab_size: 100 }
    }

    /// `<s>` (0), three sentences of distinct tokens ending in `.` (5), `</s>` (2).
    fn document() -> Vec<u32> {
        let mut t = vec![0];
        for s in 0..3u32 {
            t.extend((0..6).map(|k| 10 + 10 * s + k));
            t.push(STOP);
        }
        t.push(2);
        t
    }

    fn only(f: impl FnOnce(&mut DenoisingConfig)) -> DenoisingConfig {
        let mut c = DenoisingConfig { mask: 0.0, mask_random: 0.0, insert: 0.0, rotate: 0.0, permute_sentences: 0.0, ..DenoisingConfig::default() };
        f(&mut c);
        c
    }

    #[test]
    fn the_poisson_table_is_fairseqs() {
        let ps = poisson_span_probabilities(3.5);
        assert!((ps.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((ps[0] - (-3.5f64).exp()).abs() < 1e-6 && ps.len() < 128);
        let mut rng = StdRng::seed_from_u64(1);
        let mean = (0..20_000).map(|_| sample(&ps, &mut rng) as f64).sum::<f64>() / 20_000.0;
        assert!((mean - 3.5).abs() < 0.05, "{mean}");
    }

    #[test]
    fn sentence_permutation_reorders_whole_sentences_between_the_ends() {
        let doc = document();
        let mut changed = false;
        for seed in 0..10 {
            let out = denoise(&doc, None, None, &only(|c| c.permute_sentences = 1.0), &vocab(), &mut StdRng::seed_from_u64(seed)).source;
            assert_eq!((out[0], out[out.len() - 1], out.len()), (0, 2, doc.len()));
            let mut sentences: Vec<&[u32]> = out[1..out.len() - 1].split_inclusive(|&t| t == STOP).collect();
            changed |= sentences != doc[1..doc.len() - 1].split_inclusive(|&t| t == STOP).collect::<Vec<_>>();
            sentences.sort();
            assert_eq!(sentences, doc[1..doc.len() - 1].split_inclusive(|&t| t == STOP).collect::<Vec<_>>());
        }
        assert!(changed, "some seed permutes");
    }

    #[test]
    fn text_infilling_masks_thirty_percent_of_words_in_spans_each_one_mask() {
        let doc = document();
        let words = doc.len() - 2;
        for seed in 0..20 {
            let out = denoise(&doc, None, None, &only(|c| c.mask = 0.3), &vocab(), &mut StdRng::seed_from_u64(seed)).source;
            assert_eq!((out[0], *out.last().unwrap()), (0, 2), "<s> and </s> stay");
            // Every kept token is the document's, in order; the rest were masked.
            let kept: Vec<u32> = out.iter().copied().filter(|&t| t != MASK).collect();
            let mut it = doc.iter();
            assert!(kept.iter().all(|t| it.any(|d| d == t)), "kept tokens keep their order");
            let removed = doc.len() - kept.len();
            let budget = (words as f64 * 0.3).ceil() as usize;
            assert!(removed <= budget, "seed {seed}: {removed} masked, budget {budget}");
            assert!(out.iter().filter(|&&t| t == MASK).count() >= 1);
        }
        // A fixed seed gives fixed noise.
        let a = denoise(&doc, None, None, &DenoisingConfig::default(), &vocab(), &mut StdRng::seed_from_u64(7));
        assert_eq!(a, denoise(&doc, None, None, &DenoisingConfig::default(), &vocab(), &mut StdRng::seed_from_u64(7)));
    }

    #[test]
    fn replace_length_chooses_between_one_mask_deletion_and_a_mask_per_token() {
        let doc = document();
        let spans = |r: i8| only(|c| {
            c.mask = 0.3;
            c.replace_length = r;
        });
        let per_token = denoise(&doc, None, None, &spans(-1), &vocab(), &mut StdRng::seed_from_u64(3)).source;
        assert_eq!(per_token.len(), doc.len(), "-1 keeps the length");
        let deleted = denoise(&doc, None, None, &spans(0), &vocab(), &mut StdRng::seed_from_u64(3)).source;
        assert!(!deleted.contains(&MASK) && deleted.len() < doc.len(), "0 deletes: {deleted:?}");
        let words_only = only(|c| {
            c.mask = 0.3;
            c.mask_length = MaskLength::Word;
        });
        // With word starts every 3 tokens, a masked word becomes one mask.
        let starts: Vec<bool> = (0..doc.len()).map(|i| i % 3 == 1).collect();
        let out = denoise(&doc, Some(&starts), None, &words_only, &vocab(), &mut StdRng::seed_from_u64(5)).source;
        let masks = out.iter().filter(|&&t| t == MASK).count();
        assert_eq!(doc.len() - out.len(), 2 * masks, "each masked 3-token word is one mask");
    }

    #[test]
    fn insertion_and_rotation_keep_the_document() {
        let doc = document();
        let out = denoise(&doc, None, None, &only(|c| c.insert = 0.1), &vocab(), &mut StdRng::seed_from_u64(2)).source;
        assert_eq!(out.len(), doc.len() + (doc.len() as f64 * 0.1).ceil() as usize);
        assert_eq!(out.iter().copied().filter(|&t| t != MASK).collect::<Vec<_>>(), doc);
        let out = denoise(&doc, None, None, &only(|c| c.rotate = 1.0), &vocab(), &mut StdRng::seed_from_u64(4)).source;
        assert_eq!((out[0], out[out.len() - 1], out.len()), (0, 2, doc.len()));
        let inner = &doc[1..doc.len() - 1];
        let start = inner.iter().position(|&t| t == out[1]).unwrap();
        assert_eq!([&inner[start..], &inner[..start]].concat(), out[1..out.len() - 1].to_vec());
    }

    #[test]
    fn kept_marks_exactly_the_target_tokens_the_source_still_shows() {
        let doc = document();
        let config = DenoisingConfig { insert: 0.1, rotate: 0.5, mask_random: 0.0, ..DenoisingConfig::default() };
        for seed in 0..30 {
            let out = denoise(&doc, None, None, &config, &vocab(), &mut StdRng::seed_from_u64(seed));
            assert_eq!(out.kept.len(), doc.len());
            // Tokens are distinct but for the full stops: each kept one is in the source, each
            // dropped one is not.
            for (i, &t) in doc.iter().enumerate().filter(|(_, &t)| t != STOP) {
                assert_eq!(out.kept[i], out.source.contains(&t), "seed {seed}, token {t}");
            }
            assert!(out.kept.iter().any(|k| !k), "seed {seed}: 30% masked");
        }
    }

    #[test]
    fn blocks_hold_whole_sentences_of_one_document_and_permute_by_sentence_ends() {
        let segment = |ids: Vec<u32>| Segment { word_start: ids.iter().map(|&t| t % 2 == 0).collect(), ids };
        let documents = vec![
            vec![segment(vec![10, 11, 12]), segment(vec![20, 21]), segment(vec![30, 31, 32, 33])],
            vec![segment((40..52).collect())],
        ];
        let blocks = sentence_blocks(&documents, 8, 0, 2);
        let ids: Vec<Vec<u32>> = blocks.iter().map(|b| b.ids.clone()).collect();
        assert_eq!(ids, vec![
            vec![0, 10, 11, 12, 20, 21, 2],
            vec![0, 30, 31, 32, 33, 2],
            vec![0, 40, 41, 42, 43, 44, 45, 2],
            vec![0, 46, 47, 48, 49, 50, 51, 2],
        ]);
        assert_eq!(blocks[0].sentence_end, vec![false, false, false, true, false, true, false]);
        assert_eq!(blocks[0].word_start, vec![false, true, false, true, true, false, false], "a sentence's first token starts a word");
        // Without any full stop token, sentences still move as wholes.
        let permute = only(|c| c.permute_sentences = 1.0);
        let outs: Vec<Vec<u32>> = (0..8).map(|seed| blocks[0].denoise(&permute, &vocab(), &mut StdRng::seed_from_u64(seed)).source).collect();
        assert!(outs.iter().all(|o| *o == blocks[0].ids || *o == vec![0, 20, 21, 10, 11, 12, 2]), "{outs:?}");
        assert!(outs.contains(&vec![0, 20, 21, 10, 11, 12, 2]));
    }

    #[test]
    fn fairseqs_refusals() {
        assert!(only(|c| c.replace_length = 2).validate().is_err());
        assert!(only(|c| {
            c.mask_length = MaskLength::Subword;
            c.replace_length = -1;
        })
        .validate()
        .is_err());
        assert!(DenoisingConfig::default().validate().is_ok());
    }
}
