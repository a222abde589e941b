//! XLNet in the command line: its registry entry, and what only XLNet does in the commands:
//! the bench of its step and its generation (transformers' dummy-token scheme), and `forward`
//! on every XLNet head with `perm_mask`, `target_mapping` and `mems`.

use std::path::Path;

use burn::prelude::*;
use sesame_xlnet::{XlnetForQuestionAnsweringSimple, XlnetForSequenceClassification, XlnetForTokenClassification};

use sesame_xlnet::{SquadLabels, XlnetInput, XlnetConfig, XlnetForMultipleChoice, XlnetForQuestionAnswering, XlnetLmHeadModel, XlnetModel};
use sesame_layers::PretrainedModel;
use crate::forward::Inputs;
use super::FamilyEntry;
use crate::bench::*;
use crate::forward::*;

/// `xlnet`: the two-stream family.
pub const ENTRY: FamilyEntry = FamilyEntry {
    name: "xlnet",
    model_types: sesame_xlnet::config::MODEL_TYPES,
    bench: Some(bench_xlnet),
    bench_presets: check_encoder_presets,
    forward: Some(forward_xlnet),
};

/// `bench --family xlnet`:
/// - `--mode train`: the permutation-LM step (two streams, `num_predict` targets through
///   `target_mapping`, the memory of the previous step, backward, AdamW) on windows built by
///   the pre-training pipeline's own sampler (spans, factorisation order, `reuse_len` split,
///   `bi_data`) from synthetic ids; `--compare-pytorch` gives `XLNetLMHeadModel` the same
///   `perm_mask`, `target_mapping`, labels and memory length (the batch travels as
///   safetensors).
/// - `--mode generate`: greedy and beam search of `--max-new-tokens` after `--seq-len`-token
///   prompts, against transformers' `generate`.
pub fn bench_xlnet(args: &BenchArgs, device: Device, backend: &str) -> Result<Vec<serde_json::Value>, String> {
    use sesame_xlnet::pretraining::{collate, permutation_step, Memory, PermutationConfig, PermutationExample, SpecialIds};
    use sesame_xlnet::{XlnetConfig, XlnetLmHeadModel};
    use rand::SeedableRng;
    let (s, v) = (args.seq_len, args.vocab_size);
    // Ids below 5 are XLNet's specials: `<pad>` 0 here (the synthetic ids never hold it), `<s>`,
    // `</s>`, `<cls>`, `<sep>`.
    let special = SpecialIds { sep: 4, cls: 3, eod: 2 };
    let ids = [0, 1, 2];
    let mut rows = Vec::new();
    if args.mode == BenchMode::Generate {
        let (b, n) = (args.batch_size.unwrap_or(1), args.max_new_tokens);
        for preset in &args.presets {
            let config = XlnetConfig::preset(preset, v, &PermutationConfig::new(16), 512, ids).map_err(|e| e.to_string())?.for_inference();
            let model = XlnetLmHeadModel::new_hf(&config, &device);
            let prompts: Vec<Vec<u32>> = (0..b).map(|r| synthetic_row(v, r * s..(r + 1) * s)).collect();
            let settings = sesame_generate::GenerationConfig { eos_token_id: Some(sesame_generate::Ids::One(2)), pad_token_id: Some(0), ..Default::default() };
            let run = |settings: &sesame_generate::GenerationConfig| {
                sesame_generate::generate(&sesame_generate::decoding::CausalDecoder::new(&model, &config), &prompts, settings, 0).map_err(|e| e.to_string())
            };
            let save = |dir: &Path| model.save_pretrained(&config, dir).map_err(|e| e.to_string());
            rows.extend(time_generation(args, backend, ("xlnet", preset), [b, s, n], s + n, settings, run, save)?);
        }
        return Ok(rows);
    }
    if args.mode != BenchMode::Train {
        return Err(format!("--family xlnet benches --mode train and --mode generate; not --mode {:?}", args.mode).to_lowercase());
    }
    let b = args.batch_size();
    let micro = args.micro_batches.unwrap_or_else(|| sesame_layers::device::default_threads(&device)).min(b);
    let permutation = PermutationConfig::new(s);
    permutation.validate(b).map_err(|e| format!("--seq-len {s} / --batch-size {b}: {}: {}", e.field, e.reason))?;
    if permutation.bi_data && (b % micro != 0 || (b / micro) % 2 != 0) {
        return Err(format!("--batch-size {b} in {micro} micro-batches: each needs an even number of rows (bi_data's forward and backward halves)"));
    }
    // Row r: synthetic ids, split into the reused part, A (half of the rest) and B (B follows A).
    let examples: Vec<PermutationExample> = (0..b)
        .map(|r| {
            let row = synthetic_row(v, r * s..(r + 1) * s);
            let (reused, rest) = row.split_at(permutation.reuse_len);
            let rest = &rest[..rest.len() - 3];
            let (a, b_part) = rest.split_at(rest.len() / 2);
            let half = if permutation.bi_data { b / 2 } else { b };
            let mut rng = rand::rngs::StdRng::seed_from_u64(r as u64);
            PermutationExample::new([reused, a, b_part], 1, &[], &permutation, special, r >= half, &mut rng)
        })
        .collect();
    for preset in &args.presets {
        let mem_len = 2 * permutation.reuse_len;
        let config = XlnetConfig::preset(preset, v, &permutation, mem_len, ids).map_err(|e| e.to_string())?;
        let train_device = device.clone().autodiff();
        // Micro-batch m: rows m·b/micro… (forward rows first, then their backward copies, as
        // the pipeline batches them), with its own memory.
        let per = b / micro;
        let parts: Vec<_> = (0..micro)
            .map(|m| {
                let half = |k: usize| if permutation.bi_data { if k < per / 2 { m * per / 2 + k } else { b / 2 + m * per / 2 + k - per / 2 } } else { m * per + k };
                collate(&(0..per).map(|k| examples[half(k)].clone()).collect::<Vec<_>>(), permutation.num_predict, &train_device)
            })
            .collect();
        let label = format!("xlnet {preset} train");
        // The model's config.json, and the batch PyTorch is to train on.
        let write = |dir: &Path| {
            XlnetLmHeadModel::init(&config, &device).save_pretrained(&config, dir).map_err(|e| e.to_string())?;
            save_batch(&dir.join("batch.safetensors"), &collate(&examples, permutation.num_predict, &device))
        };
        let theirs = peer_steps(args, &label, "pretrain", [b, s], write)?;
        let memories: Vec<std::sync::Mutex<Memory>> = (0..micro).map(|_| Default::default()).collect();
        let model = XlnetLmHeadModel::new_hf(&config, &train_device);
        let median = time_train_steps(args, model, micro as u64, |i, replica| {
            let mut memory = memories[i as usize].lock().expect("memory");
            permutation_step(replica, parts[i as usize].clone(), &mut memory).loss
        })?;
        let tokens_per_s = (b * s) as f64 / median;
        eprintln!(
            "{backend} xlnet {preset} train: {median:.3} s/step, {tokens_per_s:.0} tokens/s (batch {b}x{s}, {} predicted, memory {mem_len}, in {micro} micro-batches)",
            permutation.num_predict
        );
        let mut row = serde_json::json!({
            "mode": "train", "backend": backend, "family": "xlnet", "preset": preset, "vocab_size": v, "batch_size": b, "seq_len": s,
            "num_predict": permutation.num_predict, "reuse_len": permutation.reuse_len, "mem_len": mem_len, "bi_data": permutation.bi_data,
            "micro_batches": micro, "median_step_s": median, "tokens_per_s": tokens_per_s, "timed_steps": args.steps,
        });
        attach(&mut row, theirs, "tokens_per_s", &label);
        rows.push(row);
    }
    Ok(rows)
}

