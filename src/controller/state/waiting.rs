//! The waiting room: tenants waiting for room (PendingCapacity, Resizing, or held on a draining
//! node that no other node can take yet: `MigrationBlocked`), and the passes
//! that re-queue them, oldest first, as soon as a node could take them (run by
//! `controller::wake`).
//!
//! Rules enforced here (docs/design.md, rule 6 and "The queue"):
//! - a tenant enters before its decision reads the node view, so a node change is either in the
//!   view its decision reads, or is seen after it entered and triggers it: no change is missed;
//! - node changes are recorded, and one pass per requeue window (at most) judges the changed
//!   nodes as the engine sees them now, so a burst of capacity events costs one pass, and a
//!   triggered tenant's next decision sees the room that triggered it;
//! - a node triggers a waiting tenant only when that node, as it is now, could take it: the same
//!   plan the engine would make, run on that node alone, says Reserve or Resize (so a node that
//!   lacks the labels of the tenant's node selector never wakes it, and one given them does). Judging the
//!   current state, not the delta, means coalesced events lose nothing;
//! - a pass wakes tenants oldest first (creationTimestamp, then namespace/name); the engine
//!   holds room for older waiting tenants (see `placement::queue`), so the order of reconciles
//!   cannot let a younger tenant take it;
//! - a tenant that leaves without taking room (deleted, suspended, unusable spec) or comes back
//!   asking something else (room may have been held for what it asked before), and in
//!   StrictFIFO any tenant that leaves, may unblock others anywhere: the next pass looks at
//!   every node;
//! - a tenant left waiting by a decision that held room for older tenants looks again after five
//!   requeue windows: the older tenant may take other room, or none, and then no node change
//!   would wake the younger one (see `tenant::reconcile`);
//! - a tenant whose status says it waits but that does not wait here (another controller decided
//!   it, and this one saw only the status) is woken once: its decision enters it, so that it is
//!   not left waiting with nobody to wake it (see `controller::tenant_events`);
//! - triggering sends a reconcile request and nothing else; deciding stays with the engine.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use futures::channel::mpsc;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use placement::{EditKind, NodeLedger, Plan, QueueMode, TenantWants, plan_tenant};
use tokio::sync::Notify;

use crate::api::{Tenant, Wants};

/// Nodes changed since the last pass.
#[derive(Debug, Default)]
struct Changed {
    nodes: HashSet<String>,
    /// Look at every node (a waiter left without taking room).
    all: bool,
}

/// Waiting tenants and the channel that re-queues them.
#[derive(Debug)]
pub struct WaitingRoom {
    /// By tenant UID: a tenant deleted and re-created under its name is another waiter.
    waiting: Mutex<HashMap<String, (ObjectRef<Tenant>, Wants)>>,
    changed: Mutex<Changed>,
    pass_due: Notify,
    mode: QueueMode,
    trigger: mpsc::UnboundedSender<ObjectRef<Tenant>>,
}

impl WaitingRoom {
    /// The room and the stream of tenants to reconcile (fed to the tenant runner).
    pub fn new() -> (WaitingRoom, mpsc::UnboundedReceiver<ObjectRef<Tenant>>) {
        Self::with_mode(QueueMode::default())
    }

    /// [`new`](Self::new) for this queue mode.
    pub fn with_mode(mode: QueueMode) -> (WaitingRoom, mpsc::UnboundedReceiver<ObjectRef<Tenant>>) {
        let (trigger, requests) = mpsc::unbounded();
        (
            WaitingRoom {
                waiting: Mutex::default(),
                changed: Mutex::default(),
                pass_due: Notify::new(),
                mode,
                trigger,
            },
            requests,
        )
    }

