//! The Tenant status as a view of what the Node holds: what a decision (a resting [`Plan`])
//! means for the status, and the full status written from it. Pure: no API, no clock (the time
//! is handed in), so every phase, reason and message is table-tested here.
//!
//! ```text
//!   Plan ──wanted_status──▶ WantedStatus ──(asked_for, lost note)──▶ status_for ──▶ TenantStatus
//! ```
//!
//! Rules enforced here:
//! - the phase, node and reservation are those of the plan (the Node's entry), never of the spec:
//!   a tenant that holds nothing says so (`reserved` zero, no node);
//! - a suspended tenant keeps its reservation and asks for nothing more;
//! - a spec that cannot be used keeps whatever is held and says why; an undecided tenant keeps
//!   the reservation its status last named and says why nothing moved;
//! - a reservation lost on a node the status names (not where it is, nor where a recorded move
//!   goes) is said in the message and, when nothing is held, in the reason;
//! - the Placed condition keeps its transition time while its status stays the same, so a
//!   re-evaluation with nothing changed yields the same status (and no write).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use placement::{MoveBlock, Plan, Resources, SpreadPlaced};

use crate::api::{
    Condition, MigrationStatus, PLACED_CONDITION, PlacedReason, SpreadPlacement, Tenant,
    TenantPhase, TenantStatus,
};
use crate::controller::state::orders::Asked;
use crate::error::Error;

/// What the status should say, before it is merged with the current one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WantedStatus {
    pub phase: TenantPhase,
    /// The node it holds its reservation on (the one it leaves, while it moves); none while it
    /// holds nothing.
    pub node: Option<String>,
    pub reserved: Resources,
    pub message: String,
    /// The Placed condition's status: it holds the reservation its spec asks, where it asks.
    pub placed: bool,
    pub reason: PlacedReason,
    /// The move in flight, while the tenant is reserved on both nodes.
    pub migration: Option<MigrationStatus>,
    /// A spread tenant's replicas, by node name (empty for any other).
    pub placements: Vec<SpreadPlacement>,
}

impl WantedStatus {
    /// Prefixes the note on a lost reservation; a status that holds nothing takes its reason.
    pub(super) fn with_lost_note(&mut self, note: &str) {
        self.message = format!("{note}; {}", self.message);
        if !self.placed {
            self.reason = PlacedReason::ReservationLost;
        }
    }
}

/// The note on a lost reservation that the tenant's status carries, if it carries one.
pub(super) fn lost_note(tenant: &Tenant) -> Option<&str> {
    if tenant.placed_reason() != Some(PlacedReason::ReservationLost) {
        return None;
    }
    let status = tenant.status.as_ref()?;
    status.message.split_once("; ").map(|(note, _)| note)
}

