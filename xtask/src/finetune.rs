//! `cargo xtask finetune`: the flags of a fine-tuning job, parsed into
//! [`FinetuneOptions`] for the library's [`sesame_train::finetune::finetune`], which reads the
//! data, trains, evaluates and exports the best model.

use std::path::PathBuf;

use burn::tensor::Device;
use sesame_train::embedding_losses::LossKind;
use sesame_train::finetune::{ColumnNames, FeatureLayer, FinetuneOptions, FinetuneTask, Finetuned, Init};

/// Where a labelled file keeps its texts and labels (`finetune`, `prune`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ColumnArgs {
    /// Column (field) of the text [default: text; tokens for --task tag].
    #[arg(long)]
    pub text_column: Option<String>,
    /// Column (field) of the second text of sentence pairs.
    #[arg(long)]
    pub text_pair_column: Option<String>,
    /// Column (field) of the label [default: label; tags for --task tag].
    #[arg(long)]
    pub label_column: Option<String>,
}

impl ColumnArgs {
    /// The library's column names.
    pub fn names(&self) -> ColumnNames {
        ColumnNames { text: self.text_column.clone(), pair: self.text_pair_column.clone(), label: self.label_column.clone() }
    }
}

/// The library's defaults (`FinetuneOptions::new`), which the flags show and take: each is
/// written once, there.
fn defaults() -> FinetuneOptions {
    FinetuneOptions::new("", "", "", "")
}

