//! The task models, written once for every [`Backbone`]: pre-training (MLM + a sentence-level
//! objective), masked LM, sequence classification, token classification, extractive QA and
//! multiple choice. Each computes HF's loss when labels are given; families name them with
//! type aliases (`BertForMaskedLM = ForMaskedLM<BertModel>`).

use burn::prelude::*;

use crate::attention::causal_restriction;
use crate::backbone::{Backbone, BackboneOutput, ClassifierSizes, EncoderInput, SentenceHead, SequenceHead};
use crate::checkpoint::CheckpointSpec;
use crate::encoder::{EncoderOutput, OutputOptions};
use crate::heads::{
    question_answering_loss, Classifier, ClassifierConfig, MaskedLmHead,
    QuestionAnsweringHead, QuestionAnsweringHeadConfig, SequenceLabels,
};
use crate::loss::{cross_entropy, per_token_cross_entropy};
use crate::pretrained::PretrainedModel;
use crate::early_exit::{normalized_entropy, stops, EarlyExit, EarlyExitOutput};
use crate::scalar_mix::ScalarMix;

/// Logits of one head, the loss when labels were given, and what the encoder was asked for.
#[derive(Clone, Debug)]
pub struct HeadOutput<const D: usize> {
    /// Head logits.
    pub logits: Tensor<D>,
    /// HF loss, when labels were given.
    pub loss: Option<Tensor<1>>,
    /// Encoder hidden states and attentions (when asked).
    pub encoder: EncoderOutput,
}

impl<const D: usize> HeadOutput<D> {
    /// Every output present, under HF's names (`logits`, `loss`, `hidden_states.0`, `attentions.1`).
    pub fn named(&self) -> Vec<crate::encoder::NamedOutput> {
        let mut out = vec![("logits".to_string(), self.logits.to_data())];
        out.extend(self.loss.iter().map(|l| ("loss".to_string(), l.to_data())));
        out.extend(self.encoder.named_layers());
        out
    }
}

impl PreTrainingOutput {
    /// Every output present, under HF's names, the sentence logits as `sentence` (BERT's
    /// `seq_relationship_logits`, ALBERT's `sop_logits`).
    pub fn named(&self, sentence: &str) -> Vec<crate::encoder::NamedOutput> {
        let mut out = vec![("prediction_logits".to_string(), self.prediction_logits.to_data()), (sentence.to_string(), self.sentence_logits.to_data())];
        out.extend(self.loss.iter().map(|l| ("loss".to_string(), l.to_data())));
        out.extend(self.encoder.named_layers());
        out
    }
}

impl QuestionAnsweringOutput {
    /// Every output present, under HF's names (`start_logits`, `end_logits`, `loss`, …).
    pub fn named(&self) -> Vec<crate::encoder::NamedOutput> {
        let mut out = vec![("start_logits".to_string(), self.start_logits.to_data()), ("end_logits".to_string(), self.end_logits.to_data())];
        out.extend(self.loss.iter().map(|l| ("loss".to_string(), l.to_data())));
        out.extend(self.encoder.named_layers());
        out
    }
}

fn classifier(sizes: &ClassifierSizes, num_labels: usize, device: &Device) -> Classifier {
    ClassifierConfig::new(sizes.hidden_size, num_labels).with_dropout(sizes.classifier_dropout).init(device)
}

/// Labels for [`ForPreTraining`].
#[derive(Clone, Debug)]
pub struct PreTrainingLabels {
    /// MLM targets `[batch, seq]` (-100 = not predicted).
    pub mlm: Tensor<2, Int>,
    /// Sentence-level targets `[batch]`: BERT's NSP (0 = B follows A, 1 = B is random) or
    /// ALBERT's SOP (0 = in order, 1 = swapped).
    pub sentence: Tensor<1, Int>,
}

/// What [`ForPreTraining`] returns.
#[derive(Clone, Debug)]
pub struct PreTrainingOutput {
    /// MLM logits `[batch, seq, vocab]`.
    pub prediction_logits: Tensor<3>,
    /// Sentence-level logits `[batch, 2]` (HF `seq_relationship_logits` / `sop_logits`).
    pub sentence_logits: Tensor<2>,
    /// MLM loss + sentence loss, when labels were given.
    pub loss: Option<Tensor<1>>,
    /// MLM loss alone.
    pub mlm_loss: Option<Tensor<1>>,
    /// Sentence loss alone.
    pub sentence_loss: Option<Tensor<1>>,
    /// Encoder hidden states and attentions (when asked).
    pub encoder: EncoderOutput,
}

