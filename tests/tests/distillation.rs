//! Masked-LM distillation (DistilBERT's, with TinyBERT's layer-wise terms): the first step of
//! a student made of every other layer of its teacher equals a PyTorch implementation of
//! DistilBERT's `distiller.py` (each term, the loss, every gradient, every parameter after a
//! clipped AdamW step) on every compiled backend.

use burn::prelude::*;
use sesame_bert::BertForMaskedLM;
use sesame_layers::{HfConfig as _, OutputOptions, PretrainedModel};
use sesame_tests::training::first_step_failures;
use sesame_tests::{devices, values, Fixture};
use sesame_train::distill::{masked_lm_distillation_step, DistillLoss};
use sesame_train::{PretrainingBatch, StepOutput, TrainTask};

/// The fixture's batch, distilled from a fixed teacher.
struct Distil {
    teacher: BertForMaskedLM,
    loss: DistillLoss,
    batch: PretrainingBatch,
}

impl TrainTask for Distil {
    type Model = BertForMaskedLM;
    type Batch = PretrainingBatch;
    type State = ();
    fn train_batch(&self, _: u64, _: &Device) -> PretrainingBatch {
        self.batch.clone()
    }
    fn held_out_batches(&self, _: &Device) -> Vec<PretrainingBatch> {
        vec![]
    }
    fn step(&self, student: &BertForMaskedLM, batch: PretrainingBatch) -> StepOutput {
        masked_lm_distillation_step(student, None, &self.teacher, &self.loss, batch)
    }
}

