//! Training a cross-encoder (a reranker: a sequence classifier with one logit over a
//! (query, passage) pair) as sentence-transformers' `CrossEncoderTrainer` does, with one of its
//! losses:
//!
//! - `BinaryCrossEntropyLoss` on (query, passage, label) rows;
//! - `MultipleNegativesRankingLoss` on (query, positive[, negative…]) rows: each query's positive
//!   against `num_negatives` passages drawn from the batch's other rows and its own negatives,
//!   cross-entropy of `scale · sigmoid(logit)` with the positive first;
//! - the listwise losses ([`ListwiseLoss`](super::ListwiseLoss): ListNet, ListMLE, PListMLE, LambdaLoss, RankNet,
//!   on the logits through an activation: [`Listwise`])
//!   on (query, docs, labels) lists, a batch being `batch_size` queries with all their documents.
//!
//! The held-out rows are reranked as its `CrossEncoderRerankingEvaluator` does: each query's
//! candidates (its passages; with rows of a positive alone, that positive among the positives of
//! the next nine rows; a list's documents, those labelled above 0 relevant) sorted by score,
//! `ndcg@10`, `mrr@10`, `map` and `accuracy@1` over the queries with a relevant candidate; the
//! held-out `loss` is the binary cross-entropy of every candidate's relevance.

use std::collections::{BTreeMap, HashMap, HashSet};

use burn::prelude::*;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::SeedableRng;
use sesame_layers::loss::{binary_cross_entropy_with_logits, cross_entropy};
use sesame_layers::{EncoderInput, ClassifierLayers, TaskModel, OutputOptions};
use sesame_metrics::retrieval::{retrieval_scores, Cutoffs, Ranking};
use sesame_text::text_rows::{RankedLists, TextRows};
use sesame_text::{mix_seeds, EncodedText, Tokenizer, TokenizerError};

use super::embedding::{cosine, token_counts, RowBatches};
use super::listwise::Listwise;
use super::padded_input;
use crate::{StepOutput, TrainTask};

/// A reranker's loss.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RerankLoss {
    /// `BinaryCrossEntropyLoss`: each (query, passage) pair's logit against its label.
    BinaryCrossEntropy,
    /// `MultipleNegativesRankingLoss`: each query's positive against negatives.
    MultipleNegativesRanking {
        /// Passages of the batch's other rows drawn as negatives of each query [default: 4].
        num_negatives: usize,
        /// The multiplier of the sigmoid of the logits [default: 10].
        scale: f64,
    },
    /// A listwise loss over each query's ranked documents.
    Listwise(Listwise),
}

impl RerankLoss {
    /// sentence-transformers' class name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::BinaryCrossEntropy => "BinaryCrossEntropyLoss",
            Self::MultipleNegativesRanking { .. } => "MultipleNegativesRankingLoss",
            Self::Listwise(loss) => loss.name(),
        }
    }

    /// Whether `rows` fit the loss: a label per row and two texts for binary cross-entropy; a
    /// query, a positive and any negatives without a label for multiple negatives; ranked lists
    /// for a listwise loss and for no other. One line naming the file when not.
    pub fn check(&self, rows: &RerankRows) -> Result<(), String> {
        let rows = match (self, rows) {
            (Self::Listwise(_), RerankRows::Lists(_)) => return Ok(()),
            (_, RerankRows::Lists(lists)) => {
                return Err(format!("{}: {} takes (query, passage) rows, not lists (the listwise losses take them: --loss listnet, listmle, plistmle, lambda or ranknet)", lists.path.display(), self.name()));
            }
            (_, RerankRows::Pairs(rows)) => rows,
        };
        let file = rows.path.display();
        match (self, &rows.label, rows.columns.len()) {
            (Self::Listwise(loss), ..) => Err(format!("{file}: {} takes rows of a query, a list of documents and a list of labels ({{\"query\": …, \"docs\": […], \"labels\": […]}} a line)", loss.name())),
            (Self::BinaryCrossEntropy, Some(_), 2) => Ok(()),
            (Self::BinaryCrossEntropy, None, _) => Err(format!("{file}: BinaryCrossEntropyLoss needs a label per row (a `label` or `score` column); the rows have none")),
            (Self::BinaryCrossEntropy, Some(_), n) => Err(format!("{file}: BinaryCrossEntropyLoss takes (query, passage, label) rows; the rows have {n} text columns {:?}", rows.columns)),
            (Self::MultipleNegativesRanking { .. }, Some(label), _) => {
                Err(format!("{file}: MultipleNegativesRankingLoss takes (query, positive[, negative…]) rows without a label; the rows have {label:?} (--loss bce reads it)"))
            }
            (Self::MultipleNegativesRanking { .. }, None, n) if n < 2 => Err(format!("{file}: MultipleNegativesRankingLoss takes (query, positive[, negative…]) rows; the rows have {n} text column")),
            (Self::MultipleNegativesRanking { scale, .. }, None, _) if !(*scale > 0.0 && scale.is_finite()) => Err(format!("--scale {scale}: must be a finite number > 0")),
            _ => Ok(()),
        }
    }
}

