//! Masked-LM pre-training for any family: examples built once from a corpus (sentence pairs
//! for NSP/SOP, or packed single sequences), masks drawn anew every time an example is seen
//! (dynamic masking; static masking with N copies as an option) by a pluggable strategy, and
//! MLM (+ sentence-task) loss and metrics.
//!
//! A family plugs in with [`PretrainingFamily`]: its model, the data layout and masking of its
//! paper, its tokenizer and its size presets. Nothing here names a family.

use std::marker::PhantomData;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use burn::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use sesame_layers::{ConfigError, EncoderInput, ForMaskedLM, Backbone, PretrainedModel};
use crate::{ForSpanPreTraining, MaskedLmObjective, MaskedPositions};
use sesame_text::{
    collate, pack_sentences, sentence_pairs, tokenize_documents, unigram_nll, mix_seeds as mix, Corpus, EpochStream, Example, MaskVocab, MaskedBatch, MaskingStrategy, NgramMasking, Packing,
    PairConfig, SentenceTask, SequenceFormat, SpanMasking, TokenMasking, Tokenizer, TokenizerError, TokenizerKind,
    WholeWordMasking, ErnieMasking, Lexicon, UnitMasking,
};

use crate::{Metric, StepOutput, TrainTask};

pub mod families;
pub mod run;
pub use families::{export_masked_lm, pretrain_masked_lm, refuse_other_corruptions, Corruption, LossOn, MaskLengthKind, NoiseOptions, PermutationOptions, Pretrain};
pub use run::{pretrain, pretrain_distilled, Objective, PackingKind, PretrainOptions, Pretrained};

/// Why pre-training data could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// Tokenization failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// Too little text.
    #[error("the corpus yields {examples} training example(s), fewer than one batch of {batch_size}; add text or lower --batch-size")]
    TooSmall {
        /// Examples built (of sentence pairs, one pairing's).
        examples: usize,
        /// Batch size.
        batch_size: usize,
    },
    /// The tokenizer's vocabulary does not fit the model.
    #[error("the tokenizer has {tokenizer} tokens but the model's vocab_size is {model}")]
    VocabMismatch {
        /// Tokenizer vocabulary size.
        tokenizer: usize,
        /// Model vocabulary size.
        model: usize,
    },
    /// A model with a sentence head given single sequences.
    #[error("this model trains a sentence-pair task (NSP/SOP) and needs sentence pairs, not packed sequences")]
    NeedsPairs,
}

/// How examples are laid out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Layout {
    /// Sentence pairs with NSP or SOP labels (BERT, ALBERT).
    Pairs(PairConfig),
    /// Single sequences packed with full sentences (RoBERTa).
    Packed {
        /// Across document boundaries or not.
        packing: Packing,
        /// Maximum length, special tokens included.
        max_seq_len: usize,
    },
}

impl Layout {
    /// The same layout with sequences of at most `max_seq_len` tokens.
    pub fn with_max_seq_len(self, max_seq_len: usize) -> Self {
        match self {
            Layout::Pairs(pairs) => Layout::Pairs(PairConfig { max_seq_len, ..pairs }),
            Layout::Packed { packing, .. } => Layout::Packed { packing, max_seq_len },
        }
    }

    /// The metric prefix of the sentence task (`nsp`, `sop`), if any.
    fn sentence_metric(&self) -> Option<&'static str> {
        match self {
            Layout::Pairs(PairConfig { task: SentenceTask::NextSentence, .. }) => Some("nsp"),
            Layout::Pairs(PairConfig { task: SentenceTask::SentenceOrder, .. }) => Some("sop"),
            Layout::Packed { .. } => None,
        }
    }
}

/// Masking strategies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum MaskingKind {
    /// BERT's and RoBERTa's token-level 15% with 80/10/10.
    Token,
    /// Whole-word masking.
    WholeWord,
    /// SpanBERT spans (geometric lengths, p = 0.2, at most 10 words).
    Span,
    /// ALBERT's n-grams of whole words, n <= 3 with p(n) proportional to 1/n.
    Ngram,
    /// ERNIE's phrase-level masking: phrases (and the other words) masked whole.
    Phrase,
    /// ERNIE's entity-level masking: entities (and the other words) masked whole.
    Entity,
    /// ERNIE's three levels in sequence over the run: words, then phrases, then entities.
    Ernie,
}

