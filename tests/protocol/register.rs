//! Nodes registered from the cluster (`--register-nodes`): core `v1` Nodes, written here as a
//! kubelet and a person would (created with their status, cordoned, NotReady, resized, relabelled,
//! deleted), become placement Nodes the controller places on, drains and deletes; a placement
//! Node it did not make is never touched, and a restart writes nothing twice.

use std::future::Future;
use std::time::Duration;

use inmem_apiserver::{Fault, Verb};
use kube::ResourceExt;
use serde_json::{Value, json};
use tenant_placer::api::{GROUP, NodeState, REGISTERED_LABEL, TenantPhase};
use tenant_placer::testing::{CoreNodeBuilder, core_node};

use crate::guards::events_with_reason;
use crate::*;

/// The label the registration selects core Nodes by, in these tests.
const POOL: (&str, &str) = ("tenant-placer.dev/pool", "metal");

/// Settings that register the core Nodes labelled [`POOL`], looking again often.
fn registering() -> Settings {
    Settings {
        register_nodes: Some(format!("{}={}", POOL.0, POOL.1).parse().unwrap()),
        register_resync: Duration::from_millis(200),
        ..settings()
    }
}

/// A labelled core Node as a kubelet reports it: Ready, 64 cores, 256Gi, 8000Gi.
fn metal(name: &str) -> CoreNodeBuilder {
    core_node(name).label(POOL.0, POOL.1)
}

/// Fails the test when `body` takes longer than two minutes (every wait inside has its own
/// deadline too).
async fn within<T>(body: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(120), body)
        .await
        .expect("the scenario did not finish within two minutes")
}

/// A fleet registering [`POOL`], no placement Node made by hand.
async fn registering_fleet(cores: &[CoreNodeBuilder]) -> Harness {
    let h = Harness::start_on(ApiServer::new(), &[], registering()).await;
    set_core(&h, cores);
    h
}

/// Writes core Nodes whole (labels, spec and status), as their kubelet and `kubectl` leave them.
fn set_core(h: &Harness, cores: &[CoreNodeBuilder]) {
    for core in cores {
        let mut manifest = core.clone().manifest();
        // NB: a merge: a spec without `unschedulable` would keep a cordon; write it out.
        let cordoned = manifest["spec"]["unschedulable"].as_bool().unwrap_or(false);
        manifest["spec"]["unschedulable"] = json!(cordoned);
        h.apply(&[manifest]);
    }
}

fn delete_core(h: &Harness, name: &str) {
    h.fleet.api.delete("", "nodes", None, name).unwrap();
}

/// The placement Node `name`, if there is one.
fn placement(h: &Harness, name: &str) -> Option<tenant_placer::api::Node> {
    h.fleet.nodes().into_iter().find(|n| n.name_any() == name)
}

/// The registered placement Node `name`'s state and capacity, once it is there.
fn registered(h: &Harness, name: &str) -> Option<(NodeState, (i64, i64, i64))> {
    let node = placement(h, name).filter(|n| n.is_registered())?;
    let c = node.spec.capacity;
    Some((node.spec.state, (c.threads, c.memory_gb, c.storage_gb)))
}

fn placed(h: &Harness, name: &str) -> Option<(TenantPhase, String)> {
    let status = h.tenant(name)?.status?;
    Some((status.phase, status.node_name))
}

