//! `cargo xtask bench`: training throughput (tokens/s) of BERT pre-training steps, timed with
//! warm-up and medians on the chosen backend.

use std::time::Instant;

use burn::optim::GradientsParams;
use burn::prelude::*;
use sesame_bert::pretraining::{pretraining_step, PretrainingBatch};
use sesame_bert::{BertConfig, BertForPreTraining, BertInput};
use sesame_layers::PretrainedModel;
use sesame_train::TrainConfig;

/// Options of `cargo xtask bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
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

fn batch(config: &BertConfig, b: usize, s: usize, device: &Device) -> PretrainingBatch {
    let ids: Vec<i64> = (0..b * s).map(|i| 5 + (i as i64 * 7919) % (config.vocab_size as i64 - 5)).collect();
    let labels: Vec<i64> = ids.iter().enumerate().map(|(i, &id)| if i % 7 == 3 { id } else { -100 }).collect();
    let t = |v: Vec<i64>| Tensor::<2, Int>::from_data(TensorData::new(v, [b, s]), device);
    PretrainingBatch {
        input: BertInput::new(t(ids)).with_attention_mask(t(vec![1; b * s])).with_token_type_ids(t(vec![0; b * s])),
        mlm_labels: t(labels),
        sentence_labels: Tensor::from_data(TensorData::new((0..b as i64).map(|i| i % 2).collect::<Vec<_>>(), [b]), device),
        tokens: b * s,
    }
}

/// Time full training steps (forward, backward, AdamW) and print one JSON line per preset.
pub fn bench(args: BenchArgs, device: Device, backend: &str) -> Result<String, String> {
    let device = device.autodiff();
    let mut rows = Vec::new();
    for preset in &args.presets {
        let config = BertConfig::preset(preset, 30522, 512, 0).map_err(|e| e.to_string())?;
        let mut model = BertForPreTraining::new_hf(&config, &device);
        let mut optim = TrainConfig::default().optimizer();
        let data = batch(&config, args.batch_size, args.seq_len, &device);
        let mut times = Vec::new();
        for i in 0..args.warmup + args.steps {
            let start = Instant::now();
            let out = pretraining_step(&model, data.clone(), Some("nsp"));
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
        eprintln!("{backend} {preset}: {:.3} s/step, {tokens_per_s:.0} tokens/s (batch {}x{})", median, args.batch_size, args.seq_len);
        rows.push(serde_json::json!({
            "backend": backend, "preset": preset, "batch_size": args.batch_size, "seq_len": args.seq_len,
            "median_step_s": median, "tokens_per_s": tokens_per_s, "timed_steps": args.steps,
        }));
    }
    Ok(serde_json::to_string(&rows).expect("JSON"))
}
