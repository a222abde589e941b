//! The searches, written against [`Decoder`] alone: greedy search, sampling and beam search,
//! each as transformers' `generate` runs it.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::processors::{out_of_range, LogitsProcessor, ProcessorError, Row};

/// What a model that generates provides to a search: run the prompts once, then one token
/// per row at a time, each time giving every row's next-token scores (logits `[vocab]`, on
/// the host).
pub trait Decoder {
    /// What the model keeps between steps (its key/value cache, its encoder output, …).
    type State;
    /// Why a step failed.
    type Error;

    /// Run `prompts` (one per row, all of one length) and give the state after them and each
    /// row's next-token logits.
    fn start(&self, prompts: &[Vec<u32>]) -> Result<(Self::State, Vec<Vec<f32>>), Self::Error>;

    /// Extend every row of `state` by its token in `tokens` and give each row's next-token
    /// logits.
    fn step(&self, state: &mut Self::State, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Self::Error>;

    /// Keep rows `rows` of `state`, in that order (a row may repeat, or go): beam search
    /// continues the hypotheses it chose.
    fn reorder(&self, state: &mut Self::State, rows: &[usize]);
}

/// Receives generated tokens as soon as they are final, while the search runs (transformers'
/// streamers, for any batch and for beam search too).
pub trait TokenStreamer {
    /// `tokens` follow what was given before for row `row` (greedy search and sampling: a row
    /// of the prompts; beam search: a prompt, the tokens every sequence returned for it
    /// continues with), and will not change. The end-of-sequence token is given; padding is
    /// not.
    fn put(&mut self, row: usize, tokens: &[u32]);

    /// Whether the search should end after this step with what it has (a server's client has
    /// gone, or a stop sequence was written). Beam search returns its finished hypotheses, which
    /// may be none yet: use it there to abandon the search.
    fn stop(&self) -> bool {
        false
    }
}

/// No streaming.
impl TokenStreamer for () {
    fn put(&mut self, _row: usize, _tokens: &[u32]) {}
}

/// What a search returns.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    /// Each row's tokens: its prompt, then what was generated (padding after an end). Beam
    /// search gives `num_return_sequences` rows per prompt, the best first.
    pub sequences: Vec<Vec<u32>>,
    /// With [`Stopping::output_scores`], the processed scores each step chose from:
    /// `[step][row][vocab]` (transformers' `scores`; for beam search the log-probabilities of
    /// every running beam, `batch × num_beams` rows, before the beam's own score is added).
    pub scores: Vec<Vec<Vec<f32>>>,
    /// Beam search: each returned sequence's score, its summed log-probability divided by the
    /// generated length to the power `length_penalty` (transformers' `sequences_scores`).
    pub sequences_scores: Option<Vec<f32>>,
}

/// When a search stops and what it writes after a row ends.
#[derive(Clone, Debug)]
pub struct Stopping {
    /// The most tokens to generate per row.
    pub max_new_tokens: usize,
    /// Tokens that end a row (none: rows run to `max_new_tokens`).
    pub eos_token_ids: Vec<u32>,
    /// What a row that ended gets at every later step.
    pub pad_token_id: u32,
    /// Keep every step's processed scores in [`Generated::scores`] (transformers'
    /// `output_scores`; `rows × vocab` floats per step, so off unless asked).
    pub output_scores: bool,
}

/// Greedy search as transformers' `generate` runs it: at each step every row's logits go
/// through `processors` in order and the highest score is taken (the first of equal ones); a
/// row that produced an end-of-sequence token gets `pad_token_id` from then on; the search
/// stops when every row has ended or after `max_new_tokens` steps.
pub fn greedy<D: Decoder>(
    model: &D,
    prompts: &[Vec<u32>],
    processors: &[Box<dyn LogitsProcessor>],
    stopping: &Stopping,
) -> Result<Generated, D::Error> {
    greedy_streaming(model, prompts, processors, stopping, &mut ())
}

/// [`greedy`], giving `streamer` each row's token as it is picked.
pub fn greedy_streaming<D: Decoder>(
    model: &D,
    prompts: &[Vec<u32>],
    processors: &[Box<dyn LogitsProcessor>],
    stopping: &Stopping,
    streamer: &mut dyn TokenStreamer,
) -> Result<Generated, D::Error> {
    one_token_per_row(model, prompts, processors, stopping, streamer, |_, scores| argmax(scores))
}

/// Where sampling draws its tokens from: given a row's probabilities `[vocab]` (summing to
/// 1, zero for removed tokens), a token.
pub trait TokenSampler {
    /// Draw a token of `probs`; `row` is the row it extends.
    fn draw(&mut self, row: usize, probs: &[f32]) -> u32;
}

