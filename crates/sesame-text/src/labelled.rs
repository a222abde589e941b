//! Users' labelled text for fine-tuning: rows of a text (and optionally a second text, for
//! sentence pairs) and a label, from CSV, TSV or JSON-lines files, with the label kind read from
//! the values as transformers' `run_classification.py` reads it: strings or integers are classes,
//! floats are regression targets, lists are multi-label sets.
//!
//! Every problem is reported with the file, the line and the column or field.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A problem in a labelled file, with where it is.
#[derive(Debug, thiserror::Error)]
pub enum LabelledError {
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Something wrong at a line of the file.
    #[error("{}:{line}: {reason}", path.display())]
    At {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// What is wrong.
        reason: String,
    },
    /// Something wrong with the file as a whole.
    #[error("{}: {reason}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Which columns (CSV/TSV header names) or fields (JSON lines) hold what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Columns {
    /// The text.
    pub text: String,
    /// The second text of a pair.
    pub pair: Option<String>,
    /// The label.
    pub label: String,
}

impl Default for Columns {
    /// `text` and `label` (`--text-column`, `--label-column`), no pair.
    fn default() -> Self {
        Self { text: "text".into(), pair: None, label: "label".into() }
    }
}

/// One label as written in the file.
#[derive(Clone, Debug, PartialEq)]
pub enum RawLabel {
    /// A class name (a string, or an integer written as one).
    Class(String),
    /// An integer (a class id, named by its digits).
    Integer(i64),
    /// A float (a regression target).
    Float(f64),
    /// A set of class names (multi-label).
    Set(Vec<String>),
}

impl RawLabel {
    fn kind(&self) -> &'static str {
        match self {
            RawLabel::Class(_) => "a string",
            RawLabel::Integer(_) => "an integer",
            RawLabel::Float(_) => "a float",
            RawLabel::Set(_) => "a list",
        }
    }
}

/// One labelled row.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelledRow {
    /// The text.
    pub text: String,
    /// The second text of a pair.
    pub pair: Option<String>,
    /// The label as written.
    pub label: RawLabel,
    /// The line it starts on (1-based), for messages.
    pub line: u64,
}

/// Read the rows of `path`: CSV (`.csv`), TSV (`.tsv`, `.tab`) with a header row, or JSON lines
/// (`.jsonl`, `.json`: one object per line). Empty texts, missing columns, unreadable quoting
/// and text that is not UTF-8 are errors naming the line; so is a file without rows.
pub fn read_rows(path: &Path, columns: &Columns) -> Result<Vec<LabelledRow>, LabelledError> {
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).unwrap_or_default();
    let rows = match ext.as_str() {
        "csv" => read_delimited(path, columns, b',')?,
        "tsv" | "tab" => read_delimited(path, columns, b'\t')?,
        "jsonl" | "json" => read_json_lines(path, columns)?,
        _ => return Err(LabelledError::File { path: path.into(), reason: "unknown format: name it .csv, .tsv or .jsonl".into() }),
    };
    if rows.is_empty() {
        return Err(LabelledError::File { path: path.into(), reason: "no labelled rows".into() });
    }
    Ok(rows)
}

/// An error at `line` of `path`.
pub(crate) fn at(path: &Path, line: u64, reason: impl Into<String>) -> LabelledError {
    LabelledError::At { path: path.into(), line, reason: reason.into() }
}

/// The lines of a file's `bytes`, numbered from 1, without a closing `\r`; a line that is not
/// UTF-8 is an error naming it.
pub(crate) fn lines<'a>(path: &'a Path, bytes: &'a [u8]) -> impl Iterator<Item = Result<(u64, &'a str), LabelledError>> + 'a {
    bytes.split(|&b| b == b'\n').enumerate().map(move |(i, raw)| {
        let line = i as u64 + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        std::str::from_utf8(raw).map(|t| (line, t)).map_err(|e| at(path, line, format!("not UTF-8 text (byte {})", e.valid_up_to() + 1)))
    })
}

/// A label cell of a CSV/TSV file: a JSON list is a set, an integer or float a number, anything
/// else a class name.
fn parse_cell_label(cell: &str) -> Result<RawLabel, String> {
    let cell = cell.trim();
    if cell.starts_with('[') {
        let items: Vec<serde_json::Value> = serde_json::from_str(cell).map_err(|e| format!("label {cell:?} looks like a list but is not JSON: {e}"))?;
        return set_of(&items);
    }
    if let Ok(i) = cell.parse::<i64>() {
        return Ok(RawLabel::Integer(i));
    }
    match cell.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(RawLabel::Float(f)),
        Ok(_) => Err(format!("label {cell:?} is not a finite number")),
        Err(_) => Ok(RawLabel::Class(cell.to_string())),
    }
}

