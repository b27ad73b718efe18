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
//! - a node drains when its `spec.state` is `Draining` or it is being deleted (placement sees both
//!   as `Draining`); its `Drained` condition is shown as it carries it, never guessed;
//! - a move is in flight while the tenant's status records it (`status.migration`); it is shown
//!   on both nodes (moving to, moving from) and in `moves`, by namespace/name, carrying the
//!   entry as held (the target's entry, else the source's);
//! - a tenant that cannot leave its draining node is one whose Placed condition says
//!   `MigrationBlocked` (as the waiting room and the gauge read it); `blocked` lists them oldest
//!   first, with the shortfall of what it holds against the nodes that take new tenants;
//! - waiting tenants (PendingCapacity, Resizing) oldest first by creationTimestamp, then by
//!   namespace/name, each with its status message and the shortfall computed with the placement
//!   crate: against the largest free amount among the nodes that take new tenants, or, for a
//!   resize, against the room on its own node counting its own reservation;
//! - a node's zone is the value of the zone label in force (`--zone-label`, else
//!   `topology.kubernetes.io/zone`), null when it has none; a spread tenant's replicas are listed
//!   as its status records them (`status.placements`), each with its node's zone, and each entry
//!   says how many replicas it holds;
//! - sums saturate; nothing here panics on a hand-edited object.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kube::ResourceExt;
use placement::{Dimension, NodeLedger, Resources, Shortfall};
use serde::Serialize;

use crate::api::{
    DRAINED_CONDITION, Node, NodeRequest, NodeRequestPhase, NodeState, OVER_CAPACITY_CONDITION,
    ResourceAmounts, SpreadPlacement, Tenant, TenantPhase, TenantSpread,
};

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
    /// When false, `totals` is null, `nodes`, `waiting`, `moves` and `blocked` are empty, and
    /// `message` says why.
    pub live: bool,
    /// This replica's role: `leading`, `standby` or `starting`.
    pub role: &'static str,
    /// Why the numbers are not live; empty when they are.
    pub message: String,
    pub policy: PolicyView,
    pub totals: Option<Totals>,
    pub nodes: Vec<NodeRow>,
    pub waiting: Vec<WaitingTenant>,
    /// Moves in flight off draining nodes, by tenant (namespace/name).
    pub moves: Vec<MoveView>,
    /// Machines asked for (NodeRequests), oldest first; empty when node requests are off.
    pub requests: Vec<RequestView>,
    /// Tenants on a draining node that no other node can take now, oldest first.
    pub blocked: Vec<BlockedMove>,
    /// Tenants whose replicas are spread over nodes or zones, by namespace/name, with where each
    /// replica is.
    pub spread: Vec<SpreadTenant>,
    /// Consolidation and make-room: what is consolidated and what it saves, what is kept and
    /// why, the room being made for waiting tenants. Empty when the numbers are not live.
    // NB: `/api/fleet` names it `disruption` (its readers rely on the name).
    #[serde(rename = "disruption")]
    pub capacity: super::capacity::CapacityView,
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
    /// By `spec.state`: Online, Cordoned, Offline and Draining, each present (0 when none). A
    /// node being deleted counts under its spec state here and in `drainingNodes`.
    pub nodes_by_state: BTreeMap<String, usize>,
    /// Nodes draining: `spec.state: Draining`, or being deleted.
    pub draining_nodes: usize,
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
    /// Tenants reserved on two nodes while they move off a draining one (`moves`).
    pub moves_in_flight: usize,
    /// Tenants on a draining node that no other node can take now (`blocked`).
    pub blocked_moves: usize,
}

