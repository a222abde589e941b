//! Ready-made tasks on text for every family: fill-mask, sentence embeddings, text
//! classification, token classification (entities with their character spans), extractive
//! question answering, and generation ([`generate`]).

pub mod generate;
pub mod generator;
pub mod sentence_transformers;
pub mod served;
pub use generate::{continue_prompts, generate, GeneratedText};

use burn::prelude::*;
use burn::tensor::activation::softmax;
use sesame_text::{EncodedBatch, EncodedText, TokenWindow, Tokenizer, TokenizerError, Words};

use sesame_layers::backbone::{Backbone, EncoderInput};
use sesame_layers::InputLimits;
use sesame_layers::config::{read_json_config, ConfigError};
use sesame_layers::device::default_threads;
use sesame_layers::encoder::OutputOptions;
use sesame_layers::pooling::{l2_normalize, select_layer, Pooling};
use sesame_layers::pretrained::{HfConfig, InputError};
use sesame_layers::tasks::{ClassifierLayers, ForMaskedLM, SpanLogits, TaskModel, TokenLogits};

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
    #[error("the text contains no `{mask}` token: \"{text}\"")]
    NoMask {
        /// The mask token.
        mask: String,
        /// The text (its first 60 characters).
        text: String,
    },
    /// A question or context of `answer` is empty or blank (transformers' QA pipeline refuses
    /// one too): there is nothing to answer, or nothing to answer from.
    #[error("{what} {index} is empty")]
    EmptyText {
        /// `question` or `context`.
        what: &'static str,
        /// Its position in the call's inputs, from 1.
        index: usize,
    },
    /// The requested layer does not exist.
    #[error("layer {layer} does not exist (the model has {layers} layers; use 0..={layers} or -1..=-{count})", count = layers + 1)]
    NoSuchLayer {
        /// Requested index.
        layer: i64,
        /// Number of layers.
        layers: usize,
    },
    /// A result could not be read back from the device.
    #[error("cannot read the {what} back from the device: {reason}")]
    Readback {
        /// What was read.
        what: &'static str,
        /// What the backend reported.
        reason: String,
    },
    /// `--speed` was given for a model without exit classifiers.
    #[error("the model has no exit classifiers (config `sesame_early_exit`): train them with `cargo xtask finetune --early-exit`")]
    NoEarlyExit,
    /// Early exit was asked of a model that is not a single-label classifier.
    #[error("early exit needs a single-label classifier; this one is for {0}")]
    EarlyExitProblem(String),
    /// The backend, or a crate under it, panicked while running a batch.
    #[error("running the model failed: {0}")]
    Panicked(sesame_layers::contain::Panic),
    /// An input of `generate` has more tokens than the model has positions.
    #[error("input {index}: {tokens} tokens exceed the model's {max_len} positions (shorten it)")]
    TooLong {
        /// Its position in the call's inputs, from 1.
        index: usize,
        /// Its tokens.
        tokens: usize,
        /// The model's positions.
        max_len: usize,
    },
    /// A generation setting transformers refuses.
    #[error(transparent)]
    Settings(sesame_generate::ProcessorError),
    /// The generation settings name no decoder start for an encoder-decoder.
    #[error("no decoder start: neither decoder_start_token_id nor bos_token_id is set")]
    NoDecoderStart,
    /// The model refused a batch of `generate`'s inputs.
    #[error("inputs {first}..={last}: {reason}")]
    Generation {
        /// The batch's first input, from 1.
        first: usize,
        /// Its last.
        last: usize,
        /// What the model said.
        reason: InputError,
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

fn readback(what: &'static str) -> impl Fn(burn::tensor::TensorReadError) -> PipelineError {
    move |e| PipelineError::Readback { what, reason: e.to_string() }
}

fn to_input(batch: &EncodedBatch, limits: &InputLimits, device: &Device) -> Result<EncoderInput, InputError> {
    let (ids, mask, types) = batch.tensors(device);
    let input = EncoderInput::new(ids).with_attention_mask(mask).with_token_type_ids(types);
    input.validate(limits)?;
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
    Ok(fill_masks(model, config, tokenizer, &[text], top_k, 1)?.remove(0))
}

/// [`fill_mask`] for many texts, run `batch_size` at a time in batches of similar length;
/// the results in the order of `texts`. The vocabulary projection runs on the mask tokens only.
pub fn fill_masks<B: Backbone>(
    model: &ForMaskedLM<B>,
    config: &B::Config,
    tokenizer: &Tokenizer,
    texts: &[&str],
    top_k: usize,
    batch_size: usize,
) -> Result<Vec<Vec<Vec<Prediction>>>, PipelineError> {
    let encoded = tokenizer.encode_each(texts, config.input_limits().max_len, false)?;
    fill_masks_encoded(model, config, tokenizer, texts, &encoded, top_k, batch_size)
}

/// [`fill_masks`] of texts already encoded: `encoded[i]` is `texts[i]` with its special
/// tokens, not truncated (`texts` name a text without a mask in the error).
pub fn fill_masks_encoded<B: Backbone>(
    model: &ForMaskedLM<B>,
    config: &B::Config,
    tokenizer: &Tokenizer,
    texts: &[&str],
    encoded: &[EncodedText],
    top_k: usize,
    batch_size: usize,
) -> Result<Vec<Vec<Vec<Prediction>>>, PipelineError> {
    let mask_id = tokenizer.mask_token_id()? as i64;
    let device = model.base.device();
    let limits = config.input_limits();
    check_lengths(encoded, limits.max_len)?;
    by_length(encoded, batch_size, &device, |rows| {
        let batch = tokenizer.pad(&rows.iter().map(|&i| &encoded[i]).collect::<Vec<_>>())?;
        let mut masks = Vec::new();
        for (row, text) in rows.iter().map(|&i| texts[i]).enumerate() {
            let positions: Vec<usize> = batch.ids(row).iter().enumerate().filter(|(_, &id)| id == mask_id).map(|(i, _)| i).collect();
            if positions.is_empty() {
                let mask = tokenizer.special_tokens().mask.as_ref().map(|m| m.0.clone()).unwrap_or_default();
                return Err(PipelineError::NoMask { mask, text: text.chars().take(60).collect() });
            }
            masks.push(positions.iter().map(|p| row * batch.seq + p).collect::<Vec<_>>());
        }
        let out = model.base.forward(to_input(&batch, &limits, &device)?, OutputOptions::default());
        let flat: Vec<i64> = masks.iter().flatten().map(|&p| p as i64).collect();
        let n = flat.len();
        let positions = Tensor::<1, Int>::from_data(TensorData::new(flat, [n]), &device);
        let [b, s, d] = out.last_hidden_state().dims();
        let hidden = out.last_hidden_state().reshape([b * s, d]).select(0, positions);
        let logits = model.lm_head.forward(hidden, model.base.word_embeddings());
        let [_, vocab] = logits.dims();
        let (scores, ids) = softmax(logits, 1).topk_with_indices(top_k.clamp(1, vocab), 1);
        let k = top_k.clamp(1, vocab);
        let scores: Vec<f32> = scores.try_to_vec_as::<f32>().map_err(readback("scores"))?;
        let ids: Vec<i64> = ids.try_to_vec_as::<i64>().map_err(readback("token ids"))?;
        let mut candidates = ids.chunks(k).zip(scores.chunks(k)).map(|(ids, scores)| {
            ids.iter()
                .zip(scores)
                .map(|(&id, &score)| Prediction { token: tokenizer.id_to_token(id as u32).unwrap_or_default(), id: id as u32, score })
                .collect::<Vec<_>>()
        });
        Ok(masks.iter().map(|m| candidates.by_ref().take(m.len()).collect()).collect())
    })
}

/// `run` on the encoded texts in [`length_batches`] of at most `batch_size`, each given the
/// indices of its texts; the results put back in the order of `encoded`. The batches run on
/// [`default_threads`] threads (one per core on flex and ndarray, whose small products use one
/// core each), one batch per thread at a time; each batch's result is the same whichever
/// thread computes it.
fn by_length<T: Send>(
    encoded: &[EncodedText],
    batch_size: usize,
    device: &Device,
    run: impl Fn(&[usize]) -> Result<Vec<T>, PipelineError> + Sync,
) -> Result<Vec<T>, PipelineError> {
    if encoded.is_empty() {
        return Err(TokenizerError::EmptyBatch.into());
    }
    let lengths: Vec<usize> = encoded.iter().map(EncodedText::len).collect();
    let chunks = length_batches(&lengths, batch_size);
    let threads = default_threads(device).min(chunks.len());
    // A panic in a batch (a crate under the tokenizer or the backend) is that batch's error.
    let run = |chunk: &[usize]| sesame_layers::contain::catch(|| run(chunk)).unwrap_or_else(|panic| Err(PipelineError::Panicked(panic)));
    let outputs: Vec<Result<Vec<T>, PipelineError>> = if threads <= 1 {
        chunks.iter().map(|chunk| run(chunk)).collect()
    } else {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let slots: Vec<std::sync::Mutex<Option<Result<Vec<T>, PipelineError>>>> = chunks.iter().map(|_| Default::default()).collect();
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    sesame_layers::device::on_one_thread(|| loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(chunk) = chunks.get(i) else { break };
                        let out = run(chunk);
                        let failed = out.is_err();
                        *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(out);
                        if failed {
                            next.store(chunks.len(), std::sync::atomic::Ordering::Relaxed);
                        }
                    })
                });
            }
        });
        slots.into_iter().filter_map(|slot| slot.into_inner().unwrap_or_else(|p| p.into_inner())).collect()
    };
    let mut results: Vec<Option<T>> = (0..encoded.len()).map(|_| None).collect();
    for (chunk, output) in chunks.iter().zip(outputs) {
        for (&i, result) in chunk.iter().zip(output?) {
            results[i] = Some(result);
        }
    }
    Ok(results.into_iter().map(|r| r.expect("every text is in one batch")).collect())
}

