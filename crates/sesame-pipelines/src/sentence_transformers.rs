//! A sentence-transformers model directory's embedding settings, read and written as
//! sentence-transformers lays them out: `modules.json` (a `Transformer`, then `Pooling`, then
//! optionally `Normalize`), the pooling module's `config.json` (`pooling_mode_*`),
//! `sentence_bert_config.json` (`max_seq_length`) and `config_sentence_transformers.json` (the
//! similarity function). What `embed` then computes is what sentence-transformers' `encode`
//! computes from the same directory.

use std::path::Path;

use sesame_layers::config::read_json_config;
use sesame_layers::{ConfigError, Pooling};
use serde_json::{json, Value};

use crate::EmbedOptions;

/// The module types sentence-transformers writes (the names it has read since its first
/// releases; newer ones load them too).
const TRANSFORMER: &str = "sentence_transformers.models.Transformer";
const POOLING: &str = "sentence_transformers.models.Pooling";
const NORMALIZE: &str = "sentence_transformers.models.Normalize";

/// How a sentence-transformers model turns token states into its sentence embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentenceTransformerConfig {
    /// The pooling module's mode.
    pub pooling: Pooling,
    /// Whether a `Normalize` module follows (unit-length embeddings).
    pub normalize: bool,
    /// `max_seq_length`: texts are truncated to this many tokens; `None`: the model's limit.
    pub max_seq_length: Option<usize>,
    /// The token states' width (the pooling module's `word_embedding_dimension`).
    pub dimension: usize,
}

impl SentenceTransformerConfig {
    /// The settings of the directory `dir`; `None` when it has no `modules.json` (a plain
    /// transformers checkpoint). A module `embed` does not compute (a `Dense` layer, another
    /// pooling mode) is refused, naming the file and the module or field, rather than giving
    /// other embeddings than sentence-transformers.
    pub fn from_dir(dir: &Path) -> Result<Option<Self>, ConfigError> {
        let path = dir.join("modules.json");
        if !path.is_file() {
            return Ok(None);
        }
        let modules: Vec<Value> = read_json_config(&path)?;
        let bad = |reason: String| ConfigError::Parse { path: path.clone(), reason };
        let kinds: Vec<(String, String)> = modules
            .iter()
            .map(|m| match (m["type"].as_str(), m["path"].as_str()) {
                (Some(kind), Some(at)) => Ok((kind.to_string(), at.to_string())),
                _ => Err(bad(format!("module {m} has no `type` and `path`"))),
            })
            .collect::<Result<_, _>>()?;
        let short = |kind: &str| kind.rsplit('.').next().unwrap_or(kind).to_string();
        let names: Vec<String> = kinds.iter().map(|(kind, _)| short(kind)).collect();
        let (pooling_dir, normalize) = match names.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["Transformer", "Pooling"] => (&kinds[1].1, false),
            ["Transformer", "Pooling", "Normalize"] => (&kinds[1].1, true),
            _ => return Err(bad(format!("modules {names:?}: embed runs Transformer, Pooling and an optional Normalize"))),
        };
        let pooling_path = dir.join(pooling_dir).join("config.json");
        let pooling: Value = read_json_config(&pooling_path)?;
        let on = |field: &str| pooling.get(field).and_then(Value::as_bool).unwrap_or(false);
        let modes: Vec<&str> = ["cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"]
            .into_iter()
            .filter(|mode| on(&format!("pooling_mode_{mode}")))
            .collect();
        let pooling_mode = match modes[..] {
            ["cls_token"] => Pooling::Cls,
            ["mean_tokens"] => Pooling::Mean,
            ["max_tokens"] => Pooling::Max,
            _ => {
                let reason = format!("pooling modes {modes:?}: embed pools with one of cls_token, mean_tokens, max_tokens");
                return Err(ConfigError::Parse { path: pooling_path, reason });
            }
        };
        let dimension = pooling.get("word_embedding_dimension").and_then(Value::as_u64).filter(|&d| d > 0).ok_or_else(|| ConfigError::Parse {
            path: pooling_path.clone(),
            reason: "field `word_embedding_dimension` must be a positive integer".into(),
        })? as usize;
        let max_seq_length = crate::sentence_transformers_max_seq_length(dir)?;
        Ok(Some(Self { pooling: pooling_mode, normalize, max_seq_length, dimension }))
    }

    /// Write the settings' files into `dir` (beside the model's `config.json`, weights and
    /// tokenizer): what sentence-transformers loads as a `SentenceTransformer` with cosine
    /// similarity. Each file is written atomically.
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        let write = |path: &Path, value: &Value| sesame_layers::fs::write_atomic(path, (serde_json::to_string_pretty(value).expect("JSON") + "\n").as_bytes());
        let mut modules = vec![
            json!({"idx": 0, "name": "0", "path": "", "type": TRANSFORMER}),
            json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": POOLING}),
        ];
        if self.normalize {
            modules.push(json!({"idx": 2, "name": "2", "path": "2_Normalize", "type": NORMALIZE}));
            std::fs::create_dir_all(dir.join("2_Normalize"))?;
        }
        write(&dir.join("modules.json"), &Value::Array(modules))?;
        std::fs::create_dir_all(dir.join("1_Pooling"))?;
        write(
            &dir.join("1_Pooling/config.json"),
            &json!({
                "word_embedding_dimension": self.dimension,
                "pooling_mode_cls_token": self.pooling == Pooling::Cls,
                "pooling_mode_mean_tokens": self.pooling == Pooling::Mean,
                "pooling_mode_max_tokens": self.pooling == Pooling::Max,
                "pooling_mode_mean_sqrt_len_tokens": false,
                "pooling_mode_weightedmean_tokens": false,
                "pooling_mode_lasttoken": false,
                "include_prompt": true,
            }),
        )?;
        let mut sentence_bert = json!({"do_lower_case": false});
        if let Some(n) = self.max_seq_length {
            sentence_bert["max_seq_length"] = json!(n);
        }
        write(&dir.join("sentence_bert_config.json"), &sentence_bert)?;
        write(&dir.join("config_sentence_transformers.json"), &json!({"prompts": {}, "default_prompt_name": null, "similarity_fn_name": "cosine"}))
    }

    /// `embed`'s options for these settings, `batch_size` texts a batch.
    pub fn embed_options(&self, batch_size: usize) -> EmbedOptions {
        EmbedOptions { pooling: self.pooling, layer: -1, normalize: self.normalize, batch_size, max_tokens: self.max_seq_length }
    }
}
