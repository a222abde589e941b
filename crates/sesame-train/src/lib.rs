//! The shared Sesame trainer and backend selection.
//!
//! A model family plugs in through [`TrainTask`]; the trainer owns the loop, AdamW with
//! no-decay groups, warm-up + decay schedules, global-norm clipping, averaged gradient
//! accumulation, step checkpoints with exact resume, metrics and the loss plot.
//! [`pretraining`] is masked-LM pre-training for any family that implements
//! [`PretrainingFamily`], on the masked-LM objective of [`objective`] (and SpanBERT's, in
//! [`span_boundary`]).

pub mod adamw;
pub mod backend;
pub mod clip;
#[cfg(feature = "cli")]
pub mod cli;
pub mod distill;
pub mod embedding_losses;
pub mod finetune;
pub mod metrics;
pub mod objective;
pub mod plots;
pub mod pretraining;
pub mod pruning;
pub mod schedule;
pub mod span_boundary;
pub mod trainer;

pub use adamw::FusedAdamW;
pub use backend::{Backend, BackendNotCompiled};
pub use metrics::{Metric, MetricTotals};
pub use objective::{forward_masked, MaskedLmObjective, MaskedPositions, MaskedSpans, ObjectiveOutput};
pub use pretraining::{pretraining_step, read_back, DataError, Layout, Masking, MaskingKind, Pretraining, PretrainingBatch, PretrainingFamily, PretrainingModel};
pub use schedule::{Decay, LrSchedule};
pub use span_boundary::{ForSpanPreTraining, SpanBoundaryHead, SpanBoundaryHeadConfig};
pub use trainer::{is_cpu, run_micro_batches, Best, BoxError, CarriedState, LrGroup, StepOutput, TrainConfig, TrainError, TrainOutcome, TrainTask, Trainer};
