//! Hidden activations named as in HuggingFace configs (`hidden_act`).

use burn::tensor::{activation, Tensor};
use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// An element-wise activation, parsed from HF's `hidden_act` string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Activation {
    /// Exact (erf) GELU: HF `gelu`.
    Gelu,
    /// Tanh-approximated GELU: HF `gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`.
    GeluNew,
    /// HF `quick_gelu`: `x * sigmoid(1.702 x)`.
    QuickGelu,
    /// HF `relu`.
    Relu,
    /// HF `silu` / `swish`.
    Silu,
    /// HF `tanh`.
    Tanh,
}

impl Activation {
    /// Apply the activation element-wise.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        match self {
            Activation::Gelu => {
                // burn-backend 0.22.1's default `gelu_backward` (ndarray, CubeCL) differentiates
                // the tanh approximation, not the erf GELU of the forward pass; flex and
                // libtorch override it with the exact derivative. Where gradients are wanted
                // on the others, build GELU from `erf`, whose backward is exact (five ops
                // instead of one, each kept for the backward pass).
                let device = x.device();
                if device.is_autodiff() && !exact_gelu_backward(&device) {
                    x.clone() * (x / std::f64::consts::SQRT_2).erf().add_scalar(1.0) * 0.5
                } else {
                    activation::gelu(x)
                }
            }
            Activation::GeluNew => activation::gelu_approximate(x),
            Activation::QuickGelu => x.clone() * activation::sigmoid(x * 1.702),
            Activation::Relu => activation::relu(x),
            Activation::Silu => activation::silu(x),
            Activation::Tanh => activation::tanh(x),
        }
    }

    /// The HF name of this activation.
    pub fn name(&self) -> &'static str {
        match self {
            Activation::Gelu => "gelu",
            Activation::GeluNew => "gelu_new",
            Activation::QuickGelu => "quick_gelu",
            Activation::Relu => "relu",
            Activation::Silu => "silu",
            Activation::Tanh => "tanh",
        }
    }
}

/// Whether `device`'s backend differentiates `gelu` exactly: flex and libtorch (the backend
/// is only named in the device's debug form).
fn exact_gelu_backward(device: &burn::tensor::Device) -> bool {
    let name = format!("{device:?}");
    name.contains("Flex") || name.contains("LibTorch")
}

impl TryFrom<String> for Activation {
    type Error = ConfigError;
    fn try_from(name: String) -> Result<Self, ConfigError> {
        name.parse()
    }
}

impl std::str::FromStr for Activation {
    type Err = ConfigError;
    fn from_str(name: &str) -> Result<Self, ConfigError> {
        Ok(match name {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluNew,
            "quick_gelu" => Activation::QuickGelu,
            "relu" => Activation::Relu,
            "silu" | "swish" => Activation::Silu,
            "tanh" => Activation::Tanh,
            other => {
                return Err(ConfigError::Invalid {
                    field: "hidden_act".into(),
                    reason: format!(
                        "unsupported activation `{other}` (expected gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, quick_gelu, relu, silu, swish or tanh)"
                    ),
                })
            }
        })
    }
}

impl From<Activation> for String {
    fn from(a: Activation) -> String {
        a.name().to_string()
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor, TensorData};

    use super::*;

    #[test]
    fn gelu_gradients_are_the_exact_derivative() {
        let device = Device::flex().autodiff();
        assert!(exact_gelu_backward(&device), "flex takes the native GELU: {device:?}");
        let xs: Vec<f32> = (-30..=30).map(|i| i as f32 / 10.0).collect();
        let x = Tensor::<1>::from_data(TensorData::new(xs.clone(), [xs.len()]), &device).require_grad();
        let grads = Activation::Gelu.forward(x.clone()).sum().backward();
        let grad: Vec<f32> = x.grad(&grads).unwrap().into_data().convert::<f32>().try_to_vec().unwrap();
        for (x, g) in xs.iter().map(|&x| x as f64).zip(grad) {
            let cdf = 0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2));
            let exact = cdf + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            assert!((g as f64 - exact).abs() < 1e-5, "d gelu({x}) = {g}, exact {exact}");
        }
    }

    /// erf from its Maclaurin series (converges to 1e-12 and better for |x| <= 3).
    fn erf(x: f64) -> f64 {
        let (mut term, mut sum, mut n) = (x, x, 0.0);
        while term.abs() > 1e-15 {
            n += 1.0;
            term *= -x * x / n;
            sum += term / (2.0 * n + 1.0);
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    }
}
