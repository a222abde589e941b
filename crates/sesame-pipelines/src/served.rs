//! One model for one task as a value: the model, its tokenizer and its options behind
//! [`ServedModel`], and its kinds ([`Embedder`], [`TextClassifier`], [`Tagger`], [`MaskFiller`],
//! [`Reader`]) over this crate's pipelines; the generators are in [`crate::generator`]. The
//! server (`sesame-serve`) and the facade's `sesame::pipeline` both run these.

use sesame_layers::{Backbone, ForMaskedLM, HfConfig, ClassifierLayers, SpanLogits, TokenLogits, TaskModel};
use sesame_layers::InputError;
use crate::{Answer, AnswerOptions, Classification, EmbedOptions, PipelineError, Prediction, TaggedSpan};
use sesame_text::{EncodedText, Tokenizer, TokenizerError};

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

    /// Whether a long input is read in overlapping windows rather than refused or truncated.
    pub fn windows(self) -> bool {
        matches!(self, Task::Tagger | Task::Answerer)
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

/// Each input's encoding: `encoded[i]` where given, else `input[i]` encoded by `encode`
/// (truncating), all those in one call.
fn complete(inputs: &[&Input], encoded: &[Option<&EncodedText>], encode: impl FnOnce(&[&Input]) -> Result<Vec<EncodedText>, PipelineError>) -> Result<Vec<EncodedText>, PipelineError> {
    let missing: Vec<&Input> = inputs.iter().zip(encoded).filter(|(_, e)| e.is_none()).map(|(i, _)| *i).collect();
    let mut fresh = if missing.is_empty() { Vec::new().into_iter() } else { encode(&missing)?.into_iter() };
    encoded.iter().map(|e| e.cloned().or_else(|| fresh.next()).ok_or_else(|| PipelineError::Input(InputError::Invalid { what: "inputs", reason: "the tokenizer gave fewer encodings than inputs".into() }))).collect()
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
    fn run(&self, inputs: &[Input]) -> Result<Vec<Output>, PipelineError>;
    /// [`Self::run`] of inputs the caller has already encoded: `encoded[i]`, where given, is
    /// `inputs[i]`'s [`encode_whole`], which fits [`Self::max_input_length`]; the model reads it
    /// instead of tokenizing the text again (an embedder and a classifier do; the other tasks,
    /// which window or look for masks, tokenize as [`Self::run`] does). An input without one is
    /// encoded (and truncated) as `run` encodes it.
    fn run_encoded(&self, inputs: &[Input], encoded: &[Option<EncodedText>]) -> Result<Vec<Output>, PipelineError> {
        let _ = encoded;
        self.run(inputs)
    }
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

    fn run(&self, inputs: &[Input]) -> Result<Vec<Output>, PipelineError> {
        self.run_encoded(inputs, &vec![None; inputs.len()])
    }

    fn run_encoded(&self, inputs: &[Input], encoded: &[Option<EncodedText>]) -> Result<Vec<Output>, PipelineError> {
        texts_only(inputs, self.task())?;
        let max_len = self.max_input_length();
        let encode = |missing: &[&Input]| {
            let texts = missing.iter().filter_map(|i| i.text()).collect::<Vec<&str>>();
            Ok(self.tokenizer.encode_each(&texts, max_len, true)?)
        };
        let given: Vec<Option<&EncodedText>> = (0..inputs.len()).map(|i| encoded.get(i).and_then(Option::as_ref)).collect();
        let encoded = complete(&inputs.iter().collect::<Vec<_>>(), &given, encode)?;
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

    fn run(&self, inputs: &[Input]) -> Result<Vec<Output>, PipelineError> {
        self.run_encoded(inputs, &vec![None; inputs.len()])
    }

    /// Texts and pairs run apart (a pair is one sequence of two segments), then put back in
    /// the order of `inputs`.
    fn run_encoded(&self, inputs: &[Input], encoded: &[Option<EncodedText>]) -> Result<Vec<Output>, PipelineError> {
        let max_len = self.max_input_length();
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
            let given: Vec<Option<&EncodedText>> = group.iter().map(|&i| encoded.get(i).and_then(Option::as_ref)).collect();
            let encoded = complete(&group.iter().map(|&i| &inputs[i]).collect::<Vec<_>>(), &given, encode)?;
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

    fn run(&self, inputs: &[Input]) -> Result<Vec<Output>, PipelineError> {
        let texts = texts_only(inputs, self.task())?;
        let out = crate::tag(&self.model, &self.config, &self.tokenizer, &texts, self.batch_size, self.stride)?;
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

    fn run(&self, inputs: &[Input]) -> Result<Vec<Output>, PipelineError> {
        let texts = texts_only(inputs, self.task())?;
        let out = crate::fill_masks(&self.model, &self.config, &self.tokenizer, &texts, self.top_k, self.batch_size)?;
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

    fn run(&self, inputs: &[Input]) -> Result<Vec<Output>, PipelineError> {
        let questions: Vec<(&str, &str)> = inputs
            .iter()
            .map(|i| match i {
                Input::Pair(q, c) => Ok((q.as_str(), c.as_str())),
                Input::Text(_) => Err(PipelineError::Input(InputError::Invalid { what: "inputs", reason: "an extractive-QA model reads a question and a context".into() })),
            })
            .collect::<Result<_, _>>()?;
        let out = crate::answer(&self.model, &self.config, &self.tokenizer, &questions, self.batch_size, self.stride, &self.options)?;
        Ok(out.into_iter().map(Output::Answer).collect())
    }
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
}
