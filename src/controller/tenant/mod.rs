//! Tenant reconcile: finalizer, then one decision (or release) through the engine, then the
//! Tenant status as a view of what the Node holds.
//!
//! ```text
//!   Tenant ─▶ finalizer present? ─no─▶ JSON patch (test + add) ─▶ continue with the patched object
//!        └─ deleting? ─▶ engine.release(uid) ─▶ JSON patch (test + remove) the finalizer
//!        └─ footprint = resources x replicas (checked) ─▶ engine.decide ─▶ WantedStatus ─▶ status if changed
//! ```
//!
//! This file is the reconcile and its I/O; what a decision means for the status (the pure view,
//! `WantedStatus` and the status written from it) is in `status`.
//!
//! Rules enforced here (docs/design.md, rules 3 to 6, 9 and 10):
//! - the Node is written before the Tenant status; the status is derived from the Node's entry;
//! - deleting releases the entry first and removes the finalizer second, so a re-run after a
//!   crash in between finds nothing to release and releases nothing twice;
//! - the Tenant status is written only when it differs from the current one (a condition's
//!   transition time is kept while its status stays the same), so a pending tenant that is
//!   re-evaluated with nothing changed causes no write;
//! - a spec that cannot be used (overflow, replicas not matching the mode) keeps any reservation
//!   and says why in the status; it never panics;
//! - without the finalizer (`Settings::finalizer` false) none is added; a tenant's delete event
//!   releases its entry ([`deleted`]), and the node sweep releases what a missed event left.

mod status;

use std::sync::Arc;

use super::runner::Action;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use placement::{EditKind, Plan, Resources, TenantWants};
use serde::Serialize;
use serde_json::json;

use super::engine::Committed;
use super::engine::Engine;
use super::publisher::EventPublisher;
use super::settings::{Backoff, Doubling, EventLevel, Settings, error_delay};
use super::state::newest;
use super::state::{PurchaseNotes, RoomOrders, TenantCache, WaitingRoom};
use crate::api::{
    LabelSelector, MigrationStatus, PlacedReason, TENANT_FINALIZER, Tenant, TenantPhase,
    TenantStatus,
};
use crate::error::Error;
use crate::metrics::Metrics;
use status::{
    WantedStatus, asked_for, lost_note, lost_on, status_for, undecided, unusable_spec,
    wanted_status,
};

/// What the tenant loop reads of the settings, taken once by the wiring.
#[derive(Clone, Debug)]
pub struct TenantSettings {
    /// Reconciles running at once.
    pub concurrency: u16,
    /// A settled tenant is looked at again once per this period (the resync sweep).
    pub resync: std::time::Duration,
    /// The fallback re-checks of a waiting tenant.
    pub pending_rechecks: Doubling,
    /// The retries after an error.
    pub error_retries: Doubling,
    /// Put the reservation finalizer on every Tenant (see the module rules).
    pub finalizer: bool,
    /// Which Events to publish.
    pub events: EventLevel,
    /// A tenant kept from room held for an older one is looked at again after five of these.
    pub requeue_window: std::time::Duration,
    /// The pool's Nodes: a tenant holding a node outside them stays there.
    pub pool_nodes: Option<LabelSelector>,
    /// The pool's Tenants: a delete event may only mean that a tenant left them.
    pub pool_tenants: Option<LabelSelector>,
}

impl From<&Settings> for TenantSettings {
    fn from(settings: &Settings) -> Self {
        TenantSettings {
            concurrency: settings.concurrency,
            resync: settings.resync,
            pending_rechecks: settings.pending_rechecks(),
            error_retries: settings.error_retries(),
            finalizer: settings.finalizer,
            events: settings.events,
            requeue_window: settings.requeue_window,
            pool_nodes: settings.pool_nodes.clone(),
            pool_tenants: settings.pool_tenants.clone(),
        }
    }
}

