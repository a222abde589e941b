//! A family's pre-training as one call: the [`Pretrain`] trait each model crate implements
//! behind its `train` feature, what the masked-LM families share of it
//! ([`pretrain_masked_lm`], [`export_masked_lm`]), and the settings of the two families whose
//! corruption is not masking: BART's noise ([`NoiseOptions`]) and XLNet's permutation LM
//! ([`PermutationOptions`]). `sesame::train::pretrain` and `cargo xtask train FAMILY` pick the
//! family by its name and call its [`Pretrain::pretrain`].

use burn::tensor::Device;
use sesame_layers::{Backbone, Family, PretrainedModel};
use sesame_text::{DenoisingConfig, MaskLength};

use super::run::{export_distilled, export_model, pretrain, pretrain_distilled, refuse_masked_lm_flags, ExportFn, Objective, PretrainOptions, Pretrained, RunSpec};
use super::{PretrainingFamily, SingleSequenceRecipe, SpanBoundaryRecipe};

/// A family's pre-training: its own objective, the others it takes (`job.objective`), and the
/// export of its runs. Implemented by each model crate behind its `train` feature.
pub trait Pretrain: Family {
    /// Its objective in one line (`--help` of `cargo xtask train`).
    const OBJECTIVE: &'static str;

    /// Pre-train a model of the family on `job.corpus` into the run directory: checkpoints,
    /// metrics, plots and the export in HF layout. Options the family does not take (BART's
    /// noise for a masked LM, `--masking` for BART) are refused, naming them.
    fn pretrain(job: &PretrainOptions, device: Device) -> Result<Pretrained, String>;

    /// The export of a run of [`Pretrain::pretrain`], as its record `spec` describes it (its
    /// objective, its teacher).
    fn export(spec: &RunSpec) -> Result<ExportFn, String>;
}

/// [`Pretrain::pretrain`] of the masked-LM family `F` whose base model is `B`: its own recipe,
/// SpanBERT's ([`Objective::Span`]), masked LM alone ([`Objective::Mlm`]), or a student
/// distilled from `job.teacher` ([`pretrain_distilled`]).
pub fn pretrain_masked_lm<F, B>(job: &PretrainOptions, device: Device) -> Result<Pretrained, String>
where
    F: PretrainingFamily,
    B: Backbone,
    F::Model: PretrainedModel<Config = B::Config>,
{
    if job.teacher.is_some() {
        if let Some(objective) = job.objective {
            return Err(format!("--objective {}: a student of --teacher learns masked LM on single sequences", objective.name()));
        }
        return pretrain_distilled::<F, B>(job, device);
    }
    match job.objective {
        None => pretrain::<F>(job, device),
        Some(Objective::Span) => pretrain::<SpanBoundaryRecipe<F, B>>(job, device),
        Some(Objective::Mlm) => pretrain::<SingleSequenceRecipe<F, B>>(job, device),
        Some(Objective::Mass) => Err(format!("--objective mass is for bart, an encoder-decoder; {} trains with its own objective, span or mlm", F::NAME)),
    }
}

/// [`Pretrain::export`] of the masked-LM family `F` whose base model is `B`: the model each of
/// [`pretrain_masked_lm`]'s recipes trains.
pub fn export_masked_lm<F, B>(spec: &RunSpec) -> Result<ExportFn, String>
where
    F: PretrainingFamily,
    B: Backbone,
    F::Model: PretrainedModel<Config = B::Config>,
{
    match spec.objective {
        _ if spec.teacher.is_some() => Ok(export_distilled::<B>),
        None => Ok(export_model::<F>),
        Some(Objective::Span) => Ok(export_model::<SpanBoundaryRecipe<F, B>>),
        Some(Objective::Mlm) => Ok(export_model::<SingleSequenceRecipe<F, B>>),
        Some(Objective::Mass) => Err(format!("the run's objective is mass, which {} does not train", F::NAME)),
    }
}

