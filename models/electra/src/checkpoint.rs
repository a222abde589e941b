//! ELECTRA's checkpoint key table: the encoder is BERT's (`sesame_bert::checkpoint`); these
//! are the heads' HF names onto the head models' fields.

/// HF names of ELECTRA's heads: the generator's `generator_predictions` + `generator_lm_head`
/// (the MLM head) and the fine-tuning heads. The discriminator's `discriminator_predictions`
/// keeps its HF name as its field name.
pub const ELECTRA_HEAD_ROWS: &[(&str, &str)] = &[
    ("^generator_predictions.LayerNorm", "^lm_head.layer_norm"),
    ("^generator_predictions.dense", "^lm_head.dense"),
    ("^generator_lm_head", "^lm_head"),
    ("^classifier.dense", "^head.dense"),
    ("^classifier.out_proj", "^head.out_proj"),
    ("^classifier", "^head.classifier"),
    ("^sequence_summary", "^head.sequence_summary"),
    ("^qa_outputs", "^head.qa_outputs"),
];

/// The generator's tied decoder weight, skipped when it is the word embeddings (its bias is
/// the head's own).
pub const ELECTRA_TIED_DECODER: &str = r"^generator_lm_head\.weight$";
