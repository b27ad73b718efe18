//! A tenant's wants, owned: what waits in the engine's queue and in the waiting room.
//! `placement::TenantWants` borrows them for one decision.
//!
//! Rules enforced here: a tenant that cannot leave a draining node waits for room for what it
//! holds (its status's `reserved`), any other for its footprint; a tenant without a UID, or
//! whose spec cannot be used, wants nothing; an empty node selector is no selector.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use placement::{Labels, Migration, Resources, TenantWants};

use super::tenant::{PlacedReason, Tenant, TenantPhase};

/// A tenant's wants and its place in the queue (older first, then by `namespace/name`). The
/// name and the selector are shared: wants are cloned for each retry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wants {
    pub uid: String,
    /// `namespace/name`
    pub tenant: Arc<str>,
    pub footprint: Resources,
    pub suspend: bool,
    /// The node its status names: where a `Resizing` tenant holds its entry and grows.
    pub status_node: Option<String>,
    /// The move its status records: (from, to).
    pub migration: Option<(String, String)>,
    /// A move asked of it to make room for a waiting tenant: (from, to). Boxed: rare, and a
    /// decision waiting in the engine's queue carries its wants.
    pub asked: Option<Box<(String, String)>>,
    /// Its node selector (`None`: any node).
    pub node_selector: Option<Arc<Labels>>,
    /// The tenant's creationTimestamp: older tenants are decided first.
    pub created: Option<Timestamp>,
}

impl Wants {
    /// These borrowed wants, owned, for a tenant created at `created`.
    pub fn of(wants: &TenantWants<'_>, created: Option<Timestamp>) -> Wants {
        Wants {
            uid: wants.uid.to_owned(),
            tenant: Arc::from(wants.tenant),
            footprint: wants.footprint,
            suspend: wants.suspend,
            status_node: wants.status_node.map(str::to_owned),
            migration: wants
                .migration
                .map(|m| (m.from.to_owned(), m.to.to_owned())),
            asked: wants
                .asked
                .map(|m| Box::new((m.from.to_owned(), m.to.to_owned()))),
            node_selector: wants
                .node_selector
                .filter(|s| !s.is_empty())
                .map(|s| Arc::new(s.clone())),
            created,
        }
    }

    /// What a decision reads.
    pub fn borrowed(&self) -> TenantWants<'_> {
        TenantWants {
            uid: &self.uid,
            tenant: &self.tenant,
            footprint: self.footprint,
            suspend: self.suspend,
            status_node: self.status_node.as_deref(),
            migration: self
                .migration
                .as_ref()
                .map(|(from, to)| Migration { from, to }),
            asked: self
                .asked
                .as_deref()
                .map(|(from, to)| Migration { from, to }),
            node_selector: self.node_selector.as_deref(),
        }
    }

    /// The queue order: older first, then by `namespace/name`.
    pub fn queue_key(&self) -> (Option<Timestamp>, &str) {
        (self.created, &self.tenant)
    }
}

impl Tenant {
    /// What this tenant waits for, as its spec and status say (no move: a waiting tenant is not
    /// moving); `None` without a UID or with a spec that cannot be used (it asks for nothing).
    pub fn waiting_wants(&self) -> Option<Wants> {
        // A tenant that cannot leave a draining node waits for room for what it holds.
        let footprint = if self.is_blocked_move() {
            self.status.as_ref()?.reserved.to_resources().ok()?
        } else {
            self.spec.footprint().ok()?
        };
        Some(Wants {
            uid: self.metadata.uid.clone()?,
            tenant: Arc::from(self.key()),
            footprint,
            suspend: self.spec.suspend,
            status_node: self
                .status
                .as_ref()
                .map(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            migration: None,
            asked: None,
            node_selector: self.spec.selector().map(|s| Arc::new(s.clone())),
            created: self.metadata.creation_timestamp.as_ref().map(|t| t.0),
        })
    }

    /// Whether its status says it waits for room (what a restart rebuilds the waiting room from).
    pub fn is_waiting(&self) -> bool {
        self.metadata.deletion_timestamp.is_none()
            && (self.is_blocked_move()
                || self.status.as_ref().is_some_and(|s| {
                    matches!(
                        s.phase,
                        TenantPhase::PendingCapacity | TenantPhase::Resizing
                    )
                }))
    }

    /// Whether its status says it holds room on a draining node that no other node can take now
    /// (it is woken like any waiting tenant when a node could).
    pub fn is_blocked_move(&self) -> bool {
        self.placed_reason() == Some(PlacedReason::MigrationBlocked)
    }
}
