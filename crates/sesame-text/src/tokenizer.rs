//! Tokenizers: load an HF `tokenizer.json`, build BERT's WordPiece from `vocab.txt`,
//! RoBERTa's byte-level BPE from `vocab.json` + `merges.txt` or ALBERT's Unigram from a
//! SentencePiece `spiece.model`; train WordPiece, byte-level BPE
//! or Unigram (ALBERT's SentencePiece model) on a corpus; batch encoding with padding,
//! truncation, attention masks, token types and sentence pairs.

use std::path::{Path, PathBuf};

use crate::sentencepiece::{PieceType, SentencePieceModel};

use burn::prelude::*;
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{
    AddedToken, EncodeInput, TruncationDirection, TruncationParams, TruncationStrategy,
};

/// Why text could not be tokenized.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// No tokenizer file Sesame reads is in the directory.
    #[error("no tokenizer in {dir}: expected tokenizer.json, vocab.json + merges.txt, spiece.model or vocab.txt")]
    NotFound {
        /// The model directory.
        dir: PathBuf,
    },
    /// A tokenizer file could not be read or parsed.
    #[error("cannot load tokenizer {path}: {reason}")]
    Load {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A special token the model needs is not in the vocabulary.
    #[error("the vocabulary has no `{token}` token")]
    MissingSpecialToken {
        /// The token.
        token: String,
    },
    /// Nothing to encode.
    #[error("empty batch: no text to encode")]
    EmptyBatch,
    /// An input is longer than allowed and truncation is off.
    #[error("input {index} has {len} tokens, more than the maximum of {max} (enable truncation)")]
    TooLong {
        /// Position of the input in the batch.
        index: usize,
        /// Its length in tokens.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The tokenizer failed, or a crate under it panicked, on a text (or while training).
    #[error("tokenizer {origin}: {reason}")]
    Encode {
        /// The tokenizer's file, or `trained on the corpus`.
        origin: String,
        /// What went wrong.
        reason: String,
    },
}

/// Special tokens of a vocabulary (BERT's `[CLS]`/`[SEP]`, RoBERTa's `<s>`/`</s>`, …).
#[derive(Clone, Debug)]
pub struct SpecialTokens {
    /// Padding token and id.
    pub pad: (String, u32),
    /// Unknown-word token.
    pub unk: String,
    /// Sequence-start token (`[CLS]`).
    pub cls: String,
    /// Separator token (`[SEP]`).
    pub sep: String,
    /// Mask token (`[MASK]`), when the vocabulary has one.
    pub mask: Option<(String, u32)>,
}

/// A tokenizer with the padding and truncation behaviour of HF's `tokenizer(texts, padding=True)`.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    special: SpecialTokens,
    /// Pad on the left (XLNet), else on the right.
    pad_left: bool,
    /// The token type of padding (XLNet's 3, else 0).
    pad_type_id: i64,
    /// The file it was loaded from (named by its errors).
    origin: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("special", &self.special)
            .finish()
    }
}

/// A padded batch of encodings, row-major `[batch, seq]`.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedBatch {
    /// Number of sequences.
    pub batch: usize,
    /// Padded length.
    pub seq: usize,
    /// Token ids.
    pub input_ids: Vec<i64>,
    /// 1 for tokens, 0 for padding.
    pub attention_mask: Vec<i64>,
    /// Segment ids (0 for the first text, 1 for the pair).
    pub token_type_ids: Vec<i64>,
    /// The tokens of each sequence (padding included).
    pub tokens: Vec<Vec<String>>,
}

/// One text's encoding before padding (special tokens included).
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedText {
    /// Token ids.
    pub input_ids: Vec<i64>,
    /// Segment ids.
    pub token_type_ids: Vec<i64>,
    /// The tokens.
    pub tokens: Vec<String>,
}

impl EncodedText {
    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.input_ids.len()
    }

    /// Whether there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.input_ids.is_empty()
    }
}

/// One token of [`Tokenizer::pieces`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Piece {
    /// Its id.
    pub id: u32,
    /// Its text in the vocabulary (`##ing`, `Ġwhale`).
    pub text: String,
    /// Whether it is a special token (`[CLS]`, `</s>`).
    pub special: bool,
    /// The first character of the text it covers (in Unicode scalar values; 0 for a special
    /// token).
    pub start: usize,
    /// One past its last character.
    pub stop: usize,
}

/// What [`Tokenizer::encode_windows`] reads: a text, or a text split into words already (a
/// tagged sentence's tokens; HF's `is_split_into_words=True`).
#[derive(Clone, Copy, Debug)]
pub enum Words<'a> {
    /// A text, split into words by the tokenizer's pre-tokenizer.
    Text(&'a str),
    /// Words given; each word's offsets count characters within it.
    Split(&'a [&'a str]),
}

/// One window of a text's tokens, with special tokens, as HF's tokenizer gives them with
/// `return_overflowing_tokens=True` and a `stride`.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenWindow {
    /// The tokens, special tokens included.
    pub encoded: EncodedText,
    /// Each token's word (its index among the input's words); `None` for special tokens.
    pub word_ids: Vec<Option<usize>>,
    /// Each token's span in characters, in the text (or in its word, for [`Words::Split`]);
    /// `(0, 0)` for special tokens.
    pub offsets: Vec<(usize, usize)>,
    /// Whether a token is the first of its word in the whole text (not just in this window).
    pub word_start: Vec<bool>,
    /// Each token's context in this window, BERT's "max context" score: the fewer tokens on its
    /// shorter side, plus 0.01 per token in the window; 0 for special tokens. A token in two
    /// windows is best read from the one where this is larger.
    pub context: Vec<f32>,
    /// The position of the classification token (`[CLS]`, `<s>`), which scores "no answer" in
    /// extractive QA; 0 when the window has none.
    pub cls: usize,
}

impl EncodedBatch {
    /// One row of ids.
    pub fn ids(&self, row: usize) -> &[i64] {
        &self.input_ids[row * self.seq..(row + 1) * self.seq]
    }

    /// `(input_ids, attention_mask, token_type_ids)` as `[batch, seq]` tensors on `device`.
    pub fn tensors(&self, device: &Device) -> (Tensor<2, Int>, Tensor<2, Int>, Tensor<2, Int>) {
        let t = |v: &Vec<i64>| Tensor::<2, Int>::from_data(TensorData::new(v.clone(), [self.batch, self.seq]), device);
        (t(&self.input_ids), t(&self.attention_mask), t(&self.token_type_ids))
    }
}

