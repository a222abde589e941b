//! Learning-rate schedules as pure functions of the optimizer step, so a resumed run needs no
//! scheduler state to continue exactly where it stopped.

use serde::{Deserialize, Serialize};

/// Decay after warm-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Decay {
    /// Linear to 0 at the last step (BERT).
    Linear,
    /// Half-cosine to 0 at the last step.
    Cosine,
    /// Stay at the peak.
    Constant,
}

/// Linear warm-up from 0 to `peak` over `warmup` steps, then `decay` to 0 at `total` steps,
/// as HF's `get_linear_schedule_with_warmup` / `get_cosine_schedule_with_warmup`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LrSchedule {
    /// Peak learning rate.
    pub peak: f64,
    /// Warm-up steps.
    pub warmup: u64,
    /// Total optimizer steps.
    pub total: u64,
    /// Decay shape.
    pub decay: Decay,
}

impl LrSchedule {
    /// The learning rate used for optimizer step `step` (0-based).
    pub fn lr(&self, step: u64) -> f64 {
        if step < self.warmup {
            return self.peak * step as f64 / self.warmup.max(1) as f64;
        }
        let span = self.total.saturating_sub(self.warmup).max(1) as f64;
        let progress = ((step - self.warmup) as f64 / span).min(1.0);
        match self.decay {
            Decay::Linear => self.peak * (1.0 - progress),
            Decay::Cosine => self.peak * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
            Decay::Constant => self.peak,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_linear_decay_matches_hf() {
        let s = LrSchedule { peak: 1e-3, warmup: 10, total: 110, decay: Decay::Linear };
        assert_eq!(s.lr(0), 0.0);
        assert!((s.lr(5) - 5e-4).abs() < 1e-12);
        assert!((s.lr(10) - 1e-3).abs() < 1e-12);
        assert!((s.lr(60) - 5e-4).abs() < 1e-12);
        assert_eq!(s.lr(110), 0.0);
    }

    #[test]
    fn cosine_decay_passes_half_way_at_the_midpoint() {
        let s = LrSchedule { peak: 2.0, warmup: 0, total: 100, decay: Decay::Cosine };
        assert!((s.lr(0) - 2.0).abs() < 1e-12);
        assert!((s.lr(50) - 1.0).abs() < 1e-12);
        assert!(s.lr(100).abs() < 1e-12);
    }
}
