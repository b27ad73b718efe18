//! The single Node-status writer: one engine task per process that owns every placement
//! decision and every write of `Node.status`.
//!
//! ```text
//!   reconciles ──settle / release / refresh──▶ queue ──▶ engine: drain, order (releases first,
//!        ▲                                                then tenants oldest first), decide the
//!        └──────────── answer (resting plan) ◀──────────  batch against ONE view (placement crate)
//!                                                          │
//!   per touched node, concurrently: PUT /status carrying the resourceVersion read ──┤
//!        409 ─▶ GET that node; decide again the jobs that node was meant to take ◀──┘
//!   view = watch cache, overlaid with what we wrote or re-read (never ahead of the server)
//! ```
//!
//! Rules enforced here (docs/design.md, rules 1, 2, 3 and 9, and "The placement engine"):
//! - every write is a PUT of the status subresource carrying the resourceVersion of the object
//!   the batch was decided from; there is no write without that precondition. A node's new
//!   entries from the whole batch go in ONE write;
//! - totals (`allocated`, `free`, `tenants`) and the OverCapacity condition are recomputed from
//!   `allocations` on every write;
//! - a 409 Conflict means: read that node again and decide again, from scratch, the jobs whose
//!   edits it carried, after a jittered pause; at most `max_conflicts` conflicts per job, then the
//!   job fails so its reconcile is requeued with backoff. Jobs without edits decided after a failed
//!   node was first touched are decided again too: they may have counted room that write did not
//!   take. The view for every round is rebuilt from objects the server confirmed;
//! - a job is answered only once its writes are committed; a stale view can only cost a 409,
//!   never an over-commit, because each write is guarded;
//! - a node whose allocations cannot be read is never written, and a tenant whose UID appears on
//!   it is not placed elsewhere (that could reserve it twice): the error names the node;
//! - tenants are decided through the FIFO queue (`placement::queue`): room is held for older
//!   tenants in the waiting room that are not in the batch; holds live in the view only and are
//!   never written.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{mpsc, oneshot};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use placement::{
    Entry, FifoQueue, NodeLedger, Plan, QueueMode, TenantWants, is_hold, plan_release,
};

use super::Synced;
use super::newest::Newest;
use super::waiting::WaitingRoom;
use crate::api::Node;
use crate::error::{Error, is_conflict, is_not_found};
use crate::leader::AbortOnDrop;
use crate::metrics::Metrics;

/// How hard the writer tries before handing a conflict back to the reconcile loop.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// Conflicting writes in a row before giving up (the reconcile is then requeued).
    pub max_conflicts: u32,
    /// The pause after the first conflict is up to this long; it doubles with each conflict.
    pub jitter: Duration,
    /// Successful writes one call may make (a placement makes one; duplicates add one each).
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

/// What the writer did and where the tenant rests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled<T> {
    pub outcome: T,
    /// The edits written, in order (for logs and events).
    pub writes: Vec<placement::Edit>,
    /// Room was held for older waiting tenants when this was decided: a tenant left waiting
    /// may have been kept from room that an older one will not take after all (it may be
    /// placed elsewhere), so it should look again soon rather than wait for a node change.
    pub held_back: bool,
}

/// The nodes as the writer sees them right now, converted for the placement crate.
struct View {
    /// The node objects, and their positions by name.
    nodes: Vec<Arc<Node>>,
    node_position: HashIndex,
    ledgers: Vec<NodeLedger>,
    /// Positions in `ledgers` by node name.
    position: HashIndex,
    /// Positions in `ledgers` holding an entry of each UID: a decision looks up its tenant here
    /// instead of scanning every entry of the fleet.
    holders: HashIndex,
    /// Nodes whose allocations cannot be read, with the reason and the UIDs they name.
    unreadable: Vec<(String, String, Vec<String>)>,
}