fn set_of(items: &[serde_json::Value]) -> Result<RawLabel, String> {
    items
        .iter()
        .map(|v| match v {
            serde_json::Value::String(s) => Ok(s.clone()),
            serde_json::Value::Number(n) if n.is_i64() => Ok(n.to_string()),
            other => Err(format!("a label list holds {other}, not a class name")),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(RawLabel::Set)
}

fn read_delimited(path: &Path, columns: &Columns, delimiter: u8) -> Result<Vec<LabelledRow>, LabelledError> {
    let mut reader = csv::ReaderBuilder::new().delimiter(delimiter).flexible(false).from_path(path).map_err(|e| csv_error(path, e))?;
    let header = reader.headers().map_err(|e| csv_error(path, e))?.clone();
    let find = |name: &str, flag: &str| {
        header.iter().position(|h| h.trim() == name).ok_or_else(|| {
            let have: Vec<&str> = header.iter().collect();
            at(path, 1, format!("no column {name:?} ({flag}); the header has {have:?}"))
        })
    };
    let text = find(&columns.text, "--text-column")?;
    let pair = columns.pair.as_deref().map(|p| find(p, "--text-pair-column")).transpose()?;
    let label = find(&columns.label, "--label-column")?;
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| csv_error(path, e))?;
        let line = record.position().map_or(0, |p| p.line());
        let cell = |i: usize, name: &str| -> Result<String, LabelledError> {
            let value = record.get(i).unwrap_or_default();
            if value.trim().is_empty() {
                return Err(at(path, line, format!("empty {name:?}")));
            }
            Ok(value.to_string())
        };
        let label_cell = cell(label, &columns.label)?;
        let label = parse_cell_label(&label_cell).map_err(|reason| at(path, line, format!("column {:?}: {reason}", columns.label)))?;
        rows.push(LabelledRow {
            text: cell(text, &columns.text)?,
            pair: pair.zip(columns.pair.as_deref()).map(|(p, name)| cell(p, name)).transpose()?,
            label,
            line,
        });
    }
    Ok(rows)
}

/// A CSV reader's error as one line naming the file and, where known, the line.
pub(crate) fn csv_error(path: &Path, e: csv::Error) -> LabelledError {
    let line = e.position().map(|p| p.line());
    let reason = match e.kind() {
        csv::ErrorKind::Utf8 { err, .. } => format!("not UTF-8 text (field {})", err.field() + 1),
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => format!("{len} fields where the header has {expected_len} (unbalanced quotes?)"),
        csv::ErrorKind::Io(err) => return LabelledError::Io { path: path.into(), source: std::io::Error::new(err.kind(), err.to_string()) },
        _ => e.to_string(),
    };
    match line {
        Some(line) => at(path, line, reason),
        None => LabelledError::File { path: path.into(), reason },
    }
}

fn read_json_lines(path: &Path, columns: &Columns) -> Result<Vec<LabelledRow>, LabelledError> {
    let bytes = std::fs::read(path).map_err(|source| LabelledError::Io { path: path.into(), source })?;
    let mut rows = Vec::new();
    for item in lines(path, &bytes) {
        let (line, text) = item?;
        if text.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| at(path, line, format!("not a JSON object: {e}")))?;
        let object = value.as_object().ok_or_else(|| at(path, line, "not a JSON object"))?;
        let string = |name: &str, flag: &str| -> Result<String, LabelledError> {
            match object.get(name) {
                Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
                Some(serde_json::Value::String(_)) => Err(at(path, line, format!("empty {name:?}"))),
                Some(other) => Err(at(path, line, format!("field {name:?} is {other}, not a string"))),
                None => Err(at(path, line, format!("no field {name:?} ({flag})"))),
            }
        };
        let label = match object.get(&columns.label) {
            Some(serde_json::Value::String(s)) if s.trim().is_empty() => return Err(at(path, line, format!("empty {:?}", columns.label))),
            Some(serde_json::Value::String(s)) => RawLabel::Class(s.clone()),
            Some(serde_json::Value::Number(n)) => match n.as_i64() {
                Some(i) => RawLabel::Integer(i),
                None => RawLabel::Float(n.as_f64().filter(|f| f.is_finite()).ok_or_else(|| at(path, line, format!("label {n} is not a finite number")))?),
            },
            Some(serde_json::Value::Array(items)) => set_of(items).map_err(|reason| at(path, line, format!("field {:?}: {reason}", columns.label)))?,
            Some(other) => return Err(at(path, line, format!("field {:?} is {other}, not a class, a number or a list", columns.label))),
            None => return Err(at(path, line, format!("no field {:?} (--label-column)", columns.label))),
        };
        rows.push(LabelledRow {
            text: string(&columns.text, "--text-column")?,
            pair: columns.pair.as_deref().map(|p| string(p, "--text-pair-column")).transpose()?,
            label,
            line,
        });
    }
    Ok(rows)
}

