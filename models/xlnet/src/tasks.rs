//! XLNet's fine-tuning heads, each on the last states of the base model (the content stream,
//! or the query stream with `target_mapping`) and each returning the memory, as HF's do:
//! sequence classification and multiple choice on a sequence summary (the last token, `<cls>`,
//! by default), token classification, extractive QA as a span head
//! (`XLNetForQuestionAnsweringSimple`) and as SQuAD 2.0's beam head (`XLNetForQuestionAnswering`).
//! The classifier, tagger and span head are also the shared task contract ([`TaskModel`]), so
//! that the pipelines and `finetune` run them as any family's.

use burn::nn::{LayerNorm, LayerNormConfig};
use sesame_layers::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::{softmax, tanh};
use sesame_layers::heads::question_answering_loss;
use sesame_layers::loss::{binary_cross_entropy_with_logits, cross_entropy, per_token_cross_entropy};
use sesame_layers::{
    CheckpointSpec, ClassifierLayers, EncoderInput, EncoderOutput, NamedOutput, OutputOptions, PretrainedModel, QuestionAnsweringHead, QuestionAnsweringHeadConfig,
    SequenceLabels, SequenceSummary, SpanLogits, TaskModel, TokenLogits,
};

use crate::checkpoint::spec;
use crate::config::XlnetConfig;
use crate::model::{XlnetInput, XlnetModel, XlnetOutput};

/// Logits of one head, the loss when labels were given, and the base model's memory, hidden
/// states and attentions.
#[derive(Clone, Debug)]
pub struct XlnetHeadOutput<const D: usize> {
    /// Head logits.
    pub logits: Tensor<D>,
    /// HF's loss, when labels were given.
    pub loss: Option<Tensor<1>>,
    /// The base model's outputs.
    pub transformer: XlnetOutput,
}

impl<const D: usize> XlnetHeadOutput<D> {
    /// Every output present, under HF's names.
    pub fn named(&self) -> Vec<NamedOutput> {
        let mut out = vec![("logits".to_string(), self.logits.to_data())];
        out.extend(self.loss.iter().map(|l| ("loss".to_string(), l.to_data())));
        out.extend(self.transformer.named_layers());
        out
    }
}

/// The spec of a head model whose heads are `heads` (Burn paths that may be fresh).
fn head_spec(heads: &[&str]) -> CheckpointSpec {
    spec(true, heads, &[])
}

/// XLNet with a classifier on the sequence summary (HF `XLNetForSequenceClassification`).
#[derive(Module, Debug)]
pub struct XlnetForSequenceClassification {
    /// The base model.
    pub transformer: XlnetModel,
    /// The last token's state, projected, tanh (HF `sequence_summary`).
    pub sequence_summary: SequenceSummary,
    /// `summary -> num_labels`.
    pub logits_proj: Linear,
}

impl XlnetForSequenceClassification {
    /// Logits `[batch, num_labels]`; the loss of `labels` (whose variant is the problem type).
    pub fn forward(&self, input: XlnetInput, labels: Option<SequenceLabels>, options: OutputOptions) -> XlnetHeadOutput<2> {
        let out = self.transformer.forward(input, options);
        let logits = self.logits_proj.forward(self.sequence_summary.forward(out.last_hidden_state.clone(), None));
        let loss = labels.map(|l| l.loss(logits.clone()));
        XlnetHeadOutput { logits, loss, transformer: out }
    }
}

impl PretrainedModel for XlnetForSequenceClassification {
    type Config = XlnetConfig;

    fn architecture() -> String {
        "XLNetForSequenceClassification".into()
    }

    fn init(config: &XlnetConfig, device: &Device) -> Self {
        let summary = config.summary(config.num_labels());
        Self {
            transformer: XlnetModel::new(config, device),
            logits_proj: LinearConfig::new(summary.proj_size, config.num_labels()).init(device),
            sequence_summary: summary.init(device),
        }
    }

    fn checkpoint_spec(_config: &XlnetConfig) -> CheckpointSpec {
        head_spec(&["sequence_summary.", "logits_proj."])
    }
}

