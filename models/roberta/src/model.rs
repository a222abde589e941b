//! RoBERTa's model is BERT's forward pass (`sesame_bert::BertLikeModel`) with position ids
//! counted past the padding id (`BertLikeFamily::POSITIONS_AFTER_PADDING`).

use sesame_bert::BertLikeModel;

use crate::config::Roberta;

/// The RoBERTa encoder (HF `RobertaModel`).
pub type RobertaModel = BertLikeModel<Roberta>;
