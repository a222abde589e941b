//! `cargo xtask bench`: Sesame's speed, and with `--compare-pytorch` PyTorch/transformers'
//! on the same work, run back to back (`scripts/bench_pytorch.py`):
//!
//! - `train`: a family's pre-training step (forward, its objective's loss, backward, AdamW),
//!   tokens/s per size preset;
//! - `infer`: forward passes of the base model, tokens/s per preset;
//! - `generate`: BART's (default), XLNet's or UniLM's generation (greedy and 4-beam search,
//!   exactly `--max-new-tokens` tokens on both sides) of a fresh model of a preset's shape
//!   (`base`: bart-base, xlnet-base, unilm-base), tokens/s, and each process's peak memory;
//!   UniLM's peer is microsoft/unilm's decoding loop on transformers' BERT;
//! - `embed`: sentence embeddings of a checkpoint (`--model`, e.g. all-MiniLM-L6-v2) on the
//!   first `--sentences` sentences of the corpus, sentences/s, model loading timed apart;
//! - `finetune`: `cargo xtask finetune` of a checkpoint (`--model`) into a classifier of
//!   `--train`, scored on `--eval`, once per `--seeds`, against transformers' `Trainer` on the
//!   same data and settings (`scripts/finetune_trainer.py`): training time (evaluations
//!   included) and held-out metrics of each run, their mean and spread on each side;
//! - `serve`: `cargo xtask serve` under load, beside infinity-emb (`bench_serve`).
//!
//! Medians of `--steps` timed runs after `--warmup` untimed ones. Every row carries its
//! `machine`: the CPU, its cores, the ISA level the kernels run at, the threads each side uses
//! and both sides' GEMM rate measured in the same run.
//!
//! With `--compare-pytorch`, PyTorch runs with nothing of Sesame's alive: each preset (and the
//! embed run) is timed in a process of its own (this program again), where PyTorch's side
//! runs first, before Sesame's timing, with only the model it reads written by then. The
//! machine's GEMM rates are taken in this process before any child starts, PyTorch's first.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::prelude::*;
use sesame_pipelines::{embed, sentence_transformers_max_seq_length, EmbedOptions};
use sesame_layers::{Backbone, OutputOptions, Pooling, PretrainedModel};
use sesame_text::{Corpus, MaskedBatch, Tokenizer};
use sesame_train::pretraining::{PretrainingBatch, PretrainingFamily, PretrainingModel};
use sesame_train::{run_micro_batches, TrainConfig};

/// What `cargo xtask bench` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchMode {
    /// Pre-training steps.
    Train,
    /// Forward passes of the base model.
    Infer,
    /// Sentence embeddings of `--model`.
    Embed,
    /// f32 matrix products (GFLOP/s): a square one of side `--gemm-size`, or each of
    /// `--gemm-shapes`; the kernel under every layer, to tell a backend's GEMM rate from the
    /// costs Sesame adds (with `--compare-pytorch`: PyTorch's, and OpenBLAS's through NumPy).
    Gemm,
    /// Generation of BART (default), XLNet or UniLM (sequence-to-sequence), greedy and beam
    /// search (`--presets tiny,base`; `--seq-len` source or prompt tokens; `--max-new-tokens`;
    /// `--num-beams`).
    Generate,
    /// Fine-tuning a classifier: `--model` on `--train`, scored on `--eval`, `--epochs`, once
    /// per `--seeds` (`--batch-size`, `--seq-len`, `--lr`), whole runs timed.
    Finetune,
    /// Fine-tuning a sentence-embedding model (`finetune --task embed`, MultipleNegativesRankingLoss):
    /// as `finetune`, against sentence-transformers' `SentenceTransformerTrainer`
    /// (`scripts/embed_trainer.py`), both exports scored by its `InformationRetrievalEvaluator`.
    FinetuneEmbed,
    /// `cargo xtask serve` of an embedding model (`--model`) under load from `oha`: for each
    /// `--texts-per-request`, `--clients` clients for `--duration` seconds; with
    /// `--compare-infinity`, infinity-emb serving the same model on the same cores after it.
    Serve,
}