impl View {
    fn build(nodes: Vec<Arc<Node>>) -> View {
        let mut ledgers = Vec::with_capacity(nodes.len());
        let mut unreadable = Vec::new();
        for node in &nodes {
            match node.ledger() {
                Ok(ledger) => ledgers.push(ledger),
                Err(reason) => {
                    let uids = node.allocations().iter().map(|a| a.uid.clone()).collect();
                    unreadable.push((node.name_any(), reason, uids));
                }
            }
        }
        let node_position = HashIndex::build(
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (HashIndex::hash(name_of(n)), i)),
        );
        let position = HashIndex::build(
            ledgers
                .iter()
                .enumerate()
                .map(|(i, l)| (HashIndex::hash(l.name()), i)),
        );
        let holders = HashIndex::build(ledgers.iter().enumerate().flat_map(|(i, l)| {
            l.entries()
                .iter()
                .map(move |e| (HashIndex::hash(&e.uid), i))
        }));
        View {
            nodes,
            node_position,
            ledgers,
            position,
            holders,
            unreadable,
        }
    }

    /// Positions that may hold this UID (a hash collision adds a position that does not; the
    /// plan checks each).
    fn holders_of(&self, uid: &str) -> Vec<usize> {
        self.holders.positions(HashIndex::hash(uid)).collect()
    }

    fn node(&self, name: &str) -> Option<&Arc<Node>> {
        self.node_position
            .positions(HashIndex::hash(name))
            .filter_map(|i| self.nodes.get(i))
            .find(|n| name_of(n) == name)
    }

    fn position_of(&self, node: &str) -> Option<usize> {
        self.position
            .positions(HashIndex::hash(node))
            .find(|&i| self.ledgers.get(i).is_some_and(|l| l.name() == node))
    }

    /// Fails when a node we cannot read holds this UID: acting elsewhere could reserve twice.
    fn check_readable(&self, uid: &str) -> Result<(), Error> {
        match self
            .unreadable
            .iter()
            .find(|(_, _, uids)| uids.iter().any(|u| u == uid))
        {
            Some((node, reason, _)) => Err(Error::UnreadableNode {
                node: node.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn ledger(&self, node: &str) -> Option<&NodeLedger> {
        self.position_of(node).and_then(|i| self.ledgers.get(i))
    }
}

/// Positions by a hash of a key, sorted: one allocation however many keys, since the view is
/// rebuilt for every batch. Equal hashes of different keys are possible; callers check.
struct HashIndex(Vec<(u64, usize)>);

impl HashIndex {
    fn hash(key: &str) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        hasher.finish()
    }

    fn build(pairs: impl Iterator<Item = (u64, usize)>) -> HashIndex {
        let mut pairs: Vec<(u64, usize)> = pairs.collect();
        pairs.sort_unstable();
        HashIndex(pairs)
    }

    fn positions(&self, hash: u64) -> impl Iterator<Item = usize> + '_ {
        let start = self.0.partition_point(|&(h, _)| h < hash);
        self.0
            .get(start..)
            .unwrap_or_default()
            .iter()
            .take_while(move |&&(h, _)| h == hash)
            .map(|&(_, i)| i)
    }

    fn insert(&mut self, hash: u64, position: usize) {
        if let Err(at) = self.0.binary_search(&(hash, position)) {
            self.0.insert(at, (hash, position));
        }
    }

    fn remove(&mut self, hash: u64, position: usize) {
        if let Ok(at) = self.0.binary_search(&(hash, position)) {
            self.0.remove(at);
        }
    }
}

fn name_of(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

/// A ledger's entries as they are written: without the room held for waiting tenants.
fn written_entries(ledger: &NodeLedger) -> Vec<Entry> {
    ledger
        .entries()
        .iter()
        .filter(|e| !is_hold(&e.uid))
        .cloned()
        .collect()
}

/// Where a tenant stands in the FIFO queue: older first, then by `namespace/name`.
type QueueKey = (Option<Timestamp>, String);

/// What the engine is asked to do.
enum Job {
    Settle {
        wants: OwnedWants,
        reply: oneshot::Sender<Result<Settled<Plan>, Error>>,
    },
    Release {
        uid: String,
        tenant: String,
        reply: oneshot::Sender<Result<Settled<()>, Error>>,
    },
    Refresh {
        node: String,
        reply: oneshot::Sender<Result<Settled<()>, Error>>,
    },
}

/// A tenant's wants, owned so that they can wait in the queue.
struct OwnedWants {
    uid: String,
    tenant: String,
    footprint: placement::Resources,
    suspend: bool,
    status_node: Option<String>,
    /// The tenant's creationTimestamp: older tenants are decided first.
    created: Option<Timestamp>,
}

impl OwnedWants {
    fn borrowed(&self) -> TenantWants<'_> {
        TenantWants {
            uid: &self.uid,
            tenant: &self.tenant,
            footprint: self.footprint,
            suspend: self.suspend,
            status_node: self.status_node.as_deref(),
        }
    }
}

impl Job {
    /// Releases and refreshes first (they free room or fix totals), then tenants oldest first.
    fn order_key(&self) -> (u8, Option<Timestamp>, &str) {
        match self {
            Job::Release { tenant, .. } => (0, None, tenant),
            Job::Refresh { node, .. } => (1, None, node),
            Job::Settle { wants, .. } => (2, wants.created, &wants.tenant),
        }
    }

    fn fail(self, error: Error) {
        // A receiver that gave up (its reconcile was dropped) needs no answer.
        let _ = match self {
            Job::Settle { reply, .. } => reply.send(Err(error)).map_err(drop),
            Job::Release { reply, .. } | Job::Refresh { reply, .. } => {
                reply.send(Err(error)).map_err(drop)
            }
        };
    }
}

/// A job and the conflicts it met so far.
struct Queued {
    job: Job,
    conflicts: u32,
}

/// What one job decided in a batch, before the writes are known.
enum Decided {
    /// The resting plan, and whether room was held for older tenants at the time.
    Plan(Plan, bool),
    Done,
    Failed(Error),
}

/// What the handle and the engine task share.
struct Shared {
    api: Api<Node>,
    cache: Store<Node>,
    /// Copies newer than the watch cache: what we wrote, or re-read after a conflict.
    recent: Newest<Node>,
    policy: RetryPolicy,
    metrics: Mutex<Arc<Metrics>>,
    synced: Synced,
    /// The placement policy, and how many placements it decided (RoundRobin's turn).
    placement: Mutex<placement::Policy>,
    turn: std::sync::atomic::AtomicU64,
    /// The tenants waiting for room, for the FIFO queue; none until set.
    waiting: Mutex<Option<Arc<WaitingRoom>>>,
    /// UIDs of tenants deleted or released lately: a settle queued before the delete was seen
    /// places nothing.
    released: Arc<GoneUids>,
}

/// The UIDs of tenants seen deleted or released lately (UIDs are never reused, so remembering
/// one is always right; the bound only limits memory: a settle older than this many deletes is
/// not expected).
#[derive(Debug, Default)]
pub struct GoneUids(Mutex<(std::collections::VecDeque<String>, HashSet<String>)>);

impl GoneUids {
    const KEPT: usize = 65_536;

    /// This tenant is deleted (its delete event, or a release): it is never placed again.
    pub fn insert(&self, uid: &str) {
        let mut guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (order, set) = &mut *guard;
        if !set.insert(uid.to_owned()) {
            return;
        }
        order.push_back(uid.to_owned());
        if order.len() > Self::KEPT
            && let Some(oldest) = order.pop_front()
        {
            set.remove(&oldest);
        }
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .contains(uid)
    }
}

/// The single Node-status writer: a handle to the one engine task of this process.
pub struct NodeWriter {
    shared: Arc<Shared>,
    jobs: mpsc::UnboundedSender<Job>,
    _engine: AbortOnDrop,
}

impl std::fmt::Debug for NodeWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeWriter")
            .field("policy", &self.shared.policy)
            .finish_non_exhaustive()
    }
}