/// One node, as first fit sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub name: String,
    pub state: NodeState,
    /// Its zone: the value of the zone label in force; null when it carries none.
    pub zone: Option<String>,
    /// Online and not over capacity: placement may choose it for a new reservation.
    pub takes_new_tenants: bool,
    /// True while it drains (`spec.state: Draining`, or being deleted): it takes no new tenants
    /// and its tenants are moved to other nodes, make-before-break.
    pub draining: bool,
    /// True while it is being deleted (a deletionTimestamp): it drains, then goes.
    pub being_deleted: bool,
    /// Its `Drained` condition; null when it carries none (a node carries one while it drains,
    /// once the controller has written its status since the drain began).
    pub drained: Option<DrainedView>,
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
    /// How many of a spread tenant's replicas it holds; null for a tenant not spread (all its
    /// replicas are here).
    pub replicas: Option<u32>,
    /// The tenant's phase; null when the tenant is not in the cache (an orphan being released).
    pub phase: Option<TenantPhase>,
    /// While it moves off this node: the node it goes to; null otherwise.
    pub moving_to: Option<String>,
    /// While it moves onto this node: the node it leaves; null otherwise.
    pub moving_from: Option<String>,
    /// True when it cannot leave this draining node now: no other node can take it
    /// (`MigrationBlocked`).
    pub move_blocked: bool,
}

/// A node's `Drained` condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainedView {
    /// `True` once it holds no reservations, `False` while tenants remain.
    pub status: String,
    /// `Empty` or `TenantsRemain`.
    pub reason: String,
    /// Whom it still holds, or that it holds nothing and can go.
    pub message: String,
}

/// A move in flight: the tenant is reserved on both nodes until the move completes (the source
/// entry is then released).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveView {
    /// namespace/name.
    pub tenant: String,
    /// The node it leaves (draining, or being deleted).
    pub from: String,
    /// The node it goes to.
    pub to: String,
    /// What moves: the entry as held on `to`, else on `from`, else what its status says it holds
    /// (per replica x replicas).
    pub resources: ResourceAmounts,
}

/// A tenant whose replicas are spread over nodes (`spread: Nodes`) or zones (`Zones`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpreadTenant {
    /// namespace/name.
    pub tenant: String,
    pub spread: TenantSpread,
    pub phase: TenantPhase,
    /// The replicas it asks for.
    pub replicas: i32,
    /// Where its replicas are, one item per node by node name, as its status records them;
    /// empty while it holds none (placed all or none).
    pub placements: Vec<SpreadPlacement>,
}

/// A machine asked for a provisioner (a NodeRequest): for which tenants, and where it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestView {
    pub name: String,
    /// The NodeClass asked for.
    pub class: String,
    /// Pending, Provisioning, Ready or Failed (the provisioner's word).
    pub phase: NodeRequestPhase,
    /// The Node made for it, once Ready; empty before.
    pub node: String,
    /// The tenants (namespace/name) it is for.
    pub tenants: Vec<String>,
    pub capacity: ResourceAmounts,
    /// The provisioner's message.
    pub message: String,
}

/// The requests, oldest first (then by name).
pub fn requests(requests: &[Arc<NodeRequest>]) -> Vec<RequestView> {
    let mut sorted: Vec<&NodeRequest> = requests.iter().map(AsRef::as_ref).collect();
    sorted.sort_by(|a, b| {
        let created = |r: &NodeRequest| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (created(a), a.name_any()).cmp(&(created(b), b.name_any()))
    });
    sorted
        .into_iter()
        .map(|request| RequestView {
            name: request.name_any(),
            class: request.spec.node_class.clone(),
            phase: request.phase(),
            node: request
                .status
                .as_ref()
                .map(|s| s.node_name.clone())
                .unwrap_or_default(),
            tenants: request.spec.tenants.clone(),
            capacity: request.spec.capacity,
            message: request
                .status
                .as_ref()
                .map(|s| s.message.clone())
                .unwrap_or_default(),
        })
        .collect()
}