/// What one more batch costs in [`length_batches`], in padded tokens: the per-pass work that
/// does not scale with tokens (op dispatch, weight packing, smaller products). Embedding 256
/// sentences of the shipped corpus with all-MiniLM-L6-v2 on 2 cores, 16–128 ran within 3% of
/// each other on flex and on libtorch; 0 (a batch per length) was 10% slower on flex.
const BATCH_COST_TOKENS: usize = 64;

/// Indices of texts with token counts `lengths`, grouped into batches of at most `batch_size`
/// that pad little: longest first, then cut where the fewest padded tokens plus
/// [`BATCH_COST_TOKENS`] per batch result (an exact dynamic programme over the sorted order).
/// On 256 sentences of the shipped corpus, batches of 32 sorted by characters (as
/// sentence-transformers runs them) pad 48% more tokens than the texts have; these pad 7%.
pub fn length_batches(lengths: &[usize], batch_size: usize) -> Vec<Vec<usize>> {
    let batch_size = batch_size.max(1);
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    let n = order.len();
    // cost[j]: the least cost of batching order[..j]; start[j]: where its last batch starts.
    let mut cost = vec![usize::MAX; n + 1];
    let mut start = vec![0; n + 1];
    cost[0] = 0;
    for j in 1..=n {
        for i in j.saturating_sub(batch_size)..j {
            // order[i] is the longest of order[i..j]: the batch pads to it.
            let c = cost[i] + lengths[order[i]] * (j - i) + BATCH_COST_TOKENS;
            if c < cost[j] {
                cost[j] = c;
                start[j] = i;
            }
        }
    }
    let mut batches = Vec::new();
    let mut j = n;
    while j > 0 {
        batches.push(order[start[j]..j].to_vec());
        j = start[j];
    }
    batches.reverse();
    batches
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
    /// At most this many texts per forward pass (batches of similar length;
    /// sentence-transformers' default 32).
    pub batch_size: usize,
    /// Truncate each text to this many tokens, special tokens included (sentence-transformers'
    /// `max_seq_length`, see [`sentence_transformers_max_seq_length`]); `None`, or more than
    /// the model takes: the model's limit.
    pub max_tokens: Option<usize>,
}

