//! Post-training dynamic int8 quantisation of every `Linear` layer (Q8BERT's symmetric linear
//! scheme, applied after training as ONNX Runtime's dynamic quantisation applies it).
//!
//! - **Weights**: per output channel, symmetric: column `j` of a `[d_in, d_out]` weight gets
//!   the scale `s_j = max_i |w_ij| / 127` and the values `q_ij = round(w_ij / s_j)` in
//!   `-127..=127`. [`quantize`] replaces each weight by `q_ij · s_j`, its int8 value, so a
//!   quantised model is an ordinary model: it saves, loads and runs on every backend, and the
//!   int8 values and scales are recovered exactly from it (the largest `|q|` of a column is 127).
//! - **Activations**: quantised when each product runs, symmetric, to `-127..=127`, with a
//!   scale per row (token) and group of 64 inputs. Coarser scales cost too much: on
//!   all-MiniLM-L6-v2 over the first 256 sentences of the shipped corpus (short ones are the
//!   hardest), the smallest cosine of an int8 embedding to the float one was 0.838 with ONNX
//!   Runtime's defaults (weights per tensor, activations per batch), 0.967 with its weights per
//!   channel, 0.980 with a scale per row, 0.995 per row and 64 inputs (0.996 per 32).
//! - **Products**: on host-memory backends (flex, ndarray) [`linear`] multiplies the int8
//!   values with 32-bit integer sums per group (AVX-512 VNNI or AVX-VNNI `vpdpbusd`, else
//!   AVX2, where the CPU has them, portable code elsewhere: the same sums and float steps, so
//!   the same numbers), adds the groups' sums times their scales in float, then scales by
//!   `s_j` and adds the bias; a large product's rows are split across rayon's threads. x86
//!   multiplies bytes only unsigned by signed (`vpmaddubsw`, `vpdpbusd`): the VNNI kernels
//!   multiply `x + 128` by the weights and take `128 · Σw` (packed with the weight, per group)
//!   off the sums, as ONNX Runtime and oneDNN do; AVX2, whose pairs are summed in 16 bits, takes
//!   `|x|` and moves the sign of `x` onto the weight (`vpsignb`), so no pair sum exceeds 16 bits.
//!   The form a kernel reads is made in the one pass that quantises `x`. The output is written
//!   once, not zeroed first; [`linear_activated`] has the kernel apply an activation that runs
//!   on the host (either GELU) to each block of it while it is in cache. Other backends
//!   multiply the quantised weights in floating point.
//!
//! The packed int8 weights of a quantised model are kept in a table of the process, by
//! parameter id, from [`quantize`] on; a model quantised again (or loaded quantised) packs
//! anew. They take a quarter of the float weights' memory and are not freed with the model.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::{Arc, OnceLock, RwLock};

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::activation::Activation;

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
                return Kernel::Avx512Vnni;
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
            Kernel::Avx512Vnni | Kernel::AvxVnni => Operand::Offset,
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
        let all = [Kernel::Avx512Vnni, Kernel::AvxVnni, Kernel::Avx2, Kernel::Portable];
        #[cfg(not(target_arch = "x86_64"))]
        let all = [Kernel::Portable];
        #[cfg(target_arch = "x86_64")]
        let runs = |k: &Kernel| match k {
            Kernel::Avx512Vnni => best == Kernel::Avx512Vnni,
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
    /// `128 · Σ q_ij` over each group's inputs `i`: `[panels][groups][16]`, what an offset
    /// operand (`q + 128`) adds to a group's sums.
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
                offsets[(panel * groups + i / GROUP) * PANEL + c] += 128 * v as i32;
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
            Operand::Offset if kernel == Kernel::Avx512Vnni => unsafe {
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
        // `device::on_one_thread`, keeps it on its thread); the kernel's tiles are 4 rows.
        let threads = rayon::current_num_threads();
        let rows = if threads > 1 && m * n * k4 >= PARALLEL_AT { m.div_ceil(threads).next_multiple_of(4) } else { m };
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
mod x86 {
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    use super::{Operand, PackedWeight, ACTIVATION_MAX, GROUP, PANEL};

    /// Rows per tile.
    const ROWS: usize = 4;

    /// [`super::quantize_rows`] in AVX2: the same values (`vcvtps2dq` rounds ties to even) into
    /// `xq` `[m, k4]`, or nowhere when `xq` is empty (the offset form's kernels do not read
    /// them), and their `operand` form into `xa` `[m, k4]`, which the caller fills with the
    /// form of 0 (it is left as it is where the values are 0 by default).
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_rows(x: &[f32], k: usize, k4: usize, xq: &mut [i8], xa: &mut [u8], operand: Operand, scales: &mut [f32]) {
        let offset = operand == Operand::Offset;
        let signed = !xq.is_empty();
        assert!(xa.len() * k == x.len() * k4 && (!signed || xq.len() == xa.len()));
        let unsigned = |q: i8| if offset { q as u8 ^ 0x80 } else { q.unsigned_abs() };
        let groups = k4.div_ceil(GROUP).max(1);
        let sign = _mm256_set1_ps(-0.0);
        // `vpackssdw` / `vpacksswb` interleave the 128-bit lanes; this puts the bytes back in order.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (r, (row, s)) in x.chunks_exact(k.max(1)).zip(scales.chunks_exact_mut(groups)).enumerate() {
            for (g, (values, s)) in row.chunks(GROUP).zip(s.iter_mut()).enumerate() {
                let at = r * k4 + g * GROUP;
                let width = GROUP.min(k4 - g * GROUP);
                let qa = &mut xa[at..at + width];
                if values.len() < GROUP {
                    let mut q = [0i8; GROUP];
                    let q = &mut q[..width];
                    super::quantize_group(values, q, s);
                    for (a, &v) in qa.iter_mut().zip(q.iter()) {
                        *a = unsigned(v);
                    }
                    if signed {
                        xq[at..at + width].copy_from_slice(q);
                    }
                    continue;
                }
                let (mut peak, mut nan) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                for chunk in values.chunks_exact(8) {
                    // SAFETY: eight floats of the group.
                    let v = unsafe { _mm256_loadu_ps(chunk.as_ptr()) };
                    peak = _mm256_max_ps(peak, _mm256_andnot_ps(sign, v));
                    nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
                }
                let mut lanes = [0.0f32; 8];
                // SAFETY: eight floats.
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), peak) };
                let peak = lanes.iter().copied().fold(0.0f32, f32::max);
                *s = if _mm256_movemask_ps(nan) != 0 || !peak.is_finite() { f32::NAN } else { peak / ACTIVATION_MAX };
                if !(*s > 0.0) {
                    continue;
                }
                let vinv = _mm256_set1_ps(ACTIVATION_MAX / peak);
                for (c, chunk) in values.chunks_exact(32).enumerate() {
                    // SAFETY: 32 floats in; 32 bytes out at `at + 32·c`, inside the group of
                    // `xa` (and of `xq` when it is written).
                    unsafe {
                        let p = chunk.as_ptr();
                        let i = |o: usize| _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p.add(o)), vinv));
                        let bytes = _mm256_packs_epi16(_mm256_packs_epi32(i(0), i(8)), _mm256_packs_epi32(i(16), i(24)));
                        let bytes = _mm256_permutevar8x32_epi32(bytes, order);
                        if signed {
                            _mm256_storeu_si256(xq.as_mut_ptr().add(at + 32 * c) as *mut __m256i, bytes);
                        }
                        let unsigned = if offset { _mm256_xor_si256(bytes, _mm256_set1_epi8(-128)) } else { _mm256_abs_epi8(bytes) };
                        _mm256_storeu_si256(qa.as_mut_ptr().add(32 * c) as *mut __m256i, unsigned);
                    }
                }
            }
        }
    }

    /// An int8 product `matmul` (with its tile function `tile`) on 256 bits for the CPU features
    /// `features`, with `dot(acc, a, b)`: `acc` plus, in each 32-bit lane, the four products of
    /// `a`'s unsigned bytes by `b`'s signed bytes (written as `|acc, a, b| expression`).
    /// `offset` says which operand `xa` is ([`Operand`]): `q + 128` (the weights as they are,
    /// `128 · Σw` taken off each group's sums) or `|q|` (`q`'s sign moved onto the weights).
    macro_rules! kernel {
        ($matmul:ident, $tile:ident, $features:literal, offset: $offset:literal, |$acc:ident, $a:ident, $b:ident| $dot:expr) => {
            /// # Safety
            /// The CPU has the kernel's features; `xq` is `[m, k4]` (read for `|q|` only) and
            /// `xa` its unsigned form, `row_scales` `[m, groups]`, `bias` padded to whole
            /// panels, `out` `[m, n]`.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $matmul(w: &PackedWeight, xq: &[i8], xa: &[u8], m: usize, row_scales: &[f32], bias: &[f32], out: &mut [MaybeUninit<f32>]) {
                assert!(xa.len() == m * w.k4 && ($offset || xq.len() == xa.len()) && out.len() == m * w.n && bias.len() == w.scales.len());
                for panel in 0..w.n.div_ceil(PANEL) {
                    let mut r = 0;
                    while r + ROWS <= m {
                        unsafe { $tile::<ROWS>(w, panel, xq, xa, r, row_scales, bias, out) };
                        r += ROWS;
                    }
                    while r < m {
                        unsafe { $tile::<1>(w, panel, xq, xa, r, row_scales, bias, out) };
                        r += 1;
                    }
                }
            }

            /// Rows `r0 .. r0 + R` of the output's columns in `panel`.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn $tile<const R: usize>(w: &PackedWeight, panel: usize, xq: &[i8], xa: &[u8], r0: usize, row_scales: &[f32], bias: &[f32], out: &mut [MaybeUninit<f32>]) {
                let (k4, n, groups) = (w.k4, w.n, w.groups());
                let mut sums = [[_mm256_setzero_ps(); 2]; R];
                let wp = unsafe { w.panels.as_ptr().add(panel * k4 * PANEL) };
                let (xp, ap) = unsafe { (xq.as_ptr().add(if $offset { 0 } else { r0 * k4 }), xa.as_ptr().add(r0 * k4)) };
                for group in 0..groups {
                    let mut acc = [[_mm256_setzero_si256(); 2]; R];
                    for g in group * GROUP / 4..((group + 1) * GROUP / 4).min(k4 / 4) {
                        // SAFETY: step `g` of the panel is 64 bytes at `g·64`, inside `k4·16`.
                        let (w0, w1) = unsafe { (_mm256_loadu_si256(wp.add(g * 64) as *const __m256i), _mm256_loadu_si256(wp.add(g * 64 + 32) as *const __m256i)) };
                        for (r, acc) in acc.iter_mut().enumerate() {
                            let at = r * k4 + g * 4;
                            // SAFETY: four bytes of row `r0 + r` of `xa`, inside `[m, k4]`.
                            let ax = unsafe { _mm256_set1_epi32(std::ptr::read_unaligned(ap.add(at) as *const i32)) };
                            for (acc, w) in acc.iter_mut().zip([w0, w1]) {
                                let b = if $offset {
                                    w
                                } else {
                                    // SAFETY: as `xa`'s, in `xq`.
                                    let x = unsafe { _mm256_set1_epi32(std::ptr::read_unaligned(xp.add(at) as *const i32)) };
                                    // |x| · (w with x's sign): the products of x and w.
                                    _mm256_sign_epi8(w, x)
                                };
                                let ($acc, $a, $b) = (*acc, ax, b);
                                *acc = $dot;
                            }
                        }
                    }
                    if $offset {
                        // SAFETY: the group's 16 offsets of the panel, inside `[panels][groups][16]`.
                        let o = unsafe { w.offsets.as_ptr().add((panel * groups + group) * PANEL) };
                        let offsets = unsafe { [_mm256_loadu_si256(o as *const __m256i), _mm256_loadu_si256(o.add(8) as *const __m256i)] };
                        for acc in acc.iter_mut() {
                            for (a, &o) in acc.iter_mut().zip(&offsets) {
                                *a = _mm256_sub_epi32(*a, o);
                            }
                        }
                    }
                    // The group's sums times its scale, in float (no FMA: the portable code's rounding).
                    for (r, (sums, acc)) in sums.iter_mut().zip(&acc).enumerate() {
                        let scale = _mm256_set1_ps(row_scales[(r0 + r) * groups + group]);
                        for (sum, &a) in sums.iter_mut().zip(acc) {
                            *sum = _mm256_add_ps(*sum, _mm256_mul_ps(_mm256_cvtepi32_ps(a), scale));
                        }
                    }
                }
                let j0 = panel * PANEL;
                let width = PANEL.min(n - j0);
                for (r, sums) in sums.iter().enumerate() {
                    let row = r0 + r;
                    let mut values = [0.0f32; PANEL];
                    let to = &mut out[row * n + j0..row * n + j0 + width];
                    // A whole panel goes straight into the output row, a partial one through `values`.
                    let dst = if width == PANEL { to.as_mut_ptr().cast::<f32>() } else { values.as_mut_ptr() };
                    for (h, &sum) in sums.iter().enumerate() {
                        let j = j0 + h * 8;
                        // SAFETY: `scales` and `bias` are padded to whole panels; `dst` holds 16 floats.
                        unsafe {
                            let v = _mm256_add_ps(_mm256_mul_ps(sum, _mm256_loadu_ps(w.scales.as_ptr().add(j))), _mm256_loadu_ps(bias.as_ptr().add(j)));
                            _mm256_storeu_ps(dst.add(h * 8), v);
                        }
                    }
                    if width < PANEL {
                        for (to, &v) in to.iter_mut().zip(&values) {
                            to.write(v);
                        }
                    }
                }
            }
        };
    }

    // `vpmaddubsw` sums pairs in 16 bits, saturating; with `|x|, |w| <= 127` a pair is at most
    // 2·127·127, so it never does, and `vpmaddwd` by ones adds the pairs into 32 bits.
    kernel!(matmul_avx2, tile_avx2, "avx2", offset: false, |acc, a, b| _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))));
    // `vpdpbusd`: the four products into each 32-bit lane at once, without a 16-bit step, so
    // `(q + 128) · w` (at most 4·255·127) cannot saturate.
    kernel!(matmul_avx_vnni, tile_avx_vnni, "avx2,avxvnni", offset: true, |acc, a, b| _mm256_dpbusd_avx_epi32(acc, a, b));

    /// The AVX-512 VNNI product: a step of a panel (4 inputs × 16 columns, 64 bytes) is one
    /// register, a tile is [`ROWS`] rows × [`PANELS`] panels, the operand `q + 128`.
    pub(super) mod avx512 {
        use std::arch::x86_64::*;
        use std::mem::MaybeUninit;

        use super::super::{PackedWeight, ACTIVATION_MAX, GROUP, PANEL};

        /// Rows per tile.
        const ROWS: usize = 4;
        /// Panels per tile.
        const PANELS: usize = 3;

        /// [`super::super::quantize_rows`] on 512 bits, into the offset form only: `q + 128`
        /// of each quantised value into `xa` `[m, k4]`, every byte of it written (128 for the
        /// padding and for groups quantised to 0), the scales into `scales` `[m, groups]`. The
        /// same values (`vcvtps2dq` rounds ties to even, `vpmovsdb` saturates as the portable
        /// code clamps, which it never needs).
        ///
        /// # Safety
        /// The CPU has AVX-512 F.
        #[target_feature(enable = "avx512f")]
        pub(in super::super) unsafe fn quantize_rows(x: &[f32], k: usize, k4: usize, xa: &mut [MaybeUninit<u8>], scales: &mut [f32]) {
            let groups = k4.div_ceil(GROUP).max(1);
            assert!(xa.len() * k == x.len() * k4 && scales.len() * k >= x.len() * groups);
            let offset = _mm_set1_epi8(-128);
            for (r, (row, s)) in x.chunks_exact(k.max(1)).zip(scales.chunks_exact_mut(groups)).enumerate() {
                for (g, (values, s)) in row.chunks(GROUP).zip(s.iter_mut()).enumerate() {
                    let at = r * k4 + g * GROUP;
                    let qa = &mut xa[at..at + GROUP.min(k4 - g * GROUP)];
                    if values.len() < GROUP {
                        let mut q = [0i8; GROUP];
                        super::super::quantize_group(values, &mut q[..qa.len()], s);
                        for (a, &v) in qa.iter_mut().zip(&q) {
                            a.write(v as u8 ^ 0x80);
                        }
                        continue;
                    }
                    // SAFETY: 64 floats of the group, 16 at a time.
                    let v: [__m512; 4] = std::array::from_fn(|i| unsafe { _mm512_loadu_ps(values.as_ptr().add(16 * i)) });
                    let peak = v.iter().fold(_mm512_setzero_ps(), |peak, &v| _mm512_max_ps(peak, _mm512_abs_ps(v)));
                    let nan = v.iter().fold(0, |nan, &v| nan | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v));
                    let peak = _mm512_reduce_max_ps(peak);
                    *s = if nan != 0 || !peak.is_finite() { f32::NAN } else { peak / ACTIVATION_MAX };
                    let dst = qa.as_mut_ptr().cast::<__m128i>();
                    if !(*s > 0.0) {
                        for i in 0..4 {
                            // SAFETY: 16 bytes of the group's 64 in `xa`.
                            unsafe { _mm_storeu_si128(dst.add(i), offset) };
                        }
                        continue;
                    }
                    let inv = _mm512_set1_ps(ACTIVATION_MAX / peak);
                    for (i, &v) in v.iter().enumerate() {
                        let bytes = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v, inv)));
                        // SAFETY: as above.
                        unsafe { _mm_storeu_si128(dst.add(i), _mm_xor_si128(bytes, offset)) };
                    }
                }
            }
        }

        /// # Safety
        /// The CPU has AVX-512 F and VNNI; `xa` is `[m, k4]`, `q + 128` of the quantised rows,
        /// `row_scales` `[m, groups]`, `bias` padded to whole panels, `out` `[m, n]`.
        #[target_feature(enable = "avx512f,avx512vnni")]
        pub(in super::super) unsafe fn matmul(w: &PackedWeight, xa: &[u8], m: usize, row_scales: &[f32], bias: &[f32], then: Option<fn(&mut [f32])>, out: &mut [MaybeUninit<f32>]) {
            assert!(xa.len() == m * w.k4 && out.len() == m * w.n && bias.len() == w.scales.len());
            let panels = w.n.div_ceil(PANEL);
            let mut p = 0;
            while p + PANELS <= panels {
                unsafe { panel_rows::<PANELS>(w, p, xa, m, row_scales, bias, then, out) };
                p += PANELS;
            }
            while p < panels {
                unsafe { panel_rows::<1>(w, p, xa, m, row_scales, bias, then, out) };
                p += 1;
            }
        }

        /// Every row of the `P` panels from `p0`.
        #[inline]
        #[target_feature(enable = "avx512f,avx512vnni")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn panel_rows<const P: usize>(w: &PackedWeight, p0: usize, xa: &[u8], m: usize, row_scales: &[f32], bias: &[f32], then: Option<fn(&mut [f32])>, out: &mut [MaybeUninit<f32>]) {
            let mut r = 0;
            while r + ROWS <= m {
                unsafe { tile::<ROWS, P>(w, p0, xa, r, row_scales, bias, out) };
                r += ROWS;
            }
            while r < m {
                unsafe { tile::<1, P>(w, p0, xa, r, row_scales, bias, out) };
                r += 1;
            }
            // Once the panels' columns of every row are written, not after each tile: a load
            // of values just stored by the tile's masked 512-bit stores waits for them to
            // retire (GELU after each tile ran at half the speed of a pass over the output).
            if let Some(then) = then {
                let (j0, n) = (p0 * PANEL, w.n);
                for r in 0..m {
                    // SAFETY: the panels' columns of row `r`, written above.
                    then(unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().add(r * n + j0).cast::<f32>(), (P * PANEL).min(n - j0)) });
                }
            }
        }

        /// Rows `r0 .. r0 + R` of the output's columns in panels `p0 .. p0 + P`.
        #[inline]
        #[target_feature(enable = "avx512f,avx512vnni")]
        unsafe fn tile<const R: usize, const P: usize>(w: &PackedWeight, p0: usize, xa: &[u8], r0: usize, row_scales: &[f32], bias: &[f32], out: &mut [MaybeUninit<f32>]) {
            let (k4, n, groups) = (w.k4, w.n, w.groups());
            let mut sums = [[_mm512_setzero_ps(); P]; R];
            // SAFETY: panels `p0 .. p0 + P` exist (the caller's loop) and row `r0 + R - 1` of `xa`.
            let wp: [*const i8; P] = std::array::from_fn(|p| unsafe { w.panels.as_ptr().add((p0 + p) * k4 * PANEL) });
            let ap = unsafe { xa.as_ptr().add(r0 * k4) };
            for group in 0..groups {
                let mut acc = [[_mm512_setzero_si512(); P]; R];
                for g in group * GROUP / 4..((group + 1) * GROUP / 4).min(k4 / 4) {
                    // SAFETY: step `g` of each panel is 64 bytes at `g·64`, inside `k4·16`.
                    let ws: [__m512i; P] = std::array::from_fn(|p| unsafe { _mm512_loadu_si512(wp[p].add(g * 64) as *const _) });
                    for (r, acc) in acc.iter_mut().enumerate() {
                        // SAFETY: four bytes of row `r0 + r` of `xa`, inside `[m, k4]`.
                        let a = unsafe { _mm512_set1_epi32(std::ptr::read_unaligned(ap.add(r * k4 + g * 4) as *const i32)) };
                        for (acc, &w) in acc.iter_mut().zip(&ws) {
                            *acc = _mm512_dpbusd_epi32(*acc, a, w);
                        }
                    }
                }
                // `128 · Σw` off each sum, then the group's sums times its scale, in float (no
                // FMA: the portable code's rounding).
                // SAFETY: the group's 16 offsets of each panel, inside `[panels][groups][16]`.
                let offsets: [__m512i; P] = std::array::from_fn(|p| unsafe { _mm512_loadu_si512(w.offsets.as_ptr().add(((p0 + p) * groups + group) * PANEL) as *const _) });
                for (r, (sums, acc)) in sums.iter_mut().zip(&acc).enumerate() {
                    let scale = _mm512_set1_ps(row_scales[(r0 + r) * groups + group]);
                    for ((sum, &a), &o) in sums.iter_mut().zip(acc).zip(&offsets) {
                        *sum = _mm512_add_ps(*sum, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a, o)), scale));
                    }
                }
            }
            for (r, sums) in sums.iter().enumerate() {
                for (p, &sum) in sums.iter().enumerate() {
                    let j0 = (p0 + p) * PANEL;
                    let width = PANEL.min(n - j0);
                    // SAFETY: `scales` and `bias` are padded to whole panels; the store writes
                    // the panel's `width` columns of row `r0 + r`, inside `[m, n]`.
                    unsafe {
                        let v = _mm512_add_ps(_mm512_mul_ps(sum, _mm512_loadu_ps(w.scales.as_ptr().add(j0))), _mm512_loadu_ps(bias.as_ptr().add(j0)));
                        let to = out.as_mut_ptr().add((r0 + r) * n + j0).cast::<f32>();
                        _mm512_mask_storeu_ps(to, ((1u32 << width) - 1) as __mmask16, v);
                    }
                }
            }
        }
    }
}

