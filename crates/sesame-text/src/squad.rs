//! Extractive question answering data: SQuAD's JSON (`data` → `paragraphs` → `qas`, v1.1 and
//! v2.0 with `is_impossible`) or JSON lines as HF datasets flatten it (`id`, `question`,
//! `context`, `answers: {"text": [...], "answer_start": [...]}`), as transformers' `run_qa.py`
//! reads them. Every answer must be where its `answer_start` says.

use std::path::Path;

use crate::labelled::LabelledError;

/// One question on a context, with its answers (none: unanswerable, SQuAD 2.0).
#[derive(Clone, Debug, PartialEq)]
pub struct SquadExample {
    /// The question's id.
    pub id: String,
    /// The question.
    pub question: String,
    /// The passage that holds the answer.
    pub context: String,
    /// Each answer's text and first character in `context` (counted in Unicode scalar values,
    /// as Python indexes a `str`).
    pub answers: Vec<(String, usize)>,
}

/// Read the questions of `path`: SQuAD's JSON (a file whose object has `data`), or JSON lines.
/// An answer whose `answer_start` does not point at its text, a missing field, an empty
/// question or context and text that is not UTF-8 are errors naming the line (JSON lines) or the
/// question's id (SQuAD's JSON).
pub fn read_questions(path: &Path) -> Result<Vec<SquadExample>, LabelledError> {
    let bytes = std::fs::read(path).map_err(|source| LabelledError::Io { path: path.into(), source })?;
    let file = |reason: String| LabelledError::File { path: path.into(), reason };
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() as u64 + 1;
        LabelledError::At { path: path.into(), line, reason: "not UTF-8 text".into() }
    })?;
    let whole: Option<serde_json::Value> = serde_json::from_str(text).ok();
    let examples = match whole.as_ref().and_then(|v| v.get("data")) {
        Some(data) => squad_json(data).map_err(file)?,
        // One JSON document that is not one flat question: SQuAD's layout with its `data`
        // missing (misspelt), not JSON lines.
        None if whole.as_ref().is_some_and(|v| v.get("question").is_none()) => {
            let keys = match whole.as_ref().and_then(serde_json::Value::as_object) {
                Some(object) => format!("its fields are {:?}", object.keys().collect::<Vec<_>>()),
                None => "it is not an object".into(),
            };
            return Err(file(format!("one JSON document without SQuAD's `data` list ({keys}); JSON lines hold one question object per line")));
        }
        None => {
            let mut out = Vec::new();
            for (i, line) in text.lines().enumerate() {
                let at = |reason: String| LabelledError::At { path: path.into(), line: i as u64 + 1, reason };
                if line.trim().is_empty() {
                    continue;
                }
                let value: serde_json::Value = serde_json::from_str(line).map_err(|e| at(format!("not a JSON object: {e}")))?;
                out.push(flat_example(&value, &(i + 1).to_string()).map_err(at)?);
            }
            out
        }
    };
    if examples.is_empty() {
        return Err(file("no questions".into()));
    }
    Ok(examples)
}

fn string<'a>(object: &'a serde_json::Value, field: &str) -> Result<&'a str, String> {
    match object.get(field) {
        Some(serde_json::Value::String(s)) => Ok(s),
        Some(other) => Err(format!("field {field:?} is {other}, not a string")),
        None => Err(format!("no field {field:?}")),
    }
}

/// SQuAD's nested layout.
fn squad_json(data: &serde_json::Value) -> Result<Vec<SquadExample>, String> {
    let mut out = Vec::new();
    for article in data.as_array().ok_or("`data` is not a list")? {
        for paragraph in article.get("paragraphs").and_then(|p| p.as_array()).ok_or("an article without a `paragraphs` list")? {
            let context = string(paragraph, "context")?;
            for qa in paragraph.get("qas").and_then(|q| q.as_array()).ok_or("a paragraph without a `qas` list")? {
                let id = string(qa, "id")?;
                let named = |reason: String| format!("question {id:?}: {reason}");
                let impossible = match qa.get("is_impossible") {
                    None => false,
                    Some(serde_json::Value::Bool(b)) => *b,
                    Some(other) => return Err(named(format!("`is_impossible` is {other}, not true or false"))),
                };
                // Every question lists its answers (SQuAD 2.0's unanswerable ones an empty list):
                // a question without the field is a mistake, not an unanswerable question.
                let answers = match qa.get("answers") {
                    _ if impossible => Vec::new(),
                    Some(serde_json::Value::Array(answers)) => answers.clone(),
                    Some(other) => return Err(named(format!("`answers` is {other}, not a list"))),
                    None => {
                        let keys = qa.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
                        return Err(named(format!("no `answers` list (the question has {keys:?}); an unanswerable question has `\"answers\": []` or `\"is_impossible\": true`")));
                    }
                };
                let answers = answers
                    .iter()
                    .map(|a| {
                        let start = a.get("answer_start").and_then(serde_json::Value::as_u64).ok_or("an answer without an integer `answer_start`")?;
                        Ok((string(a, "text")?.to_string(), start as usize))
                    })
                    .collect::<Result<Vec<_>, String>>()
                    .map_err(named)?;
                out.push(example(id, string(qa, "question").map_err(named)?, context, answers).map_err(named)?);
            }
        }
    }
    Ok(out)
}

/// One line of HF datasets' flat layout; `line` names it when it has no `id`.
fn flat_example(value: &serde_json::Value, line: &str) -> Result<SquadExample, String> {
    let id = value.get("id").map_or_else(|| line.to_string(), |v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
    let answers = match value.get("answers") {
        None => {
            let keys = value.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
            return Err(format!("no field \"answers\" (the object has {keys:?}); an unanswerable question has `\"answers\": {{\"text\": [], \"answer_start\": []}}`"));
        }
        Some(serde_json::Value::Null) => Vec::new(),
        Some(a) => {
            let texts = a.get("text").and_then(|t| t.as_array()).ok_or("`answers` has no `text` list")?;
            let starts = a.get("answer_start").and_then(|t| t.as_array()).ok_or("`answers` has no `answer_start` list")?;
            if texts.len() != starts.len() {
                return Err(format!("`answers` has {} texts but {} starts", texts.len(), starts.len()));
            }
            texts
                .iter()
                .zip(starts)
                .map(|(t, s)| match (t.as_str(), s.as_u64()) {
                    (Some(t), Some(s)) => Ok((t.to_string(), s as usize)),
                    _ => Err(format!("answer {t} at {s} is not a text at a character")),
                })
                .collect::<Result<_, _>>()?
        }
    };
    example(&id, string(value, "question")?, string(value, "context")?, answers)
}

fn example(id: &str, question: &str, context: &str, answers: Vec<(String, usize)>) -> Result<SquadExample, String> {
    if question.trim().is_empty() {
        return Err("empty question".into());
    }
    if context.trim().is_empty() {
        return Err("empty context".into());
    }
    for (text, start) in &answers {
        let found: String = context.chars().skip(*start).take(text.chars().count()).collect();
        if found != *text || text.is_empty() {
            return Err(format!("answer {text:?} is not at answer_start {start} (the context has {found:?} there)"));
        }
    }
    Ok(SquadExample { id: id.to_string(), question: question.to_string(), context: context.to_string(), answers })
}
