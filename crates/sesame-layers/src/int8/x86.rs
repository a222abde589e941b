//! The x86 kernels of the int8 product (AVX2, AVX-VNNI, AVX-512 VNNI, AMX) and the x86
//! quantisation of activations; each gives the portable code's numbers.

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
                            *a = _mm256_add_epi32(*a, o);
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
            // `-128 · Σw` onto each sum, then the group's sums times its scale, in float (no
            // FMA: the portable code's rounding).
            // SAFETY: the group's 16 offsets of each panel, inside `[panels][groups][16]`.
            let offsets: [__m512i; P] = std::array::from_fn(|p| unsafe { _mm512_loadu_si512(w.offsets.as_ptr().add(((p0 + p) * groups + group) * PANEL) as *const _) });
            for (r, (sums, acc)) in sums.iter_mut().zip(&acc).enumerate() {
                let scale = _mm512_set1_ps(row_scales[(r0 + r) * groups + group]);
                for ((sum, &a), &o) in sums.iter_mut().zip(acc).zip(&offsets) {
                    *sum = _mm512_add_ps(*sum, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a, o)), scale));
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

/// The AMX product (Intel's tile multiply, `tdpbusd`): one instruction sums a group's 64
/// inputs for 16 rows × 16 columns. A group of a packed panel (16 steps of 64 bytes) is exactly
/// a weight tile, and 16 rows of a group of `q + 128` an activation tile; a block is 32 rows ×
/// 2 panels, four sum tiles. Each group's sums are stored and scaled on 512 bits in group order,
/// as the other kernels scale them (no FMA), so the numbers are the portable code's. Rows
/// short of a tile, and inputs that are not whole groups, go to the AVX-512 kernel.
pub(super) mod amx {
    use std::arch::asm;
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;
    use std::sync::OnceLock;

    use super::super::{PackedWeight, GROUP, PANEL};

    /// Rows per tile.
    const TILE_ROWS: usize = 16;
    /// The sums of one tile: 16 rows × 16 columns.
    const TILE: usize = TILE_ROWS * PANEL;

