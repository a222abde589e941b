//! What the command line still runs per family beside the library's `Family` contract:
//! pre-training recipes and their export, `bench`, and `forward` (BART's and XLNet's
//! pre-training runs; BERT's and ELECTRA's own heads for `forward`). The inference commands,
//! `generate`, `finetune`, `distill` and `prune` go through the `sesame` facade and name no
//! family. Each family has a file here holding its entry and one line in [`FAMILIES`].

use std::path::Path;

use burn::tensor::Device;
use sesame_layers::{Backbone, PretrainedModel, SequenceHead};

use sesame_train::pretraining::{PretrainingFamily, SingleSequenceRecipe, SpanBoundaryRecipe};

use crate::bench::{bench_family, check_encoder_presets, BenchArgs, BenchMode, BenchTarget};
use crate::forward::{forward_encoder, ExtraHeads, ForwardArgs};
use crate::train::{export_distilled, export_model, train_distilled, train_family, ExportFn, RunSpec, TrainArgs};

pub mod albert;
pub mod bart;
pub mod bert;
pub mod electra;
pub mod roberta;
pub mod unilm;
pub mod xlnet;

/// What the command line can do with one family.
pub struct FamilyEntry {
    /// Name on the command line and in run directories (`bert`).
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// HF `model_type` values of its checkpoints.
    pub model_types: &'static [&'static str],
    /// `cargo xtask train <name>`.
    pub train: Option<fn(TrainArgs, Device) -> Result<String, String>>,
    /// Save the model of a training checkpoint (`run`, `checkpoint`) in HF layout at `out`;
    /// returns the model directories written.
    pub export: Option<ExportFn>,
    /// `cargo xtask bench --family <name>`.
    pub bench: Option<fn(&BenchArgs, Device, &str) -> Result<Vec<serde_json::Value>, String>>,
    /// Refuses a `--presets` name of `bench` the family does not have for the mode, before
    /// the machine's GEMM is timed.
    pub bench_presets: fn(&BenchArgs) -> Result<(), String>,
    /// `cargo xtask forward` on a checkpoint of this family.
    pub forward: Option<fn(&ForwardArgs, &Device) -> Result<(), String>>,
    /// `cargo xtask train <name> --objective span` (SpanBERT's recipe) and its export.
    pub span: Option<Recipe>,
    /// `cargo xtask train <name> --objective mlm` (masked LM alone on single sequences).
    pub mlm: Option<Recipe>,
    /// `cargo xtask train <name> --objective mass` (MASS, the encoder-decoder family).
    pub mass: Option<Recipe>,
    /// `cargo xtask train <name> --teacher DIR` (a masked LM distilled from a larger one) and
    /// its export.
    pub train_teacher: Option<Recipe>,
}

/// A pre-training recipe other than the family's own: `train` and `export`.
#[derive(Clone, Copy)]
pub struct Recipe {
    /// `cargo xtask train`.
    pub train: fn(TrainArgs, Device) -> Result<String, String>,
    /// `cargo xtask export` of its runs.
    pub export: ExportFn,
}

impl FamilyEntry {
    /// A family pre-trained on masked batches by the shared task with `F`'s objective, whose
    /// base model is `B`, whose sequence classifier is `S` and multiple-choice scorer `C`, and
    /// which has heads `H` beyond the shared ones (`forward` runs them).
    const fn masked_lm<F, B, S, C, H>(name: &'static str, about: &'static str, model_types: &'static [&'static str]) -> Self
    where
        F: PretrainingFamily,
        C: SequenceHead<B>,
        H: ExtraHeads<B>,
        S: SequenceHead<B>,
        B: Backbone,
        F::Model: PretrainedModel<Config = B::Config>,
    {
        Self {
            name,
            about,
            model_types,
            train: Some(train_family::<F>),
            export: Some(export_model::<F>),
            bench: Some(bench_family::<F, B>),
            bench_presets: check_encoder_presets,
            forward: Some(forward_encoder::<B, S, C, H>),
            span: Some(Recipe { train: train_family::<SpanBoundaryRecipe<F, B>>, export: export_model::<SpanBoundaryRecipe<F, B>> }),
            mlm: Some(Recipe { train: train_family::<SingleSequenceRecipe<F, B>>, export: export_model::<SingleSequenceRecipe<F, B>> }),
            mass: None,
            train_teacher: Some(Recipe { train: train_distilled::<F, B>, export: export_distilled::<B> }),
        }
    }

    /// The recipe of `--objective objective`, if the family has it.
    pub fn recipe(&self, objective: crate::train::Objective) -> Option<Recipe> {
        match objective {
            crate::train::Objective::Span => self.span,
            crate::train::Objective::Mlm => self.mlm,
            crate::train::Objective::Mass => self.mass,
        }
    }

    /// The command `what` of this family, or an error naming the commands it has.
    pub fn command<T>(&self, what: &str, f: Option<T>) -> Result<T, String> {
        f.ok_or_else(|| format!("`{what}` does not run {} models yet ({} has: {})", self.name, self.name, self.commands().join(", ")))
    }

    /// The commands this family has.
    fn commands(&self) -> Vec<&'static str> {
        let has = [
            ("train", self.train.is_some()),
            ("export", self.export.is_some()),
            ("bench", self.bench.is_some()),
            ("forward", self.forward.is_some()),
        ];
        has.iter().filter(|(_, yes)| *yes).map(|(name, _)| *name).collect()
    }
}