/// What the tenant loop reads and writes through.
pub struct TenantLoop {
    pub client: kube::Client,
    /// The placement engine: the only writer of Node status.
    pub engine: Arc<Engine>,
    /// The tenant watch cache.
    pub tenants: TenantCache,
    /// Tenants as our own writes left them, until the cache catches up.
    pub tenant_copies: Arc<newest::Newest<Tenant>>,
    /// Tenants waiting for room, re-queued by node changes (shared with the engine's queue).
    pub waiting: Arc<WaitingRoom>,
    /// What a waiting tenant's status adds about machines (the capacity tick writes them).
    pub notes: Arc<PurchaseNotes>,
    /// The moves asked to make room for waiting tenants (the capacity tick gives them). `None`:
    /// make-room is off.
    pub orders: Option<Arc<RoomOrders>>,
    /// Publishes Kubernetes Events; `None` publishes nothing (scripted-mock tests).
    pub events: Option<EventPublisher>,
    pub metrics: Arc<Metrics>,
    pub settings: TenantSettings,
    /// The fallback re-checks of a waiting tenant.
    pub pending_backoff: Backoff,
    /// The retries after an error.
    pub error_backoff: Backoff,
    /// The Tenant API of each namespace seen, made once.
    pub(super) apis: NamespaceApis,
}

/// The Tenant API of each namespace, made once and shared by every reconcile in it: making one
/// formats its path and clones the client (2 % of the controller's CPU at 10,000 placements a
/// second, one per reconcile). Namespaces are few; where they come and go, the table is
/// emptied once it holds [`NamespaceApis::MOST`] (a deleted one keeps its few bytes until then).
#[derive(Default)]
pub(super) struct NamespaceApis(
    std::sync::Mutex<std::collections::HashMap<String, Arc<Api<Tenant>>>>,
);

impl NamespaceApis {
    const MOST: usize = 1024;

    fn of(&self, client: &kube::Client, namespace: &str) -> Arc<Api<Tenant>> {
        let mut apis = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(api) = apis.get(namespace) {
            return api.clone();
        }
        if apis.len() >= Self::MOST {
            apis.clear();
        }
        let api = Arc::new(Api::namespaced(client.clone(), namespace));
        apis.insert(namespace.to_owned(), api.clone());
        api
    }
}

impl std::fmt::Debug for TenantLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantLoop")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl TenantLoop {
    /// A loop over these parts, publishing no Events and counting into its own metrics (a test's;
    /// the wiring sets the rest).
    pub fn new(
        client: kube::Client,
        engine: Arc<Engine>,
        tenants: TenantCache,
        waiting: Arc<WaitingRoom>,
        settings: TenantSettings,
    ) -> Self {
        TenantLoop {
            client,
            engine,
            tenants,
            tenant_copies: Arc::default(),
            waiting,
            notes: Arc::default(),
            orders: None,
            events: None,
            metrics: Arc::default(),
            pending_backoff: settings.pending_rechecks.backoff(),
            error_backoff: settings.error_retries.backoff(),
            settings,
            apis: NamespaceApis::default(),
        }
    }

    /// When to try a tenant again after `error` (its backoff).
    pub fn retry_after(&self, tenant: &Tenant, error: &Error) -> std::time::Duration {
        error_delay(tenant, error, &self.error_backoff)
    }
}

/// Decisions in one reconcile for a spread tenant whose edits come in rounds (room taken, then
/// room given back): two suffice; a third covers a conflict between them.
const SPREAD_ROUNDS: usize = 3;

