//! Node requests: tenants that wait for capacity turn into a purchase a provisioner acts on, and
//! machines that hold nothing are handed back.
//!
//! ```text
//!   every request_check (leader only):
//!     Failed requests ──▶ Warning Event, deleted; the class rests (backoff doubling per failure)
//!     tenants PendingCapacity for ≥ request_after ──┐
//!     requests in flight (room that is coming) ─────┼──▶ placement::purchase (pure) ──▶ create
//!     NodeClasses (limits, costs; resting ones out) ┘        NodeRequests, stable names
//!     each waiting tenant's note ("node request X is Provisioning for it") ──▶ woken if it changed
//!     Nodes made for a request, empty for empty_node_after ──▶ their request deleted (handed back)
//! ```
//!
//! Rules enforced here (docs/design.md, "Node requests"):
//! - with no NodeClass (in the pool) and no request in flight, nothing is planned and no tenant
//!   gets a note: node requests are not in use, and 1,000 idle waiting tenants cost no write;
//! - a purchase is for tenants the queue will place on the machine when it arrives: tenants
//!   waiting for their first placement once they have waited `request_after` in
//!   `PendingCapacity` (from their Placed condition's transition), and blocked moves off a
//!   draining node (older than them, they take the room first), in queue order. Suspended and
//!   `Resizing` tenants are not planned for (a new node cannot take a resize); a move is planned
//!   for what it holds (it carries its entry as held). A tenant whose
//!   entry is already written (the engine writes the Node before the tenant) is not waiting;
//! - under StrictFIFO nothing younger than the head (the oldest first placement) is placed before
//!   it, so nothing is bought for them while the head is not planned for or no class holds it;
//!   they say so, and no machine is kept for them;
//! - a request's room (in flight or delivered) goes first to the waiting tenants it was bought
//!   for, while they fit (under StrictFIFO not those behind the head, which comes first); the
//!   plan counts what is left for the others. The engine holds a
//!   delivered machine's room for the same tenants (`engine::Bought`);
//! - a tenant with a node selector is planned only on classes whose nodes carry its labels
//!   (`placement::purchase_by_labels`);
//! - requests in flight (Pending, Provisioning, or Ready before its Node is seen) count as room,
//!   and as machines of their class against its limit; a request this process created counts
//!   from its create until the watch shows it (in any phase, or deleted): nothing is requested
//!   twice, and a request Failed or gone between two looks is not counted. A Ready request's Node
//!   (the one its `status.nodeName` names, else its own name) counts with its free room;
//! - a request's name is stable, `<class>-<hash of its class and tenants>` (a class name that
//!   would not make a DNS label is cut, dots made dashes; the hash covers it whole). A name
//!   another request holds is not reused: the next attempt's hash is taken. A create answered
//!   AlreadyExists reads what is there: the same purchase in flight is taken as made (a leader
//!   change), anything else is not;
//! - a Failed request, seen in the cache or in a watch event, is reported once (a Warning Event,
//!   the metric), deleted, and its class rests for a backoff that doubles with each failure in a
//!   row, so its tenants are planned on another class meanwhile, or on the same one after;
//! - a request still `Pending` (no provisioner took it up) whose class was deleted is withdrawn
//!   (deleted, guarded by its resourceVersion): the class was the leave to buy. A provisioner
//!   that serves only classes it knows (Cluster API) would never take it up;
//! - a refused create, delete or hand-back is logged and counted
//!   (`tenant_placer_node_request_errors_total{action}`) and tried again at the next look; it
//!   never stops the others;
//! - a Node labelled as made for a request, seen holding nothing for `empty_node_after` while
//!   no waiting tenant the queue would place there fits it, is handed back by deleting its
//!   request; the provisioner deletes the Node, whose finalizer keeps it while it holds
//!   reservations (a tenant placed there meanwhile is moved off first). Nothing is bought again
//!   for the demand a machine was handed back for, until it changes;
//! - in a pool (`--node-selector`), a NodeClass is the pool's when the Nodes it makes (its
//!   `spec.labels` and the class label) match the node selector, so every machine bought lands
//!   in the pool; a NodeRequest is the pool's when its class is. Only the pool's classes are
//!   bought, and only the pool's requests are counted as room, retired or handed back: pools
//!   buy side by side and never touch each other's requests. The tenants planned for are the
//!   pool's own (the tenant cache holds no other).

pub mod accounts;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tracing::Instrument;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use placement::{
    InFlightRequest, Labels, NewNode, NodeClassOffer, Policy, Purchase, QueueMode, Resources,
    SelectiveTenant, WaitingTenant,
};

use self::accounts::{Accounts, NodeSeen, RequestSeen, Use};
use super::consolidation;
use super::engine::Engine;
use super::make_room;
use super::publisher::{EventPublisher, Occurrence};
use super::settings::Settings;
use super::state::Synced;
use super::state::{Glance, PurchaseNotes, RoomOrders, TenantCache, WaitingRoom};
use crate::api::{
    CONSOLIDATING_ANNOTATION, Condition, DELIVERS_CONDITION, NODE_CLASS_LABEL, NODE_REQUEST_LABEL,
    Node, NodeClass, NodeRequest, NodeRequestPhase, NodeRequestSpec, NodeState, PLACED_CONDITION,
    ResourceAmounts, Tenant, TenantPhase,
};
use crate::error::Error;
use crate::metrics::Metrics;

/// What the request loop reads and writes through.
pub struct RequestLoop {
    pub client: kube::Client,
    /// The placement engine: its view of the nodes (what a machine holds).
    pub engine: Arc<Engine>,
    /// The tenant watch cache: who waits.
    pub tenants: TenantCache,
    /// Raised once the tenant cache holds its first full list.
    pub tenants_synced: Synced,
    /// Tenants waiting for room: one whose note changed is woken.
    pub waiting: Arc<WaitingRoom>,
    /// What the loop remembers between looks (the request watch feeds it too).
    pub purchases: Arc<Purchases>,
    /// What each waiting tenant's status adds (the tenant loop reads them).
    pub notes: Arc<PurchaseNotes>,
    /// What consolidation remembers between looks.
    pub consolidation: Arc<consolidation::Memory>,
    /// The room being made by moves (`None`: make-room is off).
    pub room: Option<Arc<RoomOrders>>,
    /// Publishes Kubernetes Events; `None` publishes nothing.
    pub events: Option<EventPublisher>,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
}

impl std::fmt::Debug for RequestLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLoop")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What the request loop remembers between looks.
#[derive(Debug, Default)]
pub struct Purchases(Mutex<Remembered>);

#[derive(Debug, Default)]
struct Remembered {
    /// Requests created by this process that the watch has not shown yet.
    created: HashMap<String, (NodeRequestSpec, Instant)>,
    /// Names of requests the watch showed (in any phase, or deleted) since the last look: a
    /// created request the watch has shown is known by the cache from then on, or is gone.
    shown: HashSet<String>,
    /// Failed requests the watch showed since the last look, by name: seen even when they are
    /// gone before the next look.
    failed: HashMap<String, NodeRequest>,
    /// By UID: Failed requests reported (Event, rest), so each is reported once.
    retired: HashMap<String, Instant>,
    /// By class: resting until, and failures in a row.
    resting: HashMap<String, (Instant, u32)>,
    /// By request UID: since when it has been Idle or Orphaned.
    idle_since: HashMap<String, Instant>,
    /// Strays (`node request`) and orphans (UID) reported, so each is reported once.
    reported: HashSet<String>,
    /// What the last plan read (a hash), when it bought nothing: the same input plans the same.
    planned: Option<u64>,
    /// The tenants the last plan could find no machine for, and why (their notes).
    unplaceable: HashMap<String, String>,
    /// The demand (a hash of the tenants planned for) when a machine was last handed back:
    /// nothing is bought again for it until it changes.
    handed_back_for: Option<u64>,
}

impl Remembered {
    /// The classes resting now (a request of theirs failed); forgets rests over long enough ago.
    fn resting_classes(&mut self, now: Instant) -> HashSet<String> {
        self.resting.retain(|_, (until, failures)| {
            *failures > 0 && now.saturating_duration_since(*until) < LONGEST_REST
        });
        self.resting
            .iter()
            .filter(|(_, (until, _))| now < *until)
            .map(|(class, _)| class.clone())
            .collect()
    }
}

/// The first rest of a class whose request failed; it doubles with each failure in a row.
const FIRST_REST: Duration = Duration::from_secs(30);
/// The longest rest.
const LONGEST_REST: Duration = Duration::from_secs(1800);
/// A created request the watch has not shown after this long is forgotten (it was refused).
const CREATED_KEPT: Duration = Duration::from_secs(60);
/// How long a Failed request's UID is remembered as reported.
const RETIRED_KEPT: Duration = Duration::from_secs(600);
/// Names tried for one purchase when the stable one is taken by another request.
const NAME_ATTEMPTS: u32 = 8;

impl Purchases {
    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called with every event of the request watch: what a look between two snapshots would
    /// miss (a request created and Failed, or deleted, in between) is kept for the next look.
    pub fn observe(&self, event: &watcher::Event<NodeRequest>) {
        let (watcher::Event::Apply(request)
        | watcher::Event::InitApply(request)
        | watcher::Event::Delete(request)) = event
        else {
            return;
        };
        let mut remembered = self.lock();
        let name = request.name_any();
        if request.phase() == NodeRequestPhase::Failed {
            remembered.failed.insert(name.clone(), request.clone());
        }
        remembered.shown.insert(name);
    }
}

