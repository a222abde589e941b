//! `cargo xtask finetune --task embed` end to end, through the real binary, on real paraphrase
//! pairs (verses of the King James Version and the World English Bible, from
//! `scripts/make_embedding_data.py`): a small BERT of all-MiniLM-L6-v2's vocabulary, trained
//! from fresh weights with MultipleNegativesRankingLoss, retrieves held-out verses better than
//! the same network untrained; a killed run resumes to the same model; sentence-transformers
//! loads the export and embeds as `cargo xtask embed` does; bad settings get one line. And
//! `--task rerank`: all-MiniLM-L6-v2 with a new one-logit head learns to rerank the same verses,
//! and sentence-transformers' CrossEncoder scores the export as Sesame's reranker does.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::finetune_common;
use finetune_common::{repo, xtask};

fn scratch(name: &str) -> sesame_tests::Scratch {
    finetune_common::scratch("embed", name)
}

/// A BERT of two layers and 64 dimensions with all-MiniLM-L6-v2's tokenizer (the one real
/// English vocabulary here), in `dir`.
fn small_model(dir: &Path) -> Option<PathBuf> {
    let minilm = sesame_tests::minilm()?;
    let model = dir.join("small");
    std::fs::create_dir_all(&model).unwrap();
    for file in ["vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"] {
        std::fs::copy(minilm.join(file), model.join(file)).unwrap();
    }
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(minilm.join("config.json")).unwrap()).unwrap();
    for (key, value) in [("hidden_size", 64), ("num_hidden_layers", 2), ("num_attention_heads", 4), ("intermediate_size", 128), ("max_position_embeddings", 128)] {
        config[key] = value.into();
    }
    std::fs::write(model.join("config.json"), config.to_string()).unwrap();
    Some(model)
}

fn data(name: &str) -> String {
    repo().join("fixtures/embedding").join(name).display().to_string()
}

/// The runs' flags, those of `extra` in place of the defaults.
fn args(model: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let (model, train, eval, out) = (model.display().to_string(), data("bible-train.jsonl"), data("bible-eval.jsonl"), out.display().to_string());
    let defaults = [
        ("--model", model.as_str()), ("--init", "random"), ("--train", &train), ("--eval", &eval), ("--batch-size", "32"), ("--lr", "1e-3"), ("--seq-len", "48"),
        ("--epochs", "3"), ("--eval-every", "16"), ("--out", &out),
    ];
    let replaced = |flag: &str| extra.contains(&flag) || (flag == "--epochs" && extra.contains(&"--steps"));
    let mut all: Vec<String> = defaults.iter().filter(|(flag, _)| !replaced(flag)).flat_map(|(f, v)| [f.to_string(), v.to_string()]).collect();
    all.push("--quiet".into());
    all.extend(extra.iter().map(|s| s.to_string()));
    all
}

fn finetune(args: &[String]) -> Result<serde_json::Value, String> {
    finetune_common::finetune("embed", args)
}

#[test]
fn an_embedding_model_learns_to_retrieve_paraphrases_resumes_exactly_and_loads_in_sentence_transformers() {
    let dir = scratch("learn");
    let Some(model) = small_model(&dir) else { return };
    // The network before training: one step at a negligible learning rate.
    let untrained = finetune(&args(&model, &dir.join("untrained"), &["--steps", "1", "--lr", "1e-12", "--eval-every", "1"])).unwrap();
    let whole = dir.join("whole");
    let done = finetune(&args(&model, &whole, &[])).unwrap();
    assert_eq!(done["metric"], "cosine_ndcg@10", "retrieval rows pick nDCG@10: {done}");
    let score = |run: &serde_json::Value, metric: &str| run["metrics"][metric].as_f64().unwrap_or_else(|| panic!("{metric}: {run}"));
    for (metric, gain) in [("cosine_ndcg@10", 0.015), ("cosine_accuracy@1", 0.02), ("cosine_mrr@10", 0.015)] {
        assert!(score(&done, metric) >= score(&untrained, metric) + gain, "{metric}: trained {done} against untrained {untrained}");
    }
    // Far above chance (one verse in 128).
    assert!(score(&done, "cosine_accuracy@1") > 0.8, "{done}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(whole.join("eval_results.json")).unwrap()).unwrap();
    assert_eq!(report["loss_function"], "MultipleNegativesRankingLoss", "{report}");
    assert_eq!(report["task"], "sentence_embedding", "{report}");

    // Killed at step 20, resumed: the same evaluation and the same weights.
    let killed = dir.join("killed");
    finetune(&args(&model, &killed, &["--stop-after", "20"])).unwrap();
    let resumed = finetune(&args(&model, &killed, &["--resume"])).unwrap();
    assert_eq!(resumed["metrics"], done["metrics"]);
    let weights = |d: &Path| std::fs::read(d.join("model/model.safetensors")).unwrap();
    assert!(weights(&whole) == weights(&killed), "the resumed run's model differs");

    // The export is a sentence-transformers directory: mean pooling, 48 tokens.
    let export = whole.join("model");
    let modules: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(export.join("modules.json")).unwrap()).unwrap();
    assert_eq!(modules.as_array().map(Vec::len), Some(2), "Transformer and Pooling: {modules}");
    let texts = ["Blessed are the meek: for they shall inherit the earth.", "The meek will inherit the land.", "In the beginning God created the heaven and the earth."];
    let args: Vec<String> = ["embed", "--model", &export.display().to_string()].into_iter().chain(texts).map(String::from).collect();
    let ours: Vec<Vec<f64>> = serde_json::from_str(&xtask(&args).unwrap()).unwrap();
    assert_eq!(ours[0].len(), 64);
    let Some(python) = sesame_tests::python() else { return };
    let script = r#"
import json, sys
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], device="cpu")
assert model.max_seq_length == 48, model.max_seq_length
print(json.dumps(model.encode(json.loads(sys.argv[2])).tolist()))
"#;
    let out = Command::new(python).args(["-c", script, &export.display().to_string(), &serde_json::to_string(&texts).unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let theirs: Vec<Vec<f64>> = serde_json::from_slice(out.stdout.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap()).unwrap();
    assert_eq!(theirs.len(), ours.len());
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!(a.len(), b.len(), "sentence-transformers' embedding has another width");
        let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        assert!(worst < 1e-4, "sentence-transformers differs by {worst}");
    }
}

