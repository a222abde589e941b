//! The shared trainer on BERT: the first optimizer step matches PyTorch; a small model learns
//! from the shipped corpus; a killed run resumes exactly; bad input stops with a clear error.

use std::path::Path;
use std::sync::Arc;

use burn::prelude::*;
use sesame_bert::pretraining::{pretraining_step, BertPretraining, DataError, PretrainingBatch};
use sesame_bert::{BertConfig, BertForPreTraining};
use sesame_layers::PretrainedModel;
use sesame_tests::training::{first_step_config, first_step_failures, hf_tensors, run_dir, Fixed};
use sesame_tests::{devices, differing, fixtures_dir, max_abs_diff, Backend, Fixture};
use sesame_text::{Corpus, CorpusError, PairConfig, TokenMasking, Tokenizer, TokenizerConfig};
use sesame_train::{BoxError, CarriedState, Layout, StepOutput, TrainConfig, TrainError, TrainTask, Trainer};

/// Burn's CPU backends keep one process-wide RNG (`device.seed` is global), so tests that
/// train with dropout must not interleave: each holds this lock.
static RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    RNG.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The fixed-batch task of BERT pre-training.
fn fixed(batch: PretrainingBatch) -> Fixed<BertForPreTraining, PretrainingBatch> {
    Fixed { batch, step: |model, batch| pretraining_step(model, batch, Some("nsp")) }
}

fn fixture_batch(f: &Fixture, device: &Device) -> PretrainingBatch {
    sesame_tests::training::fixture_pretraining_batch(f, device, f.int("label.next_sentence_label", device))
}

#[test]
fn the_first_adamw_step_matches_pytorch() {
    let _serial = serial();
    let f = Fixture::open("train/bert-first-step");
    for (backend, device) in devices() {
        let train = device.clone().autodiff();
        let loaded = BertForPreTraining::from_pretrained(&f.dir, &train).unwrap();
        let task = fixed(fixture_batch(&f, &train));
        let failures = first_step_failures(&f, &task, loaded.model, &loaded.config, &format!("bert-{backend}"));
        assert!(failures.is_empty(), "{backend}:\n  {}", failures.join("\n  "));
    }
}

#[test]
fn accumulated_gradients_are_averaged() {
    let _serial = serial();
    // Two micro-batches of the same batch must give the one-batch step exactly (a sum would
    // double the gradient; global-norm clipping would then differ).
    let f = Fixture::open("train/bert-first-step");
    let device = devices()[0].1.clone().autodiff();
    let loaded = BertForPreTraining::from_pretrained(&f.dir, &device).unwrap();
    let task = fixed(fixture_batch(&f, &device));
    let one = Trainer::new(first_step_config(), &run_dir("accum-1")).with_progress(false).fit(&task, loaded.model.clone(), false).unwrap();
    let two_config = TrainConfig { grad_accum: 2, ..first_step_config() };
    let two = Trainer::new(two_config, &run_dir("accum-2")).with_progress(false).fit(&task, loaded.model, false).unwrap();
    let a = hf_tensors(&one.model, &loaded.config, &run_dir("accum-1-hf"));
    let b = hf_tensors(&two.model, &loaded.config, &run_dir("accum-2-hf"));
    let diff = differing(&b, &a, 1e-6);
    assert!(diff.is_empty(), "two averaged micro-batches differ from one batch: {diff:?}");
}

/// A tokenizer and task from the first `docs` documents (chapters) of the shipped corpus.
fn small_task(docs: usize, vocab: usize, seq_len: usize, batch: usize) -> (BertPretraining, Tokenizer) {
    let corpus = Corpus::read(&fixtures_dir().join("../data/moby-dick.txt")).unwrap();
    let corpus = Corpus { documents: corpus.documents.into_iter().take(docs).collect() };
    let (train, held_out) = corpus.split_held_out(0.05);
    let tokenizer = Tokenizer::train_wordpiece(train.sentences(), vocab, &TokenizerConfig::default()).unwrap();
    let pairs = PairConfig { max_seq_len: seq_len, ..PairConfig::default() };
    let task = BertPretraining::new(&train, &held_out, &tokenizer, tokenizer.vocab_size(), Layout::Pairs(pairs), Arc::new(TokenMasking::default()), batch, 7).unwrap();
    (task, tokenizer)
}

