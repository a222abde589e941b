//! `cargo xtask train bert|roberta|albert|electra|unilm|bart|xlnet` end to end, through the real binary
//! (and `train bert --objective span`):
//! train on the shipped corpus with the family's objective and tokenizer, get killed, resume,
//! export; the export works with `fill-mask`, and transformers loads it (ELECTRA: the
//! discriminator and the generator) with the same tokens and outputs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use burn::prelude::*;
use sesame_layers::{EncoderInput, Backbone, ForMaskedLM, OutputOptions, PretrainedModel};
use sesame_text::Tokenizer;
use sesame_tests::python;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn xtask(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.args(args).current_dir(repo());
    cmd
}

fn train_args(family: &str, out: &Path, steps: &str) -> Vec<String> {
    [
        "train", family, "--steps", steps, "--batch-size", "8", "--seq-len", "32", "--vocab-size", "600",
        "--checkpoint-every", "2", "--eval-every", "4", "--log-every", "1", "--quiet", "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([out.display().to_string()])
    .collect()
}

/// A family's round trip: what to train, the metrics to expect, and what transformers must
/// reproduce from the export (directory under `export/`, HF class, output key, Sesame's outputs).
struct Expect {
    family: &'static str,
    mask: &'static str,
    metrics: &'static [&'static str],
    fill_mask_dir: &'static str,
    checks: &'static [(&'static str, &'static str, &'static str, fn(&Path, &sesame_text::EncodedBatch) -> Vec<f32>)],
}

#[test]
fn bert_is_killed_resumes_and_exports_a_model_transformers_loads() {
    round_trip(Expect {
        family: "bert", mask: "[MASK]", metrics: &["mlm_loss", "perplexity", "mlm_accuracy", "nsp_accuracy"], fill_mask_dir: "",
        checks: &[("", "BertForPreTraining", "output.prediction_logits", sesame_logits::<sesame_bert::BertModel>)],
    });
}

#[test]
fn roberta_is_killed_resumes_and_exports_a_model_transformers_loads() {
    round_trip(Expect {
        family: "roberta", mask: "<mask>", metrics: &["mlm_loss", "perplexity", "mlm_accuracy"], fill_mask_dir: "",
        checks: &[("", "RobertaForMaskedLM", "output.logits", sesame_logits::<sesame_roberta::RobertaModel>)],
    });
}

#[test]
fn albert_is_killed_resumes_and_exports_a_model_transformers_loads() {
    round_trip(Expect {
        family: "albert", mask: "[MASK]", metrics: &["mlm_loss", "perplexity", "mlm_accuracy", "sop_accuracy"], fill_mask_dir: "",
        checks: &[("", "AlbertForPreTraining", "output.prediction_logits", sesame_logits::<sesame_albert::AlbertModel>)],
    });
}

#[test]
fn electra_is_killed_resumes_and_exports_discriminator_and_generator_transformers_load() {
    round_trip(Expect {
        family: "electra", mask: "[MASK]", fill_mask_dir: "generator",
        metrics: &["mlm_loss", "mlm_accuracy", "rtd_loss", "rtd_accuracy", "replaced_fraction"],
        checks: &[
            ("", "ElectraForPreTraining", "output.logits", discriminator_logits),
            ("generator", "ElectraForMaskedLM", "output.logits", sesame_logits::<sesame_electra::ElectraModel>),
        ],
    });
}

#[test]
fn unilm_is_killed_resumes_and_exports_a_bert_transformers_loads() {
    round_trip(Expect {
        family: "unilm", mask: "[MASK]", fill_mask_dir: "",
        metrics: &["mlm_loss", "mlm_accuracy", "nsp_accuracy", "bidirectional_mlm_loss", "seq_to_seq_mlm_loss", "left_to_right_mlm_loss", "right_to_left_mlm_loss"],
        checks: &[("", "BertForPreTraining", "output.prediction_logits", sesame_logits::<sesame_unilm::UnilmModel>)],
    });
}