impl Default for EmbedOptions {
    /// Mean pooling of the last layer, not normalised, 32 texts a batch (sentence-transformers'
    /// BERT default).
    fn default() -> Self {
        Self { pooling: Pooling::Mean, layer: -1, normalize: false, batch_size: 32, max_tokens: None }
    }
}

/// sentence-transformers' `max_seq_length` from `sentence_bert_config.json` in the model
/// directory `dir`: the token count its `encode` truncates texts to (256 for
/// all-MiniLM-L6-v2, whose model takes 512). `None` when the file or the field is absent.
pub fn sentence_transformers_max_seq_length(dir: &std::path::Path) -> Result<Option<usize>, ConfigError> {
    #[derive(serde::Deserialize)]
    struct SentenceTransformersConfig {
        max_seq_length: Option<usize>,
    }
    let path = dir.join("sentence_bert_config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let config: SentenceTransformersConfig = read_json_config(&path)?;
    if config.max_seq_length == Some(0) {
        return Err(ConfigError::Parse { path, reason: "field `max_seq_length` must be at least 1".into() });
    }
    Ok(config.max_seq_length)
}

/// One embedding `[hidden]` per text, in the order of `texts`, computed `options.batch_size`
/// texts at a time in batches of similar length. Texts longer than `options.max_tokens` or
/// than the model takes are truncated, as sentence-transformers does.
pub fn embed<B: Backbone>(
    model: &B,
    config: &B::Config,
    tokenizer: &Tokenizer,
    texts: &[&str],
    options: EmbedOptions,
) -> Result<Vec<Vec<f32>>, PipelineError> {
    let encoded = tokenizer.encode_each(texts, embed_max_len(config, options), true)?;
    embed_encoded(model, config, tokenizer, &encoded, options)
}

/// The most tokens [`embed`] reads of a text: `options.max_tokens`, at most the model's length.
pub fn embed_max_len<C: HfConfig>(config: &C, options: EmbedOptions) -> usize {
    let max_len = config.input_limits().max_len;
    options.max_tokens.map_or(max_len, |n| n.clamp(1, max_len))
}

/// [`embed`] of texts already encoded by `tokenizer` (special tokens included, as
/// [`Tokenizer::encode_each`] gives them): nothing is tokenized again. An encoding longer than
/// [`embed_max_len`] is refused, naming its index.
pub fn embed_encoded<B: Backbone>(
    model: &B,
    config: &B::Config,
    tokenizer: &Tokenizer,
    encoded: &[EncodedText],
    options: EmbedOptions,
) -> Result<Vec<Vec<f32>>, PipelineError> {
    check_lengths(encoded, embed_max_len(config, options))?;
    let device = model.device();
    let limits = config.input_limits();
    by_length(encoded, options.batch_size, &device, |rows| {
        let batch = tokenizer.pad(&rows.iter().map(|&i| &encoded[i]).collect::<Vec<_>>())?;
        let input = to_input(&batch, &limits, &device)?;
        let mask = input.attention_mask.clone().expect("encoded batches carry a mask");
        let tokens_only = options.pooling.reads_tokens_only(tokenizer.pads_left());
        let outputs = OutputOptions { hidden_states: options.layer != -1, attentions: false, tokens_only };
        let out = model.forward(input, outputs);
        let states = select_layer(&out.encoder, options.layer).ok_or(PipelineError::NoSuchLayer {
            layer: options.layer,
            layers: out.encoder.hidden_states.as_ref().map_or(0, |h| h.len() - 1),
        })?;
        let mut pooled = options.pooling.pool(states, mask);
        if options.normalize {
            pooled = l2_normalize(pooled);
        }
        let [b, d] = pooled.dims();
        let flat: Vec<f32> = pooled.try_to_vec_as::<f32>().map_err(readback("embeddings"))?;
        Ok((0..b).map(|i| flat[i * d..(i + 1) * d].to_vec()).collect())
    })
}

/// Refuse an encoding longer than `max_len` tokens, naming its index.
fn check_lengths(encoded: &[EncodedText], max_len: usize) -> Result<(), PipelineError> {
    match encoded.iter().position(|e| e.len() > max_len) {
        Some(index) => Err(TokenizerError::TooLong { index, len: encoded[index].len(), max: max_len }.into()),
        None => Ok(()),
    }
}

/// One label and its score.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LabelScore {
    /// The label's name (`id2label`).
    pub label: String,
    /// Softmax probability (single-label), sigmoid (multi-label).
    pub score: f32,
}

