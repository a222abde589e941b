//! Checkpoint IO: every typed loading error, and saving back to HF layout.

use std::path::Path;

use sesame_bert::*;
use sesame_layers::{CheckpointError, ConfigError, HfConfig, InputError, OutputOptions, PretrainedError, PretrainedModel};
use sesame_tests::{devices, parity, Checker, Fixture, Scratch, TOLERANCE};

fn load_err(dir: &Path) -> PretrainedError {
    let device = devices()[0].1.clone();
    match BertForMaskedLM::from_pretrained(dir, &device) {
        Ok(_) => panic!("{} loaded although broken", dir.display()),
        Err(e) => e,
    }
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(path, value.to_string()).unwrap();
}

/// Rewrite `model.safetensors` keeping the tensors for which `keep` holds, renamed by `rename`.
fn rewrite_weights(dir: &Path, keep: impl Fn(&str) -> bool, rename: impl Fn(&str) -> String) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let views: Vec<(String, safetensors::tensor::TensorView)> =
        st.tensors().into_iter().filter(|(n, _)| keep(n)).map(|(n, v)| (rename(&n), v)).collect();
    let mut meta = std::collections::HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    let out = safetensors::serialize(views, Some(meta)).unwrap();
    std::fs::write(path, out).unwrap();
}

#[test]
fn missing_directory_and_weights_are_typed_errors() {
    let dir = std::env::temp_dir().join("sesame-definitely-missing");
    assert!(matches!(load_err(&dir), PretrainedError::Config(ConfigError::Io { .. })));
    let dir = Scratch::copy_of("bert/base-masked-lm", "noweights");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    assert!(matches!(load_err(&dir), PretrainedError::Checkpoint(CheckpointError::NoWeights { .. })));
}

#[test]
fn bad_configs_are_typed_errors() {
    let dir = Scratch::copy_of("bert/base-masked-lm", "badjson");
    std::fs::write(dir.join("config.json"), "{ \"hidden_size\": ").unwrap();
    assert!(matches!(load_err(&dir), PretrainedError::Config(ConfigError::Parse { .. })));
    for (field, value) in [
        ("num_attention_heads", serde_json::json!(5)),
        ("hidden_act", serde_json::json!("sparkle")),
        ("hidden_size", serde_json::json!(0)),
        ("position_embedding_type", serde_json::json!("relative_key")),
        // Wrong types: serde names the type; the message must name the field.
        ("hidden_size", serde_json::json!("32")),
        ("num_hidden_layers", serde_json::json!(37.5)),
        ("intermediate_size", serde_json::json!(-2)),
        ("layer_norm_eps", serde_json::json!("tiny")),
        ("id2label", serde_json::json!([1, 2])),
        ("tie_word_embeddings", serde_json::json!("yes")),
    ] {
        let dir = Scratch::copy_of("bert/base-masked-lm", "badfield");
        edit_config(&dir, |c| c[field] = value.clone());
        let err = load_err(&dir);
        let text = err.to_string();
        assert!(matches!(err, PretrainedError::Config(_)), "{field}: {text}");
        assert!(text.contains(&format!("`{field}`")), "{field}: message `{text}` names the field");
    }
    // A config that is not an object.
    let dir = Scratch::copy_of("bert/base-masked-lm", "notobject");
    std::fs::write(dir.join("config.json"), "[1, 2]").unwrap();
    assert!(load_err(&dir).to_string().contains("not a JSON object"));
}

#[test]
fn shape_mismatches_name_the_tensor_and_both_shapes() {
    let dir = Scratch::copy_of("bert/base-masked-lm", "shape");
    edit_config(&dir, |c| c["intermediate_size"] = serde_json::json!(40));
    match load_err(&dir) {
        PretrainedError::Checkpoint(CheckpointError::ShapeMismatch { tensor, expected, found, .. }) => {
            assert!(tensor.starts_with("bert.encoder.layer.") && tensor.contains("intermediate.dense"), "{tensor}");
            assert_ne!(expected, found);
        }
        other => panic!("expected ShapeMismatch, got {other}"),
    }
}

