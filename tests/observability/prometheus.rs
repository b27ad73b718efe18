//! A real Prometheus (Debian's package) scrapes a real controller: a sandbox is taken through
//! placements, a tenant waiting, a purchase through the simulated provisioner, a consolidation,
//! a person's drain and 409 conflicts (a second controller racing it on the same nodes), and
//! then Prometheus' HTTP API must answer every dashboard panel's query with at least one series
//! and evaluate every alert of the chart (rendered by Helm) without error. The promtool unit
//! tests' input series are checked against the same sandbox's /metrics here: their names and
//! labels are the exported ones, not retyped.
//!
//! With TP_DASHBOARD_DATA=FILE the panels' series over the run are written to FILE, for
//! ci/dashboard-picture.sh to draw docs/dashboard.png.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::promtool::{alerts_of, prometheus_tool, render_rules, rules_of, tests_dir};
use super::{dashboard_panels, names_in};
use crate::common::sandbox::{Sandbox, binary};
use crate::common::{POLL, WAIT, collect_lines, wait_for};

/// The scrape job's name and the namespace label: what the chart's ServiceMonitor gives the
/// series, so the rendered rules' selector picks them.
const JOB: &str = "tenant-placer-metrics";
const NAMESPACE: &str = "tenant-placer-system";
/// Labels a scrape adds, not /metrics.
const TARGET_LABELS: [&str; 3] = ["job", "namespace", "instance"];

/// A Prometheus server on a free loopback port, its storage in a temporary folder; killed when
/// dropped.
struct Prometheus {
    child: Child,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free a moment ago (Prometheus cannot be told to pick one and say which).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// One HTTP/1.0 GET (no chunked answer to decode); None when nothing answers yet.
fn get(addr: &str, target: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(stream, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let code = answer.split(' ').nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n")?.1.to_owned();
    Some((code, body))
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Prometheus {
    /// Starts it scraping `target` (host:port) every second and evaluating `rules` every second,
    /// and waits until it is ready.
    fn start(target: &str, rules: &Path) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 rule_files: [{rules:?}]\n\
                 scrape_configs:\n\
                 - job_name: {JOB}\n\
                 \x20 static_configs:\n\
                 \x20 - targets: [{target:?}]\n\
                 \x20   labels: {{namespace: {NAMESPACE}}}\n",
                rules = rules.display().to_string(),
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let mut child = prometheus_tool("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start prometheus");
        let log = collect_lines(child.stderr.take().unwrap());
        let mut prometheus = Prometheus {
            child,
            addr,
            log,
            _dir: dir,
        };
        wait_for("Prometheus to be ready", || {
            if let Some(status) = prometheus.child.try_wait().unwrap() {
                panic!("prometheus exited ({status}): {}", prometheus.log());
            }
            matches!(get(&prometheus.addr, "/-/ready"), Some((200, _))).then_some(())
        });
        prometheus
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// An API call's `data`; fails the test with Prometheus' error when it is refused.
    fn api(&self, target: &str) -> serde_json::Value {
        let (code, body) =
            get(&self.addr, target).unwrap_or_else(|| panic!("Prometheus did not answer {target}"));
        let answer: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{target}: {code} {e}: {body}"));
        assert!(
            code == 200 && answer["status"] == "success",
            "{target}: {code} {body}"
        );
        answer["data"].clone()
    }

    /// Waits until `expr` returns a series: the sign that a scrape has shown `what`.
    fn seen(&self, what: &str, expr: &str) {
        let deadline = Instant::now() + WAIT;
        while self.query(expr).is_empty() {
            assert!(
                Instant::now() < deadline,
                "after {WAIT:?} Prometheus had not seen {what}: nothing for {expr}\n{}",
                self.log()
            );
            std::thread::sleep(POLL);
        }
    }

    /// An instant query's series.
    fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        let data = self.api(&format!("/api/v1/query?query={}", encode(expr)));
        data["result"].as_array().cloned().unwrap_or_default()
    }
}

/// Unix time now, in seconds.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `name{a="x",...}` (as /metrics writes a sample, or a promtool series) as its name and labels.
fn series_key(text: &str) -> (String, BTreeMap<String, String>) {
    let Some((name, rest)) = text.split_once('{') else {
        return (text.trim().to_owned(), BTreeMap::new());
    };
    let inner = rest.split_once('}').map_or(rest, |(inner, _)| inner);
    let labels = inner
        .split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap();
            (
                key.trim().to_owned(),
                value.trim().trim_matches('"').to_owned(),
            )
        })
        .collect();
    (name.trim().to_owned(), labels)
}

