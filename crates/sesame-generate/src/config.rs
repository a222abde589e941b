//! transformers' `GenerationConfig`: the settings of `generate` with their names and defaults,
//! read from a model directory as transformers reads them, and turned into a search and its
//! processors.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::processors::{
    out_of_range, BadWords, ForcedBos, ForcedEos, LogitsProcessor, MinLength, MinNewTokens, NoRepeatNgram, ProcessorError,
    RepetitionPenalty, Temperature, TopK, TopP,
};
use crate::search::{
    beam_search_streaming, greedy_streaming, sample_streaming, BeamSettings, Decoder, EarlyStopping, GenerateError, Generated, SeededSampler,
    SharedRow, Stopping, TokenSampler, TokenStreamer,
};

/// One id or several (`eos_token_id` may be either).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Ids {
    /// One id.
    One(u32),
    /// Several.
    Many(Vec<u32>),
}

impl Ids {
    /// The ids as a list.
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            Ids::One(id) => vec![*id],
            Ids::Many(ids) => ids.clone(),
        }
    }
}

/// `early_stopping` as transformers writes it: `true`, `false` or `"never"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EarlyStoppingValue {
    /// `true` / `false`.
    Bool(bool),
    /// `"never"`.
    Text(String),
}

/// The settings of `generate`, every one optional: absent ones take transformers' defaults
/// (`max_length` 20, greedy search, no processor). Field names are transformers'.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationConfig {
    /// Longest row, prompt included, unless `max_new_tokens` is set (default: 20 new tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<usize>,
    /// Most tokens generated per row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<usize>,
    /// No end-of-sequence token before the row (prompt included) is this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_length: Option<usize>,
    /// No end-of-sequence token before this many tokens were generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_new_tokens: Option<usize>,
    /// Sample instead of searching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub do_sample: Option<bool>,
    /// Beams per prompt (1: greedy search or sampling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_beams: Option<usize>,
    /// Sequences returned per prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_return_sequences: Option<usize>,
    /// Beam search's length exponent (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_penalty: Option<f32>,
    /// Beam search's stopping rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_stopping: Option<EarlyStoppingValue>,
    /// Sampling temperature (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Sampling keeps the `top_k` best tokens (default 50; 0: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// Sampling keeps the smallest set of best tokens of this probability mass (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// CTRL's repetition penalty (default 1: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f32>,
    /// No n-gram of this size occurs twice (default 0: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_repeat_ngram_size: Option<usize>,
    /// Token sequences never generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bad_words_ids: Option<Vec<Vec<u32>>>,
    /// Padding id (rows that ended get it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_token_id: Option<u32>,
    /// Beginning-of-sequence id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<u32>,
    /// End-of-sequence id(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<Ids>,
    /// An encoder-decoder's first decoder token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_start_token_id: Option<u32>,
    /// The first generated token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced_bos_token_id: Option<u32>,
    /// The token at `max_length`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced_eos_token_id: Option<Ids>,
    /// Keep every step's processed scores (off by default: `rows × vocab` floats per step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_scores: Option<bool>,
    /// The model's positions (not a file setting: the caller sets it from the model); caps
    /// the default length, as transformers caps it at `max_position_embeddings`.
    #[serde(skip)]
    pub model_max_positions: Option<usize>,
}

