//! BERT's pre-training objective: masked LM on sentence pairs plus next-sentence prediction,
//! with masks drawn anew for every batch (dynamic masking) by a pluggable strategy.

use std::sync::{Arc, Mutex};

use burn::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use sesame_layers::OutputOptions;
use sesame_text::{collate_pairs, sentence_pairs, Corpus, MaskVocab, MaskingStrategy, PairBatch, PairConfig, PairExample, PairFormat, Tokenizer, TokenizerError};
use sesame_train::{Metric, StepOutput, TrainTask};

use crate::{BertForPreTraining, BertInput, PreTrainingLabels};

/// Why pre-training data could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// Tokenization failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// Too little text.
    #[error("the corpus yields {examples} training pair(s), fewer than one batch of {batch_size}; add text or lower --batch-size")]
    TooSmall {
        /// Pairs built.
        examples: usize,
        /// Batch size.
        batch_size: usize,
    },
    /// The tokenizer's vocabulary does not fit the model.
    #[error("the tokenizer has {tokenizer} tokens but the model's vocab_size is {model}")]
    VocabMismatch {
        /// Tokenizer vocabulary size.
        tokenizer: usize,
        /// Model vocabulary size.
        model: usize,
    },
}

/// One pre-training batch on a device.
#[derive(Clone, Debug)]
pub struct PretrainingBatch {
    /// Masked input.
    pub input: BertInput,
    /// MLM targets `[batch, seq]` (-100 = not predicted).
    pub mlm_labels: Tensor<2, Int>,
    /// NSP targets `[batch]` (1 = random next sentence).
    pub nsp_labels: Tensor<1, Int>,
    /// Non-padding tokens.
    pub tokens: usize,
}

impl PretrainingBatch {
    /// Move host arrays to `device`.
    pub fn new(b: &PairBatch, device: &Device) -> Self {
        let t = |v: &Vec<i64>| Tensor::<2, Int>::from_data(TensorData::new(v.clone(), [b.batch, b.seq]), device);
        Self {
            input: BertInput::new(t(&b.input_ids)).with_attention_mask(t(&b.attention_mask)).with_token_type_ids(t(&b.token_type_ids)),
            mlm_labels: t(&b.mlm_labels),
            nsp_labels: Tensor::from_data(TensorData::new(b.pair_labels.clone(), [b.batch]), device),
            tokens: b.tokens,
        }
    }
}

/// The BERT pre-training task for the shared trainer.
#[derive(Clone)]
pub struct BertPretraining {
    train: Vec<PairExample>,
    held_out: Vec<PairExample>,
    format: PairFormat,
    vocab: MaskVocab,
    masking: Arc<dyn MaskingStrategy>,
    batch_size: usize,
    seed: u64,
    /// The shuffled pair order of the epoch last asked for (one shuffle per epoch, not per batch).
    order: Arc<Mutex<Option<(u64, Arc<Vec<usize>>)>>>,
}

impl std::fmt::Debug for BertPretraining {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertPretraining")
            .field("train_pairs", &self.train.len())
            .field("held_out_pairs", &self.held_out.len())
            .field("masking", &self.masking)
            .field("batch_size", &self.batch_size)
            .finish()
    }
}

fn tokenize(corpus: &Corpus, tokenizer: &Tokenizer) -> Result<Vec<Vec<sesame_text::Segment>>, TokenizerError> {
    corpus
        .documents
        .iter()
        .map(|doc| doc.iter().map(|s| tokenizer.tokenize(s)).filter(|s| !matches!(s, Ok(seg) if seg.ids.is_empty())).collect())
        .collect()
}

impl BertPretraining {
    /// Build sentence pairs from `train` and `held_out` text. Pairs are built once; masks are
    /// drawn per batch.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        train: &Corpus,
        held_out: &Corpus,
        tokenizer: &Tokenizer,
        model_vocab_size: usize,
        pairs: PairConfig,
        masking: Arc<dyn MaskingStrategy>,
        batch_size: usize,
        seed: u64,
    ) -> Result<Self, DataError> {
        if tokenizer.vocab_size() > model_vocab_size {
            return Err(DataError::VocabMismatch { tokenizer: tokenizer.vocab_size(), model: model_vocab_size });
        }
        let special = tokenizer.special_tokens();
        let id = |t: &str| tokenizer.token_to_id(t).ok_or_else(|| TokenizerError::MissingSpecialToken { token: t.to_string() });
        let format = PairFormat { cls: id(&special.cls)?, sep: id(&special.sep)?, pad: special.pad.1 };
        let vocab = MaskVocab { mask_id: tokenizer.mask_token_id()?, vocab_size: tokenizer.vocab_size() as u32, special_ids: tokenizer.special_ids() };
        let mut rng = StdRng::seed_from_u64(seed);
        let train = sentence_pairs(&tokenize(train, tokenizer)?, pairs, &mut rng);
        let held_out = sentence_pairs(&tokenize(held_out, tokenizer)?, pairs, &mut rng);
        if train.len() < batch_size.max(1) {
            return Err(DataError::TooSmall { examples: train.len(), batch_size });
        }
        Ok(Self { train, held_out, format, vocab, masking, batch_size, seed, order: Default::default() })
    }

    /// Number of training pairs (one epoch).
    pub fn num_train_pairs(&self) -> usize {
        self.train.len()
    }

    /// Collate `examples` with masks drawn from `rng_seed`.
    fn collate(&self, examples: &[&PairExample], rng_seed: u64) -> PairBatch {
        let mut rng = StdRng::seed_from_u64(rng_seed);
        collate_pairs(examples, self.format, self.masking.as_ref(), &self.vocab, &mut rng)
    }

    /// The order of training pairs in `epoch`: a seeded shuffle, computed once per epoch.
    fn epoch_order(&self, epoch: u64) -> Arc<Vec<usize>> {
        let mut cached = self.order.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((e, order)) = cached.as_ref() {
            if *e == epoch {
                return order.clone();
            }
        }
        let mut rng = StdRng::seed_from_u64(self.seed ^ (epoch.wrapping_add(1)).wrapping_mul(0xA24B_AED4_963E_E407));
        let mut order: Vec<usize> = (0..self.train.len()).collect();
        order.shuffle(&mut rng);
        let order = Arc::new(order);
        *cached = Some((epoch, order.clone()));
        order
    }
}

