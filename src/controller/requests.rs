//! Node requests: tenants that wait for capacity turn into a purchase a provisioner acts on, and
//! machines that hold nothing are handed back.
//!
//! ```text
//!   every request_check (leader only):
//!     Failed requests ──▶ Warning Event, deleted; the class rests (backoff doubling per failure)
//!     tenants PendingCapacity for ≥ request_after ──┐
//!     requests in flight (room that is coming) ─────┼──▶ placement::provision (pure) ──▶ create
//!     NodeClasses (limits, costs; resting ones out) ┘        NodeRequests, stable names
//!     each waiting tenant's note ("node request X is Provisioning for it") ──▶ woken if it changed
//!     Nodes made for a request, empty for empty_node_after ──▶ their request deleted (handed back)
//! ```
//!
//! Rules enforced here (docs/design.md, "Node requests"):
//! - with no NodeClass (in the pool) and no request in flight, nothing is planned and no tenant
//!   gets a note: node requests are not in use, and 1,000 idle waiting tenants cost no write;
//! - a tenant is planned for once it has waited `request_after` in `PendingCapacity` (measured
//!   from its Placed condition's transition); suspended and `Resizing` tenants are not (a new
//!   node cannot take a resize);
//! - requests in flight (Pending, Provisioning, or Ready before its Node is seen) count as room,
//!   and as machines of their class against its limit; a request this process created counts
//!   from its create, before the watch shows it: nothing is requested twice;
//! - a request's name is stable, `<class>-<hash of its tenants>`: a create repeated after a crash
//!   or by a new leader finds the first one (AlreadyExists) instead of buying twice;
//! - a Failed request is reported (a Warning Event on it), deleted, and its class rests for a
//!   backoff that doubles with each failure in a row, so its tenants are planned on another
//!   class meanwhile, or on the same one after;
//! - a Node labelled as made for a request, seen holding nothing for `empty_node_after`, is
//!   handed back by deleting its request; the provisioner deletes the Node, whose finalizer keeps
//!   it while it holds reservations (a tenant placed there meanwhile is moved off first);
//! - in a pool (`--node-selector`), a NodeClass is the pool's when the Nodes it makes (its
//!   `spec.labels` and the class label) match the node selector, so every machine bought lands
//!   in the pool; a NodeRequest is the pool's when its class is. Only the pool's classes are
//!   bought, and only the pool's requests are counted as room, retired or handed back: pools
//!   buy side by side and never touch each other's requests. The tenants planned for are the
//!   pool's own (the tenant cache holds no other).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use placement::{InFlightRequest, NodeClassOffer, Purchase, Resources, Unplaceable, WaitingTenant};

use super::publisher::Occurrence;
use super::{Context, Synced};
use crate::api::{
    NODE_CLASS_LABEL, NODE_REQUEST_LABEL, NodeClass, NodeRequest, NodeRequestPhase,
    NodeRequestSpec, PLACED_CONDITION, ResourceAmounts, Tenant, TenantPhase,
};
use crate::error::Error;

/// What the request loop remembers between looks.
#[derive(Debug, Default)]
pub struct Purchases(Mutex<Remembered>);

#[derive(Debug, Default)]
struct Remembered {
    /// By tenant key: what its status adds while it waits (its request, or why none).
    notes: HashMap<String, String>,
    /// Requests created by this process that the watch has not shown yet.
    created: HashMap<String, (NodeRequestSpec, Instant)>,
    /// By class: resting until, and failures in a row.
    resting: HashMap<String, (Instant, u32)>,
    /// By node made for a request: since when it has held nothing.
    empty_since: HashMap<String, Instant>,
    /// What the last plan read (a hash), when it bought nothing: the same input plans the same.
    planned: Option<u64>,
    /// The tenants the last plan could find no machine for.
    unplaceable: Vec<Unplaceable>,
}

/// The first rest of a class whose request failed; it doubles with each failure in a row.
const FIRST_REST: Duration = Duration::from_secs(30);
/// The longest rest.
const LONGEST_REST: Duration = Duration::from_secs(1800);
/// A created request the watch has not shown after this long is forgotten (it was refused).
const CREATED_KEPT: Duration = Duration::from_secs(60);

