//! What kind of device a tensor lives on. Burn 0.22's `Device` names its backend only in its
//! debug form, so that is what these read.

use burn::prelude::*;

/// Whether `device` is a libtorch device.
pub fn is_libtorch(device: &Device) -> bool {
    format!("{device:?}").contains("LibTorch")
}

/// Whether `device`'s tensors are host memory that `into_data` hands over without a
/// transfer (flex, ndarray): work on their values can run on the host in place.
pub fn is_host_memory(device: &Device) -> bool {
    let name = format!("{device:?}");
    name.contains("Flex") || name.contains("NdArray")
}

/// Whether `device` computes on the host CPU (flex, ndarray, libtorch or CubeCL on the CPU):
/// there, independent work (micro-batches, inference batches) can run on threads.
pub fn is_cpu(device: &Device) -> bool {
    let name = format!("{device:?}");
    ["Flex", "NdArray", "Cpu"].iter().any(|n| name.contains(n))
}

/// How many pieces of independent work (micro-batches, inference batches) to run at once on
/// `device` by default: one per core on a CPU backend whose operations at these sizes use one
/// core (flex, ndarray, CubeCL's CPU); 1 on libtorch, whose operations already use every core
/// (two threads of them measured 5–10% slower than one), and on GPUs.
pub fn default_threads(device: &Device) -> usize {
    if is_cpu(device) && !is_libtorch(device) {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        1
    }
}

/// Runs `f` with flex's and ndarray's kernels kept on one thread: its products and element-wise
/// loops see a rayon pool of one. For a worker of [`default_threads`] that has a core of its own,
/// the products split across rayon's shared pool only queue behind the other workers' halves
/// (on a 2-core AMD EPYC, two workers each splitting a 1024 × 1536 × 384 product ran 133
/// GFLOP/s together, each on its own core 166). `f` runs on the pool's thread, so it sets up
/// any thread-local state (a random stream) itself.
pub fn on_one_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
        Ok(pool) => pool.install(f),
        Err(_) => f(),
    }
}