/// Draws with a generator seeded by the caller: the same seed, prompts and model give the
/// same tokens (on one backend; logits that differ in their last bits may flip a draw that
/// falls on a boundary).
pub struct SeededSampler(StdRng);

impl SeededSampler {
    /// A sampler drawing from a generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(StdRng::seed_from_u64(seed))
    }
}

impl TokenSampler for SeededSampler {
    fn draw(&mut self, _row: usize, probs: &[f32]) -> u32 {
        // Inverse transform: the first token whose cumulative probability passes u. A token of
        // probability 0 is never drawn.
        let total: f64 = probs.iter().map(|&p| f64::from(p)).sum();
        let u = self.0.random::<f64>() * total;
        let mut mass = 0.0;
        let mut last = 0;
        for (i, &p) in probs.iter().enumerate() {
            if p <= 0.0 {
                continue;
            }
            mass += f64::from(p);
            last = i;
            if mass > u {
                return i as u32;
            }
        }
        last as u32
    }
}

/// Multinomial sampling as transformers' `generate` runs it with `do_sample` and one beam:
/// each step every row's logits go through `processors` (put the warpers — temperature,
/// top-k, top-p — last), become probabilities by a softmax, and `sampler` draws the next
/// token; rows end and pad as in [`greedy`].
pub fn sample<D: Decoder>(
    model: &D,
    prompts: &[Vec<u32>],
    processors: &[Box<dyn LogitsProcessor>],
    stopping: &Stopping,
    sampler: &mut dyn TokenSampler,
) -> Result<Generated, D::Error> {
    sample_streaming(model, prompts, processors, stopping, sampler, &mut ())
}

/// [`sample`], giving `streamer` each row's token as it is drawn.
pub fn sample_streaming<D: Decoder>(
    model: &D,
    prompts: &[Vec<u32>],
    processors: &[Box<dyn LogitsProcessor>],
    stopping: &Stopping,
    sampler: &mut dyn TokenSampler,
    streamer: &mut dyn TokenStreamer,
) -> Result<Generated, D::Error> {
    one_token_per_row(model, prompts, processors, stopping, streamer, |row, scores| sampler.draw(row, &softmax(scores)))
}

/// Greedy search and sampling: one token per row per step, picked by `pick` from the row's
/// processed scores, each given to `streamer` as it is picked.
fn one_token_per_row<D: Decoder>(
    model: &D,
    prompts: &[Vec<u32>],
    processors: &[Box<dyn LogitsProcessor>],
    stopping: &Stopping,
    streamer: &mut dyn TokenStreamer,
    mut pick: impl FnMut(usize, &[f32]) -> u32,
) -> Result<Generated, D::Error> {
    let mut sequences = prompts.to_vec();
    let mut finished = vec![false; prompts.len()];
    let mut scores = Vec::new();
    if stopping.max_new_tokens == 0 || prompts.is_empty() {
        return Ok(Generated { sequences, scores, sequences_scores: None });
    }
    let (mut state, mut logits) = model.start(prompts)?;
    let prompt_len = prompts[0].len();
    let mut steps = 0;
    loop {
        let mut next = Vec::with_capacity(prompts.len());
        for (row, row_logits) in logits.iter_mut().enumerate() {
            for p in processors {
                p.process(Row { tokens: &sequences[row], prompt_len }, row_logits);
            }
            let token = match finished[row] {
                true => stopping.pad_token_id,
                false => {
                    let token = pick(row, row_logits);
                    streamer.put(row, &[token]);
                    token
                }
            };
            finished[row] |= stopping.eos_token_ids.contains(&token);
            sequences[row].push(token);
            next.push(token);
        }
        if stopping.output_scores {
            scores.push(logits);
        }
        steps += 1;
        if finished.iter().all(|&f| f) || steps == stopping.max_new_tokens || streamer.stop() {
            return Ok(Generated { sequences, scores, sequences_scores: None });
        }
        logits = model.step(&mut state, &next)?;
    }
}

/// One request's row in a search that rows of other requests share ([`shared_search`]): its
/// own processors, stopping, picking and streamer, as greedy search or sampling would run the
/// request alone.
pub struct SharedRow<'a> {
    /// Applied in order to the row's scores at every step.
    pub processors: Vec<Box<dyn LogitsProcessor>>,
    /// The row's `max_new_tokens`, end-of-sequence ids and `output_scores`.
    pub stopping: Stopping,
    /// Draws the row's tokens (sampling); `None`: the highest score (greedy search).
    pub sampler: Option<Box<dyn TokenSampler + 'a>>,
    /// Given the row's tokens as row 0; its `stop` ends the row.
    pub streamer: &'a mut dyn TokenStreamer,
}

