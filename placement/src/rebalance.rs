//! Consolidation: the moves that would empty the most nodes under BestFit, and the nodes they
//! free. Computed, never executed: draining the freed nodes is how it is carried out.
//!
//! ```text
//!   three nodes of 8 threads       least loaded first                        after the moves
//!   a  5/8  t1(5)                  c: t3(2) → a (a keeps 8−7 = 1, b 8−6 = 2)  a  7/8  t1 t3
//!   b  4/8  t2(4)                  b: t2(4) fits nowhere (a has 1 free):      b  4/8  t2
//!   c  2/8  t3(2)                     b stays whole, nothing moves            c  0/8  freed
//!                                  a: received a move, so never emptied
//! ```
//!
//! Rules enforced here:
//! - a **source** (a node that may be emptied) is Online, holds at least one entry and no hold
//!   (room held for a waiting tenant cannot be moved). Cordoned, Offline and Draining nodes are
//!   left as they are. An Online node over its effective capacity may be emptied;
//! - a **target** (a node that may receive) takes new tenants (Online, within its effective
//!   capacity; see [`NodeView::takes_new_tenants`]) and already holds something: moving tenants
//!   onto an empty node to empty another leaves as many nodes in use;
//! - **whole nodes only**: a source is freed when every one of its entries finds a target;
//!   otherwise none of its entries moves. Every move frees its source;
//! - each entry goes to its **BestFit** target ([`best_fit_among`]: the least weighted,
//!   normalised slack after placing, in effective capacity, ties by name), counting the moves
//!   already planned, so no node is filled past its effective capacity;
//! - with [`consolidate_for`], an entry goes only to a node carrying the labels of its tenant's
//!   node selector (the caller's lookup), as placement would place it;
//! - [`consolidate_sources`] empties only the nodes it is given a cost for, **the most expensive
//!   first**; any node may still receive, and one it may not empty receives even when it holds
//!   nothing (it stays in use whatever the plan does, so filling it frees a node that costs);
//! - sources are tried once each, **the least loaded first**: the largest weighted slack with
//!   nothing added (the score LeastLoaded ranks by; nodes over their capacity come last), then
//!   the fewest entries, then the name. A source's entries go **largest first**: the least
//!   slack they would leave on an empty node of the source's effective capacity (an entry
//!   larger than that node counts as the largest), ties by UID;
//! - **no chains**: a node that received a move is not emptied later, and a node chosen to be
//!   emptied receives nothing;
//! - **deterministic**: the same nodes, in any order, give the same consolidation. Node names
//!   and UIDs are unique, as Kubernetes keeps them; a name given to more than one node leaves
//!   all of them out (neither source nor target), since a move names its nodes.
//!
//! Sources are never retried: room only shrinks as the plan goes (targets fill, freed nodes stop
//! being targets), so a source that failed once would fail again.
//!
//! Cost: each entry of each tried source asks a [`BestFitIndex`] (per node shape, the nodes in
//! order of room left) for its target; an entry whose tenant has a node selector is matched
//! against every node. The index is told, as sources go, the smallest entry per dimension of
//! the sources yet to be tried (its floor, raised at most `FLOOR_RAISES` = 32 times): a target
//! with less free than that in a dimension can take none of them and is no longer tested. Most
//! targets end so, filled until one dimension is nearly full. [`consolidate_by_scan`] matches
//! every entry against every node, the rule as first written (O(entries × nodes)), and gives
//! the same plan; see `placement-bench consolidation` for both timed.

use std::cmp::Ordering;

use crate::best_fit::BestFitIndex;
use crate::fit::{NodeState, NodeView};
use crate::ledger::{Entry, NodeLedger};
use crate::overcommit::Overcommit;
use crate::policy::{Slack, best_fit_among, weighted_slack};
use crate::resources::Resources;
use crate::selector::Labels;

/// One tenant's entry moved from the node it is on to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    /// The tenant's UID (the entry's key).
    pub uid: String,
    /// `namespace/name`.
    pub tenant: String,
    /// What the entry holds: what `to` takes on and `from` gives back.
    pub resources: Resources,
    /// The node it leaves: one of [`Consolidation::freed`].
    pub from: String,
    /// The node that takes it.
    pub to: String,
}

