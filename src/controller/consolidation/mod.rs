//! Consolidation: bought (and, when asked, registered) nodes the rebalance plan can empty are
//! drained make-before-break and handed back, within the disruption budget and windows.
//!
//! ```text
//!   every capacity tick (leader only), --consolidation WhenUnderutilized:
//!     the pool's Nodes (engine), do-not-disrupt Tenants and Nodes, classes' costs ──▶ decide (pure)
//!       drain:  Node spec.state Draining + the consolidating mark (guarded by resourceVersion)
//!       cancel: Node back Online, the mark removed (it became do-not-disrupt)
//!       blocked: a Normal Event on the Node and the metric, once per node and reason
//!   a drained Node with the mark: a bought one is handed back at once (its request deleted);
//!   a registered one stays Draining, its Drained condition True (nobody can sell it back)
//! ```
//!
//! Rules enforced here (the decisions' are in [`decide`]):
//! - the record is on the Nodes: a node is being emptied by consolidation while it is Draining
//!   with the consolidating mark and holds something; a restart or a new leader counts it from
//!   there (a drain this process began counts until the node cache shows it). A person's drain
//!   carries no mark, is never counted and never touched;
//! - how long a node has been freeable is remembered in memory: a restart waits
//!   `--consolidate-after-seconds` again (later, never sooner);
//! - a node a person takes back into service (no longer Draining) loses the mark, so that a later
//!   drain of theirs is not counted as consolidation's;
//! - a `do-not-disrupt` annotation other than `"true"` or `"false"` gets a Warning Event on its
//!   object, once per value, and is taken as `"true"`.

pub mod decide;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;

pub use super::disruption::{Budget, Window};
pub use decide::{Blocked, Candidate, ConsolidationPolicy, Controls, Decision, decide};

use super::disruption::Limits;
use super::engine::Engine;
use super::publisher::{EventPublisher, Occurrence};
use super::settings::Settings;
use super::state::TenantCache;
use crate::api::{
    CONSOLIDATING_ANNOTATION, DoNotDisrupt, NODE_CLASS_LABEL, Node, NodeClass, NodeState, Tenant,
    TenantPhase,
};
use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;

/// What consolidation remembers between looks.
#[derive(Debug, Default)]
pub struct Memory(Mutex<Remembered>);

#[derive(Debug, Default)]
struct Remembered {
    /// Since when each node has been freeable (seen in the plan at every look since).
    freeable_since: HashMap<String, Instant>,
    /// The reason each node was last reported blocked for.
    reported: HashMap<String, Blocked>,
    /// Unreadable `do-not-disrupt` values warned about, by object UID.
    warned: HashMap<String, String>,
    /// Nodes this process began to drain, and when, that the node cache has not shown Draining
    /// yet: they count against the budget meanwhile (for [`BEGAN_KEPT`] at most, in case the
    /// cache never shows it: a person took it back at once).
    began: HashMap<String, Instant>,
    /// The monthly cost of each node this process drained to hand back, until it goes back.
    draining_cost: HashMap<String, u64>,
    /// The monthly cost of the nodes consolidation handed back since this process started.
    saved: u64,
}

/// What consolidation knows now, for the page.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Snapshot {
    /// Nodes the plan could free that are not being drained, by name: why, and for how long
    /// (whole seconds) they have been freeable.
    pub kept: Vec<(String, Blocked, u64)>,
    /// The monthly cost of the nodes consolidation handed back since this process started.
    pub saved: u64,
}

/// How long a drain this process began counts before the node cache shows it.
const BEGAN_KEPT: Duration = Duration::from_secs(30);

impl Memory {
    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What consolidation knows now (see [`Snapshot`]).
    pub fn snapshot(&self) -> Snapshot {
        let remembered = self.lock();
        let mut kept: Vec<(String, Blocked, u64)> = remembered
            .reported
            .iter()
            .map(|(node, why)| {
                let since = remembered.freeable_since.get(node);
                let secs = since.map_or(0, |s| s.elapsed().as_secs());
                (node.clone(), *why, secs)
            })
            .collect();
        kept.sort();
        Snapshot {
            kept,
            saved: remembered.saved,
        }
    }

