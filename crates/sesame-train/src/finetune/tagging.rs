//! Token classification (named entities, parts of speech) as a [`TrainTask`]: every word of a
//! tagged sentence is labelled on its first sub-token (transformers' `run_ner.py` rule), and a
//! sentence longer than the model reads is cut into overlapping windows rather than truncated,
//! each word learned and scored once, in the window where it has the most context on both sides
//! (BERT's "max context" rule for SQuAD windows). Entity tags are scored as seqeval scores them
//! (entity-level precision, recall and F1) with the word accuracy; other tags (parts of speech)
//! by word accuracy and F1 over the tags, over every word of the held-out sentences.

use std::collections::BTreeMap;

use burn::prelude::*;
use sesame_layers::{loss::per_token_cross_entropy, EncoderInput, TokenLogits, TaskModel, OutputOptions};
use sesame_metrics::classification::ConfusionMatrix;
use sesame_metrics::tagging::{entity_scores, Scheme};
use sesame_metrics::Average;
use sesame_text::{EncodedText, Tokenizer, TokenizerError, Words};

use crate::{Metric, StepOutput, TrainTask};

/// One window of a sentence's tokens with its labels.
#[derive(Clone, Debug)]
pub struct TaggedWindow {
    /// The tokens, special tokens included.
    pub encoded: EncodedText,
    /// The tag id of each token that is learned from this window; -100 elsewhere.
    pub labels: Vec<i64>,
    /// The sentence.
    pub sentence: usize,
    /// The word of each labelled token, in token order.
    pub words: Vec<usize>,
}

/// Tagged sentences encoded as windows, with their tags.
#[derive(Clone, Debug)]
pub struct TaggedSet {
    /// Windows that label at least one word.
    pub windows: Vec<TaggedWindow>,
    /// Each sentence's tag ids, one per word.
    pub tags: Vec<Vec<usize>>,
    /// Each sentence's words that have a label: a word the tokenizer makes no token of (a
    /// control character) is neither learned nor scored, as in `run_ner.py`.
    pub scored: Vec<Vec<bool>>,
}

impl TaggedSet {
    /// Encode `sentences` of words, tagged `tags` (ids), as windows of at most `max_len`
    /// tokens overlapping by `stride`.
    pub fn encode(tokenizer: &Tokenizer, sentences: &[Vec<&str>], tags: Vec<Vec<usize>>, max_len: usize, stride: usize) -> Result<Self, TokenizerError> {
        let mut windows = Vec::new();
        let mut scored = Vec::with_capacity(sentences.len());
        for (s, words) in sentences.iter().enumerate() {
            let encoded = tokenizer.encode_windows(Words::Split(words), max_len, stride)?;
            // Each word's first sub-token with the most context: (window, position, score).
            let mut best: Vec<Option<(usize, usize, f32)>> = vec![None; words.len()];
            for (k, w) in encoded.iter().enumerate() {
                for (j, word) in w.word_ids.iter().enumerate() {
                    if let (Some(word), true) = (*word, w.word_start[j]) {
                        if best[word].is_none_or(|(_, _, c)| w.context[j] > c) {
                            best[word] = Some((k, j, w.context[j]));
                        }
                    }
                }
            }
            scored.push(best.iter().map(Option::is_some).collect());
            for (k, w) in encoded.into_iter().enumerate() {
                let mut labels = vec![-100i64; w.encoded.len()];
                let mut labelled = Vec::new();
                for (word, b) in best.iter().enumerate() {
                    if let Some((bk, j, _)) = *b {
                        if bk == k {
                            labels[j] = tags[s][word] as i64;
                            labelled.push((j, word));
                        }
                    }
                }
                if !labelled.is_empty() {
                    labelled.sort_unstable();
                    windows.push(TaggedWindow { encoded: w.encoded, labels, sentence: s, words: labelled.into_iter().map(|(_, w)| w).collect() });
                }
            }
        }
        Ok(Self { windows, tags, scored })
    }

    /// Windows.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// Whether there are no windows.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }
}

/// One batch of windows on its device.
#[derive(Clone, Debug)]
pub struct TaggingBatch {
    /// The padded input.
    pub input: EncoderInput,
    /// Tag ids `[batch, seq]`, -100 where nothing is learned.
    pub labels: Tensor<2, Int>,
    /// Tokens that are not padding.
    pub tokens: usize,
    /// The factor of the mean loss ([`super::Part::weight`]; 1 held out).
    pub weight: f32,
}

