//! Generation behind the server: [`Seq2SeqGenerator`] (an encoder-decoder such as BART) and
//! [`CausalGenerator`] (a left-to-right model), each behind [`Generator`]. A request runs alone
//! on the model's thread; its tokens go to the client as soon as they are final, and the search
//! ends as soon as the client has gone or a stop sequence was written.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use sesame_generate::decoding::{CausalLM, Seq2SeqLM};
use sesame_generate::{GenerateError, GenerationConfig, Generated, TokenStreamer};
use sesame_layers::InputError;
use sesame_pipelines::generate::{continue_ids, generate_ids, open_prompt};
use sesame_pipelines::PipelineError;
use sesame_text::Tokenizer;
use tokio::sync::mpsc;

use crate::metrics::Metrics;
use crate::model::{ServedModel, Task};
use crate::queue::{panic_reason, RunError};

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
    fn settings(&self) -> &GenerationConfig;
    /// The ids `text` starts the search from; refuses an empty or too long prompt.
    fn prompt_ids(&self, text: &str) -> Result<Vec<u32>, PipelineError>;
    /// The most tokens a search from `prompt_len` prompt tokens can write within the model's
    /// positions.
    fn room(&self, prompt_len: usize) -> usize;
    /// Run the search `settings` ask for from `prompt`, giving `streamer` the tokens as they
    /// are final.
    fn generate(&self, prompt: &[u32], settings: &GenerationConfig, seed: u64, streamer: &mut dyn TokenStreamer) -> Result<Generation, PipelineError>;
}

/// The ids of `text`, or why it cannot be a prompt of a model of `max_len` positions.
fn encode(tokenizer: &Tokenizer, text: &str, max_len: usize) -> Result<Vec<u32>, PipelineError> {
    let encoded = tokenizer.encode_each(&[text], usize::MAX >> 1, false)?;
    let ids: Vec<u32> = encoded[0].input_ids.iter().map(|&t| t as u32).collect();
    match ids.len() {
        0 => Err(PipelineError::EmptyText { what: "inputs", index: 1 }),
        n if n > max_len => Err(PipelineError::TooLong { index: 1, tokens: n, max_len }),
        _ => Ok(ids),
    }
}

/// The first row of `out` after its first `skip` tokens, cut after the first end of sequence,
/// with its log-probabilities when the search kept its scores.
fn generation(out: Generated, skip: usize, settings: &GenerationConfig) -> Generation {
    let eos = settings.eos_token_ids();
    let mut tokens: Vec<u32> = out.sequences.into_iter().next().unwrap_or_default().into_iter().skip(skip).collect();
    if let Some(end) = tokens.iter().position(|t| eos.contains(t)) {
        tokens.truncate(end + 1);
    }
    let logprobs = (!out.scores.is_empty()).then(|| {
        tokens
            .iter()
            .zip(&out.scores)
            .map(|(&t, step)| {
                let row = &step[0];
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f32 = row.iter().map(|s| (s - max).exp()).sum();
                row[t as usize] - max - sum.ln()
            })
            .collect()
    });
    Generation { tokens, logprobs }
}

fn search_error(e: GenerateError<InputError>) -> PipelineError {
    match e {
        GenerateError::Settings(e) => PipelineError::Settings(e),
        GenerateError::Model(e) => PipelineError::Input(e),
    }
}

/// An encoder-decoder `M` (BART): the prompt is its source, the search starts from the
/// decoder start token.
pub struct Seq2SeqGenerator<M: Seq2SeqLM> {
    model: M,
    tokenizer: Tokenizer,
    settings: GenerationConfig,
    start: u32,
}

impl<M: Seq2SeqLM> Seq2SeqGenerator<M> {
    /// Serve `model` with `settings` (the model directory's, checked); `None` when they name no
    /// decoder start (`decoder_start_token_id`, else `bos_token_id`).
    pub fn new(model: M, tokenizer: Tokenizer, settings: GenerationConfig) -> Option<Self> {
        let start = settings.decoder_start_token_id.or(settings.bos_token_id)?;
        Some(Self { model, tokenizer, settings, start })
    }
}

impl<M: Seq2SeqLM + Send + Sync + 'static> Generator for Seq2SeqGenerator<M> {
    fn settings(&self) -> &GenerationConfig {
        &self.settings
    }

    fn prompt_ids(&self, text: &str) -> Result<Vec<u32>, PipelineError> {
        encode(&self.tokenizer, text, self.model.max_positions())
    }

    fn room(&self, _prompt_len: usize) -> usize {
        self.model.max_positions().saturating_sub(1)
    }

    fn generate(&self, prompt: &[u32], settings: &GenerationConfig, seed: u64, streamer: &mut dyn TokenStreamer) -> Result<Generation, PipelineError> {
        let out = generate_ids(&self.model, &[prompt.to_vec()], self.start, settings, seed, streamer, &self.model.device()).map_err(search_error)?;
        Ok(generation(out, 1, settings))
    }
}

