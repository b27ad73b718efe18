//! The single Node-status writer: the only code that writes `Node.status`.
//!
//! ```text
//!   reconcile ──settle(wants)──▶ NodeWriter ──decide (placement crate)──▶ Edit on one node
//!                 release(uid)      │  ▲                                      │
//!                 refresh(node)     │  └── 409: GET that node, decide again ◀─┘ PUT /status (rv)
//!                                   └── view = watch cache, overlaid with what we wrote or re-read
//! ```
//!
//! Rules enforced here (DESIGN.md, allocation protocol points 1, 2, 3 and 9):
//! - every write is a PUT of the status subresource carrying the resourceVersion of the object
//!   the decision was made from; there is no write without that precondition;
//! - totals (`allocated`, `free`, `tenants`) and the OverCapacity condition are recomputed from
//!   `allocations` on every write;
//! - a 409 Conflict means: read that node again, decide again from scratch (it may be full now),
//!   retry after a jittered pause, at most `max_conflicts` times in a row, then fail so the
//!   reconcile is requeued with backoff;
//! - decisions and writes are serialised by one lock per process: the single writer. A stale view
//!   can only cost a 409, never an over-commit, because each write is guarded;
//! - a node whose allocations cannot be read is never written, and a tenant whose UID appears on
//!   it is not placed elsewhere (that could reserve it twice): the error names the node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use placement::{Entry, NodeLedger, Plan, TenantWants, plan_release, plan_tenant};

use super::Synced;
use crate::api::{AllocationEntry, Node, NodeCondition, NodeStatus, OVER_CAPACITY_CONDITION};
use crate::error::{Error, is_conflict, is_not_found};
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
}

/// One decision step: write a node's entries, or stop with a result.
enum Step<T> {
    Write(NodeWrite),
    Done(T),
}

/// The entries one node should hold after a write, and the edit that asked for it (none for a
/// refresh of the totals alone).
struct NodeWrite {
    node: String,
    entries: Vec<Entry>,
    edit: Option<placement::Edit>,
}

impl NodeWrite {
    fn from_edit(view: &View, edit: placement::Edit) -> Result<NodeWrite, Error> {
        let ledger = view
            .ledger(&edit.node)
            .ok_or_else(|| Error::UnreadableNode {
                node: edit.node.clone(),
                reason: "not in the node cache".into(),
            })?;
        Ok(NodeWrite {
            node: edit.node.clone(),
            entries: ledger.edited_entries(&edit),
            edit: Some(edit),
        })
    }
}

/// The nodes as the writer sees them right now, converted for the placement crate.
struct View {
    nodes: HashMap<String, Arc<Node>>,
    ledgers: Vec<NodeLedger>,
    /// Nodes whose allocations cannot be read, with the reason and the UIDs they name.
    unreadable: Vec<(String, String, Vec<String>)>,
}

impl View {
    fn build(nodes: Vec<Arc<Node>>) -> View {
        let mut ledgers = Vec::with_capacity(nodes.len());
        let mut unreadable = Vec::new();
        for node in &nodes {
            match ledger_of(node) {
                Ok(ledger) => ledgers.push(ledger),
                Err(reason) => {
                    let uids = allocations_of(node).iter().map(|a| a.uid.clone()).collect();
                    unreadable.push((node.name_any(), reason, uids));
                }
            }
        }
        let nodes = nodes.into_iter().map(|n| (n.name_any(), n)).collect();
        View {
            nodes,
            ledgers,
            unreadable,
        }
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
        self.ledgers.iter().find(|l| l.name() == node)
    }
}

fn allocations_of(node: &Node) -> &[AllocationEntry] {
    node.status
        .as_ref()
        .map(|s| s.allocations.as_slice())
        .unwrap_or_default()
}

