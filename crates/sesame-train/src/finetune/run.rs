//! One call per fine-tuning job: [`finetune`] reads the user's labelled files, starts from a
//! checkpoint directory (or fresh weights of its architecture), trains with the shared
//! [`Trainer`], keeps the best evaluation by a metric, and exports that model in HF layout
//! with its label names and tokenizer. `cargo xtask finetune` parses its flags into
//! [`FinetuneOptions`] and calls it.
//!
//! ```no_run
//! # fn run() -> Result<(), String> {
//! use sesame_bert::Bert;
//! use sesame_train::finetune::{finetune, FinetuneOptions};
//!
//! let options = FinetuneOptions { epochs: 5.0, lr: 1e-4, ..FinetuneOptions::new("bert-tiny", "train.csv", "test.csv", "runs/sst") };
//! let result = finetune::<Bert>(&options, burn::tensor::Device::flex())?;
//! println!("accuracy {:.3}; the model is in {}", result.metrics["accuracy"], result.model.display());
//! # Ok(()) }
//! ```
//!
//! Errors are one line each, naming the file, the row or the option (as the CLI's flag:
//! `--seq-len` for [`FinetuneOptions::seq_len`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use serde::Serialize;
use sesame_layers::{supports, Backbone, Family, HfConfig, Pooling, PretrainedModel, ClassifierLayers, SpanLogits, TaskModel, TokenLogits, WeightFiles};
use sesame_pipelines::sentence_transformers::SentenceTransformerConfig;
use sesame_pipelines::AnswerOptions;
use sesame_text::labelled::{self, Columns, ProblemType, Target};
use sesame_text::tagged::{self, TagFields};
use sesame_text::{Tokenizer, TokenizerConfig};

use super::{check_loss, check_rows, Candidates, RetrievalCorpus, RowsNeeded, Embedding, EmbeddingObjective, EmbeddingTraining, LambdaWeighting, Listwise, ListwiseLoss, RerankLoss, ScoreActivation, RerankRows, RerankTraining, RERANK_METRICS, TextSet, layer_lr_decay, metric_names, Batching, EarlyExitDistillation, LabelledSet, QaSet, QuestionAnswering, SequenceClassification, TaggedSet, TokenClassification, ENTITY_METRICS, QA_METRICS, WORD_METRICS};
use crate::embedding_losses::{LossKind, Matryoshka};
use crate::{TrainConfig, TrainTask, Trainer};

/// What to learn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum FinetuneTask {
    /// Sequence classification; the labels say which kind (`run_classification.py`'s rule):
    /// strings or integers are classes, floats a regression target, lists sets of classes.
    #[default]
    Classify,
    /// Multi-label classification (a list of classes per row, or one class).
    Multilabel,
    /// Regression on a number per row.
    Regress,
    /// Token classification (named entities, parts of speech): a tag per word, from CoNLL
    /// files or JSON lines with `tokens` and `tags`.
    Tag,
    /// Extractive question answering: SQuAD's JSON (v1.1, or v2.0 with unanswerable
    /// questions) or JSON lines with `question`, `context` and `answers`.
    Qa,
    /// A sentence-embedding model (sentence-transformers' bi-encoder): rows of texts in its
    /// conventions (`anchor, positive[, negative…]`; `sentence1, sentence2, score`;
    /// `sentence1, sentence2, label`), a loss of [`crate::embedding_losses`], exported as a
    /// sentence-transformers directory.
    Embed,
    /// A reranker (sentence-transformers' cross-encoder): a sequence classifier with one logit
    /// over (query, passage) pairs, trained on `query, passage, label` rows (binary
    /// cross-entropy) or `query, positive[, negative…]` rows (multiple negatives), scored by
    /// reranking the held-out candidates.
    Rerank,
}

/// Where fine-tuning starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Init {
    /// The weights of the checkpoint.
    #[default]
    Pretrained,
    /// Fresh weights of the checkpoint's architecture (its config.json and tokenizer), drawn
    /// from the seed as transformers initialises a new model: the baseline that shows what
    /// pre-training brings.
    Random,
}

/// Where the head reads its features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeatureLayer {
    /// One encoder layer, 1-based, or negative from the top (-1: the top).
    Layer(i64),
    /// ELMo's scalar mix of the embeddings and every layer.
    Mix,
}

/// Where a labelled file keeps its texts and labels; `None` takes the default. With the `cli`
/// feature they are `--text-column`, `--text-pair-column` and `--label-column`.
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct ColumnNames {
    /// Column (field) of the text [default: text; tokens for --task tag].
    #[cfg_attr(feature = "cli", arg(long = "text-column", value_name = "TEXT_COLUMN"))]
    pub text: Option<String>,
    /// Column (field) of the second text of sentence pairs.
    #[cfg_attr(feature = "cli", arg(long = "text-pair-column", value_name = "TEXT_PAIR_COLUMN"))]
    pub pair: Option<String>,
    /// Column (field) of the label [default: label; tags for --task tag].
    #[cfg_attr(feature = "cli", arg(long = "label-column", value_name = "LABEL_COLUMN"))]
    pub label: Option<String>,
}

impl ColumnNames {
    /// The columns of a classification file, defaults filled in.
    pub fn columns(&self) -> Columns {
        let defaults = Columns::default();
        Columns { text: self.text.clone().unwrap_or(defaults.text), pair: self.pair.clone(), label: self.label.clone().unwrap_or(defaults.label) }
    }

    /// The second texts of `rows`, when the file has pairs.
    pub fn pairs<'a>(&self, rows: &'a [labelled::LabelledRow]) -> Option<Vec<&'a str>> {
        self.pair.as_ref().map(|_| rows.iter().map(|r| r.pair.as_deref().unwrap_or_default()).collect())
    }
}

