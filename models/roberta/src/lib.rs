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

pub mod pretraining;

use sesame_bert::{BertLikeConfig, BertLikeFamily, BertLikeModel};
use sesame_layers::{
    Activation, ClassificationHead, Classifier, EncoderInput, ForMaskedLM, ForMultipleChoice, ForQuestionAnswering,
    ForSequenceClassification, ForTokenClassification,
};

pub use sesame_layers::{HeadOutput, QuestionAnsweringOutput};

/// The RoBERTa family marker: HF names, defaults and position ids.
#[derive(Clone, Copy, Debug, Default)]
pub struct Roberta;

impl BertLikeFamily for Roberta {
    /// XLM-R and CamemBERT are RoBERTa models under other names.
    const MODEL_TYPES: &'static [&'static str] = &["roberta", "xlm-roberta", "camembert"];
    const CLASS: &'static str = "Roberta";
    const PREFIX: &'static str = "roberta";
    const POSITIONS_AFTER_PADDING: bool = true;
    const TIED_DECODER: &'static str = r"^lm_head\.decoder\.(weight|bias)$";

    fn defaults() -> serde_json::Value {
        serde_json::json!({ "vocab_size": 50265, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2 })
    }

    /// `lm_head.*` is already Sesame's name; the classifier is two layers for sequences and
    /// one for tokens and choices.
    fn head_rows() -> Vec<(&'static str, &'static str)> {
        vec![
            ("^classifier.dense", "^head.dense"),
            ("^classifier.out_proj", "^head.out_proj"),
            ("^classifier", "^head.classifier"),
            ("^qa_outputs", "^head.qa_outputs"),
        ]
    }

    fn lm_head_activation(_config: &BertLikeConfig<Self>) -> Activation {
        Activation::Gelu
    }
}

/// RoBERTa hyper-parameters (HF `RobertaConfig`, same names and defaults).
pub type RobertaConfig = BertLikeConfig<Roberta>;
/// The RoBERTa encoder (HF `RobertaModel`).
pub type RobertaModel = BertLikeModel<Roberta>;
/// One batch of RoBERTa input (HF argument names; position ids are made from the ids).
pub type RobertaInput = EncoderInput;
/// MLM head (HF `RobertaForMaskedLM`), RoBERTa's pre-training model.
pub type RobertaForMaskedLM = ForMaskedLM<RobertaModel>;
/// Two-layer head on `<s>` (HF `RobertaForSequenceClassification`).
pub type RobertaForSequenceClassification = ForSequenceClassification<RobertaModel, ClassificationHead>;
/// A label per token (HF `RobertaForTokenClassification`).
pub type RobertaForTokenClassification = ForTokenClassification<RobertaModel>;
/// Extractive QA span head (HF `RobertaForQuestionAnswering`).
pub type RobertaForQuestionAnswering = ForQuestionAnswering<RobertaModel>;
/// Scores per choice from the pooled output (HF `RobertaForMultipleChoice`).
pub type RobertaForMultipleChoice = ForMultipleChoice<RobertaModel, Classifier>;
