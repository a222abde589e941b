//! The routes: text-embeddings-inference's names and JSON shapes (`/embed`, `/predict`,
//! `/tokenize`, `/health`, `/info`, `/metrics`), OpenAI's `/v1/embeddings`, `/tag` for
//! token classifiers, `/fill-mask` and `/answer`, which TEI does not serve, and
//! text-generation-inference's `/generate` and `/generate_stream`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sesame_generate::GenerationConfig;
use sesame_pipelines::{Classification, PipelineError, TaggedSpan};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::metrics::Metrics;
use sesame_pipelines::served::{Encoded, Input, Output, ServedModel, Task};
use crate::queue::{Ended, Event, FinishReason, GenerateJob, Job, RunError, StreamedToken, Work};
use crate::ServeOptions;

/// What every handler shares.
pub(crate) struct App {
    pub model: Arc<dyn ServedModel>,
    pub options: ServeOptions,
    pub queue: mpsc::UnboundedSender<Work>,
    pub permits: Arc<Semaphore>,
    pub metrics: Arc<Metrics>,
    pub request_ids: crate::observe::RequestIds,
}

/// A refusal or failure: its status and TEI's error body, `{"error", "error_type"}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, kind, message: message.into() }
    }

    fn validation(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "Validation", message)
    }

    pub(crate) fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "Validation", message)
    }

    /// A body past `--payload-limit` (`limit` bytes).
    pub(crate) fn body_too_large(limit: usize) -> Self {
        Self::too_large(format!("the request body is larger than --payload-limit {limit} bytes"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(serde_json::json!({ "error": self.message, "error_type": self.kind }))).into_response()
    }
}

impl From<RunError> for ApiError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Settings(reason) => ApiError::validation(format!("`parameters`: {reason}")),
            e => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Backend", e.to_string()),
        }
    }
}

/// One text or a list of them (`"inputs": "a"`, `"inputs": ["a", "b"]`).
#[derive(Debug)]
pub(crate) enum Inputs {
    One(String),
    Many(Vec<String>),
}

