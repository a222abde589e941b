//! Tagged sentences: CoNLL (tab- or space-separated columns, the tag last, `-DOCSTART-` and
//! blank lines between sentences, CRLF) and JSON lines give the same sentences; tag names and
//! ids; which tag sets are entity tags.

use sesame_text::labelled::RawLabel;
use sesame_text::tagged::{are_entity_tags, read_sentences, tag_ids, tag_names, TagFields};

fn file(name: &str, contents: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sesame-tagged-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn conll_and_json_lines_give_the_same_sentences() {
    let conll = file("a.conll", b"-DOCSTART- -X- -X- O\r\n\r\nEU NNP B-NP B-ORG\r\nrejects VBZ B-VP O\r\n\r\n\r\nPeter NNP B-NP B-PER\r\n");
    let tsv = file("a.tsv", b"EU\tB-ORG\nrejects\tO\n\nPeter\tB-PER\n\n");
    let jsonl = file("a.jsonl", b"{\"tokens\": [\"EU\", \"rejects\"], \"tags\": [\"B-ORG\", \"O\"]}\n\n{\"tokens\": [\"Peter\"], \"tags\": [\"B-PER\"]}\n");
    let read: Vec<_> = [conll, tsv, jsonl].iter().map(|p| read_sentences(p, &TagFields::default()).unwrap()).collect();
    for r in &read {
        let view: Vec<(Vec<&str>, Vec<RawLabel>)> = r.iter().map(|s| (s.tokens.iter().map(String::as_str).collect(), s.tags.clone())).collect();
        assert_eq!(view, [
            (vec!["EU", "rejects"], vec![RawLabel::Class("B-ORG".into()), RawLabel::Class("O".into())]),
            (vec!["Peter"], vec![RawLabel::Class("B-PER".into())]),
        ]);
    }
    assert_eq!(read[0][1].line, 7, "a sentence's line is its first token's");
    let names = tag_names(&read[0]);
    assert_eq!(names, ["B-ORG", "B-PER", "O"]);
    assert_eq!(tag_ids(std::path::Path::new("a"), &read[0], &names).unwrap(), [vec![0, 2], vec![1]]);
    assert!(are_entity_tags(&names));
    assert!(!are_entity_tags(&["NN".into(), "VB".into(), "O".into()]), "parts of speech are not entities");
    // Integer tags (a dataset's class ids) sort as numbers.
    let ids = file("b.jsonl", b"{\"words\": [\"a\", \"b\", \"c\"], \"ner\": [10, 2, 0]}\n");
    let fields = TagFields { tokens: "words".into(), tags: "ner".into() };
    assert_eq!(tag_names(&read_sentences(&ids, &fields).unwrap()), ["0", "2", "10"]);
    assert_eq!(read_sentences(&file("c.conll", b"\n\n"), &fields).unwrap_err().to_string(), format!("{}: no tagged sentences", file("c.conll", b"").display()));
}
