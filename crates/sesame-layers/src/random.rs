//! Random numbers that do not depend on which thread draws them.
//!
//! Burn's CPU backends keep one global generator. That is reproducible only while a single
//! thread draws from it: two micro-batches trained at once would interleave their draws in
//! whatever order the threads run. Inside [`with_stream`], the layers that draw (dropout,
//! ELECTRA's sampler) take their numbers from a generator owned by the calling thread and
//! seeded by the caller, on the host: one stream per micro-batch gives the same numbers whichever
//! thread runs it and however many run at once. Outside it they use the device's generator.

use std::cell::RefCell;

use burn::prelude::*;
use burn::tensor::{Distribution, TensorData};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

thread_local! {
    static STREAM: RefCell<Option<SmallRng>> = const { RefCell::new(None) };
}

/// Run `f` with this thread's random numbers drawn from a generator seeded with `seed`.
/// Nested calls restore the outer stream when they return.
pub fn with_stream<R>(seed: u64, f: impl FnOnce() -> R) -> R {
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

/// `n` draws from this thread's stream, `None` outside [`with_stream`].
fn draw<T>(n: usize, mut each: impl FnMut(&mut SmallRng) -> T) -> Option<Vec<T>> {
    STREAM.with(|s| s.borrow_mut().as_mut().map(|rng| (0..n).map(|_| each(rng)).collect()))
}

/// A mask of `0` and `1 / keep`, each element kept with probability `keep`, from this thread's
/// stream; `None` outside [`with_stream`].
pub(crate) fn keep_mask(dims: &[usize], keep: f64) -> Option<TensorData> {
    // Keep when a uniform u32 falls below keep · 2^32.
    let threshold = (keep * 4_294_967_296.0) as u64;
    let scale = (1.0 / keep) as f32;
    let mask = draw(dims.iter().product(), |rng| if (rng.random::<u32>() as u64) < threshold { scale } else { 0.0 })?;
    Some(TensorData::new(mask, dims.to_vec()))
}

/// Uniform samples in `[low, high)` of shape `dims` on `device`: from this thread's stream
/// inside [`with_stream`], else from the device's generator.
pub fn uniform<const D: usize>(dims: [usize; D], low: f64, high: f64, device: &Device) -> Tensor<D> {
    match draw(dims.iter().product(), |rng| rng.random_range(low..high) as f32) {
        Some(values) => Tensor::from_data(TensorData::new(values, dims.to_vec()), device),
        None => Tensor::random(dims, Distribution::Uniform(low, high), device),
    }
}
