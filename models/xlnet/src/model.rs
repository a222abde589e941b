//! The XLNet encoder (HF `XLNetModel`), top to bottom: word embeddings (no positions: they
//! enter every layer's attention as sinusoidal *relative* encodings), then layers of
//! two-stream relative attention and a feed-forward block, each post-LN. The content stream
//! `h` runs over every position; the query stream `g` (with `target_mapping`) starts from
//! `mask_emb` and runs over the predicted positions, seeing the content of the positions
//! `perm_mask` allows but never its own. Each layer can also attend to a memory of earlier
//! segments' states (`mems`, Transformer-XL's recurrence).
//!
//! Tensors are batch-first (`[batch, seq, d_model]`); HF's are sequence-first inside, and its
//! `mems` are returned sequence-first (`named()` writes them so).

use burn::module::Param;
use burn::nn::{Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig};
use burn::prelude::*;
use burn::tensor::activation::softmax;
use sesame_layers::{Dropout, DropoutConfig, FeedForward, FeedForwardConfig, InputError, NamedOutput, OutputOptions};

use crate::config::{AttnType, XlnetConfig};

/// One batch of XLNet input (HF argument names), batch-first.
#[derive(Clone, Debug)]
pub struct XlnetInput {
    /// Token ids `[batch, seq]`.
    pub input_ids: Tensor<2, Int>,
    /// 1 for tokens, 0 for padding `[batch, seq]` (HF `attention_mask`; XLNet pads on the left).
    pub attention_mask: Option<Tensor<2>>,
    /// Segment ids `[batch, seq]`; no segment term when absent.
    pub token_type_ids: Option<Tensor<2, Int>>,
    /// `[batch, seq, seq]`, 1 where position `i` may **not** see position `j` (the factorisation
    /// order of permutation LM). The content stream always sees itself.
    pub perm_mask: Option<Tensor<3>>,
    /// `[batch, num_predict, seq]`, one-hot rows: the positions the query stream predicts.
    pub target_mapping: Option<Tensor<3>>,
    /// Each layer's memory of earlier segments `[batch, mem, d_model]`, attended to by every
    /// position (HF `mems`, here batch-first).
    pub mems: Option<Vec<Tensor<3>>>,
    /// Return the new memory; `None`: the config's `use_mems_eval`.
    pub use_mems: Option<bool>,
}

impl XlnetInput {
    /// Input from token ids alone.
    pub fn new(input_ids: Tensor<2, Int>) -> Self {
        Self { input_ids, attention_mask: None, token_type_ids: None, perm_mask: None, target_mapping: None, mems: None, use_mems: None }
    }

    /// Length of the memory given.
    pub fn mem_len(&self) -> usize {
        self.mems.as_ref().and_then(|m| m.first()).map_or(0, |m| m.dims()[1])
    }

    /// Check shapes and ids against `config`.
    pub fn validate(&self, config: &XlnetConfig) -> Result<(), InputError> {
        let [b, s] = self.input_ids.dims();
        let shape = |what: &'static str, expected: Vec<usize>, found: Vec<usize>| {
            if expected == found { Ok(()) } else { Err(InputError::ShapeMismatch { what, expected, found }) }
        };
        sesame_layers::pretrained::check_shape(&self.input_ids, None, "input_ids", usize::MAX)?;
        sesame_layers::pretrained::check_ids(&self.input_ids, config.vocab_size, "token")?;
        if let Some(mask) = &self.attention_mask {
            shape("attention_mask", vec![b, s], mask.dims().to_vec())?;
        }
        if let Some(types) = &self.token_type_ids {
            shape("token_type_ids", vec![b, s], types.dims().to_vec())?;
        }
        if let Some(perm) = &self.perm_mask {
            shape("perm_mask", vec![b, s, s], perm.dims().to_vec())?;
        }
        if let Some(mapping) = &self.target_mapping {
            let [mb, m, ms] = mapping.dims();
            shape("target_mapping", vec![b, m.max(1), s], vec![mb, m, ms])?;
        }
        if let Some(mems) = &self.mems {
            let m = self.mem_len();
            if mems.len() != config.n_layer {
                return Err(InputError::ShapeMismatch { what: "mems", expected: vec![config.n_layer], found: vec![mems.len()] });
            }
            for mem in mems {
                shape("mems", vec![b, m, config.d_model], mem.dims().to_vec())?;
            }
        }
        if config.bi_data && b % 2 == 1 {
            return Err(InputError::Invalid { what: "input_ids", reason: format!("bi_data runs half of the batch forwards and half backwards: {b} rows is odd") });
        }
        Ok(())
    }
}

/// What [`XlnetModel`] returns.
#[derive(Clone, Debug)]
pub struct XlnetOutput {
    /// The query stream's last states `[batch, num_predict, d]` with `target_mapping`, else the
    /// content stream's `[batch, seq, d]`.
    pub last_hidden_state: Tensor<3>,
    /// Each layer's new memory `[batch, mem, d]` (its input states, after the old memory,
    /// cut to `mem_len`), when memory is used.
    pub mems: Option<Vec<Tensor<3>>>,
    /// Every layer's input and the last output, as HF lists them: in two-stream mode content
    /// and query states alternate (`h0, g0, h1, g1, …`). Empty unless asked.
    pub hidden_states: Vec<Tensor<3>>,
    /// Attention probabilities `[batch, heads, queries, keys]` of each layer: the content
    /// stream's, then (two-stream) the query stream's over every position. Empty unless asked.
    pub attentions: Vec<(Tensor<4>, Option<Tensor<4>>)>,
}

