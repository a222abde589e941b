//! Training metrics: per-step values reported by a task, running means, a JSON-lines log and
//! its plots (SVG: `loss.svg`, `metrics.svg`) in the run directory.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How a metric is summarised over steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Summary {
    /// Weighted mean of the values.
    Mean,
    /// `exp` of the weighted mean (perplexity from a mean NLL).
    ExpMean,
    /// The binary entropy (nats) of the weighted mean of 0/1 labels: the loss of predicting
    /// every label by their frequency.
    BinaryEntropy,
    /// The area under the ROC curve of scores binned in `bins` (the positives' counts per
    /// bin, then the negatives', bins in increasing score order; ties within a bin count
    /// half).
    Auc,
}

/// One measured quantity of one step: a sum over `count` items (tokens, sequences).
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    /// Name in logs (`mlm_accuracy`).
    pub name: String,
    /// Sum of the per-item values.
    pub sum: f64,
    /// Number of items.
    pub count: f64,
    /// How to summarise.
    pub summary: Summary,
    /// Counts per bin, added bin by bin ([`Summary::Auc`]); empty for the others.
    pub bins: Vec<f64>,
}

impl Metric {
    /// A mean metric from a sum over `count` items.
    pub fn mean(name: &str, sum: f64, count: f64) -> Self {
        Self { name: name.into(), sum, count, summary: Summary::Mean, bins: Vec::new() }
    }

    /// A perplexity-style metric: `exp(sum / count)`.
    pub fn exp_mean(name: &str, sum: f64, count: f64) -> Self {
        Self { name: name.into(), sum, count, summary: Summary::ExpMean, bins: Vec::new() }
    }

    /// The binary entropy of the frequency of `positives` among `count` 0/1 labels.
    pub fn binary_entropy(name: &str, positives: f64, count: f64) -> Self {
        Self { name: name.into(), sum: positives, count, summary: Summary::BinaryEntropy, bins: Vec::new() }
    }

    /// ROC AUC from the scores of the positive and the negative items counted in the same
    /// bins, in increasing score order (`positives.len() == negatives.len()`).
    pub fn auc(name: &str, positives: &[f64], negatives: &[f64]) -> Self {
        debug_assert_eq!(positives.len(), negatives.len());
        let count = positives.iter().chain(negatives).sum();
        Self { name: name.into(), sum: 0.0, count, summary: Summary::Auc, bins: positives.iter().chain(negatives).copied().collect() }
    }
}

/// The area under the ROC curve of binned scores: the chance that a positive scores above a
/// negative, ties (the same bin) counting half; NaN without positives or negatives.
fn binned_auc(bins: &[f64]) -> f64 {
    let (positives, negatives) = bins.split_at(bins.len() / 2);
    let (p, n): (f64, f64) = (positives.iter().sum(), negatives.iter().sum());
    if p == 0.0 || n == 0.0 {
        return f64::NAN;
    }
    let mut below = 0.0;
    let mut wins = 0.0;
    for (&pos, &neg) in positives.iter().zip(negatives) {
        wins += pos * (below + 0.5 * neg);
        below += neg;
    }
    wins / (p * n)
}

/// Accumulates metrics over steps or batches.
#[derive(Clone, Debug, Default)]
pub struct MetricTotals {
    totals: BTreeMap<String, (f64, f64, Summary, Vec<f64>)>,
}

impl MetricTotals {
    /// Add one step's metrics.
    pub fn add(&mut self, metrics: &[Metric]) {
        for m in metrics {
            let e = self.totals.entry(m.name.clone()).or_insert((0.0, 0.0, m.summary, Vec::new()));
            e.0 += m.sum;
            e.1 += m.count;
            if e.3.len() < m.bins.len() {
                e.3.resize(m.bins.len(), 0.0);
            }
            e.3.iter_mut().zip(&m.bins).for_each(|(total, b)| *total += b);
        }
    }