/// What ERNIE's knowledge masking masks whole ([`MaskingKind::Phrase`], `Entity`, `Ernie`):
/// the phrases, the entities, and the training batches (micro-batches) of the run that its
/// stages divide.
#[derive(Clone, Debug, Default)]
pub struct Knowledge {
    /// Phrases (empty: whole words only).
    pub phrases: Arc<Lexicon>,
    /// Entities (empty: whole words only).
    pub entities: Arc<Lexicon>,
    /// Training batches of the run.
    pub batches: u64,
}

impl MaskingKind {
    /// The name on the command line (`--masking whole-word`).
    pub fn name(self) -> &'static str {
        match self {
            MaskingKind::Token => "token",
            MaskingKind::WholeWord => "whole-word",
            MaskingKind::Span => "span",
            MaskingKind::Ngram => "ngram",
            MaskingKind::Phrase => "phrase",
            MaskingKind::Entity => "entity",
            MaskingKind::Ernie => "ernie",
        }
    }

    /// Whether it masks phrases whole (reads [`Knowledge::phrases`]).
    pub fn reads_phrases(self) -> bool {
        matches!(self, MaskingKind::Phrase | MaskingKind::Ernie)
    }

    /// Whether it masks entities whole (reads [`Knowledge::entities`]).
    pub fn reads_entities(self) -> bool {
        matches!(self, MaskingKind::Entity | MaskingKind::Ernie)
    }

    /// The strategy with its paper's settings (15%, 80/10/10); ERNIE's levels mask the units
    /// of `knowledge` (the other strategies do not read it).
    pub fn strategy(self, knowledge: &Knowledge) -> Arc<dyn MaskingStrategy> {
        match self {
            MaskingKind::Phrase => Arc::new(UnitMasking::new(knowledge.phrases.clone())),
            MaskingKind::Entity => Arc::new(UnitMasking::new(knowledge.entities.clone())),
            MaskingKind::Ernie => Arc::new(ErnieMasking::new(knowledge.phrases.clone(), knowledge.entities.clone(), knowledge.batches)),
            MaskingKind::Token => Arc::new(TokenMasking::default()),
            MaskingKind::WholeWord => Arc::new(WholeWordMasking::default()),
            MaskingKind::Span => Arc::new(SpanMasking::default()),
            MaskingKind::Ngram => Arc::new(NgramMasking::default()),
        }
    }
}

/// The masking of a run: a shared strategy ([`MaskingKind`], what `--masking` names), or a
/// family's own, which its [`PretrainingFamily::masking`] gives (ELECTRA's, UniLM's).
#[derive(Clone, Copy)]
pub enum Masking {
    /// A shared strategy.
    Shared(MaskingKind),
    /// A family's own strategy: its name, recorded in the run, and how to build it.
    Family {
        /// The name (`Electra`).
        name: &'static str,
        /// The strategy with its paper's settings.
        strategy: fn() -> Arc<dyn MaskingStrategy>,
    },
}

impl From<MaskingKind> for Masking {
    fn from(kind: MaskingKind) -> Self {
        Masking::Shared(kind)
    }
}

impl std::fmt::Debug for Masking {
    /// The shared strategy's name (`Token`), or the family's.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Masking::Shared(kind) => write!(f, "{kind:?}"),
            Masking::Family { name, .. } => f.write_str(name),
        }
    }
}

impl Masking {
    /// Whether it masks phrases whole (reads [`Knowledge::phrases`]).
    pub fn reads_phrases(self) -> bool {
        matches!(self, Masking::Shared(kind) if kind.reads_phrases())
    }

    /// Whether it masks entities whole (reads [`Knowledge::entities`]).
    pub fn reads_entities(self) -> bool {
        matches!(self, Masking::Shared(kind) if kind.reads_entities())
    }

