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
//! - a tenant named by an unreadable node is not decided, and an unreadable node is not
//!   refreshed: the job fails with the node named;
//! - a job makes at most `max_writes` edits; past that it fails rather than loop;
//! - a job's answer has the type its handle asked for ([`Decided`]): a tenant gets its resting
//!   plan, a release the edits it made, a refresh nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use placement::{Edit, FifoQueue, Plan, Policy, QueueMode, TenantWants, plan_release};
use tokio::sync::oneshot;

use super::GoneUids;
use super::view::View;
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

/// Where a tenant stands in the FIFO queue: older first, then by `namespace/name`.
pub(super) type QueueKey = (Option<Timestamp>, String);

/// A tenant's wants, owned so that they can wait in the queue.
#[derive(Clone, Debug)]
pub(super) struct OwnedWants {
    pub uid: String,
    pub tenant: String,
    pub footprint: placement::Resources,
    pub suspend: bool,
    pub status_node: Option<String>,
    /// The tenant's creationTimestamp: older tenants are decided first.
    pub created: Option<Timestamp>,
}

impl OwnedWants {
    pub(super) fn of(wants: &TenantWants<'_>, created: Option<Timestamp>) -> OwnedWants {
        OwnedWants {
            uid: wants.uid.to_owned(),
            tenant: wants.tenant.to_owned(),
            footprint: wants.footprint,
            suspend: wants.suspend,
            status_node: wants.status_node.map(str::to_owned),
            created,
        }
    }

    fn borrowed(&self) -> TenantWants<'_> {
        TenantWants {
            uid: &self.uid,
            tenant: &self.tenant,
            footprint: self.footprint,
            suspend: self.suspend,
            status_node: self.status_node.as_deref(),
        }
    }

    pub(super) fn key(&self) -> QueueKey {
        (self.created, self.tenant.clone())
    }
}

type Reply<T> = oneshot::Sender<Result<T, Error>>;

/// What the engine is asked to do, and where its answer goes.
#[derive(Debug)]
pub(super) enum Job {
    /// Move a tenant to rest: reserve, resize, restore, drop duplicates, or leave it waiting.
    Decide {
        wants: OwnedWants,
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
            Job::Decide { wants, .. } => (2, wants.created, &wants.tenant),
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

    pub(super) fn wants(&self) -> Option<&OwnedWants> {
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
        wants: OwnedWants,
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
    /// UIDs released lately: never placed again.
    pub released: &'a GoneUids,
    /// Edits one job may make.
    pub max_writes: u32,
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
    let mut turn = rules.turn;
    let drafts = batch
        .into_iter()
        .map(|queued| {
            let mut edits = Vec::new();
            let mut nodes = Vec::new();
            let decided = match queued.job {
                Job::Decide { wants, reply } => {
                    let rested =
                        decide_tenant(&wants, view, &mut queue, rules, &mut turn, &mut edits);
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
    (drafts, turn)
}

/// Plans one tenant until its plan rests, applying each edit to the view.
fn decide_tenant(
    wants: &OwnedWants,
    view: &mut View,
    queue: &mut FifoQueue<'_, QueueKey>,
    rules: &Rules<'_>,
    turn: &mut u64,
    edits: &mut Vec<Edit>,
) -> Result<(Plan, bool), Error> {
    let key = wants.key();
    loop {
        // A UID released (its tenant deleted) is never placed again: this job was queued
        // before the delete was seen.
        if rules.released.contains(&wants.uid) {
            return Err(Error::TenantReleased {
                tenant: wants.tenant.clone(),
            });
        }
        view.check_readable(&wants.uid)?;
        let holders = view.holders_of(&wants.uid);
        let plan = queue.plan_held_by(
            &key,
            rules.policy,
            &wants.borrowed(),
            &mut view.ledgers,
            &holders,
            *turn,
        );
        *turn = turn.wrapping_add(1);
        match plan {
            Plan::Edit(edit) => apply(view, edit, edits, rules.max_writes, &wants.tenant)?,
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
        match plan_release(uid, &view.ledgers) {
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