/// Runs the looks until the task is dropped (it runs while this replica leads). Nothing is
/// planned before every cache has synced: a request the watch has not listed yet would be
/// bought again.
pub async fn run(
    ctx: Arc<RequestLoop>,
    (classes, classes_synced): (Store<NodeClass>, Synced),
    (requests, requests_synced): (Store<NodeRequest>, Synced),
) {
    let Some(request_after) = ctx.settings.request_after else {
        return;
    };
    loop {
        tokio::time::sleep(ctx.settings.request_check).await;
        let caches = [
            ctx.engine.synced(),
            &ctx.tenants_synced,
            &classes_synced,
            &requests_synced,
        ];
        for cache in caches {
            if cache.wait().await.is_err() {
                return;
            }
        }
        // A span per look (docs/operating.md, "Traces"): what it saw and what it did.
        let span = tracing::info_span!(
            "purchase_look",
            waiting = tracing::field::Empty,
            requested = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        look(&ctx, &classes, &requests, request_after)
            .instrument(span)
            .await;
        ctx.metrics.request_look_done();
    }
}

/// One look: failed requests, new requests, the tenants' notes, machines to hand back. A
/// refused write is logged and counted, and never stops the rest of the look.
async fn look(
    ctx: &RequestLoop,
    classes: &Store<NodeClass>,
    requests: &Store<NodeRequest>,
    request_after: Duration,
) {
    let api: Api<NodeRequest> = Api::all(ctx.client.clone());
    let pool = Pool::of(ctx, classes);
    retire_failed(ctx, &api, requests, &pool).await;
    withdraw_classless(ctx, &api, requests, classes, &pool).await;
    let live: Vec<Arc<NodeRequest>> = requests
        .state()
        .into_iter()
        .filter(|r| pool.owns(r))
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| r.phase() != NodeRequestPhase::Failed)
        .collect();
    let mut waiters = waiters(ctx);
    let span = tracing::Span::current();
    span.record("waiting", waiters.len());
    // Consolidation holds back while anyone waits, room being made for them or not.
    let anyone_waits = !waiters.is_empty();
    // Room made by moving smaller tenants first: a waiter given it is not bought for.
    let make_room::Made {
        notes: made,
        held,
        moving,
        fits,
    } = make_room(ctx, &waiters).await;
    waiters.retain(|w| {
        w.wait == Wait::Move || !(moving || held.contains(&w.key) || fits.contains(&w.key))
    });
    // Without a NodeClass nothing can be bought: node requests are not in use, and a note on
    // every waiting tenant saying so would be a status write each for nothing. (No machine is
    // handed back either: none is wanted by a live request.)
    let no_classes = !classes
        .state()
        .iter()
        .any(|class| pool.has_class(&class.name_any()));
    if no_classes && live.is_empty() {
        span.record("outcome", "no_classes");
        wake_changed(ctx, made);
        ctx.metrics.set_machines_idle([]);
        return consolidate(ctx, classes, anyone_waits, &Accounts::default()).await;
    }
    let demand = Demand::of(
        &waiters,
        ctx.settings.queue,
        request_after,
        Timestamp::now(),
    );
    // What every purchase is used for, and what each class really delivers, from one look at
    // the Nodes: a class is planned with what it delivers before anything is bought of it.
    let nodes = bought_nodes(ctx);
    let accounts = account(&live, &nodes, &demand);
    learn_delivered(ctx, &classes.state(), &accounts).await;
    let specs = ctx.purchases.requested(&live);
    let resting = ctx.purchases.lock().resting_classes(Instant::now());
    let offers = offers(&classes.state(), &resting, &specs, &pool, &accounts);
    let rooms: Vec<Room<'_>> = specs
        .iter()
        .filter_map(|r| {
            let capacity = room_of(ctx, r)?;
            let labels = classes
                .get(&ObjectRef::new(&r.spec.node_class))
                .map(|c| c.node_labels())
                .unwrap_or_else(|| {
                    Labels::from([(NODE_CLASS_LABEL.to_owned(), r.spec.node_class.clone())])
                });
            let name = r.name.clone();
            Some(Room {
                request: InFlightRequest { name, capacity },
                labels,
                bought_for: &r.spec.tenants,
            })
        })
        .collect();
    let (demand, in_flight) = demand.promise(rooms);
    // The planner can take a while under BestFit with many waiters: plan only when what it
    // reads changed since the last look.
    let input = fingerprint(&demand.planned, &offers, &in_flight);
    let unchanged = ctx.purchases.lock().planned == Some(input);
    let unplaceable = if unchanged {
        span.record("outcome", "unchanged");
        ctx.purchases.lock().unplaceable.clone()
    } else {
        let (purchase, unplaceable) = demand.plan(ctx.settings.policy, &offers, &in_flight);
        span.record("outcome", "planned");
        span.record("requested", purchase.requests.len());
        let again = ctx.purchases.lock().handed_back_for == Some(demand.fingerprint());
        if again && !purchase.requests.is_empty() {
            tracing::info!(
                requests = purchase.requests.len(),
                "node requests: nothing bought again for the demand a machine was handed back for"
            );
        }
        // A name is never reused while a request or a Node of that name exists: a provisioner
        // would take the Node there for the new request's machine (a zombie).
        let mut taken: HashSet<String> = requests.state().iter().map(|r| r.name_any()).collect();
        taken.extend(ctx.purchases.lock().created.keys().cloned());
        taken.extend(ctx.engine.cache().state().iter().map(|n| n.name_any()));
        for new in purchase.requests.iter().filter(|_| !again) {
            create(ctx, &api, new, &offers, &mut taken).await;
        }
        let mut remembered = ctx.purchases.lock();
        // A purchase made changes what the next look reads (the requests created).
        remembered.planned = (purchase.requests.is_empty() || again).then_some(input);
        remembered.unplaceable = unplaceable.clone();
        unplaceable
    };
    let unplaceable = with_unavailable(unplaceable, &classes.state(), &pool);
    let unplaceable = with_short_classes(unplaceable, &classes.state(), &demand, &pool);
    let mut notes = notes(&ctx.purchases.lock().created, &live, unplaceable);
    notes.extend(made);
    wake_changed(ctx, notes);
    report_strays(ctx, &accounts, &nodes).await;
    hand_back(ctx, &api, &live, (&accounts, &nodes), &demand).await;
    consolidate(ctx, classes, anyone_waits, &accounts).await;
}

/// Make-room's look over the waiters for a first placement (`--make-room-moves`): the notes of
/// those room is being made for (or could be, but not now), by `namespace/name`, and whether a
/// move to make room is in flight.
async fn make_room(ctx: &RequestLoop, waiters: &[Waiter]) -> make_room::Made {
    let Some(room) = &ctx.room else {
        return make_room::Made::default();
    };
    let mut first: Vec<&Waiter> = waiters
        .iter()
        .filter(|w| matches!(w.wait, Wait::First { .. }))
        .collect();
    first.sort_by(|a, b| (a.created, &a.key).cmp(&(b.created, &b.key)));
    let first: Vec<make_room::Waiter> = first
        .into_iter()
        .map(|w| make_room::Waiter {
            uid: w.uid.clone(),
            key: w.key.clone(),
            footprint: w.footprint,
            selector: w.selector.clone(),
        })
        .collect();
    let emptying = ctx
        .engine
        .cache()
        .state()
        .iter()
        .filter(|n| consolidation::consolidating(n) && !n.allocations().is_empty())
        .count();
    let look = make_room::Look {
        engine: &ctx.engine,
        tenants: &ctx.tenants,
        waiting: &ctx.waiting,
        room,
        events: ctx.events.as_ref(),
        metrics: &ctx.metrics,
        settings: &ctx.settings,
        emptying,
    };
    make_room::look(look, &first).await
}

/// Consolidation's look (`--consolidation WhenUnderutilized`), after the purchases';
/// `waiting`: whether a tenant waits.
async fn consolidate(
    ctx: &RequestLoop,
    classes: &Store<NodeClass>,
    waiting: bool,
    accounts: &Accounts,
) {
    if ctx.settings.consolidation != consolidation::Consolidation::WhenUnderutilized {
        return;
    }
    consolidation::look(consolidation::Look {
        client: &ctx.client,
        engine: &ctx.engine,
        tenants: &ctx.tenants,
        classes: &classes.state(),
        events: ctx.events.as_ref(),
        metrics: &ctx.metrics,
        settings: &ctx.settings,
        memory: &ctx.consolidation,
        waiting,
        bought: &|node: &str| accounts.owns(node),
    })
    .await;
}

/// A request in flight or Ready, as the plan counts it.
#[derive(Debug)]
struct Requested {
    name: String,
    spec: NodeRequestSpec,
    /// The Node a Ready request made (its `status.nodeName`, else its own name); `None` while
    /// in flight.
    node: Option<String>,
}

impl Purchases {
    /// Every request in flight or Ready: those the watch shows, and those this process created
    /// that it has not shown yet (once shown, the cache knows them, or they are gone).
    fn requested(&self, live: &[Arc<NodeRequest>]) -> Vec<Requested> {
        let mut remembered = self.lock();
        let shown = std::mem::take(&mut remembered.shown);
        remembered
            .created
            .retain(|name, (_, at)| !shown.contains(name) && at.elapsed() < CREATED_KEPT);
        live.iter()
            .map(|r| Requested {
                name: r.name_any(),
                spec: r.spec.clone(),
                node: (r.phase() == NodeRequestPhase::Ready).then(|| made_node(r).to_owned()),
            })
            .chain(
                remembered
                    .created
                    .iter()
                    .filter(|(name, _)| !live.iter().any(|r| r.name_any() == **name))
                    .map(|(name, (spec, _))| Requested {
                        name: name.clone(),
                        spec: spec.clone(),
                        node: None,
                    }),
            )
            .collect()
    }
}

/// The room a request brings that the plan counts: all its capacity while in flight (or Ready
/// before its Node is seen); once its Node is there, the Node's free room while it is Online. A
/// waiting tenant that fits there is placed there by the engine (the plan places the same
/// waiters in the same order); counting it would otherwise buy a machine for a tenant its
/// machine arrived for, in the moment before the engine places it.
fn room_of(ctx: &RequestLoop, request: &Requested) -> Option<Resources> {
    let Some(node) = request.node.as_deref().and_then(|n| ctx.engine.node(n)) else {
        return request.spec.capacity.to_resources().ok();
    };
    let ledger = node.ledger().ok()?;
    // An empty node consolidation drained is taken back into service when a waiter can use it.
    let reclaimable = consolidation::consolidating(&node) && node.allocations().is_empty();
    (ledger.state() == placement::NodeState::Online || reclaimable).then(|| {
        ledger
            .effective_capacity()
            .saturating_sub(ledger.allocated())
    })
}

/// The Node a Ready request made: the one its status names (a provisioner may name it
/// otherwise), else the one named after it.
fn made_node(request: &NodeRequest) -> &str {
    request
        .status
        .as_ref()
        .map(|s| s.node_name.as_str())
        .filter(|n| !n.is_empty())
        .or(request.metadata.name.as_deref())
        .unwrap_or_default()
}

/// The NodeClasses of this controller's pool: `None` when it has no node selector (all are).
struct Pool(Option<HashSet<String>>);

impl Pool {
    fn of(ctx: &RequestLoop, classes: &Store<NodeClass>) -> Pool {
        let Some(selector) = ctx.settings.pool_nodes.as_ref() else {
            return Pool(None);
        };
        let ours = classes
            .state()
            .into_iter()
            .filter(|class| selector.matches(&class.node_labels()))
            .map(|class| class.name_any())
            .collect();
        Pool(Some(ours))
    }

    fn has_class(&self, class: &str) -> bool {
        self.0.as_ref().is_none_or(|ours| ours.contains(class))
    }

    /// Whether a request is this pool's: its class is.
    fn owns(&self, request: &NodeRequest) -> bool {
        self.has_class(&request.spec.node_class)
    }
}

/// A hash of what the planner reads.
fn fingerprint(
    planned: &[SelectiveTenant],
    offers: &[(NodeClassOffer, Labels)],
    in_flight: &[(InFlightRequest, Labels)],
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for tenant in planned {
        let footprint = tenant.waiting.footprint;
        (&tenant.waiting.tenant, &tenant.selector).hash(&mut hasher);
        (footprint.threads, footprint.memory_gb, footprint.storage_gb).hash(&mut hasher);
    }
    for (offer, labels) in offers {
        let capacity = offer.capacity;
        (&offer.name, labels).hash(&mut hasher);
        (capacity.threads, capacity.memory_gb, capacity.storage_gb).hash(&mut hasher);
        (offer.monthly_cost, offer.limit, offer.in_use).hash(&mut hasher);
    }
    for (request, labels) in in_flight {
        let capacity = request.capacity;
        (&request.name, labels).hash(&mut hasher);
        (capacity.threads, capacity.memory_gb, capacity.storage_gb).hash(&mut hasher);
    }
    hasher.finish()
}