/// What a classification run predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemType {
    /// One class per row (HF `single_label_classification`).
    SingleLabelClassification,
    /// Any set of classes per row (HF `multi_label_classification`).
    MultiLabelClassification,
    /// One number per row (HF `regression`).
    Regression,
}

impl ProblemType {
    /// HF's `problem_type` string.
    pub fn hf_name(self) -> &'static str {
        match self {
            ProblemType::SingleLabelClassification => "single_label_classification",
            ProblemType::MultiLabelClassification => "multi_label_classification",
            ProblemType::Regression => "regression",
        }
    }
}

/// The label kind of `rows` (run_classification's rule): lists are multi-label, floats
/// regression (integers among floats are numbers too), strings and integers classes. A column
/// that mixes lists, numbers and strings is an error naming the first row that differs.
pub fn problem_type(path: &Path, rows: &[LabelledRow]) -> Result<ProblemType, LabelledError> {
    let family = |l: &RawLabel| match l {
        RawLabel::Set(_) => 0,
        RawLabel::Integer(_) | RawLabel::Float(_) => 1,
        RawLabel::Class(_) => 2,
    };
    let first = rows.first().ok_or_else(|| LabelledError::File { path: path.into(), reason: "no labelled rows".into() })?;
    if let Some(other) = rows.iter().find(|r| family(&r.label) != family(&first.label)) {
        return Err(at(path, other.line, format!("the label column mixes types: {} here, {} at line {}", other.label.kind(), first.label.kind(), first.line)));
    }
    Ok(match first.label {
        RawLabel::Set(_) => ProblemType::MultiLabelClassification,
        RawLabel::Class(_) => ProblemType::SingleLabelClassification,
        _ if rows.iter().any(|r| matches!(r.label, RawLabel::Float(_))) => ProblemType::Regression,
        _ => ProblemType::SingleLabelClassification,
    })
}

/// The class names of training `rows`, in order: numerically when every class is an integer,
/// else as strings (as `run_classification.py` sorts its label list).
pub fn class_names(rows: &[LabelledRow]) -> Vec<String> {
    sorted_classes(rows.iter().map(|r| &r.label))
}

/// The distinct classes of `labels` (sets contribute their members; floats nothing), sorted
/// numerically when every class is an integer, else as strings.
pub fn sorted_classes<'a>(labels: impl Iterator<Item = &'a RawLabel>) -> Vec<String> {
    let mut integers = BTreeSet::new();
    let mut names = BTreeSet::new();
    for label in labels {
        match label {
            RawLabel::Integer(i) => {
                integers.insert(*i);
            }
            RawLabel::Class(c) => {
                names.insert(c.clone());
            }
            RawLabel::Set(s) => names.extend(s.iter().cloned()),
            RawLabel::Float(_) => {}
        }
    }
    if names.is_empty() {
        integers.into_iter().map(|i| i.to_string()).collect()
    } else {
        names.extend(integers.into_iter().map(|i| i.to_string()));
        names.into_iter().collect()
    }
}

/// A row's training target.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// A class index.
    Class(usize),
    /// One yes/no per class.
    Classes(Vec<bool>),
    /// A regression target.
    Value(f64),
}

/// The targets of `rows` of `path` for `problem` with `classes` (the training file's): a class
/// the training data never had is an error naming the line and the label.
pub fn targets(path: &Path, rows: &[LabelledRow], problem: ProblemType, classes: &[String]) -> Result<Vec<Target>, LabelledError> {
    let index = |name: &str, line: u64| {
        classes.iter().position(|c| c == name).ok_or_else(|| at(path, line, format!("label {name:?} does not occur in the training data (it has {classes:?})")))
    };
    rows.iter()
        .map(|r| match (problem, &r.label) {
            (ProblemType::Regression, RawLabel::Integer(i)) => Ok(Target::Value(*i as f64)),
            (ProblemType::Regression, RawLabel::Float(f)) => Ok(Target::Value(*f)),
            (ProblemType::SingleLabelClassification, RawLabel::Class(c)) => index(c, r.line).map(Target::Class),
            (ProblemType::SingleLabelClassification, RawLabel::Integer(i)) => index(&i.to_string(), r.line).map(Target::Class),
            (ProblemType::MultiLabelClassification, RawLabel::Set(s)) => {
                let mut yes = vec![false; classes.len()];
                for c in s {
                    yes[index(c, r.line)?] = true;
                }
                Ok(Target::Classes(yes))
            }
            (ProblemType::MultiLabelClassification, RawLabel::Class(c)) => {
                let mut yes = vec![false; classes.len()];
                yes[index(c, r.line)?] = true;
                Ok(Target::Classes(yes))
            }
            (problem, label) => Err(at(path, r.line, format!("{} label where the task is {}", label.kind(), problem.hf_name()))),
        })
        .collect()
}
