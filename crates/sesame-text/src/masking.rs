//! Masked-LM corruption strategies, applied per batch (dynamic masking): token-level BERT
//! masking, whole-word masking and SpanBERT span masking. Each chooses *which* positions to
//! predict; all share BERT's 80/10/10 replacement of the chosen positions.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

/// Label of a position that is not predicted (HF convention).
pub const NOT_PREDICTED: i64 = -100;

/// What a strategy needs to know about the vocabulary.
#[derive(Clone, Debug)]
pub struct MaskVocab {
    /// Id of the mask token.
    pub mask_id: u32,
    /// Vocabulary size (random replacements are drawn from `0..vocab_size`, specials excluded).
    pub vocab_size: u32,
    /// Ids never used as random replacements (`[PAD]`, `[CLS]`, ...).
    pub special_ids: Vec<u32>,
}

/// One sequence to corrupt.
#[derive(Clone, Copy, Debug)]
pub struct MaskingInput<'a> {
    /// Token ids.
    pub ids: &'a [u32],
    /// `true` where a token may be chosen (not special, not padding).
    pub maskable: &'a [bool],
    /// `true` where a token starts a word (from the tokenizer's word ids).
    pub word_start: &'a [bool],
}

/// A corrupted sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct Masked {
    /// Ids after replacement.
    pub input_ids: Vec<u32>,
    /// Original id at predicted positions, [`NOT_PREDICTED`] elsewhere.
    pub labels: Vec<i64>,
}

/// How positions are chosen and replaced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MaskingConfig {
    /// Fraction of maskable tokens to predict (BERT: 0.15).
    pub probability: f64,
    /// Of the chosen positions: fraction replaced by the mask token (0.8) ...
    pub mask_fraction: f64,
    /// ... and fraction replaced by a random token (0.1); the rest keep their token.
    pub random_fraction: f64,
}

impl Default for MaskingConfig {
    fn default() -> Self {
        Self { probability: 0.15, mask_fraction: 0.8, random_fraction: 0.1 }
    }
}

/// A masking strategy: picks groups of positions to predict. Groups are replaced together
/// (a span or word gets one 80/10/10 decision, as SpanBERT does; single tokens get their own).
pub trait MaskingStrategy: Send + Sync + std::fmt::Debug {
    /// Choose the groups of positions to predict in `input`, covering about `budget` tokens.
    fn choose(&self, input: MaskingInput<'_>, budget: usize, rng: &mut StdRng) -> Vec<Vec<usize>>;

    /// The replacement fractions.
    fn config(&self) -> MaskingConfig;

    /// The strategy that masks training batch `batch` of a run, when it is not this one: a
    /// strategy that changes over the run ([`crate::knowledge::ErnieMasking`]'s stages)
    /// returns the stage of the batch.
    fn stage(&self, _batch: u64) -> Option<&dyn MaskingStrategy> {
        None
    }

    /// Corrupt one sequence.
    fn mask(&self, input: MaskingInput<'_>, vocab: &MaskVocab, rng: &mut StdRng) -> Masked {
        let config = self.config();
        let candidates = input.maskable.iter().filter(|&&m| m).count();
        // BERT: max(1, round(n * p)) positions, none when p is 0.
        let budget = if candidates == 0 || config.probability <= 0.0 {
            0
        } else {
            ((candidates as f64 * config.probability).round() as usize).max(1)
        };
        let mut input_ids = input.ids.to_vec();
        let mut labels = vec![NOT_PREDICTED; input.ids.len()];
        for group in self.choose(input, budget, rng) {
            let roll: f64 = rng.random();
            for &i in &group {
                labels[i] = input.ids[i] as i64;
                if roll < config.mask_fraction {
                    input_ids[i] = vocab.mask_id;
                } else if roll < config.mask_fraction + config.random_fraction {
                    input_ids[i] = random_token(vocab, rng);
                }
            }
        }
        Masked { input_ids, labels }
    }
}

fn random_token(vocab: &MaskVocab, rng: &mut StdRng) -> u32 {
    loop {
        let id = rng.random_range(0..vocab.vocab_size);
        if !vocab.special_ids.contains(&id) {
            return id;
        }
    }
}

/// `0..n` in a random order.
fn shuffled(n: usize, rng: &mut StdRng) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(rng);
    order
}

