//! A line of a command's `--input` file (`embed`, `classify`, `generate`, …): text, or JSON with
//! `"text"` or `"input_ids"`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for line in text.lines() {
        let _ = sesame_text::inputs::parse_input_line(line, true);
        let _ = sesame_text::inputs::parse_input_line(line, false);
    }
});
