//! The gauges `/metrics` reads at scrape time: tenants by phase, waiting tenants and how long the
//! oldest has waited, node capacity and allocation per dimension (from the controller's watch
//! caches), node requests and how long the oldest undelivered one has been asked for, what
//! consolidation keeps and has saved (node requests on), the nodes registered from the cluster
//! (registration on), and whether this replica leads.
//!
//! Rules enforced here: nothing is stored and nothing is asked of the API server; a gauge is
//! computed from the caches of the current term when scraped, so it is never a stale count kept
//! as current. Before the controller has set its caches only `tenant_placer_leader` is shown.
//! Allocation is summed from each node's allocations ([`Node::ledger`]), the record of
//! reservations (docs/design.md, rule 1). Ages are whole seconds from the object's own times
//! (a PendingCapacity tenant's from its `Placed` condition's transition, else its creation), 0
//! when nothing waits.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use crate::api::{
    Condition, Node, NodeClass, NodeRequest, NodeRequestPhase, PLACED_CONDITION, ResourceAmounts,
    Tenant, TenantPhase,
};
use crate::controller::{Caches, Health, Role};
use crate::metrics::DISRUPTION_BLOCKED;

/// Encodes the gauges from `health` and `caches` on each scrape.
#[derive(Debug)]
pub(super) struct Gauges {
    pub(super) health: Arc<Health>,
    pub(super) caches: Caches,
}

impl Collector for Gauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        if let Some((nodes, tenants)) = self.caches.get() {
            encode_tenants(&mut encoder, &tenants.state())?;
            encode_nodes(&mut encoder, &nodes.state())?;
        }
        if let Some((classes, requests)) = self.caches.purchases() {
            encode_requests(&mut encoder, &classes.state(), &requests.state())?;
        }
        if let Some(tick) = self.caches.tick() {
            let kept: Vec<(&'static str, u64)> = tick
                .kept
                .iter()
                .map(|k| (k.reason, k.freeable_seconds))
                .collect();
            encode_consolidation(&mut encoder, &kept, tick.saved_monthly)?;
        }
        if let Some(nodes) = self.caches.registered() {
            let registered = nodes.state().iter().filter(|n| n.is_registered()).count();
            encoder
                .encode_descriptor(
                    "tenant_placer_registered_nodes",
                    "Placement Nodes registered from core Nodes (--register-nodes), whether or not this controller's pool places on them.",
                    None,
                    MetricType::Gauge,
                )?
                .encode_gauge(&registered)?;
        }
        let leading = u64::from(self.health.role() == Role::Leading);
        encoder
            .encode_descriptor(
                "tenant_placer_leader",
                "1 while this replica leads (and reconciles), else 0.",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&leading)
    }
}

