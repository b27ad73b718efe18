//! A tenant's wants, owned: what waits in the engine's queue and in the waiting room.
//! `placement::TenantWants` borrows them for one decision.
//!
//! Rules enforced here: a tenant that cannot leave a draining node waits for room for what it
//! holds (its status's `reserved`), any other for its footprint; a tenant without a UID, or
//! whose spec cannot be used, wants nothing; an empty node selector is no selector.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use placement::{Labels, Migration, Resources, TenantWants};

use super::tenant::{PlacedReason, Tenant, TenantMode, TenantPhase};

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
    /// How its replicas are spread, when they are (boxed: rare); its `footprint` is then one
    /// replica's, the room one node must have for it.
    pub spread: Option<Box<SpreadAsk>>,
}

/// What a spread tenant asks (`placement::plan_spread` decides it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpreadAsk {
    pub spread: placement::Spread,
    pub replicas: u32,
    /// One replica's footprint.
    pub replica: Resources,
    /// What it held, by node, when its status last said it held its whole footprint (a spread
    /// tenant's placements, or the one node of a tenant not spread before); `None`: never. A
    /// change it cannot make goes back to exactly this.
    pub was: Option<BTreeMap<String, Resources>>,
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
            spread: None,
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

    /// These wants with how they spread: a spread tenant's footprint is one replica's.
    pub fn spread(mut self, ask: Option<SpreadAsk>) -> Wants {
        if let Some(ask) = ask {
            self.footprint = ask.replica;
            self.spread = Some(Box::new(ask));
        }
        self
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
        Some(
            Wants {
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
                spread: None,
            }
            .spread(self.spread_ask()),
        )
    }

    /// What it asks of spread, when its replicas are spread (`spec.spread` other than `None`, in
    /// `Cluster` mode); `None` for any other tenant, or a spec that cannot be used.
    pub fn spread_ask(&self) -> Option<SpreadAsk> {
        let spread = self.spec.spread.as_placement();
        if spread == placement::Spread::None || self.spec.mode != TenantMode::Cluster {
            return None;
        }
        let replicas = u32::try_from(self.spec.effective_replicas()).ok()?;
        let replica = self.spec.resources.to_resources().ok()?;
        Some(SpreadAsk {
            spread,
            replicas,
            replica,
            was: self.held_whole(),
        })
    }

    /// What its status says it holds, by node, when it says it holds its whole footprint.
    fn held_whole(&self) -> Option<BTreeMap<String, Resources>> {
        let status = self.status.as_ref()?;
        let holds = matches!(
            status.phase,
            TenantPhase::Active | TenantPhase::Resizing | TenantPhase::Suspended
        );
        if !holds || status.node_name.is_empty() || status.migration.is_some() {
            return None;
        }
        let reserved = status.reserved.to_resources().ok()?;
        if status.placements.is_empty() {
            return Some(BTreeMap::from([(status.node_name.clone(), reserved)]));
        }
        // Each placement holds its share of the total: per replica x its replicas.
        let replicas: u64 = status
            .placements
            .iter()
            .map(|p| u64::from(p.replicas))
            .sum();
        let per_replica = reserved.checked_div(replicas)?;
        status
            .placements
            .iter()
            .map(|p| {
                Some((
                    p.node.clone(),
                    per_replica.checked_mul(u64::from(p.replicas))?,
                ))
            })
            .collect()
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
