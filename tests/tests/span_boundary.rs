//! SpanBERT's span-boundary objective (SBO): the first step of MLM + SBO equals a PyTorch
//! implementation written from the paper (both losses, every gradient, every parameter after a
//! clipped AdamW step) on every compiled backend; the spans it reads are maximal runs of masked
//! positions with a token on both sides; the head is saved under the authors' names, which a
//! plain masked LM reports as unused.

use burn::prelude::*;
use sesame_bert::{BertForMaskedLM, BertForSpanPreTraining};
use sesame_layers::{PretrainedModel};
use sesame_train::{MaskedPositions, MaskedSpans};
use sesame_tests::training::{first_step_failures, Fixed};
use sesame_tests::{devices, values, Fixture};
use sesame_train::{pretraining_step, PretrainingBatch, StepOutput};

fn fixture_batch(f: &Fixture, device: &Device) -> PretrainingBatch {
    sesame_tests::training::fixture_pretraining_batch(f, device, Tensor::zeros([4], device))
}

fn step(model: &BertForSpanPreTraining, batch: PretrainingBatch) -> StepOutput {
    pretraining_step(model, batch, None)
}

#[test]
fn the_first_step_of_mlm_plus_sbo_matches_pytorch() {
    let f = Fixture::open("train/spanbert-first-step");
    for (backend, device) in devices() {
        let train = device.clone().autodiff();
        let loaded = BertForSpanPreTraining::from_pretrained(&f.dir, &train).unwrap();
        assert!(loaded.report.initialized.is_empty() && loaded.report.unused.is_empty(), "{backend}: {}", loaded.report);
        let batch = fixture_batch(&f, &train);
        let out = sesame_train::MaskedLmObjective::objective(&loaded.model, batch.input.clone(), &batch.masked, batch.sentence_labels.clone());
        let sbo = out.span_boundary.expect("the SBO loss");
        for (name, ours) in [("mlm_loss", out.mlm_loss), ("sbo_loss", sbo)] {
            let (ours, theirs) = (values(ours)[0], f.get(&format!("output.{name}")).f32[0]);
            assert!((ours - theirs).abs() < 1e-4, "{backend}: {name} {ours}, PyTorch {theirs}");
        }
        let metrics = step(&loaded.model, batch.clone()).metrics;
        assert!(metrics.iter().any(|m| m.name == "sbo_loss"), "{backend}: the step reports sbo_loss");

        let task = Fixed { batch, step };
        let failures = first_step_failures(&f, &task, loaded.model, &loaded.config, &format!("spanbert-{backend}"));
        assert!(failures.is_empty(), "{backend}:\n  {}", failures.join("\n  "));
    }
}

#[test]
fn a_masked_lm_loads_the_checkpoint_and_reports_the_sbo_head_as_unused() {
    let f = Fixture::open("train/spanbert-first-step");
    let loaded = BertForMaskedLM::from_pretrained(&f.dir, &devices()[0].1).unwrap();
    let mut unused = loaded.report.unused.clone();
    unused.sort();
    let expected = [
        "cls.pair_target_predictions.bias",
        "cls.pair_target_predictions.mlp_layer_norm.layer_norm1.bias",
        "cls.pair_target_predictions.mlp_layer_norm.layer_norm1.weight",
        "cls.pair_target_predictions.mlp_layer_norm.layer_norm2.bias",
        "cls.pair_target_predictions.mlp_layer_norm.layer_norm2.weight",
        "cls.pair_target_predictions.mlp_layer_norm.linear1.bias",
        "cls.pair_target_predictions.mlp_layer_norm.linear1.weight",
        "cls.pair_target_predictions.mlp_layer_norm.linear2.bias",
        "cls.pair_target_predictions.mlp_layer_norm.linear2.weight",
        "cls.pair_target_predictions.position_embeddings.weight",
    ];
    assert_eq!(unused, expected, "{}", loaded.report);
    assert!(loaded.report.initialized.is_empty(), "{}", loaded.report);
}

#[test]
fn spans_are_maximal_runs_of_masked_positions_with_a_token_on_each_side() {
    let device = devices()[0].1.clone();
    let n = -100;
    // Row 0: [1, 2] and [3] touch (one span, 1..=3), [5] alone; row 1: a span at the first
    // column and one at the last (no boundary on one side).
    let labels = [n, 11, 12, 13, n, 15, n, 20, n, n, n, n, n, 21];
    let masked = MaskedPositions::from_labels(&labels, 7, true, &device);
    let int = |t: &Tensor<1, Int>| t.clone().into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    let MaskedSpans { left, right, offset } = masked.spans.as_ref().unwrap();
    let none = MaskedSpans::NO_BOUNDARY;
    assert_eq!(int(&masked.positions), [1, 2, 3, 5, 7, 13]);
    assert_eq!(int(left), [0, 0, 0, 4, 7, 13]);
    assert_eq!(int(right), [4, 4, 4, 6, 7, 13]);
    assert_eq!(int(offset), [0, 1, 2, 0, none, none]);
}