/// Reconciles one Tenant. The returned action says when to look again.
pub async fn reconcile(tenant: Arc<Tenant>, ctx: Arc<TenantLoop>) -> Result<Action, Error> {
    let key = tenant.key();
    let uid = tenant.uid().ok_or_else(|| Error::MissingUid {
        tenant: key.clone(),
    })?;
    let api = ctx.apis.of(
        &ctx.client,
        tenant.metadata.namespace.as_deref().unwrap_or_default(),
    );

    let Some(tenant) = freshest(tenant, &api, &key, &ctx).await? else {
        return Ok(Action::await_change());
    };
    if tenant.metadata.deletion_timestamp.is_some() {
        ctx.waiting.withdraw(&uid);
        return finalize(&api, &tenant, &uid, &key, &ctx).await;
    }
    // Enter the waiting room first (before the finalizer write, before deciding): from now on
    // the engine holds room for this tenant against younger ones, and no node change is missed.
    let footprint = tenant.spec.footprint();
    let created = tenant.metadata.creation_timestamp.as_ref().map(|t| t.0);
    if let Some(waiter) = tenant.waiting_wants() {
        ctx.waiting
            .enter(ObjectRef::from_obj(tenant.as_ref()), waiter);
    }
    let tenant =
        if !ctx.settings.finalizer || tenant.finalizers().iter().any(|f| f == TENANT_FINALIZER) {
            tenant
        } else {
            ctx.tenant_copies
                .remember(add_finalizer(&api, &tenant, &key).await?)
        };

    let footprint = match footprint {
        Ok(footprint) => footprint,
        Err(problem) => {
            // Keep whatever is held; say why nothing else happens.
            ctx.waiting.withdraw(&uid);
            tracing::error!(tenant = %key, %problem, "tenant spec cannot be used");
            let wanted = unusable_spec(ctx.engine.holding(&uid), &problem);
            write_status(&api, &tenant, &wanted, &key, &ctx.tenant_copies).await?;
            return Ok(Action::await_change());
        }
    };
    if let Some(wanted) = outside_pool(&tenant, &ctx).await? {
        ctx.waiting.withdraw(&uid);
        ctx.metrics.outside_pool();
        tracing::warn!(tenant = %key, node = wanted.node.as_deref().unwrap_or_default(),
            "the tenant holds a reservation outside this pool; it is left where it is");
        write_status(&api, &tenant, &wanted, &key, &ctx.tenant_copies).await?;
        return Ok(Action::await_change());
    }
    let Some(mut committed) = decide(&api, &tenant, &uid, &key, footprint, created, &ctx).await?
    else {
        return Ok(Action::await_change());
    };
    let mut tenant = tenant;
    if let Plan::Migrating { .. } = &committed.plan {
        // The target entry is written: record the move, then finish it (the source goes). A
        // crash in between leaves a recorded move, which the next decision finishes.
        let mut wanted = wanted_status(&committed.plan, tenant.spec.suspend, footprint);
        if let Some(asked) = ctx.orders.as_ref().and_then(|orders| orders.asked(&uid)) {
            asked_for(&mut wanted, &asked);
        }
        let recorded = write_status(&api, &tenant, &wanted, &key, &ctx.tenant_copies).await?;
        announce(&ctx, &tenant, &committed.writes, &wanted).await;
        if let Some(recorded) = recorded {
            tenant = recorded;
        }
        let Some(next) = decide(&api, &tenant, &uid, &key, footprint, created, &ctx).await? else {
            return Ok(Action::await_change());
        };
        committed = next;
    }
    // A spread tenant gives room back only once the room it took is written (engine/spread.rs):
    // its next edits are decided now that the first are.
    for _ in 0..SPREAD_ROUNDS {
        if !matches!(committed.plan, Plan::Edit(_)) {
            break;
        }
        let Some(mut next) = decide(&api, &tenant, &uid, &key, footprint, created, &ctx).await?
        else {
            return Ok(Action::await_change());
        };
        committed.writes.append(&mut next.writes);
        next.writes = std::mem::take(&mut committed.writes);
        committed = next;
    }
    let mut wanted = wanted_status(&committed.plan, tenant.spec.suspend, footprint);
    if let Some(lost) = lost_on(tenant.status.as_ref(), &wanted) {
        tracing::warn!(tenant = %key, node = lost, "reservation lost: the node no longer held it");
        ctx.metrics.reservation_event("lost");
        let note = format!(
            "its reservation on {lost} was lost (the node no longer held it) and {lost} cannot \
             take it back now"
        );
        let reason = PlacedReason::ReservationLost.as_str();
        publish(
            ctx.events.as_ref(),
            &tenant,
            EventType::Warning,
            reason,
            note.clone(),
        )
        .await;
        wanted.with_lost_note(&note);
    } else if !wanted.placed
        && let Some(note) = lost_note(&tenant)
    {
        // Still waiting after the loss: keep saying why it left Active.
        wanted.with_lost_note(note);
    }
    if wanted.phase == TenantPhase::PendingCapacity
        && let Some(note) = ctx.notes.note_for(&key)
    {
        // Waiting for a machine: its request, or why none can be asked for.
        wanted.message = format!("{}; {note}", wanted.message);
    }
    let recorded = write_status(&api, &tenant, &wanted, &key, &ctx.tenant_copies).await?;
    if let Some(node) = &wanted.node {
        tracing::Span::current().record("node", node.as_str());
    }
    announce(&ctx, &tenant, &committed.writes, &wanted).await;
    for edit in &committed.writes {
        match edit.kind {
            EditKind::FinishMigration => ctx.metrics.migration_ended(true),
            EditKind::AbortMigration => ctx.metrics.migration_ended(false),
            EditKind::Reserve => ctx.metrics.placed(),
            EditKind::Restore => ctx.metrics.reservation_event("restored"),
            _ => {}
        }
    }

    let next = next(&wanted, committed.held_back);
    if next != Next::Rests
        && let Some(waiter) = recorded.as_deref().and_then(Tenant::waiting_wants)
    {
        // It waits for what the status just written says, not what it said when this reconcile
        // began: a tenant blocked on a draining node waits for room for what it holds there,
        // not for the footprint its spec asks (the waiting room wakes it by that).
        ctx.waiting
            .enter(ObjectRef::from_obj(tenant.as_ref()), waiter);
    }
    Ok(match next {
        Next::Soon => Action::requeue(ctx.settings.requeue_window.saturating_mul(5)),
        Next::Waits => Action::requeue(ctx.pending_backoff.next(&uid)),
        Next::Rests => {
            ctx.waiting.leave(&uid);
            ctx.pending_backoff.reset(&uid);
            // Looked at again by the resync sweep (`resyncs`), not by a request per tenant.
            Action::await_change()
        }
    })
}

