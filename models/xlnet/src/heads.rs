//! XLNet's head models: the language-model head (HF `XLNetLMHeadModel`), and `XLNetModel`
//! itself as a `PretrainedModel`.

use burn::module::Param;
use burn::nn::Initializer;
use burn::prelude::*;
use sesame_layers::loss::per_token_cross_entropy;
use sesame_layers::{tied_logits, CheckpointSpec, OutputOptions, PretrainedModel};

use crate::checkpoint::spec;
use crate::config::XlnetConfig;
use crate::model::{XlnetInput, XlnetModel};
use crate::tasks::XlnetHeadOutput;

impl PretrainedModel for XlnetModel {
    type Config = XlnetConfig;

    fn architecture() -> String {
        "XLNetModel".into()
    }

    fn init(config: &XlnetConfig, device: &Device) -> Self {
        XlnetModel::new(config, device)
    }

    fn checkpoint_spec(_config: &XlnetConfig) -> CheckpointSpec {
        // A head model's file holds its heads beside `transformer.*`: not this model's.
        spec(false, &[], &[r"^lm_loss\.", r"^sequence_summary\.", r"^logits_proj\.", r"^classifier\.", r"^qa_outputs\.", r"^start_logits\.", r"^end_logits\.", r"^answer_class\."])
    }
}

/// The LM head's output layer (HF `lm_loss`): the word-embedding table, or its own weight when
/// untied, plus a bias of its own.
#[derive(Module, Debug)]
pub struct LmLoss {
    /// Own weight `[vocab, d]` (HF layout), only when `tie_word_embeddings` is false.
    pub weight: Option<Param<Tensor<2>>>,
    /// Bias `[vocab]`.
    pub bias: Param<Tensor<1>>,
}

/// What [`XlnetLmHeadModel`] returns: vocabulary logits `[batch, num_predict or seq, vocab]`,
/// the mean cross-entropy of `labels` (-100 ignored) when given, and the base model's memory,
/// hidden states and attentions.
pub type XlnetLmHeadOutput = XlnetHeadOutput<3>;

/// XLNet with its language-model head (HF `XLNetLMHeadModel`): logits at every position, or at
/// the predicted positions of `target_mapping` (the query stream).
#[derive(Module, Debug)]
pub struct XlnetLmHeadModel {
    /// The base model.
    pub transformer: XlnetModel,
    /// The output layer.
    pub lm_loss: LmLoss,
}

impl XlnetLmHeadModel {
    /// Logits `[batch, positions, vocab]`; with `labels` `[batch, positions]` (-100 ignored) the
    /// mean cross-entropy, as HF.
    pub fn forward(&self, input: XlnetInput, labels: Option<Tensor<2, Int>>, options: OutputOptions) -> XlnetLmHeadOutput {
        let out = self.transformer.forward(input, options);
        let logits = self.vocabulary_logits(out.last_hidden_state.clone());
        let loss = labels.map(|l| per_token_cross_entropy(logits.clone(), l));
        XlnetLmHeadOutput { logits, loss, transformer: out }
    }
}

impl XlnetLmHeadModel {
    /// Vocabulary logits `[batch, positions, vocab]` of final states `[batch, positions, d]`.
    pub(crate) fn vocabulary_logits(&self, hidden: Tensor<3>) -> Tensor<3> {
        let weight = match &self.lm_loss.weight {
            Some(w) => w.val(),
            None => self.transformer.word_embeddings(),
        };
        tied_logits(hidden, weight, self.lm_loss.bias.val())
    }
}

impl PretrainedModel for XlnetLmHeadModel {
    type Config = XlnetConfig;

    fn architecture() -> String {
        "XLNetLMHeadModel".into()
    }

    fn init(config: &XlnetConfig, device: &Device) -> Self {
        let init = Initializer::Normal { mean: 0.0, std: config.initializer_range };
        Self {
            transformer: XlnetModel::new(config, device),
            lm_loss: LmLoss {
                weight: (!config.tie_word_embeddings).then(|| init.init([config.vocab_size, config.d_model], device)),
                bias: Initializer::Zeros.init([config.vocab_size], device),
            },
        }
    }

    fn checkpoint_spec(config: &XlnetConfig) -> CheckpointSpec {
        let ignored: &[&str] = if config.tie_word_embeddings { &[r"^lm_loss\.weight$"] } else { &[] };
        spec(true, &[], ignored)
    }
}
