//! Nodes registered from the cluster (`--register-nodes SELECTOR`): one placement Node per core
//! `v1/Node` that matches the selector, of the same name, kept from it.
//!
//! ```text
//!   watch core Nodes (the selector) ─────▶ Store<CoreNode> ──┐
//!   watch placement Nodes (all; status ──▶ Store<Node> ──────┼─▶ plan (pure) ──▶ create, patch,
//!   dropped)                                                 │     delete: guarded writes
//!   a change (gathered for a requeue window), or a resync ───┘ └─▶ clashes, unreadable
//!                                                                  allocatable: reported once
//! ```
//!
//! Rules enforced here (docs/operating.md, "Nodes registered from the cluster"):
//! - a core Node that matches the selector gets a placement Node of its name, labelled
//!   `placement.tenant-placer.dev/registered: "true"`, whose capacity (its allocatable), state and
//!   labels are kept from it ([`Registration`]: Offline when NotReady, which wins over Cordoned
//!   when unschedulable; a drain someone started stays). Only those fields are written:
//!   `spec.overcommit`, annotations, finalizers and the status are never touched;
//! - a registered placement Node whose core Node is gone, being deleted or no longer matches the
//!   selector is deleted, once a direct read of the core Node confirms it (the cache may be
//!   behind); its finalizer drains it as any deleted Node. A placement Node being deleted is left
//!   to go; a core Node that matches again then gets a new one;
//! - a placement Node without the label is never written: when a matching core Node has its
//!   name, the clash is reported (a Warning Event on the core Node, a log line, the metric), once
//!   per change, and both are left as they are. So is a core Node whose allocatable cannot be
//!   read: its placement Node, if any, is left as it is. A placement Node the types cannot hold
//!   is left as it is (the undecodable report says why);
//! - every write is guarded: a create (already there: read again), a merge patch carrying the
//!   resourceVersion read, a delete with the UID and resourceVersion read as preconditions. A
//!   conflict reads the Node again and decides again from scratch, at most [`ATTEMPTS`] times;
//!   a write the API refuses otherwise is logged and counted
//!   (`tenant_placer_registration_errors_total{action}`) and tried again after a backoff. One
//!   failure never stops the others;
//! - nothing is planned before both caches hold their first list; everything is derived from
//!   what is observed, so a restart or a new leader writes nothing that is already so (only what
//!   was reported is remembered, and a restart reports a standing problem once more). A Node
//!   just written is decided about again once the watch shows that write ([`Wrote`]), not from
//!   the version before it (at the latest after a resync);
//! - the pool (`--node-selector`) does not limit the registration: it keeps every matching core
//!   Node's placement Node, and this controller places on those its node selector takes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node as CoreNode, ObjectReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::publisher::{EventPublisher, Occurrence};
use super::settings::{Backoff, Settings};
use super::state::Synced;
use crate::api::{
    BadQuantity, LabelSelector, Node, NodeSpec, NodeState, Registration, ResourceAmounts,
};
use crate::metrics::Metrics;

/// Writes of one placement Node per round: the first, and after each conflict one more.
pub const ATTEMPTS: u32 = 3;

/// What the registration reads and writes through.
pub struct RegisterLoop {
    pub client: kube::Client,
    /// The core Nodes registered (`--register-nodes`).
    pub selector: LabelSelector,
    /// Publishes the Warning Events of problems; `None` publishes nothing.
    pub events: Option<EventPublisher>,
    pub metrics: Arc<Metrics>,
    /// With nothing changed, a round this often.
    pub resync: Duration,
    /// Changes are gathered this long before a round, so that a burst makes one round.
    pub window: Duration,
    /// After a round with a failed write, the next comes after this backoff.
    pub error_backoff: Backoff,
    /// The problems reported, by core Node name: each is reported once per change.
    pub reported: Mutex<HashMap<String, Problem>>,
    /// Our own writes the placement Node watch has not shown yet, by name (see [`Wrote`]).
    pub in_flight: Mutex<HashMap<String, (Wrote, Instant)>>,
}

impl std::fmt::Debug for RegisterLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisterLoop")
            .field("selector", &self.selector)
            .finish_non_exhaustive()
    }
}

