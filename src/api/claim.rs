//! A tenant's claim: what its status says it holds, and whether a node's entry backs it (the
//! node's entry is the truth; docs/design.md, rule 10).

use std::ops::Deref;
use std::sync::Arc;

use super::amounts::ResourceAmounts;
use super::node::Node;
use super::tenant::{Tenant, TenantPhase};

/// What one tenant's status says it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub uid: Box<str>,
    /// `status.nodeName`; empty when the status names no node. Shared by every claim on the
    /// node (the index's own name for it).
    pub node: Arc<str>,
    pub reserved: ResourceAmounts,
    pub phase: TenantPhase,
    /// The node a move the status records goes to (`status.migration.to`): it holds an entry of
    /// the UID too while the move is in flight.
    pub moving_to: Option<Arc<str>>,
    /// A spread tenant's nodes after `node` (its status's placements but the first): each holds
    /// an entry of the UID too. Empty for any other tenant.
    pub spread_to: Box<[Arc<str>]>,
}

/// A spread tenant's nodes after the one its status names first (`nodeName`), as claims list
/// them (shared, as node names are).
pub fn spread_to(
    node_name: &str,
    placements: &[super::tenant::SpreadPlacement],
) -> Box<[Arc<str>]> {
    placements
        .iter()
        .filter(|p| p.node != node_name)
        .map(|p| Arc::from(p.node.as_str()))
        .collect()
}

impl Claim {
    /// The claim of a tenant's current status (`None` without a UID).
    pub fn of(tenant: &Tenant) -> Option<Claim> {
        let status = tenant.status.as_ref();
        Some(Claim {
            uid: tenant.metadata.uid.as_deref()?.into(),
            node: status.map_or("", |s| s.node_name.as_str()).into(),
            reserved: status.map(|s| s.reserved).unwrap_or_default(),
            phase: status.map(|s| s.phase).unwrap_or_default(),
            moving_to: status
                .and_then(|s| s.migration.as_ref())
                .map(|m| Arc::from(m.to.as_str())),
            spread_to: status
                .map(|s| spread_to(&s.node_name, &s.placements))
                .unwrap_or_default(),
        })
    }

    /// The nodes this claim names: its status's node, then the node a recorded move goes to.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<str>> {
        std::iter::once(&self.node)
            .chain(self.moving_to.as_ref())
            .chain(self.spread_to.iter())
            .filter(|n| !n.is_empty())
    }

    /// Whether the nodes this claim names back it (`node` looks one up as the engine sees it;
    /// `None` when there is no such node): the status's node holds an entry of the UID with
    /// exactly the amounts shown, and the node a recorded move goes to holds one too. A move
    /// recorded where only one entry is left (rolled back or finished without its status
    /// written, or a status another actor wrote) is not backed.
    pub fn backed_by<N: Deref<Target = Node>>(&self, node: impl Fn(&str) -> Option<N>) -> bool {
        if self.node.is_empty() {
            let holds_something = matches!(
                self.phase,
                TenantPhase::Active | TenantPhase::Resizing | TenantPhase::Migrating
            );
            return !holds_something && self.moving_to.is_none();
        }
        if !self.spread_to.is_empty() {
            // Every node listed holds an entry; together they hold what the status shows.
            let held = std::iter::once(&self.node)
                .chain(self.spread_to.iter())
                .try_fold(placement::Resources::ZERO, |sum, name| {
                    let entry = node(name)?
                        .entry_of(&self.uid)?
                        .resources
                        .to_resources()
                        .ok()?;
                    sum.checked_add(entry)
                });
            return held.is_some() && held == self.reserved.to_resources().ok();
        }
        let entry = |name: &str, amounts: Option<&ResourceAmounts>| {
            node(name).is_some_and(|n| {
                n.entry_of(&self.uid)
                    .is_some_and(|a| amounts.is_none_or(|r| a.resources == *r))
            })
        };
        entry(&self.node, Some(&self.reserved))
            && self.moving_to.as_deref().is_none_or(|to| entry(to, None))
    }
}
