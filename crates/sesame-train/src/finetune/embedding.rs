//! Training a sentence-embedding model (a bi-encoder) as sentence-transformers'
//! `SentenceTransformerTrainer` does: every text column of a batch goes through the one model,
//! is pooled (and normalised where the model normalises), and a loss of
//! [`crate::embedding_losses`] compares the columns' embeddings. Batches for the in-batch-negative
//! losses hold no text twice (its `NO_DUPLICATES` sampler). The held-out rows are scored as its
//! evaluators score them, by what the rows are:
//!
//! - pairs with a score: `EmbeddingSimilarityEvaluator` (`pearson_cosine`, `spearman_cosine`);
//! - pairs labelled 0 or 1: `BinaryClassificationEvaluator` (`cosine_accuracy`, `cosine_f1`,
//!   `cosine_ap`, …);
//! - (anchor, positive[, negative…]) rows: `InformationRetrievalEvaluator` with the anchors as
//!   queries, every positive and negative as the corpus and each anchor's positives as its
//!   relevant documents (`cosine_ndcg@10`, `cosine_mrr@10`, `cosine_recall@k`, `cosine_map@100`,
//!   …), and with (anchor, positive, negative) rows `TripletEvaluator`'s `cosine_accuracy`;
//! - a retrieval set of its own (queries, corpus and relevance judgements, as BEIR lays them
//!   out: [`RetrievalCorpus`]): `InformationRetrievalEvaluator` over the whole corpus, the
//!   held-out loss over the (query, relevant document) pairs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use burn::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use sesame_layers::pooling::l2_normalize;
use sesame_layers::{Backbone, EncoderInput, OutputOptions, Pooling};
use sesame_metrics::retrieval::{pair_scores, retrieval_scores, Cutoffs, Ranking};
use sesame_metrics::regression::{pearson, spearman};
use sesame_text::text_rows::TextRows;
use sesame_text::{mix_seeds, EncodedText, Tokenizer, TokenizerError};

use burn::optim::{GradientsAccumulator, GradientsParams};
use sesame_layers::attention::row_index;
use sesame_layers::dropout::{with_training_dropout, without_autodiff};
use sesame_layers::random::with_stream;

use super::{epoch_batch, padded_input};
use crate::embedding_losses::{EmbeddingLoss, LossError, Matryoshka};
use crate::trainer::run_micro_batches;
use crate::{StepOutput, TrainTask};

/// Rows of texts encoded once: a token sequence per text column, and each row's label.
#[derive(Clone, Debug)]
pub struct TextSet {
    /// The text columns' names.
    pub columns: Vec<String>,
    /// Each row's texts, in the columns' order.
    pub texts: Vec<Vec<String>>,
    /// Each row's tokens, a sequence per column, truncated to the maximum length.
    pub encoded: Vec<Vec<EncodedText>>,
    /// Each row's label or score, when the file has them.
    pub labels: Option<Vec<f64>>,
}

impl TextSet {
    /// Encode every text of `rows` by `tokenizer`, truncated to `max_len` tokens.
    pub fn encode(tokenizer: &Tokenizer, rows: &TextRows, max_len: usize) -> Result<Self, TokenizerError> {
        let texts: Vec<Vec<String>> = rows.rows.iter().map(|r| r.texts.clone()).collect();
        let flat: Vec<&str> = texts.iter().flatten().map(String::as_str).collect();
        let mut tokens = tokenizer.encode_each(&flat, max_len, true)?.into_iter();
        let encoded = texts.iter().map(|row| tokens.by_ref().take(row.len()).collect()).collect();
        let labels = rows.label.as_ref().map(|_| rows.rows.iter().map(|r| r.label.unwrap_or(0.0)).collect());
        Ok(Self { columns: rows.columns.clone(), texts, encoded, labels })
    }

    /// Rows.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }
}

/// How the held-out rows are scored: by what they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evaluation {
    /// Pairs with a similarity score: the correlations of their cosine with it.
    Similarity,
    /// Pairs labelled 1 (similar) or 0: the cosine as a classifier.
    Binary,
    /// Anchors and their positives (and negatives): retrieval of the positives among every
    /// held-out positive and negative.
    Retrieval {
        /// (anchor, positive, negative) rows: also whether each anchor is nearer its positive.
        triplets: bool,
    },
}

/// The retrieval metrics' names, as sentence-transformers reports them.
const RETRIEVAL_METRICS: &[&str] = &[
    "loss", "cosine_accuracy@1", "cosine_accuracy@3", "cosine_accuracy@5", "cosine_accuracy@10", "cosine_precision@1", "cosine_precision@3",
    "cosine_precision@5", "cosine_precision@10", "cosine_recall@1", "cosine_recall@3", "cosine_recall@5", "cosine_recall@10", "cosine_mrr@10",
    "cosine_ndcg@10", "cosine_map@100",
];

impl Evaluation {
    /// The scoring of `set`: by its labels (scores, or only 0 and 1), else retrieval.
    pub fn of(set: &TextSet) -> Self {
        match &set.labels {
            Some(labels) if labels.iter().all(|&y| y == 0.0 || y == 1.0) => Self::Binary,
            Some(_) => Self::Similarity,
            None => Self::Retrieval { triplets: set.columns.len() == 3 },
        }
    }

