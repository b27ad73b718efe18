//! Properties of the FIFO pending queue over random fleets and random batches.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use placement::{
    EditKind, Entry, FifoQueue, NodeLedger, NodeState, Plan, Policy, QueueMode, Resources,
    TenantWants, is_hold, plan_tenant_with,
};
use proptest::prelude::*;

fn small() -> impl Strategy<Value = Resources> {
    (1..=6u64, 1..=6u64, 1..=6u64).prop_map(|(t, m, s)| Resources::new(t, m, s))
}

fn fleet() -> impl Strategy<Value = Vec<NodeLedger>> {
    prop::collection::vec(((4..=12u64), (4..=12u64), (4..=12u64)), 1..=4).prop_map(|caps| {
        caps.into_iter()
            .enumerate()
            .map(|(i, (t, m, s))| {
                NodeLedger::new(
                    format!("n{i}"),
                    NodeState::Online,
                    Resources::new(t, m, s),
                    vec![],
                )
                .unwrap()
            })
            .collect()
    })
}

/// Tenants by age (index = age rank); each is in the batch or waiting outside it.
fn tenants() -> impl Strategy<Value = Vec<(Resources, bool)>> {
    prop::collection::vec((small(), any::<bool>()), 1..=10)
}

fn uid(age: usize) -> String {
    format!("t{age:02}")
}

fn fits_anywhere(ledgers: &[NodeLedger], footprint: Resources) -> bool {
    let wants = TenantWants {
        uid: "probe",
        tenant: "probe",
        footprint,
        suspend: false,
        status_node: None,
    };
    matches!(
        plan_tenant_with(Policy::FirstFit, &wants, ledgers, 0),
        Plan::Edit(_)
    )
}

/// The ledgers without the entries (real or held) of tenants younger than `age`.
fn without_younger(ledgers: &[NodeLedger], age: usize) -> Vec<NodeLedger> {
    ledgers
        .iter()
        .map(|l| {
            let kept: Vec<Entry> = l
                .entries()
                .iter()
                .filter(|e| {
                    let owner = e.uid.trim_start_matches(placement::HOLD_PREFIX);
                    owner[1..].parse::<usize>().unwrap() < age
                })
                .cloned()
                .collect();
            NodeLedger::new(l.name(), l.state(), l.capacity(), kept).unwrap()
        })
        .collect()
}

proptest! {
    #[test]
    fn a_batch_decided_through_the_queue_is_fifo_and_never_over_commits(
        mut ledgers in fleet(),
        tenants in tenants(),
        strict in any::<bool>(),
        policy in prop::sample::select(Policy::ALL.to_vec()),
    ) {
        let mode = if strict { QueueMode::StrictFifo } else { QueueMode::BestEffortFifo };
        let uids: Vec<String> = (0..tenants.len()).map(uid).collect();
        let wants: Vec<TenantWants<'_>> = tenants
            .iter()
            .zip(&uids)
            .map(|((footprint, _), uid)| TenantWants {
                uid,
                tenant: uid,
                footprint: *footprint,
                suspend: false,
                status_node: None,
            })
            .collect();
        let waiting = wants
            .iter()
            .enumerate()
            .filter(|(age, _)| !tenants[*age].1)
            .map(|(age, w)| (age, *w))
            .collect();
        let mut queue = FifoQueue::new(mode, waiting);
        // (age, final plan) of every batch tenant, oldest first.
        let mut outcomes = Vec::new();
        for (age, w) in wants.iter().enumerate().filter(|(age, _)| tenants[*age].1) {
            let plan = loop {
                match queue.plan(&age, policy, w, &mut ledgers, 0) {
                    Plan::Edit(edit) => {
                        prop_assert_eq!(edit.kind, EditKind::Reserve);
                        let ledger = ledgers.iter_mut().find(|l| l.name() == edit.node).unwrap();
                        *ledger = NodeLedger::new(
                            ledger.name(),
                            ledger.state(),
                            ledger.capacity(),
                            ledger.edited_entries(&edit),
                        )
                        .unwrap();
                    }
                    resting => break resting,
                }
            };
            outcomes.push((age, plan));
        }
        // Never over capacity, holds included.
        for l in &ledgers {
            prop_assert!(l.allocated().fits_within(&l.capacity()), "{} over capacity", l.name());
        }
        for (age, plan) in &outcomes {
            match plan {
                // A tenant left waiting would not fit even if nobody younger held anything.
                Plan::Pending(_) => prop_assert!(
                    !fits_anywhere(&without_younger(&ledgers, *age), tenants[*age].0),
                    "t{:02} waits although only younger tenants hold the room it needs", age
                ),
                Plan::Queued { behind } => {
                    prop_assert!(strict);
                    let head: usize = behind[1..].parse().unwrap();
                    prop_assert!(head < *age, "queued behind a younger tenant");
                }
                Plan::Holding { .. } => {}
                other => prop_assert!(false, "unexpected plan {:?}", other),
            }
        }
        // An older waiting tenant that the room left by older tenants could take holds that room
        // (waiters younger than the whole batch, and behind a StrictFIFO head, hold nothing).
        let youngest_in_batch = outcomes.last().map(|(age, _)| *age);
        let head_age: Option<usize> = queue.head().map(|h| h[1..].parse().unwrap());
        for (age, (footprint, in_batch)) in tenants.iter().enumerate() {
            if *in_batch
                || youngest_in_batch.is_none_or(|y| age > y)
                || head_age.is_some_and(|h| h < age)
            {
                continue;
            }
            let held = ledgers
                .iter()
                .any(|l| l.entry_of(&format!("hold:{}", uid(age))).is_some());
            let could = fits_anywhere(&without_younger(&ledgers, age), *footprint);
            prop_assert_eq!(held, could, "waiting t{:02}: holds room {} but could take some {}", age, held, could);
        }
        if let (true, Some(head)) = (strict, queue.head()) {
            // Nothing younger than the head holds room it took for the first time.
            let head: usize = head[1..].parse().unwrap();
            for l in &ledgers {
                for e in l.entries() {
                    let owner: usize = e.uid.trim_start_matches(placement::HOLD_PREFIX)[1..].parse().unwrap();
                    prop_assert!(owner < head, "{} (hold: {}) is younger than the head {}",
                        e.uid, is_hold(&e.uid), head);
                }
            }
        }
    }
}
