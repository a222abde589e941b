//! Tokenization matches transformers: BERT's WordPiece (from `tokenizer.json` or `vocab.txt`),
//! RoBERTa's byte-level BPE (from `tokenizer.json` or `vocab.json` + `merges.txt`) and ALBERT's
//! Unigram (from `tokenizer.json` or a bare SentencePiece `spiece.model`); tokenizers trained by
//! Sesame have transformers' pipelines.

use std::path::Path;

use sesame_tests::fixtures_dir;
use sesame_text::{Corpus, Tokenizer, TokenizerConfig, TokenizerError, TokenizerKind};

#[derive(serde::Deserialize)]
struct Case {
    text: String,
    pair: Option<String>,
    input_ids: Vec<i64>,
    token_type_ids: Vec<i64>,
    truncated_12: Vec<i64>,
}

fn cases_in(dir: &Path) -> Vec<Case> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("encodings.json")).unwrap()).unwrap()
}

fn cases() -> Vec<Case> {
    cases_in(&fixtures_dir().join("bert/base-fill-mask"))
}

/// Every case of `dir`'s `encodings.json`, whole and truncated to 12 tokens.
fn check_encodings(source: &str, tok: &Tokenizer, dir: &Path) {
    for case in cases_in(dir) {
        let (batch, truncated) = match &case.pair {
            Some(pair) => (
                tok.encode_pairs(&[(&case.text, pair)], 512, false).unwrap(),
                tok.encode_pairs(&[(&case.text, pair)], 12, true).unwrap(),
            ),
            None => (tok.encode(&[&case.text], 512, false).unwrap(), tok.encode(&[&case.text], 12, true).unwrap()),
        };
        assert_eq!(batch.input_ids, case.input_ids, "{source}: ids of {:?} ({:?})", case.text, batch.tokens);
        assert_eq!(batch.token_type_ids, case.token_type_ids, "{source}: token types of {:?}", case.text);
        assert!(batch.attention_mask.iter().all(|&m| m == 1));
        assert_eq!(truncated.input_ids, case.truncated_12, "{source}: truncated ids of {:?}", case.text);
    }
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
        check_encodings(source, &tok, &fixtures_dir().join("bert/base-fill-mask"));
    }
}

#[test]
fn byte_level_bpe_encodings_match_transformers() {
    let dir = fixtures_dir().join("roberta/tokenizer");
    let config = TokenizerConfig::read(&dir.join("tokenizer_config.json")).unwrap();
    let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
    check_encodings("tokenizer.json", &Tokenizer::from_dir(&dir).unwrap(), &dir);
    check_encodings("vocab.json + merges.txt", &Tokenizer::from_bpe_files(&vocab, &merges, &config).unwrap(), &dir);
    // Without tokenizer_config.json the special tokens are found under RoBERTa's names.
    let bare = Tokenizer::from_bpe_files(&vocab, &merges, &TokenizerConfig::default()).unwrap();
    check_encodings("vocab.json + merges.txt, no config", &bare, &dir);
    assert_eq!((bare.special_tokens().cls.as_str(), bare.special_tokens().pad.1, bare.mask_token_id().unwrap()), ("<s>", 1, 4));
}

#[test]
fn unigram_encodings_match_transformers() {
    let dir = fixtures_dir().join("albert/tokenizer");
    let tok = Tokenizer::from_dir(&dir).unwrap();
    check_encodings("tokenizer.json", &tok, &dir);
    assert_eq!((tok.special_tokens().pad.1, tok.special_tokens().cls.as_str(), tok.mask_token_id().unwrap()), (0, "[CLS]", 4));
}

