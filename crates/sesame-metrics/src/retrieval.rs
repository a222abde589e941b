//! Retrieval and pair metrics as sentence-transformers' evaluators define them:
//!
//! - [`retrieval_scores`]: `InformationRetrievalEvaluator`'s accuracy@k, precision@k,
//!   recall@k, MRR@k, nDCG@k and MAP@k, from each query's scored documents and its relevant
//!   ones (documents ranked by score, ties by ascending id);
//! - [`pair_scores`]: `BinaryClassificationEvaluator`'s best accuracy and best F1 with their
//!   thresholds, average precision (scikit-learn's) and Matthews' correlation at the F1
//!   threshold, from each pair's similarity and 0/1 label.
//!
//! Embedding similarity (`EmbeddingSimilarityEvaluator`) is Pearson's and Spearman's
//! correlation of the cosine with the gold scores: [`crate::regression`].

use std::collections::{BTreeMap, HashSet};

use crate::MetricError;

/// The cut-offs each retrieval metric is reported at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cutoffs {
    /// accuracy@k [default: 1, 3, 5, 10].
    pub accuracy: Vec<usize>,
    /// precision@k and recall@k [default: 1, 3, 5, 10].
    pub precision_recall: Vec<usize>,
    /// MRR@k [default: 10].
    pub mrr: Vec<usize>,
    /// nDCG@k [default: 10].
    pub ndcg: Vec<usize>,
    /// MAP@k [default: 100].
    pub map: Vec<usize>,
}

impl Default for Cutoffs {
    fn default() -> Self {
        Self { accuracy: vec![1, 3, 5, 10], precision_recall: vec![1, 3, 5, 10], mrr: vec![10], ndcg: vec![10], map: vec![100] }
    }
}

/// Each retrieval metric, by cut-off, averaged over the queries.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RetrievalScores {
    /// The share of queries with a relevant document in their top k.
    pub accuracy: BTreeMap<usize, f64>,
    /// Relevant documents in the top k, over k.
    pub precision: BTreeMap<usize, f64>,
    /// Relevant documents in the top k, over the query's relevant documents.
    pub recall: BTreeMap<usize, f64>,
    /// The reciprocal rank of the first relevant document in the top k (0 without one).
    pub mrr: BTreeMap<usize, f64>,
    /// Binary-gain DCG of the top k over the ideal DCG of the relevant documents.
    pub ndcg: BTreeMap<usize, f64>,
    /// The precision at each relevant document's rank in the top k, summed over
    /// `min(k, relevant)`.
    pub map: BTreeMap<usize, f64>,
}

/// One query's documents: each id with its score (cosine similarity: higher is better).
pub type Ranking = Vec<(String, f64)>;

/// The retrieval metrics of `rankings` (one per query, every candidate document with its score)
/// against `relevant` (each query's relevant document ids, one at least), as sentence-transformers'
/// `InformationRetrievalEvaluator.compute_metrics` computes them from the same results.
pub fn retrieval_scores(rankings: &[Ranking], relevant: &[HashSet<String>], cutoffs: &Cutoffs) -> Result<RetrievalScores, MetricError> {
    if rankings.is_empty() {
        return Err(MetricError::Empty { what: "queries" });
    }
    if rankings.len() != relevant.len() {
        return Err(MetricError::LengthMismatch { what: "queries with relevant documents", truth: relevant.len(), predicted: rankings.len() });
    }
    if relevant.iter().any(HashSet::is_empty) {
        return Err(MetricError::Empty { what: "relevant documents of a query" });
    }
    let mut sums = RetrievalScores::default();
    let add = |map: &mut BTreeMap<usize, f64>, k: usize, value: f64| *map.entry(k).or_insert(0.0) += value;
    for (ranking, relevant) in rankings.iter().zip(relevant) {
        if let Some(index) = ranking.iter().position(|(_, score)| !score.is_finite()) {
            return Err(MetricError::NonFinite { what: "document scores", index });
        }
        let mut hits: Vec<&(String, f64)> = ranking.iter().collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let is_relevant: Vec<bool> = hits.iter().map(|(id, _)| relevant.contains(id)).collect();
        let top = |k: usize| &is_relevant[..k.min(is_relevant.len())];
        for &k in &cutoffs.accuracy {
            add(&mut sums.accuracy, k, f64::from(u8::from(top(k).iter().any(|&r| r))));
        }
        for &k in &cutoffs.precision_recall {
            let correct = top(k).iter().filter(|&&r| r).count() as f64;
            add(&mut sums.precision, k, correct / k as f64);
            add(&mut sums.recall, k, correct / relevant.len() as f64);
        }
        for &k in &cutoffs.mrr {
            add(&mut sums.mrr, k, top(k).iter().position(|&r| r).map_or(0.0, |rank| 1.0 / (rank + 1) as f64));
        }
        for &k in &cutoffs.ndcg {
            let dcg = |gains: &[bool]| gains.iter().take(k).enumerate().map(|(i, &g)| f64::from(u8::from(g)) / ((i + 2) as f64).log2()).sum::<f64>();
            add(&mut sums.ndcg, k, dcg(top(k)) / dcg(&vec![true; relevant.len()]));
        }
        for &k in &cutoffs.map {
            let (mut correct, mut precisions) = (0usize, 0.0);
            for (rank, _) in top(k).iter().enumerate().filter(|(_, &r)| r) {
                correct += 1;
                precisions += correct as f64 / (rank + 1) as f64;
            }
            add(&mut sums.map, k, precisions / k.min(relevant.len()) as f64);
        }
    }
    let queries = rankings.len() as f64;
    for map in [&mut sums.accuracy, &mut sums.precision, &mut sums.recall, &mut sums.mrr, &mut sums.ndcg, &mut sums.map] {
        map.values_mut().for_each(|v| *v /= queries);
    }
    Ok(sums)
}

