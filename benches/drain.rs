//! Draining one node that holds many tenants, in a large fleet, under the in-memory API's cost
//! model (a real 2-core control plane: 3 ms per write, 550 writes per second). Prints the time
//! from `spec.state: Draining` until the node holds nothing and every tenant rests `Active`
//! elsewhere, the API writes per move (goal: at most 2.5), and the moves per second.
//!
//! `cargo bench --bench drain -- [--nodes N] [--tenants N] [--max-migrations N]
//! [--concurrency N] [--events all|problems] [--no-cost] [--runs N]`
//! (defaults: 1,000 nodes, 1,000 tenants on the drained node, the controller's defaults).
//!
//! The controller runs in-process (`sim::Fleet`), as in `simulate`; the API emulates the chart's
//! MutatingAdmissionPolicies (finalizers put on at create), as a 1.36 cluster does.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]
#![allow(clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

use serde_json::json;
use tenant_placer::api::{GROUP, TenantPhase};
use tenant_placer::controller::{EventLevel, Handles, Settings};
use tenant_placer::sim::Fleet;
use tenant_placer::sim::invariants::{self, Quiescence};
use tenant_placer::testing;

mod common;
use common::{arg, flag};

const DRAINED: &str = "node-00000";
const VERSION: &str = "placement.tenant-placer.dev/v1alpha1";

/// What one drain measured.
#[derive(Debug)]
struct Drain {
    seconds: f64,
    writes: u64,
    moves: usize,
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}

async fn bench() {
    let runs = arg("--runs", 3usize);
    let mut drains = Vec::new();
    for run in 0..runs {
        let drain = drain_once().await;
        eprintln!("run {run}: {drain:?}");
        drains.push(drain);
    }
    let mut seconds: Vec<f64> = drains.iter().map(|d| d.seconds).collect();
    seconds.sort_by(f64::total_cmp);
    let mut per_move: Vec<f64> = drains
        .iter()
        .map(|d| d.writes as f64 / d.moves as f64)
        .collect();
    per_move.sort_by(f64::total_cmp);
    let median = |v: &[f64]| v[v.len() / 2];
    let moves = drains[0].moves;
    println!(
        "drain: {} nodes, {moves} tenants on {DRAINED}, max-migrations {}, events {}, {}; {runs} runs",
        arg("--nodes", 1000usize),
        arg("--max-migrations", Settings::default().max_migrations),
        arg("--events", "problems".to_owned()),
        if flag("--no-cost") {
            "no cost model"
        } else {
            "cost model 3 ms per write, 550 writes/s"
        },
    );
    println!(
        "time to empty: median {:.2} s (min {:.2}, max {:.2}); {:.0} moves/s",
        median(&seconds),
        seconds[0],
        seconds[seconds.len() - 1],
        moves as f64 / median(&seconds)
    );
    println!(
        "API writes per move: median {:.2} (min {:.2}, max {:.2})",
        median(&per_move),
        per_move[0],
        per_move[per_move.len() - 1]
    );
}

async fn quiet(fleet: &Fleet) {
    fleet
        .settle(Duration::from_millis(300), Duration::from_secs(600))
        .await
        .unwrap();
}

/// One fleet: every tenant placed on the drained node (the others cordoned meanwhile), the others
/// brought Online, then the drain, measured from the patch to rest.
async fn drain_once() -> Drain {
    let (nodes, tenants) = (arg("--nodes", 1000usize), arg("--tenants", 1000usize));
    let fleet = Fleet::new().unwrap();
    fleet.admit_finalizers(true);
    let api = fleet.api.clone();
    let big = u64::try_from(tenants).unwrap() as i64;
    api.create(
        testing::node(DRAINED)
            .capacity(big * 2, big * 4, big * 20)
            .manifest(),
    )
    .unwrap();
    for i in 1..nodes {
        let node = testing::node(&format!("node-{i:05}"))
            .capacity(64, 256, 8000)
            .state(tenant_placer::api::NodeState::Cordoned);
        api.create(node.manifest()).unwrap();
    }
    for i in 0..tenants {
        let tenant = testing::tenant(&format!("t{i:05}")).resources(2, 4, 20);
        api.create(tenant.manifest()).unwrap();
    }
    let events = match arg("--events", "problems".to_owned()).as_str() {
        "all" => EventLevel::All,
        _ => EventLevel::Problems,
    };
    let settings = Settings {
        max_migrations: arg("--max-migrations", Settings::default().max_migrations),
        concurrency: arg("--concurrency", Settings::default().concurrency),
        events,
        ..Settings::default()
    };
    fleet.start_with(settings, Handles::default());
    quiet(&fleet).await;
    for i in 1..nodes {
        api.apply(json!({"apiVersion": VERSION, "kind": "Node",
                         "metadata": {"name": format!("node-{i:05}")}, "spec": {"state": "Online"}}))
            .unwrap();
    }
    quiet(&fleet).await;
    let held = |fleet: &Fleet| {
        fleet
            .nodes()
            .into_iter()
            .find(|n| n.metadata.name.as_deref() == Some(DRAINED))
            .and_then(|n| n.status)
            .map_or(0, |s| s.allocations.len())
    };
    assert_eq!(held(&fleet), tenants, "every tenant starts on {DRAINED}");
    if !flag("--no-cost") {
        api.set_cost_model(Some(inmem_apiserver::CostModel::REAL_TWO_CORE));
    }
    api.reset_stats();
    let started = Instant::now();
    api.apply(
        json!({"apiVersion": VERSION, "kind": "Node", "metadata": {"name": DRAINED},
                     "spec": {"state": "Draining"}}),
    )
    .unwrap();
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let at_rest = held(&fleet) == 0
            && fleet.tenants().iter().all(|t| {
                t.status
                    .as_ref()
                    .is_some_and(|s| s.phase == TenantPhase::Active && s.migration.is_none())
            });
        if at_rest {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the drain did not finish"
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    // Writes counted through rest (the last status write is what the loop waited for).
    let writes = api.stats().write_requests();
    api.set_cost_model(None);
    quiet(&fleet).await;
    let checked = invariants::check(
        &fleet.nodes(),
        &fleet.tenants(),
        &Default::default(),
        Quiescence::Settled,
    );
    assert!(checked.is_ok(), "{checked:?}");
    assert!(
        api.list(GROUP, "nodes").len() == nodes,
        "the drained node stays (it is drained, not deleted)"
    );
    fleet.stop();
    Drain {
        seconds,
        writes,
        moves: tenants,
    }
}
