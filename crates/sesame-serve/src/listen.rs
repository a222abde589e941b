//! The accept loop: at most `max_connections` open at once, each served over HTTP/1.1 with a
//! header read timeout (which also closes a kept-alive connection left idle that long), and
//! every connection finished before the server returns.
//!
//! When all are open, a new connection takes the place of the oldest idle one (no request in
//! progress), so that clients holding connections open without using them cannot keep others
//! out; it is refused with 503 only when every open connection is busy.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use crate::metrics::{Closed, Metrics};

/// The largest request head (request line and headers) a client may send; a larger one is
/// answered 431.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How long a connection past the limit waits for an evicted idle one's place.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// How connections are accepted and limited.
pub(crate) struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

/// One open connection, as the accept loop sees it.
#[derive(Default)]
struct Conn {
    /// Requests being answered on it (HTTP/1.1: 0 or 1).
    busy: AtomicUsize,
    /// Whether it has been asked to close.
    evicted: AtomicBool,
    close: Notify,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Open {
    next: AtomicU64,
    conns: Mutex<BTreeMap<u64, Arc<Conn>>>,
}

impl Open {
    fn add(&self) -> (u64, Arc<Conn>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn::default());
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).insert(id, conn.clone());
        (id, conn)
    }

    fn remove(&self, id: u64) {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    /// Ask the oldest idle connection to close; whether there was one.
    fn evict_oldest_idle(&self) -> bool {
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let idle = conns.values().find(|c| c.busy.load(Ordering::Acquire) == 0 && !c.evicted.swap(true, Ordering::AcqRel));
        idle.map(|c| c.close.notify_one()).is_some()
    }
}

/// Marks its connection busy while it lives (a request being answered, even if its client
/// goes away mid-way and the handler is dropped).
struct Busy(Arc<Conn>);

impl Busy {
    fn new(conn: &Arc<Conn>) -> Self {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        Self(conn.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What every connection's task shares.
struct Shared {
    router: Router,
    limits: Limits,
    metrics: Arc<Metrics>,
    open: Open,
    slots: Arc<Semaphore>,
}

/// Serve `router` on `listener` until `shutdown` resolves, then stop accepting, let every
/// open connection finish the request it is answering, and return.
pub(crate) async fn run(listener: TcpListener, router: Router, limits: Limits, metrics: Arc<Metrics>, shutdown: impl std::future::Future<Output = ()>) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let shared = Arc::new(Shared { router, limits, metrics, open: Open::default(), slots });
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
        let _ = stream.set_nodelay(true);
        let (shared, stop) = (shared.clone(), stopped.clone());
        match shared.slots.clone().try_acquire_owned() {
            Ok(slot) => {
                tokio::spawn(serve(shared, stream, slot, stop));
            }
            Err(_) => {
                tokio::spawn(async move {
                    match make_room(&shared).await {
                        Some(slot) => serve(shared, stream, slot, stop).await,
                        None => {
                            shared.metrics.closed(Closed::MaxConnections);
                            refuse(stream, shared.limits.max_connections).await;
                        }
                    }
                });
            }
        }
    }
    drop((listener, stopped));
    let _ = stop.send(true);
    stop.closed().await;
}

/// A place for a connection past the limit: evict the oldest idle connection and take its
/// place, trying again while others waiting take the places freed, for up to
/// [`EVICTION_WAIT`]; `None` when every connection stayed busy.
async fn make_room(shared: &Shared) -> Option<OwnedSemaphorePermit> {
    let deadline = tokio::time::Instant::now() + EVICTION_WAIT;
    loop {
        if shared.open.evict_oldest_idle() {
            shared.metrics.closed(Closed::EvictedIdle);
        }
        let wait = Duration::from_millis(20).min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        match tokio::time::timeout(wait, shared.slots.clone().acquire_owned()).await {
            Ok(Ok(slot)) => return Some(slot),
            Ok(Err(_)) => return None,
            Err(_) if tokio::time::Instant::now() >= deadline => return None,
            Err(_) => {}
        }
    }
}

/// Serve one connection holding `slot` until it closes, is evicted while idle, or the server
/// stops (`stop` changes: the request in progress is answered first).
async fn serve(shared: Arc<Shared>, stream: TcpStream, slot: OwnedSemaphorePermit, mut stop: watch::Receiver<bool>) {
    let metrics = &shared.metrics;
    metrics.opened();
    let (id, conn) = shared.open.add();
    let service = {
        let (router, conn) = (shared.router.clone(), conn.clone());
        hyper::service::service_fn(move |request| {
            let busy = Busy::new(&conn);
            let answer = router.clone().oneshot(request);
            async move {
                let response = answer.await;
                drop(busy);
                response
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(shared.limits.header_read_timeout).max_header_size(MAX_HEAD_BYTES);
    let mut connection = std::pin::pin!(builder.serve_connection(TokioIo::new(stream), service));
    let result = loop {
        tokio::select! {
            result = connection.as_mut() => break result,
            _ = stop.changed() => connection.as_mut().graceful_shutdown(),
            // Evicted: closed now if still idle (a request head half sent is dropped with it;
            // nothing runs while this task is here), else once its answer is sent.
            _ = conn.close.notified() => {
                if conn.busy.load(Ordering::Acquire) == 0 {
                    break Ok(());
                }
                connection.as_mut().graceful_shutdown();
            }
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
    shared.open.remove(id);
    metrics.finished();
    drop((slot, stop));
}

/// Answer a connection past `--max-connections`, all of them busy, 503 and close it, without
/// reading its request (the client may retry).
async fn refuse(mut stream: TcpStream, max: usize) {
    let body = format!("{{\"error\":\"the server has its maximum of {max} connections open and busy (--max-connections); retry later\",\"error_type\":\"Overloaded\"}}");
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

/// Raise this process's limit on open files to its hard limit, and return the most
/// connections it leaves room for (`None`: no limit known), keeping 64 descriptors for the
/// model's files and the runtime.
pub(crate) fn connection_room() -> Option<usize> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit and setrlimit read and write the struct passed, nothing else.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return None;
            }
            if limit.rlim_cur < limit.rlim_max {
                let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit = raised;
                }
            }
        }
        if limit.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        Some((limit.rlim_cur as usize).saturating_sub(64).max(1))
    }
    #[cfg(not(unix))]
    None
}
