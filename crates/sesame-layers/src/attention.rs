//! Multi-head scaled dot-product attention with one mask type for every family.
//!
//! Padding, causal, prefix (UniLM seq-to-seq) and relative-position attention all go through
//! [`AttentionMask`]: a boolean "may not attend" mask plus an optional additive score bias.

use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::softmax;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::DType;

/// Which keys each query may see, and an optional additive bias on the attention scores.
#[derive(Clone, Debug)]
pub struct AttentionMask {
    /// `[batch, s_q, s_k]`, `true` where the query may **not** attend to the key.
    pub masked: Option<Tensor<3, Bool>>,
    /// `[batch or 1, heads or 1, s_q, s_k]`, added to the scaled scores before the softmax.
    pub bias: Option<Tensor<4>>,
}

impl AttentionMask {
    /// Every query attends to every key.
    pub fn none() -> Self {
        Self { masked: None, bias: None }
    }

    /// Key padding from an HF-style `attention_mask` `[batch, s_k]` (1 = token, 0 = padding),
    /// for `s_q` queries.
    pub fn padding(attention_mask: Tensor<2, Int>, s_q: usize) -> Self {
        let [b, s_k] = attention_mask.dims();
        let masked = attention_mask.equal_elem(0).reshape([b, 1, s_k]).expand([b, s_q, s_k]);
        Self { masked: Some(masked), bias: None }
    }

    /// Add a further boolean restriction `[batch, s_q, s_k]` (`true` = may not attend).
    pub fn and_masked(mut self, masked: Tensor<3, Bool>) -> Self {
        self.masked = Some(match self.masked {
            Some(m) => m.bool_or(masked),
            None => masked,
        });
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
}

impl MultiHeadAttentionConfig {
    /// Build the module on `device`.
    pub fn init(&self, device: &Device) -> MultiHeadAttention {
        let linear = || LinearConfig::new(self.d_model, self.d_model).with_bias(self.bias).init(device);
        MultiHeadAttention {
            query: linear(),
            key: linear(),
            value: linear(),
            output: linear(),
            dropout: DropoutConfig::new(self.dropout).init(),
            n_heads: self.n_heads,
            head_dim: self.d_model / self.n_heads,
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

impl MultiHeadAttention {
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
        let [b, s_q, d] = x.dims();
        let s_k = context.dims()[1];
        let (h, dh) = (self.n_heads, self.head_dim);
        let split = |t: Tensor<3>, s: usize| t.reshape([b, s, h, dh]).swap_dims(1, 2);
        let q = split(self.query.forward(x), s_q);
        let k = split(self.key.forward(context.clone()), s_k);
        let v = split(self.value.forward(context), s_k);
        let masked = mask.masked.clone().map(|m| m.reshape([b, 1, s_q, s_k]).expand([b, h, s_q, s_k]));
        let bias = mask.bias.clone().map(|t| t.expand([b, h, s_q, s_k]));

        let (ctx, probs) = if return_probs || dropout_active(&self.dropout, &q.device()) {
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
            let (masked, bias) = fused_mask_workaround(masked, bias, &q);
            (attention(q, k, v, masked, bias, AttentionModuleOptions::default()), None)
        };
        let ctx = ctx.swap_dims(1, 2).reshape([b, s_q, d]);
        (self.output.forward(ctx), probs)
    }
}

/// Whether `dropout` changes its input on `device` (training flag, autodiff device, p > 0).
pub fn dropout_active(dropout: &Dropout, device: &Device) -> bool {
    dropout.prob > 0.0 && dropout.training.is_enabled() && device.is_autodiff()
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

/// burn-tch 0.22.1 hands Burn's boolean mask (`true` = masked) to torch SDPA, where `true`
/// means *attend*; outside autodiff the fused op then attends to exactly the wrong keys. On
/// libtorch the mask therefore travels as an additive bias instead. Other backends keep the
/// boolean mask, which lets CubeCL pick its flash kernel.
fn fused_mask_workaround(
    masked: Option<Tensor<4, Bool>>,
    bias: Option<Tensor<4>>,
    query: &Tensor<4>,
) -> (Option<Tensor<4, Bool>>, Option<Tensor<4>>) {
    match masked {
        Some(m) if is_libtorch(&query.device()) => {
            let as_bias = m.float() * (-1.0e30_f64).max(most_negative(query.dtype()));
            (None, Some(match bias {
                Some(b) => b + as_bias,
                None => as_bias,
            }))
        }
        other => (other, bias),
    }
}

/// Whether `device` is a libtorch device (the backend is only named in its debug form).
pub fn is_libtorch(device: &Device) -> bool {
    format!("{device:?}").contains("LibTorch")
}