/// The moves that would empty whole nodes, and the nodes they would free.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consolidation {
    /// Grouped by source, sources in the order they were freed, each source's entries largest
    /// first.
    pub moves: Vec<Move>,
    /// The nodes that would hold nothing once the moves are made, in the order they were freed.
    pub freed: Vec<String>,
}

impl Consolidation {
    /// True when no node can be freed (and so nothing moves).
    pub fn is_empty(&self) -> bool {
        self.freed.is_empty()
    }
}

/// One node as the consolidation goes (its view, with the moves planned so far counted, is in
/// the [`BestFitIndex`], active while it may receive).
#[derive(Debug)]
struct Slot<'a> {
    ledger: &'a NodeLedger,
    /// May be emptied (see the module rules).
    source: bool,
    /// May receive entries (see the module rules); false once it is chosen to be emptied.
    target: bool,
    /// Received a move: never emptied afterwards.
    received: bool,
}

impl<'a> Slot<'a> {
    /// `kept`: a node that may not be emptied (it stays in use whatever the plan does).
    fn new(ledger: &'a NodeLedger, unique_name: bool, kept: bool) -> Self {
        let view = ledger.view();
        let (entries, holds) = (!ledger.entries().is_empty(), !ledger.holds().is_empty());
        Slot {
            ledger,
            source: unique_name && ledger.state() == NodeState::Online && entries && !holds,
            target: unique_name && (entries || holds || kept) && view.takes_new_tenants(),
            received: false,
        }
    }

    /// How much room the node has left, as LeastLoaded ranks it: `None` when it is over its
    /// effective capacity (no room at all). Asked of sources only, which are Online, before
    /// any move is planned.
    fn room_score(&self) -> Option<Slack> {
        weighted_slack(
            &self.ledger.view(),
            &Resources::ZERO,
            &self.ledger.overcommit(),
        )
    }
}

/// The consolidation of these nodes (see the module rules). Pure: the same nodes, in any order,
/// give the same answer.
pub fn consolidate(nodes: &[NodeLedger]) -> Consolidation {
    consolidate_sources(nodes, |_| Some(0))
}

/// [`consolidate`], emptying only the nodes `source` gives a cost for (a monthly cost; any node
/// may still receive), the most expensive first, then as [`consolidate`] orders them.
pub fn consolidate_sources(
    nodes: &[NodeLedger],
    source: impl Fn(&NodeLedger) -> Option<u64>,
) -> Consolidation {
    consolidate_for(nodes, source, |_| None)
}

/// [`consolidate_sources`], each entry going only to a node carrying the labels `selector`
/// gives for it (`None`: any node).
pub fn consolidate_for<'s>(
    nodes: &[NodeLedger],
    source: impl Fn(&NodeLedger) -> Option<u64>,
    selector: impl Fn(&Entry) -> Option<&'s Labels>,
) -> Consolidation {
    plan(nodes, source, selector, Search::Index)
}

/// [`consolidate`] with every entry matched against every node, as the plan was first written:
/// the reference the index is held to (property tests, and `placement-bench consolidation`
/// times both and prints what each frees).
pub fn consolidate_by_scan(nodes: &[NodeLedger]) -> Consolidation {
    plan(nodes, |_| Some(0), |_| None, Search::Scan)
}

/// How a target is found for an entry of a tenant without a node selector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Search {
    /// [`BestFitIndex::best_fit`].
    Index,
    /// Every node tried ([`best_fit_among`]).
    Scan,
}