    /// What it is, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Similarity => "scored pairs",
            Self::Binary => "labelled pairs",
            Self::Retrieval { .. } => "retrieval",
        }
    }

    /// The metrics it reports, the held-out loss first.
    pub fn metric_names(self) -> Vec<&'static str> {
        match self {
            Self::Similarity => vec!["loss", "pearson_cosine", "spearman_cosine"],
            Self::Binary => vec!["loss", "cosine_accuracy", "cosine_f1", "cosine_precision", "cosine_recall", "cosine_ap", "cosine_mcc"],
            Self::Retrieval { triplets } => RETRIEVAL_METRICS.iter().copied().chain(triplets.then_some("cosine_accuracy")).collect(),
        }
    }

    /// The metric that picks the exported model by default (sentence-transformers' primary
    /// metric of the evaluator).
    pub fn default_metric(self) -> &'static str {
        match self {
            Self::Similarity => "spearman_cosine",
            Self::Binary => "cosine_ap",
            Self::Retrieval { .. } => "cosine_ndcg@10",
        }
    }
}

/// One batch: every text column of its rows in one padded input (column by column).
#[derive(Clone, Debug)]
pub struct EmbeddingBatch {
    /// The texts of column 0 of every row, then column 1, …: `[columns × rows, seq]`.
    pub input: EncoderInput,
    /// Rows.
    pub rows: usize,
    /// Text columns.
    pub columns: usize,
    /// Each row's label or score.
    pub labels: Option<Vec<f32>>,
    /// Tokens that are not padding.
    pub tokens: usize,
    /// Whether the embeddings are wanted back (held out).
    pub held_out: bool,
    /// The seed of the batch's dropout masks under a cached loss, which draws each
    /// mini-batch's masks twice, the same both times.
    pub seed: u64,
    /// A held-out batch of retrieval-corpus documents alone (one column): embedded for the
    /// metrics, without a loss.
    pub documents: bool,
}

/// The corpus of a retrieval evaluation set, embedded at each evaluation: each document's id
/// and tokens, and the ids of each held-out (query, relevant document) row.
#[derive(Clone, Debug)]
pub struct RetrievalCorpus {
    /// Each document's id.
    pub ids: Vec<String>,
    /// Each document's tokens, truncated to the maximum length.
    pub encoded: Vec<EncodedText>,
    /// The query id and document id of each held-out row.
    pub pair_ids: Vec<(String, String)>,
}

impl RetrievalCorpus {
    /// Encode the corpus of `files` by `tokenizer`, truncated to `max_len` tokens.
    pub fn encode(tokenizer: &Tokenizer, files: &sesame_text::text_rows::RetrievalFiles, max_len: usize) -> Result<Self, TokenizerError> {
        let texts: Vec<&str> = files.corpus.iter().map(|(_, text)| text.as_str()).collect();
        let encoded = tokenizer.encode_each(&texts, max_len, true)?;
        Ok(Self { ids: files.corpus.iter().map(|(id, _)| id.clone()).collect(), encoded, pair_ids: files.pair_ids.clone() })
    }
}

/// How the model turns a text into its embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Embedding {
    /// Pooling of the last layer's token states.
    pub pooling: Pooling,
    /// Whether the pooled vector is L2-normalised.
    pub normalize: bool,
}

/// Each held-out row's embeddings (a vector per column) and each corpus document's.
type HeldOutEmbeddings = (Vec<Vec<Vec<f32>>>, Vec<Vec<f32>>);

/// One epoch's batches (rows of the training set), by the epoch's number.
type EpochBatches = (u64, std::sync::Arc<Vec<Vec<usize>>>);

/// What an embedding model is trained with: how a text becomes its vector, the loss, and how
/// the training rows are batched.
#[derive(Clone, Debug, PartialEq)]
pub struct EmbeddingObjective {
    /// Pooling and normalisation.
    pub embedding: Embedding,
    /// The loss of a batch's columns.
    pub loss: EmbeddingLoss,
    /// The loss again on leading dimensions, when given.
    pub matryoshka: Option<Matryoshka>,
    /// Rows per batch.
    pub batch_size: usize,
    /// The seed of the epochs' shuffles.
    pub seed: u64,
    /// Batches without a text twice (the in-batch-negative losses).
    pub no_duplicates: bool,
    /// Texts per mini-batch of a cached loss (GradCache), `None` for a loss back-propagated
    /// whole.
    pub mini_batch_size: Option<usize>,
}

/// Training a sentence-embedding model `B` on a [`TextSet`] with an [`EmbeddingObjective`],
/// evaluated on another.
pub struct EmbeddingTraining<B> {
    train: TextSet,
    eval: TextSet,
    /// Held-out rows in batch order (by the first text's length).
    eval_order: Vec<usize>,
    tokenizer: Tokenizer,
    objective: EmbeddingObjective,
    evaluation: Evaluation,
    batches: RowBatches,
    /// The retrieval corpus of the held-out set, when it has its own.
    corpus: Option<RetrievalCorpus>,
    model: std::marker::PhantomData<fn() -> B>,
}

