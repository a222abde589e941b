//! RoBERTa's task models: the shared heads of `sesame_layers::tasks` on [`RobertaModel`], under
//! transformers' names.

use sesame_layers::{
    ClassificationHead, Classifier, EncoderInput, ForMaskedLM, ForMultipleChoice, ForQuestionAnswering,
    ForSequenceClassification, ForTokenClassification,
};

use crate::model::RobertaModel;

/// One batch of RoBERTa input (HF argument names; position ids are made from the ids).
pub type RobertaInput = EncoderInput;
/// MLM head (HF `RobertaForMaskedLM`), RoBERTa's pre-training model.
pub type RobertaForMaskedLM = ForMaskedLM<RobertaModel>;
/// Two-layer head on `<s>`, tanh (HF `RobertaForSequenceClassification`).
pub type RobertaForSequenceClassification = ForSequenceClassification<RobertaModel, ClassificationHead>;
/// A label per token (HF `RobertaForTokenClassification`).
pub type RobertaForTokenClassification = ForTokenClassification<RobertaModel>;
/// Extractive QA span head (HF `RobertaForQuestionAnswering`).
pub type RobertaForQuestionAnswering = ForQuestionAnswering<RobertaModel>;
/// Scores per choice from the pooled output (HF `RobertaForMultipleChoice`).
pub type RobertaForMultipleChoice = ForMultipleChoice<RobertaModel, Classifier>;
