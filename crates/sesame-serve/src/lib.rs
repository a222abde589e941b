//! An HTTP server for one model of any family: text-embeddings-inference's routes and JSON
//! shapes (`/embed`, `/predict`, `/rerank`, `/tokenize`, `/health`, `/info`, `/metrics`), OpenAI's
//! `/v1/embeddings`, `/tag`, `/fill-mask` and `/answer` for the tasks TEI does not serve, and
//! text-generation-inference's `/generate` and `/generate_stream` (server-sent events).
//!
//! Requests from every client wait in one queue; one thread takes as many as fit
//! `max_batch_tokens` and runs them as one call of the model, which sorts the texts by length
//! into forward passes, and each request gets exactly its own results. At most
//! `max_concurrent_requests` are in flight: the next is answered 429 at once. SIGTERM or
//! Ctrl-C stops accepting, answers what is in flight, then returns. The generations waiting
//! together run as one search of at most `max_batch_generations` rows, each with its own
//! settings, each leaving it as it ends (beam search runs alone); tokens are sent as they are
//! final, and a client that goes away ends its row.
//!
//! With an [`ApiKey`], every route but `/health` needs `Authorization: Bearer KEY`; without
//! one the server listens on loopback only, unless `no_api_key` says otherwise. Slow clients
//! are cut off (`header_read_timeout`, `body_read_timeout`), at most `max_connections` are
//! open, and cross-origin calls are refused unless `cors_allow_origins` lists the origin.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use sesame_bert::BertModel;
//! use sesame_layers::PretrainedModel;
//! use sesame_serve::{serve, Embedder, ServeOptions};
//!
//! let dir = std::path::Path::new("all-MiniLM-L6-v2");
//! let device = burn::tensor::Device::default();
//! let loaded = BertModel::from_pretrained(dir, &device)?;
//! let tokenizer = sesame_text::Tokenizer::from_dir(dir)?;
//! let model = Embedder::new(loaded.model, loaded.config, tokenizer, Default::default());
//! serve(Arc::new(model), ServeOptions::new("all-MiniLM-L6-v2"), |addr| eprintln!("listening on http://{addr}"))?;
//! # Ok(())
//! # }
//! ```

mod api;
mod guard;
mod listen;
mod metrics;
mod observe;
mod queue;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

pub use guard::ApiKey;
pub use sesame_pipelines::generator::{CausalGenerator, Seq2SeqGenerator};
pub use sesame_pipelines::served::{Embedder, Generation, Generator, Input, MaskFiller, Output, Reader, ServedModel, Tagger, Task, TextClassifier};

/// How the server listens and what it accepts.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The address to listen on (TEI's default `0.0.0.0`; Sesame's `127.0.0.1`).
    pub host: String,
    /// The port (0: any free one; the address is handed to `serve`'s `ready`).
    pub port: u16,
    /// The most tokens one batch of requests holds (a request larger than this runs alone).
    pub max_batch_tokens: usize,
    /// The most generations run as one search (those waiting together, greedy search or
    /// sampling; beam search runs alone).
    pub max_batch_generations: usize,
    /// Requests in flight at once; one more is answered 429.
    pub max_concurrent_requests: usize,
    /// The most texts one request may hold; more are answered 413.
    pub max_client_batch_size: usize,
    /// The largest request body in bytes; larger are answered 413.
    pub payload_limit: usize,
    /// The name `/info` and `/v1/embeddings` give the model.
    pub model_id: String,
    /// The key every route but `/health` requires (`Authorization: Bearer KEY`); `None`: open.
    pub api_key: Option<ApiKey>,
    /// Serve without a key on an address other than loopback (refused otherwise).
    pub no_api_key: bool,
    /// The origins a browser may call the server from (`*`: any); none by default.
    pub cors_allow_origins: Vec<String>,
    /// Connections open at once; one more takes the place of the oldest idle one, or is
    /// answered 503 and closed when every one is busy.
    pub max_connections: usize,
    /// The time a client has to send a request's head (its line and headers), counted from
    /// when the server waits for it: a kept-alive connection idle this long is closed too.
    pub header_read_timeout: Duration,
    /// The time a client has to send a request's body, once its head is read (408 past it).
    pub body_read_timeout: Duration,
    /// Truncate inputs longer than the model reads, as if each request set `truncate`.
    pub auto_truncate: bool,
    /// One JSON line per request on stderr: its id, route, status and timings.
    pub json_output: bool,
}

