//! RoBERTa's configuration: BERT's (`BertConfig`) with RoBERTa's defaults and names, through
//! the [`Roberta`] marker.

use sesame_bert::{BertLikeConfig, BertLikeFamily};
use sesame_layers::Activation;

/// The RoBERTa family marker: HF names, defaults and position ids.
#[derive(Clone, Copy, Debug, Default)]
pub struct Roberta;

impl BertLikeFamily for Roberta {
    /// XLM-R and CamemBERT are RoBERTa models under other names.
    const MODEL_TYPES: &'static [&'static str] = &["roberta", "xlm-roberta", "camembert"];
    const CLASS: &'static str = "Roberta";
    const PREFIX: &'static str = "roberta";
    const POSITIONS_AFTER_PADDING: bool = true;
    const TIED_DECODER: &'static str = crate::checkpoint::ROBERTA_TIED_DECODER;

    fn defaults() -> serde_json::Value {
        serde_json::json!({ "vocab_size": 50265, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2 })
    }

    fn head_rows() -> Vec<(&'static str, &'static str)> {
        crate::checkpoint::ROBERTA_HEAD_ROWS.to_vec()
    }

    /// RoBERTa's MLM head is always GELU, whatever `hidden_act` says.
    fn lm_head_activation(_config: &BertLikeConfig<Self>) -> Activation {
        Activation::Gelu
    }
}

/// RoBERTa hyper-parameters (HF `RobertaConfig`, same names and defaults).
pub type RobertaConfig = BertLikeConfig<Roberta>;
