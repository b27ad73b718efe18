//! Choice latency per policy and fleet size, and the first-fit index against the scan.
//!
//! Each case runs one decision many times on an unchanging fleet. A sample is the time of a
//! batch of back-to-back decisions divided by the batch size, the batch chosen so that a sample
//! lasts at least ~2 µs (so the clock's own cost, ~20–40 ns, stays below 2% of it); slow cases
//! use batches of 1. The median and the 99th percentile are taken over the samples.

use std::hint::black_box;
use std::time::{Duration, Instant};

use placement::{
    FirstFitIndex, Policy, Resources, consolidate, consolidate_by_scan, first_fit, place,
};

use crate::fleet::{Fleet, REQUEST, consolidation_ledgers};

/// One measured case.
#[derive(Clone, Debug)]
pub struct Row {
    pub case: String,
    pub nodes: usize,
    pub median_ns: f64,
    pub p99_ns: f64,
    pub samples: usize,
    pub batch: u64,
}

/// Runs `decide` repeatedly for about `budget` and returns per-decision statistics in ns.
pub fn measure(budget: Duration, mut decide: impl FnMut()) -> (f64, f64, usize, u64) {
    // Warm up and estimate one decision's cost.
    let warm = Instant::now();
    let mut calls: u64 = 0;
    let warm_budget = budget.checked_div(10).unwrap_or_default();
    while warm.elapsed() < warm_budget || calls < 3 {
        decide();
        calls = calls.saturating_add(1);
    }
    let per_call = warm.elapsed().as_secs_f64() / calls as f64;
    let batch = ((2e-6 / per_call).ceil() as u64).max(1);
    let mut samples: Vec<f64> = Vec::new();
    let start = Instant::now();
    while (start.elapsed() < budget || samples.len() < 31) && samples.len() < 200_000 {
        let t = Instant::now();
        for _ in 0..batch {
            decide();
        }
        samples.push(t.elapsed().as_secs_f64() * 1e9 / batch as f64);
    }
    samples.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        let last = samples.len().saturating_sub(1);
        let at = ((last as f64) * q).round() as usize;
        samples.get(at.min(last)).copied().unwrap_or(f64::NAN)
    };
    (pick(0.5), pick(0.99), samples.len(), batch)
}

fn row(case: &str, nodes: usize, budget: Duration, decide: impl FnMut()) -> Row {
    let (median_ns, p99_ns, samples, batch) = measure(budget, decide);
    Row {
        case: case.to_owned(),
        nodes,
        median_ns,
        p99_ns,
        samples,
        batch,
    }
}

/// Every policy (scan) and the indexed first fit at each size.
pub fn policy_rows(sizes: &[usize], budget: Duration) -> Vec<Row> {
    let mut rows = Vec::new();
    for &n in sizes {
        let fleet = Fleet::mixed(n, 0x5EED_0001);
        let views = fleet.views();
        for policy in Policy::ALL {
            let mut turn: u64 = 0;
            let label = format!("{policy} (scan)");
            rows.push(row(&label, n, budget, || {
                turn = turn.wrapping_add(1);
                black_box(place(policy, black_box(&views), black_box(&REQUEST), turn));
            }));
        }
        let index = FirstFitIndex::new(&views);
        rows.push(row("FirstFit (indexed)", n, budget, || {
            black_box(black_box(&index).decide(black_box(&REQUEST)));
        }));
    }
    rows
}

/// The target: 10,000 nodes, the first 9,000 by name full.
pub struct Target {
    pub naive: Row,
    pub indexed: Row,
    pub update: Row,
}

pub fn target(budget: Duration) -> Target {
    let (n, full) = (10_000, 9_000);
    let fleet = Fleet::first_full(n, full);
    let views = fleet.views();
    let request = Resources::new(2, 4, 20);
    let naive = row("FirstFit scan, first 9,000 full", n, budget, || {
        black_box(first_fit(black_box(&views), black_box(&request)));
    });
    let mut index = FirstFitIndex::new(&views);
    let indexed = row("FirstFit indexed, first 9,000 full", n, budget, || {
        black_box(black_box(&index).decide(black_box(&request)));
    });
    // A reservation and its release on the chosen node, as the index sees them: two updates.
    let name = fleet
        .nodes
        .get(full)
        .map(|node| node.name.clone())
        .unwrap_or_default();
    let mut held = false;
    let update = row("index update (one reservation)", n, budget, || {
        held = !held;
        let allocated = if held { request } else { Resources::ZERO };
        let _ = black_box(index.update(black_box(&name), allocated));
    });
    Target {
        naive,
        indexed,
        update,
    }
}