/// Options of `cargo xtask bench`.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// What to time.
    #[arg(long, value_enum, default_value = "train")]
    pub mode: BenchMode,
    /// The family timed [default: bert; bart for generate]; embed takes the family of `--model`.
    // Its possible values are the registry's, set where the command line is built (lib.rs).
    #[arg(long)]
    pub family: Option<String>,
    /// Vocabulary size (BERT's by default; RoBERTa's is 50265, ALBERT's 30000).
    #[arg(long, default_value_t = 30522)]
    pub vocab_size: usize,
    /// Size presets to time (tiny, mini, small, base).
    #[arg(long, value_delimiter = ',', default_value = "mini,base")]
    pub presets: Vec<String>,
    /// Sequences per batch (default 8; 32 for embed, sentence-transformers' default).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub batch_size: Option<usize>,
    /// Train: micro-batches the step's `--batch-size` sequences are split into, trained at once
    /// on as many threads on a CPU backend, gradients averaged, as `cargo xtask train` does
    /// (default: the number of CPU cores on flex and ndarray, else 1).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub micro_batches: Option<usize>,
    /// Tokens per sequence (train, infer).
    #[arg(long, default_value_t = 128, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub seq_len: usize,
    /// Untimed warm-up runs.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Timed runs (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub steps: usize,
    /// Embed, finetune: the HF / sentence-transformers model directory.
    #[arg(long, value_parser = crate::common::model_dir)]
    pub model: Option<PathBuf>,
    /// Embed: how many sentences of `--corpus` to embed.
    #[arg(long, default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000_000))]
    pub sentences: usize,
    /// Embed: the text the sentences come from.
    #[arg(long, default_value = "data/moby-dick.txt")]
    pub corpus: PathBuf,
    /// Embed: pooling (sentence-transformers' MiniLM: mean, normalised).
    #[arg(long, default_value = "mean", value_parser = crate::common::parse_pooling)]
    pub pooling: Pooling,
    /// Embed: L2-normalise.
    #[arg(long)]
    pub normalize: bool,
    /// Generate: tokens generated per sequence (`min_new_tokens` = `max_new_tokens`, so both
    /// sides generate as many).
    #[arg(long, default_value_t = 32, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub max_new_tokens: usize,
    /// Generate: beams of the beam-search run.
    #[arg(long, default_value_t = 4, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..=64))]
    pub num_beams: usize,
    /// Gemm: the side of the square matrices.
    #[arg(long, default_value_t = 1024, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub gemm_size: usize,
    /// Gemm: products `MxKxN` (`[M, K]` times `[K, N]`) to time instead of the square one, e.g.
    /// BERT-base's at 8 × 128 tokens: `1024x768x768,1024x768x3072,1024x3072x768`.
    #[arg(long, value_delimiter = ',', value_parser = parse_gemm_shape)]
    pub gemm_shapes: Vec<[usize; 3]>,
    /// Gemm: the right-hand side stored `[N, K]` and read transposed (`[M, K]` times `[N, K]ᵀ`),
    /// as a tied LM head reads its embedding table and attention reads its keys.
    #[arg(long)]
    pub gemm_transposed: bool,
    /// Finetune: the training rows (CSV/TSV with `text` and `label` columns, or JSON lines).
    #[arg(long)]
    pub train: Option<PathBuf>,
    /// Finetune: the held-out rows.
    #[arg(long)]
    pub eval: Option<PathBuf>,
    /// Finetune: passes over the training rows (a fraction stops within the first).
    #[arg(long, default_value_t = 1.0, value_parser = sesame_train::cli::positive_epochs)]
    pub epochs: f64,
    /// Finetune: peak learning rate.
    #[arg(long, default_value_t = 5e-5)]
    pub lr: f64,
    /// Finetune: one run per seed on each side.
    #[arg(long, value_delimiter = ',', default_value = "42")]
    pub seeds: Vec<u64>,
    /// Also run the same work in PyTorch/transformers (`scripts/bench_pytorch.py`; for
    /// finetune-embed, sentence-transformers' trainer) right after, and report the ratio
    /// Sesame / PyTorch.
    #[arg(long, alias = "compare-sentence-transformers")]
    pub compare_pytorch: bool,
    /// Embed, infer: also run the same sentences (embed) or batch (infer) through ONNX
    /// Runtime, the model exported by torch, in fp32 and dynamically quantised to int8 (weights
    /// per tensor, and per channel) (`scripts/bench_onnxruntime.py`), and report the ratios.
    #[arg(long)]
    pub compare_onnxruntime: bool,
    /// Embed, infer: run the model's linear layers in int8 (`embed --int8`), on flex or ndarray.
    #[arg(long)]
    pub int8: bool,
    /// The Python with torch and transformers (default: $SESAME_PYTHON, set by
    /// `eval "$(scripts/setup-python.sh)"`, else `python3`).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Set on the process `--compare-pytorch` starts for one preset (`--only-preset`): time
    /// here, without the machine's rows.
    #[arg(long, hide = true)]
    pub child: bool,
    /// With `--child`: the one preset to time.
    #[arg(long, hide = true)]
    pub only_preset: Option<String>,
    /// Serve: texts per request, one load run each.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub texts_per_request: Vec<usize>,
    /// Serve: concurrent clients.
    #[arg(long, default_value_t = 16, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    pub clients: usize,
    /// Serve: seconds of load per `--texts-per-request`.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub duration: u64,
    /// Serve: also run infinity-emb (`infinity_emb v2`, torch engine, CPU) on the same model.
    #[arg(long)]
    pub compare_infinity: bool,
    /// Serve: infinity-emb's program [default: $SESAME_INFINITY, else `infinity_emb`].
    #[arg(long)]
    pub infinity: Option<PathBuf>,
    /// Serve: the load generator [default: `oha` on the PATH; `cargo install oha`].
    #[arg(long)]
    pub oha: Option<PathBuf>,
}

impl BenchArgs {
    pub(crate) fn batch_size(&self) -> usize {
        self.batch_size.unwrap_or(if matches!(self.mode, BenchMode::Embed | BenchMode::Serve) { 32 } else { 8 })
    }
}

/// Rows `rows` of a full batch of `b × s` tokens with every seventh one masked
/// (`scripts/bench_pytorch.py` builds the same).
fn batch(vocab_size: usize, rows: std::ops::Range<usize>, s: usize, device: &Device) -> PretrainingBatch {
    let b = rows.len();
    let input_ids: Vec<i64> = synthetic_row(vocab_size, rows.start * s..rows.end * s).into_iter().map(i64::from).collect();
    let mlm_labels = input_ids.iter().zip(rows.start * s..).map(|(&id, i)| if i % 7 == 3 { id } else { -100 }).collect();
    let batch = MaskedBatch {
        batch: b,
        seq: s,
        input_ids,
        token_type_ids: vec![0; b * s],
        attention_mask: vec![1; b * s],
        mlm_labels,
        pair_labels: rows.map(|i| i as i64 % 2).collect(),
        tokens: b * s,
    };
    PretrainingBatch::new(&batch, false, device)
}

