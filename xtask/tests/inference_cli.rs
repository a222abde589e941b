//! `embed` and `fill-mask` on many texts: read from a file or stdin (lines or JSON lines),
//! batched by length at `--batch-size`, streamed as one JSON line per text in input order,
//! with the same numbers as the texts given on the command line in one batch.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn model() -> String {
    repo().join("fixtures/bert/base-fill-mask").display().to_string()
}

/// Run the CLI with `stdin`.
fn run(args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// Run the CLI with `stdin`; its stdout, or a panic with its stderr.
fn xtask(args: &[&str], stdin: &str) -> String {
    let out = run(args, stdin);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

const TEXTS: [&str; 5] = ["the sun", "a much longer sentence about the cat that sat on the mat", "hello world", "x", "the cat sat on the mat ."];

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn embed_streams_one_line_per_text_in_order_with_the_numbers_of_one_batch() {
    let model = model();
    let mut args = vec!["embed", "--model", &model, "--normalize"];
    args.extend(TEXTS);
    let reference: Vec<Vec<f32>> = serde_json::from_str(xtask(&args, "").trim()).unwrap();
    assert_eq!(reference.len(), TEXTS.len());

    // Plain lines and JSON lines mixed, from a file and from stdin, two texts per batch.
    let input: String = TEXTS
        .iter()
        .enumerate()
        .map(|(i, t)| if i % 2 == 0 { format!("{{\"text\": {}, \"id\": {i}}}\n", serde_json::to_string(t).unwrap()) } else { format!("{t}\n") })
        .collect();
    let file = sesame_tests::Scratch::path("embed-input.jsonl");
    std::fs::write(&file, &input).unwrap();
    for (source, stdin) in [(file.to_str().unwrap(), ""), ("-", input.as_str())] {
        let out = xtask(&["embed", "--model", &model, "--normalize", "--batch-size", "2", "--input", source], stdin);
        let lines: Vec<Vec<f32>> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), TEXTS.len(), "{source}: one line per text");
        for (i, (ours, theirs)) in lines.iter().zip(&reference).enumerate() {
            assert!(max_diff(ours, theirs) < 1e-5, "{source}: text {i} differs by {}", max_diff(ours, theirs));
        }
    }
}

#[test]
fn fill_mask_streams_one_line_per_text_with_the_single_text_answers() {
    let model = model();
    let texts = ["the cat [MASK] on the mat .", "[MASK] is the capital of [MASK] .", "hello [MASK]"];
    let input: String = texts.iter().map(|t| format!("{t}\n")).collect();
    let out = xtask(&["fill-mask", "--model", &model, "--top-k", "3", "--batch-size", "2", "--input", "-"], &input);
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), texts.len());
    for (text, line) in texts.iter().zip(&lines) {
        let alone: serde_json::Value = serde_json::from_str(xtask(&["fill-mask", "--model", &model, "--top-k", "3", text], "").trim()).unwrap();
        assert_eq!(line.as_array().unwrap().len(), text.matches("[MASK]").count(), "{text}: one list per mask");
        for (a, b) in line.as_array().unwrap().iter().zip(alone.as_array().unwrap()) {
            for (x, y) in a.as_array().unwrap().iter().zip(b.as_array().unwrap()) {
                assert_eq!(x["token"], y["token"], "{text}");
                assert!((x["score"].as_f64().unwrap() - y["score"].as_f64().unwrap()).abs() < 1e-5, "{text}");
            }
        }
    }
}

#[test]
fn fill_mask_prints_top_k_candidates_per_mask_sorted_by_score() {
    let json = xtask(&["fill-mask", "--model", &model(), "--top-k", "3", "the cat [MASK] on the [MASK] ."], "");
    let value: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    let masks = value.as_array().unwrap();
    assert_eq!(masks.len(), 2);
    for candidates in masks {
        let candidates = candidates.as_array().unwrap();
        assert_eq!(candidates.len(), 3);
        let scores: Vec<f64> = candidates.iter().map(|c| c["score"].as_f64().unwrap()).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "sorted by score: {scores:?}");
        assert!(candidates.iter().all(|c| c["token"].is_string() && c["id"].is_u64()));
    }
}

