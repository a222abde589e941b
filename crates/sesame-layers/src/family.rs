//! The contract a model crate implements once: its name, the `model_type`s of its checkpoints,
//! its configuration and base model, and its model for each task, or [`Unsupported`] where
//! transformers has none. The facade (`sesame::auto`, `sesame::pipeline`) loads any family
//! through it; nothing else names a family's types.

use std::path::Path;

use burn::module::{Content, Devices, ModuleDisplay, ModuleDisplayDefault, ModuleMapper, ModuleVisitor};
use burn::prelude::*;

use crate::backbone::{Backbone, BackboneOutput, ClassifierSizes, EncoderInput};
use crate::checkpoint::{CheckpointSpec, KeyMap};
use crate::config::ConfigError;
use crate::decoder::DecoderCache;
use crate::encoder::OutputOptions;
use crate::generative::{CausalLM, Seq2SeqLM};
use crate::heads::MaskedLmHeadConfig;
use crate::hparams::LabelConfig;
use crate::pretrained::{HfConfig, InputLimits, PretrainedModel};
use crate::tasks::{ClassifierLayers, SequenceClassifier, SpanExtractor, TokenTagger};

/// A family of checkpoints (BERT, RoBERTa, BART, …): which Sesame type runs which job. Each
/// type is bounded by the trait its job runs on, so a loader generic over `F: Family` calls
/// it directly; where the family has no such model, [`Unsupported`] stands in and the loader
/// refuses the job ([`supports`]).
///
/// ```ignore
/// impl Family for Bert {
///     const NAME: &'static str = "bert";
///     const MODEL_TYPES: &'static [&'static str] = &["bert"];
///     type Config = BertConfig;
///     type Model = BertModel;
///     type Encoder = BertModel;
///     type ForSequenceClassification = BertForSequenceClassification;
///     type ForTokenClassification = BertForTokenClassification;
///     type ForQuestionAnswering = BertForQuestionAnswering;
///     type ForConditionalGeneration = Unsupported;
///     type ForCausalLM = BertLMHeadModel;
/// }
/// ```
pub trait Family: 'static {
    /// The family's name in messages and on the command line (`bert`).
    const NAME: &'static str;
    /// The `model_type` values of its `config.json` files.
    const MODEL_TYPES: &'static [&'static str];
    /// Its `config.json`.
    type Config: HfConfig;
    /// The base model (HF `BertModel`): what `AutoModel` loads.
    type Model: PretrainedModel<Config = Self::Config>;
    /// The base model as a bidirectional encoder with a masked-LM head: sentence embeddings
    /// and fill-mask ([`Unsupported`] for BART and XLNet).
    type Encoder: Backbone;
    /// The sequence classifier (HF `…ForSequenceClassification`): classify, rerank.
    type ForSequenceClassification: SequenceClassifier;
    /// The token classifier (HF `…ForTokenClassification`): tag.
    type ForTokenClassification: TokenTagger;
    /// The extractive-QA model (HF `…ForQuestionAnswering`, XLNet's `…Simple`): answer.
    type ForQuestionAnswering: SpanExtractor;
    /// The encoder-decoder with an LM head (BART's `…ForConditionalGeneration`): generate from
    /// a source.
    type ForConditionalGeneration: Seq2SeqLM;
    /// The left-to-right LM (an encoder's `…ForCausalLM` saved with `is_decoder`,
    /// `BartForCausalLM`, XLNet's `…LMHeadModel`): generate a continuation.
    type ForCausalLM: CausalLM;
}

/// Whether `M`, a family's type for a job, runs it: it is not [`Unsupported`].
pub fn supports<M: 'static>() -> bool {
    std::any::TypeId::of::<M>() != std::any::TypeId::of::<Unsupported>()
}

/// Stands for a model a family does not have (transformers has no
/// `BartForTokenClassification`). It has no value, so none of its methods can run: every one
/// takes the model or its configuration, which is `Unsupported` too. Loaders refuse the job
/// before loading ([`supports`]); one that did not would stop at reading the configuration,
/// with an error saying there is no such model.
#[derive(Clone, Copy, Debug)]
pub enum Unsupported {}