impl Tokenizer {
    /// Load the tokenizer of an HF model directory: `tokenizer.json` if present, else
    /// byte-level BPE from `vocab.json` + `merges.txt`, else Unigram from `spiece.model`, else
    /// WordPiece from `vocab.txt`, with the settings of `tokenizer_config.json`.
    /// `dir` may be a hub id in the local HuggingFace cache (`sesame_layers::hub::resolve`).
    pub fn from_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let dir = &sesame_layers::hub::resolve_path(dir).map_err(|e| TokenizerError::Load { path: dir.to_path_buf(), reason: e.to_string() })?;
        contain(|| Self::read_dir(dir), |reason| TokenizerError::Load { path: dir.to_path_buf(), reason })
    }

    fn read_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let json = dir.join("tokenizer.json");
        let vocab = dir.join("vocab.txt");
        let (bpe_vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
        let spiece = dir.join("spiece.model");
        let config = TokenizerConfig::of_dir(dir)?;
        if json.is_file() {
            Self::from_tokenizer_json(&json, &config)
        } else if bpe_vocab.is_file() && merges.is_file() {
            Self::from_bpe_files(&bpe_vocab, &merges, &config)
        } else if spiece.is_file() {
            Self::from_sentencepiece(&spiece, &config)
        } else if vocab.is_file() {
            Self::from_vocab_txt(&vocab, &config)
        } else {
            Err(TokenizerError::NotFound { dir: dir.to_path_buf() })
        }
    }

    /// Load a `tokenizer.json`.
    pub fn from_tokenizer_json(path: &Path, config: &TokenizerConfig) -> Result<Self, TokenizerError> {
        let load = |reason: String| TokenizerError::Load { path: path.to_path_buf(), reason };
        let inner = contain(|| tokenizers::Tokenizer::from_file(path).map_err(|e| load(e.to_string())), load)?;
        check_precompiled_tables(&inner).map_err(load)?;
        Self::new(inner, config, path)
    }

    /// Build BERT's WordPiece tokenizer from a `vocab.txt` (one token per line).
    pub fn from_vocab_txt(path: &Path, config: &TokenizerConfig) -> Result<Self, TokenizerError> {
        let load = |reason: String| TokenizerError::Load { path: path.to_path_buf(), reason };
        let model = WordPiece::from_file(&path.to_string_lossy())
            .unk_token(config.unk_token.clone())
            .build()
            .map_err(|e| load(e.to_string()))?;
        let cls_id = model_id(&model, &config.cls_token)?;
        let sep_id = model_id(&model, &config.sep_token)?;
        let mut inner = tokenizers::Tokenizer::new(model);
        inner
            .with_normalizer(Some(BertNormalizer::new(
                true,
                config.tokenize_chinese_chars,
                config.strip_accents,
                config.do_lower_case,
            )))
            .with_pre_tokenizer(Some(BertPreTokenizer))
            .with_post_processor(Some(BertProcessing::new(
                (config.sep_token.clone(), sep_id),
                (config.cls_token.clone(), cls_id),
            )))
            .with_decoder(Some(WordPieceDecoder::default()));
        Self::new(inner, config, path)
    }

    /// Build RoBERTa's byte-level BPE tokenizer from GPT-2 style `vocab.json` + `merges.txt`
    /// (as transformers' `RobertaTokenizerFast` converts them).
    pub fn from_bpe_files(vocab: &Path, merges: &Path, config: &TokenizerConfig) -> Result<Self, TokenizerError> {
        let load = |reason: String| TokenizerError::Load { path: vocab.to_path_buf(), reason };
        let model = BPE::from_file(&vocab.to_string_lossy(), &merges.to_string_lossy()).build().map_err(|e| load(e.to_string()))?;
        let mut inner = tokenizers::Tokenizer::new(model);
        let config = &config.resolve(&inner);
        byte_level_pipeline(&mut inner, config);
        Self::with_family_specials(inner, config, TokenizerKind::ByteLevelBpe, vocab)
    }

    /// Build ALBERT's tokenizer from a SentencePiece Unigram model file (`spiece.model`), as
    /// transformers' `AlbertTokenizer` converts one: the pieces and scores, ALBERT's text
    /// handling followed by the file's own normalisation table, control pieces as special
    /// tokens and user-defined pieces as tokens never split.
    pub fn from_sentencepiece(path: &Path, config: &TokenizerConfig) -> Result<Self, TokenizerError> {
        contain(|| Self::read_sentencepiece(path, config), |reason| TokenizerError::Load { path: path.to_path_buf(), reason })
    }

    fn read_sentencepiece(path: &Path, config: &TokenizerConfig) -> Result<Self, TokenizerError> {
        use tokenizers::models::unigram::Unigram;
        let load = |reason: String| TokenizerError::Load { path: path.to_path_buf(), reason };
        let kind = match config.tokenizer_class.as_deref() {
            None => TokenizerKind::Unigram,
            Some(class) => match TokenizerKind::of_class(class) {
                Some(kind @ (TokenizerKind::Unigram | TokenizerKind::UnigramClsLast)) => kind,
                _ => return Err(load(format!("tokenizer_class {class}: Sesame reads SentencePiece models as ALBERT's (AlbertTokenizer) or XLNet's (XLNetTokenizer)"))),
            },
        };
        let model = SentencePieceModel::read(path).map_err(|reason| TokenizerError::Load { path: path.to_path_buf(), reason })?;
        let vocab = model.pieces.iter().map(|(piece, score, _)| (piece.clone(), *score)).collect();
        let unigram = Unigram::from(vocab, Some(model.unk_id), model.byte_fallback).map_err(|e| load(e.to_string()))?;
        let mut inner = tokenizers::Tokenizer::new(unigram);
        let config = &config.resolve(&inner);
        sentencepiece_pipeline(&mut inner, config, model.precompiled_charsmap.as_deref()).map_err(|e| load(e.to_string()))?;
        let added = |kind: PieceType| -> Vec<AddedToken> {
            let pieces = model.pieces.iter().filter(|(_, _, k)| *k == kind);
            pieces.map(|(piece, _, _)| AddedToken::from(piece.clone(), kind == PieceType::Control).normalized(false)).collect()
        };
        inner.add_special_tokens(&added(PieceType::Control));
        inner.add_tokens(&added(PieceType::UserDefined));
        Self::with_family_specials(inner, config, kind, path)
    }

    /// `inner` with `kind`'s special tokens registered and its special-token layout.
    fn with_family_specials(mut inner: tokenizers::Tokenizer, config: &TokenizerConfig, kind: TokenizerKind, origin: &Path) -> Result<Self, TokenizerError> {
        add_specials(&mut inner, config, kind);
        let processor = post_processor(&inner, config, kind).map_err(|reason| TokenizerError::Encode { origin: origin.display().to_string(), reason })?;
        inner.with_post_processor(Some(processor));
        Self::new(inner, config, origin)
    }

    fn new(mut inner: tokenizers::Tokenizer, config: &TokenizerConfig, origin: &Path) -> Result<Self, TokenizerError> {
        let origin = origin.display().to_string();
        let config = &config.resolve(&inner);
        let id = |token: &str| {
            inner.token_to_id(token).ok_or_else(|| TokenizerError::MissingSpecialToken { token: token.to_string() })
        };
        let special = SpecialTokens {
            pad: (config.pad_token.clone(), id(&config.pad_token)?),
            unk: config.unk_token.clone(),
            cls: config.cls_token.clone(),
            sep: config.sep_token.clone(),
            mask: inner.token_to_id(&config.mask_token).map(|i| (config.mask_token.clone(), i)),
        };
        inner.with_truncation(None).map_err(|e| TokenizerError::Encode { origin: origin.clone(), reason: e.to_string() })?;
        inner.with_padding(None);
        let pad_left = config.padding_side == "left";
        let pad_type_id = config.tokenizer_class.as_deref().and_then(TokenizerKind::of_class).map_or(0, TokenizerKind::pad_token_type_id);
        let tokenizer = Self { inner, special, pad_left, pad_type_id, origin };
        // A post-processor with a special token whose ids and tokens differ in number is
        // refused here, by name, rather than at the first text it would misalign.
        if let Ok(pair) = tokenizer.guarded(|| tokenizer.inner.encode(("a", "b"), true)) {
            tokenizer.aligned(&pair).map_err(|reason| TokenizerError::Load { path: PathBuf::from(&tokenizer.origin), reason })?;
        }
        Ok(tokenizer)
    }

    /// Whether an encoding's ids, token types, tokens, offsets and word ids line up (the
    /// tokenizers crate does not check a post-processor's special tokens: one whose `ids` and
    /// `tokens` differ in number gives encodings whose lists differ in length).
    fn aligned(&self, e: &tokenizers::Encoding) -> Result<(), String> {
        let n = e.get_ids().len();
        let lengths = [("token types", e.get_type_ids().len()), ("tokens", e.get_tokens().len()), ("offsets", e.get_offsets().len()), ("word ids", e.get_word_ids().len())];
        match lengths.iter().find(|(_, len)| *len != n) {
            None => Ok(()),
            Some((what, len)) => Err(format!(
                "its post-processing gives {n} ids but {len} {what} (a special token of `post_processor` with `ids` and `tokens` of different lengths?)"
            )),
        }
    }

    /// [`Self::aligned`] as an encoding error of this tokenizer.
    fn check_aligned(&self, e: &tokenizers::Encoding) -> Result<(), TokenizerError> {
        self.aligned(e).map_err(|reason| self.failed(reason))
    }

    /// A failure of this tokenizer on a text, naming its file.
    fn failed(&self, reason: impl std::fmt::Display) -> TokenizerError {
        TokenizerError::Encode { origin: self.origin.clone(), reason: reason.to_string() }
    }

    /// Run a call into the tokenizers crate; its panic becomes [`TokenizerError::Encode`].
    fn guarded<T>(&self, f: impl FnOnce() -> tokenizers::Result<T>) -> Result<T, TokenizerError> {
        contain(|| f().map_err(|e| self.failed(e)), |reason| self.failed(reason))
    }

    /// The file it was loaded from (`trained on the corpus` for a trained one).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The special tokens.
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of `token`, if in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token of `id`, if any.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The `[MASK]` id, or an error if the vocabulary has none.
    pub fn mask_token_id(&self) -> Result<u32, TokenizerError> {
        self.special.mask.as_ref().map(|(_, id)| *id).ok_or_else(|| TokenizerError::MissingSpecialToken {
            token: "[MASK]".into(),
        })
    }

    /// Encode single texts, padded to the longest; inputs over `max_len` tokens are truncated
    /// when `truncate`, else rejected.
    pub fn encode(&self, texts: &[&str], max_len: usize, truncate: bool) -> Result<EncodedBatch, TokenizerError> {
        let inputs = texts.iter().map(|t| EncodeInput::Single((*t).into())).collect();
        self.encode_inputs(inputs, max_len, truncate)
    }

    /// Encode sentence pairs (`[CLS] a [SEP] b [SEP]`, token types 0 then 1).
    pub fn encode_pairs(&self, pairs: &[(&str, &str)], max_len: usize, truncate: bool) -> Result<EncodedBatch, TokenizerError> {
        let inputs = pairs.iter().map(|(a, b)| EncodeInput::Dual((*a).into(), (*b).into())).collect();
        self.encode_inputs(inputs, max_len, truncate)
    }

    /// Encode single texts one by one, unpadded (the same tokens as [`Tokenizer::encode`]);
    /// [`Tokenizer::pad`] batches any of them. Lets a caller group texts by token count.
    pub fn encode_each(&self, texts: &[&str], max_len: usize, truncate: bool) -> Result<Vec<EncodedText>, TokenizerError> {
        let inputs = texts.iter().map(|t| EncodeInput::Single((*t).into())).collect();
        self.encode_unpadded(inputs, max_len, truncate)
    }

    /// Encode sentence pairs one by one, unpadded (the same tokens as [`Tokenizer::encode_pairs`]).
    pub fn encode_pairs_each(&self, pairs: &[(&str, &str)], max_len: usize, truncate: bool) -> Result<Vec<EncodedText>, TokenizerError> {
        let inputs = pairs.iter().map(|(a, b)| EncodeInput::Dual((*a).into(), (*b).into())).collect();
        self.encode_unpadded(inputs, max_len, truncate)
    }

    /// Pad `rows` to the longest of them, as HF's `padding=True` does: on the right, or on the
    /// left for a tokenizer whose `padding_side` is `left` (XLNet's), padding with the family's
    /// padding token type (XLNet's 3, else 0).
    pub fn pad(&self, rows: &[&EncodedText]) -> Result<EncodedBatch, TokenizerError> {
        let seq = rows.iter().map(|r| r.len()).max().ok_or(TokenizerError::EmptyBatch)?;
        let (pad_token, pad_id) = &self.special.pad;
        let left = self.pad_left;
        fn padded<T: Clone>(row: &[T], pad: T, seq: usize, left: bool) -> Vec<T> {
            let fill = std::iter::repeat_n(pad, seq - row.len());
            if left { fill.chain(row.iter().cloned()).collect() } else { row.iter().cloned().chain(fill).collect() }
        }
        Ok(EncodedBatch {
            batch: rows.len(),
            seq,
            input_ids: rows.iter().flat_map(|r| padded(&r.input_ids, *pad_id as i64, seq, left)).collect(),
            attention_mask: rows.iter().flat_map(|r| padded(&vec![1i64; r.len()], 0, seq, left)).collect(),
            token_type_ids: rows.iter().flat_map(|r| padded(&r.token_type_ids, self.pad_type_id, seq, left)).collect(),
            tokens: rows.iter().map(|r| padded(&r.tokens, pad_token.clone(), seq, left)).collect(),
        })
    }

    fn encode_inputs(&self, inputs: Vec<EncodeInput>, max_len: usize, truncate: bool) -> Result<EncodedBatch, TokenizerError> {
        let rows = self.encode_unpadded(inputs, max_len, truncate)?;
        self.pad(&rows.iter().collect::<Vec<_>>())
    }

    fn encode_unpadded(&self, inputs: Vec<EncodeInput>, max_len: usize, truncate: bool) -> Result<Vec<EncodedText>, TokenizerError> {
        if inputs.is_empty() {
            return Err(TokenizerError::EmptyBatch);
        }
        let encode = |tok: &tokenizers::Tokenizer| self.guarded(|| tok.encode_batch(inputs, true));
        let encodings = if truncate {
            let mut tok = self.inner.clone();
            tok.with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: max_len,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| self.failed(e))?;
            encode(&tok)?
        } else {
            encode(&self.inner)?
        };
        let to_i64 = |v: &[u32]| v.iter().map(|&i| i as i64).collect::<Vec<i64>>();
        encodings
            .iter()
            .enumerate()
            .map(|(index, e)| {
                self.check_aligned(e)?;
                let len = e.get_ids().len();
                if len > max_len {
                    return Err(TokenizerError::TooLong { index, len, max: max_len });
                }
                Ok(EncodedText { input_ids: to_i64(e.get_ids()), token_type_ids: to_i64(e.get_type_ids()), tokens: e.get_tokens().to_vec() })
            })
            .collect()
    }

    /// Encode `input` as windows of at most `max_len` tokens (special tokens included), each
    /// starting `stride` tokens before the previous one ended, as HF's tokenizer does with
    /// `truncation=True, stride=stride, return_overflowing_tokens=True`: a long text loses
    /// nothing. Split words get a prefix space from a byte-level BPE pre-tokenizer (transformers'
    /// `add_prefix_space=True`, which it requires for them).
    pub fn encode_windows(&self, input: Words, max_len: usize, stride: usize) -> Result<Vec<TokenWindow>, TokenizerError> {
        self.windows(None, input, max_len, stride)
    }

    /// Encode `question` and `context` as pairs of the whole question and windows of the
    /// context, as transformers' `run_qa.py` does (`truncation="only_second"`, `stride`,
    /// `return_overflowing_tokens=True`); the windows' words, offsets and marks are the
    /// context's, the question's tokens are marked as special tokens are. A tokenizer that pads
    /// on the left (XLNet's) puts the context first and the question second, as `run_qa.py` and
    /// the question-answering pipeline do (`pad_on_right`).
    pub fn encode_question_windows(&self, question: &str, context: &str, max_len: usize, stride: usize) -> Result<Vec<TokenWindow>, TokenizerError> {
        self.windows(Some(question), Words::Text(context), max_len, stride)
    }

    fn windows(&self, first: Option<&str>, input: Words, max_len: usize, stride: usize) -> Result<Vec<TokenWindow>, TokenizerError> {
        let special = self.inner.get_post_processor().map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, first.is_some()));
        let question = first.map(|q| self.guarded(|| self.inner.encode_char_offsets(q, false))).transpose()?;
        let fixed = special + question.as_ref().map_or(0, tokenizers::Encoding::len);
        let content = max_len.saturating_sub(fixed);
        if content <= stride {
            let besides = if question.is_some() { format!("{special} special tokens and the question's {}", fixed - special) } else { format!("{special} special tokens") };
            return Err(TokenizerError::Encode {
                origin: self.origin.clone(),
                reason: format!("a window of {max_len} tokens holds {content} besides its {besides}, not more than the stride of {stride}"),
            });
        }
        // The windowed text's sequence id: second after a question, unless the context comes first.
        let context_first = self.pads_left();
        let windowed = Some(usize::from(question.is_some() && !context_first));
        let full = match input {
            Words::Text(text) => self.guarded(|| self.inner.encode_char_offsets(text, false))?,
            Words::Split(words) => {
                let mut tok = self.inner.clone();
                if let Some(tokenizers::PreTokenizerWrapper::ByteLevel(b)) = tok.get_pre_tokenizer() {
                    let b = b.clone().add_prefix_space(true);
                    tok.with_pre_tokenizer(Some(b));
                    // Offsets trimmed as for words that had their space.
                    match tok.get_post_processor() {
                        Some(PostProcessorWrapper::Roberta(r)) => {
                            let r = r.clone().add_prefix_space(true);
                            tok.with_post_processor(Some(r));
                        }
                        Some(PostProcessorWrapper::ByteLevel(b)) => {
                            let b = b.clone().add_prefix_space(true);
                            tok.with_post_processor(Some(b));
                        }
                        _ => {}
                    }
                }
                let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
                self.guarded(|| tok.encode_char_offsets(tokenizers::InputSequence::from(words), false))?
            }
        };
        let global_words = full.get_word_ids().to_vec();
        let starts_word = |g: usize| global_words[g].is_some() && (g == 0 || global_words[g] != global_words[g - 1]);
        let mut first = full;
        first.truncate(content, stride, TruncationDirection::Right);
        let rest = first.take_overflowing();
        let step = content - stride;
        std::iter::once(first)
            .chain(rest)
            .enumerate()
            .map(|(k, window)| {
                let n = window.len();
                // The offsets before post-processing: adding the special tokens would trim a
                // byte-level BPE's offsets a second time.
                let content_offsets = window.get_offsets().to_vec();
                let e = match &question {
                    Some(q) if context_first => self.guarded(|| self.inner.post_process(window, Some(second(q.clone())), true))?,
                    Some(q) => self.guarded(|| self.inner.post_process(q.clone(), Some(second(window)), true))?,
                    None => self.guarded(|| self.inner.post_process(window, None, true))?,
                };
                self.check_aligned(&e)?;
                // Only the windowed sequence's tokens count as content.
                let sequence: Vec<Option<usize>> = e.get_sequence_ids().into_iter().map(|s| s.filter(|&s| Some(s) == windowed)).collect();
                let mut c = 0;
                let (mut word_start, mut context) = (Vec::with_capacity(e.len()), Vec::with_capacity(e.len()));
                for s in &sequence {
                    if s.is_some() {
                        word_start.push(starts_word(k * step + c));
                        context.push(c.min(n - 1 - c) as f32 + 0.01 * n as f32);
                        c += 1;
                    } else {
                        word_start.push(false);
                        context.push(0.0);
                    }
                }
                let to_i64 = |v: &[u32]| v.iter().map(|&i| i as i64).collect::<Vec<i64>>();
                Ok(TokenWindow {
                    encoded: EncodedText { input_ids: to_i64(e.get_ids()), token_type_ids: to_i64(e.get_type_ids()), tokens: e.get_tokens().to_vec() },
                    word_ids: e.get_word_ids().iter().zip(&sequence).map(|(w, s)| s.and(w.map(|w| w as usize))).collect(),
                    offsets: {
                        let mut content = content_offsets.into_iter();
                        sequence.iter().map(|s| if s.is_some() { content.next().unwrap_or_default() } else { (0, 0) }).collect()
                    },
                    word_start,
                    context,
                    cls: e.get_tokens().iter().position(|t| *t == self.special.cls).unwrap_or(0),
                })
            })
            .collect()
    }

    /// Whether padding goes on the left (XLNet's tokenizer), where a row's tokens end at the
    /// padded length.
    pub fn pads_left(&self) -> bool {
        self.pad_left
    }

    /// The tokens of one text as the model reads it (with its special tokens when
    /// `add_special_tokens`), each with its id, its text and the characters it covers.
    pub fn pieces(&self, text: &str, add_special_tokens: bool) -> Result<Vec<Piece>, TokenizerError> {
        let e = self.guarded(|| self.inner.encode_char_offsets(text, add_special_tokens))?;
        let special = e.get_special_tokens_mask();
        Ok((0..e.len())
            .map(|i| {
                let (start, stop) = e.get_offsets()[i];
                Piece { id: e.get_ids()[i], text: e.get_tokens()[i].clone(), special: special[i] == 1, start, stop }
            })
            .collect())
    }

    /// Tokenize one text without special tokens: ids, and which tokens start a word (from
    /// the tokenizer's word ids), for whole-word and span masking.
    pub fn tokenize(&self, text: &str) -> Result<crate::pretraining::Segment, TokenizerError> {
        let e = self.guarded(|| self.inner.encode(text, false))?;
        self.check_aligned(&e)?;
        let words = e.get_word_ids();
        let word_start = (0..words.len()).map(|i| i == 0 || words[i].is_none() || words[i] != words[i - 1]).collect();
        Ok(crate::pretraining::Segment { ids: e.get_ids().to_vec(), word_start })
    }

    /// Train a tokenizer of `kind` with `vocab_size` tokens on `texts`, special tokens first
    /// (in the order of the family's released vocabularies). The result depends only on the
    /// texts and the settings: the same files in every process and on any number of cores
    /// (see [`crate::tokenizer_training`]).
    pub fn train<'a>(
        kind: TokenizerKind,
        texts: impl Iterator<Item = &'a str> + Send,
        vocab_size: usize,
        config: &TokenizerConfig,
    ) -> Result<Self, TokenizerError> {
        use crate::tokenizer_training::{Recipe, SortedTrainer};
        let origin = Path::new(TRAINED);
        let fail = |e: tokenizers::Error| TokenizerError::Encode { origin: TRAINED.into(), reason: format!("training a {kind:?} tokenizer failed: {e}") };
        let (mut inner, recipe) = match kind {
            TokenizerKind::WordPiece => {
                let model = WordPiece::builder().unk_token(config.unk_token.clone()).build().map_err(fail)?;
                let mut inner = tokenizers::Tokenizer::new(model);
                inner
                    .with_normalizer(Some(BertNormalizer::new(true, config.tokenize_chinese_chars, config.strip_accents, config.do_lower_case)))
                    .with_pre_tokenizer(Some(BertPreTokenizer))
                    .with_decoder(Some(WordPieceDecoder::default()));
                (inner, Recipe::WordPiece { unk: config.unk_token.clone() })
            }
            TokenizerKind::ByteLevelBpe => {
                let mut inner = tokenizers::Tokenizer::new(BPE::default());
                byte_level_pipeline(&mut inner, config);
                (inner, Recipe::ByteLevelBpe)
            }
            TokenizerKind::Unigram | TokenizerKind::UnigramClsLast => {
                let mut inner = tokenizers::Tokenizer::new(tokenizers::models::unigram::Unigram::default());
                sentencepiece_pipeline(&mut inner, config, None).map_err(fail)?;
                (inner, Recipe::Unigram { unk: config.unk_token.clone() })
            }
        };
        let mut trainer = SortedTrainer::new(recipe, vocab_size, kind.specials(config));
        let panicked = |reason| TokenizerError::Encode { origin: TRAINED.into(), reason };
        contain(|| inner.train(&mut trainer, texts).map(|_| ()).map_err(fail), panicked)?;
        Self::with_family_specials(inner, config, kind, origin)
    }

    /// Train a BERT WordPiece vocabulary of `vocab_size` tokens on `texts` (lower-cased when
    /// `config.do_lower_case`), with BERT's special tokens first.
    pub fn train_wordpiece<'a>(
        texts: impl Iterator<Item = &'a str> + Send,
        vocab_size: usize,
        config: &TokenizerConfig,
    ) -> Result<Self, TokenizerError> {
        Self::train(TokenizerKind::WordPiece, texts, vocab_size, config)
    }

    /// Write `tokenizer.json`, the model's own vocabulary files (`vocab.txt` for WordPiece,
    /// `vocab.json` + `merges.txt` for BPE) and `tokenizer_config.json` to `dir`, as
    /// transformers' `save_pretrained` does.
    pub fn save(&self, dir: &Path, config: &TokenizerConfig) -> Result<(), TokenizerError> {
        use tokenizers::models::ModelWrapper;
        use tokenizers::Model;
        let fail = |path: PathBuf, reason: String| TokenizerError::Load { path, reason };
        std::fs::create_dir_all(dir).map_err(|e| fail(dir.to_path_buf(), e.to_string()))?;
        let json = dir.join("tokenizer.json");
        let text = self.inner.to_string(true).map_err(|e| fail(json.clone(), e.to_string()))?;
        sesame_layers::fs::write_atomic(&json, text.as_bytes()).map_err(|e| fail(json.clone(), e.to_string()))?;
        let kind = match self.inner.get_model() {
            ModelWrapper::BPE(bpe) => {
                bpe.save(dir, None).map_err(|e| fail(dir.to_path_buf(), e.to_string()))?;
                TokenizerKind::ByteLevelBpe
            }
            ModelWrapper::Unigram(_) => match config.tokenizer_class.as_deref().and_then(TokenizerKind::of_class) {
                Some(TokenizerKind::UnigramClsLast) => TokenizerKind::UnigramClsLast,
                _ => TokenizerKind::Unigram,
            },
            _ => {
                let mut vocab: Vec<(u32, String)> = self.inner.get_vocab(true).into_iter().map(|(t, i)| (i, t)).collect();
                vocab.sort();
                let text: String = vocab.into_iter().map(|(_, t)| t + "\n").collect();
                sesame_layers::fs::write_atomic(&dir.join("vocab.txt"), text.as_bytes()).map_err(|e| fail(dir.join("vocab.txt"), e.to_string()))?;
                TokenizerKind::WordPiece
            }
        };
        let s = &self.special;
        let mut cfg = serde_json::json!({
            "tokenizer_class": config.tokenizer_class.clone().unwrap_or_else(|| kind.class().to_string()),
            "do_lower_case": config.do_lower_case,
            "unk_token": s.unk, "sep_token": s.sep, "pad_token": s.pad.0,
            "cls_token": s.cls, "mask_token": s.mask.as_ref().map(|m| &m.0),
        });
        if kind == TokenizerKind::WordPiece {
            cfg["strip_accents"] = config.strip_accents.into();
            cfg["tokenize_chinese_chars"] = config.tokenize_chinese_chars.into();
        } else {
            // RoBERTa and ALBERT also name the sequence start and end.
            cfg["bos_token"] = s.cls.clone().into();
            cfg["eos_token"] = s.sep.clone().into();
        }
        if matches!(kind, TokenizerKind::Unigram | TokenizerKind::UnigramClsLast) {
            cfg["keep_accents"] = config.keep_accents.into();
        }
        if self.pad_left {
            cfg["padding_side"] = "left".into();
        }
        if kind == TokenizerKind::ByteLevelBpe {
            cfg["add_prefix_space"] = config.add_prefix_space.into();
            cfg.as_object_mut().expect("object").remove("do_lower_case");
        }
        // A mask token that takes the space before it is written as roberta-base's is, so
        // that the vocabulary files alone rebuild it.
        if let Some((mask, id)) = &s.mask {
            if self.inner.get_added_tokens_decoder().get(id).is_some_and(|t| t.lstrip) {
                cfg["mask_token"] = serde_json::json!({ "__type": "AddedToken", "content": mask, "lstrip": true, "rstrip": false, "normalized": false, "single_word": false, "special": true });
            }
        }
        let path = dir.join("tokenizer_config.json");
        sesame_layers::fs::write_atomic(&path, serde_json::to_string_pretty(&cfg).expect("JSON").as_bytes()).map_err(|e| fail(path.clone(), e.to_string()))
    }

    /// Ids of the special tokens (never picked as random replacements when masking).
    pub fn special_ids(&self) -> Vec<u32> {
        let s = &self.special;
        let mut ids: Vec<u32> = [&s.unk, &s.cls, &s.sep].iter().filter_map(|t| self.token_to_id(t)).collect();
        ids.push(s.pad.1);
        ids.extend(s.mask.as_ref().map(|m| m.1));
        ids
    }

    /// Decode ids back to text, skipping special tokens.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.guarded(|| self.inner.decode(ids, true))
    }
}

