//! `tenant-placer plan`, run as a user runs it: the fleet placed as `simulate` places it, then
//! the consolidation printed (never executed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn plan(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tenant-placer"))
        .arg("plan")
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

const FLEET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/consolidation");

#[test]
fn plan_empties_the_two_small_nodes_into_the_large_one_and_says_how_to_drain_them() {
    // First fit leaves web and cache on node-a, db on node-b, batch on node-c (10 of 16
    // threads). Least loaded first: node-c (6/16 free) cannot go (batch needs 10; node-a has
    // 0, node-b 1 thread free); node-b's db (3) → node-c, 3 threads left; node-a's web and
    // cache (1 each) → node-c, 1 thread left. Three nodes in use, one after.
    let out = plan(&["-f", FLEET]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("settings: --policy FirstFit "), "{text}");
    let moves: Vec<&str> = text.lines().filter(|l| l.starts_with("default/")).collect();
    assert_eq!(
        moves,
        [
            "default/db                      3         12         150  node-b       node-c",
            "default/web                     1          4          50  node-a       node-c",
            "default/cache                   1          2          25  node-a       node-c",
        ],
        "{text}"
    );
    assert!(
        text.contains(
            "FREED: node-b, node-a (2 of 3 nodes in use would hold nothing; 1 after the moves)"
        ),
        "{text}"
    );
    for node in ["node-b", "node-a"] {
        assert!(
            text.contains(&format!(
                r#"  kubectl patch pnode {node} --type merge -p '{{"spec":{{"state":"Draining"}}}}'"#
            )),
            "{text}"
        );
    }

    let out = plan(&["-f", FLEET, "-o", "json"]);
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["rule"], "BestFit consolidation, whole nodes only");
    assert_eq!(report["freed"], serde_json::json!(["node-b", "node-a"]));
    let db = &report["moves"][0];
    assert_eq!(
        (&db["tenant"], &db["from"], &db["to"]),
        (
            &serde_json::json!("default/db"),
            &serde_json::json!("node-b"),
            &serde_json::json!("node-c")
        )
    );
    assert_eq!(
        db["resources"],
        serde_json::json!({"threads": 3, "memoryGb": 12, "storageGb": 150})
    );
    assert!(db["uid"].as_str().is_some_and(|uid| !uid.is_empty()));
    assert_eq!(report["moves"].as_array().unwrap().len(), 3);
    assert_eq!(
        (&report["nodesInUse"], &report["nodesInUseAfter"]),
        (&3.into(), &1.into())
    );
    assert_eq!(report["drainCommands"].as_array().unwrap().len(), 2);
}

#[test]
fn plan_on_the_embedded_examples_has_nothing_to_free() {
    // acme alone on node-eu-1; node-eu-2 holds nothing, so moving acme there would free no
    // node (one in use either way); big waits and holds nothing.
    let out = plan(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("No node can be freed"), "{text}");
    assert!(!text.contains("kubectl patch"), "{text}");
}
