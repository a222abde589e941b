//! BART's task models: conditional generation (the LM head tied to the shared table, plus
//! `final_logits_bias`), sequence classification on the last EOS token, extractive QA.

use burn::module::Param;
use sesame_layers::{Linear, LinearConfig};
use burn::prelude::*;
use sesame_layers::generative::{LanguageModel, Source};
use sesame_layers::heads::question_answering_loss;
use sesame_layers::loss::per_token_cross_entropy;
use sesame_layers::{
    shift_tokens_right, Activation, CheckpointSpec, ClassifierLayers, DecoderCache, ClassificationHead, EncoderInput, EncoderOutput, InputError, InputLimits, OutputOptions, PretrainedModel,
    QuestionAnsweringHead, QuestionAnsweringHeadConfig, Seq2SeqHeadOutput, Seq2SeqInput, Seq2SeqOutput, Seq2SeqQuestionAnsweringOutput,
    SequenceLabels, SpanLogits, TaskModel,
};
use sesame_layers::HfConfig as _;

use crate::checkpoint::spec;
use crate::config::BartConfig;
use crate::model::{zeros_param, BartDecoder, BartModel};

/// BART with its language-model head (HF `BartForConditionalGeneration`): summarisation,
/// translation, denoising.
#[derive(Module, Debug)]
pub struct BartForConditionalGeneration {
    /// The base model.
    pub model: BartModel,
    /// The LM head when not tied to `model.shared` (`tie_word_embeddings: false`).
    pub lm_head: Option<Linear>,
    /// A bias per token `[1, vocab]` added to the logits (a buffer in HF, zeros unless a
    /// checkpoint sets it; not trained).
    pub final_logits_bias: Param<Tensor<2>>,
}

impl BartForConditionalGeneration {
    /// Logits `[batch, tgt, vocab]`; with `labels` `[batch, tgt]` (-100 = ignored) the
    /// cross-entropy loss, and the decoder input `shift_tokens_right(labels)` when the input
    /// has none.
    pub fn forward(&self, mut input: Seq2SeqInput, labels: Option<Tensor<2, Int>>, options: OutputOptions) -> Seq2SeqHeadOutput<3> {
        if let (Some(labels), None) = (&labels, &input.decoder_input_ids) {
            input.decoder_input_ids = Some(shift_tokens_right(labels.clone(), self.model.pad_token_id, self.model.decoder_start_token_id));
        }
        let model = self.model.forward(input, options);
        let logits = self.lm_logits(model.last_hidden_state.clone());
        let loss = labels.map(|labels| per_token_cross_entropy(logits.clone(), labels));
        Seq2SeqHeadOutput { logits, loss, model }
    }

    /// Logits `[rows, seq, vocab]` of decoder states `[rows, seq, d]`.
    pub fn lm_logits(&self, hidden: Tensor<3>) -> Tensor<3> {
        vocabulary_logits(hidden, self.lm_head.as_ref(), self.model.word_embeddings(), Some(self.final_logits_bias.val()))
    }
}

/// Vocabulary logits `[rows, seq, vocab]` of decoder states `[rows, seq, d]`: the own head
/// when untied, else the token table `[vocab, d]`; plus `bias` `[1, vocab]` when given.
fn vocabulary_logits(hidden: Tensor<3>, lm_head: Option<&Linear>, table: Tensor<2>, bias: Option<Tensor<2>>) -> Tensor<3> {
    let [b, s, d] = hidden.dims();
    let flat = hidden.reshape([b * s, d]);
    let mut logits = match lm_head {
        Some(head) => head.forward(flat),
        None => flat.matmul(table.transpose()),
    };
    if let Some(bias) = bias {
        logits = logits + bias;
    }
    let vocab = logits.dims()[1];
    logits.reshape([b, s, vocab])
}

/// The LM head of a config that unties it from the token table (`tie_word_embeddings: false`).
fn untied_lm_head(config: &BartConfig, device: &Device) -> Option<Linear> {
    (!config.tie_word_embeddings).then(|| LinearConfig::new(config.d_model, config.vocab_size).with_bias(false).init(device))
}

impl PretrainedModel for BartForConditionalGeneration {
    type Config = BartConfig;

    fn architecture() -> String {
        "BartForConditionalGeneration".into()
    }