    /// A node consolidation drained went back: its monthly cost is saved from now on.
    pub fn handed_back(&self, node: &str) {
        let mut remembered = self.lock();
        let cost = remembered.draining_cost.remove(node).unwrap_or(0);
        remembered.saved = remembered.saved.saturating_add(cost);
    }
}

/// What consolidation reads of the settings, taken once by the wiring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsolidationSettings {
    /// `--consolidation`: only `WhenUnderutilized` drains.
    pub policy: ConsolidationPolicy,
    /// Registered nodes may be emptied too (`--consolidate-registered`).
    pub registered: bool,
    /// How long a node stays freeable before it is drained (`--consolidate-after-seconds`).
    pub after: Duration,
}

impl From<&Settings> for ConsolidationSettings {
    fn from(settings: &Settings) -> Self {
        ConsolidationSettings {
            policy: settings.consolidation,
            registered: settings.consolidate_registered,
            after: settings.consolidate_after,
        }
    }
}

/// What consolidation reads and writes with, as one step of a capacity tick.
pub struct Consolidate<'a> {
    pub client: &'a kube::Client,
    pub engine: &'a Engine,
    pub tenants: &'a TenantCache,
    pub classes: &'a [Arc<NodeClass>],
    pub events: Option<&'a EventPublisher>,
    pub metrics: &'a Metrics,
    pub settings: &'a ConsolidationSettings,
    /// The disruption budget and windows.
    pub limits: &'a Limits,
    pub memory: &'a Memory,
    /// A tenant of the pool waits for room.
    pub waiting: bool,
    /// Whether a node is a live request's machine (its record names it): only those are
    /// consolidated as bought, not a Node that merely carries a request's label.
    pub bought: &'a (dyn Fn(&str) -> bool + Sync),
}

impl std::fmt::Debug for Consolidate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consolidate")
            .field("waiting", &self.waiting)
            .finish_non_exhaustive()
    }
}

/// Whether this node is being emptied by consolidation (the record: see the module rules).
pub fn consolidating(node: &Node) -> bool {
    node.spec.state == NodeState::Draining
        && node.annotations().contains_key(CONSOLIDATING_ANNOTATION)
}