#[test]
fn missing_required_tensors_are_listed_by_hf_name() {
    let dir = Scratch::copy_of("bert/base-masked-lm", "missing");
    rewrite_weights(&dir, |n| !n.contains("layer.1.output.LayerNorm"), |n| n.to_string());
    match load_err(&dir) {
        PretrainedError::Checkpoint(CheckpointError::MissingTensors { tensors, .. }) => {
            let mut tensors = tensors;
            tensors.sort();
            assert_eq!(tensors, ["bert.encoder.layer.1.output.LayerNorm.bias", "bert.encoder.layer.1.output.LayerNorm.weight"]);
        }
        other => panic!("expected MissingTensors, got {other}"),
    }
}

#[test]
fn unused_tensors_are_reported_and_optional_heads_initialised() {
    let dir = Scratch::copy_of("bert/base-masked-lm", "unused");
    rewrite_weights(&dir, |_| true, |n| n.replace("cls.predictions.bias", "cls.predictions.extra_bias"));
    let device = devices()[0].1.clone();
    // The MLM head may be absent (continued pre-training from a base checkpoint); an extra
    // tensor is reported, not silently dropped.
    let loaded = BertForMaskedLM::from_pretrained(&dir, &device).unwrap();
    assert_eq!(loaded.report.unused, ["cls.predictions.extra_bias"]);
    assert_eq!(loaded.report.initialized, ["cls.predictions.bias"]);
}

#[test]
fn a_weight_stored_as_integers_is_a_dtype_error() {
    let dir = Scratch::copy_of("bert/base-masked-lm", "dtype");
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let target = "bert.embeddings.LayerNorm.weight";
    let ints: Vec<u8> = (0..st.tensor(target).unwrap().shape()[0] as i32).flat_map(|i| i.to_le_bytes()).collect();
    let shape = st.tensor(target).unwrap().shape().to_vec();
    let mut views: Vec<(String, safetensors::tensor::TensorView)> =
        st.tensors().into_iter().filter(|(n, _)| n != target).collect();
    views.push((target.to_string(), safetensors::tensor::TensorView::new(safetensors::Dtype::I32, shape, &ints).unwrap()));
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
    match load_err(&dir) {
        PretrainedError::Checkpoint(CheckpointError::DTypeMismatch { tensor, found, .. }) => {
            assert_eq!(tensor, target);
            assert!(found.contains("I32"), "{found}");
        }
        other => panic!("expected DTypeMismatch, got {other}"),
    }
}

#[test]
fn tensors_of_dtypes_burn_lacks_are_unused_unless_needed() {
    let dir = Scratch::copy_of("bert/base-masked-lm", "odd-dtypes");
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let zeros = vec![0u8; 64];
    let mut views: Vec<(String, safetensors::tensor::TensorView)> = st.tensors();
    views.push(("extra.quantized".into(), safetensors::tensor::TensorView::new(safetensors::Dtype::U16, vec![4], &zeros[..8]).unwrap()));
    views.push(("extra.scales".into(), safetensors::tensor::TensorView::new(safetensors::Dtype::F8_E4M3, vec![8], &zeros[..8]).unwrap()));
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
    let device = devices()[0].1.clone();
    let loaded = BertForMaskedLM::from_pretrained(&dir, &device).unwrap();
    let unused = loaded.report.unused.join(", ");
    assert!(unused.contains("extra.quantized (U16") && unused.contains("extra.scales (F8_E4M3"), "{}", loaded.report);
    // A needed tensor in such a dtype is a dtype error naming it.
    let target = "bert.embeddings.LayerNorm.bias";
    let shape = st.tensor(target).unwrap().shape().to_vec();
    let data = vec![0u8; shape[0] * 2];
    let mut views: Vec<(String, safetensors::tensor::TensorView)> = st.tensors().into_iter().filter(|(n, _)| n != target).collect();
    views.push((target.into(), safetensors::tensor::TensorView::new(safetensors::Dtype::U16, shape, &data).unwrap()));
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
    match load_err(&dir) {
        PretrainedError::Checkpoint(CheckpointError::DTypeMismatch { tensor, found, .. }) => {
            assert_eq!(tensor, target);
            assert!(found.contains("U16"), "{found}");
        }
        other => panic!("expected DTypeMismatch, got {other}"),
    }
}

