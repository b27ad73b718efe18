//! Wiring only: each term (the leader's, or the only replica's) starts the parts the loops share
//! (the watches, the engine, the waiting room, the claims: `Term`), then the loops, one line
//! each in `run_controllers`, each built from the few settings it reads (`TenantSettings`,
//! `CapacitySettings`, …). Tenants run on our own cache and runner, Nodes on kube's reflector
//! and `Controller`; both decide through the one placement engine.
//!
//! ```text
//!   watch Tenants ──▶ tenant::reconcile ──────────────┐   (enters the WaitingRoom before deciding)
//!        ▲ reconcile_on                               │
//!   WaitingRoom ◀── node::reconcile ◀── watch Nodes    ├──▶ engine::Engine (the only
//!                   (could this node take a waiter?)  ┘     Node-status writer)
//!   beside them, when on: the capacity tick (NodeClasses, NodeRequests) and the registration
//!   (core v1 Nodes ──▶ placement Nodes: register::run)
//! ```
//!
//! Rules enforced here:
//! - a loop is given its settings at construction, never the whole `Settings`, and nothing
//!   configures it once it runs; adding a loop is one line of the list;
//! - failed reconciles are re-queued with per-object exponential backoff;
//! - a settled tenant is looked at again by the resync sweep ([`resyncs`]), a slice of the cache
//!   at a time, never by a timer of its own;
//! - tenants waiting for room are re-checked when a node could take them (WaitingRoom) and
//!   otherwise at a fallback interval that backs off while nothing changes;
//! - the engine decides only from a synced node cache;
//! - an entry is released as an orphan only after a direct read confirms its tenant is gone;
//! - the controller is handed what it reports into ([`Handles`]: [`Health`], the
//!   [`Metrics`] it counts into, the [`Caches`] of each term) and knows
//!   nothing of HTTP, the page or metrics formatting (docs/design.md, "The parts").

pub mod capacity;
pub mod capi;
pub mod consolidation;
pub mod disruption;
pub mod engine;
pub mod make_room;
pub mod node;
pub mod patch;
pub mod publisher;
pub mod register;
pub mod runner;
pub mod settings;
pub mod state;
pub mod tenant;
pub mod wake;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::Instrument;

use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use k8s_openapi::api::core::v1::Node as CoreNode;

use crate::api::{LabelSelector, Node, NodeClass, NodeRequest, Tenant};
use crate::error::Error;
use crate::leader::{self, AbortOnDrop};
use crate::metrics::Metrics;
pub use capacity::{CapacityLoop, CapacitySettings};
pub use engine::{Bought, Engine, EngineConfig, NodeChanges, RetryPolicy};
pub use node::{NodeLoop, NodeSettings};
pub use register::{RegisterLoop, RegisterSettings};
pub use settings::{Backoff, Doubling, EventLevel, Settings};
pub use state::tenant_cache::{Applied as TenantApplied, TenantCache, TenantKey, TenantName};
pub use state::{Synced, WaitingRoom};
use state::{claims, decode, newest, strip};
pub use tenant::{TenantLoop, TenantSettings};

/// Copies of our own Tenant writes kept a generation (two generations): in a flood of new
/// tenants the watch runs behind the writes by as many tenants as wait to be placed, and a copy
/// is a tenant's worth of memory. Past the bound a copy leaves its version only, and a
/// reconcile that needs it reads the tenant (a read, never a second write).
const TENANT_COPIES: usize = 1024;

