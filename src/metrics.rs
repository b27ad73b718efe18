//! The counters the controller reports into, on the `prometheus-client` crate.
//!
//! ```text
//!   controller (reconciles, writer, sweeps) ──counts──▶ Metrics ──register──▶ a Registry
//!                                                     (the serving layer's, encoded at scrape)
//! ```
//!
//! Rules enforced here:
//! - counters only go up; the gauges of tenants and nodes are not kept here: the serving layer
//!   reads them from the watch caches at scrape time (docs/design.md, "The parts");
//! - this module knows nothing of the controller, HTTP or the page: it is handed its calls;
//! - `undecodable_objects_total` always shows every kind the controller watches (`tenant`, `node`,
//!   `nodeclass`, `noderequest`), 0 until one is skipped; an object is counted under its own kind.
//!
//! NB: `prometheus-client` appends `_total` to a counter's name and a full stop to every help
//! text it is given at registration: names and helps are registered without them.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds of the reconcile duration histogram, in seconds.
pub const DURATION_BUCKETS: [f64; 10] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// The kinds an undecodable object can be of, as labelled (the API's kind in lower case), shown
/// from the start.
const KINDS: [&str; 4] = ["tenant", "node", "nodeclass", "noderequest"];

/// How a move off a draining node ended.
const MOVE_RESULTS: [&str; 2] = ["done", "cancelled"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MoveLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    kind: &'static str,
    /// "ok", or the error label.
    result: &'static str,
}

/// What the capacity tick was doing when the API refused it.
const REQUEST_ACTIONS: [&str; 5] = ["create", "retire", "withdraw", "hand_back", "use"];

/// What the registration was doing when the API refused it.
const REGISTER_ACTIONS: [&str; 4] = ["create", "update", "delete", "read"];

/// What the registration reports and leaves alone.
const REGISTER_PROBLEMS: [&str; 2] = ["clash", "unreadable_allocatable"];

/// What consolidation does.
const CONSOLIDATION_ACTIONS: [&str; 3] = ["drain", "cancel", "hand_back"];

/// Why a node consolidation could free is not drained (a young one is not counted).
pub const DISRUPTION_BLOCKED: [&str; 4] = [
    "DoNotDisrupt",
    "TenantsWaiting",
    "OutsideWindow",
    "BudgetExhausted",
];

/// How a Node status write ended.
const WRITE_RESULTS: [&str; 3] = ["ok", "conflict", "error"];