/// The packed weights of quantised models, by parameter id.
fn table() -> &'static RwLock<HashMap<ParamId, Arc<PackedWeight>>> {
    static TABLE: OnceLock<RwLock<HashMap<ParamId, Arc<PackedWeight>>>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

fn packed(id: &ParamId) -> Option<Arc<PackedWeight>> {
    table().read().unwrap_or_else(|e| e.into_inner()).get(id).cloned()
}

/// `model` with every `Linear` weight quantised to int8 (per output channel, symmetric) under
/// a new parameter id: the original model is left as it was. On flex and ndarray its products
/// then run in int8 ([`linear`]). Quantising a quantised model gives the same weights.
pub fn quantize<M: Module>(model: M) -> M {
    model.map(&mut Quantizer::default())
}

/// Whether `model` holds a weight quantised by [`quantize`] in this process.
pub fn is_quantized<M: Module>(model: &M) -> bool {
    struct Find(bool);
    impl ModuleVisitor for Find {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0 |= D == 2 && packed(&param.id).is_some();
        }
    }
    let mut find = Find(false);
    model.visit(&mut find);
    find.0
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
        table().write().unwrap_or_else(|e| e.into_inner()).insert(id, Arc::new(packed));
        let data = TensorData::new(snapped, [k, n]).convert_dtype(dtype);
        Param::initialized(id, Tensor::from_data(data, &device))
    }
}

