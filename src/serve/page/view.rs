//! What `/api/fleet` answers: the fleet as the page shows it, built from the watch caches with
//! pure code (no API call).
//!
//! Rules enforced here:
//! - nodes in name order (byte order, as first fit sees them), each node's tenants by name;
//! - allocated amounts come from the Node's `status.allocations` through
//!   [`Node::ledger`](crate::api::Node::ledger), the source of truth, never from the
//!   tenants' status; free is capacity - allocated, never below 0;
//! - a node is over capacity when its `OverCapacity` condition is True or it holds more than its
//!   capacity in some dimension;
//! - waiting tenants (PendingCapacity, Resizing) oldest first by creationTimestamp, then by
//!   namespace/name, each with its status message and the shortfall computed with the placement
//!   crate: against the largest free amount among the nodes that take new tenants, or, for a
//!   resize, against the room on its own node counting its own reservation;
//! - sums saturate; nothing here panics on a hand-edited object.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kube::ResourceExt;
use placement::{Dimension, NodeLedger, Resources, Shortfall};
use serde::Serialize;

use crate::api::{Node, NodeState, OVER_CAPACITY_CONDITION, ResourceAmounts, Tenant, TenantPhase};

/// The whole answer of `/api/fleet`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetView {
    /// Goes up by one whenever what the page shows changes (a Node or Tenant in the watch
    /// caches, this replica's role); the same generation means the same data.
    pub generation: u64,
    /// When this answer was made (server clock, RFC 3339 UTC).
    pub generated_at: String,
    /// True when the numbers are live: this replica leads and its watch caches are synced.
    /// When false, `totals` is null, `nodes` and `waiting` are empty, and `message` says why.
    pub live: bool,
    /// This replica's role: `leading`, `standby` or `starting`.
    pub role: &'static str,
    /// Why the numbers are not live; empty when they are.
    pub message: String,
    pub policy: PolicyView,
    pub totals: Option<Totals>,
    pub nodes: Vec<NodeRow>,
    pub waiting: Vec<WaitingTenant>,
}

/// The placement policy in force and its rule in one sentence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyView {
    pub name: String,
    pub rule: String,
}

/// Fleet totals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub nodes: usize,
    /// Online, Cordoned and Offline, each present (0 when none).
    pub nodes_by_state: BTreeMap<String, usize>,
    /// Nodes holding more than their capacity (capacity lowered below what they hold).
    pub over_capacity_nodes: usize,
    /// Nodes whose status cannot be read (negative amounts, hand edits); counted in no sum.
    pub unreadable_nodes: usize,
    pub capacity: ResourceAmounts,
    pub allocated: ResourceAmounts,
    /// Sum over nodes of capacity - allocated (never below 0 per node).
    pub free: ResourceAmounts,
    /// The part of `free` on nodes that take new tenants (Online, not over capacity): the only
    /// room placement can use.
    pub placeable: ResourceAmounts,
    pub tenants: usize,
    /// Every phase, each present (0 when none).
    pub tenants_by_phase: BTreeMap<String, usize>,
    /// Tenants waiting for room (PendingCapacity or Resizing).
    pub waiting: usize,
}

/// One node, as first fit sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub name: String,
    pub state: NodeState,
    /// Online and not over capacity: placement may choose it for a new reservation.
    pub takes_new_tenants: bool,
    pub capacity: ResourceAmounts,
    pub allocated: ResourceAmounts,
    pub free: ResourceAmounts,
    pub over_capacity: bool,
    /// Why it is over capacity (the condition's message); null when it is not.
    pub over_capacity_message: Option<String>,
    /// Why its status cannot be read; null when it can. Its amounts are then 0.
    pub error: Option<String>,
    pub tenants: Vec<NodeTenant>,
}

/// One reservation on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeTenant {
    /// namespace/name.
    pub tenant: String,
    pub uid: String,
    /// What the reservation holds (per replica x replicas).
    pub resources: ResourceAmounts,
    /// The tenant's phase; null when the tenant is not in the cache (an orphan being released).
    pub phase: Option<TenantPhase>,
}

