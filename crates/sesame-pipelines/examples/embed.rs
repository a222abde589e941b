//! Sentence embeddings from a sentence-transformers checkpoint directory (all-MiniLM-L6-v2 and
//! its kind), as sentence-transformers' `encode(normalize_embeddings=True)` gives them, and the
//! cosine similarity of each pair of texts:
//!
//! ```sh
//! cargo run --release -p sesame-pipelines --example embed -- path/to/all-MiniLM-L6-v2 \
//!     "A man is eating food." "A man is eating a piece of bread."
//! ```
//!
//! The README's library example is this file's `main`.

use burn::prelude::*;
use sesame_bert::BertModel;
use sesame_layers::PretrainedModel;
use sesame_pipelines::{embed, sentence_transformers_max_seq_length, EmbedOptions};
use sesame_text::Tokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().ok_or("usage: embed MODEL_DIR TEXT...")?);
    let texts: Vec<String> = args.collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();

    let device = Device::flex(); // or Device::wgpu(..) with burn's wgpu feature
    let tokenizer = Tokenizer::from_dir(&dir)?;
    let loaded = BertModel::from_pretrained(&dir, &device)?;
    let options = EmbedOptions {
        normalize: true,                                          // mean pooling, then L2 norm
        max_tokens: sentence_transformers_max_seq_length(&dir)?, // the checkpoint's max_seq_length
        ..EmbedOptions::default()
    };
    let vectors = embed(&loaded.model, &loaded.config, &tokenizer, &texts, options)?;

    for i in 0..vectors.len() {
        for j in i + 1..vectors.len() {
            let cosine: f32 = vectors[i].iter().zip(&vectors[j]).map(|(a, b)| a * b).sum();
            println!("{i} {j} {cosine:.4}");
        }
    }
    Ok(())
}