/// `forward` for XLNet: every head, with `perm_mask`, `target_mapping` and `mems.N` as inputs
/// and the new memory among the outputs.
pub fn forward_xlnet(args: &ForwardArgs, device: &Device) -> Result<(), String> {
    let head = head_class(args)?;
    let mut inputs = Inputs::read(&args.inputs)?;
    let choices = if head == "XLNetForMultipleChoice" { Some(inputs.flatten_choices()?) } else { None };
    let input = xlnet_input(&inputs, device)?;
    let o = options(args);
    let check = |config: &XlnetConfig| input.validate(config).map_err(bad_input(&head));
    let [b, s] = input.input_ids.dims();
    let num_labels = XlnetConfig::num_labels;
    let outputs = match head.as_str() {
        "XLNetModel" => {
            let (m, c) = load::<XlnetModel>(args, device)?;
            check(&c)?;
            m.forward(input, o).named()
        }
        "XLNetLMHeadModel" => {
            let (m, c) = load::<XlnetLmHeadModel>(args, device)?;
            check(&c)?;
            // With `target_mapping`, one label per prediction; else one per token.
            let predictions = input.target_mapping.as_ref().map_or(s, |mapping| mapping.dims()[1]);
            let labels = inputs.labels::<2>("labels", [b, predictions], c.vocab_size, true, device)?;
            m.forward(input, labels, o).named()
        }
        "XLNetForSequenceClassification" => {
            let (m, c) = load::<XlnetForSequenceClassification>(args, device)?;
            check(&c)?;
            let labels = inputs.sequence_labels(b, num_labels(&c), multi_label(&args.model)?, device)?;
            m.forward(input, labels, o).named()
        }
        "XLNetForTokenClassification" => {
            let (m, c) = load::<XlnetForTokenClassification>(args, device)?;
            check(&c)?;
            let labels = inputs.labels::<2>("labels", [b, s], num_labels(&c), true, device)?;
            m.forward(input, labels, o).named()
        }
        "XLNetForMultipleChoice" => {
            let (m, c) = load::<XlnetForMultipleChoice>(args, device)?;
            check(&c)?;
            let choices = choices.expect("flattened above");
            let labels = inputs.labels::<1>("labels", [b / choices], choices, true, device)?;
            m.forward(input, choices, labels, o).named()
        }
        "XLNetForQuestionAnsweringSimple" => {
            let (m, c) = load::<XlnetForQuestionAnsweringSimple>(args, device)?;
            check(&c)?;
            let positions = inputs.positions(b, None, device)?;
            m.forward(input, positions, o).named()
        }
        "XLNetForQuestionAnswering" => {
            let (m, c) = load::<XlnetForQuestionAnswering>(args, device)?;
            check(&c)?;
            inputs.check_shape("p_mask", &[b, s])?;
            inputs.check_shape("is_impossible", &[b])?;
            let p_mask = inputs.mask_values::<2>("p_mask", device)?;
            // The token each row's answerability is read from.
            let cls_index = inputs.labels::<1>("cls_index", [b], s, false, device)?;
            let is_impossible = inputs.mask_values::<1>("is_impossible", device)?;
            // Unlike the simple head's, these positions are not clamped: the end logits read the
            // start token's state (transformers' cross-entropy refuses them too).
            let labels = inputs.positions(b, Some(s), device)?.map(|(start_positions, end_positions)| SquadLabels {
                start_positions,
                end_positions,
                answerability: cls_index.clone().zip(is_impossible),
            });
            m.forward(input, p_mask, cls_index, labels, o).named()
        }
        other => {
            return Err(format!(
                "--head {other}: not a head of this family (forward runs XLNetModel, XLNetLMHeadModel, XLNetForSequenceClassification, \
                 XLNetForTokenClassification, XLNetForMultipleChoice, XLNetForQuestionAnsweringSimple, XLNetForQuestionAnswering)"
            ))
        }
    };
    inputs.check_all_taken(&head)?;
    write(outputs, &args.out)
}

