//! ALBERT's cross-layer sharing is real: parameters are counted once however deep the model
//! runs, the shared weights' gradients are sums over depths, and one training step moves each
//! shared weight once, exactly as PyTorch does.

use burn::module::Module;
use sesame_albert::{AlbertConfig, AlbertForPreTraining, AlbertInput, AlbertModel};
use sesame_layers::{OutputOptions, PreTrainingLabels, PretrainedModel};
use sesame_tests::training::{first_step_failures, Fixed};
use sesame_tests::{devices, Fixture};
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
    StepOutput { loss: out.loss.expect("labels given"), metrics: vec![], tokens: 0 }
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
