//! `from_pretrained` / `save_pretrained` for any model type that maps onto an HF checkpoint.

use std::path::Path;

use burn::module::Module;
use burn::prelude::*;

use crate::checkpoint::{load_weights, save_pretrained, CheckpointError, CheckpointSpec, LoadReport, WeightFiles};
use crate::config::ConfigError;

/// Why `from_pretrained` failed.
#[derive(Debug, thiserror::Error)]
pub enum PretrainedError {
    /// `config.json` is missing or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The weights are missing, unreadable or do not fit the config.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Neither a directory nor a hub id in the local HuggingFace cache.
    #[error(transparent)]
    Hub(#[from] crate::hub::HubError),
}

/// What input a model accepts (its configuration's [`HfConfig::input_limits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputLimits {
    /// Token ids lie in `0..vocab_size`.
    pub vocab_size: usize,
    /// Token type ids lie in `0..type_vocab_size`.
    pub type_vocab_size: usize,
    /// Explicit position ids lie in `0..positions`.
    pub positions: usize,
    /// The longest sequence (`positions`, less RoBERTa's offset).
    pub max_len: usize,
}

impl InputLimits {
    /// An encoder with a learned table of `positions` position embeddings, of which the first
    /// `offset` are never a token's (RoBERTa's padding offset; 0 elsewhere).
    pub fn learned_positions(vocab_size: usize, type_vocab_size: usize, positions: usize, offset: usize) -> Self {
        InputLimits { vocab_size, type_vocab_size, positions, max_len: positions.saturating_sub(offset) }
    }
}

/// A family's configuration, read from and written to HF `config.json`: plain data, shared
/// freely between threads.
pub trait HfConfig: Sized + Clone + Send + Sync + 'static {
    /// Read and check `dir/config.json`.
    fn from_dir(dir: &Path) -> Result<Self, ConfigError>;
    /// The JSON to write as `config.json`, naming `architecture`.
    fn to_json(&self, architecture: &str) -> serde_json::Value;
    /// Standard deviation of HF's normal weight initialisation.
    fn initializer_range(&self) -> f64 {
        0.02
    }
    /// The vocabulary, type and length limits of a model's inputs under this configuration
    /// (what its task heads and the pipelines take; a generator may read longer).
    fn input_limits(&self) -> InputLimits;
    /// The label names, ids and problem type of classification heads.
    fn labels(&self) -> &crate::hparams::LabelConfig;
    /// The same, to change (a fine-tuning run sets its own labels).
    fn labels_mut(&mut self) -> &mut crate::hparams::LabelConfig;
    /// The layer count of the family's one encoder stack, to change: a fine-tuning run that
    /// reads its features from a lower layer keeps the layers up to it and drops the rest.
    /// `None` where cutting the stack would change what the kept layers compute (ALBERT with
    /// several layer groups) or there is no single stack (an encoder-decoder).
    fn num_hidden_layers_mut(&mut self) -> Option<&mut usize> {
        None
    }
    /// The depth of the stack a student's layers are picked from (an encoder-decoder: of each
    /// of its stacks).
    fn num_layers(&self) -> usize;
    /// The heads pruned from each layer (HF `pruned_heads`), numbered as in the unpruned
    /// layers; none for families that cannot prune.
    fn pruned_heads(&self) -> std::collections::BTreeMap<usize, std::collections::BTreeSet<usize>> {
        Default::default()
    }

    /// The configuration of the weights as files store them, when this one widens them
    /// (UniLM's 6 token types over BERT's 2-row table); `None`: the same. A model is loaded in
    /// the stored form, then each of its parameters goes through [`HfConfig::convert_stored`].
    fn stored_form(&self) -> Option<Self> {
        None
    }

    /// The parameter at Burn path `path` (`base.embeddings.token_type_embeddings.weight`),
    /// `[rows, cols]`, loaded in the [`HfConfig::stored_form`], in this configuration's form.
    fn convert_stored(&self, _path: &str, weight: Tensor<2>) -> Tensor<2> {
        weight
    }

    /// The equivalent configuration in the form HF stores, when this one has no HF counterpart
    /// (ALBERT sharing only part of a layer is written out per depth); `None`: saved as it is.
    /// With it, for the Burn path of each parameter of a model built from that form, the path
    /// of the parameter of a model built from this one that holds its values.
    fn hf_form(&self) -> Option<(Self, SourcePath)> {
        None
    }
}

