//! Post-LN transformer encoder layer and stack (HF `BertLayer` / `BertEncoder`).

use std::collections::{BTreeMap, BTreeSet};

use burn::nn::{LayerNorm, LayerNormConfig};
use burn::prelude::*;

use crate::dropout::{Dropout, DropoutConfig};
use crate::activation::Activation;
use crate::attention::{AttentionMask, KvCache, MultiHeadAttention, MultiHeadAttentionConfig};
use crate::feed_forward::{FeedForward, FeedForwardConfig};
use crate::packing::Packing;

/// Configuration of [`EncoderLayer`] and [`Encoder`].
#[derive(Config, Debug)]
pub struct EncoderConfig {
    /// Model width (HF `hidden_size`).
    pub d_model: usize,
    /// Feed-forward width (HF `intermediate_size`).
    pub d_ff: usize,
    /// Number of attention heads.
    pub n_heads: usize,
    /// Number of layers.
    pub n_layers: usize,
    /// Feed-forward activation.
    pub activation: Activation,
    /// Dropout on sub-layer outputs (HF `hidden_dropout_prob`).
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Dropout on attention probabilities.
    #[config(default = 0.1)]
    pub attention_dropout: f64,
    /// LayerNorm epsilon.
    #[config(default = 1e-12)]
    pub layer_norm_eps: f64,
    /// Dropout after the feed-forward activation (BART's `activation_dropout`).
    #[config(default = 0.0)]
    pub activation_dropout: f64,
    /// The heads of each layer, `d_model / n_heads` wide, where heads were pruned (HF
    /// `pruned_heads`); empty: `n_heads` in every layer.
    #[config(default = "Vec::new()")]
    pub layer_heads: Vec<usize>,
}

impl EncoderConfig {
    /// Build one layer with every head on `device`.
    pub fn init_layer(&self, device: &Device) -> EncoderLayer {
        self.init_layer_with_heads(self.n_heads, device)
    }

    /// Build one layer with `heads` heads of `d_model / n_heads` on `device`.
    fn init_layer_with_heads(&self, heads: usize, device: &Device) -> EncoderLayer {
        let norm = || LayerNormConfig::new(self.d_model).with_epsilon(self.layer_norm_eps).init(device);
        EncoderLayer {
            attention: MultiHeadAttentionConfig::new(self.d_model, heads)
                .with_head_dim(Some(self.d_model / self.n_heads))
                .with_dropout(self.attention_dropout)
                .init(device),
            attention_norm: norm(),
            feed_forward: FeedForwardConfig::new(self.d_model, self.d_ff, self.activation)
                .with_activation_dropout(self.activation_dropout)
                .init(device),
            output_norm: norm(),
            dropout: DropoutConfig::new(self.dropout).init(),
        }
    }

    /// Build the stack of `n_layers` independent layers on `device`.
    pub fn init(&self, device: &Device) -> Encoder {
        let heads = |layer: usize| self.layer_heads.get(layer).copied().unwrap_or(self.n_heads);
        Encoder { layers: (0..self.n_layers).map(|layer| self.init_layer_with_heads(heads(layer), device)).collect() }
    }
}

/// One post-LN layer: `x = LN(x + Attn(x)); x = LN(x + FFN(x))`.
#[derive(Module, Debug)]
pub struct EncoderLayer {
    /// Self-attention (HF `attention.self` + `attention.output.dense`).
    pub attention: MultiHeadAttention,
    /// LayerNorm after attention (HF `attention.output.LayerNorm`).
    pub attention_norm: LayerNorm,
    /// Feed-forward block (HF `intermediate.dense` + `output.dense`).
    pub feed_forward: FeedForward,
    /// LayerNorm after the feed-forward block (HF `output.LayerNorm`).
    pub output_norm: LayerNorm,
    /// Dropout on both sub-layer outputs.
    pub dropout: Dropout,
}

impl EncoderLayer {
    /// `[batch, seq, d] -> [batch, seq, d]`, plus attention probabilities when asked.
    pub fn forward(
        &self,
        x: Tensor<3>,
        mask: &AttentionMask,
        return_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        self.parts().forward(x, mask, return_probs)
    }

    /// The layer's sub-blocks, borrowed.
    pub fn parts(&self) -> LayerParts<'_> {
        LayerParts {
            attention: &self.attention,
            attention_norm: &self.attention_norm,
            feed_forward: &self.feed_forward,
            output_norm: &self.output_norm,
            dropout: &self.dropout,
        }
    }
}

