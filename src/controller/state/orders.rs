//! Room being made for waiting tenants by moving smaller ones (`--make-room-moves`): the orders
//! the capacity tick's make-room step gives, which the tenant loop reads (the move asked of a
//! tenant, and why) and the engine reads (the room held for each waiter on its host).
//!
//! Rules enforced here:
//! - at most one order per waiter, and a tenant is asked at most one move (the first order
//!   naming it wins);
//! - kept in memory only: after a restart no move is asked, so a move in flight is rolled back
//!   (`placement::migration`) and the next look plans again.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// One waiter's room: the node it is made on and the moves that make it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// The waiter's UID.
    pub uid: String,
    /// The waiter, `namespace/name`.
    pub waiter: String,
    /// The node the room is made on.
    pub host: String,
    /// The moves asked, one per mover.
    pub moves: Vec<placement::Move>,
    /// When the order was first given (an order that makes no progress is dropped).
    pub since: Instant,
}

/// A move asked of one tenant, and for whom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    pub from: String,
    pub to: String,
    /// The waiter it makes room for, `namespace/name`.
    pub waiter: String,
}

/// How long moves in flight hold purchases back, at most: a duplicate entry nobody resolves
/// must not stop buying for good.
pub const MOVING_KEPT: std::time::Duration = std::time::Duration::from_secs(60);

/// The orders in force, since when moves have been seen in flight without a pause, and the
/// reason each waiter was last reported held back for.
#[derive(Debug, Default)]
pub struct RoomOrders {
    orders: Mutex<Vec<Order>>,
    moving_since: Mutex<Option<Instant>>,
    reported: Mutex<HashMap<String, &'static str>>,
}

impl RoomOrders {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Order>> {
        self.orders.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `blocked` (waiter, reason) as the last reported; answers those whose reason is new
    /// (each is reported once per reason).
    pub fn report(&self, blocked: &[(String, &'static str)]) -> Vec<(String, &'static str)> {
        let mut reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh = blocked
            .iter()
            .filter(|(waiter, why)| reported.get(waiter) != Some(why))
            .cloned()
            .collect();
        *reported = blocked.iter().cloned().collect();
        fresh
    }

    /// Whether moves seen in flight now (`moving`) still hold purchases back: only for
    /// [`MOVING_KEPT`] since they were first seen without a pause.
    pub fn holds_purchases(&self, moving: bool, now: Instant) -> bool {
        let mut since = self
            .moving_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !moving {
            *since = None;
            return false;
        }
        let first = *since.get_or_insert(now);
        now.saturating_duration_since(first) < MOVING_KEPT
    }

    /// The orders in force, oldest waiter's first as given.
    pub fn orders(&self) -> Vec<Order> {
        self.lock().clone()
    }

    /// Keeps `orders` in place of the last ones, dropping a second order for a waiter and a
    /// second move asked of a tenant.
    pub fn replace(&self, orders: Vec<Order>) {
        let mut kept: Vec<Order> = Vec::with_capacity(orders.len());
        let mut movers: HashMap<String, ()> = HashMap::new();
        for mut order in orders {
            if kept.iter().any(|o| o.uid == order.uid) {
                continue;
            }
            order
                .moves
                .retain(|m| movers.insert(m.uid.clone(), ()).is_none());
            kept.push(order);
        }
        *self.lock() = kept;
    }

    /// The move asked of the tenant with this UID, if any.
    pub fn asked(&self, uid: &str) -> Option<Asked> {
        self.lock().iter().find_map(|order| {
            let m = order.moves.iter().find(|m| m.uid == uid)?;
            Some(Asked {
                from: m.from.clone(),
                to: m.to.clone(),
                waiter: order.waiter.clone(),
            })
        })
    }

    /// Each waiter with an order (`namespace/name`) and its host.
    pub fn hosts(&self) -> HashMap<String, String> {
        self.lock()
            .iter()
            .map(|o| (o.waiter.clone(), o.host.clone()))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// An order for tests: for `waiter` (`namespace/name`, UID `uid-{waiter}`) on `host`, each
/// mover (`namespace/name`, UID `uid-{mover}`, 1 thread, 1 GB, 1 GB) going to its node.
#[cfg(test)]
pub fn order(waiter: &str, host: &str, movers: &[(&str, &str)]) -> Order {
    Order {
        uid: format!("uid-{waiter}"),
        waiter: waiter.to_owned(),
        host: host.to_owned(),
        moves: movers
            .iter()
            .map(|(tenant, to)| placement::Move {
                uid: format!("uid-{tenant}"),
                tenant: (*tenant).to_owned(),
                resources: placement::Resources::new(1, 1, 1),
                from: host.to_owned(),
                to: (*to).to_owned(),
            })
            .collect(),
        since: Instant::now(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn one_order_per_waiter_and_one_move_per_tenant_the_first_wins() {
        let orders = RoomOrders::default();
        orders.replace(vec![
            order("d/w1", "a", &[("d/m1", "b"), ("d/m2", "c")]),
            order("d/w1", "z", &[("d/m9", "b")]),
            order("d/w2", "d", &[("d/m2", "e"), ("d/m3", "e")]),
        ]);
        let kept = orders.orders();
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[1].moves.len(), 1);
        let asked = orders.asked("uid-d/m2").unwrap();
        assert_eq!((asked.from.as_str(), asked.to.as_str()), ("a", "c"));
        assert_eq!(asked.waiter, "d/w1");
        assert_eq!(orders.asked("uid-d/m9"), None);
        assert_eq!(orders.hosts().get("d/w2").map(String::as_str), Some("d"));
        orders.replace(Vec::new());
        assert!(orders.is_empty() && orders.asked("uid-d/m1").is_none());
    }

    #[test]
    fn a_waiter_held_back_is_reported_once_per_reason() {
        let orders = RoomOrders::default();
        let w = |why: &'static str| vec![("d/w".to_owned(), why)];
        assert_eq!(orders.report(&w("OutsideWindow")), w("OutsideWindow"));
        assert!(orders.report(&w("OutsideWindow")).is_empty());
        assert_eq!(orders.report(&w("BudgetExhausted")), w("BudgetExhausted"));
        assert!(orders.report(&[]).is_empty());
        assert_eq!(orders.report(&w("BudgetExhausted")), w("BudgetExhausted"));
    }

    #[test]
    fn moves_in_flight_hold_purchases_back_for_a_minute_at_most() {
        let orders = RoomOrders::default();
        let t0 = Instant::now();
        assert!(orders.holds_purchases(true, t0));
        assert!(orders.holds_purchases(true, t0 + MOVING_KEPT / 2));
        assert!(!orders.holds_purchases(true, t0 + MOVING_KEPT));
        // A pause starts the clock again.
        assert!(!orders.holds_purchases(false, t0 + MOVING_KEPT));
        assert!(orders.holds_purchases(true, t0 + MOVING_KEPT * 2));
    }
}