/// Median seconds of `steps` runs of `run` after `warmup` untimed ones.
fn median_time(warmup: usize, steps: usize, mut run: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    let mut times = Vec::new();
    for i in 0..warmup + steps {
        let start = Instant::now();
        run()?;
        if i >= warmup {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// The Python of `--python`, else `$SESAME_PYTHON`, else `python3`.
fn python(bench: &BenchArgs) -> PathBuf {
    bench.python.clone().or_else(|| std::env::var_os("SESAME_PYTHON").map(PathBuf::from)).unwrap_or_else(|| "python3".into())
}

/// Run `scripts/bench_pytorch.py` with `args` and parse its JSON.
fn pytorch(bench: &BenchArgs, args: &[String]) -> Result<serde_json::Value, String> {
    peer_script(bench, "--compare-pytorch", "bench_pytorch.py", args)
}

/// Run `scripts/<script>` (the peer side of `flag`) with `args`, `--warmup` and `--steps`,
/// and parse the JSON it prints.
fn peer_script(bench: &BenchArgs, flag: &str, script: &str, args: &[String]) -> Result<serde_json::Value, String> {
    let python = python(bench);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts").join(script);
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args(args)
        .args(["--warmup", &bench.warmup.to_string(), "--steps", &bench.steps.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("{flag}: cannot run {} (--python, or eval \"$(scripts/setup-python.sh)\"): {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!("{flag}: {} {} failed ({})", python.display(), script.display(), out.status));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{flag}: unreadable output of {}: {e}", script.display()))
}

/// Time `args.mode` and return one JSON row per preset (or one for embed), each with the
/// machine it ran on.
/// What `bench` needs of the family it times, as the registry gives it.
pub struct BenchTarget {
    /// Times the family's rows of `args.mode`.
    pub bench: fn(&BenchArgs, Device, &str) -> Result<Vec<serde_json::Value>, String>,
    /// Refuses a `--presets` name the family does not have for the mode.
    pub check_presets: fn(&BenchArgs) -> Result<(), String>,
}

/// Run `bench` on the family `target` picks for the arguments.
pub fn bench(mut args: BenchArgs, device: Device, backend: &str, target: fn(&BenchArgs) -> Result<BenchTarget, String>) -> Result<String, String> {
    if args.vocab_size <= 5 {
        return Err("--vocab-size must exceed 5".into());
    }
    if args.int8 && !matches!(args.mode, BenchMode::Embed | BenchMode::Infer) {
        return Err("--int8 times --mode embed and infer only".into());
    }
    if !args.gemm_shapes.is_empty() && args.mode != BenchMode::Gemm {
        return Err("--gemm-shapes times --mode gemm only (every row's machine has the square --gemm-size)".into());
    }
    if args.gemm_transposed && args.mode != BenchMode::Gemm {
        return Err("--gemm-transposed times --mode gemm only".into());
    }
    crate::common::set_int8(args.int8, &device)?;
    if args.child {
        if let Some(preset) = args.only_preset.take() {
            args.presets = vec![preset];
        }
        return rows(&args, device, backend, target).map(|rows| serde_json::to_string(&rows).expect("JSON"));
    }
    if args.compare_onnxruntime && !matches!(args.mode, BenchMode::Embed | BenchMode::Infer) {
        return Err("--compare-onnxruntime times --mode embed and infer only".into());
    }
    if args.compare_onnxruntime && matches!(args.pooling, Pooling::Max) {
        return Err("--compare-onnxruntime pools with --pooling mean or cls".into());
    }
    if args.mode == BenchMode::Serve && (args.compare_pytorch || args.compare_onnxruntime) {
        return Err("--mode serve compares with --compare-infinity (a peer server), not --compare-pytorch or --compare-onnxruntime".into());
    }
    if args.compare_infinity && args.mode != BenchMode::Serve {
        return Err("--compare-infinity times --mode serve only".into());
    }
    let isolate = (args.compare_pytorch || args.compare_onnxruntime) && !matches!(args.mode, BenchMode::Gemm | BenchMode::Finetune | BenchMode::FinetuneEmbed);
    // Refuse bad arguments before the machine's GEMM is timed.
    match args.mode {
        BenchMode::Gemm => {}
        BenchMode::Serve => {
            let dir = args.model.as_ref().ok_or("--mode serve needs --model (an embedding model's directory)")?;
            crate::common::config_json(dir)?;
        }
        BenchMode::Finetune | BenchMode::FinetuneEmbed => finetune_inputs(&args).map(|_| ())?,
        BenchMode::Embed => target(&args).map(|_| ())?,
        _ => (target(&args)?.check_presets)(&args)?,
    }
    let machine = machine(&args, &device, backend)?;
    let mut rows = if isolate {
        let presets = if args.mode == BenchMode::Embed { vec![None] } else { args.presets.iter().map(Some).collect() };
        let mut rows = Vec::new();
        for preset in presets {
            rows.extend(child_rows(preset.map(String::as_str))?);
        }
        rows
    } else {
        self::rows(&args, device, backend, target)?
    };
    for row in &mut rows {
        row["machine"] = machine.clone();
    }
    Ok(serde_json::to_string(&rows).expect("JSON"))
}

/// The rows of `args.mode`, timed in this process.
fn rows(args: &BenchArgs, device: Device, backend: &str, target: fn(&BenchArgs) -> Result<BenchTarget, String>) -> Result<Vec<serde_json::Value>, String> {
    match args.mode {
        BenchMode::Gemm => bench_gemm(args, device, backend),
        BenchMode::Finetune | BenchMode::FinetuneEmbed => bench_finetune(args, backend).map(|row| vec![row]),
        BenchMode::Serve => {
            let load = crate::bench_serve::ServeLoad {
                model: args.model.as_deref().ok_or("--mode serve needs --model (an embedding model's directory)")?,
                corpus: &args.corpus,
                texts_per_request: &args.texts_per_request,
                clients: args.clients,
                duration: args.duration,
                batch_size: args.batch_size(),
                compare_infinity: args.compare_infinity,
                infinity: args.infinity.clone(),
                oha: args.oha.clone(),
            };
            crate::bench_serve::bench_serve(&load, backend)
        }
        _ => (target(args)?.bench)(args, device, backend),
    }
}

/// The rows of one preset (all of embed when `None`), timed by this program in a process of
/// its own with this run's arguments.
fn child_rows(preset: Option<&str>) -> Result<Vec<serde_json::Value>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut command = std::process::Command::new(&exe);
    command.args(std::env::args_os().skip(1)).arg("--child");
    if let Some(preset) = preset {
        command.args(["--only-preset", preset]);
    }
    let out = command.stderr(std::process::Stdio::inherit()).output().map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!("the timing of preset {} failed ({})", preset.unwrap_or("embed"), out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).map_err(|e| format!("unreadable rows from {}: {e}", exe.display()))
}

/// Where the rows ran: the CPU model and its logical cores, the ISA level of the CPU and of
/// flex's GEMM kernels, the threads Sesame's CPU work uses, and the `--gemm-size` f32 GEMM rate
/// of both sides (PyTorch's first, with `--compare-pytorch`), measured now.
fn machine(args: &BenchArgs, device: &Device, backend: &str) -> Result<serde_json::Value, String> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| info.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let isa = isa_level();
    let mut machine = serde_json::json!({
        "cpu": cpu, "logical_cores": cores, "isa": isa, "sesame_threads": sesame_layers::device::default_threads(device),
    });
    if backend == "flex" {
        // burn-flex's GEMM (the gemm crate, `x86-v4` enabled) picks its kernels at run time by this level.
        machine["flex_kernels"] = isa.into();
    }
    if args.mode != BenchMode::Gemm {
        let gemm = BenchArgs { mode: BenchMode::Gemm, child: false, gemm_shapes: Vec::new(), gemm_transposed: false, ..args.clone() };
        let row = bench_gemm(&gemm, device.clone(), backend)?.remove(0);
        machine["gemm_n"] = row["n"].clone();
        machine["sesame_gemm_gflops"] = row["gflops"].clone();
        if let Some(theirs) = row.get("pytorch") {
            machine["pytorch_gemm_gflops"] = theirs["gflops"].clone();
            machine["openblas_gemm_gflops"] = theirs["openblas_gflops"].clone();
            machine["pytorch_threads"] = theirs["threads"].clone();
            machine["pytorch_cpu_capability"] = theirs["cpu_capability"].clone();
        }
    }
    Ok(machine)
}

/// The x86-64 micro-architecture level this CPU offers (`x86-64-v4`: AVX-512; `v3`: AVX2 and
/// FMA), or the architecture's name elsewhere.
fn isa_level() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512bw") && has!("avx512cd") && has!("avx512dq") && has!("avx512vl") {
            return "x86-64-v4 (AVX-512)".into();
        }
        if has!("avx2") && has!("fma") && has!("bmi2") {
            return "x86-64-v3 (AVX2, FMA)".into();
        }
        return "x86-64-v2 or below (no AVX2)".into();
    }
    #[allow(unreachable_code)]
    std::env::consts::ARCH.to_string()
}

