//! Global-norm gradient clipping, as `torch.nn.utils.clip_grad_norm_` (Burn's built-in
//! clipping works per tensor).

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;

struct SquaredNorm<'a> {
    grads: &'a GradientsParams,
    total: Option<Tensor<1>>,
}

impl ModuleVisitor for SquaredNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            let s = g.square().sum();
            self.total = Some(match self.total.take() {
                Some(t) => t + s,
                None => s,
            });
        }
    }
}

struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: f64,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(param.id) {
            self.grads.register(param.id, g.mul_scalar(self.factor));
        }
    }
}

/// The global L2 norm of all gradients of `module`'s parameters.
pub fn global_norm<M: Module>(module: &M, grads: &GradientsParams) -> f64 {
    let mut visitor = SquaredNorm { grads, total: None };
    module.visit(&mut visitor);
    visitor.total.map(|t| t.sqrt().try_into_scalar::<f32>().map_or(f64::NAN, |v| v as f64)).unwrap_or(0.0)
}

/// Scale all gradients so that their global L2 norm is at most `max_norm`; returns the norm
/// before clipping. Like PyTorch, the factor is `max_norm / (norm + 1e-6)` when it is below 1.
pub fn clip_global_norm<M: Module>(module: &M, grads: &mut GradientsParams, max_norm: f64) -> f64 {
    let norm = global_norm(module, grads);
    let factor = max_norm / (norm + 1e-6);
    if factor < 1.0 {
        module.visit(&mut Scale { grads, factor });
    }
    norm
}
