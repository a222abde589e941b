//! `cargo xtask finetune` on the families whose task models are not over the shared encoder:
//! XLNet (the classifier on its `<cls>` summary, the tagger and the span head; padding on the
//! left, `<cls>` at the end) and BART (the classifier at the last `</s>` of the decoder,
//! the span head on the decoder's states). Each starts from a freshly initialised base model
//! saved with the fixture tokenizers, learns the generated tasks the BERT runs learn (a killed
//! run resumes to the same model), and exports what transformers loads with the same logits;
//! the pipelines give them too; `distill` teaches each a one-layer student that transformers
//! loads. XLNet reads a question after its context, as `run_qa.py` and
//! transformers' pipeline order them for a tokenizer that pads on the left.

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::prelude::*;
use sesame_layers::{ClassifierLayers, HfConfig, OutputOptions, PretrainedModel, SpanLogits, TaskModel};
use sesame_text::Tokenizer;

use crate::finetune_common;
use finetune_common::{classify, qa, repo, tag, xtask};

fn scratch(name: &str) -> sesame_tests::Scratch {
    finetune_common::scratch("families", name)
}

/// A base model `M` of `config` (JSON), freshly initialised from seed 7, saved in `dir` with
/// the tokenizer files of `tokenizer` (a fixture directory).
fn start_checkpoint<M: PretrainedModel>(dir: &Path, config: serde_json::Value, tokenizer: &str) -> PathBuf {
    let model_dir = dir.join("start");
    std::fs::create_dir_all(&model_dir).unwrap();
    for entry in std::fs::read_dir(repo().join(tokenizer)).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if ["spiece.model", "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"].contains(&name.as_str()) {
            std::fs::copy(&path, model_dir.join(&name)).unwrap();
        }
    }
    std::fs::write(model_dir.join("config.json"), config.to_string()).unwrap();
    let config = M::Config::from_dir(&model_dir).unwrap();
    let device = Device::default();
    // The device's generator is one for the whole process: the tests running beside this one
    // would otherwise draw from it between the seed and the last parameter.
    static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _alone = INIT.lock().unwrap_or_else(|e| e.into_inner());
    device.seed(7);
    M::init(&config, &device).save_pretrained(&config, &model_dir).unwrap();
    model_dir
}

fn xlnet_start(dir: &Path) -> PathBuf {
    let config = serde_json::json!({
        "model_type": "xlnet", "vocab_size": 700, "d_model": 32, "n_layer": 2, "n_head": 4, "d_head": 8, "d_inner": 37,
        "ff_activation": "gelu", "pad_token_id": 5, "bos_token_id": 1, "eos_token_id": 2, "dropout": 0.1,
        "summary_type": "last", "summary_use_proj": true, "summary_activation": "tanh", "summary_last_dropout": 0.1,
    });
    start_checkpoint::<sesame_xlnet::XlnetModel>(dir, config, "fixtures/xlnet/spiece")
}

fn bart_start(dir: &Path) -> PathBuf {
    let config = serde_json::json!({
        "model_type": "bart", "vocab_size": 800, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 37, "decoder_ffn_dim": 37,
        "max_position_embeddings": 64, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2,
        "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0, "classifier_dropout": 0.0,
    });
    start_checkpoint::<sesame_bart::BartModel>(dir, config, "fixtures/roberta/tokenizer")
}

/// `finetune --task TASK` of `model` on `train` and `eval` into `out`, with `extra` flags.
fn finetune(task: &str, model: &Path, train: &Path, eval: &Path, out: &Path, extra: &[&str]) -> Result<serde_json::Value, String> {
    let path = |p: &Path| p.display().to_string();
    let (model, train, eval, out) = (path(model), path(train), path(eval), path(out));
    let defaults = [("--model", model.as_str()), ("--train", &train), ("--eval", &eval), ("--out", &out), ("--batch-size", "16"), ("--lr", "3e-3")];
    finetune_common::finetune(task, &finetune_common::flags(&defaults, extra))
}

