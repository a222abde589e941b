//! XLNet's configuration (HF `XLNetConfig`), with HF's names and defaults (xlnet-large-cased's
//! shape). Unknown keys are kept and written back.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sesame_layers::config::{ensure, ensure_probability, family_json, read_family_config};
use sesame_layers::hparams::LabelConfig;
use sesame_layers::{Activation, ConfigError, HfConfig, InputLimits, SequenceSummaryConfig, SummaryType};

/// HF `model_type` values XLNet reads.
pub const MODEL_TYPES: &[&str] = &["xlnet"];

/// Which keys a position may attend to (HF `attn_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnType {
    /// Every position (XLNet).
    Bi,
    /// The memory and the positions up to its own (Transformer-XL).
    Uni,
}

/// XLNet hyper-parameters (HF `XLNetConfig`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct XlnetConfig {
    /// Vocabulary size.
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    /// Model width.
    #[serde(default = "d::d_model")]
    pub d_model: usize,
    /// Layers.
    #[serde(default = "d::n_layer")]
    pub n_layer: usize,
    /// Attention heads.
    #[serde(default = "d::n_head")]
    pub n_head: usize,
    /// Feed-forward width.
    #[serde(default = "d::d_inner")]
    pub d_inner: usize,
    /// Width of one head (`d_model / n_head`; HF recomputes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_head: Option<usize>,
    /// Feed-forward activation.
    #[serde(default = "d::ff_activation")]
    pub ff_activation: Activation,
    /// Bidirectional (XLNet) or left-to-right (Transformer-XL) attention.
    #[serde(default = "d::attn_type")]
    pub attn_type: AttnType,
    /// Std of the normal initialisation.
    #[serde(default = "d::initializer_range")]
    pub initializer_range: f64,
    /// LayerNorm epsilon.
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    /// Dropout everywhere (embeddings, attention probabilities, sub-layer outputs).
    #[serde(default = "d::dropout")]
    pub dropout: f64,
    /// How many past positions the returned memory keeps (`None` or 0: all of them).
    #[serde(default = "d::mem_len")]
    pub mem_len: Option<usize>,
    /// How many of this segment's positions go into the memory (`None` or 0: all).
    #[serde(default)]
    pub reuse_len: Option<usize>,
    /// Return the memory at inference.
    #[serde(default = "d::yes")]
    pub use_mems_eval: bool,
    /// Return the memory in training.
    #[serde(default)]
    pub use_mems_train: bool,
    /// Bidirectional data: the first half of a batch reads positions forwards, the second half
    /// backwards (pre-training).
    #[serde(default)]
    pub bi_data: bool,
    /// Clamp relative distances to `[-clamp_len, clamp_len]`; negative: no clamping.
    #[serde(default = "d::clamp_len")]
    pub clamp_len: i64,
    /// Every position attends to the same number of keys (with `attn_type` uni).
    #[serde(default)]
    pub same_length: bool,
    /// Which vector the sequence summary takes (`last`: the final `<cls>`).
    #[serde(default = "d::summary_type")]
    pub summary_type: SummaryType,
    /// Project the summary.
    #[serde(default = "d::yes")]
    pub summary_use_proj: bool,
    /// Activation after the projection (`tanh` in XLNet's checkpoints).
    #[serde(default = "d::summary_activation")]
    pub summary_activation: Option<Activation>,
    /// Project to `num_labels` instead of `d_model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_proj_to_labels: Option<bool>,
    /// Dropout before the summary's projection (absent from HF's defaults, honoured when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_first_dropout: Option<f64>,
    /// Dropout after the summary's activation.
    #[serde(default = "d::summary_last_dropout")]
    pub summary_last_dropout: f64,
    /// Start candidates of the beam QA head.
    #[serde(default = "d::n_top")]
    pub start_n_top: usize,
    /// End candidates per start of the beam QA head.
    #[serde(default = "d::n_top")]
    pub end_n_top: usize,
    /// Padding id.
    #[serde(default = "d::pad_token_id")]
    pub pad_token_id: Option<usize>,
    /// Beginning-of-sequence id.
    #[serde(default = "d::bos_token_id")]
    pub bos_token_id: Option<usize>,
    /// End-of-sequence id.
    #[serde(default = "d::eos_token_id")]
    pub eos_token_id: Option<usize>,
    /// The LM head's weight is the word-embedding table.
    #[serde(default = "d::yes")]
    pub tie_word_embeddings: bool,
    /// Label names, count and problem type of the classification heads.
    #[serde(flatten)]
    pub labels: LabelConfig,
    /// Every other key of the file, written back unchanged.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

mod d {
    use sesame_layers::{Activation, SummaryType};

