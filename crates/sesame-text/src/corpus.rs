//! Plain-text corpora: files or directories of UTF-8 text, documents separated by blank
//! lines, documents split into sentences (English and Chinese punctuation).

use std::path::{Path, PathBuf};

/// Why a corpus could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// The path does not exist or cannot be read.
    #[error("cannot read corpus {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// A file is not UTF-8 text.
    #[error("corpus file {path} is not UTF-8 text")]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// Nothing but whitespace was found.
    #[error("corpus {path} contains no text")]
    Empty {
        /// The file or directory.
        path: PathBuf,
    },
}

/// A corpus: documents made of sentences.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Corpus {
    /// Each document is a list of sentences.
    pub documents: Vec<Vec<String>>,
}

impl Corpus {
    /// Read a text file, or every `.txt` file under a directory (sorted, recursively).
    pub fn read(path: &Path) -> Result<Self, CorpusError> {
        let io = |source| CorpusError::Io { path: path.to_path_buf(), source };
        let meta = std::fs::metadata(path).map_err(io)?;
        let files = if meta.is_dir() { text_files(path)? } else { vec![path.to_path_buf()] };
        let mut corpus = Corpus::default();
        for file in files {
            let bytes = std::fs::read(&file).map_err(|source| CorpusError::Io { path: file.clone(), source })?;
            let text = String::from_utf8(bytes).map_err(|_| CorpusError::NotText { path: file.clone() })?;
            corpus.documents.extend(Corpus::from_text(&text).documents);
        }
        if corpus.documents.is_empty() {
            return Err(CorpusError::Empty { path: path.to_path_buf() });
        }
        Ok(corpus)
    }

    /// Split `text` into documents at blank lines, and documents into sentences.
    pub fn from_text(text: &str) -> Self {
        let mut documents = Vec::new();
        let mut current = String::new();
        for line in text.lines().chain(std::iter::once("")) {
            if line.trim().is_empty() {
                let sentences = split_sentences(&current);
                if !sentences.is_empty() {
                    documents.push(sentences);
                }
                current.clear();
            } else {
                if !current.is_empty() {
                    current.push(' ');
                }
                current.push_str(line.trim());
            }
        }
        Corpus { documents }
    }

    /// Number of sentences.
    pub fn num_sentences(&self) -> usize {
        self.documents.iter().map(Vec::len).sum()
    }

    /// Every sentence, in order.
    pub fn sentences(&self) -> impl Iterator<Item = &str> {
        self.documents.iter().flatten().map(String::as_str)
    }

    /// Split off the last `fraction` of documents (at least one when there are two or more)
    /// as a held-out set: `(train, held_out)`.
    pub fn split_held_out(mut self, fraction: f64) -> (Corpus, Corpus) {
        let n = self.documents.len();
        let held = if n < 2 { 0 } else { ((n as f64 * fraction).round() as usize).clamp(1, n - 1) };
        let held_out = self.documents.split_off(n - held);
        (self, Corpus { documents: held_out })
    }
}

