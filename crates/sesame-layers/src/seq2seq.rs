//! What every encoder-decoder family takes and returns (HF argument and field names): one
//! input type, one output type, and `shift_tokens_right`.

use burn::prelude::*;

use crate::decoder::DecoderCache;
use crate::encoder::{push_all, EncoderOutput, NamedOutput};
use crate::pretrained::{check_ids, check_shape, InputError};

/// One batch of encoder-decoder input (HF `BartModel.forward`'s arguments).
#[derive(Clone, Debug, Default)]
pub struct Seq2SeqInput {
    /// Source token ids `[batch, src]`; not needed when `encoder_outputs` are given.
    pub input_ids: Option<Tensor<2, Int>>,
    /// Source padding mask `[batch, src]` (1 = token, 0 = padding); all ones when absent.
    pub attention_mask: Option<Tensor<2, Int>>,
    /// Target token ids `[batch, tgt]`; `shift_tokens_right(input_ids)` when absent (or of the
    /// labels, in heads that take labels). With a cache: only the new positions.
    pub decoder_input_ids: Option<Tensor<2, Int>>,
    /// Target padding mask `[batch, past + tgt]`; causal only when absent.
    pub decoder_attention_mask: Option<Tensor<2, Int>>,
    /// The encoder's output, computed before (generation encodes once).
    pub encoder_outputs: Option<EncoderOutput>,
    /// Keys and values of the decoded positions and of the encoder output (HF
    /// `past_key_values`): the decoder then runs only `decoder_input_ids`.
    pub cache: Option<DecoderCache>,
}

impl Seq2SeqInput {
    /// Input from source ids alone (the decoder reads them shifted right, as BART's denoising).
    pub fn new(input_ids: Tensor<2, Int>) -> Self {
        Self { input_ids: Some(input_ids), ..Self::default() }
    }

    /// Set the source padding mask.
    pub fn with_attention_mask(mut self, mask: Tensor<2, Int>) -> Self {
        self.attention_mask = Some(mask);
        self
    }

    /// Set the decoder's input ids.
    pub fn with_decoder_input_ids(mut self, ids: Tensor<2, Int>) -> Self {
        self.decoder_input_ids = Some(ids);
        self
    }

    /// Set the decoder's padding mask.
    pub fn with_decoder_attention_mask(mut self, mask: Tensor<2, Int>) -> Self {
        self.decoder_attention_mask = Some(mask);
        self
    }

    /// Check shapes and id ranges: ids in `0..vocab_size`, sequences of at most `max_len`
    /// positions (the decoder's counted after its cache).
    pub fn validate(&self, vocab_size: usize, max_len: usize) -> Result<(), InputError> {
        if let Some(ids) = &self.input_ids {
            check_shape(ids, self.attention_mask.as_ref(), "attention_mask", max_len)?;
            check_ids(ids, vocab_size, "token")?;
        } else if self.encoder_outputs.is_none() && self.cache.is_none() {
            return Err(InputError::Missing { what: "input_ids", reason: "neither encoder_outputs nor a cache was given" });
        }
        if let Some(ids) = &self.decoder_input_ids {
            let past = self.cache.as_ref().map_or(0, DecoderCache::len);
            check_shape(ids, None, "decoder_input_ids", max_len.saturating_sub(past))?;
            let [b, s] = ids.dims();
            if let Some(mask) = &self.decoder_attention_mask {
                if mask.dims() != [b, past + s] {
                    return Err(InputError::ShapeMismatch { what: "decoder_attention_mask", expected: vec![b, past + s], found: mask.dims().to_vec() });
                }
            }
            check_ids(ids, vocab_size, "decoder token")?;
        } else if self.cache.is_some() {
            return Err(InputError::Missing { what: "decoder_input_ids", reason: "a cache continues after its positions: give the new ones" });
        } else if let (Some(ids), Some(mask)) = (&self.input_ids, &self.decoder_attention_mask) {
            // The decoder reads `shift_tokens_right(input_ids)`: as long as the input.
            if mask.dims() != ids.dims() {
                return Err(InputError::ShapeMismatch { what: "decoder_attention_mask", expected: ids.dims().to_vec(), found: mask.dims().to_vec() });
            }
        } else if self.decoder_attention_mask.is_some() {
            return Err(InputError::Missing { what: "decoder_input_ids", reason: "a decoder_attention_mask needs the decoder's ids" });
        }
        Ok(())
    }
}

