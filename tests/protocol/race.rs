//! Many placements at once: no node is ever over-committed, whatever interleaving happens.

use inmem_apiserver::Verb;
use tenant_placer::api::TenantPhase;

use crate::*;

/// 200 tenants of random sizes (seeded) against 3 nodes that can hold only part of them.
fn crowd(seed: u64) -> Vec<serde_json::Value> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..200)
        .map(|i| {
            tenant(&format!("t{i:03}"))
                .resources(rng.i64(1..=12), rng.i64(1..=48), rng.i64(1..=400))
                .manifest()
        })
        .collect()
}

fn three_nodes() -> Vec<serde_json::Value> {
    vec![
        node("n1").capacity(64, 256, 8000).manifest(),
        node("n2").capacity(48, 192, 6000).manifest(),
        node("n3").capacity(32, 128, 4000).manifest(),
    ]
}

fn assert_everyone_holds_one_reservation_or_waits(h: &Harness) -> (usize, usize) {
    let tenants = h.fleet.tenants();
    assert_eq!(tenants.len(), 200);
    let placed = tenants
        .iter()
        .filter(|t| t.status.as_ref().unwrap().phase == TenantPhase::Active)
        .count();
    let waiting = tenants
        .iter()
        .filter(|t| t.status.as_ref().unwrap().phase == TenantPhase::PendingCapacity)
        .count();
    assert_eq!(
        placed + waiting,
        200,
        "every tenant is Active or PendingCapacity"
    );
    let entries: usize = h
        .fleet
        .nodes()
        .iter()
        .map(|n| n.status.as_ref().unwrap().allocations.len())
        .sum();
    assert_eq!(
        entries, placed,
        "one entry per placed tenant, none for the waiting"
    );
    (placed, waiting)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_tenants_at_once_never_over_commit_a_node_at_any_write() {
    let h = Harness::start(&three_nodes()).await;
    h.apply(&crowd(7));
    h.settle().await;
    h.assert_invariants();
    let (placed, waiting) = assert_everyone_holds_one_reservation_or_waits(&h);
    // The fleet holds roughly 20 of the 200 (144 threads for an average ask of 6.5).
    assert!(
        placed >= 10 && waiting >= 100,
        "the crowd overflows the fleet: {placed} placed, {waiting} waiting"
    );
}

/// Three controller processes (each with its own single writer and concurrency 8) race on the
/// same nodes, as during a botched failover: only resourceVersion guards keep them apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_controllers_racing_on_the_same_nodes_never_over_commit_and_converge() {
    let h = Harness::start(&three_nodes()).await;
    let others: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(tenant_placer::controller::run(
                h.fleet.client.clone(),
                settings(),
            ))
        })
        .collect();
    // The controllers decide in the same order, so a round may pass without a collision:
    // crowds (new ones, then resizes of the same tenants) come until one has met a 409.
    let mut conflicts = 0;
    for seed in [11, 12, 13, 14, 15] {
        h.fleet.api.reset_stats();
        let commits_before = h.node_commits.load(std::sync::atomic::Ordering::SeqCst);
        h.apply(&crowd(seed));
        h.settle().await;
        h.assert_invariants();
        // Node writes are status PUTs and finalizer patches; every one that did not commit was
        // refused with 409 (no other fault is injected).
        let stats = h.fleet.api.stats();
        let node_writes = stats.count(Verb::Update, "nodes") + stats.count(Verb::Patch, "nodes");
        let committed = h.node_commits.load(std::sync::atomic::Ordering::SeqCst) - commits_before;
        eprintln!("round {seed}: node writes {node_writes}; committed: {committed}");
        conflicts += node_writes.saturating_sub(committed);
        if conflicts > 0 {
            break;
        }
    }
    for other in others {
        other.abort();
    }
    h.assert_invariants();
    assert_everyone_holds_one_reservation_or_waits(&h);
    assert!(
        conflicts > 0,
        "the controllers did race: some node writes met a 409"
    );
}
