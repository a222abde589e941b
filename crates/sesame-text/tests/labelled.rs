//! Users' labelled files: formats, label kinds, and one clear line for each kind of bad input.

use std::path::PathBuf;

use sesame_text::labelled::{class_names, problem_type, read_rows, targets, Columns, LabelledError, ProblemType, RawLabel, Target};

fn file(name: &str, contents: &[u8]) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sesame-labelled-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn error(name: &str, contents: &[u8], columns: &Columns) -> String {
    let path = file(name, contents);
    let e = read_rows(&path, columns).and_then(|rows| problem_type(&path, &rows).map(|_| ())).unwrap_err();
    e.to_string().replace(&path.display().to_string(), name)
}

#[test]
fn csv_tsv_and_json_lines_give_the_same_rows() {
    let csv = file("a.csv", b"id,text,label\n1,\"Hello, world\",spam\n2,\"two\nlines\",ham\n");
    let tsv = file("a.tsv", b"text\tlabel\nHello, world\tspam\n\"two\nlines\"\tham\n");
    let jsonl = file("a.jsonl", b"{\"text\": \"Hello, world\", \"label\": \"spam\"}\n\n{\"text\": \"two\\nlines\", \"label\": \"ham\"}\n");
    let rows: Vec<_> = [csv, tsv, jsonl].iter().map(|p| read_rows(p, &Columns::default()).unwrap()).collect();
    for r in &rows {
        assert_eq!(r.iter().map(|r| (r.text.as_str(), r.label.clone())).collect::<Vec<_>>(), [
            ("Hello, world", RawLabel::Class("spam".into())),
            ("two\nlines", RawLabel::Class("ham".into()))
        ]);
    }
    // Lines are where each row starts.
    assert_eq!(rows[0].iter().map(|r| r.line).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(rows[2].iter().map(|r| r.line).collect::<Vec<_>>(), [1, 3]);
}

#[test]
fn label_kinds_are_read_as_run_classification_reads_them() {
    let path = file("kinds.jsonl", b"{\"text\": \"a\", \"label\": 2}\n{\"text\": \"b\", \"label\": 10}\n");
    let rows = read_rows(&path, &Columns::default()).unwrap();
    assert_eq!(problem_type(&path, &rows).unwrap(), ProblemType::SingleLabelClassification);
    // Integer classes sort as numbers.
    assert_eq!(class_names(&rows), ["2", "10"]);
    let path = file("floats.csv", b"text,label\na,1\nb,2.5\n");
    let rows = read_rows(&path, &Columns::default()).unwrap();
    assert_eq!(problem_type(&path, &rows).unwrap(), ProblemType::Regression);
    assert_eq!(targets(&path, &rows, ProblemType::Regression, &[]).unwrap(), [Target::Value(1.0), Target::Value(2.5)]);
    let path = file("sets.csv", b"text,label\na,\"[\"\"x\"\", \"\"y\"\"]\"\nb,[]\n");
    let rows = read_rows(&path, &Columns::default()).unwrap();
    assert_eq!(problem_type(&path, &rows).unwrap(), ProblemType::MultiLabelClassification);
    let classes = class_names(&rows);
    assert_eq!(classes, ["x", "y"]);
    assert_eq!(targets(&path, &rows, ProblemType::MultiLabelClassification, &classes).unwrap(), [Target::Classes(vec![true, true]), Target::Classes(vec![false, false])]);
    // Sentence pairs.
    let path = file("pairs.tsv", b"premise\thypothesis\tgold\nA man.\tA person.\tentailment\n");
    let columns = Columns { text: "premise".into(), pair: Some("hypothesis".into()), label: "gold".into() };
    let rows = read_rows(&path, &columns).unwrap();
    assert_eq!((rows[0].text.as_str(), rows[0].pair.as_deref()), ("A man.", Some("A person.")));
}

#[test]
fn bad_input_names_the_file_line_and_column() {
    let columns = Columns::default();
    assert_eq!(error("a.csv", b"txt,label\nhi,x\n", &columns), "a.csv:1: no column \"text\" (--text-column); the header has [\"txt\", \"label\"]");
    assert_eq!(error("b.csv", b"text,label\nhi,x\n ,y\n", &columns), "b.csv:3: empty \"text\"");
    assert_eq!(error("c.csv", b"text,label\nhi,x\n\"open,y\nz,w\n", &columns), "c.csv:3: 1 fields where the header has 2 (unbalanced quotes?)");
    assert_eq!(error("d.csv", b"text,label\nhi,x\nho,3\n", &columns), "d.csv:3: the label column mixes types: an integer here, a string at line 2");
    assert_eq!(error("e.csv", b"text,label\nh\xffi,x\n", &columns), "e.csv:2: not UTF-8 text (field 1)");
    assert_eq!(error("f.jsonl", b"{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": 3, \"label\": \"x\"}\n", &columns), "f.jsonl:2: field \"text\" is 3, not a string");
    assert_eq!(error("g.jsonl", b"{\"text\": \"a\"}\n", &columns), "g.jsonl:1: no field \"label\" (--label-column)");
    assert_eq!(error("h.jsonl", b"{\"text\": \"a\", \"label\": \"x\"\n", &columns), "h.jsonl:1: not a JSON object: EOF while parsing an object at line 1 column 26");
    assert_eq!(error("i.txt", b"x", &columns), "i.txt: unknown format: name it .csv, .tsv or .jsonl");
    assert_eq!(error("j.csv", b"text,label\n", &columns), "j.csv: no labelled rows");
    // An evaluation label the training data never had.
    let path = file("eval.csv", b"text,label\nhi,spam\nho,eggs\n");
    let rows = read_rows(&path, &columns).unwrap();
    let e = targets(&path, &rows, ProblemType::SingleLabelClassification, &["ham".into(), "spam".into()]).unwrap_err();
    assert!(matches!(e, LabelledError::At { line: 3, .. }), "{e}");
    assert!(e.to_string().ends_with("eval.csv:3: label \"eggs\" does not occur in the training data (it has [\"ham\", \"spam\"])"), "{e}");
}
