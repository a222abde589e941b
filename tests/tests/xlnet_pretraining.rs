//! XLNet's permutation-LM pre-training on the shared trainer: batches are the original's
//! (`data_utils.py`: a reused part continuing the previous window, A `<sep>` B `<sep>` `<cls>`,
//! spans to predict, a factorisation order within blocks), each a function of its index; a
//! tiny XLNet learns; and a stopped run resumes to the uninterrupted run's weights, the memory
//! carried across the checkpoint.

use burn::prelude::*;
use sesame_layers::PretrainedModel;
use sesame_tests::training::{run_dir, saved_bytes as saved};
use sesame_tests::{fixtures_dir, Backend};
use sesame_text::{Corpus, Tokenizer};
use sesame_train::{TrainConfig, TrainTask, Trainer};
use sesame_xlnet::pretraining::{PermutationConfig, PermutationLm, TOKENIZER};
use sesame_xlnet::{XlnetConfig, XlnetLmHeadModel};

/// The shipped corpus's first `docs` chapters, XLNet's Unigram tokenizer trained on them, a
/// tiny XLNet for it, and the task over windows of `seq_len` tokens.
fn task(docs: usize, seq_len: usize, batch: usize) -> (PermutationLm, Tokenizer, XlnetConfig, PermutationConfig) {
    let corpus = Corpus::read(&fixtures_dir().join("../data/moby-dick.txt")).unwrap();
    let corpus = Corpus { documents: corpus.documents.into_iter().take(docs).collect() };
    let (train, held_out) = corpus.split_held_out(0.1);
    let tokenizer = Tokenizer::train(TOKENIZER, train.sentences(), 600, &TOKENIZER.config()).unwrap();
    let permutation = PermutationConfig::new(seq_len);
    let id = |t: &str| tokenizer.token_to_id(t).unwrap() as usize;
    let mut config = XlnetConfig::preset("tiny", tokenizer.vocab_size(), &permutation, seq_len, [id("<pad>"), id("<s>"), id("</s>")]).unwrap();
    (config.d_model, config.n_head, config.d_inner, config.n_layer) = (64, 2, 128, 2);
    let task = PermutationLm::new(&train, &held_out, &tokenizer, config.vocab_size, permutation.clone(), batch, 7).unwrap();
    (task, tokenizer, config, permutation)
}

fn ints(t: Tensor<2, Int>) -> Vec<Vec<i64>> {
    let [_, s] = t.dims();
    t.into_data().convert::<i64>().try_to_vec::<i64>().unwrap().chunks(s).map(<[i64]>::to_vec).collect()
}

fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

#[test]
fn batches_are_the_original_windows_with_their_orders_and_fixed_by_their_index() {
    let (task, tokenizer, _, c) = task(6, 32, 8);
    let device = Device::flex();
    let (sep, cls) = (tokenizer.token_to_id("<sep>").unwrap() as i64, tokenizer.token_to_id("<cls>").unwrap() as i64);
    let (s, r, p) = (c.seq_len, c.reuse_len, c.num_predict);
    let (first, second) = (task.train_batch(3, &device), task.train_batch(4, &device));
    let (ids, next_ids, types, labels) = (ints(first.input_ids.clone()), ints(second.input_ids.clone()), ints(first.token_type_ids.clone()), ints(first.labels.clone()));
    let (perm, mapping) = (floats(first.perm_mask.clone()), floats(first.target_mapping.clone()));
    assert_eq!(ids.len(), 8);
    for row in 0..8 {
        let (x, t) = (&ids[row], &types[row]);
        // Reused part, A <sep> B <sep> <cls>, with segment ids 0 … 0 1 … 1 2.
        assert_eq!((x[s - 1], t[s - 1], x[s - 2], t[s - 2]), (cls, 2, sep, 1), "row {row}: {x:?}");
        let a_sep = (r..s - 2).find(|&k| x[k] == sep && t[k] == 0).unwrap_or_else(|| panic!("row {row}: A ends with <sep>: {x:?} {t:?}"));
        assert!(t[..=a_sep].iter().all(|&v| v == 0) && t[a_sep + 1..s - 1].iter().all(|&v| v == 1), "row {row}: {t:?}");
        // The window advances by the reused length: the next batch's reused part follows.
        let n = &next_ids[row];
        assert_ne!(x[..r], n[..r], "row {row}: the next window moves on");
        // Predicted positions: one-hot rows of target_mapping, labels their tokens, never
        // <sep> or <cls>; the rows after the targets are empty.
        let mut predicted = Vec::new();
        for k in 0..p {
            let one_hot = &mapping[(row * p + k) * s..(row * p + k + 1) * s];
            match one_hot.iter().position(|&v| v == 1.0) {
                Some(pos) => {
                    assert_eq!(one_hot.iter().sum::<f32>(), 1.0);
                    assert_eq!(labels[row][k], x[pos], "row {row}: the label is the token itself");
                    assert!(x[pos] != sep && x[pos] != cls);
                    predicted.push(pos);
                }
                None => assert_eq!(labels[row][k], -100),
            }
        }
        assert!(predicted.len() >= p - 2 && predicted.windows(2).all(|w| w[0] < w[1]), "row {row}: {predicted:?}");
        let sees = |i: usize, j: usize| perm[(row * s + i) * s + j] == 0.0;
        for i in 0..s {
            for j in 0..s {
                if i < r && j >= r {
                    assert!(!sees(i, j), "row {row}: the reused part never sees the new one");
                }
                if i >= r && j < r {
                    assert!(sees(i, j), "row {row}: the new part sees all of the reused one");
                }
            }
            if predicted.contains(&i) {
                assert!(!sees(i, i), "row {row}: a predicted token never sees itself");
            }
        }
    }
    // The same index gives the same batch; held-out batches are fixed.
    assert_eq!(ints(task.train_batch(3, &device).input_ids), ids);
    assert_eq!(floats(task.train_batch(3, &device).perm_mask), perm);
    let held_out = task.held_out_batches(&device);
    assert!(!held_out.is_empty());
    assert_eq!(floats(held_out[0].perm_mask.clone()), floats(task.held_out_batches(&device)[0].perm_mask.clone()));
    assert!(task.baselines()["unigram_loss"] > 3.0);
}

