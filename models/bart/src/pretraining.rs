//! BART's pre-training (Lewis et al. 2019; fairseq's `denoising` task) for the shared trainer:
//! the corpus laid out in blocks of whole sentences (`complete_doc`), each block corrupted
//! anew every time it is seen by `sesame_text::noising` (fairseq's `DenoisingDataset`, by
//! default BART's recipe: sentence permutation, then text infilling of 30% of the words in
//! Poisson(3.5) spans, each span one `<mask>`), and the model trained to reconstruct the block
//! with the cross-entropy of every target token (`BartForConditionalGeneration` with
//! `labels`).
//!
//! Unlike fairseq, each example's noise is drawn from a seed fixed by the batch and row, so a
//! run resumed from a checkpoint sees the same noise, and `--seed` reproduces a run.
//!
//! Besides the loss, every step reports the token accuracy and the loss and accuracy on the
//! *infilled* tokens: the target tokens the source no longer shows (masked, replaced or
//! deleted), which the model can only predict from context. The held-out baselines are the
//! unigram loss (every token by its frequency), and `copy_unigram_loss`, an oracle that copies
//! every token the source still shows for free and predicts the infilled ones by frequency:
//! a model below it has learned more than copying.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use sesame_layers::loss::{cross_entropy_rows, CrossEntropy, IGNORE_INDEX};
use sesame_layers::{shift_tokens_right, OutputOptions, Seq2SeqInput};
use sesame_text::{
    mass, mix_seeds, sentence_blocks, tokenize_documents, unigram_nll, Corpus, DenoisingConfig, DenoisingError, DenoisingExample, EpochStream, MassConfig,
    NoiseVocab, Tokenizer, TokenizerError, TokenizerKind,
};
use sesame_layers::{HfConfig, PretrainedModel};
use sesame_train::pretraining::run::{corpus_err, err, fit_and_export, open_run, preset_model, read_corpus, run_model, run_tokenizer, RunSpec};
use sesame_train::pretraining::{read_back, refuse_other_corruptions, Corruption, DataError, LossOn, Objective, PretrainOptions, Pretrained};
use sesame_train::{Metric, StepOutput, TrainTask};

use crate::{BartConfig, BartForConditionalGeneration};

/// The family's name in messages and run directories.
pub const NAME: &str = "bart";

/// The tokenizer BART trains when none is given: byte-level BPE with `<s> <pad> </s> <unk>
/// <mask>`, as GPT-2's and RoBERTa's.
pub const TOKENIZER: TokenizerKind = TokenizerKind::ByteLevelBpe;