/// What a kind needs to be watched, decoded one by one and cached.
trait Watchable:
    strip::Cached<DynamicType = ()>
    + decode::Lenient
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watchable for K where
    K: strip::Cached<DynamicType = ()>
        + decode::Lenient
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// A watch of `api` (within `selector`), each object stripped of what the controller never
/// reads (`strip`) and decoded one by one: one that cannot be decoded goes to `skipped` and the
/// rest go on (see `decode`).
fn watched<K>(
    api: Api<decode::Decoded<K>>,
    selector: Option<&LabelSelector>,
    skipped: futures::channel::mpsc::UnboundedSender<decode::Skipped>,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Watchable,
{
    let mut config = watcher::Config::default().any_semantic();
    if let Some(selector) = selector.filter(|s| !s.is_everything()) {
        config = config.labels(selector.as_str());
    }
    watcher::watcher(api, config)
        .default_backoff()
        // Before anything keeps it: what is never read is never cached (see `strip`).
        .modify(strip::strip)
        .filter_map(move |event| {
            let readable = match event {
                Ok(event) => decode::readable(event, &mut |bad| {
                    // A closed channel means the controller is stopping.
                    let _ = skipped.unbounded_send(decode::Skipped::of::<K>(bad));
                })
                .map(Ok),
                Err(error) => Some(Err(error)),
            };
            std::future::ready(readable)
        })
}

/// A reflector feeding `cache` from a [`watched`] stream, raising `synced` whenever a full list
/// has been applied and showing every event to `on_event`. The stream it returns triggers the
/// controller.
fn reflected<K>(
    api: Api<decode::Decoded<K>>,
    selector: Option<&LabelSelector>,
    feed: reflector::store::Writer<K>,
    synced: watch::Sender<bool>,
    on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
    skipped: futures::channel::mpsc::UnboundedSender<decode::Skipped>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Watchable,
{
    watched(api, selector, skipped)
        .reflect(feed)
        .inspect_ok(move |event| {
            if matches!(event, watcher::Event::InitDone) {
                let _ = synced.send(true);
            }
            on_event(event);
        })
        .applied_objects()
}

/// Slices of the resync sweep: every `resync / RESYNC_SLICES` one slice of the tenants is
/// looked at again.
const RESYNC_SLICES: u64 = 64;

/// Whether an object (by UID or name hash) is in this slice of a sweep: each in exactly one.
fn in_resync_slice(id: &str, slice: u64) -> bool {
    placement::uid_hash(id) % RESYNC_SLICES == slice
}

/// A sweep: every `period / RESYNC_SLICES`, the objects `due` names for the next slice, so that
/// each object is named once per period and no queue holds a timer per object meanwhile.
fn sweep<T, Due>(period: Duration, due: Due) -> impl futures::Stream<Item = T> + Send + 'static
where
    T: Send + 'static,
    Due: Fn(u64) -> Vec<T> + Clone + Send + Sync + 'static,
{
    let tick = period
        .checked_div(u32::try_from(RESYNC_SLICES).unwrap_or(u32::MAX))
        .unwrap_or(period);
    futures::stream::unfold(0, move |slice| {
        let due = due.clone();
        async move {
            tokio::time::sleep(tick).await;
            Some((
                futures::stream::iter(due(slice)),
                slice.wrapping_add(1) % RESYNC_SLICES,
            ))
        }
    })
    .flatten()
}

/// Every cached tenant, looked at again once per `period`, a slice at a time.
///
/// A settled tenant waits for nothing in the runner's queue: the sweep walks the cache instead,
/// so a status changed by someone else is still corrected within one period.
fn resyncs(
    tenants: TenantCache,
    period: Duration,
) -> impl futures::Stream<Item = TenantKey> + Send + 'static {
    sweep(period, move |slice| {
        tenants.keys_by_uid(|uid| in_resync_slice(uid, slice))
    })
}

/// Every cached node, looked at again once per `period` (the orphan sweep), a slice at a time
/// (by name): a node at rest waits in no scheduler.
fn node_sweeps(
    nodes: Store<Node>,
    period: Duration,
) -> impl futures::Stream<Item = ObjectRef<Node>> + Send + 'static {
    sweep(period, move |slice| {
        nodes
            .state()
            .iter()
            .filter(|node| in_resync_slice(&node.name_any(), slice))
            .map(|node| strip::trigger_ref(node.as_ref()))
            .collect()
    })
}

/// Reports each skipped object version once: an error log naming it and the field, the metric,
/// and a Warning Event on the object.
async fn report_skipped(
    mut skipped: futures::channel::mpsc::UnboundedReceiver<decode::Skipped>,
    metrics: Arc<Metrics>,
    events: Option<publisher::EventPublisher>,
) {
    let mut reported = decode::Reported::default();
    while let Some(bad) = skipped.next().await {
        if !reported.first_time(&bad) {
            continue;
        }
        // A Node is kept present, unreadable (decode::Lenient::salvage); the others (a core
        // Node among them) are skipped.
        let placement_node = bad.object.kind.as_deref() == Some(&*Node::kind(&()))
            && bad.object.api_version.as_deref() == Some(&*Node::api_version(&()));
        let kept = if placement_node {
            "keeps it present but unreadable (its reservations stay; nothing is placed on it or moved off it) until it is fixed"
        } else {
            "skips it until it is fixed (the last readable version is kept)"
        };
        tracing::error!(object = %bad.describe(), error = %bad.error,
            "cannot decode this object; tenant-placer {kept}");
        metrics.undecodable(bad.object.kind.as_deref().unwrap_or_default());
        let occurrence = publisher::Occurrence {
            type_: kube::runtime::events::EventType::Warning,
            reason: "Undecodable",
            action: "Decode",
            note: format!(
                "tenant-placer cannot read this object and {kept}: {}",
                bad.error
            ),
        };
        publisher::EventPublisher::publish_or_log(events.as_ref(), occurrence, bad.object.clone())
            .await;
    }
}

/// This replica's part, written by the run loop: the leader (or the only replica) with synced
/// caches, a standby, or starting. The serving layer answers `/readyz` from it.
#[derive(Debug, Default)]
pub struct Health {
    caches_synced: AtomicBool,
    leading: AtomicBool,
    /// Leader election is running and another replica leads.
    standby: AtomicBool,
}

/// This replica's part (shown by `/readyz`, the `tenant_placer_leader` gauge and the fleet page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Reconciling, caches synced.
    Leading,
    /// Leader election runs and another replica leads; ready to take over.
    Standby,
    /// Starting: caches syncing, or the first election round has not answered yet.
    Starting,
}

impl Health {
    pub fn role(&self) -> Role {
        if self.leading.load(Ordering::SeqCst) && self.caches_synced.load(Ordering::SeqCst) {
            Role::Leading
        } else if self.standby.load(Ordering::SeqCst) {
            Role::Standby
        } else {
            Role::Starting
        }
    }

    /// Ready when leading with synced caches, or as a standby.
    // NB: a standby reports ready so that rollouts of several replicas can finish; whether it
    // leads is in the /readyz body and the tenant_placer_leader metric.
    pub fn ready(&self) -> bool {
        self.role() != Role::Starting
    }
}

