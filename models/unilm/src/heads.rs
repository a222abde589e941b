//! UniLM's task models: BERT's heads on [`UnilmModel`], under transformers' BERT names (a
//! UniLM checkpoint is a BERT one).

use sesame_layers::{Classifier, ForMaskedLM, ForPreTraining, ForQuestionAnswering, ForSequenceClassification, ForTokenClassification};

use crate::model::UnilmModel;

/// The cloze head of every UniLM objective (HF `BertForMaskedLM`).
pub type UnilmForMaskedLM = ForMaskedLM<UnilmModel>;
/// Cloze head + next-sentence prediction, trained with the bidirectional objective (HF `BertForPreTraining`).
pub type UnilmForPreTraining = ForPreTraining<UnilmModel>;
/// Dropout + linear on the pooled output (HF `BertForSequenceClassification`).
pub type UnilmForSequenceClassification = ForSequenceClassification<UnilmModel, Classifier>;
/// A label per token (HF `BertForTokenClassification`).
pub type UnilmForTokenClassification = ForTokenClassification<UnilmModel>;
/// Extractive QA span head (HF `BertForQuestionAnswering`).
pub type UnilmForQuestionAnswering = ForQuestionAnswering<UnilmModel>;