/// The most jobs decided together: a batch answers each of them after one round of writes.
const MAX_BATCH: usize = 1024;

/// Node writes of one batch in flight at once. Each is a connection to the API server (HTTP/1.1)
/// with its buffers; a thousand at once (a fleet's first statuses) costs memory here and
/// runs into the server's max-in-flight limit there.
const CONCURRENT_NODE_WRITES: usize = 32;

impl NodeWriter {
    /// Starts the engine task (needs a Tokio runtime). `synced` says when `cache` holds its first
    /// full list; no decision is made before.
    pub fn new(api: Api<Node>, cache: Store<Node>, synced: Synced, policy: RetryPolicy) -> Self {
        let shared = Arc::new(Shared {
            api,
            cache,
            recent: Newest::default(),
            policy,
            metrics: Mutex::default(),
            synced,
            placement: Mutex::default(),
            turn: std::sync::atomic::AtomicU64::new(0),
            waiting: Mutex::default(),
            released: Arc::default(),
        });
        let (jobs, queue) = mpsc::unbounded_channel();
        let engine = AbortOnDrop(tokio::spawn(run_engine(shared.clone(), queue)));
        NodeWriter {
            shared,
            jobs,
            _engine: engine,
        }
    }

    /// Places new tenants by this policy (FirstFit unless set).
    pub fn with_policy(self, policy: placement::Policy) -> Self {
        *self
            .shared
            .placement
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = policy;
        self
    }