fn plan<'s>(
    nodes: &[NodeLedger],
    source: impl Fn(&NodeLedger) -> Option<u64>,
    selector: impl Fn(&Entry) -> Option<&'s Labels>,
    search: Search,
) -> Consolidation {
    let names = Names::of(nodes);
    let mut slots: Vec<Slot<'_>> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| Slot::new(node, names.unique(i), source(node).is_none()))
        .collect();
    let mut index = BestFitIndex::new(
        nodes.iter().map(|n| (n.view(), n.overcommit())).collect(),
        |i| slots.get(i).is_some_and(|slot| slot.target),
    );

    // `(position, room as a float, cost)`: sorted on these, the exact room read only on a near
    // tie (every key differs: source names are unique).
    let mut order: Vec<(usize, Option<f64>, u64)> = slots
        .iter()
        .enumerate()
        .filter(|(_, slot)| slot.source)
        .filter_map(|(i, slot)| {
            let room = slot.room_score().map(|room| room.as_f64());
            Some((i, room, source(slot.ledger)?))
        })
        .collect();
    let ledger = |i: usize| slots.get(i).map(|slot| slot.ledger);
    order.sort_unstable_by(|&(a, a_room, a_cost), &(b, b_room, b_cost)| {
        let exact = || {
            let room = |i: usize| slots.get(i).and_then(Slot::room_score);
            most_room_first(&room(a), &room(b))
        };
        let entries = |i: usize| ledger(i).map(|l| l.entries().len());
        let name = |i: usize| ledger(i).map(NodeLedger::name);
        b_cost
            .cmp(&a_cost)
            .then_with(|| most_room_first_approx(a_room, b_room, exact))
            .then_with(|| entries(a).cmp(&entries(b)))
            .then_with(|| name(a).cmp(&name(b)))
    });
    let sources: Vec<(usize, &NodeLedger)> = order
        .iter()
        .filter_map(|&(i, _, _)| Some((i, ledger(i)?)))
        .collect();

    let floors = floors(&sources);
    // A floor is raised at most this many times over the plan: each raise sweeps the index.
    let spacing = sources.len() / FLOOR_RAISES;
    let (mut floor, mut next_raise) = (Resources::ZERO, 0);
    let mut consolidation = Consolidation::default();
    for (k, (source, ledger)) in sources.into_iter().enumerate() {
        if let Some(&next) = floors
            .get(k)
            .filter(|next| **next != floor && k >= next_raise)
        {
            index.raise_floor(next);
            floor = next;
            next_raise = k.saturating_add(spacing);
        }
        let Some(slot) = slots.get(source) else {
            continue;
        };
        if slot.received {
            continue;
        }
        if let Some(moves) = evacuate(&slots, &mut index, source, &names, &selector, search) {
            if let Some(slot) = slots.get_mut(source) {
                slot.target = false;
            }
            for (entry, target) in moves {
                let Some(to) = slots.get_mut(target) else {
                    continue;
                };
                to.received = true;
                consolidation.moves.push(Move {
                    uid: entry.uid.to_string(),
                    tenant: entry.tenant.to_string(),
                    resources: entry.resources,
                    from: ledger.name().to_owned(),
                    to: to.ledger.name().to_owned(),
                });
            }
            consolidation.freed.push(ledger.name().to_owned());
        }
    }
    consolidation
}

/// How many times, at most, [`plan`] raises the index's floor (each raise reads every node).
const FLOOR_RAISES: usize = 32;

/// For each source (in the order tried), the smallest entry per dimension of it and every
/// source after it: no entry asked of the index from there on is smaller in any dimension.
fn floors(sources: &[(usize, &NodeLedger)]) -> Vec<Resources> {
    let mut floors = vec![Resources::ZERO; sources.len()];
    let mut smallest: Option<Resources> = None;
    for ((_, ledger), floor) in sources.iter().zip(floors.iter_mut()).rev() {
        // Each ledger keeps its smallest entry per dimension (a source holds at least one).
        let r = ledger.smallest_entry();
        smallest = Some(smallest.map_or(r, |s| Resources::from_fn(|d| s.get(d).min(r.get(d)))));
        *floor = smallest.unwrap_or(Resources::ZERO);
    }
    floors
}

/// The nodes' names: which are given to one node only, and where those are.
struct Names<'a> {
    nodes: &'a [NodeLedger],
    /// The positions of the nodes whose name is unique, in name order.
    by_name: Vec<usize>,
    /// Whether each node's name is unique, by position.
    unique: Vec<bool>,
}