/// `embedding` cut to its first `dimensions` (a Matryoshka model's shorter embedding), then
/// made unit length if `normalize`.
pub fn truncated(mut embedding: Vec<f32>, dimensions: Option<usize>, normalize: bool) -> Vec<f32> {
    if let Some(d) = dimensions {
        embedding.truncate(d);
    }
    if normalize {
        let norm = embedding.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        embedding.iter_mut().for_each(|x| *x /= norm);
    }
    embedding
}

/// What [`classify`] says of one text, by the checkpoint's `problem_type`, as transformers'
/// text-classification pipeline scores it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Classification {
    /// Single-label: the most likely label, its probability, and every label's (softmax).
    Single {
        /// The most likely label.
        label: String,
        /// Its probability.
        score: f32,
        /// Every label's probability, most likely first.
        scores: Vec<LabelScore>,
    },
    /// Multi-label: the labels whose sigmoid exceeds 0.5, and every label's.
    Multi {
        /// The labels predicted.
        labels: Vec<String>,
        /// Every label's sigmoid, most likely first.
        scores: Vec<LabelScore>,
    },
    /// Regression: the model's number.
    Value {
        /// The predicted value.
        value: f32,
    },
}

/// Classify `texts` with a fine-tuned sequence classifier, `batch_size` texts at a time in
/// batches of similar length, each truncated to the model's length; results in input order.
pub fn classify<M: TaskModel<Output = ClassifierLayers>>(model: &M, config: &M::Config, tokenizer: &Tokenizer, texts: &[&str], batch_size: usize) -> Result<Vec<Classification>, PipelineError> {
    let encoded = tokenizer.encode_each(texts, config.input_limits().max_len, true)?;
    classify_encoded(model, config, tokenizer, &encoded, batch_size)
}

/// Classify sentence pairs (`[CLS] a [SEP] b [SEP]`: premise and hypothesis, query and
/// passage) as [`classify`] classifies texts, each pair truncated to the model's length.
pub fn classify_pairs<M: TaskModel<Output = ClassifierLayers>>(model: &M, config: &M::Config, tokenizer: &Tokenizer, pairs: &[(&str, &str)], batch_size: usize) -> Result<Vec<Classification>, PipelineError> {
    let encoded = tokenizer.encode_pairs_each(pairs, config.input_limits().max_len, true)?;
    classify_encoded(model, config, tokenizer, &encoded, batch_size)
}

/// [`classify`] (or [`classify_pairs`]) of texts already encoded by `tokenizer`: nothing is
/// tokenized again. An encoding longer than the model's length is refused, naming its index.
pub fn classify_encoded<M: TaskModel<Output = ClassifierLayers>>(model: &M, config: &M::Config, tokenizer: &Tokenizer, encoded: &[EncodedText], batch_size: usize) -> Result<Vec<Classification>, PipelineError> {
    let device = model.device();
    let limits = config.input_limits();
    check_lengths(encoded, limits.max_len)?;
    let labels = config.labels();
    by_length(encoded, batch_size, &device, |rows| {
        let batch = tokenizer.pad(&rows.iter().map(|&i| &encoded[i]).collect::<Vec<_>>())?;
        let input = to_input(&batch, &limits, &device)?;
        classifications(labels, model.run(input, OutputOptions::logits_only()).logits)
    })
}

