//! Dropout that a trainer can make reproducible per micro-batch: Burn's `Dropout` (same
//! fields, same records, kept values scaled by `1 / (1 - prob)`), except that inside
//! [`crate::random::with_stream`] its masks come from the calling thread's seeded stream
//! (see [`crate::random`]). Outside it, masks come from the device's generator as in Burn.

use burn::module::{Flag, Module, Param};
use burn::prelude::*;
use burn::tensor::{DType, Distribution};

use crate::random::keep_mask;
use crate::packing::Packing;

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

std::thread_local! {
    /// Whether dropout acts on a device without autodiff too ([`with_training_dropout`]).
    static WITHOUT_AUTODIFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `f()` with every [`Dropout`] acting as in training on this thread even on a device without
/// autodiff: a forward pass that draws the masks a training pass draws, without building the
/// autodiff graph (GradCache's first pass, whose activations are not kept).
pub fn with_training_dropout<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            WITHOUT_AUTODIFF.with(|w| w.set(self.0));
        }
    }
    let _restore = Restore(WITHOUT_AUTODIFF.with(|w| w.replace(true)));
    f()
}

/// `model` with its parameters off autodiff but its flags as they are (where `valid()` clears
/// the flags, and so its dropout): with [`with_training_dropout`], a forward pass that draws
/// the masks of training without building a graph.
pub fn without_autodiff<M: Module>(model: M) -> M {
    struct WithoutAutodiff;
    impl burn::module::ModuleMapper for WithoutAutodiff {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            param.map(Tensor::without_autodiff)
        }
    }
    model.map(&mut WithoutAutodiff)
}

/// Zeroes elements at random with probability `prob` during training and scales the rest by
/// `1 / (1 - prob)`; the identity in inference (no autodiff device outside
/// [`with_training_dropout`], or the flag cleared).
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
        self.prob > 0.0 && self.training.is_enabled() && (device.is_autodiff() || WITHOUT_AUTODIFF.with(std::cell::Cell::get))
    }

    /// [`Dropout::forward`] of `x`, laid out as `packing` packs a batch's tokens when one is
    /// given (`[1, tokens, d]`): the mask is then drawn for the padded batch `[batch, seq, d]`
    /// and packed as the tokens are, so that a packed training run draws the masks, and takes
    /// the steps, of the padded one.
    pub fn forward_in(&self, x: Tensor<3>, packing: Option<&Packing>) -> Tensor<3> {
        let Some(packing) = packing else { return self.forward(x) };
        if !self.is_active(&x.device()) {
            return x;
        }
        let [batch, seq] = packing.batch_shape();
        let mask = self.mask([batch, seq, x.dims()[2]], &x.device(), x.dtype());
        x * packing.pack(mask)
    }

    /// `input` with dropout applied. Shapes: `[..., any]` → the same.
    pub fn forward<const D: usize>(&self, input: Tensor<D>) -> Tensor<D> {
        if !self.is_active(&input.device()) {
            return input;
        }
        let mask = self.mask(input.dims(), &input.device(), input.dtype());
        input * mask
    }

    /// A mask of `shape` in `dtype`: `1 / keep` where an element is kept, 0 where it is
    /// dropped. Drawn on the host from this thread's stream where [`keep_mask`] gives one, else
    /// by the device.
    fn mask<const D: usize>(&self, shape: [usize; D], device: &Device, dtype: DType) -> Tensor<D> {
        let keep = 1.0 - self.prob;
        let mask = match keep_mask(&shape, keep) {
            Some(mask) => Tensor::<D>::from_data(mask, device),
            None => Tensor::<D>::random(shape, Distribution::Bernoulli(keep), device) * (1.0 / keep),
        };
        if mask.dtype() == dtype { mask } else { mask.cast(dtype) }
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

    #[derive(Module, Debug)]
    struct Tiny {
        weight: Param<Tensor<2>>,
        dropout: Dropout,
    }

    impl Tiny {
        fn forward(&self, x: Tensor<2>) -> Tensor<2> {
            self.dropout.forward(x.matmul(self.weight.val()))
        }
    }

    /// GradCache's first pass: the model off autodiff, under `with_training_dropout`, gives what
    /// the training pass gives from the same stream, without a graph; without it, no dropout.
    #[test]
    fn a_model_off_autodiff_under_training_dropout_draws_the_training_masks() {
        let device = Device::flex().autodiff();
        let weight = Tensor::<2>::from_data(TensorData::new((0..48).map(|i| (i % 7) as f32 * 0.25 - 0.5).collect::<Vec<f32>>(), [6, 8]), &device).require_grad();
        let model = Tiny { weight: Param::from_tensor(weight), dropout: DropoutConfig::new(0.3).init() };
        let x = Tensor::<2>::from_data(TensorData::new((0..30).map(|i| (i % 5) as f32 - 1.0).collect::<Vec<f32>>(), [5, 6]), &device);
        let values = |t: Tensor<2>| t.into_data().try_to_vec::<f32>().unwrap();
        let trained = with_stream(3, || model.forward(x.clone()));
        let inner = without_autodiff(model.clone());
        let x_inner = x.clone().without_autodiff();
        let first = with_stream(3, || with_training_dropout(|| inner.forward(x_inner.clone())));
        assert!(!first.is_autodiff() && inner.dropout.training.is_enabled());
        assert_eq!(values(first), values(trained.clone()));
        let plain = values(with_stream(3, || inner.forward(x_inner.clone())));
        assert_eq!(plain, values(x.matmul(model.weight.val())));
        assert_ne!(plain, values(trained));
    }
}
