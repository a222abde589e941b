//! f32 products with few left-hand rows against a right-hand side stored transposed (Sesame's
//! patch; see SESAME-PATCH.md).
//!
//! `x · Eᵀ` with `E` `[n, k]` row-major (a tied embedding table as the LM head, attention keys)
//! reaches `gemm` as a right-hand side whose columns are contiguous. For a few rows (a decoding
//! step: one per sequence and beam) `gemm` copies all of `E` into its packed layout at every
//! call and runs its 16-row micro-kernel on them: most of a generation step. Here each output
//! is a dot product of a row of `x` and a row of `E`, both read in place, 2 rows × 4 columns at
//! a time with AVX2 and FMA.
//!
//! `x · W` with `W` `[k, n]` row-major (a linear layer's weight) and as few rows fares no
//! better: `gemm` walks `W` down its columns, one cache line per row, a page apart at BERT's
//! widths. [`rows_by_rows`] reads `W` along its rows instead, four rows of `W` at a time
//! against up to four rows of `x`, the sums kept in `out`, on the calling thread: split over
//! two threads, by columns or by rows, it ran slower than on one.

use std::arch::x86_64::*;

/// The most left-hand rows this path takes; more go to `gemm`.
pub(crate) const MAX_ROWS: usize = 16;

/// Whether this CPU runs the kernels (AVX2 and FMA).
pub(crate) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// `out[r, j] = Σ_i a[r, i] · bt[j, i]` for `r < m` and `j` in `j0..j1`: `a` rows `a_rs` apart,
/// `bt` (the right-hand side, transposed) rows `bt_rs` apart, `out` rows `out_rs` apart, all
/// three contiguous along a row. With AVX-512, 4 rows × 4 columns of sixteen-lane accumulators
/// at a time; else 2 × 4 of eight lanes.
///
/// # Safety
/// [`available`]; every row and column read or written lies inside its allocation.
pub(crate) unsafe fn rows_by_columns(m: usize, k: usize, columns: (usize, usize), a: *const f32, a_rs: usize, bt: *const f32, bt_rs: usize, out: *mut f32, out_rs: usize) {
    let args = Operands { k, a, a_rs, bt, bt_rs, out, out_rs };
    // SAFETY: as the caller's; AVX-512 is checked before its copy runs.
    unsafe {
        if avx512() {
            rows_by_columns_avx512(m, columns, &args)
        } else {
            rows_by_columns_avx2(m, columns, &args)
        }
    }
}

/// Whether the CPU has AVX-512 F (16 f32 lanes, 32 registers).
fn avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

/// [`rows_by_columns`]' walk over 4-column tiles with `dots`: `$rows` rows at a time, then
/// one; the last `n % 4` columns one output at a time.
macro_rules! walk_tiles {
    ($dots:ident, $rows:literal, $m:expr, $columns:expr, $args:expr) => {{
        let (m, (j0, j1), args) = ($m, $columns, $args);
        let mut j = j0;
        while j + 4 <= j1 {
            let mut r = 0;
            while r + $rows <= m {
                $dots::<$rows, 4>(args, r, j);
                r += $rows;
            }
            for r in r..m {
                $dots::<1, 4>(args, r, j);
            }
            j += 4;
        }
        for j in j..j1 {
            for r in 0..m {
                $dots::<1, 1>(args, r, j);
            }
        }
    }};
}

/// [`rows_by_columns`] with AVX2 and FMA: 2 rows × 4 columns (8 of the 16 registers).
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_by_columns_avx2(m: usize, columns: (usize, usize), args: &Operands) {
    unsafe { walk_tiles!(dots, 2, m, columns, args) }
}

/// [`rows_by_columns`] with AVX-512: 4 rows × 4 columns (16 of the 32 registers).
#[target_feature(enable = "avx512f")]
unsafe fn rows_by_columns_avx512(m: usize, columns: (usize, usize), args: &Operands) {
    unsafe { walk_tiles!(dots_avx512, 4, m, columns, args) }
}

/// The operands of [`rows_by_columns`].
struct Operands {
    k: usize,
    a: *const f32,
    a_rs: usize,
    bt: *const f32,
    bt_rs: usize,
    out: *mut f32,
    out_rs: usize,
}

/// Outputs `[r0 .. r0 + R, j0 .. j0 + C]`, each a dot product over `k`, eight lanes at a time.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots<const R: usize, const C: usize>(o: &Operands, r0: usize, j0: usize) {
    let k8 = o.k / 8 * 8;
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    unsafe {
        let mut i = 0;
        while i < k8 {
            let mut b = [_mm256_setzero_ps(); C];
            for (c, b) in b.iter_mut().enumerate() {
                *b = _mm256_loadu_ps(o.bt.add((j0 + c) * o.bt_rs + i));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_ps(o.a.add((r0 + r) * o.a_rs + i));
                for (acc, &b) in acc.iter_mut().zip(&b) {
                    *acc = _mm256_fmadd_ps(x, b, *acc);
                }
            }
            i += 8;
        }
        for (r, acc) in acc.iter().enumerate() {
            for (c, &v) in acc.iter().enumerate() {
                let half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
                let pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
                let mut sum = _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair)));
                for i in k8..o.k {
                    sum = (*o.a.add((r0 + r) * o.a_rs + i)).mul_add(*o.bt.add((j0 + c) * o.bt_rs + i), sum);
                }
                *o.out.add((r0 + r) * o.out_rs + j0 + c) = sum;
            }
        }
    }
}

