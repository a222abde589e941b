//! What kind of device a tensor lives on. Burn 0.22's `Device` names its backend only in its
//! debug form, so that is what these read.

use burn::prelude::*;

/// Whether `device` is a libtorch device.
pub fn is_libtorch(device: &Device) -> bool {
    format!("{device:?}").contains("LibTorch")
}

/// Whether `device` computes on the host CPU (flex, ndarray, libtorch or CubeCL on the CPU):
/// there, independent work (micro-batches, inference batches) runs on threads, one per core.
pub fn is_cpu(device: &Device) -> bool {
    let name = format!("{device:?}");
    ["Flex", "NdArray", "Cpu"].iter().any(|n| name.contains(n))
}
