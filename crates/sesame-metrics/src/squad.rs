//! Extractive question answering scored as the official SQuAD evaluation script scores it
//! (v2.0, which gives v1.1's numbers on answerable questions): answers normalised (lower case,
//! no punctuation, no articles, single spaces), exact match and token F1 against the best of the
//! gold answers, an unanswerable question right when the prediction is empty.

use std::collections::HashMap;

use crate::MetricError;

/// The script's `normalize_answer`: lower case, ASCII punctuation removed, the articles `a`,
/// `an`, `the` removed as whole words, whitespace collapsed to single spaces.
pub fn normalize_answer(s: &str) -> String {
    let lower: String = s.to_lowercase().chars().filter(|c| !c.is_ascii_punctuation()).collect();
    // `re.sub(r"\b(a|an|the)\b", " ", text)`: whole runs of word characters.
    let mut no_articles = String::with_capacity(lower.len());
    let mut word = String::new();
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let flush = |word: &mut String, out: &mut String| {
        if matches!(word.as_str(), "a" | "an" | "the") {
            out.push(' ');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in lower.chars() {
        if is_word(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut no_articles);
            no_articles.push(c);
        }
    }
    flush(&mut word, &mut no_articles);
    no_articles.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The script's `compute_exact`: whether the normalised answers are equal.
pub fn exact_match(gold: &str, predicted: &str) -> bool {
    normalize_answer(gold) == normalize_answer(predicted)
}

/// The script's `compute_f1`: F1 of the normalised answers' token bags; when either has no
/// token, 1 if both have none, else 0.
pub fn f1(gold: &str, predicted: &str) -> f64 {
    let (gold, predicted) = (normalize_answer(gold), normalize_answer(predicted));
    let (g, p): (Vec<&str>, Vec<&str>) = (gold.split_whitespace().collect(), predicted.split_whitespace().collect());
    if g.is_empty() || p.is_empty() {
        return f64::from(u8::from(g == p));
    }
    let mut bag: HashMap<&str, usize> = HashMap::new();
    for t in &g {
        *bag.entry(t).or_default() += 1;
    }
    let mut same = 0usize;
    for t in &p {
        if let Some(n) = bag.get_mut(t).filter(|n| **n > 0) {
            *n -= 1;
            same += 1;
        }
    }
    if same == 0 {
        return 0.0;
    }
    let (precision, recall) = (same as f64 / p.len() as f64, same as f64 / g.len() as f64);
    2.0 * precision * recall / (precision + recall)
}

/// One question: its gold answers (none: unanswerable), the predicted answer (empty: no
/// answer), and optionally the model's probability that there is none.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Question {
    /// The gold answers' texts.
    pub answers: Vec<String>,
    /// The predicted text.
    pub predicted: String,
    /// The probability of no answer (the script's `na_prob`), compared with the threshold.
    pub no_answer_probability: Option<f64>,
}

/// The script's output: percentages over all questions, and over those with and without an
/// answer when there are any.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SquadScores {
    /// Exact match, percent.
    pub exact: f64,
    /// F1, percent.
    pub f1: f64,
    /// Questions.
    pub total: usize,
    /// Exact match, F1 and count of the answerable questions.
    pub has_answer: Option<(f64, f64, usize)>,
    /// Exact match, F1 and count of the unanswerable questions.
    pub no_answer: Option<(f64, f64, usize)>,
}

/// Score `questions` as the script does; a question whose no-answer probability exceeds
/// `no_answer_threshold` (the script's `--na-prob-thresh`, 1.0 by default) counts as answered
/// "no answer".
pub fn squad_scores(questions: &[Question], no_answer_threshold: f64) -> Result<SquadScores, MetricError> {
    if questions.is_empty() {
        return Err(MetricError::Empty { what: "questions" });
    }
    let scored: Vec<(bool, f64, f64)> = questions
        .iter()
        .map(|q| {
            let has_answer = !q.answers.is_empty();
            if q.no_answer_probability.is_some_and(|p| p > no_answer_threshold) {
                let right = f64::from(u8::from(!has_answer));
                return (has_answer, right, right);
            }
            let mut gold: Vec<&str> = q.answers.iter().map(String::as_str).filter(|a| !normalize_answer(a).is_empty()).collect();
            if gold.is_empty() {
                gold.push("");
            }
            let exact = gold.iter().map(|g| f64::from(u8::from(exact_match(g, &q.predicted)))).fold(0.0, f64::max);
            let f1 = gold.iter().map(|g| f1(g, &q.predicted)).fold(0.0, f64::max);
            (has_answer, exact, f1)
        })
        .collect();
    let part = |keep: &dyn Fn(bool) -> bool| {
        let rows: Vec<_> = scored.iter().filter(|r| keep(r.0)).collect();
        let n = rows.len();
        (n > 0).then(|| (100.0 * rows.iter().map(|r| r.1).sum::<f64>() / n as f64, 100.0 * rows.iter().map(|r| r.2).sum::<f64>() / n as f64, n))
    };
    let (exact, f1, total) = part(&|_| true).expect("questions");
    Ok(SquadScores { exact, f1, total, has_answer: part(&|h| h), no_answer: part(&|h| !h) })
}