/// The settings a family's runs read beside the shared ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// The masked-LM families' masking (`--masking`, `--phrases`, `--packing`, …).
    Masking,
    /// BART's noise ([`NoiseOptions`]) and MASS's fragment (`mass_fraction`).
    Noise,
    /// XLNet's permutation LM ([`PermutationOptions`]).
    Permutation,
}

/// Refuse the settings of every corruption but `reads`, naming the first one given; each
/// message ends with `instead`, what the family reads.
pub fn refuse_other_corruptions(job: &PretrainOptions, reads: Corruption, instead: &str) -> Result<(), String> {
    if reads != Corruption::Masking {
        refuse_masked_lm_flags(job, instead)?;
    }
    if reads != Corruption::Noise {
        if let Some(flag) = job.noise.given() {
            return Err(format!("{flag} is one of BART's noise settings; {instead}"));
        }
    }
    if reads != Corruption::Permutation && job.permutation.given() {
        return Err(format!("--reuse-len, --num-predict, --perm-size, … set XLNet's permutation LM; {instead}"));
    }
    if reads != Corruption::Noise && job.mass_fraction.is_some() {
        return Err(format!("--mass-fraction is for bart's --objective mass; {instead}"));
    }
    Ok(())
}

/// BART's noise as a run sets it (fairseq's `denoising` task options), each `None` at BART's
/// recipe ([`NoiseOptions::config`]).
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "BART noise (train bart)"))]
pub struct NoiseOptions {
    /// Fraction of words masked in spans (text infilling) [default: 0.3].
    #[cfg_attr(feature = "cli", arg(long))]
    pub mask: Option<f64>,
    /// Fraction of the masks that are random tokens instead [default: 0.1].
    #[cfg_attr(feature = "cli", arg(long))]
    pub mask_random: Option<f64>,
    /// Masks inserted, as a fraction of the tokens [default: 0].
    #[cfg_attr(feature = "cli", arg(long))]
    pub insert: Option<f64>,
    /// Probability of rotating a document to start at a random token [default: 0].
    #[cfg_attr(feature = "cli", arg(long))]
    pub rotate: Option<f64>,
    /// Fraction of the sentences permuted [default: 1].
    #[cfg_attr(feature = "cli", arg(long))]
    pub permute_sentences: Option<f64>,
    /// A masked span becomes one mask (1), nothing (0: deletion) or a mask per token (-1) [default: 1].
    #[cfg_attr(feature = "cli", arg(long, allow_negative_numbers = true))]
    pub replace_length: Option<i8>,
    /// What a mask covers: subword, word or span-poisson (spans of Poisson(--poisson-lambda)
    /// words, 0 allowed) [default: span-poisson].
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub mask_length: Option<MaskLengthKind>,
    /// Mean span length of span-poisson masking [default: 3.5].
    #[cfg_attr(feature = "cli", arg(long))]
    pub poisson_lambda: Option<f64>,
    /// The target tokens the loss covers: all of them (BART), or infilled, only those the
    /// source no longer shows [default: all].
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub loss_on: Option<LossOn>,
}

/// Which target tokens BART's loss covers (`--loss-on`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum LossOn {
    /// Every token of the block, as BART.
    All,
    /// The tokens masked, replaced or deleted in the source.
    Infilled,
}

/// What a BART mask covers (fairseq `--mask-length`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum MaskLengthKind {
    /// One token.
    Subword,
    /// One word.
    Word,
    /// A span of Poisson(λ) words.
    SpanPoisson,
}