impl HfConfig for Unsupported {
    fn from_dir(dir: &Path) -> Result<Self, ConfigError> {
        Err(ConfigError::Invalid { field: "architectures".into(), reason: format!("{}: the checkpoint's family has no model for this job", dir.display()) })
    }
    fn to_json(&self, _architecture: &str) -> serde_json::Value {
        match *self {}
    }
    fn input_limits(&self) -> InputLimits {
        match *self {}
    }
    fn labels(&self) -> &LabelConfig {
        match *self {}
    }
    fn labels_mut(&mut self) -> &mut LabelConfig {
        match *self {}
    }
    fn num_layers(&self) -> usize {
        match *self {}
    }
}

impl Module for Unsupported {
    fn collect_devices(&self, _devices: Devices) -> Devices {
        match *self {}
    }
    fn fork(self, _device: &Device) -> Self {
        match self {}
    }
    fn to_device(self, _device: &Device) -> Self {
        match self {}
    }
    fn train(self) -> Self {
        match self {}
    }
    fn valid(&self) -> Self {
        match *self {}
    }
    fn materialize(self) -> Self {
        match self {}
    }
    fn visit<V: ModuleVisitor>(&self, _visitor: &mut V) {
        match *self {}
    }
    fn map<M: ModuleMapper>(self, _mapper: &mut M) -> Self {
        match self {}
    }
}

impl ModuleDisplayDefault for Unsupported {
    fn content(&self, _content: Content) -> Option<Content> {
        match *self {}
    }
}

impl ModuleDisplay for Unsupported {}

impl PretrainedModel for Unsupported {
    type Config = Unsupported;
    fn architecture() -> String {
        "Unsupported".into()
    }
    fn init(config: &Unsupported, _device: &Device) -> Self {
        match *config {}
    }
    fn checkpoint_spec(config: &Unsupported) -> CheckpointSpec {
        match *config {}
    }
}

impl Backbone for Unsupported {
    const CLASS: &'static str = "Unsupported";
    const PREFIX: &'static str = "";
    fn new(config: &Unsupported, _add_pooling_layer: bool, _device: &Device) -> Self {
        match *config {}
    }
    fn forward(&self, _input: EncoderInput, _options: OutputOptions) -> BackboneOutput {
        match *self {}
    }
    fn word_embeddings(&self) -> Tensor<2> {
        match *self {}
    }
    fn lm_head(config: &Unsupported) -> MaskedLmHeadConfig {
        match *config {}
    }
    fn classifier_sizes(config: &Unsupported) -> ClassifierSizes {
        match *config {}
    }
    fn key_map(config: &Unsupported) -> KeyMap {
        match *config {}
    }
    fn ignored(config: &Unsupported) -> Vec<String> {
        match *config {}
    }
    fn base_roots() -> Vec<String> {
        Vec::new()
    }
}

impl SequenceClassifier for Unsupported {
    fn classify_layers(&self, _input: EncoderInput, _options: OutputOptions) -> ClassifierLayers {
        match *self {}
    }
}

impl TokenTagger for Unsupported {
    fn tag(&self, _input: EncoderInput) -> Tensor<3> {
        match *self {}
    }
}

impl SpanExtractor for Unsupported {
    fn spans(&self, _input: EncoderInput, _positions: Option<(Tensor<1, Int>, Tensor<1, Int>)>) -> (Tensor<2>, Tensor<2>, Option<Tensor<1>>) {
        match *self {}
    }
}

impl Seq2SeqLM for Unsupported {
    fn start_decoding(&self, _input_ids: Tensor<2, Int>, _attention_mask: Option<Tensor<2, Int>>) -> DecoderCache {
        match *self {}
    }
    fn decode(&self, _ids: Tensor<2, Int>, _cache: DecoderCache) -> (Tensor<3>, DecoderCache) {
        match *self {}
    }
    fn logits(&self, _input_ids: Tensor<2, Int>, _attention_mask: Option<Tensor<2, Int>>, _decoder_input_ids: Tensor<2, Int>) -> Tensor<3> {
        match *self {}
    }
    fn vocab_size(&self) -> usize {
        match *self {}
    }
    fn max_positions(&self) -> usize {
        match *self {}
    }
}

impl CausalLM for Unsupported {
    type Cache = ();
    fn causal_limits(config: &Unsupported) -> InputLimits {
        match *config {}
    }
    fn empty_cache(&self) {
        match *self {}
    }
    fn causal_logits(&self, _ids: Tensor<2, Int>, _cache: Option<()>) -> (Tensor<3>, Option<()>) {
        match *self {}
    }
    fn select_cache_rows(&self, _cache: (), _rows: &[usize]) {
        match *self {}
    }
}
