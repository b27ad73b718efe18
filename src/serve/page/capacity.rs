//! What the page shows of the capacity tick: the machines of each class by use and the Nodes
//! labelled for a request that is not theirs; the nodes being emptied to go back and what they
//! cost a month, the nodes the plan could free that are kept and why, what was saved, and the
//! room being made for waiting tenants. Pure, from the watch caches and the view the last tick
//! published (`state::tick`): never from a loop's memory.
//!
//! Rules enforced here:
//! - a node is being consolidated while it is `Draining` with the consolidating mark (the record
//!   consolidation keeps on the Node); its cost is its class's `monthlyCost` (its class label),
//!   unknown when the class is not in the cache;
//! - a kept node is one the last tick reported blocked and that is not being consolidated;
//! - every list is in name order (waiters by `namespace/name`); sums saturate.

use std::collections::HashMap;
use std::sync::Arc;

use kube::ResourceExt;
use serde::Serialize;

use crate::api::ResourceAmounts;
use crate::api::{CONSOLIDATING_ANNOTATION, NODE_CLASS_LABEL, Node, NodeClass, NodeState};
use crate::controller::state::tick::{ClassMachines, TickView};

/// Consolidation and make-room, as `/api/fleet` answers them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityView {
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
    /// The machines of each class by use, as the last tick judged them.
    pub machines: Vec<MachinesView>,
    /// Nodes labelled as made for a request that does not own them: never handed back for it.
    pub strays: Vec<StrayView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MachinesView {
    pub class: String,
    pub awaited: u32,
    pub in_use: u32,
    pub idle: u32,
    pub orphaned: u32,
    /// What its Nodes deliver when less than the class promises; null otherwise.
    pub delivers_less: Option<ResourceAmounts>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StrayView {
    pub node: String,
    pub labelled_for: String,
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

/// The view of these nodes and classes, and of the last tick's view (`None`: node requests are
/// off, or no tick has run yet).
pub fn of(
    nodes: &[Arc<Node>],
    classes: &[Arc<NodeClass>],
    tick: Option<&TickView>,
) -> CapacityView {
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
    let kept = tick
        .map(|t| {
            t.kept
                .iter()
                .filter(|k| !consolidating.iter().any(|c| c.node == k.node))
                .map(|k| KeptNode {
                    node: k.node.clone(),
                    reason: k.reason,
                    why: k.why,
                    freeable_seconds: k.freeable_seconds,
                })
                .collect()
        })
        .unwrap_or_default();
    let orders = tick.map(|t| t.orders.as_slice()).unwrap_or_default();
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
    CapacityView {
        consolidating,
        saving_monthly,
        saved_monthly: tick.map_or(0, |t| t.saved_monthly),
        kept,
        rooms,
        machines: tick
            .map(|t| t.machines.iter().map(machines).collect())
            .unwrap_or_default(),
        strays: tick
            .map(|t| {
                t.strays
                    .iter()
                    .map(|s| StrayView {
                        node: s.node.clone(),
                        labelled_for: s.labelled_for.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fn machines(line: &ClassMachines) -> MachinesView {
    MachinesView {
        class: line.class.clone(),
        awaited: line.awaited,
        in_use: line.in_use,
        idle: line.idle,
        orphaned: line.orphaned,
        delivers_less: line.delivers_less.map(ResourceAmounts::from),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::controller::state::tick::{KeptNode as Kept, StrayNode};
    use crate::testing::node;

    fn class(name: &str, cost: i64) -> Arc<NodeClass> {
        Arc::new(crate::testing::node_class(name, 8, Some(cost)))
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
        let kept = |node: &str, reason, why, secs| Kept {
            node: node.into(),
            reason,
            why,
            freeable_seconds: secs,
        };
        let tick = TickView {
            kept: vec![
                kept(
                    "k1",
                    "BudgetExhausted",
                    "the disruption budget is in use",
                    40,
                ),
                kept("m1", "TooYoung", "young", 1),
            ],
            saved_monthly: 300,
            orders: vec![crate::controller::state::orders::order(
                "d/w",
                "a",
                &[("d/y", "c"), ("d/x", "c")],
            )],
            machines: vec![ClassMachines {
                class: "small".into(),
                in_use: 2,
                idle: 1,
                delivers_less: Some(placement::Resources::new(7, 8, 8)),
                ..ClassMachines::default()
            }],
            strays: vec![StrayNode {
                node: "copy".into(),
                labelled_for: "small-x".into(),
            }],
        };
        let view = of(&nodes, &classes, Some(&tick));
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
        assert_eq!(
            view.machines,
            [MachinesView {
                class: "small".into(),
                awaited: 0,
                in_use: 2,
                idle: 1,
                orphaned: 0,
                delivers_less: Some(placement::Resources::new(7, 8, 8).into()),
            }]
        );
        assert_eq!(
            (
                view.strays[0].node.as_str(),
                view.strays[0].labelled_for.as_str()
            ),
            ("copy", "small-x")
        );
        // Node requests off: no tick, only what the Nodes say.
        let off = of(&nodes, &[], None);
        assert_eq!(
            (off.kept.len(), off.saved_monthly, off.consolidating.len()),
            (0, 0, 3)
        );
    }
}
