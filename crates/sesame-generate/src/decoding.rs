//! The models that generate, as the searches of [`crate::search`] see them: a left-to-right
//! language model ([`CausalDecoder`]) and an encoder-decoder ([`Seq2SeqDecoder`]), each a
//! [`LanguageModel`] of any family.

use burn::prelude::*;

use sesame_layers::InputLimits;
use sesame_layers::pretrained::InputError;

use crate::search::Decoder;

/// The capability the searches run on, defined beside the models (`sesame-layers`, where a
/// family's `impl Family` names them).
pub use sesame_layers::generative::{LanguageModel, Source};

/// Token rows `[batch][seq]` (all of one length) as ids `[batch, seq]` on `device`.
fn id_tensor(rows: &[Vec<u32>], device: &Device) -> Result<Tensor<2, Int>, InputError> {
    let (b, s) = (rows.len(), rows.first().map_or(0, Vec::len));
    if rows.iter().any(|r| r.len() != s) {
        return Err(InputError::ShapeMismatch { what: "prompts", expected: vec![b, s], found: rows.iter().map(Vec::len).collect() });
    }
    let ids: Vec<i64> = rows.iter().flatten().map(|&t| i64::from(t)).collect();
    Ok(Tensor::<2, Int>::from_data(TensorData::new(ids, [b, s]), device))
}

/// Each row's logits at its last position, on the host: `[rows, seq, vocab]` -> `[rows][vocab]`.
pub fn last_logits(logits: Tensor<3>) -> Result<Vec<Vec<f32>>, InputError> {
    let [b, s, vocab] = logits.dims();
    let last = logits.slice([0..b, s - 1..s, 0..vocab]).reshape([b, vocab]);
    let values = last.try_to_vec_as::<f32>().map_err(|e| InputError::Unreadable { what: "logits", reason: e.to_string() })?;
    Ok(values.chunks(vocab).map(<[f32]>::to_vec).collect())
}

/// A left-to-right [`LanguageModel`] generating on its device: the prompts run once, then one
/// position per row per step against the key/value cache. Without the cache (`use_cache` false) every step runs
/// every position again, which gives the same tokens (a test checks it) and shows what the
/// cache saves.
pub struct CausalDecoder<'a, M: LanguageModel<Source = ()>> {
    model: &'a M,
    limits: InputLimits,
    use_cache: bool,
}

impl<'a, M: LanguageModel<Source = ()>> CausalDecoder<'a, M> {
    /// Decode with `model` of configuration `config`, with its cache.
    pub fn new(model: &'a M, config: &M::Config) -> Self {
        Self { model, limits: M::limits(config), use_cache: true }
    }

    /// Use the cache (default) or run every position at every step.
    pub fn with_cache(mut self, use_cache: bool) -> Self {
        self.use_cache = use_cache;
        self
    }

    /// Run `rows` `[batch][seq]` after `past` positions held in `cache`; each row's last
    /// logits `[vocab]`, and the extended cache. Ids out of the vocabulary and sequences past
    /// the positions are refused.
    fn run(&self, rows: &[Vec<u32>], past: usize, cache: Option<M::Cache>) -> Result<(Vec<Vec<f32>>, Option<M::Cache>), InputError> {
        let ids = id_tensor(rows, &self.model.device())?;
        let len = past + rows.first().map_or(0, Vec::len);
        if len > self.limits.max_len {
            return Err(InputError::TooLong { len, max: self.limits.max_len });
        }
        if let Some(&id) = rows.iter().flatten().find(|&&t| t as usize >= self.limits.vocab_size) {
            return Err(InputError::IdOutOfRange { what: "token", id: i64::from(id), limit: self.limits.vocab_size });
        }
        let (logits, cache) = match cache {
            Some(cache) => {
                let (logits, cache) = self.model.decode(ids, cache);
                (logits, Some(cache))
            }
            None => (self.model.logits((), ids), None),
        };
        Ok((last_logits(logits)?, cache))
    }
}

/// Where a [`CausalDecoder`] is: every row's tokens, and the cache `C` of them.
pub struct CausalState<C> {
    tokens: Vec<Vec<u32>>,
    cache: Option<C>,
}

impl<M: LanguageModel<Source = ()>> Decoder for CausalDecoder<'_, M> {
    type State = CausalState<M::Cache>;
    type Error = InputError;

    fn start(&self, prompts: &[Vec<u32>]) -> Result<(CausalState<M::Cache>, Vec<Vec<f32>>), InputError> {
        let (logits, cache) = self.run(prompts, 0, self.use_cache.then(|| self.model.start(())))?;
        Ok((CausalState { tokens: prompts.to_vec(), cache }, logits))
    }

    fn step(&self, state: &mut CausalState<M::Cache>, tokens: &[u32]) -> Result<Vec<Vec<f32>>, InputError> {
        let past = state.tokens.first().map_or(0, Vec::len);
        for (row, &t) in state.tokens.iter_mut().zip(tokens) {
            row.push(t);
        }
        let (logits, cache) = match state.cache.take() {
            Some(cache) => self.run(&tokens.iter().map(|&t| vec![t]).collect::<Vec<_>>(), past, Some(cache))?,
            None => self.run(&state.tokens, 0, None)?,
        };
        state.cache = cache;
        Ok(logits)
    }

    fn reorder(&self, state: &mut CausalState<M::Cache>, rows: &[usize]) {
        state.tokens = rows.iter().map(|&r| state.tokens[r].clone()).collect();
        if let Some(cache) = state.cache.take() {
            state.cache = Some(self.model.select_cache_rows(cache, rows));
        }
    }
}

