//! BERT for Burn: HuggingFace-compatible configuration, model, task heads and checkpoints.
//!
//! The crate reads top to bottom in its rooms: [`config`] (HF `BertConfig`, and the
//! [`BertLikeFamily`] marker through which BERT-shaped families reuse it), [`model`] (the
//! forward pass of HF `BertModel`), [`heads`] (the task models, named as in transformers),
//! [`checkpoint`] (the HF key table) and [`pretraining`] (MLM + NSP). RoBERTa, ELECTRA and
//! UniLM build on this crate; the blocks it is made of (attention, embeddings, encoder layer,
//! heads) are `sesame-layers`'.
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
#[cfg(feature = "train")]
pub mod pretraining;

pub use config::{Bert, BertLikeConfig, BertLikeFamily};
pub use heads::{
    BertForMaskedLM, BertForMultipleChoice, BertForNextSentencePrediction, BertForPreTraining, BertForQuestionAnswering,
    BertForSequenceClassification, BertForSpanPreTraining, BertForTokenClassification, BertLMHeadModel,
};
pub use model::{BertLikeModel, NextSentenceFamily};
pub use sesame_layers::{HeadOutput, PreTrainingLabels, PreTrainingOutput, QuestionAnsweringOutput};

/// BERT hyper-parameters (HF `BertConfig`, same names and defaults).
pub type BertConfig = BertLikeConfig<Bert>;
/// The BERT encoder (HF `BertModel`).
pub type BertModel = BertLikeModel<Bert>;
/// One batch of BERT input (HF argument names).
pub type BertInput = sesame_layers::EncoderInput;
