//! WordPiece tokenization matches HF `BertTokenizerFast`, whether built from `tokenizer.json`
//! or from `vocab.txt` + `tokenizer_config.json`.

use sesame_tests::fixtures_dir;
use sesame_text::{Tokenizer, TokenizerConfig, TokenizerError};

#[derive(serde::Deserialize)]
struct Case {
    text: String,
    pair: Option<String>,
    input_ids: Vec<i64>,
    token_type_ids: Vec<i64>,
    truncated_12: Vec<i64>,
}

fn cases() -> Vec<Case> {
    let path = fixtures_dir().join("bert/base-fill-mask/encodings.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn tokenizers() -> Vec<(&'static str, Tokenizer)> {
    let dir = fixtures_dir().join("bert/base-fill-mask");
    let config = TokenizerConfig::read(&dir.join("tokenizer_config.json")).unwrap();
    vec![
        ("tokenizer.json", Tokenizer::from_tokenizer_json(&dir.join("tokenizer.json"), &config).unwrap()),
        ("vocab.txt", Tokenizer::from_vocab_txt(&dir.join("vocab.txt"), &config).unwrap()),
    ]
}

#[test]
fn wordpiece_encodings_match_transformers() {
    for (source, tok) in tokenizers() {
        for case in cases() {
            let (batch, truncated) = match &case.pair {
                Some(pair) => (
                    tok.encode_pairs(&[(&case.text, pair)], 512, false).unwrap(),
                    tok.encode_pairs(&[(&case.text, pair)], 12, true).unwrap(),
                ),
                None => (tok.encode(&[&case.text], 512, false).unwrap(), tok.encode(&[&case.text], 12, true).unwrap()),
            };
            assert_eq!(batch.input_ids, case.input_ids, "{source}: ids of {:?}", case.text);
            assert_eq!(batch.token_type_ids, case.token_type_ids, "{source}: token types of {:?}", case.text);
            assert!(batch.attention_mask.iter().all(|&m| m == 1));
            assert_eq!(truncated.input_ids, case.truncated_12, "{source}: truncated ids of {:?}", case.text);
        }
    }
}

#[test]
fn batches_are_padded_to_the_longest_with_a_mask() {
    for (source, tok) in tokenizers() {
        let all = cases();
        let texts: Vec<&str> = all.iter().filter(|c| c.pair.is_none()).map(|c| c.text.as_str()).collect();
        let batch = tok.encode(&texts, 512, false).unwrap();
        let longest = all.iter().filter(|c| c.pair.is_none()).map(|c| c.input_ids.len()).max().unwrap();
        assert_eq!((batch.batch, batch.seq), (texts.len(), longest), "{source}");
        for (row, case) in all.iter().filter(|c| c.pair.is_none()).enumerate() {
            let n = case.input_ids.len();
            assert_eq!(&batch.ids(row)[..n], &case.input_ids[..], "{source}");
            assert!(batch.ids(row)[n..].iter().all(|&id| id == 0), "{source}: padding id");
            let mask = &batch.attention_mask[row * batch.seq..(row + 1) * batch.seq];
            assert_eq!(mask.iter().sum::<i64>() as usize, n, "{source}: mask of row {row}");
        }
    }
}

#[test]
fn bad_text_input_is_a_clear_error() {
    let (_, tok) = tokenizers().remove(0);
    assert!(matches!(tok.encode(&[], 512, true), Err(TokenizerError::EmptyBatch)));
    let long = "the cat sat on the mat ".repeat(20);
    match tok.encode(&[&long], 16, false) {
        Err(TokenizerError::TooLong { index: 0, max: 16, len }) => assert!(len > 16),
        other => panic!("expected TooLong, got {other:?}"),
    }
    assert_eq!(tok.encode(&[&long], 16, true).unwrap().seq, 16);
    let missing = std::env::temp_dir().join("sesame-no-tokenizer");
    std::fs::create_dir_all(&missing).unwrap();
    assert!(matches!(Tokenizer::from_dir(&missing), Err(TokenizerError::NotFound { .. })));
    let broken = std::env::temp_dir().join("sesame-broken-tokenizer");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("tokenizer.json"), "{ not json").unwrap();
    assert!(matches!(Tokenizer::from_dir(&broken), Err(TokenizerError::Load { .. })));
    std::fs::remove_file(broken.join("tokenizer.json")).unwrap();
    std::fs::write(broken.join("vocab.txt"), "a\nb\n[UNK]\n").unwrap();
    assert!(matches!(Tokenizer::from_dir(&broken), Err(TokenizerError::MissingSpecialToken { .. })));
}
