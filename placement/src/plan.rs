//! Plans: the next step that moves a tenant toward what it asks for, one node edit at a time.
//!
//! ```text
//!   TenantWants (uid, footprint, suspend) ──plan_tenant(_with policy)──▶ Plan
//!                                                          ├─ Edit(node, uid → entry | none)  one guarded write
//!                                                          ├─ Holding / ResizeBlocked          nothing to write
//!                                                          └─ Pending(NoFit) / SuspendedUnplaced
//!   over any Fleet: a slice of NodeLedgers, or an IndexedFleet (plan_tenant_held_by)
//! ```
//!
//! Rules enforced here (docs/design.md, "The allocation protocol"):
//! - a plan changes at most one node's entries; the caller writes it under that node's
//!   resourceVersion and plans again from fresh data, so a plan never acts on stale room;
//! - a tenant holding entries on several nodes keeps the one its status names (or the first by
//!   name) and the others are removed first;
//! - resize: the new footprint replaces the entry in place when it fits on the tenant's node
//!   without counting its own old entry, or when it shrinks in every dimension; otherwise the old
//!   entry stays (`ResizeBlocked`). Growing on an Offline node is blocked;
//! - a suspended tenant keeps what it holds and is not placed when it holds nothing;
//! - a tenant on a draining node is moved off it, make-before-break ([`crate::migration`]);
//! - planning never over-commits a node: every `Reserve` and growing `Resize` it returns fits.
//!   "Fits" is measured against the node's effective capacity (capacity × its overcommit ratio,
//!   1.0 unless [`NodeLedger::with_overcommit`] says otherwise), for placing and resizing alike;
//! - a new tenant is placed by the policy given to [`plan_tenant_with`]; [`plan_tenant`] is
//!   first fit;
//! - a tenant with a node selector is placed, restored and moved only onto nodes whose labels
//!   include every pair of it ([`crate::selector`]); an entry it holds stays where it is when the
//!   node's labels change, and resizes in place there.

use crate::fit::{Choice, NodeState, Shortfall};
use crate::fleet::Fleet;
use crate::ledger::{Edit, EditKind, Entry, NodeLedger, Plan, TenantWants};
use crate::migration::{plan_asked, plan_in_flight, plan_move};
use crate::policy::Policy;
use crate::resources::Resources;

/// The next step that moves a tenant toward its wanted footprint, placing by first fit. Pure:
/// same inputs, same plan.
pub fn plan_tenant(wants: &TenantWants<'_>, nodes: &[NodeLedger]) -> Plan {
    plan_tenant_with(Policy::FirstFit, wants, nodes, 0)
}

/// [`plan_tenant`], placing a tenant that holds nothing by `policy` (`turn` is RoundRobin's;
/// see [`crate::policy::place`]). Everything else (duplicates, resize, suspend) is the same for
/// every policy. Pure: same inputs, same plan.
pub fn plan_tenant_with(
    policy: Policy,
    wants: &TenantWants<'_>,
    nodes: &[NodeLedger],
    turn: u64,
) -> Plan {
    plan_tenant_held_by(policy, wants, nodes, &holders_of(wants.uid, nodes), turn)
}

/// The positions in `nodes` of the ledgers holding an entry of this UID (a scan of every entry).
pub fn holders_of(uid: &str, nodes: &[NodeLedger]) -> Vec<usize> {
    nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.entry_of(uid).is_some())
        .map(|(i, _)| i)
        .collect()
}

