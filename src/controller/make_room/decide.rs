//! Which waiting tenants get room made by moves at this look: pure, from the pool's nodes as
//! placement sees them, the waiters oldest first, the orders in force and the disruption
//! controls.
//!
//! Rules enforced here:
//! - an order in force is kept while its waiter still waits for its first placement, its host
//!   still takes new tenants and every move not made yet can still be made as asked (its target
//!   takes new tenants and has room for it and the other pending moves there, counted together)
//!   and it still brings the waiter its room: the host, once the movers still on it have left,
//!   has room for the whole footprint, or the waiter already holds an entry (its placement is
//!   being written); otherwise it is dropped, and its waiter is planned again (an order whose
//!   room someone else took meanwhile is short for good);
//! - waiters are served oldest first; each gets the least-moving room (`placement::make_room`)
//!   over the fleet as the orders before it leave it: their pending moves made, and their
//!   waiters' footprints held on their hosts, so two orders never count on the same room;
//! - a waiter that fits somewhere as the fleet is gets no order (the queue places it: it is
//!   listed, so that nothing is bought for it meanwhile), nor one that no room can be made for (a
//!   machine may be bought); one no node could hold even emptied is not planned for at all
//!   ([`hopeful`]);
//! - a new order needs a disruption window open, and a place in the budget: hosts with an order
//!   and nodes consolidation is emptying count together against it (a person's drain does not);
//!   a waiter kept from its room by either says why ([`RoomBlocked`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use placement::{Edit, EditKind, Entry, Labels, Mover, NodeLedger, Resources, make_room};

use crate::controller::state::orders::Order;

/// An order that has not brought its waiter room within this long is dropped and planned again.
pub const ORDER_KEPT: Duration = Duration::from_secs(300);

/// A tenant waiting for its first placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub uid: String,
    /// `namespace/name`.
    pub key: String,
    pub footprint: Resources,
    pub selector: Option<Labels>,
}

/// The controls in force at this look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Controls {
    /// `--make-room-moves`.
    pub max_moves: usize,
    /// Nodes of the pool that may be disrupted at once (the budget).
    pub allowed: usize,
    /// Nodes consolidation is emptying now.
    pub emptying: usize,
    pub window_open: bool,
}

/// Why room that could be made for a waiter is not made now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RoomBlocked {
    Window,
    Budget,
}

impl RoomBlocked {
    /// The reason as the metric names it (the one consolidation uses too).
    pub fn reason(self) -> &'static str {
        match self {
            RoomBlocked::Window => "OutsideWindow",
            RoomBlocked::Budget => "BudgetExhausted",
        }
    }
}

/// What to do at this look.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The orders in force from now: those kept, then the new ones, oldest waiter first.
    pub orders: Vec<Order>,
    /// UIDs of the waiters whose orders are new at this look.
    pub new: Vec<String>,
    /// Waiters room could be made for, and why it is not.
    pub blocked: Vec<(String, RoomBlocked)>,
    /// Waiters (`namespace/name`) that fit on a node as the fleet is.
    pub fits: Vec<String>,
}

/// The waiters room might be made for, oldest first: those some node that takes new tenants
/// could hold were it emptied (within the largest effective capacity in every dimension). Room
/// is never made for the others, and each would cost a pass over the fleet at every look.
pub fn hopeful(nodes: &[NodeLedger], waiters: &[Waiter]) -> Vec<Waiter> {
    let most =
        nodes
            .iter()
            .filter(|n| n.view().takes_new_tenants())
            .fold(Resources::ZERO, |most, n| {
                let capacity = n.effective_capacity();
                Resources::from_fn(|d| most.get(d).max(capacity.get(d)))
            });
    waiters
        .iter()
        .filter(|w| w.footprint.fits_within(&most))
        .cloned()
        .collect()
}

