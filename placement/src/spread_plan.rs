//! A spread tenant's next step, one node edit at a time: each edit is written (guarded by its
//! node's resourceVersion), then the tenant is planned again from what the nodes hold. So a
//! crash or a 409 between two writes leaves entries the next plan reads as held, and finishes,
//! or takes back.
//!
//! Rules enforced here (docs/placement.md, "Spread"):
//! - the target is `spread::place_spread` over the nodes, what the tenant holds kept first;
//! - toward the target, edits that need room come first (new entries, then entries that grow),
//!   those that give room back last (entries that shrink, then entries released): if a write
//!   needing room fails for good, nothing has been given up yet, and everything done so far can
//!   be taken back without needing room;
//! - **all or none**: when no target exists, a tenant that was never placed whole (`was` is
//!   `None`) has every entry it holds released, then waits (`Pending`); a placed tenant (a
//!   replicas change, a resize, a mode change, a node draining under it that cannot be left)
//!   goes back to exactly what it held (`was`): entries it does not hold there are released,
//!   entries changed are put back, and it holds that (`Blocked`). An entry whose old size no
//!   longer fits (the room it gave back was taken meanwhile) is left as it is: never
//!   over-committed;
//! - edits are made in node name order within each kind, so the plan is the same on every run.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::ledger::{Edit, EditKind, Entry};
use crate::resources::Resources;
use crate::spread::{Replica, Spread, SpreadNoFit, ZonedNode, place_spread};

/// What a spread tenant wants, and what it held when last placed whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpreadWants<'a> {
    pub uid: &'a str,
    /// `namespace/name`.
    pub tenant: &'a str,
    pub spread: Spread,
    pub replicas: u32,
    /// One replica's footprint.
    pub footprint: Resources,
    /// The entries it held, by node, when it was last placed whole; `None`: never.
    pub was: Option<&'a BTreeMap<String, Resources>>,
}

/// The next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpreadPlan<'a> {
    /// Write this edit, then plan again.
    Edit(Edit),
    /// Every replica is reserved where the rules put it.
    Holding(Vec<Replica<'a>>),
    /// Nothing is held, and there is no room for every replica.
    Pending(SpreadNoFit),
    /// What it held when last placed whole is held; what it asks now does not fit.
    Blocked(SpreadNoFit),
}