/// A classification by a model with early exit, and the layer its row stopped at.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EarlyClassification {
    /// The label and scores.
    #[serde(flatten)]
    pub classification: Classification,
    /// The layer (1-based) whose classifier gave it; the model's last layer is its own head.
    pub exit_layer: usize,
}

/// [`classify`] with FastBERT's early exit at `speed` (the normalised-entropy threshold, in
/// [0, 1]; 0: every row runs every layer), each row stopping independently
/// ([`sesame_layers::ForSequenceClassification::classify_early`]). Single-label classifiers with exit
/// classifiers only.
pub fn classify_early<M: TaskModel<Output = ClassifierLayers>>(model: &M, config: &M::Config, tokenizer: &Tokenizer, texts: &[&str], batch_size: usize, speed: f64) -> Result<Vec<EarlyClassification>, PipelineError> {
    let labels = config.labels();
    if labels.early_exit.is_none() {
        return Err(PipelineError::NoEarlyExit);
    }
    match labels.problem_type.as_deref() {
        Some(kind @ ("regression" | "multi_label_classification")) => return Err(PipelineError::EarlyExitProblem(kind.into())),
        _ => {}
    }
    let device = model.device();
    let limits = config.input_limits();
    let encoded = tokenizer.encode_each(texts, limits.max_len, true)?;
    by_length(&encoded, batch_size, &device, |rows| {
        let batch = tokenizer.pad(&rows.iter().map(|&i| &encoded[i]).collect::<Vec<_>>())?;
        let input = to_input(&batch, &limits, &device)?;
        let out = model.classify_early(input, speed).ok_or(PipelineError::NoEarlyExit)?;
        let found = classifications(labels, out.logits)?;
        Ok(found.into_iter().zip(out.exit_layers).map(|(classification, exit_layer)| EarlyClassification { classification, exit_layer }).collect())
    })
}

/// One [`Classification`] per row of `logits` `[batch, num_labels]`, by the problem type of
/// `labels`.
fn classifications(labels: &sesame_layers::hparams::LabelConfig, logits: Tensor<2>) -> Result<Vec<Classification>, PipelineError> {
    let problem = labels.problem_type.as_deref().unwrap_or("single_label_classification");
    let [_, n] = logits.dims();
    let ranked = |values: &[f32]| {
        let mut all: Vec<LabelScore> = values.iter().enumerate().map(|(i, &score)| LabelScore { label: labels.name(i), score }).collect();
        all.sort_by(|a, b| b.score.total_cmp(&a.score));
        all
    };
    Ok(match problem {
        "regression" => logits.try_to_vec_as::<f32>().map_err(readback("logits"))?.chunks(n).map(|r| Classification::Value { value: r[0] }).collect(),
        "multi_label_classification" => {
            let probs = burn::tensor::activation::sigmoid(logits).try_to_vec_as::<f32>().map_err(readback("logits"))?;
            probs
                .chunks(n)
                .map(|r| {
                    let scores = ranked(r);
                    Classification::Multi { labels: scores.iter().filter(|s| s.score > 0.5).map(|s| s.label.clone()).collect(), scores }
                })
                .collect()
        }
        _ => {
            // One logit is scored with a sigmoid, as transformers' pipeline scores a model with
            // one label and no regression problem type (a cross-encoder's relevance).
            let probs = match n {
                1 => burn::tensor::activation::sigmoid(logits),
                _ => softmax(logits, 1),
            };
            let probs = probs.try_to_vec_as::<f32>().map_err(readback("logits"))?;
            probs
                .chunks(n)
                .map(|r| {
                    let scores = ranked(r);
                    Classification::Single { label: scores[0].label.clone(), score: scores[0].score, scores }
                })
                .collect()
        }
    })
}

/// One entity (or run of words with one tag) found by [`tag`], as transformers'
/// token-classification pipeline gives it with `aggregation_strategy="first"`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TaggedSpan {
    /// The tag without its `B-`/`I-` prefix (`PER`).
    pub entity_group: String,
    /// The mean over its words of each word's probability of its tag (at its first token).
    pub score: f32,
    /// The text of the span.
    pub word: String,
    /// First character (in Unicode scalar values, as Python indexes a `str`).
    pub start: usize,
    /// One past the last character.
    pub end: usize,
}

/// Tag the words of `texts` with a fine-tuned token classifier and group them into entities,
/// as transformers' `pipeline("token-classification", aggregation_strategy="first")`: each
/// word takes the tag its first token scores highest (with that probability), consecutive words
/// of one type join unless a `B-` starts a new one (a tag without a prefix continues), and runs
/// tagged `O` are left out. Texts longer than the model reads are windowed with `stride` tokens
/// of overlap, each word read from the window where it has the most context. Results in input
/// order; `batch_size` windows run at a time, batched by length.
pub fn tag<M: TaskModel<Output = TokenLogits>>(model: &M, config: &M::Config, tokenizer: &Tokenizer, texts: &[&str], batch_size: usize, stride: usize) -> Result<Vec<Vec<TaggedSpan>>, PipelineError> {
    let max_len = config.input_limits().max_len;
    let windows: Vec<Vec<TokenWindow>> = texts.iter().map(|t| tokenizer.encode_windows(Words::Text(t), max_len, stride)).collect::<Result<_, _>>()?;
    tag_windows(model, config, tokenizer, texts, &windows, batch_size)
}

