//! Fine-tuning on users' labelled text. [`finetune`] is the whole job in one call (data,
//! training, evaluation, export); the parts are here too: sequence classification (one class,
//! any set of classes, or a number per text or pair of texts) as a [`TrainTask`] for the
//! shared trainer, scored on the held-out set with the metrics the field reports
//! (`sesame-metrics`), and tagging and question answering in their modules.
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
use sesame_layers::{EncoderInput, OutputOptions, SequenceLabels};
pub use sesame_layers::{ClassifierLayers, SpanLogits, TaskModel, TokenLogits};
use sesame_metrics::classification::{ConfusionMatrix, MultiLabelCounts};
use sesame_metrics::{regression, Average, MetricError};
use sesame_text::labelled::{ProblemType, Target};
use sesame_text::{mix_seeds, EncodedText, Tokenizer, TokenizerError};

use crate::{Metric, StepOutput, TrainTask};

mod early_exit;
mod embedding;
mod listwise;
mod qa;
mod rerank;
pub(crate) mod run;
mod tagging;
pub use early_exit::{exit_curve, freeze_all_but_exits, EarlyExitDistillation, ExitPoint};
pub use embedding::{check_loss, check_rows, corpus_scores, no_duplicate_batches, RowsNeeded, Embedding, EmbeddingBatch, EmbeddingObjective, EmbeddingTraining, Evaluation, RetrievalCorpus, TextSet};
pub use run::{finetune, save_model, ColumnNames, FeatureLayer, FinetuneOptions, FinetuneTask, Finetuned, Init};
pub use listwise::{LambdaWeighting, Listwise, ListwiseLoss, ScoreActivation};
pub use rerank::{Candidates, RerankBatch, RerankLoss, RerankRows, RerankTarget, RerankTraining, RERANK_METRICS};
pub use qa::{QaBatch, QaSet, QaWindow, QuestionAnswering, QA_METRICS};
pub use tagging::{TaggedSet, TaggedWindow, TaggingBatch, TokenClassification, ENTITY_METRICS, WORD_METRICS};

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
    /// The factor of the mean loss ([`Part::weight`]; 1 held out).
    pub weight: f32,
}

impl ClassificationBatch {
    /// The `accuracy` of single-label `logits` `[rows, labels]` on the batch; none for other
    /// problems and for a micro-batch without rows of its own (weight 0).
    pub fn accuracy(&self, logits: &Tensor<2>) -> Option<Metric> {
        let (SequenceLabels::SingleLabel(labels), true) = (&self.labels, self.weight > 0.0) else { return None };
        let correct = logits.clone().argmax(1).reshape([self.rows]).equal(labels.clone()).float().sum();
        Some(Metric::mean("accuracy", correct.try_into_scalar::<f32>().map_or(f64::NAN, f64::from), self.rows as f64))
    }
}

/// Fine-tuning a [`TaskModel`] `M` on a [`LabelledSet`], evaluated on another.
#[derive(Clone, Debug)]
pub struct SequenceClassification<M> {
    train: LabelledSet,
    eval: LabelledSet,
    /// Held-out rows in batch order (sorted by length), as indices into `eval`.
    eval_order: Vec<usize>,
    tokenizer: Tokenizer,
    problem: ProblemType,
    num_labels: usize,
    batching: Batching,
    model: std::marker::PhantomData<fn() -> M>,
}

impl<M> SequenceClassification<M> {
    /// The task of `problem` with `num_labels` outputs on `train`, held out `eval`, in batches
    /// cut by `batching` and padded by `tokenizer`.
    pub fn new(train: LabelledSet, eval: LabelledSet, tokenizer: Tokenizer, problem: ProblemType, num_labels: usize, batching: Batching) -> Self {
        let mut eval_order: Vec<usize> = (0..eval.len()).collect();
        eval_order.sort_by_key(|&i| eval.encoded[i].len());
        Self { train, eval, eval_order, tokenizer, problem, num_labels, batching, model: std::marker::PhantomData }
    }

