//! sentence-transformers' training losses, each equal to sentence-transformers' own on fixed
//! embeddings, value and gradient of every column, on every compiled backend
//! (`fixtures/embedding/losses.json`, written by `scripts/make_fixtures.py --only embedding`).

use burn::prelude::*;
use burn::tensor::TensorData;
use sesame_tests::{devices, fixtures_dir};
use sesame_train::embedding_losses::{Directions, EmbeddingLoss, Hardness, LossError, Matryoshka, MultipleNegativesRanking, Partition};

fn reference() -> serde_json::Value {
    let path = fixtures_dir().join("embedding/losses.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixtures/embedding/losses.json")).expect("JSON")
}

/// The loss sentence-transformers computed each case with, as Sesame names it.
fn loss_of(name: &str) -> EmbeddingLoss {
    let mnrl = |m: MultipleNegativesRanking| EmbeddingLoss::MultipleNegativesRanking(m);
    let hard = |mode, strength| mnrl(MultipleNegativesRanking { hardness: Some((mode, strength)), ..Default::default() });
    match name.trim_start_matches("matryoshka_") {
        "mnrl" | "mnrl_negatives" => mnrl(MultipleNegativesRanking::default()),
        "mnrl_scale10" => mnrl(MultipleNegativesRanking { scale: 10.0, ..Default::default() }),
        "mnrl_symmetric" => mnrl(MultipleNegativesRanking::symmetric()),
        "mnrl_gte" => mnrl(MultipleNegativesRanking {
            directions: Directions { query_to_query: true, doc_to_query: true, doc_to_doc: true },
            partition: Partition::Joint,
            ..Default::default()
        }),
        "mnrl_hard_in_batch" => hard(Hardness::InBatchNegatives, 9.0),
        "mnrl_hard_negatives" => hard(Hardness::HardNegatives, 5.0),
        "mnrl_hard_all" => hard(Hardness::AllNegatives, 5.0),
        "cosent" => EmbeddingLoss::CoSent { scale: 20.0 },
        "contrastive" => EmbeddingLoss::Contrastive { margin: 0.5 },
        "online_contrastive" | "online_contrastive_positives_only" | "online_contrastive_mixed" => EmbeddingLoss::OnlineContrastive { margin: 0.5 },
        "online_contrastive_wide" => EmbeddingLoss::OnlineContrastive { margin: 0.6 },
        "triplet" => EmbeddingLoss::Triplet { margin: 5.0 },
        other => panic!("no loss for case {other}"),
    }
}

#[test]
fn every_loss_and_its_gradients_equal_sentence_transformers() {
    let reference = reference();
    let embeddings: Vec<Vec<Vec<f64>>> = serde_json::from_value(reference["embeddings"].clone()).unwrap();
    let [b, d] = [embeddings[0].len(), embeddings[0][0].len()];
    for (backend, device) in devices() {
        let device = device.autodiff();
        for case in reference["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let ncols = case["columns"].as_u64().unwrap() as usize;
            let columns: Vec<Tensor<2>> = embeddings[..ncols]
                .iter()
                .map(|c| {
                    let flat: Vec<f32> = c.iter().flatten().map(|&x| x as f32).collect();
                    Tensor::<2>::from_data(TensorData::new(flat, [b, d]), &device).require_grad()
                })
                .collect();
            let labels: Option<Vec<f32>> = case["labels"].as_array().map(|l| l.iter().map(|x| x.as_f64().unwrap() as f32).collect());
            let loss = loss_of(name);
            let value = match case["matryoshka_dims"].as_array() {
                Some(dims) => Matryoshka { dims: dims.iter().map(|x| (x.as_u64().unwrap() as usize, 1.0)).collect() }.loss(&loss, &columns, labels.as_deref()),
                None => loss.loss(&columns, labels.as_deref()),
            }
            .unwrap();
            let ours = value.clone().into_scalar::<f32>() as f64;
            let theirs = case["loss"].as_f64().unwrap();
            assert!((ours - theirs).abs() <= 1e-4 * theirs.abs().max(1.0), "{backend:?} {name}: loss {ours} against {theirs}");
            let grads = value.backward();
            for (i, (column, expected)) in columns.iter().zip(case["grads"].as_array().unwrap()).enumerate() {
                let got: Vec<f32> = column.grad(&grads).unwrap_or_else(|| panic!("{name}: no gradient of column {i}")).into_data().convert::<f32>().try_to_vec().unwrap();
                for (j, (g, e)) in got.iter().zip(expected.as_array().unwrap()).enumerate() {
                    let e = e.as_f64().unwrap();
                    assert!((*g as f64 - e).abs() <= 1e-4 * e.abs().max(1.0), "{backend:?} {name}: d loss / d column {i}[{j}] = {g} against {e}");
                }
            }
        }
    }
}

