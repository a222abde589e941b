//! What every encoder family offers the task heads: one input type, one output type and the
//! [`Backbone`] trait. The heads in [`crate::tasks`] are written once against it, and the
//! sequence heads of [`crate::heads`] read its output through [`SequenceHead`].

use burn::module::ModuleDisplay;
use crate::linear::LinearConfig;
use burn::prelude::*;

use crate::activation::Activation;
use crate::attention::AttentionMask;
use crate::checkpoint::{CheckpointSpec, KeyMap};
use crate::encoder::{EncoderCache, EncoderOutput, OutputOptions};
use crate::heads::{first_token, ClassificationHead, Classifier, ClassifierConfig, MaskedLmHeadConfig, SequenceSummaryConfig, SummaryClassifier};
use crate::pretrained::{check_ids, check_shape, InputError, InputLimits, PretrainedModel};

/// One batch of encoder input (HF argument names).
#[derive(Clone, Debug)]
pub struct EncoderInput {
    /// Token ids `[batch, seq]`.
    pub input_ids: Tensor<2, Int>,
    /// 1 for tokens, 0 for padding `[batch, seq]`; all ones when absent.
    pub attention_mask: Option<Tensor<2, Int>>,
    /// Segment ids `[batch, seq]`; zeros when absent.
    pub token_type_ids: Option<Tensor<2, Int>>,
    /// Position ids `[batch, seq]`; the family's default when absent (`past..past + seq`, or
    /// RoBERTa's positions counted past the padding id).
    pub position_ids: Option<Tensor<2, Int>>,
    /// A further restriction on who attends to whom, `[batch, seq, past + seq]`, `true` where
    /// a query may **not** see a key: UniLM's left-to-right and sequence-to-sequence masks,
    /// later XLNet's permutation mask. Combined with the padding mask.
    pub attention_restriction: Option<Tensor<3, Bool>>,
    /// Keys and values of earlier positions (incremental decoding): `input_ids` then holds only
    /// the new positions and `attention_mask` covers `past + seq` keys. `Some` (an empty cache
    /// at the first pass) asks the model to return the extended cache.
    pub cache: Option<EncoderCache>,
}

impl EncoderInput {
    /// Input from token ids alone.
    pub fn new(input_ids: Tensor<2, Int>) -> Self {
        Self { input_ids, attention_mask: None, token_type_ids: None, position_ids: None, attention_restriction: None, cache: None }
    }

    /// Restrict attention further: `restriction` `[batch, seq, past + seq]`, `true` = may not attend.
    pub fn with_attention_restriction(mut self, restriction: Tensor<3, Bool>) -> Self {
        self.attention_restriction = Some(restriction);
        self
    }

