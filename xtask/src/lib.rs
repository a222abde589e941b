//! `cargo xtask …`: Sesame's command line. Results go to stdout as JSON; progress and errors
//! to stderr. The binary is [`main`]; [`run_args`] runs one command line in-process (the fuzz
//! targets drive commands with it).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sesame::PipelineOptions;
use sesame_pipelines::EmbedOptions;
use sesame_layers::Pooling;
use sesame_train::Backend;

use common::{finite_f32, model_dir, parse_pooling, pipeline_options, set_int8, speed, BackendArg, Texts};
use infer::{answer_with, classify_with, embed_with, fill_mask_with, tag_with};

mod common;
mod infer;
mod bench;
mod bench_serve;
mod finetune;
mod families;
mod forward;
mod generate;
mod prune;
mod serve;
mod distill;
mod train;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Sesame: the BERT family on Burn")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Sentence embeddings: prints `[[f32, ...], ...]`, one vector per text.
    Embed {
        /// HF model directory (config.json, weights, tokenizer), or a hub id (`org/name[@revision]`)
        /// in the local HuggingFace cache.
        #[arg(long, value_parser = model_dir)]
        model: PathBuf,
        /// Pooling over tokens.
        #[arg(long, default_value = "mean", value_parser = parse_pooling)]
        pooling: Pooling,
        /// Hidden state to pool: 0 = embeddings, -1 = last layer, -2 = penultimate, ...
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        layer: i64,
        /// L2-normalise each vector (after --dimensions cut it).
        #[arg(long)]
        normalize: bool,
        /// Keep each vector's first N dimensions (a Matryoshka model's shorter embedding:
        /// `finetune --task embed --matryoshka-dims`).
        #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
        dimensions: Option<usize>,
        /// Truncate texts to this many tokens [default: `max_seq_length` of the model's
        /// sentence_bert_config.json, as sentence-transformers does, else the model's limit].
        #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..=1_000_000))]
        max_tokens: Option<usize>,
        #[command(flatten)]
        inputs: InputArgs,
        #[command(flatten)]
        backend: BackendArg,
        /// Texts to embed (or --input).
        #[arg(conflicts_with = "input")]
        texts: Vec<String>,
    },
    /// Pre-train a model on text with its family's objective; exports HF format at the end.
    Train {
        #[command(flatten)]
        args: train::TrainArgs,
        #[command(flatten)]
        backend: BackendArg,
    },
    /// Fine-tune a checkpoint on your labelled file (CSV, TSV, JSON lines) and export the best
    /// model with its labels; prints the evaluation metrics as JSON.
    Finetune {
        #[command(flatten)]
        args: finetune::FinetuneArgs,
        #[command(flatten)]
        backend: BackendArg,
    },
    /// Remove the least important attention heads of a fine-tuned sequence classifier (Michel
    /// et al.'s gradient-based importance on your labelled rows) and save it with
    /// `pruned_heads`; prints the heads removed and the metrics on the rows before and after.
    Prune {
        #[command(flatten)]
        args: prune::PruneArgs,
        #[command(flatten)]
        backend: BackendArg,
    },
    /// Distil a fine-tuned sequence classifier (the teacher, --model) into a student of the same
    /// family with fewer layers, initialised from every other layer as DistilBERT (soft
    /// targets at a temperature, the labels, TinyBERT's hidden-state and attention losses);
    /// exported as `finetune` exports. A masked LM distils with `train FAMILY --teacher DIR`.
    Distill {
        #[command(flatten)]
        args: distill::DistillArgs,
        #[command(flatten)]
        backend: BackendArg,
    },
    /// Draw measured trade-offs as an SVG line chart: `--data` is a JSON object of series, each
    /// a list of `[x, y]` points (docs/guide/small-models.md's accuracy against speed).
    Plot {
        /// The series: `{"name": [[x, y], ...], ...}`.
        #[arg(long)]
        data: PathBuf,
        /// The SVG to write.
        #[arg(long)]
        out: PathBuf,
        /// The chart's title.
        #[arg(long, default_value = "")]
        title: String,
        /// The x axis' label.
        #[arg(long, default_value = "x")]
        x: String,
        /// The y axis' label.
        #[arg(long, default_value = "y")]
        y: String,
    },
    /// Export a training checkpoint to HF layout (transformers loads it).
    Export {
        #[command(flatten)]
        args: train::ExportArgs,
        #[command(flatten)]
        backend: BackendArg,
    },
    /// Time Sesame on the chosen backend (`--mode`: pre-training steps, forwards, embeddings, GEMM, generation, fine-tuning), against PyTorch and ONNX Runtime on request.
    Bench {
        #[command(flatten)]
        args: bench::BenchArgs,
        #[command(flatten)]
        backend: BackendArg,
    },
    /// Generate text (greedy, beam search or sampling, as transformers' `generate`): prints one
    /// JSON line per input, in input order, with `sequences` (token ids), `texts` and, for beam
    /// search, `sequences_scores`.
    Generate {
        #[command(flatten)]
        args: generate::GenerateArgs,
        #[command(flatten)]
        backend: BackendArg,
    },
    /// Run a head of a checkpoint on inputs named as transformers' arguments (a safetensors
    /// file); writes every output under transformers' field names.
    Forward {
        #[command(flatten)]
        args: forward::ForwardArgs,
        #[command(flatten)]
        backend: BackendArg,
    },
    /// Classify texts with a fine-tuned sequence classifier: prints, per text, the label and its
    /// probability with every label's (`{"label", "score", "scores"}`), the labels over 0.5 for
    /// a multi-label model (`{"labels", "scores"}`), or the number of a regression model
    /// (`{"value"}`).
    Classify {
        /// HF model directory with a sequence-classification head and a tokenizer.
        #[arg(long, value_parser = model_dir)]
        model: PathBuf,
        #[command(flatten)]
        inputs: InputArgs,
        #[command(flatten)]
        backend: BackendArg,
        /// Texts to classify (or --input).
        #[arg(conflicts_with = "input")]
        texts: Vec<String>,
        /// FastBERT's early exit (a model trained with `finetune --early-exit`): each text stops
        /// at the first layer whose normalised entropy is below S, in [0, 1] (0: every layer,
        /// the model's own output; larger: faster, less accurate); each result says its
        /// `exit_layer`.
        #[arg(long, value_parser = speed)]
        speed: Option<f64>,
    },
    /// Tag the words of texts with a fine-tuned token classifier: prints, per text, its
    /// entities `[{"entity_group", "score", "word", "start", "end"}, ...]` (character offsets),
    /// as transformers' token-classification pipeline with `aggregation_strategy="first"`.
    Tag {
        /// HF model directory with a token-classification head and a tokenizer.
        #[arg(long, value_parser = model_dir)]
        model: PathBuf,
        /// Tokens shared by consecutive windows of a text longer than the model reads
        /// [default: a quarter of its positions].
        #[arg(long)]
        stride: Option<usize>,
        #[command(flatten)]
        inputs: InputArgs,
        #[command(flatten)]
        backend: BackendArg,
        /// Texts to tag (or --input).
        #[arg(conflicts_with = "input")]
        texts: Vec<String>,
    },
    /// Answer questions from a context with a fine-tuned extractive-QA model: prints, per
    /// question, `{"answer", "score", "start", "end"}` (character offsets in the context), picked
    /// as transformers' run_qa.py post-processing picks it.
    Answer {
        /// HF model directory with a question-answering head and a tokenizer.
        #[arg(long, value_parser = model_dir)]
        model: PathBuf,
        /// The passage to answer from (or `@FILE` to read it from a file).
        #[arg(long)]
        context: String,
        /// Tokens shared by consecutive windows of a long context [default: a third of the
        /// model's positions].
        #[arg(long)]
        stride: Option<usize>,
        /// Longest answer in tokens.
        #[arg(long, default_value_t = 30, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
        max_answer_len: usize,
        /// Allow "no answer" (an empty answer) when it scores ahead of the best span by more
        /// than --null-threshold (SQuAD 2.0 models).
        #[arg(long)]
        allow_no_answer: bool,
        /// How far "no answer" must score ahead of the best span, with --allow-no-answer.
        #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = finite_f32)]
        null_threshold: f32,
        #[command(flatten)]
        inputs: InputArgs,
        #[command(flatten)]
        backend: BackendArg,
        /// Questions (or --input).
        #[arg(conflicts_with = "input")]
        texts: Vec<String>,
    },
    /// Serve a checkpoint over HTTP until SIGTERM or Ctrl-C: text-embeddings-inference's
    /// routes (`/embed`, `/predict`, `/tokenize`, `/health`, `/info`, `/metrics`), OpenAI's
    /// `/v1/embeddings`, and `/tag`; requests from every client are batched by token budget.
    Serve {
        #[command(flatten)]
        args: serve::ServeArgs,
    },
    /// Predict masked tokens: prints, per mask, `[{"token", "id", "score"}, ...]`.
    FillMask {
        /// HF model directory with an MLM head and a tokenizer.
        #[arg(long, value_parser = model_dir)]
        model: PathBuf,
        /// Candidates per mask.
        #[arg(long, default_value_t = 5, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
        top_k: usize,
        #[command(flatten)]
        inputs: InputArgs,
        #[command(flatten)]
        backend: BackendArg,
        /// Texts containing the mask token (e.g. `[MASK]`) (or --input).
        #[arg(conflicts_with = "input")]
        texts: Vec<String>,
    },
}

