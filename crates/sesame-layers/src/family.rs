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
use crate::encoder::OutputOptions;
use crate::generative::{LanguageModel, Source};
use crate::heads::MaskedLmHeadConfig;
use crate::hparams::LabelConfig;
use crate::pretrained::{HfConfig, InputLimits, PretrainedModel};
use crate::tasks::{ClassifierLayers, SpanLogits, TaskModel, TokenLogits};

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
///     type ForConditionalGeneration = Unsupported<Source>;
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
    type ForSequenceClassification: TaskModel<Output = ClassifierLayers>;
    /// The token classifier (HF `…ForTokenClassification`; `Unsupported<TokenLogits>` where
    /// there is none): tag.
    type ForTokenClassification: TaskModel<Output = TokenLogits>;
    /// The extractive-QA model (HF `…ForQuestionAnswering`, XLNet's `…Simple`): answer.
    type ForQuestionAnswering: TaskModel<Output = SpanLogits>;
    /// The encoder-decoder with an LM head (BART's `…ForConditionalGeneration`): generate from
    /// a source.
    type ForConditionalGeneration: LanguageModel<Source = Source>;
    /// The left-to-right LM (an encoder's `…ForCausalLM` saved with `is_decoder`,
    /// `BartForCausalLM`, XLNet's `…LMHeadModel`): generate a continuation.
    type ForCausalLM: LanguageModel<Source = ()>;
}

/// Whether `M`, a family's type for a job, runs it: it is not [`Unsupported`].
pub fn supports<M: 'static>() -> bool {
    use std::any::TypeId;
    let unsupported = [
        TypeId::of::<Unsupported>(),
        TypeId::of::<Unsupported<ClassifierLayers>>(),
        TypeId::of::<Unsupported<TokenLogits>>(),
        TypeId::of::<Unsupported<SpanLogits>>(),
        TypeId::of::<Unsupported<Source>>(),
        TypeId::of::<Unsupported<()>>(),
    ];
    !unsupported.contains(&TypeId::of::<M>())
}

/// Stands for a model a family does not have (transformers has no
/// `BartForTokenClassification`). It has no value, so none of its methods can run: every one
/// takes the model or its configuration, which is `Unsupported` too. Loaders refuse the job
/// before loading ([`supports`]); one that did not would stop at reading the configuration,
/// with an error saying there is no such model.
///
/// `O` is what the job of the model it stands for gives or reads: a missing task model is
/// `Unsupported<TokenLogits>` (its [`TaskModel::Output`]: or `ClassifierLayers`,
/// `SpanLogits`), a missing generator `Unsupported<Source>` (an encoder-decoder's
/// [`LanguageModel::Source`]; `()` for a left-to-right model), a missing base model plain
/// `Unsupported`.
pub struct Unsupported<O = BackboneOutput> {
    never: std::convert::Infallible,
    output: std::marker::PhantomData<fn() -> O>,
}

impl<O> Clone for Unsupported<O> {
    fn clone(&self) -> Self {
        match self.never {}
    }
}

impl<O> std::fmt::Debug for Unsupported<O> {
    fn fmt(&self, _f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.never {}
    }
}

impl HfConfig for Unsupported {
    fn from_dir(dir: &Path) -> Result<Self, ConfigError> {
        Err(ConfigError::Invalid { field: "architectures".into(), reason: format!("{}: the checkpoint's family has no model for this job", dir.display()) })
    }
    fn to_json(&self, _architecture: &str) -> serde_json::Value {
        match self.never {}
    }
    fn input_limits(&self) -> InputLimits {
        match self.never {}
    }
    fn labels(&self) -> &LabelConfig {
        match self.never {}
    }
    fn labels_mut(&mut self) -> &mut LabelConfig {
        match self.never {}
    }
    fn num_layers(&self) -> usize {
        match self.never {}
    }
}

impl<O: 'static> Module for Unsupported<O> {
    fn collect_devices(&self, _devices: Devices) -> Devices {
        match self.never {}
    }
    fn fork(self, _device: &Device) -> Self {
        match self.never {}
    }
    fn to_device(self, _device: &Device) -> Self {
        match self.never {}
    }
    fn train(self) -> Self {
        match self.never {}
    }
    fn valid(&self) -> Self {
        match self.never {}
    }
    fn materialize(self) -> Self {
        match self.never {}
    }
    fn visit<V: ModuleVisitor>(&self, _visitor: &mut V) {
        match self.never {}
    }
    fn map<M: ModuleMapper>(self, _mapper: &mut M) -> Self {
        match self.never {}
    }
}

impl<O: 'static> ModuleDisplayDefault for Unsupported<O> {
    fn content(&self, _content: Content) -> Option<Content> {
        match self.never {}
    }
}

impl<O: 'static> ModuleDisplay for Unsupported<O> {}

impl<O: 'static> PretrainedModel for Unsupported<O> {
    type Config = Unsupported;
    fn architecture() -> String {
        "Unsupported".into()
    }
    fn init(config: &Unsupported, _device: &Device) -> Self {
        match config.never {}
    }
    fn checkpoint_spec(config: &Unsupported) -> CheckpointSpec {
        match config.never {}
    }
}

impl Backbone for Unsupported {
    const CLASS: &'static str = "Unsupported";
    const PREFIX: &'static str = "";
    fn new(config: &Unsupported, _add_pooling_layer: bool, _device: &Device) -> Self {
        match config.never {}
    }
    fn forward(&self, _input: EncoderInput, _options: OutputOptions) -> BackboneOutput {
        match self.never {}
    }
    fn word_embeddings(&self) -> Tensor<2> {
        match self.never {}
    }
    fn lm_head(config: &Unsupported) -> MaskedLmHeadConfig {
        match config.never {}
    }
    fn classifier_sizes(config: &Unsupported) -> ClassifierSizes {
        match config.never {}
    }
    fn key_map(config: &Unsupported) -> KeyMap {
        match config.never {}
    }
    fn ignored(config: &Unsupported) -> Vec<String> {
        match config.never {}
    }
    fn base_roots() -> Vec<String> {
        Vec::new()
    }
}

/// The missing task models: a sequence classifier, a token classifier, an extractive-QA model.
macro_rules! unsupported_task_model {
    ($($output:ty),*) => {$(
        impl TaskModel for Unsupported<$output> {
            type Base = Unsupported;
            type Output = $output;
            const BASE: &'static str = "";
            fn base(&self) -> &Unsupported {
                match self.never {}
            }
            fn with_base(self, _base: Unsupported) -> Self {
                match self.never {}
            }
            fn run(&self, _input: EncoderInput, _options: OutputOptions) -> $output {
                match self.never {}
            }
        }
    )*};
}

unsupported_task_model!(ClassifierLayers, TokenLogits, SpanLogits);
/// The missing generators: an encoder-decoder (`Unsupported<Source>`), a left-to-right model
/// (`Unsupported<()>`).
impl<O: Clone + 'static> LanguageModel for Unsupported<O> {
    type Source = O;
    type Cache = ();
    fn limits(config: &Unsupported) -> InputLimits {
        match config.never {}
    }
    fn start(&self, _source: O) {
        match self.never {}
    }
    fn decode(&self, _ids: Tensor<2, Int>, _cache: ()) -> (Tensor<3>, ()) {
        match self.never {}
    }
    fn logits(&self, _source: O, _ids: Tensor<2, Int>) -> Tensor<3> {
        match self.never {}
    }
    fn select_cache_rows(&self, _cache: (), _rows: &[usize]) {
        match self.never {}
    }
}
