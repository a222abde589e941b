//! What the fuzz targets share: a scratch directory per process (readers take paths), the
//! repository's fixtures, and the first byte of an input used to pick among variants.

use std::path::{Path, PathBuf};

/// The repository's `fixtures/`.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// This process's scratch directory (in memory where `/dev/shm` exists), emptied once.
pub fn scratch() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let dir = base.join(format!("sesame-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

/// Subdirectory `name` of the scratch directory holding copies of `files` of fixture directory
/// `fixture` (those it has), and the input `bytes` written as `file`. (The same files are
/// written there for every input of a target: nothing is left of the one before.)
pub fn model_dir(name: &str, fixture: &str, files: &[&str], file: &str, bytes: &[u8]) -> PathBuf {
    let dir = scratch().join(name);
    while let Err(e) = std::fs::create_dir_all(&dir) {
        assert!(e.kind() == std::io::ErrorKind::Interrupted, "scratch subdirectory {}: {e}", dir.display());
    }
    for f in files {
        if let Some(bytes) = fixture_file(fixture, f) {
            std::fs::write(dir.join(f), bytes).expect("write a fixture file");
        }
    }
    std::fs::write(dir.join(file), bytes).expect("write the input");
    dir
}

/// The bytes of `fixtures/DIR/FILE`, read once (libFuzzer's timer interrupts system calls:
/// `std::fs::copy` gives up on EINTR, writing retries); `None` when there is no such file.
fn fixture_file(dir: &str, file: &str) -> Option<&'static [u8]> {
    type Files = std::sync::Mutex<std::collections::HashMap<(String, String), Option<&'static [u8]>>>;
    static FILES: std::sync::OnceLock<Files> = std::sync::OnceLock::new();
    let mut files = FILES.get_or_init(Default::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    *files.entry((dir.to_string(), file.to_string())).or_insert_with(|| std::fs::read(fixtures().join(dir).join(file)).ok().map(|b| &*Vec::leak(b)))
}

/// `bytes` written as `name` in the scratch directory.
pub fn file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, bytes).expect("write the input");
    path
}

/// The first byte of `data` modulo `n` (0 for empty data), and the rest.
pub fn pick(data: &[u8], n: usize) -> (usize, &[u8]) {
    match data.split_first() {
        Some((&first, rest)) => (first as usize % n, rest),
        None => (0, data),
    }
}

/// The device every target runs on.
pub fn device() -> burn::tensor::Device {
    burn::tensor::Device::flex()
}

/// Load the tokenizer of `dir`; when it loads, encode texts (single, pairs, question windows)
/// and decode, ids out of range included.
pub fn exercise_tokenizer(dir: &Path) {
    let Ok(tokenizer) = sesame_text::Tokenizer::from_dir(dir) else { return };
    let texts = ["Call me Ishmael.", "naïve café 東京 \u{0}\t\n", ""];
    if let Ok(encoded) = tokenizer.encode_each(&texts, 16, true) {
        for e in &encoded {
            let ids: Vec<u32> = e.input_ids.iter().map(|&t| t as u32).collect();
            let _ = tokenizer.decode(&ids);
        }
    }
    let _ = tokenizer.encode_pairs(&[("who?", "the cat sat on the mat")], 12, true);
    let _ = tokenizer.encode_question_windows("who?", "the cat sat on the mat and the dog did not", 12, 4);
    let _ = tokenizer.decode(&[0, 1, 2, 3, u32::MAX]);
}