/// `bench` for the family pre-trained as `F` whose base model is `B`.
pub fn bench_family<F, B>(args: &BenchArgs, device: Device, backend: &str) -> Result<Vec<serde_json::Value>, String>
where
    F: PretrainingFamily,
    B: Backbone,
    F::Model: PretrainedModel<Config = B::Config>,
{
    if args.mode == BenchMode::Embed {
        return bench_embed::<B>(args, device, backend).map(|row| vec![row]);
    }
    if args.mode == BenchMode::Generate {
        return Err(format!("--mode generate benches bart, xlnet and unilm, not {}", F::NAME));
    }
    let family = F::NAME;
    let (b, s) = (args.batch_size(), args.seq_len);
    let micro_batches = args.micro_batches.unwrap_or_else(|| sesame_layers::device::default_threads(&device));
    let mut rows = Vec::new();
    for preset in &args.presets {
        let config = F::preset(preset, args.vocab_size, s.max(512), 0).map_err(|e| e.to_string())?;
        let mode = format!("{:?}", args.mode).to_lowercase();
        let label = format!("{family} {preset} {mode}");
        // The same architecture: the config.json (and ELECTRA's generator/config.json) of
        // this preset, written by exporting a fresh model.
        let write = |dir: &Path| F::Model::init(&config, &device).export(&config, dir).map(|_| ()).map_err(|e| e.to_string());
        let theirs = peer_steps(args, &label, &mode.replace("train", "pretrain"), [b, s], &write)?;
        let onnx = match args.compare_onnxruntime {
            true => Some(onnxruntime_steps(args, &label, [b, s], &write)?),
            false => None,
        };
        let data = batch(args.vocab_size, 0..b, s, &device);
        let median = match args.mode {
            BenchMode::Train => {
                let device = device.clone().autodiff();
                let micro = micro_batches.min(b) as u64;
                let parts: Vec<_> = (0..micro as usize).map(|m| batch(args.vocab_size, m * b / micro as usize..(m + 1) * b / micro as usize, s, &device)).collect();
                time_train_steps(args, F::Model::new_hf(&config, &device), micro, |i, replica| replica.pretraining_step(parts[i as usize].clone(), None).loss)?
            }
            _ => {
                let model = B::new_hf(&config, &device);
                let model = if args.int8 { sesame_layers::int8::quantize(model) } else { model };
                median_time(args.warmup, args.steps, || {
                    let out = model.forward(data.input.clone(), OutputOptions::default());
                    out.last_hidden_state().sum().try_into_scalar::<f32>().map(|_| ()).map_err(|e| format!("{e:?}"))
                })?
            }
        };
        let tokens_per_s = (b * s) as f64 / median;
        let micro = if args.mode == BenchMode::Train { micro_batches.min(b) } else { 1 };
        eprintln!("{backend} {label}: {median:.3} s/step, {tokens_per_s:.0} tokens/s (batch {b}x{s} in {micro} micro-batches)");
        let mut row = serde_json::json!({
            "mode": mode, "backend": backend, "family": family, "preset": preset, "vocab_size": args.vocab_size,
            "batch_size": b, "seq_len": s, "micro_batches": micro, "int8": args.int8, "median_step_s": median, "tokens_per_s": tokens_per_s, "timed_steps": args.steps,
        });
        attach(&mut row, theirs, "tokens_per_s", &label);
        attach_onnxruntime(&mut row, onnx, "tokens_per_s", &label);
        rows.push(row);
    }
    Ok(rows)
}

/// ONNX Runtime's figures `onnx` (if compared: fp32, int8, int8 per channel) into `row`, with
/// the ratio of `figure`, Sesame's over each (above 1: Sesame faster).
fn attach_onnxruntime(row: &mut serde_json::Value, onnx: Option<serde_json::Value>, figure: &str, label: &str) {
    let Some(onnx) = onnx else { return };
    let ours = row[figure].as_f64().unwrap_or(f64::NAN);
    for kind in ["fp32", "int8", "int8_per_channel"] {
        let theirs = onnx[kind][figure].as_f64().unwrap_or(f64::NAN);
        eprintln!("onnxruntime {kind} {label}: {theirs:.1} {figure}; Sesame {} / ONNX Runtime {kind} = {:.2}x", row["backend"].as_str().unwrap_or("?"), ours / theirs);
        row[format!("onnxruntime_{kind}_ratio")] = (ours / theirs).into();
    }
    row["onnxruntime"] = onnx;
}