impl<B> EmbeddingTraining<B> {
    /// The task of `objective` on `train`, scored on `eval`, the texts padded by `tokenizer`.
    pub fn new(train: TextSet, eval: TextSet, tokenizer: Tokenizer, objective: EmbeddingObjective) -> Self {
        let mut eval_order: Vec<usize> = (0..eval.len()).collect();
        eval_order.sort_by_key(|&i| eval.encoded[i].first().map_or(0, EncodedText::len));
        let evaluation = Evaluation::of(&eval);
        let batches = RowBatches::new(train.len(), objective.batch_size, objective.seed, objective.no_duplicates);
        Self { train, eval, eval_order, tokenizer, objective, evaluation, batches, corpus: None, model: std::marker::PhantomData }
    }

    /// Score retrieval over `corpus`, whose (query, relevant document) pairs are the held-out
    /// rows, instead of over the rows' own documents.
    pub fn with_corpus(self, corpus: RetrievalCorpus) -> Self {
        Self { corpus: Some(corpus), ..self }
    }

    /// How the held-out rows are scored.
    pub fn evaluation(&self) -> Evaluation {
        self.evaluation
    }

    /// Training batches per epoch.
    pub fn batches_per_epoch(&self) -> u64 {
        self.batches.per_epoch()
    }

    /// Rows `rows` of `set` as a batch on `device`.
    fn batch(&self, set: &TextSet, rows: &[usize], held_out: bool, seed: u64, device: &Device) -> EmbeddingBatch {
        let columns = set.columns.len();
        let encoded: Vec<&EncodedText> = (0..columns).flat_map(|c| rows.iter().map(move |&r| &set.encoded[r][c])).collect();
        let (input, tokens, _) = padded_input(&self.tokenizer, &encoded, device);
        let labels = set.labels.as_ref().map(|labels| rows.iter().map(|&r| labels[r] as f32).collect());
        EmbeddingBatch { input, rows: rows.len(), columns, labels, tokens, held_out, seed, documents: false }
    }

    /// The embeddings `[texts, d]` of `input`'s texts: pooled, normalised where the model
    /// normalises.
    fn embed(&self, model: &B, input: EncoderInput) -> Tensor<2>
    where
        B: Backbone,
    {
        let mask = input.attention_mask.clone().expect("padded batches carry a mask");
        let pooling = self.objective.embedding.pooling;
        let options = OutputOptions { tokens_only: pooling.reads_tokens_only(self.tokenizer.pads_left()), ..OutputOptions::default() };
        let out = model.forward(input, options);
        let pooled = pooling.pool(out.encoder.last_hidden_state, mask);
        if self.objective.embedding.normalize {
            l2_normalize(pooled)
        } else {
            pooled
        }
    }

    /// GradCache (sentence-transformers' `Cached…` losses): the loss of the whole batch, and
    /// its gradients times `scale`, with only `mini` texts' activations held at a time by each
    /// of up to `threads` threads. The embeddings are computed a mini-batch at a time without
    /// autodiff (dropout acting as in training); the loss's gradient with respect to them is
    /// taken; then each mini-batch runs again, its dropout masks drawn as the first time, and
    /// back-propagates that gradient.
    /// The mini-batches run through [`run_micro_batches`], each drawing its masks from its own
    /// stream, so that the result does not depend on `threads`.
    fn step_cached(&self, model: &B, batch: &EmbeddingBatch, mini: usize, scale: f64, threads: usize) -> (StepOutput, GradientsParams)
    where
        B: Backbone,
    {
        let parts = mini_batches(batch.columns * batch.rows, mini);
        let count = parts.len() as u64;
        let masks = |part: u64| mix_seeds(batch.seed, part);
        let input = |part: u64| rows_of(&batch.input, parts[part as usize]);
        let run = |part: u64, model: &B, input: EncoderInput| with_stream(masks(part), || self.embed(model, input));
        // Without autodiff, so that no graph holds a mini-batch's activations, but with the
        // dropout masks of the second pass (the model keeps its training flags).
        let inference = without_autodiff(model.clone());
        let cached = run_micro_batches(&inference, count, threads, batch.seed, |part, replica| {
            // An embedding batch is ids, padding mask and segment ids.
            let on_autodiff = input(part);
            let mut inner = EncoderInput::new(on_autodiff.input_ids.without_autodiff());
            inner.attention_mask = on_autodiff.attention_mask.map(Tensor::without_autodiff);
            inner.token_type_ids = on_autodiff.token_type_ids.map(Tensor::without_autodiff);
            with_training_dropout(|| run(part, replica, inner))
        });
        let embeddings = Tensor::cat(cached, 0).autodiff().require_grad();
        let b = batch.rows;
        let columns: Vec<Tensor<2>> = (0..batch.columns).map(|c| embeddings.clone().narrow(0, c * b, b)).collect();
        // The columns and labels were checked against the loss before training.
        let loss = self.loss_of(&columns, batch.labels.as_deref()).unwrap_or_else(|e| panic!("{e}"));
        let gradient = embeddings.grad(&loss.backward()).expect("the loss depends on every embedding").mul_scalar(scale);
        let upstream: Vec<Tensor<2>> = parts.iter().map(|&(start, len)| gradient.clone().narrow(0, start, len)).collect();
        // `threads` mini-batches at a time, their gradients summed in order before the next
        // ones run: a step holds `threads` gradients, not one per mini-batch.
        let mut grads = GradientsAccumulator::<B>::new();
        let rounds: Vec<u64> = (0..count).step_by(threads.max(1)).collect();
        for start in rounds {
            let round = (count - start).min(threads.max(1) as u64);
            let part_grads = run_micro_batches(model, round, threads, batch.seed, |i, replica| {
                let part = start + i;
                // A constant of the second pass's graph, where it stays on the device.
                let surrogate = (run(part, replica, input(part)) * upstream[part as usize].clone().autodiff()).sum();
                GradientsParams::from_grads(surrogate.backward(), replica)
            });
            for part in part_grads {
                grads.accumulate(model, part);
            }
        }
        (StepOutput { loss: loss.detach(), metrics: Vec::new(), tokens: batch.tokens, predictions: None }, grads.grads())
    }