impl RegisterLoop {
    /// The registration of the core Nodes `selector` takes, with these settings' timings.
    pub fn new(client: kube::Client, selector: LabelSelector, settings: &Settings) -> Self {
        RegisterLoop {
            client,
            selector,
            events: None,
            metrics: Arc::default(),
            resync: settings.register_resync,
            window: settings.requeue_window,
            error_backoff: Backoff::new(settings.error_backoff, settings.error_backoff_max),
            reported: Mutex::default(),
            in_flight: Mutex::default(),
        }
    }
}

/// What to do about one name: the outcome of [`decide`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the placement Node of a core Node that has none.
    Create {
        name: String,
        registration: Registration,
    },
    /// Patch the owned fields that differ, guarded by the resourceVersion read.
    Update {
        name: String,
        resource_version: String,
        change: Change,
    },
    /// Delete a registered placement Node whose core Node is gone (once a read confirms it),
    /// guarded by the UID and resourceVersion read.
    Delete {
        name: String,
        uid: Option<String>,
        resource_version: String,
    },
    /// Report a problem with the core Node of this name and leave both Nodes as they are.
    Report { name: String, problem: Problem },
}

impl Action {
    /// The name of the core Node and placement Node it is about.
    pub fn name(&self) -> &str {
        match self {
            Action::Create { name, .. }
            | Action::Update { name, .. }
            | Action::Delete { name, .. }
            | Action::Report { name, .. } => name,
        }
    }
}

/// The owned fields of a placement Node that differ from what its core Node gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Change {
    pub capacity: Option<ResourceAmounts>,
    pub state: Option<NodeState>,
    /// Labels to set (`Some`) or remove (`None`).
    pub labels: BTreeMap<String, Option<String>>,
}

impl Change {
    /// The change from `node` to what `wanted` gives, `None` when there is none.
    fn between(node: &Node, wanted: &Registration) -> Option<Change> {
        let state = wanted.state_over(node.spec.state);
        let mut labels: BTreeMap<String, Option<String>> = wanted
            .labels
            .iter()
            .filter(|(key, value)| node.labels().get(*key) != Some(*value))
            .map(|(key, value)| (key.clone(), Some(value.clone())))
            .collect();
        labels.extend(
            node.labels()
                .keys()
                .filter(|key| !wanted.labels.contains_key(*key))
                .map(|key| (key.clone(), None)),
        );
        let change = Change {
            capacity: (node.spec.capacity != wanted.capacity).then_some(wanted.capacity),
            state: (node.spec.state != state).then_some(state),
            labels,
        };
        (change != Change::default()).then_some(change)
    }

    /// The JSON merge patch that makes the change, failing (409) unless the Node is still at
    /// `resource_version`.
    pub fn patch(&self, resource_version: &str) -> Value {
        let mut metadata = json!({"resourceVersion": resource_version});
        if !self.labels.is_empty() {
            metadata["labels"] = json!(self.labels);
        }
        let mut patch = json!({"metadata": metadata});
        let mut spec = serde_json::Map::new();
        if let Some(capacity) = self.capacity {
            spec.insert("capacity".into(), json!(capacity));
        }
        if let Some(state) = self.state {
            spec.insert("state".into(), json!(state));
        }
        if !spec.is_empty() {
            patch["spec"] = Value::Object(spec);
        }
        patch
    }
}

/// Why a core Node is reported and left as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A placement Node of its name that the registration did not make (that Node's UID).
    Clash { uid: Option<String> },
    /// Its allocatable cannot be read.
    UnreadableAllocatable(BadQuantity),
}

impl Problem {
    /// The metric label.
    fn label(&self) -> &'static str {
        match self {
            Problem::Clash { .. } => "clash",
            Problem::UnreadableAllocatable(_) => "unreadable_allocatable",
        }
    }

    /// The Event's reason.
    fn reason(&self) -> &'static str {
        match self {
            Problem::Clash { .. } => "RegistrationClash",
            Problem::UnreadableAllocatable(_) => "UnreadableAllocatable",
        }
    }

    /// The Event's note, about the core Node `name`.
    fn note(&self, name: &str) -> String {
        match self {
            Problem::Clash { .. } => format!(
                "tenant-placer cannot register this node: the placement Node {name} exists and was \
                 not registered by it (it lacks the label {}: \"true\"); both are left as they \
                 are. Delete that placement Node to have this one registered, or label it to hand \
                 it over",
                crate::api::REGISTERED_LABEL
            ),
            Problem::UnreadableAllocatable(why) => format!(
                "tenant-placer cannot read this node's capacity ({why}); its placement Node {name} \
                 is left as it is until it can be read"
            ),
        }
    }
}

