//! `cargo xtask finetune --task tag` and `cargo xtask tag` end to end, through the real binary,
//! on generated tagged sentences longer than the windows (the small BERT fixture reads 40
//! positions; the runs use windows of 16 tokens): the tagger learns, a killed run resumes to the
//! same model, transformers loads the export with the same logits and its token-classification
//! pipeline finds the entities `cargo xtask tag` finds; bad files get one line.

use std::path::Path;
use std::process::Command;

use crate::finetune_common;
use finetune_common::{model_dir, xtask};
use finetune_common::tag::{sentence, write_conll, write_jsonl, PLACES};

fn scratch(name: &str) -> sesame_tests::Scratch {
    finetune_common::scratch("tag", name)
}

fn finetune(args: &[String]) -> Result<serde_json::Value, String> {
    finetune_common::finetune("tag", args)
}

/// The runs' flags, those of `extra` in place of the defaults.
fn args(dir: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let (model, train, eval, out) = (model_dir().display().to_string(), dir.join("train.conll").display().to_string(), dir.join("eval.jsonl").display().to_string(), out.display().to_string());
    let defaults = [
        ("--model", model.as_str()), ("--train", &train), ("--eval", &eval), ("--batch-size", "16"), ("--lr", "3e-3"), ("--seq-len", "16"),
        ("--stride", "4"), ("--steps", "80"), ("--eval-every", "20"), ("--out", &out),
    ];
    finetune_common::flags(&defaults, extra)
}

#[test]
fn a_tagger_learns_over_windows_resumes_exactly_and_tags_as_transformers_pipeline() {
    let dir = scratch("learn");
    write_conll(&dir.join("train.conll"), 0..200);
    write_jsonl(&dir.join("eval.jsonl"), 1000..1040);
    let whole = dir.join("whole");
    let done = finetune(&args(&dir, &whole, &[])).unwrap();
    assert_eq!(done["metric"], "f1", "entity tags pick entity F1: {done}");
    let f1 = done["metrics"]["f1"].as_f64().unwrap();
    assert!(f1 >= 0.9, "held-out entity F1 {f1}: {done}");
    assert!(done["metrics"]["accuracy"].as_f64().unwrap() >= 0.95, "{done}");

    // Killed at step 30, resumed: the same evaluation and the same weights.
    let killed = dir.join("killed");
    finetune(&args(&dir, &killed, &["--stop-after", "30"])).unwrap();
    let resumed = finetune(&args(&dir, &killed, &["--resume"])).unwrap();
    assert_eq!(resumed["metrics"], done["metrics"]);
    let weights = |d: &Path| std::fs::read(d.join("model/model.safetensors")).unwrap();
    assert!(weights(&whole) == weights(&killed), "the resumed run's model differs");

    let export = whole.join("model");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(export.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["id2label"], serde_json::json!({"0": "B-ANIMAL", "1": "B-LOC", "2": "I-ANIMAL", "3": "O"}));
    assert_eq!(config["architectures"][0], "BertForTokenClassification");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(whole.join("eval_results.json")).unwrap()).unwrap();
    assert!(report["per_class"]["scores"]["LOC"]["f1"].as_f64().is_some(), "{report}");

    // `cargo xtask tag`, on texts of one window and of several (the model reads 40 positions).
    let long = (2000..2003).flat_map(|i| sentence(i).0).collect::<Vec<_>>().join(" ");
    let texts = vec!["the red cats sat in paris, france.".to_string(), "A big dog was running in the house".to_string(), long.clone()];
    let stdout = xtask(&[["tag", "--model", &export.display().to_string()].map(String::from).to_vec(), texts.clone()].concat()).unwrap();
    let ours: Vec<Vec<serde_json::Value>> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(ours.len(), 3);
    assert!(ours[0].iter().any(|e| e["entity_group"] == "LOC" && e["word"] == "paris" && e["start"] == 20 && e["end"] == 25), "{:?}", ours[0]);
    // Every place in the long text is found, with its characters.
    let places = long.split(' ').filter(|w| PLACES.contains(w)).count();
    let found: Vec<&serde_json::Value> = ours[2].iter().filter(|e| e["entity_group"] == "LOC").collect();
    assert!(found.len() + 1 >= places, "{places} places, found {found:?}");
    for e in &ours[2] {
        let (s, t) = (e["start"].as_u64().unwrap() as usize, e["end"].as_u64().unwrap() as usize);
        assert_eq!(e["word"].as_str().unwrap(), &long[s..t]);
    }

    let Some(python) = sesame_tests::python() else {
        return;
    };
    // transformers' pipeline on the texts that fit its window (it truncates without a stride).
    let script = r#"
