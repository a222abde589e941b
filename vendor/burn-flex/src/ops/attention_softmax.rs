//! The row softmax of naive attention for f32, in AVX2 and FMA (Sesame's patch; see
//! SESAME-PATCH.md).
//!
//! `naive_attention_head` scales, masks and biases each row of scores and takes its softmax
//! element by element, with libm's scalar `expf`: at 128 tokens that was about as long as the
//! two products around it. Here the same steps run eight lanes at a time, `exp` as a
//! polynomial (Cephes' `expf`, within 2 ulp of the exact value).

use std::arch::x86_64::*;

/// Whether this CPU runs [`masked_softmax`] (AVX2 and FMA).
pub(crate) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// `row` becomes the softmax of `row[i] · scale`, set to `-inf` where `mask[i] != 0` or
/// `i >= visible`, plus `bias[i]`, in that order (the scalar code's). A row with no finite
/// score becomes zeros; a NaN score gives NaN.
///
/// # Safety
/// [`available`]; `mask` and `bias`, where given, are as long as `row`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn masked_softmax(row: &mut [f32], scale: f32, mask: Option<&[u8]>, visible: usize, bias: Option<&[f32]>) {
    let n = row.len();
    let whole = n - n % 8;
    let visible = visible.min(n);
    let neg_inf = _mm256_set1_ps(f32::NEG_INFINITY);
    let p = row.as_mut_ptr();
    // SAFETY (each block): lanes `i .. i + 8` of `row`, `mask` and `bias`, `i + 8 <= whole`.
    // Scores, and their largest value.
    let mut peak = neg_inf;
    for i in (0..whole).step_by(8) {
        unsafe {
            let v = scores(p.add(i), mask.map(|m| m.as_ptr().add(i)), bias.map(|b| b.as_ptr().add(i)), i, visible, scale);
            _mm256_storeu_ps(p.add(i), v);
            peak = max_ignoring_nan(peak, v);
        }
    }
    // The tail, padded to eight lanes (past `n`, hidden: `-inf`, which adds nothing).
    let mut tail = neg_inf;
    if whole < n {
        let (mut raw, mut tail_mask, mut tail_bias) = ([0.0f32; 8], [0u8; 8], [0.0f32; 8]);
        raw[..n - whole].copy_from_slice(&row[whole..]);
        if let Some(mask) = mask {
            tail_mask[..n - whole].copy_from_slice(&mask[whole..]);
        }
        if let Some(bias) = bias {
            tail_bias[..n - whole].copy_from_slice(&bias[whole..]);
        }
        let (m, b) = (mask.map(|_| tail_mask.as_ptr()), bias.map(|_| tail_bias.as_ptr()));
        // SAFETY: eight lanes of each array.
        tail = unsafe { scores(raw.as_ptr(), m, b, whole, visible, scale) };
        peak = unsafe { max_ignoring_nan(peak, tail) };
    }
    let peak = unsafe { horizontal(peak) }.into_iter().fold(f32::NEG_INFINITY, |m, v| if v > m { v } else { m });
    if peak == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }

    // exp(score - peak), and their sum.
    let vpeak = _mm256_set1_ps(peak);
    let mut sum = _mm256_setzero_ps();
    for i in (0..whole).step_by(8) {
        unsafe {
            let e = exp(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), vpeak));
            _mm256_storeu_ps(p.add(i), e);
            sum = _mm256_add_ps(sum, e);
        }
    }
    let tail = unsafe { exp(_mm256_sub_ps(tail, vpeak)) };
    sum = _mm256_add_ps(sum, tail);
    let sum: f32 = unsafe { horizontal(sum) }.iter().sum();

    let inv = _mm256_set1_ps(1.0 / sum);
    for i in (0..whole).step_by(8) {
        unsafe { _mm256_storeu_ps(p.add(i), _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), inv)) };
    }
    if whole < n {
        let values = unsafe { horizontal(_mm256_mul_ps(tail, inv)) };
        row[whole..].copy_from_slice(&values[..n - whole]);
    }
}

/// Lanes `first .. first + 8` of the scores from `raw`: `· scale`, `-inf` where the `mask` byte
/// is not 0 or the lane is at or past `visible`, `+ bias`.
///
/// # Safety
/// AVX2; eight lanes at `raw` and at `mask` and `bias` where given.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn scores(raw: *const f32, mask: Option<*const u8>, bias: Option<*const f32>, first: usize, visible: usize, scale: f32) -> __m256 {
    let neg_inf = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut v = _mm256_mul_ps(unsafe { _mm256_loadu_ps(raw) }, _mm256_set1_ps(scale));
    if let Some(mask) = mask {
        let bytes = unsafe { _mm_loadl_epi64(mask as *const __m128i) };
        let open = _mm256_cmpeq_epi32(_mm256_cvtepu8_epi32(bytes), _mm256_setzero_si256());
        v = _mm256_blendv_ps(neg_inf, v, _mm256_castsi256_ps(open));
    }
    if visible < first + 8 {
        let index = _mm256_add_epi32(_mm256_set1_epi32(first as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        let hidden = _mm256_cmpgt_epi32(index, _mm256_set1_epi32(visible as i32 - 1));
        v = _mm256_blendv_ps(v, neg_inf, _mm256_castsi256_ps(hidden));
    }
    if let Some(bias) = bias {
        v = _mm256_add_ps(v, unsafe { _mm256_loadu_ps(bias) });
    }
    v
}

/// The eight lanes of `v`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn horizontal(v: __m256) -> [f32; 8] {
    let mut lanes = [0.0f32; 8];
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
    lanes
}

/// The lanes' larger of `m` and `v`, keeping `m` where `v` is NaN (as `if v > m { m = v }`).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn max_ignoring_nan(m: __m256, v: __m256) -> __m256 {
    _mm256_blendv_ps(m, v, _mm256_cmp_ps::<_CMP_GT_OQ>(v, m))
}

/// `e^x` in each lane: Cephes' `expf` (a degree-5 polynomial on `x - n·ln 2`, `|x - n·ln 2| ≤
/// ln 2 / 2`, times `2^n`); 0 below -87.3 (where `e^x` leaves the normal floats) and for
/// `-inf`, `+inf` above 88.7, NaN for NaN.
///
/// # Safety
/// AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp(x: __m256) -> __m256 {
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-87.33654));
    let over = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(88.72283));
    let xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654)), _mm256_set1_ps(88.72283));
    // n = round(x / ln 2); r = x - n·ln 2, with ln 2 in two parts for the precision.
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(xc, _mm256_set1_ps(std::f32::consts::LOG2_E)));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), xc);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut y = _mm256_set1_ps(1.987_569_1e-4);
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5.000_000_1e-1] {
        y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(c));
    }
    let y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0));
    // 2^n for n in -126..=128: n = 128 (x near 88.7) as 2·2^127.
    let n_i = _mm256_cvtps_epi32(n);
    let half = _mm256_srai_epi32::<1>(n_i);
    let (a, b) = (_mm256_add_epi32(half, _mm256_set1_epi32(127)), _mm256_add_epi32(_mm256_sub_epi32(n_i, half), _mm256_set1_epi32(127)));
    let v = _mm256_mul_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(a))), _mm256_castsi256_ps(_mm256_slli_epi32::<23>(b)));
    let v = _mm256_andnot_ps(under, v);
    let v = _mm256_blendv_ps(v, _mm256_set1_ps(f32::INFINITY), over);
    _mm256_blendv_ps(v, x, nan)
}