/// A fine-tuning job: the checkpoint, the data, the run directory and the optimisation. Build
/// it with [`FinetuneOptions::new`] and change the fields that differ from the defaults
/// (transformers' `Trainer`'s, as the CLI's). With the `cli` feature it is `cargo xtask
/// finetune`'s flags (`clap::Args`; names as `train`'s where they overlap), each default
/// written once, in `new`.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct FinetuneOptions {
    /// The HF checkpoint to start from (config.json, weights, tokenizer files).
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::cli::model_dir))]
    pub model: PathBuf,
    /// `random`: train the architecture of --model (its config.json and tokenizer) from fresh
    /// weights, drawn from --seed as transformers initialises a new model (its weights are not
    /// read): the baseline that shows what pre-training brings [default: pretrained].
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "pretrained", hide_default_value = true))]
    pub init: Init,
    /// What to learn.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "classify"))]
    pub task: FinetuneTask,
    /// Training rows: CSV or TSV with a header, or JSON lines (CoNLL for --task tag, SQuAD's
    /// JSON for qa; sentence-transformers' columns for embed: `anchor,positive[,negative…]`,
    /// `sentence1,sentence2,score` or `sentence1,sentence2,label`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub train: PathBuf,
    /// Evaluation rows, in the same form; for --task embed also a retrieval set, a directory in
    /// BEIR's layout (queries.jsonl, corpus.jsonl, qrels/dev.tsv or test.tsv), scored over its
    /// whole corpus.
    #[cfg_attr(feature = "cli", arg(long))]
    pub eval: PathBuf,
    /// Run directory: checkpoints, metrics.jsonl, the exported model in `model/`.
    #[cfg_attr(feature = "cli", arg(long))]
    pub out: PathBuf,
    /// The columns of the rows.
    #[cfg_attr(feature = "cli", command(flatten))]
    pub columns: ColumnNames,
    /// Passes over the training rows.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().epochs, conflicts_with = "steps", value_parser = crate::cli::positive_epochs))]
    pub epochs: f64,
    /// Optimizer steps, instead of --epochs.
    #[cfg_attr(feature = "cli", arg(long, value_parser = clap::value_parser!(u64).range(1..)))]
    pub steps: Option<u64>,
    /// Rows per batch.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().batch_size, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536)))]
    pub batch_size: usize,
    /// Batches per optimizer step (gradients averaged).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().grad_accum, value_parser = clap::value_parser!(u64).range(1..)))]
    pub grad_accum: u64,
    /// Peak learning rate.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().lr))]
    pub lr: f64,
    /// Tokens per row at most (longer texts are truncated), special tokens included
    /// [default: 128 (384 for qa), or the model's positions if fewer].
    #[cfg_attr(feature = "cli", arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(4..=65_536)))]
    pub seq_len: Option<usize>,
    /// Tokens shared by consecutive windows of a sentence or context longer than --seq-len
    /// (--task tag, qa) [default: a quarter of --seq-len; a third for qa, as run_qa.py's 128 of 384].
    #[cfg_attr(feature = "cli", arg(long))]
    pub stride: Option<usize>,
    /// Longest answer in tokens (--task qa).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().max_answer_len, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536)))]
    pub max_answer_len: usize,
    /// Start and end candidates per window (--task qa).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().n_best, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536)))]
    pub n_best: usize,
    /// How far "no answer" must score ahead of the best span to win, for data with
    /// unanswerable questions (--task qa).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().null_threshold, allow_negative_numbers = true, value_parser = crate::cli::finite_f32))]
    pub null_threshold: f32,
    /// Warm-up steps (then linear decay to 0).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().warmup))]
    pub warmup: u64,
    /// AdamW weight decay (not on biases and LayerNorm).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().weight_decay))]
    pub weight_decay: f64,
    /// Global gradient-norm clip (0: none).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().max_grad_norm))]
    pub max_grad_norm: f64,
    /// Layer-wise learning-rate decay (ELECTRA's fine-tuning recipe, 0.8 for its base model):
    /// the head at --lr, the top layer at --lr × D², each layer below D times the one above,
    /// the embeddings at --lr × D^(layers+2).
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::cli::decay_factor))]
    pub layer_lr_decay: Option<f64>,
    /// Evaluate (and checkpoint) every N steps; 0 evaluates and checkpoints only at the end
    /// [default: every epoch].
    #[cfg_attr(feature = "cli", arg(long))]
    pub eval_every: Option<u64>,
    /// The held-out metric that picks the model exported [default: accuracy; f1_micro for
    /// multi-label; mse for regression].
    #[cfg_attr(feature = "cli", arg(long))]
    pub metric: Option<String>,
    /// Stop after this many evaluations without a better --metric (0: never).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().patience))]
    pub patience: u64,
    /// Feature extraction: keep the pre-trained embeddings and encoder layers fixed and train
    /// the task head alone (with BERT's and ALBERT's pooler, the dense layer of their head).
    #[cfg_attr(feature = "cli", arg(long))]
    pub freeze: bool,
    /// Read the features from encoder layer N (1: the lowest; -1: the top, -2: the one below
    /// it): the layers above N are dropped from training and from the exported model, whose
    /// config says N layers. With --freeze, a fixed feature extractor of that layer. `mix`: ELMo's
    /// scalar mix, learned softmax weights over the embeddings and every layer (classifiers and
    /// taggers of the encoder families; an export transformers cannot run).
    #[cfg_attr(feature = "cli", arg(long, allow_negative_numbers = true, value_parser = crate::cli::feature_layer))]
    pub feature_layer: Option<FeatureLayer>,
    /// FastBERT's early exit: --model is a fine-tuned classifier, kept fixed, whose head teaches
    /// a small classifier after every layer below the top by self-distillation (the labels of
    /// --train are not read); then `cargo xtask classify --speed S` stops each text at the first
    /// confident layer. Single-label classifiers of the encoder families.
    #[cfg_attr(feature = "cli", arg(long, conflicts_with_all = ["freeze", "feature_layer", "layer_lr_decay"]))]
    pub early_exit: bool,
    /// Random seed (head initialisation, shuffling, dropout).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().seed))]
    pub seed: u64,
    /// Continue the run in --out from its latest checkpoint.
    #[cfg_attr(feature = "cli", arg(long))]
    pub resume: bool,
    /// Micro-batches each batch is split into, trained at once on a CPU backend's threads, their
    /// losses weighted so that the gradient is the whole batch's (at most --batch-size). The
    /// dropout masks follow it: --seed reproduces a run with the same --micro-batches.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults().micro_batches, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536)))]
    pub micro_batches: usize,
    /// Micro-batches trained at once on a CPU backend (default: its cores).
    #[cfg_attr(feature = "cli", arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024)))]
    pub threads: Option<usize>,
    /// Stop after this step without a final checkpoint (simulates a kill; for testing resume).
    #[cfg_attr(feature = "cli", arg(long, hide = true))]
    pub stop_after: Option<u64>,
    /// Draw a progress bar on a terminal (with the `cli` feature) instead of log lines
    /// [`FinetuneOptions::new`: no; the command line: unless `--quiet`].
    #[cfg_attr(feature = "cli", arg(long = "quiet", action = clap::ArgAction::SetFalse, help = "Hide the progress bar (log lines instead)"))]
    pub progress: bool,
    /// The loss of --task embed or rerank, by name or sentence-transformers' class name
    /// [default: by the training rows. embed: mnrl without a label or score column,
    /// online-contrastive with labels 0 and 1, cosent with scores; rerank: bce with labels,
    /// lambda with ranked lists, else mnrl].
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub loss: Option<LossKind>,
    /// The loss's scale: the cosine's multiplier (embed: mnrl, symmetric-mnrl, cosent)
    /// [default: 20], or the sigmoid's (rerank: mnrl) [default: 10].
    #[cfg_attr(feature = "cli", arg(long))]
    pub scale: Option<f64>,
    /// The loss's margin (contrastive and online-contrastive [default: 0.5], triplet [default: 5]).
    #[cfg_attr(feature = "cli", arg(long))]
    pub margin: Option<f64>,
    /// Matryoshka embeddings (--task embed): the loss again on each of these leading
    /// dimensions, renormalised, summed (`384,256,128,64`), so that `embed --dimensions N`
    /// keeps working when truncated.
    #[cfg_attr(feature = "cli", arg(long, value_delimiter = ',', value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536)))]
    pub matryoshka_dims: Vec<usize>,
    /// Pooling of a plain checkpoint's token states for --task embed: mean, cls or max
    /// [default: mean; a sentence-transformers directory keeps its own].
    #[cfg_attr(feature = "cli", arg(long))]
    pub pooling: Option<Pooling>,
    /// Passages of the batch's other rows drawn as each query's negatives (--task rerank
    /// --loss mnrl) [default: 4].
    #[cfg_attr(feature = "cli", arg(long))]
    pub num_negatives: Option<usize>,
    /// Texts embedded and back-propagated at a time by a cached loss (--loss cached-mnrl or
    /// cached-symmetric-mnrl: GradCache, a large --batch-size in a mini-batch's memory)
    /// [default: 32].
    #[cfg_attr(feature = "cli", arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536)))]
    pub mini_batch_size: Option<usize>,
    /// LambdaLoss's weighting of a pair of documents (--task rerank --loss lambda), by name or
    /// sentence-transformers' class name [default: ndcg2pp].
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub lambda_weighting: Option<LambdaWeighting>,
    /// LambdaLoss's and RankNet's k (--task rerank): only pairs with a document among the
    /// first k as the model ranks them [default: every pair].
    #[cfg_attr(feature = "cli", arg(long))]
    pub lambda_k: Option<usize>,
    /// LambdaLoss's and RankNet's sigma (--task rerank): the slope of the pairwise logistic
    /// [default: 1].
    #[cfg_attr(feature = "cli", arg(long))]
    pub sigma: Option<f64>,
    /// ListMLE and PListMLE (--task rerank): sort each list's documents by label before the
    /// likelihood of their order, instead of taking them as given, best first
    /// (sentence-transformers' respect_input_order=False).
    #[cfg_attr(feature = "cli", arg(long))]
    pub sort_by_label: bool,
    /// What the listwise losses (--task rerank) apply to the logits first, by name or
    /// sentence-transformers' class name: identity or sigmoid (their activation_fn)
    /// [default: identity].
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub activation_fn: Option<ScoreActivation>,
}

/// [`FinetuneOptions::new`]'s values, which the flags show and take.
#[cfg(feature = "cli")]
fn defaults() -> FinetuneOptions {
    FinetuneOptions::new("", "", "", "")
}

impl FinetuneOptions {
    /// Fine-tune `model` on `train`, evaluate on `eval`, write the run to `out`; every other
    /// option at its default.
    pub fn new(model: impl Into<PathBuf>, train: impl Into<PathBuf>, eval: impl Into<PathBuf>, out: impl Into<PathBuf>) -> Self {
        Self {
            model: model.into(),
            init: Init::Pretrained,
            task: FinetuneTask::Classify,
            train: train.into(),
            eval: eval.into(),
            out: out.into(),
            columns: ColumnNames::default(),
            epochs: 3.0,
            steps: None,
            batch_size: 8,
            grad_accum: 1,
            lr: 5e-5,
            seq_len: None,
            stride: None,
            max_answer_len: 30,
            n_best: 20,
            null_threshold: 0.0,
            warmup: 0,
            weight_decay: 0.0,
            max_grad_norm: 1.0,
            layer_lr_decay: None,
            eval_every: None,
            metric: None,
            patience: 0,
            freeze: false,
            feature_layer: None,
            early_exit: false,
            seed: 42,
            resume: false,
            micro_batches: 1,
            threads: None,
            stop_after: None,
            progress: false,
            loss: None,
            scale: None,
            margin: None,
            matryoshka_dims: Vec::new(),
            pooling: None,
            num_negatives: None,
            mini_batch_size: None,
            lambda_weighting: None,
            lambda_k: None,
            sigma: None,
            sort_by_label: false,
            activation_fn: None,
        }
    }

    /// These options with `model` a directory: a hub id (`org/name[@revision]`) is found in the
    /// local HuggingFace cache.
    pub fn resolved(&self) -> Result<Self, String> {
        Ok(Self { model: sesame_layers::hub::resolve_path(&self.model).map_err(|e| e.to_string())?, ..self.clone() })
    }

