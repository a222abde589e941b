//! BERT with task heads. Each type says what it adds on top of [`BertModel`] and computes
//! HF's loss when labels are given.

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use sesame_layers::heads::{question_answering_loss, token_classification_loss};
use sesame_layers::loss::cross_entropy;
use sesame_layers::{
    CheckpointSpec, Classifier, ClassifierConfig, EncoderOutput, MaskedLmHead, MaskedLmHeadConfig, OutputOptions,
    PretrainedModel, QuestionAnsweringHead, QuestionAnsweringHeadConfig, SequenceLabels,
};

use crate::checkpoint::spec;
use crate::config::BertConfig;
use crate::model::{BertInput, BertModel};

/// Logits of one head, the loss when labels were given, and what the encoder was asked for.
#[derive(Clone, Debug)]
pub struct HeadOutput<const D: usize> {
    /// Head logits.
    pub logits: Tensor<D>,
    /// HF loss, when labels were given.
    pub loss: Option<Tensor<1>>,
    /// Encoder hidden states and attentions (when asked).
    pub encoder: EncoderOutput,
}

fn mlm_head(config: &BertConfig, device: &Device) -> MaskedLmHead {
    MaskedLmHeadConfig::new(config.hidden_size, config.hidden_size, config.vocab_size, config.hidden_act)
        .with_layer_norm_eps(config.layer_norm_eps)
        .with_tie_word_embeddings(config.tie_word_embeddings)
        .init(device)
}

/// MLM loss of `logits` `[batch, seq, vocab]` against `labels` `[batch, seq]` (-100 ignored).
pub fn masked_lm_loss(logits: Tensor<3>, labels: Tensor<2, Int>) -> Tensor<1> {
    let [b, s, v] = logits.dims();
    cross_entropy(logits.reshape([b * s, v]), labels.reshape([b * s]))
}

/// The pre-training heads (HF `cls`): MLM prediction and/or next-sentence classifier.
#[derive(Module, Debug)]
pub struct BertPreTrainingHeads {
    /// MLM head (HF `cls.predictions`).
    pub predictions: Option<MaskedLmHead>,
    /// NSP classifier `hidden -> 2` (HF `cls.seq_relationship`).
    pub seq_relationship: Option<Linear>,
}

/// Labels for [`BertForPreTraining`].
#[derive(Clone, Debug)]
pub struct PreTrainingLabels {
    /// MLM targets `[batch, seq]` (-100 = not predicted).
    pub mlm: Tensor<2, Int>,
    /// 0 = B follows A, 1 = B is random `[batch]`.
    pub next_sentence: Tensor<1, Int>,
}

/// What [`BertForPreTraining`] returns.
#[derive(Clone, Debug)]
pub struct PreTrainingOutput {
    /// MLM logits `[batch, seq, vocab]`.
    pub prediction_logits: Tensor<3>,
    /// NSP logits `[batch, 2]`.
    pub seq_relationship_logits: Tensor<2>,
    /// MLM loss + NSP loss, when labels were given.
    pub loss: Option<Tensor<1>>,
    /// MLM loss alone.
    pub mlm_loss: Option<Tensor<1>>,
    /// NSP loss alone.
    pub nsp_loss: Option<Tensor<1>>,
    /// Encoder hidden states and attentions (when asked).
    pub encoder: EncoderOutput,
}

/// BERT with the MLM and NSP heads (HF `BertForPreTraining`).
#[derive(Module, Debug)]
pub struct BertForPreTraining {
    /// The encoder, with pooler.
    pub bert: BertModel,
    /// MLM + NSP heads.
    pub cls: BertPreTrainingHeads,
}

