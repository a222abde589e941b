//! BERT's pre-training recipe on the shared masked-LM loop (`sesame_train::pretraining`):
//! sentence pairs with next-sentence prediction (Google's `create_pretraining_data.py`),
//! token-level 15% masking with 80/10/10, masks drawn anew for every batch, WordPiece; and
//! SpanBERT's ([`SpanBert`]): span masking, MLM + span-boundary objective, no NSP.

use sesame_layers::ConfigError;
use sesame_text::{PairConfig, TokenizerKind};
use sesame_train::pretraining::{Layout, Masking, MaskingKind, Pretraining, PretrainingFamily, SpanBoundaryRecipe};

pub use sesame_train::pretraining::{pretraining_step, DataError, PretrainingBatch};

use crate::{Bert, BertConfig, BertForPreTraining, BertModel};

/// BERT pre-training (MLM + NSP) as a task for the shared trainer.
pub type BertPretraining = Pretraining<BertForPreTraining>;

/// SpanBERT (Joshi et al. 2020): BERT pre-trained on single sequences with span masking and
/// the span-boundary objective beside MLM (`cargo xtask train bert --objective span`).
pub type SpanBert = SpanBoundaryRecipe<Bert, BertModel>;

impl PretrainingFamily for Bert {
    type Model = BertForPreTraining;
    const NAME: &'static str = "bert";

    fn layout() -> Layout {
        Layout::Pairs(PairConfig::default())
    }

    fn masking() -> Masking {
        MaskingKind::Token.into()
    }

    fn tokenizer() -> TokenizerKind {
        TokenizerKind::WordPiece
    }

    fn preset(preset: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<BertConfig, ConfigError> {
        BertConfig::preset(preset, vocab_size, max_len, pad_token_id)
    }
}

/// `cargo xtask train bert`: Bert's recipe above, SpanBERT's (`--objective span`), masked LM
/// alone (`--objective mlm`), or a student distilled from `--teacher`.
impl sesame_train::pretraining::Pretrain for Bert {
    const OBJECTIVE: &'static str = "masked LM + next-sentence prediction on sentence pairs, WordPiece";

    fn pretrain(job: &sesame_train::pretraining::PretrainOptions, device: burn::tensor::Device) -> Result<sesame_train::pretraining::Pretrained, String> {
        sesame_train::pretraining::pretrain_masked_lm::<Self, crate::BertModel>(job, device)
    }

    fn export(spec: &sesame_train::pretraining::run::RunSpec) -> Result<sesame_train::pretraining::run::ExportFn, String> {
        sesame_train::pretraining::export_masked_lm::<Self, crate::BertModel>(spec)
    }
}
