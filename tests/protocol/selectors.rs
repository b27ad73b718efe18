//! Node selectors: a tenant goes only to a Node carrying every label of its `spec.nodeSelector`,
//! waits saying so when none does, is woken when a Node gets the labels, and keeps its
//! reservation when the labels of its Node change later.

use serde_json::{Value, json};
use tenant_placer::api::TenantPhase;

use crate::guards::phase;
use crate::*;

/// A merge patch of a node's labels (`null` removes one).
fn labels(node: &str, labels: Value) -> Value {
    json!({"apiVersion": VERSION, "kind": "Node", "metadata": {"name": node, "labels": labels}})
}

fn message(h: &Harness, tenant: &str) -> String {
    h.tenant(tenant).unwrap().status.unwrap().message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_no_node_matches_waits_naming_it_and_a_node_given_the_labels_takes_it() {
    let h = Harness::start(&seed_nodes()).await;
    h.apply(&[tenant("acme")
        .resources(2, 4, 20)
        .node_selector(&[("region", "eu"), ("cc", "sev")])
        .manifest()]);
    h.settle().await;
    assert_eq!(
        phase(&h, "acme"),
        (TenantPhase::PendingCapacity, String::new())
    );
    let said = message(&h, "acme");
    assert!(
        said.contains("no node has the labels cc=sev, region=eu (nodeSelector)"),
        "{said}"
    );
    h.assert_invariants();
    // One label of two is not enough.
    h.apply(&[labels("node-eu-2", json!({"region": "eu"}))]);
    h.settle().await;
    assert_eq!(
        phase(&h, "acme"),
        (TenantPhase::PendingCapacity, String::new())
    );
    // Both: the waiting room wakes it, and it goes to node-eu-2, though node-eu-1 comes first
    // by name and has room.
    h.apply(&[labels("node-eu-2", json!({"cc": "sev"}))]);
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-2".into()));
    assert_eq!(h.allocated_threads("node-eu-1"), 0);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_stay_on_a_node_that_loses_their_labels_and_resize_there() {
    let h = Harness::start(&[
        node("node-eu-1")
            .capacity(64, 256, 8000)
            .label("region", "eu")
            .manifest(),
        node("node-eu-2").capacity(32, 128, 4000).manifest(),
    ])
    .await;
    let eu = |name: &str, threads: i64| {
        tenant(name)
            .resources(threads, 4, 20)
            .node_selector(&[("region", "eu")])
            .manifest()
    };
    h.apply(&[eu("acme", 2)]);
    h.settle().await;
    h.apply(&[eu("globex", 4)]);
    h.settle().await;
    for name in ["acme", "globex"] {
        assert_eq!(phase(&h, name), (TenantPhase::Active, "node-eu-1".into()));
    }
    h.apply(&[labels("node-eu-1", json!({"region": null}))]);
    h.settle().await;
    for name in ["acme", "globex"] {
        assert_eq!(phase(&h, name), (TenantPhase::Active, "node-eu-1".into()));
    }
    assert_eq!(h.allocated_threads("node-eu-1"), 6);
    h.assert_invariants();
    // A resize goes on in place there: 2 → 3 threads.
    h.apply(&[tenant_spec("acme", json!({"resources": {"threads": 3}}))]);
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-1".into()));
    assert_eq!(h.allocated_threads("node-eu-1"), 7);
    // A newcomer with the same selector finds no node with the label.
    h.apply(&[eu("initech", 1)]);
    h.settle().await;
    assert_eq!(
        phase(&h, "initech"),
        (TenantPhase::PendingCapacity, String::new())
    );
    assert!(
        message(&h, "initech").contains("no node has the labels region=eu (nodeSelector)"),
        "{}",
        message(&h, "initech")
    );
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_leaving_a_draining_node_moves_only_to_a_node_carrying_its_labels() {
    let h = Harness::start(&[
        node("a-plain").capacity(8, 32, 100).manifest(),
        node("b-eu")
            .capacity(8, 32, 100)
            .label("region", "eu")
            .manifest(),
        node("c-eu")
            .capacity(8, 32, 100)
            .label("region", "eu")
            .manifest(),
    ])
    .await;
    h.apply(&[tenant("acme")
        .resources(2, 4, 20)
        .node_selector(&[("region", "eu")])
        .manifest()]);
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "b-eu".into()));
    h.apply(&[node_spec("b-eu", json!({"state": "Draining"}))]);
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "c-eu".into()));
    assert_eq!(h.allocated_threads("a-plain"), 0);
    h.assert_invariants();
}