#[test]
fn a_loss_that_does_not_fit_the_columns_or_labels_is_refused_by_name() {
    let (_, device) = devices().remove(0);
    let column = || Tensor::<2>::ones([4, 8], &device);
    let err = |loss: EmbeddingLoss, ncols: usize, labels: Option<&[f32]>| loss.loss(&vec![column(); ncols], labels).err().expect("refused").to_string();
    assert_eq!(err(EmbeddingLoss::CoSent { scale: 20.0 }, 2, None), "CoSENTLoss needs a score per row (a `score` or `label` column); the data has none");
    assert_eq!(err(EmbeddingLoss::Triplet { margin: 5.0 }, 2, None), "TripletLoss takes 3 text columns; the data has 2");
    assert_eq!(err(EmbeddingLoss::MultipleNegativesRanking(Default::default()), 1, None), "MultipleNegativesRankingLoss takes at least 2 text columns; the data has 1");
    assert_eq!(err(EmbeddingLoss::Contrastive { margin: 0.5 }, 2, Some(&[1.0, 0.0])), "labels: 2 rows where the batch has 4");
    let scale = EmbeddingLoss::MultipleNegativesRanking(MultipleNegativesRanking { scale: 0.0, ..Default::default() });
    assert_eq!(err(scale, 2, None), "--scale 0: must be a finite number > 0");
    let matryoshka = Matryoshka { dims: vec![(16, 1.0)] }.loss(&EmbeddingLoss::Triplet { margin: 5.0 }, &vec![column(); 3], None).err().unwrap();
    assert!(matches!(matryoshka, LossError::Setting { field: "--matryoshka-dims", .. }), "{matryoshka}");
}

/// sentence-transformers' listwise cross-encoder losses on fixed logits of five lists of 1 to 7
/// documents (`fixtures/embedding/rerank_losses.json`, written by `scripts/make_fixtures.py
/// --only rerank`), some through a sigmoid first (`activation_fn`): the loss and the gradient of
/// every logit, on every compiled backend.
#[test]
fn every_listwise_reranker_loss_and_its_gradient_equal_sentence_transformers() {
    use sesame_train::finetune::{LambdaWeighting, Listwise, ListwiseLoss, ScoreActivation};
    let path = fixtures_dir().join("embedding/rerank_losses.json");
    let reference: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("fixtures/embedding/rerank_losses.json")).expect("JSON");
    let labels: Vec<Vec<f32>> = serde_json::from_value(reference["labels"].clone()).unwrap();
    let logits: Vec<f32> = serde_json::from_value(reference["logits"].clone()).unwrap();
    let lambda = |weighting, k, sigma| ListwiseLoss::Lambda { weighting, k, sigma };
    let mut seen = 0;
    for (backend, device) in devices() {
        let device = device.autodiff();
        for case in reference["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let (base, activation) = match name.strip_suffix("_sigmoid") {
                Some(base) => (base, ScoreActivation::Sigmoid),
                None => (name, ScoreActivation::Identity),
            };
            let loss = match base {
                "listnet" => ListwiseLoss::ListNet,
                "listmle" => ListwiseLoss::ListMle { weighted: false, respect_input_order: true },
                "plistmle" => ListwiseLoss::ListMle { weighted: true, respect_input_order: true },
                "listmle_by_label" => ListwiseLoss::ListMle { weighted: false, respect_input_order: false },
                "plistmle_by_label" => ListwiseLoss::ListMle { weighted: true, respect_input_order: false },
                "lambda" => ListwiseLoss::lambda(LambdaWeighting::default()),
                "lambda_ndcg1" => lambda(LambdaWeighting::NdcgLoss1, None, 1.0),
                "lambda_ndcg2" => lambda(LambdaWeighting::NdcgLoss2, None, 1.0),
                "lambda_lambdarank" => lambda(LambdaWeighting::LambdaRank, None, 1.0),
                "lambda_k3_sigma2" => lambda(LambdaWeighting::DEFAULT, Some(3), 2.0),
                "ranknet" => ListwiseLoss::rank_net(),
                other => panic!("no loss for case {other}"),
            };
            let loss = Listwise { loss, activation };
            let x = Tensor::<1>::from_data(TensorData::new(logits.clone(), [logits.len()]), &device).require_grad();
            let value = loss.loss(x.clone(), &labels);
            let ours = f64::from(value.clone().into_scalar::<f32>());
            let theirs = case["loss"].as_f64().unwrap();
            assert!((ours - theirs).abs() <= 1e-4 * theirs.abs().max(1.0), "{backend:?} {name} ({}): loss {ours} against {theirs}", loss.name());
            let grads = value.backward();
            let got: Vec<f32> = x.grad(&grads).unwrap_or_else(|| panic!("{name}: no gradient")).into_data().convert::<f32>().try_to_vec().unwrap();
            for (j, (g, e)) in got.iter().zip(case["grad"].as_array().unwrap()).enumerate() {
                let e = e.as_f64().unwrap();
                assert!((f64::from(*g) - e).abs() <= 1e-4 * e.abs().max(1.0), "{backend:?} {name}: d loss / d logit {j} = {g} against {e}");
            }
            seen += 1;
        }
    }
    assert!(seen >= 14, "{seen} cases");
}
