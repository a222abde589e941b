//! What the tagging and QA fine-tuning tests share: the fixture model, scratch directories, the
//! binary, flags with defaults, and the generated data of each task.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The small BERT fixture (40 positions), its tokenizer included.
pub fn model_dir() -> PathBuf {
    repo().join("fixtures/bert/base-fill-mask")
}

/// A fresh directory for test `name` of `suite`, removed when the test passes.
pub fn scratch(suite: &str, name: &str) -> sesame_tests::Scratch {
    sesame_tests::Scratch::dir(&format!("finetune-{suite}-{name}"))
}

/// `cargo xtask ARGS`: its stdout, or its stderr when it fails.
pub fn xtask(args: &[String]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).current_dir(repo()).output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// `cargo xtask finetune --task TASK ARGS`: its stdout's last line as JSON, or its stderr.
pub fn finetune(task: &str, args: &[String]) -> Result<serde_json::Value, String> {
    let all: Vec<String> = ["finetune", "--task", task].into_iter().map(String::from).chain(args.iter().cloned()).collect();
    let stdout = xtask(&all)?;
    serde_json::from_str(stdout.lines().last().unwrap_or("")).map_err(|e| format!("{e}: {stdout}"))
}

/// `defaults` (flag, value) but those `extra` names, then `--quiet` and `extra`.
pub fn flags(defaults: &[(&str, &str)], extra: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = defaults.iter().filter(|(flag, _)| !extra.contains(flag)).flat_map(|(f, v)| [f.to_string(), v.to_string()]).collect();
    // Two micro-batches a batch: the split path, in every run of these tests.
    all.extend(["--quiet", "--micro-batches", "2"].map(String::from));
    all.extend(extra.iter().map(|s| s.to_string()));
    all
}

/// Sentences with a class, a colour flag and a count, for classification, multi-label and
/// regression runs.
pub mod classify {
    use std::path::Path;

pub const NOUNS: [&str; 6] = ["cat", "dog", "house", "car", "tree", "sun"];
pub const COLOURS: [&str; 4] = ["red", "blue", "green", "big"];

/// Row `i` of the generated data: a short sentence, whether it names an animal, whether it has a
/// colour, and how many times it says `big`.
pub fn sentence(i: usize) -> (String, bool, bool, usize) {
    let noun = NOUNS[(i * 7 + i / 3) % NOUNS.len()];
    let colour = COLOURS[(i * 5 + i / 4) % COLOURS.len()];
    let bigs = (i * 3 + i / 5) % 3;
    let mut words = vec!["the", colour, noun];
    words.extend(std::iter::repeat_n("big", bigs));
    words.extend(["sat", "on", "the", "mat"]);
    (words.join(" "), matches!(noun, "cat" | "dog"), colour != "big", bigs + usize::from(colour == "big"))
}

/// The single-label class of a row: whether it names an animal.
pub fn animal(s: &(String, bool, bool, usize)) -> String {
    if s.1 { "animal".to_string() } else { "thing".to_string() }
}

/// Write `rows` rows from `start` as CSV with `label(row)`.
pub fn write_csv(path: &Path, rows: std::ops::Range<usize>, label: impl Fn(&(String, bool, bool, usize)) -> String) {
    let mut text = String::from("text,label\n");
    for i in rows {
        let s = sentence(i);
        text.push_str(&format!("{},{}\n", s.0, label(&s)));
    }
    std::fs::write(path, text).unwrap();
}
}

