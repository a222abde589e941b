//! ALBERT's cross-layer sharing is real: parameters are counted once however deep the model
//! runs, the shared weights' gradients are sums over depths, and one training step moves each
//! shared weight once, exactly as PyTorch does. The paper's ablation (only attention or only
//! the feed-forward block shared) counts the other sub-block per depth, and its gradients are
//! those of the same model written out per depth, summed over the depths that share.

use std::collections::HashMap;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::prelude::*;
use sesame_albert::{AlbertConfig, AlbertForPreTraining, AlbertInput, AlbertModel, ParameterSharing};
use sesame_layers::{OutputOptions, PreTrainingLabels, PretrainedModel};
use sesame_tests::training::{first_step_failures, hf_gradients, run_dir, Fixed};
use sesame_tests::{devices, max_abs_diff, values, Fixture};
use sesame_train::StepOutput;

fn tiny(layers: usize, groups: usize) -> AlbertConfig {
    let mut config = AlbertConfig::preset("tiny", 100, 32, 0).unwrap();
    config.num_hidden_layers = layers;
    config.num_hidden_groups = groups;
    config
}

#[test]
fn twelve_shared_layers_have_the_parameters_of_one() {
    let device = devices()[0].1.clone();
    let params = |config: &AlbertConfig| AlbertModel::new(config, true, &device).num_params();
    let layer = tiny(1, 1).encoder().init_layer(&device).num_params();
    assert!(layer > 0);
    assert_eq!(params(&tiny(12, 1)), params(&tiny(1, 1)), "12 depths of one group");
    assert_eq!(params(&tiny(12, 2)), params(&tiny(1, 1)) + layer, "two groups hold two layers");
    assert_eq!(params(&tiny(12, 12)), params(&tiny(1, 1)) + 11 * layer, "a group per depth is BERT-like");
    let mut inner = tiny(12, 1);
    inner.inner_group_num = 3;
    assert_eq!(params(&inner), params(&tiny(1, 1)) + 2 * layer, "one group of three layers");
}

#[test]
fn depths_map_to_groups_as_in_transformers() {
    // HF: int(depth / (layers / groups)), with float division.
    let groups = |layers, groups| -> Vec<usize> { let c = tiny(layers, groups); (0..layers).map(|d| c.group_of(d)).collect() };
    assert_eq!(groups(3, 2), [0, 0, 1]);
    assert_eq!(groups(12, 1), [0; 12]);
    assert_eq!(groups(14, 6), [0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 5]);
    assert_eq!(groups(4, 4), [0, 1, 2, 3]);
}

/// One pre-training batch: input and MLM + SOP labels.
#[derive(Clone)]
struct SopBatch {
    input: AlbertInput,
    labels: PreTrainingLabels,
}

fn sop_step(model: &AlbertForPreTraining, batch: SopBatch) -> StepOutput {
    let out = model.forward(batch.input, Some(batch.labels), OutputOptions::default());
    StepOutput { loss: out.loss.expect("labels given"), metrics: vec![], tokens: 0, predictions: None }
}

#[test]
fn one_step_moves_the_shared_weights_once_as_pytorch_does() {
    // One layer shared over three depths, dropout 0: loss, every gradient (the shared layer's
    // summed over depths) and every parameter after one clipped AdamW step match PyTorch.
    let f = Fixture::open("train/albert-first-step");
    for (backend, device) in devices() {
        let train = device.clone().autodiff();
        let loaded = AlbertForPreTraining::from_pretrained(&f.dir, &train).unwrap();
        assert_eq!((loaded.config.num_hidden_layers, loaded.config.num_hidden_groups), (3, 1));
        let input = AlbertInput::new(f.int("input.input_ids", &train))
            .with_attention_mask(f.int("input.attention_mask", &train))
            .with_token_type_ids(f.int("input.token_type_ids", &train));
        let labels = PreTrainingLabels { mlm: f.int("label.labels", &train), sentence: f.int("label.sentence_order_label", &train) };
        let task = Fixed { batch: SopBatch { input, labels }, step: sop_step };
        let failures = first_step_failures(&f, &task, loaded.model, &loaded.config, &format!("albert-{backend}"));
        assert!(failures.is_empty(), "{backend}:\n  {}", failures.join("\n  "));
    }
}

fn shared(mut config: AlbertConfig, sharing: ParameterSharing) -> AlbertConfig {
    config.parameter_sharing = sharing;
    config
}

#[test]
fn sharing_only_attention_or_only_feed_forward_gives_each_depth_the_other_block() {
    let device = devices()[0].1.clone();
    let params = |config: &AlbertConfig| AlbertModel::new(config, true, &device).num_params();
    let layer = tiny(1, 1).encoder().init_layer(&device);
    let attention = layer.attention.num_params() + layer.attention_norm.num_params();
    let feed_forward = layer.feed_forward.num_params() + layer.output_norm.num_params();
    let (one, layer) = (params(&tiny(1, 1)), layer.num_params());
    assert_eq!(attention + feed_forward, layer);
    assert!(attention > 0 && feed_forward > 0);
    for (sharing, own) in [(ParameterSharing::Attention, feed_forward), (ParameterSharing::FeedForward, attention)] {
        assert_eq!(params(&shared(tiny(12, 1), sharing)), one + 11 * own, "{sharing:?}: one group");
        assert_eq!(params(&shared(tiny(12, 2), sharing)), one + layer + 10 * own, "{sharing:?}: two groups");
        assert_eq!(params(&shared(tiny(12, 12), sharing)), params(&tiny(12, 12)), "{sharing:?}: nothing to share");
        let mut inner = shared(tiny(12, 1), sharing);
        inner.inner_group_num = 2;
        assert_eq!(params(&inner), one + layer + 11 * 2 * own, "{sharing:?}: a group of two layers");
    }
}

