//! BART against transformers (fixtures/bart, `make_fixtures.py --only bart`): every head on two
//! shapes, with the default outputs and with every output, compared by HF's output names on
//! every compiled backend; generation (greedy and beam search) token for token, with the cache
//! and from scratch; checkpoints that store the shared table under its other names; and
//! the errors of bad input.

use burn::prelude::*;
use sesame_bart::{BartConfig, BartForConditionalGeneration, BartForQuestionAnswering, BartForSequenceClassification, BartModel};
use sesame_generate::*;
use sesame_generate::decoding::{Seq2SeqDecoder, Source};
use sesame_layers::{InputError, NamedOutput, OutputOptions, PretrainedModel, Seq2SeqInput, SequenceLabels};
use sesame_tests::{compare_named as compare, devices, max_abs_diff, Fixture, TOLERANCE};

const SHAPES: [&str; 2] = ["base", "wide"];

/// The fixture's inputs as `Seq2SeqInput` (those it holds).
fn input(f: &Fixture, device: &Device) -> Seq2SeqInput {
    let get = |name: &str| f.has(&format!("input.{name}")).then(|| f.int::<2>(&format!("input.{name}"), device));
    Seq2SeqInput {
        input_ids: get("input_ids"),
        attention_mask: get("attention_mask"),
        decoder_input_ids: get("decoder_input_ids"),
        decoder_attention_mask: get("decoder_attention_mask"),
        ..Default::default()
    }
}

/// Run `run` on every shape's `head` fixture, on every backend, with default and all outputs.
fn each<M: PretrainedModel<Config = BartConfig>>(head: &str, run: impl Fn(&M, &Fixture, &Device, OutputOptions) -> Vec<NamedOutput>) {
    for shape in SHAPES {
        let f = Fixture::open(&format!("bart/{shape}-{head}"));
        for (backend, device) in devices() {
            let loaded = M::from_pretrained(&f.dir, &device).unwrap();
            assert!(loaded.report.initialized.is_empty() && loaded.report.unused.is_empty(), "{shape}-{head}: {}", loaded.report);
            for (mode, options) in [("default", OutputOptions::default()), ("all", OutputOptions::all())] {
                compare(&f, mode, run(&loaded.model, &f, &device, options), &format!("{backend:?} {shape}-{head}"));
            }
        }
    }
}

#[test]
fn bart_model_matches_transformers() {
    for head in ["model", "model-shifted"] {
        each::<BartModel>(head, |m, f, d, o| m.forward(input(f, d), o).named());
    }
}

#[test]
fn bart_for_conditional_generation_matches_transformers() {
    each::<BartForConditionalGeneration>("conditional-generation", |m, f, d, o| m.forward(input(f, d), Some(f.int::<2>("label.labels", d)), o).named());
}

#[test]
fn bart_for_sequence_classification_matches_transformers() {
    each::<BartForSequenceClassification>("seqcls-single", |m, f, d, o| {
        let labels = SequenceLabels::SingleLabel(f.int::<1>("label.labels", d));
        m.forward(input(f, d), Some(labels), o).unwrap().named()
    });
    each::<BartForSequenceClassification>("seqcls-multilabel", |m, f, d, o| {
        let labels = SequenceLabels::MultiLabel(f.float::<2>("label.labels", d));
        m.forward(input(f, d), Some(labels), o).unwrap().named()
    });
}

#[test]
fn bart_for_question_answering_matches_transformers() {
    each::<BartForQuestionAnswering>("qa", |m, f, d, o| {
        let positions = (f.int::<1>("label.start_positions", d), f.int::<1>("label.end_positions", d));
        m.forward(input(f, d), Some(positions), o).named()
    });
}

