//! Auto classes: the family of a checkpoint is read from its `config.json` (`model_type`, BERT
//! when absent, as transformers' `BertModel` reads it), and the family's [`Family`] says which
//! type runs the job. A family without a model for the job is refused by name.

use std::path::{Path, PathBuf};

use burn::prelude::*;
use sesame_layers::{
    supports, Backbone, ClassifierLayers, EncoderInput, Family, ForMaskedLM, OutputOptions, Pretrained, PretrainedModel, SpanLogits, TaskModel, TokenLogits,
};

/// Why a model could not be found, loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Neither a directory nor a hub id in the local cache.
    #[error(transparent)]
    Hub(#[from] sesame_layers::hub::HubError),
    /// `config.json` is missing, invalid, or names another task's head.
    #[error(transparent)]
    Config(#[from] sesame_layers::ConfigError),
    /// `config.json`'s `model_type` is no family this build has.
    #[error("{path}: model_type `{model_type}` is not a family this build has ({known})")]
    UnknownFamily {
        /// The config file.
        path: PathBuf,
        /// Its `model_type`.
        model_type: String,
        /// The families compiled in.
        known: String,
    },
    /// No family this build has is called `name`.
    #[error("unknown family `{name}` (expected {known})")]
    UnknownFamilyName {
        /// The name asked for.
        name: String,
        /// The families compiled in.
        known: String,
    },
    /// `config.json`'s `model_type` is not one the family asked for reads.
    #[error("{path}: model_type `{model_type}` is not {family}'s (it reads {known})")]
    WrongFamily {
        /// The config file.
        path: PathBuf,
        /// Its `model_type`.
        model_type: String,
        /// The family asked for.
        family: &'static str,
        /// The `model_type`s it reads.
        known: String,
    },
    /// The family has no model for the job.
    #[error("{family} has no {what}; {family} checkpoints run {has}")]
    Unsupported {
        /// The family.
        family: &'static str,
        /// What was asked for (`a token classifier`).
        what: &'static str,
        /// The jobs it has.
        has: String,
    },
    /// The weights are missing, unreadable or do not fit the config.
    #[error(transparent)]
    Load(#[from] sesame_layers::PretrainedError),
    /// The checkpoint lacks the task's head (it would be made up on the spot).
    #[error("{dir} has no {head} head (missing: {missing}); {hint}")]
    NoHead {
        /// The model directory.
        dir: PathBuf,
        /// The head (`sequence-classification`).
        head: &'static str,
        /// The tensors that would have been drawn at random.
        missing: String,
        /// How to get one.
        hint: &'static str,
    },
    /// The tokenizer files are missing or invalid.
    #[error(transparent)]
    Tokenizer(#[from] sesame_text::TokenizerError),
    /// A pipeline refused its input or failed.
    #[error(transparent)]
    Pipeline(#[from] sesame_pipelines::PipelineError),
    /// A generator could not be made of the checkpoint (no trained LM head, no decoder start,
    /// settings transformers refuses), as one line naming the directory.
    #[error("{0}")]
    Generator(String),
    /// `rerank` was asked of a classifier with more than one label.
    #[error("{dir}: rerank needs a classifier with one label (a cross-encoder); this one has {labels}")]
    NotACrossEncoder {
        /// The model directory.
        dir: PathBuf,
        /// Its labels.
        labels: usize,
    },
    /// A training job (`sesame::train`) failed, as one line naming the file, flag or field.
    #[cfg(feature = "train")]
    #[error("{0}")]
    Train(String),
    /// The build has no backend (`default_device`): enable one of the features flex, ndarray,
    /// wgpu, tch, cuda, or give `PipelineOptions::device`.
    #[error("no backend compiled in: enable a feature of sesame (flex, ndarray, wgpu, tch, cuda) or give PipelineOptions::device")]
    NoBackend,
    /// A pipeline was called for another task than its own.
    #[error("this pipeline is for {task}, not {called}")]
    WrongTask {
        /// The pipeline's task.
        task: &'static str,
        /// The method called.
        called: &'static str,
    },
}

/// A family the facade runs: a [`Family`], and with the feature `train` one whose
/// pre-training is in too ([`sesame_train::pretraining::Pretrain`], its crate's `train`
/// feature). Every family of the facade's list is one.
#[cfg(feature = "train")]
pub trait Available: sesame_train::pretraining::Pretrain {}
#[cfg(feature = "train")]
impl<F: sesame_train::pretraining::Pretrain> Available for F {}
/// A family the facade runs: a [`Family`], and with the feature `train` one whose
/// pre-training is in too (`sesame_train::pretraining::Pretrain`, its crate's `train`
/// feature). Every family of the facade's list is one.
#[cfg(not(feature = "train"))]
pub trait Available: Family {}
#[cfg(not(feature = "train"))]
impl<F: Family> Available for F {}

/// Does something with a family: the facade's loaders and training jobs, run on the family of
/// a checkpoint ([`Checkpoint::with_family`]) or of a name. An implementation may ask less of
/// `F` than [`Available`] (`fn with<F: Family>`).
pub trait WithFamily {
    /// What it gives.
    type Out;
    /// Do it with `F`.
    fn with<F: Available>(self) -> Self::Out;
}

/// How an action picks its family: by a checkpoint's `model_type`, or by the family's name.
#[derive(Clone, Copy)]
pub(crate) enum FamilyKey<'a> {
    /// A `model_type` the family reads.
    ModelType(&'a str),
    /// [`Family::NAME`].
    Name(&'a str),
}

/// Run `action` with the family `key` picks; `None` when no family compiled in is it. One line
/// a family: the order decides a `model_type` two families read (UniLM reads BERT checkpoints;
/// `bert` is BERT's).
#[allow(unused_variables)] // built without any family, no line reads `key`
pub(crate) fn with_family<A: WithFamily>(key: FamilyKey, action: A) -> Option<A::Out> {
    let step = Step::Pending(action);
    #[cfg(feature = "bert")]
    let step = step.then::<sesame_bert::Bert>(key);
    #[cfg(feature = "roberta")]
    let step = step.then::<sesame_roberta::Roberta>(key);
    #[cfg(feature = "albert")]
    let step = step.then::<sesame_albert::Albert>(key);
    #[cfg(feature = "electra")]
    let step = step.then::<sesame_electra::Electra>(key);
    #[cfg(feature = "unilm")]
    let step = step.then::<sesame_unilm::Unilm>(key);
    #[cfg(feature = "bart")]
    let step = step.then::<sesame_bart::Bart>(key);
    #[cfg(feature = "xlnet")]
    let step = step.then::<sesame_xlnet::Xlnet>(key);
    match step {
        Step::Done(out) => Some(out),
        Step::Pending(_) => None,
    }
}

/// An action not yet run, or what it gave.
enum Step<A: WithFamily> {
    Pending(A),
    Done(A::Out),
}

impl<A: WithFamily> Step<A> {
    /// Run a pending action with `F` when `key` picks `F`.
    #[allow(dead_code)] // unused when no family is compiled in
    fn then<F: Available>(self, key: FamilyKey) -> Self {
        let picked = match key {
            FamilyKey::ModelType(model_type) => F::MODEL_TYPES.contains(&model_type),
            FamilyKey::Name(name) => F::NAME == name,
        };
        match self {
            Step::Pending(action) if picked => Step::Done(action.with::<F>()),
            step => step,
        }
    }
}

/// Run `action` with the family called `name` ([`Family::NAME`]: `bert`); an error names the
/// families compiled in.
pub fn with_family_named<A: WithFamily>(name: &str, action: A) -> Result<A::Out, Error> {
    with_family(FamilyKey::Name(name), action).ok_or_else(|| Error::UnknownFamilyName { name: name.to_string(), known: families().join(", ") })
}

/// The names of the families compiled in.
pub fn families() -> Vec<&'static str> {
    struct Name;
    impl WithFamily for Name {
        type Out = &'static str;
        fn with<F: Family>(self) -> &'static str {
            F::NAME
        }
    }
    let mut names = Vec::new();
    for model_type in ["bert", "roberta", "albert", "electra", "unilm", "bart", "xlnet"] {
        if let Some(name) = with_family(FamilyKey::ModelType(model_type), Name) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// A checkpoint found: its directory, its `model_type`, and its `config.json` as read.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// Its directory (a hub id resolved in the local cache).
    pub dir: PathBuf,
    /// Its `config.json`'s `model_type` (`bert` when the file names none, as transformers'
    /// `BertModel` reads it).
    pub model_type: String,
    /// Its `config.json`.
    pub config: serde_json::Value,
}

impl Checkpoint {
    /// Do `action` with the family of this checkpoint: what the facade's loaders and
    /// `sesame::train` do, for a job of your own.
    pub fn with_family<A: WithFamily>(&self, action: A) -> Result<A::Out, Error> {
        on_family(&self.dir, &self.model_type, action)
    }
}

/// The checkpoint `model` names (a path, or a hub id in the local cache), its `config.json`
/// read and checked.
pub fn locate(model: &Path) -> Result<Checkpoint, Error> {
    let dir = sesame_layers::hub::resolve_path(model)?;
    let path = dir.join("config.json");
    let json: serde_json::Value = sesame_layers::config::read_json_config(&path)?;
    if !json.is_object() {
        return Err(sesame_layers::ConfigError::Parse { path, reason: "not a JSON object".into() }.into());
    }
    let model_type = match json.get("model_type") {
        None => "bert".to_string(),
        Some(serde_json::Value::String(kind)) => kind.clone(),
        Some(other) => return Err(sesame_layers::ConfigError::Parse { path, reason: format!("field `model_type` must be a string, found {other}") }.into()),
    };
    Ok(Checkpoint { dir, model_type, config: json })
}

/// Run `action` on the family of the checkpoint in `dir`, whose type is `model_type`.
pub(crate) fn on_family<A: WithFamily>(dir: &Path, model_type: &str, action: A) -> Result<A::Out, Error> {
    with_family(FamilyKey::ModelType(model_type), action).ok_or_else(|| Error::UnknownFamily { path: dir.join("config.json"), model_type: model_type.to_string(), known: families().join(", ") })
}

/// Which of family `F`'s generators runs the checkpoint in `dir` whose `config.json` is
/// `config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeneratorKind {
    /// Its left-to-right model (`F::ForCausalLM`).
    Causal,
    /// Its encoder-decoder (`F::ForConditionalGeneration`).
    Seq2Seq,
}

/// Family `F`'s generator for the checkpoint in `dir` whose `config.json` is `config`: its
/// left-to-right model when `architectures` names one (`…ForCausalLM`, `…LMHeadModel`) or the
/// family has no encoder-decoder, else its encoder-decoder. An encoder family's left-to-right
/// model generates only from a checkpoint saved as a decoder (`is_decoder`, as transformers'
/// `BertLMHeadModel` warns): refused otherwise, as a family without either is.
pub fn generator_kind<F: Family>(dir: &Path, config: &serde_json::Value) -> Result<GeneratorKind, Error> {
    let class = config["architectures"][0].as_str().unwrap_or_default();
    let seq2seq = supports::<F::ForConditionalGeneration>();
    if seq2seq && !(class.ends_with("ForCausalLM") || class.ends_with("LMHeadModel")) {
        return Ok(GeneratorKind::Seq2Seq);
    }
    if !supports::<F::ForCausalLM>() {
        return Err(Error::Unsupported { family: F::NAME, what: "text generator", has: jobs::<F>() });
    }
    let is_decoder = config.get("is_decoder") == Some(&serde_json::Value::Bool(true));
    if supports::<F::Encoder>() && !is_decoder {
        return Err(Error::Generator(format!(
            "{}: not a left-to-right model (config.json's is_decoder is not true); generation runs decoders ({}) and encoder-decoders",
            dir.display(),
            <F::ForCausalLM as PretrainedModel>::architecture()
        )));
    }
    Ok(GeneratorKind::Causal)
}

/// The jobs family `F` has, for messages.
pub(crate) fn jobs<F: Family>() -> String {
    let has = [
        ("embed, fill-mask", supports::<F::Encoder>()),
        ("classify, rerank", supports::<F::ForSequenceClassification>()),
        ("tag", supports::<F::ForTokenClassification>()),
        ("answer", supports::<F::ForQuestionAnswering>()),
        ("generate", supports::<F::ForConditionalGeneration>() || supports::<F::ForCausalLM>()),
    ];
    has.iter().filter(|(_, yes)| *yes).map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
}

/// Load `M` from `dir` onto `device` (int8 when asked), refusing a checkpoint that lacks `M`'s
/// head: `head` names it, `hint` says how to get one. A fine-tuning head is refused too when
/// `architectures` names another task's ([`check_architecture`]); a masked-LM head is read from any
/// checkpoint that has one (`…ForPreTraining` included).
pub(crate) fn load_head<M: PretrainedModel>(dir: &Path, device: &Device, int8: bool, (head, hint): (&'static str, &'static str)) -> Result<Pretrained<M, M::Config>, Error> {
    let loaded = load::<M>(dir, device, int8)?;
    if !loaded.report.initialized.is_empty() {
        return Err(Error::NoHead { dir: dir.to_path_buf(), head, missing: loaded.report.initialized.join(", "), hint });
    }
    Ok(loaded)
}

/// `M` from `dir` onto `device`, its linear layers quantised when `int8`.
pub(crate) fn load<M: PretrainedModel>(dir: &Path, device: &Device, int8: bool) -> Result<Pretrained<M, M::Config>, Error> {
    let mut loaded = M::from_pretrained(dir, device)?;
    if int8 {
        loaded.model = sesame_layers::int8::quantize(loaded.model);
    }
    Ok(loaded)
}

/// Refuse a checkpoint whose `architectures` names another task's head than `M`'s (heads of
/// different tasks can share tensor names), `head` naming the job's.
pub(crate) fn check_architecture<M: PretrainedModel>(dir: &Path, (head, _): (&'static str, &'static str)) -> Result<(), Error> {
    Ok(sesame_layers::config::check_architecture(dir, &M::architecture(), head)?)
}

/// [`load_head`] of a fine-tuning head, after [`check_architecture`].
fn fine_tuned<M: PretrainedModel>(dir: &Path, device: &Device, int8: bool, head: (&'static str, &'static str)) -> Result<Pretrained<M, M::Config>, Error> {
    check_architecture::<M>(dir, head)?;
    load_head(dir, device, int8, head)
}

/// The head names and hints of each job, as the CLI gives them.
pub(crate) const CLASSIFIER: (&str, &str) = ("sequence-classification", "fine-tune one with `cargo xtask finetune`");
pub(crate) const TAGGER: (&str, &str) = ("token-classification", "fine-tune one with `cargo xtask finetune --task tag`");
pub(crate) const READER: (&str, &str) = ("question-answering", "fine-tune one with `cargo xtask finetune --task qa`");
pub(crate) const MASKED_LM: (&str, &str) = ("masked-LM", "fill-mask needs a checkpoint trained with one");

/// An Auto class's model, boxed behind the trait the class runs it through: what loading it
/// takes from family `F`, refused where `F` has no such model.
trait AutoClass: Sized {
    /// What the family lacks when it has no such model, for the message.
    const WHAT: &'static str;
    /// Load the family's type for the class.
    fn load<F: Family>(load: AutoLoad<'_>) -> Result<Self, Error>;
}

/// Where an Auto class's model is loaded from and onto.
struct AutoLoad<'a> {
    dir: &'a Path,
    device: &'a Device,
}

/// [`auto_load`] on a checkpoint's family.
struct Auto<'a, M> {
    dir: &'a Path,
    device: &'a Device,
    class: std::marker::PhantomData<M>,
}

impl<M: AutoClass> WithFamily for Auto<'_, M> {
    type Out = Result<(&'static str, M), Error>;

    fn with<F: Family>(self) -> Self::Out {
        Ok((F::NAME, M::load::<F>(AutoLoad { dir: self.dir, device: self.device })?))
    }
}

/// Refuse the Auto class `M` where family `F`'s type for it, `T`, is [`Unsupported`] (no Auto
/// class generates: `sesame::pipeline(Task::Generate, …)` does).
fn supported<F: Family, T: 'static, M: AutoClass>() -> Result<(), Error> {
    match supports::<T>() {
        true => Ok(()),
        false => Err(Error::Unsupported { family: F::NAME, what: M::WHAT, has: jobs::<F>() }),
    }
}

/// Load the Auto class `M` of `model` onto `device`.
fn auto_load<M: AutoClass>(model: &Path, device: &Device) -> Result<(&'static str, M), Error> {
    let Checkpoint { dir, model_type, .. } = locate(model)?;
    on_family(&dir, &model_type, Auto::<M> { dir: &dir, device, class: std::marker::PhantomData })?
}

impl AutoClass for Box<dyn EncoderDyn> {
    const WHAT: &'static str = "bidirectional encoder for AutoModel (load its base model from its crate)";
    fn load<F: Family>(load: AutoLoad<'_>) -> Result<Self, Error> {
        supported::<F, F::Encoder, Self>()?;
        Ok(Box::new(F::Encoder::from_pretrained(load.dir, load.device)?))
    }
}

impl AutoClass for Box<dyn MaskedLmDyn> {
    const WHAT: &'static str = "masked LM";
    fn load<F: Family>(load: AutoLoad<'_>) -> Result<Self, Error> {
        supported::<F, F::Encoder, Self>()?;
        Ok(Box::new(load_head::<ForMaskedLM<F::Encoder>>(load.dir, load.device, false, MASKED_LM)?))
    }
}

impl AutoClass for Box<dyn ClassifierDyn> {
    const WHAT: &'static str = "sequence classifier";
    fn load<F: Family>(load: AutoLoad<'_>) -> Result<Self, Error> {
        supported::<F, F::ForSequenceClassification, Self>()?;
        Ok(Box::new(fine_tuned::<F::ForSequenceClassification>(load.dir, load.device, false, CLASSIFIER)?))
    }
}

impl AutoClass for Box<dyn TaggerDyn> {
    const WHAT: &'static str = "token classifier";
    fn load<F: Family>(load: AutoLoad<'_>) -> Result<Self, Error> {
        supported::<F, F::ForTokenClassification, Self>()?;
        Ok(Box::new(fine_tuned::<F::ForTokenClassification>(load.dir, load.device, false, TAGGER)?))
    }
}

impl AutoClass for Box<dyn ReaderDyn> {
    const WHAT: &'static str = "extractive-QA model";
    fn load<F: Family>(load: AutoLoad<'_>) -> Result<Self, Error> {
        supported::<F, F::ForQuestionAnswering, Self>()?;
        Ok(Box::new(fine_tuned::<F::ForQuestionAnswering>(load.dir, load.device, false, READER)?))
    }
}

trait EncoderDyn: Send + Sync {
    fn last_hidden_state(&self, input: EncoderInput) -> Tensor<3>;
}

impl<B: Backbone> EncoderDyn for Pretrained<B, B::Config> {
    fn last_hidden_state(&self, input: EncoderInput) -> Tensor<3> {
        self.model.forward(input, OutputOptions::default()).encoder.last_hidden_state
    }
}

trait MaskedLmDyn: Send + Sync {
    fn logits(&self, input: EncoderInput) -> Tensor<3>;
}

impl<B: Backbone> MaskedLmDyn for Pretrained<ForMaskedLM<B>, B::Config> {
    fn logits(&self, input: EncoderInput) -> Tensor<3> {
        self.model.forward(input, None, OutputOptions::default()).logits
    }
}

trait ClassifierDyn: Send + Sync {
    fn logits(&self, input: EncoderInput) -> Tensor<2>;
    fn labels(&self) -> Vec<String>;
}

impl<M: TaskModel<Output = ClassifierLayers>> ClassifierDyn for Pretrained<M, M::Config> {
    fn logits(&self, input: EncoderInput) -> Tensor<2> {
        self.model.run(input, OutputOptions::logits_only()).logits
    }
    fn labels(&self) -> Vec<String> {
        sesame_pipelines::served::label_names(&self.config)
    }
}

trait TaggerDyn: Send + Sync {
    fn logits(&self, input: EncoderInput) -> Tensor<3>;
    fn labels(&self) -> Vec<String>;
}

impl<M: TaskModel<Output = TokenLogits>> TaggerDyn for Pretrained<M, M::Config> {
    fn logits(&self, input: EncoderInput) -> Tensor<3> {
        self.model.run(input, OutputOptions::logits_only())
    }
    fn labels(&self) -> Vec<String> {
        sesame_pipelines::served::label_names(&self.config)
    }
}

trait ReaderDyn: Send + Sync {
    fn spans(&self, input: EncoderInput) -> (Tensor<2>, Tensor<2>);
}

impl<M: TaskModel<Output = SpanLogits>> ReaderDyn for Pretrained<M, M::Config> {
    fn spans(&self, input: EncoderInput) -> (Tensor<2>, Tensor<2>) {
        let spans = self.model.run(input, OutputOptions::default());
        (spans.start, spans.end)
    }
}

/// An encoder family's base model (HF `AutoModel`): token states of a batch.
pub struct AutoModel {
    family: &'static str,
    model: Box<dyn EncoderDyn>,
}

impl AutoModel {
    /// Load `model` (a directory or a hub id) onto `device`.
    pub fn from_pretrained(model: impl AsRef<Path>, device: &Device) -> Result<Self, Error> {
        let (family, model) = auto_load(model.as_ref(), device)?;
        Ok(Self { family, model })
    }

    /// The last layer's states `[batch, seq, hidden]`.
    pub fn forward(&self, input: EncoderInput) -> Tensor<3> {
        self.model.last_hidden_state(input)
    }

    /// The family it belongs to (`bert`).
    pub fn family(&self) -> &'static str {
        self.family
    }
}

