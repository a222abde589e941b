//! Post-training dynamic int8 quantisation of every `Linear` layer (Q8BERT's symmetric linear
//! scheme, applied after training as ONNX Runtime's dynamic quantisation applies it).
//!
//! - **Weights**: per output channel, symmetric: column `j` of a `[d_in, d_out]` weight gets
//!   the scale `s_j = max_i |w_ij| / 127` and the values `q_ij = round(w_ij / s_j)` in
//!   `-127..=127`. [`quantize`] replaces each weight by `q_ij · s_j`, its int8 value, so a
//!   quantised model is an ordinary model: it saves, loads and runs on every backend, and the
//!   int8 values and scales are recovered exactly from it (the largest `|q|` of a column is 127).
//! - **Activations**: quantised when each product runs, symmetric, to `-127..=127`, with a
//!   scale per row (token) and group of 64 inputs: a scale per tensor or per row loses too
//!   much on short sentences, whose few tokens vary most in magnitude
//!   (docs/history/performance.md has the cosines measured).
//! - **Products**: on host-memory backends (flex, ndarray) `Linear::forward` multiplies the int8
//!   values with 32-bit integer sums per group (AMX's tile products `tdpbusd`, AVX-512 VNNI or
//!   AVX-VNNI `vpdpbusd`, else AVX2, where the CPU has them, portable code elsewhere: the same sums and float steps, so
//!   the same numbers), adds the groups' sums times their scales in float, then scales by
//!   `s_j` and adds the bias; a large product's rows are split across rayon's threads. x86
//!   multiplies bytes only unsigned by signed (`vpmaddubsw`, `vpdpbusd`): the VNNI kernels
//!   multiply `x + 128` by the weights and take `128 · Σw` (packed with the weight, per group)
//!   off the sums, as ONNX Runtime and oneDNN do; AVX2, whose pairs are summed in 16 bits, takes
//!   `|x|` and moves the sign of `x` onto the weight (`vpsignb`), so no pair sum exceeds 16 bits.
//!   The form a kernel reads is made in the one pass that quantises `x`. The output is written
//!   once, not zeroed first; `Linear::forward_activated` has the kernel apply an activation
//!   that runs on the host (either GELU) to each block of it while it is in cache. Other backends
//!   multiply the quantised weights in floating point.
//!
//! Each `Linear` holds its packed int8 weight (`Int8Weight`), a quarter of the float
//! weight's memory, freed with the model. The x86 kernels are in their own module, `x86`.
//!
//! Burn's own quantisation (`Module::quantize_weights`) is not used: it stores the weights
//! quantised, and on the CPU backends its product dequantises them and multiplies in float,
//! so it saves memory but not time, and its weights do not save as the plain floats that
//! transformers loads.

use std::cell::{Cell, RefCell};
use std::mem::MaybeUninit;
use std::sync::Arc;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::prelude::*;
use burn::tensor::TensorData;

/// The largest weight magnitude, in int8 units.
pub const WEIGHT_MAX: f32 = 127.0;
/// The largest activation magnitude, in int8 units.
pub const ACTIVATION_MAX: f32 = 127.0;
/// Columns per packed panel.
const PANEL: usize = 16;
/// Inputs per activation scale (a multiple of 4: a group is whole steps of the kernel).
pub const GROUP: usize = 64;
/// Multiply-adds from which a product's rows are split across threads.
const PARALLEL_AT: usize = 1 << 21;

/// The instructions the int8 product runs with, the best the CPU has. Each gives the same
/// 32-bit sums, so the same numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kernel {
    /// AMX's `tdpbusd` (a group of 64 inputs for 16 rows × 16 columns in one instruction),
    /// with AVX-512 VNNI for the rows short of a tile.
    #[cfg(target_arch = "x86_64")]
    Amx,
    /// `vpdpbusd` on 512 bits (AVX-512 VNNI): four byte products summed into each 32-bit lane
    /// in one instruction, a panel's 16 columns in one register.
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
    /// The same instruction in its 256-bit VEX form (AVX-VNNI).
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    /// `vpmaddubsw` (pair sums in 16 bits), then `vpmaddwd` by ones.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Portable,
}

