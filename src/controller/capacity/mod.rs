//! The capacity tick: tenants that wait for capacity turn into a purchase a provisioner acts
//! on, every purchase is accounted for, and machines nobody uses go back.
//!
//! ```text
//!   every request_check (leader only), in numbered steps (`tick`):
//!   1. snapshot (read once): NodeClasses, NodeRequests, bought Nodes, waiters   snapshot.rs
//!   2. Failed requests reported and deleted (the class rests); a deleted class's
//!      untaken requests withdrawn                                               write.rs
//!   3. make room by moves (make_room's step): a waiter given room is not bought for
//!   4. accounts: each request Awaited | InUse | Idle | Orphaned, by its record;
//!      what each class delivers (learned, written to its status)                accounts.rs
//!   5. the purchase (placement::purchase, pure, only when its input changed)    decide.rs
//!      ──▶ NodeRequests created under names no request or Node holds            write.rs
//!   6. each waiting tenant's note ("node request X is Provisioning for it")
//!   7. what goes back (decide::returns, pure) ──▶ written with the precondition
//!      of what was judged: the Node cordoned at its resourceVersion, the request
//!      deleted at its UID and resourceVersion                                   write.rs
//!   8. consolidation's step (WhenUnderutilized), over the Nodes requests own
//!   9. the tick's view published for readers (the page): machines by use, strays,
//!      what classes deliver, what consolidation keeps, the room being made       view.rs
//!   memory.rs: what the tick remembers between ticks, in one type
//! ```
//!
//! Rules enforced here (docs/design.md, "Node requests"):
//! - with no NodeClass (in the pool) and no request in flight, nothing is planned and no tenant
//!   gets a note: node requests are not in use, and 1,000 idle waiting tenants cost no write;
//! - a purchase is for tenants the queue will place on the machine when it arrives: tenants
//!   waiting for their first placement once they have waited `request_after` in
//!   `PendingCapacity` (from their Placed condition's transition), and blocked moves off a
//!   draining node (older than them, they take the room first), in queue order. Suspended and
//!   `Resizing` tenants are not planned for (a new node cannot take a resize); a move is planned
//!   for what it holds (it carries its entry as held). A tenant whose
//!   entry is already written (the engine writes the Node before the tenant) is not waiting;
//! - under StrictFIFO nothing younger than the head (the oldest first placement) is placed before
//!   it, so nothing is bought for them while the head is not planned for or no class holds it;
//!   they say so, and no machine is kept for them;
//! - a request's room (in flight or delivered) goes first to the waiting tenants it was bought
//!   for, while they fit (under StrictFIFO not those behind the head, which comes first); the
//!   plan counts what is left for the others. The engine holds a
//!   delivered machine's room for the same tenants (`engine::Bought`);
//! - a tenant with a node selector is planned only on classes whose nodes carry its labels
//!   (`placement::purchase_by_labels`);
//! - requests in flight (Pending, Provisioning, or Ready before its Node is seen) count as room,
//!   and as machines of their class against its limit; a request this process created counts
//!   from its create until the watch shows it (in any phase, or deleted): nothing is requested
//!   twice, and a request Failed or gone between two looks is not counted. A Ready request's Node
//!   (the one its `status.nodeName` names, else its own name) counts with its free room;
//! - a request's name is stable, `<class>-<hash of its class and tenants>` (a class name that
//!   would not make a DNS label is cut, dots made dashes; the hash covers it whole). A name
//!   another request holds is not reused: the next attempt's hash is taken. A create answered
//!   AlreadyExists reads what is there: the same purchase in flight is taken as made (a leader
//!   change), anything else is not;
//! - a Failed request, seen in the cache or in a watch event, is reported once (a Warning Event,
//!   the metric), deleted, and its class rests for a backoff that doubles with each failure in a
//!   row, so its tenants are planned on another class meanwhile, or on the same one after;
//! - a request still `Pending` (no provisioner took it up) whose class was deleted is withdrawn
//!   (deleted, guarded by its resourceVersion): the class was the leave to buy. A provisioner
//!   that serves only classes it knows (Cluster API) would never take it up;
//! - a refused create, delete or hand-back is logged and counted
//!   (`tenant_placer_node_request_errors_total{action}`) and tried again at the next look; it
//!   never stops the others;
//! - a Node labelled as made for a request, seen holding nothing for `empty_node_after` while
//!   no waiting tenant the queue would place there fits it, is handed back by deleting its
//!   request; the provisioner deletes the Node, whose finalizer keeps it while it holds
//!   reservations (a tenant placed there meanwhile is moved off first). Nothing is bought again
//!   for the demand a machine was handed back for, until it changes;
//! - in a pool (`--node-selector`), a NodeClass is the pool's when the Nodes it makes (its
//!   `spec.labels` and the class label) match the node selector, so every machine bought lands
//!   in the pool; a NodeRequest is the pool's when its class is. Only the pool's classes are
//!   bought, and only the pool's requests are counted as room, retired or handed back: pools
//!   buy side by side and never touch each other's requests. The tenants planned for are the
//!   pool's own (the tenant cache holds no other).

