//! One call for pre-training: [`pretrain`] builds a run directory from a corpus (the
//! tokenizer trained on it or given, the model fresh from a preset, a config.json or a
//! checkpoint), trains the family's objective with the shared [`Trainer`] (checkpoints, exact
//! resume, metrics and plots), and exports the model in HF layout. [`pretrain_distilled`]
//! distils a masked LM into a smaller student the same way. `cargo xtask train` parses its
//! flags into [`PretrainOptions`] and calls these; BART's and XLNet's runs
//! (`sesame_bart::pretraining::pretrain`, `sesame_xlnet::pretraining::pretrain`) are made of the
//! same steps ([`open_run`], [`read_corpus`], [`run_tokenizer`], [`run_model`],
//! [`fit_and_export`]).
//!
//! ```no_run
//! # fn run() -> Result<(), String> {
//! use sesame_train::pretraining::{pretrain, PretrainOptions};
//!
//! let options = PretrainOptions { steps: Some(4000), ..PretrainOptions::new("bert", "data/moby-dick.txt") };
//! let run = pretrain::<sesame_bert::Bert>(&options, burn::tensor::Device::flex())?;
//! println!("held-out MLM loss {:.3}; the model is in {}", run.held_out["mlm_loss"], run.export.display());
//! # Ok(()) }
//! ```
//!
//! Errors are one line each, naming the file or the option (as the CLI's flag).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sesame_layers::fs::write_atomic;
use sesame_layers::{ForMaskedLM, Backbone, HfConfig, LinearConfig, PretrainedModel};
use sesame_text::{find_phrases, tokenize_documents, Corpus, Lexicon, Packing, PhraseConfig, Segment, Tokenizer, TokenizerConfig, TokenizerKind, WordText};

use super::families::{refuse_other_corruptions, Corruption, NoiseOptions, PermutationOptions};
use super::{Knowledge, Layout, Masking, MaskingKind, Pretraining, PretrainingFamily, PretrainingModel, SingleSequenceRecipe};
use crate::distill::{Distilled, MaskedLmDistillation, StudentOptions};
use crate::{Decay, TrainConfig, Trainer};

/// A pre-training objective in place of the family's own (`--objective`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum PackingKind {
    /// FULL-SENTENCES: sequences may cross document boundaries.
    Full,
    /// DOC-SENTENCES: sequences stay inside one document.
    Doc,
}

