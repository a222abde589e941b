//! BART's configuration (HF `BartConfig`), with HF's names and defaults (facebook/bart-large's
//! shape). Unknown keys are kept and written back.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sesame_layers::config::{ensure, ensure_probability, family_json, read_family_config};
use sesame_layers::hparams::LabelConfig;
use sesame_layers::{Activation, ConfigError, HfConfig, InputLimits};

/// HF `model_type` values BART reads.
pub const MODEL_TYPES: &[&str] = &["bart"];

/// BART hyper-parameters (HF `BartConfig`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BartConfig {
    /// Vocabulary size.
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    /// Learned positions of the encoder and of the decoder (each table has 2 more rows).
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    /// Model width.
    #[serde(default = "d::d_model")]
    pub d_model: usize,
    /// Encoder layers.
    #[serde(default = "d::layers")]
    pub encoder_layers: usize,
    /// Encoder feed-forward width.
    #[serde(default = "d::ffn_dim")]
    pub encoder_ffn_dim: usize,
    /// Encoder attention heads.
    #[serde(default = "d::heads")]
    pub encoder_attention_heads: usize,
    /// Decoder layers.
    #[serde(default = "d::layers")]
    pub decoder_layers: usize,
    /// Decoder feed-forward width.
    #[serde(default = "d::ffn_dim")]
    pub decoder_ffn_dim: usize,
    /// Decoder attention heads (self and cross).
    #[serde(default = "d::heads")]
    pub decoder_attention_heads: usize,
    /// Feed-forward activation.
    #[serde(default = "d::activation_function")]
    pub activation_function: Activation,
    /// Dropout on embeddings and sub-layer outputs.
    #[serde(default = "d::dropout")]
    pub dropout: f64,
    /// Dropout on attention probabilities.
    #[serde(default)]
    pub attention_dropout: f64,
    /// Dropout after the feed-forward activation.
    #[serde(default)]
    pub activation_dropout: f64,
    /// Dropout of the classification head.
    #[serde(default)]
    pub classifier_dropout: f64,
    /// Probability of skipping an encoder layer in training (LayerDrop); must be 0 here.
    #[serde(default)]
    pub encoder_layerdrop: f64,
    /// Probability of skipping a decoder layer in training; must be 0 here.
    #[serde(default)]
    pub decoder_layerdrop: f64,
    /// Std of the normal initialisation.
    #[serde(default = "d::init_std")]
    pub init_std: f64,
    /// Multiply token embeddings by `sqrt(d_model)`.
    #[serde(default)]
    pub scale_embedding: bool,
    /// Padding id.
    #[serde(default = "d::pad_token_id")]
    pub pad_token_id: Option<usize>,
    /// Beginning-of-sequence id (`<s>`).
    #[serde(default = "d::bos_token_id")]
    pub bos_token_id: Option<usize>,
    /// End-of-sequence id (`</s>`); sequence classification reads the last one.
    #[serde(default = "d::eos_token_id")]
    pub eos_token_id: Option<usize>,
    /// The first decoder token (`shift_tokens_right`, generation).
    #[serde(default = "d::eos_token_id")]
    pub decoder_start_token_id: Option<usize>,
    /// The token generation forces at `max_length` (HF `forced_eos_token_id`).
    #[serde(default = "d::eos_token_id")]
    pub forced_eos_token_id: Option<usize>,
    /// The token generation forces first (HF `forced_bos_token_id`; bart-large-cnn sets 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced_bos_token_id: Option<usize>,
    /// The LM head is the shared embedding table.
    #[serde(default = "d::yes")]
    pub tie_word_embeddings: bool,
    /// Label names, count and problem type of the classification head.
    #[serde(flatten)]
    pub labels: LabelConfig,
    /// Every other key of the file, written back unchanged.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

