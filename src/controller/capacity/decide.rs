//! What the capacity tick does, decided from its snapshot: pure, table-tested (in `tests`).
//! What to plan for (the queue's order, the promise of room on the way), what to buy, what each
//! waiting tenant is told, what every purchase is used for, and what goes back.
//!
//! Rules enforced here: see the module rules of [`super`], each stated where it is decided.

use super::accounts;
use super::accounts::{Accounts, NodeSeen, RequestSeen, Use};
use super::memory::Requested;
use super::snapshot::{Pool, Wait, Waiter};
use crate::api::{
    NODE_REQUEST_LABEL, Node, NodeClass, NodeRequest, NodeRequestPhase, NodeRequestSpec, NodeState,
};
use crate::controller::{consolidation, make_room};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use placement::{
    InFlightRequest, Labels, NodeClassOffer, Policy, Purchase, QueueMode, Resources,
    SelectiveTenant, WaitingTenant,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A hash of what the planner reads.
pub(super) fn fingerprint(
    planned: &[SelectiveTenant],
    offers: &[(NodeClassOffer, Labels)],
    in_flight: &[(InFlightRequest, Labels)],
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for tenant in planned {
        let footprint = tenant.waiting.footprint;
        (&tenant.waiting.tenant, &tenant.selector).hash(&mut hasher);
        (footprint.threads, footprint.memory_gb, footprint.storage_gb).hash(&mut hasher);
    }
    for (offer, labels) in offers {
        let capacity = offer.capacity;
        (&offer.name, labels).hash(&mut hasher);
        (capacity.threads, capacity.memory_gb, capacity.storage_gb).hash(&mut hasher);
        (offer.monthly_cost, offer.limit, offer.in_use).hash(&mut hasher);
    }
    for (request, labels) in in_flight {
        let capacity = request.capacity;
        (&request.name, labels).hash(&mut hasher);
        (capacity.threads, capacity.memory_gb, capacity.storage_gb).hash(&mut hasher);
    }
    hasher.finish()
}

/// The requests not taken up yet (`Pending`) whose class is gone: nobody is to buy for them.
pub(super) fn classless<'a>(
    requests: &'a [Arc<NodeRequest>],
    classes: &HashSet<String>,
) -> impl Iterator<Item = &'a NodeRequest> {
    requests.iter().map(AsRef::as_ref).filter(|r| {
        r.phase() == NodeRequestPhase::Pending
            && r.metadata.deletion_timestamp.is_none()
            && !classes.contains(&r.spec.node_class)
    })
}

/// Whether `found`, a request under the name of a purchase about to be made, is that purchase
/// in flight: the same spec, not going, not Failed (anything else is another request's).
pub(super) fn is_in_flight_for(found: &NodeRequest, spec: &NodeRequestSpec) -> bool {
    found.spec == *spec
        && found.metadata.deletion_timestamp.is_none()
        && found.phase() != NodeRequestPhase::Failed
}

/// A request in flight (its machine not yet holding its tenants): the capacity the plan counts
/// on, and the tenants it was bought for.
#[derive(Debug)]
pub(super) struct Incoming<'a> {
    pub(super) request: InFlightRequest,
    pub(super) labels: Labels,
    pub(super) bought_for: &'a [String],
}

/// What to plan for: the waiting tenants a machine would be placed for, in queue order, as the
/// queue will serve them.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Demand {
    /// Planned for, oldest first: every blocked move (it takes room before younger tenants), and
    /// every first placement that has waited `request_after`, unless it waits behind a
    /// StrictFIFO head that is not planned for.
    pub(super) planned: Vec<SelectiveTenant>,
    /// StrictFIFO: the oldest first placement (nothing younger is placed before it).
    pub(super) head: Option<Head>,
    /// Every waiting tenant, oldest first (who could use a machine).
    pub(super) waiting: Vec<Waiter>,
}

