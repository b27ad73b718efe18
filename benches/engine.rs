//! Decisions inside the engine, without I/O: batches of tenants decided on the engine's view of
//! a fleet (the view kept between batches, each batch opened by syncing the nodes the last one
//! wrote), as the engine task does. Prints the median and p99 time per decision, and apart from
//! it the time per decision spent building the batch's node writes (and confirming them).
//!
//! `cargo bench --bench engine -- [--nodes N] [--tenants N] [--batch N] [--runs N] [--warmup N]
//! [--policy P]` (defaults: 10,000 nodes, 20,000 tenants, batches of 96, 3 runs, 1 warm-up).
//!
//! Each case first runs `--warmup` times unreported: the controller is a long-lived process, and
//! a fresh process's first run also pays for touching its memory for the first time (on the
//! development VMs, 1.1 to 1.5 µs per decision where later runs mostly took 0.83 to 0.93).
//!
//! Cases: the first 90% of the nodes by name full (a fleet filled by first fit), then every node
//! empty; first fit (decided by the engine's indexes) and best fit (a scan of every node).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]
#![allow(clippy::cast_precision_loss)]

use std::sync::Arc;
use std::time::Duration;

use placement::{Policy, Resources};
use tenant_placer::controller::engine::bench;
use tenant_placer::testing;

mod common;
use common::{arg, arg_str};

/// `count` nodes of 64 threads, 256 GB, 4 TB; the first `full` (by name) hold one tenant that
/// fills them.
fn fleet(count: usize, full: usize) -> Vec<Arc<tenant_placer::api::Node>> {
    (0..count)
        .map(|i| {
            let node = testing::node(&format!("node-{i:06}"))
                .capacity(64, 256, 4000)
                .resource_version(1);
            let node = if i < full {
                node.holding(&format!("filler-{i:06}"), (64, 256, 4000))
            } else {
                node
            };
            Arc::new(node.build())
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn main() {
    let nodes: usize = arg("--nodes", 10_000);
    let count: usize = arg("--tenants", 20_000);
    let batch: usize = arg("--batch", 96);
    let runs: usize = arg("--runs", 3);
    let warmup: usize = arg("--warmup", 1);
    let policies: Vec<Policy> = match arg_str("--policy") {
        Some(policy) => vec![policy.parse().unwrap()],
        None => vec![Policy::FirstFit, Policy::BestFit],
    };
    let tenants: Vec<(String, Resources)> = (0..count as u64)
        // UIDs shaped as the API server's (36 characters, differing early).
        .map(|i: u64| {
            let uid = format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                i.wrapping_mul(0x9e37_79b9) as u32,
                i % 0xffff,
                i % 0xfff,
                (i / 7) % 0xfff,
                i
            );
            (uid, Resources::new(arg("--threads", 1), 2, 20))
        })
        .collect();
    println!(
        "engine decisions: {nodes} nodes, {count} tenants (1 thread, 2 GB, 20 GB) in batches of {batch}, {runs} runs after {warmup} unreported"
    );
    println!(
        "| case | policy | deciding, median per decision (runs) | p99 (last run) | building the writes, median |"
    );
    println!("|---|---|---:|---:|---:|");
    let full = nodes * 9 / 10;
    for (case, filled) in [("90% of nodes full", full), ("every node empty", 0)] {
        for policy in &policies {
            let policy = *policy;
            let mut medians = Vec::new();
            let mut writing = Vec::new();
            let mut p99 = Duration::ZERO;
            for run in 0..warmup + runs {
                let times = bench::decide(fleet(nodes, filled), &tenants, batch, policy);
                assert!(!times.is_empty(), "the view failed to sync");
                if run < warmup {
                    continue;
                }
                let mut deciding: Vec<Duration> = times.iter().map(|t| t.deciding).collect();
                deciding.sort();
                medians.push(percentile(&deciding, 0.5));
                p99 = percentile(&deciding, 0.99);
                let mut built: Vec<Duration> = times.iter().map(|t| t.writing).collect();
                built.sort();
                writing.push(percentile(&built, 0.5));
            }
            let shown: Vec<String> = medians.iter().map(|d| format!("{d:.2?}")).collect();
            medians.sort();
            writing.sort();
            println!(
                "| {case} | {policy} | {:.2?} ({}) | {p99:.2?} | {:.2?} |",
                medians[medians.len() / 2],
                shown.join(", "),
                writing[writing.len() / 2]
            );
        }
    }
}
