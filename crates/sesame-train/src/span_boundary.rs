//! SpanBERT's span-boundary objective (SBO; Joshi et al. 2020, section 3.2): every token `x_i`
//! of a masked span `x_s..x_e` is predicted once more, from the encoder's states at the two
//! tokens just outside the span and an embedding of its offset in the span:
//!
//! ```text
//! h0  = [x_{s-1}; x_{e+1}; p_{i-s}]
//! h1  = LayerNorm(GeLU(W1 h0))
//! y_i = LayerNorm(GeLU(W2 h1))
//! ```
//!
//! `y_i` is scored against the word embeddings (tied, with its own bias) as the MLM head does,
//! and the loss is MLM + SBO, without a sentence task. Names follow the authors' code
//! (facebookresearch/SpanBERT, `BertPairTargetPredictionHead`): in a checkpoint the head is
//! `cls.pair_target_predictions`, which transformers reports as unused when it loads the
//! model as a masked LM.

use burn::module::Param;
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig};
use sesame_layers::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::module::linear;

use sesame_layers::heads::{MaskedLmHead, MaskedLmHeadConfig};
use sesame_layers::loss::{cross_entropy, IGNORE_INDEX};
use sesame_layers::{Activation, CheckpointSpec, EncoderInput, Backbone, OutputOptions, PretrainedModel};

use crate::objective::{MaskedLmObjective, MaskedPositions, MaskedSpans, ObjectiveOutput};

/// Configuration of [`SpanBoundaryHead`]; the defaults are SpanBERT's.
#[derive(Config, Debug)]
pub struct SpanBoundaryHeadConfig {
    /// Encoder width.
    pub d_model: usize,
    /// Word-embedding width, which the output matches (equal to `d_model` except in ALBERT).
    pub d_embedding: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Activation of both layers (HF `hidden_act`).
    pub activation: Activation,
    /// Offsets in a span that have an embedding; later tokens of a longer span are not
    /// SBO targets (SpanBERT's `max_pair_targets`).
    #[config(default = 20)]
    pub max_targets: usize,
    /// Width of the offset embedding (SpanBERT's `pair_positional_embedding_size`).
    #[config(default = 200)]
    pub position_size: usize,
    /// LayerNorm epsilon.
    #[config(default = 1e-12)]
    pub layer_norm_eps: f64,
}

impl SpanBoundaryHeadConfig {
    /// The head for a model whose MLM head is `lm_head`: the same widths, vocabulary,
    /// activation and epsilon.
    pub fn for_lm_head(lm_head: &MaskedLmHeadConfig) -> Self {
        Self::new(lm_head.d_model, lm_head.d_embedding, lm_head.vocab_size, lm_head.activation).with_layer_norm_eps(lm_head.layer_norm_eps)
    }

    /// Build the head on `device`.
    pub fn init(&self, device: &Device) -> SpanBoundaryHead {
        let norm = |d| LayerNormConfig::new(d).with_epsilon(self.layer_norm_eps).init(device);
        SpanBoundaryHead {
            position_embeddings: EmbeddingConfig::new(self.max_targets, self.position_size).init(device),
            linear1: LinearConfig::new(2 * self.d_model + self.position_size, self.d_model).init(device),
            layer_norm1: norm(self.d_model),
            linear2: LinearConfig::new(self.d_model, self.d_embedding).init(device),
            layer_norm2: norm(self.d_embedding),
            activation: self.activation,
            bias: burn::nn::Initializer::Zeros.init([self.vocab_size], device),
        }
    }
}

/// The SBO head (SpanBERT `BertPairTargetPredictionHead`): a two-layer MLP over the boundary
/// states and the offset embedding, decoded by the word embeddings plus `bias`.
#[derive(Module, Debug)]
pub struct SpanBoundaryHead {
    /// Offset-in-span embeddings `[max_targets, position_size]`.
    pub position_embeddings: Embedding,
    /// `2 d_model + position_size -> d_model`.
    pub linear1: Linear,
    /// After the first layer's activation.
    pub layer_norm1: LayerNorm,
    /// `d_model -> d_embedding`.
    pub linear2: Linear,
    /// After the second layer's activation.
    pub layer_norm2: LayerNorm,
    /// Both layers' activation.
    #[module(skip)]
    pub activation: Activation,
    /// Output bias `[vocab]`.
    pub bias: Param<Tensor<1>>,
}

