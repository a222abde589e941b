//! `pipeline(task, model, options)`: a model of any family for one job, with its tokenizer and
//! options, as a value with one method per call (transformers' `pipeline`). The model is the
//! family's type for the job ([`sesame_layers::Family`]); what runs is `sesame-pipelines`',
//! the same code as `cargo xtask` and `cargo xtask serve`.

use std::path::Path;
use std::sync::Arc;

use burn::tensor::Device;
use sesame_layers::{supports, Family, ForMaskedLM, LoadReport, Backbone, HfConfig as _, PretrainedModel, ClassifierLayers, SpanLogits, TokenLogits, TaskModel};
use sesame_generate::GenerationConfig;
use sesame_layers::generative::{LanguageModel, Source};
use sesame_pipelines::generator::{CausalGenerator, Seq2SeqGenerator};
use sesame_pipelines::served::{Embedder, Input, MaskFiller, Output, Reader, ServedModel, Tagger, TextClassifier};
use sesame_pipelines::{Answer, AnswerOptions, Classification, EarlyClassification, EmbedOptions, Prediction, TaggedSpan};
use sesame_text::Tokenizer;

use crate::auto::{check_architecture, jobs, load, load_head, locate, generator_kind, Checkpoint, GeneratorKind, on_family, Error, WithFamily, CLASSIFIER, MASKED_LM, READER, TAGGER};

/// A job a pipeline does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// Sentence embeddings (sentence-transformers' `encode`): [`Pipeline::embed`].
    Embed,
    /// The likeliest tokens at each mask token: [`Pipeline::fill_mask`].
    FillMask,
    /// Labels and scores of texts or text pairs: [`Pipeline::classify`], [`Pipeline::classify_pairs`].
    Classify,
    /// Passages scored against a query by a cross-encoder (a classifier with one label):
    /// [`Pipeline::rerank`].
    Rerank,
    /// Entities with their character offsets: [`Pipeline::tag`].
    Tag,
    /// The answer to a question in a context: [`Pipeline::answer`].
    Answer,
    /// Text written from a prompt (an encoder-decoder's source, or a left-to-right model's
    /// beginning) with the model's generation settings: [`Pipeline::generate`].
    Generate,
}

impl Task {
    /// Its name, as transformers' pipeline names it where it has one.
    pub fn name(self) -> &'static str {
        match self {
            Task::Embed => "feature-extraction",
            Task::FillMask => "fill-mask",
            Task::Classify => "text-classification",
            Task::Rerank => "rerank",
            Task::Tag => "token-classification",
            Task::Answer => "question-answering",
            Task::Generate => "text-generation",
        }
    }
}

/// How a pipeline loads and runs its model.
#[derive(Clone, Debug)]
pub struct PipelineOptions {
    /// Where the model runs [default: [`crate::default_device`]].
    pub device: Option<Device>,
    /// Multiply the linear layers in int8 (weights per channel, activations per token).
    pub int8: bool,
    /// At most this many texts (or windows) a forward pass.
    pub batch_size: usize,
    /// Embed: pooling, layer, normalisation and truncation; `max_tokens` `None` reads
    /// `sentence_bert_config.json`'s `max_seq_length` when the directory has one, as
    /// sentence-transformers does (`batch_size` above is the one used).
    pub embed: EmbedOptions,
    /// Fill-mask: candidates per mask.
    pub top_k: usize,
    /// Tag and answer: tokens shared by consecutive windows of a long text [default: a
    /// quarter of the window for tag, a third for answer, as `cargo xtask tag` and `answer`].
    pub stride: Option<usize>,
    /// Answer: how the answer is picked.
    pub answer: AnswerOptions,
}

impl Default for PipelineOptions {
    /// The CLI's defaults: 32 texts a batch, mean pooling, 5 candidates per mask.
    fn default() -> Self {
        Self { device: None, int8: false, batch_size: 32, embed: EmbedOptions::default(), top_k: 5, stride: None, answer: AnswerOptions::default() }
    }
}

