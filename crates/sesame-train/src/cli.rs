//! The value parsers of the options' flags (feature `cli`): each checks one value and says
//! what it should be, naming the value. The options of the jobs (`PretrainOptions`,
//! `FinetuneOptions`, `StudentOptions`, …) derive their flags with them, and `cargo xtask`'s
//! own flags use them too.

use std::path::PathBuf;

use crate::finetune::FeatureLayer;

/// A checkpoint directory, or a hub id (`org/name[@revision]`) found in the local HuggingFace
/// cache.
pub fn model_dir(s: &str) -> Result<PathBuf, String> {
    sesame_layers::hub::resolve(s).map_err(|e| e.to_string())
}

/// A finite number (a score threshold).
pub fn finite_f32(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("{s} is not a finite number")),
    }
}

/// A number of passes over the data: positive and finite (a fraction of one pass is allowed).
pub fn positive_epochs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(e) if e > 0.0 && e.is_finite() => Ok(e),
        _ => Err(format!("{s} is not a number of passes (a finite number > 0; --steps counts optimizer steps)")),
    }
}

/// A layer-wise decay factor: in (0, 1].
pub fn decay_factor(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(d) if d > 0.0 && d <= 1.0 => Ok(d),
        _ => Err(format!("{s} is not a factor in (0, 1]")),
    }
}

/// An encoder layer to read the features from (1-based; negative from the top), or `mix`.
pub fn feature_layer(s: &str) -> Result<FeatureLayer, String> {
    match s {
        "mix" => Ok(FeatureLayer::Mix),
        _ => s.parse().map(FeatureLayer::Layer).map_err(|_| format!("{s} is neither a layer number nor `mix`")),
    }
}

/// A weight of a loss's term: a finite number ≥ 0.
pub fn weight(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(w) if w >= 0.0 && w.is_finite() => Ok(w),
        _ => Err(format!("{s} is not a weight (a number ≥ 0)")),
    }
}

/// A temperature: a finite number > 0.
pub fn temperature(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t > 0.0 && t.is_finite() => Ok(t),
        _ => Err(format!("{s} is not a temperature (a number > 0)")),
    }
}

/// A share of a block's tokens: in (0, 1].
pub fn fragment_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("{s} is not a share of the block in (0, 1]")),
    }
}

/// A fraction of the corpus's documents: in [0, 1).
pub fn held_out_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s} is not a fraction in [0, 1)")),
    }
}
