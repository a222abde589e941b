//! Helpers for Sesame's cross-crate tests: fixtures written by `scripts/make_fixtures.py`,
//! the backends compiled into this build, and tolerance checks.

pub mod broken;
pub mod parity;
pub mod training;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::prelude::*;
use safetensors::{Dtype, SafeTensors};
pub use sesame_train::Backend;

/// A scratch path under the system temp dir, `sesame-{name}-{pid}`: removed when dropped,
/// unless its test is failing (then kept, to look at), so that runs of the suites do not fill
/// the temp dir.
pub struct Scratch(PathBuf);

impl Scratch {
    /// The path for `name`, whatever an earlier run left there removed; not created.
    pub fn path(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("sesame-{name}-{}", std::process::id()));
        remove(&path);
        Self(path)
    }

    /// [`Scratch::path`], created as an empty directory.
    pub fn dir(name: &str) -> Self {
        let scratch = Self::path(name);
        std::fs::create_dir_all(&scratch.0).unwrap_or_else(|e| panic!("{}: {e}", scratch.0.display()));
        scratch
    }

    /// [`Scratch::dir`] holding a copy of the files of fixture directory `fixture`
    /// (`bert/base-seqcls-single`), for a test to change.
    pub fn copy_of(fixture: &str, name: &str) -> Self {
        let scratch = Self::dir(name);
        for entry in std::fs::read_dir(fixtures_dir().join(fixture)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::copy(&path, scratch.join(path.file_name().unwrap())).unwrap();
            }
        }
        scratch
    }

    /// Change the `config.json` of this directory by `edit`.
    pub fn edit_config(&self, edit: impl FnOnce(&mut serde_json::Value)) {
        let path = self.0.join("config.json");
        let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut config);
        std::fs::write(&path, config.to_string()).unwrap();
    }
}

/// Remove `path`, a directory or a file, if it is there.
fn remove(path: &Path) {
    let _ = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

/// So that `&scratch` is a `PathBuf` where one is taken (std's `From<&T>`), the guard still
/// removing it when dropped.
impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            remove(&self.0);
        }
    }
}

/// Max-abs tolerance against HF references (float32 on both sides).
pub const TOLERANCE: f32 = 1e-4;

/// The path in the environment variable `var`; `None` (tests skip, saying which variable is
/// `what`) outside CI, a failure under CI.
fn required_path(var: &str, what: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var_os("CI").is_some() => panic!("{var} must be set under CI"),
        None => {
            eprintln!("skipped: set {var} to {what}");
            None
        }
    }
}

/// The Python with transformers (`SESAME_PYTHON`); `None` (tests skip, with a note) outside CI.
pub fn python() -> Option<PathBuf> {
    required_path("SESAME_PYTHON", "a python with transformers")
}

/// all-MiniLM-L6-v2's directory (`SESAME_MINILM_DIR`); `None` (tests skip, with a note) outside CI.
pub fn minilm() -> Option<PathBuf> {
    required_path("SESAME_MINILM_DIR", "the all-MiniLM-L6-v2 directory")
}

