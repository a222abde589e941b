//! The parity checks of every task model, written once for every family: each loads a fixture
//! directory made by `scripts/make_fixtures.py`, runs the same inputs and compares every
//! hidden state, attention map, logit and loss with transformers' on every compiled backend.

use burn::prelude::*;
use sesame_layers::{
    Backbone, EncoderInput, EncoderOutput, ForMaskedLM, ForMultipleChoice, ForPreTraining, ForQuestionAnswering, ForSequenceClassification, ForTokenClassification, OutputOptions, PreTrainingLabels, PretrainedModel, SentenceHead, SequenceHead, SequenceLabels, TaskModel,
};

use crate::{devices, max_abs_diff, values, Checker, Fixture, TOLERANCE};

/// The fixture's inputs (token types when the fixture has them).
pub fn input(f: &Fixture, device: &Device) -> EncoderInput {
    let mut input = EncoderInput::new(f.int("input.input_ids", device)).with_attention_mask(f.int("input.attention_mask", device));
    if f.has("input.token_type_ids") {
        input = input.with_token_type_ids(f.int("input.token_type_ids", device));
    }
    input
}

/// Every hidden state and attention map against the reference, when `options` asked for them
/// (the default options must return neither).
pub fn check_encoder(c: &mut Checker, f: &Fixture, out: &EncoderOutput, options: OutputOptions) {
    if !options.hidden_states {
        if out.hidden_states.is_some() || out.attentions.is_some() {
            c.fail("hidden states or attentions returned although not asked for".into());
        }
        return;
    }
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

/// The loss against the reference.
pub fn check_loss(c: &mut Checker, f: &Fixture, loss: Option<Tensor<1>>) {
    match loss {
        Some(l) => c.close("loss", l, f.get("output.loss"), TOLERANCE),
        None => c.fail("no loss although labels were given".into()),
    }
}

/// Run `check` on fixture `family/{shape}-{kind}` of every shape on every backend, once with
/// the default output options (fused attention) and once with every output requested
/// (materialised attention probabilities).
pub fn each(family: &str, shapes: &[&str], kind: &str, check: impl Fn(&Fixture, &Device, &mut Checker, OutputOptions)) {
    for shape in shapes {
        let name = format!("{family}/{shape}-{kind}");
        let f = Fixture::open(&name);
        for (backend, device) in devices() {
            for (options, what) in [(OutputOptions::default(), "default outputs"), (OutputOptions::all(), "all outputs")] {
                let mut c = Checker::default();
                check(&f, &device, &mut c, options);
                c.finish(&format!("{name} on {backend}, {what}"));
            }
        }
    }
}

/// The base model (`{shape}-model`): last state, pooled output, all states and attentions.
pub fn base_model<B: Backbone>(family: &str, shapes: &[&str]) {
    each(family, shapes, "model", |f, device, c, options| {
        let model = <B as PretrainedModel>::from_pretrained(&f.dir, device).unwrap().model;
        let out = Backbone::forward(&model, input(f, device), options);
        c.close("last_hidden_state", out.last_hidden_state(), f.get("output.last_hidden_state"), TOLERANCE);
        match out.pooler_output.clone() {
            Some(pooled) => c.close("pooler_output", pooled, f.get("output.pooler_output"), TOLERANCE),
            None if f.has("output.pooler_output") => c.fail("no pooler output, the reference has one".into()),
            None => {}
        }
        check_encoder(c, f, &out.encoder, options);
    });
}

/// The base model run over its tokens alone (`OutputOptions::tokens_only`, padding packed
/// out of the dense blocks), with default and with all outputs: at every token, each layer's
/// state and each attention row equal transformers' (which computes the padding as well); the
/// layers' states at padding positions are zeros. The fixtures' batches hold padding.
pub fn base_model_tokens_only<B: Backbone>(family: &str, shapes: &[&str]) {
    for shape in shapes {
        let name = format!("{family}/{shape}-model");
        let f = Fixture::open(&name);
        let mask = &f.get("input.attention_mask").i64;
        assert!(mask.contains(&0), "{name}: the fixture's batch must hold padding");
        let at_tokens = |values: &[f32], shape: &[usize], dim: usize| at_tokens(values, shape, dim, mask);
        let check = |c: &mut Checker, what: &str, ours: Vec<f32>, shape: &[usize], reference: &crate::Array, dim: usize| {
            let ours_at_tokens = at_tokens(&ours, shape, dim);
            c.close_values(what, max_abs_diff(&ours_at_tokens, &at_tokens(&reference.f32, &reference.shape, dim)));
            // The layers' states (position `dim` 1) must be zeros at the padding, not merely
            // masked here.
            if dim == 1 && ours_at_tokens != ours {
                c.fail(format!("{what}: not zero at the padding"));
            }
        };
        for (backend, device) in devices() {
            for (options, what) in [(OutputOptions::default(), "default outputs"), (OutputOptions::all(), "all outputs")] {
                let model = <B as PretrainedModel>::from_pretrained(&f.dir, &device).unwrap().model;
                let out = Backbone::forward(&model, input(&f, &device), OutputOptions { tokens_only: true, ..options });
                let mut c = Checker::default();
                let last = out.last_hidden_state();
                let dims = last.dims().to_vec();
                check(&mut c, "last_hidden_state", values(last), &dims, f.get("output.last_hidden_state"), 1);
                if let Some(pooled) = out.pooler_output.clone() {
                    c.close("pooler_output", pooled, f.get("output.pooler_output"), TOLERANCE);
                }
                // The embeddings (state 0) are the padded run's; each layer's is packed.
                for (i, h) in out.encoder.hidden_states.iter().flatten().enumerate() {
                    let dims = h.dims().to_vec();
                    let reference = f.get(&format!("output.hidden_states.{i}"));
                    if i == 0 {
                        c.close("hidden_states.0", h.clone(), reference, TOLERANCE);
                    } else {
                        check(&mut c, &format!("hidden_states.{i}"), values(h.clone()), &dims, reference, 1);
                    }
                }
                for (i, a) in out.encoder.attentions.iter().flatten().enumerate() {
                    let dims = a.dims().to_vec();
                    check(&mut c, &format!("attentions.{i}"), values(a.clone()), &dims, f.get(&format!("output.attentions.{i}")), 2);
                }
                if options.hidden_states && out.encoder.hidden_states.as_ref().map(Vec::len) != Some(f.count("output.hidden_states")) {
                    c.fail("not every hidden state was returned".into());
                }
                c.finish(&format!("{name} over its tokens on {backend}, {what}"));
            }
        }
    }
}

/// `values` of a tensor of `shape` with every entry outside a token zeroed: its position is
/// index `dim`, its row index 0, and `mask` `[batch, seq]` says which are tokens.
fn at_tokens(values: &[f32], shape: &[usize], dim: usize, mask: &[i64]) -> Vec<f32> {
    let seq = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let outer: usize = shape[1..dim].iter().product();
    values.iter().enumerate().map(|(i, &v)| if mask[i / (outer * seq * inner) * seq + (i / inner) % seq] != 0 { v } else { 0.0 }).collect()
}

/// MLM + sentence-level head (`{shape}-pretraining`); the reference names the sentence logits
/// and labels as the family's sentence-pair head does ([`Backbone::SENTENCE_HEAD`]).
pub fn pretraining<B: Backbone>(family: &str, shapes: &[&str]) {
    let SentenceHead { logits: sentence_logits, labels: sentence_labels } = const { SentenceHead::of::<B>() };
    each(family, shapes, "pretraining", |f, device, c, options| {
        let model = ForPreTraining::<B>::from_pretrained(&f.dir, device).unwrap().model;
        let labels = PreTrainingLabels {
            mlm: f.int("label.labels", device),
            sentence: f.int(&format!("label.{sentence_labels}"), device),
        };
        let out = model.forward(input(f, device), Some(labels), options);
        c.close("prediction_logits", out.prediction_logits, f.get("output.prediction_logits"), TOLERANCE);
        c.close(sentence_logits, out.sentence_logits, f.get(&format!("output.{sentence_logits}")), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder, options);
    });
}

/// The MLM head (`{shape}-masked-lm`).
pub fn masked_lm<B: Backbone>(family: &str, shapes: &[&str]) {
    each(family, shapes, "masked-lm", |f, device, c, options| {
        let model = ForMaskedLM::<B>::from_pretrained(&f.dir, device).unwrap().model;
        let out = model.forward(input(f, device), Some(f.int("label.labels", device)), options);
        c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder, options);
    });
}