/// Options of `cargo xtask finetune` (names as `train`'s where they overlap; defaults as
/// transformers' `Trainer`'s, from [`FinetuneOptions::new`]).
#[derive(clap::Args, Debug)]
pub struct FinetuneArgs {
    /// The HF checkpoint to start from (config.json, weights, tokenizer files).
    #[arg(long, value_parser = crate::common::model_dir)]
    pub model: PathBuf,
    /// `random`: train the architecture of --model (its config.json and tokenizer) from fresh
    /// weights, drawn from --seed as transformers initialises a new model (its weights are not
    /// read): the baseline that shows what pre-training brings [default: pretrained].
    #[arg(long, value_enum)]
    pub init: Option<Init>,
    /// What to learn.
    #[arg(long, value_enum, default_value = "classify")]
    pub task: FinetuneTask,
    /// Training rows: CSV or TSV with a header, or JSON lines (CoNLL for --task tag, SQuAD's
    /// JSON for qa; sentence-transformers' columns for embed: `anchor,positive[,negative…]`,
    /// `sentence1,sentence2,score` or `sentence1,sentence2,label`).
    #[arg(long)]
    pub train: PathBuf,
    /// Evaluation rows, in the same form; for --task embed also a retrieval set, a directory in
    /// BEIR's layout (queries.jsonl, corpus.jsonl, qrels/dev.tsv or test.tsv), scored over its
    /// whole corpus.
    #[arg(long)]
    pub eval: PathBuf,
    /// Run directory: checkpoints, metrics.jsonl, the exported model in `model/`.
    #[arg(long)]
    pub out: PathBuf,
    /// The columns of the rows.
    #[command(flatten)]
    pub columns: ColumnArgs,
    /// Passes over the training rows.
    #[arg(long, default_value_t = defaults().epochs, conflicts_with = "steps", value_parser = positive_epochs)]
    pub epochs: f64,
    /// Optimizer steps, instead of --epochs.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: Option<u64>,
    /// Rows per batch.
    #[arg(long, default_value_t = defaults().batch_size, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub batch_size: usize,
    /// Batches per optimizer step (gradients averaged).
    #[arg(long, default_value_t = defaults().grad_accum, value_parser = clap::value_parser!(u64).range(1..))]
    pub grad_accum: u64,
    /// Peak learning rate.
    #[arg(long, default_value_t = defaults().lr)]
    pub lr: f64,
    /// Tokens per row at most (longer texts are truncated), special tokens included
    /// [default: 128 (384 for qa), or the model's positions if fewer].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(4..=65_536))]
    pub seq_len: Option<usize>,
    /// Tokens shared by consecutive windows of a sentence or context longer than --seq-len
    /// (--task tag, qa) [default: a quarter of --seq-len; a third for qa, as run_qa.py's 128 of 384].
    #[arg(long)]
    pub stride: Option<usize>,
    /// Longest answer in tokens (--task qa).
    #[arg(long, default_value_t = defaults().max_answer_len, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub max_answer_len: usize,
    /// Start and end candidates per window (--task qa).
    #[arg(long, default_value_t = defaults().n_best, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub n_best: usize,
    /// How far "no answer" must score ahead of the best span to win, for data with
    /// unanswerable questions (--task qa).
    #[arg(long, default_value_t = defaults().null_threshold, allow_negative_numbers = true, value_parser = crate::common::finite_f32)]
    pub null_threshold: f32,
    /// Warm-up steps (then linear decay to 0).
    #[arg(long, default_value_t = defaults().warmup)]
    pub warmup: u64,
    /// AdamW weight decay (not on biases and LayerNorm).
    #[arg(long, default_value_t = defaults().weight_decay)]
    pub weight_decay: f64,
    /// Global gradient-norm clip (0: none).
    #[arg(long, default_value_t = defaults().max_grad_norm)]
    pub max_grad_norm: f64,
    /// Layer-wise learning-rate decay (ELECTRA's fine-tuning recipe, 0.8 for its base model):
    /// the head at --lr, the top layer at --lr × D², each layer below D times the one above,
    /// the embeddings at --lr × D^(layers+2).
    #[arg(long, value_parser = decay_factor)]
    pub layer_lr_decay: Option<f64>,
    /// Evaluate (and checkpoint) every N steps; 0 evaluates and checkpoints only at the end
    /// [default: every epoch].
    #[arg(long)]
    pub eval_every: Option<u64>,
    /// The held-out metric that picks the model exported [default: accuracy; f1_micro for
    /// multi-label; mse for regression].
    #[arg(long)]
    pub metric: Option<String>,
    /// Stop after this many evaluations without a better --metric (0: never).
    #[arg(long, default_value_t = defaults().patience)]
    pub patience: u64,
    /// Feature extraction: keep the pre-trained embeddings and encoder layers fixed and train
    /// the task head alone (with BERT's and ALBERT's pooler, the dense layer of their head).
    #[arg(long)]
    pub freeze: bool,
    /// Read the features from encoder layer N (1: the lowest; -1: the top, -2: the one below
    /// it): the layers above N are dropped from training and from the exported model, whose
    /// config says N layers. With --freeze, a fixed feature extractor of that layer. `mix`: ELMo's
    /// scalar mix, learned softmax weights over the embeddings and every layer (classifiers and
    /// taggers of the encoder families; an export transformers cannot run).
    #[arg(long, allow_negative_numbers = true, value_parser = feature_layer)]
    pub feature_layer: Option<FeatureLayer>,
    /// FastBERT's early exit: --model is a fine-tuned classifier, kept fixed, whose head teaches
    /// a small classifier after every layer below the top by self-distillation (the labels of
    /// --train are not read); then `cargo xtask classify --speed S` stops each text at the first
    /// confident layer. Single-label classifiers of the encoder families.
    #[arg(long, conflicts_with_all = ["freeze", "feature_layer", "layer_lr_decay"])]
    pub early_exit: bool,
    /// Random seed (head initialisation, shuffling, dropout).
    #[arg(long, default_value_t = defaults().seed)]
    pub seed: u64,
    /// Continue the run in --out from its latest checkpoint.
    #[arg(long)]
    pub resume: bool,
    /// Micro-batches each batch is split into, trained at once on a CPU backend's threads, their
    /// losses weighted so that the gradient is the whole batch's (at most --batch-size). The
    /// dropout masks follow it: --seed reproduces a run with the same --micro-batches.
    #[arg(long, default_value_t = defaults().micro_batches, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub micro_batches: usize,
    /// Micro-batches trained at once on a CPU backend (default: its cores).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: Option<usize>,
    /// Stop after this step without a final checkpoint (simulates a kill; for testing resume).
    #[arg(long, hide = true)]
    pub stop_after: Option<u64>,
    /// Hide the progress bar (log lines instead).
    #[arg(long)]
    pub quiet: bool,
    /// The loss of --task embed or rerank, by name or sentence-transformers' class name
    /// [default: by the training rows. embed: mnrl without a label or score column,
    /// online-contrastive with labels 0 and 1, cosent with scores; rerank: bce with labels,
    /// lambda with ranked lists, else mnrl].
    #[arg(long, value_enum)]
    pub loss: Option<LossKind>,
    /// The loss's scale: the cosine's multiplier (embed: mnrl, symmetric-mnrl, cosent)
    /// [default: 20], or the sigmoid's (rerank: mnrl) [default: 10].
    #[arg(long)]
    pub scale: Option<f64>,
    /// The loss's margin (contrastive and online-contrastive [default: 0.5], triplet [default: 5]).
    #[arg(long)]
    pub margin: Option<f64>,
    /// Matryoshka embeddings (--task embed): the loss again on each of these leading
    /// dimensions, renormalised, summed (`384,256,128,64`), so that `embed --dimensions N`
    /// keeps working when truncated.
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub matryoshka_dims: Vec<usize>,
    /// Pooling of a plain checkpoint's token states for --task embed: mean, cls or max
    /// [default: mean; a sentence-transformers directory keeps its own].
    #[arg(long)]
    pub pooling: Option<sesame_layers::Pooling>,
    /// Passages of the batch's other rows drawn as each query's negatives (--task rerank
    /// --loss mnrl) [default: 4].
    #[arg(long)]
    pub num_negatives: Option<usize>,
    /// Texts embedded and back-propagated at a time by a cached loss (--loss cached-mnrl or
    /// cached-symmetric-mnrl: GradCache, a large --batch-size in a mini-batch's memory)
    /// [default: 32].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub mini_batch_size: Option<usize>,
    /// LambdaLoss's weighting of a pair of documents (--task rerank --loss lambda), by name or
    /// sentence-transformers' class name [default: ndcg2pp].
    #[arg(long, value_enum)]
    pub lambda_weighting: Option<sesame_train::finetune::LambdaWeighting>,
    /// LambdaLoss's and RankNet's k (--task rerank): only pairs with a document among the
    /// first k as the model ranks them [default: every pair].
    #[arg(long)]
    pub lambda_k: Option<usize>,
    /// LambdaLoss's and RankNet's sigma (--task rerank): the slope of the pairwise logistic
    /// [default: 1].
    #[arg(long)]
    pub sigma: Option<f64>,
    /// ListMLE and PListMLE (--task rerank): sort each list's documents by label before the
    /// likelihood of their order, instead of taking them as given, best first
    /// (sentence-transformers' respect_input_order=False).
    #[arg(long)]
    pub sort_by_label: bool,
}

