//! `cargo xtask serve`: one checkpoint behind an HTTP server (`sesame-serve`), its task read
//! from the checkpoint or given with `--task`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sesame::Task;
use sesame_layers::Pooling;
use sesame_pipelines::EmbedOptions;
use std::time::Duration;

use sesame_serve::{ApiKey, ServeOptions, ServedModel};

use crate::common::BackendArg;

/// What `serve` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ServeTask {
    /// Sentence embeddings: `/embed`, `/v1/embeddings`.
    Embed,
    /// A fine-tuned sequence classifier: `/predict`.
    Classify,
    /// A fine-tuned token classifier: `/tag`.
    Tag,
    /// A masked LM: `/fill-mask`.
    FillMask,
    /// A fine-tuned extractive-QA model: `/answer`.
    Answer,
    /// A model that writes text (an encoder-decoder, or a left-to-right model):
    /// `/generate`, `/generate_stream`.
    Generate,
}

/// `cargo xtask serve`'s flags.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// HF model directory (config.json, weights, tokenizer).
    #[arg(long, value_parser = crate::common::model_dir)]
    pub model: PathBuf,
    /// The task [default: the head `architectures` names in config.json: a sequence
    /// classifier, a token classifier, an extractive-QA model, a generator, else embeddings].
    #[arg(long, value_enum)]
    pub task: Option<ServeTask>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port (0: any free one; the address is printed on stderr).
    #[arg(long, default_value_t = 3000)]
    pub port: u16,
    /// The most tokens one batch of requests holds; a request larger than this runs alone.
    #[arg(long, default_value_t = 16384, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000_000))]
    pub max_batch_tokens: usize,
    /// The most generations run as one search: those waiting together (greedy search or
    /// sampling; beam search runs alone), each leaving it as it ends.
    #[arg(long, default_value_t = 32, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub max_batch_generations: usize,
    /// Requests in flight at once; one more is answered 429.
    #[arg(long, default_value_t = 512, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_concurrent_requests: usize,
    /// The most texts one request may hold; more are answered 413.
    #[arg(long, default_value_t = 32, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_client_batch_size: usize,
    /// The largest request body in bytes; larger are answered 413.
    #[arg(long, default_value_t = 2_000_000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000_000))]
    pub payload_limit: usize,
    /// At most this many texts per forward pass (a batch of requests is cut into such passes,
    /// texts of similar length together).
    #[arg(long, default_value_t = 32, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub batch_size: usize,
    /// Embeddings: pooling over tokens.
    #[arg(long, default_value = "mean", value_parser = crate::common::parse_pooling)]
    pub pooling: Pooling,
    /// Embeddings: truncate texts to this many tokens [default: `max_seq_length` of the
    /// model's sentence_bert_config.json, else the model's limit].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..=1_000_000))]
    pub max_tokens: Option<usize>,
    /// Fill-mask: the most candidates per mask a request may ask for (`top_k`, 5 by default).
    #[arg(long, default_value_t = 20, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub top_k: usize,
    /// Run the model's linear layers in int8 (flex and ndarray).
    #[arg(long)]
    pub int8: bool,
    /// Truncate inputs longer than the model reads, as if every request set `truncate`
    /// (otherwise such an input is answered 413).
    #[arg(long)]
    pub auto_truncate: bool,
    /// The key every route but /health requires, sent as `Authorization: Bearer KEY`.
    #[arg(long, env = "SESAME_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Serve with no key on an address other than loopback (refused without this flag).
    #[arg(long, conflicts_with = "api_key")]
    pub no_api_key: bool,
    /// Origins a browser may call the server from, comma-separated (`*`: any) [default: none].
    #[arg(long, value_delimiter = ',')]
    pub cors_allow_origin: Vec<String>,
    /// Connections open at once; one more takes the place of the oldest idle one, or is
    /// answered 503 when all are busy.
    #[arg(long, default_value_t = 1024, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_connections: usize,
    /// Seconds a client has to send a request's line and headers (a kept-alive connection
    /// idle this long is closed too).
    #[arg(long, default_value_t = 10, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=86_400))]
    pub header_read_timeout: u64,
    /// Seconds a client has to send a request's body once its headers are read (408 past it).
    #[arg(long, default_value_t = 30, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=86_400))]
    pub body_read_timeout: u64,
    /// One JSON line per request on stderr: its id, route, status, and where its time went.
    #[arg(long)]
    pub json_output: bool,
    #[command(flatten)]
    pub backend: BackendArg,
}

