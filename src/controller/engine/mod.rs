//! The placement engine: one task per process that decides every placement and writes every
//! `Node.status`, behind the [`Engine`] handle.
//!
//! ```text
//!   reconciles ──decide / release / refresh──▶ queue ──▶ engine task (this module: I/O only)
//!        ▲                                                 │ drain ≤ 1,024 jobs
//!        │                                                 ▼
//!        │                        batch::decide_batch (pure): one View, one Draft per job
//!        │                                                 │
//!        │    per touched node, concurrently: PATCH /status (what changed), guarded by the resourceVersion read
//!        │                                                 │
//!        └── answer ◀── conflicts::resolve (pure): answer, fail, or retry (GET the 409'd nodes)
//!   view = watch cache, overlaid with what we wrote or re-read (never ahead of the server)
//! ```
//!
//! Rules enforced here (docs/design.md, rules 1, 2, 3 and 9, and "The placement engine"):
//! - every write is a JSON patch of the status subresource that sets the resourceVersion of the
//!   object the batch was decided from (409 when it changed since, as a PUT with it), then only
//!   what changed (`patch::status_ops`); there is no write without that precondition. A node's
//!   new entries from the whole batch go in ONE write;
//! - totals (`allocated`, `free`, `tenants`) and the OverCapacity condition are recomputed from
//!   the ledger's entries on every write; room held for waiting tenants lives in the ledger's
//!   holds, which are not entries, so it is never written;
//! - a delivered machine's room is held for the waiting tenants it was bought for, before a
//!   batch decides anything ([`Bought`], fed by the request watch);
//! - a job is answered only once its writes are committed; a stale view can only cost a 409,
//!   never an over-commit, because each write is guarded. After a 409 the node is read again
//!   and the affected jobs are decided again after a jittered pause ([`conflicts`]);
//! - the engine decides nothing before its node cache has synced (and the waiting room has been
//!   rebuilt); its options are fixed when it starts ([`EngineConfig`]).

mod batch;
#[cfg(any(test, feature = "testing"))]
pub mod bench;
mod bought;
mod conflicts;
mod gone;
mod spread;
mod view;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tracing::Instrument;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use placement::{Fleet, NodeLedger, TenantWants};
use tokio::sync::{mpsc, oneshot};

pub use batch::Committed;
use batch::{Draft, Job, Queued, Rules, decide_batch, queue_key};
pub use bought::Bought;
use conflicts::{JobWrites, NodeFailure, Resolution, resolve};
pub use gone::GoneUids;
use view::View;

use super::state::RoomOrders;
use super::state::Synced;
use super::state::newest::Newest;
use super::state::waiting::WaitingRoom;
use crate::api::{Node, SpreadAsk, Wants, ZONE_LABEL};
use crate::error::{Error, is_conflict, is_not_found};
use crate::leader::AbortOnDrop;
use crate::metrics::Metrics;

/// How hard the engine tries before handing a conflict back to the reconcile loop.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// Conflicting writes in a row before giving up (the reconcile is then requeued).
    pub max_conflicts: u32,
    /// The pause after the first conflict is up to this long; it doubles with each conflict.
    pub jitter: Duration,
    /// Edits one job may make (a placement makes one; duplicates add one each).
    pub max_writes: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_conflicts: 5,
            jitter: Duration::from_millis(20),
            max_writes: 8,
        }
    }
}

/// Everything the engine decides with, fixed before its task starts.
#[derive(Clone, Debug, Default)]
pub struct EngineConfig {
    pub retry: RetryPolicy,
    /// How new tenants are placed.
    pub policy: placement::Policy,
    /// The tenants waiting for room: tenants are decided in its FIFO order (its mode), holding
    /// room for the older ones. `None`: no queue (tests of one decision at a time).
    pub waiting: Option<Arc<WaitingRoom>>,
    /// Conflicts are counted here.
    pub metrics: Arc<Metrics>,
    /// Moves off draining nodes in flight at once, at most (0 moves nothing).
    pub max_migrations: usize,
    /// The nodes the node watch changed, fed by its events: each batch then looks only at
    /// those (and at the ones it wrote). `None`: each batch looks at every node.
    pub node_changes: Option<Arc<NodeChanges>>,
    /// The machines bought and whom for, fed by the request watch: a delivered machine's room
    /// is held for its waiting tenants. `None`: node requests are off.
    pub bought: Option<Arc<Bought>>,
    /// The room being made by moves: held for each waiter on its host. `None`: make-room is off.
    pub orders: Option<Arc<RoomOrders>>,
    /// The Node label naming its zone, for spread tenants (`None`: [`ZONE_LABEL`]).
    pub zone_label: Option<Arc<str>>,
}