/// XLNet scoring each choice on its sequence summary (HF `XLNetForMultipleChoice`).
#[derive(Module, Debug)]
pub struct XlnetForMultipleChoice {
    /// The base model.
    pub transformer: XlnetModel,
    /// The sequence summary.
    pub sequence_summary: SequenceSummary,
    /// `summary -> 1`.
    pub logits_proj: Linear,
}

impl XlnetForMultipleChoice {
    /// `input` holds `[batch * choices, seq]` tensors, choice-major within each example.
    /// Returns logits `[batch, choices]`; the loss when `labels` `[batch]` are given.
    pub fn forward(&self, input: XlnetInput, num_choices: usize, labels: Option<Tensor<1, Int>>, options: OutputOptions) -> XlnetHeadOutput<2> {
        let rows = input.input_ids.dims()[0];
        let out = self.transformer.forward(input, options);
        let scores = self.logits_proj.forward(self.sequence_summary.forward(out.last_hidden_state.clone(), None));
        let logits = scores.reshape([rows / num_choices, num_choices]);
        let loss = labels.map(|l| cross_entropy(logits.clone(), l));
        XlnetHeadOutput { logits, loss, transformer: out }
    }
}

impl PretrainedModel for XlnetForMultipleChoice {
    type Config = XlnetConfig;

    fn architecture() -> String {
        "XLNetForMultipleChoice".into()
    }

    fn init(config: &XlnetConfig, device: &Device) -> Self {
        let summary = config.summary(config.num_labels());
        Self {
            transformer: XlnetModel::new(config, device),
            logits_proj: LinearConfig::new(summary.proj_size, 1).init(device),
            sequence_summary: summary.init(device),
        }
    }

    fn checkpoint_spec(_config: &XlnetConfig) -> CheckpointSpec {
        head_spec(&["sequence_summary.", "logits_proj."])
    }
}

/// XLNet with a label per token (HF `XLNetForTokenClassification`).
#[derive(Module, Debug)]
pub struct XlnetForTokenClassification {
    /// The base model.
    pub transformer: XlnetModel,
    /// `d_model -> num_labels`.
    pub classifier: Linear,
}

impl XlnetForTokenClassification {
    /// Logits `[batch, seq, num_labels]`; the loss when `labels` `[batch, seq]` (-100 ignored) are given.
    pub fn forward(&self, input: XlnetInput, labels: Option<Tensor<2, Int>>, options: OutputOptions) -> XlnetHeadOutput<3> {
        let out = self.transformer.forward(input, options);
        let logits = self.classifier.forward(out.last_hidden_state.clone());
        let loss = labels.map(|l| per_token_cross_entropy(logits.clone(), l));
        XlnetHeadOutput { logits, loss, transformer: out }
    }
}

impl PretrainedModel for XlnetForTokenClassification {
    type Config = XlnetConfig;

    fn architecture() -> String {
        "XLNetForTokenClassification".into()
    }

    fn init(config: &XlnetConfig, device: &Device) -> Self {
        Self { transformer: XlnetModel::new(config, device), classifier: LinearConfig::new(config.d_model, config.num_labels()).init(device) }
    }

    fn checkpoint_spec(_config: &XlnetConfig) -> CheckpointSpec {
        head_spec(&["classifier."])
    }
}

/// What the extractive-QA span head returns.
#[derive(Clone, Debug)]
pub struct XlnetQuestionAnsweringSimpleOutput {
    /// Span-start logits `[batch, seq]`.
    pub start_logits: Tensor<2>,
    /// Span-end logits `[batch, seq]`.
    pub end_logits: Tensor<2>,
    /// Mean of start and end losses, when positions were given.
    pub loss: Option<Tensor<1>>,
    /// The base model's outputs.
    pub transformer: XlnetOutput,
}

impl XlnetQuestionAnsweringSimpleOutput {
    /// Every output present, under HF's names.
    pub fn named(&self) -> Vec<NamedOutput> {
        let mut out = vec![("start_logits".to_string(), self.start_logits.to_data()), ("end_logits".to_string(), self.end_logits.to_data())];
        out.extend(self.loss.iter().map(|l| ("loss".to_string(), l.to_data())));
        out.extend(self.transformer.named_layers());
        out
    }
}

