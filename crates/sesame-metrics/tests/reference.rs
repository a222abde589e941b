//! Every metric against its reference implementation on fixed predictions
//! (`fixtures/metrics/reference.json`, written by `scripts/make_fixtures.py --only metrics` with
//! scikit-learn, SciPy, seqeval and torchmetrics' SQuAD).

use sesame_metrics::classification::{ConfusionMatrix, MultiLabelCounts};
use sesame_metrics::squad::{squad_scores, Question};
use sesame_metrics::tagging::{entity_scores, Scheme};
use sesame_metrics::{regression, Average, Scores};
use serde_json::Value;

fn reference() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/metrics/reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixtures/metrics/reference.json")).expect("JSON")
}

fn close(what: &str, ours: f64, theirs: &Value, tolerance: f64) {
    let theirs = theirs.as_f64().unwrap_or_else(|| panic!("{what}: no reference number"));
    assert!((ours - theirs).abs() <= tolerance, "{what}: {ours} against {theirs}");
}

fn scores(what: &str, ours: Scores, theirs: &Value) {
    close(&format!("{what} precision"), ours.precision, &theirs["precision"], 1e-12);
    close(&format!("{what} recall"), ours.recall, &theirs["recall"], 1e-12);
    close(&format!("{what} f1"), ours.f1, &theirs["f1"], 1e-12);
    if let Some(support) = theirs["support"].as_u64() {
        assert_eq!(ours.support, support, "{what} support");
    }
}

/// Case `i`'s per-label scores `ours` against `theirs`, and its micro, macro and weighted
/// averages.
fn per_label_and_averages(i: usize, case: &Value, theirs: &Value, ours: Vec<Scores>, averaged: impl Fn(Average) -> Scores) {
    for (l, (ours, theirs)) in ours.into_iter().zip(theirs.as_array().unwrap()).enumerate() {
        scores(&format!("case {i} label {l}"), ours, theirs);
    }
    for (avg, name) in [(Average::Micro, "micro"), (Average::Macro, "macro"), (Average::Weighted, "weighted")] {
        scores(&format!("case {i} {name}"), averaged(avg), &case[name]);
    }
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect()
}

#[test]
fn classification_equals_scikit_learn() {
    for (i, case) in reference()["classification"].as_array().unwrap().iter().enumerate() {
        let n = case["num_labels"].as_u64().unwrap() as usize;
        let m = ConfusionMatrix::new(n, &usizes(&case["truth"]), &usizes(&case["predicted"])).unwrap();
        close(&format!("case {i} accuracy"), m.accuracy(), &case["accuracy"], 1e-12);
        close(&format!("case {i} mcc"), m.matthews_corrcoef(), &case["mcc"], 1e-12);
        let confusion: Vec<Vec<u64>> = serde_json::from_value(case["confusion"].clone()).unwrap();
        assert_eq!(m.rows(), confusion, "case {i} confusion matrix");
        per_label_and_averages(i, case, &case["per_class"], m.per_class(), |avg| m.scores(avg));
    }
}

#[test]
fn multilabel_equals_scikit_learn() {
    for (i, case) in reference()["multilabel"].as_array().unwrap().iter().enumerate() {
        let n = case["num_labels"].as_u64().unwrap() as usize;
        let rows = |v: &Value| -> Vec<Vec<bool>> { serde_json::from_value(v.clone()).unwrap() };
        let m = MultiLabelCounts::new(n, &rows(&case["truth"]), &rows(&case["predicted"])).unwrap();
        close(&format!("case {i} exact match"), m.exact_match(), &case["exact_match"], 1e-12);
        close(&format!("case {i} hamming"), m.hamming_loss(), &case["hamming_loss"], 1e-12);
        per_label_and_averages(i, case, &case["per_label"], m.per_label(), |avg| m.scores(avg));
    }
}

#[test]
fn regression_equals_scipy_and_scikit_learn() {
    for (i, case) in reference()["regression"].as_array().unwrap().iter().enumerate() {
        let floats = |v: &Value| -> Vec<f64> { serde_json::from_value(v.clone()).unwrap() };
        let (t, p) = (floats(&case["truth"]), floats(&case["predicted"]));
        close(&format!("case {i} pearson"), regression::pearson(&t, &p).unwrap().unwrap(), &case["pearson"], 1e-12);
        close(&format!("case {i} spearman"), regression::spearman(&t, &p).unwrap().unwrap(), &case["spearman"], 1e-12);
        close(&format!("case {i} mse"), regression::mean_squared_error(&t, &p).unwrap(), &case["mse"], 1e-12);
        close(&format!("case {i} mae"), regression::mean_absolute_error(&t, &p).unwrap(), &case["mae"], 1e-12);
    }
}

#[test]
fn entity_scores_equal_seqeval_in_default_and_strict_modes() {
    for (i, case) in reference()["tagging"].as_array().unwrap().iter().enumerate() {
        let scheme = match case["scheme"].as_str().unwrap() {
            "default" => Scheme::Default,
            "IOB2" => Scheme::Iob2,
            "IOBES" => Scheme::Iobes,
            other => panic!("scheme {other}"),
        };
        let seqs = |v: &Value| -> Vec<Vec<String>> { serde_json::from_value(v.clone()).unwrap() };
        let ours = entity_scores(&seqs(&case["truth"]), &seqs(&case["predicted"]), scheme).unwrap();
        close(&format!("case {i} accuracy"), ours.accuracy, &case["accuracy"], 1e-12);
        let per_type = case["per_type"].as_object().unwrap();
        assert_eq!(ours.per_type.keys().collect::<Vec<_>>(), per_type.keys().collect::<Vec<_>>(), "case {i} types");
        for (kind, theirs) in per_type {
            scores(&format!("case {i} {kind}"), ours.per_type[kind], theirs);
        }
        scores(&format!("case {i} micro"), ours.micro, &case["micro"]);
        scores(&format!("case {i} macro"), ours.macro_avg, &case["macro"]);
        scores(&format!("case {i} weighted"), ours.weighted, &case["weighted"]);
    }
}

#[test]
fn squad_scores_equal_the_official_scoring() {
    let squad = &reference()["squad"];
    let mut questions = Vec::new();
    for (i, q) in squad["questions"].as_array().unwrap().iter().enumerate() {
        let question = Question { answers: serde_json::from_value(q["answers"].clone()).unwrap(), predicted: q["predicted"].as_str().unwrap().into(), no_answer_probability: None };
        // torchmetrics computes in float32: its per-question percentages carry ~1e-6.
        let one = squad_scores(std::slice::from_ref(&question), 1.0).unwrap();
        close(&format!("question {i} exact"), one.exact, &q["exact"], 1e-4);
        close(&format!("question {i} f1"), one.f1, &q["f1"], 1e-4);
        questions.push(question);
    }
    let all = squad_scores(&questions, 1.0).unwrap();
    close("exact", all.exact, &squad["exact"], 1e-4);
    close("f1", all.f1, &squad["f1"], 1e-4);
}