/// The names of nodes changed since the engine last looked, as the node watch reports them.
#[derive(Debug)]
pub struct NodeChanges(Mutex<Changed>);

#[derive(Debug)]
struct Changed {
    names: HashSet<String>,
    /// Every node may have changed (at the start, and after the watch listed them again).
    all: bool,
}

impl Default for NodeChanges {
    fn default() -> Self {
        NodeChanges(Mutex::new(Changed {
            names: HashSet::new(),
            all: true,
        }))
    }
}

impl NodeChanges {
    fn lock(&self) -> std::sync::MutexGuard<'_, Changed> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This node was created, changed or deleted.
    pub fn changed(&self, name: &str) {
        let mut changed = self.lock();
        if !changed.all {
            changed.names.insert(name.to_owned());
        }
    }

    /// Any node may have changed: the watch lists them all again (a relist drops deleted nodes
    /// without a delete event).
    pub fn all(&self) {
        let mut changed = self.lock();
        changed.all = true;
        changed.names.clear();
    }

    /// What changed since the last call: `None` when it may be every node.
    fn take(&self) -> Option<HashSet<String>> {
        let mut changed = self.lock();
        let names = std::mem::take(&mut changed.names);
        (!std::mem::replace(&mut changed.all, false)).then_some(names)
    }
}

/// What the handle and the engine task share: the node API and the freshest copies.
struct Nodes {
    api: Api<Node>,
    cache: Store<Node>,
    /// Copies newer than the watch cache: what we wrote, or re-read after a conflict.
    recent: Newest<Node>,
    synced: Synced,
}

/// The single Node-status writer: a handle to the one engine task of this process.
pub struct Engine {
    nodes: Arc<Nodes>,
    node_changes: Option<Arc<NodeChanges>>,
    released: Arc<GoneUids>,
    jobs: mpsc::UnboundedSender<Job>,
    _task: AbortOnDrop,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

/// The most jobs decided together: a batch answers each of them after one round of writes.
const MAX_BATCH: usize = 1024;

/// Node writes of one batch in flight at once. Each is a connection to the API server (HTTP/1.1)
/// with its buffers; a thousand at once (a fleet's first statuses) costs memory here and
/// runs into the server's max-in-flight limit there.
const CONCURRENT_NODE_WRITES: usize = 32;

impl Engine {
    /// Starts the engine task (needs a Tokio runtime). `synced` says when `cache` holds its first
    /// full list (and anything else the first decision must wait for); no decision is made
    /// before.
    pub fn start(api: Api<Node>, cache: Store<Node>, synced: Synced, config: EngineConfig) -> Self {
        let nodes = Arc::new(Nodes {
            api,
            cache,
            recent: Newest::default(),
            synced,
        });
        let released: Arc<GoneUids> = Arc::default();
        let (jobs, queue) = mpsc::unbounded_channel();
        let node_changes = config.node_changes.clone();
        let task = EngineTask {
            nodes: nodes.clone(),
            released: released.clone(),
            config,
            turn: 0,
            view: View::default(),
        };
        Engine {
            nodes,
            node_changes,
            released,
            jobs,
            _task: AbortOnDrop(tokio::spawn(task.run(queue))),
        }
    }

    /// The ledgers of these nodes (all when `None`) as the engine sees them now.
    pub fn ledgers(&self, names: Option<&HashSet<String>>) -> Vec<NodeLedger> {
        let nodes = match names {
            // A lookup each: a few changed nodes of a large fleet need no copy of every node.
            Some(names) => names
                .iter()
                .filter_map(|name| self.nodes.freshest(name))
                .collect(),
            None => self.nodes.snapshot(),
        };
        // The ledgers alone, as the view holds them: a look needs neither the view's placement
        // index nor its UID index (building both was a third of a look at 10,000 nodes).
        placement::fleet::in_name_order(nodes.iter().filter_map(|n| n.ledger().ok()).collect())
    }