    fn init(config: &BartConfig, device: &Device) -> Self {
        Self {
            model: BartModel::new(config, device),
            lm_head: untied_lm_head(config, device),
            final_logits_bias: zeros_param([1, config.vocab_size], device),
        }
    }

    fn checkpoint_spec(config: &BartConfig) -> CheckpointSpec {
        // Older checkpoints store the tied head; HF's own files may lack the bias buffer.
        let ignored: &[&str] = if config.tie_word_embeddings { &[r"^lm_head\.weight$"] } else { &[] };
        spec(config, true, &["final_logits_bias"], ignored)
    }
}

impl PretrainedModel for BartModel {
    type Config = BartConfig;

    fn architecture() -> String {
        "BartModel".into()
    }

    fn init(config: &BartConfig, device: &Device) -> Self {
        BartModel::new(config, device)
    }

    fn checkpoint_spec(config: &BartConfig) -> CheckpointSpec {
        // A head model's file holds its heads beside `model.*`: not this model's.
        spec(config, false, &[], &[r"^lm_head\.weight$", r"^final_logits_bias$", r"^classification_head\.", r"^qa_outputs\."])
    }
}

/// BART with a classifier on the decoder's state at the last end-of-sequence token of each
/// row (HF `BartForSequenceClassification`).
#[derive(Module, Debug)]
pub struct BartForSequenceClassification {
    /// The base model.
    pub model: BartModel,
    /// Dense, tanh, `out_proj` (HF `BartClassificationHead`).
    pub classification_head: ClassificationHead,
    /// The end-of-sequence id whose last occurrence is classified.
    #[module(skip)]
    pub eos_token_id: usize,
}

impl BartForSequenceClassification {
    /// Logits `[batch, num_labels]` and the loss of `labels` (whose variant is the problem
    /// type). Every row must hold the same number of EOS tokens, at least one, as in HF: the
    /// decoder reads the source shifted right, and each row is classified at its last EOS.
    pub fn forward(&self, input: Seq2SeqInput, labels: Option<SequenceLabels>, options: OutputOptions) -> Result<Seq2SeqHeadOutput<2>, InputError> {
        let ids = input.input_ids.clone().ok_or(InputError::Missing { what: "input_ids", reason: "the classifier reads each row's last end-of-sequence token" })?;
        let (positions, counts) = last_eos(&ids, self.eos_token_id)?;
        if counts.iter().any(|&c| c == 0 || c != counts[0]) {
            return Err(InputError::EosCount { eos: self.eos_token_id, counts });
        }
        Ok(self.classify_at(input, &positions, labels, options))
    }

    /// [`Self::forward`] reading row `i` at `positions[i]`.
    fn classify_at(&self, input: Seq2SeqInput, positions: &[i64], labels: Option<SequenceLabels>, options: OutputOptions) -> Seq2SeqHeadOutput<2> {
        let model = self.model.forward(input, options);
        let [b, _, d] = model.last_hidden_state.dims();
        let device = model.last_hidden_state.device();
        let index = Tensor::<1, Int>::from_data(TensorData::new(positions.to_vec(), [b]), &device).reshape([b, 1, 1]).expand([b, 1, d]);
        let sentence = model.last_hidden_state.clone().gather(1, index).reshape([b, d]);
        let logits = self.classification_head.classify(sentence);
        let loss = labels.map(|l| l.loss(logits.clone()));
        Seq2SeqHeadOutput { logits, loss, model }
    }
}

/// Each row's last position holding `eos` (its last position when it holds none) `[batch]`,
/// and how many it holds.
fn last_eos(ids: &Tensor<2, Int>, eos: usize) -> Result<(Vec<i64>, Vec<usize>), InputError> {
    let [_, s] = ids.dims();
    let values = ids.try_to_vec_as::<i64>().map_err(|e| InputError::Unreadable { what: "token", reason: e.to_string() })?;
    let rows: Vec<&[i64]> = values.chunks(s.max(1)).collect();
    let counts = rows.iter().map(|r| r.iter().filter(|&&t| t == eos as i64).count()).collect();
    Ok((rows.iter().map(|r| r.iter().rposition(|&t| t == eos as i64).unwrap_or(s.saturating_sub(1)) as i64).collect(), counts))
}