/// What an encoder-decoder base model returns (HF `Seq2SeqModelOutput`).
#[derive(Clone, Debug)]
pub struct Seq2SeqOutput {
    /// The decoder's last layer `[batch, tgt, d]`.
    pub last_hidden_state: Tensor<3>,
    /// The decoder's embeddings and every layer's output, when asked.
    pub decoder_hidden_states: Option<Vec<Tensor<3>>>,
    /// Every decoder layer's self-attention `[batch, heads, tgt, past + tgt]`, when asked.
    pub decoder_attentions: Option<Vec<Tensor<4>>>,
    /// Every decoder layer's attention to the encoder `[batch, heads, tgt, src]`, when asked.
    pub cross_attentions: Option<Vec<Tensor<4>>>,
    /// The encoder's last layer `[batch, src, d]`.
    pub encoder_last_hidden_state: Tensor<3>,
    /// The encoder's embeddings and every layer's output, when asked.
    pub encoder_hidden_states: Option<Vec<Tensor<3>>>,
    /// Every encoder layer's attention `[batch, heads, src, src]`, when asked.
    pub encoder_attentions: Option<Vec<Tensor<4>>>,
    /// The keys and values to continue decoding from (HF `past_key_values`).
    pub past_key_values: DecoderCache,
}


impl Seq2SeqOutput {
    /// Every output present, under HF's names, tuples numbered from 0 (`cross_attentions.1`).
    pub fn named(&self) -> Vec<NamedOutput> {
        let mut out = vec![
            ("last_hidden_state".to_string(), self.last_hidden_state.to_data()),
            ("encoder_last_hidden_state".to_string(), self.encoder_last_hidden_state.to_data()),
        ];
        push_all(&mut out, "decoder_hidden_states", &self.decoder_hidden_states);
        push_all(&mut out, "decoder_attentions", &self.decoder_attentions);
        push_all(&mut out, "cross_attentions", &self.cross_attentions);
        push_all(&mut out, "encoder_hidden_states", &self.encoder_hidden_states);
        push_all(&mut out, "encoder_attentions", &self.encoder_attentions);
        out
    }
}

/// HF `shift_tokens_right`: `[start, ids[..-1]]` per row `[batch, seq]`, with label padding
/// (-100) replaced by `pad_token_id`.
pub fn shift_tokens_right(ids: Tensor<2, Int>, pad_token_id: usize, decoder_start_token_id: usize) -> Tensor<2, Int> {
    let [b, s] = ids.dims();
    let start = Tensor::<2, Int>::full([b, 1], decoder_start_token_id as i64, &ids.device());
    let shifted = Tensor::cat(vec![start, ids.slice([0..b, 0..s.saturating_sub(1)])], 1);
    let ignored = shifted.clone().equal_elem(-100);
    shifted.mask_fill(ignored, pad_token_id as i64)
}

/// A head on an encoder-decoder: its logits, the loss when labels were given, and the base
/// model's outputs (HF `Seq2SeqLMOutput`, `Seq2SeqSequenceClassifierOutput`).
#[derive(Clone, Debug)]
pub struct Seq2SeqHeadOutput<const D: usize> {
    /// Head logits.
    pub logits: Tensor<D>,
    /// HF loss, when labels were given.
    pub loss: Option<Tensor<1>>,
    /// The base model's outputs (HF's heads return them beside the logits).
    pub model: Seq2SeqOutput,
}

impl<const D: usize> Seq2SeqHeadOutput<D> {
    /// Every output present, under HF's names (`logits`, `loss`, `encoder_last_hidden_state`,
    /// `cross_attentions.0`, …; a head has no `last_hidden_state`).
    pub fn named(&self) -> Vec<NamedOutput> {
        let mut out = vec![("logits".to_string(), self.logits.to_data())];
        out.extend(self.loss.iter().map(|l| ("loss".to_string(), l.to_data())));
        out.extend(self.model.named().into_iter().filter(|(name, _)| name != "last_hidden_state"));
        out
    }
}

/// Extractive QA on an encoder-decoder (HF `Seq2SeqQuestionAnsweringModelOutput`).
#[derive(Clone, Debug)]
pub struct Seq2SeqQuestionAnsweringOutput {
    /// Start logits `[batch, tgt]`.
    pub start_logits: Tensor<2>,
    /// End logits `[batch, tgt]`.
    pub end_logits: Tensor<2>,
    /// HF loss, when positions were given.
    pub loss: Option<Tensor<1>>,
    /// The base model's outputs.
    pub model: Seq2SeqOutput,
}

impl Seq2SeqQuestionAnsweringOutput {
    /// Every output present, under HF's names.
    pub fn named(&self) -> Vec<NamedOutput> {
        let mut out = vec![("start_logits".to_string(), self.start_logits.to_data()), ("end_logits".to_string(), self.end_logits.to_data())];
        out.extend(self.loss.iter().map(|l| ("loss".to_string(), l.to_data())));
        out.extend(self.model.named().into_iter().filter(|(name, _)| name != "last_hidden_state"));
        out
    }
}