/// An encoder-decoder generating on its device from source sequences: the sources are encoded
/// once; the search's prompts are the decoder's (its start token). With the cache, each step
/// runs one position per row; every row of a prompt (its beams) reads that prompt's encoder
/// keys and values, which are never copied per beam. Without it (`use_cache` false) every step
/// runs the whole model on every row from scratch (the reference the cached path is tested
/// against).
pub struct Seq2SeqDecoder<'a, M: LanguageModel<Source = Source>> {
    model: &'a M,
    limits: InputLimits,
    source: Source,
    use_cache: bool,
}

impl<'a, M: LanguageModel<Source = Source>> Seq2SeqDecoder<'a, M> {
    /// Decode with `model` of configuration `config` from `source` (`[prompts, src]`, with its
    /// padding mask); checks the sources against the model.
    pub fn new(model: &'a M, config: &M::Config, source: Source) -> Result<Self, InputError> {
        let limits = M::limits(config);
        let input = sesame_layers::seq2seq::Seq2SeqInput { input_ids: Some(source.input_ids.clone()), attention_mask: source.attention_mask.clone(), ..Default::default() };
        input.validate(limits.vocab_size, limits.max_len)?;
        Ok(Self { model, limits, source, use_cache: true })
    }

    /// Use the cache (default) or run the whole model at every step.
    pub fn with_cache(mut self, use_cache: bool) -> Self {
        self.use_cache = use_cache;
        self
    }

    /// Decoder ids `[rows, len]` of `rows`, checked on the host (no read-back from the device
    /// at every step): at most the model's positions, ids in its vocabulary.
    fn check(&self, rows: &[Vec<u32>]) -> Result<Tensor<2, Int>, InputError> {
        let len = rows.first().map_or(0, Vec::len);
        if len > self.limits.max_len {
            return Err(InputError::TooLong { len, max: self.limits.max_len });
        }
        let limit = self.limits.vocab_size;
        if let Some(&id) = rows.iter().flatten().find(|&&t| t as usize >= limit) {
            return Err(InputError::IdOutOfRange { what: "decoder token", id: i64::from(id), limit });
        }
        id_tensor(rows, &self.model.device())
    }

    /// Logits of `tokens` run from scratch, each row on its prompt's source.
    fn from_scratch(&self, tokens: &[Vec<u32>], prompt_of_row: &[usize]) -> Result<Vec<Vec<f32>>, InputError> {
        let ids = self.check(tokens)?;
        last_logits(self.model.logits(self.source.select_rows(prompt_of_row), ids))
    }
}

/// Where a [`Seq2SeqDecoder`] is: every row's decoder tokens, the prompt each row belongs
/// to, and the cache.
pub struct Seq2SeqState<C> {
    tokens: Vec<Vec<u32>>,
    prompt_of_row: Vec<usize>,
    cache: Option<C>,
}

impl<M: LanguageModel<Source = Source>> Decoder for Seq2SeqDecoder<'_, M> {
    type State = Seq2SeqState<M::Cache>;
    type Error = InputError;

    /// `prompts`: one decoder prompt per source row (HF: the decoder start token).
    fn start(&self, prompts: &[Vec<u32>]) -> Result<(Seq2SeqState<M::Cache>, Vec<Vec<f32>>), InputError> {
        let sources = self.source.input_ids.dims()[0];
        if prompts.len() != sources {
            return Err(InputError::ShapeMismatch { what: "decoder prompts", expected: vec![sources], found: vec![prompts.len()] });
        }
        let prompt_of_row: Vec<usize> = (0..sources).collect();
        let (logits, cache) = if self.use_cache {
            let cache = self.model.start(self.source.clone());
            let (logits, cache) = self.model.decode(self.check(prompts)?, cache);
            (last_logits(logits)?, Some(cache))
        } else {
            (self.from_scratch(prompts, &prompt_of_row)?, None)
        };
        Ok((Seq2SeqState { tokens: prompts.to_vec(), prompt_of_row, cache }, logits))
    }

    fn step(&self, state: &mut Seq2SeqState<M::Cache>, tokens: &[u32]) -> Result<Vec<Vec<f32>>, InputError> {
        for (row, &t) in state.tokens.iter_mut().zip(tokens) {
            row.push(t);
        }
        match state.cache.take() {
            Some(cache) => {
                // The cache holds every token of a row but the one just pushed.
                let len = state.tokens.first().map_or(0, Vec::len);
                if len > self.limits.max_len {
                    return Err(InputError::TooLong { len, max: self.limits.max_len });
                }
                let ids = self.check(&tokens.iter().map(|&t| vec![t]).collect::<Vec<_>>())?;
                let (logits, cache) = self.model.decode(ids, cache);
                state.cache = Some(cache);
                last_logits(logits)
            }
            None => self.from_scratch(&state.tokens, &state.prompt_of_row),
        }
    }

    fn reorder(&self, state: &mut Seq2SeqState<M::Cache>, rows: &[usize]) {
        state.tokens = rows.iter().map(|&r| state.tokens[r].clone()).collect();
        state.prompt_of_row = rows.iter().map(|&r| state.prompt_of_row[r]).collect();
        if let Some(cache) = state.cache.take() {
            state.cache = Some(self.model.select_cache_rows(cache, rows));
        }
    }
}