/// The decision (see the module rules). `mover` says which entries may move and where (the
/// caller's rule: not `do-not-disrupt`, not waiting to grow, not waiting at all).
pub fn decide<'s>(
    nodes: &[NodeLedger],
    waiters: &[Waiter],
    orders: &[Order],
    mover: impl Fn(&Entry) -> Mover<'s> + Copy,
    controls: &Controls,
    now: Instant,
) -> Decision {
    // Copied once an order changes it: a look with nothing to order copies no ledger.
    let mut fleet: Cow<'_, [NodeLedger]> = Cow::Borrowed(nodes);
    let mut decision = Decision::default();
    if controls.max_moves == 0 {
        return decision;
    }
    for order in orders {
        let waits = waiters.iter().find(|w| w.uid == order.uid);
        let fresh = now.saturating_duration_since(order.since) < ORDER_KEPT;
        if let Some(waiter) = waits.filter(|_| fresh)
            && let Some(pending) = pending_moves(&fleet, order)
            && brings_room(&fleet, order, waiter)
        {
            commit(fleet.to_mut(), &pending, &order.host, waiter);
            decision.orders.push(order.clone());
        }
    }
    for waiter in waiters {
        if decision.orders.iter().any(|o| o.uid == waiter.uid) {
            continue;
        }
        let Some(room) = make_room(
            &fleet,
            &waiter.footprint,
            waiter.selector.as_ref(),
            controls.max_moves,
            mover,
        ) else {
            continue;
        };
        if room.moves.is_empty() {
            decision.fits.push(waiter.key.clone());
            continue;
        }
        let disrupted = decision.orders.len().saturating_add(controls.emptying);
        if !controls.window_open {
            decision
                .blocked
                .push((waiter.key.clone(), RoomBlocked::Window));
            continue;
        }
        if disrupted >= controls.allowed {
            decision
                .blocked
                .push((waiter.key.clone(), RoomBlocked::Budget));
            continue;
        }
        commit(fleet.to_mut(), &room.moves, &room.host, waiter);
        decision.new.push(waiter.uid.clone());
        decision.orders.push(Order {
            uid: waiter.uid.clone(),
            waiter: waiter.key.clone(),
            host: room.host,
            moves: room.moves,
            since: now,
        });
    }
    decision
}

/// The moves of `order` not made yet, when each can still be made as asked (see the module
/// rules); `None` when one cannot, or the host no longer takes new tenants.
fn pending_moves(fleet: &[NodeLedger], order: &Order) -> Option<Vec<placement::Move>> {
    let by_name: HashMap<&str, &NodeLedger> = fleet.iter().map(|n| (n.name(), n)).collect();
    let host = by_name.get(order.host.as_str())?;
    if !host.view().takes_new_tenants() {
        return None;
    }
    let pending: Vec<placement::Move> = order
        .moves
        .iter()
        .filter(|m| host.entry_of(&m.uid).is_some())
        .filter(|m| {
            by_name
                .get(m.to.as_str())
                .is_none_or(|to| to.entry_of(&m.uid).is_none())
        })
        .cloned()
        .collect();
    let mut added: HashMap<&str, Resources> = HashMap::new();
    for m in &pending {
        let to = by_name.get(m.to.as_str())?;
        let sum = added
            .get(m.to.as_str())
            .copied()
            .unwrap_or(Resources::ZERO)
            .checked_add(m.resources)?;
        let view = to.view();
        if !view.takes_new_tenants() || !sum.fits_within(&view.free()) {
            return None;
        }
        added.insert(m.to.as_str(), sum);
    }
    Some(pending)
}

/// Whether `order` still brings `waiter` its room (see the module rules): an order short for
/// good would hold its waiter, with nothing bought for it, for [`ORDER_KEPT`].
fn brings_room(fleet: &[NodeLedger], order: &Order, waiter: &Waiter) -> bool {
    // NB: a waiter whose entry is written but whose status is not yet still waits here; a
    // dropped order would leave it to be bought for.
    if fleet.iter().any(|n| n.entry_of(&waiter.uid).is_some()) {
        return true;
    }
    let Some(host) = fleet.iter().find(|n| n.name() == order.host) else {
        return false;
    };
    let leaving = order
        .moves
        .iter()
        .filter_map(|m| host.entry_of(&m.uid))
        .map(|e| e.resources);
    std::iter::once(host.view().free())
        .chain(leaving)
        .try_fold(Resources::ZERO, Resources::checked_add)
        .is_some_and(|room| waiter.footprint.fits_within(&room))
}