/// Fine-tuning a [`TaskModel`] `M` on a [`TaggedSet`], evaluated on another.
#[derive(Clone, Debug)]
pub struct TokenClassification<M> {
    train: TaggedSet,
    eval: TaggedSet,
    /// Held-out windows in batch order (sorted by length).
    eval_order: Vec<usize>,
    tokenizer: Tokenizer,
    names: Vec<String>,
    /// Whether the tags are entity tags (scored by entities), else classes of words.
    entities: bool,
    batching: super::Batching,
    model: std::marker::PhantomData<fn() -> M>,
}

impl<M> TokenClassification<M> {
    /// The task of tagging with `names` (entity tags when `entities`) on `train`, held out
    /// `eval`, in batches of windows cut by `batching` and padded by `tokenizer`.
    pub fn new(train: TaggedSet, eval: TaggedSet, tokenizer: Tokenizer, names: Vec<String>, entities: bool, batching: super::Batching) -> Self {
        let mut eval_order: Vec<usize> = (0..eval.len()).collect();
        eval_order.sort_by_key(|&i| eval.windows[i].encoded.len());
        Self { train, eval, eval_order, tokenizer, names, entities, batching, model: std::marker::PhantomData }
    }

    /// The metric names this task reports.
    pub fn metric_names(&self) -> &'static [&'static str] {
        if self.entities { ENTITY_METRICS } else { WORD_METRICS }
    }

    /// Training batches per epoch.
    pub fn batches_per_epoch(&self) -> u64 {
        self.batching.per_epoch(self.train.len())
    }

    fn batch(&self, set: &TaggedSet, rows: &[usize], device: &Device) -> TaggingBatch {
        let windows: Vec<&TaggedWindow> = rows.iter().map(|&i| &set.windows[i]).collect();
        let (input, tokens, seq) = super::padded_input(&self.tokenizer, &windows.iter().map(|w| &w.encoded).collect::<Vec<_>>(), device);
        let left = self.tokenizer.pads_left();
        let labels: Vec<i64> = windows
            .iter()
            .flat_map(|w| {
                let fill = std::iter::repeat_n(-100, seq - w.labels.len());
                if left { fill.chain(w.labels.iter().copied()).collect::<Vec<_>>() } else { w.labels.iter().copied().chain(fill).collect() }
            })
            .collect();
        TaggingBatch { input, labels: Tensor::from_data(TensorData::new(labels, [rows.len(), seq]), device), tokens, weight: 1.0 }
    }

    /// The predicted tag of every scored held-out word, per sentence, from each batch's
    /// predicted ids `[batch, seq]` in order; `None` when they do not fit the windows.
    fn predicted(&self, predictions: &[TensorData]) -> Option<Vec<Vec<Option<usize>>>> {
        let mut out: Vec<Vec<Option<usize>>> = self.eval.tags.iter().map(|t| vec![None; t.len()]).collect();
        let lens: Vec<usize> = self.eval.windows.iter().map(|w| w.labels.len()).collect();
        let ids = super::unpadded::<i64>(predictions, &self.eval_order, &lens, self.tokenizer.pads_left())?;
        for (w, ids) in self.eval.windows.iter().zip(&ids) {
            let positions = w.labels.iter().enumerate().filter(|(_, &l)| l != -100).map(|(j, _)| j);
            for (j, &word) in positions.zip(&w.words) {
                out[w.sentence][word] = Some(ids[j] as usize);
            }
        }
        Some(out)
    }

    /// The held-out true and predicted tag ids of the scored words, per sentence.
    fn tag_sequences(&self, predictions: &[TensorData]) -> Option<(Vec<Vec<usize>>, Vec<Vec<usize>>)> {
        let predicted = self.predicted(predictions)?;
        let mut truth = Vec::new();
        let mut guess = Vec::new();
        for (s, tags) in self.eval.tags.iter().enumerate() {
            let words = (0..tags.len()).filter(|&w| self.eval.scored[s][w]);
            let (t, p): (Vec<usize>, Vec<usize>) = words.map(|w| (tags[w], predicted[s][w].unwrap_or(usize::MAX))).unzip();
            truth.push(t);
            guess.push(p);
        }
        Some((truth, guess))
    }

    /// Scores of the held-out `predictions`: the metrics, and each entity type's (or tag's)
    /// precision, recall, F1 and support.
    pub fn scores(&self, predictions: &[TensorData]) -> Option<(BTreeMap<String, f64>, BTreeMap<String, sesame_metrics::Scores>)> {
        let (truth, guess) = self.tag_sequences(predictions)?;
        if self.entities {
            let name = |i: &usize| self.names.get(*i).map_or("O", String::as_str);
            let named = |s: &[Vec<usize>]| s.iter().map(|t| t.iter().map(name).collect::<Vec<_>>()).collect::<Vec<_>>();
            let scores = entity_scores(&named(&truth), &named(&guess), Scheme::Default).ok()?;
            let metrics = BTreeMap::from([
                ("precision".to_string(), scores.micro.precision),
                ("recall".to_string(), scores.micro.recall),
                ("f1".to_string(), scores.micro.f1),
                ("accuracy".to_string(), scores.accuracy),
            ]);
            Some((metrics, scores.per_type))
        } else {
            let n = self.names.len();
            // A prediction outside the tags (none was made) counts as wrong.
            let flat_guess: Vec<usize> = guess.iter().flatten().zip(truth.iter().flatten()).map(|(&g, &t)| if g < n { g } else { (t + 1) % n }).collect();
            let m = ConfusionMatrix::new(n, &truth.concat(), &flat_guess).ok()?;
            let metrics = BTreeMap::from([
                ("accuracy".to_string(), m.accuracy()),
                ("f1_macro".to_string(), m.scores(Average::Macro).f1),
                ("f1_weighted".to_string(), m.scores(Average::Weighted).f1),
            ]);
            let per_tag = self.names.iter().cloned().zip(m.per_class()).filter(|(_, s)| s.support > 0).collect();
            Some((metrics, per_tag))
        }
    }
}

