//! The hyper-parameters HF's encoder configurations share (`BertConfig`, `AlbertConfig`,
//! `ElectraConfig`, …), with HF's names and `PretrainedConfig`'s label fields. A family's
//! configuration flattens this struct into its own and adds what is its own; its defaults are
//! filled in from the family's JSON before parsing ([`crate::config::with_defaults`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::config::{ensure, ensure_probability, ConfigError};
use crate::embeddings::EmbeddingsConfig;
use crate::encoder::EncoderConfig;

/// Sizes, dropouts, initialisation and labels of a transformer encoder, as HF names them.
/// Defaults are bert-base-uncased's. Unknown keys are kept in `extra` and written back.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EncoderHyperParams {
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
    /// Heads removed from layers (HF `pruned_heads`: layer -> heads, numbered as in the unpruned
    /// layer), as transformers 4's `prune_heads` wrote pruned checkpoints: those layers are built
    /// with fewer heads of the same width. The keys are strings in the file (JSON), read as
    /// layer numbers by [`Self::pruned`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pruned_heads: BTreeMap<String, Vec<usize>>,
    /// Label names, count and problem type of classification heads.
    #[serde(flatten)]
    pub labels: LabelConfig,
    /// Every other key of the file, written back unchanged.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// The label fields of HF's `PretrainedConfig`, shared by every family's configuration
/// (flattened into it: the names stay top-level in `config.json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LabelConfig {
    /// Label names of classification heads; their count is the number of labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id2label: Option<BTreeMap<String, String>>,
    /// Label ids by name (HF writes it beside `id2label`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label2id: Option<BTreeMap<String, usize>>,
    /// Explicit label count (HF accepts it instead of `id2label`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_labels: Option<usize>,
    /// `regression`, `single_label_classification` or `multi_label_classification`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem_type: Option<String>,
    /// Sesame's own: the task head reads ELMo's scalar mix of this many hidden states (the
    /// embeddings and every layer) rather than the top layer (`finetune --feature-layer mix`).
    /// transformers keeps the key but has no such head: it would read the top layer.
    #[serde(default, rename = "sesame_scalar_mix", skip_serializing_if = "Option::is_none")]
    pub scalar_mix: Option<usize>,
    /// Sesame's own: FastBERT's exit classifiers, one after every encoder layer below the top,
    /// trained by self-distillation toward the model's own head (`finetune --early-exit`), so
    /// that `classify --speed S` can stop a row early. transformers keeps the key and reports
    /// the classifiers' tensors as unused: its model is the plain classifier.
    #[serde(default, rename = "sesame_early_exit", skip_serializing_if = "Option::is_none")]
    pub early_exit: Option<EarlyExitConfig>,
}

/// The size of FastBERT's exit classifiers (Liu et al. 2020, Table 1: 128 wide, 2 heads).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlyExitConfig {
    /// Width of a classifier's attention and dense layers.
    pub hidden_size: usize,
    /// Attention heads; must divide `hidden_size`.
    pub num_attention_heads: usize,
}

impl Default for EarlyExitConfig {
    /// The paper's: 128 wide, 2 heads.
    fn default() -> Self {
        Self { hidden_size: 128, num_attention_heads: 2 }
    }
}

impl LabelConfig {
    /// The number of labels: `num_labels`, else `len(id2label)`, else the family's `default`.
    pub fn count(&self, default: usize) -> usize {
        self.num_labels.or(self.id2label.as_ref().map(|m| m.len())).unwrap_or(default)
    }

    /// The name of label `i`: its `id2label` entry, else `LABEL_i` (as transformers names it).
    pub fn name(&self, i: usize) -> String {
        self.id2label.as_ref().and_then(|m| m.get(&i.to_string()).cloned()).unwrap_or_else(|| format!("LABEL_{i}"))
    }

