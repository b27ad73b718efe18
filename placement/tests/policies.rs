//! Properties of the placement policies, overcommit and the first-fit index, over random fleets.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeMap;

use placement::testing::{self, ledger};
use placement::{
    Choice, EditKind, FirstFitIndex, NodeLedger, NodeState, NodeView, Overcommit, Plan, Policy,
    Resources, TenantWants, first_fit, place, place_ledgers, plan_tenant_with,
};
use proptest::prelude::*;

fn resources(max: u64) -> impl Strategy<Value = Resources> {
    (0..=max, 0..=max, 0..=max).prop_map(|(t, m, s)| Resources::new(t, m, s))
}

fn state() -> impl Strategy<Value = NodeState> {
    prop_oneof![
        6 => Just(NodeState::Online),
        1 => Just(NodeState::Cordoned),
        1 => Just(NodeState::Offline),
    ]
}

/// Ratios from a few profiles people use (0.5x … 4x) so that scores tie often, plus anything
/// in range.
fn overcommit() -> impl Strategy<Value = Overcommit> {
    let common = || prop::sample::select(vec![500u32, 1000, 1200, 2000, 4000]);
    prop_oneof![
        3 => Just(Overcommit::NONE),
        4 => (common(), common(), common())
            .prop_map(|(t, m, s)| Overcommit::from_per_mille(t, m, s).unwrap()),
        1 => (1u32..=16_000, 1u32..=16_000, 1u32..=16_000)
            .prop_map(|(t, m, s)| Overcommit::from_per_mille(t, m, s).unwrap()),
    ]
}

/// A node as the tests keep it: physical capacity, overcommit, one entry holding `allocated`.
#[derive(Clone, Debug)]
struct Spec {
    name: String,
    state: NodeState,
    capacity: Resources,
    overcommit: Overcommit,
    allocated: Resources,
}

impl Spec {
    fn ledger(&self) -> NodeLedger {
        ledger(&self.name)
            .state(self.state)
            .capacity_of(self.capacity)
            .overcommit(self.overcommit)
            .allocated_of(self.allocated)
            .build()
    }
}

/// Up to 12 nodes with distinct names; allocated is sometimes above the effective capacity.
fn fleet(overcommits: bool) -> impl Strategy<Value = Vec<Spec>> {
    let ratio = if overcommits {
        overcommit().boxed()
    } else {
        Just(Overcommit::NONE).boxed()
    };
    proptest::collection::btree_set("[a-d]{1,3}", 0..12)
        .prop_flat_map(move |names| {
            let n = names.len();
            (
                Just(names),
                proptest::collection::vec(
                    (state(), resources(64), ratio.clone(), resources(72)),
                    n,
                ),
            )
        })
        .prop_map(|(names, specs)| {
            names
                .into_iter()
                .zip(specs)
                .map(|(name, (state, capacity, overcommit, allocated))| Spec {
                    name,
                    state,
                    capacity,
                    overcommit,
                    allocated,
                })
                .collect()
        })
}

/// The deterministic shuffle of the first-fit properties.
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

/// `S` as an exact fraction (numerator, denominator) for small fleets, written out separately
/// from the library: Σ_d (free_d − request_d) / capacity_d × 1000 / per_mille_d, the common
/// factor 1000 left out. Capacities ≤ 64 × 4 and ratios ≤ 4000 keep every product in u128.
fn reference_slack(view: &NodeView<'_>, request: &Resources, o: &Overcommit) -> (u128, u128) {
    let (mut numerator, mut denominator) = (0u128, 1u128);
    for d in placement::Dimension::ALL {
        let capacity = u128::from(view.capacity.get(d));
        if capacity == 0 {
            continue;
        }
        let left = u128::from(view.free().get(d) - request.get(d));
        let term_denominator = capacity * u128::from(o.per_mille(d));
        // a/b + c/e = (a·e + c·b) / (b·e)
        numerator = numerator * term_denominator + left * denominator;
        denominator *= term_denominator;
    }
    (numerator, denominator)
}