fn tiny_config(vocab: usize) -> BertConfig {
    let mut c = BertConfig::preset("tiny", vocab, 64, 0).unwrap();
    c.hidden_size = 64;
    c.num_attention_heads = 2;
    c.intermediate_size = 128;
    c
}

#[test]
fn a_tiny_bert_learns_from_the_shipped_corpus() {
    let _serial = serial();
    // flex only: a few hundred steps are a benchmark's worth of work on slower backends.
    let device = Backend::Flex.device().expect("flex is always compiled in").autodiff();
    let (task, tokenizer) = small_task(20, 1000, 48, 16);
    let config = tiny_config(tokenizer.vocab_size());
    let model = BertForPreTraining::new_hf(&config, &device);
    let train = TrainConfig { steps: 400, lr: 3e-3, warmup: 40, log_every: 40, eval_every: 0, checkpoint_every: 0, ..TrainConfig::default() };
    let dir = run_dir("learn");
    let trainer = Trainer::new(train, &dir).with_progress(false);
    let before = trainer.evaluate(&task, &model, &task.held_out_batches(&device.clone().without_autodiff()));
    let outcome = trainer.fit(&task, model, false).unwrap();
    let (start, end) = (before["mlm_loss"], outcome.held_out["mlm_loss"]);
    // HF's initialisation starts a fresh model near chance: ln(vocab).
    let chance = (tokenizer.vocab_size() as f64).ln();
    assert!((start - chance).abs() < 1.0, "initial MLM loss {start:.3}, chance is {chance:.3}");
    // 400 steps must take at least 0.75 nats off the held-out MLM loss (measured: 6.95 -> 6.00).
    assert!(end < start - 0.75, "held-out MLM loss went from {start:.3} to {end:.3}");
    let log = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    assert_eq!(log.lines().filter(|l| l.contains("\"train\"")).count(), 10, "a train line every 40 steps");
    assert!(std::fs::read_to_string(dir.join("loss.svg")).unwrap().contains("<polyline"));
}

#[test]
fn held_out_targets_are_all_masked_training_targets_are_80_10_10() {
    // Held-out loss counts only what the model predicts from context: under 80/10/10 a tenth of
    // the targets stay in the input and can be copied, which alone puts the loss ~0.5 nats below
    // the unigram baseline. Training keeps BERT's 80/10/10.
    let device = Backend::Flex.device().expect("flex is always compiled in");
    // 20 chapters: the held-out 5% is then a whole chapter (with 6, one short document that
    // may give no sentence pair).
    let (task, tokenizer) = small_task(20, 1000, 48, 16);
    let mask = i64::from(tokenizer.mask_token_id().unwrap());
    let shown = |batch: &PretrainingBatch| -> (usize, usize) {
        let ids = batch.input.input_ids.to_data().convert::<i64>().try_to_vec::<i64>().unwrap();
        let labels = batch.mlm_labels.to_data().convert::<i64>().try_to_vec::<i64>().unwrap();
        let targets: Vec<usize> = (0..ids.len()).filter(|&i| labels[i] != -100).collect();
        (targets.len(), targets.iter().filter(|&&i| ids[i] != mask).count())
    };
    let held_out: Vec<(usize, usize)> = task.held_out_batches(&device).iter().map(shown).collect();
    assert!(held_out.iter().map(|c| c.0).sum::<usize>() > 0, "no held-out targets");
    assert!(held_out.iter().all(|c| c.1 == 0), "held-out targets left visible: {held_out:?}");
    let (targets, visible) = (0..20).map(|i| shown(&task.train_batch(i, &device))).fold((0, 0), |a, c| (a.0 + c.0, a.1 + c.1));
    let fraction = visible as f64 / targets as f64;
    assert!((fraction - 0.2).abs() < 0.07, "training shows {fraction:.3} of its targets (80/10/10: 0.2)");
}

