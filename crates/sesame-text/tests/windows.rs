//! `Tokenizer::encode_windows` against transformers' fast tokenizers with
//! `return_overflowing_tokens=True` and a stride (fixtures/windows, `make_fixtures.py --only
//! windows`): the same windows of ids, words and character offsets for BERT's WordPiece,
//! RoBERTa's byte-level BPE (split words with a prefix space) and ALBERT's Unigram, from a text,
//! from words given, and a question with windows of its context (`run_qa.py`'s features); and
//! the first-sub-token and context marks that tagging reads.

use std::path::{Path, PathBuf};

use sesame_text::{Tokenizer, Words};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn windows_match_transformers_overflowing_tokens() {
    let cases: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(repo().join("fixtures/windows/windows.json")).unwrap()).unwrap();
    assert_eq!(cases.len(), 9);
    for case in &cases {
        let name = format!("{} {}", case["tokenizer"], case["kind"]);
        let tokenizer = Tokenizer::from_dir(&repo().join(case["tokenizer"].as_str().unwrap())).unwrap();
        let (max_len, stride) = (case["max_length"].as_u64().unwrap() as usize, case["stride"].as_u64().unwrap() as usize);
        let words: Vec<&str> = case["input"].as_array().map(|w| w.iter().map(|w| w.as_str().unwrap()).collect()).unwrap_or_default();
        let input = if case["kind"] == "words" { Words::Split(&words) } else { Words::Text(case["input"].as_str().unwrap()) };
        let ours = match case["question"].as_str() {
            Some(question) => tokenizer.encode_question_windows(question, case["input"].as_str().unwrap(), max_len, stride).unwrap(),
            None => tokenizer.encode_windows(input, max_len, stride).unwrap(),
        };
        let theirs = case["windows"].as_array().unwrap();
        assert_eq!(ours.len(), theirs.len(), "{name}: windows");
        for (k, (a, b)) in ours.iter().zip(theirs).enumerate() {
            let ids: Vec<i64> = serde_json::from_value(b["input_ids"].clone()).unwrap();
            assert_eq!(a.encoded.input_ids, ids, "{name}: window {k} ids");
            let word_ids: Vec<Option<usize>> = serde_json::from_value(b["word_ids"].clone()).unwrap();
            assert_eq!(a.word_ids, word_ids, "{name}: window {k} words");
            let offsets: Vec<(usize, usize)> = serde_json::from_value(b["offsets"].clone()).unwrap();
            assert_eq!(a.offsets, offsets, "{name}: window {k} offsets");
        }
        // A word starts where its id changes in the whole text, so a window that opens inside
        // a word does not start it again; every word starts exactly once outside the overlaps.
        let mut all_words: Vec<Option<usize>> = ours[0].word_ids.clone();
        for w in &ours[1..] {
            let content: Vec<Option<usize>> = w.word_ids.iter().copied().filter(Option::is_some).collect();
            let tail = all_words.iter().rposition(Option::is_some).unwrap();
            all_words.truncate(tail + 1);
            all_words.extend(content.into_iter().skip(stride));
        }
        let words_seen = all_words.iter().flatten().max().unwrap() + 1;
        for w in &ours {
            for (j, word) in w.word_ids.iter().enumerate() {
                let previous = if j > 0 { w.word_ids[j - 1] } else { None };
                if w.word_start[j] {
                    assert!(word.is_some() && (previous != *word || previous.is_none()), "{name}: token {j} starts a word it continues");
                }
                assert_eq!(w.context[j] == 0.0, word.is_none(), "{name}: context of token {j}");
            }
        }
        let starts: usize = ours.iter().map(|w| w.word_start.iter().filter(|&&s| s).count()).sum();
        // Starts in the first `stride` content tokens of each later window (its overlap).
        let overlap_starts: usize = ours[1..].iter().map(|w| (0..w.context.len()).filter(|&j| w.context[j] > 0.0).take(stride).filter(|&j| w.word_start[j]).count()).sum();
        assert!(starts >= words_seen && starts - overlap_starts <= words_seen, "{name}: {starts} word starts for {words_seen} words");
    }
}

#[test]
fn a_stride_that_leaves_no_room_is_refused() {
    let tokenizer = Tokenizer::from_dir(&repo().join("fixtures/bert/base-fill-mask")).unwrap();
    let e = tokenizer.encode_windows(Words::Text("the cat sat on the mat"), 8, 6).unwrap_err().to_string();
    assert!(e.ends_with("a window of 8 tokens holds 6 besides its 2 special tokens, not more than the stride of 6"), "{e}");
    let one = tokenizer.encode_windows(Words::Text("the cat"), 8, 2).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].word_start, [false, true, true, false]);
}
