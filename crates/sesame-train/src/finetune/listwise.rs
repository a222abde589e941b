//! sentence-transformers' listwise cross-encoder losses: each query comes with a list of
//! documents and a relevance label per document (`(query, docs, labels)` rows), and the loss
//! compares the model's logits over a list with its labels.
//!
//! - `ListNetLoss`: cross-entropy between the softmax of the labels and that of the logits.
//! - `ListMLELoss`: the Plackett-Luce likelihood of the list in the order given (best first).
//! - `PListMLELoss`: ListMLE with each position weighted `2^(n - rank) - 1`.
//! - `LambdaLoss`: pairwise logistic losses, each pair of documents whose labels differ weighted
//!   by what swapping them costs the list's NDCG (the weighting schemes of Wang et al. 2018;
//!   `NDCGLoss2PPScheme` by default).
//! - `RankNetLoss`: `LambdaLoss` with every pair weighted 1.
//!
//! Each takes the logits through an activation first ([`ScoreActivation`]: sentence-transformers'
//! `activation_fn`, the identity by default); [`Listwise`] is a loss with its activation.
//!
//! Only the logits carry a gradient; what follows from the labels and from the order of the
//! logits (LambdaLoss's ranks) is computed on the host and enters as constants, as in
//! sentence-transformers, where the sort and the masks carry none.

use burn::prelude::*;
use burn::tensor::activation::{log_sigmoid, log_softmax, sigmoid};

/// How `LambdaLoss` weights a pair of documents (sentence-transformers' weighting schemes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LambdaWeighting {
    /// `NoWeightingScheme`: every pair 1 (RankNet).
    None,
    /// `NDCGLoss1Scheme`: the gain of the pair's first document over its discount.
    NdcgLoss1,
    /// `NDCGLoss2Scheme`: the difference of gains times the change of discount between ranks
    /// `|i - j|` apart.
    NdcgLoss2,
    /// `LambdaRankScheme`: the difference of gains times the difference of the two ranks'
    /// discounts.
    LambdaRank,
    /// `NDCGLoss2PPScheme`: `mu` times NDCGLoss2's weight plus LambdaRank's.
    NdcgLoss2PP {
        /// NDCGLoss2's share [default: 10].
        mu: f64,
    },
}

impl LambdaWeighting {
    /// sentence-transformers' default: `NDCGLoss2PPScheme(mu=10)`.
    pub const DEFAULT: Self = Self::NdcgLoss2PP { mu: 10.0 };
}

impl Default for LambdaWeighting {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// `--lambda-weighting`: the schemes by name (`ndcg2pp` with mu 10, sentence-transformers'
/// default), sentence-transformers' class names accepted too.
#[cfg(feature = "cli")]
impl clap::ValueEnum for LambdaWeighting {
    fn value_variants<'a>() -> &'a [Self] {
        &[Self::DEFAULT, Self::LambdaRank, Self::NdcgLoss2, Self::NdcgLoss1, Self::None]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let (name, class) = match self {
            Self::NdcgLoss2PP { .. } => ("ndcg2pp", "NDCGLoss2PPScheme"),
            Self::LambdaRank => ("lambdarank", "LambdaRankScheme"),
            Self::NdcgLoss2 => ("ndcg2", "NDCGLoss2Scheme"),
            Self::NdcgLoss1 => ("ndcg1", "NDCGLoss1Scheme"),
            Self::None => ("none", "NoWeightingScheme"),
        };
        Some(clap::builder::PossibleValue::new(name).alias(class))
    }
}

/// What a listwise loss applies to the logits before comparing them with the labels
/// (sentence-transformers' `activation_fn`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum ScoreActivation {
    /// The logits as they are (`torch.nn.Identity`, the default).
    #[default]
    #[cfg_attr(feature = "cli", value(alias = "Identity"))]
    Identity,
    /// Their sigmoid (`torch.nn.Sigmoid`): scores in (0, 1).
    #[cfg_attr(feature = "cli", value(alias = "Sigmoid"))]
    Sigmoid,
}