/// RoBERTa's byte-level pre-tokenizer and decoder (GPT-2's byte alphabet, no prefix space
/// unless configured).
fn byte_level_pipeline(inner: &mut tokenizers::Tokenizer, config: &TokenizerConfig) {
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    inner
        .with_pre_tokenizer(Some(ByteLevel::new(config.add_prefix_space, true, true)))
        .with_decoder(Some(ByteLevel::default()));
}

/// ALBERT's SentencePiece text handling, as transformers' `AlbertTokenizer` builds it: quotes
/// normalised, NFKD without accents (unless `keep_accents`), lower-cased (when configured), the
/// model file's compiled normalisation table (when loaded from one), split at whitespace, words
/// marked with `▁`.
fn sentencepiece_pipeline(inner: &mut tokenizers::Tokenizer, config: &TokenizerConfig, precompiled: Option<&[u8]>) -> tokenizers::Result<()> {
    use tokenizers::decoders::metaspace::Metaspace as MetaspaceDecoder;
    use tokenizers::normalizers::{Lowercase, Precompiled, Replace, Sequence, StripAccents, NFKD};
    use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
    use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
    use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
    use tokenizers::NormalizerWrapper;
    let mut steps: Vec<NormalizerWrapper> = vec![Replace::new("``", "\"")?.into(), Replace::new("''", "\"")?.into()];
    if !config.keep_accents {
        steps.extend([NFKD.into(), StripAccents.into()]);
    }
    if config.do_lower_case {
        steps.push(Lowercase.into());
    }
    if let Some(map) = precompiled {
        steps.push(Precompiled::from(map).map_err(|e| format!("bad precompiled_charsmap: {e}"))?.into());
    }
    let words = PreSequence::new(vec![WhitespaceSplit.into(), Metaspace::new('▁', PrependScheme::Always, true).into()]);
    inner
        .with_normalizer(Some(Sequence::new(steps)))
        .with_pre_tokenizer(Some(words))
        .with_decoder(Some(MetaspaceDecoder::new('▁', PrependScheme::Always, true)));
    Ok(())
}

