//! A fleet report: tenants (phase, node, footprint) and per-node utilisation, built from API
//! objects, rendered as text with bars, or serialised for scripts.
//!
//! Rules enforced here:
//! - nodes are listed in name order (as first fit sees them), tenants by namespace/name;
//! - utilisation is allocated against capacity as recorded in the Node's allocations (the source
//!   of truth), not the tenants' status;
//! - a bar never claims more than full: a node over capacity shows a full bar and a `!`.

use std::fmt::Write as _;

use kube::ResourceExt;
use placement::Dimension;
use serde::Serialize;

use crate::api::{Node, NodeState, ResourceAmounts, Tenant, TenantPhase};

/// One tenant as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantRow {
    pub tenant: String,
    pub phase: TenantPhase,
    pub node: String,
    /// What the tenant asks for (per replica x replicas); absent when the spec cannot be used.
    pub footprint: Option<ResourceAmounts>,
    /// What it holds on its node.
    pub reserved: ResourceAmounts,
    pub message: String,
}

/// One node as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub node: String,
    pub state: NodeState,
    pub capacity: ResourceAmounts,
    pub allocated: ResourceAmounts,
    pub free: ResourceAmounts,
    pub tenants: Vec<String>,
}

/// The whole fleet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FleetReport {
    pub tenants: Vec<TenantRow>,
    pub nodes: Vec<NodeRow>,
}

impl FleetReport {
    pub fn new(nodes: &[Node], tenants: &[Tenant]) -> Self {
        let mut node_rows: Vec<NodeRow> = nodes.iter().map(node_row).collect();
        node_rows.sort_by(|a, b| a.node.cmp(&b.node));
        let mut tenant_rows: Vec<TenantRow> = tenants.iter().map(tenant_row).collect();
        tenant_rows.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        FleetReport {
            tenants: tenant_rows,
            nodes: node_rows,
        }
    }

    /// Two tables and a bar per node and dimension, for a terminal.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "TENANTS");
        let _ = writeln!(
            out,
            "{:<24} {:<16} {:<12} {:>8} {:>10} {:>11}",
            "TENANT", "PHASE", "NODE", "THREADS", "MEMORY-GB", "STORAGE-GB"
        );
        for t in &self.tenants {
            let shown = t.footprint.unwrap_or(t.reserved);
            let node = if t.node.is_empty() {
                "-"
            } else {
                t.node.as_str()
            };
            let _ = writeln!(
                out,
                "{:<24} {:<16} {:<12} {:>8} {:>10} {:>11}",
                t.tenant, t.phase, node, shown.threads, shown.memory_gb, shown.storage_gb
            );
            if matches!(
                t.phase,
                TenantPhase::PendingCapacity | TenantPhase::Resizing | TenantPhase::Pending
            ) {
                let _ = writeln!(out, "    {}", t.message);
            }
        }
        let _ = writeln!(out, "\nNODES");
        for n in &self.nodes {
            let _ = writeln!(
                out,
                "{} ({:?}, {} tenants)",
                n.node,
                n.state,
                n.tenants.len()
            );
            let capacity = n.capacity.to_resources().unwrap_or_default();
            let allocated = n.allocated.to_resources().unwrap_or_default();
            for dimension in Dimension::ALL {
                let _ = writeln!(
                    out,
                    "  {:<10} {}",
                    dimension.field_name(),
                    bar(allocated.get(dimension), capacity.get(dimension))
                );
            }
        }
        out
    }
}

const BAR_WIDTH: u64 = 30;

/// `[######------------------------]   2 / 64   (3%)`
pub fn bar(allocated: u64, capacity: u64) -> String {
    let filled = if capacity == 0 {
        if allocated > 0 { BAR_WIDTH } else { 0 }
    } else {
        // allocated/capacity x width, rounded up so any use shows; capped at full.
        u128::from(allocated)
            .saturating_mul(u128::from(BAR_WIDTH))
            .div_ceil(u128::from(capacity))
            .min(u128::from(BAR_WIDTH)) as u64
    };
    let percent = if capacity == 0 {
        0
    } else {
        u128::from(allocated)
            .saturating_mul(100)
            .checked_div(u128::from(capacity))
            .unwrap_or(0)
    };
    let over = if allocated > capacity {
        " !over capacity"
    } else {
        ""
    };
    format!(
        "[{}{}] {:>7} / {:<7} ({percent}%){over}",
        "#".repeat(usize::try_from(filled).unwrap_or(0)),
        "-".repeat(usize::try_from(BAR_WIDTH.saturating_sub(filled)).unwrap_or(0)),
        allocated,
        capacity
    )
}

fn node_row(node: &Node) -> NodeRow {
    let status = node.status.clone().unwrap_or_default();
    let capacity = node.spec.capacity.to_resources().unwrap_or_default();
    // An unreadable node shows nothing allocated; the controller reports why elsewhere.
    let allocated = node.ledger().map(|l| l.allocated()).unwrap_or_default();
    NodeRow {
        node: node.name_any(),
        state: node.spec.state,
        capacity: node.spec.capacity,
        allocated: allocated.into(),
        free: capacity.saturating_sub(allocated).into(),
        tenants: status
            .allocations
            .iter()
            .map(|a| a.tenant.clone())
            .collect(),
    }
}

fn tenant_row(tenant: &Tenant) -> TenantRow {
    let status = tenant.status.clone().unwrap_or_default();
    TenantRow {
        tenant: tenant.key(),
        phase: status.phase,
        node: status.node_name,
        footprint: tenant.spec.footprint().ok().map(Into::into),
        reserved: status.reserved,
        message: status.message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_show_any_use_and_never_more_than_full() {
        // 2/64 x 30 = 0.94, rounded up to 1 mark.
        assert_eq!(
            bar(2, 64),
            format!("[#{}]       2 / 64      (3%)", "-".repeat(29))
        );
        assert_eq!(
            bar(0, 64),
            format!("[{}]       0 / 64      (0%)", "-".repeat(30))
        );
        assert_eq!(
            bar(6, 4),
            format!(
                "[{}]       6 / 4       (150%) !over capacity",
                "#".repeat(30)
            )
        );
    }
}