#[test]
fn huge_sizes_in_config_json_are_shape_errors_before_anything_is_allocated() {
    // The model is built lazily and each tensor's shape is checked before allocation: a config
    // asking for 10^11 x 32 embeddings (or a 2^30-wide encoder) is a shape error, not an abort.
    for (field, value) in [("vocab_size", 100_000_000_000u64), ("hidden_size", 1 << 30), ("intermediate_size", 1 << 40)] {
        let dir = Scratch::copy_of("bert/base-masked-lm", &format!("huge-{field}"));
        edit_config(&dir, |c| c[field] = value.into());
        match load_err(&dir) {
            PretrainedError::Checkpoint(CheckpointError::ShapeMismatch { expected, .. }) => {
                assert!(expected.iter().any(|&d| d as u64 == value), "{field}: {expected:?}")
            }
            other => panic!("{field}: expected a shape mismatch, got {other}"),
        }
    }
}

#[test]
fn non_finite_weights_are_refused_naming_the_tensor() {
    // A Linear weight (transposed on loading), and a LayerNorm weight (Burn's `gamma`).
    let cases = [
        (f32::NAN, "nan", "bert.encoder.layer.1.intermediate.dense.weight"),
        (f32::INFINITY, "inf", "bert.encoder.layer.1.intermediate.dense.weight"),
        (f32::NEG_INFINITY, "neginf", "bert.encoder.layer.1.intermediate.dense.weight"),
        (f32::NAN, "nan-norm", "bert.embeddings.LayerNorm.weight"),
    ];
    for (value, name, target) in cases {
        let dir = Scratch::copy_of("bert/base-masked-lm", &format!("nonfinite-{name}"));
        let path = dir.join("model.safetensors");
        let bytes = std::fs::read(&path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let view = st.tensor(target).unwrap();
        let mut data = view.data().to_vec();
        data[8..12].copy_from_slice(&value.to_le_bytes());
        let shape = view.shape().to_vec();
        let mut views: Vec<(String, safetensors::tensor::TensorView)> =
            st.tensors().into_iter().filter(|(n, _)| n != target).collect();
        views.push((target.to_string(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, &data).unwrap()));
        std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
        match load_err(&dir) {
            PretrainedError::Checkpoint(CheckpointError::NonFinite { tensor, .. }) => assert_eq!(tensor, target, "{name}"),
            other => panic!("{name}: expected NonFinite, got {other}"),
        }
    }
}

#[test]
fn truncated_and_corrupt_files_are_errors_not_panics() {
    let dir = Scratch::copy_of("bert/base-masked-lm", "truncated");
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_err(&dir);
    assert!(matches!(err, PretrainedError::Checkpoint(CheckpointError::Unreadable { .. } | CheckpointError::BadTensor { .. })), "{err}");
    assert!(err.to_string().contains("model.safetensors"), "{err}");
    std::fs::write(&path, b"\xff\xff\xff\xff\xff\xff\xff\x7fgarbage").unwrap();
    assert!(matches!(load_err(&dir), PretrainedError::Checkpoint(CheckpointError::Unreadable { .. })));
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(load_err(&dir), PretrainedError::Checkpoint(CheckpointError::Unreadable { .. })));
}

