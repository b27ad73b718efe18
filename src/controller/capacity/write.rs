//! The capacity tick's writes: each carries the precondition of what it was decided on (a
//! resourceVersion, a UID), and a refused one is logged, counted by action
//! (`tenant_placer_node_request_errors_total{action}`) and decided again at the next tick; it
//! never stops the others.

use super::accounts::{Accounts, delivers_less};
use super::context::CapacityLoop;
use super::decide::{
    Demand, GoesBack, Returns, classless, duplicates, is_in_flight_for, request_name,
};
use super::memory::{NAME_ATTEMPTS, RETIRED_KEPT, rest_after};
use super::snapshot::Snapshot;
use crate::api::{
    CONSOLIDATING_ANNOTATION, Condition, DELIVERS_CONDITION, NODE_REQUEST_LABEL, Node, NodeClass,
    NodeRequest, NodeRequestPhase, NodeRequestSpec, NodeState, ResourceAmounts, Tenant,
};
use crate::controller::publisher::EventPublisher;
use crate::error::Error;
use crate::metrics::Metrics;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use placement::{Labels, NewNode, NodeClassOffer};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

/// The NodeRequest API, cluster-wide.
fn requests_api(client: &kube::Client) -> Api<NodeRequest> {
    Api::all(client.clone())
}

/// Reports each Failed request once (a Warning Event, the metric, its class rests), and deletes
/// it: those the cache shows and those the watch showed Failed since the last look, gone or not.
pub(super) async fn retire_failed(ctx: &CapacityLoop, snap: &Snapshot) {
    let (api, pool) = (requests_api(&ctx.client), &snap.pool);
    let seen = std::mem::take(&mut ctx.memory.lock().failed);
    let mut failed: Vec<(NodeRequest, bool)> = seen
        .into_values()
        .map(|r| {
            let present = snap
                .requests
                .iter()
                .any(|now| now.metadata.uid == r.metadata.uid);
            (r, present)
        })
        .collect();
    for request in &snap.requests {
        if request.phase() == NodeRequestPhase::Failed
            && !failed
                .iter()
                .any(|(r, _)| r.metadata.uid == request.metadata.uid)
        {
            failed.push((request.as_ref().clone(), true));
        }
    }
    failed.sort_by_key(|(r, _)| r.name_any());
    for (failed, present) in failed.into_iter().filter(|(r, _)| pool.owns(r)) {
        let name = failed.name_any();
        let uid = failed.metadata.uid.clone().unwrap_or_default();
        let first_time = {
            let mut remembered = ctx.memory.lock();
            remembered
                .retired
                .retain(|_, at| at.elapsed() < RETIRED_KEPT);
            remembered.retired.insert(uid, Instant::now()).is_none()
        };
        if first_time {
            report_failure(ctx, &failed).await;
        }
        if !present || failed.metadata.deletion_timestamp.is_some() {
            continue;
        }
        // Guarded by its UID: a request of the same name made since is not this one.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: failed.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => ctx.metrics.money_decision("retire", "failed"),
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(source) => {
                refused(
                    &ctx.metrics,
                    "retire",
                    name,
                    source,
                    "could not delete a Failed node request; will try again",
                );
            }
        }
    }
}

/// Deletes this pool's requests no provisioner has taken up whose class was deleted meanwhile:
/// the class was the leave to buy. Their tenants are planned again; a provisioner that took one
/// up at the same time treats the deletion as a hand-back.
pub(super) async fn withdraw_classless(ctx: &CapacityLoop, snap: &Snapshot) {
    let names: HashSet<String> = snap.classes.iter().map(|c| c.name_any()).collect();
    for request in classless(&snap.requests, &names).filter(|r| snap.pool.owns(r)) {
        // Guarded by its resourceVersion too: one taken up since is left to its provisioner.
        let why = "its class was deleted before a provisioner took it up";
        withdraw(ctx, request, request.resource_version(), "class_gone", why).await;
    }
}

