//! `cargo xtask prune`: remove the least important attention heads of a fine-tuned sequence
//! classifier (Michel et al. 2019: importance `|∂L/∂ξ_h|` of a gate on each head, summed over
//! the user's labelled rows, normalised per layer; `sesame_train::pruning`), and save the
//! pruned model with `pruned_heads` in its config.json, as transformers 4 saved pruned models.
//! Fine-tune it again with `cargo xtask finetune --model OUT` to recover what pruning lost.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::Device;
use sesame_layers::{Backbone, ForSequenceClassification, HfConfig, PretrainedModel, SequenceHead, TaskModel};
use sesame_text::labelled::{self, ProblemType};
use sesame_text::Tokenizer;
use sesame_train::finetune::{Batching, LabelledSet, SequenceClassification};
use sesame_train::pruning::{unpruned_numbers, without_dropout, HeadImportance};
use sesame_train::{TrainConfig, TrainTask, Trainer};

/// Options of `cargo xtask prune`.
#[derive(clap::Args, Debug)]
pub struct PruneArgs {
    /// A fine-tuned sequence classifier: an HF directory with its labels (config.json), weights
    /// and tokenizer.
    #[arg(long)]
    pub model: PathBuf,
    /// Labelled rows on which the heads' importance is measured (CSV, TSV or JSON lines, as
    /// `finetune --train`; the labels must be the model's).
    #[arg(long)]
    pub data: PathBuf,
    /// Labelled rows to report the metrics on, before and after pruning [default: --data].
    #[arg(long)]
    pub eval: Option<PathBuf>,
    /// Heads to remove, the least important first; a layer keeps one head at least.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub heads: usize,
    /// Where to save the pruned model [default: MODEL-pruned].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Rows per batch.
    #[arg(long, default_value_t = 32, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub batch_size: usize,
    /// Tokens per row, longer rows truncated [default: 128, at most the model's positions].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..=1_000_000))]
    pub seq_len: Option<usize>,
    /// The columns of the rows.
    #[command(flatten)]
    pub columns: crate::finetune::ColumnArgs,
}

/// `prune` of a family whose sequence classifier is `ForSequenceClassification<B, S>`.
pub fn prune<B: Backbone, S: SequenceHead<B>>(args: &PruneArgs, device: Device) -> Result<String, String>
where
    ForSequenceClassification<B, S>: TaskModel<Config = B::Config> + sesame_layers::SequenceClassifier,
{
    type M<B, S> = ForSequenceClassification<B, S>;
    let model_dir = &args.model;
    let tokenizer = Tokenizer::from_dir(model_dir).map_err(|e| format!("{}: {e}", model_dir.display()))?;
    let train_device = device.clone().autodiff();
    let loaded = M::<B, S>::from_pretrained(model_dir, &train_device).map_err(|e| e.to_string())?;
    if !loaded.report.initialized.is_empty() {
        return Err(format!("{}: not a fine-tuned sequence classifier ({})", model_dir.display(), loaded.report));
    }
    let (model, mut config) = (without_dropout(loaded.model), loaded.config);
    if model.base.encoder().is_none() {
        return Err(format!("{}: the heads of {} models cannot be pruned", model_dir.display(), B::CLASS));
    }

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
    let seq_len = match args.seq_len {
        Some(n) if n > limits.max_len => return Err(format!("--seq-len {n} exceeds the model's {} positions", limits.max_len)),
        Some(n) => n,
        None => 128.min(limits.max_len),
    };
    // A file's rows as a task whose held-out batches are all of them.
    let read = |path: &PathBuf| -> Result<(SequenceClassification<M<B, S>>, usize), String> {
        let rows = labelled::read_rows(path, &args.columns.columns()).map_err(|e| e.to_string())?;
        let targets = labelled::targets(path, &rows, problem, &classes).map_err(|e| e.to_string())?;
        let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        let pairs = args.columns.pairs(&rows);
        let set = LabelledSet::encode(&tokenizer, &texts, pairs.as_deref(), targets, seq_len).map_err(|e| format!("{}: {e}", path.display()))?;
        let batching = Batching { batch_size: args.batch_size, parts: 1, seed: 0 };
        Ok((SequenceClassification::new(set.clone(), set, tokenizer.clone(), problem, classes.len().max(1), batching), rows.len()))
    };
    let (task, rows) = read(&args.data)?;
    let batches = task.held_out_batches(&train_device);
    // Without --eval, the rows read above are the evaluation rows too.
    let eval = args.eval.as_ref().map(read).transpose()?;
    let (eval_task, eval_rows) = eval.as_ref().map_or((&task, rows), |(t, n)| (t, *n));
    let eval_batches = eval_task.held_out_batches(&device);

    // Importance: |∂L/∂ξ_h| summed over the batches, normalised per layer.
    let encoder = || model.base.encoder().expect("checked above");
    let mut importance = HeadImportance::new(encoder());
    for batch in batches.iter().cloned() {
        let loss = task.step(&model, batch).loss;
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        importance.add(encoder(), &grads);
    }
    let importance = importance.normalized();
    let chosen = importance.least_important(args.heads);
    let unpruned = unpruned_numbers(&chosen, &B::pruned_heads(&config), &importance);
    let threads = sesame_layers::device::default_threads(&device);
    let trainer = Trainer::new(TrainConfig::default(), std::env::temp_dir()).with_progress(false).with_threads(threads);
    let before = trainer.evaluate(eval_task, &model, &eval_batches);
    let params_before = model.num_params();

    let mut model = model;
    model.base = model.base.clone().prune_heads(&mut config, &unpruned).map_err(|e| e.to_string())?;
    let after = trainer.evaluate(eval_task, &model, &eval_batches);
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from(format!("{}-pruned", model_dir.display())));
    crate::finetune::save_model(&model.valid(), &config, &out, model_dir, &tokenizer)?;
    let removed: usize = chosen.values().map(BTreeSet::len).sum();
    if removed < args.heads {
        eprintln!("note: --heads {}: {removed} heads pruned; every layer keeps one", args.heads);
    }
    let layers: BTreeMap<String, Vec<usize>> = unpruned.iter().map(|(l, h)| (l.to_string(), h.iter().copied().collect())).collect();
    Ok(serde_json::json!({
        "model": out,
        "pruned": layers,
        "heads_pruned": removed,
        "importance": importance.scores,
        "parameters": { "before": params_before, "after": model.num_params() },
        "eval": { "rows": eval_rows, "before": before, "after": after },
    })
    .to_string())
}