/// A tenant held on a draining node that no other node can take now (its Placed condition's
/// reason is `MigrationBlocked`). It keeps its reservation and moves when room appears.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedMove {
    /// namespace/name.
    pub tenant: String,
    /// Active, or Suspended (a suspended tenant keeps its reservation and moves like any other).
    pub phase: TenantPhase,
    /// The draining node it stays on.
    pub node: String,
    /// metadata.creationTimestamp (RFC 3339), the order of the list.
    pub created_at: Option<String>,
    /// What it holds there and needs elsewhere: its entry on `node`, else what its status says.
    pub reserved: ResourceAmounts,
    /// The tenant's status message (it says why it cannot move).
    pub message: String,
    /// What it holds against the most free room on the nodes that take new tenants; null when
    /// the amounts cannot be read.
    pub shortfall: Option<ShortfallView>,
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

/// What moves a placed tenant besides a drain, as the controller was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moves {
    /// At most this many tenants move to make room for one waiting tenant (`--make-room-moves`,
    /// with the purchase look on); 0: none.
    pub make_room: u16,
    /// Consolidation empties underused nodes by moving their tenants
    /// (`--consolidation WhenUnderutilized`, with the purchase look on).
    pub consolidation: bool,
}

impl Moves {
    /// What moves a placed tenant: the end of a policy's sentence.
    fn clause(self) -> String {
        let room = match self.make_room {
            0 => None,
            n => Some(format!(
                "to make room for a waiting tenant that fits nowhere (at most {n} moved for it)"
            )),
        };
        let consolidation = self
            .consolidation
            .then_some("to empty an underused node for consolidation");
        match (room, consolidation) {
            (None, None) => {
                "nothing placed is moved (no rebalancing), except off a draining node: \
                             its tenants go to other nodes by this same rule, make-before-break."
                    .to_owned()
            }
            (Some(room), None) => format!(
                "a placed tenant moves only off a draining node or {room}, make-before-break."
            ),
            (None, Some(consolidation)) => format!(
                "a placed tenant moves only off a draining node or {consolidation}, \
                 make-before-break."
            ),
            (Some(room), Some(consolidation)) => format!(
                "a placed tenant moves only off a draining node, {room}, or {consolidation}, \
                 make-before-break."
            ),
        }
    }
}

/// The rule of a placement policy in one honest sentence, with what moves a placed tenant.
pub fn policy_rule(policy: placement::Policy, moves: Moves) -> String {
    use placement::Policy;
    let moves = moves.clause();
    match policy {
        Policy::FirstFit => format!(
            "Each tenant goes to the first Online node, by name, with room in all three \
             dimensions (threads, memory, storage); {moves}"
        ),
        Policy::BestFit => format!(
            "Each tenant goes to the Online node with room in all three dimensions that it leaves \
             fullest (least room left, each dimension as a share of the node's capacity; ties go \
             to the first name), packing tenants tightly; {moves}"
        ),
        Policy::LeastLoaded => format!(
            "Each tenant goes to the Online node with room in all three dimensions that has the \
             most room left after placing it (each dimension as a share of the node's capacity; \
             ties go to the first name), spreading tenants out; {moves}"
        ),
        Policy::RoundRobin => format!(
            "Tenants take turns over the Online nodes in name order: each goes to the first node \
             with room in all three dimensions, starting from the next node in turn and wrapping \
             around; {moves}"
        ),
    }
}

/// The live lists of the view (with [`Totals`], what [`fleet_rows`] answers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetRows {
    pub nodes: Vec<NodeRow>,
    pub waiting: Vec<WaitingTenant>,
    pub moves: Vec<MoveView>,
    pub blocked: Vec<BlockedMove>,
    pub spread: Vec<SpreadTenant>,
}

