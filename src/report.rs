//! A fleet report: tenants (phase, node, footprint) and per-node utilisation, built from API
//! objects, rendered as text with bars, or serialised for scripts; and the consolidation report
//! (`tenant-placer plan`): the moves that would free whole nodes, and how to carry them out.
//!
//! Rules enforced here:
//! - nodes are listed in name order (as first fit sees them), tenants by namespace/name;
//! - utilisation is allocated against capacity as recorded in the Node's allocations (the source
//!   of truth), not the tenants' status;
//! - a spread tenant's replicas are shown as its status records them (`status.placements`: node,
//!   zone, replicas), and each node's zone as its zone label (the one in force) gives it;
//! - a bar never claims more than full: a node over capacity shows a full bar and a `!`;
//! - a consolidation is computed from the Nodes' ledgers (`Node::ledger`, the allocations and
//!   the effective capacity) by `placement::consolidate`, in the order it plans them; a Node
//!   whose ledger cannot be built stops it with the node and the field named; a node holding a
//!   spread tenant's replica is never one it empties (the plan knows nothing of spread, and
//!   moving that replica could put two on one node or zone);
//! - a consolidation is only printed: the way to carry it out is to drain the freed nodes.

use std::fmt::Write as _;

use kube::ResourceExt;
use placement::Dimension;
use serde::Serialize;

use crate::api::{
    Node, NodeState, ResourceAmounts, SpreadPlacement, Tenant, TenantPhase, TenantSpread,
};

/// How `tenant-placer plan` chooses its moves, as its output says it.
pub const CONSOLIDATION_RULE: &str = "BestFit consolidation, whole nodes only";

/// One tenant as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantRow {
    pub tenant: String,
    pub phase: TenantPhase,
    pub node: String,
    /// What the tenant asks for (per replica x replicas); absent when the spec cannot be used.
    pub footprint: Option<ResourceAmounts>,
    /// What it holds on its node (a spread tenant: on all its nodes).
    pub reserved: ResourceAmounts,
    pub message: String,
    /// How its replicas are spread; absent for `None` (all on `node`).
    #[serde(skip_serializing_if = "TenantSpread::is_none")]
    pub spread: TenantSpread,
    /// A spread tenant's replicas, one item per node, by node name; absent when it holds none
    /// or is not spread.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<SpreadPlacement>,
}