/// A tenant waiting for room.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingTenant {
    /// namespace/name.
    pub tenant: String,
    pub phase: TenantPhase,
    /// Its node when it holds a reservation (a resize waits there); empty otherwise.
    pub node: String,
    /// metadata.creationTimestamp (RFC 3339), the order of the list.
    pub created_at: Option<String>,
    /// What it asks for (per replica x replicas); null when the spec cannot be used.
    pub requested: Option<ResourceAmounts>,
    /// What it holds now.
    pub reserved: ResourceAmounts,
    /// The tenant's status message (it names the shortfall).
    pub message: String,
    /// The shortfall computed here; null when the spec cannot be used or its node is unknown.
    pub shortfall: Option<ShortfallView>,
}

/// A request against the room it was measured with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShortfallView {
    /// `eligibleNodes`: the largest free amount per dimension among nodes that take new tenants;
    /// `ownNode`: the room on the tenant's own node, counting its own reservation (a resize).
    pub against: &'static str,
    /// Nodes that take new tenants (for `eligibleNodes`).
    pub eligible_nodes: usize,
    pub requested: ResourceAmounts,
    pub available: ResourceAmounts,
    /// requested - available per dimension (0 where it fits).
    pub short_by: ResourceAmounts,
    /// One sentence, e.g. `threads: needs 256, at most 62 free (short by 194); …`.
    pub summary: String,
}

/// The rule of a placement policy in one honest sentence.
pub fn policy_rule(policy: &str) -> String {
    const NO_MOVES: &str = "nothing is moved once placed (no rebalancing or migration).";
    match policy {
        "FirstFit" => format!(
            "Each tenant goes to the first Online node, by name, with room in all three \
             dimensions (threads, memory, storage); {NO_MOVES}"
        ),
        "BestFit" => format!(
            "Each tenant goes to the Online node with room in all three dimensions that it leaves \
             fullest (least room left, each dimension as a share of the node's capacity; ties go \
             to the first name), packing tenants tightly; {NO_MOVES}"
        ),
        "LeastLoaded" => format!(
            "Each tenant goes to the Online node with room in all three dimensions that has the \
             most room left after placing it (each dimension as a share of the node's capacity; \
             ties go to the first name), spreading tenants out; {NO_MOVES}"
        ),
        "RoundRobin" => format!(
            "Tenants take turns over the Online nodes in name order: each goes to the first node \
             with room in all three dimensions, starting from the next node in turn and wrapping \
             around; {NO_MOVES}"
        ),
        other => format!(
            "Policy {other:?}: each tenant goes to an Online node with room in all three \
             dimensions; {NO_MOVES}"
        ),
    }
}

/// The live part of the view: totals, nodes and waiting tenants.
pub fn fleet_rows(
    nodes: &[Arc<Node>],
    tenants: &[Arc<Tenant>],
) -> (Totals, Vec<NodeRow>, Vec<WaitingTenant>) {
    let mut sorted: Vec<&Node> = nodes.iter().map(AsRef::as_ref).collect();
    sorted.sort_by_key(|n| n.name_any());
    let ledgers: Vec<(&Node, Result<NodeLedger, String>)> =
        sorted.iter().map(|n| (*n, n.ledger())).collect();
    let phases: HashMap<String, TenantPhase> = tenants
        .iter()
        .filter_map(|t| Some((t.uid()?, phase_of(t))))
        .collect();

    let rows: Vec<NodeRow> = ledgers
        .iter()
        .map(|(node, ledger)| node_row(node, ledger.as_ref(), &phases))
        .collect();
    let readable: Vec<&NodeLedger> = ledgers
        .iter()
        .filter_map(|(_, l)| l.as_ref().ok())
        .collect();

    let mut waiting: Vec<(&Tenant, WaitingTenant)> = tenants
        .iter()
        .filter(|t| {
            matches!(
                phase_of(t),
                TenantPhase::PendingCapacity | TenantPhase::Resizing
            )
        })
        .map(|t| (t.as_ref(), waiting_tenant(t, &readable)))
        .collect();
    waiting.sort_by(|(a, ra), (b, rb)| {
        let created = |t: &Tenant| t.metadata.creation_timestamp.as_ref().map(|c| c.0);
        // A tenant without a creationTimestamp (none from a real API server) goes last.
        let key = |t: &Tenant| (created(t).is_none(), created(t));
        key(a).cmp(&key(b)).then_with(|| ra.tenant.cmp(&rb.tenant))
    });
    let waiting: Vec<WaitingTenant> = waiting.into_iter().map(|(_, w)| w).collect();
    let totals = totals(&rows, tenants, waiting.len());
    (totals, rows, waiting)
}

