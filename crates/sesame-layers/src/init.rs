//! HuggingFace's weight initialisation (`_init_weights` of the BERT family): matrices and
//! embedding tables from N(0, initializer_range), biases 0, LayerNorm scale 1 and shift 0.
//! Burn's defaults (N(0, 1) embeddings, Kaiming-uniform linears) give a fresh BERT an initial
//! MLM loss several times ln(vocab).
//!
//! Only parameters not yet set are touched, and they stay lazy: a model built, then loaded
//! from a checkpoint, then initialised allocates and draws values only for the tensors the
//! checkpoint lacked (a new task head), and a fresh model draws its values on first use.

use burn::module::{Module, ModuleMapper, Param};
use burn::prelude::*;
use burn::tensor::Distribution;

/// Initialises every float parameter not yet set as HF does.
#[derive(Debug)]
pub struct HfInit {
    std: f64,
    path: Vec<String>,
}

impl HfInit {
    /// Initialiser with standard deviation `initializer_range`.
    pub fn new(initializer_range: f64) -> Self {
        Self { std: initializer_range, path: Vec::new() }
    }
}

impl ModuleMapper for HfInit {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if param.is_initialized() {
            return param; // loaded, or set by the model itself
        }
        let name = self.path.last().map(String::as_str).unwrap_or("");
        let std = self.std;
        let kind = match (D, name) {
            (_, "gamma") => 1.0,
            (1, _) => 0.0,
            _ => f64::NAN,
        };
        let shape = param.lazy_shape();
        let init_shape = shape.clone();
        let init = move |device: &Device, require_grad: bool| {
            let value: Tensor<D> = if kind.is_nan() {
                Tensor::random(init_shape, Distribution::Normal(0.0, std), device)
            } else {
                Tensor::full(init_shape, kind, device)
            };
            if require_grad {
                value.require_grad()
            } else {
                value
            }
        };
        Param::uninitialized(param.id, init, param.lazy_device(), true, shape)
    }
}

/// `module` with HF's initialisation of every float parameter.
pub fn hf_init<M: Module>(module: M, initializer_range: f64) -> M {
    module.map(&mut HfInit::new(initializer_range))
}
