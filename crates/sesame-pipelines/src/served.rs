//! One model for one task as a value: the model, its tokenizer and its options behind
//! [`ServedModel`], and its kinds ([`Embedder`], [`TextClassifier`], [`Tagger`], [`MaskFiller`],
//! [`Reader`]) over this crate's pipelines; the generators are in [`crate::generator`]. The
//! server (`sesame-serve`) and the facade's `sesame::pipeline` both run these.

use sesame_layers::{Backbone, ForMaskedLM, HfConfig, ClassifierLayers, SpanLogits, TokenLogits, TaskModel};
use sesame_layers::InputError;
use crate::{Answer, AnswerOptions, Classification, EmbedOptions, PipelineError, Prediction, TaggedSpan};
use sesame_text::{EncodedText, TokenWindow, Tokenizer, TokenizerError, Words};

/// The task a server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// Sentence embeddings (`/embed`, `/v1/embeddings`).
    Embedding,
    /// Sequence classification (`/predict`).
    Classifier,
    /// Token classification: entities with their character offsets (`/tag`).
    Tagger,
    /// Masked-token prediction (`/fill-mask`).
    FillMask,
    /// Extractive question answering (`/answer`).
    Answerer,
    /// Text generation (`/generate`, `/generate_stream`).
    Generator,
}

impl Task {
    /// The route that runs the task.
    pub fn route(self) -> &'static str {
        match self {
            Task::Embedding => "/embed",
            Task::Classifier => "/predict",
            Task::Tagger => "/tag",
            Task::FillMask => "/fill-mask",
            Task::Answerer => "/answer",
            Task::Generator => "/generate",
        }
    }

    /// The kind of model, for messages (`an embedding model`).
    pub fn what(self) -> &'static str {
        match self {
            Task::Embedding => "an embedding model",
            Task::Classifier => "a sequence classifier",
            Task::Tagger => "a token classifier",
            Task::FillMask => "a masked LM",
            Task::Answerer => "an extractive-QA model",
            Task::Generator => "a text generator",
        }
    }
}

/// One input: a text, or a sentence pair (query and passage, premise and hypothesis) for a
/// classifier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// One text.
    Text(String),
    /// Two texts read as one sequence (`[CLS] a [SEP] b [SEP]`).
    Pair(String, String),
}

impl Input {
    /// The text, for a task that reads single texts; `None` for a pair.
    fn text(&self) -> Option<&str> {
        match self {
            Input::Text(text) => Some(text),
            Input::Pair(..) => None,
        }
    }
}

/// The texts of `inputs`, or the error a task without pairs gives.
fn texts_only<'a>(inputs: &'a [Input], task: Task) -> Result<Vec<&'a str>, PipelineError> {
    inputs
        .iter()
        .map(|i| i.text().ok_or_else(|| PipelineError::Input(InputError::Invalid { what: "inputs", reason: format!("{} reads single texts, not pairs", task.what()) })))
        .collect()
}

/// The whole of `input` as the model reads it, special tokens included, not truncated: what
/// the server counts an input's tokens by, and, when it fits the model, passes on to
/// [`ServedModel::run_encoded`] so that nothing is tokenized twice.
pub fn encode_whole(tokenizer: &Tokenizer, input: &Input) -> Result<EncodedText, TokenizerError> {
    let mut encoded = match input {
        Input::Text(text) => tokenizer.encode_each(&[text.as_str()], usize::MAX >> 1, false)?,
        Input::Pair(a, b) => tokenizer.encode_pairs_each(&[(a.as_str(), b.as_str())], usize::MAX >> 1, false)?,
    };
    Ok(encoded.remove(0))
}

/// An input tokenized as its model reads it ([`ServedModel::encode`]): what the server counts
/// a request's tokens by and passes on to [`ServedModel::run_encoded`], so that nothing is
/// tokenized twice.
#[derive(Clone, Debug, PartialEq)]
pub enum Encoded {
    /// The whole input, special tokens included, not truncated ([`encode_whole`]): what an
    /// embedder, a classifier and a mask filler read.
    Whole(EncodedText),
    /// The input's windows at the model's length: a tagger's text, a reader's question with
    /// windows of its context.
    Windows(Vec<TokenWindow>),
}

impl Encoded {
    /// Its tokens: the whole input's, or every window's.
    pub fn len(&self) -> usize {
        match self {
            Encoded::Whole(e) => e.len(),
            Encoded::Windows(windows) => windows.iter().map(|w| w.encoded.len()).sum(),
        }
    }

