//! A bare `spiece.model` (SentencePiece's protobuf: Unigram or BPE pieces, its normaliser's
//! precompiled table), read as ALBERT's and XLNet's tokenizers read it: load, encode, decode.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (family, data) = sesame_fuzz::pick(data, 2);
    let fixture = ["albert/spiece", "xlnet/spiece"][family];
    let dir = sesame_fuzz::model_dir(&format!("spiece-{family}"), fixture, &["config.json", "tokenizer_config.json"], "spiece.model", data);
    sesame_fuzz::exercise_tokenizer(&dir);
});
