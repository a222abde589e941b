//! XLNet for Burn (Yang et al., 2019): a permutation language model with two-stream relative
//! attention and Transformer-XL's memory, with HuggingFace-compatible configuration, model,
//! heads and checkpoints.
//!
//! What XLNet is, in this crate:
//! - no absolute positions: every layer attends with sinusoidal relative encodings, a content
//!   term, a position term and a segment term (same or other segment), each with its own
//!   query bias (`r_w_bias`, `r_r_bias`, `r_s_bias`), and HF's `rel_shift`;
//! - two streams: the content stream sees what `perm_mask` allows and itself; the query
//!   stream (with `target_mapping`) starts from `mask_emb`, sees the same content but never its
//!   own position, and gives the predictions;
//! - memory: each layer's input states are kept (`mem_len`, `reuse_len`) and attended to by the
//!   next segment (`mems`);
//! - `attn_type` bi or uni, `bi_data`, `clamp_len`, `same_length` as in HF.
//!
//! ```no_run
//! use burn::prelude::*;
//! use sesame_layers::{OutputOptions, PretrainedModel};
//! use sesame_xlnet::{XlnetInput, XlnetLmHeadModel};
//!
//! let device = Device::default();
//! let loaded = XlnetLmHeadModel::from_pretrained("path/to/xlnet-base-cased".as_ref(), &device).unwrap();
//! let ids = Tensor::<2, Int>::from_data([[17, 3157, 4, 3]], &device);
//! let out = loaded.model.forward(XlnetInput::new(ids), None, OutputOptions::default());
//! let (logits, mems) = (out.logits, out.transformer.mems);
//! ```

pub mod checkpoint;
pub mod config;
pub mod decoding;
pub mod heads;
pub mod model;
#[cfg(feature = "train")]
pub mod pretraining;
pub mod tasks;

pub use config::{AttnType, XlnetConfig};
pub use decoding::XlnetCache;
pub use heads::{LmLoss, XlnetLmHeadModel, XlnetLmHeadOutput};
pub use model::{RelativeAttention, XlnetInput, XlnetLayer, XlnetModel, XlnetOutput};
pub use tasks::{
    SquadBeam, SquadLabels, XlnetForMultipleChoice, XlnetForQuestionAnswering, XlnetForQuestionAnsweringSimple, XlnetForSequenceClassification,
    XlnetForTokenClassification, XlnetHeadOutput, XlnetQuestionAnsweringOutput, XlnetQuestionAnsweringSimpleOutput,
};

/// The XLNet family (the registry of `sesame`, `cargo xtask`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Xlnet;

/// Which type runs which job for xlnet checkpoints (`sesame::auto`, `sesame::pipeline`).
impl sesame_layers::Family for Xlnet {
    const NAME: &'static str = "xlnet";
    const MODEL_TYPES: &'static [&'static str] = config::MODEL_TYPES;
    type Config = XlnetConfig;
    type Model = XlnetModel;
    // XLNet's LM head predicts by permutation, not by masks: no embeddings or fill-mask here.
    type Encoder = sesame_layers::Unsupported;
    type ForSequenceClassification = XlnetForSequenceClassification;
    type ForTokenClassification = XlnetForTokenClassification;
    type ForQuestionAnswering = XlnetForQuestionAnsweringSimple;
    type ForConditionalGeneration = sesame_layers::Unsupported<sesame_layers::generative::Source>;
    type ForCausalLM = XlnetLmHeadModel;
}
