//! Node reconcile: keep a Node's derived status true to its allocations and capacity, and wake
//! waiting tenants when room can have appeared.
//!
//! Rules enforced here (DESIGN.md, allocation protocol points 6, 7 and 8):
//! - totals and the OverCapacity condition are rewritten (through the single writer) only when
//!   they differ from what the allocations and capacity give, e.g. after a capacity change;
//! - a node lowered below what it holds keeps every entry and says so in its condition;
//! - an entry whose tenant is gone (confirmed by a direct read, not only the cache) is released;
//! - every node change is shown to the waiting room (see `waiting`), which re-queues the waiting
//!   tenants the node could take now.

use std::collections::HashSet;
use std::sync::Arc;

use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::Context;
use crate::api::{Node, Tenant};
use crate::error::Error;

/// Reconciles one Node: wake the tenants it could take, then its derived status, then orphans.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    let woken = ctx.waiting.node_changed(&node);
    if woken > 0 {
        tracing::debug!(node = %node.name_any(), woken, "room for waiting tenants");
    }
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