    /// Whether the node cache has synced.
    pub fn synced(&self) -> &Synced {
        &self.nodes.synced
    }

    /// The watch cache, for read-only uses.
    pub fn cache(&self) -> &Store<Node> {
        &self.nodes.cache
    }

    /// Moves a tenant to rest (reserve, restore, resize or drop duplicates, or leave it waiting)
    /// and answers its resting plan with the edits written.
    pub async fn decide(&self, wants: &TenantWants<'_>) -> Result<Committed, Error> {
        self.decide_created(wants, None, None).await
    }

    /// [`decide`](Self::decide) for a tenant created at `created` (older tenants go first),
    /// spread as `spread` asks when it is spread.
    pub async fn decide_created(
        &self,
        wants: &TenantWants<'_>,
        created: Option<Timestamp>,
        spread: Option<SpreadAsk>,
    ) -> Result<Committed, Error> {
        let wants = Wants::of(wants, created).spread(spread);
        self.submit(|reply| Job::Decide { wants, reply }).await
    }

    /// Removes every entry of this UID and answers the edits written. Releasing what is not
    /// held writes nothing.
    pub async fn release(&self, uid: &str, tenant: &str) -> Result<Vec<placement::Edit>, Error> {
        let (uid, tenant) = (uid.to_owned(), tenant.to_owned());
        self.submit(|reply| Job::Release { uid, tenant, reply })
            .await
    }

    /// Rewrites a node's derived status (totals, condition) when it differs from its allocations,
    /// e.g. after its capacity changed. Entries are left exactly as they are.
    pub async fn refresh(&self, node: &str) -> Result<(), Error> {
        let node = node.to_owned();
        self.submit(|reply| Job::Refresh { node, reply }).await
    }

    async fn submit<T>(
        &self,
        job: impl FnOnce(oneshot::Sender<Result<T, Error>>) -> Job,
    ) -> Result<T, Error> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(job(reply))
            .map_err(|_| Error::EngineStopped)?;
        answer.await.map_err(|_| Error::EngineStopped)?
    }

    /// The UIDs of tenants seen deleted: the watch's delete handler records them at once, so a
    /// decision queued before the delete was seen places nothing.
    pub fn gone(&self) -> Arc<GoneUids> {
        self.released.clone()
    }

    /// Keeps a copy of a node that a write outside the engine (a finalizer patch) returned.
    pub fn remember(&self, node: Node) {
        if let Some(changes) = &self.node_changes {
            changes.changed(&node.name_any());
        }
        self.nodes.recent.remember(node);
    }

    /// The newest known copy of one node: the watch cache overlaid with our own writes and
    /// re-reads. `None` when the cache does not hold it (never created, or deleted).
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.freshest(name)
    }

    /// The node holding this UID, and what it holds (first by name), from the current view.
    pub fn holding(&self, uid: &str) -> Option<(String, placement::Resources)> {
        let ledgers = View::build(self.nodes.snapshot()).into_ledgers();
        let mut holders: Vec<_> = ledgers
            .iter()
            .filter_map(|l| l.entry_of(uid).map(|e| (l.name().to_owned(), e.resources)))
            .collect();
        holders.sort_by(|a, b| a.0.cmp(&b.0));
        holders.into_iter().next()
    }
}

impl Nodes {
    /// The newest known copy of one node; `None` (and no copy kept) once the cache has none.
    fn freshest(&self, name: &str) -> Option<Arc<Node>> {
        match self.cache.get(&ObjectRef::new(name)) {
            Some(cached) => Some(self.recent.freshest(cached)),
            None => {
                self.recent.forget(None, name);
                None
            }
        }
    }

    /// The newest known copy of every node in the watch cache.
    fn snapshot(&self) -> Vec<Arc<Node>> {
        let cached = self.cache.state();
        self.recent
            .retain_present(|_, name| self.cache.get(&ObjectRef::new(name)).is_some());
        cached
            .into_iter()
            .map(|node| self.recent.freshest(node))
            .collect()
    }
}