#[test]
fn embed_prints_one_normalised_vector_per_text() {
    let json = xtask(&["embed", "--model", &model(), "--normalize", "--pooling", "max", "--layer", "-2", "hello world", "the sun"], "");
    let vectors: Vec<Vec<f32>> = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(vectors.len(), 2);
    for v in vectors {
        assert_eq!(v.len(), 32);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
}

/// `--int8`: the linear layers multiply in int8 (flex, the default backend): every embedding
/// at cosine ≥ 0.99 of the float one and not equal to it; fill-mask gives its candidates;
/// generate's beam scores move a little.
#[test]
fn int8_embeds_near_the_float_model_and_fills_masks() {
    let float: Vec<Vec<f32>> = serde_json::from_str(xtask(&[&["embed", "--model", &model(), "--normalize"][..], &TEXTS].concat(), "").trim()).unwrap();
    let int8: Vec<Vec<f32>> = serde_json::from_str(xtask(&[&["embed", "--model", &model(), "--normalize", "--int8"][..], &TEXTS].concat(), "").trim()).unwrap();
    for (i, (a, b)) in int8.iter().zip(&float).enumerate() {
        let cosine: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        assert!(cosine >= 0.99, "text {i} at cosine {cosine}");
        assert!(max_diff(a, b) > 1e-5, "text {i}: the same numbers as the float model");
    }
    let json = xtask(&["fill-mask", "--model", &model(), "--int8", "--top-k", "3", "the cat [MASK] on the [MASK] ."], "");
    let masks: Vec<Vec<serde_json::Value>> = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(masks.len(), 2);
    assert!(masks.iter().flatten().all(|c| c["score"].as_f64().is_some_and(f64::is_finite)));
    // Generation through the K/V caches (one token a step: products of a row or two).
    let input = "{\"input_ids\": [0, 17, 23, 5, 40, 61, 8, 2]}\n{\"input_ids\": [0, 33, 12, 70, 2]}\n";
    let scores = |flags: &[&str]| -> Vec<f64> {
        let out = xtask(&[&["generate", "--model", "fixtures/bart/base-generation", "--input", "-", "--num-beams", "2"][..], flags].concat(), input);
        out.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["sequences_scores"][0].as_f64().unwrap()).collect()
    };
    let (float, int8) = (scores(&[]), scores(&["--int8"]));
    assert_eq!(int8.len(), 2, "one line per input");
    for (a, b) in int8.iter().zip(&float) {
        assert!(a != b && (a - b).abs() < 0.05 * b.abs(), "beam scores {int8:?} against the float model's {float:?}");
    }
}

