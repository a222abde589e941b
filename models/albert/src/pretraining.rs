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
