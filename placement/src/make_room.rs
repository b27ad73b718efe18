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
//! Cost: one pass over the nodes groups the hosts by the fewest moves that might cover what the
//! waiter lacks (`size` times a node's largest entry; each ledger keeps its smallest and largest
//! entry), so each size tries only the hosts that might do, without reading their entries. A
//! host is passed over, entries unread, when its floor (the shortfall, and `size` times its
//! smallest entry) ranks no better than the best room found; then without a look at its sets
//! when its `size` largest movers cannot cover the shortfall or its `size` smallest rank no
//! better. A host left is tried set by set, each checked against its movers' targets, found
//! once per mover among the nodes with room for the least mover (found once, O(nodes)).

use std::cmp::Ordering;
use std::collections::HashMap;

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
    // Callers usually pass nodes in name order already: checking is cheaper than sorting, and
    // names strictly in order are unique.
    let mut sorted: Vec<&NodeLedger> = nodes.iter().collect();
    let strictly = sorted.is_sorted_by(|a, b| a.name() < b.name());
    if !strictly {
        sorted.sort_by(|a, b| a.name().cmp(b.name()));
    }
    // One pass over the nodes: each one's free room when it takes new tenants and bears a
    // unique name (it may host, or receive a mover), and the hosts by the fewest moves that
    // might make room there (a size tries those needing no more).
    let mut open: Vec<Option<Resources>> = Vec::with_capacity(sorted.len());
    let mut by_needs: Vec<Vec<Host<'_>>> = (0..=max_moves).map(|_| Vec::new()).collect();
    for (i, &node) in sorted.iter().enumerate() {
        let same = |j: Option<usize>| {
            j.and_then(|j| sorted.get(j))
                .is_some_and(|n| n.name() == node.name())
        };
        let unique = strictly || (!same(i.checked_sub(1)) && !same(i.checked_add(1)));
        let view = node.view();
        let room = (unique && view.takes_new_tenants()).then(|| view.free());
        open.push(room);
        let Some(room) = room.filter(|_| node.matches(selector)) else {
            continue;
        };
        let short = footprint.saturating_sub(room);
        // Past `max_moves` (or never): not even that many of its largest entries would cover
        // what it lacks.
        let Some(list) =
            moves_needed(&short, &node.largest_entry()).and_then(|n| by_needs.get_mut(n))
        else {
            continue;
        };
        list.push(Host {
            position: i,
            node,
            short,
            smallest: node.smallest_entry(),
        });
    }
    let free = |t: usize| open.get(t).copied().flatten();
    if let Some(host) = by_needs.first().and_then(|fits| fits.first()) {
        return Some(Room {
            host: host.node.name().to_owned(),
            moves: Vec::new(),
        });
    }
    // The nodes that could take a mover (one with room for the least of every host's smallest
    // entries), with their free room: found once, when first needed.
    let least_mover = by_needs
        .iter()
        .flatten()
        .fold(times(Resources::new(1, 1, 1), usize::MAX), |m, h| {
            Resources::from_fn(|d| m.get(d).min(h.smallest.get(d)))
        });
    let mut receivers: Option<Vec<(usize, Resources)>> = None;
    // Each tried host's entries that may move, found once.
    let mut movable: HashMap<usize, Vec<(&Entry, Option<&Labels>)>> = HashMap::new();
    // Each mover's possible targets on the fleet as it is, found once.
    let mut targets: HashMap<(usize, &str), Vec<usize>> = HashMap::new();
    for size in 1..=max_moves {
        let mut best: Option<(Key<'_>, Vec<(usize, usize)>)> = None;
        for host in by_needs.iter().take(size.saturating_add(1)).flatten() {
            let (short, position) = (host.short, host.position);
            // `size` entries move at least `size` times the smallest, and at least the
            // shortfall: a host whose floor ranks no better than the best cannot win.
            let floor = times(host.smallest, size);
            let floor = Resources::from_fn(|d| floor.get(d).max(short.get(d)));
            if beaten(&floor, position, best.as_ref().map(|(b, _)| b)) {
                continue;
            }
            let movers: &[(&Entry, Option<&Labels>)] =
                movable.entry(position).or_insert_with(|| {
                    host.node
                        .entries()
                        .iter()
                        .filter(|e| smaller(&e.resources, footprint))
                        .filter_map(|e| Some((e, mover(e)?)))
                        .collect()
                });
            if movers.len() < size {
                continue;
            }
            let (least, most) = bounds(movers, size);
            if !short.fits_within(&most) {
                continue;
            }
            let floor = Resources::from_fn(|d| least.get(d).max(short.get(d)));
            if beaten(&floor, position, best.as_ref().map(|(b, _)| b)) {
                continue;
            }
            for set in subsets(movers.len(), size) {
                let chosen: Vec<&(&Entry, Option<&Labels>)> =
                    set.iter().filter_map(|&i| movers.get(i)).collect();
                let moved = total(chosen.iter().map(|(e, _)| &e.resources));
                if !short.fits_within(&moved) {
                    continue;
                }
                let key = Key {
                    moved,
                    host: position,
                    uids: sorted_uids(&chosen),
                };
                if best
                    .as_ref()
                    .is_some_and(|(b, _)| key.cmp(b) != Ordering::Less)
                {
                    continue;
                }
                let receivers = receivers.get_or_insert_with(|| {
                    (0..sorted.len())
                        .filter_map(|t| Some((t, free(t)?)))
                        .filter(|(_, free)| least_mover.fits_within(free))
                        .collect()
                });
                let lists: Vec<Vec<usize>> = chosen
                    .iter()
                    .map(|(entry, labels)| {
                        targets
                            .entry((position, &*entry.uid))
                            .or_insert_with(|| {
                                receivers
                                    .iter()
                                    .filter(|&&(t, free)| {
                                        t != position
                                            && entry.resources.fits_within(&free)
                                            && sorted.get(t).is_some_and(|n| n.matches(*labels))
                                    })
                                    .map(|&(t, _)| t)
                                    .collect()
                            })
                            .clone()
                    })
                    .collect();
                let wanted: Vec<Resources> = chosen.iter().map(|(e, _)| e.resources).collect();
                let room = |t: usize| free(t).unwrap_or(Resources::ZERO);
                if let Some(assignment) = assign(&wanted, &lists, room) {
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
            let host = by_needs.iter().flatten().find(|h| h.position == key.host)?;
            let movers = movable
                .get(&host.position)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let mut made: Vec<Move> = moves
                .into_iter()
                .filter_map(|(mover, target)| {
                    let (entry, _) = movers.get(mover)?;
                    Some(Move {
                        uid: entry.uid.to_string(),
                        tenant: entry.tenant.to_string(),
                        resources: entry.resources,
                        from: host.node.name().to_owned(),
                        to: sorted.get(target)?.name().to_owned(),
                    })
                })
                .collect();
            made.sort_by(|a, b| a.uid.cmp(&b.uid));
            return Some(Room {
                host: host.node.name().to_owned(),
                moves: made,
            });
        }
    }
    None
}

/// A node that may make room.
#[derive(Debug)]
struct Host<'a> {
    /// Its position in name order.
    position: usize,
    node: &'a NodeLedger,
    /// What the waiter lacks there.
    short: Resources,
    /// The node's smallest entry per dimension (see [`NodeLedger::smallest_entry`]).
    smallest: Resources,
}

/// Per dimension, the least and the most that `size` of `movers` can add up to.
fn bounds(movers: &[(&Entry, Option<&Labels>)], size: usize) -> (Resources, Resources) {
    let mut values: Vec<u64> = Vec::with_capacity(movers.len());
    let mut least = Resources::ZERO;
    let mut most = Resources::ZERO;
    for d in Dimension::ALL {
        values.clear();
        values.extend(movers.iter().map(|(e, _)| e.resources.get(d)));
        values.sort_unstable();
        let sum = |amounts: &[u64]| {
            amounts
                .iter()
                .fold(0u64, |sum, a| sum.saturating_add(*a).min(Resources::LIMIT))
        };
        let low = sum(values.get(..size).unwrap_or(&values));
        let high = sum(values
            .get(values.len().saturating_sub(size)..)
            .unwrap_or(&values));
        least = Resources::from_fn(|e| if e == d { low } else { least.get(e) });
        most = Resources::from_fn(|e| if e == d { high } else { most.get(e) });
    }
    (least, most)
}

/// The fewest entries of at most `largest` each that cover `short`, per dimension at once; `None`
/// when no number does (a dimension short where every entry holds none).
fn moves_needed(short: &Resources, largest: &Resources) -> Option<usize> {
    Dimension::ALL.iter().try_fold(0usize, |needs, &d| {
        let (short, largest) = (short.get(d), largest.get(d));
        if short == 0 {
            return Some(needs);
        }
        let largest = std::num::NonZeroU64::new(largest)?;
        let count = short.div_ceil(largest.get());
        Some(needs.max(usize::try_from(count).unwrap_or(usize::MAX)))
    })
}

/// Whether the host at `position` (in name order) whose moves rank at least `floor` loses to
/// `best`: a floor above it, or equal to it with a later name.
fn beaten(floor: &Resources, position: usize, best: Option<&Key<'_>>) -> bool {
    best.is_some_and(|b| match by_amount(floor, &b.moved) {
        Ordering::Less => false,
        Ordering::Equal => position > b.host,
        Ordering::Greater => true,
    })
}

/// `amount × count` per dimension, saturating at [`Resources::LIMIT`].
fn times(amount: Resources, count: usize) -> Resources {
    let count = u64::try_from(count).unwrap_or(u64::MAX);
    Resources::from_fn(|d| amount.get(d).saturating_mul(count).min(Resources::LIMIT))
}

/// Amounts in the order keys rank them: threads, then memory, then storage.
fn by_amount(a: &Resources, b: &Resources) -> Ordering {
    Dimension::ALL
        .iter()
        .map(|d| a.get(*d).cmp(&b.get(*d)))
        .fold(Ordering::Equal, Ordering::then)
}

/// The order sets of one size are ranked by (see the module rules).
#[derive(Debug, PartialEq, Eq)]
struct Key<'a> {
    moved: Resources,
    /// The host's position in name order.
    host: usize,
    uids: Vec<&'a str>,
}

