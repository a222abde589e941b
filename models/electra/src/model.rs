//! The ELECTRA encoder (HF `ElectraModel`): BERT's embeddings `embedding_size` wide, a
//! projection to the hidden size when the two differ, BERT's encoder, and no pooler.

use std::collections::{BTreeMap, BTreeSet};

use sesame_layers::{Linear, LinearConfig};
use burn::prelude::*;
use sesame_bert::checkpoint::encoder_rows;
use sesame_layers::checkpoint::encoder_ignored;
use sesame_layers::{
    Activation, Backbone, BackboneOutput, CheckpointSpec, ConfigError, Embeddings, Encoder, EncoderInput, EncoderOutput, ClassifierSizes, KeyMap, MaskedLmHeadConfig, OutputOptions, PretrainedModel,
};

use crate::checkpoint::{ELECTRA_HEAD_ROWS, ELECTRA_TIED_DECODER};
use crate::config::ElectraConfig;

/// The ELECTRA encoder (HF `ElectraModel`), the body of both the generator and the discriminator.
///
/// It has a masked-LM head (the generator's) but neither a pooler nor a sentence-level task
/// (`Backbone::POOLER`, `Backbone::SENTENCE_HEAD`), so the head models that need those do not
/// build on it:
/// ```
/// use sesame_electra::{ElectraConfig, ElectraModel};
/// use sesame_layers::{ForMaskedLM, ForMultipleChoice, PretrainedModel, SummaryClassifier};
/// fn masked_lm(config: &ElectraConfig, device: &burn::tensor::Device) -> ForMaskedLM<ElectraModel> {
///     ForMaskedLM::init(config, device)
/// }
/// fn choices(config: &ElectraConfig, device: &burn::tensor::Device) -> ForMultipleChoice<ElectraModel, SummaryClassifier> {
///     ForMultipleChoice::init(config, device)
/// }
/// let _built = (masked_lm as fn(&_, &_) -> _, choices as fn(&_, &_) -> _);
/// ```
/// ```compile_fail,E0080
/// use sesame_electra::{ElectraConfig, ElectraModel};
/// use sesame_layers::{ForPreTraining, PretrainedModel};
/// fn pretraining(config: &ElectraConfig, device: &burn::tensor::Device) -> ForPreTraining<ElectraModel> {
///     ForPreTraining::init(config, device)
/// }
/// let _built = pretraining as fn(&_, &_) -> _;
/// ```
/// ```compile_fail,E0080
/// use sesame_electra::{ElectraConfig, ElectraModel};
/// use sesame_layers::{Classifier, EncoderInput, ForMultipleChoice, HeadOutput, OutputOptions};
/// fn pooled_choices(model: &ForMultipleChoice<ElectraModel, Classifier>, input: EncoderInput) -> HeadOutput<2> {
///     model.forward(input, 2, None, OutputOptions::default())
/// }
/// let _built = pooled_choices as fn(&_, _) -> _;
/// ```
#[derive(Module, Debug)]
pub struct ElectraModel {
    /// Word + position + token-type embeddings, `embedding_size` wide.
    pub embeddings: Embeddings,
    /// `embedding_size -> hidden_size`, when they differ.
    pub embeddings_project: Option<Linear>,
    /// The transformer layers.
    pub encoder: Encoder,
}

impl ElectraModel {
    /// A freshly initialised model.
    pub fn new(config: &ElectraConfig, device: &Device) -> Self {
        Self {
            embeddings: config.embeddings(config.embedding_size).init(device),
            embeddings_project: embeddings_project(config, device),
            encoder: config.encoder().init(device),
        }
    }

    /// Embed `input`, project, and run the encoder. No pooler: `pooler_output` is `None`.
    pub fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput {
        let x = self.embed(&input);
        let encoder = project_and_encode(self.embeddings_project.as_ref(), &self.encoder, x, input, options);
        BackboneOutput { encoder, pooler_output: None }
    }

    /// The embeddings of `input` `[batch, seq, embedding_size]` (positions `past..past + seq`
    /// unless given).
    pub fn embed(&self, input: &EncoderInput) -> Tensor<3> {
        self.embeddings.forward(input.input_ids.clone(), input.token_type_ids.clone(), input.positions())
    }
}

/// The projection from the embedding width up to `hidden_size`, when the two differ (HF
/// `embeddings_project`).
pub fn embeddings_project(config: &ElectraConfig, device: &Device) -> Option<Linear> {
    (config.embedding_size != config.hidden_size).then(|| LinearConfig::new(config.embedding_size, config.hidden_size).init(device))
}

