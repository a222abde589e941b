//! XLNet's permutation-LM pre-training for the shared trainer, following the original data
//! pipeline (zihangdai/xlnet `data_utils.py`), not transformers' collator:
//!
//! - the corpus is one token stream (`<eod>` between documents, sentences alternating their
//!   sentence id), cut into `batch_size` rows; with `bi_data` half the rows, each read
//!   backwards, are added (the model then reads their positions backwards too);
//! - a window of `seq_len` tokens advances `reuse_len` tokens per batch along every row: its
//!   first `reuse_len` tokens continue the previous window (whose states the memory holds),
//!   then come a segment A and a segment B (B following A in the stream, or drawn from elsewhere
//!   in the row, with probability 1/2), `<sep>`s and a closing `<cls>` (`_split_a_and_b`);
//! - in each part, n-gram spans (n ≤ 5 with p ∝ 1/n, one span per `mask_alpha / mask_beta`
//!   context) are sampled to be predicted, `num_predict` tokens in all (`_sample_mask`): whole
//!   words, as the authors intended; `whole_words: false` gives the original code's behaviour,
//!   which counts pieces (zihangdai/xlnet PR #16);
//! - a factorisation order is drawn within `perm_size` blocks of each part (`_local_perm`):
//!   the tokens not predicted (and not `<sep>` / `<cls>`) come first and see only each other;
//!   a predicted token sees them and the predicted tokens before it in the order, never
//!   itself; the reused part never sees the new one;
//! - the model predicts the `num_predict` tokens through the query stream (`target_mapping`)
//!   over the memory of the previous window, and the memory is the objective's carried state:
//!   saved with every checkpoint, so that a killed run resumes exactly.
//!
//! Every random draw comes from a seed fixed by (seed, batch, row), so `--seed` reproduces a
//! run and a resumed run sees the same data.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sesame_layers::loss::{per_token_cross_entropy, IGNORE_INDEX};
use sesame_layers::OutputOptions;
use sesame_text::{mix_seeds, tokenize_documents, unigram_nll, Corpus, Tokenizer, TokenizerError, TokenizerKind};
use sesame_layers::{HfConfig, PretrainedModel};
use sesame_train::pretraining::run::{corpus_err, err, fit_and_export, open_run, preset_model, read_corpus, run_model, run_tokenizer, RunSpec};
use sesame_train::pretraining::{read_back, refuse_other_corruptions, Corruption, DataError, PermutationOptions, PretrainOptions, Pretrained};
use sesame_train::{BoxError, CarriedState, Metric, StepOutput, TrainTask};

use crate::config::XlnetConfig;
use crate::heads::XlnetLmHeadModel;
use crate::model::XlnetInput;

/// The family's name in messages and run directories.
pub const NAME: &str = "xlnet";

/// The tokenizer XLNet trains when none is given.
pub const TOKENIZER: TokenizerKind = TokenizerKind::UnigramClsLast;

/// How windows are cut, what is predicted and in which order (the original's flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermutationConfig {
    /// Tokens per window.
    pub seq_len: usize,
    /// Tokens at the start of a window that continue the previous one (and go into the memory).
    pub reuse_len: usize,
    /// Length of the blocks a factorisation order is drawn within.
    pub perm_size: usize,
    /// Tokens predicted per window.
    pub num_predict: usize,
    /// Context tokens per group of `mask_beta` predicted ones.
    pub mask_alpha: usize,
    /// Predicted tokens per `mask_alpha` of context.
    pub mask_beta: usize,
    /// The longest span, in words.
    pub max_gram: usize,
    /// Add every row read backwards (half the batch).
    pub bi_data: bool,
    /// Spans of whole words (the authors' intent), or of pieces (their code).
    pub whole_words: bool,
}

impl PermutationConfig {
    /// The original's proportions for windows of `seq_len` tokens: half reused, orders within
    /// blocks of the reused length, about a sixth predicted (85 of 512), spans of one predicted
    /// token in 6, `bi_data`, whole words.
    pub fn new(seq_len: usize) -> Self {
        let reuse_len = seq_len / 2;
        Self {
            seq_len,
            reuse_len,
            perm_size: reuse_len,
            num_predict: (seq_len * 85).div_ceil(512).max(2),
            mask_alpha: 6,
            mask_beta: 1,
            max_gram: 5,
            bi_data: true,
            whole_words: true,
        }
    }

    /// Check the settings for batches of `batch_size`; an error names the setting.
    pub fn validate(&self, batch_size: usize) -> Result<(), PermutationError> {
        let bad = |field: &'static str, reason: String| Err(PermutationError { field, reason });
        let new = self.seq_len.saturating_sub(self.reuse_len);
        if self.reuse_len == 0 || self.reuse_len + 5 > self.seq_len {
            return bad("reuse_len", format!("{} must be at least 1 and leave 5 of the {} tokens (A, B, two <sep>, <cls>)", self.reuse_len, self.seq_len));
        }
        if self.perm_size == 0 || self.reuse_len % self.perm_size != 0 || new % self.perm_size != 0 {
            return bad("perm_size", format!("{} must divide the reused {} and the new {} tokens", self.perm_size, self.reuse_len, new));
        }
        let (first, second) = (self.num_predict - self.num_predict / 2, self.num_predict / 2);
        if self.num_predict < 2 || first > self.reuse_len || second > new {
            return bad("num_predict", format!("{} must be at least 2, half of it in each part ({} and {} tokens)", self.num_predict, self.reuse_len, new));
        }
        if self.mask_beta == 0 || self.mask_alpha < self.mask_beta {
            return bad("mask_beta", format!("{} must be at least 1 and at most mask_alpha {}", self.mask_beta, self.mask_alpha));
        }
        if self.max_gram == 0 {
            return bad("max_gram", "must be at least 1".into());
        }
        if self.bi_data && batch_size % 2 == 1 {
            return bad("bi_data", format!("half of a batch is read backwards: the batch size {batch_size} must be even"));
        }
        Ok(())
    }
}