/// A model of any family for one job, its tokenizer and its options.
#[derive(Clone)]
pub struct Pipeline {
    task: Task,
    family: &'static str,
    model: Arc<dyn ServedModel>,
    report: LoadReport,
    stride: Option<usize>,
}

/// What a loader built: the model behind its task, what loading did, the windows' stride.
struct Built {
    model: Arc<dyn ServedModel>,
    report: LoadReport,
    stride: Option<usize>,
}

impl Built {
    fn new(model: impl ServedModel + 'static, report: LoadReport) -> Self {
        Self { model: Arc::new(model), report, stride: None }
    }
}

/// A pipeline for `task` on `model` (a directory, or a hub id `org/name[@revision]` in the local
/// HuggingFace cache): the family from its `config.json`, the family's type for the job, its
/// tokenizer. Refused, naming the file or the family, when the checkpoint has no head for the
/// job, names another task's head, or its family has no model for the job.
pub fn pipeline(task: Task, model: impl AsRef<Path>, options: PipelineOptions) -> Result<Pipeline, Error> {
    let device = device_of(&options)?;
    let Checkpoint { dir, model_type, config } = locate(model.as_ref())?;
    let (family, built) = on_family(&dir, &model_type, Load { task, dir: &dir, config: &config, device: &device, options: &options })??;
    Ok(Pipeline { task, family, model: built.model, report: built.report, stride: built.stride })
}

/// [`pipeline`] as family `F`, whatever the facade's list of families holds: a family crate of
/// your own (its `impl Family`) runs through the same loaders. Refused when `config.json`'s
/// `model_type` is not one of `F::MODEL_TYPES`.
pub fn pipeline_for<F: Family>(task: Task, model: impl AsRef<Path>, options: PipelineOptions) -> Result<Pipeline, Error> {
    let device = device_of(&options)?;
    let Checkpoint { dir, model_type, config } = locate(model.as_ref())?;
    if !F::MODEL_TYPES.contains(&model_type.as_str()) {
        return Err(Error::WrongFamily { path: dir.join("config.json"), model_type, family: F::NAME, known: F::MODEL_TYPES.join(", ") });
    }
    let (family, built) = Load { task, dir: &dir, config: &config, device: &device, options: &options }.load::<F>()?;
    Ok(Pipeline { task, family, model: built.model, report: built.report, stride: built.stride })
}

/// The options' device, else the first backend compiled in.
fn device_of(options: &PipelineOptions) -> Result<Device, Error> {
    match &options.device {
        Some(device) => Ok(device.clone()),
        None => crate::default_device().ok_or(Error::NoBackend),
    }
}

/// Loads a pipeline's model: the family's type for the task.
struct Load<'a> {
    task: Task,
    dir: &'a Path,
    /// Its `config.json`, as `locate` read it.
    config: &'a serde_json::Value,
    device: &'a Device,
    options: &'a PipelineOptions,
}

impl WithFamily for Load<'_> {
    type Out = Result<(&'static str, Built), Error>;

    fn with<F: Family>(self) -> Self::Out {
        self.load::<F>()
    }
}

impl Load<'_> {
    /// The pipeline's model as family `F`'s type for the task.
    fn load<F: Family>(self) -> Result<(&'static str, Built), Error> {
        let loader = Loader { family: F::NAME, jobs: jobs::<F>, load: self };
        let model = match loader.load.task {
            Task::Embed | Task::FillMask if supports::<F::Encoder>() => loader.encoder::<F::Encoder>(),
            Task::Classify | Task::Rerank if supports::<F::ForSequenceClassification>() => loader.sequence_classifier::<F::ForSequenceClassification>(),
            Task::Tag if supports::<F::ForTokenClassification>() => loader.token_classifier::<F::ForTokenClassification>(),
            Task::Answer if supports::<F::ForQuestionAnswering>() => loader.question_answering::<F::ForQuestionAnswering>(),
            Task::Generate => match generator_kind::<F>(loader.load.dir, loader.load.config)? {
                GeneratorKind::Seq2Seq => loader.seq2seq::<F::ForConditionalGeneration>(),
                GeneratorKind::Causal => loader.causal::<F::ForCausalLM>(),
            },
            _ => loader.unsupported(),
        }?;
        Ok((F::NAME, model))
    }
}

