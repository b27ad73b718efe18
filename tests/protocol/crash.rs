//! Crashes at every write. For each write the controller makes in a scenario (the seed's, and a
//! drain of the seed fleet), two runs: the write commits and its response is lost; or the
//! controller dies right after the write and starts again. Each run must end exactly as the
//! fault-free run: same placements, nothing leaked, lost or released twice, and every step of
//! the scenario checks its own numbers.

use std::future::Future;
use std::pin::Pin;

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use inmem_apiserver::{EventType, Fault};
use serde_json::{Value, json};
use tenant_placer::api::{GROUP, TenantPhase};

use crate::seed::seed_scenario;
use crate::*;

/// A scenario a crash run replays: it drives the harness and checks its own steps.
type Scenario = for<'a> fn(&'a Harness) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

fn seed(h: &Harness) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
    Box::pin(seed_scenario(h))
}

/// Two tenants on node-eu-1, then node-eu-1 drained: both move to node-eu-2, make-before-break.
fn drain_seed_fleet(h: &Harness) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
    Box::pin(async move {
        h.apply(&[
            tenant("acme").resources(2, 4, 20).manifest(),
            tenant("globex").resources(4, 8, 40).manifest(),
        ]);
        h.settle().await;
        assert_eq!(h.allocated_threads("node-eu-1"), 6);
        h.apply(&[node_spec("node-eu-1", json!({"state": "Draining"}))]);
        // A positive sign first: a controller restarted by the crash may still be starting
        // (caches syncing, no write yet) when a quiet spell alone would count as settled.
        h.until("node-eu-1 drained", || {
            h.allocated_threads("node-eu-1") == 0
        })
        .await;
        h.settle().await;
        assert_eq!(h.allocated_threads("node-eu-1"), 0, "drained");
        assert_eq!(h.allocated_threads("node-eu-2"), 6, "both moved");
        for name in ["acme", "globex"] {
            let status = h.tenant(name).unwrap().status.unwrap();
            assert_eq!(
                (status.phase, status.node_name.as_str(), status.migration),
                (TenantPhase::Active, "node-eu-2", None)
            );
        }
        h.assert_invariants();
    })
}

#[derive(Clone, Copy, Debug)]
enum Crash {
    ResponseLost,
    ControllerDies,
}

/// Checks the order of writes as they commit, and keeps the trace for the message: an entry
/// leaves the fleet only when its tenant is being deleted or gone (a move writes its target
/// before its source), and a Tenant goes (its finalizer dropped) only once no Node holds its
/// entry. Returns what broke those rules.
fn check_write_order(h: &Harness) -> Arc<Mutex<Vec<String>>> {
    let broken = Arc::new(Mutex::new(Vec::new()));
    let trace = Mutex::new(Vec::new());
    let sink = broken.clone();
    h.fleet.api.on_commit(move |commit| {
        if commit.group != GROUP {
            return;
        }
        let mut trace = trace.lock().unwrap();
        trace.push(format!(
            "{:?} {}/{}",
            commit.event, commit.resource, commit.name
        ));
        let held_by = |node: &Value| -> Vec<String> {
            node["status"]["allocations"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a["uid"].as_str().map(str::to_owned))
                .collect()
        };
        let nodes = commit.list(GROUP, "nodes");
        let holder = |uid: &str| {
            nodes
                .iter()
                .find(|n| held_by(n).iter().any(|u| u == uid))
                .and_then(|n| n["metadata"]["name"].as_str())
        };
        let mut found = Vec::new();
        if commit.resource == "tenants" && commit.event == EventType::Deleted {
            let uid = commit.object["metadata"]["uid"]
                .as_str()
                .unwrap_or_default();
            if let Some(node) = holder(uid) {
                found.push(format!(
                    "tenant {} gone (its finalizer removed) while {node} still holds its entry",
                    commit.name
                ));
            }
        }
        if commit.resource == "nodes" {
            let tenants = commit.list(GROUP, "tenants");
            for uid in commit.old.map(held_by).unwrap_or_default() {
                let Some(tenant) = tenants
                    .iter()
                    .find(|t| t["metadata"]["uid"] == uid.as_str())
                else {
                    continue;
                };
                if holder(&uid).is_none() && tenant["metadata"]["deletionTimestamp"].is_null() {
                    found.push(format!(
                        "the entry of {} left {} while no other node holds it and the tenant is \
                         not being deleted",
                        tenant["metadata"]["name"], commit.name
                    ));
                }
            }
        }
        if !found.is_empty() {
            sink.lock().unwrap().extend(
                found
                    .into_iter()
                    .map(|f| format!("{f}; writes so far: {trace:?}")),
            );
        }
    });
    broken
}

/// The nodes a scenario starts from.
type Nodes = fn() -> Vec<Value>;

/// The fault-free run: its placements and how many writes the controller made.
async fn baseline(scenario: Scenario, nodes: Nodes) -> (Placements, u64) {
    let h = Harness::start(&nodes()).await;
    let broken = check_write_order(&h);
    h.fleet.api.reset_stats();
    scenario(&h).await;
    let broken = broken.lock().unwrap().clone();
    assert!(broken.is_empty(), "the fault-free run: {broken:#?}");
    (h.placements(), h.fleet.api.stats().write_requests())
}

