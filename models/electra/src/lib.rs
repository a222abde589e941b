//! ELECTRA for Burn (Clark et al., 2020): HuggingFace-compatible configuration, model, task
//! heads and checkpoints.
//!
//! ELECTRA is BERT's encoder trained as a discriminator: a small generator (an MLM) fills the
//! masked positions with samples, and the discriminator tells for every token whether it was
//! replaced (replaced-token detection, RTD). What differs from BERT, and where it lives here:
//! - [`config`]: `embedding_size` (tokens embedded narrower than the encoder) and the sequence
//!   summary of the multiple-choice head; the generator's size as a fraction of the
//!   discriminator's ([`ElectraConfig::generator`]).
//! - [`model`]: BERT's embeddings at `embedding_size`, `embeddings_project` up to the hidden
//!   size when they differ, BERT's encoder, no pooler.
//! - [`heads`]: the discriminator head (`discriminator_predictions`, one logit per token), the
//!   generator head (`generator_predictions` + `generator_lm_head`, tied, own bias), ELECTRA's
//!   GELU classification head, and the rest shared.
//! - [`checkpoint`]: the heads' HF names; the encoder's are BERT's.
//!
//! ```no_run
//! use burn::prelude::*;
//! use sesame_electra::{ElectraForPreTraining, ElectraInput};
//! use sesame_layers::{OutputOptions, PretrainedModel};
//!
//! let device = Device::default();
//! let loaded = ElectraForPreTraining::from_pretrained("path/to/electra".as_ref(), &device).unwrap();
//! let ids = Tensor::<2, Int>::from_data([[101, 2003, 102]], &device);
//! let replaced_logits = loaded.model.forward(ElectraInput::new(ids), None, OutputOptions::default()).logits;
//! ```

pub mod checkpoint;
pub mod config;
pub mod heads;
pub mod model;
#[cfg(feature = "train")]
pub mod pretraining;

pub use config::{Electra, ElectraConfig};
pub use heads::{
    replaced_token_loss, DiscriminatorOutput, DiscriminatorPredictions, ElectraForMaskedLM, ElectraForMultipleChoice,
    ElectraForPreTraining, ElectraForQuestionAnswering, ElectraForSequenceClassification, ElectraForTokenClassification,
};
pub use model::ElectraModel;
#[cfg(feature = "train")]
pub use pretraining::{ElectraGenerator, ElectraPreTrainingPair, ReplacedTokenOutput};
pub use sesame_layers::{HeadOutput, QuestionAnsweringOutput};

/// One batch of ELECTRA input (HF argument names).
pub type ElectraInput = sesame_layers::EncoderInput;

/// Which type runs which job for electra checkpoints (`sesame::auto`, `sesame::pipeline`).
impl sesame_layers::Family for Electra {
    const NAME: &'static str = "electra";
    const MODEL_TYPES: &'static [&'static str] = config::MODEL_TYPES;
    type Config = ElectraConfig;
    type Model = ElectraModel;
    type Encoder = ElectraModel;
    type ForSequenceClassification = ElectraForSequenceClassification;
    type ForTokenClassification = ElectraForTokenClassification;
    type ForQuestionAnswering = ElectraForQuestionAnswering;
    type ForConditionalGeneration = sesame_layers::Unsupported<sesame_layers::generative::Source>;
    type ForCausalLM = sesame_layers::ForCausalLM<ElectraModel>;
}
