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
}
