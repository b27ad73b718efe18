//! Crashes at every write. For each write the controller makes in the seed scenario, two runs:
//! the write commits and its response is lost; or the controller dies right after the write and
//! starts again. Each run must end exactly as the fault-free run: same placements, nothing
//! leaked, lost or released twice, and every step of the scenario checks its own numbers.

use futures::StreamExt;
use inmem_apiserver::{Fault, Stall};

use crate::seed::seed_scenario;
use crate::*;

#[derive(Clone, Copy, Debug)]
enum Crash {
    ResponseLost,
    ControllerDies,
}

/// The fault-free run: its placements and how many writes the controller made.
async fn baseline() -> (Placements, u64) {
    let h = Harness::start(&seed_nodes()).await;
    h.fleet.api.reset_stats();
    seed_scenario(&h).await;
    (h.placements(), h.fleet.api.stats().write_requests())
}

async fn run_with(crash: Crash, at_write: u64) -> Placements {
    let h = Harness::start(&seed_nodes()).await;
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
    seed_scenario(&h).await;
    if let Some(restarter) = restarter {
        assert!(
            restarter.is_finished(),
            "{crash:?} at write {at_write}: the fault never fired"
        );
    }
    h.placements()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_write_of_the_seed_scenario_ends_as_the_fault_free_run() {
    let (expected, writes) = baseline().await;
    assert!(writes >= 10, "the scenario makes {writes} writes");
    let runs: Vec<(Crash, u64)> = (0..writes)
        .flat_map(|i| [(Crash::ResponseLost, i), (Crash::ControllerDies, i)])
        .collect();
    let results: Vec<_> = futures::stream::iter(runs)
        .map(|(crash, at)| async move { (crash, at, run_with(crash, at).await) })
        .buffer_unordered(4)
        .collect()
        .await;
    for (crash, at, placements) in results {
        assert_eq!(
            placements, expected,
            "{crash:?} at write {at} ended differently"
        );
    }
    eprintln!(
        "{} crash runs over {writes} writes, all equal to the fault-free run",
        2 * writes
    );
}
