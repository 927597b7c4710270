//! Configuration errors: each located in its file (line, column, key).

/// A configuration error, located in its file. Printed as
/// `file:line:col: key `k`: message`, without the place or the key when
/// the error has none (a file that cannot be read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}{}", place(file, *line, *col), key_part(key), shown(msg, 4096))]
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
        format!("key `{}`: ", shown(key, MAX_KEY))
    }
}

/// The longest key printed whole (a real one is a few dozen characters;
/// a file of garbage can make one of any length).
const MAX_KEY: usize = 80;

/// `s` made safe to print on a terminal or in a log: control characters
/// (a NUL, an escape sequence) written as escapes, and cut after `max`
/// characters with the count of what was left out.
pub fn shown(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (n, c) in s.chars().enumerate() {
        if n == max {
            let left = s.chars().count() - max;
            out.push_str(&format!("… ({left} more characters)"));
            break;
        }
        if c.is_control() && c != '\n' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// All errors found in one file (validation reports every conflict, not
/// just the first), one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<ConfigError>);