/// Held-out queries, each with its candidate passages and whether each is relevant.
#[derive(Clone, Debug)]
pub struct Candidates {
    /// The queries, in order of first appearance.
    pub queries: Vec<String>,
    /// Every (query, passage, relevant) candidate, grouped by query.
    pub pairs: Vec<(usize, String, bool)>,
    /// Each pair's tokens (query and passage), truncated to the maximum length.
    pub encoded: Vec<EncodedText>,
}

impl Candidates {
    /// The candidates of `rows` (see the module's documentation), encoded by `tokenizer` in
    /// `max_len` tokens.
    pub fn of(rows: &TextRows, tokenizer: &Tokenizer, max_len: usize) -> Result<Self, TokenizerError> {
        let mut pairs = Vec::new();
        let n = rows.rows.len();
        for (r, row) in rows.rows.iter().enumerate() {
            let q = row.texts[0].as_str();
            match row.label {
                Some(label) => pairs.push((q, row.texts[1].clone(), label >= 0.5)),
                None => {
                    pairs.push((q, row.texts[1].clone(), true));
                    let negatives: Vec<String> = if row.texts.len() > 2 {
                        row.texts[2..].to_vec()
                    } else {
                        (1..n.min(10)).map(|k| rows.rows[(r + k) % n].texts[1].clone()).filter(|p| *p != row.texts[1]).collect()
                    };
                    pairs.extend(negatives.into_iter().map(|p| (q, p, false)));
                }
            }
        }
        Self::grouped(&pairs, tokenizer, max_len)
    }

    /// The candidates of ranked lists: each query's documents, those labelled above 0 relevant.
    pub fn of_lists(lists: &RankedLists, tokenizer: &Tokenizer, max_len: usize) -> Result<Self, TokenizerError> {
        let pairs: Vec<(&str, String, bool)> = lists.rows.iter().flat_map(|l| l.docs.iter().zip(&l.labels).map(|(d, y)| (l.query.as_str(), d.clone(), *y > 0.0))).collect();
        Self::grouped(&pairs, tokenizer, max_len)
    }

    /// `(query, passage, relevant)` candidates grouped by query, the queries in order of first
    /// appearance, and encoded.
    fn grouped(candidates: &[(&str, String, bool)], tokenizer: &Tokenizer, max_len: usize) -> Result<Self, TokenizerError> {
        let mut queries: Vec<String> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut pairs: Vec<(usize, String, bool)> = Vec::with_capacity(candidates.len());
        for (query, passage, relevant) in candidates {
            let q = *index.entry(query).or_insert_with(|| {
                queries.push(query.to_string());
                queries.len() - 1
            });
            pairs.push((q, passage.clone(), *relevant));
        }
        pairs.sort_by_key(|p| p.0);
        let texts: Vec<(&str, &str)> = pairs.iter().map(|(q, p, _)| (queries[*q].as_str(), p.as_str())).collect();
        let encoded = tokenizer.encode_pairs_each(&texts, max_len, true)?;
        Ok(Self { queries, pairs, encoded })
    }
}

