//! `cargo xtask train <family>` and `cargo xtask export`: the flags of a pre-training job,
//! parsed into the library's [`PretrainOptions`] for [`sesame_train::pretraining::pretrain`]
//! (the masked-LM families) and `pretrain_distilled` (`--teacher`); BART's and XLNet's runs
//! (`families/bart.rs`, `families/xlnet.rs`) are made of the library's same steps.

use std::path::PathBuf;

use sesame_layers::{Backbone, PretrainedModel};
use sesame_text::{DenoisingConfig, MaskLength};
use sesame_train::pretraining::{MaskingKind, PretrainOptions, PretrainingFamily, Pretrained};
use sesame_train::Decay;

pub use sesame_train::pretraining::run::{export_distilled, export_model, ExportFn, Objective, PackingKind, RunSpec};
pub(crate) use sesame_train::pretraining::run::refuse_masked_lm_flags;

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
    pub noise: NoiseArgs,
    /// XLNet's permutation-LM settings, with the original's names and proportions as defaults.
    #[command(flatten)]
    pub permutation: PermutationArgs,
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
    /// The library's options of these flags (BART's noise and XLNet's permutation LM are read
    /// by their families' runs).
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

/// BART's noise (fairseq's `denoising` task options; `cargo xtask train bart` only).
#[derive(clap::Args, Debug, Default)]
#[command(next_help_heading = "BART noise (train bart)")]
pub struct NoiseArgs {
    /// Fraction of words masked in spans (text infilling) [default: 0.3].
    #[arg(long)]
    pub mask: Option<f64>,
    /// Fraction of the masks that are random tokens instead [default: 0.1].
    #[arg(long)]
    pub mask_random: Option<f64>,
    /// Masks inserted, as a fraction of the tokens [default: 0].
    #[arg(long)]
    pub insert: Option<f64>,
    /// Probability of rotating a document to start at a random token [default: 0].
    #[arg(long)]
    pub rotate: Option<f64>,
    /// Fraction of the sentences permuted [default: 1].
    #[arg(long)]
    pub permute_sentences: Option<f64>,
    /// A masked span becomes one mask (1), nothing (0: deletion) or a mask per token (-1) [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    pub replace_length: Option<i8>,
    /// What a mask covers: subword, word or span-poisson (spans of Poisson(--poisson-lambda)
    /// words, 0 allowed) [default: span-poisson].
    #[arg(long, value_enum)]
    pub mask_length: Option<MaskLengthKind>,
    /// Mean span length of span-poisson masking [default: 3.5].
    #[arg(long)]
    pub poisson_lambda: Option<f64>,
    /// The target tokens the loss covers: all of them (BART), or infilled, only those the
    /// source no longer shows [default: all].
    #[arg(long, value_enum)]
    pub loss_on: Option<LossOn>,
}

/// Which target tokens BART's loss covers (`--loss-on`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LossOn {
    /// Every token of the block, as BART.
    All,
    /// The tokens masked, replaced or deleted in the source.
    Infilled,
}

/// What a BART mask covers (fairseq `--mask-length`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MaskLengthKind {
    /// One token.
    Subword,
    /// One word.
    Word,
    /// A span of Poisson(λ) words.
    SpanPoisson,
}

impl NoiseArgs {
    /// The first option given, as its flag.
    pub(crate) fn given(&self) -> Option<&'static str> {
        let f = [
            (self.mask, "--mask"),
            (self.mask_random, "--mask-random"),
            (self.insert, "--insert"),
            (self.rotate, "--rotate"),
            (self.permute_sentences, "--permute-sentences"),
            (self.poisson_lambda, "--poisson-lambda"),
        ];
        let other = [(self.replace_length.is_some(), "--replace-length"), (self.mask_length.is_some(), "--mask-length"), (self.loss_on.is_some(), "--loss-on")];
        f.iter().find(|(v, _)| v.is_some()).map(|(_, flag)| *flag).or_else(|| other.iter().find(|(given, _)| *given).map(|(_, flag)| *flag))
    }

    /// BART's recipe with the options given; out-of-range values are refused by the task,
    /// naming the setting.
    pub(crate) fn config(&self) -> Result<DenoisingConfig, String> {
        let mut c = DenoisingConfig::default();
        let lambda = self.poisson_lambda.unwrap_or(3.5);
        c.mask = self.mask.unwrap_or(c.mask);
        c.mask_random = self.mask_random.unwrap_or(c.mask_random);
        c.insert = self.insert.unwrap_or(c.insert);
        c.rotate = self.rotate.unwrap_or(c.rotate);
        c.permute_sentences = self.permute_sentences.unwrap_or(c.permute_sentences);
        c.replace_length = self.replace_length.unwrap_or(c.replace_length);
        c.mask_length = match self.mask_length {
            Some(MaskLengthKind::Subword) => MaskLength::Subword,
            Some(MaskLengthKind::Word) => MaskLength::Word,
            Some(MaskLengthKind::SpanPoisson) | None => MaskLength::SpanPoisson { lambda },
        };
        if self.poisson_lambda.is_some() && !matches!(c.mask_length, MaskLength::SpanPoisson { .. }) {
            return Err("--poisson-lambda is for --mask-length span-poisson".into());
        }
        c.validate().map_err(|e| format!("--{}: {}", e.field.replace('_', "-"), e.reason))?;
        Ok(c)
    }
}

