//! `cargo xtask finetune`: the flags of a fine-tuning job are the library's
//! [`FinetuneOptions`] (it derives them), run by [`sesame::train::finetune`] on the
//! checkpoint's family, which reads the data, trains, evaluates and exports the best model.

use burn::tensor::Device;
use sesame_train::finetune::{FinetuneOptions, Finetuned};

/// Options of `cargo xtask finetune`: the library's, which derive their flags.
pub type FinetuneArgs = FinetuneOptions;

/// `finetune`: the library's run on the checkpoint's family, printed as one JSON line.
pub fn finetune(args: &FinetuneArgs, device: Device) -> Result<String, String> {
    sesame::train::finetune(args, device).map(|done| printed(&done)).map_err(|e| e.to_string())
}

/// A run's outcome as the JSON line the command prints.
pub(crate) fn printed(done: &Finetuned) -> String {
    serde_json::to_string(done).expect("JSON")
}
