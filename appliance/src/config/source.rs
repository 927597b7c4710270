//! Where things are in the config text: line and column of a span, the
//! key (with its table path) on a line, and the validation context that
//! collects located errors and warnings.

use super::*;

/// Line and column (1-based) of a byte offset.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

/// The key named on a line (`key = value` or a `[table]` header).
/// The key named on a line, with the path of the table it is in (`key =
/// value` under `[[worker]]` → `worker[1].key`), or a table header as
/// written (for errors in the header itself).
pub(super) fn key_on_line(text: &str, line: usize) -> String {
    // Array tables seen so far, and how often: `[[port]]` → port: 2.
    let mut arrays: BTreeMap<String, usize> = BTreeMap::new();
    let mut table = String::new();
    let resolve = |path: &str, arrays: &BTreeMap<String, usize>| -> String {
        let mut out = String::new();
        let mut raw = String::new();
        for seg in path.split('.').map(str::trim) {
            if !raw.is_empty() {
                raw.push('.');
                out.push('.');
            }
            raw.push_str(seg.trim_matches('"'));
            out.push_str(seg.trim_matches('"'));
            if let Some(n) = arrays.get(&raw) {
                out.push_str(&format!("[{}]", n - 1));
            }
        }
        out
    };
    for (i, l) in text.lines().enumerate().take(line) {
        let t = l.trim();
        let header = if let Some(h) = t.strip_prefix("[[") {
            let h = h.split("]]").next().unwrap_or("").trim();
            if i + 1 < line {
                *arrays.entry(h.to_string()).or_insert(0) += 1;
            }
            Some(h)
        } else {
            t.strip_prefix('[')
                .map(|h| h.split(']').next().unwrap_or("").trim())
        };
        if i + 1 == line {
            return match header {
                Some(h) => h.to_string(),
                None => {
                    let k = t.split_once('=').map_or(t, |(k, _)| k).trim();
                    if table.is_empty() {
                        k.to_string()
                    } else {
                        format!("{table}.{k}")
                    }
                }
            };
        }
        if let Some(h) = header {
            table = resolve(h, &arrays);
        }
    }
    String::new()
}

pub(super) struct Ctx<'a> {
    pub(super) file: &'a str,
    pub(super) text: &'a str,
    /// Byte offset where each line starts (line `i + 1` at `lines[i]`).
    pub(super) lines: Vec<usize>,
    pub(super) errs: Vec<ConfigError>,
    pub(super) warnings: Vec<ConfigError>,
    /// Check the host too (interfaces exist, drivers are compiled in).
    pub(super) host: bool,
    /// A running config whose route and rule files stand for the files
    /// of the same paths, which are not read again (`sluice ctl` edits:
    /// made on the running config, whatever the files hold now).
    pub(super) reuse: Option<&'a Config>,
    /// The file's routes and neighbours an edit deleted.
    pub(super) dropped: Option<&'a Dropped>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(file: &'a str, text: &'a str) -> Self {
        let lines = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Ctx {
            file,
            text,
            lines,
            errs: Vec::new(),
            warnings: Vec::new(),
            host: true,
            reuse: None,
            dropped: None,
        }
    }

    pub(super) fn located<T>(&self, v: &Spanned<T>, key: String, msg: String) -> ConfigError {
        let (line, col) = if v.span().is_empty() && v.span().start == 0 {
            (0, 0) // a default value: no place in the file
        } else {
            self.line_col(v.span().start)
        };
        ConfigError {
            file: self.file.to_string(),
            line,
            col,
            key,
            msg,
        }
    }

    /// A legal but odd setting: reported, not refused.
    pub(super) fn warn<T>(
        &mut self,
        v: &Spanned<T>,
        key: impl Into<String>,
        msg: impl Into<String>,
    ) {
        let w = self.located(v, key.into(), msg.into());
        self.warnings.push(w);
    }

    /// Line and column (1-based) of a byte offset, in O(log lines).
    pub(super) fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.lines.partition_point(|&s| s <= offset);
        let start = self.lines[line - 1];
        let col = self.text[start..offset].chars().count() + 1;
        (line, col)
    }

    /// An error about the file as a whole (a section it lacks): no line.
    pub(super) fn err_whole(&mut self, key: &str, msg: &str) {
        self.errs.push(ConfigError {
            file: self.file.to_string(),
            line: 0,
            col: 0,
            key: key.into(),
            msg: msg.into(),
        });
    }

    pub(super) fn err<T>(
        &mut self,
        v: &Spanned<T>,
        key: impl Into<String>,
        msg: impl Into<String>,
    ) {
        let e = self.located(v, key.into(), msg.into());
        self.errs.push(e);
    }
}
