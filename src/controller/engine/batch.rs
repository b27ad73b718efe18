//! Deciding one batch: pure, against one [`View`], with nothing written.
//!
//! ```text
//!   jobs (releases, refreshes, then tenants oldest first) ──decide──▶ one Draft per job
//!        each tenant: FifoQueue holds room for older waiters, then plan → edit → plan … → rest
//!        every edit is applied to the view at once, so later jobs see the room it takes
//! ```
//!
//! Rules enforced here (docs/design.md, rules 4, 9 and "The placement engine", "The queue"):
//! - a UID once released is never placed again (a decision queued before its delete was seen);
//! - a tenant named by an unreadable node, or whose status names one, is not decided, and an
//!   unreadable node is not refreshed: the job fails with the node named;
//! - a job makes at most `max_writes` edits; past that it fails rather than loop;
//! - a job's answer has the type its handle asked for ([`Decided`]): a tenant gets its resting
//!   plan, a release the edits it made, a refresh nothing.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use placement::{
    Edit, EditKind, FifoQueue, MoveBlock, Plan, Policy, QueueMode, TenantWants, plan_release,
};
use tokio::sync::oneshot;

use super::gone::GoneUids;
use super::view::View;
use crate::api::Wants;
use crate::error::Error;

/// What the engine answers a tenant's decision: where it rests, and what was written to get
/// there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The resting plan (never [`Plan::Edit`]).
    pub plan: Plan,
    /// The edits written, in order (for logs and events).
    pub writes: Vec<Edit>,
    /// Room was held for older waiting tenants when this was decided: a tenant left waiting
    /// may have been kept from room that an older one will not take after all (it may be
    /// placed elsewhere), so it should look again soon rather than wait for a node change.
    pub held_back: bool,
}

/// Where a tenant stands in the FIFO queue: older first, then by `namespace/name` (shared: a
/// decision takes its key without copying the name).
pub(super) type QueueKey = (Option<Timestamp>, Arc<str>);

/// Where these wants stand in the queue.
pub(super) fn queue_key(wants: &Wants) -> QueueKey {
    (wants.created, wants.tenant.clone())
}

type Reply<T> = oneshot::Sender<Result<T, Error>>;

/// What the engine is asked to do, and where its answer goes.
#[derive(Debug)]
pub(super) enum Job {
    /// Move a tenant to rest: reserve, resize, restore, drop duplicates, or leave it waiting.
    Decide {
        wants: Wants,
        reply: Reply<Committed>,
    },
    /// Remove every entry of a UID; answered with the edits made.
    Release {
        uid: String,
        tenant: String,
        reply: Reply<Vec<Edit>>,
    },
    /// Rewrite a node's derived status when it differs from its entries.
    Refresh { node: String, reply: Reply<()> },
}

impl Job {
    /// Releases and refreshes first (they free room or fix totals), then tenants oldest first.
    fn order_key(&self) -> (u8, Option<Timestamp>, &str) {
        match self {
            Job::Release { tenant, .. } => (0, None, tenant),
            Job::Refresh { node, .. } => (1, None, node),
            Job::Decide { wants, .. } => (2, wants.created, &*wants.tenant),
        }
    }

    /// Answers with an error. A receiver that gave up (its reconcile was dropped) needs none.
    pub(super) fn fail(self, error: Error) {
        let _ = match self {
            Job::Decide { reply, .. } => reply.send(Err(error)).is_ok(),
            Job::Release { reply, .. } => reply.send(Err(error)).is_ok(),
            Job::Refresh { reply, .. } => reply.send(Err(error)).is_ok(),
        };
    }

    pub(super) fn wants(&self) -> Option<&Wants> {
        match self {
            Job::Decide { wants, .. } => Some(wants),
            _ => None,
        }
    }
}

/// A job and the conflicts it met so far.
#[derive(Debug)]
pub(super) struct Queued {
    pub job: Job,
    pub conflicts: u32,
}

impl Queued {
    pub(super) fn new(job: Job) -> Queued {
        Queued { job, conflicts: 0 }
    }
}

