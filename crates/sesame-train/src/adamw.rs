//! AdamW (Loshchilov & Hutter's decoupled weight decay) as Burn's [`AdamW`] computes it, with
//! the step of each parameter in one pass over its memory on the CPU backends.

use burn::optim::{AdamW, AdamWConfig, AdamWState, AdaptiveMomentumState, LearningRate, Optimizer};
use burn::tensor::{DType, Device, Tensor, TensorData};
use sesame_layers::device::is_host_memory;

/// Burn's [`AdamW`] without AMSGrad: the same update, the same state and checkpoint record
/// ([`AdamWState`]), so runs resume across the two. On flex and ndarray, whose tensors are host
/// memory, a parameter's update reads the parameter, its gradient and both moments once and
/// writes them once, where Burn's runs fifteen tensor operations, each a pass over memory
/// into a buffer of its own. Elsewhere (libtorch, the GPU backends) it is Burn's.
#[derive(Clone)]
pub struct FusedAdamW {
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    weight_decay: f32,
    /// Burn's step, for the backends whose tensors are not host memory.
    tensor_ops: AdamW,
}

impl FusedAdamW {
    /// AdamW with moments' decay `beta_1`, `beta_2`, `epsilon` added to the root of the second
    /// moment, and decoupled weight decay `weight_decay` (times the learning rate).
    pub fn new(beta_1: f32, beta_2: f32, epsilon: f32, weight_decay: f32) -> Self {
        let tensor_ops = AdamWConfig::new()
            .with_beta_1(beta_1)
            .with_beta_2(beta_2)
            .with_epsilon(epsilon)
            .with_weight_decay(weight_decay)
            .build();
        Self { beta_1, beta_2, epsilon, weight_decay, tensor_ops }
    }
}

/// Parameters at least this large are updated on every core (each element's update is its own,
/// so the result does not depend on how the work is split).
const SPLIT_AT: usize = 1 << 18;

impl Optimizer for FusedAdamW {
    type State<const D: usize> = AdamWState<D>;

    fn step<const D: usize>(&self, lr: LearningRate, tensor: Tensor<D>, grad: Tensor<D>, state: Option<AdamWState<D>>) -> (Tensor<D>, Option<AdamWState<D>>) {
        let device = tensor.device();
        let amsgrad = state.as_ref().is_some_and(|s| s.momentum.max_moment_2.is_some());
        if !is_host_memory(&device) || tensor.dtype() != DType::F32 || grad.dtype() != DType::F32 || amsgrad {
            return self.tensor_ops.step(lr, tensor, grad, state);
        }
        let shape = tensor.shape();
        let n = shape.num_elements();
        let (time, moments) = match state {
            Some(s) => (s.momentum.time, Some((s.momentum.moment_1, s.momentum.moment_2))),
            None => (0, None),
        };
        let mut param = tensor.into_data().convert::<f32>();
        let grad = grad.into_data().convert::<f32>();
        // The first step starts both moments at zero: `β·0 + (1 − β)·g` is Burn's first value.
        let (mut moment_1, mut moment_2) = match moments {
            Some((m, v)) => (m.into_data().convert::<f32>(), v.into_data().convert::<f32>()),
            None => (TensorData::new(vec![0f32; n], shape.clone()), TensorData::new(vec![0f32; n], shape.clone())),
        };
        let time = time + 1;
        let update = Update::new(self, lr, time as i32);
        let (Ok(p), Ok(g), Ok(m), Ok(v)) = (param.as_mut_slice::<f32>(), grad.as_slice::<f32>(), moment_1.as_mut_slice::<f32>(), moment_2.as_mut_slice::<f32>()) else {
            unreachable!("f32 data converted above is readable as f32")
        };
        let threads = if n >= SPLIT_AT { std::thread::available_parallelism().map_or(1, |t| t.get()) } else { 1 };
        if threads > 1 {
            let chunk = n.div_ceil(threads);
            std::thread::scope(|scope| {
                for (((p, g), m), v) in p.chunks_mut(chunk).zip(g.chunks(chunk)).zip(m.chunks_mut(chunk)).zip(v.chunks_mut(chunk)) {
                    scope.spawn(move || update.apply(p, g, m, v));
                }
            });
        } else {
            update.apply(p, g, m, v);
        }
        let state = AdamWState { momentum: AdaptiveMomentumState { time, moment_1: Tensor::from_data(moment_1, &device), moment_2: Tensor::from_data(moment_2, &device), max_moment_2: None } };
        (Tensor::from_data(param, &device), Some(state))
    }