/// The base model with the MLM head and a two-way classifier on the pooled output (HF
/// `BertForPreTraining` with NSP, `AlbertForPreTraining` with SOP): of a family with a
/// sentence-pair head ([`Backbone::SENTENCE_HEAD`]); of another, refused when it is built.
#[derive(Module, Debug)]
pub struct ForPreTraining<B: Backbone> {
    /// The base model, with pooler.
    pub base: B,
    /// MLM head.
    pub lm_head: MaskedLmHead,
    /// `pooled -> 2` (NSP or SOP).
    pub sentence_head: Classifier,
}

impl<B: Backbone> ForPreTraining<B> {
    /// Logits of both heads, and `mlm + sentence` loss when `labels` are given.
    pub fn forward(&self, input: EncoderInput, labels: Option<PreTrainingLabels>, options: OutputOptions) -> PreTrainingOutput {
        let out = self.base.forward(input, options);
        let prediction_logits = self.lm_head.forward(out.last_hidden_state(), self.base.word_embeddings());
        let sentence_logits = self.sentence_head.forward(B::pooled(&out));
        let (mlm_loss, sentence_loss) = match labels {
            Some(l) => (
                Some(per_token_cross_entropy(prediction_logits.clone(), l.mlm)),
                Some(cross_entropy(sentence_logits.clone(), l.sentence)),
            ),
            None => (None, None),
        };
        let loss = mlm_loss.clone().zip(sentence_loss.clone()).map(|(a, b)| a + b);
        PreTrainingOutput { prediction_logits, sentence_logits, loss, mlm_loss, sentence_loss, encoder: out.encoder }
    }
}

impl<B: Backbone> PretrainedModel for ForPreTraining<B> {
    type Config = B::Config;

    fn architecture() -> String {
        format!("{}ForPreTraining", B::CLASS)
    }

    fn init(config: &B::Config, device: &Device) -> Self {
        const { SentenceHead::of::<B>() };
        Self {
            base: B::new(config, true, device),
            lm_head: B::lm_head(config).init(device),
            sentence_head: B::sentence_head(config).init(device),
        }
    }

    fn checkpoint_spec(config: &B::Config) -> CheckpointSpec {
        B::spec(config, true, &[])
    }
}

/// The base model with the MLM head only (HF `BertForMaskedLM`; no pooler).
#[derive(Module, Debug)]
pub struct ForMaskedLM<B: Backbone> {
    /// The base model, without pooler.
    pub base: B,
    /// The MLM head.
    pub lm_head: MaskedLmHead,
}

impl<B: Backbone> ForMaskedLM<B> {
    /// Vocabulary logits `[batch, seq, vocab]`; MLM loss when `labels` `[batch, seq]` are given.
    pub fn forward(&self, input: EncoderInput, labels: Option<Tensor<2, Int>>, options: OutputOptions) -> HeadOutput<3> {
        let out = self.base.forward(input, options);
        let logits = self.lm_head.forward(out.last_hidden_state(), self.base.word_embeddings());
        let loss = labels.map(|l| per_token_cross_entropy(logits.clone(), l));
        HeadOutput { logits, loss, encoder: out.encoder }
    }

    /// The model with only the encoder layers `layers` (0-based, increasing), `config` saying
    /// so ([`Backbone::keep_layers`]): a masked-LM student initialised from its teacher's
    /// layers, as DistilBERT's.
    pub fn keep_layers(self, config: &mut B::Config, layers: &[usize]) -> Result<Self, crate::ConfigError> {
        Ok(Self { base: Backbone::keep_layers(self.base, config, layers)?, ..self })
    }
}

impl<B: Backbone> PretrainedModel for ForMaskedLM<B> {
    type Config = B::Config;

    fn architecture() -> String {
        format!("{}ForMaskedLM", B::CLASS)
    }

    fn init(config: &B::Config, device: &Device) -> Self {
        Self { base: B::new(config, false, device), lm_head: B::lm_head(config).init(device) }
    }

    fn checkpoint_spec(config: &B::Config) -> CheckpointSpec {
        B::spec(config, true, &["lm_head."])
    }
}