/// One node as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub node: String,
    pub state: NodeState,
    /// Its zone label's value; absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
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
    /// The report of these objects, each node's zone read from `zone_label`.
    pub fn new(nodes: &[Node], tenants: &[Tenant], zone_label: &str) -> Self {
        let mut node_rows: Vec<NodeRow> = nodes.iter().map(|n| node_row(n, zone_label)).collect();
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
        // As wide as the longest node name (machines bought for requests have long ones).
        let width = self
            .tenants
            .iter()
            .map(|t| t.node.chars().count())
            .max()
            .unwrap_or(0)
            .max(12);
        let _ = writeln!(
            out,
            "{:<24} {:<16} {:<width$} {:>8} {:>10} {:>11}",
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
                "{:<24} {:<16} {:<width$} {:>8} {:>10} {:>11}",
                t.tenant, t.phase, node, shown.threads, shown.memory_gb, shown.storage_gb
            );
            if !t.placements.is_empty() {
                let _ = writeln!(out, "    {}", replicas_line(t.spread, &t.placements));
            }
            if matches!(
                t.phase,
                TenantPhase::PendingCapacity | TenantPhase::Resizing | TenantPhase::Pending
            ) {
                let _ = writeln!(out, "    {}", t.message);
            }
        }
        let _ = writeln!(out, "\nNODES");
        for n in &self.nodes {
            let zone = n
                .zone
                .as_ref()
                .map(|zone| format!(", zone {zone}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{} ({:?}, {} tenants{zone})",
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

/// `replicas spread over zones: 1 on node-fsn1-1 (zone fsn1), 1 on node-hel1-1 (zone hel1)`.
fn replicas_line(spread: TenantSpread, placements: &[SpreadPlacement]) -> String {
    let over = match spread {
        TenantSpread::Zones => "zones",
        TenantSpread::Nodes | TenantSpread::None => "nodes",
    };
    let each: Vec<String> = placements
        .iter()
        .map(|p| {
            let zone = if p.zone.is_empty() {
                String::new()
            } else {
                format!(" (zone {})", p.zone)
            };
            format!("{} on {}{zone}", p.replicas, p.node)
        })
        .collect();
    format!("replicas spread over {over}: {}", each.join(", "))
}

/// One move of a consolidation as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveRow {
    /// `namespace/name`.
    pub tenant: String,
    pub uid: String,
    /// What the tenant holds, and takes along.
    pub resources: ResourceAmounts,
    pub from: String,
    pub to: String,
}

/// The moves that would empty the most nodes under BestFit, and the nodes they free: a plan
/// to read (and to carry out by draining), never executed by tenant-placer.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsolidationReport {
    /// How the moves were chosen ([`CONSOLIDATION_RULE`]).
    pub rule: &'static str,
    /// Grouped by the node they leave, in the order the plan frees the nodes.
    pub moves: Vec<MoveRow>,
    /// The nodes that would hold nothing after the moves.
    pub freed: Vec<String>,
    /// Nodes holding at least one reservation now.
    pub nodes_in_use: usize,
    /// Nodes holding at least one reservation after the moves.
    pub nodes_in_use_after: usize,
    /// One command per freed node that carries the plan out: drain it.
    pub drain_commands: Vec<String>,
}

/// The Nodes as placement sees them, or which node cannot be read and why.
pub fn ledgers_of(nodes: &[Node]) -> Result<Vec<placement::NodeLedger>, String> {
    nodes
        .iter()
        .map(|node| {
            node.ledger()
                .map_err(|error| format!("node {} cannot be planned: {error}", node.name_any()))
        })
        .collect()
}

/// The command that drains a node: `kubectl patch pnode <name> --type merge -p …`.
pub fn drain_command(node: &str) -> String {
    format!(r#"kubectl patch pnode {node} --type merge -p '{{"spec":{{"state":"Draining"}}}}'"#)
}

impl ConsolidationReport {
    /// The consolidation of these Nodes, each tenant going only to a node carrying its node
    /// selector's labels (`tenants` give the selectors), or which node cannot be read and why.
    pub fn new(nodes: &[Node], tenants: &[Tenant]) -> Result<Self, String> {
        let ledgers = ledgers_of(nodes)?;
        let selectors = crate::api::selectors_by_uid(tenants);
        // NB: a spread replica's entry carries its replica count; its node stays as it is.
        let holds_no_replica = |ledger: &placement::NodeLedger| {
            (!ledger.entries().iter().any(|e| e.replicas.is_some())).then_some(0)
        };
        let consolidation = placement::consolidate_for(&ledgers, holds_no_replica, |entry| {
            selectors.get(&*entry.uid).copied()
        });
        let nodes_in_use = ledgers.iter().filter(|l| !l.entries().is_empty()).count();
        Ok(ConsolidationReport {
            rule: CONSOLIDATION_RULE,
            moves: consolidation
                .moves
                .into_iter()
                .map(|m| MoveRow {
                    tenant: m.tenant,
                    uid: m.uid,
                    resources: m.resources.into(),
                    from: m.from,
                    to: m.to,
                })
                .collect(),
            nodes_in_use,
            nodes_in_use_after: nodes_in_use.saturating_sub(consolidation.freed.len()),
            drain_commands: consolidation
                .freed
                .iter()
                .map(|node| drain_command(node))
                .collect(),
            freed: consolidation.freed,
        })
    }

    /// The moves as a table, the freed nodes, and the commands that carry it out.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "REBALANCE PLAN ({CONSOLIDATION_RULE}; nothing is executed)"
        );
        if self.freed.is_empty() {
            let _ = writeln!(
                out,
                "\nNo node can be freed: no Online node's tenants all fit on the other nodes in \
                 use ({} in use).",
                self.nodes_in_use
            );
            return out;
        }
        let _ = writeln!(out, "\nMOVES");
        let _ = writeln!(
            out,
            "{:<24} {:>8} {:>10} {:>11}  {:<12} TO",
            "TENANT", "THREADS", "MEMORY-GB", "STORAGE-GB", "FROM"
        );
        for m in &self.moves {
            let _ = writeln!(
                out,
                "{:<24} {:>8} {:>10} {:>11}  {:<12} {}",
                m.tenant,
                m.resources.threads,
                m.resources.memory_gb,
                m.resources.storage_gb,
                m.from,
                m.to
            );
        }
        let _ = writeln!(
            out,
            "\nFREED: {} ({} of {} nodes in use would hold nothing; {} after the moves)",
            self.freed.join(", "),
            self.freed.len(),
            self.nodes_in_use,
            self.nodes_in_use_after
        );
        let _ = writeln!(
            out,
            "\nTo carry it out, drain the freed nodes (the controller moves their tenants):"
        );
        for command in &self.drain_commands {
            let _ = writeln!(out, "  {command}");
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

fn node_row(node: &Node, zone_label: &str) -> NodeRow {
    let status = node.status.clone().unwrap_or_default();
    let capacity = node.spec.capacity.to_resources().unwrap_or_default();
    // An unreadable node shows nothing allocated; the controller reports why elsewhere.
    let allocated = node.ledger().map(|l| l.allocated()).unwrap_or_default();
    NodeRow {
        node: node.name_any(),
        state: node.spec.state,
        zone: node.labels().get(zone_label).cloned(),
        capacity: node.spec.capacity,
        allocated: allocated.into(),
        free: capacity.saturating_sub(allocated).into(),
        tenants: status
            .allocations
            .iter()
            .map(|a| a.tenant.to_string())
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
        spread: tenant.spec.spread,
        placements: status.placements,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::testing::{node, tenant};

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

    #[test]
    fn a_consolidation_report_lists_the_moves_the_freed_nodes_and_how_to_drain_them() {
        // a holds 1 of 8 threads, b 6: a's tenant fits b (8 − 6 = 2 free), so a is freed.
        // c is empty and stays out of it; d is Cordoned and keeps its tenant.
        let nodes = [
            node("a")
                .capacity(8, 32, 100)
                .holding("web", (1, 4, 10))
                .build(),
            node("b")
                .capacity(8, 32, 100)
                .holding("db", (6, 8, 10))
                .build(),
            node("c").capacity(8, 32, 100).build(),
            node("d")
                .capacity(8, 32, 100)
                .state(NodeState::Cordoned)
                .holding("old", (1, 1, 1))
                .build(),
        ];
        let report = ConsolidationReport::new(&nodes, &[]).unwrap();
        assert_eq!(
            report.moves,
            [MoveRow {
                tenant: "default/web".into(),
                uid: "uid-web".into(),
                resources: ResourceAmounts::new(1, 4, 10),
                from: "a".into(),
                to: "b".into(),
            }]
        );
        assert_eq!(report.freed, ["a"]);
        // a, b and d hold something; a would not.
        assert_eq!((report.nodes_in_use, report.nodes_in_use_after), (3, 2));
        let text = report.render_text();
        assert!(
            text.contains(
                "default/web                     1          4          10  a            b"
            ),
            "{text}"
        );
        assert!(
            text.contains("FREED: a (1 of 3 nodes in use would hold nothing; 2 after the moves)"),
            "{text}"
        );
        assert!(
            text.contains(
                r#"  kubectl patch pnode a --type merge -p '{"spec":{"state":"Draining"}}'"#
            ),
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["moves"][0]["resources"]["memoryGb"], 4);
        assert_eq!(json["drainCommands"][0], drain_command("a"));
    }

    #[test]
    fn a_fleet_with_nothing_to_free_says_so_and_names_no_command() {
        let nodes = [
            node("a")
                .capacity(8, 32, 100)
                .holding("web", (4, 4, 10))
                .build(),
            node("b")
                .capacity(8, 32, 100)
                .holding("db", (6, 8, 10))
                .build(),
        ];
        let report = ConsolidationReport::new(&nodes, &[]).unwrap();
        assert!(report.moves.is_empty() && report.drain_commands.is_empty());
        assert!(
            report.render_text().contains("No node can be freed"),
            "{}",
            report.render_text()
        );
    }

    /// Three nodes in zones fsn1, hel1 and nbg1 (by `zone_label`), each holding one replica of
    /// `db` (2, 4, 20 per replica), and `db` spread over them as its status records it.
    fn db_over_three_zones(zone_label: &str) -> (Vec<Node>, Tenant) {
        let zones = ["fsn1", "hel1", "nbg1"];
        let nodes = zones
            .map(|zone| {
                node(&format!("node-{zone}"))
                    .capacity(8, 32, 100)
                    .label(zone_label, zone)
                    .holding_replicas("db", (2, 4, 20), 1)
                    .build()
            })
            .to_vec();
        let db = tenant("db")
            .resources(2, 4, 20)
            .spread(TenantSpread::Zones, 3)
            .phase(TenantPhase::Active)
            .on("node-fsn1")
            .reserved(6, 12, 60)
            .placements(&[
                ("node-fsn1", "fsn1", 1),
                ("node-hel1", "hel1", 1),
                ("node-nbg1", "nbg1", 1),
            ])
            .build();
        (nodes, db)
    }

    #[test]
    fn a_spread_tenant_shows_each_replica_with_its_node_and_zone() {
        let (nodes, db) = db_over_three_zones("example.com/rack");
        let report = FleetReport::new(&nodes, &[db], "example.com/rack");
        let text = report.render_text();
        assert!(
            text.contains(
                "    replicas spread over zones: 1 on node-fsn1 (zone fsn1), 1 on node-hel1 \
                 (zone hel1), 1 on node-nbg1 (zone nbg1)"
            ),
            "{text}"
        );
        assert!(
            text.contains("node-hel1 (Online, 1 tenants, zone hel1)"),
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["tenants"][0]["spread"], "Zones");
        assert_eq!(
            json["tenants"][0]["placements"][2],
            serde_json::json!({"node": "node-nbg1", "zone": "nbg1", "replicas": 1})
        );
        assert_eq!(json["nodes"][0]["zone"], "fsn1");
        // Another label in force: the nodes have no zone, and say none.
        let other = FleetReport::new(&nodes, &[], crate::api::ZONE_LABEL);
        assert!(other.nodes.iter().all(|n| n.zone.is_none()));
        assert!(
            !other.render_text().contains("zone"),
            "{}",
            other.render_text()
        );
    }

    #[test]
    fn the_plan_never_empties_a_node_holding_a_spread_replica() {
        // Each node holds one 2-thread replica of db in 8 threads: any two would fit on the
        // third (2 + 2 + 2 = 6 of 8), putting replicas on one node and zone; so nothing is freed.
        let (nodes, db) = db_over_three_zones(crate::api::ZONE_LABEL);
        let report = ConsolidationReport::new(&nodes, &[db]).unwrap();
        assert!(report.moves.is_empty(), "{:?}", report.moves);
        assert!(report.freed.is_empty(), "{:?}", report.freed);
        // Without the replica counts the same entries are movable, and two nodes are freed.
        let unspread: Vec<Node> = nodes
            .into_iter()
            .map(|mut n| {
                for e in n.status.iter_mut().flat_map(|s| s.allocations.iter_mut()) {
                    e.replicas = None;
                }
                n
            })
            .collect();
        assert_eq!(
            ConsolidationReport::new(&unspread, &[])
                .unwrap()
                .freed
                .len(),
            2
        );
    }

    #[test]
    fn a_node_whose_ledger_cannot_be_built_stops_the_plan_with_its_name() {
        let mut bad = node("bad").capacity(8, 32, 100).build();
        bad.spec.capacity.threads = -1;
        let error = ConsolidationReport::new(&[bad], &[]).unwrap_err();
        assert!(
            error.starts_with("node bad cannot be planned: spec.capacity.threads"),
            "{error}"
        );
    }
}
