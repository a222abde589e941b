//! Post-LN transformer decoder layer with cross-attention (HF `BartDecoderLayer`), and the
//! decoding cache: self-attention keys/values that grow, cross-attention keys/values computed
//! once from the encoder output.

use burn::nn::{LayerNorm, LayerNormConfig};
use burn::prelude::*;

use crate::activation::Activation;
use crate::attention::{row_index, AttentionMask, KvCache, MultiHeadAttention, MultiHeadAttentionConfig};
use crate::dropout::{Dropout, DropoutConfig};
use crate::encoder::{Collector, OutputOptions};
use crate::feed_forward::{FeedForward, FeedForwardConfig};

/// Configuration of [`DecoderLayer`].
#[derive(Config, Debug)]
pub struct DecoderLayerConfig {
    /// Model width.
    pub d_model: usize,
    /// Feed-forward width.
    pub d_ff: usize,
    /// Number of attention heads (self and cross).
    pub n_heads: usize,
    /// Feed-forward activation.
    pub activation: Activation,
    /// Dropout on sub-layer outputs.
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Dropout on attention probabilities.
    #[config(default = 0.0)]
    pub attention_dropout: f64,
    /// Dropout after the feed-forward activation.
    #[config(default = 0.0)]
    pub activation_dropout: f64,
    /// LayerNorm epsilon.
    #[config(default = 1e-5)]
    pub layer_norm_eps: f64,
}

impl DecoderLayerConfig {
    /// Build one layer on `device`.
    pub fn init(&self, device: &Device) -> DecoderLayer {
        let norm = || LayerNormConfig::new(self.d_model).with_epsilon(self.layer_norm_eps).init(device);
        let attention = || MultiHeadAttentionConfig::new(self.d_model, self.n_heads).with_dropout(self.attention_dropout).init(device);
        DecoderLayer {
            attention: attention(),
            attention_norm: norm(),
            cross_attention: attention(),
            cross_attention_norm: norm(),
            feed_forward: FeedForwardConfig::new(self.d_model, self.d_ff, self.activation)
                .with_activation_dropout(self.activation_dropout)
                .init(device),
            output_norm: norm(),
            dropout: DropoutConfig::new(self.dropout).init(),
        }
    }
}

/// One post-LN decoder layer: `x = LN(x + SelfAttn(x)); x = LN(x + CrossAttn(x, enc));
/// x = LN(x + FFN(x))`.
#[derive(Module, Debug)]
pub struct DecoderLayer {
    /// Masked self-attention (HF `self_attn`).
    pub attention: MultiHeadAttention,
    /// LayerNorm after self-attention (HF `self_attn_layer_norm`).
    pub attention_norm: LayerNorm,
    /// Attention to the encoder output (HF `encoder_attn`).
    pub cross_attention: MultiHeadAttention,
    /// LayerNorm after cross-attention (HF `encoder_attn_layer_norm`).
    pub cross_attention_norm: LayerNorm,
    /// Feed-forward block (HF `fc1`, `fc2`).
    pub feed_forward: FeedForward,
    /// LayerNorm after the feed-forward block (HF `final_layer_norm`).
    pub output_norm: LayerNorm,
    /// Dropout on every sub-layer output.
    pub dropout: Dropout,
}

/// What one decoder layer returns.
pub struct DecoderLayerOutput {
    /// `[rows, s_new, d]`.
    pub hidden: Tensor<3>,
    /// Self-attention probabilities `[rows, heads, s_new, past + s_new]`, when asked.
    pub attention: Option<Tensor<4>>,
    /// Cross-attention probabilities `[rows, heads, s_new, s_src]`, when asked.
    pub cross_attention: Option<Tensor<4>>,
    /// The self-attention keys and values extended by the new positions.
    pub cache: KvCache,
}

impl DecoderLayer {
    /// Run `x` `[rows, s_new, d]` (positions after the `past` ones, none at the first pass)
    /// under `mask` `[rows, s_new, past + s_new]`, attending to the encoder's keys and values
    /// `cross` (of `rows / g` rows, see [`MultiHeadAttention::forward_kv`]) under `cross_mask`;
    /// without an encoder (`cross` `None`, a decoder-only model) the cross-attention block is
    /// skipped, as HF skips it.
    pub fn forward(
        &self,
        x: Tensor<3>,
        mask: &AttentionMask,
        past: Option<KvCache>,
        cross: Option<&KvCache>,
        cross_mask: &AttentionMask,
        return_probs: bool,
    ) -> DecoderLayerOutput {
        let (attended, attention, cache) = self.attention.forward_cached(x.clone(), mask, past, return_probs);
        let mut x = self.attention_norm.forward(x + self.dropout.forward(attended));
        let mut cross_attention = None;
        if let Some(cross) = cross {
            let (attended, probs) = self.cross_attention.forward_kv(x.clone(), cross, cross_mask, return_probs);
            x = self.cross_attention_norm.forward(x + self.dropout.forward(attended));
            cross_attention = probs;
        }
        let hidden = self.output_norm.forward(x.clone() + self.dropout.forward(self.feed_forward.forward(x)));
        DecoderLayerOutput { hidden, attention, cross_attention, cache }
    }
}

/// Every decoder layer's keys and values: self-attention over the positions decoded so far
/// (grows each step), cross-attention over the encoder output (computed once, one row per
/// prompt, shared by that prompt's `rows_per_prompt` decoder rows).
#[derive(Clone, Debug)]
pub struct DecoderCache {
    /// Per layer, self-attention keys and values `[rows, heads, past, head_dim]`.
    pub self_attention: Vec<KvCache>,
    /// Per layer, the encoder output's keys and values `[prompts, heads, s_src, head_dim]`.
    pub cross_attention: Vec<KvCache>,
    /// The encoder's padding mask `[prompts, s_src]` (1 = token), when it had one.
    pub encoder_attention_mask: Option<Tensor<2, Int>>,
    /// Decoder rows per prompt: 1, or the number of beams.
    pub rows_per_prompt: usize,
}