/// Every `.txt` file under `dir`, each once: directories and files are identified by their
/// canonical path, so symbolic links (loops included) neither repeat nor recurse forever.
fn text_files(dir: &Path) -> Result<Vec<PathBuf>, CorpusError> {
    let canonical = |p: &Path| std::fs::canonicalize(p).map_err(|source| CorpusError::Io { path: p.to_path_buf(), source });
    let mut seen_dirs = std::collections::HashSet::from([canonical(dir)?]);
    let mut seen_files = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|source| CorpusError::Io { path: d.clone(), source })?;
        for entry in entries {
            let path = entry.map_err(|source| CorpusError::Io { path: d.clone(), source })?.path();
            if path.is_dir() {
                if seen_dirs.insert(canonical(&path)?) {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "txt") && seen_files.insert(canonical(&path)?) {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Split a paragraph into sentences: after `.`, `!`, `?` (and closing quotes or brackets)
/// followed by white space, unless the word is a common abbreviation or a single initial;
/// and after the Chinese full stops `。！？；` (and `…`), with no space needed.
pub fn split_sentences(text: &str) -> Vec<String> {
    const ABBREVIATIONS: [&str; 16] =
        ["mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no", "vol", "fig", "mt"];
    let chars: Vec<char> = text.chars().collect();
    let mut sentences = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let mut end = None;
        if matches!(c, '。' | '！' | '？' | '；' | '…') {
            let mut j = i + 1;
            while j < chars.len() && matches!(chars[j], '”' | '」' | '』' | '）' | '"' | '。' | '！' | '？' | '…') {
                j += 1;
            }
            end = Some(j);
        } else if matches!(c, '.' | '!' | '?') {
            let mut j = i + 1;
            while j < chars.len() && matches!(chars[j], '.' | '!' | '?' | '"' | '\'' | ')' | ']' | '”' | '’') {
                j += 1;
            }
            let followed_by_space = j >= chars.len() || chars[j].is_whitespace();
            // "5 p.m. on Monday": a lower-case word after the stop continues the sentence.
            let next_word_lower = chars[j..].iter().find(|c| !c.is_whitespace()).is_some_and(|c| c.is_lowercase());
            let word: String = chars[start..i].iter().rev().take_while(|c| !c.is_whitespace()).collect::<Vec<_>>().into_iter().rev().collect();
            let word = word.trim_start_matches(['(', '"', '\'', '“']).to_lowercase();
            let abbreviation = c == '.' && (ABBREVIATIONS.contains(&word.as_str()) || (word.chars().count() == 1 && word.chars().all(char::is_alphabetic)));
            if followed_by_space && !abbreviation && !next_word_lower {
                end = Some(j);
            }
        }
        if let Some(j) = end {
            let sentence: String = chars[start..j].iter().collect();
            if !sentence.trim().is_empty() {
                sentences.push(sentence.trim().to_string());
            }
            start = j;
            i = j;
        } else {
            i += 1;
        }
    }
    let rest: String = chars[start..].iter().collect();
    if !rest.trim().is_empty() {
        sentences.push(rest.trim().to_string());
    }
    sentences
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english_sentences_split_at_terminal_punctuation_but_not_abbreviations() {
        let s = split_sentences("Mr. Smith went to Washington. He arrived at 5 p.m. on Monday! Did he? \"Yes.\" He left (quietly.) Then J. R. R. Tolkien wrote");
        assert_eq!(s, [
            "Mr. Smith went to Washington.",
            "He arrived at 5 p.m. on Monday!",
            "Did he?",
            "\"Yes.\"",
            "He left (quietly.)",
            "Then J. R. R. Tolkien wrote",
        ]);
    }

    #[test]
    fn chinese_sentences_split_without_spaces() {
        let s = split_sentences("今天天气很好。我们去公园吧！你觉得呢？“好的。”他说");
        assert_eq!(s, ["今天天气很好。", "我们去公园吧！", "你觉得呢？", "“好的。”", "他说"]);
    }

    #[test]
    fn documents_are_separated_by_blank_lines() {
        let c = Corpus::from_text("First doc. Second sentence.\nSame paragraph.\n\n\n  \nSecond doc!\n");
        assert_eq!(c.documents, vec![
            vec!["First doc.".to_string(), "Second sentence.".into(), "Same paragraph.".into()],
            vec!["Second doc!".to_string()],
        ]);
        assert_eq!(c.num_sentences(), 4);
    }

    #[test]
    fn empty_and_missing_corpora_are_errors() {
        let dir = std::env::temp_dir().join(format!("sesame-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("empty.txt"), "\n \n").unwrap();
        assert!(matches!(Corpus::read(&dir), Err(CorpusError::Empty { .. })));
        assert!(matches!(Corpus::read(&dir.join("missing.txt")), Err(CorpusError::Io { .. })));
        std::fs::write(dir.join("binary.txt"), [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(Corpus::read(&dir), Err(CorpusError::NotText { .. })));
    }

    #[cfg(unix)]
    #[test]
    fn symbolic_links_and_loops_read_each_file_once() {
        let dir = std::env::temp_dir().join(format!("sesame-corpus-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a.txt"), "One doc.\n\nTwo doc.\n").unwrap();
        std::os::unix::fs::symlink(&dir, dir.join("sub/loop")).unwrap();
        std::os::unix::fs::symlink(dir.join("sub/a.txt"), dir.join("again.txt")).unwrap();
        let corpus = Corpus::read(&dir).unwrap();
        assert_eq!(corpus.documents.len(), 2, "{:?}", corpus.documents);
    }

    #[test]
    fn held_out_split_keeps_both_sides_non_empty() {
        let c = Corpus::from_text("a.\n\nb.\n\nc.\n\nd.");
        let (train, held) = c.split_held_out(0.1);
        assert_eq!((train.documents.len(), held.documents.len()), (3, 1));
    }
}
