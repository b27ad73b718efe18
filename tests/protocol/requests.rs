//! Node requests: a tenant that waits gets a machine asked for, the simulated provisioner
//! delivers it, the tenant is placed there; failures, limits, deletes, crashes and restarts buy
//! nothing twice, and an idle machine goes back.

use std::time::Duration;

use inmem_apiserver::{Fault, Verb};
use serde_json::{Value, json};
use tenant_placer::api::{GROUP, NodeRequest, TenantPhase};
use tenant_placer::sim::Simulated;
use tenant_placer::sim::provisioner::ProvisionerConfig;

use crate::guards::{events_with_reason, phase};
use crate::*;

/// Settings that ask for a machine at once and hand an idle one back quickly.
pub(crate) fn buying() -> Settings {
    Settings {
        request_after: Some(Duration::ZERO),
        request_check: Duration::from_millis(20),
        empty_node_after: Duration::from_millis(300),
        ..settings()
    }
}

pub(crate) fn provisioner(delay_ms: u64, failing: &[&str]) -> Simulated {
    Simulated::Contract(ProvisionerConfig {
        delay: Duration::from_millis(delay_ms),
        failing: failing.iter().map(|c| (*c).to_owned()).collect(),
        every: Duration::from_millis(20),
        short: Default::default(),
    })
}

pub(crate) fn class(name: &str, threads: i64, monthly_cost: i64, limit: Option<i64>) -> Value {
    let mut spec = json!({"capacity": {"threads": threads, "memoryGb": 256, "storageGb": 8000},
                          "provider": "lab/simulated", "monthlyCost": monthly_cost});
    if let Some(limit) = limit {
        spec["limit"] = json!(limit);
    }
    json!({"apiVersion": VERSION, "kind": "NodeClass", "metadata": {"name": name}, "spec": spec})
}

/// A fault on the next request of this verb on node requests.
fn once(verb: Verb) -> Fault {
    Fault::on(verb).resource("noderequests").times(1)
}

/// The tenant's phase and node, once it has a status.
pub(crate) fn placed(h: &Harness, name: &str) -> Option<(TenantPhase, String)> {
    let status = h.tenant(name)?.status?;
    Some((status.phase, status.node_name))
}

pub(crate) fn requests(h: &Harness) -> Vec<NodeRequest> {
    h.fleet
        .api
        .list(GROUP, "noderequests")
        .into_iter()
        .map(|r| serde_json::from_value(r).unwrap())
        .collect()
}

