//! Panics of third-party crates turned into errors where Sesame calls them.
//!
//! The tokenizers crate and the crates under it (`spm_precompiled`, `onig`), and the
//! checkpoint readers, panic on some corrupt inputs, on the calling thread or on one of
//! rayon's workers (rayon re-raises a worker's panic on the thread that waits for it).
//! [`catch`] runs such a call and returns the panic as an `Err` with its message and where
//! it was raised; the caller wraps it in its own typed error naming the file.
//!
//! Rust prints every panic through the panic hook before it unwinds, caught or not. The first
//! [`catch`] installs a hook that sets aside the report of any panic raised while a caught call
//! is running (on any thread) and hands every other panic to the hook it replaced. A report
//! that no [`catch`] claims is printed by the previous hook's rules once no caught call is left,
//! so a panic elsewhere in the program is delayed, never lost.

use std::any::Any;
use std::panic::{AssertUnwindSafe, PanicHookInfo};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// Caught calls in flight, on every thread.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Reports of panics raised while a caught call ran: (message, where).
static HELD: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

/// A panic caught by [`catch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Panic {
    /// The panic's message.
    pub message: String,
    /// The source file and line that raised it (`spm_precompiled-0.1.4/src/lib.rs:118`).
    pub location: Option<String>,
}

impl std::fmt::Display for Panic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.location {
            Some(at) => write!(f, "{} (a panic at {at})", self.message),
            None => write!(f, "{} (a panic)", self.message),
        }
    }
}

/// Run `f`; a panic inside it, or in a thread it waits on, becomes `Err`.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, Panic> {
    INSTALL.call_once(install_hook);
    RUNNING.fetch_add(1, Ordering::SeqCst);
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let result = result.map_err(|payload| {
        let message = payload_message(payload.as_ref());
        // The hook saw it first, with its location.
        let location = held.iter().position(|(m, _)| *m == message).map(|i| held.remove(i).1);
        Panic { message, location }
    });
    if RUNNING.fetch_sub(1, Ordering::SeqCst) == 1 {
        for (message, location) in held.drain(..) {
            eprintln!("a panic was raised at {location}:\n{message}");
        }
    }
    result
}

fn install_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| {
        if RUNNING.load(Ordering::SeqCst) == 0 {
            return previous(info);
        }
        let location = info.location().map_or_else(|| "an unknown place".to_string(), |l| format!("{}:{}", short_path(l.file()), l.line()));
        HELD.lock().unwrap_or_else(|e| e.into_inner()).push((payload_message(info.payload()), location));
    }));
}

/// A panic payload's text (`panic!` gives a `&str` or a `String`).
fn payload_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// A registry path from its crate's directory on (`spm_precompiled-0.1.4/src/lib.rs`).
fn short_path(file: &str) -> &str {
    match file.rfind("/src/") {
        Some(src) => file[..src].rfind('/').map_or(file, |start| &file[start + 1..]),
        None => file,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_on_this_thread_or_a_worker_is_an_error_with_its_place() {
        assert_eq!(catch(|| 7), Ok(7));
        let err = catch(|| -> u32 { panic!("broken table {}", 3) }).unwrap_err();
        assert_eq!(err.message, "broken table 3");
        assert!(err.location.as_deref().is_some_and(|l| l.contains("contain.rs")), "{err:?}");
        let err = catch(|| std::thread::scope(|s| s.spawn(|| -> u32 { panic!("in a worker") }).join().unwrap_or_else(|p| std::panic::resume_unwind(p))))
            .unwrap_err();
        assert_eq!(err.message, "in a worker");
        assert!(err.location.is_some());
    }

    #[test]
    fn registry_paths_are_shortened_to_the_crate() {
        assert_eq!(short_path("/root/.cargo/registry/src/index/spm_precompiled-0.1.4/src/lib.rs"), "spm_precompiled-0.1.4/src/lib.rs");
        assert_eq!(short_path("lib.rs"), "lib.rs");
    }
}