impl ScoreActivation {
    /// `logits` `[n]` through the activation.
    pub fn apply(self, logits: Tensor<1>) -> Tensor<1> {
        match self {
            Self::Identity => logits,
            Self::Sigmoid => sigmoid(logits),
        }
    }
}

/// A listwise loss on the logits through `activation`, as sentence-transformers' losses take
/// their `activation_fn`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Listwise {
    /// The loss.
    pub loss: ListwiseLoss,
    /// What it applies to the logits first.
    pub activation: ScoreActivation,
}

impl Listwise {
    /// sentence-transformers' class name.
    pub fn name(&self) -> &'static str {
        self.loss.name()
    }

    /// The loss `[1]` of `logits` `[documents]` through the activation ([`ListwiseLoss::loss`]).
    pub fn loss(&self, logits: Tensor<1>, labels: &[Vec<f32>]) -> Tensor<1> {
        self.loss.loss(self.activation.apply(logits), labels)
    }
}

/// A listwise loss and its settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ListwiseLoss {
    /// `ListNetLoss`.
    ListNet,
    /// `ListMLELoss` (`weighted`: false) or `PListMLELoss` (true): the likelihood of the
    /// documents' order, best first.
    ListMle {
        /// Position weights `2^(n - rank) - 1`, normalised per list (PListMLE).
        weighted: bool,
        /// The documents' order is the order given (sentence-transformers'
        /// `respect_input_order`, true by default); false: each list sorted by label, highest
        /// first, documents of equal labels in the order given.
        respect_input_order: bool,
    },
    /// `LambdaLoss` (`RankNetLoss` with [`LambdaWeighting::None`]).
    Lambda {
        /// The pair weights.
        weighting: LambdaWeighting,
        /// Only pairs with a document among the first `k` as the logits rank them (every pair
        /// when `None`).
        k: Option<usize>,
        /// The slope of the pairwise logistic [default: 1].
        sigma: f64,
    },
}

/// What sentence-transformers fills padded logits with (ListNet, LambdaLoss).
const PAD_LOGIT: f32 = -1e16;

impl ListwiseLoss {
    /// `LambdaLoss` weighting its pairs by `weighting`, otherwise at sentence-transformers'
    /// defaults (every pair, sigma 1).
    pub fn lambda(weighting: LambdaWeighting) -> Self {
        Self::Lambda { weighting, k: None, sigma: 1.0 }
    }

    /// `RankNetLoss` with sentence-transformers' defaults.
    pub fn rank_net() -> Self {
        Self::lambda(LambdaWeighting::None)
    }