/// Why the denoising task could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DenoisingDataError {
    /// Too little text, a tokenizer error, or a vocabulary that does not fit.
    #[error(transparent)]
    Data(#[from] DataError),
    /// A noise setting out of range.
    #[error(transparent)]
    Noise(#[from] DenoisingError),
    /// A MASS setting out of range.
    #[error("MASS: {0}")]
    Mass(String),
    /// The tokenizer's special token differs from the model's.
    #[error("the tokenizer's {token} is id {tokenizer}, but config.json's {field} is {model:?}")]
    SpecialToken {
        /// The token (`<s>`, `</s>`, `<pad>`).
        token: String,
        /// Its id in the tokenizer.
        tokenizer: u32,
        /// The config field.
        field: &'static str,
        /// The config's value.
        model: Option<usize>,
    },
}

impl From<TokenizerError> for DenoisingDataError {
    fn from(e: TokenizerError) -> Self {
        Self::Data(DataError::Tokenizer(e))
    }
}

/// One denoising batch on a device.
#[derive(Clone, Debug)]
pub struct DenoisingBatch {
    /// Corrupted sources `[batch, src]`, padded.
    pub input_ids: Tensor<2, Int>,
    /// Source padding mask `[batch, src]` (1 = token).
    pub attention_mask: Tensor<2, Int>,
    /// The uncorrupted blocks `[batch, tgt]`, `-100` after each block's end (MASS: outside
    /// the fragment too).
    pub labels: Tensor<2, Int>,
    /// The decoder's inputs `[batch, tgt]` (MASS); `None`: the labels shifted right (BART).
    pub decoder_input_ids: Option<Tensor<2, Int>>,
    /// `[batch, tgt]`: 1 at the target tokens the source no longer shows (infilled), else 0.
    pub infilled: Tensor<2>,
    /// Target tokens (predicted, non-padding).
    pub tokens: usize,
}

/// One block corrupted for the batch: the source, the decoder's input when it is not the
/// target shifted right, which target tokens are predicted and which the source still shows.
#[derive(Clone, Debug)]
struct Corrupted {
    source: Vec<u32>,
    decoder_input: Option<Vec<u32>>,
    predicted: Vec<bool>,
    kept: Vec<bool>,
}

/// BART's denoising pre-training as a task for the shared trainer.
#[derive(Clone, Debug)]
pub struct Denoising {
    train: Vec<DenoisingExample>,
    held_out: Vec<DenoisingExample>,
    noise: DenoisingConfig,
    /// MASS instead of BART's noise.
    mass: Option<MassConfig>,
    /// BART's noise, with the loss on the infilled tokens only (`with_infilled_loss`).
    infilled_loss: bool,
    vocab: NoiseVocab,
    pad: u32,
    /// The decoder's first token (`shift_tokens_right`).
    decoder_start: usize,
    batch_size: usize,
    seed: u64,
    stream: EpochStream,
    /// -ln of each token's add-one-smoothed frequency in the training text.
    unigram_nll: Arc<Vec<f64>>,
}

impl Denoising {
    /// Blocks of at most `max_len` tokens from `train` and `held_out` text, corrupted by
    /// `noise` when batched. The tokenizer's `<s>`, `<pad>` and `</s>` must be `config`'s.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        train: &Corpus,
        held_out: &Corpus,
        tokenizer: &Tokenizer,
        config: &BartConfig,
        noise: DenoisingConfig,
        max_len: usize,
        batch_size: usize,
        seed: u64,
    ) -> Result<Self, DenoisingDataError> {
        noise.validate()?;
        if tokenizer.vocab_size() > config.vocab_size {
            return Err(DataError::VocabMismatch { tokenizer: tokenizer.vocab_size(), model: config.vocab_size }.into());
        }
        let special = tokenizer.special_tokens();
        let id = |t: &str| tokenizer.token_to_id(t).ok_or_else(|| TokenizerError::MissingSpecialToken { token: t.to_string() });
        let (bos, eos, pad) = (id(&special.cls)?, id(&special.sep)?, special.pad.1);
        for (token, tokenizer, field, model) in [
            (&special.cls, bos, "bos_token_id", config.bos_token_id),
            (&special.sep, eos, "eos_token_id", config.eos_token_id),
            (&special.pad.0, pad, "pad_token_id", config.pad_token_id),
        ] {
            if model != Some(tokenizer as usize) {
                return Err(DenoisingDataError::SpecialToken { token: token.clone(), tokenizer, field, model });
            }
        }
        // fairseq separates sentences by the id of `.`; the blocks here know their sentences.
        let full_stop_id = tokenizer.token_to_id(".").unwrap_or(eos);
        let vocab = NoiseVocab { mask_id: tokenizer.mask_token_id()?, full_stop_id, vocab_size: tokenizer.vocab_size() as u32 };
        let train = tokenize_documents(train, tokenizer)?;
        let unigram_nll = Arc::new(unigram_nll(&train, tokenizer.vocab_size()));
        let train = sentence_blocks(&train, max_len, bos, eos);
        let held_out = sentence_blocks(&tokenize_documents(held_out, tokenizer)?, max_len, bos, eos);
        if train.len() < batch_size.max(1) {
            return Err(DataError::TooSmall { examples: train.len(), batch_size }.into());
        }
        Ok(Self {
            stream: EpochStream::new(train.len(), seed),
            train,
            held_out,
            noise,
            mass: None,
            infilled_loss: false,
            vocab,
            pad,
            decoder_start: config.decoder_start_id(),
            batch_size,
            seed,
            unigram_nll,
        })
    }

    /// MASS's objective instead of BART's noise (Song et al. 2019): one fragment of each block
    /// masked in the source, the decoder predicting it alone (`sesame_text::mass`).
    pub fn with_mass(mut self, config: MassConfig) -> Result<Self, DenoisingDataError> {
        config.validate().map_err(DenoisingDataError::Mass)?;
        self.mass = Some(config);
        Ok(self)
    }

    /// BART's noise as before, but the loss covers only the target tokens the source no longer
    /// shows (masked, replaced or deleted), as MASS's covers only its fragment; the decoder
    /// still reads the whole block shifted right. Not in the paper: a probe of what the copied
    /// tokens' share of BART's loss does to its representations.
    pub fn with_infilled_loss(mut self) -> Self {
        self.infilled_loss = true;
        self
    }

    /// Corrupt `example` by the task's objective.
    fn corrupt(&self, example: &DenoisingExample, rng: &mut StdRng) -> Corrupted {
        match &self.mass {
            Some(config) => {
                let m = mass(&example.ids, config, &self.vocab, rng);
                let predicted = (0..example.ids.len()).map(|i| m.fragment.contains(&i)).collect();
                let kept = (0..example.ids.len()).map(|i| m.shown(&example.ids, i)).collect();
                Corrupted { source: m.source, decoder_input: Some(m.decoder_input), predicted, kept }
            }
            None => {
                let n = example.denoise(&self.noise, &self.vocab, rng);
                if self.infilled_loss {
                    // The labels skip the kept tokens, so the decoder's input is not the
                    // labels shifted right: it is the block's, `shift_tokens_right`'s layout.
                    let start = self.decoder_start as u32;
                    let decoder_input = std::iter::once(start).chain(example.ids[..example.ids.len() - 1].iter().copied()).collect();
                    let predicted = n.kept.iter().map(|&kept| !kept).collect();
                    return Corrupted { source: n.source, decoder_input: Some(decoder_input), predicted, kept: n.kept };
                }
                Corrupted { source: n.source, decoder_input: None, predicted: vec![true; example.ids.len()], kept: n.kept }
            }
        }
    }

    /// Number of training blocks (one epoch).
    pub fn num_train_examples(&self) -> usize {
        self.train.len()
    }

    /// The held-out blocks with their fixed noise, in batches.
    fn held_out_noised(&self) -> Vec<Vec<(&DenoisingExample, Corrupted)>> {
        self.held_out
            .chunks(self.batch_size.max(1))
            .enumerate()
            .map(|(i, chunk)| {
                let seed = |row: usize| mix_seeds(u64::MAX - i as u64, row as u64);
                chunk.iter().enumerate().map(|(row, e)| (e, self.corrupt(e, &mut StdRng::seed_from_u64(seed(row))))).collect()
            })
            .collect()
    }

    /// Pad the corrupted sources and their targets into a batch on `device`.
    fn collate(&self, rows: &[(&DenoisingExample, Corrupted)], device: &Device) -> DenoisingBatch {
        let b = rows.len();
        let src = rows.iter().map(|(_, c)| c.source.len()).max().unwrap_or(1);
        let tgt = rows.iter().map(|(e, _)| e.ids.len()).max().unwrap_or(1);
        let (mut ids, mut mask) = (vec![i64::from(self.pad); b * src], vec![0i64; b * src]);
        let (mut labels, mut infilled) = (vec![IGNORE_INDEX; b * tgt], vec![0f32; b * tgt]);
        let mut decoder = rows.iter().any(|(_, c)| c.decoder_input.is_some()).then(|| vec![i64::from(self.pad); b * tgt]);
        for (r, (example, corrupted)) in rows.iter().enumerate() {
            for (k, &t) in corrupted.source.iter().enumerate() {
                ids[r * src + k] = i64::from(t);
                mask[r * src + k] = 1;
            }
            for (k, &t) in example.ids.iter().enumerate().filter(|&(k, _)| corrupted.predicted[k]) {
                labels[r * tgt + k] = i64::from(t);
                infilled[r * tgt + k] = if corrupted.kept[k] { 0.0 } else { 1.0 };
            }
            if let (Some(decoder), Some(input)) = (decoder.as_mut(), &corrupted.decoder_input) {
                for (k, &t) in input.iter().enumerate() {
                    decoder[r * tgt + k] = i64::from(t);
                }
            }
        }
        let int = |v: Vec<i64>, cols| Tensor::<2, Int>::from_data(TensorData::new(v, [b, cols]), device);
        DenoisingBatch {
            input_ids: int(ids, src),
            attention_mask: int(mask, src),
            labels: int(labels, tgt),
            decoder_input_ids: decoder.map(|d| int(d, tgt)),
            infilled: Tensor::from_data(TensorData::new(infilled, [b, tgt]), device),
            tokens: rows.iter().map(|(_, c)| c.predicted.iter().filter(|&&p| p).count()).sum(),
        }
    }
}