struct Loader<'a> {
    family: &'static str,
    jobs: fn() -> String,
    load: Load<'a>,
}

impl Loader<'_> {
    fn tokenizer(&self) -> Result<Tokenizer, Error> {
        Ok(Tokenizer::from_dir(self.load.dir)?)
    }

    /// `M` loaded for generation (int8 when asked), refused without a trained LM head (BART's
    /// `final_logits_bias` may be absent: it is zeros).
    fn generator_model<M: PretrainedModel>(&self) -> Result<sesame_layers::Pretrained<M, M::Config>, Error> {
        let loaded = load::<M>(self.load.dir, self.load.device, self.load.options.int8)?;
        sesame_pipelines::generator::check_lm_head(self.load.dir, &loaded.report).map_err(Error::Generator)?;
        Ok(loaded)
    }

    /// The generation settings of the checkpoint (generation_config.json, else config.json) for
    /// a model of `max_positions` and `vocab_size`, checked.
    fn generation_settings(&self, (max_positions, vocab_size): (usize, usize)) -> Result<GenerationConfig, Error> {
        let dir = self.load.dir;
        let in_file = |e: sesame_generate::ProcessorError| Error::Generator(format!("{}: {e} (generation_config.json, else config.json)", dir.display()));
        let mut settings = GenerationConfig::from_dir(dir).map_err(|e| Error::Generator(e.to_string()))?;
        settings.validate_ids(vocab_size).map_err(in_file)?;
        settings.model_max_positions = Some(max_positions);
        settings.validate().map_err(in_file)?;
        Ok(settings)
    }
}

