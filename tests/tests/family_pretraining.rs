//! RoBERTa, ALBERT, ELECTRA, UniLM and SpanBERT pre-train with their papers' objectives on the shared
//! trainer: a tiny model of each learns from the shipped corpus, and the batches are what the
//! papers describe (RoBERTa: packed single sequences, one token type, no sentence task;
//! ALBERT: sentence pairs with balanced order labels, whole-word n-gram masks; ELECTRA: its
//! masking, a discriminator beating its label prior; UniLM: four objectives in the paper's
//! proportions, each under its mask and token types).

use burn::prelude::*;
use sesame_albert::{Albert, AlbertConfig};
use sesame_layers::PretrainedModel;
use sesame_bert::pretraining::SpanBert;
use sesame_bert::BertConfig;
use sesame_roberta::{Roberta, RobertaConfig};
use sesame_tests::training::run_dir;
use sesame_tests::{fixtures_dir, Backend};
use sesame_text::{Corpus, Example, Packing, PairConfig, Tokenizer};
use sesame_train::pretraining::{Layout, Pretraining, PretrainingFamily};
use sesame_train::{TrainConfig, TrainTask, Trainer};

/// The shipped corpus's first `docs` chapters, a tokenizer of the family's kind trained on
/// them, and the family's pre-training task.
fn task<F: PretrainingFamily>(docs: usize, vocab: usize, seq_len: usize, batch: usize) -> (Pretraining<F::Model>, Tokenizer) {
    task_with::<F>(docs, vocab, F::layout().with_max_seq_len(seq_len), batch)
}

/// [`task`] with another data layout.
fn task_with<F: PretrainingFamily>(docs: usize, vocab: usize, layout: Layout, batch: usize) -> (Pretraining<F::Model>, Tokenizer) {
    let corpus = Corpus::read(&fixtures_dir().join("../data/moby-dick.txt")).unwrap();
    let corpus = Corpus { documents: corpus.documents.into_iter().take(docs).collect() };
    let (train, held_out) = corpus.split_held_out(0.05);
    let kind = F::tokenizer();
    let tokenizer = Tokenizer::train(kind, train.sentences(), vocab, &kind.config()).unwrap();
    let task = Pretraining::new(&train, &held_out, &tokenizer, tokenizer.vocab_size(), layout, F::masking().strategy(&Default::default()), batch, 7).unwrap();
    (task, tokenizer)
}

/// Train `model` 300 steps on flex and return the held-out MLM loss before and after, and
/// the final held-out metrics.
fn learn<F: PretrainingFamily>(task: &Pretraining<F::Model>, model: F::Model, name: &str) -> (f64, f64, std::collections::BTreeMap<String, f64>) {
    let device = Backend::Flex.device().expect("flex is always compiled in");
    let train = TrainConfig { steps: 300, lr: 3e-3, warmup: 30, log_every: 50, eval_every: 0, checkpoint_every: 0, ..TrainConfig::default() };
    let run = run_dir(name);
    let trainer = Trainer::new(train, &run).with_progress(false);
    let before = trainer.evaluate(task, &model, &task.held_out_batches(&device));
    let outcome = trainer.fit(task, model, false).unwrap();
    (before["mlm_loss"], outcome.held_out["mlm_loss"], outcome.held_out.clone())
}

