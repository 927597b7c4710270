//! Locating the shared data sets (`../shared/data` beside the repository)
//! for tests and benchmarks.

use std::path::PathBuf;

/// The path of `rel` under `../shared/data`, or `None` (with a message)
/// when it is absent. Panics when the environment variable `CI` is set,
/// because CI always has the data: a missing file there is a failure, not a
/// reason to skip.
pub fn shared(rel: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data")
        .join(rel);
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing, and CI must have ../shared/data",
        p.display()
    );
    eprintln!("skipping: {} is not present", p.display());
    None
}