    /// Run incrementally after the positions held in `cache` (empty at the first pass).
    pub fn with_cache(mut self, cache: EncoderCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Number of positions already in the cache.
    pub fn past_len(&self) -> usize {
        self.cache.as_ref().map_or(0, EncoderCache::len)
    }

    /// The input's position ids, or `past..past + seq` for every row `[batch, seq]`.
    pub fn positions(&self) -> Tensor<2, Int> {
        self.position_ids.clone().unwrap_or_else(|| self.default_position_ids())
    }

    /// Position ids `past..past + seq` for every row `[batch, seq]`.
    pub fn default_position_ids(&self) -> Tensor<2, Int> {
        let [b, s] = self.input_ids.dims();
        let past = self.past_len() as i64;
        Tensor::<1, Int>::arange(past..past + s as i64, &self.input_ids.device()).reshape([1, s]).expand([b, s])
    }

    /// Set the attention mask.
    pub fn with_attention_mask(mut self, mask: Tensor<2, Int>) -> Self {
        self.attention_mask = Some(mask);
        self
    }

    /// Set the token type ids.
    pub fn with_token_type_ids(mut self, types: Tensor<2, Int>) -> Self {
        self.token_type_ids = Some(types);
        self
    }

    /// Set the position ids.
    pub fn with_position_ids(mut self, positions: Tensor<2, Int>) -> Self {
        self.position_ids = Some(positions);
        self
    }

    /// Check shapes and id ranges against a model's `limits` (reads the ids back from the device).
    pub fn validate(&self, limits: &InputLimits) -> Result<(), InputError> {
        let max = limits.max_len;
        let past = self.past_len();
        check_shape(&self.input_ids, None, "input_ids", max.saturating_sub(past))?;
        let [b, s] = self.input_ids.dims();
        if let Some(mask) = &self.attention_mask {
            if mask.dims() != [b, past + s] {
                return Err(InputError::ShapeMismatch { what: "attention_mask", expected: vec![b, past + s], found: mask.dims().to_vec() });
            }
        }
        if let Some(restriction) = &self.attention_restriction {
            if restriction.dims() != [b, s, past + s] {
                let found = restriction.dims().to_vec();
                return Err(InputError::ShapeMismatch { what: "attention_restriction", expected: vec![b, s, past + s], found });
            }
        }
        check_shape(&self.input_ids, self.token_type_ids.as_ref(), "token_type_ids", max)?;
        check_shape(&self.input_ids, self.position_ids.as_ref(), "position_ids", max)?;
        check_ids(&self.input_ids, limits.vocab_size, "token")?;
        if let Some(types) = &self.token_type_ids {
            check_ids(types, limits.type_vocab_size.max(1), "token type")?;
        }
        if let Some(positions) = &self.position_ids {
            check_ids(positions, limits.positions, "position")?;
        }
        Ok(())
    }

    /// The attention mask of this batch: padding, and the further restriction if any.
    pub fn mask(&self) -> AttentionMask {
        let mask = match &self.attention_mask {
            Some(mask) => AttentionMask::padding(mask.clone(), self.input_ids.dims()[1]),
            None => AttentionMask::none(),
        };
        match &self.attention_restriction {
            Some(restriction) => mask.and_masked(restriction.clone()),
            None => mask,
        }
    }

    /// Whether every row's first position is a token, not padding (reads the mask back from
    /// the device): true without a mask, false for a left-padded batch of rows of different
    /// lengths.
    pub fn first_positions_are_tokens(&self) -> bool {
        let Some(mask) = &self.attention_mask else { return true };
        let [b, _] = mask.dims();
        let first: Vec<i64> = mask.clone().slice([0..b, 0..1]).into_data().convert::<i64>().try_to_vec().unwrap_or_default();
        first.len() == b && first.iter().all(|&m| m != 0)
    }

    /// The batch size.
    pub fn batch_size(&self) -> usize {
        self.input_ids.dims()[0]
    }

    /// The input of rows `rows` `[n]` only, in that order.
    pub fn select_rows(&self, rows: &Tensor<1, Int>) -> Self {
        let pick2 = |t: &Option<Tensor<2, Int>>| t.as_ref().map(|t| t.clone().select(0, rows.clone()));
        Self {
            input_ids: self.input_ids.clone().select(0, rows.clone()),
            attention_mask: pick2(&self.attention_mask),
            token_type_ids: pick2(&self.token_type_ids),
            position_ids: pick2(&self.position_ids),
            attention_restriction: self.attention_restriction.as_ref().map(|t| t.clone().select(0, rows.clone())),
            cache: self.cache.as_ref().map(|c| c.select_rows(rows)),
        }
    }
}

/// What a [`Backbone`] returns.
#[derive(Clone, Debug)]
pub struct BackboneOutput {
    /// Encoder output, every hidden state and attention map when asked, and the extended
    /// cache when the input carried one.
    pub encoder: EncoderOutput,
    /// `tanh(dense(h[:, 0]))` `[batch, hidden]`, for models built with a pooler (BERT's,
    /// ALBERT's); `None` for models without one (ELECTRA, or `add_pooling_layer = false`).
    pub pooler_output: Option<Tensor<2>>,
}

impl BackboneOutput {
    /// Every output present, under HF's names (`last_hidden_state`, `pooler_output`,
    /// `hidden_states.0`, `attentions.1`).
    pub fn named(&self) -> Vec<crate::encoder::NamedOutput> {
        let mut out = vec![("last_hidden_state".to_string(), self.encoder.last_hidden_state.to_data())];
        out.extend(self.pooler_output.iter().map(|p| ("pooler_output".to_string(), p.to_data())));
        out.extend(self.encoder.named_layers());
        out
    }

