//! BERT in the command line: its registry entry, and its own head for `forward`
//! (`BertForNextSentencePrediction`).

use burn::prelude::*;
use sesame_bert::{Bert, BertLikeFamily, BertModel};
use sesame_layers::{Classifier};

use sesame_bert::BertForNextSentencePrediction;
use sesame_layers::{EncoderInput, NamedOutput};
use sesame_layers::HfConfig as _;
use super::FamilyEntry;
use crate::forward::*;

/// `bert`: masked LM + next-sentence prediction.
pub const ENTRY: FamilyEntry = FamilyEntry::masked_lm::<Bert, BertModel, Classifier, Classifier, (PreTraining, BertHeads)>(
    "bert",
    Bert::MODEL_TYPES,
);

/// BERT's own: `BertForNextSentencePrediction`.
pub struct BertHeads;

impl ExtraHeads<BertModel> for BertHeads {
    fn classes() -> Vec<String> {
        vec!["BertForNextSentencePrediction".into()]
    }

    fn run(head: &str, args: &ForwardArgs, input: &EncoderInput, inputs: &Inputs, device: &Device) -> Option<Result<Vec<NamedOutput>, String>> {
        (head == "BertForNextSentencePrediction").then(|| {
            let (m, c) = load::<BertForNextSentencePrediction>(args, device)?;
            input.validate(&c.input_limits()).map_err(bad_input(head))?;
            let labels = inputs.labels::<1>("labels", [input.input_ids.dims()[0]], 2, true, device)?;
            Ok(m.forward(input.clone(), labels, options(args)).named())
        })
    }
}

