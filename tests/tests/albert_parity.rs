//! Every ALBERT head against HuggingFace transformers fixtures, on every compiled backend.
//! The shapes cover one shared layer over three depths with E < H, two groups of two layers
//! over three depths (groups 0, 0, 1) with an untied decoder, and E == H with a group per layer.

use sesame_albert::*;
use sesame_layers::Classifier;
use sesame_tests::parity;

const SHAPES: [&str; 3] = ["base", "grouped", "square"];

#[test]
fn albert_model_matches_transformers() {
    parity::base_model::<AlbertModel>("albert", &SHAPES);
}

#[test]
fn albert_model_over_its_tokens_alone_matches_transformers_at_every_token() {
    parity::base_model_tokens_only::<AlbertModel>("albert", &SHAPES);
}

#[test]
fn albert_for_pretraining_matches_transformers() {
    parity::pretraining::<AlbertModel>("albert", &SHAPES);
}

#[test]
fn albert_for_masked_lm_matches_transformers() {
    parity::masked_lm::<AlbertModel>("albert", &SHAPES);
}

#[test]
fn albert_for_sequence_classification_matches_transformers_for_each_problem_type() {
    parity::sequence_classification::<AlbertModel, Classifier>("albert", &SHAPES);
}

#[test]
fn albert_for_token_classification_matches_transformers() {
    parity::token_classification::<AlbertModel>("albert", &SHAPES);
}

#[test]
fn albert_for_question_answering_matches_transformers() {
    parity::question_answering::<AlbertModel>("albert", &SHAPES);
}

#[test]
fn albert_for_multiple_choice_matches_transformers() {
    parity::multiple_choice::<AlbertModel, sesame_layers::Classifier>("albert", &SHAPES);
}
