//! Writing files so that a killed process never leaves a half-written one.

use std::path::Path;

/// Write `bytes` to `path` through a temporary file beside it and a rename: readers see the
/// old file or the new one, never a part.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