/// GradCache: `cached-mnrl` takes the loss of the whole batch but back-propagates it a
/// mini-batch at a time, so with dropout off it trains what `mnrl` trains (here in mini-batches
/// of 5 texts, which cut across the anchor and positive columns of 16-row batches, the last one
/// short); with dropout on, a killed run resumes to the same model. `--mini-batch-size` is for a
/// cached loss only.
#[test]
fn cached_mnrl_trains_what_mnrl_trains_a_mini_batch_at_a_time_on_any_number_of_threads() {
    let dir = scratch("cached");
    let Some(model) = small_model(&dir) else { return };
    let path = model.join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["hidden_dropout_prob"] = 0.0.into();
    config["attention_probs_dropout_prob"] = 0.0.into();
    std::fs::write(&path, config.to_string()).unwrap();
    let run = |name: &str, extra: &[&str]| {
        let flags: Vec<&str> = ["--steps", "6", "--batch-size", "16", "--eval-every", "6"].into_iter().chain(extra.iter().copied()).collect();
        finetune(&args(&model, &dir.join(name), &flags)).unwrap()
    };
    let plain = run("plain", &["--loss", "mnrl"]);
    let cached = run("cached", &["--loss", "cached-mnrl", "--mini-batch-size", "5"]);
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("cached/eval_results.json")).unwrap()).unwrap();
    assert_eq!(report["loss_function"], "CachedMultipleNegativesRankingLoss", "{report}");
    let loss = |run: &serde_json::Value| run["metrics"]["loss"].as_f64().unwrap_or_else(|| panic!("{run}"));
    assert!((loss(&plain) - loss(&cached)).abs() < 1e-4, "held-out loss: mnrl {plain} against cached {cached}");
    let texts = ["Blessed are the meek: for they shall inherit the earth.", "The meek will inherit the land.", "In the beginning God created the heaven and the earth."];
    let embed = |name: &str| -> Vec<Vec<f64>> {
        let export = dir.join(name).join("model").display().to_string();
        let args: Vec<String> = ["embed", "--model", &export].into_iter().chain(texts).map(String::from).collect();
        serde_json::from_str(&xtask(&args).unwrap()).unwrap()
    };
    let (ours, theirs) = (embed("cached"), embed("plain"));
    let worst = |a: &[Vec<f64>], b: &[Vec<f64>]| a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    assert!(worst(&ours, &theirs) < 1e-4, "cached and plain MNRL trained models that embed {} apart", worst(&ours, &theirs));
    // With dropout on, each mini-batch draws its masks from the step's seed: a run killed at
    // step 3 (checkpointed at 2) and resumed ends with the weights of the run left alone.
    let dropout = small_model(&dir.join("dropout")).unwrap();
    let cached = ["--steps", "6", "--batch-size", "16", "--eval-every", "2", "--loss", "cached-mnrl", "--mini-batch-size", "5"];
    let whole = dir.join("dropout-whole");
    finetune(&args(&dropout, &whole, &cached)).unwrap();
    let killed = dir.join("dropout-killed");
    finetune(&args(&dropout, &killed, &[&cached[..], &["--stop-after", "3"]].concat())).unwrap();
    finetune(&args(&dropout, &killed, &[&cached[..], &["--resume"]].concat())).unwrap();
    let weights = |d: &Path| std::fs::read(d.join("model/model.safetensors")).unwrap();
    assert!(weights(&whole) == weights(&killed), "the resumed cached-MNRL run's model differs");
    // The mini-batches run on the threads at once; the model does not depend on how many.
    let one = dir.join("dropout-one-thread");
    finetune(&args(&dropout, &one, &[&cached[..], &["--threads", "1"]].concat())).unwrap();
    let three = dir.join("dropout-three-threads");
    finetune(&args(&dropout, &three, &[&cached[..], &["--threads", "3"]].concat())).unwrap();
    assert!(weights(&one) == weights(&three), "cached-MNRL on one thread and on three trained different models");
    let refused = finetune(&args(&model, &dir.join("refused"), &["--mini-batch-size", "4"])).unwrap_err();
    assert!(refused.trim().ends_with("--mini-batch-size 4: for a cached loss only (--loss cached-mnrl or cached-symmetric-mnrl)"), "{refused}");
}