/// Sequence classification for each HF problem type (`{shape}-seqcls-*`).
pub fn sequence_classification<B: Backbone, H: SequenceHead<B>>(family: &str, shapes: &[&str]) {
    for (kind, problem) in [("seqcls-single", 0), ("seqcls-regression", 1), ("seqcls-multilabel", 2)] {
        each(family, shapes, kind, |f, device, c, options| {
            let model = ForSequenceClassification::<B, H>::from_pretrained(&f.dir, device).unwrap().model;
            let labels = match problem {
                0 => SequenceLabels::SingleLabel(f.int("label.labels", device)),
                1 => SequenceLabels::Regression(f.float("label.labels", device)),
                _ => SequenceLabels::MultiLabel(f.float("label.labels", device)),
            };
            let out = model.forward(input(f, device), Some(labels), options);
            c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
            check_loss(c, f, out.loss);
            check_encoder(c, f, &out.encoder, options);
            // What the pipelines and fine-tuning call: over the tokens alone where the head
            // reads the first position only.
            c.close("classify's logits", TaskModel::run(&model, input(f, device), OutputOptions::logits_only()).logits, f.get("output.logits"), TOLERANCE);
        });
    }
}

/// Token classification (`{shape}-token-classification`).
pub fn token_classification<B: Backbone>(family: &str, shapes: &[&str]) {
    each(family, shapes, "token-classification", |f, device, c, options| {
        let model = ForTokenClassification::<B>::from_pretrained(&f.dir, device).unwrap().model;
        let out = model.forward(input(f, device), Some(f.int("label.labels", device)), options);
        c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder, options);
        // What the pipelines and fine-tuning call, over the tokens alone: equal at every token.
        let tagged = TaskModel::run(&model, input(f, device), OutputOptions::logits_only());
        let (dims, reference, mask) = (tagged.dims().to_vec(), f.get("output.logits"), &f.get("input.attention_mask").i64);
        let diff = max_abs_diff(&at_tokens(&values(tagged), &dims, 1, mask), &at_tokens(&reference.f32, &reference.shape, 1, mask));
        c.close_values("tag's logits at the tokens", diff);
    });
}