#[test]
fn a_tiny_roberta_learns_from_packed_full_sentences() {
    let (task, tokenizer) = task::<Roberta>(20, 1000, 48, 16);
    let batch = task.train_batch(0, &Device::flex());
    let [b, s] = batch.input.input_ids.dims();
    assert_eq!(b, 16);
    assert!(s <= 48);
    let types = batch.input.token_type_ids.clone().unwrap().into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    assert!(types.iter().all(|&t| t == 0), "RoBERTa inputs are single sequences");
    // FULL-SENTENCES: sequences are filled with whole sentences (one that does not fit starts the next).
    let lengths: Vec<usize> = task.train_examples().iter().map(Example::len).collect();
    assert!(lengths.iter().all(|&l| l <= 48));
    let mean = lengths.iter().sum::<usize>() as f64 / lengths.len() as f64;
    assert!(mean > 0.6 * 48.0, "mean packed length {mean:.1} of 48");

    let mut config = RobertaConfig::preset("tiny", tokenizer.vocab_size(), 64, tokenizer.special_tokens().pad.1 as usize).unwrap();
    (config.hidden_size, config.num_attention_heads, config.intermediate_size) = (64, 2, 128);
    let device = Backend::Flex.device().unwrap().autodiff();
    let (start, end, held_out) = learn::<Roberta>(&task, sesame_roberta::RobertaForMaskedLM::new_hf(&config, &device), "roberta-learn");
    let chance = (tokenizer.vocab_size() as f64).ln();
    assert!((start - chance).abs() < 1.0, "initial MLM loss {start:.3}, chance is {chance:.3}");
    assert!(end < start - 0.75, "held-out MLM loss went from {start:.3} to {end:.3}");
    assert!(!held_out.keys().any(|k| k.starts_with("nsp") || k.starts_with("sop")), "no sentence task: {held_out:?}");
}

#[test]
fn a_tiny_albert_learns_with_ngram_masks_and_sentence_order() {
    let (task, tokenizer) = task::<Albert>(20, 1000, 48, 16);
    // SOP: both segments from one document, half of them swapped.
    let pairs: Vec<_> = task.train_examples().iter().map(|e| match e {
        Example::Pair(p) => p,
        other => panic!("ALBERT trains on pairs, got {other:?}"),
    }).collect();
    let swapped = pairs.iter().filter(|p| p.is_negative).count() as f64 / pairs.len() as f64;
    assert!((0.4..0.6).contains(&swapped), "swapped fraction {swapped}");
    let batch = task.train_batch(0, &Device::flex());
    let labels = batch.mlm_labels.into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    let masked = labels.iter().filter(|&&l| l != -100).count() as f64 / batch.tokens as f64;
    assert!((0.08..0.2).contains(&masked), "masked fraction {masked}");

    let mut config = AlbertConfig::preset("tiny", tokenizer.vocab_size(), 64, tokenizer.special_tokens().pad.1 as usize).unwrap();
    (config.hidden_size, config.num_attention_heads, config.intermediate_size) = (64, 2, 128);
    assert_eq!((config.hidden_dropout_prob, config.attention_probs_dropout_prob), (0.0, 0.0), "no dropout by default");
    let device = Backend::Flex.device().unwrap().autodiff();
    let (start, end, held_out) = learn::<Albert>(&task, sesame_albert::AlbertForPreTraining::new_hf(&config, &device), "albert-learn");
    let chance = (tokenizer.vocab_size() as f64).ln();
    assert!((start - chance).abs() < 1.0, "initial MLM loss {start:.3}, chance is {chance:.3}");
    assert!(end < start - 0.75, "held-out MLM loss went from {start:.3} to {end:.3}");
    assert!(held_out.contains_key("sop_accuracy") && held_out.contains_key("sop_loss"), "{held_out:?}");
}