/// The status a resting plan means. Pure.
pub fn wanted_status(plan: &Plan, suspend: bool, footprint: Resources) -> WantedStatus {
    let holding = |phase, node: &str, reserved, message, reason| WantedStatus {
        phase,
        node: Some(node.to_owned()),
        reserved,
        message,
        placed: true,
        reason,
        migration: None,
        placements: Vec::new(),
    };
    match plan {
        Plan::Holding { node, reserved } if suspend => holding(
            TenantPhase::Suspended,
            node,
            *reserved,
            format!("suspended; keeps its reservation of {reserved} on {node}"),
            PlacedReason::Suspended,
        ),
        Plan::Holding { node, reserved } => holding(
            TenantPhase::Active,
            node,
            *reserved,
            format!("holds {reserved} on {node}"),
            PlacedReason::Reserved,
        ),
        // A suspended tenant asks for nothing: its larger footprint waits until it resumes.
        Plan::ResizeBlocked { node, reserved, .. } if suspend => holding(
            TenantPhase::Suspended,
            node,
            *reserved,
            format!(
                "suspended; keeps its reservation of {reserved} on {node}; its new footprint of \
                 {footprint} is asked for when it resumes"
            ),
            PlacedReason::Suspended,
        ),
        Plan::ResizeBlocked {
            node,
            reserved,
            shortfall,
            node_offline,
        } => {
            let why = if *node_offline {
                format!("{node} is Offline")
            } else {
                shortfall.to_string()
            };
            holding(
                TenantPhase::Resizing,
                node,
                *reserved,
                format!(
                    "keeps {reserved} on {node}; the new footprint of {footprint} does not fit there yet ({why})"
                ),
                PlacedReason::ResizeBlocked,
            )
        }
        Plan::Pending(no_fit) => WantedStatus {
            phase: TenantPhase::PendingCapacity,
            node: None,
            reserved: Resources::ZERO,
            message: format!("waiting for capacity for {footprint}: {no_fit}"),
            placed: false,
            reason: PlacedReason::NoCapacity,
            migration: None,
            placements: Vec::new(),
        },
        Plan::SuspendedUnplaced => WantedStatus {
            phase: TenantPhase::Suspended,
            node: None,
            reserved: Resources::ZERO,
            message: "suspended; holds no reservation and will be placed when resumed".into(),
            placed: false,
            reason: PlacedReason::Suspended,
            migration: None,
            placements: Vec::new(),
        },
        Plan::Migrating { from, to, reserved } => WantedStatus {
            phase: TenantPhase::Migrating,
            node: Some(from.clone()),
            reserved: *reserved,
            message: format!(
                "moving from {from} to {to} ({from} is draining): reserved on both until the move \
                 completes"
            ),
            placed: true,
            reason: PlacedReason::Migrating,
            migration: Some(MigrationStatus {
                from: from.clone(),
                to: to.clone(),
            }),
            placements: Vec::new(),
        },
        Plan::MoveBlocked {
            node,
            reserved,
            why,
        } => {
            let (why, reason) = match why {
                MoveBlock::NoRoom(no_fit) => (
                    format!("no other node can take it now ({no_fit}); it moves when room appears"),
                    PlacedReason::MigrationBlocked,
                ),
                MoveBlock::Turn { in_flight } => (
                    format!(
                        "it moves when one of the {in_flight} moves in flight completes \
                         (--max-migrations)"
                    ),
                    PlacedReason::MigrationWaiting,
                ),
            };
            // A new footprint waits too: it is asked for on the node the tenant moves to.
            let (phase, resize) = if suspend {
                (TenantPhase::Suspended, String::new())
            } else if footprint != *reserved {
                (
                    TenantPhase::Resizing,
                    format!("; its new footprint of {footprint} is asked for once it has moved"),
                )
            } else {
                (TenantPhase::Active, String::new())
            };
            holding(
                phase,
                node,
                *reserved,
                format!("holds {reserved} on {node}, which is draining; {why}{resize}"),
                reason,
            )
        }
        Plan::Queued { behind } => WantedStatus {
            phase: TenantPhase::PendingCapacity,
            node: None,
            reserved: Resources::ZERO,
            message: format!(
                "waiting its turn for {footprint}: StrictFIFO places tenants oldest first, and \
                 the older {behind} still waits for room"
            ),
            placed: false,
            reason: PlacedReason::QueuedBehindOlder,
            migration: None,
            placements: Vec::new(),
        },
        Plan::Spread { placed, reserved } => {
            let (node, placements, where_) = spread_over(placed);
            let (phase, message, reason) = if suspend {
                (
                    TenantPhase::Suspended,
                    format!("suspended; keeps its reservation of {reserved} on {where_}"),
                    PlacedReason::Suspended,
                )
            } else {
                (
                    TenantPhase::Active,
                    format!("holds {reserved} on {where_}"),
                    PlacedReason::Reserved,
                )
            };
            WantedStatus {
                placements,
                ..holding(phase, &node, *reserved, message, reason)
            }
        }
        Plan::SpreadPending(why) => WantedStatus {
            phase: TenantPhase::PendingCapacity,
            node: None,
            reserved: Resources::ZERO,
            message: format!(
                "waiting for capacity for {} replicas spread over {}: {why}",
                why.replicas,
                spread_word(why.spread)
            ),
            placed: false,
            reason: PlacedReason::NoCapacity,
            migration: None,
            placements: Vec::new(),
        },
        Plan::SpreadBlocked {
            placed,
            reserved,
            why,
        } => {
            let (node, placements, where_) = spread_over(placed);
            let draining = *reserved == footprint;
            let (phase, message, reason) = if suspend {
                (
                    TenantPhase::Suspended,
                    format!("suspended; keeps its reservation of {reserved} on {where_}"),
                    PlacedReason::Suspended,
                )
            } else if draining {
                (
                    TenantPhase::Active,
                    format!(
                        "holds {reserved} on {where_}; a node it is on drains, and no other \
                         placement keeps its spread ({why}); it moves when room appears"
                    ),
                    PlacedReason::MigrationBlocked,
                )
            } else {
                (
                    TenantPhase::Resizing,
                    format!(
                        "keeps {reserved} on {where_}; its new footprint of {footprint} in {} \
                         replicas does not fit spread ({why})",
                        why.replicas
                    ),
                    PlacedReason::ResizeBlocked,
                )
            };
            WantedStatus {
                placements,
                ..holding(phase, &node, *reserved, message, reason)
            }
        }
        // decide() never answers an edit; treat one as "not at rest yet".
        Plan::Edit(edit) => WantedStatus {
            phase: TenantPhase::Pending,
            node: None,
            reserved: Resources::ZERO,
            message: format!("placement in progress on {}", edit.node),
            placed: false,
            reason: PlacedReason::InProgress,
            migration: None,
            placements: Vec::new(),
        },
    }
}