impl BertForPreTraining {
    /// Logits of both heads, and `mlm + nsp` loss when `labels` are given.
    pub fn forward(&self, input: BertInput, labels: Option<PreTrainingLabels>, options: OutputOptions) -> PreTrainingOutput {
        let out = self.bert.forward(input, options);
        let predictions = self.cls.predictions.as_ref().expect("BertForPreTraining has an MLM head");
        let nsp = self.cls.seq_relationship.as_ref().expect("BertForPreTraining has an NSP head");
        let prediction_logits = predictions.forward(out.last_hidden_state(), self.bert.word_embeddings());
        let pooled = out.pooler_output.clone().expect("BertForPreTraining has a pooler");
        let seq_relationship_logits = nsp.forward(pooled);
        let (mlm_loss, nsp_loss) = match labels {
            Some(l) => (
                Some(masked_lm_loss(prediction_logits.clone(), l.mlm)),
                Some(cross_entropy(seq_relationship_logits.clone(), l.next_sentence)),
            ),
            None => (None, None),
        };
        let loss = mlm_loss.clone().zip(nsp_loss.clone()).map(|(a, b)| a + b);
        PreTrainingOutput { prediction_logits, seq_relationship_logits, loss, mlm_loss, nsp_loss, encoder: out.encoder }
    }
}

impl PretrainedModel for BertForPreTraining {
    type Config = BertConfig;
    const ARCHITECTURE: &'static str = "BertForPreTraining";

    fn init(config: &BertConfig, device: &Device) -> Self {
        Self {
            bert: BertModel::new(config, true, device),
            cls: BertPreTrainingHeads {
                predictions: Some(mlm_head(config, device)),
                seq_relationship: Some(LinearConfig::new(config.hidden_size, 2).init(device)),
            },
        }
    }

    fn checkpoint_spec(config: &BertConfig) -> CheckpointSpec {
        spec(true, &[], config.tie_word_embeddings)
    }
}

/// BERT with the MLM head only (HF `BertForMaskedLM`; no pooler).
#[derive(Module, Debug)]
pub struct BertForMaskedLM {
    /// The encoder, without pooler.
    pub bert: BertModel,
    /// The MLM head.
    pub cls: BertPreTrainingHeads,
}

impl BertForMaskedLM {
    /// Vocabulary logits `[batch, seq, vocab]`; MLM loss when `labels` `[batch, seq]` are given.
    pub fn forward(&self, input: BertInput, labels: Option<Tensor<2, Int>>, options: OutputOptions) -> HeadOutput<3> {
        let out = self.bert.forward(input, options);
        let head = self.cls.predictions.as_ref().expect("BertForMaskedLM has an MLM head");
        let logits = head.forward(out.last_hidden_state(), self.bert.word_embeddings());
        let loss = labels.map(|l| masked_lm_loss(logits.clone(), l));
        HeadOutput { logits, loss, encoder: out.encoder }
    }
}

impl PretrainedModel for BertForMaskedLM {
    type Config = BertConfig;
    const ARCHITECTURE: &'static str = "BertForMaskedLM";

    fn init(config: &BertConfig, device: &Device) -> Self {
        Self {
            bert: BertModel::new(config, false, device),
            cls: BertPreTrainingHeads { predictions: Some(mlm_head(config, device)), seq_relationship: None },
        }
    }

    fn checkpoint_spec(config: &BertConfig) -> CheckpointSpec {
        spec(true, &["cls."], config.tie_word_embeddings)
    }
}

/// BERT with the next-sentence head only (HF `BertForNextSentencePrediction`).
#[derive(Module, Debug)]
pub struct BertForNextSentencePrediction {
    /// The encoder, with pooler.
    pub bert: BertModel,
    /// The NSP head.
    pub cls: BertPreTrainingHeads,
}

impl BertForNextSentencePrediction {
    /// NSP logits `[batch, 2]`; loss when `labels` `[batch]` (0 = is next) are given.
    pub fn forward(&self, input: BertInput, labels: Option<Tensor<1, Int>>, options: OutputOptions) -> HeadOutput<2> {
        let out = self.bert.forward(input, options);
        let head = self.cls.seq_relationship.as_ref().expect("BertForNextSentencePrediction has an NSP head");
        let logits = head.forward(out.pooler_output.expect("BertForNextSentencePrediction has a pooler"));
        let loss = labels.map(|l| cross_entropy(logits.clone(), l));
        HeadOutput { logits, loss, encoder: out.encoder }
    }
}

