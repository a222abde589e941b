//! Rows of texts for training embedding models and rerankers, in sentence-transformers'
//! conventions (`SentenceTransformerTrainer`'s datasets): every column is an input text, in
//! the file's order (`anchor, positive[, negative…]`, `sentence1, sentence2`, `query,
//! passage`), except one named `label` or `score`, the row's number (a similarity score, a 0/1
//! label). CSV or TSV with a header row, or JSON lines (one object a line, the same fields on
//! every line, in the order the first line writes them).
//!
//! Every problem is reported with the file, the line and the column.

use std::path::{Path, PathBuf};

use crate::labelled::{at, csv_error, lines, LabelledError};

/// The column names sentence-transformers reads as the label.
pub const LABEL_COLUMNS: [&str; 2] = ["label", "score"];

/// A file of text rows.
#[derive(Clone, Debug, PartialEq)]
pub struct TextRows {
    /// The file.
    pub path: PathBuf,
    /// The text columns' names, in order.
    pub columns: Vec<String>,
    /// The label column's name (`label` or `score`), if the file has one.
    pub label: Option<String>,
    /// The rows, in file order.
    pub rows: Vec<TextRow>,
}

/// One row: a text per text column, and its label.
#[derive(Clone, Debug, PartialEq)]
pub struct TextRow {
    /// The texts, in the columns' order.
    pub texts: Vec<String>,
    /// The label or score (present exactly when the file has a label column).
    pub label: Option<f64>,
    /// 1-based line of the row in its file.
    pub line: u64,
}

/// Read `path` (`.csv`, `.tsv`, `.jsonl`), refusing an empty file, a file without a text column,
/// an empty text and a label that is not a finite number.
pub fn read_text_rows(path: &Path) -> Result<TextRows, LabelledError> {
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).unwrap_or_default();
    let (header, rows) = match ext.as_str() {
        "csv" => read_delimited(path, b',')?,
        "tsv" | "tab" => read_delimited(path, b'\t')?,
        "jsonl" | "json" => read_json_lines(path)?,
        _ => return Err(file(path, "unknown format: name it .csv, .tsv or .jsonl")),
    };
    if rows.is_empty() {
        return Err(file(path, "no rows"));
    }
    let label_at = header.iter().position(|h| LABEL_COLUMNS.contains(&h.as_str()));
    if let Some(second) = header.iter().enumerate().filter(|(_, h)| LABEL_COLUMNS.contains(&h.as_str())).nth(1) {
        return Err(file(path, format!("two label columns ({:?} and {:?}); keep one", header[label_at.unwrap_or(0)], second.1)));
    }
    let columns: Vec<String> = header.iter().enumerate().filter(|(i, _)| Some(*i) != label_at).map(|(_, h)| h.clone()).collect();
    if columns.is_empty() {
        return Err(file(path, "no text column (every column but `label` or `score` is a text)"));
    }
    let mut out = Vec::with_capacity(rows.len());
    for (line, cells) in rows {
        let mut texts = Vec::with_capacity(columns.len());
        let mut label = None;
        for (i, (name, cell)) in header.iter().zip(cells).enumerate() {
            if Some(i) == label_at {
                let value: f64 = cell.trim().parse().map_err(|_| at(path, line, format!("column {name:?}: {cell:?} is not a number")))?;
                if !value.is_finite() {
                    return Err(at(path, line, format!("column {name:?}: {cell:?} is not a finite number")));
                }
                label = Some(value);
            } else if cell.trim().is_empty() {
                return Err(at(path, line, format!("column {name:?} is empty")));
            } else {
                texts.push(cell);
            }
        }
        out.push(TextRow { texts, label, line });
    }
    Ok(TextRows { path: path.into(), columns, label: label_at.map(|i| header[i].clone()), rows: out })
}

fn file(path: &Path, reason: impl Into<String>) -> LabelledError {
    LabelledError::File { path: path.into(), reason: reason.into() }
}