impl XlnetOutput {
    /// Every output present, under HF's names: `last_hidden_state`, `mems.0` (sequence-first,
    /// `[mem, batch, d]`, as HF returns them), `hidden_states.0`, `attentions.0` (two-stream:
    /// `attentions.0.0` content, `attentions.0.1` query).
    pub fn named(&self) -> Vec<NamedOutput> {
        let mut out = vec![("last_hidden_state".to_string(), self.last_hidden_state.to_data())];
        out.extend(self.named_layers());
        out
    }

    /// The memory, hidden states and attentions under HF's names.
    pub fn named_layers(&self) -> Vec<NamedOutput> {
        let mut out = Vec::new();
        for (i, mem) in self.mems.iter().flatten().enumerate() {
            out.push((format!("mems.{i}"), mem.clone().swap_dims(0, 1).to_data()));
        }
        for (i, h) in self.hidden_states.iter().enumerate() {
            out.push((format!("hidden_states.{i}"), h.to_data()));
        }
        for (i, (h, g)) in self.attentions.iter().enumerate() {
            match g {
                Some(g) => {
                    out.push((format!("attentions.{i}.0"), h.to_data()));
                    out.push((format!("attentions.{i}.1"), g.to_data()));
                }
                None => out.push((format!("attentions.{i}"), h.to_data())),
            }
        }
        out
    }
}

/// Relative multi-head attention with content, position and segment terms (HF
/// `XLNetRelativeAttention`): projections `[d_model, heads, d_head]` as HF stores them.
#[derive(Module, Debug)]
pub struct RelativeAttention {
    /// Query projection.
    pub q: Param<Tensor<3>>,
    /// Key projection (content).
    pub k: Param<Tensor<3>>,
    /// Value projection.
    pub v: Param<Tensor<3>>,
    /// Output projection (back to `d_model`).
    pub o: Param<Tensor<3>>,
    /// Key projection of the relative position encodings.
    pub r: Param<Tensor<3>>,
    /// Query bias of the content term `[heads, d_head]`.
    pub r_w_bias: Param<Tensor<2>>,
    /// Query bias of the position term.
    pub r_r_bias: Param<Tensor<2>>,
    /// Query bias of the segment term.
    pub r_s_bias: Param<Tensor<2>>,
    /// Same-segment and other-segment keys `[2, heads, d_head]`.
    pub seg_embed: Param<Tensor<3>>,
    /// LayerNorm after the residual.
    pub layer_norm: LayerNorm,
    /// Dropout on probabilities and on the output.
    pub dropout: Dropout,
}

/// What every layer's attention shares: masks, positions and segments.
struct AttentionContext {
    /// Content-stream mask `[batch, 1, q, k]`, `1e30` where masked (HF subtracts
    /// `1e30 · mask`), every position seeing itself.
    mask_h: Option<Tensor<4>>,
    /// Query-stream mask `[batch, 1, q, k]`, `1e30` where masked.
    mask_g: Option<Tensor<4>>,
    /// 1 where query and key lie in different segments `[batch, 1, q, k]`.
    seg_mat: Option<Tensor<4>>,
    /// `[batch, 1, num_predict, seq]`.
    target_mapping: Option<Tensor<4>>,
    /// The predicted positions, when `target_mapping` has one-hot (or empty) rows.
    targets: Option<Targets>,
    klen: usize,
    return_probs: bool,
}

/// The query stream run over its `m` predicted positions only. transformers places each
/// predicted query at its position and attends from every position (`seq` rows, most of them
/// multiplied by zero afterwards); with one-hot rows the same numbers come from the `m` rows
/// alone.
struct Targets {
    /// `[batch, heads, m, klen]`: for predicted row `k` at position `i` and key `j`, the column
    /// `j + q − i` of the position scores that `rel_shift` brings to `(i, j)`.
    shift: Tensor<4, Int>,
    /// The query-stream mask's rows at the predicted positions `[batch, 1, m, klen]`.
    mask: Option<Tensor<4>>,
    /// The segment matrix's rows at the predicted positions `[batch, 1, m, klen]`.
    seg: Option<Tensor<4>>,
    /// `[batch, 1, m, 1]`: 1 for a predicted row, 0 for an empty one.
    weight: Tensor<4>,
}

impl Targets {
    /// The targets of `mapping` `[b, m, q]` over `klen` keys and `positions` position
    /// encodings, for `heads` heads; `None` unless every row is one-hot or zero (checked on
    /// the host: one number read back).
    fn of(mapping: &Tensor<3>, mask_g: Option<&Tensor<4>>, seg: Option<&Tensor<4>>, [heads, klen, positions]: [usize; 3]) -> Option<Self> {
        let [b, m, q] = mapping.dims();
        let map = mapping.clone().detach();
        let row_sum = map.clone().sum_dim(2);
        let off = (map.clone() * (map.clone() - 1.0)).abs().sum() + (row_sum.clone() - 1.0).clamp_min(0.0).sum();
        if off.into_scalar::<f32>() != 0.0 {
            return None;
        }
        let device = mapping.device();
        let pos = map.argmax(2).reshape([b, 1, m, 1]);
        let keys = Tensor::<1, Int>::arange(0..klen as i64, &device).reshape([1, 1, 1, klen]);
        let shift = (keys + q as i64 - pos.clone()).clamp_max(positions as i64 - 1).expand([b, heads, m, klen]);
        let rows = |t: &Tensor<4>| {
            let [tb, _, _, k] = t.dims();
            t.clone().gather(2, pos.clone().expand([tb, 1, m, k]))
        };
        Some(Self { shift, mask: mask_g.map(rows), seg: seg.map(rows), weight: row_sum.reshape([b, 1, m, 1]) })
    }
}