impl TrainTask for Denoising {
    type Model = BartForConditionalGeneration;
    type Batch = DenoisingBatch;
    type State = ();

    /// Batch `index`: the stream's examples, row `r` noised from a seed of (`seed`, `index`, `r`).
    fn train_batch(&self, index: u64, device: &Device) -> DenoisingBatch {
        let rows: Vec<(&DenoisingExample, Corrupted)> = self
            .stream
            .batch(index, self.batch_size)
            .into_iter()
            .enumerate()
            .map(|(row, (i, _))| {
                let mut rng = StdRng::seed_from_u64(mix_seeds(mix_seeds(self.seed, index), row as u64));
                (&self.train[i], self.corrupt(&self.train[i], &mut rng))
            })
            .collect();
        self.collate(&rows, device)
    }

    fn held_out_batches(&self, device: &Device) -> Vec<DenoisingBatch> {
        self.held_out_noised().iter().map(|rows| self.collate(rows, device)).collect()
    }

    /// `unigram_loss`: every held-out target token predicted by its frequency in the training
    /// text; `copy_unigram_loss`: the tokens the source still shows copied at no cost, the
    /// infilled ones by frequency (the lower of the two); `unigram_infill_loss`: the infilled
    /// tokens alone by frequency, beside the model's `infill_loss`.
    fn baselines(&self) -> std::collections::BTreeMap<String, f64> {
        let (mut all, mut infilled, mut tokens, mut infilled_tokens) = (0.0, 0.0, 0usize, 0usize);
        for (example, corrupted) in self.held_out_noised().iter().flatten() {
            for ((&t, &kept), _) in example.ids.iter().zip(&corrupted.kept).zip(&corrupted.predicted).filter(|(_, &predicted)| predicted) {
                let nll = self.unigram_nll.get(t as usize).copied().unwrap_or(f64::NAN);
                all += nll;
                tokens += 1;
                if !kept {
                    infilled += nll;
                    infilled_tokens += 1;
                }
            }
        }
        if tokens == 0 {
            return Default::default();
        }
        let mut baselines: std::collections::BTreeMap<String, f64> =
            [("unigram_loss".to_string(), all / tokens as f64), ("copy_unigram_loss".to_string(), infilled / tokens as f64)].into();
        if infilled_tokens > 0 {
            baselines.insert("unigram_infill_loss".into(), infilled / infilled_tokens as f64);
        }
        baselines
    }

