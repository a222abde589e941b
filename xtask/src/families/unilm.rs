//! UniLM in the command line: its registry entry, its sequence-to-sequence decoding
//! (`generate --unilm-seq2seq`) and that decoding's benchmark (`bench --family unilm --mode
//! generate`).

use burn::prelude::*;
use std::path::Path;

use sesame_layers::Classifier;
use sesame_unilm::{Unilm, UnilmConfig, UnilmForMaskedLM, UnilmModel, UnilmSeq2SeqDecoder};

use sesame_layers::PretrainedModel;
use sesame_generate::generate_streaming;
use sesame_layers::HfConfig as _;
use super::FamilyEntry;
use crate::bench::{bench_family, synthetic_row, time_generation, BenchArgs, BenchMode};
use crate::forward::PreTraining;
use crate::generate::*;
use sesame_pipelines::generate::rows_per_input;

/// `unilm`: four language models mixed per batch. Its exports are BERT checkpoints
/// (`model_type: bert`, read by the `bert` entry).
pub const ENTRY: FamilyEntry = FamilyEntry {
    bench: Some(bench_unilm),
    ..FamilyEntry::masked_lm::<Unilm, UnilmModel, Classifier, Classifier, PreTraining>(
        "unilm",
        &["unilm"],
    )
};

/// The `[MASK]` id of the benchmark's vocabulary (the synthetic ids start at 5).
const BENCH_MASK_ID: u32 = 4;

/// `bench --family unilm`: `--mode generate` times sequence-to-sequence decoding
/// ([`UnilmSeq2SeqDecoder`]), greedy and beam search, of a fresh UniLM of each preset's shape
/// on `--batch-size` sources of `--seq-len` synthetic tokens, exactly `--max-new-tokens` each;
/// `--compare-pytorch` runs microsoft/unilm's decoding loop on transformers' BERT with the same
/// weights (`scripts/bench_pytorch.py`). The other modes are the shared encoder benchmarks.
fn bench_unilm(args: &BenchArgs, device: Device, backend: &str) -> Result<Vec<serde_json::Value>, String> {
    if args.mode != BenchMode::Generate {
        return bench_family::<Unilm, UnilmModel>(args, device, backend);
    }
    let (b, s, n) = (args.batch_size.unwrap_or(4), args.seq_len, args.max_new_tokens);
    let v = args.vocab_size;
    let sources: Vec<Vec<u32>> = (0..b).map(|r| synthetic_row(v, r * s..(r + 1) * s)).collect();
    let mut rows = Vec::new();
    for preset in &args.presets {
        let config = UnilmConfig::preset(preset, v, (s + n + 1).max(512), 0).map_err(|e| e.to_string())?;
        let model = UnilmForMaskedLM::new_hf(&config, &device);
        // `[SEP]` (3) ends a target; `min_new_tokens` keeps both sides from ending early.
        let settings = sesame_generate::GenerationConfig { eos_token_id: Some(sesame_generate::Ids::One(3)), pad_token_id: Some(0), ..Default::default() };
        let run = |settings: &sesame_generate::GenerationConfig| {
            let decoder = UnilmSeq2SeqDecoder::new(&model, &config, sources.clone(), BENCH_MASK_ID).map_err(|e| e.to_string())?;
            sesame_generate::generate(&decoder, &vec![vec![]; b], settings, 0).map_err(|e| e.to_string())
        };
        let save = |dir: &Path| model.save_pretrained(&config, dir).map_err(|e| e.to_string());
        rows.extend(time_generation(args, backend, ("unilm", preset), [b, s, n], n, settings, run, save)?);
    }
    Ok(rows)
}

/// `generate --unilm-seq2seq`: UniLM's sequence-to-sequence decoding of a BERT-shaped
/// checkpoint (`UnilmSeq2SeqDecoder`), sources batched and padded after their `[SEP]`, targets
/// from nothing.
pub fn generate_unilm(args: &GenerateArgs, device: &Device) -> Result<(), String> {
    let dir = &args.model;
    let mut inputs = Inputs::open(args)?;
    let (tokenizer, missing) = tokenizer(dir);
    let mask = match (args.mask_token_id, &tokenizer) {
        (Some(id), _) => id,
        (None, Some(t)) => t.mask_token_id().map_err(|e| format!("--unilm-seq2seq: {e}"))?,
        (None, None) => return Err(format!("--unilm-seq2seq: {} has no tokenizer to take the mask token from; give --mask-token-id", dir.display())),
    };
    let sep = tokenizer.as_ref().and_then(|t| t.token_to_id(&t.special_tokens().sep));
    let loaded = lm_head_loaded(dir, crate::common::int8_if_asked(UnilmForMaskedLM::from_pretrained(dir, device).map_err(|e| e.to_string())?))?;
    let limits = loaded.config.input_limits();
    let config = settings(dir, args, (limits.max_len, limits.vocab_size), sep)?;
    let (per_input, repeat) = rows_per_input(&config);
    loop {
        let first = inputs.read();
        let batch = encode(&inputs.next_batch(args.batch_size)?, first, (tokenizer.as_ref(), missing.as_ref()), limits.max_len)?;
        if batch.is_empty() {
            break;
        }
        let range = first..first + batch.len();
        let rows: Vec<Vec<u32>> = batch.iter().flat_map(|s| std::iter::repeat_n(s.clone(), repeat)).collect();
        let n = rows.len();
        let decoder = UnilmSeq2SeqDecoder::new(&loaded.model, &loaded.config, rows, mask).map_err(|e| format!("inputs {}..={}: {e}", range.start + 1, range.end))?;
        let mut streamer = LineStreamer::new(args, first, repeat, tokenizer.as_ref());
        let out = generate_streaming(&decoder, &vec![vec![]; n], &config, args.seed, &mut streamer).map_err(|e| search_error(e, range));
        print(&streamer.finish(out)?, per_input, tokenizer.as_ref(), batch.len())?;
    }
    Ok(())
}
