//! An HTTP server for one model of any family: text-embeddings-inference's routes and JSON
//! shapes (`/embed`, `/predict`, `/rerank`, `/tokenize`, `/health`, `/info`, `/metrics`), OpenAI's
//! `/v1/embeddings`, `/tag`, `/fill-mask` and `/answer` for the tasks TEI does not serve, and
//! text-generation-inference's `/generate` and `/generate_stream` (server-sent events).
//!
//! Requests from every client wait in one queue; one thread takes as many as fit
//! `max_batch_tokens` and runs them as one call of the model, which sorts the texts by length
//! into forward passes, and each request gets exactly its own results. At most
//! `max_concurrent_requests` are in flight: the next is answered 429 at once. SIGTERM or
//! Ctrl-C stops accepting, answers what is in flight, then returns. A generation runs alone,
//! its tokens sent as they are final; a client that goes away ends its search.
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
mod metrics;
mod queue;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

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
    /// Requests in flight at once; one more is answered 429.
    pub max_concurrent_requests: usize,
    /// The most texts one request may hold; more are answered 413.
    pub max_client_batch_size: usize,
    /// The largest request body in bytes; larger are answered 413.
    pub payload_limit: usize,
    /// The name `/info` and `/v1/embeddings` give the model.
    pub model_id: String,
}

impl ServeOptions {
    /// TEI's defaults, on 127.0.0.1:3000.
    pub fn new(model_id: impl Into<String>) -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 3000,
            max_batch_tokens: 16384,
            max_concurrent_requests: 512,
            max_client_batch_size: 32,
            payload_limit: 2_000_000,
            model_id: model_id.into(),
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

/// Serve `model` until SIGTERM or Ctrl-C; `ready` is called with the bound address once the
/// server accepts connections. Returns once every request in flight is answered.
pub fn serve(model: Arc<dyn ServedModel>, options: ServeOptions, ready: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    for (flag, value) in [
        ("--max-batch-tokens", options.max_batch_tokens),
        ("--max-concurrent-requests", options.max_concurrent_requests),
        ("--max-client-batch-size", options.max_client_batch_size),
        ("--payload-limit", options.payload_limit),
    ] {
        if value == 0 {
            return Err(ServeError::Options { flag });
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let metrics = Arc::new(metrics::Metrics::default());
    let (queue, jobs) = tokio::sync::mpsc::unbounded_channel();
    let batcher = {
        let (model, metrics, budget) = (model.clone(), metrics.clone(), options.max_batch_tokens);
        std::thread::Builder::new().name("sesame-serve-model".into()).spawn(move || queue::run_batches(model, jobs, budget, metrics))?
    };
    let app = Arc::new(api::App {
        model,
        permits: Arc::new(tokio::sync::Semaphore::new(options.max_concurrent_requests)),
        options: options.clone(),
        queue,
        metrics,
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
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), api::admit));
    let router = Router::new()
        .route("/health", get(api::health))
        .route("/info", get(api::info))
        .route("/metrics", get(api::metrics))
        .route("/openapi.json", get(api::openapi))
        .merge(inference)
        .layer(DefaultBodyLimit::max(options.payload_limit))
        .layer(axum::middleware::from_fn_with_state(app.clone(), api::count))
        .with_state(app);
    let result = runtime.block_on(async move {
        let addr = format!("{}:{}", options.host, options.port);
        let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|source| ServeError::Bind { addr: addr.clone(), source })?;
        ready(listener.local_addr()?);
        axum::serve(listener, router).with_graceful_shutdown(shutdown()).await?;
        Ok(())
    });
    // The router, and with it the queue's sender, is gone: the model's thread ends.
    drop(runtime);
    let _ = batcher.join();
    result
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