    /// The summaries, by name.
    pub fn summarise(&self) -> BTreeMap<String, f64> {
        self.totals
            .iter()
            .filter(|(_, (_, count, _, _))| *count > 0.0)
            .filter_map(|(name, (sum, count, summary, bins))| {
                let mean = sum / count;
                let value = match summary {
                    Summary::Mean => mean,
                    Summary::ExpMean => mean.exp(),
                    Summary::BinaryEntropy if mean <= 0.0 || mean >= 1.0 => 0.0,
                    Summary::BinaryEntropy => -(mean * mean.ln() + (1.0 - mean) * (1.0 - mean).ln()),
                    // Undefined without both classes: not reported.
                    Summary::Auc => Some(binned_auc(bins)).filter(|a| a.is_finite())?,
                };
                Some((name.clone(), value))
            })
            .collect()
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.totals.clear();
    }
}

/// One line of `metrics.jsonl`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LogLine {
    /// Optimizer steps done.
    pub step: u64,
    /// `train` or `held_out`.
    pub split: String,
    /// Metric values.
    pub values: BTreeMap<String, f64>,
}

/// Appends [`LogLine`]s to `metrics.jsonl` and redraws `loss.svg` and `metrics.svg`.
#[derive(Debug)]
pub struct MetricLog {
    dir: PathBuf,
    lines: Vec<LogLine>,
}

impl MetricLog {
    /// Open the log in `dir`, keeping lines up to `up_to_step` (a resumed run drops what
    /// came after its checkpoint).
    pub fn open(dir: &Path, up_to_step: u64) -> std::io::Result<Self> {
        let path = dir.join("metrics.jsonl");
        let lines: Vec<LogLine> = match std::fs::read_to_string(&path) {
            Ok(text) => text.lines().filter_map(|l| serde_json::from_str(l).ok()).filter(|l: &LogLine| l.step <= up_to_step).collect(),
            Err(_) => Vec::new(),
        };
        let log = Self { dir: dir.to_path_buf(), lines };
        log.rewrite()?;
        Ok(log)
    }

    /// Every line so far.
    pub fn lines(&self) -> &[LogLine] {
        &self.lines
    }

    fn rewrite(&self) -> std::io::Result<()> {
        let text: String = self.lines.iter().map(|l| serde_json::to_string(l).expect("JSON") + "\n").collect();
        sesame_layers::fs::write_atomic(&self.dir.join("metrics.jsonl"), text.as_bytes())
    }