    /// The last layer's states `[batch, seq, hidden]`.
    pub fn last_hidden_state(&self) -> Tensor<3> {
        self.encoder.last_hidden_state.clone()
    }
}

/// What a family's configuration says about the fine-tuning heads every encoder takes
/// (sequence and token classification, multiple choice, QA).
#[derive(Clone, Debug)]
pub struct ClassifierSizes {
    /// Encoder width.
    pub hidden_size: usize,
    /// Encoder layers (depths, for ALBERT's shared layers): the exit classifiers' count.
    pub layers: usize,
    /// Number of labels of classification heads.
    pub num_labels: usize,
    /// Dropout before classifiers.
    pub classifier_dropout: f64,
    /// Activation inside two-layer classification heads (RoBERTa's tanh, ELECTRA's GELU).
    pub classifier_activation: Activation,
    /// How heads without a pooler reduce a sequence to one vector (HF `SequenceSummary`).
    pub summary: SequenceSummaryConfig,
}

/// A family's base model (HF `BertModel`, `RobertaModel`, `AlbertModel`): what the shared task
/// heads need from it. What only some families have is declared here too ([`Backbone::POOLER`],
/// [`Backbone::SENTENCE_HEAD`]): a head model that needs it does not compile on a family without
/// it (`ForPreTraining<RobertaModel>` is refused when it is built). Its configuration is its [`PretrainedModel`]'s, and with it the
/// hooks of the family's stored and HF forms ([`crate::HfConfig::hf_form`],
/// [`crate::HfConfig::stored_form`]), which reach head models by Burn path.
pub trait Backbone: PretrainedModel + ModuleDisplay + Send + Sync {
    /// HF class-name stem (`Bert` in `BertForMaskedLM`).
    const CLASS: &'static str;
    /// HF name prefix of the base model inside head models (`bert`).
    const PREFIX: &'static str;

    /// A freshly initialised base model, with or without the pooler.
    fn new(config: &Self::Config, add_pooling_layer: bool, device: &Device) -> Self;

    /// Run the model over `input`.
    fn forward(&self, input: EncoderInput, options: OutputOptions) -> BackboneOutput;

    /// The input word-embedding table `[vocab, embedding]` (what an LM decoder is tied to).
    fn word_embeddings(&self) -> Tensor<2>;

    /// The masked-LM head's configuration (HF `cls.predictions`, `lm_head`,
    /// `generator_predictions`), its decoder tied to [`Backbone::word_embeddings`]. Masked LM,
    /// fill-mask, and the left-to-right LM of an encoder family (`is_decoder`) run on it.
    fn lm_head(config: &Self::Config) -> MaskedLmHeadConfig;

    /// Whether [`Backbone::new`] builds a pooler when asked (HF `pooler`,
    /// `tanh(dense(h[:, 0]))`). Heads on the pooled output need one (BERT's classifier, the
    /// sentence-pair head); ELECTRA has none.
    const POOLER: bool = false;

    /// The sentence-pair pre-training head trained beside masked LM in `…ForPreTraining`
    /// (BERT's next-sentence prediction, ALBERT's sentence order), by its HF names; `None`
    /// where the family has none (RoBERTa, ELECTRA).
    const SENTENCE_HEAD: Option<SentenceHead> = None;

    /// The configuration of the [`Backbone::SENTENCE_HEAD`]: two classes on the pooled output.
    fn sentence_head(config: &Self::Config) -> ClassifierConfig {
        ClassifierConfig::new(Self::classifier_sizes(config).hidden_size, 2)
    }

