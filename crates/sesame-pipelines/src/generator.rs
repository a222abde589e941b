//! Generation as a value: [`Seq2SeqGenerator`] (an encoder-decoder such as BART) and
//! [`CausalGenerator`] (a left-to-right model), each behind [`Generator`]. In the server the
//! requests waiting together run as one search ([`Generator::generate_shared`]), each row with
//! its own settings; the model's thread sends each request's tokens to its client as soon as
//! they are final and ends a row as soon as its client has gone or a stop sequence was written.

use sesame_generate::decoding::{CausalDecoder, LanguageModel, Seq2SeqDecoder, Source};
use sesame_generate::{shared_search, GenerateError, GenerationConfig, Generated, SharedRow, TokenStreamer};
use sesame_layers::InputError;
use sesame_text::Tokenizer;

use crate::generate::{continue_ids, generate_ids, open_prompt, padded_source};
use crate::served::{Generation, Generator, ServedModel, SharedRequest, Task};
use crate::PipelineError;

/// Refuse a generator loaded from `dir` whose language-modelling head was missing from the
/// checkpoint (`report`): a head drawn at random would generate random tokens. A missing
/// `final_logits_bias` (zeros in transformers too) is no loss.
pub fn check_lm_head(dir: &std::path::Path, report: &sesame_layers::LoadReport) -> Result<(), String> {
    let missing: Vec<&str> = report.initialized.iter().map(String::as_str).filter(|name| !name.ends_with("final_logits_bias")).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!("{} has no trained language-modelling head (missing: {}); generate needs a checkpoint trained to predict tokens", dir.display(), missing.join(", ")))
}

/// The ids of `text`, or why it cannot be a prompt of a model of `max_len` positions.
fn encode(tokenizer: &Tokenizer, text: &str, max_len: usize) -> Result<Vec<u32>, PipelineError> {
    Ok(crate::generate::encode(tokenizer, &[text], 0, max_len)?.remove(0))
}

/// The first row of `out` after its first `skip` tokens, cut after the first end of sequence,
/// with its log-probabilities when the search kept its scores.
fn generation(out: Generated, skip: usize, settings: &GenerationConfig) -> Generation {
    let eos = settings.eos_token_ids();
    let mut tokens: Vec<u32> = out.sequences.into_iter().next().unwrap_or_default().into_iter().skip(skip).collect();
    if let Some(end) = tokens.iter().position(|t| eos.contains(t)) {
        tokens.truncate(end + 1);
    }
    let logprobs = (!out.scores.is_empty()).then(|| {
        tokens
            .iter()
            .zip(&out.scores)
            .map(|(&t, step)| {
                let row = &step[0];
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f32 = row.iter().map(|s| (s - max).exp()).sum();
                row[t as usize] - max - sum.ln()
            })
            .collect()
    });
    Generation { tokens, logprobs }
}

fn search_error(e: GenerateError<InputError>) -> PipelineError {
    match e {
        GenerateError::Settings(e) => PipelineError::Settings(e),
        GenerateError::Model(e) => PipelineError::Input(e),
    }
}

/// An encoder-decoder `M` (BART): the prompt is its source, the search starts from the
/// decoder start token.
pub struct Seq2SeqGenerator<M: LanguageModel<Source = Source>> {
    model: M,
    config: M::Config,
    tokenizer: Tokenizer,
    settings: GenerationConfig,
    start: u32,
}

impl<M: LanguageModel<Source = Source>> Seq2SeqGenerator<M> {
    /// Serve `model` (with its `config`) with `settings` (the model directory's, checked);
    /// `None` when they name no decoder start (`decoder_start_token_id`, else `bos_token_id`).
    pub fn new(model: M, config: M::Config, tokenizer: Tokenizer, settings: GenerationConfig) -> Option<Self> {
        let start = settings.decoder_start_token_id.or(settings.bos_token_id)?;
        Some(Self { model, config, tokenizer, settings, start })
    }

    /// The most positions of the encoder's input and of the decoder's.
    fn max_positions(&self) -> usize {
        M::limits(&self.config).max_len
    }
}

