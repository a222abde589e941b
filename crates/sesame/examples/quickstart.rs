//! README's "In your project": sentence embeddings and their similarity, from a model in the
//! HuggingFace cache (or a directory, as the first argument).
use sesame::{pipeline, PipelineOptions, Task};

fn main() -> Result<(), sesame::Error> {
    let model = std::env::args().nth(1).unwrap_or("sentence-transformers/all-MiniLM-L6-v2".into());
    let mut options = PipelineOptions::default();
    options.embed.normalize = true;
    let embedder = pipeline(Task::Embed, &model, options)?;
    let texts = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."];
    let vectors = embedder.embed(&texts)?;
    for (text, vector) in texts.iter().zip(&vectors) {
        let cosine: f32 = vector.iter().zip(&vectors[0]).map(|(a, b)| a * b).sum();
        println!("{cosine:.4}  {text}");
    }
    Ok(())
}
