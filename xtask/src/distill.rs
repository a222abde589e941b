//! `cargo xtask distill`: the flags of a distillation job, parsed into the library's options
//! for [`sesame::train::distill_classifier`] (a fine-tuned sequence classifier, the
//! teacher `--model`, teaches a student of the same family with fewer layers). A masked LM
//! distils in a pre-training run, `cargo xtask train FAMILY --teacher DIR`
//! (`crate::train::train_distilled`), with the same [`StudentArgs`].
use burn::tensor::Device;
use sesame_train::distill::StudentOptions;

use crate::finetune::{printed, FinetuneArgs};

/// Options of `cargo xtask distill`: `finetune`'s (`--model` is the teacher) and the student's.
#[derive(clap::Args, Debug)]
pub struct DistillArgs {
    /// The run: `--model` is the fine-tuned teacher; `--train` the rows it teaches on (their
    /// labels used only by --alpha-hard); `--eval` the rows the student is scored on.
    #[command(flatten)]
    pub run: FinetuneArgs,
    /// The student and the loss.
    #[command(flatten)]
    pub student: StudentArgs,
}

/// The student and the weights of the loss's terms: `cargo xtask distill` (a classifier) and
/// `cargo xtask train FAMILY --teacher` (a masked LM), each with its own defaults.
#[derive(clap::Args, Debug, Default)]
#[command(next_help_heading = "Distillation (distill; train --teacher)")]
pub struct StudentArgs {
    /// The student's layers, taken evenly from the teacher's (DistilBERT: every other one; the
    /// lowest always; BART: the same of its encoder and its decoder) [default: half the
    /// teacher's].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub student_layers: Option<usize>,
    /// The temperature of the soft targets [default: 2].
    #[arg(long, value_parser = positive)]
    pub temperature: Option<f64>,
    /// Weight of the soft targets: `T² · KL(teacher_T ‖ student_T)` [default: 1; train
    /// --teacher: 5, DistilBERT's].
    #[arg(long, value_parser = weight)]
    pub alpha_soft: Option<f64>,
    /// Weight of the task's loss on the labels (a masked LM's: its MLM loss) [default: 0.5;
    /// train --teacher: 2].
    #[arg(long, value_parser = weight)]
    pub alpha_hard: Option<f64>,
    /// Weight of `1 − cos` of the last hidden states (DistilBERT) [default: 0; train
    /// --teacher: 1].
    #[arg(long, value_parser = weight)]
    pub alpha_cos: Option<f64>,
    /// Weight of the MSE of mapped layers' hidden states, embeddings included (TinyBERT) [default: 0].
    #[arg(long, value_parser = weight)]
    pub alpha_hidden: Option<f64>,
    /// Weight of the MSE of mapped layers' attention probabilities (TinyBERT) [default: 0].
    #[arg(long, value_parser = weight)]
    pub alpha_attention: Option<f64>,
    /// The teacher layer (1-based) each student layer learns from, `1:2,2:4,3:6`
    /// [default: TinyBERT's uniform map, student layer m to teacher layer m × L / N].
    #[arg(long)]
    pub layer_map: Option<String>,
}

impl StudentArgs {
    /// Whether any option is given (refused without a teacher).
    pub fn any(&self) -> bool {
        let weights = [self.temperature, self.alpha_soft, self.alpha_hard, self.alpha_cos, self.alpha_hidden, self.alpha_attention];
        self.student_layers.is_some() || self.layer_map.is_some() || weights.iter().any(Option::is_some)
    }

    /// The library's options of these flags.
    pub fn options(&self) -> StudentOptions {
        StudentOptions {
            student_layers: self.student_layers,
            temperature: self.temperature,
            alpha_soft: self.alpha_soft,
            alpha_hard: self.alpha_hard,
            alpha_cos: self.alpha_cos,
            alpha_hidden: self.alpha_hidden,
            alpha_attention: self.alpha_attention,
            layer_map: self.layer_map.clone(),
        }
    }
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

/// `distill`: the library's run on the teacher's family, printed as one JSON line.
pub fn distill(args: &DistillArgs, device: Device) -> Result<String, String> {
    if args.run.init.is_some() {
        return Err("distill: --init is for `finetune`; the student trains whole".into());
    }
    sesame::train::distill_classifier(&args.run.options(), &args.student.options(), device).map(|done| printed(&done)).map_err(|e| e.to_string())
}