/// The newest copy of the tenant handed over: the object was read from the cache when the
/// reconcile was scheduled; the cache may have moved on since, and our own last write may not be
/// in it yet. Deciding from the newest of the three avoids sending a write again. (A cache still
/// at the version handed over is not told back again.) `None`: it is gone.
async fn freshest(
    tenant: Arc<Tenant>,
    api: &Api<Tenant>,
    key: &str,
    ctx: &TenantLoop,
) -> Result<Option<Arc<Tenant>>, Error> {
    let current = if ctx
        .tenants
        .holds_version(tenant.as_ref(), tenant.metadata.resource_version.as_deref())
    {
        None
    } else {
        ctx.tenants.get(&ObjectRef::from_obj(tenant.as_ref()))
    };
    match ctx
        .tenant_copies
        .freshest_known(newest::newer(tenant.clone(), current))
    {
        Some(tenant) => Ok(Some(tenant)),
        // Behind a write of ours whose copy is no longer kept (a flood): read it.
        None => read(api, &tenant, key, &ctx.tenant_copies).await,
    }
}

/// When a tenant is looked at again after a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Kept from room held for an older tenant: soon (five requeue windows), since that tenant
    /// may take other room (or none) and then no node change here would say so.
    Soon,
    /// It waits (for room, to grow, or on a draining node nothing can take it from): its
    /// fallback re-check, backing off; node changes wake it before.
    Waits,
    /// At rest: it leaves the waiting room; the resync sweep looks at it again.
    Rests,
}

/// When to look at a tenant again, from what its status says now. Pure.
fn next(wanted: &WantedStatus, held_back: bool) -> Next {
    match wanted.phase {
        TenantPhase::PendingCapacity if held_back => Next::Soon,
        TenantPhase::PendingCapacity | TenantPhase::Resizing => Next::Waits,
        _ if wanted.reason == PlacedReason::MigrationBlocked => Next::Waits,
        // A spread tenant with edits left after its rounds (conflicts): soon, not at rest.
        _ if wanted.reason == PlacedReason::InProgress => Next::Soon,
        // (A suspended waiter never had room held: it asks for nothing, and becoming suspended
        // already asked every node to be judged again.)
        _ => Next::Rests,
    }
}

/// Asks the engine to move the tenant to rest, as its spec (`footprint`) and status (the node
/// it names, the move it records) say. `None` when the tenant was released meanwhile (it is
/// gone or going: nothing to place or tell). A failure is written to the status and returned.
/// In a pool (`--node-selector`), a tenant whose status names a node this pool does not see
/// (its labels came into the pool from another): when that node exists outside the pool, the
/// tenant keeps its reservation there and is not placed here (it would be held twice). Its
/// status says so. `None`: the tenant is this pool's to decide (no pool, the node is the pool's,
/// or gone: a lost reservation, decided as usual).
async fn outside_pool(tenant: &Tenant, ctx: &TenantLoop) -> Result<Option<WantedStatus>, Error> {
    let Some(selector) = ctx
        .settings
        .pool_nodes
        .as_ref()
        .filter(|s| !s.is_everything())
    else {
        return Ok(None);
    };
    let Some(status) = tenant.status.as_ref() else {
        return Ok(None);
    };
    let node = &status.node_name;
    if node.is_empty() || ctx.engine.node(node).is_some() {
        return Ok(None);
    }
    let nodes: Api<crate::api::Node> = Api::all(ctx.client.clone());
    let found = nodes
        .get_opt(node)
        .await
        .map_err(|source| Error::ReadNode {
            node: node.clone(),
            source,
        })?;
    let Some(found) = found.filter(|n| !selector.matches(n.labels())) else {
        return Ok(None);
    };
    let held = tenant
        .metadata
        .uid
        .as_deref()
        .and_then(|uid| found.entry_of(uid));
    let Some(held) = held else {
        return Ok(None);
    };
    Ok(Some(WantedStatus {
        phase: status.phase,
        node: Some(node.clone()),
        reserved: held.resources.to_resources().unwrap_or(Resources::ZERO),
        message: format!(
            "holds its reservation on {node}, a node outside this pool (--node-selector              {selector}): it stays there and is not placed in this pool (it would be held twice);              to move it here, have its pool drain {node}, or label it back"
        ),
        placed: true,
        reason: PlacedReason::OutsidePool,
        migration: None,
        placements: Vec::new(),
    }))
}

