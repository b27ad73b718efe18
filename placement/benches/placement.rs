//! Criterion benches: decision latency per policy at 100, 1k, 10k and 100k nodes, the indexed
//! first fit beside the scan, the target case (10,000 nodes, the first 9,000 by name full), a
//! consolidation of 1,000 nodes holding 10,000 tenants, and a purchase for 1,000 waiting tenants
//! and five classes.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-placement cargo bench -p placement
//! CARGO_TARGET_DIR=/work/target-placement cargo bench -p placement -- nine-thousand-full
//! CARGO_TARGET_DIR=/work/target-placement cargo bench -p placement -- consolidate
//! CARGO_TARGET_DIR=/work/target-placement cargo bench -p placement -- purchase
//! ```
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects,
    missing_debug_implementations
)]

#[path = "../src/bin/placement-bench/fleet.rs"]
#[allow(dead_code)]
mod fleet;

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use fleet::{Fleet, REQUEST};
use placement::{
    FirstFitIndex, Policy, Resources, consolidate, first_fit, place, purchase as plan_purchase,
};

fn per_policy(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    for n in [100usize, 1_000, 10_000, 100_000] {
        let fleet = Fleet::mixed(n, 0x5EED_0001);
        let views = fleet.views();
        for policy in Policy::ALL {
            let mut turn = 0u64;
            group.bench_with_input(BenchmarkId::new(policy.name(), n), &views, |b, views| {
                b.iter(|| {
                    turn = turn.wrapping_add(1);
                    place(policy, black_box(views), black_box(&REQUEST), turn)
                })
            });
        }
        let index = FirstFitIndex::new(&views);
        group.bench_with_input(
            BenchmarkId::new("FirstFitIndexed", n),
            &index,
            |b, index| b.iter(|| black_box(index).decide(black_box(&REQUEST))),
        );
    }
    group.finish();
}

fn nine_thousand_full(c: &mut Criterion) {
    let fleet = Fleet::first_full(10_000, 9_000);
    let views = fleet.views();
    let request = Resources::new(2, 4, 20);
    let mut group = c.benchmark_group("nine-thousand-full");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group.bench_function("scan", |b| {
        b.iter(|| first_fit(black_box(&views), black_box(&request)))
    });
    let mut index = FirstFitIndex::new(&views);
    group.bench_function("indexed", |b| {
        b.iter(|| black_box(&index).decide(black_box(&request)))
    });
    let name = fleet::node_name(9_000);
    let mut held = false;
    group.bench_function("index-update", |b| {
        b.iter(|| {
            held = !held;
            let allocated = if held { request } else { Resources::ZERO };
            index.update(black_box(&name), allocated).unwrap();
        })
    });
    group.finish();
}

fn consolidation(c: &mut Criterion) {
    let mut group = c.benchmark_group("consolidate");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5))
        .sample_size(20);
    for n in [100usize, 1_000] {
        let ledgers = fleet::consolidation_ledgers(n, 10, 0x5EED_0002);
        group.bench_with_input(BenchmarkId::new("BestFit", n), &ledgers, |b, ledgers| {
            b.iter(|| consolidate(black_box(ledgers)))
        });
    }
    group.finish();
}

fn purchase(c: &mut Criterion) {
    let classes = fleet::node_classes();
    let waiting = fleet::waiting_tenants(1_000, 0x5EED_0003);
    let mut group = c.benchmark_group("purchase");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    group.bench_function("FirstFit/1000", |b| {
        b.iter(|| {
            plan_purchase(
                Policy::FirstFit,
                black_box(&classes),
                &[],
                black_box(&waiting),
            )
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    per_policy,
    nine_thousand_full,
    consolidation,
    purchase
);
criterion_main!(benches);