impl Ord for Key<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        by_amount(&self.moved, &other.moved)
            .then_with(|| self.host.cmp(&other.host))
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

fn sorted_uids<'a>(chosen: &[&(&'a Entry, Option<&Labels>)]) -> Vec<&'a str> {
    let mut uids: Vec<&str> = chosen.iter().map(|(e, _)| &*e.uid).collect();
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
            .map(|m| (&*m.uid, m.from.as_str(), m.to.as_str()))
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
    fn a_host_tried_later_but_first_by_name_wins_a_tie() {
        // Waiter 5 threads; a and b each lack 4 and make it with two 2-thread movers (4·2·2
        // moved either way). b's largest entry (4 threads, 2 GB: larger than the waiter, so it
        // never moves) puts b among the hosts that one move might do, so b is tried first at
        // two moves; a, first by name, must still be tried and win.
        let nodes = [
            ledger("a")
                .capacity(10, 32, 100)
                .holding("x1", (2, 1, 1))
                .holding("x2", (2, 1, 1))
                .holding("x3", (2, 1, 1))
                .holding("x4", (3, 1, 1))
                .build(),
            ledger("b")
                .capacity(10, 32, 100)
                .holding("y1", (2, 1, 1))
                .holding("y2", (2, 1, 1))
                .holding("z", (5, 2, 1))
                .build(),
            // Room for the movers, not for the waiter.
            ledger("c").capacity(10, 32, 100).allocated(6, 0, 0).build(),
        ];
        let room = make_room(&nodes, &Resources::new(5, 1, 1), None, 4, any).unwrap();
        assert_eq!(room.host, "a");
        assert_eq!(moves(&room), [("x1", "a", "c"), ("x2", "a", "c")]);
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
        let rule = |e: &Entry| -> Mover<'_> { (&*e.uid == "free").then_some(Some(&zone)) };
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