/// The sub-blocks of one post-LN layer, borrowed from wherever they live: one
/// [`EncoderLayer`], or several owners when a family shares only part of a layer across depths
/// (ALBERT's attention-only or FFN-only sharing).
#[derive(Clone, Copy, Debug)]
pub struct LayerParts<'a> {
    /// Self-attention.
    pub attention: &'a MultiHeadAttention,
    /// LayerNorm after attention.
    pub attention_norm: &'a LayerNorm,
    /// Feed-forward block.
    pub feed_forward: &'a FeedForward,
    /// LayerNorm after the feed-forward block.
    pub output_norm: &'a LayerNorm,
    /// Dropout on both sub-layer outputs.
    pub dropout: &'a Dropout,
}

impl LayerParts<'_> {
    /// `x = LN(x + Attn(x)); x = LN(x + FFN(x))`, plus attention probabilities when asked.
    pub fn forward(self, x: Tensor<3>, mask: &AttentionMask, return_probs: bool) -> (Tensor<3>, Option<Tensor<4>>) {
        let (attended, probs) = self.attention.forward(x.clone(), x.clone(), mask, return_probs);
        (self.finish(x, attended, None), probs)
    }

    /// The same layer over packed tokens `x` `[1, tokens, d]` ([`Packing::pack`]): only the
    /// attention scores see the padded batch.
    pub fn forward_packed(self, x: Tensor<3>, mask: &AttentionMask, packing: &Packing, return_probs: bool) -> (Tensor<3>, Option<Tensor<4>>) {
        let (attended, probs) = self.attention.forward_packed(x.clone(), mask, packing, return_probs);
        (self.finish(x, attended, Some(packing)), probs)
    }

    /// The same layer run incrementally: `x` `[batch, s_new, d]` holds only new positions,
    /// which attend to the `past` ones (none at the first pass) and to themselves; `mask`
    /// covers `[batch, s_new, past + s_new]`. Also returns the cache extended by `x`.
    pub fn forward_cached(
        self,
        x: Tensor<3>,
        mask: &AttentionMask,
        past: Option<KvCache>,
        return_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>, KvCache) {
        let (attended, probs, cache) = self.attention.forward_cached(x.clone(), mask, past, return_probs);
        (self.finish(x, attended, None), probs, cache)
    }

    /// The residual connections, LayerNorms and feed-forward block around attention's output,
    /// over tokens packed by `packing` when one is given.
    fn finish(self, x: Tensor<3>, attended: Tensor<3>, packing: Option<&Packing>) -> Tensor<3> {
        let x = self.attention_norm.forward(x + self.dropout.forward_in(attended, packing));
        self.output_norm.forward(x.clone() + self.dropout.forward_in(self.feed_forward.forward_in(x, packing), packing))
    }

    /// An owned layer of these sub-blocks (their parameters keep their ids).
    pub fn to_layer(self) -> EncoderLayer {
        EncoderLayer {
            attention: self.attention.clone(),
            attention_norm: self.attention_norm.clone(),
            feed_forward: self.feed_forward.clone(),
            output_norm: self.output_norm.clone(),
            dropout: self.dropout.clone(),
        }
    }
}

/// The layers `keep` (0-based, increasing, at least one) of a stack `layers`; refused, naming
/// the config's `field`, otherwise.
pub fn pick_layers<T: Clone>(layers: &[T], keep: &[usize], field: &str) -> Result<Vec<T>, crate::ConfigError> {
    let n = layers.len();
    if keep.is_empty() || keep.windows(2).any(|w| w[0] >= w[1]) || keep.iter().any(|&l| l >= n) {
        return Err(crate::ConfigError::Invalid { field: field.into(), reason: format!("cannot keep layers {keep:?} of {n}") });
    }
    Ok(keep.iter().map(|&l| layers[l].clone()).collect())
}

/// What an encoder returns.
#[derive(Clone, Debug)]
pub struct EncoderOutput {
    /// The last layer's output `[batch, seq, d]`.
    pub last_hidden_state: Tensor<3>,
    /// The input embeddings followed by every layer's output (HF `hidden_states`), when asked.
    pub hidden_states: Option<Vec<Tensor<3>>>,
    /// Every layer's attention probabilities `[batch, heads, seq, seq]`, when asked.
    pub attentions: Option<Vec<Tensor<4>>>,
    /// Every layer's keys and values so far, when the input carried a cache.
    pub cache: Option<EncoderCache>,
}

