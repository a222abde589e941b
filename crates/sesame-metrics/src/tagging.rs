//! Entity-level scores of tag sequences, as seqeval computes them: entities are chunked from the
//! tags (by seqeval's default, conlleval-like rules, or strictly by a scheme), an entity counts
//! as found when type, start and end all match, and scores are per type and averaged.

use std::collections::{BTreeMap, BTreeSet};

use crate::{average, Average, MetricError, Scores};

/// How entities are read from tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// seqeval's default (`mode=None`, conlleval's rules): any of IOB1, IOB2, IOE, IOBES; an
    /// `I-` after `O` or after another type opens an entity.
    Default,
    /// seqeval's strict mode with `IOB2`: an entity is a `B-` and the `I-`s of its type that
    /// follow; a stray `I-` is no entity.
    Iob2,
    /// seqeval's strict mode with `IOBES`: `S-` alone, or `B-`, `I-`s and `E-` of one type.
    Iobes,
}

/// One entity: its type and its tokens `start..end` in its sentence.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Entity {
    /// The sentence it is in.
    pub sentence: usize,
    /// Its type (`PER` of `B-PER`; `_` for a tag without one).
    pub kind: String,
    /// First token.
    pub start: usize,
    /// One past the last token.
    pub end: usize,
}

/// The entities of `sentences` of tags, read by `scheme`.
pub fn entities<S: AsRef<str>>(sentences: &[Vec<S>], scheme: Scheme) -> Result<Vec<Entity>, MetricError> {
    match scheme {
        Scheme::Default => default_entities(sentences),
        Scheme::Iob2 | Scheme::Iobes => {
            let mut all = Vec::new();
            for (s, tags) in sentences.iter().enumerate() {
                all.extend(strict_entities(tags, scheme)?.into_iter().map(|(kind, start, end)| Entity { sentence: s, kind, start, end }));
            }
            Ok(all)
        }
    }
}

/// seqeval's `get_entities`: the sentences joined with an `O` after each, then chunked.
fn default_entities<S: AsRef<str>>(sentences: &[Vec<S>]) -> Result<Vec<Entity>, MetricError> {
    // (sentence, offset in it) of every position of the joined sequence.
    let mut flat: Vec<(&str, usize, usize)> = Vec::new();
    for (s, tags) in sentences.iter().enumerate() {
        for (i, t) in tags.iter().enumerate() {
            if t.as_ref().is_empty() {
                return Err(MetricError::InvalidTag { tag: String::new(), scheme: "seqeval", allowed: "a tag of at least one character" });
            }
            flat.push((t.as_ref(), s, i));
        }
        flat.push(("O", s, tags.len()));
    }
    fn split(tag: &str) -> (char, &str) {
        let prefix = tag.chars().next().unwrap_or('O');
        let rest = &tag[prefix.len_utf8()..];
        let kind = rest.split_once('-').map_or(rest, |(_, k)| k);
        (prefix, if kind.is_empty() { "_" } else { kind })
    }
    let mut out = Vec::new();
    let (mut prev_tag, mut prev_type, mut begin) = ('O', "", 0usize);
    for i in 0..=flat.len() {
        let (tag, kind) = if i < flat.len() { split(flat[i].0) } else { ('O', "_") };
        if end_of_chunk(prev_tag, tag, prev_type, kind) {
            let (s, start) = (flat[begin].1, flat[begin].2);
            out.push(Entity { sentence: s, kind: prev_type.to_string(), start, end: flat[i - 1].2 + 1 });
        }
        if start_of_chunk(prev_tag, tag, prev_type, kind) {
            begin = i;
        }
        (prev_tag, prev_type) = (tag, kind);
    }
    Ok(out)
}

/// seqeval's `end_of_chunk`.
fn end_of_chunk(prev_tag: char, tag: char, prev_type: &str, kind: &str) -> bool {
    matches!((prev_tag, tag), ('E', _) | ('S', _) | ('B' | 'I', 'B' | 'S' | 'O')) || (prev_tag != 'O' && prev_tag != '.' && prev_type != kind)
}

/// seqeval's `start_of_chunk`.
fn start_of_chunk(prev_tag: char, tag: char, prev_type: &str, kind: &str) -> bool {
    matches!((prev_tag, tag), (_, 'B') | (_, 'S') | ('E' | 'S' | 'O', 'E' | 'I')) || (tag != 'O' && tag != '.' && prev_type != kind)
}

/// A tag's prefix as a bit: I, O, B, E, S.
const I: u8 = 1;
const O: u8 = 2;
const B: u8 = 4;
const E: u8 = 8;
const S: u8 = 16;
const ANY: u8 = I | O | B | E | S;

/// Whether the types of two neighbouring tags must be the same, differ, or either.
#[derive(Clone, Copy)]
enum Same {
    Yes,
    No,
    Any,
}

/// `(previous prefix, this prefix, types)` patterns.
type Patterns = &'static [(u8, u8, Same)];

/// A strict scheme's allowed prefixes and its start, inside and end patterns (seqeval.scheme).
fn patterns(scheme: Scheme) -> (u8, &'static str, Patterns, Patterns, Patterns) {
    use Same::*;
    match scheme {
        Scheme::Iob2 => (
            I | O | B,
            "B-, I-, O",
            &[(ANY, B, Any)],
            &[(B, I, Yes), (I, I, Yes)],
            &[(I, O, Any), (I, I, No), (I, B, Any), (B, O, Any), (B, I, No), (B, B, Any)],
        ),
        _ => (
            I | O | B | E | S,
            "B-, I-, E-, S-, O",
            &[(ANY, B, Any), (ANY, S, Any)],
            &[(B, I, Yes), (B, E, Yes), (I, I, Yes), (I, E, Yes)],
            &[(S, ANY, Any), (E, ANY, Any)],
        ),
    }
}

