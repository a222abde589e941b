//! `cargo xtask serve` against clients that are not polite: no key or a wrong one, another
//! origin, headers or a body sent too slowly, more connections than allowed, oversized or
//! malformed requests, clients that hang up mid-batch. Each is refused with its status and
//! counted at `/metrics`, and the server keeps answering the others. And what an operator
//! reads of each request: its id, its timing headers, its JSON log line.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::serve_cli::{fill_mask_model, Server};

/// A request with `headers`: the status, one header's value and the JSON answer.
fn send(server: &Server, method: &str, route: &str, headers: &[(&str, &str)], body: Option<&str>) -> (u16, Option<String>, serde_json::Value) {
    let mut request = ureq::request(method, &format!("{}{route}", server.url));
    for (name, value) in headers {
        request = request.set(name, value);
    }
    let sent = match body {
        Some(body) => request.send_string(body),
        None => request.call(),
    };
    let response = match sent {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {route}: {e}"),
    };
    let status = response.status();
    let header = ["www-authenticate", "access-control-allow-origin"].iter().find_map(|h| response.header(h).map(str::to_string));
    let text = response.into_string().unwrap();
    (status, header, serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
}

/// A raw connection to the server.
fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.url.trim_start_matches("http://")).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream
}

/// Everything the server sends on `stream` until it closes it, and how long that took.
fn until_closed(stream: &mut TcpStream) -> (String, Duration) {
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    (String::from_utf8_lossy(&answer).into_owned(), started.elapsed())
}

