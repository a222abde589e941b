//! Attention heads pruned as transformers 4's `prune_heads` pruned them: checkpoints with
//! `pruned_heads` (layers with fewer heads) load with transformers' outputs on every backend;
//! Sesame's own pruning of the unpruned model gives the same model, records the same
//! `pruned_heads` and saves what loads back; configurations that cannot be built are refused.

use std::collections::{BTreeMap, BTreeSet};

use sesame_bert::BertModel;
use sesame_layers::{Backbone, ClassificationHead, Classifier, ForSequenceClassification, OutputOptions, PretrainedModel, SequenceHead, SequenceLabels};
use sesame_roberta::RobertaModel;
use sesame_tests::parity::{check_encoder, check_loss, each, input};
use sesame_tests::training::run_dir;
use sesame_tests::{devices, Checker, Fixture, TOLERANCE};

/// The fixture's pruning, in transformers' two calls: the second names head 2 of layer 1
/// again, which the first removed.
fn calls() -> [BTreeMap<usize, BTreeSet<usize>>; 2] {
    let heads = |rows: &[(usize, &[usize])]| rows.iter().map(|(l, h)| (*l, h.iter().copied().collect())).collect();
    [heads(&[(0, &[1, 3]), (1, &[2])]), heads(&[(1, &[0, 2])])]
}

fn check<B: Backbone, H: SequenceHead<B>>(family: &str)
where
    ForSequenceClassification<B, H>: PretrainedModel<Config = B::Config>,
{
    // The checkpoint transformers 4 pruned.
    each(family, &["pruned"], "seqcls", |f, device, c, options| {
        let loaded = ForSequenceClassification::<B, H>::from_pretrained(&f.dir, device).unwrap();
        assert!(loaded.report.initialized.is_empty() && loaded.report.unused.is_empty(), "{}", loaded.report);
        let out = loaded.model.forward(input(f, device), Some(SequenceLabels::SingleLabel(f.int("label.labels", device))), options);
        c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder, options);
    });

    // The unpruned model pruned by Sesame, in the same two calls; saved and loaded back.
    let f = Fixture::open(&format!("{family}/pruned-seqcls"));
    for (backend, device) in devices() {
        let loaded = ForSequenceClassification::<B, H>::from_pretrained(&f.dir.join("original"), &device).unwrap();
        let (mut model, mut config) = (loaded.model, loaded.config);
        for heads in calls() {
            model.base = model.base.clone().prune_heads(&mut config, &heads).unwrap();
        }
        let dir = run_dir(&format!("pruned-{family}-{backend}"));
        model.save_pretrained(&config, &dir).unwrap();
        let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        assert_eq!(saved["pruned_heads"], serde_json::json!({"0": [1, 3], "1": [0, 2]}), "{backend}");
        let reloaded = ForSequenceClassification::<B, H>::from_pretrained(&dir, &device).unwrap().model;
        for (model, what) in [(model, "pruned by Sesame"), (reloaded, "saved and loaded back")] {
            let mut c = Checker::default();
            let out = model.forward(input(&f, &device), None, OutputOptions::all());
            c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
            check_encoder(&mut c, &f, &out.encoder, OutputOptions::all());
            c.finish(&format!("{family}, {what}, on {backend}"));
        }
    }
}

#[test]
fn bert_heads_pruned_by_transformers_load_and_sesame_prunes_the_same() {
    check::<BertModel, Classifier>("bert");
}

#[test]
fn roberta_heads_pruned_by_transformers_load_and_sesame_prunes_the_same() {
    check::<RobertaModel, ClassificationHead>("roberta");
}

#[test]
fn pruned_heads_that_cannot_be_built_are_refused_naming_the_field() {
    let f = Fixture::open("bert/pruned-seqcls");
    let device = &devices()[0].1;
    for (pruned, expect) in [
        (serde_json::json!({"0": [0, 1, 2, 3]}), "every head of layer 0"),
        (serde_json::json!({"0": [4]}), "head 4 of layer 0"),
        (serde_json::json!({"2": [1]}), "layer 2 of 2"),
        (serde_json::json!({"first": [1]}), "not a layer number"),
    ] {
        let dir = run_dir("pruned-bad");
        std::fs::create_dir_all(&dir).unwrap();
        let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.dir.join("config.json")).unwrap()).unwrap();
        config["pruned_heads"] = pruned;
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        std::fs::copy(f.dir.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
        let err = ForSequenceClassification::<BertModel, Classifier>::from_pretrained(&dir, device).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains("pruned_heads") && err.contains(expect), "{err}");
    }
    // Pruning every head of a layer through the library is refused the same way.
    let loaded = ForSequenceClassification::<BertModel, Classifier>::from_pretrained(&f.dir.join("original"), device).unwrap();
    let mut config = loaded.config;
    let all: BTreeMap<usize, BTreeSet<usize>> = [(1, (0..4).collect())].into();
    let err = loaded.model.base.prune_heads(&mut config, &all).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("every head of layer 1"), "{err}");
    assert!(config.pruned_heads.is_empty(), "a refused pruning leaves the config as it was");
}