impl<M: TaskModel<Output = TokenLogits>> TrainTask for TokenClassification<M> {
    type Model = M;
    type Batch = TaggingBatch;
    type State = ();

    /// Micro-batch `index` ([`super::Batching::part`]).
    fn train_batch(&self, index: u64, device: &Device) -> TaggingBatch {
        let part = self.batching.part(self.train.len(), index);
        // The loss is a mean over labelled tokens: a part weighs by its share of them.
        let weight = part.weight(|rows| rows.iter().map(|&i| self.train.windows[i].labels.iter().filter(|&&l| l != -100).count() as f64).sum());
        TaggingBatch { weight, ..self.batch(&self.train, &part.rows, device) }
    }

    fn held_out_batches(&self, device: &Device) -> Vec<TaggingBatch> {
        self.eval_order.chunks(self.batching.batch_size).map(|rows| self.batch(&self.eval, rows, device)).collect()
    }

    fn step(&self, model: &M, batch: TaggingBatch) -> StepOutput {
        let logits = model.run(batch.input, OutputOptions::logits_only());
        let [b, s, _] = logits.dims();
        let loss = per_token_cross_entropy(logits.clone(), batch.labels.clone()).mul_scalar(batch.weight);
        let predicted = logits.argmax(2).reshape([b, s]);
        let labelled = batch.labels.clone().not_equal_elem(-100);
        let right = predicted.clone().equal(batch.labels).int().mul(labelled.clone().int()).sum();
        let (right, count) = (right.try_into_scalar::<i64>().map_or(f64::NAN, |v| v as f64), labelled.int().sum().try_into_scalar::<i64>().map_or(0.0, |v| v as f64));
        let metrics = if batch.weight > 0.0 { vec![Metric::mean("accuracy", right, count)] } else { Vec::new() };
        StepOutput { loss, metrics, tokens: batch.tokens, predictions: Some(predicted.into_data()) }
    }

    /// Entity tags: seqeval's micro `precision`, `recall`, `f1` (entity level, conlleval's
    /// chunking) and the word `accuracy`, as `run_ner.py` reports them; other tags: the word
    /// `accuracy`, and `f1_macro` and `f1_weighted` over the tags (scikit-learn's).
    fn held_out_scores(&self, predictions: &[TensorData]) -> BTreeMap<String, f64> {
        self.scores(predictions).map(|(metrics, _)| metrics).unwrap_or_default()
    }
}

/// The metric names of entity tagging.
pub const ENTITY_METRICS: &[&str] = &["loss", "precision", "recall", "f1", "accuracy"];

/// The metric names of tagging words with classes (parts of speech).
pub const WORD_METRICS: &[&str] = &["loss", "accuracy", "f1_macro", "f1_weighted"];