/// The watch caches of the current leadership term, for whoever reads the fleet without asking
/// the API server (the serving layer's gauges and page). Empty until the controller first runs;
/// each term replaces them (a past term's stay until then).
#[derive(Clone, Default)]
pub struct Caches {
    stores: Arc<Mutex<Option<Stores>>>,
    purchases: Arc<Mutex<Option<PurchaseStores>>>,
    registered: Arc<Mutex<Option<Store<Node>>>>,
    tick: Arc<Mutex<Option<Arc<state::tick::Published>>>>,
}

/// The node and tenant watch caches of one term.
pub type Stores = (Store<Node>, TenantCache);

/// The NodeClass and NodeRequest watch caches of one term (when node requests are on).
pub type PurchaseStores = (Store<NodeClass>, Store<NodeRequest>);

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches")
            .field("set", &self.get().is_some())
            .finish()
    }
}

impl Caches {
    /// Hands out these stores from now on (the controller, at the start of each term; tests
    /// that fill stores by hand).
    pub fn set(&self, nodes: Store<Node>, tenants: TenantCache) {
        *self.stores.lock().unwrap_or_else(PoisonError::into_inner) = Some((nodes, tenants));
    }

    /// The node and tenant stores, once the controller has set them.
    pub fn get(&self) -> Option<Stores> {
        self.stores
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Hands out these class and request stores from now on.
    pub fn set_purchases(&self, classes: Store<NodeClass>, requests: Store<NodeRequest>) {
        *self
            .purchases
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((classes, requests));
    }

    /// The class and request stores, once the controller has set them (node requests on).
    pub fn purchases(&self) -> Option<PurchaseStores> {
        self.purchases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Hands out where the capacity tick publishes its view from now on (node requests on).
    pub fn set_tick(&self, published: Arc<state::tick::Published>) {
        *self.tick.lock().unwrap_or_else(PoisonError::into_inner) = Some(published);
    }

    /// The last capacity tick's view, once a tick has run.
    pub fn tick(&self) -> Option<Arc<state::tick::TickView>> {
        self.tick
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()?
            .get()
    }

    /// Hands out the registration's store of placement Nodes (every one, without its status)
    /// from now on.
    pub fn set_registered(&self, nodes: Store<Node>) {
        *self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(nodes);
    }

    /// The registration's store of placement Nodes (every one, without its status), once the
    /// controller has set it (registration on).
    pub fn registered(&self) -> Option<Store<Node>> {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What a running controller reports into: readiness, counters, and its watch caches. Whoever
/// shows them (the HTTP server, a test) holds clones; the controller knows nothing of them.
#[derive(Clone, Debug, Default)]
pub struct Handles {
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    pub caches: Caches,
}

/// Runs the controllers until a shutdown signal: at once, or while leading with leader election.
pub async fn run(client: Client, settings: Settings) {
    run_with(client, settings, Handles::default()).await;
}

/// [`run`], reporting readiness, counters and its watch caches into `handles`.
pub async fn run_with(client: Client, settings: Settings, handles: Handles) {
    let health = handles.health.clone();
    let Some(lease) = settings.leader_election.clone() else {
        health.leading.store(true, Ordering::SeqCst);
        return run_controllers(client, settings, handles).await;
    };
    let (mut leading, _election) = leader::spawn(client.clone(), lease);
    loop {
        // Follow until we lead; the first answer of the election makes us a standby.
        while !*leading.borrow_and_update() {
            if leading.changed().await.is_err() {
                return;
            }
            health.standby.store(!*leading.borrow(), Ordering::SeqCst);
        }
        health.standby.store(false, Ordering::SeqCst);
        health.leading.store(true, Ordering::SeqCst);
        let mut controllers = AbortOnDrop(tokio::spawn(run_controllers(
            client.clone(),
            settings.clone(),
            handles.clone(),
        )));
        let finished = loop {
            tokio::select! {
                changed = leading.changed() => {
                    if changed.is_err() || !*leading.borrow_and_update() {
                        break false;
                    }
                }
                _ = &mut controllers.0 => break true,
            }
        };
        // NB: aborting drops every in-flight request with the task: no new write leaves after this.
        drop(controllers);
        health.leading.store(false, Ordering::SeqCst);
        health.caches_synced.store(false, Ordering::SeqCst);
        health.standby.store(true, Ordering::SeqCst);
        if finished {
            return;
        }
        tracing::warn!("lost the lease: stopped reconciling");
    }
}

/// Where undecodable objects are reported (see [`report_skipped`]).
type Skips = futures::channel::mpsc::UnboundedSender<decode::Skipped>;

/// The watches, the engine and the loops of one term, built and run until shutdown: the parts
/// the loops share, then one line per loop, each built from the settings it reads.
async fn run_controllers(client: Client, settings: Settings, handles: Handles) {
    let health = handles.health.clone();
    // New caches start empty: not ready until they sync (a previous term's flag may remain,
    // e.g. after a task was aborted in-process).
    health.caches_synced.store(false, Ordering::SeqCst);
    let (term, feeds) = Term::start(client, &settings, handles);
    let Feeds {
        node_controller,
        nodes_synced,
        tenants,
        undecodable,
        raise_queue_ready,
    } = feeds;
    // The capacity tick's class and request caches are capi's too (node requests on).
    let (capacity, read) = CapacitySettings::of(&settings)
        .map(|capacity| capacity_loop(&term, capacity))
        .unzip();
    let loops = [
        Some(skip_reports(&term, undecodable)),
        Some(readiness(&term, nodes_synced, raise_queue_ready, health)),
        Some(wake_loop(&term, settings.requeue_window)),
        capacity,
        RegisterSettings::of(&settings).map(|register| register_loop(&term, register)),
        settings
            .cluster_api
            .then(|| capi_loop(&term, &settings, read)),
        Some(node_loop(
            &term,
            node_controller,
            NodeSettings::from(&settings),
        )),
        Some(tenant_loop(&term, tenants, TenantSettings::from(&settings))),
    ];
    run_all(loops.into_iter().flatten()).await;
}

/// What the loops of one term share, built once at its start: the client and what they report
/// into, the watch caches and the engine over them, the waiting room and the claims, what the
/// capacity tick gives the tenant loop, and Events.
struct Term {
    client: Client,
    metrics: Arc<Metrics>,
    caches: Caches,
    events: publisher::EventPublisher,
    skipped: Skips,
    engine: Arc<Engine>,
    waiting: Arc<WaitingRoom>,
    claims: Arc<claims::Claims>,
    nodes: Store<Node>,
    tenants: TenantCache,
    tenants_synced: Synced,
    tenant_copies: Arc<newest::Newest<Tenant>>,
    notes: Arc<state::PurchaseNotes>,
    /// The room made by moves (node requests on, make-room on).
    orders: Option<Arc<state::RoomOrders>>,
    /// Fed by the request watch (node requests on): delivered machines' room is held for the
    /// tenants they were bought for.
    bought: Option<Arc<Bought>>,
    /// The tenant watch, feeding the tenant cache for the term.
    _tenant_watch: AbortOnDrop,
}

/// What exactly one loop takes at a term's start: streams and flags with one reader each.
struct Feeds {
    /// kube's controller over the node watch, for the node loop.
    node_controller: Controller<Node>,
    /// Raised at the node watch's first full list.
    nodes_synced: Synced,
    tenants: TenantFeeds,
    undecodable: futures::channel::mpsc::UnboundedReceiver<decode::Skipped>,
    /// Lets the engine decide (see [`readiness`]).
    raise_queue_ready: watch::Sender<bool>,
}

/// What the tenant loop takes: the runner the tenant watch triggers, the waiting room's
/// wake-ups, and each deleted tenant (to release its entry).
struct TenantFeeds {
    runner: Arc<runner::Runner>,
    wake_ups: futures::channel::mpsc::UnboundedReceiver<ObjectRef<Tenant>>,
    deletions: futures::channel::mpsc::UnboundedReceiver<Tenant>,
}

impl Term {
    /// The shared parts of a term, its watches started.
    fn start(client: Client, settings: &Settings, handles: Handles) -> (Term, Feeds) {
        let Handles {
            metrics, caches, ..
        } = handles;
        let (skipped, undecodable) = futures::channel::mpsc::unbounded::<decode::Skipped>();
        let (waiting, wake_ups) = WaitingRoom::with_mode(settings.queue);
        let waiting = Arc::new(waiting);
        let claims: Arc<claims::Claims> = Arc::default();
        // The engine looks only at the nodes this watch changed (the cache holds them by now).
        let node_changes: Arc<NodeChanges> = Arc::default();
        let (nodes, node_feed) = reflector::store::<Node>();
        let (raise_nodes, nodes_synced) = Synced::flag();
        let node_controller = Controller::for_stream(
            node_events(
                &client,
                settings.pool_nodes.as_ref(),
                (node_feed, raise_nodes),
                (node_changes.clone(), claims.clone(), waiting.clone()),
                skipped.clone(),
            )
            .map_ok(strip::trigger),
            nodes.clone(),
        );
        // The engine decides nothing before both caches are synced and the waiting room holds
        // every tenant that was waiting (a restart, or a new leader, keeps the queue's order).
        let (raise_queue_ready, queue_ready) = Synced::flag();
        let bought = settings.request_after.map(|_| Arc::new(Bought::default()));
        let orders = (settings.make_room_moves_in_force() > 0)
            .then(|| Arc::new(state::RoomOrders::default()));
        let engine = Arc::new(Engine::start(
            Api::all(client.clone()),
            nodes.clone(),
            queue_ready,
            EngineConfig {
                retry: settings.retry,
                policy: settings.policy,
                waiting: Some(waiting.clone()),
                metrics: metrics.clone(),
                max_migrations: usize::from(settings.max_migrations),
                node_changes: Some(node_changes),
                bought: bought.clone(),
                orders: orders.clone(),
                zone_label: settings.zone_label.clone(),
            },
        ));
        let tenants = TenantCache::default();
        let runner = Arc::new(runner::Runner::default());
        let (raise_tenants, tenants_synced) = Synced::flag();
        let tenant_copies = Arc::new(newest::Newest::<Tenant>::bounded(TENANT_COPIES));
        let (deleted, deletions) = futures::channel::mpsc::unbounded::<Tenant>();
        let tenant_watch = AbortOnDrop(tokio::spawn(tenant_events(
            TenantWatch {
                cache: tenants.clone(),
                synced: raise_tenants,
                due: runner.clone(),
                copies: tenant_copies.clone(),
                claims: claims.clone(),
                waiting: waiting.clone(),
                gone: engine.gone(),
                deleted,
            },
            &client,
            settings.pool_tenants.as_ref(),
            skipped.clone(),
        )));
        caches.set(nodes.clone(), tenants.clone());
        let events = publisher::EventPublisher::new(
            client.clone(),
            "tenant-placer",
            settings.instance.clone(),
        );
        let term = Term {
            client,
            metrics,
            caches,
            events,
            skipped,
            engine,
            waiting,
            claims,
            nodes,
            tenants,
            tenants_synced,
            tenant_copies,
            notes: Arc::default(),
            orders,
            bought,
            _tenant_watch: tenant_watch,
        };
        let feeds = Feeds {
            node_controller,
            nodes_synced,
            tenants: TenantFeeds {
                runner,
                wake_ups,
                deletions,
            },
            undecodable,
            raise_queue_ready,
        };
        (term, feeds)
    }
}

/// One loop of a term, started: the tasks it runs (aborted when it is dropped), and, for the
/// loops that stop at the shutdown signal (tenants, nodes), what ends then.
struct Running {
    tasks: Vec<AbortOnDrop>,
    until_shutdown: Option<futures::future::BoxFuture<'static, ()>>,
}

impl Running {
    /// A loop that is one task.
    fn task(task: impl Future<Output = ()> + Send + 'static) -> Running {
        Running {
            tasks: vec![AbortOnDrop(tokio::spawn(task))],
            until_shutdown: None,
        }
    }

    /// A loop and the watches that feed it, as two tasks.
    fn watching(
        watches: impl Future + Send + 'static,
        run: impl Future<Output = ()> + Send + 'static,
    ) -> Running {
        let watches = async move {
            watches.await;
        };
        Running {
            tasks: vec![
                AbortOnDrop(tokio::spawn(watches)),
                AbortOnDrop(tokio::spawn(run)),
            ],
            until_shutdown: None,
        }
    }
}

/// Runs until every loop that stops at the shutdown signal has stopped; the other tasks are
/// aborted then.
async fn run_all(loops: impl IntoIterator<Item = Running>) {
    let (mut tasks, mut ends) = (Vec::new(), Vec::new());
    for running in loops {
        tasks.extend(running.tasks);
        ends.extend(running.until_shutdown);
    }
    futures::future::join_all(ends).await;
    drop(tasks);
}

/// The reports of undecodable objects (see [`report_skipped`]).
fn skip_reports(
    term: &Term,
    undecodable: futures::channel::mpsc::UnboundedReceiver<decode::Skipped>,
) -> Running {
    let events = Some(term.events.clone());
    Running::task(report_skipped(undecodable, term.metrics.clone(), events))
}

/// Once both caches have synced: the waiting room rebuilt from the tenant cache, then the
/// engine may decide and this replica is ready.
fn readiness(
    term: &Term,
    nodes_synced: Synced,
    raise_queue_ready: watch::Sender<bool>,
    health: Arc<Health>,
) -> Running {
    let (waiting, tenants) = (term.waiting.clone(), term.tenants.clone());
    let tenants_synced = term.tenants_synced.clone();
    Running::task(async move {
        if nodes_synced.wait().await.is_ok() && tenants_synced.wait().await.is_ok() {
            let waiting = waiting.rebuild_from(&tenants);
            tracing::info!(waiting, "waiting room rebuilt from the tenant cache");
            let _ = raise_queue_ready.send(true);
            health.caches_synced.store(true, Ordering::SeqCst);
        }
    })
}

/// The wake loop: passes of the waiting room, at most one per `requeue_window`.
fn wake_loop(term: &Term, requeue_window: Duration) -> Running {
    Running::task(wake::run(wake::WakeLoop {
        waiting: term.waiting.clone(),
        claims: term.claims.clone(),
        engine: term.engine.clone(),
        tenants: term.tenants.clone(),
        requeue_window,
    }))
}

/// The capacity tick, with the class and request watches it reads (and hands to capi).
fn capacity_loop(
    term: &Term,
    settings: CapacitySettings,
) -> (Running, capi::caches::ClassesAndRequests) {
    let published: Arc<state::tick::Published> = Arc::default();
    term.caches.set_tick(published.clone());
    let buyer = CapacityLoop {
        client: term.client.clone(),
        engine: term.engine.clone(),
        tenants: term.tenants.clone(),
        tenants_synced: term.tenants_synced.clone(),
        waiting: term.waiting.clone(),
        memory: Arc::default(),
        notes: term.notes.clone(),
        consolidation: Arc::default(),
        orders: term.orders.clone(),
        published,
        events: Some(term.events.clone()),
        metrics: term.metrics.clone(),
        settings,
    };
    purchases(
        buyer,
        &term.caches,
        term.bought.clone(),
        term.skipped.clone(),
    )
}

/// The registration, with the core Node and placement Node watches it reads.
fn register_loop(term: &Term, settings: RegisterSettings) -> Running {
    let registrar = RegisterLoop {
        events: Some(term.events.clone()),
        metrics: term.metrics.clone(),
        ..RegisterLoop::new(term.client.clone(), settings)
    };
    registration(registrar, &term.caches, term.skipped.clone())
}

/// The Cluster API provisioner, reading the capacity tick's class and request caches when node
/// requests are on (else its own).
fn capi_loop(
    term: &Term,
    settings: &Settings,
    read: Option<capi::caches::ClassesAndRequests>,
) -> Running {
    let provisioner = capi::CapiLoop {
        events: Some(term.events.clone()),
        metrics: term.metrics.clone(),
        ..capi::CapiLoop::new(term.client.clone(), settings, read)
    };
    Running::task(provisioner.run())
}

/// The node loop: kube's controller over the node watch, and every node again each
/// `orphan_sweep`, bounded like the tenants' (in a flood every node changes, and an unbounded
/// controller holds a reconcile in flight for each of them, about 1 KB each, waiting on the
/// engine).
fn node_loop(term: &Term, controller: Controller<Node>, settings: NodeSettings) -> Running {
    let sweeps = node_sweeps(term.nodes.clone(), settings.orphan_sweep);
    let concurrency = settings.concurrency;
    let ctx = Arc::new(NodeLoop {
        claims: term.claims.clone(),
        metrics: term.metrics.clone(),
        ..NodeLoop::new(
            term.client.clone(),
            term.engine.clone(),
            (term.tenants.clone(), term.tenants_synced.clone()),
            term.waiting.clone(),
            settings,
        )
    });
    let reconciles =
        controller
            .reconcile_on(sweeps)
            .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
            .shutdown_on_signal()
            .run(
                |node, ctx| {
                    let metrics = ctx.metrics.clone();
                    async move {
                        observed("node", node.clone(), &metrics, node::reconcile(node, ctx)).await
                    }
                },
                node::error_policy,
                ctx,
            )
            .for_each(|result| async move { log_result("node", result) });
    Running {
        tasks: Vec::new(),
        until_shutdown: Some(Box::pin(reconciles)),
    }
}

/// The tenant loop: the runner reconciles each tenant that falls due (a watch change, a
/// wake-up from the waiting room or the claims, its requeue, the resync sweep), `concurrency`
/// at once, once the tenant cache has synced; beside it, each deleted tenant's entry released.
fn tenant_loop(term: &Term, feeds: TenantFeeds, settings: TenantSettings) -> Running {
    let TenantFeeds {
        runner,
        wake_ups,
        deletions,
    } = feeds;
    let ctx = Arc::new(TenantLoop {
        tenant_copies: term.tenant_copies.clone(),
        notes: term.notes.clone(),
        orders: term.orders.clone(),
        events: Some(term.events.clone()),
        metrics: term.metrics.clone(),
        ..TenantLoop::new(
            term.client.clone(),
            term.engine.clone(),
            term.tenants.clone(),
            term.waiting.clone(),
            settings,
        )
    });
    let concurrency = usize::from(ctx.settings.concurrency);
    let released_on_delete = ctx.clone();
    let releases = AbortOnDrop(tokio::spawn(deletions.for_each_concurrent(
        concurrency,
        move |gone| {
            let ctx = released_on_delete.clone();
            async move { tenant::deleted(&gone, &ctx).await }
        },
    )));
    let (resolved, sweep) = (ctx.tenants.clone(), ctx.tenants.clone());
    let wakes = wake_ups
        .filter_map(move |tenant| std::future::ready(resolved.entry(&tenant).map(|(key, _)| key)))
        .chain(futures::stream::pending());
    let woken = runner.clone();
    let wakes = AbortOnDrop(tokio::spawn(
        futures::stream::select(wakes, resyncs(sweep, ctx.settings.resync)).for_each(move |key| {
            woken.trigger(key);
            std::future::ready(())
        }),
    ));
    let (tenants, synced) = (ctx.tenants.clone(), term.tenants_synced.clone());
    let reconciles = async move {
        runner
            .run(
                &tenants,
                &synced,
                concurrency,
                move |tenant| {
                    let ctx = ctx.clone();
                    async move {
                        // Boxed: the reconcile's state is about 9.5 KB, and every wrapper
                        // around it (the span, this block, the runner's) was as large again,
                        // copied whole at each move.
                        let reconcile = Box::pin(tenant::reconcile(tenant.clone(), ctx.clone()));
                        match observed("tenant", tenant.clone(), &ctx.metrics, reconcile).await {
                            Ok(action) => action,
                            Err(error) => runner::Action::requeue(ctx.retry_after(&tenant, &error)),
                        }
                    }
                },
                runner::shutdown_signal(),
            )
            .await;
    };
    Running {
        tasks: vec![releases, wakes],
        until_shutdown: Some(Box::pin(reconciles)),
    }
}

/// The node watch: feeds the cache (raising `synced` at each full list) and shows every change
/// to the engine; a node that goes took its entries with it, so the claims on it are checked at
/// the waiting room's next pass.
fn node_events(
    client: &Client,
    selector: Option<&LabelSelector>,
    (feed, synced): (reflector::store::Writer<Node>, watch::Sender<bool>),
    (changes, claims, waiting): (Arc<NodeChanges>, Arc<claims::Claims>, Arc<WaitingRoom>),
    skipped: Skips,
) -> impl futures::Stream<Item = Result<Node, watcher::Error>> + Send + 'static {
    reflected(
        Api::all(client.clone()),
        selector,
        feed,
        synced,
        move |event: &watcher::Event<Node>| match event {
            watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                changes.changed(&node.name_any());
            }
            watcher::Event::Delete(node) => {
                changes.changed(&node.name_any());
                claims.node_changed(&node.name_any());
                waiting.poke();
            }
            watcher::Event::Init | watcher::Event::InitDone => changes.all(),
        },
        skipped,
    )
}

/// What the tenant watch feeds.
struct TenantWatch {
    cache: TenantCache,
    /// Raised at each full list.
    synced: watch::Sender<bool>,
    /// Triggered with each tenant that fell due.
    due: Arc<runner::Runner>,
    /// Our own writes' copies, which go once the watch delivers them.
    copies: Arc<newest::Newest<Tenant>>,
    claims: Arc<claims::Claims>,
    waiting: Arc<WaitingRoom>,
    /// Deleted UIDs: never placed again.
    gone: Arc<engine::GoneUids>,
    /// Each deleted tenant, to release its entry (what a finalizer-less delete needs; with the
    /// finalizer it finds nothing left to release).
    deleted: futures::channel::mpsc::UnboundedSender<Tenant>,
}

/// The tenant watch, until it is dropped. A tenant is reconciled when what it asks changes
/// (spec: generation) or it is being deleted, not when only its status changes (our own
/// writes): that halves the reconciles. A status changed by someone else is checked against its
/// node by the claims.
fn tenant_events(
    fed: TenantWatch,
    client: &Client,
    selector: Option<&LabelSelector>,
    skipped: Skips,
) -> impl Future<Output = ()> + Send + 'static {
    // NB: a watch with a selector reports a tenant whose labels left it as deleted: in a pool,
    // a delete is confirmed by a direct read before its UID counts as gone (`tenant::deleted`).
    let pooled = selector.is_some_and(|s| !s.is_everything());
    watched(Api::all(client.clone()), selector, skipped).for_each(move |event| {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(%error, "the tenant watch failed; it is retried");
                return std::future::ready(());
            }
        };
        let applied = fed.cache.apply_keyed(&event);
        match &event {
            watcher::Event::Apply(tenant) | watcher::Event::InitApply(tenant) => {
                fed.copies.observed(tenant);
                // A status that says it waits, written by someone else (another controller):
                // decided here too, or nothing here would wake it when room appears. (The
                // start of a term rebuilds the waiting room from the statuses instead.)
                if matches!(event, watcher::Event::Apply(_))
                    && tenant.is_waiting()
                    && tenant
                        .metadata
                        .uid
                        .as_deref()
                        .is_some_and(|uid| !fed.waiting.holds(uid))
                {
                    fed.waiting.wake(ObjectRef::from_obj(tenant));
                }
                if let Some(key) = &applied.key
                    && fed.claims.observe(key, applied.before.as_ref(), tenant)
                {
                    fed.waiting.poke();
                }
            }
            watcher::Event::Delete(tenant) => {
                if let Some(uid) = tenant.metadata.uid.as_ref().filter(|_| !pooled) {
                    fed.gone.insert(uid);
                }
                fed.claims
                    .forget(&ObjectRef::from_obj(tenant), applied.before.as_ref());
                let _ = fed.deleted.unbounded_send(tenant.clone());
            }
            // A relist drops what was deleted while the watch was down, without a delete event.
            watcher::Event::InitDone => {
                let _ = fed.synced.send(true);
                fed.waiting.retain_present(&fed.cache);
                fed.claims.retain_present(&fed.cache);
            }
            watcher::Event::Init => {}
        }
        for key in applied.due {
            fed.due.trigger(key);
        }
        std::future::ready(())
    })
}