#[test]
fn a_run_stopped_between_checkpoints_resumes_to_the_same_parameters() {
    // A stop after step 5 without a checkpoint (what a kill leaves); the CLI's tests kill runs
    // with SIGKILL. Every compiled backend, wgpu included.
    let _serial = serial();
    for (backend, device) in devices() {
        let device = device.autodiff();
        let (task, tokenizer) = small_task(4, 300, 32, 4);
        let mut config = tiny_config(tokenizer.vocab_size());
        config.hidden_dropout_prob = 0.1; // dropout must be reproduced too
        config.attention_probs_dropout_prob = 0.1;
        let train = TrainConfig { steps: 6, lr: 1e-3, warmup: 2, checkpoint_every: 2, eval_every: 3, log_every: 1, ..TrainConfig::default() };
        device.seed(1);
        let init = BertForPreTraining::new_hf(&config, &device);
        let full_dir = run_dir(&format!("full-{backend}"));
        let full = Trainer::new(train.clone(), &full_dir).with_progress(false).fit(&task, init.clone(), false).unwrap();

        let dir = run_dir(&format!("killed-{backend}"));
        Trainer::new(train.clone(), &dir).with_progress(false).with_stop_after(5).fit(&task, init.clone(), false).unwrap();
        let resumed = Trainer::new(train, &dir).with_progress(false).fit(&task, init, true).unwrap();
        assert_eq!(resumed.resumed_from, 4, "{backend}: resumes from the last checkpoint");
        let a = hf_tensors(&full.model, &config, &full_dir.join("hf"));
        let b = hf_tensors(&resumed.model, &config, &dir.join("hf"));
        let diff = differing(&b, &a, 1e-6);
        assert!(diff.is_empty(), "{backend}: parameters differ after resume: {diff:?}");
        let steps = |d: &Path| -> Vec<u64> {
            std::fs::read_to_string(d.join("metrics.jsonl")).unwrap().lines()
                .filter(|l| l.contains("\"train\"")).map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["step"].as_u64().unwrap()).collect()
        };
        assert_eq!(steps(&dir), [1, 2, 3, 4, 5, 6], "{backend}: no lost or repeated steps in the log");
        assert_eq!(steps(&dir), steps(&full_dir));
    }
}

#[test]
fn micro_batches_on_two_threads_train_the_same_parameters_as_on_one() {
    let _serial = serial();
    for (backend, device) in devices().into_iter().filter(|(b, _)| *b != Backend::Wgpu) {
        let device = device.autodiff();
        assert!(sesame_train::is_cpu(&device), "{backend} runs on the CPU here, so its micro-batches run on threads: {device:?}");
        let (task, tokenizer) = small_task(4, 300, 32, 2);
        let mut config = tiny_config(tokenizer.vocab_size());
        config.hidden_dropout_prob = 0.1; // each micro-batch's masks must not depend on the thread
        config.attention_probs_dropout_prob = 0.1;
        let train = TrainConfig { steps: 4, grad_accum: 4, lr: 1e-3, warmup: 1, eval_every: 0, ..TrainConfig::default() };
        device.seed(1);
        let init = BertForPreTraining::new_hf(&config, &device);
        let runs: Vec<_> = [1, 2, 3]
            .into_iter()
            .map(|threads| {
                let dir = run_dir(&format!("threads-{threads}-{backend}"));
                let out = Trainer::new(train.clone(), &dir).with_progress(false).with_threads(threads).fit(&task, init.clone(), false).unwrap();
                hf_tensors(&out.model, &config, &dir.join("hf"))
            })
            .collect();
        let moved = differing(&runs[0], &hf_tensors(&init, &config, &run_dir(&format!("threads-init-{backend}")).join("hf")), 1e-4);
        assert!(!moved.is_empty(), "{backend}: training changed nothing");
        for (threads, run) in [(2, &runs[1]), (3, &runs[2])] {
            let diff = differing(run, &runs[0], 1e-6);
            assert!(diff.is_empty(), "{backend}: {threads} threads train other parameters than 1: {diff:?}");
        }
    }
}

/// A task whose loss becomes NaN at a given step.
struct NanAt(Fixed<BertForPreTraining, PretrainingBatch>, u64, std::sync::atomic::AtomicU64);

