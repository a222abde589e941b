//! Backend choice: the backends compiled in by cargo features, picked at run time by name.

use burn::tensor::Device;

/// A Burn backend Sesame can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Backend {
    /// Pure-Rust CPU backend (feature `flex`, the default).
    Flex,
    /// ndarray CPU backend (feature `ndarray`; deprecated in Burn 0.22).
    Ndarray,
    /// wgpu: Vulkan, Metal, DX12 or a CPU Vulkan driver such as lavapipe (feature `wgpu`).
    Wgpu,
    /// libtorch 2.9.0 on CPU (feature `tch`; deprecated in Burn 0.22).
    Tch,
    /// CUDA through CubeCL (feature `cuda`).
    Cuda,
}

/// A backend was asked for that this build does not include.
#[derive(Debug, thiserror::Error)]
#[error("backend `{name}` is not compiled in: rebuild with `--features {feature}` (compiled in: {available})")]
pub struct BackendNotCompiled {
    /// The requested backend.
    pub name: &'static str,
    /// The cargo feature that enables it.
    pub feature: &'static str,
    /// The backends this build has.
    pub available: String,
}

impl Backend {
    /// Every backend, in preference order.
    pub const ALL: [Backend; 5] = [Backend::Flex, Backend::Ndarray, Backend::Wgpu, Backend::Tch, Backend::Cuda];

    /// Its name on the command line, which is also its cargo feature.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Flex => "flex",
            Backend::Ndarray => "ndarray",
            Backend::Wgpu => "wgpu",
            Backend::Tch => "tch",
            Backend::Cuda => "cuda",
        }
    }

    /// Whether this build includes the backend.
    pub fn is_compiled(self) -> bool {
        match self {
            Backend::Flex => cfg!(feature = "flex"),
            Backend::Ndarray => cfg!(feature = "ndarray"),
            Backend::Wgpu => cfg!(feature = "wgpu"),
            Backend::Tch => cfg!(feature = "tch"),
            Backend::Cuda => cfg!(feature = "cuda"),
        }
    }

    /// The backends this build includes.
    pub fn compiled() -> Vec<Backend> {
        Self::ALL.into_iter().filter(|b| b.is_compiled()).collect()
    }

    /// The first compiled backend in preference order (flex when built with defaults).
    pub fn default_compiled() -> Option<Backend> {
        Self::compiled().into_iter().next()
    }

    /// The device of this backend (inference; call `.autodiff()` on it to train).
    #[allow(deprecated, unreachable_code, unused_variables)]
    pub fn device(self) -> Result<Device, BackendNotCompiled> {
        let missing = || BackendNotCompiled {
            name: self.name(),
            feature: self.name(),
            available: Self::compiled().iter().map(|b| b.name()).collect::<Vec<_>>().join(", "),
        };
        Ok(match self {
            #[cfg(feature = "flex")]
            Backend::Flex => Device::flex(),
            #[cfg(feature = "ndarray")]
            Backend::Ndarray => Device::ndarray(),
            #[cfg(feature = "wgpu")]
            Backend::Wgpu => Device::wgpu(burn::tensor::DeviceKind::DefaultDevice),
            #[cfg(feature = "tch")]
            Backend::Tch => Device::libtorch(),
            #[cfg(feature = "cuda")]
            Backend::Cuda => Device::cuda(0),
            _ => return Err(missing()),
        })
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_not_compiled_in_names_its_feature() {
        for backend in Backend::ALL {
            match backend.device() {
                Ok(_) => assert!(backend.is_compiled()),
                Err(e) => {
                    assert!(!backend.is_compiled());
                    assert!(e.to_string().contains(&format!("--features {}", backend.name())), "{e}");
                }
            }
        }
    }
}