/// What to do about the name `name`: its core Node as the core cache holds it (`None` when it
/// holds none) and its placement Node (`None` when there is none). Pure; see the module rules.
pub fn decide(
    selector: &LabelSelector,
    name: &str,
    core: Option<&CoreNode>,
    node: Option<&Node>,
) -> Option<Action> {
    let name = name.to_owned();
    // Gone, going, or no longer taken by the selector: the same for its placement Node.
    let core = core
        .filter(|core| core.metadata.deletion_timestamp.is_none())
        .filter(|core| selector.matches(core.labels()));
    let Some(core) = core else {
        let node = node?;
        let ours = node.is_registered()
            && node.metadata.deletion_timestamp.is_none()
            && node.unreadable_reason().is_none();
        // NB: a Node the API served has a resourceVersion: without one, nothing is guarded.
        let resource_version = node.metadata.resource_version.clone()?;
        return ours.then(|| Action::Delete {
            name,
            uid: node.metadata.uid.clone(),
            resource_version,
        });
    };
    if let Some(node) = node.filter(|node| !node.is_registered()) {
        let problem = Problem::Clash {
            uid: node.metadata.uid.clone(),
        };
        return Some(Action::Report { name, problem });
    }
    let registration = match Registration::of(core) {
        Ok(registration) => registration,
        Err(why) => {
            let problem = Problem::UnreadableAllocatable(why);
            return Some(Action::Report { name, problem });
        }
    };
    let Some(node) = node else {
        return Some(Action::Create { name, registration });
    };
    if node.metadata.deletion_timestamp.is_some() || node.unreadable_reason().is_some() {
        return None;
    }
    let resource_version = node.metadata.resource_version.clone()?;
    Change::between(node, &registration).map(|change| Action::Update {
        name,
        resource_version,
        change,
    })
}

/// What to do about every name the core Nodes and the placement Nodes hold, in name order.
/// Pure.
pub fn plan(selector: &LabelSelector, cores: &[Arc<CoreNode>], nodes: &[Arc<Node>]) -> Vec<Action> {
    let cores: HashMap<String, &CoreNode> =
        cores.iter().map(|c| (c.name_any(), c.as_ref())).collect();
    let nodes: HashMap<String, &Node> = nodes.iter().map(|n| (n.name_any(), n.as_ref())).collect();
    let names: BTreeSet<&String> = cores.keys().chain(nodes.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            decide(
                selector,
                name,
                cores.get(name).copied(),
                nodes.get(name).copied(),
            )
        })
        .collect()
}

/// Runs the rounds until the task is dropped (it runs while this replica leads): one when both
/// caches hold their first list, then one after each change (gathered for a window), and one
/// every resync, or after the error backoff when a write failed.
pub async fn run(
    ctx: Arc<RegisterLoop>,
    (cores, cores_synced): (Store<CoreNode>, Synced),
    (nodes, nodes_synced): (Store<Node>, Synced),
    changed: Arc<tokio::sync::Notify>,
) {
    for synced in [&cores_synced, &nodes_synced] {
        if synced.wait().await.is_err() {
            return;
        }
    }
    loop {
        let next = if round(&ctx, &cores, &nodes).await {
            ctx.error_backoff.reset("round");
            ctx.resync
        } else {
            ctx.error_backoff.next("round")
        };
        ctx.metrics.register_round_done();
        tokio::select! {
            () = changed.notified() => {}
            () = tokio::time::sleep(next) => {}
        }
        tokio::time::sleep(ctx.window).await;
    }
}

/// One round: the plan over both caches, each write made (a conflict decided again), and the
/// problems reported once per change. True when every write went through.
async fn round(ctx: &RegisterLoop, cores: &Store<CoreNode>, nodes: &Store<Node>) -> bool {
    let actions = plan(&ctx.selector, &cores.state(), &nodes.state());
    let behind = ctx.behind(nodes);
    let mut problems = HashMap::new();
    let mut done = true;
    for action in actions {
        match action {
            Action::Report { name, problem } => {
                problems.insert(name, problem);
            }
            // Decided from the version before our own write: the watch's next event decides.
            write if behind.contains(write.name()) => {}
            write => done &= settle(ctx, cores, write, &mut problems).await,
        }
    }
    report(ctx, cores, problems).await;
    done
}