/// `--int8` through `classify`, `tag` and `answer` (the fixtures' heads with the fill-mask
/// fixture's tokenizer): the same labels, entities and answer spans as the float model, every
/// score within 0.03 of its float one, and not all equal to them (the products ran in int8).
#[test]
fn int8_classifies_tags_and_answers_as_the_float_model_does() {
    let texts = ["the cat sat on the mat", "hello world", "a much longer sentence about the dog that ran"];
    let context = "the cat sat on the mat while the dog ran";
    for (command, fixture) in [("classify", "bert/base-seqcls-single"), ("tag", "bert/base-token-classification"), ("answer", "bert/base-qa")] {
        let dir = crate::serve_cli::with_tokenizer(fixture);
        let model = dir.to_str().unwrap();
        let results = |int8: bool| -> serde_json::Value {
            let mut args = vec![command, "--model", model];
            if command == "answer" {
                args.extend(["--context", context]);
            }
            if int8 {
                args.push("--int8");
            }
            serde_json::from_str(xtask(&[&args[..], &texts].concat(), "").trim()).unwrap()
        };
        let (float, int8) = (results(false), results(true));
        // Every score, and the rest of the results with the scores taken out.
        fn split(value: &serde_json::Value, scores: &mut Vec<f64>) -> serde_json::Value {
            match value {
                serde_json::Value::Array(items) => items.iter().map(|v| split(v, scores)).collect(),
                serde_json::Value::Object(fields) => fields
                    .iter()
                    .filter_map(|(k, v)| match (k.as_str(), v.as_f64()) {
                        ("score", Some(score)) => {
                            scores.push(score);
                            None
                        }
                        _ => Some((k.clone(), split(v, scores))),
                    })
                    .collect(),
                other => other.clone(),
            }
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let (float_rest, int8_rest) = (split(&float, &mut a), split(&int8, &mut b));
        assert_eq!(int8_rest, float_rest, "{command}: int8 gives other results than the float model");
        assert!(!a.is_empty() && a.len() == b.len(), "{command}: {float} against {int8}");
        let gap = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        assert!(gap > 0.0 && gap < 0.03, "{command}: int8's scores are {gap} from the float model's: {int8} against {float}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A classifier with one label and no `problem_type` (a cross-encoder) is scored as
/// transformers' text-classification pipeline scores it: the sigmoid of its logit, which the
/// same checkpoint marked `regression` gives as its value.
#[test]
fn classify_scores_a_one_label_model_with_the_sigmoid_of_its_logit() {
    let texts = ["the cat sat on the mat", "hello world"];
    let dir = crate::serve_cli::with_tokenizer("bert/base-seqcls-regression");
    let model = dir.to_str().unwrap();
    let scored: serde_json::Value = serde_json::from_str(xtask(&[&["classify", "--model", model][..], &texts].concat(), "").trim()).unwrap();
    let path = dir.join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["problem_type"] = "regression".into();
    std::fs::write(&path, config.to_string()).unwrap();
    let values: serde_json::Value = serde_json::from_str(xtask(&[&["classify", "--model", model][..], &texts].concat(), "").trim()).unwrap();
    for (s, v) in scored.as_array().unwrap().iter().zip(values.as_array().unwrap()) {
        let logit = v["value"].as_f64().unwrap();
        let score = s["score"].as_f64().unwrap();
        assert!((score - 1.0 / (1.0 + (-logit).exp())).abs() < 1e-6, "score {score} for logit {logit}: {s}");
        assert_eq!(s["label"], "LABEL_0");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Run the CLI expecting failure; its stderr.
fn xtask_fails(args: &[&str], stdin: &str) -> String {
    let out = run(args, stdin);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

/// The fixture's tensor `name`, as rows of integers or a list of floats.
fn fixture_tensor(dir: &str, name: &str) -> serde_json::Value {
    let bytes = std::fs::read(repo().join(dir).join("io.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let view = st.tensor(name).unwrap();
    match view.dtype() {
        safetensors::Dtype::I64 => {
            let values: Vec<i64> = view.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
            serde_json::json!(values.chunks(view.shape()[1]).collect::<Vec<_>>())
        }
        _ => serde_json::json!(view.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>()),
    }
}

/// `generate` on a BART checkpoint with inputs given as ids: with the model's own
/// generation_config.json (greedy, 20 new tokens, forced EOS) and with beam search flags, the
/// sequences (and scores) transformers' `generate` gives, one JSON line per input in order,
/// whether the sources run in one padded batch or alone.
#[test]
fn generate_reproduces_transformers_from_the_model_s_generation_config() {
    let dir = "fixtures/bart/base-generation";
    let input = "{\"input_ids\": [0, 17, 23, 5, 40, 61, 8, 2]}\n{\"input_ids\": [0, 33, 12, 70, 2]}\n";
    let lines = |out: String| out.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).collect::<Vec<_>>();
    let defaults = lines(xtask(&["generate", "--model", dir, "--input", "-", "--batch-size", "2"], input));
    let want = fixture_tensor(dir, "output.cli.defaults.sequences");
    assert_eq!(defaults.len(), 2, "one line per input");
    for (i, line) in defaults.iter().enumerate() {
        assert_eq!(line["sequences"], serde_json::json!([want[i]]), "input {i}: greedy with the model's defaults");
        assert!(line.get("sequences_scores").is_none());
    }
    let beam = lines(xtask(
        &["generate", "--model", dir, "--input", "-", "--batch-size", "1", "--num-beams", "4", "--num-return-sequences", "2", "--max-new-tokens", "9", "--no-repeat-ngram-size", "2"],
        input,
    ));
    let (want, scores) = (fixture_tensor(dir, "output.cli.beam.sequences"), fixture_tensor(dir, "output.cli.beam.sequences_scores"));
    for (i, line) in beam.iter().enumerate() {
        assert_eq!(line["sequences"], serde_json::json!([want[2 * i], want[2 * i + 1]]), "input {i}: beam search");
        for j in 0..2 {
            let (ours, theirs) = (line["sequences_scores"][j].as_f64().unwrap(), scores[2 * i + j].as_f64().unwrap());
            assert!((ours - theirs).abs() <= 1e-4, "input {i}: score {ours} vs {theirs}");
        }
    }
}

/// `--stream` prints each input's final tokens as they come (lines with "input"), and then
/// the same result lines as without it: the streamed tokens are what the results hold after
/// the decoder start, for greedy search up to the end, for beam search a prefix of every
/// returned sequence.
#[test]
fn generate_streams_final_tokens_before_each_result() {
    let dir = "fixtures/bart/base-generation";
    let input = "{\"input_ids\": [0, 17, 23, 5, 40, 61, 8, 2]}\n{\"input_ids\": [0, 33, 12, 70, 2]}\n";
    let lines = |out: String| out.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).collect::<Vec<_>>();
    for flags in [&["--batch-size", "2"][..], &["--num-beams", "4", "--num-return-sequences", "2", "--max-new-tokens", "9"][..]] {
        let plain = lines(xtask(&[&["generate", "--model", dir, "--input", "-"][..], flags].concat(), input));
        let streamed = lines(xtask(&[&["generate", "--model", dir, "--input", "-", "--stream"][..], flags].concat(), input));
        let (pieces, results): (Vec<_>, Vec<_>) = streamed.into_iter().partition(|l| l.get("input").is_some());
        assert_eq!(results, plain, "{flags:?}: the results are those without --stream");
        assert!(!pieces.is_empty(), "{flags:?}: something streamed");
        for (i, result) in results.iter().enumerate() {
            let got: Vec<u64> = pieces.iter().filter(|p| p["input"] == i).flat_map(|p| p["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap())).collect();
            for sequence in result["sequences"].as_array().unwrap() {
                let sequence: Vec<u64> = sequence.as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
                assert_eq!(sequence[1..1 + got.len()], got[..], "{flags:?} input {i}: streamed tokens continue the decoder start");
            }
        }
    }
}

/// `generate --input -` answers each batch while the next input is still to come: the first
/// result line arrives before the second input is written.
#[test]
fn generate_answers_each_batch_before_reading_the_rest() {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["generate", "--model", "fixtures/bart/base-generation", "--input", "-", "--batch-size", "1", "--max-new-tokens", "3"])
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Lines of stdout as they come, so that a command that waits for the end fails, not hangs.
    let (lines, received) = std::sync::mpsc::channel();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || stdout.lines().map_while(Result::ok).try_for_each(|l| lines.send(l)));
    let next = || received.recv_timeout(std::time::Duration::from_secs(120));
    stdin.write_all(b"{\"input_ids\": [0, 17, 23, 2]}\n").unwrap();
    stdin.flush().unwrap();
    let first = next();
    let answered = first.as_ref().is_ok_and(|l| l.contains("\"sequences\""));
    stdin.write_all(b"{\"input_ids\": [0, 33, 2]}\n").unwrap();
    drop(stdin);
    assert!(answered, "the first input's result, with the second not yet written: {first:?}");
    assert!(next().is_ok_and(|l| l.contains("\"sequences\"")));
    assert!(child.wait().unwrap().success());
}

/// A `BartForCausalLM` checkpoint generates left to right through the same command, with the
/// library's `CausalDecoder` tokens under the model's own generation settings.
#[test]
fn generate_continues_with_bart_s_decoder_alone() {
    use sesame_layers::PretrainedModel;
    let dir = "fixtures/bart/base-causal-lm";
    let prompts: Vec<Vec<u32>> = vec![vec![0, 17, 23, 9], vec![0, 40, 41]];
    let input: String = prompts.iter().map(|p| format!("{{\"input_ids\": {p:?}}}\n")).collect();
    let got: Vec<serde_json::Value> = xtask(&["generate", "--model", dir, "--input", "-", "--max-new-tokens", "6", "--num-beams", "2"], &input)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let device = burn::tensor::Device::flex();
    let loaded = sesame_bart::BartForCausalLM::from_pretrained(&repo().join(dir), &device).unwrap();
    let mut settings = sesame_generate::GenerationConfig::from_dir(&repo().join(dir)).unwrap();
    (settings.max_new_tokens, settings.num_beams) = (Some(6), Some(2));
    for (i, prompt) in prompts.iter().enumerate() {
        let decoder = sesame_generate::decoding::CausalDecoder::new(&loaded.model, &loaded.config);
        let want = sesame_generate::generate(&decoder, std::slice::from_ref(prompt), &settings, 0).unwrap();
        assert_eq!(got[i]["sequences"], serde_json::json!(want.sequences), "input {i}");
        assert!(want.sequences[0].len() > prompt.len(), "input {i}: something generated");
    }
}

/// An XLNet checkpoint generates through the same command as transformers' `generate` does,
/// with the model's own settings (one prompt at a time, as ids); a text prompt loses the
/// `<sep> <cls>` the tokenizer closes it with, and `--prefix` goes before it.
#[test]
fn generate_continues_with_xlnet_as_transformers_does() {
    let dir = "fixtures/xlnet/generation";
    let bytes = std::fs::read(repo().join(dir).join("io.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let ints = |name: &str| -> Vec<i64> { st.tensor(name).unwrap().data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect() };
    let prompts: Vec<Vec<i64>> = ints("input.input_ids").chunks(6).map(<[i64]>::to_vec).collect();
    let input: String = prompts.iter().map(|p| format!("{{\"input_ids\": {p:?}}}\n")).collect();
    let got: Vec<serde_json::Value> =
        xtask(&["generate", "--model", dir, "--input", "-", "--max-new-tokens", "7"], &input).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for row in 0..2 {
        assert_eq!(got[row]["sequences"], serde_json::json!([ints(&format!("output.cli.{row}.sequences"))]), "input {row}");
    }
    // Text: the tokenizer's `<sep> <cls>` are dropped, the prefix comes first.
    use sesame_layers::{HfConfig, PretrainedModel};
    let spiece = repo().join("fixtures/xlnet/spiece/spiece.model");
    let model = sesame_tests::Scratch::path("xlnet-generate");
    let mut config = sesame_xlnet::XlnetConfig::from_dir(&repo().join(dir)).unwrap();
    config.vocab_size = 700;
    let fresh = sesame_xlnet::XlnetLmHeadModel::new_hf(&config, &burn::tensor::Device::flex());
    fresh.save_pretrained(&config, &model).unwrap();
    std::fs::copy(&spiece, model.join("spiece.model")).unwrap();
    let m = model.to_str().unwrap();
    let out: serde_json::Value = serde_json::from_str(xtask(&["generate", "--model", m, "--max-new-tokens", "3", "--prefix", "Call me ", "Ishmael."], "").trim()).unwrap();
    let tok = sesame_text::Tokenizer::from_dir(&model).unwrap();
    let ids: Vec<u32> = tok.encode(&["Call me Ishmael."], 512, false).unwrap().input_ids.iter().map(|&t| t as u32).collect();
    let sequence: Vec<u32> = serde_json::from_value(out["sequences"][0].clone()).unwrap();
    assert_eq!(&sequence[..ids.len() - 2], &ids[..ids.len() - 2], "the prompt, prefix first, less <sep> <cls>");
    assert_eq!(sequence.len(), ids.len() - 2 + 3);
    std::fs::remove_dir_all(&model).unwrap();
}

/// `--unilm-seq2seq` decodes a UniLM (BERT) checkpoint sequence to sequence: greedy and beam
/// search from two sources of different lengths, batched or alone, give the library's
/// `UnilmSeq2SeqDecoder` sequences (whose steps equal the full seq-to-seq forward pass, in
/// unilm_parity.rs).
#[test]
fn generate_decodes_unilm_sequence_to_sequence() {
    use sesame_generate::{beam_search, greedy, BeamSettings, Stopping};
    use sesame_layers::PretrainedModel;
    let dir = "fixtures/unilm/seq-to-seq";
    let sources: Vec<Vec<u32>> = vec![vec![2, 10, 11, 12, 13, 3], vec![2, 20, 21, 3]];
    let input: String = sources.iter().map(|s| format!("{{\"input_ids\": {s:?}}}\n")).collect();
    let device = burn::tensor::Device::flex();
    let loaded = sesame_unilm::UnilmForMaskedLM::from_pretrained(&repo().join(dir), &device).unwrap();
    let decoder = sesame_unilm::UnilmSeq2SeqDecoder::new(&loaded.model, &loaded.config, sources.clone(), 4).unwrap();
    let stopping = Stopping { max_new_tokens: 6, eos_token_ids: vec![3], pad_token_id: 0, output_scores: false };
    let lines = |out: String| out.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).collect::<Vec<_>>();
    let base = ["generate", "--model", dir, "--input", "-", "--unilm-seq2seq", "--mask-token-id", "4", "--eos-token-id", "3", "--max-new-tokens", "6"];
    // Each row up to its end (a row decodes alike whatever the batch pads it to).
    let ended = |row: &[u32]| row[..row.iter().position(|&t| t == 3).map_or(row.len(), |i| i + 1)].to_vec();
    let want: Vec<Vec<u32>> = greedy(&decoder, &[vec![], vec![]], &[], &stopping).unwrap().sequences.iter().map(|r| ended(r)).collect();
    for batch in ["1", "2"] {
        let got = lines(xtask(&[&base[..], &["--batch-size", batch]].concat(), &input));
        let got: Vec<Vec<u32>> = got.iter().map(|l| ended(&serde_json::from_value::<Vec<u32>>(l["sequences"][0].clone()).unwrap())).collect();
        assert_eq!(got, want, "greedy, batch size {batch}");
    }
    let beams = BeamSettings { num_return_sequences: 2, ..BeamSettings::new(3) };
    let want = beam_search(&decoder, &[vec![], vec![]], &[], &stopping, &beams).unwrap();
    let got = lines(xtask(&[&base[..], &["--num-beams", "3", "--num-return-sequences", "2"]].concat(), &input));
    for (i, line) in got.iter().enumerate() {
        assert_eq!(line["sequences"], serde_json::json!(want.sequences[2 * i..2 * i + 2]), "beam search, input {i}");
    }
    let err = xtask_fails(&["generate", "--model", dir, "--input", "-", "--unilm-seq2seq"], &input);
    assert!(err.contains("--mask-token-id"), "{err}");
}

/// A left-to-right checkpoint (`BertLMHeadModel`) generates through the same command, with
/// transformers' processors from the flags.
#[test]
fn generate_continues_a_left_to_right_model() {
    let dir = "fixtures/generation/bert-lm-head";
    let want = fixture_tensor(dir, "output.processed.sequences");
    let prompts = fixture_tensor(dir, "input.prompts");
    let input: String = prompts.as_array().unwrap().iter().map(|p| format!("{{\"input_ids\": {p}}}\n")).collect();
    let flags = ["--max-new-tokens", "12", "--repetition-penalty", "1.4", "--no-repeat-ngram-size", "2", "--min-new-tokens", "4", "--eos-token-id", "3"];
    let mut args = vec!["generate", "--model", dir, "--input", "-"];
    args.extend(flags);
    let out = xtask(&args, &input);
    for (i, line) in out.lines().enumerate() {
        let line: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(line["sequences"], serde_json::json!([want[i]]), "prompt {i}");
    }
}

/// Bad settings and inputs: one line naming the flag, the input or the field.
#[test]
fn generate_refuses_bad_settings_and_inputs_naming_them() {
    let dir = "fixtures/bart/base-generation";
    let ids = "{\"input_ids\": [0, 17, 2]}\n";
    let err = xtask_fails(&["generate", "--model", dir, "--input", "-", "--num-beams", "2", "--num-return-sequences", "3"], ids);
    assert!(err.contains("--num-return-sequences"), "{err}");
    let err = xtask_fails(&["generate", "--model", dir, "--input", "-", "--early-stopping", "maybe"], ids);
    assert!(err.contains("--early-stopping"), "{err}");
    let long = format!("{{\"input_ids\": {:?}}}\n", vec![5; 30]);
    let err = xtask_fails(&["generate", "--model", dir, "--input", "-"], &long);
    assert!(err.contains("input 1") && err.contains("positions"), "{err}");
    let err = xtask_fails(&["generate", "--model", dir, "--input", "-"], "{\"input_ids\": [0, -4]}\n");
    assert!(err.contains("line 1") && err.contains("input_ids"), "{err}");
    let err = xtask_fails(&["generate", "--model", dir, "--input", "-"], "{\"input_ids\": [0, 500, 2]}\n");
    assert!(err.contains("500"), "{err}");
    let err = xtask_fails(&["generate", "--model", dir, "some text"], "");
    assert!(err.contains("tokenizer") || err.contains("vocab"), "{err}");
    let err = xtask_fails(&["generate", "--model", "fixtures/bert/base-model", "hello"], "");
    assert!(err.contains("is_decoder"), "{err}");
    let err = xtask_fails(&["generate", "--model", "fixtures/generation/bert-lm-head", "--input", "-"], "{\"input_ids\": [2, 10]}\n");
    assert!(err.contains("--eos-token-id"), "{err}");
}

/// The fixture's `input.*` and `label.*` tensors under their bare names (transformers'
/// arguments), written to a safetensors file; and its outputs (`output.` or `output.all.`).
fn forward_case(fixture: &str) -> (sesame_tests::Scratch, std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)>) {
    let bytes = std::fs::read(repo().join("fixtures").join(fixture).join("io.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut inputs = Vec::new();
    let mut outputs = std::collections::BTreeMap::new();
    let all = st.names().iter().any(|n| n.starts_with("output.all."));
    for (name, view) in st.tensors() {
        if let Some(arg) = name.strip_prefix("input.").or_else(|| name.strip_prefix("label.")) {
            inputs.push((arg.to_string(), view));
        } else if let Some(out) = name.strip_prefix(if all { "output.all." } else { "output." }) {
            let values = view.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
            outputs.insert(out.to_string(), (view.shape().to_vec(), values));
        }
    }
    // A file of its own per call: tests run at once, and several read one fixture.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = sesame_tests::Scratch::path(&format!("forward-{call}-{}.safetensors", fixture.replace('/', "-")));
    safetensors::serialize_to_file(inputs, None, &path).unwrap();
    (path, outputs)
}

/// `forward` runs a head on inputs named as transformers' arguments and writes every output
/// under transformers' names, with transformers' values (BART; BERT's masked LM, QA,
/// pre-training and next-sentence heads; ALBERT's pre-training; ELECTRA's discriminator;
/// multiple choice on `[batch, choices, seq]` inputs; XLNet's two streams, a segment on the
/// memory `mems.N` of the one before, its SQuAD head: the fixtures' own inputs, labels and
/// every-output references).
#[test]
fn forward_writes_transformers_outputs_under_their_names() {
    for fixture in [
        "bart/base-conditional-generation",
        "bart/wide-seqcls-multilabel",
        "bert/base-masked-lm",
        "bert/base-qa",
        "roberta/base-seqcls-multilabel",
        "electra/wide-seqcls-regression",
        "bert/base-pretraining",
        "albert/base-pretraining",
        "bert/base-nsp",
        "electra/base-pretraining",
        "bert/base-multiple-choice",
        "electra/base-multiple-choice",
        "roberta/base-multiple-choice",
        "xlnet/base-two-stream",
        "xlnet/wide-memory",
        "xlnet/uni",
        "xlnet/base-qa-beam",
        "xlnet/base-qa-train",
        "xlnet/wide-multiple-choice",
        "xlnet/base-seqcls-regression",
    ] {
        let (inputs, want) = forward_case(fixture);
        let out = inputs.with_extension("out.safetensors");
        let model = repo().join("fixtures").join(fixture);
        let model = model.to_str().unwrap();
        xtask(&["forward", "--model", model, "--inputs", inputs.to_str().unwrap(), "--out", out.to_str().unwrap(), "--all-outputs"], "");
        let bytes = std::fs::read(&out).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut names: Vec<String> = st.names().iter().map(|n| n.to_string()).collect();
        names.sort();
        assert_eq!(names, want.keys().cloned().collect::<Vec<_>>(), "{fixture}: the outputs transformers gives, by name");
        for (name, (shape, values)) in &want {
            let view = st.tensor(name).unwrap();
            // The loss is 0-d in transformers (some fixtures store it as [1]).
            assert_eq!(view.shape().iter().product::<usize>(), shape.iter().product::<usize>(), "{fixture}: {name}");
            if name != "loss" {
                assert_eq!(view.shape(), shape.as_slice(), "{fixture}: {name}");
            }
            let ours: Vec<f32> = view.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
            assert!(max_diff(&ours, values) <= 1e-4, "{fixture}: {name} differs by {}", max_diff(&ours, values));
        }
        let _ = std::fs::remove_file(&inputs);
        let _ = std::fs::remove_file(&out);
    }
}

/// An input the head does not take, a float id tensor, a head the family lacks: one line naming it.
#[test]
fn forward_refuses_what_the_head_does_not_take() {
    let (inputs, _) = forward_case("bert/base-model");
    let model = repo().join("fixtures/bert/base-model");
    let (model, path) = (model.to_str().unwrap(), inputs.to_str().unwrap());
    let out = sesame_tests::Scratch::path("forward-bad.safetensors");
    let out = out.to_str().unwrap();
    let err = xtask_fails(&["forward", "--model", model, "--inputs", path, "--out", out, "--head", "BertForNextThing"], "");
    assert!(err.contains("--head BertForNextThing"), "{err}");
    let (labelled, _) = forward_case("bert/base-masked-lm");
    let err = xtask_fails(&["forward", "--model", model, "--inputs", labelled.to_str().unwrap(), "--out", out, "--head", "BertModel"], "");
    assert!(err.contains("`labels` is not an input BertModel takes"), "{err}");
    let floats = sesame_tests::Scratch::path("forward-floats.safetensors");
    let bytes: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1, 2], &bytes).unwrap();
    safetensors::serialize_to_file(vec![("input_ids".to_string(), view)], None, &floats).unwrap();
    let err = xtask_fails(&["forward", "--model", model, "--inputs", floats.to_str().unwrap(), "--out", out], "");
    assert!(err.contains("`input_ids` is float"), "{err}");
    for f in [inputs, labelled, floats] {
        let _ = std::fs::remove_file(f);
    }
}

/// Copy the files of `dir` into `cache` as `hf download ID` lays them out: each file's bytes in
/// `blobs/`, a relative symlink to it in `snapshots/<commit>/`, `refs/main` naming the commit.
pub(crate) fn into_hub_cache(dir: &Path, cache: &Path, id: &str) {
    let folder = cache.join(format!("models--{}", id.replace('/', "--")));
    let commit = "5d9d7bbc4c6e64c3ecaee2b5bc7e5a4c84f1d2a3";
    let snapshot = folder.join("snapshots").join(commit);
    std::fs::create_dir_all(folder.join("blobs")).unwrap();
    std::fs::create_dir_all(folder.join("refs")).unwrap();
    std::fs::write(folder.join("refs/main"), commit).unwrap();
    let mut pending = vec![(dir.to_path_buf(), snapshot.clone())];
    let mut blobs = 0;
    while let Some((from, to)) = pending.pop() {
        std::fs::create_dir_all(&to).unwrap();
        for entry in std::fs::read_dir(&from).unwrap() {
            let path = entry.unwrap().path();
            let target = to.join(path.file_name().unwrap());
            if path.is_dir() {
                pending.push((path, target));
                continue;
            }
            blobs += 1;
            let blob = folder.join("blobs").join(format!("blob{blobs:04}"));
            std::fs::copy(&path, &blob).unwrap();
            let depth = target.strip_prefix(&snapshot).unwrap().components().count() + 1;
            let relative: PathBuf = std::iter::repeat_n("..", depth).collect::<PathBuf>().join("blobs").join(blob.file_name().unwrap());
            std::os::unix::fs::symlink(relative, &target).unwrap();
        }
    }
}

/// `--model org/name` finds the model in the HuggingFace cache (HF_HUB_CACHE) and gives what
/// its directory gives, byte for byte; an id the cache lacks gets one line naming the id, the
/// paths looked at and the `hf download` that fetches it. With the real all-MiniLM-L6-v2 when
/// the setup script unpacked it (its sentence-transformers files select the pooling).
#[test]
fn a_model_named_by_hub_id_is_read_from_the_huggingface_cache_as_its_directory_is() {
    let cache = sesame_tests::Scratch::path("hub-cli");
    let mut models = vec![(PathBuf::from(model()), "sesame-fixtures/bert-fill-mask")];
    if let Some(minilm) = std::env::var_os("SESAME_MINILM_DIR") {
        models.push((PathBuf::from(minilm), "sentence-transformers/all-MiniLM-L6-v2"));
    }
    let with_cache = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).current_dir(repo()).env("HF_HUB_CACHE", &cache).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    for (dir, id) in &models {
        into_hub_cache(dir, &cache, id);
        let dir = dir.display().to_string();
        for (by_dir, by_id) in [
            (vec!["embed", "--model", &dir, "--normalize", "the cat sat on the mat .", "hello world"], vec!["embed", "--model", id, "--normalize", "the cat sat on the mat .", "hello world"]),
            (vec!["embed", "--model", &dir, "the sun"], vec!["embed", "--model", &format!("{id}@main"), "the sun"]),
        ] {
            let (ok, expected, stderr) = with_cache(&by_dir);
            assert!(ok, "{stderr}");
            let (ok, got, stderr) = with_cache(&by_id);
            assert!(ok, "{by_id:?}: {stderr}");
            assert_eq!(got, expected, "{by_id:?}");
        }
    }
    let (ok, _, stderr) = with_cache(&["embed", "--model", "sesame-fixtures/not-downloaded", "x"]);
    // clap's error line (a "For more information" hint follows it).
    let line = stderr.lines().next().unwrap_or_default();
    assert!(!ok, "{stderr}");
    assert!(line.contains("sesame-fixtures/not-downloaded") && line.contains("models--sesame-fixtures--not-downloaded") && line.contains("hf download sesame-fixtures/not-downloaded"), "{line}");
    let (ok, _, stderr) = with_cache(&["embed", "--model", "sesame-fixtures/bert-fill-mask@../../etc", "x"]);
    assert!(!ok && stderr.contains("would leave the cache"), "{stderr}");
    std::fs::remove_dir_all(&cache).unwrap();
}
