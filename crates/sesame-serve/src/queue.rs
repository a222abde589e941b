//! Dynamic batching: requests wait in one queue, and one thread takes as many as fit a token
//! budget, runs them as one call of the model, and hands each request its own outputs. The
//! generations waiting together run as one search, each row with its own settings, its tokens
//! sent to its client as they come (beam search runs alone).

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use sesame_generate::{GenerationConfig, TokenStreamer};
use sesame_pipelines::PipelineError;
use sesame_text::Tokenizer;

use crate::metrics::Metrics;
use sesame_pipelines::served::{Encoded, Generation, Input, Output, ServedModel, SharedRequest};

/// What waits in the queue: a request's texts, which run in a batch with others, or a
/// generation, which runs in a search with others.
pub(crate) enum Work {
    Batch(Job),
    Generate(GenerateJob),
}

/// One request's texts, waiting to run.
pub(crate) struct Job {
    /// The inputs, in the request's order.
    pub inputs: Vec<Input>,
    /// Their tokens as the model reads them (what the budget counts).
    pub tokens: usize,
    /// Each input's encoding where it fits the model, read instead of tokenizing it again.
    pub encoded: Vec<Option<Encoded>>,
    /// When it was queued.
    pub queued: Instant,
    /// Where its outputs go, one per text.
    pub reply: oneshot::Sender<Result<Ran, RunError>>,
}

/// A job's outputs, one per text, and the time it spent waiting and running.
pub(crate) struct Ran {
    pub outputs: Vec<Output>,
    /// From queued to its batch's start.
    pub queued: Duration,
    /// Its batch's run.
    pub inference: Duration,
}

/// Why a batch gave no outputs.
#[derive(Debug, Clone)]
pub(crate) enum RunError {
    /// The model refused the input.
    Failed(String),
    /// The generation settings are out of range.
    Settings(String),
    /// The model or the backend panicked.
    Panicked(String),
    /// An output was NaN or infinite.
    NotFinite,
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Failed(reason) | RunError::Settings(reason) => write!(f, "{reason}"),
            RunError::Panicked(reason) => write!(f, "running the model failed: {reason}"),
            RunError::NotFinite => write!(f, "the model's output is not finite (NaN or infinite); the checkpoint overflows"),
        }
    }
}

/// Take work from `queue` until it closes: each batch is the first waiting job and every job
/// behind it that keeps the batch within `max_batch_tokens` (a single larger job runs alone);
/// a generation runs with the generations waiting behind it that may share its search, at most
/// `max_batch_generations` (work that may not waits in its place). Jobs whose client has gone are
/// dropped unrun.
pub(crate) fn run_batches(model: Arc<dyn ServedModel>, mut queue: mpsc::UnboundedReceiver<Work>, max_batch_tokens: usize, max_batch_generations: usize, metrics: Arc<Metrics>) {
    // Work taken from the queue and put back, in the queue's order: it comes before the queue.
    let mut held: VecDeque<Work> = VecDeque::new();
    loop {
        let first = match held.pop_front().or_else(|| queue.blocking_recv()) {
            None => return,
            Some(Work::Generate(job)) => {
                let jobs = shared_generations(model.as_ref(), job, &mut queue, &mut held, max_batch_generations);
                run_generations(model.as_ref(), jobs, &metrics);
                continue;
            }
            Some(Work::Batch(job)) => job,
        };
        let mut tokens = first.tokens;
        let mut jobs = vec![first];
        while let Some(work) = held.pop_front().or_else(|| queue.try_recv().ok()) {
            match work {
                Work::Batch(job) if tokens + job.tokens <= max_batch_tokens => {
                    tokens += job.tokens;
                    jobs.push(job);
                }
                other => {
                    held.push_front(other);
                    break;
                }
            }
        }
        let waiting = jobs.len();
        jobs.retain(|job| !job.reply.is_closed());
        for _ in jobs.len()..waiting {
            metrics.abandoned(false);
        }
        if jobs.is_empty() {
            continue;
        }
        let tokens = jobs.iter().map(|job| job.tokens).sum();
        answer(model.as_ref(), jobs, tokens, &metrics);
    }
}

/// `first` and the generations waiting behind it that may share its search (of its
/// [`Generator::shared_key`]), at most `max` in all; what they pass over stays in `held`, in
/// order. A search that may not be shared (beam search) runs alone.
fn shared_generations(model: &dyn ServedModel, first: GenerateJob, queue: &mut mpsc::UnboundedReceiver<Work>, held: &mut VecDeque<Work>, max: usize) -> Vec<GenerateJob> {
    let key = |job: &GenerateJob| model.generator().and_then(|g| g.shared_key(&job.prompt, &job.settings));
    let Some(shared) = key(&first) else { return vec![first] };
    let mut jobs = vec![first];
    let mut passed = VecDeque::new();
    while jobs.len() < max {
        match held.pop_front().or_else(|| queue.try_recv().ok()) {
            Some(Work::Generate(job)) if key(&job) == Some(shared) => jobs.push(job),
            Some(other) => passed.push_back(other),
            None => break,
        }
    }
    passed.append(held);
    *held = passed;
    jobs
}

/// The message of a panic's payload.
pub(crate) fn panic_reason(payload: Box<dyn std::any::Any + Send>) -> String {
    let reason = payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()));
    reason.unwrap_or_else(|| "a panic without a message".into())
}

