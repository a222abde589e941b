//! One call for pruning attention heads: [`prune_classifier`] measures every head's importance
//! on the user's labelled rows, removes the least important, and saves the pruned model with
//! `pruned_heads` in its config.json, as transformers 4 saved pruned models, with the metrics
//! before and after. `cargo xtask prune` parses its flags into [`PruneOptions`] and calls it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use burn::optim::GradientsParams;
use burn::tensor::Device;
use serde::Serialize;
use sesame_layers::{supports, Family, HfConfig, ClassifierLayers, TaskModel};
use sesame_text::labelled::{self, ProblemType};
use sesame_text::Tokenizer;

use super::{unpruned_numbers, without_dropout, HeadImportance};
use crate::finetune::{save_model, Batching, ColumnNames, LabelledSet, SequenceClassification};
use crate::{TrainConfig, TrainTask, Trainer};

/// A pruning job.
#[derive(Clone, Debug)]
pub struct PruneOptions {
    /// A fine-tuned sequence classifier: an HF directory with its labels, weights and tokenizer.
    pub model: PathBuf,
    /// Labelled rows on which the heads' importance is measured (the labels must be the model's).
    pub data: PathBuf,
    /// Labelled rows the metrics are reported on, before and after [default: `data`].
    pub eval: Option<PathBuf>,
    /// Heads to remove, the least important first; a layer keeps one head at least.
    pub heads: usize,
    /// Where to save the pruned model [default: MODEL-pruned].
    pub out: Option<PathBuf>,
    /// Rows per batch.
    pub batch_size: usize,
    /// Tokens per row, longer rows truncated [default: 128, at most the model's positions].
    pub seq_len: Option<usize>,
    /// The columns of the rows.
    pub columns: ColumnNames,
}

impl PruneOptions {
    /// Remove `heads` heads of `model`, measured on `data`; every other option at its default.
    pub fn new(model: impl Into<PathBuf>, data: impl Into<PathBuf>, heads: usize) -> Self {
        Self { model: model.into(), data: data.into(), eval: None, heads, out: None, batch_size: 32, seq_len: None, columns: ColumnNames::default() }
    }
}

/// What pruning did.
#[derive(Clone, Debug, Serialize)]
pub struct Pruned {
    /// The saved model.
    pub model: PathBuf,
    /// The heads removed, by layer (0-based numbers of the original model).
    pub pruned: BTreeMap<String, Vec<usize>>,
    /// How many heads were removed.
    pub heads_pruned: usize,
    /// Every head's normalised importance, `[layer][head]`, before pruning.
    pub importance: Vec<Vec<f64>>,
    /// Parameters before and after.
    pub parameters: BeforeAfter<usize>,
    /// The evaluation rows' metrics before and after.
    pub eval: Evaluated,
}

/// A count before and after pruning.
#[derive(Clone, Debug, Serialize)]
pub struct BeforeAfter<T> {
    /// Before pruning.
    pub before: T,
    /// After pruning.
    pub after: T,
}

/// The evaluation rows and their metrics before and after pruning.
#[derive(Clone, Debug, Serialize)]
pub struct Evaluated {
    /// The rows evaluated.
    pub rows: usize,
    /// Their metrics before pruning.
    pub before: BTreeMap<String, f64>,
    /// Their metrics after pruning.
    pub after: BTreeMap<String, f64>,
}

/// Prune the fine-tuned classifier `job.model`, a checkpoint of family `F`.
pub fn prune_classifier<F: Family>(job: &PruneOptions, device: Device) -> Result<Pruned, String> {
    if !supports::<F::ForSequenceClassification>() {
        return Err(format!("{}: {} models have no sequence classifier to prune", job.model.display(), F::NAME));
    }
    prune::<F::ForSequenceClassification>(job, device, F::NAME)
}