    /// Decides tenants in the FIFO order of this waiting room (its mode), holding room for the
    /// older tenants waiting in it.
    pub fn with_waiting_room(self, waiting: Arc<WaitingRoom>) -> Self {
        *self
            .shared
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(waiting);
        self
    }

    /// The ledgers of these nodes (all when `None`) as the writer sees them now.
    pub fn ledgers(&self, names: Option<&HashSet<String>>) -> Vec<NodeLedger> {
        let nodes = self
            .shared
            .snapshot()
            .into_iter()
            .filter(|n| names.is_none_or(|names| names.contains(&n.name_any())))
            .collect();
        View::build(nodes).ledgers
    }

    /// Counts conflicts into these metrics.
    pub fn with_metrics(self, metrics: Arc<Metrics>) -> Self {
        *self
            .shared
            .metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = metrics;
        self
    }

    /// Whether the node cache has synced.
    pub fn synced(&self) -> &Synced {
        &self.shared.synced
    }

    /// The watch cache, for read-only uses.
    pub fn cache(&self) -> &Store<Node> {
        &self.shared.cache
    }

    /// Moves a tenant to rest (reserve, resize or drop duplicates) and returns the resting plan.
    pub async fn settle(&self, wants: &TenantWants<'_>) -> Result<Settled<Plan>, Error> {
        self.settle_created(wants, None).await
    }

    /// [`settle`](Self::settle) for a tenant created at `created` (older tenants go first).
    pub async fn settle_created(
        &self,
        wants: &TenantWants<'_>,
        created: Option<Timestamp>,
    ) -> Result<Settled<Plan>, Error> {
        let wants = OwnedWants {
            uid: wants.uid.to_owned(),
            tenant: wants.tenant.to_owned(),
            footprint: wants.footprint,
            suspend: wants.suspend,
            status_node: wants.status_node.map(str::to_owned),
            created,
        };
        let (reply, answer) = oneshot::channel();
        self.submit(Job::Settle { wants, reply }, answer).await
    }

    /// Removes every entry of this UID. Releasing what is not held writes nothing.
    pub async fn release(&self, uid: &str, tenant: &str) -> Result<Settled<()>, Error> {
        let (reply, answer) = oneshot::channel();
        let job = Job::Release {
            uid: uid.to_owned(),
            tenant: tenant.to_owned(),
            reply,
        };
        self.submit(job, answer).await
    }

