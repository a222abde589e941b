//! XLNet's checkpoint key table: HF tensor names onto Sesame's module paths.

use sesame_layers::{CheckpointSpec, KeyMap};

/// HF names inside the base model (`transformer.`) and of the heads.
pub const XLNET_ROWS: &[(&str, &str)] = &[
    ("ff.layer_1", "feed_forward.intermediate"),
    ("ff.layer_2", "feed_forward.output"),
    ("ff.layer_norm", "ff_layer_norm"),
    ("^lm_loss", "^lm_loss"),
    ("^qa_outputs", "^qa_head.qa_outputs"),
    ("^end_logits.LayerNorm", "^end_logits.layer_norm"),
];

/// The checkpoint spec of XLNet's base model (`with_base` false) or of a head model holding it
/// in field `transformer`; `optional`: Burn path prefixes that may be absent; `ignored`:
/// regexes of HF names not loaded.
pub fn spec(with_base: bool, optional: &[&str], ignored: &[&str]) -> CheckpointSpec {
    CheckpointSpec {
        keys: KeyMap::new(XLNET_ROWS),
        family_prefix: "transformer".into(),
        has_base_prefix: with_base,
        base_roots: vec!["word_embedding".into(), "mask_emb".into(), "layer".into()],
        may_be_missing: optional.iter().map(|s| s.to_string()).collect(),
        ignored: ignored.iter().map(|s| s.to_string()).collect(),
        aliases: Vec::new(),
    }
}
