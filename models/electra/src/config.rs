//! ELECTRA's configuration (HF `ElectraConfig`): the shared encoder fields, the embedding
//! width, and the sequence-summary fields of its multiple-choice head.

use std::ops::{Deref, DerefMut};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sesame_layers::config::{ensure, ensure_probability, family_json, read_family_config};
use sesame_layers::{Activation, ConfigError, EncoderHyperParams, HfConfig, InputLimits, SequenceSummaryConfig, SummaryType};

/// The ELECTRA family marker (the registry and the pre-training recipe are keyed on it).
#[derive(Clone, Copy, Debug, Default)]
pub struct Electra;

/// HF `model_type` values ELECTRA reads.
pub const MODEL_TYPES: &[&str] = &["electra"];

/// HF's `ElectraConfig()` values of the shared fields (ELECTRA-small's discriminator).
fn defaults() -> serde_json::Value {
    serde_json::json!({ "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024, "pad_token_id": 0 })
}

/// ELECTRA hyper-parameters (HF `ElectraConfig`). Dereferences to the shared fields.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ElectraConfig {
    /// Width of the token embeddings; projected to `hidden_size` by `embeddings_project` when
    /// they differ.
    #[serde(default = "d::embedding_size")]
    pub embedding_size: usize,
    /// Which vector the multiple-choice head summarises (HF `summary_type`).
    #[serde(default = "d::summary_type")]
    pub summary_type: SummaryType,
    /// Project the summary (HF `summary_use_proj`).
    #[serde(default = "d::yes")]
    pub summary_use_proj: bool,
    /// Activation after the projection (HF `summary_activation`).
    #[serde(default = "d::summary_activation")]
    pub summary_activation: Option<Activation>,
    /// Dropout after the summary (HF `summary_last_dropout`).
    #[serde(default = "d::summary_last_dropout")]
    pub summary_last_dropout: f64,
    /// Project the summary to `num_labels` instead of `hidden_size` (absent from HF's
    /// `ElectraConfig`, honoured when a file sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_proj_to_labels: Option<bool>,
    /// Dropout before the summary projection (absent from HF's `ElectraConfig`, honoured when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_first_dropout: Option<f64>,
    /// Sesame's pre-training: the generator's width as a fraction of this discriminator's
    /// (the paper's 1/4 when absent; see [`ElectraConfig::generator`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_size: Option<f64>,
    /// Sesame's pre-training: the temperature of the generator's samples, its logits divided
    /// by it before sampling (google-research/electra's `temperature`; 1 when absent, the
    /// paper's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_temperature: Option<f64>,
    /// The fields ELECTRA shares with other encoders.
    #[serde(flatten)]
    pub hparams: EncoderHyperParams,
}

mod d {
    use sesame_layers::{Activation, SummaryType};
    pub fn embedding_size() -> usize { 128 }
    pub fn summary_type() -> SummaryType { SummaryType::First }
    pub fn yes() -> bool { true }
    pub fn summary_activation() -> Option<Activation> { Some(Activation::Gelu) }
    pub fn summary_last_dropout() -> f64 { 0.1 }
}

impl Deref for ElectraConfig {
    type Target = EncoderHyperParams;
    fn deref(&self) -> &EncoderHyperParams {
        &self.hparams
    }
}

impl DerefMut for ElectraConfig {
    fn deref_mut(&mut self) -> &mut EncoderHyperParams {
        &mut self.hparams
    }
}

impl Default for ElectraConfig {
    /// HF's `ElectraConfig()`.
    fn default() -> Self {
        serde_json::from_value(defaults()).expect("family defaults deserialise")
    }
}

impl ElectraConfig {
    /// A discriminator of size `preset` (see [`EncoderHyperParams::set_preset`]) with
    /// embeddings at most 128 wide, as ELECTRA-small's (`base`: as wide as the encoder, as
    /// ELECTRA-base's).
    pub fn preset(name: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        config.hparams.set_preset(name, vocab_size, max_len, pad_token_id)?;
        config.embedding_size = if name == "base" { config.hidden_size } else { config.hidden_size.min(128) };
        config.validate()?;
        Ok(config)
    }

    /// The generator's configuration for this discriminator (google-research/electra's
    /// `get_generator_config`): `generator_size` (1/4 by default) of the width, heads of 64
    /// (at least one, dividing the width), FFN 4× as wide, the same depth and embeddings,
    /// which the two share. ([`Self::validate`] refuses a `generator_size` outside (0, 1].)
    pub fn generator(&self) -> Self {
        let width = self.generator_size.unwrap_or(0.25).clamp(0.0, 1.0);
        let mut generator = self.clone();
        let hidden = ((self.hidden_size as f64 * width).round() as usize).max(1);
        let mut heads = (hidden / 64).max(1);
        while hidden % heads != 0 {
            heads -= 1;
        }
        generator.generator_size = None;
        generator.generator_temperature = None;
        generator.hparams.pruned_heads.clear();
        generator.hparams.hidden_size = hidden;
        generator.hparams.num_attention_heads = heads;
        generator.hparams.intermediate_size = 4 * hidden;
        generator
    }

    /// The temperature of the generator's samples in pre-training (`generator_temperature`,
    /// 1 when absent).
    pub fn sampling_temperature(&self) -> f64 {
        self.generator_temperature.unwrap_or(1.0)
    }

    /// Check that a model can be built from this config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.hparams.validate(0)?;
        ensure(self.embedding_size > 0, "embedding_size", || "must be at least 1".into())?;
        ensure_probability(self.summary_last_dropout, "summary_last_dropout")?;
        if let Some(width) = self.generator_size {
            ensure(width > 0.0 && width <= 1.0, "generator_size", || format!("{width} is not in (0, 1]"))?;
        }
        if let Some(t) = self.generator_temperature {
            ensure(t > 0.0 && t.is_finite(), "generator_temperature", || format!("{t} is not a temperature (a number > 0)"))?;
        }
        ensure_probability(self.summary_first_dropout.unwrap_or(0.0), "summary_first_dropout")
    }

    /// The multiple-choice head's sequence summary (HF `ElectraSequenceSummary`).
    pub fn summary(&self) -> SequenceSummaryConfig {
        let to_labels = self.summary_proj_to_labels.unwrap_or(false) && self.num_labels() > 0;
        SequenceSummaryConfig {
            d_model: self.hidden_size,
            summary_type: self.summary_type,
            use_proj: self.summary_use_proj,
            proj_size: if !self.summary_use_proj { self.hidden_size } else if to_labels { self.num_labels() } else { self.hidden_size },
            activation: self.summary_activation,
            first_dropout: self.summary_first_dropout.unwrap_or(0.0),
            last_dropout: self.summary_last_dropout,
        }
    }
}