/// Reports each Failed request once (a Warning Event, the metric, its class rests), and deletes
/// it: those the cache shows and those the watch showed Failed since the last look, gone or not.
async fn retire_failed(
    ctx: &RequestLoop,
    api: &Api<NodeRequest>,
    requests: &Store<NodeRequest>,
    pool: &Pool,
) {
    let seen = std::mem::take(&mut ctx.purchases.lock().failed);
    let mut failed: Vec<(NodeRequest, bool)> = seen
        .into_values()
        .map(|r| {
            let present = requests
                .get(&ObjectRef::new(&r.name_any()))
                .is_some_and(|now| now.metadata.uid == r.metadata.uid);
            (r, present)
        })
        .collect();
    for request in requests.state() {
        if request.phase() == NodeRequestPhase::Failed
            && !failed
                .iter()
                .any(|(r, _)| r.metadata.uid == request.metadata.uid)
        {
            failed.push((request.as_ref().clone(), true));
        }
    }
    failed.sort_by_key(|(r, _)| r.name_any());
    for (failed, present) in failed.into_iter().filter(|(r, _)| pool.owns(r)) {
        let name = failed.name_any();
        let uid = failed.metadata.uid.clone().unwrap_or_default();
        let first_time = {
            let mut remembered = ctx.purchases.lock();
            remembered
                .retired
                .retain(|_, at| at.elapsed() < RETIRED_KEPT);
            remembered.retired.insert(uid, Instant::now()).is_none()
        };
        if first_time {
            report_failure(ctx, &failed).await;
        }
        if !present || failed.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(source) => {
                refused(
                    ctx,
                    "retire",
                    name,
                    source,
                    "could not delete a Failed node request; will try again",
                );
            }
        }
    }
}

/// The requests not taken up yet (`Pending`) whose class is gone: nobody is to buy for them.
fn classless<'a>(
    requests: &'a [Arc<NodeRequest>],
    classes: &HashSet<String>,
) -> impl Iterator<Item = &'a NodeRequest> {
    requests.iter().map(AsRef::as_ref).filter(|r| {
        r.phase() == NodeRequestPhase::Pending
            && r.metadata.deletion_timestamp.is_none()
            && !classes.contains(&r.spec.node_class)
    })
}

/// Deletes this pool's requests no provisioner has taken up whose class was deleted meanwhile:
/// the class was the leave to buy. Their tenants are planned again; a provisioner that took one
/// up at the same time treats the deletion as a hand-back.
async fn withdraw_classless(
    ctx: &RequestLoop,
    api: &Api<NodeRequest>,
    requests: &Store<NodeRequest>,
    classes: &Store<NodeClass>,
    pool: &Pool,
) {
    let names: HashSet<String> = classes.state().iter().map(|c| c.name_any()).collect();
    let all = requests.state();
    for request in classless(&all, &names).filter(|r| pool.owns(r)) {
        let name = request.name_any();
        // Guarded: one taken up since the cache showed it is left to its provisioner.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: request.resource_version(),
                uid: request.metadata.uid.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => tracing::info!(
                request = %name,
                class = %request.spec.node_class,
                "node request withdrawn: its class was deleted before a provisioner took it up"
            ),
            Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 409 => {}
            Err(source) => refused(
                ctx,
                "withdraw",
                name,
                source,
                "could not withdraw a node request whose class is gone; will try again",
            ),
        }
    }
}

/// Whether `found`, a request under the name of a purchase about to be made, is that purchase
/// in flight: the same spec, not going, not Failed (anything else is another request's).
fn is_in_flight_for(found: &NodeRequest, spec: &NodeRequestSpec) -> bool {
    found.spec == *spec
        && found.metadata.deletion_timestamp.is_none()
        && found.phase() != NodeRequestPhase::Failed
}

/// How long a class rests after `failures` failed requests in a row: the first rest, doubling
/// with each failure, at most the longest. Pure.
fn rest_after(failures: u32) -> Duration {
    FIRST_REST
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(LONGEST_REST)
}

/// A Failed request's class rests (doubling per failure in a row); a Warning Event says why.
async fn report_failure(ctx: &RequestLoop, failed: &NodeRequest) {
    let name = failed.name_any();
    let class = failed.spec.node_class.clone();
    let why = failed
        .status
        .as_ref()
        .map(|s| s.message.clone())
        .unwrap_or_default();
    let rest = {
        let mut remembered = ctx.purchases.lock();
        let (until, failures) = remembered
            .resting
            .entry(class.clone())
            .or_insert((Instant::now(), 0));
        *failures = failures.saturating_add(1);
        let rest = rest_after(*failures);
        *until = Instant::now()
            .checked_add(rest)
            .unwrap_or_else(Instant::now);
        rest
    };
    tracing::warn!(request = %name, %class, %why, ?rest, "node request failed; the class rests");
    ctx.metrics.node_request_failed();
    let note = format!(
        "the provisioner could not deliver a {class}: {why}; {class} is not asked for again \
         for {} s, and its tenants are planned on another class meanwhile",
        rest.as_secs()
    );
    publish(ctx, failed, EventType::Warning, "ProvisioningFailed", note).await;
}

/// A tenant that waits for room, as purchases see it: its wants (`Tenant::waiting_wants`) and
/// what it waits for.
#[derive(Clone, Debug, PartialEq)]
struct Waiter {
    /// `namespace/name`.
    key: String,
    uid: String,
    created: Option<Timestamp>,
    footprint: Resources,
    selector: Option<Labels>,
    wait: Wait,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Wait {
    /// For its first placement (`PendingCapacity`), since its Placed condition changed.
    First { since: Option<Timestamp> },
    /// To move off a draining node that no other node can take it from now.
    Move,
}

/// The waiter a tenant is, as its status says, with its UID and the node it leaves (a move);
/// `None` when a machine could not take it: deleted, suspended, placed, resizing in place, or
/// with a spec that cannot be used. Pure.
fn waiter_of(t: &Tenant) -> Option<(Waiter, Option<String>)> {
    if !Glance::of(t).may_wait() || t.metadata.deletion_timestamp.is_some() || t.spec.suspend {
        return None;
    }
    let status = t.status.as_ref()?;
    let wait = if t.is_blocked_move() {
        Wait::Move
    } else if status.phase == TenantPhase::PendingCapacity {
        let since = status
            .conditions
            .iter()
            .find(|c| c.type_ == PLACED_CONDITION)
            .map(|c| c.last_transition_time.0);
        Wait::First { since }
    } else {
        return None;
    };
    let leaving = Some(status.node_name.clone()).filter(|n| !n.is_empty());
    // A move carries the entry as held (a resize is asked for once it has moved): the room it
    // needs is what it holds, whatever its spec asks now (`waiting_wants`).
    let wants = t.waiting_wants()?;
    let waiter = Waiter {
        key: wants.tenant.to_string(),
        uid: wants.uid.clone(),
        created: wants.created,
        footprint: wants.footprint,
        selector: wants.node_selector.as_deref().cloned(),
        wait,
    };
    Some((waiter, leaving))
}

/// The tenants waiting for room that a new machine could take, in no order: those waiting for
/// their first placement and blocked moves. (A `Resizing` tenant grows in place: a new machine
/// cannot take its resize; a suspended one asks for nothing.) A tenant whose status says it waits
/// but whose entry is already written (on any node for a first placement, on a node other than
/// the one it leaves for a move: the engine writes the Node before the tenant's status) does not
/// wait: planning for it in that moment would buy its room twice.
fn waiters(ctx: &RequestLoop) -> Vec<Waiter> {
    // One tenant at a time: a copy of the whole cache would be the controller's largest
    // allocation, at every look.
    let mut waiters: Vec<(Waiter, Option<String>)> = Vec::new();
    ctx.tenants.each_waiting(|t| waiters.extend(waiter_of(t)));
    if waiters.is_empty() {
        return Vec::new();
    }
    // Where the waiters' UIDs are written (only theirs are looked up, not every entry kept).
    // The fleet's fast hasher: every entry of every node is looked up at each look.
    let uids: HashSet<&str, BuildHasherDefault<placement::NameHasher>> =
        waiters.iter().map(|(w, _)| w.uid.as_str()).collect();
    let mut held: HashMap<String, Vec<String>> = HashMap::new();
    for cached in ctx.engine.cache().state() {
        let name = cached.name_any();
        // The newest copy: our own last write may not be in the cache yet.
        let node = ctx.engine.node(&name).unwrap_or(cached);
        for entry in node.allocations() {
            if uids.contains(&*entry.uid) {
                held.entry(entry.uid.to_string())
                    .or_default()
                    .push(name.clone());
            }
        }
    }
    waiters.retain(|(w, leaving)| {
        held.get(&w.uid)
            .is_none_or(|nodes| nodes.iter().all(|n| Some(n) == leaving.as_ref()))
    });
    waiters.into_iter().map(|(waiter, _)| waiter).collect()
}

/// A request's room as the plan counts it, and the tenants it was bought for.
#[derive(Debug)]
struct Room<'a> {
    request: InFlightRequest,
    labels: Labels,
    bought_for: &'a [String],
}

/// What to plan for: the waiting tenants a machine would be placed for, in queue order, as the
/// queue will serve them.
#[derive(Debug, Default, PartialEq)]
struct Demand {
    /// Planned for, oldest first: every blocked move (it takes room before younger tenants), and
    /// every first placement that has waited `request_after`, unless it waits behind a
    /// StrictFIFO head that is not planned for.
    planned: Vec<SelectiveTenant>,
    /// StrictFIFO: the oldest first placement (nothing younger is placed before it).
    head: Option<Head>,
    /// Every waiting tenant, oldest first (who could use a machine).
    waiting: Vec<Waiter>,
}

#[derive(Debug, PartialEq)]
struct Head {
    tenant: String,
    /// Whether the head is among the planned (it has waited long enough).
    planned: bool,
    /// The first placements younger than it.
    behind: Vec<String>,
}

impl Demand {
    fn of(waiters: &[Waiter], mode: QueueMode, request_after: Duration, now: Timestamp) -> Demand {
        let mut waiting = waiters.to_vec();
        waiting.sort_by(|a, b| (a.created, &a.key).cmp(&(b.created, &b.key)));
        let long_enough = |w: &Waiter| match w.wait {
            Wait::Move => true,
            Wait::First { since } => since.is_some_and(|since| {
                now.duration_since(since)
                    .try_into()
                    .is_ok_and(|waited: Duration| waited >= request_after)
            }),
        };
        let first = |w: &&Waiter| matches!(w.wait, Wait::First { .. });
        let head = (mode == QueueMode::StrictFifo)
            .then(|| waiting.iter().find(first))
            .flatten()
            .map(|head| Head {
                tenant: head.key.clone(),
                planned: long_enough(head),
                behind: waiting
                    .iter()
                    .filter(first)
                    .skip(1)
                    .map(|w| w.key.clone())
                    .collect(),
            });
        let held_back = |w: &Waiter| {
            head.as_ref()
                .is_some_and(|h| !h.planned && (h.tenant == w.key || h.behind.contains(&w.key)))
        };
        let planned = waiting
            .iter()
            .filter(|w| long_enough(w) && !held_back(w))
            .map(|w| SelectiveTenant {
                waiting: WaitingTenant {
                    tenant: w.key.clone(),
                    footprint: w.footprint,
                },
                selector: w.selector.clone(),
            })
            .collect();
        Demand {
            planned,
            head,
            waiting,
        }
    }

