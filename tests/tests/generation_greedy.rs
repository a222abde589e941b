//! Greedy generation through `sesame_generate::greedy` on BERT as a left-to-right language model
//! (HF `BertLMHeadModel`), against transformers' `generate` on the same checkpoint
//! (fixtures/generation/bert-lm-head): the tokens, and every step's processed scores, plain and
//! with processors, on every compiled backend; with and without the key/value cache.

use sesame_bert::{BertConfig, BertLMHeadModel};
use sesame_generate::*;
use sesame_layers::decoding::CausalDecoder;
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
        other => panic!("no run {other}"),
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
            let stopping = Stopping {
                max_new_tokens: f.meta["runs"][run]["max_new_tokens"].as_u64().unwrap() as usize,
                eos_token_ids: f.meta["runs"][run]["eos_token_id"].as_u64().map(|e| e as u32).into_iter().collect(),
                pad_token_id: 0,
            };
            let cached = greedy(&CausalDecoder::new(&model, &config), &prompts, &processors(run), &stopping).unwrap();
            let uncached = greedy(&CausalDecoder::new(&model, &config).with_cache(false), &prompts, &processors(run), &stopping).unwrap();
            let ours: Vec<i64> = cached.sequences.iter().flatten().map(|&t| i64::from(t)).collect();
            assert_eq!(ours, want.i64, "{backend:?} {run}: the tokens transformers generated");
            assert_eq!(cached.sequences, uncached.sequences, "{backend:?} {run}: cached and uncached decoding differ");
            let theirs = f.get(&format!("output.{run}.scores"));
            let ours: Vec<f32> = cached.scores.iter().flatten().flatten().copied().collect();
            assert_eq!(ours.len(), theirs.f32.len(), "{backend:?} {run}: steps × rows × vocab");
            for (i, (a, b)) in ours.iter().zip(&theirs.f32).enumerate() {
                let same = if b.is_finite() { (a - b).abs() <= 1e-4 } else { a == b };
                assert!(same, "{backend:?} {run}: score {i}: ours {a}, transformers {b}");
            }
            let uncached: Vec<f32> = uncached.scores.iter().flatten().flatten().copied().collect();
            let gap = ours.iter().zip(&uncached).filter(|(a, b)| a.is_finite() || b.is_finite()).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
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
        let diff = logits.iter().zip(&f.get("output.logits").f32).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
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
        let gap = ours.iter().flatten().zip(reference.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        assert!(gap <= 1e-4, "{backend:?}: after reordering, cached and recomputed logits differ by {gap}");
        // Rows 1 and 2 continue the same prefix with different tokens: their logits differ.
        assert!(ours[0] != ours[1], "{backend:?}");
    }
}
