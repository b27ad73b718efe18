//! Properties of purchase planning (`placement::purchase`) over random classes, limits,
//! requests in flight and waiting tenants, under every policy, each judged with the crate's own
//! placement (`plan_tenant_with` under FirstFit on empty ledgers: the planner packs first fit
//! whatever the policy, since a delivered machine's room is held for the tenants it was bought
//! for), never with the planner's internals: the planned
//! tenants all fit once the nodes arrive, each where the purchase says; each new node's tenants
//! do not all fit in the room the others leave (or the check needs it); no new node could be of
//! a cheaper class; limits hold; a tenant
//! left out really has no class; the answer is deterministic and does not depend on the order of
//! classes and requests; and without limits it never costs more than one cheapest node per
//! tenant.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeMap;

use placement::{
    Cost, EditKind, InFlightRequest, NoClass, NodeClassOffer, NodeLedger, NodeState, Plan, Policy,
    Purchase, Resources, TenantWants, WaitingTenant, packing_order, plan_tenant_with, purchase,
};
use proptest::prelude::*;

fn resources(min: u64, max: u64) -> impl Strategy<Value = Resources> {
    (min..=max, min..=max, min..=max).prop_map(|(t, m, s)| Resources::new(t, m, s))
}

fn policy() -> impl Strategy<Value = Policy> {
    prop::sample::select(Policy::ALL.to_vec())
}

/// Up to 4 classes `c0`…: capacities 2 to 16, mostly priced (0 to 100 cents, so ties happen),
/// now and then limited (0 to 4, some already reached by `in_use`).
fn classes() -> impl Strategy<Value = Vec<NodeClassOffer>> {
    let class = (
        resources(2, 16),
        prop::option::weighted(0.85, 0u64..=100),
        prop::option::weighted(0.4, 0u32..=4),
        0u32..=3,
    );
    prop::collection::vec(class, 0..=4).prop_map(|classes| {
        classes
            .into_iter()
            .enumerate()
            .map(
                |(i, (capacity, monthly_cost, limit, in_use))| NodeClassOffer {
                    name: format!("c{i}"),
                    capacity,
                    monthly_cost,
                    limit,
                    in_use,
                },
            )
            .collect()
    })
}

/// Up to 3 requests in flight `r0`…, capacities 2 to 16.
fn in_flight() -> impl Strategy<Value = Vec<InFlightRequest>> {
    prop::collection::vec(resources(2, 16), 0..=3).prop_map(|caps| {
        caps.into_iter()
            .enumerate()
            .map(|(i, capacity)| InFlightRequest {
                name: format!("r{i}"),
                capacity,
            })
            .collect()
    })
}

/// Up to 12 waiting tenants `ns/t00`…, most of 0 to 8 per dimension, some up to 20 (too large
/// for many classes).
fn waiting() -> impl Strategy<Value = Vec<WaitingTenant>> {
    let footprint = prop_oneof![5 => resources(0, 8), 1 => resources(0, 20)];
    prop::collection::vec(footprint, 0..=12).prop_map(|footprints| {
        footprints
            .into_iter()
            .enumerate()
            .map(|(i, footprint)| WaitingTenant {
                tenant: format!("ns/t{i:02}"),
                footprint,
            })
            .collect()
    })
}

#[derive(Clone, Debug)]
struct Input {
    policy: Policy,
    classes: Vec<NodeClassOffer>,
    in_flight: Vec<InFlightRequest>,
    waiting: Vec<WaitingTenant>,
}

fn input() -> impl Strategy<Value = Input> {
    (policy(), classes(), in_flight(), waiting()).prop_map(
        |(policy, classes, in_flight, waiting)| Input {
            policy,
            classes,
            in_flight,
            waiting,
        },
    )
}

impl Input {
    fn purchase(&self) -> Purchase {
        purchase(self.policy, &self.classes, &self.in_flight, &self.waiting)
    }

    fn class(&self, name: &str) -> &NodeClassOffer {
        self.classes.iter().find(|c| c.name == name).unwrap()
    }
}