/// Every series a /metrics answer holds.
fn exported_series(body: &str) -> BTreeSet<(String, BTreeMap<String, String>)> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let sample = line.rsplit_once(' ').map_or(line, |(sample, _)| sample);
            series_key(sample)
        })
        .collect()
}

/// The promtool unit tests' input series, with the labels a scrape adds taken off.
fn unit_test_series() -> BTreeMap<(String, BTreeMap<String, String>), String> {
    let mut series = BTreeMap::new();
    for entry in std::fs::read_dir(tests_dir()).unwrap() {
        let path = entry.unwrap().path();
        let doc: serde_json::Value =
            serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for test in doc["tests"].as_array().unwrap() {
            for input in test["input_series"].as_array().unwrap() {
                let (name, mut labels) = series_key(input["series"].as_str().unwrap());
                for label in TARGET_LABELS {
                    labels.remove(label);
                }
                let file = path.file_name().unwrap().to_string_lossy().into_owned();
                series.insert((name, labels), file);
            }
        }
    }
    series
}

/// A manifest of `kind` with `spec`, labels optional.
fn manifest(kind: &str, name: &str, labels: &str, spec: &str) -> String {
    let namespace = if kind == "Tenant" {
        "  namespace: default\n"
    } else {
        ""
    };
    format!(
        "apiVersion: placement.tenant-placer.dev/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\n\
         {namespace}  labels: {{{labels}}}\nspec:\n{spec}---\n"
    )
}

fn tenant(name: &str, labels: &str, threads: u32) -> String {
    let spec = format!(
        "  resources: {{threads: {threads}, memoryGb: 1, storageGb: 10}}\n  mode: Standalone\n"
    );
    manifest("Tenant", name, labels, &spec)
}

fn node(name: &str, threads: u32, state: &str) -> String {
    let spec = format!(
        "  capacity: {{threads: {threads}, memoryGb: 512, storageGb: 8000}}\n  state: {state}\n"
    );
    manifest("Node", name, "", &spec)
}

/// Applies `yaml` through kubectl.
fn apply(sandbox: &Sandbox, name: &str, yaml: &str) {
    let file = sandbox.write(name, yaml);
    sandbox
        .kubectl(&["apply", "-f", file.to_str().unwrap()])
        .ok("kubectl apply");
}