impl TrainTask for NanAt {
    type Model = BertForPreTraining;
    type Batch = PretrainingBatch;
    type State = ();
    fn train_batch(&self, index: u64, device: &Device) -> PretrainingBatch {
        self.2.store(index, std::sync::atomic::Ordering::SeqCst);
        self.0.train_batch(index, device)
    }
    fn held_out_batches(&self, _: &Device) -> Vec<PretrainingBatch> {
        vec![]
    }
    fn step(&self, model: &BertForPreTraining, batch: PretrainingBatch) -> StepOutput {
        let mut out = pretraining_step(model, batch, Some("nsp"));
        if self.2.load(std::sync::atomic::Ordering::SeqCst) + 1 == self.1 {
            out.loss = out.loss * f32::NAN;
        }
        out
    }
}

#[test]
fn a_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint() {
    let _serial = serial();
    let f = Fixture::open("train/bert-first-step");
    let device = devices()[0].1.clone().autodiff();
    let loaded = BertForPreTraining::from_pretrained(&f.dir, &device).unwrap();
    let task = NanAt(fixed(fixture_batch(&f, &device)), 3, Default::default());
    let dir = run_dir("nan");
    let config = TrainConfig { steps: 5, checkpoint_every: 1, eval_every: 0, ..first_step_config() };
    let trainer = Trainer::new(config, &dir).with_progress(false);
    match trainer.fit(&task, loaded.model, false) {
        Err(TrainError::NonFiniteLoss { step: 3, last_checkpoint, .. }) => assert!(last_checkpoint.ends_with("step-00000002"), "{last_checkpoint}"),
        other => panic!("expected NonFiniteLoss at step 3, got {:?}", other.map(|_| ())),
    }
    assert!(trainer.latest_checkpoint().unwrap().ends_with("step-00000002"));
}

#[test]
fn bad_corpora_and_settings_are_clear_errors() {
    let dir = run_dir("bad");
    std::fs::create_dir_all(&dir).unwrap();
    assert!(matches!(Corpus::read(&dir.join("missing.txt")), Err(CorpusError::Io { .. })));
    std::fs::write(dir.join("empty.txt"), "\n\n").unwrap();
    assert!(matches!(Corpus::read(&dir.join("empty.txt")), Err(CorpusError::Empty { .. })));
    std::fs::write(dir.join("tiny.txt"), "One sentence here. And another one.\n\nA second document. With two.\n").unwrap();
    let corpus = Corpus::read(&dir.join("tiny.txt")).unwrap();
    let tokenizer = Tokenizer::from_dir(&fixtures_dir().join("bert/base-fill-mask")).unwrap();
    let result = BertPretraining::new(&corpus, &Corpus::default(), &tokenizer, tokenizer.vocab_size(), Layout::Pairs(PairConfig::default()), Arc::new(TokenMasking::default()), 32, 1);
    assert!(matches!(result, Err(DataError::TooSmall { batch_size: 32, .. })), "{result:?}");
    let result = BertPretraining::new(&corpus, &Corpus::default(), &tokenizer, 10, Layout::Pairs(PairConfig::default()), Arc::new(TokenMasking::default()), 1, 1);
    assert!(matches!(result, Err(DataError::VocabMismatch { .. })));
    // NSP needs pairs: packed single sequences would give it nothing but label 0.
    let packed = Layout::Packed { packing: sesame_text::Packing::FullSentences, max_seq_len: 32 };
    let result = BertPretraining::new(&corpus, &Corpus::default(), &tokenizer, tokenizer.vocab_size(), packed, Arc::new(TokenMasking::default()), 1, 1);
    assert!(matches!(result, Err(DataError::NeedsPairs)), "{result:?}");

    let device = devices()[0].1.clone();
    let f = Fixture::open("train/bert-first-step");
    let not_autodiff = BertForPreTraining::from_pretrained(&f.dir, &device).unwrap().model;
    let task = fixed(fixture_batch(&f, &device));
    let err = Trainer::new(first_step_config(), dir.join("run")).fit(&task, not_autodiff.clone(), false).unwrap_err();
    assert!(matches!(err, TrainError::Config(_)), "{err}");
    let ad = BertForPreTraining::from_pretrained(&f.dir, &device.autodiff()).unwrap().model;
    let err = Trainer::new(first_step_config(), dir.join("fresh")).fit(&task, ad.clone(), true).unwrap_err();
    assert!(matches!(err, TrainError::NoCheckpoint(_)), "{err}");
    let zero = TrainConfig { steps: 0, ..first_step_config() };
    assert!(matches!(Trainer::new(zero, dir.join("zero")).fit(&task, ad, false), Err(TrainError::Config(_))));
}

