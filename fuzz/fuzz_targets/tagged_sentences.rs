//! A tagged file for `finetune --task tag` (the first byte picks CoNLL or JSON lines): read, its
//! tags named and every sentence's tag ids made.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sesame_text::tagged;

fuzz_target!(|data: &[u8]| {
    let (kind, data) = sesame_fuzz::pick(data, 2);
    let path = sesame_fuzz::file(["tags.conll", "tags.jsonl"][kind], data);
    let Ok(sentences) = tagged::read_sentences(&path, &tagged::TagFields::default()) else { return };
    let names = tagged::tag_names(&sentences);
    let _ = tagged::tag_ids(&path, &sentences, &names);
    let _ = tagged::are_entity_tags(&names);
});