async fn decide(
    api: &Api<Tenant>,
    tenant: &Tenant,
    uid: &str,
    key: &str,
    footprint: Resources,
    created: Option<k8s_openapi::jiff::Timestamp>,
    ctx: &TenantLoop,
) -> Result<Option<Committed>, Error> {
    let status = tenant.status.as_ref();
    let asked = ctx.orders.as_ref().and_then(|orders| orders.asked(uid));
    let wants = TenantWants {
        uid,
        tenant: key,
        footprint,
        suspend: tenant.spec.suspend,
        status_node: status
            .map(|s| s.node_name.as_str())
            .filter(|n| !n.is_empty()),
        migration: status
            .and_then(|s| s.migration.as_ref())
            .map(MigrationStatus::as_placement),
        asked: asked.as_ref().map(|a| placement::Migration {
            from: &a.from,
            to: &a.to,
        }),
        node_selector: tenant.spec.selector(),
    };
    match ctx
        .engine
        .decide_created(&wants, created, tenant.spread_ask())
        .await
    {
        Ok(committed) => Ok(Some(committed)),
        Err(Error::TenantReleased { .. }) => {
            ctx.waiting.withdraw(uid);
            tracing::debug!(tenant = %key, "released while its decision waited; not placed");
            Ok(None)
        }
        Err(error) => {
            // Undecided: it holds no room against others while it cannot be decided, and its
            // status says why; the error requeues it with backoff (it enters again then).
            ctx.waiting.withdraw(uid);
            announce_failure(ctx.events.as_ref(), tenant, &error).await;
            let wanted = undecided(tenant, &error);
            write_status(api, tenant, &wanted, key, &ctx.tenant_copies).await?;
            Err(error)
        }
    }
}

