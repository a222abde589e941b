//! `sesame_pipelines::generate`, the library's generation calls that `cargo xtask generate`
//! runs on: sources batched and padded give transformers' sequences, and a text prompt is
//! continued from its own tokens, less the `[SEP]` that would close it.

use sesame_bart::BartForConditionalGeneration;
use sesame_bert::BertLMHeadModel;
use sesame_generate::decoding::LanguageModel;
use sesame_generate::GenerationConfig;
use sesame_layers::PretrainedModel;
use sesame_pipelines::generate::{continue_ids, continue_prompts, generate_ids, open_prompt};
use sesame_tests::{devices, fixtures_dir, Fixture};
use sesame_text::Tokenizer;

/// Two sources of different lengths in one padded batch, with the model directory's
/// generation_config.json (greedy, forced end): transformers' `generate` sequences.
#[test]
fn generate_ids_pads_a_batch_of_sources_and_gives_transformers_sequences() {
    let f = Fixture::open("bart/base-generation");
    let want = f.get("output.cli.defaults.sequences");
    let want: Vec<Vec<u32>> = want.i64.chunks(want.shape[1]).map(|r| r.iter().map(|&t| t as u32).collect()).collect();
    let sources = vec![vec![0, 17, 23, 5, 40, 61, 8, 2], vec![0, 33, 12, 70, 2]];
    for (backend, device) in devices() {
        let loaded = BartForConditionalGeneration::from_pretrained(&f.dir, &device).unwrap();
        let mut config = GenerationConfig::from_dir(&f.dir).unwrap();
        config.model_max_positions = Some(BartForConditionalGeneration::limits(&loaded.config).max_len);
        let start = config.decoder_start_token_id.unwrap();
        let out = generate_ids(&loaded.model, &loaded.config, &sources, start, &config, 0, &mut ()).unwrap();
        assert_eq!(out.sequences, want, "{backend:?}");
    }
}

/// `continue_prompts` on text: each prompt's ids as the tokenizer gives them without the
/// closing `[SEP]`, then what `continue_ids` generates from them, decoded.
#[test]
fn continue_prompts_continues_each_text_from_its_tokens_without_the_closing_sep() {
    let dir = sesame_tests::Scratch::dir("generation-pipeline");
    for (from, names) in [("generation/bert-lm-head", &["config.json", "generation_config.json", "model.safetensors"][..]), ("bert/base-fill-mask", &["vocab.txt", "tokenizer.json", "tokenizer_config.json"][..])] {
        for name in names {
            std::fs::copy(fixtures_dir().join(from).join(name), dir.join(name)).unwrap();
        }
    }
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    let sep = tokenizer.token_to_id(&tokenizer.special_tokens().sep).unwrap();
    let prompts = ["the cat sat", "a dog"];
    let (backend, device) = devices().remove(0);
    let loaded = BertLMHeadModel::from_pretrained(&dir, &device).unwrap();
    let mut config = GenerationConfig::from_dir(&dir).unwrap();
    config.max_new_tokens = Some(6);
    let got = continue_prompts(&loaded.model, &loaded.config, &tokenizer, &prompts, &config, 0).unwrap();
    assert_eq!(got.len(), 2);
    for (prompt, result) in prompts.iter().zip(&got) {
        let ids: Vec<u32> = tokenizer.encode_each(&[prompt], usize::MAX, false).unwrap()[0].input_ids.iter().map(|&t| t as u32).collect();
        assert_eq!(ids.last(), Some(&sep), "the tokenizer closes a text with [SEP]");
        let open = open_prompt(&tokenizer, ids.clone());
        assert_eq!(open, ids[..ids.len() - 1], "{prompt}: the prompt without its [SEP]");
        let want = continue_ids(&loaded.model, &loaded.config, &open, &config, 0, &mut ()).unwrap().sequences;
        assert_eq!(result.sequences, want, "{backend:?} {prompt}");
        assert!(result.sequences[0].len() > open.len() && result.sequences[0].starts_with(&open), "{backend:?} {prompt}: {:?}", result.sequences);
        assert_eq!(result.texts, vec![tokenizer.decode(&result.sequences[0]).unwrap()]);
    }
}

/// Keeps the tokens a search gives it.
#[derive(Default)]
struct Streamed(Vec<u32>);

