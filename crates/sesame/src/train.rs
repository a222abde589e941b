//! The training jobs on a checkpoint of any family (feature `train`): each reads the family
//! from `config.json`'s `model_type`, as the pipelines do, and runs `sesame_train`'s job for it
//! ([`sesame_train::finetune::finetune`]`::<F>` and the rest). `cargo xtask finetune`,
//! `distill` and `prune` are these calls.
//!
//! ```no_run
//! use sesame::train::{finetune, FinetuneOptions};
//!
//! let options = FinetuneOptions { steps: Some(60), ..FinetuneOptions::new("bert-base-uncased", "train.csv", "test.csv", "runs/sst") };
//! let result = finetune(&options, sesame::Device::flex())?;
//! println!("accuracy {:.4}; the model is in {}", result.metrics["accuracy"], result.model.display());
//! # Ok::<(), sesame::Error>(())
//! ```

use burn::tensor::Device;
use sesame_layers::Family;

pub use sesame_train::distill::StudentOptions;
pub use sesame_train::embedding_losses::LossKind;
pub use sesame_train::finetune::{FinetuneOptions, FinetuneTask, Finetuned};
pub use sesame_train::pruning::{PruneOptions, Pruned};

use crate::auto::{locate, WithFamily};
use crate::Error;

/// Fine-tune `job.model` for `job.task` with its family's model for the task
/// ([`sesame_train::finetune::finetune`]).
pub fn finetune(job: &FinetuneOptions, device: Device) -> Result<Finetuned, Error> {
    struct Job<'a>(&'a FinetuneOptions, Device);
    impl WithFamily for Job<'_> {
        type Out = Result<Finetuned, String>;
        fn with<F: Family>(self) -> Self::Out {
            sesame_train::finetune::finetune::<F>(self.0, self.1)
        }
    }
    on_checkpoint(&job.model, Job(job, device))
}

/// Distil the fine-tuned classifier `run.model` into a student of fewer layers
/// ([`sesame_train::distill::distill_classifier`]).
pub fn distill_classifier(run: &FinetuneOptions, student: &StudentOptions, device: Device) -> Result<Finetuned, Error> {
    struct Job<'a>(&'a FinetuneOptions, &'a StudentOptions, Device);
    impl WithFamily for Job<'_> {
        type Out = Result<Finetuned, String>;
        fn with<F: Family>(self) -> Self::Out {
            sesame_train::distill::distill_classifier::<F>(self.0, self.1, self.2)
        }
    }
    on_checkpoint(&run.model, Job(run, student, device))
}

/// Remove the least important attention heads of the fine-tuned classifier `job.model`
/// ([`sesame_train::pruning::prune_classifier`]).
pub fn prune_classifier(job: &PruneOptions, device: Device) -> Result<Pruned, Error> {
    struct Job<'a>(&'a PruneOptions, Device);
    impl WithFamily for Job<'_> {
        type Out = Result<Pruned, String>;
        fn with<F: Family>(self) -> Self::Out {
            sesame_train::pruning::prune_classifier::<F>(self.0, self.1)
        }
    }
    on_checkpoint(&job.model, Job(job, device))
}

/// Run a job on the family of the checkpoint `model` (a directory or a hub id).
fn on_checkpoint<T, A: WithFamily<Out = Result<T, String>>>(model: &std::path::Path, job: A) -> Result<T, Error> {
    locate(model)?.with_family(job)?.map_err(Error::Train)
}
