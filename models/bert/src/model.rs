//! The BERT encoder (HF `BertModel`): embeddings, a stack of post-LN layers, an optional
//! pooler. RoBERTa runs the same model with its own position ids.

use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;

use burn::prelude::*;
use sesame_layers::{
    Activation, Backbone, ConfigError, BackboneOutput, CheckpointSpec, ClassifierConfig, ClassifierSizes, EncoderInput, KeyMap, MaskedLmHeadConfig, OutputOptions, Pooler, PoolerConfig, PretrainedModel, SentenceHead, SequenceSummaryConfig,
};
use sesame_layers::checkpoint::encoder_ignored;
use sesame_layers::{Embeddings, Encoder, LayerParts};

use crate::checkpoint::encoder_rows;
use crate::config::{BertLikeConfig, BertLikeFamily};

/// A BERT-shaped base model (HF `BertModel`, `RobertaModel`): embeddings, post-LN encoder and
/// optional pooler.
#[derive(Module, Debug)]
pub struct BertLikeModel<F: BertLikeFamily> {
    /// Word + position + token-type embeddings.
    pub embeddings: Embeddings,
    /// The transformer layers.
    pub encoder: Encoder,
    /// The pooler, absent in models that do not use it (HF `add_pooling_layer=False`).
    pub pooler: Option<Pooler>,
    /// RoBERTa's padding id, from which position ids are counted.
    #[module(skip)]
    padding_idx: Option<i64>,
    #[module(skip)]
    family: PhantomData<F>,
}

impl<F: BertLikeFamily> BertLikeModel<F> {
    /// A freshly initialised model; `add_pooling_layer` as in HF.
    pub fn new(config: &BertLikeConfig<F>, add_pooling_layer: bool, device: &Device) -> Self {
        Self {
            embeddings: config.embeddings(config.hidden_size).init(device),
            encoder: config.encoder().init(device),
            pooler: add_pooling_layer.then(|| PoolerConfig::new(config.hidden_size).init(device)),
            padding_idx: F::POSITIONS_AFTER_PADDING.then(|| config.pad_token_id.unwrap_or(0) as i64),
            family: PhantomData,
        }
    }

    /// Run the encoder over `input`: embed, attend under the padding mask (and the input's
    /// further restriction), pool. With a cache in `input`, only its new positions are run.
    pub fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput {
        let x = self.embed(&input);
        let encoder = self.encoder.forward(x, &input.mask(), input.cache, options);
        let pooler_output = self.pooler.as_ref().map(|p| p.forward(encoder.last_hidden_state.clone()));
        BackboneOutput { encoder, pooler_output }
    }

    /// The embeddings of `input` `[batch, seq, hidden]`, with the family's default position ids.
    pub fn embed(&self, input: &EncoderInput) -> Tensor<3> {
        let positions = input.position_ids.clone().unwrap_or_else(|| self.position_ids(input));
        self.embeddings.forward(input.input_ids.clone(), input.token_type_ids.clone(), positions)
    }

    /// The word-embedding table `[vocab, hidden]` (the tied MLM decoder).
    pub fn word_embeddings(&self) -> Tensor<2> {
        self.embeddings.word_embeddings.weight.val()
    }

    /// Default position ids: `past + i`; RoBERTa's are `padding_idx + past + i` for the i-th
    /// non-padding token and `padding_idx` for padding (HF `create_position_ids_from_input_ids`).
    fn position_ids(&self, input: &EncoderInput) -> Tensor<2, Int> {
        match self.padding_idx {
            None => input.default_position_ids(),
            Some(pad) => {
                let tokens = input.input_ids.clone().not_equal_elem(pad).int();
                ((tokens.clone().cumsum(1).add_scalar(input.past_len() as i64)) * tokens).add_scalar(pad)
            }
        }
    }
}

impl<F: BertLikeFamily> Backbone for BertLikeModel<F> {
    fn pool(&self, hidden: Tensor<3>) -> Option<Tensor<2>> {
        self.pooler.as_ref().map(|p| p.forward(hidden))
    }

