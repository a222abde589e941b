//! A BERT checkpoint whose `pytorch_model.bin` (a zip holding a pickle and its storages) is the
//! input, with the fixture's config.json: the model or an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sesame_layers::PretrainedModel;

fuzz_target!(|data: &[u8]| {
    let dir = sesame_fuzz::model_dir("pytorch", "bert/base-model-bin", &["config.json"], "pytorch_model.bin", data);
    let _ = sesame_bert::BertModel::from_pretrained(&dir, &sesame_fuzz::device());
});