/// What [`Carrying`] carries: the previous step's mean output `[1, 8]`, detached (as XLNet
/// carries the previous segment's hidden states).
#[derive(Default, Clone)]
struct Memory(Option<Tensor<2>>);

impl CarriedState for Memory {
    fn save(&self, dir: &Path) -> Result<(), BoxError> {
        let values: Option<Vec<f32>> = self.0.clone().map(|t| t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap());
        Ok(std::fs::write(dir.join("memory.json"), serde_json::to_string(&values)?)?)
    }
    fn load(dir: &Path, device: &Device) -> Result<Self, BoxError> {
        let text = std::fs::read_to_string(dir.join("memory.json"))?;
        let values: Option<Vec<f32>> = serde_json::from_str(&text)?;
        Ok(Memory(values.map(|v| Tensor::from_data(TensorData::new(v, [1, 8]), device))))
    }
}

/// A task whose loss depends on what the previous step left: `mean((W(x + memory) - x)^2)`.
struct Carrying {
    uses_memory: bool,
}

impl TrainTask for Carrying {
    type Model = burn::nn::Linear;
    type Batch = Tensor<2>;
    type State = Memory;
    fn train_batch(&self, index: u64, device: &Device) -> Tensor<2> {
        let values: Vec<f32> = (0..32).map(|i| ((i as u64 * 7 + index * 13) % 11) as f32 / 11.0 - 0.5).collect();
        Tensor::from_data(TensorData::new(values, [4, 8]), device)
    }
    fn held_out_batches(&self, _: &Device) -> Vec<Tensor<2>> {
        vec![]
    }
    fn step(&self, model: &burn::nn::Linear, batch: Tensor<2>) -> StepOutput {
        self.step_with_state(model, batch, &mut Memory::default())
    }
    fn step_with_state(&self, model: &burn::nn::Linear, x: Tensor<2>, memory: &mut Memory) -> StepOutput {
        let input = match (&memory.0, self.uses_memory) {
            (Some(m), true) => x.clone() + m.clone().expand([4, 8]),
            _ => x.clone(),
        };
        let y = model.forward(input);
        memory.0 = Some(y.clone().detach().mean_dim(0));
        StepOutput { loss: (y - x).square().mean(), metrics: vec![], tokens: 32, predictions: None }
    }
}

#[test]
fn state_an_objective_carries_between_steps_is_checkpointed_and_resumed_exactly() {
    let _serial = serial();
    let device = devices()[0].1.clone().autodiff();
    let train = TrainConfig { steps: 7, lr: 1e-2, warmup: 1, checkpoint_every: 2, eval_every: 0, log_every: 1, ..TrainConfig::default() };
    let init = burn::nn::LinearConfig::new(8, 8).init(&device);
    let weights = |m: &burn::nn::Linear| m.weight.val().into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
    let task = Carrying { uses_memory: true };
    let full = Trainer::new(train.clone(), &run_dir("carry-full")).with_progress(false).fit(&task, init.clone(), false).unwrap();

    let dir = run_dir("carry-killed");
    Trainer::new(train.clone(), &dir).with_progress(false).with_stop_after(5).fit(&task, init.clone(), false).unwrap();
    assert!(dir.join("checkpoints/step-00000004/memory.json").is_file(), "the carried state is in the checkpoint");
    let resumed = Trainer::new(train.clone(), &dir).with_progress(false).fit(&task, init.clone(), true).unwrap();
    assert_eq!(resumed.resumed_from, 4);
    assert_eq!(weights(&resumed.model), weights(&full.model), "resumed with the carried state: the same run");

    // The state matters: a run that carries nothing ends elsewhere.
    let forgetful = Trainer::new(train, &run_dir("carry-none")).with_progress(false).fit(&Carrying { uses_memory: false }, init, false).unwrap();
    let diff = max_abs_diff(&weights(&forgetful.model), &weights(&full.model));
    assert!(diff > 1e-4, "the carried memory changed nothing ({diff:e})");
}

