//! The task models that generate, as `sesame_generate` searches see them.

use burn::prelude::*;
use sesame_generate::Decoder;

use crate::backbone::{Backbone, EncoderInput, InputLimits};
use crate::encoder::{EncoderCache, OutputOptions};
use crate::pretrained::InputError;
use crate::tasks::ForCausalLM;

/// A [`ForCausalLM`] generating on its device: the prompts run once, then one position per row
/// per step against the key/value cache. Without the cache (`use_cache` false) every step runs
/// every position again, which gives the same tokens (a test checks it) and shows what the
/// cache saves.
pub struct CausalDecoder<'a, B: Backbone> {
    model: &'a ForCausalLM<B>,
    limits: InputLimits,
    use_cache: bool,
}

impl<'a, B: Backbone> CausalDecoder<'a, B> {
    /// Decode with `model` of configuration `config`, with its cache.
    pub fn new(model: &'a ForCausalLM<B>, config: &B::Config) -> Self {
        Self { model, limits: B::input_limits(config), use_cache: true }
    }

    /// Use the cache (default) or run every position at every step.
    pub fn with_cache(mut self, use_cache: bool) -> Self {
        self.use_cache = use_cache;
        self
    }

    /// Run `rows` `[batch][seq]` after `cache`; each row's last logits `[vocab]`, and the
    /// extended cache.
    fn run(&self, rows: &[Vec<u32>], cache: Option<EncoderCache>) -> Result<(Vec<Vec<f32>>, Option<EncoderCache>), InputError> {
        let (b, s) = (rows.len(), rows.first().map_or(0, Vec::len));
        if rows.iter().any(|r| r.len() != s) {
            return Err(InputError::ShapeMismatch { what: "prompts", expected: vec![b, s], found: rows.iter().map(Vec::len).collect() });
        }
        let ids: Vec<i64> = rows.iter().flatten().map(|&t| i64::from(t)).collect();
        let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, s]), &self.model.base.device());
        let mut input = EncoderInput::new(ids);
        if let Some(cache) = cache {
            input = input.with_cache(cache);
        }
        input.validate(&self.limits)?;
        let out = self.model.forward(input, None, OutputOptions::default());
        let [_, _, vocab] = out.logits.dims();
        let last = out.logits.slice([0..b, s - 1..s, 0..vocab]).reshape([b, vocab]);
        let values = last.try_to_vec_as::<f32>().map_err(|e| InputError::Unreadable { what: "logits", reason: e.to_string() })?;
        Ok((values.chunks(vocab).map(<[f32]>::to_vec).collect(), out.encoder.cache))
    }
}

/// Where a [`CausalDecoder`] is: every row's tokens, and the cache of them.
pub struct CausalState {
    tokens: Vec<Vec<u32>>,
    cache: Option<EncoderCache>,
}

impl<B: Backbone> Decoder for CausalDecoder<'_, B> {
    type State = CausalState;
    type Error = InputError;

    fn start(&self, prompts: &[Vec<u32>]) -> Result<(CausalState, Vec<Vec<f32>>), InputError> {
        let (logits, cache) = self.run(prompts, self.use_cache.then(EncoderCache::default))?;
        Ok((CausalState { tokens: prompts.to_vec(), cache }, logits))
    }

    fn step(&self, state: &mut CausalState, tokens: &[u32]) -> Result<Vec<Vec<f32>>, InputError> {
        for (row, &t) in state.tokens.iter_mut().zip(tokens) {
            row.push(t);
        }
        let (logits, cache) = match state.cache.take() {
            Some(cache) => self.run(&tokens.iter().map(|&t| vec![t]).collect::<Vec<_>>(), Some(cache))?,
            None => self.run(&state.tokens, None)?,
        };
        state.cache = cache;
        Ok(logits)
    }

    fn reorder(&self, state: &mut CausalState, rows: &[usize]) {
        state.tokens = rows.iter().map(|&r| state.tokens[r].clone()).collect();
        if let Some(cache) = &state.cache {
            let index: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
            let index = Tensor::<1, Int>::from_data(TensorData::new(index, [rows.len()]), &self.model.base.device());
            state.cache = Some(cache.select_rows(&index));
        }
    }
}