impl<M: Seq2SeqLM + Send + Sync + 'static> ServedModel for Seq2SeqGenerator<M> {
    fn task(&self) -> Task {
        Task::Generator
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn max_input_length(&self) -> usize {
        self.model.max_positions()
    }

    fn labels(&self) -> Vec<String> {
        Vec::new()
    }

    fn generator(&self) -> Option<&dyn Generator> {
        Some(self)
    }

    fn run(&self, _inputs: &[crate::Input]) -> Result<Vec<crate::Output>, PipelineError> {
        Err(not_batched())
    }
}

/// A left-to-right model `M` (a decoder checkpoint of an encoder family, XLNet): the search
/// continues the prompt after its last text token.
pub struct CausalGenerator<M: CausalLM> {
    model: M,
    config: M::Config,
    tokenizer: Tokenizer,
    settings: GenerationConfig,
}

impl<M: CausalLM> CausalGenerator<M> {
    /// Serve `model` (with its `config`) with `settings`, the model directory's, checked.
    pub fn new(model: M, config: M::Config, tokenizer: Tokenizer, settings: GenerationConfig) -> Self {
        Self { model, config, tokenizer, settings }
    }
}

impl<M> Generator for CausalGenerator<M>
where
    M: CausalLM + Send + Sync + 'static,
    M::Config: Send + Sync,
{
    fn settings(&self) -> &GenerationConfig {
        &self.settings
    }

    fn prompt_ids(&self, text: &str) -> Result<Vec<u32>, PipelineError> {
        let ids = encode(&self.tokenizer, text, M::causal_limits(&self.config).max_len)?;
        Ok(open_prompt(&self.tokenizer, ids))
    }

    fn room(&self, prompt_len: usize) -> usize {
        M::causal_limits(&self.config).max_len.saturating_sub(prompt_len)
    }

    fn generate(&self, prompt: &[u32], settings: &GenerationConfig, seed: u64, streamer: &mut dyn TokenStreamer) -> Result<Generation, PipelineError> {
        let out = continue_ids(&self.model, &self.config, prompt, settings, seed, streamer).map_err(search_error)?;
        Ok(generation(out, prompt.len(), settings))
    }
}

impl<M> ServedModel for CausalGenerator<M>
where
    M: CausalLM + Send + Sync + 'static,
    M::Config: Send + Sync,
{
    fn task(&self) -> Task {
        Task::Generator
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn max_input_length(&self) -> usize {
        M::causal_limits(&self.config).max_len
    }

    fn labels(&self) -> Vec<String> {
        Vec::new()
    }

    fn generator(&self) -> Option<&dyn Generator> {
        Some(self)
    }

    fn run(&self, _inputs: &[crate::Input]) -> Result<Vec<crate::Output>, PipelineError> {
        Err(not_batched())
    }
}

fn not_batched() -> PipelineError {
    PipelineError::Input(InputError::Invalid { what: "inputs", reason: "a generator answers /generate".into() })
}

/// Why a search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FinishReason {
    /// `max_new_tokens` were written.
    Length,
    /// The model wrote an end-of-sequence token.
    EosToken,
    /// The text came to hold one of the request's stop sequences.
    StopSequence,
}

/// One token as the client sees it (text-generation-inference's `Token`).
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct StreamedToken {
    pub id: u32,
    /// What the token adds to the decoded text (empty for a special token, or for a piece of a
    /// character that the next token completes).
    pub text: String,
    /// Its log-probability; streamed tokens carry none.
    pub logprob: Option<f32>,
    pub special: bool,
}

/// What a search gave, for its client.
#[derive(Debug)]
pub(crate) struct Ended {
    pub tokens: Vec<StreamedToken>,
    /// The generated text decoded, special tokens dropped.
    pub text: String,
    pub finish_reason: FinishReason,
}

/// What the model's thread sends a generation's client.
#[derive(Debug)]
pub(crate) enum Event {
    Token(StreamedToken),
    End(Result<Ended, RunError>),
}

/// A generation request, waiting to run.
pub(crate) struct GenerateJob {
    pub prompt: Vec<u32>,
    pub settings: GenerationConfig,
    pub seed: u64,
    pub stop: Vec<String>,
    pub queued: Instant,
    pub events: mpsc::UnboundedSender<Event>,
}

/// Gives each final token to the client as it comes, and ends the search when the client has
/// gone or the text holds a stop sequence.
struct Streamer<'a> {
    tokenizer: &'a Tokenizer,
    special: Vec<u32>,
    stop: &'a [String],
    events: &'a mpsc::UnboundedSender<Event>,
    ids: Vec<u32>,
    /// The pieces given so far, joined.
    text: String,
    /// Tokens are decoded from `prefix` on: the text of `ids[prefix..read]` was given, and
    /// what `ids[prefix..]` decodes to beyond it is the new piece (text-generation-inference's
    /// incremental decoding: a few tokens of context, not the whole text, each step).
    prefix: usize,
    read: usize,
    tokens: Vec<StreamedToken>,
    stopped: bool,
}

