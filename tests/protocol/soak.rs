//! A seeded random soak: applies, resizes, mode switches, suspends, deletes, node capacity and
//! state changes (drains and cancelled drains among them), and what other actors do (wiped node statuses, nodes deleted with and without
//! their finalizer and re-created, tenants and nodes the types cannot hold, tenants made unreadable
//! and deleted), restarts mid-queue and
//! same-name re-creates, with injected API faults; the invariants are checked after quiescence.
//! `TP_SOAK_CASES` sets the number of cases (default 6, for CI); `TP_SOAK_SEED` the first seed.

use std::collections::HashMap;

use inmem_apiserver::{Fault, Verb};
use serde_json::json;
use tenant_placer::api::TenantMode;

use crate::*;

const NODE_NAMES: [&str; 4] = ["n1", "n2", "n3", "n4"];

pub fn random_fault(rng: &mut fastrand::Rng) -> Fault {
    let verb = [Verb::Update, Verb::Patch, Verb::Create, Verb::Get][rng.usize(0..4)];
    let fault = Fault::on(verb).times(rng.u32(1..=3));
    match rng.u8(0..6) {
        0 => fault.conflict(),
        1 => fault.internal_error(),
        2 => fault.too_many_requests(0),
        3 => fault.commit_then_fail(),
        4 => fault.delay(std::time::Duration::from_millis(rng.u64(1..30))),
        _ => Fault::writes().after(rng.u32(0..5)).commit_then_fail(),
    }
}

fn exists(h: &Harness, node: &str) -> bool {
    h.fleet
        .nodes()
        .iter()
        .any(|n| n.metadata.name.as_deref() == Some(node))
}

