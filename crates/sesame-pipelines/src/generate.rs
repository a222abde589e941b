//! Generation from text, as transformers' `generate` with a tokenizer around it: an
//! encoder-decoder (BART) writes a target for each source ([`generate`]), a left-to-right
//! model continues each prompt ([`continue_prompts`]). The settings are a
//! [`GenerationConfig`], read from the model directory with [`GenerationConfig::from_dir`]
//! and changed as needed. The `_ids` functions are the same on token ids, with a streamer
//! that receives tokens as soon as they are final (`cargo xtask generate` runs on them).

use burn::prelude::*;
use sesame_generate::decoding::{CausalDecoder, LanguageModel, Seq2SeqDecoder, Source};
use sesame_generate::{generate_streaming, GenerateError, GenerationConfig, Generated, TokenStreamer};
use sesame_layers::InputError;
use sesame_text::Tokenizer;

use crate::PipelineError;

/// What one input gave.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GeneratedText {
    /// Each returned sequence's tokens (`num_return_sequences` of them, the best first for beam
    /// search): the decoder start or the prompt, then the generated tokens, padding after an end.
    pub sequences: Vec<Vec<u32>>,
    /// Each sequence decoded, special tokens dropped.
    pub texts: Vec<String>,
    /// Beam search's score of each sequence (transformers' `sequences_scores`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequences_scores: Option<Vec<f32>>,
}

/// Rows the search returns per input, and how many times each input is given to it (sampling
/// draws `num_return_sequences` independent rows; beam search returns them from one).
pub fn rows_per_input(config: &GenerationConfig) -> (usize, usize) {
    let n = config.num_return_sequences.unwrap_or(1);
    match config.num_beams.unwrap_or(1) > 1 {
        true => (n, 1),
        false => (n, n),
    }
}

/// The search of the encoder-decoder `model` (with its `model_config`) over `sources` (token
/// ids, one batch, padded with the config's pad id and encoded once), every row decoded from
/// `start`: `Generated`'s rows are [`rows_per_input`] per source, in order.
pub fn generate_ids<M: LanguageModel<Source = Source>>(
    model: &M,
    model_config: &M::Config,
    sources: &[Vec<u32>],
    start: u32,
    config: &GenerationConfig,
    seed: u64,
    streamer: &mut dyn TokenStreamer,
) -> Result<Generated, GenerateError<InputError>> {
    let (_, repeat) = rows_per_input(config);
    let rows: Vec<&[u32]> = sources.iter().flat_map(|s| std::iter::repeat_n(s.as_slice(), repeat)).collect();
    let source = padded_source(&rows, config.pad_id(), &model.device());
    let decoder = Seq2SeqDecoder::new(model, model_config, source).map_err(GenerateError::Model)?;
    generate_streaming(&decoder, &vec![vec![start]; rows.len()], config, seed, streamer)
}

/// `rows` of source ids as one batch `[rows, longest]` on `device`, each padded with `pad` and
/// masked after its end.
pub(crate) fn padded_source(rows: &[&[u32]], pad: u32, device: &Device) -> Source {
    let width = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let ids: Vec<i64> = rows.iter().flat_map(|r| r.iter().map(|&t| i64::from(t)).chain(std::iter::repeat(i64::from(pad))).take(width)).collect();
    let mask: Vec<i64> = rows.iter().flat_map(|r| (0..width).map(|j| i64::from(j < r.len()))).collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [rows.len(), width]), device);
    let mask = Tensor::<2, Int>::from_data(TensorData::new(mask, [rows.len(), width]), device);
    Source { input_ids: ids, attention_mask: Some(mask) }
}

/// The search of the left-to-right `model` (with its `model_config`) continuing `prompt`:
/// [`rows_per_input`] rows.
pub fn continue_ids<M: LanguageModel<Source = ()>>(
    model: &M,
    model_config: &M::Config,
    prompt: &[u32],
    config: &GenerationConfig,
    seed: u64,
    streamer: &mut dyn TokenStreamer,
) -> Result<Generated, GenerateError<InputError>> {
    let (_, repeat) = rows_per_input(config);
    let decoder = CausalDecoder::new(model, model_config);
    generate_streaming(&decoder, &vec![prompt.to_vec(); repeat], config, seed, streamer)
}

