//! transformers' logits processors and warpers, one row at a time.
//!
//! A processor sees one row: its tokens so far (`input_ids` of that row as transformers passes
//! them: the prompt and the generated tokens for a decoder-only model, the decoder's tokens from
//! the start token for an encoder-decoder) and the scores `[vocab]` of its next token, which it
//! changes in place. A banned token's score becomes `-inf`.

use std::collections::HashSet;

/// Why a processor cannot be built (transformers raises `ValueError` for the same settings).
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ProcessorError {
    /// A setting outside its range, named by transformers' argument name.
    #[error("`{name}` must be {expected}, got {value}")]
    OutOfRange {
        /// The argument (`temperature`, `top_p`, …).
        name: &'static str,
        /// What it must be.
        expected: &'static str,
        /// The value given.
        value: String,
    },
}

pub(crate) fn out_of_range(name: &'static str, expected: &'static str, value: impl ToString) -> ProcessorError {
    ProcessorError::OutOfRange { name, expected, value: value.to_string() }
}

/// One row as a processor sees it.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// The row's tokens so far (`input_ids[row]`).
    pub tokens: &'a [u32],
    /// How many of them came with the input (the prompt, or the decoder's start token), not
    /// generated.
    pub prompt_len: usize,
}

/// A rule applied to a row's next-token scores before the search picks from them.
pub trait LogitsProcessor: Send + Sync {
    /// Change `scores` `[vocab]` of the next token of `row` in place.
    fn process(&self, row: Row<'_>, scores: &mut [f32]);
}

fn ban(scores: &mut [f32], token: u32) {
    if let Some(s) = scores.get_mut(token as usize) {
        *s = f32::NEG_INFINITY;
    }
}

/// `MinLengthLogitsProcessor`: no end-of-sequence token while the row (prompt included) is
/// shorter than `min_length`.
#[derive(Clone, Debug)]
pub struct MinLength {
    /// The least length of a finished row, prompt included.
    pub min_length: usize,
    /// The end-of-sequence ids.
    pub eos_token_ids: Vec<u32>,
}

impl LogitsProcessor for MinLength {
    fn process(&self, row: Row<'_>, scores: &mut [f32]) {
        if row.tokens.len() < self.min_length {
            self.eos_token_ids.iter().for_each(|&eos| ban(scores, eos));
        }
    }
}

/// `MinNewTokensLengthLogitsProcessor`: no end-of-sequence token before `min_new_tokens`
/// tokens were generated.
#[derive(Clone, Debug)]
pub struct MinNewTokens {
    /// The least number of generated tokens.
    pub min_new_tokens: usize,
    /// The end-of-sequence ids.
    pub eos_token_ids: Vec<u32>,
}

impl LogitsProcessor for MinNewTokens {
    fn process(&self, row: Row<'_>, scores: &mut [f32]) {
        if row.tokens.len().saturating_sub(row.prompt_len) < self.min_new_tokens {
            self.eos_token_ids.iter().for_each(|&eos| ban(scores, eos));
        }
    }
}

/// `RepetitionPenaltyLogitsProcessor` (CTRL's penalty): every token already in the row has its
/// score divided by `penalty` when positive and multiplied by it when negative, once however
/// often it occurs.
#[derive(Clone, Debug)]
pub struct RepetitionPenalty {
    penalty: f32,
}

impl RepetitionPenalty {
    /// The penalty, > 0 (1 changes nothing; above 1 discourages repetition).
    pub fn new(penalty: f32) -> Result<Self, ProcessorError> {
        if !(penalty > 0.0 && penalty.is_finite()) {
            return Err(out_of_range("repetition_penalty", "a finite number > 0", penalty));
        }
        Ok(Self { penalty })
    }
}

impl LogitsProcessor for RepetitionPenalty {
    fn process(&self, row: Row<'_>, scores: &mut [f32]) {
        let seen: HashSet<u32> = row.tokens.iter().copied().collect();
        for token in seen {
            if let Some(s) = scores.get_mut(token as usize) {
                *s = if *s < 0.0 { *s * self.penalty } else { *s / self.penalty };
            }
        }
    }
}

/// `NoRepeatNGramLogitsProcessor`: no n-gram occurs twice in a row's tokens (prompt included):
/// every token that would complete an n-gram already present is banned.
#[derive(Clone, Debug)]
pub struct NoRepeatNgram {
    n: usize,
}

impl NoRepeatNgram {
    /// Block repeated n-grams of `n` tokens, n ≥ 1.
    pub fn new(n: usize) -> Result<Self, ProcessorError> {
        if n == 0 {
            return Err(out_of_range("no_repeat_ngram_size", "a positive integer", n));
        }
        Ok(Self { n })
    }
}

impl LogitsProcessor for NoRepeatNgram {
    fn process(&self, row: Row<'_>, scores: &mut [f32]) {
        let (tokens, n) = (row.tokens, self.n);
        if tokens.len() < n {
            return;
        }
        // The next token completes the n-gram that starts with the last n - 1 tokens: ban the
        // last token of every complete n-gram that starts the same way.
        let prefix = &tokens[tokens.len() + 1 - n..];
        for window in tokens.windows(n) {
            if &window[..n - 1] == prefix {
                ban(scores, window[n - 1]);
            }
        }
    }
}

/// `ForcedBOSTokenLogitsProcessor`: the first generated token of a row that holds one token
/// (the decoder start) is `bos_token_id`.
#[derive(Clone, Debug)]
pub struct ForcedBos {
    /// The forced token.
    pub bos_token_id: u32,
}

impl LogitsProcessor for ForcedBos {
    fn process(&self, row: Row<'_>, scores: &mut [f32]) {
        if row.tokens.len() == 1 {
            force(scores, &[self.bos_token_id]);
        }
    }
}

/// `ForcedEOSTokenLogitsProcessor`: the last token of a row that reaches `max_length` is an
/// end-of-sequence token.
#[derive(Clone, Debug)]
pub struct ForcedEos {
    /// The length at which rows stop, prompt included.
    pub max_length: usize,
    /// The end-of-sequence ids (each scored 0, every other token `-inf`).
    pub eos_token_ids: Vec<u32>,
}

impl LogitsProcessor for ForcedEos {
    fn process(&self, row: Row<'_>, scores: &mut [f32]) {
        if row.tokens.len() + 1 == self.max_length {
            force(scores, &self.eos_token_ids);
        }
    }
}

/// Every score `-inf` but those of `tokens`, which become 0.
fn force(scores: &mut [f32], tokens: &[u32]) {
    scores.fill(f32::NEG_INFINITY);
    for &t in tokens {
        if let Some(s) = scores.get_mut(t as usize) {
            *s = 0.0;
        }
    }
}

/// `NoBadWordsLogitsProcessor`: sequences that must never be generated. A one-token sequence
/// is always banned; a longer one bans its last token when the row ends with the others.
/// Sequences that are just an end-of-sequence token are dropped, as transformers drops them.
#[derive(Clone, Debug)]
pub struct BadWords {
    sequences: Vec<Vec<u32>>,
}

impl BadWords {
    /// Ban `sequences` (none empty), except the single end-of-sequence tokens among them.
    pub fn new(sequences: Vec<Vec<u32>>, eos_token_ids: &[u32]) -> Result<Self, ProcessorError> {
        if sequences.iter().any(Vec::is_empty) {
            return Err(out_of_range("bad_words_ids", "a list of non-empty token lists", "an empty list"));
        }
        let sequences = sequences.into_iter().filter(|s| !(s.len() == 1 && eos_token_ids.contains(&s[0]))).collect();
        Ok(Self { sequences })
    }
}

impl LogitsProcessor for BadWords {
    fn process(&self, row: Row<'_>, scores: &mut [f32]) {
        for sequence in &self.sequences {
            let (last, prefix) = sequence.split_last().expect("sequences are not empty");
            if row.tokens.ends_with(prefix) {
                ban(scores, *last);
            }
        }
    }
}

/// `TemperatureLogitsWarper`: scores divided by `temperature`.
#[derive(Clone, Debug)]
pub struct Temperature {
    temperature: f32,
}

impl Temperature {
    /// A temperature > 0.
    pub fn new(temperature: f32) -> Result<Self, ProcessorError> {
        if !(temperature > 0.0 && temperature.is_finite()) {
            return Err(out_of_range("temperature", "a finite number > 0", temperature));
        }
        Ok(Self { temperature })
    }
}

impl LogitsProcessor for Temperature {
    fn process(&self, _row: Row<'_>, scores: &mut [f32]) {
        scores.iter_mut().for_each(|s| *s /= self.temperature);
    }
}

/// `TopKLogitsWarper`: every token scored below the k-th highest score is removed (`-inf`);
/// ties with it are kept.
#[derive(Clone, Debug)]
pub struct TopK {
    k: usize,
}

impl TopK {
    /// Keep the `top_k` (≥ 1) best tokens, and at least `min_tokens_to_keep`.
    pub fn new(top_k: usize, min_tokens_to_keep: usize) -> Result<Self, ProcessorError> {
        if top_k == 0 {
            return Err(out_of_range("top_k", "a positive integer", top_k));
        }
        Ok(Self { k: top_k.max(min_tokens_to_keep) })
    }
}

impl LogitsProcessor for TopK {
    fn process(&self, _row: Row<'_>, scores: &mut [f32]) {
        let k = self.k.min(scores.len());
        if k == 0 {
            return;
        }
        let mut sorted = scores.to_vec();
        sorted.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        let kth = sorted[k - 1];
        scores.iter_mut().filter(|s| **s < kth).for_each(|s| *s = f32::NEG_INFINITY);
    }
}

/// `TopPLogitsWarper` (nucleus sampling): the fewest best tokens whose probabilities sum to
/// more than `top_p` are kept, and at least `min_tokens_to_keep`; the rest are removed.
#[derive(Clone, Debug)]
pub struct TopP {
    p: f32,
    min_tokens_to_keep: usize,
}

impl TopP {
    /// Keep a probability mass of `top_p` in [0, 1], and at least `min_tokens_to_keep` (≥ 1).
    pub fn new(top_p: f32, min_tokens_to_keep: usize) -> Result<Self, ProcessorError> {
        if !(0.0..=1.0).contains(&top_p) {
            return Err(out_of_range("top_p", "a number in [0, 1]", top_p));
        }
        if min_tokens_to_keep == 0 {
            return Err(out_of_range("min_tokens_to_keep", "a positive integer", min_tokens_to_keep));
        }
        Ok(Self { p: top_p, min_tokens_to_keep })
    }
}

impl LogitsProcessor for TopP {
    fn process(&self, _row: Row<'_>, scores: &mut [f32]) {
        // As transformers: ascending order, cumulative softmax, remove while the mass so far is
        // at most 1 - top_p, never the last `min_tokens_to_keep`. Ties keep their index order
        // (a stable sort), as torch's sort does on the CPU.
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            return;
        }
        let exp: Vec<f64> = order.iter().map(|&i| f64::from(scores[i] - max).exp()).collect();
        let total: f64 = exp.iter().sum();
        let keep_from = scores.len().saturating_sub(self.min_tokens_to_keep);
        let threshold = 1.0 - f64::from(self.p);
        let mut mass = 0.0;
        for (rank, (&i, e)) in order.iter().zip(&exp).enumerate() {
            mass += e / total;
            if rank >= keep_from || mass > threshold {
                break;
            }
            scores[i] = f32::NEG_INFINITY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p: &dyn LogitsProcessor, tokens: &[u32], scores: &[f32]) -> Vec<f32> {
        let mut s = scores.to_vec();
        p.process(Row { tokens, prompt_len: 1 }, &mut s);
        s
    }

