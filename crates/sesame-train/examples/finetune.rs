//! Fine-tune a BERT checkpoint on a labelled CSV file (columns `text` and `label`), as
//! `cargo xtask finetune` does, from the library: one call, then the held-out accuracy and the
//! exported model, which transformers loads as `BertForSequenceClassification`.
//!
//! ```sh
//! cargo run --release -p sesame-train --example finetune -- path/to/bert train.csv test.csv runs/sst
//! ```

use burn::prelude::*;
use sesame_bert::Bert;
use sesame_train::finetune::{finetune, FinetuneOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, train, eval, out] = args.as_slice() else {
        return Err("usage: finetune MODEL_DIR TRAIN.csv EVAL.csv OUT_DIR".into());
    };

    let options = FinetuneOptions {
        steps: Some(60),    // or `epochs`, 3 by default
        eval_every: Some(10), // the best evaluation is exported
        batch_size: 16,
        lr: 3e-3,
        ..FinetuneOptions::new(model, train, eval, out)
    };
    let device = Device::flex(); // or Device::wgpu(..) with burn's wgpu feature
    let result = finetune::<Bert>(&options, device)?;

    println!("accuracy {:.4} at step {}; the model is in {}", result.metrics["accuracy"], result.step, result.model.display());
    Ok(())
}