/// Words as runs of maskable positions, each starting at a word start.
pub(crate) fn words(input: MaskingInput<'_>) -> Vec<Vec<usize>> {
    let mut words: Vec<Vec<usize>> = Vec::new();
    for i in 0..input.ids.len() {
        if !input.maskable[i] {
            continue;
        }
        let continues = !input.word_start[i] && i > 0 && input.maskable[i - 1] && !words.is_empty();
        match words.last_mut() {
            Some(w) if continues && *w.last().unwrap() == i - 1 => w.push(i),
            _ => words.push(vec![i]),
        }
    }
    words
}

/// BERT's original masking: tokens chosen independently, each with its own 80/10/10 roll.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TokenMasking {
    /// Fractions.
    pub config: MaskingConfig,
}

impl MaskingStrategy for TokenMasking {
    fn choose(&self, input: MaskingInput<'_>, budget: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
        let candidates: Vec<usize> = (0..input.ids.len()).filter(|&i| input.maskable[i]).collect();
        shuffled(candidates.len(), rng).into_iter().take(budget).map(|k| vec![candidates[k]]).collect()
    }

    fn config(&self) -> MaskingConfig {
        self.config
    }
}

/// Whole-word masking: every piece of a chosen word is predicted; each piece keeps its own
/// 80/10/10 roll, as in Google's release.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WholeWordMasking {
    /// Fractions.
    pub config: MaskingConfig,
}

impl MaskingStrategy for WholeWordMasking {
    fn choose(&self, input: MaskingInput<'_>, budget: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
        let words = words(input);
        let mut chosen = Vec::new();
        let mut covered = 0;
        for w in shuffled(words.len(), rng) {
            if covered >= budget {
                break;
            }
            if covered + words[w].len() > budget {
                continue;
            }
            covered += words[w].len();
            chosen.extend(words[w].iter().map(|&i| vec![i]));
        }
        chosen
    }

    fn config(&self) -> MaskingConfig {
        self.config
    }
}

/// SpanBERT span masking: span lengths in words drawn from Geometric(p) clipped at
/// `max_span`, spans start at word starts, one 80/10/10 decision per span.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpanMasking {
    /// Fractions.
    pub config: MaskingConfig,
    /// Geometric parameter (SpanBERT: 0.2, mean span ≈ 3.8 words).
    pub p: f64,
    /// Longest span in words (SpanBERT: 10).
    pub max_span: usize,
}

impl Default for SpanMasking {
    fn default() -> Self {
        Self { config: MaskingConfig::default(), p: 0.2, max_span: 10 }
    }
}

impl SpanMasking {
    /// Draw a span length in `1..=max_span` from the clipped geometric distribution.
    pub fn span_length(&self, rng: &mut StdRng) -> usize {
        let mut n = 1;
        while n < self.max_span && rng.random::<f64>() >= self.p {
            n += 1;
        }
        n
    }
}

impl MaskingStrategy for SpanMasking {
    fn choose(&self, input: MaskingInput<'_>, budget: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
        choose_spans(input, budget, rng, |rng| self.span_length(rng))
    }

    fn config(&self) -> MaskingConfig {
        self.config
    }
}

/// ALBERT's n-gram masking: spans of `n` whole words with `p(n) ∝ 1/n` for `n` in
/// `1..=max_n` (the paper uses 3), one 80/10/10 decision per span.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NgramMasking {
    /// Fractions.
    pub config: MaskingConfig,
    /// Longest n-gram (ALBERT: 3).
    pub max_n: usize,
}

impl Default for NgramMasking {
    fn default() -> Self {
        Self { config: MaskingConfig::default(), max_n: 3 }
    }
}