impl Purchases {
    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a waiting tenant's status adds: its request, or why none can be made.
    pub fn note_for(&self, tenant: &str) -> Option<String> {
        self.lock().notes.get(tenant).cloned()
    }
}

/// Runs the looks until the task is dropped (it runs while this replica leads). Nothing is
/// planned before every cache has synced: a request the watch has not listed yet would be
/// bought again.
pub async fn run(
    ctx: Arc<Context>,
    (classes, classes_synced): (Store<NodeClass>, Synced),
    (requests, requests_synced): (Store<NodeRequest>, Synced),
) {
    let Some(request_after) = ctx.settings.request_after else {
        return;
    };
    loop {
        tokio::time::sleep(ctx.settings.request_check).await;
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
        if let Err(error) = look(&ctx, &classes, &requests, request_after).await {
            tracing::warn!(%error, "node requests: will look again");
        }
    }
}

/// One look: failed requests, new requests, the tenants' notes, machines to hand back.
async fn look(
    ctx: &Context,
    classes: &Store<NodeClass>,
    requests: &Store<NodeRequest>,
    request_after: Duration,
) -> Result<(), Error> {
    let api: Api<NodeRequest> = Api::all(ctx.client.clone());
    let pool = Pool::of(ctx, classes);
    retire_failed(ctx, &api, requests, &pool).await?;
    let live: Vec<Arc<NodeRequest>> = requests
        .state()
        .into_iter()
        .filter(|r| pool.owns(r))
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| r.phase() != NodeRequestPhase::Failed)
        .collect();
    // Without a NodeClass nothing can be bought: node requests are not in use, and a note on
    // every waiting tenant saying so would be a status write each for nothing.
    let no_classes = !classes
        .state()
        .iter()
        .any(|class| pool.has_class(&class.name_any()));
    if no_classes && live.is_empty() {
        wake_changed(ctx, HashMap::new());
        return hand_back(ctx, &api, &live).await;
    }
    let specs = ctx.purchases.requested(&live);
    let waiting = waiting_tenants(ctx, request_after);
    let offers = offers(ctx, classes, &specs, &pool);
    let in_flight: Vec<(String, NodeRequestSpec)> = specs
        .iter()
        .filter(|(name, _, ready)| !ready || ctx.engine.node(name).is_none())
        .map(|(name, spec, _)| (name.clone(), spec.clone()))
        .collect();
    // The planner can take a while under BestFit with many waiters: plan only when what it
    // reads changed since the last look.
    let input = fingerprint(&waiting, &offers, &in_flight);
    let unchanged = ctx.purchases.lock().planned == Some(input);
    let unplaceable = if unchanged {
        ctx.purchases.lock().unplaceable.clone()
    } else {
        let purchase = plan(ctx, &waiting, &offers, &in_flight);
        for new in &purchase.requests {
            create(ctx, &api, new.class.as_str(), &new.tenants, &offers).await?;
        }
        let mut remembered = ctx.purchases.lock();
        // A purchase made changes what the next look reads (the requests created).
        remembered.planned = purchase.requests.is_empty().then_some(input);
        remembered.unplaceable = purchase.unplaceable.clone();
        purchase.unplaceable
    };
    let mut notes = notes(&live, &unplaceable);
    for (name, (spec, _)) in ctx.purchases.lock().created.iter() {
        for tenant in &spec.tenants {
            notes.entry(tenant.clone()).or_insert_with(|| {
                format!(
                    "node request {name} ({}) is Pending for it",
                    spec.node_class
                )
            });
        }
    }
    wake_changed(ctx, notes);
    hand_back(ctx, &api, &live).await
}