/// Where a parameter of a model in [`HfConfig::hf_form`] takes its values: its Burn path in, the
/// path in the model being saved out.
pub type SourcePath = Box<dyn Fn(&str) -> String + Send + Sync>;

/// A model loaded from an HF directory, with its config and what loading did.
#[derive(Debug)]
pub struct Pretrained<M, C> {
    /// The model, in inference mode on the requested device.
    pub model: M,
    /// Its configuration.
    pub config: C,
    /// Tensors loaded, newly initialised and unused.
    pub report: LoadReport,
}

/// A model type that loads from and saves to HF checkpoints (it owns its parameters).
pub trait PretrainedModel: Module + Sized + 'static {
    /// The family's configuration type.
    type Config: HfConfig;
    /// The HF class name written to `config.json` (`BertForMaskedLM`).
    fn architecture() -> String;

    /// The model's modules for `config`, with Burn's default parameter initialisation.
    fn init(config: &Self::Config, device: &Device) -> Self;

    /// A fresh model initialised as transformers initialises it (normal matrices, zero biases,
    /// unit LayerNorm): the starting point for pre-training.
    fn new_hf(config: &Self::Config, device: &Device) -> Self {
        crate::init::hf_init(Self::init(config, device), config.initializer_range())
    }

    /// The device the model lives on (that of its first parameter).
    fn device(&self) -> Device {
        self.devices().into_iter().next().unwrap_or_default()
    }

    /// How this model's parameters map onto HF tensor names.
    fn checkpoint_spec(config: &Self::Config) -> CheckpointSpec;

    /// Load `dir` (config.json + weights; or a hub id in the local HuggingFace cache,
    /// [`crate::hub::resolve`]) onto `device`.
    fn from_pretrained(dir: &Path, device: &Device) -> Result<Pretrained<Self, Self::Config>, PretrainedError> {
        let resolved = crate::hub::resolve_path(dir)?;
        let dir = resolved.as_path();
        let config = Self::Config::from_dir(dir)?;
        let files = WeightFiles::find(dir)?;
        let mut loaded = Self::from_weights(config, &files, device)?;
        // A model saved quantised is quantised again: its weights are already int8 values.
        if crate::int8::saved_quantized(dir) {
            loaded.model = crate::int8::quantize(loaded.model);
        }
        Ok(loaded)
    }

    /// Load explicit weight files for an already-read `config` onto `device`.
    fn from_weights(
        config: Self::Config,
        files: &WeightFiles,
        device: &Device,
    ) -> Result<Pretrained<Self, Self::Config>, PretrainedError> {
        // The model is built lazily: loading checks each tensor's shape before anything is
        // allocated, and fills the parameters without drawing values it would overwrite. Tensors
        // the checkpoint lacks (a new task head) then get HF's initialisation, as in
        // transformers. A family whose model widens what files store (UniLM's token types)
        // loads the stored form, then converts it.
        let stored = config.stored_form();
        let build = stored.as_ref().unwrap_or(&config);
        let mut model = Self::init(build, device);
        let report = load_weights(&mut model, files, &Self::checkpoint_spec(build))?;
        let model = crate::init::hf_init(model, build.initializer_range());
        let model = if stored.is_some() { crate::checkpoint::from_stored(model, &config) } else { model };
        Ok(Pretrained { model, config, report })
    }

    /// Save as an HF directory (`config.json` + `model.safetensors`) that transformers loads.
    fn save_pretrained(&self, config: &Self::Config, dir: &Path) -> Result<(), CheckpointError> {
        if let Some((hf, source)) = config.hf_form() {
            let model = crate::checkpoint::rebuilt(self, &hf, &source)?;
            return model.save_pretrained(&hf, dir);
        }
        let mut json = config.to_json(&Self::architecture());
        if crate::int8::is_quantized(self) {
            json[crate::int8::CONFIG_KEY] = serde_json::Value::Bool(true);
        }
        save_pretrained(self, dir, &Self::checkpoint_spec(config).keys, &json)
    }
}

