//! UniLM's sequence-to-sequence decoding (microsoft/unilm v1 `BertForSeq2SeqDecoder`), as a
//! `sesame_generate` decoder: any search (greedy, beam, sampling) runs on it.
//!
//! The source `[CLS] S [SEP]` (token type 4) sees itself bidirectionally; the target (type 5)
//! is written left to right. Each step appends a `[MASK]` after the target so far and takes its
//! cloze prediction as the next token; the mask sees the source, the target and itself, as in
//! pre-training. microsoft/unilm's decoder keeps every layer's hidden states and re-projects
//! them at every step; here the keys and values of the source and of each target token are
//! cached once (a target token's do not depend on anything after it), and the placeholder's are
//! dropped after each step. Positions are microsoft/unilm's: a row's target continues right
//! after its own source, whatever the padding of the batch.

use burn::prelude::*;
use sesame_generate::Decoder;
use sesame_layers::attention::row_index;
use sesame_generate::decoding::last_logits;
use sesame_layers::{PretrainedModel, EncoderCache, EncoderInput, InputError, InputLimits, OutputOptions};
use sesame_layers::HfConfig as _;

use crate::config::{token_types, UnilmConfig};
use crate::heads::UnilmForMaskedLM;
use crate::model::UnilmMask;

/// Decodes targets for source rows with a [`UnilmForMaskedLM`] under the seq-to-seq mask.
/// Sources of different lengths are padded after their `[SEP]`; targets start after the
/// longest source (`width`), each row's padding masked.
pub struct UnilmSeq2SeqDecoder<'a> {
    model: &'a UnilmForMaskedLM,
    limits: InputLimits,
    sources: Vec<Vec<u32>>,
    width: usize,
    mask_token_id: u32,
    pad_token_id: u32,
    use_cache: bool,
}

impl<'a> UnilmSeq2SeqDecoder<'a> {
    /// Decode after `sources` (`[CLS] S [SEP]` ids, one per row) with the cloze head's
    /// `mask_token_id` as the placeholder of the next token.
    pub fn new(model: &'a UnilmForMaskedLM, config: &UnilmConfig, sources: Vec<Vec<u32>>, mask_token_id: u32) -> Result<Self, InputError> {
        let limits = config.input_limits();
        if sources.is_empty() {
            return Err(InputError::EmptyBatch);
        }
        if sources.iter().any(Vec::is_empty) {
            return Err(InputError::EmptySequence { batch: sources.len() });
        }
        let width = sources.iter().map(Vec::len).max().unwrap_or(0);
        if width >= limits.max_len {
            return Err(InputError::TooLong { len: width + 1, max: limits.max_len });
        }
        if let Some(&id) = sources.iter().flatten().chain([&mask_token_id]).find(|&&t| t as usize >= limits.vocab_size) {
            return Err(InputError::IdOutOfRange { what: "token", id: i64::from(id), limit: limits.vocab_size });
        }
        let pad_token_id = config.pad_token_id.unwrap_or(0) as u32;
        Ok(Self { model, limits, sources, width, mask_token_id, pad_token_id, use_cache: true })
    }

    /// Use the key/value cache (default) or run the whole sequence at every step.
    pub fn with_cache(mut self, use_cache: bool) -> Self {
        self.use_cache = use_cache;
        self
    }

