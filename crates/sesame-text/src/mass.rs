//! MASS's corruption (Song et al. 2019, "MASS: Masked Sequence to Sequence Pre-training for
//! Language Generation"; microsoft/MASS): one contiguous fragment of a block, about half of
//! it (the paper's k = 50%), is masked in the encoder's input, and the decoder predicts that
//! fragment alone:
//!
//! - the fragment's tokens in the source become the mask token (80%), a random token (10%) or
//!   stay (10%), one draw per token (`mask_word` in MASS-unsupNMT);
//! - the decoder's input is the block's length: the fragment shifted right (position `p` of
//!   the fragment reads token `p − 1`) at its true positions, every other position the mask
//!   token, so the decoder learns from the encoder what the source hides;
//! - the loss covers the fragment's tokens only.
//!
//! A fragment of one token is BERT's masked LM; the whole block is a language model. The
//! fragment starts at the block's first token 20% of the time, ends at its last 20%, and is
//! anywhere in between 60% (`shuffle_segments` in MASS-unsupNMT). Unlike the authors' code,
//! which feeds the decoder the fragment alone with explicit positions, the decoder here reads
//! the whole block with the positions outside the fragment masked (the paper's figure 1), so
//! that any encoder-decoder model with its own position embeddings runs it unchanged.

use std::ops::Range;

use rand::rngs::StdRng;
use rand::Rng;

use crate::noising::NoiseVocab;

/// MASS's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MassConfig {
    /// The fragment's share of the block's tokens (`<s>` and `</s>` excluded; the paper's 0.5).
    pub fraction: f64,
    /// Of the fragment's tokens in the source: the share replaced by the mask token (0.8) ...
    pub mask: f64,
    /// ... and by a random token (0.1); the rest stay.
    pub random: f64,
}

impl Default for MassConfig {
    fn default() -> Self {
        Self { fraction: 0.5, mask: 0.8, random: 0.1 }
    }
}

impl MassConfig {
    /// Check the shares.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.fraction > 0.0 && self.fraction <= 1.0) {
            return Err(format!("the fragment's share {} is not in (0, 1]", self.fraction));
        }
        if !(self.mask >= 0.0 && self.random >= 0.0 && self.mask + self.random <= 1.0) {
            return Err(format!("mask {} and random {} are not shares that add up to at most 1", self.mask, self.random));
        }
        Ok(())
    }
}

/// What becomes of one of the fragment's tokens in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// The mask token.
    Mask,
    /// This random token.
    Random(u32),
    /// The token itself.
    Keep,
}

/// A block corrupted by MASS.
#[derive(Clone, Debug, PartialEq)]
pub struct Mass {
    /// The encoder's input: the block with the fragment filled (`<s> … </s>`).
    pub source: Vec<u32>,
    /// The decoder's input, as long as the block: the fragment shifted right at its positions,
    /// the mask token elsewhere.
    pub decoder_input: Vec<u32>,
    /// The fragment's positions in the block: the tokens predicted.
    pub fragment: Range<usize>,
}

impl Mass {
    /// Whether the source shows block token `i` unchanged (outside the fragment, or a kept
    /// token of it).
    pub fn shown(&self, block: &[u32], i: usize) -> bool {
        self.source.get(i) == block.get(i)
    }
}

/// Corrupt `block` (`<s> … </s>`, at least one token between them) by MASS with a fragment
/// drawn from `rng`.
pub fn mass(block: &[u32], config: &MassConfig, vocab: &NoiseVocab, rng: &mut StdRng) -> Mass {
    let inner = block.len().saturating_sub(2).max(1);
    let k = ((inner as f64 * config.fraction).round() as usize).clamp(1, inner);
    // The first possible start is 1 (after `<s>`), the last `inner − k + 1`.
    let last = inner - k + 1;
    let p: f64 = rng.random();
    let start = if p >= 0.8 {
        1
    } else if p >= 0.6 {
        last
    } else {
        rng.random_range(1..=last)
    };
    let fills: Vec<Fill> = (0..k)
        .map(|_| {
            let r: f64 = rng.random();
            if r < config.mask {
                Fill::Mask
            } else if r < config.mask + config.random {
                Fill::Random(rng.random_range(1..vocab.vocab_size.max(2)))
            } else {
                Fill::Keep
            }
        })
        .collect();
    mass_at(block, start, &fills, vocab.mask_id)
}

