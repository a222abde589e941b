//! BART's denoising pre-training on the shared trainer: batches are fairseq's (sentence blocks
//! `<s> … </s>`, the corrupted source for the encoder, the block itself as the target, the
//! decoder reading it shifted right after `</s>`), each batch's noise is a function of its
//! index, and a tiny BART learns to copy what the source still shows and to infill the rest
//! from context. MASS's batches (one fragment predicted) equal a PyTorch implementation's and
//! its first step transformers' (that a tiny BART learns the fragment is tested in trainer.rs,
//! where the tests that seed the process-wide RNG run one at a time).

use burn::prelude::*;
use sesame_bart::pretraining::{Denoising, DenoisingDataError, TOKENIZER};
use sesame_bart::{BartConfig, BartForConditionalGeneration};
use sesame_layers::PretrainedModel;
use sesame_tests::training::{run_dir, saved_bytes as saved, tiny_bart_task as task};
use sesame_tests::Backend;
use sesame_text::{Corpus, DenoisingConfig, Tokenizer};
use sesame_train::{TrainConfig, TrainTask, Trainer};

fn ints(t: Tensor<2, Int>) -> Vec<Vec<i64>> {
    let [_, s] = t.dims();
    t.into_data().convert::<i64>().try_to_vec::<i64>().unwrap().chunks(s).map(<[i64]>::to_vec).collect()
}

