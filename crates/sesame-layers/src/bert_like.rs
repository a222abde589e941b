//! The BERT-shaped families (BERT, RoBERTa, ELECTRA's discriminator): one configuration and
//! one base model, `BertLikeConfig<F>` and `BertLikeModel<F>`, told apart by a zero-sized
//! family marker `F` that carries only what differs: config defaults, `model_type`, HF names of
//! the heads, and how position ids are made.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::path::Path;

use burn::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::backbone::{Backbone, BackboneOutput, EncoderInput, HeadSizes, InputLimits};
use crate::checkpoint::{CheckpointSpec, KeyMap};
use crate::config::{ensure, read_json_config, ConfigError};
use crate::embeddings::{Embeddings, EmbeddingsConfig};
use crate::encoder::{Encoder, EncoderConfig, OutputOptions};
use crate::heads::{MaskedLmHeadConfig, Pooler, PoolerConfig};
use crate::pretrained::{HfConfig, PretrainedModel};

/// What sets one BERT-shaped family apart.
pub trait BertLikeFamily: Clone + Copy + Debug + Default + Send + Sync + 'static {
    /// HF `model_type` values this family reads; the first is written to new configs.
    const MODEL_TYPES: &'static [&'static str];
    /// HF class-name stem (`Roberta`).
    const CLASS: &'static str;
    /// HF base-model prefix inside head models (`roberta`).
    const PREFIX: &'static str;
    /// RoBERTa's position ids: counted from `pad_token_id + 1` over non-padding tokens.
    const POSITIONS_AFTER_PADDING: bool = false;

    /// `config.json` values that differ from BERT's defaults, as a JSON object.
    fn defaults() -> serde_json::Value {
        serde_json::json!({})
    }

    /// HF names of the heads, as anchored [`KeyMap`] rows onto `lm_head`, `sentence_head`, `head`.
    fn head_rows() -> Vec<(&'static str, &'static str)>;

    /// The regex of the tied MLM decoder's HF names (skipped when loading a tied model).
    const TIED_DECODER: &'static str;

    /// The activation inside the MLM head (RoBERTa's is always GELU).
    fn lm_head_activation(config: &BertLikeConfig<Self>) -> Activation {
        config.hidden_act
    }
}

/// HF names of the encoder tensors shared by every BERT-shaped family.
pub fn encoder_rows() -> Vec<(&'static str, &'static str)> {
    vec![
        ("encoder.layer.{n}.attention.self", "encoder.layers.{n}.attention"),
        ("encoder.layer.{n}.attention.output.dense", "encoder.layers.{n}.attention.output"),
        ("encoder.layer.{n}.attention.output.LayerNorm", "encoder.layers.{n}.attention_norm"),
        ("encoder.layer.{n}.intermediate.dense", "encoder.layers.{n}.feed_forward.intermediate"),
        ("encoder.layer.{n}.output.dense", "encoder.layers.{n}.feed_forward.output"),
        ("encoder.layer.{n}.output.LayerNorm", "encoder.layers.{n}.output_norm"),
        ("embeddings.LayerNorm", "embeddings.layer_norm"),
    ]
}

/// Hyper-parameters of a BERT-shaped model with HF's names; defaults are BERT's, overridden by
/// the family's [`BertLikeFamily::defaults`]. Unknown keys are kept and written back.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct BertLikeConfig<F: BertLikeFamily> {
    /// Vocabulary size.
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    /// Model width.
    #[serde(default = "d::hidden_size")]
    pub hidden_size: usize,
    /// Number of encoder layers.
    #[serde(default = "d::num_hidden_layers")]
    pub num_hidden_layers: usize,
    /// Number of attention heads.
    #[serde(default = "d::num_attention_heads")]
    pub num_attention_heads: usize,
    /// Feed-forward width.
    #[serde(default = "d::intermediate_size")]
    pub intermediate_size: usize,
    /// Feed-forward activation.
    #[serde(default = "d::hidden_act")]
    pub hidden_act: Activation,
    /// Dropout on embeddings and sub-layer outputs.
    #[serde(default = "d::dropout")]
    pub hidden_dropout_prob: f64,
    /// Dropout on attention probabilities.
    #[serde(default = "d::dropout")]
    pub attention_probs_dropout_prob: f64,
    /// Number of learned positions.
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    /// Number of token types.
    #[serde(default = "d::type_vocab_size")]
    pub type_vocab_size: usize,
    /// Std of the normal initialisation.
    #[serde(default = "d::initializer_range")]
    pub initializer_range: f64,
    /// LayerNorm epsilon.
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    /// Padding token id.
    #[serde(default)]
    pub pad_token_id: Option<usize>,
    /// Only `absolute` is supported.
    #[serde(default = "d::position_embedding_type", skip_serializing_if = "Option::is_none")]
    pub position_embedding_type: Option<String>,
    /// Dropout of classification heads (defaults to `hidden_dropout_prob`).
    #[serde(default)]
    pub classifier_dropout: Option<f64>,
    /// Tie the MLM decoder to the word embeddings.
    #[serde(default = "d::yes")]
    pub tie_word_embeddings: bool,
    /// Label names of classification heads; their count is the number of labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id2label: Option<BTreeMap<String, String>>,
    /// Explicit label count (HF accepts it instead of `id2label`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_labels: Option<usize>,
    /// `regression`, `single_label_classification` or `multi_label_classification`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem_type: Option<String>,
    /// Every other key of the file, written back unchanged.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
    #[serde(skip)]
    family: PhantomData<F>,
}

