//! The ALBERT encoder (HF `AlbertModel`): embeddings `embedding_size` wide, projected to the
//! hidden size, then `num_hidden_layers` depths, each running its group's layers (or, under
//! partial sharing, the group's shared sub-block with the depth's own), and the pooler.

use burn::nn::LayerNorm;
use sesame_layers::{Linear, LinearConfig};
use burn::prelude::*;
use sesame_layers::checkpoint::encoder_ignored;
use sesame_layers::encoder::run_layers;
use sesame_layers::{
    Activation, AttentionMask, Backbone, BackboneOutput, CheckpointSpec, ClassifierConfig, Embeddings, EncoderCache, EncoderInput, EncoderLayer, FeedForward, ClassifierSizes, KeyMap, SentenceHead, LayerParts, MaskedLmHeadConfig, MultiHeadAttention, OutputOptions, Pooler, PoolerConfig, PretrainedModel, SequenceSummaryConfig,
};

use crate::checkpoint::{ALBERT_HEAD_ROWS, ALBERT_ROWS, ALBERT_TIED_DECODER};
use crate::config::{Albert, AlbertConfig, ParameterSharing};

/// Attention and the LayerNorm after it: what a depth owns when only feed-forward blocks are shared.
#[derive(Module, Debug)]
pub struct AttentionSublayer {
    /// Self-attention.
    pub attention: MultiHeadAttention,
    /// LayerNorm after attention.
    pub attention_norm: LayerNorm,
}

/// The feed-forward block and the LayerNorm after it: what a depth owns when only attention is shared.
#[derive(Module, Debug)]
pub struct FeedForwardSublayer {
    /// Feed-forward block.
    pub feed_forward: FeedForward,
    /// LayerNorm after it.
    pub output_norm: LayerNorm,
}

/// The sub-blocks one depth owns instead of taking them from its group, one per layer of the
/// group. Empty under whole-layer sharing, and at the first depth of every group (which uses
/// the group's own layers), so every parameter is used and counted once.
#[derive(Module, Debug)]
pub struct AlbertDepthLayers {
    /// Own attention sub-blocks ([`ParameterSharing::FeedForward`]).
    pub attention: Vec<AttentionSublayer>,
    /// Own feed-forward sub-blocks ([`ParameterSharing::Attention`]).
    pub feed_forward: Vec<FeedForwardSublayer>,
}

/// One group of layers (HF `AlbertLayerGroup`).
#[derive(Module, Debug)]
pub struct AlbertLayerGroup {
    /// The group's layers, applied in order.
    pub albert_layers: Vec<EncoderLayer>,
}

/// The projection E → H and the shared layer groups (HF `AlbertTransformer`).
#[derive(Module, Debug)]
pub struct AlbertTransformer {
    /// `embedding_size -> hidden_size`.
    pub embedding_hidden_mapping_in: Linear,
    /// The distinct layer groups.
    pub albert_layer_groups: Vec<AlbertLayerGroup>,
    /// What each depth owns under partial sharing (empty entries otherwise).
    pub depth_layers: Vec<AlbertDepthLayers>,
    /// The group run at each depth.
    #[module(skip)]
    pub schedule: Vec<usize>,
}

impl AlbertTransformer {
    /// The transformer for `config`: its groups, and each depth's own sub-blocks.
    pub fn new(config: &AlbertConfig, device: &Device) -> Self {
        let layer = config.hparams.encoder();
        let groups = (0..config.num_hidden_groups)
            .map(|_| AlbertLayerGroup { albert_layers: (0..config.inner_group_num).map(|_| layer.init_layer(device)).collect() })
            .collect();
        let schedule: Vec<usize> = (0..config.num_hidden_layers).map(|depth| config.group_of(depth)).collect();
        let depth_layers = (0..config.num_hidden_layers)
            .map(|depth| {
                let first_of_group = depth == 0 || schedule[depth - 1] != schedule[depth];
                let owned = if first_of_group { 0 } else { config.inner_group_num };
                let layers = (0..owned).map(|_| layer.init_layer(device));
                let (mut attention, mut feed_forward) = (Vec::new(), Vec::new());
                match config.parameter_sharing {
                    ParameterSharing::All => {}
                    ParameterSharing::Attention => {
                        feed_forward = layers.map(|l| FeedForwardSublayer { feed_forward: l.feed_forward, output_norm: l.output_norm }).collect()
                    }
                    ParameterSharing::FeedForward => {
                        attention = layers.map(|l| AttentionSublayer { attention: l.attention, attention_norm: l.attention_norm }).collect()
                    }
                }
                AlbertDepthLayers { attention, feed_forward }
            })
            .collect();
        Self {
            embedding_hidden_mapping_in: LinearConfig::new(config.embedding_size, config.hidden_size).init(device),
            albert_layer_groups: groups,
            depth_layers,
            schedule,
        }
    }