#[test]
fn a_bad_shard_index_is_a_typed_error() {
    let dir = Scratch::copy_of("bert/base-model-sharded", "index");
    std::fs::write(dir.join("model.safetensors.index.json"), r#"{"weight_map": {"a": "../../etc/passwd"}}"#).unwrap();
    let device = devices()[0].1.clone();
    let err = BertModel::from_pretrained(&dir, &device).unwrap_err();
    assert!(matches!(err, PretrainedError::Checkpoint(CheckpointError::BadIndex { .. })), "{err}");
    std::fs::write(dir.join("model.safetensors.index.json"), r#"{"weight_map": {"a": "model-00009-of-00009.safetensors"}}"#).unwrap();
    let err = BertModel::from_pretrained(&dir, &device).unwrap_err();
    assert!(matches!(err, PretrainedError::Checkpoint(CheckpointError::Io { .. })), "{err}");
}

#[test]
fn bad_model_input_is_a_typed_error() {
    let f = Fixture::open("bert/base-model");
    let device = devices()[0].1.clone();
    let config = BertModel::from_pretrained(&f.dir, &device).unwrap().config;
    let limits = config.input_limits();
    let ids = |rows: Vec<Vec<i64>>| {
        let (b, s) = (rows.len(), rows.first().map_or(0, |r| r.len()));
        burn::tensor::Tensor::<2, burn::tensor::Int>::from_data(burn::tensor::TensorData::new(rows.concat(), [b, s]), &device)
    };
    let too_long = vec![vec![5i64; config.max_position_embeddings + 1]];
    assert!(matches!(BertInput::new(ids(too_long)).validate(&limits), Err(InputError::TooLong { .. })));
    let bad_id = vec![vec![2, config.vocab_size as i64, 3]];
    assert_eq!(
        BertInput::new(ids(bad_id)).validate(&limits),
        Err(InputError::IdOutOfRange { what: "token", id: config.vocab_size as i64, limit: config.vocab_size })
    );
    assert!(matches!(BertInput::new(ids(vec![])).validate(&limits), Err(InputError::EmptyBatch)));
    assert!(matches!(BertInput::new(ids(vec![vec![], vec![]])).validate(&limits), Err(InputError::EmptySequence { batch: 2 })));
    let input = BertInput::new(ids(vec![vec![2, 5, 3]])).with_token_type_ids(ids(vec![vec![0, 7, 0]]));
    assert!(matches!(input.validate(&limits), Err(InputError::IdOutOfRange { what: "token type", .. })));
    let input = BertInput::new(ids(vec![vec![2, 5, 3]])).with_attention_mask(ids(vec![vec![1, 1]]));
    assert!(matches!(input.validate(&limits), Err(InputError::ShapeMismatch { .. })));
}

/// Save a loaded fixture model, load it back, and compare outputs.
#[test]
fn saved_models_reload_with_identical_outputs() {
    for fixture in ["bert/wide-pretraining", "bert/base-seqcls-single"] {
        let f = Fixture::open(fixture);
        for (backend, device) in devices() {
            let dir = sesame_tests::Scratch::path(&format!("save-{backend}"));
            let input = || parity::input(&f, &device);
            let mut c = Checker::default();
            if fixture.contains("pretraining") {
                let loaded = BertForPreTraining::from_pretrained(&f.dir, &device).unwrap();
                loaded.model.save_pretrained(&loaded.config, &dir).unwrap();
                let again = BertForPreTraining::from_pretrained(&dir, &device).unwrap();
                assert!(again.report.unused.is_empty() && again.report.initialized.is_empty(), "{}", again.report);
                let out = again.model.forward(input(), None, OutputOptions::default());
                c.close("prediction_logits", out.prediction_logits, f.get("output.prediction_logits"), TOLERANCE);
            } else {
                let loaded = BertForSequenceClassification::from_pretrained(&f.dir, &device).unwrap();
                loaded.model.save_pretrained(&loaded.config, &dir).unwrap();
                let again = BertForSequenceClassification::from_pretrained(&dir, &device).unwrap();
                let out = again.model.forward(input(), None, OutputOptions::default());
                c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
            }
            assert!(!dir.join(".model.safetensors.tmp").exists(), "no temporary file left behind");
            c.finish(&format!("{fixture} saved and reloaded on {backend}"));
        }
    }
}

/// transformers loads what Sesame saves, strictly, and computes Sesame's outputs.
#[test]
fn transformers_loads_models_saved_by_sesame() {
    parity::transformers_reproduces::<BertForPreTraining>("bert/wide-pretraining", "prediction_logits", |m, input| {
        m.forward(input, None, OutputOptions::default()).prediction_logits
    });
    parity::transformers_reproduces::<BertForMaskedLM>("bert/base-masked-lm", "logits", |m, input| {
        m.forward(input, None, OutputOptions::default()).logits
    });
    parity::transformers_reproduces::<BertForTokenClassification>("bert/relu-token-classification", "logits", |m, input| {
        m.forward(input, None, OutputOptions::default()).logits
    });
}

/// Weights stored in f64, f16 or bf16 load as their values in the device's f32: the outputs
/// equal those of the same values stored as f32 (on every backend; the f32 copy is rounded
/// through the same dtype first).
#[test]
fn double_and_half_precision_safetensors_load_as_their_values() {
    use burn::tensor::{bf16, f16};
    use safetensors::Dtype;
    let f = Fixture::open("bert/base-masked-lm");
    let bytes = std::fs::read(f.dir.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for dtype in [Dtype::F64, Dtype::F16, Dtype::BF16] {
        // (file dtype, bytes) per tensor: in `dtype`, and its values rounded back to f32.
        let encode = |values: &[f32]| -> (Vec<u8>, Vec<u8>) {
            let (mut stored, mut rounded) = (Vec::new(), Vec::new());
            for &x in values {
                let back = match dtype {
                    Dtype::F64 => {
                        stored.extend_from_slice(&f64::from(x).to_le_bytes());
                        x
                    }
                    Dtype::F16 => {
                        stored.extend_from_slice(&f16::from_f32(x).to_le_bytes());
                        f16::from_f32(x).to_f32()
                    }
                    _ => {
                        stored.extend_from_slice(&bf16::from_f32(x).to_le_bytes());
                        bf16::from_f32(x).to_f32()
                    }
                };
                rounded.extend_from_slice(&back.to_le_bytes());
            }
            (stored, rounded)
        };
        let tensors: Vec<(String, Vec<usize>, Vec<u8>, Vec<u8>)> = st
            .tensors()
            .into_iter()
            .filter(|(_, v)| v.dtype() == Dtype::F32)
            .map(|(name, v)| {
                let values: Vec<f32> = v.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
                let (stored, rounded) = encode(&values);
                (name, v.shape().to_vec(), stored, rounded)
            })
            .collect();
        let write = |name: &str, as_f32: bool| {
            let dir = Scratch::copy_of("bert/base-masked-lm", &format!("{name}-{dtype:?}"));
            let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
                .iter()
                .map(|(n, shape, stored, rounded)| {
                    let view = match as_f32 {
                        true => safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), rounded),
                        false => safetensors::tensor::TensorView::new(dtype, shape.clone(), stored),
                    };
                    (n.clone(), view.unwrap())
                })
                .collect();
            std::fs::write(dir.join("model.safetensors"), safetensors::serialize(views, None).unwrap()).unwrap();
            dir
        };
        let (stored, rounded) = (write("stored", false), write("rounded", true));
        for (backend, device) in devices() {
            let input = || parity::input(&f, &device);
            let logits = |dir: &Path| {
                let loaded = BertForMaskedLM::from_pretrained(dir, &device).unwrap();
                assert!(loaded.report.unused.is_empty() && loaded.report.initialized.is_empty(), "{}", loaded.report);
                sesame_tests::values(loaded.model.forward(input(), None, OutputOptions::default()).logits)
            };
            let (ours, reference) = (logits(&stored), logits(&rounded));
            let worst = sesame_tests::gap(&ours, &reference);
            assert!(worst <= 1e-6 && ours.iter().all(|x| x.is_finite()), "{dtype:?} on {backend}: logits differ by {worst}");
        }
    }
}

/// An ignore pattern of a key table that is not a valid regex is an error, not dropped.
#[test]
fn an_invalid_ignore_pattern_is_an_error() {
    let device = devices()[0].1.clone();
    let dir = sesame_tests::fixtures_dir().join("bert/base-masked-lm");
    let config = BertConfig::from_dir(&dir).unwrap();
    let mut spec = BertForMaskedLM::checkpoint_spec(&config);
    spec.ignored.push("(unclosed".into());
    let mut model = BertForMaskedLM::init(&config, &device);
    let files = sesame_layers::WeightFiles::find(&dir).unwrap();
    match sesame_layers::checkpoint::load_weights(&mut model, &files, &spec) {
        Err(CheckpointError::BadPattern { pattern, .. }) => assert_eq!(pattern, "(unclosed"),
        other => panic!("expected BadPattern, got {:?}", other.map(|r| r.to_string())),
    }
}
