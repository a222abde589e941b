//! Dropout that a trainer can make reproducible per micro-batch: Burn's `Dropout` (same
//! fields, same records, kept values scaled by `1 / (1 - prob)`), except that inside
//! [`crate::random::with_stream`] its masks come from the calling thread's seeded stream
//! (see [`crate::random`]). Outside it, masks come from the device's generator as in Burn.

use burn::module::{Flag, Module, Param};
use burn::prelude::*;
use burn::tensor::Distribution;

use crate::random::keep_mask;

/// Configuration of a [`Dropout`].
#[derive(Clone, Debug)]
pub struct DropoutConfig {
    /// Probability of zeroing an element during training, in `[0, 1)`.
    pub prob: f64,
}

impl DropoutConfig {
    /// Dropout with probability `prob`.
    pub fn new(prob: f64) -> Self {
        Self { prob }
    }

    /// The layer. Panics on a probability outside `[0, 1)`, as Burn's does; configs are
    /// checked before any layer is built, so that a user sees the config field instead.
    pub fn init(&self) -> Dropout {
        assert!(self.prob.is_finite() && (0.0..1.0).contains(&self.prob), "dropout probability must be in [0, 1), got {}", self.prob);
        Dropout { prob: self.prob, training: Param::from_bool(true) }
    }
}

/// Zeroes elements at random with probability `prob` during training and scales the rest by
/// `1 / (1 - prob)`; the identity in inference (no autodiff device, or the flag cleared).
#[derive(Module, Debug)]
pub struct Dropout {
    /// Probability of zeroing an element.
    pub prob: f64,
    /// Whether to behave as during training (cleared by `freeze`).
    pub training: Param<Flag>,
}

impl Dropout {
    /// Whether this layer changes its input on `device` (training flag, autodiff device, p > 0).
    pub fn is_active(&self, device: &Device) -> bool {
        self.prob > 0.0 && self.training.is_enabled() && device.is_autodiff()
    }

    /// `input` with dropout applied. Shapes: `[..., any]` → the same.
    pub fn forward<const D: usize>(&self, input: Tensor<D>) -> Tensor<D> {
        if !self.is_active(&input.device()) {
            return input;
        }
        let keep = 1.0 - self.prob;
        match keep_mask(&input.shape().dims::<D>(), keep) {
            Some(mask) => {
                let mask = Tensor::<D>::from_data(mask, &input.device());
                let mask = if mask.dtype() == input.dtype() { mask } else { mask.cast(input.dtype()) };
                input * mask
            }
            None => {
                let random = input.random_like(Distribution::Bernoulli(keep));
                input * random * (1.0 / keep)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::with_stream;

    #[test]
    fn a_stream_gives_the_same_masks_on_any_thread_and_scales_kept_values() {
        let device = Device::flex().autodiff();
        let dropout = DropoutConfig::new(0.25).init();
        let draw = || with_stream(7, || dropout.forward(Tensor::<2>::ones([64, 100], &device)).into_data().try_to_vec::<f32>().unwrap());
        let here = draw();
        let there = std::thread::scope(|s| s.spawn(draw).join().unwrap());
        assert_eq!(here, there);
        assert!(here.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6));
        let kept = here.iter().filter(|&&v| v > 0.0).count() as f64 / here.len() as f64;
        assert!((kept - 0.75).abs() < 0.03, "kept {kept}");
        assert_ne!(here, with_stream(8, || dropout.forward(Tensor::<2>::ones([64, 100], &device)).into_data().try_to_vec::<f32>().unwrap()));
        // Inference and p = 0 leave the input as it is.
        let x = Tensor::<2>::ones([4, 4], &device.clone().without_autodiff());
        assert_eq!(dropout.forward(x.clone()).into_data(), x.into_data());
    }
}
