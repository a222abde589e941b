//! FastBERT's early exit (Liu et al. 2020, "FastBERT: a Self-distilling BERT with Adaptive
//! Inference Time"): a small classifier after every encoder layer below the top, trained to
//! match the fine-tuned model's own head (self-distillation); at inference a row stops at the
//! first layer whose prediction is confident enough, its normalised entropy below `speed`.
//! The classifiers follow the authors' code (autoliuweijie/FastBERT, `Classifier`):
//! `tanh(dense_in)` to 128 wide, self-attention with 2 heads, the first token,
//! `tanh(dense)`, `out_proj`.

use crate::linear::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::log_softmax;

use crate::attention::{AttentionMask, MultiHeadAttention, MultiHeadAttentionConfig};
use crate::hparams::EarlyExitConfig;

/// One exit classifier: the logits of a layer's hidden states.
#[derive(Module, Debug)]
pub struct ExitClassifier {
    /// `hidden -> width`, then tanh.
    pub dense_in: Linear,
    /// Self-attention over the narrowed states, under the input's mask.
    pub attention: MultiHeadAttention,
    /// `width -> width` on the first token, then tanh.
    pub dense: Linear,
    /// `width -> num_labels`.
    pub out_proj: Linear,
}

impl ExitClassifier {
    /// A fresh classifier of `config`'s size reading `hidden`-wide states, with `dropout` on
    /// the attention probabilities.
    pub fn new(config: &EarlyExitConfig, hidden: usize, num_labels: usize, dropout: f64, device: &Device) -> Self {
        let width = config.hidden_size;
        Self {
            dense_in: LinearConfig::new(hidden, width).init(device),
            attention: MultiHeadAttentionConfig::new(width, config.num_attention_heads).with_dropout(dropout).init(device),
            dense: LinearConfig::new(width, width).init(device),
            out_proj: LinearConfig::new(width, num_labels).init(device),
        }
    }

    /// Logits `[batch, num_labels]` of a layer's states `hidden` `[batch, seq, hidden]`.
    pub fn forward(&self, hidden: Tensor<3>, mask: &AttentionMask) -> Tensor<2> {
        let x = self.dense_in.forward(hidden).tanh();
        let (x, _) = self.attention.forward(x.clone(), x, mask, false);
        let [batch, _, width] = x.dims();
        let first = x.slice([0..batch, 0..1]).reshape([batch, width]);
        self.out_proj.forward(self.dense.forward(first).tanh())
    }
}

/// The exit classifiers of a model with `L` layers: after layers `1..L-1` (the model's own head
/// reads layer `L`).
#[derive(Module, Debug)]
pub struct EarlyExit {
    /// `classifiers[i]` reads the output of layer `i + 1`.
    pub classifiers: Vec<ExitClassifier>,
}

impl EarlyExit {
    /// Fresh classifiers for a model of `layers` layers.
    pub fn new(config: &EarlyExitConfig, layers: usize, hidden: usize, num_labels: usize, dropout: f64, device: &Device) -> Self {
        Self { classifiers: (1..layers).map(|_| ExitClassifier::new(config, hidden, num_labels, dropout, device)).collect() }
    }
}

/// What a classifier with early exit gives for a batch.
#[derive(Clone, Debug)]
pub struct EarlyExitOutput {
    /// Each row's logits `[batch, num_labels]`, from the layer it stopped at.
    pub logits: Tensor<2>,
    /// The layer each row stopped at (1-based; the last layer is the model's own head).
    pub exit_layers: Vec<usize>,
}

/// FastBERT's uncertainty: the entropy of `softmax(logits)` over `ln(num_labels)`, in [0, 1]
/// `[batch]` of `[batch, num_labels]`.
pub fn normalized_entropy(logits: Tensor<2>) -> Tensor<1> {
    let [batch, n] = logits.dims();
    let log_p = log_softmax(logits, 1);
    let entropy = log_p.clone().exp().mul(log_p).sum_dim(1).neg().reshape([batch]);
    entropy.div_scalar((n.max(2) as f64).ln())
}

/// The exit rule: a row whose classifier's normalised entropy is `entropy` stops at `speed`
/// when the entropy is below it; at `speed` 1 (the entropy's bound) every row stops.
pub fn stops(entropy: f64, speed: f64) -> bool {
    entropy < speed || speed >= 1.0
}

/// FastBERT's self-distillation loss: the sum over the exit classifiers of
/// `KL(teacher ‖ student)`, each the mean over the rows, where the teacher is the model's own
/// head (`exits.last()`, no gradient flows into it) and the students are the other entries of
/// `exits` (each `[batch, num_labels]`).
pub fn self_distillation_loss(exits: &[Tensor<2>]) -> Tensor<1> {
    let (teacher, students) = exits.split_last().expect("a model has one layer at least");
    let [batch, _] = teacher.dims();
    let log_t = log_softmax(teacher.clone().detach(), 1);
    let p_t = log_t.clone().exp();
    let mut loss = Tensor::<1>::zeros([1], &teacher.device());
    for student in students {
        let kl = p_t.clone().mul(log_t.clone() - log_softmax(student.clone(), 1)).sum();
        loss = loss + kl.reshape([1]).div_scalar(batch as f64);
    }
    loss
}