/// A permutation setting out of range.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {reason}")]
pub struct PermutationError {
    /// The setting.
    pub field: &'static str,
    /// Why.
    pub reason: String,
}

/// Why the permutation-LM task could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PermutationDataError {
    /// Too little text, a tokenizer error, or a vocabulary that does not fit.
    #[error(transparent)]
    Data(#[from] DataError),
    /// A setting out of range.
    #[error(transparent)]
    Setting(#[from] PermutationError),
}

impl From<TokenizerError> for PermutationDataError {
    fn from(e: TokenizerError) -> Self {
        Self::Data(DataError::Tokenizer(e))
    }
}

/// The special ids the pipeline writes or recognises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialIds {
    /// `<sep>`.
    pub sep: u32,
    /// `<cls>`.
    pub cls: u32,
    /// `<eod>`, between documents.
    pub eod: u32,
}

/// The token stream cut into rows (`data_utils.batchify`), backward copies added with `bi_data`.
#[derive(Clone, Debug)]
struct Rows {
    ids: Vec<Vec<u32>>,
    sentence: Vec<Vec<bool>>,
}

impl Rows {
    /// `documents` as one stream (`<eod>` after each, sentences alternating their id), cut into
    /// `rows` rows (or `rows / 2` forward and as many backward with `bi_data`).
    fn new(documents: &[Vec<sesame_text::Segment>], eod: u32, rows: usize, bi_data: bool) -> Self {
        let (mut ids, mut sentence) = (Vec::new(), Vec::new());
        let mut id = true;
        for doc in documents {
            for s in doc {
                ids.extend(&s.ids);
                sentence.extend(std::iter::repeat_n(id, s.ids.len()));
                id = !id;
            }
            ids.push(eod);
            sentence.push(id);
            id = !id;
        }
        let forward = if bi_data { rows / 2 } else { rows }.max(1);
        let len = ids.len() / forward;
        fn cut<T: Clone>(v: &[T], forward: usize, len: usize, bi_data: bool) -> Vec<Vec<T>> {
            let mut rows: Vec<Vec<T>> = (0..forward).map(|r| v[r * len..(r + 1) * len].to_vec()).collect();
            if bi_data {
                let backward: Vec<Vec<T>> = rows.iter().map(|r| r.iter().rev().cloned().collect()).collect();
                rows.extend(backward);
            }
            rows
        }
        Self { ids: cut(&ids, forward, len, bi_data), sentence: cut(&sentence, forward, len, bi_data) }
    }

    fn len(&self) -> usize {
        self.ids.first().map_or(0, Vec::len)
    }
}

/// Segments A and B after `begin` in a row (`_split_a_and_b`): A up to a sentence end, B either
/// what follows A (`label` 1) or a run of whole sentences drawn from the row (`label` 0), both cut
/// to `total` tokens, the longer first. Returns A's and B's ranges and the label. Near the end of
/// the row A may have no sentence end to stop at; it is then cut there (the original drops the
/// rest of the file).
pub fn split_a_and_b(sentence: &[bool], begin: usize, total: usize, rng: &mut impl Rng) -> (std::ops::Range<usize>, std::ops::Range<usize>, u8) {
    let len = sentence.len();
    let mut end = begin + 1;
    let mut cuts = Vec::new();
    while end < len {
        if sentence[end] != sentence[end - 1] {
            if end - begin >= total {
                break;
            }
            cuts.push(end);
        }
        end += 1;
    }
    let (mut a_end, mut b_begin, mut b_end, label);
    if cuts.is_empty() || rng.random::<f64>() < 0.5 {
        label = 0;
        a_end = if cuts.is_empty() { end.min(len - 1) } else { cuts[rng.random_range(0..cuts.len())] };
        let b_len = total.saturating_sub(a_end - begin).max(1);
        b_begin = rng.random_range(0..=(len - 1 - b_len));
        b_end = b_begin + b_len;
        while b_begin > 0 && sentence[b_begin - 1] == sentence[b_begin] {
            b_begin -= 1;
        }
        while b_end < len - 1 && sentence[b_end - 1] == sentence[b_end] {
            b_end += 1;
        }
    } else {
        label = 1;
        a_end = cuts[rng.random_range(0..cuts.len())];
        b_begin = a_end;
        b_end = end.min(len - 1);
    }
    while (a_end - begin) + (b_end - b_begin) > total {
        if a_end - begin > b_end - b_begin {
            a_end -= 1;
        } else {
            b_end -= 1;
        }
    }
    (begin..a_end, b_begin..b_end, label)
}

