//! FastBERT's self-distillation (Liu et al. 2020): a fine-tuned classifier's exit classifiers
//! learn to match its own head, whose distribution is the target of every layer below; the
//! backbone and the head stay fixed ([`freeze_all_but_exits`]), and the labels are not read,
//! so unlabelled rows serve as well. Held out: each layer's accuracy, and the curve of
//! accuracy against the layers run over the `speed` threshold ([`exit_curve`]).

use std::collections::BTreeMap;

use burn::module::Module;
use burn::prelude::*;
use sesame_layers::early_exit::{self_distillation_loss, stops};
use sesame_text::labelled::Target;

use super::{ClassificationBatch, SequenceClassification};
use crate::{StepOutput, TrainTask};
use sesame_layers::{ClassifierLayers, TaskModel};

/// Self-distillation of the exit classifiers of `M` on the rows of a [`SequenceClassification`].
#[derive(Clone, Debug)]
pub struct EarlyExitDistillation<M> {
    rows: SequenceClassification<M>,
}

impl<M: TaskModel<Output = ClassifierLayers>> EarlyExitDistillation<M> {
    /// The task on the training and held-out rows of `rows` (single-label).
    pub fn new(rows: SequenceClassification<M>) -> Self {
        Self { rows }
    }

    /// Training batches per epoch.
    pub fn batches_per_epoch(&self) -> u64 {
        self.rows.batches_per_epoch()
    }

    /// Each held-out row's class (batch order), `None` for a row without one.
    fn targets(&self) -> Vec<Option<usize>> {
        self.rows.eval_targets().map(|t| if let Target::Class(c) = t { Some(*c) } else { None }).collect()
    }

    /// The accuracy and layers run at each of `speeds`, from the held-out `predictions`
    /// ([`TrainTask::held_out_scores`]'s); `None` when they do not fit the rows.
    pub fn curve(&self, predictions: &[TensorData], speeds: &[f64]) -> Option<Vec<ExitPoint>> {
        let (layers, targets) = (exit_rows(predictions)?, self.targets());
        Some(speeds.iter().map(|&s| exit_curve(&layers, &targets, s)).collect())
    }
}

/// `model` with every parameter fixed but its exit classifiers' (the field `early_exit`).
pub fn freeze_all_but_exits<M: Module>(model: M) -> M {
    super::freeze_where(model, |path| path.first().is_none_or(|m| m != "early_exit"))
}

impl<M: TaskModel<Output = ClassifierLayers>> TrainTask for EarlyExitDistillation<M> {
    type Model = M;
    type Batch = ClassificationBatch;
    type State = ();

    fn train_batch(&self, index: u64, device: &Device) -> ClassificationBatch {
        self.rows.train_batch(index, device)
    }

    fn held_out_batches(&self, device: &Device) -> Vec<ClassificationBatch> {
        self.rows.held_out_batches(device)
    }

    /// The sum over the exit classifiers of `KL(head ‖ classifier)`; predictions: every
    /// layer's logits `[batch, layers, num_labels]`.
    fn step(&self, model: &M, batch: ClassificationBatch) -> StepOutput {
        let exits = model.exit_logits(batch.input).expect("the task is built for a model with exit classifiers");
        let loss = self_distillation_loss(&exits).mul_scalar(batch.weight);
        StepOutput { loss, metrics: Vec::new(), tokens: batch.tokens, predictions: Some(Tensor::stack::<3>(exits, 1).into_data()) }
    }

    /// `layer_N_accuracy` for every layer N (the last is the model's head), and
    /// `exit_accuracy` and `exit_layers` (the mean layers run) at speed 0.5.
    fn held_out_scores(&self, predictions: &[TensorData]) -> BTreeMap<String, f64> {
        let Some(layers) = exit_rows(predictions) else { return BTreeMap::new() };
        let targets = self.targets();
        let mut out = BTreeMap::new();
        let depth = layers.first().map_or(0, Vec::len);
        for l in 0..depth {
            let correct = layers.iter().zip(&targets).filter(|(row, t)| Some(argmax(&row[l])) == **t).count();
            out.insert(format!("layer_{}_accuracy", l + 1), correct as f64 / layers.len().max(1) as f64);
        }
        let point = exit_curve(&layers, &targets, 0.5);
        out.insert("exit_accuracy".into(), point.accuracy);
        out.insert("exit_layers".into(), point.mean_layers);
        out
    }
}

/// One point of the speed curve.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ExitPoint {
    /// The threshold.
    pub speed: f64,
    /// Accuracy of the rows' predictions where they stopped.
    pub accuracy: f64,
    /// The mean number of layers run.
    pub mean_layers: f64,
    /// Each layer's count of rows that stopped there (1-based layers in order).
    pub exits: Vec<usize>,
}

/// Where each row of `layers` (`[rows][layers][labels]` logits) stops at `speed`, as
/// [`sesame_layers::ForSequenceClassification::classify_early`] decides it (the first layer
/// below the top that [`stops`] at `speed`, else the top), and the accuracy there against
/// `targets`.
pub fn exit_curve(layers: &[Vec<Vec<f32>>], targets: &[Option<usize>], speed: f64) -> ExitPoint {
    let depth = layers.first().map_or(0, Vec::len);
    let mut exits = vec![0; depth];
    let (mut correct, mut run) = (0usize, 0usize);
    for (row, target) in layers.iter().zip(targets) {
        let stop = (0..depth.saturating_sub(1)).find(|&l| stops(entropy(&row[l]), speed)).unwrap_or(depth.saturating_sub(1));
        exits[stop] += 1;
        run += stop + 1;
        correct += usize::from(Some(argmax(&row[stop])) == *target);
    }
    let n = layers.len().max(1) as f64;
    ExitPoint { speed, accuracy: correct as f64 / n, mean_layers: run as f64 / n, exits }
}

/// Each row's logits per layer from held-out predictions `[batch, layers, labels]`.
fn exit_rows(predictions: &[TensorData]) -> Option<Vec<Vec<Vec<f32>>>> {
    let mut rows = Vec::new();
    for p in predictions {
        let &[_, layers, labels] = p.shape().as_slice() else { return None };
        let values: Vec<f32> = p.clone().convert::<f32>().try_to_vec().ok()?;
        rows.extend(values.chunks(layers * labels.max(1)).map(|row| row.chunks(labels.max(1)).map(<[f32]>::to_vec).collect::<Vec<_>>()));
    }
    Some(rows)
}

/// The index of the largest value (the first of ties).
fn argmax(values: &[f32]) -> usize {
    values.iter().enumerate().fold(0, |best, (i, &v)| if v > values[best] { i } else { best })
}

/// The normalised entropy of `softmax(logits)` ([`sesame_layers::early_exit::normalized_entropy`]'s, in f64 on the host).
fn entropy(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let log_z = max + logits.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
    let h: f64 = logits.iter().map(|&x| x as f64 - log_z).map(|lp| -lp.exp() * lp).sum();
    h / (logits.len().max(2) as f64).ln()
}
