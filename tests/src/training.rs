//! Helpers of the training tests: a task that trains on one fixed batch, and the first
//! optimizer step compared with PyTorch's (`fixtures/train/*-first-step`).

use std::collections::HashMap;
use std::path::Path;

use burn::module::{Module, ModuleMapper, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use sesame_layers::PretrainedModel;
use sesame_train::clip::global_norm;
use sesame_train::{Decay, StepOutput, TrainConfig, TrainTask, Trainer};

use crate::{differing, read_f32_tensors, values, Fixture};

/// A fresh run directory under the system temp dir (not created), removed when the test
/// passes.
pub fn run_dir(name: &str) -> crate::Scratch {
    crate::Scratch::path(&format!("train-{name}"))
}

/// A task that always trains on one fixed batch, with `step` as its loss.
pub struct Fixed<M, B> {
    /// The batch.
    pub batch: B,
    /// Loss and metrics of a model on the batch.
    pub step: fn(&M, B) -> StepOutput,
}

impl<M: Module, B: Clone> TrainTask for Fixed<M, B> {
    type Model = M;
    type Batch = B;
    type State = ();
    fn train_batch(&self, _: u64, _: &Device) -> B {
        self.batch.clone()
    }
    fn held_out_batches(&self, _: &Device) -> Vec<B> {
        vec![]
    }
    fn step(&self, model: &M, batch: B) -> StepOutput {
        (self.step)(model, batch)
    }
}

/// The masked batch of a first-step fixture (`input.*`, MLM labels `label.labels`) with
/// sentence labels `sentence` `[batch]`.
pub fn fixture_pretraining_batch(f: &Fixture, device: &Device, sentence: Tensor<1, Int>) -> sesame_train::PretrainingBatch {
    let input = sesame_layers::EncoderInput::new(f.int("input.input_ids", device))
        .with_attention_mask(f.int("input.attention_mask", device))
        .with_token_type_ids(f.int("input.token_type_ids", device));
    sesame_train::PretrainingBatch::from_tensors(input, f.int("label.labels", device), sentence, 0)
}

/// Replaces every parameter by its gradient, so a model can be saved as its gradients.
struct ToGrads<'a>(&'a GradientsParams);

impl ModuleMapper for ToGrads<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let grad = self.0.get::<D>(param.id).unwrap_or_else(|| param.val().zeros_like());
        Param::initialized(param.id, grad)
    }
}

/// A model's gradients by HF name (the model saved with every parameter replaced by its
/// gradient; a parameter without one counts as zero).
pub fn hf_gradients<M: PretrainedModel>(model: &M, config: &M::Config, grads: &GradientsParams, dir: &Path) -> HashMap<String, Vec<f32>> {
    hf_tensors(&model.clone().map(&mut ToGrads(grads)), config, dir)
}

/// HF-named tensors of a model, via `save_pretrained`; a model saved with a second one in
/// `generator/` (ELECTRA's pre-training pair) adds that one's under `generator.`.
pub fn hf_tensors<M: PretrainedModel>(model: &M, config: &M::Config, dir: &Path) -> HashMap<String, Vec<f32>> {
    model.save_pretrained(config, dir).unwrap();
    let mut tensors = read_f32_tensors(&dir.join("model.safetensors"));
    let generator = dir.join("generator/model.safetensors");
    if generator.is_file() {
        tensors.extend(read_f32_tensors(&generator).into_iter().map(|(k, v)| (format!("generator.{k}"), v)));
    }
    tensors
}

/// The bytes of every tensor of `model` saved in HF layout in `dir` (inference mode), sorted by
/// name: what two runs must agree on bit for bit.
pub fn saved_bytes<M: PretrainedModel>(model: &M, config: &M::Config, dir: &Path) -> Vec<(String, Vec<u8>)> {
    model.valid().save_pretrained(config, dir).unwrap();
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Vec<u8>)> = st.tensors().into_iter().map(|(n, v)| (n, v.data().to_vec())).collect();
    tensors.sort();
    tensors
}

/// The fixture's tensors under `prefix` (`grad.`, `after.`), by HF name.
pub fn reference(f: &Fixture, prefix: &str) -> HashMap<String, Vec<f32>> {
    f.io.iter().filter_map(|(k, a)| k.strip_prefix(prefix).map(|name| (name.to_string(), a.f32.clone()))).collect()
}

