//! `cargo xtask serve`: one checkpoint behind an HTTP server (`sesame-serve`), its task read
//! from the checkpoint or given with `--task`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::tensor::Device;
use sesame_layers::{Backbone, ForMaskedLM, HasMaskedLmHead, Pooling, PretrainedModel, SequenceClassifier, SpanExtractor, TokenTagger};
use sesame_pipelines::{sentence_transformers_max_seq_length, EmbedOptions};
use sesame_generate::decoding::{CausalLM, Seq2SeqLM};
use sesame_generate::GenerationConfig;
use sesame_serve::{CausalGenerator, Embedder, MaskFiller, Reader, Seq2SeqGenerator, ServeOptions, ServedModel, Tagger, TextClassifier};
use sesame_text::Tokenizer;

use crate::{check_architecture, int8_if_asked, load_task_model, report, BackendArg};

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
    #[arg(long, value_parser = crate::model_dir)]
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
    #[arg(long, default_value = "mean", value_parser = crate::parse_pooling)]
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
    #[command(flatten)]
    pub backend: BackendArg,
}

/// A loader of one task's model for a family: the model of `dir` on `device`, ready to serve.
pub type ServeFn = fn(&Path, &Device, &ServeArgs) -> Result<Arc<dyn ServedModel>, String>;

/// The tasks a family serves.
#[derive(Clone, Copy)]
pub struct Servers {
    /// Sentence embeddings of its base model.
    pub embed: Option<ServeFn>,
    /// Its sequence classifier.
    pub classify: Option<ServeFn>,
    /// Its token classifier.
    pub tag: Option<ServeFn>,
    /// Its masked LM.
    pub fill_mask: Option<ServeFn>,
    /// Its extractive-QA model.
    pub answer: Option<ServeFn>,
    /// Its text generator.
    pub generate: Option<ServeFn>,
}

/// The task `architectures` implies: its head's, else embeddings.
fn task_of(dir: &Path) -> Result<ServeTask, String> {
    let json = crate::config_json(dir)?;
    let class = json["architectures"][0].as_str().unwrap_or_default();
    Ok(match class {
        c if c.ends_with("ForSequenceClassification") => ServeTask::Classify,
        c if c.ends_with("ForTokenClassification") => ServeTask::Tag,
        c if c.ends_with("ForQuestionAnswering") || c.ends_with("ForQuestionAnsweringSimple") => ServeTask::Answer,
        c if c.ends_with("ForConditionalGeneration") || c.ends_with("LMHeadModel") || c.ends_with("ForCausalLM") => ServeTask::Generate,
        _ => ServeTask::Embed,
    })
}

/// The loader of `args`' task (`--task`, else the checkpoint's head) among `servers`: the
/// command's name and the family's loader, if it has one.
pub(crate) fn loader(args: &ServeArgs, servers: Servers) -> Result<(&'static str, Option<ServeFn>), String> {
    let task = match args.task {
        Some(task) => task,
        None => task_of(&args.model)?,
    };
    Ok(match task {
        ServeTask::Embed => ("serve --task embed", servers.embed),
        ServeTask::Classify => ("serve --task classify", servers.classify),
        ServeTask::Tag => ("serve --task tag", servers.tag),
        ServeTask::FillMask => ("serve --task fill-mask", servers.fill_mask),
        ServeTask::Answer => ("serve --task answer", servers.answer),
        ServeTask::Generate => ("serve --task generate", servers.generate),
    })
}

/// `cargo xtask serve`: load the model with `load`, serve it until SIGTERM or Ctrl-C.
pub(crate) fn serve(args: ServeArgs, load: ServeFn) -> Result<String, String> {
    let device = args.backend.device()?;
    crate::set_int8(args.int8, &device)?;
    let model = load(&args.model, &device, &args)?;
    let options = ServeOptions {
        host: args.host.clone(),
        port: args.port,
        max_batch_tokens: args.max_batch_tokens,
        max_concurrent_requests: args.max_concurrent_requests,
        max_client_batch_size: args.max_client_batch_size,
        payload_limit: args.payload_limit,
        model_id: args.model.display().to_string(),
    };
    let route = model.task().route();
    sesame_serve::serve(model, options, |addr| eprintln!("listening on http://{addr} ({route})")).map_err(|e| e.to_string())?;
    Ok(String::new())
}

/// Embeddings of base model `B`, pooled and truncated as `cargo xtask embed` does.
pub(crate) fn serve_embed<B: Backbone>(dir: &Path, device: &Device, args: &ServeArgs) -> Result<Arc<dyn ServedModel>, String> {
    let tokenizer = Tokenizer::from_dir(dir).map_err(|e| e.to_string())?;
    let loaded = int8_if_asked(<B as PretrainedModel>::from_pretrained(dir, device).map_err(|e| e.to_string())?);
    report(&loaded.report);
    let max_tokens = match args.max_tokens {
        Some(n) => Some(n),
        None => sentence_transformers_max_seq_length(dir).map_err(|e| e.to_string())?,
    };
    let options = EmbedOptions { pooling: args.pooling, layer: -1, normalize: false, batch_size: args.batch_size, max_tokens };
    Ok(Arc::new(Embedder::new(loaded.model, loaded.config, tokenizer, options)))
}

/// Sequence classifier `M`.
pub(crate) fn serve_classify<M: SequenceClassifier>(dir: &Path, device: &Device, args: &ServeArgs) -> Result<Arc<dyn ServedModel>, String> {
    check_architecture(dir, &M::architecture(), "sequence-classification")?;
    let (tokenizer, loaded) = load_task_model::<M>(dir, device, "sequence-classification", "fine-tune one with `cargo xtask finetune`")?;
    Ok(Arc::new(TextClassifier::new(loaded.model, loaded.config, tokenizer, args.batch_size)))
}