/// One `scripts/hf_forward.py --serve` process for the tests of this binary: torch and
/// transformers are imported once, not once per model checked.
struct HfServer {
    _child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

static HF_SERVER: std::sync::Mutex<Option<HfServer>> = std::sync::Mutex::new(None);

/// Load `model_dir` in transformers as `arch` (strictly: no missing, unexpected or mismatched
/// tensors), run it on the `input.*` tensors of `inputs` (an `io.safetensors`) and write its
/// outputs as `output.*` tensors to `out`. Requests from parallel tests take turns in one
/// Python process (started on first use, restarted if it died); the error is transformers'.
pub fn hf_forward(python: &Path, model_dir: &Path, arch: &str, inputs: &Path, out: &Path) -> Result<(), String> {
    use std::io::{BufRead, Write};
    let mut server = HF_SERVER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if server.is_none() {
        let mut child = std::process::Command::new(python)
            .arg(fixtures_dir().join("../scripts/hf_forward.py"))
            .arg("--serve")
            .env("HF_HUB_OFFLINE", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
        let (stdin, stdout) = (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"));
        *server = Some(HfServer { _child: child, stdin, stdout: std::io::BufReader::new(stdout) });
    }
    let running = server.as_mut().expect("started above");
    let request = serde_json::json!([model_dir, arch, inputs, out]).to_string();
    let mut answer = String::new();
    let exchanged = writeln!(running.stdin, "{request}")
        .and_then(|_| running.stdin.flush())
        .and_then(|_| running.stdout.read_line(&mut answer));
    match exchanged {
        Ok(n) if n > 0 => match answer.trim() {
            "ok" => Ok(()),
            error => Err(error.to_string()),
        },
        _ => {
            // The process died (its error is on stderr): the next request starts another.
            *server = None;
            Err(format!("scripts/hf_forward.py --serve exited on {request}"))
        }
    }
}

/// The repository's `fixtures/` directory.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// `(backend, device)` for every backend compiled into this test build.
pub fn devices() -> Vec<(Backend, Device)> {
    let list: Vec<_> = Backend::compiled()
        .into_iter()
        .map(|b| (b, b.device().expect("compiled backends have a device")))
        .collect();
    assert!(!list.is_empty(), "no backend compiled in");
    list
}

/// One tensor of a fixture's `io.safetensors`.
#[derive(Clone, Debug)]
pub struct Array {
    /// Shape.
    pub shape: Vec<usize>,
    /// Values as f32 (float tensors).
    pub f32: Vec<f32>,
    /// Values as i64 (integer tensors).
    pub i64: Vec<i64>,
}

/// A fixture directory: the HF model plus its recorded inputs and outputs.
pub struct Fixture {
    /// The model directory.
    pub dir: PathBuf,
    /// `input.*`, `label.*` and `output.*` tensors.
    pub io: HashMap<String, Array>,
    /// `fixture.json`.
    pub meta: serde_json::Value,
}

impl Fixture {
    /// Open `fixtures/<path>`.
    pub fn open(path: &str) -> Fixture {
        let dir = fixtures_dir().join(path);
        let bytes = std::fs::read(dir.join("io.safetensors")).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let st = SafeTensors::deserialize(&bytes).expect("valid io.safetensors");
        let mut io = HashMap::new();
        for (name, view) in st.tensors() {
            let data = view.data();
            let (f, i) = match view.dtype() {
                Dtype::F32 => (data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(), vec![]),
                Dtype::I64 => (vec![], data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()),
                other => panic!("unexpected dtype {other:?} for {name}"),
            };
            io.insert(name, Array { shape: view.shape().to_vec(), f32: f, i64: i });
        }
        let meta = std::fs::read_to_string(dir.join("fixture.json"))
            .map(|t| serde_json::from_str(&t).expect("valid fixture.json"))
            .unwrap_or(serde_json::Value::Null);
        Fixture { dir, io, meta }
    }

    /// A tensor by name, or a panic naming the fixture.
    pub fn get(&self, name: &str) -> &Array {
        self.io.get(name).unwrap_or_else(|| panic!("{} has no `{name}`", self.dir.display()))
    }

    /// Whether the fixture holds `name`.
    pub fn has(&self, name: &str) -> bool {
        self.io.contains_key(name)
    }

    /// An integer input as a `[D]`-dimensional tensor, flattened to `shape` when given.
    pub fn int<const D: usize>(&self, name: &str, device: &Device) -> Tensor<D, Int> {
        let a = self.get(name);
        let shape: [usize; D] = flatten_shape(&a.shape);
        Tensor::from_data(TensorData::new(a.i64.clone(), shape), device)
    }

    /// A float input as a `[D]`-dimensional tensor.
    pub fn float<const D: usize>(&self, name: &str, device: &Device) -> Tensor<D> {
        let a = self.get(name);
        let shape: [usize; D] = flatten_shape(&a.shape);
        Tensor::from_data(TensorData::new(a.f32.clone(), shape), device)
    }

    /// Number of hidden-state / attention entries recorded (`output.hidden_states.N`).
    pub fn count(&self, prefix: &str) -> usize {
        (0..).take_while(|i| self.has(&format!("{prefix}.{i}"))).count()
    }
}

/// Collapse leading dimensions so that `shape` has `D` dimensions (`[2,3,7]` -> `[6,7]`).
fn flatten_shape<const D: usize>(shape: &[usize]) -> [usize; D] {
    let mut out = [1usize; D];
    if shape.len() >= D {
        let extra = shape.len() - D;
        out[0] = shape[..=extra].iter().product();
        out[1..].copy_from_slice(&shape[extra + 1..]);
    } else {
        out[D - shape.len()..].copy_from_slice(shape);
    }
    out
}

/// The f32 tensors of a safetensors file, by name (other dtypes are skipped).
pub fn read_f32_tensors(path: &Path) -> HashMap<String, Vec<f32>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    st.tensors()
        .into_iter()
        .filter(|(_, v)| v.dtype() == Dtype::F32)
        .map(|(name, v)| (name, v.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()))
        .collect()
}

/// Names whose values differ by more than `tol` between `ours` and `reference` (a missing name
/// counts as different), with the difference, sorted.
pub fn differing(ours: &HashMap<String, Vec<f32>>, reference: &HashMap<String, Vec<f32>>, tol: f32) -> Vec<String> {
    let mut out: Vec<String> = reference
        .iter()
        .filter_map(|(name, r)| {
            let diff = ours.get(name).map_or(f32::INFINITY, |v| max_abs_diff(v, r));
            (!(diff <= tol)).then(|| format!("{name}: {diff:e}"))
        })
        .collect();
    out.sort();
    out
}

/// Values of a tensor as f32.
pub fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().expect("f32 data")
}

/// Max |a - b|, or infinity when the lengths differ or a value is not finite.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter().zip(b).map(|(x, y)| if x.is_finite() && y.is_finite() { (x - y).abs() } else { f32::INFINITY }).fold(0.0, f32::max)
}