/// A task whose held-out score is the sum of the model's outputs on a fixed input, which
/// training pushes up (every target is 10).
struct Climbing;

impl TrainTask for Climbing {
    type Model = burn::nn::Linear;
    type Batch = Tensor<2>;
    type State = ();
    fn train_batch(&self, _index: u64, device: &Device) -> Tensor<2> {
        Tensor::ones([4, 8], device)
    }
    fn held_out_batches(&self, device: &Device) -> Vec<Tensor<2>> {
        vec![Tensor::ones([2, 8], device), Tensor::ones([1, 8], device)]
    }
    fn step(&self, model: &burn::nn::Linear, x: Tensor<2>) -> StepOutput {
        let y = model.forward(x);
        StepOutput { loss: (y.clone() - 10.0).square().mean(), metrics: vec![], tokens: 32, predictions: Some(y.into_data()) }
    }
    fn held_out_scores(&self, predictions: &[TensorData]) -> std::collections::BTreeMap<String, f64> {
        let rows: usize = predictions.iter().map(|p| p.shape()[0]).sum();
        let sum: f32 = predictions.iter().flat_map(|p| p.clone().convert::<f32>().try_to_vec::<f32>().unwrap()).sum();
        [("output_sum".to_string(), sum as f64), ("rows".to_string(), rows as f64)].into()
    }
}

#[test]
fn the_best_evaluation_is_kept_and_patience_stops_a_run() {
    let _serial = serial();
    let device = devices()[0].1.clone().autodiff();
    let init = burn::nn::LinearConfig::new(8, 8).init(&device);
    let sum_of = |m: &burn::nn::Linear| m.forward(Tensor::<2>::ones([3, 8], &device)).sum().into_scalar::<f32>() as f64;
    let config = |greater| TrainConfig {
        steps: 20, lr: 1e-2, warmup: 0, eval_every: 2, checkpoint_every: 2, log_every: 1,
        best_metric: Some("output_sum".into()), greater_is_better: Some(greater), patience: 2, ..TrainConfig::default()
    };
    // Smaller is better while training makes it larger: the first evaluation stays the best,
    // and two evaluations without a better one stop the run.
    let dir = run_dir("best-smaller");
    let trainer = Trainer::new(config(false), &dir).with_progress(false);
    let out = trainer.fit(&Climbing, init.clone(), false).unwrap();
    let best = out.best.clone().expect("a best evaluation");
    assert_eq!((best.step, best.stale, out.stopped_early), (2, 2, Some(6)));
    assert_eq!(out.held_out["rows"], 3.0, "held_out_scores sees every held-out batch's predictions");
    assert!(out.held_out["output_sum"] > best.value, "{} is not worse than {}", out.held_out["output_sum"], best.value);
    let kept = burn::module::Module::try_load_file(init.clone(), trainer.best_model()).unwrap();
    assert!((sum_of(&kept) - best.value).abs() < 1e-4, "best/model.bpk is the model of the best evaluation");
    // Larger is better: every evaluation improves, none stops the run.
    let out = Trainer::new(config(true), &run_dir("best-larger")).with_progress(false).fit(&Climbing, init, false).unwrap();
    assert_eq!((out.best.unwrap().step, out.stopped_early), (20, None));
}

/// Every float parameter's values by module path (`base.encoder.layers.0.attention.query.weight`).
#[derive(Default)]
struct ByPath {
    path: Vec<String>,
    values: std::collections::BTreeMap<String, Vec<f32>>,
}

impl burn::module::ModuleVisitor for ByPath {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
        self.values.insert(self.path.join("."), param.val().into_data().convert::<f32>().try_to_vec::<f32>().unwrap());
    }
}

