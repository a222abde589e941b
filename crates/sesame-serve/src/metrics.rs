//! Counters for `GET /metrics`, in Prometheus' text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// What the server has done since it started.
#[derive(Default)]
pub(crate) struct Metrics {
    /// Responses by route and status code.
    responses: Mutex<BTreeMap<(String, u16), u64>>,
    /// Time to answer, by route.
    durations: Mutex<BTreeMap<String, Histogram>>,
    batches: AtomicU64,
    batch_inputs: AtomicU64,
    batch_tokens: AtomicU64,
    queue_micros: AtomicU64,
    queued_requests: AtomicU64,
    inference_micros: AtomicU64,
    panics: AtomicU64,
    generations: AtomicU64,
    generated_tokens: AtomicU64,
    generations_cancelled: AtomicU64,
    connections_open: AtomicU64,
    abandoned_queued: AtomicU64,
    abandoned_running: AtomicU64,
    /// Connections closed by the server before an answer, by [`Closed`] reason.
    closed: [AtomicU64; Closed::ALL.len()],
}

/// The upper bounds, in seconds, of the request-duration histogram's buckets (beside +Inf).
const BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// A Prometheus histogram: how many observations fell at or under each bound, their sum and
/// count.
#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (bound, n) in BUCKETS.iter().zip(&mut self.buckets) {
            if seconds <= *bound {
                *n += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }
}

/// Why the server closed a connection, or refused it, before answering a request on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// `--max-connections` were open and busy: answered 503 and closed.
    MaxConnections,
    /// Idle (no request in progress) when `--max-connections` were open and another came:
    /// closed to make room.
    EvictedIdle,
    /// No complete request head within `--header-read-timeout` (a slow client, or a kept-alive
    /// connection left idle).
    HeaderTimeout,
    /// A request head larger than the server reads (answered 431).
    HeadTooLarge,
    /// Not HTTP/1.1 (answered 400).
    BadRequest,
    /// The connection failed otherwise (reset by the client).
    Other,
}

impl Closed {
    const ALL: [Closed; 6] = [Closed::MaxConnections, Closed::EvictedIdle, Closed::HeaderTimeout, Closed::HeadTooLarge, Closed::BadRequest, Closed::Other];

    /// The label at `/metrics`.
    fn label(self) -> &'static str {
        match self {
            Closed::MaxConnections => "max_connections",
            Closed::EvictedIdle => "evicted_idle",
            Closed::HeaderTimeout => "header_timeout",
            Closed::HeadTooLarge => "head_too_large",
            Closed::BadRequest => "bad_request",
            Closed::Other => "other",
        }
    }
}

impl Metrics {
    /// A response with `status` to a request for `route`, sent `took` after the request came.
    pub(crate) fn response(&self, route: &str, status: u16, took: Duration) {
        let mut responses = self.responses.lock().unwrap_or_else(|e| e.into_inner());
        *responses.entry((route.to_string(), status)).or_default() += 1;
        drop(responses);
        let mut durations = self.durations.lock().unwrap_or_else(|e| e.into_inner());
        durations.entry(route.to_string()).or_default().observe(took.as_secs_f64());
    }

    /// A batch of `inputs` texts and `tokens` tokens run in `took`, its requests having waited
    /// `waited` in all.
    pub(crate) fn batch(&self, requests: usize, inputs: usize, tokens: usize, waited: Duration, took: Duration) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batch_inputs.fetch_add(inputs as u64, Ordering::Relaxed);
        self.batch_tokens.fetch_add(tokens as u64, Ordering::Relaxed);
        self.queued_requests.fetch_add(requests as u64, Ordering::Relaxed);
        self.queue_micros.fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
        self.inference_micros.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// A generation that wrote `generated` tokens (its search is counted as a batch of its
    /// generations and their prompt tokens); `cancelled` when its client went away before the end.
    pub(crate) fn generation(&self, generated: usize, cancelled: bool) {
        self.generations.fetch_add(1, Ordering::Relaxed);
        self.generated_tokens.fetch_add(generated as u64, Ordering::Relaxed);
        self.generations_cancelled.fetch_add(u64::from(cancelled), Ordering::Relaxed);
    }

