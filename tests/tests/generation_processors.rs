//! Every logits processor of `sesame-generate` against transformers' class of the same name,
//! on the rows and scores of `fixtures/generation/processors` (made by scripts/make_fixtures.py).
//! The processors run on the host, the same on every backend.

use sesame_generate::*;
use sesame_tests::Fixture;

/// The processor transformers built from `class` and `args`.
fn processor(class: &str, args: &serde_json::Value) -> Box<dyn LogitsProcessor> {
    let int = |k: &str| args[k].as_u64().unwrap_or_else(|| panic!("{class}: `{k}`")) as usize;
    let float = |k: &str| args[k].as_f64().unwrap_or_else(|| panic!("{class}: `{k}`")) as f32;
    let ids = |k: &str| -> Vec<u32> {
        match &args[k] {
            serde_json::Value::Array(items) => items.iter().map(|v| v.as_u64().unwrap() as u32).collect(),
            v => vec![v.as_u64().unwrap_or_else(|| panic!("{class}: `{k}`")) as u32],
        }
    };
    let min_keep = args.get("min_tokens_to_keep").map_or(1, |v| v.as_u64().unwrap() as usize);
    match class {
        "MinLengthLogitsProcessor" => Box::new(MinLength { min_length: int("min_length"), eos_token_ids: ids("eos_token_id") }),
        "MinNewTokensLengthLogitsProcessor" => Box::new(MinNewTokens { min_new_tokens: int("min_new_tokens"), eos_token_ids: ids("eos_token_id") }),
        "RepetitionPenaltyLogitsProcessor" => Box::new(RepetitionPenalty::new(float("penalty")).unwrap()),
        "NoRepeatNGramLogitsProcessor" => Box::new(NoRepeatNgram::new(int("ngram_size")).unwrap()),
        "ForcedBOSTokenLogitsProcessor" => Box::new(ForcedBos { bos_token_id: int("bos_token_id") as u32 }),
        "ForcedEOSTokenLogitsProcessor" => Box::new(ForcedEos { max_length: int("max_length"), eos_token_ids: ids("eos_token_id") }),
        "NoBadWordsLogitsProcessor" => {
            let sequences = args["bad_words_ids"].as_array().unwrap().iter().map(|s| s.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()).collect();
            Box::new(BadWords::new(sequences, &ids("eos_token_id")).unwrap())
        }
        "TemperatureLogitsWarper" => Box::new(Temperature::new(float("temperature")).unwrap()),
        "TopKLogitsWarper" => Box::new(TopK::new(int("top_k"), min_keep).unwrap()),
        "TopPLogitsWarper" => Box::new(TopP::new(float("top_p"), min_keep).unwrap()),
        other => panic!("no processor for {other}"),
    }
}

#[test]
fn every_processor_matches_transformers() {
    let f = Fixture::open("generation/processors");
    let prompt_len = f.meta["prompt_len"].as_u64().unwrap() as usize;
    let listed = f.meta["processors"].as_array().unwrap();
    assert!(listed.len() >= 20, "{} processors in the fixture", listed.len());
    for entry in listed {
        let name = entry["name"].as_str().unwrap();
        let p = processor(entry["class"].as_str().unwrap(), &entry["args"]);
        let ids = f.get(&format!("input.{}", entry["input_ids"].as_str().unwrap()));
        let scores = f.get(&format!("input.{}", entry["scores"].as_str().unwrap()));
        let want = f.get(&format!("output.{name}"));
        let ([rows, len], vocab) = ([ids.shape[0], ids.shape[1]], scores.shape[1]);
        let mut changed = false;
        for r in 0..rows {
            let tokens: Vec<u32> = ids.i64[r * len..(r + 1) * len].iter().map(|&t| t as u32).collect();
            let mut ours = scores.f32[r * vocab..(r + 1) * vocab].to_vec();
            p.process(Row { tokens: &tokens, prompt_len }, &mut ours);
            let theirs = &want.f32[r * vocab..(r + 1) * vocab];
            for (v, (a, b)) in ours.iter().zip(theirs).enumerate() {
                let same = if b.is_finite() { (a - b).abs() <= 1e-6 * b.abs().max(1.0) } else { a == b };
                assert!(same, "{name}, row {r}, token {v}: ours {a}, transformers {b}");
            }
            changed |= theirs != &scores.f32[r * vocab..(r + 1) * vocab];
        }
        // Each case changes some score (or is one that must not: a length already met).
        assert!(changed || name.ends_with("_met") || name.ends_with("_later") || name == "no_repeat_ngram_9", "{name} changes nothing");
    }
}