/// ELECTRA's body after the embeddings, for the discriminator and the generator alike:
/// project `embeddings` `[batch, seq, E]` when there is a projection, then run `encoder` under
/// `input`'s mask (and cache).
pub fn project_and_encode(
    project: Option<&Linear>,
    encoder: &Encoder,
    embeddings: Tensor<3>,
    input: EncoderInput,
    options: OutputOptions,
) -> EncoderOutput {
    let x = match project {
        Some(project) => project.forward(embeddings),
        None => embeddings,
    };
    encoder.forward(x, &input.mask(), input.cache, options)
}

/// ELECTRA has neither a pooler nor a sentence-level task.
impl Backbone for ElectraModel {
    const CLASS: &'static str = "Electra";
    const PREFIX: &'static str = "electra";

    /// The generator's head: dense to the embedding width, GELU (always), LayerNorm, the tied
    /// word embeddings plus its own bias (HF `generator_predictions` + `generator_lm_head`).
    fn lm_head(config: &ElectraConfig) -> MaskedLmHeadConfig {
        MaskedLmHeadConfig::new(config.hidden_size, config.embedding_size, config.vocab_size, Activation::Gelu)
            .with_layer_norm_eps(config.layer_norm_eps)
            .with_tie_word_embeddings(config.tie_word_embeddings)
    }

    /// ELECTRA has no pooler: `add_pooling_layer` is ignored.
    fn new(config: &ElectraConfig, _add_pooling_layer: bool, device: &Device) -> Self {
        Self::new(config, device)
    }

    fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput {
        self.forward(input, options)
    }

    fn encoder(&self) -> Option<&Encoder> {
        Some(&self.encoder)
    }

    fn layer_stack(&self, input: &EncoderInput) -> Option<(Tensor<3>, Vec<Vec<sesame_layers::LayerParts<'_>>>)> {
        let x = self.embed(input);
        let x = match &self.embeddings_project {
            Some(project) => project.forward(x),
            None => x,
        };
        Some((x, self.encoder.layers.iter().map(|l| vec![l.parts()]).collect()))
    }

    fn keep_layers(self, config: &mut ElectraConfig, layers: &[usize]) -> Result<Self, ConfigError> {
        let mut kept = config.clone();
        kept.hparams = config.hparams.with_layers(layers);
        kept.validate()?;
        let encoder = self.encoder.keep_layers(layers)?;
        *config = kept;
        Ok(Self { encoder, ..self })
    }

    fn prune_heads(self, config: &mut ElectraConfig, heads: &BTreeMap<usize, BTreeSet<usize>>) -> Result<Self, ConfigError> {
        let mut pruned = config.clone();
        pruned.hparams = config.hparams.with_pruned(heads);
        pruned.validate()?;
        let encoder = self.encoder.prune_heads(config.num_attention_heads, &config.pruned(), heads);
        *config = pruned;
        Ok(Self { encoder, ..self })
    }

    fn word_embeddings(&self) -> Tensor<2> {
        self.embeddings.word_embeddings.weight.val()
    }

    fn classifier_sizes(config: &ElectraConfig) -> ClassifierSizes {
        ClassifierSizes {
            hidden_size: config.hidden_size,
            layers: config.num_hidden_layers,
            num_labels: config.num_labels(),
            classifier_dropout: config.classifier_dropout(),
            // "although BERT uses tanh here, it seems Electra authors used gelu" (HF).
            classifier_activation: Activation::Gelu,
            summary: config.summary(),
        }
    }

    fn key_map(config: &ElectraConfig) -> KeyMap {
        // An untied generator has its own decoder, weight and bias (HF `generator_lm_head`).
        let rows: Vec<(&str, &str)> = ELECTRA_HEAD_ROWS
            .iter()
            .map(|&(hf, burn)| match hf {
                "^generator_lm_head" if !config.tie_word_embeddings => (hf, "^lm_head.decoder"),
                _ => (hf, burn),
            })
            .collect();
        KeyMap::new(&encoder_rows()).with(&rows)
    }

    fn ignored(config: &ElectraConfig) -> Vec<String> {
        encoder_ignored(config.tie_word_embeddings.then_some(ELECTRA_TIED_DECODER))
    }

    fn base_roots() -> Vec<String> {
        vec!["embeddings".into(), "embeddings_project".into(), "encoder".into()]
    }
}

impl PretrainedModel for ElectraModel {
    type Config = ElectraConfig;

    fn architecture() -> String {
        "ElectraModel".into()
    }

    fn init(config: &ElectraConfig, device: &Device) -> Self {
        Self::new(config, device)
    }

    fn checkpoint_spec(config: &ElectraConfig) -> CheckpointSpec {
        <Self as Backbone>::spec(config, false, &[])
    }
}