impl EncoderOutput {
    /// Every layer's hidden state and attention present, under HF's names (`hidden_states.0`,
    /// `attentions.1`).
    pub fn named_layers(&self) -> Vec<NamedOutput> {
        let mut out = Vec::new();
        push_all(&mut out, "hidden_states", &self.hidden_states);
        push_all(&mut out, "attentions", &self.attentions);
        out
    }
}

/// The keys and values of earlier positions in every layer of an encoder run incrementally
/// (one [`KvCache`] per layer, in the order the layers run). Start with
/// `EncoderCache::default()`; each forward pass returns the cache extended by its positions.
#[derive(Clone, Debug, Default)]
pub struct EncoderCache {
    /// One cache per layer run; empty before the first pass.
    pub layers: Vec<KvCache>,
}

impl EncoderCache {
    /// Number of cached positions.
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, KvCache::len)
    }

    /// Whether no position is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every layer's first `len` cached positions (see [`KvCache::truncate`]).
    pub fn truncate(&self, len: usize) -> EncoderCache {
        EncoderCache { layers: self.layers.iter().map(|layer| layer.truncate(len)).collect() }
    }

    /// Every layer's cache of rows `rows`, in that order (see [`KvCache::select_rows`]).
    pub fn select_rows(&self, rows: &Tensor<1, Int>) -> EncoderCache {
        EncoderCache { layers: self.layers.iter().map(|layer| layer.select_rows(rows)).collect() }
    }
}

/// What to return besides the last hidden state.
#[derive(Clone, Copy, Debug, Default)]
pub struct OutputOptions {
    /// Return the embeddings and every layer's output.
    pub hidden_states: bool,
    /// Return every layer's attention probabilities.
    pub attentions: bool,
    /// Run the layers' dense blocks over the tokens alone, padding removed
    /// ([`crate::packing`]): faster, the same at every token, but the layers' outputs are
    /// zeros at padding positions. For callers that never read those positions (pooled
    /// embeddings); ignored with a cache and by layers that cannot pack (XLNet's).
    pub tokens_only: bool,
}

impl OutputOptions {
    /// Ask for everything.
    pub fn all() -> Self {
        Self { hidden_states: true, attentions: true, tokens_only: false }
    }

    /// Ask for nothing but the model's logits: no layer's states, so its layers may skip the
    /// padding where they can ([`Self::tokens_only`]).
    pub fn logits_only() -> Self {
        Self { tokens_only: true, ..Self::default() }
    }
}

/// A stack of independent [`EncoderLayer`]s (HF `encoder.layer.N`).
#[derive(Module, Debug)]
pub struct Encoder {
    /// The layers, applied in order.
    pub layers: Vec<EncoderLayer>,
}

impl Encoder {
    /// The stack without the heads `prune` names per layer, numbered as in the unpruned layers
    /// (of `n_heads` each), from which `pruned` were removed before; heads already pruned are
    /// skipped, as transformers' `prune_heads` does. The configuration records the union
    /// ([`crate::EncoderHyperParams::add_pruned`]).
    pub fn prune_heads(mut self, n_heads: usize, pruned: &BTreeMap<usize, BTreeSet<usize>>, prune: &BTreeMap<usize, BTreeSet<usize>>) -> Self {
        for (&layer, heads) in prune {
            let Some(slot) = self.layers.get_mut(layer) else { continue };
            let before = pruned.get(&layer).cloned().unwrap_or_default();
            // The numbers of the heads still in the layer, in order: a head's place among them
            // is its index in the pruned layer.
            let kept: Vec<usize> = (0..n_heads).filter(|h| !before.contains(h)).collect();
            let now: BTreeSet<usize> = kept.iter().enumerate().filter(|(_, h)| heads.contains(h)).map(|(i, _)| i).collect();
            if !now.is_empty() {
                let layer = slot.clone();
                *slot = EncoderLayer { attention: layer.attention.without_heads(&now), ..layer };
            }
        }
        self
    }

    /// The stack of only the layers `layers` (0-based, increasing, at least one).
    pub fn keep_layers(&self, layers: &[usize]) -> Result<Self, crate::ConfigError> {
        Ok(Self { layers: pick_layers(&self.layers, layers, "num_hidden_layers")? })
    }

