//! HuggingFace checkpoint IO shared by every family: find the weight files of a model
//! directory, load them into a Burn module through a per-family key table, report missing and
//! unused tensors, and save back in HF layout (`config.json` + `model.safetensors`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, Param};
use burn::prelude::Tensor;
use burn::store::{
    ApplyError, ApplyResult, BurnToPyTorchAdapter, FloatCastAdapter, KeyRemapper, ModuleAdapter,
    ModuleSnapshot, ModuleStore, PyTorchToBurnAdapter, PytorchStore, SafetensorsStore,
    burn_pack::Tensor as PackTensor,
};
use burn::tensor::{DType, TensorData};
use regex::Regex;

use crate::{HfConfig, PretrainedModel};

/// Why a checkpoint could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A model could not be rebuilt in the form HF stores ([`crate::HfConfig::hf_form`]): the
    /// configuration's path table names a parameter the model lacks.
    #[error("cannot write the model in HF's form: {reason}")]
    HfForm {
        /// Which parameters were not found.
        reason: String,
    },
    /// The directory holds no weight file Sesame can read.
    #[error("no weights in {dir}: expected model.safetensors, model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json")]
    NoWeights {
        /// The model directory.
        dir: PathBuf,
    },
    /// A file could not be read or written.
    #[error("cannot access {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying IO error.
        source: std::io::Error,
    },
    /// A file is not a readable checkpoint (truncated, corrupt, wrong format).
    #[error("cannot read checkpoint {path}: {reason}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What the reader reported.
        reason: String,
    },
    /// A tensor's data could not be loaded (e.g. the file ends before it).
    #[error("tensor `{tensor}` in {path} is unreadable: {reason}")]
    BadTensor {
        /// The file.
        path: PathBuf,
        /// The tensor, by its HF name.
        tensor: String,
        /// What the reader reported.
        reason: String,
    },
    /// A tensor holds NaN or infinite values.
    #[error("tensor `{tensor}` in {path} holds NaN or infinite values")]
    NonFinite {
        /// The weights file (the first one for sharded checkpoints).
        path: PathBuf,
        /// HF name of the tensor.
        tensor: String,
    },
    /// Required tensors are not in the checkpoint.
    #[error("{path} lacks {} required tensor(s): {}", tensors.len(), tensors.join(", "))]
    MissingTensors {
        /// The weights file (the first one for sharded checkpoints).
        path: PathBuf,
        /// HF names of the missing tensors.
        tensors: Vec<String>,
    },
    /// A tensor's shape differs from what the config implies.
    #[error("tensor `{tensor}` in {path} has shape {found:?}, the config implies {expected:?}")]
    ShapeMismatch {
        /// The file.
        path: PathBuf,
        /// The tensor, by its HF name.
        tensor: String,
        /// The shape the model needs.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor has the wrong kind of element (e.g. integers for a weight).
    #[error("tensor `{tensor}` in {path} has dtype {found}, expected {expected}")]
    DTypeMismatch {
        /// The file.
        path: PathBuf,
        /// The tensor, by its HF name.
        tensor: String,
        /// The expected dtype.
        expected: String,
        /// The dtype in the file.
        found: String,
    },
    /// A family's key table holds a pattern that is not a valid regex.
    #[error("invalid ignore pattern `{pattern}` in the model's checkpoint table: {reason}")]
    BadPattern {
        /// The pattern.
        pattern: String,
        /// What the regex parser reported.
        reason: String,
    },
    /// The sharded-checkpoint index is malformed.
    #[error("invalid shard index {path}: {reason}")]
    BadIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The on-disk format of a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightFormat {
    /// `.safetensors`.
    Safetensors,
    /// PyTorch pickle (`pytorch_model.bin`).
    PyTorch,
}

/// The weight files of one checkpoint (several when sharded).
#[derive(Clone, Debug)]
pub struct WeightFiles {
    /// The files, in load order.
    pub files: Vec<PathBuf>,
    /// Their format.
    pub format: WeightFormat,
}

impl WeightFiles {
    /// Locate the weights in an HF model directory, preferring safetensors.
    pub fn find(dir: &Path) -> Result<Self, CheckpointError> {
        let candidates = [
            ("model.safetensors", WeightFormat::Safetensors, false),
            ("model.safetensors.index.json", WeightFormat::Safetensors, true),
            ("pytorch_model.bin", WeightFormat::PyTorch, false),
            ("pytorch_model.bin.index.json", WeightFormat::PyTorch, true),
        ];
        for (name, format, sharded) in candidates {
            let path = dir.join(name);
            if path.is_file() {
                let files = if sharded { shards_of(&path)? } else { vec![path] };
                return Ok(Self { files, format });
            }
        }
        Err(CheckpointError::NoWeights { dir: dir.to_path_buf() })
    }
}

/// The shard files named by an HF `*.index.json` (`{"weight_map": {tensor: file}}`).
fn shards_of(index: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
    let text = std::fs::read_to_string(index).map_err(|source| CheckpointError::Io {
        path: index.to_path_buf(),
        source,
    })?;
    let bad = |reason: String| CheckpointError::BadIndex { path: index.to_path_buf(), reason };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let map = value
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("no `weight_map` object".into()))?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut files = BTreeSet::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| bad(format!("`{tensor}` maps to a non-string")))?;
        if file.contains('/') || file.contains("..") {
            return Err(bad(format!("shard name `{file}` leaves the model directory")));
        }
        files.insert(dir.join(file));
    }
    if files.is_empty() {
        return Err(bad("empty `weight_map`".into()));
    }
    Ok(files.into_iter().collect())
}

