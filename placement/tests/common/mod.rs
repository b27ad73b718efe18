//! Shared by the property tests: a fixed sample of a strategy, for the tests that count how often
//! a property meets the states it is about.

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// `cases` values of `strategy`, the same on every run (a fixed seed, nothing persisted).
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
