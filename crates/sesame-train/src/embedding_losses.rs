//! sentence-transformers' training losses for embedding models, on the embeddings of a batch's
//! text columns (`compute_loss_from_embeddings` there), with its defaults and its names:
//!
//! - [`MultipleNegativesRanking`]: in-batch negatives plus any given hard negatives (InfoNCE),
//!   with its `directions`, `partition_mode` and hardness weighting (the symmetric variant is
//!   `directions: query_to_doc + doc_to_query, partition: PerDirection`);
//! - [`EmbeddingLoss::CoSent`] for scored pairs;
//! - [`EmbeddingLoss::Contrastive`] and [`EmbeddingLoss::OnlineContrastive`] for labelled pairs;
//! - [`EmbeddingLoss::Triplet`] for (anchor, positive, negative);
//! - [`Matryoshka`] over any of them: each loss again on the first `d` dimensions,
//!   renormalised, weighted.
//!
//! Each is checked against sentence-transformers' own on fixed embeddings
//! (`tests/tests/embedding_losses.rs`, `fixtures/embedding/losses.json`).

use burn::prelude::*;
use burn::tensor::TensorData;
use sesame_layers::pooling::l2_normalize;

/// Why a loss cannot be computed on a batch: the columns or labels do not fit it.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LossError {
    /// The loss takes another number of text columns.
    #[error("{loss} takes {expected} text columns; the data has {found}")]
    Columns {
        /// The loss.
        loss: &'static str,
        /// What it takes (`2`, `3`, `at least 2`).
        expected: &'static str,
        /// What the batch has.
        found: usize,
    },
    /// The loss needs a score or label per row and the data has none.
    #[error("{loss} needs a {what} per row (a `score` or `label` column); the data has none")]
    NoLabels {
        /// The loss.
        loss: &'static str,
        /// `score` or `label`.
        what: &'static str,
    },
    /// Columns or labels of different lengths.
    #[error("{what}: {found} rows where the batch has {expected}")]
    Rows {
        /// Which column or the labels.
        what: String,
        /// The batch's rows.
        expected: usize,
        /// This one's.
        found: usize,
    },
    /// The distances could not be read back from the device.
    #[error("cannot read the batch's distances back: {0}")]
    Read(String),
    /// A setting out of range.
    #[error("{field} {value}: {reason}")]
    Setting {
        /// The setting (`--scale`, `--matryoshka-dims`).
        field: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        reason: &'static str,
    },
}

/// The interaction terms of [`MultipleNegativesRanking`] beside `query_to_doc` (every query
/// against every document: its positive, the others' positives, all hard negatives), which is
/// always in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Directions {
    /// Each query against the other queries.
    pub query_to_query: bool,
    /// Each positive against every query (the symmetric term).
    pub doc_to_query: bool,
    /// Each positive against the documents of the other queries.
    pub doc_to_doc: bool,
}

/// How [`MultipleNegativesRanking`] normalises its scores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Partition {
    /// One softmax over every selected direction.
    #[default]
    Joint,
    /// One softmax per direction, the log-partitions averaged (not with `query_to_query` or
    /// `doc_to_doc`).
    PerDirection,
}

/// Which negatives [`MultipleNegativesRanking`]'s hardness weighting raises
/// (`strength · sg(cos)` added to their logits, after the scale).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hardness {
    /// The other rows' positives and hard negatives (Lan et al. 2025).
    InBatchNegatives,
    /// The row's own hard negatives only (EmbeddingGemma).
    HardNegatives,
    /// Every negative.
    AllNegatives,
}

/// sentence-transformers' `MultipleNegativesRankingLoss`: for each anchor, cross-entropy of
/// its positive among every document of the batch (`scale · cos`).
#[derive(Clone, Debug, PartialEq)]
pub struct MultipleNegativesRanking {
    /// The cosine's multiplier (1 / temperature) [default: 20].
    pub scale: f64,
    /// The terms beside `query_to_doc` [default: none].
    pub directions: Directions,
    /// The softmax over them [default: joint].
    pub partition: Partition,
    /// Hardness weighting and its strength [default: none].
    pub hardness: Option<(Hardness, f64)>,
}

impl Default for MultipleNegativesRanking {
    fn default() -> Self {
        Self { scale: 20.0, directions: Directions::default(), partition: Partition::Joint, hardness: None }
    }
}

