//! BERT's configuration (HF `BertConfig`), and what sets a BERT-shaped variant apart.
//!
//! RoBERTa (and, later, other families that *are* BERT with other defaults and names) reuse
//! BERT's configuration and model through a zero-sized marker implementing [`BertLikeFamily`].

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::path::Path;

use burn::prelude::{Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use sesame_layers::config::{family_json, read_family_config, with_defaults};
use sesame_layers::{Activation, ConfigError, EncoderHyperParams, HfConfig, InputLimits};

/// What sets one BERT-shaped family apart: config defaults, `model_type`, HF names of the
/// heads, and how position ids are made.
pub trait BertLikeFamily: Clone + Copy + Debug + Default + Send + Sync + 'static {
    /// HF `model_type` values this family reads; the first is written to new configs.
    const MODEL_TYPES: &'static [&'static str];
    /// HF class-name stem (`Roberta`).
    const CLASS: &'static str;
    /// HF base-model prefix inside head models (`roberta`).
    const PREFIX: &'static str;
    /// RoBERTa's position ids: counted from `pad_token_id + 1` over non-padding tokens.
    const POSITIONS_AFTER_PADDING: bool = false;
    /// The regex of the tied MLM decoder's HF names (skipped when loading a tied model).
    const TIED_DECODER: &'static str;
    /// Whether the family pre-trains with next-sentence prediction beside masked LM (BERT,
    /// UniLM; not RoBERTa, which dropped it): its `…ForPreTraining` has the NSP head.
    const NEXT_SENTENCE: bool = false;

    /// `config.json` values that differ from BERT's defaults, as a JSON object.
    fn defaults() -> serde_json::Value {
        serde_json::json!({})
    }

    /// HF names of the heads, as anchored key-table rows onto `lm_head`, `sentence_head`, `head`.
    fn head_rows() -> Vec<(&'static str, &'static str)>;

    /// The HF class of the family's left-to-right language model (`RobertaForCausalLM`).
    fn causal_lm_architecture() -> String {
        format!("{}ForCausalLM", Self::CLASS)
    }

    /// The activation inside the MLM head (RoBERTa's is always GELU).
    fn lm_head_activation(config: &BertLikeConfig<Self>) -> Activation {
        config.hidden_act
    }

    /// The fewest token types the family's model has (UniLM: 6). A checkpoint with fewer is
    /// read with its own table, then widened ([`Self::widened_type_row`]).
    const MIN_TYPE_VOCAB_SIZE: usize = 0;

    /// The stored row that new row `row` of a widened token-type table starts as, for a
    /// checkpoint holding `stored` rows.
    fn widened_type_row(_row: usize, _stored: usize) -> usize {
        0
    }

    /// Checks of the family's own config fields (those kept in `extra`).
    fn validate(_config: &BertLikeConfig<Self>) -> Result<(), ConfigError> {
        Ok(())
    }
}

/// The BERT family marker: HF names and defaults.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bert;

impl BertLikeFamily for Bert {
    const MODEL_TYPES: &'static [&'static str] = &["bert"];
    const CLASS: &'static str = "Bert";
    const PREFIX: &'static str = "bert";
    const NEXT_SENTENCE: bool = true;
    const TIED_DECODER: &'static str = crate::checkpoint::BERT_TIED_DECODER;

    fn causal_lm_architecture() -> String {
        "BertLMHeadModel".into()
    }

    fn head_rows() -> Vec<(&'static str, &'static str)> {
        crate::checkpoint::BERT_HEAD_ROWS.to_vec()
    }
}

/// Hyper-parameters of a BERT-shaped model with HF's names: the shared encoder fields,
/// defaults BERT's, overridden by the family's [`BertLikeFamily::defaults`]. Dereferences to
/// the fields (`config.hidden_size`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct BertLikeConfig<F: BertLikeFamily> {
    /// Every field of `config.json`.
    #[serde(flatten)]
    pub hparams: EncoderHyperParams,
    /// The token types the checkpoint read holds, when the family widened the table
    /// ([`BertLikeFamily::MIN_TYPE_VOCAB_SIZE`]); not written back.
    #[serde(skip)]
    pub stored_type_vocab_size: Option<usize>,
    #[serde(skip)]
    family: PhantomData<F>,
}

impl<F: BertLikeFamily> Deref for BertLikeConfig<F> {
    type Target = EncoderHyperParams;
    fn deref(&self) -> &EncoderHyperParams {
        &self.hparams
    }
}