/// Extractive QA (`{shape}-qa`), one start position past the sequence.
pub fn question_answering<B: Backbone>(family: &str, shapes: &[&str]) {
    each(family, shapes, "qa", |f, device, c, options| {
        let model = ForQuestionAnswering::<B>::from_pretrained(&f.dir, device).unwrap().model;
        let positions = (f.int("label.start_positions", device), f.int("label.end_positions", device));
        let out = model.forward(input(f, device), Some(positions), options);
        c.close("start_logits", out.start_logits, f.get("output.start_logits"), TOLERANCE);
        c.close("end_logits", out.end_logits, f.get("output.end_logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder, options);
    });
}

/// Multiple choice (`{shape}-multiple-choice`): inputs `[batch, choices, seq]` flattened.
pub fn multiple_choice<B: Backbone, H: SequenceHead<B>>(family: &str, shapes: &[&str]) {
    each(family, shapes, "multiple-choice", |f, device, c, options| {
        let model = ForMultipleChoice::<B, H>::from_pretrained(&f.dir, device).unwrap().model;
        // The fixture's `[batch, choices, seq]` inputs are read flattened to `[batch * choices, seq]`.
        let choices = f.get("input.input_ids").shape[1];
        let out = model.forward(input(f, device), choices, Some(f.int("label.labels", device)), options);
        c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
        check_loss(c, f, out.loss);
        check_encoder(c, f, &out.encoder, options);
    });
}

/// Save the model of `fixture` with `save_pretrained`, load the directory in transformers as
/// `M::architecture()` (strictly: no missing, unexpected or mismatched tensors), run both on the
/// fixture's inputs and compare `output.{key}` with what `ours` returns. Skipped (with a note)
/// without `SESAME_PYTHON`, except under CI.
pub fn transformers_reproduces<M: PretrainedModel>(fixture: &str, key: &str, ours: impl Fn(&M, EncoderInput) -> Tensor<3>) {
    let device = devices()[0].1.clone();
    let loaded = M::from_pretrained(&Fixture::open(fixture).dir, &device).unwrap();
    transformers_reproduces_model(&loaded.model, &loaded.config, fixture, key, ours);
}

/// [`transformers_reproduces`] for a model built by the test (on the first backend), run on the
/// inputs of `fixture`.
pub fn transformers_reproduces_model<M: PretrainedModel>(
    model: &M,
    config: &M::Config,
    fixture: &str,
    key: &str,
    ours: impl Fn(&M, EncoderInput) -> Tensor<3>,
) {
    let Some(python) = crate::python() else { return };
    let device = devices()[0].1.clone();
    let f = Fixture::open(fixture);
    let arch = M::architecture();
    // One directory per call: tests run in parallel and may save models of the same fixture.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = crate::Scratch::path(&format!("hf-{call}-{}", fixture.replace('/', "-")));
    model.save_pretrained(config, &dir).unwrap();
    let ours = crate::values(ours(model, input(&f, &device)));
    let out = dir.join("hf_out.safetensors");
    if let Err(e) = crate::hf_forward(&python, &dir, &arch, &f.dir.join("io.safetensors"), &out) {
        panic!("{arch}: transformers failed on the saved model: {e}");
    }
    let theirs = crate::read_f32_tensors(&out).remove(&format!("output.{key}")).expect("transformers wrote the output");
    let diff = crate::max_abs_diff(&ours, &theirs);
    assert!(diff <= TOLERANCE, "{arch}: transformers and Sesame differ by {diff:e}");
    let _ = std::fs::remove_dir_all(&dir);
}