#[test]
fn the_first_step_of_masked_lm_distillation_matches_pytorch() {
    let f = Fixture::open("train/distil-first-step");
    let meta = &f.meta;
    let alpha = |k: &str| meta["alpha"][k].as_f64().unwrap();
    let loss = DistillLoss {
        temperature: meta["temperature"].as_f64().unwrap(),
        soft: alpha("soft"),
        hard: alpha("hard"),
        cosine: alpha("cos"),
        hidden: alpha("hidden"),
        attention: alpha("attention"),
        layer_map: meta["layer_map"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect(),
    };
    let kept: Vec<usize> = meta["kept_layers"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
    for (backend, device) in devices() {
        let train = device.clone().autodiff();
        let loaded = BertForMaskedLM::from_pretrained(&f.dir, &train).unwrap();
        assert!(loaded.report.initialized.is_empty() && loaded.report.unused.is_empty(), "{backend}: {}", loaded.report);
        let mut config = loaded.config.clone();
        let student = loaded.model.clone().keep_layers(&mut config, &kept).unwrap();
        let teacher = sesame_train::pruning::without_dropout(loaded.model).no_grad();
        let batch = sesame_tests::training::fixture_pretraining_batch(&f, &train, Tensor::zeros([4], &train));
        let task = Distil { teacher, loss: loss.clone(), batch };

        // Each term, and the student's MLM loss, as PyTorch's.
        let out = task.step(&student, task.batch.clone());
        let metric = |name: &str| out.metrics.iter().find(|m| m.name == name).map(|m| m.sum / m.count).unwrap_or_else(|| panic!("{backend}: no {name}"));
        for (ours, theirs) in [("soft_loss", "soft_loss"), ("hard_loss", "hard_loss"), ("cosine_loss", "cos_loss"), ("hidden_loss", "hidden_loss"), ("attention_loss", "attention_loss"), ("mlm_loss", "hard_loss")] {
            let (ours_value, theirs_value) = (metric(ours), f.get(&format!("output.{theirs}")).f32[0] as f64);
            assert!((ours_value - theirs_value).abs() < 1e-4, "{backend}: {ours} {ours_value}, PyTorch {theirs_value}");
        }

        let teacher = sesame_train::forward_masked(&task.teacher, task.batch.input.clone(), &task.batch.masked, OutputOptions::default());
        let (ours, theirs) = (values(teacher.loss.unwrap())[0], f.get("output.teacher_mlm_loss").f32[0]);
        assert!((ours - theirs).abs() < 1e-4, "{backend}: the teacher's MLM loss {ours}, PyTorch {theirs}");

        let failures = first_step_failures(&f, &task, student, &config, &format!("distil-{backend}"));
        assert!(failures.is_empty(), "{backend}:\n  {}", failures.join("\n  "));
    }
}

/// ALBERT's student keeps its teacher's shared layers and runs them at fewer depths: with one
/// group, the student's states after each depth are the teacher's after as many; it saves and
/// loads as an ALBERT of that many layers; depths whose groups a smaller config would not
/// assign them are refused.
#[test]
fn an_albert_student_runs_the_shared_layers_at_fewer_depths() {
    use sesame_albert::AlbertForMaskedLM;
    for (backend, device) in devices() {
        let f = Fixture::open("albert/base-masked-lm");
        let loaded = AlbertForMaskedLM::from_pretrained(&f.dir, &device).unwrap();
        let input = sesame_layers::EncoderInput::new(f.int("input.input_ids", &device)).with_attention_mask(f.int("input.attention_mask", &device));
        let all = OutputOptions { hidden_states: true, ..OutputOptions::default() };
        let teacher = loaded.model.forward(input.clone(), None, all);
        let mut config = loaded.config.clone();
        let student = loaded.model.clone().keep_layers(&mut config, &[0, 2]).unwrap();
        assert_eq!(config.num_hidden_layers, 2, "{backend}");
        let out = student.forward(input.clone(), None, all);
        let (s, t) = (out.encoder.hidden_states.unwrap(), teacher.encoder.hidden_states.unwrap());
        assert_eq!(s.len(), 3, "{backend}: the embeddings and two depths");
        for depth in 0..3 {
            let diff = sesame_tests::max_abs_diff(&values(s[depth].clone()), &values(t[depth].clone()));
            assert!(diff < 1e-5, "{backend}: depth {depth} differs by {diff}");
        }
        let dir = sesame_tests::training::run_dir(&format!("albert-student-{backend}"));
        student.save_pretrained(&config, &dir).unwrap();
        let reloaded = AlbertForMaskedLM::from_pretrained(&dir, &device).unwrap();
        assert!(reloaded.report.initialized.is_empty() && reloaded.report.unused.is_empty(), "{backend}: {}", reloaded.report);
        let diff = sesame_tests::max_abs_diff(&values(reloaded.model.forward(input, None, OutputOptions::default()).logits), &values(out.logits));
        assert!(diff < 1e-5, "{backend}: the reloaded student differs by {diff}");

        // Two groups over three depths run [0, 0, 1]; depths 0 and 1 would run [0, 0], where
        // two layers over two groups run [0, 1].
        let grouped = AlbertForMaskedLM::from_pretrained(&Fixture::open("albert/grouped-masked-lm").dir, &device).unwrap();
        let mut config = grouped.config.clone();
        let err = grouped.model.clone().keep_layers(&mut config, &[0, 1]).unwrap_err().to_string();
        assert!(err.contains("num_hidden_layers") && err.contains("[0, 0]"), "{backend}: {err}");
        assert!(grouped.model.keep_layers(&mut config, &[0, 2]).is_ok(), "{backend}: depths 0 and 2 run groups 0 and 1");
    }
}

/// What classifier distillation compares of XLNet's and BART's classifiers: the logits and
/// each stack's hidden states and attentions (XLNet's content stream; BART's encoder, then its
/// decoder) are transformers' outputs of the same names. A student keeps its teacher's layers:
/// its lowest layer's states are the teacher's, and the config says how many it has; BART
/// keeps the same layers of both stacks, and refuses stacks of two depths.
#[test]
fn xlnet_and_bart_classifiers_give_distillation_their_layers_and_keep_their_teachers() {
    use sesame_bart::BartForSequenceClassification;
    use sesame_layers::{ClassifierLayers, EncoderInput, TaskModel};
    use sesame_tests::Checker;
    use sesame_xlnet::XlnetForSequenceClassification;

    let all = OutputOptions::all();
    let input = |f: &Fixture, device: &Device| {
        let mut input = EncoderInput::new(f.int("input.input_ids", device)).with_attention_mask(f.int("input.attention_mask", device));
        input.token_type_ids = f.has("input.token_type_ids").then(|| f.int("input.token_type_ids", device));
        input
    };
    // The stacks' outputs against transformers' `{prefix}hidden_states.i` and `{prefix}attentions.i`.
    let compare = |check: &mut Checker, f: &Fixture, out: &ClassifierLayers, prefixes: &[&str]| {
        check.close("logits", out.logits.clone(), f.get("output.all.logits"), 1e-4);
        assert_eq!(out.stacks.len(), prefixes.len());
        for (stack, prefix) in out.stacks.iter().zip(prefixes) {
            for (i, h) in stack.hidden_states.clone().unwrap().into_iter().enumerate() {
                check.close(&format!("{prefix}hidden_states.{i}"), h, f.get(&format!("output.all.{prefix}hidden_states.{i}")), 1e-4);
            }
            for (i, a) in stack.attentions.clone().unwrap().into_iter().enumerate() {
                check.close(&format!("{prefix}attentions.{i}"), a, f.get(&format!("output.all.{prefix}attentions.{i}")), 1e-4);
            }
        }
    };
    let lowest_state = |out: &ClassifierLayers| values(out.stacks[0].hidden_states.as_ref().unwrap()[1].clone());
    for (backend, device) in devices() {
        let mut check = Checker::default();
        for shape in ["base", "wide"] {
            let f = Fixture::open(&format!("xlnet/{shape}-seqcls-single"));
            let loaded = XlnetForSequenceClassification::from_pretrained(&f.dir, &device).unwrap();
            let teacher = loaded.model.run(input(&f, &device), all);
            compare(&mut check, &f, &teacher, &[""]);
            let mut config = loaded.config.clone();
            let layers = config.num_layers();
            let student = loaded.model.keep_layers(&mut config, &[0, layers - 1]).unwrap();
            assert_eq!((config.n_layer, student.transformer.layer.len()), (2, 2), "{backend}: {shape}");
            let out = student.run(input(&f, &device), all);
            let diff = sesame_tests::max_abs_diff(&lowest_state(&out), &lowest_state(&teacher));
            assert!(diff < 1e-5, "{backend}: the XLNet student's first layer differs by {diff}");
        }
        let f = Fixture::open("bart/base-seqcls-single");
        let loaded = BartForSequenceClassification::from_pretrained(&f.dir, &device).unwrap();
        let teacher = loaded.model.run(input(&f, &device), all);
        compare(&mut check, &f, &teacher, &["encoder_", "decoder_"]);
        check.finish(&format!("{backend}: the classifiers' layers"));
        let mut config = loaded.config.clone();
        let student = loaded.model.keep_layers(&mut config, &[0]).unwrap();
        assert_eq!((config.encoder_layers, config.decoder_layers), (1, 1), "{backend}");
        let out = student.run(input(&f, &device), all);
        assert_eq!(out.stacks[1].hidden_states.as_ref().unwrap().len(), 2, "{backend}: the decoder's embeddings and one layer");
        let diff = sesame_tests::max_abs_diff(&lowest_state(&out), &lowest_state(&teacher));
        assert!(diff < 1e-5, "{backend}: the BART student's first encoder layer differs by {diff}");

        let wide = BartForSequenceClassification::from_pretrained(&Fixture::open("bart/wide-seqcls-single").dir, &device).unwrap();
        let mut config = wide.config.clone();
        let err = wide.model.keep_layers(&mut config, &[0]).unwrap_err().to_string();
        assert!(err.contains("decoder_layers") && err.contains("encoder has 3 layers and the decoder 2"), "{backend}: {err}");
        assert_eq!(config.encoder_layers, 3, "{backend}: a refusal leaves the config as it was");
    }
}