/// Converts a Node into a checked ledger, or says which field makes that impossible.
pub fn ledger_of(node: &Node) -> Result<NodeLedger, String> {
    let capacity = node
        .spec
        .capacity
        .to_resources()
        .map_err(|e| format!("spec.capacity.{e}"))?;
    let entries = allocations_of(node)
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let resources = a
                .resources
                .to_resources()
                .map_err(|e| format!("status.allocations[{i}].resources.{e}"))?;
            Ok(Entry {
                uid: a.uid.clone(),
                tenant: a.tenant.clone(),
                resources,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    NodeLedger::new(node.name_any(), node.spec.state.into(), capacity, entries)
        .map_err(|e| e.to_string())
}

/// The status a node should carry for these entries: totals recomputed, OverCapacity condition
/// set, and a condition's transition time kept while its status stays the same.
pub fn node_status(
    node: &Node,
    entries: &[Entry],
    capacity: placement::Resources,
    now: &Time,
) -> NodeStatus {
    // NB: entries come from a checked ledger plus at most one checked entry; should their sum
    // still pass the int64 range, the totals saturate rather than wrap.
    let allocated = placement::Resources::checked_sum(entries.iter().map(|e| &e.resources))
        .unwrap_or(placement::Resources::new(u64::MAX, u64::MAX, u64::MAX));
    let free = capacity.saturating_sub(allocated);
    let over: Vec<_> = placement::Dimension::ALL
        .into_iter()
        .filter(|d| allocated.get(*d) > capacity.get(*d))
        .collect();
    let (status, reason, message) = if over.is_empty() {
        (
            "False",
            "WithinCapacity",
            "allocations fit within capacity".to_owned(),
        )
    } else {
        let dims: Vec<String> = over
            .iter()
            .map(|d| {
                format!(
                    "{d} {} allocated > {} capacity",
                    allocated.get(*d),
                    capacity.get(*d)
                )
            })
            .collect();
        (
            "True",
            "CapacityLowered",
            format!(
                "holds more than its capacity ({}); keeps its tenants and takes no new ones",
                dims.join(", ")
            ),
        )
    };
    let previous = node.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == OVER_CAPACITY_CONDITION)
    });
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => now.clone(),
    };
    NodeStatus {
        allocations: entries
            .iter()
            .map(|e| AllocationEntry {
                tenant: e.tenant.clone(),
                uid: e.uid.clone(),
                resources: e.resources.into(),
            })
            .collect(),
        allocated: allocated.into(),
        free: free.into(),
        tenants: i64::try_from(entries.len()).unwrap_or(i64::MAX),
        conditions: vec![NodeCondition {
            type_: OVER_CAPACITY_CONDITION.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            last_transition_time,
        }],
    }
}