/// A fixed pre-training batch: two sequences, one padded, a few masked positions.
fn sop_batch(device: &Device) -> SopBatch {
    let ints = |v: Vec<i64>, shape: [usize; 2]| Tensor::<2, Int>::from_data(TensorData::new(v, shape), device);
    let ids = vec![2, 17, 45, 4, 81, 3, 33, 3, 2, 9, 4, 56, 3, 0, 0, 0];
    let types = vec![0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    let mask = vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0];
    let mut mlm = vec![-100; 16];
    (mlm[3], mlm[6], mlm[11]) = (70, 33, 12);
    SopBatch {
        input: AlbertInput::new(ints(ids, [2, 8])).with_token_type_ids(ints(types, [2, 8])).with_attention_mask(ints(mask, [2, 8])),
        labels: PreTrainingLabels { mlm: ints(mlm, [2, 8]), sentence: Tensor::from_data(TensorData::new(vec![0i64, 1], [2]), device) },
    }
}

/// The layer index in an HF ALBERT tensor name, and the name with that index replaced by `*`.
fn depth_of(name: &str) -> Option<(usize, String)> {
    let rest = name.split_once("albert_layer_groups.")?.1;
    let (depth, tail) = rest.split_once('.')?;
    Some((depth.parse().ok()?, name.replace(&format!("albert_layer_groups.{depth}.{tail}"), &format!("albert_layer_groups.*.{tail}"))))
}

#[test]
fn partially_shared_gradients_are_the_per_depth_model_s_summed_over_sharing_depths() {
    // An identity of the model's wiring and of autodiff (shared by every backend), checked on
    // the first backend; every backend's gradients meet PyTorch's in
    // `one_step_moves_the_shared_weights_once_as_pytorch_does`.
    for (backend, device) in devices().into_iter().take(1) {
        let train = device.clone().autodiff();
        for sharing in [ParameterSharing::Attention, ParameterSharing::FeedForward] {
            let mut config = shared(tiny(3, 1), sharing);
            // Dropout off everywhere (the preset leaves it on before the SOP classifier).
            (config.initializer_range, config.classifier_dropout_prob) = (0.2, 0.0);
            let model = AlbertForPreTraining::new_hf(&config, &train);
            let dir = run_dir(&format!("albert-{sharing:?}-{backend}"));
            model.save_pretrained(&config, &dir).unwrap();
            // The saved form: a group per depth, whole-layer sharing, as transformers has it.
            let per_depth = AlbertForPreTraining::from_pretrained(&dir, &train).unwrap();
            assert!(per_depth.report.initialized.is_empty() && per_depth.report.unused.is_empty(), "{}", per_depth.report);
            assert_eq!((per_depth.config.num_hidden_groups, per_depth.config.parameter_sharing), (3, ParameterSharing::All));

            let gradients = |model: &AlbertForPreTraining, config: &AlbertConfig, name: &str| -> (f32, HashMap<String, Vec<f32>>) {
                let loss = sop_step(model, sop_batch(&train)).loss;
                let value = values(loss.clone())[0];
                let grads = GradientsParams::from_grads(loss.backward(), model);
                (value, hf_gradients(model, config, &grads, &dir.join(name)))
            };
            let (loss, ours) = gradients(&model, &config, "grads-shared");
            let (loss_per_depth, theirs) = gradients(&per_depth.model, &per_depth.config, "grads-per-depth");
            assert!((loss - loss_per_depth).abs() < 1e-5, "{backend} {sharing:?}: loss {loss} vs {loss_per_depth} per depth");
            assert_eq!(ours.len(), theirs.len());
            let is_shared = |name: &str| name.contains(".attention.") == (sharing == ParameterSharing::Attention);
            let mut summed: HashMap<String, Vec<f32>> = HashMap::new();
            for (name, grad) in &theirs {
                if let Some((_, pattern)) = depth_of(name).filter(|_| is_shared(name)) {
                    let sum = summed.entry(pattern).or_insert_with(|| vec![0.0; grad.len()]);
                    sum.iter_mut().zip(grad).for_each(|(s, g)| *s += g);
                }
            }
            assert!(!summed.is_empty());
            for (name, grad) in &ours {
                let expected = match depth_of(name).filter(|_| is_shared(name)) {
                    Some((_, pattern)) => &summed[&pattern],
                    None => &theirs[name],
                };
                let diff = max_abs_diff(grad, expected);
                assert!(diff < 1e-5, "{backend} {sharing:?}: gradient of {name} differs by {diff:e}");
                assert!(grad.iter().any(|g| *g != 0.0), "{backend} {sharing:?}: no gradient reaches {name}");
            }
        }
    }
}