/// What became of a reservation a Node's status no longer held.
const RESERVATION_EVENTS: [&str; 2] = ["lost", "restored"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabel {
    event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProblemLabel {
    problem: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabel {
    action: &'static str,
}

/// The capacity tick's money decisions, as (action, reason): what it can do with money and why.
pub const MONEY_DECISIONS: [(&str, &str); 8] = [
    ("buy", "waiting"),
    ("hand_back", "idle"),
    ("hand_back", "consolidated"),
    ("retire", "failed"),
    ("retire", "orphaned"),
    ("withdraw", "class_gone"),
    ("withdraw", "duplicate"),
    ("keep", "awaited"),
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MoneyLabel {
    action: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The controller's counters. Shared by the reconcilers and the writer; the serving layer
/// [registers](Metrics::register) them to encode them.
#[derive(Clone, Debug)]
pub struct Metrics {
    reconciles: Family<ReconcileLabels, Counter>,
    durations: Family<KindLabel, Histogram, fn() -> Histogram>,
    conflicts: Counter,
    retries_exhausted: Counter,
    /// Entries released because their tenant was gone without the controller seeing it go.
    orphans_released: Counter,
    /// Entries and tenants found outside this controller's pool and left alone.
    outside_pool: Counter,
    /// Objects (versions) the controller could not decode and skipped, by kind.
    undecodable: Family<KindLabel, Counter>,
    /// Moves off draining nodes that ended, by result.
    migrations: Family<MoveLabel, Counter>,
    /// NodeRequests a provisioner reported Failed.
    requests_failed: Counter,
    /// Machines handed back (their request deleted) after holding nothing for a while.
    nodes_handed_back: Counter,
    /// NodeRequest creates and deletes the API refused, by action (each retried at the next
    /// look; one never stops the others).
    request_errors: Family<ActionLabel, Counter>,
    /// Ticks of the capacity tick done (not exported: a test's sign that a look ran).
    request_looks: Counter,
    /// Registration writes and reads the API refused, by action (each tried again; one never
    /// stops the others).
    register_errors: Family<ActionLabel, Counter>,
    /// Core Nodes reported and left alone by the registration, by problem (once per change).
    register_problems: Family<ProblemLabel, Counter>,
    /// Rounds of the registration done (not exported: a test's sign that a round ran).
    register_rounds: Counter,
    /// Consolidation's drains, cancels and hand-backs, by action.
    consolidation_actions: Family<ActionLabel, Counter>,
    /// Nodes consolidation could free and did not drain, by reason (once per node and reason).
    disruption_blocked: Family<ReasonLabel, Counter>,
    /// Moves asked of smaller tenants to make room for waiting ones.
    make_room_moves: Counter,
    /// Tenants placed (a Reserve edit committed; not moves).
    placements: Counter,
    /// Node status writes, by result (ok, conflict, error).
    node_status_writes: Family<ResultLabel, Counter>,
    /// Reservations a Node's status no longer held: lost (the tenant left Active) or restored.
    reservation_events: Family<EventLabel, Counter>,
    money_decisions: Family<MoneyLabel, Counter>,
    machines_idle: Family<ClassLabel, Gauge>,
}

/// A family with each of `labels` created at 0, so that every series shows before it counts.
fn zeroed<L>(labels: impl IntoIterator<Item = L>) -> Family<L, Counter>
where
    L: Clone + std::hash::Hash + Eq,
{
    let family = Family::<L, Counter>::default();
    for label in labels {
        drop(family.get_or_create(&label));
    }
    family
}

impl Default for Metrics {
    fn default() -> Self {
        let undecodable = zeroed(KINDS.map(|kind| KindLabel { kind }));
        let migrations = zeroed(MOVE_RESULTS.map(|result| MoveLabel { result }));
        let request_errors = zeroed(REQUEST_ACTIONS.map(|action| ActionLabel { action }));
        let register_errors = zeroed(REGISTER_ACTIONS.map(|action| ActionLabel { action }));
        let register_problems = zeroed(REGISTER_PROBLEMS.map(|problem| ProblemLabel { problem }));
        let consolidation_actions =
            zeroed(CONSOLIDATION_ACTIONS.map(|action| ActionLabel { action }));
        let disruption_blocked = zeroed(DISRUPTION_BLOCKED.map(|reason| ReasonLabel { reason }));
        Metrics {
            consolidation_actions,
            disruption_blocked,
            make_room_moves: Counter::default(),
            placements: Counter::default(),
            node_status_writes: zeroed(WRITE_RESULTS.map(|result| ResultLabel { result })),
            reservation_events: zeroed(RESERVATION_EVENTS.map(|event| EventLabel { event })),
            money_decisions: zeroed(
                MONEY_DECISIONS.map(|(action, reason)| MoneyLabel { action, reason }),
            ),
            machines_idle: Family::default(),
            register_errors,
            register_problems,
            register_rounds: Counter::default(),
            migrations,
            request_errors,
            requests_failed: Counter::default(),
            request_looks: Counter::default(),
            nodes_handed_back: Counter::default(),
            reconciles: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
            conflicts: Counter::default(),
            retries_exhausted: Counter::default(),
            orphans_released: Counter::default(),
            outside_pool: Counter::default(),
            undecodable,
        }
    }
}

impl Metrics {
    /// Registers every family into `registry` (they share their values with `self`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tenant_placer_reconciles",
            "Reconciles by kind and result (ok, or the error label)",
            self.reconciles.clone(),
        );
        registry.register(
            "tenant_placer_reconcile_duration_seconds",
            "Time spent in one reconcile",
            self.durations.clone(),
        );
        registry.register(
            "tenant_placer_placement_conflicts",
            "Node status writes refused with 409 Conflict and retried from fresh data",
            self.conflicts.clone(),
        );
        registry.register(
            "tenant_placer_placement_retries_exhausted",
            "Placements that used up their conflict retries and were requeued",
            self.retries_exhausted.clone(),
        );
        registry.register(
            "tenant_placer_orphaned_entries_released",
            "Entries released because their tenant was gone without the controller seeing it go",
            self.orphans_released.clone(),
        );
        registry.register(
            "tenant_placer_outside_pool",
            "Entries on this pool's nodes of tenants outside the tenant selector, and tenants whose labels left it, found and left alone (another pool's business, or a misconfiguration)",
            self.outside_pool.clone(),
        );
        registry.register(
            "tenant_placer_migrations",
            "Moves off draining nodes that ended: done (the source released) or cancelled (the target released)",
            self.migrations.clone(),
        );
        registry.register(
            "tenant_placer_node_requests_failed",
            "NodeRequests the provisioner reported Failed (their class rests, its tenants are planned again)",
            self.requests_failed.clone(),
        );
        registry.register(
            "tenant_placer_nodes_handed_back",
            "Machines handed back (their NodeRequest deleted) after holding nothing for --empty-node-seconds",
            self.nodes_handed_back.clone(),
        );
        registry.register(
            "tenant_placer_node_request_errors",
            "NodeRequest writes the API refused, by action (create, retire a Failed one, withdraw one whose class is gone, hand_back); each is retried at the next look and never stops the others",
            self.request_errors.clone(),
        );
        registry.register(
            "tenant_placer_consolidation_actions",
            "What consolidation (--consolidation WhenUnderutilized) did, by action: drain (a node its tenants can leave), cancel (a drain of a node that became do-not-disrupt), hand_back (a drained bought node's request deleted)",
            self.consolidation_actions.clone(),
        );
        registry.register(
            "tenant_placer_disruption_blocked",
            "Nodes consolidation could free and did not drain, and waiting tenants room could be made for by moves and was not, by reason (DoNotDisrupt, TenantsWaiting, OutsideWindow, BudgetExhausted), once per node (or waiter) and reason",
            self.disruption_blocked.clone(),
        );
        registry.register(
            "tenant_placer_make_room_moves",
            "Moves asked of smaller tenants to make room for a waiting tenant that fits nowhere (--make-room-moves), before any machine is bought for it",
            self.make_room_moves.clone(),
        );
        registry.register(
            "tenant_placer_registration_errors",
            "Writes and reads of registered Nodes (--register-nodes) the API refused, by action (create, update, delete, read); each is tried again and never stops the others",
            self.register_errors.clone(),
        );
        registry.register(
            "tenant_placer_registration_problems",
            "Core Nodes the registration reported and left alone, by problem (clash: a placement Node of that name it did not register; unreadable_allocatable), once per change",
            self.register_problems.clone(),
        );
        registry.register(
            "tenant_placer_placements",
            "Tenants placed: given a reservation on a node while they held none (moves are counted in tenant_placer_migrations_total)",
            self.placements.clone(),
        );
        registry.register(
            "tenant_placer_node_status_writes",
            "Node status writes by result (ok, conflict: 409 and decided again, error)",
            self.node_status_writes.clone(),
        );
        registry.register(
            "tenant_placer_reservation_events",
            "Reservations a Node's status no longer held, by event: lost (the tenant left Active) or restored (written back)",
            self.reservation_events.clone(),
        );
        registry.register(
            "tenant_placer_money_decisions",
            "The capacity tick's decisions that spend or save money, by action (buy, hand_back, retire, withdraw, keep) and reason",
            self.money_decisions.clone(),
        );
        registry.register(
            "tenant_placer_machines_idle",
            "Machines bought that hold nothing and no waiting tenant could use (handed back after the delay), by NodeClass",
            self.machines_idle.clone(),
        );
        registry.register(
            "tenant_placer_undecodable_objects",
            "Object versions the controller could not decode and skipped (see the error log)",
            self.undecodable.clone(),
        );
    }

    /// Counts one reconcile of `kind` with its result label and duration.
    pub fn reconciled(&self, kind: &'static str, result: &'static str, took: Duration) {
        self.reconciles
            .get_or_create(&ReconcileLabels { kind, result })
            .inc();
        self.durations
            .get_or_create(&KindLabel { kind })
            .observe(took.as_secs_f64());
    }

    /// The capacity tick finished a tick.
    pub fn request_look_done(&self) {
        self.request_looks.inc();
    }

    /// How many ticks the capacity tick has finished.
    pub fn request_looks_done(&self) -> u64 {
        self.request_looks.get()
    }

    /// How many reconciles of `kind` ended with `result` ("ok", or the error label): a test's
    /// sign that a re-check ran.
    pub fn reconciles(&self, kind: &'static str, result: &'static str) -> u64 {
        self.reconciles
            .get_or_create(&ReconcileLabels { kind, result })
            .get()
    }

    /// A tenant was given a reservation.
    pub fn placed(&self) {
        self.placements.inc();
    }

    /// A Node status write ended: "ok", "conflict" or "error".
    pub fn node_status_written(&self, result: &'static str) {
        self.node_status_writes
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// A reservation a Node's status no longer held was "lost" or "restored".
    pub fn reservation_event(&self, event: &'static str) {
        self.reservation_events
            .get_or_create(&EventLabel { event })
            .inc();
    }

    /// How many tenants were placed, and reservations `event` ("lost", "restored"): tests.
    pub fn placements_and_reservation_events(&self, event: &'static str) -> (u64, u64) {
        let events = self
            .reservation_events
            .get_or_create(&EventLabel { event })
            .get();
        (self.placements.get(), events)
    }

    /// A Node status write answered 409 Conflict (it is retried from fresh data).
    pub fn conflict(&self) {
        self.conflicts.inc();
    }

    /// A placement gave up after its conflict budget (the reconcile is requeued).
    pub fn retries_exhausted(&self) {
        self.retries_exhausted.inc();
    }

    /// An entry was released as an orphan: its tenant went without the controller seeing it.
    pub fn orphan_released(&self) {
        self.orphans_released.inc();
    }

    /// An entry of a tenant outside the pool, or a tenant that left it, was found and left alone.
    pub fn outside_pool(&self) {
        self.outside_pool.inc();
    }

    /// How many times something outside the pool was found and left alone.
    pub fn outside_pool_found(&self) -> u64 {
        self.outside_pool.get()
    }

    /// How many orphaned entries were released.
    pub fn orphans_released(&self) -> u64 {
        self.orphans_released.get()
    }

    /// A move off a draining node ended: done (`true`) or cancelled.
    pub fn migration_ended(&self, done: bool) {
        let result = if done { "done" } else { "cancelled" };
        self.migrations.get_or_create(&MoveLabel { result }).inc();
    }

    /// A NodeRequest was reported Failed.
    pub fn node_request_failed(&self) {
        self.requests_failed.inc();
    }

    /// Counts one NodeRequest write the API refused (`action`: one of create, retire, hand_back).
    pub fn node_request_error(&self, action: &'static str) {
        self.request_errors
            .get_or_create(&ActionLabel { action })
            .inc();
    }

    /// How many NodeRequest writes for `action` the API refused.
    pub fn node_request_errors(&self, action: &'static str) -> u64 {
        self.request_errors
            .get_or_create(&ActionLabel { action })
            .get()
    }

    /// Consolidation did `action` (drain, cancel, hand_back).
    pub fn consolidation_action(&self, action: &'static str) {
        self.consolidation_actions
            .get_or_create(&ActionLabel { action })
            .inc();
    }

    /// How many times consolidation did `action`.
    pub fn consolidation_actions(&self, action: &'static str) -> u64 {
        self.consolidation_actions
            .get_or_create(&ActionLabel { action })
            .get()
    }

    /// A node consolidation could free was not drained, for `reason`.
    pub fn disruption_blocked(&self, reason: &'static str) {
        self.disruption_blocked
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// `moves` moves were asked to make room for a waiting tenant.
    pub fn make_room_moved(&self, moves: usize) {
        self.make_room_moves
            .inc_by(u64::try_from(moves).unwrap_or(u64::MAX));
    }

    /// How many moves were asked to make room.
    pub fn make_room_moves(&self) -> u64 {
        self.make_room_moves.get()
    }

    /// How many times a drain was not made for `reason`.
    pub fn disruptions_blocked(&self, reason: &'static str) -> u64 {
        self.disruption_blocked
            .get_or_create(&ReasonLabel { reason })
            .get()
    }

    /// The capacity tick decided `action` for `reason` (one of [`MONEY_DECISIONS`]).
    pub fn money_decision(&self, action: &'static str, reason: &'static str) {
        self.money_decisions
            .get_or_create(&MoneyLabel { action, reason })
            .inc();
    }

    /// How many times the capacity tick decided `action` for `reason`.
    pub fn money_decisions(&self, action: &'static str, reason: &'static str) -> u64 {
        self.money_decisions
            .get_or_create(&MoneyLabel { action, reason })
            .get()
    }

    /// The idle machines now, by class (a class with none is not listed).
    pub fn set_machines_idle<'a>(&self, idle: impl IntoIterator<Item = (&'a str, i64)>) {
        self.machines_idle.clear();
        for (class, count) in idle {
            self.machines_idle
                .get_or_create(&ClassLabel {
                    class: class.to_owned(),
                })
                .set(count);
        }
    }

    /// A machine was handed back.
    pub fn node_handed_back(&self) {
        self.nodes_handed_back.inc();
    }

    /// How many machines were handed back.
    pub fn nodes_handed_back(&self) -> u64 {
        self.nodes_handed_back.get()
    }

    /// Counts one registration call the API refused (`action`: create, update, delete, read).
    pub fn register_error(&self, action: &'static str) {
        self.register_errors
            .get_or_create(&ActionLabel { action })
            .inc();
    }

    /// How many registration calls for `action` the API refused.
    pub fn register_errors(&self, action: &'static str) -> u64 {
        self.register_errors
            .get_or_create(&ActionLabel { action })
            .get()
    }

    /// Counts one problem the registration reported (`problem`: clash, unreadable_allocatable).
    pub fn register_problem(&self, problem: &'static str) {
        self.register_problems
            .get_or_create(&ProblemLabel { problem })
            .inc();
    }

    /// How many times the registration reported `problem`.
    pub fn register_problems(&self, problem: &'static str) -> u64 {
        self.register_problems
            .get_or_create(&ProblemLabel { problem })
            .get()
    }

    /// The registration finished a round.
    pub fn register_round_done(&self) {
        self.register_rounds.inc();
    }

    /// How many rounds the registration has finished.
    pub fn register_rounds_done(&self) -> u64 {
        self.register_rounds.get()
    }

    /// An object of `kind` (as the API names it: `NodeClass`) could not be decoded and was
    /// skipped (each version once). A kind not watched is counted as `other`.
    pub fn undecodable(&self, kind: &str) {
        let kind = KINDS
            .into_iter()
            .find(|known| known.eq_ignore_ascii_case(kind))
            .unwrap_or("other");
        self.undecodable.get_or_create(&KindLabel { kind }).inc();
    }
}
