//! XLNet against transformers (fixtures/xlnet, `make_fixtures.py --only xlnet`): the base
//! model and the LM head on two shapes, left-padded with two segments; the two-stream mode
//! (`perm_mask` + `target_mapping`); a second segment on the memory of the first, the memory
//! computed here; `bi_data` with `clamp_len`; left-to-right attention with `same_length`. Every
//! output compared by HF's name, with the default outputs and with every output, on every
//! compiled backend; and the errors of bad input.

use burn::prelude::*;
use sesame_layers::{InputError, NamedOutput, OutputOptions, PretrainedModel, SequenceLabels};
use sesame_tests::{compare_named, devices, max_abs_diff, Fixture, TOLERANCE};
use sesame_xlnet::{
    SquadLabels, XlnetConfig, XlnetForMultipleChoice, XlnetForQuestionAnswering, XlnetForQuestionAnsweringSimple, XlnetForSequenceClassification,
    XlnetForTokenClassification, XlnetInput, XlnetLmHeadModel, XlnetModel,
};

/// The fixture's `{prefix}.*` inputs as `XlnetInput` (those it holds).
fn input(f: &Fixture, prefix: &str, device: &Device) -> XlnetInput {
    let name = |n: &str| format!("{prefix}.{n}");
    let int = |n: &str| f.has(&name(n)).then(|| f.int::<2>(&name(n), device));
    let float = |n: &str| f.has(&name(n)).then(|| f.float::<3>(&name(n), device));
    XlnetInput {
        input_ids: f.int::<2>(&name("input_ids"), device),
        attention_mask: int("attention_mask").map(|m| m.float()),
        token_type_ids: int("token_type_ids"),
        perm_mask: float("perm_mask"),
        target_mapping: float("target_mapping"),
        mems: None,
        use_mems: None,
    }
}

/// Run `run` on fixture `name` on every backend, with default and all outputs; the model
/// loads every tensor of the file and leaves none.
fn each<M: PretrainedModel<Config = XlnetConfig>>(name: &str, run: impl Fn(&M, &Fixture, &Device, OutputOptions) -> Vec<NamedOutput>) {
    let f = Fixture::open(&format!("xlnet/{name}"));
    for (backend, device) in devices() {
        let loaded = M::from_pretrained(&f.dir, &device).unwrap();
        assert!(loaded.report.initialized.is_empty() && loaded.report.unused.is_empty(), "{name}: {}", loaded.report);
        for (mode, options) in [("default", OutputOptions::default()), ("all", OutputOptions::all())] {
            compare_named(&f, mode, run(&loaded.model, &f, &device, options), &format!("{backend:?} xlnet/{name}"));
        }
    }
}

fn labels(f: &Fixture, device: &Device) -> Option<Tensor<2, Int>> {
    f.has("label.labels").then(|| f.int::<2>("label.labels", device))
}

/// The LM head on fixture `name`, the memory of `first.*` computed here first when the
/// fixture has a first segment (and checked against transformers' memory).
fn lm_head(name: &str) {
    each::<XlnetLmHeadModel>(name, |m, f, d, o| {
        let mut x = input(f, "input", d);
        if f.has("first.input_ids") {
            let first = m.forward(input(f, "first", d), None, OutputOptions::default());
            let mems = first.transformer.mems.expect("the memory is returned at inference");
            for (i, mem) in mems.iter().enumerate() {
                let want = f.get(&format!("first.mems.{i}"));
                let got = sesame_tests::values(mem.clone().swap_dims(0, 1));
                assert!(max_abs_diff(&got, &want.f32) <= TOLERANCE, "{name}: the first segment's mems.{i}");
            }
            x.mems = Some(mems);
        }
        m.forward(x, labels(f, d), o).named()
    });
}

#[test]
fn xlnet_model_matches_transformers() {
    for name in ["base-model", "wide-model"] {
        each::<XlnetModel>(name, |m, f, d, o| m.forward(input(f, "input", d), o).named());
    }
}

#[test]
fn xlnet_lm_head_matches_transformers() {
    for name in ["base-lm", "wide-lm"] {
        lm_head(name);
    }
}

