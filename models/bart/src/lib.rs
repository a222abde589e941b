//! BART for Burn (Lewis et al., 2019): a denoising sequence-to-sequence model, with
//! HuggingFace-compatible configuration, model, task heads and checkpoints, and generation
//! through `sesame-generate`.
//!
//! What BART is, in this crate:
//! - one token table (`shared`) for the encoder, the decoder and the tied LM head, scaled by
//!   `sqrt(d_model)` when `scale_embedding`;
//! - learned positions in each stack, offset by 2 (`max_position_embeddings + 2` rows), and a
//!   LayerNorm on the embeddings (`layernorm_embedding`);
//! - post-LN encoder layers (the shared `EncoderLayer`) and decoder layers with
//!   cross-attention (the shared `DecoderLayer`), every LayerNorm with epsilon 1e-5;
//! - `decoder_input_ids` default to `shift_tokens_right(input_ids)` with
//!   `decoder_start_token_id`, as in transformers;
//! - heads: conditional generation (plus `final_logits_bias`), sequence classification on the
//!   last `</s>` of each row, extractive QA; and the decoder alone as a left-to-right LM
//!   (`BartForCausalLM`).
//!
//! ```no_run
//! use burn::prelude::*;
//! use sesame_bart::BartForConditionalGeneration;
//! use sesame_layers::{OutputOptions, PretrainedModel, Seq2SeqInput};
//!
//! let device = Device::default();
//! let loaded = BartForConditionalGeneration::from_pretrained("path/to/bart-base".as_ref(), &device).unwrap();
//! let ids = Tensor::<2, Int>::from_data([[0, 31414, 232, 2]], &device);
//! let logits = loaded.model.forward(Seq2SeqInput::new(ids), None, OutputOptions::default()).logits;
//! ```

pub mod checkpoint;
pub mod config;
pub mod heads;
pub mod model;
#[cfg(feature = "train")]
pub mod pretraining;

pub use config::BartConfig;
pub use heads::{BartDecoderWrapper, BartForCausalLM, BartForConditionalGeneration, BartForQuestionAnswering, BartForSequenceClassification, CausalLmOutput};
pub use model::{BartDecoder, BartEmbeddings, BartEncoder, BartModel};
pub use sesame_layers::{Seq2SeqHeadOutput, Seq2SeqInput, Seq2SeqOutput, Seq2SeqQuestionAnsweringOutput};

/// The BART family (the registry of `sesame`, `cargo xtask`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Bart;

/// Which type runs which job for bart checkpoints (`sesame::auto`, `sesame::pipeline`).
impl sesame_layers::Family for Bart {
    const NAME: &'static str = "bart";
    const MODEL_TYPES: &'static [&'static str] = config::MODEL_TYPES;
    type Config = BartConfig;
    type Model = BartModel;
    // transformers has no BartForTokenClassification, and BART's encoder has no masked-LM head
    // (its denoising is generated text: `generate`).
    type Encoder = sesame_layers::Unsupported;
    type ForSequenceClassification = BartForSequenceClassification;
    type ForTokenClassification = sesame_layers::Unsupported<sesame_layers::TokenLogits>;
    type ForQuestionAnswering = BartForQuestionAnswering;
    type ForConditionalGeneration = BartForConditionalGeneration;
    type ForCausalLM = BartForCausalLM;
}