/// The loaders of each job, with `M` (or `B`) the family's type for it.
impl Loader<'_> {
    fn encoder<B: Backbone>(self) -> Result<Built, Error> {
        let Load { task, dir, device, options, .. } = self.load;
        let tokenizer = self.tokenizer()?;
        if task == Task::FillMask {
            let loaded = load_head::<ForMaskedLM<B>>(dir, device, options.int8, MASKED_LM)?;
            return Ok(Built::new(MaskFiller::new(loaded.model, loaded.config, tokenizer, options.batch_size, options.top_k), loaded.report));
        }
        let loaded = load::<B>(dir, device, options.int8)?;
        let max_tokens = match options.embed.max_tokens {
            Some(n) => Some(n),
            None => sesame_pipelines::sentence_transformers_max_seq_length(dir)?,
        };
        let embed = EmbedOptions { batch_size: options.batch_size, max_tokens, ..options.embed };
        Ok(Built::new(Embedder::new(loaded.model, loaded.config, tokenizer, embed), loaded.report))
    }

    fn sequence_classifier<M: TaskModel<Output = ClassifierLayers>>(self) -> Result<Built, Error> {
        check_architecture::<M>(self.load.dir, CLASSIFIER)?;
        let tokenizer = self.tokenizer()?;
        let Load { task, dir, device, options, .. } = self.load;
        let loaded = load_head::<M>(dir, device, options.int8, CLASSIFIER)?;
        let labels = sesame_pipelines::served::label_names(&loaded.config).len();
        if task == Task::Rerank && labels != 1 {
            return Err(Error::NotACrossEncoder { dir: dir.to_path_buf(), labels });
        }
        Ok(Built::new(TextClassifier::new(loaded.model, loaded.config, tokenizer, options.batch_size), loaded.report))
    }

    fn token_classifier<M: TaskModel<Output = TokenLogits>>(self) -> Result<Built, Error> {
        check_architecture::<M>(self.load.dir, TAGGER)?;
        let tokenizer = self.tokenizer()?;
        let Load { dir, device, options, .. } = self.load;
        let loaded = load_head::<M>(dir, device, options.int8, TAGGER)?;
        let stride = options.stride.unwrap_or(loaded.config.input_limits().max_len / 4);
        Ok(Built { stride: Some(stride), ..Built::new(Tagger::new(loaded.model, loaded.config, tokenizer, options.batch_size, stride), loaded.report) })
    }

    fn question_answering<M: TaskModel<Output = SpanLogits>>(self) -> Result<Built, Error> {
        check_architecture::<M>(self.load.dir, READER)?;
        let tokenizer = self.tokenizer()?;
        let Load { dir, device, options, .. } = self.load;
        let loaded = load_head::<M>(dir, device, options.int8, READER)?;
        let stride = options.stride.unwrap_or(loaded.config.input_limits().max_len / 3);
        Ok(Built { stride: Some(stride), ..Built::new(Reader::new(loaded.model, loaded.config, tokenizer, options.batch_size, stride, options.answer), loaded.report) })
    }

    fn seq2seq<M: LanguageModel<Source = Source>>(self) -> Result<Built, Error> {
        let tokenizer = self.tokenizer()?;
        let loaded = self.generator_model::<M>()?;
        let limits = M::limits(&loaded.config);
        let settings = self.generation_settings((limits.max_len, limits.vocab_size))?;
        let report = loaded.report;
        let dir = self.load.dir.display();
        let generator = Seq2SeqGenerator::new(loaded.model, loaded.config, tokenizer, settings)
            .ok_or_else(|| Error::Generator(format!("{dir}: no decoder start (neither decoder_start_token_id nor bos_token_id is set)")))?;
        Ok(Built::new(generator, report))
    }

    fn causal<M: LanguageModel<Source = ()>>(self) -> Result<Built, Error> {
        let tokenizer = self.tokenizer()?;
        let loaded = self.generator_model::<M>()?;
        let limits = M::limits(&loaded.config);
        let settings = self.generation_settings((limits.max_len, limits.vocab_size))?;
        Ok(Built::new(CausalGenerator::new(loaded.model, loaded.config, tokenizer, settings), loaded.report))
    }

    fn unsupported(self) -> Result<Built, Error> {
        let what = match self.load.task {
            Task::Embed => "bidirectional encoder for embeddings",
            Task::FillMask => "masked LM",
            Task::Classify | Task::Rerank => "sequence classifier",
            Task::Tag => "token classifier",
            Task::Answer => "extractive-QA model",
            Task::Generate => "text generator",
        };
        Err(Error::Unsupported { family: self.family, what, has: (self.jobs)() })
    }
}

impl Pipeline {
    /// The job it does.
    pub fn task(&self) -> Task {
        self.task
    }