impl ServeOptions {
    /// TEI's defaults, on 127.0.0.1:3000.
    pub fn new(model_id: impl Into<String>) -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 3000,
            max_batch_tokens: 16384,
            max_batch_generations: 32,
            max_concurrent_requests: 512,
            max_client_batch_size: 32,
            payload_limit: 2_000_000,
            model_id: model_id.into(),
            api_key: None,
            no_api_key: false,
            cors_allow_origins: Vec::new(),
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            auto_truncate: false,
            json_output: false,
        }
    }
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A limit of 0.
    #[error("{flag} must be at least 1")]
    Options {
        /// The option, as the command line names it.
        flag: &'static str,
    },
    /// A key given to `--api-key` that cannot serve as one.
    #[error("--api-key {0}")]
    ApiKey(&'static str),
    /// An address other than loopback with no key.
    #[error("--host {host} is not a loopback address, and without --api-key anyone who can reach it can use the model: give --api-key KEY (or SESAME_API_KEY), or --no-api-key to serve it open")]
    Open {
        /// `--host`.
        host: String,
    },
    /// A `--cors-allow-origin` that is not an origin.
    #[error("--cors-allow-origin `{0}` is not an origin such as https://example.com, or *")]
    Origin(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// `host:port`.
        addr: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Refuse options the server cannot run with: a limit of 0, an address other than loopback
/// without a key (unless `no_api_key`), an origin that is not one. [`serve`] checks them
/// first; a caller may check them before loading its model.
pub fn check(options: &ServeOptions) -> Result<(), ServeError> {
    for (flag, value) in [
        ("--max-batch-tokens", options.max_batch_tokens),
        ("--max-batch-generations", options.max_batch_generations),
        ("--max-concurrent-requests", options.max_concurrent_requests),
        ("--max-client-batch-size", options.max_client_batch_size),
        ("--payload-limit", options.payload_limit),
        ("--max-connections", options.max_connections),
        ("--header-read-timeout", options.header_read_timeout.as_millis() as usize),
        ("--body-read-timeout", options.body_read_timeout.as_millis() as usize),
    ] {
        if value == 0 {
            return Err(ServeError::Options { flag });
        }
    }
    if options.api_key.is_none() && !options.no_api_key && !is_loopback(&options.host, options.port) {
        return Err(ServeError::Open { host: options.host.clone() });
    }
    let _ = cors(&options.cors_allow_origins)?;
    Ok(())
}

/// Serve `model` until SIGTERM or Ctrl-C; `ready` is called with the bound address once the
/// server accepts connections. Returns once every request in flight is answered.
pub fn serve(model: Arc<dyn ServedModel>, options: ServeOptions, ready: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    check(&options)?;
    let addr = format!("{}:{}", options.host, options.port);
    let cors = cors(&options.cors_allow_origins)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let metrics = Arc::new(metrics::Metrics::default());
    let (queue, jobs) = tokio::sync::mpsc::unbounded_channel();
    let batcher = {
        let (model, metrics, budget, generations) = (model.clone(), metrics.clone(), options.max_batch_tokens, options.max_batch_generations);
        std::thread::Builder::new().name("sesame-serve-model".into()).spawn(move || queue::run_batches(model, jobs, budget, generations, metrics))?
    };
    let app = Arc::new(api::App {
        model,
        permits: Arc::new(tokio::sync::Semaphore::new(options.max_concurrent_requests)),
        options: options.clone(),
        queue,
        metrics: metrics.clone(),
        request_ids: Default::default(),
    });
    let inference = Router::new()
        .route("/embed", post(api::embed))
        .route("/v1/embeddings", post(api::openai_embeddings))
        .route("/predict", post(api::predict))
        .route("/rerank", post(api::rerank))
        .route("/tag", post(api::tag))
        .route("/fill-mask", post(api::fill_mask))
        .route("/answer", post(api::answer))
        .route("/generate", post(api::generate))
        .route("/generate_stream", post(api::generate_stream))
        .route("/", post(api::compat_generate))
        .route("/tokenize", post(api::tokenize))
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), guard::read_body))
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), api::admit));
    // Every route but /health needs the key; a browser's preflight (OPTIONS) carries none.
    let router = Router::new()
        .route("/info", get(api::info))
        .route("/metrics", get(api::metrics))
        .route("/openapi.json", get(api::openapi))
        .merge(inference)
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), guard::authorize))
        .route("/health", get(api::health))
        .layer(DefaultBodyLimit::max(options.payload_limit))
        .layer(cors)
        .layer(axum::middleware::from_fn_with_state(app.clone(), observe::observe))
        .with_state(app);
    let mut limits = listen::Limits { max_connections: options.max_connections, header_read_timeout: options.header_read_timeout };
    if let Some(room) = listen::connection_room().filter(|room| *room < limits.max_connections) {
        eprintln!("--max-connections {} lowered to {room}: this process may open only {} files (ulimit -n)", limits.max_connections, room + 64);
        limits.max_connections = room;
    }
    let result = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|source| ServeError::Bind { addr: addr.clone(), source })?;
        ready(listener.local_addr()?);
        listen::run(listener, router, limits, metrics, shutdown()).await;
        Ok(())
    });
    // The router, and with it the queue's sender, is gone: the model's thread ends.
    drop(runtime);
    let _ = batcher.join();
    result
}

/// Whether every address `host` names is a loopback one (`127.0.0.1`, `::1`, `localhost`).
fn is_loopback(host: &str, port: u16) -> bool {
    match (host, port).to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}

/// The CORS layer of `origins`: none allowed when empty, any for `*`; methods GET and POST,
/// headers `Content-Type`, `Authorization` and `x-request-id`; the id and timing headers
/// readable by the page.
fn cors(origins: &[String]) -> Result<tower_http::cors::CorsLayer, ServeError> {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let parsed = origins.iter().map(|o| {
            let ok = (o.starts_with("http://") || o.starts_with("https://")) && !o.ends_with('/') && o.len() > "https://".len();
            ok.then(|| axum::http::HeaderValue::from_str(o).ok()).flatten().ok_or_else(|| ServeError::Origin(o.clone()))
        });
        AllowOrigin::list(parsed.collect::<Result<Vec<_>, _>>()?)
    };
    Ok(CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([axum::http::Method::GET, axum::http::Method::POST])
        .allow_headers([axum::http::header::CONTENT_TYPE, axum::http::header::AUTHORIZATION, axum::http::HeaderName::from_static("x-request-id")])
        .expose_headers(observe::HEADERS.map(axum::http::HeaderName::from_static)))
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
