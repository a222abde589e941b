//! ELECTRA's pre-training (Clark et al. 2020, google-research/electra) on the shared
//! pre-training task: a small generator learns masked LM; its samples replace the masked
//! tokens; the discriminator learns to tell every token replaced or original (replaced-token
//! detection, RTD). One loss trains both: `MLM + 50 · RTD`.
//!
//! As in the paper and the authors' code:
//! - the generator is `generator_size` (1/4) of the discriminator's width, as deep;
//! - the embeddings (token, position, type, LayerNorm) are shared, with one owner: the
//!   discriminator; the generator reads them (and its MLM decoder is their word table);
//! - masking: 15% of the tokens, 85% of those become the mask token, 15% stay (no random
//!   tokens);
//! - the generator's sample (Gumbel-max from its softmax) is not back-propagated through;
//! - a sampled token equal to the original is labelled original;
//! - the discriminator's loss covers every non-padding token.

use std::path::Path;
use std::sync::Arc;

use sesame_layers::Linear;
use burn::prelude::*;
use burn::tensor::IndexingUpdateOp;
use sesame_layers::loss::cross_entropy;
use sesame_layers::random::uniform;
use sesame_layers::{Backbone, CheckpointError, CheckpointSpec, ConfigError, Encoder, EncoderInput, HfConfig, MaskedLmHead, OutputOptions, Pretrained, PretrainedError, PretrainedModel, WeightFiles};
use sesame_train::{MaskedPositions};
use sesame_text::{MaskingConfig, Packing, TokenMasking, TokenizerKind};
use sesame_train::pretraining::{read_back, Layout, Masking, PretrainingBatch, PretrainingFamily, PretrainingModel};
use sesame_train::{Metric, StepOutput};

use crate::config::{Electra, ElectraConfig};
use crate::heads::{ElectraForMaskedLM, ElectraForPreTraining};
use crate::model::{embeddings_project, project_and_encode, ElectraModel};

/// The weight of the discriminator's loss in the joint loss (the paper's λ).
pub const RTD_WEIGHT: f64 = 50.0;

/// The temperature of the generator's samples in `cargo xtask train electra` (written to the
/// run's config.json as `generator_temperature`). At the paper's 1, a tiny pair trained for
/// minutes stays at the label prior, in PyTorch as in Sesame: its generator's samples are
/// close to the corpus's word frequencies, frequent words that fit anywhere, and the
/// discriminator learns only which tokens are often replaced. At 2 the samples reach rarer
/// words and the discriminator learns from context (docs/models/electra.md).
pub const PRETRAINING_TEMPERATURE: f64 = 2.0;

/// The discriminator's logits are binned for the AUC in `AUC_BINS` bins over
/// `[-AUC_RANGE, AUC_RANGE]` (the ends open), 0.02 wide.
const AUC_BINS: usize = 1600;
const AUC_RANGE: f64 = 16.0;

/// The generator without embeddings of its own: it reads the discriminator's.
#[derive(Module, Debug)]
pub struct ElectraGenerator {
    /// `embedding_size -> generator hidden size`, when they differ.
    pub embeddings_project: Option<Linear>,
    /// The generator's layers.
    pub encoder: Encoder,
    /// Its MLM head, decoding with the shared word embeddings.
    pub lm_head: MaskedLmHead,
}

impl ElectraGenerator {
    /// A fresh generator for `config` (the generator's own configuration).
    pub fn new(config: &ElectraConfig, device: &Device) -> Self {
        Self {
            embeddings_project: embeddings_project(config, device),
            encoder: config.encoder().init(device),
            lm_head: ElectraModel::lm_head(config).init(device),
        }
    }
}

/// The generator and the discriminator trained together; the discriminator owns the shared
/// embeddings. Saved as two HF directories: the discriminator (`ElectraForPreTraining`) and,
/// in `generator/`, the generator (`ElectraForMaskedLM`, embeddings copied in).
#[derive(Module, Debug)]
pub struct ElectraPreTrainingPair {
    /// The discriminator, with the shared embeddings.
    pub discriminator: ElectraForPreTraining,
    /// The generator.
    pub generator: ElectraGenerator,
    /// The temperature of the generator's samples (`generator_temperature` of the config).
    #[module(skip)]
    pub temperature: f64,
}

/// What one joint forward pass gives.
#[derive(Clone, Debug)]
pub struct ReplacedTokenOutput {
    /// `mlm_loss + 50 · rtd_loss`.
    pub loss: Tensor<1>,
    /// The generator's masked-LM loss.
    pub mlm_loss: Tensor<1>,
    /// The discriminator's loss.
    pub rtd_loss: Tensor<1>,
    /// Generator logits at the masked positions `[masked, vocab]`.
    pub generator_logits: Tensor<2>,
    /// Discriminator logits `[batch, seq]`.
    pub discriminator_logits: Tensor<2>,
    /// The discriminator's targets `[batch, seq]`: 1 where the token differs from the original.
    pub replaced: Tensor<2, Int>,
}

