//! Reading a SentencePiece model file (`spiece.model`, the `ModelProto` protobuf of Google's
//! sentencepiece): the pieces with their scores and types, the unknown id, and the
//! precompiled normalisation table — what transformers' `SentencePieceExtractor` takes from it.
//! Only the fields Sesame uses are declared; protobuf skips the others.

use std::path::Path;

use prost::Message;


/// `ModelProto` (sentencepiece_model.proto).
#[derive(Clone, PartialEq, Message)]
struct ModelProto {
    #[prost(message, repeated, tag = "1")]
    pieces: Vec<PieceProto>,
    #[prost(message, optional, tag = "2")]
    trainer_spec: Option<TrainerSpec>,
    #[prost(message, optional, tag = "3")]
    normalizer_spec: Option<NormalizerSpec>,
}

/// `ModelProto.SentencePiece`.
#[derive(Clone, PartialEq, Message)]
struct PieceProto {
    #[prost(string, optional, tag = "1")]
    piece: Option<String>,
    #[prost(float, optional, tag = "2")]
    score: Option<f32>,
    #[prost(int32, optional, tag = "3")]
    r#type: Option<i32>,
}

/// `TrainerSpec` (the fields that shape the model).
#[derive(Clone, PartialEq, Message)]
struct TrainerSpec {
    #[prost(int32, optional, tag = "3")]
    model_type: Option<i32>,
    #[prost(bool, optional, tag = "35")]
    byte_fallback: Option<bool>,
    #[prost(int32, optional, tag = "40")]
    unk_id: Option<i32>,
}

/// `NormalizerSpec` (the compiled normalisation rules).
#[derive(Clone, PartialEq, Message)]
struct NormalizerSpec {
    #[prost(bytes = "vec", optional, tag = "2")]
    precompiled_charsmap: Option<Vec<u8>>,
}

/// What a piece is (`ModelProto.SentencePiece.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceType {
    /// An ordinary piece.
    Normal,
    /// The unknown piece.
    Unknown,
    /// A control symbol (`[CLS]`): never produced from text, a special token.
    Control,
    /// A user-defined symbol: always one piece where it appears in the text.
    UserDefined,
    /// A byte piece (`<0x41>`) or an unused slot.
    Other,
}

/// The content of a SentencePiece Unigram model file.
#[derive(Clone, Debug)]
pub struct SentencePieceModel {
    /// Pieces in id order, with their log-probability scores and types.
    pub pieces: Vec<(String, f64, PieceType)>,
    /// Id of the unknown piece.
    pub unk_id: usize,
    /// Whether unknown characters fall back to byte pieces.
    pub byte_fallback: bool,
    /// The compiled normalisation table (`nmt_nfkc` and the like); `None` for identity.
    pub precompiled_charsmap: Option<Vec<u8>>,
}

impl SentencePieceModel {
    /// Read `path`; only Unigram models (ALBERT's, XLNet's, T5's) are accepted. The error is
    /// why it cannot be read (the caller names the file).
    pub fn read(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
        let proto = ModelProto::decode(bytes.as_slice()).map_err(|e| format!("not a SentencePiece model: {e}"))?;
        let trainer = proto.trainer_spec.unwrap_or_default();
        match trainer.model_type.unwrap_or(1) {
            1 => {}
            2 => return Err("a SentencePiece BPE model; only Unigram models are supported".into()),
            other => return Err(format!("SentencePiece model type {other} (word or char); only Unigram models are supported")),
        }
        if proto.pieces.is_empty() {
            return Err("the model has no pieces".into());
        }
        let pieces: Vec<(String, f64, PieceType)> = proto
            .pieces
            .into_iter()
            .map(|p| {
                let kind = match p.r#type.unwrap_or(1) {
                    1 => PieceType::Normal,
                    2 => PieceType::Unknown,
                    3 => PieceType::Control,
                    4 => PieceType::UserDefined,
                    _ => PieceType::Other,
                };
                (p.piece.unwrap_or_default(), f64::from(p.score.unwrap_or(0.0)), kind)
            })
            .collect();
        let unk_id = trainer.unk_id.unwrap_or(0);
        let unk_id = usize::try_from(unk_id).ok().filter(|&i| i < pieces.len()).ok_or_else(|| {
            format!("unk_id {unk_id} is outside the {} pieces", pieces.len())
        })?;
        let precompiled_charsmap = proto.normalizer_spec.and_then(|n| n.precompiled_charsmap).filter(|m| !m.is_empty());
        if let Some(table) = &precompiled_charsmap {
            check_precompiled_charsmap(table).map_err(|e| format!("bad precompiled_charsmap: {e}"))?;
        }
        Ok(Self { pieces, unk_id, byte_fallback: trainer.byte_fallback.unwrap_or(false), precompiled_charsmap })
    }
}

/// Check a SentencePiece `precompiled_charsmap` before the `spm_precompiled` crate uses it.
///
/// The table is `[trie size in bytes: u32][trie: u32 units][replacement strings, each ended by
/// \0]`; the trie is a darts-clone double array. The crate walks it for every grapheme of
/// under 6 bytes (and every character) of a text, indexing the array and the strings without
/// bounds checks, so a table that points past its end loads and then panics on the first
/// text. This walks every state such a key can reach (at most 5 bytes deep) and checks that
/// each unit read lies in the array and each replacement starts inside the strings, on a
/// character boundary.
pub fn check_precompiled_charsmap(table: &[u8]) -> Result<(), String> {
    let size = table.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize).ok_or("shorter than its 4-byte header")?;
    let trie_bytes = table.get(4..4 + size / 4 * 4).ok_or_else(|| format!("its trie of {size} bytes runs past the table's {} bytes", table.len()))?;
    let units: Vec<usize> = trie_bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize).collect();
    let strings = std::str::from_utf8(&table[4 + size / 4 * 4..]).map_err(|e| format!("its replacement strings are not UTF-8: {e}"))?;
    // A darts-clone unit: label in bits 0-7 (and 31), leaf flag in bit 8, offset above bit 10.
    let label = |u: usize| u & ((1 << 31) | 0xFF);
    let has_leaf = |u: usize| (u >> 8) & 1 == 1;
    let offset = |u: usize| (u >> 10) << ((u & (1 << 9)) >> 6);
    let value = |u: usize| u & ((1 << 31) - 1);
    let unit = |pos: usize| units.get(pos).copied().ok_or_else(|| format!("its trie points to unit {pos} of {}", units.len()));
    const DEPTH: usize = 5;
    let mut seen = std::collections::HashSet::new();
    let mut frontier = vec![offset(unit(0)?)];
    for _ in 0..DEPTH {
        let mut next = Vec::new();
        for node in frontier {
            if !seen.insert(node) {
                continue;
            }
            for c in 1..=255usize {
                let child = unit(node ^ c)?;
                if label(child) != c {
                    continue;
                }
                let pos = node ^ c ^ offset(child);
                if has_leaf(child) {
                    let start = value(unit(pos)?);
                    if !strings.is_char_boundary(start) {
                        return Err(format!("a replacement starts at byte {start} of {} string bytes, not at a character", strings.len()));
                    }
                }
                next.push(pos);
            }
        }
        frontier = next;
    }
    Ok(())
}
