//! Head importance for pruning (Michel, Levy and Neubig 2019, "Are Sixteen Heads Really Better
//! than One?"): the importance of head `h` is `|∂L/∂ξ_h|` summed over the batches of the data,
//! where `ξ_h = 1` gates the head's output, then normalised by the L2 norm of its layer's
//! scores, as the authors' code and transformers' `bertology` example do. The least important
//! heads are pruned (`Backbone::prune_heads`).
//!
//! No gate is added to the model: the output projection `y = Σ_h ξ_h ctx_h W_h + b` gives
//! `∂L/∂ξ_h = Σ (W_h ⊙ ∂L/∂W_h)` at `ξ = 1`, summed over the head's rows `W_h` of the output
//! projection's weight, whose gradient the ordinary backward pass computes.

use std::collections::{BTreeMap, BTreeSet};

use burn::module::{Flag, Module, ModuleMapper, Param};
use burn::optim::GradientsParams;
use sesame_layers::Encoder;

mod run;
pub use run::{prune_classifier, BeforeAfter, Evaluated, PruneOptions, Pruned};

/// `module` with dropout off and gradients still tracked (importance is measured as the model
/// predicts, `model.eval()` in the authors' code).
pub fn without_dropout<M: Module>(module: M) -> M {
    struct NoDropout;
    impl ModuleMapper for NoDropout {
        fn map_flag(&mut self, flag: Param<Flag>) -> Param<Flag> {
            flag.with_value(false)
        }
    }
    module.map(&mut NoDropout)
}

/// Per-head importance scores, `[layer][head]` over the heads each layer has now.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadImportance {
    /// Summed `|∂L/∂ξ_h|`, then (after [`Self::normalized`]) divided by the layer's L2 norm.
    pub scores: Vec<Vec<f64>>,
}

impl HeadImportance {
    /// No batch seen yet, for `encoder`'s layers and heads.
    pub fn new(encoder: &Encoder) -> Self {
        Self { scores: encoder.layers.iter().map(|l| vec![0.0; l.attention.n_heads]).collect() }
    }

    /// Add one batch: `grads` of a loss through `encoder` (its parameters, on an autodiff
    /// device) give each head's `|∂L/∂ξ_h|`.
    pub fn add(&mut self, encoder: &Encoder, grads: &GradientsParams) {
        for (scores, layer) in self.scores.iter_mut().zip(&encoder.layers) {
            let attention = &layer.attention;
            let weight = &attention.output.weight;
            let Some(grad) = grads.get::<2>(weight.id) else { continue };
            let [_, d] = grad.dims();
            let per_head = (weight.val().inner() * grad).reshape([attention.n_heads, attention.head_dim * d]).sum_dim(1);
            let values = per_head.into_data().convert::<f64>().try_to_vec::<f64>().unwrap_or_default();
            for (s, v) in scores.iter_mut().zip(values) {
                *s += v.abs();
            }
        }
    }

    /// Each layer's scores divided by their L2 norm (a layer of zeros stays zero).
    pub fn normalized(mut self) -> Self {
        for layer in &mut self.scores {
            let norm = layer.iter().map(|s| s * s).sum::<f64>().sqrt();
            layer.iter_mut().for_each(|s| *s /= norm + 1e-20);
        }
        self
    }

    /// The `n` least important heads, by layer, in the layers' current numbering, never the
    /// last head of a layer; fewer when only last heads remain. Ties go to the lower layer and
    /// head.
    pub fn least_important(&self, n: usize) -> BTreeMap<usize, BTreeSet<usize>> {
        let mut all: Vec<(f64, usize, usize)> =
            self.scores.iter().enumerate().flat_map(|(l, heads)| heads.iter().enumerate().map(move |(h, &s)| (s, l, h))).collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let mut left: Vec<usize> = self.scores.iter().map(Vec::len).collect();
        let mut chosen: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for (_, layer, head) in all {
            if chosen.values().map(BTreeSet::len).sum::<usize>() == n {
                break;
            }
            if left[layer] > 1 {
                left[layer] -= 1;
                chosen.entry(layer).or_default().insert(head);
            }
        }
        chosen
    }
}

/// `chosen` heads, numbered as the layers have them now, by their numbers in the unpruned
/// layers (as `Backbone::prune_heads` takes them), given the heads `pruned` before and the
/// layers' current head counts in `importance`.
pub fn unpruned_numbers(chosen: &BTreeMap<usize, BTreeSet<usize>>, pruned: &BTreeMap<usize, BTreeSet<usize>>, importance: &HeadImportance) -> BTreeMap<usize, BTreeSet<usize>> {
    chosen
        .iter()
        .map(|(&layer, heads)| {
            let before = pruned.get(&layer).cloned().unwrap_or_default();
            let total = importance.scores.get(layer).map_or(0, Vec::len) + before.len();
            let kept: Vec<usize> = (0..total).filter(|h| !before.contains(h)).collect();
            (layer, heads.iter().filter_map(|&h| kept.get(h).copied()).collect())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_important_heads_leave_one_head_in_every_layer() {
        let importance = HeadImportance { scores: vec![vec![0.1, 0.5, 0.2], vec![0.05, 0.9], vec![0.3]] }.normalized();
        let pick = |n| importance.least_important(n);
        assert_eq!(pick(1), [(1, [0].into())].into());
        assert_eq!(pick(2), [(0, [0].into()), (1, [0].into())].into());
        assert_eq!(pick(3), [(0, [0, 2].into()), (1, [0].into())].into());
        // Layer 2's only head and the last of each layer stay: at most 3 of 6 can go.
        assert_eq!(pick(10), pick(3));
        // Layer 0 lost its heads 1 and 3 of 5 before: its heads 0, 2 now are 0, 4 unpruned.
        let before = [(0, [1, 3].into())].into();
        assert_eq!(unpruned_numbers(&pick(3), &before, &importance), [(0, [0, 4].into()), (1, [0].into())].into());
    }
}
