//! Every ELECTRA head against HuggingFace transformers fixtures, on every compiled backend,
//! with the default outputs and with every output requested. The shapes cover embeddings
//! narrower than the encoder (`embeddings_project`) and as wide (no projection), HF's
//! first-token GELU summary and a mean tanh summary, two and three token types.

use sesame_electra::*;
use sesame_layers::{ClassificationHead, PretrainedModel, SummaryClassifier};
use sesame_tests::parity::{self, check_encoder, check_loss, each, input};
use sesame_tests::{devices, Fixture, TOLERANCE};
use sesame_layers::HfConfig as _;

const SHAPES: [&str; 2] = ["base", "wide"];

#[test]
fn electra_model_matches_transformers() {
    parity::base_model::<ElectraModel>("electra", &SHAPES);
}

#[test]
fn electra_model_over_its_tokens_alone_matches_transformers_at_every_token() {
    parity::base_model_tokens_only::<ElectraModel>("electra", &SHAPES);
}

#[test]
fn electra_discriminator_matches_transformers() {
    each("electra", &SHAPES, "pretraining", |f, device, c, options| {
        let model = ElectraForPreTraining::from_pretrained(&f.dir, device).unwrap().model;
        let out = model.forward(input(f, device), Some(f.int("label.labels", device)), options);
        c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder, options);
    });
}

#[test]
fn electra_generator_matches_transformers() {
    parity::masked_lm::<ElectraModel>("electra", &SHAPES);
}

#[test]
fn electra_for_sequence_classification_matches_transformers_for_each_problem_type() {
    parity::sequence_classification::<ElectraModel, ClassificationHead>("electra", &SHAPES);
}

#[test]
fn electra_for_token_classification_matches_transformers() {
    parity::token_classification::<ElectraModel>("electra", &SHAPES);
}

#[test]
fn electra_for_question_answering_matches_transformers() {
    parity::question_answering::<ElectraModel>("electra", &SHAPES);
}

#[test]
fn electra_for_multiple_choice_matches_transformers() {
    parity::multiple_choice::<ElectraModel, SummaryClassifier>("electra", &SHAPES);
}

#[test]
fn checkpoints_load_without_missing_or_unused_tensors() {
    let device = devices().remove(0).1;
    for shape in SHAPES {
        let dir = Fixture::open(&format!("electra/{shape}-pretraining")).dir;
        let report = ElectraForPreTraining::from_pretrained(&dir, &device).unwrap().report;
        assert!(report.initialized.is_empty() && report.unused.is_empty(), "{shape}: {report}");
        let dir = Fixture::open(&format!("electra/{shape}-masked-lm")).dir;
        let report = ElectraForMaskedLM::from_pretrained(&dir, &device).unwrap().report;
        assert!(report.initialized.is_empty() && report.unused.is_empty(), "{shape}: {report}");
    }
    // No pooler, and no projection when the embeddings are as wide as the encoder.
    let loaded = ElectraModel::from_pretrained(&Fixture::open("electra/wide-model").dir, &device).unwrap();
    assert!(loaded.model.embeddings_project.is_none());
    let base = ElectraModel::from_pretrained(&Fixture::open("electra/base-model").dir, &device).unwrap();
    assert!(base.model.embeddings_project.is_some());
    assert_eq!(base.config.input_limits().max_len, 16);
}

#[test]
fn a_saved_discriminator_and_generator_load_in_transformers() {
    parity::transformers_reproduces::<ElectraForMaskedLM>("electra/base-masked-lm", "logits", |m, i| {
        m.forward(i, None, sesame_layers::OutputOptions::default()).logits
    });
    parity::transformers_reproduces::<ElectraForPreTraining>("electra/wide-pretraining", "logits", |m, i| {
        m.forward(i, None, sesame_layers::OutputOptions::default()).logits.unsqueeze_dim(2)
    });
}
