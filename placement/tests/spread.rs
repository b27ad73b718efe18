//! Spreading replicas against a brute-force reference on small fleets: every set of nodes a
//! tenant's replicas could take is tried. `place_spread` places exactly when some set keeps the
//! rules (never two replicas on one node, zone skew at most one, no node over-committed), what
//! it places keeps them, and it is first fit where spread allows it: under `Nodes` the first
//! nodes by name; under `Zones` the earliest zones by name take the replica more, and inside a
//! zone its first nodes by name. When the tenant already holds entries (a crash between writes,
//! a replicas change, a resize), it keeps as many of them as any set that keeps the rules does,
//! and what it adds is still first fit.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeMap;

use placement::{NodeState, NodeView, Resources, Spread, ZonedNode, place_spread};
use proptest::prelude::*;

mod common;

const ZONES: [&str; 3] = ["fsn1", "hel1", "nbg1"];

#[derive(Clone, Debug)]
struct OwnedNode {
    name: String,
    state: NodeState,
    zone: Option<&'static str>,
    capacity: Resources,
    allocated: Resources,
    /// The tenant's own entry on it.
    held: Option<Resources>,
}

impl OwnedNode {
    fn zoned(&self) -> ZonedNode<'_> {
        ZonedNode {
            view: NodeView {
                name: &self.name,
                state: self.state,
                capacity: self.capacity,
                allocated: self.allocated,
            },
            zone: self.zone,
            held: self.held,
        }
    }

    /// Considered by the rules: takes new tenants, or holds the tenant and is not draining.
    fn considered(&self) -> bool {
        let takes = self.state == NodeState::Online && self.allocated.fits_within(&self.capacity);
        takes || (self.held.is_some() && self.state != NodeState::Draining)
    }

    /// Room for one replica, its own entry counted as free.
    fn room_for(&self, footprint: Resources) -> bool {
        let free = self.capacity.saturating_sub(self.allocated);
        let own = self.held.unwrap_or(Resources::ZERO);
        footprint.fits_within(&free.checked_add(own).unwrap())
    }
}

type NodeParts = (NodeState, Option<&'static str>, u64, u64, Option<u64>);

fn node(holding: bool) -> impl Strategy<Value = NodeParts> {
    let held = if holding {
        prop_oneof![2 => Just(None), 1 => (1..=5u64).prop_map(Some)].boxed()
    } else {
        Just(None).boxed()
    };
    (
        prop_oneof![
            6 => Just(NodeState::Online),
            1 => Just(NodeState::Cordoned),
            1 => Just(NodeState::Draining)
        ],
        prop_oneof![6 => (0..3usize).prop_map(|z| Some(ZONES[z])), 1 => Just(None)],
        4..=8u64,
        0..=8u64,
        held,
    )
}

/// Up to seven nodes; with `holding`, some hold an entry of the tenant (counted in allocated).
fn fleet_of(holding: bool) -> impl Strategy<Value = Vec<OwnedNode>> {
    prop::collection::vec(node(holding), 0..=7).prop_map(|parts| {
        parts
            .into_iter()
            .enumerate()
            // Names distinct and out of order: placement sorts them.
            .map(|(i, (state, zone, capacity, allocated, held))| OwnedNode {
                name: format!("n{}", (i * 5) % 7),
                state,
                zone,
                capacity: Resources::new(capacity, 16, 16),
                allocated: Resources::new(allocated + held.unwrap_or(0), 0, 0),
                held: held.map(|t| Resources::new(t, 0, 0)),
            })
            .collect()
    })
}

fn fleet() -> impl Strategy<Value = Vec<OwnedNode>> {
    fleet_of(false)
}

/// The zones the rules count (those of the nodes considered), and each set's replicas per zone.
fn considered(fleet: &[OwnedNode], spread: Spread) -> Vec<&OwnedNode> {
    fleet
        .iter()
        .filter(|n| n.considered())
        .filter(|n| spread != Spread::Zones || n.zone.is_some())
        .collect()
}

/// Replicas per zone of `set`, over every zone considered (0 included), in zone name order.
fn per_zone(considered: &[&OwnedNode], set: &[&OwnedNode]) -> Vec<usize> {
    let mut counts: BTreeMap<&str, usize> = considered
        .iter()
        .filter_map(|n| n.zone)
        .map(|z| (z, 0))
        .collect();
    for node in set {
        *counts.entry(node.zone.unwrap()).or_default() += 1;
    }
    counts.into_values().collect()
}

/// Every set of `replicas` nodes that keeps the rules, each in name order.
fn valid_sets(
    fleet: &[OwnedNode],
    spread: Spread,
    replicas: usize,
    footprint: Resources,
) -> Vec<Vec<&OwnedNode>> {
    let considered = considered(fleet, spread);
    let mut sets = Vec::new();
    for mask in 0u32..(1 << considered.len()) {
        if mask.count_ones() as usize != replicas {
            continue;
        }
        let set: Vec<&OwnedNode> = (0..considered.len())
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| considered[i])
            .collect();
        let room = set.iter().all(|n| n.room_for(footprint));
        let balanced = spread != Spread::Zones || {
            let counts = per_zone(&considered, &set);
            counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0) <= 1
        };
        if room && balanced {
            let mut set = set;
            set.sort_by(|a, b| a.name.cmp(&b.name));
            sets.push(set);
        }
    }
    sets
}