/// The NodeClass and NodeRequest watches and the capacity tick, as two tasks. The request watch
/// shows every event, not only the cache, to the loop's memory (a request Failed or gone between
/// looks is seen) and to `bought`.
fn purchases(
    buyer: CapacityLoop,
    caches: &Caches,
    bought: Option<Arc<Bought>>,
    skipped: Skips,
) -> (Running, capi::caches::ClassesAndRequests) {
    let (class_cache, class_feed) = reflector::store::<NodeClass>();
    let (request_cache, request_feed) = reflector::store::<NodeRequest>();
    caches.set_purchases(class_cache.clone(), request_cache.clone());
    let (raise_classes, classes_synced) = Synced::flag();
    let (raise_requests, requests_synced) = Synced::flag();
    let classes = reflected(
        Api::all(buyer.client.clone()),
        None,
        class_feed,
        raise_classes,
        |_: &watcher::Event<NodeClass>| {},
        skipped.clone(),
    );
    let observed = buyer.memory.clone();
    let requests = reflected(
        Api::all(buyer.client.clone()),
        None,
        request_feed,
        raise_requests,
        move |event: &watcher::Event<NodeRequest>| {
            observed.observe(event);
            if let Some(bought) = &bought {
                bought.observe(event);
            }
        },
        skipped,
    );
    let watches = futures::future::join(
        classes.for_each(|_| std::future::ready(())),
        requests.for_each(|_| std::future::ready(())),
    );
    let tick = capacity::run(
        Arc::new(buyer),
        (class_cache.clone(), classes_synced.clone()),
        (request_cache.clone(), requests_synced.clone()),
    );
    (
        Running::watching(watches, tick),
        (
            (class_cache, classes_synced),
            (request_cache, requests_synced),
        ),
    )
}