/// The live part of the view: totals, nodes (each zone read from `zone_label`), waiting
/// tenants, moves in flight, blocked moves and spread tenants.
pub fn fleet_rows(
    nodes: &[Arc<Node>],
    tenants: &[Arc<Tenant>],
    zone_label: &str,
) -> (Totals, FleetRows) {
    let mut sorted: Vec<&Node> = nodes.iter().map(AsRef::as_ref).collect();
    sorted.sort_by_key(|n| n.name_any());
    let ledgers: Vec<(&Node, Result<NodeLedger, String>)> =
        sorted.iter().map(|n| (*n, n.ledger())).collect();
    let by_uid: HashMap<String, &Tenant> = tenants
        .iter()
        .filter_map(|t| Some((t.uid()?, t.as_ref())))
        .collect();

    let rows: Vec<NodeRow> = ledgers
        .iter()
        .map(|(node, ledger)| node_row(node, ledger.as_ref(), &by_uid, zone_label))
        .collect();
    let readable: Vec<&NodeLedger> = ledgers
        .iter()
        .filter_map(|(_, l)| l.as_ref().ok())
        .collect();

    let waiting = oldest_first(
        tenants
            .iter()
            .filter(|t| {
                matches!(
                    phase_of(t),
                    TenantPhase::PendingCapacity | TenantPhase::Resizing
                )
            })
            .map(|t| (t.as_ref(), waiting_tenant(t, &readable))),
        |w| &w.tenant,
    );
    let blocked = oldest_first(
        tenants
            .iter()
            .filter(|t| t.is_blocked_move())
            .map(|t| (t.as_ref(), blocked_move(t, &readable))),
        |b| &b.tenant,
    );
    let mut moves: Vec<MoveView> = tenants
        .iter()
        .filter_map(|t| move_view(t, &readable))
        .collect();
    moves.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    let mut spread: Vec<SpreadTenant> = tenants
        .iter()
        .filter(|t| !t.spec.spread.is_none())
        .map(|t| spread_tenant(t))
        .collect();
    spread.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    let totals = totals(&rows, tenants, waiting.len(), moves.len(), blocked.len());
    (
        totals,
        FleetRows {
            nodes: rows,
            waiting,
            moves,
            blocked,
            spread,
        },
    )
}

fn spread_tenant(tenant: &Tenant) -> SpreadTenant {
    let status = tenant.status.as_ref();
    SpreadTenant {
        tenant: tenant.key(),
        spread: tenant.spec.spread,
        phase: phase_of(tenant),
        replicas: tenant.spec.effective_replicas(),
        placements: status.map(|s| s.placements.clone()).unwrap_or_default(),
    }
}

/// The queue's order: oldest first by creationTimestamp, then by namespace/name.
fn oldest_first<'t, R>(
    items: impl Iterator<Item = (&'t Tenant, R)>,
    key: impl Fn(&R) -> &String,
) -> Vec<R> {
    let mut items: Vec<(&Tenant, R)> = items.collect();
    items.sort_by(|(a, ra), (b, rb)| {
        let created = |t: &Tenant| t.metadata.creation_timestamp.as_ref().map(|c| c.0);
        // A tenant without a creationTimestamp (none from a real API server) goes last.
        let order = |t: &Tenant| (created(t).is_none(), created(t));
        order(a).cmp(&order(b)).then_with(|| key(ra).cmp(key(rb)))
    });
    items.into_iter().map(|(_, r)| r).collect()
}