/// The base model as a left-to-right language model with the MLM head (HF `BertLMHeadModel`,
/// `RobertaForCausalLM`, `ElectraForCausalLM`: a `config.json` with `is_decoder`): each position
/// attends to itself and the positions before it, and predicts the next token.
#[derive(Module, Debug)]
pub struct ForCausalLM<B: Backbone> {
    /// The base model, without pooler.
    pub base: B,
    /// The language-model head (the MLM head's weights).
    pub lm_head: MaskedLmHead,
}

impl<B: Backbone> ForCausalLM<B> {
    /// Next-token logits `[batch, seq, vocab]`; with `labels` `[batch, seq]` (the input ids, -100
    /// where not predicted) HF's loss: logits at `i` against the label at `i + 1`. A cache in
    /// `input` continues after its positions (the returned cache is in `encoder.cache`).
    pub fn forward(&self, input: EncoderInput, labels: Option<Tensor<2, Int>>, options: OutputOptions) -> HeadOutput<3> {
        let input = causal(input);
        let out = self.base.forward(input, options);
        let logits = self.lm_head.forward(out.last_hidden_state(), self.base.word_embeddings());
        let loss = labels.map(|labels| {
            let [b, s, n] = logits.dims();
            let shifted = logits.clone().slice([0..b, 0..s.saturating_sub(1), 0..n]);
            per_token_cross_entropy(shifted, labels.slice([0..b, 1..s]))
        });
        HeadOutput { logits, loss, encoder: out.encoder }
    }
}

/// `input` with each position restricted to the keys up to its own (the cached ones included),
/// on top of any restriction it had.
fn causal(input: EncoderInput) -> EncoderInput {
    let [b, s] = input.input_ids.dims();
    let Some(future) = causal_restriction(b, s, input.past_len(), &input.input_ids.device()) else {
        return input;
    };
    let restriction = match input.attention_restriction.clone() {
        Some(r) => r.bool_or(future),
        None => future,
    };
    input.with_attention_restriction(restriction)
}

impl<B: Backbone> PretrainedModel for ForCausalLM<B> {
    type Config = B::Config;

    fn architecture() -> String {
        B::causal_lm_architecture()
    }

    fn init(config: &B::Config, device: &Device) -> Self {
        Self { base: B::new(config, false, device), lm_head: B::lm_head(config).init(device) }
    }

    fn checkpoint_spec(config: &B::Config) -> CheckpointSpec {
        B::spec(config, true, &["lm_head."])
    }
}

/// The base model with a sequence classifier `H`: dropout + linear on the pooled output
/// ([`Classifier`]: BERT, ALBERT) or a two-layer head on the first token
/// ([`crate::heads::ClassificationHead`]: RoBERTa).
#[derive(Module, Debug)]
pub struct ForSequenceClassification<B: Backbone, H: SequenceHead<B>> {
    /// The base model (with a pooler when `H` reads it).
    pub base: B,
    /// The classifier (HF `classifier`).
    pub head: H,
    /// Sesame's: the head reads this mix of every layer's states (pooled, when it reads the
    /// pooler) instead of the top layer's; absent in HF's models (config `sesame_scalar_mix`).
    pub scalar_mix: Option<ScalarMix>,
    /// Sesame's: FastBERT's exit classifiers after the layers below the top (config
    /// `sesame_early_exit`); absent in HF's models.
    pub early_exit: Option<EarlyExit>,
}

impl<B: Backbone, H: SequenceHead<B>> ForSequenceClassification<B, H> {
    /// Logits `[batch, num_labels]`; the loss of `labels` (whose variant is the problem type).
    pub fn forward(&self, input: EncoderInput, labels: Option<SequenceLabels>, options: OutputOptions) -> HeadOutput<2> {
        let out = mixed(&self.base, self.scalar_mix.as_ref(), input.clone(), options);
        let logits = self.head.forward(&out, &input);
        let loss = labels.map(|l| l.loss(logits.clone()));
        HeadOutput { logits, loss, encoder: out.encoder }
    }

    /// The head's logits `[batch, num_labels]` of the top layer's states `x`.
    fn top_logits(&self, x: Tensor<3>, input: &EncoderInput) -> Tensor<2> {
        let encoder = crate::EncoderOutput { last_hidden_state: x.clone(), hidden_states: None, attentions: None, cache: None };
        let out = crate::BackboneOutput { pooler_output: self.base.pool(x), encoder };
        self.head.forward(&out, input)
    }

