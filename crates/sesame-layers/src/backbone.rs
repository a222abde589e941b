//! What every encoder family offers the task heads: one input type, one output type and the
//! [`Backbone`] trait. The heads in [`crate::tasks`] are written once against it.

use burn::module::ModuleDisplay;
use burn::prelude::*;

use crate::attention::AttentionMask;
use crate::checkpoint::{CheckpointSpec, KeyMap};
use crate::encoder::{EncoderOutput, OutputOptions};
use crate::heads::MaskedLmHeadConfig;
use crate::pretrained::{check_ids, check_shape, HfConfig, InputError};

/// One batch of encoder input (HF argument names).
#[derive(Clone, Debug)]
pub struct EncoderInput {
    /// Token ids `[batch, seq]`.
    pub input_ids: Tensor<2, Int>,
    /// 1 for tokens, 0 for padding `[batch, seq]`; all ones when absent.
    pub attention_mask: Option<Tensor<2, Int>>,
    /// Segment ids `[batch, seq]`; zeros when absent.
    pub token_type_ids: Option<Tensor<2, Int>>,
    /// Position ids `[batch, seq]`; the family's default when absent (`0..seq`, or RoBERTa's
    /// positions counted past the padding id).
    pub position_ids: Option<Tensor<2, Int>>,
}

impl EncoderInput {
    /// Input from token ids alone.
    pub fn new(input_ids: Tensor<2, Int>) -> Self {
        Self { input_ids, attention_mask: None, token_type_ids: None, position_ids: None }
    }

    /// Set the attention mask.
    pub fn with_attention_mask(mut self, mask: Tensor<2, Int>) -> Self {
        self.attention_mask = Some(mask);
        self
    }

    /// Set the token type ids.
    pub fn with_token_type_ids(mut self, types: Tensor<2, Int>) -> Self {
        self.token_type_ids = Some(types);
        self
    }

    /// Set the position ids.
    pub fn with_position_ids(mut self, positions: Tensor<2, Int>) -> Self {
        self.position_ids = Some(positions);
        self
    }

    /// Check shapes and id ranges against a model's `limits` (reads the ids back from the device).
    pub fn validate(&self, limits: &InputLimits) -> Result<(), InputError> {
        let max = limits.max_len;
        check_shape(&self.input_ids, self.attention_mask.as_ref(), "attention_mask", max)?;
        check_shape(&self.input_ids, self.token_type_ids.as_ref(), "token_type_ids", max)?;
        check_shape(&self.input_ids, self.position_ids.as_ref(), "position_ids", max)?;
        check_ids(&self.input_ids, limits.vocab_size, "token")?;
        if let Some(types) = &self.token_type_ids {
            check_ids(types, limits.type_vocab_size.max(1), "token type")?;
        }
        if let Some(positions) = &self.position_ids {
            check_ids(positions, limits.positions, "position")?;
        }
        Ok(())
    }

    /// The padding mask of this batch.
    pub fn mask(&self) -> AttentionMask {
        match &self.attention_mask {
            Some(mask) => AttentionMask::padding(mask.clone(), self.input_ids.dims()[1]),
            None => AttentionMask::none(),
        }
    }

    /// The batch size.
    pub fn batch_size(&self) -> usize {
        self.input_ids.dims()[0]
    }
}

/// What input a model accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputLimits {
    /// Token ids lie in `0..vocab_size`.
    pub vocab_size: usize,
    /// Token type ids lie in `0..type_vocab_size`.
    pub type_vocab_size: usize,
    /// Explicit position ids lie in `0..positions`.
    pub positions: usize,
    /// The longest sequence (`positions`, less RoBERTa's offset).
    pub max_len: usize,
}

/// What a [`Backbone`] returns.
#[derive(Clone, Debug)]
pub struct BackboneOutput {
    /// Encoder output and, when asked, every hidden state and attention map.
    pub encoder: EncoderOutput,
    /// `tanh(dense(h[:, 0]))` `[batch, hidden]`, when the model has a pooler.
    pub pooler_output: Option<Tensor<2>>,
}

impl BackboneOutput {
    /// The last layer's states `[batch, seq, hidden]`.
    pub fn last_hidden_state(&self) -> Tensor<3> {
        self.encoder.last_hidden_state.clone()
    }

    /// The pooled output; `model` names the head model that needs it.
    pub fn pooled(&self, model: &str) -> Tensor<2> {
        self.pooler_output.clone().unwrap_or_else(|| panic!("{model} is built with a pooler"))
    }
}

/// The sizes the task heads are built from.
#[derive(Clone, Debug)]
pub struct HeadSizes {
    /// Encoder width.
    pub hidden_size: usize,
    /// Number of labels of classification heads.
    pub num_labels: usize,
    /// Dropout before classifiers.
    pub classifier_dropout: f64,
    /// Dropout before the sentence-level pre-training classifier (BERT's NSP has none).
    pub sentence_dropout: f64,
    /// Outputs of the sentence-level classifier (2; ALBERT's SOP head uses `num_labels`).
    pub sentence_labels: usize,
    /// The MLM head.
    pub lm_head: MaskedLmHeadConfig,
}

/// A family's base model (HF `BertModel`, `RobertaModel`, `AlbertModel`): what the shared task
/// heads need from it.
pub trait Backbone: Module + ModuleDisplay + Sized {
    /// The family's configuration.
    type Config: HfConfig;
    /// HF class-name stem (`Bert` in `BertForMaskedLM`).
    const CLASS: &'static str;
    /// HF name prefix of the base model inside head models (`bert`).
    const PREFIX: &'static str;

    /// A freshly initialised base model, with or without the pooler.
    fn new(config: &Self::Config, add_pooling_layer: bool, device: &Device) -> Self;

    /// Run the model over `input`.
    fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput;

    /// The word-embedding table `[vocab, embedding]` the MLM decoder is tied to.
    fn word_embeddings(&self) -> Tensor<2>;

    /// What input the model accepts.
    fn input_limits(config: &Self::Config) -> InputLimits;

    /// The sizes of the task heads.
    fn head_sizes(config: &Self::Config) -> HeadSizes;

    /// The family's table from HF names to Burn paths, base model and heads (head models keep
    /// the base model in a field `base` and their heads in `lm_head`, `sentence_head`, `head`).
    fn key_map(config: &Self::Config) -> KeyMap;

    /// Regexes over HF names that files hold but the model does not load (buffers, tied decoders).
    fn ignored(config: &Self::Config) -> Vec<String>;

    /// The top-level names of the base model's HF tensors (`embeddings`, `encoder`, `pooler`).
    fn base_roots() -> Vec<String>;

    /// The equivalent model and config in the form HF stores (see [`crate::PretrainedModel::hf_form`]).
    fn hf_form(&self, _config: &Self::Config) -> Option<(Self, Self::Config)> {
        None
    }

    /// The device the model lives on.
    fn device(&self) -> Device {
        self.word_embeddings().device()
    }

    /// The checkpoint spec of the base model itself (`with_base` false) or of a head model
    /// holding it in field `base`; `optional`: Burn path prefixes that may be absent.
    fn spec(config: &Self::Config, with_base: bool, optional: &[&str]) -> CheckpointSpec {
        let mut keys = Self::key_map(config);
        if with_base {
            keys = keys.with(&[(Self::PREFIX, "base")]);
        }
        CheckpointSpec {
            keys,
            family_prefix: Self::PREFIX.into(),
            has_base_prefix: with_base,
            base_roots: Self::base_roots(),
            may_be_missing: optional.iter().map(|s| s.to_string()).collect(),
            ignored: Self::ignored(config),
        }
    }
}
