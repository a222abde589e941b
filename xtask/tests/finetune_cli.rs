//! `cargo xtask finetune` end to end, through the real binary, on generated labelled files and
//! the small BERT fixture (its tokenizer included): single-label, multi-label and regression
//! runs learn their task; a killed run resumes to the same model; the export carries the label
//! names and transformers loads it with the same logits; prune and FastBERT's early exit run on
//! the export; bad files and flags get one line;
//! `bench --mode finetune` runs both sides.

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::prelude::*;
use sesame_layers::{Classifier, EncoderInput, ForSequenceClassification, OutputOptions, PretrainedModel};
use sesame_text::Tokenizer;

use crate::finetune_common;
use finetune_common::classify::{animal, sentence, write_csv};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn model_dir() -> PathBuf {
    repo().join("fixtures/bert/base-fill-mask")
}

/// A fresh directory for test `name`, removed when the test passes.
fn scratch(name: &str) -> sesame_tests::Scratch {
    sesame_tests::Scratch::dir(&format!("finetune-{name}"))
}

/// Run `cargo xtask finetune` with `args`: its stdout's last line as JSON, or its stderr.
fn finetune(args: &[String]) -> Result<serde_json::Value, String> {
    xtask_json("finetune", args)
}

/// Run `cargo xtask COMMAND` with `args`: its stdout's last line as JSON, or its stderr.
fn xtask_json(command: &str, args: &[String]) -> Result<serde_json::Value, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).arg(command).args(args).current_dir(repo()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    if !out.status.success() {
        return Err(stderr);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).map_err(|e| format!("{e}: {stdout}\n{stderr}"))
}

fn args(dir: &Path, extra: &[&str]) -> Vec<String> {
    let base = [
        "--model", &model_dir().display().to_string(), "--train", &dir.join("train.csv").display().to_string(),
        "--eval", &dir.join("eval.csv").display().to_string(), "--batch-size", "16", "--lr", "3e-3", "--quiet",
        // Two micro-batches a batch: the split path, in every run of these tests.
        "--micro-batches", "2",
    ]
    .map(String::from);
    base.into_iter().chain(extra.iter().map(|s| s.to_string())).collect()
}

/// The library's fine-tuning call (sesame-train's example `finetune`, built by `cargo test` as
/// every example is) learns the task, and the CLI with the same settings is that call: the
/// same held-out metrics and the same exported weights.
#[test]
fn the_library_example_fine_tunes_a_classifier_as_the_cli_does() {
    let dir = scratch("library");
    write_csv(&dir.join("train.csv"), 0..160, animal);
    write_csv(&dir.join("eval.csv"), 1000..1048, animal);
    // target/<profile>/deps/<this test> -> target/<profile>/examples/finetune
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join(format!("finetune{}", std::env::consts::EXE_SUFFIX));
    assert!(example.is_file(), "{} is not built (cargo test builds the workspace's examples)", example.display());
    let (train, eval) = (dir.join("train.csv").display().to_string(), dir.join("eval.csv").display().to_string());
    let library = dir.join("library");
    let out = Command::new(&example).args([&model_dir().display().to_string(), &train, &eval, &library.display().to_string()]).output().unwrap();
    assert!(out.status.success(), "{}: {}", example.display(), String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    let accuracy: f64 = printed.split_whitespace().nth(1).and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("no accuracy in {printed}"));
    assert!(accuracy >= 0.9, "held-out accuracy {accuracy}: {printed}");

    let cli = dir.join("cli");
    let done = finetune(&[
        "--model", &model_dir().display().to_string(), "--train", &train, "--eval", &eval, "--steps", "60", "--eval-every", "10",
        "--batch-size", "16", "--lr", "3e-3", "--quiet", "--out", &cli.display().to_string(),
    ].map(String::from))
    .unwrap();
    assert_eq!(format!("{:.4}", done["metrics"]["accuracy"].as_f64().unwrap()), format!("{accuracy:.4}"), "{done}\n{printed}");
    let weights = |d: &Path| std::fs::read(d.join("model/model.safetensors")).unwrap();
    assert!(weights(&library) == weights(&cli), "the library's and the CLI's exports differ");

    // The library takes a hub id too: the same run from a HuggingFace cache, the same weights.
    let cache = dir.join("hub");
    crate::inference_cli::into_hub_cache(&model_dir(), &cache, "sesame-fixtures/bert-fill-mask");
    let by_id = dir.join("by-id");
    let out = Command::new(&example).args(["sesame-fixtures/bert-fill-mask", &train, &eval, &by_id.display().to_string()]).env("HF_HUB_CACHE", &cache).output().unwrap();
    assert!(out.status.success(), "{}: {}", example.display(), String::from_utf8_lossy(&out.stderr));
    assert!(weights(&by_id) == weights(&library), "the run by hub id and by directory differ");
}

