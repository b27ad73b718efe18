//! The pending queue: tenants waiting for their first placement are served in creation order.
//!
//! Rules enforced here:
//! - a batch is decided oldest first; before a tenant is decided, room is held for every waiting
//!   tenant older than it (outside the batch) that fits now, in the ledger's holds, which are
//!   kept apart from its entries and so can never be written, so a younger tenant never takes room an older waiting tenant could use: the whole
//!   footprint for a tenant waiting to be placed, the growth on its own node for a tenant
//!   waiting to resize there (`Resizing`; its status names that node). A suspended waiter holds
//!   nothing. A waiter's room is held only on a node carrying the labels of its node selector
//!   (its plan is the one [`plan_tenant_held_by`] makes for it);
//! - room on a delivered machine is held for the waiting tenants it was bought for
//!   ([`FifoQueue::hold_bought`]) before anything is decided, whatever their age: no other
//!   tenant takes it; each of them sees it free when decided itself. Under StrictFIFO an older
//!   first placement that fits nowhere else takes it (it would be the head, and they would wait
//!   behind it for good), and so does an older tenant whose move off a draining node cannot be
//!   made otherwise (they may wait behind a head for good);
//! - room being made on a node for a waiting tenant (smaller tenants moving off it,
//!   `placement::make_room`) is held for it the same way ([`FifoQueue::hold_made`]): as much of
//!   its footprint as is free there, so that the room each move frees goes to it and to no one
//!   else until it is decided;
//! - `BestEffortFIFO` (the default): an older tenant that fits nowhere holds nothing and blocks
//!   no one;
//! - `StrictFIFO`: the oldest tenant that fits nowhere is the head; while it waits, no younger
//!   tenant is placed for the first time (resizes, duplicate drops and suspends go on as usual,
//!   so room is still held for the growth of older waiting resizes).

use std::fmt;
use std::str::FromStr;

use crate::fleet::FleetMut;
use crate::ledger::{Edit, EditKind, Entry, Plan, TenantWants};
use crate::plan::{holders_of, plan_restore, plan_tenant_held_by};
use crate::policy::Policy;
use crate::resources::Resources;

/// How waiting tenants are ordered when room appears.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QueueMode {
    /// Oldest first; an older tenant that fits nowhere does not block younger ones that fit.
    #[default]
    BestEffortFifo,
    /// Oldest first; nothing younger is placed while the oldest waiting tenant does not fit.
    StrictFifo,
}

impl QueueMode {
    pub const ALL: [QueueMode; 2] = [QueueMode::BestEffortFifo, QueueMode::StrictFifo];

    /// The name used in configuration: `BestEffortFIFO` or `StrictFIFO`.
    pub fn name(self) -> &'static str {
        match self {
            QueueMode::BestEffortFifo => "BestEffortFIFO",
            QueueMode::StrictFifo => "StrictFIFO",
        }
    }
}