impl<F: BertLikeFamily> DerefMut for BertLikeConfig<F> {
    fn deref_mut(&mut self) -> &mut EncoderHyperParams {
        &mut self.hparams
    }
}

impl<F: BertLikeFamily> Default for BertLikeConfig<F> {
    /// The family's base model (bert-base-uncased, roberta-base).
    fn default() -> Self {
        serde_json::from_value(F::defaults()).expect("family defaults deserialise")
    }
}

impl<F: BertLikeFamily> BertLikeConfig<F> {
    /// Parse a `config.json` value, filling the family's defaults.
    pub fn from_value(value: serde_json::Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(with_defaults(value, F::defaults()))
    }

    /// A size preset (see [`EncoderHyperParams::set_preset`]) for inputs of up to `max_len`
    /// tokens and the tokenizer's padding id.
    pub fn preset(name: &str, vocab_size: usize, max_len: usize, pad_token_id: usize) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        config.hparams.pad_token_id = Some(pad_token_id);
        let positions = max_len + config.position_offset();
        config.hparams.set_preset(name, vocab_size, positions, pad_token_id)?;
        config.validate()?;
        Ok(config)
    }

    /// How many position rows precede the first real position (RoBERTa: `pad_token_id + 1`).
    pub fn position_offset(&self) -> usize {
        if F::POSITIONS_AFTER_PADDING {
            self.pad_token_id.unwrap_or(0) + 1
        } else {
            0
        }
    }

    /// Set the number of labels (names `LABEL_i`).
    pub fn with_num_labels(mut self, n: usize) -> Self {
        self.hparams.set_num_labels(n);
        self
    }

    /// Check that a model can be built from this config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.hparams.validate(self.position_offset())?;
        F::validate(self)
    }
}

impl<F: BertLikeFamily> HfConfig for BertLikeConfig<F> {
    fn input_limits(&self) -> InputLimits {
        InputLimits::learned_positions(self.vocab_size, self.type_vocab_size, self.max_position_embeddings, self.position_offset())
    }

    fn labels(&self) -> &sesame_layers::hparams::LabelConfig {
        &self.hparams.labels
    }

    fn labels_mut(&mut self) -> &mut sesame_layers::hparams::LabelConfig {
        &mut self.hparams.labels
    }

    fn num_hidden_layers_mut(&mut self) -> Option<&mut usize> {
        Some(&mut self.hparams.num_hidden_layers)
    }

    fn num_layers(&self) -> usize {
        self.hparams.num_hidden_layers
    }

    fn pruned_heads(&self) -> std::collections::BTreeMap<usize, std::collections::BTreeSet<usize>> {
        self.hparams.pruned()
    }

    fn from_dir(dir: &Path) -> Result<Self, ConfigError> {
        let mut config: Self = read_family_config(dir, F::MODEL_TYPES, F::defaults())?;
        config.validate()?;
        if config.type_vocab_size < F::MIN_TYPE_VOCAB_SIZE {
            config.stored_type_vocab_size = Some(config.type_vocab_size);
            config.hparams.type_vocab_size = F::MIN_TYPE_VOCAB_SIZE;
        }
        Ok(config)
    }

    fn to_json(&self, architecture: &str) -> serde_json::Value {
        family_json(self, F::MODEL_TYPES[0], architecture)
    }

    fn stored_form(&self) -> Option<Self> {
        let stored = self.stored_type_vocab_size?;
        let mut config = self.clone();
        config.hparams.type_vocab_size = stored;
        config.stored_type_vocab_size = None;
        Some(config)
    }

    /// Widen a stored token-type table `[stored, hidden]` to the config's rows, each new row a
    /// copy of the stored row [`BertLikeFamily::widened_type_row`] names.
    fn convert_stored(&self, path: &str, weight: Tensor<2>) -> Tensor<2> {
        if !path.ends_with("token_type_embeddings.weight") {
            return weight;
        }
        let stored = weight.dims()[0];
        let rows: Vec<i64> = (0..self.type_vocab_size)
            .map(|row| if row < stored { row } else { F::widened_type_row(row, stored) } as i64)
            .collect();
        let index = Tensor::<1, Int>::from_data(TensorData::new(rows, [self.type_vocab_size]), &weight.device());
        weight.select(0, index)
    }

    fn initializer_range(&self) -> f64 {
        self.initializer_range
    }
}