/// The header and each row's line and cells.
type Cells = (Vec<String>, Vec<(u64, Vec<String>)>);

fn read_delimited(path: &Path, delimiter: u8) -> Result<Cells, LabelledError> {
    let mut reader = csv::ReaderBuilder::new().delimiter(delimiter).flexible(false).from_path(path).map_err(|e| csv_error(path, e))?;
    let header: Vec<String> = reader.headers().map_err(|e| csv_error(path, e))?.iter().map(|h| h.trim().to_string()).collect();
    if let Some(name) = header.iter().enumerate().find_map(|(i, h)| header[..i].contains(h).then_some(h)) {
        return Err(at(path, 1, format!("column {name:?} appears twice in the header")));
    }
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| csv_error(path, e))?;
        let line = record.position().map_or(0, |p| p.line());
        rows.push((line, record.iter().map(str::to_string).collect()));
    }
    Ok((header, rows))
}

/// A JSON object's fields in the order the line writes them.
struct Fields(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut fields = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    fields.push(entry);
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// Each non-empty line of a JSON-lines file: its number and its object's fields, in the order
/// the line writes them.
type Objects = Vec<(u64, Vec<(String, serde_json::Value)>)>;

/// The [`Objects`] of the JSON-lines file `path`.
fn json_objects(path: &Path) -> Result<Objects, LabelledError> {
    let bytes = std::fs::read(path).map_err(|source| LabelledError::Io { path: path.into(), source })?;
    let mut objects = Vec::new();
    for item in lines(path, &bytes) {
        let (line, text) = item?;
        if text.trim().is_empty() {
            continue;
        }
        let Fields(fields) = serde_json::from_str(text).map_err(|e| at(path, line, format!("not a JSON object: {e}")))?;
        objects.push((line, fields));
    }
    Ok(objects)
}

fn read_json_lines(path: &Path) -> Result<Cells, LabelledError> {
    let mut header: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    for (line, fields) in json_objects(path)? {
        let names: Vec<String> = fields.iter().map(|(name, _)| name.clone()).collect();
        let header = header.get_or_insert_with(|| names.clone());
        let mut cells = Vec::with_capacity(header.len());
        for name in header.iter() {
            let value = fields.iter().find(|(n, _)| n == name).map(|(_, v)| v).ok_or_else(|| at(path, line, format!("no field {name:?}, which the first row has")))?;
            cells.push(match value {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) if LABEL_COLUMNS.contains(&name.as_str()) => n.to_string(),
                serde_json::Value::Bool(b) if LABEL_COLUMNS.contains(&name.as_str()) => u8::from(*b).to_string(),
                other => return Err(at(path, line, format!("field {name:?} is {other}, not a string"))),
            });
        }
        if let Some(extra) = names.iter().find(|n| !header.contains(n)) {
            return Err(at(path, line, format!("field {extra:?}, which the first row does not have")));
        }
        rows.push((line, cells));
    }
    Ok((header.unwrap_or_default(), rows))
}

/// A file of ranked lists: each row a query, its documents and a relevance label per
/// document, as sentence-transformers' listwise cross-encoder losses take them (`query`,
/// `docs`, `labels` columns).
#[derive(Clone, Debug, PartialEq)]
pub struct RankedLists {
    /// The file.
    pub path: PathBuf,
    /// The query's, the documents' and the labels' field names.
    pub columns: [String; 3],
    /// The rows, in file order.
    pub rows: Vec<RankedList>,
}

/// One query and its documents.
#[derive(Clone, Debug, PartialEq)]
pub struct RankedList {
    /// The query.
    pub query: String,
    /// Its documents, in the file's order.
    pub docs: Vec<String>,
    /// Each document's label (its relevance; larger is more relevant).
    pub labels: Vec<f64>,
    /// 1-based line of the row in its file.
    pub line: u64,
}

