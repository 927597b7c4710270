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

/// Opens `path` (a `what`) for reading: [`regular_file`]'s checks, made
/// again on the open file (opened without blocking), so that a file
/// swapped for a FIFO or a device between the check and the open (a reload
/// racing an edit) is refused, never waited on.
pub(crate) fn open_regular(path: &Path, what: &str, max: u64) -> Result<std::fs::File, String> {
    regular_file(path, what, max)?;
    let f = pmd::sys::open_regular(path)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    match f.metadata() {
        Ok(m) if m.len() > max => Err(format!(
            "{what} {} is {} bytes, more than the {max} allowed",
            path.display(),
            m.len()
        )),
        Ok(_) => Ok(f),
        Err(e) => Err(format!("cannot read {what} {}: {e}", path.display())),
    }
}

/// Reads `path` (a `what`) whole as text, through [`open_regular`].
pub(crate) fn read_regular(path: &Path, what: &str, max: u64) -> Result<String, String> {
    use std::io::Read;
    let f = open_regular(path, what, max)?;
    let mut text = String::new();
    f.take(max)
        .read_to_string(&mut text)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => {
                format!("{what} {} is not a text file (UTF-8)", path.display())
            }
            _ => format!("cannot read {what} {}: {e}", path.display()),
        })?;
    Ok(text)
}

/// Whether `a` and `b` name one file (the same device and inode where both
/// exist; else the same canonical directory and name), however spelled:
/// through symlinks, hard links, `..`.
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return x.dev() == y.dev() && x.ino() == y.ino();
    }
    let canon = |p: &Path| {
        let dir = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::canonicalize(dir)
            .ok()
            .zip(p.file_name())
            .map(|(d, n)| d.join(n))
    };
    match (canon(a), canon(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// The bytes of a secret (a key file): a regular file, not a link, of
/// this user's alone (no access for group or others), at most 4 KiB.
pub(crate) fn read_secret(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "a symbolic link: give the key file itself".to_string(),
            _ => e.to_string(),
        })?;
    let m = f.metadata().map_err(|e| e.to_string())?;
    if !m.is_file() {
        return Err("not a regular file".into());
    }
    if m.uid() != pmd::sys::euid() || m.mode() & 0o077 != 0 {
        return Err(format!(
            "must be this user's alone (owner uid {}, mode {:o}; chmod 600)",
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    let mut out = Vec::new();
    f.take(4097)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    if out.len() > 4096 {
        return Err("over 4 KiB: not a key".into());
    }
    Ok(out)
}

/// A path as the config writes it, relative to the config's directory
/// `base` when there is one (an absolute path stays as it is).
pub(crate) fn beside(base: Option<&Path>, path: &str) -> PathBuf {
    base.map_or_else(|| PathBuf::from(path), |b| b.join(path))
}
