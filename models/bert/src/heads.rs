//! BERT's task models: the shared ones of `sesame_layers::tasks` on [`BertModel`], named as
//! in transformers, and next-sentence prediction alone (HF `BertForNextSentencePrediction`),
//! BERT's own head model.

use burn::prelude::*;
use sesame_layers::loss::cross_entropy;
use sesame_layers::{
    Backbone, CheckpointSpec, Classifier, EncoderInput, ForCausalLM, ForMaskedLM, ForMultipleChoice, ForPreTraining,
    ForQuestionAnswering, ForSequenceClassification, ForTokenClassification, HeadOutput, OutputOptions, PretrainedModel,
};

use crate::{BertConfig, BertModel};

/// MLM + NSP (HF `BertForPreTraining`).
pub type BertForPreTraining = ForPreTraining<BertModel>;
/// MLM head only (HF `BertForMaskedLM`).
pub type BertForMaskedLM = ForMaskedLM<BertModel>;
/// MLM + SpanBERT's span-boundary objective; saved as `BertForMaskedLM` with the SBO head
/// (`cls.pair_target_predictions`) beside it.
#[cfg(feature = "train")]
pub type BertForSpanPreTraining = sesame_train::ForSpanPreTraining<BertModel>;
/// Left-to-right language model on the MLM head (HF `BertLMHeadModel`, `is_decoder`).
pub type BertLMHeadModel = ForCausalLM<BertModel>;
/// Dropout + linear on the pooled output (HF `BertForSequenceClassification`).
pub type BertForSequenceClassification = ForSequenceClassification<BertModel, Classifier>;
/// A label per token (HF `BertForTokenClassification`).
pub type BertForTokenClassification = ForTokenClassification<BertModel>;
/// Extractive QA span head (HF `BertForQuestionAnswering`).
pub type BertForQuestionAnswering = ForQuestionAnswering<BertModel>;
/// Scores per choice from the pooled output (HF `BertForMultipleChoice`).
pub type BertForMultipleChoice = ForMultipleChoice<BertModel, Classifier>;

/// BERT with the next-sentence head only.
#[derive(Module, Debug)]
pub struct BertForNextSentencePrediction {
    /// The encoder, with pooler.
    pub base: BertModel,
    /// `pooled -> 2` (HF `cls.seq_relationship`; no dropout).
    pub sentence_head: Classifier,
}

impl BertForNextSentencePrediction {
    /// NSP logits `[batch, 2]`; loss when `labels` `[batch]` (0 = is next) are given.
    pub fn forward(&self, input: EncoderInput, labels: Option<Tensor<1, Int>>, options: OutputOptions) -> HeadOutput<2> {
        let out = self.base.forward(input, options);
        let logits = self.sentence_head.forward(BertModel::pooled(&out));
        let loss = labels.map(|l| cross_entropy(logits.clone(), l));
        HeadOutput { logits, loss, encoder: out.encoder }
    }
}

impl PretrainedModel for BertForNextSentencePrediction {
    type Config = BertConfig;

    fn architecture() -> String {
        "BertForNextSentencePrediction".into()
    }

    fn init(config: &BertConfig, device: &Device) -> Self {
        Self {
            base: BertModel::new(config, true, device),
            sentence_head: BertModel::sentence_head(config).init(device),
        }
    }

    fn checkpoint_spec(config: &BertConfig) -> CheckpointSpec {
        BertModel::spec(config, true, &["sentence_head.", "base.pooler."])
    }
}
