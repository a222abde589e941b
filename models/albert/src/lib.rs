//! ALBERT for Burn (Lan et al., 2019): HuggingFace-compatible configuration, model, task heads
//! and checkpoints.
//!
//! What ALBERT changes in BERT, and where it lives here:
//! - **Factorised embeddings**: tokens are embedded in `embedding_size` (E, 128) dimensions and
//!   projected to `hidden_size` (H) by `encoder.embedding_hidden_mapping_in`; the MLM head maps
//!   H back to E and decodes with the E-wide word table. Vocabulary parameters drop from V·H to
//!   V·E + E·H.
//! - **Cross-layer parameter sharing**: `num_hidden_groups` groups of `inner_group_num` layers;
//!   depth `i` of `num_hidden_layers` runs group `floor(i / (layers / groups))`, every layer of it
//!   (HF's rule, float division included). One group (the default) shares everything: a
//!   12-layer ALBERT has the parameters of one layer, and its gradient is the sum over depths.
//!   The paper's ablation (table 4) shares only attention or only the feed-forward block:
//!   `parameter_sharing` (Sesame only), each depth owning the other sub-block; saving writes
//!   such a model out per depth, the form transformers loads.
//! - **Sentence-order prediction** replaces NSP in [`AlbertForPreTraining`] (same two-way head
//!   on the pooled output, with dropout); no dropout by default; `gelu_new`.
//!
//! The layer itself is the shared post-LN [`sesame_layers::EncoderLayer`]; the embeddings, heads and task
//! models are `sesame-layers`' own.
//!
//! The crate's rooms: [`config`], [`model`], [`heads`], [`checkpoint`], `pretraining` (behind the `train` feature).

pub mod checkpoint;
pub mod config;
pub mod heads;
pub mod model;
#[cfg(feature = "train")]
pub mod pretraining;

pub use config::{Albert, AlbertConfig, ParameterSharing};
pub use heads::{
    AlbertForMaskedLM, AlbertForMultipleChoice, AlbertForPreTraining, AlbertForQuestionAnswering,
    AlbertForSequenceClassification, AlbertForTokenClassification, AlbertInput,
};
pub use model::{AlbertDepthLayers, AlbertLayerGroup, AlbertModel, AlbertTransformer, AttentionSublayer, FeedForwardSublayer};
pub use sesame_layers::{HeadOutput, PreTrainingLabels, PreTrainingOutput, QuestionAnsweringOutput};

/// Which type runs which job for albert checkpoints (`sesame::auto`, `sesame::pipeline`).
impl sesame_layers::Family for Albert {
    const NAME: &'static str = "albert";
    const MODEL_TYPES: &'static [&'static str] = Albert::MODEL_TYPES;
    type Config = AlbertConfig;
    type Model = AlbertModel;
    type Encoder = AlbertModel;
    type ForSequenceClassification = AlbertForSequenceClassification;
    type ForTokenClassification = AlbertForTokenClassification;
    type ForQuestionAnswering = AlbertForQuestionAnswering;
    type ForConditionalGeneration = sesame_layers::Unsupported<sesame_layers::generative::Source>;
    type ForCausalLM = sesame_layers::ForCausalLM<AlbertModel>;
}
