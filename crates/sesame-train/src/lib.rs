//! The shared Sesame trainer and backend selection.
//!
//! A model family plugs in through [`TrainTask`]; the trainer owns the loop, AdamW with
//! no-decay groups, warm-up + decay schedules, global-norm clipping, averaged gradient
//! accumulation, step checkpoints with exact resume, metrics and the loss plot.

pub mod backend;
pub mod clip;
pub mod metrics;
pub mod schedule;
pub mod trainer;

pub use backend::{Backend, BackendNotCompiled};
pub use metrics::{Metric, MetricTotals};
pub use schedule::{Decay, LrSchedule};
pub use trainer::{StepOutput, TrainConfig, TrainError, TrainOutcome, TrainTask, Trainer};