impl PretrainedModel for BartForSequenceClassification {
    type Config = BartConfig;

    fn architecture() -> String {
        "BartForSequenceClassification".into()
    }

    fn init(config: &BartConfig, device: &Device) -> Self {
        Self {
            model: BartModel::new(config, device),
            classification_head: ClassificationHead::with_sizes(config.d_model, config.num_labels(), config.classifier_dropout, Activation::Tanh, device),
            eos_token_id: config.eos_token_id.unwrap_or(2),
        }
    }

    fn checkpoint_spec(config: &BartConfig) -> CheckpointSpec {
        spec(config, true, &["classification_head."], &[r"^lm_head\.weight$", r"^final_logits_bias$"])
    }
}

/// BART with start and end logits on the decoder's states (HF `BartForQuestionAnswering`).
#[derive(Module, Debug)]
pub struct BartForQuestionAnswering {
    /// The base model.
    pub model: BartModel,
    /// `d -> 2` (HF `qa_outputs`).
    pub qa_head: QuestionAnsweringHead,
}

impl BartForQuestionAnswering {
    /// Start and end logits `[batch, tgt]`; with both positions `[batch]`, HF's loss.
    pub fn forward(&self, input: Seq2SeqInput, positions: Option<(Tensor<1, Int>, Tensor<1, Int>)>, options: OutputOptions) -> Seq2SeqQuestionAnsweringOutput {
        let model = self.model.forward(input, options);
        let (start_logits, end_logits) = self.qa_head.forward(model.last_hidden_state.clone());
        let loss = positions.map(|(start, end)| question_answering_loss(start_logits.clone(), end_logits.clone(), start, end));
        Seq2SeqQuestionAnsweringOutput { start_logits, end_logits, loss, model }
    }
}

impl PretrainedModel for BartForQuestionAnswering {
    type Config = BartConfig;

    fn architecture() -> String {
        "BartForQuestionAnswering".into()
    }

    fn init(config: &BartConfig, device: &Device) -> Self {
        Self { model: BartModel::new(config, device), qa_head: QuestionAnsweringHeadConfig::new(config.d_model).init(device) }
    }

    fn checkpoint_spec(config: &BartConfig) -> CheckpointSpec {
        spec(config, true, &["qa_head."], &[r"^lm_head\.weight$", r"^final_logits_bias$"])
    }
}

/// The task models as the pipelines and `finetune` run them, from padded token ids: the
/// encoder reads the text, the decoder the text shifted right (as HF's heads do without
/// `decoder_input_ids`); segment ids are not read.
fn task_input(input: EncoderInput) -> Seq2SeqInput {
    let mut out = Seq2SeqInput::new(input.input_ids);
    out.attention_mask = input.attention_mask;
    out
}

/// BART's base model is its own base: what distillation shrinks (both stacks).
impl TaskModel for BartModel {
    type Base = Self;
    type Output = Seq2SeqOutput;
    const BASE: &'static str = "";

    fn base(&self) -> &Self {
        self
    }

    fn with_base(self, base: Self) -> Self {
        base
    }

    /// The encoder's and the decoder's outputs, the decoder reading the input shifted right.
    fn run(&self, input: EncoderInput, options: OutputOptions) -> Seq2SeqOutput {
        self.forward(task_input(input), OutputOptions { tokens_only: false, ..options })
    }

    fn keep_layers(self, config: &mut BartConfig, layers: &[usize]) -> Result<Self, sesame_layers::ConfigError> {
        BartModel::keep_layers(self, config, layers)
    }
}

impl TaskModel for BartForSequenceClassification {
    type Base = BartModel;
    type Output = ClassifierLayers;
    const BASE: &'static str = "model";

    fn base(&self) -> &BartModel {
        &self.model
    }

    fn with_base(self, model: BartModel) -> Self {
        Self { model, ..self }
    }