/// The step (see the module doc).
pub async fn run(step: Consolidate<'_>) {
    if step.settings.policy != ConsolidationPolicy::WhenUnderutilized {
        return;
    }
    let nodes: Vec<Arc<Node>> = step
        .engine
        .cache()
        .state()
        .into_iter()
        .map(|cached| step.engine.node(&cached.name_any()).unwrap_or(cached))
        .collect();
    let tenants = step.tenants.state();
    for (object, value) in unreadable(&nodes, &tenants) {
        warn_unreadable(&step, &object, &value).await;
    }
    let kept_by_tenants = kept_by_tenants(&tenants);
    let cost = class_costs(step.classes);
    // A mark on a node no longer Draining: a person took it back into service. The mark goes,
    // so that a later drain of theirs is not taken for ours.
    for node in nodes.iter().filter(|n| {
        n.spec.state != NodeState::Draining
            && n.annotations().contains_key(CONSOLIDATING_ANNOTATION)
    }) {
        let patch = json!({
            "metadata": {
                "resourceVersion": node.resource_version(),
                "annotations": {CONSOLIDATING_ANNOTATION: null},
            },
        });
        write(step.client, &node.name_any(), &patch).await;
    }
    // Drains this process began count until the cache shows them (then the mark counts).
    let began: HashSet<String> = {
        let mut remembered = step.memory.lock();
        remembered.began.retain(|name, at| {
            at.elapsed() < BEGAN_KEPT
                && nodes
                    .iter()
                    .any(|n| n.name_any() == *name && n.spec.state != NodeState::Draining)
        });
        remembered.began.keys().cloned().collect()
    };
    let candidates = candidates(&nodes, &kept_by_tenants, &cost, &began, |node| {
        (step.bought)(node.metadata.name.as_deref().unwrap_or_default())
    });
    // A tenant growing in place waits for room too: no node is emptied under it.
    let resizing = tenants.iter().any(|t| {
        t.status
            .as_ref()
            .is_some_and(|s| s.phase == TenantPhase::Resizing)
    });
    let ledgers = step.engine.ledgers(None);
    let settings = step.settings;
    let controls = Controls {
        mode: settings.policy,
        registered: settings.registered,
        after: settings.after,
        allowed: step.limits.budget.allowed(nodes.len()),
        window_open: step.limits.open_at(Timestamp::now()),
        waiting: step.waiting || resizing,
    };
    let now = Instant::now();
    let decision = {
        let remembered = step.memory.lock();
        let freeable_for = |name: &str| {
            remembered
                .freeable_since
                .get(name)
                .map_or(Duration::ZERO, |since| {
                    now.saturating_duration_since(*since)
                })
        };
        let selectors = crate::api::selectors_by_uid(tenants.iter().map(AsRef::as_ref));
        let selector = |entry: &placement::Entry| selectors.get(&*entry.uid).copied();
        decide(&ledgers, &candidates, freeable_for, &controls, selector)
    };
    {
        let mut remembered = step.memory.lock();
        let freeable: HashSet<&String> = decision.freeable.iter().collect();
        remembered
            .freeable_since
            .retain(|name, _| freeable.contains(name));
        for name in &decision.freeable {
            remembered.freeable_since.entry(name.clone()).or_insert(now);
        }
    }
    let by_name: HashMap<String, &Arc<Node>> = nodes.iter().map(|n| (n.name_any(), n)).collect();
    for name in &decision.drain {
        if let Some(node) = by_name.get(name) {
            drain(&step, node, cost_of(&candidates, name)).await;
        }
    }
    for name in &decision.cancel {
        if let Some(node) = by_name.get(name) {
            cancel(&step, node).await;
        }
    }
    report_blocked(&step, &decision, &by_name).await;
}

fn cost_of(candidates: &BTreeMap<String, Candidate>, name: &str) -> u64 {
    candidates.get(name).map_or(0, |c| c.monthly_cost)
}

/// Each class's monthly cost, by name (0 when it gives none).
pub fn class_costs(classes: &[Arc<NodeClass>]) -> HashMap<String, u64> {
    classes
        .iter()
        .map(|c| {
            let cost = c.spec.monthly_cost.and_then(|m| u64::try_from(m).ok());
            (c.name_any(), cost.unwrap_or(0))
        })
        .collect()
}

/// Each node as consolidation sees it, by name: `kept_by_tenants` names the nodes holding a
/// `do-not-disrupt` tenant, `began` the drains this process began that the cache does not show
/// yet, `bought` whether a node is a machine bought for a request. Pure.
pub fn candidates(
    nodes: &[Arc<Node>],
    kept_by_tenants: &HashSet<String>,
    cost: &HashMap<String, u64>,
    began: &HashSet<String>,
    bought: impl Fn(&Node) -> bool,
) -> BTreeMap<String, Candidate> {
    nodes
        .iter()
        .map(|node| {
            let name = node.name_any();
            let kept =
                DoNotDisrupt::of(node.annotations()).keeps() || kept_by_tenants.contains(&name);
            let class = node.labels().get(NODE_CLASS_LABEL);
            let candidate = Candidate {
                bought: bought(node),
                registered: node.is_registered(),
                kept,
                consolidating: (consolidating(node) || began.contains(&name))
                    && !node.allocations().is_empty(),
                monthly_cost: class.and_then(|c| cost.get(c)).copied().unwrap_or(0),
            };
            (name, candidate)
        })
        .collect()
}