#[test]
fn a_bare_spiece_model_encodes_as_transformers_albert_tokenizer() {
    // A file of Google's sentencepiece alone: control [CLS] [SEP] [MASK], a user-defined `--`,
    // the compiled nmt_nfkc table; then with a tokenizer_config.json keeping case and accents.
    let dir = fixtures_dir().join("albert/spiece");
    let tok = Tokenizer::from_dir(&dir).unwrap();
    check_encodings("spiece.model", &tok, &dir);
    let s = tok.special_tokens();
    assert_eq!((s.pad.1, s.unk.as_str(), s.cls.as_str(), tok.mask_token_id().unwrap()), (0, "<unk>", "[CLS]", 4));
    let cased = TokenizerConfig::read(&dir.join("cased/tokenizer_config.json")).unwrap();
    assert!(cased.keep_accents && !cased.do_lower_case);
    let cased_tok = Tokenizer::from_sentencepiece(&dir.join("spiece.model"), &cased).unwrap();
    check_encodings("spiece.model, cased", &cased_tok, &dir.join("cased"));
    // Saved, it reloads from tokenizer.json and tokenizer_config.json unchanged.
    let out = sesame_tests::Scratch::path("spiece");
    cased_tok.save(&out, &cased).unwrap();
    check_encodings("spiece.model, cased, saved", &Tokenizer::from_dir(&out).unwrap(), &dir.join("cased"));
    std::fs::remove_dir_all(&out).unwrap();

    let err = Tokenizer::from_sentencepiece(&dir.join("encodings.json"), &TokenizerConfig::default()).unwrap_err();
    assert!(matches!(err, TokenizerError::Load { .. }) && err.to_string().contains("not a SentencePiece model"), "{err}");
    let mut roberta = TokenizerConfig::default();
    roberta.tokenizer_class = Some("RobertaTokenizer".into());
    let err = Tokenizer::from_sentencepiece(&dir.join("spiece.model"), &roberta).unwrap_err();
    assert!(err.to_string().contains("RobertaTokenizer"), "{err}");
}

/// A tokenizer trained by Sesame writes the normalizer, pre-tokenizer, post-processor, decoder
/// and special tokens that transformers' own class builds (the fixtures come from
/// `RobertaTokenizer` / `AlbertTokenizer`), and the vocabulary files transformers reads.
#[test]
fn trained_tokenizers_have_the_transformers_pipeline() {
    let corpus = Corpus::read(&fixtures_dir().join("../data/moby-dick.txt")).unwrap();
    let corpus = Corpus { documents: corpus.documents.into_iter().take(10).collect() };
    for (kind, family) in [(TokenizerKind::ByteLevelBpe, "roberta"), (TokenizerKind::Unigram, "albert")] {
        let tok = Tokenizer::train(kind, corpus.sentences(), 500, &kind.config()).unwrap();
        assert!((400..=500).contains(&tok.vocab_size()), "{kind:?}: {} tokens", tok.vocab_size());
        let out = sesame_tests::Scratch::path(&format!("trained-{family}"));
        tok.save(&out, &kind.config()).unwrap();
        let json = |p: &Path| serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(p).unwrap()).unwrap();
        let (ours, theirs) = (json(&out.join("tokenizer.json")), json(&fixtures_dir().join(family).join("tokenizer/tokenizer.json")));
        for key in ["normalizer", "pre_tokenizer", "post_processor", "decoder"] {
            assert_eq!(ours[key], theirs[key], "{kind:?}: {key}");
        }
        let specials = |v: &serde_json::Value| -> Vec<serde_json::Value> { v["added_tokens"].as_array().unwrap().clone() };
        let mut theirs_specials = specials(&theirs);
        if kind == TokenizerKind::ByteLevelBpe {
            // `<mask>` takes the space before it, as in roberta-base's and bart-base's
            // tokenizer.json (transformers' class built from bare vocabulary files does not).
            theirs_specials[4]["lstrip"] = true.into();
        }
        assert_eq!(specials(&ours), theirs_specials, "{kind:?}: special tokens, ids and flags");
        let config = json(&out.join("tokenizer_config.json"));
        assert_eq!(config["tokenizer_class"], kind.class());
        if kind == TokenizerKind::ByteLevelBpe {
            // vocab.json + merges.txt rebuild the same tokenizer.
            let rebuilt = Tokenizer::from_bpe_files(&out.join("vocab.json"), &out.join("merges.txt"), &TokenizerConfig::read(&out.join("tokenizer_config.json")).unwrap()).unwrap();
            let text = ["Call me Ishmael, said the <mask>.", "naïve café"];
            assert_eq!(rebuilt.encode(&text, 64, false).unwrap(), tok.encode(&text, 64, false).unwrap());
        }
        std::fs::remove_dir_all(&out).unwrap();
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
        // Encoded one by one and padded in any grouping: the same batch as encoding the group.
        let each = tok.encode_each(&texts, 512, false).unwrap();
        let pick: Vec<usize> = (0..texts.len()).rev().step_by(2).collect();
        let padded = tok.pad(&pick.iter().map(|&i| &each[i]).collect::<Vec<_>>()).unwrap();
        let group: Vec<&str> = pick.iter().map(|&i| texts[i]).collect();
        assert_eq!(padded, tok.encode(&group, 512, false).unwrap(), "{source}: a group padded from single encodings");
        assert_eq!(padded.seq, pick.iter().map(|&i| each[i].len()).max().unwrap(), "{source}: the group pads to its own longest");
        assert!(tok.pad(&[]).is_err(), "{source}: an empty group");
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

#[test]
fn a_corrupt_precompiled_table_is_an_error_naming_the_file_not_a_panic() {
    // The tokenizers crate panics on a precompiled normalisation table it cannot parse; the
    // panic is contained and reported as a load error naming the file.
    let source = sesame_tests::fixtures_dir().join("albert/spiece");
    let tokenizer = sesame_text::Tokenizer::from_dir(&source).unwrap();
    let dir = sesame_tests::Scratch::path("corrupt-charsmap");
    let config = sesame_text::TokenizerConfig::read(&source.join("tokenizer_config.json")).unwrap();
    tokenizer.save(&dir, &config).unwrap();
    let path = dir.join("tokenizer.json");
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    fn cut(v: &mut serde_json::Value) -> bool {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(table)) = map.get_mut("precompiled_charsmap") {
                    table.truncate(table.len() / 12 * 4);
                    return true;
                }
                map.values_mut().any(cut)
            }
            serde_json::Value::Array(items) => items.iter_mut().any(cut),
            _ => false,
        }
    }
    assert!(cut(&mut json), "the ALBERT tokenizer has a precompiled table");
    std::fs::write(&path, json.to_string()).unwrap();
    let err = sesame_text::Tokenizer::from_dir(&dir).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json") || err.contains(dir.to_str().unwrap()), "{err}");
    assert!(err.contains("precompiled_charsmap"), "{err}");
}