impl<'de> Deserialize<'de> for Inputs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Inputs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Inputs, E> {
                Ok(Inputs::One(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Inputs, A::Error> {
                let mut texts = Vec::new();
                while let Some(text) = seq.next_element::<String>()? {
                    texts.push(text);
                }
                Ok(Inputs::Many(texts))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl Inputs {
    fn is_one(&self) -> bool {
        matches!(self, Inputs::One(_))
    }

    fn into_vec(self) -> Vec<String> {
        match self {
            Inputs::One(text) => vec![text],
            Inputs::Many(texts) => texts,
        }
    }

    fn into_inputs(self) -> Vec<Input> {
        self.into_vec().into_iter().map(Input::Text).collect()
    }
}

/// A classifier's inputs: a text, or a list of texts and pairs (`["a", ["b", "c"]]`; TEI's
/// `[["a", "b"]]` is one pair).
#[derive(Debug)]
pub(crate) struct PredictInputs {
    one: bool,
    inputs: Vec<Input>,
}

/// One element of a list of [`PredictInputs`]: a text or a pair.
struct Sequence(Input);

impl<'de> Deserialize<'de> for Sequence {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Sequence;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a pair of strings")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Sequence, E> {
                Ok(Sequence(Input::Text(v.to_string())))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Sequence, A::Error> {
                let pair = "a pair of two strings";
                let a: String = seq.next_element()?.ok_or_else(|| serde::de::Error::invalid_length(0, &pair))?;
                let b: String = seq.next_element()?.ok_or_else(|| serde::de::Error::invalid_length(1, &pair))?;
                if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    return Err(serde::de::Error::invalid_length(3, &pair));
                }
                Ok(Sequence(Input::Pair(a, b)))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl<'de> Deserialize<'de> for PredictInputs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = PredictInputs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a list of strings and pairs of strings")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PredictInputs, E> {
                Ok(PredictInputs { one: true, inputs: vec![Input::Text(v.to_string())] })
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<PredictInputs, A::Error> {
                let mut inputs = Vec::new();
                while let Some(Sequence(input)) = seq.next_element()? {
                    inputs.push(input);
                }
                Ok(PredictInputs { one: false, inputs })
            }
        }
        d.deserialize_any(Visitor)
    }
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmbedRequest {
    inputs: Inputs,
    #[serde(default = "yes")]
    normalize: bool,
    #[serde(default)]
    truncate: bool,
    dimensions: Option<usize>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum EncodingFormat {
    Float,
    Base64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OpenAiEmbeddingsRequest {
    input: Inputs,
    #[allow(dead_code)]
    model: Option<String>,
    encoding_format: Option<EncodingFormat>,
    dimensions: Option<usize>,
    #[allow(dead_code)]
    user: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PredictRequest {
    inputs: PredictInputs,
    #[serde(default)]
    truncate: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RerankRequest {
    query: String,
    texts: Vec<String>,
    #[serde(default)]
    truncate: bool,
    #[serde(default)]
    return_text: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FillMaskRequest {
    inputs: Inputs,
    top_k: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnswerRequest {
    question: Inputs,
    context: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TagRequest {
    inputs: Inputs,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenizeRequest {
    inputs: Inputs,
    #[serde(default = "yes")]
    add_special_tokens: bool,
}

/// The request body as `T`; refusals name the field (`inputs[2]: invalid type: …`).
fn parse<T: DeserializeOwned>(app: &App, body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::body_too_large(app.options.payload_limit),
        status => ApiError::new(status, "Validation", e.body_text()),
    })?;
    let mut de = serde_json::Deserializer::from_slice(&body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match path.as_str() {
            "." | "" => ApiError::validation(format!("the request body: {inner}")),
            _ => ApiError::validation(format!("`{path}`: {inner}")),
        }
    })?;
    de.end().map_err(|e| ApiError::validation(format!("the request body: {e}")))?;
    Ok(value)
}

/// Hold one of `--max-concurrent-requests` permits while the request is read and answered,
/// or answer 429 at once when none is left.
pub(crate) async fn admit(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    match app.permits.clone().try_acquire_owned() {
        Ok(_permit) => next.run(request).await,
        Err(_) => ApiError::new(StatusCode::TOO_MANY_REQUESTS, "Overloaded", format!("the server is answering its maximum of {} concurrent requests; retry later", app.options.max_concurrent_requests)).into_response(),
    }
}

/// Refuse a route the served model's task does not run.
fn check_task(app: &App, route: &str, wanted: Task) -> Result<(), ApiError> {
    let task = app.model.task();
    if task == wanted {
        return Ok(());
    }
    Err(ApiError::new(StatusCode::BAD_REQUEST, "Validation", format!("{route} needs {}; this server runs {} (its route is {})", wanted.what(), task.what(), task.route())))
}

/// The inputs of a request, checked and tokenized once: each input's token count as the model
/// reads it (what the batch budget counts), and its encoding where it fits the model (what the
/// model then reads instead of tokenizing the text again).
pub(crate) struct Counted {
    /// The tokens of every input, each truncated to the model's length (every window's, for a
    /// model that windows) and at least 1.
    pub tokens: usize,
    /// Each input's encoding ([`ServedModel::encode`]), `None` where it is a whole input longer
    /// than the model reads.
    pub encoded: Vec<Option<Encoded>>,
}

/// Check the inputs of a request and tokenize them as the model will read them: refuses an
/// empty list, more inputs than `--max-client-batch-size`, and (unless `truncate`) an input
/// longer than the model reads. `field` names the inputs in messages.
async fn tokens_of(app: &Arc<App>, inputs: &[Input], truncate: bool, field: &str) -> Result<Counted, ApiError> {
    if inputs.is_empty() {
        return Err(ApiError::validation(format!("`{field}` is empty: give at least one text")));
    }
    let max = app.options.max_client_batch_size;
    if inputs.len() > max {
        return Err(ApiError::too_large(format!("`{field}` has {} texts, more than --max-client-batch-size {max}", inputs.len())));
    }
    let (app2, inputs2) = (app.clone(), inputs.to_vec());
    let started = Instant::now();
    let encoded = tokio::task::spawn_blocking(move || inputs2.iter().map(|i| app2.model.encode(i)).collect::<Result<Vec<_>, _>>())
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Tokenizer", format!("tokenizing failed: {e}")))?
        .map_err(|e| ApiError::validation(format!("`{field}`: {e}")))?;
    let characters = inputs.iter().map(|i| match i {
        Input::Text(t) => t.chars().count(),
        Input::Pair(a, b) => a.chars().count() + b.chars().count(),
    });
    let (characters, tokens) = (characters.sum(), encoded.iter().map(|e| e.len()).sum());
    crate::observe::record(|t| {
        t.tokenization = Some(started.elapsed());
        t.characters = characters;
        t.tokens = tokens;
    });
    let limit = app.model.max_input_length();
    if !truncate {
        if let Some((i, e)) = encoded.iter().enumerate().find(|(_, e)| !e.fits(limit)) {
            return Err(ApiError::too_large(format!("`{field}[{i}]` has {} tokens, more than the model's {limit}; shorten it or set `truncate`", e.len())));
        }
    }
    let tokens = encoded.iter().map(|e| if e.fits(limit) { e.len() } else { limit }.max(1)).sum();
    let encoded = encoded.into_iter().map(|e| e.fits(limit).then_some(e)).collect();
    Ok(Counted { tokens, encoded })
}

/// Queue `inputs` and wait for their outputs.
async fn run(app: &App, inputs: Vec<Input>, counted: Counted) -> Result<Vec<Output>, ApiError> {
    let (reply, outputs) = oneshot::channel();
    let job = Job { inputs, tokens: counted.tokens, encoded: counted.encoded, queued: Instant::now(), reply };
    app.queue.send(Work::Batch(job)).map_err(|_| shutting_down())?;
    let ran = outputs.await.map_err(|_| shutting_down())??;
    crate::observe::record(|t| {
        t.queue = Some(ran.queued);
        t.inference = Some(ran.inference);
    });
    Ok(ran.outputs)
}

/// Each output's embedding, cut to `dimensions` and made unit length if `normalize`.
fn embeddings(outputs: Vec<Output>, dimensions: Option<usize>, normalize: bool) -> Vec<Vec<f32>> {
    outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Embedding(v) => Some(sesame_pipelines::truncated(v, dimensions, normalize)),
            _ => None,
        })
        .collect()
}

fn check_dimensions(app: &App, dimensions: Option<usize>, field: &str) -> Result<(), ApiError> {
    match dimensions {
        Some(d) if d == 0 || d > app.model.hidden_size() => Err(ApiError::validation(format!("`{field}` is {d}; it must be between 1 and the model's {}", app.model.hidden_size()))),
        _ => Ok(()),
    }
}

/// `POST /embed`: TEI's embeddings, one vector per input (`[[f32]]`).
pub(crate) async fn embed(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Result<Json<Vec<Vec<f32>>>, ApiError> {
    let request: EmbedRequest = parse(&app, body)?;
    check_task(&app, "/embed", Task::Embedding)?;
    check_dimensions(&app, request.dimensions, "dimensions")?;
    let inputs = request.inputs.into_inputs();
    let tokens = tokens_of(&app, &inputs, request.truncate || app.options.auto_truncate, "inputs").await?;
    let outputs = run(&app, inputs, tokens).await?;
    Ok(Json(embeddings(outputs, request.dimensions, request.normalize)))
}

#[derive(Serialize)]
struct OpenAiEmbedding {
    object: &'static str,
    index: usize,
    embedding: serde_json::Value,
}

#[derive(Serialize)]
struct OpenAiUsage {
    prompt_tokens: usize,
    total_tokens: usize,
}

#[derive(Serialize)]
pub(crate) struct OpenAiEmbeddings {
    object: &'static str,
    data: Vec<OpenAiEmbedding>,
    model: String,
    usage: OpenAiUsage,
}

/// `POST /v1/embeddings`: OpenAI's embeddings API (unit vectors, `encoding_format` float or
/// base64 of little-endian f32s, `dimensions`, `usage`).
pub(crate) async fn openai_embeddings(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Result<Json<OpenAiEmbeddings>, ApiError> {
    let request: OpenAiEmbeddingsRequest = parse(&app, body)?;
    check_task(&app, "/v1/embeddings", Task::Embedding)?;
    check_dimensions(&app, request.dimensions, "dimensions")?;
    let inputs = request.input.into_inputs();
    let tokens = tokens_of(&app, &inputs, false, "input").await?;
    let total = tokens.tokens;
    let outputs = run(&app, inputs, tokens).await?;
    let base64 = matches!(request.encoding_format, Some(EncodingFormat::Base64));
    let data = embeddings(outputs, request.dimensions, true)
        .into_iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = match base64 {
                true => serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())),
                false => serde_json::json!(v),
            };
            OpenAiEmbedding { object: "embedding", index, embedding }
        })
        .collect();
    Ok(Json(OpenAiEmbeddings { object: "list", data, model: app.options.model_id.clone(), usage: OpenAiUsage { prompt_tokens: total, total_tokens: total } }))
}

#[derive(Serialize)]
pub(crate) struct LabelScore {
    label: String,
    score: f32,
}

/// TEI's predictions of one text: every label and its score, most likely first (a regression
/// model: its one number under its one label).
fn predictions(c: Classification, labels: &[String]) -> Vec<LabelScore> {
    match c {
        Classification::Single { scores, .. } | Classification::Multi { scores, .. } => scores.into_iter().map(|s| LabelScore { label: s.label, score: s.score }).collect(),
        Classification::Value { value } => vec![LabelScore { label: labels.first().cloned().unwrap_or_else(|| "LABEL_0".into()), score: value }],
    }
}

/// One result for a single input, a list for a list of inputs, as TEI answers.
fn one_or_many<T: Serialize>(one: bool, mut results: Vec<T>) -> Response {
    match one {
        true => Json(results.remove(0)).into_response(),
        false => Json(results).into_response(),
    }
}

/// `POST /predict`: a sequence classifier's labels and scores.
pub(crate) async fn predict(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let request: PredictRequest = parse(&app, body)?;
    check_task(&app, "/predict", Task::Classifier)?;
    let PredictInputs { one, inputs } = request.inputs;
    let tokens = tokens_of(&app, &inputs, request.truncate || app.options.auto_truncate, "inputs").await?;
    let outputs = run(&app, inputs, tokens).await?;
    let labels = app.model.labels();
    let results: Vec<Vec<LabelScore>> = outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Classification(c) => Some(predictions(c, &labels)),
            _ => None,
        })
        .collect();
    Ok(one_or_many(one, results))
}

#[derive(Serialize)]
pub(crate) struct Rank {
    index: usize,
    score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
}

/// `POST /rerank`: `texts` ordered by a cross-encoder's relevance to `query` (a classifier with
/// one label, scored with the sigmoid of its logit), most relevant first.
pub(crate) async fn rerank(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Result<Json<Vec<Rank>>, ApiError> {
    let request: RerankRequest = parse(&app, body)?;
    check_task(&app, "/rerank", Task::Classifier)?;
    let labels = app.model.labels();
    if labels.len() != 1 {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "Validation", format!("/rerank needs a classifier with one label (a cross-encoder); this one has {}", labels.len())));
    }
    let inputs: Vec<Input> = request.texts.iter().map(|t| Input::Pair(request.query.clone(), t.clone())).collect();
    let tokens = tokens_of(&app, &inputs, request.truncate || app.options.auto_truncate, "texts").await?;
    let outputs = run(&app, inputs, tokens).await?;
    let mut ranks: Vec<Rank> = outputs
        .into_iter()
        .enumerate()
        .filter_map(|(index, o)| match o {
            Output::Classification(Classification::Single { score, .. } | Classification::Value { value: score }) => Some(Rank { index, score, text: None }),
            Output::Classification(Classification::Multi { scores, .. }) => Some(Rank { index, score: scores[0].score, text: None }),
            _ => None,
        })
        .collect();
    if request.return_text {
        ranks.iter_mut().for_each(|r| r.text = Some(request.texts[r.index].clone()));
    }
    ranks.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    Ok(Json(ranks))
}

/// `POST /tag`: a token classifier's entities with their character offsets.
pub(crate) async fn tag(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let request: TagRequest = parse(&app, body)?;
    check_task(&app, "/tag", Task::Tagger)?;
    let one = request.inputs.is_one();
    let inputs = request.inputs.into_inputs();
    let tokens = tokens_of(&app, &inputs, true, "inputs").await?;
    let outputs = run(&app, inputs, tokens).await?;
    let results: Vec<Vec<TaggedSpan>> = outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Entities(spans) => Some(spans),
            _ => None,
        })
        .collect();
    Ok(one_or_many(one, results))
}

