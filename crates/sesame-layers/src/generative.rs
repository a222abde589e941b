//! What generation needs of a model: [`CausalLM`] (a left-to-right language model) and
//! [`Seq2SeqLM`] (an encoder-decoder with an LM head). A family's [`crate::Family`] names its
//! models of each; `sesame-generate`'s searches run any of them.

use burn::prelude::*;

use crate::attention::row_index;
use crate::backbone::{EncoderInput, Backbone};
use crate::decoder::DecoderCache;
use crate::encoder::{EncoderCache, OutputOptions};
use crate::tasks::ForCausalLM;
use crate::{HfConfig, InputLimits, PretrainedModel};

/// A left-to-right language model, as generation needs it: a capability that
/// [`ForCausalLM`] of any encoder family and BART's decoder-only `BartForCausalLM` implement.
pub trait CausalLM: PretrainedModel + Send + Sync {
    /// The keys and values of the positions run so far.
    type Cache;

    /// The vocabulary and the positions the model takes.
    fn causal_limits(config: &Self::Config) -> InputLimits;

    /// A cache that holds no position yet.
    fn empty_cache(&self) -> Self::Cache;

    /// Logits `[rows, new, vocab]` of `ids` `[rows, new]` after the positions in `cache` (from
    /// position 0 without one), and the cache extended by them (`None` without one).
    fn causal_logits(&self, ids: Tensor<2, Int>, cache: Option<Self::Cache>) -> (Tensor<3>, Option<Self::Cache>);

    /// Rows `rows` of `cache`, in that order.
    fn select_cache_rows(&self, cache: Self::Cache, rows: &[usize]) -> Self::Cache;
}

impl<B: Backbone> CausalLM for ForCausalLM<B> {
    type Cache = EncoderCache;

    fn causal_limits(config: &B::Config) -> InputLimits {
        config.input_limits()
    }

    fn empty_cache(&self) -> EncoderCache {
        EncoderCache::default()
    }

    fn causal_logits(&self, ids: Tensor<2, Int>, cache: Option<EncoderCache>) -> (Tensor<3>, Option<EncoderCache>) {
        let mut input = EncoderInput::new(ids);
        if let Some(cache) = cache {
            input = input.with_cache(cache);
        }
        let out = self.forward(input, None, OutputOptions::default());
        (out.logits, out.encoder.cache)
    }

    fn select_cache_rows(&self, cache: EncoderCache, rows: &[usize]) -> EncoderCache {
        cache.select_rows(&row_index(rows, &self.device()))
    }
}

/// An encoder-decoder with a language-model head, as generation needs it: encode once, then
/// decode new positions against the cache.
pub trait Seq2SeqLM: PretrainedModel + Send + Sync {
    /// Encode `input_ids` `[prompts, src]` (padding mask `attention_mask`) and give the cache to
    /// decode from: the encoder output's keys and values in every decoder layer.
    fn start_decoding(&self, input_ids: Tensor<2, Int>, attention_mask: Option<Tensor<2, Int>>) -> DecoderCache;

    /// Logits `[rows, new, vocab]` of decoder ids `ids` `[rows, new]` after the positions in
    /// `cache`, and the extended cache.
    fn decode(&self, ids: Tensor<2, Int>, cache: DecoderCache) -> (Tensor<3>, DecoderCache);

    /// Logits `[rows, tgt, vocab]` of the whole model run from scratch on sources `input_ids`
    /// `[rows, src]` and decoder ids `decoder_input_ids` `[rows, tgt]` (no cache: the reference
    /// the cached path must equal).
    fn logits(&self, input_ids: Tensor<2, Int>, attention_mask: Option<Tensor<2, Int>>, decoder_input_ids: Tensor<2, Int>) -> Tensor<3>;

    /// Token ids lie in `0..vocab_size`.
    fn vocab_size(&self) -> usize;

    /// The most positions of the encoder's input and of the decoder's.
    fn max_positions(&self) -> usize;
}
