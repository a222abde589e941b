//! Knowledge distillation of a masked LM or a fine-tuned sequence classifier into a smaller
//! model of the same family: DistilBERT's soft targets at a temperature (Sanh et al. 2019:
//! `T² · KL` of the softened distributions) with the task's own loss and a cosine loss on the
//! hidden states, and TinyBERT's layer-wise losses (Jiao et al. 2020: MSE of the hidden states
//! and of the attention maps, student layer `m` against teacher layer `g(m)`), each weighted
//! by the user. The teacher is fixed and runs without dropout. A masked LM distils on
//! pre-training batches ([`MaskedLmDistillation`]), a sequence classifier on its task's rows
//! ([`ClassifierDistillation`]).

use std::collections::BTreeMap;

use sesame_layers::Linear;
use burn::prelude::*;
use burn::tensor::activation::{log_sigmoid, log_softmax};
use sesame_layers::{EncoderOutput, ForMaskedLM, Backbone, OutputOptions, ClassifierLayers, SequenceLabels, TaskModel};

use crate::finetune::{ClassificationBatch, SequenceClassification};
use crate::pretraining::{masked_lm_counts, masked_lm_metrics, read_back, Pretraining, PretrainingBatch};
use crate::{Metric, StepOutput, TrainTask};

mod run;
pub use run::{distill_classifier, StudentOptions, CLASSIFIER_WEIGHTS, MASKED_LM_WEIGHTS};

/// The weight of each term of the loss, and the temperature.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DistillLoss {
    /// Softening of both distributions in the soft-target term.
    pub temperature: f64,
    /// `T² · KL(teacher_T ‖ student_T)`, the mean over the rows (DistilBERT's `alpha_ce`).
    pub soft: f64,
    /// The task's own loss on the labels (DistilBERT's `alpha_mlm` for masked LM).
    pub hard: f64,
    /// `1 − cos` of the student's and teacher's last hidden states, the mean over the tokens
    /// (DistilBERT's `alpha_cos`).
    pub cosine: f64,
    /// MSE of the hidden states of mapped layers, embeddings included, over the tokens (TinyBERT).
    pub hidden: f64,
    /// MSE of the attention probabilities of mapped layers over the tokens' rows (TinyBERT's
    /// attention term, on the probabilities rather than the scores; the heads must match).
    pub attention: f64,
    /// `layer_map[m - 1]`: the teacher layer (1-based) that student layer `m` learns from.
    pub layer_map: Vec<usize>,
}

impl DistillLoss {
    /// TinyBERT's uniform map for a student of `student` layers from a teacher of `teacher`:
    /// student layer `m` to teacher layer `m · teacher / student`.
    pub fn uniform_map(student: usize, teacher: usize) -> Vec<usize> {
        (1..=student).map(|m| m * teacher / student.max(1)).collect()
    }

    fn outputs(&self) -> OutputOptions {
        OutputOptions { hidden_states: self.hidden > 0.0 || self.cosine > 0.0, attentions: self.attention > 0.0, ..OutputOptions::default() }
    }

    /// The terms on the outputs of the student's and the teacher's stacks of layers, paired
    /// (asked for by [`Self::outputs`]; an encoder-decoder's two stacks, each under the same
    /// map, add their terms): the cosine of the last states, the MSE of mapped layers' states
    /// (embeddings included) and of their attention maps, over the tokens of `mask`
    /// `[batch, seq]` (1 = token; `None`: all). With `projection`, the student's states are
    /// projected to the teacher's width first (TinyBERT's `W_h`).
    fn layer_terms(&self, stacks: &[(&EncoderOutput, &EncoderOutput)], mask: Option<Tensor<2, Int>>, projection: Option<&Linear>) -> Vec<Term> {
        let project = |x: &Tensor<3>| projection.map_or_else(|| x.clone(), |p| p.forward(x.clone()));
        let token_mask = |x: &Tensor<3>| {
            let [b, seq, _] = x.dims();
            mask.clone().map_or_else(|| Tensor::ones([b, seq, 1], &x.device()), |m| m.float().unsqueeze_dim::<3>(2))
        };
        let (mut cosine, mut hidden, mut attention) = (Vec::new(), Vec::new(), Vec::new());
        for (student, teacher) in stacks {
            if let (Some(s), Some(t)) = (&student.hidden_states, &teacher.hidden_states) {
                if self.cosine > 0.0 {
                    let (s, t) = (project(s.last().expect("states")), t.last().expect("states").clone().detach());
                    cosine.push(cosine_distance(s.clone(), t, token_mask(&s)));
                }
                if self.hidden > 0.0 {
                    hidden.push(hidden_mse(project(&s[0]), t[0].clone().detach(), token_mask(&s[0])));
                    for (m, &g) in self.layer_map.iter().enumerate() {
                        hidden.push(hidden_mse(project(&s[m + 1]), t[g].clone().detach(), token_mask(&s[m + 1])));
                    }
                }
            }
            if let (Some(s), Some(t)) = (&student.attentions, &teacher.attentions) {
                if self.attention > 0.0 {
                    let [b, _, seq, _] = s[0].dims();
                    let queries = mask.clone().map_or_else(|| Tensor::ones([b, 1, seq, 1], &s[0].device()), |m| m.float().reshape([b, 1, seq, 1]));
                    for (m, &g) in self.layer_map.iter().enumerate() {
                        attention.push(attention_mse(s[m].clone(), t[g - 1].clone().detach(), queries.clone()));
                    }
                }
            }
        }
        let sum = |parts: Vec<Tensor<1>>| parts.into_iter().reduce(|a, b| a + b);
        let mut terms = Vec::new();
        terms.extend(sum(cosine).map(|c| ("cosine_loss", self.cosine, c)));
        terms.extend(sum(hidden).map(|h| ("hidden_loss", self.hidden, h)));
        terms.extend(sum(attention).map(|a| ("attention_loss", self.attention, a)));
        terms
    }
}