/// `POST /fill-mask`: per text, each mask token's `top_k` candidates
/// (`[[{"token", "id", "score"}]]`), as `cargo xtask fill-mask` gives them.
pub(crate) async fn fill_mask(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let request: FillMaskRequest = parse(&app, body)?;
    check_task(&app, "/fill-mask", Task::FillMask)?;
    let most = app.model.top_k();
    let top_k = request.top_k.unwrap_or(most.min(5));
    if top_k == 0 || top_k > most {
        return Err(ApiError::validation(format!("`top_k` is {top_k}; it must be between 1 and the server's --top-k {most}")));
    }
    let one = request.inputs.is_one();
    let inputs = request.inputs.into_inputs();
    let tokens = tokens_of(&app, &inputs, false, "inputs").await?;
    let tokenizer = app.model.tokenizer();
    let mask = tokenizer.mask_token_id().map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Tokenizer", e.to_string()))?;
    // Every input fits (none is truncated), so each has its encoding.
    if let Some(i) = tokens.encoded.iter().position(|e| !e.as_ref().and_then(Encoded::as_whole).is_some_and(|e| e.input_ids.contains(&i64::from(mask)))) {
        let name = tokenizer.id_to_token(mask).unwrap_or_default();
        return Err(ApiError::validation(format!("`inputs[{i}]` has no `{name}` token to fill")));
    }
    let outputs = run(&app, inputs, tokens).await?;
    let results: Vec<Vec<Vec<sesame_pipelines::Prediction>>> = outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Masks(masks) => Some(masks.into_iter().map(|mut m| {
                m.truncate(top_k);
                m
            }).collect()),
            _ => None,
        })
        .collect();
    Ok(one_or_many(one, results))
}

