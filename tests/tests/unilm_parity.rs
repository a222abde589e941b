//! UniLM against transformers: BertForMaskedLM given the equivalent 4-D additive mask, for each
//! of the four self-attention masks, on a padded batch (padding queries under the
//! right-to-left mask see no key and attend uniformly, as HF's additive mask makes them), on
//! every compiled backend, with the default outputs and with every output requested. And the
//! masks are real: changing a token a query may not see leaves its logits bit-identical.

use burn::prelude::*;
use sesame_layers::{EncoderInput, OutputOptions, PretrainedModel};
use sesame_tests::parity::{check_encoder, check_loss};
use sesame_tests::{devices, values, Checker, Fixture, TOLERANCE};
use sesame_unilm::{UnilmForMaskedLM, UnilmMask};

fn mask_of(name: &str, f: &Fixture) -> UnilmMask {
    match name {
        "bidirectional" => UnilmMask::Bidirectional,
        "left-to-right" => UnilmMask::LeftToRight,
        "right-to-left" => UnilmMask::RightToLeft,
        _ => UnilmMask::SeqToSeq { source_len: f.get("input.source_len").i64.iter().map(|&n| n as usize).collect() },
    }
}

#[test]
fn every_unilm_mask_matches_transformers_with_the_equivalent_additive_mask() {
    for name in ["bidirectional", "left-to-right", "right-to-left", "seq-to-seq"] {
        let f = Fixture::open(&format!("unilm/{name}"));
        let mask = mask_of(name, &f);
        for (backend, device) in devices() {
            let model = UnilmForMaskedLM::from_pretrained(&f.dir, &device).unwrap().model;
            // The mask's restriction is the fixture's, bit for bit.
            let [b, s] = [f.get("input.input_ids").shape[0], f.get("input.input_ids").shape[1]];
            let restriction = mask.restriction(b, 0, s, &device).map(|r| r.int().into_data().convert::<i64>().try_to_vec::<i64>().unwrap());
            assert_eq!(restriction.unwrap_or(vec![0; b * s * s]), f.get("input.restriction").i64, "{name}");
            for options in [OutputOptions::default(), OutputOptions::all()] {
                let input = EncoderInput::new(f.int("input.input_ids", &device))
                    .with_attention_mask(f.int("input.attention_mask", &device))
                    .with_token_type_ids(f.int("input.token_type_ids", &device));
                let out = model.forward(mask.apply(input), Some(f.int("label.labels", &device)), options);
                let mut c = Checker::default();
                c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
                check_loss(&mut c, &f, out.loss);
                check_encoder(&mut c, &f, &out.encoder, options);
                c.finish(&format!("unilm {name} on {backend}, {}", if options.attentions { "all outputs" } else { "default outputs" }));
            }
        }
    }
}

/// Logits `[seq, vocab]` of row 0 of `tokens` under `mask`.
fn logits(model: &UnilmForMaskedLM, tokens: &[i64], types: &[i64], mask: &UnilmMask, options: OutputOptions, device: &Device) -> Vec<Vec<f32>> {
    let s = tokens.len();
    let input = EncoderInput::new(Tensor::from_data(TensorData::new(tokens.to_vec(), [1, s]), device))
        .with_attention_mask(Tensor::ones([1, s], device))
        .with_token_type_ids(Tensor::from_data(TensorData::new(types.to_vec(), [1, s]), device));
    let out = model.forward(mask.apply(input), None, options).logits;
    let v = values(out);
    v.chunks(v.len() / s).map(<[f32]>::to_vec).collect()
}

