//! Generation as a value: [`Seq2SeqGenerator`] (an encoder-decoder such as BART) and
//! [`CausalGenerator`] (a left-to-right model), each behind [`Generator`]. In the server a request
//! runs alone on the model's thread, which sends its tokens to the client as soon as they are
//! final and ends the search as soon as the client has gone or a stop sequence was written.

use sesame_generate::decoding::{LanguageModel, Source};
use sesame_generate::{GenerateError, GenerationConfig, Generated, TokenStreamer};
use sesame_layers::InputError;
use crate::generate::{continue_ids, generate_ids, open_prompt};
use crate::PipelineError;
use sesame_text::Tokenizer;

use crate::served::{Generation, Generator, ServedModel, Task};

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
