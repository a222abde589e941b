//! BART in the command line: its registry entry, and what only BART does in the commands: the
//! bench presets and timings, and `forward` on every BART head.

use std::path::Path;

use burn::prelude::*;
use sesame_bart::{BartForQuestionAnswering, BartForSequenceClassification};

use sesame_bart::{BartForCausalLM, BartForConditionalGeneration, BartModel};
use sesame_layers::{PretrainedModel, Seq2SeqInput};
use crate::forward::Inputs;
use super::FamilyEntry;
use crate::bench::*;
use crate::forward::*;

/// `bart`: the encoder-decoder family.
pub const ENTRY: FamilyEntry = FamilyEntry {
    name: "bart",
    model_types: sesame_bart::config::MODEL_TYPES,
    bench: Some(bench_bart),
    bench_presets: check_presets,
    forward: Some(forward_bart),
};

/// Refuse a `--presets` name before the machine's GEMM is timed: generation's as
/// [`bart_preset`] builds them, training's the encoder presets.
fn check_presets(args: &BenchArgs) -> Result<(), String> {
    if args.mode == BenchMode::Generate {
        return args.presets.iter().try_for_each(|p| bart_preset(p).map(|_| ()));
    }
    check_encoder_presets(args)
}

/// `bench --family bart` (`--mode train`): BART's denoising step (forward with every target
/// token's loss, backward, AdamW) on a synthetic batch whose source and target are the same
/// `--batch-size × --seq-len` ids, a model of each preset's shape (`tiny`, `base`:
/// bart-base's) with `--vocab-size` tokens; `--compare-pytorch` runs
/// `BartForConditionalGeneration` with `labels` in PyTorch.
pub fn bench_bart(args: &BenchArgs, device: Device, backend: &str) -> Result<Vec<serde_json::Value>, String> {
    use sesame_bart::pretraining::{denoising_step, DenoisingBatch};
    use sesame_bart::BartForConditionalGeneration;
    match args.mode {
        BenchMode::Train => {}
        BenchMode::Generate => return bench_generate_bart(args, device, backend),
        mode => return Err(format!("--family bart benches --mode train and --mode generate; not --mode {mode:?}").to_lowercase()),
    }
    let (b, s) = (args.batch_size(), args.seq_len);
    let micro = args.micro_batches.unwrap_or_else(|| sesame_layers::device::default_threads(&device)).min(b) as u64;
    let mut rows = Vec::new();
    for preset in &args.presets {
        let config = sesame_bart::BartConfig { vocab_size: args.vocab_size, max_position_embeddings: s.max(1024), ..bart_preset(preset)? };
        let device = device.clone().autodiff();
        let part = |rows: std::ops::Range<usize>| {
            let ids: Vec<i64> = synthetic_row(args.vocab_size, rows.start * s..rows.end * s).into_iter().map(i64::from).collect();
            let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [rows.len(), s]), &device);
            DenoisingBatch { input_ids: ids.clone(), attention_mask: ids.ones_like(), labels: ids, decoder_input_ids: None, infilled: Tensor::zeros([rows.len(), s], &device), tokens: rows.len() * s }
        };
        let parts: Vec<DenoisingBatch> = (0..micro as usize).map(|m| part(m * b / micro as usize..(m + 1) * b / micro as usize)).collect();
        let start = config.decoder_start_id();
        let label = format!("bart {preset} train");
        let write = |dir: &Path| BartForConditionalGeneration::init(&config, &device).save_pretrained(&config, dir).map_err(|e| e.to_string());
        let theirs = peer_steps(args, &label, "pretrain", [b, s], write)?;
        let model = BartForConditionalGeneration::new_hf(&config, &device);
        let median = time_train_steps(args, model, micro, |i, replica| denoising_step(replica, parts[i as usize].clone(), start).loss)?;
        let tokens_per_s = (b * s) as f64 / median;
        eprintln!("{backend} bart {preset} train: {median:.3} s/step, {tokens_per_s:.0} tokens/s (batch {b}x{s} in {micro} micro-batches)");
        let mut row = serde_json::json!({
            "mode": "train", "backend": backend, "family": "bart", "preset": preset, "vocab_size": args.vocab_size,
            "batch_size": b, "seq_len": s, "micro_batches": micro, "median_step_s": median, "tokens_per_s": tokens_per_s, "timed_steps": args.steps,
        });
        attach(&mut row, theirs, "tokens_per_s", &label);
        rows.push(row);
    }
    Ok(rows)
}

/// A BART configuration of a size preset: `tiny` (128 wide, 2 + 2 layers), `base` (bart-base:
/// 768 wide, 6 + 6 layers, 12 heads, FFN 3072, vocabulary 50265, 1024 positions).
fn bart_preset(preset: &str) -> Result<sesame_bart::BartConfig, String> {
    let (d, layers, heads) = match preset {
        "tiny" => (128, 2, 2),
        "base" => (768, 6, 12),
        other => return Err(format!("--presets {other}: generate knows tiny and base")),
    };
    let json = serde_json::json!({
        "d_model": d, "encoder_layers": layers, "decoder_layers": layers, "encoder_attention_heads": heads,
        "decoder_attention_heads": heads, "encoder_ffn_dim": 4 * d, "decoder_ffn_dim": 4 * d, "forced_eos_token_id": null,
    });
    serde_json::from_value(json).map_err(|e| e.to_string())
}