    /// Whether the CPU has AMX's tiles and int8 products, the OS saves their state
    /// (XCR0's XTILECFG and XTILEDATA), and Linux lets this process use it (a process must
    /// ask for the tile data before its first tile instruction: `ARCH_REQ_XCOMP_PERM`).
    pub(in super::super) fn available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            #[allow(unused_unsafe)]
            // SAFETY: `cpuid` exists on every x86-64 CPU.
            let (leaf1, leaf7) = unsafe { (__cpuid(1), __cpuid_count(7, 0)) };
            let (osxsave, tile, int8) = (leaf1.ecx >> 27 & 1 == 1, leaf7.edx >> 24 & 1 == 1, leaf7.edx >> 25 & 1 == 1);
            if !(osxsave && tile && int8) {
                return false;
            }
            let (xcr0, _high): (u32, u32);
            // SAFETY: `xgetbv` exists where CPUID says OSXSAVE; it reads XCR0 only.
            unsafe { asm!("xgetbv", in("ecx") 0u32, out("eax") xcr0, out("edx") _high, options(nomem, nostack, preserves_flags)) };
            xcr0 >> 17 & 3 == 3 && request_tile_data()
        })
    }

    #[cfg(target_os = "linux")]
    fn request_tile_data() -> bool {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: `arch_prctl` with this request only changes which state Linux saves for
        // this process.
        unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
    }

    #[cfg(not(target_os = "linux"))]
    fn request_tile_data() -> bool {
        false
    }

    /// `ldtilecfg`'s 64 bytes: palette 1, tiles 0–7 of 16 rows × 64 bytes.
    #[repr(C, align(64))]
    struct TileConfig {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        /// Bytes per row, per tile.
        colsb: [u16; 16],
        rows: [u8; 16],
    }

    /// # Safety
    /// [`available`] said yes; `xa` is `[m, k4]`, `q + 128` of the quantised rows,
    /// `row_scales` `[m, groups]`, `bias` padded to whole panels, `out` `[m, n]`.
    #[target_feature(enable = "avx512f,avx512vnni")]
    #[allow(clippy::too_many_arguments)]
    pub(in super::super) unsafe fn matmul(w: &PackedWeight, xa: &[u8], m: usize, row_scales: &[f32], bias: &[f32], then: Option<fn(&mut [f32])>, out: &mut [MaybeUninit<f32>]) {
        assert!(xa.len() == m * w.k4 && out.len() == m * w.n && bias.len() == w.scales.len());
        // Whole tiles of rows and whole groups of inputs only.
        let tiled = if w.k4 % GROUP == 0 { m / TILE_ROWS * TILE_ROWS } else { 0 };
        if tiled > 0 {
            let mut rows = [0u8; 16];
            let mut colsb = [0u16; 16];
            rows[..8].fill(TILE_ROWS as u8);
            colsb[..8].fill(64);
            let config = TileConfig { palette: 1, start_row: 0, reserved: [0; 14], colsb, rows };
            // SAFETY: a valid palette-1 configuration of 8 tiles.
            unsafe { asm!("ldtilecfg [{}]", in(reg) &config, options(nostack, readonly)) };
            // A block of rows at a time, across every panel: its activation tiles stay in cache
            // while the weight's panels pass.
            let panels = w.n.div_ceil(PANEL);
            let mut r = 0;
            while r < tiled {
                let halves = if r + 2 * TILE_ROWS <= tiled { 2 } else { 1 };
                let mut p = 0;
                while p < panels {
                    let pair = p + 2 <= panels;
                    // SAFETY: rows `r .. r + 16·halves` and panels `p ..` exist.
                    unsafe {
                        match (halves, pair) {
                            (2, true) => block::<2, 2>(w, p, xa, r, row_scales, bias, out),
                            (2, false) => block::<2, 1>(w, p, xa, r, row_scales, bias, out),
                            (_, true) => block::<1, 2>(w, p, xa, r, row_scales, bias, out),
                            (_, false) => block::<1, 1>(w, p, xa, r, row_scales, bias, out),
                        }
                    }
                    p += if pair { 2 } else { 1 };
                }
                // Once the block's rows are written, while they are in cache.
                if let Some(then) = then {
                    let n = w.n;
                    // SAFETY: rows `r .. r + 16·halves`, written above.
                    then(unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().add(r * n).cast::<f32>(), halves * TILE_ROWS * n) });
                }
                r += halves * TILE_ROWS;
            }
            // SAFETY: no tile is used after this; their state is released.
            unsafe { asm!("tilerelease", options(nomem, nostack)) };
        }
        if tiled < m {
            let (k4, n, groups) = (w.k4, w.n, w.groups());
            // SAFETY: the rows after the tiled ones, with their scales and output.
            unsafe { super::avx512::matmul(w, &xa[tiled * k4..], m - tiled, &row_scales[tiled * groups..], bias, then, &mut out[tiled * n..]) };
        }
    }

    /// Rows `r0 .. r0 + 16·H` of the output's columns in panels `p0 .. p0 + P`: sum tile
    /// `(h, p)` is `tmm(2h + p)`, activation tiles `tmm4`, `tmm5`, weight tiles `tmm6`, `tmm7`.
    /// A group's sum tiles are stored into one of two buffers and scaled (its `-128 · Σw` added
    /// first) while the next group's products run into the other.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn block<const H: usize, const P: usize>(w: &PackedWeight, p0: usize, xa: &[u8], r0: usize, row_scales: &[f32], bias: &[f32], out: &mut [MaybeUninit<f32>]) {
        let (k4, n, groups) = (w.k4, w.n, w.groups());
        // Written by the first group's scaling before any is read.
        let mut sums = [[MaybeUninit::<__m512>::uninit(); P]; 32];
        // Two groups' sum tiles, `[H][P][16][16]` each; `tilestored` writes them before they
        // are read.
        let mut tiles = [const { MaybeUninit::<Tiles>::uninit() }; 2];
        for group in 0..=groups {
            if group < groups {
                let c = tiles[group % 2].as_mut_ptr().cast::<i32>();
                // SAFETY: 16 rows of 64 bytes at stride `k4` from row `r0 + 16h` of `xa` and the
                // group's 16 steps of 64 bytes in panels `p0 .. p0 + P`, inside their slices;
                // the sums go into `tiles`.
                unsafe {
                    let a0 = xa.as_ptr().add(r0 * k4 + group * GROUP);
                    let a1 = a0.add(TILE_ROWS * k4);
                    let b0 = w.panels.as_ptr().add(p0 * k4 * PANEL + group * GROUP * PANEL);
                    let b1 = b0.add(k4 * PANEL);
                    let (ka, kb) = (k4, 64usize);
                    let (c1, c2, c3) = (c.add(TILE), c.add(2 * TILE), c.add(3 * TILE));
                    match (H, P) {
                        (2, 2) => asm!(
                            "tilezero tmm0",
                            "tilezero tmm1",
                            "tilezero tmm2",
                            "tilezero tmm3",
                            "tileloadd tmm4, [{a0} + {ka}*1]",
                            "tileloadd tmm6, [{b0} + {kb}*1]",
                            "tdpbusd tmm0, tmm4, tmm6",
                            "tileloadd tmm7, [{b1} + {kb}*1]",
                            "tdpbusd tmm1, tmm4, tmm7",
                            "tileloadd tmm5, [{a1} + {ka}*1]",
                            "tdpbusd tmm2, tmm5, tmm6",
                            "tdpbusd tmm3, tmm5, tmm7",
                            "tilestored [{c0} + {kb}*1], tmm0",
                            "tilestored [{c1} + {kb}*1], tmm1",
                            "tilestored [{c2} + {kb}*1], tmm2",
                            "tilestored [{c3} + {kb}*1], tmm3",
                            a0 = in(reg) a0, a1 = in(reg) a1, b0 = in(reg) b0, b1 = in(reg) b1,
                            c0 = in(reg) c, c1 = in(reg) c1, c2 = in(reg) c2, c3 = in(reg) c3, ka = in(reg) ka, kb = in(reg) kb, options(nostack)),
                        (2, 1) => asm!(
                            "tilezero tmm0",
                            "tilezero tmm2",
                            "tileloadd tmm4, [{a0} + {ka}*1]",
                            "tileloadd tmm6, [{b0} + {kb}*1]",
                            "tdpbusd tmm0, tmm4, tmm6",
                            "tileloadd tmm5, [{a1} + {ka}*1]",
                            "tdpbusd tmm2, tmm5, tmm6",
                            "tilestored [{c0} + {kb}*1], tmm0",
                            "tilestored [{c1} + {kb}*1], tmm2",
                            a0 = in(reg) a0, a1 = in(reg) a1, b0 = in(reg) b0, c0 = in(reg) c, c1 = in(reg) c1,
                            ka = in(reg) ka, kb = in(reg) kb, options(nostack)),
                        (1, 2) => asm!(
                            "tilezero tmm0",
                            "tilezero tmm1",
                            "tileloadd tmm4, [{a0} + {ka}*1]",
                            "tileloadd tmm6, [{b0} + {kb}*1]",
                            "tdpbusd tmm0, tmm4, tmm6",
                            "tileloadd tmm7, [{b1} + {kb}*1]",
                            "tdpbusd tmm1, tmm4, tmm7",
                            "tilestored [{c0} + {kb}*1], tmm0",
                            "tilestored [{c1} + {kb}*1], tmm1",
                            a0 = in(reg) a0, b0 = in(reg) b0, b1 = in(reg) b1, c0 = in(reg) c, c1 = in(reg) c1,
                            ka = in(reg) ka, kb = in(reg) kb, options(nostack)),
                        _ => asm!(
                            "tilezero tmm0",
                            "tileloadd tmm4, [{a0} + {ka}*1]",
                            "tileloadd tmm6, [{b0} + {kb}*1]",
                            "tdpbusd tmm0, tmm4, tmm6",
                            "tilestored [{c0} + {kb}*1], tmm0",
                            a0 = in(reg) a0, b0 = in(reg) b0, c0 = in(reg) c,
                            ka = in(reg) ka, kb = in(reg) kb, options(nostack)),
                    }
                }
            }
            // The previous group's sums, `-128 · Σw` added, times its scale, in float (no FMA:
            // the portable code's rounding), added to the block's sums (into 0 for the first group, as the
            // portable code starts).
            let Some(group) = group.checked_sub(1) else { continue };
            let c = tiles[group % 2].as_ptr().cast::<i32>();
            // SAFETY: the group's 16 offsets of each panel, inside `[panels][groups][16]`.
            let offsets: [__m512i; P] = std::array::from_fn(|p| unsafe { _mm512_loadu_si512(w.offsets.as_ptr().add(((p0 + p) * groups + group) * PANEL) as *const _) });
            for h in 0..H {
                for i in 0..TILE_ROWS {
                    let row = h * TILE_ROWS + i;
                    let scale = _mm512_set1_ps(row_scales[(r0 + row) * groups + group]);
                    for p in 0..P {
                        // SAFETY: row `i` of sum tile `(h, p)`, stored by the group's products
                        // (the `(2, 1)` and `(1, 2)` blocks store their two tiles first and second).
                        let a = unsafe { _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(c.add((h * P + p) * TILE + i * PANEL) as *const _), offsets[p])) };
                        let before = if group == 0 { _mm512_setzero_ps() } else { unsafe { sums[row][p].assume_init() } };
                        sums[row][p].write(_mm512_add_ps(before, _mm512_mul_ps(a, scale)));
                    }
                }
            }
        }
        for (row, sums) in sums.iter().take(H * TILE_ROWS).enumerate() {
            for (p, sum) in sums.iter().enumerate() {
                let j0 = (p0 + p) * PANEL;
                let width = PANEL.min(n - j0);
                // SAFETY: every group wrote the block's sums; `scales` and `bias` are padded to
                // whole panels; the store writes the panel's `width` columns of row `r0 + row`,
                // inside `[m, n]`.
                unsafe {
                    let v = _mm512_add_ps(_mm512_mul_ps(sum.assume_init(), _mm512_loadu_ps(w.scales.as_ptr().add(j0))), _mm512_loadu_ps(bias.as_ptr().add(j0)));
                    let to = out.as_mut_ptr().add((r0 + row) * n + j0).cast::<f32>();
                    _mm512_mask_storeu_ps(to, ((1u32 << width) - 1) as __mmask16, v);
                }
            }
        }
    }

    /// Four sum tiles, aligned as `tilestored` stores fastest.
    #[repr(C, align(64))]
    struct Tiles([i32; 4 * TILE]);
}
