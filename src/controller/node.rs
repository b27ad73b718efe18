//! Node reconcile: keep a Node's derived status true to its allocations and capacity, and wake
//! waiting tenants when room can have appeared.
//!
//! Rules enforced here (DESIGN.md, allocation protocol points 6, 7 and 8):
//! - totals and the OverCapacity condition are rewritten (through the single writer) only when
//!   they differ from what the allocations and capacity give, e.g. after a capacity change;
//! - a node lowered below what it holds keeps every entry and says so in its condition;
//! - an entry whose tenant is gone (confirmed by a direct read, not only the cache) is released;
//!   an entry of a live tenant whose status names another node wakes that tenant, whose plan
//!   drops the duplicate;
//! - every node change is shown to the waiting room (see `waiting`), whose next pass re-queues
//!   the waiting tenants the node could take now;
//! - every node is looked at again every `orphan_sweep` (5 minutes by default), so an entry left
//!   by a delete the controller did not see (no finalizer, controller down) is released.

use std::sync::Arc;

use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use super::Context;
use crate::api::{Node, Tenant};
use crate::error::Error;

/// Reconciles one Node: wake the tenants it could take, then its derived status, then orphans.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.waiting.node_changed(&node.name_any());
    ctx.writer.refresh(&node.name_any()).await?;
    repair_entries(&node, &ctx).await?;
    // The periodic sweep: what a missed delete left behind is released within this interval.
    Ok(Action::requeue(ctx.settings.orphan_sweep))
}

/// Releases the entries whose tenant is gone: not in the tenant cache, and confirmed by a direct
/// read (absent, or present under another UID, i.e. deleted and re-created). An entry whose
/// tenant cannot be named is left alone and logged: nothing is released unconfirmed. A live
/// tenant whose status names another node may hold a duplicate here: it is woken to settle it.
async fn repair_entries(node: &Node, ctx: &Context) -> Result<(), Error> {
    let Some(status) = &node.status else {
        return Ok(());
    };
    ctx.tenants_synced.wait().await?;
    let node_name = node.name_any();
    for entry in &status.allocations {
        let Some((namespace, name)) = entry.tenant.split_once('/') else {
            tracing::error!(node = %node_name, tenant = %entry.tenant, uid = %entry.uid,
                "allocation entry does not name its tenant as namespace/name; left as is");
            continue;
        };
        // One cache lookup per entry: this runs on every node change.
        let cached = ctx.tenants.get(&ObjectRef::new(name).within(namespace));
        if let Some(tenant) = cached.filter(|t| t.uid().as_deref() == Some(entry.uid.as_str())) {
            let named = tenant.status.as_ref().map(|s| s.node_name.as_str());
            if named.is_some_and(|n| !n.is_empty() && n != node_name) {
                ctx.waiting.wake(ObjectRef::from_obj(tenant.as_ref()));
            }
            continue;
        }
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
