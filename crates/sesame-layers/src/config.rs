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
    /// `architectures` names a head of another task than the one asked for.
    #[error("{path}: {reason}")]
    WrongHead {
        /// The config file.
        path: PathBuf,
        /// The class it names, what that is, and what the task needs.
        reason: String,
    },
}

/// HF class-name endings of task heads, and what each is.
const HEAD_CLASSES: [(&str, &str); 11] = [
    ("ForSequenceClassification", "a sequence classifier"),
    ("ForTokenClassification", "a token classifier"),
    ("ForQuestionAnsweringSimple", "an extractive-QA model"),
    ("ForQuestionAnswering", "an extractive-QA model"),
    ("ForMultipleChoice", "a multiple-choice model"),
    ("ForNextSentencePrediction", "a next-sentence classifier"),
    ("ForMaskedLM", "a masked LM"),
    ("ForPreTraining", "a pre-training model"),
    ("ForCausalLM", "a language model"),
    ("LMHeadModel", "a language model"),
    ("ForConditionalGeneration", "a sequence-to-sequence model"),
];

/// Refuse a checkpoint whose `config.json` in `dir` names another task's head than `wanted`'s
/// (the HF class a task runs, its `head` named as the task calls it): heads of different tasks
/// can share tensor names (BERT's sequence and token classifiers are both `classifier`), so
/// the weights alone would load.
pub fn check_architecture(dir: &Path, wanted: &str, head: &str) -> Result<(), ConfigError> {
    let path = dir.join("config.json");
    let json: serde_json::Value = read_json_config(&path)?;
    if !json.is_object() {
        return Err(ConfigError::Parse { path, reason: "not a JSON object".into() });
    }
    let Some(found) = json["architectures"][0].as_str() else { return Ok(()) };
    let kind = |class: &str| HEAD_CLASSES.iter().find(|(ending, _)| class.ends_with(ending)).map(|(_, kind)| *kind);
    match (kind(found), kind(wanted)) {
        (Some(found_kind), Some(wanted_kind)) if found_kind != wanted_kind => Err(ConfigError::WrongHead {
            path,
            reason: format!("architectures says {found}, {found_kind}; this command needs {wanted_kind} ({head} head, as {wanted})"),
        }),
        _ => Ok(()),
    }
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

/// Fail with [`ConfigError::Invalid`] unless `p` (field `field`, a dropout rate) lies in [0, 1).
pub fn ensure_probability(p: f64, field: &str) -> Result<(), ConfigError> {
    ensure((0.0..1.0).contains(&p), field, || format!("{p} is not a probability in [0, 1)"))
}

/// Fill the keys `value` lacks from `defaults` (both JSON objects).
pub fn with_defaults(mut value: serde_json::Value, defaults: serde_json::Value) -> serde_json::Value {
    if let (Some(map), serde_json::Value::Object(defaults)) = (value.as_object_mut(), defaults) {
        for (key, default) in defaults {
            map.entry(key).or_insert(default);
        }
    }
    value
}

/// Check `model_type`, when the file names one, against what a family reads.
pub fn check_model_type(value: &serde_json::Value, accepted: &[&str]) -> Result<(), ConfigError> {
    match value.get("model_type").and_then(|t| t.as_str()) {
        Some(kind) => ensure(accepted.contains(&kind), "model_type", || {
            format!("this is a `{kind}` checkpoint; this model reads {}", accepted.join(", "))
        }),
        None => Ok(()),
    }
}

/// Read `dir/config.json` of a family that reads `model_types`, filling `defaults`.
pub fn read_family_config<T: DeserializeOwned>(
    dir: &Path,
    model_types: &[&str],
    defaults: serde_json::Value,
) -> Result<T, ConfigError> {
    let path = dir.join("config.json");
    let value: serde_json::Value = read_json_config(&path)?;
    if !value.is_object() {
        return Err(ConfigError::Parse { path, reason: "not a JSON object".into() });
    }
    check_model_type(&value, model_types)?;
    let full = with_defaults(value.clone(), defaults.clone());
    serde_json::from_value::<T>(full).map_err(|e| {
        // serde's message names the type, not the field: find the field that fails alone.
        let field = value.as_object().into_iter().flatten().find(|(key, v)| {
            let alone = serde_json::json!({ key.as_str(): v });
            serde_json::from_value::<T>(with_defaults(alone, defaults.clone())).is_err()
        });
        match field {
            Some((key, v)) => ConfigError::Invalid { field: key.clone(), reason: format!("{v} is not valid here: {e}") },
            None => ConfigError::Parse { path, reason: e.to_string() },
        }
    })
}

/// A config as HF `config.json`: its fields, `model_type` (unless it has one) and `architectures`.
pub fn family_json(config: &impl serde::Serialize, model_type: &str, architecture: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(config).expect("config serialises");
    let map = value.as_object_mut().expect("an object");
    map.entry("model_type").or_insert(model_type.into());
    map.insert("architectures".into(), serde_json::json!([architecture]));
    value
}
