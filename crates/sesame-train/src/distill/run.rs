//! One call for distilling a fine-tuned sequence classifier: [`distill_classifier`] teaches a
//! student of the same family with fewer layers, initialised from the teacher's layers as
//! DistilBERT was, on a fine-tuning run's rows ([`FinetuneOptions`]: `model` is the teacher),
//! and exports the best student as [`crate::finetune::finetune`] exports. `cargo xtask
//! distill` parses its flags into these options and calls it; `train FAMILY --teacher` takes
//! the same [`StudentOptions`] for a masked LM.

use burn::tensor::Device;
use sesame_layers::{supports, Family, HfConfig, ClassifierLayers, TaskModel};
use sesame_text::labelled::ProblemType;

use super::{ClassifierDistillation, DistillLoss};
use crate::finetune::run::{batching, best_metric, default_metric, held_out_predictions, load_start, per_class, read_data, sets_of_the_model, Run};
use crate::finetune::{metric_names, FinetuneOptions, Finetuned, Init, SequenceClassification};

/// The student and the weights of the loss's terms, `None` taking the job's default:
/// `cargo xtask distill` (a classifier) and `cargo xtask train FAMILY --teacher` (a masked LM),
/// each with its own defaults. With the `cli` feature they are those commands' flags.
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Distillation (distill; train --teacher)"))]
pub struct StudentOptions {
    /// The student's layers, taken evenly from the teacher's (DistilBERT: every other one; the
    /// lowest always; BART: the same of its encoder and its decoder) [default: half the
    /// teacher's].
    #[cfg_attr(feature = "cli", arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)))]
    pub student_layers: Option<usize>,
    /// The temperature of the soft targets [default: 2].
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::cli::temperature))]
    pub temperature: Option<f64>,
    /// Weight of the soft targets: `T² · KL(teacher_T ‖ student_T)` [default: 1; train
    /// --teacher: 5, DistilBERT's].
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::cli::weight))]
    pub alpha_soft: Option<f64>,
    /// Weight of the task's loss on the labels (a masked LM's: its MLM loss) [default: 0.5;
    /// train --teacher: 2].
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::cli::weight))]
    pub alpha_hard: Option<f64>,
    /// Weight of `1 − cos` of the last hidden states (DistilBERT) [default: 0; train
    /// --teacher: 1].
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::cli::weight))]
    pub alpha_cos: Option<f64>,
    /// Weight of the MSE of mapped layers' hidden states, embeddings included (TinyBERT) [default: 0].
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::cli::weight))]
    pub alpha_hidden: Option<f64>,
    /// Weight of the MSE of mapped layers' attention probabilities (TinyBERT) [default: 0].
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::cli::weight))]
    pub alpha_attention: Option<f64>,
    /// The teacher layer (1-based) each student layer learns from, `1:2,2:4,3:6`
    /// [default: TinyBERT's uniform map, student layer m to teacher layer m × L / N].
    #[cfg_attr(feature = "cli", arg(long))]
    pub layer_map: Option<String>,
}

/// The defaults of the weights `[soft, hard, cos]` of `distill` (a classifier).
pub const CLASSIFIER_WEIGHTS: [f64; 3] = [1.0, 0.5, 0.0];
/// The defaults of the weights `[soft, hard, cos]` of `train --teacher`: DistilBERT's
/// `alpha_ce`, `alpha_mlm` and `alpha_cos` (its README's command).
pub const MASKED_LM_WEIGHTS: [f64; 3] = [5.0, 2.0, 1.0];

impl StudentOptions {
    /// Whether any option is given (refused without a teacher).
    pub fn any(&self) -> bool {
        let weights = [self.temperature, self.alpha_soft, self.alpha_hard, self.alpha_cos, self.alpha_hidden, self.alpha_attention];
        self.student_layers.is_some() || self.layer_map.is_some() || weights.iter().any(Option::is_some)
    }

    /// The teacher's layers (0-based) a student of `--student-layers` (default: half) starts
    /// from, of a teacher of `teacher` layers.
    pub fn kept_layers(&self, teacher: usize) -> Result<Vec<usize>, String> {
        let student = self.student_layers.unwrap_or((teacher / 2).max(1));
        if student >= teacher {
            return Err(format!("--student-layers {student}: the teacher has {teacher}; a student has fewer"));
        }
        Ok((0..student).map(|i| i * teacher / student).collect())
    }

    /// The loss of a student of `student` layers and a teacher of `teacher`, the weights not
    /// given taken from `defaults` (`[soft, hard, cos]`).
    pub fn loss(&self, defaults: [f64; 3], student: usize, teacher: usize) -> Result<DistillLoss, String> {
        let layer_map = match &self.layer_map {
            None => DistillLoss::uniform_map(student, teacher),
            Some(text) => parse_layer_map(text, student, teacher)?,
        };
        let loss = DistillLoss {
            temperature: self.temperature.unwrap_or(2.0),
            soft: self.alpha_soft.unwrap_or(defaults[0]),
            hard: self.alpha_hard.unwrap_or(defaults[1]),
            cosine: self.alpha_cos.unwrap_or(defaults[2]),
            hidden: self.alpha_hidden.unwrap_or(0.0),
            attention: self.alpha_attention.unwrap_or(0.0),
            layer_map,
        };
        if !(loss.temperature > 0.0 && loss.temperature.is_finite()) {
            return Err(format!("--temperature {}: not a temperature (a number > 0)", loss.temperature));
        }
        let weights = [("soft", loss.soft), ("hard", loss.hard), ("cos", loss.cosine), ("hidden", loss.hidden), ("attention", loss.attention)];
        if let Some((name, w)) = weights.iter().find(|(_, w)| !(*w >= 0.0 && w.is_finite())) {
            return Err(format!("--alpha-{name} {w}: not a weight (a number >= 0)"));
        }
        if loss.soft + loss.hard + loss.cosine + loss.hidden + loss.attention <= 0.0 {
            return Err("every --alpha-* is 0; nothing to learn".into());
        }
        Ok(loss)
    }
}

