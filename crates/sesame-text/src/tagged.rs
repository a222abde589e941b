//! Users' tagged sentences for token classification (named entities, parts of speech): CoNLL
//! files (a token and its tag per line, the tag in the last column, a blank line between
//! sentences, `-DOCSTART-` lines skipped) or JSON lines with a list of tokens and a list of
//! tags, as transformers' `run_ner.py` reads them.
//!
//! Every problem is reported with the file and the line, as [`crate::labelled`] reports them.

use std::path::Path;

use crate::labelled::{at, lines, sorted_classes, LabelledError, RawLabel};

/// One sentence: its tokens (words) and one tag per token.
#[derive(Clone, Debug, PartialEq)]
pub struct TaggedSentence {
    /// The words.
    pub tokens: Vec<String>,
    /// One tag per word, as written.
    pub tags: Vec<RawLabel>,
    /// The line it starts on (1-based), for messages.
    pub line: u64,
}

/// Fields of a JSON-lines file of tagged sentences.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagFields {
    /// The list of words (`tokens`).
    pub tokens: String,
    /// The list of tags (`tags`).
    pub tags: String,
}

impl Default for TagFields {
    fn default() -> Self {
        Self { tokens: "tokens".into(), tags: "tags".into() }
    }
}

/// Read the sentences of `path`: JSON lines (`.jsonl`, `.json`) with `fields`, or CoNLL (any
/// other name). Tokens and tags of different lengths, a line without a tag, an empty token or
/// tag, a CoNLL line with another number of columns than the file's first, and text that is not
/// UTF-8 are errors naming the line; so is a file without sentences.
pub fn read_sentences(path: &Path, fields: &TagFields) -> Result<Vec<TaggedSentence>, LabelledError> {
    let bytes = std::fs::read(path).map_err(|source| LabelledError::Io { path: path.into(), source })?;
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).unwrap_or_default();
    let sentences = if ext == "jsonl" || ext == "json" { json_lines(path, &bytes, fields)? } else { conll(path, &bytes)? };
    if sentences.is_empty() {
        return Err(LabelledError::File { path: path.into(), reason: "no tagged sentences".into() });
    }
    Ok(sentences)
}

fn conll(path: &Path, bytes: &[u8]) -> Result<Vec<TaggedSentence>, LabelledError> {
    let mut sentences = Vec::new();
    let mut current = TaggedSentence { tokens: Vec::new(), tags: Vec::new(), line: 0 };
    // The number of columns of the file's first token line, and that line: every token line
    // has as many (a line with more would lose words, one with fewer would misplace the tag).
    let mut width: Option<(usize, u64)> = None;
    for item in lines(path, bytes) {
        let (line, text) = item?;
        let columns: Vec<&str> = if text.contains('\t') { text.split('\t').map(str::trim).collect() } else { text.split_whitespace().collect() };
        if columns.iter().all(|c| c.is_empty()) || columns[0] == "-DOCSTART-" {
            if !current.tokens.is_empty() {
                sentences.push(std::mem::replace(&mut current, TaggedSentence { tokens: Vec::new(), tags: Vec::new(), line: 0 }));
            }
            continue;
        }
        let (token, tag) = (columns[0], *columns.last().unwrap_or(&""));
        if columns.len() < 2 || tag.is_empty() || token.is_empty() {
            return Err(at(path, line, format!("{text:?} is not a token and its tag (separated by a tab or spaces, the tag last)")));
        }
        match width {
            None => width = Some((columns.len(), line)),
            Some((n, first)) if n != columns.len() => {
                return Err(at(path, line, format!("{text:?} has {} columns, but line {first} has {n}: every line holds the same columns, the word first and the tag last (a word with spaces needs tab-separated columns)", columns.len())));
            }
            Some(_) => {}
        }
        if current.tokens.is_empty() {
            current.line = line;
        }
        current.tokens.push(token.to_string());
        current.tags.push(RawLabel::Class(tag.to_string()));
    }
    if !current.tokens.is_empty() {
        sentences.push(current);
    }
    Ok(sentences)
}

fn json_lines(path: &Path, bytes: &[u8], fields: &TagFields) -> Result<Vec<TaggedSentence>, LabelledError> {
    let mut sentences = Vec::new();
    for item in lines(path, bytes) {
        let (line, text) = item?;
        if text.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| at(path, line, format!("not a JSON object: {e}")))?;
        let object = value.as_object().ok_or_else(|| at(path, line, "not a JSON object"))?;
        let list = |name: &str| match object.get(name) {
            Some(serde_json::Value::Array(items)) => Ok(items),
            Some(other) => Err(at(path, line, format!("field {name:?} is {other}, not a list"))),
            None => Err(at(path, line, format!("no field {name:?}; the object has {:?}", object.keys().collect::<Vec<_>>()))),
        };
        let (tokens, tags) = (list(&fields.tokens)?, list(&fields.tags)?);
        if tokens.len() != tags.len() {
            return Err(at(path, line, format!("{} tokens but {} tags", tokens.len(), tags.len())));
        }
        if tokens.is_empty() {
            return Err(at(path, line, "a sentence without tokens"));
        }
        let tokens = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| match t {
                serde_json::Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
                other => Err(at(path, line, format!("token {i} is {other}, not a word"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let tags = tags
            .iter()
            .enumerate()
            .map(|(i, t)| match t {
                serde_json::Value::String(s) if !s.trim().is_empty() => Ok(RawLabel::Class(s.clone())),
                serde_json::Value::Number(n) if n.is_i64() => Ok(RawLabel::Integer(n.as_i64().unwrap_or_default())),
                other => Err(at(path, line, format!("tag {i} is {other}, not a tag name or id"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        sentences.push(TaggedSentence { tokens, tags, line });
    }
    Ok(sentences)
}

/// The tag names of training `sentences`, sorted (numerically when every tag is an integer),
/// as `run_ner.py` sorts its label list.
pub fn tag_names(sentences: &[TaggedSentence]) -> Vec<String> {
    sorted_classes(sentences.iter().flat_map(|s| &s.tags))
}

/// Each sentence's tags as indices into `names` (the training file's): a tag the training data
/// never had is an error naming the line and the tag.
pub fn tag_ids(path: &Path, sentences: &[TaggedSentence], names: &[String]) -> Result<Vec<Vec<usize>>, LabelledError> {
    sentences
        .iter()
        .map(|s| {
            s.tags
                .iter()
                .map(|t| {
                    let name = match t {
                        RawLabel::Integer(i) => i.to_string(),
                        RawLabel::Class(c) => c.clone(),
                        other => format!("{other:?}"),
                    };
                    names.iter().position(|n| *n == name).ok_or_else(|| at(path, s.line, format!("tag {name:?} does not occur in the training data (it has {names:?})")))
                })
                .collect()
        })
        .collect()
}

/// Whether `names` are entity tags (`B-`, `I-`, `E-`, `S-` prefixes, or `O`), whose scores are
/// entity-level; else they are plain classes per word (parts of speech), scored by accuracy.
pub fn are_entity_tags(names: &[String]) -> bool {
    let prefixed = |n: &str| ["B-", "I-", "E-", "S-", "L-", "U-"].iter().any(|p| n.starts_with(p) && n.len() > 2);
    names.iter().any(|n| prefixed(n)) && names.iter().all(|n| n == "O" || prefixed(n))
}