/// The nodes holding a `do-not-disrupt` tenant (an unreadable value counts as `"true"`), or
/// one moving to or from them, and the nodes holding a spread tenant's replicas (consolidation
/// does not move them: its plan knows no spread rule). Pure.
pub fn kept_by_tenants(tenants: &[Arc<Tenant>]) -> HashSet<String> {
    let mut kept = HashSet::new();
    for tenant in tenants {
        if let Some(status) = tenant
            .status
            .as_ref()
            .filter(|_| !tenant.spec.spread.is_none())
        {
            kept.extend(
                status
                    .placements
                    .iter()
                    .map(|p| p.node.clone())
                    .chain(Some(status.node_name.clone()).filter(|n| !n.is_empty())),
            );
        }
        if !DoNotDisrupt::of(tenant.annotations()).keeps() {
            continue;
        }
        if let Some(status) = &tenant.status {
            if !status.node_name.is_empty() {
                kept.insert(status.node_name.clone());
            }
            if let Some(migration) = &status.migration {
                kept.insert(migration.to.clone());
                kept.insert(migration.from.clone());
            }
        }
    }
    kept
}

/// The Nodes and Tenants whose `do-not-disrupt` value is neither `"true"` nor `"false"`, with
/// that value: each gets a Warning Event (once per value).
fn unreadable(nodes: &[Arc<Node>], tenants: &[Arc<Tenant>]) -> Vec<(ObjectReference, String)> {
    let of = |annotations| match DoNotDisrupt::of(annotations) {
        DoNotDisrupt::Unreadable(value) => Some(value),
        _ => None,
    };
    let nodes = nodes
        .iter()
        .filter_map(|n| Some((n.object_ref(&()), of(n.annotations())?)));
    let tenants = tenants
        .iter()
        .filter_map(|t| Some((t.object_ref(&()), of(t.annotations())?)));
    nodes.chain(tenants).collect()
}

async fn warn_unreadable(step: &Consolidate<'_>, object: &ObjectReference, value: &str) {
    let uid = object.uid.clone().unwrap_or_default();
    {
        let mut remembered = step.memory.lock();
        if remembered.warned.get(&uid).is_some_and(|v| v == value) {
            return;
        }
        remembered.warned.insert(uid, value.to_owned());
    }
    let note = format!(
        "{}: {value:?} is neither \"true\" nor \"false\"; taken as \"true\" (never disrupted)",
        crate::api::DO_NOT_DISRUPT_ANNOTATION
    );
    let occurrence = Occurrence {
        type_: EventType::Warning,
        reason: "UnreadableDoNotDisrupt",
        action: "Consolidate",
        note,
    };
    EventPublisher::publish_or_log(step.events, occurrence, object.clone()).await;
}

/// Drains a node to hand it back: Draining with the mark, guarded by its resourceVersion.
async fn drain(step: &Consolidate<'_>, node: &Node, monthly_cost: u64) {
    let name = node.name_any();
    let patch = json!({
        "metadata": {
            "resourceVersion": node.resource_version(),
            "annotations": {CONSOLIDATING_ANNOTATION: Timestamp::now().to_string()},
        },
        "spec": {"state": "Draining"},
    });
    if !write(step.client, &name, &patch).await {
        return;
    }
    {
        let mut remembered = step.memory.lock();
        remembered.began.insert(name.clone(), Instant::now());
        remembered.draining_cost.insert(name.clone(), monthly_cost);
    }
    step.metrics.consolidation_action("drain");
    tracing::info!(node = %name, "consolidation: draining a node its tenants can leave");
    let saves = if monthly_cost > 0 {
        format!("; handing it back saves {monthly_cost} a month")
    } else {
        String::new()
    };
    let occurrence = Occurrence {
        type_: EventType::Normal,
        reason: "Consolidating",
        action: "Consolidate",
        note: format!("draining: its tenants fit on other nodes{saves}"),
    };
    EventPublisher::publish_or_log(step.events, occurrence, node.object_ref(&())).await;
}

