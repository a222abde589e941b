//! The facade (`sesame::pipeline`, `sesame::auto`): a checkpoint of any family, named by
//! directory, runs the family's type for the job and gives what the typed pipelines give, bit
//! for bit; a family without a model for the job, a checkpoint with another task's head, and a
//! pipeline called for another job are refused by name. The README's library example is
//! `crates/sesame/examples/quickstart.rs`, and runs from a HuggingFace cache.

use std::path::{Path, PathBuf};

use burn::prelude::*;
use sesame::auto::{AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoModelForTokenClassification};
use sesame::{pipeline, Error, PipelineOptions, Task};
use sesame_bert::{BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification, BertModel};
use sesame_layers::{OutputOptions, PretrainedModel};
use sesame_pipelines::EmbedOptions;
use sesame_tests::{devices, fixtures_dir, values};
use sesame_text::Tokenizer;

const TEXTS: [&str; 3] = ["the cat sat on the mat .", "hello world", "the [MASK] of the whale ."];

fn options(device: &Device) -> PipelineOptions {
    PipelineOptions { device: Some(device.clone()), ..Default::default() }
}

fn fill_mask_dir() -> PathBuf {
    fixtures_dir().join("bert/base-fill-mask")
}

/// A copy of the fixture `name` with the fill-mask fixture's tokenizer (the same vocabulary),
/// for the test `test` (tests run side by side: each has its own copy).
fn with_tokenizer(name: &str, test: &str) -> sesame_tests::Scratch {
    let dir = sesame_tests::Scratch::copy_of(name, &format!("facade-{test}-{}", name.replace('/', "-")));
    for f in ["vocab.txt", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fill_mask_dir().join(f), dir.join(f)).unwrap();
    }
    dir
}

fn path(dir: &Path) -> &str {
    dir.to_str().unwrap()
}

#[test]
fn embed_and_fill_mask_pipelines_give_what_the_typed_pipelines_give() {
    let (_, device) = devices().remove(0);
    let dir = fill_mask_dir();
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    let base = BertModel::from_pretrained(&dir, &device).unwrap();
    for normalize in [false, true] {
        let embed = EmbedOptions { normalize, ..Default::default() };
        let expected = sesame_pipelines::embed(&base.model, &base.config, &tokenizer, &TEXTS, embed).unwrap();
        let mut options = options(&device);
        options.embed.normalize = normalize;
        let embedder = pipeline(Task::Embed, path(&dir), options).unwrap();
        assert_eq!((embedder.task(), embedder.family()), (Task::Embed, "bert"));
        assert_eq!(embedder.embed(&TEXTS).unwrap(), expected, "normalize {normalize}");
    }
    let masked = BertForMaskedLM::from_pretrained(&dir, &device).unwrap();
    let expected = sesame_pipelines::fill_masks(&masked.model, &masked.config, &tokenizer, &TEXTS[2..], 3, 32).unwrap();
    let filler = pipeline(Task::FillMask, path(&dir), PipelineOptions { top_k: 3, ..options(&device) }).unwrap();
    let got = filler.fill_mask(&TEXTS[2..]).unwrap();
    assert_eq!(got, expected);
    assert_eq!(got[0][0].len(), 3, "top_k candidates");

    // The Auto classes: the family's types, the same numbers.
    let input = sesame_layers::EncoderInput::new(Tensor::<2, Int>::from_data([[2, 7, 8, 9, 3]], &device));
    let auto = AutoModel::from_pretrained(path(&dir), &device).unwrap();
    assert_eq!(auto.family(), "bert");
    let typed = base.model.forward(input.clone(), OutputOptions::default()).encoder.last_hidden_state;
    assert_eq!(values(auto.forward(input.clone())), values(typed));
    let auto = AutoModelForMaskedLM::from_pretrained(path(&dir), &device).unwrap();
    assert_eq!(values(auto.forward(input.clone())), values(masked.model.forward(input, None, OutputOptions::default()).logits));
}

