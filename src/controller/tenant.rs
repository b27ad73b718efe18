//! Tenant reconcile: finalizer, then one decision (or release) through the engine, then the
//! Tenant status as a view of what the Node holds.
//!
//! ```text
//!   Tenant ─▶ finalizer present? ─no─▶ JSON patch (test + add) ─▶ continue with the patched object
//!        └─ deleting? ─▶ engine.release(uid) ─▶ JSON patch (test + remove) the finalizer
//!        └─ footprint = resources x replicas (checked) ─▶ engine.decide ─▶ WantedStatus ─▶ status if changed
//! ```
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

use std::sync::Arc;

use super::runner::Action;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use placement::{EditKind, MoveBlock, Plan, Resources, TenantWants};
use serde::Serialize;
use serde_json::json;

use super::engine::Committed;
use super::engine::Engine;
use super::publisher::{EventPublisher, Occurrence};
use super::settings::{Backoff, EventLevel, Settings, error_delay};
use super::state::newest;
use super::state::room::Asked;
use super::state::{PurchaseNotes, RoomOrders, TenantCache, WaitingRoom};
use crate::api::{
    Condition, MigrationStatus, PLACED_CONDITION, PlacedReason, TENANT_FINALIZER, Tenant,
    TenantPhase, TenantStatus,
};
use crate::error::Error;
use crate::metrics::Metrics;

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
    pub room: Option<Arc<RoomOrders>>,
    /// Publishes Kubernetes Events; `None` publishes nothing (scripted-mock tests).
    pub events: Option<EventPublisher>,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
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
        settings: Settings,
    ) -> Self {
        TenantLoop {
            client,
            engine,
            tenants,
            tenant_copies: Arc::default(),
            waiting,
            notes: Arc::default(),
            room: None,
            events: None,
            metrics: Arc::default(),
            pending_backoff: Backoff::new(settings.pending_recheck, settings.pending_recheck_max),
            error_backoff: Backoff::new(settings.error_backoff, settings.error_backoff_max),
            settings,
            apis: NamespaceApis::default(),
        }
    }

    /// When to try a tenant again after `error` (its backoff).
    pub fn retry_after(&self, tenant: &Tenant, error: &Error) -> std::time::Duration {
        error_delay(tenant, error, &self.error_backoff)
    }
}

/// What the status should say, before it is merged with the current one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WantedStatus {
    pub phase: TenantPhase,
    /// The node it holds its reservation on (the one it leaves, while it moves); none while it
    /// holds nothing.
    pub node: Option<String>,
    pub reserved: Resources,
    pub message: String,
    /// The Placed condition's status: it holds the reservation its spec asks, where it asks.
    pub placed: bool,
    pub reason: PlacedReason,
    /// The move in flight, while the tenant is reserved on both nodes.
    pub migration: Option<MigrationStatus>,
}

impl WantedStatus {
    /// Prefixes the note on a lost reservation; a status that holds nothing takes its reason.
    fn with_lost_note(&mut self, note: &str) {
        self.message = format!("{note}; {}", self.message);
        if !self.placed {
            self.reason = PlacedReason::ReservationLost;
        }
    }
}

/// The note on a lost reservation that the tenant's status carries, if it carries one.
fn lost_note(tenant: &Tenant) -> Option<&str> {
    if tenant.placed_reason() != Some(PlacedReason::ReservationLost) {
        return None;
    }
    let status = tenant.status.as_ref()?;
    status.message.split_once("; ").map(|(note, _)| note)
}

