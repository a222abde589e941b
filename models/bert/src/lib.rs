//! BERT for Burn: HuggingFace-compatible configuration, model, task heads and checkpoints.
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

pub mod checkpoint;
pub mod config;
pub mod heads;
pub mod model;
pub mod pipeline;
pub mod pretraining;

pub use config::BertConfig;
pub use heads::{
    BertForMaskedLM, BertForMultipleChoice, BertForNextSentencePrediction, BertForPreTraining,
    BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification, BertPreTrainingHeads,
    HeadOutput, PreTrainingLabels, PreTrainingOutput, QuestionAnsweringOutput,
};
pub use model::{BertInput, BertModel, BertOutput};