    /// The options a run cannot start with, as one line naming the option.
    pub(crate) fn check(&self) -> Result<(), String> {
        let positive = |value: u64, flag: &str| if value == 0 { Err(format!("{flag} 0: must be at least 1")) } else { Ok(()) };
        if !(self.epochs > 0.0 && self.epochs.is_finite()) {
            return Err(format!("--epochs {}: not a number of passes (a finite number > 0)", self.epochs));
        }
        positive(self.batch_size as u64, "--batch-size")?;
        positive(self.grad_accum, "--grad-accum")?;
        positive(self.micro_batches as u64, "--micro-batches")?;
        positive(self.max_answer_len as u64, "--max-answer-len")?;
        positive(self.n_best as u64, "--n-best")?;
        if let Some(steps) = self.steps {
            positive(steps, "--steps")?;
        }
        if let Some(n) = self.seq_len.filter(|&n| n < 4) {
            return Err(format!("--seq-len {n}: too short for a row (4 tokens at least)"));
        }
        for (value, flag) in [(self.lr, "--lr"), (self.weight_decay, "--weight-decay"), (self.max_grad_norm, "--max-grad-norm")] {
            if !(value >= 0.0 && value.is_finite()) {
                return Err(format!("{flag} {value}: not a finite number >= 0"));
            }
        }
        if !self.null_threshold.is_finite() {
            return Err(format!("--null-threshold {}: not a finite number", self.null_threshold));
        }
        if let Some(d) = self.layer_lr_decay.filter(|d| !(*d > 0.0 && *d <= 1.0)) {
            return Err(format!("--layer-lr-decay {d}: not a factor in (0, 1]"));
        }
        // The flags of one task, refused elsewhere.
        let only = |task: FinetuneTask, flags: &[(bool, &str)]| match flags.iter().find(|(set, _)| *set) {
            Some((_, flag)) if self.task != task => Err(format!("{flag}: for --task {} only", format!("{task:?}").to_lowercase())),
            _ => Ok(()),
        };
        only(FinetuneTask::Embed, &[(self.margin.is_some(), "--margin"), (!self.matryoshka_dims.is_empty(), "--matryoshka-dims"), (self.pooling.is_some(), "--pooling")])?;
        only(
            FinetuneTask::Rerank,
            &[
                (self.num_negatives.is_some(), "--num-negatives"),
                (self.lambda_weighting.is_some(), "--lambda-weighting"),
                (self.lambda_k.is_some(), "--lambda-k"),
                (self.sigma.is_some(), "--sigma"),
                (self.sort_by_label, "--sort-by-label"),
                (self.activation_fn.is_some(), "--activation-fn"),
            ],
        )?;
        if self.lambda_weighting.is_some() && self.loss != Some(LossKind::Lambda) {
            return Err("--lambda-weighting: for --loss lambda only (LambdaLoss)".into());
        }
        if let Some(k) = self.lambda_k {
            positive(k as u64, "--lambda-k")?;
        }
        if let Some(sigma) = self.sigma.filter(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(format!("--sigma {sigma}: not a positive number"));
        }
        if let Some(mini) = self.mini_batch_size {
            positive(mini as u64, "--mini-batch-size")?;
            if !self.loss.is_some_and(LossKind::cached) {
                return Err(format!("--mini-batch-size {mini}: for a cached loss only (--loss cached-mnrl or cached-symmetric-mnrl)"));
            }
        }
        if !matches!(self.task, FinetuneTask::Embed | FinetuneTask::Rerank) {
            if let Some((_, flag)) = [(self.loss.is_some(), "--loss"), (self.scale.is_some(), "--scale")].into_iter().find(|(set, _)| *set) {
                return Err(format!("{flag}: for --task embed and rerank only"));
            }
        }
        if matches!(self.task, FinetuneTask::Embed | FinetuneTask::Rerank) {
            let task = format!("{:?}", self.task).to_lowercase();
            let frozen = self.task == FinetuneTask::Embed && self.freeze;
            let flag = [(frozen, "--freeze"), (self.early_exit, "--early-exit"), (self.feature_layer == Some(FeatureLayer::Mix), "--feature-layer mix"), (self.micro_batches > 1, "--micro-batches")]
                .into_iter()
                .find_map(|(set, flag)| set.then_some(flag));
            if let Some(flag) = flag {
                return Err(format!("{flag}: does not apply to --task {task} (its loss compares a batch's rows with each other: the batch is trained whole)"));
            }
        }
        if self.early_exit && (self.freeze || self.feature_layer.is_some() || self.layer_lr_decay.is_some()) {
            return Err("--early-exit trains exit classifiers on a fixed model: --freeze, --feature-layer and --layer-lr-decay do not apply".into());
        }
        Ok(())
    }
}

/// What a fine-tuning run gives: the exported model and its held-out scores.
#[derive(Clone, Debug, Serialize)]
pub struct Finetuned {
    /// Every held-out metric of the exported model's evaluation.
    pub metrics: BTreeMap<String, f64>,
    /// The metric that picked it.
    pub metric: String,
    /// The step it was taken at.
    pub step: u64,
    /// The run's steps.
    pub steps: u64,
    /// Seconds this process trained, its evaluations included (transformers' `train_runtime`).
    pub train_seconds: f64,
    /// Seconds of held-out evaluations.
    pub eval_seconds: f64,
    /// Seconds of writing checkpoints.
    pub checkpoint_seconds: f64,
    /// The exported model: an HF directory with its tokenizer (`out/model`).
    pub model: PathBuf,
    /// The step `stop_after` ended the run at, without a final checkpoint or export.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_after: Option<u64>,
}

/// The labelled data of a run, read and checked before any model is loaded.
pub(crate) struct FinetuneData {
    pub(crate) problem: ProblemType,
    /// Class names (none for regression).
    classes: Vec<String>,
    /// The training rows and their targets.
    train: (Vec<labelled::LabelledRow>, Vec<Target>),
    /// The evaluation rows and their targets.
    eval: (Vec<labelled::LabelledRow>, Vec<Target>),
}

/// Read `--train` and `--eval`: the label kind from the training file (or `--task`), the
/// classes from the training file, every evaluation label checked against them.
pub(crate) fn read_data(job: &FinetuneOptions) -> Result<FinetuneData, String> {
    let columns = job.columns.columns();
    let train = labelled::read_rows(&job.train, &columns).map_err(|e| e.to_string())?;
    let eval = labelled::read_rows(&job.eval, &columns).map_err(|e| e.to_string())?;
    let found = labelled::problem_type(&job.train, &train).map_err(|e| e.to_string())?;
    labelled::problem_type(&job.eval, &eval).map_err(|e| e.to_string())?;
    let problem = match (job.task, found) {
        (FinetuneTask::Classify, found) => found,
        (FinetuneTask::Multilabel, ProblemType::MultiLabelClassification | ProblemType::SingleLabelClassification) => ProblemType::MultiLabelClassification,
        (FinetuneTask::Regress, ProblemType::Regression) => ProblemType::Regression,
        (FinetuneTask::Regress, ProblemType::SingleLabelClassification) if train.iter().all(|r| matches!(r.label, labelled::RawLabel::Integer(_))) => ProblemType::Regression,
        // `finetune` reads tagged and question files elsewhere: only `distill` comes here with them.
        (task @ (FinetuneTask::Tag | FinetuneTask::Qa), _) => {
            let task = if task == FinetuneTask::Tag { "tag" } else { "qa" };
            return Err(format!("distill --task {task}: distill teaches sequence classifiers (--task classify, multilabel or regress); taggers and QA models are not distilled yet"));
        }
        (task, found) => return Err(format!("--task {task:?}: the labels of {} are for {}", job.train.display(), found.hf_name()).to_lowercase()),
    };
    let classes = if problem == ProblemType::Regression { Vec::new() } else { labelled::class_names(&train) };
    if problem == ProblemType::SingleLabelClassification && classes.len() < 2 {
        return Err(format!("{}: a classifier needs at least two classes; the labels hold {classes:?}", job.train.display()));
    }
    let train_targets = labelled::targets(&job.train, &train, problem, &classes).map_err(|e| e.to_string())?;
    let eval_targets = labelled::targets(&job.eval, &eval, problem, &classes).map_err(|e| e.to_string())?;
    Ok(FinetuneData { problem, train: (train, train_targets), eval: (eval, eval_targets), classes })
}

/// The metric that picks the exported model (`--metric`, else `default`, checked against
/// `names`), and whether larger is better.
pub(crate) fn best_metric(job: &FinetuneOptions, what: &str, names: &[&str], default: &str) -> Result<(String, bool), String> {
    let name = job.metric.clone().unwrap_or_else(|| default.to_string());
    if !names.contains(&name.as_str()) {
        return Err(format!("--metric {name}: {what} reports {}", names.join(", ")));
    }
    let lower_is_better = name.ends_with("loss") || name == "mse" || name == "mae";
    Ok((name, !lower_is_better))
}

