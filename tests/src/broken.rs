//! Broken inputs that a third-party crate would panic or blow up on, shared by the library
//! tests and the CLI's bad-input suite.

use std::io::Write;
use std::path::Path;

use crate::fixtures_dir;

/// A precompiled normalisation table (base64) whose trie points past its end: 8 bytes whose
/// root unit sends every first byte to unit 2^20 ^ byte of a 1-unit array. `spm_precompiled`
/// parses it, then indexes out of bounds on the first text, on a worker thread.
pub const TRIE_PAST_ITS_END: &str = "BAAAAAAAAEA=";

/// Write the `tokenizer.json` (and `tokenizer_config.json`) of ALBERT's `spiece.model` into
/// `dir`, its precompiled table replaced by `table` (base64).
pub fn tokenizer_json_with_table(dir: &Path, table: &str) {
    let source = fixtures_dir().join("albert/spiece");
    let tokenizer = sesame_text::Tokenizer::from_dir(&source).unwrap();
    let config = sesame_text::TokenizerConfig::read(&source.join("tokenizer_config.json")).unwrap();
    tokenizer.save(dir, &config).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap()).unwrap();
    fn replace(v: &mut serde_json::Value, table: &str) -> bool {
        match v {
            serde_json::Value::Object(map) => match map.get_mut("precompiled_charsmap") {
                Some(old) => {
                    *old = table.into();
                    true
                }
                None => map.values_mut().fold(false, |found, v| replace(v, table) || found),
            },
            serde_json::Value::Array(items) => items.iter_mut().fold(false, |found, v| replace(v, table) || found),
            _ => false,
        }
    }
    assert!(replace(&mut json, table), "ALBERT's spiece.model has a precompiled table");
    std::fs::write(dir.join("tokenizer.json"), json.to_string()).unwrap();
}

/// Write ALBERT's `spiece.model` into `dir` with its precompiled table's root unit pointing
/// past the trie (the protobuf stays valid: the table keeps its length).
pub fn spiece_model_with_trie_past_its_end(dir: &Path) {
    let source = fixtures_dir().join("albert/spiece/spiece.model");
    let mut bytes = std::fs::read(&source).unwrap();
    let model = sesame_text::sentencepiece::SentencePieceModel::read(&source).unwrap();
    let table = model.precompiled_charsmap.expect("ALBERT's spiece.model has a precompiled table");
    let at = bytes.windows(table.len()).position(|w| w == table.as_slice()).expect("the table is stored as it is");
    bytes[at + 4..at + 8].copy_from_slice(&(1u32 << 30).to_le_bytes());
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("spiece.model"), bytes).unwrap();
}

/// Copy the PyTorch zip checkpoint `source` to `dest` with its first storage entry replaced by
/// a deflated one that inflates to `inflated` zero bytes: a
/// decompression bomb (about 100 times smaller) whose tensors still read as well-formed (zeros).
pub fn deflate_bomb(source: &Path, dest: &Path, inflated: u64) {
    let mut archive = zip::ZipArchive::new(std::fs::File::open(source).unwrap()).unwrap();
    let names: Vec<String> = archive.file_names().map(|n| n.unwrap().to_string()).collect();
    let storage = names.into_iter().filter(|n| n.contains("/data/") && !n.ends_with('/')).min().expect("a storage entry");
    let mut out = zip::ZipWriter::new(std::fs::File::create(dest).unwrap());
    for i in 0..archive.len() {
        let entry = archive.by_index_raw(i).unwrap();
        if entry.name().unwrap() != storage {
            out.raw_copy_file(entry).unwrap();
        }
    }
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(1))
        .large_file(inflated >= u32::MAX as u64);
    out.start_file(storage.as_str(), options).unwrap();
    let zeros = vec![0u8; 1 << 20];
    let mut left = inflated;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        out.write_all(&zeros[..n]).unwrap();
        left -= n as u64;
    }
    out.finish().unwrap();
}