/// A family's table from HF tensor names to Burn module paths.
///
/// Each row maps a dotted HF name prefix to a Burn path prefix; `{n}` stands for a layer index.
/// Rows match at segment boundaries anywhere in a name, or only at its start when both sides
/// begin with `^`. In each direction the rows apply
/// most specific (longest source pattern) first, every matching row in turn as burn-store's
/// `KeyRemapper` does, so one table serves loading and saving.
#[derive(Clone, Debug)]
pub struct KeyMap {
    rows: Vec<(String, String)>,
}

impl KeyMap {
    /// Build a table from `(hf, burn)` rows.
    pub fn new(rows: &[(&str, &str)]) -> Self {
        Self { rows: rows.iter().map(|(h, b)| (h.to_string(), b.to_string())).collect() }
    }

    /// Append rows (e.g. a head's names after the base model's).
    pub fn with(mut self, rows: &[(&str, &str)]) -> Self {
        self.rows.extend(rows.iter().map(|(h, b)| (h.to_string(), b.to_string())));
        self
    }

    /// Regex rules from HF names to Burn paths.
    fn hf_to_burn(&self) -> Vec<(Regex, String)> {
        most_specific_first(self.rows.iter().map(|(h, b)| (h.as_str(), b.as_str())))
    }

    /// Regex rules from Burn paths to HF names.
    fn burn_to_hf(&self) -> Vec<(Regex, String)> {
        most_specific_first(self.rows.iter().map(|(h, b)| (b.as_str(), h.as_str())))
    }

    /// The Burn path of an HF tensor name.
    pub fn to_burn(&self, hf: &str) -> String {
        rename(&self.hf_to_burn(), hf)
    }

    /// The HF tensor name of a Burn path (with Burn's LayerNorm `gamma`/`beta` named
    /// `weight`/`bias`, as `BurnToPyTorchAdapter` writes them).
    pub fn to_hf(&self, burn: &str) -> String {
        hf_name(&self.burn_to_hf(), burn)
    }
}

/// [`KeyMap::to_hf`] with the rules compiled once by the caller.
fn hf_name(burn_to_hf: &[(Regex, String)], burn: &str) -> String {
    let name = rename(burn_to_hf, burn);
    match name.rsplit_once('.') {
        Some((module, "gamma")) => format!("{module}.weight"),
        Some((module, "beta")) => format!("{module}.bias"),
        _ => name,
    }
}

fn most_specific_first<'a>(rows: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<(Regex, String)> {
    let mut rows: Vec<(&str, &str)> = rows.collect();
    rows.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    rows.into_iter().map(|(from, to)| compile_row(from, to)).collect()
}

/// `encoder.layer.{n}.output` -> (`(^|\.)encoder\.layer\.([0-9]+)\.output(\.|$)`, `${1}..${2}..${3}`).
/// A row starting with `^` matches only at the start of a name (top-level head names such as
/// `^classifier`, which must not match inside `sentence_head.classifier`).
fn compile_row(from: &str, to: &str) -> (Regex, String) {
    let (anchor, from) = match from.strip_prefix('^') {
        Some(rest) => ("(^)", rest),
        None => (r"(^|\.)", from),
    };
    let to = to.strip_prefix('^').unwrap_or(to);
    let parts: Vec<&str> = from.split("{n}").collect();
    let mut pattern = String::from(anchor);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            pattern.push_str("([0-9]+)");
        }
        pattern.push_str(&regex::escape(part));
    }
    pattern.push_str(r"(\.|$)");
    let mut replacement = String::from("${1}");
    for (i, part) in to.split("{n}").enumerate() {
        if i > 0 {
            replacement.push_str(&format!("${{{}}}", i + 1));
        }
        replacement.push_str(part);
    }
    replacement.push_str(&format!("${{{}}}", parts.len() + 1));
    (Regex::new(&pattern).expect("key-map rows compile to valid regexes"), replacement)
}

