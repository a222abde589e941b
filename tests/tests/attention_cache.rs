//! The attention restriction and the key/value cache of the encoder input: a model run
//! incrementally, chunk by chunk with its cache, gives what one pass over the whole sequence
//! under a left-to-right restriction gives; without the restriction every position sees the
//! whole sequence, so the two differ.

use burn::prelude::*;
use sesame_albert::AlbertModel;
use sesame_bert::{BertInput, BertModel};
use sesame_electra::ElectraModel;
use sesame_layers::{Backbone, EncoderCache, OutputOptions, PretrainedModel};
use sesame_tests::{devices, values, max_abs_diff, Fixture};

/// `[batch, q, past + q]`, `true` where query `past + i` would see a later key.
fn left_to_right(batch: usize, past: usize, q: usize, device: &Device) -> Tensor<3, Bool> {
    let k = past + q;
    let blocked: Vec<i32> = (0..batch * q * k).map(|n| i32::from((n % k) > past + (n / k) % q)).collect();
    Tensor::<3, Int>::from_data(TensorData::new(blocked, [batch, q, k]), device).equal_elem(1)
}

fn ids(rows: &[&[i64]], device: &Device) -> Tensor<2, Int> {
    let (b, s) = (rows.len(), rows[0].len());
    Tensor::from_data(TensorData::new(rows.concat(), [b, s]), device)
}

/// One pass under the left-to-right restriction equals chunked passes with a cache.
fn incremental_equals_full<B: Backbone>(fixture: &str) {
    let tokens: [&[i64]; 2] = [&[2, 7, 9, 11, 13, 8, 3], &[2, 21, 6, 5, 30, 12, 3]];
    for (backend, device) in devices() {
        let model = <B as PretrainedModel>::from_pretrained(&Fixture::open(fixture).dir, &device).unwrap().model;
        let (b, s) = (2, 7);
        let full_input = BertInput::new(ids(&tokens, &device)).with_attention_restriction(left_to_right(b, 0, s, &device));
        let full = values(Backbone::forward(&model, full_input, OutputOptions::default()).last_hidden_state());
        let unrestricted = values(Backbone::forward(&model, BertInput::new(ids(&tokens, &device)), OutputOptions::default()).last_hidden_state());
        assert!(max_abs_diff(&full, &unrestricted) > 1e-3, "{fixture} on {backend}: the restriction changed nothing");

        let mut cache = EncoderCache::default();
        let mut pieces = Vec::new();
        for (start, end) in [(0, 3), (3, 5), (5, 7)] {
            let chunk: Vec<&[i64]> = tokens.iter().map(|t| &t[start..end]).collect();
            let input = BertInput::new(ids(&chunk, &device))
                .with_attention_mask(Tensor::ones([b, end], &device))
                .with_attention_restriction(left_to_right(b, start, end - start, &device))
                .with_cache(cache);
            let options = if start == 3 { OutputOptions::all() } else { OutputOptions::default() };
            let out = Backbone::forward(&model, input, options);
            cache = out.encoder.cache.clone().expect("a cache was given, so one comes back");
            assert_eq!(cache.len(), end, "{fixture} on {backend}: the cache holds every position so far");
            pieces.push(out.last_hidden_state());
        }
        let incremental = values(Tensor::cat(pieces, 1));
        let diff = max_abs_diff(&full, &incremental);
        assert!(diff < 1e-5, "{fixture} on {backend}: incremental and full passes differ by {diff:e}");
    }
}

#[test]
fn bert_runs_incrementally_with_a_cache() {
    incremental_equals_full::<BertModel>("bert/base-model");
}

#[test]
fn albert_runs_incrementally_with_a_cache_through_shared_layers() {
    incremental_equals_full::<AlbertModel>("albert/grouped-model");
}

#[test]
fn electra_runs_incrementally_with_a_cache() {
    incremental_equals_full::<ElectraModel>("electra/base-model");
}