/// Which of two copies of an object is newer. resourceVersions are opaque to clients in general;
// NB: the writer only compares two copies of one object it read from the same apiserver, where
// they are etcd revisions; an unparseable one is treated as oldest so the watch cache wins.
fn newer(candidate: &Node, than: &Node) -> bool {
    let rv = |n: &Node| {
        n.resource_version()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    rv(candidate) > rv(than)
}

/// The single Node-status writer. Cheap to share behind an `Arc`.
pub struct NodeWriter {
    api: Api<Node>,
    cache: Store<Node>,
    /// Copies newer than the watch cache: what we wrote, or re-read after a conflict.
    recent: Mutex<HashMap<String, Arc<Node>>>,
    /// One decision and write at a time in this process.
    lock: tokio::sync::Mutex<()>,
    policy: RetryPolicy,
    metrics: Arc<Metrics>,
    synced: Synced,
}

impl std::fmt::Debug for NodeWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeWriter")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl NodeWriter {
    /// `synced` says when `cache` holds its first full list; no decision is made before.
    pub fn new(api: Api<Node>, cache: Store<Node>, synced: Synced, policy: RetryPolicy) -> Self {
        NodeWriter {
            api,
            cache,
            recent: Mutex::default(),
            lock: tokio::sync::Mutex::new(()),
            policy,
            metrics: Arc::default(),
            synced,
        }
    }

    /// Counts conflicts into these metrics.
    pub fn with_metrics(self, metrics: Arc<Metrics>) -> Self {
        NodeWriter { metrics, ..self }
    }

    /// Whether the node cache has synced.
    pub fn synced(&self) -> &Synced {
        &self.synced
    }

    /// The watch cache, for read-only uses (the node-to-tenant trigger, holdings).
    pub fn cache(&self) -> &Store<Node> {
        &self.cache
    }

    /// Moves a tenant to rest: reserve, resize or drop duplicates, one guarded write at a time,
    /// until the plan needs no write. Returns the resting plan.
    pub async fn settle(&self, wants: &TenantWants<'_>) -> Result<Settled<Plan>, Error> {
        self.drive(wants.tenant, |view| {
            view.check_readable(wants.uid)?;
            Ok(match plan_tenant(wants, &view.ledgers) {
                Plan::Edit(edit) => Step::Write(NodeWrite::from_edit(view, edit)?),
                resting => Step::Done(resting),
            })
        })
        .await
    }

    /// Removes every entry of this UID. Releasing what is not held writes nothing.
    pub async fn release(&self, uid: &str, tenant: &str) -> Result<Settled<()>, Error> {
        self.drive(tenant, |view| {
            view.check_readable(uid)?;
            Ok(match plan_release(uid, &view.ledgers) {
                Some(edit) => Step::Write(NodeWrite::from_edit(view, edit)?),
                None => Step::Done(()),
            })
        })
        .await
    }

    /// Rewrites a node's derived status (totals, condition) when it differs from its allocations,
    /// e.g. after its capacity changed. Entries are left exactly as they are.
    pub async fn refresh(&self, node: &str) -> Result<Settled<()>, Error> {
        self.drive(node, |view| {
            let (Some(object), Some(ledger)) = (view.nodes.get(node), view.ledger(node)) else {
                return match view.unreadable.iter().find(|(name, _, _)| name == node) {
                    Some((_, reason, _)) => Err(Error::UnreadableNode {
                        node: node.to_owned(),
                        reason: reason.clone(),
                    }),
                    None => Ok(Step::Done(())),
                };
            };
            let wanted = node_status(object, ledger.entries(), ledger.view().capacity, &now());
            Ok(if object.status.as_ref() == Some(&wanted) {
                Step::Done(())
            } else {
                Step::Write(NodeWrite {
                    node: node.to_owned(),
                    entries: ledger.entries().to_vec(),
                    edit: None,
                })
            })
        })
        .await
    }

    /// The node holding this UID, and what it holds (first by name), from the current view.
    pub fn holding(&self, uid: &str) -> Option<(String, placement::Resources)> {
        let view = View::build(self.snapshot());
        let mut holders: Vec<_> = view
            .ledgers
            .iter()
            .filter_map(|l| l.entry_of(uid).map(|e| (l.name().to_owned(), e.resources)))
            .collect();
        holders.sort_by(|a, b| a.0.cmp(&b.0));
        holders.into_iter().next()
    }

    /// The decide-write loop shared by every operation.
    async fn drive<T>(
        &self,
        subject: &str,
        mut decide: impl FnMut(&View) -> Result<Step<T>, Error>,
    ) -> Result<Settled<T>, Error> {
        self.synced.wait().await?;
        let _single_writer = self.lock.lock().await;
        let mut conflicts = 0u32;
        let mut writes = Vec::new();
        loop {
            let view = View::build(self.snapshot());
            let write = match decide(&view)? {
                Step::Done(outcome) => return Ok(Settled { outcome, writes }),
                Step::Write(write) => write,
            };
            if count(&writes) >= self.policy.max_writes {
                return Err(Error::TooManyWrites {
                    tenant: subject.to_owned(),
                    writes: self.policy.max_writes,
                });
            }
            let Some(object) = view.nodes.get(&write.node) else {
                return Err(Error::UnreadableNode {
                    node: write.node,
                    reason: "not in the node cache".into(),
                });
            };
            let capacity = object.spec.capacity.to_resources().unwrap_or_default();
            let mut updated = Node::clone(object);
            updated.status = Some(node_status(object, &write.entries, capacity, &now()));
            updated.metadata.managed_fields = None;
            let NodeWrite { node, edit, .. } = write;
            match self
                .api
                .replace_status(&node, &PostParams::default(), &updated)
                .await
            {
                Ok(written) => {
                    tracing::info!(node = %node, subject, kind = ?edit.as_ref().map(|e| e.kind), "node status written");
                    self.remember(written);
                    writes.extend(edit);
                    conflicts = 0;
                }
                Err(error) if is_conflict(&error) => {
                    conflicts = conflicts.saturating_add(1);
                    self.metrics.conflict();
                    tracing::debug!(node = %node, tenant = subject, conflicts, "conflict writing node status");
                    if conflicts > self.policy.max_conflicts {
                        return Err(Error::ConflictRetriesExhausted {
                            node,
                            attempts: conflicts,
                        });
                    }
                    tokio::time::sleep(self.jitter(conflicts)).await;
                    self.reread(&node).await?;
                }
                Err(source) => return Err(Error::WriteNodeStatus { node, source }),
            }
        }
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
            Err(error) if is_not_found(&error) => {
                self.recent
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(name);
            }
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
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.insert(node.name_any(), Arc::new(node));
    }

    /// The newest known copy of every node in the watch cache. Overlay copies the cache has
    /// caught up with are dropped.
    fn snapshot(&self) -> Vec<Arc<Node>> {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let mut nodes = self.cache.state();
        for node in &mut nodes {
            let name = node.name_any();
            if let Some(copy) = recent.get(&name) {
                if newer(copy, node) {
                    *node = copy.clone();
                } else {
                    recent.remove(&name);
                }
            }
        }
        // A node that left the cache was deleted; forget what we knew of it.
        if recent.len() > nodes.len() {
            let names: std::collections::HashSet<String> =
                nodes.iter().map(|n| n.name_any()).collect();
            recent.retain(|name, _| names.contains(name));
        }
        nodes
    }
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

fn count<T>(items: &[T]) -> u32 {
    u32::try_from(items.len()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::api::{NodeSpec, NodeState, ResourceAmounts};

    fn entry(uid: &str, t: u64) -> Entry {
        Entry {
            uid: uid.into(),
            tenant: format!("d/{uid}"),
            resources: placement::Resources::new(t, 1, 1),
        }
    }

    #[test]
    fn totals_are_recomputed_from_the_entries() {
        let node = Node::new(
            "n",
            NodeSpec {
                capacity: ResourceAmounts::new(64, 256, 8000),
                state: NodeState::Online,
            },
        );
        let capacity = node.spec.capacity.to_resources().unwrap();
        let status = node_status(&node, &[entry("a", 2), entry("b", 4)], capacity, &now());
        // 2+4 threads, 1+1 GB, 1+1 GB; free 64-6, 256-2, 8000-2
        assert_eq!(status.allocated, ResourceAmounts::new(6, 2, 2));
        assert_eq!(status.free, ResourceAmounts::new(58, 254, 7998));
        assert_eq!(status.tenants, 2);
        assert_eq!(status.conditions[0].status, "False");
    }

    #[test]
    fn a_node_lowered_below_what_it_holds_keeps_its_entries_and_says_so() {
        let node = Node::new(
            "n",
            NodeSpec {
                capacity: ResourceAmounts::new(4, 256, 8000),
                state: NodeState::Online,
            },
        );
        let capacity = node.spec.capacity.to_resources().unwrap();
        let status = node_status(&node, &[entry("a", 3), entry("b", 3)], capacity, &now());
        assert_eq!(status.allocations.len(), 2);
        assert_eq!(status.free.threads, 0, "free never goes below 0");
        let condition = &status.conditions[0];
        assert_eq!(
            (condition.type_.as_str(), condition.status.as_str()),
            (OVER_CAPACITY_CONDITION, "True")
        );
        assert_eq!(
            condition.message,
            "holds more than its capacity (threads 6 allocated > 4 capacity); keeps its tenants and takes no new ones"
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let mut node = Node::new(
            "n",
            NodeSpec {
                capacity: ResourceAmounts::new(8, 8, 8),
                state: NodeState::Online,
            },
        );
        let capacity = node.spec.capacity.to_resources().unwrap();
        let first = node_status(&node, &[entry("a", 1)], capacity, &now());
        node.status = Some(first.clone());
        let later = Time(
            k8s_openapi::jiff::Timestamp::from_second(
                first.conditions[0].last_transition_time.0.as_second() + 60,
            )
            .unwrap(),
        );
        let second = node_status(&node, &[entry("a", 2)], capacity, &later);
        assert_eq!(
            second.conditions[0].last_transition_time,
            first.conditions[0].last_transition_time
        );
    }
}