/// [`tag`] of texts already windowed: `windows[i]` are `texts[i]`'s
/// ([`Tokenizer::encode_windows`] at the model's length).
pub fn tag_windows<M: TaskModel<Output = TokenLogits>>(model: &M, config: &M::Config, tokenizer: &Tokenizer, texts: &[&str], windows: &[Vec<TokenWindow>], batch_size: usize) -> Result<Vec<Vec<TaggedSpan>>, PipelineError> {
    let device = model.device();
    let limits = config.input_limits();
    let labels = config.labels();
    let name = |i: usize| labels.name(i);
    // Each window's per-token probabilities.
    let probs = token_scores(windows, tokenizer, &limits, batch_size, &device, |input| softmax(model.run(input, OutputOptions::logits_only()), 2))?;
    let mut next = 0;
    let mut out = Vec::with_capacity(texts.len());
    for (text, windows) in texts.iter().zip(windows) {
        let probs = &probs[next..next + windows.len()];
        next += windows.len();
        // Each word: its span, and (context, probabilities) at its first token's best window.
        let words = windows.iter().flat_map(|w| w.word_ids.iter().flatten()).max().map_or(0, |&m| m + 1);
        let mut span: Vec<Option<(usize, usize)>> = vec![None; words];
        let mut first: Vec<Option<(f32, &[f32])>> = vec![None; words];
        for (w, p) in windows.iter().zip(probs) {
            for (j, word) in w.word_ids.iter().enumerate() {
                let Some(word) = *word else { continue };
                let (a, b) = w.offsets[j];
                span[word] = Some(span[word].map_or((a, b), |(s, e)| (s.min(a), e.max(b))));
                if w.word_start[j] && first[word].is_none_or(|(c, _)| w.context[j] > c) {
                    first[word] = Some((w.context[j], &p[j]));
                }
            }
        }
        let tagged: Vec<(String, f32, (usize, usize))> = first
            .iter()
            .zip(&span)
            .filter_map(|(f, s)| {
                let ((_, p), s) = (f.as_ref()?, s.as_ref()?);
                let (best, score) = p.iter().enumerate().fold((0, f32::NEG_INFINITY), |a, (i, &v)| if v > a.1 { (i, v) } else { a });
                Some((name(best), score, *s))
            })
            .collect();
        out.push(group_entities(text, &tagged));
    }
    Ok(out)
}

/// `B` or `I`, and the type, of a tag (transformers' `get_tag`: a tag without a `B-`/`I-`
/// prefix continues a run of its own type).
fn split_tag(tag: &str) -> (char, &str) {
    match tag.split_at_checked(2) {
        Some(("B-", kind)) => ('B', kind),
        Some(("I-", kind)) => ('I', kind),
        _ => ('I', tag),
    }
}

/// Words `(tag, score, character span)` of `text` grouped as transformers' `group_entities`,
/// groups of type `O` left out.
fn group_entities(text: &str, words: &[(String, f32, (usize, usize))]) -> Vec<TaggedSpan> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let byte = |c: usize| chars.get(c).map_or(text.len(), |&(b, _)| b);
    let mut groups: Vec<Vec<&(String, f32, (usize, usize))>> = Vec::new();
    for word in words {
        let (bi, kind) = split_tag(&word.0);
        match groups.last_mut() {
            Some(group) if bi != 'B' && split_tag(&group[group.len() - 1].0).1 == kind => group.push(word),
            _ => groups.push(vec![word]),
        }
    }
    groups
        .into_iter()
        .filter_map(|group| {
            let kind = group[0].0.split_once('-').map_or(group[0].0.as_str(), |(_, k)| k).to_string();
            if kind == "O" {
                return None;
            }
            let (start, end) = (group[0].2 .0, group[group.len() - 1].2 .1);
            let score = group.iter().map(|w| w.1).sum::<f32>() / group.len() as f32;
            Some(TaggedSpan { entity_group: kind, score, word: text[byte(start)..byte(end)].to_string(), start, end })
        })
        .collect()
}

/// An answer found in a context by [`answer`] or [`best_answer`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Answer {
    /// The answer's text (empty: no answer, when allowed).
    pub answer: String,
    /// Its probability among the n best candidates (a softmax over their scores).
    pub score: f32,
    /// First character in the context (Unicode scalar values, as Python indexes a `str`).
    pub start: usize,
    /// One past the last character.
    pub end: usize,
}

/// How [`best_answer`] picks a span, as transformers' `run_qa.py` post-processing
/// (`utils_qa.postprocess_qa_predictions`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AnswerOptions {
    /// Start and end candidates per window (`n_best_size`, 20).
    pub n_best: usize,
    /// Longest answer in tokens (`max_answer_length`, 30).
    pub max_answer_len: usize,
    /// Whether "no answer" may win (SQuAD 2.0, `version_2_with_negative`).
    pub allow_no_answer: bool,
    /// How much the no-answer score must exceed the best span's to win
    /// (`null_score_diff_threshold`, 0).
    pub null_threshold: f32,
}

