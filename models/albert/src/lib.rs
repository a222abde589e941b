//! ALBERT for Burn (Lan et al., 2019): HuggingFace-compatible configuration, model, task heads
//! and checkpoints.
//!
//! What ALBERT changes in BERT, and where it lives here:
//! - **Factorised embeddings**: tokens are embedded in `embedding_size` (E, 128) dimensions and
//!   projected to `hidden_size` (H) by `encoder.embedding_hidden_mapping_in`; the MLM head maps
//!   H back to E and decodes with the E-wide word table. Vocabulary parameters drop from V·H to
//!   V·E + E·H.
//! - **Cross-layer parameter sharing**: `num_hidden_groups` groups of `inner_group_num` layers;
//!   depth `i` of `num_hidden_layers` runs group `floor(i / (layers / groups))`, every layer of it
//!   (HF's rule, float division included). One group (the default) shares everything: a
//!   12-layer ALBERT has the parameters of one layer, and its gradient is the sum over depths.
//!   The paper's ablation (table 4) shares only attention or only the feed-forward block:
//!   `parameter_sharing` (Sesame only), each depth owning the other sub-block; saving writes
//!   such a model out per depth, the form transformers loads.
//! - **Sentence-order prediction** replaces NSP in [`AlbertForPreTraining`] (same two-way head
//!   on the pooled output, with dropout); no dropout by default; `gelu_new`.
//!
//! The layer itself is the shared post-LN [`EncoderLayer`]; the embeddings, heads and task
//! models are `sesame-layers`' own.

pub mod pretraining;

use std::ops::{Deref, DerefMut};
use std::path::Path;

use burn::nn::{LayerNorm, Linear, LinearConfig};
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use sesame_layers::config::{ensure, family_json, read_family_config};
use sesame_layers::encoder::run_layers;
use sesame_layers::{
    Activation, AttentionMask, Backbone, BackboneOutput, CheckpointSpec, Classifier, ClassifierConfig, ConfigError, EncoderCache,
    Embeddings, EncoderHyperParams, EncoderInput, EncoderLayer, FeedForward, ForMaskedLM, ForMultipleChoice, ForPreTraining,
    ForQuestionAnswering, ForSequenceClassification, ForTokenClassification, HeadSizes, HfConfig, InputLimits, KeyMap,
    LayerParts, MaskedLmHeadConfig, MultiHeadAttention, OutputOptions, Pooler, PoolerConfig, PretrainedModel,
    SequenceSummaryConfig,
};

pub use sesame_layers::{HeadOutput, PreTrainingLabels, PreTrainingOutput, QuestionAnsweringOutput};

/// The ALBERT family marker: HF names and defaults.
#[derive(Clone, Copy, Debug, Default)]
pub struct Albert;

impl Albert {
    /// HF `model_type` values ALBERT reads.
    pub const MODEL_TYPES: &'static [&'static str] = &["albert"];
    /// HF class-name stem.
    pub const CLASS: &'static str = "Albert";
    /// HF base-model prefix inside head models.
    pub const PREFIX: &'static str = "albert";
    /// The tied MLM decoder's HF names, skipped when the decoder is the word embeddings.
    const TIED_DECODER: &'static str = r"^predictions\.decoder\.(weight|bias)$";

    /// HF's `AlbertConfig()` defaults of the fields ALBERT shares with other encoders
    /// (xxlarge sizes); ALBERT's own fields have theirs on [`AlbertConfig`].
    fn defaults() -> serde_json::Value {
        serde_json::json!({
            "vocab_size": 30000, "hidden_size": 4096, "num_attention_heads": 64, "intermediate_size": 16384,
            "hidden_act": "gelu_new", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
            "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3,
        })
    }

    /// HF names of the heads onto the head models' fields.
    fn head_rows() -> Vec<(&'static str, &'static str)> {
        vec![
            ("^predictions.LayerNorm", "^lm_head.layer_norm"),
            ("^predictions", "^lm_head"),
            ("^sop_classifier", "^sentence_head"),
            ("^classifier", "^head.classifier"),
            ("^qa_outputs", "^head.qa_outputs"),
        ]
    }
}