impl ElectraPreTrainingPair {
    /// The generator's vocabulary logits `[masked, vocab]` at the `masked` positions of
    /// (masked) `input`.
    pub fn generator_logits(&self, input: &EncoderInput, masked: &MaskedPositions) -> Tensor<2> {
        let x = self.discriminator.base.embed(input);
        let generator = &self.generator;
        let out = project_and_encode(generator.embeddings_project.as_ref(), &generator.encoder, x, input.clone(), OutputOptions::default());
        generator.lm_head.forward(masked.gather(out.last_hidden_state), self.discriminator.base.word_embeddings())
    }

    /// The joint objective on a masked batch: the generator's MLM loss, its samples at the
    /// masked positions (drawn here, or taken from `samples` `[batch, seq]` when given), and
    /// the discriminator's loss on the input with the samples in place.
    pub fn objective(&self, batch: &PretrainingBatch, samples: Option<Tensor<2, Int>>) -> ReplacedTokenOutput {
        let [b, s] = batch.mlm_labels.dims();
        let generator_logits = self.generator_logits(&batch.input, &batch.masked);
        let mlm_loss = cross_entropy(generator_logits.clone(), batch.masked.targets.clone());
        let positions = batch.masked.positions.clone();
        let samples = match samples {
            Some(samples) => samples.reshape([b * s]).select(0, positions.clone()),
            None => gumbel_max(generator_logits.clone().detach() / self.temperature),
        };
        let masked = batch.mlm_labels.clone().not_equal_elem(-100);
        let original = batch.input.input_ids.clone().mask_where(masked.clone(), batch.mlm_labels.clone());
        // The samples in place of the masked tokens (the placeholder row of a batch that masks
        // nothing changes nothing: `masked` is false there).
        let flat = original.clone().reshape([b * s]);
        let at = flat.clone().select(0, positions.clone());
        let sampled = flat.select_assign(0, positions, samples - at, IndexingUpdateOp::Add).reshape([b, s]);
        let corrupted = original.clone().mask_where(masked, sampled);
        let replaced = corrupted.clone().not_equal(original).int();
        let input = EncoderInput { input_ids: corrupted, ..batch.input.clone() };
        let out = self.discriminator.forward(input, Some(replaced.clone()), OutputOptions::default());
        let rtd_loss = out.loss.expect("labels were given");
        ReplacedTokenOutput {
            loss: mlm_loss.clone() + rtd_loss.clone() * RTD_WEIGHT,
            mlm_loss,
            rtd_loss,
            generator_logits,
            discriminator_logits: out.logits,
            replaced,
        }
    }

    /// The generator as HF's `ElectraForMaskedLM`, with a copy of the shared embeddings.
    pub fn generator_model(&self) -> ElectraForMaskedLM {
        ElectraForMaskedLM {
            base: ElectraModel {
                embeddings: self.discriminator.base.embeddings.clone(),
                embeddings_project: self.generator.embeddings_project.clone(),
                encoder: self.generator.encoder.clone(),
            },
            lm_head: self.generator.lm_head.clone(),
        }
    }
}

/// One sample per row from the softmax of `logits` `[n, vocab]` (Gumbel-max: the argmax of
/// the logits plus Gumbel noise) `[n]`. Drawn from the micro-batch's stream on a CPU
/// (`sesame_layers::random`), else from the device's generator, which the trainer seeds per step.
pub fn gumbel_max(logits: Tensor<2>) -> Tensor<1, Int> {
    let [n, _] = logits.dims();
    let uniform = uniform(logits.dims(), 1e-9, 1.0, &logits.device());
    let gumbel = uniform.log().neg().log().neg();
    (logits + gumbel).argmax(1).reshape([n])
}

impl PretrainedModel for ElectraPreTrainingPair {
    type Config = ElectraConfig;

    fn architecture() -> String {
        "ElectraForPreTraining".into()
    }

    fn init(config: &ElectraConfig, device: &Device) -> Self {
        let generator = config.generator();
        Self { discriminator: ElectraForPreTraining::init(config, device), generator: ElectraGenerator::new(&generator, device), temperature: config.sampling_temperature() }
    }

    /// The discriminator's tensors; the generator is stored beside it (see `save_pretrained`).
    fn checkpoint_spec(config: &ElectraConfig) -> CheckpointSpec {
        ElectraForPreTraining::checkpoint_spec(config)
    }