fn phase_of(tenant: &Tenant) -> TenantPhase {
    tenant.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn node_row(
    node: &Node,
    ledger: Result<&NodeLedger, &String>,
    phases: &HashMap<String, TenantPhase>,
) -> NodeRow {
    let capacity = node.spec.capacity;
    let condition = node.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == OVER_CAPACITY_CONDITION && c.status == "True")
    });
    match ledger {
        Ok(ledger) => {
            let view = ledger.view();
            let cap = view.capacity;
            let allocated = ledger.allocated();
            let over_dimensions: Vec<String> = Dimension::ALL
                .into_iter()
                .filter(|d| allocated.get(*d) > cap.get(*d))
                .map(|d| {
                    format!(
                        "{d} {} allocated > {} capacity",
                        allocated.get(d),
                        cap.get(d)
                    )
                })
                .collect();
            let over_capacity = condition.is_some() || !over_dimensions.is_empty();
            let over_capacity_message = match condition {
                Some(c) => Some(c.message.clone()),
                None if over_capacity => Some(format!(
                    "holds more than its capacity ({}); keeps its tenants and takes no new ones",
                    over_dimensions.join(", ")
                )),
                None => None,
            };
            let mut tenants: Vec<NodeTenant> = ledger
                .entries()
                .iter()
                .map(|e| NodeTenant {
                    tenant: e.tenant.clone(),
                    uid: e.uid.clone(),
                    resources: e.resources.into(),
                    phase: phases.get(&e.uid).copied(),
                })
                .collect();
            tenants.sort_by(|a, b| a.tenant.cmp(&b.tenant).then_with(|| a.uid.cmp(&b.uid)));
            NodeRow {
                name: node.name_any(),
                state: node.spec.state,
                takes_new_tenants: view.takes_new_tenants(),
                capacity,
                allocated: allocated.into(),
                free: cap.saturating_sub(allocated).into(),
                over_capacity,
                over_capacity_message,
                error: None,
                tenants,
            }
        }
        Err(error) => NodeRow {
            name: node.name_any(),
            state: node.spec.state,
            takes_new_tenants: false,
            capacity,
            allocated: ResourceAmounts::default(),
            free: ResourceAmounts::default(),
            over_capacity: condition.is_some(),
            over_capacity_message: condition.map(|c| c.message.clone()),
            error: Some(format!("its status cannot be read: {error}")),
            tenants: Vec::new(),
        },
    }
}

fn waiting_tenant(tenant: &Tenant, ledgers: &[&NodeLedger]) -> WaitingTenant {
    let status = tenant.status.clone().unwrap_or_default();
    let requested = tenant.spec.footprint().ok();
    let shortfall = requested.and_then(|request| match status.phase {
        TenantPhase::Resizing => own_node_shortfall(tenant, &status.node_name, request, ledgers),
        _ => Some(eligible_shortfall(request, ledgers)),
    });
    WaitingTenant {
        tenant: tenant.key(),
        phase: status.phase,
        node: status.node_name,
        created_at: tenant
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string()),
        requested: requested.map(Into::into),
        reserved: status.reserved,
        message: status.message,
        shortfall,
    }
}

/// Against the largest free amount per dimension among the nodes that take new tenants.
fn eligible_shortfall(request: Resources, ledgers: &[&NodeLedger]) -> ShortfallView {
    let views: Vec<placement::NodeView<'_>> = ledgers.iter().map(|l| l.view()).collect();
    let no_fit = placement::fit::no_fit(views.iter().filter(|v| v.takes_new_tenants()), &request);
    shortfall_view(
        "eligibleNodes",
        no_fit.eligible_nodes,
        no_fit.shortfall,
        no_fit.to_string(),
    )
}

/// Against the room on the tenant's own node, its own reservation counted as room.
fn own_node_shortfall(
    tenant: &Tenant,
    node: &str,
    request: Resources,
    ledgers: &[&NodeLedger],
) -> Option<ShortfallView> {
    let ledger = ledgers.iter().find(|l| l.name() == node)?;
    let view = ledger.view();
    let own = tenant
        .uid()
        .and_then(|uid| ledger.entry_of(&uid).map(|e| e.resources))
        .unwrap_or_default();
    let others = view.allocated.saturating_sub(own);
    let shortfall = Shortfall {
        requested: request,
        available: view.capacity.saturating_sub(others),
    };
    let summary = if shortfall.short_dimensions().next().is_none() {
        format!("{node} has room for {request} now; the resize is being retried")
    } else {
        format!("{node} has too little room: {shortfall}")
    };
    Some(shortfall_view("ownNode", 0, shortfall, summary))
}

