//! The waiting room: tenants waiting for room (PendingCapacity or Resizing), and the trigger that
//! re-queues them as soon as a node could take them.
//!
//! Rules enforced here (DESIGN.md, allocation protocol point 6):
//! - a tenant enters before its decision reads the node view, so a node change is either in the
//!   view its decision reads, or is seen after it entered and triggers it: no change is missed;
//! - node changes are judged from the node cache the writer decides from, in the node reconcile,
//!   so a triggered tenant's next decision sees the room that triggered it;
//! - a node change triggers a waiting tenant only when that node, as it is now, could take it:
//!   the same plan the writer would make, run on that node alone, says Reserve or Resize. Judging
//!   the current state, not the delta, means coalesced events lose nothing;
//! - triggering sends a reconcile request and nothing else; deciding stays with the writer.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use futures::channel::mpsc;
use kube::runtime::reflector::ObjectRef;
use placement::{EditKind, Plan, Resources, TenantWants, plan_tenant};

use crate::api::{Node, Tenant};

/// What a waiting tenant needs.
#[derive(Clone, Debug)]
struct Waiter {
    uid: String,
    footprint: Resources,
}

/// Waiting tenants and the channel that re-queues them.
#[derive(Debug)]
pub struct WaitingRoom {
    waiting: Mutex<HashMap<ObjectRef<Tenant>, Waiter>>,
    trigger: mpsc::UnboundedSender<ObjectRef<Tenant>>,
}

impl WaitingRoom {
    /// The room and the stream of tenants to reconcile (for `Controller::reconcile_on`).
    pub fn new() -> (WaitingRoom, mpsc::UnboundedReceiver<ObjectRef<Tenant>>) {
        let (trigger, requests) = mpsc::unbounded();
        (
            WaitingRoom {
                waiting: Mutex::default(),
                trigger,
            },
            requests,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<Tenant>, Waiter>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a tenant before its decision; it stays until it [`leave`](Self::leave)s.
    pub fn enter(&self, tenant: ObjectRef<Tenant>, uid: &str, footprint: Resources) {
        self.lock().insert(
            tenant,
            Waiter {
                uid: uid.to_owned(),
                footprint,
            },
        );
    }

    pub fn leave(&self, tenant: &ObjectRef<Tenant>) {
        self.lock().remove(tenant);
    }

    /// How many tenants wait.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Re-queues one tenant now, waiting or not.
    pub fn wake(&self, tenant: ObjectRef<Tenant>) {
        // A closed channel means the controller is stopping; nothing to wake.
        let _ = self.trigger.unbounded_send(tenant);
    }

    /// Re-queues every waiting tenant this node could take now. Returns how many.
    pub fn node_changed(&self, node: &Node) -> usize {
        let Ok(ledger) = super::writer::ledger_of(node) else {
            return 0;
        };
        let ledgers = std::slice::from_ref(&ledger);
        let mut triggered = 0usize;
        for (tenant, waiter) in self.lock().iter() {
            let wants = TenantWants {
                uid: &waiter.uid,
                tenant: &waiter.uid,
                footprint: waiter.footprint,
                suspend: false,
                status_node: None,
            };
            let could_take = matches!(
                plan_tenant(&wants, ledgers),
                Plan::Edit(edit) if matches!(edit.kind, EditKind::Reserve | EditKind::Resize)
            );
            // A closed channel means the controller is stopping; nothing to wake.
            if could_take && self.trigger.unbounded_send(tenant.clone()).is_ok() {
                triggered = triggered.saturating_add(1);
            }
        }
        triggered
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::api::{AllocationEntry, NodeSpec, NodeState, NodeStatus, ResourceAmounts};

    fn node(state: NodeState, capacity: ResourceAmounts, held: &[(&str, ResourceAmounts)]) -> Node {
        let mut node = Node::new(
            "n",
            NodeSpec {
                capacity,
                state,
                overcommit: None,
            },
        );
        let allocations = held
            .iter()
            .map(|(uid, r)| AllocationEntry {
                tenant: format!("d/{uid}"),
                uid: (*uid).into(),
                resources: *r,
            })
            .collect();
        node.status = Some(NodeStatus {
            allocations,
            ..NodeStatus::default()
        });
        node
    }

    fn tenant(name: &str) -> ObjectRef<Tenant> {
        ObjectRef::new(name).within("default")
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
        room.enter(tenant("small"), "small", Resources::new(4, 4, 4));
        room.enter(tenant("big"), "big", Resources::new(100, 4, 4));
        // free = 8 - 2 = 6 threads: small (4) fits, big (100) does not.
        assert_eq!(
            room.node_changed(&node(
                NodeState::Online,
                ResourceAmounts::new(8, 8, 8),
                &[("x", ResourceAmounts::new(2, 2, 2))]
            )),
            1
        );
        assert_eq!(drain(&mut requests), ["small"]);
        // Cordoned takes no new tenants.
        assert_eq!(
            room.node_changed(&node(
                NodeState::Cordoned,
                ResourceAmounts::new(8, 8, 8),
                &[]
            )),
            0
        );
        room.leave(&tenant("small"));
        assert_eq!(
            room.node_changed(&node(NodeState::Online, ResourceAmounts::new(8, 8, 8), &[])),
            0
        );
        assert_eq!(room.len(), 1);
    }

    #[test]
    fn a_resizing_tenant_is_woken_when_its_own_node_has_room_counting_its_entry() {
        let (room, mut requests) = WaitingRoom::new();
        room.enter(tenant("acme"), "acme", Resources::new(4, 8, 40));
        // others hold 61 threads, acme 2: room = 64 - 61 = 3 < 4.
        let tight = node(
            NodeState::Online,
            ResourceAmounts::new(64, 256, 8000),
            &[
                ("acme", ResourceAmounts::new(2, 4, 20)),
                ("o", ResourceAmounts::new(61, 1, 1)),
            ],
        );
        assert_eq!(room.node_changed(&tight), 0);
        // others hold 60: room = 4, enough.
        let roomy = node(
            NodeState::Online,
            ResourceAmounts::new(64, 256, 8000),
            &[
                ("acme", ResourceAmounts::new(2, 4, 20)),
                ("o", ResourceAmounts::new(60, 1, 1)),
            ],
        );
        assert_eq!(room.node_changed(&roomy), 1);
        assert_eq!(drain(&mut requests), ["acme"]);
    }
}