impl NgramMasking {
    /// Draw `n` in `1..=max_n` with probability `(1/n) / sum_k (1/k)`.
    pub fn ngram_length(&self, rng: &mut StdRng) -> usize {
        let max_n = self.max_n.max(1);
        let total: f64 = (1..=max_n).map(|k| 1.0 / k as f64).sum();
        let mut u = rng.random::<f64>() * total;
        for n in 1..max_n {
            u -= 1.0 / n as f64;
            if u < 0.0 {
                return n;
            }
        }
        max_n
    }
}

impl MaskingStrategy for NgramMasking {
    fn choose(&self, input: MaskingInput<'_>, budget: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
        choose_spans(input, budget, rng, |rng| self.ngram_length(rng))
    }

    fn config(&self) -> MaskingConfig {
        self.config
    }
}

/// Non-overlapping spans of whole words, of lengths drawn by `span_length`, starting at random
/// words, until `budget` tokens are covered (a span that would overshoot is skipped unless it
/// is the first): the choice of every span strategy, for a [`MaskingStrategy::choose`].
pub fn choose_spans(
    input: MaskingInput<'_>,
    budget: usize,
    rng: &mut StdRng,
    mut span_length: impl FnMut(&mut StdRng) -> usize,
) -> Vec<Vec<usize>> {
    let words = words(input);
    let mut used = vec![false; words.len()];
    let mut spans = Vec::new();
    let mut covered = 0;
    let mut attempts = 0;
    while covered < budget && attempts < 10 * words.len().max(1) {
        attempts += 1;
        let len = span_length(rng).min(words.len());
        if len == 0 {
            break;
        }
        let start = rng.random_range(0..=words.len() - len);
        if used[start..start + len].iter().any(|&u| u) {
            continue;
        }
        let span: Vec<usize> = words[start..start + len].iter().flatten().copied().collect();
        if covered + span.len() > budget && covered > 0 {
            continue;
        }
        used[start..start + len].iter_mut().for_each(|u| *u = true);
        covered += span.len();
        spans.push(span);
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const MASK: u32 = 4;

    fn vocab() -> MaskVocab {
        MaskVocab { mask_id: MASK, vocab_size: 1000, special_ids: vec![0, 1, 2, 3, 4] }
    }

    /// `[CLS]` + words of 1-3 pieces (ids >= 10) + `[SEP]`.
    fn sequence(n_words: usize, rng: &mut StdRng) -> (Vec<u32>, Vec<bool>, Vec<bool>) {
        let (mut ids, mut maskable, mut start) = (vec![2], vec![false], vec![true]);
        for _ in 0..n_words {
            for piece in 0..rng.random_range(1..=3) {
                ids.push(rng.random_range(10..1000));
                maskable.push(true);
                start.push(piece == 0);
            }
        }
        ids.push(3);
        maskable.push(false);
        start.push(true);
        (ids, maskable, start)
    }

    fn run(strategy: &dyn MaskingStrategy, seqs: usize) -> (usize, usize, [usize; 3], Vec<(Vec<u32>, Vec<bool>, Vec<bool>, Masked)>) {
        let mut rng = StdRng::seed_from_u64(7);
        let (mut predicted, mut maskable_total, mut kinds) = (0, 0, [0usize; 3]);
        let mut all = Vec::new();
        for _ in 0..seqs {
            let (ids, maskable, start) = sequence(60, &mut rng);
            let input = MaskingInput { ids: &ids, maskable: &maskable, word_start: &start };
            let m = strategy.mask(input, &vocab(), &mut rng);
            for i in 0..ids.len() {
                if m.labels[i] != NOT_PREDICTED {
                    assert!(maskable[i], "a special token was chosen");
                    assert_eq!(m.labels[i], ids[i] as i64);
                    predicted += 1;
                    kinds[if m.input_ids[i] == MASK { 0 } else if m.input_ids[i] != ids[i] { 1 } else { 2 }] += 1;
                } else {
                    assert_eq!(m.input_ids[i], ids[i], "an unchosen token changed");
                }
            }
            maskable_total += maskable.iter().filter(|&&x| x).count();
            all.push((ids, maskable, start, m));
        }
        (predicted, maskable_total, kinds, all)
    }

    #[test]
    fn token_masking_predicts_15_percent_with_80_10_10() {
        let (predicted, total, kinds, _) = run(&TokenMasking::default(), 400);
        let rate = predicted as f64 / total as f64;
        assert!((rate - 0.15).abs() < 0.005, "rate {rate}");
        let f = |k: usize| kinds[k] as f64 / predicted as f64;
        assert!((f(0) - 0.8).abs() < 0.02 && (f(1) - 0.1).abs() < 0.015 && (f(2) - 0.1).abs() < 0.015, "{kinds:?}");
    }

    #[test]
    fn whole_word_masking_takes_every_piece_of_a_word() {
        assert_whole_words_at_15_percent(&WholeWordMasking::default(), 0.01);
    }

    #[test]
    fn span_lengths_follow_the_clipped_geometric_distribution() {
        let s = SpanMasking::default();
        let mut rng = StdRng::seed_from_u64(1);
        let lens: Vec<usize> = (0..20000).map(|_| s.span_length(&mut rng)).collect();
        assert!(lens.iter().all(|&l| (1..=10).contains(&l)));
        let mean = lens.iter().sum::<usize>() as f64 / lens.len() as f64;
        // E[min(Geom(0.2), 10)] = (1 - 0.8^10) / 0.2 = 4.46
        assert!((mean - 4.46).abs() < 0.1, "mean span {mean}");
        let p1 = lens.iter().filter(|&&l| l == 1).count() as f64 / lens.len() as f64;
        assert!((p1 - 0.2).abs() < 0.015, "P(len = 1) = {p1}");
    }

    /// `strategy` predicts 15% of tokens (within `tolerance`) and never part of a word.
    fn assert_whole_words_at_15_percent(strategy: &dyn MaskingStrategy, tolerance: f64) {
        let (predicted, total, _, all) = run(strategy, 200);
        assert!((predicted as f64 / total as f64 - 0.15).abs() < tolerance, "rate");
        for (ids, maskable, start, m) in all {
            for w in words(MaskingInput { ids: &ids, maskable: &maskable, word_start: &start }) {
                let hit = w.iter().filter(|&&i| m.labels[i] != NOT_PREDICTED).count();
                assert!(hit == 0 || hit == w.len(), "word {w:?} partly masked");
            }
        }
    }

    #[test]
    fn span_masking_masks_contiguous_whole_words_with_one_decision_per_span() {
        assert_whole_words_at_15_percent(&SpanMasking::default(), 0.03);
    }

    #[test]
    fn ngram_lengths_are_proportional_to_one_over_n() {
        let s = NgramMasking::default();
        let mut rng = StdRng::seed_from_u64(2);
        let lens: Vec<usize> = (0..30000).map(|_| s.ngram_length(&mut rng)).collect();
        // p(n) = (1/n) / (1 + 1/2 + 1/3) = 6/11, 3/11, 2/11.
        for (n, p) in [(1, 6.0 / 11.0), (2, 3.0 / 11.0), (3, 2.0 / 11.0)] {
            let freq = lens.iter().filter(|&&l| l == n).count() as f64 / lens.len() as f64;
            assert!((freq - p).abs() < 0.01, "P(n = {n}) = {freq}, expected {p}");
        }
        assert!(lens.iter().all(|&l| (1..=3).contains(&l)));
    }

    #[test]
    fn ngram_masking_masks_whole_words_at_the_rate() {
        assert_whole_words_at_15_percent(&NgramMasking::default(), 0.03);
    }

    #[test]
    fn the_same_seed_gives_the_same_masks() {
        let a = run(&SpanMasking::default(), 5).3;
        let b = run(&SpanMasking::default(), 5).3;
        assert_eq!(a.iter().map(|x| &x.3).collect::<Vec<_>>(), b.iter().map(|x| &x.3).collect::<Vec<_>>());
    }
}
