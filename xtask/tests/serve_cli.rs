//! `cargo xtask serve` over loopback, with an HTTP client: every route gives what the CLI
//! gives for the same texts, concurrent requests get exactly their own results, and bad
//! requests get their status and a message naming what is wrong.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A running `cargo xtask serve`, killed when dropped.
pub(crate) struct Server {
    pub child: Child,
    pub url: String,
    /// What it wrote on stderr after listening, line by line.
    pub stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// Serve `model` on a free port with `flags`; waits until it listens.
    pub fn start(model: &Path, flags: &[&str]) -> Server {
        Self::start_with_env(model, flags, &[])
    }

    /// [`Server::start`] with environment variables set.
    pub fn start_with_env(model: &Path, flags: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["serve", "--model", model.to_str().unwrap(), "--port", "0"])
            .args(flags)
            .env_remove("SESAME_API_KEY")
            .envs(env.iter().copied())
            .current_dir(repo())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        let url = loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                panic!("the server exited before listening: {seen}");
            }
            if let Some(rest) = line.trim().strip_prefix("listening on ") {
                break rest.split_whitespace().next().unwrap().to_string();
            }
            seen.push_str(&line);
        };
        // Keep reading its stderr, so that it never blocks on a full pipe.
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = lines.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        Server { child, url, stderr: lines }
    }

    /// POST `body` to `route`: the status and the JSON answer.
    pub fn post(&self, route: &str, body: &str) -> (u16, serde_json::Value) {
        let response = match ureq::post(&format!("{}{route}", self.url)).set("Content-Type", "application/json").send_string(body) {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{route}: {e}"),
        };
        let status = response.status();
        (status, response.into_json().unwrap())
    }

    /// GET `route`: the status and the body.
    pub fn get(&self, route: &str) -> (u16, String) {
        let response = ureq::get(&format!("{}{route}", self.url)).call().unwrap();
        (response.status(), response.into_string().unwrap())
    }

    /// The value of counter `name` at `/metrics`.
    pub fn counter(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics");
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("no {name} in {text}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run the CLI; its stdout as JSON.
fn cli(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).current_dir(repo()).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn vectors(value: &serde_json::Value) -> Vec<Vec<f32>> {
    serde_json::from_value(value.clone()).unwrap()
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).flat_map(|(x, y)| {
        assert_eq!(x.len(), y.len());
        x.iter().zip(y).map(|(p, q)| (p - q).abs())
    }).fold(0.0, f32::max)
}

const TEXTS: [&str; 6] = ["the sun", "a much longer sentence about the cat that sat on the mat", "hello world", "x", "the cat sat on the mat .", "the dog ran"];

pub(crate) fn fill_mask_model() -> PathBuf {
    repo().join("fixtures/bert/base-fill-mask")
}

#[test]
fn serve_embeds_as_the_cli_does_and_gives_each_concurrent_request_its_own_vectors() {
    let model = fill_mask_model();
    let reference = vectors(&cli(&[&["embed", "--normalize", "--model", model.to_str().unwrap()][..], &TEXTS].concat()));
    let server = Server::start(&model, &[]);
    assert_eq!(server.get("/health").0, 200);

    // One request with every text: TEI's /embed normalises by default.
    let (status, all) = server.post("/embed", &serde_json::json!({ "inputs": TEXTS }).to_string());
    assert_eq!(status, 200, "{all}");
    assert!(max_diff(&vectors(&all), &reference) < 1e-5, "/embed against `embed --normalize`");

    // Many clients at once, each with its own mix of texts: every answer is its own texts'.
    let requests: Vec<Vec<usize>> = (0..48).map(|i| (0..1 + i % 3).map(|j| (i * 5 + j * 7) % TEXTS.len()).collect()).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = requests
            .chunks(6)
            .map(|chunk| {
                let (server, reference) = (&server, &reference);
                scope.spawn(move || {
                    for rows in chunk {
                        let texts: Vec<&str> = rows.iter().map(|&r| TEXTS[r]).collect();
                        let (status, got) = server.post("/embed", &serde_json::json!({ "inputs": texts }).to_string());
                        assert_eq!(status, 200, "{got}");
                        let want: Vec<Vec<f32>> = rows.iter().map(|&r| reference[r].clone()).collect();
                        assert!(max_diff(&vectors(&got), &want) < 1e-5, "a request for {texts:?} got other vectors");
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
    });
    let texts: usize = requests.iter().map(Vec::len).sum::<usize>() + TEXTS.len();
    assert_eq!(server.counter("sesame_batch_inputs_total"), texts as f64);
    assert_eq!(server.counter("sesame_queued_requests_total"), (requests.len() + 1) as f64);
    assert_eq!(server.counter("sesame_panics_total"), 0.0);
    // Requests that arrived while a batch ran were run together.
    let batches = server.counter("sesame_batches_total");
    assert!(batches < (requests.len() + 1) as f64, "{batches} batches for {} requests: none were batched together", requests.len() + 1);

    // A single string gets one vector in a list; unnormalised and cut vectors as asked.
    let (_, one) = server.post("/embed", r#"{"inputs": "hello world", "normalize": false}"#);
    let raw = vectors(&one);
    assert_eq!(raw.len(), 1);
    let norm = raw[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() > 1e-3, "normalize: false gave a unit vector");
    let (_, cut) = server.post("/embed", r#"{"inputs": ["hello world"], "dimensions": 8}"#);
    let cut = vectors(&cut);
    assert_eq!(cut[0].len(), 8);
    assert!((cut[0].iter().map(|x| x * x).sum::<f32>().sqrt() - 1.0).abs() < 1e-5);
}

#[test]
fn serve_answers_openai_embeddings_in_floats_and_base64() {
    use base64::Engine as _;
    let model = fill_mask_model();
    let reference = vectors(&cli(&[&["embed", "--normalize", "--model", model.to_str().unwrap()][..], &TEXTS[..2]].concat()));
    let server = Server::start(&model, &[]);
    let (status, floats) = server.post("/v1/embeddings", &serde_json::json!({ "input": &TEXTS[..2], "model": "m" }).to_string());
    assert_eq!(status, 200, "{floats}");
    assert_eq!(floats["object"], "list");
    let got: Vec<Vec<f32>> = floats["data"].as_array().unwrap().iter().map(|d| serde_json::from_value(d["embedding"].clone()).unwrap()).collect();
    assert!(max_diff(&got, &reference) < 1e-5);
    assert_eq!(floats["data"][1]["index"], 1);
    let tokens = floats["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(tokens >= 4 && floats["usage"]["total_tokens"].as_u64() == Some(tokens), "{floats}");

    let (_, encoded) = server.post("/v1/embeddings", &serde_json::json!({ "input": TEXTS[1], "encoding_format": "base64" }).to_string());
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded["data"][0]["embedding"].as_str().unwrap()).unwrap();
    let decoded: Vec<f32> = bytes.chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert!(max_diff(&[decoded], &reference[1..]) < 1e-5);
}

/// The official `openai` Python client (PyPI), as a user points it at a server with a key:
/// its embeddings (which it asks for in base64 and decodes) are `embed --normalize`'s, and
/// with a wrong key it raises its `AuthenticationError` (401).
#[test]
fn serve_answers_the_official_openai_client_given_the_key_and_refuses_it_without() {
    let Some(python) = sesame_tests::python() else { return };
    let model = fill_mask_model();
    let reference = vectors(&cli(&[&["embed", "--normalize", "--model", model.to_str().unwrap()][..], &TEXTS].concat()));
    let server = Server::start(&model, &["--api-key", "k3y-for-tests"]);
    let script = r#"
import json, sys
import openai
from openai import OpenAI
texts = json.loads(sys.argv[2])
try:
    OpenAI(base_url=sys.argv[1] + "/v1", api_key="wrong-key", max_retries=0).embeddings.create(model="sesame", input=texts)
    refused = None
except openai.AuthenticationError as e:
    refused = e.status_code
client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="k3y-for-tests")
response = client.embeddings.create(model="sesame", input=texts)
print(json.dumps({"vectors": [d.embedding for d in response.data], "tokens": response.usage.prompt_tokens, "refused": refused}))
"#;
    let out = Command::new(python).args(["-c", script, &server.url, &serde_json::json!(TEXTS).to_string()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(max_diff(&vectors(&answer["vectors"]), &reference) < 1e-5, "the openai client's embeddings against `embed --normalize`");
    assert!(answer["tokens"].as_u64().unwrap() > TEXTS.len() as u64);
    assert_eq!(answer["refused"], 401, "a wrong key: {answer}");
}

/// The fixture's head with the fill-mask fixture's tokenizer, in a directory of its own.
pub(crate) fn with_tokenizer(fixture: &str) -> sesame_tests::Scratch {
    // Tests run in parallel, some on one fixture: each call has its own directory.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = sesame_tests::Scratch::dir(&format!("serve-{}-{call}", fixture.replace('/', "-")));
    for from in [repo().join("fixtures").join(fixture), fill_mask_model()] {
        for f in ["config.json", "generation_config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json"] {
            if from.join(f).is_file() && !dir.join(f).is_file() {
                std::fs::copy(from.join(f), dir.join(f)).unwrap();
            }
        }
    }
    dir
}

#[test]
fn serve_classifies_and_tags_as_the_cli_does() {
    let classifier = with_tokenizer("bert/base-seqcls-single");
    let server = Server::start(&classifier, &[]);
    let want = cli(&[&["classify", "--model", classifier.to_str().unwrap()][..], &TEXTS].concat());
    let (status, got) = server.post("/predict", &serde_json::json!({ "inputs": TEXTS }).to_string());
    assert_eq!(status, 200, "{got}");
    for (g, w) in got.as_array().unwrap().iter().zip(want.as_array().unwrap()) {
        // TEI's shape: every label with its score, most likely first.
        assert_eq!(g[0]["label"], w["label"]);
        for (gs, ws) in g.as_array().unwrap().iter().zip(w["scores"].as_array().unwrap()) {
            assert_eq!(gs["label"], ws["label"]);
            assert!((gs["score"].as_f64().unwrap() - ws["score"].as_f64().unwrap()).abs() < 1e-6, "{g} against {w}");
        }
    }
    let (_, one) = server.post("/predict", r#"{"inputs": "hello world"}"#);
    assert!(one.as_array().unwrap()[0].is_object(), "a single input gets one list of labels: {one}");
    assert_eq!(server.post("/embed", r#"{"inputs": "a"}"#).0, 400, "a classifier serves no embeddings");
    drop(server);
    std::fs::remove_dir_all(&classifier).unwrap();

    let tagger = with_tokenizer("bert/base-token-classification");
    let server = Server::start(&tagger, &[]);
    let want = cli(&[&["tag", "--model", tagger.to_str().unwrap()][..], &TEXTS].concat());
    let (status, got) = server.post("/tag", &serde_json::json!({ "inputs": TEXTS }).to_string());
    assert_eq!(status, 200, "{got}");
    assert_eq!(got, want, "/tag against `tag`");
    drop(server);
    std::fs::remove_dir_all(&tagger).unwrap();
}

/// A one-label classifier (a cross-encoder) ranks texts against a query: `/rerank` gives each
/// text the score `/predict` gives its pair with the query, most relevant first.
#[test]
fn serve_reranks_texts_by_the_score_of_their_pair_with_the_query() {
    let model = with_tokenizer("bert/base-seqcls-regression");
    let server = Server::start(&model, &[]);
    let query = "where did the cat sit";
    let pairs: Vec<[&str; 2]> = TEXTS.iter().map(|t| [query, *t]).collect();
    let (status, predicted) = server.post("/predict", &serde_json::json!({ "inputs": pairs }).to_string());
    assert_eq!(status, 200, "{predicted}");
    let scores: Vec<f64> = predicted.as_array().unwrap().iter().map(|p| p[0]["score"].as_f64().unwrap()).collect();
    let (_, alone) = server.post("/predict", &serde_json::json!({ "inputs": TEXTS }).to_string());
    assert!(alone.as_array().unwrap().iter().zip(&scores).any(|(a, s)| (a[0]["score"].as_f64().unwrap() - s).abs() > 1e-4), "pairs scored as the texts alone");

    let (status, ranks) = server.post("/rerank", &serde_json::json!({ "query": query, "texts": TEXTS, "return_text": true }).to_string());
    assert_eq!(status, 200, "{ranks}");
    let ranks = ranks.as_array().unwrap();
    assert_eq!(ranks.len(), TEXTS.len());
    for (k, rank) in ranks.iter().enumerate() {
        let i = rank["index"].as_u64().unwrap() as usize;
        assert!((rank["score"].as_f64().unwrap() - scores[i]).abs() < 1e-6, "{rank} against /predict's {}", scores[i]);
        assert_eq!(rank["text"], TEXTS[i]);
        if k > 0 {
            assert!(ranks[k - 1]["score"].as_f64() >= rank["score"].as_f64(), "not most relevant first: {ranks:?}");
        }
    }
    let (status, error) = server.post("/predict", r#"{"inputs": [["a", "b", "c"]]}"#);
    assert_eq!(status, 422, "{error}");
    assert!(error["error"].as_str().unwrap().contains("`inputs[0]`"), "{error}");
    drop(server);
    std::fs::remove_dir_all(&model).unwrap();

    // A classifier of several labels does not rerank.
    let model = with_tokenizer("bert/base-seqcls-single");
    let server = Server::start(&model, &[]);
    let (status, error) = server.post("/rerank", r#"{"query": "a", "texts": ["b"]}"#);
    assert_eq!(status, 400, "{error}");
    assert!(error["error"].as_str().unwrap().contains("one label"), "{error}");
    drop(server);
    std::fs::remove_dir_all(&model).unwrap();
}

#[test]
fn serve_fills_masks_and_answers_questions_as_the_cli_does() {
    let model = fill_mask_model();
    let texts = ["the cat [MASK] on the mat", "the [MASK] sat on the [MASK] ."];
    let want = cli(&[&["fill-mask", "--model", model.to_str().unwrap()][..], &texts].concat());
    let server = Server::start(&model, &["--task", "fill-mask"]);
    let (status, got) = server.post("/fill-mask", &serde_json::json!({ "inputs": texts }).to_string());
    assert_eq!(status, 200, "{got}");
    assert_eq!(got, want, "/fill-mask against `fill-mask`");
    let (_, two) = server.post("/fill-mask", r#"{"inputs": "the cat [MASK] on the mat", "top_k": 2}"#);
    assert_eq!(two.as_array().unwrap()[0].as_array().unwrap().len(), 2, "{two}");
    let (status, error) = server.post("/fill-mask", r#"{"inputs": ["the cat sat"]}"#);
    assert_eq!(status, 422, "{error}");
    assert!(error["error"].as_str().unwrap().contains("no `[MASK]` token"), "{error}");
    assert_eq!(server.post("/fill-mask", r#"{"inputs": "a [MASK]", "top_k": 21}"#).0, 422);
    drop(server);

    let reader = with_tokenizer("bert/base-qa");
    let context = "the cat sat on the mat while the dog ran";
    let questions = ["who sat on the mat", "what did the dog do"];
    let want = cli(&[&["answer", "--model", reader.to_str().unwrap(), "--context", context][..], &questions].concat());
    let server = Server::start(&reader, &[]);
    let (status, got) = server.post("/answer", &serde_json::json!({ "question": questions, "context": context }).to_string());
    assert_eq!(status, 200, "{got}");
    assert_eq!(got, want, "/answer against `answer`");
    let (status, error) = server.post("/answer", &serde_json::json!({ "question": "who", "context": " " }).to_string());
    assert_eq!(status, 422, "{error}");
    drop(server);
    std::fs::remove_dir_all(&reader).unwrap();
}

/// The ids `generate` prints for one text, after the prompt of `skip` tokens.
fn generated_ids(model: &Path, text: &str, flags: &[&str], skip: usize) -> Vec<u64> {
    let out = cli(&[&["generate", "--model", model.to_str().unwrap(), text][..], flags].concat());
    out["sequences"][0].as_array().unwrap()[skip..].iter().map(|t| t.as_u64().unwrap()).collect()
}

/// The JSON of each server-sent event of a `/generate_stream` answer.
fn events(server: &Server, body: &serde_json::Value) -> Vec<serde_json::Value> {
    let response = ureq::post(&format!("{}/generate_stream", server.url)).set("Content-Type", "application/json").send_string(&body.to_string()).unwrap();
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    let text = response.into_string().unwrap();
    text.lines().filter_map(|l| l.strip_prefix("data:")).map(|d| serde_json::from_str(d.trim()).unwrap()).collect()
}

/// `/generate` writes what `cargo xtask generate` writes, for an encoder-decoder (BART, the
/// model's own settings: greedy, forced end) and a left-to-right model (XLNet), and
/// `/generate_stream` sends the same tokens one event each, the last with the text.
#[test]
fn serve_generates_as_the_cli_does_and_streams_the_same_tokens() {
    for (fixture, prompt_len) in [("bart/base-generation", 1), ("xlnet/generation", 4)] {
        let model = with_tokenizer(fixture);
        let text = "the cat sat";
        let want = generated_ids(&model, text, &["--max-new-tokens", "7"], prompt_len);
        let server = Server::start(&model, &[]);
        let body = serde_json::json!({ "inputs": text, "parameters": { "max_new_tokens": 7, "details": true } });
        let (status, got) = server.post("/generate", &body.to_string());
        assert_eq!(status, 200, "{got}");
        let tokens = got["details"]["tokens"].as_array().unwrap();
        let ids: Vec<u64> = tokens.iter().map(|t| t["id"].as_u64().unwrap()).collect();
        assert_eq!(ids, want, "{fixture}: /generate against `generate`");
        assert_eq!(got["details"]["generated_tokens"], want.len());
        let pieces: String = tokens.iter().map(|t| t["text"].as_str().unwrap()).collect();
        assert_eq!(got["generated_text"], pieces.trim_start(), "{fixture}: the text is its tokens' pieces");
        assert!(tokens.iter().all(|t| t["logprob"].as_f64().unwrap() <= 0.0), "{got}");
        let reason = if want.last() == Some(&2) { "eos_token" } else { "length" };
        assert_eq!(got["details"]["finish_reason"], reason, "{got}");

        let streamed = events(&server, &body);
        let ids: Vec<u64> = streamed.iter().map(|e| e["token"]["id"].as_u64().unwrap()).collect();
        assert_eq!(ids, want, "{fixture}: streamed tokens");
        assert!(streamed[..streamed.len() - 1].iter().all(|e| e["generated_text"].is_null()));
        let last = streamed.last().unwrap();
        assert_eq!(last["generated_text"], got["generated_text"]);
        assert_eq!(last["details"]["finish_reason"], reason);
        assert_eq!(last["index"], want.len());

        // TGI's compatible route, both ways, and the prompt first when asked.
        let (_, compat) = server.post("/", &body.to_string());
        assert_eq!(compat["generated_text"], got["generated_text"]);
        let full = serde_json::json!({ "inputs": text, "parameters": { "max_new_tokens": 7, "return_full_text": true } });
        let (_, full) = server.post("/generate", &full.to_string());
        assert_eq!(full["generated_text"].as_str().unwrap(), format!("{text}{}", got["generated_text"].as_str().unwrap()));
        drop(server);
        std::fs::remove_dir_all(&model).unwrap();
    }
}

/// Sampling with a seed draws what `generate --do-sample --seed` draws; a stop sequence ends the
/// search as soon as the text holds it.
#[test]
fn serve_samples_with_the_request_s_seed_and_stops_at_a_stop_sequence() {
    let model = with_tokenizer("xlnet/generation");
    let text = "the cat sat";
    let want = generated_ids(&model, text, &["--max-new-tokens", "12", "--do-sample", "--top-k", "0", "--seed", "7"], 4);
    let server = Server::start(&model, &[]);
    let sample = serde_json::json!({ "inputs": text, "parameters": { "max_new_tokens": 12, "do_sample": true, "top_k": 0, "seed": 7, "details": true } });
    let (status, got) = server.post("/generate", &sample.to_string());
    assert_eq!(status, 200, "{got}");
    let ids: Vec<u64> = got["details"]["tokens"].as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, want, "sampled tokens against `generate --do-sample --seed 7`");
    assert_eq!(got["details"]["seed"], 7);

    let greedy = serde_json::json!({ "inputs": text, "parameters": { "max_new_tokens": 12, "details": true } });
    let (_, all) = server.post("/generate", &greedy.to_string());
    let tokens = all["details"]["tokens"].as_array().unwrap();
    assert!(tokens.len() > 3, "{all}");
    // The text of the first three tokens is the stop sequence: the search ends at the third.
    let stop: String = tokens[..3].iter().map(|t| t["text"].as_str().unwrap()).collect();
    let stop = stop.trim_start().to_string();
    let stopped = serde_json::json!({ "inputs": text, "parameters": { "max_new_tokens": 12, "details": true, "stop": [stop] } });
    let (_, got) = server.post("/generate", &stopped.to_string());
    assert_eq!(got["details"]["finish_reason"], "stop_sequence", "{got}");
    assert!(got["details"]["generated_tokens"].as_u64().unwrap() <= 3, "{got}");
    assert!(got["generated_text"].as_str().unwrap().ends_with(&stop), "{got}");
    drop(server);
    std::fs::remove_dir_all(&model).unwrap();
}

/// Generations that wait together run as one search: behind a long generation, four requests
/// of one prompt length with their own settings (greedy, a 3-token cut, seeded sampling, another
/// prompt) and one of another length queue; when the long one's client hangs up, the four run
/// as one batch and the other after it, and each answer is what that request gets alone.
#[test]
fn serve_runs_waiting_generations_as_one_search_each_answered_as_alone() {
    let model = with_tokenizer("xlnet/generation");
    let server = Server::start(&model, &[]);
    let addr = server.url.trim_start_matches("http://").to_string();
    let bodies = [
        serde_json::json!({ "inputs": "the cat sat", "parameters": { "max_new_tokens": 9, "details": true } }),
        serde_json::json!({ "inputs": "the dog sat", "parameters": { "max_new_tokens": 3, "details": true } }),
        serde_json::json!({ "inputs": "the cat sat", "parameters": { "max_new_tokens": 12, "do_sample": true, "top_k": 0, "seed": 7, "details": true } }),
        serde_json::json!({ "inputs": "a cat sat", "parameters": { "max_new_tokens": 6, "repetition_penalty": 1.5, "details": true } }),
        serde_json::json!({ "inputs": "the cat sat on the mat", "parameters": { "max_new_tokens": 5, "details": true } }),
    ];
    let long = serde_json::json!({ "inputs": "the cat sat", "parameters": { "max_new_tokens": 20000, "min_new_tokens": 20000 } }).to_string();
    let mut client = std::net::TcpStream::connect(&addr).unwrap();
    write!(client, "POST /generate_stream HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{long}", long.len()).unwrap();
    let mut reader = BufReader::new(&client);
    let mut line = String::new();
    while !line.starts_with("data:") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended before its first token");
    }
    let together: Vec<(u16, serde_json::Value)> = std::thread::scope(|s| {
        let server = &server;
        let answers: Vec<_> = bodies.iter().map(|body| s.spawn(move || server.post("/generate", &body.to_string()))).collect();
        // Every request waits behind the long one (whose stream holds no permit); then its
        // client hangs up.
        let started = std::time::Instant::now();
        while server.counter("sesame_requests_in_flight") < 5.0 {
            assert!(started.elapsed() < std::time::Duration::from_secs(60), "the requests never queued");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        client.shutdown(std::net::Shutdown::Both).unwrap();
        answers.into_iter().map(|a| a.join().unwrap()).collect()
    });
    // The long search, the four of one prompt length together, the other alone.
    assert_eq!(server.counter("sesame_batches_total"), 3.0);
    assert_eq!(server.counter("sesame_generations_total"), 6.0);
    for (body, (status, got)) in bodies.iter().zip(&together) {
        assert_eq!(*status, 200, "{got}");
        let (_, alone) = server.post("/generate", &body.to_string());
        assert_eq!(got["generated_text"], alone["generated_text"], "{body}");
        let ids = |v: &serde_json::Value| v["details"]["tokens"].as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect::<Vec<_>>();
        assert_eq!(ids(got), ids(&alone), "{body}");
        assert_eq!(got["details"]["finish_reason"], alone["details"]["finish_reason"], "{body}");
        let logprobs = |v: &serde_json::Value| v["details"]["tokens"].as_array().unwrap().iter().map(|t| t["logprob"].as_f64().unwrap()).collect::<Vec<_>>();
        for (a, b) in logprobs(got).iter().zip(logprobs(&alone)) {
            assert!((a - b).abs() < 1e-4, "{body}: {got} alone {alone}");
        }
    }
    assert_eq!(together[1].1["details"]["generated_tokens"], 3);
    assert_eq!(server.counter("sesame_batches_total"), 8.0, "each run alone after");
    drop(server);
    std::fs::remove_dir_all(&model).unwrap();
}

/// A client that goes away mid-generation, streaming or not, stops its search: the metrics
/// count it cancelled after far fewer tokens than it asked for, and the server answers the next.
#[test]
fn serve_stops_a_generation_when_its_client_goes_away() {
    let model = with_tokenizer("xlnet/generation");
    let server = Server::start(&model, &[]);
    let addr = server.url.trim_start_matches("http://").to_string();
    let long = serde_json::json!({ "inputs": "the cat sat", "parameters": { "max_new_tokens": 20000, "min_new_tokens": 20000 } }).to_string();
    for (n, route) in ["/generate_stream", "/generate"].into_iter().enumerate() {
        let mut client = std::net::TcpStream::connect(&addr).unwrap();
        write!(client, "POST {route} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{long}", long.len()).unwrap();
        if route == "/generate_stream" {
            // Wait for the first token, then hang up.
            let mut reader = BufReader::new(&client);
            let mut line = String::new();
            while !line.starts_with("data:") {
                line.clear();
                assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended before its first token");
            }
        } else {
            // Hang up while it runs (or, on a slow machine, before it starts: dropped unrun).
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        client.shutdown(std::net::Shutdown::Both).unwrap();
        drop(client);
        let started = std::time::Instant::now();
        while server.counter("sesame_generations_cancelled_total") < (n + 1) as f64 {
            assert!(started.elapsed() < std::time::Duration::from_secs(60), "{route}: the search ran on after its client went away");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(server.counter("sesame_generated_tokens_total") < 10000.0 * (n + 1) as f64, "{route}: it ran to the end");
    }
    let (status, _) = server.post("/generate", r#"{"inputs": "the cat", "parameters": {"max_new_tokens": 2}}"#);
    assert_eq!(status, 200);
    assert_eq!(server.counter("sesame_panics_total"), 0.0);
    drop(server);
    std::fs::remove_dir_all(&model).unwrap();
}

#[test]
fn serve_refuses_bad_generation_requests_naming_the_parameter() {
    let model = with_tokenizer("bart/base-generation");
    let server = Server::start(&model, &[]);
    let long = vec!["cat"; 80].join(" ");
    let cases: [(&str, String, u16, &str); 9] = [
        ("/generate", r#"{"inputs": "a", "parameters": {"watermark": true}}"#.into(), 422, "`parameters.watermark`: unknown field"),
        ("/generate", r#"{"inputs": "a", "parameters": {"max_new_tokens": "3"}}"#.into(), 422, "`parameters.max_new_tokens`: invalid type"),
        ("/generate", r#"{"inputs": "a", "parameters": {"max_new_tokens": 0}}"#.into(), 422, "`parameters.max_new_tokens` is 0"),
        ("/generate", r#"{"inputs": "a", "parameters": {"max_new_tokens": 100000}}"#.into(), 422, "room for"),
        ("/generate", r#"{"inputs": "a", "parameters": {"temperature": 0}}"#.into(), 422, "temperature"),
        ("/generate", r#"{"inputs": "a", "parameters": {"stop": ["x"], "num_beams": 2}}"#.into(), 422, "`parameters.stop`"),
        ("/generate", r#"{"inputs": " "}"#.into(), 422, "`inputs` is empty"),
        ("/generate", r#"{"inputs": "a", "stream": true}"#.into(), 422, "/generate_stream"),
        ("/generate_stream", serde_json::json!({ "inputs": long }).to_string(), 413, "more than the model's"),
    ];
    for (route, body, status, message) in cases {
        let (got, error) = server.post(route, &body);
        assert_eq!(got, status, "{route} {body}: {error}");
        assert!(error["error"].as_str().unwrap().contains(message), "{route} {body}: {error}");
    }
    assert_eq!(server.post("/embed", r#"{"inputs": "a"}"#).0, 400, "a generator serves no embeddings");
    assert_eq!(server.counter("sesame_panics_total"), 0.0);
    drop(server);
    std::fs::remove_dir_all(&model).unwrap();
    let (status, error) = Server::start(&fill_mask_model(), &[]).post("/generate", r#"{"inputs": "a"}"#);
    assert_eq!(status, 400, "{error}");
    assert!(error["error"].as_str().unwrap().contains("/generate needs a text generator"), "{error}");
}

/// `/openapi.json` describes every route the serving guide lists, and the server answers each
/// path the document names (an empty body is refused, never "not found").
#[test]
fn serve_s_openapi_document_names_every_route_of_the_guide_and_the_server_answers_them() {
    let server = Server::start(&fill_mask_model(), &[]);
    let (status, text) = server.get("/openapi.json");
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    let guide = std::fs::read_to_string(repo().join("docs/guide/serving.md")).unwrap();
    let listed: Vec<(String, String)> = guide
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(route, _)| route.to_string()))
        .filter_map(|route| route.split_once(' ').map(|(m, p)| (m.to_lowercase(), p.to_string())))
        .filter(|(m, _)| m == "get" || m == "post")
        .collect();
    assert!(listed.len() >= 14, "{listed:?}");
    for (method, path) in &listed {
        assert!(paths.get(path).and_then(|p| p.get(method)).is_some(), "{method} {path} is in the guide but not in /openapi.json");
    }
    for (path, methods) in paths {
        for method in methods.as_object().unwrap().keys() {
            let status = match method.as_str() {
                "get" => ureq::get(&format!("{}{path}", server.url)).call().map_or_else(|e| match e { ureq::Error::Status(s, _) => s, e => panic!("{path}: {e}") }, |r| r.status()),
                _ => server.post(path, "{}").0,
            };
            assert!(![404, 405].contains(&status), "{method} {path}: {status}");
        }
    }
}

#[test]
fn serve_tokenizes_with_character_offsets() {
    let server = Server::start(&fill_mask_model(), &[]);
    let (status, pieces) = server.post("/tokenize", r#"{"inputs": "the cat sat"}"#);
    assert_eq!(status, 200, "{pieces}");
    let pieces = pieces[0].as_array().unwrap();
    assert_eq!(pieces.first().unwrap()["special"], true);
    assert_eq!(pieces[2]["text"], "cat");
    assert_eq!((pieces[2]["start"].as_u64(), pieces[2]["stop"].as_u64()), (Some(4), Some(7)));
    let (_, plain) = server.post("/tokenize", r#"{"inputs": ["the cat sat"], "add_special_tokens": false}"#);
    assert_eq!(plain[0].as_array().unwrap().len(), pieces.len() - 2);
}

#[test]
fn serve_refuses_bad_requests_naming_the_field_and_stays_up() {
    let server = Server::start(&fill_mask_model(), &["--max-client-batch-size", "4", "--payload-limit", "2000"]);
    let long = vec!["cat"; 60].join(" ");
    let cases: [(&str, String, u16, &str); 9] = [
        ("/embed", r#"{"inputs": 3}"#.into(), 422, "`inputs`: invalid type: integer"),
        ("/embed", r#"{"inputs": ["a", 3]}"#.into(), 422, "`inputs[1]`"),
        ("/embed", r#"{"inputs": ["a"], "normalise": true}"#.into(), 422, "unknown field `normalise`"),
        ("/embed", r#"{"inputs": []}"#.into(), 422, "`inputs` is empty"),
        ("/embed", r#"{"inputs": ["a""#.into(), 422, "EOF"),
        ("/embed", r#"{"inputs": ["a", "b", "c", "d", "e"]}"#.into(), 413, "--max-client-batch-size 4"),
        ("/embed", serde_json::json!({ "inputs": long }).to_string(), 413, "`inputs[0]` has 62 tokens, more than the model's 40"),
        ("/embed", serde_json::json!({ "inputs": "a ".repeat(2000) }).to_string(), 413, "--payload-limit 2000"),
        ("/predict", r#"{"inputs": "a"}"#.into(), 400, "/predict needs a sequence classifier"),
    ];
    for (route, body, status, message) in cases {
        let (got, error) = server.post(route, &body);
        assert_eq!(got, status, "{route} {body}: {error}");
        assert!(error["error"].as_str().unwrap().contains(message), "{route} {body}: {error}");
    }
    // Truncation on request; the server is still up and answering.
    let (status, _) = server.post("/embed", &serde_json::json!({ "inputs": long, "truncate": true }).to_string());
    assert_eq!(status, 200);
    assert_eq!(server.get("/health").0, 200);
    assert_eq!(server.counter("sesame_panics_total"), 0.0);
}

#[test]
fn serve_answers_429_at_once_when_its_requests_are_all_in_flight() {
    let server = Server::start(&fill_mask_model(), &["--max-concurrent-requests", "1"]);
    // A client that sends half its body holds the one permit.
    let addr = server.url.trim_start_matches("http://").to_string();
    let mut slow = std::net::TcpStream::connect(&addr).unwrap();
    write!(slow, "POST /embed HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{{\"inputs\"").unwrap();
    slow.flush().unwrap();
    // Once the server holds its request, the slow client has the permit.
    let started = std::time::Instant::now();
    while server.counter("sesame_requests_in_flight") < 1.0 {
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "the slow request was never read");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (status, body) = server.post("/embed", r#"{"inputs": "a"}"#);
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error_type"], "Overloaded", "{body}");
    // The slow client finishes; the permit is free again.
    write!(slow, ": [\"b\"]}}").unwrap();
    let mut answer = String::new();
    BufReader::new(&slow).read_line(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(slow);
    assert_eq!(server.post("/embed", r#"{"inputs": "a"}"#).0, 200);
}

#[test]
fn serve_finishes_its_requests_and_exits_0_on_sigterm() {
    let mut server = Server::start(&fill_mask_model(), &[]);
    assert_eq!(server.post("/embed", r#"{"inputs": "a"}"#).0, 200);
    let status = Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let started = std::time::Instant::now();
    let exit = loop {
        if let Some(exit) = server.child.try_wait().unwrap() {
            break exit;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "still running 20 s after SIGTERM");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(exit.success(), "exit status {exit}");
}