#[test]
fn labelled_pairs_are_scored_as_a_classifier_and_a_matryoshka_model_embeds_in_fewer_dimensions() {
    let dir = scratch("pairs");
    let Some(model) = small_model(&dir) else { return };
    // Trained on (anchor, positive) rows, evaluated on pairs labelled 1 (the same verse) or 0.
    let out = dir.join("run");
    let done = finetune(&args(&model, &out, &["--eval", &data("bible-pairs-eval.jsonl"), "--matryoshka-dims", "64,16", "--epochs", "1"])).unwrap();
    assert_eq!(done["metric"], "cosine_ap", "labelled pairs pick average precision: {done}");
    let ap = done["metrics"]["cosine_ap"].as_f64().unwrap();
    // Half the pairs are paraphrases: a chance ranking's average precision is about 0.5.
    assert!(ap > 0.9, "{done}");
    assert!(done["metrics"]["cosine_f1"].as_f64().is_some(), "{done}");
    // Each metric again at the smaller Matryoshka dimension, as sentence-transformers names it.
    let ap16 = done["metrics"]["dim_16_cosine_ap"].as_f64().unwrap_or_else(|| panic!("{done}"));
    assert!(ap16 > 0.8, "{done}");
    assert!(done["metrics"].get("dim_64_cosine_ap").is_none(), "the whole width is not repeated: {done}");
    // The model can be picked by a metric of a smaller dimension.
    let by_16 = finetune(&args(&model, &dir.join("by-16"), &["--eval", &data("bible-pairs-eval.jsonl"), "--matryoshka-dims", "64,16", "--steps", "4", "--metric", "dim_16_cosine_ap"])).unwrap();
    assert_eq!(by_16["metric"], "dim_16_cosine_ap", "{by_16}");

    // `embed --dimensions 16 --normalize`: the first 16 dimensions, made unit length.
    let export = out.join("model").display().to_string();
    let embed = |extra: &[&str]| -> Result<Vec<Vec<f64>>, String> {
        let args: Vec<String> = ["embed", "--model", &export].iter().chain(extra).chain(&["The meek will inherit the land."]).map(|s| s.to_string()).collect();
        xtask(&args).map(|out| serde_json::from_str(&out).unwrap())
    };
    let (full, cut) = (embed(&[]).unwrap(), embed(&["--dimensions", "16", "--normalize"]).unwrap());
    assert_eq!(cut[0].len(), 16);
    let norm = full[0][..16].iter().map(|x| x * x).sum::<f64>().sqrt();
    for (a, b) in cut[0].iter().zip(&full[0][..16]) {
        assert!((a - b / norm).abs() < 1e-5, "{:?} against {:?}", cut[0], &full[0][..16]);
    }
    let e = embed(&["--dimensions", "65"]).unwrap_err();
    assert!(e.trim().ends_with(&format!("--dimensions 65: {export} gives 64-dimensional embeddings")), "{e}");
}

