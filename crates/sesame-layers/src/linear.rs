//! The dense layer every family uses: Burn's `Linear` (the same parameters, initialisation and
//! checkpoint keys) that runs its product in int8 by itself once the model is quantised
//! ([`crate::int8::quantize`]), so no family has to ask for it.

use burn::module::Param;
use burn::prelude::*;

use crate::activation::Activation;
use crate::int8::Int8Weight;

/// Configuration of [`Linear`].
#[derive(Config, Debug)]
pub struct LinearConfig {
    /// Input width.
    pub d_input: usize,
    /// Output width.
    pub d_output: usize,
    /// Whether the layer adds a bias.
    #[config(default = true)]
    pub bias: bool,
}

impl LinearConfig {
    /// Build the layer on `device`, initialised as Burn's `Linear` is (Kaiming uniform).
    pub fn init(&self, device: &Device) -> Linear {
        let burn::nn::Linear { weight, bias } = burn::nn::LinearConfig::new(self.d_input, self.d_output).with_bias(self.bias).init(device);
        Linear::new(weight, bias)
    }
}

/// `y = x · weight + bias`, in int8 where the model was quantised and the input allows it.
#[derive(Module, Debug)]
pub struct Linear {
    /// `[d_input, d_output]` (Burn's layout; PyTorch's is the transpose, which loading and
    /// export take care of).
    pub weight: Param<Tensor<2>>,
    /// `[d_output]`.
    pub bias: Option<Param<Tensor<1>>>,
    /// The weight's int8 form once the model is quantised: held by the layer, so freed with it;
    /// never saved.
    pub int8: Int8Weight,
}

impl Linear {
    /// A float layer from its parameters.
    pub fn new(weight: Param<Tensor<2>>, bias: Option<Param<Tensor<1>>>) -> Self {
        Linear { weight, bias, int8: Int8Weight::default() }
    }

    /// `x` `[.., d_input]` to `[.., d_output]`, computed as one `[rows, d_input]` product (a
    /// 3-d input would otherwise be a batched product, which libtorch runs as one small GEMM
    /// per batch row). In int8 when the weight is quantised and `x` is host memory without
    /// gradients to track.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        self.on_rows(x, |x| match self.int8.forward(self, x, None) {
            Ok(y) => y,
            Err(x) => burn::tensor::module::linear(x, self.weight.val(), self.bias.as_ref().map(|b| b.val())),
        })
    }

    /// `activation(self.forward(x))`, with the same numbers; where the product runs in int8
    /// and the activation on the host, the product applies it to each tile of its output as it
    /// writes it, while the values are in cache.
    pub fn forward_activated<const D: usize>(&self, x: Tensor<D>, activation: Activation) -> Tensor<D> {
        let Some(then) = activation.in_place_on_host(&x.device(), x.dtype()) else {
            return activation.forward(self.forward(x));
        };
        self.on_rows(x, |x| match self.int8.forward(self, x, Some(then)) {
            Ok(y) => y,
            Err(x) => activation.forward(burn::tensor::module::linear(x, self.weight.val(), self.bias.as_ref().map(|b| b.val()))),
        })
    }

    /// `f` applied to `x` `[.., d_input]` as `[rows, d_input]`, giving `[.., d_output]`.
    fn on_rows<const D: usize>(&self, x: Tensor<D>, f: impl FnOnce(Tensor<2>) -> Tensor<2>) -> Tensor<D> {
        let dims = x.dims();
        let d_input = dims[D - 1];
        let y = f(x.reshape([dims[..D - 1].iter().product::<usize>(), d_input]));
        let mut out = dims;
        out[D - 1] = y.dims()[1];
        y.reshape(out)
    }
}