    /// The loss of the columns' embeddings.
    fn loss_of(&self, columns: &[Tensor<2>], labels: Option<&[f32]>) -> Result<Tensor<1>, LossError> {
        match &self.objective.matryoshka {
            Some(matryoshka) => matryoshka.loss(&self.objective.loss, columns, labels),
            None => self.objective.loss.loss(columns, labels),
        }
    }

    /// Each held-out row's embeddings, a vector per column, and each corpus document's (none
    /// without a corpus), from the held-out `predictions`; `None` when they do not fit.
    fn held_out_embeddings(&self, predictions: &[TensorData]) -> Option<HeldOutEmbeddings> {
        let columns = self.eval.columns.len();
        let mut out: Vec<Vec<Vec<f32>>> = vec![Vec::new(); self.eval.len()];
        let mut batches = predictions.iter();
        let vectors = |p: &TensorData, n: usize| -> Option<Vec<Vec<f32>>> {
            let [rows, d] = p.shape()[..] else { return None };
            let values: Vec<f32> = p.clone().convert::<f32>().try_to_vec().ok()?;
            (rows == n).then(|| values.chunks(d.max(1)).map(<[f32]>::to_vec).collect())
        };
        for rows in self.eval_order.chunks(self.objective.batch_size) {
            let vectors = vectors(batches.next()?, rows.len() * columns)?;
            for (c, column) in vectors.chunks(rows.len()).enumerate() {
                for (&r, v) in rows.iter().zip(column) {
                    debug_assert_eq!(out[r].len(), c);
                    out[r].push(v.clone());
                }
            }
        }
        let mut docs = vec![Vec::new(); self.corpus.as_ref().map_or(0, |c| c.ids.len())];
        for chunk in self.corpus_order().chunks(self.objective.batch_size) {
            for (&i, v) in chunk.iter().zip(vectors(batches.next()?, chunk.len())?) {
                docs[i] = v;
            }
        }
        (batches.next().is_none() && out.iter().all(|r| r.len() == columns)).then_some((out, docs))
    }

    /// The corpus documents in batch order (by length); none without a corpus.
    fn corpus_order(&self) -> Vec<usize> {
        let Some(corpus) = &self.corpus else { return Vec::new() };
        let mut order: Vec<usize> = (0..corpus.encoded.len()).collect();
        order.sort_by_key(|&i| corpus.encoded[i].len());
        order
    }

    /// The held-out metrics of the rows' embeddings `rows` and the corpus documents' `docs`.
    fn scores_of(&self, rows: &[Vec<Vec<f32>>], docs: &[Vec<f32>]) -> BTreeMap<String, f64> {
        match &self.corpus {
            Some(corpus) => corpus_scores(corpus, rows, docs),
            None => scores(self.evaluation, &self.eval, rows),
        }
    }
}

/// How the training rows of a text task are drawn into batches: each epoch's shuffle (from the
/// seed and the epoch) cut in order, or, for the losses that take the batch's other rows as
/// negatives, [`no_duplicate_batches`]. Batch `index` is a pure function of `index`, so that a
/// resumed run sees the same batches.
pub(crate) struct RowBatches {
    rows: usize,
    batch_size: usize,
    seed: u64,
    no_duplicates: bool,
    /// The batches of the epoch last asked for.
    epoch: Mutex<Option<EpochBatches>>,
}

impl RowBatches {
    pub(crate) fn new(rows: usize, batch_size: usize, seed: u64, no_duplicates: bool) -> Self {
        Self { rows, batch_size, seed, no_duplicates, epoch: Mutex::new(None) }
    }

    /// Batches per epoch.
    pub(crate) fn per_epoch(&self) -> u64 {
        self.rows.div_ceil(self.batch_size.max(1)) as u64
    }

    /// The rows of batch `index`, of `rows` whose texts `texts` gives.
    pub(crate) fn rows<T>(&self, rows: &[T], texts: impl Fn(&T) -> &[String], index: u64) -> Vec<usize> {
        if !self.no_duplicates {
            return epoch_batch(self.rows, self.batch_size, self.seed, index);
        }
        let per_epoch = self.per_epoch().max(1);
        let (epoch, k) = (index / per_epoch, (index % per_epoch) as usize);
        let batches = {
            let mut cached = self.epoch.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            match cached.as_ref() {
                Some((e, batches)) if *e == epoch => batches.clone(),
                _ => {
                    let batches = std::sync::Arc::new(no_duplicate_batches(rows, texts, self.batch_size, mix_seeds(self.seed, epoch)));
                    *cached = Some((epoch, batches.clone()));
                    batches
                }
            }
        };
        batches.get(k).cloned().unwrap_or_default()
    }
}