    /// sentence-transformers' class name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::ListNet => "ListNetLoss",
            Self::ListMle { weighted: false, .. } => "ListMLELoss",
            Self::ListMle { weighted: true, .. } => "PListMLELoss",
            Self::Lambda { weighting: LambdaWeighting::None, .. } => "RankNetLoss",
            Self::Lambda { .. } => "LambdaLoss",
        }
    }

    /// The loss `[1]` of `logits` `[documents]`: every list's documents in turn, `labels[q]`
    /// giving list `q`'s length and its documents' labels. Lists may differ in length; none is
    /// empty.
    pub fn loss(&self, logits: Tensor<1>, labels: &[Vec<f32>]) -> Tensor<1> {
        let lists = labels.len();
        let longest = labels.iter().map(Vec::len).max().unwrap_or(0);
        let device = logits.device();
        let constant = |values: Vec<f32>, shape: [usize; 2]| Tensor::<2>::from_data(TensorData::new(values, shape), &device);
        match *self {
            Self::ListNet => {
                let log_p = log_softmax(padded(logits, labels, PAD_LOGIT), 1);
                let target: Vec<f32> = labels.iter().flat_map(|l| padded_row(&softmax(l), longest, 0.0)).collect();
                (constant(target, [lists, longest]) * log_p).sum_dim(1).mean().neg()
            }
            Self::ListMle { weighted, respect_input_order } => {
                let logits = match respect_input_order {
                    true => logits,
                    false => {
                        let order = by_label(labels);
                        let n = order.len();
                        logits.select(0, Tensor::<1, Int>::from_data(TensorData::new(order, [n]), &device))
                    }
                };
                let scores = padded(logits, labels, 0.0);
                // Each position's normaliser: the log-sum-exp of the scores from it to the end
                // of its list, as a sum over `[lists, position, later position]` with the other
                // entries pushed to -1e30.
                let mut later = vec![-1e30f32; lists * longest * longest];
                for (q, l) in labels.iter().enumerate() {
                    for i in 0..l.len() {
                        for j in i..l.len() {
                            later[(q * longest + i) * longest + j] = 0.0;
                        }
                    }
                }
                let later = Tensor::<3>::from_data(TensorData::new(later, [lists, longest, longest]), &device);
                let spread = scores.clone().unsqueeze_dim::<3>(1) + later;
                let top = spread.clone().max_dim(2).detach();
                let normaliser = (top.clone() + (spread - top).exp().sum_dim(2).log()).squeeze_dim::<2>(2);
                let weights: Vec<f32> = labels.iter().flat_map(|l| padded_row(&list_weights(l.len(), weighted), longest, 0.0)).collect();
                let per_list = (constant(weights, [lists, longest]) * (scores - normaliser)).sum_dim(1).neg();
                // sentence-transformers gives 0 when every list's loss is 0.
                let values: Vec<f32> = per_list.clone().into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default();
                if values.iter().all(|v| *v == 0.0) {
                    return per_list.sum() * 0.0;
                }
                per_list.mean()
            }
            Self::Lambda { weighting, k, sigma } => {
                let scores = padded(logits, labels, PAD_LOGIT);
                let values: Vec<f32> = scores.clone().into_data().convert::<f32>().try_to_vec::<f32>().expect("logits read back");
                let mut weights = vec![0.0f32; lists * longest * longest];
                let mut pairs = 0usize;
                for (q, l) in labels.iter().enumerate() {
                    let row = &values[q * longest..(q + 1) * longest];
                    pairs += lambda_weights(row, l, longest, weighting, k.unwrap_or(longest), &mut weights[q * longest * longest..(q + 1) * longest * longest]);
                }
                let weights = Tensor::<3>::from_data(TensorData::new(weights, [lists, longest, longest]), &device);
                let diffs = (scores.clone().unsqueeze_dim::<3>(2) - scores.unsqueeze_dim::<3>(1)).clamp(-1e8, 1e8);
                let losses = weights * log_sigmoid(diffs * sigma) / std::f64::consts::LN_2;
                losses.sum().neg() / pairs.max(1) as f64
            }
        }
    }
}

/// The documents' indices into `[documents]`, each list's sorted by label, highest first, ties
/// in the order given (torch's sort, as sentence-transformers' ListMLE without
/// `respect_input_order`, keeps them so).
fn by_label(labels: &[Vec<f32>]) -> Vec<i64> {
    let mut index = Vec::with_capacity(labels.iter().map(Vec::len).sum());
    let mut start = 0;
    for l in labels {
        let mut order: Vec<usize> = (0..l.len()).collect();
        order.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
        index.extend(order.into_iter().map(|i| (start + i) as i64));
        start += l.len();
    }
    index
}

/// `logits` `[documents]` as `[lists, longest]`, each list's logits in its row and `fill` past
/// its end.
fn padded(logits: Tensor<1>, labels: &[Vec<f32>], fill: f32) -> Tensor<2> {
    let device = logits.device();
    let n = logits.dims()[0];
    let longest = labels.iter().map(Vec::len).max().unwrap_or(0);
    let mut index = Vec::with_capacity(labels.len() * longest);
    let mut start = 0;
    for l in labels {
        index.extend((start..start + l.len()).map(|i| i as i64));
        index.extend(std::iter::repeat_n(n as i64, longest - l.len()));
        start += l.len();
    }
    let with_fill = Tensor::cat(vec![logits, Tensor::<1>::full([1], fill, &device)], 0);
    with_fill.select(0, Tensor::<1, Int>::from_data(TensorData::new(index, [labels.len() * longest]), &device)).reshape([labels.len(), longest])
}

/// `row` extended with `fill` to `len`.
fn padded_row(row: &[f32], len: usize, fill: f32) -> Vec<f32> {
    row.iter().copied().chain(std::iter::repeat_n(fill, len - row.len())).collect()
}

