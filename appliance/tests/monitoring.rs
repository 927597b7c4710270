//! The Grafana dashboard (`monitoring/grafana-dashboard.json`) and the
//! alert rules (`monitoring/alerts.yml`): `promtool check rules` accepts
//! the rules and `promtool test rules` passes their unit tests
//! (`monitoring/alerts.test.yml`: each alert fires on the series it is
//! for, after its `for:`, and not on the others); every panel's query is
//! valid PromQL (promtool checks each as a recording rule, Grafana's
//! variables given values); and every metric either names is in a real
//! scrape of the shipped gateway (`configs/gateway.toml`, its flows
//! tracked and translated), so a renamed metric fails here, not on an
//! operator's empty panel. Needs `promtool` (Debian's `prometheus`);
//! skipped without it unless `CI` is set.

mod common;

use common::{have, http_get, shipped_gateway};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn monitoring(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../monitoring")
        .join(file)
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool").args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {text}");
    text
}

fn promtool_present() -> bool {
    if have("promtool") {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "promtool missing");
    false
}

/// The dashboard's queries (panels' targets and the templating's), with
/// Grafana's variables given values Prometheus takes.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(monitoring("grafana-dashboard.json")).unwrap();
    let d: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 10, "{} panels", panels.len());
    for p in panels {
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
        for t in targets {
            out.push(
                t["expr"]
                    .as_str()
                    .unwrap()
                    .replace("$instance", ".*")
                    .replace("$__rate_interval", "1m")
                    .replace("$__range", "1h"),
            );
        }
    }
    for v in d["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["definition"].as_str() {
            // label_values(METRIC, LABEL): the metric is what must exist.
            let metric = q
                .trim_start_matches("label_values(")
                .split(',')
                .next()
                .unwrap();
            out.push(metric.to_string());
        }
    }
    out
}

/// The metric names (`sluice_…`) in a query.
fn names(query: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = query.as_bytes();
    let mut i = 0;
    while let Some(k) = query[i..].find("sluice_") {
        let start = i + k;
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        out.insert(query[start..end].to_string());
        i = end;
    }
    out
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    if !promtool_present() {
        return;
    }
    let checked = promtool(&["check", "rules", monitoring("alerts.yml").to_str().unwrap()]);
    assert!(checked.contains("SUCCESS: 6 rules found"), "{checked}");
    let tested = promtool(&[
        "test",
        "rules",
        monitoring("alerts.test.yml").to_str().unwrap(),
    ]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[test]
fn every_dashboard_query_is_valid_promql() {
    if !promtool_present() {
        return;
    }
    let queries = dashboard_queries();
    let dir = common::fresh_dir("sluice-dashboard-promql");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        rules.push_str(&format!(
            "      - record: dashboard:query{i}\n        expr: {}\n",
            serde_json::to_string(q).unwrap()
        ));
    }
    let file = dir.join("dashboard.yml");
    std::fs::write(&file, rules).unwrap();
    let out = promtool(&["check", "rules", file.to_str().unwrap()]);
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_metric_the_dashboard_and_the_rules_use_is_in_a_real_scrape() {
    let rules = std::fs::read_to_string(monitoring("alerts.yml")).unwrap();
    let mut used = names(&rules);
    for q in dashboard_queries() {
        used.extend(names(&q));
    }
    assert!(used.len() >= 15, "{used:?}");
    // The shipped gateway with its generator, scraped once its flows are
    // tracked and translated.
    let dir = common::fresh_dir("sluice-dashboard-scrape");
    let cfg = dir.join("gw.toml");
    std::fs::write(
        &cfg,
        shipped_gateway(20000) + "\n[management]\nmetrics = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let (_child, _out, addr) = common::spawn_with_metrics(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(&cfg)
            .arg("--json"),
    );
    let mut scrape = String::new();
    common::until("the gateway's flows in a scrape", 20, || {
        let (code, body) = http_get(&addr, "/metrics");
        scrape = body;
        code == 200
            && common::sample(&scrape, "sluice_nat_mappings{core=\"1\"}").is_some_and(|v| v > 0.0)
    });
    let present: BTreeSet<&str> = scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let missing: Vec<&String> = used
        .iter()
        .filter(|n| !present.contains(n.as_str()))
        .collect();
    assert!(missing.is_empty(), "not in a scrape: {missing:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