/// With `--compare-onnxruntime` (`--mode infer`), ONNX Runtime's side, run before Sesame's:
/// `write` saves the model into a scratch directory, and `scripts/bench_onnxruntime.py` exports
/// it (fp32, int8, int8 per channel) and times each on a `[b, s]` batch.
fn onnxruntime_steps(args: &BenchArgs, label: &str, [b, s]: [usize; 2], write: impl FnOnce(&Path) -> Result<(), String>) -> Result<serde_json::Value, String> {
    let dir = std::env::temp_dir().join(format!("sesame-bench-onnx-{}-{}", label.replace(' ', "-"), std::process::id()));
    let flags = ["--mode", "infer", "--config", &dir.display().to_string(), "--batch-size", &b.to_string(), "--seq-len", &s.to_string()].map(String::from);
    let theirs = write(&dir).and_then(|()| peer_script(args, "--compare-onnxruntime", "bench_onnxruntime.py", &flags));
    let _ = std::fs::remove_dir_all(&dir);
    theirs
}

/// With `--compare-pytorch`, PyTorch's side of a `train` or `infer` row, run before Sesame's:
/// `write` saves the model (its config.json, and what else `scripts/bench_pytorch.py` reads)
/// into a scratch directory and the script times the same work there (`mode`, `[batch, seq]`).
pub(crate) fn peer_steps(args: &BenchArgs, label: &str, mode: &str, [b, s]: [usize; 2], write: impl FnOnce(&Path) -> Result<(), String>) -> Result<Option<serde_json::Value>, String> {
    if !args.compare_pytorch {
        return Ok(None);
    }
    let dir = std::env::temp_dir().join(format!("sesame-bench-{}-{}", label.replace(' ', "-"), std::process::id()));
    let theirs = write(&dir).and_then(|()| pytorch(args, &[mode.into(), "--config".into(), dir.display().to_string(), "--batch-size".into(), b.to_string(), "--seq-len".into(), s.to_string()]));
    let _ = std::fs::remove_dir_all(&dir);
    theirs.map(Some)
}

/// PyTorch's figures `theirs` (if compared) into `row`, with the ratio of `figure`, Sesame's
/// over PyTorch's (above 1: Sesame faster).
pub(crate) fn attach(row: &mut serde_json::Value, theirs: Option<serde_json::Value>, figure: &str, label: &str) {
    let Some(theirs) = theirs else { return };
    let ratio = row[figure].as_f64().unwrap_or(f64::NAN) / theirs[figure].as_f64().unwrap_or(f64::NAN);
    eprintln!("pytorch {label}: {:.1} {figure}; Sesame {} / PyTorch = {ratio:.2}x", theirs[figure].as_f64().unwrap_or(f64::NAN), row["backend"].as_str().unwrap_or("?"));
    row["pytorch"] = theirs;
    row["ratio"] = ratio.into();
}

/// The trainer's step, timed (median of `--steps` after `--warmup`): `micro` micro-batches,
/// on threads on a CPU, each `loss(i, replica)` divided by `micro` and back-propagated, the
/// gradients summed, one AdamW step.
pub(crate) fn time_train_steps<M: burn::module::Module + Send + Sync>(args: &BenchArgs, model: M, micro: u64, loss: impl Fn(u64, &M) -> Tensor<1> + Sync) -> Result<f64, String> {
    let device = model.devices().into_iter().next().ok_or("a model without parameters")?;
    let mut model = Some(model);
    let mut optim = TrainConfig::default().optimizer();
    median_time(args.warmup, args.steps, || {
        let m = model.take().expect("a model");
        let grads = run_micro_batches(&m, micro, micro as usize, 0, |i, replica| GradientsParams::from_grads((loss(i, replica) / micro as f64).backward(), replica));
        let mut sum = GradientsAccumulator::<M>::new();
        for g in grads {
            sum.accumulate(&m, g);
        }
        model = Some(optim.step(1e-4, m, sum.grads()));
        device.sync().map_err(|e| format!("{e:?}"))
    })
}