impl FinetuneArgs {
    /// The library's options of these flags.
    pub fn options(&self) -> FinetuneOptions {
        FinetuneOptions {
            model: self.model.clone(),
            init: self.init.unwrap_or_default(),
            task: self.task,
            train: self.train.clone(),
            eval: self.eval.clone(),
            out: self.out.clone(),
            columns: self.columns.names(),
            epochs: self.epochs,
            steps: self.steps,
            batch_size: self.batch_size,
            grad_accum: self.grad_accum,
            lr: self.lr,
            seq_len: self.seq_len,
            stride: self.stride,
            max_answer_len: self.max_answer_len,
            n_best: self.n_best,
            null_threshold: self.null_threshold,
            warmup: self.warmup,
            weight_decay: self.weight_decay,
            max_grad_norm: self.max_grad_norm,
            layer_lr_decay: self.layer_lr_decay,
            eval_every: self.eval_every,
            metric: self.metric.clone(),
            patience: self.patience,
            freeze: self.freeze,
            feature_layer: self.feature_layer,
            early_exit: self.early_exit,
            seed: self.seed,
            resume: self.resume,
            micro_batches: self.micro_batches,
            threads: self.threads,
            stop_after: self.stop_after,
            progress: !self.quiet,
            loss: self.loss,
            scale: self.scale,
            margin: self.margin,
            matryoshka_dims: self.matryoshka_dims.clone(),
            pooling: self.pooling,
            num_negatives: self.num_negatives,
            mini_batch_size: self.mini_batch_size,
            lambda_weighting: self.lambda_weighting,
            lambda_k: self.lambda_k,
            sigma: self.sigma,
            sort_by_label: self.sort_by_label,
        }
    }
}

/// `finetune`: the library's run on the checkpoint's family, printed as one JSON line.
pub fn finetune(args: &FinetuneArgs, device: Device) -> Result<String, String> {
    sesame::train::finetune(&args.options(), device).map(|done| printed(&done)).map_err(|e| e.to_string())
}

/// A run's outcome as the JSON line the command prints.
pub(crate) fn printed(done: &Finetuned) -> String {
    serde_json::to_string(done).expect("JSON")
}

fn feature_layer(s: &str) -> Result<FeatureLayer, String> {
    match s {
        "mix" => Ok(FeatureLayer::Mix),
        _ => s.parse().map(FeatureLayer::Layer).map_err(|_| format!("{s} is neither a layer number nor `mix`")),
    }
}

/// A number of passes over the data: positive and finite (a fraction of one pass is allowed).
pub(crate) fn positive_epochs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(e) if e > 0.0 && e.is_finite() => Ok(e),
        _ => Err(format!("{s} is not a number of passes (a finite number > 0; --steps counts optimizer steps)")),
    }
}

/// A layer-wise decay factor: in (0, 1].
fn decay_factor(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(d) if d > 0.0 && d <= 1.0 => Ok(d),
        _ => Err(format!("{s} is not a factor in (0, 1]")),
    }
}

