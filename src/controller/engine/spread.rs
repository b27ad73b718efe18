//! Deciding a spread tenant in a batch: `placement::plan_spread`, one node edit at a time, each
//! applied to the view at once.
//!
//! Rules enforced here (docs/placement.md, "Spread"; docs/design.md, "The placement engine"):
//! - only nodes carrying the tenant's node selector take a replica; the nodes holding it are
//!   always seen (what it holds is kept or given back, never forgotten);
//! - a node's zone is its zone label (`--zone-label`); a node without one takes no replica of a
//!   `Zones` tenant;
//! - the batch writes each node once, all nodes at once: an edit that gives room back (a release,
//!   a shrink) never goes in the same batch as an edit of the same job that takes room. The job
//!   answers [`Plan::Edit`] with the edit left (its reconcile decides again once the first are
//!   written), so a write that fails for good has given nothing up;
//! - what the entries say is the truth: after a crash or a 409 between two writes, the next
//!   decision reads what was written and finishes it or takes it back (all or none).

use placement::{
    Edit, EditKind, Fleet, Plan, Resources, SpreadPlaced, SpreadPlan, SpreadWants, ZonedNode,
    plan_spread,
};

use super::view::View;
use crate::api::{SpreadAsk, Wants};
use crate::error::Error;

/// Plans a spread tenant until it rests, or until its next edit gives room back after edits
/// that took room. Applies each edit to the view and appends it to `edits`.
pub(super) fn decide_spread(
    wants: &Wants,
    ask: &SpreadAsk,
    view: &mut View,
    zone_label: &str,
    zones: &[String],
    max_writes: u32,
    edits: &mut Vec<Edit>,
) -> Result<Plan, Error> {
    // A placement of R replicas writes at most R entries, and takes back at most as many.
    let budget = max_writes.max(ask.replicas.saturating_mul(2).saturating_add(2));
    let spread = SpreadWants {
        uid: &wants.uid,
        tenant: &wants.tenant,
        spread: ask.spread,
        replicas: ask.replicas,
        footprint: ask.replica,
        was: ask.was.as_ref(),
    };
    let mut took_room = false;
    // Read once: the decision's own edits keep them the nodes that decide it (see the test).
    let positions = candidates(view, wants, ask, zone_label, zones);
    loop {
        view.check_readable(&wants.uid)?;
        if wants.suspend {
            // Suspended: it keeps what it holds and asks for nothing more.
            let nodes = zoned(view, &positions, wants, zone_label);
            let placed = placed(view, &wants.uid, &nodes);
            return Ok(if placed.is_empty() {
                Plan::SuspendedUnplaced
            } else {
                Plan::Spread {
                    reserved: total(&nodes),
                    placed,
                }
            });
        }
        let next = {
            let nodes = zoned(view, &positions, wants, zone_label);
            match plan_spread(&spread, &nodes) {
                SpreadPlan::Edit(edit) => Ok(edit),
                SpreadPlan::Holding(_) => Err(Plan::Spread {
                    placed: placed(view, &wants.uid, &nodes),
                    reserved: total(&nodes),
                }),
                SpreadPlan::Pending(why) => Err(Plan::SpreadPending(why)),
                SpreadPlan::Blocked(why) => Err(Plan::SpreadBlocked {
                    placed: placed(view, &wants.uid, &nodes),
                    reserved: total(&nodes),
                    why,
                }),
            }
        };
        let edit = match next {
            Ok(edit) => edit,
            Err(resting) => return Ok(resting),
        };
        let gives = gives_room(&edit, view);
        if gives && took_room {
            return Ok(Plan::Edit(edit));
        }
        took_room |= !gives;
        if u32::try_from(edits.len()).unwrap_or(u32::MAX) >= budget {
            return Err(Error::TooManyWrites {
                tenant: wants.tenant.to_string(),
                writes: budget,
            });
        }
        view.apply(&edit)?;
        edits.push(edit);
    }
}

/// Whether an edit, not yet applied to `view`, gives room back: a release, or an entry made no
/// larger in any dimension than it was.
fn gives_room(edit: &Edit, view: &View) -> bool {
    match (&edit.entry, edit.kind) {
        (None, _) => true,
        (Some(_), EditKind::Reserve) => false,
        (Some(new), _) => view
            .ledger(&edit.node)
            .and_then(|l| l.entry_of(&edit.uid))
            .is_some_and(|old| new.resources.fits_within(&old.resources) && *new != *old),
    }
}