/// What deciding one job gave, typed by the job: nothing is written yet.
#[derive(Debug)]
pub(super) enum Decided {
    /// A tenant's resting plan, and whether room was held for older tenants at the time.
    Decide {
        wants: Wants,
        reply: Reply<Committed>,
        rested: Result<(Plan, bool), Error>,
    },
    Release {
        uid: String,
        tenant: String,
        reply: Reply<Vec<Edit>>,
        done: Result<(), Error>,
    },
    Refresh {
        node: String,
        reply: Reply<()>,
        done: Result<(), Error>,
    },
}

impl Decided {
    /// Whether deciding failed (the job is answered with that error, whatever is written).
    pub(super) fn failed(&self) -> bool {
        match self {
            Decided::Decide { rested, .. } => rested.is_err(),
            Decided::Release { done, .. } | Decided::Refresh { done, .. } => done.is_err(),
        }
    }

    /// Sends the answer once the edits are committed.
    pub(super) fn answer(self, writes: Vec<Edit>) {
        let _ = match self {
            Decided::Decide { reply, rested, .. } => reply
                .send(rested.map(|(plan, held_back)| Committed {
                    plan,
                    writes,
                    held_back,
                }))
                .is_ok(),
            Decided::Release { reply, done, .. } => reply.send(done.map(|()| writes)).is_ok(),
            Decided::Refresh { reply, done, .. } => reply.send(done).is_ok(),
        };
    }

    /// The job again, to be decided in the next round.
    pub(super) fn into_job(self) -> Job {
        match self {
            Decided::Decide { wants, reply, .. } => Job::Decide { wants, reply },
            Decided::Release {
                uid, tenant, reply, ..
            } => Job::Release { uid, tenant, reply },
            Decided::Refresh { node, reply, .. } => Job::Refresh { node, reply },
        }
    }
}

/// One job as decided in a batch.
#[derive(Debug)]
pub(super) struct Draft {
    pub decided: Decided,
    /// The edits to write, in order.
    pub edits: Vec<Edit>,
    /// The nodes whose write this job waits for: its edits' nodes, or the node it refreshes.
    pub nodes: Vec<String>,
    pub conflicts: u32,
}

/// What a batch is decided with besides the view.
#[derive(Debug)]
pub(super) struct Rules<'a> {
    pub policy: Policy,
    pub mode: QueueMode,
    /// The waiting tenants with no job in this batch: room is held for the older ones.
    pub waiters: &'a [(QueueKey, TenantWants<'a>)],
    /// Delivered machines and the waiting tenants each was bought for (holding nothing): their
    /// room there is held for them first.
    pub bought: &'a [(QueueKey, &'a str, TenantWants<'a>)],
    /// Hosts room is being made on by moves, and the waiting tenant each is for (holding
    /// nothing): as much of its room as is free there is held for it first.
    pub made: &'a [(QueueKey, &'a str, TenantWants<'a>)],
    /// UIDs released lately: never placed again.
    pub released: &'a GoneUids,
    /// Edits one job may make.
    pub max_writes: u32,
    /// Moves off draining nodes in flight at once, at most.
    pub max_migrations: usize,
    /// The Node label naming its zone.
    pub zone_label: &'a str,
    /// RoundRobin's turn for the first tenant; each decision takes the next.
    pub turn: u64,
    /// The time the refreshed statuses are compared at.
    pub now: &'a Time,
}

