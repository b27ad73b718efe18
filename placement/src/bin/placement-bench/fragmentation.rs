//! The fragmentation study: one seeded trace of arrivals and departures, replayed under each
//! policy through the real planning path (`plan_tenant_with`, `plan_release`, ledgers rebuilt
//! from their entries after every write).
//!
//! The trace opens with the second seed's example, on four hosts of 8 threads (32 GB, 400 GB):
//!
//! 1. pinned (the "some placements" before the example, the same for every policy): 5 threads
//!    on h01, h02 and h03, 1 on h04, so three hosts have 3 threads free and one has 7;
//! 2. a 6-thread request: only h04 can take it, under every policy;
//! 3. a stream of 1-thread requests (2 of them), the 5-thread tenant on h03 leaves (the seed's
//!    hosts see churn too: without a departure no host ever has more than 3 free again, under
//!    any policy), then 5 more 1-thread requests;
//! 4. snapshot, then a request needing more than 3 threads (4).
//!
//! Every tenant of the example is `k × (1 thread, 4 GB, 50 GB)`, the hosts' own proportions, so
//! the three dimensions move together and the story is the seed's one-dimensional one. Least
//! loaded sends the stream to the emptiest host and ends with every host at 1–3 free; best fit
//! packs the stream onto the fullest hosts and keeps h03 whole.
//!
//! Then twelve larger hosts join and the seeded part runs: arrivals of mixed sizes (1–24 units)
//! and profiles (balanced, compute-, memory- or storage-heavy), each leaving after a random
//! number of later arrivals. A request that fits nowhere is rejected (counted, not queued); a
//! departure of a tenant that was rejected is a no-op. RoundRobin's turn is the arrival count.

use std::fmt::Write as _;

use placement::{
    Dimension, Edit, Entry, NodeLedger, NodeState, Plan, Policy, Resources, TenantWants,
    plan_release, plan_tenant_with,
};

use crate::fleet::Rng;

/// The unit the example and the "largest placeable request" are measured in.
pub const UNIT: Resources = Resources::new(1, 4, 50);
/// The example's hosts.
pub const SEED_HOSTS: [&str; 4] = ["h01", "h02", "h03", "h04"];
/// The request that needs more than 3 threads, at the end of the example.
pub const BIG_REQUEST_UNITS: u64 = 4;

#[derive(Clone, Debug)]
pub enum Event {
    /// A host joins.
    AddHost {
        name: String,
        capacity: Resources,
    },
    /// A reservation made before the trace starts, on a given host (not by a policy).
    Pin {
        id: usize,
        host: &'static str,
        resources: Resources,
    },
    Arrive {
        id: usize,
        resources: Resources,
    },
    Depart {
        id: usize,
    },
    /// Record every host's free room (the example's picture).
    Snapshot,
}

#[derive(Clone, Debug)]
pub struct Trace {
    pub seed: u64,
    pub events: Vec<Event>,
    /// The id of the example's closing request (more than 3 threads).
    pub big_request: usize,
}

fn units(k: u64) -> Resources {
    UNIT.checked_mul(k).unwrap_or(Resources::ZERO)
}

