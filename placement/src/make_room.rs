//! Making room by moving: the fewest smaller tenants to move off one node so that a waiting
//! tenant fits there, and where each of them goes. Computed, never executed: the controller
//! carries the moves out make-before-break and holds the room for the waiter.
//!
//! ```text
//!   waiter w: 6 threads; every node 8 threads
//!   a  6/8  t1(4) t2(2)      a needs 4 more free: t1 alone (1 move) covers it
//!   b  5/8  t3(5)            b needs 3: t3 covers it, but 5 fits on no other node
//!   c  5/8  t4(3) t5(2)      c needs 3: t4 alone, to a? a has 2 free: no. t4 → b? 3 free: yes
//!   → one move either way (a: t1 → ?, t1 is 4: fits nowhere; c: t4 → b): room on c, t4 → b
//! ```
//!
//! Rules enforced here:
//! - the **host** (the node that makes room) takes new tenants (Online, within its effective
//!   capacity), carries the waiter's selector labels, and bears a unique name;
//! - a **mover** is an entry on the host that the caller allows to move (not `do-not-disrupt`,
//!   not waiting to grow: the caller's rule) and that is **smaller** than the waiter: no larger
//!   in any dimension, and not equal to it;
//! - at most `max_moves` movers; once they are gone the waiter fits the host's effective
//!   capacity beside what stays (room held for older waiters counts as taken);
//! - every mover goes to another node that takes new tenants, carries its labels and bears a
//!   unique name, counting the other movers sent there: **no node is filled past its effective
//!   capacity**. A node the waiter could use without moves means no moves (`moves` empty);
//! - **minimal**: the fewest movers, then the fewest threads moved, then the least memory, then
//!   the least storage, then the host's name, then the movers' UIDs in order; among the
//!   assignments of those movers the first found trying targets in name order, the movers with
//!   the fewest possible targets first;
//! - **bounded**: the search for an assignment of one set of movers gives up after
//!   [`ASSIGN_STEPS`] steps (never reached on fleets where every mover has a few targets).
//!
//! Cost: for each size up to `max_moves`, every set of that many movers on every host whose
//! movers could cover its shortfall; each set checked against its movers' targets, which are
//! found once per mover (O(nodes)).

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::fit::NodeView;
use crate::ledger::{Entry, NodeLedger};
use crate::rebalance::Move;
use crate::resources::{Dimension, Resources};
use crate::selector::Labels;

/// Steps the search for one set's assignment may take before it counts as not assignable.
pub const ASSIGN_STEPS: usize = 10_000;

/// Where the room is made, and the moves that make it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Room {
    /// The node the waiter fits on once the moves are made.
    pub host: String,
    /// One per mover, the movers in UID order; empty when the waiter fits the host as it is.
    pub moves: Vec<Move>,
}

impl Room {
    /// What the moves take off the host.
    pub fn moved(&self) -> Resources {
        total(self.moves.iter().map(|m| &m.resources))
    }
}

/// Whether an entry may move, and where: `None` when it may not (the caller's rule), else the
/// labels its target must carry (`Some(None)`: any node).
pub type Mover<'s> = Option<Option<&'s Labels>>;

