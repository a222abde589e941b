//! UniLM for Burn (Dong et al., 2019, "Unified Language Model Pre-training for Natural Language
//! Understanding and Generation"; microsoft/unilm v1).
//!
//! UniLM is BERT trained as four language models at once: the self-attention mask decides
//! what a token may see, and so whether the model is a bidirectional, left-to-right,
//! right-to-left or sequence-to-sequence LM. The rooms:
//! - [`config`]: BERT's configuration with UniLM v1's defaults (six token types, one pair per
//!   objective; LayerNorm epsilon 1e-5) and the widening of a BERT checkpoint's 2-row
//!   token-type table;
//! - [`model`]: BERT's forward pass, and the four masks ([`UnilmMask`]) given to it as the
//!   input's attention restriction (key/value cache included, for decoding later);
//! - [`heads`]: BERT's heads under their transformers names;
//! - `pretraining` (behind the `train` feature): the four objectives mixed per batch with the
//!   cloze task;
//! - [`decoding`]: sequence-to-sequence decoding under the seq-to-seq mask, with a key/value
//!   cache, for every search of `sesame-generate`.
//!
//! The checkpoint key table is BERT's (`sesame_bert::checkpoint`): a UniLM checkpoint is a BERT one.
//!
//! ```no_run
//! use burn::prelude::*;
//! use sesame_unilm::{UnilmForMaskedLM, UnilmMask};
//! use sesame_layers::{EncoderInput, OutputOptions, PretrainedModel};
//!
//! let device = Device::default();
//! let loaded = UnilmForMaskedLM::from_pretrained("path/to/unilm".as_ref(), &device).unwrap();
//! let ids = Tensor::<2, Int>::from_data([[101, 2023, 103, 102]], &device);
//! let input = UnilmMask::LeftToRight.apply(EncoderInput::new(ids));
//! let logits = loaded.model.forward(input, None, OutputOptions::default()).logits;
//! ```

pub mod config;
pub mod decoding;
pub mod heads;
pub mod model;
#[cfg(feature = "train")]
pub mod pretraining;

pub use config::{Unilm, UnilmConfig};
pub use decoding::UnilmSeq2SeqDecoder;
pub use heads::{
    UnilmForMaskedLM, UnilmForPreTraining, UnilmForQuestionAnswering, UnilmForSequenceClassification,
    UnilmForTokenClassification,
};
pub use model::{UnilmMask, UnilmModel};
#[cfg(feature = "train")]
pub use pretraining::{Objective, UnilmMasking, UnilmPreTraining};

/// Which type runs which job for unilm checkpoints (`sesame::auto`, `sesame::pipeline`).
impl sesame_layers::Family for Unilm {
    const NAME: &'static str = "unilm";
    const MODEL_TYPES: &'static [&'static str] = <Unilm as sesame_bert::BertLikeFamily>::MODEL_TYPES;
    type Config = UnilmConfig;
    type Model = UnilmModel;
    type Encoder = UnilmModel;
    type ForSequenceClassification = UnilmForSequenceClassification;
    type ForTokenClassification = UnilmForTokenClassification;
    type ForQuestionAnswering = UnilmForQuestionAnswering;
    // UniLM's sequence-to-sequence decoding is its own (`UnilmSeq2SeqDecoder`, `generate --unilm-seq2seq`).
    type ForConditionalGeneration = sesame_layers::Unsupported<sesame_layers::generative::Source>;
    type ForCausalLM = sesame_layers::ForCausalLM<UnilmModel>;
}
