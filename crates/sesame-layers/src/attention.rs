//! Multi-head scaled dot-product attention with one mask type for every family.
//!
//! Padding, causal, prefix (UniLM seq-to-seq) and relative-position attention all go through
//! [`AttentionMask`]: a boolean "may not attend" mask plus an optional additive score bias.

use burn::module::Param;
use crate::linear::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::softmax;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::DType;

use crate::device::is_libtorch;
use crate::dropout::{Dropout, DropoutConfig};
use crate::packing::Packing;

/// Which keys each query may see, and an optional additive bias on the attention scores.
#[derive(Clone, Debug)]
pub struct AttentionMask {
    /// `[batch, s_q, s_k]`, `true` where the query may **not** attend to the key.
    pub masked: Option<Tensor<3, Bool>>,
    /// `[batch or 1, heads or 1, s_q, s_k]`, added to the scaled scores before the softmax.
    pub bias: Option<Tensor<4>>,
    /// Whether `masked` restricts more than padding keys, so that a query may have no key
    /// left (a padding query under a right-to-left mask). Such rows attend uniformly to every
    /// key, as HF's additive masks make them; the fused kernel is then given the mask as a
    /// bias, since a boolean mask gives them zeros there.
    pub restricted: bool,
    /// The keys' padding `[batch, s_k]` (1 = token, 0 = padding) the mask was made from, where
    /// it was ([`AttentionMask::padding`]): what [`crate::packing::Packing`] packs by.
    pub padding: Option<Tensor<2, Int>>,
}

impl AttentionMask {
    /// Every query attends to every key.
    pub fn none() -> Self {
        Self { masked: None, bias: None, restricted: false, padding: None }
    }

    /// Key padding from an HF-style `attention_mask` `[batch, s_k]` (1 = token, 0 = padding),
    /// for `s_q` queries.
    pub fn padding(attention_mask: Tensor<2, Int>, s_q: usize) -> Self {
        let [b, s_k] = attention_mask.dims();
        let masked = attention_mask.clone().equal_elem(0).reshape([b, 1, s_k]).expand([b, s_q, s_k]);
        Self { masked: Some(masked), bias: None, restricted: false, padding: Some(attention_mask) }
    }

    /// Add a further boolean restriction `[batch, s_q, s_k]` (`true` = may not attend).
    pub fn and_masked(mut self, masked: Tensor<3, Bool>) -> Self {
        self.masked = Some(match self.masked {
            Some(m) => m.bool_or(masked),
            None => masked,
        });
        self.restricted = true;
        self
    }

    /// Add an additive bias `[batch or 1, heads or 1, s_q, s_k]` to the scores.
    pub fn with_bias(mut self, bias: Tensor<4>) -> Self {
        self.bias = Some(match self.bias {
            Some(b) => b + bias,
            None => bias,
        });
        self
    }
}

/// Configuration of [`MultiHeadAttention`].
#[derive(Config, Debug)]
pub struct MultiHeadAttentionConfig {
    /// Model width.
    pub d_model: usize,
    /// Number of heads; must divide `d_model`.
    pub n_heads: usize,
    /// Dropout on the attention probabilities (HF `attention_probs_dropout_prob`).
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Whether the projections carry biases.
    #[config(default = true)]
    pub bias: bool,
    /// Width of one head (default `d_model / n_heads`); a layer whose heads were pruned keeps
    /// its heads' width with fewer of them.
    #[config(default = "None")]
    pub head_dim: Option<usize>,
}

impl MultiHeadAttentionConfig {
    /// Build the module on `device`.
    pub fn init(&self, device: &Device) -> MultiHeadAttention {
        let head_dim = self.head_dim.unwrap_or(self.d_model / self.n_heads);
        let inner = self.n_heads * head_dim;
        let linear = |d_in, d_out| LinearConfig::new(d_in, d_out).with_bias(self.bias).init(device);
        MultiHeadAttention {
            query: linear(self.d_model, inner),
            key: linear(self.d_model, inner),
            value: linear(self.d_model, inner),
            output: linear(inner, self.d_model),
            dropout: DropoutConfig::new(self.dropout).init(),
            n_heads: self.n_heads,
            head_dim,
        }
    }
}