    /// The pooled output `[batch, hidden]` of a model built with its pooler, which every head
    /// model needing it is (they build their base model with `add_pooling_layer`). Refused
    /// when it is built for a family without a pooler.
    fn pooled(out: &BackboneOutput) -> Tensor<2> {
        const { assert!(Self::POOLER, "a head on the pooled output needs a family with a pooler (Backbone::POOLER)") };
        out.pooler_output.clone().expect("a head on the pooled output builds its base model with the pooler")
    }

    /// The sizes of the fine-tuning heads.
    fn classifier_sizes(config: &Self::Config) -> ClassifierSizes;

    /// The family's table from HF names to Burn paths, base model and heads (head models keep
    /// the base model in a field `base` and their heads in `lm_head`, `sentence_head`, `head`).
    fn key_map(config: &Self::Config) -> KeyMap;

    /// Regexes over HF names that files hold but the model does not load (buffers, tied decoders).
    fn ignored(config: &Self::Config) -> Vec<String>;

    /// The top-level names of the base model's HF tensors (`embeddings`, `encoder`, `pooler`).
    fn base_roots() -> Vec<String>;

    /// The HF class of the base model as a left-to-right language model.
    fn causal_lm_architecture() -> String {
        format!("{}ForCausalLM", Self::CLASS)
    }

    /// The pooler's output `[batch, hidden]` for states `hidden` `[batch, seq, hidden]`
    /// (`tanh(dense(hidden[:, 0]))`) for a model built with one; `None` otherwise. Heads that
    /// read a mix of layers ([`crate::ScalarMix`]) pool the mix.
    fn pool(&self, _hidden: Tensor<3>) -> Option<Tensor<2>> {
        None
    }

    /// The encoder stack, where the family has one of shared-layer-free [`crate::Encoder`]
    /// layers (BERT-shaped families, ELECTRA): what head pruning scores and prunes.
    fn encoder(&self) -> Option<&crate::Encoder> {
        None
    }

    /// The encoder run a layer at a time (FastBERT's early exit): the states entering the first
    /// layer `[batch, seq, hidden]` (the embeddings, projected where the family projects them)
    /// and each depth's layers in order (one layer; ALBERT's `inner_group_num` layers), to run
    /// under `input.mask()`. `None` for families whose encoder is not one stack of post-LN
    /// layers over the input (XLNet's two streams, BART).
    fn layer_stack(&self, _input: &EncoderInput) -> Option<(Tensor<3>, Vec<Vec<crate::LayerParts<'_>>>)> {
        None
    }

    /// The model with only the encoder layers `layers` (0-based, increasing), `config` saying
    /// so: a student initialised from a teacher's layers (DistilBERT took every other one).
    /// Families whose layers are shared across depths refuse.
    fn keep_layers(self, _config: &mut Self::Config, _layers: &[usize]) -> Result<Self, crate::ConfigError> {
        Err(crate::ConfigError::Invalid { field: "num_hidden_layers".into(), reason: format!("{} layers cannot be picked one by one", Self::CLASS) })
    }

    /// The model without `heads` (layer -> heads, numbered as in the unpruned layers, as HF's
    /// `prune_heads` takes them), `config` recording them in `pruned_heads`, which saving
    /// writes and loading rebuilds the layers from. Families whose heads cannot be pruned
    /// refuse.
    fn prune_heads(self, _config: &mut Self::Config, _heads: &std::collections::BTreeMap<usize, std::collections::BTreeSet<usize>>) -> Result<Self, crate::ConfigError> {
        Err(crate::ConfigError::Invalid { field: "pruned_heads".into(), reason: format!("{} heads cannot be pruned", Self::CLASS) })
    }