/// The task `architectures` implies: its head's, else embeddings.
fn task_of(dir: &Path) -> Result<ServeTask, String> {
    let json = crate::common::config_json(dir)?;
    let class = json["architectures"][0].as_str().unwrap_or_default();
    Ok(match class {
        c if c.ends_with("ForSequenceClassification") => ServeTask::Classify,
        c if c.ends_with("ForTokenClassification") => ServeTask::Tag,
        c if c.ends_with("ForQuestionAnswering") || c.ends_with("ForQuestionAnsweringSimple") => ServeTask::Answer,
        c if c.ends_with("ForConditionalGeneration") || c.ends_with("LMHeadModel") || c.ends_with("ForCausalLM") => ServeTask::Generate,
        _ => ServeTask::Embed,
    })
}

/// `cargo xtask serve`: load the model of `--task` (else the checkpoint's head) through the
/// facade, serve it until SIGTERM or Ctrl-C.
pub(crate) fn serve(args: ServeArgs) -> Result<String, String> {
    // Refused before the model loads.
    let options = serve_options(&args)?;
    let task = match args.task {
        Some(task) => task,
        None => task_of(&args.model)?,
    };
    let task = match task {
        ServeTask::Embed => Task::Embed,
        ServeTask::Classify => Task::Classify,
        ServeTask::Tag => Task::Tag,
        ServeTask::FillMask => Task::FillMask,
        ServeTask::Answer => Task::Answer,
        ServeTask::Generate => Task::Generate,
    };
    let mut pipeline = crate::common::pipeline_options(args.backend.device()?, args.int8, args.batch_size)?;
    // Each request says whether it wants unit vectors.
    pipeline.embed = EmbedOptions { pooling: args.pooling, layer: -1, normalize: false, batch_size: args.batch_size, max_tokens: args.max_tokens };
    pipeline.top_k = args.top_k;
    let model = crate::common::load_pipeline(task, &args.model, pipeline)?.served();
    listen(options, model)
}

/// The server's options from `args`, checked as the server will check them.
fn serve_options(args: &ServeArgs) -> Result<ServeOptions, String> {
    let api_key = args.api_key.as_deref().map(ApiKey::new).transpose().map_err(|e| e.to_string())?;
    let options = ServeOptions {
        host: args.host.clone(),
        port: args.port,
        max_batch_tokens: args.max_batch_tokens,
        max_batch_generations: args.max_batch_generations,
        max_concurrent_requests: args.max_concurrent_requests,
        max_client_batch_size: args.max_client_batch_size,
        payload_limit: args.payload_limit,
        model_id: args.model.display().to_string(),
        api_key,
        no_api_key: args.no_api_key,
        cors_allow_origins: args.cors_allow_origin.clone(),
        max_connections: args.max_connections,
        header_read_timeout: Duration::from_secs(args.header_read_timeout),
        body_read_timeout: Duration::from_secs(args.body_read_timeout),
        auto_truncate: args.auto_truncate,
        json_output: args.json_output,
    };
    sesame_serve::check(&options).map_err(|e| e.to_string())?;
    Ok(options)
}

/// Serve `model` with `options` until SIGTERM or Ctrl-C.
fn listen(options: ServeOptions, model: Arc<dyn ServedModel>) -> Result<String, String> {
    let route = model.task().route();
    sesame_serve::serve(model, options, |addr| eprintln!("listening on http://{addr} ({route})")).map_err(|e| e.to_string())?;
    Ok(String::new())
}