    /// Run `new` tokens per row (positions `past..past + n`, the last a `[MASK]`) of rows whose
    /// sources are `rows`; the `[MASK]`'s logits `[rows][vocab]`, and the cache without the
    /// `[MASK]`'s keys and values.
    fn run(&self, rows: &[usize], new: &[Vec<u32>], cache: Option<EncoderCache>) -> Result<(Vec<Vec<f32>>, Option<EncoderCache>), InputError> {
        let device = self.model.base.device();
        let (b, n) = (new.len(), new[0].len());
        let past = cache.as_ref().map_or(0, EncoderCache::len);
        if past + n > self.limits.max_len {
            return Err(InputError::TooLong { len: past + n, max: self.limits.max_len });
        }
        let int = |values: Vec<i64>, cols: usize| Tensor::<2, Int>::from_data(TensorData::new(values, [b, cols]), &device);
        let ids = int(new.iter().flatten().map(|&t| i64::from(t)).collect(), n);
        let types = (past..past + n).map(|j| if j < self.width { token_types::SEQ_TO_SEQ[0] } else { token_types::SEQ_TO_SEQ[1] });
        let types: Vec<i64> = (0..b).flat_map(|_| types.clone()).collect();
        let keys = |row: usize| (0..past + n).map(move |j| i64::from(j >= self.width || j < self.sources[row].len()));
        let mask = int(rows.iter().flat_map(|&r| keys(r)).collect(), past + n);
        let positions: Vec<i64> = rows.iter().flat_map(|&r| (past..past + n).map(move |j| self.position(r, j))).collect();
        let mut input = EncoderInput::new(ids).with_token_type_ids(int(types, n)).with_attention_mask(mask).with_position_ids(int(positions, n));
        if let Some(cache) = cache {
            input = input.with_cache(cache);
        }
        let input = UnilmMask::SeqToSeq { source_len: vec![self.width; b] }.apply(input);
        let out = self.model.forward(input, None, OutputOptions::default());
        let cache = out.encoder.cache.map(|c| c.truncate(past + n - 1));
        Ok((last_logits(out.logits)?, cache))
    }

    /// The position id of index `j` of source row `row`'s sequence, as microsoft/unilm's
    /// decoder numbers them: the source from 0, its padding 0, the target right after the
    /// source's own end, so that a row decodes alike whatever the batch pads it to.
    pub fn position(&self, row: usize, j: usize) -> i64 {
        let len = self.sources[row].len();
        match j {
            j if j < len => j as i64,
            j if j < self.width => 0,
            j => (j - self.width + len) as i64,
        }
    }

    /// Every row's whole sequence: padded source, target, `[MASK]`.
    fn whole(&self, rows: &[usize], targets: &[Vec<u32>]) -> Vec<Vec<u32>> {
        rows.iter()
            .zip(targets)
            .map(|(&r, t)| {
                let source = &self.sources[r];
                let padding = std::iter::repeat_n(self.pad_token_id, self.width - source.len());
                source.iter().copied().chain(padding).chain(t.iter().copied()).chain([self.mask_token_id]).collect()
            })
            .collect()
    }
}

/// Where a [`UnilmSeq2SeqDecoder`] is: each row's source and target so far, and the cache of
/// the source and the target.
pub struct UnilmSeq2SeqState {
    rows: Vec<usize>,
    targets: Vec<Vec<u32>>,
    cache: Option<EncoderCache>,
}

impl Decoder for UnilmSeq2SeqDecoder<'_> {
    type State = UnilmSeq2SeqState;
    type Error = InputError;

    /// `prompts`: each source row's target prefix (empty to decode from the start).
    fn start(&self, prompts: &[Vec<u32>]) -> Result<(UnilmSeq2SeqState, Vec<Vec<f32>>), InputError> {
        if prompts.len() != self.sources.len() {
            return Err(InputError::ShapeMismatch { what: "target prompts", expected: vec![self.sources.len()], found: vec![prompts.len()] });
        }
        let rows: Vec<usize> = (0..prompts.len()).collect();
        let whole = self.whole(&rows, prompts);
        let (logits, cache) = self.run(&rows, &whole, self.use_cache.then(EncoderCache::default))?;
        Ok((UnilmSeq2SeqState { rows, targets: prompts.to_vec(), cache }, logits))
    }

    fn step(&self, state: &mut UnilmSeq2SeqState, tokens: &[u32]) -> Result<Vec<Vec<f32>>, InputError> {
        for (target, &t) in state.targets.iter_mut().zip(tokens) {
            target.push(t);
        }
        let (logits, cache) = match state.cache.take() {
            Some(cache) => self.run(&state.rows, &tokens.iter().map(|&t| vec![t, self.mask_token_id]).collect::<Vec<_>>(), Some(cache))?,
            None => self.run(&state.rows, &self.whole(&state.rows, &state.targets), None)?,
        };
        state.cache = cache;
        Ok(logits)
    }

    fn reorder(&self, state: &mut UnilmSeq2SeqState, rows: &[usize]) {
        state.targets = rows.iter().map(|&r| state.targets[r].clone()).collect();
        state.rows = rows.iter().map(|&r| state.rows[r]).collect();
        if let Some(cache) = &state.cache {
            state.cache = Some(cache.select_rows(&row_index(rows, &self.model.base.device())));
        }
    }
}