/// Where `embed` and `fill-mask` read texts from, and how many run at a time.
#[derive(clap::Args, Debug)]
struct InputArgs {
    /// Read the texts from this file (`-` for stdin): one per line, or JSON lines with a
    /// "text" field; results are printed as JSON lines, one per text, as they are computed.
    #[arg(long)]
    input: Option<PathBuf>,
    /// At most this many texts per forward pass (texts are grouped by token count, to pad little).
    #[arg(long, default_value_t = 32, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    batch_size: usize,
    /// Run the model's linear layers in int8: weights quantised per output channel, each
    /// token's activations as it runs (flex and ndarray; a model saved quantised always is).
    #[arg(long)]
    int8: bool,
}

fn run(cli: Cli) -> Result<String, String> {
    match cli.command {
        Command::Train { args, backend } => train::train(args, backend.device()?),
        Command::Export { args, backend } => train::export(args, backend.device()?),
        Command::Finetune { args, backend } => finetune::finetune(&args, backend.device()?),
        Command::Distill { args, backend } => distill::distill(&args, backend.device()?),
        Command::Plot { data, out, title, x, y } => {
            let text = std::fs::read_to_string(&data).map_err(|e| format!("{}: {e}", data.display()))?;
            let series: std::collections::BTreeMap<String, Vec<(f64, f64)>> =
                serde_json::from_str(&text).map_err(|e| format!("{}: not an object of [x, y] point lists: {e}", data.display()))?;
            let curves: Vec<(String, Vec<(f64, f64)>)> = series.into_iter().collect();
            let svg = sesame_train::plots::xy_svg(&title, &x, &y, &curves).map_err(|e| format!("{}: {e}", out.display()))?;
            sesame_layers::fs::write_atomic(&out, svg.as_bytes()).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
            Ok(String::new())
        }
        Command::Prune { args, backend } => prune::prune(&args, backend.device()?),
        Command::Bench { args, backend } => {
            let name = backend.backend.or(Backend::default_compiled()).map_or("none", Backend::name);
            bench::bench(args, backend.device()?, name, families::bench_target)
        }
        Command::Embed { model, pooling, layer, normalize, dimensions, max_tokens, inputs, backend, texts } => {
            let mut options = pipeline_options(backend.device()?, inputs.int8, inputs.batch_size)?;
            // The cut vector is normalised, not the whole one.
            options.embed = EmbedOptions { pooling, layer, normalize: normalize && dimensions.is_none(), batch_size: inputs.batch_size, max_tokens };
            let cut = dimensions.map(|d| (d, normalize));
            embed_with(&model, options, cut, &mut Texts::new(texts, inputs.input)?)
        }
        Command::Forward { args, backend } => {
            let device = backend.device()?;
            let family = families::model_family(&args.model)?;
            family.command("forward", family.forward)?(&args, &device).map(|()| String::new())
        }
        Command::Generate { args, backend } => {
            let device = backend.device()?;
            set_int8(args.int8, &device)?;
            if args.unilm_seq2seq {
                return families::unilm::generate_unilm(&args, &device).map(|()| String::new());
            }
            generate::generate(&args, &device).map(|()| String::new())
        }
        Command::Classify { model, inputs, backend, texts, speed } => {
            let options = pipeline_options(backend.device()?, inputs.int8, inputs.batch_size)?;
            classify_with(&model, options, &mut Texts::new(texts, inputs.input)?, speed)
        }
        Command::Tag { model, stride, inputs, backend, texts } => {
            let options = PipelineOptions { stride, ..pipeline_options(backend.device()?, inputs.int8, inputs.batch_size)? };
            tag_with(&model, options, &mut Texts::new(texts, inputs.input)?)
        }
        Command::Answer { model, context, stride, max_answer_len, allow_no_answer, null_threshold, inputs, backend, texts } => {
            let context = match context.strip_prefix('@') {
                Some(path) => std::fs::read_to_string(path).map_err(|e| format!("--context @{path}: {e}"))?,
                None => context,
            };
            if context.trim().is_empty() {
                return Err("--context is empty".into());
            }
            let answer = sesame_pipelines::AnswerOptions { max_answer_len, allow_no_answer, null_threshold, ..Default::default() };
            let options = PipelineOptions { stride, answer, ..pipeline_options(backend.device()?, inputs.int8, inputs.batch_size)? };
            answer_with(&model, options, &mut Texts::new(texts, inputs.input)?, &context)
        }
        Command::Serve { args } => serve::serve(args),
        Command::FillMask { model, top_k, inputs, backend, texts } => {
            let options = PipelineOptions { top_k, ..pipeline_options(backend.device()?, inputs.int8, inputs.batch_size)? };
            fill_mask_with(&model, options, &mut Texts::new(texts, inputs.input)?)
        }
    }
}

/// The command line: `Cli`, with the family arguments of `train` and `bench` taking the
/// registry's names (the command files name no family, nor the registry).
fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let command = Cli::command()
        .mut_subcommand("train", |c| c.mut_arg("family", |a| a.value_parser(train::family_parser())))
        .mut_subcommand("bench", |c| c.mut_arg("family", |a| a.value_parser(train::family_parser())));
    Cli::from_arg_matches(&command.try_get_matches_from(args)?)
}

/// Run the command line `args` (the first is the program's name): its JSON result, or the
/// error's one line.
pub fn run_args<I, T>(args: I) -> Result<String, String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    run(parse(args).map_err(|e| e.to_string().lines().next().unwrap_or_default().to_string())?)
}

/// The `cargo xtask` binary: the result on stdout, an error as one line on stderr.
pub fn main() -> ExitCode {
    match run(parse(std::env::args_os()).unwrap_or_else(|e| e.exit())) {
        Ok(json) => {
            if !json.is_empty() {
                println!("{json}");
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