    /// The layers run at each depth: the group's, with the depth's own sub-blocks in place of
    /// the group's where it has them.
    pub fn depths(&self) -> Vec<Vec<LayerParts<'_>>> {
        let mut depths = Vec::with_capacity(self.schedule.len());
        for (&group, own) in self.schedule.iter().zip(&self.depth_layers) {
            let mut layers = Vec::new();
            for (i, layer) in self.albert_layer_groups[group].albert_layers.iter().enumerate() {
                let mut parts = layer.parts();
                if let Some(a) = own.attention.get(i) {
                    (parts.attention, parts.attention_norm) = (&a.attention, &a.attention_norm);
                }
                if let Some(f) = own.feed_forward.get(i) {
                    (parts.feed_forward, parts.output_norm) = (&f.feed_forward, &f.output_norm);
                }
                layers.push(parts);
            }
            depths.push(layers);
        }
        depths
    }

    /// Project `embeddings` `[batch, seq, E]` and run every depth's layers over it.
    pub fn forward(
        &self,
        embeddings: Tensor<3>,
        mask: &AttentionMask,
        cache: Option<EncoderCache>,
        options: OutputOptions,
    ) -> sesame_layers::EncoderOutput {
        let x = self.embedding_hidden_mapping_in.forward(embeddings);
        run_layers(self.depths().into_iter().flatten(), x, mask, cache, options)
    }
}

/// The ALBERT encoder (HF `AlbertModel`).
#[derive(Module, Debug)]
pub struct AlbertModel {
    /// Word + position + token-type embeddings, `embedding_size` wide.
    pub embeddings: Embeddings,
    /// Projection and shared layers.
    pub encoder: AlbertTransformer,
    /// `tanh(dense(h[:, 0]))` (HF `pooler` + `pooler_activation`).
    pub pooler: Option<Pooler>,
}

impl AlbertModel {
    /// A freshly initialised model; `add_pooling_layer` as in HF.
    pub fn new(config: &AlbertConfig, add_pooling_layer: bool, device: &Device) -> Self {
        Self {
            embeddings: config.embeddings(config.embedding_size).init(device),
            encoder: AlbertTransformer::new(config, device),
            pooler: add_pooling_layer.then(|| PoolerConfig::new(config.hidden_size).init(device)),
        }
    }

    /// Run the encoder over `input`.
    pub fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput {
        let mask = input.mask();
        let positions = input.positions();
        let x = self.embeddings.forward(input.input_ids, input.token_type_ids, positions);
        let encoder = self.encoder.forward(x, &mask, input.cache, options);
        let pooler_output = self.pooler.as_ref().map(|p| p.forward(encoder.last_hidden_state.clone()));
        BackboneOutput { encoder, pooler_output }
    }
}

impl Backbone for AlbertModel {
    fn pool(&self, hidden: Tensor<3>) -> Option<Tensor<2>> {
        self.pooler.as_ref().map(|p| p.forward(hidden))
    }

    const CLASS: &'static str = Albert::CLASS;
    const PREFIX: &'static str = Albert::PREFIX;
    const POOLER: bool = true;
    /// Sentence-order prediction (HF `AlbertSOPHead`).
    const SENTENCE_HEAD: Option<SentenceHead> = Some(SentenceHead { logits: "sop_logits", labels: "sentence_order_label" });

    fn lm_head(config: &AlbertConfig) -> MaskedLmHeadConfig {
        MaskedLmHeadConfig::new(config.hidden_size, config.embedding_size, config.vocab_size, config.hidden_act)
            .with_layer_norm_eps(config.layer_norm_eps)
            .with_tie_word_embeddings(config.tie_word_embeddings)
    }