    /// The strategy; a shared one reads `knowledge` as [`MaskingKind::strategy`] does.
    pub fn strategy(self, knowledge: &Knowledge) -> Arc<dyn MaskingStrategy> {
        match self {
            Masking::Shared(kind) => kind.strategy(knowledge),
            Masking::Family { strategy, .. } => strategy(),
        }
    }
}

/// A model trained by the shared pre-training task on masked batches: its objective (loss and
/// metrics of a batch) and how the trained model is exported. Every masked-LM model
/// ([`MaskedLmObjective`]: MLM, MLM + NSP/SOP) is one; ELECTRA's generator + discriminator
/// pair is one with its own objective.
pub trait PretrainingModel: PretrainedModel {
    /// Whether the objective predicts a sentence-pair label (needs [`Layout::Pairs`]).
    const SENTENCE_TASK: bool;

    /// Whether the objective reads the masked spans (SpanBERT's SBO): only then do batches
    /// carry them.
    const READS_SPANS: bool = false;

    /// Loss and metrics of one batch; `sentence_metric` names the sentence task's metrics
    /// (`nsp`, `sop`).
    fn pretraining_step(&self, batch: PretrainingBatch, sentence_metric: Option<&str>) -> StepOutput;

    /// Write the trained model in HF layout in `dir` (ELECTRA: the discriminator, and the
    /// generator in `dir/generator`); returns every model directory written, each of which
    /// gets the tokenizer.
    fn export(&self, config: &Self::Config, dir: &Path) -> Result<Vec<PathBuf>, sesame_layers::CheckpointError> {
        self.save_pretrained(config, dir)?;
        Ok(vec![dir.to_path_buf()])
    }
}

impl<M: MaskedLmObjective> PretrainingModel for M {
    const SENTENCE_TASK: bool = M::SENTENCE_TASK;
    const READS_SPANS: bool = M::READS_SPANS;

    fn pretraining_step(&self, batch: PretrainingBatch, sentence_metric: Option<&str>) -> StepOutput {
        pretraining_step(self, batch, sentence_metric)
    }
}