fn names(set: &[&OwnedNode]) -> Vec<String> {
    set.iter().map(|n| n.name.clone()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn spreading_places_exactly_when_the_rules_allow_and_first_fit_where_they_do(
        fleet in fleet(),
        zones in any::<bool>(),
        replicas in 0..=6u32,
        threads in 1..=5u64,
    ) {
        let spread = if zones { Spread::Zones } else { Spread::Nodes };
        let footprint = Resources::new(threads, 1, 1);
        let views: Vec<ZonedNode<'_>> = fleet.iter().map(OwnedNode::zoned).collect();
        let got = place_spread(&views, spread, replicas, footprint);
        let sets = valid_sets(&fleet, spread, replicas as usize, footprint);
        match got {
            Err(no_fit) => prop_assert!(sets.is_empty(), "no fit ({no_fit}), but {:?} keeps the rules", names(&sets[0])),
            Ok(placed) => {
                let placed: Vec<String> = placed.iter().map(|r| r.node.to_owned()).collect();
                let considered = considered(&fleet, spread);
                // The first fit the rules allow: under Zones the count vector the earliest
                // zones favour, then the first nodes by name.
                let best = sets
                    .iter()
                    .max_by(|a, b| {
                        let key = |s: &Vec<&OwnedNode>| {
                            if spread == Spread::Zones { per_zone(&considered, s) } else { Vec::new() }
                        };
                        key(a).cmp(&key(b)).then_with(|| names(b).cmp(&names(a)))
                    });
                prop_assert!(best.is_some(), "placed {placed:?}, but no set keeps the rules");
                prop_assert_eq!(&placed, &names(best.unwrap()));
                // And what it placed keeps them, replica zones said as the nodes carry them.
                prop_assert!(sets.iter().any(|s| names(s) == placed));
            }
        }
    }
}

fn kept(set: &[&OwnedNode]) -> usize {
    set.iter().filter(|n| n.held.is_some()).count()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn what_a_tenant_holds_is_kept_as_far_as_any_placement_could_and_the_rest_is_first_fit(
        fleet in fleet_of(true),
        zones in any::<bool>(),
        replicas in 0..=6u32,
        threads in 1..=5u64,
    ) {
        let spread = if zones { Spread::Zones } else { Spread::Nodes };
        let footprint = Resources::new(threads, 0, 0);
        let views: Vec<ZonedNode<'_>> = fleet.iter().map(OwnedNode::zoned).collect();
        let got = place_spread(&views, spread, replicas, footprint);
        let sets = valid_sets(&fleet, spread, replicas as usize, footprint);
        let Ok(placed) = got else {
            prop_assert!(sets.is_empty(), "no fit, but {:?} keeps the rules", names(&sets[0]));
            return Ok(());
        };
        let placed: Vec<&OwnedNode> = placed
            .iter()
            .map(|r| fleet.iter().find(|n| n.name == r.node).unwrap())
            .collect();
        prop_assert!(sets.iter().any(|s| names(s) == names(&placed)), "{:?} breaks the rules", names(&placed));
        let most = sets.iter().map(|s| kept(s)).max().unwrap_or(0);
        prop_assert_eq!(kept(&placed), most, "kept fewer of what it holds than {}", most);
        // What it adds in a zone (or anywhere, under Nodes) is the first by name with room there.
        let considered = considered(&fleet, spread);
        for added in placed.iter().filter(|n| n.held.is_none()) {
            let passed_over = considered.iter().any(|n| {
                n.held.is_none()
                    && n.name < added.name
                    && (spread == Spread::Nodes || n.zone == added.zone)
                    && n.room_for(footprint)
                    && !placed.iter().any(|p| p.name == n.name)
            });
            prop_assert!(!passed_over, "{} added past a node before it with room", added.name);
        }
    }
}

#[test]
fn the_reference_meets_every_kind_of_answer() {
    // The properties above are about fleets where spreading places, where it does not, and
    // where a zone holds two: a fixed sample meets each.
    let cases = common::sample((fleet(), 1..=6u32), 500);
    let (mut placed, mut refused, mut two_in_a_zone) = (0, 0, 0);
    for (fleet, replicas) in &cases {
        let views: Vec<ZonedNode<'_>> = fleet.iter().map(OwnedNode::zoned).collect();
        match place_spread(&views, Spread::Zones, *replicas, Resources::new(2, 1, 1)) {
            Ok(got) => {
                placed += 1;
                let mut zones: BTreeMap<_, usize> = BTreeMap::new();
                for r in &got {
                    *zones.entry(r.zone).or_default() += 1;
                }
                if zones.values().any(|n| *n >= 2) {
                    two_in_a_zone += 1;
                }
            }
            Err(_) => refused += 1,
        }
    }
    assert!(
        placed > 50 && refused > 50 && two_in_a_zone > 10,
        "{placed} placed, {refused} refused, {two_in_a_zone} with two in a zone"
    );
}

#[test]
fn the_held_fleets_meet_kept_added_and_dropped_entries() {
    let cases = common::sample((fleet_of(true), 1..=6u32), 500);
    let (mut kept_some, mut added_some, mut dropped_some) = (0, 0, 0);
    for (fleet, replicas) in &cases {
        let views: Vec<ZonedNode<'_>> = fleet.iter().map(OwnedNode::zoned).collect();
        let Ok(got) = place_spread(&views, Spread::Zones, *replicas, Resources::new(2, 0, 0))
        else {
            continue;
        };
        let held = |name: &str| fleet.iter().any(|n| n.name == name && n.held.is_some());
        kept_some += usize::from(got.iter().any(|r| held(r.node)));
        added_some += usize::from(got.iter().any(|r| !held(r.node)));
        dropped_some += usize::from(
            fleet
                .iter()
                .any(|n| n.held.is_some() && !got.iter().any(|r| r.node == n.name)),
        );
    }
    assert!(
        kept_some > 50 && added_some > 50 && dropped_some > 20,
        "{kept_some} kept, {added_some} added, {dropped_some} dropped"
    );
}
