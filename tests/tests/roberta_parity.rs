//! Every RoBERTa head against HuggingFace transformers fixtures, on every compiled backend.
//! The shapes cover the default padding id and another one (position ids are counted past
//! it), one and two token types, a tied and an untied decoder.

use burn::prelude::*;
use sesame_layers::{ClassificationHead, InputError, OutputOptions, PretrainedModel};
use sesame_roberta::*;
use sesame_tests::parity;
use sesame_tests::{devices, Fixture};
use sesame_layers::HfConfig as _;

const SHAPES: [&str; 2] = ["base", "wide"];

#[test]
fn roberta_model_matches_transformers() {
    parity::base_model::<RobertaModel>("roberta", &SHAPES);
}

#[test]
fn roberta_model_over_its_tokens_alone_matches_transformers_at_every_token() {
    parity::base_model_tokens_only::<RobertaModel>("roberta", &SHAPES);
}

#[test]
fn roberta_for_masked_lm_matches_transformers() {
    parity::masked_lm::<RobertaModel>("roberta", &SHAPES);
}

#[test]
fn roberta_for_sequence_classification_matches_transformers_for_each_problem_type() {
    parity::sequence_classification::<RobertaModel, ClassificationHead>("roberta", &SHAPES);
}

#[test]
fn roberta_for_token_classification_matches_transformers() {
    parity::token_classification::<RobertaModel>("roberta", &SHAPES);
}

#[test]
fn roberta_for_question_answering_matches_transformers() {
    parity::question_answering::<RobertaModel>("roberta", &SHAPES);
}

#[test]
fn roberta_for_multiple_choice_matches_transformers() {
    parity::multiple_choice::<RobertaModel, sesame_layers::Classifier>("roberta", &SHAPES);
}

#[test]
fn the_longest_input_leaves_room_for_the_padding_offset() {
    // wide: 30 positions, padding id 4, so positions 5..=29 hold at most 25 tokens.
    let f = Fixture::open("roberta/wide-model");
    let (_, device) = devices().remove(0);
    let loaded = RobertaModel::from_pretrained(&f.dir, &device).unwrap();
    let limits = loaded.config.input_limits();
    assert_eq!((limits.positions, limits.max_len), (30, 25));
    let ids = |n: usize| Tensor::<2, Int>::from_data(TensorData::new(vec![7i64; n], [1, n]), &device);
    assert_eq!(RobertaInput::new(ids(25)).validate(&limits), Ok(()));
    assert_eq!(RobertaInput::new(ids(26)).validate(&limits), Err(InputError::TooLong { len: 26, max: 25 }));
    // The longest input runs: its last position is the table's last row.
    let out = loaded.model.forward(RobertaInput::new(ids(25)), OutputOptions::default());
    assert_eq!(out.last_hidden_state().dims(), [1, 25, 48]);
}

#[test]
fn a_checkpoint_of_another_family_is_a_config_error() {
    // A RoBERTa checkpoint read as BERT would run with the wrong position ids: refuse it.
    let device = devices().remove(0).1;
    let err = sesame_bert::BertModel::from_pretrained(&Fixture::open("roberta/base-model").dir, &device).unwrap_err();
    assert!(err.to_string().contains("`roberta` checkpoint"), "{err}");
    let err = RobertaModel::from_pretrained(&Fixture::open("bert/base-model").dir, &device).unwrap_err();
    assert!(err.to_string().contains("`bert` checkpoint"), "{err}");
}