    /// Every layer's logits `[batch, num_labels]`: the exit classifiers' after layers
    /// `1..L-1`, then the head's after layer `L` (what [`Self::forward`] gives). `None` without
    /// exit classifiers, or when the base model does not run a layer at a time.
    pub fn exit_logits(&self, input: EncoderInput) -> Option<Vec<Tensor<2>>> {
        let exits = self.early_exit.as_ref()?;
        let (mut x, depths) = self.base.layer_stack(&input)?;
        let mask = input.mask();
        let last = depths.len();
        let mut logits = Vec::with_capacity(last);
        for (i, depth) in depths.into_iter().enumerate() {
            x = depth.into_iter().fold(x, |x, layer| layer.forward(x, &mask, false).0);
            if i + 1 < last {
                logits.push(exits.classifiers.get(i)?.forward(x.clone(), &mask));
            }
        }
        logits.push(self.top_logits(x, &input));
        Some(logits)
    }

    /// FastBERT's adaptive inference: each row runs up the layers until an exit classifier's
    /// normalised entropy ([`normalized_entropy`]) is below `speed`, the rows of a batch
    /// independently (those that stopped leave the batch); rows still running at the top take
    /// the head's logits. At `speed` 0 every row reaches the top: [`Self::forward`]'s logits;
    /// at 1 (the entropy's bound) every row stops at layer 1.
    /// `None` as [`Self::exit_logits`].
    pub fn classify_early(&self, input: EncoderInput, speed: f64) -> Option<EarlyExitOutput> {
        let exits = self.early_exit.as_ref()?;
        if speed <= 0.0 {
            // No row can stop early: the plain forward pass, without the exits' cost.
            let layers = exits.classifiers.len() + 1;
            let rows = input.batch_size();
            return Some(EarlyExitOutput { logits: self.forward(input, None, OutputOptions::default()).logits, exit_layers: vec![layers; rows] });
        }
        let device = input.input_ids.device();
        let rows = input.batch_size();
        let (mut x, depths) = self.base.layer_stack(&input)?;
        let (mut input, mut mask) = (input.clone(), input.mask());
        let last = depths.len();
        // Rows still running (indices into the batch), each row's logits and exit layer.
        let mut running: Vec<usize> = (0..rows).collect();
        let mut logits: Vec<Vec<f32>> = vec![Vec::new(); rows];
        let mut exit_layers = vec![last; rows];
        for (i, depth) in depths.into_iter().enumerate() {
            x = depth.into_iter().fold(x, |x, layer| layer.forward(x, &mask, false).0);
            let top = i + 1 == last;
            let layer_logits = if top { self.top_logits(x.clone(), &input) } else { exits.classifiers.get(i)?.forward(x.clone(), &mask) };
            let entropy: Vec<f32> = if top { Vec::new() } else { normalized_entropy(layer_logits.clone()).into_data().convert::<f32>().try_to_vec().ok()? };
            let n = layer_logits.dims()[1];
            let values: Vec<f32> = layer_logits.into_data().convert::<f32>().try_to_vec().ok()?;
            let mut keep = Vec::new();
            for (r, &row) in running.iter().enumerate() {
                if top || stops(entropy[r] as f64, speed) {
                    logits[row] = values[r * n..(r + 1) * n].to_vec();
                    exit_layers[row] = i + 1;
                } else {
                    keep.push(r);
                }
            }
            if keep.is_empty() {
                break;
            }
            if keep.len() < running.len() {
                let picked = Tensor::<1, Int>::from_data(TensorData::new(keep.iter().map(|&r| r as i64).collect::<Vec<_>>(), [keep.len()]), &device);
                x = x.select(0, picked.clone());
                input = input.select_rows(&picked);
                mask = input.mask();
                running = keep.iter().map(|&r| running[r]).collect();
            }
        }
        let n = logits.first().map_or(0, Vec::len);
        let logits = Tensor::from_data(TensorData::new(logits.concat(), [rows, n]), &device);
        Some(EarlyExitOutput { logits, exit_layers })
    }
}

impl<B: Backbone, H: SequenceHead<B>> PretrainedModel for ForSequenceClassification<B, H> {
    type Config = B::Config;

    fn architecture() -> String {
        format!("{}ForSequenceClassification", B::CLASS)
    }