    /// Rewrites a node's derived status (totals, condition) when it differs from its allocations,
    /// e.g. after its capacity changed. Entries are left exactly as they are.
    pub async fn refresh(&self, node: &str) -> Result<Settled<()>, Error> {
        let (reply, answer) = oneshot::channel();
        self.submit(
            Job::Refresh {
                node: node.to_owned(),
                reply,
            },
            answer,
        )
        .await
    }

    async fn submit<T>(
        &self,
        job: Job,
        answer: oneshot::Receiver<Result<T, Error>>,
    ) -> Result<T, Error> {
        self.jobs.send(job).map_err(|_| Error::CacheClosed)?;
        answer.await.map_err(|_| Error::CacheClosed)?
    }

    /// The UIDs of tenants seen deleted: the watch's delete handler records them at once, so a
    /// decision queued before the delete was seen places nothing.
    pub fn gone(&self) -> Arc<GoneUids> {
        self.shared.released.clone()
    }

    /// Keeps a copy of a node that a write outside the engine (a finalizer patch) returned.
    pub fn remember(&self, node: Node) {
        self.shared.remember(node);
    }

    /// The newest known copy of one node: the watch cache overlaid with our own writes and
    /// re-reads. `None` when the cache does not hold it (never created, or deleted).
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        let cached = self.shared.cache.get(&ObjectRef::new(name))?;
        Some(self.shared.recent.freshest(cached))
    }

    /// The node holding this UID, and what it holds (first by name), from the current view.
    pub fn holding(&self, uid: &str) -> Option<(String, placement::Resources)> {
        let view = View::build(self.shared.snapshot());
        let mut holders: Vec<_> = view
            .ledgers
            .iter()
            .filter_map(|l| l.entry_of(uid).map(|e| (l.name().to_owned(), e.resources)))
            .collect();
        holders.sort_by(|a, b| a.0.cmp(&b.0));
        holders.into_iter().next()
    }
}

/// The engine: drain what is queued, decide it as one batch, commit each touched node in one
/// guarded write (nodes concurrently), answer, and carry over what met a conflict.
async fn run_engine(shared: Arc<Shared>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let mut carried: Vec<Queued> = Vec::new();
    loop {
        if carried.is_empty() {
            match jobs.recv().await {
                Some(job) => carried.push(Queued { job, conflicts: 0 }),
                None => return,
            }
        }
        while carried.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => carried.push(Queued { job, conflicts: 0 }),
                Err(_) => break,
            }
        }
        if let Err(error) = shared.synced.wait().await {
            for queued in carried.drain(..) {
                queued.job.fail(Error::CacheClosed);
            }
            tracing::error!(%error, "node cache closed: the writer stops");
            return;
        }
        let batch = std::mem::take(&mut carried);
        carried = shared.run_batch(batch).await;
        if let Some(most) = carried.iter().map(|q| q.conflicts).max() {
            tokio::time::sleep(shared.jitter(most)).await;
        }
    }
}

