//! The contract a model crate implements once: its name, the `model_type`s of its checkpoints,
//! its configuration and base model, and its model for each task, or [`Unsupported`] where
//! transformers has none. The facade (`sesame::auto`, `sesame::pipeline`) loads any family
//! through it; nothing else names a family's types.

use crate::generative::{CausalLM, Seq2SeqLM};
use crate::pretrained::{HfConfig, PretrainedModel};
use crate::tasks::{SequenceClassifier, SpanExtractor, TokenTagger};
use crate::Backbone;

/// A family of checkpoints (BERT, RoBERTa, BART, …): which Sesame type runs which job.
///
/// ```ignore
/// impl Family for Bert {
///     const NAME: &'static str = "bert";
///     const MODEL_TYPES: &'static [&'static str] = &["bert"];
///     type Config = BertConfig;
///     type Model = BertModel;
///     type Encoder = BertModel;
///     type ForSequenceClassification = BertForSequenceClassification;
///     type ForTokenClassification = BertForTokenClassification;
///     type ForQuestionAnswering = BertForQuestionAnswering;
///     type ForConditionalGeneration = Unsupported;
///     type ForCausalLM = BertLMHeadModel;
/// }
/// ```
pub trait Family: 'static {
    /// The family's name in messages and on the command line (`bert`).
    const NAME: &'static str;
    /// The `model_type` values of its `config.json` files.
    const MODEL_TYPES: &'static [&'static str];
    /// Its `config.json`.
    type Config: HfConfig;
    /// The base model (HF `BertModel`): what `AutoModel` loads.
    type Model: PretrainedModel<Config = Self::Config>;
    /// The base model as a bidirectional encoder with a masked-LM head: sentence embeddings
    /// and fill-mask ([`Unsupported`] for BART and XLNet).
    type Encoder: Head<task::Encode>;
    /// The sequence classifier (HF `…ForSequenceClassification`): classify, rerank.
    type ForSequenceClassification: Head<task::Classify>;
    /// The token classifier (HF `…ForTokenClassification`): tag.
    type ForTokenClassification: Head<task::Tag>;
    /// The extractive-QA model (HF `…ForQuestionAnswering`, XLNet's `…Simple`): answer.
    type ForQuestionAnswering: Head<task::Answer>;
    /// The encoder-decoder with an LM head (BART's `…ForConditionalGeneration`): generate from
    /// a source.
    type ForConditionalGeneration: Head<task::Seq2Seq>;
    /// The left-to-right LM (an encoder's `…ForCausalLM` saved with `is_decoder`,
    /// `BartForCausalLM`, XLNet's `…LMHeadModel`): generate a continuation.
    type ForCausalLM: Head<task::Causal>;
}

/// Stands for a model a family does not have (transformers has no
/// `BartForTokenClassification`): a loader reached through it refuses the task, naming the
/// family.
#[derive(Clone, Copy, Debug)]
pub enum Unsupported {}

/// The jobs a [`Family`] names a model type for: each is what [`Head`] is implemented for.
pub mod task {
    /// Sentence embeddings and fill-mask: a base model with a masked-LM head.
    #[derive(Clone, Copy, Debug)]
    pub struct Encode;
    /// Sequence classification (and reranking, a one-logit classifier over pairs).
    #[derive(Clone, Copy, Debug)]
    pub struct Classify;
    /// Token classification.
    #[derive(Clone, Copy, Debug)]
    pub struct Tag;
    /// Extractive question answering.
    #[derive(Clone, Copy, Debug)]
    pub struct Answer;
    /// Generation from a source by an encoder-decoder.
    #[derive(Clone, Copy, Debug)]
    pub struct Seq2Seq;
    /// Generation of a continuation, left to right.
    #[derive(Clone, Copy, Debug)]
    pub struct Causal;
}

/// A family's model type for the job `T`, handed to a loader as the trait the job runs on
/// ([`HeadVisitor`]); implemented here for every model that runs the job and for
/// [`Unsupported`], never by a model crate.
pub trait Head<T> {
    /// Call the visitor's method for this type.
    fn accept<V: HeadVisitor>(visitor: V) -> V::Out;
}

/// What a loader does with a family's model type, by the job it runs (the facade's loaders,
/// the training jobs). A visitor writes the methods of the jobs it runs; the others, like a
/// type the family names [`Unsupported`], give [`HeadVisitor::unsupported`].
pub trait HeadVisitor: Sized {
    /// What the loader gives.
    type Out;
    /// The family has no model for the job.
    fn unsupported(self) -> Self::Out;
    /// `B` embeds and fills masks.
    fn encoder<B: Backbone>(self) -> Self::Out {
        self.unsupported()
    }
    /// `M` classifies sequences.
    fn sequence_classifier<M: SequenceClassifier>(self) -> Self::Out {
        self.unsupported()
    }
    /// `M` tags tokens.
    fn token_classifier<M: TokenTagger>(self) -> Self::Out {
        self.unsupported()
    }
    /// `M` answers questions from a context.
    fn question_answering<M: SpanExtractor>(self) -> Self::Out {
        self.unsupported()
    }
    /// `M` generates from a source, encoder and decoder.
    fn seq2seq<M: Seq2SeqLM>(self) -> Self::Out {
        self.unsupported()
    }
    /// `M` generates a continuation, left to right.
    fn causal<M: CausalLM>(self) -> Self::Out {
        self.unsupported()
    }
}

impl<B: Backbone> Head<task::Encode> for B {
    fn accept<V: HeadVisitor>(visitor: V) -> V::Out {
        visitor.encoder::<B>()
    }
}

impl<M: SequenceClassifier> Head<task::Classify> for M {
    fn accept<V: HeadVisitor>(visitor: V) -> V::Out {
        visitor.sequence_classifier::<M>()
    }
}

impl<M: TokenTagger> Head<task::Tag> for M {
    fn accept<V: HeadVisitor>(visitor: V) -> V::Out {
        visitor.token_classifier::<M>()
    }
}

impl<M: SpanExtractor> Head<task::Answer> for M {
    fn accept<V: HeadVisitor>(visitor: V) -> V::Out {
        visitor.question_answering::<M>()
    }
}

impl<M: Seq2SeqLM> Head<task::Seq2Seq> for M {
    fn accept<V: HeadVisitor>(visitor: V) -> V::Out {
        visitor.seq2seq::<M>()
    }
}

impl<M: CausalLM> Head<task::Causal> for M {
    fn accept<V: HeadVisitor>(visitor: V) -> V::Out {
        visitor.causal::<M>()
    }
}

impl<T> Head<T> for Unsupported {
    fn accept<V: HeadVisitor>(visitor: V) -> V::Out {
        visitor.unsupported()
    }
}