/// Every node of the purchase as it arrives: the requests in flight, then the new nodes, as
/// (name, capacity).
fn arrivals(input: &Input, bought: &Purchase) -> Vec<(String, Resources)> {
    input
        .in_flight
        .iter()
        .map(|r| (r.name.clone(), r.capacity))
        .chain(bought.requests.iter().map(|n| (n.name.clone(), n.capacity)))
        .collect()
}

/// The planned tenants: on a new node or in a request's room.
fn planned(bought: &Purchase) -> BTreeMap<&str, &str> {
    let mut planned = BTreeMap::new();
    for node in &bought.requests {
        for t in &node.tenants {
            planned.insert(t.as_str(), node.name.as_str());
        }
    }
    for room in &bought.in_flight_assignments {
        for t in &room.tenants {
            planned.insert(t.as_str(), room.request.as_str());
        }
    }
    planned
}

/// The check, with the crate's own placement: `nodes` arrive as empty Online ledgers and the
/// planned tenants are placed one by one in packing order (`packing_order`) by
/// first fit (`plan_tenant_with`), each reservation written before the next. Where each one
/// lands.
fn place_all(
    input: &Input,
    nodes: &[(String, Resources)],
    planned: &BTreeMap<&str, &str>,
) -> BTreeMap<String, Option<String>> {
    let mut ledgers: Vec<NodeLedger> = nodes
        .iter()
        .map(|(name, capacity)| {
            NodeLedger::new(name.clone(), NodeState::Online, *capacity, Vec::new()).unwrap()
        })
        .collect();
    let mut landed = BTreeMap::new();
    for w in packed(input) {
        if !planned.contains_key(&*w.tenant) {
            continue;
        }
        let wants = TenantWants {
            uid: &w.tenant,
            tenant: &w.tenant,
            footprint: w.footprint,
            suspend: false,
            status_node: None,
            migration: None,
            asked: None,
            node_selector: None,
        };
        let node = match plan_tenant_with(Policy::FirstFit, &wants, &ledgers, 0) {
            Plan::Edit(edit) => {
                assert_eq!(edit.kind, EditKind::Reserve);
                let ledger = ledgers.iter_mut().find(|l| l.name() == edit.node).unwrap();
                *ledger = ledger.edited(&edit).unwrap();
                Some(edit.node)
            }
            Plan::Pending(_) => None,
            other => panic!("unexpected plan {other:?}"),
        };
        landed.insert(w.tenant.clone(), node);
    }
    landed
}

/// Whether the tenants planned on `dropped`, in packing order, all find room first fit on the
/// other nodes, each holding the tenants the purchase plans on it (`plan_tenant_with` again).
fn fits_in_room_left(input: &Input, bought: &Purchase, dropped: &str) -> bool {
    let footprint = |t: &str| {
        input
            .waiting
            .iter()
            .find(|w| w.tenant == t)
            .unwrap()
            .footprint
    };
    let holding = |name: &str, capacity: Resources, tenants: &[String]| {
        let entries = tenants
            .iter()
            .map(|t| placement::testing::entry(t, footprint(t)))
            .collect();
        NodeLedger::new(name, NodeState::Online, capacity, entries).unwrap()
    };
    let mut ledgers: Vec<NodeLedger> = input
        .in_flight
        .iter()
        .map(|r| {
            let room = bought
                .in_flight_assignments
                .iter()
                .find(|a| a.request == r.name)
                .unwrap();
            holding(&r.name, r.capacity, &room.tenants)
        })
        .chain(
            bought
                .requests
                .iter()
                .filter(|n| n.name != dropped)
                .map(|n| holding(&n.name, n.capacity, &n.tenants)),
        )
        .collect();
    let own = &bought
        .requests
        .iter()
        .find(|n| n.name == dropped)
        .unwrap()
        .tenants;
    for w in packed(input).filter(|w| own.contains(&w.tenant)) {
        let wants = TenantWants {
            uid: &w.tenant,
            tenant: &w.tenant,
            footprint: w.footprint,
            suspend: false,
            status_node: None,
            migration: None,
            asked: None,
            node_selector: None,
        };
        match plan_tenant_with(Policy::FirstFit, &wants, &ledgers, 0) {
            Plan::Edit(edit) => {
                let ledger = ledgers.iter_mut().find(|l| l.name() == edit.node).unwrap();
                *ledger = ledger.edited(&edit).unwrap();
            }
            _ => return false,
        }
    }
    true
}