#[test]
fn bad_settings_are_refused_by_name() {
    let corpus = Corpus::from_text("Call me Ishmael. Some years ago, never mind how long.\n\nIt is a way I have.");
    let tokenizer = Tokenizer::train(TOKENIZER, corpus.sentences(), 200, &TOKENIZER.config()).unwrap();
    let e = PermutationLm::new(&corpus, &corpus, &tokenizer, tokenizer.vocab_size(), PermutationConfig::new(32), 3, 0).unwrap_err();
    assert!(e.to_string().starts_with("bi_data:"), "{e}");
    let e = PermutationLm::new(&corpus, &corpus, &tokenizer, tokenizer.vocab_size(), PermutationConfig::new(32), 4, 0).unwrap_err();
    assert!(e.to_string().contains("--batch-size"), "too little text: {e}");
    let e = PermutationLm::new(&corpus, &corpus, &tokenizer, 10, PermutationConfig::new(32), 2, 0).unwrap_err();
    assert!(e.to_string().contains("vocab"), "{e}");
}

#[test]
fn a_tiny_xlnet_learns_to_predict_in_any_order() {
    let (task, _, config, _) = task(20, 32, 16);
    let device = Backend::Flex.device().expect("flex is always compiled in").autodiff();
    device.seed(5);
    let model = XlnetLmHeadModel::new_hf(&config, &device);
    let train = TrainConfig { steps: 1200, lr: 3e-3, warmup: 100, log_every: 50, eval_every: 0, checkpoint_every: 0, ..TrainConfig::default() };
    let run = run_dir("xlnet-learn");
    let trainer = Trainer::new(train, &run).with_progress(false);
    let before = trainer.evaluate(&task, &model, &task.held_out_batches(&device.clone().without_autodiff()));
    let chance = (config.vocab_size as f64).ln();
    assert!((before["loss"] - chance).abs() < 1.0, "initial loss {:.3}, chance is {chance:.3}", before["loss"]);
    let after = trainer.fit(&task, model, false).unwrap().held_out;
    assert!(after["loss"] < after["unigram_loss"] - 0.3, "{after:?}");
}

/// A run stopped after step 5 and resumed from its step-4 checkpoint ends with the weights of
/// the run never stopped: the memory of the last window is saved with the checkpoint and read
/// back (a resume without it would start the window after from no memory and differ).
#[test]
fn a_stopped_xlnet_run_resumes_to_the_same_weights_memory_included() {
    let (task, _, config, _) = task(4, 16, 4);
    let device = Backend::Flex.device().unwrap().autodiff();
    device.seed(3);
    let init = XlnetLmHeadModel::new_hf(&config, &device);
    let train = TrainConfig { steps: 6, grad_accum: 2, lr: 1e-3, warmup: 2, checkpoint_every: 2, eval_every: 3, log_every: 1, ..TrainConfig::default() };
    let full_dir = run_dir("xlnet-full");
    let full = Trainer::new(train.clone(), &full_dir).with_progress(false).fit(&task, init.clone(), false).unwrap();
    let dir = run_dir("xlnet-stopped");
    Trainer::new(train.clone(), &dir).with_progress(false).with_threads(2).with_stop_after(5).fit(&task, init.clone(), false).unwrap();
    assert!(dir.join("checkpoints/step-00000004/memory.safetensors").is_file(), "the memory is checkpointed");
    let resumed = Trainer::new(train.clone(), &dir).with_progress(false).with_threads(2).fit(&task, init.clone(), true).unwrap();
    assert_eq!(resumed.resumed_from, 4);
    let (a, b) = (saved(&full.model, &config, &full_dir.join("hf")), saved(&resumed.model, &config, &dir.join("hf")));
    assert_eq!(a.len(), b.len());
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert!(x == y, "{name}: the resumed run differs from the uninterrupted one");
    }
    assert_eq!(full.held_out, resumed.held_out);
    // Without the memory file the resumed run is another run.
    let forgetful = run_dir("xlnet-forgetful");
    Trainer::new(train.clone(), &forgetful).with_progress(false).with_stop_after(5).fit(&task, init.clone(), false).unwrap();
    let memory = forgetful.join("checkpoints/step-00000004/memory.safetensors");
    std::fs::write(&memory, safetensors::serialize(Vec::<(String, safetensors::tensor::TensorView)>::new(), None).unwrap()).unwrap();
    let other = Trainer::new(train, &forgetful).with_progress(false).fit(&task, init, true).unwrap();
    assert_ne!(saved(&other.model, &config, &forgetful.join("hf")), a, "the memory changes what the next step learns");
}