/// Whether `path` holds ranked lists: a JSON-lines file whose first row has a list field.
/// Reads the file only up to that row.
pub fn holds_ranked_lists(path: &Path) -> bool {
    use std::io::BufRead;
    let is_jsonl = path.extension().and_then(|e| e.to_str()).is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "jsonl" | "json"));
    let Some(file) = is_jsonl.then(|| std::fs::File::open(path).ok()).flatten() else { return false };
    let first = std::io::BufReader::new(file).lines().map_while(Result::ok).find(|l| !l.trim().is_empty());
    let object = first.and_then(|l| serde_json::from_str::<serde_json::Value>(&l).ok());
    object.as_ref().and_then(serde_json::Value::as_object).is_some_and(|o| o.values().any(serde_json::Value::is_array))
}

/// Read `path`, JSON lines of `{"query": "…", "docs": ["…", …], "labels": [1, 0, …]}`: a string
/// field, the query; a list of strings, the documents; a list of numbers named `labels` or
/// `scores`, one per document (any names for the first two; the same fields on every line).
/// Refuses an empty file, a missing or extra field, an empty text, an empty list, a label that
/// is not a finite number and lists of different lengths, naming the file and the line.
pub fn read_ranked_lists(path: &Path) -> Result<RankedLists, LabelledError> {
    let mut columns: Option<[String; 3]> = None;
    let mut rows = Vec::new();
    for (line, fields) in json_objects(path)? {
        let columns = match &columns {
            Some(c) => c.clone(),
            None => {
                let named = |pick: &dyn Fn(&(String, serde_json::Value)) -> bool, what: &str| {
                    fields.iter().find(|f| pick(f)).map(|(n, _)| n.clone()).ok_or_else(|| at(path, line, format!("no {what} field")))
                };
                let is_labels = |name: &str| LABEL_COLUMNS.contains(&name) || name == "labels" || name == "scores";
                let query = named(&|(n, v)| v.is_string() && !is_labels(n), "query (a string)")?;
                let docs = named(&|(n, v)| v.is_array() && !is_labels(n), "documents (a list of strings)")?;
                let labels = named(&|(n, _)| is_labels(n), "`labels` (a number per document)")?;
                columns.insert([query, docs, labels]).clone()
            }
        };
        if let Some((extra, _)) = fields.iter().find(|(n, _)| !columns.contains(n)) {
            return Err(at(path, line, format!("field {extra:?}: a row is a query {:?}, documents {:?} and labels {:?}", columns[0], columns[1], columns[2])));
        }
        let field = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v).ok_or_else(|| at(path, line, format!("no field {name:?}, which the first row has")));
        let query = match field(&columns[0])? {
            serde_json::Value::String(s) if !s.trim().is_empty() => s.clone(),
            serde_json::Value::String(_) => return Err(at(path, line, format!("field {:?} is empty", columns[0]))),
            other => return Err(at(path, line, format!("field {:?} is {other}, not a string", columns[0]))),
        };
        let list = |name: &str| match field(name)? {
            serde_json::Value::Array(items) if !items.is_empty() => Ok(items.clone()),
            serde_json::Value::Array(_) => Err(at(path, line, format!("field {name:?} is an empty list"))),
            other => Err(at(path, line, format!("field {name:?} is {other}, not a list"))),
        };
        let docs = list(&columns[1])?
            .into_iter()
            .enumerate()
            .map(|(i, d)| match d {
                serde_json::Value::String(s) if !s.trim().is_empty() => Ok(s),
                other => Err(at(path, line, format!("field {:?}, item {i}: {other} is not a text", columns[1]))),
            })
            .collect::<Result<Vec<String>, _>>()?;
        let labels = list(&columns[2])?
            .into_iter()
            .enumerate()
            .map(|(i, l)| l.as_f64().filter(|v| v.is_finite()).ok_or_else(|| at(path, line, format!("field {:?}, item {i}: {l} is not a finite number", columns[2]))))
            .collect::<Result<Vec<f64>, _>>()?;
        if labels.len() != docs.len() {
            return Err(at(path, line, format!("{} documents but {} labels", docs.len(), labels.len())));
        }
        rows.push(RankedList { query, docs, labels, line });
    }
    let Some(columns) = columns else { return Err(file(path, "no rows")) };
    Ok(RankedLists { path: path.into(), columns, rows })
}