/// The optimiser of the first-step fixtures: one step, lr 1e-3, AdamW (eps 1e-6, decay 0.01),
/// global-norm clipping at 0.5.
pub fn first_step_config() -> TrainConfig {
    TrainConfig {
        steps: 1,
        lr: 1e-3,
        warmup: 0,
        decay: Decay::Constant,
        weight_decay: 0.01,
        epsilon: 1e-6,
        max_grad_norm: 0.5,
        eval_every: 0,
        checkpoint_every: 0,
        ..TrainConfig::default()
    }
}

/// Loss, gradient norm, every gradient and every parameter after one trainer step of `model`
/// on `task`'s (fixed) first batch against PyTorch's, by HF name; the failures, empty when all
/// agree.
pub fn first_step_failures<M: PretrainedModel + Send + Sync, T: TrainTask<Model = M> + Sync>(
    f: &Fixture,
    task: &T,
    model: M,
    config: &M::Config,
    name: &str,
) -> Vec<String>
where
    T::Batch: Sync,
{
    let device = model.devices().into_iter().next().expect("a model on a device");
    let out = task.step(&model, task.train_batch(0, &device));
    let loss = values(out.loss.clone())[0];
    let mut failures = Vec::new();
    if (loss - f.get("output.loss").f32[0]).abs() >= 1e-4 {
        failures.push(format!("loss {loss}, PyTorch {}", f.get("output.loss").f32[0]));
    }
    let grads = GradientsParams::from_grads(out.loss.backward(), &model);
    let norm = global_norm(&model, &grads) as f32;
    if (norm - f.get("output.grad_norm").f32[0]).abs() >= 1e-3 {
        failures.push(format!("grad norm {norm}, PyTorch {}", f.get("output.grad_norm").f32[0]));
    }
    let ours = hf_gradients(&model, config, &grads, &run_dir(&format!("grads-{name}")));
    failures.extend(differing(&ours, &reference(f, "grad."), 1e-4).into_iter().map(|d| format!("gradient of {d}")));

    // One trainer step: global-norm clipping, AdamW with no-decay groups.
    let dir = run_dir(&format!("first-{name}"));
    let outcome = Trainer::new(first_step_config(), dir.to_path_buf()).with_progress(false).fit(task, model, false).unwrap();
    let after = hf_tensors(&outcome.model, config, &dir.join("hf"));
    failures.extend(differing(&after, &reference(f, "after."), 1e-4).into_iter().map(|d| format!("after the step, {d}")));
    failures
}

/// The shipped corpus's first `docs` chapters, a byte-level BPE trained on them, a tiny BART
/// config for it, and the denoising task over blocks of `max_len` tokens.
pub fn tiny_bart_task(docs: usize, max_len: usize, batch: usize, noise: sesame_text::DenoisingConfig) -> (sesame_bart::pretraining::Denoising, sesame_text::Tokenizer, sesame_bart::BartConfig) {
    let corpus = sesame_text::Corpus::read(&crate::fixtures_dir().join("../data/moby-dick.txt")).unwrap();
    let corpus = sesame_text::Corpus { documents: corpus.documents.into_iter().take(docs).collect() };
    let (train, held_out) = corpus.split_held_out(0.05);
    let tokenizer = sesame_text::Tokenizer::train(sesame_bart::pretraining::TOKENIZER, train.sentences(), 800, &sesame_bart::pretraining::TOKENIZER.config()).unwrap();
    let id = |t: &str| tokenizer.token_to_id(t).unwrap() as usize;
    let mut config = sesame_bart::BartConfig::preset("tiny", tokenizer.vocab_size(), 64, [id("<s>"), id("<pad>"), id("</s>")]).unwrap();
    (config.d_model, config.encoder_ffn_dim, config.decoder_ffn_dim, config.encoder_layers, config.decoder_layers) = (64, 128, 128, 1, 1);
    (config.encoder_attention_heads, config.decoder_attention_heads) = (2, 2);
    let task = sesame_bart::pretraining::Denoising::new(&train, &held_out, &tokenizer, &config, noise, max_len, batch, 7).unwrap();
    (task, tokenizer, config)
}