impl MultipleNegativesRanking {
    /// The symmetric variant (`MultipleNegativesSymmetricRankingLoss`): query to document and
    /// document to query, each with its own softmax.
    pub fn symmetric() -> Self {
        Self { directions: Directions { doc_to_query: true, ..Directions::default() }, partition: Partition::PerDirection, ..Self::default() }
    }

    fn check(&self) -> Result<(), LossError> {
        if !(self.scale > 0.0 && self.scale.is_finite()) {
            return Err(LossError::Setting { field: "--scale", value: self.scale.to_string(), reason: "must be a finite number > 0" });
        }
        if self.partition == Partition::PerDirection && (self.directions.query_to_query || self.directions.doc_to_doc) {
            return Err(LossError::Setting { field: "--partition", value: "per-direction".into(), reason: "takes query_to_doc and doc_to_query only" });
        }
        if let Some((_, strength)) = self.hardness {
            if !(strength >= 0.0 && strength.is_finite()) {
                return Err(LossError::Setting { field: "--hardness-strength", value: strength.to_string(), reason: "must be a finite number >= 0" });
            }
        }
        Ok(())
    }

    /// The loss of `columns`: the anchors `[b, d]`, their positives `[b, d]`, then any hard
    /// negatives, a column `[b, d]` each.
    pub fn loss(&self, columns: &[Tensor<2>]) -> Result<Tensor<1>, LossError> {
        self.check()?;
        let [queries, docs @ ..] = columns else { return Err(LossError::Columns { loss: "MultipleNegativesRankingLoss", expected: "at least 2", found: 0 }) };
        if docs.is_empty() {
            return Err(LossError::Columns { loss: "MultipleNegativesRankingLoss", expected: "at least 2", found: 1 });
        }
        let [b, _] = queries.dims();
        let device = queries.device();
        let docs_all = Tensor::cat(docs.to_vec(), 0);
        let n_docs = docs.len() * b;
        let positives = docs[0].clone();
        let bool_mask = |mask: Vec<bool>, cols: usize| Tensor::<2, Bool>::from_data(TensorData::new(mask, [b, cols]), &device);

        let query_to_doc = cos_sim(queries.clone(), docs_all.clone());
        let mut terms = vec![query_to_doc.clone() * self.scale];
        if let Some((mode, strength)) = self.hardness.filter(|(_, s)| *s > 0.0) {
            // The penalty's mask: true where no penalty applies.
            let exempt: Vec<bool> = (0..b)
                .flat_map(|row| {
                    (0..n_docs).map(move |col| {
                        let own = col % b == row;
                        match mode {
                            Hardness::InBatchNegatives => own,
                            Hardness::HardNegatives => !own || col < b,
                            Hardness::AllNegatives => own && col < b,
                        }
                    })
                })
                .collect();
            let penalty = (query_to_doc.detach() * strength).mask_fill(bool_mask(exempt, n_docs), 0.0);
            terms[0] = terms[0].clone() + penalty;
        }
        if self.directions.query_to_query {
            let diagonal = (0..b * b).map(|i| i / b == i % b).collect();
            terms.push((cos_sim(queries.clone(), queries.clone()) * self.scale).mask_fill(bool_mask(diagonal, b), f32::NEG_INFINITY));
        }
        if self.directions.doc_to_query {
            terms.push(cos_sim(queries.clone(), positives.clone()).transpose() * self.scale);
        }
        if self.directions.doc_to_doc {
            let same_query = (0..b * n_docs).map(|i| (i % n_docs) % b == i / n_docs).collect();
            terms.push((cos_sim(docs_all, positives).transpose() * self.scale).mask_fill(bool_mask(same_query, n_docs), f32::NEG_INFINITY));
        }
        let eye = Tensor::<2>::from_data(TensorData::new((0..b * n_docs).map(|i| if i % n_docs == i / n_docs { 1.0f32 } else { 0.0 }).collect(), [b, n_docs]), &device);
        let positive_scores = (terms[0].clone() * eye).sum_dim(1).reshape([b]);
        let log_z = match self.partition {
            Partition::Joint => logsumexp_rows(Tensor::cat(terms, 1)),
            Partition::PerDirection => {
                let count = terms.len() as f64;
                terms.into_iter().map(logsumexp_rows).reduce(|a, b| a + b).expect("query_to_doc") / count
            }
        };
        Ok((log_z - positive_scores).mean())
    }
}

