//! Node reconcile: keep a Node's derived status true to its allocations and capacity, and wake
//! waiting tenants when room can have appeared.
//!
//! Rules enforced here (docs/design.md, rules 6, 7, 8 and 11):
//! - totals and the OverCapacity condition are rewritten (through the engine) only when
//!   they differ from what the allocations and capacity give, e.g. after a capacity change;
//! - a node lowered below what it holds keeps every entry and says so in its condition;
//! - an entry whose tenant is gone (confirmed by a direct read, not only the cache) is released;
//!   an entry of a live tenant whose status names another node wakes that tenant, whose plan
//!   drops the duplicate; one whose status names no node is shown to the claims, which wake it
//!   if its status still names none at their next check;
//! - every node change is shown to the waiting room (see `waiting`), whose next pass re-queues
//!   the waiting tenants the node could take now;
//! - a node holding reservations carries [`NODE_FINALIZER`], so that deleting it waits for its
//!   tenants (its Drained condition names them); once a node being deleted holds nothing, the
//!   finalizer is removed by a patch guarded by the resourceVersion that showed it empty;
//! - a node being deleted, or Draining, has its tenants moved off it (make-before-break, see
//!   `placement::migration`): oldest first, at most `--max-migrations` at once; a tenant that
//!   fits nowhere else keeps its reservation there and waits for room;
//! - every node change is shown to the claims (see `claims`): tenants whose status names this
//!   node without an entry here are woken;
//! - in a pool (`--tenant-selector`), an entry of a live tenant outside the selector is never
//!   released: it is logged and counted (`tenant_placer_outside_pool`), as another pool's
//!   business or a misconfiguration;
//! - every node is looked at again every `orphan_sweep` (5 minutes by default), so an entry left
//!   by a delete the controller did not see (no finalizer, controller down) is released.

use std::sync::Arc;

use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::engine::Engine;
use super::settings::{Backoff, Doubling, Settings, error_delay};
use super::state::claims::Claims;
use super::state::decode::Decoded;
use super::state::tenant_cache::NameRef;
use super::state::{Synced, TenantCache, WaitingRoom};
use crate::api::{LabelSelector, NODE_FINALIZER, Node, Tenant};
use crate::error::Error;
use crate::metrics::Metrics;

/// What the node loop reads of the settings, taken once by the wiring.
#[derive(Clone, Debug)]
pub struct NodeSettings {
    /// Node reconciles running at once.
    pub concurrency: u16,
    /// Every node is looked at again once per this period (the orphan sweep).
    pub orphan_sweep: std::time::Duration,
    /// Moves off draining nodes in flight at once, at most.
    pub max_migrations: u16,
    /// The pool's Tenants: an entry of a live tenant outside them is never released.
    pub pool_tenants: Option<LabelSelector>,
    /// The retries after an error.
    pub error_retries: Doubling,
}

impl From<&Settings> for NodeSettings {
    fn from(settings: &Settings) -> Self {
        NodeSettings {
            concurrency: settings.concurrency,
            orphan_sweep: settings.orphan_sweep,
            max_migrations: settings.max_migrations,
            pool_tenants: settings.pool_tenants.clone(),
            error_retries: settings.error_retries(),
        }
    }
}

/// What the node loop reads and writes through.
pub struct NodeLoop {
    pub client: kube::Client,
    /// The placement engine: the only writer of Node status.
    pub engine: Arc<Engine>,
    /// The tenant watch cache, to find orphaned entries without a read per entry.
    pub tenants: TenantCache,
    /// Raised once the tenant cache holds its first full list.
    pub tenants_synced: Synced,
    /// Tenants waiting for room: a node change is shown to it.
    pub waiting: Arc<WaitingRoom>,
    /// What each tenant's status claims: a node change is shown to them.
    pub claims: Arc<Claims>,
    pub metrics: Arc<Metrics>,
    pub settings: NodeSettings,
    /// The retries after an error.
    pub error_backoff: Backoff,
}

impl std::fmt::Debug for NodeLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeLoop")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl NodeLoop {
    /// A loop over these parts, counting into its own metrics (a test's; the wiring sets them).
    pub fn new(
        client: kube::Client,
        engine: Arc<Engine>,
        tenants: (TenantCache, Synced),
        waiting: Arc<WaitingRoom>,
        settings: NodeSettings,
    ) -> Self {
        NodeLoop {
            client,
            engine,
            tenants: tenants.0,
            tenants_synced: tenants.1,
            waiting,
            claims: Arc::default(),
            metrics: Arc::default(),
            error_backoff: settings.error_retries.backoff(),
            settings,
        }
    }
}

/// Re-queues a node whose reconcile failed, with its backoff.
pub fn error_policy(node: Arc<Node>, error: &Error, ctx: Arc<NodeLoop>) -> Action {
    Action::requeue(error_delay(node.as_ref(), error, &ctx.error_backoff))
}

/// Reconciles one Node: wake the tenants it could take and check the claims on it, then its
/// derived status, then orphans, then its finalizer.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<NodeLoop>) -> Result<Action, Error> {
    let name = node.name_any();
    ctx.claims.node_changed(&name);
    ctx.waiting.node_changed(&name);
    ctx.engine.refresh(&name).await?;
    repair_entries(&node, &ctx).await?;
    start_moves(&node, &ctx);
    keep_finalizer(&name, &ctx).await?;
    // Looked at again by the orphan sweep (`node_sweeps`): what a missed delete left behind is
    // released within its interval.
    Ok(Action::await_change())
}