/// Greedy search and sampling for rows of different requests run as one batch of the model:
/// each row is processed, picked, streamed and stopped by its own [`SharedRow`], and gives
/// what [`greedy_streaming`] or [`sample_streaming`] give its request alone (the same picks, the
/// same draws of its sampler; the model's numbers may differ in their last bits between a batch
/// and a row alone). A row leaves the batch as soon as it ends (an end-of-sequence token, its
/// `max_new_tokens`, or its streamer's `stop`), the model's state cut to the rows still
/// running, so a short request costs the others nothing after it ends.
///
/// `prompts`: one per row, all of one length. Returns one [`Generated`] per row, with that row
/// alone: its prompt and tokens (no padding), and its scores when its `output_scores` asks.
pub fn shared_search<D: Decoder>(model: &D, prompts: &[Vec<u32>], rows: &mut [SharedRow<'_>]) -> Result<Vec<Generated>, D::Error> {
    let mut out: Vec<Generated> = prompts.iter().map(|p| Generated { sequences: vec![p.clone()], scores: Vec::new(), sequences_scores: None }).collect();
    // The rows in the model's batch, by their index in `rows`.
    let mut live: Vec<usize> = (0..rows.len().min(prompts.len())).filter(|&r| rows[r].stopping.max_new_tokens > 0).collect();
    if live.is_empty() {
        return Ok(out);
    }
    let prompt_len = prompts[live[0]].len();
    let (mut state, mut logits) = model.start(&live.iter().map(|&r| prompts[r].clone()).collect::<Vec<_>>())?;
    loop {
        let mut running = Vec::with_capacity(live.len());
        let mut next = Vec::with_capacity(live.len());
        for (i, (&r, mut scores)) in live.iter().zip(logits).enumerate() {
            let (row, generated) = (&mut rows[r], &mut out[r]);
            let tokens = &mut generated.sequences[0];
            for p in &row.processors {
                p.process(Row { tokens, prompt_len }, &mut scores);
            }
            let token = match &mut row.sampler {
                Some(sampler) => sampler.draw(0, &softmax(&scores)),
                None => argmax(&scores),
            };
            row.streamer.put(0, &[token]);
            tokens.push(token);
            let ended = row.stopping.eos_token_ids.contains(&token) || tokens.len() - prompt_len == row.stopping.max_new_tokens || row.streamer.stop();
            if row.stopping.output_scores {
                generated.scores.push(vec![scores]);
            }
            if !ended {
                running.push(i);
                next.push(token);
            }
        }
        if running.is_empty() {
            return Ok(out);
        }
        if running.len() < live.len() {
            model.reorder(&mut state, &running);
            live = running.iter().map(|&i| live[i]).collect();
        }
        logits = model.step(&mut state, &next)?;
    }
}

/// When beam search stops adding finished hypotheses (transformers' `early_stopping`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarlyStopping {
    /// `True`: a prompt is done as soon as it has `num_beams` finished hypotheses.
    WhenFull,
    /// `False` (transformers' default): done when the best running beam, scored at its current
    /// length, cannot beat the worst finished one.
    Heuristic,
    /// `"never"`: as `Heuristic`, but with a positive length penalty the running beam is
    /// scored at the longest length it could reach (the canonical beam search).
    Never,
}

impl std::str::FromStr for EarlyStopping {
    type Err = ProcessorError;

    /// transformers' spellings: `true`, `false`, `never`.
    fn from_str(s: &str) -> Result<Self, ProcessorError> {
        match s.to_ascii_lowercase().as_str() {
            "true" => Ok(Self::WhenFull),
            "false" => Ok(Self::Heuristic),
            "never" => Ok(Self::Never),
            _ => Err(out_of_range("early_stopping", "true, false or never", s)),
        }
    }
}

/// The settings of beam search (transformers' argument names).
#[derive(Clone, Debug)]
pub struct BeamSettings {
    /// Hypotheses kept per prompt.
    pub num_beams: usize,
    /// Exponent of the generated length that a finished hypothesis's summed log-probability is
    /// divided by (above 0 favours longer sequences).
    pub length_penalty: f32,
    /// When a prompt's search is done.
    pub early_stopping: EarlyStopping,
    /// Sequences returned per prompt, the best first (at most `num_beams`).
    pub num_return_sequences: usize,
}