/// ALBERT hyper-parameters (HF `AlbertConfig`): the shared encoder fields plus the
/// factorisation and sharing ones. Dereferences to the shared fields.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AlbertConfig {
    /// Width of the token embeddings (E).
    #[serde(default = "d::embedding_size")]
    pub embedding_size: usize,
    /// Number of distinct layer groups.
    #[serde(default = "d::one")]
    pub num_hidden_groups: usize,
    /// Layers in each group, applied in turn at every depth that uses the group.
    #[serde(default = "d::one")]
    pub inner_group_num: usize,
    /// What the depths that run a group share (Sesame only; HF shares whole layers).
    #[serde(default, skip_serializing_if = "ParameterSharing::is_all")]
    pub parameter_sharing: ParameterSharing,
    /// Dropout before the classifiers (SOP, sequence, token, choice).
    #[serde(default = "d::classifier_dropout_prob")]
    pub classifier_dropout_prob: f64,
    /// The fields ALBERT shares with other encoders (sizes, dropouts, labels).
    #[serde(flatten)]
    pub hparams: EncoderHyperParams,
}

/// What the depths running one layer group share (Lan et al. 2020, table 4: "all-shared",
/// "shared-attention", "shared-FFN"; "not-shared" is a group per depth).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParameterSharing {
    /// The whole layer: ALBERT, and the only form HF has.
    #[default]
    All,
    /// Attention and its LayerNorm; every depth has its own feed-forward block and LayerNorm.
    Attention,
    /// The feed-forward block and its LayerNorm; every depth has its own attention and LayerNorm.
    FeedForward,
}

impl ParameterSharing {
    fn is_all(&self) -> bool {
        *self == Self::All
    }
}

mod d {
    pub fn embedding_size() -> usize { 128 }
    pub fn one() -> usize { 1 }
    pub fn classifier_dropout_prob() -> f64 { 0.1 }
}

impl Deref for AlbertConfig {
    type Target = EncoderHyperParams;
    fn deref(&self) -> &Self::Target {
        &self.hparams
    }
}

impl DerefMut for AlbertConfig {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.hparams
    }
}

impl Default for AlbertConfig {
    /// HF's `AlbertConfig()` (ALBERT-xxlarge sizes).
    fn default() -> Self {
        serde_json::from_value(Albert::defaults()).expect("family defaults deserialise")
    }
}

impl AlbertConfig {
    /// A size preset (see [`EncoderHyperParams::set_preset`]) with `embedding_size` 128 (64
    /// for `tiny` and `mini`), all layers in one shared group and no dropout, as the paper trains.
    pub fn preset(name: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        config.hparams.set_preset(name, vocab_size, max_len, pad_token_id)?;
        config.hparams.hidden_dropout_prob = 0.0;
        config.hparams.attention_probs_dropout_prob = 0.0;
        config.hparams.hidden_act = Activation::GeluNew;
        config.embedding_size = if matches!(name, "tiny" | "mini") { 64 } else { 128 };
        config.validate()?;
        Ok(config)
    }

    /// Check that a model can be built from this config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.hparams.validate(0)?;
        ensure(self.embedding_size > 0, "embedding_size", || "must be at least 1".into())?;
        ensure(self.inner_group_num > 0, "inner_group_num", || "must be at least 1".into())?;
        ensure((1..=self.num_hidden_layers).contains(&self.num_hidden_groups), "num_hidden_groups", || {
            format!("{} groups for {} layers (need 1..=num_hidden_layers)", self.num_hidden_groups, self.num_hidden_layers)
        })?;
        let p = self.classifier_dropout_prob;
        ensure((0.0..1.0).contains(&p), "classifier_dropout_prob", || format!("{p} is not a probability in [0, 1)"))
    }

    /// The group that runs at `depth` (HF: `int(depth / (num_hidden_layers / num_hidden_groups))`).
    pub fn group_of(&self, depth: usize) -> usize {
        let per_group = self.num_hidden_layers as f64 / self.num_hidden_groups as f64;
        ((depth as f64 / per_group) as usize).min(self.num_hidden_groups - 1)
    }
}

impl HfConfig for AlbertConfig {
    fn from_dir(dir: &Path) -> Result<Self, ConfigError> {
        let config: Self = read_family_config(dir, Albert::MODEL_TYPES, Albert::defaults())?;
        config.validate()?;
        Ok(config)
    }

    fn to_json(&self, architecture: &str) -> serde_json::Value {
        family_json(self, Albert::MODEL_TYPES[0], architecture)
    }

    fn initializer_range(&self) -> f64 {
        self.initializer_range
    }
}

/// Attention and the LayerNorm after it: what a depth owns when only feed-forward blocks are shared.
#[derive(Module, Debug)]
pub struct AttentionSublayer {
    /// Self-attention.
    pub attention: MultiHeadAttention,
    /// LayerNorm after attention.
    pub attention_norm: LayerNorm,
}