    #[test]
    fn settings_outside_their_range_are_errors() {
        assert!(Temperature::new(0.0).is_err());
        assert!(TopK::new(0, 1).is_err());
        assert!(TopP::new(1.5, 1).is_err());
        assert!(RepetitionPenalty::new(-1.0).is_err());
        assert!(NoRepeatNgram::new(0).is_err());
        assert!(BadWords::new(vec![vec![]], &[]).is_err());
    }

    #[test]
    fn ngrams_are_blocked_only_once_complete() {
        let inf = f32::NEG_INFINITY;
        // 1 2 3 1 2: the bigram "2 3" exists, so after "2" the token 3 is banned.
        assert_eq!(run(&NoRepeatNgram::new(2).unwrap(), &[1, 2, 3, 1, 2], &[0.0; 5]), [0.0, 0.0, 0.0, inf, 0.0]);
        // Shorter than n: nothing to ban.
        assert_eq!(run(&NoRepeatNgram::new(3).unwrap(), &[1, 1], &[0.0; 3]), [0.0; 3]);
    }

    #[test]
    fn top_p_keeps_the_smallest_set_over_the_mass() {
        let inf = f32::NEG_INFINITY;
        let scores = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        assert_eq!(run(&TopP::new(0.6, 1).unwrap(), &[0], &scores)[2], inf);
        assert!(run(&TopP::new(0.6, 1).unwrap(), &[0], &scores)[1].is_finite());
        assert!(run(&TopP::new(0.0, 2).unwrap(), &[0], &scores)[1].is_finite());
    }
}
