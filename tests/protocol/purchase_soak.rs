//! A seeded random soak of purchases: tenants applied, resized, deleted while their machine is on
//! the way; classes added, changed and deleted; a provisioner with random delays and failing
//! classes; drains during purchases; restarts mid-look; StrictFIFO heads no class can hold.
//! After quiescence, besides every reservation invariant: no tenant waits naming a request that
//! does not exist; no tenant is in two requests in flight; nothing stays in flight once the
//! provisioner is done; every delivered machine is used, handed back, or fits a waiting tenant.
//! `TP_SOAK_CASES` sets the number of cases (default 6, for CI); `TP_SOAK_SEED` the first seed.

use std::collections::HashMap;
use std::time::Duration;

use kube::ResourceExt;
use serde_json::json;
use tenant_placer::api::{GROUP, NODE_REQUEST_LABEL, NodeRequest, NodeRequestPhase, TenantPhase};
use tenant_placer::provisioner::ProvisionerConfig;

use tenant_placer::controller::Handles;

use crate::*;

/// The classes, with their threads.
const CLASSES: [(&str, i64); 3] = [("small", 16), ("large", 64), ("flaky", 32)];

fn class(name: &str, threads: i64, cost: i64, limit: i64) -> Value {
    json!({"apiVersion": VERSION, "kind": "NodeClass", "metadata": {"name": name},
           "spec": {"capacity": {"threads": threads, "memoryGb": 256, "storageGb": 8000},
                    "provider": "lab/simulated", "monthlyCost": cost, "limit": limit}})
}

fn requests(h: &Harness) -> Vec<NodeRequest> {
    h.fleet
        .api
        .list(GROUP, "noderequests")
        .into_iter()
        .filter_map(|r| serde_json::from_value(r).ok())
        .collect()
}