/// Token classifier `M`, long texts windowed with a quarter of the model's positions shared.
pub(crate) fn serve_tag<M: TokenTagger>(dir: &Path, device: &Device, args: &ServeArgs) -> Result<Arc<dyn ServedModel>, String> {
    use sesame_layers::HfConfig as _;
    check_architecture(dir, &M::architecture(), "token-classification")?;
    let (tokenizer, loaded) = load_task_model::<M>(dir, device, "token-classification", "fine-tune one with `cargo xtask finetune --task tag`")?;
    let stride = loaded.config.input_limits().max_len / 4;
    Ok(Arc::new(Tagger::new(loaded.model, loaded.config, tokenizer, args.batch_size, stride)))
}

/// The masked LM of base model `B`.
pub(crate) fn serve_fill_mask<B: HasMaskedLmHead>(dir: &Path, device: &Device, args: &ServeArgs) -> Result<Arc<dyn ServedModel>, String> {
    let (tokenizer, loaded) = load_task_model::<ForMaskedLM<B>>(dir, device, "masked-LM", "fill-mask needs a checkpoint trained with one")?;
    Ok(Arc::new(MaskFiller::new(loaded.model, loaded.config, tokenizer, args.batch_size, args.top_k)))
}

/// Extractive-QA model `M`, long contexts windowed with a third of the model's positions
/// shared, answers picked with `cargo xtask answer`'s defaults.
pub(crate) fn serve_answer<M: SpanExtractor>(dir: &Path, device: &Device, args: &ServeArgs) -> Result<Arc<dyn ServedModel>, String> {
    use sesame_layers::HfConfig as _;
    check_architecture(dir, &M::architecture(), "question-answering")?;
    let (tokenizer, loaded) = load_task_model::<M>(dir, device, "question-answering", "fine-tune one with `cargo xtask finetune --task qa`")?;
    let stride = loaded.config.input_limits().max_len / 3;
    Ok(Arc::new(Reader::new(loaded.model, loaded.config, tokenizer, args.batch_size, stride, Default::default())))
}

/// The generation settings of `dir` (generation_config.json, else config.json) for a model of
/// `max_positions` and `vocab_size`, checked; a request's parameters go over them.
fn generation_settings(dir: &Path, (max_positions, vocab_size): (usize, usize)) -> Result<GenerationConfig, String> {
    let in_file = |e: sesame_generate::ProcessorError| format!("{}: {e} (generation_config.json, else config.json)", dir.display());
    let mut settings = GenerationConfig::from_dir(dir).map_err(|e| e.to_string())?;
    settings.validate_ids(vocab_size).map_err(in_file)?;
    settings.model_max_positions = Some(max_positions);
    settings.validate().map_err(in_file)?;
    Ok(settings)
}

/// Encoder-decoder `M` (BART), as `cargo xtask generate` runs it.
pub(crate) fn serve_seq2seq<M: PretrainedModel + Seq2SeqLM + Sync>(dir: &Path, device: &Device, _args: &ServeArgs) -> Result<Arc<dyn ServedModel>, String> {
    let tokenizer = Tokenizer::from_dir(dir).map_err(|e| e.to_string())?;
    let loaded = crate::generate::lm_head_loaded(dir, int8_if_asked(M::from_pretrained(dir, device).map_err(|e| e.to_string())?))?;
    let settings = generation_settings(dir, (loaded.model.max_positions(), loaded.model.vocab_size()))?;
    let generator = Seq2SeqGenerator::new(loaded.model, tokenizer, settings)
        .ok_or_else(|| format!("{}: no decoder start (neither decoder_start_token_id nor bos_token_id is set)", dir.display()))?;
    Ok(Arc::new(generator))
}

/// Left-to-right model `M` (XLNet, BART's decoder), as `cargo xtask generate` runs it.
pub(crate) fn serve_left_to_right<M>(dir: &Path, device: &Device, _args: &ServeArgs) -> Result<Arc<dyn ServedModel>, String>
where
    M: PretrainedModel + CausalLM<Config = <M as PretrainedModel>::Config> + Sync,
{
    let tokenizer = Tokenizer::from_dir(dir).map_err(|e| e.to_string())?;
    let loaded = crate::generate::lm_head_loaded(dir, int8_if_asked(M::from_pretrained(dir, device).map_err(|e| e.to_string())?))?;
    let limits = <M as CausalLM>::causal_limits(&loaded.config);
    let settings = generation_settings(dir, (limits.max_len, limits.vocab_size))?;
    Ok(Arc::new(CausalGenerator::new(loaded.model, loaded.config, tokenizer, settings)))
}

/// A decoder checkpoint (`is_decoder`) of an encoder family `B`, left to right.
pub(crate) fn serve_causal<B: HasMaskedLmHead>(dir: &Path, device: &Device, args: &ServeArgs) -> Result<Arc<dyn ServedModel>, String> {
    let json = crate::config_json(dir)?;
    if json.get("is_decoder") != Some(&serde_json::Value::Bool(true)) {
        return Err(format!("{}: not a left-to-right model (config.json's is_decoder is not true); serve --task generate runs decoders ({}) and encoder-decoders", dir.display(), B::causal_lm_architecture()));
    }
    serve_left_to_right::<sesame_layers::ForCausalLM<B>>(dir, device, args)
}
