//! ALBERT in the command line: its registry entry.

use sesame_albert::{Albert, AlbertModel};
use sesame_layers::Classifier;

use super::FamilyEntry;
use crate::forward::PreTraining;

/// `albert`: n-gram masked LM + sentence-order prediction.
pub const ENTRY: FamilyEntry = FamilyEntry::masked_lm::<Albert, AlbertModel, Classifier, Classifier, PreTraining>(
    "albert",
    Albert::MODEL_TYPES,
);