/// The largest difference between `a` and `b`, element by element: infinite when their lengths
/// differ or when one of a pair is not finite and the other is not the same (two `-inf` scores,
/// a token both sides removed, are equal).
pub fn gap(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter().zip(b).map(|(x, y)| if x == y { 0.0 } else if x.is_finite() && y.is_finite() { (x - y).abs() } else { f32::INFINITY }).fold(0.0, f32::max)
}

/// Replays transformers' sampled tokens (`tokens[row]`, the generated part of each row), checking
/// that each had a chance under our probabilities: the draw is torch's, every number it drew
/// from is ours.
pub struct Replay {
    tokens: Vec<Vec<u32>>,
    step: Vec<usize>,
}

impl Replay {
    /// Replay `tokens[row]` for each row, in order.
    pub fn new(tokens: Vec<Vec<u32>>) -> Self {
        let step = vec![0; tokens.len()];
        Self { tokens, step }
    }
}

impl sesame_generate::TokenSampler for Replay {
    fn draw(&mut self, row: usize, probs: &[f32]) -> u32 {
        let token = *self.tokens[row].get(self.step[row]).unwrap_or_else(|| panic!("row {row}: drew more tokens than transformers generated"));
        self.step[row] += 1;
        assert!(probs[token as usize] > 0.0, "row {row}: transformers sampled {token}, which our warpers removed");
        token
    }
}

/// Collects comparisons and fails once with every mismatch listed.
#[derive(Default)]
pub struct Checker {
    failures: Vec<String>,
    checked: usize,
}

impl Checker {
    /// Compare `actual` with the fixture's `expected` array under `tol`.
    pub fn close<const D: usize>(&mut self, what: &str, actual: Tensor<D>, expected: &Array, tol: f32) {
        self.checked += 1;
        let dims = actual.dims().to_vec();
        if dims.iter().product::<usize>() != expected.shape.iter().product::<usize>() {
            self.failures.push(format!("{what}: shape {dims:?} vs reference {:?}", expected.shape));
            return;
        }
        let diff = max_abs_diff(&values(actual), &expected.f32);
        if !(diff <= tol) {
            self.failures.push(format!("{what}: max abs diff {diff:e} > {tol:e}"));
        }
    }

    /// Record a comparison made on the host, `diff` its max abs difference, under
    /// [`TOLERANCE`].
    pub fn close_values(&mut self, what: &str, diff: f32) {
        self.checked += 1;
        if !(diff <= TOLERANCE) {
            self.failures.push(format!("{what}: max abs diff {diff:e} > {TOLERANCE:e}"));
        }
    }

    /// Record a failure.
    pub fn fail(&mut self, message: String) {
        self.failures.push(message);
    }

    /// Panic with every failure, or with "nothing checked" when nothing was compared.
    pub fn finish(self, context: &str) {
        assert!(self.checked > 0, "{context}: nothing was compared");
        assert!(self.failures.is_empty(), "{context}:\n  {}", self.failures.join("\n  "));
    }
}

/// Every `output.{mode}.*` tensor of fixture `f` equals ours of the same HF name within
/// [`TOLERANCE`], and we give no output the fixture lacks (`ours` as a model's `named()` lists
/// them).
pub fn compare_named(f: &Fixture, mode: &str, ours: Vec<sesame_layers::NamedOutput>, context: &str) {
    let ours: std::collections::BTreeMap<String, Vec<f32>> =
        ours.into_iter().map(|(n, d)| (n, d.convert::<f32>().try_to_vec::<f32>().unwrap())).collect();
    let prefix = format!("output.{mode}.");
    let theirs: std::collections::BTreeMap<&str, &Array> = f.io.iter().filter_map(|(k, v)| k.strip_prefix(&prefix).map(|n| (n, v))).collect();
    assert!(!theirs.is_empty(), "{context}: the fixture has no {mode} outputs");
    let mut failures = vec![];
    for (name, want) in &theirs {
        match ours.get(*name) {
            None => failures.push(format!("{name}: missing")),
            Some(got) => {
                let diff = max_abs_diff(got, &want.f32);
                if !(diff <= TOLERANCE) {
                    failures.push(format!("{name}: max abs diff {diff:e}"));
                }
            }
        }
    }
    for name in ours.keys().filter(|n| !theirs.contains_key(n.as_str())) {
        failures.push(format!("{name}: not among transformers' outputs"));
    }
    assert!(failures.is_empty(), "{context} ({mode}):\n  {}", failures.join("\n  "));
}