pub mod accounts;
mod context;
mod decide;
mod memory;
mod snapshot;
mod view;
mod write;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use placement::InFlightRequest;

use self::accounts::Accounts;
pub use self::context::{CapacityLoop, CapacitySettings};
use self::decide::{
    Demand, Incoming, fingerprint, notes, returns, still_waiting, with_short_classes,
    with_unavailable,
};
use self::decide::{account, offers};
pub use self::memory::Memory;
use self::snapshot::{Snapshot, Wait, Waiter, room_of};
use self::write::{
    create, hand_back, learn_delivered, record_uses, report_strays, retire_failed, wake_changed,
    withdraw_classless, withdraw_duplicates,
};
use super::consolidation;
use super::make_room;
use super::state::Synced;
use crate::api::{NodeClass, NodeRequest};

/// Runs the looks until the task is dropped (it runs while this replica leads). Nothing is
/// planned before every cache has synced: a request the watch has not listed yet would be
/// bought again.
pub async fn run(
    ctx: Arc<CapacityLoop>,
    (classes, classes_synced): (Store<NodeClass>, Synced),
    (requests, requests_synced): (Store<NodeRequest>, Synced),
) {
    loop {
        tokio::time::sleep(ctx.settings.every).await;
        let caches = [
            ctx.engine.synced(),
            &ctx.tenants_synced,
            &classes_synced,
            &requests_synced,
        ];
        for cache in caches {
            if cache.wait().await.is_err() {
                return;
            }
        }
        // A span per look (docs/operating.md, "Traces"): what it saw and what it did.
        let span = tracing::info_span!(
            "purchase_look",
            waiting = tracing::field::Empty,
            requested = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        tick(&ctx, &classes, &requests).instrument(span).await;
        ctx.metrics.request_look_done();
    }
}

/// One tick, in numbered steps over one snapshot (the module doc). A refused write is logged
/// and counted, and never stops the rest of the tick.
async fn tick(ctx: &CapacityLoop, classes: &Store<NodeClass>, requests: &Store<NodeRequest>) {
    // 1. Read once what the tick decides from.
    let snap = Snapshot::read(ctx, classes, requests);
    let span = tracing::Span::current();
    span.record("waiting", snap.waiters.len());
    // 2. Failed requests reported and deleted; requests of a deleted class withdrawn, and the
    // later of two in flight for the same need (two controllers deciding at once).
    retire_failed(ctx, &snap).await;
    withdraw_classless(ctx, &snap).await;
    withdraw_duplicates(ctx, &snap).await;
    // 3. Room made by moving smaller tenants first: a waiter given it is not bought for.
    // Consolidation holds back while anyone waits, room being made for them or not.
    let anyone_waits = !snap.waiters.is_empty();
    let made = make_room(ctx, &snap.waiters).await;
    let waiters = still_waiting(&snap.waiters, &made);
    // Without a NodeClass nothing can be bought: node requests are not in use, and a note on
    // every waiting tenant saying so would be a status write each for nothing. (No machine is
    // handed back either: none is wanted by a live request.)
    if !snap.has_classes() && snap.live.is_empty() {
        span.record("outcome", "no_classes");
        wake_changed(ctx, made.notes);
        ctx.metrics.set_machines_idle([]);
        let accounts = Accounts::default();
        consolidate(ctx, &snap.classes, anyone_waits, &accounts).await;
        return publish(ctx, &snap, &accounts);
    }
    // 4. What every purchase is used for, and what each class really delivers: a class is
    // planned with what it delivers before anything more is bought of it.
    let settings = &ctx.settings;
    let demand = Demand::of(&waiters, settings.queue, settings.request_after, snap.now);
    let accounts = account(&snap.live, &snap.bought, &demand);
    record_uses(ctx, &snap, &accounts).await;
    learn_delivered(ctx, &snap.classes, &accounts).await;
    // 5. What to buy for whom (planned only when what the planner reads changed), then bought.
    let (demand, unplaceable) = buy(ctx, &snap, demand, &accounts).await;
    // 6. What each waiting tenant's status adds; a tenant whose note changed is woken.
    let unplaceable = with_unavailable(unplaceable, &snap.classes, &snap.pool);
    let unplaceable = with_short_classes(unplaceable, &snap.classes, &demand, &snap.pool);
    let mut notes = notes(&ctx.memory.lock().created, &snap.live, unplaceable);
    notes.extend(made.notes);
    wake_changed(ctx, notes);
    // 7. What goes back, decided from the accounts, then written with the precondition of
    // what was judged; a Node only labelled for a request is reported, never handed back.
    report_strays(ctx, &snap, &accounts).await;
    let judged = (Instant::now(), ctx.settings.empty_node_after);
    let returns = returns(
        &snap.live,
        &accounts,
        &snap.bought,
        &mut ctx.memory.lock().idle_since,
        judged,
    );
    hand_back(ctx, &snap, returns, &demand).await;
    // 8. Consolidation (`--consolidation WhenUnderutilized`) of what the requests own.
    consolidate(ctx, &snap.classes, anyone_waits, &accounts).await;
    // 9. What readers see of this tick.
    publish(ctx, &snap, &accounts);
}

/// Step 9: the tick's view, published whole.
fn publish(ctx: &CapacityLoop, snap: &Snapshot, accounts: &Accounts) {
    let orders = ctx.orders.as_ref().map(|r| r.orders()).unwrap_or_default();
    ctx.published.set(view::view(
        &snap.classes,
        |class| snap.pool.has_class(class),
        &snap.live,
        accounts,
        ctx.consolidation.snapshot(),
        orders,
    ));
}

/// Step 5: the purchase for the demand, with the room on the way promised first; returns the
/// demand as promised and why nothing is bought for each tenant it cannot serve.
async fn buy(
    ctx: &CapacityLoop,
    snap: &Snapshot,
    demand: Demand,
    accounts: &Accounts,
) -> (Demand, HashMap<String, String>) {
    let span = tracing::Span::current();
    let specs = ctx.memory.requested(&snap.live);
    let resting = ctx.memory.lock().resting_classes(Instant::now());
    let offers = offers(&snap.classes, &resting, &specs, &snap.pool, accounts);
    let incoming: Vec<Incoming<'_>> = specs
        .iter()
        .filter_map(|r| {
            Some(Incoming {
                request: InFlightRequest {
                    name: r.name.clone(),
                    capacity: room_of(&snap.bought, r)?,
                },
                labels: snap.labels_of(&r.spec.node_class),
                bought_for: &r.spec.tenants,
            })
        })
        .collect();
    let (demand, in_flight) = demand.promise(incoming);
    // The planner can take a while under BestFit with many waiters: plan only when what it
    // reads changed since the last tick.
    let input = fingerprint(&demand.planned, &offers, &in_flight);
    if ctx.memory.lock().planned == Some(input) {
        span.record("outcome", "unchanged");
        let unplaceable = ctx.memory.lock().unplaceable.clone();
        return (demand, unplaceable);
    }
    let (purchase, unplaceable) = demand.plan(ctx.settings.policy, &offers, &in_flight);
    span.record("outcome", "planned");
    span.record("requested", purchase.requests.len());
    let again = ctx.memory.lock().handed_back_for == Some(demand.fingerprint());
    if again && !purchase.requests.is_empty() {
        tracing::info!(
            requests = purchase.requests.len(),
            "node requests: nothing bought again for the demand a machine was handed back for"
        );
    }
    // A name is never reused while a request or a Node of that name exists: a provisioner
    // would take the Node there for the new request's machine (a zombie). Read only when
    // buying: at rest with many Nodes, a set of every name each tick would cost for nothing.
    let mut taken: HashSet<String> = HashSet::new();
    if !purchase.requests.is_empty() {
        taken.extend(snap.requests.iter().map(|r| r.name_any()));
        taken.extend(ctx.memory.lock().created.keys().cloned());
        taken.extend(ctx.engine.cache().state().iter().map(|n| n.name_any()));
    }
    for new in purchase.requests.iter().filter(|_| !again) {
        create(ctx, new, &offers, &mut taken).await;
    }
    let mut remembered = ctx.memory.lock();
    // A purchase made changes what the next tick reads (the requests created).
    remembered.planned = (purchase.requests.is_empty() || again).then_some(input);
    remembered.unplaceable = unplaceable.clone();
    (demand, unplaceable)
}

/// Make-room's step over the waiters for a first placement (`--make-room-moves`): the notes of
/// those room is being made for (or could be, but not now), by `namespace/name`, and whether a
/// move to make room is in flight.
async fn make_room(ctx: &CapacityLoop, waiters: &[Waiter]) -> make_room::Made {
    let Some(orders) = &ctx.orders else {
        return make_room::Made::default();
    };
    let mut first: Vec<&Waiter> = waiters
        .iter()
        .filter(|w| matches!(w.wait, Wait::First { .. }))
        .collect();
    first.sort_by(|a, b| (a.created, &a.key).cmp(&(b.created, &b.key)));
    let first: Vec<make_room::Waiter> = first
        .into_iter()
        .map(|w| make_room::Waiter {
            uid: w.uid.clone(),
            key: w.key.clone(),
            footprint: w.footprint,
            selector: w.selector.clone(),
        })
        .collect();
    let emptying = ctx
        .engine
        .cache()
        .state()
        .iter()
        .filter(|n| consolidation::consolidating(n) && !n.allocations().is_empty())
        .count();
    let step = make_room::MakeRoom {
        engine: &ctx.engine,
        tenants: &ctx.tenants,
        waiting: &ctx.waiting,
        orders,
        events: ctx.events.as_ref(),
        metrics: &ctx.metrics,
        max_moves: ctx.settings.make_room_moves,
        limits: &ctx.settings.limits,
        emptying,
    };
    make_room::run(step, &first).await
}

/// Consolidation's step (`--consolidation WhenUnderutilized`), after the purchases';
/// `waiting`: whether a tenant waits.
async fn consolidate(
    ctx: &CapacityLoop,
    classes: &[Arc<NodeClass>],
    waiting: bool,
    accounts: &Accounts,
) {
    if ctx.settings.consolidation.policy != consolidation::ConsolidationPolicy::WhenUnderutilized {
        return;
    }
    consolidation::run(consolidation::Consolidate {
        client: &ctx.client,
        engine: &ctx.engine,
        tenants: &ctx.tenants,
        classes,
        events: ctx.events.as_ref(),
        metrics: &ctx.metrics,
        settings: &ctx.settings.consolidation,
        limits: &ctx.settings.limits,
        memory: &ctx.consolidation,
        waiting,
        bought: &|node: &str| accounts.owns(node),
    })
    .await;
}

#[cfg(test)]
mod tests;