impl PretrainedModel for BertForNextSentencePrediction {
    type Config = BertConfig;
    const ARCHITECTURE: &'static str = "BertForNextSentencePrediction";

    fn init(config: &BertConfig, device: &Device) -> Self {
        Self {
            bert: BertModel::new(config, true, device),
            cls: BertPreTrainingHeads {
                predictions: None,
                seq_relationship: Some(LinearConfig::new(config.hidden_size, 2).init(device)),
            },
        }
    }

    fn checkpoint_spec(config: &BertConfig) -> CheckpointSpec {
        spec(true, &["cls.", "bert.pooler."], config.tie_word_embeddings)
    }
}

fn classifier(config: &BertConfig, num_labels: usize, device: &Device) -> Classifier {
    ClassifierConfig::new(config.hidden_size, num_labels).with_dropout(config.classifier_dropout()).init(device)
}

/// BERT with a classifier on the pooled output (HF `BertForSequenceClassification`).
#[derive(Module, Debug)]
pub struct BertForSequenceClassification {
    /// The encoder, with pooler.
    pub bert: BertModel,
    /// Dropout + `hidden -> num_labels` (HF `classifier`).
    pub head: Classifier,
}

impl BertForSequenceClassification {
    /// Logits `[batch, num_labels]`; the loss of `labels` (whose variant is the problem type).
    pub fn forward(&self, input: BertInput, labels: Option<SequenceLabels>, options: OutputOptions) -> HeadOutput<2> {
        let out = self.bert.forward(input, options);
        let logits = self.head.forward(out.pooler_output.expect("BertForSequenceClassification has a pooler"));
        let loss = labels.map(|l| l.loss(logits.clone()));
        HeadOutput { logits, loss, encoder: out.encoder }
    }
}

impl PretrainedModel for BertForSequenceClassification {
    type Config = BertConfig;
    const ARCHITECTURE: &'static str = "BertForSequenceClassification";

    fn init(config: &BertConfig, device: &Device) -> Self {
        Self { bert: BertModel::new(config, true, device), head: classifier(config, config.num_labels(), device) }
    }

    fn checkpoint_spec(config: &BertConfig) -> CheckpointSpec {
        spec(true, &["head.", "bert.pooler."], config.tie_word_embeddings)
    }
}

/// BERT with a classifier on every token (HF `BertForTokenClassification`; no pooler).
#[derive(Module, Debug)]
pub struct BertForTokenClassification {
    /// The encoder, without pooler.
    pub bert: BertModel,
    /// Dropout + `hidden -> num_labels` (HF `classifier`).
    pub head: Classifier,
}

impl BertForTokenClassification {
    /// Logits `[batch, seq, num_labels]`; loss when `labels` `[batch, seq]` (-100 ignored) are given.
    pub fn forward(&self, input: BertInput, labels: Option<Tensor<2, Int>>, options: OutputOptions) -> HeadOutput<3> {
        let out = self.bert.forward(input, options);
        let logits = self.head.forward(out.last_hidden_state());
        let loss = labels.map(|l| token_classification_loss(logits.clone(), l));
        HeadOutput { logits, loss, encoder: out.encoder }
    }
}

impl PretrainedModel for BertForTokenClassification {
    type Config = BertConfig;
    const ARCHITECTURE: &'static str = "BertForTokenClassification";

    fn init(config: &BertConfig, device: &Device) -> Self {
        Self { bert: BertModel::new(config, false, device), head: classifier(config, config.num_labels(), device) }
    }

