//! Objects the types cannot read, as an older schema let them in: unreadable never means gone.
//! A Node the types cannot hold keeps its tenants (none is placed again elsewhere) and they say
//! why; a condition time that cannot be parsed is rewritten at the next status write; the delete
//! of a Tenant the types cannot hold still releases its reservation, by its key.

use std::time::Duration;

use kube::CustomResourceExt;
use serde_json::{Value, json};
use tenant_placer::api::{GROUP, Node, TenantMode, TenantPhase};

use super::guards::{phase, tenant_crd_without_replica_bounds};
use super::*;

/// The Node CRD as an older release shipped it: a condition's time of any text, and threads
/// an int-or-string (a real server kept what those let in after the schema was fixed).
pub fn node_crd_of_an_older_release() -> Value {
    let mut crd = serde_json::to_value(Node::crd()).unwrap();
    let schema = crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties")
        .unwrap();
    schema
        .pointer_mut("/status/properties/conditions/items/properties/lastTransitionTime")
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove("format");
    *schema
        .pointer_mut("/spec/properties/capacity/properties/threads")
        .unwrap() = json!({"x-kubernetes-int-or-string": true});
    crd
}

/// Stores `object` as the older Node schema lets it in, then puts the current schema back.
pub fn store_under_the_older_node_schema(h: &Harness, object: Value) {
    let api = &h.fleet.api;
    api.install_crd(node_crd_of_an_older_release()).unwrap();
    api.apply(object).unwrap();
    api.install_crd(serde_json::to_value(Node::crd()).unwrap())
        .unwrap();
}

/// Node `name` as stored, whatever the types make of it.
fn stored_node(h: &Harness, name: &str) -> Value {
    h.fleet.api.get(GROUP, "nodes", None, name).unwrap()
}

