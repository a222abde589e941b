//! Pre-training examples built from tokenized documents: BERT's sentence pairs with random
//! next sentences (NSP, Google's `create_pretraining_data.py`), ALBERT's pairs with swapped
//! order (SOP), and RoBERTa's single sequences packed with full sentences (FULL-SENTENCES,
//! DOC-SENTENCES).

use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::{Corpus, Tokenizer, TokenizerError};

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

    /// Move the words after a random word boundary into `rest` (nothing if one word).
    fn split_at_word(&mut self, rest: &mut Segment, rng: &mut StdRng) {
        let starts: Vec<usize> = (1..self.len()).filter(|&i| self.word_start[i]).collect();
        if starts.is_empty() {
            return;
        }
        let at = starts[rng.random_range(0..starts.len())];
        rest.ids = self.ids.split_off(at);
        rest.word_start = self.word_start.split_off(at);
    }
}

/// How RoBERTa fills its single-sequence inputs (paper, section 4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    /// Full sentences sampled contiguously, crossing document boundaries with an extra
    /// separator between documents (RoBERTa's choice).
    FullSentences,
    /// The same, but never crossing a document boundary: sequences near a document's end are
    /// shorter.
    DocSentences,
}

/// A single packed sequence `<s> doc1 </s> doc2 </s>` before masking: one segment per
/// document it draws from.
#[derive(Clone, Debug, PartialEq)]
pub struct PackedExample {
    /// The text of each document in the sequence, in order.
    pub segments: Vec<Segment>,
}

impl PackedExample {
    /// Tokens, special tokens included.
    pub fn len(&self) -> usize {
        1 + self.segments.iter().map(|s| s.len() + 1).sum::<usize>()
    }

    /// Whether it holds no text.
    pub fn is_empty(&self) -> bool {
        self.segments.iter().all(|s| s.ids.is_empty())
    }
}