import json, sys, transformers
d, texts = sys.argv[1], json.loads(sys.argv[2])
tagger = transformers.pipeline("token-classification", model=d, aggregation_strategy="first", device="cpu")
print(json.dumps([[{k: (float(v) if k == "score" else v) for k, v in e.items()} for e in tagger(t)] for t in texts]))
"#;
    let out = Command::new(python).args(["-c", script, &export.display().to_string(), &serde_json::to_string(&texts[..2]).unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let theirs: Vec<Vec<serde_json::Value>> = serde_json::from_slice(out.stdout.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap()).unwrap();
    for (t, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a.len(), b.len(), "text {t}: {a:?} against transformers' {b:?}");
        for (x, y) in a.iter().zip(b) {
            for key in ["entity_group", "start", "end"] {
                assert_eq!(x[key], y[key], "text {t}: {a:?} against transformers' {b:?}");
            }
            // transformers decodes the tokens (lower-cased by this uncased vocabulary); Sesame
            // gives the text's own characters.
            assert_eq!(x["word"].as_str().unwrap().to_lowercase(), y["word"].as_str().unwrap(), "text {t}");
            assert!((x["score"].as_f64().unwrap() - y["score"].as_f64().unwrap()).abs() < 1e-4, "text {t}: {a:?} against transformers' {b:?}");
        }
    }
}

#[test]
fn word_classes_are_scored_by_accuracy_and_f1_over_the_tags() {
    // The same sentences tagged with classes of words (no B-/I- prefixes), as parts of speech.
    let dir = scratch("classes");
    let plain = |rows: std::ops::Range<usize>| -> String {
        rows.map(|i| {
            let (words, tags) = sentence(i);
            words.iter().zip(&tags).map(|(w, t)| format!("{w} {}\n", t.trim_start_matches("B-").trim_start_matches("I-"))).collect::<String>() + "\n"
        })
        .collect()
    };
    std::fs::write(dir.join("train.conll"), plain(0..200)).unwrap();
    std::fs::write(dir.join("eval.jsonl"), "").unwrap();
    let eval = dir.join("eval.conll");
    std::fs::write(&eval, plain(1000..1040)).unwrap();
    let out = dir.join("run");
    // The tagger reads ELMo's scalar mix of every layer here (the entity run reads the top layer).
    let done = finetune(&args(&dir, &out, &["--eval", &eval.display().to_string(), "--feature-layer", "mix"])).unwrap();
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("model/config.json")).unwrap()).unwrap();
    assert_eq!(config["sesame_scalar_mix"], 3, "{config}");
    assert_eq!(done["metric"], "accuracy", "{done}");
    let accuracy = done["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.95, "held-out word accuracy {accuracy}: {done}");
    assert!(done["metrics"]["f1_macro"].as_f64().unwrap() >= 0.8, "{done}");
    assert!(done["metrics"].get("precision").is_none(), "entity scores of word classes: {done}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("eval_results.json")).unwrap()).unwrap();
    let per_tag = report["per_class"]["scores"].as_object().unwrap();
    assert_eq!(per_tag.keys().collect::<Vec<_>>(), ["ANIMAL", "LOC", "O"], "{report}");
}

#[test]
fn bad_tagged_files_get_one_line_naming_them() {
    let dir = scratch("bad");
    write_conll(&dir.join("train.conll"), 0..20);
    write_jsonl(&dir.join("eval.jsonl"), 100..104);
    let out = dir.join("run");
    let error = |extra: &[&str]| {
        let e = finetune(&args(&dir, &out, extra)).unwrap_err();
        e.trim().lines().last().unwrap_or("").to_string()
    };
    let (train, eval) = (dir.join("train.conll").display().to_string(), dir.join("eval.jsonl").display().to_string());
    std::fs::write(dir.join("eval.jsonl"), "{\"tokens\": [\"the\", \"cat\"], \"tags\": [\"O\", \"B-ANIMAL\"]}\n{\"tokens\": [\"the\", \"cat\"], \"tags\": [\"O\"]}\n").unwrap();
    assert_eq!(error(&[]), format!("error: {eval}:2: 2 tokens but 1 tags"));
    std::fs::write(dir.join("eval.jsonl"), "{\"tokens\": [\"the\", \"king\"], \"tags\": [\"O\", \"B-PER\"]}\n").unwrap();
    assert_eq!(error(&[]), format!("error: {eval}:1: tag \"B-PER\" does not occur in the training data (it has [\"B-ANIMAL\", \"B-LOC\", \"I-ANIMAL\", \"O\"])"));
    std::fs::write(dir.join("eval.jsonl"), "{\"words\": [\"the\"], \"tags\": [\"O\"]}\n").unwrap();
    assert_eq!(error(&[]), format!("error: {eval}:1: no field \"tokens\"; the object has [\"tags\", \"words\"]"));
    write_jsonl(&dir.join("eval.jsonl"), 100..104);
    std::fs::write(dir.join("train.conll"), "the\tO\ncat\tB-ANIMAL\n\nparis\n").unwrap();
    assert_eq!(error(&[]), format!("error: {train}:4: \"paris\" is not a token and its tag (separated by a tab or spaces, the tag last)"));
    std::fs::write(dir.join("train.conll"), b"the\tO\ncat\xff\tB-ANIMAL\n").unwrap();
    assert_eq!(error(&[]), format!("error: {train}:2: not UTF-8 text (byte 4)"));
    write_conll(&dir.join("train.conll"), 0..20);
    assert_eq!(error(&["--stride", "14"]), format!("error: {train}: tokenizer {}: a window of 16 tokens holds 14 besides its 2 special tokens, not more than the stride of 14 (--seq-len 16, --stride 14)", model_dir().join("tokenizer.json").display()));
    assert_eq!(error(&["--metric", "mcc"]), "error: --metric mcc: token classification with entity tags reports loss, precision, recall, f1, accuracy");
}
