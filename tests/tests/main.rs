//! Sesame's cross-crate tests, as one test binary: each binary links burn and every compiled
//! backend, so one link serves them all (one file per subject, as modules). `trainer.rs` is its
//! own binary: its tests reseed the process-wide RNG of the GPU backends and hold a lock that
//! only they take. Run one subject with `cargo test -p sesame-tests --test cross albert_parity`.

mod albert_parity;
mod albert_sharing;
mod attention_cache;
mod bart_parity;
mod bart_pretraining;
mod bert_parity;
mod checkpoint_io;
mod dependencies;
mod distillation;
mod early_exit;
mod embedding_losses;
mod electra_parity;
mod electra_pretraining;
mod export;
mod facade;
mod family_pretraining;
mod fill_mask;
mod generation_pipeline;
mod generation_processors;
mod generation_search;
mod hub_cache;
mod int8;
mod masked_lm_head;
mod minilm;
mod pruned_heads;
mod roberta_parity;
mod span_boundary;
mod tokenizer_parity;
mod unilm_parity;
mod xlnet_parity;
mod xlnet_pretraining;
