//! A tenant's claim: what its status says it holds, and whether a node's entry backs it (the
//! node's entry is the truth; docs/design.md, rule 10).

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
        })
    }

    /// Whether `node` (the node this claim names, as the engine sees it; `None` when there is no
    /// such node) backs the claim.
    pub fn backed_by(&self, node: Option<&Node>) -> bool {
        if self.node.is_empty() {
            return !matches!(self.phase, TenantPhase::Active | TenantPhase::Resizing);
        }
        node.and_then(|n| n.status.as_ref()).is_some_and(|status| {
            status
                .allocations
                .iter()
                .any(|a| *a.uid == *self.uid && a.resources == self.reserved)
        })
    }
}
