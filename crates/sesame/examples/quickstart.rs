//! README's "In your project": sentence embeddings through the facade, as sentence-transformers'
//! `encode(normalize_embeddings=True)` gives them, and the cosine of each pair of texts:
//!
//! ```sh
//! cargo run --release -p sesame --example quickstart -- sentence-transformers/all-MiniLM-L6-v2 \
//!     "A man is eating food." "A man is eating a piece of bread."
//! ```
use sesame::{pipeline, PipelineOptions, Task};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let model = args.next().ok_or("usage: quickstart MODEL TEXT...")?; // a directory or a hub id
    let texts: Vec<String> = args.collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();

    let mut options = PipelineOptions::default(); // the flex backend, 32 texts a batch
    options.embed.normalize = true; // mean pooling (the checkpoint's max_seq_length), then L2 norm
    let embedder = pipeline(Task::Embed, &model, options)?;
    let vectors = embedder.embed(&texts)?;

    for i in 0..vectors.len() {
        for j in i + 1..vectors.len() {
            let cosine: f32 = vectors[i].iter().zip(&vectors[j]).map(|(a, b)| a * b).sum();
            println!("{i} {j} {cosine:.4}");
        }
    }
    Ok(())
}