/// The trace: the seed's example, then `arrivals` seeded arrivals with departures.
pub fn trace(seed: u64, arrivals: usize) -> Trace {
    let mut events = Vec::new();
    let mut next_id = 0usize;
    let mut id = || {
        next_id = next_id.saturating_add(1);
        next_id
    };
    for host in SEED_HOSTS {
        events.push(Event::AddHost {
            name: host.to_owned(),
            capacity: units(8),
        });
    }
    let pinned_h03 = id();
    let pins = [
        (id(), "h01", 5),
        (id(), "h02", 5),
        (pinned_h03, "h03", 5),
        (id(), "h04", 1),
    ];
    for (id, host, k) in pins {
        events.push(Event::Pin {
            id,
            host,
            resources: units(k),
        });
    }
    events.push(Event::Arrive {
        id: id(),
        resources: units(6),
    });
    for _ in 0..2 {
        events.push(Event::Arrive {
            id: id(),
            resources: units(1),
        });
    }
    events.push(Event::Depart { id: pinned_h03 });
    for _ in 0..5 {
        events.push(Event::Arrive {
            id: id(),
            resources: units(1),
        });
    }
    events.push(Event::Snapshot);
    let big_request = id();
    events.push(Event::Arrive {
        id: big_request,
        resources: units(BIG_REQUEST_UNITS),
    });

    // The fleet grows: eight hosts of 32 units and four of 64.
    for i in 5..=16u64 {
        let size = if i <= 12 { 32 } else { 64 };
        events.push(Event::AddHost {
            name: format!("h{i:02}"),
            capacity: units(size),
        });
    }

    let mut rng = Rng::new(seed);
    // Departures due at each later arrival step.
    let mut due: Vec<Vec<usize>> = vec![Vec::new(); arrivals];
    for step in 0..arrivals {
        if let Some(leaving) = due.get_mut(step) {
            for id in std::mem::take(leaving) {
                events.push(Event::Depart { id });
            }
        }
        let tenant = id();
        events.push(Event::Arrive {
            id: tenant,
            resources: random_tenant(&mut rng),
        });
        let lifetime = usize::try_from(rng.below(200))
            .unwrap_or(0)
            .saturating_add(40);
        if let Some(slot) = due.get_mut(step.saturating_add(lifetime)) {
            slot.push(tenant);
        }
    }
    Trace {
        seed,
        events,
        big_request,
    }
}

/// A tenant of mixed size and shape.
fn random_tenant(rng: &mut Rng) -> Resources {
    let k: u64 = match rng.below(100) {
        0..=29 => 1,
        30..=54 => 2,
        55..=74 => 4,
        75..=89 => 8,
        90..=96 => 16,
        _ => 24,
    };
    let half = k.div_ceil(2);
    let per_unit = |threads: u64, memory_gb: u64, storage_gb: u64| {
        Resources::new(
            threads,
            memory_gb.saturating_mul(k),
            storage_gb.saturating_mul(k),
        )
    };
    match rng.below(10) {
        // Balanced: the hosts' own proportions.
        0..=3 => per_unit(k, 4, 50),
        // Compute-heavy.
        4..=5 => per_unit(k, 1, 10),
        // Memory-heavy.
        6..=7 => per_unit(half, 8, 25),
        // Storage-heavy.
        _ => per_unit(half, 2, 200),
    }
}

/// What one policy made of the trace.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub policy: Policy,
    pub arrivals: usize,
    pub placed: usize,
    /// Arrivals needing at least 16 units' worth in some dimension, and how many were placed:
    /// where fragmentation bites.
    pub large_arrivals: usize,
    pub large_placed: usize,
    /// Free threads per example host at the snapshot, in host order.
    pub snapshot: Vec<(String, Resources)>,
    /// Where the example's closing request went (None: no fit).
    pub big_request_node: Option<String>,
    /// Σ allocated / Σ capacity per dimension at the end, in percent.
    pub utilisation: [f64; 3],
    /// The largest free amount per dimension on one eligible node at the end.
    pub largest_free: Resources,
    /// The largest k such that k × UNIT fits on one eligible node at the end.
    pub largest_units: u64,
}

/// At least 16 units' worth (16 threads, 64 GB or 800 GB) in some dimension.
pub fn is_large(resources: &Resources) -> bool {
    let sixteen = units(16);
    Dimension::ALL
        .iter()
        .any(|d| resources.get(*d) >= sixteen.get(*d))
}

fn uid(id: usize) -> String {
    format!("t{id:05}")
}

/// Replaces one ledger's entries as the edit says (what the controller's write does).
fn apply(ledgers: &mut [NodeLedger], edit: &Edit) -> bool {
    let Some(ledger) = ledgers.iter_mut().find(|l| l.name() == edit.node) else {
        return false;
    };
    let rebuilt = NodeLedger::new(
        ledger.name(),
        ledger.state(),
        ledger.capacity(),
        ledger.edited_entries(edit),
    );
    match rebuilt {
        Ok(rebuilt) => {
            *ledger = rebuilt.with_overcommit(ledger.overcommit());
            true
        }
        Err(_) => false,
    }
}