/// Deletes a request not to be bought after all, under its UID (and `resource_version` when
/// given), counted as a money decision `withdraw` for `reason`; a refused delete is tried again
/// at the next tick.
async fn withdraw(
    ctx: &CapacityLoop,
    request: &NodeRequest,
    resource_version: Option<String>,
    reason: &'static str,
    why: &str,
) {
    let name = request.name_any();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version,
            uid: request.metadata.uid.clone(),
        }),
        ..DeleteParams::default()
    };
    match requests_api(&ctx.client).delete(&name, &params).await {
        Ok(_) => {
            ctx.metrics.money_decision("withdraw", reason);
            tracing::info!(request = %name, class = %request.spec.node_class, "node request withdrawn: {why}");
        }
        Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 409 => {}
        Err(source) => refused(
            &ctx.metrics,
            "withdraw",
            name,
            source,
            "could not withdraw a node request; will try again",
        ),
    }
}

/// A Failed request's class rests (doubling per failure in a row); a Warning Event says why.
pub(super) async fn report_failure(ctx: &CapacityLoop, failed: &NodeRequest) {
    let name = failed.name_any();
    let class = failed.spec.node_class.clone();
    let why = failed
        .status
        .as_ref()
        .map(|s| s.message.clone())
        .unwrap_or_default();
    let rest = {
        let mut remembered = ctx.memory.lock();
        let (until, failures) = remembered
            .resting
            .entry(class.clone())
            .or_insert((Instant::now(), 0));
        *failures = failures.saturating_add(1);
        let rest = rest_after(*failures);
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
        ctx.events.as_ref(),
        failed,
        EventType::Warning,
        "ProvisioningFailed",
        note,
    )
    .await;
}

/// Creates one request. Its name is the stable one unless another request holds it (then the
/// next of [`NAME_ATTEMPTS`]); a request found under the name wanted is looked at: the same
/// purchase, still in flight, is taken as made, anything else is not. A refused create is
/// logged and counted, and the next look plans again.
pub(super) async fn create(
    ctx: &CapacityLoop,
    new: &NewNode,
    offers: &[(NodeClassOffer, Labels)],
    taken: &mut HashSet<String>,
) {
    let Some((offer, _)) = offers.iter().find(|(o, _)| o.name == new.class) else {
        return;
    };
    let (class, tenants) = (new.class.as_str(), &new.tenants);
    let api = requests_api(&ctx.client);
    let spec = NodeRequestSpec {
        node_class: class.to_owned(),
        capacity: ResourceAmounts::from(offer.capacity),
        tenants: tenants.clone(),
    };
    let Some(name) = (0..NAME_ATTEMPTS)
        .map(|attempt| request_name(class, tenants, attempt))
        .find(|name| !taken.contains(name))
    else {
        tracing::warn!(
            class,
            "node requests: every name for this purchase is taken"
        );
        ctx.metrics.node_request_error("create");
        return;
    };
    taken.insert(name.clone());
    let request = NodeRequest::new(&name, spec.clone());
    match api.create(&PostParams::default(), &request).await {
        Ok(created) => {
            tracing::info!(request = %name, class, tenants = tenants.len(), "node requested");
            ctx.metrics.money_decision("buy", "waiting");
            ctx.memory
                .lock()
                .created
                .insert(name.clone(), (spec, Instant::now()));
            announce(ctx, &created, class, tenants).await;
        }
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            // Another process made it between our look and our create (a leader change): the
            // same purchase in flight is ours; anything else under the name is not.
            match api.get_opt(&name).await {
                Ok(Some(found)) if is_in_flight_for(&found, &spec) => {
                    ctx.memory
                        .lock()
                        .created
                        .insert(name, (spec, Instant::now()));
                }
                Ok(_) => {
                    tracing::info!(request = %name, "node requests: the name is another request's; planned again at the next look");
                }
                Err(source) => {
                    refused(
                        &ctx.metrics,
                        "create",
                        name,
                        source,
                        "could not read a node request",
                    );
                }
            }
        }
        Err(source) => {
            refused(
                &ctx.metrics,
                "create",
                name,
                source,
                "could not create a node request; will plan again",
            );
        }
    }
}

