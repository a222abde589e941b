//! Reading and checking HuggingFace `config.json` files.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// A model configuration that could not be read or does not make sense.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Io {
        /// The config file.
        path: PathBuf,
        /// The underlying IO error.
        source: std::io::Error,
    },
    /// The file is not valid JSON for this model type.
    #[error("invalid config {path}: {reason}")]
    Parse {
        /// The config file.
        path: PathBuf,
        /// What serde reported.
        reason: String,
    },
    /// A field has a value the model cannot be built with.
    #[error("invalid config field `{field}`: {reason}")]
    Invalid {
        /// The offending field.
        field: String,
        /// Why it is rejected.
        reason: String,
    },
}

/// Read a JSON config file into `T` (unknown keys are ignored, as HF does).
pub fn read_json_config<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Fail with [`ConfigError::Invalid`] unless `ok`.
pub fn ensure(ok: bool, field: &str, reason: impl FnOnce() -> String) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            field: field.to_string(),
            reason: reason(),
        })
    }
}