    fn step(&self, model: &BartForConditionalGeneration, batch: DenoisingBatch) -> StepOutput {
        denoising_step(model, batch, self.decoder_start)
    }
}

/// Loss and metrics of `model` on `batch`: the mean cross-entropy of the target tokens (HF's
/// loss with `labels`), `perplexity`, `token_accuracy`, and `infill_loss` / `infill_accuracy`
/// over the tokens the source no longer shows. The decoder reads the batch's decoder inputs
/// (MASS), or the targets shifted right after `decoder_start`.
pub fn denoising_step(model: &BartForConditionalGeneration, batch: DenoisingBatch, decoder_start: usize) -> StepOutput {
    let [b, t] = batch.labels.dims();
    let decoder_input_ids = match batch.decoder_input_ids {
        Some(ids) => ids,
        None => shift_tokens_right(batch.labels.clone(), model.model.pad_token_id, decoder_start),
    };
    let input = Seq2SeqInput::new(batch.input_ids).with_attention_mask(batch.attention_mask).with_decoder_input_ids(decoder_input_ids);
    let logits = model.forward(input, None, OutputOptions::default()).logits;
    let valid = batch.labels.clone().not_equal_elem(IGNORE_INDEX);
    let safe = batch.labels.clone().mask_fill(valid.clone().bool_not(), 0);
    let vocab = logits.dims()[2];
    let CrossEntropy { loss, row_nll } = cross_entropy_rows(logits.clone().reshape([b * t, vocab]), batch.labels.reshape([b * t]), IGNORE_INDEX);
    let nll = row_nll.reshape([b, t]);
    let correct = logits.argmax(2).reshape([b, t]).equal(safe).bool_and(valid.clone()).float();
    let (valid, infilled) = (valid.float(), batch.infilled);
    let count = valid.sum();
    let sums = Tensor::cat(
        vec![
            count,
            correct.clone().sum(),
            infilled.clone().sum(),
            (nll * infilled.clone()).sum().detach(),
            (correct * infilled).sum(),
            loss.clone().detach(),
        ],
        0,
    );
    // A failed read-back (device error) leaves NaN metrics; the trainer reports the error when
    // it reads the loss.
    let [tokens, correct, infilled, infill_nll, infill_correct, mean] = read_back(sums, f64::NAN)[..] else { unreachable!("six sums") };
    let mut metrics = vec![
        Metric::exp_mean("perplexity", mean * tokens, tokens),
        Metric::mean("token_accuracy", correct, tokens),
    ];
    if infilled > 0.0 {
        metrics.push(Metric::mean("infill_loss", infill_nll, infilled));
        metrics.push(Metric::mean("infill_accuracy", infill_correct, infilled));
    }
    StepOutput { loss, metrics, tokens: batch.tokens, predictions: None }
}