/// Which tokens of `seg` to predict (`_sample_mask`): spans of n words (n ≤ `max_gram`, p ∝ 1/n),
/// each after a random part of a context of `n · mask_alpha / mask_beta` tokens, until `goal`
/// tokens are chosen (then single tokens at random fill the rest). `start[id]`: whether a token
/// starts a word (the original's `_is_start_piece`: a piece opening with `▁` or `<`, or a
/// punctuation mark). With `whole_words` false a span counts pieces, as the original code does.
/// A word longer than what is left of the goal ends the span sampling. `reverse` samples from
/// the end (the rows read backwards).
pub fn sample_mask(seg: &[u32], start: &[bool], goal: usize, config: &PermutationConfig, reverse: bool, rng: &mut impl Rng) -> Vec<bool> {
    let n_tokens = seg.len();
    let order: Vec<u32> = if reverse { seg.iter().rev().copied().collect() } else { seg.to_vec() };
    let is_start = |i: usize| start.get(order[i] as usize).copied().unwrap_or(true);
    let weights: Vec<f64> = (1..=config.max_gram).map(|n| 1.0 / n as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut mask = vec![false; n_tokens];
    let (mut chosen, mut cur) = (0usize, 0usize);
    while cur < n_tokens && chosen < goal {
        let mut draw = rng.random::<f64>() * total;
        let mut n = config.max_gram;
        for (k, w) in weights.iter().enumerate() {
            if draw < *w {
                n = k + 1;
                break;
            }
            draw -= w;
        }
        let n = n.min(goal - chosen);
        let context = n * config.mask_alpha / config.mask_beta;
        let left = rng.random_range(0..context.max(1));
        let mut beg = cur + left;
        while beg < n_tokens && !is_start(beg) {
            beg += 1;
        }
        if beg >= n_tokens {
            break;
        }
        let (mut end, mut grams) = (beg + 1, 1);
        while end < n_tokens {
            // The original tests the span's first piece here, so every piece counts as a word.
            if !config.whole_words || is_start(end) {
                grams += 1;
                if grams > n {
                    break;
                }
            }
            end += 1;
        }
        if end >= n_tokens || chosen + (end - beg) > goal {
            break;
        }
        mask[beg..end].iter_mut().for_each(|m| *m = true);
        chosen += end - beg;
        cur = end + (context - left);
    }
    while chosen < goal {
        let i = rng.random_range(0..n_tokens);
        if !mask[i] {
            mask[i] = true;
            chosen += 1;
        }
    }
    if reverse {
        mask.reverse();
    }
    mask
}

/// A factorisation order within blocks and its masks (`_local_perm`): `order[j]`, a permutation
/// of `0..perm_size`, puts the `j`-th token of every block at place `block · perm_size + order[j]`.
/// Returns `perm_mask` `[n × n]` (row-major, 1 = `i` may not see `j`) and which tokens are
/// predicted (`is_masked`, not `<sep>` / `<cls>`). Tokens neither predicted nor `<sep>` / `<cls>`
/// come before everything: every token sees them, and they see only each other. A predicted
/// token sees, besides them, the predicted tokens and `<sep>` / `<cls>` before it in the order,
/// and not itself; `<sep>` and `<cls>` see those before them and themselves.
pub fn local_perm(inputs: &[u32], is_masked: &[bool], order: &[usize], special: SpecialIds) -> (Vec<f32>, Vec<bool>) {
    let n = inputs.len();
    let size = order.len();
    let index: Vec<i64> = (0..n).map(|p| (p / size * size + order[p % size]) as i64).collect();
    let functional: Vec<bool> = inputs.iter().map(|&t| t == special.sep || t == special.cls).collect();
    let visible: Vec<bool> = (0..n).map(|p| !is_masked[p] && !functional[p]).collect();
    let rank: Vec<i64> = (0..n).map(|p| if visible[p] { -1 } else { index[p] }).collect();
    let target: Vec<bool> = (0..n).map(|p| is_masked[p] && !functional[p]).collect();
    let self_rank: Vec<i64> = (0..n).map(|p| if target[p] { rank[p] } else { rank[p] + 1 }).collect();
    let mut perm_mask = vec![0f32; n * n];
    for i in 0..n {
        for j in 0..n {
            if self_rank[i] <= rank[j] && !visible[j] {
                perm_mask[i * n + j] = 1.0;
            }
        }
    }
    (perm_mask, target)
}

/// One window of one row, ready to batch.
#[derive(Clone, Debug, PartialEq)]
pub struct PermutationExample {
    /// Tokens `[seq_len]`: reused part, A, `<sep>`, B, `<sep>`, `<cls>`.
    pub input_ids: Vec<u32>,
    /// Segment ids: 0 for the reused part, A and its `<sep>`; 1 for B and its `<sep>`; 2 for `<cls>`.
    pub token_type_ids: Vec<i64>,
    /// `[seq_len × seq_len]`, 1 = may not see.
    pub perm_mask: Vec<f32>,
    /// The predicted positions, in order (at most `num_predict`).
    pub targets: Vec<usize>,
    /// Whether B follows A.
    pub label: u8,
}

impl PermutationExample {
    /// The window `reused` ++ `a <sep> b <sep> <cls>` (`seq_len` tokens in all) with its
    /// predicted tokens (`_sample_mask`, `reverse` for a row read backwards) and factorisation
    /// order (`_local_perm`) drawn from `rng`; `start[id]` says whether a token starts a word.
    pub fn new([reused, a, b]: [&[u32]; 3], label: u8, start: &[bool], c: &PermutationConfig, special: SpecialIds, reverse: bool, rng: &mut impl Rng) -> Self {
        let mut second: Vec<u32> = a.to_vec();
        second.push(special.sep);
        second.extend(b);
        second.extend([special.sep, special.cls]);
        let (goal_0, goal_1) = (c.num_predict - c.num_predict / 2, c.num_predict / 2);
        let mask_0 = sample_mask(reused, start, goal_0, c, reverse, rng);
        let mask_1 = sample_mask(&second, start, goal_1, c, reverse, rng);
        let mut order: Vec<usize> = (0..c.perm_size).collect();
        order.shuffle(rng);
        let (pm_0, target_0) = local_perm(reused, &mask_0, &order, special);
        order.shuffle(rng);
        let (pm_1, target_1) = local_perm(&second, &mask_1, &order, special);
        // The reused part never sees the new one; the new one sees all of the reused part.
        let (n, r) = (reused.len() + second.len(), reused.len());
        let mut perm_mask = vec![0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                perm_mask[i * n + j] = match (i < r, j < r) {
                    (true, true) => pm_0[i * r + j],
                    (true, false) => 1.0,
                    (false, true) => 0.0,
                    (false, false) => pm_1[(i - r) * (n - r) + (j - r)],
                };
            }
        }
        let mut input_ids = reused.to_vec();
        input_ids.extend(&second);
        let mut token_type_ids = vec![0i64; r + a.len() + 1];
        token_type_ids.extend(std::iter::repeat_n(1, b.len() + 1));
        token_type_ids.push(2);
        let targets = target_0.iter().chain(&target_1).enumerate().filter(|(_, &t)| t).map(|(p, _)| p).take(c.num_predict).collect();
        Self { input_ids, token_type_ids, perm_mask, targets, label }
    }
}

