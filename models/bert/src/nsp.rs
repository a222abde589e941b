//! Next-sentence prediction alone (HF `BertForNextSentencePrediction`), BERT's own head model.

use burn::prelude::*;
use sesame_layers::loss::cross_entropy;
use sesame_layers::{
    Backbone, CheckpointSpec, Classifier, ClassifierConfig, EncoderInput, HeadOutput, OutputOptions, PretrainedModel,
};

use crate::{BertConfig, BertModel};

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
        let logits = self.sentence_head.forward(out.pooled("BertForNextSentencePrediction"));
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
            sentence_head: ClassifierConfig::new(config.hidden_size, 2).with_dropout(0.0).init(device),
        }
    }

    fn checkpoint_spec(config: &BertConfig) -> CheckpointSpec {
        BertModel::spec(config, true, &["sentence_head.", "base.pooler."])
    }
}