impl Shared {
    fn metrics(&self) -> Arc<Metrics> {
        self.metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// One round: decide every job against one view, write the touched nodes, answer.
    /// Returns the jobs to decide again (they met a conflict, or may have been swayed by one).
    async fn run_batch(&self, mut batch: Vec<Queued>) -> Vec<Queued> {
        batch.sort_by(|a, b| a.job.order_key().cmp(&b.job.order_key()));
        let mut view = View::build(self.snapshot());
        let (mode, waiters) = self.waiters_outside(&batch);
        // Where each waiter holds its entry, from the view's index: one placed a moment ago (not
        // yet out of the room) holds nothing more, and a resize holds only its growth.
        let held_at = |uid: &str| {
            view.holders_of(uid).into_iter().find(|&i| {
                view.ledgers
                    .get(i)
                    .is_some_and(|l| l.entry_of(uid).is_some())
            })
        };
        let mut queue = FifoQueue::with_holders(
            mode,
            waiters
                .iter()
                .map(|w| ((w.created, w.tenant.clone()), w.wants(), held_at(&w.uid)))
                .collect(),
        );
        // Per node: the jobs whose edits it carries, in decision order.
        let mut touched: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut decided = Vec::with_capacity(batch.len());
        let mut edits: Vec<Vec<placement::Edit>> = Vec::with_capacity(batch.len());
        for (index, queued) in batch.iter().enumerate() {
            let mut made = Vec::new();
            let outcome = match self.decide(&queued.job, &mut view, &mut queue, &mut made) {
                Ok(outcome) => outcome,
                Err(error) => Decided::Failed(error),
            };
            for edit in &made {
                touched.entry(edit.node.clone()).or_default().push(index);
            }
            decided.push(outcome);
            edits.push(made);
        }
        let failures = self.write_touched(&view, touched.keys()).await;
        // The first job decided after a failed node was first touched may have been swayed by
        // room that write did not take: it and every later job without an edit are decided again.
        let swayed_from = failures
            .keys()
            .filter_map(|node| touched.get(node).and_then(|jobs| jobs.first().copied()))
            .min();
        let mut retry = Vec::new();
        let mut reread = HashSet::new();
        for (index, ((queued, outcome), made)) in
            batch.into_iter().zip(decided).zip(edits).enumerate()
        {
            let failed_here: Vec<&NodeFailure> =
                made.iter().filter_map(|e| failures.get(&e.node)).collect();
            if let Decided::Failed(error) = outcome {
                queued.job.fail(error);
            } else if let Some(NodeFailure::Error { node, source }) = failed_here
                .iter()
                .find(|f| matches!(f, NodeFailure::Error { .. }))
            {
                queued.job.fail(Error::WriteNodeStatus {
                    node: node.clone(),
                    source: source.clone(),
                });
            } else if let Some(NodeFailure::Conflict { node }) = failed_here.first() {
                let conflicts = queued.conflicts.saturating_add(1);
                if conflicts > self.policy.max_conflicts {
                    queued.job.fail(Error::ConflictRetriesExhausted {
                        node: node.clone(),
                        attempts: conflicts,
                    });
                } else {
                    reread.insert(node.clone());
                    retry.push(Queued {
                        job: queued.job,
                        conflicts,
                    });
                }
            } else if made.is_empty() && swayed_from.is_some_and(|from| index > from) {
                retry.push(queued);
            } else {
                answer(queued.job, outcome, made);
            }
        }
        for node in reread {
            if let Err(error) = self.reread(&node).await {
                tracing::warn!(%error, node, "re-reading a node after a conflict failed");
            }
        }
        retry
    }

    /// The queue mode, and the waiting tenants that have no job in this batch.
    fn waiters_outside(&self, batch: &[Queued]) -> (QueueMode, Vec<super::waiting::Waiter>) {
        let room = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(room) = room else {
            return (QueueMode::default(), Vec::new());
        };
        let settles: Vec<&OwnedWants> = batch
            .iter()
            .filter_map(|q| match &q.job {
                Job::Settle { wants, .. } => Some(wants),
                _ => None,
            })
            .collect();
        // Only waiters older than the youngest tenant decided here can hold room for it.
        let Some(youngest) = settles.iter().map(|w| (w.created, w.tenant.as_str())).max() else {
            return (room.mode(), Vec::new());
        };
        let in_batch: HashSet<&str> = settles.iter().map(|w| w.uid.as_str()).collect();
        let mut waiters = room.waiters_before(youngest);
        waiters.retain(|w| !in_batch.contains(w.uid.as_str()));
        (room.mode(), waiters)
    }

    /// Decides one job against the view, applying its edits to the view as it goes.
    fn decide(
        &self,
        job: &Job,
        view: &mut View,
        queue: &mut FifoQueue<'_, QueueKey>,
        made: &mut Vec<placement::Edit>,
    ) -> Result<Decided, Error> {
        match job {
            Job::Settle { wants, .. } => loop {
                // A UID released (its tenant deleted) is never placed again: this job was
                // queued before the delete was seen.
                if self.released.contains(&wants.uid) {
                    return Err(Error::TenantReleased {
                        tenant: wants.tenant.clone(),
                    });
                }
                view.check_readable(&wants.uid)?;
                let policy = *self
                    .placement
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let turn = self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let key = (wants.created, wants.tenant.clone());
                let holders = view.holders_of(&wants.uid);
                match queue.plan_held_by(
                    &key,
                    policy,
                    &wants.borrowed(),
                    &mut view.ledgers,
                    &holders,
                    turn,
                ) {
                    Plan::Edit(edit) => self.apply(view, edit, made, &wants.tenant)?,
                    resting => return Ok(Decided::Plan(resting, queue.holds_placed())),
                }
            },
            Job::Release { uid, tenant, .. } => loop {
                self.released.insert(uid);
                view.check_readable(uid)?;
                match plan_release(uid, &view.ledgers) {
                    Some(edit) => self.apply(view, edit, made, tenant)?,
                    None => return Ok(Decided::Done),
                }
            },
            Job::Refresh { node, .. } => {
                if let Some((_, reason, _)) =
                    view.unreadable.iter().find(|(name, _, _)| name == node)
                {
                    return Err(Error::UnreadableNode {
                        node: node.clone(),
                        reason: reason.clone(),
                    });
                }
                let (Some(object), Some(ledger)) = (view.node(node), view.ledger(node)) else {
                    return Ok(Decided::Done);
                };
                let wanted =
                    object.status_for(&written_entries(ledger), ledger.view().capacity, &now());
                if object.status.as_ref() != Some(&wanted) {
                    // An edit that changes no entry: the write recomputes the totals.
                    made.push(placement::Edit {
                        kind: placement::EditKind::Resize,
                        node: node.clone(),
                        uid: String::new(),
                        entry: None,
                    });
                }
                Ok(Decided::Done)
            }
        }
    }

    /// Applies one edit to the view (the write happens later, for the whole node at once).
    fn apply(
        &self,
        view: &mut View,
        edit: placement::Edit,
        made: &mut Vec<placement::Edit>,
        subject: &str,
    ) -> Result<(), Error> {
        if u32::try_from(made.len()).unwrap_or(u32::MAX) >= self.policy.max_writes {
            return Err(Error::TooManyWrites {
                tenant: subject.to_owned(),
                writes: self.policy.max_writes,
            });
        }
        let position = view
            .position_of(&edit.node)
            .ok_or_else(|| Error::UnreadableNode {
                node: edit.node.clone(),
                reason: "not in the node cache".into(),
            })?;
        let ledger = &view.ledgers[position];
        let entries = ledger.edited_entries(&edit);
        let edited = NodeLedger::new(
            edit.node.clone(),
            ledger.state(),
            ledger.capacity(),
            entries,
        )
        .map(|edited| edited.with_overcommit(ledger.overcommit()))
        .map_err(|e| Error::UnreadableNode {
            node: edit.node.clone(),
            reason: e.to_string(),
        })?;
        view.ledgers[position] = edited;
        let uid = HashIndex::hash(&edit.uid);
        view.holders.remove(uid, position);
        // NB: another UID with the same hash may still be on this node: the index keeps the
        // position while any entry there hashes alike, so no UID's entry is ever lost to it.
        let still_hashed_here = || {
            view.ledgers[position]
                .entries()
                .iter()
                .any(|e| HashIndex::hash(&e.uid) == uid)
        };
        if edit.entry.is_some() || still_hashed_here() {
            view.holders.insert(uid, position);
        }
        made.push(edit);
        Ok(())
    }

    /// Writes each touched node's entries as the view now holds them, concurrently, each guarded
    /// by the resourceVersion it was read at. Returns the nodes that failed.
    async fn write_touched<'a>(
        &self,
        view: &View,
        nodes: impl Iterator<Item = &'a String>,
    ) -> HashMap<String, NodeFailure> {
        // Build every request first, so the writes borrow nothing but the API handle.
        let requests: Vec<(String, Node)> = nodes
            .filter_map(|name| {
                let (object, ledger) = (view.node(name)?, view.ledger(name)?);
                let mut updated = Node::clone(object);
                updated.status = Some(object.status_for(
                    &written_entries(ledger),
                    ledger.view().capacity,
                    &now(),
                ));
                updated.metadata.managed_fields = None;
                Some((name.clone(), updated))
            })
            .collect();
        let api = self.api.clone();
        let results: Vec<(String, Result<Node, kube::Error>)> = futures::stream::iter(requests)
            .map(|(name, updated)| {
                let api = api.clone();
                async move {
                    let result = api
                        .replace_status(&name, &PostParams::default(), &updated)
                        .await;
                    (name, result)
                }
            })
            .buffer_unordered(CONCURRENT_NODE_WRITES)
            .collect()
            .await;
        let mut failures = HashMap::new();
        for (node, result) in results {
            match result {
                Ok(written) => {
                    tracing::debug!(node = %node, "node status written");
                    self.remember(written);
                }
                Err(error) if is_conflict(&error) => {
                    self.metrics().conflict();
                    tracing::debug!(node = %node, "conflict writing node status");
                    failures.insert(node.clone(), NodeFailure::Conflict { node });
                }
                Err(source) => {
                    failures.insert(
                        node.clone(),
                        NodeFailure::Error {
                            node,
                            source: Arc::new(source),
                        },
                    );
                }
            }
        }
        failures
    }