/// A loss of sentence-transformers on a batch's embeddings.
#[derive(Clone, Debug, PartialEq)]
pub enum EmbeddingLoss {
    /// `MultipleNegativesRankingLoss`: (anchor, positive, negatives…) rows, no labels.
    MultipleNegativesRanking(MultipleNegativesRanking),
    /// `CoSENTLoss`: (sentence1, sentence2) rows with a score each; `log(1 + Σ exp(s_i − s_j))`
    /// over the pairs whose score orders them the other way, `s = scale · cos`.
    CoSent {
        /// The cosine's multiplier [default: 20].
        scale: f64,
    },
    /// `ContrastiveLoss`: (sentence1, sentence2) rows labelled 1 (similar) or 0; with the cosine
    /// distance `d`, the mean of `½ (y d² + (1 − y) relu(margin − d)²)`.
    Contrastive {
        /// Distance below which dissimilar pairs cost [default: 0.5].
        margin: f64,
    },
    /// `OnlineContrastiveLoss`: [`EmbeddingLoss::Contrastive`] on the hard pairs alone
    /// (positives farther than the nearest negative, negatives nearer than the farthest
    /// positive), summed.
    OnlineContrastive {
        /// As [`EmbeddingLoss::Contrastive`]'s [default: 0.5].
        margin: f64,
    },
    /// `TripletLoss`: (anchor, positive, negative) rows; the mean of
    /// `relu(‖a − p‖ − ‖a − n‖ + margin)` (Euclidean distances).
    Triplet {
        /// [default: 5].
        margin: f64,
    },
}

impl EmbeddingLoss {
    /// sentence-transformers' class name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::MultipleNegativesRanking(_) => "MultipleNegativesRankingLoss",
            Self::CoSent { .. } => "CoSENTLoss",
            Self::Contrastive { .. } => "ContrastiveLoss",
            Self::OnlineContrastive { .. } => "OnlineContrastiveLoss",
            Self::Triplet { .. } => "TripletLoss",
        }
    }

    /// The loss of a batch: its text columns' embeddings `[b, d]` each, and a score or label per
    /// row where the loss takes one.
    pub fn loss(&self, columns: &[Tensor<2>], labels: Option<&[f32]>) -> Result<Tensor<1>, LossError> {
        let loss = self.name();
        let b = columns.first().map_or(0, |c| c.dims()[0]);
        for (i, column) in columns.iter().enumerate() {
            if column.dims()[0] != b {
                return Err(LossError::Rows { what: format!("text column {}", i + 1), expected: b, found: column.dims()[0] });
            }
        }
        let columns_needed = |expected: &'static str, ok: bool| if ok { Ok(()) } else { Err(LossError::Columns { loss, expected, found: columns.len() }) };
        let labelled = |what: &'static str| -> Result<&[f32], LossError> {
            let labels = labels.ok_or(LossError::NoLabels { loss, what })?;
            if labels.len() != b {
                return Err(LossError::Rows { what: format!("{what}s"), expected: b, found: labels.len() });
            }
            Ok(labels)
        };
        match self {
            Self::MultipleNegativesRanking(mnrl) => mnrl.loss(columns),
            Self::CoSent { scale } => {
                columns_needed("2", columns.len() == 2)?;
                cosent(&columns[0], &columns[1], labelled("score")?, *scale)
            }
            Self::Contrastive { margin } => {
                columns_needed("2", columns.len() == 2)?;
                let labels = labelled("label")?;
                let device = columns[0].device();
                let y = Tensor::<1>::from_data(TensorData::new(labels.to_vec(), [b]), &device);
                let d = cosine_distance(&columns[0], &columns[1]);
                let losses = (y.clone() * d.clone().square() + (y.neg() + 1.0) * (d.neg() + *margin).clamp_min(0.0).square()) * 0.5;
                Ok(losses.mean())
            }
            Self::OnlineContrastive { margin } => {
                columns_needed("2", columns.len() == 2)?;
                online_contrastive(&columns[0], &columns[1], labelled("label")?, *margin)
            }
            Self::Triplet { margin } => {
                columns_needed("3", columns.len() == 3)?;
                let distance_pos = euclidean(&columns[0], &columns[1]);
                let distance_neg = euclidean(&columns[0], &columns[2]);
                Ok((distance_pos - distance_neg + *margin).clamp_min(0.0).mean())
            }
        }
    }
}

