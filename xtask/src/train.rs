//! `cargo xtask train <family>` and `cargo xtask export`: the flags of a pre-training job,
//! parsed into the library's [`PretrainOptions`] for [`sesame::train::pretrain`], which runs
//! the family's own pre-training (its `Pretrain`), and [`sesame::train::export`].

use std::path::PathBuf;

use sesame_train::pretraining::{MaskingKind, NoiseOptions, PermutationOptions, PretrainOptions, Pretrained};
use sesame_train::Decay;

pub use sesame_train::pretraining::run::{Objective, PackingKind};

/// The library's defaults (`PretrainOptions::new`), which the flags show and take: each is
/// written once, there.
fn defaults() -> PretrainOptions {
    PretrainOptions::new("bert", "")
}

/// Options of `cargo xtask train` (defaults from [`PretrainOptions::new`]).
#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// Model family.
    // Its possible values are the registry's, set where the command line is built (lib.rs).
    pub family: String,
    /// Text file or directory of .txt files (documents separated by blank lines).
    #[arg(long, default_value = "data/moby-dick.txt")]
    pub corpus: PathBuf,
    /// Existing tokenizer directory (tokenizer.json or vocab.txt); trained on the corpus if absent.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Vocabulary size when training a tokenizer (2000: on a corpus the size of the shipped
    /// one, a small vocabulary leaves a tiny model more to learn from context in a few minutes).
    #[arg(long, default_value_t = defaults().vocab_size, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(16..=1_000_000))]
    pub vocab_size: usize,
    /// Model size preset: tiny, mini, small or base [default: tiny; with --teacher, the
    /// teacher's own shape with --student-layers].
    #[arg(long)]
    pub preset: Option<String>,
    /// A config.json to use instead of a preset.
    #[arg(long, conflicts_with = "preset")]
    pub config: Option<PathBuf>,
    /// Continue pre-training this HF checkpoint (its config and tokenizer are used).
    #[arg(long, conflicts_with_all = ["config", "tokenizer"], value_parser = crate::common::model_dir)]
    pub init_from: Option<PathBuf>,
    /// Distil this masked LM (an HF checkpoint of the family, kept fixed) into a smaller
    /// student, as DistilBERT was trained: masked LM on single sequences, the student learning
    /// the teacher's distributions at the masked positions (`--alpha-soft`, at
    /// `--temperature`), the tokens (`--alpha-hard`) and the teacher's last hidden states
    /// (`--alpha-cos`). The student is the teacher's shape with `--student-layers` of its
    /// layers (every other one by default), or a fresh `--preset` or `--config`; the
    /// teacher's tokenizer is used. The default run directory is runs/FAMILY-distill.
    #[arg(long, conflicts_with_all = ["init_from", "tokenizer", "objective"], value_parser = crate::common::model_dir)]
    pub teacher: Option<PathBuf>,
    /// The student of `--teacher` and the weights of the loss's terms.
    #[command(flatten)]
    pub student: crate::distill::StudentArgs,
    /// Optimizer steps [default: 4000, 2¾–4½ minutes of a tiny model on 2 CPU cores by
    /// family; BART 1600, about 5 minutes: its loss covers every target token, both stacks].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: Option<u64>,
    /// Sequences per micro-batch (32 of the default 16 tokens; with `--grad-accum 4`, 2048
    /// tokens a step).
    #[arg(long, default_value_t = defaults().batch_size, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub batch_size: usize,
    /// Maximum sequence length (tokens, special tokens included; at least 8, so that a pair of
    /// segments has room for words). The default 16 is for the few-minute main job: a tiny
    /// model leaves the unigram plateau far sooner on short sequences (docs/guide/pre-training.md); raise
    /// it, with `--batch-size`, for a model meant for longer inputs.
    #[arg(long, default_value_t = defaults().seq_len, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(8..=65_536))]
    pub seq_len: usize,
    /// Peak learning rate (1e-3 suits the tiny model; lower it for larger ones).
    #[arg(long, default_value_t = defaults().lr)]
    pub lr: f64,
    /// Warm-up steps (default: 10% of the steps).
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Decay after warm-up.
    #[arg(long, value_enum, default_value = "linear")]
    pub decay: Decay,
    /// Micro-batches per optimizer step, gradients averaged (4: small micro-batches run
    /// faster per token on a CPU, and `--threads` of them at once).
    #[arg(long, default_value_t = defaults().grad_accum, value_parser = clap::value_parser!(u64).range(1..))]
    pub grad_accum: u64,
    /// Micro-batches of a step trained at once on a CPU backend, each on its own thread
    /// (default: the number of CPU cores on flex and ndarray, 1 on libtorch, whose operations
    /// already use every core; at most `--grad-accum`). The numbers do not depend on it, only
    /// the speed.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: Option<usize>,
    /// AdamW weight decay.
    #[arg(long, default_value_t = defaults().weight_decay)]
    pub weight_decay: f64,
    /// Global gradient-norm clip (0 = off).
    #[arg(long, default_value_t = defaults().max_grad_norm)]
    pub max_grad_norm: f64,
    /// Pre-train with this objective instead of the family's own (masked-LM families): `span`
    /// is SpanBERT's, `mlm` masked LM alone on single sequences. The default run directory is
    /// then runs/FAMILY-OBJECTIVE.
    #[arg(long, value_enum)]
    pub objective: Option<Objective>,
    /// MASS's fragment: its share of each block's tokens (--objective mass) [default: 0.5, the
    /// paper's].
    #[arg(long, value_parser = fragment_share)]
    pub mass_fraction: Option<f64>,
    /// Masking strategy (default: the family's: token for BERT and RoBERTa, ngram for ALBERT,
    /// electra for ELECTRA, unilm for UniLM; span with --objective span). ERNIE's knowledge
    /// masking: `phrase` masks whole phrases (--phrases, or the corpus's collocations),
    /// `entity` whole entities (--entities), `ernie` words, then phrases, then entities, each a
    /// third of the run.
    #[arg(long, value_enum)]
    pub masking: Option<MaskingKind>,
    /// Phrases to mask whole under `--masking phrase|ernie`, one per line [default: the
    /// corpus's collocations, pairs of words seen together more than chance allows
    /// (word2phrase's score over 100, more than 5 times; two passes, up to 4 words)].
    #[arg(long)]
    pub phrases: Option<PathBuf>,
    /// Entities to mask whole under `--masking entity|ernie`: one surface form per line, matched
    /// on word boundaries as the tokenizer writes the words.
    #[arg(long)]
    pub entities: Option<PathBuf>,
    /// How packed families (RoBERTa, ELECTRA) fill sequences (default: full).
    #[arg(long, value_enum)]
    pub packing: Option<PackingKind>,
    /// Static masking with N masks per example, epoch e using mask e mod N (BERT's original
    /// recipe, dupe_factor 10); default: dynamic, a new mask every time an example is seen.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub static_masks: Option<u32>,
    /// BART's noise, with fairseq's names and BART's recipe as defaults.
    #[command(flatten)]
    pub noise: NoiseOptions,
    /// XLNet's permutation-LM settings, with the original's names and proportions as defaults.
    #[command(flatten)]
    pub permutation: PermutationOptions,
    /// Random seed.
    #[arg(long, default_value_t = defaults().seed)]
    pub seed: u64,
    /// Fraction of documents held out for evaluation (at least one document).
    #[arg(long, default_value_t = defaults().held_out, value_parser = held_out_fraction)]
    pub held_out: f64,
    /// Log every N steps.
    #[arg(long, default_value_t = defaults().log_every)]
    pub log_every: u64,
    /// Evaluate every N steps (0: only at the end).
    #[arg(long, default_value_t = defaults().eval_every)]
    pub eval_every: u64,
    /// Checkpoint every N steps (0: only at the end).
    #[arg(long, default_value_t = defaults().checkpoint_every)]
    pub checkpoint_every: u64,
    /// Run directory (checkpoints, metrics.jsonl, loss.svg, export/); default runs/FAMILY.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue the run in `--out` from its latest checkpoint.
    #[arg(long, conflicts_with = "overwrite")]
    pub resume: bool,
    /// Delete what `--out` holds and start a new run there.
    #[arg(long)]
    pub overwrite: bool,
    /// Stop after this step without a final checkpoint (simulates a kill; for testing resume).
    #[arg(long, hide = true)]
    pub stop_after: Option<u64>,
    /// Hide the progress bar (log lines instead).
    #[arg(long)]
    pub quiet: bool,
}

