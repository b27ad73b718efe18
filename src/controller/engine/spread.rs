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
    loop {
        view.check_readable(&wants.uid)?;
        let next = {
            let nodes = zoned(view, wants, zone_label);
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

/// The nodes as spreading reads them: those carrying the tenant's selector, and those holding it.
fn zoned<'v>(view: &'v View, wants: &Wants, zone_label: &str) -> Vec<ZonedNode<'v>> {
    view.fleet
        .ledgers()
        .iter()
        .filter_map(|ledger| {
            let held = ledger.entry_of(&wants.uid).map(|e| e.resources);
            let selected =
                placement::selector::matches(wants.node_selector.as_deref(), ledger.labels());
            (selected || held.is_some()).then(|| ZonedNode {
                view: ledger.view(),
                zone: ledger.labels().get(zone_label).map(String::as_str),
                held,
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