impl TrainTask for BertPretraining {
    type Model = BertForPreTraining;
    type Batch = PretrainingBatch;

    fn train_batch(&self, index: u64, device: &Device) -> PretrainingBatch {
        let n = self.train.len() as u64;
        let first = index * self.batch_size as u64;
        let mut examples = Vec::with_capacity(self.batch_size);
        let mut order = (first / n, self.epoch_order(first / n));
        for k in first..first + self.batch_size as u64 {
            if k / n != order.0 {
                order = (k / n, self.epoch_order(k / n));
            }
            examples.push(&self.train[order.1[(k % n) as usize]]);
        }
        PretrainingBatch::new(&self.collate(&examples, self.seed.wrapping_add(index.wrapping_mul(0x9E37_79B9))), device)
    }

    fn held_out_batches(&self, device: &Device) -> Vec<PretrainingBatch> {
        self.held_out
            .chunks(self.batch_size.max(1))
            .enumerate()
            .map(|(i, chunk)| {
                let refs: Vec<&PairExample> = chunk.iter().collect();
                PretrainingBatch::new(&self.collate(&refs, u64::MAX - i as u64), device)
            })
            .collect()
    }

    fn step(&self, model: &BertForPreTraining, batch: PretrainingBatch) -> StepOutput {
        pretraining_step(model, batch)
    }
}

/// Loss (MLM + NSP) and metrics of `model` on `batch`: MLM loss, perplexity and accuracy
/// over the masked tokens, NSP loss and accuracy.
pub fn pretraining_step(model: &BertForPreTraining, batch: PretrainingBatch) -> StepOutput {
    let labels = PreTrainingLabels { mlm: batch.mlm_labels.clone(), sentence: batch.nsp_labels.clone() };
    let out = model.forward(batch.input, Some(labels), OutputOptions::default());
    let rows = out.sentence_logits.dims()[0] as f64;
    let mlm = batch.mlm_labels.clone().not_equal_elem(-100);
    let predicted = out.prediction_logits.argmax(2).squeeze_dim::<2>(2);
    let counts = Tensor::cat(
        vec![
            mlm.clone().int().sum(),
            predicted.equal(batch.mlm_labels).bool_and(mlm).int().sum(),
            out.sentence_logits.argmax(1).squeeze_dim::<1>(1).equal(batch.nsp_labels).int().sum(),
        ],
        0,
    );
    // A failed read-back (device error) leaves the metrics empty; the trainer reports the
    // error when it reads the loss.
    let counts: Vec<i64> = counts.try_into_data().ok().and_then(|d| d.convert::<i64>().try_to_vec().ok()).unwrap_or(vec![0; 3]);
    let (masked, correct, nsp_correct) = (counts[0] as f64, counts[1] as f64, counts[2] as f64);
    let losses: Vec<f32> = Tensor::cat(vec![out.mlm_loss.expect("labels given"), out.sentence_loss.expect("labels given")], 0)
        .try_into_data()
        .ok()
        .and_then(|d| d.convert::<f32>().try_to_vec().ok())
        .unwrap_or(vec![f32::NAN; 2]);
    let (mlm_loss, nsp_loss) = (losses[0] as f64, losses[1] as f64);
    StepOutput {
        loss: out.loss.expect("labels given"),
        metrics: vec![
            Metric::mean("mlm_loss", mlm_loss * masked, masked),
            Metric::exp_mean("perplexity", mlm_loss * masked, masked),
            Metric::mean("mlm_accuracy", correct, masked),
            Metric::mean("nsp_loss", nsp_loss * rows, rows),
            Metric::mean("nsp_accuracy", nsp_correct, rows),
        ],
        tokens: batch.tokens,
    }
}
