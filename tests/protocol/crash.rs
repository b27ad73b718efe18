//! Crashes at every write. For each write the controller makes in a scenario (the seed's, and a
//! drain of the seed fleet), two runs: the write commits and its response is lost; or the
//! controller dies right after the write and starts again. Each run must end exactly as the
//! fault-free run: same placements, nothing leaked, lost or released twice, and every step of
//! the scenario checks its own numbers.

use std::future::Future;
use std::pin::Pin;

use futures::StreamExt;
use inmem_apiserver::{Fault, Stall};
use serde_json::json;
use tenant_placer::api::TenantPhase;

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

/// The fault-free run: its placements and how many writes the controller made.
async fn baseline(scenario: Scenario) -> (Placements, u64) {
    let h = Harness::start(&seed_nodes()).await;
    h.fleet.api.reset_stats();
    scenario(&h).await;
    (h.placements(), h.fleet.api.stats().write_requests())
}

async fn run_with(scenario: Scenario, crash: Crash, at_write: u64) -> Placements {
    let h = Harness::start(&seed_nodes()).await;
    h.fleet.api.reset_stats();
    let after = u32::try_from(at_write).unwrap();
    let restarter = match crash {
        Crash::ResponseLost => {
            h.fleet
                .api
                .inject(Fault::writes().after(after).commit_then_fail());
            None
        }
        Crash::ControllerDies => {
            let stall = Stall::default();
            h.fleet
                .api
                .inject(Fault::writes().after(after).commit_then_stall(&stall));
            let (fleet, settings) = (h.fleet.clone(), h.settings.clone());
            Some(tokio::spawn(async move {
                stall.0.notified().await;
                // Abort the controller with the write committed and unanswered, start a new one.
                fleet.start(settings);
            }))
        }
    };
    scenario(&h).await;
    if let Some(restarter) = restarter {
        // NB: how engine batches fall varies from run to run, and with it the number of writes
        // (a drain's moves may share a Node write or not): a run that made no write at this
        // index is a fault-free run, checked all the same.
        let made = h.fleet.api.stats().write_requests();
        assert!(
            restarter.is_finished() || made <= at_write,
            "{crash:?} at write {at_write}: the fault never fired in a run of {made} writes"
        );
    }
    h.placements()
}

/// Runs `scenario` with a crash of each kind at each of its writes; every run must end as the
/// fault-free run. Returns how many writes the scenario makes.
async fn crash_at_every_write(name: &str, scenario: Scenario, least_writes: u64) -> u64 {
    let (expected, writes) = baseline(scenario).await;
    assert!(writes >= least_writes, "{name} makes {writes} writes");
    let runs: Vec<(Crash, u64)> = (0..writes)
        .flat_map(|i| [(Crash::ResponseLost, i), (Crash::ControllerDies, i)])
        .collect();
    let results: Vec<_> = futures::stream::iter(runs)
        .map(|(crash, at)| async move { (crash, at, run_with(scenario, crash, at).await) })
        .buffer_unordered(4)
        .collect()
        .await;
    for (crash, at, placements) in results {
        assert_eq!(
            placements, expected,
            "{name}: {crash:?} at write {at} ended differently"
        );
    }
    eprintln!(
        "{name}: {} crash runs over {writes} writes, all equal to the fault-free run",
        2 * writes
    );
    writes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_write_of_the_seed_scenario_ends_as_the_fault_free_run() {
    crash_at_every_write("the seed scenario", seed, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_write_of_a_drain_of_the_seed_fleet_ends_as_the_fault_free_run() {
    // Each move writes the target, the tenant's Migrating status, the source, and its Active
    // status: a crash can land between any two.
    crash_at_every_write("a drain of the seed fleet", drain_seed_fleet, 8).await;
}
