//! The training jobs of any family (feature `train`). Pre-training picks the family by its
//! name ([`pretrain`]: each family's [`Pretrain`]); the jobs on a checkpoint read the family
//! from its `config.json`'s `model_type`, as the pipelines do, and run `sesame_train`'s job for
//! it ([`sesame_train::finetune::finetune`]`::<F>` and the rest). `cargo xtask train`,
//! `export`, `finetune`, `distill` and `prune` are these calls.
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
pub use sesame_train::pretraining::run::Exported;
pub use sesame_train::pretraining::{NoiseOptions, Objective, PermutationOptions, Pretrain, PretrainOptions, Pretrained};
pub use sesame_train::pruning::{PruneOptions, Pruned};

use crate::auto::{locate, with_family_named, Available, WithFamily};
use crate::Error;

/// Pre-train a model of the family `job.family` (`bert`, …, `bart`, `xlnet`) with its
/// objective, or `job.objective`, on `job.corpus` ([`Pretrain::pretrain`]): checkpoints,
/// metrics, plots and the export in HF layout in the run directory.
pub fn pretrain(job: &PretrainOptions, device: Device) -> Result<Pretrained, Error> {
    struct Job<'a>(&'a PretrainOptions, Device);
    impl WithFamily for Job<'_> {
        type Out = Result<Pretrained, String>;
        fn with<F: Available>(self) -> Self::Out {
            F::pretrain(self.0, self.1)
        }
    }
    with_family_named(&job.family, Job(job, device))?.map_err(Error::Train)
}

/// Export the checkpoint of `step` (default: the latest) of the pre-training run `run` in HF
/// layout to `out` (default: RUN/export-step-N), as its family exports runs of its objective.
pub fn export(run: &std::path::Path, step: Option<u64>, out: Option<std::path::PathBuf>, device: Device) -> Result<Exported, Error> {
    sesame_train::pretraining::run::export_checkpoint(run, step, out, device, export_of).map_err(Error::Train)
}

/// The export of a run whose record is `spec`: its family's ([`Pretrain::export`]).
fn export_of(spec: &sesame_train::pretraining::run::RunSpec) -> Result<sesame_train::pretraining::run::ExportFn, String> {
    struct Of<'a>(&'a sesame_train::pretraining::run::RunSpec);
    impl WithFamily for Of<'_> {
        type Out = Result<sesame_train::pretraining::run::ExportFn, String>;
        fn with<F: Available>(self) -> Self::Out {
            F::export(self.0)
        }
    }
    with_family_named(&spec.family, Of(spec)).map_err(|e| e.to_string())?
}

/// The families that pre-train, each with its objective in one line ([`Pretrain::OBJECTIVE`]).
pub fn objectives() -> Vec<(&'static str, &'static str)> {
    struct Objective;
    impl WithFamily for Objective {
        type Out = (&'static str, &'static str);
        fn with<F: Available>(self) -> Self::Out {
            (F::NAME, F::OBJECTIVE)
        }
    }
    crate::auto::families().into_iter().filter_map(|name| with_family_named(name, Objective).ok()).collect()
}

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
