//! UniLM's configuration: BERT's (`BertConfig`) with UniLM v1's defaults and checks, through
//! the [`Unilm`] marker. UniLM checkpoints are BERT checkpoints (`bert.*`, `cls.*`); a
//! Google-format `config.json` (no `model_type`) or a HF BERT one both read.

use sesame_bert::{BertLikeConfig, BertLikeFamily};
use sesame_layers::config::ensure;
use sesame_layers::ConfigError;

/// The UniLM family marker.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unilm;

/// Token-type ids of UniLM v1 (`new_segment_ids`): one pair per objective, so the model
/// knows which mask it runs under.
pub mod token_types {
    /// Bidirectional LM: first and second segment.
    pub const BIDIRECTIONAL: [i64; 2] = [0, 1];
    /// Left-to-right LM.
    pub const LEFT_TO_RIGHT: i64 = 2;
    /// Right-to-left LM.
    pub const RIGHT_TO_LEFT: i64 = 3;
    /// Sequence-to-sequence LM: source and target segment.
    pub const SEQ_TO_SEQ: [i64; 2] = [4, 5];
}

impl BertLikeFamily for Unilm {
    /// UniLM keeps BERT's next-sentence prediction beside its cloze objectives.
    const NEXT_SENTENCE: bool = true;
    /// UniLM v1 releases Google-format configs (no `model_type`); BERT checkpoints are read too.
    /// Sesame writes `bert`, so that transformers loads an exported UniLM as the BERT it is.
    const MODEL_TYPES: &'static [&'static str] = &["bert", "unilm"];
    const CLASS: &'static str = "Bert";
    const PREFIX: &'static str = "bert";
    const TIED_DECODER: &'static str = sesame_bert::checkpoint::BERT_TIED_DECODER;
    const MIN_TYPE_VOCAB_SIZE: usize = 6;

    /// UniLM v1's `BertLayerNorm` fixes epsilon at 1e-5 (BERT's is 1e-12); six token types.
    fn defaults() -> serde_json::Value {
        serde_json::json!({ "layer_norm_eps": 1e-5, "type_vocab_size": 6 })
    }

    fn head_rows() -> Vec<(&'static str, &'static str)> {
        sesame_bert::checkpoint::BERT_HEAD_ROWS.to_vec()
    }

    /// microsoft/unilm's `from_pretrained` widens a 2-row table by copying row 0 into the
    /// left-to-right (2), right-to-left (3) and source (4) rows; it leaves the target row (5)
    /// as the uninitialised memory of `resize_`. Sesame starts the target row as row 1, the
    /// second segment, which the target is.
    fn widened_type_row(row: usize, stored: usize) -> usize {
        if row == token_types::SEQ_TO_SEQ[1] as usize && stored > 1 {
            1
        } else {
            0
        }
    }

    /// UniLM v1's options that change the architecture are refused when set (the released
    /// models leave them off): `relax_projection`, `new_pos_ids`, `num_qkv`, `seg_emb`, `ffn_type`.
    fn validate(config: &BertLikeConfig<Self>) -> Result<(), ConfigError> {
        for (field, off) in [("relax_projection", 1.0), ("num_qkv", 1.0), ("ffn_type", 0.0)] {
            if let Some(v) = config.extra.get(field).and_then(|v| v.as_f64()) {
                ensure(v <= off, field, || format!("{v} is not supported (UniLM v1's released models use {off} or less)"))?;
            }
        }
        for field in ["new_pos_ids", "seg_emb"] {
            let set = config.extra.get(field).and_then(|v| v.as_bool()).unwrap_or(false);
            ensure(!set, field, || "true is not supported (UniLM v1's released models leave it off)".into())?;
        }
        Ok(())
    }
}

/// UniLM hyper-parameters: BERT's, with UniLM v1's defaults (six token types, LayerNorm
/// epsilon 1e-5).
pub type UnilmConfig = BertLikeConfig<Unilm>;