/// Multi-head attention: `query`/`key`/`value` projections, scaled dot product, `output`
/// projection. Self-attention and cross-attention both use [`MultiHeadAttention::forward`].
#[derive(Module, Debug)]
pub struct MultiHeadAttention {
    /// Query projection.
    pub query: Linear,
    /// Key projection.
    pub key: Linear,
    /// Value projection.
    pub value: Linear,
    /// Output projection (HF `attention.output.dense`).
    pub output: Linear,
    /// Dropout on the attention probabilities.
    pub dropout: Dropout,
    /// Number of heads.
    pub n_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
}

/// The keys and values of the positions already seen by one self-attention layer, for
/// incremental decoding: each call appends the new positions' keys and values.
#[derive(Clone, Debug)]
pub struct KvCache {
    /// Keys `[batch, heads, past, head_dim]`.
    pub key: Tensor<4>,
    /// Values `[batch, heads, past, head_dim]`.
    pub value: Tensor<4>,
}

impl KvCache {
    /// Number of cached positions.
    pub fn len(&self) -> usize {
        self.key.dims()[2]
    }

    /// Whether no position is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `len` cached positions (a decoder that ran a placeholder after its tokens,
    /// UniLM's `[MASK]`, drops the placeholder's keys and values).
    pub fn truncate(&self, len: usize) -> KvCache {
        let [b, h, _, d] = self.key.dims();
        KvCache { key: self.key.clone().slice([0..b, 0..h, 0..len, 0..d]), value: self.value.clone().slice([0..b, 0..h, 0..len, 0..d]) }
    }

    /// The cache of rows `rows` of this one, in that order (a row may repeat): beam search
    /// keeps the rows of the hypotheses it continues.
    pub fn select_rows(&self, rows: &Tensor<1, Int>) -> KvCache {
        KvCache { key: self.key.clone().select(0, rows.clone()), value: self.value.clone().select(0, rows.clone()) }
    }
}

impl MultiHeadAttention {
    /// The module without `heads` (numbered `0..n_heads` in this module; one at least kept), as
    /// transformers' `prune_heads` leaves a layer: the query, key and value projections lose
    /// those heads' output columns and the output projection their input rows.
    pub fn without_heads(self, heads: &std::collections::BTreeSet<usize>) -> Self {
        let kept: Vec<usize> = (0..self.n_heads).filter(|h| !heads.contains(h)).collect();
        let dh = self.head_dim;
        let columns: Vec<i64> = kept.iter().flat_map(|&h| (h * dh..(h + 1) * dh).map(|c| c as i64)).collect();
        let index = Tensor::<1, Int>::from_data(TensorData::new(columns.clone(), [columns.len()]), &self.query.weight.device());
        // Detached: new leaves, which train on an autodiff device as the weights they replace.
        let keep = |t: Tensor<2>, dim: usize| Param::from_tensor(t.select(dim, index.clone()).detach());
        let columns_of = |l: Linear| Linear::new(keep(l.weight.val(), 1), l.bias.map(|b| Param::from_tensor(b.val().select(0, index.clone()).detach())));
        Self {
            query: columns_of(self.query),
            key: columns_of(self.key),
            value: columns_of(self.value),
            output: Linear::new(keep(self.output.weight.val(), 0), self.output.bias),
            dropout: self.dropout,
            n_heads: kept.len(),
            head_dim: dh,
        }
    }

    /// Self-attention of packed tokens `x` `[1, tokens, d]` ([`Packing::pack`]): the projections
    /// run over the tokens alone, the scores over the padded batch. Returns the projected
    /// context of the tokens `[1, tokens, d]` and, when `return_probs`, the probabilities
    /// `[batch, heads, seq, seq]`.
    pub fn forward_packed(&self, x: Tensor<3>, mask: &AttentionMask, packing: &Packing, return_probs: bool) -> (Tensor<3>, Option<Tensor<4>>) {
        let heads = |t: Tensor<3>| self.split(packing.unpack(t));
        let (q, k, v) = (heads(self.query.forward(x.clone())), heads(self.key.forward(x.clone())), heads(self.value.forward(x)));
        let (context, probs) = self.context(q, k, v, mask, return_probs);
        (self.output.forward(packing.pack(context)), probs)
    }