/// A family's pre-training recipe, as its paper gives it.
pub trait PretrainingFamily {
    /// The model trained (`BertForPreTraining`, `RobertaForMaskedLM`, ELECTRA's pair, …).
    type Model: PretrainingModel + Send + Sync;
    /// Family name for messages and run directories.
    const NAME: &'static str;
    /// The data layout (pairs with NSP/SOP, or packed sequences).
    fn layout() -> Layout;
    /// The masking strategy when the run names none.
    fn masking() -> Masking;
    /// The tokenizer trained when none is given.
    fn tokenizer() -> TokenizerKind;
    /// A fresh model configuration of size `preset` (`tiny`, `mini`, `small`, `base`, with the
    /// family's own choices) for a vocabulary of `vocab_size` with padding id `pad_token_id`,
    /// with `max_len` positions.
    fn preset(preset: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<<Self::Model as sesame_layers::PretrainedModel>::Config, ConfigError>;
}

/// SpanBERT's recipe (Joshi et al. 2020) on the encoder `B` of family `F`: single sequences of
/// full sentences without a sentence task, span masking (geometric lengths, p = 0.2, at most
/// 10 words, 15% of the tokens, 80/10/10 per span), loss MLM + span-boundary objective
/// ([`ForSpanPreTraining`]); `F`'s tokenizer and size presets.
pub struct SpanBoundaryRecipe<F, B>(PhantomData<fn() -> (F, B)>);

impl<F, B> PretrainingFamily for SpanBoundaryRecipe<F, B>
where
    F: PretrainingFamily,
    B: Backbone,
    F::Model: PretrainedModel<Config = B::Config>,
{
    type Model = ForSpanPreTraining<B>;
    const NAME: &'static str = F::NAME;

    fn layout() -> Layout {
        Layout::Packed { packing: Packing::FullSentences, max_seq_len: 512 }
    }

    fn masking() -> Masking {
        MaskingKind::Span.into()
    }

    fn tokenizer() -> TokenizerKind {
        F::tokenizer()
    }

    fn preset(preset: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<B::Config, ConfigError> {
        F::preset(preset, vocab_size, max_len, pad_token_id)
    }
}

/// Masked LM alone on single sequences of full sentences, with `F`'s masking, tokenizer and
/// presets: the no-sentence-task baseline of SpanBERT's and RoBERTa's ablations (`--objective
/// mlm`; SpanBERT's "span masking, 1seq" with `--masking span`).
pub struct SingleSequenceRecipe<F, B>(PhantomData<fn() -> (F, B)>);

impl<F, B> PretrainingFamily for SingleSequenceRecipe<F, B>
where
    F: PretrainingFamily,
    B: Backbone,
    F::Model: PretrainedModel<Config = B::Config>,
{
    type Model = ForMaskedLM<B>;
    const NAME: &'static str = F::NAME;

    fn layout() -> Layout {
        Layout::Packed { packing: Packing::FullSentences, max_seq_len: 512 }
    }

    fn masking() -> Masking {
        F::masking()
    }

    fn tokenizer() -> TokenizerKind {
        F::tokenizer()
    }

    fn preset(preset: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<B::Config, ConfigError> {
        F::preset(preset, vocab_size, max_len, pad_token_id)
    }
}

/// One pre-training batch on a device.
#[derive(Clone, Debug)]
pub struct PretrainingBatch {
    /// Masked input.
    pub input: EncoderInput,
    /// MLM targets `[batch, seq]` (-100 = not predicted).
    pub mlm_labels: Tensor<2, Int>,
    /// The same targets gathered: the positions predicted and their tokens, on which the
    /// vocabulary projection runs.
    pub masked: MaskedPositions,
    /// Sentence-task targets `[batch]` (1 = random next sentence / swapped; 0 for packed input).
    pub sentence_labels: Tensor<1, Int>,
    /// Non-padding tokens.
    pub tokens: usize,
    /// A seed for what an objective draws per batch (UniLM's choice of objective), fixed by
    /// the batch's index, so a resumed run and every evaluation draw the same.
    pub seed: u64,
}

impl PretrainingBatch {
    /// Move host arrays to `device` (seed 0; see [`Self::with_seed`]), with the masked spans
    /// when `spans` ([`PretrainingModel::READS_SPANS`]).
    pub fn new(b: &MaskedBatch, spans: bool, device: &Device) -> Self {
        let t = |v: &Vec<i64>| Tensor::<2, Int>::from_data(TensorData::new(v.clone(), [b.batch, b.seq]), device);
        Self {
            input: EncoderInput::new(t(&b.input_ids)).with_attention_mask(t(&b.attention_mask)).with_token_type_ids(t(&b.token_type_ids)),
            mlm_labels: t(&b.mlm_labels),
            masked: MaskedPositions::from_labels(&b.mlm_labels, b.seq, spans, device),
            sentence_labels: Tensor::from_data(TensorData::new(b.pair_labels.clone(), [b.batch]), device),
            tokens: b.tokens,
            seed: 0,
        }
    }

    /// A batch from tensors already on a device (`mlm_labels` `[batch, seq]`, -100 = not
    /// predicted; `sentence_labels` `[batch]`); reads the labels back once to gather the
    /// masked positions.
    pub fn from_tensors(input: EncoderInput, mlm_labels: Tensor<2, Int>, sentence_labels: Tensor<1, Int>, tokens: usize) -> Self {
        Self { masked: MaskedPositions::of(&mlm_labels), input, mlm_labels, sentence_labels, tokens, seed: 0 }
    }

    /// The same batch with `seed`.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

/// A value computed once per epoch, kept for the epoch last asked for.
type EpochCache<T> = Arc<Mutex<Option<(u64, Arc<T>)>>>;

/// `cache`'s value for `epoch`, computed by `compute` when it holds another epoch's.
fn per_epoch<T>(cache: &EpochCache<T>, epoch: u64, compute: impl FnOnce() -> T) -> Arc<T> {
    let mut cached = cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match cached.as_ref() {
        Some((e, value)) if *e == epoch => value.clone(),
        _ => {
            let value = Arc::new(compute());
            *cached = Some((epoch, value.clone()));
            value
        }
    }
}

/// Masked-LM pre-training of `M` for the shared trainer.
pub struct Pretraining<M> {
    train: Vec<Example>,
    held_out: Vec<Example>,
    format: SequenceFormat,
    vocab: MaskVocab,
    masking: Arc<dyn MaskingStrategy>,
    sentence_metric: Option<&'static str>,
    batch_size: usize,
    /// DOC-SENTENCES: batches grow until their padded size reaches this many tokens.
    token_budget: Option<usize>,
    /// Static masking: masks kept per example (`None`: a new mask every time).
    static_masks: Option<u64>,
    seed: u64,
    /// -ln of each token's add-one-smoothed frequency in the training text.
    unigram_nll: Arc<Vec<f64>>,
    /// The shuffled example order of each epoch.
    stream: EpochStream,
    /// Under a token budget: the batches of the epoch last asked for.
    batches: EpochCache<Vec<Vec<usize>>>,
    /// Under a token budget: the index of the first batch of each epoch so far (and one past).
    epoch_starts: Arc<Mutex<Vec<u64>>>,
    model: PhantomData<fn() -> M>,
}

impl<M> Clone for Pretraining<M> {
    fn clone(&self) -> Self {
        Self {
            train: self.train.clone(),
            held_out: self.held_out.clone(),
            format: self.format,
            vocab: self.vocab.clone(),
            masking: self.masking.clone(),
            sentence_metric: self.sentence_metric,
            batch_size: self.batch_size,
            token_budget: self.token_budget,
            static_masks: self.static_masks,
            seed: self.seed,
            unigram_nll: self.unigram_nll.clone(),
            stream: self.stream.clone(),
            batches: self.batches.clone(),
            epoch_starts: self.epoch_starts.clone(),
            model: PhantomData,
        }
    }
}

impl<M> std::fmt::Debug for Pretraining<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pretraining")
            .field("train_examples", &self.train.len())
            .field("held_out_examples", &self.held_out.len())
            .field("masking", &self.masking)
            .field("batch_size", &self.batch_size)
            .field("token_budget", &self.token_budget)
            .field("static_masks", &self.static_masks)
            .finish()
    }
}

/// The examples of `documents`; sentence pairs are drawn `pairings` times.
fn examples(documents: &[Vec<sesame_text::Segment>], layout: Layout, pairings: usize, rng: &mut StdRng) -> Vec<Example> {
    match layout {
        Layout::Pairs(pairs) => (0..pairings).flat_map(|_| sentence_pairs(documents, pairs, rng)).map(Example::Pair).collect(),
        Layout::Packed { packing, max_seq_len } => pack_sentences(documents, max_seq_len, packing).into_iter().map(Example::Packed).collect(),
    }
}

impl<M: PretrainingModel> Pretraining<M> {
    /// Build examples from `train` and `held_out` text, once; masks are drawn when a batch is
    /// made (dynamic masking, unless [`Self::with_static_masks`]).
    /// Batches hold `batch_size` examples, except under DOC-SENTENCES packing, where sequences
    /// cut short at a document's end would leave steps with fewer tokens: as RoBERTa does, the
    /// batch grows instead, while its padded size stays within `batch_size × max_seq_len`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        train: &Corpus,
        held_out: &Corpus,
        tokenizer: &Tokenizer,
        model_vocab_size: usize,
        layout: Layout,
        masking: Arc<dyn MaskingStrategy>,
        batch_size: usize,
        seed: u64,
    ) -> Result<Self, DataError> {
        if tokenizer.vocab_size() > model_vocab_size {
            return Err(DataError::VocabMismatch { tokenizer: tokenizer.vocab_size(), model: model_vocab_size });
        }
        if M::SENTENCE_TASK && matches!(layout, Layout::Packed { .. }) {
            return Err(DataError::NeedsPairs);
        }
        let special = tokenizer.special_tokens();
        let id = |t: &str| tokenizer.token_to_id(t).ok_or_else(|| TokenizerError::MissingSpecialToken { token: t.to_string() });
        let format = SequenceFormat { cls: id(&special.cls)?, sep: id(&special.sep)?, pad: special.pad.1 };
        let vocab = MaskVocab { mask_id: tokenizer.mask_token_id()?, vocab_size: tokenizer.vocab_size() as u32, special_ids: tokenizer.special_ids() };
        let mut rng = StdRng::seed_from_u64(seed);
        let train = tokenize_documents(train, tokenizer)?;
        let unigram_nll = Arc::new(unigram_nll(&train, tokenizer.vocab_size()));
        // The training text is paired `dupe_factor` times, the held-out text once.
        let pairings = match layout {
            Layout::Pairs(pairs) => pairs.dupe_factor.max(1),
            Layout::Packed { .. } => 1,
        };
        let train = examples(&train, layout, pairings, &mut rng);
        let held_out = examples(&tokenize_documents(held_out, tokenizer)?, layout, 1, &mut rng);
        // One batch needs that many examples of distinct text, not of repeated pairings.
        let distinct = train.len() / pairings;
        if distinct < batch_size.max(1) {
            return Err(DataError::TooSmall { examples: distinct, batch_size });
        }
        let sentence_metric = if M::SENTENCE_TASK { layout.sentence_metric() } else { None };
        let token_budget = match layout {
            Layout::Packed { packing: Packing::DocSentences, max_seq_len } => Some(batch_size * max_seq_len),
            _ => None,
        };
        let stream = EpochStream::new(train.len(), seed);
        Ok(Self {
            stream,
            train,
            held_out,
            format,
            vocab,
            masking,
            sentence_metric,
            batch_size,
            token_budget,
            static_masks: None,
            seed,
            unigram_nll,
            batches: Default::default(),
            epoch_starts: Arc::new(Mutex::new(vec![0])),
            model: PhantomData,
        })
    }

    /// Number of training examples (one epoch).
    pub fn num_train_examples(&self) -> usize {
        self.train.len()
    }

    /// The training examples, before masking.
    pub fn train_examples(&self) -> &[Example] {
        &self.train
    }

    /// Keep `copies` masks per example instead of drawing a new one every time (`None`, the
    /// default): BERT's static masking (`dupe_factor`), epoch `e` using copy `e mod copies`.
    /// `Some(1)` is one fixed mask per example; RoBERTa compares both (its table 1).
    pub fn with_static_masks(mut self, copies: Option<NonZeroU32>) -> Self {
        self.static_masks = copies.map(|c| u64::from(c.get()));
        self
    }

    /// Collate training examples `(index, epoch)` as batch `batch`: each row's mask seed
    /// follows the example and epoch under static masking, the batch and row otherwise.
    fn collate_train(&self, rows: &[(usize, u64)], batch: u64) -> MaskedBatch {
        let examples: Vec<&Example> = rows.iter().map(|&(i, _)| &self.train[i]).collect();
        let seeds: Vec<u64> = match self.static_masks {
            Some(copies) => rows.iter().map(|&(i, epoch)| mix(mix(self.seed, i as u64), epoch % copies)).collect(),
            None => (0..rows.len() as u64).map(|row| mix(mix(self.seed, batch), row)).collect(),
        };
        let masking = self.masking.stage(batch).unwrap_or(self.masking.as_ref());
        collate(&examples, self.format, masking, &self.vocab, &seeds)
    }

    /// The batches of `epoch` under a token budget, as fairseq builds RoBERTa's: the epoch's
    /// examples sorted by length (ties in shuffled order), cut into batches that grow while
    /// `rows × longest` stays within `budget`, the batches then shuffled. Computed once per epoch.
    fn budget_batches(&self, epoch: u64, budget: usize) -> Arc<Vec<Vec<usize>>> {
        per_epoch(&self.batches, epoch, || self.cut_into_batches(epoch, budget))
    }

    fn cut_into_batches(&self, epoch: u64, budget: usize) -> Vec<Vec<usize>> {
        let mut order = self.stream.order(epoch).to_vec();
        order.sort_by_key(|&i| self.train[i].len());
        let (mut batches, mut current, mut longest) = (Vec::new(), Vec::new(), 0);
        for i in order {
            let len = self.train[i].len();
            if !current.is_empty() && (current.len() + 1) * longest.max(len) > budget {
                batches.push(std::mem::take(&mut current));
                longest = 0;
            }
            longest = longest.max(len);
            current.push(i);
        }
        batches.push(current);
        batches.shuffle(&mut StdRng::seed_from_u64(self.seed ^ epoch.wrapping_mul(0x5851_F42D_4C95_7F2D)));
        batches
    }

    /// The held-out batches on the host, with masks fixed so that evaluations compare, and
    /// every target shown as `[MASK]`: the targets training's 80/10/10 leaves unchanged (10%)
    /// can be copied from the input, and counting them would put the loss ~0.5 nats below what
    /// the model predicts from context (and below the unigram baseline) without any learning.
    fn held_out_masked(&self) -> Vec<MaskedBatch> {
        self.held_out
            .chunks(self.batch_size.max(1))
            .enumerate()
            .map(|(i, chunk)| {
                let refs: Vec<&Example> = chunk.iter().collect();
                let seeds: Vec<u64> = (0..refs.len() as u64).map(|row| mix(u64::MAX - i as u64, row)).collect();
                let mut batch = collate(&refs, self.format, self.masking.as_ref(), &self.vocab, &seeds);
                for (id, &label) in batch.input_ids.iter_mut().zip(&batch.mlm_labels) {
                    if label != -100 {
                        *id = i64::from(self.vocab.mask_id);
                    }
                }
                batch
            })
            .collect()
    }

    /// The examples of training batch `index` under a token budget, with their epoch.
    fn budget_batch(&self, index: u64, budget: usize) -> Vec<(usize, u64)> {
        let mut starts = self.epoch_starts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while *starts.last().expect("starts at 0") <= index {
            let epoch = starts.len() as u64 - 1;
            let next = starts.last().expect("starts at 0") + self.budget_batches(epoch, budget).len() as u64;
            starts.push(next);
        }
        let epoch = starts.partition_point(|&s| s <= index) - 1;
        let batch = &self.budget_batches(epoch as u64, budget)[(index - starts[epoch]) as usize];
        batch.iter().map(|&i| (i, epoch as u64)).collect()
    }
}

impl<M: PretrainingModel> TrainTask for Pretraining<M> {
    type Model = M;
    type Batch = PretrainingBatch;
    type State = ();

