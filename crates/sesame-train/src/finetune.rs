//! Fine-tuning on users' labelled text: sequence classification (one class, any set of
//! classes, or a number per text or pair of texts) as a [`TrainTask`] for the shared trainer,
//! scored on the held-out set with the metrics the field reports (`sesame-metrics`).
//!
//! Data as transformers' `run_classification.py` and `Trainer` take it: texts truncated to the
//! maximum length, batches padded to their longest row, the training rows shuffled anew every
//! epoch (from the seed and the epoch, so that a resumed run sees the same order), the last
//! batch of an epoch smaller when the rows do not divide evenly.

use std::collections::BTreeMap;

use burn::module::Module;
use burn::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use sesame_layers::{Backbone, EncoderInput, ForSequenceClassification, OutputOptions, SequenceHead, SequenceLabels};
use sesame_metrics::classification::{ConfusionMatrix, MultiLabelCounts};
use sesame_metrics::{regression, Average, MetricError};
use sesame_text::labelled::{ProblemType, Target};
use sesame_text::{mix_seeds, EncodedText, Tokenizer, TokenizerError};

use crate::{Metric, StepOutput, TrainTask};

mod qa;
mod tagging;
pub use qa::{QaBatch, QaSet, QaWindow, QuestionAnswering, SpanExtractor, QA_METRICS};
pub use tagging::{TaggedSet, TaggedWindow, TaggingBatch, TokenClassification, TokenTagger, ENTITY_METRICS, WORD_METRICS};

/// A model giving one row of logits per text: a sequence classifier of any family.
pub trait SequenceClassifier: Module + Send + Sync {
    /// Logits `[batch, num_labels]` of `input`.
    fn classify(&self, input: EncoderInput) -> Tensor<2>;
}

impl<B: Backbone, H: SequenceHead<B>> SequenceClassifier for ForSequenceClassification<B, H>
where
    Self: Send + Sync,
{
    fn classify(&self, input: EncoderInput) -> Tensor<2> {
        self.forward(input, None, OutputOptions::default()).logits
    }
}

/// Texts (or pairs) encoded once, with their targets.
#[derive(Clone, Debug)]
pub struct LabelledSet {
    /// Each row's tokens, special tokens included, truncated to the maximum length.
    pub encoded: Vec<EncodedText>,
    /// Each row's target.
    pub targets: Vec<Target>,
}

impl LabelledSet {
    /// Encode `texts` (with `pairs`, when given) by `tokenizer`, truncated to `max_len` tokens.
    pub fn encode(tokenizer: &Tokenizer, texts: &[&str], pairs: Option<&[&str]>, targets: Vec<Target>, max_len: usize) -> Result<Self, TokenizerError> {
        let encoded = match pairs {
            Some(pairs) => {
                let batch: Vec<(&str, &str)> = texts.iter().copied().zip(pairs.iter().copied()).collect();
                tokenizer.encode_pairs_each(&batch, max_len, true)?
            }
            None => tokenizer.encode_each(texts, max_len, true)?,
        };
        Ok(Self { encoded, targets })
    }

    /// Rows.
    pub fn len(&self) -> usize {
        self.encoded.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.encoded.is_empty()
    }
}

/// One batch on its device.
#[derive(Clone, Debug)]
pub struct ClassificationBatch {
    /// The padded input.
    pub input: EncoderInput,
    /// The targets, in the form the problem type's loss takes.
    pub labels: SequenceLabels,
    /// Rows.
    pub rows: usize,
    /// Tokens that are not padding.
    pub tokens: usize,
}

/// Fine-tuning a [`SequenceClassifier`] `M` on a [`LabelledSet`], evaluated on another.
#[derive(Clone, Debug)]
pub struct SequenceClassification<M> {
    train: LabelledSet,
    eval: LabelledSet,
    /// Held-out rows in batch order (sorted by length), as indices into `eval`.
    eval_order: Vec<usize>,
    tokenizer: Tokenizer,
    problem: ProblemType,
    num_labels: usize,
    batch_size: usize,
    seed: u64,
    model: std::marker::PhantomData<fn() -> M>,
}