/// The `/metrics` line of `name{reason="reason"}`.
fn closed(server: &Server, reason: &str, key: &str) -> f64 {
    let (_, _, text) = send(server, "GET", "/metrics", &[("Authorization", &format!("Bearer {key}"))], None);
    let name = format!("sesame_connections_closed_total{{reason=\"{reason}\"}}");
    let text = text.as_str().unwrap().to_string();
    let line = text.lines().find(|l| l.split_whitespace().next() == Some(name.as_str())).unwrap_or_else(|| panic!("no {name} in {text}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn serve_requires_the_api_key_on_every_route_but_health_and_never_shows_it() {
    let key = "s3cret-Key";
    let server = Server::start(&fill_mask_model(), &["--api-key", key]);
    let embed = Some(r#"{"inputs": "a"}"#);
    let json = ("Content-Type", "application/json");
    let (status, challenge, body) = send(&server, "POST", "/embed", &[json], embed);
    assert_eq!((status, challenge.as_deref()), (401, Some("Bearer")), "{body}");
    assert!(body["error"].as_str().unwrap().contains("no API key"), "{body}");
    for wrong in ["Bearer s3cret-Kex", "Bearer s3cret-Key2", "Bearer s3cret", "Basic s3cret-Key", "s3cret-Key", "Bearer  s3cret-Key"] {
        let (status, _, body) = send(&server, "POST", "/embed", &[json, ("Authorization", wrong)], embed);
        assert_eq!(status, 401, "{wrong}: {body}");
        assert!(body["error"].as_str().unwrap().contains("a wrong API key"), "{body}");
    }
    for route in ["/info", "/metrics", "/openapi.json"] {
        assert_eq!(send(&server, "GET", route, &[], None).0, 401, "{route}");
    }
    assert_eq!(send(&server, "GET", "/health", &[], None).0, 200);
    for right in [format!("Bearer {key}"), format!("bearer {key}")] {
        let (status, _, body) = send(&server, "POST", "/embed", &[json, ("Authorization", &right)], embed);
        assert_eq!(status, 200, "{body}");
    }
    let (status, _, info) = send(&server, "GET", "/info", &[("Authorization", &format!("Bearer {key}"))], None);
    assert_eq!(status, 200);
    assert!(!info.to_string().contains(key), "{info}");
    let (_, _, metrics) = send(&server, "GET", "/metrics", &[("Authorization", &format!("Bearer {key}"))], None);
    assert!(metrics.as_str().unwrap().contains("sesame_requests_total{route=\"/embed\",code=\"401\"} 7"), "{metrics}");
    drop(server);

    // The key from the environment, as `SESAME_API_KEY`.
    let server = Server::start_with_env(&fill_mask_model(), &[], &[("SESAME_API_KEY", key)]);
    assert_eq!(send(&server, "POST", "/embed", &[json], embed).0, 401);
    assert_eq!(send(&server, "POST", "/embed", &[json, ("Authorization", &format!("Bearer {key}"))], embed).0, 200);
}

/// `cargo xtask serve` with `flags` that must refuse to start: its stderr.
fn refused(flags: &[&str]) -> String {
    let model = fill_mask_model();
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["serve", "--model", model.to_str().unwrap(), "--port", "0"])
        .args(flags)
        .env_remove("SESAME_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("{flags:?} started");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "{flags:?} exited 0");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn serve_refuses_to_listen_beyond_loopback_without_a_key_unless_told() {
    let stderr = refused(&["--host", "0.0.0.0"]);
    assert!(stderr.contains("--host 0.0.0.0 is not a loopback address") && stderr.contains("--api-key") && stderr.contains("--no-api-key"), "{stderr}");
    let stderr = refused(&["--api-key", ""]);
    assert!(stderr.contains("--api-key is empty"), "{stderr}");
    let stderr = refused(&["--api-key", "two words"]);
    assert!(stderr.contains("--api-key holds a space"), "{stderr}");
    assert!(!stderr.contains("two words"), "the key is shown: {stderr}");
    let stderr = refused(&["--cors-allow-origin", "example.com"]);
    assert!(stderr.contains("--cors-allow-origin `example.com` is not an origin"), "{stderr}");
    // Loopback by name is loopback; an open server beyond it is the operator's choice.
    let server = Server::start(&fill_mask_model(), &["--host", "localhost"]);
    assert_eq!(server.post("/embed", r#"{"inputs": "a"}"#).0, 200);
    let server = Server::start(&fill_mask_model(), &["--host", "0.0.0.0", "--no-api-key"]);
    assert_eq!(server.get("/health").0, 200);
}

#[test]
fn serve_allows_cross_origin_calls_only_from_the_listed_origins() {
    let allowed = "https://app.example.com";
    let preflight = |server: &Server, origin: &str| {
        let headers = [("Origin", origin), ("Access-Control-Request-Method", "POST"), ("Access-Control-Request-Headers", "content-type,authorization")];
        send(server, "OPTIONS", "/embed", &headers, None)
    };
    let server = Server::start(&fill_mask_model(), &["--cors-allow-origin", &format!("{allowed},http://localhost:8080"), "--api-key", "k"]);
    // The preflight carries no key; the call itself does.
    let (status, origin, _) = preflight(&server, allowed);
    assert_eq!((status, origin.as_deref()), (200, Some(allowed)));
    let (_, origin, _) = preflight(&server, "https://evil.example.com");
    assert_eq!(origin, None);
    let call = [("Origin", allowed), ("Content-Type", "application/json"), ("Authorization", "Bearer k")];
    let (status, origin, _) = send(&server, "POST", "/embed", &call, Some(r#"{"inputs": "a"}"#));
    assert_eq!((status, origin.as_deref()), (200, Some(allowed)));
    drop(server);
    // By default, no origin is allowed.
    let server = Server::start(&fill_mask_model(), &[]);
    let (_, origin, _) = preflight(&server, allowed);
    assert_eq!(origin, None);
    let (status, origin, _) = send(&server, "POST", "/embed", &[("Origin", allowed), ("Content-Type", "application/json")], Some(r#"{"inputs": "a"}"#));
    assert_eq!((status, origin), (200, None));
}

#[test]
fn serve_closes_connections_whose_headers_come_too_slowly_or_idle_past_the_timeout() {
    let server = Server::start(&fill_mask_model(), &["--header-read-timeout", "1", "--body-read-timeout", "1", "--api-key", "k"]);
    // Half a request head, then nothing: closed after the timeout, not held.
    let mut slow = connect(&server);
    write!(slow, "POST /embed HTTP/1.1\r\nHost: x\r\nContent-Ty").unwrap();
    let (_, took) = until_closed(&mut slow);
    assert!(took < Duration::from_secs(5), "held for {took:?}");
    // A kept-alive connection left idle after its answer is closed as well.
    let mut idle = connect(&server);
    write!(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (answer, took) = until_closed(&mut idle);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(5), "closed after {took:?}");
    // Counted once the server's side of each connection has ended.
    let started = Instant::now();
    while closed(&server, "header_timeout", "k") < 2.0 {
        assert!(started.elapsed() < Duration::from_secs(10), "the timeouts were never counted");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A body that stops short: 408 once the body timeout passes.
    let mut short = connect(&server);
    write!(short, "POST /embed HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{{\"inputs\"").unwrap();
    let (answer, took) = until_closed(&mut short);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--body-read-timeout 1 s"), "{answer}");
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    // Polite clients are still answered.
    let (status, _, _) = send(&server, "POST", "/embed", &[("Content-Type", "application/json"), ("Authorization", "Bearer k")], Some(r#"{"inputs": "a"}"#));
    assert_eq!(status, 200);
}

#[test]
fn serve_answers_503_past_max_connections_only_when_all_are_busy() {
    let server = Server::start(&fill_mask_model(), &["--max-connections", "2", "--max-concurrent-requests", "8"]);
    // Two clients in the middle of sending their bodies: both connections are busy. Each waits
    // for the server's `100 Continue`, sent once the handler reads the body, so that neither is
    // still an unread (idle) head when the probes below arrive.
    let busy: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = connect(&server);
            write!(stream, "POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\nExpect: 100-continue\r\n\r\n").unwrap();
            let mut line = String::new();
            BufReader::new(&stream).read_line(&mut line).unwrap();
            assert!(line.starts_with("HTTP/1.1 100"), "{line}");
            write!(stream, "{{\"inputs\"").unwrap();
            stream
        })
        .collect();
    let started = Instant::now();
    let (status, _, body) = loop {
        let answer = send(&server, "GET", "/health", &[], None);
        if answer.0 == 503 || started.elapsed() > Duration::from_secs(10) {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status, 503, "{body}");
    assert!(body["error"].as_str().unwrap().contains("--max-connections"), "{body}");
    drop(busy);
    let started = Instant::now();
    while send(&server, "GET", "/health", &[], None).0 != 200 {
        assert!(started.elapsed() < Duration::from_secs(10), "the connections were never freed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.counter("sesame_connections_closed_total{reason=\"max_connections\"}") >= 1.0);
}

#[test]
fn serve_makes_room_for_new_clients_by_closing_idle_connections_past_max_connections() {
    let server = Server::start(&fill_mask_model(), &["--max-connections", "8"]);
    // Forty connections that hold a place without using it: silent, halfway through a request
    // head, or kept alive after an answer.
    let mut idle = Vec::new();
    for i in 0..40 {
        let mut stream = connect(&server);
        match i {
            0..4 => {
                write!(stream, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
                let mut line = String::new();
                BufReader::new(&stream).read_line(&mut line).unwrap();
                assert!(line.starts_with("HTTP/1.1 200"), "{line}");
            }
            _ if i % 2 == 0 => write!(stream, "GET /health HTTP/1.1\r\nHo").unwrap(),
            _ => {}
        }
        idle.push(stream);
    }
    // Each new client is answered at once, well before the header timeout (10 s).
    for _ in 0..5 {
        let started = Instant::now();
        let (status, body) = server.post("/embed", r#"{"inputs": "a"}"#);
        assert_eq!(status, 200, "{body}");
        assert!(started.elapsed() < Duration::from_secs(3), "answered after {:?}", started.elapsed());
    }
    assert!(server.counter("sesame_connections_closed_total{reason=\"evicted_idle\"}") >= 5.0);
    assert!(server.counter("sesame_connections_open") <= 8.0);
    drop(idle);
}

#[test]
fn serve_refuses_oversized_and_malformed_requests_with_their_status() {
    let server = Server::start(&fill_mask_model(), &["--payload-limit", "2000", "--auto-truncate"]);
    // Headers past the server's limit: 431 and closed (the client may see only the close,
    // as the kernel resets a connection closed with its bytes unread), and the server goes on.
    let mut big = connect(&server);
    let _ = write!(big, "GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\n\r\n", "a".repeat(100_000));
    let (answer, took) = until_closed(&mut big);
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert!(took < Duration::from_secs(5), "held for {took:?}");
    // Counted once the server's side of the connection has ended.
    let started = Instant::now();
    while server.counter("sesame_connections_closed_total{reason=\"head_too_large\"}") != 1.0 {
        assert!(started.elapsed() < Duration::from_secs(10), "the 431 was never counted");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Another content type: 415, naming it.
    let (status, _, body) = send(&server, "POST", "/embed", &[("Content-Type", "text/plain")], Some(r#"{"inputs": "a"}"#));
    assert_eq!(status, 415, "{body}");
    assert!(body["error"].as_str().unwrap().contains("text/plain"), "{body}");
    // Invalid UTF-8 and JSON nested past serde_json's depth: 422, naming the body.
    let mut bad = connect(&server);
    let mut request = b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 16\r\nConnection: close\r\n\r\n".to_vec();
    request.extend_from_slice(b"{\"inputs\": \"\xff\xfe\"}");
    bad.write_all(&request).unwrap();
    let (answer, _) = until_closed(&mut bad);
    assert!(answer.starts_with("HTTP/1.1 422"), "{answer}");
    let deep = format!("{{\"inputs\": {}\"a\"{}}}", "[".repeat(200), "]".repeat(200));
    let (status, body) = server.post("/embed", &deep);
    assert_eq!(status, 422, "{body}");
    // A chunked body growing past --payload-limit: 413 without reading it all.
    let mut chunked = connect(&server);
    write!(chunked, "POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
    let chunk = "a".repeat(1000);
    let mut sent = 0;
    let answer = loop {
        if write!(chunked, "{:x}\r\n{chunk}\r\n", chunk.len()).is_err() || sent > 1_000_000 {
            break until_closed(&mut chunked).0;
        }
        sent += chunk.len();
        if sent == 3000 {
            chunked.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut line = String::new();
            let _ = BufReader::new(&chunked).read_line(&mut line);
            break line;
        }
    };
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // With --auto-truncate a long input is cut to the model's length, as `truncate` does.
    let long = serde_json::json!({ "inputs": vec!["cat"; 60].join(" ") }).to_string();
    let (status, auto) = server.post("/embed", &long);
    assert_eq!(status, 200, "{auto}");
    let asked = long.replace("}", ", \"truncate\": true}");
    assert_eq!(server.post("/embed", &asked).1, auto);
    assert_eq!(server.counter("sesame_panics_total"), 0.0);
}

#[test]
fn serve_gives_each_request_an_id_and_tei_s_timing_headers_and_logs_them_as_json() {
    let server = Server::start(&fill_mask_model(), &["--json-output"]);
    let text = "the cat sat on the mat";
    let embed = |id: Option<&str>| {
        let mut request = ureq::post(&format!("{}/embed", server.url)).set("Content-Type", "application/json");
        if let Some(id) = id {
            request = request.set("x-request-id", id);
        }
        let response = request.send_string(&serde_json::json!({ "inputs": text }).to_string()).unwrap();
        let header = |name: &str| response.header(name).unwrap_or_else(|| panic!("no {name}")).to_string();
        let ms = |name: &str| header(name).parse::<u64>().unwrap_or_else(|e| panic!("{name}: {e}"));
        let id = header("x-request-id");
        let (total, tokens, characters) = (ms("x-compute-time"), ms("x-compute-tokens"), ms("x-compute-characters"));
        assert!(total >= ms("x-inference-time") && total >= ms("x-queue-time") && total >= ms("x-tokenization-time"));
        (id, tokens, characters)
    };
    let (id, tokens, characters) = embed(Some("client-42"));
    assert_eq!(id, "client-42");
    assert_eq!(characters, text.len() as u64);
    // The tokens are those OpenAI's route reports as usage: the model's, special ones included.
    let (_, usage) = server.post("/v1/embeddings", &serde_json::json!({ "input": text }).to_string());
    assert_eq!(tokens, usage["usage"]["prompt_tokens"].as_u64().unwrap());
    // Without an id, or with one that cannot be echoed, each request gets its own.
    let (a, _, _) = embed(None);
    let (b, _, _) = embed(Some(&"x".repeat(200)));
    assert!(a != b && !a.is_empty() && b.len() < 100, "{a} {b}");
    // Routes that run no model carry the id only.
    let health = ureq::get(&format!("{}/health", server.url)).call().unwrap();
    assert!(health.header("x-request-id").is_some() && health.header("x-compute-time").is_none());
    // One JSON line per request, with the same id and numbers.
    let started = Instant::now();
    let line = loop {
        let lines = server.stderr.lock().unwrap().clone();
        if let Some(line) = lines.iter().find(|l| l.contains("client-42")) {
            break line.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no log line: {lines:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let log: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!((log["route"].as_str(), log["status"].as_u64(), log["tokens"].as_u64()), (Some("/embed"), Some(200), Some(tokens)), "{log}");
    assert!(log["inference_ms"].as_f64().unwrap() > 0.0, "{log}");
    // A latency histogram per route: every /embed request counted once, in nested buckets.
    let histogram = |suffix: &str| server.counter(&format!("sesame_request_duration_seconds{suffix}"));
    assert_eq!(histogram("_count{route=\"/embed\"}"), 3.0);
    assert_eq!(histogram("_bucket{route=\"/embed\",le=\"+Inf\"}"), 3.0);
    let buckets: Vec<f64> = ["0.001", "0.01", "0.1", "1", "30"].iter().map(|le| histogram(&format!("_bucket{{route=\"/embed\",le=\"{le}\"}}"))).collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]) && buckets[4] == 3.0, "{buckets:?}");
    assert!(histogram("_sum{route=\"/embed\"}") > 0.0);
    assert_eq!(histogram("_count{route=\"/v1/embeddings\"}"), 1.0);
}

#[test]
fn serve_answers_the_other_requests_of_a_batch_whose_clients_hung_up() {
    let server = Server::start(&fill_mask_model(), &[]);
    let texts: Vec<String> = (0..8).map(|i| format!("sentence number {i} about a cat")).collect();
    let body = |text: &str| serde_json::json!({ "inputs": text }).to_string();
    let alone: Vec<serde_json::Value> = texts.iter().map(|t| server.post("/embed", &body(t)).1).collect();
    let many = serde_json::json!({ "inputs": vec![["a long text about nothing"; 6].join(" "); 32] }).to_string();
    let running = "sesame_requests_abandoned_total{when=\"running\"}";
    // Clients that send many texts and leave after a moment, among clients that wait for
    // their answers, until clients have left while their batch ran (the batch thread then
    // sends to a closed channel) often enough that waiting clients shared their batches.
    let server = &server;
    for round in 0.. {
        assert!(round < 100, "clients left mid-batch only {} times", server.counter(running));
        std::thread::scope(|scope| {
            for client in 0..16usize {
                let (many, texts, alone) = (&many, &texts, &alone);
                scope.spawn(move || {
                    for j in 0..8usize {
                        if (client + j) % 2 == 0 {
                            let mut gone = connect(server);
                            let _ = write!(gone, "POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{many}", many.len());
                            std::thread::sleep(Duration::from_micros(200 * ((client * 7 + j * 3) % 10) as u64));
                            continue;
                        }
                        let i = (client + j) % texts.len();
                        let (status, vectors) = server.post("/embed", &body(&texts[i]));
                        assert_eq!(status, 200, "{vectors}");
                        let (a, b) = (vectors[0].as_array().unwrap(), alone[i][0].as_array().unwrap());
                        let diff = a.iter().zip(b).map(|(x, y)| (x.as_f64().unwrap() - y.as_f64().unwrap()).abs()).fold(0.0, f64::max);
                        assert!(diff < 1e-5, "{diff}");
                    }
                });
            }
        });
        if server.counter(running) >= 20.0 {
            break;
        }
    }
    assert_eq!(server.counter("sesame_panics_total"), 0.0);
    assert_eq!(server.get("/health").0, 200);
}
