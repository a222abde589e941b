//! Extractive question answering as a [`TrainTask`], as transformers' `run_qa.py`: each question
//! with windows of its context (`max_seq_length`, `doc_stride`); a window learns the answer's
//! first and last tokens when the answer lies inside it, else the classification token (no
//! answer here); evaluation picks each question's answer from all its windows
//! ([`best_answer`]) and scores them as the official SQuAD script (exact match and F1, percent).

use std::collections::BTreeMap;

use burn::prelude::*;
use sesame_pipelines::{best_answer, Answer, AnswerOptions, ScoredWindow};
use sesame_layers::heads::question_answering_loss;
use sesame_layers::{EncoderInput, OutputOptions, SpanLogits, TaskModel};
use sesame_metrics::squad::{squad_scores, Question};
use sesame_text::squad::SquadExample;
use sesame_text::{TokenWindow, Tokenizer, TokenizerError};

use crate::{StepOutput, TrainTask};

/// One window of a question and its context.
#[derive(Clone, Debug)]
pub struct QaWindow {
    /// The question.
    pub example: usize,
    /// The tokens, offsets and content marks.
    pub window: TokenWindow,
    /// The answer's first and last token here, or the classification token twice.
    pub positions: (i64, i64),
}

/// Questions encoded as windows.
#[derive(Clone, Debug)]
pub struct QaSet {
    /// The questions.
    pub examples: Vec<SquadExample>,
    /// Their windows, in order.
    pub windows: Vec<QaWindow>,
}

