//! The shared training loop. It knows no model family: a family plugs in through
//! [`TrainTask`], which makes batches and computes a loss with metrics.
//!
//! Per optimizer step: `grad_accum` micro-batches, each loss divided by `grad_accum` (so
//! accumulated gradients are averaged), global-norm clipping, AdamW with no weight decay on
//! biases and LayerNorm, a warm-up + decay learning rate. Batches and dropout are seeded by
//! the step, so a run resumed from a checkpoint continues exactly as if never stopped.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param, ParamGroup};
use burn::optim::lr_scheduler::module_lr_scheduler::{ModuleLearningRate, ModuleLrScheduler};
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::prelude::*;
use burn::tensor::TensorReadError;
use serde::{Deserialize, Serialize};

pub use sesame_layers::device::is_cpu;
use sesame_layers::random::with_stream;
use sesame_layers::device::on_one_thread;

use crate::adamw::FusedAdamW;
use crate::clip::clip_global_norm;
use crate::metrics::{LogLine, Metric, MetricLog, MetricTotals};
use crate::schedule::{Decay, LrSchedule};

/// What a pre-training objective (or any training task) gives the trainer: its batches, its
/// loss and metrics, and the data it carries from one step to the next. The trainer knows no
/// family and no objective beyond this trait.
pub trait TrainTask {
    /// The model being trained (one module; a task that trains several, as ELECTRA's
    /// generator and discriminator, trains a module holding them all).
    type Model: Module;
    /// One batch, already on its device.
    type Batch: Clone;
    /// What the objective carries between steps (XLNet's memory of the previous segment),
    /// saved with every checkpoint so that a resumed run continues exactly; `()` for none.
    type State: CarriedState;

    /// Training batch number `index`: a pure function of `index` (and the task's own seed),
    /// so that a resumed run sees the same data.
    fn train_batch(&self, index: u64, device: &Device) -> Self::Batch;

    /// The held-out batches, the same at every evaluation.
    fn held_out_batches(&self, device: &Device) -> Vec<Self::Batch>;

    /// Loss (a scalar `[1]`) and metrics of `model` on `batch`.
    fn step(&self, model: &Self::Model, batch: Self::Batch) -> StepOutput;

    /// [`Self::step`] for an objective that carries `state` from the previous step and updates
    /// it for the next (the trainer starts each evaluation from a fresh state). By default
    /// the state is not used.
    fn step_with_state(&self, model: &Self::Model, batch: Self::Batch, state: &mut Self::State) -> StepOutput {
        let _ = state;
        self.step(model, batch)
    }

    /// For an objective that back-propagates its loss in parts (GradCache: a cached loss's
    /// mini-batches), the loss and metrics of `model` on `batch` and the gradients of the loss
    /// times `scale`, running up to `threads` parts at once through [`run_micro_batches`] (the
    /// result must not depend on `threads`); `None` (the default): the trainer back-propagates
    /// [`Self::step`]'s loss.
    fn step_in_parts(&self, model: &Self::Model, batch: &Self::Batch, scale: f64, threads: usize) -> Option<(StepOutput, GradientsParams)> {
        let _ = (model, batch, scale, threads);
        None
    }

    /// Whether held-out `batch`'s loss counts in the held-out `loss`: not for a batch that only
    /// carries texts for [`Self::held_out_scores`] (a retrieval corpus). Yes by default.
    fn counts_in_loss(&self, batch: &Self::Batch) -> bool {
        let _ = batch;
        true
    }

    /// Held-out metrics of reference predictors that need no model (the masked-LM tasks'
    /// `unigram_mlm_loss`: the loss of predicting every masked token by its frequency in the
    /// training text), printed at the start and logged with every evaluation, so that a run
    /// shows how far it got beyond them. None by default.
    fn baselines(&self) -> std::collections::BTreeMap<String, f64> {
        Default::default()
    }

    /// Metrics of the whole held-out set that are not means over batches (F1, Matthews'
    /// correlation, Pearson's), from every held-out batch's [`StepOutput::predictions`] in
    /// order. None by default.
    fn held_out_scores(&self, predictions: &[TensorData]) -> std::collections::BTreeMap<String, f64> {
        let _ = predictions;
        Default::default()
    }
}

