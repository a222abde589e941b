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
