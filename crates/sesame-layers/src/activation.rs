//! Hidden activations named as in HuggingFace configs (`hidden_act`).

use burn::tensor::{activation, DType, Tensor, TensorData};
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
            // burn-backend 0.22.1's default `gelu_backward` (ndarray, CubeCL) differentiates
            // the tanh approximation, not the erf GELU of the forward pass; flex and libtorch
            // override it with the exact derivative. Where gradients are wanted on the others,
            // build GELU from `erf`, whose backward is exact (five ops instead of one, each kept
            // for the backward pass).
            Activation::Gelu => on_host_or(x, gelu_in_place, #[inline(always)] |x| gelu_slope_offset(x), |x| {
                let device = x.device();
                if device.is_autodiff() && !exact_gelu_backward(&device) {
                    x.clone() * (x / std::f64::consts::SQRT_2).erf().add_scalar(1.0) * 0.5
                } else {
                    activation::gelu(x)
                }
            }),
            // Burn composes it of seven operations, with libm's scalar `powf` and `tanhf` per
            // element on flex (43% of ALBERT-base's inference there).
            Activation::GeluNew => on_host_or(x, gelu_tanh_in_place, #[inline(always)] |x| gelu_tanh_slope_offset(x), activation::gelu_approximate),
            Activation::QuickGelu => x.clone() * activation::sigmoid(x * 1.702),
            Activation::Relu => activation::relu(x),
            Activation::Silu => activation::silu(x),
            Activation::Tanh => activation::tanh(x),
        }
    }

    /// This activation as a pass over host values in place, where [`Activation::forward`] runs
    /// it so on `device` for `dtype` (either GELU, without autodiff, on flex and ndarray): the
    /// same numbers, element by element, in whatever pieces it is given. The int8 product
    /// applies it to each block of its output once the block is written.
    pub(crate) fn in_place_on_host(&self, device: &burn::tensor::Device, dtype: DType) -> Option<fn(&mut [f32])> {
        if !host_gelu(device, dtype) || device.is_autodiff() {
            return None;
        }
        match self {
            Activation::Gelu => Some(gelu_in_place),
            Activation::GeluNew => Some(gelu_tanh_in_place),
            _ => None,
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

/// Whether the GELUs of values of `dtype` run on the host, forward and backward: f32 on flex
/// and ndarray, whose `erf` is a scalar libm call per element (15% of MiniLM's inference on
/// flex), while the tensor's memory is the host's, so taking it out and back costs no copy on
/// flex.
fn host_gelu(device: &burn::tensor::Device, dtype: DType) -> bool {
    crate::device::is_host_memory(device) && dtype == DType::F32
}

/// An activation computed on the host where `x`'s values are host memory (flex and ndarray)
/// and f32, whose own `erf`, `powf` and `tanh` are scalar libm calls per element: `in_place`
/// over the values without autodiff, [`linearised`] by `slope_offset` with it. `backend` (the
/// backend's operations, with the right gradient) elsewhere.
fn on_host_or<const D: usize, S: Fn(f32) -> (f32, f32)>(
    x: Tensor<D>,
    in_place: fn(&mut [f32]),
    slope_offset: S,
    backend: fn(Tensor<D>) -> Tensor<D>,
) -> Tensor<D> {
    let device = x.device();
    if !host_gelu(&device, x.dtype()) {
        return backend(x);
    }
    if !device.is_autodiff() {
        return on_host(x, in_place, backend);
    }
    match linearised(&x, slope_offset) {
        Some(y) => y,
        None => backend(x),
    }
}

/// `x` with `in_place` applied to its values on the host (a forward pass without gradients);
/// `backend` (the backend's own operation) where they cannot be read as f32 in place.
fn on_host<const D: usize>(x: Tensor<D>, in_place: fn(&mut [f32]), backend: fn(Tensor<D>) -> Tensor<D>) -> Tensor<D> {
    let device = x.device();
    let mut data = x.into_data();
    match data.as_mut_slice::<f32>() {
        Ok(values) => {
            in_place(values);
            Tensor::from_data(data, &device)
        }
        // Bytes that cannot be read as f32 in place (not aligned).
        Err(_) => backend(Tensor::from_data(data, &device)),
    }
}

/// `f` applied to `values` in place, in one loop the compiler vectorises (compiled for AVX2
/// where the CPU has it; `f` is inlined into it: pass an `#[inline(always)]` function). A loop
/// over blocks of eight was tried: its body is left to the SLP vectoriser, which compiled it
/// to scalar code in one of its copies (tanh GELU inside the int8 product, 43% of ALBERT's
/// int8 forward).
#[inline(always)]
fn map_in_place<F: Fn(f32) -> f32>(values: &mut [f32], f: F) {
    crate::device::vectorised(#[inline(always)] || {
        for v in values.iter_mut() {
            *v = f(*v);
        }
    });
}

/// Exact-form GELU, `x/2 · (1 + erf(x/√2))`, with [`erf_f32`].
#[inline(always)]
fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// [`gelu_erf`] of `values` in place.
fn gelu_in_place(values: &mut [f32]) {
    map_in_place(values, gelu_erf);
}

/// `√(2/π)`, and the cubic's coefficient, of the tanh approximation of GELU.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_TANH_CUBIC: f32 = 0.044_715;

/// The tanh approximation of GELU (HF `gelu_new`), `x/2 · (1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + tanh_f32(SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x)))
}