/// Register the special tokens as added tokens (never split; the mask token also takes the
/// space before it where `tokenizer_config.json` says `lstrip`, as roberta-base's does).
fn add_specials(inner: &mut tokenizers::Tokenizer, config: &TokenizerConfig, kind: TokenizerKind) {
    let tokens: Vec<AddedToken> = kind
        .specials(config)
        .into_iter()
        .filter(|t| inner.token_to_id(t).is_some())
        .map(|t| {
            let lstrip = config.mask_lstrip && t == config.mask_token;
            AddedToken::from(t, true).lstrip(lstrip)
        })
        .collect();
    inner.add_special_tokens(&tokens);
}

/// The family's special-token layout: BERT/ALBERT `[CLS] a [SEP] b [SEP]` (types 0, then 1),
/// RoBERTa `<s> a </s></s> b </s>` (types all 0), XLNet `a <sep> b <sep> <cls>` (types 0, 1,
/// and 2 for `<cls>`).
fn post_processor(inner: &tokenizers::Tokenizer, config: &TokenizerConfig, kind: TokenizerKind) -> Result<PostProcessorWrapper, String> {
    use tokenizers::processors::roberta::RobertaProcessing;
    use tokenizers::processors::template::TemplateProcessing;
    let id = |t: &str| inner.token_to_id(t).ok_or_else(|| format!("the vocabulary has no `{t}` token"));
    let (cls, sep) = ((config.cls_token.clone(), id(&config.cls_token)?), (config.sep_token.clone(), id(&config.sep_token)?));
    Ok(match kind {
        TokenizerKind::WordPiece => BertProcessing::new(sep, cls).into(),
        TokenizerKind::ByteLevelBpe => RobertaProcessing::new(sep, cls).trim_offsets(true).add_prefix_space(config.add_prefix_space).into(),
        TokenizerKind::UnigramClsLast => {
            let (c, s) = (&cls.0, &sep.0);
            TemplateProcessing::builder()
                .try_single(format!("$A:0 {s}:0 {c}:2"))
                .and_then(|b| b.try_pair(format!("$A:0 {s}:0 $B:1 {s}:1 {c}:2")))
                .map_err(|e| e.to_string())?
                .special_tokens(vec![sep.clone(), cls.clone()])
                .build()
                .map_err(|e| e.to_string())?
                .into()
        }
        TokenizerKind::Unigram => {
            let (c, s) = (&cls.0, &sep.0);
            TemplateProcessing::builder()
                .try_single(format!("{c}:0 $A:0 {s}:0"))
                .and_then(|b| b.try_pair(format!("{c}:0 $A:0 {s}:0 $B:1 {s}:1")))
                .map_err(|e| e.to_string())?
                .special_tokens(vec![cls.clone(), sep.clone()])
                .build()
                .map_err(|e| e.to_string())?
                .into()
        }
    })
}