/// The waiting tenants in packing order.
fn packed(input: &Input) -> impl Iterator<Item = &WaitingTenant> {
    packing_order(&input.classes, &input.in_flight, &input.waiting)
        .into_iter()
        .map(|position| &input.waiting[position])
}

/// The documented order of classes: priced first, then price, then capacity (threads, memory,
/// storage), then name.
fn cheaper_than(a: &NodeClassOffer, b: &NodeClassOffer) -> bool {
    let key = |c: &NodeClassOffer| {
        (
            c.monthly_cost.is_none(),
            c.monthly_cost.unwrap_or(0),
            c.capacity.threads,
            c.capacity.memory_gb,
            c.capacity.storage_gb,
            c.name.clone(),
        )
    };
    key(a) < key(b)
}

fn new_of(bought: &Purchase, class: &str) -> u32 {
    bought.requests.iter().filter(|n| n.class == class).count() as u32
}

fn under_limit(bought: &Purchase, class: &NodeClassOffer) -> bool {
    class
        .limit
        .is_none_or(|limit| class.in_use + new_of(bought, &class.name) < limit)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Every waiting tenant is planned once (on a new node or in a request's room) or left out;
    /// every new node is for someone and is its class's shape and price; the cost is their sum.
    #[test]
    fn every_tenant_is_planned_once_or_left_out(input in input()) {
        let bought = input.purchase();
        let planned = planned(&bought);
        let listed: usize = bought.requests.iter().map(|n| n.tenants.len()).sum::<usize>()
            + bought.in_flight_assignments.iter().map(|r| r.tenants.len()).sum::<usize>();
        prop_assert_eq!(listed, planned.len(), "a tenant planned twice");
        prop_assert_eq!(planned.len() + bought.unplaceable.len(), input.waiting.len());
        for left in &bought.unplaceable {
            prop_assert!(!planned.contains_key(&*left.tenant));
        }
        let mut cost = Cost::default();
        for node in &bought.requests {
            prop_assert!(!node.tenants.is_empty(), "{} is for nobody", node.name);
            let class = input.class(&node.class);
            prop_assert_eq!(node.capacity, class.capacity);
            prop_assert_eq!(node.monthly_cost, class.monthly_cost);
            match class.monthly_cost {
                Some(cents) => cost.monthly += u128::from(cents),
                None => cost.unpriced_nodes += 1,
            }
        }
        prop_assert_eq!(bought.cost, cost);
        let requests: Vec<&str> =
            bought.in_flight_assignments.iter().map(|r| r.request.as_str()).collect();
        let mut names: Vec<&str> = input.in_flight.iter().map(|r| r.name.as_str()).collect();
        names.sort();
        prop_assert_eq!(requests, names);
    }

    /// Once every node arrives empty, placing the planned tenants in packing order first fit
    /// puts each one where the purchase says (so each node's planned tenants fit it together).
    #[test]
    fn once_the_nodes_arrive_every_planned_tenant_lands_where_planned(input in input()) {
        let bought = input.purchase();
        let planned = planned(&bought);
        let landed = place_all(&input, &arrivals(&input, &bought), &planned);
        for (tenant, node) in &planned {
            prop_assert_eq!(
                landed[*tenant].as_deref(), Some(*node), "{} in {:?}", tenant, bought
            );
        }
    }

    /// No new node is bought that its tenants can do without: with the other nodes holding what
    /// is planned on them, its tenants (in packing order, first fit) do not all find room; or,
    /// if they do, the placement of everyone without it leaves someone unplaced (first fit would
    /// re-place the others differently).
    #[test]
    fn every_new_node_is_needed_by_one_of_its_tenants_or_by_the_check(input in input()) {
        let bought = input.purchase();
        let planned = planned(&bought);
        let nodes = arrivals(&input, &bought);
        for node in &bought.requests {
            let others: Vec<(String, Resources)> =
                nodes.iter().filter(|(n, _)| *n != node.name).cloned().collect();
            if !fits_in_room_left(&input, &bought, &node.name) {
                continue;
            }
            let landed = place_all(&input, &others, &planned);
            prop_assert!(
                landed.values().any(Option::is_none),
                "{} is not needed in {:?}", node.name, bought
            );
        }
    }

    /// No new node could be of a cheaper class: each cheaper class under its limit that holds the
    /// node's tenants leaves a planned tenant unplaced in its place.
    #[test]
    fn no_new_node_could_be_of_a_cheaper_class(input in input()) {
        let bought = input.purchase();
        let planned = planned(&bought);
        let nodes = arrivals(&input, &bought);
        for node in &bought.requests {
            let held = input
                .waiting
                .iter()
                .filter(|w| node.tenants.contains(&w.tenant))
                .fold(Resources::ZERO, |sum, w| sum.checked_add(w.footprint).unwrap());
            let current = input.class(&node.class);
            for class in &input.classes {
                if !cheaper_than(class, current)
                    || !held.fits_within(&class.capacity)
                    || !under_limit(&bought, class)
                {
                    continue;
                }
                let swapped: Vec<(String, Resources)> = nodes
                    .iter()
                    .map(|(n, cap)| {
                        (n.clone(), if *n == node.name { class.capacity } else { *cap })
                    })
                    .collect();
                let landed = place_all(&input, &swapped, &planned);
                prop_assert!(
                    landed.values().any(Option::is_none),
                    "{} could be {} in {:?}", node.name, class.name, bought
                );
            }
        }
    }

    /// A class's nodes in use plus its new ones never pass its limit.
    #[test]
    fn limits_are_never_exceeded(input in input()) {
        let bought = input.purchase();
        for class in &input.classes {
            if let Some(limit) = class.limit {
                let new = new_of(&bought, &class.name);
                prop_assert!(
                    new == 0 || class.in_use + new <= limit,
                    "{}: {} in use + {} new > {}", class.name, class.in_use, new, limit
                );
            }
        }
    }

    /// A tenant left out really cannot be had: planned along with the others on the nodes as
    /// bought, someone is left unplaced; and it fits no class (the shortfall against the largest
    /// capacity per dimension), or each class that holds it is at its limit after the purchase,
    /// or (`crowded`) is under it and one more node of it still leaves someone unplaced.
    #[test]
    fn a_tenant_left_out_really_cannot_be_had(input in input()) {
        let bought = input.purchase();
        let planned = planned(&bought);
        let nodes = arrivals(&input, &bought);
        for left in &bought.unplaceable {
            let mut with_it = planned.clone();
            with_it.insert(&*left.tenant, "");
            let landed = place_all(&input, &nodes, &with_it);
            prop_assert!(
                landed.values().any(Option::is_none),
                "{} fits as bought: {:?}", left.tenant, bought
            );
            let holders: Vec<&NodeClassOffer> = input
                .classes
                .iter()
                .filter(|c| left.footprint.fits_within(&c.capacity))
                .collect();
            match &left.why {
                NoClass::TooLarge { classes, shortfall } => {
                    prop_assert!(holders.is_empty(), "{} fits {:?}", left.tenant, holders);
                    prop_assert_eq!(*classes, input.classes.len());
                    prop_assert_eq!(shortfall.requested, left.footprint);
                    let largest = Resources::from_fn(|d| {
                        input.classes.iter().map(|c| c.capacity.get(d)).max().unwrap_or(0)
                    });
                    prop_assert_eq!(shortfall.available, largest);
                }
                NoClass::AtLimit { at_limit, crowded } => {
                    let mut names: Vec<&str> = holders.iter().map(|c| c.name.as_str()).collect();
                    let mut given: Vec<&str> =
                        at_limit.iter().chain(crowded).map(String::as_str).collect();
                    names.sort();
                    given.sort();
                    prop_assert_eq!(given, names);
                    for name in at_limit {
                        prop_assert!(!under_limit(&bought, input.class(name)), "{} is under its limit", name);
                    }
                    for name in crowded {
                        let class = input.class(name);
                        prop_assert!(under_limit(&bought, class), "{} is at its limit", name);
                        // One more node, named after every other (as the planner's next would be).
                        let mut more = nodes.clone();
                        more.push(("~~one-more".to_owned(), class.capacity));
                        let landed = place_all(&input, &more, &with_it);
                        prop_assert!(
                            landed.values().any(Option::is_none),
                            "one more {} places {} too: {:?}", name, left.tenant, bought
                        );
                    }
                }
                NoClass::NoneLabelled { .. } => prop_assert!(false, "no selectors here: {:?}", left),
            }
        }
    }

    /// The same input gives the same purchase, and so do its classes and requests in flight in
    /// any order.
    #[test]
    fn the_purchase_is_deterministic_and_does_not_depend_on_order(
        input in input(),
        seed in any::<u64>(),
    ) {
        let bought = input.purchase();
        prop_assert_eq!(&input.purchase(), &bought);
        let reordered = Input {
            classes: shuffled(&input.classes, seed),
            in_flight: shuffled(&input.in_flight, seed.rotate_left(17)),
            ..input.clone()
        };
        prop_assert_eq!(reordered.purchase(), bought);
    }

    /// Under FirstFit (and RoundRobin, checked from turn 0) without limits, the purchase never
    /// costs more than a node of the cheapest class that holds it for each planned tenant some
    /// class holds. (Not promised under BestFit or LeastLoaded, where that purchase may itself
    /// fail the check, nor with limits, where the cheapest class may be at its limit: see the
    /// table tests.)
    #[test]
    fn it_never_costs_more_than_one_cheapest_node_per_tenant(
        policy in policy(),
        classes in classes(),
        in_flight in in_flight(),
        waiting in waiting(),
    ) {
        let classes: Vec<NodeClassOffer> = classes
            .into_iter()
            .map(|c| NodeClassOffer { limit: None, ..c })
            .collect();
        let input = Input { policy, classes, in_flight, waiting };
        let bought = input.purchase();
        let bound = one_node_each(&input, &planned(&bought));
        prop_assert!(bought.cost <= bound, "{} > {}: {:?}", bought.cost, bound, bought);
    }
}

/// A node of the cheapest class that holds it for each planned tenant some class holds.
fn one_node_each(input: &Input, planned: &BTreeMap<&str, &str>) -> Cost {
    let mut cost = Cost::default();
    for w in &input.waiting {
        if !planned.contains_key(&*w.tenant) {
            continue;
        }
        let cheapest = input
            .classes
            .iter()
            .filter(|c| w.footprint.fits_within(&c.capacity))
            .reduce(|a, b| if cheaper_than(b, a) { b } else { a });
        match cheapest.map(|c| c.monthly_cost) {
            Some(Some(cents)) => cost.monthly += u128::from(cents),
            Some(None) => cost.unpriced_nodes += 1,
            None => {}
        }
    }
    cost
}

/// The deterministic shuffle of the other property tests.
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

/// The generator is not vacuous: many inputs buy nodes, some use requests' room, some leave a
/// tenant out for each reason, and some buy more than one class.
#[test]
fn random_inputs_exercise_every_outcome() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = input();
    let mut seen = BTreeMap::<&str, usize>::new();
    for _ in 0..1000 {
        let input = strategy.new_tree(&mut runner).unwrap().current();
        let bought = input.purchase();
        let mut count = |what| *seen.entry(what).or_default() += 1;
        if !bought.requests.is_empty() {
            count("buys");
        }
        if bought.requests.len() > 3 {
            count("buys many");
        }
        if bought
            .in_flight_assignments
            .iter()
            .any(|r| !r.tenants.is_empty())
        {
            count("uses room in flight");
        }
        let mut classes: Vec<&str> = bought.requests.iter().map(|n| n.class.as_str()).collect();
        classes.dedup();
        if classes.len() > 1 {
            count("mixes classes");
        }
        for left in &bought.unplaceable {
            count(match &left.why {
                NoClass::TooLarge { .. } => "too large",
                NoClass::AtLimit { crowded, .. } if crowded.is_empty() => "at limit",
                NoClass::AtLimit { .. } => "crowded",
                NoClass::NoneLabelled { .. } => "no class labelled",
            });
        }
    }
    for what in [
        "buys",
        "buys many",
        "uses room in flight",
        "mixes classes",
        "too large",
        "at limit",
    ] {
        assert!(
            seen.get(what).copied().unwrap_or(0) > 20,
            "{what}: {seen:?}"
        );
    }
}
