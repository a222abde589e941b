//! `cargo xtask train <family>` and `cargo xtask export`: the flags of a pre-training job are
//! the library's [`PretrainOptions`] (it derives them), run by [`sesame::train::pretrain`]
//! (the family's own `Pretrain`); `export` is [`sesame::train::export`].

use std::path::PathBuf;

use sesame_train::pretraining::{PretrainOptions, Pretrained};

/// Options of `cargo xtask train`: the library's, which derive their flags.
pub type TrainArgs = PretrainOptions;

/// A run's outcome as the JSON line the command prints.
pub(crate) fn printed(done: &Pretrained) -> String {
    match done.stopped_after {
        Some(step) => serde_json::json!({ "stopped_after": step, "run": done.run }).to_string(),
        None => serde_json::json!({ "run": done.run, "export": done.export, "resumed_from": done.resumed_from, "held_out": done.held_out }).to_string(),
    }
}

/// Options of `cargo xtask export`.
#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Run directory of `cargo xtask train`.
    #[arg(long, default_value = "runs/bert")]
    pub run: PathBuf,
    /// Checkpoint step to export (default: the latest).
    #[arg(long)]
    pub step: Option<u64>,
    /// Output directory (default: RUN/export-step-N).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `train`: the library's pre-training of the family, its run printed as one JSON line.
pub fn train(args: TrainArgs, device: burn::tensor::Device) -> Result<String, String> {
    sesame::train::pretrain(&args, device).map(|done| printed(&done)).map_err(|e| e.to_string())
}

/// `export`: the library's export of a run's checkpoint, printed as one JSON line.
pub fn export(args: ExportArgs, device: burn::tensor::Device) -> Result<String, String> {
    let done = sesame::train::export(&args.run, args.step, args.out, device).map_err(|e| e.to_string())?;
    Ok(serde_json::json!({ "checkpoint": done.checkpoint, "export": done.export }).to_string())
}

/// The families that pre-train, each with its objective, for the `FAMILY` argument of `train`
/// and `bench`.
pub fn family_parser() -> clap::builder::PossibleValuesParser {
    let families = sesame::train::objectives().into_iter().map(|(name, objective)| clap::builder::PossibleValue::new(name).help(objective));
    clap::builder::PossibleValuesParser::new(families)
}