/// [`dots`] sixteen lanes at a time, the last `k % 16` of each row read under a mask.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn dots_avx512<const R: usize, const C: usize>(o: &Operands, r0: usize, j0: usize) {
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    // Lanes `i .. i + 16` of each row, those past `k` read as zeros.
    let mut step = |i: usize, mask: __mmask16| unsafe {
        let mut b = [_mm512_setzero_ps(); C];
        for (c, b) in b.iter_mut().enumerate() {
            *b = _mm512_maskz_loadu_ps(mask, o.bt.add((j0 + c) * o.bt_rs + i));
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = _mm512_maskz_loadu_ps(mask, o.a.add((r0 + r) * o.a_rs + i));
            for (acc, &b) in acc.iter_mut().zip(&b) {
                *acc = _mm512_fmadd_ps(x, b, *acc);
            }
        }
    };
    let k16 = o.k / 16 * 16;
    let mut i = 0;
    while i < k16 {
        step(i, 0xffff);
        i += 16;
    }
    if i < o.k {
        step(i, (1u16 << (o.k - i)) - 1);
    }
    unsafe {
        for (r, acc) in acc.iter().enumerate() {
            for (c, &v) in acc.iter().enumerate() {
                *o.out.add((r0 + r) * o.out_rs + j0 + c) = _mm512_reduce_add_ps(v);
            }
        }
    }
}

/// The most left-hand rows [`rows_by_rows`] takes; more go to `gemm`, faster from 4 rows on
/// with two threads.
pub(crate) const MAX_ROWS_BY_ROWS: usize = 4;

/// Whether [`rows_by_rows`] runs on this CPU: Intel's. Against `gemm` on two threads it gained
/// on an Intel Xeon and lost on an AMD EPYC (Zen 5), where `gemm` reads the weight's columns
/// without the Xeon's stalls (the measurements: SESAME-PATCH.md, patch 8).
pub(crate) fn rows_by_rows_wins() -> bool {
    intel()
}

/// Whether the CPU is Intel's (`cpuid`'s vendor), read once.
pub(crate) fn intel() -> bool {
    static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *INTEL.get_or_init(|| {
        let leaf = core::arch::x86_64::__cpuid(0);
        [leaf.ebx, leaf.edx, leaf.ecx] == [u32::from_le_bytes(*b"Genu"), u32::from_le_bytes(*b"ineI"), u32::from_le_bytes(*b"ntel")]
    })
}

/// `out[r, j] = Σ_i a[r, i] · b[i, j]` for `r < m` and `j < n`: `a` rows `a_rs` apart, `b`
/// (the right-hand side, row-major) rows `b_rs` apart, `out` rows `out_rs` apart, all three
/// contiguous along a row. Each sum runs over `i` in order.
///
/// # Safety
/// [`available`]; every row and column read or written lies inside its allocation.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rows_by_rows(m: usize, k: usize, n: usize, a: *const f32, a_rs: usize, b: *const f32, b_rs: usize, out: *mut f32, out_rs: usize) {
    let mut r = 0;
    while r < m {
        let rows = (m - r).min(4);
        // SAFETY: rows `r .. r + rows` of `a` and `out`, as the caller's.
        unsafe {
            let (a, out) = (a.add(r * a_rs), out.add(r * out_rs));
            match rows {
                4 => rows_by_rows_of::<4>(k, n, a, a_rs, b, b_rs, out, out_rs),
                3 => rows_by_rows_of::<3>(k, n, a, a_rs, b, b_rs, out, out_rs),
                2 => rows_by_rows_of::<2>(k, n, a, a_rs, b, b_rs, out, out_rs),
                _ => rows_by_rows_of::<1>(k, n, a, a_rs, b, b_rs, out, out_rs),
            }
        }
        r += rows;
    }
}

/// [`rows_by_rows`] for `R` rows: `b`'s rows four at a time (one at a time for the last `k %
/// 4`), each pass adding them into the sums in `out`, eight columns a lane-set.
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_by_rows_of<const R: usize>(k: usize, n: usize, a: *const f32, a_rs: usize, b: *const f32, b_rs: usize, out: *mut f32, out_rs: usize) {
    /// `b`'s rows per pass.
    const KB: usize = 4;
    let n8 = n / 8 * 8;
    // SAFETY (every access): rows `< R` of `a` and `out`, rows `< k` of `b`, columns `< n`.
    unsafe {
        let mut i = 0;
        while i < k {
            let step = if i + KB <= k { KB } else { 1 };
            let first = i == 0;
            let mut x = [[_mm256_setzero_ps(); KB]; R];
            for (r, x) in x.iter_mut().enumerate() {
                for (q, x) in x.iter_mut().take(step).enumerate() {
                    *x = _mm256_broadcast_ss(&*a.add(r * a_rs + i + q));
                }
            }
            let mut j = 0;
            while j < n8 {
                let mut acc = [_mm256_setzero_ps(); R];
                if !first {
                    for (r, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm256_loadu_ps(out.add(r * out_rs + j));
                    }
                }
                for q in 0..step {
                    let w = _mm256_loadu_ps(b.add((i + q) * b_rs + j));
                    for (acc, x) in acc.iter_mut().zip(&x) {
                        *acc = _mm256_fmadd_ps(x[q], w, *acc);
                    }
                }
                for (r, &acc) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.add(r * out_rs + j), acc);
                }
                j += 8;
            }
            for j in n8..n {
                for r in 0..R {
                    let mut sum = if first { 0.0 } else { *out.add(r * out_rs + j) };
                    for q in 0..step {
                        sum = (*a.add(r * a_rs + i + q)).mul_add(*b.add((i + q) * b_rs + j), sum);
                    }
                    *out.add(r * out_rs + j) = sum;
                }
            }
            i += step;
        }
        if k == 0 {
            for r in 0..R {
                for j in 0..n {
                    *out.add(r * out_rs + j) = 0.0;
                }
            }
        }
    }
}
