//! The command line's tests, as one test binary (each binary links burn and every compiled
//! backend; one link serves them all). They run `cargo xtask` as a child process
//! (`CARGO_BIN_EXE_xtask`). Run one subject with `cargo test -p xtask --test cli train_cli`.

mod bad_inputs;
mod finetune_cli;
mod finetune_common;
mod finetune_embed_cli;
mod finetune_families;
mod finetune_qa_cli;
mod finetune_tag_cli;
mod inference_cli;
mod serve_access;
mod serve_cli;
mod train_cli;
