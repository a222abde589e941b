//! RoBERTa in the command line: its registry entry.

use sesame_bert::BertLikeFamily;
use sesame_layers::{ClassificationHead, Classifier};
use sesame_roberta::{Roberta, RobertaModel};

use super::FamilyEntry;

/// `roberta`: dynamic masked LM on packed full sentences.
pub const ENTRY: FamilyEntry = FamilyEntry::masked_lm::<Roberta, RobertaModel, ClassificationHead, Classifier, ()>(
    "roberta",
    Roberta::MODEL_TYPES,
);
