//! Moving tenants off a draining node, or off an Online one to make room for a waiting tenant
//! (a move *asked* of them), make-before-break: the steps planning (plan.rs) takes for a tenant
//! holding room on one. The move a tenant's status records
//! ([`Migration`](crate::ledger::Migration)) and why a tenant is not moving ([`MoveBlock`]) are
//! words of a plan, in ledger.rs.
//!
//! ```text
//!   holds on S (Draining) ──plan_move──▶ Edit Migrate: the target entry on T (policy, not S)
//!                                   └──▶ MoveBlocked { NoRoom }: stays on S until room appears
//!   (the caller records the move in the tenant's status: Migrating, migration {S → T})
//!   holds on S and T, status records S → T ──plan_in_flight──▶ Edit FinishMigration: release S
//!                                                         └──▶ Edit AbortMigration: release T
//!   holds on T alone ──▶ an ordinary tenant of T (its status drops the record)
//! ```
//!
//! Rules enforced here (docs/design.md, "Moves"):
//! - a tenant always holds at least one entry: the target entry is written before the source is
//!   released, and a move is finished only while its status records it, so a crash between any
//!   two writes leaves a state these rules carry on from;
//! - a move carries the entry as held (its amounts); a resize is a separate step on the target;
//! - the target is chosen by the caller's policy among nodes that take new tenants (never the
//!   source, which is draining) and carry the labels of the tenant's node selector, seeing the
//!   room held for older waiting tenants;
//! - an asked move goes to the node asked (`TenantWants::asked`) when that node takes new
//!   tenants, carries the tenant's labels and has room for the entry; otherwise the tenant stays
//!   where it is (the asker plans again);
//! - a recorded move is finished only while its source is still draining, or the move is still
//!   asked, and its target Online; otherwise it is aborted (the target entry released) and the
//!   tenant stays on its source: a move asked by a process that crashed is rolled back;
//! - two entries without a recorded move are duplicates (the ordinary rule keeps the one the
//!   status names): a crash before the status recorded the move rolls it back.

use crate::fit::{Choice, NodeState};
use crate::fleet::Fleet;
use crate::ledger::{Edit, EditKind, Entry, MoveBlock, NodeLedger, Plan, TenantWants};
use crate::policy::Policy;
use crate::resources::Resources;

/// The next step of a move the status records, when both its nodes hold the tenant (`holders`
/// sorted by name, each holding an entry of `wants.uid`). `None` when no such move is in flight.
pub(crate) fn plan_in_flight(wants: &TenantWants<'_>, holders: &[&NodeLedger]) -> Option<Plan> {
    let migration = wants.migration?;
    let from = holders.iter().find(|n| n.name() == migration.from)?;
    let to = holders.iter().find(|n| n.name() == migration.to)?;
    // A third holder is a duplicate: it goes first.
    if let Some(other) = holders
        .iter()
        .find(|n| n.name() != migration.from && n.name() != migration.to)
    {
        return Some(release(EditKind::DropDuplicate, other, wants));
    }
    let wanted = from.state() == NodeState::Draining || wants.asked == Some(migration);
    let proceed = wanted && to.state() == NodeState::Online;
    Some(if proceed {
        release(EditKind::FinishMigration, from, wants)
    } else {
        release(EditKind::AbortMigration, to, wants)
    })
}

/// The move of a tenant holding its only entry on `source`, which is draining: the target entry
/// on the node `policy` chooses among those that take new tenants, or why it stays.
pub(crate) fn plan_move<F: Fleet + ?Sized>(
    policy: Policy,
    wants: &TenantWants<'_>,
    source: &NodeLedger,
    nodes: &F,
    turn: u64,
) -> Plan {
    let Some(held) = source.entry_of(wants.uid) else {
        return Plan::Holding {
            node: source.name().to_owned(),
            reserved: Resources::ZERO,
        };
    };
    // The source takes no new tenants (it is draining), so the policy never picks it.
    match nodes.place(policy, wants.node_selector, &held.resources, turn) {
        Choice::Place(target) => Plan::Edit(Edit {
            kind: EditKind::Migrate,
            node: target.to_owned(),
            uid: wants.uid.to_owned(),
            entry: Some(Entry {
                uid: wants.uid.into(),
                tenant: wants.tenant.into(),
                resources: held.resources,
                replicas: None,
            }),
        }),
        Choice::NoFit(no_fit) => Plan::MoveBlocked {
            node: source.name().to_owned(),
            reserved: held.resources,
            why: MoveBlock::NoRoom(no_fit),
        },
    }
}