/// XLNet's permutation LM (the original's `data_utils.py` flags; `cargo xtask train xlnet` only).
#[derive(clap::Args, Debug, Default)]
#[command(next_help_heading = "XLNet permutation LM (train xlnet)")]
pub struct PermutationArgs {
    /// Tokens of each window that continue the previous one and go into the memory
    /// [default: half of --seq-len].
    #[arg(long)]
    pub reuse_len: Option<usize>,
    /// Length of the blocks a factorisation order is drawn within [default: --reuse-len].
    #[arg(long)]
    pub perm_size: Option<usize>,
    /// Tokens predicted per window [default: 85 per 512].
    #[arg(long)]
    pub num_predict: Option<usize>,
    /// States the memory keeps [default: twice --reuse-len].
    #[arg(long)]
    pub mem_len: Option<usize>,
    /// Context tokens per group of --mask-beta predicted ones [default: 6].
    #[arg(long)]
    pub mask_alpha: Option<usize>,
    /// Predicted tokens per --mask-alpha of context [default: 1].
    #[arg(long)]
    pub mask_beta: Option<usize>,
    /// Do not add the rows read backwards (the original's bi_data, on by default).
    #[arg(long)]
    pub no_bi_data: bool,
    /// Spans of pieces, as the original code samples them, instead of whole words.
    #[arg(long)]
    pub piece_spans: bool,
}

impl PermutationArgs {
    /// Whether any option is given.
    pub(crate) fn any(&self) -> bool {
        let f = [self.reuse_len, self.perm_size, self.num_predict, self.mem_len, self.mask_alpha, self.mask_beta];
        f.iter().any(Option::is_some) || self.no_bi_data || self.piece_spans
    }
}

/// Refuse BART's and XLNet's data flags for the masked-LM family `family`.
fn refuse_other_corruptions(args: &TrainArgs, family: &str) -> Result<(), String> {
    if let Some(flag) = args.noise.given() {
        return Err(format!("{flag} is one of BART's noise settings; {family} masks with --masking"));
    }
    if args.permutation.any() {
        return Err(format!("--reuse-len, --num-predict, --perm-size, … set XLNet's permutation LM; {family} masks with --masking"));
    }
    Ok(())
}

/// `train` for a family pre-trained by the shared masked-LM task: the library's run.
pub fn train_family<F: PretrainingFamily>(args: TrainArgs, device: burn::tensor::Device) -> Result<String, String> {
    refuse_other_corruptions(&args, F::NAME)?;
    sesame_train::pretraining::pretrain::<F>(&args.options(), device).map(|done| printed(&done))
}

/// `train FAMILY --teacher DIR`: the library's distillation of the teacher into a masked-LM
/// student of family `F` (base model `B`).
pub fn train_distilled<F, B>(args: TrainArgs, device: burn::tensor::Device) -> Result<String, String>
where
    F: PretrainingFamily,
    B: Backbone,
    F::Model: PretrainedModel<Config = B::Config>,
{
    refuse_other_corruptions(&args, F::NAME)?;
    sesame_train::pretraining::pretrain_distilled::<F, B>(&args.options(), device).map(|done| printed(&done))
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

/// `export`: the library's export of a run's checkpoint, printed as one JSON line.
pub fn export(args: ExportArgs, device: burn::tensor::Device, export_of: fn(&RunSpec) -> Result<ExportFn, String>) -> Result<String, String> {
    let done = sesame_train::pretraining::run::export_checkpoint(&args.run, args.step, args.out, device, export_of)?;
    Ok(serde_json::json!({ "checkpoint": done.checkpoint, "export": done.export }).to_string())
}