    fn to_device<const D: usize>(state: AdamWState<D>, device: &Device) -> AdamWState<D> {
        <AdamW as Optimizer>::to_device(state, device)
    }
}

/// One step's constants, in the precision Burn applies them (f32 scalars on f32 tensors).
#[derive(Clone, Copy)]
struct Update {
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    /// `1 − β₁`, `1 − β₂`.
    factor_1: f32,
    factor_2: f32,
    /// The bias corrections `1 − βᵗ`.
    correction_1: f32,
    correction_2: f32,
    /// `1 − lr·λ`, or `None` without weight decay.
    decay: Option<f32>,
    lr: f32,
}

impl Update {
    fn new(adam: &FusedAdamW, lr: LearningRate, time: i32) -> Self {
        let decay_rate = lr * adam.weight_decay as f64;
        Self {
            beta_1: adam.beta_1,
            beta_2: adam.beta_2,
            epsilon: adam.epsilon,
            factor_1: 1.0 - adam.beta_1,
            factor_2: 1.0 - adam.beta_2,
            correction_1: 1.0 - adam.beta_1.powi(time),
            correction_2: 1.0 - adam.beta_2.powi(time),
            decay: (decay_rate != 0.0).then_some((1.0 - decay_rate) as f32),
            lr: lr as f32,
        }
    }

    /// `m ← β₁m + (1 − β₁)g`, `v ← β₂v + (1 − β₂)g²`, `p ← p·(1 − lr·λ) − lr·m̂/(√v̂ + ε)`, in
    /// Burn's order of operations.
    fn apply(self, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
        for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
            *m = *m * self.beta_1 + g * self.factor_1;
            *v = *v * self.beta_2 + g * g * self.factor_2;
            let delta = (*m / self.correction_1) / ((*v / self.correction_2).sqrt() + self.epsilon);
            let decayed = match self.decay {
                Some(decay) => *p * decay,
                None => *p,
            };
            *p = decayed - delta * self.lr;
        }
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::*;
    use burn::tensor::Distribution;

    /// Several steps with and without weight decay, on a parameter large enough to be split
    /// over threads and on a small one: Burn's AdamW's parameters and moments, to rounding.
    #[test]
    fn the_fused_step_is_burn_s_adamw() {
        let device = Device::flex();
        for (weight_decay, n) in [(0.01f32, SPLIT_AT + 3), (0.0, 37)] {
            let fused = FusedAdamW::new(0.9, 0.999, 1e-6, weight_decay);
            let burn = AdamWConfig::new().with_beta_1(0.9).with_beta_2(0.999).with_epsilon(1e-6).with_weight_decay(weight_decay).build();
            let start = Tensor::<2>::random([n, 1], Distribution::Normal(0.0, 1.0), &device);
            let initial = start.clone().into_data();
            let (mut ours, mut theirs) = ((start.clone(), None), (start, None));
            for step in 0..4 {
                let grad = Tensor::<2>::random([n, 1], Distribution::Normal(0.0, 0.1 * (step + 1) as f64), &device);
                let lr = 1e-3 * (step + 1) as f64;
                ours = fused.step(lr, ours.0, grad.clone(), ours.1);
                theirs = burn.step(lr, theirs.0, grad, theirs.1);
                let tolerance = burn::tensor::Tolerance::<f32>::relative(1e-5).set_absolute(1e-7);
                ours.0.clone().into_data().assert_approx_eq::<f32>(&theirs.0.clone().into_data(), tolerance);
                let (a, b): (&AdamWState<2>, &AdamWState<2>) = (ours.1.as_ref().unwrap(), theirs.1.as_ref().unwrap());
                assert_eq!(a.momentum.time, b.momentum.time);
                a.momentum.moment_1.clone().into_data().assert_approx_eq::<f32>(&b.momentum.moment_1.clone().into_data(), tolerance);
                a.momentum.moment_2.clone().into_data().assert_approx_eq::<f32>(&b.momentum.moment_2.clone().into_data(), tolerance);
                if step == 0 {
                    // Every element moved by about lr (the first step's update is ±lr where
                    // the gradient is not 0): the comparison is not of unchanged tensors.
                    // (Later steps can bring an element back to its start.)
                    let moved = ours.0.clone().into_data();
                    let pairs = moved.as_slice::<f32>().unwrap().iter().zip(initial.as_slice::<f32>().unwrap());
                    assert!(pairs.clone().all(|(a, b)| a != b), "a parameter did not move");
                }
            }
        }
    }
}
