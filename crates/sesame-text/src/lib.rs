//! Text for Sesame: tokenizers, corpora, masking strategies, BART's noising and pre-training
//! examples.

pub mod batcher;
pub mod corpus;
pub mod inputs;
pub mod knowledge;
pub mod labelled;
pub mod masking;
pub mod mass;
pub mod noising;
pub mod pretraining;
pub mod sentencepiece;
pub mod squad;
pub mod tagged;
pub mod text_rows;
pub mod tokenizer;
pub mod tokenizer_training;

pub use corpus::{Corpus, CorpusError};
pub use noising::{denoise, sentence_blocks, DenoisingConfig, DenoisingError, DenoisingExample, MaskLength, NoiseVocab, Noised};
pub use knowledge::{find_phrases, ErnieMasking, Lexicon, LexiconError, PhraseConfig, UnitMasking, WordText};
pub use mass::{mass, mass_at, Fill, Mass, MassConfig};
pub use masking::{choose_spans, Masked, MaskingConfig, MaskingInput, MaskingStrategy, MaskVocab, NgramMasking, SpanMasking, TokenMasking, WholeWordMasking};
pub use tokenizer::{EncodedBatch, EncodedText, Piece, SpecialTokens, TokenWindow, Tokenizer, TokenizerConfig, TokenizerError, TokenizerKind, Words};
pub use pretraining::{pack_sentences, sentence_pairs, mix_seeds, tokenize_documents, unigram_nll, EpochStream, Packing, PackedExample, PairConfig, PairExample, Segment, SentenceTask};
pub use batcher::{collate, Example, MaskedBatch, SequenceFormat};
