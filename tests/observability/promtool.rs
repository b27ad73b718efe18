//! Every alert of the chart unit-tested with the real `promtool test rules`: the rules file is the
//! chart's PrometheusRule rendered by Helm with default values (ci/render_rules.py, through the
//! virtualenv of ci/chart-venv.sh), so a template change that breaks an expression fails here;
//! each alert has a file in charts/tenant-placer/monitoring/tests/ with a case where it fires
//! after its `for:` and one where it stays quiet just below its threshold.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::MONITORING;
use crate::common::{Output, run};

/// How long one promtool or render run may take (each takes well under a second here).
const TOOL_DEADLINE: Duration = Duration::from_secs(60);

/// The alert unit tests' folder.
pub fn tests_dir() -> PathBuf {
    Path::new(MONITORING).join("tests")
}

/// A command for a tool of Debian's prometheus package; fails the test, saying how to get it,
/// when it is not on PATH (ci/test.sh installs it first: nothing is skipped).
pub fn prometheus_tool(name: &str) -> Command {
    let found = Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    assert!(
        found,
        "{name} is not on PATH: the monitoring tests run the real Prometheus and promtool; \
         `bash ci/prometheus-setup.sh` installs Debian's prometheus package (bash ci/test.sh runs it)"
    );
    Command::new(name)
}

/// The Python of the chart virtualenv (Helm's library): TP_CHART_PYTHON, else the one
/// ci/chart-venv.sh makes by default.
fn chart_python() -> PathBuf {
    let python = std::env::var_os("TP_CHART_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let venv = std::env::var_os("TP_CHART_VENV")
                .map_or_else(|| std::env::temp_dir().join("tp-chart-venv"), PathBuf::from);
            venv.join("bin/python")
        });
    assert!(
        python.exists(),
        "{} does not exist: the alert rules are rendered by Helm's library in the chart \
         virtualenv; run `bash ci/chart-venv.sh` (bash ci/test.sh does) or set TP_CHART_PYTHON",
        python.display()
    );
    python
}

/// Renders the chart's rules (defaults) into `dir/rendered-rules.yaml`, the name the unit tests'
/// `rule_files` give, and returns its path.
pub fn render_rules(dir: &Path) -> PathBuf {
    let out = dir.join("rendered-rules.yaml");
    let mut command = Command::new(chart_python());
    command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/render_rules.py"))
        .arg(&out);
    run(command, TOOL_DEADLINE).ok("ci/render_rules.py");
    out
}

/// The rendered rules, as data.
pub fn rules_of(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every rule of the rendered file: (alert, expr).
pub fn alerts_of(rules: &serde_json::Value) -> Vec<(String, String)> {
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| {
            (
                r["alert"].as_str().unwrap().to_owned(),
                r["expr"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// One alert's unit test file, read.
fn unit_tests(alert: &str) -> serde_json::Value {
    let path = tests_dir().join(format!("{alert}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{alert} has no promtool unit tests ({}: {e}): every alert needs one",
            path.display()
        )
    });
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `promtool test rules` on `files` (copied into `dir`, beside its rendered-rules.yaml).
fn promtool_test(dir: &Path, files: &[String]) -> Output {
    let mut command = prometheus_tool("promtool");
    command.current_dir(dir).args(["test", "rules"]);
    for file in files {
        std::fs::copy(tests_dir().join(file), dir.join(file)).unwrap();
        command.arg(file);
    }
    run(command, TOOL_DEADLINE)
}

/// The rendered rules with `alert`'s expression rewritten by `mutate`, in a folder of its own.
fn mutant(rules: &serde_json::Value, alert: &str, mutate: impl Fn(&str) -> String) -> PathBuf {
    let mut rules = rules.clone();
    for group in rules["groups"].as_array_mut().unwrap() {
        for rule in group["rules"].as_array_mut().unwrap() {
            if rule["alert"] == alert {
                let expr = rule["expr"].as_str().unwrap();
                rule["expr"] = mutate(expr).into();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap().keep();
    // JSON is YAML: promtool reads it as a rules file.
    std::fs::write(dir.join("rendered-rules.yaml"), rules.to_string()).unwrap();
    dir
}

#[test]
fn every_alert_fires_after_its_for_and_stays_quiet_below_its_threshold_in_promtool() {
    let dir = tempfile::tempdir().unwrap();
    let rendered = render_rules(dir.path());

    let mut check = prometheus_tool("promtool");
    check.args(["check", "rules"]).arg(&rendered);
    let checked = run(check, TOOL_DEADLINE).ok("promtool check rules");
    assert!(checked.contains("SUCCESS: 9 rules found"), "{checked}");

    let rules = rules_of(&rendered);
    let alerts: Vec<String> = alerts_of(&rules).into_iter().map(|(a, _)| a).collect();
    assert_eq!(alerts.len(), 9, "the nine alerts of the chart: {alerts:?}");
    // One file per alert, each with a case where its alert fires and one where it stays quiet,
    // and no file for an alert the chart does not have.
    let mut files = Vec::new();
    for alert in &alerts {
        let doc = unit_tests(alert);
        let evals: Vec<&serde_json::Value> = doc["tests"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
            .collect();
        assert!(
            evals.iter().all(|e| e["alertname"] == alert.as_str()),
            "{alert}.yaml tests another alert"
        );
        let fires = |e: &&&serde_json::Value| !e["exp_alerts"].as_array().unwrap().is_empty();
        assert!(
            evals.iter().any(|e| fires(&e)),
            "{alert}: no case where it fires"
        );
        assert!(evals.iter().any(|e| !fires(&e)), "{alert}: no quiet case");
        files.push(format!("{alert}.yaml"));
    }
    let on_disk: BTreeSet<String> = std::fs::read_dir(tests_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        on_disk,
        files.iter().cloned().collect(),
        "one unit test file per alert in {}",
        tests_dir().display()
    );

    let tested = promtool_test(dir.path(), &files).ok("promtool test rules");
    assert_eq!(tested.matches("SUCCESS").count(), 9, "{tested}");

    // The tests bite: an alert that never fires fails its firing case, and one that always
    // fires fails its quiet case (`or on()` adds the constant only when the rule has nothing).
    for alert in &alerts {
        let file = [format!("{alert}.yaml")];
        let dead = mutant(&rules, alert, |e| format!("({e}) unless on() vector(1)"));
        let out = promtool_test(&dead, &file);
        assert!(
            !out.status.success(),
            "{alert} never firing passed its tests"
        );
        let always = mutant(&rules, alert, |e| format!("({e}) or on() vector(1)"));
        let out = promtool_test(&always, &file);
        assert!(
            !out.status.success(),
            "{alert} always firing passed its tests"
        );
        std::fs::remove_dir_all(dead).unwrap();
        std::fs::remove_dir_all(always).unwrap();
    }
}