/// Data a [`TrainTask`] carries from one step to the next, written into every step
/// checkpoint and read back on resume.
pub trait CarriedState: Default {
    /// True for a state that carries nothing (`()`), which lets a step's micro-batches run at
    /// once.
    const EMPTY: bool = false;
    /// Write the state into the checkpoint directory `dir` (which exists).
    fn save(&self, dir: &Path) -> Result<(), BoxError>;
    /// Read what [`Self::save`] wrote in `dir`, onto `device`.
    fn load(dir: &Path, device: &Device) -> Result<Self, BoxError>;
}

/// Nothing carried.
impl CarriedState for () {
    const EMPTY: bool = true;
    fn save(&self, _dir: &Path) -> Result<(), BoxError> {
        Ok(())
    }
    fn load(_dir: &Path, _device: &Device) -> Result<Self, BoxError> {
        Ok(())
    }
}

/// What [`TrainTask::step`] returns.
#[derive(Debug)]
pub struct StepOutput {
    /// The loss to minimise, shape `[1]`.
    pub loss: Tensor<1>,
    /// Metrics of this batch (the trainer adds `loss` itself).
    pub metrics: Vec<Metric>,
    /// Non-padding tokens in the batch (for tokens/s).
    pub tokens: usize,
    /// What the model predicted for the batch (logits, one row per example), for metrics of
    /// the whole held-out set ([`TrainTask::held_out_scores`]); `None` for tasks without them.
    pub predictions: Option<TensorData>,
}

/// Optimisation and bookkeeping settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Optimizer steps.
    pub steps: u64,
    /// Micro-batches per optimizer step (gradients are averaged).
    pub grad_accum: u64,
    /// Peak learning rate.
    pub lr: f64,
    /// Warm-up steps.
    pub warmup: u64,
    /// Decay after warm-up.
    pub decay: Decay,
    /// AdamW weight decay (not applied to biases and LayerNorm).
    pub weight_decay: f64,
    /// AdamW beta 1.
    pub beta_1: f32,
    /// AdamW beta 2.
    pub beta_2: f32,
    /// AdamW epsilon.
    pub epsilon: f32,
    /// Clip the global gradient norm to this value (0 = no clipping).
    pub max_grad_norm: f64,
    /// Seed of dropout and of everything the task draws.
    pub seed: u64,
    /// Log train metrics every this many steps.
    pub log_every: u64,
    /// Evaluate on the held-out batches every this many steps (0 = only at the end).
    pub eval_every: u64,
    /// Write a checkpoint every this many steps (0 = only at the end).
    pub checkpoint_every: u64,
    /// Keep this many most recent checkpoints.
    pub keep_checkpoints: usize,
    /// The held-out metric that picks the best model (kept in `best/`), if any.
    #[serde(default)]
    pub best_metric: Option<String>,
    /// Whether a larger `best_metric` is better (`None`: yes, unless its name ends in `loss`,
    /// as transformers' Trainer decides).
    #[serde(default)]
    pub greater_is_better: Option<bool>,
    /// Stop after this many evaluations without a better `best_metric` (0: never).
    #[serde(default)]
    pub patience: u64,
    /// Learning-rate factors of groups of parameters (layer-wise decay): a parameter whose
    /// module path matches a group's pattern learns at the scheduled rate times its factor
    /// (the last matching group counts); others at the scheduled rate.
    #[serde(default)]
    pub lr_groups: Vec<LrGroup>,
}

/// Parameters whose module path (`base.encoder.layers.3.attention.query.weight`) matches
/// `pattern` (a regular expression), and the factor of their learning rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LrGroup {
    /// A regular expression over parameter paths.
    pub pattern: String,
    /// The factor of the scheduled learning rate.
    pub factor: f64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            steps: 1000,
            grad_accum: 1,
            lr: 1e-4,
            warmup: 100,
            decay: Decay::Linear,
            weight_decay: 0.01,
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-6,
            max_grad_norm: 1.0,
            seed: 42,
            log_every: 10,
            eval_every: 100,
            checkpoint_every: 100,
            keep_checkpoints: 2,
            best_metric: None,
            greater_is_better: None,
            patience: 0,
            lr_groups: Vec::new(),
        }
    }
}

impl TrainConfig {
    /// The learning-rate schedule.
    pub fn schedule(&self) -> LrSchedule {
        LrSchedule { peak: self.lr, warmup: self.warmup, total: self.steps, decay: self.decay }
    }