/// [`plan_tenant_with`] for a caller that keeps an index of which ledgers hold which UID, so that
/// a decision need not scan every entry of the fleet: `holders` are the positions in `nodes` of
/// the ledgers holding an entry of `wants.uid`, in any order. A position that holds no such
/// entry is ignored.
pub fn plan_tenant_held_by<F: Fleet + ?Sized>(
    policy: Policy,
    wants: &TenantWants<'_>,
    nodes: &F,
    holders: &[usize],
    turn: u64,
) -> Plan {
    let mut holding = holders
        .iter()
        .filter_map(|&i| nodes.ledgers().get(i))
        .filter(|n| n.entry_of(wants.uid).is_some());
    // Almost every tenant is held on one node at most: no list is built for it.
    let (first, rest): (_, Vec<&NodeLedger>) = (holding.next(), holding.collect());
    let (one, mut many);
    let holders: &[&NodeLedger] = match first {
        None => &[],
        Some(node) if rest.is_empty() => {
            one = [node];
            &one
        }
        Some(node) => {
            many = rest;
            many.push(node);
            many.sort_by(|a, b| a.name().cmp(b.name()));
            &many
        }
    };
    if let Some(step) = plan_in_flight(wants, holders) {
        return step;
    }
    let kept_index = holders
        .iter()
        .position(|n| Some(n.name()) == wants.status_node)
        .unwrap_or(0);
    if let Some(duplicate) = holders.iter().enumerate().find(|(i, _)| *i != kept_index) {
        return Plan::Edit(Edit {
            kind: EditKind::DropDuplicate,
            node: duplicate.1.name().to_owned(),
            uid: wants.uid.to_owned(),
            entry: None,
        });
    }
    match holders.first() {
        Some(node) if node.state() == NodeState::Draining => {
            plan_move(policy, wants, node, nodes, turn)
        }
        Some(node) => plan_asked(wants, node, nodes).unwrap_or_else(|| plan_held(wants, node)),
        None => match plan_restore(wants, nodes) {
            Some(restore) => restore,
            None => plan_unplaced(policy, wants, nodes, turn),
        },
    }
}

/// A tenant whose status names a node that holds no entry of it (the entry was wiped by another
/// actor, or the node deleted and re-created) gets it back there when it still fits: the node is
/// Online or Cordoned, and the footprint fits its effective capacity beside the entries written
/// there, and it carries the labels of the tenant's node selector. Room held for waiting tenants
/// does not count against it: it is the tenant's own room.
/// `None` when the status names no node, or that node cannot take it back. The caller has found
/// that the tenant holds nothing anywhere.
pub fn plan_restore<F: Fleet + ?Sized>(wants: &TenantWants<'_>, nodes: &F) -> Option<Plan> {
    let named = wants.status_node?;
    let node = nodes.find(named)?;
    if !matches!(node.state(), NodeState::Online | NodeState::Cordoned)
        || !node.matches(wants.node_selector)
    {
        return None;
    }
    let room = node.effective_capacity().saturating_sub(node.written());
    wants.footprint.fits_within(&room).then(|| {
        Plan::Edit(Edit {
            kind: EditKind::Restore,
            node: node.name().to_owned(),
            uid: wants.uid.to_owned(),
            entry: Some(entry_for(wants)),
        })
    })
}

/// The plan for a tenant that holds nothing and gets nothing back: placed by `policy`, unless
/// suspended.
fn plan_unplaced<F: Fleet + ?Sized>(
    policy: Policy,
    wants: &TenantWants<'_>,
    nodes: &F,
    turn: u64,
) -> Plan {
    if wants.suspend {
        return Plan::SuspendedUnplaced;
    }
    match nodes.place(policy, wants.node_selector, &wants.footprint, turn) {
        Choice::Place(node) => Plan::Edit(Edit {
            kind: EditKind::Reserve,
            node: node.to_owned(),
            uid: wants.uid.to_owned(),
            entry: Some(entry_for(wants)),
        }),
        Choice::NoFit(no_fit) => Plan::Pending(no_fit),
    }
}

fn entry_for(wants: &TenantWants<'_>) -> Entry {
    Entry {
        uid: wants.uid.into(),
        tenant: wants.tenant.into(),
        resources: wants.footprint,
        replicas: None,
    }
}

