//! Heads shared by the encoder families: masked-LM prediction (tied to the word embeddings),
//! pooler, and the fine-tuning heads (sequence / token classification, extractive QA,
//! multiple choice), each with its HF loss.

use burn::module::Param;
use burn::nn::{LayerNorm, LayerNormConfig};

use crate::linear::{on_rows, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::tanh;
use burn::tensor::module::linear;


use crate::dropout::{Dropout, DropoutConfig};
use crate::activation::Activation;
use crate::loss::{binary_cross_entropy_with_logits, cross_entropy, cross_entropy_ignoring, mse};

/// Configuration of [`MaskedLmHead`].
#[derive(Config, Debug)]
pub struct MaskedLmHeadConfig {
    /// Encoder width.
    pub d_model: usize,
    /// Embedding width (equal to `d_model` except in ALBERT).
    pub d_embedding: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Transform activation (HF `hidden_act`).
    pub activation: Activation,
    /// LayerNorm epsilon.
    #[config(default = 1e-12)]
    pub layer_norm_eps: f64,
    /// Tie the decoder to the word embeddings (HF `tie_word_embeddings`).
    #[config(default = true)]
    pub tie_word_embeddings: bool,
}

impl MaskedLmHeadConfig {
    /// Build the head on `device`.
    pub fn init(&self, device: &Device) -> MaskedLmHead {
        MaskedLmHead {
            dense: LinearConfig::new(self.d_model, self.d_embedding).init(device),
            activation: self.activation,
            layer_norm: LayerNormConfig::new(self.d_embedding).with_epsilon(self.layer_norm_eps).init(device),
            decoder: (!self.tie_word_embeddings)
                .then(|| LinearConfig::new(self.d_embedding, self.vocab_size).init(device)),
            bias: burn::nn::Initializer::Zeros.init([self.vocab_size], device),
        }
    }
}

/// Masked-LM prediction head (HF `cls.predictions`): dense + activation + LayerNorm, then a
/// decoder that is the word-embedding table plus `bias`, or, when the config unties them
/// (`tie_word_embeddings: false`), an own linear decoder with its own bias, as transformers 5
/// does.
#[derive(Module, Debug)]
pub struct MaskedLmHead {
    /// Transform dense layer (HF `transform.dense`).
    pub dense: Linear,
    /// Transform activation.
    #[module(skip)]
    pub activation: Activation,
    /// Transform LayerNorm (HF `transform.LayerNorm`).
    pub layer_norm: LayerNorm,
    /// Own decoder `d_embedding -> vocab`, only when not tied to the word embeddings.
    pub decoder: Option<Linear>,
    /// Output bias `[vocab]`.
    pub bias: Param<Tensor<1>>,
}

impl MaskedLmHead {
    /// Vocabulary logits `[..., vocab]` from hidden states `[..., d_model]` (`[batch, seq, _]`,
    /// or `[masked, _]` for the gathered positions of [`crate::MaskedPositions`]);
    /// `word_embeddings` `[vocab, d_embedding]` is the tied decoder.
    pub fn forward<const D: usize>(&self, hidden: Tensor<D>, word_embeddings: Tensor<2>) -> Tensor<D> {
        let x = self.layer_norm.forward(self.activation.forward(self.dense.forward(hidden)));
        match &self.decoder {
            Some(decoder) => decoder.forward(x),
            None => tied_logits(x, word_embeddings, self.bias.val()),
        }
    }
}

/// `hidden · word_embeddingsᵀ + bias`: vocabulary logits `[..., vocab]` of hidden states
/// `[..., d]` from a decoder tied to the embedding table `[vocab, d]`, run as one product of
/// `[rows, d]` by the table read transposed in place. (`linear` on a batched input with a
/// single batch, such as a decoding step of one sequence, reshapes the transposed table, which
/// copies all of it.)
pub fn tied_logits<const D: usize>(hidden: Tensor<D>, word_embeddings: Tensor<2>, bias: Tensor<1>) -> Tensor<D> {
    on_rows(hidden, |rows| linear(rows, word_embeddings.transpose(), Some(bias)))
}

/// Configuration of [`Pooler`].
#[derive(Config, Debug)]
pub struct PoolerConfig {
    /// Encoder width.
    pub d_model: usize,
}

impl PoolerConfig {
    /// Build the pooler on `device`.
    pub fn init(&self, device: &Device) -> Pooler {
        Pooler { dense: LinearConfig::new(self.d_model, self.d_model).init(device) }
    }
}

/// BERT pooler: `tanh(dense(h[:, 0]))` (HF `pooler`).
#[derive(Module, Debug)]
pub struct Pooler {
    /// The dense layer.
    pub dense: Linear,
}

impl Pooler {
    /// `[batch, seq, d] -> [batch, d]`.
    pub fn forward(&self, hidden: Tensor<3>) -> Tensor<2> {
        tanh(self.dense.forward(first_token(hidden)))
    }
}

/// The first token's states: `[batch, seq, d] -> [batch, d]`.
pub fn first_token(hidden: Tensor<3>) -> Tensor<2> {
    let [b, _, d] = hidden.dims();
    hidden.slice([0..b, 0..1, 0..d]).reshape([b, d])
}

/// Configuration of the classifier heads: dropout then one linear layer.
#[derive(Config, Debug)]
pub struct ClassifierConfig {
    /// Input width.
    pub d_model: usize,
    /// Number of outputs.
    pub num_labels: usize,
    /// Dropout before the linear layer (HF `classifier_dropout`, else `hidden_dropout_prob`).
    #[config(default = 0.1)]
    pub dropout: f64,
}

impl ClassifierConfig {
    /// Build a [`Classifier`] on `device`.
    pub fn init(&self, device: &Device) -> Classifier {
        Classifier {
            dropout: DropoutConfig::new(self.dropout).init(),
            classifier: LinearConfig::new(self.d_model, self.num_labels).init(device),
        }
    }
}

/// `classifier(dropout(x))`: the sequence-, token- and multiple-choice heads.
#[derive(Module, Debug)]
pub struct Classifier {
    /// Dropout on the input.
    pub dropout: Dropout,
    /// Output layer (HF `classifier`).
    pub classifier: Linear,
}

impl Classifier {
    /// `[..., d] -> [..., num_labels]`.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        self.classifier.forward(self.dropout.forward(x))
    }
}

