//! Losses with HuggingFace semantics (`ignore_index = -100`, mean over counted items).

use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::{DType, TensorData};
use rayon::prelude::*;

/// The label value that HF losses skip.
pub const IGNORE_INDEX: i64 = -100;

/// Cross-entropy of `logits` `[n, classes]` against `labels` `[n]`, averaged over the labels
/// that are not [`IGNORE_INDEX`] (0 when every label is ignored, where torch gives NaN).
pub fn cross_entropy(logits: Tensor<2>, labels: Tensor<1, Int>) -> Tensor<1> {
    cross_entropy_ignoring(logits, labels, IGNORE_INDEX)
}

/// [`cross_entropy`] with another ignored label value (QA ignores positions past the input).
pub fn cross_entropy_ignoring(logits: Tensor<2>, labels: Tensor<1, Int>, ignore: i64) -> Tensor<1> {
    cross_entropy_rows(logits, labels, ignore).loss
}

/// [`cross_entropy_ignoring`]'s loss and each row's own.
pub struct CrossEntropy {
    /// The mean over the rows whose label is kept `[1]`, with its gradient.
    pub loss: Tensor<1>,
    /// Each row's `−log softmax(x)[y]` `[n]`, detached; 0 where the label is ignored.
    pub row_nll: Tensor<1>,
}

/// [`cross_entropy_ignoring`] with each row's loss besides (for metrics over some of the rows).
pub fn cross_entropy_rows(logits: Tensor<2>, labels: Tensor<1, Int>, ignore: i64) -> CrossEntropy {
    if crate::device::is_host_memory(&logits.device()) && logits.dtype() == DType::F32 {
        if let Some(loss) = cross_entropy_on_host(&logits, &labels, ignore) {
            return loss;
        }
    }
    cross_entropy_by_tensor_ops(logits, labels, ignore)
}

/// [`cross_entropy_rows`] as tensor operations, on every backend.
fn cross_entropy_by_tensor_ops(logits: Tensor<2>, labels: Tensor<1, Int>, ignore: i64) -> CrossEntropy {
    let [n, _] = logits.dims();
    let keep = labels.clone().not_equal_elem(ignore);
    let safe_labels = labels.mask_fill(keep.clone().bool_not(), 0).reshape([n, 1]);
    let nll = log_softmax(logits, 1).gather(1, safe_labels).reshape([n]).neg();
    let keep = keep.float();
    let count = keep.clone().sum().clamp_min(1.0);
    let nll = nll * keep;
    CrossEntropy { row_nll: nll.clone().detach(), loss: nll.sum() / count }
}

/// [`cross_entropy_ignoring`] in one pass over the logits on the host (flex, ndarray): each
/// kept row's loss `log Σ exp(x) − x[y]` and its gradient `G = (softmax(x) − onehot(y)) / count`,
/// returned as `ℓ + Σ (x − x̄)·G` with `x̄` the logits detached. Its value is `ℓ` (the sum is
/// exactly 0) and its gradient `G`: three tracked operations where log-softmax and gather take
/// about ten, each a pass over `[n, classes]` forward and back, with `exp` in both directions
/// (the vocabulary projection's loss: 3% of BERT-mini's step, more of BART's, whose loss covers
/// every position). `None` when a kept label is out of range or the values are not readable as
/// f32: the tensor path then reports it as before.
fn cross_entropy_on_host(logits: &Tensor<2>, labels: &Tensor<1, Int>, ignore: i64) -> Option<CrossEntropy> {
    let [n, classes] = logits.dims();
    let device = logits.device();
    let labels: Vec<i64> = labels.clone().into_data().convert::<i64>().try_into_vec().ok()?;
    if classes == 0 || labels.len() != n || labels.iter().any(|&l| l != ignore && (l < 0 || l as usize >= classes)) {
        return None;
    }
    let count = labels.iter().filter(|&&l| l != ignore).count().max(1);
    let data = logits.clone().detach().into_data();
    let x = data.as_slice::<f32>().ok()?;
    let mut grad = vec![0f32; n * classes];
    let inverse_count = 1.0 / count as f32;
    // Rows on rayon's threads (one when a worker runs on its own core), each loss kept apart and
    // summed in order, so that the value does not depend on how the rows were split.
    let row_losses: Vec<f64> = grad
        .par_chunks_mut(classes)
        .zip(x.par_chunks(classes))
        .zip(labels.par_iter())
        .map(|((g, x), &label)| {
            if label == ignore {
                return 0.0;
            }
            let (max, sum) = crate::device::vectorised(|| {
                let max = fold_in_lanes(x, f32::NEG_INFINITY, f32::max);
                for (g, &v) in g.iter_mut().zip(x) {
                    *g = crate::activation::exp_f32(v - max);
                }
                let sum = fold_in_lanes(g, 0.0, |a, b| a + b);
                let scale = inverse_count / sum;
                for g in g.iter_mut() {
                    *g *= scale;
                }
                (max, sum)
            });
            g[label as usize] -= inverse_count;
            (sum.ln() + max - x[label as usize]) as f64
        })
        .collect();
    let loss = (row_losses.iter().sum::<f64>() / count as f64) as f32;
    let value = Tensor::<1>::from_data(TensorData::new(vec![loss], [1]), &device);
    let row_nll = Tensor::<1>::from_data(TensorData::new(row_losses.iter().map(|&l| l as f32).collect(), [n]), &device);
    if !device.is_autodiff() || n == 0 {
        return Some(CrossEntropy { loss: value, row_nll });
    }
    let grad = Tensor::<2>::from_data(TensorData::new(grad, [n, classes]), &device);
    Some(CrossEntropy { loss: ((logits.clone() - logits.clone().detach()) * grad).sum() + value, row_nll })
}