impl BeamSettings {
    /// `num_beams` beams, transformers' defaults otherwise (`length_penalty` 1, heuristic early
    /// stopping, one sequence returned).
    pub fn new(num_beams: usize) -> Self {
        Self { num_beams, length_penalty: 1.0, early_stopping: EarlyStopping::Heuristic, num_return_sequences: 1 }
    }

    /// Refuse what transformers refuses.
    pub fn validate(&self) -> Result<(), ProcessorError> {
        if self.num_beams == 0 {
            return Err(out_of_range("num_beams", "a positive integer", self.num_beams));
        }
        if self.num_return_sequences == 0 || self.num_return_sequences > self.num_beams {
            let expected = "at least 1 and at most num_beams";
            return Err(out_of_range("num_return_sequences", expected, format!("{} with num_beams {}", self.num_return_sequences, self.num_beams)));
        }
        if !self.length_penalty.is_finite() {
            return Err(out_of_range("length_penalty", "a finite number", self.length_penalty));
        }
        Ok(())
    }
}

/// The score transformers gives a hypothesis that cannot be chosen (added, in float32).
const EXCLUDED: f32 = -1.0e9;

/// A hypothesis: its tokens and its summed (running) or length-penalised (finished) score.
/// Running beam `j` of prompt `b` is row `b × num_beams + j` of the decoder's state.
#[derive(Clone, Debug)]
struct Hypothesis {
    tokens: Vec<u32>,
    score: f32,
    /// Among the finished slots: whether it holds a hypothesis that ended (the others are
    /// placeholders scored out of reach).
    finished: bool,
}

/// One prompt's beams: those still running, the best finished ones, and whether a running
/// beam may still improve on them.
struct Prompt {
    running: Vec<Hypothesis>,
    finished: Vec<Hypothesis>,
    improvable: bool,
}

/// Beam search as transformers' `generate` runs it (its vectorised beam search of 4.50 and
/// later), prompt by prompt: each step, every beam's logits become log-probabilities, go
/// through `processors`, and are added to the beam's score; of all `num_beams × vocab`
/// continuations the best `max(2, 1 + eos ids) × num_beams` are kept; those that end (an EOS
/// token, or `max_new_tokens` reached) and rank among the first `num_beams` join the finished
/// hypotheses with their score divided by `generated_len ^ length_penalty`; the best
/// `num_beams` that do not end run on. A prompt is done as `early_stopping` says; the search
/// stops when every prompt is done, every continuation has ended, or at `max_new_tokens`.
///
/// The prompts run once; their state is then repeated for the beams (transformers runs every
/// prompt `num_beams` times). Returns `num_return_sequences` sequences per prompt, best first,
/// padded to the longest, and their scores.
pub fn beam_search<D: Decoder>(
    model: &D,
    prompts: &[Vec<u32>],
    processors: &[Box<dyn LogitsProcessor>],
    stopping: &Stopping,
    beams: &BeamSettings,
) -> Result<Generated, GenerateError<D::Error>> {
    beam_search_streaming(model, prompts, processors, stopping, beams, &mut ())
}

