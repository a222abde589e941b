//! The one registry of model families: every command (`train`, `export`, `bench`, `embed`,
//! `fill-mask`, `generate`) finds a family here, by name or by a checkpoint's `model_type`.
//! Adding a family is one entry in [`FAMILIES`]; an entry holds the commands its family's
//! capabilities give (an encoder-decoder without pre-training yet has `generate` only).

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use sesame_albert::{Albert, AlbertModel};
use sesame_bert::{Bert, BertLikeFamily, BertModel};
use sesame_electra::{Electra, ElectraModel};
use sesame_unilm::{Unilm, UnilmModel};
use sesame_pipelines::EmbedOptions;
use sesame_layers::{ClassificationHead, Classifier, ForMaskedLM, ForQuestionAnswering, ForSequenceClassification, ForSpanPreTraining, ForTokenClassification, HasMaskedLmHead, PretrainedModel, SequenceHead, SummaryClassifier};
use sesame_bart::{BartForQuestionAnswering, BartForSequenceClassification};
use sesame_xlnet::{XlnetForQuestionAnsweringSimple, XlnetForSequenceClassification, XlnetForTokenClassification};
use sesame_roberta::{Roberta, RobertaModel};
use sesame_train::pretraining::{PretrainingFamily, SingleSequenceRecipe, SpanBoundaryRecipe};

use crate::bench::{bench_bart, bench_family, bench_xlnet, BenchArgs};
use crate::train::{export_bart, export_distilled, export_model, export_xlnet, train_bart, train_distilled, train_family, train_xlnet, TrainArgs};
use crate::forward::{forward_bart, forward_encoder, forward_xlnet, BertHeads, ElectraHeads, ExtraHeads, ForwardArgs, PreTraining};
use crate::finetune::{finetune, finetune_without_tagger, FinetuneArgs};
use crate::distill::{distill, DistillArgs};
use crate::prune::{prune, PruneArgs};
use crate::generate::{generate_bart, generate_causal, generate_xlnet, GenerateArgs};
use crate::{answer_with, classify_with, embed_with, fill_mask_with, tag_with, Texts};

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
    pub export: Option<fn(&Path, &Path, &Path, &Device) -> Result<Vec<PathBuf>, String>>,
    /// `cargo xtask bench --family <name>`.
    pub bench: Option<fn(&BenchArgs, Device, &str) -> Result<Vec<serde_json::Value>, String>>,
    /// `cargo xtask embed` on a checkpoint of this family.
    pub embed: Option<fn(&Path, &Device, &mut Texts, EmbedOptions) -> Result<String, String>>,
    /// `cargo xtask fill-mask` on a checkpoint of this family (texts, top k, batch size).
    pub fill_mask: Option<fn(&Path, &Device, &mut Texts, usize, usize) -> Result<String, String>>,
    /// `cargo xtask generate` on a checkpoint of this family.
    pub generate: Option<fn(&GenerateArgs, &Device) -> Result<(), String>>,
    /// `cargo xtask forward` on a checkpoint of this family.
    pub forward: Option<fn(&ForwardArgs, &Device) -> Result<(), String>>,
    /// `cargo xtask classify` with a fine-tuned classifier of this family (texts, batch size,
    /// early exit's `--speed`).
    pub classify: Option<fn(&Path, &Device, &mut Texts, usize, Option<f64>) -> Result<String, String>>,
    /// `cargo xtask tag` with a fine-tuned token classifier of this family (texts, batch size,
    /// stride).
    pub tag: Option<fn(&Path, &Device, &mut Texts, usize, Option<usize>) -> Result<String, String>>,
    /// `cargo xtask answer` with a fine-tuned extractive-QA model of this family (questions,
    /// context, batch size, stride, options).
    pub answer: Option<AnswerFn>,
    /// `cargo xtask finetune` from a checkpoint of this family.
    pub finetune: Option<fn(&FinetuneArgs, Device) -> Result<String, String>>,
    /// `cargo xtask prune` of a fine-tuned sequence classifier of this family.
    pub prune: Option<fn(&PruneArgs, Device) -> Result<String, String>>,
    /// `cargo xtask distill` of a fine-tuned sequence classifier of this family.
    pub distill: Option<fn(&DistillArgs, Device) -> Result<String, String>>,
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
    pub export: fn(&Path, &Path, &Path, &Device) -> Result<Vec<PathBuf>, String>,
}

