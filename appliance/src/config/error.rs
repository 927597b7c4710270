//! Configuration errors: each located in its file (line, column, key).

/// A configuration error, located in its file. Printed as
/// `file:line:col: key `k`: message`, without the place or the key when
/// the error has none (a file that cannot be read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}{msg}", place(file, *line, *col), key_part(key))]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// 1-based line (0 when the whole file is at fault).
    pub line: usize,
    /// 1-based column.
    pub col: usize,
    /// Dotted key path, such as `worker[1].core`.
    pub key: String,
    /// What is wrong.
    pub msg: String,
}

fn place(file: &str, line: usize, col: usize) -> String {
    if line == 0 {
        format!("{file}: ")
    } else {
        format!("{file}:{line}:{col}: ")
    }
}

fn key_part(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("key `{key}`: ")
    }
}

/// All errors found in one file (validation reports every conflict, not
/// just the first), one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<ConfigError>);