impl Kernel {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("avx512f") && has!("avx512vnni") {
                return if x86::amx::available() { Kernel::Amx } else { Kernel::Avx512Vnni };
            }
            if has!("avx2") && has!("avxvnni") {
                return Kernel::AvxVnni;
            }
            if has!("avx2") {
                return Kernel::Avx2;
            }
        }
        Kernel::Portable
    }

    /// The unsigned operand the x86 kernels multiply (x86 multiplies bytes only unsigned by
    /// signed): `q + 128` where the 32-bit sums have no 16-bit step (`vpdpbusd`; the packed
    /// weight's `offsets` take `128 · Σw` back off), `|q|` with `q`'s sign moved onto the weight
    /// where pairs are summed in 16 bits first (`vpmaddubsw`, which `(q + 128) · w` would
    /// saturate).
    fn operand(self) -> Operand {
        match self {
            #[cfg(target_arch = "x86_64")]
            Kernel::Amx | Kernel::Avx512Vnni | Kernel::AvxVnni => Operand::Offset,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => Operand::Magnitude,
            Kernel::Portable => Operand::None,
        }
    }

    /// This kernel and every slower one this CPU runs (for tests).
    #[cfg(test)]
    fn available() -> Vec<Self> {
        let best = Self::detect();
        #[cfg(target_arch = "x86_64")]
        let all = [Kernel::Amx, Kernel::Avx512Vnni, Kernel::AvxVnni, Kernel::Avx2, Kernel::Portable];
        #[cfg(not(target_arch = "x86_64"))]
        let all = [Kernel::Portable];
        #[cfg(target_arch = "x86_64")]
        let runs = |k: &Kernel| match k {
            Kernel::Amx => best == Kernel::Amx,
            Kernel::Avx512Vnni => matches!(best, Kernel::Amx | Kernel::Avx512Vnni),
            Kernel::AvxVnni => std::arch::is_x86_feature_detected!("avxvnni"),
            Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            Kernel::Portable => true,
        };
        #[cfg(not(target_arch = "x86_64"))]
        let runs = |_: &Kernel| true;
        all.into_iter().filter(runs).collect()
    }
}

/// What [`Kernel::operand`] reads beside the quantised activations `q`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Operand {
    /// `q + 128`, the byte `q ^ 0x80` (128 in the padding).
    #[cfg(target_arch = "x86_64")]
    Offset,
    /// `|q|`.
    #[cfg(target_arch = "x86_64")]
    Magnitude,
    /// Nothing: the portable code reads `q`.
    None,
}

/// The key `config.json` carries for a model saved quantised (transformers keeps unknown keys,
/// so the directory still loads there, with the int8 weights as floats).
pub const CONFIG_KEY: &str = "sesame_int8";

/// A weight `[k, n]` packed for the int8 product: panels of 16 output columns, each
/// `[k4 / 4][16][4]` (four consecutive `k` of one column together), `k` padded with zeros to
/// `k4`, a multiple of 4.
#[derive(Debug)]
pub struct PackedWeight {
    /// Input width.
    pub k: usize,
    /// Output width.
    pub n: usize,
    k4: usize,
    panels: Vec<i8>,
    /// Per output column, `s_j`; padded to whole panels with zeros.
    scales: Vec<f32>,
    /// `-128 · Σ q_ij` over each group's inputs `i`: `[panels][groups][16]`, what an offset
    /// operand (`q + 128`) needs added to a group's sums.
    offsets: Vec<i32>,
}