#[test]
fn two_stream_attention_matches_transformers() {
    for name in ["base-two-stream", "wide-two-stream"] {
        lm_head(name);
    }
}

#[test]
fn a_second_segment_on_the_first_ones_memory_matches_transformers() {
    for name in ["base-memory", "wide-memory"] {
        lm_head(name);
    }
}

#[test]
fn bi_data_and_left_to_right_attention_match_transformers() {
    for name in ["bi-data", "uni"] {
        lm_head(name);
    }
}

const SHAPES: [&str; 2] = ["base", "wide"];

#[test]
fn sequence_classification_matches_transformers_for_each_problem_type() {
    for shape in SHAPES {
        for kind in ["single", "regression", "multilabel"] {
            each::<XlnetForSequenceClassification>(&format!("{shape}-seqcls-{kind}"), |m, f, d, o| {
                let labels = match kind {
                    "single" => SequenceLabels::SingleLabel(f.int::<1>("label.labels", d)),
                    "regression" => SequenceLabels::Regression(f.float::<2>("label.labels", d)),
                    _ => SequenceLabels::MultiLabel(f.float::<2>("label.labels", d)),
                };
                m.forward(input(f, "input", d), Some(labels), o).named()
            });
        }
    }
}

#[test]
fn token_classification_and_multiple_choice_match_transformers() {
    for shape in SHAPES {
        each::<XlnetForTokenClassification>(&format!("{shape}-token-classification"), |m, f, d, o| m.forward(input(f, "input", d), labels(f, d), o).named());
        each::<XlnetForMultipleChoice>(&format!("{shape}-multiple-choice"), |m, f, d, o| {
            let choices = f.get("input.input_ids").shape[1];
            m.forward(input(f, "input", d), choices, Some(f.int::<1>("label.labels", d)), o).named()
        });
    }
}

#[test]
fn question_answering_heads_match_transformers() {
    for shape in SHAPES {
        each::<XlnetForQuestionAnsweringSimple>(&format!("{shape}-qa-simple"), |m, f, d, o| {
            let positions = (f.int::<1>("label.start_positions", d), f.int::<1>("label.end_positions", d));
            m.forward(input(f, "input", d), Some(positions), o).named()
        });
        // Training: start, end conditioned on the true start, answerability; with `p_mask`.
        each::<XlnetForQuestionAnswering>(&format!("{shape}-qa-train"), |m, f, d, o| {
            let labels = SquadLabels {
                start_positions: f.int::<1>("label.start_positions", d),
                end_positions: f.int::<1>("label.end_positions", d),
                answerability: Some((f.int::<1>("label.cls_index", d), f.float::<1>("label.is_impossible", d))),
            };
            m.forward(input(f, "input", d), Some(f.float::<2>("input.p_mask", d)), None, Some(labels), o).named()
        });
        // Inference: the beam over starts and ends, and the answerability logit.
        each::<XlnetForQuestionAnswering>(&format!("{shape}-qa-beam"), |m, f, d, o| {
            m.forward(input(f, "input", d), Some(f.float::<2>("input.p_mask", d)), Some(f.int::<1>("input.cls_index", d)), None, o).named()
        });
    }
}

#[test]
fn bad_input_is_refused_by_name() {
    let f = Fixture::open("xlnet/bi-data");
    let device = devices()[0].1.clone();
    let loaded = XlnetLmHeadModel::from_pretrained(&f.dir, &device).unwrap();
    let ids = |rows: usize, len: usize| Tensor::<2, Int>::from_data(TensorData::new(vec![7i64; rows * len], [rows, len]), &device);
    let odd = XlnetInput::new(ids(3, 4));
    assert!(matches!(odd.validate(&loaded.config), Err(InputError::Invalid { what: "input_ids", .. })));
    let mut wrong = XlnetInput::new(ids(2, 4));
    wrong.perm_mask = Some(Tensor::zeros([2, 4, 3], &device));
    assert_eq!(wrong.validate(&loaded.config), Err(InputError::ShapeMismatch { what: "perm_mask", expected: vec![2, 4, 4], found: vec![2, 4, 3] }));
    let mut mems = XlnetInput::new(ids(2, 4));
    mems.mems = Some(vec![Tensor::zeros([2, 3, 32], &device)]);
    assert!(matches!(mems.validate(&loaded.config), Err(InputError::ShapeMismatch { what: "mems", .. })));
    let out_of_range = XlnetInput::new(Tensor::<2, Int>::from_data([[1, 2, 60, 3]], &device));
    assert!(matches!(out_of_range.validate(&loaded.config), Err(InputError::IdOutOfRange { id: 60, .. })));
}