fn model_id(model: &WordPiece, token: &str) -> Result<u32, TokenizerError> {
    use tokenizers::Model;
    model.token_to_id(token).ok_or_else(|| TokenizerError::MissingSpecialToken { token: token.to_string() })
}

/// The tokenizer families of the BERT family's released checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TokenizerKind {
    /// BERT's WordPiece: `[PAD] [UNK] [CLS] [SEP] [MASK]`, lower-cased.
    WordPiece,
    /// GPT-2/RoBERTa byte-level BPE: `<s> <pad> </s> <unk> <mask>`, cased, no unknown words.
    ByteLevelBpe,
    /// ALBERT's SentencePiece Unigram model: `<pad> <unk> [CLS] [SEP] [MASK]`, lower-cased.
    Unigram,
    /// A SentencePiece Unigram model with the class token last (XLNet's): `<unk> <s> </s> <cls>
    /// <sep> <pad> <mask> <eod> <eop>`, cased, `a <sep> b <sep> <cls>`, padded on the left with
    /// token type 3.
    #[serde(alias = "Xlnet")]
    UnigramClsLast,
}

impl TokenizerKind {
    /// The family's tokenizer settings and special tokens.
    pub fn config(self) -> TokenizerConfig {
        let bert = TokenizerConfig::default();
        match self {
            TokenizerKind::WordPiece => bert,
            TokenizerKind::ByteLevelBpe => TokenizerConfig {
                do_lower_case: false,
                unk_token: "<unk>".into(),
                sep_token: "</s>".into(),
                pad_token: "<pad>".into(),
                cls_token: "<s>".into(),
                mask_token: "<mask>".into(),
                // As roberta-base's and bart-base's: `<mask>` takes the space before it, the
                // way a masked word's token does (`Ġwhale`).
                mask_lstrip: true,
                ..bert
            },
            TokenizerKind::Unigram => TokenizerConfig { unk_token: "<unk>".into(), pad_token: "<pad>".into(), ..bert },
            TokenizerKind::UnigramClsLast => TokenizerConfig {
                do_lower_case: false,
                unk_token: "<unk>".into(),
                sep_token: "<sep>".into(),
                pad_token: "<pad>".into(),
                cls_token: "<cls>".into(),
                mask_token: "<mask>".into(),
                // As xlnet-base-cased's: `<mask>` takes the space before it.
                mask_lstrip: true,
                padding_side: "left".into(),
                ..bert
            },
        }
    }