    /// AdamW with decoupled weight decay, none on biases and LayerNorm (`*norm.gamma|beta`).
    pub fn optimizer(&self) -> ModuleOptimizer {
        let adam = |wd: f64| FusedAdamW::new(self.beta_1, self.beta_2, self.epsilon, wd as f32);
        let no_decay = ParamGroup::from_any_regexes(vec![r"bias$", r"norm\.(gamma|beta)$"]).expect("valid regexes");
        ModuleOptimizer::from(adam(self.weight_decay)).with_group(no_decay, adam(0.0), None)
    }

    /// The learning rate of every parameter when the schedule gives `lr`: `lr` times the
    /// factor of the last group in [`Self::lr_groups`] whose pattern matches its path.
    pub fn learning_rates(&self, lr: f64) -> ModuleLearningRate {
        self.lr_groups
            .iter()
            .fold(ModuleLrScheduler::new(lr), |scheduler, g| {
                let group = ParamGroup::from_any_regexes(vec![g.pattern.as_str()]).expect("patterns are checked before a run");
                scheduler.with_group(group, lr * g.factor)
            })
            .step()
    }

    fn check(&self) -> Result<(), TrainError> {
        for g in &self.lr_groups {
            if ParamGroup::from_any_regexes(vec![g.pattern.as_str()]).is_err() || !(g.factor.is_finite() && g.factor >= 0.0) {
                return Err(TrainError::Config(format!("learning-rate group {:?} with factor {}: not a regular expression and a factor ≥ 0", g.pattern, g.factor)));
            }
        }
        let bad = |what: &str| Err(TrainError::Config(what.to_string()));
        if self.steps == 0 {
            return bad("steps (--steps) must be at least 1");
        }
        if self.grad_accum == 0 {
            return bad("grad_accum (--grad-accum) must be at least 1");
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return bad("the learning rate (--lr) must be positive and finite");
        }
        if self.warmup > self.steps {
            return bad("warmup (--warmup) is longer than the run (--steps)");
        }
        for (value, name) in [(self.weight_decay, "weight_decay (--weight-decay)"), (self.max_grad_norm, "max_grad_norm (--max-grad-norm)")] {
            if !(value >= 0.0 && value.is_finite()) {
                return Err(TrainError::Config(format!("{name} must be a finite number >= 0")));
            }
        }
        Ok(())
    }
}

/// Why training stopped early.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The settings make no sense.
    #[error("invalid training settings: {0}")]
    Config(String),
    /// The loss became NaN or infinite; the last good checkpoint is kept.
    #[error("the loss is {value} at step {step}; stopped (the last good checkpoint is kept: {last_checkpoint})")]
    NonFiniteLoss {
        /// The optimizer step (1-based) whose loss was not finite.
        step: u64,
        /// The loss value.
        value: f64,
        /// The last checkpoint written, or `none`.
        last_checkpoint: String,
    },
    /// The task produced no held-out batch although evaluation was asked for.
    #[error("no held-out data to evaluate on")]
    NoHeldOut,
    /// A run directory or checkpoint could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error (IO, burn-store's, JSON's, a carried state's).
        #[source]
        source: BoxError,
    },
    /// The backend failed while computing a step (e.g. out of device memory).
    #[error("the backend failed at step {step}: {}", last_line(source))]
    Device {
        /// The optimizer step (1-based).
        step: u64,
        /// What the backend reported.
        #[source]
        source: TensorReadError,
    },
    /// `--resume` found nothing to resume.
    #[error("nothing to resume in {0}: no checkpoint")]
    NoCheckpoint(PathBuf),
}

/// Any error, kept as the source of a [`TrainError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn io<'a, E: Into<BoxError>>(what: &'static str, path: &'a Path) -> impl FnOnce(E) -> TrainError + 'a {
    move |e| TrainError::Io { what, path: path.to_path_buf(), source: e.into() }
}