/// Greedy and beam search from two prompts equal transformers' `generate` (its dummy-token
/// scheme over the memory), with the whole memory and with 3 positions of it: sequences, every
/// step's scores and the sequence scores; beam search reorders the memory with its beams.
#[test]
fn generation_matches_transformers_generate() {
    use sesame_generate::*;
    use sesame_generate::decoding::CausalDecoder;
    for name in ["generation", "generation-short-memory"] {
        let f = Fixture::open(&format!("xlnet/{name}"));
        for (backend, device) in devices() {
            let loaded = XlnetLmHeadModel::from_pretrained(&f.dir, &device).unwrap();
            let a = f.get("input.input_ids");
            let prompts: Vec<Vec<u32>> = a.i64.chunks(a.shape[1]).map(|r| r.iter().map(|&t| t as u32).collect()).collect();
            for (run, settings) in f.meta["runs"].as_object().unwrap() {
                let eos = match settings["eos_token_id"].as_array() {
                    Some(ids) => ids.iter().map(|e| e.as_u64().unwrap() as u32).collect(),
                    None => vec![2],
                };
                let stopping = Stopping { max_new_tokens: settings["max_new_tokens"].as_u64().unwrap() as usize, eos_token_ids: eos, pad_token_id: 5, output_scores: true };
                let processors: Vec<Box<dyn LogitsProcessor>> = match settings["no_repeat_ngram_size"].as_u64() {
                    Some(n) => vec![Box::new(NoRepeatNgram::new(n as usize).unwrap())],
                    None => vec![],
                };
                let decoder = CausalDecoder::new(&loaded.model, &loaded.config);
                let out = match settings["num_beams"].as_u64() {
                    None => greedy(&decoder, &prompts, &processors, &stopping).unwrap(),
                    Some(k) => {
                        let beams = BeamSettings {
                            num_beams: k as usize,
                            length_penalty: 1.0,
                            early_stopping: EarlyStopping::Heuristic,
                            num_return_sequences: settings["num_return_sequences"].as_u64().unwrap_or(1) as usize,
                        };
                        beam_search(&decoder, &prompts, &processors, &stopping, &beams).unwrap()
                    }
                };
                let context = format!("{backend:?} {name} {run}");
                let ours: Vec<i64> = out.sequences.iter().flatten().map(|&t| i64::from(t)).collect();
                assert_eq!(ours, f.get(&format!("output.{run}.sequences")).i64, "{context}: the sequences transformers generated");
                let steps: Vec<f32> = out.scores.iter().flatten().flatten().copied().collect();
                let theirs = &f.get(&format!("output.{run}.scores")).f32;
                let gap = sesame_tests::gap(&steps, theirs);
                assert!(steps.len() == theirs.len() && gap <= TOLERANCE, "{context}: step scores differ by {gap}");
                // Beam search scores its sequences (transformers' `sequences_scores`); greedy
                // search does not, on either side.
                let key = format!("output.{run}.sequences_scores");
                let beams = settings["num_beams"].as_u64().is_some();
                assert_eq!(f.has(&key), beams, "{context}: the fixture has sequence scores exactly for beam search");
                match out.sequences_scores {
                    Some(scores) => {
                        assert!(beams, "{context}: greedy search gave sequence scores");
                        let diff = max_abs_diff(&scores, &f.get(&key).f32);
                        assert!(diff <= TOLERANCE, "{context}: sequence scores differ by {diff}");
                    }
                    None => assert!(!beams, "{context}: beam search gave no sequence scores"),
                }
            }
        }
    }
}
