//! A spread tenant planned step by step over random small fleets, each edit applied as the
//! engine would write it, with other tenants taking room between steps now and then: no edit
//! ever over-commits a node, the steps end (no plan undoes its own edit while nothing else
//! changes), and they end all or none: every replica reserved (one per node, zones within one),
//! nothing held (never placed whole), or exactly what was held when last placed whole (save an
//! entry whose old size no longer fits).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeMap;

use placement::{
    EditKind, NodeState, NodeView, Resources, Spread, SpreadPlan, SpreadWants, ZonedNode,
    plan_spread,
};
use proptest::prelude::*;

const ZONES: [&str; 3] = ["fsn1", "hel1", "nbg1"];

#[derive(Clone, Debug)]
struct Node {
    name: String,
    zone: &'static str,
    state: NodeState,
    capacity: u64,
    /// Held by others.
    others: u64,
    /// Held by the tenant.
    own: Option<u64>,
}

impl Node {
    fn zoned(&self) -> ZonedNode<'_> {
        ZonedNode {
            view: NodeView {
                name: &self.name,
                state: self.state,
                capacity: Resources::new(self.capacity, 0, 0),
                allocated: Resources::new(self.others + self.own.unwrap_or(0), 0, 0),
            },
            zone: Some(self.zone),
            held: self.own.map(|t| Resources::new(t, 0, 0)),
        }
    }
}

fn fleet() -> impl Strategy<Value = Vec<Node>> {
    prop::collection::vec(
        (
            0..3usize,
            prop_oneof![8 => Just(NodeState::Online), 1 => Just(NodeState::Draining)],
            4..=8u64,
            0..=6u64,
            prop_oneof![3 => Just(None), 1 => (1..=3u64).prop_map(Some)],
        ),
        1..=6,
    )
    .prop_map(|parts| {
        parts
            .into_iter()
            .enumerate()
            .map(|(i, (zone, state, capacity, others, own))| Node {
                name: format!("n{i}"),
                zone: ZONES[zone],
                state,
                capacity,
                others: others.min(capacity),
                own: own.filter(|o| others.min(capacity) + o <= capacity),
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn steps_never_over_commit_and_end_all_or_none(
        mut fleet in fleet(),
        replicas in 1..=4u32,
        threads in 1..=3u64,
        placed_before in any::<bool>(),
        // At which steps another tenant takes a node's free room.
        interference in prop::collection::vec((0..12usize, 0..6usize), 0..3),
    ) {
        let was: BTreeMap<String, Resources> = fleet
            .iter()
            .filter_map(|n| Some((n.name.clone(), Resources::new(n.own?, 0, 0))))
            .collect();
        let placed_before = placed_before && !was.is_empty();
        let wants = SpreadWants {
            uid: "u",
            tenant: "d/t",
            spread: Spread::Zones,
            replicas,
            footprint: Resources::new(threads, 0, 0),
            was: placed_before.then_some(&was),
        };
        let mut last = None;
        for step in 0..40 {
            for (at, node) in &interference {
                if *at == step
                    && let Some(n) = fleet.get_mut(*node)
                {
                    n.others = n.capacity - n.own.unwrap_or(0);
                }
            }
            let nodes: Vec<ZonedNode<'_>> = fleet.iter().map(Node::zoned).collect();
            let plan = plan_spread(&wants, &nodes);
            let SpreadPlan::Edit(edit) = plan else {
                last = Some(plan.clone().map_nodes());
                break;
            };
            let node = fleet.iter_mut().find(|n| n.name == edit.node).unwrap();
            let new = edit.entry.as_ref().map(|e| e.resources.threads);
            if let Some(size) = new {
                prop_assert!(
                    node.others + size <= node.capacity,
                    "{:?} over-commits {}: {} others + {size} > {}", edit.kind, node.name, node.others, node.capacity
                );
            }
            if edit.kind == EditKind::Reserve {
                prop_assert!(node.own.is_none(), "a second entry on {}", node.name);
            }
            node.own = new;
        }
        let Some(end) = last else {
            return Err(TestCaseError::fail(format!("no end after 40 steps: {fleet:?}")));
        };
        let held: BTreeMap<&str, u64> =
            fleet.iter().filter_map(|n| Some((n.name.as_str(), n.own?))).collect();
        match end {
            End::Holding(nodes) => {
                prop_assert_eq!(nodes.len(), replicas as usize);
                prop_assert_eq!(held.len(), replicas as usize);
                prop_assert!(held.values().all(|t| *t == threads));
                let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
                for n in fleet.iter().filter(|n| n.state == NodeState::Online || n.own.is_some()) {
                    per_zone.entry(n.zone).or_default();
                }
                for n in fleet.iter().filter(|n| n.own.is_some()) {
                    *per_zone.entry(n.zone).or_default() += 1;
                }
                let (most, least) = (per_zone.values().max().unwrap(), per_zone.values().min().unwrap());
                prop_assert!(most - least <= 1, "zones {per_zone:?}");
            }
            End::Pending => {
                prop_assert!(!placed_before);
                prop_assert!(held.is_empty(), "pending while holding {held:?}");
            }
            End::Blocked => {
                prop_assert!(placed_before);
                prop_assert_eq!(
                    held.keys().copied().collect::<Vec<_>>(),
                    was.keys().map(String::as_str).collect::<Vec<_>>()
                );
            }
        }
    }
}

/// How the steps ended, owning what it names.
enum End {
    Holding(Vec<String>),
    Pending,
    Blocked,
}

trait MapNodes {
    fn map_nodes(self) -> End;
}

impl MapNodes for SpreadPlan<'_> {
    fn map_nodes(self) -> End {
        match self {
            SpreadPlan::Holding(replicas) => {
                End::Holding(replicas.iter().map(|r| r.node.to_owned()).collect())
            }
            SpreadPlan::Pending(_) => End::Pending,
            SpreadPlan::Blocked(_) => End::Blocked,
            SpreadPlan::Edit(_) => unreachable!("an edit is not an end"),
        }
    }
}
