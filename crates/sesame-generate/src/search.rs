//! The searches, written against [`Decoder`] alone: greedy search for now.

use crate::processors::{LogitsProcessor, Row};

/// What a model that generates provides to a search: run the prompts once, then one token
/// per row at a time, each time giving every row's next-token scores (logits `[vocab]`, on
/// the host).
pub trait Decoder {
    /// What the model keeps between steps (its key/value cache, its encoder output, …).
    type State;
    /// Why a step failed.
    type Error;

    /// Run `prompts` (one per row, all of one length) and give the state after them and each
    /// row's next-token logits.
    fn start(&self, prompts: &[Vec<u32>]) -> Result<(Self::State, Vec<Vec<f32>>), Self::Error>;

    /// Extend every row of `state` by its token in `tokens` and give each row's next-token
    /// logits.
    fn step(&self, state: &mut Self::State, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Self::Error>;

    /// Keep rows `rows` of `state`, in that order (a row may repeat, or go): beam search
    /// continues the hypotheses it chose.
    fn reorder(&self, state: &mut Self::State, rows: &[usize]);
}

/// What a search returns.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    /// Each row's tokens: its prompt, then what was generated (padding after an end).
    pub sequences: Vec<Vec<u32>>,
    /// The processed scores each step chose from: `[step][row][vocab]` (transformers'
    /// `scores` with `output_scores`).
    pub scores: Vec<Vec<Vec<f32>>>,
}

/// When a search stops and what it writes after a row ends.
#[derive(Clone, Debug)]
pub struct Stopping {
    /// The most tokens to generate per row.
    pub max_new_tokens: usize,
    /// Tokens that end a row (none: rows run to `max_new_tokens`).
    pub eos_token_ids: Vec<u32>,
    /// What a row that ended gets at every later step.
    pub pad_token_id: u32,
}

/// Greedy search as transformers' `generate` runs it: at each step every row's logits go
/// through `processors` in order and the highest score is taken (the first of equal ones); a
/// row that produced an end-of-sequence token gets `pad_token_id` from then on; the search
/// stops when every row has ended or after `max_new_tokens` steps.
pub fn greedy<D: Decoder>(
    model: &D,
    prompts: &[Vec<u32>],
    processors: &[Box<dyn LogitsProcessor>],
    stopping: &Stopping,
) -> Result<Generated, D::Error> {
    let mut sequences = prompts.to_vec();
    let mut finished = vec![false; prompts.len()];
    let mut scores = Vec::new();
    if stopping.max_new_tokens == 0 || prompts.is_empty() {
        return Ok(Generated { sequences, scores });
    }
    let (mut state, mut logits) = model.start(prompts)?;
    let prompt_len = prompts[0].len();
    loop {
        let mut next = Vec::with_capacity(prompts.len());
        for (row, row_logits) in logits.iter_mut().enumerate() {
            for p in processors {
                p.process(Row { tokens: &sequences[row], prompt_len }, row_logits);
            }
            let token = match finished[row] {
                true => stopping.pad_token_id,
                false => argmax(row_logits),
            };
            finished[row] |= stopping.eos_token_ids.contains(&token);
            sequences[row].push(token);
            next.push(token);
        }
        scores.push(logits);
        if finished.iter().all(|&f| f) || scores.len() == stopping.max_new_tokens {
            return Ok(Generated { sequences, scores });
        }
        logits = model.step(&mut state, &next)?;
    }
}

/// The index of the highest score, the first of equal ones (as `torch.argmax`); a NaN counts
/// as the highest, as in torch.
fn argmax(scores: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &s) in scores.iter().enumerate() {
        if s.is_nan() {
            return i as u32;
        }
        if s > scores[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_takes_the_first_of_equal_scores() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    }
}
