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
//!
//! This file is the I/O (the rounds, the guarded writes, the reports); what to do about each
//! name is decided in `plan`, pure and table-tested.

pub mod plan;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node as CoreNode, ObjectReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use super::publisher::{EventPublisher, Occurrence};
use super::settings::{Backoff, Doubling, Settings};
use super::state::Synced;
use crate::api::{LabelSelector, Node, NodeSpec};
use crate::metrics::Metrics;
use plan::{Action, Problem, Wrote, decide, plan};

/// Writes of one placement Node per round: the first, and after each conflict one more.
pub const ATTEMPTS: u32 = 3;

/// What the registration reads of the settings, taken once by the wiring.
#[derive(Clone, Debug)]
pub struct RegisterSettings {
    /// The core Nodes registered (`--register-nodes`).
    pub selector: LabelSelector,
    /// With nothing changed, a round this often.
    pub resync: Duration,
    /// Changes are gathered this long before a round.
    pub window: Duration,
    /// After a round with a failed write, the next comes after this backoff.
    pub error_retries: Doubling,
}

impl RegisterSettings {
    /// The registration's settings; `None` when nothing is registered.
    pub fn of(settings: &Settings) -> Option<Self> {
        Some(RegisterSettings {
            selector: settings.register_nodes.clone()?,
            resync: settings.register_resync,
            window: settings.requeue_window,
            error_retries: settings.error_retries(),
        })
    }
}

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
    /// The registration these settings describe, publishing no Events and counting into its
    /// own metrics (the wiring sets them).
    pub fn new(client: kube::Client, settings: RegisterSettings) -> Self {
        RegisterLoop {
            client,
            selector: settings.selector,
            events: None,
            metrics: Arc::default(),
            resync: settings.resync,
            window: settings.window,
            error_backoff: settings.error_retries.backoff(),
            reported: Mutex::default(),
            in_flight: Mutex::default(),
        }
    }
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
                    &ctx.metrics,
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
                        &ctx.metrics,
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
                        &ctx.metrics,
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
                        &ctx.metrics,
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
                        &ctx.metrics,
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
fn refused(metrics: &Metrics, action: &'static str, name: &str, error: &kube::Error, what: &str) {
    tracing::warn!(node = %name, %error, action, "registration: {what}; tried again after a backoff");
    metrics.register_error(action);
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