    pub fn mode(&self) -> QueueMode {
        self.mode
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (ObjectRef<Tenant>, Wants)>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_changed(&self) -> std::sync::MutexGuard<'_, Changed> {
        self.changed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a tenant before its decision; it stays until it leaves.
    pub fn enter(&self, tenant: ObjectRef<Tenant>, waiter: Wants) {
        let before = self
            .lock()
            .insert(waiter.uid.clone(), (tenant, waiter.clone()));
        // Room held for what it asked before may now go unused: younger tenants that found
        // it held must look again.
        if before
            .is_some_and(|(_, b)| b.footprint != waiter.footprint || b.suspend != waiter.suspend)
        {
            self.everything_changed();
        }
    }

    /// Whether this tenant (by UID) waits here.
    pub fn holds(&self, uid: &str) -> bool {
        self.lock().contains_key(uid)
    }

    /// The tenant is at rest with what it wanted (placed, or holding its footprint).
    pub fn leave(&self, uid: &str) {
        let left = self.lock().remove(uid).is_some();
        if left && self.mode == QueueMode::StrictFifo {
            self.everything_changed();
        }
    }

    /// The tenant stops waiting without taking room (deleted, suspended, unusable spec): room
    /// held for it, or a StrictFIFO queue behind it, may be free for others on any node.
    pub fn withdraw(&self, uid: &str) {
        if self.lock().remove(uid).is_some() {
            self.everything_changed();
        }
    }

    /// Drops the waiters whose tenant (by UID) is no longer in the cache: deleted while the
    /// watch was down. They can hold no room for others any more.
    pub fn retain_present(&self, tenants: &super::TenantCache) {
        let gone: Vec<String> = self
            .lock()
            .iter()
            .filter(|(uid, (tenant, _))| {
                tenants
                    .get(tenant)
                    .is_none_or(|t| t.metadata.uid.as_deref() != Some(uid.as_str()))
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &gone {
            self.withdraw(uid);
        }
    }

    /// Enters every tenant whose status says it waits (PendingCapacity or Resizing), from the
    /// cache: at start-up and on gaining the lease, before the engine decides its first batch,
    /// so that room is held for the oldest whatever order their reconciles come in. Returns how
    /// many wait.
    pub fn rebuild_from(&self, tenants: &super::TenantCache) -> usize {
        for tenant in tenants.state() {
            if tenant.is_waiting()
                && let Some(waiter) = tenant.waiting_wants()
            {
                self.enter(ObjectRef::from_obj(tenant.as_ref()), waiter);
            }
        }
        self.len()
    }

    fn everything_changed(&self) {
        self.lock_changed().all = true;
        self.pass_due.notify_one();
    }

    /// How many tenants wait.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The waiting tenants older than `key` in queue order (for the engine's queue).
    pub fn waiters_before(&self, key: (Option<Timestamp>, &str)) -> Vec<Wants> {
        self.lock()
            .values()
            .filter(|(_, w)| w.queue_key() < key)
            .map(|(_, w)| w.clone())
            .collect()
    }

    /// The waiting tenants whose key (namespace/name) is `named`, in no order.
    pub fn waiters_named(&self, named: impl Fn(&str) -> bool) -> Vec<Wants> {
        self.lock()
            .values()
            .filter(|(_, w)| named(&w.tenant))
            .map(|(_, w)| w.clone())
            .collect()
    }

    /// Re-queues one tenant now, waiting or not.
    pub fn wake(&self, tenant: ObjectRef<Tenant>) {
        // A closed channel means the controller is stopping; nothing to wake.
        let _ = self.trigger.unbounded_send(tenant);
    }

    /// Records that a node changed; the next pass judges it.
    pub fn node_changed(&self, node: &str) {
        self.lock_changed().nodes.insert(node.to_owned());
        self.pass_due.notify_one();
    }

    /// Asks for a pass (e.g. to check claims) without recording a node change.
    pub fn poke(&self) {
        self.pass_due.notify_one();
    }

    /// Waits until a pass is due and takes what changed: the node names, or `None` for all.
    pub async fn next_changes(&self) -> Option<HashSet<String>> {
        self.pass_due.notified().await;
        let mut changed = self.lock_changed();
        let taken = std::mem::take(&mut *changed);
        (!taken.all).then_some(taken.nodes)
    }

    /// Re-queues, oldest first, every waiting tenant one of these nodes could take now.
    /// Returns how many.
    pub fn pass(&self, nodes: &[NodeLedger]) -> usize {
        let mut waiting: Vec<(ObjectRef<Tenant>, Wants)> = self.lock().values().cloned().collect();
        waiting.sort_by(|a, b| a.1.queue_key().cmp(&b.1.queue_key()));
        let mut triggered = 0usize;
        for (tenant, waiter) in waiting {
            let wants = TenantWants {
                suspend: false,
                ..waiter.borrowed()
            };
            let could_take = nodes.iter().any(|node| {
                matches!(
                    plan_tenant(&wants, std::slice::from_ref(node)),
                    Plan::Edit(edit) if matches!(edit.kind, EditKind::Reserve | EditKind::Resize)
                )
            });
            // A closed channel means the controller is stopping; nothing to wake.
            if could_take && self.trigger.unbounded_send(tenant).is_ok() {
                triggered = triggered.saturating_add(1);
            }
        }
        triggered
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use placement::Resources;

    use super::*;
    use crate::api::{Node, NodeState};
    use crate::testing::{self, node};

    fn tenant(name: &str) -> ObjectRef<Tenant> {
        ObjectRef::new(name).within("default")
    }

    /// Tenant `default/{name}` (UID `uid-{name}`, as the fixtures' entries name it) waiting.
    fn waiter(name: &str, footprint: Resources, created_second: i64) -> Wants {
        Wants {
            uid: format!("uid-{name}"),
            tenant: format!("default/{name}").into(),
            footprint,
            suspend: false,
            created: Some(Timestamp::from_second(created_second).unwrap()),
            status_node: None,
            migration: None,
            asked: None,
            node_selector: None,
            spread: None,
        }
    }

    fn changed(room: &WaitingRoom, node: &Node) -> usize {
        room.pass(&[node.ledger().unwrap()])
    }

    fn drain(requests: &mut mpsc::UnboundedReceiver<ObjectRef<Tenant>>) -> Vec<String> {
        let mut names = Vec::new();
        while let Ok(r) = requests.try_recv() {
            names.push(r.name);
        }
        names.sort();
        names
    }

    #[test]
    fn a_node_wakes_exactly_the_waiting_tenants_it_could_take_now() {
        let (room, mut requests) = WaitingRoom::new();
        room.enter(tenant("small"), waiter("small", Resources::new(4, 4, 4), 0));
        room.enter(tenant("big"), waiter("big", Resources::new(100, 4, 4), 0));
        // free = 8 - 2 = 6 threads: small (4) fits, big (100) does not.
        assert_eq!(
            changed(
                &room,
                &node("n").capacity(8, 8, 8).holding("x", (2, 2, 2)).build()
            ),
            1
        );
        assert_eq!(drain(&mut requests), ["small"]);
        // Cordoned takes no new tenants.
        assert_eq!(
            changed(
                &room,
                &node("n")
                    .state(NodeState::Cordoned)
                    .capacity(8, 8, 8)
                    .build()
            ),
            0
        );
        room.withdraw("uid-small");
        assert_eq!(changed(&room, &node("n").capacity(8, 8, 8).build()), 0);
        assert_eq!(room.len(), 1);
    }

    #[test]
    fn a_node_wakes_a_tenant_with_a_node_selector_only_once_it_carries_the_labels() {
        let (room, mut requests) = WaitingRoom::new();
        let eu = crate::testing::tenant("eu")
            .node_selector(&[("region", "eu")])
            .build();
        room.enter(tenant("eu"), eu.waiting_wants().unwrap());
        // Room enough, but no region=eu: not woken.
        assert_eq!(changed(&room, &node("n").capacity(8, 8, 8).build()), 0);
        let labelled = node("n").capacity(8, 8, 8).label("region", "eu").build();
        assert_eq!(changed(&room, &labelled), 1);
        assert_eq!(drain(&mut requests), ["eu"]);
    }

    #[test]
    fn a_resizing_tenant_is_woken_when_its_own_node_has_room_counting_its_entry() {
        let (room, mut requests) = WaitingRoom::new();
        room.enter(tenant("acme"), waiter("acme", Resources::new(4, 8, 40), 0));
        // others hold 61 threads, acme 2: room = 64 - 61 = 3 < 4.
        let tight = node("n")
            .capacity(64, 256, 8000)
            .holding("acme", (2, 4, 20))
            .holding("o", (61, 1, 1))
            .build();
        assert_eq!(changed(&room, &tight), 0);
        // others hold 60: room = 4, enough.
        let roomy = node("n")
            .capacity(64, 256, 8000)
            .holding("acme", (2, 4, 20))
            .holding("o", (60, 1, 1))
            .build();
        assert_eq!(changed(&room, &roomy), 1);
        assert_eq!(drain(&mut requests), ["acme"]);
    }

    #[test]
    fn a_pass_wakes_the_oldest_first_whatever_their_names() {
        let (room, mut requests) = WaitingRoom::new();
        room.enter(
            tenant("a-young"),
            waiter("a-young", Resources::new(1, 1, 1), 300),
        );
        room.enter(
            tenant("z-old"),
            waiter("z-old", Resources::new(1, 1, 1), 100),
        );
        room.enter(
            tenant("m-mid"),
            waiter("m-mid", Resources::new(1, 1, 1), 200),
        );
        let empty = node("n").capacity(8, 8, 8).build();
        assert_eq!(changed(&room, &empty), 3);
        let mut order = Vec::new();
        while let Ok(r) = requests.try_recv() {
            order.push(r.name);
        }
        assert_eq!(order, ["z-old", "m-mid", "a-young"]);
    }

    #[tokio::test]
    async fn changes_between_passes_are_coalesced_and_a_withdrawal_asks_for_every_node() {
        let (room, _requests) = WaitingRoom::new();
        room.node_changed("n1");
        room.node_changed("n2");
        room.node_changed("n1");
        let names = room.next_changes().await.unwrap();
        assert_eq!(names.len(), 2);
        room.enter(tenant("t"), waiter("t", Resources::new(1, 1, 1), 0));
        room.node_changed("n3");
        room.withdraw("uid-t");
        assert_eq!(room.next_changes().await, None, "every node");
        room.enter(tenant("t"), waiter("t", Resources::new(1, 1, 1), 0));
        room.enter(tenant("t"), waiter("t", Resources::new(1, 1, 1), 0));
        room.node_changed("n3");
        assert!(
            room.next_changes().await.is_some(),
            "the same ask again changes nothing"
        );
        room.enter(tenant("t"), waiter("t", Resources::new(9, 1, 1), 0));
        assert_eq!(room.next_changes().await, None, "a new ask: every node");
    }

    #[test]
    fn a_waiter_whose_tenant_is_gone_from_the_cache_is_dropped() {
        let store = super::super::TenantCache::default();
        store.insert(testing::tenant("kept").build());
        let (room, _requests) = WaitingRoom::new();
        room.enter(tenant("kept"), waiter("kept", Resources::new(1, 1, 1), 0));
        room.enter(tenant("gone"), waiter("gone", Resources::new(1, 1, 1), 0));
        room.retain_present(&store);
        let left: Vec<String> = room
            .waiters_before((Some(Timestamp::MAX), "~"))
            .into_iter()
            .map(|w| w.uid)
            .collect();
        assert_eq!(left, ["uid-kept"]);
    }
}
