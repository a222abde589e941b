//! UniLM in the command line: its registry entry, and its sequence-to-sequence decoding
//! (`generate --unilm-seq2seq`).

use burn::prelude::*;
use sesame_layers::Classifier;
use sesame_unilm::{Unilm, UnilmModel};

use sesame_layers::PretrainedModel;
use sesame_generate::generate_streaming;
use sesame_layers::HfConfig as _;
use super::FamilyEntry;
use crate::forward::PreTraining;
use crate::generate::*;
use sesame_pipelines::generate::rows_per_input;

/// `unilm`: four language models mixed per batch. Its exports are BERT checkpoints
/// (`model_type: bert`, read by the `bert` entry).
pub const ENTRY: FamilyEntry = FamilyEntry::masked_lm::<Unilm, UnilmModel, Classifier, Classifier, PreTraining>(
    "unilm",
    "bidirectional, seq-to-seq, left-to-right and right-to-left LMs mixed per batch, cloze + NSP, WordPiece",
    &["unilm"],
);

/// `generate --unilm-seq2seq`: UniLM's sequence-to-sequence decoding of a BERT-shaped
/// checkpoint (`UnilmSeq2SeqDecoder`), sources batched and padded after their `[SEP]`, targets
/// from nothing.
pub fn generate_unilm(args: &GenerateArgs, device: &Device) -> Result<(), String> {
    use sesame_unilm::{UnilmForMaskedLM, UnilmSeq2SeqDecoder};
    let dir = &args.model;
    let mut inputs = Inputs::open(args)?;
    let (tokenizer, missing) = tokenizer(dir);
    let mask = match (args.mask_token_id, &tokenizer) {
        (Some(id), _) => id,
        (None, Some(t)) => t.mask_token_id().map_err(|e| format!("--unilm-seq2seq: {e}"))?,
        (None, None) => return Err(format!("--unilm-seq2seq: {} has no tokenizer to take the mask token from; give --mask-token-id", dir.display())),
    };
    let sep = tokenizer.as_ref().and_then(|t| t.token_to_id(&t.special_tokens().sep));
    let loaded = lm_head_loaded(dir, crate::int8_if_asked(UnilmForMaskedLM::from_pretrained(dir, device).map_err(|e| e.to_string())?))?;
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
