//! Properties of making room (`placement::make_room`) over random small fleets, against a brute
//! force that tries every host, every set of movers and every assignment of them: the plan is
//! valid (the waiter fits once the moves are made, no target is filled past its effective
//! capacity, only allowed and smaller tenants move, at most the limit), it exists exactly when
//! the brute force finds one, and it is minimal (the fewest movers, then the least moved, in
//! threads, memory, storage). The answer does not depend on the order of the nodes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeMap;

use placement::{Entry, Mover, NodeLedger, NodeState, Overcommit, Resources, Room, make_room};
use proptest::prelude::*;

mod common;

fn resources(min: u64, max: u64) -> impl Strategy<Value = Resources> {
    (min..=max, min..=max, min..=max).prop_map(|(t, m, s)| Resources::new(t, m, s))
}

/// Mostly threads that differ (memory and storage small), so that most entries are smaller
/// than the waiter and room can often be made; now and then any shape.
fn entry() -> impl Strategy<Value = Resources> {
    prop_oneof![
        3 => (0u64..=5, 0u64..=2, 0u64..=2).prop_map(|(t, m, s)| Resources::new(t, m, s)),
        1 => resources(0, 5),
    ]
}

fn waiter() -> impl Strategy<Value = Resources> {
    prop_oneof![
        3 => (3u64..=9, 2u64..=4, 2u64..=4).prop_map(|(t, m, s)| Resources::new(t, m, s)),
        1 => resources(1, 12),
    ]
}

/// Up to 6 nodes, each holding up to 5 entries (UIDs unique), some not Online, some with
/// overcommit, now and then a hold: small enough for the brute force. Most are nearly full in
/// threads (what they hold plus 0 to 3), so that a waiter often fits nowhere as the fleet is.
fn fleet() -> impl Strategy<Value = Vec<NodeLedger>> {
    let state = prop_oneof![
        6 => Just(NodeState::Online),
        1 => Just(NodeState::Cordoned),
        1 => Just(NodeState::Draining),
    ];
    let overcommit = prop_oneof![
        4 => Just(Overcommit::NONE),
        1 => Just(Overcommit::from_per_mille(1500, 1000, 1000).unwrap()),
    ];
    let node = (
        state,
        prop_oneof![3 => 0u64..=3, 1 => 0u64..=10],
        resources(6, 12),
        overcommit,
        prop::collection::vec(entry(), 0..=5),
        prop::option::weighted(0.1, resources(1, 3)),
    );
    prop::collection::vec(node, 1..=6).prop_map(|nodes| {
        let parts = nodes
            .into_iter()
            .map(|(state, slack, capacity, overcommit, entries, hold)| {
                let held: u64 = entries.iter().map(|e| e.threads).sum();
                let capacity = Resources {
                    threads: held + slack,
                    ..capacity
                };
                (state, capacity, overcommit, entries, hold)
            })
            .collect();
        common::build_fleet(parts, "older")
    })
}

/// Tenants whose UID number is a multiple of 5 may not move (the caller's rule, as
/// do-not-disrupt is).
fn rule(entry: &Entry) -> Mover<'static> {
    let number: u32 = entry.uid.trim_start_matches('t').parse().unwrap_or(0);
    (!number.is_multiple_of(5)).then_some(None)
}

fn smaller(a: &Resources, b: &Resources) -> bool {
    a.fits_within(b) && a != b
}

/// The rank of a plan: movers, then threads, memory, storage moved.
fn rank(movers: usize, moved: Resources) -> (usize, u64, u64, u64) {
    (movers, moved.threads, moved.memory_gb, moved.storage_gb)
}

fn sum(amounts: impl IntoIterator<Item = Resources>) -> Resources {
    amounts
        .into_iter()
        .fold(Resources::ZERO, |a, b| a.checked_add(b).unwrap())
}