/// Releases the entries whose tenant is gone: not in the tenant cache, and confirmed by a direct
/// read (absent, or present under another UID, i.e. deleted and re-created). An entry whose
/// tenant cannot be named is left alone and logged: nothing is released unconfirmed. A live
/// tenant whose status names another node may hold a duplicate here: it is woken to settle it.
async fn repair_entries(node: &Node, ctx: &NodeLoop) -> Result<(), Error> {
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
        // One cache lookup per entry, of the node the status names only, allocating nothing:
        // this runs for every entry on every node change.
        let named = NameRef { namespace, name };
        if let Some(named_node) = ctx
            .tenants
            .node_named_if_uid(&named, &entry.uid, &node_name)
        {
            match named_node.filter(|n| !n.is_empty()) {
                Some(n) if *n != *node_name => {
                    ctx.waiting.wake(ObjectRef::new(name).within(namespace));
                }
                Some(_) => {}
                None => {
                    if let Some(key) = ctx.tenants.key(&named) {
                        ctx.claims.unnamed_entry(key, &node_name);
                    }
                }
            }
            continue;
        }
        // Decoded one by one: a tenant the types cannot hold still answers whether it is alive.
        let api: Api<Decoded<Tenant>> = Api::namespaced(ctx.client.clone(), namespace);
        let alive = match api.get_opt(name).await {
            Ok(Some(found)) if found.uid().as_deref() == Some(&*entry.uid) => {
                let outside = ctx
                    .settings
                    .pool_tenants
                    .as_ref()
                    .is_some_and(|s| !s.matches(found.labels()));
                if outside {
                    // Another pool's business, or a misconfiguration: never ours to release.
                    tracing::warn!(node = %node_name, tenant = %entry.tenant, uid = %entry.uid,
                        "a node of this pool holds an entry of a tenant outside the tenant \
                         selector; left as is (check that the pools' selectors are disjoint)");
                    ctx.metrics.outside_pool();
                }
                true
            }
            Ok(_) => false,
            Err(source) => {
                return Err(Error::ReadTenant {
                    tenant: entry.tenant.to_string(),
                    source,
                });
            }
        };
        if !alive {
            if ctx.engine.gone().contains(&entry.uid) {
                // Seen deleted: routine (the delete's own release may not have run yet).
                tracing::debug!(node = %node_name, tenant = %entry.tenant, "releasing the entry of a deleted tenant");
            } else {
                tracing::warn!(node = %node_name, tenant = %entry.tenant, uid = %entry.uid, "releasing orphaned entry");
                ctx.metrics.orphan_released();
            }
            ctx.engine.release(&entry.uid, &entry.tenant).await?;
        }
    }
    Ok(())
}

/// Wakes the tenants of a draining node (or one being deleted) that are to move next: oldest
/// first, as many as `--max-migrations` leaves beside the moves off this node in flight. Those
/// that no other node can take wait in the waiting room instead, woken when room appears; the
/// rest are woken as moves complete (each completion changes this node).
fn start_moves(node: &Node, ctx: &NodeLoop) {
    if node.placement_state() != placement::NodeState::Draining {
        return;
    }
    let name = node.name_any();
    let mut in_flight = 0usize;
    let mut next: Vec<Arc<Tenant>> = Vec::new();
    for entry in node.allocations() {
        let Some(reference) = Tenant::reference(&entry.tenant) else {
            continue;
        };
        let Some(tenant) = ctx
            .tenants
            .get(&reference)
            .filter(|t| t.uid().as_deref() == Some(&*entry.uid))
        else {
            continue;
        };
        let moving = tenant
            .status
            .as_ref()
            .and_then(|s| s.migration.as_ref())
            .is_some_and(|m| m.from == name);
        if moving {
            in_flight = in_flight.saturating_add(1);
        } else if !tenant.is_blocked_move() {
            next.push(tenant);
        }
    }
    let room = usize::from(ctx.settings.max_migrations).saturating_sub(in_flight);
    next.sort_by(|a, b| {
        let age = |t: &Tenant| t.metadata.creation_timestamp.as_ref().map(|c| c.0);
        (age(a), a.key()).cmp(&(age(b), b.key()))
    });
    for tenant in next.into_iter().take(room) {
        ctx.waiting.wake(ObjectRef::from_obj(tenant.as_ref()));
    }
}

/// Adds the reservations finalizer to a node that holds entries, and removes it from a node being
/// deleted that holds none. Decided from the newest copy of the node (our own writes included).
async fn keep_finalizer(name: &str, ctx: &NodeLoop) -> Result<(), Error> {
    let Some(node) = ctx.engine.node(name) else {
        return Ok(());
    };
    let holds = node
        .status
        .as_ref()
        .is_some_and(|s| !s.allocations.is_empty());
    let finalizers = node.finalizers();
    let carries = finalizers.iter().position(|f| f == NODE_FINALIZER);
    let deleting = node.metadata.deletion_timestamp.is_some();
    let patch = match carries {
        None if holds && !deleting => {
            super::patch::add_finalizer_ops(node.metadata.finalizers.as_ref(), NODE_FINALIZER)
        }
        Some(index) if deleting && !holds => {
            // Guarded by the resourceVersion that showed the node empty: an entry written since
            // makes the patch fail (422) and the node is looked at again.
            let path = format!("/metadata/finalizers/{index}");
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": node.resource_version()},
                {"op": "test", "path": path, "value": NODE_FINALIZER},
                {"op": "remove", "path": path},
            ])
        }
        _ => return Ok(()),
    };
    let patch = super::patch::json_patch(patch);
    let api: Api<Node> = Api::all(ctx.client.clone());
    match api
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
    {
        Ok(patched) => {
            // Our next status write must carry the version this patch made.
            ctx.engine.remember(patched);
            Ok(())
        }
        // Gone already: nothing holds it.
        Err(error) if crate::error::is_not_found(&error) => Ok(()),
        Err(source) => Err(Error::NodeFinalizer {
            node: name.to_owned(),
            source,
        }),
    }
}
