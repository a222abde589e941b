//! `cargo xtask train <family>`: pre-train (or continue pre-training) a model on text.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sesame_layers::{ForMaskedLM, HasMaskedLmHead, HfConfig, PretrainedModel};
use sesame_layers::fs::write_atomic;
use sesame_text::{find_phrases, tokenize_documents, Corpus, DenoisingConfig, Lexicon, MaskLength, Packing, PhraseConfig, Segment, Tokenizer, TokenizerConfig, TokenizerKind, WordText};
use sesame_layers::LinearConfig;
use sesame_train::distill::{Distilled, MaskedLmDistillation};
use sesame_train::pretraining::{Knowledge, Layout, Masking, MaskingKind, Pretraining, PretrainingFamily, PretrainingModel, SingleSequenceRecipe};
use sesame_train::{Decay, TrainConfig, Trainer};

/// A pre-training objective in place of the family's own (`--objective`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// SpanBERT: span masking (geometric span lengths, p = 0.2, at most 10 words), masked LM +
    /// the span-boundary objective, single sequences without a sentence task.
    Span,
    /// Masked LM alone on single sequences, with the family's masking (or --masking): the
    /// baseline without a sentence task or SBO of SpanBERT's and RoBERTa's ablations.
    Mlm,
    /// MASS (BART): one fragment of each block (--mass-fraction of it) masked in the source,
    /// the decoder predicting it alone.
    Mass,
}

impl Objective {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Objective::Span => "span",
            Objective::Mlm => "mlm",
            Objective::Mass => "mass",
        }
    }
}

/// RoBERTa's input packing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
pub enum PackingKind {
    /// FULL-SENTENCES: sequences may cross document boundaries.
    Full,
    /// DOC-SENTENCES: sequences stay inside one document.
    Doc,
}

/// Options of `cargo xtask train`.
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
    #[arg(long, default_value_t = 2000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(16..=1_000_000))]
    pub vocab_size: usize,
    /// Model size preset: tiny, mini, small or base [default: tiny; with --teacher, the
    /// teacher's own shape with --student-layers].
    #[arg(long)]
    pub preset: Option<String>,
    /// A config.json to use instead of a preset.
    #[arg(long, conflicts_with = "preset")]
    pub config: Option<PathBuf>,
    /// Continue pre-training this HF checkpoint (its config and tokenizer are used).
    #[arg(long, conflicts_with_all = ["config", "tokenizer"])]
    pub init_from: Option<PathBuf>,
    /// Distil this masked LM (an HF checkpoint of the family, kept fixed) into a smaller
    /// student, as DistilBERT was trained: masked LM on single sequences, the student learning
    /// the teacher's distributions at the masked positions (`--alpha-soft`, at
    /// `--temperature`), the tokens (`--alpha-hard`) and the teacher's last hidden states
    /// (`--alpha-cos`). The student is the teacher's shape with `--student-layers` of its
    /// layers (every other one by default), or a fresh `--preset` or `--config`; the
    /// teacher's tokenizer is used. The default run directory is runs/FAMILY-distill.
    #[arg(long, conflicts_with_all = ["init_from", "tokenizer", "objective"])]
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
    #[arg(long, default_value_t = 32, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub batch_size: usize,
    /// Maximum sequence length (tokens, special tokens included; at least 8, so that a pair of
    /// segments has room for words). The default 16 is for the few-minute main job: a tiny
    /// model leaves the unigram plateau far sooner on short sequences (docs/guide/pre-training.md); raise
    /// it, with `--batch-size`, for a model meant for longer inputs.
    #[arg(long, default_value_t = 16, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(8..=65_536))]
    pub seq_len: usize,
    /// Peak learning rate (1e-3 suits the tiny model; lower it for larger ones).
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// Warm-up steps (default: 10% of the steps).
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Decay after warm-up.
    #[arg(long, value_enum, default_value = "linear")]
    pub decay: Decay,
    /// Micro-batches per optimizer step, gradients averaged (4: small micro-batches run
    /// faster per token on a CPU, and `--threads` of them at once).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    pub grad_accum: u64,
    /// Micro-batches of a step trained at once on a CPU backend, each on its own thread
    /// (default: the number of CPU cores on flex and ndarray, 1 on libtorch, whose operations
    /// already use every core; at most `--grad-accum`). The numbers do not depend on it, only
    /// the speed.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: Option<usize>,
    /// AdamW weight decay.
    #[arg(long, default_value_t = 0.01)]
    pub weight_decay: f64,
    /// Global gradient-norm clip (0 = off).
    #[arg(long, default_value_t = 1.0)]
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
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Fraction of documents held out for evaluation (at least one document).
    #[arg(long, default_value_t = 0.02, value_parser = held_out_fraction)]
    pub held_out: f64,
    /// Log every N steps.
    #[arg(long, default_value_t = 10)]
    pub log_every: u64,
    /// Evaluate every N steps.
    #[arg(long, default_value_t = 100)]
    pub eval_every: u64,
    /// Checkpoint every N steps.
    #[arg(long, default_value_t = 100)]
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
    /// `--preset`, or `tiny`.
    pub(crate) fn preset(&self) -> &str {
        self.preset.as_deref().unwrap_or("tiny")
    }
}

