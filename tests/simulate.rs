//! `tenant-placer simulate`, run as a user runs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn simulate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tenant-placer"))
        .arg("simulate")
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

#[test]
fn simulate_on_the_embedded_examples_places_acme_on_node_eu_1_and_leaves_big_pending() {
    let out = simulate(&["--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let acme = &report["tenants"][0];
    assert_eq!(
        (
            acme["tenant"].as_str(),
            acme["phase"].as_str(),
            acme["node"].as_str()
        ),
        (Some("default/acme"), Some("Active"), Some("node-eu-1"))
    );
    let big = &report["tenants"][1];
    assert_eq!(
        (big["phase"].as_str(), big["node"].as_str()),
        (Some("PendingCapacity"), Some(""))
    );
    assert_eq!(report["nodes"][0]["allocated"]["threads"], 2);
    assert_eq!(report["nodes"][1]["allocated"]["threads"], 0);
}

#[test]
fn simulate_prints_bars_and_the_invariant_check_as_text() {
    let out = simulate(&["-f", concat!(env!("CARGO_MANIFEST_DIR"), "/examples")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("default/acme             Active           node-eu-1"),
        "{text}"
    );
    assert!(text.contains("2 / 64"), "{text}");
    assert!(text.contains("invariants: ok"), "{text}");
}

#[test]
fn simulate_exits_non_zero_with_a_clear_message_on_a_manifest_it_cannot_read() {
    let dir = std::env::temp_dir().join(format!("tp-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: placement.tenant-placer.dev/v1alpha1\nmetadata: {name: x}\n",
    )
    .unwrap();
    let out = simulate(&["-f", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.yaml, document 1: kind is missing or not a string"),
        "{stderr}"
    );

    let missing = dir.join("missing.yaml");
    let out = simulate(&["-f", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.yaml"));

    // A Tenant the server rejects (negative threads) is refused with the server's message,
    // naming the file, the document and the field.
    let invalid = dir.join("invalid.yaml");
    std::fs::write(&invalid, "apiVersion: placement.tenant-placer.dev/v1alpha1\nkind: Tenant\nmetadata: {name: neg, namespace: default}\nspec: {resources: {threads: -1, memoryGb: 1, storageGb: 1}}\n").unwrap();
    let out = simulate(&["-f", invalid.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid.yaml, document 1")
            && stderr.contains("spec.resources.threads")
            && stderr.contains("greater than or equal to 1"),
        "{stderr}"
    );

    // One the controller could not hold (replicas past int32) is refused the same way, in the
    // second document of its file, and nothing is reported as placed.
    let overflow = dir.join("overflow.yaml");
    std::fs::write(&overflow, "apiVersion: placement.tenant-placer.dev/v1alpha1\nkind: Node\nmetadata: {name: n1}\nspec: {capacity: {threads: 8, memoryGb: 8, storageGb: 8}}\n---\napiVersion: placement.tenant-placer.dev/v1alpha1\nkind: Tenant\nmetadata: {name: huge, namespace: default}\nspec: {resources: {threads: 1, memoryGb: 1, storageGb: 1}, mode: Cluster, replicas: 2147483648}\n").unwrap();
    let out = simulate(&["-f", overflow.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("overflow.yaml, document 2") && stderr.contains("spec.replicas"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn simulate_takes_the_placement_flags_and_says_which_it_used() {
    // BestFit packs acme onto the smaller node-eu-2; first fit would pick node-eu-1.
    let out = simulate(&["--policy", "BestFit", "--queue", "StrictFIFO"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("settings: --policy BestFit --queue StrictFIFO "),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("default/acme") && l.contains("node-eu-2")),
        "{stdout}"
    );
    // JSON on stdout stays JSON: logs go to stderr.
    let out = simulate(&["--output", "json"]);
    let _: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
}

#[test]
fn simulate_checks_the_invariants_over_the_pool_it_serves() {
    // The examples' nodes carry no `pool` label: outside the pool, they are another
    // controller's, and acme waiting while they have room breaks nothing.
    let out = simulate(&["--node-selector", "pool=eu"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("invariants: ok"), "{stdout}");
    assert!(
        stdout.contains("no node is Online with room to take new tenants"),
        "{stdout}"
    );
}

const SPREAD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/spread");

/// `field` of every item of a JSON array, as text.
fn each<'r>(items: &'r serde_json::Value, field: &str) -> Vec<&'r str> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item[field].as_str().unwrap())
        .collect()
}

/// `tenant` in a JSON report.
fn tenant<'r>(report: &'r serde_json::Value, tenant: &str) -> &'r serde_json::Value {
    report["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == tenant)
        .unwrap_or_else(|| panic!("no {tenant} in {report:#}"))
}

#[test]
fn simulate_on_the_spread_example_puts_one_database_replica_in_each_of_three_zones() {
    let out = simulate(&["-f", SPREAD, "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // One replica in each zone, on the first node by name there.
    let db = tenant(&report, "default/orders-db");
    assert_eq!(db["phase"], "Active", "{db:#}");
    assert_eq!(db["spread"], "Zones", "{db:#}");
    assert_eq!(
        db["placements"],
        serde_json::json!([
            {"node": "node-fsn1-1", "zone": "fsn1", "replicas": 1},
            {"node": "node-hel1-1", "zone": "hel1", "replicas": 1},
            {"node": "node-nbg1-1", "zone": "nbg1", "replicas": 1},
        ]),
        "{db:#}"
    );
    // 8 threads per replica x 3.
    assert_eq!(db["reserved"]["threads"], 24, "{db:#}");
    // Two replicas on two nodes, the first by name; zones play no part.
    let cache = tenant(&report, "default/cache");
    assert_eq!(
        each(&cache["placements"], "node"),
        ["node-fsn1-1", "node-fsn1-2"],
        "{cache:#}"
    );
    // The ordinary tenant has no placements: its node says where.
    let web = tenant(&report, "default/web");
    assert_eq!(web["node"], "node-fsn1-1", "{web:#}");
    assert!(web.get("placements").is_none() && web.get("spread").is_none());
    assert_eq!(
        each(&report["nodes"], "zone"),
        ["fsn1", "fsn1", "hel1", "hel1", "nbg1", "nbg1"]
    );

    let out = simulate(&["-f", SPREAD]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "    replicas spread over zones: 1 on node-fsn1-1 (zone fsn1), 1 on node-hel1-1 \
             (zone hel1), 1 on node-nbg1-1 (zone nbg1)"
        ),
        "{text}"
    );
    assert!(
        text.contains("node-nbg1-2 (Online, 0 tenants, zone nbg1)"),
        "{text}"
    );
    assert!(text.contains("invariants: ok"), "{text}");
}

#[test]
fn simulate_reads_zones_from_the_label_zone_label_names() {
    // The example's nodes with their zone under another key.
    let dir = tempfile::tempdir().unwrap();
    for file in ["nodes.yaml", "tenants.yaml"] {
        let text = std::fs::read_to_string(format!("{SPREAD}/{file}")).unwrap();
        std::fs::write(
            dir.path().join(file),
            text.replace("topology.kubernetes.io/zone", "example.com/zone"),
        )
        .unwrap();
    }
    let dir = dir.path().to_str().unwrap();
    let out = simulate(&["-f", dir, "--zone-label", "example.com/zone"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.lines()
            .next()
            .unwrap_or_default()
            .ends_with(" --zone-label example.com/zone"),
        "{text}"
    );
    assert!(
        text.contains(
            "1 on node-fsn1-1 (zone fsn1), 1 on node-hel1-1 (zone hel1), 1 on node-nbg1-1"
        ),
        "{text}"
    );
}
