//! Every BERT head against HuggingFace transformers fixtures, on every compiled backend:
//! hidden states of all layers, attention maps, logits and losses within 1e-4.

use burn::prelude::*;
use sesame_bert::*;
use sesame_layers::{EncoderOutput, OutputOptions, PretrainedModel, SequenceLabels};
use sesame_tests::{devices, Checker, Fixture, TOLERANCE};

const SHAPES: [&str; 3] = ["base", "wide", "relu"];

fn input(f: &Fixture, device: &Device) -> BertInput {
    BertInput::new(f.int("input.input_ids", device))
        .with_attention_mask(f.int("input.attention_mask", device))
        .with_token_type_ids(f.int("input.token_type_ids", device))
}

fn check_encoder(c: &mut Checker, f: &Fixture, out: &EncoderOutput) {
    let states = out.hidden_states.as_ref().expect("hidden states were requested");
    let attentions = out.attentions.as_ref().expect("attentions were requested");
    if states.len() != f.count("output.hidden_states") || attentions.len() != f.count("output.attentions") {
        c.fail(format!("{} hidden states / {} attentions, reference has {} / {}", states.len(), attentions.len(),
            f.count("output.hidden_states"), f.count("output.attentions")));
        return;
    }
    for (i, h) in states.iter().enumerate() {
        c.close(&format!("hidden_states.{i}"), h.clone(), f.get(&format!("output.hidden_states.{i}")), TOLERANCE);
    }
    for (i, a) in attentions.iter().enumerate() {
        c.close(&format!("attentions.{i}"), a.clone(), f.get(&format!("output.attentions.{i}")), TOLERANCE);
    }
}

fn check_loss(c: &mut Checker, f: &Fixture, loss: Option<Tensor<1>>) {
    match loss {
        Some(l) => c.close("loss", l, f.get("output.loss"), TOLERANCE),
        None => c.fail("no loss although labels were given".into()),
    }
}

/// Run `check` for fixture `name` of every shape on every backend.
fn each(kind: &str, check: impl Fn(&Fixture, &Device, &mut Checker)) {
    for shape in SHAPES {
        let f = Fixture::open(&format!("bert/{shape}-{kind}"));
        for (backend, device) in devices() {
            let mut c = Checker::default();
            check(&f, &device, &mut c);
            c.finish(&format!("bert/{shape}-{kind} on {backend}"));
        }
    }
}

#[test]
fn bert_model_matches_transformers() {
    each("model", |f, device, c| {
        let model = BertModel::from_pretrained(&f.dir, device).unwrap().model;
        let out = model.forward(input(f, device), OutputOptions::all());
        c.close("last_hidden_state", out.last_hidden_state(), f.get("output.last_hidden_state"), TOLERANCE);
        c.close("pooler_output", out.pooler_output.clone().unwrap(), f.get("output.pooler_output"), TOLERANCE);
        check_encoder(c, f, &out.encoder);
    });
}

#[test]
fn bert_for_pretraining_matches_transformers() {
    each("pretraining", |f, device, c| {
        let model = BertForPreTraining::from_pretrained(&f.dir, device).unwrap().model;
        let labels = PreTrainingLabels { mlm: f.int("label.labels", device), next_sentence: f.int("label.next_sentence_label", device) };
        let out = model.forward(input(f, device), Some(labels), OutputOptions::all());
        c.close("prediction_logits", out.prediction_logits, f.get("output.prediction_logits"), TOLERANCE);
        c.close("seq_relationship_logits", out.seq_relationship_logits, f.get("output.seq_relationship_logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder);
    });
}

#[test]
fn bert_for_masked_lm_matches_transformers() {
    each("masked-lm", |f, device, c| {
        let model = BertForMaskedLM::from_pretrained(&f.dir, device).unwrap().model;
        let out = model.forward(input(f, device), Some(f.int("label.labels", device)), OutputOptions::all());
        c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder);
    });
}

#[test]
fn bert_for_next_sentence_prediction_matches_transformers() {
    each("nsp", |f, device, c| {
        let model = BertForNextSentencePrediction::from_pretrained(&f.dir, device).unwrap().model;
        let out = model.forward(input(f, device), Some(f.int("label.labels", device)), OutputOptions::all());
        c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder);
    });
}

#[test]
fn bert_for_sequence_classification_matches_transformers_for_each_problem_type() {
    for (kind, problem) in [("seqcls-single", 0), ("seqcls-regression", 1), ("seqcls-multilabel", 2)] {
        each(kind, |f, device, c| {
            let model = BertForSequenceClassification::from_pretrained(&f.dir, device).unwrap().model;
            let labels = match problem {
                0 => SequenceLabels::SingleLabel(f.int("label.labels", device)),
                1 => SequenceLabels::Regression(f.float("label.labels", device)),
                _ => SequenceLabels::MultiLabel(f.float("label.labels", device)),
            };
            let out = model.forward(input(f, device), Some(labels), OutputOptions::all());
            c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
            check_loss(c, f, out.loss);
            check_encoder(c, f, &out.encoder);
        });
    }
}

#[test]
fn bert_for_token_classification_matches_transformers() {
    each("token-classification", |f, device, c| {
        let model = BertForTokenClassification::from_pretrained(&f.dir, device).unwrap().model;
        let out = model.forward(input(f, device), Some(f.int("label.labels", device)), OutputOptions::all());
        c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder);
    });
}

#[test]
fn bert_for_question_answering_matches_transformers() {
    each("qa", |f, device, c| {
        let model = BertForQuestionAnswering::from_pretrained(&f.dir, device).unwrap().model;
        let positions = (f.int("label.start_positions", device), f.int("label.end_positions", device));
        let out = model.forward(input(f, device), Some(positions), OutputOptions::all());
        c.close("start_logits", out.start_logits, f.get("output.start_logits"), TOLERANCE);
        c.close("end_logits", out.end_logits, f.get("output.end_logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder);
    });
}

#[test]
fn bert_for_multiple_choice_matches_transformers() {
    each("multiple-choice", |f, device, c| {
        let model = BertForMultipleChoice::from_pretrained(&f.dir, device).unwrap().model;
        let choices = f.get("input.input_ids").shape[1];
        let out = model.forward(input(f, device), choices, Some(f.int("label.labels", device)), OutputOptions::all());
        c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder);
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
            check_encoder(&mut c, &f, &out.encoder);
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