    /// Each row at its own last `</s>`. transformers refuses a batch whose rows hold different
    /// numbers of `</s>` (a text that spells one out); where it does not, this is what it reads.
    ///
    /// The stacks are the encoder's and the decoder's (over the input shifted right), each the
    /// embeddings and every layer's output, and self-attention. Its layers run over every
    /// position (`tokens_only` is not for BART's).
    fn run(&self, input: EncoderInput, options: OutputOptions) -> ClassifierLayers {
        // Token ids are checked when the batch is built; a read-back failure leaves the last position.
        let [b, s] = input.input_ids.dims();
        let positions = last_eos(&input.input_ids, self.eos_token_id).map_or_else(|_| vec![s.saturating_sub(1) as i64; b], |(p, _)| p);
        let out = self.classify_at(task_input(input), &positions, None, OutputOptions { tokens_only: false, ..options });
        let m = out.model;
        let encoder = EncoderOutput { last_hidden_state: m.encoder_last_hidden_state, hidden_states: m.encoder_hidden_states, attentions: m.encoder_attentions, cache: None };
        let decoder = EncoderOutput { last_hidden_state: m.last_hidden_state, hidden_states: m.decoder_hidden_states, attentions: m.decoder_attentions, cache: None };
        ClassifierLayers { logits: out.logits, stacks: vec![encoder, decoder] }
    }
}

impl TaskModel for BartForQuestionAnswering {
    type Base = BartModel;
    type Output = SpanLogits;
    const BASE: &'static str = "model";

    fn base(&self) -> &BartModel {
        &self.model
    }

    fn with_base(self, model: BartModel) -> Self {
        Self { model, ..self }
    }

    fn run(&self, input: EncoderInput, _options: OutputOptions) -> SpanLogits {
        let out = self.forward(task_input(input), None, OutputOptions::default());
        SpanLogits { start: out.start_logits, end: out.end_logits }
    }
}

/// Generation: encode once, then decode against the cache (see [`Seq2SeqDecoder`]).
///
/// [`Seq2SeqDecoder`]: sesame_generate::decoding::Seq2SeqDecoder
impl LanguageModel for BartForConditionalGeneration {
    type Source = Source;
    type Cache = DecoderCache;

    fn limits(config: &BartConfig) -> InputLimits {
        config.input_limits()
    }

    fn start(&self, source: Source) -> DecoderCache {
        let encoder = self.model.encoder.forward(&self.model.shared, source.input_ids, source.attention_mask.clone(), OutputOptions::default());
        self.model.decoder.start(encoder.last_hidden_state, source.attention_mask)
    }

    fn decode(&self, ids: Tensor<2, Int>, cache: DecoderCache) -> (Tensor<3>, DecoderCache) {
        let out = self.model.decoder.forward(&self.model.shared, ids, None, cache, OutputOptions::default());
        (self.lm_logits(out.last_hidden_state), out.cache)
    }

    fn logits(&self, source: Source, ids: Tensor<2, Int>) -> Tensor<3> {
        let input = Seq2SeqInput { input_ids: Some(source.input_ids), attention_mask: source.attention_mask, decoder_input_ids: Some(ids), ..Default::default() };
        self.forward(input, None, OutputOptions::default()).logits
    }

    /// Rows `rows` of the decoder's own keys and values; every row of a source (its beams)
    /// reads that source's encoder keys and values, which are never copied per row.
    fn select_cache_rows(&self, mut cache: DecoderCache, rows: &[usize]) -> DecoderCache {
        cache.select_rows(rows, &self.device());
        cache
    }
}

/// BART's decoder alone, as HF wraps it for `BartForCausalLM` (`model.decoder`).
#[derive(Module, Debug)]
pub struct BartDecoderWrapper {
    /// The decoder, with its own token table.
    pub decoder: BartDecoder,
}

/// BART's decoder as a left-to-right language model (HF `BartForCausalLM`): no encoder, the
/// cross-attention blocks skipped, the LM head tied to the decoder's token table.
#[derive(Module, Debug)]
pub struct BartForCausalLM {
    /// The decoder (HF `model.decoder`).
    pub model: BartDecoderWrapper,
    /// The LM head when not tied (`tie_word_embeddings: false`).
    pub lm_head: Option<Linear>,
}

/// What [`BartForCausalLM`] returns (HF `CausalLMOutputWithCrossAttentions`).
#[derive(Clone, Debug)]
pub struct CausalLmOutput {
    /// Next-token logits `[batch, seq, vocab]`.
    pub logits: Tensor<3>,
    /// Cross-entropy of the logits against the labels (as given: not shifted, as HF), when given.
    pub loss: Option<Tensor<1>>,
    /// The decoder's outputs (hidden states and attentions when asked; the cache).
    pub decoder: sesame_layers::DecoderOutput,
}

