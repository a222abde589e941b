//! `forward`'s `--inputs` file (safetensors tensors named as transformers' arguments), run
//! through the whole command on a fixture checkpoint of every family and head (the first byte
//! picks it, with the head its config.json names): outputs or one error line, never a panic,
//! an abort or an allocation the inputs do not ask for.
#![no_main]
use libfuzzer_sys::fuzz_target;

/// Checkpoints with their head's weights: every family, every head `forward` runs.
pub const CHECKPOINTS: &[&str] = &[
    "bert/base-fill-mask",
    "bert/base-masked-lm",
    "bert/base-model",
    "bert/base-multiple-choice",
    "bert/base-nsp",
    "bert/base-pretraining",
    "bert/base-qa",
    "bert/base-seqcls-multilabel",
    "bert/base-seqcls-regression",
    "bert/base-seqcls-single",
    "bert/base-token-classification",
    "roberta/base-masked-lm",
    "roberta/base-model",
    "roberta/base-multiple-choice",
    "roberta/base-qa",
    "roberta/base-seqcls-multilabel",
    "roberta/base-seqcls-regression",
    "roberta/base-seqcls-single",
    "roberta/base-token-classification",
    "albert/base-masked-lm",
    "albert/base-model",
    "albert/base-multiple-choice",
    "albert/base-pretraining",
    "albert/base-qa",
    "albert/base-seqcls-multilabel",
    "albert/base-seqcls-regression",
    "albert/base-seqcls-single",
    "albert/base-token-classification",
    "electra/base-masked-lm",
    "electra/base-model",
    "electra/base-multiple-choice",
    "electra/base-pretraining",
    "electra/base-qa",
    "electra/base-seqcls-multilabel",
    "electra/base-seqcls-regression",
    "electra/base-seqcls-single",
    "electra/base-token-classification",
    "bart/base-causal-lm",
    "bart/base-conditional-generation",
    "bart/base-generation",
    "bart/base-model-shifted",
    "bart/base-model",
    "bart/base-qa",
    "bart/base-seqcls-multilabel",
    "bart/base-seqcls-single",
    "xlnet/base-lm",
    "xlnet/base-memory",
    "xlnet/base-model",
    "xlnet/base-multiple-choice",
    "xlnet/base-qa-beam",
    "xlnet/base-qa-simple",
    "xlnet/base-qa-train",
    "xlnet/base-seqcls-multilabel",
    "xlnet/base-seqcls-regression",
    "xlnet/base-seqcls-single",
    "xlnet/base-token-classification",
    "xlnet/base-two-stream",
    "unilm/seq-to-seq",
    "generation/bert-lm-head",
];

fuzz_target!(|data: &[u8]| {
    let (checkpoint, data) = sesame_fuzz::pick(data, CHECKPOINTS.len());
    let model = sesame_fuzz::fixtures().join(CHECKPOINTS[checkpoint]);
    let inputs = sesame_fuzz::file("inputs.safetensors", data);
    let out = sesame_fuzz::scratch().join("outputs.safetensors");
    let _ = xtask::run_args(["xtask", "forward", "--model"].map(std::ffi::OsString::from).into_iter().chain([model.into_os_string(), "--inputs".into(), inputs.into_os_string(), "--out".into(), out.into_os_string()]));
});
