//! What the tagging and QA fine-tuning tests share: the fixture model, scratch directories, the
//! binary, and flags with defaults.
#![allow(dead_code)] // each test file uses part of it

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The small BERT fixture (40 positions), its tokenizer included.
pub fn model_dir() -> PathBuf {
    repo().join("fixtures/bert/base-fill-mask")
}

/// A fresh directory for test `name` of `suite`.
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sesame-finetune-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `cargo xtask ARGS`: its stdout, or its stderr when it fails.
pub fn xtask(args: &[String]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).current_dir(repo()).output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// `cargo xtask finetune --task TASK ARGS`: its stdout's last line as JSON, or its stderr.
pub fn finetune(task: &str, args: &[String]) -> Result<serde_json::Value, String> {
    let all: Vec<String> = ["finetune", "--task", task].into_iter().map(String::from).chain(args.iter().cloned()).collect();
    let stdout = xtask(&all)?;
    serde_json::from_str(stdout.lines().last().unwrap_or("")).map_err(|e| format!("{e}: {stdout}"))
}

/// `defaults` (flag, value) but those `extra` names, then `--quiet` and `extra`.
pub fn flags(defaults: &[(&str, &str)], extra: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = defaults.iter().filter(|(flag, _)| !extra.contains(flag)).flat_map(|(f, v)| [f.to_string(), v.to_string()]).collect();
    // Two micro-batches a batch: the split path, in every run of these tests.
    all.extend(["--quiet", "--micro-batches", "2"].map(String::from));
    all.extend(extra.iter().map(|s| s.to_string()));
    all
}
