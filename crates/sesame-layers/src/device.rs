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