/// `prompt` (a text's ids as the tokenizer frames them) less the closing special tokens
/// (`[SEP]`, `</s>`; XLNet's `<sep> <cls>`) that would end it: generation continues the text.
pub fn open_prompt(tokenizer: &Tokenizer, mut prompt: Vec<u32>) -> Vec<u32> {
    let special = tokenizer.special_tokens();
    let closing: Vec<u32> = [&special.sep, &special.cls].into_iter().filter_map(|s| tokenizer.token_to_id(s)).collect();
    while prompt.len() > 1 && prompt.last().is_some_and(|t| closing.contains(t)) {
        prompt.pop();
    }
    prompt
}

/// Write a target for each of `texts` with the encoder-decoder `model` (with its
/// `model_config`), `batch_size` sources at a time; one result per text, in order. `config` is
/// checked as transformers checks it; it needs an end-of-sequence id and a decoder start
/// (`decoder_start_token_id`, else `bos_token_id`).
pub fn generate<M: LanguageModel<Source = Source>>(
    model: &M,
    model_config: &M::Config,
    tokenizer: &Tokenizer,
    texts: &[&str],
    config: &GenerationConfig,
    seed: u64,
    batch_size: usize,
) -> Result<Vec<GeneratedText>, PipelineError> {
    let start = config.decoder_start_token_id.or(config.bos_token_id).ok_or(PipelineError::NoDecoderStart)?;
    let mut out = Vec::with_capacity(texts.len());
    for (b, batch) in texts.chunks(batch_size.max(1)).enumerate() {
        let first = b * batch_size.max(1);
        let sources = encode(tokenizer, batch, first, M::limits(model_config).max_len)?;
        let generated = generate_ids(model, model_config, &sources, start, config, seed, &mut ()).map_err(|e| generation_error(e, first, batch.len()))?;
        out.extend(results(tokenizer, generated, config, batch.len())?);
    }
    Ok(out)
}

/// Continue each of `prompts` with the left-to-right `model` (a decoder such as
/// `BertLMHeadModel`, or XLNet), each prompt alone; one result per prompt, in order.
pub fn continue_prompts<M: LanguageModel<Source = ()>>(
    model: &M,
    model_config: &M::Config,
    tokenizer: &Tokenizer,
    prompts: &[&str],
    config: &GenerationConfig,
    seed: u64,
) -> Result<Vec<GeneratedText>, PipelineError> {
    let limits = M::limits(model_config);
    let mut out = Vec::with_capacity(prompts.len());
    for (i, prompt) in prompts.iter().enumerate() {
        let ids = encode(tokenizer, &[prompt], i, limits.max_len)?.remove(0);
        let generated = continue_ids(model, model_config, &open_prompt(tokenizer, ids), config, seed, &mut ()).map_err(|e| generation_error(e, i, 1))?;
        out.extend(results(tokenizer, generated, config, 1)?);
    }
    Ok(out)
}

/// The ids of `texts` (the first being input `first`, from 0), each non-empty and within `max_len`.
pub fn encode(tokenizer: &Tokenizer, texts: &[&str], first: usize, max_len: usize) -> Result<Vec<Vec<u32>>, PipelineError> {
    let encoded = tokenizer.encode_each(texts, usize::MAX, false)?;
    encoded
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let ids: Vec<u32> = e.input_ids.iter().map(|&t| t as u32).collect();
            match ids.len() {
                0 => Err(PipelineError::EmptyText { what: "input", index: first + i + 1 }),
                n if n > max_len => Err(PipelineError::TooLong { index: first + i + 1, tokens: n, max_len }),
                _ => Ok(ids),
            }
        })
        .collect()
}

/// Each input's rows of `generated` (`inputs` of them), decoded.
fn results(tokenizer: &Tokenizer, generated: Generated, config: &GenerationConfig, inputs: usize) -> Result<Vec<GeneratedText>, PipelineError> {
    let (per_input, _) = rows_per_input(config);
    (0..inputs)
        .map(|i| {
            let rows = i * per_input..(i + 1) * per_input;
            let sequences = generated.sequences[rows.clone()].to_vec();
            let texts = sequences.iter().map(|r| tokenizer.decode(r)).collect::<Result<_, _>>()?;
            Ok(GeneratedText { sequences, texts, sequences_scores: generated.sequences_scores.as_ref().map(|s| s[rows].to_vec()) })
        })
        .collect()
}

fn generation_error(e: GenerateError<InputError>, first: usize, n: usize) -> PipelineError {
    match e {
        GenerateError::Settings(e) => PipelineError::Settings(e),
        GenerateError::Model(e) => PipelineError::Generation { first: first + 1, last: first + n, reason: e },
    }
}
