//! The tokenizers read from plain vocabulary files: `vocab.txt` (WordPiece; first byte even)
//! or `vocab.json` with `merges.txt` (byte-level BPE; the input split at its first NUL byte):
//! load, encode, decode.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (kind, data) = sesame_fuzz::pick(data, 2);
    let dir = match kind {
        0 => sesame_fuzz::model_dir("vocab-txt", "bert/base-fill-mask", &["config.json", "tokenizer_config.json"], "vocab.txt", data),
        _ => {
            let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
            let (vocab, merges) = (&data[..split], data.get(split + 1..).unwrap_or_default());
            let dir = sesame_fuzz::model_dir("vocab-json", "roberta/tokenizer", &["tokenizer_config.json"], "vocab.json", vocab);
            std::fs::write(dir.join("merges.txt"), merges).expect("write merges.txt");
            dir
        }
    };
    sesame_fuzz::exercise_tokenizer(&dir);
});