    /// Set the number of labels (names `LABEL_i`).
    pub fn set_count(&mut self, n: usize) {
        self.id2label = Some((0..n).map(|i| (i.to_string(), format!("LABEL_{i}"))).collect());
        self.label2id = Some((0..n).map(|i| (format!("LABEL_{i}"), i)).collect());
        self.num_labels = None;
    }

    /// Refuse an unknown `problem_type`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(kind) = &self.problem_type {
            ensure(
                matches!(kind.as_str(), "regression" | "single_label_classification" | "multi_label_classification"),
                "problem_type",
                || format!("unknown problem type `{kind}`"),
            )?;
        }
        if let Some(exit) = &self.early_exit {
            ensure(
                exit.num_attention_heads > 0 && exit.hidden_size % exit.num_attention_heads == 0,
                "sesame_early_exit",
                || format!("{} heads do not divide a width of {}", exit.num_attention_heads, exit.hidden_size),
            )?;
            ensure(self.scalar_mix.is_none(), "sesame_early_exit", || "exit classifiers read single layers; the head reads sesame_scalar_mix of all of them".into())?;
        }
        Ok(())
    }
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

impl Default for EncoderHyperParams {
    /// bert-base-uncased's values.
    fn default() -> Self {
        serde_json::from_value(serde_json::json!({})).expect("defaults deserialise")
    }
}

impl EncoderHyperParams {
    /// Set a size preset: `tiny` (2 layers, 128 wide), `mini` (4, 256), `small` (4, 512),
    /// `base` (12, 768), as Google's BERT miniatures; feed-forward 4x wide, heads of 64;
    /// `positions` learned positions and padding id `pad_token_id`.
    pub fn set_preset(&mut self, name: &str, vocab_size: usize, positions: usize, pad_token_id: usize) -> Result<(), ConfigError> {
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
        self.vocab_size = vocab_size;
        self.num_hidden_layers = layers;
        self.hidden_size = hidden;
        self.num_attention_heads = hidden / 64;
        self.intermediate_size = 4 * hidden;
        self.pad_token_id = Some(pad_token_id);
        self.max_position_embeddings = positions;
        Ok(())
    }

    /// Number of labels of classification heads (HF: `len(id2label)`, default 2).
    pub fn num_labels(&self) -> usize {
        self.labels.count(2)
    }

    /// Set the number of labels (names `LABEL_i`).
    pub fn set_num_labels(&mut self, n: usize) {
        self.labels.set_count(n);
    }

    /// Dropout of classification heads.
    pub fn classifier_dropout(&self) -> f64 {
        self.classifier_dropout.unwrap_or(self.hidden_dropout_prob)
    }

    /// Check that an encoder can be built; `position_offset` rows precede the first position.
    pub fn validate(&self, position_offset: usize) -> Result<(), ConfigError> {
        let positive = |v: usize, f: &str| ensure(v > 0, f, || "must be at least 1".into());
        positive(self.vocab_size, "vocab_size")?;
        positive(self.hidden_size, "hidden_size")?;
        positive(self.num_hidden_layers, "num_hidden_layers")?;
        positive(self.num_attention_heads, "num_attention_heads")?;
        positive(self.intermediate_size, "intermediate_size")?;
        ensure(self.max_position_embeddings > position_offset, "max_position_embeddings", || {
            format!("{} positions leave none after the offset of {position_offset}", self.max_position_embeddings)
        })?;
        ensure(self.hidden_size % self.num_attention_heads == 0, "num_attention_heads", || {
            format!("{} heads do not divide hidden_size {}", self.num_attention_heads, self.hidden_size)
        })?;
        for (p, f) in [
            (self.hidden_dropout_prob, "hidden_dropout_prob"),
            (self.attention_probs_dropout_prob, "attention_probs_dropout_prob"),
            (self.classifier_dropout(), "classifier_dropout"),
        ] {
            ensure_probability(p, f)?;
        }
        ensure(self.layer_norm_eps > 0.0, "layer_norm_eps", || "must be positive".into())?;
        for (layer, heads) in &self.pruned_heads {
            let reason = match layer.parse::<usize>() {
                Err(_) => Some(format!("layer `{layer}` is not a layer number")),
                Ok(l) if l >= self.num_hidden_layers => Some(format!("layer {l} of {} layers", self.num_hidden_layers)),
                Ok(l) => match heads.iter().find(|&&h| h >= self.num_attention_heads) {
                    Some(h) => Some(format!("head {h} of layer {l}: the layers have {} heads", self.num_attention_heads)),
                    None if self.heads_of(l) == 0 => Some(format!("every head of layer {l} is pruned; Sesame needs one at least")),
                    None => None,
                },
            };
            ensure(reason.is_none(), "pruned_heads", || reason.clone().unwrap_or_default())?;
        }
        if let Some(kind) = &self.position_embedding_type {
            ensure(kind == "absolute", "position_embedding_type", || format!("`{kind}` is not supported (only `absolute`)"))?;
        }
        self.labels.validate()
    }

