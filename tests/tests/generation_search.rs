//! Greedy search, beam search and sampling through `sesame_generate` on BERT as a left-to-right
//! language model (HF `BertLMHeadModel`), against transformers' `generate` on the same
//! checkpoint (fixtures/generation/bert-lm-head): the tokens, every step's processed scores and
//! beam search's sequence scores, plain and with processors, on every compiled backend; with and
//! without the key/value cache.

use sesame_bert::{BertConfig, BertLMHeadModel};
use sesame_generate::*;
use sesame_generate::decoding::CausalDecoder;
use sesame_layers::{OutputOptions, PretrainedModel};
use sesame_tests::{devices, Fixture};

/// transformers' processors for the fixture's runs, in `generate`'s order.
fn processors(run: &str) -> Vec<Box<dyn LogitsProcessor>> {
    match run {
        "greedy" => vec![],
        "processed" => vec![
            Box::new(RepetitionPenalty::new(1.4).unwrap()),
            Box::new(NoRepeatNgram::new(2).unwrap()),
            Box::new(MinNewTokens { min_new_tokens: 4, eos_token_ids: vec![3] }),
        ],
        "beam" => vec![Box::new(RepetitionPenalty::new(1.3).unwrap())],
        "beam-never" => vec![Box::new(NoRepeatNgram::new(2).unwrap())],
        "beam-early" => vec![Box::new(RepetitionPenalty::new(1.2).unwrap())],
        "sample" => vec![Box::new(Temperature::new(0.7).unwrap()), Box::new(TopK::new(12, 1).unwrap()), Box::new(TopP::new(0.9, 1).unwrap())],
        other => panic!("no run {other}"),
    }
}

/// The run's settings as the fixture records them (transformers' argument names).
fn stopping(f: &Fixture, run: &str) -> Stopping {
    let settings = &f.meta["runs"][run];
    let eos = &settings["eos_token_id"];
    let eos_token_ids = match eos.as_array() {
        Some(ids) => ids.iter().map(|e| e.as_u64().unwrap() as u32).collect(),
        None => eos.as_u64().map(|e| e as u32).into_iter().collect(),
    };
    Stopping {
        max_new_tokens: settings["max_new_tokens"].as_u64().unwrap() as usize,
        eos_token_ids,
        pad_token_id: settings["pad_token_id"].as_u64().unwrap_or(0) as u32,
        output_scores: true,
    }
}

fn beam_settings(f: &Fixture, run: &str) -> BeamSettings {
    let settings = &f.meta["runs"][run];
    let early_stopping = match &settings["early_stopping"] {
        serde_json::Value::Null => EarlyStopping::Heuristic,
        serde_json::Value::Bool(b) => b.to_string().parse().unwrap(),
        other => other.as_str().unwrap().parse().unwrap(),
    };
    BeamSettings {
        num_beams: settings["num_beams"].as_u64().unwrap() as usize,
        length_penalty: settings["length_penalty"].as_f64().unwrap_or(1.0) as f32,
        early_stopping,
        num_return_sequences: settings["num_return_sequences"].as_u64().unwrap_or(1) as usize,
    }
}

/// `ours` within 1e-4 of `theirs` (and the same infinities).
fn assert_close(ours: &[f32], theirs: &[f32], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}: lengths");
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        let same = if b.is_finite() { (a - b).abs() <= 1e-4 } else { a == b };
        assert!(same, "{what} {i}: ours {a}, transformers {b}");
    }
}

/// The fixture's prompts, one row each.
fn prompts(f: &Fixture) -> Vec<Vec<u32>> {
    let prompts = f.get("input.prompts");
    prompts.i64.chunks(prompts.shape[1]).map(|r| r.iter().map(|&t| t as u32).collect()).collect()
}

