//! The dense layer every family uses: Burn's `Linear` (the same parameters, initialisation and
//! checkpoint keys) that runs its product in int8 by itself once the model is quantised
//! ([`crate::int8::quantize`]), so no family has to ask for it.

use std::sync::Arc;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::activation::Activation;
use crate::int8::{self, PackedWeight};

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
        on_rows(x, |x| self.int8.forward(self, x, None).unwrap_or_else(|x| self.float_product(x)))
    }

    /// `activation(self.forward(x))`, with the same numbers; where the product runs in int8
    /// and the activation on the host, the product applies it to each tile of its output as it
    /// writes it, while the values are in cache.
    pub fn forward_activated<const D: usize>(&self, x: Tensor<D>, activation: Activation) -> Tensor<D> {
        let Some(then) = activation.in_place_on_host(&x.device(), x.dtype()) else {
            return activation.forward(self.forward(x));
        };
        on_rows(x, |x| self.int8.forward(self, x, Some(then)).unwrap_or_else(|x| activation.forward(self.float_product(x))))
    }

    /// `x · weight + bias` in float, `x` `[rows, d_input]`.
    fn float_product(&self, x: Tensor<2>) -> Tensor<2> {
        burn::tensor::module::linear(x, self.weight.val(), self.bias.as_ref().map(|b| b.val()))
    }
}

/// `f` applied to `x` `[.., d_input]` as `[rows, d_input]`, giving `[.., d_output]`.
pub(crate) fn on_rows<const D: usize>(x: Tensor<D>, f: impl FnOnce(Tensor<2>) -> Tensor<2>) -> Tensor<D> {
    let dims = x.dims();
    let d_input = dims[D - 1];
    let y = f(x.reshape([dims[..D - 1].iter().product::<usize>(), d_input]));
    let mut out = dims;
    out[D - 1] = y.dims()[1];
    y.reshape(out)
}

/// The int8 form of a [`Linear`]'s weight, once the model is quantised ([`int8::quantize`]):
/// the packed values and the id of the weight they were packed from (a layer whose weight has
/// since been replaced multiplies in float). Shared by clones, freed with the last of them,
/// never saved: a quantised model saves its weights as the floats they stand for, and loading
/// it quantises it again.
#[derive(Clone, Debug, Default)]
pub struct Int8Weight(Option<(ParamId, Arc<PackedWeight>)>);

impl Int8Weight {
    /// The packed weight, once quantised.
    pub fn packed(&self) -> Option<&Arc<PackedWeight>> {
        self.0.as_ref().map(|(_, packed)| packed)
    }

    /// `x` `[m, d_input]` times `linear`'s weight plus its bias in int8, each piece of the
    /// output passed through `then`; `x` back when it cannot run in int8 here (no packed
    /// weight for this weight, a device other than host memory, gradients to track).
    pub(crate) fn forward(&self, linear: &Linear, x: Tensor<2>, then: Option<fn(&mut [f32])>) -> Result<Tensor<2>, Tensor<2>> {
        let Some((id, weight)) = &self.0 else { return Err(x) };
        let usable = *id == linear.weight.id
            && crate::device::is_host_memory(&x.device())
            && !x.is_require_grad()
            && !linear.weight.val().is_require_grad()
            && x.dims()[1] == weight.k;
        if !usable {
            return Err(x);
        }
        let (device, dtype, [m, _]) = (x.device(), x.dtype(), x.dims());
        let data = x.into_data();
        let back = |data: &TensorData| Tensor::from_data(data.clone(), &device);
        let values = match data.as_slice::<f32>() {
            Ok(values) => std::borrow::Cow::Borrowed(values),
            Err(_) => std::borrow::Cow::Owned(data.clone().convert::<f32>().try_into_vec::<f32>().map_err(|_| back(&data))?),
        };
        let bias = match &linear.bias {
            Some(b) => Some(b.val().into_data().convert::<f32>().try_into_vec::<f32>().map_err(|_| back(&data))?),
            None => None,
        };
        let y = weight.matmul_then(&values, m, bias.as_deref(), then);
        Ok(Tensor::from_data(TensorData::new(y, [m, weight.n]).convert_dtype(dtype), &device))
    }
}

impl Module for Int8Weight {
    fn visit<V: ModuleVisitor>(&self, _visitor: &mut V) {
        if self.0.is_some() {
            int8::seen_packed();
        }
    }
    /// Takes the weight `quantize` has just packed beside it, if any.
    fn map<M: ModuleMapper>(self, _mapper: &mut M) -> Self {
        match int8::take_packed() {
            Some(packed) => Int8Weight(Some(packed)),
            None => self,
        }
    }
    fn to_device(self, _device: &Device) -> Self {
        self
    }
    fn fork(self, _device: &Device) -> Self {
        self
    }
    fn collect_devices(&self, devices: burn::module::Devices) -> burn::module::Devices {
        devices
    }
    fn materialize(self) -> Self {
        self
    }
    fn valid(&self) -> Self {
        self.clone()
    }
    fn train(self) -> Self {
        self
    }
}

impl burn::module::ModuleDisplayDefault for Int8Weight {
    fn content(&self, content: burn::module::Content) -> Option<burn::module::Content> {
        content.add_formatted(&if self.0.is_some() { "int8" } else { "float" }).optional()
    }
}

impl burn::module::ModuleDisplay for Int8Weight {}

#[cfg(test)]
mod tests {
    use super::*;

    /// An activation applied by the int8 product gives the numbers of the product, then the
    /// activation, on flex: both GELUs, applied inside the kernel, and an activation it does
    /// not take (ReLU).
    #[test]
    fn an_activation_in_the_product_gives_the_numbers_of_one_after_it() {
        let device = Device::flex();
        let linear = int8::quantize(LinearConfig::new(70, 150).init(&device));
        let x = Tensor::<3>::random([2, 9, 70], burn::tensor::Distribution::Normal(0.0, 2.0), &device);
        for activation in [Activation::Gelu, Activation::GeluNew, Activation::Relu] {
            let fused = linear.forward_activated(x.clone(), activation).into_data();
            let after = activation.forward(linear.forward(x.clone())).into_data();
            assert_eq!(fused.as_slice::<f32>().unwrap(), after.as_slice::<f32>().unwrap(), "{activation:?}");
        }
        assert!(Activation::Gelu.in_place_on_host(&device, burn::tensor::DType::F32).is_some(), "GELU is applied inside the product on flex");
    }
}
