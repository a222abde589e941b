//! The one table from HF BERT tensor names to Sesame's module paths.

use sesame_layers::{CheckpointSpec, KeyMap};

/// HF name prefix -> Burn path prefix; `{n}` is a layer index. Rows apply in order.
pub fn key_map() -> KeyMap {
    KeyMap::new(&[
        ("encoder.layer.{n}.attention.self", "encoder.layers.{n}.attention"),
        ("encoder.layer.{n}.attention.output.dense", "encoder.layers.{n}.attention.output"),
        ("encoder.layer.{n}.attention.output.LayerNorm", "encoder.layers.{n}.attention_norm"),
        ("encoder.layer.{n}.intermediate.dense", "encoder.layers.{n}.feed_forward.intermediate"),
        ("encoder.layer.{n}.output.dense", "encoder.layers.{n}.feed_forward.output"),
        ("encoder.layer.{n}.output.LayerNorm", "encoder.layers.{n}.output_norm"),
        ("embeddings.LayerNorm", "embeddings.layer_norm"),
        ("predictions.transform.dense", "predictions.dense"),
        ("predictions.transform.LayerNorm", "predictions.layer_norm"),
        ("classifier", "head.classifier"),
        ("qa_outputs", "head.qa_outputs"),
    ])
}

/// The checkpoint spec of a BERT model type. `with_prefix`: the base model sits under `bert`
/// (every head model); `optional`: Burn path prefixes that may be absent (fresh heads).
pub fn spec(with_prefix: bool, optional: &[&str], tied: bool) -> CheckpointSpec {
    let mut ignored = vec![r"(^|\.)position_ids$".to_string(), r"(^|\.)token_type_ids$".to_string()];
    if tied {
        ignored.push(r"^cls\.predictions\.decoder\.(weight|bias)$".to_string());
    }
    CheckpointSpec {
        keys: key_map(),
        family_prefix: "bert".into(),
        has_base_prefix: with_prefix,
        base_roots: vec!["embeddings".into(), "encoder".into(), "pooler".into()],
        may_be_missing: optional.iter().map(|s| s.to_string()).collect(),
        ignored,
    }
}