/// A retrieval evaluation set as BEIR lays one out (and sentence-transformers'
/// `InformationRetrievalEvaluator` takes it): the queries, the corpus, and which documents
/// are relevant to which query.
#[derive(Clone, Debug, PartialEq)]
pub struct RetrievalFiles {
    /// A (query, relevant document) row per relevance judgement, columns `query` and
    /// `document`, each row's line that of its judgement in the qrels file (`path`).
    pub pairs: TextRows,
    /// Each row's query id and document id.
    pub pair_ids: Vec<(String, String)>,
    /// Every document of the corpus: its id and its text (BEIR's `title + " " + text`).
    pub corpus: Vec<(String, String)>,
}

/// Read a retrieval set in BEIR's layout from `dir`: `queries.jsonl` (`{"_id", "text"}` a line),
/// `corpus.jsonl` (`{"_id", "title", "text"}`, the title optional) and the relevance
/// judgements `qrels/dev.tsv`, else `qrels/test.tsv`, else the only `.tsv` in `qrels/` (a header,
/// then `query-id`, `corpus-id`, `score`, tab-separated; a score above 0 is relevant). Refuses
/// a missing file, a line without an id or a text, an id given twice, and a judgement naming a
/// query or document that is not there, naming the file and the line.
pub fn read_retrieval_dir(dir: &Path) -> Result<RetrievalFiles, LabelledError> {
    let queries_path = dir.join("queries.jsonl");
    let queries = read_id_texts(&queries_path, false)?;
    let corpus_path = dir.join("corpus.jsonl");
    let corpus = read_id_texts(&corpus_path, true)?;
    let qrels = qrels_file(dir)?;
    let query_text: std::collections::HashMap<&str, &str> = queries.iter().map(|(id, t)| (id.as_str(), t.as_str())).collect();
    let doc_text: std::collections::HashMap<&str, &str> = corpus.iter().map(|(id, t)| (id.as_str(), t.as_str())).collect();
    let bytes = std::fs::read(&qrels).map_err(|source| LabelledError::Io { path: qrels.clone(), source })?;
    let (mut rows, mut pair_ids) = (Vec::new(), Vec::new());
    let mut seen = std::collections::HashSet::new();
    // BEIR's loader skips the first line, the header.
    for item in lines(&qrels, &bytes).skip(1) {
        let (line, text) = item?;
        if text.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = text.split('\t').map(str::trim).collect();
        let [query, doc, score] = cells[..] else {
            return Err(at(&qrels, line, format!("{} tab-separated fields; a judgement is query-id, corpus-id, score", cells.len())));
        };
        let score: f64 = score.parse().ok().filter(|s: &f64| s.is_finite()).ok_or_else(|| at(&qrels, line, format!("score {score:?} is not a number")))?;
        let q = *query_text.get(query).ok_or_else(|| at(&qrels, line, format!("query-id {query:?} is not in {}", queries_path.display())))?;
        let d = *doc_text.get(doc).ok_or_else(|| at(&qrels, line, format!("corpus-id {doc:?} is not in {}", corpus_path.display())))?;
        if score <= 0.0 || !seen.insert((query.to_string(), doc.to_string())) {
            continue;
        }
        rows.push(TextRow { texts: vec![q.to_string(), d.to_string()], label: None, line });
        pair_ids.push((query.to_string(), doc.to_string()));
    }
    if rows.is_empty() {
        return Err(file(&qrels, "no judgement with a score above 0: no query has a relevant document"));
    }
    let pairs = TextRows { path: qrels, columns: vec!["query".into(), "document".into()], label: None, rows };
    Ok(RetrievalFiles { pairs, pair_ids, corpus })
}