/// The Events of a new request: one on it, and one on each tenant it is for.
pub(super) async fn announce(
    ctx: &CapacityLoop,
    created: &NodeRequest,
    class: &str,
    tenants: &[String],
) {
    let name = created.name_any();
    let note = format!(
        "a {class} is asked for {} waiting tenant(s): {}",
        tenants.len(),
        tenants.join(", ")
    );
    publish(
        ctx.events.as_ref(),
        created,
        EventType::Normal,
        "NodeRequested",
        note,
    )
    .await;
    for key in tenants {
        let Some(reference) = Tenant::reference(key) else {
            continue;
        };
        if let Some(tenant) = ctx.tenants.get(&reference) {
            let note = format!("node request {name} asks for a {class} for it");
            publish(
                ctx.events.as_ref(),
                tenant.as_ref(),
                EventType::Normal,
                "NodeRequested",
                note,
            )
            .await;
        }
    }
}

/// Keeps the new notes and wakes each waiting tenant whose note changed, so its status says it.
pub(super) fn wake_changed(ctx: &CapacityLoop, notes: HashMap<String, String>) {
    let changed = ctx.notes.replace(notes);
    for key in changed {
        if let Some(tenant) = Tenant::reference(&key)
            && ctx.tenants.get(&tenant).is_some()
        {
            ctx.waiting.wake(tenant);
        }
    }
}

/// Writes what each class's Nodes deliver when less than it promises (its `Delivers` condition
/// False, `status.delivered` the smallest seen, a Warning Event), so that no machine is bought of
/// it for a tenant that fits only the promise, also after its machines are handed back.
pub(super) async fn learn_delivered(
    ctx: &CapacityLoop,
    classes: &[Arc<NodeClass>],
    accounts: &Accounts,
) {
    for class in classes {
        let name = class.name_any();
        if !accounts.delivered.contains_key(&name) {
            continue; // no Node of it seen this tick: nothing new learned
        }
        let Some(known) = delivers_less(class, accounts) else {
            continue; // it delivers what it promises
        };
        let stored = class.delivered().and_then(|d| d.to_resources().ok());
        if stored == Some(known) {
            continue; // known already
        }
        let Ok(promised) = class.spec.capacity.to_resources() else {
            continue;
        };
        let amounts = ResourceAmounts::from(known);
        let note = format!(
            "its Nodes report {known}, less than its spec.capacity ({promised}): machines of it \
             are planned with what they report; set spec.capacity to the allocatable its Nodes \
             report"
        );
        let previous = class.status.as_ref().map(|s| s.conditions.as_slice());
        let delivers = Condition::keeping_time(
            previous.unwrap_or_default(),
            DELIVERS_CONDITION,
            "False",
            "DeliversLess",
            note.clone(),
            class.metadata.generation,
            &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        let mut conditions: Vec<Condition> = previous
            .unwrap_or_default()
            .iter()
            .filter(|c| c.type_ != DELIVERS_CONDITION)
            .cloned()
            .collect();
        conditions.push(delivers);
        // Guarded: the other conditions are kept as read.
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": class.resource_version()},
            "status": {"delivered": amounts, "conditions": conditions},
        });
        let api: Api<NodeClass> = Api::all(ctx.client.clone());
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::warn!(class = %name, %known, %promised, "a NodeClass delivers less than it promises");
                publish(
                    ctx.events.as_ref(),
                    class.as_ref(),
                    EventType::Warning,
                    "DeliversLess",
                    note,
                )
                .await;
            }
            Err(error) => {
                tracing::info!(class = %name, %error, "could not write what a NodeClass delivers; the next look tries again");
            }
        }
    }
}

