//! Properties of the consolidation (`placement::rebalance`) over random fleets: the moves, made,
//! never over-commit a node, empty exactly the freed nodes, lose and duplicate nothing, each go
//! where BestFit would have put them at that point, and the answer does not depend on order.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::collections::{BTreeMap, BTreeSet};

use placement::{
    Choice, Consolidation, Entry, NodeLedger, NodeState, Overcommit, Policy, Resources,
    consolidate, consolidate_by_scan, consolidate_sources, place_ledgers,
};
use proptest::prelude::*;

mod common;

fn resources(min: u64, max: u64) -> impl Strategy<Value = Resources> {
    (min..=max, min..=max, min..=max).prop_map(|(t, m, s)| Resources::new(t, m, s))
}

fn state() -> impl Strategy<Value = NodeState> {
    prop_oneof![
        8 => Just(NodeState::Online),
        1 => Just(NodeState::Cordoned),
        1 => Just(NodeState::Offline),
        1 => Just(NodeState::Draining),
    ]
}

fn overcommit() -> impl Strategy<Value = Overcommit> {
    let ratio = || prop::sample::select(vec![500u32, 1000, 1500, 2000]);
    prop_oneof![
        3 => Just(Overcommit::NONE),
        1 => (ratio(), ratio(), ratio())
            .prop_map(|(t, m, s)| Overcommit::from_per_mille(t, m, s).unwrap()),
    ]
}

/// Up to 10 nodes named n0…, each holding up to 4 entries (UIDs unique across the fleet), now
/// and then a hold. Capacities from 2 to 16 and entries up to 5 per dimension: most nodes are
/// lightly loaded (so there is something to free), some are over their capacity.
fn fleet() -> impl Strategy<Value = Vec<NodeLedger>> {
    let node = (
        state(),
        resources(2, 16),
        overcommit(),
        prop::collection::vec(resources(0, 5), 0..=4),
        prop::option::weighted(0.1, resources(1, 4)),
    );
    prop::collection::vec(node, 0..=10).prop_map(|nodes| common::build_fleet(nodes, "waiter"))
}

/// Up to 24 nodes of three shapes (capacity and overcommit), so the index's trees hold many
/// nodes each, entries at least `smallest` in every dimension (above 0, the index's floor
/// leaves nodes out); otherwise as [`fleet`].
fn shaped_fleet(smallest: u64) -> impl Strategy<Value = Vec<NodeLedger>> {
    let shapes = vec![
        (Resources::new(8, 8, 8), Overcommit::NONE),
        (Resources::new(16, 8, 12), Overcommit::NONE),
        (
            Resources::new(8, 8, 8),
            Overcommit::from_per_mille(2000, 1000, 1500).unwrap(),
        ),
    ];
    let node = (
        state(),
        prop::sample::select(shapes),
        prop::collection::vec(resources(smallest, 4), 0..=4),
        prop::option::weighted(0.1, resources(1, 4)),
    );
    prop::collection::vec(node, 0..=24).prop_map(|nodes| {
        let parts = nodes
            .into_iter()
            .map(|(state, (capacity, overcommit), entries, hold)| {
                (state, capacity, overcommit, entries, hold)
            })
            .collect();
        common::build_fleet(parts, "waiter")
    })
}

/// The ledgers after the first `count` moves, made by hand: each entry removed from `from` and
/// appended to `to`; holds and overcommit kept.
fn after(nodes: &[NodeLedger], plan: &Consolidation, count: usize) -> Vec<NodeLedger> {
    let mut entries: BTreeMap<String, Vec<Entry>> = nodes
        .iter()
        .map(|n| (n.name().to_owned(), n.entries().to_vec()))
        .collect();
    for m in &plan.moves[..count] {
        let from = entries.get_mut(&m.from).unwrap();
        let at = from.iter().position(|e| *e.uid == *m.uid).unwrap();
        let moved = from.remove(at);
        assert_eq!(moved.resources, m.resources);
        assert_eq!(*moved.tenant, *m.tenant);
        entries.get_mut(&m.to).unwrap().push(moved);
    }
    nodes
        .iter()
        .map(|n| {
            let mut edited =
                NodeLedger::new(n.name(), n.state(), n.capacity(), entries[n.name()].clone())
                    .unwrap()
                    .with_overcommit(n.overcommit());
            for hold in n.holds() {
                edited.hold(hold.clone()).unwrap();
            }
            edited
        })
        .collect()
}

fn total_written(nodes: &[NodeLedger]) -> Resources {
    let written: Vec<Resources> = nodes.iter().map(NodeLedger::written).collect();
    Resources::checked_sum(&written).unwrap()
}

