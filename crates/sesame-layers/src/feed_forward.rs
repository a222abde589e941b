//! The position-wise feed-forward block (HF `intermediate` + `output.dense`).

use crate::linear::{Linear, LinearConfig};
use burn::prelude::*;

use crate::activation::Activation;
use crate::dropout::{Dropout, DropoutConfig};
use crate::packing::Packing;

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
        self.forward_in(x, None)
    }

    /// [`FeedForward::forward`] of `x`, laid out as `packing` packs a batch's tokens when one
    /// is given (its dropout's masks drawn for the padded batch: [`Dropout::forward_in`]).
    pub fn forward_in(&self, x: Tensor<3>, packing: Option<&Packing>) -> Tensor<3> {
        self.output.forward(self.activation_dropout.forward_in(self.intermediate.forward_activated(x, self.activation), packing))
    }
}