/// The losses by name, as `--loss` takes them (sentence-transformers' class names are accepted
/// too); [`LossKind::with`] gives the loss with its settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum LossKind {
    /// `MultipleNegativesRankingLoss`: (anchor, positive[, negative…]) rows.
    #[cfg_attr(feature = "cli", value(alias = "MultipleNegativesRankingLoss"))]
    Mnrl,
    /// `MultipleNegativesSymmetricRankingLoss`: also each positive against the anchors.
    #[cfg_attr(feature = "cli", value(alias = "MultipleNegativesSymmetricRankingLoss"))]
    SymmetricMnrl,
    /// `CachedMultipleNegativesRankingLoss` (GradCache): MNRL over the whole batch, its
    /// embeddings computed and back-propagated `mini_batch_size` texts at a time, so that a
    /// large batch takes a mini-batch's memory.
    #[cfg_attr(feature = "cli", value(alias = "CachedMultipleNegativesRankingLoss"))]
    CachedMnrl,
    /// `CachedMultipleNegativesSymmetricRankingLoss`: the symmetric MNRL, cached.
    #[cfg_attr(feature = "cli", value(alias = "CachedMultipleNegativesSymmetricRankingLoss"))]
    CachedSymmetricMnrl,
    /// `CoSENTLoss`: (sentence1, sentence2, score) rows.
    #[cfg_attr(feature = "cli", value(alias = "CoSENTLoss"))]
    Cosent,
    /// `ContrastiveLoss`: (sentence1, sentence2, label) rows, label 1 or 0.
    #[cfg_attr(feature = "cli", value(alias = "ContrastiveLoss"))]
    Contrastive,
    /// `OnlineContrastiveLoss`: as contrastive, on the batch's hard pairs.
    #[cfg_attr(feature = "cli", value(alias = "OnlineContrastiveLoss"))]
    OnlineContrastive,
    /// `TripletLoss`: (anchor, positive, negative) rows.
    #[cfg_attr(feature = "cli", value(alias = "TripletLoss"))]
    Triplet,
    /// A cross-encoder's `BinaryCrossEntropyLoss`: (query, passage, label) rows (`--task rerank`).
    #[cfg_attr(feature = "cli", value(alias = "BinaryCrossEntropyLoss"))]
    Bce,
    /// A cross-encoder's `ListNetLoss`: (query, docs, labels) lists (`--task rerank`).
    #[cfg_attr(feature = "cli", value(name = "listnet", alias = "ListNetLoss"))]
    ListNet,
    /// A cross-encoder's `ListMLELoss`: lists whose documents come best first.
    #[cfg_attr(feature = "cli", value(name = "listmle", alias = "ListMLELoss"))]
    ListMle,
    /// A cross-encoder's `PListMLELoss`: ListMLE weighting the top of the list more.
    #[cfg_attr(feature = "cli", value(name = "plistmle", alias = "PListMLELoss"))]
    PListMle,
    /// A cross-encoder's `LambdaLoss` (`NDCGLoss2PPScheme`): pairs of a list weighted by NDCG.
    #[cfg_attr(feature = "cli", value(alias = "LambdaLoss"))]
    Lambda,
    /// A cross-encoder's `RankNetLoss`: every pair of a list whose labels differ.
    #[cfg_attr(feature = "cli", value(name = "ranknet", alias = "RankNetLoss"))]
    RankNet,
}