/// One batch on a device.
#[derive(Clone, Debug)]
pub struct PermutationBatch {
    /// `[batch, seq]`.
    pub input_ids: Tensor<2, Int>,
    /// `[batch, seq]`.
    pub token_type_ids: Tensor<2, Int>,
    /// `[batch, seq, seq]`.
    pub perm_mask: Tensor<3>,
    /// `[batch, num_predict, seq]`, zero rows after a row's targets.
    pub target_mapping: Tensor<3>,
    /// The predicted tokens `[batch, num_predict]`, -100 after a row's targets.
    pub labels: Tensor<2, Int>,
    /// Tokens in the batch (every window's, as the model reads them all).
    pub tokens: usize,
}

/// The memory of the previous window: each layer's states `[rows, mem, d]` (XLNet's `mems`).
#[derive(Clone, Debug, Default)]
pub struct Memory(pub Option<Vec<Tensor<3>>>);

impl CarriedState for Memory {
    fn save(&self, dir: &Path) -> Result<(), BoxError> {
        let mut tensors = Vec::new();
        for (i, mem) in self.0.iter().flatten().enumerate() {
            let shape = mem.dims().to_vec();
            let values: Vec<f32> = mem.clone().into_data().convert::<f32>().try_into_vec::<f32>().map_err(|e| format!("{e:?}"))?;
            tensors.push((format!("mems.{i}"), shape, values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()));
        }
        let views = tensors
            .iter()
            .map(|(name, shape, bytes)| Ok((name.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)?)))
            .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
        std::fs::write(dir.join("memory.safetensors"), safetensors::serialize(views, None)?)?;
        Ok(())
    }

    fn load(dir: &Path, device: &Device) -> Result<Self, BoxError> {
        let bytes = std::fs::read(dir.join("memory.safetensors"))?;
        let file = safetensors::SafeTensors::deserialize(&bytes)?;
        let mut mems = Vec::new();
        while let Ok(view) = file.tensor(&format!("mems.{}", mems.len())) {
            let [b, m, d]: [usize; 3] = view.shape().try_into().map_err(|_| format!("memory tensor of shape {:?}", view.shape()))?;
            let values: Vec<f32> = view.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            mems.push(Tensor::from_data(TensorData::new(values, [b, m, d]), device));
        }
        Ok(Memory((!mems.is_empty()).then_some(mems)))
    }
}

/// XLNet's permutation-LM pre-training as a task for the shared trainer.
#[derive(Clone, Debug)]
pub struct PermutationLm {
    train: Arc<Rows>,
    held_out: Arc<Rows>,
    config: PermutationConfig,
    special: SpecialIds,
    /// Whether each vocabulary id starts a word.
    start: Arc<Vec<bool>>,
    seed: u64,
    /// -ln of each token's add-one-smoothed frequency in the training text.
    unigram_nll: Arc<Vec<f64>>,
}

impl PermutationLm {
    /// The task on `train` and `held_out` text tokenized by `tokenizer`, in batches of
    /// `batch_size` rows.
    pub fn new(
        train: &Corpus,
        held_out: &Corpus,
        tokenizer: &Tokenizer,
        vocab_size: usize,
        config: PermutationConfig,
        batch_size: usize,
        seed: u64,
    ) -> Result<Self, PermutationDataError> {
        config.validate(batch_size)?;
        if tokenizer.vocab_size() > vocab_size {
            return Err(DataError::VocabMismatch { tokenizer: tokenizer.vocab_size(), model: vocab_size }.into());
        }
        let id = |t: &str| tokenizer.token_to_id(t).ok_or_else(|| TokenizerError::MissingSpecialToken { token: t.to_string() });
        let s = tokenizer.special_tokens();
        let special = SpecialIds { sep: id(&s.sep)?, cls: id(&s.cls)?, eod: id("<eod>").or_else(|_| id(&s.sep))? };
        let punctuation = |p: &str| p.chars().count() == 1 && p.chars().all(|c| c.is_ascii_punctuation());
        let start = (0..tokenizer.vocab_size() as u32)
            .map(|i| tokenizer.id_to_token(i).is_none_or(|p| p.starts_with('▁') || p.starts_with('<') || punctuation(&p)))
            .collect();
        let train_docs = tokenize_documents(train, tokenizer)?;
        let unigram_nll = Arc::new(unigram_nll(&train_docs, tokenizer.vocab_size()));
        let train = Rows::new(&train_docs, special.eod, batch_size, config.bi_data);
        let held_out = Rows::new(&tokenize_documents(held_out, tokenizer)?, special.eod, batch_size, config.bi_data);
        let task = Self { train: Arc::new(train), held_out: Arc::new(held_out), config, special, start: Arc::new(start), seed, unigram_nll };
        if task.windows(&task.train) == 0 {
            return Err(DataError::TooSmall { examples: 0, batch_size }.into());
        }
        Ok(task)
    }

