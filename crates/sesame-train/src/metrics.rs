//! Training metrics: per-step values reported by a task, running means, a JSON-lines log and
//! a loss-curve plot (SVG) in the run directory.

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
}

impl Metric {
    /// A mean metric from a sum over `count` items.
    pub fn mean(name: &str, sum: f64, count: f64) -> Self {
        Self { name: name.into(), sum, count, summary: Summary::Mean }
    }

    /// A perplexity-style metric: `exp(sum / count)`.
    pub fn exp_mean(name: &str, sum: f64, count: f64) -> Self {
        Self { name: name.into(), sum, count, summary: Summary::ExpMean }
    }
}

/// Accumulates metrics over steps or batches.
#[derive(Clone, Debug, Default)]
pub struct MetricTotals {
    totals: BTreeMap<String, (f64, f64, Summary)>,
}

impl MetricTotals {
    /// Add one step's metrics.
    pub fn add(&mut self, metrics: &[Metric]) {
        for m in metrics {
            let e = self.totals.entry(m.name.clone()).or_insert((0.0, 0.0, m.summary));
            e.0 += m.sum;
            e.1 += m.count;
        }
    }

    /// The summaries, by name.
    pub fn summarise(&self) -> BTreeMap<String, f64> {
        self.totals
            .iter()
            .filter(|(_, (_, count, _))| *count > 0.0)
            .map(|(name, (sum, count, summary))| {
                let mean = sum / count;
                (name.clone(), if *summary == Summary::ExpMean { mean.exp() } else { mean })
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

/// Appends [`LogLine`]s to `metrics.jsonl` and redraws `loss.svg`.
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
        sesame_text::fs::write_atomic(&self.dir.join("metrics.jsonl"), text.as_bytes())
    }

    /// Append a line and redraw the plot.
    pub fn push(&mut self, line: LogLine) -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("metrics.jsonl"))?;
        writeln!(f, "{}", serde_json::to_string(&line).expect("JSON"))?;
        self.lines.push(line);
        sesame_text::fs::write_atomic(&self.dir.join("loss.svg"), loss_svg(&self.lines).as_bytes())
    }
}

/// An SVG plot of `loss` against step for the train and held-out splits.
pub fn loss_svg(lines: &[LogLine]) -> String {
    let (w, h, pad) = (720.0, 400.0, 50.0);
    let series: Vec<(&str, &str, Vec<(f64, f64)>)> = [("train", "#1f77b4"), ("held_out", "#d62728")]
        .iter()
        .map(|(split, colour)| {
            let points = lines
                .iter()
                .filter(|l| l.split == *split)
                .filter_map(|l| l.values.get("loss").map(|v| (l.step as f64, *v)))
                .filter(|(_, v)| v.is_finite())
                .collect();
            (*split, *colour, points)
        })
        .collect();
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.2.iter().copied()).collect();
    let (x_max, y_min, y_max) = all.iter().fold((1.0f64, f64::MAX, f64::MIN), |(x, lo, hi), &(s, v)| (x.max(s), lo.min(v), hi.max(v)));
    let (y_min, y_max) = if all.is_empty() { (0.0, 1.0) } else if y_max - y_min < 1e-9 { (y_min - 0.5, y_max + 0.5) } else { (y_min, y_max) };
    let sx = |x: f64| pad + x / x_max * (w - 2.0 * pad);
    let sy = |y: f64| h - pad - (y - y_min) / (y_max - y_min) * (h - 2.0 * pad);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/><line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <text x=\"{cx}\" y=\"{t}\" text-anchor=\"middle\">step (max {x_max})</text>\n\
         <text x=\"5\" y=\"{pad}\">{y_max:.3}</text><text x=\"5\" y=\"{b}\">{y_min:.3}</text>\n\
         <text x=\"{cx}\" y=\"20\" text-anchor=\"middle\">loss</text>\n",
        b = h - pad, r = w - pad, cx = w / 2.0, t = h - 15.0
    );
    for (i, (name, colour, points)) in series.iter().enumerate() {
        if points.is_empty() {
            continue;
        }
        let path: Vec<String> = points.iter().map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y))).collect();
        svg += &format!("<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>\n", path.join(" "));
        svg += &format!("<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{name}</text>\n", w - pad - 80.0, pad + 15.0 * i as f64);
    }
    svg + "</svg>\n"
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let svg = std::fs::read_to_string(dir.join("loss.svg")).unwrap();
        assert!(svg.contains("<polyline") && svg.ends_with("</svg>\n"));
        let resumed = MetricLog::open(&dir, 2).unwrap();
        assert_eq!(resumed.lines().iter().map(|l| l.step).collect::<Vec<_>>(), [1, 2]);
    }
}
