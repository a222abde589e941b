//! BERT for Burn: HuggingFace-compatible configuration, model, task heads and checkpoints.
//!
//! BERT is the reference shape of the family: its configuration, base model and task heads are
//! the shared ones of `sesame-layers` ([`BertLikeConfig`], [`BertLikeModel`], `sesame_layers::tasks`);
//! this crate names them, gives BERT's HF tensor names, and adds next-sentence prediction, the
//! pipelines and the pre-training objective.
//!
//! ```no_run
//! use burn::prelude::*;
//! use sesame_bert::{BertForMaskedLM, BertInput};
//! use sesame_layers::{OutputOptions, PretrainedModel};
//!
//! let device = Device::default();
//! let loaded = BertForMaskedLM::from_pretrained("path/to/bert".as_ref(), &device).unwrap();
//! println!("{}", loaded.report);
//! let ids = Tensor::<2, Int>::from_data([[101, 103, 102]], &device);
//! let logits = loaded.model.forward(BertInput::new(ids), None, OutputOptions::default()).logits;
//! ```

pub mod nsp;
pub use sesame_layers::pipeline;
pub mod pretraining;

use sesame_layers::{
    BertLikeConfig, BertLikeFamily, BertLikeModel, Classifier, EncoderInput, ForMaskedLM, ForMultipleChoice,
    ForPreTraining, ForQuestionAnswering, ForSequenceClassification, ForTokenClassification,
};

pub use nsp::BertForNextSentencePrediction;
pub use sesame_layers::{HeadOutput, PreTrainingLabels, PreTrainingOutput, QuestionAnsweringOutput};

/// The BERT family marker: HF names and defaults.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bert;

impl BertLikeFamily for Bert {
    const MODEL_TYPES: &'static [&'static str] = &["bert"];
    const CLASS: &'static str = "Bert";
    const PREFIX: &'static str = "bert";
    const TIED_DECODER: &'static str = r"^cls\.predictions\.decoder\.(weight|bias)$";

    fn head_rows() -> Vec<(&'static str, &'static str)> {
        vec![
            ("^cls.predictions.transform.dense", "^lm_head.dense"),
            ("^cls.predictions.transform.LayerNorm", "^lm_head.layer_norm"),
            ("^cls.predictions", "^lm_head"),
            ("^cls.seq_relationship", "^sentence_head.classifier"),
            ("^classifier", "^head.classifier"),
            ("^qa_outputs", "^head.qa_outputs"),
        ]
    }
}

/// BERT hyper-parameters (HF `BertConfig`, same names and defaults).
pub type BertConfig = BertLikeConfig<Bert>;
/// The BERT encoder (HF `BertModel`).
pub type BertModel = BertLikeModel<Bert>;
/// One batch of BERT input (HF argument names).
pub type BertInput = EncoderInput;
/// MLM + NSP (HF `BertForPreTraining`).
pub type BertForPreTraining = ForPreTraining<BertModel>;
/// MLM head only (HF `BertForMaskedLM`).
pub type BertForMaskedLM = ForMaskedLM<BertModel>;
/// Dropout + linear on the pooled output (HF `BertForSequenceClassification`).
pub type BertForSequenceClassification = ForSequenceClassification<BertModel, Classifier>;
/// A label per token (HF `BertForTokenClassification`).
pub type BertForTokenClassification = ForTokenClassification<BertModel>;
/// Extractive QA span head (HF `BertForQuestionAnswering`).
pub type BertForQuestionAnswering = ForQuestionAnswering<BertModel>;
/// Scores per choice (HF `BertForMultipleChoice`).
pub type BertForMultipleChoice = ForMultipleChoice<BertModel>;