/// Sorts the batch and decides every job against `view`, applying each edit to it as it goes.
/// Returns one draft per job, in decision order, and the turn after the last decision.
pub(super) fn decide_batch(
    mut batch: Vec<Queued>,
    view: &mut View,
    rules: &Rules<'_>,
) -> (Vec<Draft>, u64) {
    batch.sort_by(|a, b| a.job.order_key().cmp(&b.job.order_key()));
    // Where each waiter holds its entry, from the view's index: one placed a moment ago (not
    // yet out of the room) holds nothing more, and a resize holds only its growth.
    let mut queue = FifoQueue::with_holders(
        rules.mode,
        rules
            .waiters
            .iter()
            .map(|(key, wants)| (key.clone(), *wants, view.held_at(wants.uid)))
            .collect(),
    );
    queue.hold_bought(&mut view.fleet, rules.bought);
    queue.hold_made(&mut view.fleet, rules.made);
    let mut progress = Progress {
        turn: rules.turn,
        moves: Moves {
            in_flight: view.moves_in_flight(),
            max: rules.max_migrations,
        },
    };
    let drafts = batch
        .into_iter()
        .map(|queued| {
            let mut edits = Vec::new();
            let mut nodes = Vec::new();
            let decided = match queued.job {
                Job::Decide { wants, reply } => {
                    let rested =
                        decide_tenant(&wants, view, &mut queue, rules, &mut progress, &mut edits);
                    Decided::Decide {
                        wants,
                        reply,
                        rested,
                    }
                }
                Job::Release { uid, tenant, reply } => {
                    let done = release(&uid, &tenant, view, rules, &mut edits);
                    Decided::Release {
                        uid,
                        tenant,
                        reply,
                        done,
                    }
                }
                Job::Refresh { node, reply } => {
                    let done = view.check_node_readable(&node);
                    if done.is_ok() && view.is_stale(&node, rules.now) {
                        nodes.push(node.clone());
                    }
                    Decided::Refresh { node, reply, done }
                }
            };
            for edit in &edits {
                if !nodes.contains(&edit.node) {
                    nodes.push(edit.node.clone());
                }
            }
            Draft {
                decided,
                edits,
                nodes,
                conflicts: queued.conflicts,
            }
        })
        .collect();
    (drafts, progress.turn)
}

/// What a batch carries from one decision to the next.
#[derive(Debug)]
struct Progress {
    /// RoundRobin's turn for the next decision.
    turn: u64,
    moves: Moves,
}

/// Moves off draining nodes: how many are in flight, and how many may be.
#[derive(Debug)]
struct Moves {
    in_flight: usize,
    max: usize,
}

/// Plans one tenant until its plan rests, applying each edit to the view. A move rests as soon
/// as its target entry is written: its status must record the move before the source goes
/// (docs/design.md, "Moves").
fn decide_tenant(
    wants: &Wants,
    view: &mut View,
    queue: &mut FifoQueue<'_, QueueKey>,
    rules: &Rules<'_>,
    progress: &mut Progress,
    edits: &mut Vec<Edit>,
) -> Result<(Plan, bool), Error> {
    let Progress { turn, moves } = progress;
    let key = queue_key(wants);
    // A UID released (its tenant deleted) is never placed again: this job was queued before
    // the delete was seen. (Releases are decided before tenants, so none comes in the loop.)
    if rules.released.contains(&wants.uid) {
        return Err(Error::TenantReleased {
            tenant: wants.tenant.to_string(),
        });
    }
    // Its entry may be on the node its status names, where it cannot be seen while unreadable.
    if let Some(node) = &wants.status_node {
        view.check_node_readable(node)?;
    }
    if let Some(ask) = &wants.spread {
        // The queue's promise holds as for any tenant: room for older waiters is held first,
        // and under StrictFIFO a first placement waits behind the head.
        let holds_nothing = view.held_at(&wants.uid).is_none();
        if let Some(queued) = queue.turn_of(
            &key,
            rules.policy,
            &wants.tenant,
            holds_nothing,
            wants.suspend,
            &mut view.fleet,
            *turn,
        ) {
            return Ok((queued, queue.holds_placed()));
        }
        let zones = view.zones(rules.zone_label);
        let plan = super::spread::decide_spread(
            wants,
            ask,
            view,
            rules.zone_label,
            &zones,
            rules.max_writes,
            edits,
        )?;
        if holds_nothing && matches!(plan, Plan::SpreadPending(_)) {
            queue.unplaceable(&wants.tenant);
        }
        return Ok((plan, queue.holds_placed()));
    }
    loop {
        view.check_readable(&wants.uid)?;
        let (fleet, holders) = view.fleet_and_holders(&wants.uid);
        let plan = queue.plan_held_by(&key, rules.policy, &wants.borrowed(), fleet, holders, *turn);
        *turn = turn.wrapping_add(1);
        match plan {
            Plan::Edit(edit) if edit.kind == EditKind::Migrate => {
                let source = view.held_at(&wants.uid).and_then(|i| view.name_at(i));
                let (Some(from), Some(reserved)) = (
                    source.map(str::to_owned),
                    edit.entry.as_ref().map(|e| e.resources),
                ) else {
                    // A move plan always names the entry it copies; nothing to move otherwise.
                    return Err(Error::UnreadableNode {
                        node: edit.node,
                        reason: format!("a move of {} without its source entry", wants.tenant),
                    });
                };
                if moves.in_flight >= moves.max {
                    let why = MoveBlock::Turn {
                        in_flight: moves.in_flight,
                    };
                    let blocked = Plan::MoveBlocked {
                        node: from,
                        reserved,
                        why,
                    };
                    return Ok((blocked, queue.holds_placed()));
                }
                let to = edit.node.clone();
                apply(view, edit, edits, rules.max_writes, &wants.tenant)?;
                moves.in_flight = moves.in_flight.saturating_add(1);
                let migrating = Plan::Migrating { from, to, reserved };
                return Ok((migrating, queue.holds_placed()));
            }
            Plan::Edit(edit) => {
                if matches!(
                    edit.kind,
                    EditKind::FinishMigration | EditKind::AbortMigration
                ) {
                    moves.in_flight = moves.in_flight.saturating_sub(1);
                }
                apply(view, edit, edits, rules.max_writes, &wants.tenant)?;
            }
            resting => return Ok((resting, queue.holds_placed())),
        }
    }
}

