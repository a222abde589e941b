//! `cargo xtask finetune --task qa` and `cargo xtask answer` end to end, through the real binary,
//! on generated questions whose contexts are longer than a window (the small BERT fixture, 24
//! tokens a window): the model learns, a killed run resumes to the same model, SQuAD 2.0's
//! unanswerable questions are learned, transformers loads the export and `run_qa.py`'s
//! post-processing (ported below) on its logits gives `answer`'s answers; bad files get one line.

use std::path::Path;
use std::process::Command;

use crate::finetune_common;
use finetune_common::{model_dir, xtask};
use finetune_common::qa::{example, write_jsonl};

fn scratch(name: &str) -> sesame_tests::Scratch {
    finetune_common::scratch("qa", name)
}

fn finetune(args: &[String]) -> Result<serde_json::Value, String> {
    finetune_common::finetune("qa", args)
}

/// Questions `rows` in SQuAD's own JSON layout.
fn write_squad(path: &Path, rows: std::ops::Range<usize>, unanswerable: bool) {
    let paragraphs: Vec<serde_json::Value> = rows
        .map(|i| {
            let e = example(i, unanswerable);
            let answers: Vec<serde_json::Value> = e["answers"]["text"].as_array().unwrap().iter().zip(e["answers"]["answer_start"].as_array().unwrap()).map(|(t, s)| serde_json::json!({ "text": t, "answer_start": s })).collect();
            let impossible = answers.is_empty();
            serde_json::json!({ "context": e["context"], "qas": [{ "id": e["id"], "question": e["question"], "answers": answers, "is_impossible": impossible }] })
        })
        .collect();
    std::fs::write(path, serde_json::json!({ "version": "v2.0", "data": [{ "title": "generated", "paragraphs": paragraphs }] }).to_string()).unwrap();
}

fn args(dir: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let (model, train, eval, out) = (model_dir().display().to_string(), dir.join("train.jsonl").display().to_string(), dir.join("eval.json").display().to_string(), out.display().to_string());
    let defaults = [
        ("--model", model.as_str()), ("--train", &train), ("--eval", &eval), ("--batch-size", "16"), ("--lr", "3e-3"), ("--seq-len", "24"),
        ("--stride", "6"), ("--steps", "150"), ("--eval-every", "50"), ("--out", &out),
    ];
    finetune_common::flags(&defaults, extra)
}

