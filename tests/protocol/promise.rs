//! The queue keeps its promise: resizes are protected, an undecidable tenant holds nothing, a
//! restart keeps the order, same-name churn places nothing for a deleted tenant, and a
//! suspended resize asks for nothing.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inmem_apiserver::EventType;
use kube::CustomResourceExt;
use tenant_placer::api::{Node, TenantPhase};
use tenant_placer::controller::Settings;

use crate::*;

async fn next_second() {
    tokio::time::sleep(Duration::from_millis(1100)).await;
}

fn phase_and_node(h: &Harness, name: &str) -> (TenantPhase, String) {
    let status = h.tenant(name).unwrap().status.unwrap();
    (status.phase, status.node_name)
}

fn with_queue(queue: placement::QueueMode) -> Settings {
    Settings {
        queue,
        ..settings()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_an_older_resize_could_use_is_not_taken_by_a_younger_tenant() {
    for queue in placement::QueueMode::ALL {
        // A long window: the older resize is woken late, so the younger is decided first.
        let slow_passes = Settings {
            requeue_window: Duration::from_millis(3000),
            ..with_queue(queue)
        };
        let h = Harness::start_on(ApiServer::new(), &[node("n1", 10, 64, 1000)], slow_passes).await;
        h.apply(&[tenant("r-older", 4, 1, 1), tenant("filler", 6, 1, 1)]);
        h.settle().await;
        h.apply(&[tenant_spec(
            "r-older",
            json!({"resources": {"threads": 6, "memoryGb": 1, "storageGb": 1}}),
        )]);
        h.settle().await;
        assert_eq!(
            phase_and_node(&h, "r-older").0,
            TenantPhase::Resizing,
            "{queue}"
        );
        next_second().await;
        h.delete_tenant("filler");
        tokio::time::sleep(Duration::from_millis(300)).await;
        h.apply(&[tenant("younger", 5, 1, 1)]);
        h.settle().await;
        // 10 - 4 held = 6 free, of which 2 are r-older's growth: 4 left, the younger asks 5.
        assert_eq!(
            phase_and_node(&h, "younger").0,
            TenantPhase::PendingCapacity,
            "{queue}: the younger took the room of the older resize"
        );
        tokio::time::sleep(Duration::from_millis(3500)).await;
        h.settle().await;
        assert_eq!(
            phase_and_node(&h, "r-older"),
            (TenantPhase::Active, "n1".into()),
            "{queue}"
        );
        assert_eq!(h.allocated_threads("n1"), 6, "{queue}");
        h.assert_invariants();
    }
}

/// The Node CRD as an older release shipped it: no minimum on the status amounts, so a hand
/// edit can leave a node whose allocations the controller cannot read.
fn node_crd_without_status_minimums() -> Value {
    let mut crd = serde_json::to_value(Node::crd()).unwrap();
    let amounts = crd
        .pointer_mut(
            "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/allocations/items/properties/resources/properties/threads",
        )
        .unwrap()
        .as_object_mut()
        .unwrap();
    amounts.remove("minimum");
    crd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_that_cannot_be_decided_holds_no_room_and_says_why() {
    let h = Harness::start(&[node("n1", 8, 64, 1000)]).await;
    h.fleet
        .api
        .install_crd(node_crd_without_status_minimums())
        .unwrap();
    h.apply(&[tenant("filler", 8, 1, 1)]);
    h.settle().await;
    h.apply(&[tenant("stuck-older", 4, 1, 1)]);
    h.settle().await;
    let stuck_uid = h.tenant("stuck-older").unwrap().metadata.uid.unwrap();
    // Another actor writes a node whose allocations cannot be read, naming stuck-older's UID.
    h.apply(&[node("broken", 8, 64, 1000)]);
    h.settle().await;
    h.apply(&[json!({
        "apiVersion": VERSION, "kind": "Node", "metadata": {"name": "broken"},
        "status": {"allocations": [
            {"tenant": "default/stuck-older", "uid": stuck_uid, "resources": {"threads": 1, "memoryGb": 1, "storageGb": 1}},
            {"tenant": "default/ghost", "uid": "uid-ghost", "resources": {"threads": -3, "memoryGb": 1, "storageGb": 1}}],
            "allocated": {"threads": 0, "memoryGb": 0, "storageGb": 0},
            "free": {"threads": 0, "memoryGb": 0, "storageGb": 0}, "tenants": 2},
    })]);
    next_second().await;
    h.delete_tenant("filler");
    h.apply(&[tenant("younger", 4, 1, 1)]);
    h.settle().await;
    assert_eq!(
        phase_and_node(&h, "younger"),
        (TenantPhase::Active, "n1".into()),
        "an undecidable older tenant must not keep the room"
    );
    let stuck = h.tenant("stuck-older").unwrap().status.unwrap();
    assert!(
        stuck.message.starts_with(
            "cannot be decided now, will retry: node broken has allocations that cannot be read"
        ),
        "{}",
        stuck.message
    );
    assert_eq!(stuck.conditions[0].reason, "Undecided");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_room_that_appeared_meanwhile_goes_to_the_oldest_waiting_tenant() {
    for queue in placement::QueueMode::ALL {
        let h = Harness::start_on(
            ApiServer::new(),
            &[node("n1", 8, 64, 1000)],
            with_queue(queue),
        )
        .await;
        h.apply(&[tenant("filler", 8, 1, 1)]);
        h.settle().await;
        // The older sorts last by name: name order alone would favour the younger.
        h.apply(&[tenant("zz-older", 6, 1, 1)]);
        next_second().await;
        h.apply(&[tenant("aa-younger", 4, 1, 1)]);
        h.settle().await;
        h.fleet.stop();
        // Room appears while no controller runs: 6 threads.
        h.apply(&[node_spec("n1", json!({"capacity": {"threads": 14}}))]);
        h.fleet.start(h.settings.clone());
        h.settle().await;
        assert_eq!(
            phase_and_node(&h, "zz-older"),
            (TenantPhase::Active, "n1".into()),
            "{queue}"
        );
        assert_eq!(
            phase_and_node(&h, "aa-younger").0,
            TenantPhase::PendingCapacity,
            "{queue}"
        );
        h.assert_invariants();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_name_create_delete_churn_without_the_finalizer_writes_no_entry_for_a_deleted_tenant()
{
    let no_finalizer = Settings {
        finalizer: false,
        ..settings()
    };
    let h = Harness::start_on(ApiServer::new(), &[node("n1", 64, 256, 8000)], no_finalizer).await;
    // Every entry a node write adds, checked against the tenants deleted before that write.
    let deleted: Arc<Mutex<HashSet<String>>> = Arc::default();
    let late: Arc<Mutex<Vec<String>>> = Arc::default();
    let (seen, found) = (deleted.clone(), late.clone());
    h.fleet.api.on_commit(move |commit| {
        let uid = |v: &Value| v["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        match (commit.resource, commit.event) {
            ("tenants", EventType::Deleted) => {
                seen.lock().unwrap().insert(uid(commit.object));
            }
            ("nodes", _) => {
                let before: HashSet<String> = commit
                    .old
                    .and_then(|o| o["status"]["allocations"].as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .map(|a| a["uid"].as_str().unwrap_or_default().to_owned())
                    .collect();
                let gone = seen.lock().unwrap();
                for entry in commit.object["status"]["allocations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let entry_uid = entry["uid"].as_str().unwrap_or_default();
                    if !before.contains(entry_uid) && gone.contains(entry_uid) {
                        found.lock().unwrap().push(format!(
                            "{} at rv {}",
                            entry["tenant"], commit.resource_version
                        ));
                    }
                }
            }
            _ => {}
        }
    });
    for round in 0..40 {
        h.apply(&[tenant("churn", 2, 4, 20)]);
        if round % 3 == 0 {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(Duration::from_millis(round % 7)).await;
        }
        h.delete_tenant("churn");
    }
    h.settle().await;
    assert_eq!(
        *late.lock().unwrap(),
        Vec::<String>::new(),
        "entries written for tenants already deleted"
    );
    assert!(deleted.lock().unwrap().len() >= 40);
    assert_eq!(h.allocated_threads("n1"), 0);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_tenant_waiting_to_resize_keeps_its_reservation_and_asks_for_nothing() {
    let h = Harness::start(&[node("n1", 10, 64, 1000)]).await;
    h.apply(&[tenant("r", 4, 1, 1), tenant("filler", 6, 1, 1)]);
    h.settle().await;
    h.apply(&[tenant_spec(
        "r",
        json!({"resources": {"threads": 6, "memoryGb": 1, "storageGb": 1}}),
    )]);
    h.settle().await;
    assert_eq!(phase_and_node(&h, "r").0, TenantPhase::Resizing);
    h.apply(&[tenant_spec("r", json!({"suspend": true}))]);
    h.settle().await;
    let status = h.tenant("r").unwrap().status.unwrap();
    assert_eq!(
        (status.phase, status.reserved.threads),
        (TenantPhase::Suspended, 4)
    );
    assert!(
        status.message.ends_with(
            "its new footprint of 6 threads, 1 GB memory, 1 GB storage is asked for when it resumes"
        ),
        "{}",
        status.message
    );
    // Room frees up: a younger tenant may take it, the suspended one holds nothing.
    next_second().await;
    h.delete_tenant("filler");
    h.apply(&[tenant("younger", 6, 1, 1)]);
    h.settle().await;
    assert_eq!(
        phase_and_node(&h, "younger"),
        (TenantPhase::Active, "n1".into())
    );
    assert_eq!(h.allocated_threads("n1"), 10);
    // Resumed, it asks again and waits for room.
    h.apply(&[tenant_spec("r", json!({"suspend": false}))]);
    h.settle().await;
    assert_eq!(phase_and_node(&h, "r").0, TenantPhase::Resizing);
    h.assert_invariants();
}