/// A pre-training job: the corpus, the model, the optimisation and the run directory. Build it
/// with [`PretrainOptions::new`] and change what differs from the defaults (the CLI's). With
/// the `cli` feature it is `cargo xtask train`'s flags (`clap::Args`), each default written
/// once, in `new`.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct PretrainOptions {
    /// Model family.
    // Its `Family::NAME`, also the run's default directory `runs/FAMILY` and in its record. The
    // command line's possible values are the families', set where it is built (xtask).
    pub family: String,
    /// Text file or directory of .txt files (documents separated by blank lines).
    #[cfg_attr(feature = "cli", arg(long, default_value = "data/moby-dick.txt"))]
    pub corpus: PathBuf,
    /// Existing tokenizer directory (tokenizer.json or vocab.txt); trained on the corpus if absent.
    #[cfg_attr(feature = "cli", arg(long))]
    pub tokenizer: Option<PathBuf>,
    /// Vocabulary size when training a tokenizer (2000: on a corpus the size of the shipped
    /// one, a small vocabulary leaves a tiny model more to learn from context in a few minutes).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().vocab_size, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(16..=1_000_000)))]
    pub vocab_size: usize,
    /// Model size preset: tiny, mini, small or base [default: tiny; with --teacher, the
    /// teacher's own shape with --student-layers].
    #[cfg_attr(feature = "cli", arg(long))]
    pub preset: Option<String>,
    /// A config.json to use instead of a preset.
    #[cfg_attr(feature = "cli", arg(long, conflicts_with = "preset"))]
    pub config: Option<PathBuf>,
    /// Continue pre-training this HF checkpoint (its config and tokenizer are used).
    #[cfg_attr(feature = "cli", arg(long, conflicts_with_all = ["config", "tokenizer"], value_parser = crate::cli::model_dir))]
    pub init_from: Option<PathBuf>,
    /// Distil this masked LM (an HF checkpoint of the family, kept fixed) into a smaller
    /// student, as DistilBERT was trained: masked LM on single sequences, the student learning
    /// the teacher's distributions at the masked positions (`--alpha-soft`, at
    /// `--temperature`), the tokens (`--alpha-hard`) and the teacher's last hidden states
    /// (`--alpha-cos`). The student is the teacher's shape with `--student-layers` of its
    /// layers (every other one by default), or a fresh `--preset` or `--config`; the
    /// teacher's tokenizer is used. The default run directory is runs/FAMILY-distill.
    #[cfg_attr(feature = "cli", arg(long, conflicts_with_all = ["init_from", "tokenizer", "objective"], value_parser = crate::cli::model_dir))]
    pub teacher: Option<PathBuf>,
    /// The student of `--teacher` and the weights of the loss's terms.
    #[cfg_attr(feature = "cli", command(flatten))]
    pub student: StudentOptions,
    /// Optimizer steps [default: 4000, 2¾–4½ minutes of a tiny model on 2 CPU cores by
    /// family; BART 1600, about 5 minutes: its loss covers every target token, both stacks].
    #[cfg_attr(feature = "cli", arg(long, value_parser = clap::value_parser!(u64).range(1..)))]
    pub steps: Option<u64>,
    /// Sequences per micro-batch (32 of the default 16 tokens; with `--grad-accum 4`, 2048
    /// tokens a step).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().batch_size, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536)))]
    pub batch_size: usize,
    /// Maximum sequence length (tokens, special tokens included; at least 8, so that a pair of
    /// segments has room for words). The default 16 is for the few-minute main job: a tiny
    /// model leaves the unigram plateau far sooner on short sequences (docs/guide/pre-training.md); raise
    /// it, with `--batch-size`, for a model meant for longer inputs.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().seq_len, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(8..=65_536)))]
    pub seq_len: usize,
    /// Peak learning rate (1e-3 suits the tiny model; lower it for larger ones).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().lr))]
    pub lr: f64,
    /// Warm-up steps (default: 10% of the steps).
    #[cfg_attr(feature = "cli", arg(long))]
    pub warmup: Option<u64>,
    /// Decay after warm-up.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "linear"))]
    pub decay: Decay,
    /// Micro-batches per optimizer step, gradients averaged (4: small micro-batches run
    /// faster per token on a CPU, and `--threads` of them at once).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().grad_accum, value_parser = clap::value_parser!(u64).range(1..)))]
    pub grad_accum: u64,
    /// Micro-batches of a step trained at once on a CPU backend, each on its own thread
    /// (default: the number of CPU cores on flex and ndarray, 1 on libtorch, whose operations
    /// already use every core; at most `--grad-accum`). The numbers do not depend on it, only
    /// the speed.
    #[cfg_attr(feature = "cli", arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024)))]
    pub threads: Option<usize>,
    /// AdamW weight decay.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().weight_decay))]
    pub weight_decay: f64,
    /// Global gradient-norm clip (0 = off).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().max_grad_norm))]
    pub max_grad_norm: f64,
    /// Pre-train with this objective instead of the family's own (masked-LM families): `span`
    /// is SpanBERT's, `mlm` masked LM alone on single sequences. The default run directory is
    /// then runs/FAMILY-OBJECTIVE.
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub objective: Option<Objective>,
    /// MASS's fragment: its share of each block's tokens (--objective mass) [default: 0.5, the
    /// paper's].
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::cli::fragment_share))]
    pub mass_fraction: Option<f64>,
    /// Masking strategy (default: the family's: token for BERT and RoBERTa, ngram for ALBERT,
    /// electra for ELECTRA, unilm for UniLM; span with --objective span). ERNIE's knowledge
    /// masking: `phrase` masks whole phrases (--phrases, or the corpus's collocations),
    /// `entity` whole entities (--entities), `ernie` words, then phrases, then entities, each a
    /// third of the run.
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub masking: Option<MaskingKind>,
    /// Phrases to mask whole under `--masking phrase|ernie`, one per line [default: the
    /// corpus's collocations, pairs of words seen together more than chance allows
    /// (word2phrase's score over 100, more than 5 times; two passes, up to 4 words)].
    #[cfg_attr(feature = "cli", arg(long))]
    pub phrases: Option<PathBuf>,
    /// Entities to mask whole under `--masking entity|ernie`: one surface form per line, matched
    /// on word boundaries as the tokenizer writes the words.
    #[cfg_attr(feature = "cli", arg(long))]
    pub entities: Option<PathBuf>,
    /// How packed families (RoBERTa, ELECTRA) fill sequences (default: full).
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub packing: Option<PackingKind>,
    /// Static masking with N masks per example, epoch e using mask e mod N (BERT's original
    /// recipe, dupe_factor 10); default: dynamic, a new mask every time an example is seen.
    #[cfg_attr(feature = "cli", arg(long, value_parser = clap::value_parser!(u32).range(1..)))]
    pub static_masks: Option<u32>,
    /// BART's noise, with fairseq's names and BART's recipe as defaults.
    #[cfg_attr(feature = "cli", command(flatten))]
    pub noise: NoiseOptions,
    /// XLNet's permutation-LM settings, with the original's names and proportions as defaults.
    #[cfg_attr(feature = "cli", command(flatten))]
    pub permutation: PermutationOptions,
    /// Random seed.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().seed))]
    pub seed: u64,
    /// Fraction of documents held out for evaluation (at least one document).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().held_out, value_parser = crate::cli::held_out_fraction))]
    pub held_out: f64,
    /// Log every N steps.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().log_every))]
    pub log_every: u64,
    /// Evaluate every N steps (0: only at the end).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().eval_every))]
    pub eval_every: u64,
    /// Checkpoint every N steps (0: only at the end).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().checkpoint_every))]
    pub checkpoint_every: u64,
    /// Run directory (checkpoints, metrics.jsonl, loss.svg, export/); default runs/FAMILY.
    #[cfg_attr(feature = "cli", arg(long))]
    pub out: Option<PathBuf>,
    /// Continue the run in `--out` from its latest checkpoint.
    #[cfg_attr(feature = "cli", arg(long, conflicts_with = "overwrite"))]
    pub resume: bool,
    /// Delete what `--out` holds and start a new run there.
    #[cfg_attr(feature = "cli", arg(long))]
    pub overwrite: bool,
    /// Stop after this step without a final checkpoint or export (simulates a kill; for
    /// testing resume).
    #[cfg_attr(feature = "cli", arg(long, hide = true))]
    pub stop_after: Option<u64>,
    /// Draw a progress bar on a terminal (with the `cli` feature) instead of log lines
    /// [`PretrainOptions::new`: no; the command line: unless `--quiet`].
    #[cfg_attr(feature = "cli", arg(long = "quiet", action = clap::ArgAction::SetFalse, help = "Hide the progress bar (log lines instead)"))]
    pub progress: bool,
}