/// The nodes whose stored allocations hold this UID (read as JSON: an unreadable node counts).
fn holders(h: &Harness, uid: &str) -> Vec<String> {
    h.fleet
        .api
        .list(GROUP, "nodes")
        .iter()
        .filter(|n| {
            n["status"]["allocations"]
                .as_array()
                .is_some_and(|a| a.iter().any(|e| e["uid"] == uid))
        })
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

fn uid(h: &Harness, name: &str) -> String {
    h.tenant(name).unwrap().metadata.uid.unwrap()
}

/// The seed nodes with acme (2 threads) on node-eu-1, the controller stopped; acme's UID.
async fn acme_on_node_eu_1_then_stopped() -> (Harness, String) {
    let h = Harness::start(&seed_nodes()).await;
    h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
    h.settle().await;
    let acme = uid(&h, "acme");
    h.fleet.stop();
    (h, acme)
}

/// Node `name`'s status with its first condition's time replaced by text that is not a time.
fn with_a_bad_condition_time(h: &Harness, name: &str) -> Value {
    let mut status = stored_node(h, name)["status"].clone();
    status["conditions"][0]["lastTransitionTime"] = json!("not-a-time");
    json!({"apiVersion": VERSION, "kind": "Node", "metadata": {"name": name}, "status": status})
}

fn condition_time(h: &Harness, name: &str) -> String {
    stored_node(h, name)["status"]["conditions"][0]["lastTransitionTime"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_condition_time_cannot_be_parsed_keeps_its_tenants_across_a_restart_and_gets_a_valid_time()
 {
    let (h, acme) = acme_on_node_eu_1_then_stopped().await;
    store_under_the_older_node_schema(&h, with_a_bad_condition_time(&h, "node-eu-1"));
    assert_eq!(condition_time(&h, "node-eu-1"), "not-a-time");
    h.fleet.start(h.settings.clone());
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-1".into()));
    assert_eq!(holders(&h, &acme), ["node-eu-1"], "held once, where it was");
    // The next status write (the node's refresh) rewrote the condition with a real time.
    let rewritten = condition_time(&h, "node-eu-1");
    assert!(
        rewritten.parse::<k8s_openapi::jiff::Timestamp>().is_ok(),
        "{rewritten}"
    );
    // While running, the same edit blocks nothing: a node written since is still written to.
    store_under_the_older_node_schema(&h, with_a_bad_condition_time(&h, "node-eu-1"));
    h.apply(&[tenant("later").resources(4, 4, 4).manifest()]);
    h.settle().await;
    assert_eq!(
        phase(&h, "later"),
        (TenantPhase::Active, "node-eu-1".into())
    );
    assert_eq!(h.allocated_threads("node-eu-1"), 6);
    assert_ne!(condition_time(&h, "node-eu-1"), "not-a-time");
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_the_types_cannot_hold_keeps_its_tenants_across_a_restart_and_they_say_why() {
    let (h, acme) = acme_on_node_eu_1_then_stopped().await;
    // Threads as a string: the types cannot hold it (an int-or-string schema let it in).
    store_under_the_older_node_schema(
        &h,
        node_spec("node-eu-1", json!({"capacity": {"threads": "64"}})),
    );
    h.fleet.start(h.settings.clone());
    h.settle().await;
    let status = h.tenant("acme").unwrap().status.unwrap();
    assert_eq!(
        (status.phase, status.node_name.as_str()),
        (TenantPhase::Active, "node-eu-1"),
        "not placed again elsewhere"
    );
    assert!(
        status
            .message
            .contains("node node-eu-1 cannot be read: spec.capacity.threads")
            && status
                .message
                .ends_with("its reservations are kept until it is fixed"),
        "{}",
        status.message
    );
    assert_eq!(holders(&h, &acme), ["node-eu-1"]);
    // Placement goes on elsewhere.
    h.apply(&[tenant("later").resources(4, 4, 4).manifest()]);
    h.settle().await;
    assert_eq!(
        phase(&h, "later"),
        (TenantPhase::Active, "node-eu-2".into())
    );
    assert_eq!(h.allocated_threads("node-eu-2"), 4, "only later's 4");
    // Deleting acme waits, saying why, until the node can be read again.
    h.delete_tenant("acme");
    let mut said = String::new();
    for _ in 0..100 {
        said = h.tenant("acme").unwrap().status.unwrap().message;
        if said.starts_with("releasing the reservation failed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        said.starts_with(
            "releasing the reservation failed, will retry: node node-eu-1 cannot be read"
        ),
        "{said}"
    );
    assert_eq!(holders(&h, &acme), ["node-eu-1"]);
    h.apply(&[node_spec("node-eu-1", json!({"capacity": {"threads": 64}}))]);
    h.settle().await;
    assert!(h.tenant("acme").is_none(), "released, then gone");
    assert!(holders(&h, &acme).is_empty());
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_finalizer_a_tenant_the_types_cannot_hold_is_released_by_its_key_when_deleted()
{
    let settings = Settings {
        finalizer: false,
        ..settings()
    };
    let h = Harness::start_on(ApiServer::new(), &seed_nodes(), settings).await;
    h.fleet
        .api
        .install_crd(tenant_crd_without_replica_bounds())
        .unwrap();
    h.apply(&[
        tenant("seen").resources(2, 4, 20).manifest(),
        tenant("listed").resources(3, 4, 20).manifest(),
    ]);
    h.settle().await;
    let (seen, listed) = (uid(&h, "seen"), uid(&h, "listed"));
    let unreadable = json!({"mode": TenantMode::Cluster, "replicas": 2_147_483_648_i64});
    // Made unreadable while the controller runs (its cache keeps the readable copy), then
    // deleted: the delete event's body cannot be read.
    h.apply(&[tenant_spec("seen", unreadable.clone())]);
    h.settle().await;
    h.delete_tenant("seen");
    h.settle().await;
    assert!(holders(&h, &seen).is_empty(), "released by its UID");
    // Made unreadable, then a restart (no cache holds it), then deleted.
    h.apply(&[tenant_spec("listed", unreadable)]);
    h.fleet.stop();
    h.fleet.start(h.settings.clone());
    h.settle().await;
    assert_eq!(holders(&h, &listed), ["node-eu-1"], "kept while it lives");
    h.delete_tenant("listed");
    h.settle().await;
    assert!(holders(&h, &listed).is_empty(), "released by its UID");
    assert_eq!(h.allocated_threads("node-eu-1"), 0);
    h.assert_invariants();
}