/// `POST /answer`: each question's answer from `context` (`{"answer", "score", "start",
/// "end"}`, character offsets), as `cargo xtask answer` gives it.
pub(crate) async fn answer(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let request: AnswerRequest = parse(&app, body)?;
    check_task(&app, "/answer", Task::Answerer)?;
    if request.context.trim().is_empty() {
        return Err(ApiError::validation("`context` is empty: there is nothing to answer from"));
    }
    let one = request.question.is_one();
    let questions = request.question.into_vec();
    if let Some(i) = questions.iter().position(|q| q.trim().is_empty()) {
        return Err(ApiError::validation(format!("`question[{i}]` is empty")));
    }
    let inputs: Vec<Input> = questions.into_iter().map(|q| Input::Pair(q, request.context.clone())).collect();
    let tokens = tokens_of(&app, &inputs, true, "question").await?;
    let outputs = run(&app, inputs, tokens).await?;
    let results: Vec<sesame_pipelines::Answer> = outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Answer(a) => Some(a),
            _ => None,
        })
        .collect();
    Ok(one_or_many(one, results))
}

/// `POST /tokenize`: each text's tokens (`[[{"id", "text", "special", "start", "stop"}]]`,
/// character offsets).
pub(crate) async fn tokenize(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Result<Json<Vec<Vec<sesame_text::Piece>>>, ApiError> {
    let request: TokenizeRequest = parse(&app, body)?;
    let texts = request.inputs.into_vec();
    if texts.is_empty() {
        return Err(ApiError::validation("`inputs` is empty: give at least one text"));
    }
    let max = app.options.max_client_batch_size;
    if texts.len() > max {
        return Err(ApiError::too_large(format!("`inputs` has {} texts, more than --max-client-batch-size {max}", texts.len())));
    }
    let add = request.add_special_tokens;
    let app2 = app.clone();
    let pieces = tokio::task::spawn_blocking(move || texts.iter().map(|t| app2.model.tokenizer().pieces(t, add)).collect::<Result<Vec<_>, _>>())
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Tokenizer", format!("tokenizing failed: {e}")))?
        .map_err(|e| ApiError::validation(format!("`inputs`: {e}")))?;
    Ok(Json(pieces))
}

/// text-generation-inference's `parameters`, with generate's names for the rest: a warper
/// (`temperature`, `top_k`, `top_p`) turns sampling on unless `do_sample` is false, as TGI does.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct GenerateParameters {
    do_sample: Option<bool>,
    max_new_tokens: Option<usize>,
    temperature: Option<f32>,
    top_k: Option<usize>,
    top_p: Option<f32>,
    repetition_penalty: Option<f32>,
    no_repeat_ngram_size: Option<usize>,
    min_new_tokens: Option<usize>,
    num_beams: Option<usize>,
    seed: Option<u64>,
    #[serde(default)]
    stop: Vec<String>,
    #[serde(default)]
    details: bool,
    #[serde(default)]
    return_full_text: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GenerateRequest {
    inputs: String,
    #[serde(default)]
    parameters: GenerateParameters,
    /// `POST /` only: stream (as `/generate_stream`) or not (as `/generate`).
    #[serde(default)]
    stream: bool,
}

/// The most stop sequences one request may give (TGI's default).
const MAX_STOP_SEQUENCES: usize = 4;

/// A generation request, checked and queued: its events, and what its answer repeats.
struct Queued {
    events: mpsc::UnboundedReceiver<Event>,
    details: bool,
    /// The seed a sampling search drew with.
    seed: Option<u64>,
    /// The prompt, when the answer starts with it (`return_full_text`).
    prefix: Option<String>,
}

/// Check `request` on `route` and queue its search.
async fn queue_generation(app: &Arc<App>, route: &str, request: GenerateRequest) -> Result<Queued, ApiError> {
    check_task(app, route, Task::Generator)?;
    let p = request.parameters;
    if request.inputs.trim().is_empty() {
        return Err(ApiError::validation("`inputs` is empty: give a prompt"));
    }
    if p.stop.len() > MAX_STOP_SEQUENCES {
        return Err(ApiError::validation(format!("`parameters.stop` has {} sequences; at most {MAX_STOP_SEQUENCES}", p.stop.len())));
    }
    if let Some(i) = p.stop.iter().position(String::is_empty) {
        return Err(ApiError::validation(format!("`parameters.stop[{i}]` is empty")));
    }
    let (app2, text) = (app.clone(), request.inputs.clone());
    let prompt = tokio::task::spawn_blocking(move || app2.model.generator().map(|g| g.prompt_ids(&text)))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Tokenizer", format!("tokenizing failed: {e}")))?
        .ok_or_else(|| ApiError::validation(format!("{route} needs a text generator")))?
        .map_err(|e| match e {
            PipelineError::TooLong { tokens, max_len, .. } => ApiError::too_large(format!("`inputs` has {tokens} tokens, more than the model's {max_len}; shorten it")),
            e => ApiError::validation(format!("`inputs`: {e}")),
        })?;
    let generator = app.model.generator().ok_or_else(|| ApiError::validation(format!("{route} needs a text generator")))?;
    let room = generator.room(prompt.len());
    match p.max_new_tokens {
        Some(0) => return Err(ApiError::validation("`parameters.max_new_tokens` is 0; it must be at least 1")),
        Some(n) if n > room => {
            return Err(ApiError::validation(format!("`parameters.max_new_tokens` is {n}; after this prompt of {} tokens the model has room for {room}", prompt.len())))
        }
        _ => {}
    }
    let warped = p.temperature.is_some() || p.top_k.is_some() || p.top_p.is_some();
    let overrides = GenerationConfig {
        do_sample: p.do_sample.or(warped.then_some(true)),
        max_new_tokens: p.max_new_tokens,
        temperature: p.temperature,
        top_k: p.top_k,
        top_p: p.top_p,
        repetition_penalty: p.repetition_penalty,
        no_repeat_ngram_size: p.no_repeat_ngram_size,
        min_new_tokens: p.min_new_tokens,
        num_beams: p.num_beams,
        ..GenerationConfig::default()
    };
    let mut settings = generator.settings().overridden_by(&overrides);
    settings.num_return_sequences = Some(1);
    let beams = settings.num_beams.unwrap_or(1);
    settings.output_scores = Some(p.details && beams == 1);
    settings.validate().map_err(|e| ApiError::validation(format!("`parameters`: {e}")))?;
    if beams > 1 && !p.stop.is_empty() {
        return Err(ApiError::validation(format!("`parameters.stop`: stop sequences need greedy search or sampling, and this search has {beams} beams")));
    }
    let sampling = settings.do_sample == Some(true) && beams == 1;
    let seed = sampling.then(|| p.seed.unwrap_or_else(random_seed));
    let (events, receiver) = mpsc::unbounded_channel();
    let job = GenerateJob { prompt, settings, seed: seed.unwrap_or(0), stop: p.stop, queued: Instant::now(), events };
    app.queue.send(Work::Generate(job)).map_err(|_| shutting_down())?;
    Ok(Queued { events: receiver, details: p.details, seed, prefix: p.return_full_text.then_some(request.inputs) })
}

/// A seed for a sampling request that gives none.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.finish()
}