/// The status a resting plan means. Pure.
pub fn wanted_status(plan: &Plan, suspend: bool, footprint: Resources) -> WantedStatus {
    let holding = |phase, node: &str, reserved, message, reason| WantedStatus {
        phase,
        node: Some(node.to_owned()),
        reserved,
        message,
        placed: true,
        reason,
        migration: None,
    };
    match plan {
        Plan::Holding { node, reserved } if suspend => holding(
            TenantPhase::Suspended,
            node,
            *reserved,
            format!("suspended; keeps its reservation of {reserved} on {node}"),
            PlacedReason::Suspended,
        ),
        Plan::Holding { node, reserved } => holding(
            TenantPhase::Active,
            node,
            *reserved,
            format!("holds {reserved} on {node}"),
            PlacedReason::Reserved,
        ),
        // A suspended tenant asks for nothing: its larger footprint waits until it resumes.
        Plan::ResizeBlocked { node, reserved, .. } if suspend => holding(
            TenantPhase::Suspended,
            node,
            *reserved,
            format!(
                "suspended; keeps its reservation of {reserved} on {node}; its new footprint of \
                 {footprint} is asked for when it resumes"
            ),
            PlacedReason::Suspended,
        ),
        Plan::ResizeBlocked {
            node,
            reserved,
            shortfall,
            node_offline,
        } => {
            let why = if *node_offline {
                format!("{node} is Offline")
            } else {
                shortfall.to_string()
            };
            holding(
                TenantPhase::Resizing,
                node,
                *reserved,
                format!(
                    "keeps {reserved} on {node}; the new footprint of {footprint} does not fit there yet ({why})"
                ),
                PlacedReason::ResizeBlocked,
            )
        }
        Plan::Pending(no_fit) => WantedStatus {
            phase: TenantPhase::PendingCapacity,
            node: None,
            reserved: Resources::ZERO,
            message: format!("waiting for capacity for {footprint}: {no_fit}"),
            placed: false,
            reason: PlacedReason::NoCapacity,
            migration: None,
        },
        Plan::SuspendedUnplaced => WantedStatus {
            phase: TenantPhase::Suspended,
            node: None,
            reserved: Resources::ZERO,
            message: "suspended; holds no reservation and will be placed when resumed".into(),
            placed: false,
            reason: PlacedReason::Suspended,
            migration: None,
        },
        Plan::Migrating { from, to, reserved } => WantedStatus {
            phase: TenantPhase::Migrating,
            node: Some(from.clone()),
            reserved: *reserved,
            message: format!(
                "moving from {from} to {to} ({from} is draining): reserved on both until the move \
                 completes"
            ),
            placed: true,
            reason: PlacedReason::Migrating,
            migration: Some(MigrationStatus {
                from: from.clone(),
                to: to.clone(),
            }),
        },
        Plan::MoveBlocked {
            node,
            reserved,
            why,
        } => {
            let (why, reason) = match why {
                MoveBlock::NoRoom(no_fit) => (
                    format!("no other node can take it now ({no_fit}); it moves when room appears"),
                    PlacedReason::MigrationBlocked,
                ),
                MoveBlock::Turn { in_flight } => (
                    format!(
                        "it moves when one of the {in_flight} moves in flight completes \
                         (--max-migrations)"
                    ),
                    PlacedReason::MigrationWaiting,
                ),
            };
            // A new footprint waits too: it is asked for on the node the tenant moves to.
            let (phase, resize) = if suspend {
                (TenantPhase::Suspended, String::new())
            } else if footprint != *reserved {
                (
                    TenantPhase::Resizing,
                    format!("; its new footprint of {footprint} is asked for once it has moved"),
                )
            } else {
                (TenantPhase::Active, String::new())
            };
            holding(
                phase,
                node,
                *reserved,
                format!("holds {reserved} on {node}, which is draining; {why}{resize}"),
                reason,
            )
        }
        Plan::Queued { behind } => WantedStatus {
            phase: TenantPhase::PendingCapacity,
            node: None,
            reserved: Resources::ZERO,
            message: format!(
                "waiting its turn for {footprint}: StrictFIFO places tenants oldest first, and \
                 the older {behind} still waits for room"
            ),
            placed: false,
            reason: PlacedReason::QueuedBehindOlder,
            migration: None,
        },
        // decide() never answers an edit; treat one as "not at rest yet".
        Plan::Edit(edit) => WantedStatus {
            phase: TenantPhase::Pending,
            node: None,
            reserved: Resources::ZERO,
            message: format!("placement in progress on {}", edit.node),
            placed: false,
            reason: PlacedReason::InProgress,
            migration: None,
        },
    }
}

/// The message of a move asked to make room (`--make-room-moves`) says so, rather than that its
/// source is draining. Pure.
fn asked_for(wanted: &mut WantedStatus, asked: &Asked) {
    let moving = wanted
        .migration
        .as_ref()
        .is_some_and(|m| m.from == asked.from && m.to == asked.to);
    if moving {
        wanted.message = format!(
            "moving from {} to {} to make room for {}: reserved on both until the move completes",
            asked.from, asked.to, asked.waiter
        );
    }
}

