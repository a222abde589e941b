//! RoBERTa and ALBERT models saved by Sesame load in transformers strictly and give Sesame's
//! outputs: the export half of "load a checkpoint, train, export back".

use sesame_albert::{AlbertForMaskedLM, AlbertForPreTraining, AlbertForTokenClassification};
use sesame_layers::OutputOptions;
use sesame_roberta::{RobertaForMaskedLM, RobertaForTokenClassification};
use sesame_tests::parity::transformers_reproduces;

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
