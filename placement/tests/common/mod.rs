//! Shared by the property tests: a fixed sample of a strategy, for the tests that count how often
//! a property meets the states it is about, and random fleets built from their parts.

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// `cases` values of `strategy`, the same on every run (a fixed seed, nothing persisted).
#[allow(dead_code)] // Not every test file samples.
pub fn sample<S: Strategy>(strategy: S, cases: u32) -> Vec<S::Value> {
    let mut runner = TestRunner::new_with_rng(
        Config {
            failure_persistence: None,
            ..Config::with_cases(cases)
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    (0..cases)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect()
}

/// One random node's parts: state, capacity, overcommit, its entries' amounts, and a hold.
pub type NodeParts = (
    placement::NodeState,
    placement::Resources,
    placement::Overcommit,
    Vec<placement::Resources>,
    Option<placement::Resources>,
);

/// The nodes, named n0…, their entries' UIDs t01… unique across the fleet, each hold held for
/// the tenant `holder`.
#[allow(dead_code)] // Not every test file builds fleets.
pub fn build_fleet(nodes: Vec<NodeParts>, holder: &str) -> Vec<placement::NodeLedger> {
    let mut uid = 0;
    nodes
        .into_iter()
        .enumerate()
        .map(|(i, (state, capacity, overcommit, entries, hold))| {
            let name = format!("n{i}");
            let mut builder = placement::testing::ledger(&name)
                .state(state)
                .capacity_of(capacity)
                .overcommit(overcommit);
            for resources in entries {
                uid += 1;
                builder = builder.holding(&format!("t{uid:02}"), resources);
            }
            let mut node = builder.build();
            if let Some(hold) = hold {
                node.hold(placement::testing::entry(holder, hold)).unwrap();
            }
            node
        })
        .collect()
}