/// The move asked of a tenant holding its only entry on `source` (Online): the target entry on
/// the node asked, or `None` when that node cannot take it now (it stays).
pub(crate) fn plan_asked<F: Fleet + ?Sized>(
    wants: &TenantWants<'_>,
    source: &NodeLedger,
    nodes: &F,
) -> Option<Plan> {
    let asked = wants
        .asked
        .filter(|a| a.from == source.name() && a.to != a.from)?;
    let held = source.entry_of(wants.uid)?;
    let target = nodes.find(asked.to)?;
    let view = target.view();
    let fits = view.takes_new_tenants()
        && target.matches(wants.node_selector)
        && held.resources.fits_within(&view.free());
    fits.then(|| {
        Plan::Edit(Edit {
            kind: EditKind::Migrate,
            node: asked.to.to_owned(),
            uid: wants.uid.to_owned(),
            entry: Some(Entry {
                uid: wants.uid.into(),
                tenant: wants.tenant.into(),
                resources: held.resources,
                replicas: None,
            }),
        })
    })
}

fn release(kind: EditKind, node: &NodeLedger, wants: &TenantWants<'_>) -> Plan {
    Plan::Edit(Edit {
        kind,
        node: node.name().to_owned(),
        uid: wants.uid.to_owned(),
        entry: None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ledger::Migration;
    use crate::plan::plan_tenant_with;
    use crate::testing::{ledger, wants};

    const S: &str = "s";
    const T: &str = "t";

    fn moving<'a>(uid: &'a str, migration: Option<Migration<'a>>) -> TenantWants<'a> {
        TenantWants {
            migration,
            status_node: Some(S),
            ..wants(uid, (2, 2, 2))
        }
    }

    fn recorded() -> Option<Migration<'static>> {
        Some(Migration { from: S, to: T })
    }

    #[test]
    fn a_tenant_on_a_draining_node_moves_to_the_node_the_policy_chooses_with_its_entry_as_held() {
        // s is draining and holds acme's 2/2/2; a (4 threads) and t (8) are Online: first fit
        // takes a, by name, with the same 2/2/2 (not acme's wanted 3/3/3: a resize comes later).
        let nodes = [
            ledger("a").capacity(4, 4, 4).build(),
            ledger(S)
                .capacity(8, 8, 8)
                .state(NodeState::Draining)
                .holding("acme", (2, 2, 2))
                .build(),
            ledger(T).capacity(8, 8, 8).build(),
        ];
        let acme = TenantWants {
            footprint: Resources::new(3, 3, 3),
            ..moving("acme", None)
        };
        let plan = plan_tenant_with(Policy::FirstFit, &acme, &nodes, 0);
        let Plan::Edit(edit) = plan else {
            panic!("{plan:?}")
        };
        assert_eq!((edit.kind, edit.node.as_str()), (EditKind::Migrate, "a"));
        assert_eq!(edit.entry.unwrap().resources, Resources::new(2, 2, 2));
    }

    #[test]
    fn a_tenant_that_fits_nowhere_else_stays_and_says_why() {
        // t has 1 thread free: acme's 2 fit nowhere but on its draining source.
        let nodes = [
            ledger(S)
                .capacity(8, 8, 8)
                .state(NodeState::Draining)
                .holding("acme", (2, 2, 2))
                .build(),
            ledger(T).capacity(1, 8, 8).build(),
        ];
        let plan = plan_tenant_with(Policy::FirstFit, &moving("acme", None), &nodes, 0);
        assert!(
            matches!(&plan, Plan::MoveBlocked { node, why: MoveBlock::NoRoom(_), .. } if node == S),
            "{plan:?}"
        );
    }

    #[test]
    fn a_tenant_with_a_node_selector_moves_only_to_a_node_carrying_its_labels() {
        use crate::testing::labels;
        // a (first by name, room) lacks region=eu; t carries it: the move goes to t. Without t,
        // it stays and says which labels no node has.
        let a = ledger("a").capacity(8, 8, 8).label("region", "us").build();
        let s = ledger(S)
            .capacity(8, 8, 8)
            .label("region", "eu")
            .state(NodeState::Draining)
            .holding("acme", (2, 2, 2))
            .build();
        let t = ledger(T).capacity(8, 8, 8).label("region", "eu").build();
        let selector = labels(&[("region", "eu")]);
        let acme = TenantWants {
            node_selector: Some(&selector),
            ..moving("acme", None)
        };
        let nodes = [a.clone(), s.clone(), t];
        for policy in Policy::ALL {
            let plan = plan_tenant_with(policy, &acme, &nodes, 0);
            assert_eq!(edit_of(&plan), (EditKind::Migrate, T), "{policy}");
        }
        let plan = plan_tenant_with(Policy::FirstFit, &acme, &[a, s], 0);
        let Plan::MoveBlocked {
            why: MoveBlock::NoRoom(no_fit),
            ..
        } = plan
        else {
            panic!("{plan:?}")
        };
        // s carries the labels but is draining: 1 labelled node, none eligible.
        assert_eq!((no_fit.labelled_nodes, no_fit.eligible_nodes), (1, 0));
    }

    /// The plan for acme holding 2/2/2 on both s (in `source` state) and t (in `target` state).
    fn both(source: NodeState, target: NodeState, migration: Option<Migration<'_>>) -> Plan {
        let nodes = [
            ledger(S)
                .capacity(8, 8, 8)
                .state(source)
                .holding("acme", (2, 2, 2))
                .build(),
            ledger(T)
                .capacity(8, 8, 8)
                .state(target)
                .holding("acme", (2, 2, 2))
                .build(),
        ];
        plan_tenant_with(Policy::FirstFit, &moving("acme", migration), &nodes, 0)
    }

    fn edit_of(plan: &Plan) -> (EditKind, &str) {
        match plan {
            Plan::Edit(edit) => (edit.kind, edit.node.as_str()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_recorded_move_finishes_by_releasing_the_source_and_never_the_other_way() {
        let plan = both(NodeState::Draining, NodeState::Online, recorded());
        assert_eq!(edit_of(&plan), (EditKind::FinishMigration, S));
    }

    #[test]
    fn a_move_not_yet_recorded_is_rolled_back_like_any_duplicate() {
        // A crash after the target write, before the status recorded the move: the status
        // names s, so t's entry is the duplicate.
        let plan = both(NodeState::Draining, NodeState::Online, None);
        assert_eq!(edit_of(&plan), (EditKind::DropDuplicate, T));
    }

    #[test]
    fn a_move_is_aborted_when_the_drain_is_cancelled_or_the_target_stops_taking_tenants() {
        // | source   | target   | step              |
        // | Online   | Online   | abort (cancelled) |
        // | Cordoned | Online   | abort             |
        // | Draining | Offline  | abort             |
        // | Draining | Cordoned | abort             |
        // | Draining | Draining | abort             |
        for (source, target) in [
            (NodeState::Online, NodeState::Online),
            (NodeState::Cordoned, NodeState::Online),
            (NodeState::Draining, NodeState::Offline),
            (NodeState::Draining, NodeState::Cordoned),
            (NodeState::Draining, NodeState::Draining),
        ] {
            let plan = both(source, target, recorded());
            assert_eq!(
                edit_of(&plan),
                (EditKind::AbortMigration, T),
                "{source:?} → {target:?}"
            );
        }
    }

    #[test]
    fn a_move_asked_to_make_room_goes_to_the_node_asked_and_finishes_while_asked() {
        use crate::testing::labels;
        let asked = Some(Migration { from: S, to: T });
        // s is Online: asked, acme moves to t (not a, first by name); not asked, it stays.
        let nodes = |t_threads: u64, t_state: NodeState| {
            [
                ledger("a").capacity(8, 8, 8).build(),
                ledger(S)
                    .capacity(8, 8, 8)
                    .holding("acme", (2, 2, 2))
                    .build(),
                ledger(T)
                    .capacity(t_threads, 8, 8)
                    .state(t_state)
                    .label("zone", "x")
                    .build(),
            ]
        };
        let acme = TenantWants {
            asked,
            ..moving("acme", None)
        };
        let plan = plan_tenant_with(Policy::FirstFit, &acme, &nodes(8, NodeState::Online), 0);
        assert_eq!(edit_of(&plan), (EditKind::Migrate, T));
        let still = |plan: &Plan| matches!(plan, Plan::Holding { node, .. } if node == S);
        let not_asked = moving("acme", None);
        let plan = plan_tenant_with(
            Policy::FirstFit,
            &not_asked,
            &nodes(8, NodeState::Online),
            0,
        );
        assert!(still(&plan), "{plan:?}");
        // The node asked has no room, does not take tenants, or lacks the tenant's labels: it
        // stays where it is.
        let plan = plan_tenant_with(Policy::FirstFit, &acme, &nodes(1, NodeState::Online), 0);
        assert!(still(&plan), "{plan:?}");
        let plan = plan_tenant_with(Policy::FirstFit, &acme, &nodes(8, NodeState::Cordoned), 0);
        assert!(still(&plan), "{plan:?}");
        let elsewhere = labels(&[("zone", "y")]);
        let picky = TenantWants {
            node_selector: Some(&elsewhere),
            ..acme
        };
        let plan = plan_tenant_with(Policy::FirstFit, &picky, &nodes(8, NodeState::Online), 0);
        assert!(still(&plan), "{plan:?}");
        // Recorded and still asked: finished although s stays Online. Recorded, no longer asked
        // (the asker crashed, or the waiter went): rolled back.
        let recorded_and_asked = TenantWants {
            asked,
            ..moving("acme", recorded())
        };
        let both_hold = [
            ledger(S)
                .capacity(8, 8, 8)
                .holding("acme", (2, 2, 2))
                .build(),
            ledger(T)
                .capacity(8, 8, 8)
                .holding("acme", (2, 2, 2))
                .build(),
        ];
        let plan = plan_tenant_with(Policy::FirstFit, &recorded_and_asked, &both_hold, 0);
        assert_eq!(edit_of(&plan), (EditKind::FinishMigration, S));
        let plan = plan_tenant_with(Policy::FirstFit, &moving("acme", recorded()), &both_hold, 0);
        assert_eq!(edit_of(&plan), (EditKind::AbortMigration, T));
    }

    #[test]
    fn a_third_holder_of_a_moving_tenant_is_dropped_first() {
        let nodes = [
            ledger("a")
                .capacity(8, 8, 8)
                .holding("acme", (2, 2, 2))
                .build(),
            ledger(S)
                .capacity(8, 8, 8)
                .state(NodeState::Draining)
                .holding("acme", (2, 2, 2))
                .build(),
            ledger(T)
                .capacity(8, 8, 8)
                .holding("acme", (2, 2, 2))
                .build(),
        ];
        let plan = plan_tenant_with(Policy::FirstFit, &moving("acme", recorded()), &nodes, 0);
        assert_eq!(edit_of(&plan), (EditKind::DropDuplicate, "a"));
    }

    #[test]
    fn once_only_the_target_holds_it_the_tenant_rests_there() {
        let nodes = [
            ledger(S)
                .capacity(8, 8, 8)
                .state(NodeState::Draining)
                .build(),
            ledger(T)
                .capacity(8, 8, 8)
                .holding("acme", (2, 2, 2))
                .build(),
        ];
        let plan = plan_tenant_with(Policy::FirstFit, &moving("acme", recorded()), &nodes, 0);
        assert!(
            matches!(&plan, Plan::Holding { node, .. } if node == T),
            "{plan:?}"
        );
    }
}
