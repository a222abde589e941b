//! fill-mask ranks the tokens as transformers' logits do.

use burn::prelude::*;
use burn::tensor::activation::softmax;
use sesame_pipelines::{fill_mask, fill_masks, PipelineError};
use sesame_bert::BertForMaskedLM;
use sesame_layers::PretrainedModel;
use sesame_tests::{devices, Fixture};
use sesame_text::Tokenizer;

#[test]
fn fill_mask_follows_the_reference_logits() {
    let f = Fixture::open("bert/base-fill-mask");
    let text = f.meta["text"].as_str().unwrap().to_string();
    let tokenizer = Tokenizer::from_dir(&f.dir).unwrap();
    let ids = &f.get("input.input_ids").i64;
    let mask_id = tokenizer.mask_token_id().unwrap() as i64;
    let pos = ids.iter().position(|&i| i == mask_id).expect("fixture text has a mask");
    let logits = &f.get("output.logits");
    let vocab = logits.shape[2];
    let row = logits.f32[pos * vocab..(pos + 1) * vocab].to_vec();
    let mut order: Vec<usize> = (0..vocab).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    let probs: Vec<f32> = softmax(Tensor::<1>::from_data(TensorData::new(row.clone(), [vocab]), &devices()[0].1), 0)
        .into_data().convert::<f32>().try_to_vec().unwrap();
    for (backend, device) in devices() {
        let loaded = BertForMaskedLM::from_pretrained(&f.dir, &device).unwrap();
        let predictions = fill_mask(&loaded.model, &loaded.config, &tokenizer, &text, 5).unwrap();
        assert_eq!(predictions.len(), 1, "{backend}: one mask");
        for (rank, p) in predictions[0].iter().enumerate() {
            assert_eq!(p.id as usize, order[rank], "{backend}: rank {rank}");
            assert!((p.score - probs[order[rank]]).abs() < 1e-4, "{backend}: score of rank {rank}");
            assert_eq!(Some(p.token.clone()), tokenizer.id_to_token(p.id));
        }
        let no_mask = fill_mask(&loaded.model, &loaded.config, &tokenizer, "no mask here", 5);
        assert!(matches!(no_mask, Err(PipelineError::NoMask { .. })), "{backend}");
    }
}

#[test]
fn batches_run_on_threads_answer_each_text_in_order() {
    let f = Fixture::open("bert/base-fill-mask");
    let text = f.meta["text"].as_str().unwrap().to_string();
    let tokenizer = Tokenizer::from_dir(&f.dir).unwrap();
    // Five texts of different lengths, so that ordering by length reorders them.
    let texts = [format!("so {text}"), text.clone(), format!("{text} and then"), format!("and so {text} again and again"), format!("{text}.")];
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    for (backend, device) in devices() {
        let loaded = BertForMaskedLM::from_pretrained(&f.dir, &device).unwrap();
        let alone: Vec<_> = refs.iter().map(|t| fill_mask(&loaded.model, &loaded.config, &tokenizer, t, 3).unwrap()).collect();
        // Batches of one: five batches, run on threads on a CPU device.
        let threaded = fill_masks(&loaded.model, &loaded.config, &tokenizer, &refs, 3, 1).unwrap();
        assert_eq!(threaded.len(), refs.len(), "{backend}");
        for (i, (a, t)) in alone.iter().zip(&threaded).enumerate() {
            let ids = |p: &Vec<Vec<sesame_pipelines::Prediction>>| p.iter().flatten().map(|p| (p.id, p.score)).collect::<Vec<_>>();
            assert_eq!(ids(a), ids(t), "{backend}: text {i} answered differently in a batch of its own on a thread");
        }
        assert_ne!(alone[0], alone[2], "{backend}: the texts are told apart");
        // A failing batch among others is reported, not lost.
        let mut with_bad = refs.clone();
        with_bad.insert(3, "no mask here");
        let err = fill_masks(&loaded.model, &loaded.config, &tokenizer, &with_bad, 3, 1);
        assert!(matches!(err, Err(PipelineError::NoMask { ref text, .. }) if text == "no mask here"), "{backend}: {err:?}");
    }
}