#[test]
fn classify_and_tag_pipelines_give_what_the_typed_pipelines_give() {
    let (_, device) = devices().remove(0);
    let classifier_dir = with_tokenizer("bert/base-seqcls-single", "pipelines");
    let tokenizer = Tokenizer::from_dir(&classifier_dir).unwrap();
    let typed = BertForSequenceClassification::from_pretrained(&classifier_dir, &device).unwrap();
    let expected = sesame_pipelines::classify(&typed.model, &typed.config, &tokenizer, &TEXTS, 32).unwrap();
    let classifier = pipeline(Task::Classify, path(&classifier_dir), options(&device)).unwrap();
    assert_eq!(classifier.classify(&TEXTS).unwrap(), expected);
    let pairs = [("the cat", "sat on the mat"), ("hello", "world")];
    let expected_pairs = sesame_pipelines::classify_pairs(&typed.model, &typed.config, &tokenizer, &pairs, 32).unwrap();
    assert_eq!(classifier.classify_pairs(&pairs).unwrap(), expected_pairs);
    let auto = AutoModelForSequenceClassification::from_pretrained(path(&classifier_dir), &device).unwrap();
    let input = sesame_layers::EncoderInput::new(Tensor::<2, Int>::from_data([[2, 7, 8, 9, 3]], &device));
    assert_eq!(values(auto.forward(input.clone())), values(sesame_layers::TaskModel::run(&typed.model, input.clone(), sesame_layers::OutputOptions::logits_only()).logits));
    assert_eq!(auto.labels().len(), sesame::layers::HfConfig::labels(&typed.config).count(0));

    let tagger_dir = with_tokenizer("bert/base-token-classification", "pipelines");
    let typed = BertForTokenClassification::from_pretrained(&tagger_dir, &device).unwrap();
    let stride = sesame::layers::HfConfig::input_limits(&typed.config).max_len / 4;
    let expected = sesame_pipelines::tag(&typed.model, &typed.config, &tokenizer, &TEXTS, 32, stride).unwrap();
    let tagger = pipeline(Task::Tag, path(&tagger_dir), options(&device)).unwrap();
    assert_eq!(tagger.tag(&TEXTS).unwrap(), expected);
    let auto = AutoModelForTokenClassification::from_pretrained(path(&tagger_dir), &device).unwrap();
    assert_eq!(values(auto.forward(input.clone())), values(sesame_layers::TaskModel::run(&typed.model, input, sesame_layers::OutputOptions::logits_only())));

    // A classifier of several labels is no cross-encoder; a tagger's checkpoint is no classifier.
    let refused = pipeline(Task::Rerank, path(&classifier_dir), options(&device)).err().unwrap();
    assert!(matches!(refused, Error::NotACrossEncoder { .. }), "{refused}");
    let refused = pipeline(Task::Classify, path(&tagger_dir), options(&device)).err().unwrap().to_string();
    assert!(refused.contains("architectures says BertForTokenClassification") && refused.contains("a sequence classifier"), "{refused}");
    // A pipeline is for its job only.
    let refused = tagger.embed(&TEXTS).unwrap_err().to_string();
    assert_eq!(refused, "this pipeline is for token-classification, not embed");
    for dir in [classifier_dir, tagger_dir] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn a_family_without_a_model_for_the_job_is_refused_by_name() {
    let (_, device) = devices().remove(0);
    let bart = fixtures_dir().join("bart/base-seqcls-single");
    for task in [Task::Tag, Task::Embed, Task::FillMask] {
        let refused = pipeline(task, path(&bart), options(&device)).err().unwrap();
        assert!(matches!(refused, Error::Unsupported { family: "bart", .. }), "{task:?}: {refused}");
        let line = refused.to_string();
        assert!(line.starts_with("bart has no ") && line.ends_with("bart checkpoints run classify, rerank, answer, generate"), "{line}");
    }
    let refused = AutoModelForTokenClassification::from_pretrained(path(&bart), &device).err().unwrap().to_string();
    assert!(refused.starts_with("bart has no token classifier"), "{refused}");
    let xlnet = fixtures_dir().join("xlnet/base-seqcls-single");
    let refused = pipeline(Task::Embed, path(&xlnet), options(&device)).err().unwrap().to_string();
    assert!(refused.starts_with("xlnet has no ") && refused.ends_with("xlnet checkpoints run classify, rerank, tag, answer, generate"), "{refused}");

    // A model_type no family reads, and a name that is neither a directory nor a cached id.
    let dir = sesame_tests::Scratch::dir("facade-gpt2");
    std::fs::write(dir.join("config.json"), r#"{"model_type": "gpt2"}"#).unwrap();
    let refused = pipeline(Task::Embed, path(&dir), options(&device)).err().unwrap().to_string();
    assert!(refused.contains("model_type `gpt2`") && refused.contains("bert, roberta, albert, electra, unilm, bart, xlnet"), "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
    let refused = pipeline(Task::Embed, "/nonexistent/model", options(&device)).err().unwrap().to_string();
    assert!(refused.contains("/nonexistent/model/config.json"), "{refused}");
}

/// `Task::Generate` runs the family's generator with the checkpoint's own settings: BART's
/// encoder-decoder writes what `sesame_pipelines::generate` writes; an encoder checkpoint not
/// saved as a decoder is refused, naming `is_decoder`.
#[test]
fn the_generate_pipeline_writes_what_the_typed_pipeline_writes() {
    let (_, device) = devices().remove(0);
    let dir = sesame_tests::Scratch::dir("facade-bart-generation");
    for (from, f) in [("bart/base-generation", "config.json"), ("bart/base-generation", "generation_config.json"), ("bart/base-generation", "model.safetensors"), ("bert/base-fill-mask", "vocab.txt"), ("bert/base-fill-mask", "tokenizer.json"), ("bert/base-fill-mask", "tokenizer_config.json")] {
        std::fs::copy(fixtures_dir().join(from).join(f), dir.join(f)).unwrap();
    }
    let prompts = ["the cat sat", "hello world"];
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    let loaded = sesame_bart::BartForConditionalGeneration::from_pretrained(&dir, &device).unwrap();
    let mut settings = sesame_generate::GenerationConfig::from_dir(&dir).unwrap();
    settings.model_max_positions = Some(<sesame_bart::BartForConditionalGeneration as sesame_layers::generative::LanguageModel>::limits(&loaded.config).max_len);
    let expected: Vec<String> = sesame_pipelines::generate(&loaded.model, &loaded.config, &tokenizer, &prompts, &settings, 0, 1).unwrap().into_iter().map(|g| g.texts[0].clone()).collect();
    let generator = pipeline(Task::Generate, path(&dir), options(&device)).unwrap();
    assert_eq!(generator.family(), "bart");
    assert_eq!(generator.generate(&prompts).unwrap(), expected);
    assert!(expected.iter().any(|t| !t.is_empty()), "something was written: {expected:?}");
    std::fs::remove_dir_all(&dir).unwrap();

    let refused = pipeline(Task::Generate, path(&fill_mask_dir()), options(&device)).err().unwrap().to_string();
    assert!(refused.contains("not a left-to-right model (config.json's is_decoder is not true)"), "{refused}");
}

/// A family is its types and its `impl Family`: one declared here from BERT's types alone, as
/// a crate of its own would declare it, runs through the facade's loaders (`pipeline_for`),
/// with the jobs it names and none other.
struct TinyBert;

impl sesame::layers::Family for TinyBert {
    const NAME: &'static str = "tiny-bert";
    const MODEL_TYPES: &'static [&'static str] = &["bert"];
    type Config = sesame_bert::BertConfig;
    type Model = BertModel;
    type Encoder = BertModel;
    type ForSequenceClassification = BertForSequenceClassification;
    type ForTokenClassification = sesame::layers::Unsupported<sesame::layers::TokenLogits>;
    type ForQuestionAnswering = sesame_bert::BertForQuestionAnswering;
    type ForConditionalGeneration = sesame::layers::Unsupported<sesame::layers::generative::Source>;
    type ForCausalLM = sesame_bert::BertLMHeadModel;
}

#[test]
fn a_family_built_from_its_parts_alone_runs_through_the_facade() {
    let (_, device) = devices().remove(0);
    let dir = fill_mask_dir();
    let ours = sesame::pipeline_for::<TinyBert>(Task::Embed, path(&dir), options(&device)).unwrap();
    let bert = pipeline(Task::Embed, path(&dir), options(&device)).unwrap();
    assert_eq!((ours.family(), bert.family()), ("tiny-bert", "bert"));
    assert_eq!(ours.embed(&TEXTS).unwrap(), bert.embed(&TEXTS).unwrap());
    let filler = sesame::pipeline_for::<TinyBert>(Task::FillMask, path(&dir), options(&device)).unwrap();
    assert_eq!(filler.fill_mask(&TEXTS[2..]).unwrap(), pipeline(Task::FillMask, path(&dir), options(&device)).unwrap().fill_mask(&TEXTS[2..]).unwrap());
    let refused = sesame::pipeline_for::<TinyBert>(Task::Tag, path(&dir), options(&device)).err().unwrap().to_string();
    assert_eq!(refused, "tiny-bert has no token classifier; tiny-bert checkpoints run embed, fill-mask, classify, rerank, answer, generate");
    let bart = fixtures_dir().join("bart/base-seqcls-single");
    let refused = sesame::pipeline_for::<TinyBert>(Task::Classify, path(&bart), options(&device)).err().unwrap().to_string();
    assert!(refused.ends_with("model_type `bart` is not tiny-bert's (it reads bert)"), "{refused}");
}

/// `sesame::auto::families()` is the facade's list of families, in lookup order.
#[test]
fn the_facade_knows_every_family_once() {
    assert_eq!(sesame::auto::families(), ["bert", "roberta", "albert", "electra", "unilm", "bart", "xlnet"]);
}

/// The README's "In your project" block is `crates/sesame/examples/quickstart.rs`, word for
/// word (minilm.rs checks its cosines against sentence-transformers'), and that example, built
/// by `cargo test`, reads `sentence-transformers/all-MiniLM-L6-v2` from a HuggingFace cache as it
/// reads the directory (the real model when the setup script unpacked it, else the fill-mask
/// fixture under that id).
#[test]
fn the_readme_library_example_is_the_quickstart_example_and_runs_from_a_hub_cache() {
    let repo = fixtures_dir().join("..");
    let example = std::fs::read_to_string(repo.join("crates/sesame/examples/quickstart.rs")).unwrap();
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let body: String = example.lines().skip_while(|l| l.starts_with("//!")).collect::<Vec<_>>().join("\n");
    assert!(readme.contains(&format!("```rust\n{}\n```", body.trim())), "README.md's library example differs from crates/sesame/examples/quickstart.rs");

    // target/<profile>/deps/<this test> -> target/<profile>/examples/quickstart
    let exe = std::env::current_exe().unwrap();
    let quickstart = exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join(format!("quickstart{}", std::env::consts::EXE_SUFFIX));
    assert!(quickstart.is_file(), "{} is not built (cargo test builds the workspace's examples)", quickstart.display());
    let model = std::env::var_os("SESAME_MINILM_DIR").map(PathBuf::from).unwrap_or_else(fill_mask_dir);
    let cache = sesame_tests::Scratch::path("facade-hub");
    let folder = cache.join("models--sentence-transformers--all-MiniLM-L6-v2");
    let commit = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf";
    std::fs::create_dir_all(folder.join("blobs")).unwrap();
    std::fs::create_dir_all(folder.join("refs")).unwrap();
    std::fs::create_dir_all(folder.join("snapshots").join(commit)).unwrap();
    std::fs::write(folder.join("refs/main"), commit).unwrap();
    for entry in std::fs::read_dir(&model).unwrap() {
        let file = entry.unwrap().path();
        if file.is_file() {
            let name = file.file_name().unwrap().to_owned();
            std::fs::copy(&file, folder.join("blobs").join(&name)).unwrap();
            std::os::unix::fs::symlink(Path::new("../../blobs").join(&name), folder.join("snapshots").join(commit).join(&name)).unwrap();
        }
    }
    let run = |model: &std::ffi::OsStr| {
        let texts = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."];
        let out = std::process::Command::new(&quickstart).arg(model).args(texts).env("HF_HUB_CACHE", &cache).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let (by_id, by_dir) = (run("sentence-transformers/all-MiniLM-L6-v2".as_ref()), run(model.as_os_str()));
    assert_eq!(by_id, by_dir);
    assert_eq!(by_id.lines().count(), 3, "{by_id}");
    std::fs::remove_dir_all(&cache).unwrap();
}

/// The numbers of served outputs: an embedding; a classification's scores; each entity's
/// score and character span; each mask's candidates' scores and ids; an answer's score and span.
fn output_values(outputs: &[sesame_pipelines::served::Output]) -> Vec<Vec<f32>> {
    use sesame_pipelines::served::Output;
    use sesame_pipelines::Classification;
    outputs
        .iter()
        .map(|o| match o {
            Output::Embedding(v) => v.clone(),
            Output::Classification(Classification::Single { scores, .. } | Classification::Multi { scores, .. }) => scores.iter().map(|s| s.score).collect(),
            Output::Classification(Classification::Value { value }) => vec![*value],
            Output::Entities(spans) => spans.iter().flat_map(|s| [s.score, s.start as f32, s.end as f32]).collect(),
            Output::Masks(masks) => masks.iter().flatten().flat_map(|p| [p.score, p.id as f32]).collect(),
            Output::Answer(a) => vec![a.score, a.start as f32, a.end as f32],
        })
        .collect()
}

/// Every batch task reads the encoding the server made ([`ServedModel::encode`]: whole for an
/// embedder, a classifier and a mask filler, windows for a tagger and a reader) instead of
/// tokenizing again: given them it gives what it gives from the texts; given another input's
/// encoding, that input's numbers; given the other kind of encoding, or a whole one longer than
/// it reads, it refuses.
#[test]
fn every_batch_task_reads_the_servers_encodings_instead_of_tokenizing_again() {
    use sesame_pipelines::served::{encode_whole, Encoded, Input};
    let (_, device) = devices().remove(0);
    let classifier_dir = with_tokenizer("bert/base-seqcls-single", "served");
    let tagger_dir = with_tokenizer("bert/base-token-classification", "served");
    let reader_dir = with_tokenizer("bert/base-qa", "served");
    let long = "the cat sat on the mat . ".repeat(200);
    let text = |t: &str| Input::Text(t.into());
    let pair = |a: &str, b: &str| Input::Pair(a.into(), b.into());
    for (task, dir, inputs) in [
        (Task::Embed, fill_mask_dir(), vec![text(TEXTS[0]), text(TEXTS[1]), text(&long)]),
        (Task::Classify, classifier_dir.to_path_buf(), vec![text(TEXTS[0]), pair("hello", "world"), text(TEXTS[1]), text(&long)]),
        (Task::Tag, tagger_dir.to_path_buf(), vec![text(TEXTS[0]), text("hello world , the whale"), text(&long)]),
        (Task::FillMask, fill_mask_dir(), vec![text("the [MASK] sat on the mat ."), text(TEXTS[2])]),
        (Task::Answer, reader_dir.to_path_buf(), vec![pair("who sat ?", "the cat sat on the mat ."), pair("where ?", "hello world , the whale"), pair("who ?", &long)]),
    ] {
        let served = pipeline(task, path(&dir), options(&device)).unwrap().served();
        let limit = served.max_input_length();
        // As the server passes them: an input's encoding where the model reads it whole or in
        // windows, none where it is to be truncated.
        let encoded: Vec<Option<Encoded>> = inputs.iter().map(|i| served.encode(i).ok().filter(|e| e.fits(limit))).collect();
        let windowed = matches!(task, Task::Tag | Task::Answer);
        assert!(encoded.iter().flatten().all(|e| matches!(e, Encoded::Windows(_)) == windowed), "{task:?}: the kind of encoding");
        if windowed {
            assert!(matches!(encoded.last().unwrap(), Some(Encoded::Windows(w)) if w.len() > 1), "{task:?}: the long text is windowed");
        }
        let expected = output_values(&served.run(&inputs).unwrap());
        assert_eq!(output_values(&served.run_encoded(&inputs, &encoded).unwrap()), expected, "{task:?}");
        // The model reads the encoding it is given, not its text: the first input given the
        // second's encoding gives the second's numbers (to rounding: its batch is padded to
        // other lengths).
        let mut swapped = encoded.clone();
        swapped[0] = encoded[1].clone();
        let got = output_values(&served.run_encoded(&inputs, &swapped).unwrap());
        let worst = |a: &[f32], b: &[f32]| if a.len() == b.len() { a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max) } else { f32::INFINITY };
        assert!(worst(&got[0], &expected[1]) < 1e-5 && worst(&got[0], &expected[0]) > 1e-3, "{task:?}: {:?} against {:?}", got[0], expected[1]);
        assert!(got.iter().zip(&expected).skip(1).all(|(g, e)| worst(g, e) < 1e-5), "{task:?}");
        // The other kind of encoding is refused, naming it.
        let mut other = encoded.clone();
        other[0] = Some(if windowed { Encoded::Whole(encode_whole(served.tokenizer(), &inputs[0]).unwrap()) } else { Encoded::Windows(Vec::new()) });
        let refused = served.run_encoded(&inputs, &other).unwrap_err().to_string();
        assert!(refused.contains("encoded") && refused.contains(if windowed { "windowed" } else { "whole" }), "{task:?}: {refused}");
        // A whole encoding longer than the model reads is refused, not run.
        if !windowed {
            let mut too_long = encoded.clone();
            too_long[1] = Some(Encoded::Whole(encode_whole(served.tokenizer(), &Input::Text(long.clone())).unwrap()));
            let refused = served.run_encoded(&inputs, &too_long).unwrap_err().to_string();
            assert!(refused.contains(&format!("{limit}")), "{task:?}: {refused}");
        }
    }
    for dir in [classifier_dir, tagger_dir, reader_dir] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// `sesame::train::pretrain` runs the family its options name, each family's own settings in
/// the same options: MASS's fragment for BART (its record says so, `sesame::train::export`
/// exports it again, and the export loads), BART's noise refused for BERT and XLNet naming the
/// setting, an unknown family refused naming the families compiled in; `objectives()` lists
/// every family once.
#[test]
fn pretraining_runs_the_family_its_options_name() {
    use sesame::train::{export, objectives, pretrain, Objective, PretrainOptions};
    let device = Device::flex();
    let run = sesame_tests::Scratch::path("facade-pretrain-bart-mass");
    let corpus = fixtures_dir().join("../data/moby-dick.txt");
    let job = PretrainOptions {
        steps: Some(2),
        batch_size: 4,
        seq_len: 32,
        vocab_size: 600,
        objective: Some(Objective::Mass),
        mass_fraction: Some(0.25),
        out: Some(run.to_path_buf()),
        ..PretrainOptions::new("bart", &corpus)
    };
    let done = pretrain(&job, device.clone()).unwrap();
    let record = std::fs::read_to_string(run.join("run.json")).unwrap();
    assert!(record.contains("\"family\": \"bart\"") && record.contains("MASS") && record.contains("fraction: 0.25"), "{record}");
    let again = export(&done.run, None, Some(run.join("again")), device.clone()).unwrap();
    let loaded = sesame_bart::BartForConditionalGeneration::from_pretrained(&again.export, &device).unwrap();
    assert!(loaded.report.applied > 0 && loaded.report.initialized.is_empty() && loaded.report.unused.is_empty(), "{}", loaded.report);
    assert!((256..=600).contains(&loaded.config.vocab_size), "{}", loaded.config.vocab_size);

    let refused = |job: PretrainOptions| pretrain(&job, device.clone()).unwrap_err().to_string();
    let mut noisy = PretrainOptions::new("bert", &corpus);
    noisy.noise.mask = Some(0.2);
    assert_eq!(refused(noisy.clone()), "--mask is one of BART's noise settings; bert masks with --masking");
    noisy.family = "xlnet".into();
    assert!(refused(noisy).starts_with("--mask is one of BART's noise settings; XLNet's permutation LM"));
    let e = refused(PretrainOptions::new("nosuch", &corpus));
    assert_eq!(e, "unknown family `nosuch` (expected bert, roberta, albert, electra, unilm, bart, xlnet)");
    let names: Vec<_> = objectives().into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, sesame::auto::families());
}