/// One case: a fleet, a burst of random operations with faults, then quiescence and the checks.
async fn soak_case(seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    // The threads each node was last given (the only dimension the soak changes): a change is
    // a lowering only against these.
    let mut threads_of: HashMap<&str, i64> = HashMap::new();
    let nodes: Vec<_> = NODE_NAMES[..3]
        .iter()
        .map(|n| {
            let threads = rng.i64(8..=64);
            threads_of.insert(n, threads);
            node(n)
                .capacity(threads, rng.i64(32..=256), rng.i64(500..=8000))
                .manifest()
        })
        .collect();
    let mut h = Harness::start(&nodes).await;
    // An older schema lets in tenants the types cannot hold (replicas past int32).
    h.fleet
        .api
        .install_crd(super::guards::tenant_crd_without_replica_bounds())
        .unwrap();
    h.fleet
        .api
        .install_crd(super::unreadable::node_crd_of_an_older_release())
        .unwrap();
    // Nodes made unreadable, fixed before the checks.
    let mut broken: Vec<&str> = Vec::new();
    let mut tenants: Vec<String> = Vec::new();
    let mut next = 0;
    for _ in 0..rng.usize(10..30) {
        if rng.u8(0..4) == 0 {
            h.fleet.api.inject(random_fault(&mut rng));
        }
        match rng.u8(0..17) {
            0..=3 => {
                let name = format!("t{next}");
                next += 1;
                h.apply(&[tenant(&name)
                    .resources(rng.i64(1..=16), rng.i64(1..=64), rng.i64(1..=1000))
                    .manifest()]);
                tenants.push(name);
            }
            4 if !tenants.is_empty() => {
                let name = &tenants[rng.usize(0..tenants.len())];
                let r = json!({"threads": rng.i64(1..=16), "memoryGb": rng.i64(1..=64), "storageGb": rng.i64(1..=1000)});
                h.apply(&[tenant_spec(name, json!({"resources": r}))]);
            }
            5 if !tenants.is_empty() => {
                let name = &tenants[rng.usize(0..tenants.len())];
                let spec = if rng.bool() {
                    json!({"mode": "Cluster", "replicas": rng.i64(2..=4)})
                } else {
                    json!({"mode": "Standalone", "replicas": null})
                };
                h.apply(&[tenant_spec(name, spec)]);
            }
            6 if !tenants.is_empty() => {
                let name = &tenants[rng.usize(0..tenants.len())];
                h.apply(&[tenant_spec(name, json!({"suspend": rng.bool()}))]);
            }
            7 if !tenants.is_empty() => {
                let name = tenants.swap_remove(rng.usize(0..tenants.len()));
                h.delete_tenant(&name);
            }
            8 => {
                let name = NODE_NAMES[rng.usize(0..NODE_NAMES.len())];
                let threads = rng.i64(4..=64);
                if exists(&h, name) {
                    // Capacity may drop below what the node holds: it then keeps its tenants,
                    // and only then is it exempt from the capacity check at rest (a raise never
                    // is).
                    if threads_of.get(name).is_some_and(|before| threads < *before) {
                        h.lowered.insert(name.to_owned());
                    }
                    h.apply(&[node_spec(name, json!({"capacity": {"threads": threads}}))]);
                } else {
                    h.apply(&[node(name).capacity(threads, 128, 4000).manifest()]);
                }
                threads_of.insert(name, threads);
            }
            9 => {
                let name = NODE_NAMES[rng.usize(0..3)];
                // Draining moves its tenants off; a later step may cancel it (back to Online)
                // or change it again while moves are in flight.
                let state = ["Online", "Cordoned", "Offline", "Draining"][rng.usize(0..4)];
                if exists(&h, name) {
                    h.apply(&[node_spec(name, json!({"state": state}))]);
                }
            }
            10 => {
                // Another actor wipes a node's allocations.
                let name = NODE_NAMES[rng.usize(0..3)];
                if exists(&h, name) {
                    super::guards::wipe_allocations(&h, name);
                }
            }
            11 => {
                // Another actor deletes a node: it waits for its tenants, unless the finalizer
                // is stripped too; the capacity branch above may bring it back under its name.
                let name = NODE_NAMES[rng.usize(0..NODE_NAMES.len())];
                if exists(&h, name) {
                    if rng.bool() {
                        h.apply(&[json!({"apiVersion": VERSION, "kind": "Node", "metadata": {"name": name, "finalizers": []}})]);
                    }
                    let _ = h.fleet.api.delete(GROUP, "nodes", None, name);
                }
            }
            12 => {
                let name = format!("poisoned{next}");
                next += 1;
                let mut poisoned = tenant(&name).mode(TenantMode::Cluster).manifest();
                // Past int32: the types cannot hold it (the older schema lets it in).
                poisoned["spec"]["replicas"] = json!(2_147_483_648_i64);
                h.apply(&[poisoned]);
            }
            13 => {
                // A restart mid-queue: the next controller rebuilds the waiting room first.
                h.fleet.stop();
                h.fleet.start(h.settings.clone());
            }
            14 if !tenants.is_empty() => {
                // Deleted and re-created under the same name at once: a new UID.
                let at = rng.usize(0..tenants.len());
                let name = tenants[at].clone();
                h.delete_tenant(&name);
                // Re-created as soon as the old one is gone (its finalizer released first).
                let mut gone = false;
                for _ in 0..250 {
                    if h.tenant(&name).is_none() {
                        gone = true;
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(4)).await;
                }
                if gone {
                    h.apply(&[tenant(&name)
                        .resources(rng.i64(1..=16), rng.i64(1..=64), rng.i64(1..=1000))
                        .manifest()]);
                } else {
                    tenants.swap_remove(at);
                }
            }
            15 => {
                // A node the types cannot hold (threads as text): its tenants stay on it, and
                // none is placed again elsewhere, until it is fixed.
                let name = NODE_NAMES[rng.usize(0..3)];
                if exists(&h, name) {
                    // Fixed to 64 threads at the end, never less than it had: no exemption.
                    let threads = rng.i64(4..=64).to_string();
                    h.apply(&[node_spec(name, json!({"capacity": {"threads": threads}}))]);
                    broken.push(name);
                }
            }
            16 if !tenants.is_empty() => {
                // A tenant made unreadable, then deleted: released by its key.
                let name = tenants.swap_remove(rng.usize(0..tenants.len()));
                let unreadable = json!({"mode": "Cluster", "replicas": 2_147_483_648_i64});
                h.apply(&[tenant_spec(&name, unreadable)]);
                h.delete_tenant(&name);
            }
            _ => {}
        }
        if rng.u8(0..3) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(rng.u64(0..20))).await;
        }
    }
    for name in broken {
        if h.fleet.api.get(GROUP, "nodes", None, name).is_some() {
            if threads_of.get(name).is_some_and(|before| 64 < *before) {
                h.lowered.insert(name.to_owned());
            }
            h.apply(&[node_spec(name, json!({"capacity": {"threads": 64}}))]);
        }
    }
    h.fleet.api.clear_faults();
    h.settle().await;
    h.assert_invariants();
}

/// Runs `case` for `TP_SOAK_CASES` seeds (default 6) from `TP_SOAK_SEED` (default 1).
pub async fn seeded<F: std::future::Future<Output = ()>>(what: &str, case: impl Fn(u64) -> F) {
    let cases: u64 = std::env::var("TP_SOAK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let first: u64 = std::env::var("TP_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for seed in first..first + cases {
        eprintln!("{what} case seed {seed}");
        case(seed).await;
    }
    eprintln!("{what}: {cases} cases from seed {first}, all invariants held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_random_soak_keeps_every_invariant() {
    seeded("soak", soak_case).await;
}