#[derive(Debug, PartialEq)]
pub(super) struct Head {
    pub(super) tenant: String,
    /// Whether the head is among the planned (it has waited long enough).
    pub(super) planned: bool,
    /// The first placements younger than it.
    pub(super) behind: Vec<String>,
}

impl Demand {
    pub(super) fn of(
        waiters: &[Waiter],
        mode: QueueMode,
        request_after: Duration,
        now: Timestamp,
    ) -> Demand {
        let mut waiting = waiters.to_vec();
        waiting.sort_by(|a, b| (a.created, &a.key).cmp(&(b.created, &b.key)));
        let long_enough = |w: &Waiter| match w.wait {
            Wait::Move => true,
            Wait::First { since } => since.is_some_and(|since| {
                now.duration_since(since)
                    .try_into()
                    .is_ok_and(|waited: Duration| waited >= request_after)
            }),
        };
        let first = |w: &&Waiter| matches!(w.wait, Wait::First { .. });
        let head = (mode == QueueMode::StrictFifo)
            .then(|| waiting.iter().find(first))
            .flatten()
            .map(|head| Head {
                tenant: head.key.clone(),
                planned: long_enough(head),
                behind: waiting
                    .iter()
                    .filter(first)
                    .skip(1)
                    .map(|w| w.key.clone())
                    .collect(),
            });
        let held_back = |w: &Waiter| {
            head.as_ref()
                .is_some_and(|h| !h.planned && (h.tenant == w.key || h.behind.contains(&w.key)))
        };
        let planned = waiting
            .iter()
            .filter(|w| long_enough(w) && !held_back(w))
            .map(|w| SelectiveTenant {
                waiting: WaitingTenant {
                    tenant: w.key.clone(),
                    footprint: w.footprint,
                },
                selector: w.selector.clone(),
            })
            .collect();
        Demand {
            planned,
            head,
            waiting,
        }
    }

    /// Each request's room goes first to the waiting tenants it was bought for (their
    /// selectors matching its labels), oldest first while they fit, planned for or not: the
    /// engine holds a delivered machine's room for them. Not those behind a StrictFIFO head: the
    /// head comes first. They are planned for no further; the plan sees what is left of each
    /// request, for the others.
    pub(super) fn promise(
        mut self,
        incoming: Vec<Incoming<'_>>,
    ) -> (Demand, Vec<(InFlightRequest, Labels)>) {
        let mut promised: HashSet<&str> = HashSet::new();
        let mut in_flight = Vec::with_capacity(incoming.len());
        for Incoming {
            mut request,
            labels,
            bought_for,
        } in incoming
        {
            for waiter in &self.waiting {
                // Under StrictFIFO the head comes first, even onto room bought for those behind
                // it (the engine's queue does the same rather than wait for good).
                let behind_head = self
                    .head
                    .as_ref()
                    .is_some_and(|h| h.behind.contains(&waiter.key));
                let takes = !behind_head
                    && bought_for.contains(&waiter.key)
                    && !promised.contains(waiter.key.as_str())
                    && placement::selector::matches(waiter.selector.as_ref(), &labels)
                    && waiter.footprint.fits_within(&request.capacity);
                if takes {
                    request.capacity = request.capacity.saturating_sub(waiter.footprint);
                    promised.insert(&waiter.key);
                }
            }
            in_flight.push((request, labels));
        }
        let promised: HashSet<String> = promised.into_iter().map(str::to_owned).collect();
        self.planned
            .retain(|t| !promised.contains(&t.waiting.tenant));
        (self, in_flight)
    }

    /// A hash of the tenants planned for and their footprints.
    pub(super) fn fingerprint(&self) -> u64 {
        fingerprint(&self.planned, &[], &[])
    }

