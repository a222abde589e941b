//! Knowledge distillation of a fine-tuned sequence classifier into a smaller one of the same
//! family: DistilBERT's soft targets at a temperature (Sanh et al. 2019: `T² · KL` of the
//! softened distributions) with the hard-label loss and a cosine loss on the hidden states,
//! and TinyBERT's layer-wise losses (Jiao et al. 2020: MSE of the hidden states and of the
//! attention maps, student layer `m` against teacher layer `g(m)`), each weighted by the user.
//! The teacher is fixed and runs without dropout.

use std::collections::BTreeMap;

use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use sesame_layers::{Backbone, ForSequenceClassification, OutputOptions, SequenceHead};

use crate::finetune::{ClassificationBatch, SequenceClassification};
use crate::{Metric, StepOutput, TrainTask};

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
    /// MSE of the attention probabilities of mapped layers (TinyBERT's attention term, on
    /// the probabilities rather than the scores; the heads must match).
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
        OutputOptions { hidden_states: self.hidden > 0.0 || self.cosine > 0.0, attentions: self.attention > 0.0 }
    }
}

/// Distillation of a teacher `ForSequenceClassification<B, H>` into a student of the same type
/// on the rows of a [`SequenceClassification`], scored as it is (accuracy, F1, …).
pub struct ClassifierDistillation<B: Backbone, H: SequenceHead<B>> {
    rows: SequenceClassification<ForSequenceClassification<B, H>>,
    teacher: ForSequenceClassification<B, H>,
    loss: DistillLoss,
}

impl<B: Backbone, H: SequenceHead<B>> ClassifierDistillation<B, H> {
    /// The task: `teacher` (fixed, without dropout, on the training device) teaches on `rows`.
    pub fn new(rows: SequenceClassification<ForSequenceClassification<B, H>>, teacher: ForSequenceClassification<B, H>, loss: DistillLoss) -> Self {
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

impl<B: Backbone, H: SequenceHead<B>> TrainTask for ClassifierDistillation<B, H>
where
    ForSequenceClassification<B, H>: sesame_layers::SequenceClassifier,
{
    type Model = ForSequenceClassification<B, H>;
    type Batch = ClassificationBatch;
    type State = ();

    fn train_batch(&self, index: u64, device: &Device) -> ClassificationBatch {
        self.rows.train_batch(index, device)
    }

    fn held_out_batches(&self, device: &Device) -> Vec<ClassificationBatch> {
        self.rows.held_out_batches(device)
    }

    /// The weighted sum of the terms; each term is a metric of its own.
    fn step(&self, student: &Self::Model, batch: ClassificationBatch) -> StepOutput {
        let options = self.loss.outputs();
        let mask = batch.input.attention_mask.clone();
        let teacher = self.teacher.forward(batch.input.clone(), None, options);
        let out = student.forward(batch.input.clone(), None, options);
        let l = &self.loss;
        let mut terms: Vec<(&str, f64, Tensor<1>)> = Vec::new();
        if l.soft > 0.0 {
            terms.push(("soft_loss", l.soft, soft_targets(out.logits.clone(), teacher.logits.clone(), l.temperature)));
        }
        if l.hard > 0.0 {
            terms.push(("hard_loss", l.hard, batch.labels.loss(out.logits.clone())));
        }
        let token_mask = |x: &Tensor<3>| {
            let [b, seq, _] = x.dims();
            mask.clone().map_or_else(|| Tensor::ones([b, seq, 1], &x.device()), |m| m.float().unsqueeze_dim::<3>(2))
        };
        if let (Some(s), Some(t)) = (&out.encoder.hidden_states, &teacher.encoder.hidden_states) {
            if l.cosine > 0.0 {
                let (s, t) = (s.last().expect("states").clone(), t.last().expect("states").clone().detach());
                terms.push(("cosine_loss", l.cosine, cosine_distance(s.clone(), t, token_mask(&s))));
            }
            if l.hidden > 0.0 {
                let mut sum = hidden_mse(s[0].clone(), t[0].clone().detach(), token_mask(&s[0]));
                for (m, &g) in l.layer_map.iter().enumerate() {
                    sum = sum + hidden_mse(s[m + 1].clone(), t[g].clone().detach(), token_mask(&s[m + 1]));
                }
                terms.push(("hidden_loss", l.hidden, sum));
            }
        }
        if let (Some(s), Some(t)) = (&out.encoder.attentions, &teacher.encoder.attentions) {
            if l.attention > 0.0 {
                let mut sum = Tensor::<1>::zeros([1], &out.logits.device());
                for (m, &g) in l.layer_map.iter().enumerate() {
                    sum = sum + (s[m].clone() - t[g - 1].clone().detach()).powi_scalar(2).mean().reshape([1]);
                }
                terms.push(("attention_loss", l.attention, sum));
            }
        }
        let mut loss = Tensor::<1>::zeros([1], &out.logits.device());
        let mut metrics = Vec::new();
        for (name, weight, term) in terms {
            // A micro-batch without rows of its own (weight 0) reports nothing.
            if batch.weight > 0.0 {
                metrics.push(Metric::mean(name, term.clone().try_into_scalar::<f32>().map_or(f64::NAN, f64::from), 1.0));
            }
            loss = loss + term.mul_scalar(weight);
        }
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
    let log_t = log_softmax(teacher.detach().div_scalar(temperature), 1);
    let log_s = log_softmax(student.div_scalar(temperature), 1);
    let kl = log_t.clone().exp().mul(log_t - log_s).sum();
    kl.reshape([1]).mul_scalar(temperature * temperature / rows as f64)
}

/// The mean over the tokens (`mask` `[batch, seq, 1]`, 1 for tokens) of the mean squared
/// difference of `student` and `teacher` states `[batch, seq, hidden]`.
pub fn hidden_mse(student: Tensor<3>, teacher: Tensor<3>, mask: Tensor<3>) -> Tensor<1> {
    let width = student.dims()[2] as f64;
    let tokens = mask.clone().sum();
    let squared = (student - teacher).powi_scalar(2).mul(mask).sum().div_scalar(width);
    squared.div(tokens).reshape([1])
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