/// Why a model directory's generation settings could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct ConfigFileError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl GenerationConfig {
    /// The settings of the model in `dir`, as transformers reads them: `generation_config.json`
    /// when the directory has one, else the generation fields of `config.json`; token ids the
    /// former lacks are taken from `config.json`.
    pub fn from_dir(dir: &Path) -> Result<Self, ConfigFileError> {
        let read = |name: &str| -> Result<Option<Self>, ConfigFileError> {
            let path = dir.join(name);
            let fail = |reason: String| ConfigFileError { path: path.display().to_string(), reason };
            match std::fs::read_to_string(&path) {
                Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| fail(e.to_string())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(fail(e.to_string())),
            }
        };
        let model = read("config.json")?.unwrap_or_default();
        Ok(match read("generation_config.json")? {
            None => model,
            Some(mut generation) => {
                let ids = Self {
                    pad_token_id: model.pad_token_id,
                    bos_token_id: model.bos_token_id,
                    eos_token_id: model.eos_token_id,
                    decoder_start_token_id: model.decoder_start_token_id,
                    ..Self::default()
                };
                generation.fill_from(&ids);
                generation
            }
        })
    }

    /// Every setting `self` lacks, taken from `other`.
    pub fn fill_from(&mut self, other: &Self) {
        macro_rules! fill {
            ($($field:ident),*) => { $( if self.$field.is_none() { self.$field = other.$field.clone(); } )* };
        }
        fill!(max_length, max_new_tokens, min_length, min_new_tokens, do_sample, num_beams, num_return_sequences, length_penalty,
            early_stopping, temperature, top_k, top_p, repetition_penalty, no_repeat_ngram_size, bad_words_ids, pad_token_id,
            bos_token_id, eos_token_id, decoder_start_token_id, forced_bos_token_id, forced_eos_token_id, output_scores, model_max_positions);
    }

    /// `self` with the settings `overrides` sets (a command line's flags) replacing its own.
    pub fn overridden_by(&self, overrides: &Self) -> Self {
        let mut out = overrides.clone();
        out.fill_from(self);
        out
    }

    /// The end-of-sequence ids.
    pub fn eos_token_ids(&self) -> Vec<u32> {
        self.eos_token_id.as_ref().map(Ids::to_vec).unwrap_or_default()
    }

    /// What rows get after they end: `pad_token_id`, else the first EOS id, else 0 (as
    /// transformers, which pads with the EOS id when there is no padding id).
    pub fn pad_id(&self) -> u32 {
        self.pad_token_id.or(self.eos_token_ids().first().copied()).unwrap_or(0)
    }

    /// When to stop, for prompts of `prompt_len` tokens (a decoder's start token for an
    /// encoder-decoder), as transformers decides: `max_new_tokens`; else `max_length` less the
    /// prompt; else 20 new tokens, the whole at most `model_max_positions` long.
    pub fn stopping(&self, prompt_len: usize) -> Result<Stopping, ProcessorError> {
        let max_new_tokens = match (self.max_new_tokens, self.max_length) {
            (Some(n), _) => n,
            (None, Some(length)) => {
                if length <= prompt_len {
                    return Err(out_of_range("max_length", "longer than the prompt (or set max_new_tokens)", format!("{length} for a prompt of {prompt_len} tokens")));
                }
                length - prompt_len
            }
            (None, None) => {
                let length = (prompt_len + 20).min(self.model_max_positions.unwrap_or(usize::MAX));
                length.saturating_sub(prompt_len)
            }
        };
        Ok(Stopping { max_new_tokens, eos_token_ids: self.eos_token_ids(), pad_token_id: self.pad_id(), output_scores: self.output_scores == Some(true) })
    }

    /// The processors `generate` builds from these settings, in its order, for prompts of
    /// `prompt_len` tokens (warpers last, when sampling).
    pub fn processors(&self, prompt_len: usize) -> Result<Vec<Box<dyn LogitsProcessor>>, ProcessorError> {
        let eos = self.eos_token_ids();
        let mut out: Vec<Box<dyn LogitsProcessor>> = Vec::new();
        if let Some(p) = self.repetition_penalty.filter(|&p| p != 1.0) {
            out.push(Box::new(RepetitionPenalty::new(p)?));
        }
        if let Some(n) = self.no_repeat_ngram_size.filter(|&n| n > 0) {
            out.push(Box::new(NoRepeatNgram::new(n)?));
        }
        if let Some(words) = &self.bad_words_ids {
            out.push(Box::new(BadWords::new(words.clone(), &eos)?));
        }
        if let Some(min_length) = self.min_length.filter(|&m| m > 0 && !eos.is_empty()) {
            out.push(Box::new(MinLength { min_length, eos_token_ids: eos.clone() }));
        }
        if let Some(min_new_tokens) = self.min_new_tokens.filter(|&m| m > 0 && !eos.is_empty()) {
            out.push(Box::new(MinNewTokens { min_new_tokens, eos_token_ids: eos.clone() }));
        }
        if let Some(bos) = self.forced_bos_token_id {
            out.push(Box::new(ForcedBos { bos_token_id: bos }));
        }
        if let Some(forced) = &self.forced_eos_token_id {
            let max_length = prompt_len + self.stopping(prompt_len)?.max_new_tokens;
            out.push(Box::new(ForcedEos { max_length, eos_token_ids: forced.to_vec() }));
        }
        if self.do_sample == Some(true) {
            if let Some(t) = self.temperature.filter(|&t| t != 1.0) {
                out.push(Box::new(Temperature::new(t)?));
            }
            let top_k = self.top_k.unwrap_or(50);
            if top_k != 0 {
                out.push(Box::new(TopK::new(top_k, 1)?));
            }
            if let Some(p) = self.top_p.filter(|&p| p < 1.0) {
                out.push(Box::new(TopP::new(p, 1)?));
            }
        }
        Ok(out)
    }

    /// Beam search's settings, when `num_beams` > 1.
    pub fn beams(&self) -> Result<Option<BeamSettings>, ProcessorError> {
        let num_beams = self.num_beams.unwrap_or(1);
        if num_beams <= 1 {
            return Ok(None);
        }
        let early_stopping = match &self.early_stopping {
            None | Some(EarlyStoppingValue::Bool(false)) => EarlyStopping::Heuristic,
            Some(EarlyStoppingValue::Bool(true)) => EarlyStopping::WhenFull,
            Some(EarlyStoppingValue::Text(s)) => s.parse()?,
        };
        let beams = BeamSettings {
            num_beams,
            length_penalty: self.length_penalty.unwrap_or(1.0),
            early_stopping,
            num_return_sequences: self.num_return_sequences.unwrap_or(1),
        };
        beams.validate()?;
        Ok(Some(beams))
    }

    /// Refuse the settings and combinations transformers refuses, and beam sampling (not
    /// supported here).
    pub fn validate(&self) -> Result<(), ProcessorError> {
        // Sampling's settings are checked whether or not this run samples: a value out of range
        // is a mistake either way, and transformers' warpers refuse it when they are built.
        if let Some(t) = self.temperature {
            Temperature::new(t)?;
        }
        if let Some(p) = self.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
            return Err(out_of_range("top_p", "a number in (0, 1]", p));
        }
        if let Some(p) = self.repetition_penalty {
            RepetitionPenalty::new(p)?;
        }
        if let Some(p) = self.length_penalty.filter(|p| !p.is_finite()) {
            return Err(out_of_range("length_penalty", "a finite number", p));
        }
        if self.num_beams == Some(0) {
            return Err(out_of_range("num_beams", "a positive integer", 0));
        }
        if self.max_new_tokens == Some(0) {
            return Err(out_of_range("max_new_tokens", "a positive integer", 0));
        }
        let beams = self.beams()?;
        let sampling = self.do_sample == Some(true);
        let returned = self.num_return_sequences.unwrap_or(1);
        if beams.is_some() && sampling {
            return Err(out_of_range("do_sample", "false with num_beams > 1 (beam sampling is not supported yet)", true));
        }
        if beams.is_none() && !sampling && returned != 1 {
            return Err(out_of_range("num_return_sequences", "1 for greedy search (use num_beams or do_sample)", returned));
        }
        if returned == 0 {
            return Err(out_of_range("num_return_sequences", "a positive integer", returned));
        }
        Ok(())
    }

    /// Refuse a token id outside a vocabulary of `vocab_size` (`eos_token_id`, `pad_token_id`,
    /// `bos_token_id`, `decoder_start_token_id`, the forced and the banned ids): such an id
    /// could never be generated, so a search would run to its length limit, or index past the
    /// scores.
    pub fn validate_ids(&self, vocab_size: usize) -> Result<(), ProcessorError> {
        let fits = |id: &u32| (*id as usize) < vocab_size;
        let single = [
            ("pad_token_id", self.pad_token_id),
            ("bos_token_id", self.bos_token_id),
            ("decoder_start_token_id", self.decoder_start_token_id),
            ("forced_bos_token_id", self.forced_bos_token_id),
        ];
        let lists = [("eos_token_id", self.eos_token_id.as_ref().map(Ids::to_vec)), ("forced_eos_token_id", self.forced_eos_token_id.as_ref().map(Ids::to_vec))];
        let banned = ("bad_words_ids", self.bad_words_ids.clone().map(|w| w.concat()));
        let all = single.into_iter().map(|(name, id)| (name, id.into_iter().collect::<Vec<_>>())).chain(lists.into_iter().chain([banned]).map(|(name, ids)| (name, ids.unwrap_or_default())));
        for (name, ids) in all {
            if let Some(id) = ids.iter().find(|id| !fits(id)) {
                return Err(ProcessorError::OutOfRange { name, expected: "an id inside the vocabulary", value: format!("{id} (the vocabulary has {vocab_size} ids)") });
            }
        }
        Ok(())
    }
}