/// The nodes as spreading reads them: those holding the tenant, and of those carrying its
/// selector, enough to decide as if all were read: in each zone (`Zones`; the whole fleet for
/// `Nodes`) the first that take new tenants, with room for one replica, as many as it could
/// need there, and the first that takes new tenants at all (a full zone still counts). Found
/// by the fleet's first-fit indexes, one per selector (and zone); past the indexes the fleet
/// keeps, every node is read.
fn candidates(
    view: &mut View,
    wants: &Wants,
    ask: &SpreadAsk,
    zone_label: &str,
    zones: &[String],
) -> Vec<usize> {
    let mut positions: Vec<usize> = {
        let (fleet, holders) = view.fleet_and_holders(&wants.uid);
        holders
            .iter()
            .copied()
            .filter(|&i| {
                fleet
                    .ledgers()
                    .get(i)
                    .is_some_and(|l| l.entry_of(&wants.uid).is_some())
            })
            .collect()
    };
    let own = wants.node_selector.as_deref().cloned().unwrap_or_default();
    let selectors: Vec<placement::Labels> = match ask.spread {
        placement::Spread::Zones => zones
            .iter()
            .map(|zone| {
                let mut selector = own.clone();
                selector.insert(zone_label.to_owned(), zone.clone());
                selector
            })
            .collect(),
        _ => vec![own],
    };
    let need = usize::try_from(ask.replicas)
        .unwrap_or(usize::MAX)
        .saturating_add(positions.len());
    let mut indexed = true;
    for selector in &selectors {
        view.fleet.index_selector(selector);
        let fits = view.fleet.first_fits(Some(selector), &ask.replica, need);
        let any = view.fleet.first_fits(Some(selector), &Resources::ZERO, 1);
        let (Some(fits), Some(any)) = (fits, any) else {
            indexed = false;
            break;
        };
        let found: Vec<usize> = fits
            .into_iter()
            .chain(any)
            .filter_map(|name| view.fleet.position(name))
            .collect();
        positions.extend(found);
    }
    if !indexed {
        let ledgers = view.fleet.ledgers();
        positions = ledgers
            .iter()
            .enumerate()
            .filter(|(_, l)| {
                l.entry_of(&wants.uid).is_some()
                    || placement::selector::matches(wants.node_selector.as_deref(), l.labels())
            })
            .map(|(i, _)| i)
            .collect();
    }
    positions.sort_unstable();
    positions.dedup();
    positions
}

/// The nodes at these positions as spreading reads them: those holding the tenant, and those
/// carrying its selector (a node it held when they were found may hold it no more).
fn zoned<'v>(
    view: &'v View,
    positions: &[usize],
    wants: &Wants,
    zone_label: &str,
) -> Vec<ZonedNode<'v>> {
    let ledgers = view.fleet.ledgers();
    let uid = wants.uid.as_str();
    positions
        .iter()
        .filter_map(|&i| {
            let ledger = ledgers.get(i)?;
            let selected =
                placement::selector::matches(wants.node_selector.as_deref(), ledger.labels());
            if !selected && ledger.entry_of(uid).is_none() {
                return None;
            }
            Some(ZonedNode {
                view: ledger.view(),
                zone: ledger.labels().get(zone_label).map(String::as_str),
                held: ledger.entry_of(uid).map(|e| e.resources),
            })
        })
        .collect()
}