#[test]
fn learning_rate_groups_scale_each_parameters_step() {
    let _serial = serial();
    // One AdamW step moves each weight by about the learning rate (m / sqrt(v) = ±1 at the
    // first step): 1e-3 by default, a quarter of it in layer 0, nothing in the embeddings.
    let f = Fixture::open("train/bert-first-step");
    let device = devices()[0].1.clone().autodiff();
    let loaded = BertForPreTraining::from_pretrained(&f.dir, &device).unwrap();
    let groups = vec![
        sesame_train::LrGroup { pattern: r"encoder\.layers\.0\.".into(), factor: 0.25 },
        sesame_train::LrGroup { pattern: r"embeddings\.".into(), factor: 0.0 },
    ];
    let config = TrainConfig { steps: 1, lr: 1e-3, warmup: 0, weight_decay: 0.0, max_grad_norm: 0.0, eval_every: 0, log_every: 1, checkpoint_every: 1, lr_groups: groups, ..TrainConfig::default() };
    let params = |m: &BertForPreTraining| {
        let mut v = ByPath::default();
        m.visit(&mut v);
        v.values
    };
    let before = params(&loaded.model);
    let trained = Trainer::new(config, &run_dir("lr-groups")).with_progress(false).fit(&fixed(fixture_batch(&f, &device)), loaded.model, false).unwrap().model;
    let after = params(&trained);
    let largest_step = |part: &str| {
        let steps: Vec<f32> = before.iter().filter(|(k, _)| k.contains(part)).flat_map(|(k, b)| b.iter().zip(&after[k]).map(|(x, y)| (x - y).abs())).collect();
        assert!(!steps.is_empty(), "no parameter path holds {part:?}: {:?}", before.keys().collect::<Vec<_>>());
        steps.into_iter().fold(0.0, f32::max)
    };
    assert_eq!(largest_step("embeddings."), 0.0, "a factor of 0 leaves the embeddings as they were");
    let (layer0, layer1) = (largest_step("encoder.layers.0."), largest_step("encoder.layers.1."));
    assert!((layer0 - 2.5e-4).abs() < 2.5e-6, "layer 0 moved by up to {layer0}, not 2.5e-4");
    assert!((layer1 - 1e-3).abs() < 1e-5, "layer 1 moved by up to {layer1}, not 1e-3");
}

#[test]
fn layer_wise_decay_gives_electras_rates() {
    // The fixture's 2 layers, decay 0.5: head 1, layer 1 0.25, layer 0 0.125, embeddings 0.0625.
    let f = Fixture::open("train/bert-first-step");
    let model = BertForPreTraining::from_pretrained(&f.dir, &devices()[0].1).unwrap().model;
    let groups = sesame_train::finetune::layer_lr_decay(&model, 0.5);
    let found: Vec<(String, f64)> = groups.iter().map(|g| (g.pattern.clone(), g.factor)).collect();
    let mut paths = ByPath::default();
    model.visit(&mut paths);
    let factor = |path: &str| groups.iter().filter(|g| regex_matches(&g.pattern, path)).next_back().map_or(1.0, |g| g.factor);
    let mut seen = std::collections::BTreeMap::new();
    for path in paths.values.keys() {
        let f = factor(path);
        let part = if path.contains("embeddings") { "embeddings" } else if path.contains("layers.0.") { "layer 0" } else if path.contains("layers.1.") { "layer 1" } else { "head" };
        assert_eq!(*seen.entry(part).or_insert(f), f, "{path}: factor {f} in {part} ({found:?})");
    }
    assert_eq!(seen, [("embeddings", 0.0625), ("head", 1.0), ("layer 0", 0.125), ("layer 1", 0.25)].into_iter().collect(), "{found:?}");
}

/// Whether `pattern` matches `path`, as the optimizer's parameter groups match them.
fn regex_matches(pattern: &str, path: &str) -> bool {
    burn::module::ParamGroup::from_any_regexes(vec![pattern]).unwrap().matches(&burn::module::ParamId::new(), Some(path))
}