    /// Run every layer over `x` `[batch, seq, d]`, incrementally when `cache` is given.
    pub fn forward(&self, x: Tensor<3>, mask: &AttentionMask, cache: Option<EncoderCache>, options: OutputOptions) -> EncoderOutput {
        run_layers(self.layers.iter().map(EncoderLayer::parts), x, mask, cache, options)
    }
}

/// Run `layers` in order, collecting what `options` asks for, and extending `cache` when one
/// is given. Families that share one layer across depths (ALBERT) pass the same layer, or the
/// same sub-blocks, several times; every depth keeps its own cache.
pub fn run_layers<'a>(
    layers: impl Iterator<Item = LayerParts<'a>>,
    mut x: Tensor<3>,
    mask: &AttentionMask,
    cache: Option<EncoderCache>,
    options: OutputOptions,
) -> EncoderOutput {
    let mut collect = Collector::new(&x, options);
    let packing = match (&mask.padding, &cache) {
        (Some(padding), None) if options.tokens_only => Packing::of(padding),
        _ => None,
    };
    if let Some(packing) = &packing {
        return run_packed(layers, x, mask, packing, collect, options);
    }
    // With a cache: the layers' past entries, and their extended entries as they come.
    let mut caches = cache.map(|c| (c.layers.into_iter(), Vec::new()));
    for layer in layers {
        let (out, probs) = match caches.as_mut() {
            Some((past, extended)) => {
                let (out, probs, layer_cache) = layer.forward_cached(x, mask, past.next(), options.attentions);
                extended.push(layer_cache);
                (out, probs)
            }
            None => layer.forward(x, mask, options.attentions),
        };
        x = out;
        collect.layer(&x, probs);
    }
    let (hidden_states, attentions) = collect.finish();
    EncoderOutput { last_hidden_state: x, hidden_states, attentions, cache: caches.map(|(_, layers)| EncoderCache { layers }) }
}

/// [`run_layers`] over the tokens of `x` alone, packed by `packing`; every output laid out as
/// the batch again, zeros at the padding.
fn run_packed<'a>(layers: impl Iterator<Item = LayerParts<'a>>, x: Tensor<3>, mask: &AttentionMask, packing: &Packing, mut collect: Collector, options: OutputOptions) -> EncoderOutput {
    let mut x = packing.pack(x);
    for layer in layers {
        let (out, probs) = layer.forward_packed(x, mask, packing, options.attentions);
        x = out;
        let unpacked = options.hidden_states.then(|| packing.unpack(x.clone()));
        collect.layer(unpacked.as_ref().unwrap_or(&x), probs);
    }
    let (hidden_states, attentions) = collect.finish();
    EncoderOutput { last_hidden_state: packing.unpack(x), hidden_states, attentions, cache: None }
}

/// Gathers what [`OutputOptions`] asks of a layer loop (every layer loop uses it: encoder
/// layers, decoder layers): the input and each layer's output, each layer's attention.
pub(crate) struct Collector {
    hidden_states: Option<Vec<Tensor<3>>>,
    attentions: Option<Vec<Tensor<4>>>,
}

impl Collector {
    /// Start with the layers' input `x`.
    pub(crate) fn new(x: &Tensor<3>, options: OutputOptions) -> Self {
        Self { hidden_states: options.hidden_states.then(|| vec![x.clone()]), attentions: options.attentions.then(Vec::new) }
    }

    /// One layer's output and attention probabilities.
    pub(crate) fn layer(&mut self, x: &Tensor<3>, probs: Option<Tensor<4>>) {
        if let Some(states) = self.hidden_states.as_mut() {
            states.push(x.clone());
        }
        if let (Some(all), Some(p)) = (self.attentions.as_mut(), probs) {
            all.push(p);
        }
    }

    /// Hidden states and attentions, each when asked.
    pub(crate) fn finish(self) -> (Option<Vec<Tensor<3>>>, Option<Vec<Tensor<4>>>) {
        (self.hidden_states, self.attentions)
    }
}

/// A named output value as HF names it (`decoder_hidden_states.0`), on the host.
pub type NamedOutput = (String, TensorData);
/// Append `name.i` for every tensor of `tensors`, when present.
pub fn push_all<const D: usize>(out: &mut Vec<NamedOutput>, name: &str, tensors: &Option<Vec<Tensor<D>>>) {
    for (i, t) in tensors.iter().flatten().enumerate() {
        out.push((format!("{name}.{i}"), t.to_data()));
    }
}