    /// The discriminator from `dir` and the generator from `dir/generator` when there is one
    /// (a fresh generator otherwise, as when continuing from a released discriminator).
    fn from_pretrained(dir: &Path, device: &Device) -> Result<Pretrained<Self, ElectraConfig>, PretrainedError> {
        let config = ElectraConfig::from_dir(dir)?;
        let files = WeightFiles::find(dir)?;
        let generator_dir = dir.join("generator");
        if !generator_dir.join("config.json").is_file() {
            return Self::from_weights(config, &files, device);
        }
        let discriminator = ElectraForPreTraining::from_weights(config.clone(), &files, device)?;
        let generator = ElectraForMaskedLM::from_pretrained(&generator_dir, device)?;
        let mut report = discriminator.report;
        report.applied += generator.report.applied;
        report.unused.extend(generator.report.unused.into_iter().map(|n| format!("generator/{n}")));
        report.initialized.extend(generator.report.initialized.into_iter().map(|n| format!("generator/{n}")));
        let generator = ElectraGenerator {
            embeddings_project: generator.model.base.embeddings_project,
            encoder: generator.model.base.encoder,
            lm_head: generator.model.lm_head,
        };
        let temperature = config.sampling_temperature();
        Ok(Pretrained { model: Self { discriminator: discriminator.model, generator, temperature }, config, report })
    }

    /// The discriminator from `files`, and a fresh generator (reported as initialised).
    fn from_weights(config: ElectraConfig, files: &WeightFiles, device: &Device) -> Result<Pretrained<Self, ElectraConfig>, PretrainedError> {
        let discriminator = ElectraForPreTraining::from_weights(config.clone(), files, device)?;
        let generator_config = config.generator();
        let generator = ElectraGenerator::new(&generator_config, device);
        let generator = sesame_layers::init::hf_init(generator, config.initializer_range);
        let mut report = discriminator.report;
        report.initialized.push(format!("generator ({} wide, fresh)", generator_config.hidden_size));
        let temperature = config.sampling_temperature();
        Ok(Pretrained { model: Self { discriminator: discriminator.model, generator, temperature }, config, report })
    }

    /// The discriminator in `dir`, the generator in `dir/generator`.
    fn save_pretrained(&self, config: &ElectraConfig, dir: &Path) -> Result<(), CheckpointError> {
        self.discriminator.save_pretrained(config, dir)?;
        self.generator_model().save_pretrained(&config.generator(), &dir.join("generator"))
    }
}

impl PretrainingModel for ElectraPreTrainingPair {
    const SENTENCE_TASK: bool = false;

    fn export(&self, config: &ElectraConfig, dir: &Path) -> Result<Vec<std::path::PathBuf>, sesame_layers::CheckpointError> {
        self.save_pretrained(config, dir)?;
        Ok(vec![dir.to_path_buf(), dir.join("generator")])
    }

    /// The joint loss; metrics of both models: the generator's `mlm_loss` and `mlm_accuracy`
    /// over the masked tokens, the discriminator's `rtd_loss` and `rtd_accuracy` over every
    /// non-padding token, its precision and recall on the replaced ones, its `rtd_auc`, the
    /// fraction of tokens replaced (the discriminator's label prior; it falls as the
    /// generator improves), and what the prior alone scores: `rtd_prior_accuracy` (every
    /// token called original) and `rtd_prior_loss` (the entropy of the replaced fraction).
    fn pretraining_step(&self, batch: PretrainingBatch, _sentence_metric: Option<&str>) -> StepOutput {
        self.step_with_samples(batch, None)
    }
}

