//! Locating the shared data sets (`../shared/data` beside the repository)
//! for tests and benchmarks, and reading them; and growing ClassBench
//! rule sets to any size from them ([`classbench`]).

pub mod classbench;

use std::io::{BufRead, BufReader};
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

/// The lines of a gzip-compressed text file under `../shared/data`, or
/// `None` as for [`shared`].
pub fn gz_lines(rel: &str) -> Option<Vec<String>> {
    let p = shared(rel)?;
    let f = std::fs::File::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let r = BufReader::new(flate2::read::GzDecoder::new(f));
    Some(
        r.lines()
            .map(|l| l.unwrap_or_else(|e| panic!("{}: {e}", p.display())))
            .collect(),
    )
}