/// [`gelu_tanh`] of `values` in place.
fn gelu_tanh_in_place(values: &mut [f32]) {
    map_in_place(values, gelu_tanh);
}

/// `tanh(u)` in single precision as `1 − 2/(e^{2u} + 1)` with [`exp_f32`]: ±1 where `e^{2u}`
/// leaves the floats, within 2e-7 of tanh elsewhere (absolute: what `1 + tanh` in GELU needs).
#[inline(always)]
fn tanh_f32(u: f32) -> f32 {
    1.0 - 2.0 / (exp_f32(2.0 * u) + 1.0)
}

/// For the tanh GELU at `x₀`, its derivative `a` and the offset `b = x₀·a − gelu(x₀)`
/// ([`linearised`]).
#[inline(always)]
fn gelu_tanh_slope_offset(x: f32) -> (f32, f32) {
    let t = tanh_f32(SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x));
    let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_TANH_CUBIC * x * x);
    let a = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
    (a, x * a - 0.5 * x * (1.0 + t))
}

/// An activation `f` with its exact gradient, for autodiff devices, from values computed on
/// the host: with `x₀` the values of `x` and `(a, b) = slope_offset(x₀)`, `a = f'(x₀)` and
/// `b = x₀·a − f(x₀)` are constants, and `x·a − b` equals `f(x₀)` with derivative `a`. Two
/// tracked operations and one vectorised host pass. `None` when the values cannot be read as
/// f32.
fn linearised<const D: usize>(x: &Tensor<D>, slope_offset: impl Fn(f32) -> (f32, f32)) -> Option<Tensor<D>> {
    let device = x.device();
    let shape = x.shape();
    let data = x.clone().detach().into_data();
    let values = data.as_slice::<f32>().ok()?;
    let (mut a, mut b) = (vec![0.0f32; values.len()], vec![0.0f32; values.len()]);
    crate::device::vectorised(#[inline(always)] || {
        for ((&v, a), b) in values.iter().zip(a.iter_mut()).zip(b.iter_mut()) {
            (*a, *b) = slope_offset(v);
        }
    });
    let constant = |v: Vec<f32>| Tensor::<D>::from_data(TensorData::new(v, shape.clone()), &device);
    Some(x.clone() * constant(a) - constant(b))
}

/// For exact-form GELU at `x₀`, its derivative `a = Φ(x₀) + x₀·φ(x₀)` and the offset
/// `b = x₀·a − x₀·Φ(x₀) = x₀²·φ(x₀)` ([`linearised`]): flex's `gelu` and its backward each call
/// libm's scalar `erff` per element (14% of the ELECTRA main job's step).
#[inline(always)]
fn gelu_slope_offset(x: f32) -> (f32, f32) {
    const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;
    let pdf = FRAC_1_SQRT_2PI * exp_f32(-0.5 * x * x);
    (0.5 * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2)) + x * pdf, pdf * (x * x))
}

/// `eˣ` in single precision as a branch-free polynomial (Cephes' `expf`: `x = n·ln 2 + r`,
/// `|r| ≤ ln 2 / 2`, a degree-7 fit of `eʳ`, scaled by `2ⁿ` through the exponent bits), within
/// 2 ulp of the exact value; 0 below −87.3 (where `eˣ` leaves the normal floats), ∞ above 88.3.
/// A loop of it vectorises, where `f32::exp` is a libm call per element.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in two parts, so that `n · LN_2_HI` is exact for the `n` that occur.
    const LN_2_HI: f32 = 0.693_359_4;
    const LN_2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 · 2²³ rounds to the nearest integer (a vectorisable `round`).
    const ROUND: f32 = 12_582_912.0;
    let clamped = x.clamp(-87.3, 88.3);
    let shifted = clamped * LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = clamped - n * LN_2_HI - n * LN_2_LO;
    let p = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5.000_000_1e-1]
        .iter()
        .fold(0.0f32, |acc, &c| acc * r + c);
    let y = p * r * r + r + 1.0;
    // `2ⁿ` from the bits of `shifted` (`1.5 · 2²³ + n`), not a float-to-int conversion, whose
    // saturating semantics do not vectorise.
    let scale = f32::from_bits(shifted.to_bits().wrapping_sub(0x4B40_0000).wrapping_add(127) << 23);
    if x < -87.3 {
        0.0
    } else if x > 88.3 {
        f32::INFINITY
    } else {
        // NaN passes through `r`.
        y * scale
    }
}

