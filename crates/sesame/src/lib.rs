//! Sesame: the BERT family on Burn. One dependency: the families behind cargo features (all on
//! by default), the backends behind theirs (`flex` by default), and the way in that
//! transformers users know.
//!
//! - [`pipeline`]`(task, model, options)`: text in, answers out, for embed, fill-mask,
//!   classify, rerank, tag and answer.
//! - [`auto`]: `AutoModel`, `AutoModelForSequenceClassification`, `…ForTokenClassification`,
//!   `…ForQuestionAnswering`, `…ForMaskedLM`, each picking the family from `config.json`'s
//!   `model_type`.
//! - [`train`] (feature `train`): fine-tune, distil and prune a checkpoint of any family.
//! - A model is a directory, or a hub id (`org/name[@revision]`) found in the local
//!   HuggingFace cache ([`hub`]); nothing is downloaded.
//!
//! ```no_run
//! use sesame::{pipeline, PipelineOptions, Task};
//!
//! let embedder = pipeline(Task::Embed, "sentence-transformers/all-MiniLM-L6-v2", PipelineOptions::default())?;
//! let vectors = embedder.embed(&["A sentence.", "Another one."])?;
//! assert_eq!(vectors[0].len(), 384);
//! # Ok::<(), sesame::Error>(())
//! ```
//!
//! Adding a family is its crate, its `impl Family` ([`layers::Family`]) and one line in
//! [`auto`]'s list of families; [`pipeline_for`] runs a family of your own without it.

pub mod auto;
mod pipeline;
#[cfg(feature = "train")]
pub mod train;

pub use burn;
pub use burn::tensor::Device;
pub use sesame_generate as generate;
pub use sesame_layers as layers;
pub use sesame_layers::hub;
pub use sesame_pipelines as pipelines;
pub use sesame_text as text;

#[cfg(feature = "albert")]
pub use sesame_albert as albert;
#[cfg(feature = "bart")]
pub use sesame_bart as bart;
#[cfg(feature = "bert")]
pub use sesame_bert as bert;
#[cfg(feature = "electra")]
pub use sesame_electra as electra;
#[cfg(feature = "roberta")]
pub use sesame_roberta as roberta;
#[cfg(feature = "unilm")]
pub use sesame_unilm as unilm;
#[cfg(feature = "xlnet")]
pub use sesame_xlnet as xlnet;

pub use auto::Error;
pub use pipeline::{pipeline, pipeline_for, Pipeline, PipelineOptions, Task};

/// The device of the first backend compiled in, in the order flex, ndarray, wgpu (its default
/// adapter), tch (CPU), cuda (GPU 0); `None` when the build has none.
#[allow(deprecated, unreachable_code)]
pub fn default_device() -> Option<Device> {
    #[cfg(feature = "flex")]
    return Some(Device::flex());
    #[cfg(feature = "ndarray")]
    return Some(Device::ndarray());
    #[cfg(feature = "wgpu")]
    return Some(Device::wgpu(burn::tensor::DeviceKind::DefaultDevice));
    #[cfg(feature = "tch")]
    return Some(Device::libtorch());
    #[cfg(feature = "cuda")]
    return Some(Device::cuda(0));
    None
}