/// Fine-tune `job.model`, a checkpoint of family `F` (`finetune::<Bert>`), for `job.task`:
/// the family's sequence classifier, token classifier or extractive-QA model, as [`Family`]
/// names them. A task the family has no model for is refused by name.
pub fn finetune<F: Family>(job: &FinetuneOptions, device: Device) -> Result<Finetuned, String> {
    let job = &job.resolved()?;
    job.check()?;
    match job.task {
        FinetuneTask::Tag if supports::<F::ForTokenClassification>() => finetune_tagger::<F::ForTokenClassification>(job, device),
        FinetuneTask::Qa if supports::<F::ForQuestionAnswering>() => finetune_qa::<F::ForQuestionAnswering>(job, device),
        FinetuneTask::Embed if supports::<F::Encoder>() => finetune_embedding::<F::Encoder>(job, device),
        FinetuneTask::Rerank if supports::<F::ForSequenceClassification>() => finetune_rerank::<F::ForSequenceClassification>(job, device),
        FinetuneTask::Classify | FinetuneTask::Multilabel | FinetuneTask::Regress if supports::<F::ForSequenceClassification>() => {
            finetune_classifier::<F::ForSequenceClassification>(job, device)
        }
        task => Err(unsupported(task, F::NAME)),
    }
}

/// The refusal of `task` by a family (`family`) without a model for it.
fn unsupported(task: FinetuneTask, family: &str) -> String {
    let (flag, head) = match task {
        FinetuneTask::Tag => ("--task tag", "token-classification"),
        FinetuneTask::Qa => ("--task qa", "question-answering"),
        FinetuneTask::Rerank => ("--task rerank", "sequence-classification"),
        FinetuneTask::Embed => {
            return format!("--task embed: {family} models are not sentence encoders (as for `embed`: BERT, RoBERTa, ALBERT, ELECTRA and UniLM are)");
        }
        _ => ("--task", "sequence-classification"),
    };
    format!("{flag}: {family} models have no {head} head (transformers has none for them either)")
}

/// How the training rows are cut: `--batch-size` rows a batch, split into `--micro-batches`.
pub(crate) fn batching(job: &FinetuneOptions) -> Batching {
    Batching { batch_size: job.batch_size, parts: job.micro_batches.min(job.batch_size).max(1), seed: job.seed }
}

/// The checkpoint's tokenizer and config, and the window length of `--seq-len`.
pub(crate) fn load_start<M: TaskModel>(job: &FinetuneOptions) -> Result<(Tokenizer, M::Config, usize), String> {
    let tokenizer = Tokenizer::from_dir(&job.model).map_err(|e| format!("{}: {e}", job.model.display()))?;
    let config = <M::Config as HfConfig>::from_dir(&job.model).map_err(|e| e.to_string())?;
    let limits = config.input_limits();
    let seq_len = match job.seq_len {
        Some(n) if n > limits.max_len => return Err(format!("--seq-len {n} exceeds the model's {} positions", limits.max_len)),
        Some(n) => n,
        None => (if job.task == FinetuneTask::Qa { 384 } else { 128 }).min(limits.max_len),
    };
    Ok((tokenizer, config, seq_len))
}

/// The held-out metric that picks the model exported when `--metric` is not given.
pub(crate) fn default_metric(problem: ProblemType) -> &'static str {
    match problem {
        ProblemType::SingleLabelClassification => "accuracy",
        ProblemType::MultiLabelClassification => "f1_micro",
        ProblemType::Regression => "mse",
    }
}

/// `finetune --task classify|multilabel|regress`.
fn finetune_classifier<M: TaskModel<Output = ClassifierLayers>>(job: &FinetuneOptions, device: Device) -> Result<Finetuned, String> {
    let data = read_data(job)?;
    let default = default_metric(data.problem);
    if job.early_exit {
        return early_exit::<M>(job, data, device);
    }
    let metric = best_metric(job, data.problem.hf_name(), metric_names(data.problem), default)?;
    let (tokenizer, mut config, seq_len) = load_start::<M>(job)?;
    set_labels(config.labels_mut(), &data.classes, data.problem.hf_name());
    let encode = |(rows, targets): (Vec<labelled::LabelledRow>, Vec<Target>), path: &Path| {
        let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        let pairs = job.columns.pairs(&rows);
        LabelledSet::encode(&tokenizer, &texts, pairs.as_deref(), targets, seq_len).map_err(|e| format!("{}: {e}", path.display()))
    };
    let (train, eval) = (encode(data.train, &job.train)?, encode(data.eval, &job.eval)?);
    let rows = format!("{} training rows, {} evaluation rows", train.len(), eval.len());
    let num_labels = data.classes.len().max(1);
    let task = SequenceClassification::<M>::new(train, eval, tokenizer.clone(), data.problem, num_labels, batching(job));
    let what = format!("{rows}, {} {}", data.problem.hf_name(), if data.classes.is_empty() { String::new() } else { format!("over {:?}", data.classes) });
    let per_epoch = task.batches_per_epoch();
    let run = Run { job, device, tokenizer: &tokenizer, metric, per_epoch, what, task_name: data.problem.hf_name(), labels: &data.classes, save_beside: None };
    run.fit_and_export(&task, config, |model, device| {
        let predictions = held_out_predictions(&task, model, device);
        Ok(per_class(task.report(&predictions)))
    })
}