/// A reranker's training rows: (query, passage…) rows, or ranked lists for the listwise losses.
#[derive(Clone, Debug)]
pub enum RerankRows {
    /// Text rows.
    Pairs(TextRows),
    /// (query, docs, labels) lists.
    Lists(RankedLists),
}

impl RerankRows {
    /// How many rows (queries of the lists).
    pub fn len(&self) -> usize {
        match self {
            Self::Pairs(rows) => rows.rows.len(),
            Self::Lists(lists) => lists.rows.len(),
        }
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One batch of (query, passage) pairs.
#[derive(Clone, Debug)]
pub struct RerankBatch {
    /// The pairs, padded.
    pub input: EncoderInput,
    /// What the logits are trained toward.
    pub target: RerankTarget,
    /// Tokens that are not padding.
    pub tokens: usize,
    /// Whether the logits are wanted back (held out).
    pub held_out: bool,
}

/// What a batch's logits `[pairs, 1]` learn.
#[derive(Clone, Debug)]
pub enum RerankTarget {
    /// Each pair's relevance (binary cross-entropy).
    Relevance(Vec<f32>),
    /// Rows of `candidates` pairs each, the positive first (cross-entropy of `scale · sigmoid`).
    PositiveFirst {
        /// Queries.
        rows: usize,
        /// Candidates per query.
        candidates: usize,
        /// The multiplier of the sigmoid.
        scale: f64,
    },
    /// Lists of the given lengths and labels, one after another (a listwise loss).
    Lists {
        /// Each list's labels.
        labels: Vec<Vec<f32>>,
        /// The loss.
        loss: Listwise,
    },
}


/// Training a cross-encoder `M` (one logit) on text rows with a [`RerankLoss`], reranking held-out
/// [`Candidates`].
pub struct RerankTraining<M> {
    train: RerankRows,
    eval: Candidates,
    tokenizer: Tokenizer,
    max_len: usize,
    loss: RerankLoss,
    batch_size: usize,
    seed: u64,
    batches: RowBatches,
    model: std::marker::PhantomData<fn() -> M>,
}

/// The reranking metrics, the held-out loss first.
pub const RERANK_METRICS: &[&str] = &["loss", "ndcg@10", "mrr@10", "map", "accuracy@1"];

impl<M> RerankTraining<M> {
    /// The task of `loss` on `train`, reranking `eval`, in batches of `batch_size` rows drawn
    /// from `seed` (without a text twice for the in-batch negatives), pairs of at most
    /// `max_len` tokens.
    /// Refused (one line naming the file) when the rows do not fit the loss
    /// ([`RerankLoss::check`]).
    pub fn new(train: RerankRows, eval: Candidates, tokenizer: Tokenizer, max_len: usize, loss: RerankLoss, batch_size: usize, seed: u64) -> Result<Self, String> {
        loss.check(&train)?;
        let in_batch = matches!(loss, RerankLoss::MultipleNegativesRanking { .. });
        let batches = RowBatches::new(train.len(), batch_size, seed, in_batch);
        Ok(Self { train, eval, tokenizer, max_len, loss, batch_size, seed, batches, model: std::marker::PhantomData })
    }

    /// Training batches per epoch.
    pub fn batches_per_epoch(&self) -> u64 {
        self.batches.per_epoch()
    }

    /// Pairs as a padded input.
    fn input(&self, pairs: &[(&str, &str)], device: &Device) -> (EncoderInput, usize) {
        let encoded = self.tokenizer.encode_pairs_each(pairs, self.max_len, true).expect("the rows were encoded once before training");
        let (input, tokens, _) = padded_input(&self.tokenizer, &encoded.iter().collect::<Vec<_>>(), device);
        (input, tokens)
    }

    /// The held-out metrics of `scores` (a logit per candidate pair, in order).
    fn rerank_scores(&self, scores: &[f64]) -> BTreeMap<String, f64> {
        let mut rankings: Vec<Ranking> = vec![Vec::new(); self.eval.queries.len()];
        let mut relevant: Vec<HashSet<String>> = vec![HashSet::new(); self.eval.queries.len()];
        for (i, ((q, _, is_relevant), &score)) in self.eval.pairs.iter().zip(scores).enumerate() {
            rankings[*q].push((i.to_string(), score));
            if *is_relevant {
                relevant[*q].insert(i.to_string());
            }
        }
        // Queries without a relevant candidate are left out, as sentence-transformers does.
        let (rankings, relevant): (Vec<Ranking>, Vec<HashSet<String>>) = rankings.into_iter().zip(relevant).filter(|(_, r)| !r.is_empty()).unzip();
        let cutoffs = Cutoffs { accuracy: vec![1], precision_recall: Vec::new(), mrr: vec![10], ndcg: vec![10], map: vec![100] };
        let Ok(s) = retrieval_scores(&rankings, &relevant, &cutoffs) else { return BTreeMap::new() };
        BTreeMap::from([
            ("ndcg@10".to_string(), s.ndcg[&10]),
            ("mrr@10".to_string(), s.mrr[&10]),
            ("map".to_string(), s.map[&100]),
            ("accuracy@1".to_string(), s.accuracy[&1]),
        ])
    }
}

impl<M: TaskModel<Output = ClassifierLayers>> TrainTask for RerankTraining<M> {
    type Model = M;
    type Batch = RerankBatch;
    type State = ();

    fn train_batch(&self, index: u64, device: &Device) -> RerankBatch {
        let train = match &self.train {
            RerankRows::Pairs(rows) => rows,
            RerankRows::Lists(lists) => {
                // Every document of the batch's lists, list after list.
                let lists: Vec<&sesame_text::text_rows::RankedList> = self.batches.rows(&lists.rows, |l| std::slice::from_ref(&l.query), index).into_iter().map(|r| &lists.rows[r]).collect();
                let pairs: Vec<(&str, &str)> = lists.iter().flat_map(|l| l.docs.iter().map(|d| (l.query.as_str(), d.as_str()))).collect();
                let (input, tokens) = self.input(&pairs, device);
                let labels = lists.iter().map(|l| l.labels.iter().map(|&x| x as f32).collect()).collect();
                let RerankLoss::Listwise(loss) = self.loss else { unreachable!("lists train with a listwise loss (RerankTraining::new checks)") };
                return RerankBatch { input, target: RerankTarget::Lists { labels, loss }, tokens, held_out: false };
            }
        };
        let rows: Vec<&sesame_text::text_rows::TextRow> = self.batches.rows(&train.rows, |r| r.texts.as_slice(), index).into_iter().map(|r| &train.rows[r]).collect();
        match self.loss {
            RerankLoss::BinaryCrossEntropy => {
                let pairs: Vec<(&str, &str)> = rows.iter().map(|r| (r.texts[0].as_str(), r.texts[1].as_str())).collect();
                let (input, tokens) = self.input(&pairs, device);
                let labels = rows.iter().map(|r| r.label.unwrap_or(0.0) as f32).collect();
                RerankBatch { input, target: RerankTarget::Relevance(labels), tokens, held_out: false }
            }
            RerankLoss::MultipleNegativesRanking { num_negatives, scale } => {
                // Each query's candidates: its positive, `k` passages of the batch's other rows
                // (drawn from the step's seed), then its own negatives.
                let b = rows.len();
                let pool = b.saturating_sub(1) * (train.columns.len() - 1);
                let k = num_negatives.min(pool);
                let mut rng = StdRng::seed_from_u64(mix_seeds(self.seed, index));
                let mut pairs = Vec::new();
                for (r, row) in rows.iter().enumerate() {
                    pairs.push((row.texts[0].as_str(), row.texts[1].as_str()));
                    let others: Vec<&str> = rows.iter().enumerate().filter(|(o, _)| *o != r).flat_map(|(_, o)| o.texts[1..].iter().map(String::as_str)).collect();
                    for i in sample(&mut rng, pool, k) {
                        pairs.push((row.texts[0].as_str(), others[i]));
                    }
                    pairs.extend(row.texts[2..].iter().map(|n| (row.texts[0].as_str(), n.as_str())));
                }
                let candidates = pairs.len() / b.max(1);
                let (input, tokens) = self.input(&pairs, device);
                RerankBatch { input, target: RerankTarget::PositiveFirst { rows: b, candidates, scale }, tokens, held_out: false }
            }
            RerankLoss::Listwise(loss) => unreachable!("{}: text rows do not train a listwise loss (RerankTraining::new checks)", loss.name()),
        }
    }

    fn held_out_batches(&self, device: &Device) -> Vec<RerankBatch> {
        let all: Vec<usize> = (0..self.eval.pairs.len()).collect();
        all.chunks(self.batch_size)
            .map(|chunk| {
                let encoded: Vec<&EncodedText> = chunk.iter().map(|&i| &self.eval.encoded[i]).collect();
                let (input, tokens, _) = padded_input(&self.tokenizer, &encoded, device);
                let labels = chunk.iter().map(|&i| f32::from(u8::from(self.eval.pairs[i].2))).collect();
                RerankBatch { input, target: RerankTarget::Relevance(labels), tokens, held_out: true }
            })
            .collect()
    }

    fn step(&self, model: &M, batch: RerankBatch) -> StepOutput {
        let logits = model.run(batch.input, OutputOptions::logits_only()).logits;
        let device = logits.device();
        let loss = match &batch.target {
            RerankTarget::Relevance(labels) => {
                let targets = Tensor::<2>::from_data(TensorData::new(labels.clone(), [labels.len(), 1]), &device);
                binary_cross_entropy_with_logits(logits.clone(), targets)
            }
            RerankTarget::PositiveFirst { rows, candidates, scale } => {
                let scores = burn::tensor::activation::sigmoid(logits.clone().reshape([*rows, *candidates])) * *scale;
                cross_entropy(scores, Tensor::zeros([*rows], &device))
            }
            RerankTarget::Lists { labels, loss } => {
                let n = logits.dims()[0];
                loss.loss(logits.clone().reshape([n]), labels)
            }
        };
        let predictions = batch.held_out.then(|| logits.into_data());
        StepOutput { loss, metrics: Vec::new(), tokens: batch.tokens, predictions }
    }

    /// `token_overlap_ndcg@10`: reranking each query's candidates by the cosine of the tokens
    /// they share with it (special tokens left out).
    fn baselines(&self) -> BTreeMap<String, f64> {
        let Ok(queries) = self.tokenizer.encode_each(&self.eval.queries.iter().map(String::as_str).collect::<Vec<_>>(), self.max_len, true) else { return BTreeMap::new() };
        let Ok(passages) = self.tokenizer.encode_each(&self.eval.pairs.iter().map(|p| p.1.as_str()).collect::<Vec<_>>(), self.max_len, true) else { return BTreeMap::new() };
        let counts = token_counts(&self.tokenizer, &queries.iter().chain(&passages).collect::<Vec<_>>());
        let (q, p) = counts.split_at(queries.len());
        let scores: Vec<f64> = self.eval.pairs.iter().zip(p).map(|((query, _, _), passage)| cosine(&q[*query], passage)).collect();
        self.rerank_scores(&scores).remove("ndcg@10").map(|v| BTreeMap::from([("token_overlap_ndcg@10".to_string(), v)])).unwrap_or_default()
    }

    fn held_out_scores(&self, predictions: &[TensorData]) -> BTreeMap<String, f64> {
        let scores: Vec<f64> = predictions.iter().filter_map(|p| p.clone().convert::<f32>().try_to_vec::<f32>().ok()).flatten().map(f64::from).collect();
        if scores.len() != self.eval.pairs.len() {
            return BTreeMap::new();
        }
        self.rerank_scores(&scores)
    }
}