impl NoiseOptions {
    /// The first setting given, as its flag.
    pub fn given(&self) -> Option<&'static str> {
        let numbers = [
            (self.mask, "--mask"),
            (self.mask_random, "--mask-random"),
            (self.insert, "--insert"),
            (self.rotate, "--rotate"),
            (self.permute_sentences, "--permute-sentences"),
            (self.poisson_lambda, "--poisson-lambda"),
        ];
        let others = [(self.replace_length.is_some(), "--replace-length"), (self.mask_length.is_some(), "--mask-length"), (self.loss_on.is_some(), "--loss-on")];
        numbers.iter().find(|(v, _)| v.is_some()).map(|(_, flag)| *flag).or_else(|| others.iter().find(|(given, _)| *given).map(|(_, flag)| *flag))
    }

    /// BART's recipe with the settings given, checked: an error names the flag at fault.
    pub fn config(&self) -> Result<DenoisingConfig, String> {
        let mut c = DenoisingConfig::default();
        let lambda = self.poisson_lambda.unwrap_or(3.5);
        c.mask = self.mask.unwrap_or(c.mask);
        c.mask_random = self.mask_random.unwrap_or(c.mask_random);
        c.insert = self.insert.unwrap_or(c.insert);
        c.rotate = self.rotate.unwrap_or(c.rotate);
        c.permute_sentences = self.permute_sentences.unwrap_or(c.permute_sentences);
        c.replace_length = self.replace_length.unwrap_or(c.replace_length);
        c.mask_length = match self.mask_length {
            Some(MaskLengthKind::Subword) => MaskLength::Subword,
            Some(MaskLengthKind::Word) => MaskLength::Word,
            Some(MaskLengthKind::SpanPoisson) | None => MaskLength::SpanPoisson { lambda },
        };
        if self.poisson_lambda.is_some() && !matches!(c.mask_length, MaskLength::SpanPoisson { .. }) {
            return Err("--poisson-lambda is for --mask-length span-poisson".into());
        }
        c.validate().map_err(|e| format!("--{}: {}", e.field.replace('_', "-"), e.reason))?;
        Ok(c)
    }
}

/// XLNet's permutation-LM settings of a run (the original's `data_utils.py` flags), each
/// `None` at its default, which follows from the run's `seq_len`.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "XLNet permutation LM (train xlnet)"))]
pub struct PermutationOptions {
    /// Tokens of each window that continue the previous one and go into the memory
    /// [default: half of --seq-len].
    #[cfg_attr(feature = "cli", arg(long))]
    pub reuse_len: Option<usize>,
    /// Length of the blocks a factorisation order is drawn within [default: --reuse-len].
    #[cfg_attr(feature = "cli", arg(long))]
    pub perm_size: Option<usize>,
    /// Tokens predicted per window [default: 85 per 512].
    #[cfg_attr(feature = "cli", arg(long))]
    pub num_predict: Option<usize>,
    /// States the memory keeps [default: twice --reuse-len].
    #[cfg_attr(feature = "cli", arg(long))]
    pub mem_len: Option<usize>,
    /// Context tokens per group of --mask-beta predicted ones [default: 6].
    #[cfg_attr(feature = "cli", arg(long))]
    pub mask_alpha: Option<usize>,
    /// Predicted tokens per --mask-alpha of context [default: 1].
    #[cfg_attr(feature = "cli", arg(long))]
    pub mask_beta: Option<usize>,
    /// Add the rows read backwards (the original's `bi_data`).
    #[cfg_attr(feature = "cli", arg(long = "no-bi-data", action = clap::ArgAction::SetFalse, help = "Do not add the rows read backwards (the original's bi_data, on by default)"))]
    pub bi_data: bool,
    /// Spans of whole words, as the authors intended; `false`: of pieces, as the original code
    /// samples them.
    #[cfg_attr(feature = "cli", arg(long = "piece-spans", action = clap::ArgAction::SetFalse, help = "Spans of pieces, as the original code samples them, instead of whole words"))]
    pub whole_words: bool,
}

impl Default for PermutationOptions {
    fn default() -> Self {
        Self { reuse_len: None, perm_size: None, num_predict: None, mem_len: None, mask_alpha: None, mask_beta: None, bi_data: true, whole_words: true }
    }
}

impl PermutationOptions {
    /// Whether any setting differs from the defaults.
    pub fn given(&self) -> bool {
        *self != Self::default()
    }
}