fn prune<M: TaskModel<Output = ClassifierLayers>>(job: &PruneOptions, device: Device, family: &str) -> Result<Pruned, String> {
    for (value, flag) in [(job.heads, "--heads"), (job.batch_size, "--batch-size")] {
        if value == 0 {
            return Err(format!("{flag} 0: must be at least 1"));
        }
    }
    if let Some(n) = job.seq_len.filter(|&n| n < 2) {
        return Err(format!("--seq-len {n}: too short for a row (2 tokens at least)"));
    }
    // A hub id (`org/name[@revision]`) is found in the local HuggingFace cache.
    let model_dir = &sesame_layers::hub::resolve_path(&job.model).map_err(|e| e.to_string())?;
    let train_device = device.clone().autodiff();
    let loaded = M::from_pretrained(model_dir, &train_device).map_err(|e| e.to_string())?;
    if !loaded.report.initialized.is_empty() {
        return Err(format!("{}: not a fine-tuned sequence classifier ({})", model_dir.display(), loaded.report));
    }
    let (model, mut config) = (without_dropout(loaded.model), loaded.config);
    if model.encoder().is_none() {
        return Err(format!("{}: the heads of {family} models cannot be pruned", model_dir.display()));
    }
    let tokenizer = Tokenizer::from_dir(model_dir).map_err(|e| format!("{}: {e}", model_dir.display()))?;

    // The rows, their labels as the model's classes.
    let labels = config.labels().clone();
    let classes: Vec<String> = (0..labels.count(2)).map(|i| labels.name(i)).collect();
    let problem = match labels.problem_type.as_deref() {
        Some("multi_label_classification") => ProblemType::MultiLabelClassification,
        Some("regression") => ProblemType::Regression,
        _ if classes.len() == 1 => ProblemType::Regression,
        _ => ProblemType::SingleLabelClassification,
    };
    let classes = if problem == ProblemType::Regression { Vec::new() } else { classes };
    let limits = config.input_limits();
    let seq_len = match job.seq_len {
        Some(n) if n > limits.max_len => return Err(format!("--seq-len {n} exceeds the model's {} positions", limits.max_len)),
        Some(n) => n,
        None => 128.min(limits.max_len),
    };
    // A file's rows as a task whose held-out batches are all of them.
    let read = |path: &PathBuf| -> Result<(SequenceClassification<M>, usize), String> {
        let rows = labelled::read_rows(path, &job.columns.columns()).map_err(|e| e.to_string())?;
        let targets = labelled::targets(path, &rows, problem, &classes).map_err(|e| e.to_string())?;
        let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        let pairs = job.columns.pairs(&rows);
        let set = LabelledSet::encode(&tokenizer, &texts, pairs.as_deref(), targets, seq_len).map_err(|e| format!("{}: {e}", path.display()))?;
        let batching = Batching { batch_size: job.batch_size, parts: 1, seed: 0 };
        Ok((SequenceClassification::new(set.clone(), set, tokenizer.clone(), problem, classes.len().max(1), batching), rows.len()))
    };
    let (task, rows) = read(&job.data)?;
    let batches = task.held_out_batches(&train_device);
    // Without --eval, the rows read above are the evaluation rows too.
    let eval = job.eval.as_ref().map(read).transpose()?;
    let (eval_task, eval_rows) = eval.as_ref().map_or((&task, rows), |(t, n)| (t, *n));
    let eval_batches = eval_task.held_out_batches(&device);

    // Importance: |∂L/∂ξ_h| summed over the batches, normalised per layer.
    let encoder = || model.encoder().expect("checked above");
    let mut importance = HeadImportance::new(encoder());
    for batch in batches.iter().cloned() {
        let loss = task.step(&model, batch).loss;
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        importance.add(encoder(), &grads);
    }
    let importance = importance.normalized();
    let chosen = importance.least_important(job.heads);
    let unpruned = unpruned_numbers(&chosen, &config.pruned_heads(), &importance);
    let threads = sesame_layers::device::default_threads(&device);
    let trainer = Trainer::new(TrainConfig::default(), std::env::temp_dir()).with_progress(false).with_threads(threads);
    let before = trainer.evaluate(eval_task, &model, &eval_batches);
    let params_before = model.num_params();

    let model = model.prune_heads(&mut config, &unpruned).map_err(|e| e.to_string())?;
    let after = trainer.evaluate(eval_task, &model, &eval_batches);
    let out = job.out.clone().unwrap_or_else(|| PathBuf::from(format!("{}-pruned", model_dir.display())));
    save_model(&model.valid(), &config, &out, model_dir, &tokenizer)?;
    let removed: usize = chosen.values().map(BTreeSet::len).sum();
    if removed < job.heads {
        eprintln!("note: --heads {}: {removed} heads pruned; every layer keeps one", job.heads);
    }
    let layers: BTreeMap<String, Vec<usize>> = unpruned.iter().map(|(l, h)| (l.to_string(), h.iter().copied().collect())).collect();
    let params_after = model.num_params();
    Ok(Pruned {
        model: out,
        pruned: layers,
        heads_pruned: removed,
        importance: importance.scores,
        parameters: BeforeAfter { before: params_before, after: params_after },
        eval: Evaluated { rows: eval_rows, before, after },
    })
}