    /// Append a line and redraw the plots.
    pub fn push(&mut self, line: LogLine) -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("metrics.jsonl"))?;
        writeln!(f, "{}", serde_json::to_string(&line).expect("JSON"))?;
        let held_out = line.split == "held_out";
        self.lines.push(line);
        sesame_layers::fs::write_atomic(&self.dir.join("loss.svg"), loss_svg(&self.lines)?.as_bytes())?;
        if held_out {
            if let Some(svg) = metrics_svg(&self.lines)? {
                sesame_layers::fs::write_atomic(&self.dir.join("metrics.svg"), svg.as_bytes())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_of_binned_scores_counts_pairs_ranked_right_and_ties_half() {
        // Over both steps, positives in bins 1, 2, 2 and negatives in bins 0, 1, 2: of the 9
        // pairs, the positive of bin 1 beats one negative and ties one (1.5), each of bin 2
        // beats two and ties one (2.5).
        let mut totals = MetricTotals::default();
        totals.add(&[Metric::auc("auc", &[0.0, 1.0, 1.0], &[1.0, 1.0, 0.0])]);
        totals.add(&[Metric::auc("auc", &[0.0, 0.0, 1.0], &[0.0, 0.0, 1.0])]);
        totals.add(&[Metric::binary_entropy("prior", 1.0, 4.0)]);
        let summary = totals.summarise();
        assert!((summary["auc"] - (1.5 + 2.5 + 2.5) / 9.0).abs() < 1e-12, "{summary:?}");
        let h = -(0.25f64 * 0.25f64.ln() + 0.75 * 0.75f64.ln());
        assert!((summary["prior"] - h).abs() < 1e-12, "{summary:?}");
        // One class only: no AUC reported (not NaN).
        let mut one_class = MetricTotals::default();
        one_class.add(&[Metric::auc("auc", &[1.0, 2.0], &[0.0, 0.0])]);
        assert!(!one_class.summarise().contains_key("auc"));
    }

    #[test]
    fn totals_give_weighted_means_and_perplexity() {
        let mut t = MetricTotals::default();
        t.add(&[Metric::mean("acc", 3.0, 4.0), Metric::exp_mean("ppl", 2.0, 1.0)]);
        t.add(&[Metric::mean("acc", 1.0, 4.0), Metric::exp_mean("ppl", 0.0, 1.0)]);
        let s = t.summarise();
        assert_eq!(s["acc"], 0.5);
        assert!((s["ppl"] - 1f64.exp()).abs() < 1e-12);
    }

    #[test]
    fn the_log_keeps_lines_up_to_the_resumed_step_and_plots_them() {
        let dir = std::env::temp_dir().join(format!("sesame-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut log = MetricLog::open(&dir, 0).unwrap();
        for step in 1..=4 {
            let values = [("loss".to_string(), 5.0 - step as f64)].into_iter().collect();
            log.push(LogLine { step, split: "train".into(), values }).unwrap();
        }
        let values = [("loss".to_string(), 1.5), ("unigram_mlm_loss".to_string(), 4.25), ("accuracy".to_string(), 0.75)].into_iter().collect();
        log.push(LogLine { step: 4, split: "held_out".into(), values }).unwrap();
        let svg = std::fs::read_to_string(dir.join("loss.svg")).unwrap();
        assert!(svg.contains("<polyline") && svg.trim_end().ends_with("</svg>"), "{svg}");
        for label in ["train loss", "held-out loss", "unigram mlm loss (baseline)", "step"] {
            assert!(svg.contains(label), "{label} missing from loss.svg");
        }
        let metrics = std::fs::read_to_string(dir.join("metrics.svg")).unwrap();
        assert!(metrics.contains("accuracy") && !metrics.contains("unigram"), "{metrics}");
        let resumed = MetricLog::open(&dir, 2).unwrap();
        assert_eq!(resumed.lines().iter().map(|l| l.step).collect::<Vec<_>>(), [1, 2]);
    }
}

/// `(step, value)` of `key` in the lines of `split`, finite values only.
fn series(lines: &[LogLine], split: &str, key: &str) -> Vec<(f64, f64)> {
    lines.iter().filter(|l| l.split == split).filter_map(|l| l.values.get(key).map(|&v| (l.step as f64, v))).filter(|(_, v)| v.is_finite()).collect()
}

/// `loss.svg`: the training and held-out loss against the step, and each held-out baseline (a
/// metric named `…_loss`, such as the unigram loss of pre-training) as a dashed line over the
/// steps.
pub fn loss_svg(lines: &[LogLine]) -> std::io::Result<String> {
    let mut curves = vec![("train loss".to_string(), series(lines, "train", "loss"), false), ("held-out loss".to_string(), series(lines, "held_out", "loss"), false)];
    let x_max = lines.iter().map(|l| l.step as f64).fold(1.0, f64::max);
    let baselines: std::collections::BTreeSet<&String> = lines.iter().filter(|l| l.split == "held_out").flat_map(|l| l.values.keys()).filter(|k| k.ends_with("_loss")).collect();
    for name in baselines {
        if let Some(&(_, v)) = series(lines, "held_out", name).last() {
            curves.push((format!("{} (baseline)", name.replace('_', " ")), vec![(0.0, v), (x_max, v)], true));
        }
    }
    crate::plots::line_chart("loss", "loss", &curves, plotters::prelude::SeriesLabelPosition::UpperRight)
}

/// `metrics.svg`: every held-out metric but the losses against the step; `None` when the run
/// has none.
pub fn metrics_svg(lines: &[LogLine]) -> std::io::Result<Option<String>> {
    let names: std::collections::BTreeSet<&String> = lines.iter().filter(|l| l.split == "held_out").flat_map(|l| l.values.keys()).filter(|k| !k.ends_with("loss")).collect();
    let curves: Vec<(String, Vec<(f64, f64)>, bool)> = names.into_iter().map(|n| (n.clone(), series(lines, "held_out", n), false)).filter(|c| !c.1.is_empty()).collect();
    if curves.is_empty() {
        return Ok(None);
    }
    // Metrics mostly rise: the legend goes below them.
    crate::plots::line_chart("held-out metrics", "value", &curves, plotters::prelude::SeriesLabelPosition::LowerRight).map(Some)
}