/// Every family the command line knows.
pub static FAMILIES: [FamilyEntry; 7] = [bert::ENTRY, roberta::ENTRY, albert::ENTRY, electra::ENTRY, unilm::ENTRY, bart::ENTRY, xlnet::ENTRY];

/// The family called `name`.
pub fn by_name(name: &str) -> Result<&'static FamilyEntry, String> {
    FAMILIES.iter().find(|f| f.name == name).ok_or_else(|| format!("unknown family `{name}` (expected {})", names().join(", ")))
}

/// The family whose checkpoints have `model_type`.
pub fn by_model_type(model_type: &str) -> Option<&'static FamilyEntry> {
    FAMILIES.iter().find(|f| f.model_types.contains(&model_type))
}

/// Every family's name.
pub fn names() -> Vec<&'static str> {
    FAMILIES.iter().map(|f| f.name).collect()
}

/// A clap parser accepting the names of the families that train (`train`, `bench`).
pub fn parser() -> clap::builder::PossibleValuesParser {
    let training = FAMILIES.iter().filter(|f| f.train.is_some());
    clap::builder::PossibleValuesParser::new(training.map(|f| clap::builder::PossibleValue::new(f.name).help(f.about)))
}

/// The family of the checkpoint in `dir`, from its `config.json`'s `model_type` as the facade
/// reads it ([`sesame::auto::locate`]: BERT when the file names none).
pub fn model_family(dir: &Path) -> Result<&'static FamilyEntry, String> {
    let checkpoint = sesame::auto::locate(dir).map_err(|e| e.to_string())?;
    let model_type = checkpoint.model_type.as_str();
    by_model_type(model_type).ok_or_else(|| format!("{}: model_type `{model_type}` is not a family this command runs ({})", dir.join("config.json").display(), names().join(", ")))
}

/// `cargo xtask train`: the family's own recipe, `--objective`'s or `--teacher`'s.
pub fn train(args: TrainArgs, device: Device) -> Result<String, String> {
    let family = by_name(&args.family)?;
    if args.teacher.is_none() && args.student.any() {
        return Err("--student-layers, --alpha-*, --temperature and --layer-map are for distillation: give the teacher with --teacher".into());
    }
    if args.teacher.is_some() {
        return family.command("train --teacher", family.train_teacher.map(|r| r.train))?(args, device);
    }
    match args.objective {
        None => family.command("train", family.train)?(args, device),
        Some(objective) => family.command(&format!("train --objective {}", objective.name()), family.recipe(objective).map(|r| r.train))?(args, device),
    }
}

/// The export of a run of `cargo xtask train` (`export`): its family's, for its objective.
pub fn export_of(spec: &RunSpec) -> Result<ExportFn, String> {
    let family = by_name(&spec.family)?;
    match spec.objective {
        _ if spec.teacher.is_some() => family.command("export", family.train_teacher.map(|r| r.export)),
        None => family.command("export", family.export),
        Some(objective) => family.command("export", family.recipe(objective).map(|r| r.export)),
    }
}

/// What `bench` times for `args`: `--model`'s family for embed, else `--family` (bert; bart
/// for generate).
pub fn bench_target(args: &BenchArgs) -> Result<BenchTarget, String> {
    let family = match (&args.mode, &args.model) {
        (BenchMode::Embed, Some(model)) => model_family(model)?,
        (BenchMode::Embed, None) => return Err("--mode embed needs --model (an HF or sentence-transformers directory)".into()),
        (BenchMode::Generate, _) => by_name(args.family.as_deref().unwrap_or("bart"))?,
        _ => by_name(args.family.as_deref().unwrap_or("bert"))?,
    };
    Ok(BenchTarget { bench: family.command("bench", family.bench)?, check_presets: family.bench_presets })
}
