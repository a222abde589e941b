//! XLNet as a left-to-right language model for generation (the shared [`LanguageModel`]
//! capability), step for step as transformers' `XLNetLMHeadModel.generate` runs it: every pass
//! appends a dummy token that no position may see and predicts it through the query stream
//! (`perm_mask`, `target_mapping`); after the prompt, each step feeds the last two tokens (the
//! one before is run again, now seeing the new one) and the memory less its last two positions.
//! The memory is kept as each layer's keys and values, and the relative positions as each
//! layer's position keys, so a step projects its three positions and the one new position,
//! whatever the length (transformers projects the whole memory and every position again).

use burn::prelude::*;
use sesame_layers::attention::row_index;
use sesame_layers::generative::LanguageModel;
use sesame_layers::{InputLimits, OutputOptions, PretrainedModel};

use crate::config::XlnetConfig;
use crate::heads::XlnetLmHeadModel;
use crate::model::{ProjectedMemory, XlnetInput};

/// The positions a step feeds again (transformers' `offset`).
const OFFSET: usize = 2;

/// What generation keeps between steps: the memory, projected, and each row's last token
/// `[rows, 1]`.
#[derive(Clone, Debug, Default)]
pub struct XlnetCache {
    memory: ProjectedMemory,
    last: Option<Tensor<2, Int>>,
}

impl XlnetLmHeadModel {
    /// `ids` `[rows, n]` followed by a dummy token that nobody sees and that the query stream
    /// alone predicts.
    fn next_token_input(ids: Tensor<2, Int>) -> XlnetInput {
        let device = ids.device();
        let [b, n] = ids.dims();
        let len = n + 1;
        let ids = Tensor::cat(vec![ids, Tensor::zeros([b, 1], &device)], 1);
        let last_column = Tensor::<1>::from_data(TensorData::new((0..len).map(|j| if j + 1 == len { 1.0f32 } else { 0.0 }).collect::<Vec<_>>(), [len]), &device);
        let mut input = XlnetInput::new(ids);
        input.perm_mask = Some(last_column.clone().reshape([1, 1, len]).expand([b, len, len]));
        input.target_mapping = Some(last_column.reshape([1, 1, len]).expand([b, 1, len]));
        input
    }
}

impl LanguageModel for XlnetLmHeadModel {
    type Source = ();
    type Cache = XlnetCache;

    fn limits(config: &XlnetConfig) -> InputLimits {
        // Relative positions: no table bounds the length.
        InputLimits { vocab_size: config.vocab_size, type_vocab_size: 4, positions: usize::MAX / 2, max_len: usize::MAX / 2 }
    }

    fn start(&self, _source: ()) -> XlnetCache {
        XlnetCache::default()
    }

    /// The step after the cache's tokens (the prompt at first).
    fn decode(&self, ids: Tensor<2, Int>, cache: XlnetCache) -> (Tensor<3>, XlnetCache) {
        let [b, n] = ids.dims();
        let (fed, memory) = match cache.last {
            Some(last) => (Tensor::cat(vec![last, ids.clone()], 1), cache.memory.drop_last(OFFSET)),
            None => (ids.clone(), cache.memory),
        };
        let (out, memory) = self.transformer.forward_projected(Self::next_token_input(fed), memory, OutputOptions::default());
        let logits = self.vocabulary_logits(out.last_hidden_state);
        (logits, XlnetCache { memory, last: Some(ids.slice([0..b, n - 1..n])) })
    }

    /// Every token of `ids` run again from nothing, the whole sequence seeing itself (not
    /// transformers' path).
    fn logits(&self, _source: (), ids: Tensor<2, Int>) -> Tensor<3> {
        let mut input = Self::next_token_input(ids);
        input.use_mems = Some(false);
        self.forward(input, None, OutputOptions::default()).logits
    }

    fn select_cache_rows(&self, cache: XlnetCache, rows: &[usize]) -> XlnetCache {
        let index = row_index(rows, &self.transformer.device());
        XlnetCache { memory: cache.memory.select(index.clone()), last: cache.last.map(|l| l.select(0, index)) }
    }
}