    /// Dropout, then as many outputs as labels.
    fn sentence_head(config: &AlbertConfig) -> ClassifierConfig {
        ClassifierConfig::new(config.hidden_size, config.num_labels()).with_dropout(config.classifier_dropout_prob)
    }

    fn new(config: &AlbertConfig, add_pooling_layer: bool, device: &Device) -> Self {
        Self::new(config, add_pooling_layer, device)
    }

    fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput {
        self.forward(input, options)
    }

    fn layer_stack(&self, input: &EncoderInput) -> Option<(Tensor<3>, Vec<Vec<LayerParts<'_>>>)> {
        let x = self.embeddings.forward(input.input_ids.clone(), input.token_type_ids.clone(), input.positions());
        Some((self.encoder.embedding_hidden_mapping_in.forward(x), self.encoder.depths()))
    }

    fn word_embeddings(&self) -> Tensor<2> {
        self.embeddings.word_embeddings.weight.val()
    }

    /// The depths `layers` (0-based, increasing) of the shared groups: a student runs the same
    /// shared layers fewer times. The groups the kept depths run must be the ones a config of
    /// that many layers assigns them (always so with one group, ALBERT's own); partial sharing
    /// (depths owning sub-blocks) is refused.
    fn keep_layers(self, config: &mut AlbertConfig, layers: &[usize]) -> Result<Self, sesame_layers::ConfigError> {
        let depths = self.encoder.schedule.len();
        let invalid = |reason: String| sesame_layers::ConfigError::Invalid { field: "num_hidden_layers".into(), reason };
        if layers.is_empty() || layers.windows(2).any(|w| w[0] >= w[1]) || layers.iter().any(|&l| l >= depths) {
            return Err(invalid(format!("cannot keep depths {layers:?} of {depths}")));
        }
        if config.parameter_sharing != ParameterSharing::All {
            return Err(invalid("depths that own sub-blocks (parameter_sharing) cannot be picked".into()));
        }
        let mut kept = config.clone();
        kept.hparams.num_hidden_layers = layers.len();
        kept.validate()?;
        let schedule: Vec<usize> = layers.iter().map(|&d| self.encoder.schedule[d]).collect();
        let assigned: Vec<usize> = (0..layers.len()).map(|d| kept.group_of(d)).collect();
        if schedule != assigned {
            return Err(invalid(format!(
                "the depths kept run groups {schedule:?}, but {} layers over {} groups run {assigned:?}",
                layers.len(), kept.num_hidden_groups
            )));
        }
        let depth_layers = layers.iter().map(|&d| self.encoder.depth_layers[d].clone()).collect();
        *config = kept;
        Ok(Self { encoder: AlbertTransformer { schedule, depth_layers, ..self.encoder }, ..self })
    }

    fn classifier_sizes(config: &AlbertConfig) -> ClassifierSizes {
        ClassifierSizes {
            hidden_size: config.hidden_size,
            layers: config.num_hidden_layers,
            num_labels: config.num_labels(),
            classifier_dropout: config.classifier_dropout_prob,
            classifier_activation: Activation::Tanh,
            summary: SequenceSummaryConfig::first_token(config.hidden_size),
        }
    }

    fn key_map(_config: &AlbertConfig) -> KeyMap {
        KeyMap::new(ALBERT_ROWS).with(ALBERT_HEAD_ROWS)
    }

    fn ignored(config: &AlbertConfig) -> Vec<String> {
        encoder_ignored(config.tie_word_embeddings.then_some(ALBERT_TIED_DECODER))
    }

    fn base_roots() -> Vec<String> {
        vec!["embeddings".into(), "encoder".into(), "pooler".into()]
    }
}

impl PretrainedModel for AlbertModel {
    type Config = AlbertConfig;

    fn architecture() -> String {
        "AlbertModel".into()
    }

    fn init(config: &AlbertConfig, device: &Device) -> Self {
        Self::new(config, true, device)
    }

    fn checkpoint_spec(config: &AlbertConfig) -> CheckpointSpec {
        Self::spec(config, false, &["pooler."])
    }
}