/// The last line of an error's text: Burn's execution errors read "An error happened during
/// execution / Caused by: / <the reason>".
fn last_line(error: &dyn std::fmt::Display) -> String {
    error.to_string().lines().rfind(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string()
}

/// What a finished run gives back.
#[derive(Debug)]
pub struct TrainOutcome<M> {
    /// The trained model (training mode, on the autodiff device).
    pub model: M,
    /// Held-out metrics at the end.
    pub held_out: std::collections::BTreeMap<String, f64>,
    /// The step the run started from (0, or the resumed checkpoint's step).
    pub resumed_from: u64,
    /// The best evaluation by `best_metric`, whose model is in `best/model.bpk`.
    pub best: Option<Best>,
    /// The step at which `patience` stopped the run, if it did.
    pub stopped_early: Option<u64>,
    /// Seconds this process spent on held-out evaluations (part of `fit`'s wall time).
    pub eval_seconds: f64,
    /// Seconds this process spent writing checkpoints, the best model's included.
    pub checkpoint_seconds: f64,
}

/// The best evaluation so far by [`TrainConfig::best_metric`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Best {
    /// The step it was taken at.
    pub step: u64,
    /// The metric's value.
    pub value: f64,
    /// Every held-out metric of that evaluation.
    pub metrics: std::collections::BTreeMap<String, f64>,
    /// Evaluations since, none of them better.
    pub stale: u64,
}

/// The state saved with each checkpoint besides the model and optimizer.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct CheckpointState {
    step: u64,
    config: TrainConfig,
    /// The best evaluation so far (with `best_metric`).
    #[serde(default)]
    best: Option<Best>,
}

/// One micro-batch's loss, metrics, token count and gradients.
struct MicroBatch {
    loss: f64,
    metrics: Vec<Metric>,
    tokens: usize,
    grads: GradientsParams,
}

/// Run `count` micro-batches, `run(micro, model)` each, and return the results in micro-batch
/// order. On a CPU device up to `threads` run at once, each thread on its own replica of
/// `model` (the same weights, its own autodiff graph: Burn keeps one lock per graph), and each
/// micro-batch draws its dropout masks (and samples) from its own stream, seeded by `seed` and its number: the
/// results do not depend on `threads`. On other devices they run one after another with the
/// device's generator. Panics if `run` panics.
pub fn run_micro_batches<M, R>(model: &M, count: u64, threads: usize, seed: u64, run: impl Fn(u64, &M) -> R + Sync) -> Vec<R>
where
    M: Module + Send + Sync,
    R: Send,
{
    let device = model.devices().into_iter().next();
    let device = match device {
        Some(device) if is_cpu(&device) => device,
        _ => return (0..count).map(|micro| run(micro, model)).collect(),
    };
    let threads = threads.clamp(1, count.max(1) as usize);
    if threads == 1 {
        return (0..count).map(|micro| with_micro_batch_masks(&device, seed, micro, || run(micro, model))).collect();
    }
    let mut results: Vec<Option<R>> = (0..count).map(|_| None).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                let replica = model.clone().fork(&device);
                let (run, device) = (&run, &device);
                scope.spawn(move || {
                    on_one_thread(|| {
                        (worker as u64..count)
                            .step_by(threads)
                            .map(|micro| (micro, with_micro_batch_masks(device, seed, micro, || run(micro, &replica))))
                            .collect::<Vec<_>>()
                    })
                })
            })
            .collect();
        for worker in workers {
            for (micro, result) in worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)) {
                results[micro as usize] = Some(result);
            }
        }
    });
    results.into_iter().map(|r| r.expect("every micro-batch ran")).collect()
}

/// `f` with micro-batch `micro`'s own random stream (dropout, sampling) on a CPU device (see [`run_micro_batches`]).
fn with_micro_batch_masks<R>(device: &Device, seed: u64, micro: u64, f: impl FnOnce() -> R) -> R {
    if is_cpu(device) {
        with_stream(seed ^ (micro + 1).wrapping_mul(0xD1B5_4A32_D192_ED03), f)
    } else {
        f()
    }
}

/// Runs a [`TrainTask`] in a run directory.
pub struct Trainer {
    config: TrainConfig,
    dir: PathBuf,
    progress: bool,
    stop_after: Option<u64>,
    threads: usize,
}

impl Trainer {
    /// A trainer writing checkpoints, `metrics.jsonl` and `loss.svg` to `dir`.
    pub fn new(config: TrainConfig, dir: impl Into<PathBuf>) -> Self {
        use std::io::IsTerminal;
        Self { config, dir: dir.into(), progress: cfg!(feature = "cli") && std::io::stderr().is_terminal(), stop_after: None, threads: 1 }
    }

    /// Show (default) or hide the progress bar. Without a terminal on stderr (CI logs, pipes)
    /// the bar cannot draw, so a line per log step is printed instead.
    pub fn with_progress(mut self, show: bool) -> Self {
        use std::io::IsTerminal;
        self.progress = show && cfg!(feature = "cli") && std::io::stderr().is_terminal();
        self
    }