impl sesame_generate::TokenStreamer for Streamed {
    fn put(&mut self, _row: usize, tokens: &[u32]) {
        self.0.extend_from_slice(tokens);
    }
}

/// The server's shared search on an encoder-decoder: requests with sources of different
/// lengths and their own settings (the directory's greedy search with a forced end and
/// log-probabilities, a 3-token cut, seeded sampling) run as one padded batch, and each gets
/// the tokens, log-probabilities and streamed tokens it gets alone; a beam-search request among
/// them is refused on its own, the others running.
#[test]
fn a_shared_search_of_sources_of_different_lengths_gives_each_request_what_it_gives_alone() {
    use sesame_pipelines::generator::Seq2SeqGenerator;
    use sesame_pipelines::served::{Generator, SharedRequest};
    let f = Fixture::open("bart/base-generation");
    let dir = sesame_tests::Scratch::dir("shared-generation");
    for name in ["config.json", "generation_config.json", "model.safetensors"] {
        std::fs::copy(f.dir.join(name), dir.join(name)).unwrap();
    }
    for name in ["vocab.txt", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixtures_dir().join("bert/base-fill-mask").join(name), dir.join(name)).unwrap();
    }
    let directory = GenerationConfig::from_dir(&dir).unwrap();
    let with = |change: &dyn Fn(&mut GenerationConfig)| {
        let mut c = directory.clone();
        change(&mut c);
        c
    };
    let requests: Vec<(Vec<u32>, GenerationConfig, u64)> = vec![
        (vec![0, 17, 23, 5, 40, 61, 8, 2], with(&|c| c.output_scores = Some(true)), 0),
        (vec![0, 33, 12, 70, 2], with(&|c| c.max_new_tokens = Some(3)), 0),
        (vec![0, 9, 2], with(&|c| c.num_beams = Some(2)), 0),
        (vec![0, 41, 7, 7, 19, 2], with(&|c| (c.do_sample, c.top_k, c.max_new_tokens, c.output_scores) = (Some(true), Some(0), Some(6), Some(true))), 5),
    ];
    for (backend, device) in devices() {
        let loaded = BartForConditionalGeneration::from_pretrained(&dir, &device).unwrap();
        let generator = Seq2SeqGenerator::new(loaded.model, loaded.config, Tokenizer::from_dir(&dir).unwrap(), directory.clone()).unwrap();
        assert_eq!(generator.shared_key(&requests[2].0, &requests[2].1), None, "beam search runs alone");
        let mut streamed: Vec<Streamed> = requests.iter().map(|_| Streamed::default()).collect();
        let mut shared: Vec<SharedRequest> = requests
            .iter()
            .zip(&mut streamed)
            .map(|((prompt, settings, seed), streamer)| SharedRequest { prompt, settings, seed: *seed, streamer })
            .collect();
        let got = generator.generate_shared(&mut shared).unwrap();
        drop(shared);
        assert!(got[2].as_ref().unwrap_err().to_string().contains("num_beams"), "{backend:?}: {:?}", got[2]);
        for (i, (prompt, settings, seed)) in requests.iter().enumerate().filter(|(i, _)| *i != 2) {
            let mut alone = Streamed::default();
            let want = generator.generate(prompt, settings, *seed, &mut alone).unwrap();
            let got = got[i].as_ref().unwrap();
            assert_eq!(got.tokens, want.tokens, "{backend:?}: request {i}'s tokens");
            assert_eq!(streamed[i].0, alone.0, "{backend:?}: request {i}'s streamed tokens");
            assert_eq!(got.logprobs.is_some(), want.logprobs.is_some());
            for (a, b) in got.logprobs.iter().flatten().zip(want.logprobs.iter().flatten()) {
                assert!((a - b).abs() < 1e-4, "{backend:?}: request {i}'s log-probabilities {:?} alone {:?}", got.logprobs, want.logprobs);
            }
        }
        let lengths: Vec<usize> = got.iter().map(|g| g.as_ref().map_or(0, |g| g.tokens.len())).collect();
        assert_eq!(lengths[1], 3, "the cut request: {lengths:?}");
        assert!(lengths[0] > 3 && lengths[3] > 0, "{lengths:?}");
    }
}