#[test]
fn greedy_search_matches_transformers_generate_with_and_without_the_cache() {
    let f = Fixture::open("generation/bert-lm-head");
    let prompts = prompts(&f);
    for (backend, device) in devices() {
        let loaded = BertLMHeadModel::from_pretrained(&f.dir, &device).unwrap();
        let (model, config): (BertLMHeadModel, BertConfig) = (loaded.model, loaded.config);
        assert!(loaded.report.initialized.is_empty() && loaded.report.unused.is_empty(), "{}", loaded.report);
        for run in ["greedy", "processed"] {
            let want = f.get(&format!("output.{run}.sequences"));
            let stopping = stopping(&f, run);
            let cached = greedy(&CausalDecoder::new(&model, &config), &prompts, &processors(run), &stopping).unwrap();
            let uncached = greedy(&CausalDecoder::new(&model, &config).with_cache(false), &prompts, &processors(run), &stopping).unwrap();
            let ours: Vec<i64> = cached.sequences.iter().flatten().map(|&t| i64::from(t)).collect();
            assert_eq!(ours, want.i64, "{backend:?} {run}: the tokens transformers generated");
            assert_eq!(cached.sequences, uncached.sequences, "{backend:?} {run}: cached and uncached decoding differ");
            let ours: Vec<f32> = cached.scores.iter().flatten().flatten().copied().collect();
            assert_close(&ours, &f.get(&format!("output.{run}.scores")).f32, &format!("{backend:?} {run}: score"));
            let uncached: Vec<f32> = uncached.scores.iter().flatten().flatten().copied().collect();
            let gap = sesame_tests::gap(&ours, &uncached);
            assert!(gap <= 1e-4, "{backend:?} {run}: cached and uncached scores differ by {gap}");
        }
    }
}

#[test]
fn the_left_to_right_head_matches_transformers_with_its_shifted_loss() {
    let f = Fixture::open("generation/bert-lm-head");
    for (backend, device) in devices() {
        let model = BertLMHeadModel::from_pretrained(&f.dir, &device).unwrap().model;
        let ids = f.int::<2>("input.input_ids", &device);
        let out = model.forward(sesame_layers::EncoderInput::new(ids.clone()), Some(ids), OutputOptions::default());
        let logits: Vec<f32> = out.logits.into_data().convert::<f32>().try_to_vec().unwrap();
        let diff = sesame_tests::gap(&logits, &f.get("output.logits").f32);
        assert!(diff <= 1e-4, "{backend:?}: logits differ by {diff}");
        let loss = out.loss.unwrap().into_scalar::<f32>();
        let want = f.get("output.loss").f32[0];
        assert!((loss - want).abs() <= 1e-4, "{backend:?}: loss {loss}, transformers {want}");
    }
}

/// Beam search keeps some rows, repeats others: after `reorder`, a cached step gives the
/// logits of running the reordered rows from scratch.
#[test]
fn reordering_rows_keeps_each_row_s_cache() {
    let f = Fixture::open("generation/bert-lm-head");
    let prompts = prompts(&f);
    for (backend, device) in devices() {
        let loaded = BertLMHeadModel::from_pretrained(&f.dir, &device).unwrap();
        let (model, config) = (loaded.model, loaded.config);
        let (cached, uncached) = (CausalDecoder::new(&model, &config), CausalDecoder::new(&model, &config).with_cache(false));
        let (mut a, _) = cached.start(&prompts).unwrap();
        let (mut b, _) = uncached.start(&prompts).unwrap();
        cached.step(&mut a, &[5, 9]).unwrap();
        uncached.step(&mut b, &[5, 9]).unwrap();
        let rows = [1, 1, 0];
        cached.reorder(&mut a, &rows);
        uncached.reorder(&mut b, &rows);
        let ours = cached.step(&mut a, &[7, 8, 30]).unwrap();
        let reference = uncached.step(&mut b, &[7, 8, 30]).unwrap();
        assert_eq!(ours.len(), 3);
        let gap = sesame_tests::gap(&ours.concat(), &reference.concat());
        assert!(gap <= 1e-4, "{backend:?}: after reordering, cached and recomputed logits differ by {gap}");
        // Rows 1 and 2 continue the same prefix with different tokens: their logits differ.
        assert!(ours[0] != ours[1], "{backend:?}");
    }
}

