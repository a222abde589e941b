//! Text generation written once, naming no family.
//!
//! [`processors`] holds transformers' logits processors: the rules `generate` applies to the
//! next-token scores of each row before a search picks from them (minimum lengths, forced
//! first and last tokens, repetition penalty, n-gram blocking, banned words) and the warpers
//! of sampling (temperature, top-k, top-p). Each acts on one row's scores `[vocab]` on the
//! host, given the row's tokens so far, with the numbers of the transformers class it names
//! (a parity test against transformers 5.23 checks every one of them).
//!
//! [`config`] reads transformers' `GenerationConfig` (from `generation_config.json`, else
//! `config.json`) and [`generate`] runs the search and processors it asks for.
//!
//! [`decoding`] presents Sesame's models to the searches: any [`decoding::LanguageModel`] of
//! any family, left to right or an encoder-decoder.
//!
//! [`search`] holds the searches — greedy, sampling, beam search — written against the
//! [`Decoder`] trait alone: a model starts from prompts, steps one token per row, and reorders
//! its rows.

pub mod config;
pub mod decoding;
pub mod processors;
pub mod search;

pub use config::{generate, generate_streaming, GenerationConfig, Ids};

pub use processors::{
    BadWords, ForcedBos, ForcedEos, LogitsProcessor, MinLength, MinNewTokens, NoRepeatNgram, ProcessorError, RepetitionPenalty,
    Row, Temperature, TopK, TopP,
};
pub use search::{
    beam_search, beam_search_streaming, greedy, greedy_streaming, sample, sample_streaming, shared_search, BeamSettings, Decoder, EarlyStopping, GenerateError, Generated,
    SeededSampler, SharedRow, Stopping, TokenSampler, TokenStreamer,
};
