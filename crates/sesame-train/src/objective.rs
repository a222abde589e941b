//! The masked-LM objective, written once for every family: the positions a batch predicts
//! (gathered before the vocabulary projection, as Google's BERT does), their spans (for
//! SpanBERT's boundary objective), and [`MaskedLmObjective`], what the shared pre-training task
//! asks of a masked-LM model (MLM alone, or with NSP or SOP).

use burn::prelude::*;
use sesame_layers::loss::{cross_entropy, IGNORE_INDEX};
use sesame_layers::{EncoderInput, ForMaskedLM, ForPreTraining, Backbone, HeadOutput, OutputOptions, PretrainedModel};

/// Vocabulary logits of the `masked` positions only `[masked, vocab]`, with their MLM loss
/// and the encoder's outputs asked for in `options`: the pre-training objective's forward
/// pass, and a distillation teacher's and student's.
pub fn forward_masked<B: Backbone>(model: &ForMaskedLM<B>, input: EncoderInput, masked: &MaskedPositions, options: OutputOptions) -> HeadOutput<2> {
    let out = model.base.forward(input, options);
    let logits = model.lm_head.forward(masked.gather(out.last_hidden_state()), model.base.word_embeddings());
    let loss = cross_entropy(logits.clone(), masked.targets.clone());
    HeadOutput { logits, loss: Some(loss), encoder: out.encoder }
}

/// The positions a masked-LM batch predicts, gathered before the vocabulary projection as
/// Google's BERT does (`masked_lm_positions`, `masked_lm_ids`): the head then runs on the
/// masked tokens only, a sixth or less of the batch, with the same loss and gradients as full
/// logits over every token (the unpredicted ones carry no loss).
#[derive(Clone, Debug)]
pub struct MaskedPositions {
    /// Flat indices into `[batch * seq]` `[masked]`.
    pub positions: Tensor<1, Int>,
    /// The original token at each position `[masked]` (-100 for the one ignored placeholder of
    /// a batch that masks nothing).
    pub targets: Tensor<1, Int>,
    /// The span each position lies in, for objectives that read a span's boundary (SpanBERT's:
    /// [`MaskedLmObjective::READS_SPANS`]); `None` where not asked for.
    pub spans: Option<MaskedSpans>,
}

/// The masked span of each predicted position. A span is a maximal run of predicted positions
/// in a row, as SpanBERT merges masked spans that touch (`merge_intervals`).
#[derive(Clone, Debug)]
pub struct MaskedSpans {
    /// Flat index into `[batch * seq]` of the token just before the span `[masked]`.
    pub left: Tensor<1, Int>,
    /// Flat index of the token just after the span `[masked]`.
    pub right: Tensor<1, Int>,
    /// The position's offset in its span, 0 for the span's first token `[masked]`;
    /// [`MaskedSpans::NO_BOUNDARY`] for a span that touches its row's first or last column.
    pub offset: Tensor<1, Int>,
}

impl MaskedSpans {
    /// The offset of a position whose span has no token on one side (its boundary indices are
    /// the position itself).
    pub const NO_BOUNDARY: i64 = i32::MAX as i64;

    /// `(left, right, offset)` of each predicted position of `labels` `[rows, seq]` (row-major,
    /// -100 = not predicted), in row-major order.
    fn of_labels(labels: &[i64], seq: usize) -> Vec<(i64, i64, i64)> {
        let mut out = Vec::new();
        for (row, labels) in labels.chunks(seq.max(1)).enumerate() {
            let base = (row * seq) as i64;
            let mut col = 0;
            while col < labels.len() {
                if labels[col] == IGNORE_INDEX {
                    col += 1;
                    continue;
                }
                let start = col;
                while col < labels.len() && labels[col] != IGNORE_INDEX {
                    col += 1;
                }
                let inside = start > 0 && col < labels.len();
                for i in start..col {
                    out.push(match inside {
                        true => (base + start as i64 - 1, base + col as i64, (i - start) as i64),
                        false => (base + i as i64, base + i as i64, Self::NO_BOUNDARY),
                    });
                }
            }
        }
        out
    }
}

