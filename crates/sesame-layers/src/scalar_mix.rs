//! ELMo's scalar mix (Peters et al., 2018, eq. 1; AllenNLP's `ScalarMix`): a task's features
//! as `γ Σ_j softmax(s)_j h_j` over the hidden states of the embeddings and every layer, with
//! the weights `s` and the scale `γ` learned with the task head. The seeds' "combining layers'
//! features" for feature extraction: which layer serves a task best is learned, not chosen.

use burn::module::Param;
use burn::prelude::*;
use burn::tensor::activation::softmax;

/// Learned softmax weights over `layers` hidden states and a scale.
#[derive(Module, Debug)]
pub struct ScalarMix {
    /// `s` `[layers]`: zeros at first, an even mix (AllenNLP's `scalar_parameters`).
    pub scalar_parameters: Param<Tensor<1>>,
    /// `γ` `[1]`: 1 at first (AllenNLP's `gamma`; a `gamma` here would be saved as LayerNorm's `weight`).
    pub scale: Param<Tensor<1>>,
}

impl ScalarMix {
    /// An even mix of `layers` hidden states.
    pub fn new(layers: usize, device: &Device) -> Self {
        Self { scalar_parameters: Param::from_tensor(Tensor::zeros([layers], device)), scale: Param::from_tensor(Tensor::ones([1], device)) }
    }

    /// The mix `[batch, seq, hidden]` of `states` (each `[batch, seq, hidden]`, as many as the
    /// mix has weights: HF's `hidden_states`, the embeddings first).
    pub fn forward(&self, states: Vec<Tensor<3>>) -> Tensor<3> {
        let n = states.len();
        let weights = softmax(self.scalar_parameters.val(), 0).reshape([n, 1, 1, 1]);
        let mixed: Tensor<3> = (Tensor::stack::<4>(states, 0) * weights).sum_dim(0).squeeze_dim(0);
        mixed * self.scale.val().reshape([1, 1, 1])
    }
}
