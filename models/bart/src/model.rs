//! The BART encoder-decoder (HF `BartModel`): one token table shared by both stacks, learned
//! positions offset by 2, a LayerNorm on the embeddings, post-LN encoder layers, and decoder
//! layers with cross-attention.

use burn::module::Param;
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig};
use burn::prelude::*;
use sesame_layers::encoder::run_layers;
use sesame_layers::{
    run_decoder_layers, shift_tokens_right, ConfigError, DecoderCache, DecoderLayer, DecoderLayerConfig, DecoderOutput, Dropout,
    DropoutConfig, EncoderConfig, EncoderLayer, EncoderOutput, InputError, OutputOptions, Seq2SeqInput, Seq2SeqOutput,
};

use crate::config::{BartConfig, LAYER_NORM_EPS, POSITION_OFFSET};

/// Token embeddings scaled by `embed_scale`, plus learned positions `past..past + seq` (rows
/// offset by 2), then LayerNorm and dropout: the start of both BART stacks.
#[derive(Module, Debug)]
pub struct BartEmbeddings {
    /// `[max_position_embeddings + 2, d]` (HF `embed_positions`).
    pub embed_positions: Embedding,
    /// HF `layernorm_embedding`.
    pub layernorm_embedding: LayerNorm,
    /// Dropout after the LayerNorm.
    pub dropout: Dropout,
    /// `sqrt(d_model)` with `scale_embedding`, else 1.
    #[module(skip)]
    pub embed_scale: f64,
}

impl BartEmbeddings {
    fn new(config: &BartConfig, device: &Device) -> Self {
        Self {
            embed_positions: EmbeddingConfig::new(config.max_position_embeddings + POSITION_OFFSET, config.d_model).init(device),
            layernorm_embedding: LayerNormConfig::new(config.d_model).with_epsilon(LAYER_NORM_EPS).init(device),
            dropout: DropoutConfig::new(config.dropout).init(),
            embed_scale: config.embed_scale(),
        }
    }

    /// Embed `ids` `[batch, seq]` at positions `past..past + seq` with the token table `shared`.
    pub fn forward(&self, shared: &Embedding, ids: Tensor<2, Int>, past: usize) -> Tensor<3> {
        let [b, s] = ids.dims();
        let start = (past + POSITION_OFFSET) as i64;
        let positions = Tensor::<1, Int>::arange(start..start + s as i64, &ids.device()).reshape([1, s]).expand([b, s]);
        let mut tokens = shared.forward(ids);
        if self.embed_scale != 1.0 {
            tokens = tokens * self.embed_scale;
        }
        self.dropout.forward(self.layernorm_embedding.forward(tokens + self.embed_positions.forward(positions)))
    }
}

/// The encoder stack (HF `BartEncoder`).
#[derive(Module, Debug)]
pub struct BartEncoder {
    /// Its own token table when `tie_word_embeddings` is false (transformers 5 then unties
    /// every table); `None`: the model's `shared` table.
    pub embed_tokens: Option<Embedding>,
    /// Positions, LayerNorm, dropout.
    pub embeddings: BartEmbeddings,
    /// Post-LN self-attention layers.
    pub layers: Vec<EncoderLayer>,
}

impl BartEncoder {
    /// Encode `input_ids` `[batch, src]` under the padding mask `attention_mask`.
    pub fn forward(&self, shared: &Embedding, input_ids: Tensor<2, Int>, attention_mask: Option<Tensor<2, Int>>, options: OutputOptions) -> EncoderOutput {
        let s = input_ids.dims()[1];
        let x = self.embeddings.forward(self.embed_tokens.as_ref().unwrap_or(shared), input_ids, 0);
        let mask = match attention_mask {
            Some(m) => sesame_layers::AttentionMask::padding(m, s),
            None => sesame_layers::AttentionMask::none(),
        };
        run_layers(self.layers.iter().map(EncoderLayer::parts), x, &mask, None, options)
    }
}

/// The decoder stack (HF `BartDecoder`).
#[derive(Module, Debug)]
pub struct BartDecoder {
    /// Its own token table when `tie_word_embeddings` is false; `None`: `shared`.
    pub embed_tokens: Option<Embedding>,
    /// Positions, LayerNorm, dropout.
    pub embeddings: BartEmbeddings,
    /// Post-LN layers: causal self-attention, cross-attention, feed-forward.
    pub layers: Vec<DecoderLayer>,
}

impl BartDecoder {
    /// Decode `ids` `[rows, tgt]` after the positions in `cache` (which holds the encoder's
    /// keys and values), under the padding mask `attention_mask` `[rows, past + tgt]`.
    pub fn forward(&self, shared: &Embedding, ids: Tensor<2, Int>, attention_mask: Option<Tensor<2, Int>>, cache: DecoderCache, options: OutputOptions) -> DecoderOutput {
        let x = self.embeddings.forward(self.embed_tokens.as_ref().unwrap_or(shared), ids, cache.len());
        run_decoder_layers(&self.layers, x, attention_mask, cache, options)
    }

    /// The cache to start decoding from `encoder` output `[prompts, src, d]` and its padding mask.
    pub fn start(&self, encoder_hidden_states: Tensor<3>, attention_mask: Option<Tensor<2, Int>>) -> DecoderCache {
        DecoderCache::new(&self.layers, encoder_hidden_states, attention_mask)
    }
}