fn shortfall_view(
    against: &'static str,
    eligible_nodes: usize,
    shortfall: Shortfall,
    summary: String,
) -> ShortfallView {
    ShortfallView {
        against,
        eligible_nodes,
        requested: shortfall.requested.into(),
        available: shortfall.available.into(),
        short_by: shortfall.short_by().into(),
        summary,
    }
}

fn totals(rows: &[NodeRow], tenants: &[Arc<Tenant>], waiting: usize) -> Totals {
    let mut nodes_by_state: BTreeMap<String, usize> = ["Online", "Cordoned", "Offline"]
        .into_iter()
        .map(|s| (s.to_owned(), 0))
        .collect();
    let (mut capacity, mut allocated, mut free, mut placeable) =
        ([0i64; 3], [0i64; 3], [0i64; 3], [0i64; 3]);
    let add = |sum: &mut [i64; 3], amounts: &ResourceAmounts| {
        for (s, v) in sum
            .iter_mut()
            .zip([amounts.threads, amounts.memory_gb, amounts.storage_gb])
        {
            *s = s.saturating_add(v.max(0));
        }
    };
    for row in rows {
        let n = nodes_by_state
            .entry(format!("{:?}", row.state))
            .or_insert(0);
        *n = n.saturating_add(1);
        if row.error.is_some() {
            continue;
        }
        add(&mut capacity, &row.capacity);
        add(&mut allocated, &row.allocated);
        add(&mut free, &row.free);
        if row.takes_new_tenants {
            add(&mut placeable, &row.free);
        }
    }
    let amounts = |[t, m, s]: [i64; 3]| ResourceAmounts::new(t, m, s);
    let mut tenants_by_phase: BTreeMap<String, usize> = TenantPhase::ALL
        .iter()
        .map(|p| (format!("{p:?}"), 0))
        .collect();
    for tenant in tenants {
        let n = tenants_by_phase
            .entry(format!("{:?}", phase_of(tenant)))
            .or_insert(0);
        *n = n.saturating_add(1);
    }
    Totals {
        nodes: rows.len(),
        nodes_by_state,
        over_capacity_nodes: rows.iter().filter(|r| r.over_capacity).count(),
        unreadable_nodes: rows.iter().filter(|r| r.error.is_some()).count(),
        capacity: amounts(capacity),
        allocated: amounts(allocated),
        free: amounts(free),
        placeable: amounts(placeable),
        tenants: tenants.len(),
        tenants_by_phase,
        waiting,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::testing::{node, tenant};

    const NEW_YEAR: &str = "2026-01-01T00:00:00Z";

    #[test]
    fn nodes_come_in_name_order_with_allocations_from_their_ledger() {
        let nodes = [
            node("node-eu-2").capacity(32, 128, 4000),
            node("node-eu-1")
                .capacity(64, 256, 8000)
                .holding("acme", (2, 4, 20)),
        ]
        .map(|n| Arc::new(n.build()));
        let tenants = [tenant("acme")
            .resources(2, 4, 20)
            .phase(TenantPhase::Active)
            .on("node-eu-1")
            .created(NEW_YEAR)]
        .map(|t| Arc::new(t.build()));
        let (totals, rows, waiting) = fleet_rows(&nodes, &tenants);
        let names: Vec<_> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["node-eu-1", "node-eu-2"]);
        assert_eq!(rows[0].allocated, ResourceAmounts::new(2, 4, 20));
        // 64 - 2 = 62 threads free.
        assert_eq!(rows[0].free, ResourceAmounts::new(62, 252, 7980));
        assert_eq!(rows[0].tenants[0].phase, Some(TenantPhase::Active));
        // 64 + 32 = 96 threads; 62 + 32 = 94 free, all of it placeable.
        assert_eq!(totals.capacity, ResourceAmounts::new(96, 384, 12000));
        assert_eq!(totals.free, ResourceAmounts::new(94, 380, 11980));
        assert_eq!(totals.placeable, totals.free);
        assert_eq!(totals.nodes_by_state["Online"], 2);
        assert!(waiting.is_empty());
    }

    #[test]
    fn waiting_tenants_are_oldest_first_with_their_shortfall() {
        let nodes = [
            node("node-eu-1")
                .capacity(64, 256, 8000)
                .holding("acme", (2, 4, 20)),
            node("node-eu-2")
                .capacity(32, 128, 4000)
                .state(NodeState::Cordoned),
        ]
        .map(|n| Arc::new(n.build()));
        let tenants = [
            tenant("young")
                .resources(100, 1, 1)
                .phase(TenantPhase::PendingCapacity)
                .created("2026-01-02T00:00:00Z"),
            tenant("big")
                .resources(256, 1024, 100_000)
                .phase(TenantPhase::PendingCapacity)
                .created(NEW_YEAR),
            tenant("acme")
                .resources(2, 4, 20)
                .phase(TenantPhase::Active)
                .on("node-eu-1")
                .created(NEW_YEAR),
        ]
        .map(|t| Arc::new(t.build()));
        let (totals, _, waiting) = fleet_rows(&nodes, &tenants);
        let names: Vec<_> = waiting.iter().map(|w| w.tenant.as_str()).collect();
        assert_eq!(names, ["default/big", "default/young"]);
        let big = waiting[0].shortfall.as_ref().unwrap();
        // Only node-eu-1 is eligible (node-eu-2 is Cordoned): 256 - 62 = 194 threads short.
        assert_eq!(big.eligible_nodes, 1);
        assert_eq!(big.available, ResourceAmounts::new(62, 252, 7980));
        assert_eq!(big.short_by, ResourceAmounts::new(194, 772, 92020));
        assert!(big.summary.contains("short by 194"), "{}", big.summary);
        // The cordoned node's free room is not placeable: 62 threads, not 62 + 32.
        assert_eq!(totals.placeable.threads, 62);
        assert_eq!(totals.free.threads, 94);
        assert_eq!(totals.waiting, 2);
    }

    #[test]
    fn a_resize_is_measured_against_its_own_node_counting_its_own_reservation() {
        let nodes = [Arc::new(
            node("n1")
                .capacity(8, 8, 8)
                .holding("a", (4, 4, 4))
                .holding("b", (3, 1, 1))
                .build(),
        )];
        let tenants = [Arc::new(
            tenant("a")
                .resources(6, 4, 4)
                .phase(TenantPhase::Resizing)
                .on("n1")
                .created(NEW_YEAR)
                .build(),
        )];
        let (_, _, waiting) = fleet_rows(&nodes, &tenants);
        let shortfall = waiting[0].shortfall.as_ref().unwrap();
        // Room for a: 8 - 3 (b's) = 5 threads; it asks 6: short by 1.
        assert_eq!(shortfall.against, "ownNode");
        assert_eq!(shortfall.available, ResourceAmounts::new(5, 7, 7));
        assert_eq!(shortfall.short_by, ResourceAmounts::new(1, 0, 0));
    }

    #[test]
    fn a_node_holding_more_than_its_capacity_is_flagged_and_not_placeable() {
        let nodes = [Arc::new(
            node("n1").capacity(4, 8, 8).holding("a", (6, 1, 1)).build(),
        )];
        let (totals, rows, _) = fleet_rows(&nodes, &[]);
        assert!(rows[0].over_capacity);
        assert!(!rows[0].takes_new_tenants);
        let message = rows[0].over_capacity_message.as_deref().unwrap();
        assert!(
            message.contains("threads 6 allocated > 4 capacity"),
            "{message}"
        );
        assert_eq!(totals.over_capacity_nodes, 1);
        assert_eq!(totals.placeable, ResourceAmounts::default());
    }

    #[test]
    fn an_unreadable_node_says_why_and_counts_in_no_sum() {
        let nodes = [Arc::new(
            node("n1")
                .capacity(4, 8, 8)
                .holding("a", (-1, 1, 1))
                .build(),
        )];
        let (totals, rows, _) = fleet_rows(&nodes, &[]);
        assert!(
            rows[0].error.as_deref().unwrap().contains("threads"),
            "{:?}",
            rows[0].error
        );
        assert_eq!(totals.capacity, ResourceAmounts::default());
        assert_eq!(totals.unreadable_nodes, 1);
    }

    #[test]
    fn every_policy_has_a_sentence_that_admits_nothing_is_moved() {
        for policy in ["FirstFit", "BestFit", "LeastLoaded", "RoundRobin", "Other"] {
            let rule = policy_rule(policy);
            assert!(
                rule.contains("no rebalancing or migration"),
                "{policy}: {rule}"
            );
        }
        assert!(
            policy_rule("FirstFit")
                .starts_with("Each tenant goes to the first Online node, by name")
        );
    }
}