    /// The token type of padding (transformers' `pad_token_type_id`).
    pub fn pad_token_type_id(self) -> i64 {
        match self {
            TokenizerKind::UnigramClsLast => 3,
            _ => 0,
        }
    }

    /// The transformers tokenizer class written to `tokenizer_config.json`.
    pub fn class(self) -> &'static str {
        match self {
            TokenizerKind::WordPiece => "BertTokenizer",
            TokenizerKind::ByteLevelBpe => "RobertaTokenizer",
            TokenizerKind::Unigram => "AlbertTokenizer",
            TokenizerKind::UnigramClsLast => "XLNetTokenizer",
        }
    }

    /// The kind a transformers tokenizer class implies, if Sesame knows it.
    pub fn of_class(class: &str) -> Option<Self> {
        let class = class.trim_end_matches("Fast");
        match class {
            "BertTokenizer" | "DistilBertTokenizer" | "ElectraTokenizer" => Some(TokenizerKind::WordPiece),
            "RobertaTokenizer" | "BartTokenizer" | "GPT2Tokenizer" | "LongformerTokenizer" => Some(TokenizerKind::ByteLevelBpe),
            "AlbertTokenizer" => Some(TokenizerKind::Unigram),
            "XLNetTokenizer" => Some(TokenizerKind::UnigramClsLast),
            _ => None,
        }
    }

    /// Special tokens in the order of the family's vocabularies (ids 0, 1, …).
    fn specials(self, c: &TokenizerConfig) -> Vec<String> {
        let order: Vec<&str> = match self {
            TokenizerKind::WordPiece => vec![&c.pad_token, &c.unk_token, &c.cls_token, &c.sep_token, &c.mask_token],
            TokenizerKind::ByteLevelBpe => vec![&c.cls_token, &c.pad_token, &c.sep_token, &c.unk_token, &c.mask_token],
            TokenizerKind::Unigram => vec![&c.pad_token, &c.unk_token, &c.cls_token, &c.sep_token, &c.mask_token],
            // XLNet's `<s>`, `</s>`, `<eod>` and `<eop>` (sequence and document boundaries) too.
            TokenizerKind::UnigramClsLast => vec![&c.unk_token, "<s>", "</s>", &c.cls_token, &c.sep_token, &c.pad_token, &c.mask_token, "<eod>", "<eop>"],
        };
        order.into_iter().map(str::to_string).collect()
    }
}