impl<M> SequenceClassification<M> {
    /// The task of `problem` with `num_labels` outputs on `train`, held out `eval`, in batches
    /// of `batch_size` rows padded by `tokenizer`, shuffled from `seed`.
    pub fn new(train: LabelledSet, eval: LabelledSet, tokenizer: Tokenizer, problem: ProblemType, num_labels: usize, batch_size: usize, seed: u64) -> Self {
        let mut eval_order: Vec<usize> = (0..eval.len()).collect();
        eval_order.sort_by_key(|&i| eval.encoded[i].len());
        Self { train, eval, eval_order, tokenizer, problem, num_labels, batch_size: batch_size.max(1), seed, model: std::marker::PhantomData }
    }

    /// Training batches per epoch (the last one smaller when the rows do not divide evenly).
    pub fn batches_per_epoch(&self) -> u64 {
        self.train.len().div_ceil(self.batch_size) as u64
    }

    /// Rows `rows` of `set` as a batch on `device`.
    fn batch(&self, set: &LabelledSet, rows: &[usize], device: &Device) -> ClassificationBatch {
        let encoded: Vec<&EncodedText> = rows.iter().map(|&i| &set.encoded[i]).collect();
        let (input, tokens, _) = padded_input(&self.tokenizer, &encoded, device);
        let b = rows.len();
        let labels = match self.problem {
            ProblemType::SingleLabelClassification => {
                let ids: Vec<i64> = rows.iter().map(|&i| if let Target::Class(c) = set.targets[i] { c as i64 } else { 0 }).collect();
                SequenceLabels::SingleLabel(Tensor::from_data(TensorData::new(ids, [b]), device))
            }
            ProblemType::MultiLabelClassification => {
                let n = self.num_labels;
                let yes: Vec<f32> = rows
                    .iter()
                    .flat_map(|&i| match &set.targets[i] {
                        Target::Classes(c) => c.iter().map(|&y| f32::from(u8::from(y))).collect::<Vec<_>>(),
                        _ => vec![0.0; n],
                    })
                    .collect();
                SequenceLabels::MultiLabel(Tensor::from_data(TensorData::new(yes, [b, n]), device))
            }
            ProblemType::Regression => {
                let values: Vec<f32> = rows.iter().map(|&i| if let Target::Value(v) = set.targets[i] { v as f32 } else { 0.0 }).collect();
                SequenceLabels::Regression(Tensor::from_data(TensorData::new(values, [b, 1]), device))
            }
        };
        ClassificationBatch { input, labels, rows: b, tokens }
    }

    /// Each class's scores and, single-label, the confusion matrix (rows: true classes), from
    /// the held-out `predictions` as [`TrainTask::held_out_scores`] takes them; `null` for
    /// regression.
    pub fn report(&self, predictions: &[TensorData]) -> serde_json::Value {
        let Some(rows) = logit_rows(predictions) else { return serde_json::Value::Null };
        let targets: Vec<&Target> = self.eval_targets().collect();
        match self.problem {
            ProblemType::SingleLabelClassification => confusion_matrix(self.num_labels, &rows, &targets)
                .map_or(serde_json::Value::Null, |m| serde_json::json!({ "scores": m.per_class(), "confusion_matrix": m.rows() })),
            ProblemType::MultiLabelClassification => {
                multi_label_counts(self.num_labels, &rows, &targets).map_or(serde_json::Value::Null, |m| serde_json::json!({ "scores": m.per_label() }))
            }
            ProblemType::Regression => serde_json::Value::Null,
        }
    }

    /// The held-out targets in batch order.
    fn eval_targets(&self) -> impl Iterator<Item = &Target> {
        self.eval_order.iter().map(|&i| &self.eval.targets[i])
    }
}