    /// Windows per pass over `rows`.
    fn windows(&self, rows: &Rows) -> usize {
        let needed = self.config.seq_len + 2;
        if rows.len() < needed {
            return 0;
        }
        (rows.len() - needed) / self.config.reuse_len + 1
    }

    /// Windows per pass over the training text (a pass is this many batches).
    pub fn num_train_windows(&self) -> usize {
        self.windows(&self.train)
    }

    /// Window `window` of row `row` of `rows`, its random draws from `rng`.
    fn example(&self, rows: &Rows, window: usize, row: usize, rng: &mut StdRng) -> PermutationExample {
        let c = &self.config;
        let (ids, sentence) = (&rows.ids[row], &rows.sentence[row]);
        let begin = window * c.reuse_len;
        let reused = &ids[begin..begin + c.reuse_len];
        let (a, b, label) = split_a_and_b(sentence, begin + c.reuse_len, c.seq_len - c.reuse_len - 3, rng);
        let reverse = c.bi_data && row >= rows.ids.len() / 2;
        PermutationExample::new([reused, &ids[a], &ids[b]], label, &self.start, c, self.special, reverse, rng)
    }

    /// Batch `window` of `rows`, row `r` drawn from a seed of (`seed`, `index`, `r`).
    fn batch(&self, rows: &Rows, window: usize, seed: u64, device: &Device) -> PermutationBatch {
        let examples: Vec<PermutationExample> = (0..rows.ids.len())
            .map(|row| self.example(rows, window, row, &mut StdRng::seed_from_u64(mix_seeds(seed, row as u64))))
            .collect();
        collate(&examples, self.config.num_predict, device)
    }
}

/// Stack `examples` into a batch with `num_predict` predicted rows each.
pub fn collate(examples: &[PermutationExample], num_predict: usize, device: &Device) -> PermutationBatch {
    let (b, s, p) = (examples.len(), examples.first().map_or(0, |e| e.input_ids.len()), num_predict);
    let mut mapping = vec![0f32; b * p * s];
    let mut labels = vec![IGNORE_INDEX; b * p];
    for (r, e) in examples.iter().enumerate() {
        for (k, &pos) in e.targets.iter().enumerate() {
            mapping[(r * p + k) * s + pos] = 1.0;
            labels[r * p + k] = i64::from(e.input_ids[pos]);
        }
    }
    let ids: Vec<i64> = examples.iter().flat_map(|e| e.input_ids.iter().map(|&t| i64::from(t))).collect();
    let types: Vec<i64> = examples.iter().flat_map(|e| e.token_type_ids.iter().copied()).collect();
    let perm: Vec<f32> = examples.iter().flat_map(|e| e.perm_mask.iter().copied()).collect();
    PermutationBatch {
        input_ids: Tensor::from_data(TensorData::new(ids, [b, s]), device),
        token_type_ids: Tensor::from_data(TensorData::new(types, [b, s]), device),
        perm_mask: Tensor::from_data(TensorData::new(perm, [b, s, s]), device),
        target_mapping: Tensor::from_data(TensorData::new(mapping, [b, p, s]), device),
        labels: Tensor::from_data(TensorData::new(labels, [b, p]), device),
        tokens: b * s,
    }
}

impl TrainTask for PermutationLm {
    type Model = XlnetLmHeadModel;
    type Batch = PermutationBatch;
    type State = Memory;

    /// Batch `index`: window `index` mod the windows of a pass, along every row.
    fn train_batch(&self, index: u64, device: &Device) -> PermutationBatch {
        let window = (index % self.windows(&self.train) as u64) as usize;
        self.batch(&self.train, window, mix_seeds(self.seed, index), device)
    }

    /// The held-out text's windows in order (the memory runs along them), fixed draws.
    fn held_out_batches(&self, device: &Device) -> Vec<PermutationBatch> {
        (0..self.windows(&self.held_out)).map(|w| self.batch(&self.held_out, w, mix_seeds(u64::MAX, w as u64), device)).collect()
    }

    /// `unigram_loss`: every held-out predicted token by its frequency in the training text.
    fn baselines(&self) -> std::collections::BTreeMap<String, f64> {
        let (mut total, mut count) = (0.0, 0usize);
        for w in 0..self.windows(&self.held_out) {
            for row in 0..self.held_out.ids.len() {
                let e = self.example(&self.held_out, w, row, &mut StdRng::seed_from_u64(mix_seeds(mix_seeds(u64::MAX, w as u64), row as u64)));
                for &p in &e.targets {
                    total += self.unigram_nll.get(e.input_ids[p] as usize).copied().unwrap_or(f64::NAN);
                    count += 1;
                }
            }
        }
        if count == 0 {
            return Default::default();
        }
        [("unigram_loss".to_string(), total / count as f64)].into()
    }