#[derive(Serialize)]
struct GenerateDetails {
    finish_reason: FinishReason,
    generated_tokens: usize,
    seed: Option<u64>,
    /// The prompt's tokens (TGI's `decoder_input_details`, not served): empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    prefill: Option<Vec<StreamedToken>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<Vec<StreamedToken>>,
}

#[derive(Serialize)]
struct GenerateResponse {
    generated_text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<GenerateDetails>,
}

impl Queued {
    /// The text the answer gives: the prompt first with `return_full_text`.
    fn text(&self, ended: &Ended) -> String {
        match &self.prefix {
            Some(prompt) => format!("{prompt}{}", ended.text),
            None => ended.text.clone(),
        }
    }
}

fn shutting_down() -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "Backend", "the server is shutting down")
}

/// `POST /generate`: TGI's generation, `{"generated_text"}`, with `details` when asked
/// (`finish_reason`, `generated_tokens`, `seed`, each token with its log-probability).
pub(crate) async fn generate(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let request: GenerateRequest = parse(&app, body)?;
    if request.stream {
        return Err(ApiError::validation("`stream`: /generate answers once; stream with /generate_stream"));
    }
    let queued = queue_generation(&app, "/generate", request).await?;
    generate_answer(queued).await
}

async fn generate_answer(mut queued: Queued) -> Result<Response, ApiError> {
    loop {
        match queued.events.recv().await {
            Some(Event::Token(_)) => {}
            Some(Event::End(Ok(ended))) => {
                let details = queued.details.then(|| GenerateDetails {
                    finish_reason: ended.finish_reason,
                    generated_tokens: ended.tokens.len(),
                    seed: queued.seed,
                    prefill: Some(Vec::new()),
                    tokens: Some(ended.tokens.clone()),
                });
                return Ok(Json(GenerateResponse { generated_text: queued.text(&ended), details }).into_response());
            }
            Some(Event::End(Err(e))) => return Err(e.into()),
            None => return Err(shutting_down()),
        }
    }
}