/// The feed-forward block and the LayerNorm after it: what a depth owns when only attention is shared.
#[derive(Module, Debug)]
pub struct FeedForwardSublayer {
    /// Feed-forward block.
    pub feed_forward: FeedForward,
    /// LayerNorm after it.
    pub output_norm: LayerNorm,
}

/// The sub-blocks one depth owns instead of taking them from its group, one per layer of the
/// group. Empty under whole-layer sharing, and at the first depth of every group (which uses
/// the group's own layers), so every parameter is used and counted once.
#[derive(Module, Debug)]
pub struct AlbertDepthLayers {
    /// Own attention sub-blocks ([`ParameterSharing::FeedForward`]).
    pub attention: Vec<AttentionSublayer>,
    /// Own feed-forward sub-blocks ([`ParameterSharing::Attention`]).
    pub feed_forward: Vec<FeedForwardSublayer>,
}

/// One group of layers (HF `AlbertLayerGroup`).
#[derive(Module, Debug)]
pub struct AlbertLayerGroup {
    /// The group's layers, applied in order.
    pub albert_layers: Vec<EncoderLayer>,
}

/// The projection E → H and the shared layer groups (HF `AlbertTransformer`).
#[derive(Module, Debug)]
pub struct AlbertTransformer {
    /// `embedding_size -> hidden_size`.
    pub embedding_hidden_mapping_in: Linear,
    /// The distinct layer groups.
    pub albert_layer_groups: Vec<AlbertLayerGroup>,
    /// What each depth owns under partial sharing (empty entries otherwise).
    pub depth_layers: Vec<AlbertDepthLayers>,
    /// The group run at each depth.
    #[module(skip)]
    pub schedule: Vec<usize>,
}

impl AlbertTransformer {
    /// The transformer for `config`: its groups, and each depth's own sub-blocks.
    pub fn new(config: &AlbertConfig, device: &Device) -> Self {
        let layer = config.hparams.encoder();
        let groups = (0..config.num_hidden_groups)
            .map(|_| AlbertLayerGroup { albert_layers: (0..config.inner_group_num).map(|_| layer.init_layer(device)).collect() })
            .collect();
        let schedule: Vec<usize> = (0..config.num_hidden_layers).map(|depth| config.group_of(depth)).collect();
        let depth_layers = (0..config.num_hidden_layers)
            .map(|depth| {
                let first_of_group = depth == 0 || schedule[depth - 1] != schedule[depth];
                let owned = if first_of_group { 0 } else { config.inner_group_num };
                let layers = (0..owned).map(|_| layer.init_layer(device));
                let (mut attention, mut feed_forward) = (Vec::new(), Vec::new());
                match config.parameter_sharing {
                    ParameterSharing::All => {}
                    ParameterSharing::Attention => {
                        feed_forward = layers.map(|l| FeedForwardSublayer { feed_forward: l.feed_forward, output_norm: l.output_norm }).collect()
                    }
                    ParameterSharing::FeedForward => {
                        attention = layers.map(|l| AttentionSublayer { attention: l.attention, attention_norm: l.attention_norm }).collect()
                    }
                }
                AlbertDepthLayers { attention, feed_forward }
            })
            .collect();
        Self {
            embedding_hidden_mapping_in: LinearConfig::new(config.embedding_size, config.hidden_size).init(device),
            albert_layer_groups: groups,
            depth_layers,
            schedule,
        }
    }

    /// The layers run at each depth: the group's, with the depth's own sub-blocks in place of
    /// the group's where it has them.
    pub fn depths(&self) -> Vec<Vec<LayerParts<'_>>> {
        let mut depths = Vec::with_capacity(self.schedule.len());
        for (&group, own) in self.schedule.iter().zip(&self.depth_layers) {
            let mut layers = Vec::new();
            for (i, layer) in self.albert_layer_groups[group].albert_layers.iter().enumerate() {
                let mut parts = layer.parts();
                if let Some(a) = own.attention.get(i) {
                    (parts.attention, parts.attention_norm) = (&a.attention, &a.attention_norm);
                }
                if let Some(f) = own.feed_forward.get(i) {
                    (parts.feed_forward, parts.output_norm) = (&f.feed_forward, &f.output_norm);
                }
                layers.push(parts);
            }
            depths.push(layers);
        }
        depths
    }

    /// Project `embeddings` `[batch, seq, E]` and run every depth's layers over it.
    pub fn forward(
        &self,
        embeddings: Tensor<3>,
        mask: &AttentionMask,
        cache: Option<EncoderCache>,
        options: OutputOptions,
    ) -> sesame_layers::EncoderOutput {
        let x = self.embedding_hidden_mapping_in.forward(embeddings);
        run_layers(self.depths().into_iter().flatten(), x, mask, cache, options)
    }
}