/// One run with `crash` at write `at_write`: its placements, or `None` when the fault did not
/// fire (the run made fewer writes: how engine batches fall varies from run to run). Checks
/// the order of writes along the way.
async fn run_with(
    scenario: Scenario,
    nodes: Nodes,
    crash: Crash,
    at_write: u64,
) -> Option<Placements> {
    let h = Harness::start(&nodes()).await;
    let broken = check_write_order(&h);
    h.fleet.api.reset_stats();
    let after = u32::try_from(at_write).unwrap();
    let restarter = match crash {
        Crash::ResponseLost => {
            h.fleet
                .api
                .inject(Fault::writes().after(after).commit_then_fail());
            None
        }
        Crash::ControllerDies => Some(h.restart_after_write(after)),
    };
    scenario(&h).await;
    let broken = broken.lock().unwrap().clone();
    assert!(
        broken.is_empty(),
        "{crash:?} at write {at_write}: {broken:#?}"
    );
    let fired = h.fleet.api.stats().faults_fired == 1;
    if let Some(restarter) = restarter {
        assert_eq!(
            restarter.is_finished(),
            fired,
            "{crash:?} at write {at_write}: the controller restarted if and only if the write stalled"
        );
        restarter.abort();
    }
    fired.then(|| h.placements())
}

/// Runs `scenario` with a crash of each kind at each of its writes; every run must end as the
/// fault-free run. How engine batches fall varies from run to run, and with it the number of
/// writes (two tenants, or a drain's moves, may share a Node write or not): every run makes at
/// least `least_writes`, and a fault at one of those must fire (a run where it did not is run
/// again, a few times); one at a later write, up to the most a fault-free run made, fires only
/// in the runs that get that far: it is tried twice and counted. Returns the fewest writes.
async fn crash_at_every_write(
    name: &str,
    scenario: Scenario,
    nodes: Nodes,
    least_writes: u64,
) -> u64 {
    let (expected, mut fewest) = baseline(scenario, nodes).await;
    let mut most = fewest;
    for _ in 0..2 {
        let (placements, writes) = baseline(scenario, nodes).await;
        assert_eq!(placements, expected, "{name}: two fault-free runs differ");
        (fewest, most) = (fewest.min(writes), most.max(writes));
    }
    assert!(fewest >= least_writes, "{name} makes {fewest} writes");
    let runs: Vec<(Crash, u64)> = (0..most)
        .flat_map(|i| [(Crash::ResponseLost, i), (Crash::ControllerDies, i)])
        .collect();
    let results: Vec<_> = futures::stream::iter(runs)
        .map(|(crash, at)| async move {
            let attempts = if at < least_writes { 4 } else { 2 };
            for attempt in 1..=attempts {
                if let Some(placements) = run_with(scenario, nodes, crash, at).await {
                    return (crash, at, Some((attempt, placements)));
                }
            }
            assert!(
                at >= least_writes,
                "{name}: {crash:?} at write {at} never fired in {attempts} runs, though every \
                 run makes {least_writes} writes"
            );
            (crash, at, None)
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let (mut again, mut unfired) = (0, 0);
    for (crash, at, fired) in results {
        let Some((attempt, placements)) = fired else {
            unfired += 1;
            continue;
        };
        again += usize::from(attempt > 1);
        assert_eq!(
            placements, expected,
            "{name}: {crash:?} at write {at} ended differently"
        );
    }
    eprintln!(
        "{name}: {} crash runs over {fewest} to {most} writes, all equal to the fault-free run; \
         {again} needed another run for the fault to fire, {unfired} past {least_writes} writes \
         never fired",
        2 * most
    );
    fewest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_write_of_the_seed_scenario_ends_as_the_fault_free_run() {
    crash_at_every_write("the seed scenario", seed, seed_nodes, 18).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_write_of_a_drain_of_the_seed_fleet_ends_as_the_fault_free_run() {
    // Each move writes the target, the tenant's Migrating status, the source, and its Active
    // status: a crash can land between any two.
    crash_at_every_write(
        "a drain of the seed fleet",
        drain_seed_fleet,
        seed_nodes,
        13,
    )
    .await;
}

/// A three-replica Zones tenant placed over three zones, then grown, then one of its nodes
/// drained: every write of each step (three Node entries, three resizes, a move) may be the one
/// a crash lands on.
fn spread_placed_resized_drained(h: &Harness) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
    Box::pin(async move {
        h.apply(&[tenant("db")
            .resources(2, 4, 20)
            .spread(tenant_placer::api::TenantSpread::Zones, 3)
            .manifest()]);
        let threads = |h: &Harness| {
            ["a1", "a2", "b1", "b2", "c1", "c2"]
                .map(|n| h.allocated_threads(n))
                .to_vec()
        };
        h.until("db placed whole", || threads(h) == [2, 0, 2, 0, 2, 0])
            .await;
        h.settle().await;
        h.assert_invariants();
        h.apply(&[tenant_spec(
            "db",
            json!({"resources": {"threads": 3, "memoryGb": 4, "storageGb": 20}}),
        )]);
        h.until("db resized", || threads(h) == [3, 0, 3, 0, 3, 0])
            .await;
        h.settle().await;
        h.assert_invariants();
        h.apply(&[node_spec("b1", json!({"state": "Draining"}))]);
        h.until("b1 drained", || threads(h) == [3, 0, 0, 3, 3, 0])
            .await;
        h.settle().await;
        let status = h.tenant("db").unwrap().status.unwrap();
        assert_eq!(status.phase, TenantPhase::Active);
        let nodes: Vec<_> = status.placements.iter().map(|p| p.node.as_str()).collect();
        assert_eq!(nodes, ["a1", "b2", "c1"]);
        h.assert_invariants();
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_write_of_a_spread_placement_resize_and_drain_ends_as_the_fault_free_run() {
    crash_at_every_write(
        "a spread tenant placed, resized and drained",
        spread_placed_resized_drained,
        crate::spread::zoned_nodes,
        15,
    )
    .await;
}