impl RelativeAttention {
    fn new(config: &XlnetConfig, device: &Device) -> Self {
        let (d, n, h) = (config.d_model, config.n_head, config.head_width());
        let init = Initializer::Normal { mean: 0.0, std: config.initializer_range };
        Self {
            q: init.init([d, n, h], device),
            k: init.init([d, n, h], device),
            v: init.init([d, n, h], device),
            o: init.init([d, n, h], device),
            r: init.init([d, n, h], device),
            r_w_bias: init.init([n, h], device),
            r_r_bias: init.init([n, h], device),
            r_s_bias: init.init([n, h], device),
            seg_embed: init.init([2, n, h], device),
            layer_norm: LayerNormConfig::new(d).with_epsilon(config.layer_norm_eps).init(device),
            dropout: DropoutConfig::new(config.dropout).init(),
        }
    }

    /// `x` `[batch, len, d]` through `weight` `[d, heads, d_head]`: `[batch, heads, len, d_head]`.
    fn heads(x: Tensor<3>, weight: &Param<Tensor<3>>) -> Tensor<4> {
        let [b, l, d] = x.dims();
        let [_, n, h] = weight.dims();
        x.reshape([b * l, d]).matmul(weight.val().reshape([d, n * h])).reshape([b, l, n, h]).swap_dims(1, 2)
    }

    /// A `[heads, d_head]` bias broadcast over `[batch, heads, len, d_head]`.
    fn bias(bias: &Param<Tensor<2>>) -> Tensor<4> {
        let [n, h] = bias.dims();
        bias.val().reshape([1, n, 1, h])
    }

    /// HF `rel_shift_bnij`: scores against positions `[b, n, q, P]` to scores against keys
    /// `[b, n, q, klen]`, by HF's reshape (entries that fall outside are masked in any use).
    fn rel_shift(x: Tensor<4>, klen: usize) -> Tensor<4> {
        let [b, n, q, p] = x.dims();
        x.reshape([b, n, p, q]).slice([0..b, 0..n, 1..p, 0..q]).reshape([b, n, q, p - 1]).slice([0..b, 0..n, 0..q, 0..klen])
    }

    /// Attention of queries `q_head` `[b, n, q, h]` over keys and values `[b, n, k, h]`, with
    /// the additive `mask` and segment matrix `seg` `[b, 1, q, k]`; the position scores
    /// `rel_shift`ed, or gathered by `shift` (queries at chosen positions): the output
    /// `[b, n, q, h]` and the probabilities when asked.
    #[allow(clippy::too_many_arguments)]
    fn core(
        &self,
        q_head: Tensor<4>,
        [k_head_h, v_head_h, k_head_r]: [&Tensor<4>; 3],
        mask: Option<&Tensor<4>>,
        seg: Option<&Tensor<4>>,
        shift: Option<&Tensor<4, Int>>,
        ctx: &AttentionContext,
    ) -> (Tensor<4>, Option<Tensor<4>>) {
        let scale = 1.0 / (q_head.dims()[3] as f64).sqrt();
        let ac = (q_head.clone() + Self::bias(&self.r_w_bias)).matmul(k_head_h.clone().swap_dims(2, 3));
        let bd = (q_head.clone() + Self::bias(&self.r_r_bias)).matmul(k_head_r.clone().swap_dims(2, 3));
        let bd = match shift {
            Some(shift) => bd.gather(3, shift.clone()),
            None => Self::rel_shift(bd, ctx.klen),
        };
        let mut score = ac + bd;
        if let Some(seg) = seg {
            // (q + r_s_bias) against the same-segment and other-segment embeddings: [b, n, q, 2].
            let [_, n, h] = self.seg_embed.dims();
            let ef = (q_head + Self::bias(&self.r_s_bias)).matmul(self.seg_embed.val().permute([1, 2, 0]).reshape([1, n, h, 2]));
            let [b, n, q, _] = ef.dims();
            let same = ef.clone().slice([0..b, 0..n, 0..q, 0..1]);
            let other = ef.slice([0..b, 0..n, 0..q, 1..2]);
            score = score + (same.clone() + (other - same) * seg.clone());
        }
        let mut score = score * scale;
        if let Some(mask) = mask {
            score = score - mask.clone();
        }
        let probs = self.dropout.forward(softmax(score, 3));
        let out = probs.clone().matmul(v_head_h.clone());
        (out, ctx.return_probs.then_some(probs))
    }

    /// HF `post_attention`: `o` back to `d_model`, dropout, residual, LayerNorm.
    fn post_attention(&self, residual: Tensor<3>, attn_vec: Tensor<4>) -> Tensor<3> {
        let [b, n, q, h] = attn_vec.dims();
        let d = self.o.dims()[0];
        let flat = attn_vec.swap_dims(1, 2).reshape([b * q, n * h]);
        let out = flat.matmul(self.o.val().reshape([d, n * h]).transpose()).reshape([b, q, d]);
        self.layer_norm.forward(self.dropout.forward(out) + residual)
    }

    /// The keys and values `[batch, heads, len, d_head]` of states `x` `[batch, len, d]`.
    fn keys_values(&self, x: Tensor<3>) -> (Tensor<4>, Tensor<4>) {
        (Self::heads(x.clone(), &self.k), Self::heads(x, &self.v))
    }