/// [`beam_search`], giving `streamer` each prompt's tokens as soon as every hypothesis that
/// may still be returned for it shares them (every running beam and every finished one while
/// the prompt is not done; then the returned ones).
pub fn beam_search_streaming<D: Decoder>(
    model: &D,
    prompts: &[Vec<u32>],
    processors: &[Box<dyn LogitsProcessor>],
    stopping: &Stopping,
    beams: &BeamSettings,
    streamer: &mut dyn TokenStreamer,
) -> Result<Generated, GenerateError<D::Error>> {
    beams.validate().map_err(GenerateError::Settings)?;
    let (k, batch) = (beams.num_beams, prompts.len());
    if stopping.max_new_tokens == 0 || batch == 0 {
        let sequences = prompts.iter().flat_map(|p| std::iter::repeat_n(p.clone(), beams.num_return_sequences)).collect();
        return Ok(Generated { sequences, scores: vec![], sequences_scores: None });
    }
    let prompt_len = prompts[0].len();
    let max_length = prompt_len + stopping.max_new_tokens;
    let keep = 2.max(1 + stopping.eos_token_ids.len()) * k;
    let (mut state, logits) = model.start(prompts).map_err(GenerateError::Model)?;
    // Every prompt's state, repeated for its beams: row b * k + j is beam j of prompt b.
    let repeated: Vec<usize> = (0..batch).flat_map(|b| std::iter::repeat_n(b, k)).collect();
    model.reorder(&mut state, &repeated);
    let mut logits: Vec<Vec<f32>> = repeated.iter().map(|&b| logits[b].clone()).collect();
    let mut search: Vec<Prompt> = prompts
        .iter()
        .map(|prompt| Prompt {
            // Only the first beam starts live, so that the beams do not all pick the same tokens.
            running: (0..k).map(|j| Hypothesis { tokens: prompt.clone(), score: if j == 0 { 0.0 } else { EXCLUDED }, finished: false }).collect(),
            finished: vec![Hypothesis { tokens: prompt.clone(), score: EXCLUDED, finished: false }; k],
            improvable: true,
        })
        .collect();
    let mut scores = Vec::new();
    let mut cur_len = prompt_len;
    // Per prompt: the length up to which its tokens were streamed.
    let mut streamed = vec![prompt_len; batch];
    let stream = |streamer: &mut dyn TokenStreamer, streamed: &mut [usize], b: usize, hypotheses: &mut dyn Iterator<Item = &Hypothesis>| {
        let mut hypotheses = hypotheses.peekable();
        let Some(first) = hypotheses.peek().map(|h| h.tokens.clone()) else { return };
        let common = hypotheses.fold(first.len(), |n, h| n.min(first.iter().zip(&h.tokens).take_while(|(a, b)| a == b).count()));
        if common > streamed[b] {
            streamer.put(b, &first[streamed[b]..common]);
            streamed[b] = common;
        }
    };
    loop {
        // Log-probabilities, processed with each beam's tokens.
        for (row, row_logits) in logits.iter_mut().enumerate() {
            log_softmax(row_logits);
            let beam = &search[row / k].running[row % k];
            for p in processors {
                p.process(Row { tokens: &beam.tokens, prompt_len }, row_logits);
            }
        }
        let vocab = logits[0].len();
        let reaches_max = cur_len + 1 >= max_length;
        let mut every_continuation_ends = true;
        let mut next_rows = Vec::with_capacity(batch * k);
        for (b, prompt) in search.iter_mut().enumerate() {
            // The best `keep` continuations of all beams, by summed log-probability.
            let (beams_so_far, logits) = (&prompt.running, &logits);
            let candidates = top(keep, (0..k).flat_map(|j| logits[b * k + j].iter().map(move |&l| l + beams_so_far[j].score)));
            // Each with whether it ends, and the row of the beam it extends.
            let candidates: Vec<(Hypothesis, bool, usize)> = candidates
                .into_iter()
                .map(|(i, score)| {
                    let (beam, token) = (i / vocab, (i % vocab) as u32);
                    let mut tokens = prompt.running[beam].tokens.clone();
                    tokens.push(token);
                    let ends = reaches_max || stopping.eos_token_ids.contains(&token);
                    (Hypothesis { tokens, score, finished: false }, ends, b * k + beam)
                })
                .collect();
            every_continuation_ends &= candidates.iter().all(|(_, ends, _)| *ends);
            // The best that do not end run on.
            let running = top(k, candidates.iter().map(|(h, ends, _)| h.score + if *ends { EXCLUDED } else { 0.0 }));
            // Those among the first `num_beams` that end may join the finished hypotheses.
            let divisor = ((cur_len + 1 - prompt_len) as f64).powf(f64::from(beams.length_penalty)) as f32;
            let full = prompt.finished.iter().all(|h| h.finished) && beams.early_stopping == EarlyStopping::WhenFull;
            let mut merged = prompt.finished.clone();
            for (c, (h, ends, _)) in candidates.iter().enumerate() {
                let mut score = h.score / divisor;
                let just_finished = *ends && c < k;
                for excluded in [full, !prompt.improvable, !just_finished] {
                    if excluded {
                        score += EXCLUDED;
                    }
                }
                merged.push(Hypothesis { tokens: h.tokens.clone(), score, finished: just_finished });
            }
            let best = top(k, merged.iter().map(|h| h.score));
            prompt.finished = best.iter().map(|&(i, _)| merged[i].clone()).collect();
            prompt.running = running.iter().map(|&(c, score)| Hypothesis { score, ..candidates[c].0.clone() }).collect();
            next_rows.extend(running.iter().map(|&(c, _)| candidates[c].2));
        }
        if stopping.output_scores {
            scores.push(logits);
        }
        cur_len += 1;
        // Can a running beam still beat the worst finished hypothesis?
        let best_length = match beams.early_stopping {
            EarlyStopping::Never if beams.length_penalty > 0.0 => max_length - prompt_len,
            _ => cur_len - prompt_len,
        };
        let divisor = (best_length as f64).powf(f64::from(beams.length_penalty)) as f32;
        for prompt in &mut search {
            let best_running = prompt.running[0].score / divisor;
            let worst_finished = prompt.finished.iter().map(|h| h.score).fold(f32::INFINITY, f32::min);
            prompt.improvable &= prompt.finished.iter().any(|h| best_running > if h.finished { worst_finished } else { EXCLUDED });
        }
        for (b, prompt) in search.iter().enumerate().filter(|(_, p)| p.improvable) {
            stream(streamer, &mut streamed, b, &mut prompt.running.iter().chain(prompt.finished.iter().filter(|h| h.finished)));
        }
        let improvable = search.iter().any(|p| p.improvable);
        let all_full = beams.early_stopping == EarlyStopping::WhenFull && search.iter().all(|p| p.finished.iter().all(|h| h.finished));
        if !improvable || all_full || every_continuation_ends || streamer.stop() {
            break;
        }
        model.reorder(&mut state, &next_rows);
        let next: Vec<u32> = search.iter().flat_map(|p| p.running.iter().map(|h| *h.tokens.last().expect("a token per step"))).collect();
        logits = model.step(&mut state, &next).map_err(GenerateError::Model)?;
    }
    for (b, prompt) in search.iter().enumerate() {
        stream(streamer, &mut streamed, b, &mut prompt.finished[..beams.num_return_sequences].iter());
    }
    // The best `num_return_sequences` of each prompt, padded to the longest returned one.
    let returned: Vec<&Hypothesis> = search.iter().flat_map(|p| &p.finished[..beams.num_return_sequences]).collect();
    let length = returned.iter().map(|h| h.tokens.len()).max().unwrap_or(prompt_len);
    // transformers pads with `pad_token_id or eos_token_id[0]`: a pad id of 0 gives the EOS id.
    let fill = match (stopping.pad_token_id, stopping.eos_token_ids.first()) {
        (0, Some(&eos)) => eos,
        (pad, _) => pad,
    };
    let sequences = returned.iter().map(|h| h.tokens.iter().copied().chain(std::iter::repeat(fill)).take(length).collect()).collect();
    let sequences_scores = Some(returned.iter().map(|h| h.score).collect());
    Ok(Generated { sequences, scores, sequences_scores })
}