fn softmax(values: &[f32]) -> Vec<f32> {
    let top = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f64> = values.iter().map(|v| f64::from(v - top).exp()).collect();
    let sum: f64 = exp.iter().sum();
    exp.iter().map(|e| (e / sum) as f32).collect()
}

/// ListMLE's position weights (all 1), or PListMLE's: `2^(n - rank) - 1` for ranks 1..=n,
/// normalised to sum to 1 (plus 1e-10), rescaled past 127 documents as sentence-transformers
/// does so that no power overflows.
fn list_weights(n: usize, weighted: bool) -> Vec<f32> {
    if !weighted {
        return vec![1.0; n];
    }
    let scale = n.saturating_sub(127) as i32;
    let raw: Vec<f32> = (1..=n).map(|rank| 2f32.powi(n as i32 - rank as i32 - scale) - 2f32.powi(-scale)).collect();
    let sum: f32 = raw.iter().sum();
    raw.iter().map(|w| w / (sum + 1e-10)).collect()
}

/// One list's LambdaLoss pair weights, written into `out` `[longest, longest]` at the
/// documents' own positions (0 for pairs left out), and how many pairs count: those whose
/// first document's label is the higher (any two real documents for NDCGLoss1), with one of
/// the two among the first `k` by `scores` (the list's padded row of logits).
fn lambda_weights(scores: &[f32], labels: &[f32], longest: usize, weighting: LambdaWeighting, k: usize, out: &mut [f32]) -> usize {
    // Ranks by the logits, highest first (padding last).
    let mut order: Vec<usize> = (0..longest).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let label = |doc: usize| labels.get(doc).copied();
    let discount: Vec<f64> = (0..longest).map(|r| (2.0 + r as f64).log2()).collect();
    let mut ideal: Vec<f64> = labels.iter().map(|&l| f64::from(l).max(0.0)).collect();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let max_dcg = ideal.iter().zip(&discount).take(k).map(|(l, d)| (2f64.powf(*l) - 1.0) / d).sum::<f64>().max(1e-10);
    // The gain of the document at each rank (0 for padding).
    let gain: Vec<f64> = order.iter().map(|&doc| (2f64.powf(label(doc).map_or(0.0, |l| f64::from(l).max(0.0))) - 1.0) / max_dcg).collect();
    let ndcg2 = |i: usize, j: usize| {
        let d = i.abs_diff(j);
        if d == 0 {
            0.0
        } else {
            (1.0 / discount[d - 1] - 1.0 / discount[d]).abs() * (gain[i] - gain[j]).abs()
        }
    };
    let lambda_rank = |i: usize, j: usize| (1.0 / discount[i] - 1.0 / discount[j]).abs() * (gain[i] - gain[j]).abs();
    let mut pairs = 0;
    for i in 0..longest {
        for j in 0..longest {
            let (Some(a), Some(b)) = (label(order[i]), label(order[j])) else { continue };
            let counted = (i < k || j < k) && (a > b || (weighting == LambdaWeighting::NdcgLoss1 && a.is_finite() && b.is_finite()));
            if !counted {
                continue;
            }
            pairs += 1;
            let w = match weighting {
                LambdaWeighting::None => 1.0,
                LambdaWeighting::NdcgLoss1 => gain[i] / discount[i],
                LambdaWeighting::NdcgLoss2 => ndcg2(i, j),
                LambdaWeighting::LambdaRank => lambda_rank(i, j),
                LambdaWeighting::NdcgLoss2PP { mu } => mu * ndcg2(i, j) + lambda_rank(i, j),
            };
            out[order[i] * longest + order[j]] = w as f32;
        }
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plistmle_weights_fall_by_powers_of_two_and_sum_to_one() {
        let w = list_weights(3, true);
        // 2^2 - 1, 2^1 - 1, 2^0 - 1 = 3, 1, 0 over 4.
        assert_eq!(w, vec![0.75, 0.25, 0.0]);
        assert_eq!(list_weights(3, false), vec![1.0; 3]);
        // Past 127 documents the weights stay finite.
        assert!(list_weights(300, true).iter().all(|w| w.is_finite()));
    }
}
