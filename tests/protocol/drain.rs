//! Draining and deleting nodes: tenants moved make-before-break, what cannot move stays and says
//! why, and a move interrupted at any step (a crash, a cancelled drain, a target gone Offline, a
//! tenant deleted or resized) ends exact.

use serde_json::{Value, json};
use tenant_placer::api::{DRAINED_CONDITION, GROUP, TenantPhase};
use tenant_placer::controller::EventLevel;

use crate::guards::{events_with_reason, phase};
use crate::*;

fn drain(name: &str) -> Value {
    node_spec(name, json!({"state": "Draining"}))
}

fn drained(h: &Harness, node: &str) -> (String, String, String) {
    let condition = h
        .node(node)
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == DRAINED_CONDITION)
        .unwrap();
    (condition.status, condition.reason, condition.message)
}

fn uid(h: &Harness, tenant: &str) -> String {
    h.tenant(tenant).unwrap().metadata.uid.unwrap()
}

/// A node status holding these (tenant, uid, threads) entries, each with 4 GB and 20 GB.
fn holding(node: &str, entries: &[(&str, &str, i64)]) -> Value {
    let allocations: Vec<Value> = entries
        .iter()
        .map(|(tenant, uid, threads)| {
            json!({"tenant": format!("default/{tenant}"), "uid": uid,
                   "resources": {"threads": threads, "memoryGb": 4, "storageGb": 20}})
        })
        .collect();
    json!({"apiVersion": VERSION, "kind": "Node", "metadata": {"name": node},
           "status": {"allocations": allocations}})
}