#[test]
fn a_tiny_spanbert_learns_mlm_and_the_span_boundary_objective() {
    let (task, tokenizer) = task::<SpanBert>(20, 1000, 48, 16);
    let batch = task.train_batch(0, &Device::flex());
    let types = batch.input.token_type_ids.clone().unwrap().into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    assert!(types.iter().all(|&t| t == 0), "SpanBERT trains on single sequences");
    // Span masking: most masked tokens have a masked neighbour.
    let labels = batch.mlm_labels.clone().into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    let masked: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] != -100).collect();
    let in_runs = masked.iter().filter(|&&i| masked.contains(&(i + 1)) || (i > 0 && masked.contains(&(i - 1)))).count();
    assert!(in_runs as f64 > 0.5 * masked.len() as f64, "{in_runs} of {} masked tokens in runs", masked.len());

    let mut config = BertConfig::preset("tiny", tokenizer.vocab_size(), 64, tokenizer.special_tokens().pad.1 as usize).unwrap();
    (config.hidden_size, config.num_attention_heads, config.intermediate_size) = (64, 2, 128);
    let device = Backend::Flex.device().unwrap().autodiff();
    let model = sesame_bert::BertForSpanPreTraining::new_hf(&config, &device);
    let before = Trainer::new(TrainConfig::default(), &run_dir("spanbert-before")).with_progress(false).evaluate(&task, &model, &task.held_out_batches(&device));
    let (start, end, held_out) = learn::<SpanBert>(&task, model, "spanbert-learn");
    assert!(end < start - 0.75, "held-out MLM loss went from {start:.3} to {end:.3}");
    let (sbo_start, sbo_end) = (before["sbo_loss"], held_out["sbo_loss"]);
    assert!(sbo_end < sbo_start - 0.75, "held-out SBO loss went from {sbo_start:.3} to {sbo_end:.3}");
    assert!(!held_out.keys().any(|k| k.starts_with("nsp")), "no sentence task: {held_out:?}");
}

#[test]
fn doc_sentences_batches_grow_where_documents_end_short() {
    // DOC-SENTENCES never crosses a document, so sequences at document ends are short; as in
    // RoBERTa, batches then take more of them, within the padded size of batch × max_seq_len.
    let layout = Layout::Packed { packing: Packing::DocSentences, max_seq_len: 48 };
    let (task, _) = task_with::<Roberta>(20, 1000, layout, 8);
    let n = task.num_train_examples();
    let short = task.train_examples().iter().filter(|e| e.len() < 24).count();
    assert!(short > n / 10, "{short} of {n} sequences are short");
    let device = Device::flex();
    let ids = |index| task.train_batch(index, &device).input.input_ids.into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    let (mut rows, mut index, mut grown, mut small) = (0, 0, 0, 0);
    while rows < n {
        let [b, s] = task.train_batch(index, &device).input.input_ids.dims();
        assert!(b * s <= 8 * 48, "batch {index}: {b} x {s} exceeds the budget");
        grown += usize::from(b > 8);
        small += usize::from(b < 8);
        (rows, index) = (rows + b, index + 1);
    }
    assert_eq!(rows, n, "an epoch takes every sequence once");
    assert!(grown as u64 > index / 4, "only {grown} of {index} batches grew beyond 8 rows");
    assert!(small <= 1, "{small} batches below 8 rows (only the epoch's remainder may be)");
    let tokens = task.train_examples().iter().map(Example::len).sum::<usize>() as f64 / index as f64;
    assert!(tokens > 0.6 * 8.0 * 48.0, "{tokens:.0} tokens per batch, FULL-SENTENCES has about {}", 8 * 48);
    // Batches are a function of their index: a fresh task (a resumed run) asked for a batch of
    // the second epoch first gives the same one.
    let (fresh, _) = task_with::<Roberta>(20, 1000, layout, 8);
    let later = index + 2;
    let fresh_ids = fresh.train_batch(later, &device).input.input_ids.into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    assert_eq!(fresh_ids, ids(later));
    assert_ne!(ids(later), ids(2), "the second epoch is shuffled anew");
}

#[test]
fn the_training_text_is_paired_dupe_factor_times_and_the_held_out_text_once() {
    // Google's dupe_factor: each pairing has its own splits, lengths, truncations and
    // negatives; paired once, a short-sequence run sees the same pairs every epoch.
    let once = PairConfig { max_seq_len: 16, dupe_factor: 1, ..PairConfig::default() };
    let (one, _) = task_with::<sesame_bert::Bert>(6, 400, Layout::Pairs(once), 1);
    let (ten, _) = task_with::<sesame_bert::Bert>(6, 400, Layout::Pairs(PairConfig { dupe_factor: 10, ..once }), 1);
    let n = one.num_train_examples();
    let ratio = ten.num_train_examples() as f64 / n as f64;
    assert!((ratio - 10.0).abs() < 1.0, "{} examples paired 10 times, {n} once", ten.num_train_examples());
    let device = Device::flex();
    let held_out = |t: &Pretraining<_>| t.held_out_batches(&device).iter().map(|b| b.input.input_ids.dims()[0]).sum::<usize>();
    assert_eq!(held_out(&ten), held_out(&one), "the held-out text is paired once");
    let distinct: std::collections::HashSet<String> = ten.train_examples().iter().map(|e| format!("{e:?}")).collect();
    assert!(distinct.len() > 5 * n, "{} distinct pairs of {} (one pairing: {n})", distinct.len(), ten.num_train_examples());
}

