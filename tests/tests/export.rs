//! RoBERTa and ALBERT models saved by Sesame load in transformers strictly and give Sesame's
//! outputs: the export half of "load a checkpoint, train, export back".

use sesame_albert::{AlbertConfig, AlbertForMaskedLM, AlbertForPreTraining, AlbertForTokenClassification, ParameterSharing};
use sesame_layers::{HfConfig, OutputOptions, PretrainedModel};
use sesame_roberta::{RobertaForMaskedLM, RobertaForTokenClassification};
use sesame_tests::parity::{transformers_reproduces, transformers_reproduces_model};
use sesame_tests::{devices, Fixture};

#[test]
fn transformers_loads_roberta_models_saved_by_sesame() {
    // wide: padding id 4, untied decoder.
    for fixture in ["roberta/base-masked-lm", "roberta/wide-masked-lm"] {
        transformers_reproduces::<RobertaForMaskedLM>(fixture, "logits", |m, input| m.forward(input, None, OutputOptions::default()).logits);
    }
    transformers_reproduces::<RobertaForTokenClassification>("roberta/wide-token-classification", "logits", |m, input| {
        m.forward(input, None, OutputOptions::default()).logits
    });
}

#[test]
fn transformers_loads_albert_models_saved_by_sesame() {
    // base: one shared layer; grouped: two groups of two layers, untied decoder.
    for fixture in ["albert/base-pretraining", "albert/grouped-pretraining"] {
        transformers_reproduces::<AlbertForPreTraining>(fixture, "prediction_logits", |m, input| {
            m.forward(input, None, OutputOptions::default()).prediction_logits
        });
    }
    transformers_reproduces::<AlbertForMaskedLM>("albert/square-masked-lm", "logits", |m, input| m.forward(input, None, OutputOptions::default()).logits);
    transformers_reproduces::<AlbertForTokenClassification>("albert/grouped-token-classification", "logits", |m, input| {
        m.forward(input, None, OutputOptions::default()).logits
    });
}

#[test]
fn transformers_loads_alberts_sharing_only_attention_or_only_feed_forward() {
    // Saved per depth (a group per depth), transformers' ALBERT computes what Sesame's
    // partially shared one does. Weights drawn wide (std 0.2) so that a miswired depth shows.
    let device = devices()[0].1.clone();
    for fixture in ["albert/base-pretraining", "albert/grouped-pretraining"] {
        for sharing in [ParameterSharing::Attention, ParameterSharing::FeedForward] {
            let mut config = AlbertConfig::from_dir(&Fixture::open(fixture).dir).unwrap();
            (config.parameter_sharing, config.initializer_range) = (sharing, 0.2);
            let model = AlbertForPreTraining::new_hf(&config, &device);
            transformers_reproduces_model(&model, &config, fixture, "prediction_logits", |m, input| {
                m.forward(input, None, OutputOptions::default()).prediction_logits
            });
        }
    }
}