/// The room for a waiting tenant of `footprint` (and `selector`) made by moving at most
/// `max_moves` entries (see the module rules); `mover` says which entries may move and where.
/// `None` when no such room exists. Pure: the same nodes, in any order, give the same room.
pub fn make_room<'s>(
    nodes: &[NodeLedger],
    footprint: &Resources,
    selector: Option<&Labels>,
    max_moves: usize,
    mover: impl Fn(&Entry) -> Mover<'s>,
) -> Option<Room> {
    let mut sorted: Vec<&NodeLedger> = nodes.iter().collect();
    sorted.sort_by(|a, b| a.name().cmp(b.name()));
    let unique: Vec<bool> = (0..sorted.len())
        .map(|i| {
            let name = sorted.get(i).map(|n| n.name());
            let same = |j: Option<usize>| j.and_then(|j| sorted.get(j)).map(|n| n.name()) == name;
            !same(i.checked_sub(1)) && !same(i.checked_add(1))
        })
        .collect();
    let open = |i: usize| -> Option<NodeView<'_>> {
        let node = sorted.get(i)?;
        let view = node.view();
        (unique.get(i) == Some(&true) && view.takes_new_tenants()).then_some(view)
    };
    let hosts: Vec<Host<'_, 's>> = (0..sorted.len())
        .filter_map(|i| {
            let node = *sorted.get(i)?;
            let view = open(i)?;
            if !node.matches(selector) {
                return None;
            }
            let movers = node
                .entries()
                .iter()
                .filter(|e| smaller(&e.resources, footprint))
                .filter_map(|e| Some((e, mover(e)?)))
                .collect();
            Some(Host {
                position: i,
                node,
                short: footprint.saturating_sub(view.free()),
                movers,
            })
        })
        .collect();
    if let Some(host) = hosts.iter().find(|h| h.short == Resources::ZERO) {
        return Some(Room {
            host: host.node.name().to_owned(),
            moves: Vec::new(),
        });
    }
    // Each mover's possible targets on the fleet as it is, found once.
    let mut targets: HashMap<(usize, &str), Vec<usize>> = HashMap::new();
    for size in 1..=max_moves {
        let mut best: Option<(Key<'_>, Vec<(usize, usize)>)> = None;
        for host in &hosts {
            if host.movers.len() < size || !total_covers(&host.movers, &host.short) {
                continue;
            }
            for set in subsets(host.movers.len(), size) {
                let chosen: Vec<&(&Entry, Option<&Labels>)> =
                    set.iter().filter_map(|&i| host.movers.get(i)).collect();
                let moved = total(chosen.iter().map(|(e, _)| &e.resources));
                if !host.short.fits_within(&moved) {
                    continue;
                }
                let key = Key {
                    moved,
                    host: host.node.name(),
                    uids: sorted_uids(&chosen),
                };
                if best
                    .as_ref()
                    .is_some_and(|(b, _)| key.cmp(b) != Ordering::Less)
                {
                    continue;
                }
                let lists: Vec<Vec<usize>> = chosen
                    .iter()
                    .map(|(entry, labels)| {
                        targets
                            .entry((host.position, entry.uid.as_str()))
                            .or_insert_with(|| {
                                (0..sorted.len())
                                    .filter(|&t| t != host.position)
                                    .filter(|&t| {
                                        open(t)
                                            .is_some_and(|v| entry.resources.fits_within(&v.free()))
                                            && sorted.get(t).is_some_and(|n| n.matches(*labels))
                                    })
                                    .collect()
                            })
                            .clone()
                    })
                    .collect();
                let wanted: Vec<Resources> = chosen.iter().map(|(e, _)| e.resources).collect();
                let free = |t: usize| open(t).map(|v| v.free()).unwrap_or(Resources::ZERO);
                if let Some(assignment) = assign(&wanted, &lists, free) {
                    let moves = set
                        .iter()
                        .copied()
                        .zip(assignment)
                        .collect::<Vec<(usize, usize)>>();
                    best = Some((key, moves));
                }
            }
            // `best` is filled by some host: later hosts compete on the key alone.
        }
        if let Some((key, moves)) = best {
            let host = hosts.iter().find(|h| h.node.name() == key.host)?;
            let mut made: Vec<Move> = moves
                .into_iter()
                .filter_map(|(mover, target)| {
                    let (entry, _) = host.movers.get(mover)?;
                    Some(Move {
                        uid: entry.uid.clone(),
                        tenant: entry.tenant.clone(),
                        resources: entry.resources,
                        from: host.node.name().to_owned(),
                        to: sorted.get(target)?.name().to_owned(),
                    })
                })
                .collect();
            made.sort_by(|a, b| a.uid.cmp(&b.uid));
            return Some(Room {
                host: key.host.to_owned(),
                moves: made,
            });
        }
    }
    None
}

/// A node that may make room, and the entries on it that may move.
#[derive(Debug)]
struct Host<'a, 's> {
    /// Its position in name order.
    position: usize,
    node: &'a NodeLedger,
    /// What the waiter lacks there.
    short: Resources,
    movers: Vec<(&'a Entry, Option<&'s Labels>)>,
}

/// The order sets of one size are ranked by (see the module rules).
#[derive(Debug, PartialEq, Eq)]
struct Key<'a> {
    moved: Resources,
    host: &'a str,
    uids: Vec<&'a str>,
}