/// Bad model input, found before it reaches the model.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum InputError {
    /// No sequences.
    #[error("empty batch: nothing to run")]
    EmptyBatch,
    /// Sequences of length 0.
    #[error("empty sequences: the batch has {batch} sequence(s) of length 0")]
    EmptySequence {
        /// Batch size.
        batch: usize,
    },
    /// Longer than the model's learned positions.
    #[error("sequence length {len} exceeds the model's {max} positions (truncate the input)")]
    TooLong {
        /// Input length.
        len: usize,
        /// `max_position_embeddings` (less any offset).
        max: usize,
    },
    /// An id outside its table.
    #[error("{what} id {id} is out of range (the model has {limit})")]
    IdOutOfRange {
        /// Which ids (`token`, `token type`, `position`).
        what: &'static str,
        /// The offending id.
        id: i64,
        /// Table size.
        limit: usize,
    },
    /// Values that could not be read back from the device: ids to be checked, or the logits a
    /// decoder hands to the search.
    #[error("cannot read the {what} values back from the device: {reason}")]
    Unreadable {
        /// Which values (`token` ids, `position` ids, `logits`).
        what: &'static str,
        /// What the backend reported.
        reason: String,
    },
    /// Rows that end differently where a head reads the last end-of-sequence token of each
    /// (BART's sequence classification).
    #[error("every row must hold the same number of end-of-sequence tokens (id {eos}), at least one; the rows hold {counts:?}")]
    EosCount {
        /// The end-of-sequence id.
        eos: usize,
        /// How many each row holds.
        counts: Vec<usize>,
    },
    /// A required input is absent.
    #[error("no {what}: {reason}")]
    Missing {
        /// The input (`input_ids`, `decoder_input_ids`).
        what: &'static str,
        /// Why it is needed.
        reason: &'static str,
    },
    /// An input the model's configuration rules out (XLNet's `bi_data` with an odd batch).
    #[error("{what}: {reason}")]
    Invalid {
        /// The input.
        what: &'static str,
        /// Why it cannot run.
        reason: String,
    },
    /// Two input tensors disagree in shape.
    #[error("{what} has shape {found:?}, expected {expected:?} (from input_ids and the cache)")]
    ShapeMismatch {
        /// Which tensor.
        what: &'static str,
        /// The shape `input_ids` (and the cached positions) call for.
        expected: Vec<usize>,
        /// Its shape.
        found: Vec<usize>,
    },
}

/// Check that `ids` `[batch, seq]` lie in `0..limit`; ids that cannot be read back from the
/// device are an error, not a pass.
pub fn check_ids(ids: &Tensor<2, Int>, limit: usize, what: &'static str) -> Result<(), InputError> {
    let values: Vec<i64> = ids.try_to_vec_as::<i64>().map_err(|e| InputError::Unreadable { what, reason: e.to_string() })?;
    match values.iter().find(|&&id| id < 0 || id as usize >= limit) {
        Some(&id) => Err(InputError::IdOutOfRange { what, id, limit }),
        None => Ok(()),
    }
}

/// Check the shape of `input_ids` and of a companion tensor.
pub fn check_shape(input_ids: &Tensor<2, Int>, other: Option<&Tensor<2, Int>>, what: &'static str, max_len: usize) -> Result<(), InputError> {
    let [b, s] = input_ids.dims();
    if b == 0 {
        return Err(InputError::EmptyBatch);
    }
    if s == 0 {
        return Err(InputError::EmptySequence { batch: b });
    }
    if s > max_len {
        return Err(InputError::TooLong { len: s, max: max_len });
    }
    if let Some(t) = other {
        if t.dims() != [b, s] {
            return Err(InputError::ShapeMismatch { what, expected: vec![b, s], found: t.dims().to_vec() });
        }
    }
    Ok(())
}