/// Apply every matching rule in order, as `KeyRemapper::remap` does.
fn rename(rules: &[(Regex, String)], name: &str) -> String {
    let mut name = name.to_string();
    for (regex, replacement) in rules {
        if regex.is_match(&name) {
            name = regex.replace_all(&name, replacement.as_str()).into_owned();
        }
    }
    name
}

/// How one model type maps onto HF checkpoints.
#[derive(Clone, Debug)]
pub struct CheckpointSpec {
    /// HF name <-> Burn path table.
    pub keys: KeyMap,
    /// The family's HF base-model prefix (`bert`).
    pub family_prefix: String,
    /// Whether this module holds the base model under a field named `family_prefix` (head
    /// models) rather than being the base model itself.
    pub has_base_prefix: bool,
    /// The base model's top-level names (`embeddings`, `encoder`, `pooler`).
    pub base_roots: Vec<String>,
    /// Burn path prefixes that may be absent from a checkpoint; they keep their fresh
    /// initialisation and are reported (task heads, the pooler).
    pub may_be_missing: Vec<String>,
    /// Regexes over HF names of tensors that are expected in files but deliberately not
    /// loaded (buffers such as `position_ids`, decoders tied to the embeddings).
    pub ignored: Vec<String>,
    /// Other HF names of one tensor, as `(alias, name)` rows read only when loading (BART's
    /// `encoder.embed_tokens` and `decoder.embed_tokens` are its `shared` table). Saving writes
    /// the name alone.
    pub aliases: Vec<(String, String)>,
}

impl CheckpointSpec {
    /// Rules applied when loading: base-prefix handling first, then the family table.
    fn load_rules(&self) -> Vec<(Regex, String)> {
        let prefix = &self.family_prefix;
        let mut rules = vec![if self.has_base_prefix {
            let roots = self.base_roots.iter().map(|r| regex::escape(r)).collect::<Vec<_>>().join("|");
            // A root is a module (`word_embedding.weight`) or a bare parameter (XLNet's `mask_emb`).
            (Regex::new(&format!(r"^({roots})(\.|$)")).expect("valid"), format!("{prefix}.${{1}}${{2}}"))
        } else {
            (Regex::new(&format!(r"^{}\.", regex::escape(prefix))).expect("valid"), String::new())
        }];
        rules.extend(self.aliases.iter().map(|(alias, name)| compile_row(alias, name)));
        rules.extend(self.keys.hf_to_burn());
        rules
    }

    fn may_be_missing(&self, burn_path: &str) -> bool {
        self.may_be_missing.iter().any(|p| burn_path.starts_with(p.as_str()))
    }
}

/// What loading a checkpoint did.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Number of tensors loaded.
    pub applied: usize,
    /// Optional tensors the checkpoint lacked (HF names); they keep their fresh initialisation.
    pub initialized: Vec<String>,
    /// Tensors in the checkpoint that the model does not use (HF names), ignored ones excluded.
    pub unused: Vec<String>,
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "loaded {} tensors", self.applied)?;
        if !self.initialized.is_empty() {
            write!(f, "; newly initialised: {}", self.initialized.join(", "))?;
        }
        if !self.unused.is_empty() {
            write!(f, "; unused: {}", self.unused.join(", "))?;
        }
        Ok(())
    }
}

