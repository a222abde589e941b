//! `cargo xtask bench --mode serve`: `cargo xtask serve` under load from a real load generator
//! (`oha`), and with `--compare-infinity` infinity-emb serving the same checkpoint on the same
//! cores, one after the other. Both are called on their OpenAI embeddings route with the same
//! bodies: `--texts-per-request` texts of the corpus per request, `--clients` concurrent clients,
//! `--duration` seconds per mix. Rows: requests/s, texts/s, p50 and p99 latency, each side and
//! the ratio.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sesame_text::Corpus;


/// A server started for the bench, stopped when dropped.
struct Running {
    child: Child,
    /// The embeddings route, as a URL.
    url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cargo xtask serve` of `dir` on a free port, on `backend`; waits until it listens.
fn start_sesame(dir: &Path, backend: &str, batch_size: usize) -> Result<Running, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut child = Command::new(&exe)
        .args(["serve", "--model"])
        .arg(dir)
        .args(["--port", "0", "--task", "embed", "--backend", backend, "--batch-size", &batch_size.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("piped"));
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            let _ = child.kill();
            return Err(format!("`serve --model {}` exited before listening: {seen}", dir.display()));
        }
        if let Some(rest) = line.trim().strip_prefix("listening on ") {
            let base = rest.split_whitespace().next().unwrap_or_default().to_string();
            std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
            return Ok(Running { child, url: format!("{base}/v1/embeddings") });
        }
        seen.push_str(&line);
    }
}

/// A free port on 127.0.0.1.
fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// infinity-emb (`infinity` is its `infinity_emb` program) serving `dir` on the CPU with the
/// torch engine and batches of `batch_size`; waits (up to 10 minutes) until `/health` answers.
fn start_infinity(infinity: &Path, dir: &Path, batch_size: usize) -> Result<Running, String> {
    let port = free_port()?;
    let child = Command::new(infinity)
        .args(["v2", "--model-id"])
        .arg(dir)
        .args(["--port", &port.to_string(), "--host", "127.0.0.1", "--device", "cpu", "--engine", "torch", "--batch-size", &batch_size.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {} (install infinity-emb, see docs/benchmarks.md, or give --infinity): {e}", infinity.display()))?;
    let mut running = Running { child, url: format!("http://127.0.0.1:{port}/embeddings") };
    let started = Instant::now();
    loop {
        if let Some(status) = running.child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("{} exited before serving ({status})", infinity.display()));
        }
        if healthy(port) {
            return Ok(running);
        }
        if started.elapsed() > Duration::from_secs(600) {
            let _ = running.child.kill();
            return Err(format!("{} did not answer /health within 10 minutes", infinity.display()));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Whether `GET /health` on 127.0.0.1:`port` answers 200.
fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}

/// What one load run measured.
struct Load {
    requests_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    requests: u64,
}

/// `oha` posting `body` to `url` from `clients` clients for `seconds`; every answer must be 200.
fn load(oha: &Path, url: &str, body: &str, clients: usize, seconds: u64) -> Result<Load, String> {
    let out = Command::new(oha)
        .args(["--no-tui", "--output-format", "json", "-z", &format!("{seconds}s"), "-c", &clients.to_string(), "-m", "POST", "-H", "Content-Type: application/json", "-d", body, url])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {} (cargo install oha, or give --oha): {e}", oha.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed ({})", oha.display(), out.status));
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("unreadable output of {}: {e}", oha.display()))?;
    let codes = report["statusCodeDistribution"].as_object().cloned().unwrap_or_default();
    let ok = codes.get("200").and_then(|v| v.as_u64()).unwrap_or(0);
    let all: u64 = codes.values().filter_map(|v| v.as_u64()).sum();
    if ok == 0 || ok != all {
        return Err(format!("{url}: not every answer was 200: {}", serde_json::Value::Object(codes)));
    }
    let seconds = |v: &serde_json::Value| v.as_f64().map(|s| s * 1000.0).ok_or_else(|| format!("no latency in {}'s output", oha.display()));
    Ok(Load {
        requests_per_s: report["summary"]["requestsPerSec"].as_f64().ok_or("no requestsPerSec in oha's output")?,
        p50_ms: seconds(&report["latencyPercentiles"]["p50"])?,
        p99_ms: seconds(&report["latencyPercentiles"]["p99"])?,
        requests: ok,
    })
}

fn side(load: &Load, texts: usize) -> serde_json::Value {
    serde_json::json!({
        "requests_per_s": load.requests_per_s,
        "texts_per_s": load.requests_per_s * texts as f64,
        "p50_ms": load.p50_ms,
        "p99_ms": load.p99_ms,
        "requests": load.requests,
    })
}

/// What `bench --mode serve` runs (its flags of `cargo xtask bench`).
pub(crate) struct ServeLoad<'a> {
    pub model: &'a Path,
    pub corpus: &'a Path,
    pub texts_per_request: &'a [usize],
    pub clients: usize,
    pub duration: u64,
    pub batch_size: usize,
    pub compare_infinity: bool,
    pub infinity: Option<PathBuf>,
    pub oha: Option<PathBuf>,
}

/// The rows of `bench --mode serve`, one per `--texts-per-request`.
pub(crate) fn bench_serve(args: &ServeLoad, backend: &str) -> Result<Vec<serde_json::Value>, String> {
    let dir = args.model;
    let oha = args.oha.clone().unwrap_or_else(|| PathBuf::from("oha"));
    let corpus = Corpus::read(args.corpus).map_err(|e| e.to_string())?;
    let most = args.texts_per_request.iter().copied().max().unwrap_or(1);
    let sentences: Vec<String> = corpus.sentences().take(most).map(str::to_string).collect();
    if sentences.len() < most {
        return Err(format!("{}: {} sentences, fewer than --texts-per-request {most}", args.corpus.display(), sentences.len()));
    }
    let model_id = dir.display().to_string();
    let bodies: Vec<(usize, String)> = args.texts_per_request.iter().map(|&n| (n, serde_json::json!({ "input": &sentences[..n], "model": model_id }).to_string())).collect();
    let batch_size = args.batch_size;
    let mut ours = Vec::new();
    {
        let server = start_sesame(dir, backend, batch_size)?;
        for (n, body) in &bodies {
            eprintln!("sesame: {n} texts per request, {} clients, {} s", args.clients, args.duration);
            ours.push(load(&oha, &server.url, body, args.clients, args.duration)?);
        }
    }
    let mut theirs = Vec::new();
    if args.compare_infinity {
        let infinity = args.infinity.clone().or_else(|| std::env::var_os("SESAME_INFINITY").map(PathBuf::from)).unwrap_or_else(|| PathBuf::from("infinity_emb"));
        let server = start_infinity(&infinity, dir, batch_size)?;
        for (n, body) in &bodies {
            eprintln!("infinity-emb: {n} texts per request, {} clients, {} s", args.clients, args.duration);
            theirs.push(load(&oha, &server.url, body, args.clients, args.duration)?);
        }
    }
    Ok(bodies
        .iter()
        .enumerate()
        .map(|(i, (n, _))| {
            let mut row = serde_json::json!({
                "mode": "serve", "backend": backend, "model": model_id, "texts_per_request": n,
                "clients": args.clients, "seconds": args.duration, "batch_size": batch_size, "sesame": side(&ours[i], *n),
            });
            if let Some(t) = theirs.get(i) {
                row["infinity"] = side(t, *n);
                row["texts_per_s_ratio"] = (ours[i].requests_per_s / t.requests_per_s).into();
                row["p99_ratio"] = (ours[i].p99_ms / t.p99_ms).into();
            }
            row
        })
        .collect())
}