pub fn replay(policy: Policy, trace: &Trace) -> Outcome {
    let mut ledgers: Vec<NodeLedger> = Vec::new();
    let mut arrivals = 0usize;
    let mut placed = 0usize;
    let (mut large_arrivals, mut large_placed) = (0usize, 0usize);
    let mut turn: u64 = 0;
    let mut snapshot = Vec::new();
    let mut big_request_node = None;
    for event in &trace.events {
        match event {
            Event::AddHost { name, capacity } => {
                if let Ok(ledger) =
                    NodeLedger::new(name.clone(), NodeState::Online, *capacity, vec![])
                {
                    ledgers.push(ledger);
                }
            }
            Event::Pin {
                id,
                host,
                resources,
            } => {
                let edit = Edit {
                    kind: placement::EditKind::Reserve,
                    node: (*host).to_owned(),
                    uid: uid(*id),
                    entry: Some(Entry {
                        uid: uid(*id).into(),
                        tenant: format!("study/{}", uid(*id)).into(),
                        resources: *resources,
                        replicas: None,
                    }),
                };
                apply(&mut ledgers, &edit);
            }
            Event::Arrive { id, resources } => {
                arrivals = arrivals.saturating_add(1);
                let uid = uid(*id);
                let tenant = format!("study/{uid}");
                let wants = TenantWants {
                    uid: &uid,
                    tenant: &tenant,
                    footprint: *resources,
                    suspend: false,
                    status_node: None,
                    migration: None,
                    asked: None,
                    node_selector: None,
                };
                let plan = plan_tenant_with(policy, &wants, &ledgers, turn);
                turn = turn.wrapping_add(1);
                let node = match plan {
                    Plan::Edit(edit) if apply(&mut ledgers, &edit) => {
                        placed = placed.saturating_add(1);
                        Some(edit.node)
                    }
                    _ => None,
                };
                if is_large(resources) {
                    large_arrivals = large_arrivals.saturating_add(1);
                    if node.is_some() {
                        large_placed = large_placed.saturating_add(1);
                    }
                }
                if *id == trace.big_request {
                    big_request_node = node;
                }
            }
            Event::Depart { id } => {
                if let Some(edit) = plan_release(&uid(*id), &ledgers) {
                    apply(&mut ledgers, &edit);
                }
            }
            Event::Snapshot => {
                snapshot = ledgers
                    .iter()
                    .map(|l| (l.name().to_owned(), l.view().free()))
                    .collect();
            }
        }
    }
    let (allocated, capacity) = ledgers.iter().fold(
        (Resources::ZERO, Resources::ZERO),
        |(allocated, capacity), l| {
            (
                allocated.checked_add(l.allocated()).unwrap_or(allocated),
                capacity.checked_add(l.capacity()).unwrap_or(capacity),
            )
        },
    );
    let utilisation = Dimension::ALL.map(|d| {
        let cap = capacity.get(d) as f64;
        if cap > 0.0 {
            100.0 * allocated.get(d) as f64 / cap
        } else {
            0.0
        }
    });
    let eligible: Vec<_> = ledgers
        .iter()
        .map(NodeLedger::view)
        .filter(|v| v.takes_new_tenants())
        .collect();
    let largest_free = eligible.iter().fold(Resources::ZERO, |best, v| {
        let free = v.free();
        Resources::from_fn(|d| best.get(d).max(free.get(d)))
    });
    let largest_units = eligible
        .iter()
        .map(|v| {
            let free = v.free();
            Dimension::ALL
                .iter()
                .map(|d| free.get(*d).checked_div(UNIT.get(*d)).unwrap_or(u64::MAX))
                .min()
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0);
    Outcome {
        policy,
        arrivals,
        placed,
        large_arrivals,
        large_placed,
        snapshot,
        big_request_node,
        utilisation,
        largest_free,
        largest_units,
    }
}

/// The study's tables, in Markdown.
pub fn render(trace: &Trace, outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "The seed's example: four hosts of 8 threads (32 GB, 400 GB); free threads after the \
         6-thread request and the 1-thread stream (one 5-thread tenant left mid-stream), then a \
         {BIG_REQUEST_UNITS}-thread request\n"
    );
    let _ = writeln!(
        out,
        "| policy | h01 | h02 | h03 | h04 | {BIG_REQUEST_UNITS}-thread request |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---|");
    for o in outcomes {
        let free: Vec<String> = SEED_HOSTS
            .iter()
            .map(|host| {
                o.snapshot
                    .iter()
                    .find(|(name, _)| name == host)
                    .map_or("-".to_owned(), |(_, free)| free.threads.to_string())
            })
            .collect();
        let big = o
            .big_request_node
            .as_deref()
            .map_or("no fit".to_owned(), |n| format!("placed on {n}"));
        let _ = writeln!(out, "| {} | {} | {big} |", o.policy, free.join(" | "));
    }
    let _ = writeln!(
        out,
        "\nThe whole trace (seed {:#x}: the example, then 12 more hosts, {} arrivals in all with \
         departures), at the end\n",
        trace.seed,
        outcomes.first().map_or(0, |o| o.arrivals)
    );
    let _ = writeln!(
        out,
        "| policy | placed | share placed | large placed (>= 16 units) | threads used | \
         memory used | storage used | largest free on one node (thr / GB / GB) | \
         largest placeable k x (1 thr, 4 GB, 50 GB) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for o in outcomes {
        let [t, m, s] = o.utilisation;
        let _ = writeln!(
            out,
            "| {} | {} / {} | {:.1}% | {} / {} ({:.1}%) | {t:.1}% | {m:.1}% | {s:.1}% | \
             {} / {} / {} | {} |",
            o.policy,
            o.placed,
            o.arrivals,
            share(o),
            o.large_placed,
            o.large_arrivals,
            large_share(o),
            o.largest_free.threads,
            o.largest_free.memory_gb,
            o.largest_free.storage_gb,
            o.largest_units
        );
    }
    out
}