impl Ord for Key<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        Dimension::ALL
            .iter()
            .map(|d| self.moved.get(*d).cmp(&other.moved.get(*d)))
            .fold(Ordering::Equal, Ordering::then)
            .then_with(|| self.host.cmp(other.host))
            .then_with(|| self.uids.cmp(&other.uids))
    }
}

impl PartialOrd for Key<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// No larger than `than` in any dimension, and not equal to it.
fn smaller(amount: &Resources, than: &Resources) -> bool {
    amount.fits_within(than) && amount != than
}

/// The sum, saturating at [`Resources::LIMIT`] (a sum that large covers any shortfall).
fn total<'r>(amounts: impl IntoIterator<Item = &'r Resources>) -> Resources {
    amounts.into_iter().fold(Resources::ZERO, |sum, r| {
        Resources::from_fn(|d| sum.get(d).saturating_add(r.get(d)).min(Resources::LIMIT))
    })
}

/// Whether every mover together covers the shortfall: no set of them can otherwise.
fn total_covers(movers: &[(&Entry, Option<&Labels>)], short: &Resources) -> bool {
    short.fits_within(&total(movers.iter().map(|(e, _)| &e.resources)))
}

fn sorted_uids<'a>(chosen: &[&(&'a Entry, Option<&Labels>)]) -> Vec<&'a str> {
    let mut uids: Vec<&str> = chosen.iter().map(|(e, _)| e.uid.as_str()).collect();
    uids.sort_unstable();
    uids
}

/// Every set of `size` positions out of `count`, in lexicographic order.
fn subsets(count: usize, size: usize) -> impl Iterator<Item = Vec<usize>> {
    let mut next: Option<Vec<usize>> = (size <= count).then(|| (0..size).collect());
    std::iter::from_fn(move || {
        let current = next.take()?;
        // Advance the rightmost position that can still move right.
        let mut following = current.clone();
        let mut i = size;
        while let Some(j) = i.checked_sub(1) {
            i = j;
            let limit = count.saturating_sub(size).saturating_add(j);
            if following.get(j).is_some_and(|&p| p < limit) {
                let start = following.get(j).copied().unwrap_or(0).saturating_add(1);
                for (k, slot) in following.iter_mut().enumerate().skip(j) {
                    *slot = start.saturating_add(k.saturating_sub(j));
                }
                next = Some(following);
                break;
            }
        }
        Some(current)
    })
}

/// A target for each of `wanted` among its `lists` (positions), none filled past the room
/// `free` gives it, counting the others sent there; trying the movers with the fewest targets
/// first, each one's targets in order. `None` when there is none within [`ASSIGN_STEPS`].
fn assign(
    wanted: &[Resources],
    lists: &[Vec<usize>],
    free: impl Fn(usize) -> Resources,
) -> Option<Vec<usize>> {
    let mut order: Vec<usize> = (0..wanted.len()).collect();
    order.sort_by_key(|&i| (lists.get(i).map_or(0, Vec::len), i));
    let mut taken: HashMap<usize, Resources> = HashMap::new();
    let mut chosen: Vec<Option<usize>> = vec![None; wanted.len()];
    let mut steps = 0usize;
    let found = search(
        &order,
        wanted,
        lists,
        &free,
        &mut taken,
        &mut chosen,
        &mut steps,
    );
    if !found {
        return None;
    }
    chosen.into_iter().collect()
}

