//! UniLM's pre-training (Dong et al. 2019, section 2.3) on the shared pre-training task: one
//! BERT trained as four language models. Every batch draws one objective: bidirectional LM
//! 1/3 of the time (with next-sentence prediction, as BERT), sequence-to-sequence LM 1/3
//! (the first segment is the source, the second the target), left-to-right and right-to-left
//! LM 1/6 each; the batch then runs under that objective's self-attention mask and token types.
//! All four predict the same cloze: 15% of the tokens, one word 80% of the time and a bigram
//! or trigram 20%, replaced 80/10/10. Sentence pairs as BERT's, WordPiece.

use std::path::Path;
use std::sync::Arc;

use burn::prelude::*;
use rand::rngs::StdRng;
use rand::Rng;
use sesame_layers::{
    CheckpointError, CheckpointSpec, ConfigError, Pretrained, PretrainedError, PretrainedModel,
    WeightFiles,
};
use sesame_text::{choose_spans, MaskingConfig, MaskingInput, MaskingStrategy, PairConfig, TokenizerKind};
use sesame_train::pretraining::{pretraining_step, Layout, Masking, PretrainingBatch, PretrainingFamily, PretrainingModel};
use sesame_train::{Metric, StepOutput};

use crate::config::{Unilm, UnilmConfig};
use crate::heads::UnilmForPreTraining;
use crate::model::UnilmMask;

/// UniLM's cloze masking (section 2.3): 80% of the time one word, 20% of the time a bigram or
/// a trigram (equally likely), one 80/10/10 decision per span.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UnilmMasking {
    /// Fractions.
    pub config: MaskingConfig,
}

impl UnilmMasking {
    /// Draw a span length: 1 with p 0.8, 2 and 3 with p 0.1 each.
    pub fn span_length(&self, rng: &mut StdRng) -> usize {
        match rng.random::<f64>() {
            u if u < 0.8 => 1,
            u if u < 0.9 => 2,
            _ => 3,
        }
    }
}

impl MaskingStrategy for UnilmMasking {
    fn choose(&self, input: MaskingInput<'_>, budget: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
        choose_spans(input, budget, rng, |rng| self.span_length(rng))
    }

    fn config(&self) -> MaskingConfig {
        self.config
    }
}

/// The language model one batch trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Objective {
    /// Bidirectional LM (+ next-sentence prediction).
    Bidirectional,
    /// Sequence-to-sequence LM: first segment the source, second the target.
    SeqToSeq,
    /// Left-to-right LM.
    LeftToRight,
    /// Right-to-left LM.
    RightToLeft,
}

impl Objective {
    /// The four objectives.
    pub const ALL: [Objective; 4] = [Objective::Bidirectional, Objective::SeqToSeq, Objective::LeftToRight, Objective::RightToLeft];

    /// The objective of a batch with `seed`, in the paper's proportions: 2/6 bidirectional,
    /// 2/6 sequence-to-sequence, 1/6 left-to-right, 1/6 right-to-left.
    pub fn of(seed: u64) -> Self {
        match seed % 6 {
            0 | 1 => Objective::Bidirectional,
            2 | 3 => Objective::SeqToSeq,
            4 => Objective::LeftToRight,
            _ => Objective::RightToLeft,
        }
    }

    /// The metric prefix of the objective.
    pub fn name(self) -> &'static str {
        match self {
            Objective::Bidirectional => "bidirectional",
            Objective::SeqToSeq => "seq_to_seq",
            Objective::LeftToRight => "left_to_right",
            Objective::RightToLeft => "right_to_left",
        }
    }

    /// The self-attention mask for rows whose first segment (`[CLS] A [SEP]`) has `first_len` tokens.
    pub fn mask(self, first_len: &[usize]) -> UnilmMask {
        match self {
            Objective::Bidirectional => UnilmMask::Bidirectional,
            Objective::SeqToSeq => UnilmMask::SeqToSeq { source_len: first_len.to_vec() },
            Objective::LeftToRight => UnilmMask::LeftToRight,
            Objective::RightToLeft => UnilmMask::RightToLeft,
        }
    }
}

/// BERT's pre-training model (cloze + NSP) trained with UniLM's four objectives; saved as the
/// `BertForPreTraining` it is.
#[derive(Module, Debug)]
pub struct UnilmPreTraining {
    /// The model.
    pub model: UnilmForPreTraining,
}

impl UnilmPreTraining {
    /// `batch` as objective `objective` sees it: its mask as the attention restriction, its
    /// token types, and no sentence labels except under the bidirectional LM.
    pub fn prepare(batch: PretrainingBatch, objective: Objective) -> PretrainingBatch {
        let [b, s] = batch.input.input_ids.dims();
        let device = batch.input.input_ids.device();
        let ones = || Tensor::<2, Int>::ones([b, s], &device);
        let types = batch.input.token_type_ids.clone().unwrap_or_else(|| ones().zeros_like());
        let keep = batch.input.attention_mask.clone().unwrap_or_else(ones);
        // The first segment: non-padding tokens of type 0.
        let first = types.equal_elem(0).int() * keep;
        let first_len: Vec<usize> = first.sum_dim(1).into_data().convert::<i64>().iter::<i64>().map(|n| n as usize).collect();
        let mask = objective.mask(&first_len);
        let mut input = mask.apply(batch.input);
        input.token_type_ids = Some(mask.token_type_ids(&first_len, s, &device));
        let sentence_labels = match objective {
            Objective::Bidirectional => batch.sentence_labels,
            _ => batch.sentence_labels.full_like(-100),
        };
        PretrainingBatch { input, sentence_labels, ..batch }
    }
}