    fn step(&self, model: &XlnetLmHeadModel, batch: PermutationBatch) -> StepOutput {
        self.step_with_state(model, batch, &mut Memory::default())
    }

    fn step_with_state(&self, model: &XlnetLmHeadModel, batch: PermutationBatch, memory: &mut Memory) -> StepOutput {
        permutation_step(model, batch, memory)
    }
}

/// Loss and metrics of `model` on `batch` after `memory`, which becomes this window's: the
/// mean cross-entropy of the predicted tokens (the original's loss), `perplexity` and
/// `token_accuracy`.
pub fn permutation_step(model: &XlnetLmHeadModel, batch: PermutationBatch, memory: &mut Memory) -> StepOutput {
    let mut input = XlnetInput::new(batch.input_ids);
    input.token_type_ids = Some(batch.token_type_ids);
    input.perm_mask = Some(batch.perm_mask);
    input.target_mapping = Some(batch.target_mapping);
    input.mems = memory.0.take();
    input.use_mems = Some(true);
    let out = model.forward(input, None, OutputOptions::default());
    memory.0 = out.transformer.mems;
    let [b, p] = batch.labels.dims();
    let loss = per_token_cross_entropy(out.logits.clone(), batch.labels.clone());
    let valid = batch.labels.clone().not_equal_elem(IGNORE_INDEX);
    let correct = out.logits.argmax(2).reshape([b, p]).equal(batch.labels).bool_and(valid.clone()).float().sum();
    let sums = Tensor::cat(vec![valid.float().sum(), correct, loss.clone().detach()], 0);
    let [tokens, correct, mean] = read_back(sums, f64::NAN)[..] else { unreachable!("three sums") };
    let metrics = vec![Metric::exp_mean("perplexity", mean * tokens, tokens), Metric::mean("token_accuracy", correct, tokens)];
    StepOutput { loss, metrics, tokens: batch.tokens, predictions: None }
}

impl XlnetConfig {
    /// A fresh configuration of size `name` for pre-training with `permutation`: `tiny` (2
    /// layers, width 128), `mini` (4, 256), `small` (4, 512), `base` (12, 768, xlnet-base's
    /// shape), with 64-wide heads and feed-forward 4 × width, for a vocabulary of `vocab_size`
    /// whose `<pad>`, `<s>` and `</s>` are `pad`, `bos` and `eos`; the memory keeps `mem_len`
    /// states, `reuse_len` of each window. Dropout and the rest are HF's defaults.
    pub fn preset(name: &str, vocab_size: usize, permutation: &PermutationConfig, mem_len: usize, [pad, bos, eos]: [usize; 3]) -> Result<Self, sesame_layers::ConfigError> {
        let (n_layer, d_model) = match name {
            "tiny" => (2, 128),
            "mini" => (4, 256),
            "small" => (4, 512),
            "base" => (12, 768),
            other => {
                return Err(sesame_layers::ConfigError::Invalid { field: "preset".into(), reason: format!("unknown preset `{other}` (expected tiny, mini, small or base)") })
            }
        };
        let config = Self {
            vocab_size,
            d_model,
            n_layer,
            n_head: d_model / 64,
            d_inner: 4 * d_model,
            mem_len: Some(mem_len),
            reuse_len: Some(permutation.reuse_len),
            bi_data: permutation.bi_data,
            pad_token_id: Some(pad),
            bos_token_id: Some(bos),
            eos_token_id: Some(eos),
            ..Self::default()
        };
        config.validate()?;
        Ok(config)
    }
}