/// XLNet's input: ids, `attention_mask` (or `input_mask`, 1 = padding), token types,
/// `perm_mask`, `target_mapping`, and the memory `mems.0`, `mems.1`, … as transformers
/// returns it (`[mem, batch, d]`).
fn xlnet_input(inputs: &Inputs, device: &Device) -> Result<XlnetInput, String> {
    let ids = inputs.ids::<2>("input_ids", device)?.ok_or_else(|| format!("--inputs {}: no `input_ids`", inputs.file.display()))?;
    let mut input = XlnetInput::new(ids);
    input.attention_mask = inputs.mask_values::<2>("attention_mask", device)?;
    if let Some(padding) = inputs.mask_values::<2>("input_mask", device)? {
        if input.attention_mask.is_some() {
            return Err(format!("--inputs {}: give one of `attention_mask` and `input_mask`", inputs.file.display()));
        }
        input.attention_mask = Some(padding.neg() + 1.0);
    }
    input.token_type_ids = inputs.ids::<2>("token_type_ids", device)?;
    input.perm_mask = inputs.mask_values::<3>("perm_mask", device)?;
    input.target_mapping = inputs.mask_values::<3>("target_mapping", device)?;
    let mut mems = Vec::new();
    while inputs.tensors.contains_key(&format!("mems.{}", mems.len())) {
        let name = format!("mems.{}", mems.len());
        let mem = inputs.floats::<3>(&name, device)?.expect("present");
        mems.push(mem.swap_dims(0, 1));
    }
    input.mems = (!mems.is_empty()).then_some(mems);
    Ok(input)
}

/// Write an XLNet permutation batch for `scripts/bench_pytorch.py` (`input_ids`,
/// `token_type_ids`, `labels` as i64; `perm_mask`, `target_mapping` as f32).
fn save_batch(path: &Path, batch: &sesame_xlnet::pretraining::PermutationBatch) -> Result<(), String> {
    fn bytes<T: burn::tensor::Element>(data: TensorData) -> (Vec<usize>, Vec<u8>) {
        (data.shape().to_vec(), data.convert::<T>().as_bytes().to_vec())
    }
    let tensors = [
        ("input_ids", safetensors::Dtype::I64, bytes::<i64>(batch.input_ids.to_data())),
        ("token_type_ids", safetensors::Dtype::I64, bytes::<i64>(batch.token_type_ids.to_data())),
        ("labels", safetensors::Dtype::I64, bytes::<i64>(batch.labels.to_data())),
        ("perm_mask", safetensors::Dtype::F32, bytes::<f32>(batch.perm_mask.to_data())),
        ("target_mapping", safetensors::Dtype::F32, bytes::<f32>(batch.target_mapping.to_data())),
    ];
    let views = tensors
        .iter()
        .map(|(name, dtype, (shape, data))| safetensors::tensor::TensorView::new(*dtype, shape.clone(), data).map(|v| (name.to_string(), v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    std::fs::write(path, safetensors::serialize(views, None).map_err(|e| e.to_string())?).map_err(|e| format!("{}: {e}", path.display()))
}