/// [`PretrainOptions::new`]'s values, which the flags show and take.
#[cfg(feature = "cli")]
fn defaults() -> PretrainOptions {
    PretrainOptions::new("bert", "")
}

impl PretrainOptions {
    /// Pre-train `family` on `corpus`; every other option at its default (the main job's).
    pub fn new(family: impl Into<String>, corpus: impl Into<PathBuf>) -> Self {
        Self {
            family: family.into(),
            corpus: corpus.into(),
            tokenizer: None,
            vocab_size: 2000,
            preset: None,
            config: None,
            init_from: None,
            teacher: None,
            student: StudentOptions::default(),
            steps: None,
            batch_size: 32,
            seq_len: 16,
            lr: 1e-3,
            warmup: None,
            decay: Decay::Linear,
            grad_accum: 4,
            threads: None,
            weight_decay: 0.01,
            max_grad_norm: 1.0,
            objective: None,
            masking: None,
            phrases: None,
            entities: None,
            packing: None,
            static_masks: None,
            mass_fraction: None,
            noise: NoiseOptions::default(),
            permutation: PermutationOptions::default(),
            seed: 42,
            held_out: 0.02,
            log_every: 10,
            eval_every: 100,
            checkpoint_every: 100,
            out: None,
            resume: false,
            overwrite: false,
            stop_after: None,
            progress: false,
        }
    }

    /// `preset`, or `tiny`.
    pub fn preset(&self) -> &str {
        self.preset.as_deref().unwrap_or("tiny")
    }

    /// These options with `init_from` and `teacher` directories: a hub id
    /// (`org/name[@revision]`) is found in the local HuggingFace cache.
    pub fn resolved(&self) -> Result<Self, String> {
        let resolve = |dir: &Option<PathBuf>| dir.as_deref().map(sesame_layers::hub::resolve_path).transpose().map_err(|e| e.to_string());
        Ok(Self { init_from: resolve(&self.init_from)?, teacher: resolve(&self.teacher)?, ..self.clone() })
    }

    /// The options a run cannot start with, as one line naming the option.
    pub fn check(&self) -> Result<(), String> {
        if self.teacher.is_none() && self.student.any() {
            return Err("--student-layers, --alpha-*, --temperature and --layer-map are for distillation: give the teacher with --teacher".into());
        }
        for (value, flag) in [(self.batch_size as u64, "--batch-size"), (self.grad_accum, "--grad-accum"), (self.vocab_size as u64, "--vocab-size"), (self.log_every, "--log-every")] {
            if value == 0 {
                return Err(format!("{flag} 0: must be at least 1"));
            }
        }
        if self.steps == Some(0) {
            return Err("--steps 0: must be at least 1".into());
        }
        if self.seq_len < 8 {
            return Err(format!("--seq-len {}: at least 8 (a pair of segments needs room for words)", self.seq_len));
        }
        if !(0.0..1.0).contains(&self.held_out) {
            return Err(format!("--held-out {}: not a fraction in [0, 1)", self.held_out));
        }
        for (value, flag) in [(self.lr, "--lr"), (self.weight_decay, "--weight-decay"), (self.max_grad_norm, "--max-grad-norm")] {
            if !(value >= 0.0 && value.is_finite()) {
                return Err(format!("{flag} {value}: not a finite number >= 0"));
            }
        }
        Ok(())
    }
}

