//! The invariants of the allocation protocol, checked over API objects. Tests, the soak and
//! `simulate` use this one checker.
//!
//! Rules checked:
//! - per node: `allocated` is the sum of its entries, `free` is capacity - allocated (never below
//!   0), `tenants` is the number of entries; capacity means capacity x overcommit throughout;
//! - per node: allocated is within capacity, unless the caller says the node's capacity was
//!   lowered (then it keeps what it holds);
//! - per write ([`check_node_write`]): a write that adds or grows an entry leaves the node within
//!   capacity, so nothing is ever over-committed, at any moment;
//! - each live tenant UID holds entries on at most one node, and at most one entry there, but
//!   while its status names both ends of a move (`migration`: from, to), or when its replicas
//!   are spread (`spec.spread`: one entry of one replica per node);
//! - at rest, a spread tenant holds all its replicas or none: Active with one replica's
//!   footprint on each of `replicas` nodes (the zones a `Zones` tenant is in at most one replica
//!   apart, none on a node without a zone: a zone that takes tenants only after it was placed
//!   is used at its next decision),
//!   as its status's placements list them; waiting with nothing held, while no placement keeps
//!   its rule (`placement::place_spread` over the nodes); or, Resizing or blocked on a draining
//!   node, what its status lists;
//! - at rest ([`Quiescence::Settled`]): no entry belongs to a tenant that is gone, every
//!   tenant's status agrees with the entries (node, reserved, phase), and no tenant waits for
//!   room that is there (PendingCapacity or Resizing while the plan would place or resize it),
//!   no tenant stays on a draining node another node could take it to, and no move is left
//!   half done (`Migrating`);
//!   no tenant is Active (or Resizing) without an entry that holds it.

use std::collections::{HashMap, HashSet};

use kube::ResourceExt;
use placement::Resources;

use crate::api::{Node, PlacedReason, Tenant, TenantPhase};

/// Whether the controller is known to have caught up with every change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quiescence {
    /// Mid-flight: only the rules that hold at every moment.
    AnyMoment,
    /// After the controller went quiet: every rule.
    Settled,
}

fn amounts(
    node: &str,
    what: &str,
    value: &crate::api::ResourceAmounts,
    violations: &mut Vec<String>,
) -> Resources {
    value.to_resources().unwrap_or_else(|e| {
        violations.push(format!("node {node}: {what} {e}"));
        Resources::ZERO
    })
}

fn entries_of(node: &Node, violations: &mut Vec<String>) -> Vec<(String, String, Resources)> {
    let name = node.name_any();
    node.status
        .iter()
        .flat_map(|s| s.allocations.iter())
        .map(|a| {
            (
                a.uid.to_string(),
                a.tenant.to_string(),
                amounts(&name, "entry", &a.resources, violations),
            )
        })
        .collect()
}

/// Capacity x overcommit, as placement counts it.
fn effective_capacity(node: &Node, violations: &mut Vec<String>) -> Resources {
    let name = node.name_any();
    let physical = amounts(&name, "capacity", &node.spec.capacity, violations);
    match node.spec.overcommit() {
        Ok(overcommit) => overcommit.effective(physical),
        Err(e) => {
            violations.push(format!("node {name}: {e}"));
            physical
        }
    }
}

