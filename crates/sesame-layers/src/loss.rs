//! Losses with HuggingFace semantics (`ignore_index = -100`, mean over counted items).

use burn::prelude::*;
use burn::tensor::activation::log_softmax;

/// The label value that HF losses skip.
pub const IGNORE_INDEX: i64 = -100;

/// Cross-entropy of `logits` `[n, classes]` against `labels` `[n]`, averaged over the labels
/// that are not [`IGNORE_INDEX`] (0 when every label is ignored, where torch gives NaN).
pub fn cross_entropy(logits: Tensor<2>, labels: Tensor<1, Int>) -> Tensor<1> {
    cross_entropy_ignoring(logits, labels, IGNORE_INDEX)
}

/// [`cross_entropy`] with another ignored label value (QA ignores positions past the input).
pub fn cross_entropy_ignoring(logits: Tensor<2>, labels: Tensor<1, Int>, ignore: i64) -> Tensor<1> {
    let [n, _] = logits.dims();
    let keep = labels.clone().not_equal_elem(ignore);
    let safe_labels = labels.mask_fill(keep.clone().bool_not(), 0).reshape([n, 1]);
    let nll = log_softmax(logits, 1).gather(1, safe_labels).reshape([n]).neg();
    let keep = keep.float();
    let count = keep.clone().sum().clamp_min(1.0);
    (nll * keep).sum() / count
}

/// Mean squared error (HF regression heads).
pub fn mse(predictions: Tensor<2>, targets: Tensor<2>) -> Tensor<1> {
    (predictions - targets).square().mean()
}

/// Mean binary cross-entropy on logits (HF multi-label heads), computed stably.
pub fn binary_cross_entropy_with_logits(logits: Tensor<2>, targets: Tensor<2>) -> Tensor<1> {
    // max(x, 0) - x*y + log(1 + exp(-|x|))
    let loss = logits.clone().clamp_min(0.0) - logits.clone() * targets + logits.abs().neg().exp().log1p();
    loss.mean()
}

/// Cross-entropy of every position: `logits` `[batch, seq, classes]` against `labels`
/// `[batch, seq]` (-100 = ignored); the masked-LM and token-classification loss.
pub fn per_token_cross_entropy(logits: Tensor<3>, labels: Tensor<2, Int>) -> Tensor<1> {
    let [b, s, n] = logits.dims();
    cross_entropy(logits.reshape([b * s, n]), labels.reshape([b * s]))
}