/// seqeval's `Tokens.entities` for one sentence: `(type, start, end)`.
fn strict_entities<S: AsRef<str>>(tags: &[S], scheme: Scheme) -> Result<Vec<(String, usize, usize)>, MetricError> {
    let (allowed, allowed_text, start, inside, end) = patterns(scheme);
    let name = if scheme == Scheme::Iob2 { "IOB2" } else { "IOBES" };
    let mut tokens: Vec<(u8, &str)> = Vec::with_capacity(tags.len() + 1);
    for tag in tags {
        let tag = tag.as_ref();
        let invalid = || MetricError::InvalidTag { tag: tag.to_string(), scheme: name, allowed: allowed_text };
        let first = tag.chars().next().ok_or_else(invalid)?;
        let prefix = match first {
            'I' => I,
            'O' => O,
            'B' => B,
            'E' => E,
            'S' => S,
            _ => return Err(invalid()),
        };
        if prefix & allowed == 0 {
            return Err(invalid());
        }
        let kind = tag[1..].trim_matches('-');
        tokens.push((prefix, if kind.is_empty() { "_" } else { kind }));
    }
    tokens.push((O, "_"));
    let fits = |prev: (u8, &str), cur: (u8, &str), patterns: Patterns| {
        patterns.iter().any(|&(p, c, same)| {
            prev.0 & p != 0
                && cur.0 & c != 0
                && match same {
                    Same::Any => true,
                    Same::Yes => prev.1 == cur.1,
                    Same::No => prev.1 != cur.1,
                }
        })
    };
    let mut out = Vec::new();
    let (mut i, mut prev) = (0, (O, "_"));
    while i < tokens.len() {
        let token = tokens[i];
        if fits(prev, token, start) {
            // `_forward`: past the tokens inside the entity.
            let mut j = i + 1;
            let mut last = token;
            while j < tokens.len() && fits(last, tokens[j], inside) {
                last = tokens[j];
                j += 1;
            }
            let j = j.min(tokens.len() - 1);
            if fits(tokens[j - 1], tokens[j], end) {
                out.push((token.1.to_string(), i, j));
            }
            i = j;
        } else {
            i += 1;
        }
        prev = tokens[i - 1];
    }
    Ok(out)
}

/// Entity-level scores: per type, averaged, and token accuracy.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EntityScores {
    /// Each type's scores, by type name.
    pub per_type: BTreeMap<String, Scores>,
    /// Micro average (seqeval's `f1_score` default).
    pub micro: Scores,
    /// Macro average.
    pub macro_avg: Scores,
    /// Average weighted by support.
    pub weighted: Scores,
    /// The fraction of tags predicted right (seqeval's `accuracy_score`).
    pub accuracy: f64,
}

/// Score `predicted` tag sequences against `truth`, entities read by `scheme`.
pub fn entity_scores<S: AsRef<str>>(truth: &[Vec<S>], predicted: &[Vec<S>], scheme: Scheme) -> Result<EntityScores, MetricError> {
    if truth.len() != predicted.len() {
        return Err(MetricError::LengthMismatch { what: "sentences", truth: truth.len(), predicted: predicted.len() });
    }
    let (mut tags, mut right) = (0usize, 0usize);
    for (t, p) in truth.iter().zip(predicted) {
        if t.len() != p.len() {
            return Err(MetricError::LengthMismatch { what: "tags of a sentence", truth: t.len(), predicted: p.len() });
        }
        tags += t.len();
        right += t.iter().zip(p).filter(|(a, b)| a.as_ref() == b.as_ref()).count();
    }
    if tags == 0 {
        return Err(MetricError::Empty { what: "tags" });
    }
    let by_type = |entities: Vec<Entity>| {
        let mut map: BTreeMap<String, BTreeSet<(usize, usize, usize)>> = BTreeMap::new();
        for e in entities {
            map.entry(e.kind).or_default().insert((e.sentence, e.start, e.end));
        }
        map
    };
    let (true_map, pred_map) = (by_type(entities(truth, scheme)?), by_type(entities(predicted, scheme)?));
    let kinds: BTreeSet<&String> = true_map.keys().chain(pred_map.keys()).collect();
    let empty = BTreeSet::new();
    let counts: Vec<(String, (u64, u64, u64))> = kinds
        .into_iter()
        .map(|k| {
            let (t, p) = (true_map.get(k).unwrap_or(&empty), pred_map.get(k).unwrap_or(&empty));
            (k.clone(), (t.intersection(p).count() as u64, p.len() as u64, t.len() as u64))
        })
        .collect();
    let raw: Vec<_> = counts.iter().map(|c| c.1).collect();
    Ok(EntityScores {
        per_type: counts.iter().map(|(k, (tp, p, a))| (k.clone(), Scores::from_counts_seqeval(*tp, *p, *a))).collect(),
        micro: average(&raw, Average::Micro, Scores::from_counts_seqeval),
        macro_avg: average(&raw, Average::Macro, Scores::from_counts_seqeval),
        weighted: average(&raw, Average::Weighted, Scores::from_counts_seqeval),
        accuracy: right as f64 / tags as f64,
    })
}