impl PackedWeight {
    /// Quantise `w` `[k, n]` (row-major, Burn's `[in, out]`): the packed weight and the
    /// float values `q_ij · s_j` it stands for.
    pub fn quantize(w: &[f32], k: usize, n: usize) -> (Self, Vec<f32>) {
        assert_eq!(w.len(), k * n, "a [{k}, {n}] weight");
        let mut scales = vec![0.0f32; n.div_ceil(PANEL) * PANEL];
        for row in w.chunks_exact(n) {
            for (s, &v) in scales.iter_mut().zip(row) {
                *s = s.max(v.abs());
            }
        }
        for s in scales.iter_mut() {
            *s /= WEIGHT_MAX;
        }
        let q: Vec<i8> = w
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let s = scales[i % n];
                if s > 0.0 { (v / s).round().clamp(-WEIGHT_MAX, WEIGHT_MAX) as i8 } else { 0 }
            })
            .collect();
        let snapped = q.iter().enumerate().map(|(i, &q)| q as f32 * scales[i % n]).collect();
        (Self::pack(&q, k, n, scales), snapped)
    }

    fn pack(q: &[i8], k: usize, n: usize, scales: Vec<f32>) -> Self {
        let k4 = k.div_ceil(4) * 4;
        let n_panels = n.div_ceil(PANEL);
        let groups = k4.div_ceil(GROUP).max(1);
        let mut panels = vec![0i8; n_panels * k4 * PANEL];
        let mut offsets = vec![0i32; n_panels * groups * PANEL];
        for i in 0..k {
            for j in 0..n {
                let v = q[i * n + j];
                let (panel, c) = (j / PANEL, j % PANEL);
                panels[panel * k4 * PANEL + (i / 4) * PANEL * 4 + c * 4 + i % 4] = v;
                offsets[(panel * groups + i / GROUP) * PANEL + c] -= 128 * v as i32;
            }
        }
        PackedWeight { k, n, k4, panels, scales, offsets }
    }

    /// `x` `[m, k]` (row-major) times this weight, plus `bias` `[n]`: `[m, n]` row-major.
    /// Each row of `x` is quantised by groups of [`GROUP`] inputs; a row holding NaN or
    /// infinity gives NaN.
    pub fn matmul(&self, x: &[f32], m: usize, bias: Option<&[f32]>) -> Vec<f32> {
        self.matmul_then(x, m, bias, None)
    }

    /// [`PackedWeight::matmul`], then `then` applied to the output as it is written (an
    /// element-wise function, such as an activation): by blocks of panels while they are in
    /// cache with the AVX-512 kernel, over the whole output after the others.
    pub fn matmul_then(&self, x: &[f32], m: usize, bias: Option<&[f32]>, then: Option<fn(&mut [f32])>) -> Vec<f32> {
        let (k, k4, n) = (self.k, self.k4, self.n);
        assert_eq!(x.len(), m * k, "an [{m}, {k}] input");
        let mut row_scales = vec![0.0f32; m * self.groups()];
        let kernel = Kernel::detect();
        // The x86 kernels read an unsigned form of `xq` (the unsigned operand of their byte
        // products), the padding and zero groups included; those of the offset form read only it.
        let (mut xq, mut xa) = (Vec::new(), Vec::new());
        match kernel.operand() {
            Operand::None => {
                xq = vec![0i8; m * k4];
                quantize_rows(x, k, k4, &mut xq, &mut row_scales);
            }
            // SAFETY: the kernel is detected with AVX-512 F present; the quantisation writes
            // every byte of `xa`.
            #[cfg(target_arch = "x86_64")]
            Operand::Offset if matches!(kernel, Kernel::Amx | Kernel::Avx512Vnni) => unsafe {
                xa.reserve_exact(m * k4);
                x86::avx512::quantize_rows(x, k, k4, &mut xa.spare_capacity_mut()[..m * k4], &mut row_scales);
                xa.set_len(m * k4);
            },
            // SAFETY: every x86 kernel is detected with AVX2 present.
            #[cfg(target_arch = "x86_64")]
            operand => {
                if operand == Operand::Magnitude {
                    xq = vec![0i8; m * k4];
                }
                xa = vec![if operand == Operand::Offset { 0x80 } else { 0 }; m * k4];
                unsafe { x86::quantize_rows(x, k, k4, &mut xq, &mut xa, operand, &mut row_scales) }
            }
        }
        let mut bias_padded = vec![0.0f32; self.scales.len()];
        if let Some(b) = bias {
            bias_padded[..n].copy_from_slice(b);
        }
        // Every value of the output is written by the kernel: it is not zeroed first (zeroing
        // took 5% of BERT-base's int8 forward pass).
        let mut out = Vec::<f32>::with_capacity(m * n);
        if m == 0 || n == 0 {
            return out;
        }
        let groups = self.groups();
        // Rows split across rayon's threads for a large product (a pool of one, as in a worker of
        // `device::on_one_thread`, keeps it on its thread); the kernel's tiles are 4 rows (AMX's 16).
        let threads = rayon::current_num_threads();
        let tile = if kernel == Kernel::Amx { 16 } else { 4 };
        let rows = if threads > 1 && m * n * k4 >= PARALLEL_AT { m.div_ceil(threads).next_multiple_of(tile) } else { m };
        use rayon::prelude::*;
        out.spare_capacity_mut()[..m * n].par_chunks_mut(rows * n).enumerate().for_each(|(chunk, out)| {
            let (r0, rows) = (chunk * rows, out.len() / n);
            let row_scales = &row_scales[r0 * groups..(r0 + rows) * groups];
            let (xq, xa) = (xq.get(r0 * k4..(r0 + rows) * k4).unwrap_or_default(), xa.get(r0 * k4..(r0 + rows) * k4).unwrap_or_default());
            self.matmul_rows(kernel, xq, xa, rows, row_scales, &bias_padded, then, out);
        });
        // SAFETY: `matmul_rows` wrote every value of every row.
        unsafe { out.set_len(m * n) };
        out
    }

    /// Rows of `xq` `[m, k4]` times this weight into `out` `[m, n]`, every value of it written
    /// and then passed through `then`, with `kernel` (the x86 kernels read `xa`, `xq` in the
    /// form of [`Kernel::operand`], and those of the offset form only `xa`).
    #[allow(clippy::too_many_arguments)]
    fn matmul_rows(&self, kernel: Kernel, xq: &[i8], xa: &[u8], m: usize, row_scales: &[f32], bias: &[f32], then: Option<fn(&mut [f32])>, out: &mut [MaybeUninit<f32>]) {
        match kernel {
            // SAFETY (each x86 kernel): the CPU has the features `Kernel::detect` checked; every
            // pointer stays inside the slices (see the kernel).
            // The AVX-512 kernel applies `then` itself, to each block of panels once written.
            #[cfg(target_arch = "x86_64")]
            Kernel::Amx => return unsafe { x86::amx::matmul(self, xa, m, row_scales, bias, then, out) },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Vnni => return unsafe { x86::avx512::matmul(self, xa, m, row_scales, bias, then, out) },
            #[cfg(target_arch = "x86_64")]
            Kernel::AvxVnni => unsafe { x86::matmul_avx_vnni(self, xq, xa, m, row_scales, bias, out) },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::matmul_avx2(self, xq, xa, m, row_scales, bias, out) },
            Kernel::Portable => self.matmul_portable(xq, m, row_scales, bias, out),
        }
        // The others' pieces are a panel's row, 16 values, too short to pass through `then` one
        // by one: it goes over the whole output once it is written.
        if let Some(then) = then {
            // SAFETY: the kernel wrote every value.
            then(unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f32>(), out.len()) });
        }
    }

    /// Activation scales per row: one per group of [`GROUP`] inputs.
    fn groups(&self) -> usize {
        self.k4.div_ceil(GROUP).max(1)
    }

    /// The same sums as the x86 kernels, in portable code.
    fn matmul_portable(&self, xq: &[i8], m: usize, row_scales: &[f32], bias: &[f32], out: &mut [MaybeUninit<f32>]) {
        let (k4, n, groups) = (self.k4, self.n, self.groups());
        for (panel, w) in self.panels.chunks_exact(k4 * PANEL).enumerate() {
            for r in 0..m {
                let x = &xq[r * k4..(r + 1) * k4];
                let mut sums = [0.0f32; PANEL];
                for (group, (xg, wg)) in x.chunks(GROUP).zip(w.chunks(GROUP * PANEL)).enumerate() {
                    let mut acc = [0i32; PANEL];
                    for (xs, ws) in xg.chunks_exact(4).zip(wg.chunks_exact(4 * PANEL)) {
                        for (c, a) in acc.iter_mut().enumerate() {
                            *a += (0..4).map(|t| xs[t] as i32 * ws[c * 4 + t] as i32).sum::<i32>();
                        }
                    }
                    for (sum, &a) in sums.iter_mut().zip(&acc) {
                        *sum += a as f32 * row_scales[r * groups + group];
                    }
                }
                for (c, &sum) in sums.iter().enumerate() {
                    let j = panel * PANEL + c;
                    if j < n {
                        out[r * n + j].write(sum * self.scales[j] + bias[j]);
                    }
                }
            }
        }
    }
}

