//! Making room by moving (`--make-room-moves`, default 4; 0 = off): a tenant waiting for its
//! first placement that fits on no node, but would on one if a few smaller tenants there moved
//! to other nodes with room, gets those moves, make-before-break, before any machine is bought
//! for it.
//!
//! ```text
//!   every capacity tick (leader only), before its purchase plan:
//!     waiters (first placements), the pool's Nodes (engine), the Tenants ──▶ decide (pure)
//!       new order: the moves asked (RoomOrders), each mover and the waiter woken, an Event on
//!                  the waiter, tenant_placer_make_room_moves_total
//!       the mover's decision: its entry written on the target, its status records the move,
//!                  its source entry released (placement::migration, "asked")
//!       the waiter: as much of its room as is free on the host held for it (the engine), its
//!                  status says which tenants move for it; no machine is bought for it
//! ```
//!
//! Rules enforced here (the decisions' are in [`decide`]):
//! - a mover is a tenant of the pool resting where it is: `Active`, no move in flight, not
//!   `do-not-disrupt` (an unreadable value counts as `"true"`), and not itself waiting; its
//!   node selector goes with it (it moves only to a node carrying its labels);
//! - orders live in memory ([`RoomOrders`]): a new leader rolls back the moves in flight and
//!   plans again;
//! - hosts with an order count against the disruption budget together with the nodes
//!   consolidation is emptying, and new orders are given only inside a disruption window;
//! - while a tenant moves off a node that is not draining (a move asked to make room, by this
//!   process or by one before it), or is held on two nodes (a move whose status is not written
//!   yet), nothing is bought for a first placement this look: the room may be
//!   its, and the next look sees the move finished or rolled back (for a minute at most, so a
//!   duplicate entry nobody resolves never stops buying). Nor for a waiter that fits
//!   on a node as the fleet is: the queue is about to place it.

pub mod decide;

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use placement::{Entry, Labels, Mover, NameHasher};

pub use decide::{Controls, Decision, RoomBlocked, Waiter};

use super::disruption::{Budget, Limits};
use super::engine::Engine;
use super::publisher::{EventPublisher, Occurrence};
use super::state::orders::Order;
use super::state::{RoomOrders, TenantCache, WaitingRoom};
use crate::api::{DO_NOT_DISRUPT_ANNOTATION, Resting, Tenant};
use crate::metrics::Metrics;

/// What make-room reads and writes with, as one step of a capacity tick.
pub struct MakeRoom<'a> {
    pub engine: &'a Engine,
    pub tenants: &'a TenantCache,
    pub waiting: &'a WaitingRoom,
    pub orders: &'a RoomOrders,
    pub events: Option<&'a EventPublisher>,
    pub metrics: &'a Metrics,
    /// Tenants moved at most to make room for one waiter (`--make-room-moves`; 0: none).
    pub max_moves: u16,
    /// The disruption budget and windows.
    pub limits: &'a Limits,
    /// Nodes of the pool consolidation is emptying now (they share the budget).
    pub emptying: usize,
}

impl std::fmt::Debug for MakeRoom<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MakeRoom")
            .field("emptying", &self.emptying)
            .finish_non_exhaustive()
    }
}

/// What one look gives the purchase plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Made {
    /// The note each waiter with an order (or kept from one) adds to its status, by
    /// `namespace/name`.
    pub notes: HashMap<String, String>,
    /// Waiters (`namespace/name`) nothing is bought for this look: room is being made for them,
    /// or could be once moves under way finish (the budget). One held back by a closed window
    /// is bought for: the window limits disruption, not purchases.
    pub held: HashSet<String>,
    /// A move to make room is in flight: nothing is bought for a first placement this look.
    pub moving: bool,
    /// Waiters that fit on a node as the fleet is (the queue places them): nothing is bought for
    /// them this look.
    pub fits: HashSet<String>,
}

