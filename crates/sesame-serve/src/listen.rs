//! The accept loop: at most `max_connections` open at once, each served over HTTP/1.1 with a
//! header read timeout (which also closes a kept-alive connection left idle that long), and
//! every connection finished before the server returns.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::metrics::{Closed, Metrics};

/// The largest request head (request line and headers) a client may send; a larger one is
/// answered 431.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How connections are accepted and limited.
pub(crate) struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

/// Serve `router` on `listener` until `shutdown` resolves, then stop accepting, let every
/// open connection finish the request it is answering, and return.
pub(crate) async fn run(listener: TcpListener, router: Router, limits: Limits, metrics: Arc<Metrics>, shutdown: impl std::future::Future<Output = ()>) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // Each connection holds a receiver; the server returns once all are dropped.
    let (stop, stopped) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors, or a connection reset before it was taken: the
                // listener itself is fine. Wait a little rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            metrics.closed(Closed::MaxConnections);
            tokio::spawn(refuse(stream, limits.max_connections));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let (metrics, mut stop) = (metrics.clone(), stopped.clone());
        let timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            metrics.opened();
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(timeout).max_header_size(MAX_HEAD_BYTES);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let result = loop {
                tokio::select! {
                    result = conn.as_mut() => break result,
                    _ = stop.changed() => conn.as_mut().graceful_shutdown(),
                }
            };
            if let Err(e) = result {
                let reason = if e.is_timeout() {
                    Closed::HeaderTimeout
                } else if e.is_parse_too_large() {
                    Closed::HeadTooLarge
                } else if e.is_parse() {
                    Closed::BadRequest
                } else {
                    Closed::Other
                };
                metrics.closed(reason);
            }
            metrics.finished();
            drop((slot, stop));
        });
    }
    drop((listener, stopped));
    let _ = stop.send(true);
    stop.closed().await;
}

/// Answer a connection past `--max-connections` 503 and close it, without reading its
/// request (the client may retry).
async fn refuse(mut stream: tokio::net::TcpStream, max: usize) {
    let body = format!("{{\"error\":\"the server has its maximum of {max} connections open (--max-connections); retry later\",\"error_type\":\"Overloaded\"}}");
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}
