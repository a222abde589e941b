//! Token embeddings: word + absolute position + token type, then LayerNorm and dropout.

use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig};
use burn::prelude::*;

use crate::dropout::{Dropout, DropoutConfig};

/// Configuration of [`Embeddings`].
#[derive(Config, Debug)]
pub struct EmbeddingsConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Embedding width (ALBERT's `embedding_size`; the hidden size elsewhere).
    pub d_model: usize,
    /// Number of learned absolute positions.
    pub max_position_embeddings: usize,
    /// Number of token types (segments); 0 for none.
    #[config(default = 2)]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[config(default = 1e-12)]
    pub layer_norm_eps: f64,
    /// Dropout after the LayerNorm (HF `hidden_dropout_prob`).
    #[config(default = 0.1)]
    pub dropout: f64,
}

impl EmbeddingsConfig {
    /// Build the module on `device`.
    pub fn init(&self, device: &Device) -> Embeddings {
        Embeddings {
            word_embeddings: EmbeddingConfig::new(self.vocab_size, self.d_model).init(device),
            position_embeddings: EmbeddingConfig::new(self.max_position_embeddings, self.d_model)
                .init(device),
            token_type_embeddings: (self.type_vocab_size > 0)
                .then(|| EmbeddingConfig::new(self.type_vocab_size, self.d_model).init(device)),
            layer_norm: LayerNormConfig::new(self.d_model).with_epsilon(self.layer_norm_eps).init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
        }
    }
}

/// BERT-style embeddings (HF `embeddings.*`).
#[derive(Module, Debug)]
pub struct Embeddings {
    /// `[vocab, d]` token table; MLM heads tie their decoder to it.
    pub word_embeddings: Embedding,
    /// `[max_positions, d]` learned absolute positions.
    pub position_embeddings: Embedding,
    /// `[type_vocab, d]` segment table, absent when `type_vocab_size` is 0.
    pub token_type_embeddings: Option<Embedding>,
    /// LayerNorm over the sum.
    pub layer_norm: LayerNorm,
    /// Dropout after the LayerNorm.
    pub dropout: Dropout,
}

impl Embeddings {
    /// Embed `input_ids` `[batch, seq]` at `position_ids` `[batch, seq]` (the model's rule:
    /// `EncoderInput::positions`, or RoBERTa's). `token_type_ids` default to 0. Returns
    /// `[batch, seq, d]`.
    pub fn forward(
        &self,
        input_ids: Tensor<2, Int>,
        token_type_ids: Option<Tensor<2, Int>>,
        position_ids: Tensor<2, Int>,
    ) -> Tensor<3> {
        let [b, s] = input_ids.dims();
        let device = input_ids.device();
        let mut x = self.word_embeddings.forward(input_ids) + self.position_embeddings.forward(position_ids);
        if let Some(types) = &self.token_type_embeddings {
            let ids = token_type_ids.unwrap_or_else(|| Tensor::zeros([b, s], &device));
            x = x + types.forward(ids);
        }
        self.dropout.forward(self.layer_norm.forward(x))
    }
}