/// Load `files` into `module` following `spec`. Floating-point tensors are cast to the
/// device's float dtype (f32 unless configured otherwise), whatever precision the file holds.
///
/// Fails on unreadable files, shape or dtype mismatches and missing required tensors; reports
/// optional tensors that were absent and tensors that went unused.
pub fn load_weights<M: Module>(
    module: &mut M,
    files: &WeightFiles,
    spec: &CheckpointSpec,
) -> Result<LoadReport, CheckpointError> {
    let rules = spec.load_rules();
    // Cast while converting, so that backends without half precision (ndarray) never see it.
    let float_dtype: DType = module.devices().first().map_or(DType::F32, |d| d.settings().float_dtype.into());
    let adapter = || PyTorchToBurnAdapter.chain(FloatCastAdapter::to(float_dtype));
    // Compiled once: every reported name goes through them.
    let to_hf_rules = spec.keys.burn_to_hf();
    let burn_to_hf = |path: &str| hf_name(&to_hf_rules, path);
    let ignored: Vec<Regex> = spec
        .ignored
        .iter()
        .map(|p| Regex::new(p).map_err(|e| CheckpointError::BadPattern { pattern: p.clone(), reason: e.to_string() }))
        .collect::<Result<_, _>>()?;
    let is_ignored = |hf: &str| ignored.iter().any(|r| r.is_match(hf));
    let mut missing: Option<BTreeMap<String, ()>> = None;
    let mut applied = BTreeSet::new();
    let mut unused = Vec::new();
    let mut skipped: Vec<(String, String)> = Vec::new();
    let targets = Targets::of(module);
    let non_finite = Arc::new(Mutex::new(Vec::new()));
    for path in &files.files {
        if !path.is_file() {
            return Err(CheckpointError::Io {
                path: path.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "file not found"),
            });
        }
        let unreadable = |reason: String| CheckpointError::Unreadable { path: path.clone(), reason };
        // The readers under burn-store may panic on a corrupt file; that is this file's error.
        let read = || -> Result<ApplyResult, CheckpointError> { Ok(match files.format {
            WeightFormat::Safetensors => {
                // The file is read once; each tensor the model takes is cast, transposed
                // (Linear) and checked for NaN/inf in one pass, straight into the buffer the
                // device tensor keeps (burn-store's store would copy it three times more).
                let bytes = Arc::new(map(path).map_err(|e| unreadable(e.to_string()))?);
                let (tensors, odd) = safetensors_tensors(&bytes, &rules, &targets, float_dtype, &non_finite).map_err(&unreadable)?;
                // Tensors of a dtype Burn lacks (U16, F8, …): reported below (unused, or the
                // reason a needed one is missing).
                skipped.extend(odd);
                module.apply(tensors, None, Some(Box::new(NormNames)), false)
            }
            WeightFormat::PyTorch => {
                check_inflated_sizes(path).map_err(&unreadable)?;
                // `PytorchStore::apply_to` fixes its adapter; apply its tensors with ours.
                let remapper = KeyRemapper::from_compiled_patterns(rules.clone());
                let mut store = PytorchStore::from_file(path).remap(remapper).map_indices_contiguous(false);
                let tensors: Vec<_> = store.get_all_tensors().map_err(|e| unreadable(e.to_string()))?.values().cloned().collect();
                // burn-store reads a tensor's bytes before it compares shapes; a pickle's
                // storages may be deflated, so a declared size the model cannot take is refused
                // from the pickle's metadata, before anything is decompressed.
                let expected = &targets.shapes;
                for t in &tensors {
                    let want = expected.get(&t.name).or_else(|| expected.get(&norm_param_name(&t.name)));
                    let found: Vec<usize> = t.shape.to_vec();
                    if let Some(want) = want.filter(|w| w.iter().product::<usize>() != found.iter().product::<usize>()) {
                        return Err(CheckpointError::ShapeMismatch { path: path.clone(), tensor: burn_to_hf(&t.name), expected: want.clone(), found });
                    }
                }
                let adapter: Box<dyn ModuleAdapter> = Box::new(adapter());
                module.apply(tensors, None, Some(adapter), false)
            }
        }) };
        let result = crate::contain::catch(read).unwrap_or_else(|panic| Err(unreadable(format!("the reader failed on it: {panic}"))))?;
        if let Some(error) = result.errors.first() {
            return Err(apply_error(path, error, &burn_to_hf));
        }
        applied.extend(result.applied.iter().cloned());
        unused.extend(result.unused.iter().map(|p| burn_to_hf(p)).filter(|n| !is_ignored(n)));
        let here: BTreeMap<String, ()> = result.missing.iter().map(|(p, _)| (p.clone(), ())).collect();
        missing = Some(match missing {
            None => here,
            Some(before) => before.into_iter().filter(|(p, _)| here.contains_key(p)).collect(),
        });
    }
    let missing: Vec<String> = missing.unwrap_or_default().into_keys().collect();
    for (name, dtype) in skipped {
        // The file's name may carry the base-model prefix (`bert.`) that the model's lacks.
        let is_it = |p: &String| {
            let hf = burn_to_hf(p);
            name == hf || name.strip_suffix(hf.as_str()).is_some_and(|prefix| prefix.ends_with('.'))
        };
        match missing.iter().find(|p| is_it(p)) {
            Some(_) => {
                return Err(CheckpointError::DTypeMismatch {
                    path: files.files[0].clone(),
                    tensor: name,
                    expected: "a float dtype".into(),
                    found: format!("{dtype} (not supported by Burn)"),
                })
            }
            None if !is_ignored(&name) => unused.push(format!("{name} ({dtype}, not readable by Burn)")),
            None => {}
        }
    }
    let (optional, required): (Vec<String>, Vec<String>) =
        missing.into_iter().partition(|p| spec.may_be_missing(p));
    if !required.is_empty() {
        return Err(CheckpointError::MissingTensors {
            path: files.files[0].clone(),
            tensors: required.iter().map(|p| burn_to_hf(p)).collect(),
        });
    }
    // A NaN or infinite weight would make every output garbage: refuse it, naming the tensor.
    // Safetensors tensors were checked as they were converted; a pickle's are checked here.
    let mut found = std::mem::take(&mut *non_finite.lock().expect("no panic while holding it"));
    if files.format == WeightFormat::PyTorch {
        let mut check = NonFinite::default();
        module.visit(&mut check);
        found.extend(check.found);
    }
    // A safetensors tensor carries PyTorch's name (`weight`) of a LayerNorm's Burn `gamma`.
    if let Some(bad) = found.into_iter().find(|p| applied.contains(p) || applied.contains(&norm_param_name(p))) {
        return Err(CheckpointError::NonFinite { path: files.files[0].clone(), tensor: burn_to_hf(&bad) });
    }
    Ok(LoadReport {
        applied: applied.len(),
        initialized: optional.iter().map(|p| burn_to_hf(p)).collect(),
        unused,
    })
}