async fn purchase_case(seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let queue = if rng.bool() {
        placement::QueueMode::StrictFifo
    } else {
        placement::QueueMode::BestEffortFifo
    };
    let settings = Settings {
        queue,
        request_after: Some(Duration::ZERO),
        request_check: Duration::from_millis(rng.u64(10..=60)),
        empty_node_after: Duration::from_millis(200),
        ..settings()
    };
    let mut h = Harness::start_on(
        ApiServer::new(),
        &[node("n1").capacity(16, 64, 1000).manifest()],
        settings,
    )
    .await;
    h.apply(&[
        class("small", 16, 100, 3),
        class("large", 64, 300, 2),
        class("flaky", 32, 50, 2),
    ]);
    h.fleet.start_provisioner(ProvisionerConfig {
        delay: Duration::from_millis(rng.u64(0..=150)),
        failing: ["flaky".to_owned()].into(),
        every: Duration::from_millis(20),
    });
    // What the running controller reports into (a restart starts afresh).
    let mut handles = h.handles.clone();
    let mut tenants: Vec<String> = Vec::new();
    let mut next = 0;
    for _ in 0..rng.usize(8..20) {
        match rng.u8(0..10) {
            0..=3 => {
                let name = format!("t{next}");
                next += 1;
                // Now and then a head no class can hold (100 threads).
                let threads = if rng.u8(0..6) == 0 {
                    100
                } else {
                    rng.i64(1..=40)
                };
                h.apply(&[tenant(&name).resources(threads, 1, 1).manifest()]);
                tenants.push(name);
            }
            4 if !tenants.is_empty() => {
                let name = &tenants[rng.usize(0..tenants.len())];
                let r = json!({"threads": rng.i64(1..=40), "memoryGb": 1, "storageGb": 1});
                h.apply(&[tenant_spec(name, json!({"resources": r}))]);
            }
            5 if !tenants.is_empty() => {
                // Deleted, maybe while its machine is on the way.
                let name = tenants.swap_remove(rng.usize(0..tenants.len()));
                h.delete_tenant(&name);
            }
            6 => {
                // A class changed (limit, price) or deleted and brought back.
                let (name, threads) = CLASSES[rng.usize(0..CLASSES.len())];
                if rng.bool() {
                    let _ = h.fleet.api.delete(GROUP, "nodeclasses", None, name);
                } else {
                    h.apply(&[class(name, threads, rng.i64(10..=400), rng.i64(1..=3))]);
                }
            }
            7 => {
                // A drain (of n1 or of a bought node) during purchases, or its cancel.
                let nodes = h.fleet.nodes();
                let node = &nodes[rng.usize(0..nodes.len())];
                let name = node.metadata.name.clone().unwrap_or_default();
                let state = ["Online", "Draining"][rng.usize(0..2)];
                // The node may be gone since the list (handed back): the apply would create
                // it, and the server refuses a Node without capacity. Nothing to drain then.
                let _ = h.fleet.api.apply(node_spec(&name, json!({"state": state})));
            }
            8 => {
                // A restart mid-look.
                h.fleet.stop();
                handles = Handles::default();
                h.fleet.start_with(h.settings.clone(), handles.clone());
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(0..80))).await;
    }
    // Classes as they were, so that every waiting tenant some class holds can be bought for.
    h.apply(&[class("small", 16, 100, 3), class("large", 64, 300, 2)]);
    let _ = h.fleet.api.delete(GROUP, "nodeclasses", None, "flaky");
    // Quiet: nothing in flight, no empty bought node left to hand back, the writes settled.
    for _ in 0..200 {
        h.settle().await;
        let in_flight = requests(&h).iter().any(|r| {
            matches!(
                r.phase(),
                NodeRequestPhase::Pending | NodeRequestPhase::Provisioning
            )
        });
        if !in_flight {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Looks spanning twice the empty-node period (each at least `request_check` after the
    // last): an empty bought node has been seen empty long enough and handed back.
    let period = h.settings.empty_node_after.as_millis() * 2;
    let looks = u64::try_from(period / h.settings.request_check.as_millis()).unwrap() + 2;
    let from = handles.metrics.request_looks_done();
    h.until("looks spanning twice the empty-node period", || {
        handles.metrics.request_looks_done() >= from + looks
    })
    .await;
    h.settle().await;
    h.lowered.clear();
    h.assert_invariants();
    check_purchases(&h, seed);
}

/// The purchase invariants at rest (module doc).
fn check_purchases(h: &Harness, seed: u64) {
    let requests = requests(h);
    let names: Vec<String> = requests
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .collect();
    let tenants = h.fleet.tenants();
    // No tenant waits naming a request that does not exist.
    for t in &tenants {
        let Some(status) = &t.status else { continue };
        if status.phase != TenantPhase::PendingCapacity {
            continue;
        }
        if let Some(rest) = status.message.split("node request ").nth(1) {
            let named = rest.split_whitespace().next().unwrap_or_default();
            assert!(
                names.iter().any(|n| n == named),
                "seed {seed}: {} names {named}, which does not exist: {}",
                t.key(),
                status.message
            );
        }
    }
    // Nothing in flight once the provisioner is done, and no tenant in two of them.
    let mut in_flight: HashMap<&str, &str> = HashMap::new();
    for r in &requests {
        if matches!(
            r.phase(),
            NodeRequestPhase::Pending | NodeRequestPhase::Provisioning
        ) {
            for t in &r.spec.tenants {
                let name = r.metadata.name.as_deref().unwrap_or_default();
                if let Some(other) = in_flight.insert(t, name) {
                    panic!("seed {seed}: {t} is in two requests in flight: {other} and {name}");
                }
            }
        }
    }
    assert!(
        in_flight.is_empty(),
        "seed {seed}: requests still in flight at rest: {in_flight:?}"
    );
    // Every delivered machine holds someone, or is handed back, or fits a waiting tenant.
    let waiting: Vec<placement::Resources> = tenants
        .iter()
        .filter(|t| {
            t.status
                .as_ref()
                .is_some_and(|s| s.phase == TenantPhase::PendingCapacity)
                && !t.spec.suspend
        })
        .filter_map(|t| t.spec.footprint().ok())
        .collect();
    for node in h.fleet.nodes() {
        if !node.labels().contains_key(NODE_REQUEST_LABEL)
            || node.metadata.deletion_timestamp.is_some()
            || !node.allocations().is_empty()
        {
            continue;
        }
        let capacity = node.spec.capacity.to_resources().unwrap();
        assert!(
            waiting.iter().any(|f| f.fits_within(&capacity)),
            "seed {seed}: {} holds nothing, no waiting tenant fits it, and it was not handed back",
            node.metadata.name.as_deref().unwrap_or_default()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_random_purchase_soak_keeps_every_invariant() {
    super::soak::seeded("purchase soak", purchase_case).await;
}