#[test]
fn freeze_fixes_the_embeddings_and_layers_and_leaves_the_pooler_and_head_to_learn() {
    struct RequiresGrad(Vec<String>, std::collections::BTreeMap<String, bool>);
    impl burn::module::ModuleVisitor for RequiresGrad {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.0.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.0.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
            self.1.insert(self.0.join("."), param.is_require_grad());
        }
    }
    let device = devices()[0].1.clone().autodiff();
    let model = sesame_layers::ForSequenceClassification::<sesame_bert::BertModel, sesame_layers::Classifier>::init(&tiny_config(50), &device);
    let mut flags = RequiresGrad(Vec::new(), Default::default());
    sesame_train::finetune::freeze_base(model).visit(&mut flags);
    let mut kinds = std::collections::BTreeMap::new();
    for (path, learns) in &flags.1 {
        let kind = ["base.embeddings", "base.encoder", "base.pooler", "head"].into_iter().find(|p| path.starts_with(p)).unwrap_or_else(|| panic!("{path}: where?"));
        assert_eq!(*kinds.entry(kind).or_insert(*learns), *learns, "{path}");
    }
    let expected = [("base.embeddings", false), ("base.encoder", false), ("base.pooler", true), ("head", true)];
    assert_eq!(kinds, expected.into_iter().collect(), "{:?}", flags.1);
}

/// MASS (in `bart_pretraining.rs` otherwise): its batches predict one fragment of each block, and
/// a tiny BART learns it. Here, since it trains from weights drawn from the seeded process-wide RNG.
#[test]
fn mass_batches_predict_one_fragment_and_a_tiny_bart_learns_to_infill_it() {
    // It seeds the process-wide RNG and draws its model's initial weights from it.
    let _serial = serial();
    use sesame_text::MassConfig;
    let ints = |t: Tensor<2, Int>| -> Vec<Vec<i64>> {
        let [_, s] = t.dims();
        t.into_data().convert::<i64>().try_to_vec::<i64>().unwrap().chunks(s).map(<[i64]>::to_vec).collect()
    };
    let (task, _, config) = sesame_tests::training::tiny_bart_task(20, 16, 16, sesame_text::DenoisingConfig::default());
    let task = task.with_mass(MassConfig::default()).unwrap();
    let batch = task.train_batch(0, &Device::flex());
    let (labels, source, decoder) = (ints(batch.labels.clone()), ints(batch.input_ids.clone()), ints(batch.decoder_input_ids.clone().expect("MASS gives the decoder's input")));
    for r in 0..labels.len() {
        let predicted: Vec<usize> = (0..labels[r].len()).filter(|&i| labels[r][i] != -100).collect();
        let block_len = source[r].iter().take_while(|&&t| t != 1).count();
        assert!(!predicted.is_empty() && predicted.windows(2).all(|w| w[1] == w[0] + 1), "row {r}: one contiguous fragment {predicted:?}");
        let inner = block_len - 2;
        assert_eq!(predicted.len(), ((inner as f64 * 0.5).round() as usize).clamp(1, inner), "row {r}: half the block");
        // The decoder reads the fragment shifted right: the token before each predicted one.
        for &i in &predicted[1..] {
            assert_eq!(decoder[r][i], labels[r][i - 1], "row {r}, position {i}");
        }
    }
    let device = Backend::Flex.device().unwrap().autodiff();
    device.seed(5);
    let model = sesame_bart::BartForConditionalGeneration::new_hf(&config, &device);
    let train = TrainConfig { steps: 600, lr: 3e-3, warmup: 50, log_every: 50, eval_every: 0, checkpoint_every: 0, ..TrainConfig::default() };
    let run = run_dir("bart-mass-learn");
    let trainer = Trainer::new(train, &run).with_progress(false);
    let before = trainer.evaluate(&task, &model, &task.held_out_batches(&device.clone().without_autodiff()));
    let outcome = trainer.fit(&task, model, false).unwrap();
    // The loss covers the fragment alone: it ends well below the fragment's unigram loss.
    let (start, end, unigram) = (before["loss"], outcome.held_out["loss"], outcome.held_out["unigram_loss"]);
    assert!(end < unigram - 0.3, "held-out fragment loss {start:.3} -> {end:.3}, the fragment's unigram loss {unigram:.3}: {:?}", outcome.held_out);
}