/// Why a search failed: its settings, or the model.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError<E> {
    /// A setting transformers refuses.
    #[error(transparent)]
    Settings(ProcessorError),
    /// The model failed.
    #[error(transparent)]
    Model(E),
}

/// The `n` highest of `values` as `(index, value)`, highest first, the lower index first among
/// equal values (torch's `topk` leaves that order open; it matters only among excluded
/// hypotheses, which are never returned). One pass that keeps the best `n` so far: a value
/// below the `n`-th costs one comparison, so a beam step's `beams × vocab` candidates are not
/// collected first.
fn top(n: usize, values: impl Iterator<Item = f32>) -> Vec<(usize, f32)> {
    // `a` ranks before `b`: higher, or as high and earlier.
    let before = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)).is_lt();
    let mut best: Vec<(usize, f32)> = Vec::with_capacity(n + 1);
    if n == 0 {
        return best;
    }
    for candidate in values.enumerate() {
        // Later indices rank after equal values already kept.
        if best.len() == n && !before(&candidate, &best[n - 1]) {
            continue;
        }
        let at = best.partition_point(|kept| before(kept, &candidate));
        best.insert(at, candidate);
        best.truncate(n);
    }
    best
}

/// `scores` `[vocab]` to log-probabilities in place, in float32 as torch's `log_softmax`.
fn log_softmax(scores: &mut [f32]) {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return;
    }
    let log_sum = scores.iter().map(|&s| (s - max).exp()).sum::<f32>().ln();
    scores.iter_mut().for_each(|s| *s = *s - max - log_sum);
}

/// The probabilities of `scores` `[vocab]` (zero where a score is `-inf`).
fn softmax(scores: &[f32]) -> Vec<f32> {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = scores.iter().map(|&s| if s == f32::NEG_INFINITY { 0.0 } else { (s - max).exp() }).collect();
    let total: f32 = exp.iter().sum();
    exp.into_iter().map(|e| e / total).collect()
}