/// Tagged sentences: animals (`B-ANIMAL I-ANIMAL`), places (`B-LOC`) and other words (`O`).
pub mod tag {
    use std::path::Path;

pub const ANIMALS: [&str; 4] = ["cat", "dog", "cats", "dogs"];
pub const COLOURS: [&str; 3] = ["red", "blue", "green"];
pub const PLACES: [&str; 2] = ["paris", "france"];
pub const OTHER: [&str; 16] = ["the", "sat", "on", "mat", "house", "car", "tree", "big", "small", "day", "night", "running", "played", "is", "was", "in"];

/// Sentence `i`: 4 to 27 words, with animals (an optional colour, then the animal: `B-ANIMAL
/// I-ANIMAL`), places (`B-LOC`) and other words (`O`); words like `cats` and `running` are
/// two tokens of the fixture's vocabulary.
pub fn sentence(i: usize) -> (Vec<&'static str>, Vec<&'static str>) {
    let h = |k: usize| (i.wrapping_mul(2_654_435_761).wrapping_add(k * 40_503)) % 1_000_003;
    let n = 4 + h(0) % 24;
    let (mut words, mut tags) = (Vec::new(), Vec::new());
    let mut k = 1;
    while words.len() < n {
        let r = h(k) % 6;
        k += 1;
        match r {
            0 => {
                if h(k) % 2 == 1 {
                    words.push(COLOURS[h(k + 1) % 3]);
                    tags.push("B-ANIMAL");
                    words.push(ANIMALS[h(k + 2) % 4]);
                    tags.push("I-ANIMAL");
                } else {
                    words.push(ANIMALS[h(k + 2) % 4]);
                    tags.push("B-ANIMAL");
                }
                k += 3;
            }
            1 => {
                words.push(PLACES[h(k) % 2]);
                tags.push("B-LOC");
                k += 1;
            }
            _ => {
                words.push(OTHER[h(k) % OTHER.len()]);
                tags.push("O");
                k += 1;
            }
        }
    }
    (words, tags)
}

/// Sentences `rows` as CoNLL (a `-DOCSTART-` line first, as CoNLL-2003 files have).
pub fn write_conll(path: &Path, rows: std::ops::Range<usize>) {
    let mut text = String::from("-DOCSTART- -X- O O\n\n");
    for i in rows {
        let (words, tags) = sentence(i);
        for (w, t) in words.iter().zip(&tags) {
            text.push_str(&format!("{w}\t{t}\n"));
        }
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// Sentences `rows` as JSON lines with `tokens` and `tags`.
pub fn write_jsonl(path: &Path, rows: std::ops::Range<usize>) {
    let text: String = rows.map(|i| serde_json::json!({ "tokens": sentence(i).0, "tags": sentence(i).1 }).to_string() + "\n").collect();
    std::fs::write(path, text).unwrap();
}
}

/// Questions on generated contexts, answerable or not.
pub mod qa {
    use std::path::Path;

pub const THINGS: [&str; 7] = ["cat", "dog", "car", "tree", "sun", "moon", "house"];
pub const PLACES: [&str; 5] = ["paris", "france", "the house", "the tree", "the car"];
pub const FILL: [&str; 6] = ["the day was big .", "it is night .", "hello world !", "the sun is small .", "a red car sat on the mat .", "the moon played ."];

/// Question `i`: "where is the X ?" on a context of 2 to 5 filler sentences and "the X is in P
/// ." somewhere among them; with `unanswerable`, every fourth question asks about a thing the
/// context does not place (no answer).
pub fn example(i: usize, unanswerable: bool) -> serde_json::Value {
    let h = |k: usize| (i.wrapping_mul(2_654_435_761).wrapping_add(k * 40_503)) % 1_000_003;
    let thing = THINGS[h(1) % THINGS.len()];
    let place = PLACES.iter().filter(|p| **p != format!("the {thing}")).nth(h(2) % 4).unwrap();
    let mut parts: Vec<String> = (0..2 + h(9) % 4).map(|j| FILL[h(3 + j) % FILL.len()].to_string()).collect();
    let fact = format!("the {thing} is in {place} .");
    parts.insert(h(10) % (parts.len() + 1), fact.clone());
    let context = parts.join(" ");
    if unanswerable && i % 4 == 0 {
        let other = THINGS.iter().find(|t| **t != thing && !context.contains(&format!("the {t} "))).unwrap_or(&"moon");
        return serde_json::json!({ "id": format!("q{i}"), "question": format!("where is the {other} ?"), "context": context, "answers": { "text": [], "answer_start": [] } });
    }
    let start = context[..context.find(&fact).unwrap()].chars().count() + format!("the {thing} is in ").len();
    serde_json::json!({ "id": format!("q{i}"), "question": format!("where is the {thing} ?"), "context": context, "answers": { "text": [place], "answer_start": [start] } })
}

/// Questions `rows` as JSON lines (HF datasets' layout).
pub fn write_jsonl(path: &Path, rows: std::ops::Range<usize>, unanswerable: bool) {
    let text: String = rows.map(|i| example(i, unanswerable).to_string() + "\n").collect();
    std::fs::write(path, text).unwrap();
}
}