impl TrainArgs {
    /// The library's options of these flags.
    pub(crate) fn options(&self) -> PretrainOptions {
        PretrainOptions {
            family: self.family.clone(),
            corpus: self.corpus.clone(),
            tokenizer: self.tokenizer.clone(),
            vocab_size: self.vocab_size,
            preset: self.preset.clone(),
            config: self.config.clone(),
            init_from: self.init_from.clone(),
            teacher: self.teacher.clone(),
            student: self.student.options(),
            steps: self.steps,
            batch_size: self.batch_size,
            seq_len: self.seq_len,
            lr: self.lr,
            warmup: self.warmup,
            decay: self.decay,
            grad_accum: self.grad_accum,
            threads: self.threads,
            weight_decay: self.weight_decay,
            max_grad_norm: self.max_grad_norm,
            objective: self.objective,
            masking: self.masking,
            phrases: self.phrases.clone(),
            entities: self.entities.clone(),
            packing: self.packing,
            static_masks: self.static_masks,
            mass_fraction: self.mass_fraction,
            noise: self.noise.clone(),
            permutation: self.permutation.clone(),
            seed: self.seed,
            held_out: self.held_out,
            log_every: self.log_every,
            eval_every: self.eval_every,
            checkpoint_every: self.checkpoint_every,
            out: self.out.clone(),
            resume: self.resume,
            overwrite: self.overwrite,
            stop_after: self.stop_after,
            progress: !self.quiet,
        }
    }
}