/// Every example of epoch `epoch` of a task of batch size 1, as (original ids, masked ids,
/// labels), sorted, so epochs compare whatever their order.
fn masked_epoch<M: sesame_train::PretrainingModel>(task: &Pretraining<M>, epoch: u64) -> Vec<(Vec<i64>, Vec<i64>, Vec<i64>)> {
    let n = task.num_train_examples() as u64;
    let ints = |t: Tensor<2, Int>| t.into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    let mut rows: Vec<_> = (epoch * n..(epoch + 1) * n)
        .map(|index| {
            let batch = task.train_batch(index, &Device::flex());
            let (ids, labels) = (ints(batch.input.input_ids), ints(batch.mlm_labels));
            let original = ids.iter().zip(&labels).map(|(&i, &l)| if l == -100 { i } else { l }).collect();
            (original, ids, labels)
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn static_masks_come_back_every_n_epochs_and_dynamic_ones_do_not() {
    // BERT's original static masking keeps N masks per example (epoch e uses e mod N);
    // RoBERTa's dynamic masking draws a new one each time an example is seen.
    let (dynamic, _) = task::<sesame_bert::Bert>(6, 400, 32, 1);
    let fixed = dynamic.clone().with_static_masks(std::num::NonZeroU32::new(2));
    let epochs = |t| -> Vec<_> { (0..3).map(|e| masked_epoch(t, e)).collect() };
    let (f, d) = (epochs(&fixed), epochs(&dynamic));
    let originals = |rows: &Vec<(Vec<i64>, Vec<i64>, Vec<i64>)>| rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>();
    assert_eq!(originals(&f[0]), originals(&f[1]), "every epoch holds the same examples");
    assert_eq!(f[0], f[2], "static: epoch 2 repeats epoch 0's masks");
    assert_ne!(f[0], f[1], "static: epoch 1 uses the second mask");
    assert_ne!(d[0], d[2], "dynamic: new masks every epoch");
    let masked = |rows: &Vec<(Vec<i64>, Vec<i64>, Vec<i64>)>| rows.iter().flat_map(|r| &r.2).filter(|&&l| l != -100).count();
    assert!(masked(&f[0]) > 0 && masked(&d[1]) > 0);
}

/// Binary entropy (nats) of a label with prior `p`: the loss of always predicting `p`.
fn binary_entropy(p: f64) -> f64 {
    -(p * p.ln() + (1.0 - p) * (1.0 - p).ln())
}

#[test]
fn a_tiny_electra_pair_learns_replaced_token_detection() {
    let (task, tokenizer) = task::<sesame_electra::Electra>(20, 1000, 48, 16);
    // The family's recipe: its generator samples at PRETRAINING_TEMPERATURE.
    let mut config = sesame_electra::Electra::preset("tiny", tokenizer.vocab_size(), 64, tokenizer.special_tokens().pad.1 as usize).unwrap();
    assert_eq!(config.generator_temperature, Some(sesame_electra::pretraining::PRETRAINING_TEMPERATURE));
    (config.hidden_size, config.num_attention_heads, config.intermediate_size, config.embedding_size) = (64, 2, 128, 64);
    // ELECTRA's masking: ~15% predicted, no random replacements.
    let batch = task.train_batch(0, &Device::flex());
    let labels = batch.mlm_labels.into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    let masked = labels.iter().filter(|&&l| l != -100).count() as f64 / batch.tokens as f64;
    assert!((0.1..0.2).contains(&masked), "masked fraction {masked}");
    let device = Backend::Flex.device().unwrap().autodiff();
    let pair = sesame_electra::ElectraPreTrainingPair::new_hf(&config, &device);
    assert_eq!(pair.generator.encoder.layers.len(), config.num_hidden_layers);
    let (start, end, held_out) = learn::<sesame_electra::Electra>(&task, pair, "electra-learn");
    let chance = (tokenizer.vocab_size() as f64).ln();
    assert!((start - chance).abs() < 1.0, "initial generator MLM loss {start:.3}, chance is {chance:.3}");
    assert!(end < start - 0.75, "held-out generator MLM loss went from {start:.3} to {end:.3}");
    // The discriminator starts at ln 2 and ends below its label prior's entropy (the loss
    // of giving every token the replaced fraction), ranking the generator's replacements
    // above the original tokens (the prior ranks every token the same: AUC 0.5).
    let prior = binary_entropy(held_out["replaced_fraction"]);
    assert!((held_out["rtd_prior_loss"] - prior).abs() < 1e-9, "{held_out:?}");
    assert!((held_out["rtd_prior_accuracy"] - (1.0 - held_out["replaced_fraction"])).abs() < 1e-9, "{held_out:?}");
    let (rtd, auc) = (held_out["rtd_loss"], held_out["rtd_auc"]);
    // Measured on flex: 0.378–0.381 against 0.413, AUC 0.70; with the paper's temperature 1 the
    // same pair ends 0.010 below the prior at AUC 0.55, and fails both.
    assert!(rtd < prior - 0.02, "held-out RTD loss {rtd:.4}, the label prior's entropy is {prior:.4}: {held_out:?}");
    assert!(auc > 0.65, "held-out RTD AUC {auc:.4}, the prior's is 0.5: {held_out:?}");
    // (Precision is reported once the discriminator calls a token replaced.)
    for metric in ["rtd_accuracy", "rtd_recall", "mlm_accuracy"] {
        assert!(held_out.contains_key(metric), "{metric}: {held_out:?}");
    }
}

#[test]
fn a_tiny_unilm_learns_with_its_four_objectives_mixed() {
    use sesame_unilm::{Objective, UnilmPreTraining};
    let (task, tokenizer) = task::<sesame_unilm::Unilm>(20, 1000, 48, 16);
    // The training batches draw the objectives in the paper's proportions.
    let mut counts = std::collections::HashMap::new();
    let n = 1200;
    for index in 0..n {
        *counts.entry(Objective::of(task.train_batch(index, &Device::flex()).seed)).or_insert(0) += 1;
    }
    for (objective, share) in [(Objective::Bidirectional, 1.0 / 3.0), (Objective::SeqToSeq, 1.0 / 3.0), (Objective::LeftToRight, 1.0 / 6.0), (Objective::RightToLeft, 1.0 / 6.0)] {
        let got = counts[&objective] as f64 / n as f64;
        assert!((got - share).abs() < 0.045, "{objective:?}: {got:.3}, the paper's {share:.3}");
    }

    // A sequence-to-sequence batch: source = first segment (types 4), target (types 5) sees
    // only the source and its own past; no NSP label.
    let batch = UnilmPreTraining::prepare(task.train_batch(0, &Device::flex()), Objective::SeqToSeq);
    let types = batch.input.token_type_ids.clone().unwrap().into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    let [b, s] = batch.input.input_ids.dims();
    let restriction = batch.input.attention_restriction.clone().unwrap().int().into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    for row in 0..b {
        let source = types[row * s..(row + 1) * s].iter().take_while(|&&t| t == 4).count();
        assert!(source >= 2 && types[row * s + source] == 5, "row {row}: {:?}", &types[row * s..(row + 1) * s]);
        let blocked = |i: usize, j: usize| restriction[(row * s + i) * s + j] == 1;
        assert!(!blocked(0, source - 1) && blocked(0, source), "row {row}: the source does not see the target");
        assert!(!blocked(source + 1, source) && !blocked(source + 1, 0) && blocked(source + 1, source + 2), "row {row}: the target sees the source and its past only");
    }
    let labels = batch.sentence_labels.into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    assert!(labels.iter().all(|&l| l == -100), "NSP only under the bidirectional LM");

    let mut config = sesame_unilm::UnilmConfig::preset("tiny", tokenizer.vocab_size(), 64, tokenizer.special_tokens().pad.1 as usize).unwrap();
    (config.hidden_size, config.num_attention_heads, config.intermediate_size) = (64, 2, 128);
    assert_eq!((config.type_vocab_size, config.layer_norm_eps), (6, 1e-5));
    let device = Backend::Flex.device().unwrap().autodiff();
    let (start, end, held_out) = learn::<sesame_unilm::Unilm>(&task, UnilmPreTraining::new_hf(&config, &device), "unilm-learn");
    let chance = (tokenizer.vocab_size() as f64).ln();
    assert!((start - chance).abs() < 1.0, "initial MLM loss {start:.3}, chance is {chance:.3}");
    assert!(end < start - 0.75, "held-out MLM loss went from {start:.3} to {end:.3}");
    for objective in ["bidirectional", "seq_to_seq", "left_to_right", "right_to_left"] {
        assert!(held_out.contains_key(&format!("{objective}_mlm_loss")), "{objective}: {held_out:?}");
    }
    assert!(held_out.contains_key("nsp_accuracy"), "{held_out:?}");
}

/// ELECTRA's pre-training with uniformly random replacements instead of the generator's samples.
struct UniformReplacements(Pretraining<sesame_electra::ElectraPreTrainingPair>, usize);

impl TrainTask for UniformReplacements {
    type Model = sesame_electra::ElectraPreTrainingPair;
    type Batch = sesame_train::PretrainingBatch;
    type State = ();
    fn train_batch(&self, index: u64, device: &Device) -> Self::Batch {
        self.0.train_batch(index, device)
    }
    fn held_out_batches(&self, device: &Device) -> Vec<Self::Batch> {
        self.0.held_out_batches(device)
    }
    /// The replacements are drawn from a generator seeded by the batch's ids, so the run is the
    /// same whatever else the process draws (the backend's own generator is shared by the
    /// tests running beside this one).
    fn step(&self, model: &Self::Model, batch: Self::Batch) -> sesame_train::StepOutput {
        use rand::{Rng, SeedableRng};
        let ids = &batch.input.input_ids;
        let dims = ids.dims();
        let seed = ids.to_data().iter::<i64>().fold(0xcbf2_9ce4_8422_2325u64, |h, id| (h ^ id as u64).wrapping_mul(0x100_0000_01b3));
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let draws: Vec<i64> = (0..dims[0] * dims[1]).map(|_| rng.random_range(5..self.1 as i64)).collect();
        let samples = Tensor::<2, Int>::from_data(TensorData::new(draws, dims), &ids.device());
        model.step_with_samples(batch, Some(samples))
    }
}

#[test]
fn the_electra_discriminator_finds_replacements_it_can_see() {
    let (task, tokenizer) = task::<sesame_electra::Electra>(20, 1000, 48, 16);
    let mut config = sesame_electra::ElectraConfig::preset("tiny", tokenizer.vocab_size(), 64, tokenizer.special_tokens().pad.1 as usize).unwrap();
    (config.hidden_size, config.num_attention_heads, config.intermediate_size, config.embedding_size) = (64, 2, 128, 64);
    let device = Backend::Flex.device().unwrap();
    let pair = sesame_electra::ElectraPreTrainingPair::new_hf(&config, &device.clone().autodiff());
    let task = UniformReplacements(task, tokenizer.vocab_size());
    let train = TrainConfig { steps: 300, lr: 3e-3, warmup: 30, log_every: 50, eval_every: 0, checkpoint_every: 0, ..TrainConfig::default() };
    let outcome = Trainer::new(train, &run_dir("electra-uniform")).with_progress(false).fit(&task, pair, false).unwrap();
    let held_out = outcome.held_out;
    let (rtd, prior) = (held_out["rtd_loss"], binary_entropy(held_out["replaced_fraction"]));
    assert!(rtd < prior - 0.05, "held-out RTD loss {rtd:.4}, the label prior's entropy is {prior:.4}: {held_out:?}");
    assert!(held_out["rtd_auc"] > 0.75, "held-out RTD AUC of random replacements (0.5: chance): {held_out:?}");
    assert!(held_out["rtd_precision"] > 0.5, "most tokens it calls replaced are: {held_out:?}");
}

#[test]
fn electra_samples_and_dropout_do_not_depend_on_the_thread_count() {
    let (task, tokenizer) = task::<sesame_electra::Electra>(6, 400, 32, 2);
    let mut config = sesame_electra::ElectraConfig::preset("tiny", tokenizer.vocab_size(), 64, tokenizer.special_tokens().pad.1 as usize).unwrap();
    (config.hidden_size, config.num_attention_heads, config.intermediate_size, config.embedding_size) = (64, 2, 128, 64);
    let device = Backend::Flex.device().unwrap().autodiff();
    device.seed(3);
    let init = sesame_electra::ElectraPreTrainingPair::new_hf(&config, &device);
    let train = TrainConfig { steps: 3, grad_accum: 4, lr: 1e-3, warmup: 1, eval_every: 0, checkpoint_every: 0, ..TrainConfig::default() };
    let run = |threads: usize| {
        let dir = run_dir(&format!("electra-threads-{threads}"));
        let out = Trainer::new(train.clone(), &dir).with_progress(false).with_threads(threads).fit(&task, init.clone(), false).unwrap();
        sesame_tests::training::hf_tensors(&out.model, &config, &dir.join("hf"))
    };
    let (one, two) = (run(1), run(2));
    let diff = sesame_tests::differing(&two, &one, 1e-6);
    assert!(diff.is_empty(), "2 threads train other parameters than 1 (the generator's samples or dropout depend on the thread): {diff:?}");
    // Held-out evaluation samples too: the same metrics on 1 and 2 threads, and each time.
    let held_out = task.held_out_batches(&device.clone().without_autodiff());
    assert!(held_out.len() >= 2, "batches for two threads: {}", held_out.len());
    let evaluate = |threads: usize| Trainer::new(train.clone(), &run_dir("electra-eval")).with_progress(false).with_threads(threads).evaluate(&task, &init, &held_out);
    let (first, second, third) = (evaluate(1), evaluate(2), evaluate(2));
    assert!(first["replaced_fraction"] > 0.0, "{first:?}");
    assert_eq!(first, second, "held-out metrics on 1 and 2 threads");
    assert_eq!(second, third, "held-out metrics of two evaluations");
}

/// The strategies ELECTRA's and UniLM's recipes bring with them, and the names their runs
/// record: ELECTRA's replaces 85% of 15% by the mask token and none by a random token; UniLM's
/// cloze draws one word 80% of the time, a bigram or trigram 10% each.
#[test]
fn electra_and_unilm_recipes_bring_their_own_masking() {
    use rand::SeedableRng;
    let electra = <sesame_electra::Electra as PretrainingFamily>::masking();
    assert_eq!(format!("{electra:?}"), "Electra", "the name a run records");
    let config = electra.strategy(&Default::default()).config();
    assert_eq!((config.probability, config.mask_fraction, config.random_fraction), (0.15, 0.85, 0.0));

    let unilm = <sesame_unilm::Unilm as PretrainingFamily>::masking();
    assert_eq!(format!("{unilm:?}"), "Unilm", "the name a run records");
    assert!(!unilm.reads_phrases() && !unilm.reads_entities());
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut lengths = [0usize; 4];
    for _ in 0..20_000 {
        lengths[sesame_unilm::UnilmMasking::default().span_length(&mut rng)] += 1;
    }
    let share = |n: usize| lengths[n] as f64 / 20_000.0;
    assert!(lengths[0] == 0 && (share(1) - 0.8).abs() < 0.01 && (share(2) - 0.1).abs() < 0.01 && (share(3) - 0.1).abs() < 0.01, "span lengths {lengths:?}");
}