mod d {
    use sesame_layers::Activation;
    pub fn vocab_size() -> usize { 50265 }
    pub fn max_position_embeddings() -> usize { 1024 }
    pub fn d_model() -> usize { 1024 }
    pub fn layers() -> usize { 12 }
    pub fn ffn_dim() -> usize { 4096 }
    pub fn heads() -> usize { 16 }
    pub fn activation_function() -> Activation { Activation::Gelu }
    pub fn dropout() -> f64 { 0.1 }
    pub fn init_std() -> f64 { 0.02 }
    pub fn pad_token_id() -> Option<usize> { Some(1) }
    pub fn bos_token_id() -> Option<usize> { Some(0) }
    pub fn eos_token_id() -> Option<usize> { Some(2) }
    pub fn yes() -> bool { true }
}

/// The positions before the first real one in BART's learned position tables.
pub const POSITION_OFFSET: usize = 2;

/// LayerNorm epsilon of every BART LayerNorm (`nn.LayerNorm`'s default).
pub const LAYER_NORM_EPS: f64 = 1e-5;

impl Default for BartConfig {
    /// HF's `BartConfig()` (facebook/bart-large's shape).
    fn default() -> Self {
        serde_json::from_value(serde_json::json!({})).expect("defaults deserialise")
    }
}

impl BartConfig {
    /// Number of labels of the classification head (HF: `len(id2label)`, default 3 for BART).
    pub fn num_labels(&self) -> usize {
        self.labels.count(3)
    }

    /// The padding id (HF requires one for `shift_tokens_right`).
    pub fn pad_id(&self) -> usize {
        self.pad_token_id.unwrap_or(1)
    }

    /// The first decoder token: `decoder_start_token_id`, else `eos_token_id`.
    pub fn decoder_start_id(&self) -> usize {
        self.decoder_start_token_id.or(self.eos_token_id).unwrap_or(2)
    }

    /// `sqrt(d_model)` with `scale_embedding`, else 1.
    pub fn embed_scale(&self) -> f64 {
        if self.scale_embedding {
            (self.d_model as f64).sqrt()
        } else {
            1.0
        }
    }

    /// A fresh configuration of size `name` for pre-training: `tiny` (2 + 2 layers, width 128),
    /// `mini` (4 + 4, 256), `small` (4 + 4, 512), `base` (6 + 6, 768, facebook/bart-base's
    /// shape), with 64-wide heads and feed-forward 4 × width, for a vocabulary of `vocab_size`
    /// whose `<s>`, `<pad>` and `</s>` are `bos`, `pad` and `eos`, and `max_len` positions.
    /// Dropout and the rest are HF's defaults.
    pub fn preset(name: &str, vocab_size: usize, max_len: usize, [bos, pad, eos]: [usize; 3]) -> Result<Self, ConfigError> {
        let (layers, d_model) = match name {
            "tiny" => (2, 128),
            "mini" => (4, 256),
            "small" => (4, 512),
            "base" => (6, 768),
            other => return Err(ConfigError::Invalid { field: "preset".into(), reason: format!("unknown preset `{other}` (expected tiny, mini, small or base)") }),
        };
        let config = Self {
            vocab_size,
            max_position_embeddings: max_len,
            d_model,
            encoder_layers: layers,
            decoder_layers: layers,
            encoder_ffn_dim: 4 * d_model,
            decoder_ffn_dim: 4 * d_model,
            encoder_attention_heads: d_model / 64,
            decoder_attention_heads: d_model / 64,
            bos_token_id: Some(bos),
            pad_token_id: Some(pad),
            eos_token_id: Some(eos),
            decoder_start_token_id: Some(eos),
            forced_eos_token_id: Some(eos),
            ..Self::default()
        };
        config.validate()?;
        Ok(config)
    }

