//! What the server says about each request: its id (`x-request-id`, the client's own when it
//! sends one), TEI's timing headers, its count at `/metrics`, and with `json_output` one JSON
//! line on stderr.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use crate::api::{App, ROUTES};

/// Where the time of one request went; each part is set by the step that took it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Timing {
    /// Counting the inputs' tokens.
    pub tokenization: Option<Duration>,
    /// Waiting for a batch.
    pub queue: Option<Duration>,
    /// Running the batch it was in.
    pub inference: Option<Duration>,
    /// Characters and tokens of its inputs.
    pub characters: usize,
    pub tokens: usize,
}

tokio::task_local! {
    static TIMING: Arc<Mutex<Timing>>;
}

/// Note a step of the current request's [`Timing`] (nothing outside a request).
pub(crate) fn record(step: impl FnOnce(&mut Timing)) {
    let _ = TIMING.try_with(|t| step(&mut t.lock().unwrap_or_else(|e| e.into_inner())));
}

/// Ids of requests that bring none: this process's random prefix, then a counter.
pub(crate) struct RequestIds {
    prefix: u64,
    next: AtomicU64,
}

impl Default for RequestIds {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos());
        Self { prefix: hasher.finish() & 0xffff_ffff, next: AtomicU64::new(1) }
    }
}

impl RequestIds {
    /// The request's own id when it is 1 to 128 visible ASCII characters, else a new one.
    fn of(&self, request: &Request) -> HeaderValue {
        let given = request.headers().get(X_REQUEST_ID).filter(|v| (1..=128).contains(&v.len()) && v.as_bytes().iter().all(u8::is_ascii_graphic));
        given.cloned().unwrap_or_else(|| {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            HeaderValue::from_str(&format!("{:08x}-{n}", self.prefix)).expect("hex and digits")
        })
    }
}

const X_REQUEST_ID: &str = "x-request-id";

/// The headers a response may carry beside the standard ones.
pub(crate) const HEADERS: [&str; 8] = [X_REQUEST_ID, "x-compute-type", "x-compute-time", "x-tokenization-time", "x-queue-time", "x-inference-time", "x-compute-characters", "x-compute-tokens"];

/// Give the request its id, time it, count its response by route and status, and set
/// TEI's headers (`x-compute-time`, `x-tokenization-time`, `x-queue-time`,
/// `x-inference-time`, in milliseconds; `x-compute-characters`, `x-compute-tokens`) when it
/// ran the model.
pub(crate) async fn observe(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = app.request_ids.of(&request);
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let route = ROUTES.iter().find(|r| **r == path).copied().unwrap_or("other");
    let timing = Arc::new(Mutex::new(Timing::default()));
    let mut response = TIMING.scope(timing.clone(), next.run(request)).await;
    let status = response.status().as_u16();
    let total = started.elapsed();
    app.metrics.response(route, status, total);
    let timing = timing.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let headers = response.headers_mut();
    headers.insert(HeaderName::from_static(X_REQUEST_ID), id.clone());
    let ms = |d: Duration| HeaderValue::from(d.as_millis() as u64);
    if let (Some(tokenization), Some(queue), Some(inference)) = (timing.tokenization, timing.queue, timing.inference) {
        headers.insert("x-compute-type", HeaderValue::from_static("cpu"));
        headers.insert("x-compute-time", ms(total));
        headers.insert("x-tokenization-time", ms(tokenization));
        headers.insert("x-queue-time", ms(queue));
        headers.insert("x-inference-time", ms(inference));
        headers.insert("x-compute-characters", HeaderValue::from(timing.characters as u64));
        headers.insert("x-compute-tokens", HeaderValue::from(timing.tokens as u64));
    }
    if app.options.json_output {
        let secs = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3);
        let line = serde_json::json!({
            "time": SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64(),
            "request_id": id.to_str().unwrap_or_default(),
            "method": method,
            "route": route,
            "status": status,
            "total_ms": secs(Some(total)),
            "tokenization_ms": secs(timing.tokenization),
            "queue_ms": secs(timing.queue),
            "inference_ms": secs(timing.inference),
            "tokens": timing.tokens,
        });
        eprintln!("{line}");
    }
    response
}