/// A trained tokenizer depends only on the corpus and the settings: trained twice, on one
/// thread and on four, every kind writes the same files (tokenizers' own trainers break ties
/// in a randomly seeded hash map's order); WordPiece ids follow the canonical order (specials
/// first, then shortest first, then by text).
#[test]
fn trained_tokenizers_depend_only_on_the_corpus_and_settings() {
    let corpus = Corpus::read(&fixtures_dir().join("../data/moby-dick.txt")).unwrap();
    let corpus = Corpus { documents: corpus.documents.into_iter().take(10).collect() };
    let files = |kind: TokenizerKind, threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let tok = pool.install(|| Tokenizer::train(kind, corpus.sentences(), 500, &kind.config()).unwrap());
        let out = sesame_tests::Scratch::path(&format!("trained-{kind:?}-{threads}"));
        tok.save(&out, &kind.config()).unwrap();
        let mut files = std::collections::BTreeMap::new();
        for entry in std::fs::read_dir(&out).unwrap() {
            let path = entry.unwrap().path();
            files.insert(path.file_name().unwrap().to_string_lossy().to_string(), std::fs::read_to_string(&path).unwrap());
        }
        std::fs::remove_dir_all(&out).unwrap();
        files
    };
    for kind in [TokenizerKind::WordPiece, TokenizerKind::ByteLevelBpe, TokenizerKind::Unigram] {
        let (one, four, again) = (files(kind, 1), files(kind, 4), files(kind, 4));
        assert!(one.contains_key("tokenizer.json"), "{kind:?}: {:?}", one.keys());
        assert_eq!(one, four, "{kind:?}: one thread and four train different tokenizers");
        assert_eq!(four, again, "{kind:?}: trained twice, different tokenizers");
        let json: serde_json::Value = serde_json::from_str(&one["tokenizer.json"]).unwrap();
        let size = match &json["model"]["vocab"] {
            serde_json::Value::Object(map) => map.len(),
            serde_json::Value::Array(items) => items.len(),
            other => panic!("{kind:?}: vocab {other}"),
        };
        assert!((450..=500).contains(&size), "{kind:?}: {size} tokens for 500 asked");
    }
    let json: serde_json::Value = serde_json::from_str(&files(TokenizerKind::WordPiece, 2)["tokenizer.json"]).unwrap();
    let mut ids: Vec<(String, u64)> = json["model"]["vocab"].as_object().unwrap().iter().map(|(t, id)| (t.clone(), id.as_u64().unwrap())).collect();
    ids.sort_by_key(|(_, id)| *id);
    let specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
    assert_eq!(ids.iter().take(5).map(|(t, _)| t.as_str()).collect::<Vec<_>>(), specials);
    let key = |t: &str| {
        let stem = t.strip_prefix("##");
        (stem.unwrap_or(t).chars().count(), stem.is_some(), t.to_string())
    };
    let in_order = ids[5..].windows(2).all(|w| key(&w[0].0) < key(&w[1].0));
    assert!(in_order, "WordPiece ids are not in the canonical order: {:?}", &ids[5..60]);
}