/// XLNet with a span head (HF `XLNetForQuestionAnsweringSimple`).
#[derive(Module, Debug)]
pub struct XlnetForQuestionAnsweringSimple {
    /// The base model.
    pub transformer: XlnetModel,
    /// `d_model -> 2` (start, end).
    pub qa_head: QuestionAnsweringHead,
}

impl XlnetForQuestionAnsweringSimple {
    /// Start / end logits; the loss when `positions` (start `[batch]`, end `[batch]`) are given.
    pub fn forward(&self, input: XlnetInput, positions: Option<(Tensor<1, Int>, Tensor<1, Int>)>, options: OutputOptions) -> XlnetQuestionAnsweringSimpleOutput {
        let out = self.transformer.forward(input, options);
        let (start_logits, end_logits) = self.qa_head.forward(out.last_hidden_state.clone());
        let loss = positions.map(|(s, e)| question_answering_loss(start_logits.clone(), end_logits.clone(), s, e));
        XlnetQuestionAnsweringSimpleOutput { start_logits, end_logits, loss, transformer: out }
    }
}

impl PretrainedModel for XlnetForQuestionAnsweringSimple {
    type Config = XlnetConfig;

    fn architecture() -> String {
        "XLNetForQuestionAnsweringSimple".into()
    }

    fn init(config: &XlnetConfig, device: &Device) -> Self {
        Self { transformer: XlnetModel::new(config, device), qa_head: QuestionAnsweringHeadConfig::new(config.d_model).init(device) }
    }

    fn checkpoint_spec(_config: &XlnetConfig) -> CheckpointSpec {
        head_spec(&["qa_head."])
    }
}

/// `x * (1 - p_mask) - 1e30 * p_mask` (HF's masking of impossible answer positions).
fn masked(x: Tensor<2>, p_mask: Option<&Tensor<2>>) -> Tensor<2> {
    match p_mask {
        Some(p) => x * (p.clone().neg() + 1.0) - p.clone() * 1e30,
        None => x,
    }
}

/// Start logits of SQuAD spans (HF `XLNetPoolerStartLogits`).
#[derive(Module, Debug)]
pub struct PoolerStartLogits {
    /// `d -> 1`.
    pub dense: Linear,
}

/// End logits given the start's state (HF `XLNetPoolerEndLogits`).
#[derive(Module, Debug)]
pub struct PoolerEndLogits {
    /// `2d -> d` over `[hidden; start]`.
    pub dense_0: Linear,
    /// LayerNorm after tanh (HF `LayerNorm`).
    pub layer_norm: LayerNorm,
    /// `d -> 1`.
    pub dense_1: Linear,
}

impl PoolerEndLogits {
    /// `hidden` and `start_states` `[..., d]` -> end logits `[...]` (the last dimension squeezed).
    fn forward<const D: usize, const E: usize>(&self, hidden: Tensor<D>, start_states: Tensor<D>) -> Tensor<E> {
        let x = self.layer_norm.forward(tanh(self.dense_0.forward(Tensor::cat(vec![hidden, start_states], D - 1))));
        self.dense_1.forward(x).squeeze_dim::<E>(D - 1)
    }
}

/// SQuAD 2.0's answerability logit from the start's and `<cls>`'s states (HF `XLNetPoolerAnswerClass`).
#[derive(Module, Debug)]
pub struct PoolerAnswerClass {
    /// `2d -> d` over `[start; cls]`.
    pub dense_0: Linear,
    /// `d -> 1`, no bias.
    pub dense_1: Linear,
}

impl PoolerAnswerClass {
    /// `start_states` `[batch, d]` and the states of `cls_index` (the last position when `None`) -> `[batch]`.
    fn forward(&self, hidden: &Tensor<3>, start_states: Tensor<2>, cls_index: Option<Tensor<1, Int>>) -> Tensor<1> {
        let cls = gather_rows(hidden, cls_index);
        let x = tanh(self.dense_0.forward(Tensor::cat(vec![start_states, cls], 1)));
        self.dense_1.forward(x).squeeze_dim::<1>(1)
    }
}

