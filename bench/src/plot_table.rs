//! `plot-table`: a plot of one column of a results file's Markdown table
//! against another (log x), one line per value of a third: for the
//! shell-driven benchmarks (`bench/run-lab-scale.sh`), whose tables are
//! what they measure. Cells that are not numbers (a `?`, a blank, a note in
//! brackets) are left out.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;

/// Arguments of `plot-table`.
#[derive(Args)]
pub struct PlotTableArgs {
    /// The Markdown file (its first table whose header has the columns).
    #[arg(long)]
    table: PathBuf,
    /// The x column's header (log scale).
    #[arg(long)]
    x: String,
    /// The y column's header.
    #[arg(long)]
    y: String,
    /// The column whose values name the lines.
    #[arg(long)]
    series: String,
    /// The SVG to write.
    #[arg(long)]
    out: PathBuf,
    /// The plot's title.
    #[arg(long)]
    title: String,
    /// The y axis's label (default: the y column's header).
    #[arg(long)]
    ylabel: Option<String>,
    /// y on a log scale too.
    #[arg(long)]
    log_y: bool,
}

/// A table row's cells (a line `| a | b |`), trimmed.
fn cells(line: &str) -> Option<Vec<&str>> {
    let l = line.trim();
    let inner = l.strip_prefix('|')?.strip_suffix('|')?;
    Some(inner.split('|').map(str::trim).collect())
}

/// Named lines of (x, y) points.
type Series = Vec<(String, Vec<(f64, f64)>)>;

/// The series of `a`'s columns in `text`: (name, points) in the order the
/// names first appear.
fn series(text: &str, a: &PlotTableArgs) -> Result<Series> {
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(head) = cells(line) else { continue };
        let col = |name: &str| head.iter().position(|h| *h == name);
        let (Some(xi), Some(yi), Some(si)) = (col(&a.x), col(&a.y), col(&a.series)) else {
            continue;
        };
        let mut out: Series = Vec::new();
        for row in lines.by_ref().skip(1).map_while(cells) {
            let num = |i: usize| {
                row.get(i)
                    .and_then(|c| c.replace(',', "").parse::<f64>().ok())
            };
            let (Some(x), Some(y), Some(name)) = (num(xi), num(yi), row.get(si)) else {
                continue;
            };
            match out.iter_mut().find(|(n, _)| n == name) {
                Some((_, pts)) => pts.push((x, y)),
                None => out.push((name.to_string(), vec![(x, y)])),
            }
        }
        return Ok(out);
    }
    bail!(
        "{}: no table with the columns `{}`, `{}` and `{}`",
        a.table.display(),
        a.x,
        a.y,
        a.series
    )
}

/// Writes the plot.
pub fn plot_table(a: PlotTableArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.table)
        .with_context(|| format!("reading {}", a.table.display()))?;
    let s = series(&text, &a)?;
    if s.is_empty() {
        bail!("{}: the table has no rows with numbers", a.table.display());
    }
    crate::sweep::plot_series(
        &a.out,
        &a.title,
        &a.x,
        a.ylabel.as_deref().unwrap_or(&a.y),
        &s,
        a.log_y,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_by_header_and_rows_without_numbers_left_out() {
        let text = "# t\n\nprose | not a table\n\n| flows | router | ns/pkt |\n|---|---|---|\n\
                    | 10000 | a | 1,907 |\n| 10000 | b | 2154 |\n| 100000 | a | 2014 |\n\
                    | 100000 | b | ? |\n\nafter\n| 1 | a | 5 |\n";
        let a = PlotTableArgs {
            table: PathBuf::from("t.md"),
            x: "flows".into(),
            y: "ns/pkt".into(),
            series: "router".into(),
            out: PathBuf::new(),
            title: String::new(),
            ylabel: None,
            log_y: false,
        };
        let s = series(text, &a).unwrap();
        assert_eq!(
            s,
            vec![
                ("a".to_string(), vec![(1e4, 1907.0), (1e5, 2014.0)]),
                ("b".to_string(), vec![(1e4, 2154.0)]),
            ]
        );
        let missing = PlotTableArgs {
            y: "cycles".into(),
            ..a
        };
        assert!(series(text, &missing).is_err());
    }
}