/// The ALBERT encoder (HF `AlbertModel`).
#[derive(Module, Debug)]
pub struct AlbertModel {
    /// Word + position + token-type embeddings, `embedding_size` wide.
    pub embeddings: Embeddings,
    /// Projection and shared layers.
    pub encoder: AlbertTransformer,
    /// `tanh(dense(h[:, 0]))` (HF `pooler` + `pooler_activation`).
    pub pooler: Option<Pooler>,
}

impl AlbertModel {
    /// A freshly initialised model; `add_pooling_layer` as in HF.
    pub fn new(config: &AlbertConfig, add_pooling_layer: bool, device: &Device) -> Self {
        Self {
            embeddings: config.embeddings(config.embedding_size).init(device),
            encoder: AlbertTransformer::new(config, device),
            pooler: add_pooling_layer.then(|| PoolerConfig::new(config.hidden_size).init(device)),
        }
    }

    /// Run the encoder over `input`.
    pub fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput {
        let mask = input.mask();
        let positions = input.position_ids.clone().unwrap_or_else(|| input.default_position_ids());
        let x = self.embeddings.forward(input.input_ids, input.token_type_ids, Some(positions));
        let encoder = self.encoder.forward(x, &mask, input.cache, options);
        let pooler_output = self.pooler.as_ref().map(|p| p.forward(encoder.last_hidden_state.clone()));
        BackboneOutput { encoder, pooler_output }
    }

    /// Under partial sharing, the same model in HF's form: a group per depth holding that
    /// depth's layers (shared sub-blocks repeated), `parameter_sharing` back to `all`.
    pub fn hf_form(&self, config: &AlbertConfig) -> Option<(Self, AlbertConfig)> {
        if config.parameter_sharing == ParameterSharing::All {
            return None;
        }
        let mut hf = config.clone();
        hf.parameter_sharing = ParameterSharing::All;
        hf.num_hidden_groups = hf.num_hidden_layers;
        let groups: Vec<AlbertLayerGroup> = (self.encoder.depths().into_iter())
            .map(|layers| AlbertLayerGroup { albert_layers: layers.into_iter().map(LayerParts::to_layer).collect() })
            .collect();
        let encoder = AlbertTransformer {
            embedding_hidden_mapping_in: self.encoder.embedding_hidden_mapping_in.clone(),
            depth_layers: groups.iter().map(|_| AlbertDepthLayers { attention: vec![], feed_forward: vec![] }).collect(),
            schedule: (0..groups.len()).collect(),
            albert_layer_groups: groups,
        };
        Some((Self { encoder, embeddings: self.embeddings.clone(), pooler: self.pooler.clone() }, hf))
    }
}

impl Backbone for AlbertModel {
    type Config = AlbertConfig;
    const CLASS: &'static str = Albert::CLASS;
    const PREFIX: &'static str = Albert::PREFIX;

    fn new(config: &AlbertConfig, add_pooling_layer: bool, device: &Device) -> Self {
        Self::new(config, add_pooling_layer, device)
    }

    fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput {
        self.forward(input, options)
    }

    fn word_embeddings(&self) -> Tensor<2> {
        self.embeddings.word_embeddings.weight.val()
    }

    fn hf_form(&self, config: &AlbertConfig) -> Option<(Self, AlbertConfig)> {
        self.hf_form(config)
    }

    fn input_limits(config: &AlbertConfig) -> InputLimits {
        InputLimits {
            vocab_size: config.vocab_size,
            type_vocab_size: config.type_vocab_size,
            positions: config.max_position_embeddings,
            max_len: config.max_position_embeddings,
        }
    }

    fn head_sizes(config: &AlbertConfig) -> HeadSizes {
        let lm_head = MaskedLmHeadConfig::new(config.hidden_size, config.embedding_size, config.vocab_size, config.hidden_act)
            .with_layer_norm_eps(config.layer_norm_eps)
            .with_tie_word_embeddings(config.tie_word_embeddings);
        HeadSizes {
            hidden_size: config.hidden_size,
            num_labels: config.num_labels(),
            classifier_dropout: config.classifier_dropout_prob,
            classifier_activation: Activation::Tanh,
            // SOP: dropout, then as many outputs as labels (HF's `AlbertSOPHead`).
            sentence_head: ClassifierConfig::new(config.hidden_size, config.num_labels()).with_dropout(config.classifier_dropout_prob),
            summary: SequenceSummaryConfig::first_token(config.hidden_size),
            lm_head,
        }
    }