    /// Check that a model can be built from this config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |v: usize, f: &str| ensure(v > 0, f, || "must be at least 1".into());
        for (v, f) in [
            (self.vocab_size, "vocab_size"),
            (self.d_model, "d_model"),
            (self.encoder_ffn_dim, "encoder_ffn_dim"),
            (self.decoder_ffn_dim, "decoder_ffn_dim"),
            (self.encoder_attention_heads, "encoder_attention_heads"),
            (self.decoder_attention_heads, "decoder_attention_heads"),
            (self.max_position_embeddings, "max_position_embeddings"),
        ] {
            positive(v, f)?;
        }
        for (heads, f) in [(self.encoder_attention_heads, "encoder_attention_heads"), (self.decoder_attention_heads, "decoder_attention_heads")] {
            ensure(self.d_model % heads == 0, f, || format!("{heads} heads do not divide d_model {}", self.d_model))?;
        }
        for (p, f) in [
            (self.dropout, "dropout"),
            (self.attention_dropout, "attention_dropout"),
            (self.activation_dropout, "activation_dropout"),
            (self.classifier_dropout, "classifier_dropout"),
        ] {
            ensure_probability(p, f)?;
        }
        for (p, f) in [(self.encoder_layerdrop, "encoder_layerdrop"), (self.decoder_layerdrop, "decoder_layerdrop")] {
            ensure(p == 0.0, f, || format!("{p}: LayerDrop is not supported (set it to 0)"))?;
        }
        // Switches of old (fairseq-converted) configs that change the architecture: BART's
        // released models leave them at these values; mBART-style pre-LN is another model.
        for (field, bart) in [
            ("normalize_before", false),
            ("add_final_layer_norm", false),
            ("static_position_embeddings", false),
            ("add_bias_logits", false),
            ("normalize_embedding", true),
        ] {
            if let Some(value) = self.extra.get(field).and_then(serde_json::Value::as_bool) {
                ensure(value == bart, field, || format!("{value} is not supported (BART's models use {bart})"))?;
            }
        }
        if let Some(extra) = self.extra.get("extra_pos_embeddings").and_then(serde_json::Value::as_u64) {
            ensure(extra == POSITION_OFFSET as u64, "extra_pos_embeddings", || format!("{extra} is not supported (BART's offset is {POSITION_OFFSET})"))?;
        }
        for (id, f) in [
            (self.pad_token_id, "pad_token_id"),
            (self.bos_token_id, "bos_token_id"),
            (self.eos_token_id, "eos_token_id"),
            (self.decoder_start_token_id, "decoder_start_token_id"),
            (self.forced_eos_token_id, "forced_eos_token_id"),
            (self.forced_bos_token_id, "forced_bos_token_id"),
        ] {
            if let Some(id) = id {
                ensure(id < self.vocab_size, f, || format!("{id} is outside the vocabulary of {}", self.vocab_size))?;
            }
        }
        self.labels.validate()
    }
}

impl HfConfig for BartConfig {
    /// Of the encoder; the decoder's must be the same for a student's layers to be picked.
    fn num_layers(&self) -> usize {
        self.encoder_layers
    }

    /// Ids of its vocabulary, up to its learned positions; no segment ids.
    fn input_limits(&self) -> InputLimits {
        InputLimits::learned_positions(self.vocab_size, 0, self.max_position_embeddings, 0)
    }

    fn labels(&self) -> &sesame_layers::hparams::LabelConfig {
        &self.labels
    }

    fn labels_mut(&mut self) -> &mut sesame_layers::hparams::LabelConfig {
        &mut self.labels
    }

    fn from_dir(dir: &Path) -> Result<Self, ConfigError> {
        let config: Self = read_family_config(dir, MODEL_TYPES, serde_json::json!({}))?;
        config.validate()?;
        Ok(config)
    }

    fn to_json(&self, architecture: &str) -> serde_json::Value {
        let mut value = family_json(self, MODEL_TYPES[0], architecture);
        let map = value.as_object_mut().expect("an object");
        map.entry("is_encoder_decoder").or_insert(true.into());
        value
    }

    fn initializer_range(&self) -> f64 {
        self.init_std
    }
}