    /// A generation dropped unrun: its client went away while it waited.
    pub(crate) fn generation_dropped(&self) {
        self.generations_cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// A request whose client went away before its answer: while it waited (dropped unrun),
    /// or while its batch ran (the others in the batch are answered all the same).
    pub(crate) fn abandoned(&self, running: bool) {
        let counter = if running { &self.abandoned_running } else { &self.abandoned_queued };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection accepted.
    pub(crate) fn opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
    }

    /// An accepted connection ended.
    pub(crate) fn finished(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    /// A connection closed or refused by the server for `reason`.
    pub(crate) fn closed(&self, reason: Closed) {
        let i = Closed::ALL.iter().position(|r| *r == reason).unwrap_or(Closed::ALL.len() - 1);
        self.closed[i].fetch_add(1, Ordering::Relaxed);
    }

    /// A batch whose run panicked.
    pub(crate) fn panic(&self) {
        self.panics.fetch_add(1, Ordering::Relaxed);
    }

    /// Every counter in Prometheus' text exposition format, and the gauge of `in_flight`
    /// requests (those holding one of `--max-concurrent-requests`).
    pub(crate) fn render(&self, in_flight: usize) -> String {
        let mut out = String::new();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let seconds = |c: &AtomicU64| load(c) as f64 / 1e6;
        out.push_str("# HELP sesame_requests_total Responses sent, by route and status code.\n# TYPE sesame_requests_total counter\n");
        for ((route, code), n) in self.responses.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(out, "sesame_requests_total{{route=\"{route}\",code=\"{code}\"}} {n}");
        }
        out.push_str("# HELP sesame_request_duration_seconds Time from a request's head to its response's head (a stream's first byte), by route.\n# TYPE sesame_request_duration_seconds histogram\n");
        for (route, h) in self.durations.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            for (bound, n) in BUCKETS.iter().zip(h.buckets) {
                let _ = writeln!(out, "sesame_request_duration_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {n}");
            }
            let _ = writeln!(out, "sesame_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "sesame_request_duration_seconds_sum{{route=\"{route}\"}} {}\nsesame_request_duration_seconds_count{{route=\"{route}\"}} {}", h.sum, h.count);
        }
        let counters: [(&str, &str, String); 10] = [
            ("sesame_batches_total", "Batches run.", load(&self.batches).to_string()),
            ("sesame_batch_inputs_total", "Texts run, over all batches (divide by sesame_batches_total for the mean batch size).", load(&self.batch_inputs).to_string()),
            ("sesame_batch_tokens_total", "Tokens run, over all batches.", load(&self.batch_tokens).to_string()),
            ("sesame_queued_requests_total", "Requests taken from the queue into a batch.", load(&self.queued_requests).to_string()),
            ("sesame_queue_seconds_total", "Time requests waited in the queue, summed over requests.", seconds(&self.queue_micros).to_string()),
            ("sesame_inference_seconds_total", "Time spent running batches.", seconds(&self.inference_micros).to_string()),
            ("sesame_panics_total", "Batches whose run panicked (answered 500).", load(&self.panics).to_string()),
            ("sesame_generations_total", "Generations run (the generations that ran together are one batch, their prompts its tokens).", load(&self.generations).to_string()),
            ("sesame_generated_tokens_total", "Tokens written by generations.", load(&self.generated_tokens).to_string()),
            ("sesame_generations_cancelled_total", "Generations stopped early, or dropped unrun, because their client went away.", load(&self.generations_cancelled).to_string()),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
        }
        out.push_str("# HELP sesame_requests_abandoned_total Requests whose client went away before the answer: while queued (not run) or while their batch ran.\n# TYPE sesame_requests_abandoned_total counter\n");
        let _ = writeln!(out, "sesame_requests_abandoned_total{{when=\"queued\"}} {}\nsesame_requests_abandoned_total{{when=\"running\"}} {}", load(&self.abandoned_queued), load(&self.abandoned_running));
        out.push_str("# HELP sesame_connections_closed_total Connections the server refused or closed before answering, by reason.\n# TYPE sesame_connections_closed_total counter\n");
        for (reason, n) in Closed::ALL.iter().zip(&self.closed) {
            let _ = writeln!(out, "sesame_connections_closed_total{{reason=\"{}\"}} {}", reason.label(), load(n));
        }
        let _ = writeln!(out, "# HELP sesame_connections_open Connections open (at most --max-connections).\n# TYPE sesame_connections_open gauge\nsesame_connections_open {}", load(&self.connections_open));
        let _ = writeln!(out, "# HELP sesame_requests_in_flight Requests being read, queued or run (at most --max-concurrent-requests).\n# TYPE sesame_requests_in_flight gauge\nsesame_requests_in_flight {in_flight}");
        out
    }
}