impl LossKind {
    /// The loss with `scale` (MNRL, CoSENT) and `margin` (the contrastive losses, triplet), each
    /// at sentence-transformers' default when `None`; a setting the loss does not take is refused.
    pub fn with(self, scale: Option<f64>, margin: Option<f64>) -> Result<EmbeddingLoss, LossError> {
        let loss = match self {
            Self::Mnrl | Self::CachedMnrl => EmbeddingLoss::MultipleNegativesRanking(MultipleNegativesRanking { scale: scale.unwrap_or(20.0), ..MultipleNegativesRanking::default() }),
            Self::SymmetricMnrl | Self::CachedSymmetricMnrl => {
                EmbeddingLoss::MultipleNegativesRanking(MultipleNegativesRanking { scale: scale.unwrap_or(20.0), ..MultipleNegativesRanking::symmetric() })
            }
            Self::Cosent => EmbeddingLoss::CoSent { scale: scale.unwrap_or(20.0) },
            Self::Contrastive => EmbeddingLoss::Contrastive { margin: margin.unwrap_or(0.5) },
            Self::OnlineContrastive => EmbeddingLoss::OnlineContrastive { margin: margin.unwrap_or(0.5) },
            Self::Triplet => EmbeddingLoss::Triplet { margin: margin.unwrap_or(5.0) },
            Self::Bce | Self::ListNet | Self::ListMle | Self::PListMle | Self::Lambda | Self::RankNet => {
                return Err(LossError::Setting { field: "--loss", value: format!("{self:?}").to_lowercase(), reason: "is a reranker's loss (--task rerank)" })
            }
        };
        let takes_scale = matches!(self, Self::Mnrl | Self::SymmetricMnrl | Self::CachedMnrl | Self::CachedSymmetricMnrl | Self::Cosent);
        if let (Some(value), false) = (scale, takes_scale) {
            return Err(LossError::Setting { field: "--scale", value: value.to_string(), reason: "this loss has no scale (MNRL and CoSENT have)" });
        }
        if let (Some(value), true) = (margin, takes_scale) {
            return Err(LossError::Setting { field: "--margin", value: value.to_string(), reason: "this loss has no margin (the contrastive and triplet losses have)" });
        }
        match loss {
            EmbeddingLoss::CoSent { scale } | EmbeddingLoss::MultipleNegativesRanking(MultipleNegativesRanking { scale, .. }) if !(scale > 0.0 && scale.is_finite()) => {
                Err(LossError::Setting { field: "--scale", value: scale.to_string(), reason: "must be a finite number > 0" })
            }
            EmbeddingLoss::Contrastive { margin } | EmbeddingLoss::OnlineContrastive { margin } | EmbeddingLoss::Triplet { margin } if !(margin >= 0.0 && margin.is_finite()) => {
                Err(LossError::Setting { field: "--margin", value: margin.to_string(), reason: "must be a finite number >= 0" })
            }
            loss => Ok(loss),
        }
    }

    /// Whether the loss compares each row with the batch's other rows' texts (so that a batch
    /// must not hold one text twice: sentence-transformers' `NO_DUPLICATES` batches).
    pub fn in_batch_negatives(self) -> bool {
        matches!(self, Self::Mnrl | Self::SymmetricMnrl | Self::CachedMnrl | Self::CachedSymmetricMnrl)
    }

    /// Whether the loss is computed over the whole batch but back-propagated a mini-batch at a
    /// time (GradCache: the `Cached…` losses).
    pub fn cached(self) -> bool {
        matches!(self, Self::CachedMnrl | Self::CachedSymmetricMnrl)
    }
}

/// sentence-transformers' `MatryoshkaLoss`: the loss again on each prefix of the embeddings
/// (the first `d` dimensions, L2-renormalised), weighted and summed, so that a truncated
/// embedding still works.
#[derive(Clone, Debug, PartialEq)]
pub struct Matryoshka {
    /// The dimensions and their weights (`--matryoshka-dims 384,256,128,64`; weight 1 each).
    pub dims: Vec<(usize, f64)>,
}

impl Matryoshka {
    /// `loss` summed over the dimensions of `self.dims`, each weighted.
    pub fn loss(&self, loss: &EmbeddingLoss, columns: &[Tensor<2>], labels: Option<&[f32]>) -> Result<Tensor<1>, LossError> {
        let width = columns.first().map_or(0, |c| c.dims()[1]);
        let mut total: Option<Tensor<1>> = None;
        if self.dims.is_empty() {
            return Err(LossError::Setting { field: "--matryoshka-dims", value: String::new(), reason: "needs one dimension at least" });
        }
        for &(dim, weight) in &self.dims {
            if dim == 0 || dim > width {
                return Err(LossError::Setting { field: "--matryoshka-dims", value: dim.to_string(), reason: "each must be in 1..=the embedding's width" });
            }
            let shrunk: Vec<Tensor<2>> = columns.iter().map(|c| l2_normalize(c.clone().narrow(1, 0, dim))).collect();
            let term = loss.loss(&shrunk, labels)? * weight;
            total = Some(match total {
                Some(t) => t + term,
                None => term,
            });
        }
        Ok(total.expect("one dimension at least"))
    }
}