    /// Word + position + token-type embeddings `width` wide (the hidden size, or a family's
    /// smaller `embedding_size`).
    pub fn embeddings(&self, width: usize) -> EmbeddingsConfig {
        EmbeddingsConfig::new(self.vocab_size, width, self.max_position_embeddings)
            .with_type_vocab_size(self.type_vocab_size)
            .with_layer_norm_eps(self.layer_norm_eps)
            .with_dropout(self.hidden_dropout_prob)
    }

    /// The heads pruned from each layer, by their numbers in the unpruned layer (layers with
    /// none left out; keys that are not layer numbers, which [`Self::validate`] refuses, too).
    pub fn pruned(&self) -> BTreeMap<usize, BTreeSet<usize>> {
        let layers = self.pruned_heads.iter().filter_map(|(l, heads)| Some((l.parse().ok()?, heads.iter().copied().collect::<BTreeSet<usize>>())));
        layers.filter(|(_, heads)| !heads.is_empty()).collect()
    }

    /// The heads layer `layer` keeps.
    pub fn heads_of(&self, layer: usize) -> usize {
        let pruned = self.pruned().get(&layer).map_or(0, |h| h.iter().filter(|&&h| h < self.num_attention_heads).count());
        self.num_attention_heads - pruned
    }

    /// Record `heads` (numbered as in the unpruned layer) as pruned from `layer`, beside those
    /// pruned before.
    pub fn add_pruned(&mut self, layer: usize, heads: &BTreeSet<usize>) {
        let mut all = self.pruned().remove(&layer).unwrap_or_default();
        all.extend(heads);
        self.pruned_heads.retain(|l, _| l.parse::<usize>().ok() != Some(layer));
        if !all.is_empty() {
            self.pruned_heads.insert(layer.to_string(), all.into_iter().collect());
        }
    }

    /// A copy recording `heads` (layer -> heads, numbered as in the unpruned layers) as pruned
    /// too.
    pub fn with_pruned(&self, heads: &BTreeMap<usize, BTreeSet<usize>>) -> Self {
        let mut next = self.clone();
        for (&layer, heads) in heads {
            next.add_pruned(layer, heads);
        }
        next
    }

    /// The settings of a stack of only the layers `layers` (0-based, in order) of this one:
    /// their count, and the heads each had pruned under its new number.
    pub fn with_layers(&self, layers: &[usize]) -> Self {
        let pruned = self.pruned();
        let mut next = self.clone();
        next.num_hidden_layers = layers.len();
        next.pruned_heads = layers
            .iter()
            .enumerate()
            .filter_map(|(new, old)| pruned.get(old).map(|heads| (new.to_string(), heads.iter().copied().collect())))
            .collect();
        next
    }

    /// The post-LN encoder stack (each layer with the heads it keeps).
    pub fn encoder(&self) -> EncoderConfig {
        let pruned = !self.pruned().is_empty();
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
        .with_layer_heads(if pruned { (0..self.num_hidden_layers).map(|l| self.heads_of(l)).collect() } else { Vec::new() })
    }
}