impl XlnetConfig {
    /// The configuration to export a pre-trained model with: `bi_data` off and no `reuse_len`,
    /// as XLNet's released checkpoints are (both shape the pre-training data; transformers runs
    /// `bi_data` only on even batches).
    pub fn for_inference(&self) -> Self {
        Self { bi_data: false, reuse_len: None, ..self.clone() }
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    const SPECIAL: SpecialIds = SpecialIds { sep: 4, cls: 3, eod: 7 };

    /// The example of the paper's figure, written out: tokens 10 11 12 13 <sep>, order
    /// 3 → 2 → 4 → 1 → 5 (positions 2, 1, 3, 0, 4), tokens 11 and 13 predicted.
    #[test]
    fn local_perm_is_the_original_algorithm() {
        let inputs = [10, 11, 12, 13, 4];
        let is_masked = [false, true, false, true, false];
        // One block of 5; position p is placed at order[p]: 2 → 0, 1 → 1, 3 → 2, 0 → 3, 4 → 4.
        let order = [3, 1, 0, 2, 4];
        let (perm, target) = local_perm(&inputs, &is_masked, &order, SPECIAL);
        assert_eq!(target, [false, true, false, true, false]);
        let sees = |i: usize, j: usize| perm[i * 5 + j] == 0.0;
        // Not predicted (10, 12): see each other and themselves, nothing else.
        for i in [0, 2] {
            for j in 0..5 {
                assert_eq!(sees(i, j), j == 0 || j == 2, "{i} sees {j}");
            }
        }
        // 11 (place 1) sees the visible tokens only: 13 (place 2) and <sep> (place 4) come later.
        assert!(sees(1, 0) && sees(1, 2) && !sees(1, 1) && !sees(1, 3) && !sees(1, 4));
        // 13 (place 2) sees 11 (place 1) but not itself or <sep>.
        assert!(sees(3, 0) && sees(3, 1) && sees(3, 2) && !sees(3, 3) && !sees(3, 4));
        // <sep> (place 4, last) sees everything, itself included.
        assert!((0..5).all(|j| sees(4, j)));
    }

    /// For random orders and masks: predicted tokens never see themselves, visible tokens see
    /// only visible tokens, and a predicted token sees another exactly when it comes earlier
    /// in the order.
    #[test]
    fn local_perm_keeps_the_papers_invariants() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..50 {
            let n = 12;
            let inputs: Vec<u32> = (0..n).map(|i| if i == 5 { 4 } else if i == 11 { 3 } else { 20 + i as u32 }).collect();
            let is_masked: Vec<bool> = (0..n).map(|_| rng.random::<f64>() < 0.4).collect();
            let mut order: Vec<usize> = (0..4).collect();
            order.shuffle(&mut rng);
            let (perm, target) = local_perm(&inputs, &is_masked, &order, SPECIAL);
            let place = |p: usize| p / 4 * 4 + order[p % 4];
            let visible = |p: usize| !is_masked[p] && inputs[p] != 4 && inputs[p] != 3;
            for i in 0..n {
                for j in 0..n {
                    let sees = perm[i * n + j] == 0.0;
                    if visible(j) {
                        assert!(sees, "{j} is visible to all");
                    } else if visible(i) {
                        assert!(!sees, "visible {i} sees only visible tokens, not {j}");
                    } else if i == j {
                        assert_eq!(sees, !target[i], "{i} and itself");
                    } else {
                        assert_eq!(sees, place(j) < place(i), "{i} and {j}");
                    }
                }
            }
        }
    }

    #[test]
    fn sample_mask_chooses_the_goal_in_word_spans() {
        let config = PermutationConfig { max_gram: 3, ..PermutationConfig::new(64) };
        // Ids below 50 start a word; 60 continues one.
        let start: Vec<bool> = (0..100).map(|i| i < 50).collect();
        let seg: Vec<u32> = (0..40).map(|i| if i % 3 == 1 { 60 } else { 10 + i as u32 % 30 }).collect();
        for seed in 0..30 {
            let mask = sample_mask(&seg, &start, 6, &config, seed % 2 == 1, &mut StdRng::seed_from_u64(seed));
            assert_eq!(mask.iter().filter(|&&m| m).count(), 6, "seed {seed}");
        }
        // Words of two pieces, one-word spans, a context of one: every other word is predicted,
        // whole; the original code (pieces) predicts every other piece, never a word's second.
        let seg: Vec<u32> = (0..24).map(|i| if i % 2 == 0 { 10 } else { 60 }).collect();
        let one = PermutationConfig { max_gram: 1, mask_alpha: 1, mask_beta: 1, ..config };
        let words = sample_mask(&seg, &start, 6, &one, false, &mut StdRng::seed_from_u64(1));
        let expected: Vec<bool> = (0..24).map(|i| i < 12 && (i / 2) % 2 == 0).collect();
        assert_eq!(words, expected);
        let pieces = sample_mask(&seg, &start, 6, &PermutationConfig { whole_words: false, ..one }, false, &mut StdRng::seed_from_u64(1));
        let expected: Vec<bool> = (0..24).map(|i| i < 12 && i % 2 == 0).collect();
        assert_eq!(pieces, expected);
    }

    #[test]
    fn split_keeps_a_and_b_within_the_total() {
        let sentence: Vec<bool> = (0..200).map(|i| (i / 7) % 2 == 0).collect();
        for seed in 0..100 {
            let (a, b, label) = split_a_and_b(&sentence, 50, 20, &mut StdRng::seed_from_u64(seed));
            assert!(a.start == 50 && a.len() + b.len() <= 20 && !a.is_empty() && !b.is_empty(), "{a:?} {b:?}");
            if label == 1 {
                assert_eq!(a.end, b.start, "B follows A");
            }
        }
    }

    #[test]
    fn settings_are_checked_by_name() {
        assert_eq!(PermutationConfig::new(32).validate(8), Ok(()));
        assert_eq!(PermutationConfig::new(32).validate(7).unwrap_err().field, "bi_data");
        assert_eq!(PermutationConfig { perm_size: 5, ..PermutationConfig::new(32) }.validate(8).unwrap_err().field, "perm_size");
        assert_eq!(PermutationConfig { reuse_len: 30, perm_size: 2, ..PermutationConfig::new(32) }.validate(8).unwrap_err().field, "reuse_len");
        assert_eq!(PermutationConfig { num_predict: 40, ..PermutationConfig::new(32) }.validate(8).unwrap_err().field, "num_predict");
    }
}

/// Default optimizer steps of an XLNet run.
pub const STEPS: u64 = 1500;

