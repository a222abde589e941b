//! A BERT checkpoint whose `model.safetensors` is the input (header, tensor table, data), with
//! the fixture's config.json: loading must give the model or an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sesame_layers::PretrainedModel;

fuzz_target!(|data: &[u8]| {
    let dir = sesame_fuzz::model_dir("safetensors", "bert/base-model", &["config.json"], "model.safetensors", data);
    let _ = sesame_bert::BertModel::from_pretrained(&dir, &sesame_fuzz::device());
});
