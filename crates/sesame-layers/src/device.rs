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
/// never fuses a multiply and an add on its own).
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
    /// kernel's 2 × 4 tiles and 8 lanes, split across threads, and in batches.
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
        for m in [1, 2, 3, 5, 16, 17] {
            for (k, n) in [(1, 1), (7, 3), (8, 4), (9, 5), (64, 9), (100, 33)] {
                check(m, k, n, 1);
            }
        }
        // Above flex's threshold for splitting a product across threads (192³ multiply-adds).
        check(16, 768, 700, 1);
        check(3, 64, 37, 6);
    }
}