/// Run the search these settings ask for on `model` from `prompts` (greedy, sampling seeded
/// with `seed`, or beam search), with their processors. Sampling with `num_return_sequences`
/// n draws n rows per prompt: give each prompt n times (as transformers expands them).
pub fn generate<D: Decoder>(model: &D, prompts: &[Vec<u32>], config: &GenerationConfig, seed: u64) -> Result<Generated, GenerateError<D::Error>> {
    generate_streaming(model, prompts, config, seed, &mut ())
}

/// [`generate`], giving `streamer` the tokens of each row (greedy search, sampling) or prompt
/// (beam search) as soon as they are final (see [`TokenStreamer`]).
pub fn generate_streaming<D: Decoder>(
    model: &D,
    prompts: &[Vec<u32>],
    config: &GenerationConfig,
    seed: u64,
    streamer: &mut dyn TokenStreamer,
) -> Result<Generated, GenerateError<D::Error>> {
    config.validate().map_err(GenerateError::Settings)?;
    let prompt_len = prompts.first().map_or(0, Vec::len);
    let stopping = config.stopping(prompt_len).map_err(GenerateError::Settings)?;
    let processors = config.processors(prompt_len).map_err(GenerateError::Settings)?;
    match config.beams().map_err(GenerateError::Settings)? {
        Some(beams) => beam_search_streaming(model, prompts, &processors, &stopping, &beams, streamer),
        None if config.do_sample == Some(true) => {
            sample_streaming(model, prompts, &processors, &stopping, &mut SeededSampler::new(seed), streamer).map_err(GenerateError::Model)
        }
        None => greedy_streaming(model, prompts, &processors, &stopping, streamer).map_err(GenerateError::Model),
    }
}