/// The deterministic shuffle of the other property tests, for nodes and their entries.
fn shuffled<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
    let mut out = items.to_vec();
    let mut state = seed | 1;
    for i in (1..out.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.swap(i, (state % (i as u64 + 1)) as usize);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Made in order, every move lands on a node that stays within its effective capacity (holds
    /// included); nodes the plan does not fill are as they were.
    #[test]
    fn the_moves_never_fill_a_node_past_its_effective_capacity(nodes in fleet()) {
        let plan = consolidate(&nodes);
        let done = after(&nodes, &plan, plan.moves.len());
        let targets: BTreeSet<&str> = plan.moves.iter().map(|m| m.to.as_str()).collect();
        for (before, now) in nodes.iter().zip(&done) {
            if targets.contains(now.name()) {
                prop_assert!(
                    now.allocated().fits_within(&now.effective_capacity()),
                    "{} holds {} of {}", now.name(), now.allocated(), now.effective_capacity()
                );
            } else {
                prop_assert!(now.allocated().fits_within(&before.allocated()));
            }
        }
    }

    /// Every freed node ends with nothing; every moved tenant is on exactly one node, the one it
    /// moved to; nothing reserved is lost or made up.
    #[test]
    fn freed_nodes_end_empty_and_every_tenant_is_held_once(nodes in fleet()) {
        let plan = consolidate(&nodes);
        let done = after(&nodes, &plan, plan.moves.len());
        for freed in &plan.freed {
            let node = done.iter().find(|n| n.name() == freed).unwrap();
            prop_assert!(node.entries().is_empty() && node.holds().is_empty(), "{freed}");
        }
        for m in &plan.moves {
            let holders: Vec<&str> = done
                .iter()
                .filter(|n| n.entry_of(&m.uid).is_some())
                .map(NodeLedger::name)
                .collect();
            prop_assert_eq!(holders, vec![m.to.as_str()]);
        }
        prop_assert_eq!(total_written(&done), total_written(&nodes));
    }

    /// Moves leave freed nodes only, and each freed node gives up every entry it held: whole
    /// nodes, never part of one. Freed nodes were Online, held entries and no hold; targets were
    /// Online, in use and within capacity, and are never freed themselves (no chains).
    #[test]
    fn moves_only_leave_freed_nodes_and_empty_them_whole(nodes in fleet()) {
        let plan = consolidate(&nodes);
        let node = |name: &str| nodes.iter().find(|n| n.name() == name).unwrap();
        let freed: BTreeSet<&str> = plan.freed.iter().map(String::as_str).collect();
        prop_assert_eq!(freed.len(), plan.freed.len(), "a node freed twice");
        for m in &plan.moves {
            prop_assert!(freed.contains(m.from.as_str()), "{} is not freed", m.from);
            prop_assert!(!freed.contains(m.to.as_str()), "{} receives and is freed", m.to);
            let to = node(&m.to);
            prop_assert!(to.view().takes_new_tenants());
            prop_assert!(!to.entries().is_empty() || !to.holds().is_empty());
        }
        for name in &plan.freed {
            let source = node(name);
            prop_assert_eq!(source.state(), NodeState::Online);
            prop_assert!(source.holds().is_empty());
            let held: BTreeSet<&str> = source.entries().iter().map(|e| &*e.uid).collect();
            let moved: BTreeSet<&str> = plan
                .moves
                .iter()
                .filter(|m| &m.from == name)
                .map(|m| &*m.uid)
                .collect();
            prop_assert!(!held.is_empty());
            prop_assert_eq!(held, moved);
        }
    }

    /// Each move goes where BestFit (`place_ledgers`) puts it among the targets of that moment:
    /// the moves before it made, its own source and the nodes freed before it left out, the
    /// nodes that held nothing at the start too.
    #[test]
    fn each_move_goes_to_the_best_fit_of_its_moment(nodes in fleet()) {
        let plan = consolidate(&nodes);
        for (k, m) in plan.moves.iter().enumerate() {
            let source_rank = plan.freed.iter().position(|f| *f == m.from).unwrap();
            let left_out = &plan.freed[..=source_rank];
            let candidates: Vec<NodeLedger> = after(&nodes, &plan, k)
                .into_iter()
                .zip(&nodes)
                .filter(|(_, start)| !start.entries().is_empty() || !start.holds().is_empty())
                .map(|(now, _)| now)
                .filter(|now| !left_out.iter().any(|f| f == now.name()))
                .collect();
            prop_assert_eq!(
                place_ledgers(Policy::BestFit, &candidates, &m.resources, 0),
                Choice::Place(m.to.as_str()),
                "move {} of {:?}", k, plan
            );
        }
    }

    /// The same fleet, its nodes and their entries in any order, gives the same plan.
    #[test]
    fn the_plan_does_not_depend_on_order(nodes in fleet(), seed in any::<u64>()) {
        let plan = consolidate(&nodes);
        prop_assert_eq!(&consolidate(&nodes), &plan);
        let reordered: Vec<NodeLedger> = shuffled(&nodes, seed)
            .into_iter()
            .map(|n| {
                let mut again = NodeLedger::new(
                    n.name(),
                    n.state(),
                    n.capacity(),
                    shuffled(n.entries(), seed.rotate_left(7)),
                )
                .unwrap()
                .with_overcommit(n.overcommit());
                for hold in n.holds() {
                    again.hold(hold.clone()).unwrap();
                }
                again
            })
            .collect();
        prop_assert_eq!(consolidate(&reordered), plan);
    }

    /// Limited to some sources, it frees only those, and each freed node is freed with the
    /// others' moves as [`consolidate`] would free it alone among sources of its cost and more.
    #[test]
    fn only_the_given_sources_are_freed_and_none_more_than_all_sources_free(
        nodes in fleet(),
        picked in proptest::collection::vec(any::<bool>(), 8),
    ) {
        let chosen = |n: &NodeLedger| {
            let i = nodes.iter().position(|m| m.name() == n.name()).unwrap_or(0);
            picked.get(i % picked.len()).copied().unwrap_or(false)
        };
        let plan = consolidate_sources(&nodes, |n| chosen(n).then_some(0));
        for freed in &plan.freed {
            let node = nodes.iter().find(|n| n.name() == freed).unwrap();
            prop_assert!(chosen(node), "{freed} was not a source");
        }
        // Made, the moves still never over-commit and empty the freed nodes.
        let done = after(&nodes, &plan, plan.moves.len());
        for node in &done {
            let before = nodes.iter().find(|n| n.name() == node.name()).unwrap();
            prop_assert!(
                node.allocated().fits_within(&node.effective_capacity())
                    || node.allocated().fits_within(&before.allocated())
            );
        }
        prop_assert_eq!(total_written(&done), total_written(&nodes));
        // Every source with the same cost: as consolidate.
        prop_assert_eq!(consolidate_sources(&nodes, |_| Some(7)), consolidate(&nodes));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The index finds the target every node's scan finds: the same plan, node for node, so it
    /// frees exactly as many nodes as the rule as first written.
    #[test]
    fn the_plan_is_the_plan_of_the_scan_over_every_node(
        shaped in shaped_fleet(0),
        no_zero in shaped_fleet(1),
        any_shape in fleet(),
    ) {
        for nodes in [shaped, no_zero, any_shape] {
            prop_assert_eq!(consolidate(&nodes), consolidate_by_scan(&nodes));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// With node selectors (odd-numbered tenants may only be on a node labelled `zone=a`, a
    /// label half the nodes carry), every move lands on a node carrying its tenant's labels, and
    /// the plan is otherwise as valid: no node past its effective capacity, every freed node
    /// empty, each tenant held once.
    #[test]
    fn a_move_goes_only_to_a_node_carrying_its_tenants_labels(nodes in fleet()) {
        let zone = placement::testing::labels(&[("zone", "a")]);
        let labelled: Vec<NodeLedger> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let labels = if i % 2 == 0 { zone.clone() } else { Default::default() };
                n.clone().with_labels(std::sync::Arc::new(labels))
            })
            .collect();
        let picky = |e: &Entry| {
            let number: u32 = e.uid.trim_start_matches('t').parse().unwrap_or(0);
            (number % 2 == 1).then_some(&zone)
        };
        let plan = placement::consolidate_for(&labelled, |_| Some(0), picky);
        for m in &plan.moves {
            let to = labelled.iter().find(|n| n.name() == m.to).unwrap();
            let entry = placement::testing::entry(&m.uid, m.resources);
            prop_assert!(to.matches(picky(&entry)), "{} to {} without its labels", m.uid, m.to);
        }
        let done = after(&labelled, &plan, plan.moves.len());
        for node in &done {
            if plan.moves.iter().any(|m| m.to == node.name()) {
                prop_assert!(node.allocated().fits_within(&node.effective_capacity()));
            }
            if plan.freed.iter().any(|f| f == node.name()) {
                prop_assert!(node.entries().is_empty());
            }
        }
        prop_assert_eq!(total_written(&done), total_written(&labelled));
        // Nobody picky: as consolidate.
        prop_assert_eq!(placement::consolidate_for(&labelled, |_| Some(0), |_| None), consolidate(&labelled));
    }
}

/// The fleet generator is not vacuous: many fleets have a node to free, some more than one.
#[test]
fn random_fleets_often_have_nodes_to_free() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = fleet();
    let (mut some, mut several) = (0, 0);
    for _ in 0..500 {
        let nodes = strategy.new_tree(&mut runner).unwrap().current();
        let freed = consolidate(&nodes).freed.len();
        some += usize::from(freed > 0);
        several += usize::from(freed > 1);
    }
    assert!(
        some > 100 && several > 20,
        "{some} with one, {several} with more"
    );
}