/// How far a deflated entry of a PyTorch zip may inflate: above both this ratio to its
/// stored bytes and [`INFLATE_FLOOR`] bytes it is refused. `torch.save` stores every entry
/// uncompressed, and deflate shrinks float weights by a few percent; a larger ratio is a
/// decompression bomb (gigabytes from a few megabytes).
const INFLATE_RATIO: u64 = 16;
const INFLATE_FLOOR: u64 = 16 << 20;

/// Refuse a PyTorch zip checkpoint whose deflated entries would inflate far beyond their size,
/// from the archive's directory, before any of them is decompressed. Files that are not zips
/// (PyTorch's legacy format) are left to the reader.
fn check_inflated_sizes(path: &Path) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let Ok(mut archive) = zip::ZipArchive::new(std::io::BufReader::new(file)) else { return Ok(()) };
    for i in 0..archive.len() {
        let entry = archive.by_index_raw(i).map_err(|e| e.to_string())?;
        let (size, stored) = (entry.size(), entry.compressed_size());
        if entry.compression() != zip::CompressionMethod::Stored && size > INFLATE_FLOOR && size / stored.max(1) > INFLATE_RATIO {
            return Err(format!(
                "entry `{}` would inflate to {size} bytes from {stored} (over {INFLATE_RATIO} times): refused as a decompression bomb",
                entry.name().map_or_else(|_| format!("#{i}"), |n| n.to_string())
            ));
        }
    }
    Ok(())
}

/// Burn's name of a LayerNorm parameter stored under PyTorch's (`weight` -> `gamma`, `bias` -> `beta`).
fn norm_param_name(name: &str) -> String {
    match name.rsplit_once('.') {
        Some((module, "weight")) => format!("{module}.gamma"),
        Some((module, "bias")) => format!("{module}.beta"),
        _ => name.to_string(),
    }
}

/// Collects the paths of float parameters holding NaN or infinite values.
#[derive(Default)]
struct NonFinite {
    path: ModulePath,
    found: Vec<String>,
}

impl burn::module::ModuleVisitor for NonFinite {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.exit();
    }

    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<burn::prelude::Tensor<D>>) {
        if !param.is_initialized() {
            return; // not loaded: nothing to check (and nothing to allocate)
        }
        // x - x is 0 for every finite x and NaN otherwise: one sum per tensor tells.
        let t = param.val();
        let finite = (t.clone() - t).sum().into_scalar::<f32>().is_finite();
        if !finite {
            self.found.push(self.path.joined());
        }
    }
}

/// What the module expects of each float parameter, by Burn path: read without initialising
/// anything.
#[derive(Default)]
struct Targets {
    path: ModulePath,
    /// Every float parameter's shape.
    shapes: HashMap<String, Vec<usize>>,
    /// The `weight`s of `Linear` modules, which Burn stores `[in, out]` and PyTorch `[out, in]`.
    linear_weights: HashSet<String>,
}

impl Targets {
    fn of<M: Module>(module: &M) -> Self {
        let mut targets = Self::default();
        module.visit(&mut targets);
        targets
    }
}

/// Where a module visitor or mapper is: the names of the modules it is in and their container
/// types (`Struct:Linear`, `Vec`, ...), as Burn's `enter_module` / `exit_module` give them.
#[derive(Default)]
pub(crate) struct ModulePath {
    names: Vec<String>,
    containers: Vec<String>,
}

impl ModulePath {
    /// `enter_module`.
    pub(crate) fn enter(&mut self, name: &str, container_type: &str) {
        self.names.push(name.to_string());
        self.containers.push(container_type.to_string());
    }

    /// `exit_module`.
    pub(crate) fn exit(&mut self) {
        self.names.pop();
        self.containers.pop();
    }

    /// The Burn path (`encoder.layers.0.attention.query.weight`).
    pub(crate) fn joined(&self) -> String {
        self.names.join(".")
    }

