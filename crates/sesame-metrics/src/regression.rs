//! Regression metrics: correlations as SciPy computes them, errors as scikit-learn does.

use crate::MetricError;

/// Check that `truth` and `predicted` pair up, are not empty and are finite.
fn check(truth: &[f64], predicted: &[f64]) -> Result<(), MetricError> {
    if truth.len() != predicted.len() {
        return Err(MetricError::LengthMismatch { what: "values", truth: truth.len(), predicted: predicted.len() });
    }
    if truth.is_empty() {
        return Err(MetricError::Empty { what: "values" });
    }
    for (what, v) in [("truth", truth), ("predictions", predicted)] {
        if let Some(index) = v.iter().position(|x| !x.is_finite()) {
            return Err(MetricError::NonFinite { what, index });
        }
    }
    Ok(())
}

/// Pearson's correlation (`scipy.stats.pearsonr`); `None` when either side is constant (SciPy
/// returns NaN) or there are fewer than two values.
pub fn pearson(truth: &[f64], predicted: &[f64]) -> Result<Option<f64>, MetricError> {
    check(truth, predicted)?;
    let n = truth.len() as f64;
    let (mx, my) = (truth.iter().sum::<f64>() / n, predicted.iter().sum::<f64>() / n);
    let xm: Vec<f64> = truth.iter().map(|x| x - mx).collect();
    let ym: Vec<f64> = predicted.iter().map(|y| y - my).collect();
    let (nx, ny) = (xm.iter().map(|v| v * v).sum::<f64>().sqrt(), ym.iter().map(|v| v * v).sum::<f64>().sqrt());
    if truth.len() < 2 || nx == 0.0 || ny == 0.0 {
        return Ok(None);
    }
    let r: f64 = xm.iter().zip(&ym).map(|(x, y)| (x / nx) * (y / ny)).sum();
    Ok(Some(r.clamp(-1.0, 1.0)))
}

/// Ranks from 1, ties given their average rank (`scipy.stats.rankdata`, method `average`).
pub fn average_ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            ranks[k] = rank;
        }
        i = j + 1;
    }
    ranks
}

/// Spearman's rank correlation (`scipy.stats.spearmanr`): Pearson's of the average ranks.
pub fn spearman(truth: &[f64], predicted: &[f64]) -> Result<Option<f64>, MetricError> {
    check(truth, predicted)?;
    pearson(&average_ranks(truth), &average_ranks(predicted))
}

/// Mean squared error.
pub fn mean_squared_error(truth: &[f64], predicted: &[f64]) -> Result<f64, MetricError> {
    check(truth, predicted)?;
    Ok(truth.iter().zip(predicted).map(|(t, p)| (t - p) * (t - p)).sum::<f64>() / truth.len() as f64)
}

/// Mean absolute error.
pub fn mean_absolute_error(truth: &[f64], predicted: &[f64]) -> Result<f64, MetricError> {
    check(truth, predicted)?;
    Ok(truth.iter().zip(predicted).map(|(t, p)| (t - p).abs()).sum::<f64>() / truth.len() as f64)
}
