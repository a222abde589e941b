//! The metrics of fine-tuned models, each exactly as the implementation the field reports it
//! with defines it (tests compare them on fixed predictions):
//!
//! - [`classification`]: accuracy, precision / recall / F1 per class and averaged (micro, macro,
//!   weighted), Matthews' correlation, the confusion matrix; multi-label scores
//!   (scikit-learn);
//! - [`regression`]: Pearson's and Spearman's correlations, mean squared and absolute error
//!   (SciPy, scikit-learn);
//! - [`tagging`]: entity-level precision / recall / F1 by type (seqeval: its default,
//!   conlleval-like chunking, and its strict mode for IOB2 and IOBES);
//! - [`squad`]: exact match and F1 of extracted answers with the official SQuAD script's answer
//!   normalisation, unanswerable questions as SQuAD 2.0 scores them;
//! - [`retrieval`]: sentence-transformers' retrieval metrics (accuracy, precision, recall, MRR,
//!   nDCG and MAP at k) and its pair-classification scores (best accuracy and F1 with their
//!   thresholds, average precision, Matthews' correlation).
//!
//! Undefined ratios (a class never predicted, …) are 0, as scikit-learn's and seqeval's
//! `zero_division` default makes them; no function returns a non-finite number for finite
//! input, and empty input is an error.

pub mod classification;
pub mod regression;
pub mod retrieval;
pub mod squad;
pub mod tagging;

/// Input a metric cannot be computed on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetricError {
    /// Nothing to score.
    #[error("no {what} to score")]
    Empty {
        /// What was empty.
        what: &'static str,
    },
    /// Two inputs that must pair up do not.
    #[error("{what}: {truth} true values against {predicted} predictions")]
    LengthMismatch {
        /// What differs.
        what: &'static str,
        /// Length of the truth.
        truth: usize,
        /// Length of the predictions.
        predicted: usize,
    },
    /// A label outside `0..num_labels`.
    #[error("label {label} is not below the {num_labels} labels")]
    LabelOutOfRange {
        /// The label.
        label: usize,
        /// How many labels there are.
        num_labels: usize,
    },
    /// A tag the tagging scheme does not allow.
    #[error("tag {tag:?} is not allowed by the {scheme} scheme ({allowed})")]
    InvalidTag {
        /// The tag.
        tag: String,
        /// The scheme.
        scheme: &'static str,
        /// The prefixes it allows.
        allowed: &'static str,
    },
    /// A non-finite value.
    #[error("{what} holds a non-finite value at {index}")]
    NonFinite {
        /// Which input.
        what: &'static str,
        /// Where.
        index: usize,
    },
}

/// Precision, recall, F1 and how many true instances they count.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Scores {
    /// True positives over predicted positives (0 when nothing is predicted).
    pub precision: f64,
    /// True positives over actual positives (0 when there are none).
    pub recall: f64,
    /// Harmonic mean of precision and recall (0 when both are 0).
    pub f1: f64,
    /// Actual positives.
    pub support: u64,
}

impl Scores {
    /// The scores of `tp` true positives among `predicted` predictions and `actual` true
    /// instances, as scikit-learn's `precision_recall_fscore_support` computes them (F1 as
    /// `2tp / (actual + predicted)`).
    pub fn from_counts(tp: u64, predicted: u64, actual: u64) -> Self {
        Self { precision: ratio(tp, predicted), recall: ratio(tp, actual), f1: ratio(2 * tp, actual + predicted), support: actual }
    }

    /// The same as seqeval computes them (F1 as `2pr / (p + r)`).
    pub fn from_counts_seqeval(tp: u64, predicted: u64, actual: u64) -> Self {
        let (precision, recall) = (ratio(tp, predicted), ratio(tp, actual));
        let denominator = precision + recall;
        let f1 = if denominator == 0.0 { 0.0 } else { 2.0 * precision * recall / denominator };
        Self { precision, recall, f1, support: actual }
    }
}

/// How per-class scores are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Average {
    /// From the counts summed over classes.
    Micro,
    /// The unweighted mean of the classes' scores.
    Macro,
    /// The mean weighted by each class's support.
    Weighted,
}

/// `a / b`, 0 when `b` is 0 (`zero_division=0`).
pub(crate) fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Per-class counts `(tp, predicted, actual)` combined by `average`, each class scored by
/// `score`.
pub(crate) fn average(counts: &[(u64, u64, u64)], average: Average, score: fn(u64, u64, u64) -> Scores) -> Scores {
    let support = counts.iter().map(|c| c.2).sum::<u64>();
    match average {
        Average::Micro => {
            let sum = |f: fn(&(u64, u64, u64)) -> u64| counts.iter().map(f).sum::<u64>();
            score(sum(|c| c.0), sum(|c| c.1), support)
        }
        Average::Macro | Average::Weighted => {
            let per: Vec<Scores> = counts.iter().map(|&(tp, p, a)| score(tp, p, a)).collect();
            let weights: Vec<f64> = match average {
                Average::Weighted => counts.iter().map(|c| c.2 as f64).collect(),
                _ => vec![1.0; counts.len()],
            };
            let total: f64 = weights.iter().sum();
            if total == 0.0 {
                return Scores { precision: 0.0, recall: 0.0, f1: 0.0, support };
            }
            let mean = |f: fn(&Scores) -> f64| per.iter().zip(&weights).map(|(s, w)| f(s) * w).sum::<f64>() / total;
            Scores { precision: mean(|s| s.precision), recall: mean(|s| s.recall), f1: mean(|s| s.f1), support }
        }
    }
}