    /// A pause of up to jitter x 2^(attempt-1), so racing writers spread out.
    fn jitter(&self, attempt: u32) -> Duration {
        let ceiling = self
            .policy
            .jitter
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(8));
        let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(fastrand::u64(0..=millis))
    }

    /// Reads one node from the API (not the cache) and makes it the writer's view of that node.
    async fn reread(&self, name: &str) -> Result<(), Error> {
        match self.api.get(name).await {
            Ok(fresh) => self.remember(fresh),
            Err(error) if is_not_found(&error) => self.recent.forget(None, name),
            Err(source) => {
                return Err(Error::ReadNode {
                    node: name.to_owned(),
                    source,
                });
            }
        }
        Ok(())
    }

    fn remember(&self, node: Node) {
        self.recent.remember(node);
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

/// How a node's write failed.
enum NodeFailure {
    Conflict {
        node: String,
    },
    Error {
        node: String,
        source: Arc<kube::Error>,
    },
}

/// Sends a job its answer: its resting plan and the edits that were written.
fn answer(job: Job, outcome: Decided, writes: Vec<placement::Edit>) {
    // Refresh edits change no entry; they are not reported as writes of a tenant.
    let writes: Vec<_> = writes.into_iter().filter(|e| !e.uid.is_empty()).collect();
    let _ = match (job, outcome) {
        (Job::Settle { reply, .. }, Decided::Plan(plan, held_back)) => reply
            .send(Ok(Settled {
                outcome: plan,
                writes,
                held_back,
            }))
            .map_err(drop),
        (Job::Release { reply, .. } | Job::Refresh { reply, .. }, _) => reply
            .send(Ok(Settled {
                outcome: (),
                writes,
                held_back: false,
            }))
            .map_err(drop),
        (job, _) => {
            job.fail(Error::CacheClosed);
            Ok(())
        }
    };
}
fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_hash_index_finds_every_position_of_a_key_and_follows_edits() {
        let (a, b) = (HashIndex::hash("a"), HashIndex::hash("b"));
        let mut index = HashIndex::build([(a, 3), (b, 1), (a, 0)].into_iter());
        assert_eq!(index.positions(a).collect::<Vec<_>>(), [0, 3]);
        index.remove(a, 0);
        index.insert(b, 7);
        index.insert(b, 7);
        assert_eq!(index.positions(a).collect::<Vec<_>>(), [3]);
        assert_eq!(index.positions(b).collect::<Vec<_>>(), [1, 7]);
        assert_eq!(index.positions(HashIndex::hash("c")).count(), 0);
    }
}