impl Purchases {
    /// Every request in flight or Ready, with its spec and whether it is Ready: those the watch
    /// shows, and those this process created that it does not show yet.
    fn requested(&self, live: &[Arc<NodeRequest>]) -> Vec<(String, NodeRequestSpec, bool)> {
        let mut remembered = self.lock();
        let seen: HashSet<String> = live.iter().map(|r| r.name_any()).collect();
        remembered
            .created
            .retain(|name, (_, at)| !seen.contains(name) && at.elapsed() < CREATED_KEPT);
        live.iter()
            .map(|r| {
                let ready = r.phase() == NodeRequestPhase::Ready;
                (r.name_any(), r.spec.clone(), ready)
            })
            .chain(
                remembered
                    .created
                    .iter()
                    .map(|(name, (spec, _))| (name.clone(), spec.clone(), false)),
            )
            .collect()
    }
}

/// The NodeClasses of this controller's pool: `None` when it has no node selector (all are).
struct Pool(Option<HashSet<String>>);

impl Pool {
    fn of(ctx: &Context, classes: &Store<NodeClass>) -> Pool {
        let Some(selector) = ctx.settings.node_selector.as_ref() else {
            return Pool(None);
        };
        let ours = classes
            .state()
            .into_iter()
            .filter(|class| selector.matches(&class_node_labels(class)))
            .map(|class| class.name_any())
            .collect();
        Pool(Some(ours))
    }

    fn has_class(&self, class: &str) -> bool {
        self.0.as_ref().is_none_or(|ours| ours.contains(class))
    }

    /// Whether a request is this pool's: its class is.
    fn owns(&self, request: &NodeRequest) -> bool {
        self.has_class(&request.spec.node_class)
    }
}

/// The labels a Node of this class carries (the provisioner adds the request's name too).
pub fn class_node_labels(class: &NodeClass) -> std::collections::BTreeMap<String, String> {
    let mut labels = class.spec.labels.clone();
    labels.insert(NODE_CLASS_LABEL.to_owned(), class.name_any());
    labels
}

/// A hash of what the planner reads.
fn fingerprint(
    waiting: &[(String, Resources)],
    offers: &[NodeClassOffer],
    in_flight: &[(String, NodeRequestSpec)],
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for (tenant, footprint) in waiting {
        (
            tenant,
            footprint.threads,
            footprint.memory_gb,
            footprint.storage_gb,
        )
            .hash(&mut hasher);
    }
    for offer in offers {
        (
            &offer.name,
            offer.capacity.threads,
            offer.capacity.memory_gb,
        )
            .hash(&mut hasher);
        (
            offer.capacity.storage_gb,
            offer.monthly_cost,
            offer.limit,
            offer.in_use,
        )
            .hash(&mut hasher);
    }
    for (name, spec) in in_flight {
        (name, &spec.node_class, &spec.tenants).hash(&mut hasher);
    }
    hasher.finish()
}

