//! RoBERTa for Burn: HuggingFace-compatible configuration, model, task heads and checkpoints.
//!
//! RoBERTa is BERT's architecture trained differently (Liu et al., 2019). What differs in the
//! model is small, and this crate is exactly that difference:
//! - position ids are counted past the padding id (`pad_token_id + 1 + i` for the i-th real
//!   token, `pad_token_id` for padding), so `max_position_embeddings` is 514 for 512 tokens;
//! - one token type, byte-level BPE vocabulary of 50265, `<s> … </s>` framing (the tokenizer's
//!   business, in `sesame-text`);
//! - the MLM head (`lm_head`) always uses GELU, whatever `hidden_act` says;
//! - sequence classification uses a two-layer head on `<s>` (dense, tanh, `out_proj`) instead of
//!   the pooler.
//!
//! Everything else is BERT's: the configuration and forward pass of `sesame-bert`, through the
//! [`Roberta`] family marker, and the task heads of `sesame-layers`.
//!
//! ```no_run
//! use burn::prelude::*;
//! use sesame_roberta::{RobertaForMaskedLM, RobertaInput};
//! use sesame_layers::{OutputOptions, PretrainedModel};
//!
//! let device = Device::default();
//! let loaded = RobertaForMaskedLM::from_pretrained("path/to/roberta".as_ref(), &device).unwrap();
//! let ids = Tensor::<2, Int>::from_data([[0, 50264, 2]], &device);
//! let logits = loaded.model.forward(RobertaInput::new(ids), None, OutputOptions::default()).logits;
//! ```

pub mod checkpoint;
pub mod config;
pub mod heads;
pub mod model;
#[cfg(feature = "train")]
pub mod pretraining;

pub use config::{Roberta, RobertaConfig};
pub use heads::{
    RobertaForMaskedLM, RobertaForMultipleChoice, RobertaForQuestionAnswering, RobertaForSequenceClassification,
    RobertaForTokenClassification, RobertaInput,
};
pub use model::RobertaModel;
pub use sesame_layers::{HeadOutput, QuestionAnsweringOutput};

/// Which type runs which job for roberta checkpoints (`sesame::auto`, `sesame::pipeline`).
impl sesame_layers::Family for Roberta {
    const NAME: &'static str = "roberta";
    const MODEL_TYPES: &'static [&'static str] = <Roberta as sesame_bert::BertLikeFamily>::MODEL_TYPES;
    type Config = RobertaConfig;
    type Model = RobertaModel;
    type Encoder = RobertaModel;
    type ForSequenceClassification = RobertaForSequenceClassification;
    type ForTokenClassification = RobertaForTokenClassification;
    type ForQuestionAnswering = RobertaForQuestionAnswering;
    type ForConditionalGeneration = sesame_layers::Unsupported<sesame_layers::generative::Source>;
    type ForCausalLM = sesame_layers::ForCausalLM<RobertaModel>;
}
