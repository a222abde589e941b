//! int8 inference (`sesame_layers::int8`): a quantised model's outputs stay within the stated
//! tolerance of transformers' float outputs on the parity fixtures, on every compiled backend
//! (flex and ndarray multiply in int8, the others multiply the int8 weights in float); a
//! quantised model saves, loads back quantised, and transformers loads what it saves.
//!
//! The tolerance: every output row (a token's hidden state, its logits) at cosine ≥ 0.99 of
//! the reference and no value further than 10% of the reference's largest magnitude (measured:
//! cosine ≥ 0.999 and at most 4.4% on these fixtures). The real
//! all-MiniLM-L6-v2's embeddings are checked in `minilm.rs`.

use sesame_bert::{BertForSequenceClassification, BertModel};
use sesame_layers::{int8, Backbone, OutputOptions, PretrainedModel};
use sesame_tests::parity::input;
use sesame_tests::{devices, max_abs_diff, values, Fixture, TOLERANCE};

/// The least cosine of a row of the quantised model's output with the reference's.
pub const MIN_COSINE: f32 = 0.99;
/// The largest difference from the reference, as a share of the reference's largest magnitude.
pub const MAX_RELATIVE: f32 = 0.1;

/// Check `ours` against `reference`, rows of `width`: within the tolerance, and not equal to it
/// (the quantisation changed the numbers: it ran).
fn within_int8_tolerance(ours: &[f32], reference: &[f32], width: usize, what: &str) {
    assert_eq!(ours.len(), reference.len(), "{what}: sizes");
    let scale = reference.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let diff = max_abs_diff(ours, reference);
    assert!(diff <= MAX_RELATIVE * scale, "{what}: max abs diff {diff:e}, over {MAX_RELATIVE} of the largest magnitude {scale:e}");
    assert!(diff > TOLERANCE, "{what}: within {TOLERANCE:e} of the float reference: nothing was quantised");
    for (row, (a, b)) in ours.chunks(width).zip(reference.chunks(width)).enumerate() {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        let cosine = dot / (norm(a) * norm(b));
        assert!(cosine >= MIN_COSINE, "{what}: row {row} at cosine {cosine} of the reference");
    }
}

#[test]
fn int8_bert_stays_within_tolerance_of_transformers_on_every_backend() {
    for shape in ["base", "wide", "relu"] {
        let f = Fixture::open(&format!("bert/{shape}-model"));
        let reference = f.get("output.last_hidden_state");
        let width = *reference.shape.last().unwrap();
        let c = Fixture::open(&format!("bert/{shape}-seqcls-single"));
        let logits = c.get("output.logits");
        for (backend, device) in devices() {
            let float = BertModel::from_pretrained(&f.dir, &device).unwrap().model;
            let quantised = int8::quantize(float.clone());
            assert!(int8::is_quantized(&quantised) && !int8::is_quantized(&float), "the original model is left as it was");
            let out = Backbone::forward(&quantised, input(&f, &device), OutputOptions::default());
            within_int8_tolerance(&values(out.last_hidden_state()), &reference.f32, width, &format!("{shape} last_hidden_state on {backend}"));
            // The float model still gives transformers' numbers.
            let out = Backbone::forward(&float, input(&f, &device), OutputOptions::default());
            assert!(max_abs_diff(&values(out.last_hidden_state()), &reference.f32) <= TOLERANCE, "{shape} on {backend}: the float model changed");

            // A head: the classifier's logits (pooler and classifier quantised too).
            let classifier = int8::quantize(BertForSequenceClassification::from_pretrained(&c.dir, &device).unwrap().model);
            let out = classifier.forward(input(&c, &device), None, OutputOptions::default());
            within_int8_tolerance(&values(out.logits), &logits.f32, *logits.shape.last().unwrap(), &format!("{shape} classifier logits on {backend}"));
        }
    }
}