/// The plan for a tenant that holds an entry on `node`.
fn plan_held(wants: &TenantWants<'_>, node: &NodeLedger) -> Plan {
    let Some(held) = node.entry_of(wants.uid) else {
        return Plan::Holding {
            node: node.name().to_owned(),
            reserved: Resources::ZERO,
        };
    };
    let resize = || {
        Plan::Edit(Edit {
            kind: EditKind::Resize,
            node: node.name().to_owned(),
            uid: wants.uid.to_owned(),
            entry: Some(entry_for(wants)),
        })
    };
    if held.resources == wants.footprint {
        // A changed name (impossible for one UID) is not worth a write; the UID is the key.
        return Plan::Holding {
            node: node.name().to_owned(),
            reserved: held.resources,
        };
    }
    if wants.footprint.fits_within(&held.resources) {
        // Shrinking never needs room, even on a node over capacity or Offline.
        return resize();
    }
    let others = node.allocated().saturating_sub(held.resources);
    let room = node.effective_capacity().saturating_sub(others);
    let offline = node.state() == NodeState::Offline;
    if !offline && wants.footprint.fits_within(&room) {
        return resize();
    }
    Plan::ResizeBlocked {
        node: node.name().to_owned(),
        reserved: held.resources,
        shortfall: Shortfall {
            requested: wants.footprint,
            available: room,
        },
        node_offline: offline,
    }
}

