//! `embed`, `fill-mask`, `classify`, `tag` and `answer`: a checkpoint of any family through the
//! facade (`sesame::pipeline`), its texts from the command line or `--input`, its results as
//! JSON.

use sesame::{PipelineOptions, Task};
use sesame_pipelines::PipelineError;

use crate::common::{load_pipeline, run_texts, Texts};

/// `embed`: each text's vector, cut to its first `cut.0` dimensions (`--dimensions`) and then
/// normalised if `cut.1`, when `cut` is given.
pub(crate) fn embed_with(dir: &std::path::Path, options: PipelineOptions, cut: Option<(usize, bool)>, texts: &mut Texts) -> Result<String, String> {
    let pipeline = load_pipeline(Task::Embed, dir, options)?;
    let mut done = 0;
    run_texts(texts, |chunk| {
        let mut vectors = pipeline.embed(chunk).map_err(|e| e.to_string())?;
        if let Some((dimensions, normalize)) = cut {
            let width = vectors.first().map_or(dimensions, Vec::len);
            if dimensions > width {
                return Err(format!("--dimensions {dimensions}: {} gives {width}-dimensional embeddings", dir.display()));
            }
            vectors = vectors.into_iter().map(|v| sesame_pipelines::truncated(v, Some(dimensions), normalize)).collect();
        }
        if let Some(i) = vectors.iter().position(|v| v.iter().any(|x| !x.is_finite())) {
            return Err(format!("{}: the embedding of text {} is not finite (NaN or infinite); the checkpoint overflows", dir.display(), done + i));
        }
        done += chunk.len();
        Ok(vectors)
    })
}

pub(crate) fn classify_with(dir: &std::path::Path, options: PipelineOptions, texts: &mut Texts, speed: Option<f64>) -> Result<String, String> {
    use sesame_pipelines::Classification;
    let pipeline = load_pipeline(Task::Classify, dir, options)?;
    let finite = |c: &Classification| match c {
        Classification::Value { value } => value.is_finite(),
        Classification::Single { scores, .. } | Classification::Multi { scores, .. } => scores.iter().all(|s| s.score.is_finite()),
    };
    let overflow = || format!("{}: the model's output is not finite (NaN or infinite); the checkpoint overflows", dir.display());
    match speed {
        None => run_texts(texts, |chunk| {
            let out = pipeline.classify(chunk).map_err(|e| e.to_string())?;
            if out.iter().all(finite) { Ok(out) } else { Err(overflow()) }
        }),
        Some(speed) => run_texts(texts, |chunk| {
            let out = pipeline.classify_early(chunk, speed).map_err(|e| format!("--speed {speed}: {}: {e}", dir.display()))?;
            if out.iter().all(|c| finite(&c.classification)) { Ok(out) } else { Err(overflow()) }
        }),
    }
}

pub(crate) fn tag_with(dir: &std::path::Path, options: PipelineOptions, texts: &mut Texts) -> Result<String, String> {
    let pipeline = load_pipeline(Task::Tag, dir, options)?;
    let stride = pipeline.stride().unwrap_or_default();
    run_texts(texts, |chunk| {
        let out = pipeline.tag(chunk).map_err(|e| format!("{e} (--stride {stride})"))?;
        if !out.iter().flatten().all(|s| s.score.is_finite()) {
            return Err(format!("{}: the model's output is not finite (NaN or infinite); the checkpoint overflows", dir.display()));
        }
        Ok(out)
    })
}

pub(crate) fn answer_with(dir: &std::path::Path, options: PipelineOptions, texts: &mut Texts, context: &str) -> Result<String, String> {
    let pipeline = load_pipeline(Task::Answer, dir, options)?;
    let stride = pipeline.stride().unwrap_or_default();
    let mut done = 0;
    run_texts(texts, |chunk| {
        let questions: Vec<(&str, &str)> = chunk.iter().map(|q| (*q, context)).collect();
        let out = pipeline.answer(&questions).map_err(|e| match e {
            // Numbered among all the questions, not this chunk's.
            sesame::Error::Pipeline(PipelineError::EmptyText { what, index }) => format!("{what} {} is empty: there is nothing to answer (transformers' QA pipeline refuses one too)", done + index),
            e => format!("{e} (--stride {stride})"),
        })?;
        done += chunk.len();
        if !out.iter().all(|a| a.score.is_finite()) {
            return Err(format!("{}: the model's output is not finite (NaN or infinite); the checkpoint overflows", dir.display()));
        }
        Ok(out)
    })
}

pub(crate) fn fill_mask_with(dir: &std::path::Path, options: PipelineOptions, texts: &mut Texts) -> Result<String, String> {
    let pipeline = load_pipeline(Task::FillMask, dir, options)?;
    let single = matches!(texts, Texts::Args(args) if args.len() == 1);
    let json = run_texts(texts, |chunk| {
        let predictions = pipeline.fill_mask(chunk).map_err(|e| e.to_string())?;
        if predictions.iter().flatten().flatten().any(|p| !p.score.is_finite()) {
            return Err(format!("{}: the predicted scores are not finite (NaN or infinite); the checkpoint overflows", dir.display()));
        }
        Ok(predictions)
    })?;
    // One text on the command line prints its masks' candidates, as before: `[[...], ...]`.
    Ok(match single {
        true => serde_json::to_string(&serde_json::from_str::<Vec<serde_json::Value>>(&json).expect("JSON")[0]).expect("JSON"),
        false => json,
    })
}