/// Pack `documents` into sequences of at most `max_seq_len` tokens (start, separators
/// included), sentence by sentence in corpus order. A sentence longer than a whole sequence is
/// cut into pieces that fit.
pub fn pack_sentences(documents: &[Vec<Segment>], max_seq_len: usize, packing: Packing) -> Vec<PackedExample> {
    let piece = max_seq_len.saturating_sub(2).max(1);
    let mut out = Vec::new();
    let mut current = PackedExample { segments: Vec::new() };
    for document in documents {
        if packing == Packing::DocSentences && !current.is_empty() {
            out.push(std::mem::replace(&mut current, PackedExample { segments: Vec::new() }));
        }
        let mut new_document = true;
        for sentence in document {
            for chunk in sentence.ids.chunks(piece).zip(sentence.word_start.chunks(piece)) {
                let mut chunk = Segment { ids: chunk.0.to_vec(), word_start: chunk.1.to_vec() };
                chunk.word_start[0] = true;
                let cost = chunk.len() + usize::from(new_document || current.segments.is_empty());
                if current.len() + cost > max_seq_len && !current.is_empty() {
                    out.push(std::mem::replace(&mut current, PackedExample { segments: Vec::new() }));
                }
                if new_document || current.segments.is_empty() {
                    current.segments.push(Segment::default());
                    new_document = false;
                }
                current.segments.last_mut().expect("a segment").extend(&chunk);
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// A sentence pair `[CLS] a [SEP] b [SEP]` before masking.
#[derive(Clone, Debug, PartialEq)]
pub struct PairExample {
    /// Segment A.
    pub a: Segment,
    /// Segment B.
    pub b: Segment,
    /// Label 1 of the sentence task: B is a random sentence from another document (NSP), or
    /// A and B are two consecutive segments in swapped order (SOP).
    pub is_negative: bool,
}

/// The sentence-level task of a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SentenceTask {
    /// BERT: is B the text that follows A, or a random sentence from another document?
    NextSentence,
    /// ALBERT: are A and B, two consecutive segments of one document, in order or swapped?
    SentenceOrder,
}

/// How sentence pairs are built.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairConfig {
    /// Maximum length including `[CLS]` and two `[SEP]`.
    pub max_seq_len: usize,
    /// Probability of a shorter target length (BERT: 0.1).
    pub short_seq_prob: f64,
    /// Probability of a negative pair (BERT and ALBERT: 0.5).
    pub negative_prob: f64,
    /// NSP or SOP.
    pub task: SentenceTask,
    /// How many times the training text is paired, each time with other splits, lengths and
    /// negatives (Google's `dupe_factor`: 10). Built once, a pairing is seen every epoch, and a
    /// small model learns its negatives by heart.
    pub dupe_factor: usize,
}

impl Default for PairConfig {
    fn default() -> Self {
        Self { max_seq_len: 128, short_seq_prob: 0.1, negative_prob: 0.5, task: SentenceTask::NextSentence, dupe_factor: 10 }
    }
}

/// Build sentence pairs from `documents` (each a list of tokenized sentences), as BERT and
/// ALBERT do: fill a chunk up to a target length (sometimes shorter), split it at a random
/// sentence boundary into A and B, and truncate the pair to fit, removing tokens at random
/// from the front or back of the longer segment. With `negative_prob`, NSP replaces B by text
/// from another document and SOP swaps A and B.
///
/// A chunk of one sentence is split at a random word into A and B, for both tasks. The
/// scripts give it a random next sentence instead: for SOP that would mix NSP in (ALBERT's
/// script), and for NSP (BERT's) it makes every such chunk a negative. At their 128 and 512
/// tokens few chunks are one sentence; at 16 nearly all are, the labels would be about 90%
/// negative, and the `[CLS]` would learn a constant.
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
                // One sentence: B continues A within it (see above).
                if chunk.len() == 1 {
                    a.split_at_word(&mut b, rng);
                }
                let other_docs = documents.len() > 1;
                let nsp = config.task == SentenceTask::NextSentence;
                let has_next = chunk.len() >= 2 || b.len() > 0;
                let random_next = nsp && other_docs && (!has_next || rng.random::<f64>() < config.negative_prob);
                let mut swapped = false;
                if random_next {
                    b = Segment::default();
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
                    if !nsp && rng.random::<f64>() < config.negative_prob {
                        std::mem::swap(&mut a, &mut b);
                        swapped = true;
                    }
                }
                truncate_pair(&mut a, &mut b, max_tokens, rng);
                if a.len() > 0 && b.len() > 0 {
                    out.push(PairExample { a, b, is_negative: random_next || swapped });
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
        docs_of_lengths(3)
    }

    /// 8 documents of 12 sentences, `shortest` to `shortest + 8` tokens long; document d,
    /// sentence s holds ids 10000*d + 100*s + k.
    fn docs_of_lengths(shortest: usize) -> Vec<Vec<Segment>> {
        (0..8)
            .map(|d| {
                (0..12)
                    .map(|s| {
                        let n = shortest + (d + s) % 9;
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
            if p.is_negative {
                assert_ne!(doc(&p.a), doc(&p.b), "a random next sentence comes from another document");
            } else {
                assert_eq!(doc(&p.a), doc(&p.b));
                assert!(p.a.ids.last() < p.b.ids.first(), "B continues A");
            }
        }
        let random = all.iter().filter(|p| p.is_negative).count() as f64 / all.len() as f64;
        assert!((0.4..0.6).contains(&random), "random-next fraction {random}");
        let short = all.iter().filter(|p| p.a.len() + p.b.len() < 20).count();
        assert!(short > 0, "short-sequence sampling produces some short pairs");
    }

    #[test]
    fn short_pairs_of_long_sentences_are_half_next_sentences_from_within_the_sentence() {
        // Sentences of 14 to 22 tokens against a 13-token target: every chunk is one sentence,
        // which BERT's script would make a random next sentence every time.
        let docs = docs_of_lengths(14);
        let mut rng = StdRng::seed_from_u64(7);
        let config = PairConfig { max_seq_len: 16, ..Default::default() };
        let all: Vec<PairExample> = (0..20).flat_map(|_| sentence_pairs(&docs, config, &mut rng)).collect();
        assert!(all.len() > 500);
        let sentence = |id: u32| id / 100;
        let mut within = 0;
        for p in all.iter().filter(|p| !p.is_negative) {
            assert!(p.a.len() + p.b.len() <= 13, "too long");
            assert!(p.a.ids.last() < p.b.ids.first(), "B continues A: {p:?}");
            within += (sentence(p.a.ids[0]) == sentence(p.b.ids[0])) as usize;
        }
        let random = all.iter().filter(|p| p.is_negative).count() as f64 / all.len() as f64;
        assert!((0.4..0.6).contains(&random), "random-next fraction {random}");
        assert_eq!(within, all.iter().filter(|p| !p.is_negative).count(), "every next sentence continues A's own sentence");
    }

    #[test]
    fn sentence_order_pairs_are_consecutive_and_half_swapped() {
        let mut rng = StdRng::seed_from_u64(5);
        let config = PairConfig { max_seq_len: 32, task: SentenceTask::SentenceOrder, ..Default::default() };
        let all: Vec<PairExample> = (0..20).flat_map(|_| sentence_pairs(&docs(), config, &mut rng)).collect();
        assert!(all.len() > 200);
        for p in &all {
            assert!(p.a.len() + p.b.len() <= 29 && !p.a.ids.is_empty() && !p.b.ids.is_empty());
            let doc = |s: &Segment| s.ids[0] / 10000;
            assert_eq!(doc(&p.a), doc(&p.b), "both segments come from one document");
            let (first, second) = if p.is_negative { (&p.b, &p.a) } else { (&p.a, &p.b) };
            assert!(first.ids.last() < second.ids.first(), "the original order is A then B: {p:?}");
        }
        let swapped = all.iter().filter(|p| p.is_negative).count() as f64 / all.len() as f64;
        assert!((0.4..0.6).contains(&swapped), "swapped fraction {swapped}");
    }

    #[test]
    fn packed_sequences_are_full_and_keep_corpus_order() {
        let docs = docs();
        let all_ids: Vec<u32> = docs.iter().flatten().flat_map(|s| s.ids.clone()).collect();
        for packing in [Packing::FullSentences, Packing::DocSentences] {
            let packed = pack_sentences(&docs, 40, packing);
            let ids: Vec<u32> = packed.iter().flat_map(|p| p.segments.iter().flat_map(|s| s.ids.clone())).collect();
            assert_eq!(ids, all_ids, "{packing:?}: every token once, in order");
            for (i, p) in packed.iter().enumerate() {
                assert!(p.len() <= 40, "{packing:?}: {} tokens", p.len());
                let docs_in: Vec<u32> = p.segments.iter().map(|s| s.ids[0] / 10000).collect();
                assert!(p.segments.iter().all(|s| s.ids.iter().all(|&id| id / 10000 == s.ids[0] / 10000)), "one document per segment");
                match packing {
                    Packing::DocSentences => assert_eq!(docs_in.len(), 1, "never crosses a document"),
                    // Full: the next sentence did not fit (sentences here are at most 11 tokens).
                    Packing::FullSentences if i + 1 < packed.len() => assert!(p.len() > 40 - 13, "sequence {i} is only {} long", p.len()),
                    Packing::FullSentences => {}
                }
            }
            if packing == Packing::FullSentences {
                assert!(packed.iter().any(|p| p.segments.len() > 1), "sequences cross document boundaries");
            }
        }
        // A sentence longer than a sequence is cut into pieces.
        let long = vec![vec![Segment { ids: (0..25).collect(), word_start: vec![false; 25] }]];
        let packed = pack_sentences(&long, 10, Packing::FullSentences);
        assert_eq!(packed.iter().map(PackedExample::len).collect::<Vec<_>>(), [10, 10, 10, 3]);
        assert!(packed.iter().all(|p| p.segments[0].word_start[0]));
    }
}

/// Every document of `corpus` as tokenized sentences (empty ones dropped).
pub fn tokenize_documents(corpus: &Corpus, tokenizer: &Tokenizer) -> Result<Vec<Vec<Segment>>, TokenizerError> {
    corpus
        .documents
        .iter()
        .map(|doc| doc.iter().map(|s| tokenizer.tokenize(s)).filter(|s| !matches!(s, Ok(seg) if seg.ids.is_empty())).collect())
        .collect()
}

/// -ln p(token) for every id below `vocab_size`, p being the token's frequency in
/// `documents` with add-one smoothing (so that a token never seen in training costs
/// ln(N + V), not infinity): the loss of a predictor that ignores the context, the baseline a
/// pre-training run must get below.
pub fn unigram_nll(documents: &[Vec<Segment>], vocab_size: usize) -> Vec<f64> {
    let mut counts = vec![1.0f64; vocab_size];
    for id in documents.iter().flatten().flat_map(|s| s.ids.iter()) {
        if let Some(c) = counts.get_mut(*id as usize) {
            *c += 1.0;
        }
    }
    let total: f64 = counts.iter().sum();
    counts.iter().map(|c| (total / c).ln()).collect()
}

/// A stream of epochs over `len` examples, each epoch in its own seeded shuffle, cut into
/// batches that may span two epochs: batch `i` is a pure function of `i` and the seed, so a
/// resumed run sees the same data. The order of the epoch last asked for is kept.
#[derive(Clone, Debug)]
pub struct EpochStream {
    len: usize,
    seed: u64,
    cached: Arc<Mutex<Option<(u64, Arc<Vec<usize>>)>>>,
}

impl EpochStream {
    /// Epochs over `len` examples shuffled from `seed`.
    pub fn new(len: usize, seed: u64) -> Self {
        Self { len, seed, cached: Default::default() }
    }

    /// The order of the examples in `epoch`.
    pub fn order(&self, epoch: u64) -> Arc<Vec<usize>> {
        let mut cached = self.cached.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match cached.as_ref() {
            Some((e, order)) if *e == epoch => order.clone(),
            _ => {
                let mut rng = StdRng::seed_from_u64(self.seed ^ (epoch.wrapping_add(1)).wrapping_mul(0xA24B_AED4_963E_E407));
                let mut order: Vec<usize> = (0..self.len).collect();
                order.shuffle(&mut rng);
                let order = Arc::new(order);
                *cached = Some((epoch, order.clone()));
                order
            }
        }
    }

    /// The examples of batch `index` of `batch_size` rows, each with its epoch.
    pub fn batch(&self, index: u64, batch_size: usize) -> Vec<(usize, u64)> {
        let n = self.len.max(1) as u64;
        let first = index * batch_size as u64;
        let mut order = (first / n, self.order(first / n));
        let mut rows = Vec::with_capacity(batch_size);
        for k in first..first + batch_size as u64 {
            if k / n != order.0 {
                order = (k / n, self.order(k / n));
            }
            rows.push((order.1[(k % n) as usize], order.0));
        }
        rows
    }
}

/// A 64-bit mix of two values (SplitMix64's finaliser), for independent per-batch and per-row
/// seeds.
pub fn mix_seeds(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_add(0x9E37_79B9_7F4A_7C15).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