    fn key_map(_config: &AlbertConfig) -> KeyMap {
        // Only the layer's own names differ from Sesame's; the group structure is HF's.
        KeyMap::new(&[
            ("albert_layers.{n}.attention.dense", "albert_layers.{n}.attention.output"),
            ("albert_layers.{n}.attention.LayerNorm", "albert_layers.{n}.attention_norm"),
            ("albert_layers.{n}.ffn", "albert_layers.{n}.feed_forward.intermediate"),
            ("albert_layers.{n}.ffn_output", "albert_layers.{n}.feed_forward.output"),
            ("albert_layers.{n}.full_layer_layer_norm", "albert_layers.{n}.output_norm"),
            ("embeddings.LayerNorm", "embeddings.layer_norm"),
            ("pooler", "pooler.dense"),
        ])
        .with(&Albert::head_rows())
    }

    fn ignored(config: &AlbertConfig) -> Vec<String> {
        sesame_layers::checkpoint::encoder_ignored(config.tie_word_embeddings.then_some(Albert::TIED_DECODER))
    }

    fn base_roots() -> Vec<String> {
        vec!["embeddings".into(), "encoder".into(), "pooler".into()]
    }
}

impl PretrainedModel for AlbertModel {
    type Config = AlbertConfig;

    fn architecture() -> String {
        "AlbertModel".into()
    }

    fn init(config: &AlbertConfig, device: &Device) -> Self {
        Self::new(config, true, device)
    }

    fn checkpoint_spec(config: &AlbertConfig) -> CheckpointSpec {
        Self::spec(config, false, &["pooler."])
    }

    fn hf_form(&self, config: &AlbertConfig) -> Option<(Self, AlbertConfig)> {
        self.hf_form(config)
    }
}

/// One batch of ALBERT input (HF argument names).
pub type AlbertInput = EncoderInput;
/// MLM + sentence-order prediction (HF `AlbertForPreTraining`).
pub type AlbertForPreTraining = ForPreTraining<AlbertModel>;
/// MLM head only (HF `AlbertForMaskedLM`).
pub type AlbertForMaskedLM = ForMaskedLM<AlbertModel>;
/// Dropout + linear on the pooled output (HF `AlbertForSequenceClassification`).
pub type AlbertForSequenceClassification = ForSequenceClassification<AlbertModel, Classifier>;
/// A label per token (HF `AlbertForTokenClassification`).
pub type AlbertForTokenClassification = ForTokenClassification<AlbertModel>;
/// Extractive QA span head (HF `AlbertForQuestionAnswering`).
pub type AlbertForQuestionAnswering = ForQuestionAnswering<AlbertModel>;
/// Scores per choice (HF `AlbertForMultipleChoice`).
pub type AlbertForMultipleChoice = ForMultipleChoice<AlbertModel, Classifier>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preset_writes_its_own_sizes_to_config_json() {
        let config = AlbertConfig::preset("tiny", 100, 32, 0).unwrap();
        let json = config.to_json("AlbertForPreTraining");
        assert_eq!(json["embedding_size"], 64, "{json}");
        assert_eq!(json["hidden_size"], 128);
        assert_eq!(json["model_type"], "albert");
        let back: AlbertConfig = serde_json::from_value(json).unwrap();
        assert_eq!((back.embedding_size, back.hidden_size, back.num_hidden_groups), (64, 128, 1));
        assert!(back.hparams.extra.keys().all(|k| !k.starts_with("embedding")), "{:?}", back.hparams.extra.keys());
    }

    #[test]
    fn partial_sharing_is_written_to_config_json_only_when_chosen() {
        let mut config = AlbertConfig::preset("tiny", 100, 32, 0).unwrap();
        assert!(config.to_json("AlbertModel").get("parameter_sharing").is_none(), "HF's form stays HF's");
        config.parameter_sharing = ParameterSharing::FeedForward;
        let json = config.to_json("AlbertModel");
        assert_eq!(json["parameter_sharing"], "feed_forward");
        let back: AlbertConfig = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back.parameter_sharing, ParameterSharing::FeedForward);
        let mut bad = json;
        bad["parameter_sharing"] = "ffn".into();
        let err = serde_json::from_value::<AlbertConfig>(bad).unwrap_err().to_string();
        assert!(err.contains("unknown variant `ffn`") && err.contains("attention"), "{err}");
    }
}