impl ElectraPreTrainingPair {
    /// The pre-training step (loss and metrics, see [`PretrainingModel::pretraining_step`])
    /// with the replacements `samples` `[batch, seq]` given instead of drawn from the generator.
    pub fn step_with_samples(&self, batch: PretrainingBatch, samples: Option<Tensor<2, Int>>) -> StepOutput {
        let out = self.objective(&batch, samples);
        let targets = batch.masked.targets.clone();
        let masked = targets.clone().not_equal_elem(-100);
        let keep = match &batch.input.attention_mask {
            Some(mask) => mask.clone().equal_elem(1),
            None => batch.input.input_ids.clone().greater_equal_elem(0),
        };
        let predicted = out.generator_logits.clone().argmax(1).squeeze_dim::<1>(1);
        let said_replaced = out.discriminator_logits.clone().greater_elem(0.0).bool_and(keep.clone());
        let replaced = out.replaced.clone().equal_elem(1).bool_and(keep.clone());
        let counts = [
            masked.clone().int().sum(),
            predicted.equal(targets).bool_and(masked).int().sum(),
            keep.clone().int().sum(),
            said_replaced.clone().equal(replaced.clone()).bool_and(keep.clone()).int().sum(),
            said_replaced.clone().bool_and(replaced.clone()).int().sum(),
            said_replaced.int().sum(),
            replaced.int().sum(),
        ];
        // One read from the device: the counts, then the discriminator's logits and labels
        // (-1 at padding) for the AUC.
        let n = out.discriminator_logits.dims().iter().product::<usize>();
        let labels = out.replaced.clone().float().mask_fill(keep.bool_not(), -1.0).reshape([n]);
        let values = Tensor::cat(vec![Tensor::cat(counts.to_vec(), 0).float(), out.discriminator_logits.clone().detach().reshape([n]), labels], 0);
        let values = read_back(values, 0.0);
        let losses = read_back(Tensor::cat(vec![out.mlm_loss.clone(), out.rtd_loss.clone()], 0), f64::NAN);
        let [masked, generator_right, tokens, discriminator_right, true_positives, said, replaced] = values[..7] else {
            unreachable!("seven counts")
        };
        let (logits, labels) = values[7..].split_at(n);
        let (mut positives, mut negatives) = (vec![0.0; AUC_BINS], vec![0.0; AUC_BINS]);
        for (&logit, &label) in logits.iter().zip(labels) {
            let bin = ((logit + AUC_RANGE) / (2.0 * AUC_RANGE) * AUC_BINS as f64).clamp(0.0, (AUC_BINS - 1) as f64) as usize;
            match label {
                1.0 => positives[bin] += 1.0,
                0.0 => negatives[bin] += 1.0,
                _ => {}
            }
        }
        let metrics = vec![
            Metric::mean("mlm_loss", losses[0] * masked, masked),
            Metric::mean("mlm_accuracy", generator_right, masked),
            Metric::mean("rtd_loss", losses[1] * tokens, tokens),
            Metric::mean("rtd_accuracy", discriminator_right, tokens),
            Metric::mean("rtd_precision", true_positives, said),
            Metric::mean("rtd_recall", true_positives, replaced),
            Metric::mean("replaced_fraction", replaced, tokens),
            Metric::auc("rtd_auc", &positives, &negatives),
            // The label prior's: every token called original, or every token given the
            // replaced fraction as its probability.
            Metric::mean("rtd_prior_accuracy", tokens - replaced, tokens),
            Metric::binary_entropy("rtd_prior_loss", replaced, tokens),
        ];
        StepOutput { loss: out.loss, metrics, tokens: batch.tokens, predictions: None }
    }
}

impl PretrainingFamily for Electra {
    type Model = ElectraPreTrainingPair;
    const NAME: &'static str = "electra";

    /// Single sequences of consecutive sentences (google-research/electra's
    /// `build_pretraining_dataset.py` fills each example with whole sentences up to the length).
    fn layout() -> Layout {
        Layout::Packed { packing: Packing::FullSentences, max_seq_len: 512 }
    }

    /// ELECTRA's: tokens chosen independently, 85% replaced by the mask token, 15% kept, none
    /// by a random token (google-research/electra, `pretrain_helpers.mask`).
    fn masking() -> Masking {
        Masking::Family {
            name: "Electra",
            strategy: || Arc::new(TokenMasking { config: MaskingConfig { probability: 0.15, mask_fraction: 0.85, random_fraction: 0.0 } }),
        }
    }

    fn tokenizer() -> TokenizerKind {
        TokenizerKind::WordPiece
    }

    /// ELECTRA's discriminator of size `preset`, its generator sampling at temperature
    /// [`PRETRAINING_TEMPERATURE`].
    fn preset(preset: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<ElectraConfig, ConfigError> {
        let mut config = ElectraConfig::preset(preset, vocab_size, max_len, pad_token_id)?;
        config.generator_temperature = Some(PRETRAINING_TEMPERATURE);
        Ok(config)
    }
}

/// `cargo xtask train electra`: Electra's recipe above, SpanBERT's (`--objective span`), masked LM
/// alone (`--objective mlm`), or a student distilled from `--teacher`.
impl sesame_train::pretraining::Pretrain for Electra {
    const OBJECTIVE: &'static str = "replaced-token detection: a 1/4-wide generator's samples, a discriminator on every token, WordPiece";

    fn pretrain(job: &sesame_train::pretraining::PretrainOptions, device: burn::tensor::Device) -> Result<sesame_train::pretraining::Pretrained, String> {
        sesame_train::pretraining::pretrain_masked_lm::<Self, crate::ElectraModel>(job, device)
    }

    fn export(spec: &sesame_train::pretraining::run::RunSpec) -> Result<sesame_train::pretraining::run::ExportFn, String> {
        sesame_train::pretraining::export_masked_lm::<Self, crate::ElectraModel>(spec)
    }
}