    /// Whether the parameter visited is the `weight` of a `Linear` module: the innermost
    /// module type, past Vec/array wrappers (as burn-store's adapters see it), is `Linear`.
    pub(crate) fn is_linear_weight(&self) -> bool {
        let module = self.containers.iter().rev().find(|c| c.starts_with("Struct:") || c.starts_with("Enum:"));
        module.is_some_and(|m| m == "Struct:Linear") && self.names.last().is_some_and(|n| n == "weight")
    }
}

impl burn::module::ModuleVisitor for Targets {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.enter(name, container_type);
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<burn::prelude::Tensor<D>>) {
        let path = self.path.joined();
        if self.path.is_linear_weight() && D == 2 {
            self.linear_weights.insert(path.clone());
        }
        self.shapes.insert(path, param.lazy_shape().to_vec());
    }
}

/// The tensors of a safetensors file under their Burn names, each converted only when the
/// module takes it, and the `(name, dtype)` of those in a dtype Burn cannot read.
///
/// A float tensor becomes `float_dtype`, a `Linear` weight is transposed to Burn's `[in, out]`,
/// and the Burn path of one holding NaN or infinity is pushed to `non_finite`.
fn safetensors_tensors(
    bytes: &Arc<memmap2::Mmap>,
    rules: &[(Regex, String)],
    targets: &Targets,
    float_dtype: DType,
    non_finite: &Arc<Mutex<Vec<String>>>,
) -> Result<(Vec<PackTensor>, Vec<(String, String)>), String> {
    use safetensors::Dtype as S;
    let file = safetensors::SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
    let (mut tensors, mut odd) = (Vec::new(), Vec::new());
    for (name, view) in file.tensors() {
        let dtype = match view.dtype() {
            S::F64 | S::F32 | S::F16 | S::BF16 => float_dtype,
            S::I64 => DType::I64,
            S::I32 => DType::I32,
            S::I16 => DType::I16,
            S::I8 => DType::I8,
            S::U64 => DType::U64,
            S::U32 => DType::U32,
            S::U8 => DType::U8,
            S::BOOL => DType::Bool(burn::tensor::BoolStore::Native),
            other => {
                odd.push((name, format!("{other:?}")));
                continue;
            }
        };
        let burn_path = rename(rules, &name);
        let transpose = view.shape().len() == 2 && targets.linear_weights.contains(&burn_path);
        let mut shape = view.shape().to_vec();
        if transpose {
            shape.reverse();
        }
        let (source, range) = (view.dtype(), data_range(bytes, view.data()));
        let (bytes, non_finite, file_shape) = (bytes.clone(), non_finite.clone(), view.shape().to_vec());
        let path = burn_path.clone();
        let declared = shape.clone();
        tensors.push(burn::store::bridge::deferred(burn_path, dtype, shape.into(), None, move || {
            let raw = &bytes[range.clone()];
            let data = match float_values(source, raw, &file_shape, transpose) {
                Some(values) => {
                    if !values.iter().all(|v| v.is_finite()) {
                        non_finite.lock().expect("no panic while holding it").push(path.clone());
                    }
                    TensorData::new(values, declared.clone()).convert_dtype(float_dtype)
                }
                None => TensorData::from_bytes_vec(raw.to_vec(), declared.clone(), dtype),
            };
            Ok(data)
        }));
    }
    Ok((tensors, odd))
}

/// The bytes of the file at `path`, mapped into memory: pages are read as tensors need them,
/// and nothing is copied before the conversion to the model's dtype.
fn map(path: &Path) -> std::io::Result<memmap2::Mmap> {
    let file = std::fs::File::open(path)?;
    // SAFETY: the map is only read, and only while loading. As with every loader that maps
    // weights (burn-store, safetensors' own), another process truncating the file meanwhile is
    // the one case left undefined.
    unsafe { memmap2::Mmap::map(&file) }
}

/// Where `data`, a slice of `bytes`, lies in it.
fn data_range(bytes: &[u8], data: &[u8]) -> std::ops::Range<usize> {
    let start = data.as_ptr() as usize - bytes.as_ptr() as usize;
    start..start + data.len()
}

/// A float tensor's little-endian values as f32, transposed from `[rows, cols]` when asked;
/// `None` for other dtypes.
fn float_values(dtype: safetensors::Dtype, raw: &[u8], shape: &[usize], transpose: bool) -> Option<Vec<f32>> {
    use burn::tensor::{bf16, f16};
    use safetensors::Dtype as S;
    let shape = transpose.then(|| (shape[0], shape[1]));
    Some(match dtype {
        S::F32 => convert(raw, shape, f32::from_le_bytes),
        S::F16 => convert(raw, shape, |b| f16::from_le_bytes(b).to_f32()),
        S::BF16 => convert(raw, shape, |b| bf16::from_le_bytes(b).to_f32()),
        S::F64 => convert(raw, shape, |b| f64::from_le_bytes(b) as f32),
        _ => return None,
    })
}