pub fn share(o: &Outcome) -> f64 {
    percent(o.placed, o.arrivals)
}

pub fn large_share(o: &Outcome) -> f64 {
    percent(o.large_placed, o.large_arrivals)
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    100.0 * part as f64 / whole as f64
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn free_threads(o: &Outcome) -> Vec<u64> {
        o.snapshot.iter().map(|(_, free)| free.threads).collect()
    }

    #[test]
    fn the_seed_example_shows_least_loaded_fragmenting_and_best_fit_packing() {
        let trace = trace(1, 0);
        let by = |policy| replay(policy, &trace);
        // h04 takes the 6-thread request under every policy (7 free, the others 3), leaving 1.
        // BestFit: the stream goes to the fullest host that fits: h04 (1 → 0), h01 (3 → 2);
        // h03's tenant leaves (3 → 8); then h01 (2 → 1 → 0) and h02 (3 → 2 → 1 → 0).
        let best = by(Policy::BestFit);
        assert_eq!(free_threads(&best), vec![0, 0, 8, 0]);
        assert_eq!(best.big_request_node.as_deref(), Some("h03"));
        // LeastLoaded: the emptiest host: h01, h02 (3 → 2 each); h03 → 8; then h03 five times
        // (8 → 3): every host at 1–3 free and the 4-thread request fits nowhere.
        let least = by(Policy::LeastLoaded);
        assert_eq!(free_threads(&least), vec![2, 2, 3, 1]);
        assert_eq!(least.big_request_node, None);
        // FirstFit: h01 (3 → 1); h03 → 8; h01 (1 → 0), h02 (3 → 0), h03 (8 → 7).
        let first = by(Policy::FirstFit);
        assert_eq!(free_threads(&first), vec![0, 0, 7, 1]);
        assert_eq!(first.big_request_node.as_deref(), Some("h03"));
        // RoundRobin, turns 1..=2 then 3..=7 (turn 0 was the 6-thread request): h02, h03;
        // h03 → 7; h04, h01, h02, h03, then turn 7 starts at h04 (0 free) and wraps to h01.
        let round = by(Policy::RoundRobin);
        assert_eq!(free_threads(&round), vec![1, 1, 6, 0]);
        assert_eq!(round.big_request_node.as_deref(), Some("h03"));
    }

    #[test]
    fn the_trace_is_the_same_for_every_run_of_a_seed() {
        let a = replay(Policy::BestFit, &trace(7, 300));
        let b = replay(Policy::BestFit, &trace(7, 300));
        assert_eq!((a.placed, a.largest_free), (b.placed, b.largest_free));
        assert_eq!(a.arrivals, 300 + 9);
    }
}