#[test]
fn a_quantised_model_saves_loads_back_quantised_and_transformers_loads_it() {
    let f = Fixture::open("bert/base-model");
    let reference = f.get("output.last_hidden_state");
    let width = *reference.shape.last().unwrap();
    let dir = sesame_tests::Scratch::path("int8");
    let (_, device) = devices().remove(0);
    let loaded = BertModel::from_pretrained(&f.dir, &device).unwrap();
    let quantised = int8::quantize(loaded.model);
    quantised.save_pretrained(&loaded.config, &dir).unwrap();
    assert!(int8::saved_quantized(&dir), "config.json marks the model quantised");
    let ours = values(Backbone::forward(&quantised, input(&f, &device), OutputOptions::default()).last_hidden_state());

    for (backend, device) in devices() {
        let back = BertModel::from_pretrained(&dir, &device).unwrap();
        assert!(back.report.unused.is_empty() && back.report.initialized.is_empty(), "{}", back.report);
        assert!(int8::is_quantized(&back.model), "{backend}: loaded back quantised");
        let again = values(Backbone::forward(&back.model, input(&f, &device), OutputOptions::default()).last_hidden_state());
        within_int8_tolerance(&again, &reference.f32, width, &format!("loaded back on {backend}"));
        if backend == devices()[0].0 {
            assert_eq!(again, ours, "the same numbers as before saving");
        }
    }

    // transformers runs the saved int8 weights in float: within the tolerance of its own float
    // model, and within 1e-4 of a backend that multiplies them in float too.
    let Some(python) = sesame_tests::python() else { return };
    let out = dir.join("hf_out.safetensors");
    sesame_tests::hf_forward(&python, &dir, &BertModel::architecture(), &f.dir.join("io.safetensors"), &out)
        .unwrap_or_else(|e| panic!("transformers failed on the saved int8 model: {e}"));
    let theirs = sesame_tests::read_f32_tensors(&out).remove("output.last_hidden_state").expect("transformers wrote the output");
    within_int8_tolerance(&theirs, &reference.f32, width, "transformers on the saved model");
    for (backend, device) in devices() {
        let back = BertModel::from_pretrained(&dir, &device).unwrap().model;
        let out = values(Backbone::forward(&back, input(&f, &device), OutputOptions::default()).last_hidden_state());
        let diff = max_abs_diff(&out, &theirs);
        if sesame_layers::device::is_host_memory(&device) {
            // The activations were quantised too: the int8 products ran.
            assert!(diff > TOLERANCE, "{backend}: the float products of the int8 weights (within {diff:e}): no int8 product ran");
        } else {
            assert!(diff <= TOLERANCE, "{backend} and transformers differ by {diff:e} on the int8 weights");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether every dense layer of the model in fixture `dir`, loaded as `M`, runs in int8 once
/// quantised (and none before).
fn every_dense_layer_quantised<M: PretrainedModel>(dir: &str) -> bool {
    let device = burn::tensor::Device::flex();
    let model = M::from_pretrained(&Fixture::open(dir).dir, &device).unwrap_or_else(|e| panic!("{dir}: {e}")).model;
    assert!(!int8::is_quantized(&model), "{dir}: quantised before quantize");
    int8::is_quantized(&int8::quantize(model))
}

/// Every family's dense layers, its heads' included, are `sesame_layers::Linear`, which packs
/// its int8 weight when the model is quantised: no family can leave a layer in float.
#[test]
fn every_dense_layer_of_every_family_and_head_runs_in_int8_once_quantised() {
    let cases = [
        ("bert/base-pretraining", every_dense_layer_quantised::<sesame_bert::BertForPreTraining>("bert/base-pretraining")),
        ("bert/base-qa", every_dense_layer_quantised::<sesame_bert::BertForQuestionAnswering>("bert/base-qa")),
        ("roberta/base-seqcls-single", every_dense_layer_quantised::<sesame_roberta::RobertaForSequenceClassification>("roberta/base-seqcls-single")),
        ("albert/base-pretraining", every_dense_layer_quantised::<sesame_albert::AlbertForPreTraining>("albert/base-pretraining")),
        ("albert/base-multiple-choice", every_dense_layer_quantised::<sesame_albert::AlbertForMultipleChoice>("albert/base-multiple-choice")),
        ("electra/base-pretraining", every_dense_layer_quantised::<sesame_electra::ElectraForPreTraining>("electra/base-pretraining")),
        ("electra/wide-masked-lm", every_dense_layer_quantised::<sesame_electra::ElectraForMaskedLM>("electra/wide-masked-lm")),
        ("electra/base-multiple-choice", every_dense_layer_quantised::<sesame_electra::ElectraForMultipleChoice>("electra/base-multiple-choice")),
        ("unilm/seq-to-seq", every_dense_layer_quantised::<sesame_unilm::UnilmForMaskedLM>("unilm/seq-to-seq")),
        ("xlnet/base-seqcls-single", every_dense_layer_quantised::<sesame_xlnet::XlnetForSequenceClassification>("xlnet/base-seqcls-single")),
        ("xlnet/base-qa-beam", every_dense_layer_quantised::<sesame_xlnet::XlnetForQuestionAnswering>("xlnet/base-qa-beam")),
        ("xlnet/base-multiple-choice", every_dense_layer_quantised::<sesame_xlnet::XlnetForMultipleChoice>("xlnet/base-multiple-choice")),
        ("bart/base-conditional-generation", every_dense_layer_quantised::<sesame_bart::BartForConditionalGeneration>("bart/base-conditional-generation")),
        ("bart/base-seqcls-single", every_dense_layer_quantised::<sesame_bart::BartForSequenceClassification>("bart/base-seqcls-single")),
        ("bart/base-qa", every_dense_layer_quantised::<sesame_bart::BartForQuestionAnswering>("bart/base-qa")),
    ];
    let float: Vec<&str> = cases.iter().filter(|(_, all)| !all).map(|(dir, _)| *dir).collect();
    assert!(float.is_empty(), "dense layers left in float after quantize: {float:?}");
}

/// A quantised layer owns its packed int8 weight: a clone shares it, and dropping the last
/// copy of the model frees it.
#[test]
fn a_quantised_model_s_int8_weights_are_freed_with_it() {
    let device = burn::tensor::Device::flex();
    let f = Fixture::open("bert/base-model");
    let quantised = int8::quantize(BertModel::from_pretrained(&f.dir, &device).unwrap().model);
    let query = &quantised.encoder.layers[0].attention.query;
    let packed = std::sync::Arc::downgrade(query.int8.packed().expect("the query projection is packed"));
    let copy = quantised.clone();
    drop(quantised);
    assert!(packed.upgrade().is_some(), "a clone keeps the packed weight");
    drop(copy);
    assert!(packed.upgrade().is_none(), "dropping the model frees the packed weight");
}