/// The step over `waiters` (first placements, oldest first).
pub async fn run(step: MakeRoom<'_>, waiters: &[Waiter]) -> Made {
    let max_moves = usize::from(step.max_moves);
    if max_moves == 0 || (waiters.is_empty() && step.orders.is_empty()) {
        step.orders.replace(Vec::new());
        return Made::default();
    }
    let ledgers = step.engine.ledgers(None);
    let draining: HashSet<&str> = ledgers
        .iter()
        .filter(|l| l.state() == placement::NodeState::Draining)
        .map(|l| l.name())
        .collect();
    // The fleet's fast hasher for the sets over every tenant and entry (read at every look).
    let waiting: HashSet<&str, BuildHasherDefault<NameHasher>> =
        waiters.iter().map(|w| w.uid.as_str()).collect();
    // Of each tenant only what the decision reads, from the compact cache.
    // A move to make room in flight: its status records it, or (the Node written first, its
    // status not yet) its tenant is held on two nodes.
    let mut recorded = false;
    step.tenants
        .each_move_from(|from| recorded |= !draining.contains(from));
    // Only waiters some node could hold are planned for, and the movers are read only for them.
    let waiters = decide::hopeful(&ledgers, waiters);
    let mut movers: HashMap<String, Option<Labels>, BuildHasherDefault<NameHasher>> =
        HashMap::default();
    if !waiters.is_empty() {
        step.tenants.each_resting(|uid, selector| {
            if !waiting.contains(&*uid) {
                movers.insert(uid.into_owned(), selector.cloned());
            }
        });
    }
    let mut held: HashSet<&str, BuildHasherDefault<NameHasher>> = HashSet::default();
    let twice = ledgers
        .iter()
        .flat_map(|l| l.entries())
        .any(|e| !held.insert(&*e.uid));
    let moving = step
        .orders
        .holds_purchases(recorded || twice, Instant::now());
    let mover = |entry: &Entry| -> Mover<'_> { movers.get(&*entry.uid).map(Option::as_ref) };
    let budget = &step.limits.budget;
    let controls = Controls {
        max_moves,
        allowed: budget.allowed(ledgers.len()),
        emptying: step.emptying,
        window_open: step.limits.open_at(Timestamp::now()),
    };
    let decision = decide::decide(
        &ledgers,
        &waiters,
        &step.orders.orders(),
        mover,
        &controls,
        Instant::now(),
    );
    step.orders.replace(decision.orders.clone());
    for order in decision
        .orders
        .iter()
        .filter(|o| decision.new.contains(&o.uid))
    {
        announce(&step, order).await;
    }
    // The movers and the waiters are woken at every look: a wake-up lost (a reconcile that was
    // running) costs one look, not the order.
    for order in &decision.orders {
        let names = order
            .moves
            .iter()
            .map(|m| m.tenant.as_str())
            .chain([order.waiter.as_str()]);
        for name in names {
            if let Some(tenant) = Tenant::reference(name) {
                step.waiting.wake(tenant);
            }
        }
    }
    let blocked: Vec<(String, &'static str)> = decision
        .blocked
        .iter()
        .map(|(waiter, why)| (waiter.clone(), why.reason()))
        .collect();
    for (waiter, reason) in step.orders.report(&blocked) {
        step.metrics.disruption_blocked(reason);
        tracing::info!(tenant = %waiter, reason, "make-room: room could be made by moves, not now");
        let note = decision
            .blocked
            .iter()
            .find(|(w, _)| *w == waiter)
            .map(|(_, why)| held_back(*why, budget))
            .unwrap_or_default();
        let found = Tenant::reference(&waiter).and_then(|r| step.tenants.get(&r));
        if let Some(tenant) = found {
            let occurrence = Occurrence {
                type_: EventType::Normal,
                reason: "DisruptionBlocked",
                action: "MakeRoom",
                note,
            };
            EventPublisher::publish_or_log(step.events, occurrence, tenant.object_ref(&())).await;
        }
    }
    let held = decision
        .orders
        .iter()
        .map(|o| o.waiter.clone())
        .chain(
            decision
                .blocked
                .iter()
                .filter(|(_, why)| *why == RoomBlocked::Budget)
                .map(|(waiter, _)| waiter.clone()),
        )
        .collect();
    Made {
        notes: notes(&decision, budget),
        held,
        moving,
        fits: decision.fits.into_iter().collect(),
    }
}

/// Whether this tenant may be moved to make room (see the module rules). A spread tenant is not
/// (its replicas move only as its spread rule allows, decided by the engine).
pub fn may_move(tenant: &Tenant) -> bool {
    let status = tenant.status.as_ref();
    Resting {
        phase: status.map(|s| s.phase),
        migrating: status.is_some_and(|s| s.migration.is_some()),
        deleting: tenant.metadata.deletion_timestamp.is_some(),
        suspended: tenant.spec.suspend,
        do_not_disrupt: tenant
            .annotations()
            .get(DO_NOT_DISRUPT_ANNOTATION)
            .map(String::as_str),
        spread: !tenant.spec.spread.is_none(),
    }
    .may_move()
}

/// The note on each waiter's status. Pure.
fn notes(decision: &Decision, budget: &Budget) -> HashMap<String, String> {
    let mut notes: HashMap<String, String> = decision
        .orders
        .iter()
        .map(|o| {
            (
                o.waiter.clone(),
                format!("room is being made for it on {}: {}", o.host, moving(o)),
            )
        })
        .collect();
    for (waiter, why) in &decision.blocked {
        notes.insert(waiter.clone(), held_back(*why, budget));
    }
    notes
}

/// What a waiter room is not made for now is told, in words.
fn held_back(why: RoomBlocked, budget: &Budget) -> String {
    let why = match why {
        RoomBlocked::Window => "outside every --disruption-schedule window".to_owned(),
        RoomBlocked::Budget => format!("the disruption budget ({budget}) is in use"),
    };
    format!("room could be made for it by moving smaller tenants, but not now: {why}")
}

/// `d/x moves to b, d/y moves to c`, by tenant name.
fn moving(order: &Order) -> String {
    let mut moves: Vec<&placement::Move> = order.moves.iter().collect();
    moves.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    moves
        .iter()
        .map(|m| format!("{} moves to {}", m.tenant, m.to))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn announce(step: &MakeRoom<'_>, order: &Order) {
    step.metrics.make_room_moved(order.moves.len());
    tracing::info!(tenant = %order.waiter, host = %order.host, moves = order.moves.len(), "make-room: moving smaller tenants so a waiting one fits");
    let Some(reference) = Tenant::reference(&order.waiter) else {
        return;
    };
    let Some(waiter) = step.tenants.get(&reference) else {
        return;
    };
    let occurrence = Occurrence {
        type_: EventType::Normal,
        reason: "MakingRoom",
        action: "MakeRoom",
        note: format!(
            "fits nowhere as the nodes are; room is made on {}: {} (make-before-break)",
            order.host,
            moving(order)
        ),
    };
    EventPublisher::publish_or_log(step.events, occurrence, waiter.object_ref(&())).await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::controller::state::orders::order;

    #[test]
    fn each_waiter_is_told_who_moves_for_it_or_why_nobody_does_now() {
        let decision = Decision {
            // Movers listed by name, whatever the order of the moves.
            orders: vec![order("d/w1", "a", &[("d/y", "c"), ("d/x", "b")])],
            new: vec!["uid-d/w1".into()],
            blocked: vec![
                ("d/w2".into(), RoomBlocked::Window),
                ("d/w3".into(), RoomBlocked::Budget),
            ],
            fits: vec![],
        };
        let notes = notes(&decision, &Budget::default());
        assert_eq!(
            notes["d/w1"],
            "room is being made for it on a: d/x moves to b, d/y moves to c"
        );
        assert_eq!(
            notes["d/w2"],
            "room could be made for it by moving smaller tenants, but not now: outside every \
             --disruption-schedule window"
        );
        assert_eq!(
            notes["d/w3"],
            "room could be made for it by moving smaller tenants, but not now: the disruption \
             budget (10%) is in use"
        );
        assert_eq!(notes.len(), 3);
    }

    #[test]
    fn only_a_tenant_resting_where_it_is_and_not_do_not_disrupt_may_move() {
        use crate::api::TenantPhase;
        use crate::testing::tenant;
        let active = || tenant("t").on("a").phase(TenantPhase::Active).build();
        assert!(may_move(&active()));
        let mut kept = active();
        kept.metadata.annotations = Some(
            [(
                crate::api::DO_NOT_DISRUPT_ANNOTATION.to_owned(),
                "yes".to_owned(),
            )]
            .into(),
        );
        assert!(!may_move(&kept), "an unreadable value keeps it");
        let resizing = tenant("t").on("a").phase(TenantPhase::Resizing).build();
        assert!(!may_move(&resizing), "waiting to grow");
        let moving = tenant("t")
            .on("a")
            .phase(TenantPhase::Active)
            .migrating("a", "b")
            .build();
        assert!(!may_move(&moving));
        assert!(!may_move(&tenant("t").build()), "no status: nothing held");
        let spread = tenant("t")
            .spread(crate::api::TenantSpread::Nodes, 2)
            .on("a")
            .phase(TenantPhase::Active)
            .build();
        assert!(!may_move(&spread), "its replicas keep their spread rule");
    }
}