/// A masked LM of any encoder family (HF `AutoModelForMaskedLM`).
pub struct AutoModelForMaskedLM {
    family: &'static str,
    model: Box<dyn MaskedLmDyn>,
}

impl AutoModelForMaskedLM {
    /// Load `model` (a directory or a hub id) onto `device`; refused without a masked-LM head.
    pub fn from_pretrained(model: impl AsRef<Path>, device: &Device) -> Result<Self, Error> {
        let (family, model) = auto_load(model.as_ref(), device)?;
        Ok(Self { family, model })
    }

    /// Vocabulary logits `[batch, seq, vocab]`.
    pub fn forward(&self, input: EncoderInput) -> Tensor<3> {
        self.model.logits(input)
    }

    /// The family it belongs to.
    pub fn family(&self) -> &'static str {
        self.family
    }
}

/// A fine-tuned sequence classifier of any family (HF `AutoModelForSequenceClassification`).
pub struct AutoModelForSequenceClassification {
    family: &'static str,
    model: Box<dyn ClassifierDyn>,
}

impl AutoModelForSequenceClassification {
    /// Load `model` (a directory or a hub id) onto `device`; refused without a classifier head.
    pub fn from_pretrained(model: impl AsRef<Path>, device: &Device) -> Result<Self, Error> {
        let (family, model) = auto_load(model.as_ref(), device)?;
        Ok(Self { family, model })
    }

