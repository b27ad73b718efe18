//! Node reconcile: keep a Node's derived status true to its allocations and capacity, and wake
//! waiting tenants when room can have appeared.
//!
//! Rules enforced here (DESIGN.md, allocation protocol points 6 and 8):
//! - totals and the OverCapacity condition are rewritten (through the single writer) only when
//!   they differ from what the allocations and capacity give, e.g. after a capacity change;
//! - a node lowered below what it holds keeps every entry and says so in its condition;
//! - room can have appeared when a node is first seen, its spec changes (generation), or its free
//!   amount grows in some dimension: then every PendingCapacity and Resizing tenant is re-queued.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

use super::Context;
use crate::api::{Node, Tenant, TenantPhase};
use crate::error::Error;

/// Reconciles one Node's derived status.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.writer.refresh(&node.name_any()).await?;
    Ok(Action::requeue(ctx.settings.resync))
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
    let allocated = super::writer::ledger_of(node).map(|l| l.allocated()).unwrap_or(capacity);
    Offer { generation: node.metadata.generation, free: capacity.saturating_sub(allocated) }
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
        RoomWatch { tenants, seen: Arc::default() }
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
                    matches!(s.phase, TenantPhase::PendingCapacity | TenantPhase::Resizing)
                })
            })
            .map(|t| ObjectRef::from_obj(t.as_ref()))
            .collect()
    }
}