impl<M> Generator for Seq2SeqGenerator<M>
where
    M: LanguageModel<Source = Source> + Send + Sync + 'static,
    M::Config: Send + Sync,
{
    fn settings(&self) -> &GenerationConfig {
        &self.settings
    }

    fn prompt_ids(&self, text: &str) -> Result<Vec<u32>, PipelineError> {
        encode(&self.tokenizer, text, self.max_positions())
    }

    fn room(&self, _prompt_len: usize) -> usize {
        self.max_positions().saturating_sub(1)
    }

    fn generate(&self, prompt: &[u32], settings: &GenerationConfig, seed: u64, streamer: &mut dyn TokenStreamer) -> Result<Generation, PipelineError> {
        let out = generate_ids(&self.model, &self.config, &[prompt.to_vec()], self.start, settings, seed, streamer).map_err(search_error)?;
        Ok(generation(out, 1, settings))
    }

    /// Every source may share a search: the sources are padded and masked, and every row
    /// starts from the decoder start token.
    fn shared_key(&self, _prompt: &[u32], settings: &GenerationConfig) -> Option<usize> {
        settings.shares_search().then_some(0)
    }

    fn generate_shared(&self, requests: &mut [SharedRequest<'_>]) -> Result<Vec<Result<Generation, PipelineError>>, PipelineError> {
        shared(requests, 1, |sources, rows| {
            let source = padded_source(sources, self.settings.pad_id(), &self.model.device());
            let decoder = Seq2SeqDecoder::new(&self.model, &self.config, source)?;
            shared_search(&decoder, &vec![vec![self.start]; rows.len()], rows)
        })
    }
}

impl<M> ServedModel for Seq2SeqGenerator<M>
where
    M: LanguageModel<Source = Source> + Send + Sync + 'static,
    M::Config: Send + Sync,
{
    fn task(&self) -> Task {
        Task::Generator
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn max_input_length(&self) -> usize {
        self.max_positions()
    }

    fn generator(&self) -> Option<&dyn Generator> {
        Some(self)
    }

    fn run_encoded(&self, _inputs: &[crate::served::Input], _encoded: &[Option<crate::served::Encoded>]) -> Result<Vec<crate::served::Output>, PipelineError> {
        Err(not_batched())
    }
}

/// A left-to-right model `M` (a decoder checkpoint of an encoder family, XLNet): the search
/// continues the prompt after its last text token.
pub struct CausalGenerator<M: LanguageModel<Source = ()>> {
    model: M,
    config: M::Config,
    tokenizer: Tokenizer,
    settings: GenerationConfig,
}

impl<M: LanguageModel<Source = ()>> CausalGenerator<M> {
    /// Serve `model` (with its `config`) with `settings`, the model directory's, checked.
    pub fn new(model: M, config: M::Config, tokenizer: Tokenizer, settings: GenerationConfig) -> Self {
        Self { model, config, tokenizer, settings }
    }
}

impl<M> Generator for CausalGenerator<M>
where
    M: LanguageModel<Source = ()> + Send + Sync + 'static,
    M::Config: Send + Sync,
{
    fn settings(&self) -> &GenerationConfig {
        &self.settings
    }

    fn prompt_ids(&self, text: &str) -> Result<Vec<u32>, PipelineError> {
        let ids = encode(&self.tokenizer, text, M::limits(&self.config).max_len)?;
        Ok(open_prompt(&self.tokenizer, ids))
    }

    fn room(&self, prompt_len: usize) -> usize {
        M::limits(&self.config).max_len.saturating_sub(prompt_len)
    }

    fn generate(&self, prompt: &[u32], settings: &GenerationConfig, seed: u64, streamer: &mut dyn TokenStreamer) -> Result<Generation, PipelineError> {
        let out = continue_ids(&self.model, &self.config, prompt, settings, seed, streamer).map_err(search_error)?;
        Ok(generation(out, prompt.len(), settings))
    }

    /// Prompts of one length may share a search (the model reads no padding mask).
    fn shared_key(&self, prompt: &[u32], settings: &GenerationConfig) -> Option<usize> {
        settings.shares_search().then_some(prompt.len())
    }

    fn generate_shared(&self, requests: &mut [SharedRequest<'_>]) -> Result<Vec<Result<Generation, PipelineError>>, PipelineError> {
        let len = requests.first().map_or(0, |r| r.prompt.len());
        if let Some(other) = requests.iter().find(|r| r.prompt.len() != len) {
            return Err(PipelineError::Input(InputError::ShapeMismatch { what: "shared prompts", expected: vec![len], found: vec![other.prompt.len()] }));
        }
        shared(requests, len, |prompts, rows| shared_search(&CausalDecoder::new(&self.model, &self.config), &prompts.iter().map(|p| p.to_vec()).collect::<Vec<_>>(), rows))
    }
}

/// Run `requests` as one search `run` (given the prompts and the rows of the requests whose
/// settings are accepted), each row's search starting from `prompt_len` tokens: one result per
/// request, its settings' refusal or its generation.
fn shared(
    requests: &mut [SharedRequest<'_>],
    prompt_len: usize,
    run: impl FnOnce(&[&[u32]], &mut [SharedRow<'_>]) -> Result<Vec<Generated>, InputError>,
) -> Result<Vec<Result<Generation, PipelineError>>, PipelineError> {
    let mut results: Vec<Option<Result<Generation, PipelineError>>> = Vec::with_capacity(requests.len());
    let (mut prompts, mut rows, mut settings) = (Vec::new(), Vec::new(), Vec::new());
    for request in requests.iter_mut() {
        match request.settings.shared_row(prompt_len, request.seed, &mut *request.streamer) {
            Ok(row) => {
                results.push(None);
                prompts.push(request.prompt);
                settings.push(request.settings);
                rows.push(row);
            }
            Err(e) => results.push(Some(Err(PipelineError::Settings(e)))),
        }
    }
    let generated = if rows.is_empty() { Vec::new() } else { run(&prompts, &mut rows).map_err(PipelineError::Input)? };
    let mut generated = generated.into_iter().zip(settings).map(|(out, settings)| Ok(generation(out, prompt_len, settings)));
    Ok(results.into_iter().map(|refused| refused.unwrap_or_else(|| generated.next().expect("a generation per accepted request"))).collect())
}

impl<M> ServedModel for CausalGenerator<M>
where
    M: LanguageModel<Source = ()> + Send + Sync + 'static,
    M::Config: Send + Sync,
{
    fn task(&self) -> Task {
        Task::Generator
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn max_input_length(&self) -> usize {
        M::limits(&self.config).max_len
    }

    fn generator(&self) -> Option<&dyn Generator> {
        Some(self)
    }

    fn run_encoded(&self, _inputs: &[crate::served::Input], _encoded: &[Option<crate::served::Encoded>]) -> Result<Vec<crate::served::Output>, PipelineError> {
        Err(not_batched())
    }
}

fn not_batched() -> PipelineError {
    PipelineError::Input(InputError::Invalid { what: "inputs", reason: "a generator answers /generate".into() })
}
