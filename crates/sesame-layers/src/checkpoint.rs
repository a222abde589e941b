//! HuggingFace checkpoint IO shared by every family: find the weight files of a model
//! directory, load them into a Burn module through a per-family key table, report missing and
//! unused tensors, and save back in HF layout (`config.json` + `model.safetensors`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::store::{
    ApplyError, ApplyResult, BurnToPyTorchAdapter, FloatCastAdapter, KeyRemapper, ModuleAdapter,
    ModuleSnapshot, ModuleStore, PyTorchToBurnAdapter, PytorchStore, SafetensorsStore,
};
use burn::tensor::DType;
use regex::Regex;

/// Why a checkpoint could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
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
}

impl CheckpointSpec {
    /// Rules applied when loading: base-prefix handling first, then the family table.
    fn load_rules(&self) -> Vec<(Regex, String)> {
        let prefix = &self.family_prefix;
        let mut rules = vec![if self.has_base_prefix {
            let roots = self.base_roots.iter().map(|r| regex::escape(r)).collect::<Vec<_>>().join("|");
            (Regex::new(&format!(r"^({roots})\.")).expect("valid"), format!("{prefix}.${{1}}."))
        } else {
            (Regex::new(&format!(r"^{}\.", regex::escape(prefix))).expect("valid"), String::new())
        }];
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
    let ignored: Vec<Regex> = spec.ignored.iter().filter_map(|p| Regex::new(p).ok()).collect();
    let is_ignored = |hf: &str| ignored.iter().any(|r| r.is_match(hf));
    let mut missing: Option<BTreeMap<String, ()>> = None;
    let mut applied = BTreeSet::new();
    let mut unused = Vec::new();
    let mut skipped: Vec<(String, String)> = Vec::new();
    for path in &files.files {
        if !path.is_file() {
            return Err(CheckpointError::Io {
                path: path.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "file not found"),
            });
        }
        let remapper = KeyRemapper::from_compiled_patterns(rules.clone());
        let unreadable = |reason: String| CheckpointError::Unreadable { path: path.clone(), reason };
        let result: ApplyResult = match files.format {
            WeightFormat::Safetensors => {
                // Tensors of a dtype Burn lacks (U16, F8, …) would fail the whole file: leave
                // them out, and say so below (unused, or the reason a needed one is missing).
                let odd = unsupported_tensors(path).map_err(&unreadable)?;
                let store = match odd.is_empty() {
                    true => SafetensorsStore::from_file(path),
                    false => SafetensorsStore::from_bytes(Some(without(path, &odd).map_err(&unreadable)?)),
                };
                skipped.extend(odd);
                let mut store = store
                    .with_from_adapter(adapter())
                    .remap(remapper)
                    .map_indices_contiguous(false)
                    .allow_partial(true)
                    .validate(false);
                module.load_from(&mut store).map_err(|e| unreadable(e.to_string()))?
            }
            WeightFormat::PyTorch => {
                // `PytorchStore::apply_to` fixes its adapter; apply its tensors with ours.
                let mut store = PytorchStore::from_file(path).remap(remapper).map_indices_contiguous(false);
                let tensors: Vec<_> = store.get_all_tensors().map_err(|e| unreadable(e.to_string()))?.values().cloned().collect();
                // burn-store reads a tensor's bytes before it compares shapes; a pickle's
                // storages may be deflated, so a declared size the model cannot take is refused
                // from the pickle's metadata, before anything is decompressed.
                let expected = lazy_shapes(module);
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
        };
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
    let mut check = NonFinite::default();
    module.visit(&mut check);
    if let Some(bad) = check.found.into_iter().find(|p| applied.contains(p)) {
        return Err(CheckpointError::NonFinite { path: files.files[0].clone(), tensor: burn_to_hf(&bad) });
    }
    Ok(LoadReport {
        applied: applied.len(),
        initialized: optional.iter().map(|p| burn_to_hf(p)).collect(),
        unused,
    })
}

/// Every float parameter's shape by Burn path, read without initialising anything.
fn lazy_shapes<M: Module>(module: &M) -> std::collections::HashMap<String, Vec<usize>> {
    #[derive(Default)]
    struct Shapes {
        path: Vec<String>,
        shapes: std::collections::HashMap<String, Vec<usize>>,
    }
    impl burn::module::ModuleVisitor for Shapes {
        fn enter_module(&mut self, name: &str, _container_type: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<burn::prelude::Tensor<D>>) {
            self.shapes.insert(self.path.join("."), param.lazy_shape().to_vec());
        }
    }
    let mut visitor = Shapes::default();
    module.visit(&mut visitor);
    visitor.shapes
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
    path: Vec<String>,
    found: Vec<String>,
}

impl burn::module::ModuleVisitor for NonFinite {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<burn::prelude::Tensor<D>>) {
        if !param.is_initialized() {
            return; // not loaded: nothing to check (and nothing to allocate)
        }
        // x - x is 0 for every finite x and NaN otherwise: one sum per tensor tells.
        let t = param.val();
        let finite = (t.clone() - t).sum().into_scalar::<f32>().is_finite();
        if !finite {
            self.found.push(self.path.join("."));
        }
    }
}

/// The tensors of a safetensors file whose dtype Burn cannot read, `(name, dtype)`, from the
/// file's header alone.
fn unsupported_tensors(path: &Path) -> Result<Vec<(String, String)>, String> {
    use std::io::Read;
    const READABLE: [&str; 12] = ["F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U64", "U32", "U8", "BOOL"];
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut len = [0u8; 8];
    if file.read_exact(&mut len).is_err() {
        return Ok(Vec::new()); // too short to be safetensors: the store reports it
    }
    let len = u64::from_le_bytes(len);
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    if len > size.saturating_sub(8) || len > 100_000_000 {
        return Ok(Vec::new()); // a corrupt header: the store reports it
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header).map_err(|e| e.to_string())?;
    let Ok(serde_json::Value::Object(entries)) = serde_json::from_slice::<serde_json::Value>(&header) else {
        return Ok(Vec::new());
    };
    Ok(entries
        .into_iter()
        .filter(|(name, _)| name != "__metadata__")
        .filter_map(|(name, info)| {
            let dtype = info.get("dtype")?.as_str()?.to_string();
            (!READABLE.contains(&dtype.as_str())).then_some((name, dtype))
        })
        .collect())
}

/// The bytes of the safetensors file at `path` without the tensors `leave_out`.
fn without(path: &Path, leave_out: &[(String, String)]) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let file = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| e.to_string())?;
    let kept: Vec<(String, safetensors::tensor::TensorView)> =
        file.tensors().into_iter().filter(|(name, _)| !leave_out.iter().any(|(n, _)| n == name)).collect();
    safetensors::serialize(kept, None).map_err(|e| e.to_string())
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
    sesame_text::fs::write_atomic(path, bytes).map_err(|source| CheckpointError::Io { path: path.to_path_buf(), source })
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