    use super::AttnType;
    pub fn vocab_size() -> usize { 32000 }
    pub fn d_model() -> usize { 1024 }
    pub fn n_layer() -> usize { 24 }
    pub fn n_head() -> usize { 16 }
    pub fn d_inner() -> usize { 4096 }
    pub fn ff_activation() -> Activation { Activation::Gelu }
    pub fn attn_type() -> AttnType { AttnType::Bi }
    pub fn initializer_range() -> f64 { 0.02 }
    pub fn layer_norm_eps() -> f64 { 1e-12 }
    pub fn dropout() -> f64 { 0.1 }
    pub fn mem_len() -> Option<usize> { Some(512) }
    pub fn clamp_len() -> i64 { -1 }
    pub fn summary_type() -> SummaryType { SummaryType::Last }
    pub fn summary_activation() -> Option<Activation> { Some(Activation::Tanh) }
    pub fn summary_last_dropout() -> f64 { 0.1 }
    pub fn n_top() -> usize { 5 }
    pub fn pad_token_id() -> Option<usize> { Some(5) }
    pub fn bos_token_id() -> Option<usize> { Some(1) }
    pub fn eos_token_id() -> Option<usize> { Some(2) }
    pub fn yes() -> bool { true }
}

impl Default for XlnetConfig {
    /// HF's `XLNetConfig()` (xlnet-large-cased's shape).
    fn default() -> Self {
        serde_json::from_value(serde_json::json!({})).expect("defaults deserialise")
    }
}

impl XlnetConfig {
    /// Width of one attention head.
    pub fn head_width(&self) -> usize {
        self.d_model / self.n_head
    }

    /// Number of labels of the classification heads (HF's default 2).
    pub fn num_labels(&self) -> usize {
        self.labels.count(2)
    }

    /// The sequence summary of the classification and multiple-choice heads (HF
    /// `XLNetSequenceSummary`; `num_labels` outputs: the classifier's width).
    pub fn summary(&self, num_labels: usize) -> SequenceSummaryConfig {
        let to_labels = self.summary_proj_to_labels.unwrap_or(false) && num_labels > 0;
        SequenceSummaryConfig {
            d_model: self.d_model,
            summary_type: self.summary_type,
            use_proj: self.summary_use_proj,
            proj_size: if self.summary_use_proj && to_labels { num_labels } else { self.d_model },
            activation: self.summary_activation,
            first_dropout: self.summary_first_dropout.unwrap_or(0.0),
            last_dropout: self.summary_last_dropout,
        }
    }

    /// Check that a model can be built from this config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (v, f) in [(self.vocab_size, "vocab_size"), (self.d_model, "d_model"), (self.n_layer, "n_layer"), (self.n_head, "n_head"), (self.d_inner, "d_inner")] {
            ensure(v > 0, f, || "must be at least 1".into())?;
        }
        ensure(self.d_model % self.n_head == 0, "n_head", || format!("{} heads do not divide d_model {}", self.n_head, self.d_model))?;
        ensure(self.d_model % 2 == 0, "d_model", || format!("{}: the sinusoidal positions need an even width", self.d_model))?;
        if let Some(d_head) = self.d_head {
            ensure(d_head == self.head_width(), "d_head", || format!("{d_head} is not d_model / n_head = {}", self.head_width()))?;
        }
        ensure_probability(self.dropout, "dropout")?;
        ensure_probability(self.summary_last_dropout, "summary_last_dropout")?;
        ensure_probability(self.summary_first_dropout.unwrap_or(0.0), "summary_first_dropout")?;
        for (id, f) in [(self.pad_token_id, "pad_token_id"), (self.bos_token_id, "bos_token_id"), (self.eos_token_id, "eos_token_id")] {
            if let Some(id) = id {
                ensure(id < self.vocab_size, f, || format!("{id} is outside the vocabulary of {}", self.vocab_size))?;
            }
        }
        self.labels.validate()
    }
}

/// XLNet has no position table; the task pipelines cut texts into windows of its pre-training
/// length, 512 tokens (`finetune`'s `--seq-len` may not exceed it either).
pub const TASK_MAX_LEN: usize = 512;

impl HfConfig for XlnetConfig {
    /// What the task heads read: segment ids 0 and 1, `<cls>`'s 2 and padding's 3 (HF
    /// `pad_token_type_id`), windows of [`TASK_MAX_LEN`] tokens (generation reads longer).
    fn input_limits(&self) -> InputLimits {
        InputLimits { vocab_size: self.vocab_size, type_vocab_size: 4, positions: TASK_MAX_LEN, max_len: TASK_MAX_LEN }
    }

    fn labels(&self) -> &sesame_layers::hparams::LabelConfig {
        &self.labels
    }

    fn labels_mut(&mut self) -> &mut sesame_layers::hparams::LabelConfig {
        &mut self.labels
    }

    fn num_hidden_layers_mut(&mut self) -> Option<&mut usize> {
        Some(&mut self.n_layer)
    }

    fn num_layers(&self) -> usize {
        self.n_layer
    }

    fn from_dir(dir: &Path) -> Result<Self, ConfigError> {
        let config: Self = read_family_config(dir, MODEL_TYPES, serde_json::json!({}))?;
        config.validate()?;
        Ok(config)
    }

    fn to_json(&self, architecture: &str) -> serde_json::Value {
        let mut config = self.clone();
        config.d_head = Some(self.head_width());
        family_json(&config, MODEL_TYPES[0], architecture)
    }

    fn initializer_range(&self) -> f64 {
        self.initializer_range
    }
}