impl QaSet {
    /// Encode `examples` as windows of at most `max_len` tokens whose contexts overlap by
    /// `stride` tokens; each window's target is its first answer's span (`run_qa.py`'s
    /// `prepare_train_features`).
    pub fn encode(tokenizer: &Tokenizer, examples: Vec<SquadExample>, max_len: usize, stride: usize) -> Result<Self, TokenizerError> {
        let mut windows = Vec::new();
        for (e, example) in examples.iter().enumerate() {
            for window in tokenizer.encode_question_windows(&example.question, &example.context, max_len, stride)? {
                let cls = window.cls as i64;
                let positions = example.answers.first().and_then(|(text, start)| answer_tokens(&window, *start, start + text.chars().count())).unwrap_or((cls, cls));
                windows.push(QaWindow { example: e, window, positions });
            }
        }
        Ok(Self { examples, windows })
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

/// The first and last token of characters `start..end` of the context in `window`, when the
/// window holds all of them.
fn answer_tokens(window: &TokenWindow, start: usize, end: usize) -> Option<(i64, i64)> {
    let content: Vec<usize> = (0..window.context.len()).filter(|&j| window.context[j] > 0.0).collect();
    let (&first, &last) = (content.first()?, content.last()?);
    if window.offsets[first].0 > start || window.offsets[last].1 < end {
        return None;
    }
    let s = content.iter().rev().find(|&&j| window.offsets[j].0 <= start)?;
    let e = content.iter().find(|&&j| window.offsets[j].1 >= end)?;
    Some((*s as i64, *e as i64))
}

/// One batch of windows on its device.
#[derive(Clone, Debug)]
pub struct QaBatch {
    /// The padded input.
    pub input: EncoderInput,
    /// Start and end positions `[batch]`.
    pub positions: (Tensor<1, Int>, Tensor<1, Int>),
    /// Tokens that are not padding.
    pub tokens: usize,
    /// The factor of the mean loss ([`super::Part::weight`]; 1 held out).
    pub weight: f32,
}

/// Fine-tuning a [`TaskModel`] `M` on a [`QaSet`], evaluated on another.
#[derive(Clone, Debug)]
pub struct QuestionAnswering<M> {
    train: QaSet,
    eval: QaSet,
    /// Held-out windows in batch order (sorted by length).
    eval_order: Vec<usize>,
    tokenizer: Tokenizer,
    options: AnswerOptions,
    batching: super::Batching,
    model: std::marker::PhantomData<fn() -> M>,
}

impl<M> QuestionAnswering<M> {
    /// The task on `train`, held out `eval`, answers picked by `options`, in batches of
    /// windows cut by `batching` and padded by `tokenizer`.
    pub fn new(train: QaSet, eval: QaSet, tokenizer: Tokenizer, options: AnswerOptions, batching: super::Batching) -> Self {
        let mut eval_order: Vec<usize> = (0..eval.len()).collect();
        eval_order.sort_by_key(|&i| eval.windows[i].window.encoded.len());
        Self { train, eval, eval_order, tokenizer, options, batching, model: std::marker::PhantomData }
    }

    /// Training batches per epoch.
    pub fn batches_per_epoch(&self) -> u64 {
        self.batching.per_epoch(self.train.len())
    }

    fn batch(&self, set: &QaSet, rows: &[usize], device: &Device) -> QaBatch {
        let windows: Vec<&QaWindow> = rows.iter().map(|&i| &set.windows[i]).collect();
        let (input, tokens, seq) = super::padded_input(&self.tokenizer, &windows.iter().map(|w| &w.window.encoded).collect::<Vec<_>>(), device);
        let shift = |w: &QaWindow| if self.tokenizer.pads_left() { (seq - w.window.encoded.len()) as i64 } else { 0 };
        let starts: Vec<i64> = windows.iter().map(|w| w.positions.0 + shift(w)).collect();
        let ends: Vec<i64> = windows.iter().map(|w| w.positions.1 + shift(w)).collect();
        let b = rows.len();
        QaBatch { input, positions: (Tensor::from_data(TensorData::new(starts, [b]), device), Tensor::from_data(TensorData::new(ends, [b]), device)), tokens, weight: 1.0 }
    }

    /// The held-out questions.
    pub fn eval_examples(&self) -> &[SquadExample] {
        &self.eval.examples
    }

    /// Each held-out question's answer from the held-out `predictions` (each batch's start and
    /// end logits `[batch, seq, 2]`, in order).
    pub fn answers(&self, predictions: &[TensorData]) -> Option<Vec<Answer>> {
        let lens: Vec<usize> = self.eval.windows.iter().map(|w| w.window.encoded.len()).collect();
        let values = super::unpadded::<f32>(predictions, &self.eval_order, &lens, self.tokenizer.pads_left())?;
        // Each window's start and end logits (its values alternate: `[token][2]`).
        let logits: Vec<(Vec<f32>, Vec<f32>)> = values.iter().map(|v| v.chunks(2).map(|t| (t[0], t[1])).unzip()).collect();
        let mut by_example: Vec<Vec<ScoredWindow>> = vec![Vec::new(); self.eval.examples.len()];
        for (w, (s, e)) in self.eval.windows.iter().zip(&logits) {
            by_example[w.example].push(ScoredWindow { window: &w.window, start_logits: s, end_logits: e });
        }
        Some(self.eval.examples.iter().zip(&by_example).map(|(x, ws)| best_answer(&x.context, ws, &self.options)).collect())
    }
}

impl<M: TaskModel<Output = SpanLogits>> TrainTask for QuestionAnswering<M> {
    type Model = M;
    type Batch = QaBatch;
    type State = ();

    /// Micro-batch `index` ([`super::Batching::part`]).
    fn train_batch(&self, index: u64, device: &Device) -> QaBatch {
        let part = self.batching.part(self.train.len(), index);
        let weight = part.weight(|rows| rows.len() as f64);
        QaBatch { weight, ..self.batch(&self.train, &part.rows, device) }
    }

    fn held_out_batches(&self, device: &Device) -> Vec<QaBatch> {
        self.eval_order.chunks(self.batching.batch_size).map(|rows| self.batch(&self.eval, rows, device)).collect()
    }

    fn step(&self, model: &M, batch: QaBatch) -> StepOutput {
        let SpanLogits { start, end } = model.run(batch.input, OutputOptions::default());
        let (start_positions, end_positions) = batch.positions;
        let loss = question_answering_loss(start.clone(), end.clone(), start_positions, end_positions).mul_scalar(batch.weight);
        let [b, s] = start.dims();
        let predictions = Tensor::stack::<3>(vec![start, end], 2).reshape([b, s, 2]).into_data();
        StepOutput { loss, metrics: Vec::new(), tokens: batch.tokens, predictions: Some(predictions) }
    }

    /// The official SQuAD script's `exact_match` and `f1` (percent) over the held-out questions
    /// (SQuAD 2.0's rules when some have no answer: an empty prediction is right for them).
    fn held_out_scores(&self, predictions: &[TensorData]) -> BTreeMap<String, f64> {
        let Some(answers) = self.answers(predictions) else { return BTreeMap::new() };
        let questions: Vec<Question> = self
            .eval
            .examples
            .iter()
            .zip(answers)
            .map(|(x, a)| Question { answers: x.answers.iter().map(|(t, _)| t.clone()).collect(), predicted: a.answer, no_answer_probability: None })
            .collect();
        squad_scores(&questions, 1.0).map(|s| BTreeMap::from([("exact_match".to_string(), s.exact), ("f1".to_string(), s.f1)])).unwrap_or_default()
    }
}

/// The metric names of extractive question answering.
pub const QA_METRICS: &[&str] = &["loss", "exact_match", "f1"];