fn phase_of(tenant: &Tenant) -> TenantPhase {
    tenant.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn created_at(tenant: &Tenant) -> Option<String> {
    tenant
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
}

fn node_row(
    node: &Node,
    ledger: Result<&NodeLedger, &String>,
    tenants: &HashMap<String, &Tenant>,
    zone_label: &str,
) -> NodeRow {
    let name = node.name_any();
    let zone = node.labels().get(zone_label).cloned();
    let capacity = node.spec.capacity;
    let conditions = node
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let condition = conditions
        .iter()
        .find(|c| c.type_ == OVER_CAPACITY_CONDITION && c.status == "True");
    let drained = conditions
        .iter()
        .find(|c| c.type_ == DRAINED_CONDITION)
        .map(|c| DrainedView {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        });
    let draining = node.placement_state() == placement::NodeState::Draining;
    let being_deleted = node.metadata.deletion_timestamp.is_some();
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
            let mut held: Vec<NodeTenant> = ledger
                .entries()
                .iter()
                .map(|e| {
                    let tenant = tenants.get(&*e.uid);
                    let status = tenant.and_then(|t| t.status.as_ref());
                    let migration = status.and_then(|s| s.migration.as_ref());
                    NodeTenant {
                        tenant: e.tenant.to_string(),
                        uid: e.uid.to_string(),
                        resources: e.resources.into(),
                        replicas: e.replicas,
                        phase: tenant.map(|t| phase_of(t)),
                        moving_to: migration.filter(|m| m.from == name).map(|m| m.to.clone()),
                        moving_from: migration.filter(|m| m.to == name).map(|m| m.from.clone()),
                        move_blocked: tenant.is_some_and(|t| {
                            t.is_blocked_move() && status.is_some_and(|s| s.node_name == name)
                        }),
                    }
                })
                .collect();
            held.sort_by(|a, b| a.tenant.cmp(&b.tenant).then_with(|| a.uid.cmp(&b.uid)));
            NodeRow {
                name,
                state: node.spec.state,
                zone,
                takes_new_tenants: view.takes_new_tenants(),
                draining,
                being_deleted,
                drained,
                capacity,
                allocated: allocated.into(),
                free: cap.saturating_sub(allocated).into(),
                over_capacity,
                over_capacity_message,
                error: None,
                tenants: held,
            }
        }
        Err(error) => NodeRow {
            name,
            state: node.spec.state,
            zone,
            takes_new_tenants: false,
            draining,
            being_deleted,
            drained,
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

/// The entry `node` holds for the tenant, if that node is readable and holds one.
fn held_on(tenant: &Tenant, node: &str, ledgers: &[&NodeLedger]) -> Option<Resources> {
    let uid = tenant.uid()?;
    let ledger = ledgers.iter().find(|l| l.name() == node)?;
    ledger.entry_of(&uid).map(|e| e.resources)
}

fn move_view(tenant: &Tenant, ledgers: &[&NodeLedger]) -> Option<MoveView> {
    let status = tenant.status.as_ref()?;
    let migration = status.migration.as_ref()?;
    let resources = held_on(tenant, &migration.to, ledgers)
        .or_else(|| held_on(tenant, &migration.from, ledgers))
        .map_or(status.reserved, Into::into);
    Some(MoveView {
        tenant: tenant.key(),
        from: migration.from.clone(),
        to: migration.to.clone(),
        resources,
    })
}

fn blocked_move(tenant: &Tenant, ledgers: &[&NodeLedger]) -> BlockedMove {
    let status = tenant.status.clone().unwrap_or_default();
    let held = held_on(tenant, &status.node_name, ledgers).or(status.reserved.to_resources().ok());
    BlockedMove {
        tenant: tenant.key(),
        phase: status.phase,
        created_at: created_at(tenant),
        reserved: held.map_or(status.reserved, Into::into),
        message: status.message,
        shortfall: held.map(|held| eligible_shortfall(held, ledgers)),
        node: status.node_name,
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
        created_at: created_at(tenant),
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

fn totals(
    rows: &[NodeRow],
    tenants: &[Arc<Tenant>],
    waiting: usize,
    moves_in_flight: usize,
    blocked_moves: usize,
) -> Totals {
    let mut nodes_by_state: BTreeMap<String, usize> = ["Online", "Cordoned", "Offline", "Draining"]
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
        draining_nodes: rows.iter().filter(|r| r.draining).count(),
        over_capacity_nodes: rows.iter().filter(|r| r.over_capacity).count(),
        unreadable_nodes: rows.iter().filter(|r| r.error.is_some()).count(),
        capacity: amounts(capacity),
        allocated: amounts(allocated),
        free: amounts(free),
        placeable: amounts(placeable),
        tenants: tenants.len(),
        tenants_by_phase,
        waiting,
        moves_in_flight,
        blocked_moves,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::api::ZONE_LABEL;
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
        let (
            totals,
            FleetRows {
                nodes: rows,
                waiting,
                ..
            },
        ) = fleet_rows(&nodes, &tenants, ZONE_LABEL);
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
        let (totals, FleetRows { waiting, .. }) = fleet_rows(&nodes, &tenants, ZONE_LABEL);
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
        let (_, FleetRows { waiting, .. }) = fleet_rows(&nodes, &tenants, ZONE_LABEL);
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
        let (totals, FleetRows { nodes: rows, .. }) = fleet_rows(&nodes, &[], ZONE_LABEL);
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
        let (totals, FleetRows { nodes: rows, .. }) = fleet_rows(&nodes, &[], ZONE_LABEL);
        assert!(
            rows[0].error.as_deref().unwrap().contains("threads"),
            "{:?}",
            rows[0].error
        );
        assert_eq!(totals.capacity, ResourceAmounts::default());
        assert_eq!(totals.unreadable_nodes, 1);
    }

    #[test]
    fn draining_and_deleted_nodes_say_so_with_their_drained_condition() {
        let nodes = [
            node("node-eu-1")
                .capacity(64, 256, 8000)
                .state(NodeState::Draining)
                .holding("acme", (2, 4, 20))
                .settled(),
            node("node-eu-2").capacity(32, 128, 4000).settled(),
            node("node-eu-3")
                .capacity(16, 64, 1000)
                .deleting()
                .settled(),
        ]
        .map(|n| Arc::new(n.build()));
        let tenants = [Arc::new(
            tenant("acme")
                .resources(2, 4, 20)
                .phase(TenantPhase::Active)
                .on("node-eu-1")
                .created(NEW_YEAR)
                .build(),
        )];
        let (
            totals,
            FleetRows {
                nodes: rows, moves, ..
            },
        ) = fleet_rows(&nodes, &tenants, ZONE_LABEL);

        let eu1 = &rows[0];
        assert!(eu1.draining && !eu1.being_deleted && !eu1.takes_new_tenants);
        let drained = eu1.drained.as_ref().unwrap();
        assert_eq!(
            (drained.status.as_str(), drained.reason.as_str()),
            ("False", "TenantsRemain")
        );
        assert!(
            drained.message.contains("default/acme"),
            "{}",
            drained.message
        );

        let eu2 = &rows[1];
        assert!(!eu2.draining && eu2.drained.is_none() && eu2.takes_new_tenants);

        // Being deleted drains whatever its spec state says; it holds nothing, so it is drained.
        let eu3 = &rows[2];
        assert_eq!(eu3.state, NodeState::Online);
        assert!(eu3.draining && eu3.being_deleted && !eu3.takes_new_tenants);
        let drained = eu3.drained.as_ref().unwrap();
        assert_eq!(
            (drained.status.as_str(), drained.reason.as_str()),
            ("True", "Empty")
        );

        assert_eq!(totals.draining_nodes, 2);
        // By spec state: node-eu-3 is Online there (and draining above).
        assert_eq!(totals.nodes_by_state["Draining"], 1);
        assert_eq!(totals.nodes_by_state["Online"], 2);
        // Only node-eu-2's room is placeable: 32 threads.
        assert_eq!(totals.placeable.threads, 32);
        assert!(moves.is_empty());
        assert_eq!(totals.moves_in_flight, 0);
    }

    #[test]
    fn a_move_in_flight_is_marked_on_both_nodes_and_listed_with_the_entry_it_carries() {
        let nodes = [
            node("node-eu-1")
                .capacity(64, 256, 8000)
                .state(NodeState::Draining)
                .holding("acme", (2, 4, 20))
                .holding("globex", (4, 8, 40)),
            node("node-eu-2")
                .capacity(32, 128, 4000)
                .holding("acme", (2, 4, 20)),
        ]
        .map(|n| Arc::new(n.build()));
        let tenants = [
            tenant("acme")
                .resources(2, 4, 20)
                .reserved(2, 4, 20)
                .migrating("node-eu-1", "node-eu-2")
                .placed("Migrating")
                .created(NEW_YEAR),
            tenant("globex")
                .resources(4, 8, 40)
                .phase(TenantPhase::Active)
                .on("node-eu-1")
                .created(NEW_YEAR),
        ]
        .map(|t| Arc::new(t.build()));
        let (
            totals,
            FleetRows {
                nodes: rows,
                moves,
                blocked,
                ..
            },
        ) = fleet_rows(&nodes, &tenants, ZONE_LABEL);

        assert_eq!(
            moves,
            [MoveView {
                tenant: "default/acme".into(),
                from: "node-eu-1".into(),
                to: "node-eu-2".into(),
                resources: ResourceAmounts::new(2, 4, 20),
            }]
        );
        let on = |row: &NodeRow, tenant: &str| {
            row.tenants
                .iter()
                .find(|t| t.tenant == tenant)
                .cloned()
                .unwrap()
        };
        let leaving = on(&rows[0], "default/acme");
        assert_eq!(leaving.phase, Some(TenantPhase::Migrating));
        assert_eq!(leaving.moving_to.as_deref(), Some("node-eu-2"));
        assert_eq!(leaving.moving_from, None);
        let arriving = on(&rows[1], "default/acme");
        assert_eq!(arriving.moving_from.as_deref(), Some("node-eu-1"));
        assert_eq!(arriving.moving_to, None);
        // globex waits its turn: no move of its own, not blocked.
        let waits = on(&rows[0], "default/globex");
        assert!(waits.moving_to.is_none() && !waits.move_blocked);
        assert!(blocked.is_empty());
        // Both nodes count acme: 2 + 0 on node-eu-2's 32 threads while the move is in flight.
        assert_eq!(rows[1].allocated.threads, 2);
        assert_eq!(totals.moves_in_flight, 1);
        assert_eq!(totals.tenants_by_phase["Migrating"], 1);
    }

    #[test]
    fn tenants_that_cannot_leave_a_draining_node_are_listed_oldest_first_with_their_shortfall() {
        let nodes = [
            node("node-eu-1")
                .capacity(1, 64, 64)
                .holding("small", (1, 1, 1)),
            node("solo")
                .capacity(8, 32, 100)
                .state(NodeState::Draining)
                .holding("young", (2, 4, 20))
                .holding("old", (3, 4, 20)),
        ]
        .map(|n| Arc::new(n.build()));
        let blocked_on_solo = |name: &str, threads: i64, created: &str| {
            tenant(name)
                .resources(threads, 4, 20)
                .phase(TenantPhase::Active)
                .on("solo")
                .reserved(threads, 4, 20)
                .message("holds … on solo, which is draining; no other node can take it now")
                .placed(crate::api::PlacedReason::MigrationBlocked.as_str())
                .created(created)
        };
        let tenants = [
            blocked_on_solo("young", 2, "2026-01-02T00:00:00Z"),
            blocked_on_solo("old", 3, NEW_YEAR),
            tenant("small")
                .phase(TenantPhase::Active)
                .on("node-eu-1")
                .created(NEW_YEAR),
        ]
        .map(|t| Arc::new(t.build()));
        let (
            totals,
            FleetRows {
                nodes: rows,
                blocked,
                moves,
                waiting,
                ..
            },
        ) = fleet_rows(&nodes, &tenants, ZONE_LABEL);

        let names: Vec<_> = blocked.iter().map(|b| b.tenant.as_str()).collect();
        assert_eq!(names, ["default/old", "default/young"]);
        let old = &blocked[0];
        assert_eq!(old.node, "solo");
        assert_eq!(old.phase, TenantPhase::Active);
        assert_eq!(old.reserved, ResourceAmounts::new(3, 4, 20));
        assert!(
            old.message.contains("no other node can take it"),
            "{}",
            old.message
        );
        let shortfall = old.shortfall.as_ref().unwrap();
        // Only node-eu-1 takes new tenants, with 1 - 1 = 0 threads free: short by 3 - 0 = 3.
        assert_eq!(shortfall.against, "eligibleNodes");
        assert_eq!(shortfall.eligible_nodes, 1);
        assert_eq!(shortfall.short_by, ResourceAmounts::new(3, 0, 0));
        let solo = &rows[1];
        assert!(solo.tenants.iter().all(|t| t.move_blocked));
        assert!(rows[0].tenants.iter().all(|t| !t.move_blocked));
        assert!(moves.is_empty() && waiting.is_empty());
        assert_eq!(totals.blocked_moves, 2);
        assert_eq!(totals.draining_nodes, 1);
    }

    #[test]
    fn nodes_carry_their_zone_and_a_spread_tenant_lists_its_replicas_with_their_zones() {
        let rack = "example.com/rack";
        let replica = |zone: &str| {
            node(&format!("node-{zone}"))
                .capacity(8, 32, 100)
                .label(rack, zone)
                .holding_replicas("db", (2, 4, 20), 1)
        };
        let nodes = [
            replica("fsn1"),
            replica("hel1"),
            node("node-plain")
                .capacity(8, 32, 100)
                .holding("web", (1, 1, 1)),
        ]
        .map(|n| Arc::new(n.build()));
        let db = tenant("db")
            .resources(2, 4, 20)
            .spread(TenantSpread::Zones, 2)
            .phase(TenantPhase::Active)
            .on("node-fsn1")
            .placements(&[("node-fsn1", "fsn1", 1), ("node-hel1", "hel1", 1)])
            .build();
        let placements = db.status.clone().unwrap_or_default().placements;
        let tenants = [
            Arc::new(db),
            Arc::new(
                tenant("web")
                    .phase(TenantPhase::Active)
                    .on("node-plain")
                    .build(),
            ),
        ];
        let (
            _,
            FleetRows {
                nodes: rows,
                spread,
                ..
            },
        ) = fleet_rows(&nodes, &tenants, rack);
        let zones: Vec<_> = rows.iter().map(|r| r.zone.as_deref()).collect();
        assert_eq!(zones, [Some("fsn1"), Some("hel1"), None]);
        assert_eq!(rows[0].tenants[0].replicas, Some(1));
        // web is not spread: its one entry holds all its replicas.
        assert_eq!(rows[2].tenants[0].replicas, None);
        assert_eq!(
            spread,
            [SpreadTenant {
                tenant: "default/db".into(),
                spread: TenantSpread::Zones,
                phase: TenantPhase::Active,
                replicas: 2,
                placements,
            }]
        );
        // Under the default label these nodes carry no zone.
        let (_, FleetRows { nodes: rows, .. }) = fleet_rows(&nodes, &tenants, ZONE_LABEL);
        assert!(rows.iter().all(|r| r.zone.is_none()));
    }

    #[test]
    fn every_policy_says_what_moves_a_placed_tenant_as_the_controller_runs() {
        let only_drains = Moves {
            make_room: 0,
            consolidation: false,
        };
        // (moves, what the sentence ends with)
        let cases = [
            (
                only_drains,
                "nothing placed is moved (no rebalancing), except off a draining node: its \
                 tenants go to other nodes by this same rule, make-before-break.",
            ),
            (
                Moves {
                    make_room: 4,
                    ..only_drains
                },
                "a placed tenant moves only off a draining node or to make room for a waiting \
                 tenant that fits nowhere (at most 4 moved for it), make-before-break.",
            ),
            (
                Moves {
                    consolidation: true,
                    ..only_drains
                },
                "a placed tenant moves only off a draining node or to empty an underused node \
                 for consolidation, make-before-break.",
            ),
            (
                Moves {
                    make_room: 1,
                    consolidation: true,
                },
                "a placed tenant moves only off a draining node, to make room for a waiting \
                 tenant that fits nowhere (at most 1 moved for it), or to empty an underused \
                 node for consolidation, make-before-break.",
            ),
        ];
        for policy in placement::Policy::ALL {
            for (moves, ends) in cases {
                let rule = policy_rule(policy, moves);
                assert!(
                    rule.ends_with(&format!("; {ends}")),
                    "{policy} {moves:?}: {rule}"
                );
            }
        }
        assert!(
            policy_rule(placement::Policy::FirstFit, only_drains)
                .starts_with("Each tenant goes to the first Online node, by name")
        );
    }
}