    /// One layer's attention of the content stream `h` and the query stream `g` over keys and
    /// values `[batch, heads, mem + q, d_head]` (the memory's, then `h`'s) and the position
    /// keys `[batch, heads, positions, d_head]`: the new content stream, the new query stream
    /// (when there is one) and the probabilities of each when asked.
    fn forward(&self, h: Tensor<3>, g: Option<Tensor<3>>, [k_head_h, v_head_h, k_head_r]: [Tensor<4>; 3], ctx: &AttentionContext) -> (Tensor<3>, Option<Tensor<3>>, (Option<Tensor<4>>, Option<Tensor<4>>)) {
        let q_head_h = Self::heads(h.clone(), &self.q);
        let kvr = [&k_head_h, &v_head_h, &k_head_r];
        let (attn_vec_h, probs_h) = self.core(q_head_h, kvr, ctx.mask_h.as_ref(), ctx.seg_mat.as_ref(), None, ctx);
        let output_h = self.post_attention(h, attn_vec_h);
        let Some(g) = g else {
            return (output_h, None, (probs_h, None));
        };
        let q_head_g = Self::heads(g.clone(), &self.q);
        let (attn_vec_g, probs_g) = match (&ctx.targets, &ctx.target_mapping) {
            (Some(t), _) => {
                let (vec, _) = self.core(q_head_g, kvr, t.mask.as_ref(), t.seg.as_ref(), Some(&t.shift), ctx);
                (vec * t.weight.clone(), None)
            }
            (None, Some(mapping)) => {
                // Each predicted position's query placed at its position: [b, n, seq, h].
                let placed = mapping.clone().swap_dims(2, 3).matmul(q_head_g);
                let (vec, probs) = self.core(placed, kvr, ctx.mask_g.as_ref(), ctx.seg_mat.as_ref(), None, ctx);
                (mapping.clone().matmul(vec), probs)
            }
            (None, None) => self.core(q_head_g, kvr, ctx.mask_g.as_ref(), ctx.seg_mat.as_ref(), None, ctx),
        };
        let output_g = self.post_attention(g, attn_vec_g);
        (output_h, Some(output_g), (probs_h, probs_g))
    }
}

/// One XLNet layer: relative attention, then the feed-forward block (HF `XLNetLayer`), both
/// streams through the same weights.
#[derive(Module, Debug)]
pub struct XlnetLayer {
    /// Two-stream relative attention (HF `rel_attn`).
    pub rel_attn: RelativeAttention,
    /// `layer_1`, activation, dropout, `layer_2` (HF `ff`).
    pub feed_forward: FeedForward,
    /// Dropout after `layer_2`.
    pub dropout: Dropout,
    /// LayerNorm after the feed-forward residual (HF `ff.layer_norm`).
    pub ff_layer_norm: LayerNorm,
}

impl XlnetLayer {
    fn new(config: &XlnetConfig, device: &Device) -> Self {
        Self {
            rel_attn: RelativeAttention::new(config, device),
            feed_forward: FeedForwardConfig::new(config.d_model, config.d_inner, config.ff_activation).with_activation_dropout(config.dropout).init(device),
            dropout: DropoutConfig::new(config.dropout).init(),
            ff_layer_norm: LayerNormConfig::new(config.d_model).with_epsilon(config.layer_norm_eps).init(device),
        }
    }

    fn ff(&self, x: Tensor<3>) -> Tensor<3> {
        self.ff_layer_norm.forward(self.dropout.forward(self.feed_forward.forward(x.clone())) + x)
    }
}

/// The XLNet encoder (HF `XLNetModel`).
#[derive(Module, Debug)]
pub struct XlnetModel {
    /// Token embeddings (HF `word_embedding`).
    pub word_embedding: Embedding,
    /// The query stream's input at every predicted position `[1, 1, d]`.
    pub mask_emb: Param<Tensor<3>>,
    /// The layers.
    pub layer: Vec<XlnetLayer>,
    /// Dropout on embeddings, position encodings and the output.
    pub dropout: Dropout,
    /// The switches of the forward pass.
    #[module(skip)]
    pub settings: XlnetSettings,
}

/// The config fields the forward pass reads.
#[derive(Clone, Debug)]
pub struct XlnetSettings {
    /// Bidirectional or left-to-right attention.
    pub attn_type: AttnType,
    /// Half the batch forwards, half backwards.
    pub bi_data: bool,
    /// Clamp of relative distances (negative: none).
    pub clamp_len: i64,
    /// Same number of keys for every query (uni).
    pub same_length: bool,
    /// Memory kept (`0`: all).
    pub mem_len: usize,
    /// This segment's positions kept in the memory (`0`: all).
    pub reuse_len: usize,
    /// Return the memory by default.
    pub use_mems_eval: bool,
}

impl XlnetModel {
    /// A fresh model for `config`.
    pub fn new(config: &XlnetConfig, device: &Device) -> Self {
        Self {
            word_embedding: EmbeddingConfig::new(config.vocab_size, config.d_model).init(device),
            mask_emb: Initializer::Normal { mean: 0.0, std: config.initializer_range }.init([1, 1, config.d_model], device),
            layer: (0..config.n_layer).map(|_| XlnetLayer::new(config, device)).collect(),
            dropout: DropoutConfig::new(config.dropout).init(),
            settings: XlnetSettings {
                attn_type: config.attn_type,
                bi_data: config.bi_data,
                clamp_len: config.clamp_len,
                same_length: config.same_length,
                mem_len: config.mem_len.unwrap_or(0),
                reuse_len: config.reuse_len.unwrap_or(0),
                use_mems_eval: config.use_mems_eval,
            },
        }
    }

    /// The model with only the layers `layers` (0-based, increasing), `config` saying so: a
    /// student initialised from its teacher's layers.
    pub fn keep_layers(self, config: &mut XlnetConfig, layers: &[usize]) -> Result<Self, sesame_layers::ConfigError> {
        let layer = sesame_layers::pick_layers(&self.layer, layers, "n_layer")?;
        config.n_layer = layer.len();
        Ok(Self { layer, ..self })
    }