    fn init(config: &B::Config, device: &Device) -> Self {
        let sizes = B::classifier_sizes(config);
        let early_exit = crate::pretrained::HfConfig::labels(config).early_exit.map(|exit| EarlyExit::new(&exit, sizes.layers, sizes.hidden_size, sizes.num_labels, sizes.classifier_dropout, device));
        Self { base: B::new(config, H::POOLED, device), head: H::new(&sizes, sizes.num_labels, device), scalar_mix: scalar_mix(config, device), early_exit }
    }

    fn checkpoint_spec(config: &B::Config) -> CheckpointSpec {
        B::spec(config, true, &["head.", "base.pooler.", "scalar_mix.", "early_exit."])
    }
}

/// The mix a head model of `config` reads (`sesame_scalar_mix`), fresh.
fn scalar_mix<C: crate::pretrained::HfConfig>(config: &C, device: &Device) -> Option<ScalarMix> {
    config.labels().scalar_mix.map(|layers| ScalarMix::new(layers, device))
}

/// `base`'s output on `input`, its last hidden state (and pooled output) replaced by `mix` of
/// every hidden state when there is a mix.
fn mixed<B: Backbone>(base: &B, mix: Option<&ScalarMix>, input: EncoderInput, options: OutputOptions) -> crate::backbone::BackboneOutput {
    let Some(mix) = mix else { return base.forward(input, options) };
    let mut out = base.forward(input, OutputOptions { hidden_states: true, ..options });
    let states = out.encoder.hidden_states.clone().expect("hidden states were asked for");
    let mixed = mix.forward(states);
    out.pooler_output = out.pooler_output.and_then(|_| base.pool(mixed.clone()));
    out.encoder.last_hidden_state = mixed;
    if !options.hidden_states {
        out.encoder.hidden_states = None;
    }
    out
}

/// The base model with a classifier on every token (HF `BertForTokenClassification`; no pooler).
#[derive(Module, Debug)]
pub struct ForTokenClassification<B: Backbone> {
    /// The base model, without pooler.
    pub base: B,
    /// Dropout + `hidden -> num_labels` (HF `classifier`).
    pub head: Classifier,
    /// Sesame's: the head reads this mix of every layer's states instead of the top layer's
    /// (config `sesame_scalar_mix`).
    pub scalar_mix: Option<ScalarMix>,
}

impl<B: Backbone> ForTokenClassification<B> {
    /// Logits `[batch, seq, num_labels]`; loss when `labels` `[batch, seq]` (-100 ignored) are given.
    pub fn forward(&self, input: EncoderInput, labels: Option<Tensor<2, Int>>, options: OutputOptions) -> HeadOutput<3> {
        let out = mixed(&self.base, self.scalar_mix.as_ref(), input, options);
        let logits = self.head.forward(out.last_hidden_state());
        let loss = labels.map(|l| per_token_cross_entropy(logits.clone(), l));
        HeadOutput { logits, loss, encoder: out.encoder }
    }
}

impl<B: Backbone> PretrainedModel for ForTokenClassification<B> {
    type Config = B::Config;

    fn architecture() -> String {
        format!("{}ForTokenClassification", B::CLASS)
    }

    fn init(config: &B::Config, device: &Device) -> Self {
        let sizes = B::classifier_sizes(config);
        let head = classifier(&sizes, sizes.num_labels, device);
        Self { base: B::new(config, false, device), head, scalar_mix: scalar_mix(config, device) }
    }

    fn checkpoint_spec(config: &B::Config) -> CheckpointSpec {
        B::spec(config, true, &["head.", "scalar_mix."])
    }
}

/// What [`ForQuestionAnswering`] returns.
#[derive(Clone, Debug)]
pub struct QuestionAnsweringOutput {
    /// Span-start logits `[batch, seq]`.
    pub start_logits: Tensor<2>,
    /// Span-end logits `[batch, seq]`.
    pub end_logits: Tensor<2>,
    /// Mean of start and end losses, when positions were given.
    pub loss: Option<Tensor<1>>,
    /// Encoder hidden states and attentions (when asked).
    pub encoder: EncoderOutput,
}

/// The base model with an extractive-QA span head (HF `BertForQuestionAnswering`; no pooler).
#[derive(Module, Debug)]
pub struct ForQuestionAnswering<B: Backbone> {
    /// The base model, without pooler.
    pub base: B,
    /// `hidden -> 2` (HF `qa_outputs`).
    pub head: QuestionAnsweringHead,
}