/// The table, in Markdown.
pub fn render(rows: &[Row], target: &Target) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "Choice latency, request {} (ns per decision)\n\n",
        REQUEST
    ));
    out.push_str("| case | nodes | median ns | p99 ns | samples x batch |\n");
    out.push_str("|---|---:|---:|---:|---:|\n");
    for row in rows
        .iter()
        .chain([&target.naive, &target.indexed, &target.update])
    {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} x {} |\n",
            row.case,
            row.nodes,
            ns(row.median_ns),
            ns(row.p99_ns),
            row.samples,
            row.batch
        ));
    }
    let ratio = target.naive.median_ns / target.indexed.median_ns;
    let fast = target.indexed.median_ns <= 1000.0;
    let faster = ratio >= 10.0;
    out.push_str(&format!(
        "\nTarget (10,000 nodes, first 9,000 by name full, request 2 threads, 4 GB, 20 GB):\n\
         indexed median {} ns ({}), scan median {} ns, scan / indexed = {:.0}x ({})\n",
        ns(target.indexed.median_ns),
        if fast {
            "<= 1 us: met"
        } else {
            "> 1 us: NOT met"
        },
        ns(target.naive.median_ns),
        ratio,
        if faster {
            ">= 10x: met"
        } else {
            "< 10x: NOT met"
        },
    ));
    out
}

fn ns(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// Entries per node in the consolidation case: 1,000 nodes hold 10,000 tenants.
pub const ENTRIES_PER_NODE: usize = 10;

/// One consolidation measured: the fleet, what the plan frees, and the time per plan; the same
/// for the rule as first written (every entry matched against every node).
#[derive(Clone, Debug)]
pub struct ConsolidationRow {
    pub nodes: usize,
    pub entries: usize,
    pub freed: usize,
    pub moves: usize,
    pub timing: Row,
    /// What [`consolidate_by_scan`] frees, and its median ms (of at least three runs).
    pub scan_freed: usize,
    pub scan_ms: f64,
}

/// Above this many nodes the scan is timed three times, not for the whole budget: it takes
/// seconds there.
const SCAN_MEASURED: usize = 2_000;

/// `consolidate` over a seeded fleet of each size (see [`consolidation_ledgers`]).
pub fn consolidation_rows(sizes: &[usize], budget: Duration) -> Vec<ConsolidationRow> {
    sizes
        .iter()
        .map(|&n| {
            let ledgers = consolidation_ledgers(n, ENTRIES_PER_NODE, 0x5EED_0002);
            let plan = consolidate(&ledgers);
            let timing = row("consolidate", n, budget, || {
                black_box(consolidate(black_box(&ledgers)));
            });
            let scan_plan = consolidate_by_scan(&ledgers);
            let scan_ms = if n <= SCAN_MEASURED {
                row("scan", n, budget, || {
                    black_box(consolidate_by_scan(black_box(&ledgers)));
                })
                .median_ns
                    / 1e6
            } else {
                let mut runs: Vec<f64> = (0..3)
                    .map(|_| {
                        let start = Instant::now();
                        black_box(consolidate_by_scan(black_box(&ledgers)));
                        start.elapsed().as_secs_f64() * 1e3
                    })
                    .collect();
                runs.sort_by(f64::total_cmp);
                runs.get(1).copied().unwrap_or(0.0)
            };
            ConsolidationRow {
                nodes: n,
                entries: ledgers.iter().map(|l| l.entries().len()).sum(),
                freed: plan.freed.len(),
                moves: plan.moves.len(),
                timing,
                scan_freed: scan_plan.freed.len(),
                scan_ms,
            }
        })
        .collect()
}

/// One JSON object per consolidation row, a line each.
pub fn consolidation_json(rows: &[ConsolidationRow]) -> String {
    rows.iter()
        .map(|row| {
            format!(
                "{{\"nodes\":{},\"tenants\":{},\"freed\":{},\"moves\":{},\"median_ms\":{:.4},\"p99_ms\":{:.4},\"scan_freed\":{},\"scan_median_ms\":{:.2}}}\n",
                row.nodes,
                row.entries,
                row.freed,
                row.moves,
                row.timing.median_ns / 1e6,
                row.timing.p99_ns / 1e6,
                row.scan_freed,
                row.scan_ms
            )
        })
        .collect()
}

/// The consolidation table, in Markdown.
pub fn render_consolidation(rows: &[ConsolidationRow]) -> String {
    let mut out = String::from(
        "Consolidation (BestFit, whole nodes only), each node filled to a random 5-85% \
         in 10 entries\n\n\
         | nodes | entries | nodes freed | moves | median ms | p99 ms | samples x batch | \
         scan: freed | scan: median ms |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {} x {} | {} | {:.1} |\n",
            row.nodes,
            row.entries,
            row.freed,
            row.moves,
            row.timing.median_ns / 1e6,
            row.timing.p99_ns / 1e6,
            row.timing.samples,
            row.timing.batch,
            row.scan_freed,
            row.scan_ms
        ));
    }
    out
}
