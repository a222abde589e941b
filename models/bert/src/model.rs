//! `BertModel`: embeddings, encoder and optional pooler.

use burn::prelude::*;
use sesame_layers::pretrained::{check_ids, check_shape};
use sesame_layers::{
    AttentionMask, CheckpointSpec, Embeddings, Encoder, EncoderOutput, InputError, OutputOptions, Pooler,
    PoolerConfig, PretrainedModel,
};

use crate::checkpoint::spec;
use crate::config::BertConfig;

/// One batch of BERT input (HF argument names).
#[derive(Clone, Debug)]
pub struct BertInput {
    /// Token ids `[batch, seq]`.
    pub input_ids: Tensor<2, Int>,
    /// 1 for tokens, 0 for padding `[batch, seq]`; all ones when absent.
    pub attention_mask: Option<Tensor<2, Int>>,
    /// Segment ids `[batch, seq]`; zeros when absent.
    pub token_type_ids: Option<Tensor<2, Int>>,
    /// Position ids `[batch, seq]`; `0..seq` when absent.
    pub position_ids: Option<Tensor<2, Int>>,
}

impl BertInput {
    /// Input from token ids alone.
    pub fn new(input_ids: Tensor<2, Int>) -> Self {
        Self { input_ids, attention_mask: None, token_type_ids: None, position_ids: None }
    }

    /// Set the attention mask.
    pub fn with_attention_mask(mut self, mask: Tensor<2, Int>) -> Self {
        self.attention_mask = Some(mask);
        self
    }

    /// Set the token type ids.
    pub fn with_token_type_ids(mut self, types: Tensor<2, Int>) -> Self {
        self.token_type_ids = Some(types);
        self
    }

    /// Check shapes and id ranges against `config` (reads the ids back from the device).
    pub fn validate(&self, config: &BertConfig) -> Result<(), InputError> {
        let max = config.max_position_embeddings;
        check_shape(&self.input_ids, self.attention_mask.as_ref(), "attention_mask", max)?;
        check_shape(&self.input_ids, self.token_type_ids.as_ref(), "token_type_ids", max)?;
        check_shape(&self.input_ids, self.position_ids.as_ref(), "position_ids", max)?;
        check_ids(&self.input_ids, config.vocab_size, "token")?;
        if let Some(types) = &self.token_type_ids {
            check_ids(types, config.type_vocab_size, "token type")?;
        }
        if let Some(positions) = &self.position_ids {
            check_ids(positions, max, "position")?;
        }
        Ok(())
    }

    fn mask(&self) -> AttentionMask {
        match &self.attention_mask {
            Some(mask) => AttentionMask::padding(mask.clone(), self.input_ids.dims()[1]),
            None => AttentionMask::none(),
        }
    }
}

/// What [`BertModel`] returns.
#[derive(Clone, Debug)]
pub struct BertOutput {
    /// Encoder output and, when asked, every hidden state and attention map.
    pub encoder: EncoderOutput,
    /// `tanh(dense(h[:, 0]))` `[batch, hidden]`, when the model has a pooler.
    pub pooler_output: Option<Tensor<2>>,
}

impl BertOutput {
    /// The last layer's states `[batch, seq, hidden]`.
    pub fn last_hidden_state(&self) -> Tensor<3> {
        self.encoder.last_hidden_state.clone()
    }
}

/// The BERT encoder (HF `BertModel`).
#[derive(Module, Debug)]
pub struct BertModel {
    /// Word + position + token-type embeddings.
    pub embeddings: Embeddings,
    /// The transformer layers.
    pub encoder: Encoder,
    /// The pooler, absent in models that do not use it (HF `add_pooling_layer=False`).
    pub pooler: Option<Pooler>,
}

impl BertModel {
    /// Build a freshly initialised model; `add_pooling_layer` as in HF.
    pub fn new(config: &BertConfig, add_pooling_layer: bool, device: &Device) -> Self {
        Self {
            embeddings: config.embeddings().init(device),
            encoder: config.encoder().init(device),
            pooler: add_pooling_layer.then(|| PoolerConfig::new(config.hidden_size).init(device)),
        }
    }

    /// Run the encoder over `input`.
    pub fn forward(&self, input: BertInput, options: OutputOptions) -> BertOutput {
        let mask = input.mask();
        let x = self.embeddings.forward(input.input_ids, input.token_type_ids, input.position_ids);
        let encoder = self.encoder.forward(x, &mask, options);
        let pooler_output = self.pooler.as_ref().map(|p| p.forward(encoder.last_hidden_state.clone()));
        BertOutput { encoder, pooler_output }
    }

    /// The word-embedding table `[vocab, hidden]` (the tied MLM decoder).
    pub fn word_embeddings(&self) -> Tensor<2> {
        self.embeddings.word_embeddings.weight.val()
    }
}

impl PretrainedModel for BertModel {
    type Config = BertConfig;
    const ARCHITECTURE: &'static str = "BertModel";

    fn init(config: &BertConfig, device: &Device) -> Self {
        Self::new(config, true, device)
    }

    fn checkpoint_spec(config: &BertConfig) -> CheckpointSpec {
        spec(false, &["pooler."], config.tie_word_embeddings)
    }
}