    /// The word-embedding table `[vocab, d]` (what the LM head is tied to).
    pub fn word_embeddings(&self) -> Tensor<2> {
        self.word_embedding.weight.val()
    }

    /// HF `create_mask`: `[q, mlen + q]`, 1 where position `i` may not see key `j` under
    /// left-to-right attention.
    fn causal_mask(&self, q: usize, mlen: usize, device: &Device) -> Tensor<2> {
        let rows = Tensor::<1, Int>::arange(0..q as i64, device).reshape([q, 1]).float();
        let cols = Tensor::<1, Int>::arange(0..(mlen + q) as i64, device).reshape([1, mlen + q]).float();
        let future = cols.clone().greater(rows.clone() + mlen as f64).float();
        if !self.settings.same_length {
            return future;
        }
        // `same_length`: also hide the keys further back than the first query can see.
        let past = cols.lower(rows).float();
        let mask_lo = past.slice([0..q, 0..q]);
        let [_, k] = future.dims();
        let tail = Tensor::zeros([q, k - q], device);
        future + Tensor::cat(vec![mask_lo, tail], 1)
    }

    /// The relative positions of HF `relative_positional_encoding` for `q` queries over `klen`
    /// keys: `beg` down to `end + 1`.
    fn position_range(&self, q: usize, klen: usize) -> (i64, i64) {
        match self.settings.attn_type {
            AttnType::Bi => (klen as i64, -(q as i64)),
            AttnType::Uni => (klen as i64, -1),
        }
    }

    /// HF `relative_positional_encoding` of positions `beg` down to `end + 1`, before it is
    /// repeated for the batch: `[directions, positions, d]`, two directions (forwards, then
    /// backwards) with `bi_data`, else one.
    fn position_encodings(&self, beg: i64, end: i64, d: usize, device: &Device) -> Tensor<3> {
        let inv_freq: Vec<f32> = (0..d).step_by(2).map(|i| 1.0 / 10000f64.powf(i as f64 / d as f64) as f32).collect();
        let clamp = |p: i64| if self.settings.clamp_len > 0 { p.clamp(-self.settings.clamp_len, self.settings.clamp_len) } else { p };
        let encode = |sign: i64| {
            let positions: Vec<f32> = (end + 1..=beg).rev().map(|p| clamp(sign * p) as f32).collect();
            let p = positions.len();
            let pos = Tensor::<1>::from_data(TensorData::new(positions, [p]), device).reshape([p, 1]);
            let freq = Tensor::<1>::from_data(TensorData::new(inv_freq.clone(), [d / 2]), device).reshape([1, d / 2]);
            let sinusoid = pos * freq;
            Tensor::cat(vec![sinusoid.clone().sin(), sinusoid.cos()], 1).reshape([1, p, d])
        };
        if self.settings.bi_data {
            Tensor::cat(vec![encode(1), encode(-1)], 0)
        } else {
            encode(1)
        }
    }

    /// Per-direction rows `x` `[directions, …]` repeated for `b` batch rows: with `bi_data` the
    /// first half of the batch runs forwards, the rest backwards (HF's halves).
    fn per_row<const D: usize>(&self, x: Tensor<D>, b: usize) -> Tensor<D> {
        let mut shape = x.dims();
        if !self.settings.bi_data {
            shape[0] = b;
            return x.expand(shape);
        }
        let half = b / 2;
        let (forwards, backwards) = (x.clone().narrow(0, 0, 1), x.narrow(0, 1, 1));
        shape[0] = half;
        let forwards = forwards.expand(shape);
        shape[0] = b - half;
        Tensor::cat(vec![forwards, backwards.expand(shape)], 0)
    }

    /// `table` extended to positions `beg` down to `end + 1`: the encodings of the positions it
    /// lacks go through each layer's `r` once, and join it. Without dropout: for inference.
    fn position_keys(&self, table: Option<PositionKeys>, beg: i64, end: i64, d: usize, device: &Device) -> PositionKeys {
        let project = |beg: i64, end: i64| -> Vec<Tensor<4>> {
            let encodings = self.position_encodings(beg, end, d, device);
            self.layer.iter().map(|l| RelativeAttention::heads(encodings.clone(), &l.rel_attn.r)).collect()
        };
        let Some(mut table) = table else {
            return PositionKeys { layers: project(beg, end), top: beg, bottom: end };
        };
        if beg > table.top {
            let above = project(beg, table.top);
            table.layers = above.into_iter().zip(table.layers).map(|(new, old)| Tensor::cat(vec![new, old], 2)).collect();
            table.top = beg;
        }
        if end < table.bottom {
            let below = project(table.bottom, end);
            table.layers = table.layers.into_iter().zip(below).map(|(old, new)| Tensor::cat(vec![old, new], 2)).collect();
            table.bottom = end;
        }
        table
    }

    /// HF `cache_mem` along the positions' dimension `dim` of `all`, the old memory followed
    /// by this segment's `q` positions ([`after_memory`]): the first `reuse_len` of the segment
    /// (all when 0) after the old memory, the last `mem_len` of them kept (all when 0),
    /// detached. States `[b, mlen + q, d]` (dim 1) or their keys or values
    /// `[b, heads, mlen + q, d_head]` (dim 2).
    fn cache_mem<const D: usize>(&self, all: Tensor<D>, q: usize, dim: usize) -> Tensor<D> {
        let keep = if self.settings.reuse_len > 0 { self.settings.reuse_len.min(q) } else { q };
        let end = all.dims()[dim] - q + keep;
        let start = if self.settings.mem_len > 0 { end.saturating_sub(self.settings.mem_len) } else { 0 };
        all.narrow(dim, start, end - start).detach()
    }