impl GenerationConfig {
    /// A request's row of a [`shared_search`](crate::search::shared_search) with these settings, from a prompt of
    /// `prompt_len` tokens: greedy search, or sampling seeded with `seed`, its tokens given to
    /// `streamer`. Refused for the settings [`validate`](Self::validate) refuses, and for beam
    /// search and several sequences per request, which run alone ([`generate_streaming`]).
    pub fn shared_row<'a>(&self, prompt_len: usize, seed: u64, streamer: &'a mut dyn TokenStreamer) -> Result<SharedRow<'a>, ProcessorError> {
        self.validate()?;
        if let Some(beams) = self.beams()? {
            return Err(out_of_range("num_beams", "1 in a search shared with other requests (beam search runs alone)", beams.num_beams));
        }
        if let Some(n) = self.num_return_sequences.filter(|&n| n != 1) {
            return Err(out_of_range("num_return_sequences", "1 in a search shared with other requests", n));
        }
        let sampler: Option<Box<dyn TokenSampler>> = match self.do_sample == Some(true) {
            true => Some(Box::new(SeededSampler::new(seed))),
            false => None,
        };
        Ok(SharedRow { processors: self.processors(prompt_len)?, stopping: self.stopping(prompt_len)?, sampler, streamer })
    }

    /// Whether a request with these settings may share a search with others
    /// ([`shared_row`](Self::shared_row)): greedy search or sampling, one sequence.
    pub fn shares_search(&self) -> bool {
        self.num_beams.unwrap_or(1) <= 1 && self.num_return_sequences.unwrap_or(1) == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_settings_out_of_range_and_ids_outside_the_vocabulary_are_refused() {
        let refused = |config: GenerationConfig| config.validate().unwrap_err().to_string();
        // Greedy search too: a value out of range is a mistake whether or not it is used.
        assert!(refused(GenerationConfig { top_p: Some(1.5), ..Default::default() }).contains("`top_p`"));
        assert!(refused(GenerationConfig { top_p: Some(0.0), do_sample: Some(true), ..Default::default() }).contains("`top_p`"));
        assert!(refused(GenerationConfig { top_p: Some(f32::NAN), ..Default::default() }).contains("`top_p`"));
        assert!(refused(GenerationConfig { temperature: Some(0.0), ..Default::default() }).contains("`temperature`"));
        assert!(refused(GenerationConfig { length_penalty: Some(f32::INFINITY), num_beams: Some(2), ..Default::default() }).contains("`length_penalty`"));
        GenerationConfig { top_p: Some(1.0), temperature: Some(0.7), ..Default::default() }.validate().unwrap();
        let ids = GenerationConfig { eos_token_id: Some(Ids::Many(vec![2, 10])), pad_token_id: Some(0), ..Default::default() };
        ids.validate_ids(11).unwrap();
        assert!(ids.validate_ids(10).unwrap_err().to_string().contains("`eos_token_id`"));
        let banned = GenerationConfig { bad_words_ids: Some(vec![vec![3, 40]]), ..Default::default() };
        assert!(banned.validate_ids(40).unwrap_err().to_string().contains("`bad_words_ids`"));
    }

    #[test]
    fn settings_read_as_transformers_writes_them() {
        let config: GenerationConfig = serde_json::from_str(
            r#"{"eos_token_id": [2, 5], "early_stopping": "never", "num_beams": 4, "forced_eos_token_id": 2, "foo": 1}"#,
        )
        .unwrap();
        assert_eq!(config.eos_token_ids(), vec![2, 5]);
        assert_eq!(config.beams().unwrap().unwrap().early_stopping, EarlyStopping::Never);
        let flags = GenerationConfig { num_beams: Some(1), max_new_tokens: Some(3), ..Default::default() };
        let merged = config.overridden_by(&flags);
        assert_eq!((merged.num_beams, merged.max_new_tokens, merged.pad_id()), (Some(1), Some(3), 2));
        assert_eq!(merged.stopping(1).unwrap().max_new_tokens, 3);
        assert_eq!(GenerationConfig::default().stopping(5).unwrap().max_new_tokens, 20);
        let capped = GenerationConfig { model_max_positions: Some(12), ..Default::default() };
        assert_eq!(capped.stopping(5).unwrap().max_new_tokens, 7);
        assert!(GenerationConfig { max_length: Some(4), ..Default::default() }.stopping(5).is_err());
    }

    #[test]
    fn combinations_transformers_refuses_are_errors() {
        let bad = GenerationConfig { num_beams: Some(2), num_return_sequences: Some(3), ..Default::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("num_return_sequences"));
        assert!(GenerationConfig { num_beams: Some(0), ..Default::default() }.validate().is_err());
        assert!(GenerationConfig { max_new_tokens: Some(0), ..Default::default() }.validate().is_err());
        let greedy_many = GenerationConfig { num_return_sequences: Some(2), ..Default::default() };
        assert!(greedy_many.validate().is_err());
        let sampled = GenerationConfig { do_sample: Some(true), num_return_sequences: Some(2), ..Default::default() };
        assert!(sampled.validate().is_ok());
        assert_eq!(sampled.processors(1).unwrap().len(), 1, "top-k 50 by default");
    }
}
