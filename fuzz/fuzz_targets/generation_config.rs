//! `generation_config.json` (with a fixed `config.json`): read, checked against a vocabulary
//! of 77, and every processor and stopping rule built from it, as `generate` does.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = sesame_fuzz::model_dir("generation", "generation/bert-lm-head", &["config.json"], "generation_config.json", data);
    let Ok(mut config) = sesame_generate::GenerationConfig::from_dir(&dir) else { return };
    config.model_max_positions = Some(40);
    if config.validate().is_err() || config.validate_ids(77).is_err() {
        return;
    }
    let _ = config.stopping(5);
    let _ = config.processors(5);
    let _ = config.beams();
});