impl SpanBoundaryHead {
    /// Vocabulary logits `[masked, vocab]` at every masked position of `masked`, from the final
    /// states `hidden` `[batch, seq, d_model]` at its span's boundary, and the SBO targets
    /// `[masked]`: the MLM targets, ignored (-100) where the span has no boundary token or the
    /// offset has no embedding.
    pub fn forward(&self, hidden: Tensor<3>, masked: &MaskedPositions, word_embeddings: Tensor<2>) -> (Tensor<2>, Tensor<1, Int>) {
        let [b, s, d] = hidden.dims();
        let MaskedSpans { left, right, offset } = masked.spans.as_ref().expect("SBO batches carry their spans (MaskedLmObjective::READS_SPANS)");
        let max_targets = self.position_embeddings.weight.dims()[0] as i64;
        let predicted = offset.clone().lower_elem(max_targets);
        let targets = masked.targets.clone().mask_fill(predicted.clone().bool_not(), IGNORE_INDEX);
        let offset = offset.clone().mask_fill(predicted.bool_not(), 0);
        let hidden = hidden.reshape([b * s, d]);
        let positions = self.position_embeddings.forward(offset.unsqueeze_dim::<2>(0)).squeeze_dim::<2>(0);
        let h0 = Tensor::cat(vec![hidden.clone().select(0, left.clone()), hidden.select(0, right.clone()), positions], 1);
        let h1 = self.layer_norm1.forward(self.activation.forward(self.linear1.forward(h0)));
        let y = self.layer_norm2.forward(self.activation.forward(self.linear2.forward(h1)));
        (linear(y, word_embeddings.transpose(), Some(self.bias.val())), targets)
    }
}

/// A masked-LM model pre-trained as SpanBERT: MLM + span-boundary objective, no sentence task.
/// Saved as the family's masked LM (`BertForMaskedLM`) with the SBO head beside it.
#[derive(Module, Debug)]
pub struct ForSpanPreTraining<B: Backbone> {
    /// The base model, without pooler.
    pub base: B,
    /// The MLM head.
    pub lm_head: MaskedLmHead,
    /// The SBO head.
    pub span_head: SpanBoundaryHead,
}

/// HF names of the SBO head (the authors' `cls.pair_target_predictions`).
const SPAN_HEAD_ROWS: &[(&str, &str)] = &[
    ("^cls.pair_target_predictions.mlp_layer_norm.linear1", "^span_head.linear1"),
    ("^cls.pair_target_predictions.mlp_layer_norm.layer_norm1", "^span_head.layer_norm1"),
    ("^cls.pair_target_predictions.mlp_layer_norm.linear2", "^span_head.linear2"),
    ("^cls.pair_target_predictions.mlp_layer_norm.layer_norm2", "^span_head.layer_norm2"),
    ("^cls.pair_target_predictions", "^span_head"),
];

impl<B: Backbone> MaskedLmObjective for ForSpanPreTraining<B> {
    const SENTENCE_TASK: bool = false;
    const READS_SPANS: bool = true;

    fn objective(&self, input: EncoderInput, masked: &MaskedPositions, _sentence: Tensor<1, Int>) -> ObjectiveOutput {
        let hidden = self.base.forward(input, OutputOptions::default()).last_hidden_state();
        let words = self.base.word_embeddings();
        let prediction_logits = self.lm_head.forward(masked.gather(hidden.clone()), words.clone());
        let mlm_loss = cross_entropy(prediction_logits.clone(), masked.targets.clone());
        let (span_logits, span_targets) = self.span_head.forward(hidden, masked, words);
        let span_loss = cross_entropy(span_logits, span_targets);
        ObjectiveOutput { loss: mlm_loss.clone() + span_loss.clone(), mlm_loss, prediction_logits, sentence: None, span_boundary: Some(span_loss) }
    }

}

impl<B: Backbone> PretrainedModel for ForSpanPreTraining<B> {
    type Config = B::Config;

    fn architecture() -> String {
        format!("{}ForMaskedLM", B::CLASS)
    }

    fn init(config: &B::Config, device: &Device) -> Self {
        let lm_head = B::lm_head(config);
        Self { base: B::new(config, false, device), span_head: SpanBoundaryHeadConfig::for_lm_head(&lm_head).init(device), lm_head: lm_head.init(device) }
    }

    fn checkpoint_spec(config: &B::Config) -> CheckpointSpec {
        let mut spec = B::spec(config, true, &["lm_head.", "span_head."]);
        spec.keys = spec.keys.with(SPAN_HEAD_ROWS);
        spec
    }
}