    /// Attend from `x` `[batch, s_q, d]` to `context` `[batch, s_k, d]` (pass `x` again for
    /// self-attention). Returns the projected context `[batch, s_q, d]` and, when
    /// `return_probs`, the attention probabilities `[batch, heads, s_q, s_k]`.
    pub fn forward(
        &self,
        x: Tensor<3>,
        context: Tensor<3>,
        mask: &AttentionMask,
        return_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let q = self.split(self.query.forward(x));
        let k = self.split(self.key.forward(context.clone()));
        let v = self.split(self.value.forward(context));
        self.attend(q, k, v, mask, return_probs)
    }

    /// The keys and values of `context` `[batch, s_k, d]`, computed once for cross-attention
    /// (every decoding step attends to the same encoder output).
    pub fn keys_values(&self, context: Tensor<3>) -> KvCache {
        KvCache { key: self.split(self.key.forward(context.clone())), value: self.split(self.value.forward(context)) }
    }

    /// Attend from `x` `[rows, s_q, d]` to precomputed keys and values `kv` of `batch` rows,
    /// where `rows` is a multiple `g` of `batch` and rows `i·g .. (i+1)·g` of `x` all attend to
    /// row `i` of `kv` (a prompt's beams share its encoder output: nothing is copied per beam).
    /// `mask` covers `[batch, g·s_q, s_k]`. Returns the projected context `[rows, s_q, d]` and,
    /// when asked, the probabilities `[rows, heads, s_q, s_k]`.
    pub fn forward_kv(&self, x: Tensor<3>, kv: &KvCache, mask: &AttentionMask, return_probs: bool) -> (Tensor<3>, Option<Tensor<4>>) {
        let [rows, s_q, d] = x.dims();
        let [batch, h, s_k, _] = kv.key.dims();
        let g = rows / batch;
        // Row-major `[batch·g, s_q, d]` is `[batch, g·s_q, d]`: a prompt's rows become queries
        // of one row.
        let q = self.split(self.query.forward(x.reshape([batch, g * s_q, d])));
        let (out, probs) = self.attend(q, kv.key.clone(), kv.value.clone(), mask, return_probs);
        let probs = probs.map(|p| p.reshape([batch, h, g, s_q, s_k]).swap_dims(1, 2).reshape([rows, h, s_q, s_k]));
        (out.reshape([rows, s_q, d]), probs)
    }

    /// Self-attention of `x` `[batch, s_q, d]` over the cached positions and its own:
    /// `past` holds earlier keys and values (none at the first call); `mask` covers
    /// `[batch, s_q, past + s_q]` keys. Returns the projected context, the probabilities when
    /// asked, and the cache extended by `x`'s positions.
    pub fn forward_cached(
        &self,
        x: Tensor<3>,
        mask: &AttentionMask,
        past: Option<KvCache>,
        return_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>, KvCache) {
        let q = self.split(self.query.forward(x.clone()));
        let mut k = self.split(self.key.forward(x.clone()));
        let mut v = self.split(self.value.forward(x));
        if let Some(past) = past.filter(|p| !p.is_empty()) {
            k = Tensor::cat(vec![past.key, k], 2);
            v = Tensor::cat(vec![past.value, v], 2);
        }
        let cache = KvCache { key: k.clone(), value: v.clone() };
        let (out, probs) = self.attend(q, k, v, mask, return_probs);
        (out, probs, cache)
    }

    /// `[batch, s, d] -> [batch, heads, s, head_dim]`.
    fn split(&self, t: Tensor<3>) -> Tensor<4> {
        let [b, s, _] = t.dims();
        t.reshape([b, s, self.n_heads, self.head_dim]).swap_dims(1, 2)
    }

    /// Scaled dot-product attention of split heads, then the output projection.
    fn attend(&self, q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, mask: &AttentionMask, return_probs: bool) -> (Tensor<3>, Option<Tensor<4>>) {
        let (context, probs) = self.context(q, k, v, mask, return_probs);
        (self.output.forward(context), probs)
    }