/// Reports, once each, a Node whose label names a live request that does not own it (a copied
/// manifest): it is never handed back for that request. What was reported is forgotten once it
/// is no longer a stray or a live request (an orphan's UID), so the set stays bounded.
pub(super) async fn report_strays(ctx: &CapacityLoop, snap: &Snapshot, accounts: &Accounts) {
    let key = |stray: &super::accounts::Stray| format!("{} {}", stray.node, stray.labelled_for);
    {
        let current: HashSet<String> = accounts
            .strays
            .iter()
            .map(key)
            .chain(snap.live.iter().filter_map(|r| r.metadata.uid.clone()))
            .collect();
        ctx.memory.lock().reported.retain(|k| current.contains(k));
    }
    for stray in &accounts.strays {
        let key = key(stray);
        if !ctx.memory.lock().reported.insert(key) {
            continue;
        }
        let Some(node) = snap.bought.get(&stray.node) else {
            continue;
        };
        let owned = stray
            .owned
            .as_deref()
            .map_or_else(|| "no Node yet".to_owned(), |n| format!("Node {n}"));
        let note = format!(
            "labelled {NODE_REQUEST_LABEL}={}, but that request owns {owned}: this Node is \
             not its machine and is never handed back for it",
            stray.labelled_for
        );
        tracing::warn!(node = %stray.node, request = %stray.labelled_for, "a Node names a request that does not own it");
        publish(
            ctx.events.as_ref(),
            node.as_ref(),
            EventType::Warning,
            "NotRequestsNode",
            note,
        )
        .await;
    }
}

/// Carries out what goes back ([`returns`]): drained nodes a waiter can use taken back into
/// service, then each machine given back under the precondition of what was judged.
pub(super) async fn hand_back(
    ctx: &CapacityLoop,
    snap: &Snapshot,
    returns: Returns<'_>,
    demand: &Demand,
) {
    // Every class of the pool has its series, 0 without idle machines (an alert can see it).
    let mut idle: BTreeMap<String, i64> = snap
        .classes
        .iter()
        .map(|c| c.name_any())
        .filter(|c| snap.pool.has_class(c))
        .map(|c| (c, 0))
        .collect();
    for (class, count) in &returns.idle_by_class {
        idle.insert((*class).to_owned(), *count);
    }
    ctx.metrics
        .set_machines_idle(idle.iter().map(|(c, n)| (c.as_str(), *n)));
    if !ctx.settings.consolidation.policy.hands_back() {
        return;
    }
    for node in returns.take_back {
        take_back_into_service(ctx, node).await;
    }
    for (request, node, why) in returns.give_back {
        if give_back(ctx, request, node, why).await {
            // Nothing is bought again for the demand a machine was handed back for.
            ctx.memory.lock().handed_back_for = Some(demand.fingerprint());
        }
    }
}

/// An empty node consolidation drained, that a waiting tenant can use: Online again, the mark
/// removed (guarded by what was judged), instead of handed back and another one bought.
pub(super) async fn take_back_into_service(ctx: &CapacityLoop, node: &Node) {
    let name = node.name_any();
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": node.resource_version(),
            "annotations": {CONSOLIDATING_ANNOTATION: null},
        },
        "spec": {"state": "Online"},
    });
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    match nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(node = %name, "a drained node is kept: a waiting tenant can use it");
            ctx.metrics.money_decision("keep", "awaited");
            ctx.metrics.consolidation_action("cancel");
        }
        Err(error) => {
            tracing::info!(node = %name, %error, "could not take a drained node back; the next look decides again");
        }
    }
}