    /// The purchase, and each tenant nothing is bought for with why. Behind a StrictFIFO head
    /// no class can hold, nothing is bought for the first placements: they would never be
    /// placed on the machine before the head.
    pub(super) fn plan(
        &self,
        policy: Policy,
        offers: &[(NodeClassOffer, Labels)],
        in_flight: &[(InFlightRequest, Labels)],
    ) -> (Purchase, HashMap<String, String>) {
        let mut purchase = placement::purchase_by_labels(policy, offers, in_flight, &self.planned);
        let mut why: HashMap<String, String> = purchase
            .unplaceable
            .iter()
            .map(|u| {
                (
                    u.tenant.clone(),
                    format!("no node can be requested for it: {}", u.why),
                )
            })
            .collect();
        let Some(head) = &self.head else {
            return (purchase, why);
        };
        let blocked = !head.planned || why.contains_key(&head.tenant);
        if !blocked {
            return (purchase, why);
        }
        if head.planned {
            let moves: Vec<SelectiveTenant> = self
                .planned
                .iter()
                .filter(|t| t.waiting.tenant != head.tenant)
                .filter(|t| !head.behind.contains(&t.waiting.tenant))
                .cloned()
                .collect();
            purchase = placement::purchase_by_labels(policy, offers, in_flight, &moves);
        }
        let reason = if head.planned {
            "for which no machine can be bought"
        } else {
            "which has not waited long enough for a machine yet"
        };
        for tenant in &head.behind {
            why.insert(
                tenant.clone(),
                format!(
                    "it waits behind {} (StrictFIFO), {reason}: nothing is bought for it before",
                    head.tenant
                ),
            );
        }
        (purchase, why)
    }

    /// Whether a waiting tenant the queue would place there could use an empty node with these
    /// labels and this capacity (StrictFIFO: only the head's turn, or a move).
    pub(super) fn could_use(&self, labels: &Labels, capacity: Resources) -> bool {
        self.waiting.iter().any(|w| {
            let behind = self
                .head
                .as_ref()
                .is_some_and(|h| h.behind.contains(&w.key));
            !behind
                && placement::selector::matches(w.selector.as_ref(), labels)
                && w.footprint.fits_within(&capacity)
        })
    }
}

/// The classes that may be bought now (not resting), with how many of each are in use, and the
/// labels their nodes carry.
pub(super) fn offers(
    classes: &[Arc<NodeClass>],
    resting: &HashSet<String>,
    requested: &[Requested],
    pool: &Pool,
    accounts: &Accounts,
) -> Vec<(NodeClassOffer, Labels)> {
    let mut offers: Vec<(NodeClassOffer, Labels)> = classes
        .iter()
        .filter(|c| !resting.contains(&c.name_any()) && pool.has_class(&c.name_any()))
        .filter(|c| c.unavailable().is_none())
        .filter_map(|class| {
            let name = class.name_any();
            let in_use = requested
                .iter()
                .filter(|r| r.spec.node_class == name)
                .count();
            match class.offer(in_use) {
                Ok(mut offer) => {
                    // What its Nodes deliver now, learned in this look before its status says so.
                    if let Some(delivered) = accounts.delivered.get(&name) {
                        offer.capacity = offer.capacity.min_each(*delivered);
                    }
                    Some((offer, class.node_labels()))
                }
                // The schema refuses a negative capacity: only an object written around it.
                Err(error) => {
                    tracing::debug!(class = %name, %error, "NodeClass skipped: its capacity cannot be read");
                    None
                }
            }
        })
        .collect();
    offers.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    offers
}

/// The longest class name a request name keeps whole: `<class>-<8 hex digits>` stays a DNS
/// label (63 characters), as a Node name and a label value must be.
pub(super) const KEPT_CLASS: usize = 54;