fn small_ratio() -> impl Strategy<Value = Overcommit> {
    let common = || prop::sample::select(vec![500u32, 1000, 2000, 4000]);
    (common(), common(), common())
        .prop_map(|(t, m, s)| Overcommit::from_per_mille(t, m, s).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every policy places only on an eligible node (Online, within its effective capacity)
    /// whose effective free room covers every dimension, and the node stays within its
    /// effective capacity after the reservation.
    #[test]
    fn every_policy_places_only_on_an_eligible_node_with_room(
        specs in fleet(true), request in resources(48), turn in any::<u64>(),
    ) {
        let ledgers: Vec<NodeLedger> = specs.iter().map(Spec::ledger).collect();
        for policy in Policy::ALL {
            if let Choice::Place(name) = place_ledgers(policy, &ledgers, &request, turn) {
                let spec = specs.iter().find(|s| s.name == name).unwrap();
                // Effective capacity, computed here independently: floor(capacity × ‰ / 1000).
                let effective = Resources::from_fn(|d| {
                    (u128::from(spec.capacity.get(d)) * u128::from(spec.overcommit.per_mille(d))
                        / 1000) as u64
                });
                prop_assert_eq!(spec.state, NodeState::Online, "{}", policy);
                prop_assert!(spec.allocated.fits_within(&effective), "{policy}: over capacity");
                let after = spec.allocated.checked_add(request).unwrap();
                prop_assert!(after.fits_within(&effective), "{policy} over-commits {name}");
            }
        }
    }

    /// A fit exists for one policy exactly when it exists for all, and the no-fit answer is
    /// first fit's, to the letter.
    #[test]
    fn a_request_fits_under_one_policy_iff_under_all(
        specs in fleet(true), request in resources(48), turn in any::<u64>(),
    ) {
        let ledgers: Vec<NodeLedger> = specs.iter().map(Spec::ledger).collect();
        let views: Vec<NodeView<'_>> = ledgers.iter().map(NodeLedger::view).collect();
        let first = first_fit(&views, &request);
        for policy in Policy::ALL {
            let decision = place_ledgers(policy, &ledgers, &request, turn);
            match (&first, &decision) {
                (Choice::Place(_), Choice::Place(_)) => {}
                (Choice::NoFit(a), Choice::NoFit(b)) => prop_assert_eq!(a, b),
                _ => prop_assert!(false, "{policy}: {decision:?} but first fit says {first:?}"),
            }
        }
    }

    /// No policy depends on the order the nodes are given in (RoundRobin's turn counts positions
    /// in name order, not in input order).
    #[test]
    fn no_policy_depends_on_input_order(
        specs in fleet(true), request in resources(48), turn in 0u64..40, seed in any::<u64>(),
    ) {
        let ledgers: Vec<NodeLedger> = specs.iter().map(Spec::ledger).collect();
        let mixed = shuffled(&ledgers, seed);
        for policy in Policy::ALL {
            prop_assert_eq!(
                place_ledgers(policy, &ledgers, &request, turn),
                place_ledgers(policy, &mixed, &request, turn),
                "{}", policy
            );
        }
    }

    /// BestFit is the smallest exact score, LeastLoaded the largest, ties to the first name,
    /// against a brute-force reference in plain u128 fractions.
    #[test]
    fn best_fit_and_least_loaded_match_a_brute_force_reference(
        specs in fleet(false), ratios in small_ratio(), request in resources(40),
    ) {
        let ledgers: Vec<NodeLedger> = specs
            .iter()
            .map(|s| s.ledger().with_overcommit(ratios))
            .collect();
        let views: Vec<NodeView<'_>> = ledgers.iter().map(NodeLedger::view).collect();
        let mut scored: Vec<((u128, u128), &str)> = views
            .iter()
            .filter(|v| v.takes_new_tenants() && request.fits_within(&v.free()))
            .map(|v| (reference_slack(v, &request, &ratios), v.name))
            .collect();
        // Order by exact value (cross-multiplied), then by name.
        scored.sort_by(|((n1, d1), a), ((n2, d2), b)| (n1 * d2).cmp(&(n2 * d1)).then(a.cmp(b)));
        let best = scored.first().map(|(_, name)| *name);
        let least_loaded = scored.last().map(|((n, d), _)| (*n, *d)).and_then(|(n, d)| {
            scored
                .iter()
                .filter(|((n2, d2), _)| n2 * d == n * d2)
                .map(|(_, name)| *name)
                .min()
        });
        let pick = |policy| match place_ledgers(policy, &ledgers, &request, 0) {
            Choice::Place(name) => Some(name),
            Choice::NoFit(_) => None,
        };
        prop_assert_eq!(pick(Policy::BestFit), best);
        prop_assert_eq!(pick(Policy::LeastLoaded), least_loaded);
    }

    /// RoundRobin, literally: eligible nodes sorted by name, start at `turn % count`, wrap, the
    /// first that fits.
    #[test]
    fn round_robin_matches_its_definition(
        specs in fleet(true), request in resources(40), turn in any::<u64>(),
    ) {
        let ledgers: Vec<NodeLedger> = specs.iter().map(Spec::ledger).collect();
        let mut eligible: Vec<NodeView<'_>> = ledgers
            .iter()
            .map(NodeLedger::view)
            .filter(|v| v.takes_new_tenants())
            .collect();
        eligible.sort_by(|a, b| a.name.cmp(b.name));
        let expected = if eligible.is_empty() {
            None
        } else {
            let start = (turn % eligible.len() as u64) as usize;
            eligible
                .iter()
                .cycle()
                .skip(start)
                .take(eligible.len())
                .find(|v| request.fits_within(&v.free()))
                .map(|v| v.name)
        };
        let got = match place_ledgers(Policy::RoundRobin, &ledgers, &request, turn) {
            Choice::Place(name) => Some(name),
            Choice::NoFit(_) => None,
        };
        prop_assert_eq!(got, expected);
    }

    /// Plans under every policy and overcommit never take a node that was within its effective
    /// capacity beyond it.
    #[test]
    fn plans_never_over_commit_a_node_under_any_policy(
        specs in fleet(true),
        requests in proptest::collection::vec((0usize..6, resources(30), any::<bool>()), 1..30),
        policy in prop::sample::select(Policy::ALL.to_vec()),
    ) {
        let mut ledgers: Vec<NodeLedger> = specs
            .iter()
            .map(|s| ledger(&s.name).state(s.state).capacity_of(s.capacity).overcommit(s.overcommit).build())
            .collect();
        for (turn, (tenant, footprint, suspend)) in requests.into_iter().enumerate() {
            let uid = format!("uid-{tenant}");
            let wants = TenantWants { suspend, ..testing::wants(&uid, footprint) };
            for _ in 0..4 {
                let Plan::Edit(edit) = plan_tenant_with(policy, &wants, &ledgers, turn as u64) else {
                    break;
                };
                let index = ledgers.iter().position(|l| l.name() == edit.node).unwrap();
                let before = ledgers[index].clone();
                let after = before.edited(&edit).unwrap();
                if !after.allocated().fits_within(&before.allocated()) {
                    prop_assert!(
                        after.allocated().fits_within(&after.effective_capacity()),
                        "{policy}: {edit:?} over-commits"
                    );
                    prop_assert!(matches!(edit.kind, EditKind::Reserve | EditKind::Resize));
                }
                ledgers[index] = after;
            }
            prop_assert!(ledgers.iter().filter(|l| l.entry_of(&uid).is_some()).count() <= 1);
        }
    }

    /// Without overcommit information, `place` with FirstFit is `first_fit`, and the other
    /// policies choose among the same nodes.
    #[test]
    fn place_first_fit_is_first_fit(specs in fleet(false), request in resources(48)) {
        let ledgers: Vec<NodeLedger> = specs.iter().map(Spec::ledger).collect();
        let views: Vec<NodeView<'_>> = ledgers.iter().map(NodeLedger::view).collect();
        prop_assert_eq!(place(Policy::FirstFit, &views, &request, 7), first_fit(&views, &request));
    }
}

/// A change to the fleet the index must follow.
#[derive(Clone, Debug)]
enum Op {
    /// A reservation changed: the node at this position (mod the fleet size) now holds this.
    Allocate(usize, Resources),
    State(usize, NodeState),
    Capacity(usize, Resources),
    Add(String, NodeState, Resources, Resources),
    Remove(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<usize>(), resources(72)).prop_map(|(i, r)| Op::Allocate(i, r)),
        2 => (any::<usize>(), state()).prop_map(|(i, s)| Op::State(i, s)),
        2 => (any::<usize>(), resources(64)).prop_map(|(i, r)| Op::Capacity(i, r)),
        1 => ("[a-e]{1,3}", state(), resources(64), resources(72))
            .prop_map(|(n, s, c, a)| Op::Add(n, s, c, a)),
        1 => any::<usize>().prop_map(Op::Remove),
    ]
}