impl<'a> Names<'a> {
    fn of(nodes: &'a [NodeLedger]) -> Names<'a> {
        let name = |i: usize| nodes.get(i).map(NodeLedger::name);
        let mut sorted: Vec<usize> = (0..nodes.len()).collect();
        sorted.sort_unstable_by(|&a, &b| name(a).cmp(&name(b)));
        let by_name: Vec<usize> = sorted
            .chunk_by(|&a, &b| name(a) == name(b))
            .filter_map(|same| match same {
                [only] => Some(*only),
                _ => None,
            })
            .collect();
        let mut unique = vec![false; nodes.len()];
        for &i in &by_name {
            if let Some(flag) = unique.get_mut(i) {
                *flag = true;
            }
        }
        Names {
            nodes,
            by_name,
            unique,
        }
    }

    fn position(&self, name: &str) -> Option<usize> {
        let at = self
            .by_name
            .binary_search_by(|&i| self.nodes.get(i).map(NodeLedger::name).cmp(&Some(name)))
            .ok()?;
        self.by_name.get(at).copied()
    }

    fn unique(&self, position: usize) -> bool {
        self.unique.get(position) == Some(&true)
    }
}

/// [`most_room_first`] on the scores as floats ([`Slack::as_f64`]), `exact` asked only when
/// they are closer than float error (as [`Slack`]'s own order does).
fn most_room_first_approx(
    a: Option<f64>,
    b: Option<f64>,
    exact: impl FnOnce() -> Ordering,
) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => {
            let margin = (x + y) * 1e-12;
            if x - y > margin {
                Ordering::Less
            } else if y - x > margin {
                Ordering::Greater
            } else {
                exact()
            }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Room scores, the most room first; a node over its capacity (`None`) last.
fn most_room_first(a: &Option<Slack>, b: &Option<Slack>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => b.cmp(a),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Every entry of `source` given a BestFit target, the targets' views counting them: the
/// entries with the position of their target. `None`, with every view as it was, when one of
/// them fits no target. The source receives none of its own entries (inactive meanwhile; left
/// inactive when emptied).
fn evacuate<'a, 's>(
    slots: &[Slot<'a>],
    index: &mut BestFitIndex<'a>,
    source: usize,
    names: &Names<'_>,
    selector: &impl Fn(&Entry) -> Option<&'s Labels>,
    search: Search,
) -> Option<Vec<(&'a Entry, usize)>> {
    let source_slot = slots.get(source)?;
    let entries = largest_first(source_slot.ledger);
    index.set_active(source, false);
    // The views as they were before this source, to put back if it cannot be emptied.
    let mut touched: Vec<(usize, Resources)> = Vec::with_capacity(entries.len());
    let mut moves = Vec::with_capacity(entries.len());
    for entry in entries {
        let target = match (selector(entry), search) {
            (None, Search::Index) => index.best_fit(&entry.resources),
            (labels, _) => scanned_target(slots, index, &entry.resources, labels)
                .and_then(|name| names.position(name)),
        };
        let placed = target.and_then(|target| {
            let before = index.view(target)?.allocated;
            let allocated = before.checked_add(entry.resources)?;
            touched.push((target, before));
            index.set_allocated(target, allocated);
            Some(target)
        });
        match placed {
            Some(target) => moves.push((entry, target)),
            None => {
                // Put back in reverse, so a node touched twice ends as it began.
                for (target, allocated) in touched.into_iter().rev() {
                    index.set_allocated(target, allocated);
                }
                index.set_active(source, source_slot.target);
                return None;
            }
        }
    }
    Some(moves)
}

/// The BestFit target for `request` among the active nodes carrying the labels of `selector`,
/// by a scan: for the entries of tenants with a node selector (the index knows no labels), and
/// for [`Search::Scan`].
fn scanned_target<'a>(
    slots: &[Slot<'a>],
    index: &BestFitIndex<'a>,
    request: &Resources,
    selector: Option<&Labels>,
) -> Option<&'a str> {
    let candidates = slots
        .iter()
        .enumerate()
        // The labels are read only for a tenant with a selector: the scan stays on the views.
        .filter(|(i, slot)| {
            index.is_active(*i) && selector.is_none_or(|s| slot.ledger.matches(Some(s)))
        })
        .filter_map(|(i, slot)| Some((index.view(i)?, slot.ledger.overcommit())));
    best_fit_among(candidates, request)
}

/// The node's entries, largest first (see the module rules), ties by UID.
fn largest_first(node: &NodeLedger) -> Vec<&Entry> {
    let empty = NodeView {
        name: node.name(),
        state: NodeState::Online,
        capacity: node.effective_capacity(),
        allocated: Resources::ZERO,
    };
    let overcommit: Overcommit = node.overcommit();
    let entries = node.entries();
    let left = |entry: &Entry| weighted_slack(&empty, &entry.resources, &overcommit);
    // Each entry's room left, as a float: the exact one is read only on a near tie.
    let mut sized: Vec<(&Entry, Option<f64>)> = entries
        .iter()
        .map(|entry| (entry, left(entry).map(|slack| slack.as_f64())))
        .collect();
    // The least room left is the largest entry; one that does not fit at all (None) is larger.
    sized.sort_by(|&(a, a_left), &(b, b_left)| {
        let exact = || most_room_first(&left(a), &left(b));
        most_room_first_approx(a_left, b_left, exact)
            .reverse()
            .then_with(|| a.uid.cmp(&b.uid))
    });
    sized.into_iter().map(|(entry, _)| entry).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::testing::{entry, ledger};

    /// `(uid, from, to)` of each move.
    fn moves(c: &Consolidation) -> Vec<(&str, &str, &str)> {
        c.moves
            .iter()
            .map(|m| (&*m.uid, m.from.as_str(), m.to.as_str()))
            .collect()
    }

    struct Case {
        name: &'static str,
        nodes: Vec<NodeLedger>,
        moves: Vec<(&'static str, &'static str, &'static str)>,
        freed: Vec<&'static str>,
    }

    /// Every node: 8 threads, 32 GB, 100 GB; every tenant k threads and nothing else, so threads
    /// decide (memory and storage are left whole everywhere: 32/32 + 100/100 on every node).
    fn node(name: &str) -> crate::testing::LedgerBuilder<'_> {
        ledger(name).capacity(8, 32, 100)
    }

    fn threads(k: u64) -> (u64, u64, u64) {
        (k, 0, 0)
    }

    #[test]
    fn only_the_given_sources_are_emptied_the_most_expensive_first() {
        // a and b hold 2 each; c holds 5. Either a or b can go into c (5 + 2 = 7), not both.
        let nodes = [
            node("a").holding("t1", threads(2)).build(),
            node("b").holding("t2", threads(2)).build(),
            node("c").holding("t3", threads(5)).build(),
        ];
        // Equal costs: as consolidate (a first, by name).
        let same = consolidate_sources(&nodes, |_| Some(1));
        assert_eq!(same, consolidate(&nodes));
        assert_eq!(same.freed, ["a"]);
        // b costs more: b goes first.
        let cost = |n: &NodeLedger| Some(if n.name() == "b" { 300 } else { 100 });
        assert_eq!(consolidate_sources(&nodes, cost).freed, ["b"]);
        // Only c may be emptied: t3 (5) fits a or b (each keeps 8 - 2 - 5 = 1), a by name.
        let only_c = consolidate_sources(&nodes, |n| (n.name() == "c").then_some(0));
        assert_eq!(moves(&only_c), [("t3", "c", "a")]);
        // None may: nothing.
        assert!(consolidate_sources(&nodes, |_| None).is_empty());
        // An empty node that may not be emptied (one that stays, owned) takes what a node that
        // may be emptied holds; an empty one that may be emptied takes nothing.
        let nodes = [
            node("bought").holding("t1", threads(5)).build(),
            node("owned").build(),
        ];
        let bought_only = |n: &NodeLedger| (n.name() == "bought").then_some(100);
        let plan = consolidate_sources(&nodes, bought_only);
        assert_eq!(moves(&plan), [("t1", "bought", "owned")]);
        assert!(consolidate(&nodes).is_empty());
    }

    #[test]
    fn consolidation_table() {
        let cases = [
            Case {
                // The module doc's picture. Least loaded first: c (2/8), then b (4/8), then a.
                // c's t3 (2): a keeps 8 − 5 − 2 = 1, b keeps 8 − 4 − 2 = 2 → BestFit a.
                // b's t2 (4): a has 8 − 7 = 1 free, c is being freed → no target, b stays.
                // a received t3: not emptied.
                name: "the least loaded node is emptied into the tightest fit",
                nodes: vec![
                    node("a").holding("t1", threads(5)).build(),
                    node("b").holding("t2", threads(4)).build(),
                    node("c").holding("t3", threads(2)).build(),
                ],
                moves: vec![("t3", "c", "a")],
                freed: vec!["c"],
            },
            Case {
                // b holds 1 + 1 = 2, c holds 2: both 6 free, a tie on load. The fewest entries
                // go first: c (by name, b would). c's t4 (2) → a keeps 8 − 6 − 2 = 0, b keeps
                // 8 − 2 − 2 = 4 → a. Then b: t2 (1) → a has 0 free, c is freed → b stays.
                name: "ties on load go to the node with fewer entries",
                nodes: vec![
                    node("a").holding("t1", threads(6)).build(),
                    node("b")
                        .holding("t2", threads(1))
                        .holding("t3", threads(1))
                        .build(),
                    node("c").holding("t4", threads(2)).build(),
                ],
                moves: vec![("t4", "c", "a")],
                freed: vec!["c"],
            },
            Case {
                // c holds t3 (3) and t4 (1): 4/8. Least loaded first: a (1/8): t1 (1) →
                // b keeps 8 − 6 − 1 = 1, c keeps 8 − 4 − 1 = 3 → b. Then c (4/8): t3 (3) needs
                // 3, b has 1 free, a is freed → c stays whole: t4 (1) would fit b, but a move
                // that does not free its source is never proposed.
                name: "a node is not partly evacuated when one tenant fits nowhere else",
                nodes: vec![
                    node("a").holding("t1", threads(1)).build(),
                    node("b").holding("t2", threads(6)).build(),
                    node("c")
                        .holding("t3", threads(3))
                        .holding("t4", threads(1))
                        .build(),
                ],
                moves: vec![("t1", "a", "b")],
                freed: vec!["a"],
            },
            Case {
                // a (2 + 1 = 3 of 8): largest first, t1 (2) then t2 (1). b (6/8, 2 free):
                // t1 → b keeps 0; t2 (1): b has 0 left, c (7/8, 1 free) keeps 0 → c.
                name: "a node's tenants are spread over several targets, largest first",
                nodes: vec![
                    node("a")
                        .holding("t2", threads(1))
                        .holding("t1", threads(2))
                        .build(),
                    node("b").holding("t5", threads(6)).build(),
                    node("c").holding("t6", threads(7)).build(),
                ],
                moves: vec![("t1", "a", "b"), ("t2", "a", "c")],
                freed: vec!["a"],
            },
            Case {
                // Without overcommit b (6/8) has 2 free and a's t1 (3) fits nowhere. With
                // threads at 1.5x, b's effective capacity is 8 × 1.5 = 12: 12 − 6 = 6 free, so
                // t1 moves and b holds 9 of 12. a is tried first: its room 5/8 = 0.625 beats
                // b's (6/12) × (1/1.5) = 0.33 (the weight of a 1.5x dimension is 1/1.5).
                name: "overcommit makes room on the target",
                nodes: vec![
                    node("a").holding("t1", threads(3)).build(),
                    node("b")
                        .overcommit(Overcommit::from_per_mille(1500, 1000, 1000).unwrap())
                        .holding("t2", threads(6))
                        .build(),
                ],
                moves: vec![("t1", "a", "b")],
                freed: vec!["a"],
            },
            Case {
                // The same fleet without overcommit: b has 8 − 6 = 2 < 3, and b's t2 (6) does
                // not fit a (5 free) either.
                name: "without overcommit the same fleet has nothing to free",
                nodes: vec![
                    node("a").holding("t1", threads(3)).build(),
                    node("b").holding("t2", threads(6)).build(),
                ],
                moves: vec![],
                freed: vec![],
            },
            Case {
                // c is Cordoned: it is not emptied although it is the least loaded, and it takes
                // nothing, although it has 7 free. a (4/8): t1 (4) → b (4/8, 4 free) keeps 0.
                name: "cordoned nodes are neither emptied nor targets",
                nodes: vec![
                    node("a").holding("t1", threads(4)).build(),
                    node("b").holding("t2", threads(4)).build(),
                    node("c")
                        .state(NodeState::Cordoned)
                        .holding("t3", threads(1))
                        .build(),
                ],
                moves: vec![("t1", "a", "b")],
                freed: vec!["a"],
            },
            Case {
                // Offline and Draining nodes likewise: a's t1 (1) has no target at all.
                name: "offline and draining nodes are neither emptied nor targets",
                nodes: vec![
                    node("a").holding("t1", threads(1)).build(),
                    node("b")
                        .state(NodeState::Offline)
                        .holding("t2", threads(1))
                        .build(),
                    node("c")
                        .state(NodeState::Draining)
                        .holding("t3", threads(1))
                        .build(),
                ],
                moves: vec![],
                freed: vec![],
            },
            Case {
                // b is empty: moving a's t1 there would free a and fill b, one node in use
                // either way. Not a target; nothing moves.
                name: "an empty node is not a target",
                nodes: vec![
                    node("a").holding("t1", threads(1)).build(),
                    node("b").build(),
                ],
                moves: vec![],
                freed: vec![],
            },
            Case {
                // a's capacity was lowered to 2 threads while it holds 3: over capacity, it
                // takes nothing but may be emptied. It comes last (no room), after b (7 free)
                // and c (2 free). b's t2 (1): a takes nothing, c keeps 8 − 6 − 1 = 1 → c.
                // c received. Then a: t1 (3) → nowhere (c has 1 free, b is freed).
                name: "a node over capacity is emptied last and receives nothing",
                nodes: vec![
                    ledger("a")
                        .capacity(2, 32, 100)
                        .holding("t1", threads(3))
                        .build(),
                    node("b").holding("t2", threads(1)).build(),
                    node("c").holding("t3", threads(6)).build(),
                ],
                moves: vec![("t2", "b", "c")],
                freed: vec!["b"],
            },
            Case {
                // a over capacity (3 held on 2), b holds 5/8: a comes last but b is tried
                // first: b's t2 (5) → a takes nothing → no target, b stays. a: t1 (3) → b
                // keeps 8 − 5 − 3 = 0. Freed a.
                name: "a node over capacity is emptied when its tenants fit elsewhere",
                nodes: vec![
                    ledger("a")
                        .capacity(2, 32, 100)
                        .holding("t1", threads(3))
                        .build(),
                    node("b").holding("t2", threads(5)).build(),
                ],
                moves: vec![("t1", "a", "b")],
                freed: vec!["a"],
            },
            Case {
                // a (4, one entry) and c (4, one entry) come before b (4, two entries); a
                // first by name. a's t1 (4) → b keeps 8 − 4 − 4 = 0, c keeps 0: a tie → b.
                // c's t4 (4): b is full → c stays. b received t1: emptying b now would move t1
                // a second time (a chain), so it is not tried, although its t2 and t3 (2 + 2)
                // would fit c (4 free).
                name: "a node that received a move is not emptied later",
                nodes: vec![
                    node("a").holding("t1", threads(4)).build(),
                    node("b")
                        .holding("t2", threads(2))
                        .holding("t3", threads(2))
                        .build(),
                    node("c").holding("t4", threads(4)).build(),
                ],
                moves: vec![("t1", "a", "b")],
                freed: vec!["a"],
            },
            Case {
                // Two nodes named a: both left out. c's t3 (1) has no target.
                name: "nodes sharing a name are neither emptied nor targets",
                nodes: vec![
                    node("a").holding("t1", threads(4)).build(),
                    node("a").holding("t2", threads(4)).build(),
                    node("c").holding("t3", threads(1)).build(),
                ],
                moves: vec![],
                freed: vec![],
            },
        ];
        for case in cases {
            let plan = consolidate(&case.nodes);
            assert_eq!(moves(&plan), case.moves, "{}", case.name);
            assert_eq!(plan.freed, case.freed, "{}", case.name);
            assert_eq!(plan.is_empty(), case.freed.is_empty(), "{}", case.name);
            // Any order of the nodes gives the same plan.
            let mut reversed = case.nodes.clone();
            reversed.reverse();
            assert_eq!(consolidate(&reversed), plan, "{} (reversed)", case.name);
        }
    }

    #[test]
    fn room_held_for_a_waiting_tenant_keeps_its_node_from_being_emptied_but_counts_on_a_target() {
        // a (1/8) holds a hold of 5 for an older waiter: it is not emptied, and as a target it
        // has 8 − 1 − 5 = 2 free. b's t2 (3) does not fit a (2 < 3): nothing moves. With a
        // 2-thread t2 it fits: a keeps 0.
        let held = |t2: u64| {
            let mut a = node("a").holding("t1", threads(1)).build();
            a.hold(entry("waiter", threads(5))).unwrap();
            vec![a, node("b").holding("t2", threads(t2)).build()]
        };
        assert!(consolidate(&held(3)).is_empty());
        let plan = consolidate(&held(2));
        assert_eq!(moves(&plan), [("t2", "b", "a")]);
        // A node holding only a hold is a target too (it is in use).
        let mut waiting_room = node("w").build();
        waiting_room.hold(entry("waiter", threads(4))).unwrap();
        let nodes = [waiting_room, node("b").holding("t2", threads(4)).build()];
        assert_eq!(moves(&consolidate(&nodes)), [("t2", "b", "w")]);
    }

    #[test]
    fn entries_move_largest_first_by_their_share_of_the_node_then_by_uid() {
        // On a node of 8 threads, 32 GB, 100 GB (weights 1), the slack each leaves empty:
        //   x (4, 1, 1):  4/8 + 31/32 + 99/100 = 2.45875
        //   y (1, 16, 1): 7/8 + 16/32 + 99/100 = 2.365   → the largest
        //   z and w (1, 1, 1): 7/8 + 31/32 + 99/100 = 2.83375, a tie: by UID, w then z.
        let a = node("a")
            .holding("z", (1, 1, 1))
            .holding("x", (4, 1, 1))
            .holding("w", (1, 1, 1))
            .holding("y", (1, 16, 1))
            .build();
        let order: Vec<&str> = largest_first(&a).iter().map(|e| &*e.uid).collect();
        assert_eq!(order, ["y", "x", "w", "z"]);
        // An entry larger than the node itself (capacity lowered to 2 threads) comes first.
        let lowered = ledger("a")
            .capacity(2, 32, 100)
            .holding("small", (1, 1, 1))
            .holding("huge", (3, 1, 1))
            .build();
        let order: Vec<&str> = largest_first(&lowered).iter().map(|e| &*e.uid).collect();
        assert_eq!(order, ["huge", "small"]);
    }

    #[test]
    fn a_fleet_with_nothing_online_or_nothing_held_has_nothing_to_free() {
        assert_eq!(consolidate(&[]), Consolidation::default());
        let nodes = [node("a").build(), node("b").build()];
        assert!(consolidate(&nodes).is_empty());
    }

    #[test]
    fn an_entry_goes_only_to_a_node_carrying_its_tenants_labels() {
        use crate::testing::labels;
        // pinned (on a) may only be on a zone=x node: a cannot be emptied into b, which lacks
        // the label; with the label on b it can. (b's 10 threads fit nowhere else.)
        let plan = |b_zone: &str| {
            let nodes = [
                node("a")
                    .label("zone", "x")
                    .holding("pinned", (1, 1, 1))
                    .build(),
                node("b")
                    .capacity(16, 32, 100)
                    .label("zone", b_zone)
                    .holding("other", (10, 1, 1))
                    .build(),
            ];
            let x = labels(&[("zone", "x")]);
            consolidate_for(&nodes, |_| Some(0), |e| (&*e.uid == "pinned").then_some(&x)).freed
        };
        assert_eq!(plan("y"), Vec::<String>::new());
        assert_eq!(plan("x"), ["a"]);
    }
}