/// transformers' processors for the generation fixture's runs, in `generate`'s order.
fn processors(run: &str) -> Vec<Box<dyn LogitsProcessor>> {
    match run {
        "greedy" => vec![],
        "greedy-forced" => vec![
            Box::new(NoRepeatNgram::new(2).unwrap()),
            Box::new(ForcedBos { bos_token_id: 0 }),
            Box::new(ForcedEos { max_length: 10, eos_token_ids: vec![2] }),
        ],
        "beam" => vec![Box::new(NoRepeatNgram::new(1).unwrap())],
        "beam-early" => vec![Box::new(RepetitionPenalty::new(3.0).unwrap())],
        other => panic!("no run {other}"),
    }
}

fn eos_ids(value: &serde_json::Value) -> Vec<u32> {
    match value.as_array() {
        Some(ids) => ids.iter().map(|e| e.as_u64().unwrap() as u32).collect(),
        None => vec![value.as_u64().unwrap_or(2) as u32],
    }
}

/// Greedy and beam search from padded sources: the sequences (decoder start first), every
/// step's scores and beam search's sequence scores equal transformers' `generate`; cached
/// decoding (encoder run once, its keys and values shared by a source's beams) equals running
/// the whole model from scratch at every step.
#[test]
fn bart_generation_matches_transformers_generate() {
    let f = Fixture::open("bart/base-generation");
    for (backend, device) in devices() {
        let loaded = BartForConditionalGeneration::from_pretrained(&f.dir, &device).unwrap();
        let (model, config) = (&loaded.model, &loaded.config);
        let ids = f.int::<2>("input.input_ids", &device);
        let mask = f.int::<2>("input.attention_mask", &device);
        let prompts = vec![vec![2u32]; 2];
        for (run, settings) in f.meta["runs"].as_object().unwrap() {
            let stopping = Stopping {
                max_new_tokens: settings["max_new_tokens"].as_u64().unwrap() as usize,
                eos_token_ids: eos_ids(&settings["eos_token_id"]),
                pad_token_id: 1,
                output_scores: true,
            };
            let search = |use_cache: bool| {
                let decoder = Seq2SeqDecoder::new(model, config, Source { input_ids: ids.clone(), attention_mask: Some(mask.clone()) }).unwrap().with_cache(use_cache);
                match settings["num_beams"].as_u64() {
                    None => greedy(&decoder, &prompts, &processors(run), &stopping).unwrap(),
                    Some(k) => {
                        let beams = BeamSettings {
                            num_beams: k as usize,
                            length_penalty: settings["length_penalty"].as_f64().unwrap_or(1.0) as f32,
                            early_stopping: if settings["early_stopping"] == true { EarlyStopping::WhenFull } else { EarlyStopping::Heuristic },
                            num_return_sequences: settings["num_return_sequences"].as_u64().unwrap_or(1) as usize,
                        };
                        beam_search(&decoder, &prompts, &processors(run), &stopping, &beams).unwrap()
                    }
                }
            };
            let (cached, uncached) = (search(true), search(false));
            let ours: Vec<i64> = cached.sequences.iter().flatten().map(|&t| i64::from(t)).collect();
            assert_eq!(ours, f.get(&format!("output.{run}.sequences")).i64, "{backend:?} {run}: the sequences transformers generated");
            assert_eq!(cached.sequences, uncached.sequences, "{backend:?} {run}: cached and from-scratch decoding differ");
            let steps: Vec<f32> = cached.scores.iter().flatten().flatten().copied().collect();
            let theirs = &f.get(&format!("output.{run}.scores")).f32;
            let gap = sesame_tests::gap(&steps, theirs);
            assert!(steps.len() == theirs.len() && gap <= TOLERANCE, "{backend:?} {run}: step scores differ by {gap}");
            let scratch: Vec<f32> = uncached.scores.iter().flatten().flatten().copied().collect();
            let gap = sesame_tests::gap(&steps, &scratch);
            assert!(gap <= TOLERANCE, "{backend:?} {run}: cached and from-scratch scores differ by {gap}");
            if let Some(scores) = cached.sequences_scores {
                let diff = max_abs_diff(&scores, &f.get(&format!("output.{run}.sequences_scores")).f32);
                assert!(diff <= TOLERANCE, "{backend:?} {run}: sequence scores differ by {diff}");
            }
        }
    }
}