/// The fleet as the order leaves it: its moves made, and as much of the waiter's footprint as
/// is then free on the host held for it.
fn commit(fleet: &mut [NodeLedger], moves: &[placement::Move], host: &str, waiter: &Waiter) {
    for m in moves {
        let release = Edit {
            kind: EditKind::Release,
            node: m.from.clone(),
            uid: m.uid.clone(),
            entry: None,
        };
        let reserve = Edit {
            kind: EditKind::Reserve,
            node: m.to.clone(),
            uid: m.uid.clone(),
            entry: Some(Entry {
                uid: m.uid.as_str().into(),
                tenant: m.tenant.as_str().into(),
                resources: m.resources,
                replicas: None,
            }),
        };
        for edit in [release, reserve] {
            if let Some(node) = fleet.iter_mut().find(|n| n.name() == edit.node) {
                // Checked by the plan: it fits; if not, the next look plans again.
                let _ = node.apply(&edit);
            }
        }
    }
    if let Some(node) = fleet.iter_mut().find(|n| n.name() == host) {
        let free = node.view().free();
        let part = Resources::from_fn(|d| waiter.footprint.get(d).min(free.get(d)));
        let _ = node.hold(Entry {
            uid: waiter.uid.as_str().into(),
            tenant: waiter.key.as_str().into(),
            resources: part,
            replicas: None,
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use placement::testing::ledger;

    /// Every node 8 threads, 32 GB, 100 GB; tenants ask threads and 1 GB, 1 GB.
    fn node(name: &str) -> placement::testing::LedgerBuilder<'_> {
        ledger(name).capacity(8, 32, 100)
    }

    fn waiter(name: &str, threads: u64) -> Waiter {
        Waiter {
            uid: name.to_owned(),
            key: format!("d/{name}"),
            footprint: Resources::new(threads, 1, 1),
            selector: None,
        }
    }

    /// Anything may move but the tenants named `pinned…`.
    fn rule(entry: &Entry) -> Mover<'static> {
        (!entry.uid.starts_with("pinned")).then_some(None)
    }

    fn controls() -> Controls {
        Controls {
            max_moves: 4,
            allowed: 2,
            emptying: 0,
            window_open: true,
        }
    }

    /// Two hosts (a, b) each 6/8 with two 3-thread tenants, and c with 4 free: a 5-thread
    /// waiter fits nowhere and needs one move.
    fn fleet() -> Vec<NodeLedger> {
        fleet_with_c(4)
    }

    /// [`fleet`] with `c_taken` threads taken on c.
    fn fleet_with_c(c_taken: u64) -> Vec<NodeLedger> {
        vec![
            node("a")
                .holding("a1", (3, 1, 1))
                .holding("a2", (3, 1, 1))
                .build(),
            node("b")
                .holding("b1", (3, 1, 1))
                .holding("b2", (3, 1, 1))
                .build(),
            node("c").allocated(c_taken, 0, 0).build(),
        ]
    }

    /// An order as (waiter, host, [(mover, to)]).
    type Summary = (String, String, Vec<(String, String)>);

    fn summary(d: &Decision) -> Vec<Summary> {
        d.orders
            .iter()
            .map(|o| {
                let moves = o
                    .moves
                    .iter()
                    .map(|m| (m.uid.clone(), m.to.clone()))
                    .collect();
                (o.waiter.clone(), o.host.clone(), moves)
            })
            .collect()
    }

    fn s(x: &str) -> String {
        x.to_owned()
    }

    #[test]
    fn only_waiters_a_node_could_hold_emptied_are_planned_for() {
        // a: 8 threads, 32 GB, 100 GB; big: 12 threads, 16 GB, 100 GB, draining (takes none).
        let mut nodes = fleet();
        nodes.push(
            ledger("big")
                .capacity(12, 16, 100)
                .state(placement::NodeState::Draining)
                .build(),
        );
        let sized = |name: &str, threads, memory| Waiter {
            footprint: Resources::new(threads, memory, 1),
            ..waiter(name, 0)
        };
        let waiters = [
            sized("edge", 8, 32),
            sized("threads", 9, 1),
            sized("memory", 1, 33),
            sized("small", 5, 1),
            // Beyond every node's threads but one that takes no new tenants.
            sized("drained", 12, 1),
        ];
        let kept: Vec<String> = hopeful(&nodes, &waiters)
            .into_iter()
            .map(|w| w.uid)
            .collect();
        assert_eq!(kept, ["edge", "small"]);
        // What is passed over is what `decide` could make no room for anyway.
        let decision = decide(&nodes, &waiters, &[], rule, &controls(), Instant::now());
        let planned = |uid: &str| {
            decision.orders.iter().any(|o| o.uid == uid)
                || decision
                    .blocked
                    .iter()
                    .any(|(w, _)| *w == format!("d/{uid}"))
                || decision.fits.contains(&format!("d/{uid}"))
        };
        assert!(planned("small"));
        for uid in ["threads", "memory", "drained"] {
            assert!(!planned(uid), "{uid}");
        }
    }

    #[test]
    fn each_waiter_oldest_first_gets_the_room_the_fleet_left_by_earlier_orders_allows() {
        let now = Instant::now();
        struct Case {
            name: &'static str,
            waiters: Vec<Waiter>,
            controls: Controls,
            orders: Vec<Summary>,
            blocked: Vec<(String, RoomBlocked)>,
        }
        let cases = [
            Case {
                name: "one waiter, one move: a1 to c",
                waiters: vec![waiter("w1", 5)],
                controls: controls(),
                orders: vec![(s("d/w1"), s("a"), vec![(s("a1"), s("c"))])],
                blocked: vec![],
            },
            Case {
                name: "the second waiter sees c filled by the first's move: b needs b1 somewhere, \
                       and c has 1 left, so nothing",
                waiters: vec![waiter("w1", 5), waiter("w2", 5)],
                controls: controls(),
                orders: vec![(s("d/w1"), s("a"), vec![(s("a1"), s("c"))])],
                blocked: vec![],
            },
            Case {
                name: "the budget is taken by consolidation",
                waiters: vec![waiter("w1", 5)],
                controls: Controls {
                    emptying: 2,
                    ..controls()
                },
                orders: vec![],
                blocked: vec![(s("d/w1"), RoomBlocked::Budget)],
            },
            Case {
                name: "outside every window",
                waiters: vec![waiter("w1", 5)],
                controls: Controls {
                    window_open: false,
                    ..controls()
                },
                orders: vec![],
                blocked: vec![(s("d/w1"), RoomBlocked::Window)],
            },
            Case {
                name: "make-room off",
                waiters: vec![waiter("w1", 5)],
                controls: Controls {
                    max_moves: 0,
                    ..controls()
                },
                orders: vec![],
                blocked: vec![],
            },
            Case {
                name: "a waiter that fits as it is gets no order; one too large gets none either",
                waiters: vec![waiter("w1", 2), waiter("w2", 9)],
                controls: controls(),
                orders: vec![],
                blocked: vec![],
            },
        ];
        for case in cases {
            let d = decide(&fleet(), &case.waiters, &[], rule, &case.controls, now);
            assert_eq!(summary(&d), case.orders, "{}", case.name);
            assert_eq!(d.blocked, case.blocked, "{}", case.name);
            assert_eq!(d.new.len(), case.orders.len(), "{}", case.name);
        }
        let d = decide(
            &fleet(),
            &[waiter("w1", 2), waiter("w2", 9)],
            &[],
            rule,
            &controls(),
            now,
        );
        assert_eq!(d.fits, ["d/w1"], "w1 fits a as it is; w2 fits nowhere");
    }

    #[test]
    fn an_order_is_kept_while_it_can_still_be_carried_out_and_dropped_otherwise() {
        let then = Instant::now();
        let first = decide(&fleet(), &[waiter("w1", 5)], &[], rule, &controls(), then);
        assert_eq!(first.new, ["w1"]);
        let orders = first.orders;
        let later = then + Duration::from_secs(10);
        // Nothing changed: kept, not new.
        let d = decide(
            &fleet(),
            &[waiter("w1", 5)],
            &orders,
            rule,
            &controls(),
            later,
        );
        assert_eq!(d.orders, orders);
        assert!(d.new.is_empty());
        // The move is made (a1 on c): kept, nothing pending.
        let moved = vec![
            node("a").holding("a2", (3, 1, 1)).build(),
            node("b")
                .holding("b1", (3, 1, 1))
                .holding("b2", (3, 1, 1))
                .build(),
            node("c")
                .allocated(3, 0, 0)
                .holding("a1", (3, 1, 1))
                .build(),
        ];
        let d = decide(
            &moved,
            &[waiter("w1", 5)],
            &orders,
            rule,
            &controls(),
            later,
        );
        assert_eq!(d.orders.len(), 1);
        let moved_and = |a: &[(&str, u64)]| {
            let mut nodes = moved.clone();
            nodes[0] = a
                .iter()
                .fold(node("a"), |n, (t, threads)| n.holding(t, (*threads, 1, 1)))
                .build();
            decide(
                &nodes,
                &[waiter("w1", 5)],
                &orders,
                rule,
                &controls(),
                later,
            )
        };
        // a1 gone, w1's entry written on a (3 + 5 = 8 of 8), its status not yet: kept.
        assert_eq!(moved_and(&[("a2", 3), ("w1", 5)]).orders, orders);
        // a1 gone, but x (3) took its room: a has 8 - 6 = 2 free of the 5 w1 needs, and no mover
        // is left to go: dropped (kept, it held w1 waiting and unbought for ORDER_KEPT), and no
        // new room (a2 or x would need 3 free elsewhere: b has 2, c has 1).
        let d = moved_and(&[("a2", 3), ("x", 3)]);
        assert!(d.orders.is_empty() && d.new.is_empty(), "{d:?}");
        // c filled by someone else meanwhile: a1 can no longer go there, the order is dropped
        // and w1 planned again (nothing else works: no order).
        let full = fleet_with_c(7);
        let d = decide(&full, &[waiter("w1", 5)], &orders, rule, &controls(), later);
        assert!(d.orders.is_empty(), "{d:?}");
        // The waiter was placed (no longer waits), or the order is too old: dropped.
        let d = decide(&fleet(), &[], &orders, rule, &controls(), later);
        assert!(d.orders.is_empty());
        let stale = then + ORDER_KEPT;
        let d = decide(
            &fleet(),
            &[waiter("w1", 5)],
            &orders,
            rule,
            &controls(),
            stale,
        );
        assert_eq!(d.new, ["w1"], "planned again, as new");
        // A kept order counts against the budget.
        let one = Controls {
            allowed: 1,
            ..controls()
        };
        let mut roomy = fleet();
        roomy.push(node("d").allocated(5, 0, 0).build());
        let waiters = [waiter("w1", 5), waiter("w0", 4)];
        let d = decide(&roomy, &waiters, &orders, rule, &one, later);
        assert_eq!(d.blocked, [(s("d/w0"), RoomBlocked::Budget)]);
        let d = decide(&roomy, &waiters, &orders, rule, &controls(), later);
        assert_eq!(d.new, ["w0"], "with room in the budget it gets its order");
    }

    #[test]
    fn a_tenant_the_caller_keeps_never_moves() {
        let nodes = vec![
            node("a")
                .holding("pinned-1", (3, 1, 1))
                .holding("a2", (4, 1, 1))
                .build(),
            node("b").allocated(4, 0, 0).build(),
        ];
        // w needs 4 on a: only a2 (4) or pinned-1 (3)… pinned-1 may not move: a2 goes to b.
        let d = decide(
            &nodes,
            &[waiter("w", 5)],
            &[],
            rule,
            &controls(),
            Instant::now(),
        );
        assert_eq!(summary(&d), [(s("d/w"), s("a"), vec![(s("a2"), s("b"))])]);
    }
}