    /// Each request's room goes first to the waiting tenants it was bought for (their
    /// selectors matching its labels), oldest first while they fit, planned for or not: the
    /// engine holds a delivered machine's room for them. Not those behind a StrictFIFO head: the
    /// head comes first. They are planned for no further; the plan sees what is left of each
    /// request, for the others.
    fn promise(mut self, rooms: Vec<Room<'_>>) -> (Demand, Vec<(InFlightRequest, Labels)>) {
        let mut promised: HashSet<&str> = HashSet::new();
        let mut in_flight = Vec::with_capacity(rooms.len());
        for Room {
            mut request,
            labels,
            bought_for,
        } in rooms
        {
            for waiter in &self.waiting {
                // Under StrictFIFO the head comes first, even onto room bought for those behind
                // it (the engine's queue does the same rather than wait for good).
                let behind_head = self
                    .head
                    .as_ref()
                    .is_some_and(|h| h.behind.contains(&waiter.key));
                let takes = !behind_head
                    && bought_for.contains(&waiter.key)
                    && !promised.contains(waiter.key.as_str())
                    && placement::selector::matches(waiter.selector.as_ref(), &labels)
                    && waiter.footprint.fits_within(&request.capacity);
                if takes {
                    request.capacity = request.capacity.saturating_sub(waiter.footprint);
                    promised.insert(&waiter.key);
                }
            }
            in_flight.push((request, labels));
        }
        let promised: HashSet<String> = promised.into_iter().map(str::to_owned).collect();
        self.planned
            .retain(|t| !promised.contains(&t.waiting.tenant));
        (self, in_flight)
    }

    /// A hash of the tenants planned for and their footprints.
    fn fingerprint(&self) -> u64 {
        fingerprint(&self.planned, &[], &[])
    }

    /// The purchase, and each tenant nothing is bought for with why. Behind a StrictFIFO head
    /// no class can hold, nothing is bought for the first placements: they would never be
    /// placed on the machine before the head.
    fn plan(
        &self,
        policy: Policy,
        offers: &[(NodeClassOffer, Labels)],
        in_flight: &[(InFlightRequest, Labels)],
    ) -> (Purchase, HashMap<String, String>) {
        let mut purchase = placement::purchase_by_labels(policy, offers, in_flight, &self.planned);
        let mut why: HashMap<String, String> = purchase
            .unplaceable
            .iter()
            .map(|u| {
                (
                    u.tenant.clone(),
                    format!("no node can be requested for it: {}", u.why),
                )
            })
            .collect();
        let Some(head) = &self.head else {
            return (purchase, why);
        };
        let blocked = !head.planned || why.contains_key(&head.tenant);
        if !blocked {
            return (purchase, why);
        }
        if head.planned {
            let moves: Vec<SelectiveTenant> = self
                .planned
                .iter()
                .filter(|t| t.waiting.tenant != head.tenant)
                .filter(|t| !head.behind.contains(&t.waiting.tenant))
                .cloned()
                .collect();
            purchase = placement::purchase_by_labels(policy, offers, in_flight, &moves);
        }
        let reason = if head.planned {
            "for which no machine can be bought"
        } else {
            "which has not waited long enough for a machine yet"
        };
        for tenant in &head.behind {
            why.insert(
                tenant.clone(),
                format!(
                    "it waits behind {} (StrictFIFO), {reason}: nothing is bought for it before",
                    head.tenant
                ),
            );
        }
        (purchase, why)
    }

    /// Whether a waiting tenant the queue would place there could use an empty node with these
    /// labels and this capacity (StrictFIFO: only the head's turn, or a move).
    fn could_use(&self, labels: &Labels, capacity: Resources) -> bool {
        self.waiting.iter().any(|w| {
            let behind = self
                .head
                .as_ref()
                .is_some_and(|h| h.behind.contains(&w.key));
            !behind
                && placement::selector::matches(w.selector.as_ref(), labels)
                && w.footprint.fits_within(&capacity)
        })
    }
}

/// The classes that may be bought now (not resting), with how many of each are in use, and the
/// labels their nodes carry.
fn offers(
    classes: &[Arc<NodeClass>],
    resting: &HashSet<String>,
    requested: &[Requested],
    pool: &Pool,
    accounts: &Accounts,
) -> Vec<(NodeClassOffer, Labels)> {
    let mut offers: Vec<(NodeClassOffer, Labels)> = classes
        .iter()
        .filter(|c| !resting.contains(&c.name_any()) && pool.has_class(&c.name_any()))
        .filter(|c| c.unavailable().is_none())
        .filter_map(|class| {
            let name = class.name_any();
            let in_use = requested
                .iter()
                .filter(|r| r.spec.node_class == name)
                .count();
            match class.offer(in_use) {
                Ok(mut offer) => {
                    // What its Nodes deliver now, learned in this look before its status says so.
                    if let Some(delivered) = accounts.delivered.get(&name) {
                        offer.capacity = offer.capacity.min_each(*delivered);
                    }
                    Some((offer, class.node_labels()))
                }
                // The schema refuses a negative capacity: only an object written around it.
                Err(error) => {
                    tracing::debug!(class = %name, %error, "NodeClass skipped: its capacity cannot be read");
                    None
                }
            }
        })
        .collect();
    offers.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    offers
}

/// Creates one request. Its name is the stable one unless another request holds it (then the
/// next of [`NAME_ATTEMPTS`]); a request found under the name wanted is looked at: the same
/// purchase, still in flight, is taken as made, anything else is not. A refused create is
/// logged and counted, and the next look plans again.
async fn create(
    ctx: &RequestLoop,
    api: &Api<NodeRequest>,
    new: &NewNode,
    offers: &[(NodeClassOffer, Labels)],
    taken: &mut HashSet<String>,
) {
    let Some((offer, _)) = offers.iter().find(|(o, _)| o.name == new.class) else {
        return;
    };
    let (class, tenants) = (new.class.as_str(), &new.tenants);
    let spec = NodeRequestSpec {
        node_class: class.to_owned(),
        capacity: ResourceAmounts::from(offer.capacity),
        tenants: tenants.clone(),
    };
    let Some(name) = (0..NAME_ATTEMPTS)
        .map(|attempt| request_name(class, tenants, attempt))
        .find(|name| !taken.contains(name))
    else {
        tracing::warn!(
            class,
            "node requests: every name for this purchase is taken"
        );
        ctx.metrics.node_request_error("create");
        return;
    };
    taken.insert(name.clone());
    let request = NodeRequest::new(&name, spec.clone());
    match api.create(&PostParams::default(), &request).await {
        Ok(created) => {
            tracing::info!(request = %name, class, tenants = tenants.len(), "node requested");
            ctx.purchases
                .lock()
                .created
                .insert(name.clone(), (spec, Instant::now()));
            announce(ctx, &created, class, tenants).await;
        }
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            // Another process made it between our look and our create (a leader change): the
            // same purchase in flight is ours; anything else under the name is not.
            match api.get_opt(&name).await {
                Ok(Some(found)) if is_in_flight_for(&found, &spec) => {
                    ctx.purchases
                        .lock()
                        .created
                        .insert(name, (spec, Instant::now()));
                }
                Ok(_) => {
                    tracing::info!(request = %name, "node requests: the name is another request's; planned again at the next look");
                }
                Err(source) => {
                    refused(ctx, "create", name, source, "could not read a node request");
                }
            }
        }
        Err(source) => {
            refused(
                ctx,
                "create",
                name,
                source,
                "could not create a node request; will plan again",
            );
        }
    }
}

/// The Events of a new request: one on it, and one on each tenant it is for.
async fn announce(ctx: &RequestLoop, created: &NodeRequest, class: &str, tenants: &[String]) {
    let name = created.name_any();
    let note = format!(
        "a {class} is asked for {} waiting tenant(s): {}",
        tenants.len(),
        tenants.join(", ")
    );
    publish(ctx, created, EventType::Normal, "NodeRequested", note).await;
    for key in tenants {
        let Some(reference) = Tenant::reference(key) else {
            continue;
        };
        if let Some(tenant) = ctx.tenants.get(&reference) {
            let note = format!("node request {name} asks for a {class} for it");
            publish(
                ctx,
                tenant.as_ref(),
                EventType::Normal,
                "NodeRequested",
                note,
            )
            .await;
        }
    }
}

/// The longest class name a request name keeps whole: `<class>-<8 hex digits>` stays a DNS
/// label (63 characters), as a Node name and a label value must be.
const KEPT_CLASS: usize = 54;

/// `<class>-<8 hex digits of a hash of the class, its tenants and the attempt>`: the same
/// purchase has the same name, whoever computes it. A class name that would not make a DNS label
/// (too long, or with dots) is cut to 54 characters, dots made dashes, no dash at its end; the
/// hash covers the whole name. Attempt 0 hashes without the attempt.
fn request_name(class: &str, tenants: &[String], attempt: u32) -> String {
    use std::hash::{Hash, Hasher};
    // NB: DefaultHasher::new() has fixed keys: the same input hashes alike in every process.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (class, tenants).hash(&mut hasher);
    if attempt > 0 {
        attempt.hash(&mut hasher);
    }
    let hash = hasher.finish() & 0xffff_ffff;
    let kept: String = class
        .chars()
        .take(KEPT_CLASS)
        .map(|c| if c == '.' { '-' } else { c })
        .collect();
    format!("{}-{hash:08x}", kept.trim_end_matches('-'))
}

/// What each waiting tenant's status adds: the request it waits for (live, or created and not
/// shown yet), or why nothing is bought for it, which wins.
fn notes(
    created: &HashMap<String, (NodeRequestSpec, Instant)>,
    live: &[Arc<NodeRequest>],
    unplaceable: HashMap<String, String>,
) -> HashMap<String, String> {
    let mut notes = request_notes(live);
    for (name, (spec, _)) in created {
        for tenant in &spec.tenants {
            notes.entry(tenant.clone()).or_insert_with(|| {
                format!(
                    "node request {name} ({}) is Pending for it",
                    spec.node_class
                )
            });
        }
    }
    notes.extend(unplaceable);
    notes
}

/// Why nothing is bought for a tenant, with the pool's classes that cannot be bought now and
/// why (their `Available` condition), since the planner did not see them.
fn with_unavailable(
    mut unplaceable: HashMap<String, String>,
    classes: &[Arc<NodeClass>],
    pool: &Pool,
) -> HashMap<String, String> {
    let why: Vec<String> = classes
        .iter()
        .filter(|c| pool.has_class(&c.name_any()))
        .filter_map(|c| {
            Some(format!(
                "NodeClass {} cannot be bought now: {}",
                c.name_any(),
                c.unavailable()?
            ))
        })
        .collect();
    if !why.is_empty() {
        let why = why.join("; ");
        for note in unplaceable.values_mut() {
            note.push_str(" (");
            note.push_str(&why);
            note.push(')');
        }
    }
    unplaceable
}

/// `node request X (class) is Provisioning for it`, for each tenant of each live request.
fn request_notes(live: &[Arc<NodeRequest>]) -> HashMap<String, String> {
    let mut notes = HashMap::new();
    for request in live {
        let (name, phase) = (request.name_any(), request.phase());
        for tenant in &request.spec.tenants {
            notes.insert(
                tenant.clone(),
                format!(
                    "node request {name} ({}) is {} for it",
                    request.spec.node_class,
                    phase.to_string().trim()
                ),
            );
        }
    }
    notes
}

/// Keeps the new notes and wakes each waiting tenant whose note changed, so its status says it.
fn wake_changed(ctx: &RequestLoop, notes: HashMap<String, String>) {
    let changed = ctx.notes.replace(notes);
    for key in changed {
        if let Some(tenant) = Tenant::reference(&key)
            && ctx.tenants.get(&tenant).is_some()
        {
            ctx.waiting.wake(tenant);
        }
    }
}