/// Removes every entry of a UID, one node at a time, and remembers it as released.
fn release(
    uid: &str,
    tenant: &str,
    view: &mut View,
    rules: &Rules<'_>,
    edits: &mut Vec<Edit>,
) -> Result<(), Error> {
    rules.released.insert(uid);
    loop {
        view.check_readable(uid)?;
        match plan_release(uid, view.ledgers_holding(uid)) {
            Some(edit) => apply(view, edit, edits, rules.max_writes, tenant)?,
            None => return Ok(()),
        }
    }
}

fn apply(
    view: &mut View,
    edit: Edit,
    edits: &mut Vec<Edit>,
    max_writes: u32,
    subject: &str,
) -> Result<(), Error> {
    if u32::try_from(edits.len()).unwrap_or(u32::MAX) >= max_writes {
        return Err(Error::TooManyWrites {
            tenant: subject.to_owned(),
            writes: max_writes,
        });
    }
    view.apply(&edit)?;
    edits.push(edit);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::sync::Arc;

    use placement::{EditKind, Fleet, Resources};

    use super::*;
    use crate::api::Node;
    use crate::testing;

    /// A node of `threads` threads (64 GB, 1000 GB) holding `entries` (tenant, threads), each
    /// with 1 GB and 1 GB; a negative amount makes its allocations unreadable.
    fn node(name: &str, threads: i64, entries: &[(&str, i64)]) -> Arc<Node> {
        let node = testing::node(name).capacity(threads, 64, 1000);
        let node = entries
            .iter()
            .fold(node, |node, (tenant, t)| node.holding(tenant, (*t, 1, 1)));
        Arc::new(node.resource_version(1).build())
    }

    /// What tenant `name` (UID `uid-{name}`, as the builder names it) asks, created at `created`.
    fn wants(name: &str, threads: u64, created: i64) -> Wants {
        Wants {
            uid: format!("uid-{name}"),
            tenant: format!("default/{name}").into(),
            footprint: Resources::new(threads, 1, 1),
            suspend: false,
            status_node: None,
            migration: None,
            asked: None,
            node_selector: None,
            created: Some(Timestamp::from_second(created).unwrap()),
            spread: None,
        }
    }

    type Answer<T> = oneshot::Receiver<Result<T, Error>>;

    fn decide(wants: Wants) -> (Queued, Answer<Committed>) {
        let (reply, answer) = oneshot::channel();
        (Queued::new(Job::Decide { wants, reply }), answer)
    }

    fn release(name: &str) -> (Queued, Answer<Vec<Edit>>) {
        let (reply, answer) = oneshot::channel();
        let job = Job::Release {
            uid: format!("uid-{name}"),
            tenant: format!("default/{name}"),
            reply,
        };
        (Queued::new(job), answer)
    }

    fn refresh(node: &str) -> (Queued, Answer<()>) {
        let (reply, answer) = oneshot::channel();
        let job = Job::Refresh {
            node: node.into(),
            reply,
        };
        (Queued::new(job), answer)
    }

    /// Decides `batch` against `nodes` with `waiters` outside it, answers every draft as if all
    /// writes were committed, and returns the drafts' nodes and the view.
    fn run(
        nodes: Vec<Arc<Node>>,
        batch: Vec<Queued>,
        waiters: &[(QueueKey, TenantWants<'_>)],
        released: &GoneUids,
        max_writes: u32,
    ) -> (Vec<Vec<String>>, View) {
        run_moving(nodes, batch, waiters, released, max_writes, 16)
    }

    /// [`run`] with at most `max_migrations` moves in flight.
    fn run_moving(
        nodes: Vec<Arc<Node>>,
        batch: Vec<Queued>,
        waiters: &[(QueueKey, TenantWants<'_>)],
        released: &GoneUids,
        max_writes: u32,
        max_migrations: usize,
    ) -> (Vec<Vec<String>>, View) {
        let mut view = View::build(nodes);
        let now = Time(Timestamp::now());
        let rules = Rules {
            policy: Policy::FirstFit,
            mode: QueueMode::BestEffortFifo,
            waiters,
            bought: &[],
            made: &[],
            released,
            max_writes,
            max_migrations,
            zone_label: super::super::ZONE_LABEL,
            turn: 0,
            now: &now,
        };
        let (drafts, _) = decide_batch(batch, &mut view, &rules);
        let touched = drafts.iter().map(|d| d.nodes.clone()).collect();
        for draft in drafts {
            draft.decided.answer(draft.edits);
        }
        (touched, view)
    }

    fn plan_of(answer: &mut Answer<Committed>) -> Plan {
        answer.try_recv().unwrap().unwrap().plan
    }

    #[test]
    fn releases_go_first_then_tenants_oldest_first_whatever_order_they_came_in() {
        // n1: 8 threads, "old-t" holds 6 (2 free). Young (4, created at 20) came first, old (4,
        // created at 10) second, the release of old-t last. Released first: 8 free; old takes
        // 4 (4 left); young takes the other 4.
        let nodes = vec![node("n1", 8, &[("old-t", 6)])];
        let (young, mut young_answer) = decide(wants("young", 4, 20));
        let (old, mut old_answer) = decide(wants("old", 4, 10));
        let (gone, mut gone_answer) = release("old-t");
        let (touched, view) = run(nodes, vec![young, old, gone], &[], &GoneUids::default(), 8);
        let released = gone_answer.try_recv().unwrap().unwrap();
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].kind, EditKind::Release);
        assert!(matches!(plan_of(&mut old_answer), Plan::Holding { node, .. } if node == "n1"));
        assert!(matches!(plan_of(&mut young_answer), Plan::Holding { node, .. } if node == "n1"));
        assert_eq!(
            touched,
            [vec!["n1".to_owned()], vec!["n1".into()], vec!["n1".into()]]
        );
        let uids: Vec<&str> = view.fleet.ledgers()[0]
            .entries()
            .iter()
            .map(|e| &*e.uid)
            .collect();
        assert_eq!(uids, ["uid-old", "uid-young"]);
    }

    #[test]
    fn a_tenant_released_in_the_same_batch_is_never_placed() {
        let nodes = vec![node("n1", 8, &[])];
        let (placed, mut answer) = decide(wants("acme", 2, 10));
        let (gone, _) = release("acme");
        let released = GoneUids::default();
        let (touched, view) = run(nodes, vec![placed, gone], &[], &released, 8);
        assert!(matches!(
            answer.try_recv().unwrap(),
            Err(Error::TenantReleased { .. })
        ));
        assert!(released.contains("uid-acme"));
        assert_eq!(touched, [Vec::<String>::new(), Vec::new()]);
        assert!(view.fleet.ledgers()[0].entries().is_empty());
    }

    #[test]
    fn a_tenant_on_an_unreadable_node_is_not_decided_and_that_node_is_not_refreshed() {
        // n1's allocations hold a negative amount: no ledger, never written.
        let nodes = vec![node("n1", 8, &[("acme", -1)]), node("n2", 8, &[])];
        let (placed, mut placed_answer) = decide(wants("acme", 2, 10));
        let (refreshed, mut refresh_answer) = refresh("n1");
        let (touched, view) = run(nodes, vec![placed, refreshed], &[], &GoneUids::default(), 8);
        assert!(matches!(
            placed_answer.try_recv().unwrap(),
            Err(Error::UnreadableNode { node, .. }) if node == "n1"
        ));
        assert!(matches!(
            refresh_answer.try_recv().unwrap(),
            Err(Error::UnreadableNode { node, .. }) if node == "n1"
        ));
        assert_eq!(touched, [Vec::<String>::new(), Vec::new()]);
        assert!(view.ledger("n1").is_none() && view.ledger("n2").unwrap().entries().is_empty());
    }

    #[test]
    fn a_job_past_its_write_budget_fails_instead_of_looping() {
        // acme is on n1, n2 and n3 (duplicates): two drops are needed, the budget is one.
        let nodes = ["n1", "n2", "n3"]
            .map(|n| node(n, 8, &[("acme", 2)]))
            .to_vec();
        let (placed, mut answer) = decide(wants("acme", 2, 10));
        let (touched, _) = run(nodes, vec![placed], &[], &GoneUids::default(), 1);
        assert!(matches!(
            answer.try_recv().unwrap(),
            Err(Error::TooManyWrites { writes: 1, .. })
        ));
        assert_eq!(
            touched,
            [vec!["n2".to_owned()]],
            "the one drop made is still written"
        );
    }

    #[test]
    fn room_held_for_an_older_waiter_keeps_a_younger_tenant_out_and_is_never_written() {
        // n1: 8 threads. "older" (6, created at 5) waits outside the batch: it holds 6, 2 are
        // left, and the younger tenant (4) waits too, told that room was held back.
        let nodes = vec![node("n1", 8, &[])];
        let older = wants("older", 6, 5);
        let waiters = [(queue_key(&older), older.borrowed())];
        let (young, mut answer) = decide(wants("young", 4, 20));
        let (touched, view) = run(nodes, vec![young], &waiters, &GoneUids::default(), 8);
        let committed = answer.try_recv().unwrap().unwrap();
        assert!(matches!(committed.plan, Plan::Pending(_)), "{committed:?}");
        assert!(committed.held_back && committed.writes.is_empty());
        assert_eq!(touched, [Vec::<String>::new()]);
        assert_eq!(view.fleet.ledgers()[0].holds().len(), 1);
        // Even if n1 were written now, its status would name no hold.
        let written = view.to_write("n1", &Time(Timestamp::now())).unwrap();
        assert!(written.allocations().is_empty());
    }

    #[test]
    fn a_refresh_waits_on_its_node_only_when_the_status_is_stale() {
        // "stale": its status has no totals yet. "fresh": its status is what its entries give
        // (computed earlier, so only a kept transition time makes it equal). "gone": not known.
        let fresh = {
            let mut fresh = Node::clone(&node("fresh", 8, &[("acme", 2)]));
            let ledger = fresh.ledger().unwrap();
            let earlier = Time(Timestamp::from_second(1).unwrap());
            fresh.status =
                Some(fresh.status_for(ledger.entries(), ledger.view().capacity, &earlier));
            Arc::new(fresh)
        };
        let (stale, mut stale_answer) = refresh("stale");
        let (current, mut current_answer) = refresh("fresh");
        let (missing, mut missing_answer) = refresh("gone");
        let (touched, _) = run(
            vec![node("stale", 8, &[]), fresh],
            vec![stale, current, missing],
            &[],
            &GoneUids::default(),
            8,
        );
        // Refreshes are decided by node name: fresh, gone, stale.
        assert_eq!(
            touched,
            [Vec::<String>::new(), Vec::new(), vec!["stale".to_owned()]]
        );
        assert!(stale_answer.try_recv().unwrap().is_ok());
        assert!(current_answer.try_recv().unwrap().is_ok());
        assert!(missing_answer.try_recv().unwrap().is_ok());
    }

    #[test]
    fn a_move_rests_once_its_target_is_written_and_the_next_waits_for_its_turn() {
        // s is draining and holds a (created at 10) and b (at 20); t has room for both. With one
        // move allowed: a's target entry is written on t and a rests Migrating; b waits.
        let source = testing::node("s")
            .capacity(8, 64, 1000)
            .state(crate::api::NodeState::Draining)
            .holding("a", (2, 1, 1))
            .holding("b", (2, 1, 1))
            .resource_version(1)
            .build();
        let nodes = vec![Arc::new(source), node("t", 8, &[])];
        let (a, mut a_answer) = decide(wants("a", 2, 10));
        let (b, mut b_answer) = decide(wants("b", 2, 20));
        let (touched, view) = run_moving(nodes, vec![b, a], &[], &GoneUids::default(), 8, 1);
        let a_plan = a_answer.try_recv().unwrap().unwrap();
        assert_eq!(
            a_plan.plan,
            Plan::Migrating {
                from: "s".into(),
                to: "t".into(),
                reserved: Resources::new(2, 1, 1),
            }
        );
        assert_eq!(a_plan.writes.len(), 1);
        assert_eq!(a_plan.writes[0].kind, EditKind::Migrate);
        assert!(matches!(
            plan_of(&mut b_answer),
            Plan::MoveBlocked {
                why: MoveBlock::Turn { in_flight: 1 },
                ..
            }
        ));
        assert_eq!(touched, [vec!["t".to_owned()], Vec::new()]);
        // Made before broken: a is on both nodes until its status records the move.
        assert!(view.ledger("s").unwrap().entry_of("uid-a").is_some());
        assert!(view.ledger("t").unwrap().entry_of("uid-a").is_some());
        assert_eq!(view.moves_in_flight(), 1);
    }

    #[test]
    fn a_job_says_what_it_decides_and_a_failed_one_answers_its_error() {
        let (queued, mut answer) = decide(wants("a", 1, 10));
        assert_eq!(queued.job.wants().map(|w| w.uid.as_str()), Some("uid-a"));
        queued.job.fail(Error::CacheClosed);
        assert!(matches!(answer.try_recv(), Ok(Err(Error::CacheClosed))));
        let (queued, _) = release("b");
        assert!(queued.job.wants().is_none());
        // An empty node selector is no selector; a label map is kept.
        let empty = placement::Labels::new();
        let eu = placement::Labels::from([("region".to_owned(), "eu".to_owned())]);
        let of = |selector| {
            let wants = placement::TenantWants {
                node_selector: Some(selector),
                ..testing_wants()
            };
            Wants::of(&wants, None).node_selector
        };
        assert_eq!(of(&empty), None);
        assert_eq!(of(&eu).as_deref(), Some(&eu));
        // A decision that failed is answered with its error, whatever is written.
        let refreshed = |done| Decided::Refresh {
            node: "n1".into(),
            reply: oneshot::channel().0,
            done,
        };
        assert!(refreshed(Err(Error::CacheClosed)).failed());
        assert!(!refreshed(Ok(())).failed());
    }

    fn testing_wants() -> placement::TenantWants<'static> {
        placement::testing::wants("uid-c", (1, 1, 1))
    }
}