/// RoBERTa's and ELECTRA's two-layer head on the first token: dropout, dense, activation
/// (the config's: tanh in RoBERTa, GELU in ELECTRA), dropout, `out_proj` (HF
/// `RobertaClassificationHead`, `ElectraClassificationHead`).
#[derive(Module, Debug)]
pub struct ClassificationHead {
    /// `hidden -> hidden`.
    pub dense: Linear,
    /// Activation after `dense`.
    #[module(skip)]
    pub activation: Activation,
    /// Dropout before `dense` and before `out_proj`.
    pub dropout: Dropout,
    /// `hidden -> num_labels`.
    pub out_proj: Linear,
}

impl ClassificationHead {
    /// A fresh head `hidden -> hidden -> num_labels`.
    pub fn with_sizes(hidden: usize, num_labels: usize, dropout: f64, activation: Activation, device: &Device) -> Self {
        Self {
            dense: LinearConfig::new(hidden, hidden).init(device),
            activation,
            dropout: DropoutConfig::new(dropout).init(),
            out_proj: LinearConfig::new(hidden, num_labels).init(device),
        }
    }

    /// Logits `[batch, num_labels]` of one vector per sequence `[batch, hidden]`.
    pub fn classify(&self, x: Tensor<2>) -> Tensor<2> {
        let x = self.dropout.forward(x);
        let x = self.dropout.forward(self.activation.forward(self.dense.forward(x)));
        self.out_proj.forward(x)
    }
}

/// How [`SequenceSummary`] picks one vector per sequence (HF `summary_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummaryType {
    /// The first token's state (BERT's `[CLS]`).
    First,
    /// The last token's state (XLNet's `<cls>` at the end).
    Last,
    /// The mean over every position (HF averages padding too).
    Mean,
    /// The state at a given index per sequence (HF `cls_index`; the last one when not given).
    ClsIndex,
}

/// Configuration of [`SequenceSummary`] (HF `summary_*` config fields).
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceSummaryConfig {
    /// Encoder width.
    pub d_model: usize,
    /// Which vector to take.
    pub summary_type: SummaryType,
    /// Project it (HF `summary_use_proj`).
    pub use_proj: bool,
    /// Width of the projection (HF: `num_labels` when `summary_proj_to_labels`, else `d_model`).
    pub proj_size: usize,
    /// Activation after the projection (HF `summary_activation`), if any.
    pub activation: Option<Activation>,
    /// Dropout before the projection (HF `summary_first_dropout`).
    pub first_dropout: f64,
    /// Dropout after the activation (HF `summary_last_dropout`).
    pub last_dropout: f64,
}

impl SequenceSummaryConfig {
    /// The first token's state as it is: what BERT-shaped models without a pooler use.
    pub fn first_token(d_model: usize) -> Self {
        Self {
            d_model,
            summary_type: SummaryType::First,
            use_proj: false,
            proj_size: d_model,
            activation: None,
            first_dropout: 0.0,
            last_dropout: 0.0,
        }
    }
}

impl SequenceSummaryConfig {
    /// Build the module on `device`.
    pub fn init(&self, device: &Device) -> SequenceSummary {
        SequenceSummary {
            summary: self.use_proj.then(|| LinearConfig::new(self.d_model, self.proj_size).init(device)),
            summary_type: self.summary_type,
            activation: self.activation,
            first_dropout: DropoutConfig::new(self.first_dropout).init(),
            last_dropout: DropoutConfig::new(self.last_dropout).init(),
        }
    }
}