/// One server-sent event of `/generate_stream`: TGI's `{"index", "token", "generated_text",
/// "details"}`, the last with the text and (when asked) the details.
fn stream_event(index: usize, token: Option<StreamedToken>, text: Option<String>, details: Option<GenerateDetails>) -> axum::response::sse::Event {
    let data = serde_json::json!({ "index": index, "token": token, "top_tokens": null, "generated_text": text, "details": details });
    axum::response::sse::Event::default().data(data.to_string())
}

/// The error event that ends a stream.
fn error_event(e: ApiError) -> axum::response::sse::Event {
    axum::response::sse::Event::default().data(serde_json::json!({ "error": e.message, "error_type": e.kind }).to_string())
}

/// `POST /generate_stream`: TGI's server-sent events, one per token as soon as it is final;
/// the last also carries `generated_text` (and `details` when asked). A client that goes away
/// stops its search.
pub(crate) async fn generate_stream(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let request: GenerateRequest = parse(&app, body)?;
    let queued = queue_generation(&app, "/generate_stream", request).await?;
    Ok(stream_answer(queued))
}

fn stream_answer(queued: Queued) -> Response {
    struct State {
        queued: Queued,
        /// The last token received, sent once it is known whether it ends the stream.
        held: Option<StreamedToken>,
        sent: usize,
    }
    let events = futures_util::stream::unfold(Some(State { queued, held: None, sent: 0 }), |state| async move {
        let mut state = state?;
        loop {
            let event = match state.queued.events.recv().await {
                Some(Event::Token(token)) => match state.held.replace(token) {
                    None => continue,
                    Some(previous) => {
                        state.sent += 1;
                        let event = stream_event(state.sent, Some(previous), None, None);
                        return Some((Ok::<_, std::convert::Infallible>(event), Some(state)));
                    }
                },
                Some(Event::End(Ok(ended))) => {
                    let details = state.queued.details.then(|| GenerateDetails {
                        finish_reason: ended.finish_reason,
                        generated_tokens: ended.tokens.len(),
                        seed: state.queued.seed,
                        prefill: None,
                        tokens: None,
                    });
                    let last = state.held.take().or_else(|| ended.tokens.last().cloned());
                    stream_event(state.sent + 1, last, Some(state.queued.text(&ended)), details)
                }
                Some(Event::End(Err(e))) => error_event(e.into()),
                None => error_event(shutting_down()),
            };
            return Some((Ok(event), None));
        }
    });
    axum::response::Sse::new(events).into_response()
}