/// The next step for `wants` over `nodes` (each with the tenant's own entry, if any). Pure.
pub fn plan_spread<'a>(wants: &SpreadWants<'_>, nodes: &[ZonedNode<'a>]) -> SpreadPlan<'a> {
    let held: BTreeMap<&str, (Resources, &ZonedNode<'a>)> = nodes
        .iter()
        .filter_map(|n| Some((n.view.name, (n.held?, n))))
        .collect();
    let edit = |kind, node: &str, resources: Option<Resources>| {
        SpreadPlan::Edit(Edit {
            kind,
            node: node.to_owned(),
            uid: wants.uid.to_owned(),
            entry: resources.map(|resources| Entry {
                uid: Arc::from(wants.uid),
                tenant: Arc::from(wants.tenant),
                resources,
                // One replica per node: never two of one tenant on one node.
                replicas: Some(1),
            }),
        })
    };
    match place_spread(nodes, wants.spread, wants.replicas, wants.footprint) {
        Ok(target) => {
            let wanted = wants.footprint;
            let in_target = |node: &str| target.iter().any(|r| r.node == node);
            if let Some(new) = target.iter().find(|r| !held.contains_key(r.node)) {
                return edit(EditKind::Reserve, new.node, Some(wanted));
            }
            let grows = held
                .iter()
                .find(|(node, (own, _))| in_target(node) && !wanted.fits_within(own));
            if let Some((node, _)) = grows {
                return edit(EditKind::Resize, node, Some(wanted));
            }
            let shrinks = held
                .iter()
                .find(|(node, (own, _))| in_target(node) && *own != wanted);
            if let Some((node, _)) = shrinks {
                return edit(EditKind::Resize, node, Some(wanted));
            }
            if let Some((node, _)) = held.iter().find(|(node, _)| !in_target(node)) {
                return edit(EditKind::Release, node, None);
            }
            SpreadPlan::Holding(target)
        }
        Err(no_fit) => {
            let Some(was) = wants.was else {
                // Never placed whole: what is held goes, then it waits.
                return match held.keys().next() {
                    Some(node) => edit(EditKind::Release, node, None),
                    None => SpreadPlan::Pending(no_fit),
                };
            };
            // Placed whole before: back to exactly that, releases and shrinks first.
            let extra = held.keys().find(|node| !was.contains_key(**node));
            if let Some(node) = extra {
                return edit(EditKind::Release, node, None);
            }
            // An entry changed goes back to its old size where that fits (a shrink always does).
            let back = held.iter().find_map(|(node, (own, zoned))| {
                let old = was.get(*node)?;
                (old != own && zoned.has_room(*old)).then_some((*node, *old))
            });
            if let Some((node, old)) = back {
                return edit(EditKind::Resize, node, Some(old));
            }
            SpreadPlan::Blocked(no_fit)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::arithmetic_side_effects)]
    use super::*;

    fn zoned(
        name: &'static str,
        zone: &'static str,
        free: u64,
        held: Option<u64>,
    ) -> ZonedNode<'static> {
        crate::testing::zoned(name, Some(zone), free, held)
    }

    fn wants(
        replicas: u32,
        threads: u64,
        was: Option<&BTreeMap<String, Resources>>,
    ) -> SpreadWants<'_> {
        SpreadWants {
            uid: "u1",
            tenant: "d/db",
            spread: Spread::Zones,
            replicas,
            footprint: Resources::new(threads, 0, 0),
            was,
        }
    }

    fn step(plan: &SpreadPlan<'_>) -> String {
        match plan {
            SpreadPlan::Edit(e) => format!(
                "{:?} {} {}",
                e.kind,
                e.node,
                e.entry.as_ref().map_or(0, |e| e.resources.threads)
            ),
            SpreadPlan::Holding(r) => {
                format!("Holding {:?}", r.iter().map(|r| r.node).collect::<Vec<_>>())
            }
            SpreadPlan::Pending(_) => "Pending".into(),
            SpreadPlan::Blocked(_) => "Blocked".into(),
        }
    }

    #[test]
    fn each_state_takes_the_next_step_toward_all_or_none() {
        let was: BTreeMap<String, Resources> = [("a", 2), ("b", 2), ("c", 2)]
            .into_iter()
            .map(|(n, t)| (n.to_owned(), Resources::new(t, 0, 0)))
            .collect();
        // Fleet (name, zone, free threads, threads held); wants (replicas, threads, placed
        // whole before as `was`); the step.
        type Fleet = &'static [(&'static str, &'static str, u64, Option<u64>)];
        let three_held: Fleet = &[
            ("a", "z1", 6, Some(2)),
            ("b", "z2", 6, Some(2)),
            ("c", "z3", 6, Some(2)),
        ];
        let cases: &[(Fleet, u32, u64, bool, &str)] = &[
            // Nothing held: the first new entry, in name order.
            (
                &[
                    ("a", "z1", 8, None),
                    ("b", "z2", 8, None),
                    ("c", "z3", 8, None),
                ],
                3,
                2,
                false,
                "Reserve a 2",
            ),
            // A crash after the first write: the next new one.
            (
                &[
                    ("a", "z1", 6, Some(2)),
                    ("b", "z2", 8, None),
                    ("c", "z3", 8, None),
                ],
                3,
                2,
                false,
                "Reserve b 2",
            ),
            (three_held, 3, 2, false, r#"Holding ["a", "b", "c"]"#),
            // c filled meanwhile: never placed whole, so what is held goes, then it waits.
            (
                &[
                    ("a", "z1", 6, Some(2)),
                    ("b", "z2", 6, Some(2)),
                    ("c", "z3", 1, None),
                ],
                3,
                2,
                false,
                "Release a 0",
            ),
            (
                &[
                    ("a", "z1", 8, None),
                    ("b", "z2", 8, None),
                    ("c", "z3", 1, None),
                ],
                3,
                2,
                false,
                "Pending",
            ),
            // A resize to 4 threads: grows first; to 1 thread: shrinks.
            (three_held, 3, 4, true, "Resize a 4"),
            (three_held, 3, 1, true, "Resize a 1"),
            // To 7 threads, c has no room: a already grew, so it goes back to 2; then Blocked.
            (
                &[
                    ("a", "z1", 1, Some(7)),
                    ("b", "z2", 6, Some(2)),
                    ("c", "z3", 0, Some(2)),
                ],
                3,
                7,
                true,
                "Resize a 2",
            ),
            (
                &[
                    ("a", "z1", 6, Some(2)),
                    ("b", "z2", 6, Some(2)),
                    ("c", "z3", 0, Some(2)),
                ],
                3,
                7,
                true,
                "Blocked",
            ),
            // Four replicas, no room for the fourth: it holds the three it held.
            (three_held, 4, 2, true, "Blocked"),
            // Four, d (added in z1) full now and a fifth zone node missing: d goes again.
            (
                &[
                    ("a", "z1", 6, Some(2)),
                    ("b", "z2", 6, Some(2)),
                    ("c", "z3", 6, Some(2)),
                    ("d", "z1", 0, Some(2)),
                ],
                5,
                2,
                true,
                "Release d 0",
            ),
            // Two replicas from three: the zone by name after those holding gives one back.
            (three_held, 2, 2, true, "Release c 0"),
        ];
        for (fleet, replicas, threads, placed, want) in cases {
            let nodes: Vec<ZonedNode<'static>> = fleet
                .iter()
                .map(|(name, zone, free, held)| zoned(name, zone, *free, *held))
                .collect();
            let was = placed.then_some(&was);
            let got = plan_spread(&wants(*replicas, *threads, was), &nodes);
            assert_eq!(step(&got), *want, "{fleet:?} x{replicas} of {threads}");
        }
    }
}
