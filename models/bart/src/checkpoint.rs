//! BART's checkpoint key table: HF tensor names onto Sesame's module paths.

use sesame_layers::{CheckpointSpec, KeyMap};

use crate::config::BartConfig;

/// HF names inside the encoder and decoder stacks.
pub const BART_ROWS: &[(&str, &str)] = &[
    ("encoder.embed_positions", "encoder.embeddings.embed_positions"),
    ("encoder.layernorm_embedding", "encoder.embeddings.layernorm_embedding"),
    ("decoder.embed_positions", "decoder.embeddings.embed_positions"),
    ("decoder.layernorm_embedding", "decoder.embeddings.layernorm_embedding"),
    ("self_attn.q_proj", "attention.query"),
    ("self_attn.k_proj", "attention.key"),
    ("self_attn.v_proj", "attention.value"),
    ("self_attn.out_proj", "attention.output"),
    ("self_attn_layer_norm", "attention_norm"),
    ("encoder_attn.q_proj", "cross_attention.query"),
    ("encoder_attn.k_proj", "cross_attention.key"),
    ("encoder_attn.v_proj", "cross_attention.value"),
    ("encoder_attn.out_proj", "cross_attention.output"),
    ("encoder_attn_layer_norm", "cross_attention_norm"),
    ("fc1", "feed_forward.intermediate"),
    ("fc2", "feed_forward.output"),
    ("final_layer_norm", "output_norm"),
    ("^qa_outputs", "^qa_head.qa_outputs"),
];

/// The checkpoint spec of BART's base model (`with_base` false) or of a head model holding it
/// in field `model`; `optional`: Burn path prefixes that may be absent; `ignored`: regexes of
/// HF names not loaded.
pub fn spec(config: &BartConfig, with_base: bool, optional: &[&str], ignored: &[&str]) -> CheckpointSpec {
    // Tied, `shared` is also stored as (or only as) the stacks' `embed_tokens`; untied, each
    // stack has its own table under that name.
    let aliases = match config.tie_word_embeddings {
        true => ["encoder.embed_tokens", "decoder.embed_tokens"].iter().map(|a| (a.to_string(), "shared".to_string())).collect(),
        false => Vec::new(),
    };
    CheckpointSpec {
        keys: KeyMap::new(BART_ROWS),
        family_prefix: "model".into(),
        has_base_prefix: with_base,
        base_roots: vec!["shared".into(), "encoder".into(), "decoder".into()],
        may_be_missing: optional.iter().map(|s| s.to_string()).collect(),
        ignored: ignored.iter().map(|s| s.to_string()).collect(),
        aliases,
    }
}