/// `<class>-<8 hex digits of a hash of the class, its tenants and the attempt>`: the same
/// purchase has the same name, whoever computes it. A class name that would not make a DNS label
/// (too long, or with dots) is cut to 54 characters, dots made dashes, no dash at its end; the
/// hash covers the whole name. Attempt 0 hashes without the attempt.
pub(super) fn request_name(class: &str, tenants: &[String], attempt: u32) -> String {
    use std::hash::{Hash, Hasher};
    // NB: DefaultHasher::new() has fixed keys: the same input hashes alike in every process.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (class, tenants).hash(&mut hasher);
    if attempt > 0 {
        attempt.hash(&mut hasher);
    }
    let hash = hasher.finish() & 0xffff_ffff;
    let kept: String = class
        .chars()
        .take(KEPT_CLASS)
        .map(|c| if c == '.' { '-' } else { c })
        .collect();
    format!("{}-{hash:08x}", kept.trim_end_matches('-'))
}

/// What each waiting tenant's status adds: the request it waits for (live, or created and not
/// shown yet), or why nothing is bought for it, which wins.
pub(super) fn notes(
    created: &HashMap<String, (NodeRequestSpec, Instant)>,
    live: &[Arc<NodeRequest>],
    unplaceable: HashMap<String, String>,
) -> HashMap<String, String> {
    let mut notes = request_notes(live);
    for (name, (spec, _)) in created {
        for tenant in &spec.tenants {
            notes.entry(tenant.clone()).or_insert_with(|| {
                format!(
                    "node request {name} ({}) is Pending for it",
                    spec.node_class
                )
            });
        }
    }
    notes.extend(unplaceable);
    notes
}

/// Why nothing is bought for a tenant, with the pool's classes that cannot be bought now and
/// why (their `Available` condition), since the planner did not see them.
pub(super) fn with_unavailable(
    mut unplaceable: HashMap<String, String>,
    classes: &[Arc<NodeClass>],
    pool: &Pool,
) -> HashMap<String, String> {
    let why: Vec<String> = classes
        .iter()
        .filter(|c| pool.has_class(&c.name_any()))
        .filter_map(|c| {
            Some(format!(
                "NodeClass {} cannot be bought now: {}",
                c.name_any(),
                c.unavailable()?
            ))
        })
        .collect();
    if !why.is_empty() {
        let why = why.join("; ");
        for note in unplaceable.values_mut() {
            note.push_str(" (");
            note.push_str(&why);
            note.push(')');
        }
    }
    unplaceable
}

/// `node request X (class) is Provisioning for it`, for each tenant of each live request.
pub(super) fn request_notes(live: &[Arc<NodeRequest>]) -> HashMap<String, String> {
    let mut notes = HashMap::new();
    for request in live {
        let (name, phase) = (request.name_any(), request.phase());
        for tenant in &request.spec.tenants {
            notes.insert(
                tenant.clone(),
                format!(
                    "node request {name} ({}) is {} for it",
                    request.spec.node_class,
                    phase.to_string().trim()
                ),
            );
        }
    }
    notes
}

/// What every live request is used for ([`accounts::judge`] over this look's snapshot).
pub(super) fn account(
    live: &[Arc<NodeRequest>],
    nodes: &HashMap<String, Arc<Node>>,
    demand: &Demand,
) -> Accounts {
    let seen: HashMap<&str, NodeSeen<'_>> = nodes
        .iter()
        .map(|(name, node)| {
            let capacity = node.spec.capacity.to_resources().ok();
            // An empty node consolidation drained counts as usable: it is taken back.
            let in_service = node.spec.state == NodeState::Online
                || (consolidation::consolidating(node) && node.allocations().is_empty());
            let awaited =
                in_service && capacity.is_some_and(|c| demand.could_use(node.labels(), c));
            let seen = NodeSeen {
                labelled_for: node.labels().get(NODE_REQUEST_LABEL).map(String::as_str),
                holds: !node.allocations().is_empty() || node.unreadable_reason().is_some(),
                going: node.metadata.deletion_timestamp.is_some(),
                awaited,
                capacity,
            };
            (name.as_str(), seen)
        })
        .collect();
    let requests: Vec<RequestSeen<'_>> = live
        .iter()
        .map(|r| RequestSeen {
            name: r.metadata.name.as_deref().unwrap_or_default(),
            class: &r.spec.node_class,
            node: (r.phase() == NodeRequestPhase::Ready).then(|| r.made_node()),
        })
        .collect();
    accounts::judge(&requests, &seen)
}

