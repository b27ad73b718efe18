//! The queue keeps its promise: resizes are protected, an undecidable tenant holds nothing, a
//! restart keeps the order, same-name churn places nothing for a deleted tenant, and a
//! suspended resize asks for nothing.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::CustomResourceExt;
use tenant_placer::api::{AllocationEntry, Node, TenantPhase};
use tenant_placer::controller::{Handles, Settings};

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
        let h = Harness::start_on(
            ApiServer::new(),
            &[node("n1").capacity(10, 64, 1000).manifest()],
            slow_passes,
        )
        .await;
        h.apply(&[
            tenant("r-older").resources(4, 1, 1).manifest(),
            tenant("filler").resources(6, 1, 1).manifest(),
        ]);
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
        // Filler's room is free (its entry released, the tenant gone) ...
        h.until("filler is released", || {
            h.tenant("filler").is_none() && h.allocated_threads("n1") == 4
        })
        .await;
        h.apply(&[tenant("younger").resources(5, 1, 1).manifest()]);
        h.settle().await;
        // ... and the younger was decided while r-older still waits for its late wake-up: the
        // case the hold is for (had r-older grown first, the younger would wait anyway).
        assert_eq!(
            phase_and_node(&h, "r-older").0,
            TenantPhase::Resizing,
            "{queue}: r-older was woken before the younger was decided"
        );
        // 10 - 4 held = 6 free, of which 2 are r-older's growth: 4 left, the younger asks 5.
        assert_eq!(
            phase_and_node(&h, "younger").0,
            TenantPhase::PendingCapacity,
            "{queue}: the younger took the room of the older resize"
        );
        h.until("r-older's wake-up pass grows it", || {
            phase_and_node(&h, "r-older").0 == TenantPhase::Active
        })
        .await;
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
    let h = Harness::start(&[node("n1").capacity(8, 64, 1000).manifest()]).await;
    h.fleet
        .api
        .install_crd(node_crd_without_status_minimums())
        .unwrap();
    h.apply(&[tenant("filler").resources(8, 1, 1).manifest()]);
    h.settle().await;
    h.apply(&[tenant("stuck-older").resources(4, 1, 1).manifest()]);
    h.settle().await;
    let stuck = AllocationEntry {
        uid: h
            .tenant("stuck-older")
            .unwrap()
            .metadata
            .uid
            .unwrap()
            .into(),
        ..entry("stuck-older", (1, 1, 1))
    };
    // Another actor writes a node whose allocations cannot be read, naming stuck-older's UID.
    h.apply(&[node("broken").capacity(8, 64, 1000).manifest()]);
    h.settle().await;
    h.apply(&[json!({
        "apiVersion": VERSION, "kind": "Node", "metadata": {"name": "broken"},
        "status": {"allocations": [stuck, entry("ghost", (-3, 1, 1))],
            "allocated": {"threads": 0, "memoryGb": 0, "storageGb": 0},
            "free": {"threads": 0, "memoryGb": 0, "storageGb": 0}, "tenants": 2},
    })]);
    next_second().await;
    h.delete_tenant("filler");
    h.apply(&[tenant("younger").resources(4, 1, 1).manifest()]);
    h.settle().await;
    assert_eq!(
        phase_and_node(&h, "younger"),
        (TenantPhase::Active, "n1".into()),
        "an undecidable older tenant must not keep the room"
    );
    let stuck = h.tenant("stuck-older").unwrap().status.unwrap();
    assert!(
        stuck.message.starts_with(
            "cannot be decided now, will retry: node broken cannot be read: status.allocations[1]"
        ),
        "{}",
        stuck.message
    );
    assert_eq!(stuck.conditions[0].reason, "Undecided");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_room_that_appeared_meanwhile_goes_to_the_oldest_waiting_tenant() {
    for queue in placement::QueueMode::ALL {
        // One reconcile at a time: after the restart each tenant is decided in a batch of its
        // own, in whatever order the controller schedules them.
        let one_at_a_time = Settings {
            concurrency: 1,
            ..with_queue(queue)
        };
        let h = Harness::start_on(
            ApiServer::new(),
            &[node("n1").capacity(8, 64, 1000).manifest()],
            one_at_a_time,
        )
        .await;
        h.apply(&[tenant("filler").resources(8, 1, 1).manifest()]);
        h.settle().await;
        h.apply(&[tenant("older").resources(6, 1, 1).manifest()]);
        next_second().await;
        let younger: Vec<String> = (0..5).map(|i| format!("younger-{i}")).collect();
        for name in &younger {
            h.apply(&[tenant(name).resources(2, 1, 1).manifest()]);
        }
        h.settle().await;
        h.fleet.stop();
        // Room appears while no controller runs: 6 threads, all the older one asks.
        h.apply(&[node_spec("n1", json!({"capacity": {"threads": 14}}))]);
        h.fleet.start(h.settings.clone());
        h.settle().await;
        assert_eq!(
            phase_and_node(&h, "older"),
            (TenantPhase::Active, "n1".into()),
            "{queue}: a younger tenant reconciled first took the room"
        );
        for name in &younger {
            assert_eq!(
                phase_and_node(&h, name).0,
                TenantPhase::PendingCapacity,
                "{queue}"
            );
        }
        h.assert_invariants();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_name_create_delete_churn_without_the_finalizer_never_places_a_released_tenant_again()
{
    let no_finalizer = Settings {
        finalizer: false,
        ..settings()
    };
    let h = Harness::start_on(
        ApiServer::new(),
        &[node("n1").capacity(64, 256, 8000).manifest()],
        no_finalizer,
    )
    .await;
    let handles = Handles::default();
    h.fleet.start_with(h.settings.clone(), handles.clone());
    // Slow writes: the engine is busy while a create and its delete queue up behind it, so the
    // settle and the release of one UID meet in one batch.
    h.fleet
        .api
        .set_cost_model(Some(inmem_apiserver::CostModel::per_write(
            Duration::from_millis(5),
            0,
        )));
    // Per UID, the node commits that added and removed its entry, in order.
    let history: Arc<Mutex<HashMap<String, Vec<&'static str>>>> = Arc::default();
    let seen = history.clone();
    h.fleet.api.on_commit(move |commit| {
        if commit.resource != "nodes" {
            return;
        }
        let uids = |v: Option<&Value>| -> HashSet<String> {
            v.and_then(|o| o["status"]["allocations"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .map(|a| a["uid"].as_str().unwrap_or_default().to_owned())
                .collect()
        };
        let (before, after) = (uids(commit.old), uids(Some(commit.object)));
        let mut seen = seen.lock().unwrap();
        for added in after.difference(&before) {
            seen.entry(added.clone()).or_default().push("added");
        }
        for removed in before.difference(&after) {
            seen.entry(removed.clone()).or_default().push("removed");
        }
    });
    for round in 0..40u64 {
        h.apply(&[tenant("churn").resources(2, 4, 20).manifest()]);
        tokio::time::sleep(Duration::from_millis(round % 4)).await;
        h.delete_tenant("churn");
    }
    h.fleet.api.set_cost_model(None);
    h.settle().await;
    let replaced: Vec<_> = history
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, steps)| steps.len() > 2)
        .map(|(uid, steps)| format!("{uid}: {steps:?}"))
        .collect();
    assert!(
        replaced.is_empty(),
        "placed again after its release: {replaced:?}"
    );
    assert_eq!(
        handles.metrics.orphans_released(),
        0,
        "routine churn is not an orphan"
    );
    assert_eq!(h.allocated_threads("n1"), 0);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_tenant_waiting_to_resize_keeps_its_reservation_and_asks_for_nothing() {
    let h = Harness::start(&[node("n1").capacity(10, 64, 1000).manifest()]).await;
    h.apply(&[
        tenant("r").resources(4, 1, 1).manifest(),
        tenant("filler").resources(6, 1, 1).manifest(),
    ]);
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
    h.apply(&[tenant("younger").resources(6, 1, 1).manifest()]);
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
