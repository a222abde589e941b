//! ALBERT's checkpoint key table: HF names onto Sesame's module paths. The group structure
//! (`encoder.albert_layer_groups.G.albert_layers.L`) is HF's; only the layer's own names differ.

/// The base model's rows.
pub const ALBERT_ROWS: &[(&str, &str)] = &[
    ("albert_layers.{n}.attention.dense", "albert_layers.{n}.attention.output"),
    ("albert_layers.{n}.attention.LayerNorm", "albert_layers.{n}.attention_norm"),
    ("albert_layers.{n}.ffn", "albert_layers.{n}.feed_forward.intermediate"),
    ("albert_layers.{n}.ffn_output", "albert_layers.{n}.feed_forward.output"),
    ("albert_layers.{n}.full_layer_layer_norm", "albert_layers.{n}.output_norm"),
    ("embeddings.LayerNorm", "embeddings.layer_norm"),
    ("pooler", "pooler.dense"),
];

/// HF names of the heads (`predictions`, `sop_classifier`, `classifier`, `qa_outputs`) onto the
/// head models' fields.
pub const ALBERT_HEAD_ROWS: &[(&str, &str)] = &[
    ("^predictions.LayerNorm", "^lm_head.layer_norm"),
    ("^predictions", "^lm_head"),
    ("^sop_classifier", "^sentence_head"),
    ("^classifier", "^head.classifier"),
    ("^qa_outputs", "^head.qa_outputs"),
];

/// The tied MLM decoder's HF names, skipped when the decoder is the word embeddings.
pub const ALBERT_TIED_DECODER: &str = r"^predictions\.decoder\.(weight|bias)$";