#[test]
fn a_reader_learns_over_windows_resumes_exactly_and_answers_as_run_qa_on_transformers_logits() {
    let dir = scratch("learn");
    write_jsonl(&dir.join("train.jsonl"), 0..300, false);
    write_squad(&dir.join("eval.json"), 1000..1040, false);
    let whole = dir.join("whole");
    let done = finetune(&args(&dir, &whole, &[])).unwrap();
    assert_eq!(done["metric"], "f1", "{done}");
    let f1 = done["metrics"]["f1"].as_f64().unwrap();
    assert!(f1 >= 90.0, "held-out SQuAD F1 {f1}: {done}");

    let killed = dir.join("killed");
    finetune(&args(&dir, &killed, &["--stop-after", "60"])).unwrap();
    let resumed = finetune(&args(&dir, &killed, &["--resume"])).unwrap();
    assert_eq!(resumed["metrics"], done["metrics"]);
    let weights = |d: &Path| std::fs::read(d.join("model/model.safetensors")).unwrap();
    assert!(weights(&whole) == weights(&killed), "the resumed run's model differs");

    // `cargo xtask answer` on a context of several windows: the evaluation's answers.
    let export = whole.join("model");
    let questions: Vec<serde_json::Value> = (1000..1010).map(|i| example(i, false)).collect();
    let results: Vec<(String, String, String)> = questions
        .iter()
        .map(|q| {
            let stdout = xtask(&["answer", "--model", &export.display().to_string(), "--context", q["context"].as_str().unwrap(), "--stride", "6", q["question"].as_str().unwrap()].map(String::from)).unwrap();
            let a: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
            let (start, end) = (a[0]["start"].as_u64().unwrap() as usize, a[0]["end"].as_u64().unwrap() as usize);
            let chars: String = q["context"].as_str().unwrap().chars().skip(start).take(end - start).collect();
            assert_eq!(chars, a[0]["answer"].as_str().unwrap(), "offsets of {a:?}");
            (a[0]["answer"].as_str().unwrap().to_string(), q["question"].as_str().unwrap().to_string(), q["context"].as_str().unwrap().to_string())
        })
        .collect();
    let right = results.iter().zip(&questions).filter(|(r, q)| r.0 == q["answers"]["text"][0]).count();
    assert!(right >= 9, "{results:?}");

    let Some(python) = sesame_tests::python() else {
        return;
    };
    // transformers' model on run_qa.py's features, and utils_qa.postprocess_qa_predictions'
    // choice (n best 20, at most 30 tokens), ported.
    let script = r#"
import json, sys, torch, transformers
d, cases = sys.argv[1], json.loads(sys.argv[2])
tok = transformers.AutoTokenizer.from_pretrained(d)
model = transformers.AutoModelForQuestionAnswering.from_pretrained(d).eval()
answers = []
for question, context in cases:
    f = tok(question, context, truncation="only_second", max_length=24, stride=6, return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length")
    with torch.no_grad():
        out = model(input_ids=torch.tensor(f["input_ids"]), attention_mask=torch.tensor(f["attention_mask"]), token_type_ids=torch.tensor(f["token_type_ids"]))
    best = None
    for k in range(len(f["input_ids"])):
        offsets = [o if s == 1 else None for o, s in zip(f["offset_mapping"][k], f.sequence_ids(k))]
        start, end = out.start_logits[k].numpy(), out.end_logits[k].numpy()
        for i in start.argsort()[-1:-21:-1]:
            for j in end.argsort()[-1:-21:-1]:
                if offsets[i] is None or offsets[j] is None or j < i or j - i + 1 > 30:
                    continue
                score = start[i] + end[j]
                if best is None or score > best[0]:
                    best = (score, context[offsets[i][0]:offsets[j][1]])
    answers.append(best[1])
print(json.dumps(answers))
"#;
    let cases: Vec<(&str, &str)> = results.iter().map(|r| (r.1.as_str(), r.2.as_str())).collect();
    let out = Command::new(python).args(["-c", script, &export.display().to_string(), &serde_json::to_string(&cases).unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let theirs: Vec<String> = serde_json::from_slice(out.stdout.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap()).unwrap();
    let ours: Vec<&str> = results.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(ours, theirs, "answers against run_qa.py's on transformers' logits");
}

#[test]
fn unanswerable_questions_are_learned_as_squad_2() {
    let dir = scratch("v2");
    write_squad(&dir.join("train.json"), 0..300, true);
    write_jsonl(&dir.join("eval.jsonl"), 1000..1040, true);
    let out = dir.join("run");
    let train = dir.join("train.json").display().to_string();
    let eval = dir.join("eval.jsonl").display().to_string();
    let done = finetune(&args(&dir, &out, &["--train", &train, "--eval", &eval, "--steps", "400", "--eval-every", "100"])).unwrap();
    let f1 = done["metrics"]["f1"].as_f64().unwrap();
    assert!(f1 >= 85.0, "held-out SQuAD 2.0 F1 {f1}: {done}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("eval_results.json")).unwrap()).unwrap();
    let answers = report["per_class"]["answers"].as_object().unwrap();
    let empty_right = (1000..1040).filter(|i| i % 4 == 0).filter(|i| answers[&format!("q{i}")]["answer"] == "").count();
    assert!(empty_right >= 7, "{empty_right} of 10 unanswerable questions left unanswered: {answers:?}");
}

#[test]
fn bad_question_files_get_one_line_naming_them() {
    let dir = scratch("bad");
    write_jsonl(&dir.join("train.jsonl"), 0..10, false);
    let out = dir.join("run");
    let eval = dir.join("eval.json");
    let error = |extra: &[&str]| {
        let e = finetune(&args(&dir, &out, extra)).unwrap_err();
        e.trim().lines().last().unwrap_or("").to_string()
    };
    let mut wrong = example(3, false);
    wrong["answers"]["answer_start"] = serde_json::json!([2]);
    std::fs::write(&eval, format!("{}\n{wrong}\n", example(2, false))).unwrap();
    let context_at_2: String = wrong["context"].as_str().unwrap().chars().skip(2).take(wrong["answers"]["text"][0].as_str().unwrap().chars().count()).collect();
    assert_eq!(error(&[]), format!("error: {}:2: answer {:?} is not at answer_start 2 (the context has {context_at_2:?} there)", eval.display(), wrong["answers"]["text"][0].as_str().unwrap()));
    write_squad(&eval, 0..2, false);
    let mut squad: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&eval).unwrap()).unwrap();
    squad["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] = serde_json::json!(0);
    std::fs::write(&eval, squad.to_string()).unwrap();
    let e = error(&[]);
    assert!(e.starts_with(&format!("error: {}: question \"q1\": answer ", eval.display())) && e.contains("is not at answer_start 0"), "{e}");
    std::fs::write(&eval, "{\"question\": \"where?\", \"answers\": {\"text\": [], \"answer_start\": []}}\n").unwrap();
    assert_eq!(error(&[]), format!("error: {}:1: no field \"context\"", eval.display()));
    write_squad(&eval, 0..2, false);
    assert_eq!(error(&["--stride", "20"]), format!("error: {}: tokenizer {}: a window of 24 tokens holds 16 besides its 3 special tokens and the question's 5, not more than the stride of 20 (--seq-len 24, --stride 20)", dir.join("train.jsonl").display(), model_dir().join("tokenizer.json").display()));
}