/// Checks one node's status in isolation.
fn check_node(node: &Node, lowered: &HashSet<String>, violations: &mut Vec<String>) {
    let name = node.name_any();
    let Some(status) = &node.status else { return };
    let entries = entries_of(node, violations);
    let Some(sum) = Resources::checked_sum(entries.iter().map(|(_, _, r)| r)) else {
        violations.push(format!("node {name}: entries overflow"));
        return;
    };
    let capacity = effective_capacity(node, violations);
    let allocated = amounts(&name, "allocated", &status.allocated, violations);
    let free = amounts(&name, "free", &status.free, violations);
    if allocated != sum {
        violations.push(format!(
            "node {name}: allocated {allocated} but its entries sum to {sum}"
        ));
    }
    if free != capacity.saturating_sub(sum) {
        violations.push(format!(
            "node {name}: free {free} but capacity - entries is {}",
            capacity.saturating_sub(sum)
        ));
    }
    if usize::try_from(status.tenants).ok() != Some(entries.len()) {
        violations.push(format!(
            "node {name}: tenants {} but {} entries",
            status.tenants,
            entries.len()
        ));
    }
    if !sum.fits_within(&capacity) && !lowered.contains(&name) {
        violations.push(format!(
            "node {name}: over-committed, holds {sum} with capacity {capacity}"
        ));
    }
    let mut uids = HashSet::new();
    for (uid, tenant, _) in &entries {
        if !uids.insert(uid) {
            violations.push(format!("node {name}: two entries for {tenant} ({uid})"));
        }
    }
}