/// `raw` read as `W`-byte values through `value`, transposed from `[rows, cols]` if given.
fn convert<const W: usize>(raw: &[u8], transpose: Option<(usize, usize)>, value: impl Fn([u8; W]) -> f32) -> Vec<f32> {
    let at = |i: usize| value(raw[i * W..i * W + W].try_into().expect("W bytes"));
    let Some((rows, cols)) = transpose else {
        return raw.chunks_exact(W).map(|b| value(b.try_into().expect("W bytes"))).collect();
    };
    // out[c, r] = in[r, c], in tiles that stay in cache.
    const TILE: usize = 32;
    let mut out = vec![0.0f32; rows * cols];
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                for c in c0..(c0 + TILE).min(cols) {
                    out[c * rows + r] = at(r * cols + c);
                }
            }
        }
    }
    out
}

/// burn-store's PyTorch naming of normalisation parameters (`weight`/`bias` for Burn's
/// `gamma`/`beta`), without its transposition, which [`safetensors_tensors`] has done.
#[derive(Clone)]
struct NormNames;

impl ModuleAdapter for NormNames {
    fn adapt(&self, tensor: PackTensor, _ctx: burn::store::ModuleContext<'_>) -> PackTensor {
        tensor
    }

    fn get_alternative_param_name(&self, param_name: &str, container_type: &str) -> Option<String> {
        PyTorchToBurnAdapter.get_alternative_param_name(param_name, container_type)
    }

    fn clone_box(&self) -> Box<dyn ModuleAdapter> {
        Box::new(self.clone())
    }
}

fn apply_error(path: &Path, error: &ApplyError, to_hf: &dyn Fn(&str) -> String) -> CheckpointError {
    let path = path.to_path_buf();
    match error {
        ApplyError::ShapeMismatch { path: p, expected, found } => CheckpointError::ShapeMismatch {
            path,
            tensor: to_hf(p),
            expected: expected.to_vec(),
            found: found.to_vec(),
        },
        ApplyError::DTypeMismatch { path: p, expected, found } => CheckpointError::DTypeMismatch {
            path,
            tensor: to_hf(p),
            expected: format!("{expected:?}"),
            found: format!("{found:?}"),
        },
        ApplyError::AdapterError { path: p, message } | ApplyError::LoadError { path: p, message } => {
            CheckpointError::BadTensor { path, tensor: to_hf(p), reason: message.clone() }
        }
    }
}

/// `model`, loaded in its configuration's stored form ([`HfConfig::stored_form`]), with every
/// 2-D parameter passed through `config`'s [`HfConfig::convert_stored`] by its Burn path.
pub(crate) fn from_stored<M: Module, C: HfConfig>(model: M, config: &C) -> M {
    struct FromStored<'a, C> {
        config: &'a C,
        path: ModulePath,
    }
    impl<C: HfConfig> ModuleMapper for FromStored<'_, C> {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            self.path.enter(name, container_type);
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.exit();
        }
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            if D != 2 {
                return param;
            }
            let path = self.path.joined();
            param.map(|weight| {
                let [rows, cols] = std::array::from_fn(|i| weight.dims()[i]);
                let out = self.config.convert_stored(&path, weight.reshape([rows, cols]));
                let dims = out.dims();
                out.reshape::<D, _>(std::array::from_fn::<usize, D, _>(|i| dims[i]))
            })
        }
    }
    model.map(&mut FromStored { config, path: ModulePath::default() })
}

/// `model` rebuilt as a model of the same type for configuration `hf` (its
/// [`HfConfig::hf_form`]), each parameter taking the values of the parameter of `model` that
/// `source` names; a parameter shared by several depths is copied to each.
pub(crate) fn rebuilt<M: PretrainedModel>(model: &M, hf: &M::Config, source: &dyn Fn(&str) -> String) -> Result<M, CheckpointError> {
    let held: HashMap<String, PackTensor> = model.collect(None, None, false).into_iter().map(|t| (t.name.clone(), t)).collect();
    let mut target = M::init(hf, &model.device());
    let mut unknown = Vec::new();
    let tensors: Vec<PackTensor> = Targets::of(&target)
        .shapes
        .into_keys()
        .filter_map(|path| {
            let from = source(&path);
            let Some(tensor) = held.get(&from) else {
                unknown.push(format!("{path} (from {from})"));
                return None;
            };
            let mut tensor = tensor.clone();
            tensor.name = path;
            tensor.param_id = None;
            Some(tensor)
        })
        .collect();
    if !unknown.is_empty() {
        unknown.sort();
        return Err(CheckpointError::HfForm { reason: format!("no parameter for {}", unknown.join(", ")) });
    }
    let result = target.apply(tensors, None, None, false);
    if let Some(error) = result.errors.first() {
        return Err(CheckpointError::HfForm { reason: format!("{error:?}") });
    }
    if !result.missing.is_empty() {
        let missing: Vec<&str> = result.missing.iter().map(|(p, _)| p.as_str()).collect();
        return Err(CheckpointError::HfForm { reason: format!("{} left unset", missing.join(", ")) });
    }
    Ok(target)
}