impl MaskedPositions {
    /// The predicted positions of MLM labels `[batch, seq]` given row-major on the host (-100 =
    /// not predicted), with their spans when `with_spans`.
    pub fn from_labels(labels: &[i64], seq: usize, with_spans: bool, device: &Device) -> Self {
        let (mut positions, mut targets): (Vec<i64>, Vec<i64>) =
            labels.iter().enumerate().filter(|(_, &l)| l != IGNORE_INDEX).map(|(i, &l)| (i as i64, l)).unzip();
        let mut spans = if with_spans { MaskedSpans::of_labels(labels, seq) } else { Vec::new() };
        if positions.is_empty() {
            // An empty index tensor is not portable across backends; one ignored row adds nothing.
            (positions, targets, spans) = (vec![0], vec![IGNORE_INDEX], vec![(0, 0, MaskedSpans::NO_BOUNDARY)]);
        }
        let n = positions.len();
        let int = |v: Vec<i64>| Tensor::<1, Int>::from_data(TensorData::new(v, [n]), device);
        let spans = with_spans.then(|| {
            let (left, (right, offset)): (Vec<i64>, (Vec<i64>, Vec<i64>)) = spans.into_iter().map(|(l, r, o)| (l, (r, o))).unzip();
            MaskedSpans { left: int(left), right: int(right), offset: int(offset) }
        });
        Self { positions: int(positions), targets: int(targets), spans }
    }

    /// The predicted positions of MLM labels `[batch, seq]` on a device, with their spans
    /// (reads the labels back).
    pub fn of(labels: &Tensor<2, Int>) -> Self {
        let host = labels.to_data().convert::<i64>().try_to_vec::<i64>().expect("i64 labels");
        Self::from_labels(&host, labels.dims()[1], true, &labels.device())
    }

    /// The rows of `hidden` `[batch, seq, d]` at the positions: `[masked, d]`.
    pub fn gather(&self, hidden: Tensor<3>) -> Tensor<2> {
        let [b, s, d] = hidden.dims();
        hidden.reshape([b * s, d]).select(0, self.positions.clone())
    }
}

/// What a pre-training forward pass returns.
#[derive(Clone, Debug)]
pub struct ObjectiveOutput {
    /// The loss to minimise: MLM plus the sentence task where there is one.
    pub loss: Tensor<1>,
    /// Masked-LM loss.
    pub mlm_loss: Tensor<1>,
    /// MLM logits at the masked positions only `[masked, vocab]` (see [`MaskedPositions`]).
    pub prediction_logits: Tensor<2>,
    /// Sentence-task loss and logits `[batch, 2]` (NSP, SOP), for models with that head.
    pub sentence: Option<(Tensor<1>, Tensor<2>)>,
    /// The span-boundary loss (SpanBERT's SBO), for models with that head.
    pub span_boundary: Option<Tensor<1>>,
}

/// A model pre-trained with masked LM, with or without a sentence-pair task: what a
/// family-free pre-training loop needs to know of it.
pub trait MaskedLmObjective: PretrainedModel {
    /// Whether the model predicts a sentence-pair label (BERT's NSP, ALBERT's SOP).
    const SENTENCE_TASK: bool;

    /// Whether the objective reads the masked spans ([`MaskedPositions::spans`]: SpanBERT's
    /// SBO); batches for the others leave them out.
    const READS_SPANS: bool = false;

    /// Losses and logits for masked `input`, the `masked` positions and their targets, and
    /// sentence labels `sentence` `[batch]` (ignored without the head). The vocabulary
    /// projection runs on the masked positions only; `forward` with labels gives the same
    /// loss from full logits, as HF does.
    fn objective(&self, input: EncoderInput, masked: &MaskedPositions, sentence: Tensor<1, Int>) -> ObjectiveOutput;

}

impl<B: Backbone> MaskedLmObjective for ForPreTraining<B> {
    const SENTENCE_TASK: bool = true;

    fn objective(&self, input: EncoderInput, masked: &MaskedPositions, sentence: Tensor<1, Int>) -> ObjectiveOutput {
        let out = self.base.forward(input, OutputOptions::default());
        let prediction_logits = self.lm_head.forward(masked.gather(out.last_hidden_state()), self.base.word_embeddings());
        let mlm_loss = cross_entropy(prediction_logits.clone(), masked.targets.clone());
        let sentence_logits = self.sentence_head.forward(B::pooled(&out));
        let sentence_loss = cross_entropy(sentence_logits.clone(), sentence);
        ObjectiveOutput {
            loss: mlm_loss.clone() + sentence_loss.clone(),
            mlm_loss,
            prediction_logits,
            sentence: Some((sentence_loss, sentence_logits)),
            span_boundary: None,
        }
    }

}

impl<B: Backbone> MaskedLmObjective for ForMaskedLM<B> {
    const SENTENCE_TASK: bool = false;

    fn objective(&self, input: EncoderInput, masked: &MaskedPositions, _sentence: Tensor<1, Int>) -> ObjectiveOutput {
        let out = forward_masked(self, input, masked, OutputOptions::default());
        let loss = out.loss.expect("forward_masked gives the loss");
        ObjectiveOutput { loss: loss.clone(), mlm_loss: loss, prediction_logits: out.logits, sentence: None, span_boundary: None }
    }

}