impl<'a> Streamer<'a> {
    fn new(tokenizer: &'a Tokenizer, stop: &'a [String], events: &'a mpsc::UnboundedSender<Event>) -> Self {
        Self { tokenizer, special: tokenizer.special_ids(), stop, events, ids: Vec::new(), text: String::new(), prefix: 0, read: 0, tokens: Vec::new(), stopped: false }
    }

    /// `id` and what it adds to the text.
    fn token(&mut self, id: u32) -> StreamedToken {
        self.ids.push(id);
        let before = self.tokenizer.decode(&self.ids[self.prefix..self.read]).unwrap_or_default();
        let after = self.tokenizer.decode(&self.ids[self.prefix..]).unwrap_or_default();
        // A byte-level token may end inside a character: wait for the next one.
        let piece = match after.len() > before.len() && !after.ends_with('\u{FFFD}') && after.starts_with(&before) {
            true => {
                self.prefix = self.read;
                self.read = self.ids.len();
                after[before.len()..].to_string()
            }
            false => String::new(),
        };
        if !piece.is_empty() {
            // Only the end of the text can newly hold a stop sequence.
            let longest = self.stop.iter().map(String::len).max().unwrap_or(0);
            let mut from = self.text.len().saturating_sub(longest);
            while !self.text.is_char_boundary(from) {
                from -= 1;
            }
            self.text.push_str(&piece);
            self.stopped |= self.stop.iter().any(|s| self.text[from..].contains(s.as_str()));
        }
        StreamedToken { id, text: piece, logprob: None, special: self.special.contains(&id) }
    }
}

impl TokenStreamer for Streamer<'_> {
    fn put(&mut self, row: usize, tokens: &[u32]) {
        if row != 0 {
            return;
        }
        for &id in tokens {
            let token = self.token(id);
            let _ = self.events.send(Event::Token(token.clone()));
            self.tokens.push(token);
        }
    }

    fn stop(&self) -> bool {
        self.stopped || self.events.is_closed()
    }
}

/// Run `job` on `model` (a generator) and send its client every token, then how it ended.
/// A job whose client has gone is dropped unrun.
pub(crate) fn run_generation(model: &dyn ServedModel, job: GenerateJob, metrics: &Metrics) {
    if job.events.is_closed() {
        metrics.generation_dropped();
        return;
    }
    let Some(generator) = model.generator() else {
        let _ = job.events.send(Event::End(Err(RunError::Failed("the model does not generate".into()))));
        return;
    };
    let started = Instant::now();
    let tokenizer = model.tokenizer();
    let mut streamer = Streamer::new(tokenizer, &job.stop, &job.events);
    let result = catch_unwind(AssertUnwindSafe(|| generator.generate(&job.prompt, &job.settings, job.seed, &mut streamer)));
    let result = match result {
        Ok(Ok(generation)) => Ok(generation),
        Ok(Err(PipelineError::Settings(e))) => Err(RunError::Settings(e.to_string())),
        Ok(Err(e)) => Err(RunError::Failed(e.to_string())),
        Err(payload) => {
            metrics.panic();
            Err(RunError::Panicked(panic_reason(payload)))
        }
    };
    let cancelled = job.events.is_closed();
    let result = result.and_then(|generation| {
        if generation.logprobs.as_ref().is_some_and(|l| l.iter().any(|p| p.is_nan())) {
            return Err(RunError::NotFinite);
        }
        // The streamer saw every token; what it did not see (none, unless a search streams
        // less than it returns) is decoded here.
        let mut tokens = std::mem::take(&mut streamer.tokens);
        if tokens.len() != generation.tokens.len() || tokens.iter().zip(&generation.tokens).any(|(a, &b)| a.id != b) {
            let mut again = Streamer::new(tokenizer, &job.stop, &job.events);
            tokens = generation.tokens.iter().map(|&id| again.token(id)).collect();
        }
        if let Some(logprobs) = &generation.logprobs {
            tokens.iter_mut().zip(logprobs).for_each(|(t, &p)| t.logprob = Some(p));
        }
        let eos = job.settings.eos_token_ids();
        let finish_reason = match (streamer.stopped, generation.tokens.last()) {
            (true, _) => FinishReason::StopSequence,
            (false, Some(last)) if eos.contains(last) => FinishReason::EosToken,
            _ => FinishReason::Length,
        };
        let text = tokenizer.decode(&generation.tokens).map_err(|e| RunError::Failed(e.to_string()))?;
        Ok(Ended { tokens, text, finish_reason })
    });
    let generated = result.as_ref().map_or(0, |e| e.tokens.len());
    metrics.generation(job.prompt.len(), generated, started - job.queued, started.elapsed(), cancelled);
    let _ = job.events.send(Event::End(result));
}