#[test]
fn a_classifier_learns_resumes_after_a_stop_to_the_same_model_and_transformers_loads_it() {
    let dir = scratch("single");
    write_csv(&dir.join("train.csv"), 0..160, animal);
    write_csv(&dir.join("eval.csv"), 1000..1048, animal);
    let whole = dir.join("whole");
    let done = finetune(&args(&dir, &["--steps", "60", "--eval-every", "10", "--out", &whole.display().to_string()])).unwrap();
    let accuracy = done["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.9, "held-out accuracy {accuracy}: {done}");
    for name in ["f1_macro", "mcc", "loss"] {
        assert!(done["metrics"][name].as_f64().is_some_and(f64::is_finite), "{name}: {done}");
    }
    // Stopped after step 15 without a checkpoint (what a kill leaves; train_cli.rs kills runs
    // with SIGKILL), resumed: the same evaluation and the same weights.
    let killed = dir.join("killed");
    let out = killed.display().to_string();
    finetune(&args(&dir, &["--steps", "60", "--eval-every", "10", "--out", &out, "--stop-after", "15"])).unwrap();
    let resumed = finetune(&args(&dir, &["--steps", "60", "--eval-every", "10", "--out", &out, "--resume"])).unwrap();
    assert_eq!(resumed["metrics"], done["metrics"]);
    assert_eq!(resumed["step"], done["step"]);
    let weights = |d: &Path| std::fs::read(d.join("model/model.safetensors")).unwrap();
    assert!(weights(&whole) == weights(&killed), "the resumed run's model differs");

    // The export: label names in config.json, the per-class report, and transformers' logits.
    let export = whole.join("model");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(export.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["id2label"], serde_json::json!({"0": "animal", "1": "thing"}));
    assert_eq!(config["label2id"], serde_json::json!({"animal": 0, "thing": 1}));
    assert_eq!(config["problem_type"], "single_label_classification");
    assert_eq!(config["architectures"][0], "BertForSequenceClassification");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(whole.join("eval_results.json")).unwrap()).unwrap();
    let confusion: Vec<Vec<u64>> = serde_json::from_value(report["per_class"]["confusion_matrix"].clone()).unwrap();
    assert_eq!(confusion.iter().flatten().sum::<u64>(), 48);
    let right = (confusion[0][0] + confusion[1][1]) as f64 / 48.0;
    assert_eq!(right, report["metrics"]["accuracy"].as_f64().unwrap(), "{report}");
    // The pictures: loss and metric curves of the run, the confusion matrix with its counts.
    let svg = |p: &str| std::fs::read_to_string(whole.join(p)).unwrap();
    assert!(svg("run/loss.svg").contains("held-out loss") && svg("run/metrics.svg").contains("f1_macro"));
    let matrix = svg("confusion_matrix.svg");
    let texts: Vec<&str> = matrix.split("<text").skip(1).filter_map(|t| t.split_once('>').and_then(|(_, rest)| rest.split_once("</text>")).map(|(text, _)| text.trim())).collect();
    for expected in ["animal", "thing", "predicted", "true"].into_iter().map(String::from).chain(confusion.iter().flatten().map(u64::to_string)) {
        assert!(texts.contains(&expected.as_str()), "{expected} missing from the confusion matrix's labels {texts:?}");
    }

    // `cargo xtask prune`: the 3 least important of the 8 heads, scored on the training rows;
    // the accuracy before, on the evaluation rows, is the run's own; the pruned model classifies.
    let pruned = dir.join("pruned");
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["prune", "--model", &export.display().to_string(), "--data", &dir.join("train.csv").display().to_string(), "--heads", "3"])
        .args(["--eval", &dir.join("eval.csv").display().to_string()])
        .args(["--out", &pruned.display().to_string()])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(out.status.success(), "prune: {}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["heads_pruned"], 3, "{summary}");
    assert_eq!(summary["eval"]["before"]["accuracy"], done["metrics"]["accuracy"], "{summary}");
    assert!(summary["eval"]["after"]["accuracy"].as_f64().is_some_and(|a| (0.0..=1.0).contains(&a)), "{summary}");
    assert!(summary["parameters"]["after"].as_u64() < summary["parameters"]["before"].as_u64(), "{summary}");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(pruned.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["pruned_heads"], summary["pruned"], "{summary}");
    assert_eq!(config["pruned_heads"].as_object().unwrap().values().map(|h| h.as_array().unwrap().len()).sum::<usize>(), 3);
    let classified = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["classify", "--model", &pruned.display().to_string(), "a cat", "a car"]).current_dir(repo()).output().unwrap();
    assert!(classified.status.success(), "classify the pruned model: {}", String::from_utf8_lossy(&classified.stderr));

    // `finetune --early-exit`: FastBERT's exit classifier after layer 1, distilled from the
    // fixed classifier; its loss falls, the model's own predictions are untouched.
    let exit_run = dir.join("exit");
    let mut exit_args = args(&dir, &["--steps", "30", "--eval-every", "10", "--early-exit", "--out", &exit_run.display().to_string()]);
    exit_args[1] = export.display().to_string();
    let exited = finetune(&exit_args).unwrap();
    let log: Vec<serde_json::Value> = std::fs::read_to_string(exit_run.join("run/metrics.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let first_train = log.iter().find(|l| l["split"] == "train").unwrap()["values"]["loss"].as_f64().unwrap();
    let last_held_out = exited["metrics"]["loss"].as_f64().unwrap();
    assert!(last_held_out < 0.5 * first_train, "the distillation loss went from {first_train} to {last_held_out}: {exited}");
    assert_eq!(exited["metrics"]["layer_2_accuracy"], done["metrics"]["accuracy"], "the head is fixed: {exited}");
    let exit_model = exit_run.join("model");
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(exit_run.join("eval_results.json")).unwrap()).unwrap();
    let curve = results["speed_curve"].as_array().unwrap();
    assert_eq!(curve.len(), 14, "{results}");
    assert_eq!((curve[0]["mean_layers"].as_f64(), &curve[0]["accuracy"]), (Some(2.0), &done["metrics"]["accuracy"]), "speed 0 runs every layer: {results}");
    assert_eq!((&curve[13]["speed"], curve[13]["mean_layers"].as_f64()), (&serde_json::json!(1.0), Some(1.0)), "speed 1 stops at layer 1: {results}");
    assert!(std::fs::read_to_string(exit_run.join("speed_curve.svg")).unwrap().contains("mean layers run"));
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(exit_model.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["sesame_early_exit"], serde_json::json!({"hidden_size": 128, "num_attention_heads": 2}));
    assert_eq!(config["id2label"], serde_json::json!({"0": "animal", "1": "thing"}));
    // `classify --speed`: at 0 the plain classifier's output, every text through both layers;
    // at 1 every text stops at layer 1, with layer 1's accuracy on the evaluation rows.
    let classify = |model: &Path, extra: &[&str], texts: &[String]| -> Vec<serde_json::Value> {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["classify", "--model", &model.display().to_string()]).args(extra).args(texts).current_dir(repo()).output().unwrap();
        assert!(out.status.success(), "classify {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let eval_texts: Vec<String> = (1000..1048).map(|i| sentence(i).0).collect();
    let plain = classify(&export, &[], &eval_texts);
    let refused = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["classify", "--model", &export.display().to_string(), "--speed", "0.5", "a cat"]).current_dir(repo()).output().unwrap();
    let refused = String::from_utf8_lossy(&refused.stderr);
    assert!(refused.trim().lines().count() == 1 && refused.contains("--speed 0.5") && refused.contains("no exit classifiers"), "{refused}");
    let slow = classify(&exit_model, &["--speed", "0"], &eval_texts);
    for (p, s) in plain.iter().zip(&slow) {
        assert_eq!((&p["label"], s["exit_layer"].as_u64()), (&s["label"], Some(2)), "{p} against {s}");
        assert!((p["score"].as_f64().unwrap() - s["score"].as_f64().unwrap()).abs() < 1e-6, "{p} against {s}");
    }
    let fast = classify(&exit_model, &["--speed", "1"], &eval_texts);
    assert!(fast.iter().all(|c| c["exit_layer"] == 1), "{fast:?}");
    let right = fast.iter().zip(1000..1048).filter(|(c, i)| c["label"].as_str() == Some(animal(&sentence(*i)).as_str())).count();
    assert_eq!(right as f64 / 48.0, exited["metrics"]["layer_1_accuracy"].as_f64().unwrap(), "{exited}");

    let texts: Vec<String> = (1000..1008).map(|i| sentence(i).0).collect();
    let ours = sesame_logits(&export, &texts);
    // transformers loads the model with exit classifiers as the plain classifier.
    if let Some(theirs) = transformers_classifies(&exit_model, &texts) {
        let theirs: Vec<f32> = serde_json::from_value(theirs["logits"].clone()).unwrap();
        assert!(ours.len() == theirs.len() && ours.iter().zip(&theirs).all(|(a, b)| (a - b).abs() < 1e-4), "{ours:?} against transformers' {theirs:?} with exit classifiers");
    }
    let Some(theirs) = transformers_classifies(&export, &texts) else { return };
    let theirs_logits: Vec<f32> = serde_json::from_value(theirs["logits"].clone()).unwrap();
    assert_eq!(ours.len(), theirs_logits.len());
    for (a, b) in ours.iter().zip(&theirs_logits) {
        assert!((a - b).abs() < 1e-4, "logits {ours:?} against transformers' {theirs_logits:?}");
    }
    let labels: Vec<String> = serde_json::from_value(theirs["labels"].clone()).unwrap();
    let expected: Vec<String> = (1000..1008).map(|i| animal(&sentence(i))).collect();
    assert!(labels.iter().zip(&expected).filter(|(a, b)| a == b).count() >= 7, "transformers predicts {labels:?} for {expected:?}");

    // `cargo xtask classify`: transformers' labels, and the softmax of its logits.
    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["classify", "--model", &export.display().to_string()]).args(&texts).current_dir(repo()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let classified: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    for (i, c) in classified.iter().enumerate() {
        assert_eq!(c["label"].as_str(), Some(labels[i].as_str()), "text {i}: {c}");
        let (a, b) = (theirs_logits[2 * i], theirs_logits[2 * i + 1]);
        let top = 1.0 / (1.0 + (-(a - b).abs()).exp());
        assert!((c["score"].as_f64().unwrap() as f32 - top).abs() < 1e-4, "text {i}: {c} against softmax {top}");
        assert_eq!(c["scores"].as_array().map(Vec::len), Some(2), "{c}");
    }
}