/// BART's base model (HF `BartModel`).
#[derive(Module, Debug)]
pub struct BartModel {
    /// The token table of the encoder, the decoder and the tied LM head (HF `shared`).
    pub shared: Embedding,
    /// The encoder.
    pub encoder: BartEncoder,
    /// The decoder.
    pub decoder: BartDecoder,
    /// Padding id (`shift_tokens_right`).
    #[module(skip)]
    pub pad_token_id: usize,
    /// First decoder token (`shift_tokens_right`).
    #[module(skip)]
    pub decoder_start_token_id: usize,
}

impl BartModel {
    /// A freshly initialised model of `config` on `device`.
    pub fn new(config: &BartConfig, device: &Device) -> Self {
        let encoder = EncoderConfig::new(config.d_model, config.encoder_ffn_dim, config.encoder_attention_heads, config.encoder_layers, config.activation_function)
            .with_dropout(config.dropout)
            .with_attention_dropout(config.attention_dropout)
            .with_activation_dropout(config.activation_dropout)
            .with_layer_norm_eps(LAYER_NORM_EPS);
        let decoder = DecoderLayerConfig::new(config.d_model, config.decoder_ffn_dim, config.decoder_attention_heads, config.activation_function)
            .with_dropout(config.dropout)
            .with_attention_dropout(config.attention_dropout)
            .with_activation_dropout(config.activation_dropout)
            .with_layer_norm_eps(LAYER_NORM_EPS);
        let own_table = || (!config.tie_word_embeddings).then(|| EmbeddingConfig::new(config.vocab_size, config.d_model).init(device));
        Self {
            shared: EmbeddingConfig::new(config.vocab_size, config.d_model).init(device),
            encoder: BartEncoder {
                embed_tokens: own_table(),
                embeddings: BartEmbeddings::new(config, device),
                layers: (0..config.encoder_layers).map(|_| encoder.init_layer(device)).collect(),
            },
            decoder: BartDecoder {
                embed_tokens: own_table(),
                embeddings: BartEmbeddings::new(config, device),
                layers: (0..config.decoder_layers).map(|_| decoder.init(device)).collect(),
            },
            pad_token_id: config.pad_id(),
            decoder_start_token_id: config.decoder_start_id(),
        }
    }

    /// Run encoder and decoder. The encoder runs unless `input.encoder_outputs` are given; the
    /// decoder reads `decoder_input_ids`, else `shift_tokens_right(input_ids)`, after the
    /// positions of `input.cache` when given. Panics without `input_ids` or `encoder_outputs`
    /// ([`Seq2SeqInput::validate`] refuses that input).
    pub fn forward(&self, input: Seq2SeqInput, options: OutputOptions) -> Seq2SeqOutput {
        let encoder = match input.encoder_outputs {
            Some(out) => out,
            None => {
                let ids = input.input_ids.clone().expect("input_ids or encoder_outputs (Seq2SeqInput::validate)");
                self.encoder.forward(&self.shared, ids, input.attention_mask.clone(), options)
            }
        };
        let decoder_input_ids = input.decoder_input_ids.unwrap_or_else(|| {
            let ids = input.input_ids.clone().expect("input_ids or decoder_input_ids (Seq2SeqInput::validate)");
            shift_tokens_right(ids, self.pad_token_id, self.decoder_start_token_id)
        });
        let cache = input.cache.unwrap_or_else(|| self.decoder.start(encoder.last_hidden_state.clone(), input.attention_mask.clone()));
        let decoder = self.decoder.forward(&self.shared, decoder_input_ids, input.decoder_attention_mask, cache, options);
        Seq2SeqOutput {
            last_hidden_state: decoder.last_hidden_state,
            decoder_hidden_states: decoder.hidden_states,
            decoder_attentions: decoder.attentions,
            cross_attentions: decoder.cross_attentions,
            encoder_last_hidden_state: encoder.last_hidden_state,
            encoder_hidden_states: encoder.hidden_states,
            encoder_attentions: encoder.attentions,
            past_key_values: decoder.cache,
        }
    }

    /// The model with only the layers `layers` (0-based, increasing) of its encoder and the
    /// same layers of its decoder, `config` saying so: a student initialised from its
    /// teacher's layers (DistilBART copied alternating layers). The two stacks must be of one
    /// depth.
    pub fn keep_layers(self, config: &mut BartConfig, layers: &[usize]) -> Result<Self, ConfigError> {
        if config.encoder_layers != config.decoder_layers {
            let reason = format!("the encoder has {} layers and the decoder {}; the same layers are kept of both, so they must have one depth", config.encoder_layers, config.decoder_layers);
            return Err(ConfigError::Invalid { field: "decoder_layers".into(), reason });
        }
        let encoder = BartEncoder { layers: sesame_layers::pick_layers(&self.encoder.layers, layers, "encoder_layers")?, ..self.encoder };
        let decoder = BartDecoder { layers: sesame_layers::pick_layers(&self.decoder.layers, layers, "decoder_layers")?, ..self.decoder };
        (config.encoder_layers, config.decoder_layers) = (layers.len(), layers.len());
        Ok(Self { encoder, decoder, ..self })
    }

    /// The shared token table `[vocab, d]` (the tied LM head).
    pub fn word_embeddings(&self) -> Tensor<2> {
        self.shared.weight.val()
    }

    /// Check `input` against `config`'s vocabulary and positions.
    pub fn validate(input: &Seq2SeqInput, config: &BartConfig) -> Result<(), InputError> {
        input.validate(config.vocab_size, config.max_position_embeddings)
    }
}

/// A zero vector as an initialised parameter (`final_logits_bias`, when a file lacks it).
pub(crate) fn zeros_param(shape: [usize; 2], device: &Device) -> Param<Tensor<2>> {
    Param::from_tensor(Tensor::zeros(shape, device)).set_require_grad(false)
}