    /// Logits `[batch, num_labels]`.
    pub fn forward(&self, input: EncoderInput) -> Tensor<2> {
        self.model.logits(input)
    }

    /// The label names, by id (`id2label`).
    pub fn labels(&self) -> Vec<String> {
        self.model.labels()
    }

    /// The family it belongs to.
    pub fn family(&self) -> &'static str {
        self.family
    }
}

/// A fine-tuned token classifier of any family but BART (HF `AutoModelForTokenClassification`).
pub struct AutoModelForTokenClassification {
    family: &'static str,
    model: Box<dyn TaggerDyn>,
}

impl AutoModelForTokenClassification {
    /// Load `model` (a directory or a hub id) onto `device`; refused without a tagger head.
    pub fn from_pretrained(model: impl AsRef<Path>, device: &Device) -> Result<Self, Error> {
        let (family, model) = auto_load(model.as_ref(), device)?;
        Ok(Self { family, model })
    }

    /// Logits `[batch, seq, num_labels]`.
    pub fn forward(&self, input: EncoderInput) -> Tensor<3> {
        self.model.logits(input)
    }

    /// The label names, by id (`id2label`).
    pub fn labels(&self) -> Vec<String> {
        self.model.labels()
    }

    /// The family it belongs to.
    pub fn family(&self) -> &'static str {
        self.family
    }
}

/// A fine-tuned extractive-QA model of any family (HF `AutoModelForQuestionAnswering`; XLNet's
/// `…Simple`).
pub struct AutoModelForQuestionAnswering {
    family: &'static str,
    model: Box<dyn ReaderDyn>,
}

impl AutoModelForQuestionAnswering {
    /// Load `model` (a directory or a hub id) onto `device`; refused without a QA head.
    pub fn from_pretrained(model: impl AsRef<Path>, device: &Device) -> Result<Self, Error> {
        let (family, model) = auto_load(model.as_ref(), device)?;
        Ok(Self { family, model })
    }

    /// Span-start and span-end logits, each `[batch, seq]`.
    pub fn forward(&self, input: EncoderInput) -> (Tensor<2>, Tensor<2>) {
        self.model.spans(input)
    }

    /// The family it belongs to.
    pub fn family(&self) -> &'static str {
        self.family
    }
}