    fn train_batch(&self, index: u64, device: &Device) -> PretrainingBatch {
        let rows = match self.token_budget {
            Some(budget) => self.budget_batch(index, budget),
            None => self.stream.batch(index, self.batch_size),
        };
        PretrainingBatch::new(&self.collate_train(&rows, index), M::READS_SPANS, device).with_seed(mix(self.seed ^ 0x0B1E_C71E, index))
    }

    fn held_out_batches(&self, device: &Device) -> Vec<PretrainingBatch> {
        self.held_out_masked()
            .iter()
            .enumerate()
            .map(|(i, batch)| PretrainingBatch::new(batch, M::READS_SPANS, device).with_seed(mix(u64::MAX - i as u64, 0x0B1E_C71E)))
            .collect()
    }

    /// `unigram_mlm_loss`: the held-out MLM loss of predicting every masked token by its
    /// (add-one smoothed) frequency in the training text, the best a model that ignores the
    /// context can do; a model that learned something from context ends below it.
    fn baselines(&self) -> std::collections::BTreeMap<String, f64> {
        let (mut sum, mut count) = (0.0, 0usize);
        for batch in self.held_out_masked() {
            for &label in batch.mlm_labels.iter().filter(|&&l| l != -100) {
                sum += self.unigram_nll.get(label as usize).copied().unwrap_or(f64::NAN);
                count += 1;
            }
        }
        if count == 0 {
            return Default::default();
        }
        [("unigram_mlm_loss".to_string(), sum / count as f64)].into()
    }