/// Save `module` as `dir/model.safetensors` with HF tensor names, and `config` as
/// `dir/config.json`. Both files are written to a temporary name first and renamed, so a
/// killed write never leaves a half-written checkpoint.
pub fn save_pretrained<M: Module>(
    module: &M,
    dir: &Path,
    keys: &KeyMap,
    config: &serde_json::Value,
) -> Result<(), CheckpointError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckpointError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let weights = dir.join("model.safetensors");
    let tmp = dir.join(".model.safetensors.tmp");
    let mut store = SafetensorsStore::from_file(&tmp)
        .with_to_adapter(BurnToPyTorchAdapter)
        .remap(KeyRemapper::from_compiled_patterns(keys.burn_to_hf()))
        .clear_metadata()
        .metadata("format", "pt")
        .overwrite(true);
    module
        .save_into(&mut store)
        .map_err(|e| CheckpointError::Unreadable { path: tmp.clone(), reason: e.to_string() })?;
    std::fs::rename(&tmp, &weights).map_err(io(&weights))?;
    let text = serde_json::to_string_pretty(config).expect("a JSON value serialises");
    write_atomic(&dir.join("config.json"), text.as_bytes())
}

/// Write `bytes` to `path` through a temporary file in the same directory and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    crate::fs::write_atomic(path, bytes).map_err(|source| CheckpointError::Io { path: path.to_path_buf(), source })
}

/// HF names an encoder's files hold but the model does not load: the `position_ids` and
/// `token_type_ids` buffers, and the tied MLM decoder (`tied_decoder`, a regex) when tied.
pub fn encoder_ignored(tied_decoder: Option<&str>) -> Vec<String> {
    let mut ignored = vec![r"(^|\.)position_ids$".to_string(), r"(^|\.)token_type_ids$".to_string()];
    ignored.extend(tied_decoder.map(str::to_string));
    ignored
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoder_table() -> KeyMap {
        KeyMap::new(&[
            ("encoder.layer.{n}.attention.self", "encoder.layers.{n}.attention"),
            ("encoder.layer.{n}.attention.output.dense", "encoder.layers.{n}.attention.output"),
            ("encoder.layer.{n}.attention.output.LayerNorm", "encoder.layers.{n}.attention_norm"),
            ("LayerNorm", "layer_norm"),
        ])
    }

    #[test]
    fn rows_map_both_ways_at_segment_boundaries() {
        let keys = encoder_table();
        let hf = "bert.encoder.layer.11.attention.self.query.weight";
        let burn = "bert.encoder.layers.11.attention.query.weight";
        assert_eq!(keys.to_burn(hf), burn);
        assert_eq!(keys.to_hf(burn), hf);
        assert_eq!(keys.to_burn("encoder.layer.3.attention.output.LayerNorm.bias"), "encoder.layers.3.attention_norm.bias");
        assert_eq!(keys.to_burn("embeddings.LayerNorm.weight"), "embeddings.layer_norm.weight");
        // `xLayerNorm` is not the segment `LayerNorm`.
        assert_eq!(keys.to_burn("embeddings.xLayerNorm.weight"), "embeddings.xLayerNorm.weight");
    }

    #[test]
    fn anchored_rows_match_only_at_the_start() {
        let keys = KeyMap::new(&[("^classifier", "^head.classifier"), ("^cls.seq_relationship", "^sentence_head.classifier")]);
        assert_eq!(keys.to_burn("classifier.weight"), "head.classifier.weight");
        assert_eq!(keys.to_burn("cls.seq_relationship.weight"), "sentence_head.classifier.weight");
        assert_eq!(keys.to_hf("sentence_head.classifier.bias"), "cls.seq_relationship.bias");
        assert_eq!(keys.to_hf("head.classifier.bias"), "classifier.bias");
        assert_eq!(keys.to_burn("bert.classifier.weight"), "bert.classifier.weight");
    }

    #[test]
    fn missing_directory_is_a_typed_error() {
        let err = WeightFiles::find(Path::new("/nonexistent/sesame")).unwrap_err();
        assert!(matches!(err, CheckpointError::NoWeights { .. }), "{err}");
    }
}
