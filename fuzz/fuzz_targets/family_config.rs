//! Every family's `config.json` (the first byte picks the family) beside the fixture's weights:
//! loading the base model gives it or an error naming a field or tensor, never a panic, an
//! abort or an allocation the weights do not back.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sesame_layers::PretrainedModel;

fuzz_target!(|data: &[u8]| {
    let (family, data) = sesame_fuzz::pick(data, 7);
    let fixture = ["bert/base-model", "roberta/base-model", "albert/base-model", "electra/base-model", "unilm/v1-checkpoint", "bart/base-model", "xlnet/base-model"][family];
    let files = ["model.safetensors", "pytorch_model.bin"];
    let dir = sesame_fuzz::model_dir(&format!("config-{family}"), fixture, &files, "config.json", data);
    let device = sesame_fuzz::device();
    let _ = match family {
        0 => sesame_bert::BertModel::from_pretrained(&dir, &device).map(|_| ()),
        1 => sesame_roberta::RobertaModel::from_pretrained(&dir, &device).map(|_| ()),
        2 => sesame_albert::AlbertModel::from_pretrained(&dir, &device).map(|_| ()),
        3 => sesame_electra::ElectraModel::from_pretrained(&dir, &device).map(|_| ()),
        4 => sesame_unilm::UnilmModel::from_pretrained(&dir, &device).map(|_| ()),
        5 => sesame_bart::BartModel::from_pretrained(&dir, &device).map(|_| ()),
        _ => sesame_xlnet::XlnetModel::from_pretrained(&dir, &device).map(|_| ()),
    };
});