#[test]
fn a_head_that_adds_nothing_scores_zero_and_is_pruned_first_without_changing_the_logits() {
    use burn::module::Param;
    use burn::optim::GradientsParams;
    use burn::prelude::*;
    use sesame_train::pruning::{without_dropout, HeadImportance};

    let f = Fixture::open("bert/base-seqcls-single");
    for (backend, device) in devices() {
        let train = device.clone().autodiff();
        let loaded = ForSequenceClassification::<BertModel, Classifier>::from_pretrained(&f.dir, &train).unwrap();
        let (mut model, mut config) = (without_dropout(loaded.model), loaded.config);
        // Head 2 of layer 1 (rows 16..24 of its output projection, heads of 8) is silenced.
        let attention = &mut model.base.encoder.layers[1].attention;
        let weight = attention.output.weight.val();
        let [rows, d] = weight.dims();
        let keep = Tensor::<1>::from_data(TensorData::new((0..rows).map(|r| if (16..24).contains(&r) { 0.0f32 } else { 1.0 }).collect::<Vec<_>>(), [rows]), &train);
        attention.output.weight = Param::from_tensor((weight * keep.reshape([rows, 1]).expand([rows, d])).detach());

        let labels = SequenceLabels::SingleLabel(f.int("label.labels", &train));
        let loss = model.forward(input(&f, &train), Some(labels), OutputOptions::default()).loss.unwrap();
        let mut importance = HeadImportance::new(model.base.encoder().unwrap());
        importance.add(model.base.encoder().unwrap(), &GradientsParams::from_grads(loss.backward(), &model));
        let importance = importance.normalized();
        assert_eq!(importance.scores[1][2], 0.0, "{backend}: {:?}", importance.scores);
        assert!(importance.scores.iter().flatten().filter(|&&s| s > 0.0).count() == 7, "{backend}: {:?}", importance.scores);
        let chosen = importance.least_important(1);
        assert_eq!(chosen, [(1, [2].into())].into(), "{backend}");

        let before = model.valid().forward(input(&f, &device), None, OutputOptions::default()).logits;
        let before = sesame_tests::Array { shape: before.dims().to_vec(), f32: sesame_tests::values(before), i64: Vec::new() };
        model.base = model.base.clone().prune_heads(&mut config, &chosen).unwrap();
        let after = model.valid().forward(input(&f, &device), None, OutputOptions::default()).logits;
        let mut c = Checker::default();
        c.close("logits", after, &before, 1e-5);
        c.finish(&format!("pruning a silent head on {backend}"));
    }
}

/// Head importance as bertology computes it in PyTorch (a gate on each head's context,
/// `|∂loss/∂gate|` summed over two batches, each layer over its L2 norm:
/// `scripts/make_fixtures.py --only importance`): Sesame's, read off the output projection's
/// gradient, equal to 1e-4, raw and normalised, on every backend.
#[test]
fn head_importance_equals_bertology_s_head_mask_gradients() {
    use burn::optim::GradientsParams;
    use burn::prelude::*;
    use sesame_layers::EncoderInput;
    use sesame_train::pruning::{without_dropout, HeadImportance};

    let f = Fixture::open("bert/base-seqcls-single");
    let reference: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(sesame_tests::fixtures_dir().join("bert/head-importance/reference.json")).unwrap()).unwrap();
    let table = |key: &str| -> Vec<Vec<f64>> { serde_json::from_value(reference[key].clone()).unwrap() };
    let batches: Vec<Vec<i64>> = serde_json::from_value(reference["batches"].clone()).unwrap();
    for (backend, device) in devices() {
        let train = device.clone().autodiff();
        let model = without_dropout(ForSequenceClassification::<BertModel, Classifier>::from_pretrained(&f.dir, &train).unwrap().model);
        let mut importance = HeadImportance::new(model.base.encoder().unwrap());
        for rows in &batches {
            let rows = Tensor::<1, Int>::from_data(TensorData::new(rows.clone(), [rows.len()]), &train);
            let pick = |name: &str| f.int::<2>(name, &train).select(0, rows.clone());
            let input = EncoderInput::new(pick("input.input_ids")).with_attention_mask(pick("input.attention_mask")).with_token_type_ids(pick("input.token_type_ids"));
            let labels = SequenceLabels::SingleLabel(f.int::<1>("label.labels", &train).select(0, rows.clone()));
            let loss = model.forward(input, Some(labels), OutputOptions::default()).loss.unwrap();
            importance.add(model.base.encoder().unwrap(), &GradientsParams::from_grads(loss.backward(), &model));
        }
        for (what, ours, theirs) in [("raw", importance.scores.clone(), table("raw")), ("normalised", importance.clone().normalized().scores, table("normalized"))] {
            assert_eq!(ours.iter().map(Vec::len).collect::<Vec<_>>(), theirs.iter().map(Vec::len).collect::<Vec<_>>(), "{backend}: {what}");
            let gap = ours.iter().flatten().zip(theirs.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(gap <= 1e-4, "{backend}: {what} importance {ours:?} differs from bertology's {theirs:?} by {gap:e}");
        }
    }
}