#[test]
fn a_precompiled_trie_pointing_past_its_end_is_refused_at_load() {
    use sesame_tests::broken::*;
    let base = sesame_tests::Scratch::path("trie");
    let json = base.join("json");
    tokenizer_json_with_table(&json, TRIE_PAST_ITS_END);
    let err = Tokenizer::from_dir(&json).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json") && err.contains("precompiled_charsmap") && err.contains("trie"), "{err}");
    let spiece = base.join("spiece");
    spiece_model_with_trie_past_its_end(&spiece);
    let err = Tokenizer::from_dir(&spiece).unwrap_err().to_string();
    assert!(err.contains("spiece.model") && err.contains("precompiled_charsmap") && err.contains("trie"), "{err}");
    // The real tables pass the same check, and still encode as before.
    let table = sesame_text::sentencepiece::SentencePieceModel::read(&fixtures_dir().join("albert/spiece/spiece.model")).unwrap().precompiled_charsmap.unwrap();
    sesame_text::sentencepiece::check_precompiled_charsmap(&table).unwrap();
    std::fs::remove_dir_all(&base).unwrap();
}

/// A post-processor special token with fewer ids than tokens (found by fuzzing `tokenizer.json`:
/// the tokenizers crate loads it, and its encodings then hold fewer ids than tokens, which
/// panicked in padding) is refused at load, naming the file and the field.
#[test]
fn a_post_processor_token_with_ids_and_tokens_of_different_lengths_is_refused_at_load() {
    let source = fixtures_dir().join("bert/base-fill-mask");
    let dir = sesame_tests::Scratch::dir("misaligned-specials");
    std::fs::copy(source.join("tokenizer_config.json"), dir.join("tokenizer_config.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(source.join("tokenizer.json")).unwrap()).unwrap();
    // Unchanged, the file loads and pads a batch.
    std::fs::write(dir.join("tokenizer.json"), json.to_string()).unwrap();
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    let batch = tokenizer.encode(&["a cat", "the whale sank the boat"], 16, true).unwrap();
    assert_eq!(batch.input_ids.len(), batch.tokens.iter().map(Vec::len).sum::<usize>());
    json["post_processor"]["special_tokens"]["[CLS]"]["ids"] = serde_json::json!([]);
    std::fs::write(dir.join("tokenizer.json"), json.to_string()).unwrap();
    let err = Tokenizer::from_dir(&dir).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json") && err.contains("post_processor") && err.contains("ids"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A panic on one of rayon's workers (where the tokenizers crate encodes a batch) is caught on
/// the calling thread, with its message and place, and nothing is printed.
#[test]
fn a_panic_on_a_rayon_worker_is_caught_with_its_place() {
    let err = sesame_layers::contain::catch(|| -> usize {
        use rayon::prelude::*;
        (0..64).into_par_iter().map(|i| if i == 63 { panic!("index out of bounds") } else { i }).sum()
    })
    .unwrap_err();
    assert_eq!(err.message, "index out of bounds");
    assert!(err.location.as_deref().is_some_and(|l| l.contains("tokenizer_parity.rs")), "{err:?}");
}

/// Where the tokenizers crate's own trainer is deterministic (byte-level BPE: every letter is
/// in the 256-byte alphabet, so its ids come sorted), Sesame's trainer learns the same
/// vocabulary and the same merges in the same order.
#[test]
fn byte_level_bpe_training_equals_the_tokenizers_crate() {
    use tokenizers::models::bpe::{BpeTrainer, BPE};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    let corpus = Corpus::read(&fixtures_dir().join("../data/moby-dick.txt")).unwrap();
    let corpus = Corpus { documents: corpus.documents.into_iter().take(20).collect() };
    let kind = TokenizerKind::ByteLevelBpe;
    let ours = Tokenizer::train(kind, corpus.sentences(), 700, &kind.config()).unwrap();
    let out = sesame_tests::Scratch::path("bpe-vs-crate");
    ours.save(&out, &kind.config()).unwrap();
    let ours: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("tokenizer.json")).unwrap()).unwrap();
    std::fs::remove_dir_all(&out).unwrap();

    let mut theirs = tokenizers::Tokenizer::new(BPE::default());
    theirs.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    let specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"].map(|t| tokenizers::AddedToken::from(t, true)).to_vec();
    let mut trainer: tokenizers::models::TrainerWrapper = BpeTrainer::builder()
        .vocab_size(700)
        .min_frequency(2)
        .show_progress(false)
        .special_tokens(specials)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build()
        .into();
    theirs.train(&mut trainer, corpus.sentences()).unwrap();
    let theirs: serde_json::Value = serde_json::from_str(&theirs.to_string(false).unwrap()).unwrap();
    assert_eq!(ours["model"]["vocab"], theirs["model"]["vocab"], "the same tokens with the same ids");
    assert_eq!(ours["model"]["merges"], theirs["model"]["merges"], "the same merges in the same order");
    assert!(ours["model"]["merges"].as_array().unwrap().len() > 400);
}

#[derive(serde::Deserialize)]
struct XlnetBatch {
    input_ids: Vec<Vec<i64>>,
    token_type_ids: Vec<Vec<i64>>,
    attention_mask: Vec<Vec<i64>>,
}

/// XLNet's bare `spiece.model` in a directory whose config.json says `xlnet` (no
/// tokenizer_config.json, as xlnet-base-cased ships): cased, `a <sep> b <sep> <cls>` with
/// `<cls>` of type 2, and batches padded on the left, as transformers' XLNetTokenizer. Padding
/// takes token type 3 as in the original and in transformers 4; transformers 5 writes 0 there
/// (its XLNetTokenizer sets 3 before the base class resets it), which the model masks either way.
#[test]
fn xlnet_spiece_encodes_and_pads_on_the_left_as_transformers() {
    let dir = fixtures_dir().join("xlnet/spiece");
    let tok = Tokenizer::from_dir(&dir).unwrap();
    check_encodings("xlnet spiece.model", &tok, &dir);
    let s = tok.special_tokens();
    assert_eq!((s.cls.as_str(), s.sep.as_str(), s.pad.0.as_str(), s.pad.1, tok.mask_token_id().unwrap()), ("<cls>", "<sep>", "<pad>", 5, 6));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("batch.json")).unwrap()).unwrap();
    let texts: Vec<String> = serde_json::from_value(json["texts"].clone()).unwrap();
    let single: XlnetBatch = serde_json::from_value(json["single"].clone()).unwrap();
    let pairs: XlnetBatch = serde_json::from_value(json["pairs"].clone()).unwrap();
    let ours_single = tok.encode(&texts.iter().map(String::as_str).collect::<Vec<_>>(), 512, false).unwrap();
    let ours_pairs = tok.encode_pairs(&[("short", "a second sentence about the sea"), ("The whale.", "A ship!")], 512, false).unwrap();
    for (what, ours, theirs) in [("single", ours_single, single), ("pairs", ours_pairs, pairs)] {
        assert_eq!(ours.input_ids, theirs.input_ids.concat(), "{what}: ids");
        assert_eq!(ours.attention_mask, theirs.attention_mask.concat(), "{what}: mask");
        let want: Vec<i64> = theirs.token_type_ids.concat().iter().zip(theirs.attention_mask.concat()).map(|(&t, m)| if m == 1 { t } else { 3 }).collect();
        assert_eq!(ours.token_type_ids, want, "{what}: token types (padding 3)");
    }
    // Saved, it reloads as XLNet's from tokenizer.json and tokenizer_config.json.
    let out = sesame_tests::Scratch::path("xlnet-spiece");
    tok.save(&out, &TokenizerConfig::read_for(&dir.join("tokenizer_config.json"), Some("XLNetTokenizer")).unwrap()).unwrap();
    let reloaded = Tokenizer::from_dir(&out).unwrap();
    check_encodings("xlnet, saved", &reloaded, &dir);
    assert_eq!(reloaded.encode(&texts.iter().map(String::as_str).collect::<Vec<_>>(), 512, false).unwrap().input_ids, single_ids(&json));
    std::fs::remove_dir_all(&out).unwrap();
}

fn single_ids(json: &serde_json::Value) -> Vec<i64> {
    let rows: Vec<Vec<i64>> = serde_json::from_value(json["single"]["input_ids"].clone()).unwrap();
    rows.concat()
}