#[test]
fn a_token_a_query_may_not_see_leaves_its_logits_bit_identical() {
    let f = Fixture::open("unilm/left-to-right");
    let tokens = [2, 17, 23, 3, 40, 41, 42, 43, 3];
    let mut changed = tokens;
    changed[6] = 11; // a target token, position 6
    for (backend, device) in devices() {
        let model = UnilmForMaskedLM::from_pretrained(&f.dir, &device).unwrap().model;
        for options in [OutputOptions::default(), OutputOptions::all()] {
            // (mask, token types, the positions that may not see position 6, the positions that may)
            let cases: [(UnilmMask, [i64; 9], Vec<usize>, Vec<usize>); 4] = [
                (UnilmMask::LeftToRight, [2; 9], (0..6).collect(), (6..9).collect()),
                (UnilmMask::SeqToSeq { source_len: vec![4] }, [4, 4, 4, 4, 5, 5, 5, 5, 5], (0..6).collect(), (6..9).collect()),
                (UnilmMask::RightToLeft, [3; 9], (7..9).collect(), (0..7).collect()),
                (UnilmMask::Bidirectional, [0, 0, 0, 0, 1, 1, 1, 1, 1], vec![], (0..9).collect()),
            ];
            for (mask, types, blind, seeing) in cases {
                let before = logits(&model, &tokens, &types, &mask, options, &device);
                let after = logits(&model, &changed, &types, &mask, options, &device);
                for i in blind {
                    assert_eq!(before[i], after[i], "{backend} {mask:?}: position {i} saw the change at 6");
                }
                for i in seeing {
                    assert_ne!(before[i], after[i], "{backend} {mask:?}: position {i} did not see the change at 6");
                }
            }
        }
    }
}

#[test]
fn a_unilm_v1_checkpoint_loads_with_its_token_type_table_widened() {
    let f = Fixture::open("unilm/v1-checkpoint");
    for (backend, device) in devices() {
        let loaded = UnilmForMaskedLM::from_pretrained(&f.dir, &device).unwrap();
        assert!(loaded.report.initialized.is_empty() && loaded.report.unused.is_empty(), "{}", loaded.report);
        assert_eq!(loaded.config.type_vocab_size, 6, "widened to UniLM's six token types");
        assert_eq!(loaded.config.layer_norm_eps, 1e-5, "UniLM v1's LayerNorm epsilon");
        let table = loaded.model.base.embeddings.token_type_embeddings.as_ref().unwrap().weight.val();
        let rows: Vec<Vec<f32>> = { let v = values(table); v.chunks(32).map(<[f32]>::to_vec).collect() };
        assert_eq!((rows.len(), &rows[2], &rows[3], &rows[4], &rows[5]), (6, &rows[0], &rows[0], &rows[0], &rows[1]), "{backend}");
        // With the first two types it is the BERT it was.
        let input = EncoderInput::new(f.int("input.input_ids", &device))
            .with_attention_mask(f.int("input.attention_mask", &device))
            .with_token_type_ids(f.int("input.token_type_ids", &device));
        let out = loaded.model.forward(input, Some(f.int("label.labels", &device)), OutputOptions::all());
        let mut c = Checker::default();
        c.close("logits", out.logits, f.get("output.logits"), TOLERANCE);
        check_loss(&mut c, &f, out.loss);
        check_encoder(&mut c, &f, &out.encoder, OutputOptions::all());
        c.finish(&format!("unilm v1 checkpoint on {backend}"));
        // Saved, it is a six-type BERT that loads back as it is.
        let dir = sesame_tests::Scratch::path(&format!("unilm-v1-{backend:?}"));
        loaded.model.save_pretrained(&loaded.config, &dir).unwrap();
        let again = UnilmForMaskedLM::from_pretrained(&dir, &device).unwrap();
        assert_eq!(again.config.stored_type_vocab_size, None);
        assert!(again.report.initialized.is_empty() && again.report.unused.is_empty(), "{}", again.report);
    }
}

#[test]
fn a_bert_checkpoint_reads_as_unilm_and_unsupported_unilm_options_are_refused() {
    let device = devices().remove(0).1;
    let loaded = UnilmForMaskedLM::from_pretrained(&Fixture::open("bert/base-masked-lm").dir, &device).unwrap();
    assert_eq!((loaded.config.type_vocab_size, loaded.config.stored_type_vocab_size), (6, Some(2)));
    let dir = sesame_tests::Scratch::dir("unilm-bad");
    for (field, value) in [("relax_projection", "2"), ("new_pos_ids", "true"), ("num_qkv", "2"), ("seg_emb", "true"), ("ffn_type", "1")] {
        std::fs::write(dir.join("config.json"), format!("{{\"hidden_size\": 32, \"num_attention_heads\": 4, \"{field}\": {value}}}")).unwrap();
        let err = UnilmForMaskedLM::from_pretrained(&dir, &device).unwrap_err().to_string();
        assert!(err.contains(field), "{field}: {err}");
    }
}