    const CLASS: &'static str = F::CLASS;
    const PREFIX: &'static str = F::PREFIX;
    const POOLER: bool = true;
    /// Next-sentence prediction, for the families that pre-train with it.
    const SENTENCE_HEAD: Option<SentenceHead> = if F::NEXT_SENTENCE { Some(SentenceHead { logits: "seq_relationship_logits", labels: "next_sentence_label" }) } else { None };

    fn lm_head(config: &Self::Config) -> MaskedLmHeadConfig {
        let hidden = config.hidden_size;
        MaskedLmHeadConfig::new(hidden, hidden, config.vocab_size, F::lm_head_activation(config))
            .with_layer_norm_eps(config.layer_norm_eps)
            .with_tie_word_embeddings(config.tie_word_embeddings)
    }

    fn sentence_head(config: &Self::Config) -> ClassifierConfig {
        // BERT's NSP head has no dropout.
        ClassifierConfig::new(config.hidden_size, 2).with_dropout(0.0)
    }

    fn new(config: &Self::Config, add_pooling_layer: bool, device: &Device) -> Self {
        Self::new(config, add_pooling_layer, device)
    }

    fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput {
        self.forward(input, options)
    }

    fn causal_lm_architecture() -> String {
        F::causal_lm_architecture()
    }

    fn encoder(&self) -> Option<&Encoder> {
        Some(&self.encoder)
    }

    fn layer_stack(&self, input: &EncoderInput) -> Option<(Tensor<3>, Vec<Vec<LayerParts<'_>>>)> {
        Some((self.embed(input), self.encoder.layers.iter().map(|l| vec![l.parts()]).collect()))
    }

    fn keep_layers(self, config: &mut Self::Config, layers: &[usize]) -> Result<Self, ConfigError> {
        let mut kept = config.clone();
        kept.hparams = config.hparams.with_layers(layers);
        kept.validate()?;
        let encoder = self.encoder.keep_layers(layers)?;
        *config = kept;
        Ok(Self { encoder, ..self })
    }

    fn prune_heads(self, config: &mut Self::Config, heads: &BTreeMap<usize, BTreeSet<usize>>) -> Result<Self, ConfigError> {
        let mut pruned = config.clone();
        pruned.hparams = config.hparams.with_pruned(heads);
        pruned.validate()?;
        let encoder = self.encoder.prune_heads(config.num_attention_heads, &config.pruned(), heads);
        *config = pruned;
        Ok(Self { encoder, ..self })
    }

    fn word_embeddings(&self) -> Tensor<2> {
        self.word_embeddings()
    }

    fn classifier_sizes(config: &Self::Config) -> ClassifierSizes {
        ClassifierSizes {
            hidden_size: config.hidden_size,
            layers: config.num_hidden_layers,
            num_labels: config.num_labels(),
            classifier_dropout: config.classifier_dropout(),
            classifier_activation: Activation::Tanh,
            summary: SequenceSummaryConfig::first_token(config.hidden_size),
        }
    }

    fn key_map(_config: &Self::Config) -> KeyMap {
        KeyMap::new(&encoder_rows()).with(&F::head_rows())
    }

    fn ignored(config: &Self::Config) -> Vec<String> {
        encoder_ignored(config.tie_word_embeddings.then_some(F::TIED_DECODER))
    }

    fn base_roots() -> Vec<String> {
        vec!["embeddings".into(), "encoder".into(), "pooler".into()]
    }
}

impl<F: BertLikeFamily> PretrainedModel for BertLikeModel<F> {
    type Config = BertLikeConfig<F>;

    fn architecture() -> String {
        format!("{}Model", F::CLASS)
    }

    fn init(config: &Self::Config, device: &Device) -> Self {
        <Self as Backbone>::new(config, true, device)
    }

    fn checkpoint_spec(config: &Self::Config) -> CheckpointSpec {
        <Self as Backbone>::spec(config, false, &["pooler."])
    }
}