/// `POST /`: TGI's compatible route, `/generate` or, with `"stream": true`, `/generate_stream`.
pub(crate) async fn compat_generate(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let request: GenerateRequest = parse(&app, body)?;
    let stream = request.stream;
    let queued = queue_generation(&app, "/", request).await?;
    match stream {
        true => Ok(stream_answer(queued)),
        false => generate_answer(queued).await,
    }
}

/// `GET /health`: 200 while the model's thread runs.
pub(crate) async fn health(State(app): State<Arc<App>>) -> StatusCode {
    match app.queue.is_closed() {
        false => StatusCode::OK,
        true => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// `GET /info`: the model and the server's limits.
pub(crate) async fn info(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    let o = &app.options;
    let model = &app.model;
    Json(serde_json::json!({
        "model_id": o.model_id,
        "task": model.task(),
        "route": model.task().route(),
        "labels": model.labels(),
        "hidden_size": model.hidden_size(),
        "top_k": model.top_k(),
        "max_input_length": model.max_input_length(),
        "max_batch_tokens": o.max_batch_tokens,
        "max_batch_generations": o.max_batch_generations,
        "max_concurrent_requests": o.max_concurrent_requests,
        "max_client_batch_size": o.max_client_batch_size,
        "payload_limit": o.payload_limit,
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// `GET /metrics`: Prometheus' text format.
pub(crate) async fn metrics(State(app): State<Arc<App>>) -> Response {
    let in_flight = app.options.max_concurrent_requests.saturating_sub(app.permits.available_permits());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render(in_flight)).into_response()
}

/// The routes counted in `/metrics` under their own names; any other path is `other`.
pub(crate) const ROUTES: [&str; 15] = ["/embed", "/v1/embeddings", "/predict", "/rerank", "/tag", "/fill-mask", "/answer", "/generate", "/generate_stream", "/", "/tokenize", "/health", "/info", "/metrics", "/openapi.json"];

/// `GET /openapi.json`: the OpenAPI 3.1 document of every route.
pub(crate) async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], include_str!("../openapi.json")).into_response()
}
