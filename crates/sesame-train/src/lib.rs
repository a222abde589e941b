//! The shared Sesame trainer (coming with the trainer issue) and backend selection.

pub mod backend;

pub use backend::{Backend, BackendNotCompiled};