/// What one of our writes left, for the watch to show before the registration decides about
/// that Node again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrote {
    /// Created or patched: this resourceVersion.
    Version(u64),
    /// Deleted: gone, or being deleted.
    Deleted,
}

impl Wrote {
    /// What a create or patch returned, when its resourceVersion can be compared.
    fn version_of(node: &Node) -> Option<Wrote> {
        node.resource_version()?.parse().ok().map(Wrote::Version)
    }

    /// Whether the cached Node (`None`: none cached) shows this write, or a later version.
    /// NB: resourceVersions are compared as numbers, as `state::newest` does: both come from the
    /// same API server; a cached one that cannot be read counts as caught up.
    fn shown_by(self, cached: Option<&Node>) -> bool {
        match self {
            Wrote::Version(ours) => cached
                .and_then(|node| node.resource_version())
                .is_some_and(|cached| cached.parse::<u64>().map_or(true, |cached| cached >= ours)),
            Wrote::Deleted => cached.is_none_or(|node| node.metadata.deletion_timestamp.is_some()),
        }
    }
}

impl RegisterLoop {
    /// The names whose last write of ours the cache does not show yet; a write the cache has
    /// shown, or that is older than a resync, is forgotten.
    fn behind(&self, nodes: &Store<Node>) -> BTreeSet<String> {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        in_flight.retain(|name, (wrote, at)| {
            let cached = nodes.get(&ObjectRef::new(name));
            !wrote.shown_by(cached.as_deref()) && at.elapsed() < self.resync
        });
        in_flight.keys().cloned().collect()
    }

    fn wrote(&self, name: &str, wrote: Option<Wrote>) {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match wrote {
            Some(wrote) => {
                in_flight.insert(name.to_owned(), (wrote, Instant::now()));
            }
            None => {
                in_flight.remove(name);
            }
        }
    }
}

/// How a write ended.
enum Written {
    /// Nothing left to do; what the write left for the watch to show, if it wrote.
    Done(Option<Wrote>),
    /// The Node changed since it was read (or came, or went): read again and decide again.
    Stale,
    /// Refused, logged and counted: tried again after the backoff.
    Failed,
}

/// Makes one write; after a conflict, reads the placement Node again and decides again, at most
/// [`ATTEMPTS`] writes in all. A problem found on the way goes to `problems`. True when nothing
/// is left to do for this name.
async fn settle(
    ctx: &RegisterLoop,
    cores: &Store<CoreNode>,
    mut action: Action,
    problems: &mut HashMap<String, Problem>,
) -> bool {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let name = action.name().to_owned();
    for _ in 0..ATTEMPTS {
        match write(ctx, &api, &action).await {
            Written::Done(wrote) => {
                ctx.wrote(&name, wrote);
                return true;
            }
            Written::Failed => return false,
            Written::Stale => {}
        }
        let current = match api.get_opt(&name).await {
            Ok(current) => current,
            Err(error) => {
                refused(
                    ctx,
                    "read",
                    &name,
                    &error,
                    "could not read a placement Node again",
                );
                return false;
            }
        };
        let core = cores.get(&ObjectRef::new(&name));
        match decide(&ctx.selector, &name, core.as_deref(), current.as_ref()) {
            None => {
                ctx.wrote(&name, None);
                return true;
            }
            Some(Action::Report { name, problem }) => {
                problems.insert(name, problem);
                return true;
            }
            Some(next) => action = next,
        }
    }
    tracing::info!(node = %name, attempts = ATTEMPTS,
        "registration: the placement Node kept changing; tried again after a backoff");
    false
}