    /// Run the model over `input` (check it first with [`XlnetInput::validate`]).
    pub fn forward(&self, input: XlnetInput, options: OutputOptions) -> XlnetOutput {
        self.run(input, None, options).0
    }

    /// [`XlnetModel::forward`] of `input` after `memory` instead of `input.mems`, for
    /// generation: only this segment's states become keys and values, and only the positions
    /// no earlier step encoded become position keys, so a step costs its own positions
    /// whatever the memory's length. The output (without `mems`), and the memory after this
    /// segment as `forward` with `use_mems` keeps it (`mem_len`, `reuse_len`), projected.
    pub(crate) fn forward_projected(&self, input: XlnetInput, memory: ProjectedMemory, options: OutputOptions) -> (XlnetOutput, ProjectedMemory) {
        let (out, memory) = self.run(XlnetInput { mems: None, use_mems: Some(false), ..input }, Some(memory), options);
        (out, memory.unwrap_or_default())
    }

    /// [`XlnetModel::forward`], after `projected` memory when given (then the memory after
    /// this segment is returned projected), else after `input.mems`.
    fn run(&self, input: XlnetInput, mut projected: Option<ProjectedMemory>, options: OutputOptions) -> (XlnetOutput, Option<ProjectedMemory>) {
        let device = input.input_ids.device();
        let [b, q] = input.input_ids.dims();
        let mlen = projected.as_ref().map_or_else(|| input.mem_len(), ProjectedMemory::mem_len);
        let klen = mlen + q;
        let d = self.mask_emb.dims()[2];

        // Which keys each query may not see, 1 = masked: [b, q, klen].
        let mut mask: Option<Tensor<3>> = match self.settings.attn_type {
            AttnType::Uni => Some(self.causal_mask(q, mlen, &device).reshape([1, q, klen]).expand([b, q, klen])),
            AttnType::Bi => None,
        };
        let padding = input.attention_mask.clone().map(|m| (m.neg() + 1.0).reshape([b, 1, q]).expand([b, q, q]));
        let data = match (padding, input.perm_mask.clone()) {
            (Some(p), Some(perm)) => Some(p + perm),
            (p, perm) => p.or(perm),
        };
        if let Some(data) = data {
            let data = if mlen > 0 { Tensor::cat(vec![Tensor::zeros([b, q, mlen], &device), data], 2) } else { data };
            mask = Some(match mask {
                Some(m) => m + data,
                None => data,
            });
        }
        let mask = mask.map(|m| m.greater_elem(0.0).float());
        // The content stream always sees itself.
        let non_tgt_mask = mask.clone().map(|m| {
            let eye = Tensor::<2>::eye(q, &device);
            let eye = if mlen > 0 { Tensor::cat(vec![Tensor::zeros([q, mlen], &device), eye], 1) } else { eye };
            (m - eye.reshape([1, q, klen])).greater_elem(0.0).float()
        });

        let mut output_h = self.dropout.forward(self.word_embedding.forward(input.input_ids.clone()));
        let mut output_g = input.target_mapping.as_ref().map(|mapping| {
            let m = mapping.dims()[1];
            self.dropout.forward(self.mask_emb.val().expand([b, m, d]))
        });

        let seg_mat = input.token_type_ids.as_ref().map(|types| {
            let cat = if mlen > 0 { Tensor::cat(vec![Tensor::zeros([b, mlen], &device), types.clone()], 1) } else { types.clone() };
            types.clone().reshape([b, q, 1]).not_equal(cat.reshape([b, 1, klen])).float().reshape([b, 1, q, klen])
        });
        // Position keys: in training each row's encodings under their own dropout, through each
        // layer's `r`, as HF; otherwise each direction's encodings once (the projected memory's,
        // for generation).
        let (beg, end) = self.position_range(q, klen);
        let positions = match projected.as_mut().map(|m| m.positions.take()) {
            Some(table) => PositionSource::Keys(self.position_keys(table, beg, end, d, &device)),
            None if self.dropout.is_active(&device) => PositionSource::Encodings(self.dropout.forward(self.per_row(self.position_encodings(beg, end, d, &device), b))),
            None => PositionSource::Keys(self.position_keys(None, beg, end, d, &device)),
        };
        let mask_g = mask.map(|m| m.reshape([b, 1, q, klen]) * 1e30);
        // Attention probabilities are returned as HF returns them, from every position.
        let heads = self.layer.first().map_or(1, |l| l.rel_attn.q.dims()[1]);
        let targets = match &input.target_mapping {
            Some(mapping) if !options.attentions => Targets::of(mapping, mask_g.as_ref(), seg_mat.as_ref(), [heads, klen, (beg - end) as usize]),
            _ => None,
        };
        let ctx = AttentionContext {
            mask_h: non_tgt_mask.map(|m| m.reshape([b, 1, q, klen]) * 1e30),
            mask_g,
            seg_mat,
            target_mapping: input.target_mapping.as_ref().map(|t| {
                let [b, m, s] = t.dims();
                t.clone().reshape([b, 1, m, s])
            }),
            targets,
            klen,
            return_probs: options.attentions,
        };

        let use_mems = input.use_mems.unwrap_or(self.settings.use_mems_eval);
        let mut new_mems = Vec::new();
        let mut new_keys_values = Vec::new();
        let mut hidden_states = Vec::new();
        let mut attentions = Vec::new();
        for (i, layer) in self.layer.iter().enumerate() {
            let attn = &layer.rel_attn;
            let (k_head_h, v_head_h) = match &projected {
                // This segment's keys and values after the memory's.
                Some(memory) => {
                    let (k, v) = attn.keys_values(output_h.clone());
                    let (prev_k, prev_v) = memory.keys_values.as_ref().map(|kv| kv[i].clone()).unzip();
                    let (k, v) = (after_memory(prev_k, k, 2), after_memory(prev_v, v, 2));
                    new_keys_values.push((self.cache_mem(k.clone(), q, 2), self.cache_mem(v.clone(), q, 2)));
                    (k, v)
                }
                // The memory's states and this segment's, projected together.
                None => {
                    let all = after_memory(input.mems.as_ref().map(|m| m[i].clone()), output_h.clone(), 1);
                    if use_mems {
                        new_mems.push(self.cache_mem(all.clone(), q, 1));
                    }
                    attn.keys_values(all)
                }
            };
            let k_head_r = match &positions {
                PositionSource::Keys(table) => self.per_row(table.rows(i, beg, end), b),
                PositionSource::Encodings(pos_emb) => RelativeAttention::heads(pos_emb.clone(), &attn.r),
            };
            if options.hidden_states {
                hidden_states.push(output_h.clone());
                hidden_states.extend(output_g.clone());
            }
            let (h, g, (probs_h, probs_g)) = attn.forward(output_h, output_g, [k_head_h, v_head_h, k_head_r], &ctx);
            output_g = g.map(|g| layer.ff(g));
            output_h = layer.ff(h);
            if let Some(probs_h) = probs_h {
                attentions.push((probs_h, probs_g));
            }
        }
        if options.hidden_states {
            hidden_states.push(output_h.clone());
            hidden_states.extend(output_g.clone());
        }
        let last = self.dropout.forward(output_g.unwrap_or(output_h));
        let memory = projected.map(|_| ProjectedMemory {
            keys_values: (!new_keys_values.is_empty()).then_some(new_keys_values),
            positions: match positions {
                PositionSource::Keys(table) => Some(table),
                PositionSource::Encodings(_) => None,
            },
        });
        (XlnetOutput { last_hidden_state: last, mems: use_mems.then_some(new_mems), hidden_states, attentions }, memory)
    }
}