/// The least rank over every host, every set of at most `max` movers and every assignment.
fn brute_force(
    nodes: &[NodeLedger],
    waiter: &Resources,
    max: usize,
) -> Option<(usize, u64, u64, u64)> {
    let open = |n: &NodeLedger| n.view().takes_new_tenants();
    let mut best = None;
    for (h, host) in nodes.iter().enumerate() {
        if !open(host) {
            continue;
        }
        let movers: Vec<&Entry> = host
            .entries()
            .iter()
            .filter(|e| smaller(&e.resources, waiter) && rule(e).is_some())
            .collect();
        for mask in 0u32..(1 << movers.len()) {
            let set: Vec<&Entry> = (0..movers.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| movers[i])
                .collect();
            if set.len() > max {
                continue;
            }
            let moved = sum(set.iter().map(|e| e.resources));
            let left = host.allocated().saturating_sub(moved);
            if !left
                .checked_add(*waiter)
                .unwrap()
                .fits_within(&host.effective_capacity())
            {
                continue;
            }
            let targets: Vec<usize> = (0..nodes.len())
                .filter(|&t| t != h && open(&nodes[t]))
                .collect();
            if assignable(nodes, &set, &targets, &mut BTreeMap::new()) {
                let r = rank(set.len(), moved);
                if best.is_none_or(|b| r < b) {
                    best = Some(r);
                }
            }
        }
    }
    best
}

fn assignable(
    nodes: &[NodeLedger],
    set: &[&Entry],
    targets: &[usize],
    added: &mut BTreeMap<usize, Resources>,
) -> bool {
    let Some((first, rest)) = set.split_first() else {
        return true;
    };
    for &t in targets {
        let before = added.get(&t).copied().unwrap_or(Resources::ZERO);
        let after = before.checked_add(first.resources).unwrap();
        let fits = nodes[t]
            .allocated()
            .checked_add(after)
            .unwrap()
            .fits_within(&nodes[t].effective_capacity());
        if fits {
            added.insert(t, after);
            if assignable(nodes, rest, targets, added) {
                return true;
            }
            added.insert(t, before);
        }
    }
    false
}

/// The plan checked on its own: made by hand, the waiter fits its host and nothing is filled
/// past its effective capacity.
fn check_valid(nodes: &[NodeLedger], waiter: &Resources, max: usize, room: &Room) {
    assert!(room.moves.len() <= max);
    let by_name: BTreeMap<&str, &NodeLedger> = nodes.iter().map(|n| (n.name(), n)).collect();
    let host = by_name[room.host.as_str()];
    assert!(host.view().takes_new_tenants());
    let mut added: BTreeMap<&str, Resources> = BTreeMap::new();
    for m in &room.moves {
        assert_eq!(m.from, room.host);
        assert_ne!(m.to, room.host);
        let entry = host.entry_of(&m.uid).expect("a mover is on the host");
        assert_eq!(entry.resources, m.resources);
        assert!(smaller(&m.resources, waiter), "{} is not smaller", m.uid);
        assert!(rule(entry).is_some(), "{} may not move", m.uid);
        let to = by_name[m.to.as_str()];
        assert!(to.view().takes_new_tenants(), "{} takes no tenants", m.to);
        let now = added.entry(m.to.as_str()).or_insert(Resources::ZERO);
        *now = now.checked_add(m.resources).unwrap();
    }
    for (name, extra) in &added {
        let node = by_name[name];
        let after = node.allocated().checked_add(*extra).unwrap();
        assert!(
            after.fits_within(&node.effective_capacity()),
            "{name} over-committed"
        );
    }
    let left = host.allocated().saturating_sub(room.moved());
    assert!(
        left.checked_add(*waiter)
            .unwrap()
            .fits_within(&host.effective_capacity())
    );
    let mut uids: Vec<&str> = room.moves.iter().map(|m| &*m.uid).collect();
    uids.dedup();
    assert_eq!(uids.len(), room.moves.len(), "a tenant moved twice");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn the_room_made_is_valid_exists_when_any_does_and_moves_the_least(
        nodes in fleet(),
        waiter in waiter(),
        max in 0usize..=4,
        seed in any::<u64>(),
    ) {
        let room = make_room(&nodes, &waiter, None, max, rule);
        let best = brute_force(&nodes, &waiter, max);
        match (&room, best) {
            (None, None) => {}
            (Some(room), Some(best)) => {
                check_valid(&nodes, &waiter, max, room);
                prop_assert_eq!(rank(room.moves.len(), room.moved()), best);
            }
            (room, best) => prop_assert!(false, "plan {:?}, brute force {:?}", room, best),
        }
        // Any order of the nodes gives the same room.
        let mut shuffled = nodes.clone();
        let len = shuffled.len();
        for i in 0..len {
            let j = (seed.rotate_left(i as u32) as usize) % len;
            shuffled.swap(i, j);
        }
        prop_assert_eq!(make_room(&shuffled, &waiter, None, max, rule), room);
    }
}