/// Checks one committed write of a node: growth must fit. `before` is the node before the write.
pub fn check_node_write(before: Option<&Node>, after: &Node) -> Result<(), Vec<String>> {
    let mut violations = Vec::new();
    let previous: HashMap<String, Resources> = before
        .map(|b| {
            entries_of(b, &mut violations)
                .into_iter()
                .map(|(uid, _, r)| (uid, r))
                .collect()
        })
        .unwrap_or_default();
    let entries = entries_of(after, &mut violations);
    let grew = entries
        .iter()
        .any(|(uid, _, r)| previous.get(uid).is_none_or(|old| !r.fits_within(old)));
    let name = after.name_any();
    let capacity = effective_capacity(after, &mut violations);
    match Resources::checked_sum(entries.iter().map(|(_, _, r)| r)) {
        Some(sum) if grew && !sum.fits_within(&capacity) => violations.push(format!(
            "node {name}: a write grew its entries to {sum}, past capacity {capacity}"
        )),
        None => violations.push(format!("node {name}: entries overflow")),
        _ => {}
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

/// Checks the whole fleet. `lowered` names nodes whose capacity was lowered below what they hold.
pub fn check(
    nodes: &[Node],
    tenants: &[Tenant],
    lowered: &HashSet<String>,
    quiescence: Quiescence,
) -> Result<(), Vec<String>> {
    check_zoned(nodes, tenants, lowered, quiescence, crate::api::ZONE_LABEL)
}

/// [`check`] with the zone label the controller places by (`--zone-label`).
pub fn check_zoned(
    nodes: &[Node],
    tenants: &[Tenant],
    lowered: &HashSet<String>,
    quiescence: Quiescence,
    zone_label: &str,
) -> Result<(), Vec<String>> {
    let mut violations = Vec::new();
    let mut holders: HashMap<String, Vec<(String, Resources)>> = HashMap::new();
    for node in nodes {
        check_node(node, lowered, &mut violations);
        for (uid, _, resources) in entries_of(node, &mut violations) {
            holders
                .entry(uid)
                .or_default()
                .push((node.name_any(), resources));
        }
    }
    let live: HashMap<String, &Tenant> = tenants
        .iter()
        .filter_map(|t| t.uid().map(|u| (u, t)))
        .collect();
    for (uid, held) in &holders {
        let moving = live
            .get(uid)
            .is_some_and(|t| status_names_both(t, held) || t.spread_ask().is_some());
        if held.len() > 1 && live.contains_key(uid) && !moving {
            let names: Vec<_> = held.iter().map(|(n, _)| n.as_str()).collect();
            violations.push(format!(
                "tenant {uid} holds entries on {}",
                names.join(", ")
            ));
        }
        if quiescence == Quiescence::Settled && !live.contains_key(uid) {
            violations.push(format!(
                "entry of a tenant that is gone ({uid}) on {}",
                held[0].0
            ));
        }
    }
    if quiescence == Quiescence::Settled {
        let ledgers: Vec<_> = nodes.iter().filter_map(|n| n.ledger().ok()).collect();
        let head = oldest_that_fits_nowhere(&live, &ledgers);
        for (uid, tenant) in &live {
            if let Some(ask) = tenant.spread_ask() {
                let held = holders.get(uid).map(Vec::as_slice).unwrap_or_default();
                check_spread(tenant, &ask, held, &ledgers, zone_label, &mut violations);
                continue;
            }
            let held = holders.get(uid).and_then(|h| h.first());
            check_tenant_status(tenant, held, &mut violations);
            if queued_behind(tenant, head.as_ref()) {
                continue;
            }
            check_not_left_waiting(tenant, uid, &ledgers, &mut violations);
        }
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

/// A UID may be on two nodes only while its status names both: a move in flight (`migration`,
/// from one to the other).
fn status_names_both(tenant: &Tenant, held: &[(String, Resources)]) -> bool {
    let Some(migration) = tenant.status.as_ref().and_then(|s| s.migration.as_ref()) else {
        return false;
    };
    held.len() == 2
        && held.iter().any(|(n, _)| *n == migration.from)
        && held.iter().any(|(n, _)| *n == migration.to)
}

/// The queue position (creation time, key) of the oldest tenant waiting for its first placement
/// that no node can take now: under StrictFIFO, the head.
fn oldest_that_fits_nowhere(
    live: &HashMap<String, &Tenant>,
    ledgers: &[placement::NodeLedger],
) -> Option<(Option<k8s_openapi::jiff::Timestamp>, String)> {
    live.iter()
        .filter(|(_, t)| {
            !t.spec.suspend
                && t.status
                    .as_ref()
                    .is_some_and(|s| s.phase == TenantPhase::PendingCapacity)
        })
        .filter_map(|(_, t)| {
            let footprint = t.spec.footprint().ok()?;
            let fits = room_for(footprint, t.spec.selector(), ledgers, None).is_some();
            let created = t.metadata.creation_timestamp.as_ref().map(|c| c.0);
            (!fits).then(|| (created, t.key()))
        })
        .min()
}

/// `a` is at most `b` in every dimension, spelled out.
fn at_most(a: Resources, b: Resources) -> bool {
    a.threads <= b.threads && a.memory_gb <= b.memory_gb && a.storage_gb <= b.storage_gb
}

/// The room a node's written entries leave, per dimension (never below 0), counting the entry of
/// `except` as free.
fn room_left(ledger: &placement::NodeLedger, except: Option<&str>) -> Resources {
    let capacity = ledger.effective_capacity();
    let mut taken = Resources::ZERO;
    for entry in ledger.entries() {
        if Some(&*entry.uid) != except {
            taken = Resources::new(
                taken.threads.saturating_add(entry.resources.threads),
                taken.memory_gb.saturating_add(entry.resources.memory_gb),
                taken.storage_gb.saturating_add(entry.resources.storage_gb),
            );
        }
    }
    Resources::new(
        capacity.threads.saturating_sub(taken.threads),
        capacity.memory_gb.saturating_sub(taken.memory_gb),
        capacity.storage_gb.saturating_sub(taken.storage_gb),
    )
}

/// A node with room for `footprint` now, found without the planner by trying every node: Online,
/// not over its capacity, carrying every label of `selector`, other than `besides`, and leaving
/// at least `footprint` free in every dimension.
fn room_for<'l>(
    footprint: Resources,
    selector: Option<&placement::Labels>,
    ledgers: &'l [placement::NodeLedger],
    besides: Option<&str>,
) -> Option<&'l str> {
    ledgers
        .iter()
        .filter(|l| l.state() == placement::NodeState::Online && Some(l.name()) != besides)
        .filter(|l| {
            selector
                .into_iter()
                .flatten()
                .all(|(key, value)| l.labels().get(key) == Some(value))
        })
        .filter(|l| at_most(sum_of(l.entries()), l.effective_capacity()))
        .find(|l| at_most(footprint, room_left(l, None)))
        .map(placement::NodeLedger::name)
}

/// The sum of some entries, spelled out.
fn sum_of(entries: &[placement::Entry]) -> Resources {
    entries.iter().fold(Resources::ZERO, |sum, e| {
        Resources::new(
            sum.threads.saturating_add(e.resources.threads),
            sum.memory_gb.saturating_add(e.resources.memory_gb),
            sum.storage_gb.saturating_add(e.resources.storage_gb),
        )
    })
}

/// Whether a tenant says it waits behind an older one (StrictFIFO) and one older than it does
/// fit nowhere: then room it could use may be free.
fn queued_behind(
    tenant: &Tenant,
    head: Option<&(Option<k8s_openapi::jiff::Timestamp>, String)>,
) -> bool {
    let queued = tenant.placed_reason() == Some(PlacedReason::QueuedBehindOlder);
    let position = (
        tenant.metadata.creation_timestamp.as_ref().map(|c| c.0),
        tenant.key(),
    );
    queued && head.is_some_and(|head| *head < position)
}

/// At rest, a tenant waiting for room has none, judged by trying every node (not by the planner
/// the controller uses): a tenant waiting to be placed fits on no node ([`room_for`]); one waiting
/// to grow on its node (`Resizing`) does not fit there, its own entry counted as free, or the
/// node is Offline. Likewise a tenant left on a draining node: no other node could take it now.
/// A suspended tenant asks for nothing.
fn check_not_left_waiting(
    tenant: &Tenant,
    uid: &str,
    ledgers: &[placement::NodeLedger],
    violations: &mut Vec<String>,
) {
    let Ok(footprint) = tenant.spec.footprint() else {
        return;
    };
    let Some(status) = tenant.status.as_ref().filter(|_| !tenant.spec.suspend) else {
        return;
    };
    let key = tenant.key();
    let own = ledgers.iter().find(|l| l.name() == status.node_name);
    let selector = tenant.spec.selector();
    if let Some(node) = own.filter(|l| l.state() == placement::NodeState::Draining) {
        // A move carries the entry as held (a resize is asked for once it has moved).
        let carried = node.entry_of(uid).map_or(footprint, |e| e.resources);
        if let Some(other) = room_for(carried, selector, ledgers, Some(node.name())) {
            violations.push(format!(
                "tenant {key} stays on draining node {}, but node {other} could take it now",
                node.name()
            ));
        }
        return;
    }
    match status.phase {
        TenantPhase::PendingCapacity => {
            if let Some(node) = room_for(footprint, selector, ledgers, None) {
                violations.push(format!(
                    "tenant {key} still waits, but node {node} could take it now"
                ));
            }
        }
        TenantPhase::Resizing => {
            let Some(node) = own.filter(|l| l.entry_of(uid).is_some()) else {
                return;
            };
            if node.state() != placement::NodeState::Offline
                && at_most(footprint, room_left(node, Some(uid)))
            {
                violations.push(format!(
                    "tenant {key} still waits to grow to {footprint}, but node {} has room for it \
                     now",
                    node.name()
                ));
            }
        }
        _ => {}
    }
}

/// At rest, a spread tenant holds all its replicas or none, and its status says where.
fn check_spread(
    tenant: &Tenant,
    ask: &crate::api::SpreadAsk,
    held: &[(String, Resources)],
    ledgers: &[placement::NodeLedger],
    zone_label: &str,
    violations: &mut Vec<String>,
) {
    let key = tenant.key();
    let Some(status) = &tenant.status else {
        violations.push(format!("tenant {key}: no status at rest"));
        return;
    };
    let mut listed: Vec<&str> = status.placements.iter().map(|p| p.node.as_str()).collect();
    listed.sort_unstable();
    let mut holding: Vec<&str> = held.iter().map(|(n, _)| n.as_str()).collect();
    holding.sort_unstable();
    let zone_of = |node: &str| {
        ledgers
            .iter()
            .find(|l| l.name() == node)
            .and_then(|l| l.labels().get(zone_label).cloned())
    };
    match status.phase {
        TenantPhase::Terminating => {}
        TenantPhase::Active if tenant.placed_reason() != Some(PlacedReason::MigrationBlocked) => {
            let replicas = usize::try_from(ask.replicas).unwrap_or(usize::MAX);
            if held.len() != replicas || held.iter().any(|(_, r)| *r != ask.replica) {
                violations.push(format!(
                    "tenant {key}: Active, spread, but holds {held:?}, not {replicas} replicas \
                     of {}",
                    ask.replica
                ));
            }
            if ask.spread == placement::Spread::Zones {
                let mut per_zone: HashMap<Option<String>, usize> = HashMap::new();
                for (node, _) in held {
                    let count = per_zone.entry(zone_of(node)).or_default();
                    *count = count.saturating_add(1);
                }
                // Among the zones it holds replicas in (a zone that takes tenants only after it
                // was placed is used at its next decision, not at once; a node whose zone label
                // changes has its spread tenants decided again), none on a node without a zone.
                let counts: Vec<usize> = per_zone.values().copied().collect();
                let (least, most) = (counts.iter().min(), counts.iter().max());
                if per_zone.contains_key(&None)
                    || least
                        .zip(most)
                        .is_some_and(|(l, m)| m.saturating_sub(*l) > 1)
                {
                    violations.push(format!(
                        "tenant {key}: its replicas are not balanced across zones: {per_zone:?}"
                    ));
                }
            }
            if listed != holding {
                violations.push(format!(
                    "tenant {key}: status lists {listed:?}, the entries are on {holding:?}"
                ));
            }
        }
        TenantPhase::PendingCapacity | TenantPhase::Pending => {
            if !held.is_empty() {
                violations.push(format!(
                    "tenant {key}: {} but holds {holding:?}: all or none",
                    status.phase
                ));
            }
            let nodes: Vec<placement::ZonedNode<'_>> = ledgers
                .iter()
                .filter(|l| placement::selector::matches(tenant.spec.selector(), l.labels()))
                .map(|l| placement::ZonedNode {
                    view: l.view(),
                    zone: l.labels().get(zone_label).map(String::as_str),
                    held: None,
                })
                .collect();
            if status.phase == TenantPhase::PendingCapacity
                && !tenant.spec.suspend
                && placement::place_spread(&nodes, ask.spread, ask.replicas, ask.replica).is_ok()
            {
                violations.push(format!(
                    "tenant {key} still waits, but its replicas could be spread now"
                ));
            }
        }
        _ => {
            if !status.placements.is_empty() && listed != holding {
                violations.push(format!(
                    "tenant {key}: {} lists {listed:?}, the entries are on {holding:?}",
                    status.phase
                ));
            }
        }
    }
}

/// At rest, a tenant's status is a faithful view of its entry.
fn check_tenant_status(
    tenant: &Tenant,
    held: Option<&(String, Resources)>,
    violations: &mut Vec<String>,
) {
    let key = tenant.key();
    let Some(status) = &tenant.status else {
        violations.push(format!("tenant {key}: no status at rest"));
        return;
    };
    let reserved = status.reserved.to_resources().unwrap_or_default();
    let footprint = tenant.spec.footprint().ok();
    match (status.phase, held) {
        (TenantPhase::Terminating, _) => {}
        (
            TenantPhase::Active | TenantPhase::Resizing | TenantPhase::Suspended,
            Some((node, resources)),
        ) => {
            if &status.node_name != node || &reserved != resources {
                violations.push(format!(
                    "tenant {key}: status says {reserved} on '{}', the entry is {resources} on {node}",
                    status.node_name
                ));
            }
            if status.phase == TenantPhase::Active && footprint != Some(*resources) {
                violations.push(format!(
                    "tenant {key}: Active but holds {resources}, not its footprint"
                ));
            }
        }
        // The reservation this status shows is held nowhere: lost, and not repaired.
        (TenantPhase::Active | TenantPhase::Resizing, None) => violations.push(format!(
            "tenant {key}: {} on '{}' without an entry that holds it",
            status.phase, status.node_name
        )),
        (TenantPhase::PendingCapacity | TenantPhase::Suspended | TenantPhase::Pending, None) => {
            if !status.node_name.is_empty() {
                violations.push(format!(
                    "tenant {key}: {} names node {} but holds nothing",
                    status.phase, status.node_name
                ));
            }
        }
        (phase, held) => violations.push(format!("tenant {key}: phase {phase} but holds {held:?}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::NodeState;
    use crate::testing::{NodeBuilder, TenantBuilder, node, tenant};

    /// The "no tenant waits for room that is there" rule, judged by trying every node: each case
    /// a fleet (nodes of 8 threads, 8 GB, 8 GB), the tenant t (asking 4, 4, 4) in some phase, and
    /// whether the rule finds room it should have taken.
    #[test]
    fn a_waiting_tenant_with_room_on_some_node_breaks_the_rule() {
        let eight = |name| node(name).capacity(8, 8, 8);
        let t = |phase| tenant("t").resources(4, 4, 4).phase(phase);
        let pending = || t(TenantPhase::PendingCapacity);
        let resizing_on_a = || t(TenantPhase::Resizing).on("a");
        let cases: Vec<(&str, Vec<NodeBuilder>, TenantBuilder, bool)> = vec![
            // a: 8 - 5 = 3 threads free, one short; b: 8 - 4 = 4 in every dimension, exactly 4.
            (
                "room on the second node",
                vec![
                    eight("a").holding("x", (5, 1, 1)),
                    eight("b").holding("y", (4, 4, 4)),
                ],
                pending(),
                true,
            ),
            (
                "one dimension short everywhere",
                vec![eight("a").holding("x", (5, 1, 1))],
                pending(),
                false,
            ),
            (
                "room only on a cordoned node",
                vec![eight("a").state(NodeState::Cordoned)],
                pending(),
                false,
            ),
            (
                "room only on a node without the selector's labels",
                vec![eight("a").label("region", "us")],
                pending().node_selector(&[("region", "eu")]),
                false,
            ),
            (
                "room on a node with the selector's labels",
                vec![eight("a").label("region", "eu")],
                pending().node_selector(&[("region", "eu")]),
                true,
            ),
            (
                "a suspended tenant asks for nothing",
                vec![eight("a")],
                pending().suspended(),
                false,
            ),
            // t holds 2 on a: 8 - 4 (x) = 4 free with its own entry counted free, room to grow.
            (
                "a resize with room on its node",
                vec![eight("a").holding("x", (4, 1, 1)).holding("t", (2, 2, 2))],
                resizing_on_a(),
                true,
            ),
            // 8 - 5 (x) = 3 threads: short by one (room on b does not count for a resize).
            (
                "a resize short on its node",
                vec![
                    eight("a").holding("x", (5, 1, 1)).holding("t", (2, 2, 2)),
                    eight("b"),
                ],
                resizing_on_a(),
                false,
            ),
            (
                "a tenant on a draining node another could take",
                vec![
                    eight("a")
                        .state(NodeState::Draining)
                        .holding("t", (4, 4, 4)),
                    eight("b"),
                ],
                t(TenantPhase::Active).on("a"),
                true,
            ),
        ];
        for (what, nodes, waiting, broken) in cases {
            let ledgers: Vec<_> = nodes
                .into_iter()
                .map(|n| n.settled().build().ledger().unwrap())
                .collect();
            let mut found = Vec::new();
            check_not_left_waiting(&waiting.build(), "uid-t", &ledgers, &mut found);
            assert_eq!(!found.is_empty(), broken, "{what}: {found:?}");
        }
    }
}