/// Default optimizer steps of a BART run.
pub const STEPS: u64 = 1600;

/// Pre-train BART (`cargo xtask train bart`; `--objective mass`): denoising, or MASS when
/// `job.objective` says so, on blocks of whole sentences of `job.corpus`, with the shared
/// trainer's progress, checkpoints, resume and export. The exported model is a
/// `BartForConditionalGeneration` that transformers loads.
pub fn pretrain(job: &PretrainOptions, device: Device) -> Result<Pretrained, String> {
    let job = &job.resolved()?;
    job.check()?;
    let instead = "BART's noise is set by --mask, --mask-length, --permute-sentences, …";
    refuse_other_corruptions(job, Corruption::Noise, instead)?;
    if job.teacher.is_some() {
        return Err(format!("--teacher distils a masked LM; {instead}"));
    }
    let infilled_loss = job.noise.loss_on == Some(LossOn::Infilled);
    let mass = match job.objective {
        _ if job.objective != Some(Objective::Mass) && job.mass_fraction.is_some() => return Err("--mass-fraction is for --objective mass".into()),
        None => None,
        Some(Objective::Mass) if job.noise.loss_on.is_some() => return Err("--loss-on is for BART's noise; --objective mass's loss covers its fragment alone".into()),
        Some(Objective::Mass) => match job.noise.given() {
            Some(flag) => return Err(format!("{flag} is one of BART's noise settings; --objective mass masks one fragment of each block (--mass-fraction)")),
            None => Some(MassConfig { fraction: job.mass_fraction.unwrap_or(MassConfig::default().fraction), ..MassConfig::default() }),
        },
        Some(other) => return Err(format!("--objective {} is for the masked-LM families; bart trains with its own denoising or --objective mass", other.name())),
    };
    let noise = job.noise.config()?;
    if infilled_loss && noise.mask == 0.0 {
        return Err("--loss-on infilled needs --mask above 0: with nothing masked there is nothing to infill".into());
    }
    let steps = job.steps.unwrap_or(STEPS);
    let corruption = match &mass {
        Some(m) => format!("MASS {m:?}"),
        None if infilled_loss => format!("{noise:?}, loss on the infilled tokens"),
        None => format!("{noise:?}"),
    };
    let spec = RunSpec::new(job, corruption.clone(), "sentence blocks (complete_doc)".into());
    let out = &open_run(job, NAME, &spec)?;
    let (train_text, held_out_text) = read_corpus(job)?;
    let (tokenizer, tok_config) = run_tokenizer(job, out, TOKENIZER, &train_text)?;
    let train_device = device.autodiff();
    let special = |t: &str| tokenizer.token_to_id(t).map(|id| id as usize).ok_or_else(|| format!("the tokenizer has no {t}"));
    let ids = [special(&tokenizer.special_tokens().cls)?, tokenizer.special_tokens().pad.1 as usize, special(&tokenizer.special_tokens().sep)?];
    let (model, config) = run_model::<BartForConditionalGeneration>(job, out, &train_device, || {
        preset_model(&train_device, BartConfig::preset(job.preset(), tokenizer.vocab_size(), job.seq_len.max(64), ids))
    })?;
    if job.seq_len > config.max_position_embeddings {
        return Err(format!("--seq-len {} exceeds the model's {} positions", job.seq_len, config.max_position_embeddings));
    }
    let mut task = Denoising::new(&train_text, &held_out_text, &tokenizer, &config, noise.clone(), job.seq_len, job.batch_size, job.seed).map_err(|e| corpus_err(job, e))?;
    if let Some(mass) = mass {
        task = task.with_mass(mass).map_err(err)?;
    }
    if infilled_loss {
        task = task.with_infilled_loss();
    }
    eprintln!(
        "model: {}, {} parameters; {} training blocks of whole sentences, {corruption}; {} steps of {} x {}",
        BartForConditionalGeneration::architecture(),
        model.num_params(),
        task.num_train_examples(),
        steps,
        job.grad_accum,
        job.batch_size
    );
    fit_and_export(job, steps, out, &task, model, &train_device, (&tokenizer, &tok_config), |model, dir| {
        model.save_pretrained(&config, dir)?;
        Ok(vec![dir.to_path_buf()])
    })
}

/// `export` of a BART run: the checkpoint's model (its config from the run) in HF layout.
pub fn export(run: &Path, checkpoint: &Path, out: &Path, device: &Device) -> Result<Vec<PathBuf>, String> {
    let config = BartConfig::from_dir(run).map_err(err)?;
    let model = BartForConditionalGeneration::init(&config, device).try_load_file(checkpoint).map_err(err)?;
    model.save_pretrained(&config, out).map_err(err)?;
    Ok(vec![out.to_path_buf()])
}

/// `cargo xtask train bart`: denoising (or MASS, `--objective mass`) ([`pretrain`]), exported by [`export`].
impl sesame_train::pretraining::Pretrain for crate::Bart {
    const OBJECTIVE: &'static str = "denoising encoder-decoder: text infilling (Poisson spans) + sentence permutation, byte-level BPE";

    fn pretrain(job: &PretrainOptions, device: Device) -> Result<Pretrained, String> {
        pretrain(job, device)
    }

    fn export(_: &RunSpec) -> Result<sesame_train::pretraining::run::ExportFn, String> {
        Ok(export)
    }
}
