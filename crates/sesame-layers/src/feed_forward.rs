//! The position-wise feed-forward block (HF `intermediate` + `output.dense`).

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

use crate::activation::Activation;
use crate::dropout::{Dropout, DropoutConfig};

/// Configuration of [`FeedForward`].
#[derive(Config, Debug)]
pub struct FeedForwardConfig {
    /// Model width.
    pub d_model: usize,
    /// Inner width (HF `intermediate_size`).
    pub d_ff: usize,
    /// Inner activation (HF `hidden_act`).
    pub activation: Activation,
    /// Dropout after the activation (BART's `activation_dropout`; BERT has none).
    #[config(default = 0.0)]
    pub activation_dropout: f64,
}

impl FeedForwardConfig {
    /// Build the module on `device`.
    pub fn init(&self, device: &Device) -> FeedForward {
        FeedForward {
            intermediate: LinearConfig::new(self.d_model, self.d_ff).init(device),
            output: LinearConfig::new(self.d_ff, self.d_model).init(device),
            activation: self.activation,
            activation_dropout: DropoutConfig::new(self.activation_dropout).init(),
        }
    }
}

/// `output(dropout(activation(intermediate(x))))`.
#[derive(Module, Debug)]
pub struct FeedForward {
    /// `d_model -> d_ff` (HF `intermediate.dense`).
    pub intermediate: Linear,
    /// `d_ff -> d_model` (HF `output.dense`).
    pub output: Linear,
    /// Inner activation.
    #[module(skip)]
    pub activation: Activation,
    /// Dropout after the activation.
    pub activation_dropout: Dropout,
}

impl FeedForward {
    /// `[batch, seq, d_model] -> [batch, seq, d_model]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        dense(&self.output, self.activation_dropout.forward(dense_activated(&self.intermediate, x, self.activation)))
    }
}

/// `activation(dense(linear, x))`; an int8 product applies the activation to its output as it
/// writes it, where it can ([`crate::int8::linear_activated`]).
pub fn dense_activated(linear: &Linear, x: Tensor<3>, activation: Activation) -> Tensor<3> {
    on_rows(x, |x| crate::int8::linear_activated(linear, x, activation))
}

/// `linear` applied to `x` `[batch, seq, d_in]` as one `[batch·seq, d_in]` product, giving
/// `[batch, seq, d_out]`. Burn's `Linear` keeps a 3-d input whose rows are a multiple of 32
/// as a batched product against the broadcast weight, which libtorch runs as `batch` small
/// GEMMs; one large product is measured faster there and no slower elsewhere. A weight
/// quantised by [`crate::int8::quantize`] multiplies in int8 where it can.
pub fn dense(linear: &Linear, x: Tensor<3>) -> Tensor<3> {
    on_rows(x, |x| crate::int8::linear(linear, x))
}

/// `f` applied to `x` `[batch, seq, d_in]` as `[batch·seq, d_in]` rows, giving `[batch, seq, d_out]`.
fn on_rows(x: Tensor<3>, f: impl FnOnce(Tensor<2>) -> Tensor<2>) -> Tensor<3> {
    let [b, s, d_in] = x.dims();
    let y = f(x.reshape([b * s, d_in]));
    let d_out = y.dims()[1];
    y.reshape([b, s, d_out])
}
