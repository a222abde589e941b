//! BERT's checkpoint key table: HF tensor names onto Sesame's module paths.

/// HF names of the encoder tensors of every BERT-shaped model.
pub fn encoder_rows() -> Vec<(&'static str, &'static str)> {
    vec![
        ("encoder.layer.{n}.attention.self", "encoder.layers.{n}.attention"),
        ("encoder.layer.{n}.attention.output.dense", "encoder.layers.{n}.attention.output"),
        ("encoder.layer.{n}.attention.output.LayerNorm", "encoder.layers.{n}.attention_norm"),
        ("encoder.layer.{n}.intermediate.dense", "encoder.layers.{n}.feed_forward.intermediate"),
        ("encoder.layer.{n}.output.dense", "encoder.layers.{n}.feed_forward.output"),
        ("encoder.layer.{n}.output.LayerNorm", "encoder.layers.{n}.output_norm"),
        ("embeddings.LayerNorm", "embeddings.layer_norm"),
    ]
}

/// HF names of BERT's heads (`cls.predictions`, `cls.seq_relationship`, `classifier`,
/// `qa_outputs`) onto the head models' fields.
pub const BERT_HEAD_ROWS: &[(&str, &str)] = &[
    ("^cls.predictions.transform.dense", "^lm_head.dense"),
    ("^cls.predictions.transform.LayerNorm", "^lm_head.layer_norm"),
    ("^cls.predictions", "^lm_head"),
    ("^cls.seq_relationship", "^sentence_head.classifier"),
    ("^classifier", "^head.classifier"),
    ("^qa_outputs", "^head.qa_outputs"),
];

/// The tied MLM decoder's HF names, skipped when the decoder is the word embeddings.
pub const BERT_TIED_DECODER: &str = r"^cls\.predictions\.decoder\.(weight|bias)$";