impl<M: SequenceClassifier> TrainTask for SequenceClassification<M> {
    type Model = M;
    type Batch = ClassificationBatch;
    type State = ();

    /// Batch `index`: epoch `index / batches_per_epoch`, whose order is a shuffle seeded by the
    /// task's seed and the epoch.
    fn train_batch(&self, index: u64, device: &Device) -> ClassificationBatch {
        self.batch(&self.train, &epoch_batch(self.train.len(), self.batch_size, self.seed, index), device)
    }

    /// The held-out rows sorted by length, in batches.
    fn held_out_batches(&self, device: &Device) -> Vec<ClassificationBatch> {
        self.eval_order.chunks(self.batch_size).map(|rows| self.batch(&self.eval, rows, device)).collect()
    }

    fn step(&self, model: &M, batch: ClassificationBatch) -> StepOutput {
        let logits = model.classify(batch.input);
        let loss = batch.labels.loss(logits.clone());
        let mut metrics = Vec::new();
        if let SequenceLabels::SingleLabel(labels) = &batch.labels {
            let correct = logits.clone().argmax(1).reshape([batch.rows]).equal(labels.clone()).float().sum();
            let correct = correct.try_into_scalar::<f32>().map_or(f64::NAN, f64::from);
            metrics.push(Metric::mean("accuracy", correct, batch.rows as f64));
        }
        StepOutput { loss, metrics, tokens: batch.tokens, predictions: Some(logits.into_data()) }
    }

    /// Single-label: `accuracy`, `f1_macro`, `f1_micro`, `f1_weighted`, `precision_macro`,
    /// `recall_macro`, `mcc`; multi-label: `exact_match`, `f1_micro`, `f1_macro`,
    /// `hamming_loss` (a class predicted when its logit is positive); regression: `mse`, `mae`,
    /// `pearson`, `spearman` (the correlations left out while the predictions are constant).
    fn held_out_scores(&self, predictions: &[TensorData]) -> BTreeMap<String, f64> {
        let Some(rows) = logit_rows(predictions) else { return BTreeMap::new() };
        scores(self.problem, self.num_labels, &rows, self.eval_targets())
    }
}

/// The rows of training batch `index` over `rows` rows in batches of `batch_size`: epoch
/// `index / batches per epoch`, whose order is a shuffle seeded by `seed` and the epoch (so a
/// resumed run sees the same batches); the last batch of an epoch is smaller when the rows do
/// not divide evenly.
pub fn epoch_batch(rows: usize, batch_size: usize, seed: u64, index: u64) -> Vec<usize> {
    let per_epoch = rows.div_ceil(batch_size).max(1) as u64;
    let (epoch, k) = (index / per_epoch, (index % per_epoch) as usize);
    let mut order: Vec<usize> = (0..rows).collect();
    order.shuffle(&mut StdRng::seed_from_u64(mix_seeds(seed, epoch)));
    order[(k * batch_size).min(rows)..((k + 1) * batch_size).min(rows)].to_vec()
}

/// `encoded` padded into one batch on `device` by `tokenizer`: the model's input, the tokens that
/// are not padding, and the padded length.
fn padded_input(tokenizer: &Tokenizer, encoded: &[&EncodedText], device: &Device) -> (EncoderInput, usize, usize) {
    let padded = tokenizer.pad(encoded).expect("a batch has rows");
    let (ids, mask, types) = padded.tensors(device);
    let tokens = padded.attention_mask.iter().filter(|&&m| m == 1).count();
    let mut input = EncoderInput::new(ids);
    input.attention_mask = Some(mask);
    input.token_type_ids = Some(types);
    (input, tokens, padded.seq)
}