/// Beam search: the sequences transformers returns, in its order, with its sequence scores and
/// each step's processed log-probabilities of every beam, for each `early_stopping`, negative
/// and positive length penalties, several EOS ids and several sequences per prompt; the same
/// with the cache (its rows reordered on the device) and without.
#[test]
fn beam_search_matches_transformers_generate_with_and_without_the_cache() {
    let f = Fixture::open("generation/bert-lm-head");
    let prompts = prompts(&f);
    for (backend, device) in devices() {
        let loaded = BertLMHeadModel::from_pretrained(&f.dir, &device).unwrap();
        let (model, config) = (loaded.model, loaded.config);
        for run in ["beam", "beam-never", "beam-early"] {
            let (stopping, beams) = (stopping(&f, run), beam_settings(&f, run));
            let cached = beam_search(&CausalDecoder::new(&model, &config), &prompts, &processors(run), &stopping, &beams).unwrap();
            let want = f.get(&format!("output.{run}.sequences"));
            let ours: Vec<i64> = cached.sequences.iter().flatten().map(|&t| i64::from(t)).collect();
            assert_eq!(ours, want.i64, "{backend:?} {run}: the sequences transformers returned");
            let sequence_scores = cached.sequences_scores.clone().unwrap();
            assert_close(&sequence_scores, &f.get(&format!("output.{run}.sequences_scores")).f32, &format!("{backend:?} {run}: sequence score"));
            let steps: Vec<f32> = cached.scores.iter().flatten().flatten().copied().collect();
            assert_close(&steps, &f.get(&format!("output.{run}.scores")).f32, &format!("{backend:?} {run}: step score"));
            if run == "beam" {
                let uncached = beam_search(&CausalDecoder::new(&model, &config).with_cache(false), &prompts, &processors(run), &stopping, &beams).unwrap();
                assert_eq!(cached.sequences, uncached.sequences, "{backend:?} {run}: cached and uncached beam search differ");
                assert_close(&uncached.sequences_scores.unwrap(), &sequence_scores, &format!("{backend:?} {run}: uncached sequence score"));
            }
        }
    }
}

/// Sampling with temperature, top-k and top-p: with transformers' draws replayed, every step's
/// warped scores match; a seeded run gives the same tokens twice and only tokens the warpers
/// kept; top-k 1 is greedy search.
#[test]
fn sampling_warps_scores_as_transformers_and_reproduces_with_a_seed() {
    let f = Fixture::open("generation/bert-lm-head");
    let prompts = prompts(&f);
    let prompt_len = prompts[0].len();
    let want = f.get("output.sample.sequences");
    let tokens: Vec<Vec<u32>> = want.i64.chunks(want.shape[1]).map(|r| r[prompt_len..].iter().map(|&t| t as u32).collect()).collect();
    for (backend, device) in devices() {
        let loaded = BertLMHeadModel::from_pretrained(&f.dir, &device).unwrap();
        let (model, config) = (loaded.model, loaded.config);
        let decoder = CausalDecoder::new(&model, &config);
        let stopping = stopping(&f, "sample");
        let mut replay = sesame_tests::Replay::new(tokens.clone());
        let replayed = sample(&decoder, &prompts, &processors("sample"), &stopping, &mut replay).unwrap();
        let ours: Vec<i64> = replayed.sequences.iter().flatten().map(|&t| i64::from(t)).collect();
        assert_eq!(ours, want.i64, "{backend:?}: the replayed run ends where transformers' did");
        let steps: Vec<f32> = replayed.scores.iter().flatten().flatten().copied().collect();
        assert_close(&steps, &f.get("output.sample.scores").f32, &format!("{backend:?} sample: step score"));

        let long = Stopping { max_new_tokens: 12, eos_token_ids: vec![], pad_token_id: 0, output_scores: true };
        let a = sample(&decoder, &prompts, &processors("sample"), &long, &mut SeededSampler::new(11)).unwrap();
        let b = sample(&decoder, &prompts, &processors("sample"), &long, &mut SeededSampler::new(11)).unwrap();
        assert_eq!(a.sequences, b.sequences, "{backend:?}: one seed, one run");
        for (step, rows) in a.scores.iter().enumerate() {
            for (row, scores) in rows.iter().enumerate() {
                let token = a.sequences[row][prompt_len + step] as usize;
                assert!(scores[token].is_finite(), "{backend:?}: step {step} row {row} drew a removed token");
            }
        }
        let top1 = sample(&decoder, &prompts, &[Box::new(TopK::new(1, 1).unwrap()) as Box<dyn LogitsProcessor>], &long, &mut SeededSampler::new(3)).unwrap();
        let greedy = greedy(&decoder, &prompts, &[], &long).unwrap();
        assert_eq!(top1.sequences, greedy.sequences, "{backend:?}: top-k 1 sampling is greedy search");
    }
}

/// A decoder that counts its steps.
struct Counting<'a, D> {
    inner: D,
    steps: &'a std::cell::Cell<usize>,
}