/// Sequence-to-sequence decoding (`UnilmSeq2SeqDecoder`) from two sources of different lengths:
/// every step's scores are the cloze logits of a `[MASK]` after the target so far, computed by
/// one full seq-to-seq forward pass of `[CLS] S [SEP] (padding) T [MASK]` built here
/// independently; decoding with the key/value cache equals decoding from scratch, under greedy
/// and beam search, on every backend.
#[test]
fn seq_to_seq_decoding_equals_the_full_seq_to_seq_forward_pass() {
    use sesame_generate::{beam_search, greedy, BeamSettings, Decoder, Stopping};
    use sesame_unilm::UnilmSeq2SeqDecoder;
    let f = Fixture::open("unilm/seq-to-seq");
    let sources: Vec<Vec<u32>> = vec![vec![2, 10, 11, 12, 13, 3], vec![2, 20, 21, 3]];
    let (mask_id, width) = (4u32, 6usize);
    let stopping = Stopping { max_new_tokens: 6, eos_token_ids: vec![3], pad_token_id: 0, output_scores: true };
    for (backend, device) in devices() {
        let loaded = UnilmForMaskedLM::from_pretrained(&f.dir, &device).unwrap();
        let (model, config) = (loaded.model, loaded.config);
        let decoder = UnilmSeq2SeqDecoder::new(&model, &config, sources.clone(), mask_id).unwrap();
        let scratch = UnilmSeq2SeqDecoder::new(&model, &config, sources.clone(), mask_id).unwrap().with_cache(false);
        let prompts = vec![vec![]; 2];
        let cached = greedy(&decoder, &prompts, &[], &stopping).unwrap();
        let uncached = greedy(&scratch, &prompts, &[], &stopping).unwrap();
        assert_eq!(cached.sequences, uncached.sequences, "{backend:?}: cached and from-scratch greedy decoding differ");
        assert!(cached.scores.len() >= 3, "{backend:?}: decoding ended after {} steps; the test needs a longer target", cached.scores.len());
        // Each step, independently: the whole sequence with a [MASK] after the target so far.
        for (step, rows) in cached.scores.iter().enumerate() {
            for (row, scores) in rows.iter().enumerate() {
                let source = &sources[row];
                let mut tokens: Vec<i64> = source.iter().map(|&t| i64::from(t)).collect();
                tokens.resize(width, 0);
                tokens.extend(cached.sequences[row][..step].iter().map(|&t| i64::from(t)));
                tokens.push(i64::from(mask_id));
                let s = tokens.len();
                let attention: Vec<i64> = (0..s).map(|j| i64::from(j >= width || j < source.len())).collect();
                let mask = UnilmMask::SeqToSeq { source_len: vec![width] };
                // microsoft/unilm's positions: the source from 0, its padding 0, the target
                // right after the source's own end.
                let len = source.len();
                let positions: Vec<i64> = (0..s).map(|j| if j < len { j as i64 } else if j < width { 0 } else { (j - width + len) as i64 }).collect();
                let input = EncoderInput::new(Tensor::from_data(TensorData::new(tokens, [1, s]), &device))
                    .with_attention_mask(Tensor::from_data(TensorData::new(attention, [1, s]), &device))
                    .with_position_ids(Tensor::from_data(TensorData::new(positions, [1, s]), &device))
                    .with_token_type_ids(mask.token_type_ids(&[width], s, &device));
                let full = values(model.forward(mask.apply(input), None, OutputOptions::default()).logits);
                let last = &full[full.len() - scores.len()..];
                let gap = sesame_tests::gap(last, scores);
                assert!(gap <= TOLERANCE, "{backend:?}: step {step} row {row}: decoding and the full pass differ by {gap}");
            }
        }
        let beams = BeamSettings { num_return_sequences: 2, ..BeamSettings::new(3) };
        let a = beam_search(&decoder, &prompts, &[], &stopping, &beams).unwrap();
        let b = beam_search(&scratch, &prompts, &[], &stopping, &beams).unwrap();
        assert_eq!(a.sequences, b.sequences, "{backend:?}: cached and from-scratch beam search differ");
        let gap = sesame_tests::gap(&a.sequences_scores.unwrap(), &b.sequences_scores.unwrap());
        assert!(gap <= TOLERANCE, "{backend:?}: beam scores differ by {gap}");
        assert!(matches!(decoder.start(&[vec![]]), Err(sesame_layers::InputError::ShapeMismatch { .. })));
    }
}
