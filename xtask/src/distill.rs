//! `cargo xtask distill`: a fine-tuned sequence classifier (the teacher, `--model`) teaches a
//! student of the same family with fewer layers, initialised from every other layer of the
//! teacher as DistilBERT was (`sesame_train::distill`: soft targets at a temperature, the
//! labels, and TinyBERT's hidden-state and attention losses, each weighted by a flag). The run
//! is a `finetune` run (progress, evaluations, checkpoints, `--resume`, the best student by
//! `--metric`), and the student is exported in HF layout.

use burn::module::Module;
use burn::tensor::Device;
use sesame_layers::{Backbone, ForSequenceClassification, HfConfig, PretrainedModel, SequenceClassifier, SequenceHead, TaskModel};
use sesame_text::labelled::ProblemType;
use sesame_train::distill::{ClassifierDistillation, DistillLoss};
use sesame_train::finetune::{metric_names, SequenceClassification};

use crate::finetune::{batching, best_metric, held_out_predictions, load_start, per_class, read_data, sets_of_the_model, FinetuneArgs, Run};

/// Options of `cargo xtask distill`: `finetune`'s (`--model` is the teacher) and the student's.
#[derive(clap::Args, Debug)]
pub struct DistillArgs {
    /// The run: `--model` is the fine-tuned teacher; `--train` the rows it teaches on (their
    /// labels used only by --alpha-hard); `--eval` the rows the student is scored on.
    #[command(flatten)]
    pub run: FinetuneArgs,
    /// The student's layers, taken evenly from the teacher's (DistilBERT: every other one; the
    /// lowest always) [default: half the teacher's].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub student_layers: Option<usize>,
    /// The temperature of the soft targets.
    #[arg(long, default_value_t = 2.0, value_parser = positive)]
    pub temperature: f64,
    /// Weight of the soft targets: `T² · KL(teacher_T ‖ student_T)`.
    #[arg(long, default_value_t = 1.0, value_parser = weight)]
    pub alpha_soft: f64,
    /// Weight of the task's loss on the labels.
    #[arg(long, default_value_t = 0.5, value_parser = weight)]
    pub alpha_hard: f64,
    /// Weight of `1 − cos` of the last hidden states (DistilBERT).
    #[arg(long, default_value_t = 0.0, value_parser = weight)]
    pub alpha_cos: f64,
    /// Weight of the MSE of mapped layers' hidden states, embeddings included (TinyBERT).
    #[arg(long, default_value_t = 0.0, value_parser = weight)]
    pub alpha_hidden: f64,
    /// Weight of the MSE of mapped layers' attention probabilities (TinyBERT).
    #[arg(long, default_value_t = 0.0, value_parser = weight)]
    pub alpha_attention: f64,
    /// The teacher layer (1-based) each student layer learns from, `1:2,2:4,3:6`
    /// [default: TinyBERT's uniform map, student layer m to teacher layer m × L / N].
    #[arg(long)]
    pub layer_map: Option<String>,
}

fn weight(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(w) if w >= 0.0 && w.is_finite() => Ok(w),
        _ => Err(format!("{s} is not a weight (a number ≥ 0)")),
    }
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t > 0.0 && t.is_finite() => Ok(t),
        _ => Err(format!("{s} is not a temperature (a number > 0)")),
    }
}

/// `distill` of a family whose sequence classifier is `ForSequenceClassification<B, S>`.
pub fn distill<B: Backbone, S: SequenceHead<B>>(args: &DistillArgs, device: Device) -> Result<String, String>
where
    ForSequenceClassification<B, S>: TaskModel<Config = B::Config> + SequenceClassifier,
{
    type M<B, S> = ForSequenceClassification<B, S>;
    let run = &args.run;
    for (set, flag) in [(run.early_exit, "--early-exit"), (run.freeze, "--freeze"), (run.feature_layer.is_some(), "--feature-layer"), (run.layer_lr_decay.is_some(), "--layer-lr-decay")] {
        if set {
            return Err(format!("distill: {flag} is for `finetune`; the student trains whole"));
        }
    }
    if args.alpha_soft + args.alpha_hard + args.alpha_cos + args.alpha_hidden + args.alpha_attention <= 0.0 {
        return Err("distill: every --alpha-* is 0; nothing to learn".into());
    }
    let data = read_data(run)?;
    if data.problem != ProblemType::SingleLabelClassification {
        return Err(format!("distill: the labels of {} are for {}; distillation of classifiers is single-label for now", run.train.display(), data.problem.hf_name()));
    }
    let metric = best_metric(run, data.problem.hf_name(), metric_names(data.problem), "accuracy")?;
    let (tokenizer, config, seq_len) = load_start::<M<B, S>>(run)?;
    let (train, eval, classes) = sets_of_the_model("distill", run, &data, &tokenizer, config.labels(), seq_len)?;

    // The teacher: fixed, without dropout, on the training device.
    let train_device = device.clone().autodiff();
    let loaded = M::<B, S>::from_pretrained(&run.model, &train_device).map_err(|e| e.to_string())?;
    if !loaded.report.initialized.is_empty() {
        return Err(format!("distill: {} is not a fine-tuned classifier ({}); fine-tune it first", run.model.display(), loaded.report));
    }
    let teacher_layers = B::classifier_sizes(&config).layers;
    let student_layers = args.student_layers.unwrap_or((teacher_layers / 2).max(1));
    if student_layers >= teacher_layers {
        return Err(format!("--student-layers {student_layers}: the teacher has {teacher_layers}; a student has fewer"));
    }
    let kept: Vec<usize> = (0..student_layers).map(|i| i * teacher_layers / student_layers).collect();
    let layer_map = match &args.layer_map {
        None => DistillLoss::uniform_map(student_layers, teacher_layers),
        Some(text) => parse_layer_map(text, student_layers, teacher_layers)?,
    };
    if args.alpha_attention > 0.0 && !B::pruned_heads(&config).is_empty() {
        return Err("--alpha-attention: the teacher has pruned heads; the attention maps of mapped layers must have the same heads".into());
    }
    let teacher = sesame_train::pruning::without_dropout(loaded.model).no_grad();
    let loss = DistillLoss {
        temperature: args.temperature,
        soft: args.alpha_soft,
        hard: args.alpha_hard,
        cosine: args.alpha_cos,
        hidden: args.alpha_hidden,
        attention: args.alpha_attention,
        layer_map: layer_map.clone(),
    };
    let what = format!(
        "{} training rows, {} evaluation rows, {} classes; a student of {student_layers} layers (the teacher's {}) from {teacher_layers}; loss {}",
        train.len(), eval.len(), classes.len(),
        kept.iter().map(|l| (l + 1).to_string()).collect::<Vec<_>>().join(", "),
        serde_json::to_string(&loss).expect("JSON"),
    );
    let rows = SequenceClassification::<M<B, S>>::new(train, eval, tokenizer.clone(), data.problem, classes.len(), batching(run));
    let task = ClassifierDistillation::new(rows, teacher, loss);
    let per_epoch = task.batches_per_epoch();
    let runner = Run { args: run, device, tokenizer: &tokenizer, metric, per_epoch, what, task_name: "single_label_classification", labels: &classes };
    let prepare = |model: M<B, S>, config: &mut B::Config, _: &sesame_layers::LoadReport| model.keep_layers(config, &kept).map_err(|e| format!("distill: {e}"));
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
