//! FastBERT's early exit on every encoder family, on every backend: a fixture classifier given
//! (fresh) exit classifiers still gives transformers' logits; at speed 0 every row runs to the
//! top and gets them; at speed 1 every row stops at layer 1 with that classifier's logits; at a
//! speed between, rows of one padded batch stop independently, each with the logits of the
//! layer the entropy rule picks; the classifiers save and load back; the self-distillation
//! loss is the sum of the KL divergences.

use burn::prelude::*;
use sesame_albert::AlbertForSequenceClassification;
use sesame_bert::BertForSequenceClassification;
use sesame_electra::ElectraForSequenceClassification;
use sesame_layers::early_exit::{normalized_entropy, self_distillation_loss};
use sesame_layers::{OutputOptions, PretrainedModel};
use sesame_roberta::RobertaForSequenceClassification;
use sesame_tests::parity::input;
use sesame_tests::training::run_dir;
use sesame_tests::{devices, values, Checker, Fixture, TOLERANCE};

/// The fixture `{family}/{shape}-seqcls-single` copied with `sesame_early_exit` in its config.
fn with_exits(family: &str, shape: &str) -> (Fixture, sesame_tests::Scratch) {
    let f = Fixture::open(&format!("{family}/{shape}-seqcls-single"));
    let dir = sesame_tests::Scratch::copy_of(&format!("{family}/{shape}-seqcls-single"), &format!("early-exit-{family}-{shape}"));
    dir.edit_config(|config| config["sesame_early_exit"] = serde_json::json!({ "hidden_size": 16, "num_attention_heads": 2 }));
    (f, dir)
}

fn check<M>(family: &str, shape: &str)
where
    M: PretrainedModel + sesame_layers::TaskModel<Output = sesame_layers::ClassifierLayers>,
    M: EarlyExit,
{
    let (f, dir) = with_exits(family, shape);
    for (backend, device) in devices() {
        let context = format!("{family} {shape} on {backend}");
        let mut c = Checker::default();
        device.seed(7);
        let loaded = M::from_pretrained(&dir, &device).unwrap();
        assert!(loaded.report.initialized.iter().all(|n| n.contains("early_exit.")) && !loaded.report.initialized.is_empty(), "{context}: {}", loaded.report);
        // Fresh classifiers (drawn as HF draws weights, N(0, 0.02)) give logits near 1e-4, so
        // every row's entropy is 1 to within 1e-7: scaled up,
        // the rows' entropies spread.
        let (model, config) = (loaded.model.sharpened(), loaded.config);
        let x = input(&f, &device);
        let rows = x.batch_size();
        c.close("logits with exit classifiers present", model.forward_logits(x.clone()), f.get("output.logits"), TOLERANCE);
        let layers = model.exit_logits(x.clone()).unwrap();
        c.close("the last exit's logits", layers.last().unwrap().clone(), f.get("output.logits"), TOLERANCE);

        let full = model.classify_early(x.clone(), 0.0).unwrap();
        c.close("speed 0", full.logits, f.get("output.logits"), TOLERANCE);
        assert_eq!(full.exit_layers, vec![layers.len(); rows], "{context}: speed 0");
        let first = model.classify_early(x.clone(), 1.0).unwrap();
        assert_eq!(first.exit_layers, vec![1; rows], "{context}: speed 1");
        assert!(sesame_tests::max_abs_diff(&values(first.logits), &values(layers[0].clone())) < TOLERANCE, "{context}: speed 1 logits");

        // A speed between the rows' entropies at layer 1: some stop there, the rest go on, in
        // a batch whose rows are padded to different lengths.
        let entropy = values(normalized_entropy(layers[0].clone()));
        let mut sorted = entropy.clone();
        sorted.sort_by(f32::total_cmp);
        let speed = ((sorted[rows / 2 - 1] + sorted[rows / 2]) / 2.0) as f64;
        let mixed = model.classify_early(x.clone(), speed).unwrap();
        let per_layer: Vec<Vec<f32>> = layers.iter().map(|l| values(l.clone())).collect();
        let got = values(mixed.logits);
        let n = got.len() / rows;
        for row in 0..rows {
            let stop = (0..layers.len() - 1).find(|&l| values(normalized_entropy(layers[l].clone().slice([row..row + 1])))[0] < speed as f32 || speed >= 1.0).unwrap_or(layers.len() - 1);
            assert_eq!(mixed.exit_layers[row], stop + 1, "{context}: row {row} at speed {speed} (entropies {entropy:?})");
            let want = &per_layer[stop][row * n..(row + 1) * n];
            assert!(sesame_tests::max_abs_diff(&got[row * n..(row + 1) * n], want) < TOLERANCE, "{context}: row {row}'s logits");
        }
        assert!(mixed.exit_layers.contains(&1) && mixed.exit_layers.iter().any(|&l| l > 1), "{context}: {:?} at speed {speed}, entropies {entropy:?}", mixed.exit_layers);

        // Saved and loaded back: every tensor found, the same exits.
        let saved = run_dir(&format!("early-exit-saved-{family}-{shape}-{backend}"));
        model.save_pretrained(&config, &saved).unwrap();
        let back = M::from_pretrained(&saved, &device).unwrap();
        assert!(back.report.initialized.is_empty() && back.report.unused.is_empty(), "{context}: {}", back.report);
        let again = back.model.exit_logits(x.clone()).unwrap();
        for (l, (a, b)) in layers.iter().zip(again).enumerate() {
            assert!(sesame_tests::max_abs_diff(&values(a.clone()), &values(b)) < 1e-6, "{context}: layer {}'s exit after saving", l + 1);
        }
        c.finish(&context);
    }
}