/// The engine task's state.
struct EngineTask {
    nodes: Arc<Nodes>,
    released: Arc<GoneUids>,
    config: EngineConfig,
    /// Decisions made so far (RoundRobin's turn).
    turn: u64,
    /// The nodes as the last batch left them; each batch syncs it first.
    view: View,
}

impl EngineTask {
    /// Drain what is queued, decide it as one batch, commit each touched node in one guarded
    /// write (nodes concurrently), answer, and carry over what must be decided again.
    async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        let mut carried: Vec<Queued> = Vec::new();
        loop {
            if carried.is_empty() {
                match jobs.recv().await {
                    Some(job) => carried.push(Queued::new(job)),
                    None => return,
                }
            }
            while carried.len() < MAX_BATCH {
                match jobs.try_recv() {
                    Ok(job) => carried.push(Queued::new(job)),
                    Err(_) => break,
                }
            }
            if let Err(error) = self.nodes.synced.wait().await {
                for queued in carried.drain(..) {
                    queued.job.fail(Error::CacheClosed);
                }
                tracing::error!(%error, "node cache closed: the engine stops");
                return;
            }
            let batch = std::mem::take(&mut carried);
            // A span per batch (docs/operating.md, "Traces"); run_batch records the rest.
            let span = tracing::info_span!(
                "engine_batch",
                batch_size = batch.len(),
                nodes_written = tracing::field::Empty,
                retried = tracing::field::Empty,
                outcome = tracing::field::Empty,
            );
            carried = self.run_batch(batch).instrument(span).await;
            if let Some(most) = carried.iter().map(|q| q.conflicts).max() {
                tokio::time::sleep(self.jitter(most)).await;
            }
        }
    }

    /// One round: decide every job against one view, write the touched nodes, answer.
    /// Returns the jobs to decide again.
    async fn run_batch(&mut self, batch: Vec<Queued>) -> Vec<Queued> {
        let waiters = self.waiters_outside(&batch);
        let waiting: Vec<_> = waiters
            .iter()
            .map(|w| (queue_key(w), w.borrowed()))
            .collect();
        self.sync_view();
        let selectors = batch
            .iter()
            .filter_map(|q| q.job.wants()?.node_selector.as_deref())
            .chain(waiting.iter().filter_map(|(_, w)| w.node_selector));
        for selector in selectors {
            self.view.fleet.index_selector(selector);
        }
        let bought_for = self.bought_for();
        let bought: Vec<(batch::QueueKey, &str, TenantWants<'_>)> = bought_for
            .iter()
            .map(|(node, w)| (queue_key(w), node.as_str(), w.borrowed()))
            .collect();
        let made_for = self.made_for();
        let made: Vec<(batch::QueueKey, &str, TenantWants<'_>)> = made_for
            .iter()
            .map(|(node, w)| (queue_key(w), node.as_str(), w.borrowed()))
            .collect();
        let now = Time(Timestamp::now());
        let rules = Rules {
            policy: self.config.policy,
            mode: self
                .config
                .waiting
                .as_ref()
                .map(|room| room.mode())
                .unwrap_or_default(),
            waiters: &waiting,
            bought: &bought,
            made: &made,
            released: &self.released,
            max_writes: self.config.retry.max_writes,
            max_migrations: self.config.max_migrations,
            zone_label: self.config.zone_label.as_deref().unwrap_or(ZONE_LABEL),
            turn: self.turn,
            now: &now,
        };
        let (drafts, turn) = decide_batch(batch, &mut self.view, &rules);
        self.turn = turn;
        let mut touched: Vec<&String> = drafts.iter().flat_map(|d| d.nodes.iter()).collect();
        touched.sort_unstable();
        touched.dedup();
        let requests: Vec<(String, Result<json_patch::Patch, String>)> = touched
            .into_iter()
            .filter_map(|name| Some((name.clone(), self.view.to_patch(name, &now)?)))
            .collect();
        self.view.end_batch();
        let (failures, written) = self.write(requests).await;
        let span = tracing::Span::current();
        span.record("nodes_written", written.len());
        let outcome = match failures.values().next() {
            None => "ok",
            Some(_)
                if failures
                    .values()
                    .all(|f| matches!(f, NodeFailure::Conflict)) =>
            {
                "conflict"
            }
            Some(_) => "error",
        };
        span.record("outcome", outcome);
        for node in written {
            self.view.confirm(node);
        }
        let facts: Vec<JobWrites<'_>> = drafts
            .iter()
            .map(|d| JobWrites {
                nodes: &d.nodes,
                failed: d.decided.failed(),
                conflicts: d.conflicts,
            })
            .collect();
        let (resolutions, reread) = resolve(&facts, &failures, self.config.retry.max_conflicts);
        let mut retry = Vec::new();
        for (draft, resolution) in drafts.into_iter().zip(resolutions) {
            let Draft { decided, edits, .. } = draft;
            match resolution {
                Resolution::Answer => decided.answer(edits),
                Resolution::Fail(error) => decided.into_job().fail(error),
                Resolution::Retry { conflicts } => retry.push(Queued {
                    job: decided.into_job(),
                    conflicts,
                }),
            }
        }
        for node in reread {
            if let Err(error) = self.reread(&node).await {
                tracing::warn!(%error, node, "re-reading a node after a conflict failed");
            }
        }
        span.record("retried", retry.len());
        retry
    }

    /// Brings the view to the nodes as they are now: only those the watch changed and those the
    /// last batch wrote, when the watch's changes are known; else every node.
    fn sync_view(&mut self) {
        self.sync_nodes();
        // A spread tenant whose replica's node changed zone is decided again: its balance is
        // judged when decided (docs/placement.md, "Spread").
        let relabelled = self.view.take_relabelled();
        if let Some(room) = &self.config.waiting {
            for tenant in relabelled {
                if let Some(tenant) = crate::api::Tenant::reference(&tenant) {
                    room.wake(tenant);
                }
            }
        }
    }

    fn sync_nodes(&mut self) {
        let changed = self.config.node_changes.as_ref().and_then(|c| c.take());
        if let Some(mut names) = changed {
            names.extend(self.view.dirty().cloned());
            let nodes = &self.nodes;
            let named = names.into_iter().map(|name| {
                let node = nodes.freshest(&name);
                (name, node)
            });
            if self.view.sync_changed(named) {
                return;
            }
        }
        self.view.sync(self.nodes.snapshot());
    }

    /// Each delivered machine (its node in the view, made for its request) with each tenant it
    /// was bought for that waits for a machine (holding nothing, or moving off a draining
    /// node), whatever its age.
    fn bought_for(&self) -> Vec<(String, Wants)> {
        let (Some(bought), Some(room)) = (&self.config.bought, &self.config.waiting) else {
            return Vec::new();
        };
        if bought.is_empty() {
            return Vec::new();
        }
        let mut machine_of: HashMap<&str, &str> = HashMap::new();
        let machines = bought.machines();
        for (request, machine) in &machines {
            let delivered = self
                .view
                .fleet
                .find(&machine.node)
                .is_some_and(|l| bought::made_for(l.labels(), request));
            if delivered {
                for tenant in machine.tenants.iter() {
                    machine_of.insert(tenant, &machine.node);
                }
            }
        }
        if machine_of.is_empty() {
            return Vec::new();
        }
        // Not a resize (it grows where it is): a first placement, or a move off a draining node.
        let wants_a_machine = |uid: &str| {
            self.view.held_at(uid).is_none_or(|at| {
                self.view
                    .fleet
                    .ledgers()
                    .get(at)
                    .is_some_and(|l| l.state() == placement::NodeState::Draining)
            })
        };
        // A move carries its entry as held: that is the room it needs.
        let held = |uid: &str| {
            let at = self.view.held_at(uid)?;
            Some(self.view.fleet.ledgers().get(at)?.entry_of(uid)?.resources)
        };
        room.waiters_named(|tenant| machine_of.contains_key(tenant))
            .into_iter()
            .filter(|w| wants_a_machine(&w.uid))
            .filter_map(|mut w| {
                if let Some(resources) = held(&w.uid) {
                    w.footprint = resources;
                }
                Some((machine_of.get(&*w.tenant)?.to_string(), w))
            })
            .collect()
    }

    /// Each host room is being made on, with its waiter, while the waiter holds nothing.
    fn made_for(&self) -> Vec<(String, Wants)> {
        let (Some(orders), Some(waiting)) = (&self.config.orders, &self.config.waiting) else {
            return Vec::new();
        };
        if orders.is_empty() {
            return Vec::new();
        }
        let hosts = orders.hosts();
        waiting
            .waiters_named(|tenant| hosts.contains_key(tenant))
            .into_iter()
            .filter(|w| self.view.held_at(&w.uid).is_none())
            .filter_map(|w| Some((hosts.get(&*w.tenant)?.clone(), w)))
            .collect()
    }

    /// The waiting tenants older than the youngest tenant decided here, with no job in it.
    fn waiters_outside(&self, batch: &[Queued]) -> Vec<Wants> {
        let Some(room) = &self.config.waiting else {
            return Vec::new();
        };
        let decided: Vec<&Wants> = batch.iter().filter_map(|q| q.job.wants()).collect();
        // Only waiters older than the youngest tenant decided here can hold room for it.
        let Some(youngest) = decided.iter().map(|w| (w.created, &*w.tenant)).max() else {
            return Vec::new();
        };
        let in_batch: HashSet<&str> = decided.iter().map(|w| w.uid.as_str()).collect();
        let mut waiters = room.waiters_before(youngest);
        // A spread tenant holds no room ahead of its turn (its replicas need several nodes).
        waiters.retain(|w| !in_batch.contains(w.uid.as_str()) && w.spread.is_none());
        waiters
    }

    /// Writes each node's status, concurrently, each a JSON patch guarded by the resourceVersion
    /// it was read at. Returns the nodes that failed, and the objects the others are now.
    async fn write(
        &self,
        requests: Vec<(String, Result<json_patch::Patch, String>)>,
    ) -> (HashMap<String, NodeFailure>, Vec<Arc<Node>>) {
        let api = self.nodes.api.clone();
        let results: Vec<(String, Result<Node, kube::Error>)> = futures::stream::iter(requests)
            .map(|(name, patch)| {
                let api = api.clone();
                async move {
                    let result = match patch {
                        Ok(patch) => {
                            api.patch_status(
                                &name,
                                &PatchParams::default(),
                                &Patch::Json::<()>(patch),
                            )
                            .await
                        }
                        // Never sent: the job fails rather than being answered unwritten.
                        Err(why) => Err(kube::Error::Service(why.into())),
                    };
                    (name, result)
                }
            })
            .buffer_unordered(CONCURRENT_NODE_WRITES)
            .collect()
            .await;
        let mut failures = HashMap::new();
        let mut written_nodes = Vec::new();
        for (node, result) in results {
            match result {
                Ok(written) => {
                    self.config.metrics.node_status_written("ok");
                    tracing::debug!(node = %node, "node status written");
                    written_nodes.push(self.nodes.recent.remember(written));
                }
                Err(error) if is_conflict(&error) => {
                    self.config.metrics.conflict();
                    self.config.metrics.node_status_written("conflict");
                    tracing::debug!(node = %node, "conflict writing node status");
                    failures.insert(node, NodeFailure::Conflict);
                }
                Err(source) => {
                    self.config.metrics.node_status_written("error");
                    failures.insert(node, NodeFailure::Error(Arc::new(source)));
                }
            }
        }
        (failures, written_nodes)
    }

    /// A pause of up to jitter x 2^(attempt-1), so racing writers spread out.
    fn jitter(&self, attempt: u32) -> Duration {
        let ceiling = self
            .config
            .retry
            .jitter
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(8));
        let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(fastrand::u64(0..=millis))
    }

    /// Reads one node from the API (not the cache) and makes it the engine's view of that node.
    async fn reread(&self, name: &str) -> Result<(), Error> {
        // The view looks at it again at the next sync, whatever the watch has seen by then.
        if let Some(changes) = &self.config.node_changes {
            changes.changed(name);
        }
        match self.nodes.api.get(name).await {
            Ok(fresh) => {
                self.nodes.recent.remember(fresh);
            }
            Err(error) if is_not_found(&error) => self.nodes.recent.forget(None, name),
            Err(source) => {
                return Err(Error::ReadNode {
                    node: name.to_owned(),
                    source,
                });
            }
        }
        Ok(())
    }
}