/// `linear` applied to `x` `[.., d_in]`, giving `[.., d_out]`: an int8 product when the weight
/// was quantised by [`quantize`] and its values are host memory without gradients to track,
/// `linear.forward` otherwise.
pub fn linear<const D: usize>(linear: &Linear, x: Tensor<D>) -> Tensor<D> {
    match int8_weight(linear, &x) {
        Some(weight) => match int8_forward(linear, &weight, x, None) {
            Ok(y) => y,
            Err(x) => linear.forward(Tensor::from_data(x, &linear.weight.device())),
        },
        None => linear.forward(x),
    }
}

/// `activation(linear(x))`, as [`linear`] then `activation.forward`, with the same numbers;
/// where the product runs in int8 and the activation on the host, the product applies it to
/// each tile of its output as it writes it, while the values are in cache (a pass over the
/// whole output less: BERT's GELU took 5% of its int8 forward pass).
pub fn linear_activated<const D: usize>(linear: &Linear, x: Tensor<D>, activation: Activation) -> Tensor<D> {
    if let (Some(weight), Some(then)) = (int8_weight(linear, &x), activation.in_place_on_host(&x.device(), x.dtype())) {
        return match int8_forward(linear, &weight, x, Some(then)) {
            Ok(y) => y,
            Err(x) => activation.forward(linear.forward(Tensor::from_data(x, &linear.weight.device()))),
        };
    }
    activation.forward(self::linear(linear, x))
}