/// What the test needs of a classifier beyond the traits: its default forward.
trait EarlyExit: sesame_layers::TaskModel<Output = sesame_layers::ClassifierLayers> {
    fn forward_logits(&self, input: sesame_layers::EncoderInput) -> Tensor<2>;
    fn sharpened(self) -> Self;
}

impl<B: sesame_layers::Backbone, H: sesame_layers::SequenceHead<B>> EarlyExit for sesame_layers::ForSequenceClassification<B, H>
where
    Self: sesame_layers::TaskModel<Output = sesame_layers::ClassifierLayers> + PretrainedModel<Config = B::Config>,
{
    fn forward_logits(&self, input: sesame_layers::EncoderInput) -> Tensor<2> {
        self.forward(input, None, OutputOptions::default()).logits
    }

    fn sharpened(mut self) -> Self {
        for exit in &mut self.early_exit.as_mut().unwrap().classifiers {
            let w = exit.out_proj.weight.val();
            exit.out_proj.weight = burn::module::Param::from_tensor(w.mul_scalar(3.0e4));
        }
        self
    }

}

#[test]
fn bert_rows_exit_early_independently() {
    check::<BertForSequenceClassification>("bert", "base");
}

#[test]
fn roberta_rows_exit_early_independently() {
    check::<RobertaForSequenceClassification>("roberta", "base");
}

#[test]
fn electra_rows_exit_early_independently() {
    check::<ElectraForSequenceClassification>("electra", "base");
}

#[test]
fn albert_with_groups_of_two_layers_exits_by_depth() {
    check::<AlbertForSequenceClassification>("albert", "grouped");
}

#[test]
fn the_self_distillation_loss_is_the_sum_of_the_students_kl_divergences() {
    let device = Device::default();
    let t = |rows: &[[f32; 3]]| Tensor::<2>::from_data(TensorData::new(rows.concat(), [rows.len(), 3]), &device);
    let teacher = [[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]];
    let students = [[[0.0, 0.0, 0.0], [1.0, -1.0, 0.0]], [[3.0, 1.0, 0.0], [0.0, 0.0, 0.0]]];
    let mut exits: Vec<Tensor<2>> = students.iter().map(|s| t(s)).collect();
    exits.push(t(&teacher));
    let got = values(self_distillation_loss(&exits))[0] as f64;
    let softmax = |x: &[f32; 3]| {
        let z: f64 = x.iter().map(|&v| (v as f64).exp()).sum();
        x.map(|v| (v as f64).exp() / z)
    };
    let mut want = 0.0;
    for s in &students {
        for (row, tr) in s.iter().zip(&teacher) {
            let (p, q) = (softmax(tr), softmax(row));
            want += (0..3).map(|i| p[i] * (p[i] / q[i]).ln()).sum::<f64>() / 2.0;
        }
    }
    assert!((got - want).abs() < 1e-5, "{got} against {want}");
    // Uniform logits have entropy 1; a sure one 0.
    let e = values(normalized_entropy(t(&[[0.0, 0.0, 0.0], [100.0, 0.0, 0.0]])));
    assert!((e[0] - 1.0).abs() < 1e-6 && e[1].abs() < 1e-6, "{e:?}");
}