mod d {
    use crate::Activation;
    pub fn vocab_size() -> usize { 30522 }
    pub fn hidden_size() -> usize { 768 }
    pub fn num_hidden_layers() -> usize { 12 }
    pub fn num_attention_heads() -> usize { 12 }
    pub fn intermediate_size() -> usize { 3072 }
    pub fn hidden_act() -> Activation { Activation::Gelu }
    pub fn dropout() -> f64 { 0.1 }
    pub fn max_position_embeddings() -> usize { 512 }
    pub fn type_vocab_size() -> usize { 2 }
    pub fn initializer_range() -> f64 { 0.02 }
    pub fn layer_norm_eps() -> f64 { 1e-12 }
    pub fn position_embedding_type() -> Option<String> { Some("absolute".into()) }
    pub fn yes() -> bool { true }
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

impl<F: BertLikeFamily> Default for BertLikeConfig<F> {
    /// The family's base model (bert-base-uncased, roberta-base).
    fn default() -> Self {
        serde_json::from_value(F::defaults()).expect("family defaults deserialise")
    }
}

impl<F: BertLikeFamily> BertLikeConfig<F> {
    /// Parse a `config.json` value, filling the family's defaults.
    pub fn from_value(value: serde_json::Value) -> Result<Self, String> {
        serde_json::from_value(with_defaults(value, F::defaults())).map_err(|e| e.to_string())
    }

    /// A size preset: `tiny` (2 layers, 128 wide), `mini` (4, 256), `small` (4, 512),
    /// `base` (12, 768), as Google's BERT miniatures; feed-forward 4x wide, heads of 64.
    /// `max_len` is the longest input; `pad_token_id` the tokenizer's padding id.
    pub fn preset(name: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<Self, ConfigError> {
        let (layers, hidden) = match name {
            "tiny" => (2, 128),
            "mini" => (4, 256),
            "small" => (4, 512),
            "base" => (12, 768),
            other => {
                return Err(ConfigError::Invalid {
                    field: "preset".into(),
                    reason: format!("unknown preset `{other}` (expected tiny, mini, small or base)"),
                })
            }
        };
        let mut config = Self::default();
        config.vocab_size = vocab_size;
        config.num_hidden_layers = layers;
        config.hidden_size = hidden;
        config.num_attention_heads = hidden / 64;
        config.intermediate_size = 4 * hidden;
        config.pad_token_id = Some(pad_token_id);
        config.max_position_embeddings = max_len + config.position_offset();
        config.validate()?;
        Ok(config)
    }

    /// How many position rows precede the first real position (RoBERTa: `pad_token_id + 1`).
    pub fn position_offset(&self) -> usize {
        if F::POSITIONS_AFTER_PADDING {
            self.pad_token_id.unwrap_or(0) + 1
        } else {
            0
        }
    }

    /// Number of labels of classification heads (HF: `len(id2label)`, default 2).
    pub fn num_labels(&self) -> usize {
        self.num_labels.or(self.id2label.as_ref().map(|m| m.len())).unwrap_or(2)
    }

    /// Set the number of labels (names `LABEL_i`).
    pub fn with_num_labels(mut self, n: usize) -> Self {
        self.id2label = Some((0..n).map(|i| (i.to_string(), format!("LABEL_{i}"))).collect());
        self.num_labels = None;
        self
    }

    /// Dropout of classification heads.
    pub fn classifier_dropout(&self) -> f64 {
        self.classifier_dropout.unwrap_or(self.hidden_dropout_prob)
    }

    /// Check that a model can be built from this config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |v: usize, f: &str| ensure(v > 0, f, || "must be at least 1".into());
        positive(self.vocab_size, "vocab_size")?;
        positive(self.hidden_size, "hidden_size")?;
        positive(self.num_hidden_layers, "num_hidden_layers")?;
        positive(self.num_attention_heads, "num_attention_heads")?;
        positive(self.intermediate_size, "intermediate_size")?;
        ensure(self.max_position_embeddings > self.position_offset(), "max_position_embeddings", || {
            format!("{} positions leave none after the offset of {}", self.max_position_embeddings, self.position_offset())
        })?;
        ensure(self.hidden_size % self.num_attention_heads == 0, "num_attention_heads", || {
            format!("{} heads do not divide hidden_size {}", self.num_attention_heads, self.hidden_size)
        })?;
        for (p, f) in [
            (self.hidden_dropout_prob, "hidden_dropout_prob"),
            (self.attention_probs_dropout_prob, "attention_probs_dropout_prob"),
            (self.classifier_dropout(), "classifier_dropout"),
        ] {
            ensure((0.0..1.0).contains(&p), f, || format!("{p} is not a probability in [0, 1)"))?;
        }
        ensure(self.layer_norm_eps > 0.0, "layer_norm_eps", || "must be positive".into())?;
        if let Some(kind) = &self.position_embedding_type {
            ensure(kind == "absolute", "position_embedding_type", || {
                format!("`{kind}` is not supported (only `absolute`)")
            })?;
        }
        if let Some(kind) = &self.problem_type {
            ensure(
                matches!(kind.as_str(), "regression" | "single_label_classification" | "multi_label_classification"),
                "problem_type",
                || format!("unknown problem type `{kind}`"),
            )?;
        }
        Ok(())
    }