impl Default for AnswerOptions {
    fn default() -> Self {
        Self { n_best: 20, max_answer_len: 30, allow_no_answer: false, null_threshold: 0.0 }
    }
}

/// One window of a question and its context, with the model's span logits.
#[derive(Clone, Copy, Debug)]
pub struct ScoredWindow<'a> {
    /// The window's tokens (the context's marked by a positive `context`).
    pub window: &'a TokenWindow,
    /// Span-start logits, one per token.
    pub start_logits: &'a [f32],
    /// Span-end logits, one per token.
    pub end_logits: &'a [f32],
}

/// The best answer to one question from its windows, as `run_qa.py` picks it: the n best starts
/// and ends of every window, paired into spans of the context no longer than the maximum, scored
/// by the sum of their logits; "no answer" (the classification token's sum, the least over the
/// windows) wins when allowed and ahead of the best span by more than the threshold. The score
/// is the softmax probability among the n best candidates.
pub fn best_answer(context: &str, windows: &[ScoredWindow], options: &AnswerOptions) -> Answer {
    let top = |logits: &[f32]| {
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(b.cmp(&a)));
        order.truncate(options.n_best);
        order
    };
    // (score, start char, end char, start + end logit); the null candidate has no span.
    let mut candidates: Vec<(f32, Option<(usize, usize)>)> = Vec::new();
    let mut null: Option<f32> = None;
    for w in windows {
        let (starts, ends) = (w.start_logits, w.end_logits);
        // The classification token's logits score "no answer".
        let cls = w.window.cls;
        let null_score = starts.get(cls).copied().unwrap_or(0.0) + ends.get(cls).copied().unwrap_or(0.0);
        if null.is_none_or(|n| n > null_score) {
            null = Some(null_score);
        }
        let content = |j: usize| w.window.context.get(j).is_some_and(|&c| c > 0.0);
        for &i in &top(starts) {
            for &j in &top(ends) {
                if !content(i) || !content(j) || j < i || j - i + 1 > options.max_answer_len {
                    continue;
                }
                candidates.push((starts[i] + ends[j], Some((w.window.offsets[i].0, w.window.offsets[j].1))));
            }
        }
    }
    if options.allow_no_answer {
        candidates.extend(null.map(|n| (n, None)));
    }
    candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
    candidates.truncate(options.n_best);
    if options.allow_no_answer && !candidates.iter().any(|c| c.1.is_none()) {
        candidates.extend(null.map(|n| (n, None)));
    }
    let max = candidates.iter().map(|c| c.0).fold(f32::NEG_INFINITY, f32::max);
    let total: f32 = candidates.iter().map(|c| (c.0 - max).exp()).sum();
    let probability = |score: f32| (score - max).exp() / total;
    let chars: Vec<(usize, char)> = context.char_indices().collect();
    let byte = |c: usize| chars.get(c).map_or(context.len(), |&(b, _)| b);
    let span_answer = |(score, (s, e)): (f32, (usize, usize))| Answer { answer: context[byte(s)..byte(e)].to_string(), score: probability(score), start: s, end: e };
    let best_span = candidates.iter().find_map(|&(score, span)| span.filter(|(s, e)| e > s).map(|span| (score, span)));
    match (best_span, null) {
        (Some((score, span)), Some(n)) if options.allow_no_answer && n - score <= options.null_threshold => span_answer((score, span)),
        (_, Some(n)) if options.allow_no_answer => Answer { answer: String::new(), score: probability(n), start: 0, end: 0 },
        (Some(best), _) => span_answer(best),
        (None, _) => Answer { answer: String::new(), score: 0.0, start: 0, end: 0 },
    }
}

/// Answer each question in `questions` from its `contexts` with a fine-tuned extractive-QA
/// model: the context in windows of the model's length overlapping by `stride` tokens, the
/// answer picked by [`best_answer`]. Results in input order; `batch_size` windows at a time.
pub fn answer<M: TaskModel<Output = SpanLogits>>(
    model: &M,
    config: &M::Config,
    tokenizer: &Tokenizer,
    questions: &[(&str, &str)],
    batch_size: usize,
    stride: usize,
    options: &AnswerOptions,
) -> Result<Vec<Answer>, PipelineError> {
    check_questions(questions)?;
    let max_len = config.input_limits().max_len;
    let windows: Vec<Vec<TokenWindow>> = questions.iter().map(|(q, c)| tokenizer.encode_question_windows(q, c, max_len, stride)).collect::<Result<_, _>>()?;
    answer_windows(model, config, tokenizer, questions, &windows, batch_size, options)
}

/// Refuses an empty question or context, naming it and its place (1-based).
pub fn check_questions(questions: &[(&str, &str)]) -> Result<(), PipelineError> {
    for (i, (question, context)) in questions.iter().enumerate() {
        for (what, text) in [("question", question), ("context", context)] {
            if text.trim().is_empty() {
                return Err(PipelineError::EmptyText { what, index: i + 1 });
            }
        }
    }
    Ok(())
}

