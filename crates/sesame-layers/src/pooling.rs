//! Sentence pooling over token states: CLS, mean, max, from any layer.

use burn::prelude::*;

use crate::encoder::EncoderOutput;

/// How token states become one vector per sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The first token's state.
    Cls,
    /// Mean over non-padding tokens (sentence-transformers' default).
    Mean,
    /// Element-wise max over non-padding tokens.
    Max,
}

/// A pooling name that is not `cls`, `mean` or `max`.
#[derive(Debug, thiserror::Error)]
#[error("unknown pooling `{0}` (expected cls, mean or max)")]
pub struct UnknownPooling(pub String);

impl std::str::FromStr for Pooling {
    type Err = UnknownPooling;
    fn from_str(s: &str) -> Result<Self, UnknownPooling> {
        match s {
            "cls" => Ok(Pooling::Cls),
            "mean" => Ok(Pooling::Mean),
            "max" => Ok(Pooling::Max),
            other => Err(UnknownPooling(other.to_string())),
        }
    }
}

impl Pooling {
    /// Whether this pooling reads no padding position of a batch padded on the left when
    /// `pads_left`, so that the layers may run over the tokens alone
    /// ([`crate::encoder::OutputOptions::tokens_only`]): every pooling but CLS's of a
    /// left-padded batch, whose first position may be padding.
    pub fn reads_tokens_only(&self, pads_left: bool) -> bool {
        *self != Pooling::Cls || !pads_left
    }

    /// Pool `states` `[batch, seq, d]` using `attention_mask` `[batch, seq]` (1 = token).
    pub fn pool(&self, states: Tensor<3>, attention_mask: Tensor<2, Int>) -> Tensor<2> {
        let [b, s, d] = states.dims();
        match self {
            Pooling::Cls => states.slice([0..b, 0..1, 0..d]).reshape([b, d]),
            Pooling::Mean => {
                let mask = attention_mask.float().reshape([b, s, 1]);
                let summed = (states * mask.clone()).sum_dim(1).reshape([b, d]);
                let counts = mask.sum_dim(1).reshape([b, 1]).clamp_min(1e-9);
                summed / counts
            }
            Pooling::Max => {
                let padding = attention_mask.equal_elem(0).reshape([b, s, 1]).expand([b, s, d]);
                states.mask_fill(padding, f32::MIN).max_dim(1).reshape([b, d])
            }
        }
    }
}

/// Pick the token states of one layer: `layer` indexes HF `hidden_states` (0 = embeddings),
/// negative values count from the end (-1 = last layer, -2 = penultimate). Needs an output
/// run with hidden states, except for -1.
pub fn select_layer(output: &EncoderOutput, layer: i64) -> Option<Tensor<3>> {
    if layer == -1 {
        return Some(output.last_hidden_state.clone());
    }
    let states = output.hidden_states.as_ref()?;
    let index = if layer < 0 { states.len() as i64 + layer } else { layer };
    usize::try_from(index).ok().and_then(|i| states.get(i).cloned())
}

/// L2-normalise each row of `x` `[batch, d]`.
pub fn l2_normalize(x: Tensor<2>) -> Tensor<2> {
    let norm = x.clone().square().sum_dim(1).sqrt().clamp_min(1e-12);
    x / norm
}