type Model = BTreeMap<String, (NodeState, Resources, Resources)>;

/// A model node as placement sees it.
fn view(name: &str, state: NodeState, capacity: Resources, allocated: Resources) -> NodeView<'_> {
    ledger(name)
        .state(state)
        .capacity_of(capacity)
        .allocated_of(allocated)
        .view()
}

fn model_views(model: &Model) -> Vec<NodeView<'_>> {
    model
        .iter()
        .map(|(name, (state, capacity, allocated))| view(name, *state, *capacity, *allocated))
        .collect()
}

fn nth_name(model: &Model, i: usize) -> Option<String> {
    if model.is_empty() {
        return None;
    }
    model.keys().nth(i % model.len()).cloned()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// After a random build and any sequence of reservations, state and capacity changes,
    /// additions and removals, the index answers every request exactly as the scan does:
    /// the same node, or the same no-fit data.
    #[test]
    fn index_agrees_with_the_scan_after_any_updates(
        specs in fleet(false),
        ops in proptest::collection::vec(op(), 0..40),
        requests in proptest::collection::vec(resources(40), 1..6),
        order_seed in any::<u64>(),
    ) {
        let mut model: Model = specs
            .iter()
            .map(|s| (s.name.clone(), (s.state, s.capacity, s.allocated)))
            .collect();
        // Built from the nodes in any order.
        let views = shuffled(&model_views(&model), order_seed);
        let mut index = FirstFitIndex::new(&views);
        // Zero in every dimension, and in some, must never match an ineligible node.
        let mut probes = requests.clone();
        probes.extend([Resources::ZERO, Resources::new(0, 0, 1), Resources::new(1, 0, 0)]);
        let check = |index: &FirstFitIndex, model: &Model| -> Result<(), TestCaseError> {
            let views = model_views(model);
            for request in &probes {
                prop_assert_eq!(index.decide(request), first_fit(&views, request), "{:?}", request);
                prop_assert_eq!(index.scan(request), first_fit(&views, request));
                // The first fits in name order, as a scan finds them.
                let scanned: Vec<&str> = views
                    .iter()
                    .filter(|v| v.takes_new_tenants() && request.fits_within(&v.free()))
                    .map(|v| v.name)
                    .take(3)
                    .collect();
                prop_assert_eq!(index.first_fits(request, 3), scanned, "{:?}", request);
            }
            prop_assert_eq!(index.len(), model.len());
            Ok(())
        };
        check(&index, &model)?;
        for op in ops {
            match op {
                Op::Allocate(i, allocated) => {
                    let Some(name) = nth_name(&model, i) else { continue };
                    model.get_mut(&name).unwrap().2 = allocated;
                    index.update(&name, allocated).unwrap();
                }
                Op::State(i, state) => {
                    let Some(name) = nth_name(&model, i) else { continue };
                    let entry = model.get_mut(&name).unwrap();
                    entry.0 = state;
                    let (state, capacity, allocated) = *entry;
                    let inserted = index.set(view(&name, state, capacity, allocated));
                    prop_assert!(!inserted);
                }
                Op::Capacity(i, capacity) => {
                    let Some(name) = nth_name(&model, i) else { continue };
                    let entry = model.get_mut(&name).unwrap();
                    entry.1 = capacity;
                    let (state, capacity, allocated) = *entry;
                    let inserted = index.set(view(&name, state, capacity, allocated));
                    prop_assert!(!inserted);
                }
                Op::Add(name, state, capacity, allocated) => {
                    let new = model.insert(name.clone(), (state, capacity, allocated)).is_none();
                    prop_assert_eq!(index.set(view(&name, state, capacity, allocated)), new);
                }
                Op::Remove(i) => {
                    let Some(name) = nth_name(&model, i) else { continue };
                    model.remove(&name);
                    prop_assert!(index.remove(&name));
                }
            }
            check(&index, &model)?;
        }
    }
}

#[test]
fn the_index_on_the_benchmark_shape_nine_tenths_full() {
    // 10,000 nodes, the first 9,000 by name full: the first fit is node 9,000.
    let names: Vec<String> = (0..10_000).map(|i| format!("node-{i:05}")).collect();
    let capacity = Resources::new(64, 256, 8000);
    let views: Vec<NodeView<'_>> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let allocated = if i < 9000 { capacity } else { Resources::ZERO };
            ledger(name)
                .capacity_of(capacity)
                .allocated_of(allocated)
                .view()
        })
        .collect();
    let index = FirstFitIndex::new(&views);
    let request = Resources::new(2, 4, 20);
    assert_eq!(index.decide(&request), Choice::Place("node-09000"));
    assert_eq!(first_fit(&views, &request), Choice::Place("node-09000"));
}