/// A counter's value in the sandbox's /metrics right now.
fn exported_value(addr: &str, sample: &str) -> f64 {
    let (_, body) = get(addr, "/metrics").expect("the sandbox's /metrics");
    body.lines()
        .find_map(|line| line.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{sample} is not in /metrics:\n{body}"))
}

#[test]
fn a_real_prometheus_scraping_a_sandbox_answers_every_panel_and_evaluates_every_alert() {
    let started = Instant::now();
    let start_time = now();
    let rules_dir = tempfile::tempdir().unwrap();
    let rules = render_rules(rules_dir.path());
    let purchase = crate::common::examples().join("purchase");
    // Fast clocks, each state lasting a few scrapes: a tenant waits 3 s before a machine is
    // bought, which arrives 2 s later; a bought node that can be emptied is drained after 1 s.
    let sandbox = Sandbox::start_with(
        &[&purchase],
        &[
            "--provisioner",
            "simulated",
            "--provisioner-delay-ms",
            "2000",
            "--request-after-seconds",
            "3",
            "--consolidation",
            "WhenUnderutilized",
            "--consolidate-after-seconds",
            "1",
            "--disruption-budget",
            "1",
            "--make-room-moves",
            "0",
        ],
    );
    let metrics_addr = sandbox
        .page_url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let prometheus = Prometheus::start(&metrics_addr, &rules);
    let sel = format!(r#"job="{JOB}",namespace="{NAMESPACE}""#);
    let phase = |name: &str, want: &str| {
        sandbox.wait_jsonpath(&["tn", name], "{.status.phase}", want);
    };
    let on_node = |name: &str, want: &str| {
        sandbox.wait_jsonpath(&["tn", name], "{.status.nodeName}", want);
    };

    // Placements: four tenants fill node-a and node-b; node-c is cordoned for later.
    let mut fleet = node("node-a", 8, "Online") + &node("node-b", 8, "Online");
    fleet += &node("node-c", 256, "Cordoned");
    for name in ["a1", "a2", "b1", "b2"] {
        fleet += &tenant(name, "", 4);
    }
    apply(&sandbox, "fleet.yaml", &fleet);
    for name in ["a1", "a2", "b1", "b2"] {
        phase(name, "Active");
    }
    prometheus.seen(
        "the placements",
        &format!("tenant_placer_placements_total{{{sel}}} >= 4"),
    );

    // A tenant waiting, then a purchase: no room for `late` until a machine of the example's
    // NodeClass is bought for it.
    apply(&sandbox, "late.yaml", &tenant("late", "", 4));
    prometheus.seen(
        "a tenant waiting",
        &format!("tenant_placer_pending_tenants{{{sel}}} >= 1"),
    );
    prometheus.seen(
        "a machine in flight",
        &format!("tenant_placer_node_request_oldest_in_flight_seconds{{{sel}}} > 0"),
    );
    phase("late", "Active");
    prometheus.seen(
        "a purchase",
        &format!(
            r#"tenant_placer_node_requests{{{sel},phase="Ready"}} >= 1 and on() tenant_placer_money_decisions_total{{{sel},action="buy"}} >= 1"#
        ),
    );
    let bought = sandbox
        .jsonpath(&["tn", "late"], "{.status.nodeName}")
        .unwrap();
    assert!(bought.starts_with("hetzner-ax162"), "late is on {bought}");

    // A consolidation: room on node-a makes the bought node emptiable; it is drained (late moves
    // to node-a) and handed back.
    sandbox
        .kubectl(&["delete", "tn", "a1"])
        .ok("kubectl delete");
    on_node("late", "node-a");
    prometheus.seen(
        "a consolidation",
        &format!(r#"tenant_placer_consolidation_actions_total{{{sel},action="drain"}} >= 1"#),
    );

    // A person's drain: node-b's tenants move to node-c.
    for (node, state) in [("node-c", "Online"), ("node-b", "Draining")] {
        let patch = format!(r#"{{"spec":{{"state":"{state}"}}}}"#);
        sandbox
            .kubectl(&["patch", "pnode", node, "--type", "merge", "-p", &patch])
            .ok("kubectl patch");
    }
    on_node("b1", "node-c");
    on_node("b2", "node-c");
    prometheus.seen(
        "the moves of the consolidation and the drain",
        &format!(r#"tenant_placer_migrations_total{{{sel},result="done"}} >= 3"#),
    );

    // Conflicts: a second controller (no leader election, the crowd's tenants only) writes the
    // same nodes, as a botched failover would; crowds come until the sandbox's writes met a 409.
    let mut other = binary()
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--no-page"])
        .args([
            "--tenant-selector",
            "crowd=yes",
            "--request-after-seconds",
            "0",
        ])
        .env("KUBECONFIG", sandbox.kubeconfig())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a second controller");
    let conflicts = "tenant_placer_placement_conflicts_total";
    // Two writers aiming first fit at the same nodes meet a 409 in the first crowd or two; on a
    // loaded machine one may run behind the other for a while: crowds come until one does, for
    // 30 crowds at most.
    const CROWD: usize = 24;
    for round in 0..30 {
        let crowd: String = (0..CROWD)
            .map(|i| tenant(&format!("crowd-{round}-{i}"), "crowd: \"yes\"", 1))
            .collect();
        apply(&sandbox, &format!("crowd-{round}.yaml"), &crowd);
        for i in 0..CROWD {
            phase(&format!("crowd-{round}-{i}"), "Active");
        }
        if exported_value(&metrics_addr, conflicts) > 0.0 {
            break;
        }
        // Gone again (their releases are writes too), so that the nodes never fill up.
        let file = sandbox.write(&format!("crowd-{round}.yaml"), &crowd);
        sandbox
            .kubectl(&["delete", "--wait=false", "-f", file.to_str().unwrap()])
            .ok("kubectl delete");
    }
    let _ = other.kill();
    let _ = other.wait();
    assert!(
        exported_value(&metrics_addr, conflicts) > 0.0,
        "two controllers on the same nodes met no 409 in 30 crowds"
    );
    prometheus.seen("a conflict", &format!("{conflicts}{{{sel}}} >= 1"));

    // Every alert of the rendered rules is evaluated by Prometheus without error.
    let alerts = alerts_of(&rules_of(&rules));
    assert_eq!(alerts.len(), 9);
    for (_, expr) in &alerts {
        prometheus.query(expr); // fails the test with Prometheus' error, if any
    }
    let evaluated = wait_for("Prometheus to evaluate every rule", || {
        let data = prometheus.api("/api/v1/rules?type=alert");
        let rules: Vec<serde_json::Value> = data["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .collect();
        rules
            .iter()
            .all(|r| r["health"] != "unknown")
            .then_some(rules)
    });
    assert_eq!(evaluated.len(), 9, "{evaluated:?}");
    for rule in &evaluated {
        assert_eq!(
            rule["health"], "ok",
            "{}: {}",
            rule["name"], rule["lastError"]
        );
    }

    // Every dashboard panel's every query returns a series; a metric a panel names that
    // Prometheus never received is named with the panel's title.
    let names: BTreeSet<String> = prometheus
        .api("/api/v1/label/__name__/values")
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    let panels = dashboard_panels();
    let mut failures = Vec::new();
    let mut drawn = serde_json::json!([]);
    for panel in &panels {
        let title = panel["title"].as_str().unwrap();
        let mut counts = Vec::new();
        let mut targets = Vec::new();
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap().replace("$job", JOB);
            for name in names_in(title, &expr).difference(&names) {
                failures.push(format!("panel {title:?}: {name} is not exported"));
            }
            let series = prometheus.query(&expr);
            if series.is_empty() {
                failures.push(format!("panel {title:?}: no series for {expr}"));
            }
            counts.push(series.len());
            if std::env::var_os("TP_DASHBOARD_DATA").is_some() {
                // Whole seconds back from now, so that the last step is now, which the
                // instant queries above saw.
                let end = now();
                let start = end - (end - start_time).ceil();
                let range = prometheus.api(&format!(
                    "/api/v1/query_range?query={}&start={start}&end={end}&step=1",
                    encode(&expr),
                ));
                targets.push(serde_json::json!({
                    "expr": expr, "legendFormat": target["legendFormat"], "result": range["result"],
                }));
            }
        }
        eprintln!("panel {title:?}: series per query {counts:?}");
        drawn.as_array_mut().unwrap().push(serde_json::json!({
            "title": title, "gridPos": panel["gridPos"], "unit": panel["fieldConfig"]["defaults"]["unit"],
            "targets": targets,
        }));
    }
    assert!(
        failures.is_empty(),
        "{}\n(exported: {names:?})",
        failures.join("\n")
    );
    if let Some(path) = std::env::var_os("TP_DASHBOARD_DATA") {
        std::fs::write(&path, serde_json::to_string_pretty(&drawn).unwrap()).unwrap();
        eprintln!("dashboard data written to {}", Path::new(&path).display());
    }

    // The promtool unit tests' series are the exported ones (scrape labels aside).
    let (_, body) = get(&metrics_addr, "/metrics").unwrap();
    let exported = exported_series(&body);
    let retyped: Vec<String> = unit_test_series()
        .into_iter()
        .filter(|(series, _)| !exported.contains(series))
        .map(|((name, labels), file)| format!("{file}: {name}{labels:?}"))
        .collect();
    assert!(
        retyped.is_empty(),
        "promtool input series not exported by /metrics:\n{}",
        retyped.join("\n")
    );

    assert!(
        prometheus.log().lines().all(|l| !l.contains("level=error")),
        "Prometheus logged errors:\n{}",
        prometheus.log()
    );
    eprintln!("prometheus test: {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn a_promtool_series_check_catches_a_label_the_controller_does_not_export() {
    let exported =
        exported_series("# TYPE x counter\nx_total{kind=\"node\"} 0\ntenant_placer_leader 1\n");
    assert!(exported.contains(&series_key(r#"x_total{kind="node"}"#)));
    assert!(exported.contains(&series_key("tenant_placer_leader")));
    assert!(!exported.contains(&series_key(r#"x_total{kind="nodes"}"#)));
    assert!(!exported.contains(&series_key(r#"x_total{kind="node",class="a"}"#)));
}