fn search(
    order: &[usize],
    wanted: &[Resources],
    lists: &[Vec<usize>],
    free: &impl Fn(usize) -> Resources,
    taken: &mut HashMap<usize, Resources>,
    chosen: &mut [Option<usize>],
    steps: &mut usize,
) -> bool {
    let Some((&mover, rest)) = order.split_first() else {
        return true;
    };
    let (Some(amount), Some(list)) = (wanted.get(mover), lists.get(mover)) else {
        return false;
    };
    for &target in list {
        *steps = steps.saturating_add(1);
        if *steps > ASSIGN_STEPS {
            return false;
        }
        let before = taken.get(&target).copied().unwrap_or(Resources::ZERO);
        let Some(after) = before.checked_add(*amount) else {
            continue;
        };
        if !after.fits_within(&free(target)) {
            continue;
        }
        taken.insert(target, after);
        if let Some(slot) = chosen.get_mut(mover) {
            *slot = Some(target);
        }
        if search(rest, wanted, lists, free, taken, chosen, steps) {
            return true;
        }
        taken.insert(target, before);
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::fit::NodeState;
    use crate::testing::{labels, ledger};

    /// Every node 8 threads, 32 GB, 100 GB; tenants ask threads and 1 GB, 1 GB.
    fn node(name: &str) -> crate::testing::LedgerBuilder<'_> {
        ledger(name).capacity(8, 32, 100)
    }

    /// a holds six 1-thread tenants (2 free), b has 5 free: a 7-thread waiter needs five of a's
    /// tenants to move.
    fn six_ones() -> Vec<NodeLedger> {
        let a = (1..=6).fold(node("a"), |a, i| a.holding(&format!("t{i}"), (1, 1, 1)));
        vec![a.build(), node("b").allocated(3, 0, 0).build()]
    }

    fn any(_: &Entry) -> Mover<'static> {
        Some(None)
    }

    fn moves(room: &Room) -> Vec<(&str, &str, &str)> {
        room.moves
            .iter()
            .map(|m| (m.uid.as_str(), m.from.as_str(), m.to.as_str()))
            .collect()
    }

    /// A move as `(uid, from, to)`.
    type Hop = (&'static str, &'static str, &'static str);

    #[test]
    fn the_fewest_smaller_tenants_move_and_each_goes_where_there_is_room() {
        struct Case {
            name: &'static str,
            nodes: Vec<NodeLedger>,
            waiter: u64,
            max: usize,
            want: Option<(&'static str, Vec<Hop>)>,
        }
        let cases = [
            Case {
                name: "the module's example: t1 fits nowhere, t3 neither, t4 goes to b",
                nodes: vec![
                    node("a")
                        .holding("t1", (4, 1, 1))
                        .holding("t2", (2, 1, 1))
                        .build(),
                    node("b").holding("t3", (5, 1, 1)).build(),
                    node("c")
                        .holding("t4", (3, 1, 1))
                        .holding("t5", (2, 1, 1))
                        .build(),
                ],
                waiter: 6,
                max: 4,
                want: Some(("c", vec![("t4", "c", "b")])),
            },
            Case {
                name: "fits as it is: no moves",
                nodes: vec![node("a").holding("t1", (2, 1, 1)).build()],
                waiter: 6,
                max: 4,
                want: Some(("a", vec![])),
            },
            Case {
                name: "two moves when no single tenant frees enough",
                nodes: vec![
                    node("a")
                        .holding("t1", (2, 1, 1))
                        .holding("t2", (2, 1, 1))
                        .holding("t3", (2, 1, 1))
                        .build(),
                    node("b").holding("t4", (4, 1, 1)).build(),
                ],
                waiter: 6,
                max: 4,
                want: Some(("a", vec![("t1", "a", "b"), ("t2", "a", "b")])),
            },
            Case {
                name: "the limit is reached: five moves needed, four allowed",
                nodes: six_ones(),
                waiter: 7,
                max: 4,
                want: None,
            },
            Case {
                name: "the same with five allowed",
                nodes: six_ones(),
                waiter: 7,
                max: 5,
                want: Some((
                    "a",
                    vec![
                        ("t1", "a", "b"),
                        ("t2", "a", "b"),
                        ("t3", "a", "b"),
                        ("t4", "a", "b"),
                        ("t5", "a", "b"),
                    ],
                )),
            },
            Case {
                name: "a tenant as large as the waiter never moves for it",
                nodes: vec![
                    node("a").holding("t1", (7, 1, 1)).build(),
                    node("b").holding("t2", (7, 2, 1)).build(),
                    node("c").allocated(2, 0, 0).build(),
                ],
                waiter: 7,
                max: 4,
                want: None,
            },
            Case {
                name: "the fewer threads moved wins between two single moves",
                nodes: vec![
                    node("a").holding("t1", (5, 1, 1)).build(),
                    node("b").holding("t2", (4, 1, 1)).build(),
                    node("c").allocated(3, 0, 0).build(),
                ],
                waiter: 7,
                max: 4,
                // a: t1 (5) to c; b: t2 (4) to c; c: its 3 to a, the fewest threads.
                want: Some(("c", vec![("held-c", "c", "a")])),
            },
            Case {
                name: "a draining node neither makes room nor receives",
                nodes: vec![
                    node("a").holding("t1", (4, 1, 1)).build(),
                    node("b").state(NodeState::Draining).build(),
                ],
                waiter: 6,
                max: 4,
                want: None,
            },
            Case {
                name: "two movers do not both fit the one target with room for one",
                nodes: vec![
                    node("a")
                        .holding("t1", (3, 1, 1))
                        .holding("t2", (3, 1, 1))
                        .build(),
                    node("b").allocated(5, 0, 0).build(),
                ],
                waiter: 8,
                max: 4,
                want: None,
            },
            Case {
                name: "among equal sets, the first by UID, whatever order the node lists them",
                nodes: vec![
                    node("a")
                        .holding("t3", (2, 1, 1))
                        .holding("t1", (2, 1, 1))
                        .holding("t2", (2, 1, 1))
                        .build(),
                    node("b").allocated(5, 0, 0).build(),
                ],
                waiter: 4,
                max: 4,
                want: Some(("a", vec![("t1", "a", "b")])),
            },
            Case {
                name: "a name given to two nodes leaves both out, as host and as target",
                nodes: vec![
                    node("a").holding("t1", (4, 1, 1)).build(),
                    node("a").build(),
                    node("b").allocated(4, 0, 0).build(),
                ],
                waiter: 6,
                max: 4,
                want: None,
            },
            Case {
                name: "zero moves allowed: only a node with room",
                nodes: vec![
                    node("a").holding("t1", (4, 1, 1)).build(),
                    node("b").build(),
                ],
                waiter: 8,
                max: 0,
                want: Some(("b", vec![])),
            },
        ];
        for case in cases {
            let room = make_room(
                &case.nodes,
                &Resources::new(case.waiter, 1, 1),
                None,
                case.max,
                any,
            );
            let got = room.as_ref().map(|r| (r.host.as_str(), moves(r)));
            assert_eq!(got, case.want, "{}", case.name);
        }
    }

    #[test]
    fn the_caller_decides_who_may_move_and_where_a_mover_may_go() {
        let nodes = [
            node("a").holding("pinned", (4, 1, 1)).build(),
            node("b").holding("free", (4, 1, 1)).build(),
            node("c").label("zone", "x").allocated(4, 0, 0).build(),
            node("d").allocated(4, 0, 0).build(),
        ];
        let zone = labels(&[("zone", "x")]);
        let rule = |e: &Entry| -> Mover<'_> { (e.uid == "free").then_some(Some(&zone)) };
        let room = make_room(&nodes, &Resources::new(6, 1, 1), None, 4, rule).unwrap();
        assert_eq!(moves(&room), [("free", "b", "c")]);
        // The waiter's own selector limits the host.
        let host = labels(&[("zone", "y")]);
        assert_eq!(
            make_room(&nodes, &Resources::new(6, 1, 1), Some(&host), 4, any),
            None
        );
    }

    #[test]
    fn the_search_for_an_assignment_takes_at_most_its_budget_of_steps() {
        // One mover, targets 0.. of which only the last has room: found on the last step the
        // budget allows, not one step later.
        let one = [Resources::new(1, 1, 1)];
        let last_fits = |count: usize| {
            move |t: usize| {
                if t + 1 == count {
                    Resources::new(1, 1, 1)
                } else {
                    Resources::ZERO
                }
            }
        };
        let within: Vec<usize> = (0..ASSIGN_STEPS).collect();
        let found = assign(&one, &[within], last_fits(ASSIGN_STEPS));
        assert_eq!(found, Some(vec![ASSIGN_STEPS - 1]));
        let past: Vec<usize> = (0..=ASSIGN_STEPS).collect();
        assert_eq!(assign(&one, &[past], last_fits(ASSIGN_STEPS + 1)), None);
    }

    #[test]
    fn sets_of_positions_come_in_order_and_every_one_once() {
        let all: Vec<Vec<usize>> = subsets(4, 2).collect();
        assert_eq!(all, [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]);
        assert_eq!(subsets(3, 0).collect::<Vec<_>>(), [Vec::<usize>::new()]);
        assert_eq!(subsets(2, 3).count(), 0);
        assert_eq!(subsets(6, 3).count(), 20);
    }
}