/// What a pre-training run gives.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Pretrained {
    /// The run directory.
    pub run: PathBuf,
    /// The exported model, in HF layout with its tokenizer (`RUN/export`).
    pub export: PathBuf,
    /// The step the run started from (0, or the resumed checkpoint's).
    pub resumed_from: u64,
    /// The held-out metrics at the end.
    pub held_out: std::collections::BTreeMap<String, f64>,
    /// The step `stop_after` ended the run at, without a final checkpoint or export.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_after: Option<u64>,
}

/// A checkpoint exported by [`export_checkpoint`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct Exported {
    /// The checkpoint's directory.
    pub checkpoint: PathBuf,
    /// Where its model went.
    pub export: PathBuf,
}

pub fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// An error making the training examples of `--corpus`, naming it.
pub fn corpus_err(job: &PretrainOptions, e: impl std::fmt::Display) -> String {
    format!("--corpus {}: {e}", job.corpus.display())
}

/// Settings that must stay the same when a run is resumed.
#[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
pub struct RunSpec {
    pub family: String,
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
    pub objective: Option<Objective>,
    /// The teacher of a distillation run (`--teacher`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teacher: Option<TeacherSpec>,
    seed: u64,
    held_out: f64,
}

/// The teacher of a distillation run and what the run trains beside the student.
#[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
pub struct TeacherSpec {
    /// `--teacher`.
    dir: PathBuf,
    /// The student's and the loss's flags.
    student: String,
    /// The shape `[student width, teacher width]` of the hidden states' projection, when the
    /// widths differ and a term reads the hidden states.
    projection: Option<[usize; 2]>,
}

impl RunSpec {
    /// The data settings of `job`, with the family's masking (or noise) and layout.
    pub fn new(job: &PretrainOptions, masking: String, layout: String) -> Self {
        Self {
            family: job.family.clone(),
            corpus: job.corpus.clone(),
            seq_len: job.seq_len,
            batch_size: job.batch_size,
            masking,
            layout,
            static_masks: job.static_masks,
            objective: job.objective,
            teacher: None,
            seed: job.seed,
            held_out: job.held_out,
        }
    }

    /// The settings of the run in `dir` (its `run.json`).
    pub fn read(dir: &Path) -> Result<Self, String> {
        let path = dir.join("run.json");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{} is not a run of `cargo xtask train`: {e}", dir.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("cannot read {}: {e} (a run of an older Sesame; start a new one)", path.display()))
    }
}