/// The qrels file of a BEIR directory: `dev.tsv`, `test.tsv` or the only `.tsv` in `qrels/`.
fn qrels_file(dir: &Path) -> Result<PathBuf, LabelledError> {
    let qrels = dir.join("qrels");
    for split in ["dev.tsv", "test.tsv"] {
        if qrels.join(split).is_file() {
            return Ok(qrels.join(split));
        }
    }
    let tsv: Vec<PathBuf> = std::fs::read_dir(&qrels)
        .map_err(|source| LabelledError::Io { path: qrels.clone(), source })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tsv"))
        .collect();
    match &tsv[..] {
        [only] => Ok(only.clone()),
        [] => Err(file(&qrels, "no .tsv of relevance judgements (BEIR's qrels/dev.tsv or qrels/test.tsv)")),
        _ => Err(file(&qrels, "several .tsv files and neither dev.tsv nor test.tsv: keep the split to evaluate on")),
    }
}

/// The `_id` and text of each line of a BEIR JSON-lines file; a document's `title`, when it
/// has one, goes before its text.
fn read_id_texts(path: &Path, titled: bool) -> Result<Vec<(String, String)>, LabelledError> {
    let bytes = std::fs::read(path).map_err(|source| LabelledError::Io { path: path.into(), source })?;
    let mut out = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for item in lines(path, &bytes) {
        let (line, text) = item?;
        if text.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| at(path, line, format!("not a JSON object: {e}")))?;
        let id = match value.get("_id") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            _ => return Err(at(path, line, "no `_id` (a string or a number)")),
        };
        let field = |name: &str| value.get(name).and_then(serde_json::Value::as_str).unwrap_or("");
        let body = match (titled, field("title").trim()) {
            (true, title) if !title.is_empty() => format!("{title} {}", field("text")).trim().to_string(),
            _ => field("text").trim().to_string(),
        };
        if body.is_empty() {
            return Err(at(path, line, format!("`_id` {id:?} has no `text`")));
        }
        if !ids.insert(id.clone()) {
            return Err(at(path, line, format!("`_id` {id:?} appears twice")));
        }
        out.push((id, body));
    }
    if out.is_empty() {
        return Err(file(path, "no rows"));
    }
    Ok(out)

}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sesame-text-rows-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn columns_are_texts_in_file_order_and_label_or_score_is_the_number() {
        let rows = read_text_rows(&write("triplets.csv", "anchor,positive,negative\nq,p,n\nq2,\"p, 2\",n2\n")).unwrap();
        assert_eq!((rows.columns.as_slice(), rows.label.as_deref()), (&["anchor".to_string(), "positive".into(), "negative".into()][..], None));
        assert_eq!(rows.rows[1], TextRow { texts: vec!["q2".into(), "p, 2".into(), "n2".into()], label: None, line: 3 });
        let scored = read_text_rows(&write("scored.tsv", "score\tsentence1\tsentence2\n0.5\ta\tb\n")).unwrap();
        assert_eq!((scored.columns, scored.label.as_deref(), scored.rows[0].label, scored.rows[0].texts.clone()), (vec!["sentence1".to_string(), "sentence2".into()], Some("score"), Some(0.5), vec!["a".to_string(), "b".into()]));
        // JSON lines keep the first line's field order, not the alphabet's.
        let json = read_text_rows(&write("pairs.jsonl", "{\"query\": \"q\", \"passage\": \"p\", \"label\": 1}\n\n{\"label\": true, \"passage\": \"p2\", \"query\": \"q2\"}\n")).unwrap();
        assert_eq!(json.columns, vec!["query".to_string(), "passage".into()]);
        assert_eq!(json.rows[1], TextRow { texts: vec!["q2".into(), "p2".into()], label: Some(1.0), line: 3 });
    }

    #[test]
    fn a_bad_row_or_file_is_refused_naming_the_file_line_and_column() {
        let err = |name: &str, text: &str| read_text_rows(&write(name, text)).unwrap_err().to_string();
        assert!(err("e1.csv", "anchor,positive\nq,\n").ends_with("e1.csv:2: column \"positive\" is empty"), "{}", err("e1.csv", "anchor,positive\nq,\n"));
        assert!(err("e2.csv", "a,b,score\nx,y,high\n").ends_with("e2.csv:2: column \"score\": \"high\" is not a number"));
        assert!(err("e3.csv", "a,b,score\nx,y,NaN\n").ends_with("e3.csv:2: column \"score\": \"NaN\" is not a finite number"));
        assert!(err("e4.csv", "a,b\n").ends_with("e4.csv: no rows"));
        assert!(err("e5.csv", "label\n1\n").ends_with("e5.csv: no text column (every column but `label` or `score` is a text)"));
        assert!(err("e6.jsonl", "{\"a\": \"x\", \"b\": \"y\"}\n{\"a\": \"x\"}\n").ends_with("e6.jsonl:2: no field \"b\", which the first row has"));
        assert!(err("e7.jsonl", "{\"a\": \"x\", \"b\": 3}\n").ends_with("e7.jsonl:1: field \"b\" is 3, not a string"));
        assert!(err("e8.csv", "a,a\nx,y\n").ends_with("e8.csv:1: column \"a\" appears twice in the header"));
        assert!(err("e9.csv", "label,a,score\n1,x,2\n").contains("two label columns"));
        assert!(err("e10.txt", "x\n").ends_with("unknown format: name it .csv, .tsv or .jsonl"));
    }

    #[test]
    fn a_beir_directory_reads_as_query_document_pairs_and_refuses_bad_lines_by_file_and_line() {
        let dir = std::env::temp_dir().join(format!("sesame-text-beir-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("qrels")).unwrap();
        let put = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        put("queries.jsonl", "{\"_id\": \"q1\", \"text\": \"who?\"}\n{\"_id\": 2, \"text\": \"what?\"}\n");
        put("corpus.jsonl", "{\"_id\": \"d1\", \"title\": \"T\", \"text\": \"one\"}\n{\"_id\": \"d2\", \"text\": \"two\"}\n{\"_id\": \"d3\", \"title\": \"\", \"text\": \"three\"}\n");
        put("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n2\td3\t2\nq1\td2\t0\n");
        let files = read_retrieval_dir(&dir).unwrap();
        assert_eq!(files.corpus, vec![("d1".to_string(), "T one".to_string()), ("d2".into(), "two".into()), ("d3".into(), "three".into())]);
        assert_eq!(files.pair_ids, vec![("q1".to_string(), "d1".to_string()), ("2".into(), "d3".into())]);
        assert_eq!(files.pairs.rows[1], TextRow { texts: vec!["what?".into(), "three".into()], label: None, line: 3 });
        // dev.tsv, when there, is the split.
        put("qrels/dev.tsv", "query-id\tcorpus-id\tscore\nq1\td2\t1\n");
        assert_eq!(read_retrieval_dir(&dir).unwrap().pair_ids, vec![("q1".to_string(), "d2".to_string())]);
        let refused = |name: &str, text: &str| {
            let before = std::fs::read_to_string(dir.join(name)).unwrap();
            put(name, text);
            let message = read_retrieval_dir(&dir).unwrap_err().to_string();
            put(name, &before);
            message
        };
        let at = |name: &str, line: u64| format!("{}:{line}: ", dir.join(name).display());
        assert_eq!(refused("qrels/dev.tsv", "h\nq9\td1\t1\n"), format!("{}query-id \"q9\" is not in {}", at("qrels/dev.tsv", 2), dir.join("queries.jsonl").display()));
        assert_eq!(refused("qrels/dev.tsv", "h\nq1\td1\n"), format!("{}2 tab-separated fields; a judgement is query-id, corpus-id, score", at("qrels/dev.tsv", 2)));
        assert_eq!(refused("qrels/dev.tsv", "h\nq1\td1\thigh\n"), format!("{}score \"high\" is not a number", at("qrels/dev.tsv", 2)));
        assert!(refused("qrels/dev.tsv", "h\nq1\td1\t0\n").ends_with("dev.tsv: no judgement with a score above 0: no query has a relevant document"));
        assert_eq!(refused("corpus.jsonl", "{\"_id\": \"d1\", \"text\": \"a\"}\n{\"_id\": \"d1\", \"text\": \"b\"}\n"), format!("{}`_id` \"d1\" appears twice", at("corpus.jsonl", 2)));
        assert_eq!(refused("queries.jsonl", "{\"text\": \"who?\"}\n"), format!("{}no `_id` (a string or a number)", at("queries.jsonl", 1)));
        assert_eq!(refused("queries.jsonl", "{\"_id\": \"q1\", \"text\": \" \"}\n"), format!("{}`_id` \"q1\" has no `text`", at("queries.jsonl", 1)));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(read_retrieval_dir(&dir).unwrap_err().to_string().starts_with(&dir.join("queries.jsonl").display().to_string()));
    }

    #[test]
    fn ranked_lists_read_as_query_documents_and_labels_and_bad_lines_are_refused_by_line() {
        let path = write("lists.jsonl", "{\"query\": \"q\", \"docs\": [\"a\", \"b\"], \"labels\": [1, 0.5]}\n\n{\"labels\": [0], \"query\": \"q2\", \"docs\": [\"c\"]}\n");
        assert!(holds_ranked_lists(&path));
        let lists = read_ranked_lists(&path).unwrap();
        assert_eq!(lists.columns, ["query".to_string(), "docs".into(), "labels".into()]);
        assert_eq!(lists.rows[1], RankedList { query: "q2".into(), docs: vec!["c".into()], labels: vec![0.0], line: 3 });
        assert!(!holds_ranked_lists(&write("pairs.jsonl", "{\"q\": \"a\", \"p\": \"b\"}\n")));
        let err = |name: &str, text: &str| read_ranked_lists(&write(name, text)).unwrap_err().to_string();
        let first = "{\"query\": \"q\", \"docs\": [\"a\"], \"labels\": [1]}\n";
        assert!(err("l1.jsonl", &format!("{first}{{\"query\": \"q\", \"docs\": [\"a\", \"b\"], \"labels\": [1]}}\n")).ends_with("l1.jsonl:2: 2 documents but 1 labels"));
        assert!(err("l2.jsonl", &format!("{first}{{\"query\": \"q\", \"docs\": [], \"labels\": []}}\n")).ends_with("l2.jsonl:2: field \"docs\" is an empty list"));
        assert!(err("l3.jsonl", &format!("{first}{{\"query\": \"q\", \"docs\": [\"a\", \" \"], \"labels\": [1, 0]}}\n")).ends_with("l3.jsonl:2: field \"docs\", item 1: \" \" is not a text"));
        assert!(err("l4.jsonl", &format!("{first}{{\"query\": \"q\", \"docs\": [\"a\"], \"labels\": [\"x\"]}}\n")).ends_with("l4.jsonl:2: field \"labels\", item 0: \"x\" is not a finite number"));
        assert!(err("l5.jsonl", &format!("{first}{{\"query\": \"q\", \"docs\": [\"a\"]}}\n")).ends_with("l5.jsonl:2: no field \"labels\", which the first row has"));
        assert!(err("l6.jsonl", "{\"query\": \"q\", \"docs\": [\"a\"]}\n").ends_with("l6.jsonl:1: no `labels` (a number per document) field"));
        assert!(err("l7.jsonl", "").ends_with("l7.jsonl: no rows"));
    }
}
