//! `embed` and `fill-mask` on many texts: read from a file or stdin (lines or JSON lines),
//! batched by length at `--batch-size`, streamed as one JSON line per text in input order,
//! with the same numbers as the texts given on the command line in one batch.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn model() -> String {
    repo().join("fixtures/bert/base-fill-mask").display().to_string()
}

/// Run the CLI with `stdin`; its stdout, or a panic with its stderr.
fn xtask(args: &[&str], stdin: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

const TEXTS: [&str; 5] = ["the sun", "a much longer sentence about the cat that sat on the mat", "hello world", "x", "the cat sat on the mat ."];

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn embed_streams_one_line_per_text_in_order_with_the_numbers_of_one_batch() {
    let model = model();
    let mut args = vec!["embed", "--model", &model, "--normalize"];
    args.extend(TEXTS);
    let reference: Vec<Vec<f32>> = serde_json::from_str(xtask(&args, "").trim()).unwrap();
    assert_eq!(reference.len(), TEXTS.len());

    // Plain lines and JSON lines mixed, from a file and from stdin, two texts per batch.
    let input: String = TEXTS
        .iter()
        .enumerate()
        .map(|(i, t)| if i % 2 == 0 { format!("{{\"text\": {}, \"id\": {i}}}\n", serde_json::to_string(t).unwrap()) } else { format!("{t}\n") })
        .collect();
    let file = std::env::temp_dir().join(format!("sesame-embed-input-{}.jsonl", std::process::id()));
    std::fs::write(&file, &input).unwrap();
    for (source, stdin) in [(file.to_str().unwrap(), ""), ("-", input.as_str())] {
        let out = xtask(&["embed", "--model", &model, "--normalize", "--batch-size", "2", "--input", source], stdin);
        let lines: Vec<Vec<f32>> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), TEXTS.len(), "{source}: one line per text");
        for (i, (ours, theirs)) in lines.iter().zip(&reference).enumerate() {
            assert!(max_diff(ours, theirs) < 1e-5, "{source}: text {i} differs by {}", max_diff(ours, theirs));
        }
    }
}

#[test]
fn fill_mask_streams_one_line_per_text_with_the_single_text_answers() {
    let model = model();
    let texts = ["the cat [MASK] on the mat .", "[MASK] is the capital of [MASK] .", "hello [MASK]"];
    let input: String = texts.iter().map(|t| format!("{t}\n")).collect();
    let out = xtask(&["fill-mask", "--model", &model, "--top-k", "3", "--batch-size", "2", "--input", "-"], &input);
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), texts.len());
    for (text, line) in texts.iter().zip(&lines) {
        let alone: serde_json::Value = serde_json::from_str(xtask(&["fill-mask", "--model", &model, "--top-k", "3", text], "").trim()).unwrap();
        assert_eq!(line.as_array().unwrap().len(), text.matches("[MASK]").count(), "{text}: one list per mask");
        for (a, b) in line.as_array().unwrap().iter().zip(alone.as_array().unwrap()) {
            for (x, y) in a.as_array().unwrap().iter().zip(b.as_array().unwrap()) {
                assert_eq!(x["token"], y["token"], "{text}");
                assert!((x["score"].as_f64().unwrap() - y["score"].as_f64().unwrap()).abs() < 1e-5, "{text}");
            }
        }
    }
}