/// What the status says while a decision cannot be made (an unreadable node, conflicts past the
/// budget, a failed write): the reservation as last seen, and why nothing moved.
fn undecided(tenant: &Tenant, error: &Error) -> WantedStatus {
    let status = tenant.status.clone().unwrap_or_default();
    let node = Some(status.node_name).filter(|n| !n.is_empty());
    WantedStatus {
        phase: status.phase,
        placed: node.is_some(),
        node,
        reserved: status.reserved.to_resources().unwrap_or_default(),
        message: format!("cannot be decided now, will retry: {error}"),
        reason: PlacedReason::Undecided,
        migration: status.migration,
    }
}

/// The full status for a wanted status, keeping the condition's transition time when it did not flip.
pub fn status_for(tenant: &Tenant, wanted: &WantedStatus, now: &Time) -> TenantStatus {
    let previous = tenant
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let generation = tenant.metadata.generation;
    TenantStatus {
        phase: wanted.phase,
        node_name: wanted.node.clone().unwrap_or_default(),
        reserved: wanted.reserved.into(),
        message: wanted.message.clone(),
        observed_generation: generation,
        migration: wanted.migration.clone(),
        // The sentence is `message`'s, and the generation `observedGeneration`'s: the condition
        // says each once, not twice (every byte of a status is decoded, stored and sent to
        // every watcher at each write).
        conditions: vec![Condition::keeping_time(
            previous,
            PLACED_CONDITION,
            if wanted.placed { "True" } else { "False" },
            wanted.reason.as_str(),
            String::new(),
            None,
            now,
        )],
    }
}

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
            write_status(&api, &tenant, &wanted, &key, &ctx).await?;
            return Ok(Action::await_change());
        }
    };
    if let Some(wanted) = outside_pool(&tenant, &ctx).await? {
        ctx.waiting.withdraw(&uid);
        ctx.metrics.outside_pool();
        tracing::warn!(tenant = %key, node = wanted.node.as_deref().unwrap_or_default(),
            "the tenant holds a reservation outside this pool; it is left where it is");
        write_status(&api, &tenant, &wanted, &key, &ctx).await?;
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
        if let Some(asked) = ctx.room.as_ref().and_then(|room| room.asked(&uid)) {
            asked_for(&mut wanted, &asked);
        }
        let recorded = write_status(&api, &tenant, &wanted, &key, &ctx).await?;
        announce(&ctx, &tenant, &committed.writes, &wanted).await;
        if let Some(recorded) = recorded {
            tenant = recorded;
        }
        let Some(next) = decide(&api, &tenant, &uid, &key, footprint, created, &ctx).await? else {
            return Ok(Action::await_change());
        };
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
        publish(&ctx, &tenant, EventType::Warning, reason, note.clone()).await;
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
    write_status(&api, &tenant, &wanted, &key, &ctx).await?;
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

    Ok(match next(&wanted, committed.held_back) {
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
        None => read(api, &tenant, key, ctx).await,
    }
}

/// What the status says of a spec that cannot be used: whatever is `held` stays, and why nothing
/// else happens. Pure.
fn unusable_spec(
    held: Option<(String, Resources)>,
    problem: &impl std::fmt::Display,
) -> WantedStatus {
    WantedStatus {
        phase: if held.is_some() {
            TenantPhase::Active
        } else {
            TenantPhase::Pending
        },
        node: held.as_ref().map(|(n, _)| n.clone()),
        reserved: held.map(|(_, r)| r).unwrap_or_default(),
        message: format!("spec cannot be used, nothing changed: {problem}"),
        placed: false,
        reason: PlacedReason::InvalidSpec,
        migration: None,
    }
}

/// The node the tenant's status names that holds no entry of it any more, when the entry could
/// not go back there (`wanted` names another node, and not the one a recorded move goes to):
/// its reservation there was lost. Pure.
fn lost_on<'a>(status: Option<&'a TenantStatus>, wanted: &WantedStatus) -> Option<&'a str> {
    let named = status
        .map(|s| s.node_name.as_str())
        .filter(|n| !n.is_empty())?;
    let moved_to = status
        .and_then(|s| s.migration.as_ref())
        .map(|m| m.to.as_str());
    let elsewhere = |node: &str| wanted.node.as_deref() != Some(node);
    (elsewhere(named) && moved_to.is_none_or(elsewhere)).then_some(named)
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
    let asked = ctx.room.as_ref().and_then(|room| room.asked(uid));
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
    match ctx.engine.decide_created(&wants, created).await {
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
            announce_failure(ctx, tenant, &error).await;
            let wanted = undecided(tenant, &error);
            write_status(api, tenant, &wanted, key, ctx).await?;
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
        announce_failure(ctx, tenant, &error).await;
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
        };
        write_status(api, tenant, &wanted, key, ctx).await?;
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
    ctx: &TenantLoop,
) -> Result<Option<Arc<Tenant>>, Error> {
    match api.get(&tenant.name_any()).await {
        // Deleted and made again since: the new object's own event reconciles it.
        Ok(fresh) if fresh.uid() != tenant.uid() => Ok(None),
        Ok(fresh) => Ok(Some(ctx.tenant_copies.remember(fresh))),
        Err(error) if crate::error::is_not_found(&error) => {
            ctx.tenant_copies
                .forget(tenant.namespace().as_deref(), &tenant.name_any());
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
        publish(ctx, tenant, EventType::Warning, reason, note).await;
    }
    let was = tenant.status.as_ref().map(|s| s.phase);
    if was != Some(wanted.phase) {
        match wanted.phase {
            TenantPhase::PendingCapacity => {
                publish(
                    ctx,
                    tenant,
                    EventType::Normal,
                    "Pending",
                    wanted.message.clone(),
                )
                .await;
            }
            TenantPhase::Resizing => {
                publish(
                    ctx,
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
        match still_there(tenant, &uid, ctx).await {
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
async fn still_there(tenant: &Tenant, uid: &str, ctx: &TenantLoop) -> Result<bool, Error> {
    let api: Api<super::state::decode::Decoded<Tenant>> =
        Api::namespaced(ctx.client.clone(), &tenant.namespace().unwrap_or_default());
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
        publish(ctx, tenant, kind, reason, note).await;
    }
}

/// A Warning event for failures a person should see (the error is also logged and requeued).
async fn announce_failure(ctx: &TenantLoop, tenant: &Tenant, error: &Error) {
    let reason = match error {
        Error::ConflictRetriesExhausted { .. } => "ConflictRetriesExhausted",
        Error::UnreadableNode { .. } => "UnreadableNode",
        _ => return,
    };
    publish(ctx, tenant, EventType::Warning, reason, error.to_string()).await;
}

/// Publishes one Event on the tenant; a failure to publish is logged, never fatal.
async fn publish(ctx: &TenantLoop, tenant: &Tenant, type_: EventType, reason: &str, note: String) {
    let occurrence = Occurrence {
        type_,
        reason,
        action: "Reconcile",
        note,
    };
    EventPublisher::publish_or_log(ctx.events.as_ref(), occurrence, tenant.object_ref(&())).await;
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
    ctx: &TenantLoop,
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
        Ok(patched) => Ok(Some(ctx.tenant_copies.remember(patched))),
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

    fn wanted(phase: TenantPhase, node: Option<&str>, reason: PlacedReason) -> WantedStatus {
        WantedStatus {
            phase,
            node: node.map(str::to_owned),
            reserved: Resources::ZERO,
            message: String::new(),
            placed: node.is_some(),
            reason,
            migration: None,
        }
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
    fn a_reservation_is_lost_when_the_named_node_is_neither_where_it_is_nor_where_it_moves() {
        let status = |node: &str, moving_to: Option<&str>| TenantStatus {
            node_name: node.into(),
            migration: moving_to.map(|to| MigrationStatus {
                from: node.into(),
                to: to.into(),
            }),
            ..TenantStatus::default()
        };
        let on = |node: Option<&str>| wanted(TenantPhase::Active, node, PlacedReason::Reserved);
        let cases: [(TenantStatus, Option<&str>, Option<&str>); 7] = [
            (status("n1", None), Some("n1"), None),
            (status("n1", None), Some("n2"), Some("n1")),
            (status("n1", None), None, Some("n1")),
            // A recorded move: now on its target is no loss.
            (status("n1", Some("n2")), Some("n2"), None),
            (status("n1", Some("n2")), Some("n3"), Some("n1")),
            (status("n1", Some("n2")), None, Some("n1")),
            // A status that names no node lost nothing.
            (status("", None), Some("n2"), None),
        ];
        for (status, now, lost) in cases {
            assert_eq!(
                lost_on(Some(&status), &on(now)),
                lost,
                "{status:?} now on {now:?}"
            );
        }
        assert_eq!(lost_on(None, &on(Some("n1"))), None);
    }

    #[test]
    fn an_unusable_spec_keeps_what_is_held_and_says_why() {
        let held = unusable_spec(Some(("n1".into(), Resources::new(2, 4, 20))), &"replicas 0");
        assert_eq!(
            (held.phase, held.node.as_deref(), held.reserved, held.placed),
            (
                TenantPhase::Active,
                Some("n1"),
                Resources::new(2, 4, 20),
                false
            )
        );
        assert_eq!(held.reason, PlacedReason::InvalidSpec);
        assert_eq!(
            held.message,
            "spec cannot be used, nothing changed: replicas 0"
        );
        let none = unusable_spec(None, &"replicas 0");
        assert_eq!(
            (none.phase, none.node, none.reserved),
            (TenantPhase::Pending, None, Resources::ZERO)
        );
    }

    #[test]
    fn a_move_asked_to_make_room_says_whom_for_and_only_that_move() {
        let r = Resources::new;
        let plan = Plan::Migrating {
            from: "a".into(),
            to: "c".into(),
            reserved: r(3, 1, 1),
        };
        let asked = |from: &str, to: &str| Asked {
            from: from.into(),
            to: to.into(),
            waiter: "d/w".into(),
        };
        let mut wanted = wanted_status(&plan, false, r(3, 1, 1));
        asked_for(&mut wanted, &asked("a", "c"));
        assert_eq!(
            wanted.message,
            "moving from a to c to make room for d/w: reserved on both until the move completes"
        );
        // Another move (a drain's, to another node): its own message stays.
        let mut wanted = wanted_status(&plan, false, r(3, 1, 1));
        asked_for(&mut wanted, &asked("a", "b"));
        assert!(
            wanted.message.contains("(a is draining)"),
            "{}",
            wanted.message
        );
    }

    /// Every plan at rest, suspended or not, and a footprint that differs from what is held:
    /// the phase, node, reservation, whether it is placed, the reason and the message.
    #[test]
    fn wanted_status_table() {
        use placement::{Edit, EditKind, NoFit, Shortfall};
        let r = Resources::new;
        let (held, asks) = (r(2, 4, 20), r(4, 4, 20));
        let shortfall = Shortfall {
            requested: asks,
            available: r(3, 64, 100),
        };
        let no_fit = NoFit {
            eligible_nodes: 2,
            shortfall,
            selector: None,
            labelled_nodes: 0,
        };
        let holding = |node: &str| Plan::Holding {
            node: node.into(),
            reserved: held,
        };
        let resize = |node_offline| Plan::ResizeBlocked {
            node: "n1".into(),
            reserved: held,
            shortfall,
            node_offline,
        };
        let blocked = |why| Plan::MoveBlocked {
            node: "n1".into(),
            reserved: held,
            why,
        };
        let no_room = || blocked(MoveBlock::NoRoom(no_fit.clone()));
        use PlacedReason as R;
        use TenantPhase as P;
        // (plan, suspend, footprint) -> (phase, node, placed, reason, message)
        type Case<'a> = (Plan, bool, Resources, P, &'a str, bool, R, &'a str);
        #[rustfmt::skip]
        let cases: Vec<Case<'_>> = vec![
            (holding("n1"), false, held, P::Active, "n1", true, R::Reserved,
             "holds 2 threads, 4 GB memory, 20 GB storage on n1"),
            (holding("n1"), true, held, P::Suspended, "n1", true, R::Suspended,
             "suspended; keeps its reservation of 2 threads, 4 GB memory, 20 GB storage on n1"),
            (resize(false), false, asks, P::Resizing, "n1", true, R::ResizeBlocked,
             "keeps 2 threads, 4 GB memory, 20 GB storage on n1; the new footprint of 4 threads, \
              4 GB memory, 20 GB storage does not fit there yet (threads: needs 4, at most 3 free \
              (short by 1))"),
            (resize(true), false, asks, P::Resizing, "n1", true, R::ResizeBlocked,
             "keeps 2 threads, 4 GB memory, 20 GB storage on n1; the new footprint of 4 threads, \
              4 GB memory, 20 GB storage does not fit there yet (n1 is Offline)"),
            (resize(false), true, asks, P::Suspended, "n1", true, R::Suspended,
             "suspended; keeps its reservation of 2 threads, 4 GB memory, 20 GB storage on n1; \
              its new footprint of 4 threads, 4 GB memory, 20 GB storage is asked for when it \
              resumes"),
            (Plan::Pending(no_fit.clone()), false, asks, P::PendingCapacity, "", false,
             R::NoCapacity, ""),
            (Plan::SuspendedUnplaced, true, asks, P::Suspended, "", false, R::Suspended,
             "suspended; holds no reservation and will be placed when resumed"),
            (Plan::Queued { behind: "default/big".into() }, false, asks, P::PendingCapacity, "",
             false, R::QueuedBehindOlder,
             "waiting its turn for 4 threads, 4 GB memory, 20 GB storage: StrictFIFO places \
              tenants oldest first, and the older default/big still waits for room"),
            (Plan::Migrating { from: "n1".into(), to: "n2".into(), reserved: held }, false, held,
             P::Migrating, "n1", true, R::Migrating,
             "moving from n1 to n2 (n1 is draining): reserved on both until the move completes"),
            (no_room(), false, held, P::Active, "n1", true, R::MigrationBlocked, ""),
            (no_room(), false, asks, P::Resizing, "n1", true, R::MigrationBlocked, ""),
            (no_room(), true, asks, P::Suspended, "n1", true, R::MigrationBlocked, ""),
            (blocked(MoveBlock::Turn { in_flight: 3 }), false, held, P::Active, "n1", true,
             R::MigrationWaiting,
             "holds 2 threads, 4 GB memory, 20 GB storage on n1, which is draining; it moves \
              when one of the 3 moves in flight completes (--max-migrations)"),
            (Plan::Edit(Edit { kind: EditKind::Reserve, node: "n2".into(), uid: "u".into(),
             entry: None }), false, asks, P::Pending, "", false, R::InProgress,
             "placement in progress on n2"),
        ];
        for (plan, suspend, footprint, phase, node, placed, reason, message) in cases {
            let wanted = wanted_status(&plan, suspend, footprint);
            let case = format!("{plan:?}, suspend {suspend}, footprint {footprint}");
            assert_eq!(wanted.phase, phase, "{case}");
            assert_eq!(
                wanted.node.as_deref(),
                Some(node).filter(|n| !n.is_empty()),
                "{case}"
            );
            assert_eq!(wanted.placed, placed, "{case}");
            assert_eq!(wanted.reason, reason, "{case}");
            let expected_reserved = if placed { held } else { Resources::ZERO };
            assert_eq!(wanted.reserved, expected_reserved, "{case}");
            assert_eq!(wanted.migration.is_some(), reason == R::Migrating, "{case}");
            // An empty expectation: the message carries text from placement's own Display
            // (NoFit), checked where that is defined; here only its start.
            if message.is_empty() {
                let start = match reason {
                    R::NoCapacity => {
                        "waiting for capacity for 4 threads, 4 GB memory, 20 GB storage: "
                    }
                    _ => {
                        "holds 2 threads, 4 GB memory, 20 GB storage on n1, which is draining; no \
                          other node can take it now ("
                    }
                };
                assert!(
                    wanted.message.starts_with(start),
                    "{case}: {}",
                    wanted.message
                );
                let resize = "; its new footprint of 4 threads, 4 GB memory, 20 GB storage is \
                              asked for once it has moved";
                assert_eq!(
                    wanted.message.ends_with(resize),
                    phase == P::Resizing,
                    "{case}: {}",
                    wanted.message
                );
            } else {
                assert_eq!(wanted.message, message, "{case}");
            }
        }
    }

    #[test]
    fn a_placed_reason_reads_back_as_written() {
        for reason in PlacedReason::ALL {
            assert_eq!(PlacedReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(PlacedReason::parse("Placed"), None);
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