    /// The shared embeddings configuration.
    pub fn embeddings(&self) -> EmbeddingsConfig {
        EmbeddingsConfig::new(self.vocab_size, self.hidden_size, self.max_position_embeddings)
            .with_type_vocab_size(self.type_vocab_size)
            .with_layer_norm_eps(self.layer_norm_eps)
            .with_dropout(self.hidden_dropout_prob)
    }

    /// The shared encoder configuration.
    pub fn encoder(&self) -> EncoderConfig {
        EncoderConfig::new(
            self.hidden_size,
            self.intermediate_size,
            self.num_attention_heads,
            self.num_hidden_layers,
            self.hidden_act,
        )
        .with_dropout(self.hidden_dropout_prob)
        .with_attention_dropout(self.attention_probs_dropout_prob)
        .with_layer_norm_eps(self.layer_norm_eps)
    }
}

impl<F: BertLikeFamily> HfConfig for BertLikeConfig<F> {
    fn from_dir(dir: &Path) -> Result<Self, ConfigError> {
        let config: Self = read_family_config(dir, F::MODEL_TYPES, F::defaults())?;
        config.validate()?;
        Ok(config)
    }

    fn to_json(&self, architecture: &str) -> serde_json::Value {
        family_json(self, F::MODEL_TYPES[0], architecture)
    }

    fn initializer_range(&self) -> f64 {
        self.initializer_range
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
    check_model_type(&value, model_types)?;
    serde_json::from_value(with_defaults(value, defaults))
        .map_err(|e| ConfigError::Parse { path, reason: e.to_string() })
}

/// A config as HF `config.json`: its fields, `model_type` (unless it has one) and `architectures`.
pub fn family_json(config: &impl Serialize, model_type: &str, architecture: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(config).expect("config serialises");
    let map = value.as_object_mut().expect("an object");
    map.entry("model_type").or_insert(model_type.into());
    map.insert("architectures".into(), serde_json::json!([architecture]));
    value
}

/// A BERT-shaped base model (HF `BertModel`, `RobertaModel`): embeddings, post-LN encoder and
/// optional pooler.
#[derive(Module, Debug)]
pub struct BertLikeModel<F: BertLikeFamily> {
    /// Word + position + token-type embeddings.
    pub embeddings: Embeddings,
    /// The transformer layers.
    pub encoder: Encoder,
    /// The pooler, absent in models that do not use it (HF `add_pooling_layer=False`).
    pub pooler: Option<Pooler>,
    /// RoBERTa's padding id, from which position ids are counted.
    #[module(skip)]
    padding_idx: Option<i64>,
    #[module(skip)]
    family: PhantomData<F>,
}

impl<F: BertLikeFamily> BertLikeModel<F> {
    /// A freshly initialised model; `add_pooling_layer` as in HF.
    pub fn new(config: &BertLikeConfig<F>, add_pooling_layer: bool, device: &Device) -> Self {
        Self {
            embeddings: config.embeddings().init(device),
            encoder: config.encoder().init(device),
            pooler: add_pooling_layer.then(|| PoolerConfig::new(config.hidden_size).init(device)),
            padding_idx: F::POSITIONS_AFTER_PADDING.then(|| config.pad_token_id.unwrap_or(0) as i64),
            family: PhantomData,
        }
    }