/// The state at `index` `[batch]` of each row of `hidden` `[batch, seq, d]` (the last when `None`).
fn gather_rows(hidden: &Tensor<3>, index: Option<Tensor<1, Int>>) -> Tensor<2> {
    let [b, s, d] = hidden.dims();
    let index = index.unwrap_or_else(|| Tensor::full([b], s as i64 - 1, &hidden.device()));
    hidden.clone().gather(1, index.reshape([b, 1, 1]).expand([b, 1, d])).reshape([b, d])
}

/// Labels of [`XlnetForQuestionAnswering`] in training.
#[derive(Clone, Debug)]
pub struct SquadLabels {
    /// Answer start `[batch]`.
    pub start_positions: Tensor<1, Int>,
    /// Answer end `[batch]`.
    pub end_positions: Tensor<1, Int>,
    /// Position of `<cls>` `[batch]` and whether the question is unanswerable (0 / 1) `[batch]`:
    /// with both, the answerability loss is added at half weight.
    pub answerability: Option<(Tensor<1, Int>, Tensor<1>)>,
}

/// What [`XlnetForQuestionAnswering`] returns: the loss in training; the beam of start and end
/// candidates and the answerability logit at inference.
#[derive(Clone, Debug)]
pub struct XlnetQuestionAnsweringOutput {
    /// Mean of start and end losses (plus half the answerability loss), with labels.
    pub loss: Option<Tensor<1>>,
    /// Without labels: the `start_n_top` most likely starts' probabilities `[batch, k1]` and
    /// positions, the `end_n_top` most likely ends for each `[batch, k2 * k1]` (end-major, as
    /// HF) and their positions, and the answerability logit `[batch]`.
    pub beam: Option<SquadBeam>,
    /// The base model's outputs.
    pub transformer: XlnetOutput,
}

/// The inference outputs of [`XlnetForQuestionAnswering`], as HF names them.
#[derive(Clone, Debug)]
pub struct SquadBeam {
    /// `[batch, start_n_top]`.
    pub start_top_log_probs: Tensor<2>,
    /// `[batch, start_n_top]`.
    pub start_top_index: Tensor<2, Int>,
    /// `[batch, end_n_top * start_n_top]`.
    pub end_top_log_probs: Tensor<2>,
    /// `[batch, end_n_top * start_n_top]`.
    pub end_top_index: Tensor<2, Int>,
    /// `[batch]`.
    pub cls_logits: Tensor<1>,
}

impl XlnetQuestionAnsweringOutput {
    /// Every output present, under HF's names.
    pub fn named(&self) -> Vec<NamedOutput> {
        let mut out: Vec<NamedOutput> = self.loss.iter().map(|l| ("loss".to_string(), l.to_data())).collect();
        if let Some(beam) = &self.beam {
            out.push(("start_top_log_probs".into(), beam.start_top_log_probs.to_data()));
            out.push(("start_top_index".into(), beam.start_top_index.to_data()));
            out.push(("end_top_log_probs".into(), beam.end_top_log_probs.to_data()));
            out.push(("end_top_index".into(), beam.end_top_index.to_data()));
            out.push(("cls_logits".into(), beam.cls_logits.to_data()));
        }
        out.extend(self.transformer.named_layers());
        out
    }
}

/// XLNet's SQuAD head (HF `XLNetForQuestionAnswering`): start logits, end logits conditioned on
/// the start, and an answerability class; a beam over starts and ends at inference.
#[derive(Module, Debug)]
pub struct XlnetForQuestionAnswering {
    /// The base model.
    pub transformer: XlnetModel,
    /// Start logits.
    pub start_logits: PoolerStartLogits,
    /// End logits.
    pub end_logits: PoolerEndLogits,
    /// Answerability.
    pub answer_class: PoolerAnswerClass,
    /// Start candidates kept at inference.
    #[module(skip)]
    pub start_n_top: usize,
    /// End candidates kept per start.
    #[module(skip)]
    pub end_n_top: usize,
}