impl HfConfig for ElectraConfig {
    fn input_limits(&self) -> InputLimits {
        InputLimits::learned_positions(self.vocab_size, self.type_vocab_size, self.max_position_embeddings, 0)
    }

    fn labels(&self) -> &sesame_layers::hparams::LabelConfig {
        &self.hparams.labels
    }

    fn labels_mut(&mut self) -> &mut sesame_layers::hparams::LabelConfig {
        &mut self.hparams.labels
    }

    fn num_hidden_layers_mut(&mut self) -> Option<&mut usize> {
        Some(&mut self.hparams.num_hidden_layers)
    }

    fn num_layers(&self) -> usize {
        self.hparams.num_hidden_layers
    }

    fn pruned_heads(&self) -> std::collections::BTreeMap<usize, std::collections::BTreeSet<usize>> {
        self.hparams.pruned()
    }

    fn from_dir(dir: &Path) -> Result<Self, ConfigError> {
        let config: Self = read_family_config(dir, MODEL_TYPES, defaults())?;
        config.validate()?;
        Ok(config)
    }

    fn to_json(&self, architecture: &str) -> serde_json::Value {
        family_json(self, MODEL_TYPES[0], architecture)
    }

    fn initializer_range(&self) -> f64 {
        self.initializer_range
    }
}