/// `f()`, compiled for AVX2 and FMA where the CPU has them: a host loop inside `f` (and the
/// `#[inline]` functions it calls) then vectorises at 256 bits instead of the x86-64 baseline's
/// 128. The same operations in the same order either way, so the numbers do not change (Rust
/// never fuses a multiply and an add on its own). Only what is inlined into `f`'s body gets the
/// features: pass `#[inline(always)] || …`, and call the per-element work directly or as an
/// `#[inline(always)]` closure (a function item passed as `impl Fn` is called through a shim
/// that a large body keeps out of line, compiled for the baseline, one call per element).
#[inline(always)]
pub fn vectorised<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has the features just checked.
            return unsafe { avx2(f) };
        }
    }
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_one_thread_gives_its_work_a_pool_of_one_and_returns_its_result() {
        assert_eq!(on_one_thread(rayon::current_num_threads), 1);
        let outside = std::thread::spawn(rayon::current_num_threads).join().unwrap();
        assert_eq!(outside, rayon::current_num_threads());
        assert_eq!(on_one_thread(|| (1..=10).sum::<u32>()), 55);
    }

    /// Products of a few rows by a transposed right-hand side (an LM head tied to the
    /// embeddings, attention scores against keys) take burn-flex's path without packing
    /// (`vendor/burn-flex`): the same sums as a plain loop in f64, for every tail of the
    /// kernel's tiles (4 × 4 of 16 lanes with AVX-512, 2 × 4 of 8 with AVX2), split across
    /// threads, and in batches.
    #[test]
    fn few_rows_by_transposed_columns_are_the_plain_sums() {
        use burn::prelude::*;
        let device = Device::flex();
        let value = |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 1999) as f32 / 999.5 - 1.0;
        let check = |m: usize, k: usize, n: usize, batch: usize| {
            let a: Vec<f32> = (0..batch * m * k).map(|i| value(i, 1)).collect();
            let e: Vec<f32> = (0..batch * n * k).map(|i| value(i, 2)).collect();
            let at = Tensor::<3>::from_data(TensorData::new(a.clone(), [batch, m, k]), &device);
            let et = Tensor::<3>::from_data(TensorData::new(e.clone(), [batch, n, k]), &device);
            let product = if batch == 1 { at.squeeze_dim::<2>(0).matmul(et.squeeze_dim::<2>(0).transpose()).unsqueeze_dim(0) } else { at.matmul(et.swap_dims(1, 2)) };
            let got = product.into_data().try_to_vec::<f32>().unwrap();
            for b in 0..batch {
                for r in 0..m {
                    for j in 0..n {
                        let exact: f64 = (0..k).map(|i| a[(b * m + r) * k + i] as f64 * e[(b * n + j) * k + i] as f64).sum();
                        let magnitude: f64 = (0..k).map(|i| (a[(b * m + r) * k + i] as f64 * e[(b * n + j) * k + i] as f64).abs()).sum();
                        let y = got[(b * m + r) * n + j] as f64;
                        assert!((y - exact).abs() <= 1e-6 * magnitude.max(1.0), "flex: [{m}, {k}] x [{k}, {n}] (batch {batch}) at [{b}, {r}, {j}]: {y} vs {exact}");
                    }
                }
            }
        };
        // Every tail of the tiles: rows by 4 (AVX-512) and 2 (AVX2), columns by 4, `k` by 16
        // and 8 lanes.
        for m in [1, 2, 3, 4, 5, 7, 16, 17] {
            for (k, n) in [(1, 1), (7, 3), (8, 4), (9, 5), (16, 6), (17, 7), (33, 2), (64, 9), (100, 33)] {
                check(m, k, n, 1);
            }
        }
        // Above flex's threshold for splitting a product across threads (192³ multiply-adds).
        check(16, 768, 700, 1);
        check(3, 64, 37, 6);
    }

    /// Products of few rows are the plain sums for a row-major and a transposed right-hand
    /// side, and the same on one thread as on all: 1 to 4 rows by a row-major one (flex with
    /// Sesame's vendor patch 8 on Intel CPUs, `b` read along its rows; odd `k` and `n` for the edges), 17 to
    /// 64 rows by a wide one (patch 7: `gemm` by ranges of 192 columns, a partial last range).
    #[test]
    fn products_of_few_rows_are_the_plain_sums_on_every_path() {
        use burn::prelude::*;
        let device = Device::flex();
        let value = |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 1999) as f32 / 999.5 - 1.0;
        // The last: rows 4 KiB apart, copied to padded rows first on Intel CPUs (patch 7).
        for (m, k, n) in [(1, 6, 9), (3, 130, 1027), (4, 768, 3072), (2, 67, 40), (8, 67, 40), (17, 96, 400), (32, 768, 1000), (64, 200, 384), (24, 130, 1024)] {
            let a: Vec<f32> = (0..m * k).map(|i| value(i, 1)).collect();
            let w: Vec<f32> = (0..k * n).map(|i| value(i, 2)).collect();
            let at = Tensor::<2>::from_data(TensorData::new(a.clone(), [m, k]), &device);
            // `[k, n]` row-major, and the same values as the transpose of an `[n, k]` tensor.
            let row_major = Tensor::<2>::from_data(TensorData::new(w.clone(), [k, n]), &device);
            let transposed: Vec<f32> = (0..n * k).map(|t| w[(t % k) * n + t / k]).collect();
            let transposed = Tensor::<2>::from_data(TensorData::new(transposed, [n, k]), &device).transpose();
            for rhs in [row_major, transposed] {
                let product = |rhs: Tensor<2>| at.clone().matmul(rhs).into_data().try_to_vec::<f32>().unwrap();
                let got = product(rhs.clone());
                let alone = on_one_thread(|| product(rhs));
                assert!(got == alone, "[{m}, {k}] x [{k}, {n}]: the same sums on one thread");
                for r in 0..m {
                    for j in 0..n {
                        let exact: f64 = (0..k).map(|i| a[r * k + i] as f64 * w[i * n + j] as f64).sum();
                        let magnitude: f64 = (0..k).map(|i| (a[r * k + i] as f64 * w[i * n + j] as f64).abs()).sum();
                        let y = got[r * n + j] as f64;
                        assert!((y - exact).abs() <= 1e-6 * magnitude.max(1.0), "flex: [{m}, {k}] x [{k}, {n}] at [{r}, {j}]: {y} vs {exact}");
                    }
                }
            }
        }
    }

    /// flex's attention (with Sesame's vendor patch 4, its row softmax in AVX2 and FMA) is
    /// the softmax of the scaled, masked, biased and causal scores computed in f64, for every
    /// tail of its 8 lanes, rows with every key masked, and scores far below the row's largest.
    #[test]
    fn attention_is_the_plain_softmax() {
        use burn::prelude::*;
        use burn::tensor::module::attention;
        use burn::tensor::ops::AttentionModuleOptions;
        let device = Device::flex();
        let value = |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 1999) as f32 / 999.5 - 1.0;
        let (batch, heads, seq_q, d) = (2, 2, 5, 8);
        for seq_kv in [1, 7, 8, 13, 37] {
            for (masked, biased, causal, spread) in [(false, false, false, 1.0), (true, true, false, 1.0), (true, false, true, 1.0), (false, true, true, 40.0)] {
                let q: Vec<f32> = (0..batch * heads * seq_q * d).map(|i| value(i, 1) * spread).collect();
                let k: Vec<f32> = (0..batch * heads * seq_kv * d).map(|i| value(i, 2)).collect();
                let v: Vec<f32> = (0..batch * heads * seq_kv * d).map(|i| value(i, 3)).collect();
                // Key `j` hidden from query `i` where `(i + j) % 3 == 0`, and row 2 of batch 1 entirely.
                let hidden = |b: usize, i: usize, j: usize| masked && ((i + j) % 3 == 0 || (b == 1 && i == 2));
                let mask: Vec<bool> = (0..batch * seq_q * seq_kv).map(|t| hidden(t / (seq_q * seq_kv), t / seq_kv % seq_q, t % seq_kv)).collect();
                let bias: Vec<f32> = (0..heads * seq_q * seq_kv).map(|t| if biased { value(t, 4) * 3.0 } else { 0.0 }).collect();
                let t4 = |x: &Vec<f32>, s: [usize; 4]| Tensor::<4>::from_data(TensorData::new(x.clone(), s), &device);
                // The same values as a `[batch, seq, heads, d]` tensor with its middle axes
                // swapped, as attention's projections reach it (read in place by flex).
                let swapped = |x: &Vec<f32>, [b, h, s, d]: [usize; 4]| {
                    let moved: Vec<f32> = (0..x.len()).map(|t| (t / (s * h * d), t / (h * d) % s, t / d % h, t % d)).map(|(i, j, k, l)| x[((i * h + k) * s + j) * d + l]).collect();
                    Tensor::<4>::from_data(TensorData::new(moved, [b, s, h, d]), &device).swap_dims(1, 2)
                };
                let run = |view: &dyn Fn(&Vec<f32>, [usize; 4]) -> Tensor<4>| {
                    attention(
                        view(&q, [batch, heads, seq_q, d]),
                        view(&k, [batch, heads, seq_kv, d]),
                        view(&v, [batch, heads, seq_kv, d]),
                        masked.then(|| Tensor::<4, Bool>::from_data(TensorData::new(mask.clone(), [batch, 1, seq_q, seq_kv]), &device)),
                        biased.then(|| t4(&bias, [1, heads, seq_q, seq_kv])),
                        AttentionModuleOptions { is_causal: causal, ..Default::default() },
                    )
                };
                let got = run(&t4).into_data().try_to_vec::<f32>().unwrap();
                // From swapped inputs; and the output's heads merged as a layer merges them.
                let merged = run(&swapped).swap_dims(1, 2).reshape([batch, seq_q, heads * d]).into_data().try_to_vec::<f32>().unwrap();
                for (t, &y) in merged.iter().enumerate() {
                    let (b, i, h, l) = (t / (seq_q * heads * d), t / (heads * d) % seq_q, t / d % heads, t % d);
                    assert_eq!(y, got[((b * heads + h) * seq_q + i) * d + l], "swapped inputs, merged heads: seq_kv {seq_kv}, at {t}");
                }
                let offset = seq_kv as isize - seq_q as isize;
                for b in 0..batch {
                    for h in 0..heads {
                        for i in 0..seq_q {
                            let scores: Vec<f64> = (0..seq_kv)
                                .map(|j| {
                                    let dot: f64 = (0..d).map(|t| q[((b * heads + h) * seq_q + i) * d + t] as f64 * k[((b * heads + h) * seq_kv + j) * d + t] as f64).sum();
                                    let hide = hidden(b, i, j) || (causal && j as isize > i as isize + offset);
                                    if hide { f64::NEG_INFINITY } else { dot / (d as f64).sqrt() + bias[(h * seq_q + i) * seq_kv + j] as f64 }
                                })
                                .collect();
                            let peak = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                            let weights: Vec<f64> = scores.iter().map(|s| if peak == f64::NEG_INFINITY { 0.0 } else { (s - peak).exp() }).collect();
                            let total: f64 = weights.iter().sum();
                            for t in 0..d {
                                let exact: f64 = (0..seq_kv).map(|j| if total > 0.0 { weights[j] / total } else { 0.0 } * v[((b * heads + h) * seq_kv + j) * d + t] as f64).sum();
                                let y = got[((b * heads + h) * seq_q + i) * d + t] as f64;
                                let case = format!("seq_kv {seq_kv}, masked {masked}, biased {biased}, causal {causal}, spread {spread}, at [{b}, {h}, {i}, {t}]");
                                assert!((y - exact).abs() <= 1e-5, "{case}: {y} vs {exact}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Long attention on flex: 1024 × 1024 scores (the naive path, Sesame's burn-flex patch 6,
    /// a BART encoder over 1024 tokens) and one query more (the flash path), masked and biased,
    /// against the softmax in f64 on sampled rows.
    #[test]
    fn long_attention_is_the_plain_softmax_on_both_paths() {
        use burn::prelude::*;
        use burn::tensor::module::attention;
        use burn::tensor::ops::AttentionModuleOptions;
        let device = Device::flex();
        let value = |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 1999) as f32 / 999.5 - 1.0;
        let (d, seq_kv) = (4, 1024);
        for seq_q in [1024, 1025] {
            let q: Vec<f32> = (0..seq_q * d).map(|i| value(i, 1) * 4.0).collect();
            let k: Vec<f32> = (0..seq_kv * d).map(|i| value(i, 2)).collect();
            let v: Vec<f32> = (0..seq_kv * d).map(|i| value(i, 3)).collect();
            let hidden = |i: usize, j: usize| (i + j) % 5 == 0 || j >= seq_kv - 100;
            let mask: Vec<bool> = (0..seq_q * seq_kv).map(|t| hidden(t / seq_kv, t % seq_kv)).collect();
            let bias: Vec<f32> = (0..seq_q * seq_kv).map(|t| value(t, 4)).collect();
            let t4 = |x: &Vec<f32>, s: [usize; 4]| Tensor::<4>::from_data(TensorData::new(x.clone(), s), &device);
            let got = attention(
                t4(&q, [1, 1, seq_q, d]),
                t4(&k, [1, 1, seq_kv, d]),
                t4(&v, [1, 1, seq_kv, d]),
                Some(Tensor::<4, Bool>::from_data(TensorData::new(mask, [1, 1, seq_q, seq_kv]), &device)),
                Some(t4(&bias, [1, 1, seq_q, seq_kv])),
                AttentionModuleOptions::default(),
            )
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
            for i in [0, 1, 511, 777, seq_q - 1] {
                let scores: Vec<f64> = (0..seq_kv)
                    .map(|j| {
                        let dot: f64 = (0..d).map(|t| q[i * d + t] as f64 * k[j * d + t] as f64).sum();
                        if hidden(i, j) { f64::NEG_INFINITY } else { dot / (d as f64).sqrt() + bias[i * seq_kv + j] as f64 }
                    })
                    .collect();
                let peak = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - peak).exp()).collect();
                let total: f64 = weights.iter().sum();
                for t in 0..d {
                    let exact: f64 = (0..seq_kv).map(|j| weights[j] / total * v[j * d + t] as f64).sum();
                    let y = got[i * d + t] as f64;
                    assert!((y - exact).abs() <= 1e-5, "seq_q {seq_q}, row {i}, column {t}: {y} vs {exact}");
                }
            }
        }
    }
}