/// One guarded write.
async fn write(ctx: &RegisterLoop, api: &Api<Node>, action: &Action) -> Written {
    match action {
        Action::Create { name, registration } => {
            let mut node = Node::new(
                name,
                NodeSpec {
                    capacity: registration.capacity,
                    state: registration.state,
                    overcommit: None,
                },
            );
            node.metadata.labels = Some(registration.labels.clone());
            match api.create(&PostParams::default(), &node).await {
                Ok(created) => {
                    tracing::info!(node = %name, state = ?registration.state,
                        capacity = ?registration.capacity, "registered a node from the cluster");
                    Written::Done(Wrote::version_of(&created))
                }
                Err(kube::Error::Api(status)) if status.is_already_exists() => Written::Stale,
                Err(error) => {
                    refused(
                        ctx,
                        "create",
                        name,
                        &error,
                        "could not create a placement Node",
                    );
                    Written::Failed
                }
            }
        }
        Action::Update {
            name,
            resource_version,
            change,
        } => {
            let patch = change.patch(resource_version);
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(patched) => {
                    tracing::info!(node = %name, ?change, "registered node updated from the cluster");
                    Written::Done(Wrote::version_of(&patched))
                }
                Err(kube::Error::Api(status)) if status.is_conflict() || status.is_not_found() => {
                    Written::Stale
                }
                Err(error) => {
                    refused(
                        ctx,
                        "update",
                        name,
                        &error,
                        "could not update a placement Node",
                    );
                    Written::Failed
                }
            }
        }
        Action::Delete {
            name,
            uid,
            resource_version,
        } => {
            match core_gone(ctx, name).await {
                Ok(true) => {}
                // The cache is behind the API: the next round decides from what it shows.
                Ok(false) => return Written::Done(None),
                Err(error) => {
                    refused(
                        ctx,
                        "read",
                        name,
                        &error,
                        "could not confirm a core Node is gone",
                    );
                    return Written::Failed;
                }
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: uid.clone(),
                    resource_version: Some(resource_version.clone()),
                }),
                ..DeleteParams::default()
            };
            match api.delete(name, &params).await {
                Ok(_) => {
                    tracing::info!(node = %name,
                        "its core Node is gone: the registered node is deleted (and drained)");
                    Written::Done(Some(Wrote::Deleted))
                }
                Err(kube::Error::Api(status)) if status.is_not_found() => Written::Done(None),
                Err(kube::Error::Api(status)) if status.is_conflict() => Written::Stale,
                Err(error) => {
                    refused(
                        ctx,
                        "delete",
                        name,
                        &error,
                        "could not delete a placement Node",
                    );
                    Written::Failed
                }
            }
        }
        Action::Report { .. } => Written::Done(None),
    }
}

/// Whether the core Node `name` is gone for the registration, by a direct read: absent, being
/// deleted, or not taken by the selector.
async fn core_gone(ctx: &RegisterLoop, name: &str) -> Result<bool, kube::Error> {
    let api: Api<CoreNode> = Api::all(ctx.client.clone());
    let core = api.get_opt(name).await?;
    Ok(core.is_none_or(|core| {
        core.metadata.deletion_timestamp.is_some() || !ctx.selector.matches(core.labels())
    }))
}

/// Logs and counts a call the API refused.
fn refused(ctx: &RegisterLoop, action: &'static str, name: &str, error: &kube::Error, what: &str) {
    tracing::warn!(node = %name, %error, action, "registration: {what}; tried again after a backoff");
    ctx.metrics.register_error(action);
}