/// transformers' logits (flattened) and labels of the exported classifier in `dir` for
/// `texts`; `None` (said) when SESAME_PYTHON is unset.
fn transformers_classifies(dir: &Path, texts: &[String]) -> Option<serde_json::Value> {
    let Some(python) = sesame_tests::python() else {
        return None;
    };
    let script = r#"
import json, sys, torch, transformers
d, texts = sys.argv[1], json.loads(sys.argv[2])
tok = transformers.AutoTokenizer.from_pretrained(d)
model = transformers.AutoModelForSequenceClassification.from_pretrained(d).eval()
with torch.no_grad():
    logits = model(**tok(texts, padding=True, return_tensors="pt")).logits
print(json.dumps({"logits": logits.flatten().tolist(), "labels": [model.config.id2label[int(i)] for i in logits.argmax(-1)]}))
"#;
    let out = Command::new(python).args(["-c", script, &dir.display().to_string(), &serde_json::to_string(texts).unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_slice(out.stdout.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap()).unwrap())
}

/// Sesame's logits of the exported classifier for `texts`, flattened.
fn sesame_logits(dir: &Path, texts: &[String]) -> Vec<f32> {
    let device = Device::default();
    let model = ForSequenceClassification::<sesame_bert::BertModel, Classifier>::from_pretrained(dir, &device).unwrap().model;
    let tokenizer = Tokenizer::from_dir(dir).unwrap();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (ids, mask, types) = tokenizer.encode(&refs, 64, false).unwrap().tensors(&device);
    let mut input = EncoderInput::new(ids);
    input.attention_mask = Some(mask);
    input.token_type_ids = Some(types);
    model.forward(input, None, OutputOptions::default()).logits.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

#[test]
fn multi_label_and_regression_runs_learn_their_task() {
    let dir = scratch("multi");
    let sets = |s: &(String, bool, bool, usize)| {
        let mut labels = Vec::new();
        if s.1 {
            labels.push("\"\"animal\"\"");
        }
        if s.2 {
            labels.push("\"\"colour\"\"");
        }
        format!("\"[{}]\"", labels.join(", "))
    };
    write_csv(&dir.join("train.csv"), 0..160, sets);
    write_csv(&dir.join("eval.csv"), 1000..1048, sets);
    let done = finetune(&args(&dir, &["--steps", "120", "--out", &dir.join("run").display().to_string()])).unwrap();
    let f1 = done["metrics"]["f1_micro"].as_f64().unwrap();
    // Both labels on every row would score 0.70.
    assert!(f1 >= 0.8, "multi-label f1_micro {f1}: {done}");
    let config = std::fs::read_to_string(dir.join("run/model/config.json")).unwrap();
    assert!(config.contains("\"multi_label_classification\""), "{config}");
    // `classify` predicts the label sets the evaluation scored.
    let eval: Vec<_> = (1000..1048).map(sentence).collect();
    let classified = classify(&dir.join("run/model"), &eval.iter().map(|s| s.0.as_str()).collect::<Vec<_>>());
    let exact = eval.iter().zip(&classified).filter(|(s, c)| {
        let mut truth = Vec::new();
        truth.extend(s.1.then_some("animal"));
        truth.extend(s.2.then_some("colour"));
        let mut predicted: Vec<&str> = c["labels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
        predicted.sort();
        predicted == truth
    });
    assert_eq!(exact.count() as f64 / 48.0, done["metrics"]["exact_match"].as_f64().unwrap(), "{classified:?}");
    // `distill`: the sigmoid outputs' soft targets teach a one-layer student.
    let student = distil_one_layer(&dir, "f1_micro");
    assert!(student >= 0.7, "the distilled student's f1_micro {student} (the teacher's {f1})");

    let dir = scratch("regress");
    let bigs = |s: &(String, bool, bool, usize)| format!("{}.0", s.3);
    write_csv(&dir.join("train.csv"), 0..160, bigs);
    write_csv(&dir.join("eval.csv"), 1000..1048, bigs);
    let done = finetune(&args(&dir, &["--steps", "60", "--metric", "pearson", "--out", &dir.join("run").display().to_string()])).unwrap();
    let r = done["metrics"]["pearson"].as_f64().unwrap();
    assert!(r >= 0.8, "regression pearson {r}: {done}");
    // `classify` gives the values the evaluation scored: the same Pearson's r.
    let eval: Vec<_> = (1000..1048).map(sentence).collect();
    let classified = classify(&dir.join("run/model"), &eval.iter().map(|s| s.0.as_str()).collect::<Vec<_>>());
    let values: Vec<f64> = classified.iter().map(|c| c["value"].as_f64().unwrap()).collect();
    let truth: Vec<f64> = eval.iter().map(|s| s.3 as f64).collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (mv, mt) = (mean(&values), mean(&truth));
    let cov: f64 = values.iter().zip(&truth).map(|(v, t)| (v - mv) * (t - mt)).sum();
    let norm = |v: &[f64], m: f64| v.iter().map(|x| (x - m) * (x - m)).sum::<f64>().sqrt();
    let pearson = cov / (norm(&values, mv) * norm(&truth, mt));
    assert!((pearson - r).abs() < 1e-4, "classify's values give r = {pearson}, the evaluation {r}");
    // `distill`: the teacher's numbers teach a one-layer student.
    let student = distil_one_layer(&dir, "pearson");
    assert!(student >= 0.7, "the distilled student's pearson {student} (the teacher's {r})");
}

/// `distill` of the classifier fine-tuned in `dir/run` into a one-layer student, on the same
/// rows: its held-out soft-target loss falls; returns its held-out `metric`.
fn distil_one_layer(dir: &Path, metric: &str) -> f64 {
    let out = dir.join("student");
    let mut flags = args(dir, &["--steps", "40", "--eval-every", "10", "--metric", metric, "--out", &out.display().to_string()]);
    flags[1] = dir.join("run/model").display().to_string();
    let done = xtask_json("distill", &flags).unwrap();
    let log: Vec<serde_json::Value> = std::fs::read_to_string(out.join("run/metrics.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let soft: Vec<f64> = log.iter().filter(|l| l["split"] == "held_out").map(|l| l["values"]["soft_loss"].as_f64().unwrap()).collect();
    assert!(soft.len() >= 2 && soft.last() < soft.first(), "held-out soft_loss {soft:?}");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("model/config.json")).unwrap()).unwrap();
    assert_eq!(config["num_hidden_layers"].as_u64(), Some(1), "{config}");
    done["metrics"][metric].as_f64().unwrap()
}

/// `cargo xtask classify` on `texts`: one JSON object per text.
fn classify(model: &Path, texts: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["classify", "--model", &model.display().to_string()]).args(texts).current_dir(repo()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn bad_files_and_flags_get_one_line_naming_them() {
    let dir = scratch("bad");
    write_csv(&dir.join("train.csv"), 0..20, animal);
    std::fs::write(dir.join("eval.csv"), "text,label\nthe cat sat,animal\nthe car sat,vehicle\n").unwrap();
    let out = dir.join("run").display().to_string();
    let error = |extra: &[&str]| {
        let e = finetune(&args(&dir, &[&["--steps", "2", "--out", &out], extra].concat())).unwrap_err();
        e.trim().lines().last().unwrap_or("").to_string()
    };
    let eval = dir.join("eval.csv").display().to_string();
    assert_eq!(error(&[]), format!("error: {eval}:3: label \"vehicle\" does not occur in the training data (it has [\"animal\", \"thing\"])"));
    write_csv(&dir.join("eval.csv"), 100..110, animal);
    assert_eq!(error(&["--metric", "pearson"]), "error: --metric pearson: single_label_classification reports loss, accuracy, f1_macro, f1_micro, f1_weighted, precision_macro, recall_macro, mcc");
    assert_eq!(error(&["--task", "regress"]), format!("error: --task regress: the labels of {} are for single_label_classification", dir.join("train.csv").display()));
    assert_eq!(error(&["--text-column", "body"]), format!("error: {}:1: no column \"body\" (--text-column); the header has [\"text\", \"label\"]", dir.join("train.csv").display()));
    assert_eq!(error(&["--seq-len", "400"]), "error: --seq-len 400 exceeds the model's 40 positions");
    let refused = finetune(&args(&dir, &["--steps", "2", "--out", &out, "--layer-lr-decay", "1.5"])).unwrap_err();
    assert!(refused.contains("1.5 is not a factor in (0, 1]"), "{refused}");
    for layer in ["3", "-3", "0"] {
        assert_eq!(error(&["--feature-layer", layer]), format!("error: --feature-layer {layer}: the model has 2 layers (1..=2, or -2..=-1 from the top)"));
    }
    // Early exit distils a fine-tuned classifier, and is refused with what it cannot combine with.
    let model = model_dir().display().to_string();
    assert_eq!(error(&["--early-exit"]), format!("error: --early-exit: {model} is not a fine-tuned single-label classifier (its config.json has no problem_type and no id2label); fine-tune it first"));
    assert_eq!(error(&["--early-exit", "--metric", "accuracy"]), "error: --early-exit: the exported classifiers are those of the lowest held-out distillation loss (--metric loss)");
    let both = finetune(&args(&dir, &["--steps", "2", "--out", &out, "--early-exit", "--freeze"])).unwrap_err();
    assert!(both.contains("--freeze") && both.contains("--early-exit"), "{both}");
    // `classify --speed`: a model without exit classifiers, and a speed out of range.
    let classify = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["classify", "--model", &model]).args(extra).args(["the cat"]).current_dir(repo()).output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    assert!(classify(&["--speed", "1.5"]).contains("1.5 is not a speed in [0, 1]"), "{}", classify(&["--speed", "1.5"]));
}

#[test]
fn freeze_trains_the_head_alone_resumes_to_the_same_head_and_reads_a_lower_layer() {
    let dir = scratch("freeze");
    write_csv(&dir.join("train.csv"), 0..160, animal);
    write_csv(&dir.join("eval.csv"), 1000..1048, animal);
    let (whole, killed) = (dir.join("whole"), dir.join("killed"));
    let run = |out: &Path, extra: &[&str]| finetune(&args(&dir, &[&["--freeze", "--steps", "30", "--eval-every", "10", "--out", &out.display().to_string()], extra].concat())).unwrap();
    let done = run(&whole, &[]);
    run(&killed, &["--stop-after", "12"]);
    assert_eq!(run(&killed, &["--resume"])["metrics"], done["metrics"]);
    let tensors = |path: &Path| {
        let bytes = std::fs::read(path).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        file.tensors().into_iter().map(|(name, view)| (name, view.data().to_vec())).collect::<std::collections::BTreeMap<_, _>>()
    };
    let (before, after, resumed) = (tensors(&model_dir().join("model.safetensors")), tensors(&whole.join("model/model.safetensors")), tensors(&killed.join("model/model.safetensors")));
    assert_eq!(after, resumed, "the resumed run's model differs");
    let mut frozen = 0;
    for (name, data) in &after {
        match before.get(name) {
            Some(original) => {
                assert!(original == data, "{name} changed under --freeze");
                frozen += 1;
            }
            // The fixture has no pooler: it is drawn (from the seed) and learns with the head.
            None => assert!(name.starts_with("classifier.") || name.starts_with("bert.pooler."), "{name}: new and not the head"),
        }
    }
    assert!(frozen > 30, "only {frozen} tensors compared");
    // The head learns: the held-out loss falls from the first evaluation to the last.
    let log = std::fs::read_to_string(whole.join("run/metrics.jsonl")).unwrap();
    let losses: Vec<f64> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["split"] == "held_out")
        .map(|l| l["values"]["loss"].as_f64().unwrap())
        .collect();
    assert!(losses.len() == 3 && losses[2] < losses[0], "held-out losses {losses:?}");

    // The second-to-last layer's features: the top layer dropped from the export, the lower one
    // unchanged, and transformers gives the exported model's logits.
    let lower = dir.join("lower");
    run(&lower, &["--feature-layer", "-2"]);
    let export = lower.join("model");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(export.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["num_hidden_layers"], 1);
    let kept = tensors(&export.join("model.safetensors"));
    assert!(!kept.keys().any(|name| name.contains("layer.1.")), "the top layer was exported");
    let layer0 = kept.iter().filter(|(name, _)| name.contains("layer.0.")).inspect(|(name, data)| assert!(before[*name] == **data, "{name} changed")).count();
    assert!(layer0 >= 16, "only {layer0} tensors of layer 0");
    let texts: Vec<String> = (1000..1006).map(|i| sentence(i).0).collect();
    let ours = sesame_logits(&export, &texts);
    let Some(theirs) = transformers_classifies(&export, &texts) else { return };
    let theirs: Vec<f32> = serde_json::from_value(theirs["logits"].clone()).unwrap();
    assert!(ours.len() == theirs.len() && ours.iter().zip(&theirs).all(|(a, b)| (a - b).abs() < 1e-4), "logits {ours:?} against transformers' {theirs:?}");
}

#[test]
fn a_scalar_mix_of_every_layer_learns_its_weights_on_fixed_features_and_classify_reads_it() {
    let dir = scratch("mix");
    write_csv(&dir.join("train.csv"), 0..160, animal);
    write_csv(&dir.join("eval.csv"), 1000..1048, animal);
    let out = dir.join("mix");
    finetune(&args(&dir, &["--freeze", "--feature-layer", "mix", "--steps", "40", "--eval-every", "10", "--out", &out.display().to_string()])).unwrap();
    // The mix and the head learn: the held-out loss falls from the first evaluation to the last.
    let log = std::fs::read_to_string(out.join("run/metrics.jsonl")).unwrap();
    let losses: Vec<f64> = log.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).filter(|l| l["split"] == "held_out").map(|l| l["values"]["loss"].as_f64().unwrap()).collect();
    assert!(losses.len() == 4 && losses[3] < losses[0], "held-out losses {losses:?}");
    let export = out.join("model");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(export.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["sesame_scalar_mix"], 3, "the embeddings and two layers: {config}");
    let bytes = std::fs::read(export.join("model.safetensors")).unwrap();
    let names = safetensors::SafeTensors::deserialize(&bytes).unwrap().names().into_iter().filter(|n| n.starts_with("scalar_mix.")).map(String::from).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(names, ["scalar_mix.scalar_parameters", "scalar_mix.scale"].map(String::from).into(), "the mix's tensors");
    // The weights moved from the even mix; the layers they mix did not.
    let device = Device::default();
    let model = ForSequenceClassification::<sesame_bert::BertModel, Classifier>::from_pretrained(&export, &device).unwrap().model;
    let start = ForSequenceClassification::<sesame_bert::BertModel, Classifier>::from_pretrained(&model_dir(), &device).unwrap().model;
    assert!(start.scalar_mix.is_none(), "the fixture has no mix");
    let mix = model.scalar_mix.clone().expect("the export reads the mix");
    let weights: Vec<f32> = mix.scalar_parameters.val().into_data().convert::<f32>().try_to_vec().unwrap();
    assert!(weights.iter().any(|w| w.abs() > 1e-3), "the mix did not learn: {weights:?}");
    let layer = |m: &ForSequenceClassification<sesame_bert::BertModel, Classifier>| m.base.encoder.layers[0].attention.query.weight.val().into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
    assert!(layer(&model) == layer(&start), "--freeze moved layer 0");

    // The logits are the head on the pooled mix, computed here by hand from the hidden states.
    let texts: Vec<String> = (1000..1006).map(|i| sentence(i).0).collect();
    let ours = sesame_logits(&export, &texts);
    let tokenizer = Tokenizer::from_dir(&export).unwrap();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (ids, mask, types) = tokenizer.encode(&refs, 64, false).unwrap().tensors(&device);
    let input = EncoderInput::new(ids).with_attention_mask(mask).with_token_type_ids(types);
    let states = model.base.forward(input, OutputOptions::all()).encoder.hidden_states.unwrap();
    let w = burn::tensor::activation::softmax(mix.scalar_parameters.val(), 0).into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
    let gamma = mix.scale.val().into_data().convert::<f32>().try_to_vec::<f32>().unwrap()[0];
    let mixed = states.into_iter().zip(&w).map(|(h, &w)| h * w).reduce(|a, b| a + b).unwrap() * gamma;
    let pooled = model.base.pooler.as_ref().unwrap().forward(mixed);
    let by_hand: Vec<f32> = model.head.forward(pooled).into_data().convert::<f32>().try_to_vec().unwrap();
    assert!(ours.len() == by_hand.len() && ours.iter().zip(&by_hand).all(|(a, b)| (a - b).abs() < 1e-5), "{ours:?} against {by_hand:?}");

    // `classify` reads the mix too.
    let classified: Vec<serde_json::Value> = serde_json::from_slice(&Command::new(env!("CARGO_BIN_EXE_xtask")).args(["classify", "--model", &export.display().to_string()]).args(&texts).current_dir(repo()).output().unwrap().stdout).unwrap();
    for (i, c) in classified.iter().enumerate() {
        let best = if ours[2 * i] >= ours[2 * i + 1] { "animal" } else { "thing" };
        assert_eq!(c["label"], best, "text {i}: {c}");
    }
    // A value neither a layer nor `mix` gets one line.
    let err = finetune(&args(&dir, &["--feature-layer", "mixed", "--steps", "1", "--out", &dir.join("bad").display().to_string()])).unwrap_err();
    assert!(err.contains("--feature-layer") && err.contains("mixed"), "{err}");
}

#[test]
fn bench_finetune_runs_each_seed_on_both_sides_with_the_same_steps() {
    let dir = scratch("bench");
    write_csv(&dir.join("train.csv"), 0..40, animal);
    write_csv(&dir.join("eval.csv"), 1000..1016, animal);
    let path = |p: &str| dir.join(p).display().to_string();
    let mut args = vec!["bench", "--mode", "finetune", "--seeds", "1,2", "--seq-len", "32", "--lr", "3e-3"].into_iter().map(String::from).collect::<Vec<_>>();
    args.extend(["--model".into(), model_dir().display().to_string(), "--train".into(), path("train.csv"), "--eval".into(), path("eval.csv")]);
    let python = sesame_tests::python().is_some();
    if python {
        args.push("--compare-pytorch".into());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).args(&args).current_dir(repo()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let sides: &[&str] = if python { &["sesame", "pytorch"] } else { &["sesame"] };
    for side in sides {
        let runs = rows[0][side]["runs"].as_array().unwrap();
        assert_eq!(runs.iter().map(|r| r["seed"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2], "{side}");
        for run in runs {
            // 40 rows in batches of 8: 5 steps, one epoch, on both sides.
            assert_eq!(run["steps"], 5, "{side}: {run}");
            let (train, eval) = (run["train_seconds"].as_f64().unwrap_or(0.0), run["eval_seconds"].as_f64().unwrap_or(0.0));
            // Both clocks ran; not their ratio: on 5 steps of a tiny model, PyTorch's one
            // evaluation can outlast its training (0.41 s against 0.24 s in one run).
            assert!(train > 0.0 && eval > 0.0, "{side}: the run, one evaluation in it: {run}");
            assert!(run["metrics"]["accuracy"].as_f64().is_some_and(|a| (0.0..=1.0).contains(&a)), "{side}: {run}");
        }
        assert!(rows[0][side]["accuracy"]["sd"].as_f64().is_some_and(f64::is_finite), "{side}");
    }
    assert!(!python || rows[0]["ratio"].as_f64().is_some_and(|r| r > 0.0), "{}", rows[0]);
    let refused = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["bench", "--mode", "finetune", "--model", &model_dir().display().to_string()]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&refused.stderr).trim(), "error: --mode finetune needs --model, --train and --eval");
}

#[test]
fn micro_batches_train_the_whole_batch_s_gradient() {
    // Without dropout, a batch split into micro-batches (uneven ones; 16 parts of a 6-row batch
    // leave 10 empty) learns what it learns whole.
    let dir = scratch("micro");
    let model = dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    for entry in std::fs::read_dir(model_dir()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), model.join(entry.file_name())).unwrap();
    }
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap();
    for key in ["hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"] {
        config[key] = 0.0.into();
    }
    std::fs::write(model.join("config.json"), config.to_string()).unwrap();
    write_csv(&dir.join("train.csv"), 0..150, animal);
    write_csv(&dir.join("eval.csv"), 1000..1032, animal);
    let run = |parts: &str| {
        let out = dir.join(format!("run-{parts}")).display().to_string();
        let mut args = args(&dir, &["--steps", "12", "--eval-every", "12", "--out", &out]);
        args[1] = model.display().to_string();
        let parts_at = args.iter().position(|a| a == "--micro-batches").unwrap() + 1;
        args[parts_at] = parts.to_string();
        let done = finetune(&args).unwrap();
        (done["metrics"]["loss"].as_f64().unwrap(), std::fs::read(dir.join(format!("run-{parts}/model/model.safetensors"))).unwrap())
    };
    // 150 rows in batches of 16: steps 10 to 12 cross the epoch's last batch of 6 rows.
    let (whole, weights) = run("1");
    for parts in ["2", "3", "16"] {
        let (loss, split) = run(parts);
        assert!((loss - whole).abs() < 1e-5 * whole, "--micro-batches {parts}: held-out loss {loss} against {whole}");
        let (a, b) = (safetensors::SafeTensors::deserialize(&weights).unwrap(), safetensors::SafeTensors::deserialize(&split).unwrap());
        let diff = a.tensors().iter().map(|(name, t)| {
            let floats = |v: &[u8]| v.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>();
            sesame_tests::gap(&floats(t.data()), &floats(b.tensor(name).unwrap().data()))
        }).fold(0.0f32, f32::max);
        assert!(diff < 1e-4, "--micro-batches {parts}: weights differ by {diff}");
    }
}