/// Each row's predicted values per token, padding cut off (`lens[i] × inner` values for row `i`),
/// from the held-out `predictions`: batches `[batch, seq, inner..]` of the rows of `order`, in
/// order, padded on the left when `left`. `None` when they do not fit the rows.
fn unpadded<T: burn::tensor::Element>(predictions: &[TensorData], order: &[usize], lens: &[usize], left: bool) -> Option<Vec<Vec<T>>> {
    let mut out: Vec<Option<Vec<T>>> = vec![None; lens.len()];
    let mut order = order.iter();
    for p in predictions {
        let shape = p.shape();
        let (&b, &seq) = (shape.first()?, shape.get(1)?);
        let inner: usize = shape[2..].iter().product();
        let values: Vec<T> = p.clone().convert::<T>().try_to_vec().ok()?;
        for r in 0..b {
            let &i = order.next()?;
            let first = r * seq + if left { seq.checked_sub(lens[i])? } else { 0 };
            out[i] = Some(values.get(first * inner..(first + lens[i]) * inner)?.to_vec());
        }
    }
    out.into_iter().collect()
}

/// ELECTRA's layer-wise learning-rate decay for fine-tuning (google-research/electra,
/// `_get_layer_lrs`): the task head learns at the full rate, the top encoder layer at
/// `decay²`, each layer below at `decay` times the rate of the one above, the embeddings at
/// `decay^(L+2)`. The layers are the `layers.N` modules of `model`'s encoder (a shared layer,
/// as ALBERT's, counts once); the embeddings every module whose name has `embeddings`.
pub fn layer_lr_decay<M: Module>(model: &M, decay: f64) -> Vec<crate::LrGroup> {
    #[derive(Default)]
    struct Paths {
        path: Vec<String>,
        layers: std::collections::BTreeMap<usize, String>,
        embeddings: std::collections::BTreeSet<String>,
    }
    impl burn::module::ModuleVisitor for Paths {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, _: &burn::module::Param<Tensor<D>>) {
            let p = &self.path;
            let in_encoder = |i: usize| p[..i].iter().any(|s| s.contains("encoder"));
            if let Some(i) = (1..p.len()).find(|&i| p[i - 1] == "layers" && in_encoder(i) && p[i].parse::<usize>().is_ok()) {
                self.layers.insert(p[i].parse().unwrap_or_default(), p[..=i].join("."));
            } else if let Some(i) = p.iter().position(|s| s.contains("embeddings")) {
                self.embeddings.insert(p[..=i].join("."));
            }
        }
    }
    let mut paths = Paths::default();
    model.visit(&mut paths);
    let escape = |prefix: &str| format!("^{}\\.", prefix.replace('.', "\\."));
    let layers = paths.layers.len() as i32;
    let mut groups: Vec<crate::LrGroup> = paths.embeddings.iter().map(|p| crate::LrGroup { pattern: escape(p), factor: decay.powi(layers + 2) }).collect();
    for (depth, prefix) in paths.layers.values().enumerate() {
        groups.push(crate::LrGroup { pattern: escape(prefix), factor: decay.powi(layers + 1 - depth as i32) });
    }
    groups
}

/// The rows of logits of every held-out batch, in order.
fn logit_rows(predictions: &[TensorData]) -> Option<Vec<Vec<f32>>> {
    let mut rows = Vec::new();
    for p in predictions {
        let width = *p.shape().last()?;
        let values: Vec<f32> = p.clone().convert::<f32>().try_to_vec().ok()?;
        rows.extend(values.chunks(width.max(1)).map(<[f32]>::to_vec));
    }
    Some(rows)
}

