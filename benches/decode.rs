//! Decoding a watched object: what one Node (64 entries) and one Tenant, as the API serves them,
//! cost the controller's per-object decoding (`controller::state::decode::Decoded`: the object's JSON
//! text taken whole, then decoded), beside the way it decoded them before (a `serde_json::Value`
//! tree first, then the type from it). Prints the median time per object of each.
//!
//! `cargo bench --bench decode -- [--rounds N]` (default 5 rounds of 20,000 Nodes and 200,000
//! Tenants).
#![allow(clippy::unwrap_used, clippy::arithmetic_side_effects)]

use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use tenant_placer::api::{Node, Tenant};
use tenant_placer::controller::state::decode::{Decoded, Lenient};
use tenant_placer::testing;

mod common;
use common::arg;

/// The decoding before: a value tree first, then the type read from it.
fn value_first<K: DeserializeOwned>(text: &str) -> K {
    let value: serde_json::Value = serde_json::from_str(text).unwrap();
    K::deserialize(&value).unwrap()
}

/// Median time per call of `decode` over `rounds` rounds of `count` calls.
fn median_per_call(rounds: usize, count: u32, mut decode: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..count {
                decode();
            }
            started.elapsed() / count
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let rounds = arg("--rounds", 5);
    let node = (0..64)
        .fold(
            testing::node("node-000001")
                .capacity(64, 256, 4000)
                .resource_version(3),
            |node, i| node.holding(&format!("tenant-{i:06}"), (1, 2, 20)),
        )
        .build();
    let node = serde_json::to_string(&node).unwrap();
    // An Active tenant, as the watch sends it after its status write.
    let tenant = testing::tenant("t000001")
        .resources(2, 4, 20)
        .resource_version(9)
        .finalizer("placement.tenant-placer.dev/reservation")
        .phase(tenant_placer::api::TenantPhase::Active)
        .on("node-000001")
        .reserved(2, 4, 20)
        .message("holds 2 threads, 4 GB memory, 20 GB storage on node-000001")
        .placed("Reserved")
        .build();
    let tenant = serde_json::to_string(&tenant).unwrap();
    println!("decoding one watched object, median of {rounds} rounds");
    println!("| object | JSON bytes | Decoded (text first) | a Value tree first (before) |");
    println!("|---|---:|---:|---:|");
    compare::<Node>("Node, 64 entries", &node, rounds, 20_000);
    compare::<Tenant>("Tenant, Active", &tenant, rounds, 200_000);
}

/// Prints one row: `text` decoded as the controller does and as it did before.
fn compare<K: DeserializeOwned + Lenient>(label: &str, text: &str, rounds: usize, count: u32) {
    let now = median_per_call(rounds, count, || {
        let decoded: Decoded<K> = serde_json::from_str(text).unwrap();
        assert!(matches!(
            std::hint::black_box(decoded),
            Decoded::Readable(_)
        ));
    });
    let before = median_per_call(rounds, count, || {
        std::hint::black_box(value_first::<K>(text));
    });
    println!("| {label} | {} | {now:.2?} | {before:.2?} |", text.len());
}