/// `values` folded by `op` (a sum, a maximum) in eight lanes from `init`, then the lanes and
/// the tail in order: a loop the compiler vectorises, where a plain fold waits on each step.
#[inline(always)]
fn fold_in_lanes(values: &[f32], init: f32, op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut lanes = [init; 8];
    let chunks = values.chunks_exact(8);
    let tail = chunks.remainder().iter().fold(init, |acc, &v| op(acc, v));
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = op(*lane, v);
        }
    }
    op(lanes.iter().fold(init, |acc, &v| op(acc, v)), tail)
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

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, Tolerance};

    use super::*;

    /// The host pass gives the loss and the gradient of the tensor operations, with ignored
    /// labels, a scale applied after it, and every label ignored.
    #[test]
    fn cross_entropy_on_the_host_is_the_tensor_ops_loss_and_gradient() {
        let device = Device::flex().autodiff();
        let (n, classes) = (37, 1003);
        let logits = Tensor::<2>::random([n, classes], Distribution::Normal(0.0, 3.0), &device);
        let cases: [Vec<i64>; 2] = [
            (0..n as i64).map(|i| if i % 5 == 3 { IGNORE_INDEX } else { (i * 7919) % classes as i64 }).collect(),
            vec![IGNORE_INDEX; n],
        ];
        for labels in cases {
            let run = |host: bool| {
                let x = logits.clone().detach().require_grad();
                let labels = Tensor::<1, Int>::from_data(TensorData::new(labels.clone(), [n]), &device);
                let ce = if host {
                    cross_entropy_on_host(&x, &labels, IGNORE_INDEX).expect("flex f32 logits run on the host")
                } else {
                    cross_entropy_by_tensor_ops(x.clone(), labels, IGNORE_INDEX)
                };
                let (value, rows) = (ce.loss.clone().into_data(), ce.row_nll.into_data());
                let grads = (ce.loss * 2.5).backward();
                (value, rows, x.grad(&grads).expect("a gradient").into_data())
            };
            let ((value, rows, grad), (expected_value, expected_rows, expected_grad)) = (run(true), run(false));
            value.assert_approx_eq::<f32>(&expected_value, Tolerance::relative(1e-5).set_absolute(1e-6));
            rows.assert_approx_eq::<f32>(&expected_rows, Tolerance::relative(1e-5).set_absolute(1e-6));
            grad.assert_approx_eq::<f32>(&expected_grad, Tolerance::relative(1e-4).set_absolute(1e-7));
            let grad: Vec<f32> = grad.try_into_vec().unwrap();
            let moved = grad.iter().filter(|&&g| g != 0.0).count();
            if labels.iter().all(|&l| l == IGNORE_INDEX) {
                assert_eq!(moved, 0);
                assert_eq!(value.try_into_vec::<f32>().unwrap(), vec![0.0]);
            } else {
                assert!(moved > n * classes / 2, "the gradient covers the kept rows: {moved}");
            }
        }
        // A label out of range is left to the tensor operations, which report it.
        let labels = Tensor::<1, Int>::from_data(TensorData::new(vec![classes as i64; n], [n]), &device);
        assert!(cross_entropy_on_host(&logits, &labels, IGNORE_INDEX).is_none());
    }
}