/// Deleting: release the entry, then drop the finalizer. Both steps are idempotent.
async fn finalize(
    api: &Api<Tenant>,
    tenant: &Tenant,
    uid: &str,
    key: &str,
    ctx: &TenantLoop,
) -> Result<Action, Error> {
    let Some(index) = tenant
        .finalizers()
        .iter()
        .position(|f| f == TENANT_FINALIZER)
    else {
        return Ok(Action::await_change());
    };
    let released = ctx.engine.release(uid, key).await;
    if let Ok(writes) = &released {
        announce_writes(ctx, tenant, writes).await;
    }
    if let Err(error) = released {
        announce_failure(ctx.events.as_ref(), tenant, &error).await;
        // Say plainly why the tenant is stuck terminating; the error requeues it.
        let wanted = WantedStatus {
            phase: TenantPhase::Terminating,
            node: tenant
                .status
                .as_ref()
                .map(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            reserved: tenant
                .status
                .as_ref()
                .and_then(|s| s.reserved.to_resources().ok())
                .unwrap_or_default(),
            message: format!("releasing the reservation failed, will retry: {error}"),
            placed: false,
            reason: PlacedReason::ReleaseFailed,
            migration: None,
            placements: Vec::new(),
        };
        write_status(api, tenant, &wanted, key, &ctx.tenant_copies).await?;
        return Err(error);
    }
    ctx.pending_backoff.reset(uid);
    // test + remove: fails with 422 if the list changed since we read it; we then requeue.
    let path = format!("/metadata/finalizers/{index}");
    let patch = super::patch::json_patch(json!([
        {"op": "test", "path": path, "value": TENANT_FINALIZER},
        {"op": "remove", "path": path},
    ]));
    match api
        .patch(
            &tenant.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => {
            ctx.tenant_copies
                .forget(tenant.namespace().as_deref(), &tenant.name_any());
            Ok(Action::await_change())
        }
        // Already gone: another run finished the job.
        Err(error) if crate::error::is_not_found(&error) => {
            ctx.tenant_copies
                .forget(tenant.namespace().as_deref(), &tenant.name_any());
            Ok(Action::await_change())
        }
        Err(source) => Err(Error::RemoveFinalizer {
            tenant: key.to_owned(),
            source,
        }),
    }
}

/// The tenant as the API server has it now, remembered as the newest copy; `None` when it is
/// gone.
async fn read(
    api: &Api<Tenant>,
    tenant: &Tenant,
    key: &str,
    copies: &newest::Newest<Tenant>,
) -> Result<Option<Arc<Tenant>>, Error> {
    match api.get(&tenant.name_any()).await {
        // Deleted and made again since: the new object's own event reconciles it.
        Ok(fresh) if fresh.uid() != tenant.uid() => Ok(None),
        Ok(fresh) => Ok(Some(copies.remember(fresh))),
        Err(error) if crate::error::is_not_found(&error) => {
            copies.forget(tenant.namespace().as_deref(), &tenant.name_any());
            Ok(None)
        }
        Err(source) => Err(Error::ReadTenant {
            tenant: key.to_owned(),
            source,
        }),
    }
}

async fn add_finalizer(api: &Api<Tenant>, tenant: &Tenant, key: &str) -> Result<Tenant, Error> {
    let patch =
        super::patch::add_finalizer_ops(tenant.metadata.finalizers.as_ref(), TENANT_FINALIZER);
    api.patch(
        &tenant.name_any(),
        &PatchParams::default(),
        &Patch::Json::<()>(super::patch::json_patch(patch)),
    )
    .await
    .map_err(|source| Error::AddFinalizer {
        tenant: key.to_owned(),
        source,
    })
}

/// Events for what a decision did: one per node write, and one when the tenant starts waiting.
async fn announce(
    ctx: &TenantLoop,
    tenant: &Tenant,
    writes: &[placement::Edit],
    wanted: &WantedStatus,
) {
    announce_writes(ctx, tenant, writes).await;
    let was_blocked = tenant.placed_reason() == Some(PlacedReason::MigrationBlocked);
    if wanted.reason == PlacedReason::MigrationBlocked && !was_blocked {
        let note = wanted.message.clone();
        let reason = PlacedReason::MigrationBlocked.as_str();
        publish(
            ctx.events.as_ref(),
            tenant,
            EventType::Warning,
            reason,
            note,
        )
        .await;
    }
    let was = tenant.status.as_ref().map(|s| s.phase);
    if was != Some(wanted.phase) {
        match wanted.phase {
            TenantPhase::PendingCapacity => {
                publish(
                    ctx.events.as_ref(),
                    tenant,
                    EventType::Normal,
                    "Pending",
                    wanted.message.clone(),
                )
                .await;
            }
            TenantPhase::Resizing => {
                publish(
                    ctx.events.as_ref(),
                    tenant,
                    EventType::Warning,
                    "ResizeBlocked",
                    wanted.message.clone(),
                )
                .await;
            }
            _ => {}
        }
    }
}

/// A tenant's delete event (it is gone from the API): release its entry. With the finalizer
/// the entry is already released and this writes nothing; without it, this is the release.
/// A failure is logged: the node sweep releases the entry later (a direct read confirms the
/// tenant is gone).
pub async fn deleted(tenant: &Tenant, ctx: &TenantLoop) {
    let key = tenant.key();
    if let Some(uid) = tenant.uid() {
        ctx.waiting.withdraw(&uid);
    }
    ctx.tenant_copies
        .forget(tenant.namespace().as_deref(), &tenant.name_any());
    let Some(uid) = tenant.uid() else { return };
    ctx.pending_backoff.reset(&uid);
    if ctx
        .settings
        .pool_tenants
        .as_ref()
        .is_some_and(|s| !s.is_everything())
    {
        // In a pool a delete event may only mean that the tenant's labels left the selector.
        match still_there(tenant, &uid, &ctx.client).await {
            Ok(false) => ctx.engine.gone().insert(&uid),
            Ok(true) => {
                tracing::warn!(tenant = %key, %uid,
                    "tenant left this controller's pool (its labels changed): its reservation is                      kept and no longer managed here; move tenants between pools by re-creating them");
                ctx.metrics.outside_pool();
                return;
            }
            Err(error) => {
                tracing::warn!(tenant = %key, %error,
                    "could not confirm that a tenant was deleted; the node sweep will");
                return;
            }
        }
    }
    match ctx.engine.release(&uid, &key).await {
        Ok(writes) if !writes.is_empty() => {
            tracing::info!(tenant = %key, %uid, "released the reservation of a deleted tenant");
        }
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(tenant = %key, %error, "releasing a deleted tenant failed; the node sweep will");
        }
    }
}