/// Cosine similarity of every row of `a` `[n, d]` with every row of `b` `[m, d]`: `[n, m]`.
pub fn cos_sim(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    l2_normalize(a).matmul(l2_normalize(b).transpose())
}

/// Cosine similarity of each row of `a` with the same row of `b`: `[n]`.
pub fn pairwise_cos_sim(a: &Tensor<2>, b: &Tensor<2>) -> Tensor<1> {
    let [n, _] = a.dims();
    (l2_normalize(a.clone()) * l2_normalize(b.clone())).sum_dim(1).reshape([n])
}

/// `1 − cos` of each row pair (sentence-transformers' `COSINE_DISTANCE`).
fn cosine_distance(a: &Tensor<2>, b: &Tensor<2>) -> Tensor<1> {
    pairwise_cos_sim(a, b).neg() + 1.0
}

/// `‖a − b + ε‖₂` of each row pair, `ε = 1e-6` (torch's `pairwise_distance`).
fn euclidean(a: &Tensor<2>, b: &Tensor<2>) -> Tensor<1> {
    let [n, _] = a.dims();
    (a.clone() - b.clone() + 1e-6).square().sum_dim(1).sqrt().reshape([n])
}

/// `log Σ exp` of each row of `x` `[n, m]` (rows hold a finite value at least): `[n]`.
fn logsumexp_rows(x: Tensor<2>) -> Tensor<1> {
    let [n, _] = x.dims();
    let max = x.clone().max_dim(1).detach();
    ((x - max.clone()).exp().sum_dim(1).log() + max).reshape([n])
}

/// CoSENT: `log(1 + Σ_{i,j: y_i < y_j} exp(s_i − s_j))`, `s = scale · cos`.
fn cosent(a: &Tensor<2>, b: &Tensor<2>, scores: &[f32], scale: f64) -> Result<Tensor<1>, LossError> {
    let n = scores.len();
    let s = pairwise_cos_sim(a, b) * scale;
    let device = s.device();
    // differences[i, j] = s_i − s_j where y_i < y_j; −∞ elsewhere. A 0 is the "1 +".
    let ordered: Vec<bool> = (0..n * n).map(|k| scores[k / n] < scores[k % n]).collect();
    let differences = s.clone().reshape([n, 1]) - s.reshape([1, n]);
    let differences = differences.mask_fill(Tensor::<2, Bool>::from_data(TensorData::new(ordered, [n, n]), &device).bool_not(), f32::NEG_INFINITY);
    let all = Tensor::cat(vec![Tensor::<2>::zeros([1, 1], &device), differences.reshape([1, n * n])], 1);
    Ok(logsumexp_rows(all))
}

/// OnlineContrastive: the positives farther than the nearest negative and the negatives nearer
/// than the farthest positive (with one kind missing, than the other kind's mean), summed.
fn online_contrastive(a: &Tensor<2>, b: &Tensor<2>, labels: &[f32], margin: f64) -> Result<Tensor<1>, LossError> {
    let d = cosine_distance(a, b);
    let device = d.device();
    let values: Vec<f32> = d.clone().detach().into_data().convert::<f32>().try_to_vec::<f32>().map_err(|e| LossError::Read(format!("{e:?}")))?;
    let of = |label: f32| values.iter().zip(labels).filter(|(_, &l)| l == label).map(|(&v, _)| v).collect::<Vec<f32>>();
    let (poss, negs) = (of(1.0), of(0.0));
    let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
    let max = |v: &[f32]| v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let min = |v: &[f32]| v.iter().copied().fold(f32::INFINITY, f32::min);
    let negative_bound = if poss.is_empty() { mean(&negs) } else { max(&poss) };
    let positive_bound = if negs.is_empty() { mean(&poss) } else { min(&negs) };
    let n = labels.len();
    let pick = |keep: Vec<f32>| Tensor::<1>::from_data(TensorData::new(keep, [n]), &device);
    let hard_positive = pick(values.iter().zip(labels).map(|(&v, &l)| f32::from(l == 1.0 && v > positive_bound)).collect());
    let hard_negative = pick(values.iter().zip(labels).map(|(&v, &l)| f32::from(l == 0.0 && v < negative_bound)).collect());
    let positive_loss = (d.clone().square() * hard_positive).sum();
    let negative_loss = ((d.neg() + margin).clamp_min(0.0).square() * hard_negative).sum();
    Ok(positive_loss + negative_loss)
}