/// The metrics of `problem` for logit `rows` against `targets` (in the same order).
pub fn scores<'a>(problem: ProblemType, num_labels: usize, rows: &[Vec<f32>], targets: impl Iterator<Item = &'a Target>) -> BTreeMap<String, f64> {
    let targets: Vec<&Target> = targets.collect();
    let mut out = BTreeMap::new();
    match problem {
        ProblemType::SingleLabelClassification => {
            if let Ok(m) = confusion_matrix(num_labels, rows, &targets) {
                out.insert("accuracy".into(), m.accuracy());
                for (avg, name) in [(Average::Macro, "macro"), (Average::Micro, "micro"), (Average::Weighted, "weighted")] {
                    out.insert(format!("f1_{name}"), m.scores(avg).f1);
                }
                let macro_avg = m.scores(Average::Macro);
                out.insert("precision_macro".into(), macro_avg.precision);
                out.insert("recall_macro".into(), macro_avg.recall);
                out.insert("mcc".into(), m.matthews_corrcoef());
            }
        }
        ProblemType::MultiLabelClassification => {
            if let Ok(m) = multi_label_counts(num_labels, rows, &targets) {
                out.insert("exact_match".into(), m.exact_match());
                out.insert("f1_micro".into(), m.scores(Average::Micro).f1);
                out.insert("f1_macro".into(), m.scores(Average::Macro).f1);
                out.insert("hamming_loss".into(), m.hamming_loss());
            }
        }
        ProblemType::Regression => {
            let predicted: Vec<f64> = rows.iter().map(|r| r.first().copied().unwrap_or(0.0) as f64).collect();
            let truth: Vec<f64> = targets.iter().map(|t| if let Target::Value(v) = t { *v } else { 0.0 }).collect();
            if let Ok(mse) = regression::mean_squared_error(&truth, &predicted) {
                out.insert("mse".into(), mse);
            }
            if let Ok(mae) = regression::mean_absolute_error(&truth, &predicted) {
                out.insert("mae".into(), mae);
            }
            if let Ok(Some(r)) = regression::pearson(&truth, &predicted) {
                out.insert("pearson".into(), r);
            }
            if let Ok(Some(r)) = regression::spearman(&truth, &predicted) {
                out.insert("spearman".into(), r);
            }
        }
    }
    out
}

/// The confusion matrix of logit `rows` (the largest logit is the prediction) against class
/// `targets`.
fn confusion_matrix(num_labels: usize, rows: &[Vec<f32>], targets: &[&Target]) -> Result<ConfusionMatrix, MetricError> {
    let predicted: Vec<usize> = rows.iter().map(|r| argmax(r)).collect();
    let truth: Vec<usize> = targets.iter().map(|t| if let Target::Class(c) = t { *c } else { 0 }).collect();
    ConfusionMatrix::new(num_labels, &truth, &predicted)
}

/// The multi-label counts of logit `rows` (a class is predicted when its logit is positive)
/// against class-set `targets`.
fn multi_label_counts(num_labels: usize, rows: &[Vec<f32>], targets: &[&Target]) -> Result<MultiLabelCounts, MetricError> {
    let predicted: Vec<Vec<bool>> = rows.iter().map(|r| r.iter().map(|&l| l > 0.0).collect()).collect();
    let truth: Vec<Vec<bool>> = targets.iter().map(|t| if let Target::Classes(c) = t { c.clone() } else { vec![false; num_labels] }).collect();
    MultiLabelCounts::new(num_labels, &truth, &predicted)
}

/// The index of the largest value (the first of equals).
fn argmax(row: &[f32]) -> usize {
    row.iter().enumerate().fold((0, f32::NEG_INFINITY), |best, (i, &v)| if v > best.1 { (i, v) } else { best }).0
}

/// The metric names a `problem` reports (for checking `--metric` before a run).
pub fn metric_names(problem: ProblemType) -> &'static [&'static str] {
    match problem {
        ProblemType::SingleLabelClassification => &["loss", "accuracy", "f1_macro", "f1_micro", "f1_weighted", "precision_macro", "recall_macro", "mcc"],
        ProblemType::MultiLabelClassification => &["loss", "exact_match", "f1_micro", "f1_macro", "hamming_loss"],
        ProblemType::Regression => &["loss", "mse", "mae", "pearson", "spearman"],
    }
}