/// Whether a tenant reported deleted still exists under the same UID (read directly).
async fn still_there(tenant: &Tenant, uid: &str, client: &kube::Client) -> Result<bool, Error> {
    let api: Api<super::state::decode::Decoded<Tenant>> =
        Api::namespaced(client.clone(), &tenant.namespace().unwrap_or_default());
    match api.get_opt(&tenant.name_any()).await {
        Ok(found) => Ok(found.is_some_and(|t| t.uid().as_deref() == Some(uid))),
        Err(source) => Err(Error::ReadTenant {
            tenant: tenant.key(),
            source,
        }),
    }
}

/// One Event per node write (reservation changes only with `EventLevel::All`).
async fn announce_writes(ctx: &TenantLoop, tenant: &Tenant, writes: &[placement::Edit]) {
    for edit in writes {
        let problem = matches!(edit.kind, EditKind::DropDuplicate | EditKind::Restore);
        if ctx.settings.events == EventLevel::Problems && !problem {
            continue;
        }
        let held = edit
            .entry
            .as_ref()
            .map(|e| e.resources.to_string())
            .unwrap_or_default();
        let (kind, reason, note) = match edit.kind {
            EditKind::Reserve => (
                EventType::Normal,
                "Placed",
                format!("reserved {held} on {}", edit.node),
            ),
            EditKind::Restore => (
                EventType::Warning,
                "ReservationRestored",
                format!(
                    "{} no longer held its reservation of {held} (wiped, or the node re-created); \
                     written back",
                    edit.node
                ),
            ),
            EditKind::Resize => (
                EventType::Normal,
                "Resized",
                format!("now holds {held} on {}", edit.node),
            ),
            EditKind::DropDuplicate => (
                EventType::Warning,
                "DuplicateReleased",
                format!("released a duplicate reservation on {}", edit.node),
            ),
            EditKind::Release => (
                EventType::Normal,
                "Released",
                format!("released its reservation on {}", edit.node),
            ),
            EditKind::Migrate => (
                EventType::Normal,
                "Migrating",
                format!(
                    "reserved {held} on {} to move there, make-before-break",
                    edit.node
                ),
            ),
            EditKind::FinishMigration => (
                EventType::Normal,
                "Migrated",
                format!(
                    "released its reservation on {}: the move is complete",
                    edit.node
                ),
            ),
            EditKind::AbortMigration => (
                EventType::Normal,
                "MigrationCancelled",
                format!(
                    "released the reservation on {}: the move cannot complete (the drain was \
                     cancelled, or the target stopped taking tenants)",
                    edit.node
                ),
            ),
        };
        publish(ctx.events.as_ref(), tenant, kind, reason, note).await;
    }
}

/// A Warning event for failures a person should see (the error is also logged and requeued).
async fn announce_failure(events: Option<&EventPublisher>, tenant: &Tenant, error: &Error) {
    let reason = match error {
        Error::ConflictRetriesExhausted { .. } => "ConflictRetriesExhausted",
        Error::UnreadableNode { .. } => "UnreadableNode",
        _ => return,
    };
    publish(
        events,
        tenant,
        EventType::Warning,
        reason,
        error.to_string(),
    )
    .await;
}

/// Publishes one Event on the tenant; a failure to publish is logged, never fatal.
async fn publish(
    events: Option<&EventPublisher>,
    tenant: &Tenant,
    type_: EventType,
    reason: &str,
    note: String,
) {
    EventPublisher::publish_about(events, tenant, (type_, reason, "Reconcile"), note).await;
}

/// Writes the status when it differs from the current one (merge patch of the status
/// subresource). Returns the tenant as written, when a write was made.
/// `{"status": …}`, serialized from the status itself.
#[derive(Debug, Serialize)]
struct StatusPatch<'a> {
    status: PatchedStatus<'a>,
}