    /// Run up to `threads` micro-batches of a step at once on a CPU device (default 1). The
    /// result does not depend on it; only the speed does.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Stop abruptly after this optimizer step, without a final checkpoint, as a killed run
    /// would (for tests of `resume`).
    pub fn with_stop_after(mut self, step: u64) -> Self {
        self.stop_after = Some(step);
        self
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn checkpoints(&self) -> PathBuf {
        self.dir.join("checkpoints")
    }

    /// The latest complete checkpoint, if any.
    pub fn latest_checkpoint(&self) -> Option<PathBuf> {
        let name = std::fs::read_to_string(self.checkpoints().join("latest")).ok()?;
        let path = self.checkpoints().join(name.trim());
        path.join("state.json").is_file().then_some(path)
    }

    /// Train `model` (initialised on an autodiff device) with `task`. With `resume`, continue
    /// from the latest checkpoint in the run directory.
    pub fn fit<T>(&self, task: &T, mut model: T::Model, resume: bool) -> Result<TrainOutcome<T::Model>, TrainError>
    where
        T: TrainTask + Sync,
        T::Model: Send + Sync,
        T::Batch: Sync,
    {
        let config = &self.config;
        config.check()?;
        let device = model.devices().into_iter().next().ok_or_else(|| TrainError::Config("the model has no parameters".into()))?;
        if !device.is_autodiff() {
            return Err(TrainError::Config("initialise the model on `device.autodiff()` to train it".into()));
        }
        std::fs::create_dir_all(self.checkpoints()).map_err(io("cannot create", &self.dir))?;
        // Burn initialises parameters lazily, on first use. Draw them now, from the run's seed,
        // so that they do not consume the per-step random streams that make dropout reproducible.
        device.seed(config.seed);
        model.visit(&mut Materialize);
        let mut optim = config.optimizer();
        let mut start = 0;
        let mut best: Option<Best> = None;
        let mut state = T::State::default();
        if resume {
            let checkpoint = self.latest_checkpoint().ok_or_else(|| TrainError::NoCheckpoint(self.dir.clone()))?;
            let load = |e: BoxError| TrainError::Io { what: "cannot load checkpoint", path: checkpoint.clone(), source: e };
            let saved: CheckpointState = std::fs::read_to_string(checkpoint.join("state.json"))
                .map_err(|e| load(e.into()))
                .and_then(|t| serde_json::from_str(&t).map_err(|e| load(e.into())))?;
            model = model.try_load_file(checkpoint.join("model.bpk")).map_err(|e| load(e.into()))?;
            optim = optim.load(checkpoint.join("optim.bpk")).map_err(|e| load(e.into()))?;
            state = T::State::load(&checkpoint, &device).map_err(load)?;
            start = saved.step;
            best = saved.best;
        }
        sesame_layers::fs::write_atomic(&self.dir.join("train_config.json"), serde_json::to_string_pretty(config).expect("JSON").as_bytes())
            .map_err(io("cannot write", &self.dir))?;
        let mut log = MetricLog::open(&self.dir, start).map_err(io("cannot write metrics in", &self.dir))?;
        let schedule = config.schedule();
        let held_out = task.held_out_batches(&device.clone().without_autodiff());
        let baselines = task.baselines();
        if !baselines.is_empty() {
            eprintln!("held-out baselines: {}", format_values(&baselines));
        }
        let bar = self.progress_bar(start);
        let mut window = MetricTotals::default();
        let (mut window_tokens, mut window_start) = (0usize, Instant::now());
        let mut last_checkpoint = self.latest_checkpoint().map_or("none".to_string(), |p| p.display().to_string());
        let mut held_out_metrics = Default::default();
        let (mut eval_seconds, mut checkpoint_seconds) = (0.0, 0.0);

        for step in start..config.steps {
            let lr = schedule.lr(step);
            // Dropout masks depend on the step (and micro-batch) only, so resuming reproduces them.
            let step_seed = config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(step);
            device.seed(step_seed);
            let mut accumulator = GradientsAccumulator::<T::Model>::new();
            let mut step_loss = 0.0;
            for result in self.micro_batches(task, &model, &mut state, step, step_seed, &device).into_iter() {
                let micro = match result {
                    Ok(micro) if micro.loss.is_finite() => micro,
                    Ok(micro) => {
                        bar.abandon();
                        return Err(TrainError::NonFiniteLoss { step: step + 1, value: micro.loss, last_checkpoint });
                    }
                    Err(source) => {
                        bar.abandon();
                        return Err(TrainError::Device { step: step + 1, source });
                    }
                };
                step_loss += micro.loss / config.grad_accum as f64;
                window.add(&micro.metrics);
                window_tokens += micro.tokens;
                accumulator.accumulate(&model, micro.grads);
            }
            let mut grads = accumulator.grads();
            let grad_norm = if config.max_grad_norm > 0.0 { clip_global_norm(&model, &mut grads, config.max_grad_norm) } else { 0.0 };
            model = optim.step(config.learning_rates(lr), model, grads);
            window.add(&[Metric::mean("loss", step_loss, 1.0), Metric::mean("grad_norm", grad_norm, 1.0), Metric::mean("lr", lr, 1.0)]);
            let done = step + 1;
            bar.inc(1);

            if done % config.log_every.max(1) == 0 || done == config.steps {
                let mut values = window.summarise();
                values.insert("tokens_per_s".into(), window_tokens as f64 / window_start.elapsed().as_secs_f64().max(1e-9));
                bar.set_message(format!("loss {:.4} lr {:.2e} {:.0} tok/s", values["loss"], lr, values["tokens_per_s"]));
                if !self.progress {
                    eprintln!("step {done}/{}: {}", config.steps, format_values(&values));
                }
                log.push(LogLine { step: done, split: "train".into(), values }).map_err(io("cannot write metrics in", &self.dir))?;
                window.clear();
                (window_tokens, window_start) = (0, Instant::now());
            }
            let eval_now = (config.eval_every > 0 && done % config.eval_every == 0) || done == config.steps;
            let mut out_of_patience = false;
            if eval_now && !held_out.is_empty() {
                let evaluating = Instant::now();
                held_out_metrics = self.evaluate(task, &model, &held_out);
                eval_seconds += evaluating.elapsed().as_secs_f64();
                held_out_metrics.extend(baselines.clone());
                bar.suspend(|| eprintln!("step {done}: held-out {}", format_values(&held_out_metrics)));
                log.push(LogLine { step: done, split: "held_out".into(), values: held_out_metrics.clone() })
                    .map_err(io("cannot write metrics in", &self.dir))?;
                if let Some(name) = &config.best_metric {
                    // A metric undefined at this evaluation (a correlation of constant
                    // predictions) is no improvement.
                    let larger = config.greater_is_better.unwrap_or(!name.ends_with("loss"));
                    let improves = |v: f64, b: &Best| if larger { v > b.value } else { v < b.value };
                    match held_out_metrics.get(name).copied() {
                        Some(value) if best.as_ref().is_none_or(|b| improves(value, b)) => {
                            let saving = Instant::now();
                            self.save_best(&model)?;
                            checkpoint_seconds += saving.elapsed().as_secs_f64();
                            best = Some(Best { step: done, value, metrics: held_out_metrics.clone(), stale: 0 });
                        }
                        _ => {
                            if let Some(b) = &mut best {
                                b.stale += 1;
                                out_of_patience = config.patience > 0 && b.stale >= config.patience;
                            }
                        }
                    }
                }
            }
            if Some(done) == self.stop_after {
                bar.abandon();
                return Ok(TrainOutcome { model, held_out: held_out_metrics, resumed_from: start, best, stopped_early: None, eval_seconds, checkpoint_seconds });
            }
            if (config.checkpoint_every > 0 && done % config.checkpoint_every == 0) || done == config.steps || out_of_patience {
                let saving = Instant::now();
                last_checkpoint = self.save_checkpoint(done, &model, &optim, &state, best.as_ref())?.display().to_string();
                checkpoint_seconds += saving.elapsed().as_secs_f64();
            }
            if out_of_patience {
                bar.abandon();
                bar.suspend(|| eprintln!("step {done}: no better {} in {} evaluations; stopping", config.best_metric.as_deref().unwrap_or(""), config.patience));
                return Ok(TrainOutcome { model, held_out: held_out_metrics, resumed_from: start, best, stopped_early: Some(done), eval_seconds, checkpoint_seconds });
            }
        }
        bar.finish();
        Ok(TrainOutcome { model, held_out: held_out_metrics, resumed_from: start, best, stopped_early: None, eval_seconds, checkpoint_seconds })
    }

    /// Forward and backward passes of step `step`'s micro-batches, in micro-batch order,
    /// through [`run_micro_batches`]. A task that carries state from one micro-batch to the next
    /// runs them one after another.
    fn micro_batches<T>(&self, task: &T, model: &T::Model, state: &mut T::State, step: u64, step_seed: u64, device: &Device) -> Vec<Result<MicroBatch, TensorReadError>>
    where
        T: TrainTask + Sync,
        T::Model: Send + Sync,
    {
        let accum = self.config.grad_accum;
        // The threads left to each micro-batch's own parts by the micro-batches running at once.
        let inner = (self.threads / self.threads.min(accum as usize).max(1)).max(1);
        let pass = |micro: u64, model: &T::Model, state: &mut T::State| {
            let batch = task.train_batch(step * accum + micro, device);
            if let Some((out, grads)) = task.step_in_parts(model, &batch, 1.0 / accum as f64, inner) {
                let loss = out.loss.try_into_scalar::<f32>()? as f64;
                return Ok(MicroBatch { loss, metrics: out.metrics, tokens: out.tokens, grads });
            }
            let out = task.step_with_state(model, batch, state);
            let loss = out.loss.clone().try_into_scalar::<f32>()? as f64;
            if !loss.is_finite() {
                return Ok(MicroBatch { loss, metrics: vec![], tokens: 0, grads: GradientsParams::new() });
            }
            let grads = (out.loss / accum as f64).backward();
            Ok(MicroBatch { loss, metrics: out.metrics, tokens: out.tokens, grads: GradientsParams::from_grads(grads, model) })
        };
        if T::State::EMPTY {
            run_micro_batches(model, accum, self.threads, step_seed, |micro, replica| pass(micro, replica, &mut T::State::default()))
        } else {
            (0..accum).map(|micro| with_micro_batch_masks(device, step_seed, micro, || pass(micro, model, state))).collect()
        }
    }

    /// Mean metrics of `model` (inference mode, no autodiff) over `batches`. A task that
    /// carries no state evaluates its batches through [`run_micro_batches`]: on a CPU device on
    /// the trainer's threads, each batch drawing its random numbers (ELECTRA's samples) from its
    /// own stream, seeded by the run's seed and the batch's number, so that the metrics depend
    /// neither on the thread count nor on what was drawn before.
    pub fn evaluate<T>(&self, task: &T, model: &T::Model, batches: &[T::Batch]) -> std::collections::BTreeMap<String, f64>
    where
        T: TrainTask + Sync,
        T::Model: Send + Sync,
        T::Batch: Sync,
    {
        let device = model.devices().into_iter().next().expect("a model with parameters").without_autodiff();
        let inference = model.clone().valid().fork(&device);
        let scalar = |out: StepOutput| (out.loss.try_into_scalar::<f32>().map_or(f64::NAN, |v| v as f64), out.metrics, out.predictions);
        let outputs: Vec<(f64, Vec<Metric>, Option<TensorData>)> = if T::State::EMPTY {
            let seed = self.config.seed ^ 0x5EED_E7A1_0000_0000;
            run_micro_batches(&inference, batches.len() as u64, self.threads, seed, |i, m| scalar(task.step(m, batches[i as usize].clone())))
        } else {
            let mut state = T::State::default();
            batches.iter().map(|batch| scalar(task.step_with_state(&inference, batch.clone(), &mut state))).collect()
        };
        let mut totals = MetricTotals::default();
        let mut predictions = Vec::new();
        for ((loss, metrics, predicted), batch) in outputs.into_iter().zip(batches) {
            totals.add(&metrics);
            if task.counts_in_loss(batch) {
                totals.add(&[Metric::mean("loss", loss, 1.0)]);
            }
            predictions.extend(predicted);
        }
        let mut values = totals.summarise();
        if !predictions.is_empty() {
            values.extend(task.held_out_scores(&predictions));
        }
        values
    }

    /// Write `checkpoints/step-N` (model, optimizer, the task's carried state, the step)
    /// atomically and point `latest` to it.
    fn save_checkpoint<M: Module, S: CarriedState>(&self, step: u64, model: &M, optim: &ModuleOptimizer, carried: &S, best: Option<&Best>) -> Result<PathBuf, TrainError> {
        let root = self.checkpoints();
        let name = format!("step-{step:08}");
        let tmp = root.join(format!(".{name}.tmp"));
        let fin = root.join(&name);
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(io("cannot create", &tmp))?;
        let fail = |e: BoxError| TrainError::Io { what: "cannot write checkpoint", path: tmp.clone(), source: e };
        model.clone().save_file(tmp.join("model.bpk")).map_err(|e| fail(e.into()))?;
        optim.save(tmp.join("optim.bpk")).map_err(|e| fail(e.into()))?;
        carried.save(&tmp).map_err(fail)?;
        let state = CheckpointState { step, config: self.config.clone(), best: best.cloned() };
        std::fs::write(tmp.join("state.json"), serde_json::to_string_pretty(&state).expect("JSON")).map_err(|e| fail(e.into()))?;
        let _ = std::fs::remove_dir_all(&fin);
        std::fs::rename(&tmp, &fin).map_err(io("cannot rename", &tmp))?;
        let latest_tmp = root.join(".latest.tmp");
        std::fs::write(&latest_tmp, &name).map_err(io("cannot write", &latest_tmp))?;
        std::fs::rename(&latest_tmp, root.join("latest")).map_err(io("cannot write", &root))?;
        self.prune(&root)?;
        Ok(fin)
    }

    /// The best model so far: `best/model.bpk`, written atomically.
    fn save_best<M: Module>(&self, model: &M) -> Result<(), TrainError> {
        let dir = self.dir.join("best");
        std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
        let tmp = dir.join(".model.tmp.bpk");
        model.clone().save_file(&tmp).map_err(|e| TrainError::Io { what: "cannot write the best model", path: tmp.clone(), source: e.into() })?;
        std::fs::rename(&tmp, dir.join("model.bpk")).map_err(io("cannot rename", &tmp))
    }

    /// The best model written by a run with [`TrainConfig::best_metric`].
    pub fn best_model(&self) -> PathBuf {
        self.dir.join("best").join("model.bpk")
    }

    fn prune(&self, root: &Path) -> Result<(), TrainError> {
        let mut steps: Vec<PathBuf> = std::fs::read_dir(root)
            .map_err(io("cannot list", root))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("step-")))
            .collect();
        steps.sort();
        let keep = self.config.keep_checkpoints.max(1);
        for old in steps.iter().take(steps.len().saturating_sub(keep)) {
            std::fs::remove_dir_all(old).map_err(io("cannot remove", old))?;
        }
        Ok(())
    }

    fn progress_bar(&self, start: u64) -> Progress {
        Progress::new(self.progress, self.config.steps, start)
    }
}

