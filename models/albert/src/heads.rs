//! ALBERT's task models: the shared heads of `sesame_layers::tasks` on [`AlbertModel`], under
//! transformers' names (pre-training has sentence-order prediction where BERT has NSP).

use sesame_layers::{
    Classifier, EncoderInput, ForMaskedLM, ForMultipleChoice, ForPreTraining, ForQuestionAnswering,
    ForSequenceClassification, ForTokenClassification,
};

use crate::model::AlbertModel;

/// One batch of ALBERT input (HF argument names).
pub type AlbertInput = EncoderInput;
/// MLM + sentence-order prediction (HF `AlbertForPreTraining`).
pub type AlbertForPreTraining = ForPreTraining<AlbertModel>;
/// MLM head only (HF `AlbertForMaskedLM`).
pub type AlbertForMaskedLM = ForMaskedLM<AlbertModel>;
/// Dropout + linear on the pooled output (HF `AlbertForSequenceClassification`).
pub type AlbertForSequenceClassification = ForSequenceClassification<AlbertModel, Classifier>;
/// A label per token (HF `AlbertForTokenClassification`).
pub type AlbertForTokenClassification = ForTokenClassification<AlbertModel>;
/// Extractive QA span head (HF `AlbertForQuestionAnswering`).
pub type AlbertForQuestionAnswering = ForQuestionAnswering<AlbertModel>;
/// Scores per choice (HF `AlbertForMultipleChoice`).
pub type AlbertForMultipleChoice = ForMultipleChoice<AlbertModel, Classifier>;