impl XlnetForQuestionAnswering {
    /// With `labels`, the loss; without, the beam. `p_mask` `[batch, seq]`: 1 where no answer
    /// may lie (question, special tokens, padding); `cls_index` `[batch]`: where `<cls>` is (the
    /// last position when `None`).
    pub fn forward(&self, input: XlnetInput, p_mask: Option<Tensor<2>>, cls_index: Option<Tensor<1, Int>>, labels: Option<SquadLabels>, options: OutputOptions) -> XlnetQuestionAnsweringOutput {
        let out = self.transformer.forward(input, options);
        let hidden = out.last_hidden_state.clone();
        let [b, s, d] = hidden.dims();
        let start_logits = masked(self.start_logits.dense.forward(hidden.clone()).reshape([b, s]), p_mask.as_ref());
        if let Some(labels) = labels {
            let start_states = gather_rows(&hidden, Some(labels.start_positions.clone())).reshape([b, 1, d]).expand([b, s, d]);
            let end_logits = masked(self.end_logits.forward::<3, 2>(hidden.clone(), start_states), p_mask.as_ref());
            let mut loss = (cross_entropy(start_logits, labels.start_positions.clone()) + cross_entropy(end_logits, labels.end_positions)) / 2.0;
            if let Some((cls, impossible)) = labels.answerability {
                let start = gather_rows(&hidden, Some(labels.start_positions));
                let cls_logits = self.answer_class.forward(&hidden, start, Some(cls));
                loss = loss + binary_cross_entropy_with_logits(cls_logits.reshape([b, 1]), impossible.reshape([b, 1])) * 0.5;
            }
            return XlnetQuestionAnsweringOutput { loss: Some(loss), beam: None, transformer: out };
        }
        let start_probs = softmax(start_logits, 1);
        let k1 = self.start_n_top.min(s);
        let (start_top_log_probs, start_top_index) = start_probs.clone().topk_with_indices(k1, 1);
        let start_states = hidden.clone().gather(1, start_top_index.clone().reshape([b, k1, 1]).expand([b, k1, d]));
        let start_states = start_states.reshape([b, 1, k1, d]).expand([b, s, k1, d]);
        let hidden_expanded = hidden.clone().reshape([b, s, 1, d]).expand([b, s, k1, d]);
        let mut end_logits = self.end_logits.forward::<4, 3>(hidden_expanded, start_states);
        if let Some(p) = &p_mask {
            let p = p.clone().reshape([b, s, 1]);
            end_logits = end_logits * (p.clone().neg() + 1.0) - p * 1e30;
        }
        let end_probs = softmax(end_logits, 1);
        let k2 = self.end_n_top.min(s);
        let (end_top_log_probs, end_top_index) = end_probs.topk_with_indices(k2, 1);
        let weighted = (hidden.clone() * start_probs.reshape([b, s, 1])).sum_dim(1).reshape([b, d]);
        let cls_logits = self.answer_class.forward(&hidden, weighted, cls_index);
        let beam = SquadBeam {
            start_top_log_probs,
            start_top_index,
            end_top_log_probs: end_top_log_probs.reshape([b, k2 * k1]),
            end_top_index: end_top_index.reshape([b, k2 * k1]),
            cls_logits,
        };
        XlnetQuestionAnsweringOutput { loss: None, beam: Some(beam), transformer: out }
    }
}

impl PretrainedModel for XlnetForQuestionAnswering {
    type Config = XlnetConfig;

    fn architecture() -> String {
        "XLNetForQuestionAnswering".into()
    }