impl<B: Backbone> ForQuestionAnswering<B> {
    /// Start/end logits; the loss when `positions` (start `[batch]`, end `[batch]`) are given.
    pub fn forward(
        &self,
        input: EncoderInput,
        positions: Option<(Tensor<1, Int>, Tensor<1, Int>)>,
        options: OutputOptions,
    ) -> QuestionAnsweringOutput {
        let out = self.base.forward(input, options);
        let (start_logits, end_logits) = self.head.forward(out.last_hidden_state());
        let loss = positions
            .map(|(start, end)| question_answering_loss(start_logits.clone(), end_logits.clone(), start, end));
        QuestionAnsweringOutput { start_logits, end_logits, loss, encoder: out.encoder }
    }
}

impl<B: Backbone> PretrainedModel for ForQuestionAnswering<B> {
    type Config = B::Config;

    fn architecture() -> String {
        format!("{}ForQuestionAnswering", B::CLASS)
    }

    fn init(config: &B::Config, device: &Device) -> Self {
        let hidden = B::classifier_sizes(config).hidden_size;
        Self { base: B::new(config, false, device), head: QuestionAnsweringHeadConfig::new(hidden).init(device) }
    }

    fn checkpoint_spec(config: &B::Config) -> CheckpointSpec {
        B::spec(config, true, &["head."])
    }
}

/// The base model scoring each choice with a one-output [`SequenceHead`] `H`: dropout +
/// linear on the pooled output ([`Classifier`]: BERT, RoBERTa, ALBERT) or on a sequence
/// summary ([`crate::heads::SummaryClassifier`]: ELECTRA) (HF `BertForMultipleChoice`).
#[derive(Module, Debug)]
pub struct ForMultipleChoice<B: Backbone, H: SequenceHead<B>> {
    /// The base model (with a pooler when `H` reads it).
    pub base: B,
    /// `-> 1` score per choice.
    pub head: H,
}

impl<B: Backbone, H: SequenceHead<B>> ForMultipleChoice<B, H> {
    /// `input` holds `[batch * choices, seq]` tensors, choice-major within each example.
    /// Returns logits `[batch, choices]`; the loss when `labels` `[batch]` are given.
    pub fn forward(
        &self,
        input: EncoderInput,
        num_choices: usize,
        labels: Option<Tensor<1, Int>>,
        options: OutputOptions,
    ) -> HeadOutput<2> {
        let rows = input.batch_size();
        let out = self.base.forward(input.clone(), options);
        let scores = self.head.forward(&out, &input);
        let logits = scores.reshape([rows / num_choices, num_choices]);
        let loss = labels.map(|l| cross_entropy(logits.clone(), l));
        HeadOutput { logits, loss, encoder: out.encoder }
    }
}

impl<B: Backbone, H: SequenceHead<B>> PretrainedModel for ForMultipleChoice<B, H> {
    type Config = B::Config;

    fn architecture() -> String {
        format!("{}ForMultipleChoice", B::CLASS)
    }

    fn init(config: &B::Config, device: &Device) -> Self {
        let sizes = B::classifier_sizes(config);
        Self { base: B::new(config, H::POOLED, device), head: H::new(&sizes, 1, device) }
    }

    fn checkpoint_spec(config: &B::Config) -> CheckpointSpec {
        B::spec(config, true, &["head.", "base.pooler."])
    }
}

/// A model of any family as the task pipelines (`sesame_pipelines::classify`, `tag`,
/// `answer`) and the fine-tuning tasks run it: fed an [`EncoderInput`] of padded token ids
/// (the tokenizer's padding side), it gives its [`TaskModel::Output`]:
///
/// | model | `Output` |
/// |---|---|
/// | a sequence classifier (`…ForSequenceClassification`) | [`ClassifierLayers`] |
/// | a token classifier (`…ForTokenClassification`) | [`TokenLogits`] |
/// | an extractive-QA model (`…ForQuestionAnswering`) | [`SpanLogits`] |
/// | a base model (`BertModel`) | [`BackboneOutput`] |
///
/// so a job names the models it runs by their output (`M: TaskModel<Output = TokenLogits>`).
/// Its base model is in the field [`TaskModel::BASE`], reached through [`TaskModel::base`]; a
/// base model is its own base (`Base = Self`, `BASE` empty).
///
/// A head model writes the accessor ([`TaskModel::base`], [`TaskModel::with_base`]) and
/// [`TaskModel::run`]; what distillation and pruning do to it ([`TaskModel::keep_layers`],
/// [`TaskModel::prune_heads`]) is done to its base model.
pub trait TaskModel: PretrainedModel + Send + Sync {
    /// The base model (`BertModel`, `BartModel`; `Self` for a base model).
    type Base: TaskModel<Config = Self::Config>;