/// One vector per sequence from the token states, for models without a pooler (HF
/// `SequenceSummary`): pick, dropout, optional projection and activation, dropout.
#[derive(Module, Debug)]
pub struct SequenceSummary {
    /// The projection (HF `summary`), when used.
    pub summary: Option<Linear>,
    /// Which vector to take.
    #[module(skip)]
    pub summary_type: SummaryType,
    /// Activation after the projection.
    #[module(skip)]
    pub activation: Option<Activation>,
    /// Dropout before the projection.
    pub first_dropout: Dropout,
    /// Dropout after the activation.
    pub last_dropout: Dropout,
}

impl SequenceSummary {
    /// `hidden` `[batch, seq, d]` -> `[batch, proj]`; `cls_index` `[batch]` for
    /// [`SummaryType::ClsIndex`] (the last position when `None`).
    pub fn forward(&self, hidden: Tensor<3>, cls_index: Option<Tensor<1, Int>>) -> Tensor<2> {
        let [b, s, d] = hidden.dims();
        let mut x = match self.summary_type {
            SummaryType::First => first_token(hidden),
            SummaryType::Last => hidden.slice([0..b, s - 1..s, 0..d]).reshape([b, d]),
            SummaryType::Mean => hidden.mean_dim(1).reshape([b, d]),
            SummaryType::ClsIndex => {
                let index = cls_index.unwrap_or_else(|| Tensor::full([b], s as i64 - 1, &hidden.device()));
                hidden.gather(1, index.reshape([b, 1, 1]).expand([b, 1, d])).reshape([b, d])
            }
        };
        x = self.first_dropout.forward(x);
        if let Some(summary) = &self.summary {
            x = summary.forward(x);
        }
        if let Some(activation) = self.activation {
            x = activation.forward(x);
        }
        self.last_dropout.forward(x)
    }
}

/// A sequence summary then a linear classifier: ELECTRA's (and XLNet's) multiple-choice head
/// (HF `sequence_summary` + `classifier`).
#[derive(Module, Debug)]
pub struct SummaryClassifier {
    /// The summary (HF `sequence_summary`).
    pub sequence_summary: SequenceSummary,
    /// `summary -> num_labels` (HF `classifier`).
    pub classifier: Linear,
}

/// Targets for a sequence-classification head; the variant picks HF's `problem_type`.
#[derive(Clone, Debug)]
pub enum SequenceLabels {
    /// `single_label_classification`: class ids `[batch]`.
    SingleLabel(Tensor<1, Int>),
    /// `regression`: targets `[batch, num_labels]`.
    Regression(Tensor<2>),
    /// `multi_label_classification`: 0/1 targets `[batch, num_labels]`.
    MultiLabel(Tensor<2>),
}

impl SequenceLabels {
    /// The HF loss of `logits` `[batch, num_labels]` against these labels.
    pub fn loss(&self, logits: Tensor<2>) -> Tensor<1> {
        match self {
            SequenceLabels::SingleLabel(labels) => cross_entropy(logits, labels.clone()),
            SequenceLabels::Regression(targets) => mse(logits, targets.clone()),
            SequenceLabels::MultiLabel(targets) => binary_cross_entropy_with_logits(logits, targets.clone()),
        }
    }
}

/// Configuration of [`QuestionAnsweringHead`].
#[derive(Config, Debug)]
pub struct QuestionAnsweringHeadConfig {
    /// Encoder width.
    pub d_model: usize,
}

impl QuestionAnsweringHeadConfig {
    /// Build the head on `device`.
    pub fn init(&self, device: &Device) -> QuestionAnsweringHead {
        QuestionAnsweringHead { qa_outputs: LinearConfig::new(self.d_model, 2).init(device) }
    }
}

/// Extractive QA head: start and end logits per token (HF `qa_outputs`).
#[derive(Module, Debug)]
pub struct QuestionAnsweringHead {
    /// `d -> 2` (start, end).
    pub qa_outputs: Linear,
}

impl QuestionAnsweringHead {
    /// `[batch, seq, d]` -> (start logits `[batch, seq]`, end logits `[batch, seq]`).
    pub fn forward(&self, hidden: Tensor<3>) -> (Tensor<2>, Tensor<2>) {
        let [b, s, _] = hidden.dims();
        let logits = self.qa_outputs.forward(hidden);
        let start = logits.clone().slice([0..b, 0..s, 0..1]).reshape([b, s]);
        let end = logits.slice([0..b, 0..s, 1..2]).reshape([b, s]);
        (start, end)
    }
}

/// HF QA loss: mean of the start and end cross-entropies; positions outside the sequence are
/// clamped to `seq` and ignored.
pub fn question_answering_loss(
    start_logits: Tensor<2>,
    end_logits: Tensor<2>,
    start_positions: Tensor<1, Int>,
    end_positions: Tensor<1, Int>,
) -> Tensor<1> {
    let s = start_logits.dims()[1] as i64;
    let start = cross_entropy_ignoring(start_logits, start_positions.clamp(0, s), s);
    let end = cross_entropy_ignoring(end_logits, end_positions.clamp(0, s), s);
    (start + end) / 2.0
}
