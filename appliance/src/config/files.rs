//! Files a config names (itself, route files, rule files, captures):
//! regular files of bounded size only, so a wrong path cannot block or
//! exhaust memory.

use super::*;

/// The largest config file read (a config is kilobytes; this bounds what
/// a wrong path can cost).
pub const MAX_CONFIG_BYTES: u64 = 256 << 20;

/// Checks that `path` is a regular file (not a directory, device or pipe,
/// which could block or never end) of at most `max` bytes; `what` names it
/// in the error.
pub(crate) fn regular_file(path: &Path, what: &str, max: u64) -> Result<(), String> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("{what} {} does not exist", path.display()))
        }
        Err(e) => Err(format!("cannot read {what} {}: {e}", path.display())),
        Ok(m) if m.is_dir() => Err(format!(
            "{what} {} is a directory, not a file",
            path.display()
        )),
        Ok(m) if !m.is_file() => Err(format!(
            "{what} {} is not a regular file (a device or a pipe)",
            path.display()
        )),
        Ok(m) if m.len() > max => Err(format!(
            "{what} {} is {} bytes, more than the {max} allowed",
            path.display(),
            m.len()
        )),
        Ok(_) => Ok(()),
    }
}