/// `BinaryClassificationEvaluator`'s scores of one similarity.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct PairScores {
    /// The best accuracy of a threshold on the similarity.
    pub accuracy: f64,
    /// That threshold (pairs above it are similar).
    pub accuracy_threshold: f64,
    /// The best F1 of a threshold.
    pub f1: f64,
    /// That threshold.
    pub f1_threshold: f64,
    /// Precision at the F1 threshold.
    pub precision: f64,
    /// Recall at the F1 threshold.
    pub recall: f64,
    /// Average precision (scikit-learn's `average_precision_score`).
    pub ap: f64,
    /// Matthews' correlation of the pairs at or above the F1 threshold.
    pub mcc: f64,
}

/// The scores of `similarities` (higher: more alike) against `labels` (1: a similar pair, 0
/// not), as sentence-transformers' `BinaryClassificationEvaluator` computes them.
pub fn pair_scores(similarities: &[f64], labels: &[bool]) -> Result<PairScores, MetricError> {
    if similarities.is_empty() {
        return Err(MetricError::Empty { what: "pairs" });
    }
    if similarities.len() != labels.len() {
        return Err(MetricError::LengthMismatch { what: "pairs", truth: labels.len(), predicted: similarities.len() });
    }
    if let Some(index) = similarities.iter().position(|s| !s.is_finite()) {
        return Err(MetricError::NonFinite { what: "similarities", index });
    }
    let n = labels.len();
    let mut rows: Vec<(f64, bool)> = similarities.iter().copied().zip(labels.iter().copied()).collect();
    // Most similar first; a stable sort keeps tied pairs in input order, as Python's does.
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    let positives = labels.iter().filter(|&&l| l).count();
    // The end of each group of tied scores, where a threshold can fall.
    let group_ends = (0..n).filter(|&i| i + 1 == n || rows[i].0 != rows[i + 1].0);
    let threshold_after = |i: usize| {
        if i + 1 == n {
            return rows[i].0;
        }
        let mid = (rows[i].0 + rows[i + 1].0) / 2.0;
        if mid == rows[i + 1].0 { rows[i].0 } else { mid }
    };

    // Accuracy: starting from the threshold that calls every pair dissimilar.
    let (mut accuracy, mut accuracy_threshold) = ((n - positives) as f64 / n as f64, next_up(rows[0].0));
    // F1, precision, recall; average precision over the same thresholds.
    let (mut f1, mut precision, mut recall, mut f1_threshold) = (0.0, 0.0, 0.0, 0.0);
    let mut ap = 0.0;
    let mut previous_recall = 0.0;
    for i in group_ends {
        let taken = &rows[..=i];
        let correct = taken.iter().filter(|r| r.1).count();
        let wrong = taken.len() - correct;
        let acc = (correct + (n - positives - wrong)) as f64 / n as f64;
        if acc > accuracy {
            accuracy = acc;
            accuracy_threshold = threshold_after(i);
        }
        if correct > 0 {
            let p = correct as f64 / taken.len() as f64;
            let r = correct as f64 / positives as f64;
            let f = 2.0 * p * r / (p + r);
            if f > f1 {
                (f1, precision, recall, f1_threshold) = (f, p, r, threshold_after(i));
            }
            ap += (r - previous_recall) * p;
            previous_recall = r;
        }
    }
    let predicted: Vec<bool> = similarities.iter().map(|&s| s >= f1_threshold).collect();
    Ok(PairScores { accuracy, accuracy_threshold, f1, f1_threshold, precision, recall, ap: if positives == 0 { 0.0 } else { ap }, mcc: matthews(labels, &predicted) })
}

/// The smallest f64 above `x` (NumPy's `nextafter(x, inf)`).
fn next_up(x: f64) -> f64 {
    let bits = x.to_bits();
    f64::from_bits(match x {
        _ if x == 0.0 => 1,
        _ if x > 0.0 => bits + 1,
        _ => bits - 1,
    })
}

/// Matthews' correlation of two labellings (scikit-learn's; 0 when undefined).
fn matthews(truth: &[bool], predicted: &[bool]) -> f64 {
    let count = |t: bool, p: bool| truth.iter().zip(predicted).filter(|(&a, &b)| a == t && b == p).count() as f64;
    let (tp, tn, fp, f_n) = (count(true, true), count(false, false), count(false, true), count(true, false));
    let denominator = ((tp + fp) * (tp + f_n) * (tn + fp) * (tn + f_n)).sqrt();
    if denominator == 0.0 {
        0.0
    } else {
        (tp * tn - fp * f_n) / denominator
    }
}
