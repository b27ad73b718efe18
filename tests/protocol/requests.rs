//! Node requests: a tenant that waits gets a machine asked for, the simulated provisioner
//! delivers it, the tenant is placed there; failures, limits, deletes, crashes and restarts buy
//! nothing twice, and an idle machine goes back.

use std::time::Duration;

use inmem_apiserver::{Fault, Verb};
use serde_json::{Value, json};
use tenant_placer::api::{GROUP, NodeRequest, TenantPhase};
use tenant_placer::provisioner::ProvisionerConfig;

use crate::guards::{events_with_reason, phase};
use crate::*;

/// Settings that ask for a machine at once and hand an idle one back quickly.
fn buying() -> Settings {
    Settings {
        request_after: Some(Duration::ZERO),
        request_check: Duration::from_millis(20),
        empty_node_after: Duration::from_millis(300),
        ..settings()
    }
}

fn provisioner(delay_ms: u64, failing: &[&str]) -> ProvisionerConfig {
    ProvisionerConfig {
        delay: Duration::from_millis(delay_ms),
        failing: failing.iter().map(|c| (*c).to_owned()).collect(),
        every: Duration::from_millis(20),
    }
}

fn class(name: &str, threads: i64, monthly_cost: i64, limit: Option<i64>) -> Value {
    let mut spec = json!({"capacity": {"threads": threads, "memoryGb": 256, "storageGb": 8000},
                          "provider": "lab/simulated", "monthlyCost": monthly_cost});
    if let Some(limit) = limit {
        spec["limit"] = json!(limit);
    }
    json!({"apiVersion": VERSION, "kind": "NodeClass", "metadata": {"name": name}, "spec": spec})
}

/// The tenant's phase and node, once it has a status.
fn placed(h: &Harness, name: &str) -> Option<(TenantPhase, String)> {
    let status = h.tenant(name)?.status?;
    Some((status.phase, status.node_name))
}

fn requests(h: &Harness) -> Vec<NodeRequest> {
    h.fleet
        .api
        .list(GROUP, "noderequests")
        .into_iter()
        .map(|r| serde_json::from_value(r).unwrap())
        .collect()
}

/// Waits (up to 20 s) until `done` holds, settling between looks.
async fn until(h: &Harness, what: &str, done: impl Fn(&Harness) -> bool) {
    for _ in 0..200 {
        if done(h) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not reached; requests {:#?}", requests(h));
}

/// A fleet with one 8-thread node, the controller buying, and a provisioner.
async fn small_fleet(provisioner_config: ProvisionerConfig, classes: &[Value]) -> Harness {
    let h = Harness::start_on(
        ApiServer::new(),
        &[node("small").capacity(8, 32, 1000).manifest()],
        buying(),
    )
    .await;
    h.apply(classes);
    h.fleet.start_provisioner(provisioner_config);
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
    let h = small_fleet(
        provisioner(50, &["cheap"]),
        &[class("cheap", 64, 100, None), class("dear", 64, 300, None)],
    )
    .await;
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
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
async fn a_tenant_deleted_before_its_machine_arrives_leaves_it_idle_and_it_is_handed_back() {
    let h = small_fleet(provisioner(400, &[]), &[class("box", 64, 100, None)]).await;
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
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_create_answer_is_lost_or_whose_controller_restarts_is_not_made_twice() {
    let h = small_fleet(provisioner(600, &[]), &[class("box", 64, 100, None)]).await;
    // The first create of a request commits, and its answer is lost.
    h.fleet.api.inject(
        Fault::on(Verb::Create)
            .resource("noderequests")
            .times(1)
            .commit_then_fail(),
    );
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
    let h = small_fleet(provisioner(300, &[]), &[class("box", 64, 100, None)]).await;
    let other = tokio::spawn(tenant_placer::controller::run(
        h.fleet.client.clone(),
        buying(),
    ));
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    until(&h, "big placed", |h| {
        placed(h, "big").is_some_and(|p| p.0 == TenantPhase::Active)
    })
    .await;
    h.settle().await;
    other.abort();
    // Both computed the same purchase under the same stable name: one was made, the other
    // found it.
    assert_eq!(requests(&h).len(), 1);
    h.assert_invariants();
}