impl fmt::Display for QueueMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A queue mode name that is not one of [`QueueMode::ALL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownQueueMode(pub String);

impl fmt::Display for UnknownQueueMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown queue mode {:?}: expected BestEffortFIFO or StrictFIFO",
            self.0
        )
    }
}

impl std::error::Error for UnknownQueueMode {}

impl FromStr for QueueMode {
    type Err = UnknownQueueMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        QueueMode::ALL
            .into_iter()
            .find(|mode| mode.name() == s)
            .ok_or_else(|| UnknownQueueMode(s.to_owned()))
    }
}

/// One batch's view of the queue: the waiting tenants outside the batch, oldest first, and the
/// StrictFIFO head once one is known. `K` orders tenants (creation time, then name).
#[derive(Debug)]
pub struct FifoQueue<'w, K> {
    mode: QueueMode,
    /// Oldest first; each with the position of the ledger holding its entry, when known.
    waiting: Vec<(K, TenantWants<'w>, Option<usize>)>,
    considered: usize,
    head: Option<String>,
    /// The most free per dimension on any node taking new tenants, when first needed: a waiter
    /// asking more than this in some dimension fits nowhere, without a plan. (Holds only lower
    /// free room, so this stays an upper bound.)
    most_free: Option<Resources>,
    /// Holds placed so far.
    holds: usize,
    /// Room held on delivered machines for the tenants they were bought for: (tenant's key,
    /// node, UID).
    bought: Vec<(K, String, String)>,
}

impl<'w, K: Ord + Clone> FifoQueue<'w, K> {
    /// `waiting` are the tenants waiting for room that are not decided in this batch.
    pub fn new(mode: QueueMode, waiting: Vec<(K, TenantWants<'w>)>) -> Self {
        Self::with_holders(
            mode,
            waiting.into_iter().map(|(k, w)| (k, w, None)).collect(),
        )
    }

    /// [`new`](Self::new) for a caller that knows, for each waiter, the position in the ledgers
    /// of the node holding its entry (`None`: it holds none, or look it up by `status_node`):
    /// a waiter already holding its footprint holds nothing more, one holding less holds its
    /// growth there, without a search of the fleet.
    pub fn with_holders(
        mode: QueueMode,
        mut waiting: Vec<(K, TenantWants<'w>, Option<usize>)>,
    ) -> Self {
        waiting.sort_by(|a, b| a.0.cmp(&b.0));
        FifoQueue {
            mode,
            waiting,
            considered: 0,
            head: None,
            most_free: None,
            holds: 0,
            bought: Vec::new(),
        }
    }

    /// Holds room on each delivered machine for the waiting tenants it was bought for, before
    /// anything is decided: `bought` names a tenant (its key, and wants that hold no entry
    /// anywhere) and the node of a machine bought for it. Held only where the tenant fits on
    /// that node now. Until the tenant is decided (its own decision drops its hold first), no
    /// other tenant takes that room, older or younger: the planner chose the packing, not the
    /// policy of the moment. Except under StrictFIFO for an older first placement that fits
    /// nowhere else: it would be the head, and everything the machine was bought for would wait
    /// behind it for good, so it takes that room.
    pub fn hold_bought<F: FleetMut + ?Sized>(
        &mut self,
        ledgers: &mut F,
        bought: &[(K, &str, TenantWants<'_>)],
    ) {
        for (key, node, wants) in bought {
            if self.bought.iter().any(|(_, _, uid)| uid == wants.uid) {
                continue;
            }
            let Some(ledger) = ledgers.find(node) else {
                continue;
            };
            let holders: [usize; 0] = [];
            let one = std::slice::from_ref(ledger);
            // It holds nothing: on this one node, the only edit is a reservation there.
            if let Plan::Edit(edit) = plan_tenant_held_by(Policy::FirstFit, wants, one, &holders, 0)
            {
                hold(ledgers, edit);
                self.holds = self.holds.saturating_add(1);
                self.bought
                    .push((key.clone(), (*node).to_owned(), wants.uid.to_owned()));
            }
        }
    }

    /// Holds the room being made on a node for a waiting tenant (see the module rules): `made`
    /// names the tenant (its key, and wants that hold no entry anywhere) and the node. As much
    /// of its footprint as is free there now is held, on a node that takes new tenants and
    /// carries its labels; its own decision drops the hold, as a delivered machine's.
    pub fn hold_made<F: FleetMut + ?Sized>(
        &mut self,
        ledgers: &mut F,
        made: &[(K, &str, TenantWants<'_>)],
    ) {
        for (key, node, wants) in made {
            if self.bought.iter().any(|(_, _, uid)| uid == wants.uid) {
                continue;
            }
            let Some(ledger) = ledgers.find(node) else {
                continue;
            };
            let view = ledger.view();
            if !view.takes_new_tenants() || !ledger.matches(wants.node_selector) {
                continue;
            }
            let free = view.free();
            let part = Resources::from_fn(|d| wants.footprint.get(d).min(free.get(d)));
            if part == Resources::ZERO {
                continue;
            }
            hold(
                ledgers,
                Edit {
                    kind: EditKind::Reserve,
                    node: (*node).to_owned(),
                    uid: wants.uid.to_owned(),
                    entry: Some(Entry {
                        uid: wants.uid.into(),
                        tenant: wants.tenant.into(),
                        resources: part,
                        replicas: None,
                    }),
                },
            );
            self.holds = self.holds.saturating_add(1);
            self.bought
                .push((key.clone(), (*node).to_owned(), wants.uid.to_owned()));
        }
    }

    /// Drops the room held on delivered machines for the tenants `lifted` names.
    fn lift_bought<F: FleetMut + ?Sized>(
        &mut self,
        ledgers: &mut F,
        lifted: impl Fn(&K, &str) -> bool,
    ) {
        let mut kept = Vec::with_capacity(self.bought.len());
        for (key, node, uid) in std::mem::take(&mut self.bought) {
            if lifted(&key, &uid) {
                ledgers.unhold(&node, &uid);
            } else {
                kept.push((key, node, uid));
            }
        }
        self.bought = kept;
    }

    /// Whether room has been held for an older waiting tenant so far in this batch.
    pub fn holds_placed(&self) -> bool {
        self.holds > 0
    }

    /// The StrictFIFO head: the oldest tenant seen so far that fits nowhere.
    pub fn head(&self) -> Option<&str> {
        self.head.as_deref()
    }

    /// The plan for a batch tenant created at `key` (batch tenants come oldest first). Room
    /// for older waiting tenants is held in `ledgers` first; a first placement behind a
    /// StrictFIFO head is [`Plan::Queued`]. Call again after applying an edit, as with
    /// [`plan_tenant_with`](crate::plan::plan_tenant_with).
    pub fn plan<F: FleetMut + ?Sized>(
        &mut self,
        key: &K,
        policy: Policy,
        wants: &TenantWants<'_>,
        ledgers: &mut F,
        turn: u64,
    ) -> Plan {
        let holders = holders_of(wants.uid, ledgers.ledgers());
        self.plan_held_by(key, policy, wants, ledgers, &holders, turn)
    }

    /// [`plan`](Self::plan) for a caller that indexes which ledgers hold which UID (see
    /// [`plan_tenant_held_by`]). Holds never change `holders`: they are not entries.
    pub fn plan_held_by<F: FleetMut + ?Sized>(
        &mut self,
        key: &K,
        policy: Policy,
        wants: &TenantWants<'_>,
        ledgers: &mut F,
        holders: &[usize],
        turn: u64,
    ) -> Plan {
        let holds_nothing = !holders
            .iter()
            .filter_map(|&i| ledgers.ledgers().get(i))
            .any(|l| l.entry_of(wants.uid).is_some());
        // Its own held room is its to take.
        if !self.bought.is_empty() {
            self.lift_bought(ledgers, |_, uid| uid == wants.uid);
        }
        // A lost entry goes back first: its room is the tenant's own, neither held for older
        // tenants nor behind a StrictFIFO head.
        if holds_nothing && let Some(restore) = plan_restore(wants, &*ledgers) {
            return restore;
        }
        self.hold_older(key, policy, ledgers, turn);
        if let Some(head) = &self.head
            && holds_nothing
            && !wants.suspend
            && head != wants.tenant
        {
            return Plan::Queued {
                behind: head.clone(),
            };
        }
        let mut plan = plan_tenant_held_by(policy, wants, &*ledgers, holders, turn);
        // Under StrictFIFO a first placement that fits nowhere becomes the head, and every
        // younger one waits behind it, those a machine was bought for too: it takes the room
        // held for younger tenants rather than wait for good. So does a move off a draining node
        // that cannot be made: the younger tenants may wait behind a head for good, and their
        // held room with them.
        let strict = self.mode == QueueMode::StrictFifo;
        let first_in_strict = strict && holds_nothing && !wants.suspend;
        let stuck = match plan {
            Plan::Pending(_) => first_in_strict,
            Plan::MoveBlocked { .. } => strict,
            _ => false,
        };
        if stuck && self.bought.iter().any(|(held_for, _, _)| held_for > key) {
            self.lift_bought(ledgers, |held_for, _| held_for > key);
            plan = plan_tenant_held_by(policy, wants, &*ledgers, holders, turn);
        }
        if matches!(plan, Plan::Pending(_)) {
            self.note_unplaceable(wants.tenant);
        }
        plan
    }

    /// Before a batch tenant created at `key` that is decided by other rules (a spread
    /// tenant): room is held for every older waiting tenant, as for any tenant; under
    /// StrictFIFO, a first placement (`holds_nothing`, not `suspend`ed) answers the head it waits
    /// behind.
    #[allow(clippy::too_many_arguments)]
    pub fn turn_of<F: FleetMut + ?Sized>(
        &mut self,
        key: &K,
        policy: Policy,
        tenant: &str,
        holds_nothing: bool,
        suspend: bool,
        ledgers: &mut F,
        turn: u64,
    ) -> Option<Plan> {
        self.hold_older(key, policy, ledgers, turn);
        let head = self.head.as_ref().filter(|head| *head != tenant)?;
        (holds_nothing && !suspend).then(|| Plan::Queued {
            behind: head.clone(),
        })
    }

    /// A first placement decided by other rules fits nowhere: under StrictFIFO it is the head
    /// (if there is none yet).
    pub fn unplaceable(&mut self, tenant: &str) {
        self.note_unplaceable(tenant);
    }

    fn note_unplaceable(&mut self, tenant: &str) {
        if self.mode == QueueMode::StrictFifo && self.head.is_none() {
            self.head = Some(tenant.to_owned());
        }
    }

    /// Holds room for each waiting tenant older than `key` not considered yet: the whole
    /// footprint where a first placement would go, or the growth on its own node for a resize
    /// that fits there now. A suspended waiter holds nothing (it asks for nothing until resumed).
    fn hold_older<F: FleetMut + ?Sized>(
        &mut self,
        key: &K,
        policy: Policy,
        ledgers: &mut F,
        turn: u64,
    ) {
        while let Some((older, wants, holder)) = self.waiting.get(self.considered) {
            if older >= key {
                return;
            }
            self.considered = self.considered.saturating_add(1);
            // Suspended: it asks for nothing. Bought for: its room is held already.
            if wants.suspend || self.bought.iter().any(|(_, _, uid)| uid == wants.uid) {
                continue;
            }
            let (wants, holder) = (*wants, *holder);
            // Where it holds its entry: as the caller knows it, else the node its status names
            // (a lookup by name, not a scan of every entry); the others hold nothing.
            let own = holder
                .or_else(|| wants.status_node.and_then(|name| ledgers.position(name)))
                .filter(|&i| {
                    ledgers
                        .ledgers()
                        .get(i)
                        .is_some_and(|l| l.entry_of(wants.uid).is_some())
                });
            // Behind a StrictFIFO head nobody younger is placed for the first time, so a newcomer
            // needs no room held; younger resizes go on, so a resize still does.
            if self.head.is_some() && own.is_none() {
                continue;
            }
            let most_free = *self.most_free.get_or_insert_with(|| ledgers.most_free());
            // A BestEffortFIFO newcomer that fits nowhere changes nothing: no plan needed. (In
            // StrictFIFO the plan makes it the head.)
            if own.is_none()
                && self.mode == QueueMode::BestEffortFifo
                && !wants.footprint.fits_within(&most_free)
            {
                continue;
            }
            let holders: Vec<usize> = own.into_iter().collect();
            match plan_tenant_held_by(policy, &wants, &*ledgers, &holders, turn) {
                Plan::Edit(edit) if edit.kind == EditKind::Reserve => {
                    hold(ledgers, edit);
                    self.holds = self.holds.saturating_add(1);
                }
                Plan::Edit(edit) if edit.kind == EditKind::Resize => {
                    // Only the growth: the old footprint is already its entry.
                    let held = own
                        .and_then(|i| ledgers.ledgers().get(i))
                        .and_then(|l| l.entry_of(wants.uid))
                        .map_or(Resources::ZERO, |e| e.resources);
                    let growth = edit
                        .entry
                        .as_ref()
                        .map(|e| e.resources.saturating_sub(held));
                    if let Some(growth) = growth.filter(|g| *g != Resources::ZERO) {
                        let entry = edit.entry.map(|e| Entry {
                            resources: growth,
                            ..e
                        });
                        hold(ledgers, Edit { entry, ..edit });
                        self.holds = self.holds.saturating_add(1);
                    }
                }
                Plan::Pending(_) => self.note_unplaceable(wants.tenant),
                _ => {}
            }
        }
    }
}

/// Holds the room `edit` would reserve, in its ledger's holds (never in its entries).
fn hold<F: FleetMut + ?Sized>(ledgers: &mut F, edit: Edit) {
    let Some(entry) = edit.entry else { return };
    // The plan said it fits, so the sum stays in range; if not, nothing is held.
    let _ = ledgers.hold(&edit.node, entry);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A node of `threads` threads (100 GB, 100 GB) on the crate's one builder, holding `held`
    /// (uid, threads) with 1 GB and 1 GB each.
    fn node(name: &str, threads: u64, held: &[(&str, u64)]) -> crate::NodeLedger {
        let node = crate::testing::ledger(name).capacity(threads, 100, 100);
        held.iter()
            .fold(node, |node, (uid, t)| node.holding(uid, (*t, 1, 1)))
            .build()
    }

    fn wants(uid: &str, threads: u64) -> TenantWants<'_> {
        crate::testing::wants(uid, (threads, 1, 1))
    }

    #[test]
    fn a_waiter_that_already_holds_its_footprint_holds_nothing_more() {
        // n1: 8 threads, "placed" (older, still in the room) holds its 6 there: 2 free; n2: 6
        // free. Known to hold at n1, it holds nothing more: the younger (6) gets n2. Taken for a
        // newcomer instead, 6 would be held for it on n2 and the younger would wait.
        let ledgers = vec![node("n1", 8, &[("placed", 6)]), node("n2", 6, &[])];
        let mut queue = FifoQueue::with_holders(
            QueueMode::BestEffortFifo,
            vec![(1, wants("placed", 6), Some(0))],
        );
        let mut view = ledgers.clone();
        let plan = queue.plan(&2, Policy::FirstFit, &wants("young", 6), &mut view, 0);
        assert!(
            matches!(plan, Plan::Edit(ref e) if e.node == "n2"),
            "{plan:?}"
        );
        assert!(!queue.holds_placed());
    }

    #[test]
    fn an_older_waiting_tenant_that_fits_keeps_its_room_from_a_younger_one() {
        // 8 threads free; big (older, 6) waits outside the batch; small (younger, 4) is decided.
        let mut ledgers = vec![node("n1", 8, &[])];
        for mode in QueueMode::ALL {
            let mut queue = FifoQueue::new(mode, vec![(1, wants("big", 6))]);
            let plan = queue.plan(
                &2,
                Policy::FirstFit,
                &wants("small", 4),
                &mut ledgers.clone(),
                0,
            );
            assert!(matches!(plan, Plan::Pending(_)), "{mode}: {plan:?}");
        }
        // Without the older waiter, small fits.
        let mut queue = FifoQueue::new(QueueMode::BestEffortFifo, vec![]);
        let plan = queue.plan(&2, Policy::FirstFit, &wants("small", 4), &mut ledgers, 0);
        assert!(
            matches!(plan, Plan::Edit(ref e) if e.kind == EditKind::Reserve),
            "{plan:?}"
        );
    }

    #[test]
    fn room_is_held_for_an_older_waiter_only_on_a_node_carrying_its_selectors_labels() {
        // n1 (plain) comes first by name; only n2 carries region=eu. The older waiter (6,
        // region=eu) is held 6 on n2, so the younger (6, any node) takes n1: were the hold put
        // where first fit alone would, on n1, the younger would take n2 from under it.
        let ledgers = vec![
            node("n1", 8, &[]),
            crate::testing::ledger("n2")
                .capacity(8, 100, 100)
                .label("region", "eu")
                .build(),
        ];
        let selector = crate::testing::labels(&[("region", "eu")]);
        let older = TenantWants {
            node_selector: Some(&selector),
            ..wants("older", 6)
        };
        let mut queue = FifoQueue::new(QueueMode::BestEffortFifo, vec![(1, older)]);
        let mut view = ledgers.clone();
        let plan = queue.plan(&2, Policy::FirstFit, &wants("young", 6), &mut view, 0);
        assert!(
            matches!(plan, Plan::Edit(ref e) if e.node == "n1"),
            "{plan:?}"
        );
        let held: Vec<&str> = view[1].holds().iter().map(|e| &*e.uid).collect();
        assert_eq!(held, ["older"]);
    }

    #[test]
    fn best_effort_lets_a_younger_tenant_pass_an_older_one_that_fits_nowhere_strict_does_not() {
        // 4 threads free: huge (older, 6) fits nowhere; small (younger, 2) fits.
        let ledgers = vec![node("n1", 8, &[("filler", 4)])];
        let mut queue = FifoQueue::new(QueueMode::BestEffortFifo, vec![(1, wants("huge", 6))]);
        let plan = queue.plan(
            &2,
            Policy::FirstFit,
            &wants("small", 2),
            &mut ledgers.clone(),
            0,
        );
        assert!(matches!(plan, Plan::Edit(_)), "{plan:?}");

        let mut queue = FifoQueue::new(QueueMode::StrictFifo, vec![(1, wants("huge", 6))]);
        let plan = queue.plan(
            &2,
            Policy::FirstFit,
            &wants("small", 2),
            &mut ledgers.clone(),
            0,
        );
        assert_eq!(
            plan,
            Plan::Queued {
                behind: "huge".into()
            }
        );
        assert_eq!(queue.head(), Some("huge"));
    }

    #[test]
    fn strict_lets_a_tenant_that_already_holds_room_resize() {
        let mut ledgers = vec![node("n1", 8, &[("filler", 4), ("acme", 1)])];
        let mut queue = FifoQueue::new(QueueMode::StrictFifo, vec![(1, wants("huge", 6))]);
        let plan = queue.plan(&2, Policy::FirstFit, &wants("acme", 2), &mut ledgers, 0);
        assert!(
            matches!(plan, Plan::Edit(ref e) if e.kind == EditKind::Resize),
            "{plan:?}"
        );
    }

    #[test]
    fn holds_are_kept_apart_from_entries_and_younger_waiters_hold_nothing() {
        let mut ledgers = vec![node("n1", 8, &[])];
        let mut queue = FifoQueue::new(
            QueueMode::BestEffortFifo,
            vec![(1, wants("a", 2)), (3, wants("c", 2))],
        );
        let plan = queue.plan(&2, Policy::FirstFit, &wants("b", 2), &mut ledgers, 0);
        assert!(matches!(plan, Plan::Edit(_)));
        let held: Vec<&str> = ledgers[0].holds().iter().map(|e| &*e.uid).collect();
        assert_eq!(held, ["a"], "only the older waiter holds room");
        let written: Vec<&str> = ledgers[0].entries().iter().map(|e| &*e.uid).collect();
        assert_eq!(written, Vec::<&str>::new(), "a hold is never an entry");
        assert!(queue.holds_placed());
        assert_eq!("StrictFIFO".parse(), Ok(QueueMode::StrictFifo));
        assert_eq!(QueueMode::BestEffortFifo.to_string(), "BestEffortFIFO");
        let unknown = "strict".parse::<QueueMode>().unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "unknown queue mode \"strict\": expected BestEffortFIFO or StrictFIFO"
        );
    }

    /// Decides `order` one after another on `ledgers` (each placement applied), with `bought`
    /// held first; returns where each went ("" when it did not fit).
    fn decide_all(
        policy: Policy,
        ledgers: &mut Vec<crate::NodeLedger>,
        mode: QueueMode,
        bought: &[(u32, &str, TenantWants<'_>)],
        order: &[(u32, TenantWants<'_>)],
    ) -> Vec<String> {
        let mut queue: FifoQueue<'_, u32> = FifoQueue::new(mode, Vec::new());
        queue.hold_bought(ledgers, bought);
        order
            .iter()
            .map(
                |(key, wants)| match queue.plan(key, policy, wants, ledgers, 0) {
                    Plan::Edit(edit) => {
                        let node = edit.node.clone();
                        let at = ledgers.iter().position(|l| l.name() == node).unwrap();
                        ledgers[at].apply(&edit).unwrap();
                        node
                    }
                    _ => String::new(),
                },
            )
            .collect()
    }

    #[test]
    fn delivered_machines_are_taken_by_the_tenants_they_were_bought_for_whatever_the_policy() {
        // m1 (64) was bought for a (30) and b (30), m2 (64) for c (40) and d (20). LeastLoaded
        // alone spreads a and b over both machines, and then c fits on neither.
        let tenants = [
            wants("a", 30),
            wants("b", 30),
            wants("c", 40),
            wants("d", 20),
        ];
        let order: Vec<(u32, TenantWants<'_>)> = (1..).zip(tenants).collect();
        let machines = vec![node("m1", 64, &[]), node("m2", 64, &[])];
        let best_effort = QueueMode::BestEffortFifo;
        let spread = decide_all(
            Policy::LeastLoaded,
            &mut machines.clone(),
            best_effort,
            &[],
            &order,
        );
        assert_eq!(spread, ["m1", "m2", "", "m1"], "without holds");
        let bought = [
            (1, "m1", tenants[0]),
            (2, "m1", tenants[1]),
            (3, "m2", tenants[2]),
            (4, "m2", tenants[3]),
        ];
        for policy in Policy::ALL {
            let mut ledgers = machines.clone();
            let placed = decide_all(policy, &mut ledgers, best_effort, &bought, &order);
            assert_eq!(placed, ["m1", "m1", "m2", "m2"], "{policy}");
            assert!(ledgers.iter().all(|l| l.holds().is_empty()), "{policy}");
        }
    }

    #[test]
    fn room_bought_for_a_tenant_is_kept_from_older_and_younger_ones() {
        // m1 (16) was bought for "mine" (12, created at 5); "older" (12, at 1) and "younger"
        // (12, at 9) are decided around it and find it taken. Then "mine" takes it.
        let mine = wants("mine", 12);
        let order = [
            (1, wants("older", 12)),
            (5, mine),
            (9, wants("younger", 12)),
        ];
        // Under StrictFIFO older would be the head and mine would wait behind it for good: the
        // queue serves older first, on the room bought for mine.
        for (mode, placed) in [
            (QueueMode::BestEffortFifo, ["", "m1", ""]),
            (QueueMode::StrictFifo, ["m1", "", ""]),
        ] {
            let mut ledgers = vec![node("m1", 16, &[])];
            let bought = [(5, "m1", mine)];
            let got = decide_all(Policy::FirstFit, &mut ledgers, mode, &bought, &order);
            assert_eq!(got, placed, "{mode}");
        }
        // Bought for a tenant it cannot hold now (the machine came smaller): nothing is held.
        let mut small = vec![node("m1", 8, &[])];
        let mut queue: FifoQueue<'_, u32> = FifoQueue::new(QueueMode::BestEffortFifo, Vec::new());
        queue.hold_bought(&mut small, &[(5, "m1", mine)]);
        assert!(small[0].holds().is_empty() && !queue.holds_placed());
        // An older waiter outside the batch that the machine was bought for holds its room
        // there once, not again where the policy would put it.
        let mut ledgers = vec![node("m0", 16, &[]), node("m1", 16, &[])];
        let mut queue = FifoQueue::new(QueueMode::BestEffortFifo, vec![(5, mine)]);
        queue.hold_bought(&mut ledgers, &[(5, "m1", mine)]);
        let plan = queue.plan(&9, Policy::FirstFit, &wants("younger", 12), &mut ledgers, 0);
        assert!(
            matches!(plan, Plan::Edit(ref e) if e.node == "m0"),
            "{plan:?}"
        );
        assert_eq!(ledgers[1].holds().len(), 1);
        assert!(ledgers[0].holds().is_empty());
    }

    #[test]
    fn room_being_made_is_held_for_its_waiter_as_far_as_it_is_free_until_it_is_decided() {
        // a: 8 threads, 4 taken (a mover still there): 4 of w's 6 are held for it, so x (4)
        // finds no room on a; w, decided, takes it once the rest is free.
        let mut ledgers = vec![node("a", 8, &[("mover", 4)])];
        let mut queue: FifoQueue<'_, u32> = FifoQueue::new(QueueMode::BestEffortFifo, Vec::new());
        let w = wants("w", 6);
        queue.hold_made(&mut ledgers, &[(9, "a", w)]);
        assert_eq!(ledgers[0].allocated().threads, 8);
        let x = wants("x", 4);
        let plan = queue.plan(&1, Policy::FirstFit, &x, &mut ledgers, 0);
        assert!(matches!(plan, Plan::Pending(_)), "{plan:?}");
        ledgers[0] = node("a", 8, &[]);
        queue.hold_made(&mut ledgers, &[(9, "a", w)]);
        let plan = queue.plan(&9, Policy::FirstFit, &w, &mut ledgers, 0);
        assert!(matches!(&plan, Plan::Edit(e) if e.node == "a"), "{plan:?}");
    }

    #[test]
    fn under_strict_fifo_an_older_blocked_move_takes_room_held_for_a_younger_bought_tenant() {
        use crate::fit::NodeState;
        // s drains and holds old's 6; m (8) was bought for young (4): 4 held, 4 left, so old's
        // move fits only if it takes young's room. StrictFIFO: it does; BestEffortFIFO: young
        // is placed soon, so old waits.
        for (mode, moves) in [
            (QueueMode::StrictFifo, true),
            (QueueMode::BestEffortFifo, false),
        ] {
            let mut ledgers = vec![
                node("m", 8, &[]),
                crate::testing::ledger("s")
                    .capacity(8, 100, 100)
                    .state(NodeState::Draining)
                    .holding("old", (6, 1, 1))
                    .build(),
            ];
            let mut queue: FifoQueue<'_, u32> = FifoQueue::new(mode, Vec::new());
            queue.hold_bought(&mut ledgers, &[(9, "m", wants("young", 4))]);
            let old = TenantWants {
                status_node: Some("s"),
                ..wants("old", 6)
            };
            let plan = queue.plan(&1, Policy::FirstFit, &old, &mut ledgers, 0);
            let moved =
                matches!(&plan, Plan::Edit(e) if e.kind == EditKind::Migrate && e.node == "m");
            assert_eq!(moved, moves, "{mode}: {plan:?}");
        }
    }
}
