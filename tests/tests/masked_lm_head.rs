//! The pre-training objective projects only the masked positions onto the vocabulary
//! ([`MaskedPositions`]); HF's `forward` with labels projects every token. Both must give the
//! same loss and the same gradient for every parameter: BERT (MLM + NSP, tied decoder),
//! RoBERTa (MLM only) and ALBERT (factorised embeddings, SOP), all without dropout, on every compiled backend,
//! including a batch that masks nothing.

use burn::optim::GradientsParams;
use burn::prelude::*;
use sesame_albert::{Albert, AlbertForPreTraining};
use sesame_bert::{Bert, BertForPreTraining};
use sesame_layers::{EncoderInput, OutputOptions, PreTrainingLabels};
use sesame_train::{MaskedLmObjective, MaskedPositions};
use sesame_roberta::{Roberta, RobertaForMaskedLM};
use sesame_tests::training::{hf_gradients, run_dir};
use sesame_tests::{devices, differing, values};
use sesame_train::pretraining::PretrainingFamily;

const VOCAB: usize = 300;
const TOLERANCE: f32 = 1e-5;

/// A batch of 3 × 12 tokens (the last row padded), and MLM labels on every fifth token, or on
/// none.
fn batch(device: &Device, masked: bool) -> (EncoderInput, Tensor<2, Int>, Tensor<1, Int>) {
    let (b, s) = (3, 12);
    let ids: Vec<i64> = (0..b * s).map(|i| 5 + (i as i64 * 37) % (VOCAB as i64 - 5)).collect();
    let keep: Vec<i64> = (0..b * s).map(|i| i64::from(i < 2 * s || i % s < 7)).collect();
    let labels: Vec<i64> = (0..b * s).map(|i| if masked && i % 5 == 2 && keep[i] == 1 { (i as i64 * 11) % VOCAB as i64 } else { -100 }).collect();
    let t = |v: Vec<i64>| Tensor::<2, Int>::from_data(TensorData::new(v, [b, s]), device);
    let input = EncoderInput::new(t(ids)).with_attention_mask(t(keep)).with_token_type_ids(t(vec![0; b * s]));
    (input, t(labels), Tensor::from_data(TensorData::new(vec![0i64, 1, 0], [3]), device))
}

/// The loss of a fresh `M` from `full` logits and from the masked positions agree, and so do their gradients.
fn same_loss_and_gradients<M: MaskedLmObjective>(
    name: &str,
    config: &M::Config,
    full: impl Fn(&M, EncoderInput, Tensor<2, Int>, Tensor<1, Int>) -> Tensor<1>,
) {
    for (backend, device) in devices() {
        let device = device.autodiff();
        let model = M::new_hf(config, &device);
        for masked in [true, false] {
            let (input, labels, sentence) = batch(&device, masked);
            let reference = full(&model, input.clone(), labels.clone(), sentence.clone());
            let out = model.objective(input, &MaskedPositions::of(&labels), sentence);
            let ours = out.loss;
            let (r, o) = (values(reference.clone())[0], values(ours.clone())[0]);
            assert!((r - o).abs() < TOLERANCE && r.is_finite(), "{name} {backend} masked={masked}: loss {o}, full logits {r}");
            if !masked {
                assert_eq!(values(out.mlm_loss)[0], 0.0, "{name} {backend}: a batch that masks nothing has no MLM loss");
            }
            let dir = run_dir(&format!("masked-head-{name}-{backend:?}-{masked}"));
            let grads = |loss: Tensor<1>| hf_gradients(&model, config, &GradientsParams::from_grads(loss.backward(), &model), &dir);
            let (reference, ours) = (grads(reference), grads(ours));
            let some_gradient = ours.values().any(|g| g.iter().any(|&x| x != 0.0));
            assert!(some_gradient || !masked, "{name} {backend}: no gradient at all");
            let failures = differing(&ours, &reference, TOLERANCE);
            assert!(failures.is_empty(), "{name} {backend} masked={masked}: gradients differ:\n  {}", failures.join("\n  "));
        }
    }
}

#[test]
fn bert_masked_positions_give_the_full_logits_loss_and_gradients() {
    let mut config = Bert::preset("tiny", VOCAB, 64, 0).unwrap();
    (config.hparams.hidden_dropout_prob, config.hparams.attention_probs_dropout_prob) = (0.0, 0.0);
    same_loss_and_gradients::<BertForPreTraining>("bert", &config, |m, input, mlm, sentence| {
        m.forward(input, Some(PreTrainingLabels { mlm, sentence }), OutputOptions::default()).loss.unwrap()
    });
}

#[test]
fn roberta_masked_positions_give_the_full_logits_loss_and_gradients() {
    let mut config = Roberta::preset("tiny", VOCAB, 64, 1).unwrap();
    (config.hparams.hidden_dropout_prob, config.hparams.attention_probs_dropout_prob) = (0.0, 0.0);
    same_loss_and_gradients::<RobertaForMaskedLM>("roberta", &config, |m, input, mlm, _| m.forward(input, Some(mlm), OutputOptions::default()).loss.unwrap());
}

#[test]
fn albert_masked_positions_give_the_full_logits_loss_and_gradients() {
    // Without the SOP head's dropout: a backend's random stream is shared by the tests running
    // beside this one (ndarray's is one global generator), so two draws could not be matched.
    let mut config = Albert::preset("tiny", VOCAB, 64, 0).unwrap();
    config.classifier_dropout_prob = 0.0;
    same_loss_and_gradients::<AlbertForPreTraining>("albert", &config, |m, input, mlm, sentence| {
        m.forward(input, Some(PreTrainingLabels { mlm, sentence }), OutputOptions::default()).loss.unwrap()
    });
}