/// Hands one request's machine back: an idle Node is cordoned first under the resourceVersion it
/// was judged empty at (a tenant placed since refuses it, and the machine is kept), then the
/// request is deleted under its own UID and resourceVersion. An orphan is reported first.
/// Whether it went back.
pub(super) async fn give_back(
    ctx: &CapacityLoop,
    request: &NodeRequest,
    node: Option<&Arc<Node>>,
    why: GoesBack,
) -> bool {
    let name = request.name_any();
    let api = requests_api(&ctx.client);
    if let Some(node) = node.filter(|n| n.spec.state == NodeState::Online) {
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": node.resource_version()},
            "spec": {"state": "Cordoned"},
        });
        let nodes: Api<Node> = Api::all(ctx.client.clone());
        if let Err(error) = nodes
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::info!(request = %name, %error, "a machine judged idle changed before it went back; judged again at the next look");
            return false;
        }
    }
    if why == GoesBack::Orphaned {
        let uid = request.metadata.uid.clone().unwrap_or_default();
        if ctx.memory.lock().reported.insert(uid) {
            let note = format!(
                "Ready, but the Node it names ({}) is not there (or is not labelled for it) \
                 after {} s: retired, so its machine is given back",
                request.made_node(),
                ctx.settings.empty_node_after.as_secs()
            );
            tracing::warn!(request = %name, "an orphaned node request is retired");
            publish(
                ctx.events.as_ref(),
                request,
                EventType::Warning,
                "Orphaned",
                note,
            )
            .await;
        }
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: request.resource_version(),
            uid: request.metadata.uid.clone(),
        }),
        ..DeleteParams::default()
    };
    tracing::info!(request = %name, why = ?why, "handing back a machine");
    match api.delete(&name, &params).await {
        Ok(_) => {
            let (action, reason) = why.decision();
            ctx.metrics.money_decision(action, reason);
            ctx.metrics.node_handed_back();
            if why == GoesBack::Consolidated {
                ctx.metrics.consolidation_action("hand_back");
                if let Some(node) = node {
                    ctx.consolidation.handed_back(&node.name_any());
                }
            }
            true
        }
        Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 409 => false,
        Err(source) => {
            refused(
                &ctx.metrics,
                "hand_back",
                name,
                source,
                "could not hand back a machine; will try again",
            );
            false
        }
    }
}

/// A NodeRequest write the API refused: logged with what was being done, counted by action, and
/// tried again at the next look (it never stops the others).
pub(super) fn refused(
    metrics: &Metrics,
    action: &'static str,
    request: String,
    source: kube::Error,
    what: &str,
) {
    let error = Error::NodeRequest { request, source };
    tracing::warn!(%error, action, "{what}");
    metrics.node_request_error(action);
}

/// Publishes one Event on a request or a tenant; a failure to publish is logged, never fatal.
pub(super) async fn publish<K: Resource<DynamicType = ()>>(
    events: Option<&EventPublisher>,
    regarding: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    EventPublisher::publish_about(events, regarding, (type_, reason, "Request"), note).await;
}

/// Withdraws a request in flight that buys again what an earlier one buys ([`duplicates`]),
/// under its UID: a provisioner that took it up treats the delete as a hand-back.
pub(super) async fn withdraw_duplicates(ctx: &CapacityLoop, snap: &Snapshot) {
    for request in duplicates(&snap.live, &snap.waiters) {
        let why = "an earlier one in flight buys for the same tenants";
        withdraw(ctx, request, None, "duplicate", why).await;
    }
}

/// Writes each live request's `status.use` where the tick judged it otherwise (with
/// `useSince`), guarded by the resourceVersion it was judged at: a request a provisioner wrote
/// since is judged again at the next tick.
pub(super) async fn record_uses(ctx: &CapacityLoop, snap: &Snapshot, accounts: &Accounts) {
    let api = requests_api(&ctx.client);
    for request in &snap.live {
        let Some((use_, _)) = accounts.of(request) else {
            continue;
        };
        if request.status.as_ref().and_then(|s| s.use_) == Some(*use_) {
            continue;
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": request.resource_version()},
            "status": {
                "use": use_,
                "useSince": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(snap.now),
            },
        });
        let name = request.name_any();
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 409 => {}
            Err(source) => refused(
                &ctx.metrics,
                "use",
                name,
                source,
                "could not write what a purchase is used for; will try again",
            ),
        }
    }
}
