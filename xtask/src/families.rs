//! The one registry of model families: every command (`train`, `export`, `bench`, `embed`,
//! `fill-mask`) finds a family here, by name or by a checkpoint's `model_type`. Adding a
//! family is one entry in [`FAMILIES`].

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use sesame_albert::{Albert, AlbertModel};
use sesame_bert::{Bert, BertLikeFamily, BertModel};
use sesame_electra::{Electra, ElectraModel};
use sesame_unilm::{Unilm, UnilmModel};
use sesame_layers::pipeline::EmbedOptions;
use sesame_layers::{Backbone, PretrainedModel};
use sesame_roberta::{Roberta, RobertaModel};
use sesame_train::pretraining::PretrainingFamily;

use crate::bench::{bench_family, BenchArgs};
use crate::train::{export_model, train_family, TrainArgs};
use crate::{embed_with, fill_mask_with, Texts};

/// What the command line can do with one family.
pub struct FamilyEntry {
    /// Name on the command line and in run directories (`bert`).
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// HF `model_type` values of its checkpoints.
    pub model_types: &'static [&'static str],
    /// `cargo xtask train <name>`.
    pub train: fn(TrainArgs, Device) -> Result<String, String>,
    /// Save the model of a training checkpoint (`run`, `checkpoint`) in HF layout at `out`;
    /// returns the model directories written.
    pub export: fn(&Path, &Path, &Path, &Device) -> Result<Vec<PathBuf>, String>,
    /// `cargo xtask bench --family <name>`.
    pub bench: fn(&BenchArgs, Device, &str) -> Result<Vec<serde_json::Value>, String>,
    /// `cargo xtask embed` on a checkpoint of this family.
    pub embed: fn(&Path, &Device, &mut Texts, EmbedOptions) -> Result<String, String>,
    /// `cargo xtask fill-mask` on a checkpoint of this family (texts, top k, batch size).
    pub fill_mask: fn(&Path, &Device, &mut Texts, usize, usize) -> Result<String, String>,
}

impl FamilyEntry {
    /// A family pre-trained on masked batches by the shared task with `F`'s objective, whose
    /// base model is `B`.
    const fn masked_lm<F, B>(name: &'static str, about: &'static str, model_types: &'static [&'static str]) -> Self
    where
        F: PretrainingFamily,
        B: Backbone + PretrainedModel<Config = <B as Backbone>::Config>,
        F::Model: PretrainedModel<Config = <B as Backbone>::Config>,
    {
        Self {
            name,
            about,
            model_types,
            train: train_family::<F>,
            export: export_model::<F>,
            bench: bench_family::<F, B>,
            embed: embed_with::<B>,
            fill_mask: fill_mask_with::<B>,
        }
    }
}

/// Every family the command line knows.
pub static FAMILIES: [FamilyEntry; 5] = [
    FamilyEntry::masked_lm::<Bert, BertModel>(
        "bert",
        "masked LM + next-sentence prediction on sentence pairs, WordPiece",
        Bert::MODEL_TYPES,
    ),
    FamilyEntry::masked_lm::<Roberta, RobertaModel>(
        "roberta",
        "dynamic masked LM on packed full sentences, byte-level BPE",
        Roberta::MODEL_TYPES,
    ),
    FamilyEntry::masked_lm::<Albert, AlbertModel>(
        "albert",
        "n-gram masked LM + sentence-order prediction, Unigram (SentencePiece) vocabulary",
        Albert::MODEL_TYPES,
    ),
    FamilyEntry::masked_lm::<Electra, ElectraModel>(
        "electra",
        "replaced-token detection: a 1/4-wide generator's samples, a discriminator on every token, WordPiece",
        sesame_electra::config::MODEL_TYPES,
    ),
    // UniLM exports are BERT checkpoints (`model_type: bert`, read by the `bert` entry).
    FamilyEntry::masked_lm::<Unilm, UnilmModel>(
        "unilm",
        "bidirectional, seq-to-seq, left-to-right and right-to-left LMs mixed per batch, cloze + NSP, WordPiece",
        &["unilm"],
    ),
];

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

/// A clap parser accepting exactly the families' names.
pub fn parser() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(FAMILIES.iter().map(|f| clap::builder::PossibleValue::new(f.name).help(f.about)))
}