/// `embed` of the first `--sentences` sentences of `--corpus` with the checkpoint `--model`.
fn bench_embed<B: Backbone>(args: &BenchArgs, device: Device, backend: &str) -> Result<serde_json::Value, String> {
    let dir = args.model.as_ref().expect("checked by bench");
    let corpus = Corpus::read(&args.corpus).map_err(|e| e.to_string())?;
    let sentences: Vec<String> = corpus.sentences().take(args.sentences).map(str::to_string).collect();
    let texts: Vec<&str> = sentences.iter().map(String::as_str).collect();
    // The peers first: sentence-transformers, and ONNX Runtime in fp32 and int8.
    let (mut theirs, mut onnx) = (None, None);
    if args.compare_pytorch || args.compare_onnxruntime {
        let file = std::env::temp_dir().join(format!("sesame-bench-sentences-{}.txt", std::process::id()));
        std::fs::write(&file, sentences.join("\n")).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        let mut common = vec!["--model".into(), dir.display().to_string(), "--sentences".into(), file.display().to_string(), "--batch-size".into(), args.batch_size().to_string()];
        if args.normalize {
            common.push("--normalize".into());
        }
        // `bench` refused max pooling with --compare-onnxruntime.
        let pooling = if matches!(args.pooling, Pooling::Cls) { "cls" } else { "mean" };
        let mut run = || -> Result<(), String> {
            if args.compare_pytorch {
                theirs = Some(pytorch(args, &[vec!["embed".into()], common.clone()].concat())?);
            }
            if args.compare_onnxruntime {
                onnx = Some(peer_script(args, "--compare-onnxruntime", "bench_onnxruntime.py", &[common.clone(), vec!["--pooling".into(), pooling.into()]].concat())?);
            }
            Ok(())
        };
        let ran = run();
        let _ = std::fs::remove_file(&file);
        ran?;
    }
    let start = Instant::now();
    let tokenizer = Tokenizer::from_dir(dir).map_err(|e| e.to_string())?;
    let tokenizer_s = start.elapsed().as_secs_f64();
    let loaded = crate::common::int8_if_asked(<B as PretrainedModel>::from_pretrained(dir, &device).map_err(|e| e.to_string())?);
    device.sync().map_err(|e| format!("{e:?}"))?;
    let load_s = start.elapsed().as_secs_f64();
    let from_pretrained_s = load_s - tokenizer_s;
    // Truncated as sentence-transformers truncates (its `max_seq_length`), so both sides see the same tokens.
    let max_tokens = sentence_transformers_max_seq_length(dir).map_err(|e| e.to_string())?;
    let options = EmbedOptions { pooling: args.pooling, layer: -1, normalize: args.normalize, batch_size: args.batch_size(), max_tokens };
    // The last timed run's vectors: with --int8, what is compared with the float model's.
    let mut vectors = Vec::new();
    let median = median_time(args.warmup, args.steps, || embed(&loaded.model, &loaded.config, &tokenizer, &texts, options).map(|v| vectors = v).map_err(|e| e.to_string()))?;
    let per_s = texts.len() as f64 / median;
    eprintln!("{backend} embed {}: loading {load_s:.3} s (tokenizer {tokenizer_s:.3} s, from_pretrained {from_pretrained_s:.3} s); {} sentences in {median:.3} s, {per_s:.1} sentences/s (batch {})", dir.display(), texts.len(), options.batch_size);
    let mut row = serde_json::json!({
        "mode": "embed", "backend": backend, "model": dir, "int8": args.int8, "sentences": texts.len(), "batch_size": options.batch_size,
        "load_s": load_s, "tokenizer_s": tokenizer_s, "from_pretrained_s": from_pretrained_s, "median_encode_s": median, "sentences_per_s": per_s, "timed_steps": args.steps,
    });
    if args.int8 {
        // What the quantisation costs: each int8 embedding's cosine to the float model's.
        let float = <B as PretrainedModel>::from_pretrained(dir, &device).map_err(|e| e.to_string())?;
        let reference = embed(&float.model, &float.config, &tokenizer, &texts, options).map_err(|e| e.to_string())?;
        let cosine = |a: &[f32], b: &[f32]| {
            let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            dot / (a.iter().map(|x| x * x).sum::<f32>().sqrt() * b.iter().map(|x| x * x).sum::<f32>().sqrt())
        };
        let min = vectors.iter().zip(&reference).map(|(a, b)| cosine(a, b)).fold(f32::INFINITY, f32::min);
        eprintln!("int8: smallest cosine of an embedding to the float model's {min:.5}");
        row["min_cosine_to_float"] = (min as f64).into();
    }
    attach_onnxruntime(&mut row, onnx, "sentences_per_s", "embed");
    if let Some(theirs) = theirs {
        let ratio = per_s / theirs["sentences_per_s"].as_f64().unwrap_or(f64::NAN);
        let load_ratio = theirs["load_s"].as_f64().unwrap_or(f64::NAN) / load_s;
        eprintln!(
            "sentence-transformers: loading {:.3} s; {:.1} sentences/s; Sesame {backend} / PyTorch = {ratio:.2}x (loading {load_ratio:.2}x)",
            theirs["load_s"].as_f64().unwrap_or(f64::NAN),
            theirs["sentences_per_s"].as_f64().unwrap_or(f64::NAN)
        );
        row["pytorch"] = theirs;
        row["ratio"] = ratio.into();
        row["load_ratio"] = load_ratio.into();
    }
    Ok(row)
}

