//! What generation needs of a model: [`LanguageModel`], a left-to-right language model
//! (`Source = ()`) or an encoder-decoder with an LM head, whose decoder reads an encoded
//! [`Source`]. A family's [`crate::Family`] names its models of each; `sesame-generate`'s
//! searches run any of them.

use burn::prelude::*;

use crate::attention::row_index;
use crate::backbone::{EncoderInput, Backbone};
use crate::encoder::{EncoderCache, OutputOptions};
use crate::tasks::ForCausalLM;
use crate::{HfConfig, InputLimits, PretrainedModel};

/// A model that generates text, as the searches of `sesame-generate` run it (transformers'
/// `GenerationMixin`): decode new positions against a cache of those run so far. A
/// left-to-right model ([`ForCausalLM`] of any encoder family, BART's `BartForCausalLM`,
/// XLNet's `XlnetLmHeadModel`) reads nothing else (`Source = ()`); an encoder-decoder (BART's
/// `BartForConditionalGeneration`) encodes a [`Source`] once, which every step's decoder reads.
pub trait LanguageModel: PretrainedModel + Send + Sync {
    /// What the decoder reads besides its own tokens: [`Source`] for an encoder-decoder, `()`
    /// for a left-to-right model.
    type Source: Clone;

    /// What decoding keeps between steps: the keys and values of the positions run so far (an
    /// encoder-decoder's also those of its source in every decoder layer).
    type Cache;

    /// The vocabulary and the positions the decoder takes (an encoder-decoder's encoder takes
    /// as many).
    fn limits(config: &Self::Config) -> InputLimits;

    /// The cache a generation starts from: no position decoded yet (an encoder-decoder's
    /// holding `source` encoded).
    fn start(&self, source: Self::Source) -> Self::Cache;

    /// Logits `[rows, new, vocab]` of `ids` `[rows, new]` after the positions in `cache`, and
    /// the cache extended by them.
    fn decode(&self, ids: Tensor<2, Int>, cache: Self::Cache) -> (Tensor<3>, Self::Cache);

    /// Logits `[rows, len, vocab]` of `ids` `[rows, len]` run from position 0 without a cache,
    /// row `i` reading row `i` of `source`: the reference the cached path must equal.
    fn logits(&self, source: Self::Source, ids: Tensor<2, Int>) -> Tensor<3>;

    /// Rows `rows` of `cache`, in that order.
    fn select_cache_rows(&self, cache: Self::Cache, rows: &[usize]) -> Self::Cache;
}

/// An encoder-decoder's source: token ids `[rows, src]` and their padding mask.
#[derive(Clone, Debug)]
pub struct Source {
    /// Token ids `[rows, src]`.
    pub input_ids: Tensor<2, Int>,
    /// 1 at tokens, 0 at padding `[rows, src]`; none: every position is a token.
    pub attention_mask: Option<Tensor<2, Int>>,
}

impl Source {
    /// Rows `rows` of the source, in that order.
    pub fn select_rows(&self, rows: &[usize]) -> Source {
        let index = row_index(rows, &self.input_ids.device());
        Source { input_ids: self.input_ids.clone().select(0, index.clone()), attention_mask: self.attention_mask.clone().map(|m| m.select(0, index)) }
    }
}

impl<B: Backbone> LanguageModel for ForCausalLM<B> {
    type Source = ();
    type Cache = EncoderCache;

    fn limits(config: &B::Config) -> InputLimits {
        config.input_limits()
    }

    fn start(&self, _source: ()) -> EncoderCache {
        EncoderCache::default()
    }

    fn decode(&self, ids: Tensor<2, Int>, cache: EncoderCache) -> (Tensor<3>, EncoderCache) {
        let out = self.forward(EncoderInput::new(ids).with_cache(cache), None, OutputOptions::default());
        (out.logits, out.encoder.cache.expect("a run with a cache returns it"))
    }

    fn logits(&self, _source: (), ids: Tensor<2, Int>) -> Tensor<3> {
        self.forward(EncoderInput::new(ids), None, OutputOptions::default()).logits
    }

    fn select_cache_rows(&self, cache: EncoderCache, rows: &[usize]) -> EncoderCache {
        cache.select_rows(&row_index(rows, &self.device()))
    }
}
