//! Other actors: objects the types cannot hold, wiped statuses, deleted and re-created nodes.
//! Each ends with every reservation exact and explained, and placement going on.

use kube::CustomResourceExt;
use serde_json::{Value, json};
use tenant_placer::api::{
    DRAINED_CONDITION, GROUP, NODE_FINALIZER, Tenant, TenantMode, TenantPhase,
};

use super::*;

/// The Tenant CRD as an older release shipped it: no bounds on replicas, no int32 format (what
/// an API server before 1.36 let in too).
pub fn tenant_crd_without_replica_bounds() -> Value {
    let mut crd = serde_json::to_value(Tenant::crd()).unwrap();
    let replicas = crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/replicas")
        .unwrap()
        .as_object_mut()
        .unwrap();
    replicas.remove("maximum");
    replicas.remove("format");
    crd
}

pub fn events_with_reason(h: &Harness, reason: &str) -> Vec<Value> {
    h.fleet
        .api
        .list("events.k8s.io", "events")
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

pub fn phase(h: &Harness, name: &str) -> (TenantPhase, String) {
    let status = h.tenant(name).unwrap().status.unwrap();
    (status.phase, status.node_name)
}

pub fn wipe_allocations(h: &Harness, node: &str) {
    h.apply(&[json!({
        "apiVersion": VERSION, "kind": "Node", "metadata": {"name": node},
        "status": {"allocations": [], "allocated": {"threads": 0, "memoryGb": 0, "storageGb": 0},
                   "free": {"threads": 0, "memoryGb": 0, "storageGb": 0}, "tenants": 0},
    })]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_the_types_cannot_hold_is_skipped_and_reported_and_placement_goes_on_after_a_restart()
 {
    let h = Harness::start(&seed_nodes()).await;
    h.fleet
        .api
        .install_crd(tenant_crd_without_replica_bounds())
        .unwrap();
    let mut poisoned = tenant("poisoned").mode(TenantMode::Cluster).manifest();
    // Past int32: the types cannot hold it (the older schema lets it in).
    poisoned["spec"]["replicas"] = json!(2_147_483_648_i64);
    h.apply(&[poisoned, tenant("acme").resources(2, 4, 20).manifest()]);
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-1".into()));

    // The schema is fixed, and the controller restarts: its first list holds the poisoned tenant.
    h.fleet
        .api
        .install_crd(serde_json::to_value(Tenant::crd()).unwrap())
        .unwrap();
    h.fleet.stop();
    h.fleet.start(h.settings.clone());
    h.apply(&[tenant("after-restart").resources(4, 4, 4).manifest()]);
    h.settle().await;
    assert_eq!(
        phase(&h, "after-restart"),
        (TenantPhase::Active, "node-eu-1".into()),
        "placement goes on"
    );
    assert_eq!(h.allocated_threads("node-eu-1"), 6);
    // Reported once per version, on the object, naming the field.
    let reported = events_with_reason(&h, "Undecodable");
    assert!(!reported.is_empty(), "an Event on the poisoned tenant");
    assert!(
        reported.iter().all(|e| e["regarding"]["name"] == "poisoned"
            && e["note"].as_str().unwrap().contains("spec.replicas")),
        "{reported:#?}"
    );
    assert!(h.fleet.undecodable()[0].starts_with("Tenant default/poisoned: spec.replicas: "));
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_allocations_are_written_back_where_they_still_fit() {
    let h = Harness::start(&seed_nodes()).await;
    h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
    h.settle().await;
    wipe_allocations(&h, "node-eu-1");
    h.settle().await;
    assert_eq!(h.allocated_threads("node-eu-1"), 2, "acme's entry is back");
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-1".into()));
    assert_eq!(events_with_reason(&h, "ReservationRestored").len(), 1);
    // Placed once, restored once: a restore is not a placement.
    let metrics = &h.handles.metrics;
    assert_eq!(
        metrics.placements_and_reservation_events("restored"),
        (1, 1)
    );
    assert_eq!(metrics.placements_and_reservation_events("lost"), (1, 0));
    // The trap the wipe set: a 64-thread tenant finds 62 threads free there, not 64.
    h.apply(&[tenant("wide").resources(64, 4, 4).manifest()]);
    h.settle().await;
    assert_eq!(phase(&h, "wide").0, TenantPhase::PendingCapacity);
    h.assert_invariants();
}

/// A status recording a move whose target holds nothing (a move rolled back whose status write
/// came late, or someone else's write): the controller notices (the claim is not backed) and
/// the tenant rests where it holds, its record dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_recording_a_move_the_target_does_not_hold_is_put_right() {
    let h = Harness::start(&seed_nodes()).await;
    h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-1".into()));
    h.apply(&[json!({
        "apiVersion": VERSION, "kind": "Tenant",
        "metadata": {"name": "acme", "namespace": "default"},
        "status": {"phase": "Migrating", "nodeName": "node-eu-1", "observedGeneration": 1,
                   "reserved": {"threads": 2, "memoryGb": 4, "storageGb": 20},
                   "migration": {"from": "node-eu-1", "to": "node-eu-2"},
                   "message": "moving from node-eu-1 to node-eu-2"},
    })]);
    h.until("acme rests on node-eu-1 again", || {
        h.tenant("acme")
            .and_then(|t| t.status)
            .is_some_and(|s| s.phase == TenantPhase::Active && s.migration.is_none())
    })
    .await;
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-1".into()));
    assert_eq!(h.allocated_threads("node-eu-1"), 2);
    assert_eq!(h.allocated_threads("node-eu-2"), 0, "nothing moved");
    h.assert_invariants();
}

/// An entry on a node of a tenant whose status names no node (a placement whose status was
/// never written, or an entry someone else wrote): the tenant is woken and its status takes
/// the entry as its reservation (a suspended tenant keeps what it holds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_of_a_tenant_whose_status_names_no_node_is_settled_by_the_tenant() {
    let h = Harness::start(&seed_nodes()).await;
    h.apply(&[tenant("sleepy").resources(2, 4, 20).suspended().manifest()]);
    h.settle().await;
    assert_eq!(phase(&h, "sleepy"), (TenantPhase::Suspended, String::new()));
    let uid = h.tenant("sleepy").unwrap().metadata.uid.unwrap();
    h.apply(&[json!({
        "apiVersion": VERSION, "kind": "Node", "metadata": {"name": "node-eu-1"},
        "status": {"allocations": [{"tenant": "default/sleepy", "uid": uid,
                                    "resources": {"threads": 2, "memoryGb": 4, "storageGb": 20}}]},
    })]);
    h.until("the entry is seen", || {
        h.allocated_threads("node-eu-1") == 2
    })
    .await;
    h.until("sleepy's status names the node holding it", || {
        phase(&h, "sleepy").1 == "node-eu-1"
    })
    .await;
    h.settle().await;
    assert_eq!(
        phase(&h, "sleepy"),
        (TenantPhase::Suspended, "node-eu-1".into())
    );
    assert_eq!(h.allocated_threads("node-eu-1"), 2);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reservation_that_no_longer_fits_leaves_active_says_so_and_is_placed_again() {
    let h = Harness::start(&seed_nodes()).await;
    h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
    h.settle().await;
    // While no controller runs: acme's entry is wiped, node-eu-1 shrinks below it, node-eu-2
    // goes Offline. Nowhere can take it.
    h.fleet.stop();
    wipe_allocations(&h, "node-eu-1");
    h.apply(&[
        node_spec(
            "node-eu-1",
            json!({"capacity": {"threads": 1, "memoryGb": 256, "storageGb": 8000}}),
        ),
        node_spec("node-eu-2", json!({"state": "Offline"})),
    ]);
    h.fleet.start(h.settings.clone());
    h.settle().await;
    let status = h.tenant("acme").unwrap().status.unwrap();
    assert_eq!(
        (status.phase, status.node_name.as_str()),
        (TenantPhase::PendingCapacity, "")
    );
    assert!(
        status
            .message
            .starts_with("its reservation on node-eu-1 was lost (the node no longer held it)"),
        "{}",
        status.message
    );
    assert_eq!(status.conditions[0].reason, "ReservationLost");
    assert_eq!(events_with_reason(&h, "ReservationLost").len(), 1);
    h.assert_invariants();
    // Room appears: it is placed like any waiting tenant.
    h.apply(&[node_spec("node-eu-2", json!({"state": "Online"}))]);
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-2".into()));
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_holding_reservations_is_not_deleted_until_its_tenants_go() {
    // node-eu-2 is too small for acme: deleting node-eu-1 cannot move it (see drain.rs for
    // deletes that can).
    let h = Harness::start(&[
        node("node-eu-1").capacity(64, 256, 8000).manifest(),
        node("node-eu-2").capacity(2, 8, 100).manifest(),
    ])
    .await;
    h.apply(&[tenant("acme").resources(4, 4, 20).manifest()]);
    h.settle().await;
    assert_eq!(
        h.node("node-eu-1").metadata.finalizers,
        Some(vec![NODE_FINALIZER.to_owned()])
    );
    assert_eq!(
        h.node("node-eu-2").metadata.finalizers,
        None,
        "holds nothing"
    );
    h.fleet
        .api
        .delete(GROUP, "nodes", None, "node-eu-1")
        .unwrap();
    h.settle().await;
    let waiting = h.node("node-eu-1");
    assert!(waiting.metadata.deletion_timestamp.is_some());
    let drained = waiting
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == DRAINED_CONDITION)
        .unwrap();
    assert_eq!(
        (drained.status.as_str(), drained.reason.as_str()),
        ("False", "TenantsRemain")
    );
    assert!(
        drained.message.contains("default/acme"),
        "{}",
        drained.message
    );
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-1".into()));
    // A node being deleted takes no one new.
    h.apply(&[tenant("late").resources(1, 4, 20).manifest()]);
    h.settle().await;
    assert_eq!(phase(&h, "late"), (TenantPhase::Active, "node-eu-2".into()));
    h.delete_tenant("acme");
    h.settle().await;
    assert!(
        h.fleet
            .nodes()
            .iter()
            .all(|n| n.metadata.name.as_deref() != Some("node-eu-1")),
        "empty, it goes"
    );
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deleted_from_under_its_tenants_and_re_created_gets_their_entries_back() {
    let h = Harness::start(&seed_nodes()).await;
    h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
    h.settle().await;
    // Another actor strips the finalizer and deletes the node; it comes back empty.
    h.fleet.stop();
    h.apply(&[json!({"apiVersion": VERSION, "kind": "Node", "metadata": {"name": "node-eu-1", "finalizers": []}})]);
    h.fleet
        .api
        .delete(GROUP, "nodes", None, "node-eu-1")
        .unwrap();
    h.apply(&[node("node-eu-1").capacity(64, 256, 8000).manifest()]);
    h.fleet.start(h.settings.clone());
    h.settle().await;
    assert_eq!(h.allocated_threads("node-eu-1"), 2);
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-1".into()));
    assert_eq!(events_with_reason(&h, "ReservationRestored").len(), 1);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deleted_while_the_controller_runs_has_its_tenants_placed_again_elsewhere() {
    let h = Harness::start(&seed_nodes()).await;
    h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
    h.settle().await;
    h.apply(&[json!({"apiVersion": VERSION, "kind": "Node", "metadata": {"name": "node-eu-1", "finalizers": []}})]);
    h.fleet
        .api
        .delete(GROUP, "nodes", None, "node-eu-1")
        .unwrap();
    h.settle().await;
    let status = h.tenant("acme").unwrap().status.unwrap();
    assert_eq!(
        (status.phase, status.node_name.as_str()),
        (TenantPhase::Active, "node-eu-2")
    );
    // The loss is told where it lasts: a Warning Event naming the node. (The status said so
    // when the tenant was placed again; a later reconcile of a tenant at rest on node-eu-2 may
    // rewrite its message.)
    let lost = events_with_reason(&h, "ReservationLost");
    assert!(!lost.is_empty(), "no ReservationLost Event");
    let note = lost[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("its reservation on node-eu-1 was lost"),
        "{note}"
    );
    assert_eq!(h.allocated_threads("node-eu-2"), 2);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_charts_admission_policies_the_controller_spends_no_write_on_finalizers() {
    let h = Harness::start(&[]).await;
    h.fleet.admit_finalizers(true);
    h.fleet.api.reset_stats();
    h.apply(&seed_nodes());
    h.apply(&[
        tenant("acme").resources(2, 4, 20).manifest(),
        tenant("beta").resources(2, 4, 20).manifest(),
    ]);
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-1".into()));
    let stats = h.fleet.api.stats();
    let metadata_patches: Vec<_> = stats
        .requests
        .iter()
        .filter(|(k, _)| k.verb == inmem_apiserver::Verb::Patch && k.subresource.is_none())
        .collect();
    assert!(metadata_patches.is_empty(), "{metadata_patches:?}");
    assert_eq!(
        h.tenant("acme").unwrap().metadata.finalizers,
        Some(vec![tenant_placer::api::TENANT_FINALIZER.to_owned()])
    );
    assert_eq!(
        h.node("node-eu-1").metadata.finalizers,
        Some(vec![NODE_FINALIZER.to_owned()])
    );
    // Deleting still releases first and lets the object go second.
    h.delete_tenant("acme");
    h.settle().await;
    assert!(h.tenant("acme").is_none());
    assert_eq!(h.allocated_threads("node-eu-1"), 2, "beta's 2 remain");
    h.assert_invariants();
}