/// Sampling with temperature, top-k and top-p from padded sources: with torch's draws replayed,
/// every step's warped scores equal transformers' and the sequences end where its did (a row
/// that reaches `</s>` is padded after it); cached and from-scratch decoding agree.
#[test]
fn bart_sampling_replays_transformers_draws() {
    let f = Fixture::open("bart/base-generation");
    let settings = &f.meta["sample_runs"]["sample"];
    let want = f.get("output.sample.sequences");
    // The generated part of each row (after the decoder start), as torch drew it.
    let tokens: Vec<Vec<u32>> = want.i64.chunks(want.shape[1]).map(|r| r[1..].iter().map(|&t| t as u32).collect()).collect();
    let processors: Vec<Box<dyn LogitsProcessor>> = vec![
        Box::new(Temperature::new(settings["temperature"].as_f64().unwrap() as f32).unwrap()),
        Box::new(TopK::new(settings["top_k"].as_u64().unwrap() as usize, 1).unwrap()),
        Box::new(TopP::new(settings["top_p"].as_f64().unwrap() as f32, 1).unwrap()),
    ];
    let stopping = Stopping {
        max_new_tokens: settings["max_new_tokens"].as_u64().unwrap() as usize,
        eos_token_ids: eos_ids(&settings["eos_token_id"]),
        pad_token_id: 1,
        output_scores: true,
    };
    assert!(tokens.iter().any(|row| row.contains(&2)), "the fixture has a row that ends early");
    for (backend, device) in devices() {
        let loaded = BartForConditionalGeneration::from_pretrained(&f.dir, &device).unwrap();
        let (model, config) = (&loaded.model, &loaded.config);
        let ids = f.int::<2>("input.input_ids", &device);
        let mask = f.int::<2>("input.attention_mask", &device);
        let run = |use_cache: bool| {
            let decoder = Seq2SeqDecoder::new(model, config, Source { input_ids: ids.clone(), attention_mask: Some(mask.clone()) }).unwrap().with_cache(use_cache);
            sample(&decoder, &[vec![2u32], vec![2u32]], &processors, &stopping, &mut sesame_tests::Replay::new(tokens.clone())).unwrap()
        };
        let (cached, uncached) = (run(true), run(false));
        let ours: Vec<i64> = cached.sequences.iter().flatten().map(|&t| i64::from(t)).collect();
        assert_eq!(ours, want.i64, "{backend:?}: the replayed run ends where transformers' did");
        let steps: Vec<f32> = cached.scores.iter().flatten().flatten().copied().collect();
        let gap = sesame_tests::gap(&steps, &f.get("output.sample.scores").f32);
        assert!(gap <= TOLERANCE, "{backend:?}: warped step scores differ from transformers' by {gap}");
        let scratch: Vec<f32> = uncached.scores.iter().flatten().flatten().copied().collect();
        assert!(sesame_tests::gap(&steps, &scratch) <= TOLERANCE, "{backend:?}: cached and from-scratch sampling differ");
    }
}