/// The packed weight of `linear` when `x` can multiply it in int8.
fn int8_weight<const D: usize>(linear: &Linear, x: &Tensor<D>) -> Option<Arc<PackedWeight>> {
    let weight = packed(&linear.weight.id)?;
    let usable = crate::device::is_host_memory(&x.device())
        && !x.is_require_grad()
        && !linear.weight.val().is_require_grad()
        && x.dims()[D - 1] == weight.k;
    usable.then_some(weight)
}

/// `x · weight + bias` in int8, each piece of it passed through `then`; the values of `x` back
/// where they cannot be read as f32.
fn int8_forward<const D: usize>(linear: &Linear, weight: &PackedWeight, x: Tensor<D>, then: Option<fn(&mut [f32])>) -> Result<Tensor<D>, TensorData> {
    let (device, dtype, dims) = (x.device(), x.dtype(), x.dims());
    let m = dims[..D - 1].iter().product::<usize>();
    let data = x.into_data();
    let values = match data.as_slice::<f32>() {
        Ok(values) => std::borrow::Cow::Borrowed(values),
        Err(_) => std::borrow::Cow::Owned(data.clone().convert::<f32>().try_into_vec::<f32>().map_err(|_| data.clone())?),
    };
    let bias = match &linear.bias {
        Some(b) => Some(b.val().into_data().convert::<f32>().try_into_vec::<f32>().map_err(|_| data.clone())?),
        None => None,
    };
    let y = weight.matmul_then(&values, m, bias.as_deref(), then);
    let mut out_dims = dims;
    out_dims[D - 1] = weight.n;
    Ok(Tensor::from_data(TensorData::new(y, out_dims.to_vec()).convert_dtype(dtype), &device))
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
        // 70 rows (not a multiple of 4 or of the threads), a partial group and a partial panel;
        // 70 · 133 · 260 multiply-adds, above the split threshold.
        let (k, n, m) = (257, 133, 70);
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

    /// An activation applied by the int8 product gives the numbers of the product, then the
    /// activation, on flex: both GELUs, applied inside the kernel, and an activation it does
    /// not take (ReLU).
    #[test]
    fn an_activation_in_the_product_gives_the_numbers_of_one_after_it() {
        let device = Device::flex();
        let linear = quantize(burn::nn::LinearConfig::new(70, 150).init(&device));
        let x = Tensor::<3>::random([2, 9, 70], burn::tensor::Distribution::Normal(0.0, 2.0), &device);
        for activation in [Activation::Gelu, Activation::GeluNew, Activation::Relu] {
            let fused = crate::feed_forward::dense_activated(&linear, x.clone(), activation).into_data();
            let after = activation.forward(crate::feed_forward::dense(&linear, x.clone())).into_data();
            assert_eq!(fused.as_slice::<f32>().unwrap(), after.as_slice::<f32>().unwrap(), "{activation:?}");
        }
        assert!(Activation::Gelu.in_place_on_host(&device, burn::tensor::DType::F32).is_some(), "GELU is applied inside the product on flex");
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