    fn checkpoint_spec(config: &BertConfig) -> CheckpointSpec {
        spec(true, &["head."], config.tie_word_embeddings)
    }
}

/// What [`BertForQuestionAnswering`] returns.
#[derive(Clone, Debug)]
pub struct QuestionAnsweringOutput {
    /// Span-start logits `[batch, seq]`.
    pub start_logits: Tensor<2>,
    /// Span-end logits `[batch, seq]`.
    pub end_logits: Tensor<2>,
    /// Mean of start and end losses, when positions were given.
    pub loss: Option<Tensor<1>>,
    /// Encoder hidden states and attentions (when asked).
    pub encoder: EncoderOutput,
}

/// BERT with an extractive-QA span head (HF `BertForQuestionAnswering`; no pooler).
#[derive(Module, Debug)]
pub struct BertForQuestionAnswering {
    /// The encoder, without pooler.
    pub bert: BertModel,
    /// `hidden -> 2` (HF `qa_outputs`).
    pub head: QuestionAnsweringHead,
}

impl BertForQuestionAnswering {
    /// Start/end logits; the loss when `positions` (start `[batch]`, end `[batch]`) are given.
    pub fn forward(
        &self,
        input: BertInput,
        positions: Option<(Tensor<1, Int>, Tensor<1, Int>)>,
        options: OutputOptions,
    ) -> QuestionAnsweringOutput {
        let out = self.bert.forward(input, options);
        let (start_logits, end_logits) = self.head.forward(out.last_hidden_state());
        let loss = positions
            .map(|(start, end)| question_answering_loss(start_logits.clone(), end_logits.clone(), start, end));
        QuestionAnsweringOutput { start_logits, end_logits, loss, encoder: out.encoder }
    }
}

impl PretrainedModel for BertForQuestionAnswering {
    type Config = BertConfig;
    const ARCHITECTURE: &'static str = "BertForQuestionAnswering";

    fn init(config: &BertConfig, device: &Device) -> Self {
        Self {
            bert: BertModel::new(config, false, device),
            head: QuestionAnsweringHeadConfig::new(config.hidden_size).init(device),
        }
    }

    fn checkpoint_spec(config: &BertConfig) -> CheckpointSpec {
        spec(true, &["head."], config.tie_word_embeddings)
    }
}

/// BERT scoring each choice's pooled output (HF `BertForMultipleChoice`).
#[derive(Module, Debug)]
pub struct BertForMultipleChoice {
    /// The encoder, with pooler.
    pub bert: BertModel,
    /// Dropout + `hidden -> 1` (HF `classifier`).
    pub head: Classifier,
}

impl BertForMultipleChoice {
    /// `input` holds `[batch * choices, seq]` tensors, choice-major within each example.
    /// Returns logits `[batch, choices]`; the loss when `labels` `[batch]` are given.
    pub fn forward(
        &self,
        input: BertInput,
        num_choices: usize,
        labels: Option<Tensor<1, Int>>,
        options: OutputOptions,
    ) -> HeadOutput<2> {
        let rows = input.input_ids.dims()[0];
        let out = self.bert.forward(input, options);
        let scores = self.head.forward(out.pooler_output.expect("BertForMultipleChoice has a pooler"));
        let logits = scores.reshape([rows / num_choices, num_choices]);
        let loss = labels.map(|l| cross_entropy(logits.clone(), l));
        HeadOutput { logits, loss, encoder: out.encoder }
    }
}

impl PretrainedModel for BertForMultipleChoice {
    type Config = BertConfig;
    const ARCHITECTURE: &'static str = "BertForMultipleChoice";

    fn init(config: &BertConfig, device: &Device) -> Self {
        Self { bert: BertModel::new(config, true, device), head: classifier(config, 1, device) }
    }

    fn checkpoint_spec(config: &BertConfig) -> CheckpointSpec {
        spec(true, &["head.", "bert.pooler."], config.tie_word_embeddings)
    }
}
