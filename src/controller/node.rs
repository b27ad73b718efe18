//! Node reconcile: keep a Node's derived status true to its allocations and capacity, and wake
//! waiting tenants when room can have appeared.
//!
//! Rules enforced here (DESIGN.md, allocation protocol points 6, 7 and 8):
//! - totals and the OverCapacity condition are rewritten (through the single writer) only when
//!   they differ from what the allocations and capacity give, e.g. after a capacity change;
//! - a node lowered below what it holds keeps every entry and says so in its condition;
//! - an entry whose tenant is gone (confirmed by a direct read, not only the cache) is released;
//! - room can have appeared when a node is first seen, its spec changes (generation), or its free
//!   amount grows in some dimension: then every PendingCapacity and Resizing tenant is re-queued.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};

use super::Context;
use crate::api::{Node, Tenant, TenantPhase};
use crate::error::Error;

/// Reconciles one Node: derived status first, then orphaned entries.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.writer.refresh(&node.name_any()).await?;
    release_orphans(&node, &ctx).await?;
    Ok(Action::requeue(ctx.settings.resync))
}

/// Releases the entries whose tenant is gone: not in the tenant cache, and confirmed by a direct
/// read (absent, or present under another UID, i.e. deleted and re-created). An entry whose
/// tenant cannot be named is left alone and logged: nothing is released unconfirmed.
async fn release_orphans(node: &Node, ctx: &Context) -> Result<(), Error> {
    let Some(status) = &node.status else {
        return Ok(());
    };
    ctx.tenants
        .wait_until_ready()
        .await
        .map_err(|_| Error::CacheClosed)?;
    let cached: HashSet<String> = ctx.tenants.state().iter().filter_map(|t| t.uid()).collect();
    for entry in status
        .allocations
        .iter()
        .filter(|e| !cached.contains(&e.uid))
    {
        let Some((namespace, name)) = entry.tenant.split_once('/') else {
            tracing::error!(node = %node.name_any(), tenant = %entry.tenant, uid = %entry.uid,
                "allocation entry does not name its tenant as namespace/name; left as is");
            continue;
        };
        let api: Api<Tenant> = Api::namespaced(ctx.client.clone(), namespace);
        let alive = match api.get_opt(name).await {
            Ok(found) => found.is_some_and(|t| t.uid().as_deref() == Some(entry.uid.as_str())),
            Err(source) => {
                return Err(Error::ReadTenant {
                    tenant: entry.tenant.clone(),
                    source,
                });
            }
        };
        if !alive {
            tracing::warn!(node = %node.name_any(), tenant = %entry.tenant, uid = %entry.uid, "releasing orphaned entry");
            ctx.writer.release(&entry.uid, &entry.tenant).await?;
        }
    }
    Ok(())
}

/// What a node offered when last seen: enough to tell whether room appeared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Offer {
    generation: Option<i64>,
    free: placement::Resources,
}

fn offer_of(node: &Node) -> Offer {
    let capacity = node.spec.capacity.to_resources().unwrap_or_default();
    // Free from the allocations themselves: the status totals may be stale after a capacity edit.
    let allocated = super::writer::ledger_of(node)
        .map(|l| l.allocated())
        .unwrap_or(capacity);
    Offer {
        generation: node.metadata.generation,
        free: capacity.saturating_sub(allocated),
    }
}

/// Maps Node changes to the tenants that wait for room. Remembers each node's last offer.
#[derive(Clone)]
pub struct RoomWatch {
    tenants: Store<Tenant>,
    seen: Arc<Mutex<HashMap<String, Offer>>>,
}

impl std::fmt::Debug for RoomWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomWatch").finish_non_exhaustive()
    }
}

impl RoomWatch {
    pub fn new(tenants: Store<Tenant>) -> Self {
        RoomWatch {
            tenants,
            seen: Arc::default(),
        }
    }

