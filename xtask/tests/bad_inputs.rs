//! The bad-input suite: broken checkpoints, configs, tokenizers, corpora, run directories and
//! flags, through the real binary. Every case must exit with status 1 and one `error:` line
//! naming the file, tensor, field or flag at fault — never a panic, an abort or a hang.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A scratch directory holding a copy of fixture `fixture` (or nothing when `None`).
fn scratch(name: &str, fixture: Option<&str>) -> sesame_tests::Scratch {
    let dir = sesame_tests::Scratch::dir(&format!("bad-{name}"));
    if let Some(fixture) = fixture {
        for entry in std::fs::read_dir(repo().join("fixtures").join(fixture)).unwrap() {
            let entry = entry.unwrap();
            if entry.path().is_file() {
                std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
            }
        }
    }
    dir
}

/// A copy of the fill-mask fixture (BERT with a WordPiece tokenizer) with `edit` applied to its
/// config.json.
fn model_with_config(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> sesame_tests::Scratch {
    let dir = scratch(name, Some("bert/base-fill-mask"));
    let path = dir.join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(path, config.to_string()).unwrap();
    dir
}

/// A copy of the fill-mask fixture whose weights are rewritten by `edit` (name, dtype, shape,
/// bytes) -> kept tensors.
fn model_with_weights(name: &str, edit: impl Fn(String, safetensors::tensor::TensorView) -> Option<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>) -> sesame_tests::Scratch {
    weights_edited(scratch(name, Some("bert/base-fill-mask")), edit)
}

/// `dir`, its model.safetensors rewritten by `edit` (name, dtype, shape, bytes) -> kept tensors.
fn weights_edited(dir: sesame_tests::Scratch, edit: impl Fn(String, safetensors::tensor::TensorView) -> Option<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>) -> sesame_tests::Scratch {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st.tensors().into_iter().filter_map(|(n, v)| edit(n, v)).collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = owned
        .iter()
        .map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
    dir
}

fn keep(n: String, v: safetensors::tensor::TensorView) -> (String, safetensors::Dtype, Vec<usize>, Vec<u8>) {
    (n, v.dtype(), v.shape().to_vec(), v.data().to_vec())
}

/// Run the CLI; assert it fails cleanly with one error line containing every `expect`.
fn fails(args: &[&str], expect: &[&str]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .current_dir(repo())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("{args:?} hangs");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    assert!(code == Some(1) || code == Some(2), "{args:?}: exit {:?} (a crash?), stderr:\n{stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
    let error_lines = stderr.lines().filter(|l| l.starts_with("error:") || l.starts_with("error[")).count();
    assert_eq!(error_lines, 1, "{args:?}: one error line, got:\n{stderr}");
    assert!(out.stdout.is_empty(), "{args:?}: printed a result although it failed");
    for e in expect {
        assert!(stderr.contains(e), "{args:?}: the error does not name `{e}`:\n{stderr}");
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn broken_checkpoints_and_configs() {
    let fixture = repo().join("fixtures/bert/base-fill-mask");
    fails(&["fill-mask", "--model", "/nonexistent/model", "the [MASK] ."], &["/nonexistent/model"]);

    let d = model_with_config("not-object", |c| *c = serde_json::json!([1, 2]));
    fails(&["embed", "--model", path(&d), "x"], &["config.json", "object"]);
    let d = model_with_config("model-type-int", |c| c["model_type"] = 7.into());
    fails(&["embed", "--model", path(&d), "x"], &["config.json", "model_type"]);
    let d = model_with_config("model-type-gpt2", |c| c["model_type"] = "gpt2".into());
    fails(&["fill-mask", "--model", path(&d), "the [MASK] ."], &["config.json", "gpt2"]);
    for (field, value) in [
        ("hidden_size", serde_json::json!("32")),
        ("num_hidden_layers", serde_json::json!(37.5)),
        ("intermediate_size", serde_json::json!(-2)),
        ("num_attention_heads", serde_json::json!(5)),
        ("hidden_act", serde_json::json!("sparkle")),
        ("hidden_dropout_prob", serde_json::json!(1.5)),
        ("layer_norm_eps", serde_json::json!(0)),
        ("position_embedding_type", serde_json::json!("relative_key")),
    ] {
        let d = model_with_config(&format!("field-{field}"), |c| c[field] = value.clone());
        fails(&["embed", "--model", path(&d), "x"], &[field]);
    }
    // Sizes far beyond the weights: a shape error naming the tensor, not an abort.
    let d = model_with_config("huge-vocab", |c| c["vocab_size"] = 100_000_000_000u64.into());
    fails(&["embed", "--model", path(&d), "x"], &["word_embeddings"]);
    let d = model_with_config("huge-hidden", |c| c["hidden_size"] = (1u64 << 30).into());
    fails(&["fill-mask", "--model", path(&d), "the [MASK] ."], &["model.safetensors"]);

    let d = scratch("no-weights", Some("bert/base-fill-mask"));
    std::fs::remove_file(d.join("model.safetensors")).unwrap();
    fails(&["embed", "--model", path(&d), "x"], &[path(&d)]);
    let d = scratch("truncated", Some("bert/base-fill-mask"));
    let bytes = std::fs::read(d.join("model.safetensors")).unwrap();
    std::fs::write(d.join("model.safetensors"), &bytes[..bytes.len() / 3]).unwrap();
    fails(&["embed", "--model", path(&d), "x"], &["model.safetensors"]);
    let d = scratch("garbage", Some("bert/base-fill-mask"));
    std::fs::write(d.join("model.safetensors"), b"\xff\xff\xff\xff\xff\xff\xff\x7fgarbage").unwrap();
    fails(&["embed", "--model", path(&d), "x"], &["model.safetensors"]);

    let target = "bert.encoder.layer.0.attention.self.query.weight";
    let d = model_with_weights("missing-tensor", |n, v| (n != target).then(|| keep(n, v)));
    fails(&["embed", "--model", path(&d), "x"], &["attention.self.query.weight"]);
    let d = model_with_weights("nan", |n, v| {
        let mut t = keep(n, v);
        if t.0 == target {
            t.3[0..4].copy_from_slice(&f32::NAN.to_le_bytes());
        }
        Some(t)
    });
    fails(&["embed", "--model", path(&d), "x"], &["attention.self.query.weight", "NaN"]);
    let d = model_with_weights("shape", |n, v| {
        let mut t = keep(n, v);
        if t.0 == target {
            t.2 = vec![t.2[0] * t.2[1]];
        }
        Some(t)
    });
    fails(&["embed", "--model", path(&d), "x"], &["attention.self.query.weight"]);
    let d = model_with_weights("int-dtype", |n, v| {
        let mut t = keep(n, v);
        if t.0 == target {
            t.1 = safetensors::Dtype::I32;
        }
        Some(t)
    });
    fails(&["embed", "--model", path(&d), "x"], &["attention.self.query.weight"]);
    let d = model_with_weights("u16-needed", |n, v| {
        let mut t = keep(n, v);
        if t.0 == target {
            t.1 = safetensors::Dtype::U16;
            t.3.truncate(t.3.len() / 2);
        }
        Some(t)
    });
    fails(&["embed", "--model", path(&d), "x"], &["attention.self.query.weight", "U16"]);

    // A deflate bomb: a pytorch_model.bin of 31 MB whose storage inflates to 3 GiB
    // is refused from the zip's directory, before anything is inflated (without the check it
    // loads, as zeros).
    let d = scratch("deflate-bomb", Some("bert/base-model-bin"));
    std::fs::copy(fixture.join("vocab.txt"), d.join("vocab.txt")).unwrap();
    sesame_tests::broken::deflate_bomb(&repo().join("fixtures/bert/base-model-bin/pytorch_model.bin"), &d.join("pytorch_model.bin"), 3 << 30);
    assert!(std::fs::metadata(d.join("pytorch_model.bin")).unwrap().len() < 64 << 20);
    fails(&["embed", "--model", path(&d), "x"], &["pytorch_model.bin", "decompression bomb"]);

    // An ELECTRA discriminator has no masked-LM head: fill-mask refuses it.
    let d = scratch("no-head", Some("electra/base-pretraining"));
    std::fs::copy(fixture.join("vocab.txt"), d.join("vocab.txt")).unwrap();
    fails(&["fill-mask", "--model", path(&d), "the [MASK] ."], &["no masked-LM head", path(&d)]);
}

#[test]
fn broken_tokenizers_and_inputs() {
    let d = scratch("no-tokenizer", Some("bert/base-fill-mask"));
    for f in ["vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"] {
        let _ = std::fs::remove_file(d.join(f));
    }
    fails(&["embed", "--model", path(&d), "x"], &[path(&d)]);
    let d = scratch("bad-tokenizer-json", Some("bert/base-fill-mask"));
    std::fs::write(d.join("tokenizer.json"), "{ not json").unwrap();
    fails(&["embed", "--model", path(&d), "x"], &["tokenizer.json"]);
    let d = scratch("bad-tokenizer-config", Some("bert/base-fill-mask"));
    std::fs::write(d.join("tokenizer_config.json"), "[]").unwrap();
    fails(&["embed", "--model", path(&d), "x"], &["tokenizer_config.json"]);

    // Tokenizers whose precompiled normalisation table points past its end (the crate that
    // applies it panicked on the first text, on a worker thread): refused at load, by file.
    let d = scratch("trie-json", Some("albert/base-model"));
    sesame_tests::broken::tokenizer_json_with_table(&d, sesame_tests::broken::TRIE_PAST_ITS_END);
    fails(&["embed", "--model", path(&d), "x"], &["tokenizer.json", "precompiled_charsmap"]);
    let d = scratch("trie-spiece", Some("albert/base-model"));
    sesame_tests::broken::spiece_model_with_trie_past_its_end(&d);
    fails(&["embed", "--model", path(&d), "x"], &["spiece.model", "precompiled_charsmap"]);

    let model = repo().join("fixtures/bert/base-fill-mask");
    let m = path(&model);
    fails(&["fill-mask", "--model", m, "no mask here"], &["[MASK]"]);
    // Finite weights so large that the outputs overflow: no NaN or inf is printed as a result.
    let huge: Vec<u8> = std::iter::repeat_n(3.0e38f32.to_le_bytes(), 32).flatten().collect();
    let d = model_with_weights("overflow", |n, v| match n.ends_with("LayerNorm.weight") {
        true => Some((n, safetensors::Dtype::F32, vec![32], huge.clone())),
        false => Some(keep(n, v)),
    });
    fails(&["embed", "--model", path(&d), "hello world"], &["not finite"]);
    fails(&["fill-mask", "--model", path(&d), "the [MASK] ."], &["not finite"]);
    fails(&["fill-mask", "--model", m, "--top-k", "0", "the [MASK] ."], &["--top-k"]);
    fails(&["embed", "--model", m, "--layer", "7", "x"], &["layer 7"]);
    fails(&["embed", "--model", m, "--pooling", "weird", "x"], &["--pooling", "weird"]);
    fails(&["embed", "--model", m, "--backend", "nosuch", "x"], &["--backend", "nosuch"]);
    // The backends the binary was built with: sesame-train's features, as the workspace build
    // unified them (xtask's own features are not what `.ci/run` turns on).
    use sesame_tests::Backend;
    if !Backend::Cuda.is_compiled() {
        fails(&["embed", "--backend", "cuda", "--model", m, "x"], &["--features cuda"]);
    }
    // int8 products run on the host backends; bench times them in inference only.
    for backend in [Backend::Tch, Backend::Wgpu].into_iter().filter(|b| b.is_compiled()) {
        fails(&["embed", "--int8", "--backend", backend.name(), "--model", m, "x"], &["--int8", "flex and ndarray"]);
    }
    fails(&["bench", "--mode", "train", "--int8"], &["--int8", "embed and infer"]);

    // Texts from a file: the file, and the line at fault, are named.
    fails(&["embed", "--model", m, "--input", "/nonexistent/texts.txt"], &["--input", "/nonexistent/texts.txt"]);
    let d = scratch("bad-input-lines", None);
    for (name, text, expect) in [
        ("no-text.jsonl", "hello\n{\"id\": 3}\n", "line 2"),
        ("broken.jsonl", "{\"text\": \"a\"}\n{not json\n", "line 2"),
        ("number.jsonl", "{\"text\": 7}\n", "line 1"),
    ] {
        std::fs::write(d.join(name), text).unwrap();
        let file = d.join(name);
        fails(&["embed", "--model", m, "--input", path(&file)], &[path(&file), expect]);
    }
    let file = d.join("no-mask.txt");
    std::fs::write(&file, "the [MASK] .\nno mask in this one\n").unwrap();
    fails(&["fill-mask", "--model", m, "--input", path(&file)], &["[MASK]", "no mask in this one"]);
    fails(&["embed", "--model", m, "--batch-size", "0", "x"], &["--batch-size"]);
    fails(&["embed", "--model", m, "--input", path(&file), "x"], &["--input"]);
    fails(&["embed", "--model", m], &["--input"]);
}

#[test]
fn bad_training_flags_corpora_and_run_directories() {
    let tokenizer = repo().join("fixtures/bert/base-fill-mask");
    let tok = path(&tokenizer);
    let corpora = scratch("corpora", None);
    std::fs::write(corpora.join("empty.txt"), "\n \n").unwrap();
    std::fs::write(corpora.join("binary.txt"), [0xffu8, 0xfe, 0x00]).unwrap();
    std::fs::write(corpora.join("tiny.txt"), "One sentence here. And another one.\n\nA second document. With two.\n").unwrap();
    let tiny = corpora.join("tiny.txt");
    let out = |name: &str| sesame_tests::Scratch::path(&format!("bad-run-{name}"));
    let o = out("flags");
    for (flag, value) in [("--batch-size", "0"), ("--seq-len", "4"), ("--steps", "0"), ("--grad-accum", "0"), ("--vocab-size", "3"), ("--static-masks", "0")] {
        fails(&["train", "bert", flag, value, "--out", path(&o)], &[flag]);
    }
    // BART's noise settings name their flag; the masked-LM flags are refused for BART, and
    // BART's for the masked-LM families.
    for (flag, value) in [("--mask", "1.5"), ("--mask-random", "2"), ("--replace-length", "2"), ("--poisson-lambda", "0"), ("--permute-sentences", "1.01")] {
        fails(&["train", "bart", flag, value, "--out", path(&o)], &[flag]);
    }
    fails(&["train", "bart", "--mask-length", "subword", "--replace-length", "-1", "--out", path(&o)], &["--replace-length"]);
    fails(&["train", "bart", "--loss-on", "infilled", "--mask", "0", "--out", path(&o)], &["--loss-on infilled", "--mask"]);
    fails(&["train", "bart", "--objective", "mass", "--loss-on", "infilled", "--out", path(&o)], &["--loss-on", "mass"]);
    fails(&["train", "bert", "--loss-on", "infilled", "--out", path(&o)], &["--loss-on"]);
    fails(&["train", "bart", "--masking", "span", "--out", path(&o)], &["--masking"]);
    fails(&["train", "bert", "--mask", "0.2", "--out", path(&o)], &["--mask"]);
    // XLNet's permutation settings name their flag; the others' flags are refused for XLNet and
    // XLNet's for them.
    for (flag, value) in [("--reuse-len", "30"), ("--perm-size", "3"), ("--num-predict", "40"), ("--mask-beta", "0")] {
        fails(&["train", "xlnet", "--seq-len", "32", flag, value, "--out", path(&o)], &[flag]);
    }
    fails(&["train", "xlnet", "--batch-size", "7", "--out", path(&o)], &["--batch-size 7", "even", "--no-bi-data"]);
    fails(&["train", "xlnet", "--masking", "span", "--out", path(&o)], &["--masking"]);
    fails(&["train", "bart", "--objective", "span", "--out", path(&o)], &["--objective span", "bart"]);
    // `prune` takes a fine-tuned sequence classifier, and removes one head at least.
    fails(&["prune", "--model", "fixtures/bert/base-fill-mask", "--data", "data.csv", "--heads", "1"], &["not a fine-tuned sequence classifier"]);
    fails(&["prune", "--model", "fixtures/bert/base-fill-mask", "--data", "data.csv", "--heads", "0"], &["--heads"]);
    // A family whose heads cannot be pruned (BART's layers are not one encoder stack) says so.
    fails(&["prune", "--model", "fixtures/bart/base-seqcls-single", "--data", "data.csv", "--heads", "1"], &["base-seqcls-single", "the heads of bart models cannot be pruned"]);
    fails(&["train", "xlnet", "--mask", "0.2", "--out", path(&o)], &["--mask"]);
    fails(&["train", "bert", "--reuse-len", "4", "--out", path(&o)], &["--reuse-len"]);
    fails(&["train", "bart", "--num-predict", "4", "--out", path(&o)], &["--num-predict"]);
    fails(&["train", "nosuch"], &["nosuch"]);
    fails(&["train", "bert", "--preset", "huge", "--tokenizer", tok, "--corpus", path(&tiny), "--batch-size", "1", "--out", path(&out("preset"))], &["preset", "huge"]);
    fails(&["train", "bert", "--packing", "doc", "--out", path(&out("packing"))], &["--packing"]);
    fails(&["train", "bert", "--corpus", "/nonexistent/corpus.txt", "--out", path(&out("corpus"))], &["/nonexistent/corpus.txt"]);
    fails(&["train", "bert", "--corpus", path(&corpora.join("empty.txt")), "--out", path(&out("empty"))], &["empty.txt"]);
    fails(&["train", "bert", "--corpus", path(&corpora.join("binary.txt")), "--out", path(&out("binary"))], &["binary.txt", "UTF-8"]);
    fails(&["train", "bert", "--corpus", path(&tiny), "--tokenizer", tok, "--out", path(&out("small"))], &["--batch-size", path(&tiny)]);
    let small = ["--corpus", path(&tiny), "--tokenizer", tok, "--batch-size", "1"];
    let train = |extra: &[&str], name: &str| -> Vec<String> {
        ["train", "bert"].iter().chain(small.iter()).chain(extra).map(|s| s.to_string()).chain(["--out".into(), path(&out(name)).into()]).collect()
    };
    let run = |v: Vec<String>, expect: &[&str]| fails(&v.iter().map(String::as_str).collect::<Vec<_>>(), expect);
    run(train(&["--lr=-1"], "lr"), &["--lr"]);
    run(train(&["--steps", "10", "--warmup", "20"], "warmup"), &["--warmup"]);
    run(train(&["--weight-decay=-0.5"], "wd"), &["--weight-decay"]);
    run(train(&["--held-out", "NaN"], "held-out"), &["--held-out"]);
    fails(&["bench", "--mode", "finetune", "--epochs", "0"], &["--epochs"]);
    fails(&["train", "bert", "--corpus", path(&tiny), "--tokenizer", "/nonexistent/tok", "--out", path(&out("tok"))], &["/nonexistent/tok"]);
    run(train(&["--config", "/nonexistent/config.json"], "cfg-missing"), &["/nonexistent/config.json"]);
    let cfg_dir = scratch("cfg", None);
    std::fs::write(cfg_dir.join("settings.json"), "{}").unwrap();
    run(train(&["--config", path(&cfg_dir.join("settings.json"))], "cfg-name"), &["--config"]);
    std::fs::write(cfg_dir.join("config.json"), r#"{"hidden_size": "wide"}"#).unwrap();
    run(train(&["--config", path(&cfg_dir.join("config.json"))], "cfg-field"), &["hidden_size"]);
    std::fs::write(cfg_dir.join("config.json"), r#"{"max_position_embeddings": 16}"#).unwrap();
    run(train(&["--config", path(&cfg_dir.join("config.json")), "--seq-len", "64"], "cfg-positions"), &["--seq-len"]);
    fails(&["train", "bert", "--resume", "--out", path(&out("nothing"))], &["--resume", path(&out("nothing"))]);
    fails(&["train", "bert", "--init-from", "/nonexistent/ckpt", "--out", path(&out("init"))], &["/nonexistent/ckpt"]);
    fails(&["bench", "--batch-size", "0"], &["--batch-size"]);
    fails(&["bench", "--family", "nosuch"], &["nosuch"]);
    fails(&["bench", "--mode", "gemm", "--gemm-shapes", "8x16"], &["--gemm-shapes", "8x16", "MxKxN"]);
    fails(&["bench", "--mode", "gemm", "--gemm-shapes", "8x0x4"], &["--gemm-shapes", "8x0x4"]);
    fails(&["bench", "--mode", "infer", "--gemm-shapes", "8x8x8"], &["--gemm-shapes", "--mode gemm"]);
    fails(&["bench", "--mode", "infer", "--gemm-transposed"], &["--gemm-transposed", "--mode gemm"]);
    fails(&["bench", "--mode", "infer", "--presets", "mini,huge"], &["--presets", "huge"]);
    fails(&["bench", "--mode", "generate", "--presets", "mini"], &["--presets", "mini", "tiny and base"]);
    fails(&["bench", "--mode", "serve"], &["--mode serve needs --model"]);
    fails(&["bench", "--mode", "embed", "--compare-infinity"], &["--compare-infinity", "--mode serve"]);
    fails(&["bench", "--mode", "serve", "--model", "fixtures/bert/base-fill-mask", "--compare-pytorch"], &["--compare-infinity", "--compare-pytorch"]);
    fails(&["bench", "--mode", "serve", "--model", "fixtures/bert/base-fill-mask", "--oha", "/nonexistent/oha", "--duration", "1"], &["/nonexistent/oha", "cargo install oha"]);

    // A run directory: refused without --resume/--overwrite; export reads only its own checkpoints.
    let run_dir = out("existing");
    let ok = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["train", "bert", "--corpus", path(&tiny), "--tokenizer", tok, "--batch-size", "1", "--steps", "2", "--checkpoint-every", "1", "--quiet", "--out", path(&run_dir)])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    fails(&["train", "bert", "--corpus", path(&tiny), "--tokenizer", tok, "--batch-size", "1", "--out", path(&run_dir)], &["--out", "--resume", "--overwrite"]);
    fails(&["export", "--run", path(&run_dir), "--step", "99"], &["no checkpoint"]);
    std::fs::write(run_dir.join("checkpoints/latest"), "../../../etc").unwrap();
    fails(&["export", "--run", path(&run_dir)], &["latest", "not a checkpoint of this run"]);
    std::fs::write(run_dir.join("run.json"), "{ broken").unwrap();
    fails(&["export", "--run", path(&run_dir), "--step", "2"], &["run.json"]);
    fails(&["export", "--run", "/nonexistent/run"], &["/nonexistent/run"]);
}

/// A copy of `fixture` with the fill-mask fixture's tokenizer files (the same 77-token vocabulary).
fn with_tokenizer(name: &str, fixture: &str) -> sesame_tests::Scratch {
    let d = scratch(name, Some(fixture));
    for f in ["vocab.txt", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(repo().join("fixtures/bert/base-fill-mask").join(f), d.join(f)).unwrap();
    }
    d
}

/// The newer commands (`finetune`, `distill`, `forward`, `tag`, `answer`, `generate`, `train
/// xlnet`): each class of mistake a new user makes gets one line naming its culprit, not a
/// panic, and not a run that succeeds on input it should refuse.
#[test]
fn newer_commands_refuse_bad_input_with_one_line() {
    let m = "fixtures/bert/base-fill-mask";
    let d = scratch("newer", None);
    let file = |name: &str, text: &str| {
        std::fs::write(d.join(name), text).unwrap();
        d.join(name).to_str().unwrap().to_string()
    };
    let csv = file("rows.csv", "text,label\na cat,animal\na car,thing\n");
    let out = d.join("run");
    let out = path(&out);

    // distill teaches sequence classifiers: tagging or QA with a CSV was an `unreachable!`.
    for task in ["tag", "qa"] {
        fails(&["distill", "--model", m, "--task", task, "--train", &csv, "--eval", &csv, "--out", out], &["--task", task]);
    }
    // --epochs must be a positive number of passes (0, negative and NaN trained one step).
    for epochs in ["0", "-1", "NaN", "inf"] {
        fails(&["finetune", "--model", m, "--train", &csv, "--eval", &csv, "--out", out, &format!("--epochs={epochs}")], &["--epochs"]);
    }
    fails(&["finetune", "--model", m, "--task", "qa", "--train", &csv, "--eval", &csv, "--out", out, "--max-answer-len", "0"], &["--max-answer-len"]);
    fails(&["finetune", "--model", m, "--task", "qa", "--train", &csv, "--eval", &csv, "--out", out, "--null-threshold", "NaN"], &["--null-threshold"]);

    // A CoNLL line with more columns than the file's: the words before the tag were dropped.
    let conll = file("train.conll", "the O\nNew York B-LOC\n\n");
    fails(&["finetune", "--model", m, "--task", "tag", "--train", &conll, "--eval", &conll, "--out", out], &[&format!("{conll}:2"), "3 columns", "line 1 has 2"]);

    // SQuAD: a misspelt `data` key was read as JSON lines; a misspelt `answers` made every
    // question of the run answerable-or-not (SQuAD 2.0).
    let qa = |answers: &str| format!(r#"{{"question": "who?", "context": "the cat sat", "id": "q1", {answers}}}"#);
    let good = qa(r#""answers": [{"text": "cat", "answer_start": 4}]"#);
    let squad = |data_key: &str, qas: &str| format!(r#"{{"version": "1.1", "{data_key}": [{{"title": "t", "paragraphs": [{{"context": "the cat sat", "qas": [{qas}]}}]}}]}}"#);
    let misspelt_data = file("misspelt-data.json", &squad("dta", &good));
    fails(&["finetune", "--model", m, "--task", "qa", "--train", &misspelt_data, "--eval", &misspelt_data, "--out", out], &[&misspelt_data, "`data`", "dta"]);
    let misspelt_answers = file("misspelt-answers.json", &squad("data", &format!("{good}, {}", qa(r#""answer": [{"text": "cat", "answer_start": 4}]"#).replace("q1", "q2"))));
    fails(&["finetune", "--model", m, "--task", "qa", "--train", &misspelt_answers, "--eval", &misspelt_answers, "--out", out], &[&misspelt_answers, "\"q2\"", "`answers`"]);
    let flat = file("flat.jsonl", r#"{"id": "q1", "question": "who?", "context": "the cat sat", "answer": {"text": ["cat"], "answer_start": [4]}}"#);
    fails(&["finetune", "--model", m, "--task", "qa", "--train", &flat, "--eval", &flat, "--out", out], &[&format!("{flat}:1"), "\"answers\""]);

    // `forward`: an id beyond 32 bits panicked inside Burn's element cast.
    let inputs = d.join("huge-id.safetensors");
    let ids: Vec<u8> = [2i64, 5_000_000_000, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![1, 3], &ids).unwrap();
    safetensors::serialize_to_file(vec![("input_ids".to_string(), view)], None, &inputs).unwrap();
    fails(&["forward", "--model", m, "--inputs", path(&inputs), "--out", path(&d.join("o.safetensors"))], &["input_ids", "5000000000"]);
    // `forward`: labels of another shape than the inputs', or a class the head does not have,
    // panicked inside the loss (Burn's shape check, flex's gather), on every family's heads.
    let forward_inputs = |name: &str, labels: &[(&str, Vec<usize>, Vec<i64>)]| {
        let path = d.join(name);
        let ids: Vec<u8> = [2i64, 5, 7, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let data: Vec<Vec<u8>> = labels.iter().map(|(_, _, v)| v.iter().flat_map(|v| v.to_le_bytes()).collect()).collect();
        let mut views = vec![("input_ids".to_string(), safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![1, 4], &ids).unwrap())];
        for ((n, shape, _), bytes) in labels.iter().zip(&data) {
            views.push((n.to_string(), safetensors::tensor::TensorView::new(safetensors::Dtype::I64, shape.clone(), bytes).unwrap()));
        }
        safetensors::serialize_to_file(views, None, &path).unwrap();
        path
    };
    let outputs = d.join("o.safetensors");
    for (fixture, name, shape, values, expect) in [
        ("bert/base-masked-lm", "labels", vec![1, 2], vec![1, 2], "has shape [1, 2]; expected [1, 4]"),
        ("bert/base-masked-lm", "labels", vec![1, 4], vec![1, -100, 99999, 2], "holds 99999 at flat index 2"),
        ("bert/base-seqcls-single", "labels", vec![1], vec![77], "holds 77"),
        ("bert/base-qa", "start_positions", vec![2], vec![1, 2], "has shape [2]; expected [1]"),
        ("xlnet/base-token-classification", "labels", vec![1, 4], vec![0, 1, -5, 0], "holds -5"),
        ("bart/base-seqcls-single", "labels", vec![3], vec![0, 1, 2], "has shape [3]; expected [1]"),
        ("bart/base-conditional-generation", "labels", vec![1, 3], vec![5, 99999, 2], "holds 99999"),
        // Found by fuzzing: XLNet's beam QA head reads the start token's state (no clamping).
        ("xlnet/base-qa-train", "end_positions", vec![1], vec![524539], "holds 524539"),
    ] {
        // QA positions come in pairs: the other one valid.
        let other = match name {
            "start_positions" => Some("end_positions"),
            "end_positions" => Some("start_positions"),
            _ => None,
        };
        let mut labels = vec![(name, shape.clone(), values)];
        labels.extend(other.map(|other| (other, shape.clone(), vec![1; shape[0]])));
        let inputs = forward_inputs(&format!("{}-{name}.safetensors", fixture.replace('/', "-")), &labels);
        fails(&["forward", "--model", &format!("fixtures/{fixture}"), "--inputs", path(&inputs), "--out", path(&outputs)], &[path(&inputs), &format!("`{name}`"), expect]);
    }
    // Found by fuzzing: BART's decoder reads the input shifted right when no decoder ids are
    // given; a decoder mask of another length panicked in the attention.
    let decoder_mask = forward_inputs("decoder-mask.safetensors", &[("decoder_attention_mask", vec![1, 3], vec![1, 1, 1])]);
    fails(&["forward", "--model", "fixtures/bart/base-model", "--inputs", path(&decoder_mask), "--out", path(&outputs)], &["BartModel", "decoder_attention_mask", "[1, 3]", "[1, 4]"]);
    // A NaN float input only came back as non-finite outputs, blamed on the checkpoint.
    let nan_target = d.join("nan-target.safetensors");
    let (ids, target): (Vec<u8>, Vec<u8>) = ([2i64, 5, 7, 3].iter().flat_map(|v| v.to_le_bytes()).collect(), f32::NAN.to_le_bytes().to_vec());
    let views = vec![
        ("input_ids".to_string(), safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![1, 4], &ids).unwrap()),
        ("labels".to_string(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1, 1], &target).unwrap()),
    ];
    safetensors::serialize_to_file(views, None, &nan_target).unwrap();
    fails(&["forward", "--model", "fixtures/bert/base-seqcls-regression", "--inputs", path(&nan_target), "--out", path(&outputs)], &["`labels`", "NaN", "finite"]);

    // `tag` on a sequence classifier ran its sentence head on every token (the head's tensors
    // share BERT's names); config.json says what the checkpoint is.
    let seqcls = with_tokenizer("seqcls", "bert/base-seqcls-single");
    fails(&["tag", "--model", path(&seqcls), "the cat"], &["config.json", "BertForSequenceClassification", "token classifier"]);
    let multiple_choice = with_tokenizer("multiple-choice", "bert/base-multiple-choice");
    fails(&["classify", "--model", path(&multiple_choice), "the cat"], &["config.json", "BertForMultipleChoice", "sequence classifier"]);
    // `answer` with an empty question returned a span.
    let qa_model = with_tokenizer("qa", "bert/base-qa");
    fails(&["answer", "--model", path(&qa_model), "--context", "the cat sat", "who?", " "], &["question 2", "empty"]);
    fails(&["answer", "--model", path(&qa_model), "--context", "the cat sat", "--max-answer-len", "0", "who?"], &["--max-answer-len"]);

    // `generate`: sampling settings out of range, an end id outside the vocabulary, and a
    // checkpoint whose LM head would be drawn at random.
    let lm = with_tokenizer("lm", "generation/bert-lm-head");
    let lm = path(&lm);
    for top_p in ["1.5", "0", "NaN"] {
        fails(&["generate", "--model", lm, "--do-sample", "--top-p", top_p, "the"], &["--top-p"]);
    }
    fails(&["generate", "--model", lm, "--top-p=-0.5", "the"], &["--top-p"]);
    fails(&["generate", "--model", lm, "--temperature", "0", "the"], &["--temperature"]);
    fails(&["generate", "--model", lm, "--eos-token-id", "77", "the"], &["--eos-token-id", "77", "77 ids"]);
    // A setting out of range in the model's own generation_config.json names that file, not a
    // flag the user never gave.
    let bad_file = with_tokenizer("lm-bad-generation-config", "generation/bert-lm-head");
    std::fs::write(bad_file.join("generation_config.json"), r#"{"do_sample": true, "top_p": 1.5, "eos_token_id": 3}"#).unwrap();
    fails(&["generate", "--model", path(&bad_file), "the"], &["generation_config.json", "`top_p`"]);
    fails(&["generate", "--model", path(&bad_file), "--top-p", "2", "the"], &["--top-p"]);
    let headless = weights_edited(with_tokenizer("lm-no-head", "generation/bert-lm-head"), |n, v| (!n.starts_with("cls.")).then(|| keep(n, v)));
    fails(&["generate", "--model", path(&headless), "the"], &["no trained language-modelling head", "cls.predictions"]);

    // `train xlnet --seq-len 8` blamed --reuse-len, which the user never gave.
    fails(&["train", "xlnet", "--seq-len", "8", "--out", out], &["--seq-len 8"]);

    // ERNIE's knowledge masking: entities are required, the files go with their masking, and
    // a file that lists nothing or cannot be read is named.
    fails(&["train", "bert", "--masking", "ernie", "--out", out], &["--masking ernie", "--entities FILE"]);
    let entities = file("entities.txt", "captain ahab\n");
    fails(&["train", "bert", "--phrases", &entities, "--out", out], &["--phrases", "not token"]);
    fails(&["train", "bert", "--masking", "phrase", "--entities", &entities, "--out", out], &["--entities", "not phrase"]);
    fails(&["train", "bart", "--entities", &entities, "--out", out], &["--entities", "masked-LM families"]);
    let blank = file("blank.txt", "\n \n");
    fails(&["train", "bert", "--masking", "entity", "--entities", &blank, "--steps", "1", "--out", out, "--overwrite"], &[&blank, "no phrase or entity"]);
    fails(&["train", "bert", "--masking", "phrase", "--phrases", "/nonexistent/phrases.txt", "--steps", "1", "--out", out, "--overwrite"], &["--phrases", "/nonexistent/phrases.txt"]);

    // `--init random` draws new weights: the fine-tuned classifier that --early-exit distils
    // and the teacher's layers of `distill` are not there to draw.
    fails(&["finetune", "--model", m, "--init", "random", "--early-exit", "--train", &csv, "--eval", &csv, "--out", out], &["--init random", "--early-exit"]);
    fails(&["distill", "--model", m, "--init", "random", "--train", &csv, "--eval", &csv, "--out", out], &["--init", "distill"]);
}