    /// What the model gives for an input (see the table above).
    type Output;

    /// The field holding the base model (`base`; XLNet's `transformer`, BART's `model`): what
    /// feature extraction keeps fixed. Empty for a base model.
    const BASE: &'static str;

    /// Whether the head can read a mix of every layer (`sesame_scalar_mix` in the config).
    const SCALAR_MIX: bool = false;

    /// Whether the model can carry FastBERT's exit classifiers (config `sesame_early_exit`):
    /// a sequence classifier whose base model runs a layer at a time ([`Backbone::layer_stack`]).
    const EARLY_EXIT: bool = false;

    /// The base model.
    fn base(&self) -> &Self::Base;

    /// This model with `base` in place of its base model.
    fn with_base(self, base: Self::Base) -> Self;

    /// The model's output for `input`. A sequence classifier and a base model give the hidden
    /// states and attentions `options` asks for, of each stack of layers they run; with
    /// [`OutputOptions::tokens_only`] (the caller reads the logits alone) a head that reads no
    /// padding position runs its layers over the tokens alone, where its layers can.
    fn run(&self, input: EncoderInput, options: OutputOptions) -> Self::Output;

    /// Every layer's logits, the last the model's own (FastBERT's exit classifiers: see
    /// [`ForSequenceClassification::exit_logits`]); `None` for a model without them.
    fn exit_logits(&self, _input: EncoderInput) -> Option<Vec<Tensor<2>>> {
        None
    }

    /// Logits with early exit at `speed` (see [`ForSequenceClassification::classify_early`]);
    /// `None` for a model without exit classifiers.
    fn classify_early(&self, _input: EncoderInput, _speed: f64) -> Option<EarlyExitOutput> {
        None
    }

    /// The model with only the layers `layers` (0-based, increasing, of the config's
    /// `num_layers`; an encoder-decoder: of each stack), `config` saying so ([`Backbone::keep_layers`]): a
    /// student initialised from its teacher's layers. Refused where the layers cannot be picked.
    fn keep_layers(self, config: &mut Self::Config, layers: &[usize]) -> Result<Self, crate::ConfigError> {
        if Self::BASE.is_empty() {
            return Err(crate::ConfigError::Invalid { field: "num_hidden_layers".into(), reason: format!("{}'s layers cannot be picked one by one", Self::architecture()) });
        }
        let base = self.base().clone().keep_layers(config, layers)?;
        Ok(self.with_base(base))
    }

    /// The encoder stack whose attention heads pruning scores and removes
    /// ([`Backbone::encoder`]); `None` where its heads cannot be pruned.
    fn encoder(&self) -> Option<&crate::Encoder> {
        if Self::BASE.is_empty() {
            return None;
        }
        self.base().encoder()
    }

    /// The model without `heads` of its encoder, `config` recording them
    /// ([`Backbone::prune_heads`]). Refused where the heads cannot be pruned.
    fn prune_heads(self, config: &mut Self::Config, heads: &std::collections::BTreeMap<usize, std::collections::BTreeSet<usize>>) -> Result<Self, crate::ConfigError> {
        if Self::BASE.is_empty() {
            return Err(crate::ConfigError::Invalid { field: "pruned_heads".into(), reason: format!("{}'s heads cannot be pruned", Self::architecture()) });
        }
        let base = self.base().clone().prune_heads(config, heads)?;
        Ok(self.with_base(base))
    }
}

/// A base model is itself a task model: a sentence-embedding model, trained whole (its base
/// is the model, so `BASE` names no field and nothing is kept fixed by it).
impl<B: Backbone> TaskModel for B {
    type Base = B;
    type Output = BackboneOutput;
    const BASE: &'static str = "";

    fn base(&self) -> &B {
        self
    }

    fn with_base(self, base: B) -> B {
        base
    }

