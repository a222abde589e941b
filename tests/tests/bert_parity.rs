//! Every BERT head against HuggingFace transformers fixtures, on every compiled backend:
//! hidden states of all layers, attention maps, logits and losses within 1e-4.

use sesame_bert::*;
use sesame_layers::{Classifier, OutputOptions, PretrainedModel, TaskModel};
use sesame_tests::parity::{self, check_encoder, check_loss, each, input};
use sesame_tests::{devices, Checker, Fixture, TOLERANCE};

const SHAPES: [&str; 3] = ["base", "wide", "relu"];

#[test]
fn bert_model_matches_transformers() {
    parity::base_model::<BertModel>("bert", &SHAPES);
}

#[test]
fn bert_model_over_its_tokens_alone_matches_transformers_at_every_token() {
    parity::base_model_tokens_only::<BertModel>("bert", &SHAPES);
}

#[test]
fn a_classifier_trained_over_its_tokens_alone_gets_the_gradients_of_the_padded_run() {
    // Without dropout, so that both runs compute the same function of the weights.
    let dir = sesame_tests::Scratch::copy_of("bert/base-seqcls-single", "bert-packed-gradients");
    dir.edit_config(|config| {
        for field in ["hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"] {
            config[field] = 0.0.into();
        }
    });
    let f = Fixture::open("bert/base-seqcls-single");
    for (backend, device) in devices() {
        let device = device.autodiff();
        let model = BertForSequenceClassification::from_pretrained(&dir, &device).unwrap().model;
        let gradients = |tokens_only: bool| -> Vec<Vec<f32>> {
            let logits = model.run(input(&f, &device), OutputOptions { tokens_only, ..OutputOptions::default() }).logits;
            let grads = (logits.clone() * logits).sum().backward();
            let layer = &model.base.encoder.layers[0];
            [layer.attention.query.weight.val(), layer.feed_forward.intermediate.weight.val(), model.base.embeddings.word_embeddings.weight.val()]
                .into_iter()
                .map(|w| sesame_tests::values(w.grad(&grads).expect("the weight takes part in the logits")))
                .collect()
        };
        let (padded, packed) = (gradients(false), gradients(true));
        for (name, (a, b)) in ["layer 0's query", "layer 0's intermediate", "word embeddings"].iter().zip(padded.iter().zip(&packed)) {
            let diff = sesame_tests::max_abs_diff(a, b);
            assert!(diff <= 1e-5, "{name}'s gradient on {backend}: max abs diff {diff:e}");
        }
    }
}

#[test]
fn bert_for_pretraining_matches_transformers() {
    parity::pretraining::<BertModel>("bert", &SHAPES);
}

#[test]
fn bert_for_masked_lm_matches_transformers() {
    parity::masked_lm::<BertModel>("bert", &SHAPES);
}

#[test]
fn bert_for_sequence_classification_matches_transformers_for_each_problem_type() {
    parity::sequence_classification::<BertModel, Classifier>("bert", &SHAPES);
}

#[test]
fn bert_for_token_classification_matches_transformers() {
    parity::token_classification::<BertModel>("bert", &SHAPES);
}

#[test]
fn bert_for_question_answering_matches_transformers() {
    parity::question_answering::<BertModel>("bert", &SHAPES);
}

#[test]
fn bert_for_multiple_choice_matches_transformers() {
    parity::multiple_choice::<BertModel, sesame_layers::Classifier>("bert", &SHAPES);
}

#[test]
fn bert_for_next_sentence_prediction_matches_transformers() {
    each("bert", &SHAPES, "nsp", |f, device, c, options| {
        let model = BertForNextSentencePrediction::from_pretrained(&f.dir, device).unwrap().model;
        let out = model.forward(input(f, device), Some(f.int("label.labels", device)), options);
        c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder, options);
    });
}

#[test]
fn a_base_model_loads_from_a_prefixed_pretraining_checkpoint() {
    // `bert.`-prefixed weights into a BertModel: HF strips the base-model prefix; so do we.
    for shape in SHAPES {
        let f = Fixture::open(&format!("bert/{shape}-pretraining"));
        for (backend, device) in devices() {
            let loaded = BertModel::from_pretrained(&f.dir, &device).unwrap();
            assert!(loaded.report.initialized.is_empty(), "{}", loaded.report);
            assert!(loaded.report.unused.iter().all(|n| n.starts_with("cls.")), "{}", loaded.report);
            let out = loaded.model.forward(input(&f, &device), OutputOptions::all());
            let mut c = Checker::default();
            check_encoder(&mut c, &f, &out.encoder, OutputOptions::all());
            c.finish(&format!("{shape}-pretraining into BertModel on {backend}"));
        }
    }
}

#[test]
fn sharded_safetensors_and_legacy_and_half_precision_pickles_load() {
    // The half-precision pickle's reference was computed from its f16-rounded weights.
    for kind in ["base-model-sharded", "base-model-bin", "base-model-bin-f16"] {
        let f = Fixture::open(&format!("bert/{kind}"));
        for (backend, device) in devices() {
            let loaded = BertModel::from_pretrained(&f.dir, &device).unwrap();
            // The pickle carries the legacy `embeddings.position_ids` buffer: known, not unused.
            assert!(loaded.report.unused.is_empty() && loaded.report.initialized.is_empty(), "{kind}: {}", loaded.report);
            let out = loaded.model.forward(input(&f, &device), OutputOptions::all());
            let mut c = Checker::default();
            c.close("last_hidden_state", out.last_hidden_state(), f.get("output.last_hidden_state"), TOLERANCE);
            c.close("pooler_output", out.pooler_output.unwrap(), f.get("output.pooler_output"), TOLERANCE);
            c.finish(&format!("{kind} on {backend}"));
        }
    }
}
