//! ALBERT's pre-training recipe (Lan et al. 2020, sections 3-4) on the shared masked-LM loop
//! (`sesame_train::pretraining`): masked LM with n-gram masking (n <= 3, p(n) proportional to
//! 1/n) plus sentence-order prediction (two consecutive segments, swapped for negatives), no
//! dropout (the preset), a SentencePiece-style Unigram vocabulary.

use sesame_layers::ConfigError;
use sesame_text::{PairConfig, SentenceTask, TokenizerKind};
use sesame_train::pretraining::{Layout, Masking, MaskingKind, Pretraining, PretrainingFamily};

use crate::{Albert, AlbertConfig, AlbertForPreTraining};

/// ALBERT pre-training (n-gram MLM + SOP) as a task for the shared trainer.
pub type AlbertPretraining = Pretraining<AlbertForPreTraining>;

impl PretrainingFamily for Albert {
    type Model = AlbertForPreTraining;
    const NAME: &'static str = "albert";

    fn layout() -> Layout {
        Layout::Pairs(PairConfig { task: SentenceTask::SentenceOrder, ..PairConfig::default() })
    }

    fn masking() -> Masking {
        MaskingKind::Ngram.into()
    }

    fn tokenizer() -> TokenizerKind {
        TokenizerKind::Unigram
    }

    fn preset(preset: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<AlbertConfig, ConfigError> {
        AlbertConfig::preset(preset, vocab_size, max_len, pad_token_id)
    }
}

/// `cargo xtask train albert`: Albert's recipe above, SpanBERT's (`--objective span`), masked LM
/// alone (`--objective mlm`), or a student distilled from `--teacher`.
impl sesame_train::pretraining::Pretrain for Albert {
    const OBJECTIVE: &'static str = "n-gram masked LM + sentence-order prediction, Unigram (SentencePiece) vocabulary";

    fn pretrain(job: &sesame_train::pretraining::PretrainOptions, device: burn::tensor::Device) -> Result<sesame_train::pretraining::Pretrained, String> {
        sesame_train::pretraining::pretrain_masked_lm::<Self, crate::AlbertModel>(job, device)
    }

    fn export(spec: &sesame_train::pretraining::run::RunSpec) -> Result<sesame_train::pretraining::run::ExportFn, String> {
        sesame_train::pretraining::export_masked_lm::<Self, crate::AlbertModel>(spec)
    }
}
