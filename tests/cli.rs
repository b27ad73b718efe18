//! The command line refuses settings that mean nothing, before anything starts.
#![allow(clippy::expect_used)]

use std::process::Command;

fn tenant_placer(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tenant-placer"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .expect("the binary runs")
}

#[test]
fn zero_or_negative_windows_intervals_and_concurrency_are_refused_with_the_flag_named() {
    let cases = [
        ("--concurrency", "0"),
        ("--requeue-window-ms", "0"),
        ("--pending-recheck-seconds", "0"),
        ("--orphan-sweep-seconds", "0"),
        ("--requeue-window-ms", "-5"),
    ];
    for command in ["run", "sandbox"] {
        for (flag, value) in cases {
            let out = tenant_placer(&[command, &format!("{flag}={value}")]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command} {flag}={value}: {stderr}"
            );
            assert!(
                stderr.contains(&format!("invalid value '{value}' for '{flag}")),
                "{command} {flag}={value}: {stderr}"
            );
        }
    }
}

#[test]
fn a_selector_the_api_server_would_refuse_is_refused_with_the_flag_named() {
    for (flag, value) in [
        ("--node-selector", "pool in eu"),
        ("--tenant-selector", "=eu"),
        ("--register-nodes", "pool in metal"),
    ] {
        let out = tenant_placer(&["run", flag, value]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value '{value}' for '{flag}")),
            "{flag} {value}: {stderr}"
        );
    }
}

#[test]
fn simulate_says_which_pool_it_placed_when_selectors_are_set() {
    let out = tenant_placer(&[
        "simulate",
        "--node-selector",
        "pool=eu,tier!=gold",
        "--tenant-selector",
        "pool=eu",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let settings = stdout.lines().next().unwrap_or_default();
    assert!(
        settings.ends_with("--node-selector 'pool=eu,tier!=gold' --tenant-selector 'pool=eu'"),
        "{settings}"
    );
    let plain = tenant_placer(&["simulate"]);
    let plain = String::from_utf8_lossy(&plain.stdout);
    assert!(!plain.contains("selector"), "{plain}");
}

#[test]
fn simulate_registers_the_labelled_core_nodes_of_its_manifests_and_places_on_them() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let out = tenant_placer(&[
        "simulate",
        "-f",
        &format!("{examples}/registered"),
        "-f",
        &format!("{examples}/tenants.yaml"),
        "--register-nodes",
        "tenant-placer.dev/pool=bare-metal",
        "--output",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    let nodes: Vec<(String, String)> = report["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| (n["node"].to_string(), n["state"].to_string()))
        .collect();
    // control-plane-1 carries no pool label: not registered. metal-eu-2 is cordoned.
    assert_eq!(
        nodes,
        [
            ("\"metal-eu-1\"".to_owned(), "\"Online\"".to_owned()),
            ("\"metal-eu-2\"".to_owned(), "\"Cordoned\"".to_owned())
        ],
        "{report:#}"
    );
    let acme = report["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .find(|t| t["tenant"] == "default/acme")
        .expect("acme");
    assert_eq!(acme["node"], "metal-eu-1", "{acme:#}");
}

#[test]
fn run_refuses_the_simulated_provisioner_which_only_plays_in_sandbox_and_simulate() {
    for args in [
        &["run", "--provisioner", "simulated"][..],
        &["run", "--provisioner-fails", "big"][..],
        &["run", "--provisioner-delay-ms", "10"][..],
    ] {
        let out = tenant_placer(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        for said in [
            "not taken by `run`",
            "only plays in `sandbox`, `simulate` and `plan`",
            "or another provisioner turns NodeRequests into machines apart",
        ] {
            assert!(stderr.contains(said), "{args:?}: {said:?} not in {stderr}");
        }
    }
}
