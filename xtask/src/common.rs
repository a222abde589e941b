//! What the commands share: the backend flag, flag parsers, `--int8`, the texts a command
//! reads, `config.json`, the facade's options and pipelines, the load report. The dispatcher
//! (lib.rs) and every command file import it; it imports neither.

use std::path::PathBuf;

pub(crate) use sesame_train::cli::{finite_f32, model_dir};
use sesame::{Pipeline, PipelineOptions, Task};
use sesame_layers::Pooling;
use sesame_train::Backend;

/// The backend a command runs on.
#[derive(clap::Args)]
pub(crate) struct BackendArg {
    /// Backend to run on (must be compiled in; see `--features`).
    #[arg(long, value_enum)]
    pub(crate) backend: Option<Backend>,
}

impl BackendArg {
    pub(crate) fn device(&self) -> Result<burn::tensor::Device, String> {
        let backend = match self.backend {
            Some(b) => b,
            None => Backend::default_compiled().ok_or("no backend compiled in")?,
        };
        backend.device().map_err(|e| e.to_string())
    }
}

pub(crate) fn parse_pooling(s: &str) -> Result<Pooling, String> {
    s.parse().map_err(|e: sesame_layers::pooling::UnknownPooling| e.to_string())
}

/// A `--speed`: a threshold in [0, 1].
pub(crate) fn speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s} is not a speed in [0, 1] (a threshold on the normalised entropy)")),
    }
}

/// `--int8` of the command running: every model it loads is quantised.
static INT8: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Honour `--int8` on `device`: refused, with one line, where the products cannot run in int8.
pub(crate) fn set_int8(int8: bool, device: &burn::tensor::Device) -> Result<(), String> {
    if int8 && !sesame_layers::device::is_host_memory(device) {
        return Err(format!("--int8: int8 products run on the flex and ndarray backends, not on {device:?}; choose one with --backend"));
    }
    INT8.store(int8, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// `loaded` with its model quantised when the command runs with `--int8`.
pub(crate) fn int8_if_asked<M: burn::module::Module, C>(mut loaded: sesame_layers::Pretrained<M, C>) -> sesame_layers::Pretrained<M, C> {
    if INT8.load(std::sync::atomic::Ordering::Relaxed) {
        loaded.model = sesame_layers::int8::quantize(loaded.model);
    }
    loaded
}

/// Texts to run: from the command line (one JSON result for all), or read from `--input` a
/// chunk at a time (a JSON line per text), so that any number of texts streams through.
pub(crate) enum Texts {
    /// Given as arguments.
    Args(Vec<String>),
    /// Lines of a file or stdin.
    Lines { name: String, lines: std::io::Lines<Box<dyn std::io::BufRead>>, number: usize },
}

impl Texts {
    pub(crate) fn new(args: Vec<String>, input: Option<PathBuf>) -> Result<Self, String> {
        let Some(path) = input else {
            if args.is_empty() {
                return Err("no texts: give them as arguments, or read them with --input FILE (- for stdin)".into());
            }
            return Ok(Texts::Args(args));
        };
        let (name, reader) = open_input(&path)?;
        Ok(Texts::Lines { name, lines: std::io::BufRead::lines(reader), number: 0 })
    }

    /// Whether results stream as JSON lines.
    pub(crate) fn streams(&self) -> bool {
        matches!(self, Texts::Lines { .. })
    }

    /// The next (at most) `n` texts; empty at the end.
    pub(crate) fn next_chunk(&mut self, n: usize) -> Result<Vec<String>, String> {
        match self {
            Texts::Args(args) => Ok(std::mem::take(args)),
            Texts::Lines { name, lines, number } => {
                let mut chunk = Vec::new();
                for line in lines.by_ref().take(n) {
                    *number += 1;
                    let line = line.map_err(|e| format!("{name}: line {number}: {e}"))?;
                    chunk.push(match sesame_text::inputs::parse_input_line(&line, false) {
                        Ok(sesame_text::inputs::InputLine::Text(text)) => text,
                        Ok(sesame_text::inputs::InputLine::Ids(_)) => return Err(format!("{name}: line {number}: token ids are for generate; this command reads texts")),
                        Err(e) => return Err(format!("{name}: line {number}: {e}")),
                    });
                }
                Ok(chunk)
            }
        }
    }
}

/// The reader of `--input PATH` (`-`: stdin), and its name for errors.
pub(crate) fn open_input(path: &std::path::Path) -> Result<(String, Box<dyn std::io::BufRead>), String> {
    if path.as_os_str() == "-" {
        return Ok(("stdin".into(), Box::new(std::io::BufReader::new(std::io::stdin()))));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("--input {}: {e}", path.display()))?;
    Ok((path.display().to_string(), Box::new(std::io::BufReader::new(file))))
}

/// Texts read per chunk from `--input`: enough for many batches, few enough to stream.
const CHUNK: usize = 4096;

/// Run `each` on `texts` chunk by chunk: with `--input`, print a JSON line per text as each
/// chunk is done and return nothing; otherwise return the JSON array of all results.
pub(crate) fn run_texts<T: serde::Serialize>(texts: &mut Texts, mut each: impl FnMut(&[&str]) -> Result<Vec<T>, String>) -> Result<String, String> {
    use std::io::Write;
    let mut all = Vec::new();
    loop {
        let chunk = texts.next_chunk(CHUNK)?;
        if chunk.is_empty() {
            break;
        }
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let results = each(&refs)?;
        if texts.streams() {
            let mut out = std::io::stdout().lock();
            for r in &results {
                let line = serde_json::to_string(r).expect("JSON");
                writeln!(out, "{line}").map_err(|e| format!("cannot write to stdout: {e}"))?;
            }
            out.flush().map_err(|e| format!("cannot write to stdout: {e}"))?;
        } else {
            all.extend(results);
        }
    }
    Ok(if texts.streams() { String::new() } else { serde_json::to_string(&all).expect("JSON") })
}

/// `dir/config.json` as a JSON object, or an error naming the file.
pub(crate) fn config_json(dir: &std::path::Path) -> Result<serde_json::Value, String> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if !json.is_object() {
        return Err(format!("{}: not a JSON object", path.display()));
    }
    Ok(json)
}

/// The facade's options for a command on `device` (`--int8` checked against it), at most
/// `batch_size` texts a forward pass.
pub(crate) fn pipeline_options(device: burn::tensor::Device, int8: bool, batch_size: usize) -> Result<PipelineOptions, String> {
    set_int8(int8, &device)?;
    Ok(PipelineOptions { device: Some(device), int8, batch_size, ..Default::default() })
}

/// The facade's pipeline for `task` on `dir`, its load report on stderr.
pub(crate) fn load_pipeline(task: Task, dir: &std::path::Path, options: PipelineOptions) -> Result<Pipeline, String> {
    let pipeline = sesame::pipeline(task, dir, options).map_err(|e| e.to_string())?;
    report(pipeline.load_report());
    Ok(pipeline)
}

pub(crate) fn report(report: &sesame_layers::LoadReport) {
    if !report.initialized.is_empty() || !report.unused.is_empty() {
        eprintln!("note: {report}");
    }
}