/// Creates of placement Nodes (and of nothing else: core Nodes are written directly here, not
/// through HTTP, so they are not counted).
fn node_creates(h: &Harness) -> u64 {
    h.fleet.api.stats().count(Verb::Create, "nodes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_core_node_becomes_an_online_placement_node_with_its_capacity_and_takes_a_tenant()
 {
    within(async {
        let h = registering_fleet(&[metal("metal-1")
            .label("topology.kubernetes.io/zone", "eu-1a")
            .allocatable("31500m", "128Gi", "4000Gi")])
        .await;
        // 31500m -> 31 threads; 128Gi, 4000Gi -> 128, 4000 GB.
        h.until("metal-1 registered", || {
            registered(&h, "metal-1") == Some((NodeState::Online, (31, 128, 4000)))
        })
        .await;
        let node = placement(&h, "metal-1").unwrap();
        let labels = node.labels();
        assert_eq!(labels[REGISTERED_LABEL], "true");
        assert_eq!(labels[POOL.0], POOL.1);
        assert_eq!(labels["topology.kubernetes.io/zone"], "eu-1a");
        assert_eq!(node.spec.overcommit, None);
        // A tenant selecting the core Node's labels is placed there.
        h.apply(&[tenant("acme")
            .resources(2, 4, 20)
            .node_selector(&[("topology.kubernetes.io/zone", "eu-1a")])
            .manifest()]);
        h.until("acme placed on metal-1", || {
            placed(&h, "acme") == Some((TenantPhase::Active, "metal-1".into()))
        })
        .await;
        h.settle().await;
        assert_eq!(h.allocated_threads("metal-1"), 2);
        assert_eq!(node_creates(&h), 1);
        h.assert_invariants();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordoning_the_core_node_cordons_its_placement_node_which_takes_no_new_tenant() {
    within(async {
        let h = registering_fleet(&[metal("metal-1")]).await;
        h.until("metal-1 Online", || {
            registered(&h, "metal-1").is_some_and(|r| r.0 == NodeState::Online)
        })
        .await;
        h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
        h.until("acme placed", || {
            placed(&h, "acme") == Some((TenantPhase::Active, "metal-1".into()))
        })
        .await;
        set_core(&h, &[metal("metal-1").cordoned()]);
        h.until("metal-1 Cordoned", || {
            registered(&h, "metal-1").is_some_and(|r| r.0 == NodeState::Cordoned)
        })
        .await;
        // A cordoned node keeps its tenant and takes no new one.
        h.apply(&[tenant("late").resources(2, 4, 20).manifest()]);
        h.until("late waits", || {
            placed(&h, "late").is_some_and(|p| p.0 == TenantPhase::PendingCapacity)
        })
        .await;
        assert_eq!(
            placed(&h, "acme"),
            Some((TenantPhase::Active, "metal-1".into()))
        );
        // Uncordoned: Online again, and the waiting tenant is placed.
        set_core(&h, &[metal("metal-1")]);
        h.until("late placed on metal-1", || {
            placed(&h, "late") == Some((TenantPhase::Active, "metal-1".into()))
        })
        .await;
        h.settle().await;
        assert_eq!(
            registered(&h, "metal-1").map(|r| r.0),
            Some(NodeState::Online)
        );
        h.assert_invariants();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_node_that_is_not_ready_makes_its_placement_node_offline_and_keeps_its_tenants() {
    within(async {
        let h = registering_fleet(&[metal("metal-1")]).await;
        h.until("metal-1 Online", || {
            registered(&h, "metal-1").is_some_and(|r| r.0 == NodeState::Online)
        })
        .await;
        h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
        h.until("acme placed", || {
            placed(&h, "acme") == Some((TenantPhase::Active, "metal-1".into()))
        })
        .await;
        set_core(&h, &[metal("metal-1").ready("False")]);
        h.until("metal-1 Offline", || {
            registered(&h, "metal-1").is_some_and(|r| r.0 == NodeState::Offline)
        })
        .await;
        // NotReady wins over a cordon.
        set_core(&h, &[metal("metal-1").ready("Unknown").cordoned()]);
        h.apply(&[tenant("late").resources(2, 4, 20).manifest()]);
        h.until("late waits", || {
            placed(&h, "late").is_some_and(|p| p.0 == TenantPhase::PendingCapacity)
        })
        .await;
        h.settle().await;
        assert_eq!(
            registered(&h, "metal-1").map(|r| r.0),
            Some(NodeState::Offline)
        );
        assert_eq!(
            placed(&h, "acme"),
            Some((TenantPhase::Active, "metal-1".into())),
            "an Offline node keeps its tenants"
        );
        assert_eq!(h.allocated_threads("metal-1"), 2);
        h.assert_invariants();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_the_allocatable_lowers_the_capacity_and_keeps_the_overcommit_set_by_hand() {
    within(async {
        let h = registering_fleet(&[metal("metal-1")]).await;
        h.until("metal-1 registered", || {
            registered(&h, "metal-1") == Some((NodeState::Online, (64, 256, 8000)))
        })
        .await;
        h.apply(&[tenant("acme").resources(8, 16, 100).manifest()]);
        h.until("acme placed", || {
            placed(&h, "acme") == Some((TenantPhase::Active, "metal-1".into()))
        })
        .await;
        // A person sets overcommit on the placement Node: not the registration's to undo.
        h.apply(&[node_spec(
            "metal-1",
            json!({"overcommit": {"threads": 2.0, "memoryGb": 1.0, "storageGb": 1.0}}),
        )]);
        // The kubelet reserves more for the system: 32 cores, 128Gi, 4000Gi allocatable.
        set_core(&h, &[metal("metal-1").allocatable("32", "128Gi", "4000Gi")]);
        h.until("the capacity follows", || {
            registered(&h, "metal-1") == Some((NodeState::Online, (32, 128, 4000)))
        })
        .await;
        h.settle().await;
        let node = h.node("metal-1");
        assert_eq!(node.spec.overcommit.map(|o| o.threads), Some(2.0));
        // 128 GB - 16 held = 112 GB memory free.
        assert_eq!(node.status.unwrap().free.memory_gb, 112);
        assert_eq!(
            placed(&h, "acme"),
            Some((TenantPhase::Active, "metal-1".into()))
        );
        h.assert_invariants();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_core_node_drains_its_placement_node_which_goes_once_its_tenant_moved_or_waits() {
    within(async {
        let h = registering_fleet(&[metal("metal-1"), metal("metal-2")]).await;
        h.until("both registered", || {
            registered(&h, "metal-1").is_some() && registered(&h, "metal-2").is_some()
        })
        .await;
        h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
        h.until("acme placed on metal-1 (first fit)", || {
            placed(&h, "acme") == Some((TenantPhase::Active, "metal-1".into()))
        })
        .await;
        // metal-1 leaves the cluster: its placement Node is drained, then goes.
        delete_core(&h, "metal-1");
        h.until("acme moved to metal-2 and metal-1 gone", || {
            placed(&h, "acme") == Some((TenantPhase::Active, "metal-2".into()))
                && placement(&h, "metal-1").is_none()
        })
        .await;
        // metal-2 leaves too: acme fits nowhere else, so it stays, and metal-2 waits for it.
        delete_core(&h, "metal-2");
        h.until("metal-2 being deleted", || {
            placement(&h, "metal-2").is_some_and(|n| n.metadata.deletion_timestamp.is_some())
        })
        .await;
        h.settle().await;
        assert_eq!(
            placed(&h, "acme").map(|p| p.1),
            Some("metal-2".into()),
            "no other node: acme keeps its reservation"
        );
        let drained = h
            .node("metal-2")
            .status
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Drained")
            .unwrap();
        assert_eq!(drained.status, "False", "{drained:?}");
        // A new machine joins: acme moves there, and metal-2 goes.
        set_core(&h, &[metal("metal-3")]);
        h.until("acme on metal-3 and metal-2 gone", || {
            placed(&h, "acme") == Some((TenantPhase::Active, "metal-3".into()))
                && placement(&h, "metal-2").is_none()
        })
        .await;
        h.settle().await;
        h.assert_invariants();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlabelled_core_node_is_ignored_until_labelled_and_unregistered_when_unlabelled() {
    within(async {
        let h = registering_fleet(&[core_node("plain"), metal("metal-1")]).await;
        h.until("metal-1 registered", || registered(&h, "metal-1").is_some())
            .await;
        h.settle().await;
        assert!(placement(&h, "plain").is_none());
        assert_eq!(node_creates(&h), 1);
        // Labelled: registered.
        set_core(&h, &[metal("plain")]);
        h.until("plain registered", || registered(&h, "plain").is_some())
            .await;
        // The label removed (`kubectl label node plain tenant-placer.dev/pool-`): unregistered,
        // as if it were deleted.
        h.apply(&[
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "plain",
            "labels": {POOL.0: Value::Null}}}),
        ]);
        h.until("plain's placement Node gone", || {
            placement(&h, "plain").is_none()
        })
        .await;
        h.settle().await;
        assert!(registered(&h, "metal-1").is_some());
        h.assert_invariants();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_node_of_the_same_name_made_by_hand_is_left_untouched_and_reported_once() {
    within(async {
        let h = Harness::start_on(
            ApiServer::new(),
            &[node("metal-1")
                .capacity(8, 8, 8)
                .label("rack", "r7")
                .manifest()],
            registering(),
        )
        .await;
        let before = h.node("metal-1");
        set_core(&h, &[metal("metal-1")]);
        h.until("the clash reported", || {
            !events_with_reason(&h, "RegistrationClash").is_empty()
        })
        .await;
        // Another change of the core Node, and rounds after it: reported once.
        set_core(&h, &[metal("metal-1").label("zone", "a")]);
        let metrics = h.handles.metrics.clone();
        let rounds = metrics.register_rounds_done();
        h.until("three more rounds", || {
            metrics.register_rounds_done() >= rounds + 3
        })
        .await;
        h.settle().await;
        let clashes = events_with_reason(&h, "RegistrationClash");
        assert_eq!(clashes.len(), 1, "{clashes:#?}");
        assert_eq!(clashes[0]["type"], "Warning");
        assert_eq!(clashes[0]["regarding"]["kind"], "Node");
        assert_eq!(clashes[0]["regarding"]["apiVersion"], "v1");
        assert_eq!(clashes[0]["regarding"]["name"], "metal-1");
        assert_eq!(metrics.register_problems("clash"), 1);
        let after = h.node("metal-1");
        assert_eq!(after.metadata.uid, before.metadata.uid);
        assert_eq!(after.spec, before.spec);
        assert_eq!(after.metadata.labels, before.metadata.labels);
        assert_eq!(node_creates(&h), 0, "no create tried");
        // Deleted by its owner: the core Node's own is registered in its place.
        h.fleet.api.delete(GROUP, "nodes", None, "metal-1").unwrap();
        h.until("metal-1 registered", || {
            registered(&h, "metal-1") == Some((NodeState::Online, (64, 256, 8000)))
        })
        .await;
        h.settle().await;
        h.assert_invariants();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_of_the_controller_creates_nothing_twice() {
    within(async {
        let h = registering_fleet(&[metal("metal-1"), metal("metal-2").cordoned()]).await;
        h.until("both registered", || {
            registered(&h, "metal-1").is_some()
                && registered(&h, "metal-2").is_some_and(|r| r.0 == NodeState::Cordoned)
        })
        .await;
        h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
        h.until("acme placed", || {
            placed(&h, "acme") == Some((TenantPhase::Active, "metal-1".into()))
        })
        .await;
        h.settle().await;
        let uids: Vec<_> = ["metal-1", "metal-2"]
            .map(|n| h.node(n).metadata.uid)
            .to_vec();
        let (creates, deletes) = (
            node_creates(&h),
            h.fleet.api.stats().count(Verb::Delete, "nodes"),
        );
        assert_eq!((creates, deletes), (2, 0));
        let placements = h.placements();
        // A new controller (a restart, or a new leader) with nothing in memory.
        let handles = Handles::default();
        h.fleet.start_with(h.settings.clone(), handles.clone());
        let metrics = handles.metrics.clone();
        h.until("the new controller made two rounds", || {
            metrics.register_rounds_done() >= 2
        })
        .await;
        h.settle().await;
        assert_eq!(node_creates(&h), creates, "nothing created twice");
        assert_eq!(h.fleet.api.stats().count(Verb::Delete, "nodes"), deletes);
        let again: Vec<_> = ["metal-1", "metal-2"]
            .map(|n| h.node(n).metadata.uid)
            .to_vec();
        assert_eq!(again, uids);
        assert_eq!(h.placements(), placements);
        assert_eq!(metrics.register_errors("update"), 0);
        h.assert_invariants();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_reads_the_node_again_and_a_refused_create_is_counted_and_made_later() {
    within(async {
        let h = Harness::start_on(ApiServer::new(), &[], registering()).await;
        // The first create is refused; the first patch meets a write from someone else.
        h.fleet.api.inject(
            Fault::on(Verb::Create)
                .group(GROUP)
                .resource("nodes")
                .times(1)
                .internal_error(),
        );
        h.fleet.api.inject(
            Fault::on(Verb::Patch)
                .group(GROUP)
                .resource("nodes")
                .times(1)
                .conflict(),
        );
        set_core(&h, &[metal("metal-1")]);
        h.until("metal-1 registered", || registered(&h, "metal-1").is_some())
            .await;
        assert_eq!(h.handles.metrics.register_errors("create"), 1);
        set_core(&h, &[metal("metal-1").cordoned()]);
        h.until("metal-1 Cordoned", || {
            registered(&h, "metal-1").is_some_and(|r| r.0 == NodeState::Cordoned)
        })
        .await;
        h.settle().await;
        assert_eq!(h.fleet.api.stats().faults_fired, 2);
        assert_eq!(
            h.handles.metrics.register_errors("update"),
            0,
            "a conflict is no error"
        );
        // The create went through once: the refused one committed nothing.
        assert_eq!(node_creates(&h), 2);
        h.assert_invariants();
    })
    .await;
}