/// Old checkpoints store the shared table three times (`shared`, `encoder.embed_tokens`,
/// `decoder.embed_tokens`), some only as `decoder.embed_tokens`: each loads, with nothing unused.
#[test]
fn the_shared_table_loads_under_any_of_its_names() {
    let f = Fixture::open("bart/base-model");
    let device = devices()[0].1.clone();
    let reference = BartModel::from_pretrained(&f.dir, &device).unwrap().model.forward(input(&f, &device), OutputOptions::default());
    let bytes = std::fs::read(f.dir.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for names in [vec!["decoder.embed_tokens.weight"], vec!["shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]] {
        let dir = sesame_tests::Scratch::dir(&format!("bart-aliases-{}", names.len()));
        std::fs::copy(f.dir.join("config.json"), dir.join("config.json")).unwrap();
        let mut tensors: Vec<(String, safetensors::tensor::TensorView)> = vec![];
        for (name, view) in st.tensors() {
            if name == "shared.weight" {
                tensors.extend(names.iter().map(|n| (n.to_string(), view.clone())));
            } else {
                tensors.push((name, view));
            }
        }
        safetensors::serialize_to_file(tensors, None, &dir.join("model.safetensors")).unwrap();
        let loaded = BartModel::from_pretrained(&dir, &device).unwrap();
        assert!(loaded.report.unused.is_empty() && loaded.report.initialized.is_empty(), "{names:?}: {}", loaded.report);
        let out = loaded.model.forward(input(&f, &device), OutputOptions::default());
        let diff = max_abs_diff(&sesame_tests::values(out.last_hidden_state), &sesame_tests::values(reference.last_hidden_state.clone()));
        assert!(diff == 0.0, "{names:?}: outputs differ by {diff}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Bad input is a typed error naming what is wrong, before the model runs.
#[test]
fn bad_input_is_refused_with_its_name() {
    let f = Fixture::open("bart/base-seqcls-single");
    let device = devices()[0].1.clone();
    let loaded = BartForSequenceClassification::from_pretrained(&f.dir, &device).unwrap();
    let (model, config) = (loaded.model, loaded.config);
    // One row with two </s>, one with one: HF refuses it too.
    let ids = Tensor::<2, Int>::from_data([[0, 5, 2, 6, 2], [0, 5, 6, 7, 2]], &device);
    let err = model.forward(Seq2SeqInput::new(ids.clone()), None, OutputOptions::default()).unwrap_err();
    assert!(matches!(&err, InputError::EosCount { eos: 2, counts } if counts == &vec![2, 1]), "{err}");
    assert!(err.to_string().contains("end-of-sequence"), "{err}");
    let none = Seq2SeqInput::default();
    assert!(matches!(BartModel::validate(&none, &config), Err(InputError::Missing { what: "input_ids", .. })));
    let out_of_range = Seq2SeqInput::new(Tensor::<2, Int>::from_data([[0, 500, 2]], &device));
    assert!(matches!(BartModel::validate(&out_of_range, &config), Err(InputError::IdOutOfRange { id: 500, .. })));
    let too_long = Seq2SeqInput::new(Tensor::<2, Int>::zeros([1, config.max_position_embeddings + 1], &device));
    assert!(matches!(BartModel::validate(&too_long, &config), Err(InputError::TooLong { .. })));
    // Old configs' architecture switches that BART's models leave off are refused by name.
    let mut pre_ln = config.clone();
    pre_ln.extra.insert("normalize_before".into(), true.into());
    let err = pre_ln.validate().unwrap_err().to_string();
    assert!(err.contains("normalize_before"), "{err}");
    let gen = BartForConditionalGeneration::from_pretrained(&Fixture::open("bart/base-generation").dir, &device).unwrap();
    let decoder = Seq2SeqDecoder::new(&gen.model, &gen.config, Source { input_ids: ids, attention_mask: None }).unwrap();
    assert!(matches!(decoder.start(&[vec![2]]), Err(InputError::ShapeMismatch { what: "decoder prompts", .. })));
}

/// `save_pretrained` writes what transformers loads strictly (no missing, unexpected or
/// mismatched tensor; `final_logits_bias` included) and runs to the same logits, tied and
/// untied. Skipped without `SESAME_PYTHON`, except under CI.
#[test]
fn transformers_loads_what_bart_saves() {
    let Some(python) = sesame_tests::python() else { return };
    let device = devices()[0].1.clone();
    for shape in SHAPES {
        let f = Fixture::open(&format!("bart/{shape}-conditional-generation"));
        let loaded = BartForConditionalGeneration::from_pretrained(&f.dir, &device).unwrap();
        let dir = sesame_tests::Scratch::path(&format!("bart-export-{shape}"));
        loaded.model.save_pretrained(&loaded.config, &dir).unwrap();
        let ours = sesame_tests::values(loaded.model.forward(input(&f, &device), None, OutputOptions::default()).logits);
        let out = dir.join("hf_out.safetensors");
        if let Err(e) = sesame_tests::hf_forward(&python, &dir, "BartForConditionalGeneration", &f.dir.join("io.safetensors"), &out) {
            panic!("{shape}: transformers did not load the saved model cleanly: {e}");
        }
        let theirs = sesame_tests::read_f32_tensors(&out).remove("output.logits").expect("transformers wrote logits");
        let diff = max_abs_diff(&ours, &theirs);
        assert!(diff <= TOLERANCE, "{shape}: transformers and Sesame differ by {diff:e} on the saved model");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn bart_for_causal_lm_matches_transformers() {
    each::<sesame_bart::BartForCausalLM>("causal-lm", |m, f, d, o| {
        m.forward(f.int::<2>("input.input_ids", d), Some(f.int::<2>("input.attention_mask", d)), Some(f.int::<2>("label.labels", d)), o).named()
    });
}

/// `BartForCausalLM` generates left to right through `CausalDecoder`: greedy and beam search
/// with the decoder's key/value cache equal them without it, and every greedy step's scores
/// are the last-position logits of one forward pass over the sequence so far (the forward
/// pass being at parity with transformers, above).
#[test]
fn bart_for_causal_lm_generates_left_to_right() {
    use sesame_generate::decoding::CausalDecoder;
    let f = Fixture::open("bart/base-causal-lm");
    let prompts: Vec<Vec<u32>> = vec![vec![0, 17, 23, 9], vec![0, 40, 41, 42]];
    let stopping = Stopping { max_new_tokens: 6, eos_token_ids: vec![2], pad_token_id: 1, output_scores: true };
    for (backend, device) in devices() {
        let loaded = sesame_bart::BartForCausalLM::from_pretrained(&f.dir, &device).unwrap();
        let (model, config) = (loaded.model, loaded.config);
        let cached = greedy(&CausalDecoder::new(&model, &config), &prompts, &[], &stopping).unwrap();
        let uncached = greedy(&CausalDecoder::new(&model, &config).with_cache(false), &prompts, &[], &stopping).unwrap();
        assert_eq!(cached.sequences, uncached.sequences, "{backend:?}: cached and uncached greedy decoding differ");
        for (step, rows) in cached.scores.iter().enumerate() {
            for (row, scores) in rows.iter().enumerate() {
                let so_far: Vec<i64> = cached.sequences[row][..prompts[row].len() + step].iter().map(|&t| i64::from(t)).collect();
                let s = so_far.len();
                let logits = model.forward(Tensor::from_data(TensorData::new(so_far, [1, s]), &device), None, None, OutputOptions::default()).logits;
                let vocab = logits.dims()[2];
                let last = logits.slice([0..1, s - 1..s, 0..vocab]).into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
                let gap = sesame_tests::gap(&last, scores);
                assert!(gap <= TOLERANCE, "{backend:?}: step {step} row {row}: decoding and the full pass differ by {gap}");
            }
        }
        let beams = BeamSettings { num_return_sequences: 2, ..BeamSettings::new(3) };
        let (a, b) = (
            beam_search(&CausalDecoder::new(&model, &config), &prompts, &[], &stopping, &beams).unwrap(),
            beam_search(&CausalDecoder::new(&model, &config).with_cache(false), &prompts, &[], &stopping, &beams).unwrap(),
        );
        assert_eq!(a.sequences, b.sequences, "{backend:?}: cached and uncached beam search differ");
    }
}