/// The index of the highest score, the first of equal ones (as `torch.argmax`); a NaN counts
/// as the highest, as in torch.
fn argmax(scores: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &s) in scores.iter().enumerate() {
        if s.is_nan() {
            return i as u32;
        }
        if s > scores[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of three tokens that always prefers the token after the last one (0 → 1 → 2 → 0),
    /// 2 never being an end.
    struct Counting;

    impl Decoder for Counting {
        type State = ();
        type Error = ();

        fn start(&self, prompts: &[Vec<u32>]) -> Result<((), Vec<Vec<f32>>), ()> {
            Ok(((), prompts.iter().map(|p| Self::after(*p.last().unwrap())).collect()))
        }

        fn step(&self, _: &mut (), tokens: &[u32]) -> Result<Vec<Vec<f32>>, ()> {
            Ok(tokens.iter().map(|&t| Self::after(t)).collect())
        }

        fn reorder(&self, _: &mut (), _: &[usize]) {}
    }

    impl Counting {
        fn after(token: u32) -> Vec<f32> {
            (0..3).map(|t| if t == (token + 1) % 3 { 1.0 } else { 0.0 }).collect()
        }
    }

    /// Asks the search to stop once it has been given `after` tokens.
    struct StopAfter {
        after: usize,
        given: Vec<u32>,
    }

    impl TokenStreamer for StopAfter {
        fn put(&mut self, _row: usize, tokens: &[u32]) {
            self.given.extend_from_slice(tokens);
        }

        fn stop(&self) -> bool {
            self.given.len() >= self.after
        }
    }

    #[test]
    fn a_streamer_that_asks_to_stop_ends_greedy_search_after_that_step() {
        let stopping = Stopping { max_new_tokens: 10, eos_token_ids: vec![], pad_token_id: 0, output_scores: false };
        let full = greedy(&Counting, &[vec![0]], &[], &stopping).unwrap();
        assert_eq!(full.sequences[0].len(), 11);
        let mut streamer = StopAfter { after: 3, given: Vec::new() };
        let stopped = greedy_streaming(&Counting, &[vec![0]], &[], &stopping, &mut streamer).unwrap();
        assert_eq!(stopped.sequences, vec![vec![0, 1, 2, 0]]);
        assert_eq!(streamer.given, vec![1, 2, 0]);
    }

    /// A model of five tokens whose state is each row's tokens: a row's best next token is the
    /// sum of its tokens (mod 5), the one after it second, so a state whose rows were mixed up
    /// gives other tokens. It records the rows of every call.
    #[derive(Default)]
    struct Summing {
        batches: std::cell::RefCell<Vec<usize>>,
    }

    impl Summing {
        fn scores(row: &[u32]) -> Vec<f32> {
            let best = row.iter().sum::<u32>() % 5;
            (0..5).map(|t| if t == best { 2.0 } else if t == (best + 1) % 5 { 1.0 } else { 0.0 }).collect()
        }
    }

    impl Decoder for Summing {
        type State = Vec<Vec<u32>>;
        type Error = ();

        fn start(&self, prompts: &[Vec<u32>]) -> Result<(Self::State, Vec<Vec<f32>>), ()> {
            self.batches.borrow_mut().push(prompts.len());
            Ok((prompts.to_vec(), prompts.iter().map(|p| Self::scores(p)).collect()))
        }

        fn step(&self, state: &mut Self::State, tokens: &[u32]) -> Result<Vec<Vec<f32>>, ()> {
            assert_eq!(state.len(), tokens.len(), "one token per row of the state");
            self.batches.borrow_mut().push(tokens.len());
            state.iter_mut().zip(tokens).for_each(|(row, &t)| row.push(t));
            Ok(state.iter().map(|row| Self::scores(row)).collect())
        }

        fn reorder(&self, state: &mut Self::State, rows: &[usize]) {
            *state = rows.iter().map(|&r| state[r].clone()).collect();
        }
    }

    #[test]
    fn a_shared_search_gives_each_request_what_it_gives_alone_and_drops_rows_as_they_end() {
        use crate::processors::MinNewTokens;
        let stopping = |max_new_tokens, eos: &[u32], output_scores| Stopping { max_new_tokens, eos_token_ids: eos.to_vec(), pad_token_id: 0, output_scores };
        // (prompt, processors, stopping, seed when sampling, stop after this many tokens)
        type Case = (Vec<u32>, fn() -> Vec<Box<dyn LogitsProcessor>>, Stopping, Option<u64>, Option<usize>);
        let cases: Vec<Case> = vec![
            (vec![1, 2], Vec::new, stopping(6, &[], true), None, None),
            (vec![3, 1], Vec::new, stopping(9, &[4], false), None, None),
            (vec![0, 4], || vec![Box::new(MinNewTokens { min_new_tokens: 3, eos_token_ids: vec![4] })], stopping(9, &[4], false), None, None),
            (vec![2, 2], Vec::new, stopping(7, &[], true), Some(11), None),
            (vec![4, 4], Vec::new, stopping(8, &[], false), Some(5), Some(2)),
            (vec![1, 1], Vec::new, stopping(0, &[], false), None, None),
        ];
        let alone: Vec<(Generated, Vec<u32>)> = cases
            .iter()
            .map(|(prompt, processors, stopping, seed, stop)| {
                let mut streamer = StopAfter { after: stop.unwrap_or(usize::MAX), given: Vec::new() };
                let out = match seed {
                    Some(seed) => sample_streaming(&Summing::default(), &[prompt.clone()], &processors(), stopping, &mut SeededSampler::new(*seed), &mut streamer),
                    None => greedy_streaming(&Summing::default(), &[prompt.clone()], &processors(), stopping, &mut streamer),
                };
                (out.unwrap(), streamer.given)
            })
            .collect();
        let mut streamers: Vec<StopAfter> = cases.iter().map(|c| StopAfter { after: c.4.unwrap_or(usize::MAX), given: Vec::new() }).collect();
        let mut rows: Vec<SharedRow> = cases
            .iter()
            .zip(&mut streamers)
            .map(|((_, processors, stopping, seed, _), streamer)| SharedRow {
                processors: processors(),
                stopping: stopping.clone(),
                sampler: seed.map(|s| Box::new(SeededSampler::new(s)) as Box<dyn TokenSampler>),
                streamer,
            })
            .collect();
        let model = Summing::default();
        let prompts: Vec<Vec<u32>> = cases.iter().map(|c| c.0.clone()).collect();
        let shared = shared_search(&model, &prompts, &mut rows).unwrap();
        drop(rows);
        for (i, ((want, streamed), (got, given))) in alone.iter().zip(shared.iter().zip(&streamers)).enumerate() {
            assert_eq!(got, want, "request {i}");
            assert_eq!(&given.given, streamed, "request {i}'s streamed tokens");
        }
        // Every request ends differently: 6 tokens, an end at once, an end after 3, 7, a stop after 2, none.
        let generated: Vec<usize> = shared.iter().zip(&prompts).map(|(g, p)| g.sequences[0].len() - p.len()).collect();
        assert_eq!(generated, vec![6, 1, 4, 7, 2, 0]);
        // The request of no tokens never runs; the others leave the model's batch as they end.
        let batches = model.batches.borrow().clone();
        assert_eq!(batches, vec![5, 4, 3, 3, 2, 2, 1]);
    }

    #[test]
    fn argmax_takes_the_first_of_equal_scores() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    }

    #[test]
    fn top_orders_by_value_then_index() {
        assert_eq!(top(3, [1.0, 5.0, 5.0, 2.0, 7.0].into_iter()), vec![(4, 7.0), (1, 5.0), (2, 5.0)]);
        assert_eq!(top(9, [1.0, 2.0].into_iter()), vec![(1, 2.0), (0, 1.0)]);
        assert_eq!(top(0, [1.0].into_iter()), vec![]);
        assert_eq!(top(2, [f32::NEG_INFINITY, 3.0, f32::NEG_INFINITY, 3.0, 3.0].into_iter()), vec![(1, 3.0), (3, 3.0)]);
        // The same as sorting everything, on values with many ties.
        let values: Vec<f32> = (0..500u32).map(|i| ((i * 7919) % 37) as f32 - 18.0).collect();
        let mut sorted: Vec<(usize, f32)> = values.iter().copied().enumerate().collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for n in [1, 8, 37, 500, 600] {
            assert_eq!(top(n, values.iter().copied()), sorted[..n.min(500)].to_vec());
        }
    }

    #[test]
    fn seeded_sampling_follows_the_probabilities_and_never_draws_a_removed_token() {
        let probs = [0.5, 0.0, 0.3, 0.2];
        let mut sampler = SeededSampler::new(3);
        let mut counts = [0usize; 4];
        for _ in 0..20_000 {
            counts[sampler.draw(0, &probs) as usize] += 1;
        }
        assert_eq!(counts[1], 0);
        for (c, p) in counts.iter().zip(probs) {
            let share = *c as f32 / 20_000.0;
            assert!((share - p).abs() < 0.015, "{counts:?}");
        }
        let again: Vec<u32> = (0..50).map(|_| SeededSampler::new(9).draw(0, &probs)).collect();
        assert!(again.windows(2).all(|w| w[0] == w[1]), "one seed, one draw");
    }

    #[test]
    fn beam_settings_refuse_what_transformers_refuses() {
        assert!(BeamSettings { num_return_sequences: 3, ..BeamSettings::new(2) }.validate().is_err());
        assert!(BeamSettings::new(0).validate().is_err());
        assert_eq!("never".parse::<EarlyStopping>().unwrap(), EarlyStopping::Never);
        assert!("sometimes".parse::<EarlyStopping>().is_err());
    }
}
