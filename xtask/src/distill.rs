//! `cargo xtask distill`: the flags of a distillation job, parsed into the library's options
//! for [`sesame::train::distill_classifier`] (a fine-tuned sequence classifier, the
//! teacher `--model`, teaches a student of the same family with fewer layers). A masked LM
//! distils in a pre-training run, `cargo xtask train FAMILY --teacher DIR`
//! (`crate::train::train_distilled`), with the same [`StudentOptions`].
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
    pub student: StudentOptions,
}

/// `distill`: the library's run on the teacher's family, printed as one JSON line.
pub fn distill(args: &DistillArgs, device: Device) -> Result<String, String> {
    if args.run.init != sesame_train::finetune::Init::Pretrained {
        return Err("distill: --init is for `finetune`; the student trains whole".into());
    }
    sesame::train::distill_classifier(&args.run, &args.student, device).map(|done| printed(&done)).map_err(|e| e.to_string())
}
