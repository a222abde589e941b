//! Text for Sesame: tokenizers (and, later, corpora, masking strategies and batchers).

pub mod tokenizer;

pub use tokenizer::{EncodedBatch, SpecialTokens, Tokenizer, TokenizerConfig, TokenizerError};