#[test]
fn batches_are_corrupted_sentence_blocks_with_their_targets_and_fixed_by_their_index() {
    let (task, tokenizer, _) = task(6, 24, 8, DenoisingConfig::default());
    let device = Device::flex();
    let batch = task.train_batch(3, &device);
    let (sources, masks, labels) = (ints(batch.input_ids.clone()), ints(batch.attention_mask.clone()), ints(batch.labels.clone()));
    let infilled = batch.infilled.clone().into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
    let (bos, eos, pad, mask) = (0, 2, 1, tokenizer.mask_token_id().unwrap() as i64);
    assert_eq!((tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>"), tokenizer.token_to_id("<pad>")), (Some(0), Some(2), Some(1)));
    // `<mask>` takes the space before it, as a masked word's token (`Ġwhale`) does: no lone `Ġ`.
    let text = tokenizer.encode(&["Call me <mask>."], 16, false).unwrap();
    let me = text.input_ids.iter().position(|&t| t == tokenizer.token_to_id("Ġme").unwrap() as i64).unwrap();
    assert_eq!(text.input_ids[me + 1], mask, "{:?}", text.tokens);
    let t = labels[0].len();
    for (row, ((source, attention), target)) in sources.iter().zip(&masks).zip(&labels).enumerate() {
        let len = attention.iter().filter(|&&m| m == 1).count();
        let target: Vec<i64> = target.iter().copied().take_while(|&l| l != -100).collect();
        assert!(target.len() <= 24 && target[0] == bos && target[target.len() - 1] == eos, "row {row}: a block <s> … </s> of at most 24 tokens");
        assert!(source[..len].first() == Some(&bos) && source[len - 1] == eos && source[len..].iter().all(|&p| p == pad), "row {row}: the source is <s> … </s>, padded");
        // Text infilling: 30% of the words go, each span one <mask>; what the source still
        // shows is copied from the target, and the rest is flagged infilled.
        let row_infilled = &infilled[row * t..row * t + target.len()];
        assert!(row_infilled.iter().any(|&f| f == 1.0), "row {row}: something to infill");
        assert!(source[..len].contains(&mask), "row {row}: a <mask> in {source:?}");
        assert!(len < target.len() + row_infilled.iter().filter(|&&f| f == 1.0).count(), "row {row}: spans shrink to one mask each");
        let shown: std::collections::BTreeSet<i64> = source[..len].iter().copied().collect();
        for (k, &token) in target.iter().enumerate() {
            if row_infilled[k] == 0.0 {
                assert!(shown.contains(&token), "row {row}: kept token {token} is in the source");
            }
        }
    }
    // The same index gives the same noise; another index another.
    assert_eq!(ints(task.train_batch(3, &device).input_ids), sources);
    assert_ne!(ints(task.train_batch(4, &device).input_ids), sources);
    // Held-out batches are fixed.
    let held_out = task.held_out_batches(&device);
    assert!(!held_out.is_empty());
    assert_eq!(ints(held_out[0].input_ids.clone()), ints(task.held_out_batches(&device)[0].input_ids.clone()));
    let baselines = task.baselines();
    assert!(baselines["copy_unigram_loss"] < baselines["unigram_loss"] && baselines["unigram_infill_loss"] > baselines["copy_unigram_loss"], "{baselines:?}");
}

#[test]
fn with_the_loss_on_infilled_tokens_the_labels_skip_what_the_source_shows_and_the_decoder_reads_the_whole_block() {
    let (task, _, _) = task(6, 24, 8, DenoisingConfig::default());
    let device = Device::flex();
    let full = task.train_batch(3, &device);
    let batch = task.with_infilled_loss().train_batch(3, &device);
    assert_eq!(ints(batch.input_ids.clone()), ints(full.input_ids.clone()), "the same noise");
    assert!(full.decoder_input_ids.is_none(), "BART's decoder reads its labels shifted right");
    let (blocks, labels, decoder) = (ints(full.labels), ints(batch.labels), ints(batch.decoder_input_ids.expect("the block shifted right")));
    let infilled = full.infilled.into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
    let t = blocks[0].len();
    let mut predicted = 0;
    for (row, block) in blocks.iter().enumerate() {
        let len = block.iter().take_while(|&&l| l != -100).count();
        for k in 0..t {
            let expected = if k < len && infilled[row * t + k] == 1.0 { block[k] } else { -100 };
            assert_eq!(labels[row][k], expected, "row {row}, target {k}: a label only where the source no longer shows the token");
            predicted += usize::from(expected != -100);
        }
        // `</s>` starts the decoder, then the whole block (kept tokens included), padded.
        assert_eq!(decoder[row][0], 2, "row {row}");
        assert_eq!(&decoder[row][1..len], &block[..len - 1], "row {row}: the decoder reads the block shifted right");
        assert!(decoder[row][len..].iter().all(|&p| p == 1), "row {row}: padded");
    }
    assert!(predicted > 0 && predicted == batch.tokens, "{predicted} labels, {} counted", batch.tokens);
}

#[test]
fn bad_noise_and_mismatched_special_tokens_are_refused_by_name() {
    let corpus = Corpus::from_text("Call me Ishmael. Some years ago, never mind how long.\n\nIt is a way I have.");
    let tokenizer = Tokenizer::train(TOKENIZER, corpus.sentences(), 300, &TOKENIZER.config()).unwrap();
    let config = BartConfig::preset("tiny", tokenizer.vocab_size(), 64, [0, 1, 2]).unwrap();
    let bad = DenoisingConfig { mask: 1.5, ..DenoisingConfig::default() };
    let e = Denoising::new(&corpus, &corpus, &tokenizer, &config, bad, 16, 1, 0).unwrap_err();
    assert!(e.to_string().contains("mask") && e.to_string().contains("1.5"), "{e}");
    let swapped = BartConfig { eos_token_id: Some(0), ..config.clone() };
    let e = Denoising::new(&corpus, &corpus, &tokenizer, &swapped, DenoisingConfig::default(), 16, 1, 0).unwrap_err();
    assert!(matches!(e, DenoisingDataError::SpecialToken { field: "eos_token_id", .. }), "{e}");
    let e = Denoising::new(&corpus, &corpus, &tokenizer, &config, DenoisingConfig::default(), 16, 1000, 0).unwrap_err();
    assert!(e.to_string().contains("--batch-size"), "{e}");
}

#[test]
fn a_tiny_bart_learns_to_copy_and_to_infill_from_context() {
    let (task, _, config) = task(20, 16, 16, DenoisingConfig::default());
    let device = Backend::Flex.device().expect("flex is always compiled in").autodiff();
    // The weights are drawn at first use (the evaluation below): from a fixed seed.
    device.seed(5);
    let model = BartForConditionalGeneration::new_hf(&config, &device);
    let train = TrainConfig { steps: 1200, lr: 3e-3, warmup: 100, log_every: 50, eval_every: 0, checkpoint_every: 0, ..TrainConfig::default() };
    let run = run_dir("bart-learn");
    let trainer = Trainer::new(train, &run).with_progress(false);
    let before = trainer.evaluate(&task, &model, &task.held_out_batches(&device.clone().without_autodiff()));
    let chance = (config.vocab_size as f64).ln();
    assert!((before["loss"] - chance).abs() < 1.0, "initial loss {:.3}, chance is {chance:.3}", before["loss"]);
    let after = trainer.fit(&task, model, false).unwrap().held_out;
    // It copies what the source shows (most tokens right, the loss far below the unigram
    // baseline), and predicts the infilled tokens from context, below their unigram loss.
    // (Getting below the copy + unigram oracle takes the main job's ~800 steps of 128 blocks.)
    assert!(after["token_accuracy"] > 0.5 && after["loss"] < after["unigram_loss"] - 3.0, "{after:?}");
    assert!(after["infill_loss"] < after["unigram_infill_loss"] - 0.3, "{after:?}");
}

/// A run stopped after step 5 and resumed from its step-4 checkpoint ends with the weights of
/// the run never stopped (noise, dropout and data order are functions of the step), and the
/// micro-batches of a step on two threads give those of one: with BART's noise and with MASS.
#[test]
fn a_stopped_bart_or_mass_run_resumes_to_the_same_weights_on_any_thread_count() {
    for mass in [None, Some(sesame_text::MassConfig::default())] {
        let (task, _, mut config) = task(4, 16, 4, DenoisingConfig::default());
        let task = match mass {
            Some(m) => task.with_mass(m).unwrap(),
            None => task,
        };
        let name = if mass.is_some() { "mass" } else { "bart" };
        config.dropout = 0.1;
        let device = Backend::Flex.device().unwrap().autodiff();
        device.seed(3);
        let init = BartForConditionalGeneration::new_hf(&config, &device);
        let train = TrainConfig { steps: 6, grad_accum: 2, lr: 1e-3, warmup: 2, checkpoint_every: 2, eval_every: 3, log_every: 1, ..TrainConfig::default() };
        let full_dir = run_dir(&format!("{name}-full"));
        let full = Trainer::new(train.clone(), &full_dir).with_progress(false).fit(&task, init.clone(), false).unwrap();
        let dir = run_dir(&format!("{name}-stopped"));
        Trainer::new(train.clone(), &dir).with_progress(false).with_threads(2).with_stop_after(5).fit(&task, init.clone(), false).unwrap();
        let resumed = Trainer::new(train, &dir).with_progress(false).with_threads(2).fit(&task, init, true).unwrap();
        assert_eq!(resumed.resumed_from, 4);
        let (a, b) = (saved(&full.model, &config, &full_dir.join("hf")), saved(&resumed.model, &config, &dir.join("hf")));
        assert_eq!(a.len(), b.len());
        for ((tensor, x), (_, y)) in a.iter().zip(&b) {
            assert!(x == y, "{name}: {tensor}: the resumed two-thread run differs from the uninterrupted one");
        }
        assert_eq!(full.held_out, resumed.held_out, "{name}");
    }
}

/// MASS's batch of a fixture row: the block's fragment as the fixture drew it.
fn mass_row(f: &sesame_tests::Fixture, row: usize) -> (Vec<u32>, sesame_text::Mass) {
    use sesame_text::Fill;
    let width = f.get("input.block").shape[1];
    let at = |name: &str| f.get(name).i64[row * width..(row + 1) * width].to_vec();
    let block: Vec<u32> = at("input.block").into_iter().take_while(|&t| t != 1).map(|t| t as u32).collect();
    let fills: Vec<Fill> = at("label.fills")
        .into_iter()
        .take_while(|&v| v != -3)
        .map(|v| match v {
            -1 => Fill::Mask,
            -2 => Fill::Keep,
            t => Fill::Random(t as u32),
        })
        .collect();
    let start = f.get("label.start").i64[row] as usize;
    let mass = sesame_text::mass_at(&block, start, &fills, 4);
    (block, mass)
}

#[test]
fn the_first_step_of_mass_matches_pytorch() {
    use sesame_bart::pretraining::{denoising_step, DenoisingBatch};
    use sesame_tests::training::{first_step_failures, Fixed};
    let f = sesame_tests::Fixture::open("train/bart-mass-first-step");
    // The fragments as MASS builds them: the source, the decoder's input and the labels of
    // every row equal the PyTorch implementation's.
    let width = f.get("input.block").shape[1];
    let rows = f.get("label.start").i64.len();
    for row in 0..rows {
        let (block, mass) = mass_row(&f, row);
        let at = |name: &str| f.get(name).i64[row * width..row * width + block.len()].to_vec();
        let ints = |v: &[u32]| v.iter().map(|&t| i64::from(t)).collect::<Vec<_>>();
        assert_eq!(ints(&mass.source), at("input.input_ids"), "row {row}: source");
        assert_eq!(ints(&mass.decoder_input), at("input.decoder_input_ids"), "row {row}: decoder input");
        let labels: Vec<i64> = (0..block.len()).map(|i| if mass.fragment.contains(&i) { i64::from(block[i]) } else { -100 }).collect();
        assert_eq!(labels, at("label.labels"), "row {row}: labels");
    }
    for (backend, device) in sesame_tests::devices() {
        let train = device.clone().autodiff();
        let loaded = BartForConditionalGeneration::from_pretrained(&f.dir, &train).unwrap();
        let labels: Tensor<2, Int> = f.int("label.labels", &train);
        let batch = DenoisingBatch {
            input_ids: f.int("input.input_ids", &train),
            attention_mask: f.int("input.attention_mask", &train),
            decoder_input_ids: Some(f.int("input.decoder_input_ids", &train)),
            infilled: labels.clone().not_equal_elem(-100).float(),
            labels,
            tokens: 0,
        };
        let step = |model: &BartForConditionalGeneration, batch: DenoisingBatch| denoising_step(model, batch, 2);
        let failures = first_step_failures(&f, &Fixed { batch, step }, loaded.model, &loaded.config, &format!("bart-mass-{backend}"));
        assert!(failures.is_empty(), "{backend}:\n  {}", failures.join("\n  "));
    }
}