    /// The checkpoint spec of the base model itself (`with_base` false) or of a head model
    /// holding it in field `base`; `optional`: Burn path prefixes that may be absent.
    fn spec(config: &Self::Config, with_base: bool, optional: &[&str]) -> CheckpointSpec {
        let mut keys = Self::key_map(config);
        if with_base {
            keys = keys.with(&[(Self::PREFIX, "base")]);
        }
        CheckpointSpec {
            keys,
            family_prefix: Self::PREFIX.into(),
            has_base_prefix: with_base,
            base_roots: Self::base_roots(),
            may_be_missing: optional.iter().map(|s| s.to_string()).collect(),
            ignored: Self::ignored(config),
            aliases: Vec::new(),
        }
    }
}

/// The HF names of a family's sentence-pair pre-training head ([`Backbone::SENTENCE_HEAD`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentenceHead {
    /// The name of its logits in the pre-training output (`seq_relationship_logits`,
    /// `sop_logits`).
    pub logits: &'static str,
    /// The name of its labels (`next_sentence_label`, `sentence_order_label`).
    pub labels: &'static str,
}

impl SentenceHead {
    /// Family `B`'s, refused when it is built for a family without one.
    pub const fn of<B: Backbone>() -> SentenceHead {
        match B::SENTENCE_HEAD {
            Some(head) => head,
            None => panic!("…ForPreTraining needs a family with a sentence-pair head (Backbone::SENTENCE_HEAD)"),
        }
    }
}

/// A head that gives one row of logits per sequence (sequence classification, a choice's
/// score) on base model `B`: reads its output and, where it needs them, the input. A head on
/// the pooled output is one only for a base model with a pooler ([`Backbone::POOLER`]).
pub trait SequenceHead<B: Backbone>: Module + burn::module::ModuleDisplay + Sync + 'static {
    /// Whether the head reads the pooler output (the backbone is then built with a pooler).
    const POOLED: bool;
    /// Whether the head reads the first position's state alone (BERT's pooler, `[CLS]`): its
    /// classifier may then run the layers over the tokens alone
    /// ([`OutputOptions::tokens_only`]) when that position is a token.
    const FIRST_TOKEN: bool = false;
    /// A fresh head of `num_labels` outputs, sized and configured by `sizes`.
    fn new(sizes: &ClassifierSizes, num_labels: usize, device: &Device) -> Self;
    /// Logits `[batch, num_labels]`.
    fn forward(&self, out: &BackboneOutput, input: &EncoderInput) -> Tensor<2>;
}

/// BERT's and ALBERT's head: dropout + linear on the pooled output.
impl<B: Backbone> SequenceHead<B> for Classifier {
    const POOLED: bool = true;
    const FIRST_TOKEN: bool = true;

    fn new(sizes: &ClassifierSizes, num_labels: usize, device: &Device) -> Self {
        ClassifierConfig::new(sizes.hidden_size, num_labels).with_dropout(sizes.classifier_dropout).init(device)
    }

    fn forward(&self, out: &BackboneOutput, _input: &EncoderInput) -> Tensor<2> {
        Classifier::forward(self, B::pooled(out))
    }
}

impl<B: Backbone> SequenceHead<B> for ClassificationHead {
    const POOLED: bool = false;
    const FIRST_TOKEN: bool = true;

    fn new(sizes: &ClassifierSizes, num_labels: usize, device: &Device) -> Self {
        Self::with_sizes(sizes.hidden_size, num_labels, sizes.classifier_dropout, sizes.classifier_activation, device)
    }

    fn forward(&self, out: &BackboneOutput, _input: &EncoderInput) -> Tensor<2> {
        self.classify(first_token(out.last_hidden_state()))
    }
}

impl<B: Backbone> SequenceHead<B> for SummaryClassifier {
    const POOLED: bool = false;

    fn new(sizes: &ClassifierSizes, num_labels: usize, device: &Device) -> Self {
        Self {
            sequence_summary: sizes.summary.init(device),
            classifier: LinearConfig::new(sizes.summary.proj_size, num_labels).init(device),
        }
    }

    fn forward(&self, out: &BackboneOutput, _input: &EncoderInput) -> Tensor<2> {
        self.classifier.forward(self.sequence_summary.forward(out.last_hidden_state(), None))
    }
}
