//! Backend-free building blocks shared by every Sesame model family.
//!
//! Modules follow Burn's `XConfig::init(&device) -> X` pattern; tensor shapes are given in
//! doc comments. Names follow the papers and HuggingFace checkpoints.

pub mod activation;
pub mod attention;
pub mod backbone;
pub mod block_cache;
pub mod checkpoint;
pub mod config;
pub mod contain;
pub mod decoder;
pub mod device;
pub mod dropout;
pub mod early_exit;
pub mod embeddings;
pub mod encoder;
pub mod family;
pub mod feed_forward;
pub mod generative;
pub mod fs;
pub mod heads;
pub mod hub;
pub mod hparams;
pub mod init;
pub mod int8;
pub mod linear;
pub mod loss;
pub mod packing;
pub mod pooling;
pub mod pretrained;
pub mod random;
pub mod scalar_mix;
pub mod seq2seq;
pub mod tasks;

pub use activation::Activation;
pub use attention::{AttentionMask, KvCache, MultiHeadAttention, MultiHeadAttentionConfig};
pub use backbone::{Backbone, BackboneOutput, ClassifierSizes, EncoderInput, SentenceHead, SequenceHead};
pub use checkpoint::{CheckpointError, CheckpointSpec, KeyMap, LoadReport, WeightFiles, WeightFormat};
pub use config::ConfigError;
pub use dropout::{Dropout, DropoutConfig};
pub use early_exit::{EarlyExit, EarlyExitOutput, ExitClassifier};
pub use embeddings::{Embeddings, EmbeddingsConfig};
pub use decoder::{run_decoder_layers, DecoderCache, DecoderLayer, DecoderLayerConfig, DecoderOutput};
pub use encoder::{pick_layers, push_all, Encoder, EncoderCache, EncoderConfig, EncoderLayer, EncoderOutput, LayerParts, NamedOutput, OutputOptions};
pub use family::{supports, Family, Unsupported};
pub use feed_forward::{FeedForward, FeedForwardConfig};
pub use heads::{
    ClassificationHead, Classifier, ClassifierConfig, MaskedLmHead, MaskedLmHeadConfig, Pooler, PoolerConfig,
    QuestionAnsweringHead, QuestionAnsweringHeadConfig, SequenceLabels, SequenceSummary,
    SequenceSummaryConfig, SummaryClassifier, SummaryType, tied_logits,
};
pub use linear::{Linear, LinearConfig};
pub use hparams::{EarlyExitConfig, EncoderHyperParams};
pub use pooling::Pooling;
pub use scalar_mix::ScalarMix;
pub use seq2seq::{shift_tokens_right, Seq2SeqHeadOutput, Seq2SeqInput, Seq2SeqOutput, Seq2SeqQuestionAnsweringOutput};
pub use pretrained::{HfConfig, InputError, InputLimits, Pretrained, PretrainedError, PretrainedModel, SourcePath};

pub use tasks::{
    ForCausalLM, ForMaskedLM, ForMultipleChoice, ForPreTraining, ForQuestionAnswering, ForSequenceClassification,
    ForTokenClassification, HeadOutput, PreTrainingLabels, PreTrainingOutput, QuestionAnsweringOutput,
    ClassifierLayers, SpanLogits, TaskModel, TokenLogits,
};