/// Why nothing is bought for a tenant, with each class that would hold it as promised but not
/// as its Nodes deliver.
pub(super) fn with_short_classes(
    mut unplaceable: HashMap<String, String>,
    classes: &[Arc<NodeClass>],
    demand: &Demand,
    pool: &Pool,
) -> HashMap<String, String> {
    for waiter in &demand.waiting {
        let Some(note) = unplaceable.get_mut(&waiter.key) else {
            continue;
        };
        for class in classes.iter().filter(|c| pool.has_class(&c.name_any())) {
            let (Ok(promised), Some(Ok(delivered))) = (
                class.spec.capacity.to_resources(),
                class.delivered().map(|d| d.to_resources()),
            ) else {
                continue;
            };
            if waiter.footprint.fits_within(&promised) && !waiter.footprint.fits_within(&delivered)
            {
                note.push_str(&format!(
                    " (NodeClass {} promises {promised} but its Nodes deliver {delivered}: none \
                     is bought for it)",
                    class.name_any()
                ));
            }
        }
    }
    unplaceable
}

/// Why a machine goes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GoesBack {
    /// Its Node held nothing, and no waiter could use it, for the hand-back delay.
    Idle,
    /// Consolidation drained it to hand it back: at once.
    Consolidated,
    /// Ready with no Node behind it for the hand-back delay: retired.
    Orphaned,
}

impl GoesBack {
    /// As `tenant_placer_money_decisions_total` counts it: (action, reason).
    pub(super) fn decision(self) -> (&'static str, &'static str) {
        match self {
            GoesBack::Idle => ("hand_back", "idle"),
            GoesBack::Consolidated => ("hand_back", "consolidated"),
            GoesBack::Orphaned => ("retire", "orphaned"),
        }
    }
}

/// What goes back at one tick, and what is taken back into service instead.
#[derive(Debug, Default)]
pub(super) struct Returns<'a> {
    /// Each request whose machine goes back, with the Node it owns (judged at this copy).
    pub(super) give_back: Vec<(&'a NodeRequest, Option<&'a Arc<Node>>, GoesBack)>,
    /// Empty nodes consolidation drained that a waiting tenant can use.
    pub(super) take_back: Vec<&'a Arc<Node>>,
    /// The idle machines, by class.
    pub(super) idle_by_class: BTreeMap<&'a str, i64>,
}

/// What goes back, from the accounts and since when each purchase has been idle or orphaned
/// (`idle_since`, by UID: started here, and forgotten once a purchase is neither). An idle
/// machine goes back after `delay`, one consolidation drained at once, an orphan is retired
/// after `delay`; an empty drained node a waiter can use is taken back instead. Pure.
pub(super) fn returns<'a>(
    live: &'a [Arc<NodeRequest>],
    accounts: &Accounts,
    bought: &'a HashMap<String, Arc<Node>>,
    idle_since: &mut HashMap<String, Instant>,
    (now, delay): (Instant, Duration),
) -> Returns<'a> {
    let mut returns = Returns::default();
    let mut still = HashSet::new();
    for request in live {
        let Some((use_, owned)) = accounts.of(request) else {
            continue;
        };
        let node = owned.as_ref().and_then(|n| bought.get(n));
        let consolidated = node.is_some_and(|n| consolidation::consolidating(n));
        if *use_ == Use::Awaited && consolidated {
            returns.take_back.extend(node);
        }
        // A request whose provisioner records its Machine (Cluster API) is left to it when its
        // Node is gone: its Machine may be being replaced, and the provisioner fails the request
        // when nothing replaces it.
        let machine_recorded = request
            .status
            .as_ref()
            .is_some_and(|s| !s.machine.is_empty());
        let why = match (use_, consolidated) {
            (Use::Idle, true) => GoesBack::Consolidated,
            (Use::Idle, false) => GoesBack::Idle,
            (Use::Orphaned, _) if !machine_recorded => GoesBack::Orphaned,
            _ => continue,
        };
        if *use_ == Use::Idle {
            let count = returns
                .idle_by_class
                .entry(&request.spec.node_class)
                .or_default();
            *count = count.saturating_add(1);
        }
        let uid = request.metadata.uid.clone().unwrap_or_default();
        let since = *idle_since.entry(uid.clone()).or_insert(now);
        still.insert(uid);
        if why == GoesBack::Consolidated || now.saturating_duration_since(since) >= delay {
            returns.give_back.push((request.as_ref(), node, why));
        }
    }
    idle_since.retain(|uid, _| still.contains(uid));
    returns
}