/// sentence-transformers' `NoDuplicatesBatchSampler` over `rows` (each row's texts): the rows
/// in an order shuffled by `seed`, each batch of `batch_size` taking the earliest rows not yet
/// taken none of whose texts it already holds. A row that finds no room waits for the next
/// batch; rows still waiting after the epoch's batches (a file with many repeated texts) wait
/// for the next epoch's shuffle.
pub fn no_duplicate_batches<T>(rows: &[T], texts: impl Fn(&T) -> &[String], batch_size: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.shuffle(&mut StdRng::seed_from_u64(seed));
    let per_epoch = rows.len().div_ceil(batch_size.max(1));
    let (mut waiting, mut next) = (Vec::new(), order.into_iter());
    let mut batches = Vec::with_capacity(per_epoch);
    while batches.len() < per_epoch {
        let mut batch = Vec::with_capacity(batch_size);
        let mut seen: HashSet<&str> = HashSet::new();
        let mut still_waiting = Vec::new();
        let fits = |row: usize, seen: &HashSet<&str>| texts(&rows[row]).iter().all(|t| !seen.contains(t.as_str()));
        for row in waiting.drain(..) {
            if batch.len() < batch_size && fits(row, &seen) {
                seen.extend(texts(&rows[row]).iter().map(String::as_str));
                batch.push(row);
            } else {
                still_waiting.push(row);
            }
        }
        while batch.len() < batch_size {
            let Some(row) = next.next() else { break };
            if fits(row, &seen) {
                seen.extend(texts(&rows[row]).iter().map(String::as_str));
                batch.push(row);
            } else {
                still_waiting.push(row);
            }
        }
        waiting = still_waiting;
        if batch.is_empty() {
            break;
        }
        batches.push(batch);
    }
    batches
}

impl<B: Backbone> TrainTask for EmbeddingTraining<B> {
    type Model = B;
    type Batch = EmbeddingBatch;
    type State = ();

    fn train_batch(&self, index: u64, device: &Device) -> EmbeddingBatch {
        let rows = self.batches.rows(&self.train.texts, Vec::as_slice, index);
        self.batch(&self.train, &rows, false, mix_seeds(self.objective.seed, index), device)
    }

    /// The held-out rows' batches, then the corpus documents' (one column each, without a loss).
    fn held_out_batches(&self, device: &Device) -> Vec<EmbeddingBatch> {
        let mut batches: Vec<EmbeddingBatch> = self.eval_order.chunks(self.objective.batch_size).map(|rows| self.batch(&self.eval, rows, true, 0, device)).collect();
        if let Some(corpus) = &self.corpus {
            for chunk in self.corpus_order().chunks(self.objective.batch_size) {
                let encoded: Vec<&EncodedText> = chunk.iter().map(|&i| &corpus.encoded[i]).collect();
                let (input, tokens, _) = padded_input(&self.tokenizer, &encoded, device);
                batches.push(EmbeddingBatch { input, rows: chunk.len(), columns: 1, labels: None, tokens, held_out: true, seed: 0, documents: true });
            }
        }
        batches
    }

    fn counts_in_loss(&self, batch: &EmbeddingBatch) -> bool {
        !batch.documents
    }

    fn step(&self, model: &B, batch: EmbeddingBatch) -> StepOutput {
        let device = batch.input.input_ids.device();
        let pooled = match self.objective.mini_batch_size {
            // A cached loss's held-out batches (no autodiff: their step is not back-propagated)
            // are embedded a mini-batch at a time too, so that they fit where training does.
            Some(mini) if !device.is_autodiff() => {
                let parts = mini_batches(batch.input.input_ids.dims()[0], mini);
                Tensor::cat(parts.into_iter().map(|part| self.embed(model, rows_of(&batch.input, part))).collect(), 0)
            }
            _ => self.embed(model, batch.input),
        };
        if batch.documents {
            return StepOutput { loss: Tensor::zeros([1], &device), metrics: Vec::new(), tokens: batch.tokens, predictions: Some(pooled.into_data()) };
        }
        let b = batch.rows;
        let columns: Vec<Tensor<2>> = (0..batch.columns).map(|c| pooled.clone().narrow(0, c * b, b)).collect();
        // The columns and labels were checked against the loss before training.
        let loss = self.loss_of(&columns, batch.labels.as_deref()).unwrap_or_else(|e| panic!("{e}"));
        let predictions = batch.held_out.then(|| pooled.into_data());
        StepOutput { loss, metrics: Vec::new(), tokens: batch.tokens, predictions }
    }

    fn step_in_parts(&self, model: &B, batch: &EmbeddingBatch, scale: f64, threads: usize) -> Option<(StepOutput, GradientsParams)> {
        let mini = self.objective.mini_batch_size?;
        Some(self.step_cached(model, batch, mini, scale, threads))
    }

