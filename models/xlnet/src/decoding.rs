//! XLNet as a left-to-right language model for generation (the shared [`LanguageModel`]
//! capability), step for step as transformers' `XLNetLMHeadModel.generate` runs it: every pass
//! appends a dummy token that no position may see and predicts it through the query stream
//! (`perm_mask`, `target_mapping`); after the prompt, each step feeds the last two tokens (the
//! one before is run again, now seeing the new one) and the memory less its last two positions.
//! The cost of a step is three positions against the memory, whatever the length.

use burn::prelude::*;
use sesame_layers::attention::row_index;
use sesame_layers::generative::LanguageModel;
use sesame_layers::{InputLimits, OutputOptions, PretrainedModel};

use crate::config::XlnetConfig;
use crate::heads::XlnetLmHeadModel;
use crate::model::XlnetInput;

/// The positions a step feeds again (transformers' `offset`).
const OFFSET: usize = 2;

/// What generation keeps between steps: each layer's memory `[rows, mem, d]` and each row's
/// last token `[rows, 1]`.
#[derive(Clone, Debug, Default)]
pub struct XlnetCache {
    mems: Option<Vec<Tensor<3>>>,
    last: Option<Tensor<2, Int>>,
}

impl XlnetLmHeadModel {
    /// Logits `[rows, 1, vocab]` of the token after `ids` `[rows, n]`, predicted as a dummy
    /// token appended to them, after memory `mems`; the new memory when `use_mems`.
    fn predict_next(&self, ids: Tensor<2, Int>, mems: Option<Vec<Tensor<3>>>, use_mems: bool) -> (Tensor<3>, Option<Vec<Tensor<3>>>) {
        let device = ids.device();
        let [b, n] = ids.dims();
        let len = n + 1;
        let ids = Tensor::cat(vec![ids, Tensor::zeros([b, 1], &device)], 1);
        // Nobody sees the dummy token; the query stream predicts it alone.
        let last_column = Tensor::<1>::from_data(TensorData::new((0..len).map(|j| if j + 1 == len { 1.0f32 } else { 0.0 }).collect::<Vec<_>>(), [len]), &device);
        let mut input = XlnetInput::new(ids);
        input.perm_mask = Some(last_column.clone().reshape([1, 1, len]).expand([b, len, len]));
        input.target_mapping = Some(last_column.reshape([1, 1, len]).expand([b, 1, len]));
        input.mems = mems;
        input.use_mems = Some(use_mems);
        let out = self.forward(input, None, OutputOptions::default());
        (out.logits, out.transformer.mems)
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
        let (fed, mems) = match (cache.last, cache.mems) {
            (Some(last), Some(mems)) => {
                let mems: Vec<Tensor<3>> = mems
                    .into_iter()
                    .map(|m| {
                        let [b, m_len, d] = m.dims();
                        m.slice([0..b, 0..m_len.saturating_sub(OFFSET), 0..d])
                    })
                    .collect();
                let mems = (mems.first().is_some_and(|m| m.dims()[1] > 0)).then_some(mems);
                (Tensor::cat(vec![last, ids.clone()], 1), mems)
            }
            _ => (ids.clone(), None),
        };
        let (logits, mems) = self.predict_next(fed, mems, true);
        let last = ids.slice([0..b, n - 1..n]);
        (logits, XlnetCache { mems, last: Some(last) })
    }

    /// Every token of `ids` run again from nothing, the whole sequence seeing itself (not
    /// transformers' path).
    fn logits(&self, _source: (), ids: Tensor<2, Int>) -> Tensor<3> {
        self.predict_next(ids, None, false).0
    }

    fn select_cache_rows(&self, cache: XlnetCache, rows: &[usize]) -> XlnetCache {
        let index = row_index(rows, &self.transformer.device());
        XlnetCache {
            mems: cache.mems.map(|mems| mems.into_iter().map(|m| m.select(0, index.clone())).collect()),
            last: cache.last.map(|l| l.select(0, index.clone())),
        }
    }
}