    /// The family of its model (`bert`).
    pub fn family(&self) -> &'static str {
        self.family
    }

    /// The model behind it, as the server runs it (`sesame_serve::serve`).
    pub fn served(&self) -> Arc<dyn ServedModel> {
        self.model.clone()
    }

    /// What loading did: tensors initialised (none for a task head: it is refused), and
    /// tensors of the files the model does not use.
    pub fn load_report(&self) -> &LoadReport {
        &self.report
    }

    /// Tag and answer: the tokens consecutive windows of a long text share.
    pub fn stride(&self) -> Option<usize> {
        self.stride
    }

    fn run(&self, called: &'static str, tasks: &[Task], inputs: Vec<Input>) -> Result<Vec<Output>, Error> {
        if !tasks.contains(&self.task) {
            return Err(Error::WrongTask { task: self.task.name(), called });
        }
        Ok(self.model.run(&inputs)?)
    }

    /// One vector per text `[hidden]`, normalised when the options asked.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        let outputs = self.run("embed", &[Task::Embed], texts_of(texts))?;
        Ok(outputs.into_iter().filter_map(|o| if let Output::Embedding(v) = o { Some(v) } else { None }).collect())
    }

    /// Per text, each mask token's candidates, most likely first.
    pub fn fill_mask(&self, texts: &[&str]) -> Result<Vec<Vec<Vec<Prediction>>>, Error> {
        let outputs = self.run("fill_mask", &[Task::FillMask], texts_of(texts))?;
        Ok(outputs.into_iter().filter_map(|o| if let Output::Masks(m) = o { Some(m) } else { None }).collect())
    }

    /// The labels and scores of each text.
    pub fn classify(&self, texts: &[&str]) -> Result<Vec<Classification>, Error> {
        self.classifications("classify", texts_of(texts))
    }

    /// The labels and scores of each pair, read as one sequence of two segments.
    pub fn classify_pairs(&self, pairs: &[(&str, &str)]) -> Result<Vec<Classification>, Error> {
        self.classifications("classify_pairs", pairs.iter().map(|(a, b)| Input::Pair(a.to_string(), b.to_string())).collect())
    }

    /// The labels and scores of each text with FastBERT's early exit: each text stops at the
    /// first layer whose normalised entropy is below `speed` (in [0, 1]; 0 runs every layer).
    /// Refused for a classifier without exit classifiers (`cargo xtask finetune --early-exit`
    /// trains them).
    pub fn classify_early(&self, texts: &[&str], speed: f64) -> Result<Vec<EarlyClassification>, Error> {
        if self.task != Task::Classify {
            return Err(Error::WrongTask { task: self.task.name(), called: "classify_early" });
        }
        Ok(self.model.run_early(texts, speed)?)
    }

    fn classifications(&self, called: &'static str, inputs: Vec<Input>) -> Result<Vec<Classification>, Error> {
        let outputs = self.run(called, &[Task::Classify, Task::Rerank], inputs)?;
        Ok(outputs.into_iter().filter_map(|o| if let Output::Classification(c) = o { Some(c) } else { None }).collect())
    }

    /// Each passage's relevance to `query`, in the passages' order: the cross-encoder's score
    /// of the pair (query, passage), as `cargo xtask serve`'s `/rerank` scores it.
    pub fn rerank(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, Error> {
        let inputs = passages.iter().map(|p| Input::Pair(query.to_string(), p.to_string())).collect();
        let outputs = self.run("rerank", &[Task::Rerank], inputs)?;
        Ok(outputs
            .into_iter()
            .filter_map(|o| match o {
                Output::Classification(Classification::Single { score, .. } | Classification::Value { value: score }) => Some(score),
                Output::Classification(Classification::Multi { scores, .. }) => Some(scores[0].score),
                _ => None,
            })
            .collect())
    }

    /// The entities of each text, with their character offsets.
    pub fn tag(&self, texts: &[&str]) -> Result<Vec<Vec<TaggedSpan>>, Error> {
        let outputs = self.run("tag", &[Task::Tag], texts_of(texts))?;
        Ok(outputs.into_iter().filter_map(|o| if let Output::Entities(e) = o { Some(e) } else { None }).collect())
    }

    /// The text written from each prompt with the model's generation settings
    /// (`generation_config.json`, else `config.json`: greedy unless they say otherwise), up to
    /// and without the end-of-sequence token, special tokens left out.
    pub fn generate(&self, prompts: &[&str]) -> Result<Vec<String>, Error> {
        let generator = match (self.task, self.model.generator()) {
            (Task::Generate, Some(generator)) => generator,
            _ => return Err(Error::WrongTask { task: self.task.name(), called: "generate" }),
        };
        prompts
            .iter()
            .map(|prompt| {
                let ids = generator.prompt_ids(prompt)?;
                let out = generator.generate(&ids, generator.settings(), 0, &mut ())?;
                Ok(self.model.tokenizer().decode(&out.tokens)?)
            })
            .collect()
    }

    /// The answer to each (question, context) pair.
    pub fn answer(&self, questions: &[(&str, &str)]) -> Result<Vec<Answer>, Error> {
        let inputs = questions.iter().map(|(q, c)| Input::Pair(q.to_string(), c.to_string())).collect();
        let outputs = self.run("answer", &[Task::Answer], inputs)?;
        Ok(outputs.into_iter().filter_map(|o| if let Output::Answer(a) = o { Some(a) } else { None }).collect())
    }
}

fn texts_of(texts: &[&str]) -> Vec<Input> {
    texts.iter().map(|t| Input::Text(t.to_string())).collect()
}