    /// The default metric of a model that knows no more than which tokens two texts share:
    /// each text's counts of its tokens (special tokens left out), compared by their cosine
    /// (`token_overlap_cosine_ndcg@10`, …). Fine-tuning should end above it.
    fn baselines(&self) -> BTreeMap<String, f64> {
        let documents: Vec<&EncodedText> = self.corpus.iter().flat_map(|c| &c.encoded).collect();
        let texts: Vec<&EncodedText> = self.eval.encoded.iter().flatten().chain(documents.iter().copied()).collect();
        let mut counts = token_counts(&self.tokenizer, &texts).into_iter();
        let rows: Vec<Vec<Vec<f32>>> = self.eval.encoded.iter().map(|row| counts.by_ref().take(row.len()).collect()).collect();
        let docs: Vec<Vec<f32>> = counts.collect();
        let metric = self.evaluation.default_metric();
        self.scores_of(&rows, &docs).remove(metric).map(|v| BTreeMap::from([(format!("token_overlap_{metric}"), v)])).unwrap_or_default()
    }

    /// The evaluation's metrics of the whole embeddings and, with Matryoshka dimensions, each
    /// metric again of the embeddings cut to each smaller dimension `d`, named `dim_{d}_…` as
    /// sentence-transformers names them with `truncate_dim`.
    fn held_out_scores(&self, predictions: &[TensorData]) -> BTreeMap<String, f64> {
        let Some((rows, docs)) = self.held_out_embeddings(predictions) else { return BTreeMap::new() };
        let mut out = self.scores_of(&rows, &docs);
        let width = rows.first().and_then(|r| r.first()).map_or(0, Vec::len);
        for d in self.objective.matryoshka.iter().flat_map(|m| m.dims.iter().map(|&(d, _)| d)).filter(|&d| d < width) {
            let cut: Vec<Vec<Vec<f32>>> = rows.iter().map(|r| r.iter().map(|v| v[..d].to_vec()).collect()).collect();
            let cut_docs: Vec<Vec<f32>> = docs.iter().map(|v| v[..d].to_vec()).collect();
            out.extend(self.scores_of(&cut, &cut_docs).into_iter().map(|(name, value)| (format!("dim_{d}_{name}"), value)));
        }
        out
    }
}

/// What a loss takes of a file's rows beyond its columns, checked by [`check_rows`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowsNeeded {
    /// The loss's name, for messages.
    pub loss: &'static str,
    /// The labels it takes, inclusive (`(0.0, 1.0)`), when they are bounded.
    pub labels: Option<(f64, f64)>,
    /// Only 0 and 1.
    pub binary: bool,
    /// The batch size, when the loss takes the batch's other rows as negatives (its batches
    /// hold no text twice).
    pub in_batch: Option<usize>,
}

/// Refuse, in one line naming the file (and the line), rows that `needed` cannot train on: a
/// single row, a label out of range, or rows so repetitive that no batch without a text twice
/// holds two of them.
pub fn check_rows(rows: &TextRows, needed: RowsNeeded) -> Result<(), String> {
    let file = rows.path.display();
    if rows.rows.len() < 2 {
        return Err(format!("{file}: {} row: {} compares rows with each other, 2 at least are needed", rows.rows.len(), needed.loss));
    }
    for row in &rows.rows {
        let Some(y) = row.label else { continue };
        if needed.binary && y != 0.0 && y != 1.0 {
            return Err(format!("{file}:{}: label {y}: {} takes labels 0 or 1", row.line, needed.loss));
        }
        if let Some((low, high)) = needed.labels.filter(|(low, high)| !(*low..=*high).contains(&y)) {
            return Err(format!("{file}:{}: label {y}: {} takes labels in [{low}, {high}]", row.line, needed.loss));
        }
    }
    if let Some(batch_size) = needed.in_batch.filter(|&b| b > 1) {
        if no_duplicate_batches(&rows.rows, |r| r.texts.as_slice(), batch_size, 0).iter().all(|b| b.len() < 2) {
            return Err(format!("{file}: every row shares a text with every other: a batch without a text twice holds one row, and {} learns nothing from it", needed.loss));
        }
    }
    Ok(())
}

/// Check that `loss` (over `matryoshka`'s dimensions) takes the rows of `set` (read from
/// `file`) embedded in `width` dimensions: its columns and labels, one line naming the file.
/// The loss runs on two rows of made-up embeddings on `device`.
pub fn check_loss(loss: &EmbeddingLoss, matryoshka: Option<&Matryoshka>, set: &TextSet, width: usize, file: &std::path::Path, device: &Device) -> Result<(), String> {
    let rows = 2;
    let columns: Vec<Tensor<2>> = (0..set.columns.len())
        .map(|c| Tensor::from_data(TensorData::new((0..rows * width).map(|i| ((i * 7 + c * 3) % 5) as f32 + 1.0).collect::<Vec<f32>>(), [rows, width]), device))
        .collect();
    let labels = set.labels.as_ref().map(|_| vec![1.0f32, 0.0]);
    match matryoshka {
        Some(m) => m.loss(loss, &columns, labels.as_deref()).map(|_| ()),
        None => loss.loss(&columns, labels.as_deref()).map(|_| ()),
    }
    .map_err(|e| match e {
        LossError::Setting { .. } => e.to_string(),
        e => format!("{}: {e} (columns {:?})", file.display(), set.columns),
    })
}