    fn init(config: &XlnetConfig, device: &Device) -> Self {
        let d = config.d_model;
        Self {
            transformer: XlnetModel::new(config, device),
            start_logits: PoolerStartLogits { dense: LinearConfig::new(d, 1).init(device) },
            end_logits: PoolerEndLogits {
                dense_0: LinearConfig::new(2 * d, d).init(device),
                layer_norm: LayerNormConfig::new(d).with_epsilon(config.layer_norm_eps).init(device),
                dense_1: LinearConfig::new(d, 1).init(device),
            },
            answer_class: PoolerAnswerClass { dense_0: LinearConfig::new(2 * d, d).init(device), dense_1: LinearConfig::new(d, 1).with_bias(false).init(device) },
            start_n_top: config.start_n_top,
            end_n_top: config.end_n_top,
        }
    }

    fn checkpoint_spec(_config: &XlnetConfig) -> CheckpointSpec {
        head_spec(&["start_logits.", "end_logits.", "answer_class."])
    }
}

/// The task models as the pipelines and `finetune` run them, from padded token ids: the
/// attention mask as XLNet's floats, segment ids as the tokenizer gives them (`<cls>` in its
/// own segment, 2; padding 3), no memory kept (HF's `use_mems_train: false`).
fn task_input(input: EncoderInput) -> XlnetInput {
    XlnetInput {
        attention_mask: input.attention_mask.map(|m| m.float()),
        token_type_ids: input.token_type_ids,
        use_mems: Some(false),
        ..XlnetInput::new(input.input_ids)
    }
}

/// XLNet's base model is its own base: what distillation shrinks.
impl TaskModel for XlnetModel {
    type Base = Self;
    type Output = XlnetOutput;
    const BASE: &'static str = "";

    fn base(&self) -> &Self {
        self
    }

    fn with_base(self, base: Self) -> Self {
        base
    }

    fn run(&self, input: EncoderInput, options: OutputOptions) -> XlnetOutput {
        self.forward(task_input(input), OutputOptions { tokens_only: false, ..options })
    }

    fn keep_layers(self, config: &mut XlnetConfig, layers: &[usize]) -> Result<Self, sesame_layers::ConfigError> {
        XlnetModel::keep_layers(self, config, layers)
    }
}

impl TaskModel for XlnetForSequenceClassification {
    type Base = XlnetModel;
    type Output = ClassifierLayers;
    const BASE: &'static str = "transformer";

    fn base(&self) -> &XlnetModel {
        &self.transformer
    }

    fn with_base(self, transformer: XlnetModel) -> Self {
        Self { transformer, ..self }
    }

    /// The content stream's hidden states and attentions. Its layers run over every position
    /// (`tokens_only` is not for XLNet's).
    fn run(&self, input: EncoderInput, options: OutputOptions) -> ClassifierLayers {
        let out = self.forward(task_input(input), None, OutputOptions { tokens_only: false, ..options });
        let t = out.transformer;
        let encoder = EncoderOutput {
            last_hidden_state: t.last_hidden_state,
            hidden_states: options.hidden_states.then_some(t.hidden_states),
            attentions: options.attentions.then(|| t.attentions.into_iter().map(|(h, _)| h).collect()),
            cache: None,
        };
        ClassifierLayers { logits: out.logits, stacks: vec![encoder] }
    }
}

impl TaskModel for XlnetForTokenClassification {
    type Base = XlnetModel;
    type Output = TokenLogits;
    const BASE: &'static str = "transformer";

    fn base(&self) -> &XlnetModel {
        &self.transformer
    }

    fn with_base(self, transformer: XlnetModel) -> Self {
        Self { transformer, ..self }
    }

    fn run(&self, input: EncoderInput, _options: OutputOptions) -> TokenLogits {
        self.forward(task_input(input), None, OutputOptions::default()).logits
    }
}

impl TaskModel for XlnetForQuestionAnsweringSimple {
    type Base = XlnetModel;
    type Output = SpanLogits;
    const BASE: &'static str = "transformer";

    fn base(&self) -> &XlnetModel {
        &self.transformer
    }

    fn with_base(self, transformer: XlnetModel) -> Self {
        Self { transformer, ..self }
    }

    fn run(&self, input: EncoderInput, _options: OutputOptions) -> SpanLogits {
        let out = self.forward(task_input(input), None, OutputOptions::default());
        SpanLogits { start: out.start_logits, end: out.end_logits }
    }
}