/// The placement Nodes a provisioner made for a request (they carry its label), newest copies
/// (our own last write may not be in the cache yet), by name.
fn bought_nodes(ctx: &RequestLoop) -> HashMap<String, Arc<Node>> {
    ctx.engine
        .cache()
        .state()
        .into_iter()
        .filter(|n| n.labels().contains_key(NODE_REQUEST_LABEL))
        .map(|cached| {
            let name = cached.name_any();
            let newest = ctx.engine.node(&name).unwrap_or(cached);
            (name, newest)
        })
        .collect()
}

/// What every live request is used for ([`accounts::judge`] over this look's snapshot).
fn account(
    live: &[Arc<NodeRequest>],
    nodes: &HashMap<String, Arc<Node>>,
    demand: &Demand,
) -> Accounts {
    let seen: HashMap<&str, NodeSeen<'_>> = nodes
        .iter()
        .map(|(name, node)| {
            let capacity = node.spec.capacity.to_resources().ok();
            // An empty node consolidation drained counts as usable: it is taken back.
            let in_service = node.spec.state == NodeState::Online
                || (consolidation::consolidating(node) && node.allocations().is_empty());
            let awaited =
                in_service && capacity.is_some_and(|c| demand.could_use(node.labels(), c));
            let seen = NodeSeen {
                labelled_for: node.labels().get(NODE_REQUEST_LABEL).map(String::as_str),
                holds: !node.allocations().is_empty() || node.unreadable_reason().is_some(),
                going: node.metadata.deletion_timestamp.is_some(),
                awaited,
                capacity,
            };
            (name.as_str(), seen)
        })
        .collect();
    let requests: Vec<RequestSeen<'_>> = live
        .iter()
        .map(|r| RequestSeen {
            name: r.metadata.name.as_deref().unwrap_or_default(),
            class: &r.spec.node_class,
            node: (r.phase() == NodeRequestPhase::Ready).then(|| made_node(r)),
        })
        .collect();
    accounts::judge(&requests, &seen)
}

/// Writes what each class's Nodes deliver when less than it promises (its `Delivers` condition
/// False, `status.delivered` the smallest seen, a Warning Event), so that no machine is bought of
/// it for a tenant that fits only the promise, also after its machines are handed back.
async fn learn_delivered(ctx: &RequestLoop, classes: &[Arc<NodeClass>], accounts: &Accounts) {
    for class in classes {
        let name = class.name_any();
        let Some(seen) = accounts.delivered.get(&name) else {
            continue;
        };
        let Ok(promised) = class.spec.capacity.to_resources() else {
            continue;
        };
        let stored = class.delivered().and_then(|d| d.to_resources().ok());
        let known = stored
            .map_or(*seen, |d| d.min_each(*seen))
            .min_each(promised);
        if known == promised || stored == Some(known) {
            continue; // it delivers what it promises, or this is known already
        }
        let amounts = ResourceAmounts::from(known);
        let note = format!(
            "its Nodes report {known}, less than its spec.capacity ({promised}): machines of it \
             are planned with what they report; set spec.capacity to the allocatable its Nodes \
             report"
        );
        let previous = class.status.as_ref().map(|s| s.conditions.as_slice());
        let delivers = Condition::keeping_time(
            previous.unwrap_or_default(),
            DELIVERS_CONDITION,
            "False",
            "DeliversLess",
            note.clone(),
            class.metadata.generation,
            &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        let mut conditions: Vec<Condition> = previous
            .unwrap_or_default()
            .iter()
            .filter(|c| c.type_ != DELIVERS_CONDITION)
            .cloned()
            .collect();
        conditions.push(delivers);
        // Guarded: the other conditions are kept as read.
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": class.resource_version()},
            "status": {"delivered": amounts, "conditions": conditions},
        });
        let api: Api<NodeClass> = Api::all(ctx.client.clone());
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::warn!(class = %name, %known, %promised, "a NodeClass delivers less than it promises");
                publish(
                    ctx,
                    class.as_ref(),
                    EventType::Warning,
                    "DeliversLess",
                    note,
                )
                .await;
            }
            Err(error) => {
                tracing::info!(class = %name, %error, "could not write what a NodeClass delivers; the next look tries again");
            }
        }
    }
}

/// Why nothing is bought for a tenant, with each class that would hold it as promised but not
/// as its Nodes deliver.
fn with_short_classes(
    mut unplaceable: HashMap<String, String>,
    classes: &[Arc<NodeClass>],
    demand: &Demand,
    pool: &Pool,
) -> HashMap<String, String> {
    for waiter in &demand.waiting {
        let Some(note) = unplaceable.get_mut(&waiter.key) else {
            continue;
        };
        for class in classes.iter().filter(|c| pool.has_class(&c.name_any())) {
            let (Ok(promised), Some(Ok(delivered))) = (
                class.spec.capacity.to_resources(),
                class.delivered().map(|d| d.to_resources()),
            ) else {
                continue;
            };
            if waiter.footprint.fits_within(&promised) && !waiter.footprint.fits_within(&delivered)
            {
                note.push_str(&format!(
                    " (NodeClass {} promises {promised} but its Nodes deliver {delivered}: none \
                     is bought for it)",
                    class.name_any()
                ));
            }
        }
    }
    unplaceable
}

/// Reports, once each, a Node whose label names a live request that does not own it (a copied
/// manifest): it is never handed back for that request.
async fn report_strays(ctx: &RequestLoop, accounts: &Accounts, nodes: &HashMap<String, Arc<Node>>) {
    for stray in &accounts.strays {
        let key = format!("{} {}", stray.node, stray.labelled_for);
        if !ctx.purchases.lock().reported.insert(key) {
            continue;
        }
        let Some(node) = nodes.get(&stray.node) else {
            continue;
        };
        let owned = stray
            .owned
            .as_deref()
            .map_or_else(|| "no Node yet".to_owned(), |n| format!("Node {n}"));
        let note = format!(
            "labelled {NODE_REQUEST_LABEL}={}, but that request owns {owned}: this Node is \
             not its machine and is never handed back for it",
            stray.labelled_for
        );
        tracing::warn!(node = %stray.node, request = %stray.labelled_for, "a Node names a request that does not own it");
        publish(
            ctx,
            node.as_ref(),
            EventType::Warning,
            "NotRequestsNode",
            note,
        )
        .await;
    }
}

/// Hands back what was judged idle for `empty_node_after` (a node consolidation drained at
/// once), and retires what was judged orphaned as long; takes an empty node consolidation
/// drained back into service when a waiter can use it. Each write carries the precondition of
/// what was judged: the Node's resourceVersion (a tenant placed since keeps it) and the
/// request's UID and resourceVersion.
async fn hand_back(
    ctx: &RequestLoop,
    api: &Api<NodeRequest>,
    live: &[Arc<NodeRequest>],
    (accounts, nodes): (&Accounts, &HashMap<String, Arc<Node>>),
    demand: &Demand,
) {
    let mut idle_by_class: BTreeMap<&str, i64> = BTreeMap::new();
    let mut due: Vec<(&NodeRequest, Use, Option<&Arc<Node>>)> = Vec::new();
    let mut reclaim: Vec<&Arc<Node>> = Vec::new();
    {
        let mut remembered = ctx.purchases.lock();
        let mut still = HashSet::new();
        for request in live {
            let name = request.name_any();
            let Some((use_, owned)) = accounts.uses.get(&name) else {
                continue;
            };
            let node = owned.as_ref().and_then(|n| nodes.get(n));
            let consolidated = node.is_some_and(|n| consolidation::consolidating(n));
            if *use_ == Use::Awaited && consolidated {
                reclaim.extend(node);
            }
            if !matches!(use_, Use::Idle | Use::Orphaned) {
                continue;
            }
            if *use_ == Use::Idle {
                let count = idle_by_class.entry(&request.spec.node_class).or_default();
                *count = count.saturating_add(1);
            }
            let uid = request.metadata.uid.clone().unwrap_or_default();
            let since = *remembered
                .idle_since
                .entry(uid.clone())
                .or_insert_with(Instant::now);
            still.insert(uid);
            // One consolidation drained goes back at once: it was drained to go.
            if consolidated || since.elapsed() >= ctx.settings.empty_node_after {
                due.push((request.as_ref(), *use_, node));
            }
        }
        remembered.idle_since.retain(|uid, _| still.contains(uid));
    }
    ctx.metrics.set_machines_idle(idle_by_class);
    if !ctx.settings.consolidation.hands_back() {
        return;
    }
    for node in reclaim {
        take_back_into_service(ctx, node).await;
    }
    for (request, use_, node) in due {
        if give_back(ctx, api, request, use_, node).await {
            // Nothing is bought again for the demand a machine was handed back for.
            ctx.purchases.lock().handed_back_for = Some(demand.fingerprint());
        }
    }
}

/// An empty node consolidation drained, that a waiting tenant can use: Online again, the mark
/// removed (guarded by what was judged), instead of handed back and another one bought.
async fn take_back_into_service(ctx: &RequestLoop, node: &Node) {
    let name = node.name_any();
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": node.resource_version(),
            "annotations": {CONSOLIDATING_ANNOTATION: null},
        },
        "spec": {"state": "Online"},
    });
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    match nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(node = %name, "a drained node is kept: a waiting tenant can use it");
            ctx.metrics.money_decision("keep", "awaited");
            ctx.metrics.consolidation_action("cancel");
        }
        Err(error) => {
            tracing::info!(node = %name, %error, "could not take a drained node back; the next look decides again");
        }
    }
}

/// Hands one request's machine back: an idle Node is cordoned first under the resourceVersion it
/// was judged empty at (a tenant placed since refuses it, and the machine is kept), then the
/// request is deleted under its own UID and resourceVersion. An orphan is reported first.
/// Whether it went back.
async fn give_back(
    ctx: &RequestLoop,
    api: &Api<NodeRequest>,
    request: &NodeRequest,
    use_: Use,
    node: Option<&Arc<Node>>,
) -> bool {
    let name = request.name_any();
    let consolidated = node.is_some_and(|n| consolidation::consolidating(n));
    if let Some(node) = node.filter(|n| n.spec.state == NodeState::Online) {
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": node.resource_version()},
            "spec": {"state": "Cordoned"},
        });
        let nodes: Api<Node> = Api::all(ctx.client.clone());
        if let Err(error) = nodes
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::info!(request = %name, %error, "a machine judged idle changed before it went back; judged again at the next look");
            return false;
        }
    }
    if use_ == Use::Orphaned {
        let uid = request.metadata.uid.clone().unwrap_or_default();
        if ctx.purchases.lock().reported.insert(uid) {
            let note = format!(
                "Ready, but the Node it names ({}) is not there (or is not labelled for it) \
                 after {} s: retired, so its machine is given back",
                made_node(request),
                ctx.settings.empty_node_after.as_secs()
            );
            tracing::warn!(request = %name, "an orphaned node request is retired");
            publish(ctx, request, EventType::Warning, "Orphaned", note).await;
        }
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: request.resource_version(),
            uid: request.metadata.uid.clone(),
        }),
        ..DeleteParams::default()
    };
    tracing::info!(request = %name, use_ = use_.as_str(), "handing back a machine");
    match api.delete(&name, &params).await {
        Ok(_) => {
            let (action, reason) = match (use_, consolidated) {
                (Use::Orphaned, _) => ("retire", "orphaned"),
                (_, true) => ("hand_back", "consolidated"),
                _ => ("hand_back", "idle"),
            };
            ctx.metrics.money_decision(action, reason);
            ctx.metrics.node_handed_back();
            if consolidated {
                ctx.metrics.consolidation_action("hand_back");
                if let Some(node) = node {
                    ctx.consolidation.handed_back(&node.name_any());
                }
            }
            true
        }
        Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 409 => false,
        Err(source) => {
            refused(
                ctx,
                "hand_back",
                name,
                source,
                "could not hand back a machine; will try again",
            );
            false
        }
    }
}