/// [`answer`] of questions already windowed: `windows[i]` are `questions[i]`'s
/// ([`Tokenizer::encode_question_windows`] at the model's length).
pub fn answer_windows<M: TaskModel<Output = SpanLogits>>(
    model: &M,
    config: &M::Config,
    tokenizer: &Tokenizer,
    questions: &[(&str, &str)],
    windows: &[Vec<TokenWindow>],
    batch_size: usize,
    options: &AnswerOptions,
) -> Result<Vec<Answer>, PipelineError> {
    check_questions(questions)?;
    let device = model.device();
    let limits = config.input_limits();
    let scores = token_scores(windows, tokenizer, &limits, batch_size, &device, |input| {
        let spans = model.run(input, OutputOptions::default());
        Tensor::stack(vec![spans.start, spans.end], 2)
    })?;
    let logits: Vec<(Vec<f32>, Vec<f32>)> = scores.iter().map(|tokens| tokens.iter().map(|t| (t[0], t[1])).unzip()).collect();
    let mut next = 0;
    Ok(questions
        .iter()
        .zip(windows)
        .map(|((_, context), ws)| {
            let scored: Vec<ScoredWindow> = ws.iter().zip(&logits[next..next + ws.len()]).map(|(w, (s, e))| ScoredWindow { window: w, start_logits: s, end_logits: e }).collect();
            next += ws.len();
            best_answer(context, &scored, options)
        })
        .collect())
}

/// The scores `forward` gives (`[batch, seq, n]` for a padded batch) to every token of the
/// windows of each input, in order, padding cut off: `[token][n]` per window. The windows run
/// `batch_size` at a time, batched by length.
fn token_scores(
    windows: &[Vec<TokenWindow>],
    tokenizer: &Tokenizer,
    limits: &InputLimits,
    batch_size: usize,
    device: &Device,
    forward: impl Fn(EncoderInput) -> Tensor<3> + Sync,
) -> Result<Vec<Vec<Vec<f32>>>, PipelineError> {
    let encoded: Vec<EncodedText> = windows.iter().flatten().map(|w| w.encoded.clone()).collect();
    let left = tokenizer.pads_left();
    by_length(&encoded, batch_size, device, |rows| {
        let batch = tokenizer.pad(&rows.iter().map(|&i| &encoded[i]).collect::<Vec<_>>())?;
        let scores = forward(to_input(&batch, limits, device)?);
        let [_, seq, n] = scores.dims();
        let values = scores.try_to_vec_as::<f32>().map_err(readback("logits"))?;
        Ok(rows
            .iter()
            .enumerate()
            .map(|(r, &i)| {
                let len = encoded[i].len();
                let first = r * seq + if left { seq - len } else { 0 };
                (first..first + len).map(|j| values[j * n..(j + 1) * n].to_vec()).collect()
            })
            .collect())
    })
}

#[cfg(test)]
mod tests {
    use super::length_batches;

    /// Padded tokens of `batches` over texts of `lengths`.
    fn padded(lengths: &[usize], batches: &[Vec<usize>]) -> usize {
        batches.iter().map(|b| b.iter().map(|&i| lengths[i]).max().unwrap() * b.len()).sum()
    }

    #[test]
    fn length_batches_hold_every_text_once_longest_first_and_pad_less_than_fixed_batches() {
        // A long tail: one very long text, then lengths spread from 60 down to 3.
        let lengths: Vec<usize> = (0..200).map(|i| if i == 17 { 300 } else { 3 + (i * 37) % 58 }).collect();
        for batch_size in [1, 7, 32, 500] {
            let batches = length_batches(&lengths, batch_size);
            let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
            seen.sort();
            assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>(), "batch size {batch_size}: every text once");
            assert!(batches.iter().all(|b| !b.is_empty() && b.len() <= batch_size), "batch size {batch_size}: sizes");
            let flat: Vec<usize> = batches.iter().flatten().map(|&i| lengths[i]).collect();
            assert!(flat.windows(2).all(|w| w[0] >= w[1]), "batch size {batch_size}: longest first");
            // Never more padding than fixed-size batches of the same sorted order.
            let mut order: Vec<usize> = (0..lengths.len()).collect();
            order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
            let fixed: Vec<Vec<usize>> = order.chunks(batch_size).map(<[usize]>::to_vec).collect();
            assert!(padded(&lengths, &batches) <= padded(&lengths, &fixed), "batch size {batch_size}");
        }
        // With batches of 32, the 300-token text is not padded against 31 shorter ones.
        let batches = length_batches(&lengths, 32);
        assert_eq!(batches[0], vec![17], "the long text runs alone");
        assert!(padded(&lengths, &batches) * 100 < padded(&lengths, &[(0..200).collect()]) * 40);
        assert!(length_batches(&[], 32).is_empty());
        assert_eq!(length_batches(&[5, 9], 0), vec![vec![1], vec![0]], "a batch size of 0 means 1");
    }
}
