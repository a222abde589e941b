//! A question file for `finetune --task qa`: SQuAD's JSON or JSON lines, read.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = sesame_fuzz::file("questions.json", data);
    let _ = sesame_text::squad::read_questions(&path);
});