#[derive(Debug, Serialize)]
struct PatchedStatus<'a> {
    #[serde(flatten)]
    status: &'a TenantStatus,
    /// A merge patch keeps what it leaves out: a finished move's record is removed by a null.
    #[serde(skip_serializing_if = "Option::is_none")]
    migration: Option<Null>,
}

/// Serializes as `null`.
#[derive(Debug, Serialize)]
struct Null;

impl<'a> StatusPatch<'a> {
    fn of(status: &'a TenantStatus) -> Self {
        Self {
            status: PatchedStatus {
                status,
                migration: status.migration.is_none().then_some(Null),
            },
        }
    }
}

async fn write_status(
    api: &Api<Tenant>,
    tenant: &Tenant,
    wanted: &WantedStatus,
    key: &str,
    copies: &newest::Newest<Tenant>,
) -> Result<Option<Arc<Tenant>>, Error> {
    let status = status_for(tenant, wanted, &Time(k8s_openapi::jiff::Timestamp::now()));
    if tenant.status.as_ref() == Some(&status) {
        return Ok(None);
    }
    match api
        .patch_status(
            &tenant.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&StatusPatch::of(&status)),
        )
        .await
    {
        Ok(patched) => Ok(Some(copies.remember(patched))),
        // Deleted meanwhile (without a finalizer nothing holds it): nothing left to tell.
        Err(error) if crate::error::is_not_found(&error) => Ok(None),
        Err(source) => Err(Error::WriteTenantStatus {
            tenant: key.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::status::tests::wanted;
    use super::*;

    #[tokio::test]
    async fn a_namespace_api_is_made_once_and_the_table_stays_bounded() {
        let (service, _server) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let client = kube::Client::new(service, "default");
        let apis = NamespaceApis::default();
        let team = apis.of(&client, "team-a");
        assert!(Arc::ptr_eq(&team, &apis.of(&client, "team-a")));
        assert!(
            apis.of(&client, "team-b")
                .resource_url()
                .contains("/namespaces/team-b/")
        );
        for i in 0..NamespaceApis::MOST {
            apis.of(&client, &format!("ns-{i}"));
        }
        let held = apis.0.lock().unwrap().len();
        assert!(held <= NamespaceApis::MOST, "{held}");
        // Emptied on the way: team-a is made anew.
        assert!(!Arc::ptr_eq(&team, &apis.of(&client, "team-a")));
    }

    #[test]
    fn when_a_tenant_is_looked_at_again() {
        use PlacedReason as R;
        use TenantPhase as P;
        let cases = [
            (P::PendingCapacity, R::NoCapacity, true, Next::Soon),
            (P::PendingCapacity, R::QueuedBehindOlder, false, Next::Waits),
            (P::Resizing, R::ResizeBlocked, false, Next::Waits),
            (P::Resizing, R::ResizeBlocked, true, Next::Waits),
            (P::Active, R::MigrationBlocked, false, Next::Waits),
            (P::Suspended, R::MigrationBlocked, false, Next::Waits),
            (P::Active, R::Reserved, false, Next::Rests),
            (P::Active, R::Reserved, true, Next::Rests),
            (P::Migrating, R::Migrating, false, Next::Rests),
            (P::Suspended, R::Suspended, false, Next::Rests),
            (P::Pending, R::InvalidSpec, false, Next::Rests),
        ];
        for (phase, reason, held_back, expected) in cases {
            let got = next(&wanted(phase, Some("n1"), reason), held_back);
            assert_eq!(got, expected, "{phase:?} {reason:?} held back {held_back}");
        }
    }

    #[test]
    fn a_status_patch_is_the_status_with_a_null_for_a_finished_move() {
        let mut status = TenantStatus {
            phase: TenantPhase::Active,
            node_name: "n1".into(),
            ..TenantStatus::default()
        };
        let mut expected = json!({"status": status});
        expected["status"]["migration"] = serde_json::Value::Null;
        assert_eq!(
            serde_json::to_value(StatusPatch::of(&status)).unwrap(),
            expected
        );
        status.migration = Some(MigrationStatus {
            from: "n1".into(),
            to: "n2".into(),
        });
        assert_eq!(
            serde_json::to_value(StatusPatch::of(&status)).unwrap(),
            json!({"status": status})
        );
        assert_eq!(
            serde_json::to_value(StatusPatch::of(&status)).unwrap()["status"]["migration"],
            json!({"from": "n1", "to": "n2"})
        );
    }
}