/// Where a pass's position keys come from (one per pass: its size does not matter).
#[allow(clippy::large_enum_variant)]
enum PositionSource {
    /// Each batch row's encodings `[batch, positions, d]`, to go through each layer's `r`.
    Encodings(Tensor<3>),
    /// Each direction's encodings through each layer's `r`.
    Keys(PositionKeys),
}

/// Each layer's position keys `[directions, heads, top - bottom, d_head]`: the relative
/// encodings of positions `top` down to `bottom + 1` through the layer's `r`.
#[derive(Clone, Debug)]
struct PositionKeys {
    layers: Vec<Tensor<4>>,
    top: i64,
    bottom: i64,
}

impl PositionKeys {
    /// Layer `layer`'s keys of positions `beg` down to `end + 1` (within the table).
    fn rows(&self, layer: usize, beg: i64, end: i64) -> Tensor<4> {
        self.layers[layer].clone().narrow(2, (self.top - beg) as usize, (beg - end) as usize)
    }
}

/// The memory as generation keeps it between steps ([`XlnetModel::forward_projected`]): each
/// layer's memory as its keys and values, projected once when its states were computed
/// rather than again at every step, and each layer's position keys for the positions seen so
/// far.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProjectedMemory {
    /// Each layer's keys and values `[batch, heads, mem, d_head]`; `None` while empty.
    keys_values: Option<Vec<(Tensor<4>, Tensor<4>)>>,
    /// Each layer's position keys; `None` before the first step.
    positions: Option<PositionKeys>,
}

impl ProjectedMemory {
    /// Positions in the memory.
    pub(crate) fn mem_len(&self) -> usize {
        self.keys_values.as_ref().and_then(|kv| kv.first()).map_or(0, |(k, _)| k.dims()[2])
    }

    /// The memory less its last `n` positions (empty when it has no more).
    pub(crate) fn drop_last(self, n: usize) -> Self {
        let keep = self.mem_len().saturating_sub(n);
        let keys_values = self.keys_values.filter(|_| keep > 0).map(|kv| kv.into_iter().map(|(k, v)| (k.narrow(2, 0, keep), v.narrow(2, 0, keep))).collect());
        Self { keys_values, ..self }
    }

    /// The memory of batch rows `rows` `[rows]`, in that order (beam search's reordering); the
    /// position keys are the same for every row.
    pub(crate) fn select(self, rows: Tensor<1, Int>) -> Self {
        let keys_values = self.keys_values.map(|kv| kv.into_iter().map(|(k, v)| (k.select(0, rows.clone()), v.select(0, rows.clone()))).collect());
        Self { keys_values, ..self }
    }
}