/// `erf` in single precision as a branch-free rational function (the odd/even minimax fit
/// Eigen and XLA use for `float`), within 5e-7 of the exact value; ±1 from |x| = 3.9, where
/// erf is 1 to single precision.
#[inline(always)]
fn erf_f32(x: f32) -> f32 {
    let saturated = x.abs() >= 3.9;
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = [
        -2.726_142_3e-10,
        2.770_681_4e-8,
        -2.101_024e-6,
        -5.692_506_4e-5,
        -7.349_906_3e-4,
        -2.954_600e-3,
        -1.609_603_3e-2,
    ]
    .iter()
    .fold(0.0f32, |acc, &c| acc * x2 + c);
    let q = [-1.456_607_2e-5, -2.133_740_6e-4, -1.682_827e-3, -7.373_329e-3, -1.426_473_9e-2]
        .iter()
        .fold(0.0f32, |acc, &c| acc * x2 + c);
    // |erf(x)| > 1 - 3.5e-8 rounds to 1 in single precision: exactly ±1 there, so that GELU
    // of a large negative input is 0, not -x·1e-7 (a select, which still vectorises).
    if saturated {
        1.0f32.copysign(x)
    } else {
        x * p / q
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

#[cfg(test)]
mod tests {
    use burn::tensor::Device;

    use super::*;

    #[test]
    fn gelu_gradients_are_the_exact_derivative() {
        let device = Device::flex().autodiff();
        assert!(host_gelu(&device, DType::F32), "training GELU on flex runs on the host: {device:?}");
        // The series below is exact to |x| = 5; flex's own GELU and its exact backward beyond.
        let xs: Vec<f32> = (-300..=300).map(|i| i as f32 / 60.0).chain([-6.0, -9.0, -60.0, -1e4, 7.0, 1e4]).collect();
        let n = xs.len();
        let ours = |x: Tensor<1>| Activation::Gelu.forward(x);
        let flexs = |x: Tensor<1>| activation::gelu(x);
        let run = |f: &dyn Fn(Tensor<1>) -> Tensor<1>| {
            let x = Tensor::<1>::from_data(TensorData::new(xs.clone(), [n]), &device).require_grad();
            let y = f(x.clone());
            let values: Vec<f32> = y.clone().into_data().convert::<f32>().try_to_vec().unwrap();
            let weights = Tensor::<1>::from_data(TensorData::new(vec![3.0f32; n], [n]), &device);
            let grads = (y * weights).sum().backward();
            let grad: Vec<f32> = x.grad(&grads).unwrap().into_data().convert::<f32>().try_to_vec().unwrap();
            (values, grad)
        };
        let ((values, grad), (flex_values, flex_grad)) = (run(&ours), run(&flexs));
        for (i, &x) in xs.iter().enumerate() {
            let tol = 1e-6 * x.abs().max(1.0);
            assert!((values[i] - flex_values[i]).abs() <= tol, "gelu({x}) = {}, flex {}", values[i], flex_values[i]);
            assert!((grad[i] - flex_grad[i]).abs() <= 3e-5, "3 · d gelu({x}) = {}, flex {}", grad[i], flex_grad[i]);
            if x.abs() <= 5.0 {
                let x = x as f64;
                let cdf = 0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2));
                let exact = cdf + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
                assert!((grad[i] as f64 / 3.0 - exact).abs() < 1e-5, "d gelu({x}) = {}, exact {exact}", grad[i] / 3.0);
            }
        }
    }

    /// The tanh GELU (`gelu_new`) on the host: its values and gradients against Burn's
    /// composition on flex and against the formula and its derivative in f64.
    #[test]
    fn tanh_gelu_on_the_host_gives_its_values_and_exact_derivative() {
        let gelu = |x: f64| 0.5 * x * (1.0 + (0.7978845608028654 * (x + 0.044715 * x * x * x)).tanh());
        let derivative = |x: f64| {
            let t = (0.7978845608028654 * (x + 0.044715 * x * x * x)).tanh();
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
        };
        let xs: Vec<f32> = (-600..=600).map(|i| i as f32 / 60.0).chain([-60.0, -1e4, 1e4, 1e-6, -1e-6]).collect();
        let n = xs.len();
        for device in [Device::flex(), Device::flex().autodiff()] {
            assert!(host_gelu(&device, DType::F32));
            let x = Tensor::<1>::from_data(TensorData::new(xs.clone(), [n]), &device);
            let x = if device.is_autodiff() { x.require_grad() } else { x };
            let y = Activation::GeluNew.forward(x.clone());
            let values: Vec<f32> = y.clone().into_data().convert::<f32>().try_to_vec().unwrap();
            let burns: Vec<f32> = activation::gelu_approximate(x.clone()).into_data().convert::<f32>().try_to_vec().unwrap();
            let grad: Option<Vec<f32>> = device.is_autodiff().then(|| {
                let grads = (y * 3.0).sum().backward();
                x.grad(&grads).unwrap().into_data().convert::<f32>().try_to_vec().unwrap()
            });
            for (i, &x) in xs.iter().enumerate() {
                let exact = gelu(x as f64);
                assert!((values[i] as f64 - exact).abs() <= 3e-7 * (x.abs() as f64).max(1.0), "gelu_new({x}) = {}, exact {exact}", values[i]);
                assert!((values[i] - burns[i]).abs() <= 1e-6 * x.abs().max(1.0), "gelu_new({x}) = {}, Burn's {}", values[i], burns[i]);
                if let Some(grad) = &grad {
                    let exact = derivative(x as f64);
                    assert!((grad[i] as f64 / 3.0 - exact).abs() < 1e-5, "d gelu_new({x}) = {}, exact {exact}", grad[i] / 3.0);
                }
            }
        }
        // The form the int8 product applies in place is the same function.
        let mut pieces = xs.clone();
        Activation::GeluNew.in_place_on_host(&Device::flex(), DType::F32).expect("on the host")(&mut pieces);
        assert!(pieces.iter().zip(&xs).all(|(&p, &x)| p == gelu_tanh(x)));
    }

    #[test]
    fn tanh_f32_is_within_2e_7_of_tanh() {
        for i in -20_000..=20_000 {
            let u = i as f32 / 1000.0;
            let err = (tanh_f32(u) as f64 - (u as f64).tanh()).abs();
            assert!(err < 2e-7, "tanh_f32({u}) is {err} from tanh");
        }
        assert_eq!((tanh_f32(1e4), tanh_f32(-1e4)), (1.0, -1.0));
        assert!(tanh_f32(f32::NAN).is_nan());
    }

    #[test]
    fn exp_f32_is_within_2_ulp_of_exp() {
        for i in -873_000..=883_000 {
            let x = i as f32 / 10_000.0;
            let exact = (x as f64).exp();
            let err = (exp_f32(x) as f64 - exact).abs() / exact;
            assert!(err < 2.5e-7, "exp_f32({x}) is {err} (relative) from exp");
        }
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(-87.31), 0.0);
        assert_eq!(exp_f32(-1e30), 0.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(88.31), f32::INFINITY);
        assert!(exp_f32(f32::NAN).is_nan());
    }

    /// `device::vectorised` compiles the same loop for AVX2 and FMA: the bits do not change.
    #[test]
    fn vectorised_loops_give_the_baseline_bits() {
        let xs: Vec<f32> = (-20_000..20_000).map(|i| i as f32 / 997.0).chain([f32::NAN, f32::INFINITY, -1e9]).collect();
        let loop_over = |xs: &[f32]| xs.iter().map(|&x| (exp_f32(x) + erf_f32(x)).to_bits()).collect::<Vec<u32>>();
        assert_eq!(crate::device::vectorised(|| loop_over(&xs)), loop_over(&xs));
    }

    #[test]
    fn erf_f32_is_within_5e_7_of_erf() {
        for i in -3000..=3000 {
            let x = i as f32 / 1000.0;
            let err = (erf_f32(x) as f64 - erf(x as f64)).abs();
            assert!(err < 5e-7, "erf_f32({x}) is {err} from erf");
        }
        // erf(4) = 1 - 1.5e-8: single precision's 1, where the clamp holds every larger input.
        assert_eq!(erf_f32(4.0), erf_f32(1e9));
        assert!((erf_f32(4.0) - 1.0).abs() < 1e-6 && erf_f32(-1e9) == -erf_f32(1e9));
    }

    #[test]
    fn gelu_on_the_host_matches_the_backends_gelu() {
        let device = Device::flex();
        assert!(host_gelu(&device, DType::F32), "inference GELU on flex runs on the host: {device:?}");
        let xs: Vec<f32> = (-2000..2000).map(|i| i as f32 / 100.0).collect();
        let x = Tensor::<2>::from_data(TensorData::new(xs.clone(), [2, xs.len() / 2]), &device);
        let ours: Vec<f32> = Activation::Gelu.forward(x.clone()).into_data().try_to_vec().unwrap();
        let burns: Vec<f32> = activation::gelu(x).into_data().try_to_vec().unwrap();
        for ((x, a), b) in xs.iter().zip(ours).zip(burns) {
            assert!((a - b).abs() <= 1e-6 * x.abs().max(1.0), "gelu({x}): {a} on the host, {b} from flex");
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