impl PretrainedModel for UnilmPreTraining {
    type Config = UnilmConfig;

    fn architecture() -> String {
        UnilmForPreTraining::architecture()
    }

    fn init(config: &UnilmConfig, device: &Device) -> Self {
        Self { model: UnilmForPreTraining::init(config, device) }
    }

    fn checkpoint_spec(config: &UnilmConfig) -> CheckpointSpec {
        UnilmForPreTraining::checkpoint_spec(config)
    }

    fn from_weights(config: UnilmConfig, files: &WeightFiles, device: &Device) -> Result<Pretrained<Self, UnilmConfig>, PretrainedError> {
        let loaded = UnilmForPreTraining::from_weights(config, files, device)?;
        Ok(Pretrained { model: Self { model: loaded.model }, config: loaded.config, report: loaded.report })
    }

    fn save_pretrained(&self, config: &UnilmConfig, dir: &Path) -> Result<(), CheckpointError> {
        self.model.save_pretrained(config, dir)
    }
}

impl PretrainingModel for UnilmPreTraining {
    const SENTENCE_TASK: bool = true;

    /// The batch under its objective; BERT's cloze (+ NSP under the bidirectional LM) loss and
    /// metrics, and the cloze loss per objective (`{objective}_mlm_loss`). Evaluating (no
    /// autodiff), every held-out batch is also run under the other three objectives, so each
    /// objective's held-out loss (and NSP) covers the whole held-out set.
    fn pretraining_step(&self, batch: PretrainingBatch, sentence_metric: Option<&str>) -> StepOutput {
        let objective = Objective::of(batch.seed);
        let evaluating = !batch.input.input_ids.device().is_autodiff();
        let others: Vec<(Objective, PretrainingBatch)> = match evaluating {
            true => Objective::ALL.into_iter().filter(|&o| o != objective).map(|o| (o, batch.clone())).collect(),
            false => Vec::new(),
        };
        let mut out = self.step_under(batch, objective, sentence_metric);
        for (other, batch) in others {
            let extra = self.step_under(batch, other, sentence_metric);
            // Its own cloze loss, and NSP under the bidirectional LM; the overall metrics stay the batch's.
            out.metrics.extend(extra.metrics.into_iter().filter(|m| !["mlm_loss", "perplexity", "mlm_accuracy"].contains(&m.name.as_str())));
        }
        out
    }
}

impl UnilmPreTraining {
    /// The step of `batch` under `objective`, with its `{objective}_mlm_loss`.
    fn step_under(&self, batch: PretrainingBatch, objective: Objective, sentence_metric: Option<&str>) -> StepOutput {
        let batch = Self::prepare(batch, objective);
        let sentence_metric = (objective == Objective::Bidirectional).then_some(sentence_metric).flatten();
        let mut out = pretraining_step(&self.model, batch, sentence_metric);
        if let Some(mlm) = out.metrics.iter().find(|m| m.name == "mlm_loss") {
            let per_objective = Metric::mean(&format!("{}_mlm_loss", objective.name()), mlm.sum, mlm.count);
            out.metrics.push(per_objective);
        }
        out
    }
}

impl PretrainingFamily for Unilm {
    type Model = UnilmPreTraining;
    const NAME: &'static str = "unilm";

    fn layout() -> Layout {
        Layout::Pairs(PairConfig::default())
    }

    fn masking() -> Masking {
        Masking::Family { name: "Unilm", strategy: || Arc::new(UnilmMasking::default()) }
    }

    fn tokenizer() -> TokenizerKind {
        TokenizerKind::WordPiece
    }

    fn preset(preset: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<UnilmConfig, ConfigError> {
        UnilmConfig::preset(preset, vocab_size, max_len, pad_token_id)
    }
}

/// `cargo xtask train unilm`: Unilm's recipe above, SpanBERT's (`--objective span`), masked LM
/// alone (`--objective mlm`), or a student distilled from `--teacher`.
impl sesame_train::pretraining::Pretrain for Unilm {
    const OBJECTIVE: &'static str = "bidirectional, seq-to-seq, left-to-right and right-to-left LMs mixed per batch, cloze + NSP, WordPiece";

    fn pretrain(job: &sesame_train::pretraining::PretrainOptions, device: burn::tensor::Device) -> Result<sesame_train::pretraining::Pretrained, String> {
        sesame_train::pretraining::pretrain_masked_lm::<Self, crate::UnilmModel>(job, device)
    }

    fn export(spec: &sesame_train::pretraining::run::RunSpec) -> Result<sesame_train::pretraining::run::ExportFn, String> {
        sesame_train::pretraining::export_masked_lm::<Self, crate::UnilmModel>(spec)
    }
}