/// Reports each Failed request, deletes it, and rests its class.
async fn retire_failed(
    ctx: &Context,
    api: &Api<NodeRequest>,
    requests: &Store<NodeRequest>,
    pool: &Pool,
) -> Result<(), Error> {
    for failed in requests.state().into_iter().filter(|r| {
        r.phase() == NodeRequestPhase::Failed
            && r.metadata.deletion_timestamp.is_none()
            && pool.owns(r)
    }) {
        let name = failed.name_any();
        let class = failed.spec.node_class.clone();
        let why = failed
            .status
            .as_ref()
            .map(|s| s.message.clone())
            .unwrap_or_default();
        let rest = {
            let mut remembered = ctx.purchases.lock();
            let (until, failures) = remembered
                .resting
                .entry(class.clone())
                .or_insert((Instant::now(), 0));
            *failures = failures.saturating_add(1);
            let rest = FIRST_REST
                .saturating_mul(1u32 << (*failures).saturating_sub(1).min(16))
                .min(LONGEST_REST);
            *until = Instant::now()
                .checked_add(rest)
                .unwrap_or_else(Instant::now);
            rest
        };
        tracing::warn!(request = %name, %class, %why, ?rest, "node request failed; the class rests");
        ctx.metrics.node_request_failed();
        let note = format!(
            "the provisioner could not deliver a {class}: {why}; {class} is not asked for again \
             for {} s, and its tenants are planned on another class meanwhile",
            rest.as_secs()
        );
        publish(
            ctx,
            failed.as_ref(),
            EventType::Warning,
            "ProvisioningFailed",
            note,
        )
        .await;
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(source) => {
                return Err(Error::NodeRequest {
                    request: name,
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Tenants waiting for capacity long enough, oldest first (those with a node selector left out).
fn waiting_tenants(ctx: &Context, request_after: Duration) -> Vec<(String, Resources)> {
    let now = Timestamp::now();
    let long_enough = |tenant: &Tenant| {
        let Some(status) = &tenant.status else {
            return false;
        };
        let since = status
            .conditions
            .iter()
            .find(|c| c.type_ == PLACED_CONDITION)
            .map(|c| c.last_transition_time.0);
        status.phase == TenantPhase::PendingCapacity
            && since.is_some_and(|since| {
                now.duration_since(since)
                    .try_into()
                    .is_ok_and(|waited: Duration| waited >= request_after)
            })
    };
    let mut waiting: Vec<(Option<Timestamp>, String, Resources)> = ctx
        .tenants
        .state()
        .into_iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none() && !t.spec.suspend)
        // NB: a class carries no labels yet, so a new node could not take a tenant with a node
        // selector: buying one for it would only be handed back empty.
        .filter(|t| t.spec.node_selector.is_empty())
        .filter(|t| long_enough(t))
        .filter_map(|t| {
            let footprint = t.spec.footprint().ok()?;
            let created = t.metadata.creation_timestamp.as_ref().map(|c| c.0);
            Some((created, t.key(), footprint))
        })
        .collect();
    waiting.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    waiting
        .into_iter()
        .map(|(_, key, footprint)| (key, footprint))
        .collect()
}

/// The classes that may be bought now (not resting), with how many of each are in use.
fn offers(
    ctx: &Context,
    classes: &Store<NodeClass>,
    requested: &[(String, NodeRequestSpec, bool)],
    pool: &Pool,
) -> Vec<NodeClassOffer> {
    let resting: HashSet<String> = {
        let mut remembered = ctx.purchases.lock();
        remembered
            .resting
            .retain(|_, (until, failures)| *failures > 0 && until.elapsed() < LONGEST_REST);
        remembered
            .resting
            .iter()
            .filter(|(_, (until, _))| Instant::now() < *until)
            .map(|(class, _)| class.clone())
            .collect()
    };
    let mut offers: Vec<NodeClassOffer> = classes
        .state()
        .into_iter()
        .filter(|c| !resting.contains(&c.name_any()) && pool.has_class(&c.name_any()))
        .filter_map(|class| {
            let name = class.name_any();
            let capacity = class.spec.capacity.to_resources().ok()?;
            let in_use = requested
                .iter()
                .filter(|(_, spec, _)| spec.node_class == name)
                .count();
            Some(NodeClassOffer {
                name,
                capacity,
                // Whole units in the API; whole cents for the planner.
                monthly_cost: class
                    .spec
                    .monthly_cost
                    .and_then(|c| u64::try_from(c).ok())
                    .and_then(|c| c.checked_mul(100)),
                limit: class.spec.limit.and_then(|l| u32::try_from(l).ok()),
                in_use: u32::try_from(in_use).unwrap_or(u32::MAX),
            })
        })
        .collect();
    offers.sort_by(|a, b| a.name.cmp(&b.name));
    offers
}

/// The purchase for these tenants: the pure planner, with the room in flight as empty ledgers.
fn plan(
    ctx: &Context,
    waiting: &[(String, Resources)],
    offers: &[NodeClassOffer],
    in_flight: &[(String, NodeRequestSpec)],
) -> Purchase {
    let tenants: Vec<WaitingTenant> = waiting
        .iter()
        .map(|(tenant, footprint)| WaitingTenant {
            tenant: tenant.clone(),
            footprint: *footprint,
        })
        .collect();
    let coming: Vec<InFlightRequest> = in_flight
        .iter()
        .filter_map(|(name, spec)| {
            Some(InFlightRequest {
                name: name.clone(),
                capacity: spec.capacity.to_resources().ok()?,
            })
        })
        .collect();
    placement::purchase(ctx.settings.policy, offers, &coming, &tenants)
}

/// Creates one request under its stable name; one that exists already is taken as made.
async fn create(
    ctx: &Context,
    api: &Api<NodeRequest>,
    class: &str,
    tenants: &[String],
    offers: &[NodeClassOffer],
) -> Result<(), Error> {
    let Some(offer) = offers.iter().find(|o| o.name == class) else {
        return Ok(());
    };
    let name = request_name(class, tenants);
    let spec = NodeRequestSpec {
        node_class: class.to_owned(),
        capacity: ResourceAmounts::from(offer.capacity),
        tenants: tenants.to_vec(),
    };
    let request = NodeRequest::new(&name, spec.clone());
    match api.create(&PostParams::default(), &request).await {
        Ok(created) => {
            tracing::info!(request = %name, class, tenants = tenants.len(), "node requested");
            ctx.purchases
                .lock()
                .created
                .insert(name.clone(), (spec, Instant::now()));
            let note = format!(
                "a {class} is asked for {} waiting tenant(s): {}",
                tenants.len(),
                tenants.join(", ")
            );
            publish(ctx, &created, EventType::Normal, "NodeRequested", note).await;
            // And on each tenant it is for: where its machine is coming from.
            for key in tenants {
                let Some((namespace, tenant_name)) = key.split_once('/') else {
                    continue;
                };
                let reference = ObjectRef::<Tenant>::new(tenant_name).within(namespace);
                if let Some(tenant) = ctx.tenants.get(&reference) {
                    let note = format!("node request {name} asks for a {class} for it");
                    publish(
                        ctx,
                        tenant.as_ref(),
                        EventType::Normal,
                        "NodeRequested",
                        note,
                    )
                    .await;
                }
            }
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
        Err(source) => Err(Error::NodeRequest {
            request: name,
            source,
        }),
    }
}

/// `<class>-<8 hex digits of a hash of the class and its tenants>`: the same purchase has the
/// same name, whoever computes it.
fn request_name(class: &str, tenants: &[String]) -> String {
    use std::hash::{Hash, Hasher};
    // NB: DefaultHasher::new() has fixed keys: the same input hashes alike in every process.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (class, tenants).hash(&mut hasher);
    let hash = hasher.finish() & 0xffff_ffff;
    // Names are DNS labels (63 characters): the class name keeps what room is left.
    let kept: String = class.chars().take(54).collect();
    format!("{kept}-{hash:08x}")
}

/// What each waiting tenant's status adds: the request for it, or why no class can hold it.
fn notes(live: &[Arc<NodeRequest>], unplaceable: &[Unplaceable]) -> HashMap<String, String> {
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
    for refused in unplaceable {
        notes.insert(
            refused.tenant.clone(),
            format!("no node can be requested for it: {}", refused.why),
        );
    }
    notes
}

/// Keeps the new notes and wakes each waiting tenant whose note changed, so its status says it.
fn wake_changed(ctx: &Context, notes: HashMap<String, String>) {
    let changed: Vec<String> = {
        let mut remembered = ctx.purchases.lock();
        let changed = notes
            .iter()
            .filter(|(tenant, note)| remembered.notes.get(*tenant) != Some(note))
            .map(|(tenant, _)| tenant.clone())
            .chain(
                remembered
                    .notes
                    .keys()
                    .filter(|tenant| !notes.contains_key(*tenant))
                    .cloned(),
            )
            .collect();
        remembered.notes = notes;
        changed
    };
    for key in changed {
        if let Some((namespace, name)) = key.split_once('/') {
            let tenant = ObjectRef::<Tenant>::new(name).within(namespace);
            if ctx.tenants.get(&tenant).is_some() {
                ctx.waiting.wake(tenant);
            }
        }
    }
}

/// Hands back each machine made for a request that has held nothing for `empty_node_after`.
async fn hand_back(
    ctx: &Context,
    api: &Api<NodeRequest>,
    live: &[Arc<NodeRequest>],
) -> Result<(), Error> {
    let mut due = Vec::new();
    {
        let mut remembered = ctx.purchases.lock();
        let mut seen = HashSet::new();
        for node in ctx.engine.cache().state() {
            let Some(request) = node.labels().get(NODE_REQUEST_LABEL) else {
                continue;
            };
            let name = node.name_any();
            // The newest copy: our own last write may not be in the cache yet.
            let holds = ctx
                .engine
                .node(&name)
                .is_none_or(|n| !n.allocations().is_empty() || n.unreadable_reason().is_some());
            if holds || node.metadata.deletion_timestamp.is_some() {
                continue;
            }
            seen.insert(name.clone());
            let since = *remembered
                .empty_since
                .entry(name.clone())
                .or_insert_with(Instant::now);
            let wanted = live.iter().any(|r| r.name_any() == *request);
            if wanted && since.elapsed() >= ctx.settings.empty_node_after {
                due.push((name, request.clone()));
            }
        }
        remembered.empty_since.retain(|node, _| seen.contains(node));
    }
    for (node, request) in due {
        tracing::info!(%node, %request, "handing back a machine that holds nothing");
        match api.delete(&request, &DeleteParams::default()).await {
            Ok(_) => ctx.metrics.node_handed_back(),
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(source) => return Err(Error::NodeRequest { request, source }),
        }
        ctx.purchases.lock().empty_since.remove(&node);
    }
    Ok(())
}

/// Publishes one Event on a request or a tenant; a failure to publish is logged, never fatal.
async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    regarding: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let Some(publisher) = &ctx.events else { return };
    let occurrence = Occurrence {
        type_,
        reason,
        action: "Request",
        note,
    };
    if let Err(error) = publisher
        .publish(occurrence, regarding.object_ref(&()))
        .await
    {
        tracing::warn!(%error, reason, "could not publish an event");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::api::NodeRequestStatus;

    #[test]
    fn a_purchase_has_the_same_name_whoever_computes_it_and_a_different_one_for_other_tenants() {
        let tenants = vec!["default/a".to_owned(), "default/b".to_owned()];
        let name = request_name("hetzner-ax162", &tenants);
        assert_eq!(name, request_name("hetzner-ax162", &tenants));
        assert!(name.starts_with("hetzner-ax162-") && name.len() == "hetzner-ax162-".len() + 8);
        assert_ne!(name, request_name("hetzner-ax162", &tenants[..1]));
        assert_ne!(name, request_name("ovh-adv", &tenants));
        // A long class name is cut so that the name stays a DNS label (63 characters).
        let long = "c".repeat(80);
        assert_eq!(request_name(&long, &tenants).len(), 63);
    }

    #[test]
    fn a_waiting_tenants_note_names_its_request_and_phase_or_why_none_can_be_made() {
        let mut request = NodeRequest::new(
            "box-0000abcd",
            NodeRequestSpec {
                node_class: "box".into(),
                capacity: ResourceAmounts::new(64, 256, 8000),
                tenants: vec!["default/big".into()],
            },
        );
        request.status = Some(NodeRequestStatus {
            phase: NodeRequestPhase::Provisioning,
            ..NodeRequestStatus::default()
        });
        let refused = Unplaceable {
            tenant: "default/huge".into(),
            footprint: Resources::new(1000, 1, 1),
            why: placement::NoClass::AtLimit {
                at_limit: vec!["box".into()],
                crowded: Vec::new(),
            },
        };
        let notes = notes(&[Arc::new(request)], &[refused]);
        assert_eq!(
            notes["default/big"],
            "node request box-0000abcd (box) is Provisioning for it"
        );
        assert!(
            notes["default/huge"].starts_with("no node can be requested for it: "),
            "{}",
            notes["default/huge"]
        );
        assert_eq!(notes.len(), 2);
    }
}
