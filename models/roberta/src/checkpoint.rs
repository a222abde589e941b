//! RoBERTa's checkpoint key table: the encoder is BERT's (`sesame_bert::checkpoint`);
//! `lm_head.*` is already Sesame's name; the classifier is two layers for sequences and one for
//! tokens and choices.

/// HF names of RoBERTa's heads onto the head models' fields.
pub const ROBERTA_HEAD_ROWS: &[(&str, &str)] = &[
    ("^classifier.dense", "^head.dense"),
    ("^classifier.out_proj", "^head.out_proj"),
    ("^classifier", "^head.classifier"),
    ("^qa_outputs", "^head.qa_outputs"),
];

/// The tied MLM decoder's HF names, skipped when the decoder is the word embeddings.
pub const ROBERTA_TIED_DECODER: &str = r"^lm_head\.decoder\.(weight|bias)$";
