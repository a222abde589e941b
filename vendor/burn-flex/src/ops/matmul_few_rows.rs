//! f32 products with few left-hand rows against a right-hand side stored transposed (Sesame's
//! patch; see SESAME-PATCH.md).
//!
//! `x · Eᵀ` with `E` `[n, k]` row-major (a tied embedding table as the LM head, attention keys)
//! reaches `gemm` as a right-hand side whose columns are contiguous. For a few rows (a decoding
//! step: one per sequence and beam) `gemm` copies all of `E` into its packed layout at every
//! call and runs its 16-row micro-kernel on them: most of a generation step. Here each output
//! is a dot product of a row of `x` and a row of `E`, both read in place, 2 rows × 4 columns at
//! a time with AVX2 and FMA.

use std::arch::x86_64::*;

/// The most left-hand rows this path takes; more go to `gemm`.
pub(crate) const MAX_ROWS: usize = 16;

/// Whether this CPU runs the kernels (AVX2 and FMA).
pub(crate) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// `out[r, j] = Σ_i a[r, i] · bt[j, i]` for `r < m` and `j` in `j0..j1`: `a` rows `a_rs` apart,
/// `bt` (the right-hand side, transposed) rows `bt_rs` apart, `out` rows `out_rs` apart, all
/// three contiguous along a row.
///
/// # Safety
/// [`available`]; every row and column read or written lies inside its allocation.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rows_by_columns(m: usize, k: usize, (j0, j1): (usize, usize), a: *const f32, a_rs: usize, bt: *const f32, bt_rs: usize, out: *mut f32, out_rs: usize) {
    let args = Operands { k, a, a_rs, bt, bt_rs, out, out_rs };
    let mut j = j0;
    unsafe {
        while j + 4 <= j1 {
            let mut r = 0;
            while r + 2 <= m {
                dots::<2, 4>(&args, r, j);
                r += 2;
            }
            if r < m {
                dots::<1, 4>(&args, r, j);
            }
            j += 4;
        }
        for j in j..j1 {
            for r in 0..m {
                dots::<1, 1>(&args, r, j);
            }
        }
    }
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
