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
                // burn-backend 0.22.1's default `gelu_backward` (used by every backend but
                // flex) differentiates the tanh approximation, not the erf GELU of the forward
                // pass. When gradients are wanted, build GELU from `erf`, whose backward is exact.
                if x.device().is_autodiff() {
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
