//! Collating pre-training examples into padded, masked batches (host-side arrays).

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::masking::{MaskVocab, MaskingInput, MaskingStrategy, NOT_PREDICTED};
use crate::pretraining::{PackedExample, PairExample, Segment};

/// The special ids of the `[CLS] a [SEP] b [SEP]` (RoBERTa `<s> a </s>`) layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceFormat {
    /// Sequence-start id.
    pub cls: u32,
    /// Separator id.
    pub sep: u32,
    /// Padding id.
    pub pad: u32,
}

/// One pre-training example: a sentence pair, or a packed single sequence.
#[derive(Clone, Debug, PartialEq)]
pub enum Example {
    /// `[CLS] a [SEP] b [SEP]`, token types 0 then 1, with a sentence-task label.
    Pair(PairExample),
    /// `<s> doc1 </s> doc2 </s>`, token types 0.
    Packed(PackedExample),
}

impl Example {
    /// The text segments and their token types.
    fn segments(&self) -> Vec<(&Segment, i64)> {
        match self {
            Example::Pair(p) => vec![(&p.a, 0), (&p.b, 1)],
            Example::Packed(p) => p.segments.iter().map(|s| (s, 0)).collect(),
        }
    }

    /// Tokens, special tokens included.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        match self {
            Example::Pair(p) => p.a.ids.len() + p.b.ids.len() + 3,
            Example::Packed(p) => p.len(),
        }
    }

    /// The sentence-task label (0 for packed sequences, which have none).
    pub fn label(&self) -> i64 {
        matches!(self, Example::Pair(p) if p.is_negative) as i64
    }
}

/// A masked batch, row-major `[batch, seq]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MaskedBatch {
    /// Number of rows.
    pub batch: usize,
    /// Padded length (the longest row).
    pub seq: usize,
    /// Ids after masking.
    pub input_ids: Vec<i64>,
    /// 0 for `[CLS] a [SEP]`, 1 for `b [SEP]`, 0 for padding.
    pub token_type_ids: Vec<i64>,
    /// 1 for tokens, 0 for padding.
    pub attention_mask: Vec<i64>,
    /// Original ids at masked positions, -100 elsewhere.
    pub mlm_labels: Vec<i64>,
    /// 1 where `b` is a random next sentence (NSP) or swapped (SOP).
    pub pair_labels: Vec<i64>,
    /// Non-padding tokens.
    pub tokens: usize,
}

/// Lay out, mask and pad `examples`; row `i`'s mask is drawn from `mask_seeds[i]`, so a
/// caller can give an example the same mask again (static masking) or a new one each time.
pub fn collate(
    examples: &[&Example],
    format: SequenceFormat,
    masking: &dyn MaskingStrategy,
    vocab: &MaskVocab,
    mask_seeds: &[u64],
) -> MaskedBatch {
    assert_eq!(examples.len(), mask_seeds.len(), "one mask seed per example");
    let seq = examples.iter().map(|e| e.len()).max().unwrap_or(0);
    let batch = examples.len();
    let mut out = MaskedBatch {
        batch,
        seq,
        input_ids: vec![format.pad as i64; batch * seq],
        token_type_ids: vec![0; batch * seq],
        attention_mask: vec![0; batch * seq],
        mlm_labels: vec![NOT_PREDICTED; batch * seq],
        pair_labels: examples.iter().map(|e| e.label()).collect(),
        tokens: 0,
    };
    for (row, e) in examples.iter().enumerate() {
        let mut ids = vec![format.cls];
        let mut maskable = vec![false];
        let mut word_start = vec![true];
        let mut types = vec![0];
        for (segment, kind) in e.segments() {
            ids.extend(&segment.ids);
            maskable.extend(std::iter::repeat_n(true, segment.ids.len()));
            word_start.extend(&segment.word_start);
            types.extend(std::iter::repeat_n(kind, segment.ids.len()));
            ids.push(format.sep);
            maskable.push(false);
            word_start.push(true);
            types.push(kind);
        }
        let mut rng = StdRng::seed_from_u64(mask_seeds[row]);
        let masked = masking.mask(MaskingInput { ids: &ids, maskable: &maskable, word_start: &word_start }, vocab, &mut rng);
        let base = row * seq;
        for i in 0..ids.len() {
            out.input_ids[base + i] = masked.input_ids[i] as i64;
            out.mlm_labels[base + i] = masked.labels[i];
            out.token_type_ids[base + i] = types[i];
            out.attention_mask[base + i] = 1;
        }
        out.tokens += ids.len();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::masking::TokenMasking;
    use crate::pretraining::Segment;

    #[test]
    fn pairs_are_laid_out_padded_and_labelled() {
        let seg = |ids: &[u32]| Segment { ids: ids.to_vec(), word_start: vec![true; ids.len()] };
        let long = Example::Pair(PairExample { a: seg(&[10, 11, 12]), b: seg(&[13, 14]), is_negative: false });
        let short = Example::Pair(PairExample { a: seg(&[20]), b: seg(&[21]), is_negative: true });
        let format = SequenceFormat { cls: 2, sep: 3, pad: 0 };
        let vocab = MaskVocab { mask_id: 4, vocab_size: 100, special_ids: vec![0, 1, 2, 3, 4] };
        let no_masking = TokenMasking { config: crate::masking::MaskingConfig { probability: 0.0, ..Default::default() } };
        let b = collate(&[&long, &short], format, &no_masking, &vocab, &[1, 2]);
        assert_eq!((b.batch, b.seq, b.tokens), (2, 8, 13));
        assert_eq!(b.input_ids, [2, 10, 11, 12, 3, 13, 14, 3, 2, 20, 3, 21, 3, 0, 0, 0]);
        assert_eq!(b.token_type_ids, [0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0]);
        assert_eq!(b.attention_mask, [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0]);
        assert_eq!(b.pair_labels, [0, 1]);
        assert!(b.mlm_labels.iter().all(|&l| l == NOT_PREDICTED));
        // With masking on, only `a` and `b` tokens are ever chosen, never [CLS], [SEP] or padding.
        let all = TokenMasking { config: crate::masking::MaskingConfig { probability: 1.0, ..Default::default() } };
        let b = collate(&[&long, &short], format, &all, &vocab, &[1, 2]);
        let predicted: Vec<usize> = (0..16).filter(|&i| b.mlm_labels[i] != NOT_PREDICTED).collect();
        assert_eq!(predicted, [1, 2, 3, 5, 6, 9, 11]);

        // A packed sequence: one type, a separator after each document, no sentence label.
        let packed = Example::Packed(PackedExample { segments: vec![seg(&[30, 31]), seg(&[40])] });
        let b = collate(&[&packed, &short], format, &no_masking, &vocab, &[1, 2]);
        assert_eq!(b.input_ids, [2, 30, 31, 3, 40, 3, 2, 20, 3, 21, 3, 0]);
        assert_eq!(b.token_type_ids, [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0]);
        assert_eq!(b.pair_labels, [0, 1]);
    }
}
