//! ELECTRA's task models: the discriminator (replaced-token detection, HF
//! `ElectraForPreTraining`), and the shared heads of `sesame_layers::tasks` on [`ElectraModel`]
//! under transformers' names: the generator (`ElectraForMaskedLM`), ELECTRA's two-layer GELU
//! sequence classifier, token classification, QA, and multiple choice on a sequence summary.

use sesame_layers::{Linear, LinearConfig};
use burn::prelude::*;
use sesame_layers::{
    Activation, Backbone, CheckpointSpec, ClassificationHead, EncoderInput, EncoderOutput, ForMaskedLM,
    ForMultipleChoice, ForQuestionAnswering, ForSequenceClassification, ForTokenClassification, OutputOptions,
    PretrainedModel, SummaryClassifier,
};

use crate::config::ElectraConfig;
use crate::model::ElectraModel;

/// The generator: MLM head tied to the word embeddings, with its own bias (HF `ElectraForMaskedLM`).
pub type ElectraForMaskedLM = ForMaskedLM<ElectraModel>;
/// Dense, GELU, `out_proj` on the first token (HF `ElectraForSequenceClassification`).
pub type ElectraForSequenceClassification = ForSequenceClassification<ElectraModel, ClassificationHead>;
/// A label per token (HF `ElectraForTokenClassification`).
pub type ElectraForTokenClassification = ForTokenClassification<ElectraModel>;
/// Extractive QA span head (HF `ElectraForQuestionAnswering`).
pub type ElectraForQuestionAnswering = ForQuestionAnswering<ElectraModel>;
/// A sequence summary and a linear score per choice (HF `ElectraForMultipleChoice`).
pub type ElectraForMultipleChoice = ForMultipleChoice<ElectraModel, SummaryClassifier>;

/// The discriminator's head: dense, the config's activation, one logit per token (HF
/// `ElectraDiscriminatorPredictions`).
#[derive(Module, Debug)]
pub struct DiscriminatorPredictions {
    /// `hidden -> hidden`.
    pub dense: Linear,
    /// `hidden_act`.
    #[module(skip)]
    pub activation: Activation,
    /// `hidden -> 1`.
    pub dense_prediction: Linear,
}

impl DiscriminatorPredictions {
    /// `[batch, seq, hidden] -> [batch, seq]` logits of "this token was replaced".
    pub fn forward(&self, hidden: Tensor<3>) -> Tensor<2> {
        let [b, s, _] = hidden.dims();
        self.dense_prediction.forward(self.activation.forward(self.dense.forward(hidden))).reshape([b, s])
    }
}

/// What [`ElectraForPreTraining`] returns.
#[derive(Clone, Debug)]
pub struct DiscriminatorOutput {
    /// Replaced-token logits `[batch, seq]`.
    pub logits: Tensor<2>,
    /// Binary cross-entropy over the non-padding tokens, when labels were given.
    pub loss: Option<Tensor<1>>,
    /// Encoder hidden states and attentions (when asked).
    pub encoder: EncoderOutput,
}

/// The discriminator: replaced-token detection on every token (HF `ElectraForPreTraining`).
#[derive(Module, Debug)]
pub struct ElectraForPreTraining {
    /// The encoder.
    pub base: ElectraModel,
    /// One logit per token.
    pub discriminator_predictions: DiscriminatorPredictions,
}

impl ElectraForPreTraining {
    /// Logits `[batch, seq]`; with `labels` `[batch, seq]` (1 = replaced, 0 = original), the
    /// mean binary cross-entropy over the tokens the attention mask keeps (all without a mask).
    pub fn forward(&self, input: EncoderInput, labels: Option<Tensor<2, Int>>, options: OutputOptions) -> DiscriminatorOutput {
        let keep = input.attention_mask.clone();
        let out = self.base.forward(input, options);
        let logits = self.discriminator_predictions.forward(out.last_hidden_state());
        let loss = labels.map(|labels| replaced_token_loss(logits.clone(), labels, keep));
        DiscriminatorOutput { logits, loss, encoder: out.encoder }
    }
}

/// ELECTRA's discriminator loss: mean binary cross-entropy of `logits` `[batch, seq]` against
/// `labels` (1 = replaced) over the tokens where `attention_mask` is 1 (every token when `None`).
pub fn replaced_token_loss(logits: Tensor<2>, labels: Tensor<2, Int>, attention_mask: Option<Tensor<2, Int>>) -> Tensor<1> {
    let targets = labels.float();
    // max(x, 0) - x*y + log(1 + exp(-|x|)), stable for large |x|.
    let bce = logits.clone().clamp_min(0.0) - logits.clone() * targets + logits.abs().neg().exp().log1p();
    match attention_mask {
        Some(mask) => {
            let keep = mask.float();
            (bce * keep.clone()).sum() / keep.sum().clamp_min(1.0)
        }
        None => bce.mean(),
    }
}

impl PretrainedModel for ElectraForPreTraining {
    type Config = ElectraConfig;

    fn architecture() -> String {
        "ElectraForPreTraining".into()
    }

    fn init(config: &ElectraConfig, device: &Device) -> Self {
        let hidden = config.hidden_size;
        Self {
            base: ElectraModel::new(config, device),
            discriminator_predictions: DiscriminatorPredictions {
                dense: LinearConfig::new(hidden, hidden).init(device),
                activation: config.hidden_act,
                dense_prediction: LinearConfig::new(hidden, 1).init(device),
            },
        }
    }

    fn checkpoint_spec(config: &ElectraConfig) -> CheckpointSpec {
        ElectraModel::spec(config, true, &["discriminator_predictions."])
    }
}

