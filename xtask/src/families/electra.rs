//! ELECTRA in the command line: its registry entry, and its own head for `forward`
//! (`ElectraForPreTraining`, the discriminator).

use burn::prelude::*;
use sesame_electra::{Electra, ElectraModel};
use sesame_layers::{ClassificationHead, SummaryClassifier};

use sesame_electra::ElectraForPreTraining;
use sesame_layers::{EncoderInput, NamedOutput};
use sesame_layers::HfConfig as _;
use super::FamilyEntry;
use crate::forward::*;

/// `electra`: replaced-token detection.
pub const ENTRY: FamilyEntry = FamilyEntry::masked_lm::<Electra, ElectraModel, ClassificationHead, SummaryClassifier, ElectraHeads>(
    "electra",
    sesame_electra::config::MODEL_TYPES,
);

/// ELECTRA's own: `ElectraForPreTraining` (the discriminator).
pub struct ElectraHeads;

impl ExtraHeads<ElectraModel> for ElectraHeads {
    fn classes() -> Vec<String> {
        vec!["ElectraForPreTraining".into()]
    }

    fn run(head: &str, args: &ForwardArgs, input: &EncoderInput, inputs: &Inputs, device: &Device) -> Option<Result<Vec<NamedOutput>, String>> {
        (head == "ElectraForPreTraining").then(|| {
            let (m, c) = load::<ElectraForPreTraining>(args, device)?;
            input.validate(&c.input_limits()).map_err(bad_input(head))?;
            // 1 = replaced, 0 = original (a binary cross-entropy: nothing is ignored).
            let labels = inputs.labels::<2>("labels", input.input_ids.dims(), 2, false, device)?;
            let out = m.forward(input.clone(), labels, options(args));
            Ok(sesame_layers::HeadOutput { logits: out.logits, loss: out.loss, encoder: out.encoder }.named())
        })
    }
}