fn encode_tenants(encoder: &mut DescriptorEncoder, tenants: &[Arc<Tenant>]) -> std::fmt::Result {
    let phase_of = |t: &Tenant| t.status.as_ref().map(|s| s.phase).unwrap_or_default();
    let mut family = encoder.encode_descriptor(
        "tenant_placer_tenants",
        "Tenants by phase.",
        None,
        MetricType::Gauge,
    )?;
    for phase in TenantPhase::ALL {
        let n = tenants.iter().filter(|t| phase_of(t) == phase).count();
        family
            .encode_family(&[("phase", phase.to_string())])?
            .encode_gauge(&n)?;
    }
    let waiting = tenants
        .iter()
        .filter(|t| {
            matches!(
                phase_of(t),
                TenantPhase::PendingCapacity | TenantPhase::Resizing
            )
        })
        .count();
    encoder
        .encode_descriptor(
            "tenant_placer_pending_tenants",
            "Tenants waiting for room (PendingCapacity or Resizing).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&waiting)?;
    let now = Timestamp::now();
    let oldest = tenants
        .iter()
        .filter(|t| phase_of(t) == TenantPhase::PendingCapacity)
        .filter_map(|t| pending_since(t))
        .map(|since| age(now, since))
        .max()
        .unwrap_or(0);
    encoder
        .encode_descriptor(
            "tenant_placer_pending_oldest_seconds",
            "How long the tenant longest in PendingCapacity has waited (since its Placed condition turned False, else since it was created), 0 when none waits.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&oldest)?;
    let in_flight = tenants
        .iter()
        .filter(|t| t.status.as_ref().is_some_and(|s| s.migration.is_some()))
        .count();
    encoder
        .encode_descriptor(
            "tenant_placer_migrations_in_flight",
            "Tenants reserved on two nodes while they move off a draining node.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&in_flight)?;
    let blocked = tenants.iter().filter(|t| t.is_blocked_move()).count();
    encoder
        .encode_descriptor(
            "tenant_placer_migrations_blocked",
            "Tenants on a draining node that no other node can take now (MigrationBlocked).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&blocked)
}

/// NodeRequests by phase; the capacity asked for and not delivered yet; what the machines asked
/// for (not failed) cost a month, by their class's price.
fn encode_requests(
    encoder: &mut DescriptorEncoder,
    classes: &[Arc<NodeClass>],
    requests: &[Arc<NodeRequest>],
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(
        "tenant_placer_node_requests",
        "NodeRequests by phase.",
        None,
        MetricType::Gauge,
    )?;
    for phase in NodeRequestPhase::ALL {
        let n = requests.iter().filter(|r| r.phase() == phase).count();
        family
            .encode_family(&[("phase", phase.to_string())])?
            .encode_gauge(&n)?;
    }
    let coming = requests.iter().filter(|r| {
        matches!(
            r.phase(),
            NodeRequestPhase::Pending | NodeRequestPhase::Provisioning
        )
    });
    let mut asked = ResourceAmounts::default();
    for request in coming {
        let capacity = request.spec.capacity;
        asked = ResourceAmounts::new(
            asked.threads.saturating_add(capacity.threads),
            asked.memory_gb.saturating_add(capacity.memory_gb),
            asked.storage_gb.saturating_add(capacity.storage_gb),
        );
    }
    let now = Timestamp::now();
    let oldest = requests
        .iter()
        .filter(|r| {
            matches!(
                r.phase(),
                NodeRequestPhase::Pending | NodeRequestPhase::Provisioning
            )
        })
        .filter_map(|r| r.metadata.creation_timestamp.as_ref())
        .map(|created| age(now, created.0))
        .max()
        .unwrap_or(0);
    encoder
        .encode_descriptor(
            "tenant_placer_node_request_oldest_in_flight_seconds",
            "How long the oldest NodeRequest still Pending or Provisioning has been asked for, 0 when none is.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&oldest)?;
    let mut family = encoder.encode_descriptor(
        "tenant_placer_node_requests_capacity",
        "Capacity asked for in NodeRequests not delivered yet (Pending or Provisioning), per dimension.",
        None,
        MetricType::Gauge,
    )?;
    for (dimension, amount) in [
        ("threads", asked.threads),
        ("memoryGb", asked.memory_gb),
        ("storageGb", asked.storage_gb),
    ] {
        family
            .encode_family(&[("dimension", dimension)])?
            .encode_gauge(&amount)?;
    }
    let price = |class: &str| {
        classes
            .iter()
            .find(|c| c.name_any() == class)
            .and_then(|c| c.spec.monthly_cost)
            .unwrap_or(0)
    };
    let monthly = requests
        .iter()
        .filter(|r| r.phase() != NodeRequestPhase::Failed)
        .fold(0i64, |sum, r| sum.saturating_add(price(&r.spec.node_class)));
    encoder
        .encode_descriptor(
            "tenant_placer_node_requests_monthly_cost",
            "What the machines asked for (not Failed) cost a month, by their NodeClass's monthlyCost.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&monthly)
}

fn encode_nodes(encoder: &mut DescriptorEncoder, nodes: &[Arc<Node>]) -> std::fmt::Result {
    // A capacity or an allocation that cannot be read shows as 0.
    let rows: Vec<_> = nodes
        .iter()
        .map(|node| {
            let capacity = node.spec.capacity.to_resources().unwrap_or_default();
            let allocated = node.ledger().map(|l| l.allocated()).unwrap_or_default();
            (node.name_any(), capacity, allocated)
        })
        .collect();
    let mut capacity = encoder.encode_descriptor(
        "tenant_placer_node_capacity",
        "Node capacity per dimension.",
        None,
        MetricType::Gauge,
    )?;
    for (name, total, _) in &rows {
        for dimension in placement::Dimension::ALL {
            capacity
                .encode_family(&[
                    ("node", name.as_str()),
                    ("dimension", dimension.field_name()),
                ])?
                .encode_gauge(&total.get(dimension))?;
        }
    }
    let mut allocated = encoder.encode_descriptor(
        "tenant_placer_node_allocated",
        "Reserved per node and dimension, summed from its allocations.",
        None,
        MetricType::Gauge,
    )?;
    for (name, _, held) in &rows {
        for dimension in placement::Dimension::ALL {
            allocated
                .encode_family(&[
                    ("node", name.as_str()),
                    ("dimension", dimension.field_name()),
                ])?
                .encode_gauge(&held.get(dimension))?;
        }
    }
    Ok(())
}

/// What consolidation keeps (each node's reason and how long it has been freeable), by reason,
/// and what it has saved.
fn encode_consolidation(
    encoder: &mut DescriptorEncoder,
    kept: &[(&'static str, u64)],
    saved: u64,
) -> std::fmt::Result {
    let kept = |reason: &'static str| kept.iter().filter(move |(why, _)| *why == reason);
    let mut family = encoder.encode_descriptor(
        "tenant_placer_consolidation_blocked_nodes",
        "Nodes consolidation could free and keeps, by reason (DoNotDisrupt, TenantsWaiting, OutsideWindow, BudgetExhausted).",
        None,
        MetricType::Gauge,
    )?;
    for reason in DISRUPTION_BLOCKED {
        family
            .encode_family(&[("reason", reason)])?
            .encode_gauge(&kept(reason).count())?;
    }
    let mut family = encoder.encode_descriptor(
        "tenant_placer_consolidation_blocked_longest_seconds",
        "How long the node kept longest for each reason has been freeable, 0 when none is kept.",
        None,
        MetricType::Gauge,
    )?;
    for reason in DISRUPTION_BLOCKED {
        let longest = kept(reason).map(|(_, secs)| *secs).max().unwrap_or(0);
        family
            .encode_family(&[("reason", reason)])?
            .encode_gauge(&longest)?;
    }
    encoder
        .encode_descriptor(
            "tenant_placer_consolidation_monthly_savings",
            "The monthly cost (NodeClass monthlyCost) of the nodes consolidation handed back since this replica led.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&saved)
}

/// Since when a PendingCapacity tenant has waited: its `Placed` condition's transition to not
/// placed, or, without a readable one, its creation.
fn pending_since(tenant: &Tenant) -> Option<Timestamp> {
    let placed = tenant.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == PLACED_CONDITION && c.status != "True")
    });
    match placed {
        Some(c) if c.last_transition_time != Condition::UNREADABLE_TIME => {
            Some(c.last_transition_time.0)
        }
        _ => tenant.metadata.creation_timestamp.as_ref().map(|t| t.0),
    }
}

/// Whole seconds from `since` to `now`; 0 for a time in the future (clock skew).
fn age(now: Timestamp, since: Timestamp) -> u64 {
    u64::try_from(now.as_second().saturating_sub(since.as_second())).unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A PendingCapacity tenant created at `created`, with a Placed condition `placed` since
    /// `since` when given.
    fn waiting(created: &str, placed: Option<(&str, &str)>) -> Tenant {
        let conditions: Vec<serde_json::Value> = placed
            .into_iter()
            .map(|(status, since)| {
                serde_json::json!({"type": "Placed", "status": status, "reason": "NoCapacity",
                                   "message": "", "lastTransitionTime": since})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "placement.tenant-placer.dev/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "t", "namespace": "default", "creationTimestamp": created},
            "spec": {"resources": {"threads": 1, "memoryGb": 1, "storageGb": 1}},
            "status": {"phase": "PendingCapacity", "conditions": conditions}}))
        .unwrap()
    }

    #[test]
    fn a_waiting_tenant_has_waited_since_its_placed_condition_turned_false_else_since_created() {
        let now: Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
        let created = "2026-12-03T11:00:00Z";
        let cases = [
            // Placed False since 11:58: 120 s.
            (Some(("False", "2026-12-03T11:58:00Z")), 120),
            // No condition: since creation, 11:00 -> 3,600 s.
            (None, 3600),
            // An unreadable transition time reads as the epoch: creation instead.
            (Some(("False", "not a time")), 3600),
            // A condition still True (not rewritten yet): creation.
            (Some(("True", "2026-12-03T11:59:00Z")), 3600),
            // A clock ahead of ours: 0, not a negative age.
            (Some(("False", "2026-12-03T12:00:05Z")), 0),
        ];
        for (placed, want) in cases {
            let tenant = waiting(created, placed);
            let since = pending_since(&tenant).unwrap();
            assert_eq!(age(now, since), want, "{placed:?}");
        }
    }
}
