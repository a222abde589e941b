//! Dropout that a trainer can make reproducible per micro-batch.
//!
//! Burn's `Dropout` draws its masks from the backend's one global generator. That is
//! reproducible only while a single thread draws from it: two micro-batches trained at once
//! (the trainer's `threads`) would interleave their draws in whatever order the threads run.
//! This [`Dropout`] behaves the same (same fields, same records, kept values scaled by
//! `1 / (1 - prob)`), except that inside [`with_mask_stream`] its masks come from a generator
//! owned by the calling thread and seeded by the caller, drawn on the host: one stream per
//! micro-batch gives the same masks whichever thread runs it and however many run at once.
//! Outside it, masks come from the device's generator as in Burn.

use std::cell::RefCell;

use burn::module::{Flag, Module, Param};
use burn::prelude::*;
use burn::tensor::{Distribution, TensorData};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

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
        match host_mask(&input.shape().dims::<D>(), keep) {
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

thread_local! {
    static STREAM: RefCell<Option<SmallRng>> = const { RefCell::new(None) };
}

/// Run `f` with this thread's dropout masks drawn from a generator seeded with `seed` (see the
/// module documentation). Nested calls restore the outer stream when they return.
pub fn with_mask_stream<R>(seed: u64, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<SmallRng>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            STREAM.with(|s| *s.borrow_mut() = previous);
        }
    }
    let _restore = Restore(STREAM.with(|s| s.replace(Some(SmallRng::seed_from_u64(seed)))));
    f()
}

/// A mask of `0` and `1 / keep` (each kept with probability `keep`), from this thread's stream;
/// `None` outside [`with_mask_stream`].
fn host_mask(dims: &[usize], keep: f64) -> Option<TensorData> {
    STREAM.with(|s| {
        let mut stream = s.borrow_mut();
        let rng = stream.as_mut()?;
        let n: usize = dims.iter().product();
        // Keep when a uniform u32 falls below keep · 2^32.
        let threshold = (keep * 4_294_967_296.0) as u64;
        let scale = (1.0 / keep) as f32;
        let mut mask = Vec::with_capacity(n);
        while mask.len() < n {
            let bits = rng.random::<u64>();
            for word in [bits as u32, (bits >> 32) as u32].into_iter().take(n - mask.len()) {
                mask.push(if (word as u64) < threshold { scale } else { 0.0 });
            }
        }
        Some(TensorData::new(mask, dims.to_vec()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_gives_the_same_masks_on_any_thread_and_scales_kept_values() {
        let device = Device::flex().autodiff();
        let dropout = DropoutConfig::new(0.25).init();
        let draw = || with_mask_stream(7, || dropout.forward(Tensor::<2>::ones([64, 100], &device)).into_data().try_to_vec::<f32>().unwrap());
        let here = draw();
        let there = std::thread::scope(|s| s.spawn(draw).join().unwrap());
        assert_eq!(here, there);
        assert!(here.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6));
        let kept = here.iter().filter(|&&v| v > 0.0).count() as f64 / here.len() as f64;
        assert!((kept - 0.75).abs() < 0.03, "kept {kept}");
        assert_ne!(here, with_mask_stream(8, || dropout.forward(Tensor::<2>::ones([64, 100], &device)).into_data().try_to_vec::<f32>().unwrap()));
        // Inference and p = 0 leave the input as it is.
        let x = Tensor::<2>::ones([4, 4], &device.clone().without_autodiff());
        assert_eq!(dropout.forward(x.clone()).into_data(), x.into_data());
    }
}