/// `finetune --early-exit`: FastBERT's self-distillation of exit classifiers added to the
/// fine-tuned classifier `--model`, its own labels kept.
fn early_exit<M: TaskModel<Output = ClassifierLayers>>(job: &FinetuneOptions, data: FinetuneData, device: Device) -> Result<Finetuned, String> {
    let name = M::architecture();
    if job.init == Init::Random {
        return Err("--init random: --early-exit distils the fine-tuned classifier --model into exit classifiers; its weights are needed".into());
    }
    if !M::EARLY_EXIT {
        return Err(format!("--early-exit: {name} cannot stop early (exit classifiers need an encoder run a layer at a time: BERT, RoBERTa, ALBERT, ELECTRA, UniLM)"));
    }
    if job.metric.as_deref().is_some_and(|m| m != "loss") {
        return Err("--early-exit: the exported classifiers are those of the lowest held-out distillation loss (--metric loss)".into());
    }
    let (tokenizer, mut config, seq_len) = load_start::<M>(job)?;
    let labels = config.labels().clone();
    if labels.early_exit.is_some() {
        return Err(format!("--early-exit: {} already has exit classifiers (config `sesame_early_exit`); start from the classifier without them", job.model.display()));
    }
    if let Some(layers) = config.clone().num_hidden_layers_mut().map(|n| *n).filter(|&n| n < 2) {
        return Err(format!("--early-exit: {} has {layers} layer; exit classifiers go below the top layer", job.model.display()));
    }
    let (train, eval, classes) = sets_of_the_model("--early-exit", job, &data, &tokenizer, &labels, seq_len, &[ProblemType::SingleLabelClassification])?;
    let what = format!("{} training rows (their labels unread), {} evaluation rows, {} classes; exit classifiers after layers below the top, distilled from the head", train.len(), eval.len(), classes.len());
    config.labels_mut().early_exit = Some(sesame_layers::EarlyExitConfig::default());
    let rows = SequenceClassification::<M>::new(train, eval, tokenizer.clone(), data.problem, classes.len(), batching(job));
    let task = EarlyExitDistillation::new(rows);
    let per_epoch = task.batches_per_epoch();
    let run = Run { job, device, tokenizer: &tokenizer, metric: ("loss".into(), false), per_epoch, what, task_name: "single_label_classification", labels: &classes, save_beside: None };
    // Fine steps near 0, where most rows already stop low.
    let speeds: Vec<f64> = [0.0, 0.01, 0.02, 0.05].into_iter().chain((1..=10).map(|i| i as f64 / 10.0)).collect();
    let prepare = |model: M, _: &mut M::Config, loaded: &sesame_layers::LoadReport| {
        if !job.resume && loaded.initialized.iter().any(|name| !name.contains("early_exit.")) {
            return Err(format!("--early-exit: {} is not a fine-tuned classifier (its head is not in the weights); fine-tune it first", job.model.display()));
        }
        // The backbone and head are the teacher: fixed, and without dropout, so that the
        // targets are what the model predicts.
        Ok(super::freeze_all_but_exits(crate::pruning::without_dropout(model)))
    };
    run.fit_and_export_with(&task, config, prepare, |model, device| {
        let predictions = held_out_predictions(&task, model, device);
        let mut fields = per_class(serde_json::Value::Null);
        if let Some(curve) = task.curve(&predictions, &speeds) {
            let path = job.out.join("speed_curve.svg");
            let line = curve.iter().map(|p| (p.mean_layers, p.accuracy)).collect();
            let svg = crate::plots::xy_svg("early exit: held-out accuracy against layers run (--speed 0 to 1)", "mean layers run", "accuracy", &[("exit".into(), line)])
                .map_err(|e| format!("{}: {e}", path.display()))?;
            sesame_layers::fs::write_atomic(&path, svg.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            fields.insert("speed_curve".into(), serde_json::to_value(curve).expect("JSON"));
        }
        Ok(fields)
    })
}

/// The rows of `data` labelled with the classes of the fine-tuned classifier whose labels are
/// `labels` (not the files' order), encoded: the training and evaluation sets, and the classes
/// (none for regression). The data and the model must be of one of `problems`; `what` names
/// the command or flag in errors.
pub(crate) fn sets_of_the_model(
    what: &str,
    job: &FinetuneOptions,
    data: &FinetuneData,
    tokenizer: &Tokenizer,
    labels: &sesame_layers::hparams::LabelConfig,
    seq_len: usize,
    problems: &[ProblemType],
) -> Result<(LabelledSet, LabelledSet, Vec<String>), String> {
    if !problems.contains(&data.problem) {
        let needed: Vec<&str> = problems.iter().map(|p| p.hf_name()).collect();
        return Err(format!("{what}: the labels of {} are for {}; {} is needed", job.train.display(), data.problem.hf_name(), needed.join(" or ")));
    }
    let problem = data.problem.hf_name();
    let fine_tuned = match data.problem {
        ProblemType::Regression => labels.problem_type.as_deref() == Some(problem),
        _ => labels.problem_type.as_deref().is_none_or(|p| p == problem) && labels.id2label.is_some(),
    };
    if !fine_tuned {
        let kind = match data.problem {
            ProblemType::SingleLabelClassification => "single-label classifier",
            ProblemType::MultiLabelClassification => "multi-label classifier",
            ProblemType::Regression => "regression model",
        };
        let problem_type = labels.problem_type.as_deref().map_or("no problem_type".to_string(), |p| format!("problem_type {p}"));
        let id2label = if labels.id2label.is_some() { "an id2label" } else { "no id2label" };
        return Err(format!("{what}: {} is not a fine-tuned {kind} (its config.json has {problem_type} and {id2label}); fine-tune it first", job.model.display()));
    }
    let classes: Vec<String> = match data.problem {
        ProblemType::Regression => Vec::new(),
        _ => (0..labels.count(2)).map(|i| labels.name(i)).collect(),
    };
    let encode = |rows: &[labelled::LabelledRow], path: &Path| {
        let targets = labelled::targets(path, rows, data.problem, &classes).map_err(|e| e.to_string())?;
        let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        let pairs = job.columns.pairs(rows);
        LabelledSet::encode(tokenizer, &texts, pairs.as_deref(), targets, seq_len).map_err(|e| format!("{}: {e}", path.display()))
    };
    Ok((encode(&data.train.0, &job.train)?, encode(&data.eval.0, &job.eval)?, classes))
}

/// `finetune --task tag`.
fn finetune_tagger<M: TaskModel<Output = TokenLogits>>(job: &FinetuneOptions, device: Device) -> Result<Finetuned, String> {
    let fields = TagFields {
        tokens: job.columns.text.clone().unwrap_or_else(|| TagFields::default().tokens),
        tags: job.columns.label.clone().unwrap_or_else(|| TagFields::default().tags),
    };
    let train = tagged::read_sentences(&job.train, &fields).map_err(|e| e.to_string())?;
    let eval = tagged::read_sentences(&job.eval, &fields).map_err(|e| e.to_string())?;
    let names = tagged::tag_names(&train);
    if names.len() < 2 {
        return Err(format!("{}: a tagger needs at least two tags; the sentences hold {names:?}", job.train.display()));
    }
    let train_tags = tagged::tag_ids(&job.train, &train, &names).map_err(|e| e.to_string())?;
    let eval_tags = tagged::tag_ids(&job.eval, &eval, &names).map_err(|e| e.to_string())?;
    let entities = tagged::are_entity_tags(&names);
    let metric = if entities {
        best_metric(job, "token classification with entity tags", ENTITY_METRICS, "f1")?
    } else {
        best_metric(job, "token classification with word classes", WORD_METRICS, "accuracy")?
    };
    let (tokenizer, mut config, seq_len) = load_start::<M>(job)?;
    let stride = job.stride.unwrap_or(seq_len / 4);
    set_labels(config.labels_mut(), &names, "token_classification");
    config.labels_mut().problem_type = None;
    let encode = |sentences: &[tagged::TaggedSentence], tags: Vec<Vec<usize>>, path: &Path| {
        let words: Vec<Vec<&str>> = sentences.iter().map(|s| s.tokens.iter().map(String::as_str).collect()).collect();
        TaggedSet::encode(&tokenizer, &words, tags, seq_len, stride).map_err(|e| format!("{}: {e} (--seq-len {seq_len}, --stride {stride})", path.display()))
    };
    let (train_set, eval_set) = (encode(&train, train_tags, &job.train)?, encode(&eval, eval_tags, &job.eval)?);
    let what = format!(
        "{} training sentences in {} windows, {} evaluation sentences in {} windows, {} tags",
        train.len(), train_set.len(), eval.len(), eval_set.len(), names.len()
    );
    let task = TokenClassification::<M>::new(train_set, eval_set, tokenizer.clone(), names.clone(), entities, batching(job));
    let per_epoch = task.batches_per_epoch();
    let run = Run { job, device, tokenizer: &tokenizer, metric, per_epoch, what, task_name: "token_classification", labels: &names, save_beside: None };
    run.fit_and_export(&task, config, |model, device| {
        let predictions = held_out_predictions(&task, model, device);
        Ok(per_class(task.scores(&predictions).map_or(serde_json::Value::Null, |(_, per_class)| serde_json::json!({ "scores": per_class }))))
    })
}

/// `finetune --task qa`.
fn finetune_qa<M: TaskModel<Output = SpanLogits>>(job: &FinetuneOptions, device: Device) -> Result<Finetuned, String> {
    let train = sesame_text::squad::read_questions(&job.train).map_err(|e| e.to_string())?;
    let eval = sesame_text::squad::read_questions(&job.eval).map_err(|e| e.to_string())?;
    let metric = best_metric(job, "question answering", QA_METRICS, "f1")?;
    let (tokenizer, config, seq_len) = load_start::<M>(job)?;
    let stride = job.stride.unwrap_or(seq_len / 3);
    // SQuAD 2.0: questions without an answer allow "no answer" (run_qa's --version_2_with_negative).
    let allow_no_answer = train.iter().chain(&eval).any(|x| x.answers.is_empty());
    let options = AnswerOptions { n_best: job.n_best, max_answer_len: job.max_answer_len, allow_no_answer, null_threshold: job.null_threshold };
    let (train_questions, eval_questions) = (train.len(), eval.len());
    let encode = |examples, path: &Path| QaSet::encode(&tokenizer, examples, seq_len, stride).map_err(|e| format!("{}: {e} (--seq-len {seq_len}, --stride {stride})", path.display()));
    let (train_set, eval_set) = (encode(train, &job.train)?, encode(eval, &job.eval)?);
    let what = format!(
        "{train_questions} training questions in {} windows, {eval_questions} evaluation questions in {} windows{}",
        train_set.len(), eval_set.len(), if allow_no_answer { ", unanswerable questions allowed (SQuAD 2.0)" } else { "" }
    );
    let task = QuestionAnswering::<M>::new(train_set, eval_set, tokenizer.clone(), options, batching(job));
    let per_epoch = task.batches_per_epoch();
    let run = Run { job, device, tokenizer: &tokenizer, metric, per_epoch, what, task_name: "question_answering", labels: &[], save_beside: None };
    run.fit_and_export(&task, config, |model, device| {
        let predictions = held_out_predictions(&task, model, device);
        let ids = task.eval_examples().iter().map(|x| x.id.clone());
        Ok(per_class(task.answers(&predictions).map_or(serde_json::Value::Null, |answers| serde_json::json!({ "answers": ids.zip(answers.iter().map(|a| serde_json::to_value(a).expect("JSON"))).collect::<serde_json::Map<_, _>>() }))))
    })
}

/// `finetune --task embed`: a sentence-embedding model trained with a sentence-transformers
/// loss, exported as a sentence-transformers directory (the checkpoint's pooling,
/// normalisation and `max_seq_length` kept when it is one).
fn finetune_embedding<B: Backbone>(job: &FinetuneOptions, device: Device) -> Result<Finetuned, String> {
    let read = |path: &Path| sesame_text::text_rows::read_text_rows(path).map_err(|e| e.to_string());
    let train_rows = read(&job.train)?;
    // A directory is a retrieval set in BEIR's layout: its (query, relevant document) pairs
    // are the held-out rows, and retrieval is scored over its whole corpus.
    let retrieval = match job.eval.is_dir() {
        true => Some(sesame_text::text_rows::read_retrieval_dir(&job.eval).map_err(|e| e.to_string())?),
        false => None,
    };
    let eval_rows = match &retrieval {
        Some(files) => files.pairs.clone(),
        None => read(&job.eval)?,
    };
    let (tokenizer, config, seq_len) = load_start::<B>(job)?;
    let sentence = SentenceTransformerConfig::from_dir(&job.model).map_err(|e| e.to_string())?;
    let width = B::classifier_sizes(&config).hidden_size;
    let pooling = match (sentence, job.pooling) {
        (Some(st), Some(asked)) if st.pooling != asked => {
            return Err(format!("--pooling {asked:?}: {} pools with {:?} (its modules.json); leave --pooling out to keep it", job.model.display(), st.pooling).to_lowercase());
        }
        (Some(st), _) => st.pooling,
        (None, asked) => asked.unwrap_or(Pooling::Mean),
    };
    let embedding = Embedding { pooling, normalize: sentence.is_some_and(|st| st.normalize) };
    // A sentence-transformers directory's own max_seq_length, unless --seq-len says otherwise.
    let limit = config.input_limits().max_len;
    let seq_len = match (job.seq_len, sentence.and_then(|st| st.max_seq_length)) {
        (None, Some(n)) => n.min(limit),
        _ => seq_len,
    };
    let kind = job.loss.unwrap_or(if train_rows.label.is_none() {
        LossKind::Mnrl
    } else if train_rows.rows.iter().all(|r| matches!(r.label, Some(y) if y == 0.0 || y == 1.0)) {
        LossKind::OnlineContrastive
    } else {
        LossKind::Cosent
    });
    let loss = kind.with(job.scale, job.margin).map_err(|e| e.to_string())?;
    let loss_name = if kind.cached() { format!("Cached{}", loss.name()) } else { loss.name().to_string() };
    let needed = RowsNeeded {
        loss: loss.name(),
        labels: None,
        binary: matches!(kind, LossKind::Contrastive | LossKind::OnlineContrastive),
        in_batch: kind.in_batch_negatives().then_some(job.batch_size),
    };
    check_rows(&train_rows, needed)?;
    check_rows(&eval_rows, RowsNeeded { in_batch: None, ..needed })?;
    let matryoshka = (!job.matryoshka_dims.is_empty()).then(|| Matryoshka { dims: job.matryoshka_dims.iter().map(|&d| (d, 1.0)).collect() });
    let encode = |rows: &sesame_text::text_rows::TextRows| TextSet::encode(&tokenizer, rows, seq_len).map_err(|e| format!("{}: {e}", rows.path.display()));
    let (train, eval) = (encode(&train_rows)?, encode(&eval_rows)?);
    check_loss(&loss, matryoshka.as_ref(), &train, width, &job.train, &device)?;
    check_loss(&loss, matryoshka.as_ref(), &eval, width, &eval_rows.path, &device)?;
    let mini_batch_size = kind.cached().then(|| job.mini_batch_size.unwrap_or(32));
    let objective = EmbeddingObjective { embedding, loss: loss.clone(), matryoshka, batch_size: job.batch_size, seed: job.seed, no_duplicates: kind.in_batch_negatives(), mini_batch_size };
    let mut task = EmbeddingTraining::<B>::new(train, eval, tokenizer.clone(), objective);
    if let Some(files) = &retrieval {
        let corpus = RetrievalCorpus::encode(&tokenizer, files, seq_len).map_err(|e| format!("{}: {e}", job.eval.join("corpus.jsonl").display()))?;
        task = task.with_corpus(corpus);
    }
    let evaluation = task.evaluation();
    // Each metric again at each smaller Matryoshka dimension (`dim_64_cosine_ndcg@10`).
    let dims: Vec<String> = job.matryoshka_dims.iter().filter(|&&d| d < width).flat_map(|d| evaluation.metric_names().into_iter().skip(1).map(move |m| format!("dim_{d}_{m}"))).collect();
    let names: Vec<&str> = evaluation.metric_names().into_iter().chain(dims.iter().map(String::as_str)).collect();
    let metric = best_metric(job, &format!("embedding evaluation on {}", evaluation.name()), &names, evaluation.default_metric())?;
    let what = format!(
        "{} training rows of {:?}, {} evaluation rows ({}{}); {}{}, {:?} pooling{}, {seq_len} tokens",
        train_rows.rows.len(),
        train_rows.columns,
        eval_rows.rows.len(),
        evaluation.name(),
        retrieval.as_ref().map_or(String::new(), |f| format!(" over a corpus of {} documents, judgements {}", f.corpus.len(), f.pairs.path.display())),
        loss_name,
        if job.matryoshka_dims.is_empty() { String::new() } else { format!(" over dimensions {:?}", job.matryoshka_dims) },
        embedding.pooling,
        if embedding.normalize { ", normalised" } else { "" },
    );
    let exported = SentenceTransformerConfig { pooling: embedding.pooling, normalize: embedding.normalize, max_seq_length: Some(seq_len), dimension: width };
    let save_beside = move |dir: &Path| exported.save(dir).map_err(|e| format!("cannot write the sentence-transformers files in {}: {e}", dir.display()));
    let per_epoch = task.batches_per_epoch();
    let run = Run { job, device, tokenizer: &tokenizer, metric, per_epoch, what, task_name: "sentence_embedding", labels: &[], save_beside: Some(&save_beside) };
    run.fit_and_export(&task, config, |_, _| Ok(Report::from_iter([("loss_function".to_string(), serde_json::json!(loss_name))])))
}

/// `finetune --task rerank`: the family's sequence classifier with one logit, trained as
/// sentence-transformers' cross-encoder on (query, passage) pairs or on ranked lists
/// ((query, docs, labels) rows, for the listwise losses) and scored by reranking.
fn finetune_rerank<M: TaskModel<Output = ClassifierLayers>>(job: &FinetuneOptions, device: Device) -> Result<Finetuned, String> {
    use sesame_text::text_rows::{holds_ranked_lists, read_ranked_lists, read_text_rows};
    let read = |path: &Path| -> Result<RerankRows, String> {
        match holds_ranked_lists(path) {
            true => read_ranked_lists(path).map(RerankRows::Lists),
            false => read_text_rows(path).map(RerankRows::Pairs),
        }
        .map_err(|e| e.to_string())
    };
    let (train, eval) = (read(&job.train)?, read(&job.eval)?);
    if let RerankRows::Pairs(eval) = &eval {
        if eval.columns.len() < 2 {
            return Err(format!("{}: reranking needs (query, passage[, …]) rows; the rows have {} text column", job.eval.display(), eval.columns.len()));
        }
    }
    let default = match &train {
        RerankRows::Lists(_) => LossKind::Lambda,
        RerankRows::Pairs(rows) if rows.label.is_some() => LossKind::Bce,
        RerankRows::Pairs(_) => LossKind::Mnrl,
    };
    let kind = job.loss.unwrap_or(default);
    let listwise = |loss: ListwiseLoss| match job.scale {
        Some(_) => Err(format!("--scale: {} has no scale (the multiple-negatives loss has)", loss.name())),
        None => Ok(RerankLoss::Listwise(Listwise { loss, activation: job.activation_fn.unwrap_or_default() })),
    };
    let loss = match kind {
        LossKind::Bce if job.scale.is_some() => return Err("--scale: BinaryCrossEntropyLoss has no scale (the multiple-negatives loss has)".into()),
        LossKind::Bce => RerankLoss::BinaryCrossEntropy,
        LossKind::Mnrl => RerankLoss::MultipleNegativesRanking { num_negatives: job.num_negatives.unwrap_or(4), scale: job.scale.unwrap_or(10.0) },
        LossKind::ListNet => listwise(ListwiseLoss::ListNet)?,
        LossKind::ListMle => listwise(ListwiseLoss::ListMle { weighted: false, respect_input_order: !job.sort_by_label })?,
        LossKind::PListMle => listwise(ListwiseLoss::ListMle { weighted: true, respect_input_order: !job.sort_by_label })?,
        LossKind::Lambda | LossKind::RankNet => {
            let weighting = if kind == LossKind::RankNet { LambdaWeighting::None } else { job.lambda_weighting.unwrap_or_default() };
            listwise(ListwiseLoss::Lambda { weighting, k: job.lambda_k, sigma: job.sigma.unwrap_or(1.0) })?
        }
        other => return Err(format!("--loss {other:?}: --task rerank trains with bce, mnrl, listnet, listmle, plistmle, lambda or ranknet").to_lowercase()),
    };
    if (job.lambda_k.is_some() || job.sigma.is_some()) && !matches!(loss, RerankLoss::Listwise(Listwise { loss: ListwiseLoss::Lambda { .. }, .. })) {
        return Err(format!("--lambda-k, --sigma: {} has neither (LambdaLoss and RankNetLoss have)", loss.name()));
    }
    if job.activation_fn.is_some() && !matches!(loss, RerankLoss::Listwise(_)) {
        return Err(format!("--activation-fn: {} takes the logits as they are (the listwise losses take an activation)", loss.name()));
    }
    if job.sort_by_label && !matches!(loss, RerankLoss::Listwise(Listwise { loss: ListwiseLoss::ListMle { .. }, .. })) {
        return Err(format!("--sort-by-label: {} reads no order (ListMLELoss and PListMLELoss do)", loss.name()));
    }
    if job.num_negatives.is_some() && !matches!(loss, RerankLoss::MultipleNegativesRanking { .. }) {
        return Err(format!("--num-negatives: {} draws no negatives (the multiple-negatives loss does)", loss.name()));
    }
    loss.check(&train)?;
    if let RerankRows::Pairs(rows) = &train {
        let in_batch = matches!(loss, RerankLoss::MultipleNegativesRanking { .. });
        let needed = RowsNeeded { loss: loss.name(), labels: Some((0.0, 1.0)), binary: false, in_batch: in_batch.then_some(job.batch_size) };
        check_rows(rows, needed)?;
        if let RerankRows::Pairs(eval) = &eval {
            check_rows(eval, RowsNeeded { loss: "reranking", in_batch: None, ..needed })?;
        }
    }
    let (tokenizer, mut config, seq_len) = load_start::<M>(job)?;
    // Every pair the rows can make is tokenized once here, so that a text the tokenizer refuses
    // is named before training.
    let rows: Vec<(u64, &str, Vec<&str>)> = match &train {
        RerankRows::Pairs(rows) => rows.rows.iter().map(|r| (r.line, r.texts[0].as_str(), r.texts[1..].iter().map(String::as_str).collect())).collect(),
        RerankRows::Lists(lists) => lists.rows.iter().map(|l| (l.line, l.query.as_str(), l.docs.iter().map(String::as_str).collect())).collect(),
    };
    for (line, query, passages) in rows {
        let pairs: Vec<(&str, &str)> = passages.iter().map(|p| (query, *p)).collect();
        tokenizer.encode_pairs_each(&pairs, seq_len, true).map_err(|e| format!("{}:{line}: {e}", job.train.display()))?;
    }
    let candidates = match &eval {
        RerankRows::Pairs(rows) => Candidates::of(rows, &tokenizer, seq_len),
        RerankRows::Lists(lists) => Candidates::of_lists(lists, &tokenizer, seq_len),
    }
    .map_err(|e| format!("{}: {e}", job.eval.display()))?;
    if !candidates.pairs.iter().any(|(_, _, relevant)| *relevant) {
        return Err(format!("{}: no query has a relevant passage (a label of 1; in lists, above 0): there is nothing to rerank", job.eval.display()));
    }
    let metric = best_metric(job, "reranking", RERANK_METRICS, "ndcg@10")?;
    set_labels(config.labels_mut(), &[], "reranking");
    // One logit and no problem type: transformers' pipeline and sentence-transformers'
    // CrossEncoder score it with a sigmoid.
    config.labels_mut().problem_type = None;
    let what = format!(
        "{} training rows of {:?}, {} held-out queries with {} candidates; {}, {seq_len} tokens a pair",
        train.len(),
        match &train {
            RerankRows::Pairs(rows) => rows.columns.clone(),
            RerankRows::Lists(lists) => lists.columns.to_vec(),
        },
        candidates.queries.len(),
        candidates.pairs.len(),
        loss.name()
    );
    let task = RerankTraining::<M>::new(train, candidates, tokenizer.clone(), seq_len, loss, job.batch_size, job.seed)?;
    let per_epoch = task.batches_per_epoch();
    let run = Run { job, device, tokenizer: &tokenizer, metric, per_epoch, what, task_name: "reranking", labels: &[], save_beside: None };
    run.fit_and_export(&task, config, |_, _| Ok(Report::from_iter([("loss_function".to_string(), serde_json::json!(loss.name()))])))
}

/// Writes files into an exported model's directory (given its path).
pub(crate) type SaveBeside = dyn Fn(&Path) -> Result<(), String>;

/// What every fine-tuning run shares once its task is built.
pub(crate) struct Run<'a> {
    pub(crate) job: &'a FinetuneOptions,
    pub(crate) device: Device,
    pub(crate) tokenizer: &'a Tokenizer,
    /// The metric that picks the exported model, and whether larger is better.
    pub(crate) metric: (String, bool),
    /// Batches per epoch.
    pub(crate) per_epoch: u64,
    /// The data, for the log.
    pub(crate) what: String,
    /// HF's name of the task (`problem_type`, or `token_classification`).
    pub(crate) task_name: &'a str,
    /// Class or tag names.
    pub(crate) labels: &'a [String],
    /// What else the exported model's directory holds, written into it before it is moved
    /// into place (a sentence-transformers model's modules).
    pub(crate) save_beside: Option<&'a SaveBeside>,
}

