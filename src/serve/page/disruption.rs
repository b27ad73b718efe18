//! What the page shows of consolidation and make-room: the nodes being emptied to go back and
//! what they cost a month, the nodes the plan could free that are kept and why, what was saved,
//! and the room being made for waiting tenants. Pure, from the watch caches and what the
//! capacity tick's looks remember.
//!
//! Rules enforced here:
//! - a node is being consolidated while it is `Draining` with the consolidating mark (the record
//!   consolidation keeps on the Node); its cost is its class's `monthlyCost` (its class label),
//!   unknown when the class is not in the cache;
//! - a kept node is one the last look reported blocked and that is not being consolidated;
//! - every list is in name order (waiters by `namespace/name`); sums saturate.

use std::collections::HashMap;
use std::sync::Arc;

use kube::ResourceExt;
use serde::Serialize;

use crate::api::{CONSOLIDATING_ANNOTATION, NODE_CLASS_LABEL, Node, NodeClass, NodeState};
use crate::controller::ConsolidationSnapshot as Snapshot;
use crate::controller::state::room::Order;

/// Consolidation and make-room, as `/api/fleet` answers them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionView {
    /// Nodes being emptied by consolidation, to be handed back.
    pub consolidating: Vec<ConsolidatingNode>,
    /// The monthly cost of the nodes being consolidated (known costs only).
    pub saving_monthly: u64,
    /// The monthly cost of the nodes consolidation handed back since this replica led.
    pub saved_monthly: u64,
    /// Nodes the plan could free that are not being emptied, and why.
    pub kept: Vec<KeptNode>,
    /// Room being made for waiting tenants by moving smaller ones.
    pub rooms: Vec<RoomView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsolidatingNode {
    pub node: String,
    /// Tenants still on it.
    pub tenants: usize,
    /// Its class's monthly cost; null when unknown.
    pub monthly_cost: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptNode {
    pub node: String,
    /// The reason as Events and the metric name it (`BudgetExhausted`, …).
    pub reason: &'static str,
    /// Why, in words.
    pub why: &'static str,
    /// How long the plan has been able to free it, in seconds.
    pub freeable_seconds: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoomView {
    /// The waiting tenant, `namespace/name`.
    pub waiter: String,
    /// The node the room is made on.
    pub node: String,
    pub moves: Vec<RoomMove>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoomMove {
    pub tenant: String,
    pub to: String,
}

/// The view of these nodes and classes, and of what the looks remember (`None`: node requests
/// are off, nothing is remembered).
pub fn disruption(
    nodes: &[Arc<Node>],
    classes: &[Arc<NodeClass>],
    snapshot: Option<&Snapshot>,
    orders: &[Order],
) -> DisruptionView {
    let cost: HashMap<String, u64> = classes
        .iter()
        .filter_map(|c| Some((c.name_any(), u64::try_from(c.spec.monthly_cost?).ok()?)))
        .collect();
    let mut consolidating: Vec<ConsolidatingNode> = nodes
        .iter()
        .filter(|n| {
            n.spec.state == NodeState::Draining
                && n.annotations().contains_key(CONSOLIDATING_ANNOTATION)
        })
        .map(|n| ConsolidatingNode {
            node: n.name_any(),
            tenants: n.allocations().len(),
            monthly_cost: n
                .labels()
                .get(NODE_CLASS_LABEL)
                .and_then(|class| cost.get(class))
                .copied(),
        })
        .collect();
    consolidating.sort_by(|a, b| a.node.cmp(&b.node));
    let saving_monthly = consolidating
        .iter()
        .filter_map(|c| c.monthly_cost)
        .fold(0u64, u64::saturating_add);
    let kept = snapshot
        .map(|s| {
            s.kept
                .iter()
                .filter(|(node, _, _)| !consolidating.iter().any(|c| &c.node == node))
                .map(|(node, why, secs)| KeptNode {
                    node: node.clone(),
                    reason: why.reason(),
                    why: why.words(),
                    freeable_seconds: *secs,
                })
                .collect()
        })
        .unwrap_or_default();
    let mut rooms: Vec<RoomView> = orders
        .iter()
        .map(|o| {
            let mut moves: Vec<RoomMove> = o
                .moves
                .iter()
                .map(|m| RoomMove {
                    tenant: m.tenant.clone(),
                    to: m.to.clone(),
                })
                .collect();
            moves.sort_by(|a, b| a.tenant.cmp(&b.tenant));
            RoomView {
                waiter: o.waiter.clone(),
                node: o.host.clone(),
                moves,
            }
        })
        .collect();
    rooms.sort_by(|a, b| a.waiter.cmp(&b.waiter));
    DisruptionView {
        consolidating,
        saving_monthly,
        saved_monthly: snapshot.map_or(0, |s| s.saved),
        kept,
        rooms,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::controller::consolidation::Blocked;
    use crate::testing::node;

    fn class(name: &str, cost: i64) -> Arc<NodeClass> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "placement.tenant-placer.dev/v1alpha1", "kind": "NodeClass",
                "metadata": {"name": name},
                "spec": {"capacity": {"threads": 8, "memoryGb": 8, "storageGb": 8},
                         "provider": "lab/x", "monthlyCost": cost}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn what_is_consolidated_what_it_costs_what_is_kept_and_why_and_the_room_made() {
        let marked = |name: &str, class: &str| {
            let mut n = node(name)
                .capacity(8, 8, 8)
                .state(NodeState::Draining)
                .label(NODE_CLASS_LABEL, class)
                .holding("t", (1, 1, 1))
                .build();
            n.metadata.annotations =
                Some([(CONSOLIDATING_ANNOTATION.to_owned(), "now".to_owned())].into());
            Arc::new(n)
        };
        let nodes = vec![
            marked("m2", "big"),
            marked("m1", "small"),
            marked("m3", "gone"),
            // A person's drain: no mark, not consolidation's.
            Arc::new(node("p").state(NodeState::Draining).build()),
        ];
        let classes = [class("small", 100), class("big", 250)];
        let snapshot = Snapshot {
            kept: vec![
                ("k1".into(), Blocked::Budget, 40),
                ("m1".into(), Blocked::Young, 1),
            ],
            saved: 300,
        };
        let order =
            crate::controller::state::room::order("d/w", "a", &[("d/y", "c"), ("d/x", "c")]);
        let view = disruption(&nodes, &classes, Some(&snapshot), &[order]);
        let costs: Vec<(&str, Option<u64>, usize)> = view
            .consolidating
            .iter()
            .map(|c| (c.node.as_str(), c.monthly_cost, c.tenants))
            .collect();
        assert_eq!(
            costs,
            [("m1", Some(100), 1), ("m2", Some(250), 1), ("m3", None, 1)]
        );
        assert_eq!((view.saving_monthly, view.saved_monthly), (350, 300));
        // m1 is being consolidated: not kept.
        assert_eq!(
            view.kept,
            [KeptNode {
                node: "k1".into(),
                reason: "BudgetExhausted",
                why: "the disruption budget is in use",
                freeable_seconds: 40,
            }]
        );
        let moved: Vec<&str> = view.rooms[0]
            .moves
            .iter()
            .map(|m| m.tenant.as_str())
            .collect();
        assert_eq!(
            (view.rooms[0].node.as_str(), moved),
            ("a", vec!["d/x", "d/y"])
        );
        // Node requests off: nothing remembered, only what the Nodes say.
        let off = disruption(&nodes, &[], None, &[]);
        assert_eq!(
            (off.kept.len(), off.saved_monthly, off.consolidating.len()),
            (0, 0, 3)
        );
    }
}
