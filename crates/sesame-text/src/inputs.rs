//! One line of a command's input file (`embed`, `classify`, `generate`, … `--input`): plain
//! text, or, when it starts with `{`, a JSON object with a string `"text"` or (where token ids
//! are taken) a list `"input_ids"`.

/// One input line, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputLine {
    /// A text.
    Text(String),
    /// Token ids (a model without a tokenizer).
    Ids(Vec<u32>),
}

/// Read `line` (without its line break): a line starting with `{` (after spaces) is JSON; any
/// other line is its text. `ids` says whether `"input_ids"` is accepted. The error says what is
/// wrong with the line, for the caller to prefix with the file and line number.
pub fn parse_input_line(line: &str, ids: bool) -> Result<InputLine, String> {
    if !line.trim_start().starts_with('{') {
        return Ok(InputLine::Text(line.to_string()));
    }
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON ({e}); a line starting with `{{` is read as JSON"))?;
    let Some(object) = value.as_object() else { return Err("not a JSON object (a line starting with `{` is read as JSON)".into()) };
    let wanted = if ids { "a string \"text\" or a list \"input_ids\" (one of them)" } else { "a string field \"text\"" };
    match (object.get("text"), object.get("input_ids")) {
        (Some(serde_json::Value::String(text)), None) => Ok(InputLine::Text(text.clone())),
        (None, Some(serde_json::Value::Array(list))) if ids => list
            .iter()
            .map(|id| id.as_u64().and_then(|id| u32::try_from(id).ok()))
            .collect::<Option<Vec<u32>>>()
            .map(InputLine::Ids)
            .ok_or_else(|| "\"input_ids\" must be a list of token ids (integers from 0 to 4294967295)".into()),
        _ => Err(format!("a JSON line needs {wanted}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_text_or_json_with_text_or_ids() {
        assert_eq!(parse_input_line("plain {text}", false), Ok(InputLine::Text("plain {text}".into())));
        assert_eq!(parse_input_line(r#" {"text": "a"}"#, false), Ok(InputLine::Text("a".into())));
        assert_eq!(parse_input_line(r#"{"input_ids": [0, 7]}"#, true), Ok(InputLine::Ids(vec![0, 7])));
        assert!(parse_input_line(r#"{"input_ids": [0, 7]}"#, false).unwrap_err().contains("\"text\""));
        assert!(parse_input_line(r#"{"input_ids": [-1]}"#, true).unwrap_err().contains("input_ids"));
        assert!(parse_input_line(r#"{"input_ids": [4294967296]}"#, true).unwrap_err().contains("input_ids"));
        assert!(parse_input_line(r#"{"text": "a", "input_ids": [1]}"#, true).unwrap_err().contains("one of them"));
        assert!(parse_input_line(r#"{"text": 7}"#, false).unwrap_err().contains("\"text\""));
        assert!(parse_input_line("{not json", false).unwrap_err().contains("not JSON"));
        assert!(parse_input_line("{} ", false).unwrap_err().contains("\"text\""));
    }
}
