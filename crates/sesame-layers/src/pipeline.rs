//! Ready-made tasks on text for every family: fill-mask and sentence embeddings.

use burn::prelude::*;
use burn::tensor::activation::softmax;
use sesame_text::{EncodedBatch, Tokenizer, TokenizerError};

use crate::backbone::{Backbone, EncoderInput};
use crate::encoder::OutputOptions;
use crate::pooling::{l2_normalize, select_layer, Pooling};
use crate::pretrained::InputError;
use crate::tasks::ForMaskedLM;

/// Why a pipeline could not run.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Tokenization failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The encoded input does not fit the model.
    #[error(transparent)]
    Input(#[from] InputError),
    /// fill-mask was given text without the mask token.
    #[error("the text contains no `{mask}` token")]
    NoMask {
        /// The mask token.
        mask: String,
    },
    /// The requested layer does not exist.
    #[error("layer {layer} does not exist (the model has {layers} layers; use 0..={layers} or -1..=-{count})", count = layers + 1)]
    NoSuchLayer {
        /// Requested index.
        layer: i64,
        /// Number of layers.
        layers: usize,
    },
}

/// One fill-mask candidate.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Prediction {
    /// The token.
    pub token: String,
    /// Its id.
    pub id: u32,
    /// Softmax probability.
    pub score: f32,
}

fn to_input<B: Backbone>(batch: &EncodedBatch, config: &B::Config, device: &Device) -> Result<EncoderInput, InputError> {
    let (ids, mask, types) = batch.tensors(device);
    let input = EncoderInput::new(ids).with_attention_mask(mask).with_token_type_ids(types);
    input.validate(&B::input_limits(config))?;
    Ok(input)
}

/// The `top_k` most likely tokens for each mask token in `text`, in order of appearance.
pub fn fill_mask<B: Backbone>(
    model: &ForMaskedLM<B>,
    config: &B::Config,
    tokenizer: &Tokenizer,
    text: &str,
    top_k: usize,
) -> Result<Vec<Vec<Prediction>>, PipelineError> {
    let mask_id = tokenizer.mask_token_id()? as i64;
    let batch = tokenizer.encode(&[text], B::input_limits(config).max_len, false)?;
    let positions: Vec<usize> = batch.ids(0).iter().enumerate().filter(|(_, &id)| id == mask_id).map(|(i, _)| i).collect();
    if positions.is_empty() {
        let mask = tokenizer.special_tokens().mask.as_ref().map(|m| m.0.clone()).unwrap_or_default();
        return Err(PipelineError::NoMask { mask });
    }
    let device = model.base.device();
    let logits = model.forward(to_input::<B>(&batch, config, &device)?, None, OutputOptions::default()).logits;
    let [_, _, vocab] = logits.dims();
    let k = top_k.clamp(1, vocab);
    let mut all = Vec::new();
    for pos in positions {
        let probs = softmax(logits.clone().slice([0..1, pos..pos + 1, 0..vocab]).reshape([vocab]), 0);
        let (scores, ids) = probs.topk_with_indices(k, 0);
        let scores: Vec<f32> = scores.into_data().convert::<f32>().try_to_vec().unwrap_or_default();
        let ids: Vec<i64> = ids.into_data().convert::<i64>().try_to_vec().unwrap_or_default();
        all.push(
            ids.iter()
                .zip(scores)
                .map(|(&id, score)| Prediction {
                    token: tokenizer.id_to_token(id as u32).unwrap_or_default(),
                    id: id as u32,
                    score,
                })
                .collect(),
        );
    }
    Ok(all)
}

/// How [`embed`] turns token states into one vector per text.
#[derive(Clone, Copy, Debug)]
pub struct EmbedOptions {
    /// Pooling strategy.
    pub pooling: Pooling,
    /// Which hidden state to pool (HF index: 0 = embeddings, -1 = last, -2 = penultimate).
    pub layer: i64,
    /// L2-normalise the vectors.
    pub normalize: bool,
}

impl Default for EmbedOptions {
    /// Mean pooling of the last layer, not normalised (sentence-transformers' BERT default).
    fn default() -> Self {
        Self { pooling: Pooling::Mean, layer: -1, normalize: false }
    }
}

/// One embedding `[hidden]` per text. Texts longer than the model are truncated, as
/// sentence-transformers does.
pub fn embed<B: Backbone>(
    model: &B,
    config: &B::Config,
    tokenizer: &Tokenizer,
    texts: &[&str],
    options: EmbedOptions,
) -> Result<Vec<Vec<f32>>, PipelineError> {
    let batch = tokenizer.encode(texts, B::input_limits(config).max_len, true)?;
    let device = model.device();
    let input = to_input::<B>(&batch, config, &device)?;
    let mask = input.attention_mask.clone().expect("encoded batches carry a mask");
    let outputs = OutputOptions { hidden_states: options.layer != -1, attentions: false };
    let out = model.forward(input, outputs);
    let states = select_layer(&out.encoder, options.layer)
        .ok_or(PipelineError::NoSuchLayer { layer: options.layer, layers: out.encoder.hidden_states.as_ref().map_or(0, |h| h.len() - 1) })?;
    let mut pooled = options.pooling.pool(states, mask);
    if options.normalize {
        pooled = l2_normalize(pooled);
    }
    let [b, d] = pooled.dims();
    let flat: Vec<f32> = pooled.into_data().convert::<f32>().try_to_vec().unwrap_or_default();
    Ok((0..b).map(|i| flat[i * d..(i + 1) * d].to_vec()).collect())
}
