//! ALBERT's configuration (HF `AlbertConfig`): the shared encoder fields, the factorised
//! embedding width, the layer groups, and what the depths of a group share.

use std::ops::{Deref, DerefMut};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sesame_layers::config::{ensure, ensure_probability, family_json, read_family_config};
use sesame_layers::{Activation, ConfigError, EncoderHyperParams, HfConfig, InputLimits, SourcePath};

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

    /// HF's `AlbertConfig()` defaults of the fields ALBERT shares with other encoders
    /// (xxlarge sizes); ALBERT's own fields have theirs on [`AlbertConfig`].
    pub(crate) fn defaults() -> serde_json::Value {
        serde_json::json!({
            "vocab_size": 30000, "hidden_size": 4096, "num_attention_heads": 64, "intermediate_size": 16384,
            "hidden_act": "gelu_new", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
            "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3,
        })
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
        ensure(self.pruned_heads.is_empty(), "pruned_heads", || "ALBERT's layers are shared across depths; pruned heads are not supported".into())?;
        ensure((1..=self.num_hidden_layers).contains(&self.num_hidden_groups), "num_hidden_groups", || {
            format!("{} groups for {} layers (need 1..=num_hidden_layers)", self.num_hidden_groups, self.num_hidden_layers)
        })?;
        ensure_probability(self.classifier_dropout_prob, "classifier_dropout_prob")
    }

    /// The group that runs at `depth` (HF: `int(depth / (num_hidden_layers / num_hidden_groups))`).
    pub fn group_of(&self, depth: usize) -> usize {
        let per_group = self.num_hidden_layers as f64 / self.num_hidden_groups as f64;
        ((depth as f64 / per_group) as usize).min(self.num_hidden_groups - 1)
    }
}

impl HfConfig for AlbertConfig {
    fn input_limits(&self) -> InputLimits {
        InputLimits::learned_positions(self.vocab_size, self.type_vocab_size, self.max_position_embeddings, 0)
    }

    fn labels(&self) -> &sesame_layers::hparams::LabelConfig {
        &self.hparams.labels
    }

    fn labels_mut(&mut self) -> &mut sesame_layers::hparams::LabelConfig {
        &mut self.hparams.labels
    }

    /// With one shared group only: with several, fewer layers would map depths to other groups.
    fn num_hidden_layers_mut(&mut self) -> Option<&mut usize> {
        (self.num_hidden_groups == 1).then_some(&mut self.hparams.num_hidden_layers)
    }

    fn num_layers(&self) -> usize {
        self.hparams.num_hidden_layers
    }

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

    /// Under partial sharing, HF's form: a group per depth holding that depth's layers (shared
    /// sub-blocks repeated), `parameter_sharing` back to `all`. Group `d`'s layer `i` takes the
    /// sub-blocks depth `d` owns (`encoder.depth_layers.d`) and the rest from the group that
    /// runs at depth `d`.
    fn hf_form(&self) -> Option<(Self, SourcePath)> {
        let sharing = self.parameter_sharing;
        if sharing == ParameterSharing::All {
            return None;
        }
        let mut hf = self.clone();
        hf.parameter_sharing = ParameterSharing::All;
        hf.num_hidden_groups = hf.num_hidden_layers;
        let schedule: Vec<usize> = (0..self.num_hidden_layers).map(|depth| self.group_of(depth)).collect();
        let source = move |path: &str| -> String {
            const GROUPS: &str = "encoder.albert_layer_groups.";
            let Some(at) = path.find(GROUPS) else { return path.to_string() };
            let (prefix, rest) = (&path[..at], &path[at + GROUPS.len()..]);
            let parts: Vec<&str> = rest.splitn(4, '.').collect();
            let (Some(depth), [_, "albert_layers", layer, tail]) = (parts[0].parse::<usize>().ok().filter(|d| *d < schedule.len()), parts.as_slice()) else {
                return path.to_string();
            };
            // The first depth of a group runs the group's own layers; the others own their
            // unshared sub-blocks.
            let owns = depth > 0 && schedule[depth - 1] == schedule[depth];
            let own = match sharing {
                ParameterSharing::Attention => ["feed_forward.", "output_norm."].iter().any(|p| tail.starts_with(p)).then_some("feed_forward"),
                ParameterSharing::FeedForward => ["attention.", "attention_norm."].iter().any(|p| tail.starts_with(p)).then_some("attention"),
                ParameterSharing::All => None,
            };
            match own.filter(|_| owns) {
                Some(block) => format!("{prefix}encoder.depth_layers.{depth}.{block}.{layer}.{tail}"),
                None => format!("{prefix}{GROUPS}{}.albert_layers.{layer}.{tail}", schedule[depth]),
            }
        };
        Some((hf, Box::new(source)))
    }
}

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

