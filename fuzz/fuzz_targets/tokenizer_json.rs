//! `tokenizer.json` (WordPiece, byte-level BPE or Unigram, as the input says) with the BERT
//! fixture's `tokenizer_config.json`: loading, then encoding and decoding texts, gives results
//! or errors, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = sesame_fuzz::model_dir("tokenizer-json", "bert/base-fill-mask", &["tokenizer_config.json"], "tokenizer.json", data);
    sesame_fuzz::exercise_tokenizer(&dir);
});