pub(crate) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
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

/// An error making the training examples of `--corpus`, naming it.
pub(crate) fn corpus_err(args: &TrainArgs, e: impl std::fmt::Display) -> String {
    format!("--corpus {}: {e}", args.corpus.display())
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
    /// Whether any option is given.
    pub(crate) fn any(&self) -> bool {
        let f = [self.mask, self.mask_random, self.insert, self.rotate, self.permute_sentences, self.poisson_lambda];
        f.iter().any(Option::is_some) || self.replace_length.is_some() || self.mask_length.is_some()
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

/// Settings that must stay the same when a run is resumed.
#[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
pub(crate) struct RunSpec {
    pub(crate) family: String,
    corpus: PathBuf,
    seq_len: usize,
    batch_size: usize,
    /// The masking strategy (BART: its noise).
    masking: String,
    layout: String,
    #[serde(default)]
    static_masks: Option<u32>,
    /// `--objective`, when not the family's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) objective: Option<Objective>,
    /// The teacher of a distillation run (`--teacher`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) teacher: Option<TeacherSpec>,
    seed: u64,
    held_out: f64,
}

/// The teacher of a distillation run and what the run trains beside the student.
#[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
pub(crate) struct TeacherSpec {
    /// `--teacher`.
    dir: PathBuf,
    /// The student's and the loss's flags.
    student: String,
    /// The shape `[student width, teacher width]` of the hidden states' projection, when the
    /// widths differ and a term reads the hidden states.
    projection: Option<[usize; 2]>,
}

impl RunSpec {
    /// The data settings of `args`, with the family's masking (or noise) and layout.
    pub(crate) fn new(args: &TrainArgs, masking: String, layout: String) -> Self {
        Self {
            family: args.family.clone(),
            corpus: args.corpus.clone(),
            seq_len: args.seq_len,
            batch_size: args.batch_size,
            masking,
            layout,
            static_masks: args.static_masks,
            objective: args.objective,
            teacher: None,
            seed: args.seed,
            held_out: args.held_out,
        }
    }

    /// The settings of the run in `dir` (its `run.json`).
    pub(crate) fn read(dir: &Path) -> Result<Self, String> {
        let path = dir.join("run.json");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{} is not a run of `cargo xtask train`: {e}", dir.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("cannot read {}: {e} (a run of an older Sesame; start a new one)", path.display()))
    }
}

/// The family's data layout with the command line's choices.
fn layout<F: PretrainingFamily>(args: &TrainArgs) -> Result<Layout, String> {
    let layout = F::layout().with_max_seq_len(args.seq_len);
    match (layout, args.packing) {
        (layout, None) => Ok(layout),
        (Layout::Packed { max_seq_len, .. }, Some(kind)) => {
            let packing = if kind == PackingKind::Full { Packing::FullSentences } else { Packing::DocSentences };
            Ok(Layout::Packed { packing, max_seq_len })
        }
        (Layout::Pairs(_), Some(_)) => Err(format!("--packing is for packed single sequences; {} trains on sentence pairs", F::NAME)),
    }
}

/// `--out`, or `runs/<family>`: refused when it holds a run and neither `--resume` nor
/// `--overwrite` is given, emptied with `--overwrite`; `spec` written to its `run.json`, or
/// on `--resume` compared with the one there.
pub(crate) fn open_run(args: &TrainArgs, family: &str, spec: &RunSpec) -> Result<PathBuf, String> {
    let name = match args.objective {
        _ if args.teacher.is_some() => format!("{family}-distill"),
        Some(objective) => format!("{family}-{}", objective.name()),
        None => family.to_string(),
    };
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("runs").join(name));
    let holds_something = std::fs::read_dir(&out).is_ok_and(|mut entries| entries.next().is_some());
    if holds_something && !args.resume {
        if !args.overwrite {
            return Err(format!(
                "--out {} already holds a run: continue it with --resume, or start anew with --overwrite",
                out.display()
            ));
        }
        std::fs::remove_dir_all(&out).map_err(|e| format!("--overwrite: cannot remove {}: {e}", out.display()))?;
    }
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let spec_path = out.join("run.json");
    if args.resume {
        let saved = RunSpec::read(&out).map_err(|e| format!("--resume: {e}"))?;
        if saved != *spec {
            return Err(format!("--resume with different data settings than the run in {}: was {saved:?}, now {spec:?}", out.display()));
        }
    } else {
        write_atomic(&spec_path, serde_json::to_string_pretty(spec).expect("JSON").as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", spec_path.display()))?;
    }
    Ok(out)
}

/// The corpus split into training and held-out documents.
pub(crate) fn read_corpus(args: &TrainArgs) -> Result<(Corpus, Corpus), String> {
    let corpus = Corpus::read(&args.corpus).map_err(err)?;
    let (train_text, held_out_text) = corpus.split_held_out(args.held_out);
    eprintln!("corpus: {} documents, {} sentences ({} held-out documents)", train_text.documents.len(), train_text.num_sentences(), held_out_text.documents.len());
    Ok((train_text, held_out_text))
}

/// The run's tokenizer: its own copy (so that `--resume` sees the same one), the one of
/// `--init-from`, `--teacher` or `--tokenizer`, or one of `kind` trained on the corpus; saved in the run.
pub(crate) fn run_tokenizer(args: &TrainArgs, out: &Path, kind: TokenizerKind, train_text: &Corpus) -> Result<(Tokenizer, TokenizerConfig), String> {
    let run_tokenizer = out.join("tokenizer");
    let (tokenizer, tok_config) = if args.resume && run_tokenizer.is_dir() {
        (Tokenizer::from_dir(&run_tokenizer).map_err(err)?, TokenizerConfig::of_dir(&run_tokenizer).map_err(err)?)
    } else if let Some(dir) = args.init_from.as_ref().or(args.teacher.as_ref()).or(args.tokenizer.as_ref()) {
        (Tokenizer::from_dir(dir).map_err(err)?, TokenizerConfig::of_dir(dir).map_err(err)?)
    } else {
        eprintln!("training a {kind:?} tokenizer ({} tokens) on the corpus", args.vocab_size);
        let tok_config = kind.config();
        (Tokenizer::train(kind, train_text.sentences(), args.vocab_size, &tok_config).map_err(err)?, tok_config)
    };
    tokenizer.save(&run_tokenizer, &tok_config).map_err(err)?;
    Ok((tokenizer, tok_config))
}

/// The model trained and its configuration, on the autodiff `device`: the run's own on
/// `--resume`, `--init-from`'s checkpoint, `--config`'s, or what `fresh` makes (a model of
/// `--preset`; a distillation's student); the configuration is saved in the run.
pub(crate) fn run_model<M: PretrainedModel>(
    args: &TrainArgs,
    out: &Path,
    device: &burn::tensor::Device,
    fresh: impl FnOnce() -> Result<(M, M::Config), String>,
) -> Result<(M, M::Config), String> {
    // A fresh model's initial weights come from the run's seed, so `--seed` reproduces a run.
    device.seed(args.seed);
    let saved_config = out.join("config.json");
    let (model, config) = match (&args.init_from, &args.config) {
        // A resumed run keeps the model configuration it started with.
        _ if args.resume && saved_config.is_file() => {
            let config = M::Config::from_dir(out).map_err(err)?;
            (M::init(&config, device), config)
        }
        (Some(dir), _) => {
            let loaded = M::from_pretrained(dir, device).map_err(err)?;
            eprintln!("initialised from {}: {}", dir.display(), loaded.report);
            (loaded.model, loaded.config)
        }
        (None, Some(path)) => {
            let config = read_config::<M::Config>(path)?;
            (M::new_hf(&config, device), config)
        }
        (None, None) => fresh()?,
    };
    let json = serde_json::to_string_pretty(&config.to_json(&M::architecture())).expect("JSON");
    write_atomic(&saved_config, json.as_bytes()).map_err(|e| format!("cannot write {}: {e}", saved_config.display()))?;
    Ok((model, config))
}

/// The configuration of `--config` (a config.json).
fn read_config<C: HfConfig>(path: &Path) -> Result<C, String> {
    if !path.file_name().is_some_and(|n| n == "config.json") {
        return Err(format!("--config must name a config.json, got {}", path.display()));
    }
    C::from_dir(path.parent().unwrap_or(Path::new("."))).map_err(err)
}

/// A fresh model of the preset `config`.
pub(crate) fn preset_model<M: PretrainedModel>(device: &burn::tensor::Device, config: Result<M::Config, sesame_layers::ConfigError>) -> Result<(M, M::Config), String> {
    let config = config.map_err(err)?;
    Ok((M::new_hf(&config, device), config))
}

/// Default `--steps` of the masked-LM families.
const MASKED_LM_STEPS: u64 = 4000;

/// The trainer of `args` in `out`, on `device`'s threads, for `steps` steps.
fn trainer(args: &TrainArgs, steps: u64, out: &Path, device: &burn::tensor::Device) -> Trainer {
    let train_config = TrainConfig {
        steps,
        grad_accum: args.grad_accum,
        lr: args.lr,
        warmup: args.warmup.unwrap_or(steps / 10),
        decay: args.decay,
        weight_decay: args.weight_decay,
        max_grad_norm: args.max_grad_norm,
        seed: args.seed,
        log_every: args.log_every,
        eval_every: args.eval_every,
        checkpoint_every: args.checkpoint_every,
        ..TrainConfig::default()
    };
    let threads = args.threads.unwrap_or_else(|| sesame_layers::device::default_threads(device));
    let trainer = Trainer::new(train_config, out).with_progress(!args.quiet).with_threads(threads);
    match args.stop_after {
        Some(step) => trainer.with_stop_after(step),
        None => trainer,
    }
}

/// Train `model` on `task`, export it with `export` (which returns the model directories
/// written, each of which gets the tokenizer), and summarise the run as JSON.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fit_and_export<T>(
    args: &TrainArgs,
    steps: u64,
    out: &Path,
    task: &T,
    model: T::Model,
    device: &burn::tensor::Device,
    tokenizer: (&Tokenizer, &TokenizerConfig),
    export: impl FnOnce(&T::Model, &Path) -> Result<Vec<PathBuf>, sesame_layers::CheckpointError>,
) -> Result<String, String>
where
    T: sesame_train::TrainTask + Sync,
    T::Model: Send + Sync,
    T::Batch: Sync,
{
    let outcome = trainer(args, steps, out, device).fit(task, model, args.resume).map_err(err)?;
    if args.stop_after.is_some() {
        return Ok(serde_json::json!({ "stopped_after": args.stop_after, "run": out }).to_string());
    }
    let export_dir = out.join("export");
    for dir in export(&burn::module::Module::valid(&outcome.model), &export_dir).map_err(err)? {
        tokenizer.0.save(&dir, tokenizer.1).map_err(err)?;
    }
    eprintln!("exported the model and tokenizer to {}", export_dir.display());
    Ok(serde_json::json!({
        "run": out,
        "export": export_dir,
        "resumed_from": outcome.resumed_from,
        "held_out": outcome.held_out,
    })
    .to_string())
}

/// `train` for a family pre-trained by the shared masked-LM task.
pub fn train_family<F: PretrainingFamily>(args: TrainArgs, device: burn::tensor::Device) -> Result<String, String> {
    refuse_other_corruptions(&args, F::NAME)?;
    let masking = args.masking.map(Masking::from).unwrap_or_else(F::masking);
    let steps = args.steps.unwrap_or(MASKED_LM_STEPS);
    let layout = layout::<F>(&args)?;
    let spec = RunSpec::new(&args, masking_spec(&args, masking)?, format!("{layout:?}"));
    let out = &open_run(&args, F::NAME, &spec)?;
    let (train_text, held_out_text) = read_corpus(&args)?;
    let (tokenizer, tok_config) = run_tokenizer(&args, out, F::tokenizer(), &train_text)?;
    let train_device = device.autodiff();
    let pad = tokenizer.special_tokens().pad.1 as usize;
    let (model, config) = run_model::<F::Model>(&args, out, &train_device, || preset_model(&train_device, F::preset(args.preset(), tokenizer.vocab_size(), args.seq_len.max(64), pad)))?;
    let limits = config.input_limits();
    if args.seq_len > limits.max_len {
        return Err(format!("--seq-len {} exceeds the model's {} positions", args.seq_len, limits.max_len));
    }
    let strategy = masking.strategy(&knowledge(&args, masking, &train_text, &tokenizer, steps, out)?);
    let task = Pretraining::<F::Model>::new(&train_text, &held_out_text, &tokenizer, limits.vocab_size, layout, strategy, args.batch_size, args.seed)
        .map_err(|e| corpus_err(&args, e))?
        .with_static_masks(args.static_masks.and_then(std::num::NonZeroU32::new));
    eprintln!(
        "model: {}, {} parameters; {} training examples ({layout:?}, {masking:?} masking, {}); {} steps of {} x {}",
        F::Model::architecture(), burn::module::Module::num_params(&model), task.num_train_examples(),
        args.static_masks.map_or("dynamic".to_string(), |n| format!("{n} static masks per example")),
        steps, args.grad_accum, args.batch_size
    );
    fit_and_export(&args, steps, out, &task, model, &train_device, (&tokenizer, &tok_config), |model, dir| model.export(&config, dir))
}

/// What the run records of `masking` (resuming with other phrases or entities is refused),
/// after checking that `--phrases` and `--entities` go with it.
fn masking_spec(args: &TrainArgs, masking: Masking) -> Result<String, String> {
    if args.phrases.is_some() && !masking.reads_phrases() {
        return Err(format!("--phrases is read by --masking phrase or ernie, not {}", flag_name(masking)));
    }
    if args.entities.is_some() && !masking.reads_entities() {
        return Err(format!("--entities is read by --masking entity or ernie, not {}", flag_name(masking)));
    }
    if masking.reads_entities() && args.entities.is_none() {
        return Err(format!("--masking {}: give the entities to mask whole with --entities FILE (one surface form per line)", flag_name(masking)));
    }
    let mut spec = format!("{masking:?}");
    for (flag, file) in [("phrases", &args.phrases), ("entities", &args.entities)] {
        if let Some(file) = file {
            spec.push_str(&format!(" {flag}={}", file.display()));
        }
    }
    Ok(spec)
}

/// `masking` as `--masking` spells it.
fn flag_name(masking: Masking) -> String {
    match masking {
        Masking::Shared(kind) => clap::ValueEnum::to_possible_value(&kind).map_or_else(|| format!("{kind:?}"), |v| v.get_name().to_string()),
        Masking::Family { name, .. } => name.to_lowercase(),
    }
}

/// The units ERNIE's knowledge masking masks whole under `masking`: `--phrases` (or the
/// collocations of `train_text`, listed in `out/phrases.txt`) and `--entities`, over the
/// micro-batches of `steps` steps.
fn knowledge(args: &TrainArgs, masking: Masking, train_text: &Corpus, tokenizer: &Tokenizer, steps: u64, out: &Path) -> Result<Knowledge, String> {
    let mut knowledge = Knowledge { batches: steps * args.grad_accum, ..Knowledge::default() };
    if masking.reads_phrases() {
        let phrases = match &args.phrases {
            Some(file) => Lexicon::read(file, tokenizer).map_err(|e| format!("--phrases {e}"))?,
            None => {
                let sentences: Vec<Segment> = tokenize_documents(train_text, tokenizer).map_err(|e| corpus_err(args, e))?.into_iter().flatten().collect();
                let config = PhraseConfig::default();
                let text = WordText::new(tokenizer);
                let found = find_phrases(&sentences, &text, config);
                if found.is_empty() {
                    return Err(corpus_err(args, format!("no phrase found for --masking {} (no pair of words seen together more than {} times with a word2phrase score over {}); give them with --phrases FILE", flag_name(masking), config.min_count, config.threshold)));
                }
                let list: String = found.iter().map(|p| p.join(" ") + "\n").collect();
                let path = out.join("phrases.txt");
                write_atomic(&path, list.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                eprintln!("the phrases found in --corpus are in {} (edit it and pass it with --phrases to choose them)", path.display());
                Lexicon::new(found, text)
            }
        };
        let examples: Vec<String> = phrases.entries().iter().take(6).map(|p| p.join(" ")).collect();
        eprintln!("phrases masked whole: {} ({}, …)", phrases.len(), examples.join(", "));
        knowledge.phrases = Arc::new(phrases);
    }
    if let Some(file) = args.entities.as_ref().filter(|_| masking.reads_entities()) {
        let entities = Lexicon::read(file, tokenizer).map_err(|e| format!("--entities {e}"))?;
        eprintln!("entities masked whole: {}", entities.len());
        knowledge.entities = Arc::new(entities);
    }
    Ok(knowledge)
}

/// Refuse BART's and XLNet's data flags for the masked-LM family `family`.
fn refuse_other_corruptions(args: &TrainArgs, family: &str) -> Result<(), String> {
    if args.noise.any() {
        return Err(format!("--mask, --insert, --rotate, … set BART's noise; {family} masks with --masking"));
    }
    if args.permutation.any() {
        return Err(format!("--reuse-len, --num-predict, --perm-size, … set XLNet's permutation LM; {family} masks with --masking"));
    }
    Ok(())
}

/// `train FAMILY --teacher DIR`: a masked-LM student of family `F` (base model `B`) distilled
/// from the fixed teacher `DIR` ([`MaskedLmDistillation`]) on masked single sequences of full
/// sentences, with `F`'s masking (or `--masking`); the student starts from the teacher's
/// layers (`--student-layers`, DistilBERT's every other one by default) or fresh
/// (`--preset`, `--config`), and is exported as the family's masked LM.
pub fn train_distilled<F, B>(args: TrainArgs, device: burn::tensor::Device) -> Result<String, String>
where
    F: PretrainingFamily,
    B: HasMaskedLmHead,
    F::Model: PretrainedModel<Config = B::Config>,
    ForMaskedLM<B>: Send + Sync,
{
    refuse_other_corruptions(&args, F::NAME)?;
    let teacher_dir = args.teacher.as_ref().expect("train --teacher");
    let masking = args.masking.map(Masking::from).unwrap_or_else(F::masking);
    let steps = args.steps.unwrap_or(MASKED_LM_STEPS);
    let layout = layout::<SingleSequenceRecipe<F, B>>(&args)?;
    let fresh_student = args.config.is_some() || args.preset.is_some();
    if fresh_student && args.student.student_layers.is_some() {
        return Err("--student-layers takes the teacher's layers; a --preset or --config student has its own".into());
    }

    // The teacher: fixed, without dropout, on the training device.
    let train_device = device.autodiff();
    let loaded = ForMaskedLM::<B>::from_pretrained(teacher_dir, &train_device).map_err(|e| format!("--teacher: {e}"))?;
    if !loaded.report.initialized.is_empty() {
        return Err(format!("--teacher {} is not a masked LM of {}: {}", teacher_dir.display(), F::NAME, loaded.report));
    }
    let teacher_config = loaded.config;
    let teacher_sizes = B::classifier_sizes(&teacher_config);
    let teacher_tokenizer = Tokenizer::from_dir(teacher_dir).map_err(|e| format!("--teacher: {e}"))?;
    let pad = teacher_tokenizer.special_tokens().pad.1 as usize;
    let teacher_limits = teacher_config.input_limits();

    // The student's configuration, checked against the teacher before the run starts: the
    // teacher's with some of its layers (the student made of them now), or that of --config
    // or --preset (the fresh model drawn by `run_model`, from the seed).
    let (kept_student, config) = match &args.config {
        Some(path) => (None, read_config::<B::Config>(path)?),
        None if fresh_student => (None, F::preset(args.preset(), teacher_limits.vocab_size, args.seq_len.max(64), pad).map_err(err)?),
        None => {
            let mut config = teacher_config.clone();
            let kept = args.student.options().kept_layers(teacher_sizes.layers)?;
            eprintln!("the student starts from the teacher's layers {}", kept.iter().map(|l| (l + 1).to_string()).collect::<Vec<_>>().join(", "));
            let student = loaded.model.clone().keep_layers(&mut config, &kept).map_err(err)?;
            (Some(student), config)
        }
    };
    let sizes = B::classifier_sizes(&config);
    let loss = args.student.options().loss(sesame_train::distill::MASKED_LM_WEIGHTS, sizes.layers, teacher_sizes.layers)?;
    let limits = config.input_limits();
    if limits.vocab_size != teacher_limits.vocab_size {
        return Err(format!("the student's vocab_size is {}, the teacher's {}: the soft targets need the same vocabulary", limits.vocab_size, teacher_limits.vocab_size));
    }
    // A student of another width learns the hidden states through a projection (TinyBERT's).
    let projection = ((loss.cosine > 0.0 || loss.hidden > 0.0) && sizes.hidden_size != teacher_sizes.hidden_size).then_some([sizes.hidden_size, teacher_sizes.hidden_size]);
    if loss.attention > 0.0 && (attention_heads(&config) != attention_heads(&teacher_config) || !B::pruned_heads(&teacher_config).is_empty()) {
        return Err("--alpha-attention: the student's and teacher's mapped layers must have the same heads".into());
    }
    for (who, max_len) in [("student", limits.max_len), ("teacher", teacher_limits.max_len)] {
        if args.seq_len > max_len {
            return Err(format!("--seq-len {} exceeds the {who}'s {max_len} positions", args.seq_len));
        }
    }

    let mut spec = RunSpec::new(&args, masking_spec(&args, masking)?, format!("{layout:?}"));
    spec.objective = Some(Objective::Mlm);
    spec.teacher = Some(TeacherSpec { dir: teacher_dir.clone(), student: format!("{:?}", args.student), projection });
    let out = &open_run(&args, F::NAME, &spec)?;
    let (train_text, held_out_text) = read_corpus(&args)?;
    let (tokenizer, tok_config) = run_tokenizer(&args, out, F::tokenizer(), &train_text)?;
    // On --resume, the run's own configuration (its checkpoint is loaded by the trainer).
    let (student, config) = run_model::<ForMaskedLM<B>>(&args, out, &train_device, || match kept_student {
        Some(student) => Ok((student, config)),
        None => preset_model(&train_device, Ok(config)),
    })?;
    let student = Distilled { student, projection: projection.map(|[from, to]| LinearConfig::new(from, to).init(&train_device)) };
    let teacher = burn::module::Module::no_grad(sesame_train::pruning::without_dropout(loaded.model));
    let strategy = masking.strategy(&knowledge(&args, masking, &train_text, &tokenizer, steps, out)?);
    let data = Pretraining::<ForMaskedLM<B>>::new(&train_text, &held_out_text, &tokenizer, limits.vocab_size, layout, strategy, args.batch_size, args.seed)
        .map_err(|e| corpus_err(&args, e))?
        .with_static_masks(args.static_masks.and_then(std::num::NonZeroU32::new));
    eprintln!(
        "student: {}, {} layers, {} parameters (teacher: {} layers, {} parameters){}; {} training examples ({layout:?}, {masking:?} masking); loss {}; {} steps of {} x {}",
        ForMaskedLM::<B>::architecture(), sizes.layers, burn::module::Module::num_params(&student.student), teacher_sizes.layers, burn::module::Module::num_params(&teacher),
        projection.map_or(String::new(), |[from, to]| format!(", hidden states projected {from} -> {to}")),
        data.num_train_examples(), serde_json::to_string(&loss).expect("JSON"), steps, args.grad_accum, args.batch_size
    );
    let task = MaskedLmDistillation::new(data, teacher, loss, train_device.clone());
    fit_and_export(&args, steps, out, &task, student, &train_device, (&tokenizer, &tok_config), |model, dir| {
        model.student.save_pretrained(&config, dir)?;
        Ok(vec![dir.to_path_buf()])
    })
}

/// `export` of a distillation run of `train FAMILY --teacher` (student `ForMaskedLM<B>`): the
/// student alone, in HF layout.
pub fn export_distilled<B: HasMaskedLmHead>(run: &Path, checkpoint: &Path, out: &Path, device: &burn::tensor::Device) -> Result<Vec<PathBuf>, String> {
    let config = B::Config::from_dir(run).map_err(err)?;
    let projection = RunSpec::read(run)?.teacher.and_then(|t| t.projection);
    let init = Distilled { student: ForMaskedLM::<B>::init(&config, device), projection: projection.map(|[from, to]| LinearConfig::new(from, to).init(device)) };
    let model = burn::module::Module::try_load_file(init, checkpoint).map_err(err)?;
    model.student.save_pretrained(&config, out).map_err(err)?;
    Ok(vec![out.to_path_buf()])
}

/// `num_attention_heads` of a configuration, as its config.json says.
fn attention_heads<C: HfConfig>(config: &C) -> Option<u64> {
    config.to_json("").get("num_attention_heads").and_then(serde_json::Value::as_u64)
}

/// Refuse the masked-LM families' data flags for a family whose corruption is its own
/// (`instead`: how that family's is set).
pub(crate) fn refuse_masked_lm_flags(args: &TrainArgs, instead: &str) -> Result<(), String> {
    let given = [
        (args.masking.is_some(), "--masking"),
        (args.phrases.is_some(), "--phrases"),
        (args.entities.is_some(), "--entities"),
        (args.packing.is_some(), "--packing"),
        (args.static_masks.is_some(), "--static-masks"),
    ];
    match given.iter().find(|(given, _)| *given) {
        Some((_, flag)) => Err(format!("{flag} is for the masked-LM families; {instead}")),
        None => Ok(()),
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

/// Save the model of a training checkpoint (`run`, `checkpoint`) in HF layout at `out`;
/// returns the model directories written.
pub type ExportFn = fn(&Path, &Path, &Path, &burn::tensor::Device) -> Result<Vec<PathBuf>, String>;

/// Export a checkpoint of a run to HF layout (config.json, model.safetensors, tokenizer files),
/// with the export `export_of` gives for the run (its family's, for its objective).
pub fn export(args: ExportArgs, device: burn::tensor::Device, export_of: fn(&RunSpec) -> Result<ExportFn, String>) -> Result<String, String> {
    let run = &args.run;
    let checkpoints = run.join("checkpoints");
    let name = match args.step {
        Some(step) => format!("step-{step:08}"),
        None => std::fs::read_to_string(checkpoints.join("latest"))
            .map_err(|e| format!("no checkpoint in {}: {e}", run.display()))?
            .trim()
            .to_string(),
    };
    // `latest` names a checkpoint of this run (`step-NNNNNNNN`), never a path elsewhere.
    let is_step = name.strip_prefix("step-").is_some_and(|n| n.len() == 8 && n.bytes().all(|b| b.is_ascii_digit()));
    if !is_step {
        return Err(format!("{}: `{name}` is not a checkpoint of this run (expected step-NNNNNNNN)", checkpoints.join("latest").display()));
    }
    let checkpoint = checkpoints.join(&name);
    if !checkpoint.join("model.bpk").is_file() {
        return Err(format!("no checkpoint {} (see {})", name, checkpoints.display()));
    }
    let spec = RunSpec::read(run)?;
    let out = args.out.clone().unwrap_or_else(|| run.join(format!("export-{name}")));
    let checkpoint_file = checkpoint.join("model.bpk");
    let export = export_of(&spec)?;
    let written = export(run, &checkpoint_file, &out, &device)?;
    let tokenizer_dir = run.join("tokenizer");
    let tokenizer = Tokenizer::from_dir(&tokenizer_dir).map_err(err)?;
    let tok_config = TokenizerConfig::of_dir(&tokenizer_dir).map_err(err)?;
    for dir in written {
        tokenizer.save(&dir, &tok_config).map_err(err)?;
    }
    Ok(serde_json::json!({ "checkpoint": checkpoint, "export": out }).to_string())
}

/// Load a checkpoint of `F`'s model (config from the run) and save it in HF layout.
pub fn export_model<F: PretrainingFamily>(run: &Path, checkpoint: &Path, out: &Path, device: &burn::tensor::Device) -> Result<Vec<PathBuf>, String> {
    let config = <F::Model as PretrainedModel>::Config::from_dir(run).map_err(err)?;
    let model = burn::module::Module::try_load_file(F::Model::init(&config, device), checkpoint).map_err(err)?;
    model.export(&config, out).map_err(err)
}

