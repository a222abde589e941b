//! RoBERTa's pre-training recipe (Liu et al. 2019, section 4) on the shared masked-LM loop
//! (`sesame_train::pretraining`): masked LM only (no NSP), masks drawn anew for every batch
//! (dynamic masking), inputs packed with full sentences that may cross document boundaries
//! (FULL-SENTENCES; DOC-SENTENCES is `Layout::Packed { packing: Packing::DocSentences, .. }`),
//! byte-level BPE.

use sesame_layers::ConfigError;
use sesame_text::{Packing, TokenizerKind};
use sesame_train::pretraining::{Layout, Masking, MaskingKind, Pretraining, PretrainingFamily};

use crate::{Roberta, RobertaConfig, RobertaForMaskedLM};

/// RoBERTa pre-training (dynamic MLM on packed sequences) as a task for the shared trainer.
pub type RobertaPretraining = Pretraining<RobertaForMaskedLM>;

impl PretrainingFamily for Roberta {
    type Model = RobertaForMaskedLM;
    const NAME: &'static str = "roberta";

    fn layout() -> Layout {
        Layout::Packed { packing: Packing::FullSentences, max_seq_len: 512 }
    }

    fn masking() -> Masking {
        MaskingKind::Token.into()
    }

    fn tokenizer() -> TokenizerKind {
        TokenizerKind::ByteLevelBpe
    }

    fn preset(preset: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<RobertaConfig, ConfigError> {
        RobertaConfig::preset(preset, vocab_size, max_len, pad_token_id)
    }
}

/// `cargo xtask train roberta`: Roberta's recipe above, SpanBERT's (`--objective span`), masked LM
/// alone (`--objective mlm`), or a student distilled from `--teacher`.
impl sesame_train::pretraining::Pretrain for Roberta {
    const OBJECTIVE: &'static str = "dynamic masked LM on packed full sentences, byte-level BPE";

    fn pretrain(job: &sesame_train::pretraining::PretrainOptions, device: burn::tensor::Device) -> Result<sesame_train::pretraining::Pretrained, String> {
        sesame_train::pretraining::pretrain_masked_lm::<Self, crate::RobertaModel>(job, device)
    }

    fn export(spec: &sesame_train::pretraining::run::RunSpec) -> Result<sesame_train::pretraining::run::ExportFn, String> {
        sesame_train::pretraining::export_masked_lm::<Self, crate::RobertaModel>(spec)
    }
}
