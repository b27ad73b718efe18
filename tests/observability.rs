//! The chart's alerts (charts/tenant-placer/monitoring/alerts.yaml, rendered by
//! templates/prometheusrule.yaml) and Grafana dashboard (monitoring/dashboard.json) name only
//! metrics the controller exports, and every expression is PromQL: each is parsed with
//! promql-parser, and each metric it names is looked for in `/metrics` of a running sandbox.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

mod common;
// The alerts under promtool and a real Prometheus scraping a sandbox (a crate root looks for its
// modules beside it, hence the paths).
#[path = "observability/prometheus.rs"]
mod prometheus;
#[path = "observability/promtool.rs"]
mod promtool;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use common::sandbox::Sandbox;
use promql_parser::parser::{Expr, parse};
use promql_parser::util::{ExprVisitor, walk_expr};

const MONITORING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/charts/tenant-placer/monitoring"
);

#[derive(Debug, serde::Deserialize)]
struct Rule {
    alert: String,
    expr: String,
}

/// The alert rules as the test reads the template: its `{{- ... }}` statements dropped, the
/// release selector `$sel` as a job matcher and every other action (a threshold) as 1.
fn alert_rules() -> Vec<Rule> {
    let text = std::fs::read_to_string(Path::new(MONITORING).join("alerts.yaml")).unwrap();
    let mut yaml = String::new();
    for line in text.lines().filter(|l| !l.starts_with("{{-")) {
        let mut line = line.replace("{{ $sel }}", r#"job="tenant-placer-metrics""#);
        while let Some(start) = line.find("{{") {
            let Some(end) = line[start..].find("}}") else {
                break;
            };
            line.replace_range(start..start + end + 2, "1");
        }
        yaml.push_str(&line);
        yaml.push('\n');
    }
    serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("alerts.yaml: {e}\n{yaml}"))
}

/// The dashboard's panels, as its JSON has them.
fn dashboard_panels() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(Path::new(MONITORING).join("dashboard.json")).unwrap();
    let mut dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    dashboard["panels"].as_array_mut().unwrap().split_off(0)
}

/// Every target expression of the dashboard, with its panel's title.
fn dashboard_queries() -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in dashboard_panels() {
        for target in panel["targets"].as_array().unwrap() {
            let title = panel["title"].as_str().unwrap().to_owned();
            queries.push((title, target["expr"].as_str().unwrap().to_owned()));
        }
    }
    queries
}

/// The metric names an expression's selectors name.
#[derive(Default)]
struct Names(BTreeSet<String>);

impl ExprVisitor for Names {
    type Error = String;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, String> {
        let selector = match expr {
            Expr::VectorSelector(vs) => vs,
            Expr::MatrixSelector(ms) => &ms.vs,
            _ => return Ok(true),
        };
        let name = selector
            .name
            .clone()
            .ok_or("a selector without a metric name")?;
        self.0.insert(name);
        Ok(true)
    }
}

/// Parses `expr` and returns the metric names it uses.
fn names_in(what: &str, expr: &str) -> BTreeSet<String> {
    let parsed = parse(expr).unwrap_or_else(|e| panic!("{what}: {expr:?} is not PromQL: {e}"));
    let mut names = Names::default();
    walk_expr(&mut names, &parsed).unwrap_or_else(|e| panic!("{what}: {expr:?}: {e}"));
    assert!(!names.0.is_empty(), "{what}: {expr:?} names no metric");
    names.0
}

/// Every expression, parsed, and the metric names they use together.
fn used_names() -> BTreeSet<String> {
    let rules = alert_rules();
    assert_eq!(rules.len(), 9, "the nine alerts of the chart");
    let mut used = BTreeSet::new();
    for rule in &rules {
        used.extend(names_in(&rule.alert, &rule.expr));
    }
    let queries = dashboard_queries();
    assert!(queries.len() >= 12, "{} dashboard queries", queries.len());
    for (panel, expr) in &queries {
        used.extend(names_in(panel, expr));
    }
    used
}

#[test]
fn every_alert_and_dashboard_expression_parses_as_promql() {
    let used = used_names();
    assert!(used.contains("tenant_placer_leader"), "{used:?}");
    assert!(
        used.iter().all(|name| name.starts_with("tenant_placer_")),
        "{used:?}"
    );
}

#[test]
fn the_promql_check_catches_a_misspelt_expression() {
    let parsed = std::panic::catch_unwind(|| names_in("test", "sum(rate(x_total[5m])"));
    assert!(parsed.is_err(), "an unbalanced parenthesis was accepted");
}

/// The sample names of a /metrics answer (`name{labels} value` or `name value`).
fn sample_names(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_metric_the_alerts_and_the_dashboard_name_is_exported_by_a_running_sandbox() {
    let used = used_names();
    let examples = common::examples();
    let purchase = examples.join("purchase");
    let sandbox = Sandbox::start_with(
        &[&examples, &purchase],
        &[
            "--provisioner",
            "simulated",
            "--consolidation",
            "WhenUnderutilized",
        ],
    );
    let page = sandbox.page_url().trim_end_matches('/').to_owned();
    let addr = page.trim_start_matches("http://").to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    let missing = loop {
        let answer = common::http(
            &addr,
            "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        );
        let exported = sample_names(&answer);
        let missing: Vec<&String> = used.difference(&exported).collect();
        if missing.is_empty() || Instant::now() > deadline {
            break missing.into_iter().cloned().collect::<Vec<_>>();
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        missing.is_empty(),
        "named by the alerts or the dashboard, not exported by /metrics: {missing:?}\n{}",
        sandbox.printed()
    );
}