    fn run(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput {
        Backbone::forward(self, input, options)
    }

    fn keep_layers(self, config: &mut B::Config, layers: &[usize]) -> Result<Self, crate::ConfigError> {
        Backbone::keep_layers(self, config, layers)
    }

    fn encoder(&self) -> Option<&crate::Encoder> {
        Backbone::encoder(self)
    }

    fn prune_heads(self, config: &mut B::Config, heads: &std::collections::BTreeMap<usize, std::collections::BTreeSet<usize>>) -> Result<Self, crate::ConfigError> {
        Backbone::prune_heads(self, config, heads)
    }
}

/// A sequence classifier's output: its logits and what distillation compares of its layers.
#[derive(Clone, Debug)]
pub struct ClassifierLayers {
    /// Logits `[batch, num_labels]`.
    pub logits: Tensor<2>,
    /// The hidden states and attentions asked for, of each stack of layers the classifier runs
    /// over the input's positions: its encoder (an encoder-decoder: the encoder, then the
    /// decoder reading the input shifted right).
    pub stacks: Vec<EncoderOutput>,
}

/// A token classifier's output: logits `[batch, seq, num_labels]`.
pub type TokenLogits = Tensor<3>;

/// An extractive-QA model's output: span-start and span-end logits `[batch, seq]` (the loss
/// of given positions is [`crate::heads::question_answering_loss`] of them).
#[derive(Clone, Debug)]
pub struct SpanLogits {
    /// Span-start logits `[batch, seq]`.
    pub start: Tensor<2>,
    /// Span-end logits `[batch, seq]`.
    pub end: Tensor<2>,
}

impl<B: Backbone, H: SequenceHead<B>> TaskModel for ForSequenceClassification<B, H> {
    type Base = B;
    type Output = ClassifierLayers;
    const BASE: &'static str = "base";
    const SCALAR_MIX: bool = true;
    const EARLY_EXIT: bool = true;

    fn base(&self) -> &B {
        &self.base
    }

    fn with_base(self, base: B) -> Self {
        Self { base, ..self }
    }

    /// Logits of `input`; its layers run over the tokens alone where `options` allows it, the
    /// head reads only the first position ([`SequenceHead::FIRST_TOKEN`]) and that position
    /// is a token in every row.
    fn run(&self, input: EncoderInput, options: OutputOptions) -> ClassifierLayers {
        let tokens_only = options.tokens_only && H::FIRST_TOKEN && input.first_positions_are_tokens();
        let out = self.forward(input, None, OutputOptions { tokens_only, ..options });
        ClassifierLayers { logits: out.logits, stacks: vec![out.encoder] }
    }

    fn exit_logits(&self, input: EncoderInput) -> Option<Vec<Tensor<2>>> {
        ForSequenceClassification::exit_logits(self, input)
    }

    fn classify_early(&self, input: EncoderInput, speed: f64) -> Option<EarlyExitOutput> {
        ForSequenceClassification::classify_early(self, input, speed)
    }

    fn keep_layers(self, config: &mut B::Config, layers: &[usize]) -> Result<Self, crate::ConfigError> {
        if self.early_exit.is_some() || self.scalar_mix.is_some() {
            return Err(crate::ConfigError::Invalid { field: "num_hidden_layers".into(), reason: "a model with exit classifiers or a scalar mix reads every layer".into() });
        }
        Ok(Self { base: Backbone::keep_layers(self.base, config, layers)?, ..self })
    }
}

impl<B: Backbone> TaskModel for ForTokenClassification<B> {
    type Base = B;
    type Output = TokenLogits;
    const BASE: &'static str = "base";
    const SCALAR_MIX: bool = true;

    fn base(&self) -> &B {
        &self.base
    }

    fn with_base(self, base: B) -> Self {
        Self { base, ..self }
    }

    /// Logits of `input`. With [`OutputOptions::tokens_only`] its layers run over the tokens
    /// alone: transformers' logits at every token; at the padding, which nothing reads, the
    /// classifier's of a zero state.
    fn run(&self, input: EncoderInput, options: OutputOptions) -> TokenLogits {
        self.forward(input, None, OutputOptions { tokens_only: options.tokens_only, ..OutputOptions::default() }).logits
    }
}

impl<B: Backbone> TaskModel for ForQuestionAnswering<B> {
    type Base = B;
    type Output = SpanLogits;
    const BASE: &'static str = "base";

    fn base(&self) -> &B {
        &self.base
    }

    fn with_base(self, base: B) -> Self {
        Self { base, ..self }
    }

    fn run(&self, input: EncoderInput, _options: OutputOptions) -> SpanLogits {
        let out = self.forward(input, None, OutputOptions::default());
        SpanLogits { start: out.start_logits, end: out.end_logits }
    }
}