/// Each text's counts of its tokens, special tokens left out, as vectors over the tokens the
/// texts hold: what a model that knows only which tokens two texts share compares.
pub(crate) fn token_counts(tokenizer: &Tokenizer, texts: &[&EncodedText]) -> Vec<Vec<f32>> {
    let special: HashSet<i64> = tokenizer.special_ids().into_iter().map(i64::from).collect();
    let mut index: HashMap<i64, usize> = HashMap::new();
    for id in texts.iter().flat_map(|t| &t.input_ids).filter(|id| !special.contains(id)) {
        let next = index.len();
        index.entry(*id).or_insert(next);
    }
    texts
        .iter()
        .map(|text| {
            let mut v = vec![0.0f32; index.len()];
            text.input_ids.iter().filter_map(|id| index.get(id)).for_each(|&i| v[i] += 1.0);
            v
        })
        .collect()
}

/// Cosine similarity of two vectors.
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    cosine_of_norms(dot(a, b), norm(a), norm(b))
}

/// The cosine of vectors whose dot product is `ab` and whose lengths are `a` and `b`.
fn cosine_of_norms(ab: f64, a: f64, b: f64) -> f64 {
    ab / (a * b).max(1e-12)
}

/// The length of `a`, summed in f64.
fn norm(a: &[f32]) -> f64 {
    dot(a, a).sqrt()
}

/// The dot product of `a` and `b`, summed in f64 in eight running sums (one vector register
/// of them: a retrieval set's million products stay a fraction of a second).
fn dot(a: &[f32], b: &[f32]) -> f64 {
    const LANES: usize = 8;
    let (chunks_a, chunks_b) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f64 = chunks_a.remainder().iter().zip(chunks_b.remainder()).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
    let mut sums = [0.0f64; LANES];
    for (x, y) in chunks_a.zip(chunks_b) {
        for i in 0..LANES {
            sums[i] += f64::from(x[i]) * f64::from(y[i]);
        }
    }
    sums.iter().sum::<f64>() + tail
}

/// The held-out scores of `evaluation` from each row's column embeddings `rows`.
pub fn scores(evaluation: Evaluation, set: &TextSet, rows: &[Vec<Vec<f32>>]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let pair_cosines = || rows.iter().map(|r| cosine(&r[0], &r[1])).collect::<Vec<f64>>();
    match evaluation {
        Evaluation::Similarity => {
            let (cosines, labels) = (pair_cosines(), set.labels.clone().unwrap_or_default());
            if let Ok(Some(p)) = pearson(&labels, &cosines) {
                out.insert("pearson_cosine".into(), p);
            }
            if let Ok(Some(s)) = spearman(&labels, &cosines) {
                out.insert("spearman_cosine".into(), s);
            }
        }
        Evaluation::Binary => {
            let labels: Vec<bool> = set.labels.iter().flatten().map(|&y| y == 1.0).collect();
            if let Ok(s) = pair_scores(&pair_cosines(), &labels) {
                for (name, value) in [("accuracy", s.accuracy), ("f1", s.f1), ("precision", s.precision), ("recall", s.recall), ("ap", s.ap), ("mcc", s.mcc)] {
                    out.insert(format!("cosine_{name}"), value);
                }
            }
        }
        Evaluation::Retrieval { triplets } => {
            // Queries and documents by text: a repeated anchor is one query with every positive
            // of its rows relevant; a repeated document is one document.
            let mut corpus: Vec<(&str, &[f32])> = Vec::new();
            let mut doc_index: HashMap<&str, usize> = HashMap::new();
            let mut queries: Vec<(&[f32], HashSet<String>)> = Vec::new();
            let mut query_index: HashMap<&str, usize> = HashMap::new();
            for (texts, embedded) in set.texts.iter().zip(rows) {
                for (text, vector) in texts.iter().zip(embedded).skip(1) {
                    doc_index.entry(text.as_str()).or_insert_with(|| {
                        corpus.push((text.as_str(), vector.as_slice()));
                        corpus.len() - 1
                    });
                }
                let q = *query_index.entry(texts[0].as_str()).or_insert_with(|| {
                    queries.push((embedded[0].as_slice(), HashSet::new()));
                    queries.len() - 1
                });
                queries[q].1.insert(texts[1].clone());
            }
            out.extend(retrieval_metrics(&queries, &corpus));
            if triplets {
                let nearer = rows.iter().filter(|r| cosine(&r[0], &r[1]) > cosine(&r[0], &r[2])).count();
                out.insert("cosine_accuracy".into(), nearer as f64 / rows.len().max(1) as f64);
            }
        }
    }
    out
}