/// Quantise each row of `x` `[m, k]` into `xq` `[m, k4]` (symmetric, to `±127`, ties to even),
/// a scale per group of [`GROUP`] inputs into `scales` `[m, groups]`: NaN for a group holding
/// NaN or infinity, 0 for a zero group.
fn quantize_rows(x: &[f32], k: usize, k4: usize, xq: &mut [i8], scales: &mut [f32]) {
    let groups = k4.div_ceil(GROUP).max(1);
    for ((row, q), s) in x.chunks_exact(k.max(1)).zip(xq.chunks_exact_mut(k4.max(1))).zip(scales.chunks_exact_mut(groups)) {
        for ((values, q), s) in row.chunks(GROUP).zip(q.chunks_mut(GROUP)).zip(s.iter_mut()) {
            quantize_group(values, q, s);
        }
    }
}

/// One group of [`quantize_rows`].
fn quantize_group(values: &[f32], q: &mut [i8], s: &mut f32) {
    let (peak, nan) = values.iter().fold((0.0f32, false), |(p, n), v| (p.max(v.abs()), n | v.is_nan()));
    *s = if nan || !peak.is_finite() { f32::NAN } else { peak / ACTIVATION_MAX };
    if *s > 0.0 {
        let inv = ACTIVATION_MAX / peak;
        for (q, &v) in q.iter_mut().zip(values) {
            *q = (v * inv).round_ties_even().clamp(-ACTIVATION_MAX, ACTIVATION_MAX) as i8;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;

thread_local! {
    /// The weight [`Quantizer`] packed last, until the `Int8Weight` beside it takes it: a
    /// module is mapped field by field, a `Linear`'s `weight` just before its `int8`.
    static PACKED: RefCell<Option<(ParamId, Arc<PackedWeight>)>> = const { RefCell::new(None) };
    /// Counts the `Int8Weight`s holding a packed weight that a visitor passes.
    static SEEN: Cell<usize> = const { Cell::new(0) };
}

/// `model` with every `Linear` weight quantised to int8 (per output channel, symmetric) under
/// a new parameter id, and packed into the layer's `Int8Weight`: the original model is left
/// as it was. On flex and ndarray its products then run in int8
/// (`Linear::forward`). Quantising a quantised model gives the same weights.
pub fn quantize<M: Module>(model: M) -> M {
    take_packed();
    let model = model.map(&mut Quantizer::default());
    take_packed();
    model
}

/// Whether every `Linear` weight of `model` (and at least one) has its int8 form, as
/// [`quantize`] leaves a model whose dense layers are all Sesame's `Linear`s. Burn's own
/// `Linear` has no int8 form: a model holding one is not quantised, though `quantize` snaps its
/// weight.
pub fn is_quantized<M: Module>(model: &M) -> bool {
    #[derive(Default)]
    struct Count {
        path: crate::checkpoint::ModulePath,
        linear_weights: usize,
    }
    impl ModuleVisitor for Count {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            self.path.enter(name, container_type);
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.exit();
        }
        fn visit_float<const D: usize>(&mut self, _param: &Param<Tensor<D>>) {
            self.linear_weights += usize::from(D == 2 && self.path.is_linear_weight());
        }
    }
    let mut count = Count::default();
    SEEN.with(|s| s.set(0));
    model.visit(&mut count);
    let packed = SEEN.with(|s| s.replace(0));
    packed > 0 && packed == count.linear_weights
}

/// Whether the model directory `dir` was saved quantised ([`CONFIG_KEY`] in its config.json).
pub fn saved_quantized(dir: &std::path::Path) -> bool {
    std::fs::read(dir.join("config.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .is_some_and(|c| c.get(CONFIG_KEY).and_then(|v| v.as_bool()) == Some(true))
}

#[derive(Default)]
struct Quantizer {
    path: crate::checkpoint::ModulePath,
}

impl ModuleMapper for Quantizer {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.enter(name, container_type);
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.exit();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if D != 2 || !self.path.is_linear_weight() {
            return param;
        }
        let tensor = param.val();
        let (device, dtype, [k, n]) = (tensor.device(), tensor.dtype(), [tensor.dims()[0], tensor.dims()[1]]);
        let Ok(values) = tensor.into_data().convert::<f32>().try_into_vec::<f32>() else {
            return param;
        };
        let (packed, snapped) = PackedWeight::quantize(&values, k, n);
        let id = ParamId::new();
        PACKED.with(|p| *p.borrow_mut() = Some((id, Arc::new(packed))));
        let data = TensorData::new(snapped, [k, n]).convert_dtype(dtype);
        Param::initialized(id, Tensor::from_data(data, &device))
    }
}

/// The weight [`quantize`] packed last, taken by the layer it belongs to (its `int8` field,
/// mapped just after its `weight`).
pub(crate) fn take_packed() -> Option<(ParamId, Arc<PackedWeight>)> {
    PACKED.with(|p| p.borrow_mut().take())
}

/// Count one packed weight passed by the visitor of [`is_quantized`].
pub(crate) fn seen_packed() {
    SEEN.with(|s| s.set(s.get() + 1));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `write` puts into `len` values, which start as NaN (so one left unwritten shows).
    fn written(len: usize, write: impl FnOnce(&mut [MaybeUninit<f32>])) -> Vec<f32> {
        let mut out = vec![MaybeUninit::new(f32::NAN); len];
        write(&mut out);
        // SAFETY: every value was initialised, as NaN or by `write`.
        out.into_iter().map(|v| unsafe { v.assume_init() }).collect()
    }

    /// The int8 product equals the product of the quantised values, computed in float.
    #[test]
    fn int8_product_is_the_quantised_product() {
        // Two groups of activation scales and a partial one; a partial panel.
        let (k, n, m) = (150, 21, 6);
        let w: Vec<f32> = (0..k * n).map(|i| ((i * 7919) % 201) as f32 / 100.0 - 1.0).collect();
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 104729) % 173) as f32 / 50.0 - 1.7 + if i % k < 64 { 10.0 } else { 0.0 }).collect();
        let bias: Vec<f32> = (0..n).map(|j| j as f32 / 10.0).collect();
        let (packed, snapped) = PackedWeight::quantize(&w, k, n);
        // Every column's largest magnitude is 127 of its scale.
        for j in 0..n {
            let peak = (0..k).map(|i| snapped[i * n + j].abs()).fold(0.0, f32::max);
            assert!((peak / packed.scales[j] - 127.0).abs() < 1e-3);
        }
        let y = packed.matmul(&x, m, Some(&bias));
        let groups = packed.groups();
        assert_eq!(groups, 3);
        let (mut xq, mut scales) = (vec![0i8; m * packed.k4], vec![0.0; m * groups]);
        quantize_rows(&x, k, packed.k4, &mut xq, &mut scales);
        let mut bias_padded = vec![0.0; packed.scales.len()];
        bias_padded[..n].copy_from_slice(&bias);
        let portable = written(m * n, |out| packed.matmul_portable(&xq, m, &scales, &bias_padded, out));
        for r in 0..m {
            // Each group has its own scale: the first group's inputs are ten times the others'.
            assert!(scales[r * groups] > 4.0 * scales[r * groups + 1], "{scales:?}");
            for j in 0..n {
                let exact: f32 = (0..k)
                    .map(|i| xq[r * packed.k4 + i] as f32 * scales[r * groups + i / GROUP] * snapped[i * n + j])
                    .sum::<f32>()
                    + bias[j];
                let float: f32 = (0..k).map(|i| x[r * k + i] * w[i * n + j]).sum::<f32>() + bias[j];
                assert!((y[r * n + j] - exact).abs() < 1e-3, "[{r}, {j}]: {} vs {exact}", y[r * n + j]);
                assert_eq!(y[r * n + j], portable[r * n + j], "the x86 and portable sums agree");
                let magnitude: f32 = (0..k).map(|i| (x[r * k + i] * w[i * n + j]).abs()).sum();
                assert!((y[r * n + j] - float).abs() < 0.01 * magnitude, "near the float product: {} vs {float}", y[r * n + j]);
            }
        }
    }

    /// Every kernel this CPU runs gives the portable sums, bit for bit, for the largest
    /// magnitudes too; a product split across threads gives the same rows as one on one thread.
    #[test]
    fn every_kernel_and_every_split_gives_the_same_numbers() {
        // 70 rows (not a multiple of 4, 16 or of the threads), a partial group and a partial
        // panel; 70 · 133 · 260 multiply-adds, above the split threshold. Then whole groups (AMX
        // tiles them) and an odd number of panels.
        for (k, n, m) in [(257, 133, 70), (256, 140, 87)] {
        let w: Vec<f32> = (0..k * n).map(|i| if i % 11 == 0 { 1.0 } else { ((i * 7919) % 201) as f32 / 100.0 - 1.0 }).collect();
        let x: Vec<f32> = (0..m * k).map(|i| if i % 13 == 0 { -4.0 } else { ((i * 104729) % 173) as f32 / 50.0 - 1.7 }).collect();
        let bias: Vec<f32> = (0..n).map(|j| j as f32 / 10.0).collect();
        let (packed, _) = PackedWeight::quantize(&w, k, n);
        assert!(m * n * packed.k4 >= PARALLEL_AT);
        let groups = packed.groups();
        let (mut xq, mut scales) = (vec![0i8; m * packed.k4], vec![0.0; m * groups]);
        quantize_rows(&x, k, packed.k4, &mut xq, &mut scales);
        let mut bias_padded = vec![0.0; packed.scales.len()];
        bias_padded[..n].copy_from_slice(&bias);
        let portable = written(m * n, |out| packed.matmul_portable(&xq, m, &scales, &bias_padded, out));
        assert!(portable.iter().all(|v| v.is_finite()), "every value written");
        let kernels = Kernel::available();
        assert_eq!(kernels[0], Kernel::detect());
        // The unsigned form of `xq` a kernel reads.
        let unsigned = |kernel: Kernel| -> Vec<u8> {
            match kernel.operand() {
                #[cfg(target_arch = "x86_64")]
                Operand::Offset => xq.iter().map(|&v| (v as i32 + 128) as u8).collect(),
                #[cfg(target_arch = "x86_64")]
                Operand::Magnitude => xq.iter().map(|v| v.unsigned_abs()).collect(),
                Operand::None => Vec::new(),
            }
        };
        for &kernel in &kernels {
            let out = written(m * n, |out| packed.matmul_rows(kernel, &xq, &unsigned(kernel), m, &scales, &bias_padded, None, out));
            assert!(out == portable, "{kernel:?} gives the portable sums, every value written");
        }
        let split = packed.matmul(&x, m, Some(&bias));
        let alone = crate::device::on_one_thread(|| packed.matmul(&x, m, Some(&bias)));
        assert!(split == portable && alone == portable, "split and unsplit products give the portable rows");

        // A function to apply to the output reaches every value once, whatever the kernel or
        // the split (once more or once less would give other numbers).
        fn then(values: &mut [f32]) {
            for v in values {
                *v = *v * 2.0 + 1.0;
            }
        }
        let after: Vec<f32> = portable.iter().map(|v| v * 2.0 + 1.0).collect();
        for &kernel in &kernels {
            let out = written(m * n, |out| packed.matmul_rows(kernel, &xq, &unsigned(kernel), m, &scales, &bias_padded, Some(then), out));
            assert!(out == after, "{kernel:?} applies the function to each value once");
        }
        let split = packed.matmul_then(&x, m, Some(&bias), Some(then));
        let alone = crate::device::on_one_thread(|| packed.matmul_then(&x, m, Some(&bias), Some(then)));
        assert!(split == after && alone == after, "split and unsplit products apply it once");
        }
    }

    /// The largest magnitudes do not saturate: `127 · 127` products summed in pairs, of every
    /// sign (what `vpmaddubsw` would clip without the sign trick).
    #[test]
    fn extremes_sum_exactly() {
        let (k, n) = (64, 16);
        let w: Vec<f32> = (0..k * n).map(|i| if (i / n + i % n) % 3 == 0 { -1.0 } else { 1.0 }).collect();
        let (packed, _) = PackedWeight::quantize(&w, k, n);
        let x: Vec<f32> = (0..2 * k).map(|i| if i < k { if i % 3 == 0 { -2.0 } else { 2.0 } } else { -2.0 }).collect();
        let y = packed.matmul(&x, 2, None);
        for r in 0..2 {
            for j in 0..n {
                let exact: f32 = (0..k).map(|i| x[r * k + i] * w[i * n + j]).sum();
                assert!((y[r * n + j] - exact).abs() < 1e-3, "[{r}, {j}]: {} vs {exact}", y[r * n + j]);
            }
        }
    }

    /// The AVX2 and AVX-512 quantisations of activations give the portable values, ties
    /// included, and each unsigned form of them.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_quantisation_is_the_portable_one() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        for k in [1usize, 31, 32, 37, 64, 100, 128, 384, 1000] {
            let k4 = k.div_ceil(4) * 4;
            let m = 5;
            // Halves land on ties once scaled by 127 / 127.
            let mut x: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 255) as f32 / 2.0 - 63.5).collect();
            x[k - 1] = 127.0;
            x[k.min(m * k - 1)] = f32::NAN;
            // An all-zero group (row 2's first), whose unsigned form is left as the caller filled it.
            x[2 * k..2 * k + k.min(GROUP)].fill(0.0);
            let groups = k4.div_ceil(GROUP);
            let (mut a, mut sa) = (vec![0i8; m * k4], vec![0.0; m * groups]);
            quantize_rows(&x, k, k4, &mut a, &mut sa);
            for (operand, zero, form) in [(Operand::Magnitude, 0u8, (|q: i8| q.unsigned_abs()) as fn(i8) -> u8), (Operand::Offset, 0x80, |q: i8| (q as i32 + 128) as u8)] {
                let (mut b, mut b_unsigned, mut sb) = (vec![0i8; m * k4], vec![zero; m * k4], vec![0.0; m * groups]);
                unsafe { x86::quantize_rows(&x, k, k4, &mut b, &mut b_unsigned, operand, &mut sb) };
                assert_eq!(a, b, "k = {k}");
                assert!(b_unsigned.iter().zip(&b).all(|(&u, &q)| u == form(q)), "k = {k}: the {operand:?} form");
                assert_eq!(format!("{sa:?}"), format!("{sb:?}"), "k = {k}");
                // Without the signed values: the same unsigned form and scales.
                let (mut alone, mut s_alone) = (vec![zero; m * k4], vec![0.0; m * groups]);
                unsafe { x86::quantize_rows(&x, k, k4, &mut [], &mut alone, operand, &mut s_alone) };
                assert!(alone == b_unsigned && format!("{s_alone:?}") == format!("{sb:?}"), "k = {k}: the {operand:?} form alone");
                // On 512 bits (the offset form only), from bytes that start at neither form of 0.
                if operand == Operand::Offset && std::arch::is_x86_feature_detected!("avx512f") {
                    let (mut wide, mut s_wide) = (vec![MaybeUninit::new(0x55u8); m * k4], vec![0.0; m * groups]);
                    unsafe { x86::avx512::quantize_rows(&x, k, k4, &mut wide, &mut s_wide) };
                    let wide: Vec<u8> = wide.into_iter().map(|b| unsafe { b.assume_init() }).collect();
                    assert!(wide == b_unsigned && format!("{s_wide:?}") == format!("{sb:?}"), "k = {k}: the AVX-512 offset form");
                }
            }
        }
    }

    /// Where Linux lists AMX's tiles and int8 products for this CPU, the int8 product runs on
    /// them (so the test above covers the AMX kernel on such a CPU).
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn amx_is_used_where_the_cpu_and_linux_offer_it() {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let flags = cpuinfo.lines().find(|l| l.starts_with("flags")).unwrap_or_default();
        let has = |flag: &str| flags.split_whitespace().any(|f| f == flag);
        let offered = has("amx_tile") && has("amx_int8") && has("avx512_vnni") && has("avx2");
        assert_eq!(Kernel::detect() == Kernel::Amx, offered, "flags: {flags}");
    }

    /// A row holding NaN or infinity gives NaN, not a number; an all-zero row gives the bias.
    #[test]
    fn odd_rows() {
        let (packed, _) = PackedWeight::quantize(&[1.0, -2.0, 0.5, 3.0], 2, 2);
        let y = packed.matmul(&[f32::NAN, 1.0, f32::INFINITY, 0.0, 0.0, 0.0], 3, Some(&[0.25, -0.5]));
        assert!(y[..4].iter().all(|v| v.is_nan()));
        assert_eq!(&y[4..], &[0.25, -0.5]);
    }

    /// Quantising again changes nothing: the int8 values are recovered from the snapped floats.
    #[test]
    fn quantising_twice_is_the_same() {
        let w: Vec<f32> = (0..64 * 48).map(|i| ((i * 31) % 97) as f32 / 97.0 - 0.4).collect();
        let (a, once) = PackedWeight::quantize(&w, 64, 48);
        let (b, twice) = PackedWeight::quantize(&once, 64, 48);
        assert_eq!(once, twice);
        assert_eq!(a.panels, b.panels);
    }
}