/// Gives a node consolidation drains back to service (it became `do-not-disrupt`).
async fn cancel(step: &Consolidate<'_>, node: &Node) {
    let name = node.name_any();
    let patch = json!({
        "metadata": {
            "resourceVersion": node.resource_version(),
            "annotations": {CONSOLIDATING_ANNOTATION: null},
        },
        "spec": {"state": "Online"},
    });
    if !write(step.client, &name, &patch).await {
        return;
    }
    step.metrics.consolidation_action("cancel");
    let occurrence = Occurrence {
        type_: EventType::Normal,
        reason: "ConsolidationCancelled",
        action: "Consolidate",
        note: "back Online: it, or a tenant on it, is do-not-disrupt".to_owned(),
    };
    EventPublisher::publish_or_log(step.events, occurrence, node.object_ref(&())).await;
}

/// A merge patch of the Node; false (logged) when refused: the next look decides again.
async fn write(client: &kube::Client, name: &str, patch: &serde_json::Value) -> bool {
    let api: Api<Node> = Api::all(client.clone());
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => true,
        Err(error) => {
            tracing::info!(node = name, %error, "consolidation: a Node write was refused; the next look decides again");
            false
        }
    }
}

/// An Event and the metric for each node blocked for a reason it was not blocked for last.
async fn report_blocked(
    step: &Consolidate<'_>,
    decision: &Decision,
    nodes: &HashMap<String, &Arc<Node>>,
) {
    let fresh: Vec<(String, Blocked)> = {
        let mut remembered = step.memory.lock();
        let now: HashMap<&String, Blocked> =
            decision.blocked.iter().map(|(n, b)| (n, *b)).collect();
        remembered.reported.retain(|name, _| now.contains_key(name));
        decision
            .blocked
            .iter()
            .filter(|(name, why)| remembered.reported.insert(name.clone(), *why) != Some(*why))
            .cloned()
            .collect()
    };
    for (name, why) in fresh {
        if why == Blocked::Young {
            continue;
        }
        step.metrics.disruption_blocked(why.reason());
        let Some(node) = nodes.get(&name) else {
            continue;
        };
        let note = match why {
            Blocked::DoNotDisrupt => format!(
                "not drained although its tenants fit elsewhere: {}",
                why.words()
            ),
            Blocked::Budget => format!("not drained yet: {} ({})", why.words(), step.limits.budget),
            _ => format!("not drained yet: {}", why.words()),
        };
        let occurrence = Occurrence {
            type_: EventType::Normal,
            reason: "DisruptionBlocked",
            action: "Consolidate",
            note,
        };
        EventPublisher::publish_or_log(step.events, occurrence, node.object_ref(&())).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::{SpreadPlacement, TenantPhase, TenantSpread};
    use crate::testing::tenant;

    #[test]
    fn a_do_not_disrupt_tenant_keeps_its_nodes_and_a_spread_tenant_keeps_every_node_it_is_on() {
        let plain = tenant("p").on("n0").phase(TenantPhase::Active).build();
        let mut kept = tenant("k").on("n1").phase(TenantPhase::Active).build();
        kept.metadata.annotations = Some(
            [(
                crate::api::DO_NOT_DISRUPT_ANNOTATION.to_owned(),
                "true".to_owned(),
            )]
            .into(),
        );
        let mut spread = tenant("s")
            .spread(TenantSpread::Zones, 2)
            .on("n2")
            .phase(TenantPhase::Active)
            .build();
        spread.status.as_mut().unwrap().placements = ["n2", "n3"]
            .map(|node| SpreadPlacement {
                node: node.to_owned(),
                zone: "z".to_owned(),
                replicas: 1,
            })
            .to_vec();
        let kept = kept_by_tenants(&[Arc::new(plain), Arc::new(kept), Arc::new(spread)]);
        let mut kept: Vec<_> = kept.into_iter().collect();
        kept.sort();
        assert_eq!(kept, ["n1", "n2", "n3"]);
    }
}