impl Run<'_> {
    /// Train `task`'s model from the checkpoint (with `config`, labels set), keep the best by
    /// the metric, export it with the tokenizer, and write `eval_results.json` with the fields
    /// `report` gives of the exported model (`per_class`, early exit's `speed_curve`).
    fn fit_and_export<T, M>(self, task: &T, config: M::Config, report: impl Fn(&M, &Device) -> Result<Report, String>) -> Result<Finetuned, String>
    where
        T: TrainTask<Model = M> + Sync,
        T::Batch: Sync,
        M: TaskModel,
    {
        self.fit_and_export_with(task, config, |model, _, _| Ok(model), report)
    }

    /// [`Self::fit_and_export`] of the model `prepare` makes of the loaded checkpoint (given
    /// its config and load report): early exit's fixed classifier, distillation's student.
    pub(crate) fn fit_and_export_with<T, M>(
        self,
        task: &T,
        config: M::Config,
        prepare: impl FnOnce(M, &mut M::Config, &sesame_layers::LoadReport) -> Result<M, String>,
        report: impl Fn(&M, &Device) -> Result<Report, String>,
    ) -> Result<Finetuned, String>
    where
        T: TrainTask<Model = M> + Sync,
        T::Batch: Sync,
        M: TaskModel,
    {
        let job = self.job;
        let per_epoch = self.per_epoch.div_ceil(job.grad_accum);
        // Each of the --grad-accum batches of a step runs as its micro-batches.
        let parts = batching(job).parts as u64;
        let steps = job.steps.unwrap_or_else(|| ((job.epochs * per_epoch as f64).ceil() as u64).max(1));
        let every = job.eval_every.unwrap_or(per_epoch).min(steps);
        let out = &job.out;
        let run = out.join("run");
        let has_run = run.join("checkpoints").join("latest").is_file();
        if has_run && !job.resume {
            return Err(format!("--out {} already holds a run: continue it with --resume, or choose another --out", out.display()));
        }
        if job.resume && !has_run {
            return Err(format!("--resume: {} holds no checkpoint to continue", run.display()));
        }
        let train_device = self.device.clone().autodiff();
        // The new head is drawn from the seed, as every other random choice of the run.
        train_device.seed(job.seed);
        let mut config = config;
        let kept = match job.feature_layer {
            Some(FeatureLayer::Layer(layer)) => Some(keep_layers(&mut config, layer)?),
            Some(FeatureLayer::Mix) => {
                mix_layers::<M>(&mut config)?;
                None
            }
            None => None,
        };
        let mut loaded = match job.init {
            Init::Random => {
                let report = sesame_layers::LoadReport { initialized: vec!["every tensor (--init random)".into()], ..Default::default() };
                sesame_layers::Pretrained { model: M::new_hf(&config, &train_device), config, report }
            }
            Init::Pretrained => {
                let files = WeightFiles::find(&job.model).map_err(|e| e.to_string())?;
                M::from_weights(config, &files, &train_device).map_err(|e| e.to_string())?
            }
        };
        if let Some((kept, total)) = kept {
            loaded.report.unused.retain(|name| !in_layer_above(name, kept));
            eprintln!("--feature-layer: the features of layer {kept} of {total}; the {} above it are dropped", total - kept);
        }
        if !loaded.report.initialized.is_empty() || !loaded.report.unused.is_empty() {
            eprintln!("note: {}", loaded.report);
        }
        let (mut model, mut config) = (loaded.model, loaded.config);
        model = prepare(model, &mut config, &loaded.report)?;
        if job.freeze {
            // No gradient reaches the embeddings and encoder layers: the head (and a pooler)
            // learns from fixed features.
            model = super::freeze_base(model);
        }
        let evaluated = if every == 0 { "evaluated at the end".to_string() } else { format!("evaluated every {every}") };
        eprintln!(
            "{}: {}; {steps} steps ({per_epoch} per epoch) of {} x {} rows in {parts} micro-batches, {evaluated}",
            M::architecture(), self.what, job.grad_accum, job.batch_size
        );
        let (metric, greater_is_better) = self.metric;
        let train_config = TrainConfig {
            steps,
            grad_accum: job.grad_accum * parts,
            lr: job.lr,
            warmup: job.warmup.min(steps),
            weight_decay: job.weight_decay,
            epsilon: 1e-8,
            max_grad_norm: job.max_grad_norm,
            seed: job.seed,
            // --eval-every 0 evaluates at the end only; the log still has a line every 10 steps.
            log_every: if every == 0 { 10 } else { every.clamp(1, 10) },
            eval_every: every,
            checkpoint_every: every,
            best_metric: Some(metric.clone()),
            greater_is_better: Some(greater_is_better),
            patience: job.patience,
            ..TrainConfig::default()
        };
        let mut train_config = train_config;
        if let Some(decay) = job.layer_lr_decay {
            train_config.lr_groups = layer_lr_decay(&model, decay);
            if train_config.lr_groups.is_empty() {
                return Err(format!("--layer-lr-decay {decay}: {} has no single stack of encoder layers to decay over", M::architecture()));
            }
            let layers = train_config.lr_groups.len();
            eprintln!("layer-wise learning-rate decay {decay}: {layers} groups, the lowest at --lr x {:.3e}", train_config.lr_groups.iter().map(|g| g.factor).fold(1.0, f64::min));
        }
        let threads = job.threads.unwrap_or_else(|| sesame_layers::device::default_threads(&self.device));
        let mut trainer = Trainer::new(train_config, &run).with_progress(job.progress).with_threads(threads);
        if let Some(step) = job.stop_after {
            trainer = trainer.with_stop_after(step);
        }
        let started = std::time::Instant::now();
        let outcome = trainer.fit(task, model, job.resume).map_err(|e| e.to_string())?;
        // As transformers' `train_runtime`: the steps of this process, its evaluations included.
        let train_seconds = started.elapsed().as_secs_f64();
        if job.stop_after.is_some() {
            return Ok(Finetuned { metrics: BTreeMap::new(), metric, step: job.stop_after.unwrap_or(0), steps, train_seconds, eval_seconds: outcome.eval_seconds, checkpoint_seconds: outcome.checkpoint_seconds, model: out.join("model"), stopped_after: job.stop_after });
        }
        // The model exported: the best by --metric (its evaluation is the one reported).
        let (model, metrics, step) = match &outcome.best {
            Some(best) => (outcome.model.try_load_file(trainer.best_model()).map_err(|e| format!("{}: {e}", trainer.best_model().display()))?, best.metrics.clone(), best.step),
            None => (outcome.model, outcome.held_out.clone(), steps),
        };
        let model = model.valid();
        let export = out.join("model");
        save_model_with(&model, &config, &export, &job.model, self.tokenizer, |dir| self.save_beside.map_or(Ok(()), |save| save(dir)))?;
        let mut results = serde_json::json!({
            "task": self.task_name,
            "labels": self.labels,
            "metric": metric,
            "step": step,
            "stopped_early": outcome.stopped_early,
            "train_seconds": train_seconds,
            "eval_seconds": outcome.eval_seconds,
            "checkpoint_seconds": outcome.checkpoint_seconds,
            "metrics": metrics,
            "model": export,
        });
        results.as_object_mut().expect("an object").extend(report(&model, &self.device)?);
        sesame_layers::fs::write_atomic(&out.join("eval_results.json"), serde_json::to_string_pretty(&results).expect("JSON").as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", out.join("eval_results.json").display()))?;
        if let Some(matrix) = results["per_class"].get("confusion_matrix").and_then(|m| serde_json::from_value::<Vec<Vec<u64>>>(m.clone()).ok()) {
            let path = out.join("confusion_matrix.svg");
            let svg = crate::plots::confusion_matrix_svg(self.labels, &matrix).map_err(|e| format!("{}: {e}", path.display()))?;
            sesame_layers::fs::write_atomic(&path, svg.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        eprintln!("exported the model (step {step}, {metric} {:.4}) and tokenizer to {}", metrics.get(&metric).copied().unwrap_or(f64::NAN), export.display());
        Ok(Finetuned { metrics, metric, step, steps, train_seconds, eval_seconds: outcome.eval_seconds, checkpoint_seconds: outcome.checkpoint_seconds, model: export, stopped_after: None })
    }
}

/// Fields of `eval_results.json` that a task reports of its exported model.
pub(crate) type Report = serde_json::Map<String, serde_json::Value>;

/// A report of `details` per class (or per tag, per question).
pub(crate) fn per_class(details: serde_json::Value) -> Report {
    Report::from_iter([("per_class".to_string(), details)])
}

/// Keep the encoder layers of `config` up to `--feature-layer` `layer` (1-based, or negative
/// from the top): the layers kept, of how many.
fn keep_layers<C: HfConfig>(config: &mut C, layer: i64) -> Result<(usize, usize), String> {
    let Some(layers) = config.num_hidden_layers_mut() else {
        return Err(format!("--feature-layer {layer}: this model's layers cannot be cut (one stack of layers, ALBERT with one group, is needed)"));
    };
    let total = *layers;
    let kept = match layer {
        1.. if layer as usize <= total => layer as usize,
        ..=-1 if layer.unsigned_abs() as usize <= total => total + 1 - layer.unsigned_abs() as usize,
        _ => return Err(format!("--feature-layer {layer}: the model has {total} layers (1..={total}, or -{total}..=-1 from the top)")),
    };
    *layers = kept;
    Ok((kept, total))
}

/// Give the head of `config` ELMo's scalar mix over the embeddings and every layer.
fn mix_layers<M: TaskModel>(config: &mut M::Config) -> Result<(), String> {
    if !M::SCALAR_MIX {
        return Err(format!("--feature-layer mix: {}'s head reads one layer (the mix is for the encoder families' classifiers and taggers)", M::architecture()));
    }
    let Some(&mut layers) = config.num_hidden_layers_mut() else {
        return Err("--feature-layer mix: this model's layers cannot be counted (one stack of layers, ALBERT with one group, is needed)".into());
    };
    config.labels_mut().scalar_mix = Some(layers + 1);
    eprintln!("--feature-layer mix: the head reads ELMo's scalar mix of the embeddings and {layers} layers");
    Ok(())
}

/// Whether the tensor `name` (`bert.encoder.layer.7.output.dense.weight`) belongs to a layer at
/// or above index `kept` (0-based), one that `--feature-layer` dropped.
fn in_layer_above(name: &str, kept: usize) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    parts.windows(2).any(|w| matches!(w[0], "layer" | "layers") && w[1].parse::<usize>().is_ok_and(|i| i >= kept))
}

/// What every held-out batch of `task` predicts with `model` (inference, no autodiff).
pub(crate) fn held_out_predictions<T: TrainTask>(task: &T, model: &T::Model, device: &Device) -> Vec<burn::tensor::TensorData> {
    let inference = model.clone().fork(device);
    task.held_out_batches(device).into_iter().filter_map(|b| task.step(&inference, b).predictions).collect()
}

/// Label names, ids and problem type as transformers writes them into config.json.
fn set_labels(labels: &mut sesame_layers::hparams::LabelConfig, classes: &[String], problem: &str) {
    let names: Vec<String> = if classes.is_empty() { vec!["LABEL_0".into()] } else { classes.to_vec() };
    labels.id2label = Some(names.iter().enumerate().map(|(i, n)| (i.to_string(), n.clone())).collect());
    labels.label2id = Some(names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect());
    labels.num_labels = None;
    labels.problem_type = Some(problem.to_string());
}

/// Save `model` with `config` and the tokenizer of `source` in `dir` (written beside, then
/// moved into place).
pub fn save_model<M: PretrainedModel>(model: &M, config: &M::Config, dir: &Path, source: &Path, tokenizer: &Tokenizer) -> Result<(), String> {
    save_model_with(model, config, dir, source, tokenizer, |_| Ok(()))
}

/// [`save_model`], with the files `beside` writes into the directory before it is moved into place.
fn save_model_with<M: PretrainedModel>(model: &M, config: &M::Config, dir: &Path, source: &Path, tokenizer: &Tokenizer, beside: impl FnOnce(&Path) -> Result<(), String>) -> Result<(), String> {
    let tmp = dir.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    model.save_pretrained(config, &tmp).map_err(|e| e.to_string())?;
    let tok_config = TokenizerConfig::of_dir(source).map_err(|e| e.to_string())?;
    tokenizer.save(&tmp, &tok_config).map_err(|e| e.to_string())?;
    beside(&tmp)?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&tmp, dir).map_err(|e| format!("cannot move {} to {}: {e}", tmp.display(), dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_a_run_cannot_start_with_get_one_line_naming_the_option() {
        let base = FinetuneOptions::new("model", "train.csv", "eval.csv", "out");
        assert_eq!(base.check(), Ok(()));
        let cases: [(fn(&mut FinetuneOptions), &str); 7] = [
            (|o| o.epochs = 0.0, "--epochs 0"),
            (|o| o.epochs = f64::NAN, "--epochs NaN"),
            (|o| o.batch_size = 0, "--batch-size 0"),
            (|o| o.steps = Some(0), "--steps 0"),
            (|o| o.lr = -1e-3, "--lr -0.001"),
            (|o| o.layer_lr_decay = Some(1.5), "--layer-lr-decay 1.5"),
            (|o| { o.early_exit = true; o.freeze = true }, "--early-exit"),
        ];
        for (change, named) in cases {
            let mut options = base.clone();
            change(&mut options);
            let error = options.check().unwrap_err();
            assert!(error.starts_with(named) && !error.contains('\n'), "{named}: {error}");
        }
    }
}