/// Distil the fine-tuned sequence classifier `run.model` (the teacher, a checkpoint of family
/// `F`: `distill_classifier::<Bert>`) into a student of fewer layers, trained on `run`'s rows
/// and exported to `run.out/model`.
pub fn distill_classifier<F: Family>(run: &FinetuneOptions, student: &StudentOptions, device: Device) -> Result<Finetuned, String> {
    if !supports::<F::ForSequenceClassification>() {
        return Err(format!("{}: {} models have no sequence classifier to distil", run.model.display(), F::NAME));
    }
    distill::<F::ForSequenceClassification>(run, student, device)
}

fn distill<M: TaskModel<Output = ClassifierLayers>>(run: &FinetuneOptions, student: &StudentOptions, device: Device) -> Result<Finetuned, String> {
    let run = &run.resolved()?;
    run.check()?;
    for (set, flag) in [(run.early_exit, "--early-exit"), (run.freeze, "--freeze"), (run.feature_layer.is_some(), "--feature-layer"), (run.layer_lr_decay.is_some(), "--layer-lr-decay"), (run.init == Init::Random, "--init random")] {
        if set {
            return Err(format!("distill: {flag} is for `finetune`; the student trains whole"));
        }
    }
    let data = read_data(run)?;
    let metric = best_metric(run, data.problem.hf_name(), metric_names(data.problem), default_metric(data.problem))?;
    let (tokenizer, config, seq_len) = load_start::<M>(run)?;
    let problems = [ProblemType::SingleLabelClassification, ProblemType::MultiLabelClassification, ProblemType::Regression];
    let (train, eval, classes) = sets_of_the_model("distill", run, &data, &tokenizer, config.labels(), seq_len, &problems)?;

    // The teacher: fixed, without dropout, on the training device.
    let train_device = device.clone().autodiff();
    let loaded = M::from_pretrained(&run.model, &train_device).map_err(|e| e.to_string())?;
    if !loaded.report.initialized.is_empty() {
        return Err(format!("distill: {} is not a fine-tuned classifier ({}); fine-tune it first", run.model.display(), loaded.report));
    }
    let teacher_layers = config.num_layers();
    let kept = student.kept_layers(teacher_layers)?;
    let loss = student.loss(CLASSIFIER_WEIGHTS, kept.len(), teacher_layers).map_err(|e| format!("distill: {e}"))?;
    if loss.attention > 0.0 && !config.pruned_heads().is_empty() {
        return Err("--alpha-attention: the teacher has pruned heads; the attention maps of mapped layers must have the same heads".into());
    }
    let teacher = crate::pruning::without_dropout(loaded.model).no_grad();
    let student_layers = kept.len();
    let what = format!(
        "{} training rows, {} evaluation rows, {} {}; a student of {student_layers} layers (the teacher's {}) from {teacher_layers}; loss {}",
        train.len(), eval.len(), data.problem.hf_name(), if classes.is_empty() { String::new() } else { format!("over {} classes", classes.len()) },
        kept.iter().map(|l| (l + 1).to_string()).collect::<Vec<_>>().join(", "),
        serde_json::to_string(&loss).expect("JSON"),
    );
    let rows = SequenceClassification::<M>::new(train, eval, tokenizer.clone(), data.problem, classes.len().max(1), batching(run));
    let task = ClassifierDistillation::new(rows, teacher, loss);
    let per_epoch = task.batches_per_epoch();
    let runner = Run { job: run, device, tokenizer: &tokenizer, metric, per_epoch, what, task_name: data.problem.hf_name(), labels: &classes, save_beside: None };
    let prepare = |model: M, config: &mut M::Config, _: &sesame_layers::LoadReport| model.keep_layers(config, &kept).map_err(|e| format!("distill: {e}"));
    runner.fit_and_export_with(&task, config, prepare, |model, device| {
        let predictions = held_out_predictions(&task, model, device);
        Ok(per_class(task.report(&predictions)))
    })
}

/// `1:2,2:4,3:6`: every student layer `1..=student` once, each to a teacher layer in
/// `1..=teacher`.
fn parse_layer_map(text: &str, student: usize, teacher: usize) -> Result<Vec<usize>, String> {
    let mut map = vec![0; student];
    for pair in text.split(',') {
        let parsed = pair.split_once(':').and_then(|(s, t)| Some((s.trim().parse::<usize>().ok()?, t.trim().parse::<usize>().ok()?)));
        match parsed {
            Some((s, t)) if (1..=student).contains(&s) && (1..=teacher).contains(&t) && map[s - 1] == 0 => map[s - 1] = t,
            _ => return Err(format!("--layer-map {text}: `{pair}` is not STUDENT:TEACHER with a student layer in 1..={student} (each once) and a teacher layer in 1..={teacher}")),
        }
    }
    if let Some(missing) = map.iter().position(|&t| t == 0) {
        return Err(format!("--layer-map {text}: student layer {} has no teacher layer", missing + 1));
    }
    Ok(map)
}