impl DecoderCache {
    /// The cross-attention keys and values of `layers` for `encoder_hidden_states`
    /// `[prompts, s_src, d]` and its padding mask; no decoded position yet.
    pub fn new(layers: &[DecoderLayer], encoder_hidden_states: Tensor<3>, encoder_attention_mask: Option<Tensor<2, Int>>) -> Self {
        let cross_attention = layers.iter().map(|l| l.cross_attention.keys_values(encoder_hidden_states.clone())).collect();
        Self { self_attention: Vec::new(), cross_attention, encoder_attention_mask, rows_per_prompt: 1 }
    }

    /// The cache of a decoder run without an encoder (HF `BartForCausalLM`).
    pub fn without_encoder() -> Self {
        Self { self_attention: Vec::new(), cross_attention: Vec::new(), encoder_attention_mask: None, rows_per_prompt: 1 }
    }

    /// Number of decoded positions cached.
    pub fn len(&self) -> usize {
        self.self_attention.first().map_or(0, KvCache::len)
    }

    /// Whether no decoded position is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keep decoder rows `rows` (a row may repeat or go). When every new row continues a row of
    /// its own prompt, with as many rows per prompt throughout (beam search), the encoder's
    /// keys and values stay as they are, one row per prompt; otherwise they are copied per row.
    pub fn select_rows(&mut self, rows: &[usize], device: &Device) {
        let prompts = self.cross_attention.first().map_or(0, |kv| kv.key.dims()[0]);
        let g = self.rows_per_prompt;
        let shared = prompts > 0 && rows.len() % prompts == 0 && {
            let g_new = rows.len() / prompts;
            rows.iter().enumerate().all(|(new, &old)| new / g_new == old / g)
        };
        if !shared {
            // Give every row its own copy of its prompt's keys and values.
            let of_prompt: Vec<usize> = rows.iter().map(|&r| r / g).collect();
            let select = row_index(&of_prompt, device);
            self.cross_attention = self.cross_attention.iter().map(|kv| kv.select_rows(&select)).collect();
            self.encoder_attention_mask = self.encoder_attention_mask.take().map(|m| m.select(0, select.clone()));
            self.rows_per_prompt = 1;
        } else if prompts > 0 {
            self.rows_per_prompt = rows.len() / prompts;
        }
        if !self.self_attention.is_empty() {
            let select = row_index(rows, device);
            self.self_attention = self.self_attention.iter().map(|kv| kv.select_rows(&select)).collect();
        }
    }
}

/// What a decoder stack returns (HF names: the decoder's `last_hidden_state`,
/// `hidden_states`, `attentions`, `cross_attentions`).
#[derive(Clone, Debug)]
pub struct DecoderOutput {
    /// The last layer's output `[rows, s_new, d]`.
    pub last_hidden_state: Tensor<3>,
    /// The embeddings followed by every layer's output, when asked.
    pub hidden_states: Option<Vec<Tensor<3>>>,
    /// Every layer's self-attention probabilities, when asked.
    pub attentions: Option<Vec<Tensor<4>>>,
    /// Every layer's cross-attention probabilities, when asked.
    pub cross_attentions: Option<Vec<Tensor<4>>>,
    /// The cache extended by the new positions.
    pub cache: DecoderCache,
}

/// Run `layers` over the embedded decoder input `x` `[rows, s_new, d]`, after the positions in
/// `cache` (which holds the encoder's keys and values), causally and under the decoder's
/// padding mask `attention_mask` `[rows, past + s_new]` when given.
pub fn run_decoder_layers(
    layers: &[DecoderLayer],
    mut x: Tensor<3>,
    attention_mask: Option<Tensor<2, Int>>,
    cache: DecoderCache,
    options: OutputOptions,
) -> DecoderOutput {
    let [rows, s, _] = x.dims();
    let past = cache.len();
    let device = x.device();
    let mut mask = match attention_mask {
        Some(m) => AttentionMask::padding(m, s),
        None => AttentionMask::none(),
    };
    if let Some(future) = crate::attention::causal_restriction(rows, s, past, &device) {
        mask = mask.and_masked(future);
    }
    let g = cache.rows_per_prompt;
    let cross_mask = match &cache.encoder_attention_mask {
        Some(m) => AttentionMask::padding(m.clone(), g * s),
        None => AttentionMask::none(),
    };
    let mut collect = Collector::new(&x, options);
    let has_encoder = !cache.cross_attention.is_empty();
    let mut cross_attentions = (options.attentions && has_encoder).then(Vec::new);
    let mut pasts = cache.self_attention.into_iter();
    let mut extended = Vec::with_capacity(layers.len());
    for (i, layer) in layers.iter().enumerate() {
        let out = layer.forward(x, &mask, pasts.next(), cache.cross_attention.get(i), &cross_mask, options.attentions);
        x = out.hidden;
        collect.layer(&x, out.attention);
        if let (Some(all), Some(p)) = (cross_attentions.as_mut(), out.cross_attention) {
            all.push(p);
        }
        extended.push(out.cache);
    }
    let (hidden_states, attentions) = collect.finish();
    let cache = DecoderCache { self_attention: extended, ..cache };
    DecoderOutput { last_hidden_state: x, hidden_states, attentions, cross_attentions, cache }
}
