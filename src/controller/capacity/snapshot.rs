//! What one tick decides from, read once: the NodeClasses and NodeRequests (the pool's), the
//! placement Nodes bought for requests (their newest copies), and the tenants that wait for
//! room a machine could give (one [`Waiter`] type).
//!
//! Rules enforced here: a tenant whose status says it waits but whose entry is already written
//! does not wait (planning for it would buy its room twice); a Node counts as bought only
//! through the request that owns it (`accounts`), never for its label alone.

use super::context::CapacityLoop;
use super::memory::Requested;
use crate::api::{
    NODE_CLASS_LABEL, NODE_REQUEST_LABEL, Node, NodeClass, NodeRequest, NodeRequestPhase,
    PLACED_CONDITION, Tenant, TenantPhase,
};
use crate::controller::consolidation;
use crate::controller::state::Glance;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use placement::{Labels, Resources};
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

/// Everything one tick decides from, read once at its start.
#[derive(Debug)]
pub(super) struct Snapshot {
    /// Every NodeClass (the pool's are those [`Snapshot::pool`] has).
    pub(super) classes: Vec<Arc<NodeClass>>,
    /// Every NodeRequest the cache holds.
    pub(super) requests: Vec<Arc<NodeRequest>>,
    pub(super) pool: Pool,
    /// The pool's requests that are not going and not Failed.
    pub(super) live: Vec<Arc<NodeRequest>>,
    /// The placement Nodes made for requests (they carry the request label), newest copies, by
    /// name.
    pub(super) bought: HashMap<String, Arc<Node>>,
    /// The tenants waiting for room a machine could give, in no order.
    pub(super) waiters: Vec<Waiter>,
    pub(super) now: Timestamp,
}

impl Snapshot {
    pub(super) fn read(
        ctx: &CapacityLoop,
        classes: &Store<NodeClass>,
        requests: &Store<NodeRequest>,
    ) -> Snapshot {
        let classes = classes.state();
        let requests = requests.state();
        let pool = Pool::of(ctx.settings.pool_nodes.as_ref(), &classes);
        let live = requests
            .iter()
            .filter(|r| pool.owns(r))
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .filter(|r| r.phase() != NodeRequestPhase::Failed)
            .cloned()
            .collect();
        let mut bought = HashMap::new();
        for cached in ctx.engine.cache().state() {
            if cached.labels().contains_key(NODE_REQUEST_LABEL) {
                let name = cached.name_any();
                // The newest copy: our own last write may not be in the cache yet.
                let newest = ctx.engine.node(&name).unwrap_or(cached);
                bought.insert(name, newest);
            }
        }
        Snapshot {
            classes,
            requests,
            pool,
            live,
            bought,
            waiters: waiters(ctx),
            now: Timestamp::now(),
        }
    }

    /// Whether the pool has a NodeClass: without one, and with no request live, nothing can be
    /// bought and nothing goes back.
    pub(super) fn has_classes(&self) -> bool {
        self.classes
            .iter()
            .any(|class| self.pool.has_class(&class.name_any()))
    }

    /// The labels a Node of `class` carries (its class label only, once the class is gone).
    pub(super) fn labels_of(&self, class: &str) -> Labels {
        self.classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(class))
            .map(|c| c.node_labels())
            .unwrap_or_else(|| Labels::from([(NODE_CLASS_LABEL.to_owned(), class.to_owned())]))
    }
}

/// The room a request brings that the plan counts: all its capacity while in flight (or Ready
/// before its Node is seen); once its Node is there, the Node's free room while it is Online. A
/// waiting tenant that fits there is placed there by the engine (the plan places the same
/// waiters in the same order); counting it would otherwise buy a machine for a tenant its
/// machine arrived for, in the moment before the engine places it.
pub(super) fn room_of(
    bought: &HashMap<String, Arc<Node>>,
    request: &Requested,
) -> Option<Resources> {
    let Some(node) = request.node.as_deref().and_then(|n| bought.get(n)) else {
        return request.spec.capacity.to_resources().ok();
    };
    let ledger = node.ledger().ok()?;
    // An empty node consolidation drained is taken back into service when a waiter can use it.
    let reclaimable = consolidation::consolidating(node) && node.allocations().is_empty();
    (ledger.state() == placement::NodeState::Online || reclaimable).then(|| {
        ledger
            .effective_capacity()
            .saturating_sub(ledger.allocated())
    })
}

/// The NodeClasses of this controller's pool: `None` when it has no node selector (all are).
#[derive(Debug)]
pub(super) struct Pool(pub(super) Option<HashSet<String>>);

