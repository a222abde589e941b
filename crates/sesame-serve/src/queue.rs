//! Dynamic batching: requests wait in one queue, and one thread takes as many as fit a token
//! budget, runs them as one call of the model, and hands each request its own outputs; a
//! generation runs alone.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use crate::generation::{run_generation, GenerateJob};
use crate::metrics::Metrics;
use crate::model::{Input, Output, ServedModel};

/// What waits in the queue: a request's texts, which run in a batch with others, or a
/// generation, which runs alone.
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
    /// When it was queued.
    pub queued: Instant,
    /// Where its outputs go, one per text.
    pub reply: oneshot::Sender<Result<Vec<Output>, RunError>>,
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

/// Take jobs from `queue` until it closes: each batch is the first waiting job and every job
/// behind it that keeps the batch within `max_batch_tokens` (a single larger job runs alone).
/// Jobs whose client has gone are dropped unrun.
pub(crate) fn run_batches(model: Arc<dyn ServedModel>, mut queue: mpsc::UnboundedReceiver<Work>, max_batch_tokens: usize, metrics: Arc<Metrics>) {
    let mut held: Option<Work> = None;
    loop {
        let first = match held.take().or_else(|| queue.blocking_recv()) {
            None => return,
            Some(Work::Generate(job)) => {
                run_generation(model.as_ref(), job, &metrics);
                continue;
            }
            Some(Work::Batch(job)) => job,
        };
        let mut tokens = first.tokens;
        let mut jobs = vec![first];
        while let Ok(work) = queue.try_recv() {
            match work {
                Work::Batch(job) if tokens + job.tokens <= max_batch_tokens => {
                    tokens += job.tokens;
                    jobs.push(job);
                }
                other => {
                    held = Some(other);
                    break;
                }
            }
        }
        jobs.retain(|job| !job.reply.is_closed());
        if jobs.is_empty() {
            continue;
        }
        let tokens = jobs.iter().map(|job| job.tokens).sum();
        answer(model.as_ref(), jobs, tokens, &metrics);
    }
}

/// The message of a panic's payload.
pub(crate) fn panic_reason(payload: Box<dyn std::any::Any + Send>) -> String {
    let reason = payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()));
    reason.unwrap_or_else(|| "a panic without a message".into())
}

/// Run `jobs` as one batch of `tokens` tokens and send each its outputs. When the model
/// refuses the batch, each job runs alone, so that one request's bad input fails that request
/// only.
fn answer(model: &dyn ServedModel, jobs: Vec<Job>, tokens: usize, metrics: &Metrics) {
    let inputs: Vec<Input> = jobs.iter().flat_map(|job| job.inputs.iter().cloned()).collect();
    let started = Instant::now();
    let waited = jobs.iter().map(|job| started - job.queued).sum();
    let result = match catch_unwind(AssertUnwindSafe(|| model.run(&inputs))) {
        Ok(Ok(outputs)) if outputs.len() != inputs.len() => Err(RunError::Failed(format!("the model gave {} outputs for {} texts", outputs.len(), inputs.len()))),
        Ok(Ok(outputs)) if !outputs.iter().all(Output::is_finite) => Err(RunError::NotFinite),
        Ok(Ok(outputs)) => Ok(outputs),
        Ok(Err(e)) => Err(RunError::Failed(e.to_string())),
        Err(payload) => {
            metrics.panic();
            Err(RunError::Panicked(panic_reason(payload)))
        }
    };
    metrics.batch(jobs.len(), inputs.len(), tokens, waited, started.elapsed());
    match result {
        Ok(outputs) => {
            let mut outputs = outputs.into_iter();
            for job in jobs {
                let mine: Vec<Output> = outputs.by_ref().take(job.inputs.len()).collect();
                let _ = job.reply.send(Ok(mine));
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