/// `train bert --objective span` (SpanBERT): the held-out metrics carry the SBO loss and no
/// sentence task, the run remembers its objective (export finds the model; a resume without
/// the flag is refused), and transformers loads the export as `BertForMaskedLM`, reporting
/// exactly the SBO head as unexpected, with Sesame's logits.
#[test]
fn bert_trains_with_the_span_boundary_objective_and_exports_a_masked_lm() {
    let out = sesame_tests::Scratch::path("cli-train-spanbert");
    let mut args = train_args("bert", &out, "8");
    args.extend(["--objective".to_string(), "span".to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = xtask(&args).output().unwrap();
    assert!(output.status.success(), "train --objective span: {}", String::from_utf8_lossy(&output.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for key in ["mlm_loss", "sbo_loss", "mlm_accuracy"] {
        assert!(summary["held_out"][key].is_number(), "held-out {key} in {summary}");
    }
    assert!(summary["held_out"].get("nsp_accuracy").is_none(), "no sentence task: {summary}");

    let export = xtask(&["export", "--run", out.to_str().unwrap(), "--step", "8", "--out", out.join("step8").to_str().unwrap()]).output().unwrap();
    assert!(export.status.success(), "export: {}", String::from_utf8_lossy(&export.stderr));
    let mut resume: Vec<&str> = args.iter().copied().filter(|a| *a != "--objective" && *a != "span").collect();
    resume.push("--resume");
    let refused = xtask(&resume).output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("different data settings"), "{stderr}");

    // `--objective mlm`: the same data without SBO (SpanBERT's ablation), a plain masked LM.
    let mlm_out = out.with_extension("mlm");
    let _ = std::fs::remove_dir_all(&mlm_out);
    let mut mlm_args = train_args("bert", &mlm_out, "4");
    mlm_args.extend(["--objective", "mlm", "--masking", "span"].map(String::from));
    let output = xtask(&mlm_args.iter().map(String::as_str).collect::<Vec<_>>()).output().unwrap();
    assert!(output.status.success(), "train --objective mlm: {}", String::from_utf8_lossy(&output.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(summary["held_out"]["mlm_loss"].is_number() && summary["held_out"].get("sbo_loss").is_none(), "{summary}");
    let run: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(mlm_out.join("run.json")).unwrap()).unwrap();
    assert_eq!((run["objective"].as_str(), run["masking"].as_str()), (Some("mlm"), Some("Span")), "{run}");

    let Some(python) = python() else { return };
    let export = out.join("export");
    let batch = Tokenizer::from_dir(&export).unwrap().encode_pairs(&[("Call me Ishmael.", "The whale!")], 32, true).unwrap();
    let inputs = serde_json::to_string(&[&batch.input_ids, &batch.token_type_ids, &batch.attention_mask]).unwrap();
    let script = "import json, sys, torch\nfrom transformers import BertForMaskedLM\n\
                  m, info = BertForMaskedLM.from_pretrained(sys.argv[1], output_loading_info=True)\n\
                  ids, types, mask = (torch.tensor(t).reshape(1, -1) for t in json.loads(sys.argv[2]))\n\
                  logits = m.eval()(input_ids=ids, token_type_ids=types, attention_mask=mask).logits.flatten().tolist()\n\
                  print(json.dumps({'missing': sorted(info['missing_keys']), 'unexpected': sorted(info['unexpected_keys']), 'logits': logits}))";
    let output = Command::new(&python).args(["-c", script]).arg(&export).arg(&inputs).env("HF_HUB_OFFLINE", "1").output().unwrap();
    assert!(output.status.success(), "transformers could not load the export: {}", String::from_utf8_lossy(&output.stderr));
    let hf: serde_json::Value = serde_json::from_slice(output.stdout.rsplit(|&b| b == b'\n').find(|l| !l.is_empty()).unwrap()).unwrap();
    assert_eq!(hf["missing"], serde_json::json!([]), "{}", hf["missing"]);
    let unexpected: Vec<&str> = hf["unexpected"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(unexpected.len(), 10, "{unexpected:?}");
    assert!(unexpected.iter().all(|k| k.starts_with("cls.pair_target_predictions.")), "{unexpected:?}");
    let theirs: Vec<f32> = hf["logits"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    let ours = sesame_logits::<sesame_bert::BertModel>(&export, &batch);
    assert_eq!(ours.len(), theirs.len());
    let diff = ours.iter().zip(&theirs).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(diff <= 1e-4, "transformers and Sesame differ by {diff:e} on the exported model");
    // The MLM-only export is a plain BertForMaskedLM, which transformers loads strictly.
    let inputs_file = mlm_out.join("inputs.safetensors");
    let ids: Vec<u8> = batch.input_ids.iter().flat_map(|x| x.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![batch.batch, batch.seq], &ids).unwrap();
    std::fs::write(&inputs_file, safetensors::serialize([("input.input_ids", view)], None).unwrap()).unwrap();
    let hf_out = mlm_out.join("hf.safetensors");
    sesame_tests::hf_forward(&python, &mlm_out.join("export"), "BertForMaskedLM", &inputs_file, &hf_out).unwrap();
}

/// Replaced-token logits of the ELECTRA discriminator saved in `export`, on `batch`.
fn discriminator_logits(export: &Path, batch: &sesame_text::EncodedBatch) -> Vec<f32> {
    let device = Device::flex();
    let model = sesame_electra::ElectraForPreTraining::from_pretrained(export, &device).unwrap().model;
    let (ids, mask, types) = batch.tensors(&device);
    let input = EncoderInput::new(ids).with_attention_mask(mask).with_token_type_ids(types);
    model.forward(input, None, OutputOptions::default()).logits.into_data().convert::<f32>().try_to_vec().unwrap()
}

/// MLM logits of the model saved in `export`, on `batch`.
fn sesame_logits<B: Backbone>(export: &Path, batch: &sesame_text::EncodedBatch) -> Vec<f32> {
    let device = Device::flex();
    let model = ForMaskedLM::<B>::from_pretrained(export, &device).unwrap().model;
    let (ids, mask, types) = batch.tensors(&device);
    let input = EncoderInput::new(ids).with_attention_mask(mask).with_token_type_ids(types);
    model.forward(input, None, OutputOptions::default()).logits.into_data().convert::<f32>().try_to_vec().unwrap()
}

/// Train `family` for 12 steps into a fresh run directory, SIGKILL the run once a checkpoint
/// exists, resume it to the end, and check the log: every step once, a plot, the held-out
/// `metrics`. Returns the run directory and the resumed run's summary.
fn killed_and_resumed(family: &str, metrics: &[&str]) -> (sesame_tests::Scratch, serde_json::Value) {
    let out = sesame_tests::Scratch::path(&format!("cli-train-{family}"));
    let args = train_args(family, &out, "12");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // Start a run and kill it (SIGKILL) once a checkpoint exists.
    let mut child = xtask(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let latest = out.join("checkpoints/latest");
    let started = Instant::now();
    while !latest.exists() {
        assert!(started.elapsed() < Duration::from_secs(300), "no checkpoint within 5 minutes");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("training ended ({status}) before it could be killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{family}: the kill landed while the run ran: {status}");

    // Resume to the end.
    let mut resume = args.clone();
    resume.push("--resume");
    let output = xtask(&resume).output().unwrap();
    assert!(output.status.success(), "resume failed: {}", String::from_utf8_lossy(&output.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(summary["resumed_from"].as_u64().unwrap() >= 2, "{summary}");

    // Metrics: every step logged once, a plot, held-out metrics.
    let steps: Vec<u64> = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap().lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["split"] == "train")
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, (1..=12).collect::<Vec<_>>(), "each step logged exactly once across the kill");
    assert!(std::fs::read_to_string(out.join("loss.svg")).unwrap().contains("<polyline"));
    for key in metrics {
        assert!(summary["held_out"][key].is_number(), "held-out {key} in {summary}");
    }

    // The killed and resumed run ends with the weights of the same run left alone.
    let full = out.with_extension("uninterrupted");
    let _ = std::fs::remove_dir_all(&full);
    let full_args = train_args(family, &full, "12");
    let output = xtask(&full_args.iter().map(String::as_str).collect::<Vec<_>>()).output().unwrap();
    assert!(output.status.success(), "{family}, uninterrupted: {}", String::from_utf8_lossy(&output.stderr));
    same_exported_weights(&out, &full, family);
    std::fs::remove_dir_all(&full).unwrap();
    (out, summary)
}

/// The exports of the killed and resumed run in `killed` and of the uninterrupted run in `full`
/// hold the same tensors, equal within 1e-6.
fn same_exported_weights(killed: &Path, full: &Path, what: &str) {
    let (ours, theirs) = (export_weights(&killed.join("export")), export_weights(&full.join("export")));
    assert!(!ours.is_empty() && ours.keys().eq(theirs.keys()), "{what}: the exports hold other tensors");
    for (name, values) in &ours {
        let diff = sesame_tests::gap(values, &theirs[name]);
        assert!(diff <= 1e-6, "{what}: {name} of the killed and resumed run differs from the uninterrupted run's by {diff:e}");
    }
}

/// Every float tensor of the safetensors files under `dir` (its subdirectories too: ELECTRA's
/// generator), by file and name.
fn export_weights(dir: &Path) -> std::collections::BTreeMap<String, Vec<f32>> {
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(export_weights(&path).into_iter().map(|(k, v)| (format!("{}/{k}", path.file_name().unwrap().to_string_lossy()), v)));
        } else if path.extension().is_some_and(|e| e == "safetensors") {
            let bytes = std::fs::read(&path).unwrap();
            let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
            for (name, view) in st.tensors() {
                if view.dtype() == safetensors::Dtype::F32 {
                    let values = view.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
                    out.insert(format!("{}:{name}", path.file_name().unwrap().to_string_lossy()), values);
                }
            }
        }
    }
    out
}

/// Any checkpoint of the run in `out` exports on request; a missing step, or a `latest` that
/// points out of the run, is refused.
fn export_checks(out: &Path) {
    let output = xtask(&["export", "--run", out.to_str().unwrap(), "--step", "10"]).output().unwrap();
    assert!(output.status.success(), "export: {}", String::from_utf8_lossy(&output.stderr));
    let step10 = out.join("export-step-00000010");
    assert!(step10.join("model.safetensors").is_file() && step10.join("tokenizer.json").is_file());
    let missing = xtask(&["export", "--run", out.to_str().unwrap(), "--step", "3"]).output().unwrap();
    assert!(!missing.status.success() && String::from_utf8_lossy(&missing.stderr).contains("no checkpoint"));
    // `latest` must name a checkpoint of the run, not a path elsewhere.
    let latest = out.join("checkpoints/latest");
    let kept = std::fs::read_to_string(&latest).unwrap();
    std::fs::write(&latest, "../../elsewhere").unwrap();
    let outside = xtask(&["export", "--run", out.to_str().unwrap(), "--out", out.join("x").to_str().unwrap()]).output().unwrap();
    assert!(!outside.status.success() && String::from_utf8_lossy(&outside.stderr).contains("not a checkpoint of this run"));
    std::fs::write(&latest, kept).unwrap();
}

fn round_trip(expect: Expect) {
    let (family, mask) = (expect.family, expect.mask);
    let (out, _) = killed_and_resumed(family, expect.metrics);

    // The export works with fill-mask.
    let export = out.join("export");
    let fill_mask_dir = export.join(expect.fill_mask_dir);
    let text = format!("the {mask} .");
    let output = xtask(&["fill-mask", "--model", fill_mask_dir.to_str().unwrap(), "--top-k", "2", &text]).output().unwrap();
    assert!(output.status.success(), "fill-mask: {}", String::from_utf8_lossy(&output.stderr));
    let predictions: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(predictions.as_array().unwrap()[0].as_array().unwrap().len(), 2);

    export_checks(&out);

    // ... and transformers loads it with the same logits.
    let Some(python) = python() else { return };
    let tokenizer = Tokenizer::from_dir(&export).unwrap();
    let (first, second) = ("Call me Ishmael, said  the naïve sailor.", "The whale!");
    let batch = tokenizer.encode_pairs(&[(first, second)], 32, true).unwrap();
    let script = "import json, sys\nfrom transformers import AutoTokenizer\nt = AutoTokenizer.from_pretrained(sys.argv[1])\n\
                  print(json.dumps(t(sys.argv[2], sys.argv[3], truncation=True, max_length=32)['input_ids']))";
    let output = Command::new(&python).args(["-c", script]).arg(&export).arg(first).arg(second).env("HF_HUB_OFFLINE", "1").output().unwrap();
    assert!(output.status.success(), "transformers could not load the tokenizer: {}", String::from_utf8_lossy(&output.stderr));
    let theirs: Vec<i64> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(batch.input_ids, theirs, "transformers tokenizes the exported tokenizer differently: {:?}", batch.tokens);
    let tensors = [("input.input_ids", &batch.input_ids), ("input.attention_mask", &batch.attention_mask), ("input.token_type_ids", &batch.token_type_ids)];
    let bytes: Vec<Vec<u8>> = tensors.iter().map(|(_, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
    let views: Vec<(&str, safetensors::tensor::TensorView)> = tensors.iter().zip(&bytes)
        .map(|((name, _), b)| (*name, safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![batch.batch, batch.seq], b).unwrap()))
        .collect();
    let inputs = out.join("inputs.safetensors");
    std::fs::write(&inputs, safetensors::serialize(views, None).unwrap()).unwrap();
    for (dir, hf_arch, hf_key, ours) in expect.checks {
        let model_dir = export.join(dir);
        let hf_out = out.join(format!("hf-{hf_arch}.safetensors"));
        if let Err(e) = sesame_tests::hf_forward(&python, &model_dir, hf_arch, &inputs, &hf_out) {
            panic!("transformers could not load the export as {hf_arch}: {e}");
        }
        let hf_bytes = std::fs::read(&hf_out).unwrap();
        let hf = safetensors::SafeTensors::deserialize(&hf_bytes).unwrap();
        let theirs: Vec<f32> = hf.tensor(hf_key).unwrap().data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        let ours = ours(&model_dir, &batch);
        assert_eq!(ours.len(), theirs.len(), "{hf_arch}");
        let diff = ours.iter().zip(&theirs).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(diff <= 1e-4, "{hf_arch}: transformers and Sesame differ by {diff:e} on the exported model");
    }
}

/// BART through the same round trip: killed, resumed, exported; transformers loads the export
/// strictly, tokenizes as Sesame does, and beam search from it gives Sesame's sequences and
/// scores (so the two agree on every logit they rank).
#[test]
fn bart_is_killed_resumes_and_exports_a_model_transformers_loads_and_generates_from() {
    let metrics = ["loss", "perplexity", "token_accuracy", "infill_loss", "infill_accuracy", "copy_unigram_loss", "unigram_loss"];
    let (out, _) = killed_and_resumed("bart", &metrics);
    export_checks(&out);
    let export = out.join("export");
    let text = "Call me Ishmael. Some years ago";
    let output = xtask(&["generate", "--model", export.to_str().unwrap(), "--num-beams", "3", "--num-return-sequences", "2", "--max-new-tokens", "7", text])
        .output()
        .unwrap();
    assert!(output.status.success(), "generate: {}", String::from_utf8_lossy(&output.stderr));
    let ours: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(ours["texts"].as_array().unwrap().len(), 2, "{ours}");

    let Some(python) = python() else { return };
    let script = "import json, sys, torch\nfrom transformers import AutoTokenizer, BartForConditionalGeneration\n\
                  t = AutoTokenizer.from_pretrained(sys.argv[1])\n\
                  m, info = BartForConditionalGeneration.from_pretrained(sys.argv[1], output_loading_info=True)\n\
                  bad = {k: v for k, v in info.items() if v and k in ('missing_keys', 'unexpected_keys', 'mismatched_keys')}\n\
                  assert not bad, bad\n\
                  ids = t(sys.argv[2], return_tensors='pt')['input_ids']\n\
                  out = m.eval().generate(ids, num_beams=3, num_return_sequences=2, max_new_tokens=7, return_dict_in_generate=True, output_scores=True)\n\
                  print(json.dumps({'input_ids': ids[0].tolist(), 'sequences': out.sequences.tolist(), 'sequences_scores': out.sequences_scores.tolist()}))";
    let output = Command::new(&python).args(["-c", script]).arg(&export).arg(text).env("HF_HUB_OFFLINE", "1").output().unwrap();
    assert!(output.status.success(), "transformers: {}", String::from_utf8_lossy(&output.stderr));
    let theirs: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let tokenizer = Tokenizer::from_dir(&export).unwrap();
    let encoded = tokenizer.encode(&[text], 64, false).unwrap();
    assert_eq!(serde_json::json!(encoded.input_ids), theirs["input_ids"], "the exported tokenizer");
    assert_eq!(ours["sequences"], theirs["sequences"], "beam search on the export");
    for (a, b) in ours["sequences_scores"].as_array().unwrap().iter().zip(theirs["sequences_scores"].as_array().unwrap()) {
        assert!((a.as_f64().unwrap() - b.as_f64().unwrap()).abs() <= 1e-4, "scores {ours} vs {theirs}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

/// XLNet through the same round trip: killed (its memory checkpointed), resumed, exported;
/// transformers loads the export strictly, tokenizes as Sesame does, and generates from it what
/// `cargo xtask generate` generates.
#[test]
fn xlnet_is_killed_resumes_and_exports_a_model_transformers_loads_and_generates_from() {
    let (out, _) = killed_and_resumed("xlnet", &["loss", "perplexity", "token_accuracy", "unigram_loss"]);
    let checkpoints = std::fs::read_dir(out.join("checkpoints")).unwrap();
    assert!(checkpoints.filter_map(Result::ok).any(|e| e.path().join("memory.safetensors").is_file()), "the memory is checkpointed");
    export_checks(&out);
    let export = out.join("export");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(export.join("config.json")).unwrap()).unwrap();
    assert_eq!((config["bi_data"].as_bool(), config["reuse_len"].as_u64()), (Some(false), None), "{config}");
    let text = "Call me Ishmael. Some years ago";
    let tokenizer = Tokenizer::from_dir(&export).unwrap();
    let encoded = tokenizer.encode(&[text], 64, false).unwrap();
    let prompt = &encoded.input_ids[..encoded.input_ids.len() - 2];
    let line = format!("{{\"input_ids\": {prompt:?}}}\n");
    let mut child = xtask(&["generate", "--model", export.to_str().unwrap(), "--max-new-tokens", "6", "--input", "-"])
        .stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), line.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "generate: {}", String::from_utf8_lossy(&output.stderr));
    let ours: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();

    let Some(python) = python() else { return };
    let script = "import json, sys, torch\nfrom transformers import AutoTokenizer, XLNetLMHeadModel\n\
                  t = AutoTokenizer.from_pretrained(sys.argv[1])\n\
                  m, info = XLNetLMHeadModel.from_pretrained(sys.argv[1], output_loading_info=True)\n\
                  bad = {k: v for k, v in info.items() if v and k in ('missing_keys', 'unexpected_keys', 'mismatched_keys')}\n\
                  assert not bad, bad\n\
                  ids = t(sys.argv[2])['input_ids']\n\
                  out = m.eval().generate(torch.tensor([ids[:-2]]), max_new_tokens=6, do_sample=False)\n\
                  print(json.dumps({'input_ids': ids, 'sequences': out.tolist()}))";
    let output = Command::new(&python).args(["-c", script]).arg(&export).arg(text).env("HF_HUB_OFFLINE", "1").output().unwrap();
    assert!(output.status.success(), "transformers: {}", String::from_utf8_lossy(&output.stderr));
    let theirs: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(serde_json::json!(encoded.input_ids), theirs["input_ids"], "the exported tokenizer");
    assert_eq!(ours["sequences"], theirs["sequences"], "greedy search on the export");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn bench_times_each_family_s_pretraining_step() {
    for family in ["bert", "roberta", "albert", "electra", "unilm", "bart"] {
        let args = ["bench", "--family", family, "--presets", "tiny", "--vocab-size", "500", "--batch-size", "2", "--seq-len", "16", "--warmup", "1", "--steps", "3"];
        let out = xtask(&args).output().unwrap();
        assert!(out.status.success(), "{family}: {}", String::from_utf8_lossy(&out.stderr));
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let row = &rows[0];
        assert_eq!((row["family"].as_str(), row["preset"].as_str()), (Some(family), Some("tiny")));
        assert!(row["backend"].is_string(), "{row}");
        let (tokens_per_s, step_s) = (row["tokens_per_s"].as_f64().unwrap(), row["median_step_s"].as_f64().unwrap());
        assert!(tokens_per_s > 0.0 && (tokens_per_s * step_s - 32.0).abs() < 1e-6, "{row}");
    }
    let run = |args: &[&str]| -> serde_json::Value {
        let out = xtask(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()[0].clone()
    };
    let row = run(&["bench", "--mode", "infer", "--presets", "tiny", "--vocab-size", "500", "--batch-size", "2", "--seq-len", "16", "--warmup", "0", "--steps", "1"]);
    assert!(row["mode"] == "infer" && row["tokens_per_s"].as_f64().unwrap() > 0.0, "{row}");
    let row = run(&["bench", "--mode", "gemm", "--gemm-size", "64", "--warmup", "0", "--steps", "1"]);
    assert!(row["gflops"].as_f64().unwrap() > 0.0 && (row["m"] == 64 && row["k"] == 64 && row["n"] == 64), "{row}");
    // A row per product of --gemm-shapes, each with its shape; with --compare-pytorch both peers'
    // rates (PyTorch's and NumPy's OpenBLAS) and their ratios.
    let peers = python().is_some();
    let mut gemm = vec!["bench", "--mode", "gemm", "--gemm-shapes", "8x16x4,3x5x7", "--warmup", "0", "--steps", "1"];
    if peers {
        gemm.push("--compare-pytorch");
    }
    let out = xtask(&gemm).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let shapes: Vec<[u64; 3]> = rows.iter().map(|r| ["m", "k", "n"].map(|d| r[d].as_u64().unwrap())).collect();
    assert_eq!(shapes, [[8, 16, 4], [3, 5, 7]]);
    for row in &rows {
        assert!(row["gflops"].as_f64().unwrap() > 0.0, "{row}");
        if peers {
            assert!(row["pytorch"]["openblas_gflops"].as_f64().unwrap() > 0.0 && row["pytorch"]["openblas"].is_string(), "{row}");
            assert!(row["ratio"].as_f64().unwrap() > 0.0 && row["openblas_ratio"].as_f64().unwrap() > 0.0, "{row}");
        }
    }
    // A transposed right-hand side (a tied LM head's table) is timed as such, on both sides.
    let mut transposed = vec!["bench", "--mode", "gemm", "--gemm-shapes", "4x24x40", "--gemm-transposed", "--warmup", "0", "--steps", "1"];
    if peers {
        transposed.push("--compare-pytorch");
    }
    let row = run(&transposed);
    assert!(row["transposed"] == true && row["gflops"].as_f64().unwrap() > 0.0 && (!peers || row["ratio"].as_f64().unwrap() > 0.0), "{row}");
    // UniLM's sequence-to-sequence decoding, greedy and 4 beams, against microsoft/unilm's loop.
    let mut unilm = vec!["bench", "--family", "unilm", "--mode", "generate", "--presets", "tiny", "--vocab-size", "500", "--batch-size", "2", "--seq-len", "8", "--max-new-tokens", "4", "--warmup", "0", "--steps", "1"];
    if peers {
        unilm.push("--compare-pytorch");
    }
    let out = xtask(&unilm).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.iter().map(|r| r["search"].as_str().unwrap()).collect::<Vec<_>>(), ["greedy", "beam4"]);
    for row in &rows {
        assert!(row["family"] == "unilm" && row["tokens_per_s"].as_f64().unwrap() > 0.0, "{row}");
        assert!(!peers || row["pytorch"]["tokens_per_s"].as_f64().unwrap() > 0.0, "{row}");
    }
    let model = format!("{}/../fixtures/bert/base-fill-mask", env!("CARGO_MANIFEST_DIR"));
    let row = run(&["bench", "--mode", "embed", "--model", &model, "--sentences", "5", "--warmup", "0", "--steps", "1"]);
    assert!(row["sentences"] == 5 && row["sentences_per_s"].as_f64().unwrap() > 0.0 && row["load_s"].as_f64().unwrap() > 0.0, "{row}");
    // Each row says where it ran.
    let machine = &row["machine"];
    assert!(machine["cpu"].is_string() && machine["isa"].is_string() && machine["logical_cores"].as_u64() >= Some(1), "{row}");
    assert!(machine["sesame_gemm_gflops"].as_f64().unwrap() > 0.0 && machine["pytorch_gemm_gflops"].is_null(), "{row}");
    // The PyTorch side runs the same architecture and reports a ratio; each preset is timed in
    // a process of its own, and the machine's GEMM row has both sides.
    if python().is_some() {
        for (family, presets) in [("bert", "tiny,mini"), ("electra", "tiny"), ("bart", "tiny")] {
            let out = xtask(&["bench", "--family", family, "--presets", presets, "--vocab-size", "500", "--batch-size", "2", "--seq-len", "16", "--warmup", "0", "--steps", "1", "--compare-pytorch"]).output().unwrap();
            assert!(out.status.success(), "{family}: {}", String::from_utf8_lossy(&out.stderr));
            let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(rows.iter().map(|r| r["preset"].as_str().unwrap()).collect::<Vec<_>>().join(","), presets);
            for row in &rows {
                let ratio = row["ratio"].as_f64().unwrap();
                assert!(ratio.is_finite() && ratio > 0.0 && row["pytorch"]["tokens_per_s"].as_f64().unwrap() > 0.0, "{row}");
                assert!(row["machine"]["pytorch_gemm_gflops"].as_f64().unwrap() > 0.0 && row["pytorch"]["cpu_capability"].is_string(), "{row}");
                assert!(row["machine"]["openblas_gemm_gflops"].as_f64().unwrap() > 0.0, "{row}");
            }
        }
        // ONNX Runtime embeds the same sentences from torch's export, in fp32 (transformers'
        // embeddings) and int8 (weights per tensor and per channel); Sesame's side in int8 says
        // how near the float model it stays.
        let row = run(&["bench", "--mode", "embed", "--model", &model, "--sentences", "5", "--warmup", "0", "--steps", "1", "--compare-onnxruntime", "--int8"]);
        assert!(row["onnxruntime"]["fp32"]["min_cosine_to_transformers"].as_f64().unwrap() > 0.9999, "{row}");
        assert!(row["int8"] == true && row["min_cosine_to_float"].as_f64().unwrap() >= 0.99, "{row}");
        for kind in ["fp32", "int8", "int8_per_channel"] {
            let ratio = row[format!("onnxruntime_{kind}_ratio")].as_f64().unwrap();
            assert!(ratio.is_finite() && ratio > 0.0 && row["onnxruntime"][kind]["sentences_per_s"].as_f64().unwrap() > 0.0, "{row}");
        }
        // The base model's forward passes too, Sesame's side in int8.
        let out = xtask(&["bench", "--mode", "infer", "--presets", "tiny", "--vocab-size", "500", "--batch-size", "2", "--seq-len", "16", "--warmup", "0", "--steps", "1", "--compare-onnxruntime", "--int8"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let row = &serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap()[0];
        assert!(row["int8"] == true, "{row}");
        for kind in ["fp32", "int8", "int8_per_channel"] {
            let ratio = row[format!("onnxruntime_{kind}_ratio")].as_f64().unwrap();
            assert!(ratio.is_finite() && ratio > 0.0 && row["onnxruntime"][kind]["tokens_per_s"].as_f64().unwrap() > 0.0, "{row}");
        }
    }
    let refused = xtask(&["bench", "--mode", "train", "--compare-onnxruntime"]).output().unwrap();
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("--compare-onnxruntime"), "{}", String::from_utf8_lossy(&refused.stderr));
    let refused = xtask(&["bench", "--mode", "embed", "--model", &model, "--pooling", "max", "--compare-onnxruntime"]).output().unwrap();
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("--pooling"), "{}", String::from_utf8_lossy(&refused.stderr));
    let bad = xtask(&["bench", "--family", "albert", "--presets", "huge"]).output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("huge"), "{}", String::from_utf8_lossy(&bad.stderr));
}

#[test]
fn static_masking_is_a_data_setting_a_resume_must_keep() {
    let out = sesame_tests::Scratch::path("cli-static");
    let mut args = train_args("bert", &out, "2");
    args.extend(["--static-masks".to_string(), "3".to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = xtask(&args).output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && log.contains("3 static masks per example"), "{log}");
    // Resuming with dynamic masks would change the data: refused.
    let dynamic: Vec<&str> = args[..args.len() - 2].iter().copied().chain(["--resume"]).collect();
    let refused = xtask(&dynamic).output().unwrap();
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("different data settings"));
    let zero: Vec<&str> = args[..args.len() - 1].iter().copied().chain(["0"]).collect();
    assert!(!xtask(&zero).output().unwrap().status.success(), "--static-masks 0 is refused");
    // A new run into a directory that holds one is refused, unless asked to overwrite it.
    let again = xtask(&args).output().unwrap();
    let log = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && log.contains("--out") && log.contains("--overwrite"), "{log}");
    let overwrite: Vec<&str> = args.iter().copied().chain(["--overwrite"]).collect();
    let fresh = xtask(&overwrite).output().unwrap();
    assert!(fresh.status.success(), "{}", String::from_utf8_lossy(&fresh.stderr));
    std::fs::remove_dir_all(&out).unwrap();
}

/// Two default runs of each family with one seed, each training its own tokenizer on the
/// shipped corpus, in separate processes (one of them on one thread, the other on every core),
/// export bit-identical weights and tokenizer files, and log the same metrics.
#[test]
fn the_same_seed_gives_bit_identical_runs_tokenizer_included() {
    let run = |family: &str, name: &str, one_thread: bool| {
        let out = sesame_tests::Scratch::path(&format!("cli-seed-{family}-{name}"));
        let mut args = vec!["train", family, "--steps", "2", "--batch-size", "4", "--seq-len", "32", "--seed", "7", "--quiet", "--out", out.to_str().unwrap()];
        if one_thread {
            args.extend(["--threads", "1"]);
        }
        let mut cmd = xtask(&args);
        if one_thread {
            cmd.env("RAYON_NUM_THREADS", "1");
        }
        let output = cmd.output().unwrap();
        assert!(output.status.success(), "{family}: {}", String::from_utf8_lossy(&output.stderr));
        let metrics: Vec<String> = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap().lines()
            .map(|l| { let mut v: serde_json::Value = serde_json::from_str(l).unwrap(); v["values"].as_object_mut().unwrap().remove("tokens_per_s"); v.to_string() })
            .collect();
        // Every file of the export (ELECTRA's generator included), by its path.
        let mut files = std::collections::BTreeMap::new();
        let mut dirs = vec![out.join("export")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    files.insert(path.strip_prefix(&out).unwrap().to_path_buf(), std::fs::read(&path).unwrap());
                }
            }
        }
        let _ = std::fs::remove_dir_all(&out);
        (files, metrics)
    };
    for family in ["bert", "roberta", "albert", "electra", "unilm", "bart", "xlnet"] {
        let (a, b) = (run(family, "a", false), run(family, "b", true));
        assert!(a.0.keys().any(|p| p.ends_with("tokenizer.json")) && a.0.keys().any(|p| p.ends_with("model.safetensors")), "{family}: {:?}", a.0.keys());
        assert_eq!(a.0.keys().collect::<Vec<_>>(), b.0.keys().collect::<Vec<_>>(), "{family}: the same files");
        for (path, bytes) in &a.0 {
            assert!(*bytes == b.0[path], "{family}: {} differs between two runs with one seed", path.display());
        }
        assert_eq!(a.1, b.1, "{family}: the same seed gives the same metrics");
    }
}

#[test]
fn a_run_killed_at_random_moments_and_resumed_ends_with_the_uninterrupted_runs_weights() {
    // flex, the default backend; dropout on (the tiny preset's 0.1), a fixed tokenizer.
    let tokenizer = repo().join("fixtures/bert/base-fill-mask");
    let args = |out: &Path| -> Vec<String> {
        [
            "train", "bert", "--steps", "12", "--batch-size", "4", "--seq-len", "32", "--seed", "11", "--checkpoint-every", "2",
            "--eval-every", "6", "--log-every", "1", "--quiet", "--tokenizer", tokenizer.to_str().unwrap(), "--out", out.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let full = sesame_tests::Scratch::path("cli-kill-full");
    let killed = sesame_tests::Scratch::path("cli-kill-twice");
    let run = |a: &[String]| xtask(&a.iter().map(String::as_str).collect::<Vec<_>>()).output().unwrap();
    let started = Instant::now();
    let output = run(&args(&full));
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // Kill moments spread over the uninterrupted run's own length (the process included).
    let full_ms = (started.elapsed().as_millis() as u64).max(300);

    // SIGKILL at pseudo-random moments (mid-step, mid-checkpoint-write, before the first
    // checkpoint), each time continuing with --resume, or anew when nothing was saved yet. Kills
    // that all land before the first checkpoint would prove only that the seed reproduces a
    // run: so after four, the next kill waits for a checkpoint, until one has landed after one.
    // A run that ends before its kill while kills are still owed starts the killed run over.
    // Each start over kills anew (the pseudo-random moments move on).
    let latest = killed.join("checkpoints/latest");
    let mut state = std::process::id() as u64 | 1;
    let (mut kills, mut after_checkpoint) = (0, 0);
    let summary = loop {
        let mut a = args(&killed);
        a.push(if latest.exists() { "--resume".into() } else { "--overwrite".into() });
        let mut child = xtask(&a.iter().map(String::as_str).collect::<Vec<_>>()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let delay = Duration::from_millis(50 + state % (full_ms * 3 / 4));
        let wait_for_checkpoint = kills >= 4 && after_checkpoint == 0;
        let started = Instant::now();
        while (started.elapsed() < delay || (wait_for_checkpoint && !latest.exists())) && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
        if (kills < 4 || after_checkpoint == 0) && child.try_wait().unwrap().is_none() {
            let had_checkpoint = latest.exists();
            child.kill().unwrap();
            let status = child.wait().unwrap();
            assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "the kill landed while the run ran: {status}");
            kills += 1;
            after_checkpoint += usize::from(had_checkpoint);
            continue;
        }
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let summary = serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap();
        // A kill after the last step's checkpoint leaves nothing to train after the resume:
        // that run proves less, so it starts over too.
        if kills < 4 || after_checkpoint == 0 || summary["resumed_from"].as_u64() == Some(12) {
            std::fs::remove_dir_all(&killed).unwrap();
            (kills, after_checkpoint) = (0, 0);
            continue;
        }
        break summary;
    };
    assert!(kills >= 4 && after_checkpoint >= 1, "{kills} kills, {after_checkpoint} after a checkpoint");
    assert!(summary["resumed_from"].as_u64().is_some_and(|step| (2..12).contains(&step)), "the last run resumed from a checkpoint: {summary}");

    same_exported_weights(&killed, &full, "bert killed at random moments");
    for dir in [&full, &killed] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// `train bert --teacher DIR` (DistilBERT's masked-LM distillation): a student of half the
/// teacher's layers learns (its held-out loss falls), the run reports every term and the
/// teacher's own held-out loss, remembers its teacher and weights (a resume with others is
/// refused, `export` finds the model), and exports a one-layer masked LM that transformers
/// loads strictly; a preset student of another width learns the hidden states through a
/// projection; flags that cannot work are refused with one line each.
#[test]
fn a_masked_lm_distils_into_a_student_with_half_the_layers() {
    let base = sesame_tests::Scratch::path("cli-distil-mlm");
    let run = |args: &[String]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        xtask(&args).output().unwrap()
    };
    // The teacher: a two-layer masked LM.
    let mut teacher_args = train_args("bert", &base.join("teacher"), "8");
    teacher_args.extend(["--objective", "mlm", "--lr", "3e-3"].map(String::from));
    let output = run(&teacher_args);
    assert!(output.status.success(), "the teacher: {}", String::from_utf8_lossy(&output.stderr));
    let teacher = base.join("teacher/export");

    let out = base.join("student");
    let mut args = train_args("bert", &out, "16");
    args.extend(["--teacher".to_string(), teacher.display().to_string(), "--alpha-hidden".into(), "1".into(), "--lr".into(), "3e-3".into()]);
    let output = run(&args);
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "train --teacher: {log}");
    assert!(log.contains("the student starts from the teacher's layers 1"), "{log}");
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for key in ["mlm_loss", "mlm_accuracy", "soft_loss", "hard_loss", "cosine_loss", "hidden_loss", "teacher_mlm_loss", "unigram_mlm_loss"] {
        assert!(summary["held_out"][key].as_f64().is_some_and(f64::is_finite), "held-out {key} in {summary}");
    }
    let held_out: Vec<f64> = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap().lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["split"] == "held_out")
        .map(|v| v["values"]["loss"].as_f64().unwrap())
        .collect();
    assert!(held_out.len() >= 3 && held_out.last() < held_out.first(), "the student's held-out loss falls: {held_out:?}");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("export/config.json")).unwrap()).unwrap();
    assert_eq!((config["num_hidden_layers"].as_u64(), config["architectures"][0].as_str()), (Some(1), Some("BertForMaskedLM")), "{config}");
    let export = xtask(&["export", "--run", out.to_str().unwrap(), "--out", out.join("latest").to_str().unwrap()]).output().unwrap();
    assert!(export.status.success(), "export: {}", String::from_utf8_lossy(&export.stderr));
    let mut other_weights = args.clone();
    other_weights.extend(["--alpha-soft", "1", "--resume"].map(String::from));
    let refused = run(&other_weights);
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("different data settings"), "{}", String::from_utf8_lossy(&refused.stderr));

    // Refused, each with one line naming the flag.
    let nowhere = base.join("nowhere");
    let refusals: [(&[&str], &str); 4] = [
        (&["--student-layers", "1"], "--teacher"),
        (&["--teacher", teacher.to_str().unwrap(), "--student-layers", "2"], "--student-layers 2"),
        (&["--teacher", teacher.to_str().unwrap(), "--preset", "mini", "--alpha-attention", "1"], "--alpha-attention"),
        (&["--teacher", nowhere.to_str().unwrap()], "--teacher"),
    ];
    for (i, (flags, names)) in refusals.iter().enumerate() {
        let mut args = train_args("bert", &base.join(format!("refused-{i}")), "2");
        args.extend(flags.iter().map(|s| s.to_string()));
        let output = run(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(names) && stderr.trim().lines().count() == 1, "{flags:?}: {stderr}");
    }

    // A wider student of a preset learns the teacher's hidden states through a projection
    // (TinyBERT's), trained beside it and left out of the export.
    let wide = base.join("wide");
    let mut wide_args = train_args("bert", &wide, "4");
    wide_args.extend(["--teacher", teacher.to_str().unwrap(), "--preset", "mini", "--alpha-hidden", "1"].map(String::from));
    let output = run(&wide_args);
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && log.contains("hidden states projected 256 -> 128"), "{log}");
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(summary["held_out"]["hidden_loss"].as_f64().is_some_and(f64::is_finite), "{summary}");
    let export = xtask(&["export", "--run", wide.to_str().unwrap(), "--out", wide.join("latest").to_str().unwrap()]).output().unwrap();
    assert!(export.status.success(), "export: {}", String::from_utf8_lossy(&export.stderr));
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(wide.join("latest/config.json")).unwrap()).unwrap();
    assert_eq!(config["hidden_size"].as_u64(), Some(256), "{config}");

    let Some(python) = python() else { return };
    let batch = Tokenizer::from_dir(&out.join("export")).unwrap().encode_pairs(&[("Call me Ishmael.", "The whale!")], 32, true).unwrap();
    let inputs_file = out.join("inputs.safetensors");
    let ids: Vec<u8> = batch.input_ids.iter().flat_map(|x| x.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![batch.batch, batch.seq], &ids).unwrap();
    std::fs::write(&inputs_file, safetensors::serialize([("input.input_ids", view)], None).unwrap()).unwrap();
    sesame_tests::hf_forward(&python, &out.join("export"), "BertForMaskedLM", &inputs_file, &out.join("hf.safetensors")).unwrap();
    let _ = std::fs::remove_dir_all(&base);
}

/// `--eval-every 0` and `--checkpoint-every 0` mean "only at the end", as before the options
/// moved into the library: one held-out evaluation, at the last step, and one checkpoint, the
/// last step's, however many steps ran.
#[test]
fn eval_every_0_and_checkpoint_every_0_evaluate_and_checkpoint_only_at_the_end() {
    let out = sesame_tests::Scratch::path("cli-every-0");
    let args = ["train", "bert", "--steps", "5", "--batch-size", "4", "--seq-len", "32", "--log-every", "1", "--eval-every", "0", "--checkpoint-every", "0", "--quiet", "--out", out.to_str().unwrap()];
    let output = xtask(&args).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let evaluated: Vec<u64> = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap().lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["split"] == "held_out")
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert_eq!(evaluated, [5], "held-out evaluations");
    let mut checkpoints: Vec<String> = std::fs::read_dir(out.join("checkpoints")).unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    checkpoints.sort();
    assert_eq!(checkpoints, ["step-00000005"], "checkpoints");
    assert!(out.join("export/model.safetensors").is_file());
    std::fs::remove_dir_all(&out).unwrap();
}