#[test]
fn bad_embedding_settings_get_one_line_naming_the_file_or_flag() {
    let dir = scratch("bad");
    let Some(model) = small_model(&dir) else { return };
    let out = dir.join("run");
    let error = |extra: &[&str]| {
        let e = finetune(&args(&model, &out, extra)).unwrap_err();
        e.trim().lines().last().unwrap_or("").to_string()
    };
    let train = data("bible-train.jsonl");
    let e = error(&["--loss", "triplet"]);
    assert!(e.contains(&train) && e.contains("TripletLoss takes 3 text columns; the data has 2"), "{e}");
    let e = error(&["--loss", "CoSENTLoss"]);
    assert!(e.contains(&train) && e.contains("needs a score per row"), "{e}");
    let e = error(&["--loss", "contrastive", "--scale", "10"]);
    assert!(e.starts_with("error: --scale 10: this loss has no scale"), "{e}");
    let e = error(&["--matryoshka-dims", "128"]);
    assert!(e.contains("--matryoshka-dims 128: each must be in 1..=the embedding's width"), "{e}");
    let e = error(&["--freeze"]);
    assert!(e.contains("--freeze: does not apply to --task embed"), "{e}");
    let e = error(&["--metric", "spearman_cosine"]);
    assert!(e.contains("--metric spearman_cosine: embedding evaluation on retrieval reports loss, cosine_accuracy@1"), "{e}");
    // BART has no sentence encoder.
    let bart = repo().join("fixtures/bart/base-model").display().to_string();
    let e = error(&["--model", &bart, "--init", "pretrained"]);
    assert!(e.contains("--task embed: bart models are not sentence encoders"), "{e}");
    // One row; rows that all share a text (no batch without a text twice holds two); a label
    // a contrastive loss does not take.
    let write = |name: &str, lines: &[&str]| {
        let path = dir.join(name);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path.display().to_string()
    };
    let one = write("one.jsonl", &[r#"{"anchor": "a b", "positive": "c d"}"#]);
    let e = error(&["--train", &one]);
    assert!(e.contains(&format!("{one}: 1 row: MultipleNegativesRankingLoss compares rows with each other")), "{e}");
    let same = write("same.jsonl", &[r#"{"anchor": "a b", "positive": "c d"}"#, r#"{"anchor": "a b", "positive": "e f"}"#, r#"{"anchor": "g h", "positive": "a b"}"#]);
    let e = error(&["--train", &same, "--batch-size", "2"]);
    assert!(e.contains(&format!("{same}: every row shares a text with every other")), "{e}");
    let scored = write("scored.jsonl", &[r#"{"s1": "a b", "s2": "c d", "label": 1}"#, r#"{"s1": "e f", "s2": "g h", "label": 0.5}"#]);
    let e = error(&["--train", &scored, "--loss", "contrastive"]);
    assert!(e.contains(&format!("{scored}:2: label 0.5: ContrastiveLoss takes labels 0 or 1")), "{e}");
    let empty = write("empty.jsonl", &[]);
    let e = error(&["--train", &empty]);
    assert!(e.contains(&empty), "{e}");
    // An empty text is refused with its file, line and column.
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"anchor\": \"a b c\", \"positive\": \"d e f\"}\n{\"anchor\": \"g\", \"positive\": \" \"}\n").unwrap();
    let e = error(&["--train", &bad.display().to_string()]);
    assert!(e.contains(&format!("{}:2: column \"positive\" is empty", bad.display())), "{e}");
}

#[test]
fn a_cross_encoder_learns_to_rerank_paraphrases_and_scores_as_sentence_transformers_cross_encoder() {
    let Some(minilm) = sesame_tests::minilm() else { return };
    let dir = scratch("rerank");
    // 32 held-out queries, each with its verse among the verses of the next nine rows.
    let eval = dir.join("eval.jsonl");
    let rows: Vec<String> = std::fs::read_to_string(data("bible-eval.jsonl")).unwrap().lines().take(32).map(String::from).collect();
    std::fs::write(&eval, rows.join("\n") + "\n").unwrap();
    let run = |out: &Path, extra: &[&str]| {
        let (model, train, eval, out) = (minilm.display().to_string(), data("bible-train.jsonl"), eval.display().to_string(), out.display().to_string());
        let defaults = [("--model", model.as_str()), ("--train", &train), ("--eval", &eval), ("--out", &out), ("--batch-size", "16"), ("--num-negatives", "4"), ("--seq-len", "64"), ("--lr", "5e-5")];
        let mut args: Vec<String> = defaults.iter().filter(|(flag, _)| !extra.contains(flag)).flat_map(|(f, v)| [f.to_string(), v.to_string()]).collect();
        args.push("--quiet".into());
        args.extend(extra.iter().map(|s| s.to_string()));
        finetune_common::finetune("rerank", &args).unwrap()
    };
    // MiniLM with a new one-logit head, before training: one step at a negligible learning rate.
    let untrained = run(&dir.join("untrained"), &["--steps", "1", "--lr", "1e-12"]);
    let done = run(&dir.join("trained"), &["--steps", "8"]);
    assert_eq!(done["metric"], "ndcg@10", "{done}");
    let score = |run: &serde_json::Value, metric: &str| run["metrics"][metric].as_f64().unwrap_or_else(|| panic!("{metric}: {run}"));
    // Ten candidates: a chance ranking's nDCG@10 is about 0.45 and its accuracy@1 0.1.
    assert!(score(&done, "ndcg@10") >= score(&untrained, "ndcg@10") + 0.1, "trained {done} against untrained {untrained}");
    assert!(score(&done, "accuracy@1") >= 0.7, "{done}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("trained/eval_results.json")).unwrap()).unwrap();
    assert_eq!(report["loss_function"], "MultipleNegativesRankingLoss", "{report}");

    // The export is a one-logit classifier: Sesame's reranker (serve's /rerank) and
    // sentence-transformers' CrossEncoder give the same scores.
    let export = dir.join("trained/model");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(export.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["id2label"], serde_json::json!({"0": "LABEL_0"}), "{config}");
    assert!(config.get("problem_type").is_none_or(serde_json::Value::is_null), "{config}");
    let query = "And he said unto them, Go ye into all the world, and preach the gospel to every creature.";
    let passages = ["He said to them, Go into all the world, and preach the Good News to the whole creation.", "The meek will inherit the land."];
    let options = sesame::PipelineOptions { device: Some(burn::tensor::Device::default()), ..sesame::PipelineOptions::default() };
    let pipeline = sesame::pipeline(sesame::Task::Rerank, &export, options).unwrap();
    let ours = pipeline.rerank(query, &passages).unwrap();
    assert!(ours[0] > ours[1], "{ours:?}");
    let Some(python) = sesame_tests::python() else { return };
    let script = r#"
import json, sys
from sentence_transformers import CrossEncoder
model = CrossEncoder(sys.argv[1], device="cpu")
query, passages = sys.argv[2], json.loads(sys.argv[3])
print(json.dumps([float(s) for s in model.predict([(query, p) for p in passages])]))
"#;
    let out = Command::new(python).args(["-c", script, &export.display().to_string(), query, &serde_json::to_string(&passages).unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let theirs: Vec<f64> = serde_json::from_slice(out.stdout.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap()).unwrap();
    assert_eq!(theirs.len(), ours.len());
    for (a, b) in ours.iter().zip(&theirs) {
        assert!((f64::from(*a) - b).abs() < 1e-4, "Sesame {ours:?} against CrossEncoder {theirs:?}");
    }
}

/// Ranked lists (`{"query", "docs", "labels"}` a line: each verse's other translation among the
/// translations of the next five rows, labelled 1 and 0) train a cross-encoder with
/// sentence-transformers' listwise losses: LambdaLoss (the default for lists) and ListNetLoss each
/// rerank the held-out lists better than the untrained model. A list given with a pairwise loss
/// is refused naming the file.
#[test]
fn a_cross_encoder_learns_to_rerank_from_ranked_lists_with_the_listwise_losses_and_resumes_exactly() {
    let Some(minilm) = sesame_tests::minilm() else { return };
    let dir = scratch("rerank-lists");
    // Six documents a query, its own passage first (best first, as ListMLE reads a list unless
    // sorted), or at position `i % 6` when `anywhere`.
    let lists_where = |source: &str, take: usize, name: &str, anywhere: bool| -> String {
        let rows: Vec<serde_json::Value> = std::fs::read_to_string(data(source)).unwrap().lines().take(take).map(|l| serde_json::from_str(l).unwrap()).collect();
        let lines: Vec<String> = (0..rows.len())
            .map(|i| {
                let at = if anywhere { i % 6 } else { 0 };
                let doc = |k: usize| (i + (k + 6 - at) % 6) % rows.len();
                let docs: Vec<&serde_json::Value> = (0..6).map(|k| &rows[doc(k)]["positive"]).collect();
                let labels: Vec<u8> = (0..6).map(|k| u8::from(k == at)).collect();
                serde_json::json!({"query": rows[i]["anchor"], "docs": docs, "labels": labels}).to_string()
            })
            .collect();
        let path = dir.join(name);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path.display().to_string()
    };
    let lists = |source: &str, take: usize, name: &str| lists_where(source, take, name, false);
    let (train, eval) = (lists("bible-train.jsonl", 64, "train.jsonl"), lists("bible-eval.jsonl", 24, "eval.jsonl"));
    let run = |out: &str, extra: &[&str]| {
        let (model, out) = (minilm.display().to_string(), dir.join(out).display().to_string());
        let defaults = [("--model", model.as_str()), ("--train", &train), ("--eval", &eval), ("--out", &out), ("--batch-size", "4"), ("--seq-len", "64"), ("--lr", "2e-4")];
        let mut args: Vec<String> = defaults.iter().filter(|(flag, _)| !extra.contains(flag)).flat_map(|(f, v)| [f.to_string(), v.to_string()]).collect();
        args.push("--quiet".into());
        args.extend(extra.iter().map(|s| s.to_string()));
        finetune_common::finetune("rerank", &args)
    };
    let score = |run: &serde_json::Value, metric: &str| run["metrics"][metric].as_f64().unwrap_or_else(|| panic!("{metric}: {run}"));
    let untrained = run("untrained", &["--steps", "1", "--lr", "1e-12"]).unwrap();
    for (loss, name) in [(None, "LambdaLoss"), (Some("listnet"), "ListNetLoss")] {
        let mut extra = vec!["--steps", "10"];
        extra.extend(loss.iter().flat_map(|l| ["--loss", *l]));
        let done = run(name, &extra).unwrap();
        // Six candidates a query: a chance ranking's accuracy@1 is 1/6 and its nDCG@10 about 0.6
        // (the untrained head ranks worse than chance: 0.08 and 0.49 on the machine this was
        // written on; trained, 0.96 to 1 and 0.98 to 1).
        assert!(score(&done, "ndcg@10") >= score(&untrained, "ndcg@10") + 0.3, "{name}: trained {done} against untrained {untrained}");
        assert!(score(&done, "accuracy@1") >= 0.8, "{name}: {done}");
        let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join(name).join("eval_results.json")).unwrap()).unwrap();
        assert_eq!(report["loss_function"], name, "{report}");
    }
    // Killed at step 3 (checkpointed at 2) and resumed, dropout on: the weights of the run left
    // alone, its last step's lists included.
    let resumable = ["--steps", "5", "--eval-every", "2"];
    run("resume-whole", &resumable).unwrap();
    run("resume-killed", &[&resumable[..], &["--stop-after", "3"]].concat()).unwrap();
    run("resume-killed", &[&resumable[..], &["--resume"]].concat()).unwrap();
    let weights = |run: &str| std::fs::read(dir.join(run).join("model/model.safetensors")).unwrap();
    assert!(weights("resume-whole") == weights("resume-killed"), "the resumed listwise run's model differs");
    // LambdaLoss without weights is RankNet, and reports itself so.
    run("unweighted", &["--loss", "lambda", "--lambda-weighting", "NoWeightingScheme", "--steps", "1"]).unwrap();
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("unweighted/eval_results.json")).unwrap()).unwrap();
    assert_eq!(report["loss_function"], "RankNetLoss", "{report}");
    let refused = run("refused", &["--loss", "bce", "--steps", "1"]).unwrap_err();
    assert!(refused.trim().ends_with(&format!("{train}: BinaryCrossEntropyLoss takes (query, passage) rows, not lists (the listwise losses take them: --loss listnet, listmle, plistmle, lambda or ranknet)")), "{refused}");
    // --sigma, --lambda-k and --activation-fn reach LambdaLoss: its loss on the first batch,
    // before any update, changes with each.
    let first_loss = |name: &str, extra: &[&str]| -> f64 {
        run(name, &[&["--loss", "lambda", "--steps", "1", "--eval-every", "1"][..], extra].concat()).unwrap();
        let log = std::fs::read_to_string(dir.join(name).join("run/metrics.jsonl")).unwrap();
        let first = log.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).find(|l| l["split"] == "train").expect("a training line");
        first["values"]["loss"].as_f64().unwrap()
    };
    let (plain, sigma, k) = (first_loss("lambda-plain", &[]), first_loss("lambda-sigma", &["--sigma", "2"]), first_loss("lambda-k", &["--lambda-k", "1"]));
    assert!(plain != sigma && plain != k && sigma != k, "first losses: plain {plain}, --sigma 2 {sigma}, --lambda-k 1 {k}");
    let sigmoid = first_loss("lambda-sigmoid", &["--activation-fn", "Sigmoid"]);
    assert!(sigmoid != plain, "first losses: plain {plain}, --activation-fn Sigmoid {sigmoid}");
    let refused = run("refused-activation", &["--loss", "bce", "--activation-fn", "sigmoid", "--steps", "1"]).unwrap_err();
    assert!(refused.trim().ends_with("--activation-fn: BinaryCrossEntropyLoss takes the logits as they are (the listwise losses take an activation)"), "{refused}");
    // Lists whose relevant passage may be anywhere: ListMLE reads them as ranked best first, so
    // it learns only once --sort-by-label orders them by label.
    let (train, eval) = (lists_where("bible-train.jsonl", 64, "anywhere-train.jsonl", true), lists_where("bible-eval.jsonl", 24, "anywhere-eval.jsonl", true));
    let anywhere = |name: &str, extra: &[&str]| run(name, &[&["--train", train.as_str(), "--eval", eval.as_str(), "--loss", "listmle", "--steps", "10"][..], extra].concat()).unwrap();
    let (sorted, as_given) = (anywhere("listmle-sorted", &["--sort-by-label"]), anywhere("listmle-as-given", &[]));
    // Six candidates: chance is 1/6 at accuracy@1 (sorted, 0.75 on the machine this was
    // written on).
    assert!(score(&sorted, "accuracy@1") >= 0.6 && score(&as_given, "accuracy@1") <= 0.5, "sorted by label: {sorted}; as given: {as_given}");
    assert!(score(&sorted, "ndcg@10") >= score(&as_given, "ndcg@10") + 0.2, "sorted by label: {sorted}; as given: {as_given}");
    let refused = run("refused-sort", &["--loss", "listnet", "--sort-by-label", "--steps", "1"]).unwrap_err();
    assert!(refused.trim().ends_with("--sort-by-label: ListNetLoss reads no order (ListMLELoss and PListMLELoss do)"), "{refused}");
    let refused = run("refused-sigma", &["--loss", "listmle", "--sigma", "2", "--steps", "1"]).unwrap_err();
    assert!(refused.trim().ends_with("--lambda-k, --sigma: ListMLELoss has neither (LambdaLoss and RankNetLoss have)"), "{refused}");
}

#[test]
fn bad_reranker_settings_get_one_line_naming_the_file_or_flag() {
    let dir = scratch("rerank-bad");
    let Some(model) = small_model(&dir) else { return };
    let error = |extra: &[&str]| {
        let e = finetune_common::finetune("rerank", &args(&model, &dir.join("run"), extra)).unwrap_err();
        e.trim().lines().last().unwrap_or("").to_string()
    };
    let e = error(&["--loss", "bce"]);
    assert!(e.contains(&data("bible-train.jsonl")) && e.contains("BinaryCrossEntropyLoss needs a label per row"), "{e}");
    let e = error(&["--train", &data("bible-pairs-train.jsonl"), "--loss", "mnrl"]);
    assert!(e.contains("MultipleNegativesRankingLoss takes (query, positive[, negative…]) rows without a label"), "{e}");
    let e = error(&["--loss", "cosent"]);
    assert!(e.contains("--loss cosent: --task rerank trains with bce, mnrl, listnet, listmle, plistmle, lambda or ranknet"), "{e}");
    let e = error(&["--matryoshka-dims", "32"]);
    assert!(e.contains("--matryoshka-dims: for --task embed only"), "{e}");
    let labelled = dir.join("labelled.jsonl");
    std::fs::write(&labelled, "{\"q\": \"a b\", \"p\": \"c d\", \"label\": 1}\n{\"q\": \"e f\", \"p\": \"g h\", \"label\": 2}\n").unwrap();
    let e = error(&["--train", &labelled.display().to_string()]);
    assert!(e.contains(&format!("{}:2: label 2: BinaryCrossEntropyLoss takes labels in [0, 1]", labelled.display())), "{e}");
    let irrelevant = dir.join("irrelevant.jsonl");
    std::fs::write(&irrelevant, "{\"q\": \"a b\", \"p\": \"c d\", \"label\": 0}\n{\"q\": \"e f\", \"p\": \"g h\", \"label\": 0}\n").unwrap();
    let e = error(&["--eval", &irrelevant.display().to_string()]);
    assert!(e.contains(&format!("{}: no query has a relevant passage", irrelevant.display())), "{e}");
    let e = finetune(&args(&model, &dir.join("run2"), &["--num-negatives", "2"])).unwrap_err();
    assert!(e.trim().ends_with("--num-negatives: for --task rerank only"), "{e}");
    let e = error(&["--lambda-weighting", "ndcg1"]);
    assert!(e.ends_with("--lambda-weighting: for --loss lambda only (LambdaLoss)"), "{e}");
    let e = finetune(&args(&model, &dir.join("run3"), &["--lambda-weighting", "ndcg1"])).unwrap_err();
    assert!(e.trim().ends_with("--lambda-weighting: for --task rerank only"), "{e}");
}

#[test]
fn bench_mode_finetune_embed_times_a_whole_run_and_reports_its_retrieval_scores() {
    let dir = scratch("bench");
    let Some(model) = small_model(&dir) else { return };
    // The bench starts from weights: the small model's, from one step of training.
    finetune(&args(&model, &dir.join("start"), &["--steps", "1"])).unwrap();
    let (model, train, eval) = (dir.join("start/model").display().to_string(), data("bible-train.jsonl"), data("bible-eval.jsonl"));
    let args: Vec<String> = ["bench", "--mode", "finetune-embed", "--model", &model, "--train", &train, "--eval", &eval, "--batch-size", "32", "--seq-len", "48", "--lr", "1e-3"].map(String::from).to_vec();
    let rows: Vec<serde_json::Value> = serde_json::from_str(&xtask(&args).unwrap()).unwrap();
    let row = &rows[0];
    assert_eq!(row["mode"], "finetune-embed", "{row}");
    assert!(row["sesame"]["train_seconds"]["mean"].as_f64().unwrap() > 0.0, "{row}");
    assert!(row["sesame"]["cosine_ndcg@10"]["mean"].as_f64().unwrap() > 0.5, "{row}");
    let refused = xtask(&["bench", "--mode", "finetune-embed", "--model", &model].map(String::from)).unwrap_err();
    assert_eq!(refused.trim(), "error: --mode finetune-embed needs --model, --train and --eval");
}

/// A retrieval set of its own in BEIR's layout (`queries.jsonl`, `corpus.jsonl`,
/// `qrels/test.tsv`) as `--eval`: each held-out query ranks the whole corpus (its relevant
/// verse among 256 distractors from the training file, some with a title), and the metrics
/// are those sentence-transformers' `InformationRetrievalEvaluator` gives the exported model.
/// A judgement of score 0 is not relevant; one naming a document not in the corpus is refused
/// by its line.
#[test]
fn a_retrieval_set_in_beirs_layout_is_scored_over_its_whole_corpus_as_sentence_transformers_scores_it() {
    let dir = scratch("beir");
    let Some(model) = small_model(&dir) else { return };
    let rows = |name: &str| -> Vec<serde_json::Value> { std::fs::read_to_string(data(name)).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect() };
    let (eval, train) = (rows("bible-eval.jsonl"), rows("bible-train.jsonl"));
    let beir = dir.join("beir");
    std::fs::create_dir_all(beir.join("qrels")).unwrap();
    let queries: Vec<String> = eval.iter().enumerate().map(|(i, r)| serde_json::json!({"_id": format!("q{i}"), "text": r["anchor"]}).to_string()).collect();
    let relevant = eval.iter().enumerate().map(|(i, r)| serde_json::json!({"_id": i, "title": "", "text": r["positive"]}).to_string());
    // Distractors; every third with a title, which goes before its text.
    let distractors = train.iter().take(256).enumerate().map(|(i, r)| {
        let title = if i % 3 == 0 { "Verse" } else { "" };
        serde_json::json!({"_id": format!("t{i}"), "title": title, "text": r["positive"]}).to_string()
    });
    let corpus: Vec<String> = relevant.chain(distractors).collect();
    std::fs::write(beir.join("queries.jsonl"), queries.join("\n") + "\n").unwrap();
    std::fs::write(beir.join("corpus.jsonl"), corpus.join("\n") + "\n").unwrap();
    let mut qrels = String::from("query-id\tcorpus-id\tscore\n");
    for i in 0..eval.len() {
        qrels.push_str(&format!("q{i}\t{i}\t1\n"));
    }
    qrels.push_str("q0\tt5\t0\n");
    std::fs::write(beir.join("qrels/test.tsv"), &qrels).unwrap();

    let beir_arg = beir.display().to_string();
    let out = dir.join("run");
    let done = finetune(&args(&model, &out, &["--eval", &beir_arg, "--steps", "8", "--eval-every", "8"])).unwrap();
    assert_eq!(done["metric"], "cosine_ndcg@10", "{done}");
    let ours = |metric: &str| done["metrics"][metric].as_f64().unwrap_or_else(|| panic!("{metric}: {done}"));
    // The held-out loss is that of the (query, relevant document) pairs alone: the rows of
    // bible-eval.jsonl, in its order.
    let rows_run = finetune(&args(&model, &dir.join("rows"), &["--steps", "8", "--eval-every", "8"])).unwrap();
    assert_eq!(done["metrics"]["loss"], rows_run["metrics"]["loss"], "BEIR {done} against rows {rows_run}");

    // A judgement naming a document the corpus lacks.
    std::fs::write(beir.join("qrels/test.tsv"), qrels.clone() + "q1\tmissing\t1\n").unwrap();
    let refused = finetune(&args(&model, &dir.join("refused"), &["--eval", &beir_arg, "--steps", "1"])).unwrap_err();
    let line = qrels.lines().count() + 1;
    assert!(refused.trim().ends_with(&format!("test.tsv:{line}: corpus-id \"missing\" is not in {}", beir.join("corpus.jsonl").display())), "{refused}");
    std::fs::write(beir.join("qrels/test.tsv"), &qrels).unwrap();

    let Some(python) = sesame_tests::python() else { return };
    let script = r#"
import json, sys
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
model, beir = SentenceTransformer(sys.argv[1], device="cpu"), sys.argv[2]
read = lambda name: [json.loads(l) for l in open(f"{beir}/{name}") if l.strip()]
queries = {str(q["_id"]): q["text"] for q in read("queries.jsonl")}
corpus = {str(d["_id"]): (d.get("title", "") + " " + d["text"]).strip() for d in read("corpus.jsonl")}
relevant = {}
for line in list(open(f"{beir}/qrels/test.tsv"))[1:]:
    q, d, score = line.rstrip("\n").split("\t")
    if int(score) > 0:
        relevant.setdefault(q, set()).add(d)
print(json.dumps(InformationRetrievalEvaluator(queries, corpus, relevant)(model)))
"#;
    let run = Command::new(python).args(["-c", script, &out.join("model").display().to_string(), &beir_arg]).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let theirs: serde_json::Value = serde_json::from_slice(run.stdout.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap()).unwrap();
    for metric in ["cosine_ndcg@10", "cosine_mrr@10", "cosine_map@100", "cosine_accuracy@1", "cosine_recall@10", "cosine_precision@3"] {
        let theirs = theirs[metric].as_f64().unwrap_or_else(|| panic!("{metric}: {theirs}"));
        assert!((ours(metric) - theirs).abs() < 1e-6, "{metric}: ours {} against sentence-transformers' {theirs}", ours(metric));
    }
}