/// The registration's watches (the core Nodes its selector takes; every placement Node, kept
/// without its status) and its rounds, as two tasks. Every event of either watch asks for a
/// round.
fn registration(registrar: RegisterLoop, caches: &Caches, skipped: Skips) -> Running {
    let (core_cache, core_feed) = reflector::store::<CoreNode>();
    let (node_cache, node_feed) = reflector::store::<Node>();
    caches.set_registered(node_cache.clone());
    let (raise_cores, cores_synced) = Synced::flag();
    let (raise_nodes, nodes_synced) = Synced::flag();
    let changed = Arc::new(tokio::sync::Notify::new());
    let asks = changed.clone();
    let cores = reflected(
        Api::all(registrar.client.clone()),
        Some(&registrar.selector),
        core_feed,
        raise_cores,
        move |_: &watcher::Event<CoreNode>| asks.notify_one(),
        skipped.clone(),
    );
    let asks = changed.clone();
    // NB: not `reflected`: these Nodes are kept without their status (`strip::without_status`),
    // which the engine's cache keeps whole.
    let nodes = watched(Api::all(registrar.client.clone()), None, skipped)
        .modify(strip::without_status)
        .reflect(node_feed)
        .inspect_ok(move |event| {
            if matches!(event, watcher::Event::InitDone) {
                let _ = raise_nodes.send(true);
            }
            asks.notify_one();
        });
    let watches = futures::future::join(
        cores.for_each(|_| std::future::ready(())),
        nodes.for_each(|_| std::future::ready(())),
    );
    let rounds = register::run(
        Arc::new(registrar),
        (core_cache, cores_synced),
        (node_cache, nodes_synced),
        changed,
    );
    Running::watching(watches, rounds)
}

