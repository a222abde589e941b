//! `cargo xtask prune`: the flags of a pruning job, parsed into the library's options for
//! [`sesame::train::prune_classifier`] (remove the least important attention heads of a
//! fine-tuned sequence classifier, Michel et al. 2019). Fine-tune the pruned model again with
//! `cargo xtask finetune --model OUT` to recover what pruning lost.

use std::path::PathBuf;

use burn::tensor::Device;
use sesame::train::PruneOptions;

/// Options of `cargo xtask prune`.
#[derive(clap::Args, Debug)]
pub struct PruneArgs {
    /// A fine-tuned sequence classifier: an HF directory with its labels (config.json), weights
    /// and tokenizer.
    #[arg(long, value_parser = crate::common::model_dir)]
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
    pub columns: sesame_train::finetune::ColumnNames,
}

/// `prune`: the library's run on the checkpoint's family, printed as one JSON line.
pub fn prune(args: &PruneArgs, device: Device) -> Result<String, String> {
    let options = PruneOptions {
        model: args.model.clone(),
        data: args.data.clone(),
        eval: args.eval.clone(),
        heads: args.heads,
        out: args.out.clone(),
        batch_size: args.batch_size,
        seq_len: args.seq_len,
        columns: args.columns.clone(),
    };
    sesame::train::prune_classifier(&options, device).map(|pruned| serde_json::to_string(&pruned).expect("JSON")).map_err(|e| e.to_string())
}