/// `InformationRetrievalEvaluator`'s metrics (`cosine_ndcg@10`, …) of `queries` (each
/// embedding and its relevant documents' ids) ranking every document of `corpus` (id and
/// embedding) by cosine.
fn retrieval_metrics(queries: &[(&[f32], HashSet<String>)], corpus: &[(&str, &[f32])]) -> BTreeMap<String, f64> {
    // Each vector's length once, not once per pair.
    let lengths: Vec<f64> = corpus.iter().map(|(_, d)| norm(d)).collect();
    let rankings: Vec<Ranking> = queries
        .iter()
        .map(|(q, _)| {
            let q_length = norm(q);
            corpus.iter().zip(&lengths).map(|((id, d), &d_length)| (id.to_string(), cosine_of_norms(dot(q, d), q_length, d_length))).collect()
        })
        .collect();
    let relevant: Vec<HashSet<String>> = queries.iter().map(|(_, r)| r.clone()).collect();
    let mut out = BTreeMap::new();
    if let Ok(s) = retrieval_scores(&rankings, &relevant, &Cutoffs::default()) {
        for (name, values) in [("accuracy", &s.accuracy), ("precision", &s.precision), ("recall", &s.recall), ("mrr", &s.mrr), ("ndcg", &s.ndcg), ("map", &s.map)] {
            for (k, v) in values {
                out.insert(format!("cosine_{name}@{k}"), *v);
            }
        }
    }
    out
}

/// The retrieval metrics of a held-out set with its own corpus: each query (its embedding from
/// its first row, `rows[r][0]`) ranks every document of `corpus` (embeddings `docs`), its
/// relevant documents those its rows pair it with.
pub fn corpus_scores(corpus: &RetrievalCorpus, rows: &[Vec<Vec<f32>>], docs: &[Vec<f32>]) -> BTreeMap<String, f64> {
    let mut queries: Vec<(&[f32], HashSet<String>)> = Vec::new();
    let mut query_index: HashMap<&str, usize> = HashMap::new();
    for ((query, doc), row) in corpus.pair_ids.iter().zip(rows) {
        let q = *query_index.entry(query.as_str()).or_insert_with(|| {
            queries.push((row[0].as_slice(), HashSet::new()));
            queries.len() - 1
        });
        queries[q].1.insert(doc.clone());
    }
    let documents: Vec<(&str, &[f32])> = corpus.ids.iter().map(String::as_str).zip(docs.iter().map(Vec::as_slice)).collect();
    retrieval_metrics(&queries, &documents)
}

/// The mini-batches of a cached loss: `(start, len)` of `texts` texts, `mini` at a time.
fn mini_batches(texts: usize, mini: usize) -> Vec<(usize, usize)> {
    (0..texts).step_by(mini).map(|start| (start, mini.min(texts - start))).collect()
}

/// Texts `start..start + len` of `input`.
fn rows_of(input: &EncoderInput, (start, len): (usize, usize)) -> EncoderInput {
    let rows: Vec<usize> = (start..start + len).collect();
    input.select_rows(&row_index(&rows, &input.input_ids.device()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(texts: &[&[&str]]) -> Vec<Vec<String>> {
        texts.iter().map(|r| r.iter().map(|t| t.to_string()).collect()).collect()
    }

    #[test]
    fn no_duplicate_batches_never_hold_a_text_twice_and_take_every_row_once() {
        // "a" is the anchor of four rows and "p" a positive of three.
        let data = rows(&[&["a", "x1"], &["a", "x2"], &["a", "x3"], &["a", "p"], &["b", "p"], &["c", "p"], &["d", "y"], &["e", "z"]]);
        for seed in 0..20 {
            let batches = no_duplicate_batches(&data, Vec::as_slice, 3, seed);
            assert_eq!(batches.len(), 3, "seed {seed}: ceil(8 / 3) batches");
            let mut taken: Vec<usize> = batches.iter().flatten().copied().collect();
            for batch in &batches {
                let texts: Vec<&String> = batch.iter().flat_map(|&r| &data[r]).collect();
                let unique: HashSet<&String> = texts.iter().copied().collect();
                assert_eq!(unique.len(), texts.len(), "seed {seed}: batch {batch:?} repeats a text");
                assert!(batch.len() <= 3);
            }
            taken.sort();
            taken.dedup();
            assert_eq!(taken.len(), batches.iter().map(Vec::len).sum::<usize>(), "seed {seed}: a row twice");
        }
        // Without repeated texts, the batches are the shuffled rows cut in order, all of them.
        let distinct = rows(&[&["a", "b"], &["c", "d"], &["e", "f"], &["g", "h"], &["i", "j"]]);
        let batches = no_duplicate_batches(&distinct, Vec::as_slice, 2, 7);
        assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);
    }

    #[test]
    fn retrieval_scores_rank_each_anchors_positive_among_every_document() {
        let set = TextSet { columns: vec!["anchor".into(), "positive".into()], texts: rows(&[&["q1", "d1"], &["q2", "d2"], &["q3", "d3"]]), encoded: Vec::new(), labels: None };
        // q1 and q2 find their documents first; q3's is ranked third.
        let embedded = vec![
            vec![vec![1.0, 0.0], vec![1.0, 0.1]],
            vec![vec![0.0, 1.0], vec![0.1, 1.0]],
            vec![vec![1.0, 1.0], vec![-1.0, 0.2]],
        ];
        let scores = scores(Evaluation::Retrieval { triplets: false }, &set, &embedded);
        assert!((scores["cosine_accuracy@1"] - 2.0 / 3.0).abs() < 1e-12, "{scores:?}");
        assert!((scores["cosine_mrr@10"] - (1.0 + 1.0 + 1.0 / 3.0) / 3.0).abs() < 1e-12, "{scores:?}");
        assert_eq!(scores["cosine_recall@3"], 1.0);
    }
}