/// `cargo xtask answer`'s entry point.
pub type AnswerFn = fn(&Path, &Device, &mut Texts, &str, usize, Option<usize>, sesame_pipelines::AnswerOptions) -> Result<String, String>;

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
        B: HasMaskedLmHead,
        F::Model: PretrainedModel<Config = B::Config>,
        ForSequenceClassification<B, S>: Send + Sync,
        ForTokenClassification<B>: Send + Sync,
        ForQuestionAnswering<B>: Send + Sync,
        ForSpanPreTraining<B>: Send + Sync,
        ForMaskedLM<B>: Send + Sync,
    {
        Self {
            name,
            about,
            model_types,
            train: Some(train_family::<F>),
            export: Some(export_model::<F>),
            bench: Some(bench_family::<F, B>),
            embed: Some(embed_with::<B>),
            fill_mask: Some(fill_mask_with::<B>),
            // Checkpoints saved as left-to-right models (`is_decoder`) generate.
            generate: Some(generate_causal::<B>),
            forward: Some(forward_encoder::<B, S, C, H>),
            finetune: Some(finetune::<ForSequenceClassification<B, S>, ForTokenClassification<B>, ForQuestionAnswering<B>>),
            classify: Some(classify_with::<ForSequenceClassification<B, S>>),
            tag: Some(tag_with::<ForTokenClassification<B>>),
            answer: Some(answer_with::<ForQuestionAnswering<B>>),
            prune: Some(prune::<B, S>),
            distill: Some(distill::<ForSequenceClassification<B, S>>),
            span: Some(Recipe { train: train_family::<SpanBoundaryRecipe<F, B>>, export: export_model::<SpanBoundaryRecipe<F, B>> }),
            mlm: Some(Recipe { train: train_family::<SingleSequenceRecipe<F, B>>, export: export_model::<SingleSequenceRecipe<F, B>> }),
            mass: None,
            train_teacher: Some(Recipe { train: train_distilled::<F, B>, export: export_distilled::<B> }),
        }
    }

    /// An encoder-decoder family with its own pre-training (`train`, `export`, `bench`),
    /// `generate` and `forward`.
    const fn seq2seq(
        name: &'static str,
        about: &'static str,
        model_types: &'static [&'static str],
        train: fn(TrainArgs, Device) -> Result<String, String>,
        export: fn(&Path, &Path, &Path, &Device) -> Result<Vec<PathBuf>, String>,
        bench: fn(&BenchArgs, Device, &str) -> Result<Vec<serde_json::Value>, String>,
        generate: fn(&GenerateArgs, &Device) -> Result<(), String>,
        forward: fn(&ForwardArgs, &Device) -> Result<(), String>,
    ) -> Self {
        Self {
            name,
            about,
            model_types,
            train: Some(train),
            export: Some(export),
            bench: Some(bench),
            embed: None,
            fill_mask: None,
            generate: Some(generate),
            forward: Some(forward),
            finetune: Some(finetune_without_tagger::<BartForSequenceClassification, BartForQuestionAnswering>),
            classify: Some(classify_with::<BartForSequenceClassification>),
            tag: None,
            answer: Some(answer_with::<BartForQuestionAnswering>),
            prune: None,
            distill: Some(distill::<BartForSequenceClassification>),
            span: None,
            mlm: None,
            // The same task with MASS's corruption; the same export.
            mass: Some(Recipe { train, export }),
            train_teacher: None,
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
            ("embed", self.embed.is_some()),
            ("fill-mask", self.fill_mask.is_some()),
            ("generate", self.generate.is_some()),
            ("forward", self.forward.is_some()),
            ("finetune", self.finetune.is_some()),
            ("classify", self.classify.is_some()),
            ("tag", self.tag.is_some()),
            ("answer", self.answer.is_some()),
            ("prune", self.prune.is_some()),
            ("distill", self.distill.is_some()),
        ];
        has.iter().filter(|(_, yes)| *yes).map(|(name, _)| *name).collect()
    }
}