/// `--mode generate` for BART: greedy and beam search of a fresh BART of each preset's shape on
/// a batch of `--batch-size` sources of `--seq-len` synthetic tokens, exactly
/// `--max-new-tokens` each.
fn bench_generate_bart(args: &BenchArgs, device: Device, backend: &str) -> Result<Vec<serde_json::Value>, String> {
    use sesame_bart::BartForConditionalGeneration;
    use sesame_generate::decoding::{Seq2SeqDecoder, Source};
    let (b, s, n) = (args.batch_size.unwrap_or(4), args.seq_len, args.max_new_tokens);
    let mut rows = Vec::new();
    for preset in &args.presets {
        let config = bart_preset(preset)?;
        let model = BartForConditionalGeneration::new_hf(&config, &device);
        let ids = synthetic_ids(config.vocab_size, b, s, &device);
        let mask = Tensor::<2, Int>::ones([b, s], &device);
        let settings = sesame_generate::GenerationConfig {
            eos_token_id: config.eos_token_id.map(|e| sesame_generate::Ids::One(e as u32)),
            pad_token_id: config.pad_token_id.map(|p| p as u32),
            ..Default::default()
        };
        let start_token = config.decoder_start_id() as u32;
        let run = |settings: &sesame_generate::GenerationConfig| {
            let source = Source { input_ids: ids.clone(), attention_mask: Some(mask.clone()) };
            let decoder = Seq2SeqDecoder::new(&model, &config, source).map_err(|e| e.to_string())?;
            sesame_generate::generate(&decoder, &vec![vec![start_token]; b], settings, 0).map_err(|e| e.to_string())
        };
        let save = |dir: &Path| model.save_pretrained(&config, dir).map_err(|e| e.to_string());
        rows.extend(time_generation(args, backend, ("bart", preset), [b, s, n], n + 1, settings, run, save)?);
    }
    Ok(rows)
}

/// `forward` for BART: every head.
pub fn forward_bart(args: &ForwardArgs, device: &Device) -> Result<(), String> {
    let head = head_class(args)?;
    let inputs = Inputs::read(&args.inputs)?;
    let o = options(args);
    let check = |input: &Seq2SeqInput, config: &sesame_bart::BartConfig| BartModel::validate(input, config).map_err(bad_input(&head));
    // The batch, from the encoder's or the decoder's ids (validated to agree).
    let batch = |input: &Seq2SeqInput| input.input_ids.as_ref().or(input.decoder_input_ids.as_ref()).map_or(0, |ids| ids.dims()[0]);
    let outputs = match head.as_str() {
        "BartModel" => {
            let input = inputs.seq2seq(device)?;
            let (m, c) = load::<BartModel>(args, device)?;
            check(&input, &c)?;
            m.forward(input, o).named()
        }
        "BartForConditionalGeneration" => {
            let mut input = inputs.seq2seq(device)?;
            let (m, c) = load::<BartForConditionalGeneration>(args, device)?;
            // Without `decoder_input_ids`, the labels shifted right are the decoder's input (as
            // the head makes it): of any length, and checked as the decoder's ids.
            let len = match (&input.decoder_input_ids, inputs.tensors.get("labels")) {
                (Some(ids), _) => ids.dims()[1],
                (None, Some(labels)) => labels.shape.get(1).copied().unwrap_or(0).max(1),
                (None, None) => 0,
            };
            let labels = inputs.labels::<2>("labels", [batch(&input), len], c.vocab_size, true, device)?;
            if let (None, Some(labels)) = (&input.decoder_input_ids, &labels) {
                input.decoder_input_ids = Some(sesame_layers::shift_tokens_right(labels.clone(), m.model.pad_token_id, m.model.decoder_start_token_id));
            }
            check(&input, &c)?;
            m.forward(input, labels, o).named()
        }
        "BartForSequenceClassification" => {
            let input = inputs.seq2seq(device)?;
            let (m, c) = load::<BartForSequenceClassification>(args, device)?;
            check(&input, &c)?;
            let multi_label = c.labels.problem_type.as_deref() == Some("multi_label_classification");
            let labels = inputs.sequence_labels(batch(&input), c.num_labels(), multi_label, device)?;
            m.forward(input, labels, o).map_err(bad_input(&head))?.named()
        }
        "BartForQuestionAnswering" => {
            let input = inputs.seq2seq(device)?;
            let (m, c) = load::<BartForQuestionAnswering>(args, device)?;
            check(&input, &c)?;
            let positions = inputs.positions(batch(&input), None, device)?;
            m.forward(input, positions, o).named()
        }
        "BartForCausalLM" => {
            let ids = inputs.ids::<2>("input_ids", device)?.ok_or_else(|| format!("--inputs {}: no `input_ids`", args.inputs.display()))?;
            let mask = inputs.padding_mask("attention_mask", false, device)?;
            let (m, c) = load::<BartForCausalLM>(args, device)?;
            check(&Seq2SeqInput { decoder_input_ids: Some(ids.clone()), encoder_outputs: None, input_ids: Some(ids.clone()), ..Default::default() }, &c)?;
            let labels = inputs.labels::<2>("labels", ids.dims(), c.vocab_size, true, device)?;
            m.forward(ids, mask, labels, o).named()
        }
        other => {
            return Err(format!(
                "--head {other}: not a BART head (BartModel, BartForConditionalGeneration, BartForSequenceClassification, BartForQuestionAnswering, BartForCausalLM)"
            ))
        }
    };
    inputs.check_all_taken(&head)?;
    write(outputs, &args.out)
}