    /// Run the encoder over `input`.
    pub fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput {
        let mask = input.mask();
        let positions = input.position_ids.or_else(|| self.position_ids(&input.input_ids));
        let x = self.embeddings.forward(input.input_ids, input.token_type_ids, positions);
        let encoder = self.encoder.forward(x, &mask, options);
        let pooler_output = self.pooler.as_ref().map(|p| p.forward(encoder.last_hidden_state.clone()));
        BackboneOutput { encoder, pooler_output }
    }

    /// The word-embedding table `[vocab, hidden]` (the tied MLM decoder).
    pub fn word_embeddings(&self) -> Tensor<2> {
        self.embeddings.word_embeddings.weight.val()
    }

    /// RoBERTa's position ids: `padding_idx + 1 + i` for the i-th non-padding token, and
    /// `padding_idx` for padding (HF `create_position_ids_from_input_ids`).
    fn position_ids(&self, input_ids: &Tensor<2, Int>) -> Option<Tensor<2, Int>> {
        let pad = self.padding_idx?;
        let tokens = input_ids.clone().not_equal_elem(pad).int();
        Some((tokens.clone().cumsum(1) * tokens).add_scalar(pad))
    }
}

impl<F: BertLikeFamily> Backbone for BertLikeModel<F> {
    type Config = BertLikeConfig<F>;
    const CLASS: &'static str = F::CLASS;
    const PREFIX: &'static str = F::PREFIX;

    fn new(config: &Self::Config, add_pooling_layer: bool, device: &Device) -> Self {
        Self::new(config, add_pooling_layer, device)
    }

    fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput {
        self.forward(input, options)
    }

    fn word_embeddings(&self) -> Tensor<2> {
        self.word_embeddings()
    }

    fn input_limits(config: &Self::Config) -> InputLimits {
        InputLimits {
            vocab_size: config.vocab_size,
            type_vocab_size: config.type_vocab_size,
            positions: config.max_position_embeddings,
            max_len: config.max_position_embeddings - config.position_offset(),
        }
    }

    fn head_sizes(config: &Self::Config) -> HeadSizes {
        let lm_head = MaskedLmHeadConfig::new(
            config.hidden_size,
            config.hidden_size,
            config.vocab_size,
            F::lm_head_activation(config),
        )
        .with_layer_norm_eps(config.layer_norm_eps)
        .with_tie_word_embeddings(config.tie_word_embeddings);
        HeadSizes {
            hidden_size: config.hidden_size,
            num_labels: config.num_labels(),
            classifier_dropout: config.classifier_dropout(),
            sentence_dropout: 0.0,
            sentence_labels: 2,
            lm_head,
        }
    }

    fn key_map(_config: &Self::Config) -> KeyMap {
        KeyMap::new(&encoder_rows()).with(&F::head_rows())
    }

    fn ignored(config: &Self::Config) -> Vec<String> {
        let mut ignored = vec![r"(^|\.)position_ids$".to_string(), r"(^|\.)token_type_ids$".to_string()];
        if config.tie_word_embeddings {
            ignored.push(F::TIED_DECODER.to_string());
        }
        ignored
    }

    fn base_roots() -> Vec<String> {
        vec!["embeddings".into(), "encoder".into(), "pooler".into()]
    }
}

impl<F: BertLikeFamily> PretrainedModel for BertLikeModel<F> {
    type Config = BertLikeConfig<F>;

    fn architecture() -> String {
        format!("{}Model", F::CLASS)
    }

    fn init(config: &Self::Config, device: &Device) -> Self {
        <Self as Backbone>::new(config, true, device)
    }

    fn checkpoint_spec(config: &Self::Config) -> CheckpointSpec {
        <Self as Backbone>::spec(config, false, &["pooler."])
    }
}