    /// Whether it has no tokens.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole input's encoding, `None` for windows.
    pub fn as_whole(&self) -> Option<&EncodedText> {
        match self {
            Encoded::Whole(e) => Some(e),
            Encoded::Windows(_) => None,
        }
    }

    /// The windows, `None` for a whole input.
    pub fn as_windows(&self) -> Option<&Vec<TokenWindow>> {
        match self {
            Encoded::Windows(w) => Some(w),
            Encoded::Whole(_) => None,
        }
    }

    /// Whether a model reading at most `limit` tokens at once reads it as it is: windows, or a
    /// whole input no longer than `limit` (a longer one is to be refused or truncated).
    pub fn fits(&self, limit: usize) -> bool {
        match self {
            Encoded::Whole(e) => e.len() <= limit,
            Encoded::Windows(_) => true,
        }
    }
}

/// The error of a model given encodings of the other kind.
fn wrong_encoding(task: Task, wanted: &str) -> PipelineError {
    PipelineError::Input(InputError::Invalid { what: "encoded", reason: format!("{} reads {wanted} encodings", task.what()) })
}

/// Each input's encoding: `encoded[i]` where given, else `inputs[i]` encoded by `encode`, all
/// those in one call; `unwrap` takes an encoding's kind, or refuses the other kind.
fn complete<'a, T: Clone + 'a>(
    inputs: &[&Input],
    encoded: &[Option<&'a Encoded>],
    unwrap: impl Fn(&'a Encoded) -> Option<&'a T>,
    what: PipelineError,
    encode: impl FnOnce(&[&Input]) -> Result<Vec<T>, PipelineError>,
) -> Result<Vec<T>, PipelineError> {
    let given: Vec<Option<&T>> = encoded.iter().map(|e| e.map(|e| unwrap(e).ok_or(()))).map(Option::transpose).collect::<Result<_, ()>>().map_err(|()| what)?;
    let missing: Vec<&Input> = inputs.iter().zip(&given).filter(|(_, e)| e.is_none()).map(|(i, _)| *i).collect();
    let mut fresh = if missing.is_empty() { Vec::new().into_iter() } else { encode(&missing)?.into_iter() };
    given.iter().map(|e| e.cloned().or_else(|| fresh.next()).ok_or_else(|| PipelineError::Input(InputError::Invalid { what: "inputs", reason: "the tokenizer gave fewer encodings than inputs".into() }))).collect()
}

/// [`complete`] for a model that reads whole encodings.
fn complete_whole(task: Task, inputs: &[&Input], encoded: &[Option<&Encoded>], encode: impl FnOnce(&[&Input]) -> Result<Vec<EncodedText>, PipelineError>) -> Result<Vec<EncodedText>, PipelineError> {
    complete(inputs, encoded, Encoded::as_whole, wrong_encoding(task, "whole"), encode)
}

/// [`complete`] for a model that reads windows.
fn complete_windows(task: Task, inputs: &[&Input], encoded: &[Option<&Encoded>], encode: impl FnOnce(&[&Input]) -> Result<Vec<Vec<TokenWindow>>, PipelineError>) -> Result<Vec<Vec<TokenWindow>>, PipelineError> {
    complete(inputs, encoded, Encoded::as_windows, wrong_encoding(task, "windowed"), encode)
}

/// `encoded[i]` for each input `i < n` (`None` past its end).
fn given(encoded: &[Option<Encoded>], n: usize) -> Vec<Option<&Encoded>> {
    (0..n).map(|i| encoded.get(i).and_then(Option::as_ref)).collect()
}

/// What the model gives for one text.
#[derive(Clone, Debug)]
pub enum Output {
    /// The pooled vector `[hidden]`, not normalised.
    Embedding(Vec<f32>),
    /// The labels and their scores.
    Classification(Classification),
    /// The entities found.
    Entities(Vec<TaggedSpan>),
    /// Each mask token's candidates, most likely first.
    Masks(Vec<Vec<Prediction>>),
    /// The answer to a question (an [`Input::Pair`] of question and context).
    Answer(Answer),
}

impl Output {
    /// Whether every number in it is finite.
    pub fn is_finite(&self) -> bool {
        match self {
            Output::Embedding(v) => v.iter().all(|x| x.is_finite()),
            Output::Classification(Classification::Value { value }) => value.is_finite(),
            Output::Classification(Classification::Single { scores, .. } | Classification::Multi { scores, .. }) => scores.iter().all(|s| s.score.is_finite()),
            Output::Entities(spans) => spans.iter().all(|s| s.score.is_finite()),
            Output::Masks(masks) => masks.iter().flatten().all(|p| p.score.is_finite()),
            Output::Answer(a) => a.score.is_finite(),
        }
    }
}

/// A loaded model the server runs: its task, its tokenizer, and a batch of texts in, one
/// [`Output`] per text out, in order. Called from one thread at a time; the tokenizer from
/// any.
pub trait ServedModel: Send + Sync {
    /// The task it answers.
    fn task(&self) -> Task;
    /// Its tokenizer (`/tokenize`, and the token counts that cut batches).
    fn tokenizer(&self) -> &Tokenizer;
    /// The most tokens it reads of one text, special tokens included; a longer text is
    /// refused unless the request asks to truncate it (a tagger windows it instead).
    fn max_input_length(&self) -> usize;
    /// The label names of a classifier or tagger, by id (none for the other tasks).
    fn labels(&self) -> Vec<String> {
        Vec::new()
    }
    /// Width of an embedding (0 for the other tasks).
    fn hidden_size(&self) -> usize {
        0
    }
    /// The most candidates per mask a fill-mask request may ask for (0 for the other tasks).
    fn top_k(&self) -> usize {
        0
    }
    /// A generator's search (`None` for the other tasks).
    fn generator(&self) -> Option<&dyn Generator> {
        None
    }
    /// Run `inputs`, each truncated to [`Self::max_input_length`]: one output per input, in
    /// order.
    fn run(&self, inputs: &[Input]) -> Result<Vec<Output>, PipelineError> {
        self.run_encoded(inputs, &vec![None; inputs.len()])
    }
    /// `input` tokenized as this model reads it: whole ([`encode_whole`]; a longer input than
    /// [`Self::max_input_length`] is then refused or truncated), or in windows (a tagger, a
    /// reader).
    fn encode(&self, input: &Input) -> Result<Encoded, PipelineError> {
        Ok(Encoded::Whole(encode_whole(self.tokenizer(), input)?))
    }
    /// [`Self::run`] of inputs the caller has already encoded: `encoded[i]`, where given, is
    /// `inputs[i]`'s [`Self::encode`], a whole one no longer than [`Self::max_input_length`];
    /// the model reads it instead of tokenizing the text again. An input without one is
    /// encoded (and truncated) as `run` encodes it.
    fn run_encoded(&self, inputs: &[Input], encoded: &[Option<Encoded>]) -> Result<Vec<Output>, PipelineError>;
    /// A classifier with FastBERT's exit classifiers: each text stopped at the first layer
    /// whose normalised entropy is below `speed` ([`crate::classify_early`]); refused by the
    /// other tasks and by a classifier without them.
    fn run_early(&self, _texts: &[&str], _speed: f64) -> Result<Vec<crate::EarlyClassification>, PipelineError> {
        Err(PipelineError::NoEarlyExit)
    }
}

/// The label names of a classifier's or tagger's `config`, by id.
pub fn label_names<C: HfConfig>(config: &C) -> Vec<String> {
    let labels = config.labels();
    (0..labels.count(0)).map(|i| labels.name(i)).collect()
}

/// Sentence embeddings of a base model `B`, pooled as `options` says (normalisation is the
/// request's).
pub struct Embedder<B: Backbone> {
    model: B,
    config: B::Config,
    tokenizer: Tokenizer,
    options: EmbedOptions,
    hidden_size: usize,
}

impl<B: Backbone> Embedder<B> {
    /// Run `model` with its `config` and `tokenizer`, pooled, normalised and truncated as
    /// `options` says (the server asks for vectors as they are: each request says whether it
    /// wants unit vectors).
    pub fn new(model: B, config: B::Config, tokenizer: Tokenizer, options: EmbedOptions) -> Self {
        let hidden_size = B::classifier_sizes(&config).hidden_size;
        Self { model, config, tokenizer, options, hidden_size }
    }
}

impl<B: Backbone> ServedModel for Embedder<B> {
    fn task(&self) -> Task {
        Task::Embedding
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn max_input_length(&self) -> usize {
        crate::embed_max_len(&self.config, self.options)
    }

    fn hidden_size(&self) -> usize {
        self.hidden_size
    }

    fn run_encoded(&self, inputs: &[Input], encoded: &[Option<Encoded>]) -> Result<Vec<Output>, PipelineError> {
        texts_only(inputs, self.task())?;
        let max_len = self.max_input_length();
        let encode = |missing: &[&Input]| {
            let texts = missing.iter().filter_map(|i| i.text()).collect::<Vec<&str>>();
            Ok(self.tokenizer.encode_each(&texts, max_len, true)?)
        };
        let encoded = complete_whole(self.task(), &inputs.iter().collect::<Vec<_>>(), &given(encoded, inputs.len()), encode)?;
        let vectors = crate::embed_encoded(&self.model, &self.config, &self.tokenizer, &encoded, self.options)?;
        Ok(vectors.into_iter().map(Output::Embedding).collect())
    }
}

/// A fine-tuned sequence classifier `M`, scored as transformers' text-classification pipeline
/// scores it.
pub struct TextClassifier<M: TaskModel<Output = ClassifierLayers>> {
    model: M,
    config: M::Config,
    tokenizer: Tokenizer,
    batch_size: usize,
}

impl<M: TaskModel<Output = ClassifierLayers>> TextClassifier<M> {
    /// Serve `model`, at most `batch_size` texts a forward pass.
    pub fn new(model: M, config: M::Config, tokenizer: Tokenizer, batch_size: usize) -> Self {
        Self { model, config, tokenizer, batch_size }
    }
}

impl<M: TaskModel<Output = ClassifierLayers>> ServedModel for TextClassifier<M> {
    fn task(&self) -> Task {
        Task::Classifier
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn max_input_length(&self) -> usize {
        self.config.input_limits().max_len
    }

    fn labels(&self) -> Vec<String> {
        label_names(&self.config)
    }

    /// Texts and pairs run apart (a pair is one sequence of two segments), then put back in
    /// the order of `inputs`.
    fn run_encoded(&self, inputs: &[Input], encoded: &[Option<Encoded>]) -> Result<Vec<Output>, PipelineError> {
        let max_len = self.max_input_length();
        let encoded = given(encoded, inputs.len());
        let (texts, pairs): (Vec<usize>, Vec<usize>) = (0..inputs.len()).partition(|&i| matches!(inputs[i], Input::Text(_)));
        let mut out: Vec<Option<Classification>> = vec![None; inputs.len()];
        for group in [texts, pairs] {
            if group.is_empty() {
                continue;
            }
            let encode = |missing: &[&Input]| {
                let texts: Vec<&str> = missing.iter().filter_map(|i| i.text()).collect();
                let pairs: Vec<(&str, &str)> = missing
                    .iter()
                    .filter_map(|i| match i {
                        Input::Pair(a, b) => Some((a.as_str(), b.as_str())),
                        Input::Text(_) => None,
                    })
                    .collect();
                Ok(if pairs.is_empty() { self.tokenizer.encode_each(&texts, max_len, true)? } else { self.tokenizer.encode_pairs_each(&pairs, max_len, true)? })
            };
            let given: Vec<Option<&Encoded>> = group.iter().map(|&i| encoded[i]).collect();
            let encoded = complete_whole(self.task(), &group.iter().map(|&i| &inputs[i]).collect::<Vec<_>>(), &given, encode)?;
            let classes = crate::classify_encoded(&self.model, &self.config, &self.tokenizer, &encoded, self.batch_size)?;
            group.iter().zip(classes).for_each(|(&at, c)| out[at] = Some(c));
        }
        Ok(out.into_iter().flatten().map(Output::Classification).collect())
    }

    fn run_early(&self, texts: &[&str], speed: f64) -> Result<Vec<crate::EarlyClassification>, PipelineError> {
        crate::classify_early(&self.model, &self.config, &self.tokenizer, texts, self.batch_size, speed)
    }
}

/// A fine-tuned token classifier `M`, its tags grouped into entities as transformers'
/// token-classification pipeline with `aggregation_strategy="first"` groups them; a text
/// longer than the model reads is windowed.
pub struct Tagger<M: TaskModel<Output = TokenLogits>> {
    model: M,
    config: M::Config,
    tokenizer: Tokenizer,
    batch_size: usize,
    stride: usize,
}

impl<M: TaskModel<Output = TokenLogits>> Tagger<M> {
    /// Serve `model`, at most `batch_size` windows a forward pass, consecutive windows sharing
    /// `stride` tokens.
    pub fn new(model: M, config: M::Config, tokenizer: Tokenizer, batch_size: usize, stride: usize) -> Self {
        Self { model, config, tokenizer, batch_size, stride }
    }

    /// The windows of a text at the model's length.
    fn windows(&self, input: &Input) -> Result<Vec<TokenWindow>, PipelineError> {
        let text = texts_only(std::slice::from_ref(input), Task::Tagger)?[0];
        Ok(self.tokenizer.encode_windows(Words::Text(text), self.config.input_limits().max_len, self.stride)?)
    }
}

impl<M: TaskModel<Output = TokenLogits>> ServedModel for Tagger<M> {
    fn task(&self) -> Task {
        Task::Tagger
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn max_input_length(&self) -> usize {
        self.config.input_limits().max_len
    }

    fn labels(&self) -> Vec<String> {
        label_names(&self.config)
    }

    /// The text's windows ([`Tokenizer::encode_windows`]).
    fn encode(&self, input: &Input) -> Result<Encoded, PipelineError> {
        Ok(Encoded::Windows(self.windows(input)?))
    }

    fn run_encoded(&self, inputs: &[Input], encoded: &[Option<Encoded>]) -> Result<Vec<Output>, PipelineError> {
        let texts = texts_only(inputs, self.task())?;
        let encode = |missing: &[&Input]| missing.iter().map(|i| self.windows(i)).collect();
        let windows = complete_windows(self.task(), &inputs.iter().collect::<Vec<_>>(), &given(encoded, inputs.len()), encode)?;
        let out = crate::tag_windows(&self.model, &self.config, &self.tokenizer, &texts, &windows, self.batch_size)?;
        Ok(out.into_iter().map(Output::Entities).collect())
    }
}

/// A masked LM `ForMaskedLM<B>`: the `top_k` most likely tokens at each mask token.
pub struct MaskFiller<B: Backbone> {
    model: ForMaskedLM<B>,
    config: B::Config,
    tokenizer: Tokenizer,
    batch_size: usize,
    top_k: usize,
}

impl<B: Backbone> MaskFiller<B> {
    /// Serve `model`, giving at most `top_k` candidates per mask (a request may ask for fewer).
    pub fn new(model: ForMaskedLM<B>, config: B::Config, tokenizer: Tokenizer, batch_size: usize, top_k: usize) -> Self {
        Self { model, config, tokenizer, batch_size, top_k }
    }

}

impl<B: Backbone> ServedModel for MaskFiller<B> {
    fn task(&self) -> Task {
        Task::FillMask
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn max_input_length(&self) -> usize {
        self.config.input_limits().max_len
    }

    fn top_k(&self) -> usize {
        self.top_k
    }

    fn run_encoded(&self, inputs: &[Input], encoded: &[Option<Encoded>]) -> Result<Vec<Output>, PipelineError> {
        let texts = texts_only(inputs, self.task())?;
        let max_len = self.max_input_length();
        let encode = |missing: &[&Input]| {
            let texts = missing.iter().filter_map(|i| i.text()).collect::<Vec<&str>>();
            Ok(self.tokenizer.encode_each(&texts, max_len, false)?)
        };
        let encoded = complete_whole(self.task(), &inputs.iter().collect::<Vec<_>>(), &given(encoded, inputs.len()), encode)?;
        let out = crate::fill_masks_encoded(&self.model, &self.config, &self.tokenizer, &texts, &encoded, self.top_k, self.batch_size)?;
        Ok(out.into_iter().map(Output::Masks).collect())
    }
}

/// A fine-tuned extractive-QA model `M`: each (question, context) pair's answer, picked as
/// `run_qa.py`'s post-processing picks it, over windows of a long context.
pub struct Reader<M: TaskModel<Output = SpanLogits>> {
    model: M,
    config: M::Config,
    tokenizer: Tokenizer,
    batch_size: usize,
    stride: usize,
    options: AnswerOptions,
}

impl<M: TaskModel<Output = SpanLogits>> Reader<M> {
    /// Serve `model`, at most `batch_size` windows a forward pass, consecutive windows sharing
    /// `stride` tokens, answers picked as `options` says.
    pub fn new(model: M, config: M::Config, tokenizer: Tokenizer, batch_size: usize, stride: usize, options: AnswerOptions) -> Self {
        Self { model, config, tokenizer, batch_size, stride, options }
    }

    /// The question with windows of its context at the model's length.
    fn windows(&self, input: &Input) -> Result<Vec<TokenWindow>, PipelineError> {
        let (question, context) = questions(std::slice::from_ref(input))?[0];
        Ok(self.tokenizer.encode_question_windows(question, context, self.config.input_limits().max_len, self.stride)?)
    }
}

impl<M: TaskModel<Output = SpanLogits>> ServedModel for Reader<M> {
    fn task(&self) -> Task {
        Task::Answerer
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn max_input_length(&self) -> usize {
        self.config.input_limits().max_len
    }

    /// The question with windows of the context ([`Tokenizer::encode_question_windows`]).
    fn encode(&self, input: &Input) -> Result<Encoded, PipelineError> {
        Ok(Encoded::Windows(self.windows(input)?))
    }

    fn run_encoded(&self, inputs: &[Input], encoded: &[Option<Encoded>]) -> Result<Vec<Output>, PipelineError> {
        let questions = questions(inputs)?;
        crate::check_questions(&questions)?;
        let encode = |missing: &[&Input]| missing.iter().map(|i| self.windows(i)).collect();
        let windows = complete_windows(self.task(), &inputs.iter().collect::<Vec<_>>(), &given(encoded, inputs.len()), encode)?;
        let out = crate::answer_windows(&self.model, &self.config, &self.tokenizer, &questions, &windows, self.batch_size, &self.options)?;
        Ok(out.into_iter().map(Output::Answer).collect())
    }
}

/// The (question, context) pairs of `inputs`, or the error a single text gives.
fn questions(inputs: &[Input]) -> Result<Vec<(&str, &str)>, PipelineError> {
    inputs
        .iter()
        .map(|i| match i {
            Input::Pair(q, c) => Ok((q.as_str(), c.as_str())),
            Input::Text(_) => Err(PipelineError::Input(InputError::Invalid { what: "inputs", reason: "an extractive-QA model reads a question and a context".into() })),
        })
        .collect()
}

/// What a search wrote after its prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// The generated tokens, up to and with the first end-of-sequence token (no padding).
    pub tokens: Vec<u32>,
    /// With `output_scores` set (greedy search and sampling), each token's log-probability
    /// under the processed scores it was picked from.
    pub logprobs: Option<Vec<f32>>,
}

/// A model that writes text: its settings, how it reads a prompt, and its search.
pub trait Generator: Send + Sync {
    /// The model directory's generation settings, which a request's parameters override.
    fn settings(&self) -> &sesame_generate::GenerationConfig;
    /// The ids `text` starts the search from; refuses an empty or too long prompt.
    fn prompt_ids(&self, text: &str) -> Result<Vec<u32>, PipelineError>;
    /// The most tokens a search from `prompt_len` prompt tokens can write within the model's
    /// positions.
    fn room(&self, prompt_len: usize) -> usize;
    /// Run the search `settings` ask for from `prompt`, giving `streamer` the tokens as they
    /// are final.
    fn generate(&self, prompt: &[u32], settings: &sesame_generate::GenerationConfig, seed: u64, streamer: &mut dyn sesame_generate::TokenStreamer) -> Result<Generation, PipelineError>;
    /// Which requests may run as one search ([`generate_shared`](Self::generate_shared)): those
    /// of one key. `None`: the request runs alone (beam search).
    fn shared_key(&self, prompt: &[u32], settings: &sesame_generate::GenerationConfig) -> Option<usize>;
    /// Run `requests` (of one [`shared_key`](Self::shared_key)) as one batch of the model, each
    /// giving what [`generate`](Self::generate) gives it alone: one result per request (its
    /// settings may be refused), or the model's failure, which fails them all.
    fn generate_shared(&self, requests: &mut [SharedRequest<'_>]) -> Result<Vec<Result<Generation, PipelineError>>, PipelineError>;
}

/// A request of a search shared with others ([`Generator::generate_shared`]).
pub struct SharedRequest<'a> {
    /// The ids the search starts from ([`Generator::prompt_ids`]).
    pub prompt: &'a [u32],
    /// Its settings: greedy search or sampling.
    pub settings: &'a sesame_generate::GenerationConfig,
    /// What sampling draws with.
    pub seed: u64,
    /// Given the request's tokens as they are final; its `stop` ends the request.
    pub streamer: &'a mut dyn sesame_generate::TokenStreamer,
}
