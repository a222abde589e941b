//! `cargo xtask bench`: training throughput (tokens/s) of a family's pre-training step
//! (forward, its objective's loss, backward, AdamW), timed with warm-up and medians on the
//! chosen backend.

use std::time::Instant;

use burn::optim::GradientsParams;
use burn::prelude::*;
use sesame_layers::PretrainedModel;
use sesame_text::MaskedBatch;
use sesame_train::pretraining::{PretrainingBatch, PretrainingFamily, PretrainingModel};
use sesame_train::TrainConfig;

/// Options of `cargo xtask bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The family whose pre-training step is timed.
    #[arg(long, default_value = "bert", value_parser = crate::families::parser())]
    pub family: String,
    /// Vocabulary size (BERT's by default; RoBERTa's is 50265, ALBERT's 30000).
    #[arg(long, default_value_t = 30522)]
    pub vocab_size: usize,
    /// Size presets to time (tiny, mini, small, base).
    #[arg(long, value_delimiter = ',', default_value = "mini,base")]
    pub presets: Vec<String>,
    /// Sequences per batch.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 128)]
    pub seq_len: usize,
    /// Untimed warm-up steps.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Timed steps (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub steps: usize,
}

/// A full batch of `b × s` tokens with every seventh one masked.
fn batch(vocab_size: usize, b: usize, s: usize, device: &Device) -> PretrainingBatch {
    let input_ids: Vec<i64> = (0..b * s).map(|i| 5 + (i as i64 * 7919) % (vocab_size as i64 - 5)).collect();
    let mlm_labels = input_ids.iter().enumerate().map(|(i, &id)| if i % 7 == 3 { id } else { -100 }).collect();
    let batch = MaskedBatch {
        batch: b,
        seq: s,
        input_ids,
        token_type_ids: vec![0; b * s],
        attention_mask: vec![1; b * s],
        mlm_labels,
        pair_labels: (0..b as i64).map(|i| i % 2).collect(),
        tokens: b * s,
    };
    PretrainingBatch::new(&batch, device)
}

/// Time full training steps of `args.family` and return one JSON row per preset.
pub fn bench(args: BenchArgs, device: Device, backend: &str) -> Result<String, String> {
    (crate::families::by_name(&args.family)?.bench)(args, device, backend)
}

/// `bench` for a family pre-trained by the shared masked-LM task.
pub fn bench_family<F: PretrainingFamily>(args: BenchArgs, device: Device, backend: &str) -> Result<String, String> {
    if args.vocab_size <= 5 || args.batch_size == 0 || args.seq_len == 0 || args.steps == 0 {
        return Err("--vocab-size must exceed 5 and --batch-size, --seq-len and --steps be at least 1".into());
    }
    let device = device.autodiff();
    let family = F::NAME;
    let mut rows = Vec::new();
    for preset in &args.presets {
        let config = F::preset(preset, args.vocab_size, args.seq_len.max(512), 0).map_err(|e| e.to_string())?;
        let mut model = F::Model::new_hf(&config, &device);
        let mut optim = TrainConfig::default().optimizer();
        let data = batch(args.vocab_size, args.batch_size, args.seq_len, &device);
        let mut times = Vec::new();
        for i in 0..args.warmup + args.steps {
            let start = Instant::now();
            let out = model.pretraining_step(data.clone(), None);
            let grads = GradientsParams::from_grads(out.loss.backward(), &model);
            model = optim.step(1e-4, model, grads);
            device.sync().map_err(|e| format!("{e:?}"))?;
            if i >= args.warmup {
                times.push(start.elapsed().as_secs_f64());
            }
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let tokens_per_s = (args.batch_size * args.seq_len) as f64 / median;
        eprintln!("{backend} {family} {preset}: {median:.3} s/step, {tokens_per_s:.0} tokens/s (batch {}x{})", args.batch_size, args.seq_len);
        rows.push(serde_json::json!({
            "backend": backend, "family": family, "preset": preset, "vocab_size": args.vocab_size,
            "batch_size": args.batch_size, "seq_len": args.seq_len,
            "median_step_s": median, "tokens_per_s": tokens_per_s, "timed_steps": args.steps,
        }));
    }
    Ok(serde_json::to_string(&rows).expect("JSON"))
}