/// Where a spread tenant holds replicas: the first node by name (`nodeName`), the placements
/// its status lists (none while an entry from before it was spread remains), and the nodes as a
/// message names them (`a1 (fsn1), b1 (nbg1)`).
fn spread_over(placed: &[SpreadPlaced]) -> (String, Vec<SpreadPlacement>, String) {
    let node = placed.first().map(|p| p.node.clone()).unwrap_or_default();
    let placements = placed
        .iter()
        .map(|p| {
            Some(SpreadPlacement {
                node: p.node.clone(),
                zone: p.zone.clone().unwrap_or_default(),
                replicas: p.replicas?,
            })
        })
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default();
    let where_ = placed
        .iter()
        .map(|p| match &p.zone {
            Some(zone) => format!("{} ({zone})", p.node),
            None => p.node.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ");
    (node, placements, where_)
}

/// The nodes of a spread tenant's placements, comma-separated.
fn placed_on(placements: &[SpreadPlacement]) -> String {
    placements
        .iter()
        .map(|p| p.node.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

fn spread_word(spread: placement::Spread) -> &'static str {
    match spread {
        placement::Spread::Zones => "zones",
        placement::Spread::Nodes | placement::Spread::None => "nodes",
    }
}

/// The message of a move asked to make room (`--make-room-moves`) says so, rather than that its
/// source is draining. Pure.
pub(super) fn asked_for(wanted: &mut WantedStatus, asked: &Asked) {
    let moving = wanted
        .migration
        .as_ref()
        .is_some_and(|m| m.from == asked.from && m.to == asked.to);
    if moving {
        wanted.message = format!(
            "moving from {} to {} to make room for {}: reserved on both until the move completes",
            asked.from, asked.to, asked.waiter
        );
    }
}

/// What the status says while a decision cannot be made (an unreadable node, conflicts past the
/// budget, a failed write): the reservation as last seen, and why nothing moved.
pub(super) fn undecided(tenant: &Tenant, error: &Error) -> WantedStatus {
    let status = tenant.status.clone().unwrap_or_default();
    let node = Some(status.node_name).filter(|n| !n.is_empty());
    WantedStatus {
        phase: status.phase,
        placed: node.is_some(),
        node,
        reserved: status.reserved.to_resources().unwrap_or_default(),
        message: format!("cannot be decided now, will retry: {error}"),
        reason: PlacedReason::Undecided,
        migration: status.migration,
        placements: status.placements,
    }
}

/// The full status for a wanted status, keeping the condition's transition time when it did not flip.
pub fn status_for(tenant: &Tenant, wanted: &WantedStatus, now: &Time) -> TenantStatus {
    let previous = tenant
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let generation = tenant.metadata.generation;
    TenantStatus {
        phase: wanted.phase,
        node_name: wanted.node.clone().unwrap_or_default(),
        reserved: wanted.reserved.into(),
        message: wanted.message.clone(),
        observed_generation: generation,
        migration: wanted.migration.clone(),
        placements: wanted.placements.clone(),
        placed_on: placed_on(&wanted.placements),
        // The sentence is `message`'s, and the generation `observedGeneration`'s: the condition
        // says each once, not twice (every byte of a status is decoded, stored and sent to
        // every watcher at each write).
        conditions: vec![Condition::keeping_time(
            previous,
            PLACED_CONDITION,
            if wanted.placed { "True" } else { "False" },
            wanted.reason.as_str(),
            String::new(),
            None,
            now,
        )],
    }
}

/// What the status says of a spec that cannot be used: whatever is `held` stays, and why nothing
/// else happens. Pure.
pub(super) fn unusable_spec(
    held: Option<(String, Resources)>,
    problem: &impl std::fmt::Display,
) -> WantedStatus {
    WantedStatus {
        phase: if held.is_some() {
            TenantPhase::Active
        } else {
            TenantPhase::Pending
        },
        node: held.as_ref().map(|(n, _)| n.clone()),
        reserved: held.map(|(_, r)| r).unwrap_or_default(),
        message: format!("spec cannot be used, nothing changed: {problem}"),
        placed: false,
        reason: PlacedReason::InvalidSpec,
        migration: None,
        placements: Vec::new(),
    }
}

/// The node the tenant's status names that holds no entry of it any more, when the entry could
/// not go back there (`wanted` names another node, and not the one a recorded move goes to):
/// its reservation there was lost. Pure.
pub(super) fn lost_on<'a>(
    status: Option<&'a TenantStatus>,
    wanted: &WantedStatus,
) -> Option<&'a str> {
    let named = status
        .map(|s| s.node_name.as_str())
        .filter(|n| !n.is_empty())?;
    let moved_to = status
        .and_then(|s| s.migration.as_ref())
        .map(|m| m.to.as_str());
    let elsewhere = |node: &str| wanted.node.as_deref() != Some(node);
    (elsewhere(named) && moved_to.is_none_or(elsewhere)).then_some(named)
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A wanted status of this phase, on `node`, for `reason` (nothing reserved, no message).
    pub(in super::super) fn wanted(
        phase: TenantPhase,
        node: Option<&str>,
        reason: PlacedReason,
    ) -> WantedStatus {
        WantedStatus {
            phase,
            node: node.map(str::to_owned),
            reserved: Resources::ZERO,
            message: String::new(),
            placed: node.is_some(),
            reason,
            migration: None,
            placements: Vec::new(),
        }
    }

    #[test]
    fn a_reservation_is_lost_when_the_named_node_is_neither_where_it_is_nor_where_it_moves() {
        let status = |node: &str, moving_to: Option<&str>| TenantStatus {
            node_name: node.into(),
            migration: moving_to.map(|to| MigrationStatus {
                from: node.into(),
                to: to.into(),
            }),
            ..TenantStatus::default()
        };
        let on = |node: Option<&str>| wanted(TenantPhase::Active, node, PlacedReason::Reserved);
        let cases: [(TenantStatus, Option<&str>, Option<&str>); 7] = [
            (status("n1", None), Some("n1"), None),
            (status("n1", None), Some("n2"), Some("n1")),
            (status("n1", None), None, Some("n1")),
            // A recorded move: now on its target is no loss.
            (status("n1", Some("n2")), Some("n2"), None),
            (status("n1", Some("n2")), Some("n3"), Some("n1")),
            (status("n1", Some("n2")), None, Some("n1")),
            // A status that names no node lost nothing.
            (status("", None), Some("n2"), None),
        ];
        for (status, now, lost) in cases {
            assert_eq!(
                lost_on(Some(&status), &on(now)),
                lost,
                "{status:?} now on {now:?}"
            );
        }
        assert_eq!(lost_on(None, &on(Some("n1"))), None);
    }

    #[test]
    fn an_unusable_spec_keeps_what_is_held_and_says_why() {
        let held = unusable_spec(Some(("n1".into(), Resources::new(2, 4, 20))), &"replicas 0");
        assert_eq!(
            (held.phase, held.node.as_deref(), held.reserved, held.placed),
            (
                TenantPhase::Active,
                Some("n1"),
                Resources::new(2, 4, 20),
                false
            )
        );
        assert_eq!(held.reason, PlacedReason::InvalidSpec);
        assert_eq!(
            held.message,
            "spec cannot be used, nothing changed: replicas 0"
        );
        let none = unusable_spec(None, &"replicas 0");
        assert_eq!(
            (none.phase, none.node, none.reserved),
            (TenantPhase::Pending, None, Resources::ZERO)
        );
    }

    #[test]
    fn a_move_asked_to_make_room_says_whom_for_and_only_that_move() {
        let r = Resources::new;
        let plan = Plan::Migrating {
            from: "a".into(),
            to: "c".into(),
            reserved: r(3, 1, 1),
        };
        let asked = |from: &str, to: &str| Asked {
            from: from.into(),
            to: to.into(),
            waiter: "d/w".into(),
        };
        let mut wanted = wanted_status(&plan, false, r(3, 1, 1));
        asked_for(&mut wanted, &asked("a", "c"));
        assert_eq!(
            wanted.message,
            "moving from a to c to make room for d/w: reserved on both until the move completes"
        );
        // Another move (a drain's, to another node): its own message stays.
        let mut wanted = wanted_status(&plan, false, r(3, 1, 1));
        asked_for(&mut wanted, &asked("a", "b"));
        assert!(
            wanted.message.contains("(a is draining)"),
            "{}",
            wanted.message
        );
    }

    /// Every plan at rest, suspended or not, and a footprint that differs from what is held:
    /// the phase, node, reservation, whether it is placed, the reason and the message.
    #[test]
    fn wanted_status_table() {
        use placement::{Edit, EditKind, NoFit, Shortfall};
        let r = Resources::new;
        let (held, asks) = (r(2, 4, 20), r(4, 4, 20));
        let shortfall = Shortfall {
            requested: asks,
            available: r(3, 64, 100),
        };
        let no_fit = NoFit {
            eligible_nodes: 2,
            shortfall,
            selector: None,
            labelled_nodes: 0,
        };
        let holding = |node: &str| Plan::Holding {
            node: node.into(),
            reserved: held,
        };
        let resize = |node_offline| Plan::ResizeBlocked {
            node: "n1".into(),
            reserved: held,
            shortfall,
            node_offline,
        };
        let blocked = |why| Plan::MoveBlocked {
            node: "n1".into(),
            reserved: held,
            why,
        };
        let no_room = || blocked(MoveBlock::NoRoom(no_fit.clone()));
        use PlacedReason as R;
        use TenantPhase as P;
        // (plan, suspend, footprint) -> (phase, node, placed, reason, message)
        type Case<'a> = (Plan, bool, Resources, P, &'a str, bool, R, &'a str);
        #[rustfmt::skip]
        let cases: Vec<Case<'_>> = vec![
            (holding("n1"), false, held, P::Active, "n1", true, R::Reserved,
             "holds 2 threads, 4 GB memory, 20 GB storage on n1"),
            (holding("n1"), true, held, P::Suspended, "n1", true, R::Suspended,
             "suspended; keeps its reservation of 2 threads, 4 GB memory, 20 GB storage on n1"),
            (resize(false), false, asks, P::Resizing, "n1", true, R::ResizeBlocked,
             "keeps 2 threads, 4 GB memory, 20 GB storage on n1; the new footprint of 4 threads, \
              4 GB memory, 20 GB storage does not fit there yet (threads: needs 4, at most 3 free \
              (short by 1))"),
            (resize(true), false, asks, P::Resizing, "n1", true, R::ResizeBlocked,
             "keeps 2 threads, 4 GB memory, 20 GB storage on n1; the new footprint of 4 threads, \
              4 GB memory, 20 GB storage does not fit there yet (n1 is Offline)"),
            (resize(false), true, asks, P::Suspended, "n1", true, R::Suspended,
             "suspended; keeps its reservation of 2 threads, 4 GB memory, 20 GB storage on n1; \
              its new footprint of 4 threads, 4 GB memory, 20 GB storage is asked for when it \
              resumes"),
            (Plan::Pending(no_fit.clone()), false, asks, P::PendingCapacity, "", false,
             R::NoCapacity, ""),
            (Plan::SuspendedUnplaced, true, asks, P::Suspended, "", false, R::Suspended,
             "suspended; holds no reservation and will be placed when resumed"),
            (Plan::Queued { behind: "default/big".into() }, false, asks, P::PendingCapacity, "",
             false, R::QueuedBehindOlder,
             "waiting its turn for 4 threads, 4 GB memory, 20 GB storage: StrictFIFO places \
              tenants oldest first, and the older default/big still waits for room"),
            (Plan::Migrating { from: "n1".into(), to: "n2".into(), reserved: held }, false, held,
             P::Migrating, "n1", true, R::Migrating,
             "moving from n1 to n2 (n1 is draining): reserved on both until the move completes"),
            (no_room(), false, held, P::Active, "n1", true, R::MigrationBlocked, ""),
            (no_room(), false, asks, P::Resizing, "n1", true, R::MigrationBlocked, ""),
            (no_room(), true, asks, P::Suspended, "n1", true, R::MigrationBlocked, ""),
            (blocked(MoveBlock::Turn { in_flight: 3 }), false, held, P::Active, "n1", true,
             R::MigrationWaiting,
             "holds 2 threads, 4 GB memory, 20 GB storage on n1, which is draining; it moves \
              when one of the 3 moves in flight completes (--max-migrations)"),
            (Plan::Edit(Edit { kind: EditKind::Reserve, node: "n2".into(), uid: "u".into(),
             entry: None }), false, asks, P::Pending, "", false, R::InProgress,
             "placement in progress on n2"),
        ];
        for (plan, suspend, footprint, phase, node, placed, reason, message) in cases {
            let wanted = wanted_status(&plan, suspend, footprint);
            let case = format!("{plan:?}, suspend {suspend}, footprint {footprint}");
            assert_eq!(wanted.phase, phase, "{case}");
            assert_eq!(
                wanted.node.as_deref(),
                Some(node).filter(|n| !n.is_empty()),
                "{case}"
            );
            assert_eq!(wanted.placed, placed, "{case}");
            assert_eq!(wanted.reason, reason, "{case}");
            let expected_reserved = if placed { held } else { Resources::ZERO };
            assert_eq!(wanted.reserved, expected_reserved, "{case}");
            assert_eq!(wanted.migration.is_some(), reason == R::Migrating, "{case}");
            // An empty expectation: the message carries text from placement's own Display
            // (NoFit), checked where that is defined; here only its start.
            if message.is_empty() {
                let start = match reason {
                    R::NoCapacity => {
                        "waiting for capacity for 4 threads, 4 GB memory, 20 GB storage: "
                    }
                    _ => {
                        "holds 2 threads, 4 GB memory, 20 GB storage on n1, which is draining; no \
                          other node can take it now ("
                    }
                };
                assert!(
                    wanted.message.starts_with(start),
                    "{case}: {}",
                    wanted.message
                );
                let resize = "; its new footprint of 4 threads, 4 GB memory, 20 GB storage is \
                              asked for once it has moved";
                assert_eq!(
                    wanted.message.ends_with(resize),
                    phase == P::Resizing,
                    "{case}: {}",
                    wanted.message
                );
            } else {
                assert_eq!(wanted.message, message, "{case}");
            }
        }
    }

    #[test]
    fn a_placed_reason_reads_back_as_written() {
        for reason in PlacedReason::ALL {
            assert_eq!(PlacedReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(PlacedReason::parse("Placed"), None);
    }
}