/// The family's data layout with the command line's choices.
fn layout<F: PretrainingFamily>(job: &PretrainOptions) -> Result<Layout, String> {
    let layout = F::layout().with_max_seq_len(job.seq_len);
    match (layout, job.packing) {
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
pub fn open_run(job: &PretrainOptions, family: &str, spec: &RunSpec) -> Result<PathBuf, String> {
    let name = match job.objective {
        _ if job.teacher.is_some() => format!("{family}-distill"),
        Some(objective) => format!("{family}-{}", objective.name()),
        None => family.to_string(),
    };
    let out = job.out.clone().unwrap_or_else(|| PathBuf::from("runs").join(name));
    let holds_something = std::fs::read_dir(&out).is_ok_and(|mut entries| entries.next().is_some());
    if holds_something && !job.resume {
        if !job.overwrite {
            return Err(format!(
                "--out {} already holds a run: continue it with --resume, or start anew with --overwrite",
                out.display()
            ));
        }
        std::fs::remove_dir_all(&out).map_err(|e| format!("--overwrite: cannot remove {}: {e}", out.display()))?;
    }
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let spec_path = out.join("run.json");
    if job.resume {
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
pub fn read_corpus(job: &PretrainOptions) -> Result<(Corpus, Corpus), String> {
    let corpus = Corpus::read(&job.corpus).map_err(err)?;
    let (train_text, held_out_text) = corpus.split_held_out(job.held_out);
    eprintln!("corpus: {} documents, {} sentences ({} held-out documents)", train_text.documents.len(), train_text.num_sentences(), held_out_text.documents.len());
    Ok((train_text, held_out_text))
}

/// The run's tokenizer: its own copy (so that `--resume` sees the same one), the one of
/// `--init-from`, `--teacher` or `--tokenizer`, or one of `kind` trained on the corpus; saved in the run.
pub fn run_tokenizer(job: &PretrainOptions, out: &Path, kind: TokenizerKind, train_text: &Corpus) -> Result<(Tokenizer, TokenizerConfig), String> {
    let run_tokenizer = out.join("tokenizer");
    let (tokenizer, tok_config) = if job.resume && run_tokenizer.is_dir() {
        (Tokenizer::from_dir(&run_tokenizer).map_err(err)?, TokenizerConfig::of_dir(&run_tokenizer).map_err(err)?)
    } else if let Some(dir) = job.init_from.as_ref().or(job.teacher.as_ref()).or(job.tokenizer.as_ref()) {
        (Tokenizer::from_dir(dir).map_err(err)?, TokenizerConfig::of_dir(dir).map_err(err)?)
    } else {
        eprintln!("training a {kind:?} tokenizer ({} tokens) on the corpus", job.vocab_size);
        let tok_config = kind.config();
        (Tokenizer::train(kind, train_text.sentences(), job.vocab_size, &tok_config).map_err(err)?, tok_config)
    };
    tokenizer.save(&run_tokenizer, &tok_config).map_err(err)?;
    Ok((tokenizer, tok_config))
}

/// The model trained and its configuration, on the autodiff `device`: the run's own on
/// `--resume`, `--init-from`'s checkpoint, `--config`'s, or what `fresh` makes (a model of
/// `--preset`; a distillation's student); the configuration is saved in the run.
pub fn run_model<M: PretrainedModel>(
    job: &PretrainOptions,
    out: &Path,
    device: &burn::tensor::Device,
    fresh: impl FnOnce() -> Result<(M, M::Config), String>,
) -> Result<(M, M::Config), String> {
    // A fresh model's initial weights come from the run's seed, so `--seed` reproduces a run.
    device.seed(job.seed);
    let saved_config = out.join("config.json");
    let (model, config) = match (&job.init_from, &job.config) {
        // A resumed run keeps the model configuration it started with.
        _ if job.resume && saved_config.is_file() => {
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
pub fn preset_model<M: PretrainedModel>(device: &burn::tensor::Device, config: Result<M::Config, sesame_layers::ConfigError>) -> Result<(M, M::Config), String> {
    let config = config.map_err(err)?;
    Ok((M::new_hf(&config, device), config))
}

/// Default `--steps` of the masked-LM families.
const MASKED_LM_STEPS: u64 = 4000;

/// The trainer of `job` in `out`, on `device`'s threads, for `steps` steps.
fn trainer(job: &PretrainOptions, steps: u64, out: &Path, device: &burn::tensor::Device) -> Trainer {
    let train_config = TrainConfig {
        steps,
        grad_accum: job.grad_accum,
        lr: job.lr,
        warmup: job.warmup.unwrap_or(steps / 10),
        decay: job.decay,
        weight_decay: job.weight_decay,
        max_grad_norm: job.max_grad_norm,
        seed: job.seed,
        log_every: job.log_every,
        eval_every: job.eval_every,
        checkpoint_every: job.checkpoint_every,
        ..TrainConfig::default()
    };
    let threads = job.threads.unwrap_or_else(|| sesame_layers::device::default_threads(device));
    let trainer = Trainer::new(train_config, out).with_progress(job.progress).with_threads(threads);
    match job.stop_after {
        Some(step) => trainer.with_stop_after(step),
        None => trainer,
    }
}

/// Train `model` on `task`, export it with `export` (which returns the model directories
/// written, each of which gets the tokenizer), and summarise the run as JSON.
#[allow(clippy::too_many_arguments)]
pub fn fit_and_export<T>(
    job: &PretrainOptions,
    steps: u64,
    out: &Path,
    task: &T,
    model: T::Model,
    device: &burn::tensor::Device,
    tokenizer: (&Tokenizer, &TokenizerConfig),
    export: impl FnOnce(&T::Model, &Path) -> Result<Vec<PathBuf>, sesame_layers::CheckpointError>,
) -> Result<Pretrained, String>
where
    T: crate::TrainTask + Sync,
    T::Model: Send + Sync,
    T::Batch: Sync,
{
    let outcome = trainer(job, steps, out, device).fit(task, model, job.resume).map_err(err)?;
    if job.stop_after.is_some() {
        return Ok(Pretrained { run: out.to_path_buf(), export: out.join("export"), resumed_from: outcome.resumed_from, held_out: outcome.held_out, stopped_after: job.stop_after });
    }
    let export_dir = out.join("export");
    for dir in export(&burn::module::Module::valid(&outcome.model), &export_dir).map_err(err)? {
        tokenizer.0.save(&dir, tokenizer.1).map_err(err)?;
    }
    eprintln!("exported the model and tokenizer to {}", export_dir.display());
    Ok(Pretrained { run: out.to_path_buf(), export: export_dir, resumed_from: outcome.resumed_from, held_out: outcome.held_out, stopped_after: None })
}

/// Pre-train a model of `F` with its objective (or `job.objective`'s recipe, chosen by the
/// caller as `F`), on `job.corpus`, into the run directory: checkpoints, metrics, plots, and
/// the export in HF layout.
pub fn pretrain<F: PretrainingFamily>(job: &PretrainOptions, device: burn::tensor::Device) -> Result<Pretrained, String> {
    let job = &job.resolved()?;
    job.check()?;
    refuse_other_corruptions(job, Corruption::Masking, &format!("{} masks with --masking", F::NAME))?;
    let masking = job.masking.map(Masking::from).unwrap_or_else(F::masking);
    let steps = job.steps.unwrap_or(MASKED_LM_STEPS);
    let layout = layout::<F>(job)?;
    let spec = RunSpec::new(job, masking_spec(job, masking)?, format!("{layout:?}"));
    let out = &open_run(job, F::NAME, &spec)?;
    let (train_text, held_out_text) = read_corpus(job)?;
    let (tokenizer, tok_config) = run_tokenizer(job, out, F::tokenizer(), &train_text)?;
    let train_device = device.autodiff();
    let pad = tokenizer.special_tokens().pad.1 as usize;
    let (model, config) = run_model::<F::Model>(job, out, &train_device, || preset_model(&train_device, F::preset(job.preset(), tokenizer.vocab_size(), job.seq_len.max(64), pad)))?;
    let limits = config.input_limits();
    if job.seq_len > limits.max_len {
        return Err(format!("--seq-len {} exceeds the model's {} positions", job.seq_len, limits.max_len));
    }
    let strategy = masking.strategy(&knowledge(job, masking, &train_text, &tokenizer, steps, out)?);
    let task = Pretraining::<F::Model>::new(&train_text, &held_out_text, &tokenizer, limits.vocab_size, layout, strategy, job.batch_size, job.seed)
        .map_err(|e| corpus_err(job, e))?
        .with_static_masks(job.static_masks.and_then(std::num::NonZeroU32::new));
    eprintln!(
        "model: {}, {} parameters; {} training examples ({layout:?}, {masking:?} masking, {}); {} steps of {} x {}",
        F::Model::architecture(), burn::module::Module::num_params(&model), task.num_train_examples(),
        job.static_masks.map_or("dynamic".to_string(), |n| format!("{n} static masks per example")),
        steps, job.grad_accum, job.batch_size
    );
    fit_and_export(job, steps, out, &task, model, &train_device, (&tokenizer, &tok_config), |model, dir| model.export(&config, dir))
}

/// What the run records of `masking` (resuming with other phrases or entities is refused),
/// after checking that `--phrases` and `--entities` go with it.
fn masking_spec(job: &PretrainOptions, masking: Masking) -> Result<String, String> {
    if job.phrases.is_some() && !masking.reads_phrases() {
        return Err(format!("--phrases is read by --masking phrase or ernie, not {}", flag_name(masking)));
    }
    if job.entities.is_some() && !masking.reads_entities() {
        return Err(format!("--entities is read by --masking entity or ernie, not {}", flag_name(masking)));
    }
    if masking.reads_entities() && job.entities.is_none() {
        return Err(format!("--masking {}: give the entities to mask whole with --entities FILE (one surface form per line)", flag_name(masking)));
    }
    let mut spec = format!("{masking:?}");
    for (flag, file) in [("phrases", &job.phrases), ("entities", &job.entities)] {
        if let Some(file) = file {
            spec.push_str(&format!(" {flag}={}", file.display()));
        }
    }
    Ok(spec)
}

/// `masking` as `--masking` spells it.
fn flag_name(masking: Masking) -> String {
    match masking {
        Masking::Shared(kind) => kind.name().to_string(),
        Masking::Family { name, .. } => name.to_lowercase(),
    }
}

/// The units ERNIE's knowledge masking masks whole under `masking`: `--phrases` (or the
/// collocations of `train_text`, listed in `out/phrases.txt`) and `--entities`, over the
/// micro-batches of `steps` steps.
fn knowledge(job: &PretrainOptions, masking: Masking, train_text: &Corpus, tokenizer: &Tokenizer, steps: u64, out: &Path) -> Result<Knowledge, String> {
    let mut knowledge = Knowledge { batches: steps * job.grad_accum, ..Knowledge::default() };
    if masking.reads_phrases() {
        let phrases = match &job.phrases {
            Some(file) => Lexicon::read(file, tokenizer).map_err(|e| format!("--phrases {e}"))?,
            None => {
                let sentences: Vec<Segment> = tokenize_documents(train_text, tokenizer).map_err(|e| corpus_err(job, e))?.into_iter().flatten().collect();
                let config = PhraseConfig::default();
                let text = WordText::new(tokenizer);
                let found = find_phrases(&sentences, &text, config);
                if found.is_empty() {
                    return Err(corpus_err(job, format!("no phrase found for --masking {} (no pair of words seen together more than {} times with a word2phrase score over {}); give them with --phrases FILE", flag_name(masking), config.min_count, config.threshold)));
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
    if let Some(file) = job.entities.as_ref().filter(|_| masking.reads_entities()) {
        let entities = Lexicon::read(file, tokenizer).map_err(|e| format!("--entities {e}"))?;
        eprintln!("entities masked whole: {}", entities.len());
        knowledge.entities = Arc::new(entities);
    }
    Ok(knowledge)
}

/// `train FAMILY --teacher DIR`: a masked-LM student of family `F` (base model `B`) distilled
/// from the fixed teacher `DIR` ([`MaskedLmDistillation`]) on masked single sequences of full
/// sentences, with `F`'s masking (or `--masking`); the student starts from the teacher's
/// layers (`--student-layers`, DistilBERT's every other one by default) or fresh
/// (`--preset`, `--config`), and is exported as the family's masked LM.
pub fn pretrain_distilled<F, B>(job: &PretrainOptions, device: burn::tensor::Device) -> Result<Pretrained, String>
where
    F: PretrainingFamily,
    B: Backbone,
    F::Model: PretrainedModel<Config = B::Config>,
{
    let job = &job.resolved()?;
    job.check()?;
    refuse_other_corruptions(job, Corruption::Masking, &format!("{} masks with --masking", F::NAME))?;
    let teacher_dir = job.teacher.as_ref().ok_or("distillation needs the teacher: --teacher DIR")?;
    let masking = job.masking.map(Masking::from).unwrap_or_else(F::masking);
    let steps = job.steps.unwrap_or(MASKED_LM_STEPS);
    let layout = layout::<SingleSequenceRecipe<F, B>>(job)?;
    let fresh_student = job.config.is_some() || job.preset.is_some();
    if fresh_student && job.student.student_layers.is_some() {
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
    let (kept_student, config) = match &job.config {
        Some(path) => (None, read_config::<B::Config>(path)?),
        None if fresh_student => (None, F::preset(job.preset(), teacher_limits.vocab_size, job.seq_len.max(64), pad).map_err(err)?),
        None => {
            let mut config = teacher_config.clone();
            let kept = job.student.kept_layers(teacher_sizes.layers)?;
            eprintln!("the student starts from the teacher's layers {}", kept.iter().map(|l| (l + 1).to_string()).collect::<Vec<_>>().join(", "));
            let student = loaded.model.clone().keep_layers(&mut config, &kept).map_err(err)?;
            (Some(student), config)
        }
    };
    let sizes = B::classifier_sizes(&config);
    let loss = job.student.loss(crate::distill::MASKED_LM_WEIGHTS, sizes.layers, teacher_sizes.layers)?;
    let limits = config.input_limits();
    if limits.vocab_size != teacher_limits.vocab_size {
        return Err(format!("the student's vocab_size is {}, the teacher's {}: the soft targets need the same vocabulary", limits.vocab_size, teacher_limits.vocab_size));
    }
    // A student of another width learns the hidden states through a projection (TinyBERT's).
    let projection = ((loss.cosine > 0.0 || loss.hidden > 0.0) && sizes.hidden_size != teacher_sizes.hidden_size).then_some([sizes.hidden_size, teacher_sizes.hidden_size]);
    if loss.attention > 0.0 && (attention_heads(&config) != attention_heads(&teacher_config) || !teacher_config.pruned_heads().is_empty()) {
        return Err("--alpha-attention: the student's and teacher's mapped layers must have the same heads".into());
    }
    for (who, max_len) in [("student", limits.max_len), ("teacher", teacher_limits.max_len)] {
        if job.seq_len > max_len {
            return Err(format!("--seq-len {} exceeds the {who}'s {max_len} positions", job.seq_len));
        }
    }

    let mut spec = RunSpec::new(job, masking_spec(job, masking)?, format!("{layout:?}"));
    spec.objective = Some(Objective::Mlm);
    spec.teacher = Some(TeacherSpec { dir: teacher_dir.clone(), student: format!("{:?}", job.student), projection });
    let out = &open_run(job, F::NAME, &spec)?;
    let (train_text, held_out_text) = read_corpus(job)?;
    let (tokenizer, tok_config) = run_tokenizer(job, out, F::tokenizer(), &train_text)?;
    // On --resume, the run's own configuration (its checkpoint is loaded by the trainer).
    let (student, config) = run_model::<ForMaskedLM<B>>(job, out, &train_device, || match kept_student {
        Some(student) => Ok((student, config)),
        None => preset_model(&train_device, Ok(config)),
    })?;
    let student = Distilled { student, projection: projection.map(|[from, to]| LinearConfig::new(from, to).init(&train_device)) };
    let teacher = burn::module::Module::no_grad(crate::pruning::without_dropout(loaded.model));
    let strategy = masking.strategy(&knowledge(job, masking, &train_text, &tokenizer, steps, out)?);
    let data = Pretraining::<ForMaskedLM<B>>::new(&train_text, &held_out_text, &tokenizer, limits.vocab_size, layout, strategy, job.batch_size, job.seed)
        .map_err(|e| corpus_err(job, e))?
        .with_static_masks(job.static_masks.and_then(std::num::NonZeroU32::new));
    eprintln!(
        "student: {}, {} layers, {} parameters (teacher: {} layers, {} parameters){}; {} training examples ({layout:?}, {masking:?} masking); loss {}; {} steps of {} x {}",
        ForMaskedLM::<B>::architecture(), sizes.layers, burn::module::Module::num_params(&student.student), teacher_sizes.layers, burn::module::Module::num_params(&teacher),
        projection.map_or(String::new(), |[from, to]| format!(", hidden states projected {from} -> {to}")),
        data.num_train_examples(), serde_json::to_string(&loss).expect("JSON"), steps, job.grad_accum, job.batch_size
    );
    let task = MaskedLmDistillation::new(data, teacher, loss, train_device.clone());
    fit_and_export(job, steps, out, &task, student, &train_device, (&tokenizer, &tok_config), |model, dir| {
        model.student.save_pretrained(&config, dir)?;
        Ok(vec![dir.to_path_buf()])
    })
}

/// `export` of a distillation run of `train FAMILY --teacher` (student `ForMaskedLM<B>`): the
/// student alone, in HF layout.
pub fn export_distilled<B: Backbone>(run: &Path, checkpoint: &Path, out: &Path, device: &burn::tensor::Device) -> Result<Vec<PathBuf>, String> {
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
pub fn refuse_masked_lm_flags(job: &PretrainOptions, instead: &str) -> Result<(), String> {
    let given = [
        (job.masking.is_some(), "--masking"),
        (job.phrases.is_some(), "--phrases"),
        (job.entities.is_some(), "--entities"),
        (job.packing.is_some(), "--packing"),
        (job.static_masks.is_some(), "--static-masks"),
    ];
    match given.iter().find(|(given, _)| *given) {
        Some((_, flag)) => Err(format!("{flag} is for the masked-LM families; {instead}")),
        None => Ok(()),
    }
}

/// Save the model of a training checkpoint (`run`, `checkpoint`) in HF layout at `out`;
/// returns the model directories written.
pub type ExportFn = fn(&Path, &Path, &Path, &burn::tensor::Device) -> Result<Vec<PathBuf>, String>;

/// Load a checkpoint of `F`'s model (config from the run) and save it in HF layout.
pub fn export_model<F: PretrainingFamily>(run: &Path, checkpoint: &Path, out: &Path, device: &burn::tensor::Device) -> Result<Vec<PathBuf>, String> {
    let config = <F::Model as PretrainedModel>::Config::from_dir(run).map_err(err)?;
    let model = burn::module::Module::try_load_file(F::Model::init(&config, device), checkpoint).map_err(err)?;
    model.export(&config, out).map_err(err)
}

/// Export the checkpoint of `step` (default: the latest) of the run `run` to HF layout
/// (config.json, model.safetensors, tokenizer files) in `out` (default: RUN/export-step-N),
/// with the export `export_of` gives for the run (its family's, for its objective).
pub fn export_checkpoint(run: &Path, step: Option<u64>, out: Option<PathBuf>, device: burn::tensor::Device, export_of: fn(&RunSpec) -> Result<ExportFn, String>) -> Result<Exported, String> {
    let checkpoints = run.join("checkpoints");
    let name = match step {
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
    let out = out.unwrap_or_else(|| run.join(format!("export-{name}")));
    let checkpoint_file = checkpoint.join("model.bpk");
    let export = export_of(&spec)?;
    let written = export(run, &checkpoint_file, &out, &device)?;
    let tokenizer_dir = run.join("tokenizer");
    let tokenizer = Tokenizer::from_dir(&tokenizer_dir).map_err(err)?;
    let tok_config = TokenizerConfig::of_dir(&tokenizer_dir).map_err(err)?;
    for dir in written {
        tokenizer.save(&dir, &tok_config).map_err(err)?;
    }
    Ok(Exported { checkpoint, export: out })
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_a_run_cannot_start_with_get_one_line_naming_the_option() {
        let base = PretrainOptions::new("bert", "data/moby-dick.txt");
        assert_eq!(base.check(), Ok(()));
        let cases: [(fn(&mut PretrainOptions), &str); 7] = [
            (|o| o.student.alpha_soft = Some(1.0), "--student-layers, --alpha-*"),
            (|o| o.batch_size = 0, "--batch-size 0"),
            (|o| o.log_every = 0, "--log-every 0"),
            (|o| o.steps = Some(0), "--steps 0"),
            (|o| o.seq_len = 4, "--seq-len 4"),
            (|o| o.held_out = 1.0, "--held-out 1"),
            (|o| o.lr = f64::INFINITY, "--lr inf"),
        ];
        for (change, named) in cases {
            let mut options = base.clone();
            change(&mut options);
            let error = options.check().unwrap_err();
            assert!(error.starts_with(named) && !error.contains('\n'), "{named}: {error}");
        }
    }

    #[test]
    fn eval_every_0_and_checkpoint_every_0_are_accepted_as_only_at_the_end() {
        let mut options = PretrainOptions::new("bert", "data/moby-dick.txt");
        options.eval_every = 0;
        options.checkpoint_every = 0;
        assert_eq!(options.check(), Ok(()));
    }
}