/// Runs one reconcile in a span naming the object, and counts and times it.
async fn observed<K, Next>(
    kind: &'static str,
    object: Arc<K>,
    metrics: &Metrics,
    reconcile: impl Future<Output = Result<Next, Error>>,
) -> Result<Next, Error>
where
    K: Resource,
{
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    // `tenant` and `node` are fields of every log line inside (and attributes of the exported
    // span): a tenant reconcile records the node it is placed on, a node reconcile is its node.
    let span = tracing::info_span!(
        "reconcile",
        kind,
        namespace = %namespace,
        // NB: not `name`: the JSON log format writes the span's own name under that key.
        object = %name,
        tenant = tracing::field::Empty,
        node = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    match kind {
        "tenant" => {
            span.record("tenant", format!("{namespace}/{name}"));
        }
        "node" => {
            span.record("node", name.as_str());
        }
        _ => {}
    }
    let started = Instant::now();
    let result = reconcile.instrument(span.clone()).await;
    let label = result.as_ref().map_or_else(Error::label, |_| "ok");
    span.record("outcome", label);
    metrics.reconciled(kind, label, started.elapsed());
    if matches!(result, Err(Error::ConflictRetriesExhausted { .. })) {
        metrics.retries_exhausted();
    }
    result
}

fn log_result<K: Resource, E: std::fmt::Display>(
    kind: &str,
    result: Result<(kube::runtime::reflector::ObjectRef<K>, Action), E>,
) {
    match result {
        Ok((object, action)) => tracing::debug!(kind, object = %object.name, ?action, "reconciled"),
        Err(error) => tracing::debug!(kind, %error, "reconcile did not complete"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::tenant;

    #[test]
    fn the_resync_sweep_names_every_tenant_once_per_period() {
        let tenants = TenantCache::default();
        for i in 0..1000 {
            tenants.insert(tenant(&format!("t{i}")).uid(&format!("uid-{i}")).build());
        }
        let resync_slice =
            |tenants: &TenantCache, slice| tenants.keys_by_uid(|uid| in_resync_slice(uid, slice));
        let mut named: Vec<String> = (0..RESYNC_SLICES)
            .flat_map(|slice| resync_slice(&tenants, slice))
            .map(|reference| reference.name().to_owned())
            .collect();
        named.sort();
        let mut expected: Vec<String> = (0..1000).map(|i| format!("t{i}")).collect();
        expected.sort();
        assert_eq!(named, expected);
        // Spread over the period, not all at once.
        let largest = (0..RESYNC_SLICES)
            .map(|slice| resync_slice(&tenants, slice).len())
            .max();
        assert!(largest < Some(40), "{largest:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_resync_sweep_runs_one_slice_per_tick() {
        let store = TenantCache::default();
        for i in 0..200 {
            store.insert(tenant(&format!("t{i}")).uid(&format!("uid-{i}")).build());
        }
        let period = Duration::from_secs(64);
        let mut sweep = Box::pin(resyncs(store, period));
        let started = tokio::time::Instant::now();
        let mut seen = std::collections::HashSet::new();
        while seen.len() < 200 {
            let Some(reference) = sweep.next().await else {
                break;
            };
            seen.insert(reference.name().to_owned());
        }
        assert_eq!(seen.len(), 200);
        assert!(started.elapsed() <= period, "{:?}", started.elapsed());
        assert!(started.elapsed() >= period / 2, "{:?}", started.elapsed());
    }
}