/// The windows' settings of `options` for `seq_len` tokens and `batch_size` rows, checked; an
/// error names the flag at fault (`--seq-len` for a default it implies).
pub fn permutation_config(options: &PermutationOptions, seq_len: usize, batch_size: usize) -> Result<PermutationConfig, String> {
    let mut permutation = PermutationConfig::new(seq_len);
    permutation.reuse_len = options.reuse_len.unwrap_or(permutation.reuse_len);
    permutation.perm_size = options.perm_size.unwrap_or(permutation.reuse_len);
    permutation.num_predict = options.num_predict.unwrap_or(permutation.num_predict);
    permutation.mask_alpha = options.mask_alpha.unwrap_or(permutation.mask_alpha);
    permutation.mask_beta = options.mask_beta.unwrap_or(permutation.mask_beta);
    permutation.bi_data = options.bi_data;
    permutation.whole_words = options.whole_words;
    // A setting left to its default, which follows from seq_len, is --seq-len's fault.
    let given = |field: &str| match field {
        "reuse_len" => options.reuse_len.is_some(),
        "perm_size" => options.perm_size.is_some() || options.reuse_len.is_some(),
        "num_predict" => options.num_predict.is_some(),
        _ => true,
    };
    permutation.validate(batch_size).map_err(|e| match e.field {
        "bi_data" => format!("--batch-size {batch_size}: {} (or train without backward rows: --no-bi-data)", e.reason),
        field if !given(field) => format!(
            "--seq-len {seq_len}: too short for XLNet's windows: the {field} it implies fails ({}); give a longer --seq-len or set --{}",
            e.reason,
            field.replace('_', "-")
        ),
        field => format!("--{}: {}", field.replace('_', "-"), e.reason),
    })?;
    Ok(permutation)
}

/// Pre-train XLNet (`cargo xtask train xlnet`): the permutation LM as the original's data
/// pipeline, the memory of each window carried to the next, with the shared trainer's
/// progress, checkpoints, resume and export. The exported model is an `XLNetLMHeadModel` that
/// transformers loads.
pub fn pretrain(job: &PretrainOptions, device: Device) -> Result<Pretrained, String> {
    let job = &job.resolved()?;
    job.check()?;
    let instead = "XLNet's permutation LM is set by --reuse-len, --num-predict, --perm-size, …";
    refuse_other_corruptions(job, Corruption::Permutation, instead)?;
    if let Some(objective) = job.objective {
        return Err(format!("--objective {}: XLNet trains with its permutation LM", objective.name()));
    }
    if job.teacher.is_some() {
        return Err("--teacher distils a masked LM; XLNet trains with its permutation LM".into());
    }
    let options = &job.permutation;
    let permutation = permutation_config(options, job.seq_len, job.batch_size)?;
    let mem_len = options.mem_len.unwrap_or(2 * permutation.reuse_len);
    let steps = job.steps.unwrap_or(STEPS);
    let spec = RunSpec::new(job, format!("{permutation:?}, mem_len {mem_len}"), "one stream, windows advancing by reuse_len".into());
    let out = &open_run(job, NAME, &spec)?;
    let (train_text, held_out_text) = read_corpus(job)?;
    let (tokenizer, tok_config) = run_tokenizer(job, out, TOKENIZER, &train_text)?;
    let train_device = device.autodiff();
    let special = |t: &str| tokenizer.token_to_id(t).map(|id| id as usize).ok_or_else(|| format!("the tokenizer has no {t}"));
    let ids = [tokenizer.special_tokens().pad.1 as usize, special("<s>")?, special("</s>")?];
    let (model, config) = run_model::<XlnetLmHeadModel>(job, out, &train_device, || {
        preset_model(&train_device, XlnetConfig::preset(job.preset(), tokenizer.vocab_size(), &permutation, mem_len, ids))
    })?;
    if config.bi_data != permutation.bi_data {
        return Err(format!("the model's config.json says bi_data {}, the run {}: they must agree (--no-bi-data)", config.bi_data, permutation.bi_data));
    }
    let task = PermutationLm::new(&train_text, &held_out_text, &tokenizer, config.vocab_size, permutation.clone(), job.batch_size, job.seed).map_err(|e| corpus_err(job, e))?;
    eprintln!(
        "model: {}, {} parameters; {} windows of {} tokens per pass ({} reused, {} predicted, memory {mem_len}); {} steps of {} x {}",
        XlnetLmHeadModel::architecture(),
        model.num_params(),
        task.num_train_windows(),
        permutation.seq_len,
        permutation.reuse_len,
        permutation.num_predict,
        steps,
        job.grad_accum,
        job.batch_size
    );
    fit_and_export(job, steps, out, &task, model, &train_device, (&tokenizer, &tok_config), |model, dir| {
        model.save_pretrained(&config.for_inference(), dir)?;
        Ok(vec![dir.to_path_buf()])
    })
}

/// `export` of an XLNet run: the language model in HF layout (`bi_data` and `reuse_len`, which
/// shape the pre-training data, left out).
pub fn export(run: &Path, checkpoint: &Path, out: &Path, device: &Device) -> Result<Vec<PathBuf>, String> {
    let config = XlnetConfig::from_dir(run).map_err(err)?;
    let model = XlnetLmHeadModel::init(&config, device).try_load_file(checkpoint).map_err(err)?;
    model.save_pretrained(&config.for_inference(), out).map_err(err)?;
    Ok(vec![out.to_path_buf()])
}

/// `cargo xtask train xlnet`: the permutation LM ([`pretrain`]), exported by [`export`].
impl sesame_train::pretraining::Pretrain for crate::Xlnet {
    const OBJECTIVE: &'static str = "permutation LM: two-stream relative attention with memory, SentencePiece";

    fn pretrain(job: &PretrainOptions, device: Device) -> Result<Pretrained, String> {
        pretrain(job, device)
    }

    fn export(_: &RunSpec) -> Result<sesame_train::pretraining::run::ExportFn, String> {
        Ok(export)
    }
}