/// A NodeRequest write the API refused: logged with what was being done, counted by action, and
/// tried again at the next look (it never stops the others).
fn refused(
    ctx: &RequestLoop,
    action: &'static str,
    request: String,
    source: kube::Error,
    what: &str,
) {
    let error = Error::NodeRequest { request, source };
    tracing::warn!(%error, action, "{what}");
    ctx.metrics.node_request_error(action);
}

/// Publishes one Event on a request or a tenant; a failure to publish is logged, never fatal.
async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &RequestLoop,
    regarding: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let occurrence = Occurrence {
        type_,
        reason,
        action: "Request",
        note,
    };
    EventPublisher::publish_or_log(ctx.events.as_ref(), occurrence, regarding.object_ref(&()))
        .await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::{AllocationEntry, NodeRequestStatus, NodeSpec, NodeStatus};

    /// Whether `name` is a DNS-1123 label, as a Node name and a label value must be.
    fn is_dns_label(name: &str) -> bool {
        let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        (1..=63).contains(&name.len())
            && name.chars().all(|c| alnum(c) || c == '-')
            && name.starts_with(alnum)
            && name.ends_with(alnum)
    }

    #[test]
    fn a_request_nobody_took_up_is_withdrawn_once_its_class_is_gone() {
        let mut going = box_request("going", NodeRequestPhase::Pending);
        going.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        let mut other = box_request("other-class", NodeRequestPhase::Pending);
        other.spec.node_class = "kept".into();
        let requests: Vec<Arc<NodeRequest>> = [
            box_request("fresh", NodeRequestPhase::Pending),
            box_request("taken-up", NodeRequestPhase::Provisioning),
            box_request("ready", NodeRequestPhase::Ready),
            going,
            other,
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let names = |classes: &[&str]| {
            let classes = classes.iter().map(|c| (*c).to_owned()).collect();
            classless(&requests, &classes)
                .map(|r| r.name_any())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&["kept"]), ["fresh"]);
        assert!(names(&["kept", "box"]).is_empty());
    }

    #[test]
    fn a_purchase_has_the_same_name_whoever_computes_it_and_a_different_one_for_other_tenants() {
        let tenants = vec!["default/a".to_owned(), "default/b".to_owned()];
        let name = request_name("hetzner-ax162", &tenants, 0);
        assert_eq!(name, request_name("hetzner-ax162", &tenants, 0));
        assert!(name.starts_with("hetzner-ax162-") && name.len() == "hetzner-ax162-".len() + 8);
        assert_ne!(name, request_name("hetzner-ax162", &tenants[..1], 0));
        assert_ne!(name, request_name("ovh-adv", &tenants, 0));
        // Each next attempt (the stable name taken by another request) is another name.
        let attempts: HashSet<String> = (0..NAME_ATTEMPTS)
            .map(|attempt| request_name("hetzner-ax162", &tenants, attempt))
            .collect();
        assert_eq!(attempts.len(), NAME_ATTEMPTS as usize);
        // And the same in every release: a controller upgraded between a create and the watch
        // event of it finds its purchase by name (AlreadyExists) instead of buying it again. A
        // toolchain whose DefaultHasher hashes otherwise fails here.
        assert_eq!(name, "hetzner-ax162-3ea8961e");
        // A long class name is cut so that the name stays a DNS label (63 characters).
        let long = "c".repeat(80);
        assert_eq!(request_name(&long, &tenants, 0).len(), 63);
    }

    #[test]
    fn a_request_name_is_a_dns_label_for_every_valid_class_name() {
        // Valid NodeClass names (DNS-1123 subdomains, up to 253): a dot or a dash where the cut
        // falls (the 55-character name of the issue: a dot at 54), dots anywhere, the longest.
        let dot_at_cut = format!("{}.b", "a".repeat(53));
        let dash_at_cut = format!("{}-bc", "a".repeat(53));
        let dotted = "hetzner.ax102.eu".to_owned();
        let longest = format!("{}.{}", "a".repeat(63), "b".repeat(189));
        let tenants = vec!["default/a".to_owned()];
        for class in [&dot_at_cut, &dash_at_cut, &dotted, &longest] {
            for attempt in 0..NAME_ATTEMPTS {
                let name = request_name(class, &tenants, attempt);
                assert!(is_dns_label(&name), "{class}: {name}");
            }
        }
        // Two classes that share their first 54 characters still get different names.
        assert_ne!(
            request_name(&format!("{}x", "a".repeat(60)), &tenants, 0),
            request_name(&format!("{}y", "a".repeat(60)), &tenants, 0)
        );
    }

    #[test]
    fn a_waiting_tenants_note_names_its_request_and_phase() {
        let mut request = NodeRequest::new(
            "box-0000abcd",
            NodeRequestSpec {
                node_class: "box".into(),
                capacity: ResourceAmounts::new(64, 256, 8000),
                tenants: vec!["default/big".into()],
            },
        );
        request.status = Some(NodeRequestStatus {
            phase: NodeRequestPhase::Provisioning,
            ..NodeRequestStatus::default()
        });
        let notes = request_notes(&[Arc::new(request.clone())]);
        assert_eq!(
            notes["default/big"],
            "node request box-0000abcd (box) is Provisioning for it"
        );
        assert_eq!(notes.len(), 1);
        // A Ready request counts the Node its status names, else the one named after it.
        assert_eq!(made_node(&request), "box-0000abcd");
        request.status = Some(NodeRequestStatus {
            phase: NodeRequestPhase::Ready,
            node_name: "lab-17".into(),
            ..NodeRequestStatus::default()
        });
        assert_eq!(made_node(&request), "lab-17");
    }

    fn box_request(name: &str, phase: NodeRequestPhase) -> NodeRequest {
        let mut request = NodeRequest::new(
            name,
            NodeRequestSpec {
                node_class: "box".into(),
                capacity: ResourceAmounts::new(16, 64, 100),
                tenants: vec![format!("default/for-{name}")],
            },
        );
        request.status = Some(NodeRequestStatus {
            phase,
            ..NodeRequestStatus::default()
        });
        request
    }

    #[test]
    fn purchases_remember_what_the_watch_showed_and_what_this_process_created() {
        let purchases = Purchases::default();
        // The watch shows a Failed request and a Provisioning one; list markers are no news.
        let failed = box_request("failed", NodeRequestPhase::Failed);
        let provisioning = box_request("shown", NodeRequestPhase::Provisioning);
        purchases.observe(&watcher::Event::Init);
        purchases.observe(&watcher::Event::Apply(failed.clone()));
        purchases.observe(&watcher::Event::InitApply(provisioning.clone()));
        purchases.observe(&watcher::Event::InitDone);
        {
            let remembered = purchases.lock();
            assert_eq!(remembered.failed.keys().collect::<Vec<_>>(), ["failed"]);
            let mut shown: Vec<_> = remembered.shown.iter().map(String::as_str).collect();
            shown.sort_unstable();
            assert_eq!(shown, ["failed", "shown"]);
        }

        // Created here: "shown" (the watch has shown it), "fresh" (not yet), "refused" (not
        // shown for longer than it is kept: the create was refused).
        {
            let mut remembered = purchases.lock();
            let now = Instant::now();
            let spec = provisioning.spec.clone();
            remembered
                .created
                .insert("shown".into(), (spec.clone(), now));
            // Created here and listed before the watch's event for it arrived: counted once.
            remembered
                .created
                .insert("ready".into(), (spec.clone(), now));
            remembered
                .created
                .insert("fresh".into(), (spec.clone(), now));
            let long_ago = now
                .checked_sub(CREATED_KEPT + Duration::from_secs(1))
                .expect("the monotonic clock has run longer than a request is kept");
            remembered
                .created
                .insert("refused".into(), (spec, long_ago));
        }
        let ready = box_request("ready", NodeRequestPhase::Ready);
        let live = [Arc::new(ready), Arc::new(provisioning)];
        let requested = purchases.requested(&live);
        let seen: Vec<(&str, Option<&str>)> = requested
            .iter()
            .map(|r| (r.name.as_str(), r.node.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [("ready", Some("ready")), ("shown", None), ("fresh", None)]
        );
        let mut kept: Vec<_> = purchases.lock().created.keys().cloned().collect();
        kept.sort_unstable();
        // Until the watch shows them: "ready" is counted from the list meanwhile.
        assert_eq!(kept, ["fresh", "ready"]);
        assert!(purchases.lock().shown.is_empty(), "taken by the look");
    }

    #[test]
    fn a_pool_has_the_classes_its_selector_takes_and_the_requests_of_those() {
        let every = Pool(None);
        let ours = Pool(Some(HashSet::from(["box".to_owned()])));
        assert!(every.has_class("box") && every.has_class("other"));
        assert!(ours.has_class("box") && !ours.has_class("other"));
        let mut request = box_request("r", NodeRequestPhase::Pending);
        assert!(ours.owns(&request) && every.owns(&request));
        request.spec.node_class = "other".into();
        assert!(!ours.owns(&request) && every.owns(&request));
    }

    /// What the planner reads: any one field changed gives another fingerprint.
    #[test]
    fn the_plan_input_fingerprint_tells_every_field_apart() {
        type Input = (
            Vec<SelectiveTenant>,
            Vec<(NodeClassOffer, Labels)>,
            Vec<(InFlightRequest, Labels)>,
        );
        let labels = |v: &str| Labels::from([("zone".to_owned(), v.to_owned())]);
        let base: Input = (
            vec![SelectiveTenant {
                waiting: WaitingTenant {
                    tenant: "default/a".into(),
                    footprint: Resources::new(2, 1, 1),
                },
                selector: None,
            }],
            vec![(
                NodeClassOffer {
                    name: "box".into(),
                    capacity: Resources::new(16, 8, 8),
                    monthly_cost: Some(100),
                    limit: Some(3),
                    in_use: 1,
                },
                labels("a"),
            )],
            vec![(
                InFlightRequest {
                    name: "r1".into(),
                    capacity: Resources::new(16, 8, 8),
                },
                labels("a"),
            )],
        );
        let edits: [fn(&mut Input); 14] = [
            |i| i.0[0].waiting.tenant = "default/b".into(),
            |i| i.0[0].waiting.footprint.threads = 3,
            |i| i.0[0].selector = Some(Labels::new()),
            |i| i.0.clear(),
            |i| i.1[0].0.name = "big".into(),
            |i| i.1[0].0.capacity.memory_gb = 9,
            |i| i.1[0].0.monthly_cost = None,
            |i| i.1[0].0.limit = Some(4),
            |i| i.1[0].0.in_use = 2,
            |i| i.1[0].1.clear(),
            |i| i.2[0].0.name = "r2".into(),
            |i| i.2[0].0.capacity.storage_gb = 9,
            |i| i.2[0].1.clear(),
            |i| i.2.clear(),
        ];
        let print = |(planned, offers, in_flight): &Input| fingerprint(planned, offers, in_flight);
        let mut prints = vec![print(&base)];
        for edit in edits {
            let mut input = base.clone();
            edit(&mut input);
            prints.push(print(&input));
        }
        let distinct: HashSet<u64> = prints.iter().copied().collect();
        assert_eq!(distinct.len(), prints.len(), "{prints:?}");
        assert_eq!(
            print(&base.clone()),
            prints[0],
            "the same input, the same print"
        );
    }

    #[test]
    fn a_class_rests_after_a_failure_and_is_forgotten_a_longest_rest_later() {
        let now = Instant::now() + LONGEST_REST * 2;
        let mut remembered = Remembered::default();
        let rest = |until: Instant, failures| (until, failures);
        remembered.resting.extend([
            ("resting".to_owned(), rest(now + FIRST_REST, 1)),
            ("rested".to_owned(), rest(now - FIRST_REST, 2)),
            ("ends-now".to_owned(), rest(now, 1)),
            ("long-ago".to_owned(), rest(now - LONGEST_REST, 3)),
            ("no-failure".to_owned(), rest(now + FIRST_REST, 0)),
        ]);
        let resting = remembered.resting_classes(now);
        assert_eq!(resting, HashSet::from(["resting".to_owned()]));
        // A rest over is kept (the next failure doubles it) until a longest rest has passed.
        let mut kept: Vec<_> = remembered.resting.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["ends-now", "rested", "resting"]);
    }

    #[test]
    fn offers_are_the_pools_classes_not_resting_by_name_with_their_machines_in_use() {
        let class = |name: &str, threads| {
            Arc::new(NodeClass::new(
                name,
                crate::api::NodeClassSpec {
                    capacity: ResourceAmounts::new(threads, 64, 1000),
                    provider: "test".into(),
                    monthly_cost: Some(1),
                    limit: None,
                    labels: Default::default(),
                    cluster_api: None,
                },
            ))
        };
        let classes = [
            class("c", 16),
            class("a", 16),
            class("resting", 16),
            class("elsewhere", 16),
            class("broken", -1),
            unavailable(class("down", 16)),
        ];
        let requested = |class: &str| Requested {
            name: format!("r-{class}"),
            spec: NodeRequestSpec {
                node_class: class.into(),
                capacity: ResourceAmounts::new(16, 64, 1000),
                tenants: vec![],
            },
            node: None,
        };
        let pool = Pool(Some(HashSet::from(
            ["a", "c", "resting", "broken", "down"].map(str::to_owned),
        )));
        let offers = offers(
            &classes,
            &HashSet::from(["resting".to_owned()]),
            &[requested("a"), requested("a"), requested("c")],
            &pool,
            &Accounts::default(),
        );
        let seen: Vec<(&str, u32)> = offers
            .iter()
            .map(|(o, _)| (o.name.as_str(), o.in_use))
            .collect();
        assert_eq!(seen, [("a", 2), ("c", 1)]);
        assert_eq!(offers[0].1[NODE_CLASS_LABEL], "a");
    }

    /// The class with its `Available` condition False, as the cluster-api provisioner writes it.
    fn unavailable(class: Arc<NodeClass>) -> Arc<NodeClass> {
        let mut class = (*class).clone();
        class.status = Some(crate::api::NodeClassStatus {
            conditions: vec![crate::api::Condition {
                type_: crate::api::AVAILABLE_CONDITION.into(),
                status: "False".into(),
                reason: "MachineDeploymentNotFound".into(),
                message: "MachineDeployment fleet/md does not exist".into(),
                last_transition_time: crate::api::Condition::UNREADABLE_TIME,
                observed_generation: None,
            }],
            delivered: None,
        });
        Arc::new(class)
    }

    #[test]
    fn why_nothing_is_bought_names_the_pools_classes_that_cannot_be_bought_now() {
        let class = |name: &str| {
            Arc::new(NodeClass::new(
                name,
                crate::api::NodeClassSpec {
                    capacity: ResourceAmounts::new(16, 64, 1000),
                    provider: "test".into(),
                    monthly_cost: Some(1),
                    limit: None,
                    labels: Default::default(),
                    cluster_api: None,
                },
            ))
        };
        let classes = [
            class("up"),
            unavailable(class("down")),
            unavailable(class("elsewhere")),
        ];
        let pool = Pool(Some(HashSet::from(["up", "down"].map(str::to_owned))));
        let notes = |classes: &[Arc<NodeClass>]| {
            let unplaceable = HashMap::from([("d/t".to_owned(), "no class holds it".to_owned())]);
            with_unavailable(unplaceable, classes, &pool)["d/t"].clone()
        };
        assert_eq!(
            notes(&classes),
            "no class holds it (NodeClass down cannot be bought now: \
             MachineDeployment fleet/md does not exist)"
        );
        assert_eq!(notes(&classes[..1]), "no class holds it");
    }

    #[test]
    fn a_waiting_tenants_note_names_a_request_created_here_and_why_nothing_is_bought() {
        let spec = |tenants: &[&str]| NodeRequestSpec {
            node_class: "box".into(),
            capacity: ResourceAmounts::new(16, 64, 1000),
            tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
        };
        let live = [Arc::new(NodeRequest::new("listed", spec(&["d/a"])))];
        let created =
            HashMap::from([("fresh".to_owned(), (spec(&["d/a", "d/b"]), Instant::now()))]);
        let unplaceable =
            HashMap::from([("d/c".to_owned(), "no node can be requested".to_owned())]);
        let notes = notes(&created, &live, unplaceable);
        assert_eq!(
            notes,
            HashMap::from([
                (
                    "d/a".to_owned(),
                    "node request listed (box) is Pending for it".to_owned()
                ),
                (
                    "d/b".to_owned(),
                    "node request fresh (box) is Pending for it".to_owned()
                ),
                ("d/c".to_owned(), "no node can be requested".to_owned()),
            ])
        );
    }

    fn box_spec(tenants: &[&str]) -> NodeRequestSpec {
        NodeRequestSpec {
            node_class: "box".into(),
            capacity: ResourceAmounts::new(64, 256, 8000),
            tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    #[test]
    fn a_request_found_under_a_purchases_name_is_that_purchase_only_while_it_is_in_flight() {
        let spec = box_spec(&["default/big"]);
        let with = |change: &dyn Fn(&mut NodeRequest)| {
            let mut found = NodeRequest::new("box-0000abcd", spec.clone());
            change(&mut found);
            is_in_flight_for(&found, &spec)
        };
        let phase = |phase| {
            move |r: &mut NodeRequest| {
                r.status = Some(NodeRequestStatus {
                    phase,
                    ..NodeRequestStatus::default()
                })
            }
        };
        assert!(with(&|_| {}), "made, no status yet");
        assert!(with(&phase(NodeRequestPhase::Provisioning)));
        assert!(with(&phase(NodeRequestPhase::Ready)));
        assert!(!with(&phase(NodeRequestPhase::Failed)), "Failed");
        assert!(
            !with(&|r| r.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH))),
            "going"
        );
        assert!(
            !with(&|r| r.spec.tenants = vec!["default/other".into()]),
            "for other tenants"
        );
        assert!(
            !with(&|r| r.spec.node_class = "ovh".into()),
            "of another class"
        );
    }

    #[test]
    fn a_bought_machine_is_idle_only_when_it_holds_nothing_stays_and_no_waiter_could_use_it() {
        let online = |state| {
            let mut node = Node::new(
                "box-0000abcd",
                NodeSpec {
                    capacity: ResourceAmounts::new(16, 64, 1000),
                    state,
                    overcommit: None,
                },
            );
            node.metadata.labels =
                Some([(NODE_REQUEST_LABEL.to_owned(), "box-0000abcd".to_owned())].into());
            node
        };
        let now = at(100);
        let nobody = Demand::of(&[], QueueMode::BestEffortFifo, Duration::ZERO, now);
        let fits = Demand::of(
            &[first("d/t", 10, 8, 10)],
            QueueMode::BestEffortFifo,
            Duration::ZERO,
            now,
        );
        let too_big = Demand::of(
            &[first("d/t", 10, 32, 10)],
            QueueMode::BestEffortFifo,
            Duration::ZERO,
            now,
        );
        let empty = online(NodeState::Online);
        let mut holding = empty.clone();
        holding.status = Some(NodeStatus {
            allocations: vec![AllocationEntry {
                tenant: "d/a".into(),
                uid: "uid-a".into(),
                resources: ResourceAmounts::new(1, 1, 1),
            }],
            ..NodeStatus::default()
        });
        let unreadable = Node::unreadable(empty.metadata.clone(), "{}", "bad".into());
        let mut going = empty.clone();
        going.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let cordoned = online(NodeState::Cordoned);
        let mut drained = online(NodeState::Draining);
        drained.metadata.annotations =
            Some([(CONSOLIDATING_ANNOTATION.to_owned(), "true".to_owned())].into());
        let mut request = box_request("box-0000abcd", NodeRequestPhase::Ready);
        request.metadata.uid = Some("uid-r".into());
        let live = [Arc::new(request)];
        // (the node's newest copy, or none, demand, its request's use)
        let table: [(Option<&Node>, &Demand, Use); 11] = [
            (Some(&empty), &nobody, Use::Idle),
            (Some(&empty), &too_big, Use::Idle),
            (Some(&empty), &fits, Use::Awaited),
            (Some(&holding), &nobody, Use::InUse),
            (Some(&unreadable), &nobody, Use::InUse),
            // No Node behind a Ready request: a machine paid for that serves nothing.
            (None, &nobody, Use::Orphaned),
            (Some(&going), &nobody, Use::InUse),
            // A node that takes nobody now is idle though a waiter would fit there.
            (Some(&cordoned), &fits, Use::Idle),
            (Some(&cordoned), &nobody, Use::Idle),
            // One consolidation drained is taken back for a waiter that fits, else handed back.
            (Some(&drained), &fits, Use::Awaited),
            (Some(&drained), &nobody, Use::Idle),
        ];
        for (i, (node, demand, wanted)) in table.into_iter().enumerate() {
            let nodes: HashMap<String, Arc<Node>> = node
                .map(|n| ("box-0000abcd".to_owned(), Arc::new(n.clone())))
                .into_iter()
                .collect();
            let accounts = account(&live, &nodes, demand);
            assert_eq!(accounts.uses["box-0000abcd"].0, wanted, "case {i}");
        }
    }

    #[test]
    fn a_class_rests_longer_with_each_failure_in_a_row_up_to_the_longest() {
        let secs = |failures| rest_after(failures).as_secs();
        let table = [
            (0, 30),
            (1, 30),
            (2, 60),
            (3, 120),
            (6, 960),
            (7, 1800),
            (17, 1800),
        ];
        for (failures, rest) in table {
            assert_eq!(secs(failures), rest, "{failures} failures");
        }
        assert_eq!(rest_after(u32::MAX), LONGEST_REST);
    }

    #[test]
    fn a_machine_can_take_a_first_placement_waiting_or_a_blocked_move_and_nothing_else() {
        use crate::testing::tenant;
        let pending = || {
            tenant("t")
                .resources(4, 8, 10)
                .phase(TenantPhase::PendingCapacity)
        };
        let blocked = || {
            tenant("t")
                .resources(4, 8, 10)
                .phase(TenantPhase::Active)
                .on("old")
                .reserved(2, 4, 5)
                .placed(crate::api::PlacedReason::MigrationBlocked.as_str())
        };
        let wait =
            |t: Tenant| waiter_of(&t).map(|(w, leaving)| (w.wait, w.footprint, w.uid, leaving));
        let (first, uid) = (wait(pending().build()), "uid-t".to_owned());
        assert!(
            matches!(first, Some((Wait::First { .. }, f, ref u, None)) if f == Resources::new(4, 8, 10) && *u == uid),
            "{first:?}"
        );
        // A move needs the room it holds, and leaves its node.
        assert_eq!(
            wait(blocked().build()),
            Some((
                Wait::Move,
                Resources::new(2, 4, 5),
                uid,
                Some("old".to_owned())
            ))
        );
        for (what, t) in [
            ("deleting", pending().deleting().build()),
            ("suspended", pending().suspended().build()),
            ("a suspended blocked move", blocked().suspended().build()),
            (
                "placed",
                tenant("t").phase(TenantPhase::Active).on("n1").build(),
            ),
            (
                "resizing in place",
                tenant("t").phase(TenantPhase::Resizing).on("n1").build(),
            ),
            ("no status", tenant("t").build()),
            ("an unusable spec", pending().replicas(0).build()),
        ] {
            assert!(waiter_of(&t).is_none(), "{what}");
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    /// A tenant created at `created` s, waiting for its first placement since `since` s.
    fn first(key: &str, created: i64, threads: u64, since: i64) -> Waiter {
        Waiter {
            key: key.into(),
            uid: format!("uid-{key}"),
            created: Some(at(created)),
            footprint: Resources::new(threads, 1, 1),
            selector: None,
            wait: Wait::First {
                since: Some(at(since)),
            },
        }
    }

    fn moving(key: &str, created: i64, threads: u64) -> Waiter {
        Waiter {
            wait: Wait::Move,
            ..first(key, created, threads, 0)
        }
    }

    fn planned(demand: &Demand) -> Vec<&str> {
        demand
            .planned
            .iter()
            .map(|t| t.waiting.tenant.as_str())
            .collect()
    }

    fn box_class(threads: u64) -> (NodeClassOffer, Labels) {
        let offer = NodeClassOffer {
            name: "box".into(),
            capacity: Resources::new(threads, 64, 1000),
            monthly_cost: Some(100),
            limit: None,
            in_use: 0,
        };
        (offer, Labels::new())
    }

    #[test]
    fn what_is_planned_for_is_what_the_queue_will_place_on_a_new_machine() {
        // now = 100 s, request_after = 60 s: waiting since 30 s is long enough, since 50 s not.
        let (now, after) = (at(100), Duration::from_secs(60));
        let waiters = [
            first("d/young", 20, 4, 30),
            first("d/head", 10, 100, 30),
            moving("d/mover", 5, 60),
            first("d/new", 30, 4, 50),
        ];
        // BestEffortFIFO: every move, and every first placement that waited long enough,
        // oldest first.
        let best = Demand::of(&waiters, QueueMode::BestEffortFifo, after, now);
        assert_eq!(planned(&best), ["d/mover", "d/head", "d/young"]);
        assert_eq!(best.head, None);
        // StrictFIFO: the same, with head (the oldest first placement) known, and who is behind.
        let strict = Demand::of(&waiters, QueueMode::StrictFifo, after, now);
        assert_eq!(planned(&strict), ["d/mover", "d/head", "d/young"]);
        let head = strict.head.as_ref().unwrap();
        assert_eq!((head.tenant.as_str(), head.planned), ("d/head", true));
        assert_eq!(head.behind, ["d/young", "d/new"]);
        // A head that has not waited long enough: nothing behind it is planned either; a move
        // is not behind it.
        let waiters = [
            first("d/head", 10, 4, 90),
            first("d/young", 20, 4, 30),
            moving("d/mover", 30, 4),
        ];
        let strict = Demand::of(&waiters, QueueMode::StrictFifo, after, now);
        assert_eq!(planned(&strict), ["d/mover"]);
        // What is planned for is told apart by its fingerprint.
        assert_ne!(strict.fingerprint(), best.fingerprint());
        assert_eq!(
            strict.fingerprint(),
            Demand::of(&waiters, QueueMode::StrictFifo, after, now).fingerprint()
        );
    }

    #[test]
    fn behind_a_strict_fifo_head_no_class_holds_nothing_is_bought() {
        // The issue's case: one 16-thread class; head asks 100 threads, young 12. Under
        // BestEffortFIFO young gets a box; under StrictFIFO young would never be placed on it
        // before head, which no box holds: nothing is bought, and both say why.
        let (now, after) = (at(100), Duration::ZERO);
        let waiters = [first("d/head", 10, 100, 10), first("d/young", 20, 12, 20)];
        let classes = [box_class(16)];
        let best = Demand::of(&waiters, QueueMode::BestEffortFifo, after, now);
        let (purchase, _) = best.plan(Policy::FirstFit, &classes, &[]);
        assert_eq!(purchase.requests.len(), 1);
        assert_eq!(purchase.requests[0].tenants, ["d/young"]);
        let strict = Demand::of(&waiters, QueueMode::StrictFifo, after, now);
        let (purchase, why) = strict.plan(Policy::FirstFit, &classes, &[]);
        assert!(purchase.requests.is_empty(), "{purchase:?}");
        assert!(
            why["d/head"].starts_with("no node can be requested for it: larger than every"),
            "{}",
            why["d/head"]
        );
        assert_eq!(
            why["d/young"],
            "it waits behind d/head (StrictFIFO), for which no machine can be bought: nothing is \
             bought for it before"
        );
        // Nor is a machine kept for young: it could not be placed there.
        assert!(!strict.could_use(&Labels::new(), Resources::new(16, 64, 1000)));
        assert!(best.could_use(&Labels::new(), Resources::new(16, 64, 1000)));
        // A head whose selector no class's labels match is no different.
        let mut lost = first("d/head", 10, 1, 10);
        lost.selector = Some(Labels::from([("region".to_owned(), "mars".to_owned())]));
        let strict = Demand::of(
            &[lost, waiters[1].clone()],
            QueueMode::StrictFifo,
            after,
            now,
        );
        let (purchase, why) = strict.plan(Policy::FirstFit, &classes, &[]);
        assert!(purchase.requests.is_empty(), "{purchase:?}");
        assert_eq!(
            why["d/head"],
            "no node can be requested for it: no node class makes nodes labelled region=mars"
        );
        // A move is not behind the head: it still gets its box.
        let with_move = [
            waiters[0].clone(),
            waiters[1].clone(),
            moving("d/mover", 30, 8),
        ];
        let strict = Demand::of(&with_move, QueueMode::StrictFifo, after, now);
        let (purchase, _) = strict.plan(Policy::FirstFit, &classes, &[]);
        assert_eq!(purchase.requests.len(), 1, "{purchase:?}");
        assert_eq!(purchase.requests[0].tenants, ["d/mover"]);
        // A head that has not waited long enough: the ones behind it say so.
        let recent = [first("d/head", 10, 100, 50), waiters[1].clone()];
        let strict = Demand::of(&recent, QueueMode::StrictFifo, Duration::from_secs(60), now);
        let (purchase, why) = strict.plan(Policy::FirstFit, &classes, &[]);
        assert!(purchase.requests.is_empty(), "{purchase:?}");
        assert_eq!(
            why["d/young"],
            "it waits behind d/head (StrictFIFO), which has not waited long enough for a machine \
             yet: nothing is bought for it before"
        );
    }

    #[test]
    fn an_older_blocked_move_takes_the_room_on_the_way_and_the_younger_tenant_gets_its_own() {
        // The issue's case: a 64-thread box is on the way for waiter (60); then mover (60, older)
        // is blocked off a draining node. The queue will give the box to mover first, so a second
        // box is bought for waiter.
        let (now, after) = (at(100), Duration::ZERO);
        let waiters = [first("d/waiter", 20, 60, 20), moving("d/mover", 10, 60)];
        let demand = Demand::of(&waiters, QueueMode::BestEffortFifo, after, now);
        let on_the_way = [(
            InFlightRequest {
                name: "box-1".into(),
                capacity: Resources::new(64, 64, 1000),
            },
            Labels::new(),
        )];
        let (purchase, _) = demand.plan(Policy::FirstFit, &[box_class(64)], &on_the_way);
        assert_eq!(purchase.in_flight_assignments[0].tenants, ["d/mover"]);
        assert_eq!(purchase.requests.len(), 1);
        assert_eq!(purchase.requests[0].tenants, ["d/waiter"]);
    }

    #[test]
    fn a_requests_room_goes_first_to_the_tenants_it_was_bought_for() {
        let (now, after) = (at(100), Duration::ZERO);
        let mut mars = first("d/mars", 4, 2, 0);
        mars.selector = Some(Labels::from([("region".to_owned(), "mars".to_owned())]));
        let waiters = [
            first("d/older", 1, 12, 0),
            first("d/mine", 5, 12, 0),
            first("d/small", 9, 4, 0),
            first("d/grown", 3, 20, 0),
            mars,
        ];
        let demand = Demand::of(&waiters, QueueMode::BestEffortFifo, after, now);
        fn room<'a>(name: &str, threads: u64, bought_for: &'a [String]) -> Room<'a> {
            Room {
                request: InFlightRequest {
                    name: name.into(),
                    capacity: Resources::new(threads, 64, 1000),
                },
                labels: Labels::new(),
                bought_for,
            }
        }
        let r1 = ["d/mine", "d/mars", "d/grown"].map(String::from);
        let r2 = ["d/gone".to_owned()];
        let (demand, in_flight) = demand.promise(vec![room("r1", 16, &r1), room("r2", 16, &r2)]);
        // mine is r1's (4 threads left). mars's selector is not r1's labels, and grown (bought
        // for when it was smaller) no longer fits: both are planned as usual, with older and
        // small, on what is left.
        assert_eq!(
            planned(&demand),
            ["d/older", "d/grown", "d/mars", "d/small"]
        );
        let left: Vec<(&str, u64)> = in_flight
            .iter()
            .map(|(r, _)| (r.name.as_str(), r.capacity.threads))
            .collect();
        assert_eq!(left, [("r1", 4), ("r2", 16)]);
        // So older is planned on r2, not on the room r1 brings for mine.
        let (purchase, _) = demand.plan(Policy::FirstFit, &[box_class(16)], &in_flight);
        let assigned: Vec<(&str, Vec<&str>)> = purchase
            .in_flight_assignments
            .iter()
            .map(|a| {
                (
                    a.request.as_str(),
                    a.tenants.iter().map(|t| t.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(assigned, [("r1", vec!["d/small"]), ("r2", vec!["d/older"])]);
        // Behind a StrictFIFO head, mine's room is not promised: the head comes first.
        let waiters = [first("d/head", 1, 10, 0), first("d/mine", 5, 12, 0)];
        let strict = Demand::of(&waiters, QueueMode::StrictFifo, after, now);
        let (strict, in_flight) = strict.promise(vec![room("r1", 16, &r1)]);
        assert_eq!(in_flight[0].0.capacity.threads, 16);
        assert_eq!(planned(&strict), ["d/head", "d/mine"]);
    }
}