/// `bench --mode finetune`: for each seed, `cargo xtask finetune` (this binary, on `backend`)
/// and, with `--compare-pytorch`, `scripts/finetune_trainer.py`, one after the other on the
/// same data and settings; each run's training seconds (its evaluations included) and held-out
/// accuracy, F1 macro, MCC and loss, and their mean and standard deviation on each side.
fn bench_finetune(args: &BenchArgs, backend: &str) -> Result<serde_json::Value, String> {
    let (model, train, eval) = finetune_inputs(args)?;
    let (b, s) = (args.batch_size().to_string(), args.seq_len.to_string());
    let settings = |seed: u64| -> Vec<String> {
        let (model, train, eval) = (model.display().to_string(), train.display().to_string(), eval.display().to_string());
        let (epochs, lr) = (args.epochs.to_string(), args.lr.to_string());
        ["--model", &model, "--train", &train, "--eval", &eval, "--epochs", &epochs, "--lr", &lr, "--batch-size", &b, "--seq-len", &s, "--seed", &seed.to_string()].map(String::from).to_vec()
    };
    let last_json = |out: std::process::Output, what: &str| -> Result<serde_json::Value, String> {
        if !out.status.success() {
            return Err(format!("{what} failed ({})", out.status));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(stdout.lines().last().unwrap_or("")).map_err(|e| format!("{what}: unreadable output ({e})"))
    };
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    // An embedding model: `finetune --task embed` against sentence-transformers' trainer, both
    // exports scored by its evaluator (the peer's script scores Sesame's export too).
    let embed = args.mode == BenchMode::FinetuneEmbed;
    let (task, peer, metrics) = if embed {
        ("embed", "embed_trainer.py", ["cosine_ndcg@10", "cosine_mrr@10", "cosine_accuracy@1"])
    } else {
        ("classify", "finetune_trainer.py", ["accuracy", "f1_macro", "mcc"])
    };
    let (python, script) = (python(args), Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts").join(peer));
    let mut sides: Vec<(&str, Vec<serde_json::Value>)> = vec![("sesame", Vec::new())];
    if args.compare_pytorch {
        sides.push(("pytorch", Vec::new()));
    }
    for &seed in &args.seeds {
        let out_dir = std::env::temp_dir().join(format!("sesame-bench-finetune-{}-{seed}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out_dir);
        let ours = std::process::Command::new(&exe)
            .args(["finetune", "--task", task])
            .args(settings(seed))
            .args(["--out", &out_dir.display().to_string(), "--backend", backend, "--quiet"])
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        let ours = last_json(ours, "finetune")?;
        eprintln!("sesame {backend} seed {seed}: {:.1} s ({:.1} s evaluating), {}", ours["train_seconds"].as_f64().unwrap_or(f64::NAN), ours["eval_seconds"].as_f64().unwrap_or(f64::NAN), ours["metrics"]);
        sides[0].1.push(serde_json::json!({ "seed": seed, "train_seconds": ours["train_seconds"], "eval_seconds": ours["eval_seconds"], "checkpoint_seconds": ours["checkpoint_seconds"], "steps": ours["steps"], "metrics": ours["metrics"] }));
        if args.compare_pytorch {
            let export = out_dir.join("model").display().to_string();
            let theirs = std::process::Command::new(&python)
                .arg(&script)
                .args(settings(seed))
                .args(if embed { vec!["--sesame-model", export.as_str()] } else { Vec::new() })
                .stderr(std::process::Stdio::inherit())
                .output()
                .map_err(|e| format!("--compare-pytorch: cannot run {} (--python, or eval \"$(scripts/setup-python.sh)\"): {e}", python.display()))?;
            let theirs = last_json(theirs, &script.display().to_string())?;
            eprintln!("pytorch seed {seed}: {:.1} s ({:.1} s evaluating), {}", theirs["train_runtime"].as_f64().unwrap_or(f64::NAN), theirs["eval_runtime"].as_f64().unwrap_or(f64::NAN), theirs["metrics"]);
            sides[1].1.push(serde_json::json!({ "seed": seed, "train_seconds": theirs["train_runtime"], "eval_seconds": theirs["eval_runtime"], "steps": theirs["steps"], "threads": theirs["threads"], "metrics": theirs["metrics"] }));
            if embed {
                // Sesame's export, scored by sentence-transformers' evaluator.
                eprintln!("sesame {backend} seed {seed}, scored by sentence-transformers: {}", theirs["sesame_metrics"]);
                sides[0].1.last_mut().expect("this seed's run")["metrics_by_sentence_transformers"] = theirs["sesame_metrics"].clone();
            }
        }
        let _ = std::fs::remove_dir_all(&out_dir);
    }
    // Mean and (sample) standard deviation of a figure over a side's runs.
    let spread = |runs: &[serde_json::Value], get: &dyn Fn(&serde_json::Value) -> Option<f64>| {
        let values: Vec<f64> = runs.iter().filter_map(get).collect();
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let sd = if values.len() > 1 { (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() } else { 0.0 };
        serde_json::json!({ "mean": mean, "sd": sd })
    };
    let mode = if embed { "finetune-embed" } else { "finetune" };
    let mut row = serde_json::json!({ "mode": mode, "backend": backend, "model": model, "epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size(), "seq_len": args.seq_len, "seeds": args.seeds });
    for (side, runs) in &sides {
        let mut summary = serde_json::json!({
            "runs": runs,
            "train_seconds": spread(runs, &|r| r["train_seconds"].as_f64()),
            "eval_seconds": spread(runs, &|r| r["eval_seconds"].as_f64()),
        });
        for metric in metrics {
            summary[metric] = spread(runs, &|r| r["metrics"][metric].as_f64());
        }
        if embed && *side == "sesame" && args.compare_pytorch {
            summary["by_sentence_transformers"] = serde_json::json!({});
            for metric in metrics {
                summary["by_sentence_transformers"][metric] = spread(runs, &|r| r["metrics_by_sentence_transformers"][metric].as_f64());
            }
        }
        let first = metrics[0];
        eprintln!(
            "{side}: {:.1} ± {:.1} s, {first} {:.4} ± {:.4}",
            summary["train_seconds"]["mean"].as_f64().unwrap_or(f64::NAN),
            summary["train_seconds"]["sd"].as_f64().unwrap_or(f64::NAN),
            summary[first]["mean"].as_f64().unwrap_or(f64::NAN),
            summary[first]["sd"].as_f64().unwrap_or(f64::NAN)
        );
        row[*side] = summary;
    }
    if args.compare_pytorch {
        // How many times faster Sesame trains: PyTorch's seconds over Sesame's.
        let ratio = row["pytorch"]["train_seconds"]["mean"].as_f64().unwrap_or(f64::NAN) / row["sesame"]["train_seconds"]["mean"].as_f64().unwrap_or(f64::NAN);
        eprintln!("PyTorch time / Sesame {backend} time = {ratio:.2}x");
        row["ratio"] = ratio.into();
    }
    Ok(row)
}

/// `--model`, `--train` and `--eval` of `--mode finetune`.
fn finetune_inputs(args: &BenchArgs) -> Result<(&PathBuf, &PathBuf, &PathBuf), String> {
    match (&args.model, &args.train, &args.eval) {
        (Some(model), Some(train), Some(eval)) => Ok((model, train, eval)),
        _ => Err(format!("--mode {} needs --model, --train and --eval", if args.mode == BenchMode::FinetuneEmbed { "finetune-embed" } else { "finetune" })),
    }
}

/// `--mode gemm`: one row per product, GFLOP/s of an `[m, k]` by `[k, n]` f32 product
/// (`--gemm-shapes`, else the square of `--gemm-size`); with `--compare-pytorch` the peers'
/// figures first (PyTorch's, and OpenBLAS's, the BLAS NumPy ships).
fn bench_gemm(args: &BenchArgs, device: Device, backend: &str) -> Result<Vec<serde_json::Value>, String> {
    let shapes = if args.gemm_shapes.is_empty() { vec![[args.gemm_size; 3]] } else { args.gemm_shapes.clone() };
    let mut rows = Vec::new();
    for [m, k, n] in shapes {
        let label = format!("gemm {m}x{k}x{n}{}", if args.gemm_transposed { "ᵀ" } else { "" });
        let theirs = if args.compare_pytorch {
            let mut peer_args = vec!["gemm".to_string(), "--gemm-shape".into(), format!("{m}x{k}x{n}")];
            peer_args.extend(args.gemm_transposed.then(|| "--transposed".to_string()));
            Some(pytorch(args, &peer_args)?)
        } else {
            None
        };
        let a = Tensor::<2>::random([m, k], burn::tensor::Distribution::Normal(0.0, 1.0), &device);
        let b = if args.gemm_transposed {
            Tensor::<2>::random([n, k], burn::tensor::Distribution::Normal(0.0, 1.0), &device).transpose()
        } else {
            Tensor::<2>::random([k, n], burn::tensor::Distribution::Normal(0.0, 1.0), &device)
        };
        let median = median_time(args.warmup, args.steps, || {
            a.clone().matmul(b.clone()).slice([0..1, 0..1]).into_scalar::<f32>();
            Ok(())
        })?;
        let gflops = 2.0 * (m * k * n) as f64 / median / 1e9;
        eprintln!("{backend} {label}: {median:.4} s, {gflops:.1} GFLOP/s");
        let mut row = serde_json::json!({ "mode": "gemm", "backend": backend, "m": m, "k": k, "n": n, "transposed": args.gemm_transposed, "median_s": median, "gflops": gflops });
        if let Some((openblas, threads)) = theirs.as_ref().and_then(|t| Some((t["openblas_gflops"].as_f64()?, &t["openblas_threads"]))) {
            let ratio = gflops / openblas;
            eprintln!("openblas {label}: {openblas:.1} gflops ({threads} threads); Sesame {backend} / OpenBLAS = {ratio:.2}x");
            row["openblas_ratio"] = ratio.into();
        }
        attach(&mut row, theirs, "gflops", &label);
        rows.push(row);
    }
    Ok(rows)
}

/// `--gemm-shapes`' `MxKxN`.
fn parse_gemm_shape(text: &str) -> Result<[usize; 3], String> {
    let sizes: Vec<usize> = text.split('x').map(|d| d.trim().parse::<usize>().ok().filter(|&d| (1..=65_536).contains(&d))).collect::<Option<_>>().ok_or_else(|| format!("{text:?}: expected MxKxN, each 1..=65536"))?;
    <[usize; 3]>::try_from(sizes).map_err(|_| format!("{text:?}: expected MxKxN, three sizes"))
}

/// Refuse a `--presets` name that is not an encoder preset of `EncoderHyperParams::set_preset`
/// (XLNet's are the same four), before the machine's GEMM is timed.
pub fn check_encoder_presets(args: &BenchArgs) -> Result<(), String> {
    const PRESETS: [&str; 4] = ["tiny", "mini", "small", "base"];
    match args.presets.iter().find(|p| !PRESETS.contains(&p.as_str())) {
        Some(other) => Err(format!("--presets {other}: expected {}", PRESETS.join(", "))),
        None => Ok(()),
    }
}

/// Peak resident memory of this process so far, in MiB (Linux `VmHWM`; `None` elsewhere).
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Rows of `b × s` ids `5 + (i · 7919) mod (V − 5)`, as `scripts/bench_pytorch.py` builds them.
pub(crate) fn synthetic_ids(vocab_size: usize, b: usize, s: usize, device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = synthetic_row(vocab_size, 0..b * s).into_iter().map(i64::from).collect();
    Tensor::from_data(TensorData::new(ids, [b, s]), device)
}

/// The synthetic ids at flat positions `range` of a batch.
pub(crate) fn synthetic_row(vocab_size: usize, range: std::ops::Range<usize>) -> Vec<u32> {
    range.map(|i| 5 + ((i as u64 * 7919) % (vocab_size as u64 - 5)) as u32).collect()
}

/// Time generation of `b` rows of `n` new tokens after `s`-token inputs (each returned row
/// `out_len` long), greedy and with `--num-beams`, by `run` with `settings` plus the search's;
/// with `--compare-pytorch` the same on the weights `save` writes. One row per search.
#[allow(clippy::too_many_arguments)]
pub(crate) fn time_generation(
    args: &BenchArgs,
    backend: &str,
    (family, preset): (&str, &str),
    [b, s, n]: [usize; 3],
    out_len: usize,
    settings: sesame_generate::GenerationConfig,
    run: impl Fn(&sesame_generate::GenerationConfig) -> Result<sesame_generate::Generated, String>,
    save: impl Fn(&Path) -> Result<(), String>,
) -> Result<Vec<serde_json::Value>, String> {
    // PyTorch's runs first, on the weights `save` writes.
    let mut peers = Vec::new();
    if args.compare_pytorch {
        let dir = std::env::temp_dir().join(format!("sesame-bench-{family}-{preset}-{}", std::process::id()));
        let theirs = save(&dir).and_then(|()| {
            [1, args.num_beams]
                .into_iter()
                .map(|beams| {
                    pytorch(args, &[
                        "generate".into(), "--config".into(), dir.display().to_string(), "--batch-size".into(), b.to_string(),
                        "--seq-len".into(), s.to_string(), "--max-new-tokens".into(), n.to_string(), "--num-beams".into(), beams.to_string(),
                    ])
                })
                .collect::<Result<Vec<_>, _>>()
        });
        let _ = std::fs::remove_dir_all(&dir);
        peers = theirs?;
    }
    let mut peers = peers.into_iter();
    let mut rows = Vec::new();
    for beams in [1, args.num_beams] {
        let settings = sesame_generate::GenerationConfig { max_new_tokens: Some(n), min_new_tokens: Some(n), num_beams: Some(beams), ..settings.clone() };
        let median = median_time(args.warmup, args.steps, || {
            let out = run(&settings)?;
            if out.sequences.iter().any(|r| r.len() != out_len) {
                return Err(format!("generated rows of {:?} tokens, not {out_len}", out.sequences.iter().map(Vec::len).collect::<Vec<_>>()));
            }
            Ok(())
        })?;
        let tokens_per_s = (b * n) as f64 / median;
        let search = if beams == 1 { "greedy".to_string() } else { format!("beam{beams}") };
        let peak = peak_rss_mib();
        eprintln!("{backend} {family} {preset} generate {search}: {median:.3} s for {b}x{n} tokens after {s}-token inputs, {tokens_per_s:.1} tokens/s; peak RSS {:.0} MiB", peak.unwrap_or(f64::NAN));
        let mut row = serde_json::json!({
            "mode": "generate", "backend": backend, "family": family, "preset": preset, "search": search, "num_beams": beams,
            "batch_size": b, "source_len": s, "new_tokens": n, "median_s": median, "tokens_per_s": tokens_per_s,
            "peak_rss_mib": peak, "timed_steps": args.steps,
        });
        attach(&mut row, peers.next(), "tokens_per_s", &format!("{family} {preset} generate {search}"));
        rows.push(row);
    }
    Ok(rows)
}