impl CausalLmOutput {
    /// Every output present, under HF's names (`logits`, `loss`, `hidden_states.0`, `attentions.1`).
    pub fn named(&self) -> Vec<sesame_layers::NamedOutput> {
        let mut out = vec![("logits".to_string(), self.logits.to_data())];
        out.extend(self.loss.iter().map(|l| ("loss".to_string(), l.to_data())));
        sesame_layers::encoder::push_all(&mut out, "hidden_states", &self.decoder.hidden_states);
        sesame_layers::encoder::push_all(&mut out, "attentions", &self.decoder.attentions);
        out
    }
}

impl BartForCausalLM {
    /// Logits of `input_ids` `[batch, seq]` under the padding mask `attention_mask` (causal);
    /// with `labels` `[batch, seq]` (-100 = ignored) the cross-entropy, position for position.
    pub fn forward(&self, input_ids: Tensor<2, Int>, attention_mask: Option<Tensor<2, Int>>, labels: Option<Tensor<2, Int>>, options: OutputOptions) -> CausalLmOutput {
        let (logits, decoder) = self.run(input_ids, attention_mask, DecoderCache::without_encoder(), options);
        let loss = labels.map(|labels| per_token_cross_entropy(logits.clone(), labels));
        CausalLmOutput { logits, loss, decoder }
    }

    /// Logits `[batch, seq, vocab]` of `input_ids` after the positions in `cache`, and the
    /// decoder's outputs (the cache extended).
    fn run(&self, input_ids: Tensor<2, Int>, attention_mask: Option<Tensor<2, Int>>, cache: DecoderCache, options: OutputOptions) -> (Tensor<3>, sesame_layers::DecoderOutput) {
        let decoder = &self.model.decoder;
        let table = decoder.embed_tokens.as_ref().expect("BartForCausalLM's decoder owns its token table");
        let out = decoder.forward(table, input_ids, attention_mask, cache, options);
        (vocabulary_logits(out.last_hidden_state.clone(), self.lm_head.as_ref(), table.weight.val(), None), out)
    }
}

/// BART's decoder generates left to right (`sesame_generate::decoding::CausalDecoder`).
impl LanguageModel for BartForCausalLM {
    type Source = ();
    type Cache = DecoderCache;

    fn limits(config: &BartConfig) -> InputLimits {
        config.input_limits()
    }

    fn start(&self, _source: ()) -> DecoderCache {
        DecoderCache::without_encoder()
    }

    fn decode(&self, ids: Tensor<2, Int>, cache: DecoderCache) -> (Tensor<3>, DecoderCache) {
        let (logits, out) = self.run(ids, None, cache, OutputOptions::default());
        (logits, out.cache)
    }

    fn logits(&self, _source: (), ids: Tensor<2, Int>) -> Tensor<3> {
        self.run(ids, None, DecoderCache::without_encoder(), OutputOptions::default()).0
    }

    fn select_cache_rows(&self, mut cache: DecoderCache, rows: &[usize]) -> DecoderCache {
        cache.select_rows(rows, &self.device());
        cache
    }
}

impl PretrainedModel for BartForCausalLM {
    type Config = BartConfig;

    fn architecture() -> String {
        "BartForCausalLM".into()
    }

    fn init(config: &BartConfig, device: &Device) -> Self {
        let mut decoder = BartModel::new(config, device).decoder;
        decoder.embed_tokens.get_or_insert_with(|| burn::nn::EmbeddingConfig::new(config.vocab_size, config.d_model).init(device));
        Self {
            model: BartDecoderWrapper { decoder },
            lm_head: untied_lm_head(config, device),
        }
    }

    fn checkpoint_spec(config: &BartConfig) -> CheckpointSpec {
        let mut spec = spec(config, true, &[], if config.tie_word_embeddings { &[r"^lm_head\.weight$"] } else { &[] });
        // The decoder owns its table: no alias onto a `shared` it does not have.
        spec.aliases.clear();
        spec.base_roots = vec!["decoder".into()];
        spec
    }
}
