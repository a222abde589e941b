//! What the command line still runs per family beside the library's `Family` and `Pretrain`
//! contracts: `bench` and `forward` (BERT's and ELECTRA's own heads, BART's and XLNet's
//! inputs). `train`, `export`, the inference commands, `generate`, `finetune`, `distill` and
//! `prune` go through the `sesame` facade and name no family. Each family has a file here
//! holding its entry and one line in [`FAMILIES`].

use std::path::Path;

use burn::tensor::Device;
use sesame_layers::{Backbone, PretrainedModel, SequenceHead};

use sesame_train::pretraining::PretrainingFamily;

use crate::bench::{bench_family, check_encoder_presets, BenchArgs, BenchMode, BenchTarget};
use crate::forward::{forward_encoder, ExtraHeads, ForwardArgs};

pub mod albert;
pub mod bart;
pub mod bert;
pub mod electra;
pub mod roberta;
pub mod unilm;
pub mod xlnet;

/// What the command line can do with one family beside the library's calls.
pub struct FamilyEntry {
    /// Name on the command line and in run directories (`bert`).
    pub name: &'static str,
    /// HF `model_type` values of its checkpoints.
    pub model_types: &'static [&'static str],
    /// `cargo xtask bench --family <name>`.
    pub bench: Option<fn(&BenchArgs, Device, &str) -> Result<Vec<serde_json::Value>, String>>,
    /// Refuses a `--presets` name of `bench` the family does not have for the mode, before
    /// the machine's GEMM is timed.
    pub bench_presets: fn(&BenchArgs) -> Result<(), String>,
    /// `cargo xtask forward` on a checkpoint of this family.
    pub forward: Option<fn(&ForwardArgs, &Device) -> Result<(), String>>,
}

impl FamilyEntry {
    /// A family pre-trained on masked batches by the shared task with `F`'s objective, whose
    /// base model is `B`, whose sequence classifier is `S` and multiple-choice scorer `C`, and
    /// which has heads `H` beyond the shared ones (`forward` runs them).
    const fn masked_lm<F, B, S, C, H>(name: &'static str, model_types: &'static [&'static str]) -> Self
    where
        F: PretrainingFamily,
        C: SequenceHead<B>,
        H: ExtraHeads<B>,
        S: SequenceHead<B>,
        B: Backbone,
        F::Model: PretrainedModel<Config = B::Config>,
    {
        Self { name, model_types, bench: Some(bench_family::<F, B>), bench_presets: check_encoder_presets, forward: Some(forward_encoder::<B, S, C, H>) }
    }

    /// The command `what` of this family, or an error naming the commands it has.
    pub fn command<T>(&self, what: &str, f: Option<T>) -> Result<T, String> {
        f.ok_or_else(|| format!("`{what}` does not run {} models yet ({} has: {})", self.name, self.name, self.commands().join(", ")))
    }

    /// The commands this family has beside `train` and `export`.
    fn commands(&self) -> Vec<&'static str> {
        let has = [("bench", self.bench.is_some()), ("forward", self.forward.is_some())];
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

/// The family of the checkpoint in `dir`, from its `config.json`'s `model_type` as the facade
/// reads it ([`sesame::auto::locate`]: BERT when the file names none).
pub fn model_family(dir: &Path) -> Result<&'static FamilyEntry, String> {
    let checkpoint = sesame::auto::locate(dir).map_err(|e| e.to_string())?;
    let model_type = checkpoint.model_type.as_str();
    by_model_type(model_type).ok_or_else(|| format!("{}: model_type `{model_type}` is not a family this command runs ({})", dir.join("config.json").display(), names().join(", ")))
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
