//! Conversions between the Node kind and the placement crate: the checked ledger a Node's spec
//! and allocations give, and the status a set of entries gives back.
//!
//! Rules enforced here (docs/design.md, rules 1, 8 and 9):
//! - a ledger is built only from amounts that convert exactly; otherwise the error names the field;
//! - a node being deleted is `Draining` for placement: it takes nothing new and gets nothing back;
//! - a ledger carries the node's labels (metadata.labels), which tenants' node selectors match;
//! - a status is derived from its entries alone (totals recomputed, never incremented), with the
//!   OverCapacity condition and, while the node is being deleted, Drained naming whom it waits for.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use placement::{Entry, NodeLedger};

use super::{
    AllocationEntry, Condition, DRAINED_CONDITION, Node, NodeStatus, OVER_CAPACITY_CONDITION,
};

impl Node {
    /// Its allocation entries (none without a status).
    pub fn allocations(&self) -> &[AllocationEntry] {
        self.status
            .as_ref()
            .map(|s| s.allocations.as_slice())
            .unwrap_or_default()
    }

    /// Its entry of this tenant UID, if it holds one.
    pub fn entry_of(&self, uid: &str) -> Option<&AllocationEntry> {
        self.allocations().iter().find(|a| *a.uid == *uid)
    }

    /// A checked ledger for placement, or which field makes that impossible.
    pub fn ledger(&self) -> Result<NodeLedger, String> {
        let node = self;
        if let Some(why) = node.unreadable_reason() {
            return Err(why.to_owned());
        }
        let capacity = node
            .spec
            .capacity
            .to_resources()
            .map_err(|e| format!("spec.capacity.{e}"))?;
        let entries = node
            .allocations()
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let resources = a
                    .resources
                    .to_resources()
                    .map_err(|e| format!("status.allocations[{i}].resources.{e}"))?;
                Ok(Entry {
                    uid: a.uid.clone(),
                    tenant: a.tenant.clone(),
                    resources,
                    replicas: a.replicas,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let overcommit = node
            .spec
            .overcommit()
            .map_err(|e| format!("spec.overcommit: {e}"))?;
        NodeLedger::new(node.name_any(), node.placement_state(), capacity, entries)
            .map(|ledger| {
                ledger
                    .with_overcommit(overcommit)
                    .with_labels(std::sync::Arc::new(node.labels().clone()))
            })
            .map_err(|e| e.to_string())
    }

    /// The state placement sees: a node being deleted takes nothing new and gets nothing back.
    pub fn placement_state(&self) -> placement::NodeState {
        let node = self;
        if node.metadata.deletion_timestamp.is_some() {
            placement::NodeState::Draining
        } else {
            node.spec.state.into()
        }
    }

    /// The Drained condition of a node being drained (`spec.state: Draining`) or deleted:
    /// whether it still holds tenants, and which. Each tenant's status says why it has not moved
    /// yet (moving, waiting its turn, or no room elsewhere).
    fn drained(&self, entries: &[Entry]) -> Option<(&'static str, &'static str, String)> {
        let node = self;
        if node.placement_state() != placement::NodeState::Draining {
            return None;
        }
        let deleting = node.metadata.deletion_timestamp.is_some();
        let doing = if deleting {
            "being deleted"
        } else {
            "draining"
        };
        if entries.is_empty() {
            let then = if deleting {
                "goes once its finalizer is removed"
            } else {
                "can be taken out of service"
            };
            return Some((
                "True",
                "Empty",
                format!("{doing}; holds no reservations and {then}"),
            ));
        }
        const NAMED: usize = 10;
        let mut names: Vec<&str> = entries.iter().take(NAMED).map(|e| &*e.tenant).collect();
        let more = entries.len().saturating_sub(NAMED);
        if more > 0 {
            names.push("…");
        }
        Some((
            "False",
            "TenantsRemain",
            format!(
                "{doing}; {} tenant(s) remain ({}): each is moved to another node, oldest first, \
                 and its status says why while it stays (moving, waiting its turn, or no room \
                 elsewhere)",
                entries.len(),
                names.join(", ")
            ),
        ))
    }

    /// The status this node should carry for these entries: totals recomputed, OverCapacity
    /// (and while it is draining or being deleted, Drained) set, each condition's transition time kept
    /// while its status stays the same.
    pub fn status_for(
        &self,
        entries: &[Entry],
        capacity: placement::Resources,
        now: &Time,
    ) -> NodeStatus {
        let node = self;
        // NB: entries come from a checked ledger plus at most one checked entry; should their sum
        // still pass the int64 range, the totals saturate rather than wrap.
        let allocated = placement::Resources::checked_sum(entries.iter().map(|e| &e.resources))
            .unwrap_or(placement::Resources::new(u64::MAX, u64::MAX, u64::MAX));
        let free = capacity.saturating_sub(allocated);
        let over: Vec<_> = placement::Dimension::ALL
            .into_iter()
            .filter(|d| allocated.get(*d) > capacity.get(*d))
            .collect();
        let (status, reason, message) = if over.is_empty() {
            (
                "False",
                "WithinCapacity",
                "allocations fit within capacity".to_owned(),
            )
        } else {
            let dims: Vec<String> = over
                .iter()
                .map(|d| {
                    format!(
                        "{d} {} allocated > {} capacity",
                        allocated.get(*d),
                        capacity.get(*d)
                    )
                })
                .collect();
            (
                "True",
                "CapacityLowered",
                format!(
                    "holds more than its capacity ({}); keeps its tenants and takes no new ones",
                    dims.join(", ")
                ),
            )
        };
        let previous = node
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let condition = |type_: &str, status: &str, reason: &str, message: String| {
            Condition::keeping_time(previous, type_, status, reason, message, None, now)
        };
        let mut conditions = vec![condition(OVER_CAPACITY_CONDITION, status, reason, message)];
        if let Some((status, reason, message)) = node.drained(entries) {
            conditions.push(condition(DRAINED_CONDITION, status, reason, message));
        }
        NodeStatus {
            allocations: entries
                .iter()
                .map(|e| AllocationEntry {
                    tenant: e.tenant.clone(),
                    uid: e.uid.clone(),
                    resources: e.resources.into(),
                    replicas: e.replicas,
                })
                .collect(),
            allocated: allocated.into(),
            free: free.into(),
            tenants: i64::try_from(entries.len()).unwrap_or(i64::MAX),
            conditions,
            unreadable: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::api::ResourceAmounts;
    use crate::testing::node;

    fn entry(uid: &str, t: u64) -> Entry {
        placement::testing::entry(uid, (t, 1, 1))
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::now())
    }

    #[test]
    fn totals_are_recomputed_from_the_entries() {
        let node = node("n").capacity(64, 256, 8000).build();
        let capacity = node.spec.capacity.to_resources().unwrap();
        let status = node.status_for(&[entry("a", 2), entry("b", 4)], capacity, &now());
        // 2+4 threads, 1+1 GB, 1+1 GB; free 64-6, 256-2, 8000-2
        assert_eq!(status.allocated, ResourceAmounts::new(6, 2, 2));
        assert_eq!(status.free, ResourceAmounts::new(58, 254, 7998));
        assert_eq!(status.tenants, 2);
        assert_eq!(status.conditions[0].status, "False");
    }

    #[test]
    fn a_node_lowered_below_what_it_holds_keeps_its_entries_and_says_so() {
        let node = node("n").capacity(4, 256, 8000).build();
        let capacity = node.spec.capacity.to_resources().unwrap();
        let status = node.status_for(&[entry("a", 3), entry("b", 3)], capacity, &now());
        assert_eq!(status.allocations.len(), 2);
        assert_eq!(status.free.threads, 0, "free never goes below 0");
        let condition = &status.conditions[0];
        assert_eq!(
            (condition.type_.as_str(), condition.status.as_str()),
            (OVER_CAPACITY_CONDITION, "True")
        );
        assert_eq!(
            condition.message,
            "holds more than its capacity (threads 6 allocated > 4 capacity); keeps its tenants and takes no new ones"
        );
    }

    #[test]
    fn a_ledger_carries_the_nodes_labels_for_node_selectors() {
        let ledger = node("n")
            .capacity(8, 8, 8)
            .label("region", "eu")
            .label("cc", "sev")
            .build()
            .ledger()
            .unwrap();
        let region = placement::testing::labels(&[("region", "eu")]);
        assert!(ledger.matches(Some(&region)));
        let us = placement::testing::labels(&[("region", "us")]);
        assert!(!ledger.matches(Some(&us)));
        // Kept through an edit of its entries.
        let edit = placement::Edit {
            kind: placement::EditKind::Reserve,
            node: "n".into(),
            uid: "a".into(),
            entry: Some(entry("a", 1)),
        };
        assert_eq!(ledger.edited(&edit).unwrap().labels(), ledger.labels());
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let mut node = node("n").capacity(8, 8, 8).build();
        let capacity = node.spec.capacity.to_resources().unwrap();
        let first = node.status_for(&[entry("a", 1)], capacity, &now());
        node.status = Some(first.clone());
        let later = Time(
            k8s_openapi::jiff::Timestamp::from_second(
                first.conditions[0].last_transition_time.0.as_second() + 60,
            )
            .unwrap(),
        );
        let second = node.status_for(&[entry("a", 2)], capacity, &later);
        assert_eq!(
            second.conditions[0].last_transition_time,
            first.conditions[0].last_transition_time
        );
    }
}