/// Run `jobs` as one batch of `tokens` tokens and send each its outputs. When the model
/// refuses the batch, each job runs alone, so that one request's bad input fails that request
/// only.
fn answer(model: &dyn ServedModel, mut jobs: Vec<Job>, tokens: usize, metrics: &Metrics) {
    let inputs: Vec<Input> = jobs.iter().flat_map(|job| job.inputs.iter().cloned()).collect();
    // Moved, not copied: a job run again alone after its batch failed is tokenized again.
    let encoded: Vec<Option<Encoded>> = jobs.iter_mut().flat_map(|job| std::mem::take(&mut job.encoded)).collect();
    let started = Instant::now();
    let waited = jobs.iter().map(|job| started - job.queued).sum();
    let result = match catch_unwind(AssertUnwindSafe(|| model.run_encoded(&inputs, &encoded))) {
        Ok(Ok(outputs)) if outputs.len() != inputs.len() => Err(RunError::Failed(format!("the model gave {} outputs for {} texts", outputs.len(), inputs.len()))),
        Ok(Ok(outputs)) if !outputs.iter().all(Output::is_finite) => Err(RunError::NotFinite),
        Ok(Ok(outputs)) => Ok(outputs),
        Ok(Err(e)) => Err(RunError::Failed(e.to_string())),
        Err(payload) => {
            metrics.panic();
            Err(RunError::Panicked(panic_reason(payload)))
        }
    };
    let took = started.elapsed();
    metrics.batch(jobs.len(), inputs.len(), tokens, waited, took);
    match result {
        Ok(outputs) => {
            let mut outputs = outputs.into_iter();
            for job in jobs {
                let mine: Vec<Output> = outputs.by_ref().take(job.inputs.len()).collect();
                // A client gone since its batch started is simply not answered.
                if job.reply.send(Ok(Ran { outputs: mine, queued: started - job.queued, inference: took })).is_err() {
                    metrics.abandoned(true);
                }
            }
        }
        Err(_) if jobs.len() > 1 => {
            for job in jobs {
                let tokens = job.tokens;
                answer(model, vec![job], tokens, metrics);
            }
        }
        Err(e) => {
            for job in jobs {
                let _ = job.reply.send(Err(e.clone()));
            }
        }
    }
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

/// Run `jobs` on `model` (a generator) as one search (as one alone when its search may not be
/// shared) and send each client its tokens as they come, then how it ended. Jobs whose client
/// has gone are dropped unrun; a failure of the model fails every job of the search.
pub(crate) fn run_generations(model: &dyn ServedModel, mut jobs: Vec<GenerateJob>, metrics: &Metrics) {
    jobs.retain(|job| {
        let gone = job.events.is_closed();
        if gone {
            metrics.generation_dropped();
        }
        !gone
    });
    let Some(generator) = model.generator() else {
        for job in jobs {
            let _ = job.events.send(Event::End(Err(RunError::Failed("the model does not generate".into()))));
        }
        return;
    };
    let Some(first) = jobs.first() else { return };
    let shared = generator.shared_key(&first.prompt, &first.settings).is_some();
    let tokenizer = model.tokenizer();
    let started = Instant::now();
    let mut streamers: Vec<Streamer> = jobs.iter().map(|job| Streamer::new(tokenizer, &job.stop, &job.events)).collect();
    let ran = catch_unwind(AssertUnwindSafe(|| match shared {
        true => {
            let mut requests: Vec<SharedRequest> = jobs
                .iter()
                .zip(&mut streamers)
                .map(|(job, streamer)| SharedRequest { prompt: &job.prompt, settings: &job.settings, seed: job.seed, streamer })
                .collect();
            generator.generate_shared(&mut requests)
        }
        false => Ok(vec![generator.generate(&first.prompt, &first.settings, first.seed, &mut streamers[0])]),
    }));
    let results: Vec<Result<Generation, RunError>> = match ran {
        Ok(Ok(results)) => results.into_iter().map(|r| r.map_err(run_error)).collect(),
        Ok(Err(e)) => vec![Err(run_error(e)); jobs.len()],
        Err(payload) => {
            metrics.panic();
            vec![Err(RunError::Panicked(panic_reason(payload))); jobs.len()]
        }
    };
    let prompts = jobs.iter().map(|job| job.prompt.len()).sum();
    let waited = jobs.iter().map(|job| started - job.queued).sum();
    metrics.batch(jobs.len(), jobs.len(), prompts, waited, started.elapsed());
    for ((job, streamer), result) in jobs.iter().zip(streamers).zip(results) {
        finish(tokenizer, job, streamer, result, metrics);
    }
}

/// Why a search failed, for its client.
fn run_error(e: PipelineError) -> RunError {
    match e {
        PipelineError::Settings(e) => RunError::Settings(e.to_string()),
        e => RunError::Failed(e.to_string()),
    }
}

/// Send `job`'s client how its search ended (`result`; `streamer` saw its tokens).
fn finish(tokenizer: &Tokenizer, job: &GenerateJob, mut streamer: Streamer<'_>, result: Result<Generation, RunError>, metrics: &Metrics) {
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
    metrics.generation(result.as_ref().map_or(0, |e| e.tokens.len()), cancelled);
    let _ = job.events.send(Event::End(result));
}