/// Waits (up to 20 s) until `done` holds, settling between looks.
pub(crate) async fn until(h: &Harness, what: &str, done: impl Fn(&Harness) -> bool) {
    for _ in 0..200 {
        if done(h) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not reached; requests {:#?}", requests(h));
}

/// Waits until the harness's controller has made `n` more looks for machines to ask for (each
/// at least 20 ms apart under [`buying`]: 40 outlast its empty-node period of 300 ms).
pub(crate) async fn more_looks(h: &Harness, n: u64) {
    let metrics = h.handles.metrics.clone();
    let from = metrics.request_looks_done();
    h.until(&format!("{n} more looks"), || {
        metrics.request_looks_done() >= from + n
    })
    .await;
}

/// A fleet with one 8-thread node, the controller buying, and a provisioner.
pub(crate) async fn small_fleet(provisioner_config: Simulated, classes: &[Value]) -> Harness {
    let h = unprovisioned(classes).await;
    h.fleet.start_provisioner(provisioner_config).await.unwrap();
    h
}

/// A fleet with one 8-thread node and the controller buying; no provisioner runs (the test
/// plays it, or starts one later).
pub(crate) async fn unprovisioned(classes: &[Value]) -> Harness {
    let h = Harness::start_on(
        ApiServer::new(),
        &[node("small").capacity(8, 32, 1000).manifest()],
        buying(),
    )
    .await;
    h.apply(classes);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_that_waits_gets_a_machine_asked_for_and_is_placed_on_it_when_it_arrives() {
    let h = small_fleet(provisioner(300, &[]), &[class("big-box", 64, 200, None)]).await;
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    until(&h, "a request for big", |h| !requests(h).is_empty()).await;
    let asked = requests(&h);
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].spec.node_class, "big-box");
    assert_eq!(asked[0].spec.tenants, ["default/big"]);
    // While the machine comes, the tenant's message names its request.
    let name = asked[0].metadata.name.clone().unwrap();
    until(&h, "big's message names its request", |h| {
        h.tenant("big")
            .and_then(|t| t.status)
            .is_some_and(|s| s.message.contains(&name))
    })
    .await;
    until(&h, "big placed on the new node", |h| {
        placed(h, "big") == Some((TenantPhase::Active, name.clone()))
    })
    .await;
    h.settle().await;
    let node = h.node(&name);
    assert_eq!(
        node.metadata.labels.unwrap()["placement.tenant-placer.dev/node-request"],
        name
    );
    assert_eq!(requests(&h).len(), 1, "nothing asked for twice");
    // A machine that holds its tenant is kept past the idle time.
    more_looks(&h, 40).await;
    assert_eq!(requests(&h).len(), 1, "the machine is kept");
    assert_eq!(h.handles.metrics.nodes_handed_back(), 0);
    // One Event on the request, one on the tenant it is for.
    let mut regarding: Vec<String> = events_with_reason(&h, "NodeRequested")
        .iter()
        .map(|e| e["regarding"]["kind"].as_str().unwrap().to_owned())
        .collect();
    regarding.sort();
    assert_eq!(regarding, ["NodeRequest", "Tenant"]);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_is_reported_and_its_tenant_is_planned_on_another_class() {
    // cheap fails; dear works. The cheaper is asked for first.
    let h = cheap_fails(vec![]).await;
    until(&h, "big placed", |h| {
        placed(h, "big").is_some_and(|p| p.0 == TenantPhase::Active)
    })
    .await;
    h.settle().await;
    let failed = events_with_reason(&h, "ProvisioningFailed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0]["note"].as_str().unwrap().contains("cheap"));
    let left = requests(&h);
    assert_eq!(left.len(), 1, "the failed request is gone");
    assert_eq!(left[0].spec.node_class, "dear");
    // Deleted once: a Failed request the watch showed gone is not deleted again.
    more_looks(&h, 5).await;
    assert_eq!(h.fleet.api.stats().count(Verb::Delete, "noderequests"), 1);
    h.assert_invariants();
}

/// A fleet whose provisioner fails class cheap at once and delivers dear, with `faults`
/// injected, then a tenant that needs one of them.
async fn cheap_fails(faults: Vec<Fault>) -> Harness {
    let h = small_fleet(
        provisioner(50, &["cheap"]),
        &[class("cheap", 64, 100, None), class("dear", 64, 300, None)],
    )
    .await;
    for fault in faults {
        h.fleet.api.inject(fault);
    }
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_whose_delete_is_refused_is_counted_and_deleted_at_a_later_look() {
    let h = cheap_fails(vec![once(Verb::Delete).internal_error()]).await;
    until(&h, "big placed and the failed request gone", |h| {
        placed(h, "big").is_some_and(|p| p.0 == TenantPhase::Active)
            && requests(h).iter().all(|r| r.spec.node_class == "dear")
    })
    .await;
    h.settle().await;
    assert_eq!(h.fleet.api.stats().faults_fired, 1);
    assert_eq!(h.handles.metrics.node_request_errors("retire"), 1);
    assert_eq!(h.fleet.api.stats().count(Verb::Delete, "noderequests"), 2);
    // Reported once, though seen at two looks.
    assert_eq!(events_with_reason(&h, "ProvisioningFailed").len(), 1);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_someone_else_deletes_first_is_no_error() {
    // The controller's delete is held while a person deletes the request: it then finds it gone.
    let h = cheap_fails(vec![once(Verb::Delete).delay(Duration::from_millis(1500))]).await;
    h.until("the controller's delete sent", || {
        h.fleet.api.stats().count(Verb::Delete, "noderequests") == 1
    })
    .await;
    let failed = request_names(&h)
        .into_iter()
        .find(|n| n.starts_with("cheap-"))
        .expect("the failed request is still there");
    h.fleet
        .api
        .delete(GROUP, "noderequests", None, &failed)
        .unwrap();
    until(&h, "big placed", |h| {
        placed(h, "big").is_some_and(|p| p.0 == TenantPhase::Active)
    })
    .await;
    h.settle().await;
    assert_eq!(h.fleet.api.stats().faults_fired, 1);
    assert_eq!(h.handles.metrics.node_request_errors("retire"), 0);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_at_its_limit_gets_no_more_requests_and_the_tenant_says_so() {
    // One 40-thread machine at most; two tenants of 32 threads need two.
    let h = small_fleet(provisioner(100, &[]), &[class("box", 40, 100, Some(1))]).await;
    h.apply(&[
        tenant("first").resources(32, 64, 100).manifest(),
        tenant("second").resources(32, 64, 100).manifest(),
    ]);
    until(&h, "first placed", |h| {
        placed(h, "first").is_some_and(|p| p.0 == TenantPhase::Active)
    })
    .await;
    until(&h, "second says why it has no machine", |h| {
        h.tenant("second")
            .and_then(|t| t.status)
            .is_some_and(|s| s.message.contains("limit"))
    })
    .await;
    assert_eq!(phase(&h, "second").0, TenantPhase::PendingCapacity);
    assert_eq!(requests(&h).len(), 1, "never past the limit");
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delete_of_a_request_the_types_cannot_read_is_seen_and_its_tenant_gets_another() {
    use kube::CustomResourceExt;
    // big waits; its request stays Pending (no provisioner yet). An older schema lets in a
    // phase the types do not know: the cache keeps the Pending version. Then the request is
    // deleted: seen by name, whatever its body, so big gets a request again and is placed.
    let h = unprovisioned(&[class("box", 16, 100, None)]).await;
    h.apply(&[tenant("big").resources(12, 1, 1).manifest()]);
    until(&h, "a request for big", |h| requests(h).len() == 1).await;
    let name = requests(&h)[0].metadata.name.clone().unwrap();
    let api = &h.fleet.api;
    let current = serde_json::to_value(NodeRequest::crd()).unwrap();
    let mut older = current.clone();
    older
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/phase")
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove("enum");
    api.install_crd(older).unwrap();
    api.apply(
        json!({"apiVersion": VERSION, "kind": "NodeRequest", "metadata": {"name": name},
                     "status": {"phase": "Racking", "message": "in the rack"}}),
    )
    .unwrap();
    api.install_crd(current).unwrap();
    until(&h, "the unreadable request reported", |h| {
        !events_with_reason(h, "Undecodable").is_empty()
    })
    .await;
    api.delete(GROUP, "noderequests", None, &name).unwrap();
    h.fleet
        .start_provisioner(provisioner(0, &[]))
        .await
        .unwrap();
    until(&h, "big placed on a machine bought again", |h| {
        placed(h, "big").is_some_and(|(phase, _)| phase == TenantPhase::Active)
    })
    .await;
    h.settle().await;
    assert_eq!(requests(&h).len(), 1);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_move_is_bought_the_room_it_holds_not_the_smaller_footprint_it_asks_next() {
    // t0 holds 38 threads on n1, which is drained with nowhere to go; then t0 asks for 7. A move
    // carries its entry as held (the resize comes once it has moved): a 16-thread box would
    // never take it and would stay idle, kept for it. The 64-thread box is bought.
    let h = unprovisioned(&[]).await;
    h.apply(&[node("n1").capacity(40, 64, 1000).manifest()]);
    h.apply(&[tenant("t0").resources(38, 1, 1).manifest()]);
    until(&h, "t0 on n1", |h| {
        placed(h, "t0") == Some((TenantPhase::Active, "n1".into()))
    })
    .await;
    h.apply(&[node_spec("n1", json!({"state": "Draining"}))]);
    h.apply(&[tenant("t0").resources(7, 1, 1).manifest()]);
    until(
        &h,
        "t0 blocked, its new footprint asked for once it has moved",
        |h| {
            h.tenant("t0")
                .and_then(|t| t.status)
                .is_some_and(|s| s.message.contains("is asked for once it has moved"))
        },
    )
    .await;
    h.apply(&[class("small", 16, 100, None), class("large", 64, 300, None)]);
    h.fleet
        .start_provisioner(provisioner(0, &[]))
        .await
        .unwrap();
    until(&h, "t0 moved off n1", |h| {
        placed(h, "t0").is_some_and(|(phase, node)| phase == TenantPhase::Active && node != "n1")
    })
    .await;
    h.settle().await;
    let classes: Vec<String> = requests(&h)
        .into_iter()
        .map(|r| r.spec.node_class)
        .collect();
    assert_eq!(classes, ["large"]);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_deleted_before_its_machine_arrives_leaves_it_idle_and_it_is_handed_back() {
    let h = small_fleet(provisioner(400, &[]), &[class("box", 64, 100, None)]).await;
    // The first hand-back is refused: counted, and tried again.
    h.fleet.api.inject(once(Verb::Delete).internal_error());
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    until(&h, "a request for big", |h| !requests(h).is_empty()).await;
    let name = requests(&h)[0].metadata.name.clone().unwrap();
    h.delete_tenant("big");
    // The machine arrives, holds nothing for the idle time, and goes back with its request.
    until(&h, "the machine arrived", |h| {
        h.fleet
            .nodes()
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(&name))
    })
    .await;
    until(&h, "the machine handed back", |h| {
        requests(h).is_empty()
            && h.fleet
                .nodes()
                .iter()
                .all(|n| n.metadata.name.as_deref() != Some(&name))
    })
    .await;
    h.settle().await;
    assert_eq!(h.fleet.api.stats().faults_fired, 1);
    assert_eq!(h.handles.metrics.node_request_errors("hand_back"), 1);
    assert_eq!(h.handles.metrics.nodes_handed_back(), 1);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_machine_someone_else_hands_back_first_is_no_error() {
    let h = small_fleet(provisioner(100, &[]), &[class("box", 64, 100, None)]).await;
    // The controller's hand-back is held while a person deletes the request: it finds it gone.
    h.fleet
        .api
        .inject(once(Verb::Delete).delay(Duration::from_millis(1500)));
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    until(&h, "a request for big", |h| !requests(h).is_empty()).await;
    let name = requests(&h)[0].metadata.name.clone().unwrap();
    h.delete_tenant("big");
    h.until("the controller's hand-back sent", || {
        h.fleet.api.stats().count(Verb::Delete, "noderequests") == 1
    })
    .await;
    h.fleet
        .api
        .delete(GROUP, "noderequests", None, &name)
        .unwrap();
    until(&h, "the machine gone", |h| {
        h.fleet
            .nodes()
            .iter()
            .all(|n| n.metadata.name.as_deref() != Some(&name))
    })
    .await;
    // The held delete has been answered: two more looks.
    more_looks(&h, 2).await;
    h.settle().await;
    assert_eq!(h.fleet.api.stats().faults_fired, 1);
    assert_eq!(h.handles.metrics.node_request_errors("hand_back"), 0);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_create_answer_is_lost_or_whose_controller_restarts_is_not_made_twice() {
    let h = small_fleet(provisioner(600, &[]), &[class("box", 64, 100, None)]).await;
    // The first create of a request commits, and its answer is lost.
    h.fleet.api.inject(once(Verb::Create).commit_then_fail());
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    until(&h, "a request for big", |h| !requests(h).is_empty()).await;
    // And the controller dies and starts again (as a new leader would) before the machine comes.
    h.fleet.stop();
    h.fleet.start(buying());
    until(&h, "big placed", |h| {
        placed(h, "big").is_some_and(|p| p.0 == TenantPhase::Active)
    })
    .await;
    h.settle().await;
    assert_eq!(requests(&h).len(), 1, "one machine for one tenant");
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_controllers_planning_the_same_wait_ask_for_one_machine() {
    // Both controllers' request watches lag 4 s behind their lists, and the first create is
    // held 1 s: the other's is made meanwhile, so the held one meets AlreadyExists. It finds the
    // same purchase in flight and remembers it: nothing is asked again while its watch has not
    // shown the request, and neither counts an error.
    let api = ApiServer::new();
    api.inject(
        Fault::on(Verb::Watch)
            .resource("noderequests")
            .times(2)
            .delay(Duration::from_secs(4)),
    );
    api.inject(once(Verb::Create).delay(Duration::from_secs(1)));
    let h = Harness::start_on(
        api,
        &[node("small").capacity(8, 32, 1000).manifest()],
        buying(),
    )
    .await;
    h.apply(&[class("box", 64, 100, None)]);
    let handles = Handles::default();
    let (other_metrics, other_caches) = (handles.metrics.clone(), handles.caches.clone());
    let other = tokio::spawn(tenant_placer::controller::run_with(
        h.fleet.client.clone(),
        buying(),
        handles,
    ));
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    let stats = || h.fleet.api.stats();
    h.until("both controllers asked", || {
        stats().count(Verb::Create, "noderequests") >= 2
    })
    .await;
    // A look waits for its create: two more looks each, and the held create was answered.
    let looks = |m: &tenant_placer::metrics::Metrics| m.request_looks_done();
    let from = (looks(&h.handles.metrics), looks(&other_metrics));
    h.until("each controller looked twice more", || {
        looks(&h.handles.metrics) >= from.0 + 2 && looks(&other_metrics) >= from.1 + 2
    })
    .await;
    // Still inside the window: neither request cache shows the request yet.
    for caches in [&h.handles.caches, &other_caches] {
        let (_, requests) = caches.purchases().expect("the request loop runs");
        assert!(requests.state().is_empty(), "the watch no longer lags");
    }
    assert_eq!(stats().count(Verb::Create, "noderequests"), 2);
    // The machine comes only now: big waited through the window.
    h.fleet
        .start_provisioner(provisioner(100, &[]))
        .await
        .unwrap();
    until(&h, "big placed", |h| {
        placed(h, "big").is_some_and(|p| p.0 == TenantPhase::Active)
    })
    .await;
    h.settle().await;
    other.abort();
    let made = requests(&h);
    assert_eq!(made.len(), 1, "{made:#?}");
    assert_eq!(stats().count(Verb::Create, "noderequests"), 2);
    assert_eq!(stats().faults_fired, 3);
    for metrics in [&h.handles.metrics, &other_metrics] {
        assert_eq!(metrics.node_request_errors("create"), 0);
    }
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_create_is_counted_and_the_purchase_made_at_a_later_look() {
    let h = small_fleet(provisioner(100, &[]), &[class("box", 64, 100, None)]).await;
    h.fleet.api.inject(once(Verb::Create).internal_error());
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    until(&h, "big placed", |h| {
        placed(h, "big").is_some_and(|p| p.0 == TenantPhase::Active)
    })
    .await;
    h.settle().await;
    assert_eq!(h.fleet.api.stats().faults_fired, 1);
    assert_eq!(h.handles.metrics.node_request_errors("create"), 1);
    assert_eq!(requests(&h).len(), 1);
    h.assert_invariants();
}

/// Every node request's name, sorted.
fn request_names(h: &Harness) -> Vec<String> {
    let mut names: Vec<String> = requests(h)
        .into_iter()
        .filter_map(|r| r.metadata.name)
        .collect();
    names.sort();
    names
}

fn message(h: &Harness, name: &str) -> String {
    h.tenant(name)
        .and_then(|t| t.status)
        .map(|s| s.message)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_bought_for_tenants_behind_a_strict_fifo_head_that_no_class_can_hold() {
    // The loop: one 8-thread node, a 16-thread class; head (100 threads, bigger than
    // every class) then young (12). A box for young would never take young before head: it
    // was bought, handed back and bought again. Now nothing is bought, and both say why.
    let h = Harness::start_on(
        ApiServer::new(),
        &[node("small").capacity(8, 32, 1000).manifest()],
        Settings {
            queue: placement::QueueMode::StrictFifo,
            ..buying()
        },
    )
    .await;
    h.apply(&[class("box", 16, 100, None)]);
    h.fleet
        .start_provisioner(provisioner(50, &[]))
        .await
        .unwrap();
    h.apply(&[tenant("head").resources(100, 1, 1).manifest()]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    h.apply(&[tenant("young").resources(12, 1, 1).manifest()]);
    until(&h, "young says it waits behind head", |h| {
        message(h, "young").contains("waits behind default/head (StrictFIFO)")
    })
    .await;
    // Many looks and more than one empty-node period later: nothing bought meanwhile.
    more_looks(&h, 40).await;
    assert_eq!(request_names(&h), Vec::<String>::new(), "nothing bought");
    assert!(
        message(&h, "head").contains("no node can be requested for it: larger than every"),
        "{}",
        message(&h, "head")
    );
    // The same with a 1-thread head whose node selector no class's nodes carry.
    h.delete_tenant("head");
    h.apply(&[tenant("lost")
        .resources(1, 1, 1)
        .node_selector(&[("region", "mars")])
        .manifest()]);
    h.delete_tenant("young");
    h.apply(&[tenant("young2").resources(12, 1, 1).manifest()]);
    until(&h, "young2 says it waits behind lost", |h| {
        message(h, "young2").contains("waits behind default/lost (StrictFIFO)")
    })
    .await;
    more_looks(&h, 40).await;
    assert_eq!(request_names(&h), Vec::<String>::new(), "nothing bought");
    assert!(
        message(&h, "lost").contains("no node class makes nodes labelled region=mars"),
        "{}",
        message(&h, "lost")
    );
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_machine_an_older_blocked_move_takes_gets_another_machine() {
    // mover (60 threads) lands on the only node; waiter (60) gets a 64-thread box asked for;
    // the node is drained before the box arrives. The box's room is waiter's: the older,
    // blocked mover gets a second box (another name, not "AlreadyExists, taken as made"), and
    // each tenant lands on the box bought for it, whichever arrives first.
    let h = Harness::start_on(
        ApiServer::new(),
        &[node("n1").capacity(64, 256, 8000).manifest()],
        buying(),
    )
    .await;
    h.apply(&[class("box", 64, 100, None)]);
    h.apply(&[tenant("mover").resources(60, 1, 1).manifest()]);
    h.settle().await;
    h.apply(&[tenant("waiter").resources(60, 1, 1).manifest()]);
    until(&h, "a request for waiter", |h| requests(h).len() == 1).await;
    h.apply(&[node_spec("n1", json!({"state": "Draining"}))]);
    h.fleet
        .start_provisioner(provisioner(600, &[]))
        .await
        .unwrap();
    until(&h, "both placed on bought machines", |h| {
        ["mover", "waiter"].iter().all(|t| {
            placed(h, t).is_some_and(|(phase, node)| phase == TenantPhase::Active && node != "n1")
        })
    })
    .await;
    h.settle().await;
    let bought: Vec<(Option<String>, Vec<String>)> = requests(&h)
        .into_iter()
        .map(|r| (r.metadata.name, r.spec.tenants))
        .collect();
    assert_eq!(bought.len(), 2, "one machine each: {bought:?}");
    for (name, tenants) in &bought {
        let tenant = tenants[0].trim_start_matches("default/");
        assert_eq!(placed(&h, tenant).unwrap().1, *name.as_ref().unwrap());
    }
    assert_eq!(h.allocated_threads("n1"), 0);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_fails_between_two_looks_is_seen_and_the_next_class_is_tried() {
    // Looks every 400 ms; the provisioner fails cheap within about 40 ms of its create, so no
    // look sees it in flight. It used to stay counted as room on the way for 60 s.
    let h = Harness::start_on(
        ApiServer::new(),
        &[node("small").capacity(8, 32, 1000).manifest()],
        Settings {
            request_check: Duration::from_millis(400),
            ..buying()
        },
    )
    .await;
    h.apply(&[class("cheap", 64, 100, None), class("dear", 64, 300, None)]);
    h.fleet
        .start_provisioner(provisioner(0, &["cheap"]))
        .await
        .unwrap();
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    until(&h, "big placed on a dear machine", |h| {
        placed(h, "big")
            .is_some_and(|(phase, node)| phase == TenantPhase::Active && node.starts_with("dear-"))
    })
    .await;
    h.settle().await;
    assert_eq!(events_with_reason(&h, "ProvisioningFailed").len(), 1);
    let names = request_names(&h);
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("dear-"));
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_whose_name_is_long_or_dotted_gets_requests_the_api_accepts() {
    // A valid 55-character class name with a dot at the 54th character made request names the
    // API refused (422), and the refusal stopped every purchase and hand-back.
    let long = format!("{}.b", "a".repeat(53));
    let h = small_fleet(provisioner(50, &[]), &[class(&long, 64, 100, None)]).await;
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    until(&h, "big placed on a bought machine", |h| {
        placed(h, "big")
            .is_some_and(|(phase, node)| phase == TenantPhase::Active && node != "small")
    })
    .await;
    h.settle().await;
    let asked = requests(&h);
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].spec.node_class, long);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_request_counts_the_node_its_status_names_not_one_named_after_it() {
    // A provisioner that names the Node otherwise (lab-1): once lab-1 is there, the request is
    // no longer room on the way, and a tenant lab-1 cannot take gets a machine of its own.
    // No provisioner runs: the test plays it.
    let h = unprovisioned(&[class("box", 64, 100, None)]).await;
    h.apply(&[tenant("first").resources(32, 1, 1).manifest()]);
    until(&h, "a request for first", |h| requests(h).len() == 1).await;
    let name = request_names(&h).remove(0);
    h.apply(&[json!({
        "apiVersion": VERSION, "kind": "Node",
        "metadata": {"name": "lab-1", "labels": {
            "placement.tenant-placer.dev/node-request": name,
            "placement.tenant-placer.dev/node-class": "box"}},
        "spec": {"capacity": {"threads": 64, "memoryGb": 256, "storageGb": 8000}}
    })]);
    h.apply(&[json!({
        "apiVersion": VERSION, "kind": "NodeRequest", "metadata": {"name": name},
        "status": {"phase": "Ready", "nodeName": "lab-1", "message": "up"}
    })]);
    until(&h, "first placed on lab-1", |h| {
        placed(h, "first") == Some((TenantPhase::Active, "lab-1".to_owned()))
    })
    .await;
    // 32 threads free on lab-1: second (40) needs another machine.
    h.apply(&[tenant("second").resources(40, 1, 1).manifest()]);
    until(&h, "a request for second", |h| requests(h).len() == 2).await;
    h.settle().await;
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_a_node_selector_is_bought_a_machine_of_a_class_that_carries_its_labels() {
    let mut eu = class("eu-box", 64, 300, None);
    eu["spec"]["labels"] = json!({"region": "eu"});
    let h = small_fleet(provisioner(50, &[]), &[class("us-box", 64, 100, None), eu]).await;
    h.apply(&[tenant("euro")
        .resources(32, 1, 1)
        .node_selector(&[("region", "eu")])
        .manifest()]);
    until(&h, "euro placed on an eu machine", |h| {
        placed(h, "euro").is_some_and(|(phase, node)| {
            phase == TenantPhase::Active && node.starts_with("eu-box-")
        })
    })
    .await;
    h.settle().await;
    assert_eq!(requests(&h).len(), 1, "only the eu class is bought");
    h.assert_invariants();
}

/// A purchase from wait to hand-back: big waits, one box is bought, delivered and used; big is
/// deleted and the box goes back. Counts every request created.
async fn purchase_run(at_write: Option<u64>) -> (u64, usize) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let h = small_fleet(provisioner(100, &[]), &[class("box", 64, 100, None)]).await;
    let created = Arc::new(AtomicUsize::new(0));
    let counter = created.clone();
    h.fleet.api.on_commit(move |commit| {
        if commit.resource == "noderequests" && commit.old.is_none() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    h.fleet.api.reset_stats();
    let restarter = at_write.map(|at| {
        let stall = inmem_apiserver::Stall::default();
        h.fleet.api.inject(
            Fault::writes()
                .after(u32::try_from(at).unwrap())
                .commit_then_stall(&stall),
        );
        let (fleet, settings) = (h.fleet.clone(), h.settings.clone());
        tokio::spawn(async move {
            stall.0.notified().await;
            // The write committed and unanswered: the controller dies, a new one starts (and
            // so does the provisioner, in case the write was its own).
            fleet.start(settings);
            fleet
                .start_provisioner(provisioner(100, &[]))
                .await
                .unwrap();
        })
    });
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    until(&h, "big placed on its box", |h| {
        placed(h, "big")
            .is_some_and(|(phase, node)| phase == TenantPhase::Active && node != "small")
    })
    .await;
    h.settle().await;
    h.assert_invariants();
    h.delete_tenant("big");
    until(&h, "the box handed back", |h| {
        requests(h).is_empty() && h.fleet.nodes().len() == 1
    })
    .await;
    h.settle().await;
    h.assert_invariants();
    let writes = h.fleet.api.stats().write_requests();
    if let (Some(at), Some(restarter)) = (at_write, restarter) {
        assert!(
            restarter.is_finished() || writes <= at,
            "at write {at}: the fault never fired in a run of {writes} writes"
        );
        restarter.abort();
    }
    (writes, created.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_at_any_write_of_a_purchase_buys_nothing_twice_and_loses_nothing() {
    use futures::StreamExt;
    // Every write of the run (the controller's and the provisioner's): the write commits, its
    // answer never comes, the controller dies there and a new one starts. One box, always.
    let (writes, created) = purchase_run(None).await;
    assert_eq!(created, 1);
    assert!(writes >= 6, "a purchase makes {writes} writes");
    let runs: Vec<(u64, (u64, usize))> = futures::stream::iter(0..writes)
        .map(|at| async move { (at, purchase_run(Some(at)).await) })
        .buffer_unordered(4)
        .collect()
        .await;
    for (at, (_, created)) in runs {
        assert_eq!(created, 1, "killed at write {at}: {created} boxes bought");
    }
    eprintln!("purchase: killed at each of {writes} writes, one box each time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_nobody_took_up_is_withdrawn_when_its_class_is_deleted() {
    let h = unprovisioned(&[class("big-box", 64, 200, None)]).await;
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    until(&h, "a request for big", |h| !requests(h).is_empty()).await;
    let asked = requests(&h)[0].metadata.name.clone().unwrap();
    h.fleet
        .api
        .delete(GROUP, "nodeclasses", None, "big-box")
        .unwrap();
    until(&h, "the request withdrawn", |h| requests(h).is_empty()).await;
    until(&h, "big no longer waiting on it", |h| {
        h.tenant("big")
            .and_then(|t| t.status)
            .is_some_and(|s| s.phase == TenantPhase::PendingCapacity && !s.message.contains(&asked))
    })
    .await;
    h.assert_invariants();
}
