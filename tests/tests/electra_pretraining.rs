//! ELECTRA's joint pre-training: the first step of generator + discriminator equals
//! PyTorch's (loss, every gradient, the shared embeddings' included, every parameter after a
//! clipped AdamW step), the replaced-token labels follow the samples, and a tiny pair learns
//! from the shipped corpus.

use burn::prelude::*;
use sesame_electra::{ElectraConfig, ElectraPreTrainingPair};
use sesame_layers::PretrainedModel;
use sesame_tests::training::{first_step_failures, Fixed};
use sesame_tests::{devices, values, Fixture};
use sesame_train::{PretrainingBatch, StepOutput};

/// A masked batch and the generator's samples.
type Sampled = (PretrainingBatch, Tensor<2, Int>);

fn fixture_batch(f: &Fixture, device: &Device) -> Sampled {
    let batch = sesame_tests::training::fixture_pretraining_batch(f, device, Tensor::zeros([4], device));
    (batch, f.int("label.samples", device))
}

fn joint_step(model: &ElectraPreTrainingPair, (batch, samples): Sampled) -> StepOutput {
    StepOutput { loss: model.objective(&batch, Some(samples)).loss, metrics: vec![], tokens: 0, predictions: None }
}

#[test]
fn the_joint_first_step_matches_pytorch() {
    let f = Fixture::open("train/electra-first-step");
    for (backend, device) in devices() {
        let train = device.clone().autodiff();
        let loaded = ElectraPreTrainingPair::from_pretrained(&f.dir, &train).unwrap();
        assert!(loaded.report.initialized.is_empty() && loaded.report.unused.is_empty(), "{}", loaded.report);
        let batch = fixture_batch(&f, &train);

        let out = loaded.model.objective(&batch.0, Some(batch.1.clone()));
        let replaced: Vec<i64> = out.replaced.to_data().convert::<i64>().try_to_vec().unwrap();
        assert_eq!(replaced, f.get("label.replaced").i64, "{backend}: a sample equal to the original is labelled original");
        for (name, ours) in [("mlm_loss", out.mlm_loss), ("rtd_loss", out.rtd_loss)] {
            let (ours, theirs) = (values(ours)[0], f.get(&format!("output.{name}")).f32[0]);
            assert!((ours - theirs).abs() < 1e-4, "{backend}: {name} {ours}, PyTorch {theirs}");
        }

        let task = Fixed { batch, step: joint_step };
        let failures = first_step_failures(&f, &task, loaded.model, &loaded.config, &format!("electra-{backend}"));
        assert!(failures.is_empty(), "{backend}:\n  {}", failures.join("\n  "));
    }
}

#[test]
fn the_generator_is_a_quarter_as_wide_and_as_deep() {
    let config = ElectraConfig::preset("small", 1000, 128, 0).unwrap();
    let generator = config.generator();
    assert_eq!((config.hidden_size, config.embedding_size), (512, 128));
    assert_eq!((generator.hidden_size, generator.num_attention_heads, generator.intermediate_size), (128, 2, 512));
    assert_eq!((generator.num_hidden_layers, generator.embedding_size), (config.num_hidden_layers, config.embedding_size));
    let mut bad = config.clone();
    bad.generator_size = Some(1.5);
    assert!(bad.validate().unwrap_err().to_string().contains("generator_size"));
}