    /// Training batches per epoch (the last one smaller when the rows do not divide evenly).
    pub fn batches_per_epoch(&self) -> u64 {
        self.batching.per_epoch(self.train.len())
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
        ClassificationBatch { input, labels, rows: b, tokens, weight: 1.0 }
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

impl<M: TaskModel<Output = ClassifierLayers>> TrainTask for SequenceClassification<M> {
    type Model = M;
    type Batch = ClassificationBatch;
    type State = ();

    /// Micro-batch `index` ([`Batching::part`]), its loss weighted by its share of the batch's rows.
    fn train_batch(&self, index: u64, device: &Device) -> ClassificationBatch {
        let part = self.batching.part(self.train.len(), index);
        let weight = part.weight(|rows| rows.len() as f64);
        ClassificationBatch { weight, ..self.batch(&self.train, &part.rows, device) }
    }

    /// The held-out rows sorted by length, in batches.
    fn held_out_batches(&self, device: &Device) -> Vec<ClassificationBatch> {
        self.eval_order.chunks(self.batching.batch_size).map(|rows| self.batch(&self.eval, rows, device)).collect()
    }

    fn step(&self, model: &M, batch: ClassificationBatch) -> StepOutput {
        let logits = model.run(batch.input.clone(), OutputOptions::logits_only()).logits;
        let loss = batch.labels.loss(logits.clone()).mul_scalar(batch.weight);
        let metrics = batch.accuracy(&logits).into_iter().collect();
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

/// How a fine-tuning task cuts its training rows into the trainer's micro-batches: batches of
/// `batch_size` rows ([`epoch_batch`]), each split into `parts` micro-batches that a CPU's
/// threads train at once (transformers' batch, on every core). Each part's mean loss is weighted
/// by its share of the batch, so that the gradient is the whole batch's mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batching {
    /// Rows per optimizer batch (`per_device_train_batch_size`).
    pub batch_size: usize,
    /// Micro-batches per batch (the trainer's `grad_accum` is `parts` times the user's).
    pub parts: usize,
    /// The seed of the epochs' shuffles.
    pub seed: u64,
}

/// One micro-batch: part of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Its rows (the batch's first, weighted 0, when the batch has fewer rows than parts).
    pub rows: Vec<usize>,
    /// The rows of its whole batch.
    pub batch: Vec<usize>,
    /// Micro-batches per batch.
    pub parts: usize,
    /// Whether the part has no rows of its own.
    pub empty: bool,
}

impl Batching {
    /// Optimizer batches per epoch over `rows` rows (the last one smaller when they do not
    /// divide evenly).
    pub fn per_epoch(&self, rows: usize) -> u64 {
        rows.div_ceil(self.batch_size.max(1)) as u64
    }

    /// Micro-batch `index` over `rows` training rows: part `index % parts` of batch
    /// `index / parts`; the parts of a batch differ by at most one row.
    pub fn part(&self, rows: usize, index: u64) -> Part {
        let parts = self.parts.max(1);
        let batch = epoch_batch(rows, self.batch_size.max(1), self.seed, index / parts as u64);
        let (p, n) = ((index % parts as u64) as usize, batch.len());
        let mine = batch[p * n / parts..(p + 1) * n / parts].to_vec();
        let empty = mine.is_empty();
        Part { rows: if empty { batch[..1.min(n)].to_vec() } else { mine }, batch, parts, empty }
    }
}

impl Part {
    /// The factor of this part's mean loss that makes the trainer's average over the parts the
    /// batch's mean: its share of the batch's `units` (rows, or labelled tokens) times the
    /// parts; 0 for an empty part.
    pub fn weight(&self, units: impl Fn(&[usize]) -> f64) -> f32 {
        let total = units(&self.batch);
        if self.empty || total <= 0.0 { 0.0 } else { (units(&self.rows) / total * self.parts as f64) as f32 }
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

/// Feature extraction (`--freeze`): `model` with the parameters of its base model (the field
/// [`TaskModel::BASE`] names: the embeddings and the encoder layers) fixed, except
/// a pooler's (`base.pooler.…`, the dense layer on the first token that BERT's and ALBERT's
/// classifiers read), which learns with the task head, as the dense layer of RoBERTa's and
/// ELECTRA's heads (and XLNet's summary, BART's head) does. A pooler pre-trained on the top
/// layer would give nothing to learn from when the features come from a lower one.
pub fn freeze_base<M: TaskModel>(model: M) -> M {
    freeze_where(model, |path| path.first().is_some_and(|m| m == M::BASE) && !path.iter().any(|m| m == "pooler"))
}

/// `model` with the parameters fixed whose module path (field names from the root) `fixed`
/// picks.
pub(crate) fn freeze_where<M: Module>(model: M, fixed: impl Fn(&[String]) -> bool) -> M {
    struct Freeze<F>(Vec<String>, F);
    impl<F: Fn(&[String]) -> bool> burn::module::ModuleMapper for Freeze<F> {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.0.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.0.pop();
        }
        fn map_float<const D: usize>(&mut self, param: burn::module::Param<Tensor<D>>) -> burn::module::Param<Tensor<D>> {
            if (self.1)(&self.0) { param.set_require_grad(false) } else { param }
        }
    }
    model.map(&mut Freeze(Vec::new(), fixed))
}

/// ELECTRA's layer-wise learning-rate decay for fine-tuning (google-research/electra,
/// `_get_layer_lrs`): the task head learns at the full rate, the top encoder layer at
/// `decay²`, each layer below at `decay` times the rate of the one above, the embeddings at
/// `decay^(L+2)`. The layers are the `layers.N` modules of `model`'s encoder (a shared layer,
/// as ALBERT's, counts once) or XLNet's `layer.N`; the embeddings every module whose name has
/// `embedding`. No groups when the model has no such layers, or decoder layers as well (an
/// encoder-decoder, for which the recipe says nothing).
pub fn layer_lr_decay<M: Module>(model: &M, decay: f64) -> Vec<crate::LrGroup> {
    #[derive(Default)]
    struct Paths {
        path: Vec<String>,
        layers: std::collections::BTreeMap<usize, String>,
        embeddings: std::collections::BTreeSet<String>,
        /// Whether the model has decoder layers (an encoder-decoder: no one stack to decay over).
        decoder: bool,
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
            self.decoder |= p.iter().any(|s| s.contains("decoder")) && p.iter().any(|s| s == "layers");
            let stack = |i: usize| (p[i - 1] == "layers" && in_encoder(i)) || (p[i - 1] == "layer" && i == 2);
            if let Some(i) = (1..p.len()).find(|&i| stack(i) && p[i].parse::<usize>().is_ok()) {
                self.layers.insert(p[i].parse().unwrap_or_default(), p[..=i].join("."));
            } else if let Some(i) = p.iter().position(|s| s.contains("embedding")) {
                self.embeddings.insert(p[..=i].join("."));
            }
        }
    }
    let mut paths = Paths::default();
    model.visit(&mut paths);
    if paths.layers.is_empty() || paths.decoder {
        return Vec::new();
    }
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

#[cfg(test)]
mod tests {
    use super::Batching;

    #[test]
    fn parts_cover_each_batch_once_and_their_weights_make_the_batch_mean() {
        // 9 rows in batches of 4 (4, 4, 1) split into 3 parts: the last batch leaves two parts
        // empty, weighted 0.
        let batching = Batching { batch_size: 4, parts: 3, seed: 7 };
        let whole = Batching { parts: 1, ..batching };
        for batch in 0..6u64 {
            let parts: Vec<_> = (0..3).map(|p| batching.part(9, batch * 3 + p)).collect();
            assert_eq!(parts[0].batch, whole.part(9, batch).rows, "batch {batch}: the same rows as unsplit");
            let mut rows: Vec<usize> = parts.iter().filter(|p| !p.empty).flat_map(|p| p.rows.clone()).collect();
            rows.sort();
            let mut expected = parts[0].batch.clone();
            expected.sort();
            assert_eq!(rows, expected, "batch {batch}: every row in one part");
            // Units per row: i + 1 (say, labelled tokens). The trainer averages the parts'
            // weighted means: that must be the batch's mean over units.
            let units = |rows: &[usize]| rows.iter().map(|&i| (i + 1) as f64).sum::<f64>();
            let weights: Vec<f32> = parts.iter().map(|p| p.weight(units)).collect();
            assert!((weights.iter().sum::<f32>() - 3.0).abs() < 1e-5, "batch {batch}: weights {weights:?}");
            let value = |i: usize| (i * i) as f64;
            let part_mean = |rows: &[usize]| rows.iter().map(|&i| value(i) * (i + 1) as f64).sum::<f64>() / units(rows);
            let averaged: f64 = parts.iter().zip(&weights).map(|(p, &w)| w as f64 * part_mean(&p.rows)).sum::<f64>() / 3.0;
            let batch_mean = part_mean(&parts[0].batch);
            assert!((averaged - batch_mean).abs() < 1e-4 * batch_mean.max(1.0), "batch {batch}: {averaged} against {batch_mean}");
        }
        assert_eq!((0..3).filter(|&p| batching.part(9, 2 * 3 + p).empty).count(), 2, "a one-row batch leaves two parts empty");
    }
}