/// The fields of HF `tokenizer_config.json` that shape a tokenizer.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct TokenizerConfig {
    /// The transformers class (`BertTokenizer`, `RobertaTokenizer`, …), kept on save.
    pub tokenizer_class: Option<String>,
    /// Byte-level BPE: add a space before the first word.
    pub add_prefix_space: bool,
    /// Lower-case the text (BERT uncased).
    pub do_lower_case: bool,
    /// Strip accents (defaults to following `do_lower_case`).
    pub strip_accents: Option<bool>,
    /// SentencePiece (ALBERT): keep accents instead of NFKD + stripping them.
    pub keep_accents: bool,
    /// Split CJK characters into single tokens.
    pub tokenize_chinese_chars: bool,
    /// Unknown token.
    pub unk_token: String,
    /// Separator token.
    pub sep_token: String,
    /// Padding token.
    pub pad_token: String,
    /// Classification token.
    pub cls_token: String,
    /// Mask token.
    pub mask_token: String,
    /// Which side `pad` pads (`right`, or XLNet's `left`).
    pub padding_side: String,
    /// The special-token fields `tokenizer_config.json` set itself (the others may be found
    /// in the vocabulary under their RoBERTa/ALBERT names).
    #[serde(skip)]
    explicit: Vec<&'static str>,
    /// Whether the mask token swallows the space before it (`"lstrip": true`).
    #[serde(skip)]
    mask_lstrip: bool,
}

impl Default for TokenizerConfig {
    fn default() -> Self {
        Self {
            tokenizer_class: None,
            add_prefix_space: false,
            explicit: Vec::new(),
            mask_lstrip: false,
            do_lower_case: true,
            strip_accents: None,
            keep_accents: false,
            tokenize_chinese_chars: true,
            unk_token: "[UNK]".into(),
            sep_token: "[SEP]".into(),
            pad_token: "[PAD]".into(),
            cls_token: "[CLS]".into(),
            mask_token: "[MASK]".into(),
            padding_side: "right".into(),
        }
    }
}

impl TokenizerConfig {
    /// Read `path`, or the defaults when it does not exist.
    pub fn read(path: &Path) -> Result<Self, TokenizerError> {
        Self::read_for(path, None)
    }

    /// The tokenizer config of the checkpoint directory `dir`: its `tokenizer_config.json`, the
    /// class taken from `config.json`'s `model_type` when the file is absent or names none (as
    /// xlnet-base-cased ships: `spiece.model` alone).
    pub fn of_dir(dir: &Path) -> Result<Self, TokenizerError> {
        Self::read_for(&dir.join("tokenizer_config.json"), model_type_class(dir))
    }