/// The waiters still to plan for once make-room has looked: every blocked move, and each first
/// placement that is not given room by moves (nor fits as the nodes are). While a move to make
/// room is in flight, no first placement is planned for: the room may be for it. Pure.
pub(super) fn still_waiting(waiters: &[Waiter], made: &make_room::Made) -> Vec<Waiter> {
    waiters
        .iter()
        .filter(|w| {
            w.wait == Wait::Move
                || !(made.moving || made.held.contains(&w.key) || made.fits.contains(&w.key))
        })
        .cloned()
        .collect()
}

/// Requests in flight that buy again what an earlier one in flight buys: the same tenants,
/// whose footprints the earlier one holds together. One controller never makes such a pair (the
/// earlier request's room goes to them first); two controllers deciding in the same moment do,
/// possibly of different classes. The later of each pair (by creation, then name) is withdrawn.
/// A tenant that grew past the earlier request is not bought for twice by this rule: the later
/// request then holds what the earlier cannot, and stays. Pure.
pub(super) fn duplicates<'a>(
    live: &'a [Arc<NodeRequest>],
    waiters: &[Waiter],
) -> Vec<&'a Arc<NodeRequest>> {
    let footprint: HashMap<&str, Resources> = waiters
        .iter()
        .map(|w| (w.key.as_str(), w.footprint))
        .collect();
    let mut in_flight: Vec<&Arc<NodeRequest>> = live
        .iter()
        .filter(|r| {
            matches!(
                r.phase(),
                NodeRequestPhase::Pending | NodeRequestPhase::Provisioning
            )
        })
        .collect();
    in_flight.sort_by(|a, b| {
        let created = |r: &NodeRequest| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (created(a), a.metadata.name.as_deref()).cmp(&(created(b), b.metadata.name.as_deref()))
    });
    let mut withdrawn = Vec::new();
    for (i, later) in in_flight.iter().enumerate() {
        let mut tenants = later.spec.tenants.clone();
        tenants.sort_unstable();
        let held_by_earlier = in_flight[..i].iter().any(|earlier| {
            let mut theirs = earlier.spec.tenants.clone();
            theirs.sort_unstable();
            let need: Option<Resources> = tenants.iter().try_fold(Resources::ZERO, |sum, t| {
                sum.checked_add(*footprint.get(t.as_str())?)
            });
            theirs == tenants
                && !withdrawn
                    .iter()
                    .any(|w: &&Arc<NodeRequest>| Arc::ptr_eq(w, earlier))
                && need.is_some_and(|need| {
                    earlier
                        .spec
                        .capacity
                        .to_resources()
                        .is_ok_and(|room| need.fits_within(&room))
                })
        });
        if held_by_earlier && !tenants.is_empty() {
            withdrawn.push(*later);
        }
    }
    withdrawn
}
