//! Single-label and multi-label classification metrics, as scikit-learn computes them with its
//! defaults: averages over the labels that occur in the truth or the predictions, 0 for an
//! undefined ratio.

use crate::{average, Average, MetricError, Scores};

/// Counts of (true label, predicted label) pairs over `num_labels` labels.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ConfusionMatrix {
    num_labels: usize,
    /// `counts[t · num_labels + p]`: rows with label `t` predicted `p`.
    counts: Vec<u64>,
}

impl ConfusionMatrix {
    /// The matrix of `predicted` against `truth` (labels `0..num_labels`).
    pub fn new(num_labels: usize, truth: &[usize], predicted: &[usize]) -> Result<Self, MetricError> {
        if truth.len() != predicted.len() {
            return Err(MetricError::LengthMismatch { what: "labels", truth: truth.len(), predicted: predicted.len() });
        }
        if truth.is_empty() {
            return Err(MetricError::Empty { what: "labels" });
        }
        let mut counts = vec![0; num_labels * num_labels];
        for (&t, &p) in truth.iter().zip(predicted) {
            let label = t.max(p);
            if label >= num_labels {
                return Err(MetricError::LabelOutOfRange { label, num_labels });
            }
            counts[t * num_labels + p] += 1;
        }
        Ok(Self { num_labels, counts })
    }

    /// How many labels the matrix spans.
    pub fn num_labels(&self) -> usize {
        self.num_labels
    }

    /// Rows with label `truth` predicted `predicted`.
    pub fn count(&self, truth: usize, predicted: usize) -> u64 {
        self.counts[truth * self.num_labels + predicted]
    }

    /// The matrix as rows (true labels) of columns (predicted labels), as scikit-learn's
    /// `confusion_matrix` lays it out.
    pub fn rows(&self) -> Vec<Vec<u64>> {
        self.counts.chunks(self.num_labels.max(1)).map(<[u64]>::to_vec).collect()
    }

    /// Rows scored.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Each label's `(true positives, predicted, actual)`.
    fn label_counts(&self) -> Vec<(u64, u64, u64)> {
        let n = self.num_labels;
        (0..n).map(|l| (self.count(l, l), (0..n).map(|t| self.count(t, l)).sum(), (0..n).map(|p| self.count(l, p)).sum())).collect()
    }

    /// The fraction of rows predicted right.
    pub fn accuracy(&self) -> f64 {
        let correct: u64 = (0..self.num_labels).map(|l| self.count(l, l)).sum();
        correct as f64 / self.total() as f64
    }

    /// Precision, recall, F1 and support of every label (also those that never occur).
    pub fn per_class(&self) -> Vec<Scores> {
        self.label_counts().into_iter().map(|(tp, p, a)| Scores::from_counts(tp, p, a)).collect()
    }

    /// Scores averaged over the labels that occur in the truth or the predictions.
    pub fn scores(&self, how: Average) -> Scores {
        let present: Vec<_> = self.label_counts().into_iter().filter(|&(_, p, a)| p + a > 0).collect();
        average(&present, how, Scores::from_counts)
    }

    /// Matthews' correlation coefficient, multi-class (Gorodkin's R_K, scikit-learn's
    /// `matthews_corrcoef`): 0 when either side is constant.
    pub fn matthews_corrcoef(&self) -> f64 {
        let counts = self.label_counts();
        let s = self.total() as f64;
        let c: f64 = counts.iter().map(|c| c.0 as f64).sum();
        let tp: f64 = counts.iter().map(|c| c.2 as f64 * c.1 as f64).sum();
        let pp: f64 = counts.iter().map(|c| (c.1 as f64).powi(2)).sum();
        let tt: f64 = counts.iter().map(|c| (c.2 as f64).powi(2)).sum();
        let cov_ytyp = c * s - tp;
        let cov_ypyp = s * s - pp;
        let cov_ytyt = s * s - tt;
        if cov_ypyp * cov_ytyt == 0.0 {
            return 0.0;
        }
        cov_ytyp / (cov_ytyt * cov_ypyp).sqrt()
    }
}

/// Counts of a multi-label prediction: per label, and whole rows.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MultiLabelCounts {
    /// Each label's `(true positives, predicted, actual)`.
    labels: Vec<(u64, u64, u64)>,
    /// Rows whose every label is right.
    exact: u64,
    /// Label decisions that are wrong.
    wrong: u64,
    rows: u64,
}

impl MultiLabelCounts {
    /// The counts of `predicted` against `truth`, rows of `num_labels` yes/no decisions.
    pub fn new(num_labels: usize, truth: &[Vec<bool>], predicted: &[Vec<bool>]) -> Result<Self, MetricError> {
        if truth.len() != predicted.len() {
            return Err(MetricError::LengthMismatch { what: "rows", truth: truth.len(), predicted: predicted.len() });
        }
        if truth.is_empty() {
            return Err(MetricError::Empty { what: "rows" });
        }
        let mut labels = vec![(0, 0, 0); num_labels];
        let (mut exact, mut wrong) = (0, 0);
        for (t, p) in truth.iter().zip(predicted) {
            if t.len() != num_labels || p.len() != num_labels {
                return Err(MetricError::LengthMismatch { what: "labels of a row", truth: t.len(), predicted: p.len() });
            }
            let mut all = true;
            for (l, (&t, &p)) in t.iter().zip(p).enumerate() {
                labels[l].0 += u64::from(t && p);
                labels[l].1 += u64::from(p);
                labels[l].2 += u64::from(t);
                all &= t == p;
                wrong += u64::from(t != p);
            }
            exact += u64::from(all);
        }
        Ok(Self { labels, exact, wrong, rows: truth.len() as u64 })
    }

    /// Subset accuracy: the fraction of rows with every label right.
    pub fn exact_match(&self) -> f64 {
        self.exact as f64 / self.rows as f64
    }

    /// The fraction of label decisions that are wrong (`hamming_loss`).
    pub fn hamming_loss(&self) -> f64 {
        self.wrong as f64 / (self.rows as f64 * self.labels.len().max(1) as f64)
    }

    /// Each label's scores.
    pub fn per_label(&self) -> Vec<Scores> {
        self.labels.iter().map(|&(tp, p, a)| Scores::from_counts(tp, p, a)).collect()
    }

    /// Scores averaged over every label (scikit-learn takes all columns of an indicator
    /// matrix).
    pub fn scores(&self, how: Average) -> Scores {
        average(&self.labels, how, Scores::from_counts)
    }
}