/// The terminal progress bar (indicatif, with the `cli` feature); without the feature, or
/// when hidden, it draws nothing and log lines are printed instead.
struct Progress {
    #[cfg(feature = "cli")]
    bar: indicatif::ProgressBar,
}

#[cfg(feature = "cli")]
impl Progress {
    fn new(show: bool, steps: u64, start: u64) -> Self {
        if !show {
            return Self { bar: indicatif::ProgressBar::hidden() };
        }
        let bar = indicatif::ProgressBar::new(steps).with_position(start);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed_precise} < {eta_precise}] {msg}")
                .expect("valid template"),
        );
        bar.reset_eta();
        Self { bar }
    }
    fn inc(&self, n: u64) {
        self.bar.inc(n)
    }
    fn set_message(&self, message: String) {
        self.bar.set_message(message)
    }
    fn suspend(&self, f: impl FnOnce()) {
        self.bar.suspend(f)
    }
    fn abandon(&self) {
        self.bar.abandon()
    }
    fn finish(&self) {
        self.bar.finish()
    }
}

#[cfg(not(feature = "cli"))]
impl Progress {
    fn new(_show: bool, _steps: u64, _start: u64) -> Self {
        Self {}
    }
    fn inc(&self, _n: u64) {}
    fn set_message(&self, _message: String) {}
    fn suspend(&self, f: impl FnOnce()) {
        f()
    }
    fn abandon(&self) {}
    fn finish(&self) {}
}

/// Forces lazily initialised parameters to materialise.
struct Materialize;

impl ModuleVisitor for Materialize {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let _ = param.val();
    }
}

fn format_values(values: &std::collections::BTreeMap<String, f64>) -> String {
    // Four decimals, or three significant digits for what they would show as 0.0000 (a
    // fine-tuning learning rate of 5e-5).
    let show = |v: f64| if v != 0.0 && v.abs() < 1e-3 { format!("{v:.2e}") } else { format!("{v:.4}") };
    values.iter().map(|(k, v)| format!("{k} {}", show(*v))).collect::<Vec<_>>().join(", ")
}