impl Pool {
    pub(super) fn of(
        selector: Option<&crate::api::LabelSelector>,
        classes: &[Arc<NodeClass>],
    ) -> Pool {
        let Some(selector) = selector else {
            return Pool(None);
        };
        let ours = classes
            .iter()
            .filter(|class| selector.matches(&class.node_labels()))
            .map(|class| class.name_any())
            .collect();
        Pool(Some(ours))
    }

    pub(super) fn has_class(&self, class: &str) -> bool {
        self.0.as_ref().is_none_or(|ours| ours.contains(class))
    }

    /// Whether a request is this pool's: its class is.
    pub(super) fn owns(&self, request: &NodeRequest) -> bool {
        self.has_class(&request.spec.node_class)
    }
}

/// A tenant that waits for room, as purchases see it: its wants (`Tenant::waiting_wants`) and
/// what it waits for.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Waiter {
    /// `namespace/name`.
    pub(super) key: String,
    pub(super) uid: String,
    pub(super) created: Option<Timestamp>,
    pub(super) footprint: Resources,
    pub(super) selector: Option<Labels>,
    pub(super) wait: Wait,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Wait {
    /// For its first placement (`PendingCapacity`), since its Placed condition changed.
    First { since: Option<Timestamp> },
    /// To move off a draining node that no other node can take it from now.
    Move,
}

/// The waiter a tenant is, as its status says, with its UID and the node it leaves (a move);
/// `None` when a machine could not take it: deleted, suspended, placed, resizing in place, or
/// with a spec that cannot be used. Pure.
pub(super) fn waiter_of(t: &Tenant) -> Option<(Waiter, Option<String>)> {
    if !Glance::of(t).may_wait() || t.metadata.deletion_timestamp.is_some() || t.spec.suspend {
        return None;
    }
    // A spread tenant needs machines in several zones at once: none is bought for it (yet), and
    // no room is made for it; it waits for room.
    if t.spread_ask().is_some() {
        return None;
    }
    let status = t.status.as_ref()?;
    let wait = if t.is_blocked_move() {
        Wait::Move
    } else if status.phase == TenantPhase::PendingCapacity {
        let since = status
            .conditions
            .iter()
            .find(|c| c.type_ == PLACED_CONDITION)
            .map(|c| c.last_transition_time.0);
        Wait::First { since }
    } else {
        return None;
    };
    let leaving = Some(status.node_name.clone()).filter(|n| !n.is_empty());
    // A move carries the entry as held (a resize is asked for once it has moved): the room it
    // needs is what it holds, whatever its spec asks now (`waiting_wants`).
    let wants = t.waiting_wants()?;
    let waiter = Waiter {
        key: wants.tenant.to_string(),
        uid: wants.uid.clone(),
        created: wants.created,
        footprint: wants.footprint,
        selector: wants.node_selector.as_deref().cloned(),
        wait,
    };
    Some((waiter, leaving))
}

/// The tenants waiting for room that a new machine could take, in no order: those waiting for
/// their first placement and blocked moves. (A `Resizing` tenant grows in place: a new machine
/// cannot take its resize; a suspended one asks for nothing.) A tenant whose status says it waits
/// but whose entry is already written (on any node for a first placement, on a node other than
/// the one it leaves for a move: the engine writes the Node before the tenant's status) does not
/// wait: planning for it in that moment would buy its room twice.
pub(super) fn waiters(ctx: &CapacityLoop) -> Vec<Waiter> {
    // One tenant at a time: a copy of the whole cache would be the controller's largest
    // allocation, at every look.
    let mut waiters: Vec<(Waiter, Option<String>)> = Vec::new();
    ctx.tenants.each_waiting(|t| waiters.extend(waiter_of(t)));
    if waiters.is_empty() {
        return Vec::new();
    }
    // Where the waiters' UIDs are written (only theirs are looked up, not every entry kept).
    // The fleet's fast hasher: every entry of every node is looked up at each look.
    let uids: HashSet<&str, BuildHasherDefault<placement::NameHasher>> =
        waiters.iter().map(|(w, _)| w.uid.as_str()).collect();
    let mut held: HashMap<String, Vec<String>> = HashMap::new();
    for cached in ctx.engine.cache().state() {
        let name = cached.name_any();
        // The newest copy: our own last write may not be in the cache yet.
        let node = ctx.engine.node(&name).unwrap_or(cached);
        for entry in node.allocations() {
            if uids.contains(&*entry.uid) {
                held.entry(entry.uid.to_string())
                    .or_default()
                    .push(name.clone());
            }
        }
    }
    waiters.retain(|(w, leaving)| {
        held.get(&w.uid)
            .is_none_or(|nodes| nodes.iter().all(|n| Some(n) == leaving.as_ref()))
    });
    waiters.into_iter().map(|(waiter, _)| waiter).collect()
}
