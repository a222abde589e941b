//! The `cargo xtask` binary (the commands are the `xtask` library's).

/// Large freed blocks (gradients, optimizer copies, activations) are kept for the next step
/// instead of going back to the kernel and faulting in again (`sesame_layers::block_cache`).
#[global_allocator]
static ALLOCATOR: sesame_layers::block_cache::BlockCache = sesame_layers::block_cache::BlockCache::new(4 << 30);

fn main() -> std::process::ExitCode {
    xtask::main()
}
