//! The forecast: what consolidation and make-room would do to a fleet now, under the flags
//! given: the report `plan` prints after its rebalance plan. Computed with the controller's own
//! pure decisions (`controller::consolidation::decide`, `controller::make_room::decide`), never
//! executed.
//!
//! Rules enforced here:
//! - consolidation is decided as the controller's next look would, with every freeable node
//!   taken as freeable for long enough (`--consolidate-after-seconds` already past), the
//!   windows as they are now, the budget over the fleet's nodes, and the nodes consolidation is
//!   emptying (Draining with its mark) counted against it;
//! - make-room is decided for the tenants waiting for their first placement (`PendingCapacity`
//!   without a reservation), oldest first, with no order in force and the budget left after
//!   consolidation's drains; a waiter no room can be made for would get a machine, when a
//!   NodeClass can carry it;
//! - the monthly saving is the sum of the classes' `monthlyCost` of the nodes drained.

use std::collections::HashSet;
use std::fmt::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::api::{NODE_REQUEST_LABEL, Node, NodeClass, Tenant, TenantPhase};
use crate::controller::Settings;
use crate::controller::consolidation::{self, ConsolidationPolicy, Controls};
use crate::controller::disruption::open;
use crate::controller::make_room;

/// The report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    /// `--consolidation` in force.
    pub consolidation: String,
    /// `--make-room-moves` in force.
    pub make_room_moves: u16,
    /// Nodes consolidation would drain now, the most expensive first, with their monthly cost.
    pub drain: Vec<(String, u64)>,
    /// The sum of their monthly costs.
    pub saving_monthly: u64,
    /// Nodes the plan could free that would be kept, and why.
    pub kept: Vec<(String, &'static str)>,
    /// Room that would be made, oldest waiter first.
    pub rooms: Vec<RoomRow>,
    /// Waiters room could be made for but not now, and why.
    pub rooms_blocked: Vec<(String, &'static str)>,
    /// Waiters no room can be made for with at most `--make-room-moves` moves.
    pub no_room: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoomRow {
    pub waiter: String,
    pub node: String,
    /// (tenant, the node it moves to), by tenant.
    pub moves: Vec<(String, String)>,
}

impl Forecast {
    /// The plan for these objects under `settings`, or which node cannot be read and why.
    pub fn new(
        nodes: &[Node],
        tenants: &[Tenant],
        classes: &[NodeClass],
        settings: &Settings,
        now: Timestamp,
    ) -> Result<Self, String> {
        let ledgers = crate::report::ledgers_of(nodes)?;
        let nodes: Vec<Arc<Node>> = nodes.iter().cloned().map(Arc::new).collect();
        let tenants: Vec<Arc<Tenant>> = tenants.iter().cloned().map(Arc::new).collect();
        let classes: Vec<Arc<NodeClass>> = classes.iter().cloned().map(Arc::new).collect();
        let window_open = open(&settings.disruption_schedule, now);
        let allowed = settings.disruption_budget.allowed(nodes.len());
        let mut waiters: Vec<&Arc<Tenant>> = tenants
            .iter()
            .filter(|t| {
                t.status.as_ref().is_some_and(|s| {
                    s.phase == TenantPhase::PendingCapacity && s.node_name.is_empty()
                }) && !t.spec.suspend
            })
            .collect();
        waiters.sort_by(|a, b| {
            let created = |t: &Tenant| t.metadata.creation_timestamp.as_ref().map(|c| c.0);
            (created(a), a.key()).cmp(&(created(b), b.key()))
        });

        let cost = consolidation::class_costs(&classes);
        let kept_by = consolidation::kept_by_tenants(&tenants);
        let candidates =
            consolidation::candidates(&nodes, &kept_by, &cost, &HashSet::new(), |node| {
                kube::ResourceExt::labels(node).contains_key(NODE_REQUEST_LABEL)
            });
        let controls = Controls {
            mode: settings.consolidation,
            registered: settings.consolidate_registered,
            after: settings.consolidate_after,
            allowed,
            window_open,
            waiting: !waiters.is_empty(),
        };
        let selectors = crate::api::selectors_by_uid(tenants.iter().map(AsRef::as_ref));
        let selector = |entry: &placement::Entry| selectors.get(&*entry.uid).copied();
        let decision = consolidation::decide(
            &ledgers,
            &candidates,
            |_| Duration::MAX,
            &controls,
            selector,
        );
        let cost_of = |name: &str| candidates.get(name).map_or(0, |c| c.monthly_cost);
        let drain: Vec<(String, u64)> = decision
            .drain
            .iter()
            .map(|n| (n.clone(), cost_of(n)))
            .collect();
        let emptying = candidates
            .values()
            .filter(|c| c.consolidating)
            .count()
            .saturating_add(drain.len());

        let waiting: HashSet<&str> = waiters
            .iter()
            .filter_map(|t| t.metadata.uid.as_deref())
            .collect();
        let movers: std::collections::HashMap<&str, Option<&placement::Labels>> = tenants
            .iter()
            .filter_map(|t| Some((t.metadata.uid.as_deref()?, t)))
            .filter(|(uid, t)| !waiting.contains(uid) && make_room::may_move(t))
            .map(|(uid, t)| (uid, t.spec.selector()))
            .collect();
        let room_waiters: Vec<make_room::Waiter> = waiters
            .iter()
            .filter_map(|t| {
                Some(make_room::Waiter {
                    uid: t.metadata.uid.clone()?,
                    key: t.key(),
                    footprint: t.spec.footprint().ok()?,
                    selector: t.spec.selector().cloned(),
                })
            })
            .collect();
        let room_controls = make_room::Controls {
            max_moves: usize::from(settings.make_room_moves),
            allowed,
            emptying,
            window_open,
        };
        let rooms = make_room::decide::decide(
            &ledgers,
            &room_waiters,
            &[],
            |entry: &placement::Entry| movers.get(&*entry.uid).copied(),
            &room_controls,
            Instant::now(),
        );
        let no_room = room_waiters
            .iter()
            .filter(|w| !rooms.orders.iter().any(|o| o.uid == w.uid))
            .filter(|w| !rooms.blocked.iter().any(|(key, _)| *key == w.key))
            .map(|w| w.key.clone())
            .collect();
        Ok(Forecast {
            consolidation: format!("{:?}", settings.consolidation),
            make_room_moves: settings.make_room_moves,
            saving_monthly: drain.iter().map(|(_, c)| *c).fold(0, u64::saturating_add),
            drain,
            kept: decision
                .blocked
                .iter()
                .map(|(node, why)| (node.clone(), why.words()))
                .collect(),
            rooms: rooms
                .orders
                .iter()
                .map(|o| {
                    let mut moves: Vec<(String, String)> = o
                        .moves
                        .iter()
                        .map(|m| (m.tenant.clone(), m.to.clone()))
                        .collect();
                    moves.sort();
                    RoomRow {
                        waiter: o.waiter.clone(),
                        node: o.host.clone(),
                        moves,
                    }
                })
                .collect(),
            rooms_blocked: rooms
                .blocked
                .iter()
                .map(|(waiter, why)| {
                    let words = match why {
                        make_room::RoomBlocked::Window => consolidation::Blocked::Window.words(),
                        make_room::RoomBlocked::Budget => consolidation::Blocked::Budget.words(),
                    };
                    (waiter.clone(), words)
                })
                .collect(),
            no_room,
        })
    }

    /// The report as text.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "CONSOLIDATION (--consolidation {}; nothing is executed)",
            self.consolidation
        );
        if self.consolidation != format!("{:?}", ConsolidationPolicy::WhenUnderutilized) {
            let _ = writeln!(
                out,
                "  off: only --consolidation WhenUnderutilized drains nodes to hand them back"
            );
        } else if self.drain.is_empty() && self.kept.is_empty() {
            let _ = writeln!(out, "  no node it may hand back can be freed now");
        }
        for (node, cost) in &self.drain {
            let _ = writeln!(out, "  drain {node} (saves {cost} a month)");
        }
        for (node, why) in &self.kept {
            let _ = writeln!(out, "  keep  {node}: {why}");
        }
        if !self.drain.is_empty() {
            let _ = writeln!(out, "  monthly cost saved: {}", self.saving_monthly);
        }
        let _ = writeln!(
            out,
            "\nMAKE ROOM (--make-room-moves {}; nothing is executed)",
            self.make_room_moves
        );
        if self.rooms.is_empty() && self.rooms_blocked.is_empty() && self.no_room.is_empty() {
            let _ = writeln!(out, "  no tenant waits for its first placement");
        }
        for room in &self.rooms {
            let moves: Vec<String> = room
                .moves
                .iter()
                .map(|(tenant, to)| format!("{tenant} to {to}"))
                .collect();
            let _ = writeln!(
                out,
                "  {}: room on {} by moving {}",
                room.waiter,
                room.node,
                moves.join(", ")
            );
        }
        for (waiter, why) in &self.rooms_blocked {
            let _ = writeln!(out, "  {waiter}: room could be made, not now: {why}");
        }
        for waiter in &self.no_room {
            let _ = writeln!(
                out,
                "  {waiter}: no room with at most {} moves (a machine is bought when a NodeClass \
                 can carry it)",
                self.make_room_moves
            );
        }
        out
    }
}
