//! The retrieval and pair metrics against sentence-transformers' evaluators on fixed scores
//! (`fixtures/embedding/retrieval.json`, written by `scripts/make_fixtures.py --only
//! embedding`: `InformationRetrievalEvaluator.compute_metrics`, `BinaryClassificationEvaluator`'s
//! threshold searches, scikit-learn's average precision and Matthews' correlation).

use std::collections::HashSet;

use sesame_metrics::retrieval::{pair_scores, retrieval_scores, Cutoffs, Ranking};
use sesame_metrics::MetricError;
use serde_json::Value;

fn reference() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/embedding/retrieval.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixtures/embedding/retrieval.json")).expect("JSON")
}

fn ks(value: &Value) -> Vec<usize> {
    value.as_array().unwrap().iter().map(|k| k.as_u64().unwrap() as usize).collect()
}

#[test]
fn retrieval_metrics_equal_the_information_retrieval_evaluator_s() {
    let reference = reference();
    let queries = reference["queries"].as_array().unwrap();
    let rankings: Vec<Ranking> = queries
        .iter()
        .map(|q| q["ranking"].as_array().unwrap().iter().map(|h| (h["corpus_id"].as_str().unwrap().to_string(), h["score"].as_f64().unwrap())).collect())
        .collect();
    let relevant: Vec<HashSet<String>> = queries.iter().map(|q| q["relevant"].as_array().unwrap().iter().map(|d| d.as_str().unwrap().to_string()).collect()).collect();
    let c = &reference["cutoffs"];
    let cutoffs = Cutoffs { accuracy: ks(&c["accuracy"]), precision_recall: ks(&c["precision_recall"]), mrr: ks(&c["mrr"]), ndcg: ks(&c["ndcg"]), map: ks(&c["map"]) };
    let ours = retrieval_scores(&rankings, &relevant, &cutoffs).unwrap();
    let theirs = &reference["metrics"];
    for (name, ours) in [("accuracy@k", &ours.accuracy), ("precision@k", &ours.precision), ("recall@k", &ours.recall), ("mrr@k", &ours.mrr), ("ndcg@k", &ours.ndcg), ("map@k", &ours.map)] {
        let theirs = theirs[name].as_object().unwrap();
        assert_eq!(ours.len(), theirs.len(), "{name}: cut-offs");
        for (k, value) in ours {
            let expected = theirs[&k.to_string()].as_f64().unwrap();
            assert!((value - expected).abs() < 1e-12, "{name} {k}: {value} against {expected}");
        }
    }
}

#[test]
fn pair_scores_equal_the_binary_classification_evaluator_s() {
    for (i, case) in reference()["pairs"].as_array().unwrap().iter().enumerate() {
        let similarities: Vec<f64> = case["similarities"].as_array().unwrap().iter().map(|s| s.as_f64().unwrap()).collect();
        let labels: Vec<bool> = case["labels"].as_array().unwrap().iter().map(|l| l.as_bool().unwrap()).collect();
        let ours = pair_scores(&similarities, &labels).unwrap();
        let theirs = |name: &str| case[name].as_f64().unwrap();
        for (name, value, tolerance) in [
            ("accuracy", ours.accuracy, 1e-12),
            // sentence-transformers' first threshold is the next float32 above the top score.
            ("accuracy_threshold", ours.accuracy_threshold, 1e-6),
            ("f1", ours.f1, 1e-12),
            ("f1_threshold", ours.f1_threshold, 1e-6),
            ("precision", ours.precision, 1e-12),
            ("recall", ours.recall, 1e-12),
            ("ap", ours.ap, 1e-12),
            ("mcc", ours.mcc, 1e-12),
        ] {
            assert!((value - theirs(name)).abs() <= tolerance, "case {i} {name}: {value} against {}", theirs(name));
        }
    }
}

#[test]
fn retrieval_and_pair_metrics_refuse_what_they_cannot_score() {
    let ranking: Ranking = vec![("a".into(), 0.5), ("b".into(), f64::NAN)];
    let relevant = vec![HashSet::from(["a".to_string()])];
    assert_eq!(retrieval_scores(&[ranking], &relevant, &Cutoffs::default()), Err(MetricError::NonFinite { what: "document scores", index: 1 }));
    assert_eq!(retrieval_scores(&[vec![("a".into(), 0.5)]], &[HashSet::new()], &Cutoffs::default()), Err(MetricError::Empty { what: "relevant documents of a query" }));
    assert_eq!(retrieval_scores(&[], &[], &Cutoffs::default()), Err(MetricError::Empty { what: "queries" }));
    assert_eq!(pair_scores(&[0.1, 0.2], &[true]), Err(MetricError::LengthMismatch { what: "pairs", truth: 1, predicted: 2 }));
    assert_eq!(pair_scores(&[], &[]), Err(MetricError::Empty { what: "pairs" }));
}