    /// The heads' context `[batch, s_q, heads · head_dim]` of queries `q` `[batch, heads, s_q,
    /// head_dim]` over keys `k` and values `v` `[batch, heads, s_k, head_dim]`, before the
    /// output projection; the probabilities when asked.
    fn context(&self, q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, mask: &AttentionMask, return_probs: bool) -> (Tensor<3>, Option<Tensor<4>>) {
        let [b, h, s_q, dh] = q.dims();
        let s_k = k.dims()[2];
        let expand = |m: Tensor<3, Bool>| m.reshape([b, 1, s_q, s_k]).expand([b, h, s_q, s_k]);
        let bias = mask.bias.clone().map(|t| t.expand([b, h, s_q, s_k]));

        let (ctx, probs) = if return_probs || self.dropout.is_active(&q.device()) {
            let masked = mask.masked.clone().map(expand);
            // Materialised softmax: needed for the probabilities and for attention dropout.
            let mut scores = q.matmul(k.swap_dims(2, 3)) / (dh as f64).sqrt();
            if let Some(bias) = bias {
                scores = scores + bias;
            }
            if let Some(masked) = masked {
                let fill = most_negative(scores.dtype());
                scores = scores.mask_fill(masked, fill);
            }
            let probs = softmax(scores, 3);
            let ctx = self.dropout.forward(probs.clone()).matmul(v);
            (ctx, return_probs.then_some(probs))
        } else {
            let (masked, bias) = fused_mask(mask, bias, &q, expand);
            (attention(q, k, v, masked, bias, AttentionModuleOptions::default()), None)
        };
        (ctx.swap_dims(1, 2).reshape([b, s_q, h * dh]), probs)
    }
}

/// Row numbers as an index tensor `[rows.len()]` on `device` (to select cache rows).
pub fn row_index(rows: &[usize], device: &Device) -> Tensor<1, Int> {
    let ids: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    Tensor::<1, Int>::from_data(TensorData::new(ids, [rows.len()]), device)
}

/// The causal restriction of `s` new positions after `past` cached ones, `[batch, s, past + s]`,
/// `true` where a key lies after the query; `None` for one new position, which sees every key
/// already (and libtorch then keeps its fused attention).
pub fn causal_restriction(batch: usize, s: usize, past: usize, device: &Device) -> Option<Tensor<3, Bool>> {
    if s <= 1 {
        return None;
    }
    let query = Tensor::<1, Int>::arange(past as i64..(past + s) as i64, device).reshape([1, s, 1]);
    let key = Tensor::<1, Int>::arange(0..(past + s) as i64, device).reshape([1, 1, past + s]);
    Some(key.expand([batch, s, past + s]).greater(query.expand([batch, s, past + s])))
}

/// The most negative finite value of a float dtype: the score of a masked position.
pub fn most_negative(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => -65504.0,
        DType::BF16 => -3.38e38,
        DType::F64 => f64::MIN,
        _ => f32::MIN as f64,
    }
}

/// The mask as the fused kernel takes it.
///
/// A boolean mask that leaves a query no key gives that row zeros, where HF's additive mask
/// (and the materialised path) attend uniformly; `restricted` masks therefore travel as an
/// additive bias (-1e30, which absorbs the scores: a row with no key left gets equal scores).
///
/// burn-tch 0.22.1 hands Burn's boolean mask (`true` = masked) to torch SDPA unchanged, where
/// `true` means *attend*, and falls back to the composed attention whenever there is a bias.
/// On libtorch outside autodiff a padding-only mask without bias is therefore inverted (before
/// `expand`, which is a view there), so that SDPA runs its fused kernel; under autodiff
/// (composed attention, Burn's meaning) and with a bias, the mask travels as a bias. Otherwise
/// the boolean mask stays, which lets CubeCL pick its flash kernel.
fn fused_mask(
    mask: &AttentionMask,
    bias: Option<Tensor<4>>,
    query: &Tensor<4>,
    expand: impl Fn(Tensor<3, Bool>) -> Tensor<4, Bool>,
) -> (Option<Tensor<4, Bool>>, Option<Tensor<4>>) {
    let device = query.device();
    let libtorch = is_libtorch(&device);
    match mask.masked.clone() {
        Some(m) if libtorch && !device.is_autodiff() && !mask.restricted && bias.is_none() => (Some(expand(m.bool_not())), None),
        Some(m) if mask.restricted || libtorch => {
            let as_bias = expand(m).float() * (-1.0e30_f64).max(most_negative(query.dtype()));
            (None, Some(match bias {
                Some(b) => b + as_bias,
                None => as_bias,
            }))
        }
        other => (other.map(expand), bias),
    }
}