    fn step(&self, model: &M, batch: PretrainingBatch) -> StepOutput {
        model.pretraining_step(batch, self.sentence_metric)
    }
}

/// Loss and metrics of `model` on `batch`: MLM loss, perplexity and accuracy over the masked
/// tokens, and, for a model with a sentence head, the sentence task's loss and accuracy named
/// `{sentence_metric}_loss`, `{sentence_metric}_accuracy` (none when `sentence_metric` is `None`).
pub fn pretraining_step<M: MaskedLmObjective>(model: &M, batch: PretrainingBatch, sentence_metric: Option<&str>) -> StepOutput {
    let out = model.objective(batch.input, &batch.masked, batch.sentence_labels.clone());
    let mut counts = masked_lm_counts(out.prediction_logits.clone(), batch.masked.targets).to_vec();
    let mut losses = vec![out.mlm_loss];
    if let Some((loss, logits)) = &out.sentence {
        counts.push(logits.clone().argmax(1).squeeze_dim::<1>(1).equal(batch.sentence_labels.clone()).int().sum());
        losses.push(loss.clone());
    }
    if let Some(loss) = &out.span_boundary {
        losses.push(loss.clone());
    }
    // A failed read-back (device error) leaves NaN metrics; the trainer reports the error when
    // it reads the loss.
    let counts = read_back(Tensor::cat(counts, 0).float(), 0.0);
    let losses = read_back(Tensor::cat(losses, 0), f64::NAN);
    let masked = counts[0];
    let mut metrics = masked_lm_metrics(losses[0], masked, counts[1]).to_vec();
    if let (Some(name), true) = (sentence_metric, out.sentence.is_some()) {
        let rows = batch.sentence_labels.dims()[0] as f64;
        metrics.push(Metric::mean(&format!("{name}_loss"), losses[1] * rows, rows));
        metrics.push(Metric::mean(&format!("{name}_accuracy"), counts[2], rows));
    }
    if out.span_boundary.is_some() {
        // Weighted by the masked tokens; the SBO targets are those of spans inside their row.
        metrics.push(Metric::mean("sbo_loss", losses[losses.len() - 1] * masked, masked));
    }
    StepOutput { loss: out.loss, metrics, tokens: batch.tokens, predictions: None }
}

/// The predicted positions of `targets` `[masked]` (-100: the placeholder of a batch that
/// masks nothing) and how many of them `prediction_logits` `[masked, vocab]` get right, each
/// `[1]`, to read back with a step's other numbers.
pub fn masked_lm_counts(prediction_logits: Tensor<2>, targets: Tensor<1, Int>) -> [Tensor<1, Int>; 2] {
    let mlm = targets.clone().not_equal_elem(-100);
    let predicted = prediction_logits.argmax(1).squeeze_dim::<1>(1);
    [mlm.clone().int().sum(), predicted.equal(targets).bool_and(mlm).int().sum()]
}

/// `mlm_loss`, `perplexity` and `mlm_accuracy` of a batch whose `masked` targets have mean
/// loss `loss`, `correct` of them predicted ([`masked_lm_counts`]).
pub fn masked_lm_metrics(loss: f64, masked: f64, correct: f64) -> [Metric; 3] {
    [
        Metric::mean("mlm_loss", loss * masked, masked),
        Metric::exp_mean("perplexity", loss * masked, masked),
        Metric::mean("mlm_accuracy", correct, masked),
    ]
}

/// The values of `t` on the host, or `fallback` for each when the device fails to give them
/// (the trainer then reports the device's error when it reads the loss).
pub fn read_back(t: Tensor<1>, fallback: f64) -> Vec<f64> {
    let n = t.dims()[0];
    t.try_into_data().ok().and_then(|d| d.convert::<f64>().try_to_vec().ok()).unwrap_or(vec![fallback; n])
}