/// Corrupt `block` with the fragment starting at `start` and filled by `fills` (one per token
/// of the fragment).
pub fn mass_at(block: &[u32], start: usize, fills: &[Fill], mask_id: u32) -> Mass {
    let fragment = start..(start + fills.len()).min(block.len());
    let mut source = block.to_vec();
    let mut decoder_input = vec![mask_id; block.len()];
    for (p, fill) in fragment.clone().zip(fills) {
        source[p] = match *fill {
            Fill::Mask => mask_id,
            Fill::Random(t) => t,
            Fill::Keep => block[p],
        };
        decoder_input[p] = block[p.saturating_sub(1)];
    }
    Mass { source, decoder_input, fragment }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const MASK: u32 = 4;

    fn vocab() -> NoiseVocab {
        NoiseVocab { mask_id: MASK, full_stop_id: 2, vocab_size: 100 }
    }

    /// `<s> 10 11 … </s>` with `n` tokens between.
    fn block(n: u32) -> Vec<u32> {
        std::iter::once(0).chain(10..10 + n).chain(std::iter::once(2)).collect()
    }

    #[test]
    fn one_fragment_of_half_the_block_is_masked_and_the_decoder_reads_it_shifted_right() {
        let b = block(10);
        let m = mass_at(&b, 3, &[Fill::Mask, Fill::Random(77), Fill::Keep, Fill::Mask, Fill::Mask], MASK);
        assert_eq!(m.fragment, 3..8);
        assert_eq!(m.source, [0, 10, 11, MASK, 77, 14, MASK, MASK, 17, 18, 19, 2]);
        // Position p of the fragment reads token p − 1; the rest is masked.
        assert_eq!(m.decoder_input, [MASK, MASK, MASK, 11, 12, 13, 14, 15, MASK, MASK, MASK, MASK]);
        assert!(m.shown(&b, 5) && !m.shown(&b, 4) && m.shown(&b, 9));

        let mut rng = StdRng::seed_from_u64(1);
        let (mut at_start, mut at_end, mut fills) = (0, 0, [0usize; 3]);
        let n = 4000;
        for _ in 0..n {
            let m = mass(&b, &MassConfig::default(), &vocab(), &mut rng);
            assert_eq!(m.fragment.len(), 5, "the paper's k: half of the 10 tokens");
            assert!(m.fragment.start >= 1 && m.fragment.end <= 11, "{:?} covers <s> or </s>", m.fragment);
            assert_eq!((m.source[0], m.source[11]), (0, 2));
            at_start += usize::from(m.fragment.start == 1);
            at_end += usize::from(m.fragment.end == 11);
            for p in m.fragment.clone() {
                match m.source[p] {
                    MASK => fills[0] += 1,
                    t if t == b[p] => fills[2] += 1,
                    _ => fills[1] += 1,
                }
            }
            for p in (0..b.len()).filter(|p| !m.fragment.contains(p)) {
                assert_eq!((m.source[p], m.decoder_input[p]), (b[p], MASK));
            }
        }
        // 20% at the start and 20% at the end, plus their share of the 60% drawn uniformly
        // over the 6 starts.
        let expected = 0.2 + 0.6 / 6.0;
        for (name, count) in [("start", at_start), ("end", at_end)] {
            let share = count as f64 / n as f64;
            assert!((share - expected).abs() < 0.03, "fragments at the {name}: {share:.3}, expected {expected:.3}");
        }
        let total = fills.iter().sum::<usize>() as f64;
        for (share, expected) in fills.iter().map(|&c| c as f64 / total).zip([0.8, 0.1, 0.1]) {
            assert!((share - expected).abs() < 0.02, "fills {fills:?}");
        }
    }

    #[test]
    fn a_fragment_of_one_token_is_masked_lm_and_of_the_whole_block_a_language_model() {
        let b = block(6);
        let mut rng = StdRng::seed_from_u64(2);
        let one = mass(&b, &MassConfig { fraction: 0.1, ..MassConfig::default() }, &vocab(), &mut rng);
        assert_eq!(one.fragment.len(), 1);
        let all = mass(&b, &MassConfig { fraction: 1.0, mask: 1.0, random: 0.0 }, &vocab(), &mut rng);
        assert_eq!(all.fragment, 1..7);
        assert_eq!(all.decoder_input[1..7], b[0..6], "the decoder reads the block shifted right");
        assert!(MassConfig { fraction: 0.0, ..MassConfig::default() }.validate().is_err());
        assert!(MassConfig { mask: 0.95, random: 0.1, ..MassConfig::default() }.validate().is_err());
    }
}