/// Every family the command line knows.
pub static FAMILIES: [FamilyEntry; 7] = [
    FamilyEntry::masked_lm::<Bert, BertModel, Classifier, Classifier, (PreTraining, BertHeads)>(
        "bert",
        "masked LM + next-sentence prediction on sentence pairs, WordPiece",
        Bert::MODEL_TYPES,
    ),
    FamilyEntry::masked_lm::<Roberta, RobertaModel, ClassificationHead, Classifier, ()>(
        "roberta",
        "dynamic masked LM on packed full sentences, byte-level BPE",
        Roberta::MODEL_TYPES,
    ),
    FamilyEntry::masked_lm::<Albert, AlbertModel, Classifier, Classifier, PreTraining>(
        "albert",
        "n-gram masked LM + sentence-order prediction, Unigram (SentencePiece) vocabulary",
        Albert::MODEL_TYPES,
    ),
    FamilyEntry::masked_lm::<Electra, ElectraModel, ClassificationHead, SummaryClassifier, ElectraHeads>(
        "electra",
        "replaced-token detection: a 1/4-wide generator's samples, a discriminator on every token, WordPiece",
        sesame_electra::config::MODEL_TYPES,
    ),
    // UniLM exports are BERT checkpoints (`model_type: bert`, read by the `bert` entry).
    FamilyEntry::masked_lm::<Unilm, UnilmModel, Classifier, Classifier, PreTraining>(
        "unilm",
        "bidirectional, seq-to-seq, left-to-right and right-to-left LMs mixed per batch, cloze + NSP, WordPiece",
        &["unilm"],
    ),
    FamilyEntry::seq2seq(
        "bart",
        "denoising encoder-decoder: text infilling (Poisson spans) + sentence permutation, byte-level BPE",
        sesame_bart::config::MODEL_TYPES,
        train_bart,
        export_bart,
        bench_bart,
        generate_bart,
        forward_bart,
    ),
    FamilyEntry {
        name: "xlnet",
        about: "permutation LM: two-stream relative attention with memory, SentencePiece",
        model_types: sesame_xlnet::config::MODEL_TYPES,
        train: Some(train_xlnet),
        export: Some(export_xlnet),
        bench: Some(bench_xlnet),
        embed: None,
        fill_mask: None,
        generate: Some(generate_xlnet),
        forward: Some(forward_xlnet),
        finetune: Some(finetune::<XlnetForSequenceClassification, XlnetForTokenClassification, XlnetForQuestionAnsweringSimple>),
        classify: Some(classify_with::<XlnetForSequenceClassification>),
        tag: Some(tag_with::<XlnetForTokenClassification>),
        answer: Some(answer_with::<XlnetForQuestionAnsweringSimple>),
        prune: None,
        distill: Some(distill::<XlnetForSequenceClassification>),
        span: None,
        mlm: None,
        mass: None,
        train_teacher: None,
    },
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

/// A clap parser accepting the names of the families that train (`train`, `bench`).
pub fn parser() -> clap::builder::PossibleValuesParser {
    let training = FAMILIES.iter().filter(|f| f.train.is_some());
    clap::builder::PossibleValuesParser::new(training.map(|f| clap::builder::PossibleValue::new(f.name).help(f.about)))
}