/// A run's outcome as the JSON line the command prints.
pub(crate) fn printed(done: &Pretrained) -> String {
    match done.stopped_after {
        Some(step) => serde_json::json!({ "stopped_after": step, "run": done.run }).to_string(),
        None => serde_json::json!({ "run": done.run, "export": done.export, "resumed_from": done.resumed_from, "held_out": done.held_out }).to_string(),
    }
}

/// A share of a block's tokens: in (0, 1].
fn fragment_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("{s} is not a share of the block in (0, 1]")),
    }
}

/// A fraction of the corpus's documents: in [0, 1).
fn held_out_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s} is not a fraction in [0, 1)")),
    }
}

/// Options of `cargo xtask export`.
#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Run directory of `cargo xtask train`.
    #[arg(long, default_value = "runs/bert")]
    pub run: PathBuf,
    /// Checkpoint step to export (default: the latest).
    #[arg(long)]
    pub step: Option<u64>,
    /// Output directory (default: RUN/export-step-N).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `train`: the library's pre-training of the family, its run printed as one JSON line.
pub fn train(args: TrainArgs, device: burn::tensor::Device) -> Result<String, String> {
    if args.teacher.is_none() && args.student.any() {
        return Err("--student-layers, --alpha-*, --temperature and --layer-map are for distillation: give the teacher with --teacher".into());
    }
    sesame::train::pretrain(&args.options(), device).map(|done| printed(&done)).map_err(|e| e.to_string())
}

/// `export`: the library's export of a run's checkpoint, printed as one JSON line.
pub fn export(args: ExportArgs, device: burn::tensor::Device) -> Result<String, String> {
    let done = sesame::train::export(&args.run, args.step, args.out, device).map_err(|e| e.to_string())?;
    Ok(serde_json::json!({ "checkpoint": done.checkpoint, "export": done.export }).to_string())
}

/// The families that pre-train, each with its objective, for the `FAMILY` argument of `train`
/// and `bench`.
pub fn family_parser() -> clap::builder::PossibleValuesParser {
    let families = sesame::train::objectives().into_iter().map(|(name, objective)| clap::builder::PossibleValue::new(name).help(objective));
    clap::builder::PossibleValuesParser::new(families)
}