/// The nodes holding the tenant, by name, each with the replicas its entry says it holds.
fn placed(view: &View, uid: &str, nodes: &[ZonedNode<'_>]) -> Vec<SpreadPlaced> {
    let mut placed: Vec<SpreadPlaced> = nodes
        .iter()
        .filter_map(|n| {
            let entry = view.ledger(n.view.name)?.entry_of(uid)?;
            Some(SpreadPlaced {
                node: n.view.name.to_owned(),
                zone: n.zone.map(str::to_owned),
                replicas: entry.replicas,
                resources: entry.resources,
            })
        })
        .collect();
    placed.sort_by(|a, b| a.node.cmp(&b.node));
    placed
}

fn total(nodes: &[ZonedNode<'_>]) -> Resources {
    nodes
        .iter()
        .filter_map(|n| n.held)
        .fold(Resources::ZERO, |sum, r| sum.checked_add(r).unwrap_or(sum))
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::arithmetic_side_effects
    )]
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::api::{NodeState, ZONE_LABEL};
    use crate::testing;

    /// A node: its zone (0..3, 3: none), state (0: Online, 1: Cordoned, 2: Draining), free
    /// threads of 8 (the rest held by others), whether it holds a replica of `db` (1 thread),
    /// and whether it carries the label `tier: a`.
    type Spec = (usize, u8, i64, bool, bool);

    fn fleet(specs: &[Spec]) -> View {
        let nodes = specs
            .iter()
            .enumerate()
            .map(|(i, &(zone, state, free, holds, tier))| {
                let mut node = testing::node(&format!("n{i}")).capacity(8, 64, 1000);
                if let Some(zone) = ["fsn1", "hel1", "nbg1"].get(zone) {
                    node = node.label(ZONE_LABEL, zone);
                }
                if tier {
                    node = node.label("tier", "a");
                }
                node = node.state(
                    [NodeState::Online, NodeState::Cordoned, NodeState::Draining]
                        [usize::from(state)],
                );
                let others = 8 - free - i64::from(holds);
                if others > 0 {
                    node = node.holding("other", (others, 1, 1));
                }
                if holds {
                    node = node.holding("db", (1, 1, 1));
                }
                Arc::new(node.build())
            })
            .collect();
        View::build(nodes)
    }

    fn wants(selector: bool) -> Wants {
        Wants {
            uid: "uid-db".to_owned(),
            tenant: "default/db".into(),
            footprint: Resources::new(1, 1, 1),
            suspend: false,
            status_node: None,
            migration: None,
            asked: None,
            node_selector: selector
                .then(|| Arc::new(BTreeMap::from([("tier".to_owned(), "a".to_owned())]))),
            created: None,
            spread: None,
        }
    }

    proptest! {
        /// The nodes the indexes find decide exactly as every node would.
        #[test]
        fn the_candidates_decide_as_every_node_would(
            specs in proptest::collection::vec(
                (0usize..4, 0u8..3, 0i64..=7, any::<bool>(), any::<bool>()),
                1..9,
            ),
            zones in any::<bool>(),
            replicas in 1u32..5,
            selector in any::<bool>(),
        ) {
            let mut view = fleet(&specs);
            let wants = wants(selector);
            let ask = SpreadAsk {
                spread: if zones { placement::Spread::Zones } else { placement::Spread::Nodes },
                replicas,
                replica: Resources::new(1, 1, 1),
                was: None,
            };
            let all_zones = view.zones(ZONE_LABEL);
            let spread = SpreadWants {
                uid: &wants.uid,
                tenant: &wants.tenant,
                spread: ask.spread,
                replicas,
                footprint: ask.replica,
                was: None,
            };
            // Read once, as a decision does, then each step against every node, the step's edit
            // applied before the next.
            let positions = candidates(&mut view, &wants, &ask, ZONE_LABEL, &all_zones);
            for _ in 0..20 {
                let some = plan_spread(&spread, &zoned(&view, &positions, &wants, ZONE_LABEL));
                let every: Vec<usize> = (0..view.fleet.ledgers().len())
                    .filter(|&i| {
                        let l = &view.fleet.ledgers()[i];
                        l.entry_of("uid-db").is_some()
                            || placement::selector::matches(
                                wants.node_selector.as_deref(),
                                l.labels(),
                            )
                    })
                    .collect();
                let all = plan_spread(&spread, &zoned(&view, &every, &wants, ZONE_LABEL));
                // The no-fit counts nodes with room among those read: only what is decided
                // must agree.
                match (some, all) {
                    (SpreadPlan::Pending(a), SpreadPlan::Pending(b)) => {
                        prop_assert_eq!(a.zones_with_room, b.zones_with_room);
                        prop_assert_eq!(a.zones_needed, b.zones_needed);
                        break;
                    }
                    (SpreadPlan::Edit(a), SpreadPlan::Edit(b)) => {
                        prop_assert_eq!(&a, &b);
                        view.apply(&a).unwrap();
                    }
                    (a, b) => {
                        prop_assert_eq!(a, b);
                        break;
                    }
                }
            }
        }
    }
}