    /// The waiting tenants to re-evaluate after this node event; empty when no room appeared.
    pub fn waiting_tenants(&self, node: &Node) -> Vec<ObjectRef<Tenant>> {
        let offer = offer_of(node);
        let previous = {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            seen.insert(node.name_any(), offer)
        };
        let room_appeared = match previous {
            None => true,
            Some(before) => {
                before.generation != offer.generation || !offer.free.fits_within(&before.free)
            }
        };
        if !room_appeared {
            return Vec::new();
        }
        self.tenants
            .state()
            .iter()
            .filter(|t| {
                t.status.as_ref().is_some_and(|s| {
                    matches!(
                        s.phase,
                        TenantPhase::PendingCapacity | TenantPhase::Resizing
                    )
                })
            })
            .map(|t| ObjectRef::from_obj(t.as_ref()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use kube::runtime::{reflector, watcher};

    use super::*;
    use crate::api::{
        AllocationEntry, NodeSpec, NodeStatus, ResourceAmounts, TenantMode, TenantSpec,
        TenantStatus,
    };

    fn amounts(t: i64, m: i64, s: i64) -> ResourceAmounts {
        ResourceAmounts {
            threads: t,
            memory_gb: m,
            storage_gb: s,
        }
    }

    fn node(generation: i64, capacity: ResourceAmounts, held: ResourceAmounts) -> Node {
        let mut node = Node::new(
            "n",
            NodeSpec {
                capacity,
                state: crate::api::NodeState::Online,
            },
        );
        node.metadata.generation = Some(generation);
        let entry = AllocationEntry {
            tenant: "d/x".into(),
            uid: "x".into(),
            resources: held,
        };
        node.status = Some(NodeStatus {
            allocations: vec![entry],
            ..NodeStatus::default()
        });
        node
    }

    fn waiting(name: &str, phase: TenantPhase) -> Tenant {
        let spec = TenantSpec {
            resources: amounts(1, 1, 1),
            mode: TenantMode::Standalone,
            replicas: None,
            suspend: false,
        };
        let mut tenant = Tenant::new(name, spec);
        tenant.metadata.namespace = Some("default".into());
        tenant.status = Some(TenantStatus {
            phase,
            ..TenantStatus::default()
        });
        tenant
    }

    fn room_watch() -> RoomWatch {
        let (store, mut writer) = reflector::store::<Tenant>();
        for (name, phase) in [
            ("a", TenantPhase::Active),
            ("p", TenantPhase::PendingCapacity),
            ("r", TenantPhase::Resizing),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(waiting(name, phase)));
        }
        RoomWatch::new(store)
    }

    fn names(refs: Vec<ObjectRef<Tenant>>) -> Vec<String> {
        let mut names: Vec<_> = refs.into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn a_new_node_wakes_only_the_waiting_tenants() {
        let watch = room_watch();
        assert_eq!(
            names(watch.waiting_tenants(&node(1, amounts(8, 8, 8), amounts(1, 1, 1)))),
            ["p", "r"]
        );
    }

    #[test]
    fn a_node_event_that_frees_nothing_wakes_nobody_and_one_that_frees_room_wakes_them() {
        let watch = room_watch();
        watch.waiting_tenants(&node(1, amounts(8, 8, 8), amounts(1, 1, 1)));
        // Another reservation: free shrinks from 7 to 5 threads; nothing to re-check.
        assert!(
            watch
                .waiting_tenants(&node(1, amounts(8, 8, 8), amounts(3, 1, 1)))
                .is_empty()
        );
        // A release: free grows back.
        assert_eq!(
            watch
                .waiting_tenants(&node(1, amounts(8, 8, 8), amounts(1, 1, 1)))
                .len(),
            2
        );
        // A spec change (capacity, state) moves the generation.
        assert_eq!(
            watch
                .waiting_tenants(&node(2, amounts(8, 8, 8), amounts(1, 1, 1)))
                .len(),
            2
        );
        assert!(
            watch
                .waiting_tenants(&node(2, amounts(8, 8, 8), amounts(1, 1, 1)))
                .is_empty()
        );
    }
}