impl<D: Decoder> Decoder for Counting<'_, D> {
    type State = D::State;
    type Error = D::Error;
    fn start(&self, prompts: &[Vec<u32>]) -> Result<(D::State, Vec<Vec<f32>>), D::Error> {
        self.inner.start(prompts)
    }
    fn step(&self, state: &mut D::State, tokens: &[u32]) -> Result<Vec<Vec<f32>>, D::Error> {
        self.steps.set(self.steps.get() + 1);
        self.inner.step(state, tokens)
    }
    fn reorder(&self, state: &mut D::State, rows: &[usize]) {
        self.inner.reorder(state, rows)
    }
}

/// Records what a search streams: (row, model steps run so far, tokens).
struct Recorder<'a> {
    steps: &'a std::cell::Cell<usize>,
    got: Vec<(usize, usize, Vec<u32>)>,
}

impl TokenStreamer for Recorder<'_> {
    fn put(&mut self, row: usize, tokens: &[u32]) {
        self.got.push((row, self.steps.get(), tokens.to_vec()));
    }
}

impl Recorder<'_> {
    /// Everything streamed for `row`, in order.
    fn row(&self, row: usize) -> Vec<u32> {
        self.got.iter().filter(|(r, _, _)| *r == row).flat_map(|(_, _, t)| t.clone()).collect()
    }
}

/// Streaming gives each row's tokens (greedy search: as picked, up to its end-of-sequence
/// token; beam search: once every hypothesis that may still be returned shares them, and the
/// rest of the best one at the end), and the result equals the search without it.
#[test]
fn streamed_tokens_are_the_returned_ones_as_soon_as_they_are_final() {
    let f = Fixture::open("generation/bert-lm-head");
    let prompts = prompts(&f);
    let prompt_len = prompts[0].len();
    let device = burn::tensor::Device::flex();
    let loaded = BertLMHeadModel::from_pretrained(&f.dir, &device).unwrap();
    let steps = std::cell::Cell::new(0);
    let decoder = Counting { inner: CausalDecoder::new(&loaded.model, &loaded.config), steps: &steps };

    let greedy_stopping = stopping(&f, "processed");
    let mut recorder = Recorder { steps: &steps, got: vec![] };
    let out = greedy_streaming(&decoder, &prompts, &processors("processed"), &greedy_stopping, &mut recorder).unwrap();
    assert_eq!(out, greedy(&decoder, &prompts, &processors("processed"), &greedy_stopping).unwrap());
    for (row, sequence) in out.sequences.iter().enumerate() {
        let generated = &sequence[prompt_len..];
        let end = generated.iter().position(|t| greedy_stopping.eos_token_ids.contains(t)).map_or(generated.len(), |i| i + 1);
        assert_eq!(recorder.row(row), generated[..end], "row {row}: greedy streams each token up to its end");
    }
    assert!(recorder.got.iter().all(|(_, _, t)| t.len() == 1), "one token per step");
    let when: Vec<usize> = recorder.got.iter().filter(|(r, _, _)| *r == 0).map(|(_, s, _)| *s).collect();
    assert_eq!(when, (0..when.len()).collect::<Vec<_>>(), "row 0's k-th token is given before step k runs");

    for run in ["beam", "beam-never", "beam-early"] {
        let (run_stopping, beams) = (stopping(&f, run), beam_settings(&f, run));
        steps.set(0);
        let mut recorder = Recorder { steps: &steps, got: vec![] };
        let out = beam_search_streaming(&decoder, &prompts, &processors(run), &run_stopping, &beams, &mut recorder).unwrap();
        let total = steps.get();
        assert_eq!(out.sequences, beam_search(&decoder, &prompts, &processors(run), &run_stopping, &beams).unwrap().sequences, "{run}");
        let n = beams.num_return_sequences;
        for (b, returned) in out.sequences.chunks(n).enumerate() {
            let streamed = recorder.row(b);
            for sequence in returned {
                assert_eq!(sequence[prompt_len..prompt_len + streamed.len()], streamed[..], "{run} prompt {b}: every returned sequence continues with what was streamed");
            }
        }
        assert!(recorder.got.iter().any(|(_, step, _)| *step < total), "{run}: tokens streamed before the search ended: {:?}", recorder.got);
    }
}