/// The old memory `prev` (none: nothing), then `current`, along the positions' dimension `dim`.
fn after_memory<const D: usize>(prev: Option<Tensor<D>>, current: Tensor<D>, dim: usize) -> Tensor<D> {
    match prev {
        Some(prev) => Tensor::cat(vec![prev, current], dim),
        None => current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The query stream over its predicted positions only gives what transformers' placement
    /// over every position gives (taken when attentions are asked for), with memory, segments,
    /// a permutation mask, an empty target row, and both attention types.
    #[test]
    fn query_stream_over_its_targets_equals_the_placed_queries() {
        // An identity of the model's code, not of a backend's kernels: the CPU backend checks it.
        let device = Device::flex();
        for attn_type in [AttnType::Bi, AttnType::Uni] {
            let config = XlnetConfig { vocab_size: 50, d_model: 32, n_layer: 2, n_head: 2, d_inner: 64, attn_type, dropout: 0.0, ..XlnetConfig::default() };
            let model = XlnetModel::new(&config, &device);
            let (b, s, m, mlen) = (2, 7, 3, 4);
            let ids: Vec<i64> = (0..b * s).map(|i| (i as i64 * 13) % 50).collect();
            let mut input = XlnetInput::new(Tensor::from_data(TensorData::new(ids, [b, s]), &device));
            input.token_type_ids = Some(Tensor::from_data(TensorData::new((0..b * s).map(|i| i64::from(i % s > 3)).collect::<Vec<_>>(), [b, s]), &device));
            input.perm_mask = Some(Tensor::from_data(TensorData::new((0..b * s * s).map(|i| ((i * 7) % 3 == 0) as u8 as f32).collect::<Vec<_>>(), [b, s, s]), &device));
            // Row 0 predicts positions 5, 1 and 6; row 1 predicts 2 and 0, its last row empty.
            let mut mapping = vec![0f32; b * m * s];
            for (r, k, p) in [(0, 0, 5), (0, 1, 1), (0, 2, 6), (1, 0, 2), (1, 1, 0)] {
                mapping[(r * m + k) * s + p] = 1.0;
            }
            input.target_mapping = Some(Tensor::from_data(TensorData::new(mapping, [b, m, s]), &device));
            input.mems = Some((0..2).map(|l| Tensor::random([b, mlen, 32], burn::tensor::Distribution::Normal(0.0, 1.0 + l as f64), &device)).collect());
            let fast = model.forward(input.clone(), OutputOptions::default()).last_hidden_state;
            let placed = model.forward(input, OutputOptions { attentions: true, ..OutputOptions::default() }).last_hidden_state;
            fast.into_data().assert_approx_eq::<f32>(&placed.into_data(), burn::tensor::Tolerance::absolute(1e-5));
        }
    }

    /// Segments after a projected memory give what they give after the memory's states, and
    /// keep the same memory: segments of changing lengths (the position table grows at both
    /// ends), memory cut between them as generation cuts it, the query stream, under each
    /// attention type, `bi_data`, `clamp_len`, `same_length`, `mem_len` and `reuse_len`.
    #[test]
    fn a_projected_memory_gives_what_the_memorys_states_give() {
        let device = Device::flex();
        type Setting = (&'static str, fn(&mut XlnetConfig));
        let settings: [Setting; 6] = [
            ("bi", |_| {}),
            ("uni, same_length", |c| (c.attn_type, c.same_length) = (AttnType::Uni, true)),
            ("bi_data", |c| c.bi_data = true),
            ("clamp_len 3", |c| c.clamp_len = 3),
            ("mem_len 4", |c| c.mem_len = Some(4)),
            ("reuse_len 2", |c| c.reuse_len = Some(2)),
        ];
        for (name, set) in settings {
            let mut config = XlnetConfig { vocab_size: 50, d_model: 32, n_layer: 2, n_head: 2, d_inner: 64, dropout: 0.0, ..XlnetConfig::default() };
            set(&mut config);
            let model = XlnetModel::new(&config, &device);
            let b = 2;
            let (mut mems, mut projected): (Option<Vec<Tensor<3>>>, ProjectedMemory) = (None, ProjectedMemory::default());
            // (segment length, positions cut from the memory before it)
            for (step, (q, cut)) in [(2, 0), (5, 2), (1, 0), (4, 1), (6, 9)].into_iter().enumerate() {
                let keep = mems.as_ref().map_or(0, |m: &Vec<Tensor<3>>| m[0].dims()[1].saturating_sub(cut));
                let mems_cut = mems.take().filter(|_| keep > 0).map(|m| m.into_iter().map(|m| m.narrow(1, 0, keep)).collect::<Vec<_>>());
                projected = projected.drop_last(cut);
                assert_eq!(mems_cut.as_ref().map_or(0, |m| m[0].dims()[1]), projected.mem_len(), "{name}, step {step}: memory lengths after the cut");
                let ids: Vec<i64> = (0..b * q).map(|i| ((i + 7 * step) as i64 * 13) % 50).collect();
                let mut input = XlnetInput::new(Tensor::from_data(TensorData::new(ids, [b, q]), &device));
                input.target_mapping = Some(Tensor::<2>::eye(q, &device).narrow(0, q - 1, 1).reshape([1, 1, q]).expand([b, 1, q]));
                let mut with_states = input.clone();
                with_states.mems = mems_cut;
                with_states.use_mems = Some(true);
                let expected = model.forward(with_states, OutputOptions::default());
                let (out, memory) = model.forward_projected(input, projected, OutputOptions::default());
                let context = format!("{name}, step {step}");
                let close = |ours: &Tensor<4>, theirs: Tensor<4>, what: &str| {
                    let gap = (ours.clone() - theirs).abs().max().into_scalar::<f32>();
                    assert!(gap <= 1e-5, "{context}: {what} differ by {gap}");
                };
                close(&out.last_hidden_state.clone().unsqueeze(), expected.last_hidden_state.unsqueeze(), "outputs");
                let states = expected.mems.unwrap();
                assert_eq!(states[0].dims()[1], memory.mem_len(), "{context}: memory lengths");
                for (layer, (state, (k, v))) in states.iter().zip(memory.keys_values.as_ref().unwrap()).enumerate() {
                    let (want_k, want_v) = model.layer[layer].rel_attn.keys_values(state.clone());
                    close(k, want_k, &format!("layer {layer}'s keys"));
                    close(v, want_v, &format!("layer {layer}'s values"));
                }
                mems = Some(states);
                projected = memory;
            }
        }
    }
}