    /// [`TokenizerConfig::read`], taking the tokenizer class to be `class` when the file names
    /// none (as transformers' `AutoTokenizer` takes it from the model's `model_type`).
    pub fn read_for(path: &Path, class: Option<&str>) -> Result<Self, TokenizerError> {
        if !path.is_file() {
            let kind = class.and_then(TokenizerKind::of_class);
            let config = kind.map_or_else(Self::default, TokenizerKind::config);
            return Ok(Self { tokenizer_class: class.filter(|_| kind.is_some()).map(str::to_string), ..config });
        }
        let load = |reason: String| TokenizerError::Load { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| load(e.to_string()))?;
        // Special tokens may be strings or {"content": ...} objects; normalise to strings.
        let mut value: serde_json::Value = serde_json::from_str(&text).map_err(|e| load(e.to_string()))?;
        if !value.is_object() {
            return Err(load("not a JSON object".into()));
        }
        let mask_lstrip = value.pointer("/mask_token/lstrip").and_then(|v| v.as_bool()).unwrap_or(false);
        if let Some(map) = value.as_object_mut() {
            for v in map.values_mut() {
                if let Some(content) = v.get("content").and_then(|c| c.as_str()).map(str::to_string) {
                    *v = content.into();
                }
            }
        }
        // Defaults are the class's (RoBERTa's `<s>`, ALBERT's `<pad>`), overridden by the file.
        if let (Some(map), Some(class)) = (value.as_object_mut(), class) {
            map.entry("tokenizer_class").or_insert(class.into());
        }
        let class = value.get("tokenizer_class").and_then(|c| c.as_str()).and_then(TokenizerKind::of_class);
        let mut merged = serde_json::to_value(class.unwrap_or(TokenizerKind::WordPiece).config()).expect("JSON");
        let mut explicit = Vec::new();
        if let (Some(base), Some(file)) = (merged.as_object_mut(), value.as_object()) {
            for (key, v) in file {
                if v.is_null() && key.ends_with("_token") {
                    continue;
                }
                if let Some(name) = Self::SPECIAL_FIELDS.iter().find(|f| *f == key) {
                    explicit.push(*name);
                }
                base.insert(key.clone(), v.clone());
            }
        }
        let config: Self = serde_json::from_value(merged).map_err(|e| load(e.to_string()))?;
        // XLNetTokenizer's `<mask>` takes the space before it unless the file says otherwise.
        let mask_lstrip = mask_lstrip || class == Some(TokenizerKind::UnigramClsLast) && !explicit.contains(&"mask_token");
        Ok(Self { explicit, mask_lstrip, ..config })
    }

    const SPECIAL_FIELDS: [&'static str; 5] = ["unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

    /// The config with each special token it did not set explicitly and that `inner`'s
    /// vocabulary lacks replaced by the family name the vocabulary has (`[CLS]` → `<s>`), so a
    /// RoBERTa or ALBERT vocabulary without a `tokenizer_config.json` still loads.
    fn resolve(&self, inner: &tokenizers::Tokenizer) -> Self {
        let mut config = self.clone();
        let candidates = [TokenizerKind::WordPiece, TokenizerKind::ByteLevelBpe, TokenizerKind::Unigram].map(TokenizerKind::config);
        let pick = |field: &'static str, current: &mut String, get: fn(&TokenizerConfig) -> &String| {
            if self.explicit.contains(&field) || inner.token_to_id(current).is_some() {
                return;
            }
            if let Some(found) = candidates.iter().map(get).find(|t| inner.token_to_id(t).is_some()) {
                *current = found.clone();
            }
        };
        pick("unk_token", &mut config.unk_token, |c| &c.unk_token);
        pick("sep_token", &mut config.sep_token, |c| &c.sep_token);
        pick("pad_token", &mut config.pad_token, |c| &c.pad_token);
        pick("cls_token", &mut config.cls_token, |c| &c.cls_token);
        pick("mask_token", &mut config.mask_token, |c| &c.mask_token);
        config
    }
}

/// `e` as the second sequence of a pair: without the sequence range that encoding it gave it
/// (sequence 0), which the pair's post-processing would keep beside its own (1) and let
/// overwrite the first sequence's.
fn second(e: tokenizers::Encoding) -> tokenizers::Encoding {
    tokenizers::Encoding::new(
        e.get_ids().to_vec(),
        e.get_type_ids().to_vec(),
        e.get_tokens().to_vec(),
        e.get_word_ids().to_vec(),
        e.get_offsets().to_vec(),
        e.get_special_tokens_mask().to_vec(),
        e.get_attention_mask().to_vec(),
        Vec::new(),
        Default::default(),
    )
}

/// The tokenizer class a model directory's `config.json` implies where it changes the layout
/// (XLNet's checkpoints ship `spiece.model` without a `tokenizer_config.json`).
fn model_type_class(dir: &Path) -> Option<&'static str> {
    let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    match value.get("model_type")?.as_str()? {
        "xlnet" => Some("XLNetTokenizer"),
        _ => None,
    }
}

/// Run `f`; a panic inside the tokenizers crate or a crate under it (a corrupt file can make
/// them panic, e.g. a precompiled normalisation table they cannot parse) becomes
/// `error(its message and place)`, on whatever thread it was raised (see [`sesame_layers::contain`]).
fn contain<T>(f: impl FnOnce() -> Result<T, TokenizerError>, error: impl FnOnce(String) -> TokenizerError) -> Result<T, TokenizerError> {
    sesame_layers::contain::catch(f).unwrap_or_else(|panic| Err(error(format!("the tokenizers crate failed on it: {panic}"))))
}

/// What a trained tokenizer's errors name as its origin.
const TRAINED: &str = "trained on the corpus";

/// Check every precompiled normalisation table (`Precompiled` normaliser) of a loaded
/// `tokenizer.json` as [`crate::sentencepiece::check_precompiled_charsmap`] does: the crate
/// that applies them indexes their trie unchecked, on the first text.
fn check_precompiled_tables(inner: &tokenizers::Tokenizer) -> Result<(), String> {
    use base64::Engine;
    fn tables(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(table)) = map.get("precompiled_charsmap") {
                    out.push(table.clone());
                }
                map.values().for_each(|v| tables(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| tables(v, out)),
            _ => {}
        }
    }
    let Some(normalizer) = inner.get_normalizer() else { return Ok(()) };
    let mut found = Vec::new();
    tables(&serde_json::to_value(normalizer).map_err(|e| e.to_string())?, &mut found);
    for table in found {
        let bytes = base64::engine::general_purpose::STANDARD.decode(&table).map_err(|e| format!("bad precompiled_charsmap: {e}"))?;
        crate::sentencepiece::check_precompiled_charsmap(&bytes).map_err(|e| format!("bad precompiled_charsmap: {e}"))?;
    }
    Ok(())
}
