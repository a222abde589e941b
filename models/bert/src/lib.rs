//! BERT for Burn: HuggingFace-compatible configuration, model, task heads and checkpoints.
//!
//! The crate reads top to bottom in its rooms: [`config`] (HF `BertConfig`, and the
//! [`BertLikeFamily`] marker through which BERT-shaped families reuse it), [`model`] (the
//! forward pass of HF `BertModel`), [`heads`] (the task models, named as in transformers),
//! [`checkpoint`] (the HF key table) and `pretraining` (MLM + NSP, behind the `train`
//! feature). RoBERTa, ELECTRA and UniLM build on this crate; the blocks it is made of
//! (attention, embeddings, encoder layer, heads) are `sesame-layers`'.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use burn::prelude::*;
//! use sesame_bert::{BertForSequenceClassification, BertInput};
//! use sesame_layers::{OutputOptions, PretrainedModel};
//! use sesame_text::Tokenizer; // the checkpoint's tokenizer (a dev-dependency here)
//!
//! let device = Device::flex();
//! let dir = std::path::Path::new("path/to/bert-classifier");
//! let (texts, tokenizer) = (["A fine film."], Tokenizer::from_dir(dir)?);
//! let loaded = BertForSequenceClassification::from_pretrained(dir, &device)?;
//! eprintln!("{}", loaded.report);        // loaded / newly initialised / unused tensors
//! let (ids, mask, types) = tokenizer.encode(&texts, 512, true)?.tensors(&device);
//! let input = BertInput::new(ids).with_attention_mask(mask).with_token_type_ids(types);
//! let logits = loaded.model.forward(input, None, OutputOptions::default()).logits;   // [batch, labels]
//! loaded.model.save_pretrained(&loaded.config, "out-dir".as_ref())?;                  // transformers loads it
//! # Ok(()) }
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
    BertForSequenceClassification, BertForTokenClassification, BertLMHeadModel,
};
#[cfg(feature = "train")]
pub use heads::BertForSpanPreTraining;
pub use model::BertLikeModel;
pub use sesame_layers::{HeadOutput, PreTrainingLabels, PreTrainingOutput, QuestionAnsweringOutput};

/// BERT hyper-parameters (HF `BertConfig`, same names and defaults).
pub type BertConfig = BertLikeConfig<Bert>;
/// The BERT encoder (HF `BertModel`).
pub type BertModel = BertLikeModel<Bert>;
/// One batch of BERT input (HF argument names).
pub type BertInput = sesame_layers::EncoderInput;

/// Which type runs which job for bert checkpoints (`sesame::auto`, `sesame::pipeline`).
impl sesame_layers::Family for Bert {
    const NAME: &'static str = "bert";
    const MODEL_TYPES: &'static [&'static str] = <Bert as BertLikeFamily>::MODEL_TYPES;
    type Config = BertConfig;
    type Model = BertModel;
    type Encoder = BertModel;
    type ForSequenceClassification = BertForSequenceClassification;
    type ForTokenClassification = BertForTokenClassification;
    type ForQuestionAnswering = BertForQuestionAnswering;
    type ForConditionalGeneration = sesame_layers::Unsupported<sesame_layers::generative::Source>;
    type ForCausalLM = BertLMHeadModel;
}
