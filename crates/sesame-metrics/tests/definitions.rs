//! What the reference fixtures cannot show: SQuAD 2.0's unanswerable questions and threshold,
//! strict-mode errors, and refused input.

use sesame_metrics::classification::ConfusionMatrix;
use sesame_metrics::squad::{f1, normalize_answer, squad_scores, Question};
use sesame_metrics::tagging::{entities, entity_scores, Entity, Scheme};
use sesame_metrics::{regression, MetricError};

fn q(answers: &[&str], predicted: &str, no_answer: Option<f64>) -> Question {
    Question { answers: answers.iter().map(|a| a.to_string()).collect(), predicted: predicted.into(), no_answer_probability: no_answer }
}

#[test]
fn normalisation_is_the_scripts() {
    assert_eq!(normalize_answer("The  Cat, (an) apple!"), "cat apple");
    assert_eq!(normalize_answer("theatre a-b"), "theatre ab");
    assert_eq!(normalize_answer("  A "), "");
}

#[test]
fn unanswerable_questions_score_as_squad_2_does() {
    // Both empty: right (v2's rule; v1.1 would give 0). Gold empty, prediction not: wrong.
    assert_eq!(f1("", ""), 1.0);
    assert_eq!(f1("", "cat"), 0.0);
    let questions = [q(&[], "", Some(0.2)), q(&[], "a cat", Some(0.9)), q(&["the cat"], "cat", Some(0.1)), q(&["dog"], "cat", Some(0.7))];
    let s = squad_scores(&questions, 1.0).unwrap();
    assert_eq!((s.exact, s.total), (50.0, 4));
    assert_eq!(s.has_answer, Some((50.0, 50.0, 2)));
    assert_eq!(s.no_answer, Some((50.0, 50.0, 2)));
    // Above the threshold a question counts as answered "no answer".
    let s = squad_scores(&questions, 0.5).unwrap();
    assert_eq!(s.no_answer, Some((100.0, 100.0, 2)));
    assert_eq!(s.has_answer, Some((50.0, 50.0, 2)));
    // A gold answer that normalises to nothing is no answer: an empty prediction matches it.
    assert_eq!(squad_scores(&[q(&["The"], "", None)], 1.0).unwrap().exact, 100.0);
}

#[test]
fn strict_schemes_read_entities_as_seqeval() {
    let tags = vec![vec!["I-PER", "B-PER", "I-PER", "I-LOC", "O", "B-ORG"]];
    let found = entities(&tags, Scheme::Iob2).unwrap();
    let e = |kind: &str, start, end| Entity { sentence: 0, kind: kind.into(), start, end };
    // The stray I-PER and I-LOC open nothing in strict mode; the default mode takes them.
    assert_eq!(found, [e("PER", 1, 3), e("ORG", 5, 6)]);
    let lenient = entities(&tags, Scheme::Default).unwrap();
    assert_eq!(lenient, [e("PER", 0, 1), e("PER", 1, 3), e("LOC", 3, 4), e("ORG", 5, 6)]);
    let iobes = vec![vec!["S-PER", "B-LOC", "I-LOC", "E-LOC", "B-ORG", "O"]];
    assert_eq!(entities(&iobes, Scheme::Iobes).unwrap(), [e("PER", 0, 1), e("LOC", 1, 4)]);
    let bad = entities(&[vec!["E-PER"]], Scheme::Iob2).unwrap_err();
    assert_eq!(bad.to_string(), "tag \"E-PER\" is not allowed by the IOB2 scheme (B-, I-, O)");
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    assert_eq!(ConfusionMatrix::new(2, &[0, 1], &[0]).unwrap_err(), MetricError::LengthMismatch { what: "labels", truth: 2, predicted: 1 });
    assert_eq!(ConfusionMatrix::new(2, &[0, 2], &[0, 1]).unwrap_err(), MetricError::LabelOutOfRange { label: 2, num_labels: 2 });
    assert!(matches!(ConfusionMatrix::new(2, &[], &[]), Err(MetricError::Empty { .. })));
    assert_eq!(regression::pearson(&[1.0, f64::NAN], &[1.0, 2.0]).unwrap_err(), MetricError::NonFinite { what: "truth", index: 1 });
    // A constant side has no correlation: None, not NaN.
    assert_eq!(regression::pearson(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]).unwrap(), None);
    assert!(matches!(entity_scores(&[vec!["O"]], &[vec!["O", "O"]], Scheme::Default), Err(MetricError::LengthMismatch { .. })));
}