#[test]
fn distill_teaches_a_smaller_student_that_resumes_exactly_and_transformers_loads() {
    let dir = scratch("distill");
    write_csv(&dir.join("train.csv"), 0..160, animal);
    write_csv(&dir.join("eval.csv"), 1000..1048, animal);
    let teacher_run = dir.join("teacher");
    let teacher = finetune(&args(&dir, &["--steps", "60", "--eval-every", "60", "--out", &teacher_run.display().to_string()])).unwrap();
    let teacher_dir = teacher_run.join("model");
    // `cargo xtask distill`: a one-layer student of the two-layer teacher, every loss term on.
    let distill = |out: &Path, extra: &[&str]| -> Result<serde_json::Value, String> {
        let mut flags = args(&dir, &["--steps", "40", "--eval-every", "10", "--out", &out.display().to_string()]);
        flags[1] = teacher_dir.display().to_string();
        flags.extend(extra.iter().map(|s| s.to_string()));
        xtask_json("distill", &flags)
    };
    let every_term = ["--alpha-cos", "1", "--alpha-hidden", "1", "--alpha-attention", "1"];
    let whole = dir.join("student");
    let done = distill(&whole, &every_term).unwrap();
    let log: Vec<serde_json::Value> = std::fs::read_to_string(whole.join("run/metrics.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let held_out: Vec<&serde_json::Value> = log.iter().filter(|l| l["split"] == "held_out").collect();
    for term in ["loss", "soft_loss", "hidden_loss", "attention_loss", "cosine_loss"] {
        let (first, last) = (held_out[0]["values"][term].as_f64().unwrap(), held_out.last().unwrap()["values"][term].as_f64().unwrap());
        assert!(last < first, "held-out {term} went from {first} to {last}");
    }
    let accuracy = done["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.8, "the student's accuracy {accuracy} (the teacher's {}): {done}", teacher["metrics"]["accuracy"]);
    let student = whole.join("model");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(student.join("config.json")).unwrap()).unwrap();
    assert_eq!((config["num_hidden_layers"].as_u64(), &config["id2label"]), (Some(1), &serde_json::json!({"0": "animal", "1": "thing"})));
    // Killed after step 15 and resumed: the same student, bit for bit.
    let killed = dir.join("killed");
    distill(&killed, &[&every_term[..], &["--stop-after", "15"]].concat()).unwrap();
    assert_eq!(distill(&killed, &[&every_term[..], &["--resume"]].concat()).unwrap()["metrics"], done["metrics"]);
    let weights = |d: &Path| std::fs::read(d.join("model/model.safetensors")).unwrap();
    assert!(weights(&whole) == weights(&killed), "the resumed student differs");
    // Refusals name their flag.
    for (extra, expected) in [
        (&["--student-layers", "2"][..], "--student-layers 2: the teacher has 2; a student has fewer"),
        (&["--layer-map", "1:3"][..], "--layer-map 1:3: `1:3` is not STUDENT:TEACHER"),
        (&["--freeze"][..], "distill: --freeze is for `finetune`"),
        (&["--alpha-soft", "0", "--alpha-hard", "0"][..], "every --alpha-* is 0"),
    ] {
        let err = distill(&dir.join("refused"), extra).unwrap_err();
        assert!(err.trim().lines().count() == 1 && err.contains(expected), "{extra:?}: {err}");
    }
    // transformers loads the student with Sesame's logits.
    let texts: Vec<String> = (1000..1008).map(|i| sentence(i).0).collect();
    let ours = sesame_logits(&student, &texts);
    if let Some(theirs) = transformers_classifies(&student, &texts) {
        let theirs: Vec<f32> = serde_json::from_value(theirs["logits"].clone()).unwrap();
        assert!(ours.len() == theirs.len() && ours.iter().zip(&theirs).all(|(a, b)| (a - b).abs() < 1e-4), "{ours:?} against transformers' {theirs:?}");
    }
}

/// The f32 tensors of a safetensors file, by name.
fn f32_tensors(path: &Path) -> std::collections::BTreeMap<String, Vec<f32>> {
    let bytes = std::fs::read(path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    file.tensors().into_iter().map(|(name, view)| (name, view.data().chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect())).collect()
}

#[test]
fn init_random_trains_weights_drawn_from_the_seed_without_reading_the_checkpoint() {
    let dir = scratch("init-random");
    write_csv(&dir.join("train.csv"), 0..64, animal);
    write_csv(&dir.join("eval.csv"), 1000..1016, animal);
    // The architecture and tokenizer alone: no weights to read.
    let architecture = dir.join("architecture");
    std::fs::create_dir_all(&architecture).unwrap();
    for name in ["config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"] {
        std::fs::copy(model_dir().join(name), architecture.join(name)).unwrap();
    }
    let arch = architecture.display().to_string();
    // --freeze keeps the encoder as it was drawn: the export shows the initialisation.
    let run = |name: &str, seed: &str| {
        let out = dir.join(name);
        let mut a = args(&dir, &["--init", "random", "--freeze", "--steps", "3", "--seed", seed, "--out", &out.display().to_string()]);
        let at = a.iter().position(|s| s == "--model").unwrap();
        a[at + 1] = arch.clone();
        finetune(&a).unwrap();
        f32_tensors(&out.join("model/model.safetensors"))
    };
    let (a, again, other) = (run("a", "1"), run("again", "1"), run("other", "2"));
    assert_eq!(a, again, "the same seed draws the same weights");
    let pretrained = f32_tensors(&model_dir().join("model.safetensors"));
    let mut matrices = 0;
    for (name, values) in a.iter().filter(|(name, _)| !name.starts_with("classifier.") && !name.starts_with("bert.pooler.")) {
        let original = &pretrained[name];
        assert_eq!(values.len(), original.len(), "{name}");
        if name.contains("LayerNorm.weight") {
            assert!(values.iter().all(|&v| v == 1.0), "{name}: LayerNorm starts at 1");
        } else if name.ends_with("bias") || name.contains("LayerNorm.bias") {
            assert!(values.iter().all(|&v| v == 0.0), "{name}: biases start at 0");
        } else {
            // A matrix drawn as transformers draws it, N(0, initializer_range 0.02), not the
            // checkpoint's, and another seed draws another.
            let n = values.len() as f32;
            let mean = values.iter().sum::<f32>() / n;
            let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / n).sqrt();
            assert!(values.len() < 256 || (0.015..0.025).contains(&std), "{name}: std {std}");
            assert!(values != original, "{name} is the checkpoint's");
            assert!(values != &other[name], "{name}: seeds 1 and 2 drew the same");
            matrices += 1;
        }
    }
    assert!(matrices >= 10, "only {matrices} matrices checked");
}

/// `finetune --eval-every 0` evaluates and checkpoints only at the end (transformers'
/// `eval_strategy="no"` with the final evaluation kept), and exports that model.
#[test]
fn eval_every_0_evaluates_and_checkpoints_only_at_the_end() {
    let dir = scratch("every-0");
    write_csv(&dir.join("train.csv"), 0..40, animal);
    write_csv(&dir.join("eval.csv"), 1000..1016, animal);
    let out = dir.join("run");
    let done = finetune(&args(&dir, &["--steps", "7", "--eval-every", "0", "--out", &out.display().to_string()])).unwrap();
    assert_eq!(done["step"], 7, "{done}");
    let evaluated: Vec<u64> = std::fs::read_to_string(out.join("run/metrics.jsonl")).unwrap().lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["split"] == "held_out")
        .map(|l| l["step"].as_u64().unwrap())
        .collect();
    assert_eq!(evaluated, [7], "held-out evaluations");
    let checkpoints = std::fs::read_dir(out.join("run/checkpoints")).unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect::<Vec<_>>();
    assert_eq!(checkpoints, ["step-00000007"], "checkpoints");
    assert!(out.join("model/model.safetensors").is_file());
}