/// transformers' outputs of the model in `dir` (loaded by `auto_class`) for `pairs` of texts
/// (the second `null` for single texts), tokenized by its tokenizer with padding and segment ids: `input_ids` and `outputs` (each named output, flattened). `None` (said) without
/// SESAME_PYTHON.
fn transformers_outputs(dir: &Path, auto_class: &str, pairs: &[(String, Option<String>)], outputs: &[&str]) -> Option<serde_json::Value> {
    let Some(python) = sesame_tests::python() else {
        return None;
    };
    let script = r#"
import inspect, json, sys, torch, transformers
d, auto, pairs, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
tok = transformers.AutoTokenizer.from_pretrained(d)
model = getattr(transformers, auto).from_pretrained(d).eval()
firsts, seconds = [p[0] for p in pairs], [p[1] for p in pairs]
# Segment ids as XLNet's own code gives them (transformers 5 leaves them out unless asked).
batch = tok(firsts, seconds if seconds[0] is not None else None, padding=True, return_tensors="pt", return_token_type_ids=True)
takes = inspect.signature(model.forward).parameters
with torch.no_grad():
    out = model(**{k: v for k, v in batch.items() if k in takes})
print(json.dumps({"input_ids": batch["input_ids"].tolist(), "outputs": {n: getattr(out, n).flatten().tolist() for n in names}}))
"#;
    let out = Command::new(python)
        .args(["-c", script, &dir.display().to_string(), auto_class, &serde_json::to_string(pairs).unwrap(), &serde_json::to_string(outputs).unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_slice(out.stdout.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap()).unwrap())
}

/// The padded input Sesame builds for `pairs` with the tokenizer of `dir` (the pipelines' and
/// `finetune`'s), and its ids.
fn sesame_input(dir: &Path, pairs: &[(String, Option<String>)], device: &Device) -> (sesame_layers::EncoderInput, Vec<Vec<i64>>) {
    let tokenizer = Tokenizer::from_dir(dir).unwrap();
    let encoded = match pairs[0].1 {
        Some(_) => tokenizer.encode_pairs_each(&pairs.iter().map(|(a, b)| (a.as_str(), b.as_deref().unwrap())).collect::<Vec<_>>(), 512, true).unwrap(),
        None => tokenizer.encode_each(&pairs.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>(), 512, true).unwrap(),
    };
    let padded = tokenizer.pad(&encoded.iter().collect::<Vec<_>>()).unwrap();
    let ids = padded.input_ids.chunks(padded.seq).map(|r| r.iter().map(|&i| i as i64).collect()).collect();
    let (ids_t, mask, types) = padded.tensors(device);
    let mut input = sesame_layers::EncoderInput::new(ids_t);
    input.attention_mask = Some(mask);
    input.token_type_ids = Some(types);
    (input, ids)
}

fn floats(t: Tensor<2>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

fn assert_close(what: &str, ours: &[f32], theirs: &serde_json::Value) {
    let theirs: Vec<f32> = serde_json::from_value(theirs.clone()).unwrap();
    assert_eq!(ours.len(), theirs.len(), "{what}");
    let worst = ours.iter().zip(&theirs).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(worst < 1e-4, "{what}: {worst} off transformers' ({ours:?} against {theirs:?})");
}

/// A classifier of `M` fine-tuned from `start` learns which sentences name an animal; its export
/// gives transformers' logits, and `cargo xtask classify` its labels.
fn classifier_learns_and_transformers_agrees<M: TaskModel<Output = ClassifierLayers>>(dir: &Path, start: &Path, auto: &str) {
    classify::write_csv(&dir.join("train.csv"), 0..160, classify::animal);
    classify::write_csv(&dir.join("eval.csv"), 1000..1048, classify::animal);
    let out = dir.join("classify");
    let done = finetune("classify", start, &dir.join("train.csv"), &dir.join("eval.csv"), &out, &["--steps", "120", "--eval-every", "60"]).unwrap();
    let accuracy = done["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.9, "{auto}: held-out accuracy {accuracy}: {done}");
    let export = out.join("model");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(export.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["id2label"], serde_json::json!({"0": "animal", "1": "thing"}));

    let texts: Vec<(String, Option<String>)> = (1000..1006).map(|i| (classify::sentence(i).0, None)).collect();
    let device = Device::default();
    let model = M::from_pretrained(&export, &device).unwrap().model;
    let (input, ids) = sesame_input(&export, &texts, &device);
    let ours = floats(model.run(input, OutputOptions::logits_only()).logits);
    let classified = xtask(&["classify".into(), "--model".into(), export.display().to_string()].into_iter().chain(texts.iter().map(|t| t.0.clone())).collect::<Vec<_>>()).unwrap();
    let classified: Vec<serde_json::Value> = serde_json::from_str(&classified).unwrap();
    for (i, c) in classified.iter().enumerate() {
        let best = if ours[2 * i] >= ours[2 * i + 1] { "animal" } else { "thing" };
        assert_eq!(c["label"], best, "{auto}: text {i}: {c} against logits {ours:?}");
    }
    let Some(theirs) = transformers_outputs(&export, auto, &texts, &["logits"]) else { return };
    assert_eq!(theirs["input_ids"], serde_json::json!(ids), "{auto}: token ids");
    assert_close(auto, &ours, &theirs["outputs"]["logits"]);
}

/// `cargo xtask distill` of the two-layer classifier `M` fine-tuned in `dir/classify` into a
/// one-layer student, every loss term on: the held-out loss and the hidden-state terms fall,
/// every term is reported and falls or ends small (a student of the teacher's own layers may
/// start close to the teacher's distribution; the attention maps' MSE, a few thousandths,
/// barely moves), it keeps most of the teacher's accuracy, its config has one layer in each of `layer_fields`, and
/// transformers loads it with Sesame's logits.
fn student_learns_and_transformers_agrees<M: TaskModel<Output = ClassifierLayers>>(dir: &Path, auto: &str, layer_fields: &[&str]) {
    let (teacher, out) = (dir.join("classify/model"), dir.join("student"));
    let path = |p: &Path| p.display().to_string();
    let defaults = [("--model", path(&teacher)), ("--train", path(&dir.join("train.csv"))), ("--eval", path(&dir.join("eval.csv"))), ("--out", path(&out))];
    let defaults: Vec<(&str, &str)> = defaults.iter().map(|(f, v)| (*f, v.as_str())).collect();
    let every_term = ["--steps", "40", "--eval-every", "20", "--batch-size", "16", "--lr", "3e-3", "--alpha-cos", "1", "--alpha-hidden", "1", "--alpha-attention", "1"];
    let args: Vec<String> = ["distill".to_string()].into_iter().chain(finetune_common::flags(&defaults, &every_term)).collect();
    let stdout = xtask(&args).unwrap_or_else(|e| panic!("{auto}: {e}"));
    let done: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let log: Vec<serde_json::Value> = std::fs::read_to_string(out.join("run/metrics.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let held_out: Vec<&serde_json::Value> = log.iter().filter(|l| l["split"] == "held_out").collect();
    let (first, last) = (&held_out[0]["values"], &held_out.last().unwrap()["values"]);
    for term in ["loss", "hidden_loss", "cosine_loss"] {
        let (first, last) = (first[term].as_f64().unwrap(), last[term].as_f64().unwrap());
        assert!(last < first, "{auto}: held-out {term} went from {first} to {last}");
    }
    for (term, below) in [("soft_loss", 0.05), ("attention_loss", 0.05), ("hard_loss", 0.5)] {
        let (start, end) = (first[term].as_f64().unwrap_or(f64::NAN), last[term].as_f64().unwrap_or(f64::NAN));
        assert!(end > 0.0 && (end < below || end < start), "{auto}: the held-out {term} went from {start} to {end}");
    }
    let accuracy = done["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.8, "{auto}: the student's accuracy {accuracy}: {done}");
    let student = out.join("model");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(student.join("config.json")).unwrap()).unwrap();
    for field in layer_fields {
        assert_eq!(config[field].as_u64(), Some(1), "{auto}: {field} of {config}");
    }
    let texts: Vec<(String, Option<String>)> = (1000..1006).map(|i| (classify::sentence(i).0, None)).collect();
    let device = Device::default();
    let (input, _) = sesame_input(&student, &texts, &device);
    let ours = floats(M::from_pretrained(&student, &device).unwrap().model.run(input, OutputOptions::logits_only()).logits);
    let Some(theirs) = transformers_outputs(&student, auto, &texts, &["logits"]) else { return };
    assert_close(&format!("{auto} student"), &ours, &theirs["outputs"]["logits"]);
}

/// A span head of `M` fine-tuned from `start` learns where things are; its export gives
/// transformers' start and end logits for a question and a context in the order transformers
/// puts them for this tokenizer, and `cargo xtask answer` finds the place.
fn reader_learns_and_transformers_agrees<M: TaskModel<Output = SpanLogits>>(dir: &Path, start: &Path, auto: &str, steps: &str) {
    qa::write_jsonl(&dir.join("train.jsonl"), 0..300, false);
    qa::write_jsonl(&dir.join("eval.jsonl"), 1000..1040, false);
    let out = dir.join("qa");
    let done = finetune("qa", start, &dir.join("train.jsonl"), &dir.join("eval.jsonl"), &out, &["--steps", steps, "--eval-every", steps, "--seq-len", "48", "--stride", "12"]).unwrap();
    let f1 = done["metrics"]["f1"].as_f64().unwrap();
    assert!(f1 >= 80.0, "{auto}: held-out F1 {f1}: {done}");
    let export = out.join("model");

    let right = (1000..1004)
        .filter(|&i| {
            let example = qa::example(i, false);
            let args = ["answer", "--model", &export.display().to_string(), "--context", example["context"].as_str().unwrap(), example["question"].as_str().unwrap()];
            let answered: Vec<serde_json::Value> = serde_json::from_str(&xtask(&args.map(String::from)).unwrap()).unwrap();
            answered[0]["answer"] == example["answers"]["text"][0]
        })
        .count();
    assert!(right >= 3, "{auto}: `answer` finds {right} of 4 places");

    let example = qa::example(1003, false);
    let (question, context) = (example["question"].as_str().unwrap().to_string(), example["context"].as_str().unwrap().to_string());

    // The order of question and context is the tokenizer's; the logits are transformers'.
    let tokenizer = Tokenizer::from_dir(&export).unwrap();
    let window = tokenizer.encode_question_windows(&question, &context, 512, 128).unwrap().remove(0);
    let pair = if tokenizer.pads_left() { (context.clone(), Some(question.clone())) } else { (question.clone(), Some(context.clone())) };
    let device = Device::default();
    let model = M::from_pretrained(&export, &device).unwrap().model;
    let (input, ids) = sesame_input(&export, std::slice::from_ref(&pair), &device);
    assert_eq!(ids[0], window.encoded.input_ids, "{auto}: the window is the pair in the tokenizer's order");
    let SpanLogits { start: start_logits, end: end_logits } = model.run(input, OutputOptions::default());
    let Some(theirs) = transformers_outputs(&export, auto, &[pair], &["start_logits", "end_logits"]) else { return };
    assert_eq!(theirs["input_ids"][0], serde_json::json!(window.encoded.input_ids), "{auto}: token ids");
    assert_close(auto, &floats(start_logits), &theirs["outputs"]["start_logits"]);
    assert_close(auto, &floats(end_logits), &theirs["outputs"]["end_logits"]);
}

#[test]
fn xlnet_classifies_tags_and_answers_after_fine_tuning_as_transformers_does() {
    let dir = scratch("xlnet");
    let start = xlnet_start(&dir);
    classifier_learns_and_transformers_agrees::<sesame_xlnet::XlnetForSequenceClassification>(&dir, &start, "AutoModelForSequenceClassification");
    student_learns_and_transformers_agrees::<sesame_xlnet::XlnetForSequenceClassification>(&dir, "AutoModelForSequenceClassification", &["n_layer"]);
    reader_learns_and_transformers_agrees::<sesame_xlnet::XlnetForQuestionAnsweringSimple>(&dir, &start, "XLNetForQuestionAnsweringSimple", "150");

    // Tagging: sentences longer than the windows; the tagger learns the entities.
    tag::write_conll(&dir.join("train.conll"), 0..200);
    tag::write_jsonl(&dir.join("eval.jsonl"), 1000..1040);
    let out = dir.join("tag");
    let done = finetune("tag", &start, &dir.join("train.conll"), &dir.join("eval.jsonl"), &out, &["--steps", "80", "--eval-every", "40", "--seq-len", "16", "--stride", "4"]).unwrap();
    let f1 = done["metrics"]["f1"].as_f64().unwrap();
    assert!(f1 >= 0.8, "entity F1 {f1}: {done}");
    let export = out.join("model");
    let (words, tags) = tag::sentence(1001);
    let text = words.join(" ");
    let tagged = xtask(&["tag".into(), "--model".into(), export.display().to_string(), text.clone()]).unwrap();
    let spans: Vec<Vec<serde_json::Value>> = serde_json::from_str(&tagged).unwrap();
    let entities = tags.iter().filter(|t| t.starts_with("B-")).count();
    assert!(spans[0].len().abs_diff(entities) <= 1, "{spans:?} for {words:?} {tags:?}");
    let device = Device::default();
    let model = sesame_xlnet::XlnetForTokenClassification::from_pretrained(&export, &device).unwrap().model;
    let texts = vec![(text, None), (words[..3].join(" "), None)];
    let (input, ids) = sesame_input(&export, &texts, &device);
    let logits = model.run(input, OutputOptions::logits_only());
    let [b, s, n] = logits.dims();
    // The tokens' logits (padding's are read by no one).
    let tokens = |all: Vec<f32>| -> Vec<f32> { all.chunks(n).zip(ids.iter().flatten()).filter(|(_, &id)| id != 5).flat_map(|(l, _)| l.to_vec()).collect() };
    let ours = tokens(floats(logits.reshape([b, s * n])));
    assert_eq!(ours.len(), n * (ids.iter().flatten().filter(|&&id| id != 5).count()));
    if let Some(theirs) = transformers_outputs(&export, "AutoModelForTokenClassification", &texts, &["logits"]) {
        assert_eq!(theirs["input_ids"], serde_json::json!(ids), "token ids, padded on the left");
        let theirs = tokens(serde_json::from_value(theirs["outputs"]["logits"].clone()).unwrap());
        assert_close("XLNetForTokenClassification", &ours, &serde_json::json!(theirs));
    }

    // Feature extraction on XLNet: its base (`transformer`) fixed, the summary and head learn.
    let frozen = finetune("classify", &start, &dir.join("train.csv"), &dir.join("eval.csv"), &dir.join("frozen"), &["--steps", "4", "--freeze", "--feature-layer", "1"]).unwrap();
    let exported = |d: &Path| sesame_xlnet::XlnetForSequenceClassification::from_pretrained(&d.join("model"), &device).unwrap().model;
    let (before, after) = (sesame_xlnet::XlnetModel::from_pretrained(&start, &device).unwrap().model, exported(&dir.join("frozen")));
    assert_eq!(after.transformer.layer.len(), 1, "{frozen}");
    assert!(floats(before.word_embedding.weight.val()) == floats(after.transformer.word_embedding.weight.val()), "--freeze moved XLNet's embeddings");
    // XLNet's heads read one layer: the scalar mix is refused with one line.
    let err = finetune("classify", &start, &dir.join("train.csv"), &dir.join("eval.csv"), &dir.join("mix"), &["--steps", "1", "--feature-layer", "mix"]).unwrap_err();
    assert!(err.trim().lines().count() == 1 && err.contains("--feature-layer mix"), "{err}");
    // FastBERT's exits need an encoder run a layer at a time: XLNet's two streams are refused.
    let err = finetune("classify", &start, &dir.join("train.csv"), &dir.join("eval.csv"), &dir.join("exit"), &["--steps", "1", "--early-exit"]).unwrap_err();
    assert!(err.trim().lines().count() == 1 && err.contains("--early-exit: XLNetForSequenceClassification cannot stop early"), "{err}");
}

#[test]
fn bart_classifies_and_answers_after_fine_tuning_as_transformers_does() {
    let dir = scratch("bart");
    let start = bart_start(&dir);
    classifier_learns_and_transformers_agrees::<sesame_bart::BartForSequenceClassification>(&dir, &start, "AutoModelForSequenceClassification");
    student_learns_and_transformers_agrees::<sesame_bart::BartForSequenceClassification>(&dir, "AutoModelForSequenceClassification", &["encoder_layers", "decoder_layers"]);
    // Killed after step 15 and resumed: the uninterrupted run's model, bit for bit.
    let (train, eval, whole, killed) = (dir.join("train.csv"), dir.join("eval.csv"), dir.join("whole"), dir.join("killed"));
    let steps = ["--steps", "30", "--eval-every", "10"];
    finetune("classify", &start, &train, &eval, &whole, &steps).unwrap();
    finetune("classify", &start, &train, &eval, &killed, &[&steps[..], &["--stop-after", "15"]].concat()).unwrap();
    finetune("classify", &start, &train, &eval, &killed, &[&steps[..], &["--resume"]].concat()).unwrap();
    let weights = |d: &Path| std::fs::read(d.join("model/model.safetensors")).unwrap();
    assert!(weights(&killed) == weights(&whole), "the resumed BART classifier differs");
    reader_learns_and_transformers_agrees::<sesame_bart::BartForQuestionAnswering>(&dir, &start, "AutoModelForQuestionAnswering", "150");
    // No token classifier in transformers' BART: one line says so.
    tag::write_conll(&dir.join("train.conll"), 0..20);
    let err = finetune("tag", &start, &dir.join("train.conll"), &dir.join("train.conll"), &dir.join("tag"), &["--steps", "1"]).unwrap_err();
    assert!(err.trim().lines().count() == 1 && err.contains("--task tag") && err.contains("bart models have no token-classification head"), "{err}");
    let err = finetune("classify", &start, &dir.join("train.csv"), &dir.join("eval.csv"), &dir.join("decay"), &["--steps", "1", "--layer-lr-decay", "0.8"]).unwrap_err();
    assert!(err.contains("--layer-lr-decay"), "{err}");
}