/// The next release for a deleted tenant: remove its entry from the first node (by name) holding
/// one. `None` when no node holds an entry: releasing again is a no-op.
pub fn plan_release<'n>(
    uid: &str,
    nodes: impl IntoIterator<Item = &'n NodeLedger>,
) -> Option<Edit> {
    nodes
        .into_iter()
        .filter(|n| n.entry_of(uid).is_some())
        .min_by(|a, b| a.name().cmp(b.name()))
        .map(|node| Edit {
            kind: EditKind::Release,
            node: node.name().to_owned(),
            uid: uid.to_owned(),
            entry: None,
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::overcommit::Overcommit;

    /// A node on the crate's one builder ([`crate::testing`]), Online, holding `entries`.
    fn ledger(name: &str, capacity: Resources, entries: &[(&str, Resources)]) -> NodeLedger {
        let node = crate::testing::ledger(name).capacity_of(capacity);
        entries
            .iter()
            .fold(node, |node, (uid, r)| node.holding(uid, *r))
            .build()
    }

    fn wants(uid: &str, footprint: Resources) -> TenantWants<'_> {
        crate::testing::wants(uid, footprint)
    }

    const EU1: Resources = Resources::new(64, 256, 8000);
    const EU2: Resources = Resources::new(32, 128, 4000);

    #[test]
    fn a_new_tenant_reserves_on_the_first_fitting_node() {
        let nodes = [ledger("node-eu-1", EU1, &[]), ledger("node-eu-2", EU2, &[])];
        let plan = plan_tenant(&wants("acme", Resources::new(2, 4, 20)), &nodes);
        let Plan::Edit(edit) = plan else {
            panic!("expected a reserve, got {plan:?}")
        };
        assert_eq!(
            (edit.kind, edit.node.as_str()),
            (EditKind::Reserve, "node-eu-1")
        );
    }

    #[test]
    fn a_tenant_already_holding_its_footprint_is_adopted_not_reserved_twice() {
        let nodes = [ledger(
            "node-eu-1",
            EU1,
            &[("acme", Resources::new(2, 4, 20))],
        )];
        assert_eq!(
            plan_tenant(&wants("acme", Resources::new(2, 4, 20)), &nodes),
            Plan::Holding {
                node: "node-eu-1".into(),
                reserved: Resources::new(2, 4, 20)
            }
        );
    }

    #[test]
    fn resize_table() {
        struct Case {
            name: &'static str,
            node: NodeLedger,
            footprint: Resources,
            resized: bool,
        }
        let cases = [
            Case {
                // acme 2→4 threads (Standalone→Cluster): others 0, room 64 ≥ 4.
                name: "growing into free room updates in place",
                node: ledger("n", EU1, &[("acme", Resources::new(2, 4, 20))]),
                footprint: Resources::new(4, 8, 40),
                resized: true,
            },
            Case {
                // others hold 60 threads; room = 64 - 60 = 4 counts acme's own 2: 4 ≥ 4 fits.
                name: "the tenant's own entry counts as room",
                node: ledger(
                    "n",
                    EU1,
                    &[
                        ("acme", Resources::new(2, 4, 20)),
                        ("x", Resources::new(60, 0, 0)),
                    ],
                ),
                footprint: Resources::new(4, 8, 40),
                resized: true,
            },
            Case {
                // others hold 61; room = 64 - 61 = 3 < 4: blocked, old entry kept.
                name: "growing past the room is blocked",
                node: ledger(
                    "n",
                    EU1,
                    &[
                        ("acme", Resources::new(2, 4, 20)),
                        ("x", Resources::new(61, 0, 0)),
                    ],
                ),
                footprint: Resources::new(4, 8, 40),
                resized: false,
            },
            Case {
                // capacity 1 thread, holding 2+61: over capacity; shrinking 2→1 needs no room.
                name: "shrinking always goes through, even over capacity",
                node: ledger(
                    "n",
                    Resources::new(1, 256, 8000),
                    &[
                        ("acme", Resources::new(2, 4, 20)),
                        ("x", Resources::new(61, 0, 0)),
                    ],
                ),
                footprint: Resources::new(1, 4, 20),
                resized: true,
            },
        ];
        for case in cases {
            let plan = plan_tenant(
                &wants("acme", case.footprint),
                std::slice::from_ref(&case.node),
            );
            let resized = matches!(&plan, Plan::Edit(e) if e.kind == EditKind::Resize);
            assert_eq!(resized, case.resized, "{}: {plan:?}", case.name);
            if !case.resized {
                assert!(matches!(plan, Plan::ResizeBlocked { .. }), "{}", case.name);
            }
        }
    }

    #[test]
    fn overcommit_table() {
        let o = |t: f64| Overcommit::from_ratios(t, 1.0, 1.0).unwrap();
        let r = Resources::new;
        struct Case {
            name: &'static str,
            node: NodeLedger,
            wants: Resources,
            reserved_or_resized: bool,
        }
        let cases = [
            Case {
                // 8 threads × 1.5 = 12 effective; x holds 8: free 12 − 8 = 4 ≥ 4.
                name: "overcommit makes room for a new tenant",
                node: ledger("n", r(8, 64, 64), &[("x", r(8, 0, 0))]).with_overcommit(o(1.5)),
                wants: r(4, 1, 1),
                reserved_or_resized: true,
            },
            Case {
                // Without it: free 8 − 8 = 0 < 4.
                name: "the same node without overcommit is full",
                node: ledger("n", r(8, 64, 64), &[("x", r(8, 0, 0))]),
                wants: r(4, 1, 1),
                reserved_or_resized: false,
            },
            Case {
                // 8 × 1.5 = 12; others hold 8; room for acme = 12 − 8 = 4 ≥ 4: resized in place.
                name: "resize room uses the effective capacity",
                node: ledger(
                    "n",
                    r(8, 64, 64),
                    &[("acme", r(2, 1, 1)), ("x", r(8, 0, 0))],
                )
                .with_overcommit(o(1.5)),
                wants: r(4, 1, 1),
                reserved_or_resized: true,
            },
            Case {
                // 10 × 0.9 = 9 effective, holding 9: full for threads, 0 free.
                name: "a ratio below 1 keeps headroom back",
                node: ledger("n", r(10, 64, 64), &[("x", r(9, 0, 0))]).with_overcommit(o(0.9)),
                wants: r(1, 1, 1),
                reserved_or_resized: false,
            },
        ];
        for case in cases {
            for policy in Policy::ALL {
                let plan = plan_tenant_with(
                    policy,
                    &wants("acme", case.wants),
                    std::slice::from_ref(&case.node),
                    0,
                );
                let edited = matches!(&plan, Plan::Edit(e)
                    if matches!(e.kind, EditKind::Reserve | EditKind::Resize));
                assert_eq!(
                    edited, case.reserved_or_resized,
                    "{} ({policy}): {plan:?}",
                    case.name
                );
            }
        }
        // The view shows the effective capacity; the ledger keeps the physical one.
        let node = ledger("n", r(8, 64, 64), &[]).with_overcommit(o(1.5));
        assert_eq!(node.view().capacity, r(12, 64, 64));
        assert_eq!(node.capacity(), r(8, 64, 64));
        assert_eq!(node.effective_capacity(), r(12, 64, 64));
    }

    #[test]
    fn duplicates_keep_the_node_the_status_names() {
        let r = Resources::new(2, 4, 20);
        let nodes = [
            ledger("a", EU1, &[("acme", r)]),
            ledger("b", EU1, &[("acme", r)]),
        ];
        let mut w = wants("acme", r);
        w.status_node = Some("b");
        let Plan::Edit(edit) = plan_tenant(&w, &nodes) else {
            panic!("expected a drop")
        };
        assert_eq!(
            (edit.kind, edit.node.as_str(), edit.entry),
            (EditKind::DropDuplicate, "a", None)
        );
    }

    #[test]
    fn a_lost_entry_is_restored_on_the_node_the_status_names_when_it_still_fits() {
        let r = Resources::new(2, 4, 20);
        // "b" is named; "a" comes first by name and has room too: the entry goes back to "b".
        let nodes = [
            ledger("a", EU1, &[]),
            ledger("b", EU2, &[("other", Resources::new(30, 4, 20))]),
        ];
        let mut w = wants("acme", r);
        w.status_node = Some("b");
        // b: 32 - 30 = 2 threads free, 2 asked.
        let Plan::Edit(edit) = plan_tenant(&w, &nodes) else {
            panic!("expected a restore")
        };
        assert_eq!((edit.kind, edit.node.as_str()), (EditKind::Restore, "b"));
        assert_eq!(edit.entry.map(|e| e.resources), Some(r));
        // Suspended, it gets its reservation back too (a suspended tenant keeps it).
        w.suspend = true;
        assert!(matches!(plan_tenant(&w, &nodes), Plan::Edit(e) if e.kind == EditKind::Restore));
    }

    #[test]
    fn a_lost_entry_that_no_longer_fits_its_node_is_placed_again_like_a_new_tenant() {
        let r = Resources::new(4, 4, 20);
        let mut w = wants("acme", r);
        w.status_node = Some("b");
        // b: 32 - 30 = 2 threads free, 4 asked: placed on a by first fit instead.
        let full_b = ledger("b", EU2, &[("other", Resources::new(30, 4, 20))]);
        let nodes = [ledger("a", EU1, &[]), full_b.clone()];
        let Plan::Edit(edit) = plan_tenant(&w, &nodes) else {
            panic!("expected a reservation")
        };
        assert_eq!((edit.kind, edit.node.as_str()), (EditKind::Reserve, "a"));
        // Nowhere else either: it waits.
        assert!(matches!(
            plan_tenant(&w, std::slice::from_ref(&full_b)),
            Plan::Pending(_)
        ));
        // The named node is gone: placed like any other.
        assert!(
            matches!(plan_tenant(&w, &nodes[..1]), Plan::Edit(e) if e.kind == EditKind::Reserve)
        );
    }

    #[test]
    fn a_lost_entry_is_not_restored_on_an_offline_or_draining_node() {
        let r = Resources::new(2, 4, 20);
        let mut w = wants("acme", r);
        w.status_node = Some("b");
        for state in [NodeState::Offline, NodeState::Draining] {
            let b = NodeLedger::new("b", state, EU2, Vec::new()).unwrap();
            assert!(
                matches!(plan_tenant(&w, &[b]), Plan::Pending(_)),
                "{state:?}"
            );
        }
        let cordoned = NodeLedger::new("b", NodeState::Cordoned, EU2, Vec::new()).unwrap();
        assert!(
            matches!(plan_tenant(&w, &[cordoned]), Plan::Edit(e) if e.kind == EditKind::Restore)
        );
    }

    #[test]
    fn room_held_for_waiting_tenants_does_not_keep_a_lost_entry_from_its_node() {
        let r = Resources::new(2, 4, 20);
        let mut w = wants("acme", r);
        w.status_node = Some("b");
        // b: 32 threads, a hold of 31 for an older waiter: 1 free in the view, 32 written.
        let mut held = ledger("b", EU2, &[]);
        held.hold(Entry {
            uid: "older".into(),
            tenant: "default/older".into(),
            resources: Resources::new(31, 4, 20),
            replicas: None,
        })
        .unwrap();
        assert!(matches!(plan_restore(&w, &[held]), Some(Plan::Edit(e)) if e.node == "b"));
    }

    #[test]
    fn a_suspended_tenant_without_a_node_is_not_placed_and_one_with_a_node_keeps_it() {
        let r = Resources::new(2, 4, 20);
        let mut w = wants("acme", r);
        w.suspend = true;
        assert_eq!(
            plan_tenant(&w, &[ledger("a", EU1, &[])]),
            Plan::SuspendedUnplaced
        );
        assert_eq!(
            plan_tenant(&w, &[ledger("a", EU1, &[("acme", r)])]),
            Plan::Holding {
                node: "a".into(),
                reserved: r
            }
        );
    }

    #[test]
    fn releasing_a_tenant_that_holds_nothing_is_a_no_op() {
        let nodes = [ledger("a", EU1, &[("other", Resources::new(1, 1, 1))])];
        assert_eq!(plan_release("acme", &nodes), None);
        let nodes = [ledger("a", EU1, &[("acme", Resources::new(1, 1, 1))])];
        let edit = plan_release("acme", &nodes).unwrap();
        assert_eq!(nodes[0].edited_entries(&edit), vec![]);
    }

    #[test]
    fn a_resize_keeps_the_entry_in_its_place() {
        let node = ledger(
            "a",
            EU1,
            &[
                ("x", Resources::new(1, 1, 1)),
                ("acme", Resources::new(1, 1, 1)),
                ("y", Resources::new(1, 1, 1)),
            ],
        );
        let Plan::Edit(edit) = plan_tenant(
            &wants("acme", Resources::new(2, 2, 2)),
            std::slice::from_ref(&node),
        ) else {
            panic!("expected a resize")
        };
        let uids: Vec<_> = node
            .edited_entries(&edit)
            .into_iter()
            .map(|e| (e.uid, e.resources.threads))
            .collect();
        assert_eq!(
            uids,
            vec![("x".into(), 1), ("acme".into(), 2), ("y".into(), 1)]
        );
    }

    /// eu-1 (64 threads) and eu-2 (32) carry region=eu, only eu-2 carries cc=sev; us-1 (64)
    /// carries region=us; plain (64) carries nothing.
    fn labelled_fleet() -> Vec<NodeLedger> {
        use crate::testing::ledger;
        vec![
            ledger("eu-1")
                .capacity_of(EU1)
                .label("region", "eu")
                .build(),
            ledger("eu-2")
                .capacity_of(EU2)
                .label("region", "eu")
                .label("cc", "sev")
                .build(),
            ledger("plain").capacity_of(EU1).build(),
            ledger("us-1")
                .capacity_of(EU1)
                .label("region", "us")
                .build(),
        ]
    }

    #[test]
    fn a_node_selector_limits_every_policy_to_the_nodes_carrying_its_labels() {
        use crate::testing::labels;
        struct Case {
            name: &'static str,
            selector: Vec<(&'static str, &'static str)>,
            footprint: Resources,
            // FirstFit, BestFit, LeastLoaded, RoundRobin (turn 0)
            want: [Option<&'static str>; 4],
        }
        let r = Resources::new;
        let cases = [
            Case {
                // No selector: first fit takes eu-1 (first by name); BestFit the smallest,
                // eu-2 (32 threads); LeastLoaded the largest, tie of 64s to eu-1.
                name: "no selector: any node",
                selector: vec![],
                footprint: r(2, 4, 20),
                want: [Some("eu-1"), Some("eu-2"), Some("eu-1"), Some("eu-1")],
            },
            Case {
                // Only eu-1 and eu-2 carry region=eu; us-1 and plain are never candidates.
                name: "region=eu: the eu nodes only",
                selector: vec![("region", "eu")],
                footprint: r(2, 4, 20),
                want: [Some("eu-1"), Some("eu-2"), Some("eu-1"), Some("eu-1")],
            },
            Case {
                // region=eu and cc=sev: eu-2 alone, even for FirstFit and LeastLoaded.
                name: "every pair must match",
                selector: vec![("region", "eu"), ("cc", "sev")],
                footprint: r(2, 4, 20),
                want: [Some("eu-2"); 4],
            },
            Case {
                // 40 threads: only the 64-thread nodes fit; of them only us-1 is region=us.
                name: "a selector and a footprint together",
                selector: vec![("region", "us")],
                footprint: r(40, 4, 20),
                want: [Some("us-1"); 4],
            },
            Case {
                // cc=sev is on eu-2 (32 threads): 40 > 32, and plain's 64 do not count.
                name: "room on nodes without the labels does not count",
                selector: vec![("cc", "sev")],
                footprint: r(40, 4, 20),
                want: [None; 4],
            },
        ];
        let nodes = labelled_fleet();
        for case in cases {
            let selector = labels(&case.selector);
            let mut w = wants("acme", case.footprint);
            w.node_selector = Some(&selector);
            for (policy, want) in Policy::ALL.into_iter().zip(case.want) {
                let plan = plan_tenant_with(policy, &w, &nodes, 0);
                let got = match &plan {
                    Plan::Edit(edit) if edit.kind == EditKind::Reserve => Some(edit.node.as_str()),
                    Plan::Pending(_) => None,
                    other => panic!("{}: {other:?}", case.name),
                };
                assert_eq!(got, want, "{} ({policy})", case.name);
            }
        }
    }

    #[test]
    fn a_selector_no_node_carries_is_named_in_the_no_fit_answer() {
        use crate::testing::labels;
        let nodes = labelled_fleet();
        let selector = labels(&[("region", "eu"), ("cc", "tdx")]);
        let mut w = wants("acme", Resources::new(1, 1, 1));
        w.node_selector = Some(&selector);
        let Plan::Pending(no_fit) = plan_tenant(&w, &nodes) else {
            panic!("no node carries cc=tdx")
        };
        assert_eq!((no_fit.eligible_nodes, no_fit.labelled_nodes), (0, 0));
        assert_eq!(
            no_fit.to_string(),
            "no node has the labels cc=tdx, region=eu (nodeSelector)"
        );
        // Nodes carry the labels but have no room: the shortfall among them alone.
        // cc=sev: eu-2 only, 32 threads free; 40 asked, short by 8 (plain's 64 do not count).
        let selector = labels(&[("cc", "sev")]);
        let mut w = wants("acme", Resources::new(40, 1, 1));
        w.node_selector = Some(&selector);
        let Plan::Pending(no_fit) = plan_tenant(&w, &nodes) else {
            panic!("40 threads do not fit eu-2")
        };
        assert_eq!(
            no_fit.to_string(),
            "no node with the labels cc=sev (nodeSelector) has room: threads: needs 40, at most \
             32 free (short by 8)"
        );
        // They carry the labels but take no new tenants.
        let cordoned = [crate::testing::ledger("eu-2")
            .capacity_of(EU2)
            .label("cc", "sev")
            .state(NodeState::Cordoned)
            .build()];
        let Plan::Pending(no_fit) = plan_tenant(&w, &cordoned) else {
            panic!("a cordoned node takes nothing")
        };
        assert_eq!(
            no_fit.to_string(),
            "no node with the labels cc=sev (nodeSelector) is Online with room to take new tenants"
        );
    }

    #[test]
    fn a_tenant_holding_an_entry_keeps_it_and_resizes_there_when_its_node_loses_the_labels() {
        use crate::testing::{labels, ledger};
        // acme holds 2 threads on n, which no longer carries region=eu: it stays, and grows to
        // 4 in place (64 - 2 others... nothing else held: room 64 ≥ 4).
        let nodes = [ledger("n")
            .capacity_of(EU1)
            .label("region", "us")
            .holding("acme", (2, 4, 20))
            .build()];
        let selector = labels(&[("region", "eu")]);
        let mut w = wants("acme", Resources::new(2, 4, 20));
        w.node_selector = Some(&selector);
        w.status_node = Some("n");
        assert_eq!(
            plan_tenant(&w, &nodes),
            Plan::Holding {
                node: "n".into(),
                reserved: Resources::new(2, 4, 20)
            }
        );
        w.footprint = Resources::new(4, 8, 40);
        assert!(
            matches!(plan_tenant(&w, &nodes), Plan::Edit(e) if e.kind == EditKind::Resize && e.node == "n")
        );
    }

    #[test]
    fn a_lost_entry_is_restored_only_on_a_node_that_carries_the_selectors_labels() {
        use crate::testing::{labels, ledger};
        let selector = labels(&[("region", "eu")]);
        let mut w = wants("acme", Resources::new(2, 4, 20));
        w.node_selector = Some(&selector);
        w.status_node = Some("b");
        // b is named and has room but now carries region=us: placed anew on a (region=eu).
        let nodes = [
            ledger("a").capacity_of(EU1).label("region", "eu").build(),
            ledger("b").capacity_of(EU1).label("region", "us").build(),
        ];
        assert_eq!(plan_restore(&w, &nodes), None);
        assert!(
            matches!(plan_tenant(&w, &nodes), Plan::Edit(e) if e.kind == EditKind::Reserve && e.node == "a")
        );
        // b carries it: restored there.
        let nodes = [ledger("b").capacity_of(EU1).label("region", "eu").build()];
        assert!(
            matches!(plan_tenant(&w, &nodes), Plan::Edit(e) if e.kind == EditKind::Restore && e.node == "b")
        );
    }

    #[test]
    fn a_plan_from_an_index_of_holders_is_the_plan_from_a_scan() {
        let r = |t| Resources::new(t, 1, 1);
        let nodes = vec![
            ledger("a", r(8), &[("x", r(1))]),
            ledger("b", r(8), &[("acme", r(2))]),
            ledger("c", r(8), &[("acme", r(2)), ("y", r(1))]),
        ];
        for footprint in [r(2), r(3), r(20)] {
            let want = wants("acme", footprint);
            let scanned = plan_tenant_with(Policy::FirstFit, &want, &nodes, 0);
            // Any order, and a position that holds nothing, give the same plan.
            let indexed = plan_tenant_held_by(Policy::FirstFit, &want, &nodes, &[2, 0, 1], 0);
            assert_eq!(indexed, scanned, "{footprint}");
            assert_eq!(holders_of("acme", &nodes), [1, 2]);
        }
    }
}
