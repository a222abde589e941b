//! Pre-training examples: BERT's sentence pairs (with random next sentences for NSP) built
//! from tokenized documents, following Google's `create_pretraining_data.py`.

use rand::rngs::StdRng;
use rand::Rng;

/// A tokenized sentence: ids and, per token, whether it starts a word.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Segment {
    /// Token ids (no special tokens).
    pub ids: Vec<u32>,
    /// `true` where a token starts a word.
    pub word_start: Vec<bool>,
}

impl Segment {
    fn extend(&mut self, other: &Segment) {
        self.ids.extend_from_slice(&other.ids);
        self.word_start.extend_from_slice(&other.word_start);
    }

    fn len(&self) -> usize {
        self.ids.len()
    }

    fn pop_front(&mut self) {
        self.ids.remove(0);
        self.word_start.remove(0);
        if let Some(first) = self.word_start.first_mut() {
            *first = true;
        }
    }

    fn pop_back(&mut self) {
        self.ids.pop();
        self.word_start.pop();
    }
}

/// A sentence pair `[CLS] a [SEP] b [SEP]` before masking.
#[derive(Clone, Debug, PartialEq)]
pub struct PairExample {
    /// Segment A.
    pub a: Segment,
    /// Segment B.
    pub b: Segment,
    /// Whether B was drawn from another document (NSP label 1).
    pub is_random_next: bool,
}

/// How sentence pairs are built.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairConfig {
    /// Maximum length including `[CLS]` and two `[SEP]`.
    pub max_seq_len: usize,
    /// Probability of a shorter target length (BERT: 0.1).
    pub short_seq_prob: f64,
    /// Probability that B is a random next sentence (BERT: 0.5).
    pub random_next_prob: f64,
}

impl Default for PairConfig {
    fn default() -> Self {
        Self { max_seq_len: 128, short_seq_prob: 0.1, random_next_prob: 0.5 }
    }
}

/// Build sentence pairs from `documents` (each a list of tokenized sentences), as BERT does:
/// fill a chunk up to a target length (sometimes shorter), split it at a random sentence
/// boundary into A and B, replace B by text from another document with `random_next_prob`,
/// and truncate the pair to fit, removing tokens at random from the front or back of the
/// longer segment.
pub fn sentence_pairs(documents: &[Vec<Segment>], config: PairConfig, rng: &mut StdRng) -> Vec<PairExample> {
    let max_tokens = config.max_seq_len.saturating_sub(3).max(2);
    let mut out = Vec::new();
    for (doc_index, document) in documents.iter().enumerate() {
        let target = if rng.random::<f64>() < config.short_seq_prob { rng.random_range(2..=max_tokens) } else { max_tokens };
        let mut chunk: Vec<&Segment> = Vec::new();
        let mut length = 0;
        let mut i = 0;
        while i < document.len() {
            chunk.push(&document[i]);
            length += document[i].len();
            if i == document.len() - 1 || length >= target {
                let a_end = if chunk.len() >= 2 { rng.random_range(1..chunk.len()) } else { 1 };
                let mut a = Segment::default();
                chunk[..a_end].iter().for_each(|s| a.extend(s));
                let mut b = Segment::default();
                let other_docs = documents.len() > 1;
                let random_next = other_docs && (chunk.len() == 1 || rng.random::<f64>() < config.random_next_prob);
                if random_next {
                    let target_b = target.saturating_sub(a.len()).max(1);
                    let mut other = rng.random_range(0..documents.len());
                    for _ in 0..10 {
                        if other != doc_index {
                            break;
                        }
                        other = rng.random_range(0..documents.len());
                    }
                    let other_doc = &documents[other];
                    if !other_doc.is_empty() {
                        let start = rng.random_range(0..other_doc.len());
                        for s in &other_doc[start..] {
                            b.extend(s);
                            if b.len() >= target_b {
                                break;
                            }
                        }
                    }
                    // Put the unused sentences of this chunk back.
                    i -= chunk.len() - a_end;
                } else {
                    chunk[a_end..].iter().for_each(|s| b.extend(s));
                }
                truncate_pair(&mut a, &mut b, max_tokens, rng);
                if a.len() > 0 && b.len() > 0 {
                    out.push(PairExample { a, b, is_random_next: random_next });
                }
                chunk.clear();
                length = 0;
            }
            i += 1;
        }
    }
    out
}

fn truncate_pair(a: &mut Segment, b: &mut Segment, max_tokens: usize, rng: &mut StdRng) {
    while a.len() + b.len() > max_tokens {
        let longer = if a.len() > b.len() { &mut *a } else { &mut *b };
        if rng.random::<bool>() {
            longer.pop_front();
        } else {
            longer.pop_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn docs() -> Vec<Vec<Segment>> {
        // Document d, sentence s holds ids 10000*d + 100*s + k.
        (0..8)
            .map(|d| {
                (0..12)
                    .map(|s| {
                        let n = 3 + (d + s) % 9;
                        Segment { ids: (0..n).map(|k| (10000 * d + 100 * s + k) as u32).collect(), word_start: vec![true; n] }
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn pairs_fit_and_half_are_random_next_sentences() {
        let mut rng = StdRng::seed_from_u64(3);
        let config = PairConfig { max_seq_len: 32, ..Default::default() };
        let mut all = Vec::new();
        for _ in 0..20 {
            all.extend(sentence_pairs(&docs(), config, &mut rng));
        }
        assert!(all.len() > 200);
        for p in &all {
            assert!(p.a.len() + p.b.len() <= 29, "too long");
            assert!(!p.a.ids.is_empty() && !p.b.ids.is_empty());
            let doc = |s: &Segment| s.ids[0] / 10000;
            if p.is_random_next {
                assert_ne!(doc(&p.a), doc(&p.b), "a random next sentence comes from another document");
            } else {
                assert_eq!(doc(&p.a), doc(&p.b));
                assert!(p.a.ids.last() < p.b.ids.first(), "B continues A");
            }
        }
        let random = all.iter().filter(|p| p.is_random_next).count() as f64 / all.len() as f64;
        assert!((0.4..0.6).contains(&random), "random-next fraction {random}");
        let short = all.iter().filter(|p| p.a.len() + p.b.len() < 20).count();
        assert!(short > 0, "short-sequence sampling produces some short pairs");
    }
}