/// Reports each problem that is new or changed since the last round (a log line, the metric, a
/// Warning Event on the core Node), and forgets those that went.
async fn report(ctx: &RegisterLoop, cores: &Store<CoreNode>, problems: HashMap<String, Problem>) {
    let fresh: Vec<(String, Problem)> = {
        let mut reported = ctx.reported.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh = problems
            .iter()
            .filter(|(name, problem)| reported.get(*name) != Some(*problem))
            .map(|(name, problem)| (name.clone(), problem.clone()))
            .collect();
        *reported = problems;
        fresh
    };
    for (name, problem) in fresh {
        let note = problem.note(&name);
        tracing::warn!(node = %name, problem = problem.label(), "registration: {note}");
        ctx.metrics.register_problem(problem.label());
        let regarding = ObjectReference {
            api_version: Some(CoreNode::api_version(&()).into_owned()),
            kind: Some(CoreNode::kind(&()).into_owned()),
            name: Some(name.clone()),
            uid: cores
                .get(&ObjectRef::new(&name))
                .and_then(|core| core.metadata.uid.clone()),
            ..ObjectReference::default()
        };
        let occurrence = Occurrence {
            type_: EventType::Warning,
            reason: problem.reason(),
            action: "Register",
            note,
        };
        EventPublisher::publish_or_log(ctx.events.as_ref(), occurrence, regarding).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::api::REGISTERED_LABEL;
    use crate::testing::{NodeBuilder, core_node, node};

    fn selector() -> LabelSelector {
        "pool=eu".parse().unwrap()
    }

    /// A placement Node as the registration keeps node-eu-1's core Node (pool=eu, Ready, 64
    /// cores, 256Gi, 8000Gi): in step with it.
    fn registered() -> NodeBuilder {
        node("n")
            .capacity(64, 256, 8000)
            .label("pool", "eu")
            .label(REGISTERED_LABEL, "true")
            .uid("uid-n")
            .resource_version(7)
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn create(
        capacity: (i64, i64, i64),
        state: NodeState,
        pairs: &[(&str, &str)],
    ) -> Option<Action> {
        Some(Action::Create {
            name: "n".into(),
            registration: Registration {
                capacity: ResourceAmounts::new(capacity.0, capacity.1, capacity.2),
                state,
                labels: labels(pairs),
            },
        })
    }

    fn update(change: Change) -> Option<Action> {
        Some(Action::Update {
            name: "n".into(),
            resource_version: "7".into(),
            change,
        })
    }

    fn report(problem: Problem) -> Option<Action> {
        Some(Action::Report {
            name: "n".into(),
            problem,
        })
    }

    const REGISTERED: (&str, &str) = (REGISTERED_LABEL, "true");

    /// The decision order, for one name: the core Node gone (or going, or no longer selected)
    /// deletes a registered, readable placement Node that is not going already, and leaves any
    /// other; a placement Node without the label is a clash (reported, whatever the core Node
    /// says); an allocatable that cannot be read is reported; then the placement Node is
    /// created, left to go, left unreadable, or patched where its capacity, state or labels
    /// differ (a drain stays).
    #[test]
    fn each_core_node_and_placement_node_gives_one_action() {
        let eu = || core_node("n").label("pool", "eu");
        // What, the core Node, the placement Node, what to do.
        type Row = (&'static str, Option<CoreNode>, Option<Node>, Option<Action>);
        let cases: Vec<Row> = vec![
            // 64 cores -> 64 threads; 256Gi, 8000Gi -> 256, 8000 GB.
            (
                "a Ready, schedulable core Node gets an Online placement Node",
                Some(eu().build()),
                None,
                create(
                    (64, 256, 8000),
                    NodeState::Online,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "a cordoned one, Cordoned",
                Some(eu().cordoned().build()),
                None,
                create(
                    (64, 256, 8000),
                    NodeState::Cordoned,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "a NotReady one, Offline",
                Some(eu().ready("False").build()),
                None,
                create(
                    (64, 256, 8000),
                    NodeState::Offline,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "NotReady wins over cordoned: Offline",
                Some(eu().ready("False").cordoned().build()),
                None,
                create(
                    (64, 256, 8000),
                    NodeState::Offline,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "Ready Unknown (the kubelet stopped posting) is not Ready: Offline",
                Some(eu().ready("Unknown").build()),
                None,
                create(
                    (64, 256, 8000),
                    NodeState::Offline,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "a kubelet that reported nothing yet: Offline, no capacity",
                Some(eu().no_conditions().no_allocatable().build()),
                None,
                create((0, 0, 0), NodeState::Offline, &[("pool", "eu"), REGISTERED]),
            ),
            (
                // 31500m -> 31 threads; 127Gi + 1023Mi -> 127 GB; 3999.9Gi -> 3999 GB.
                "allocatable rounds down to whole cores and GiB",
                Some(eu().allocatable("31500m", "131071Mi", "3999.9Gi").build()),
                None,
                create(
                    (31, 127, 3999),
                    NodeState::Online,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "in step: nothing to do",
                Some(eu().build()),
                Some(registered().build()),
                None,
            ),
            (
                "overcommit and the finalizer are not the registration's: nothing to do",
                Some(eu().build()),
                Some(
                    registered()
                        .overcommit(2.0, 1.0, 1.0)
                        .finalizer(crate::api::NODE_FINALIZER)
                        .build(),
                ),
                None,
            ),
            (
                "cordoned: Online -> Cordoned",
                Some(eu().cordoned().build()),
                Some(registered().build()),
                update(Change {
                    state: Some(NodeState::Cordoned),
                    ..Change::default()
                }),
            ),
            (
                "NotReady: Cordoned -> Offline",
                Some(eu().cordoned().ready("False").build()),
                Some(registered().state(NodeState::Cordoned).build()),
                update(Change {
                    state: Some(NodeState::Offline),
                    ..Change::default()
                }),
            ),
            (
                "Ready and uncordoned again: Offline -> Online",
                Some(eu().build()),
                Some(registered().state(NodeState::Offline).build()),
                update(Change {
                    state: Some(NodeState::Online),
                    ..Change::default()
                }),
            ),
            (
                // 32 cores, 128Gi, 4000Gi -> (32, 128, 4000).
                "allocatable lowered: the capacity follows",
                Some(eu().allocatable("32", "128Gi", "4000Gi").build()),
                Some(registered().build()),
                update(Change {
                    capacity: Some(ResourceAmounts::new(32, 128, 4000)),
                    ..Change::default()
                }),
            ),
            (
                "a drain someone started stays, whatever the core Node says",
                Some(eu().cordoned().build()),
                Some(registered().state(NodeState::Draining).build()),
                None,
            ),
            (
                "a draining node's capacity still follows",
                Some(eu().allocatable("32", "256Gi", "8000Gi").build()),
                Some(registered().state(NodeState::Draining).build()),
                update(Change {
                    capacity: Some(ResourceAmounts::new(32, 256, 8000)),
                    ..Change::default()
                }),
            ),
            (
                "labels follow the core Node's: one added, one gone",
                Some(eu().label("zone", "eu-1a").build()),
                Some(registered().label("rack", "r7").build()),
                update(Change {
                    labels: BTreeMap::from([
                        ("rack".to_owned(), None),
                        ("zone".to_owned(), Some("eu-1a".to_owned())),
                    ]),
                    ..Change::default()
                }),
            ),
            (
                "the core Node gone: the registered placement Node is deleted",
                None,
                Some(registered().build()),
                Some(Action::Delete {
                    name: "n".into(),
                    uid: Some("uid-n".into()),
                    resource_version: "7".into(),
                }),
            ),
            (
                "the core Node being deleted: the same",
                Some(eu().deleting().build()),
                Some(registered().build()),
                Some(Action::Delete {
                    name: "n".into(),
                    uid: Some("uid-n".into()),
                    resource_version: "7".into(),
                }),
            ),
            (
                "the core Node no longer selected (its pool label changed): the same",
                Some(core_node("n").label("pool", "us").build()),
                Some(registered().build()),
                Some(Action::Delete {
                    name: "n".into(),
                    uid: Some("uid-n".into()),
                    resource_version: "7".into(),
                }),
            ),
            (
                "the core Node gone, its placement Node already going: left to go",
                None,
                Some(registered().deleting().build()),
                None,
            ),
            (
                "a core Node back while its old placement Node goes: it waits until it is gone",
                Some(eu().build()),
                Some(registered().deleting().state(NodeState::Cordoned).build()),
                None,
            ),
            (
                "no core Node, a placement Node made by hand: never touched",
                None,
                Some(node("n").capacity(8, 8, 8).uid("uid-hand").build()),
                None,
            ),
            (
                "a placement Node of the core Node's name made by hand: a clash, reported",
                Some(eu().build()),
                Some(node("n").capacity(8, 8, 8).uid("uid-hand").build()),
                report(Problem::Clash {
                    uid: Some("uid-hand".into()),
                }),
            ),
            (
                "registered: \"false\" is not registered: a clash",
                Some(eu().build()),
                Some(
                    node("n")
                        .label(REGISTERED_LABEL, "false")
                        .uid("uid-hand")
                        .build(),
                ),
                report(Problem::Clash {
                    uid: Some("uid-hand".into()),
                }),
            ),
            (
                "a clash is reported before an unreadable allocatable",
                Some(eu().allocatable("-1", "1Gi", "1Gi").build()),
                Some(node("n").uid("uid-hand").build()),
                report(Problem::Clash {
                    uid: Some("uid-hand".into()),
                }),
            ),
            (
                "an allocatable that cannot be read: reported, nothing created",
                Some(eu().allocatable("8", "12Xi", "1Gi").build()),
                None,
                report(Problem::UnreadableAllocatable(BadQuantity {
                    resource: "memory",
                    value: "12Xi".into(),
                    why: "unknown suffix",
                })),
            ),
            (
                "an allocatable that cannot be read: reported, the placement Node left as it is",
                Some(eu().allocatable("-1", "1Gi", "1Gi").build()),
                Some(registered().build()),
                report(Problem::UnreadableAllocatable(BadQuantity {
                    resource: "cpu",
                    value: "-1".into(),
                    why: "negative",
                })),
            ),
            (
                "a registered placement Node the types cannot hold: left as it is",
                Some(eu().cordoned().build()),
                Some(unreadable(registered().build())),
                None,
            ),
            (
                "... even when its core Node is gone",
                None,
                Some(unreadable(registered().build())),
                None,
            ),
        ];
        for (what, core, placement, expected) in cases {
            let got = decide(&selector(), "n", core.as_ref(), placement.as_ref());
            assert_eq!(got, expected, "{what}");
        }
    }

    /// A Node as the watch keeps one the types cannot hold.
    fn unreadable(node: Node) -> Node {
        Node::unreadable(node.metadata, "{}", "spec.capacity.threads: invalid".into())
    }

    #[test]
    fn the_plan_decides_every_name_either_cache_holds_in_name_order() {
        let cores: Vec<Arc<CoreNode>> = ["c", "a", "b"]
            .iter()
            .map(|n| Arc::new(core_node(n).label("pool", "eu").build()))
            .collect();
        let in_step = |name: &str| {
            node(name)
                .capacity(64, 256, 8000)
                .label("pool", "eu")
                .label(REGISTERED_LABEL, "true")
                .resource_version(3)
                .build()
        };
        let nodes: Vec<Arc<Node>> = vec![
            Arc::new(in_step("b")),
            Arc::new(in_step("d")),
            Arc::new(node("e").build()),
            Arc::new(node("c").build()),
        ];
        let got: Vec<(String, &str)> = plan(&selector(), &cores, &nodes)
            .iter()
            .map(|action| {
                let what = match action {
                    Action::Create { .. } => "create",
                    Action::Update { .. } => "update",
                    Action::Delete { .. } => "delete",
                    Action::Report { .. } => "report",
                };
                (action.name().to_owned(), what)
            })
            .collect();
        // a: no placement Node; b: in step; c: made by hand; d: its core Node gone; e: by
        // hand, no core Node.
        assert_eq!(
            got,
            [
                ("a".to_owned(), "create"),
                ("c".to_owned(), "report"),
                ("d".to_owned(), "delete")
            ]
        );
    }

    #[test]
    fn a_change_is_a_merge_patch_of_what_differs_guarded_by_the_version_read() {
        let change = Change {
            capacity: Some(ResourceAmounts::new(32, 128, 4000)),
            state: None,
            labels: BTreeMap::from([
                ("rack".to_owned(), None),
                ("zone".to_owned(), Some("a".to_owned())),
            ]),
        };
        assert_eq!(
            change.patch("7"),
            json!({
                "metadata": {"resourceVersion": "7", "labels": {"rack": null, "zone": "a"}},
                "spec": {"capacity": {"threads": 32, "memoryGb": 128, "storageGb": 4000}},
            })
        );
        let state = Change {
            state: Some(NodeState::Offline),
            ..Change::default()
        };
        assert_eq!(
            state.patch("8"),
            json!({"metadata": {"resourceVersion": "8"}, "spec": {"state": "Offline"}})
        );
    }

    /// Whether the cache shows our own last write: a version at least ours (numbers, as the API
    /// server's etcd revisions are), or for a delete, the Node gone or going.
    #[test]
    fn a_write_of_ours_is_shown_once_the_cache_holds_it_or_a_later_version() {
        let at = |rv: u64| node("n").resource_version(rv).build();
        let unparsable = {
            let mut node = at(1);
            node.metadata.resource_version = Some("not-a-number".into());
            node
        };
        let cases: Vec<(&str, Wrote, Option<Node>, bool)> = vec![
            (
                "created, not in the cache yet",
                Wrote::Version(9),
                None,
                false,
            ),
            (
                "the cache one version behind",
                Wrote::Version(9),
                Some(at(8)),
                false,
            ),
            (
                "the cache at our write",
                Wrote::Version(9),
                Some(at(9)),
                true,
            ),
            ("the cache past it", Wrote::Version(9), Some(at(12)), true),
            (
                "a version that cannot be compared: caught up",
                Wrote::Version(9),
                Some(unparsable),
                true,
            ),
            (
                "deleted, still cached as it was",
                Wrote::Deleted,
                Some(at(9)),
                false,
            ),
            (
                "deleted, cached as going",
                Wrote::Deleted,
                Some(node("n").deleting().build()),
                true,
            ),
            ("deleted, gone from the cache", Wrote::Deleted, None, true),
        ];
        for (what, wrote, cached, shown) in cases {
            assert_eq!(wrote.shown_by(cached.as_ref()), shown, "{what}");
        }
    }
}