/// acme (2 threads) caught mid-move from node-eu-1 to node-eu-2 by a crash: both nodes hold it
/// and its status records the move. Returns the harness with the controller stopped.
async fn caught_mid_move() -> Harness {
    let h = Harness::start(&seed_nodes()).await;
    h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
    h.settle().await;
    h.fleet.stop();
    let acme = uid(&h, "acme");
    h.apply(&[
        drain("node-eu-1"),
        holding("node-eu-2", &[("acme", &acme, 2)]),
        json!({"apiVersion": VERSION, "kind": "Tenant",
               "metadata": {"name": "acme", "namespace": "default"},
               "status": {"phase": "Migrating", "nodeName": "node-eu-1",
                          "migration": {"from": "node-eu-1", "to": "node-eu-2"}}}),
    ]);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_a_node_moves_its_tenants_oldest_first_and_then_says_it_is_drained() {
    let h = Harness::start_on(
        ApiServer::new(),
        &seed_nodes(),
        Settings {
            max_migrations: 1,
            events: EventLevel::All,
            ..settings()
        },
    )
    .await;
    h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
    h.settle().await;
    h.apply(&[tenant("globex").resources(4, 8, 40).manifest()]);
    h.settle().await;
    assert_eq!(h.allocated_threads("node-eu-1"), 6);
    h.apply(&[drain("node-eu-1")]);
    h.settle().await;
    for name in ["acme", "globex"] {
        assert_eq!(phase(&h, name), (TenantPhase::Active, "node-eu-2".into()));
        assert_eq!(h.tenant(name).unwrap().status.unwrap().migration, None);
    }
    assert_eq!(h.allocated_threads("node-eu-1"), 0);
    assert_eq!(h.allocated_threads("node-eu-2"), 6);
    let (status, reason, message) = drained(&h, "node-eu-1");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Empty"),
        "{message}"
    );
    // One at a time (--max-migrations 1), the older first: each Migrating Event (the target
    // written) comes before the next.
    let moving: Vec<String> = events_with_reason(&h, "Migrating")
        .iter()
        .map(|e| e["regarding"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(moving, ["acme", "globex"]);
    assert_eq!(events_with_reason(&h, "Migrated").len(), 2);
    // A draining node takes no one new.
    h.apply(&[tenant("late").resources(2, 4, 20).manifest()]);
    h.settle().await;
    assert_eq!(phase(&h, "late"), (TenantPhase::Active, "node-eu-2".into()));
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_the_only_node_keeps_its_tenant_says_why_and_moves_it_when_room_appears() {
    let h = Harness::start(&[node("solo").capacity(8, 32, 100).manifest()]).await;
    h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
    h.settle().await;
    h.apply(&[drain("solo")]);
    h.settle().await;
    let status = h.tenant("acme").unwrap().status.unwrap();
    assert_eq!(
        (status.phase, status.node_name.as_str()),
        (TenantPhase::Active, "solo")
    );
    assert_eq!(status.conditions[0].reason, "MigrationBlocked");
    assert!(
        status.message.contains("solo, which is draining")
            && status.message.contains("no other node can take it"),
        "{}",
        status.message
    );
    assert_eq!(events_with_reason(&h, "MigrationBlocked").len(), 1);
    let (drained_status, reason, message) = drained(&h, "solo");
    assert_eq!(
        (drained_status.as_str(), reason.as_str()),
        ("False", "TenantsRemain")
    );
    assert!(message.contains("default/acme"), "{message}");
    h.assert_invariants();
    // Room appears: the same wake-up path as a waiting tenant.
    h.apply(&[node("spare").capacity(8, 32, 100).manifest()]);
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "spare".into()));
    assert_eq!(drained(&h, "solo").1, "Empty");
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_node_holding_reservations_moves_its_tenants_and_then_goes() {
    let h = Harness::start(&seed_nodes()).await;
    h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
    h.settle().await;
    h.fleet
        .api
        .delete(GROUP, "nodes", None, "node-eu-1")
        .unwrap();
    h.settle().await;
    assert!(
        h.fleet
            .nodes()
            .iter()
            .all(|n| n.metadata.name.as_deref() != Some("node-eu-1")),
        "emptied, it goes"
    );
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-2".into()));
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_caught_by_a_crash_after_its_status_recorded_it_is_finished() {
    let h = caught_mid_move().await;
    h.fleet.start(h.settings.clone());
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-2".into()));
    assert_eq!(h.allocated_threads("node-eu-1"), 0);
    assert_eq!(h.allocated_threads("node-eu-2"), 2);
    assert_eq!(h.tenant("acme").unwrap().status.unwrap().migration, None);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_cancelled_mid_move_keeps_the_tenant_on_its_node_and_releases_the_target() {
    let h = caught_mid_move().await;
    h.apply(&[node_spec("node-eu-1", json!({"state": "Online"}))]);
    h.fleet.start(h.settings.clone());
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-1".into()));
    assert_eq!(h.allocated_threads("node-eu-1"), 2);
    assert_eq!(h.allocated_threads("node-eu-2"), 0);
    assert_eq!(h.tenant("acme").unwrap().status.unwrap().migration, None);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_gone_offline_mid_move_is_given_up_and_the_tenant_waits_on_its_draining_node() {
    let h = caught_mid_move().await;
    h.apply(&[node_spec("node-eu-2", json!({"state": "Offline"}))]);
    h.fleet.start(h.settings.clone());
    h.settle().await;
    let status = h.tenant("acme").unwrap().status.unwrap();
    assert_eq!(
        (status.phase, status.node_name.as_str()),
        (TenantPhase::Active, "node-eu-1")
    );
    assert_eq!(status.conditions[0].reason, "MigrationBlocked");
    assert_eq!(
        h.allocated_threads("node-eu-2"),
        0,
        "the target entry is released"
    );
    // The target comes back: the move is made again.
    h.apply(&[node_spec("node-eu-2", json!({"state": "Online"}))]);
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-2".into()));
    assert_eq!(h.allocated_threads("node-eu-1"), 0);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_deleted_mid_move_releases_both_entries() {
    let h = caught_mid_move().await;
    h.fleet.start(h.settings.clone());
    h.delete_tenant("acme");
    h.settle().await;
    assert!(h.tenant("acme").is_none());
    assert_eq!(h.allocated_threads("node-eu-1"), 0);
    assert_eq!(h.allocated_threads("node-eu-2"), 0);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_resized_mid_move_finishes_the_move_then_grows_on_its_new_node() {
    let h = caught_mid_move().await;
    h.apply(&[tenant_spec(
        "acme",
        json!({"resources": {"threads": 3, "memoryGb": 4, "storageGb": 20}}),
    )]);
    h.fleet.start(h.settings.clone());
    h.settle().await;
    assert_eq!(phase(&h, "acme"), (TenantPhase::Active, "node-eu-2".into()));
    assert_eq!(h.allocated_threads("node-eu-1"), 0);
    assert_eq!(h.allocated_threads("node-eu-2"), 3);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_controllers_racing_a_drain_move_every_tenant_once_and_never_over_commit() {
    // 30 tenants of 2 threads on n1 (64); n2 (40) and n3 (24) can take them all, but not twice.
    let h = Harness::start(&[
        node("n1").capacity(64, 256, 8000).manifest(),
        node("n2").capacity(40, 256, 8000).manifest(),
        node("n3").capacity(24, 256, 8000).manifest(),
    ])
    .await;
    let crowd: Vec<Value> = (0..30)
        .map(|i| tenant(&format!("t{i:02}")).resources(2, 4, 20).manifest())
        .collect();
    h.apply(&[
        node_spec("n2", json!({"state": "Cordoned"})),
        node_spec("n3", json!({"state": "Cordoned"})),
    ]);
    h.apply(&crowd);
    h.settle().await;
    assert_eq!(h.allocated_threads("n1"), 60);
    let other = tokio::spawn(tenant_placer::controller::run(
        h.fleet.client.clone(),
        settings(),
    ));
    h.apply(&[
        node_spec("n2", json!({"state": "Online"})),
        node_spec("n3", json!({"state": "Online"})),
        drain("n1"),
    ]);
    h.settle().await;
    other.abort();
    assert_eq!(h.allocated_threads("n1"), 0);
    assert_eq!(h.allocated_threads("n2") + h.allocated_threads("n3"), 60);
    for t in h.fleet.tenants() {
        let status = t.status.unwrap();
        assert_eq!(
            (status.phase, status.migration),
            (TenantPhase::Active, None)
        );
        assert!(["n2", "n3"].contains(&status.node_name.as_str()));
    }
    // Every committed Node write was checked: none over-committed (assert_invariants reports
    // the write checks too).
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_status_another_controller_wrote_is_decided_here_too() {
    let h = Harness::start(&[node("x").capacity(8, 8, 8).manifest()]).await;
    h.apply(&[tenant("t").resources(2, 1, 1).manifest()]);
    h.settle().await;
    assert_eq!(phase(&h, "t"), (TenantPhase::Active, "x".into()));
    // Another controller (two at once, without leader election) found `t` blocked on a
    // draining node and wrote so: only the status changes, which this controller does not
    // decide from. Nothing here would wake `t` when room appears unless it decides it too.
    let mut stored = h
        .fleet
        .api
        .get(GROUP, "tenants", Some("default"), "t")
        .unwrap();
    stored["status"]["conditions"][0]["reason"] = json!("MigrationBlocked");
    stored["status"]["message"] = json!("written by another controller");
    h.fleet.api.apply(stored).unwrap();
    let reason = |h: &Harness| {
        h.tenant("t")
            .and_then(|t| t.placed_reason())
            .map(|r| format!("{r:?}"))
    };
    assert_eq!(reason(&h).as_deref(), Some("MigrationBlocked"));
    h.until("t decided here: at rest on its Online node", || {
        reason(&h).as_deref() == Some("Reserved")
    })
    .await;
    h.assert_invariants();
}

/// A tenant waiting to grow on its node, then blocked on it as it drains, waits for room for
/// what it holds there, not for the footprint its spec asks: room for that is enough to move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_move_that_also_waited_to_grow_is_woken_by_room_for_what_it_holds() {
    let h = Harness::start(&[
        node("x").capacity(10, 64, 1000).manifest(),
        node("y").capacity(4, 64, 1000).manifest(),
    ])
    .await;
    h.apply(&[tenant("t").resources(6, 1, 1).manifest()]);
    h.until("t on x", || {
        h.tenant("t")
            .and_then(|t| t.status)
            .is_some_and(|s| s.node_name == "x" && s.phase == TenantPhase::Active)
    })
    .await;
    // Grows past x: Resizing there (the status this reconcile begins from next).
    h.apply(&[tenant_spec(
        "t",
        json!({"resources": {"threads": 12, "memoryGb": 1, "storageGb": 1}}),
    )]);
    h.until("t waits to grow", || {
        phase(&h, "t").0 == TenantPhase::Resizing
    })
    .await;
    h.settle().await;
    // x drains: y has 4, t holds 6: blocked.
    h.apply(&[drain("x")]);
    h.until("t blocked", || {
        h.tenant("t").is_some_and(|t| {
            t.placed_reason() == Some(tenant_placer::api::PlacedReason::MigrationBlocked)
        })
    })
    .await;
    h.settle().await;
    // Room on y for the 6 it holds (not for 12): it moves.
    h.apply(&[node_spec("y", json!({"capacity": {"threads": 8}}))]);
    wait_until_or(
        "t moved to y",
        || h.allocated_threads("x") == 0 && h.allocated_threads("y") == 6,
        || format!("{:?}", h.tenant("t").and_then(|t| t.status)),
    )
    .await;
    h.settle().await;
    h.assert_invariants();
}