/// A term of the loss: its metric's name, its weight and its value `[1]`.
type Term = (&'static str, f64, Tensor<1>);

/// The weighted sum of `terms`, and each term as a metric of its own when `report` (a
/// micro-batch without rows of its own, weight 0, reports nothing).
fn weigh(terms: Vec<Term>, report: bool, device: &Device) -> (Tensor<1>, Vec<Metric>) {
    let mut loss = Tensor::<1>::zeros([1], device);
    let mut metrics = Vec::new();
    for (name, weight, term) in terms {
        if report {
            metrics.push(Metric::mean(name, term.clone().try_into_scalar::<f32>().map_or(f64::NAN, f64::from), 1.0));
        }
        loss = loss + term.mul_scalar(weight);
    }
    (loss, metrics)
}

/// Distillation of a teacher sequence classifier `M` into a student of the same type (of
/// fewer layers) on the rows of a [`SequenceClassification`], scored as it is (accuracy, F1, …).
pub struct ClassifierDistillation<M> {
    rows: SequenceClassification<M>,
    teacher: M,
    loss: DistillLoss,
}

impl<M: TaskModel<Output = ClassifierLayers>> ClassifierDistillation<M> {
    /// The task: `teacher` (fixed, without dropout, on the training device) teaches on `rows`.
    pub fn new(rows: SequenceClassification<M>, teacher: M, loss: DistillLoss) -> Self {
        Self { rows, teacher, loss }
    }

    /// The held-out report of the student's `predictions` (per class, confusion matrix).
    pub fn report(&self, predictions: &[TensorData]) -> serde_json::Value {
        self.rows.report(predictions)
    }

    /// Training batches per epoch.
    pub fn batches_per_epoch(&self) -> u64 {
        self.rows.batches_per_epoch()
    }
}

impl<M: TaskModel<Output = ClassifierLayers>> TrainTask for ClassifierDistillation<M> {
    type Model = M;
    type Batch = ClassificationBatch;
    type State = ();

    fn train_batch(&self, index: u64, device: &Device) -> ClassificationBatch {
        self.rows.train_batch(index, device)
    }

    fn held_out_batches(&self, device: &Device) -> Vec<ClassificationBatch> {
        self.rows.held_out_batches(device)
    }

    /// The weighted sum of the terms; each term is a metric of its own.
    fn step(&self, student: &M, batch: ClassificationBatch) -> StepOutput {
        let options = self.loss.outputs();
        let mask = batch.input.attention_mask.clone();
        let teacher = self.teacher.run(batch.input.clone(), options);
        let out = student.run(batch.input.clone(), options);
        let l = &self.loss;
        let mut terms = Vec::new();
        if l.soft > 0.0 {
            let (s, t) = (out.logits.clone(), teacher.logits.clone());
            let soft = match batch.labels {
                SequenceLabels::SingleLabel(_) => soft_targets(s, t, l.temperature),
                SequenceLabels::MultiLabel(_) => soft_targets_sigmoid(s, t, l.temperature),
                SequenceLabels::Regression(_) => (s - t.detach()).powi_scalar(2).mean().reshape([1]),
            };
            terms.push(("soft_loss", l.soft, soft));
        }
        if l.hard > 0.0 {
            terms.push(("hard_loss", l.hard, batch.labels.loss(out.logits.clone())));
        }
        let stacks: Vec<_> = out.stacks.iter().zip(&teacher.stacks).collect();
        terms.extend(l.layer_terms(&stacks, mask, None));
        let (loss, mut metrics) = weigh(terms, batch.weight > 0.0, &out.logits.device());
        metrics.extend(batch.accuracy(&out.logits));
        StepOutput { loss: loss.mul_scalar(batch.weight), metrics, tokens: batch.tokens, predictions: Some(out.logits.into_data()) }
    }

    fn held_out_scores(&self, predictions: &[TensorData]) -> BTreeMap<String, f64> {
        self.rows.held_out_scores(predictions)
    }
}

/// `T² · KL(softmax(teacher / T) ‖ softmax(student / T))`, the mean over the rows, of logits
/// `[batch, labels]` (no gradient reaches the teacher).
pub fn soft_targets(student: Tensor<2>, teacher: Tensor<2>, temperature: f64) -> Tensor<1> {
    let [rows, _] = student.dims();
    let every_row = Tensor::<1, Int>::ones([rows], &student.device()).bool();
    soft_targets_where(student, teacher, temperature, every_row)
}

/// `T² · KL(σ(teacher / T) ‖ σ(student / T))` of each label's yes/no distribution, summed over
/// the labels, the mean over the rows, of multi-label logits `[batch, labels]` (no gradient
/// reaches the teacher). A regression teacher's number has no temperature: its soft target is
/// the squared difference of the outputs.
pub fn soft_targets_sigmoid(student: Tensor<2>, teacher: Tensor<2>, temperature: f64) -> Tensor<1> {
    let [rows, _] = student.dims();
    let (t, s) = (teacher.detach().div_scalar(temperature), student.div_scalar(temperature));
    let (yes_t, no_t) = (log_sigmoid(t.clone()), log_sigmoid(t.neg()));
    let (yes_s, no_s) = (log_sigmoid(s.clone()), log_sigmoid(s.neg()));
    let kl = yes_t.clone().exp().mul(yes_t - yes_s) + no_t.clone().exp().mul(no_t - no_s);
    kl.sum().reshape([1]).mul_scalar(temperature * temperature / rows as f64)
}

/// [`soft_targets`] over the rows where `keep` `[rows]` is true (a masked LM's predicted
/// positions: not the placeholder of a batch that masks nothing); 0 when none is.
pub fn soft_targets_where(student: Tensor<2>, teacher: Tensor<2>, temperature: f64, keep: Tensor<1, Bool>) -> Tensor<1> {
    let keep = keep.float();
    let log_t = log_softmax(teacher.detach().div_scalar(temperature), 1);
    let log_s = log_softmax(student.div_scalar(temperature), 1);
    let kl = log_t.clone().exp().mul(log_t - log_s).sum_dim(1).squeeze_dim::<1>(1);
    let rows = keep.clone().sum().clamp_min(1.0);
    kl.mul(keep).sum().div(rows).mul_scalar(temperature * temperature).reshape([1])
}

/// A student and, for a student narrower or wider than its teacher, the projection of its
/// hidden states to the teacher's width that the hidden-state and cosine terms read (TinyBERT's
/// `W_h`, trained with the student and not part of it): what distillation trains.
#[derive(Module, Debug)]
pub struct Distilled<M: Module> {
    /// The student.
    pub student: M,
    /// `student width -> teacher width`, when they differ.
    pub projection: Option<Linear>,
}

/// Distillation of a teacher masked LM `ForMaskedLM<B>` into a student of the same family on
/// masked-LM pre-training batches, as DistilBERT was trained: soft targets over the
/// vocabulary at the masked positions (`T² · KL`), the student's own MLM loss (the `hard`
/// term) and the cosine of the last hidden states over the tokens, with TinyBERT's layer-wise
/// terms as options. Metrics are the student's `mlm_loss`, `perplexity` and `mlm_accuracy`, as
/// plain pre-training reports them, and each term; the teacher's held-out MLM loss is a
/// baseline (`teacher_mlm_loss`).
pub struct MaskedLmDistillation<B: Backbone> {
    data: Pretraining<ForMaskedLM<B>>,
    teacher: ForMaskedLM<B>,
    loss: DistillLoss,
    device: Device,
}

impl<B: Backbone> MaskedLmDistillation<B> {
    /// The task: `teacher` (fixed, without dropout, on `device`) teaches on `data`'s batches.
    pub fn new(data: Pretraining<ForMaskedLM<B>>, teacher: ForMaskedLM<B>, loss: DistillLoss, device: Device) -> Self {
        Self { data, teacher, loss, device }
    }
}

impl<B: Backbone> TrainTask for MaskedLmDistillation<B> {
    type Model = Distilled<ForMaskedLM<B>>;
    type Batch = PretrainingBatch;
    type State = ();

    fn train_batch(&self, index: u64, device: &Device) -> PretrainingBatch {
        self.data.train_batch(index, device)
    }

    fn held_out_batches(&self, device: &Device) -> Vec<PretrainingBatch> {
        self.data.held_out_batches(device)
    }

    /// The unigram baseline of plain pre-training, and the teacher's held-out MLM loss: what
    /// the student's `mlm_loss` is to approach.
    fn baselines(&self) -> BTreeMap<String, f64> {
        let mut baselines = self.data.baselines();
        let (mut sum, mut count) = (0.0, 0.0);
        for batch in self.data.held_out_batches(&self.device) {
            let masked = batch.masked.targets.clone().not_equal_elem(-100).int().sum();
            let out = crate::objective::forward_masked(&self.teacher, batch.input, &batch.masked, OutputOptions::default());
            let values = read_back(Tensor::cat(vec![out.loss.expect("loss"), masked.float()], 0), f64::NAN);
            sum += values[0] * values[1];
            count += values[1];
        }
        if count > 0.0 {
            baselines.insert("teacher_mlm_loss".into(), sum / count);
        }
        baselines
    }

    fn step(&self, model: &Self::Model, batch: PretrainingBatch) -> StepOutput {
        masked_lm_distillation_step(&model.student, model.projection.as_ref(), &self.teacher, &self.loss, batch)
    }
}

/// Loss and metrics of `student` learning from `teacher` on a masked batch
/// ([`MaskedLmDistillation`]'s step; `projection` as [`Distilled`]'s): the weighted terms of
/// `loss`, each a metric, and the student's `mlm_loss`, `perplexity` and `mlm_accuracy`.
pub fn masked_lm_distillation_step<B: Backbone>(
    student: &ForMaskedLM<B>,
    projection: Option<&Linear>,
    teacher: &ForMaskedLM<B>,
    loss: &DistillLoss,
    batch: PretrainingBatch,
) -> StepOutput {
    let options = loss.outputs();
    let mask = batch.input.attention_mask.clone();
    let targets = batch.masked.targets.clone();
    let predicted_rows = targets.clone().not_equal_elem(-100);
    let teacher = crate::objective::forward_masked(&teacher, batch.input.clone(), &batch.masked, options);
    let out = crate::objective::forward_masked(&student, batch.input, &batch.masked, options);
    let mlm_loss = out.loss.clone().expect("forward_masked gives the loss");
    let l = loss;
    let mut terms = Vec::new();
    if l.soft > 0.0 {
        terms.push(("soft_loss", l.soft, soft_targets_where(out.logits.clone(), teacher.logits.clone(), l.temperature, predicted_rows)));
    }
    if l.hard > 0.0 {
        terms.push(("hard_loss", l.hard, mlm_loss.clone()));
    }
    terms.extend(l.layer_terms(&[(&out.encoder, &teacher.encoder)], mask, projection));
    let (loss, mut metrics) = weigh(terms, true, &mlm_loss.device());
    let counts = read_back(Tensor::cat(masked_lm_counts(out.logits, targets).to_vec(), 0).float(), 0.0);
    metrics.extend(masked_lm_metrics(read_back(mlm_loss, f64::NAN)[0], counts[0], counts[1]));
    StepOutput { loss, metrics, tokens: batch.tokens, predictions: None }
}

/// The mean over the tokens (`mask` `[batch, seq, 1]`, 1 for tokens) of the mean squared
/// difference of `student` and `teacher` states `[batch, seq, hidden]`.
pub fn hidden_mse(student: Tensor<3>, teacher: Tensor<3>, mask: Tensor<3>) -> Tensor<1> {
    let width = student.dims()[2] as f64;
    let tokens = mask.clone().sum();
    let squared = (student - teacher).powi_scalar(2).mul(mask).sum().div_scalar(width);
    squared.div(tokens).reshape([1])
}

/// The mean squared difference of attention probabilities `[batch, heads, seq, seq]` over the
/// rows of the queries that are tokens (`queries` `[batch, 1, seq, 1]`, 1 for tokens): a
/// padding position's row is no attention of the text.
pub fn attention_mse(student: Tensor<4>, teacher: Tensor<4>, queries: Tensor<4>) -> Tensor<1> {
    let [_, heads, _, keys] = student.dims();
    let squared = (student - teacher).powi_scalar(2).mul(queries.clone()).sum();
    squared.div(queries.sum().mul_scalar((heads * keys) as f64)).reshape([1])
}

/// The mean over the tokens of `1 − cos(student, teacher)` of states `[batch, seq, hidden]`.
pub fn cosine_distance(student: Tensor<3>, teacher: Tensor<3>, mask: Tensor<3>) -> Tensor<1> {
    let dot = student.clone().mul(teacher.clone()).sum_dim(2);
    let norms = student.powi_scalar(2).sum_dim(2).sqrt().mul(teacher.powi_scalar(2).sum_dim(2).sqrt()).clamp_min(1e-8);
    let distance = dot.div(norms).neg().add_scalar(1.0);
    distance.mul(mask.clone()).sum().div(mask.sum()).reshape([1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t3(values: &[f32], shape: [usize; 3]) -> Tensor<3> {
        Tensor::from_data(TensorData::new(values.to_vec(), shape), &Device::default())
    }

    fn scalar(t: Tensor<1>) -> f64 {
        t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()[0]
    }

    #[test]
    fn soft_targets_are_t_squared_times_the_kl_of_the_softened_distributions() {
        let device = Device::default();
        let (s, t) = ([1.0f32, -1.0, 0.5, 0.0, 2.0, -2.0], [3.0f32, 0.0, -1.0, 1.0, 1.0, 1.0]);
        let tensor = |v: &[f32]| Tensor::<2>::from_data(TensorData::new(v.to_vec(), [2, 3]), &device);
        let temperature = 2.0;
        let softmax = |row: &[f32]| {
            let z: f64 = row.iter().map(|&v| (v as f64 / temperature).exp()).sum();
            row.iter().map(|&v| (v as f64 / temperature).exp() / z).collect::<Vec<_>>()
        };
        let mut want = 0.0;
        for r in 0..2 {
            let (p, q) = (softmax(&t[r * 3..r * 3 + 3]), softmax(&s[r * 3..r * 3 + 3]));
            want += (0..3).map(|i| p[i] * (p[i] / q[i]).ln()).sum::<f64>();
        }
        want *= temperature * temperature / 2.0;
        let got = scalar(soft_targets(tensor(&s), tensor(&t), temperature));
        assert!((got - want).abs() < 1e-5, "{got} against {want}");
    }

    #[test]
    fn multi_label_soft_targets_are_the_kl_of_each_labels_softened_yes_no() {
        let device = Device::default();
        let (s, t) = ([1.0f32, -2.0, 0.5, 3.0], [2.0f32, 0.0, -1.0, 1.0]);
        let tensor = |v: &[f32]| Tensor::<2>::from_data(TensorData::new(v.to_vec(), [2, 2]), &device);
        let temperature = 2.0;
        let sigmoid = |v: f32| 1.0 / (1.0 + (-(v as f64) / temperature).exp());
        let mut want = 0.0;
        for i in 0..4 {
            let (p, q) = (sigmoid(t[i]), sigmoid(s[i]));
            want += p * (p / q).ln() + (1.0 - p) * ((1.0 - p) / (1.0 - q)).ln();
        }
        want *= temperature * temperature / 2.0;
        let got = scalar(soft_targets_sigmoid(tensor(&s), tensor(&t), temperature));
        assert!((got - want).abs() < 1e-5, "{got} against {want}");
    }

    #[test]
    fn the_hidden_losses_skip_padding() {
        // Two rows of two tokens, width 2; row 1's second token is padding and differs wildly.
        let student = t3(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 100.0, -100.0], [2, 2, 2]);
        let teacher = t3(&[1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0], [2, 2, 2]);
        let mask = t3(&[1.0, 1.0, 1.0, 0.0], [2, 2, 1]);
        // Squared differences per token, over the width: 0, 0.5, 0.5 (the padding left out).
        let mse = scalar(hidden_mse(student.clone(), teacher.clone(), mask.clone()));
        assert!((mse - 1.0 / 3.0).abs() < 1e-6, "{mse}");
        // 1 − cos per token: 0, 1 − 1/√2, 1 − 1/√2.
        let cos = scalar(cosine_distance(student, teacher, mask));
        let want = 2.0 * (1.0 - std::f64::consts::FRAC_1_SQRT_2) / 3.0;
        assert!((cos - want).abs() < 1e-6, "{cos} against {want}");
    }

    #[test]
    fn the_uniform_map_ends_at_the_top_layer() {
        assert_eq!(DistillLoss::uniform_map(3, 6), vec![2, 4, 6]);
        assert_eq!(DistillLoss::uniform_map(4, 12), vec![3, 6, 9, 12]);
        assert_eq!(DistillLoss::uniform_map(1, 2), vec![2]);
    }
}
