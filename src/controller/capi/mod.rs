//! The cluster-api provisioner (`--provisioner cluster-api`): it plays the provisioner contract
//! (docs/node-requests.md) for every NodeClass with `spec.clusterAPI.machineDeployment`, and only
//! for those, by scaling that MachineDeployment and claiming its new Machines.
//!
//! ```text
//!   NodeRequest ─▶ finalizer, Provisioning ─▶ scaleGeneration, replicas +1 (with the record
//!     of the replicas intended, in one patch)
//!     ─▶ a new Machine claimed (annotation) ─▶ Running with nodeRef ─▶ placement Node ─▶ Ready
//!   Machine failed, or not Running in time ─▶ Failed (the controller deletes the request)
//!   NodeRequest deleted ─▶ its placement Node deleted (drained) ─▶ Machine marked
//!     delete-machine, replicas -1 and the request's finalizer removed, in one look
//! ```
//!
//! Rules enforced here (the decisions are [`plan`]'s; this file reads and writes):
//! - every look decides from what the objects say now, nothing remembered, so a restart, a lost
//!   answer or a new leader decide alike: classes, requests, the deployment's Machines and the
//!   bought placement Nodes from watch caches ([`caches`]; no look lists anything), the
//!   MachineDeployment by a direct read (its resourceVersion guards the scale);
//! - a cache may show a write late, so every write decided from a cached object is guarded by
//!   the resourceVersion read (a request's writes in one look each by the version the one before
//!   left; the scale by the deployment's), and a refused one ends that deployment's look, to be
//!   read again at the next. Two writes are not guarded, as they record what a write just made
//!   and are right whatever the cache showed: a claim in the request's status, and `Ready` once
//!   its Node is made. A Node this loop made counts as there until its cache shows it;
//! - a scale is one merge patch of the MachineDeployment: `spec.replicas` and the annotation
//!   `placement.tenant-placer.dev/intended-replicas` saying the same number (the scale
//!   subresource carries no annotation), so replicas that say otherwise were changed by someone
//!   else since; never a record without its scale, nor a scale without its record;
//! - a class whose MachineDeployment cannot be used (missing, forbidden, Cluster API not
//!   installed, at cluster-autoscaler's max size) says so in its `Available` condition and a
//!   Warning Event; the capacity tick buys no machine of it meanwhile, and its requests not yet
//!   taken up fail with that message;
//! - a Machine whose Node offers less than the class promises gives the placement Node the
//!   smaller capacity and its request a Warning Event.

pub mod caches;
pub mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node as CoreNode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Client, Resource, ResourceExt};

use self::plan::{NodeSeen, Step};
use super::patch::Merge;
use super::publisher::{EventPublisher, Occurrence};
use super::settings::Settings;
use crate::api::capi::{
    CLAIM_ANNOTATION, DELETE_MACHINE_ANNOTATION, INTENDED_REPLICAS_ANNOTATION, MACHINE_ANNOTATION,
    Machine, MachineDeployment,
};
use crate::api::{
    AVAILABLE_CONDITION, Condition, LabelSelector, NamespacedName, Node, NodeClass, NodeRequest,
    NodeRequestPhase, allocatable_capacity,
};
use crate::error::is_not_found;
use crate::metrics::Metrics;

/// The finalizer the provisioner keeps on a request until its Machine is given back.
pub const FINALIZER: &str = "placement.tenant-placer.dev/cluster-api";

/// The cluster-api provisioner's loop.
pub struct CapiLoop {
    pub client: Client,
    pub events: Option<EventPublisher>,
    pub metrics: Arc<Metrics>,
    /// A Machine not Running this long after its request was made fails the request.
    pub timeout: Duration,
    /// How often it looks.
    pub every: Duration,
    /// The pool's Nodes (`--node-selector`): only classes whose Nodes match are served.
    pub pool_nodes: Option<LabelSelector>,
    /// The capacity tick's class and request caches; `None` (node requests off): the loop
    /// watches them itself.
    pub purchases: Option<caches::ClassesAndRequests>,
    /// Whether Cluster API's kinds were served when last asked: asked again while they were
    /// not, and when a deployment reads as missing.
    pub(super) served: AtomicBool,
    /// The placement Nodes this loop made that its cache may not show yet, by name: a look
    /// counts them as there (a Machine is never given back from under a Node just made).
    pub(super) made: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for CapiLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapiLoop")
            .field("timeout", &self.timeout)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl CapiLoop {
    /// The loop, reading `purchases` (see [`CapiLoop::purchases`]).
    pub fn new(
        client: Client,
        settings: &Settings,
        purchases: Option<caches::ClassesAndRequests>,
    ) -> Self {
        CapiLoop {
            client,
            events: None,
            metrics: Arc::default(),
            timeout: settings.provisioning_timeout,
            every: settings.request_check,
            pool_nodes: settings.pool_nodes.clone(),
            purchases,
            served: AtomicBool::new(false),
            made: Mutex::default(),
        }
    }

    /// Runs until the task is dropped.
    pub async fn run(mut self) {
        let every = self.every.max(Duration::from_millis(10));
        let served = self.served().await;
        if !served {
            tracing::warn!(
                "--provisioner cluster-api: this cluster serves no cluster.x-k8s.io/v1beta2 \
                 MachineDeployments (is Cluster API installed?); classes that name one say so"
            );
        }
        self.served.store(served, Ordering::SeqCst);
        let mut reads = caches::Reads::start(&self.client, self.purchases.take());
        loop {
            tokio::time::sleep(every).await;
            if !reads.synced().await {
                return;
            }
            if let Err(error) = self.look(&mut reads).await {
                tracing::debug!(%error, "cluster-api provisioner: will look again");
            }
        }
    }

    /// Cluster API's kinds are served here.
    async fn served(&self) -> bool {
        let api: Api<MachineDeployment> = Api::all(self.client.clone());
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => true,
            Err(error) => !is_not_found(&error),
        }
    }

    async fn look(&self, reads: &mut caches::Reads) -> Result<(), kube::Error> {
        let classes = reads.classes.0.state();
        let in_pool = |c: &&NodeClass| {
            self.pool_nodes
                .as_ref()
                .is_none_or(|s| s.matches(&c.node_labels()))
        };
        let ours: Vec<&NodeClass> = classes
            .iter()
            .map(AsRef::as_ref)
            .filter(|c| c.spec.cluster_api.is_some())
            .filter(in_pool)
            .collect();
        let requests = reads.requests.0.state();
        let all: BTreeSet<&str> = classes.iter().map(|c| c.name_any_str()).collect();
        self.hand_back_untaken(&requests, &all).await;
        let groups = by_deployment(&ours, &all, requests.iter().map(AsRef::as_ref));
        if groups.is_empty() {
            reads.watch_machines([]);
            return Ok(());
        }
        if !self.served.load(Ordering::SeqCst) {
            self.served.store(self.served().await, Ordering::SeqCst);
        }
        if self.served.load(Ordering::SeqCst) {
            reads.watch_machines(groups.keys());
        } else {
            reads.watch_machines([]);
        }
        let listed = reads.nodes.0.state();
        let mut nodes: BTreeMap<String, NodeSeen> = listed
            .iter()
            .map(|n| {
                let seen = if n.metadata.deletion_timestamp.is_some() {
                    NodeSeen::Deleting
                } else {
                    NodeSeen::Present
                };
                (n.name_any(), seen)
            })
            .collect();
        // Made by an earlier look, not shown yet: there.
        {
            let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
            made.retain(|node| !nodes.contains_key(node));
            for node in made.iter() {
                nodes.insert(node.clone(), NodeSeen::Present);
            }
        }
        let recorded: BTreeMap<String, String> = listed
            .iter()
            .filter_map(|n| {
                Some((
                    n.name_any(),
                    n.annotations().get(MACHINE_ANNOTATION)?.clone(),
                ))
            })
            .collect();
        let ours_adopted = groups
            .values()
            .flat_map(|(_, mine)| mine.iter())
            .filter_map(|r| {
                let status = r.status.as_ref()?;
                Some((r.made_node(), status.machine.as_str()))
            });
        for (node, machine) in plan::stale_records(ours_adopted, &recorded) {
            // One Node that cannot be written must not hold back every deployment's look.
            if let Err(error) = self.record_on_node(&node, &machine).await {
                tracing::info!(%node, %machine, %error, "cluster-api provisioner: could not record a Node's Machine; will look again");
            }
        }
        for (key, (classes, mine)) in groups {
            let machines = reads.machines(&key);
            let result = self
                .deployment(&key, &classes, &mine, &nodes, machines.as_deref())
                .await;
            if let Err(error) = result {
                tracing::info!(deployment = %key, %error, "cluster-api provisioner: will look again");
            }
        }
        Ok(())
    }

    /// One deployment's look: its classes' condition, then the plan's steps in order, once
    /// its `machines` are cached (`None`: not yet).
    async fn deployment(
        &self,
        key: &NamespacedName,
        classes: &[&NodeClass],
        requests: &[&NodeRequest],
        nodes: &BTreeMap<String, NodeSeen>,
        machines: Option<&[Arc<Machine>]>,
    ) -> Result<(), kube::Error> {
        let api: Api<MachineDeployment> = Api::namespaced(self.client.clone(), &key.namespace);
        let mut served = self.served.load(Ordering::SeqCst);
        let found = if served {
            api.get_opt(&key.name).await
        } else {
            Ok(None)
        };
        if served && matches!(found, Ok(None)) {
            // Missing, or Cluster API is no longer served: asked, so that the class says which.
            served = self.served().await;
            self.served.store(served, Ordering::SeqCst);
        }
        let seen = match &found {
            _ if !served => plan::Found::NotServed,
            Ok(Some(deployment)) => plan::Found::Present(deployment_view(deployment)),
            Ok(None) => plan::Found::Missing,
            Err(kube::Error::Api(status)) if status.code == 403 => {
                plan::Found::Forbidden(status.message.clone())
            }
            Err(_) => plan::Found::Unknown,
        };
        let names: Vec<&str> = classes.iter().map(|c| c.name_any_str()).collect();
        let unavailable = plan::unavailable(key, &names, &seen);
        let deployment = found?;
        for class in classes {
            self.say_available(class, key, unavailable.as_ref()).await;
        }
        let Some(deployment) = deployment else {
            if let Some(why) = &unavailable {
                self.fail_untaken(requests, &why.message).await?;
            }
            return Ok(());
        };
        let Some(machines) = machines else {
            tracing::debug!(deployment = %key, "cluster-api provisioner: its Machines are not cached yet");
            return Ok(());
        };
        let seen = deployment_view(&deployment);
        let machine_views: Vec<plan::Machine<'_>> =
            machines.iter().map(|m| machine_view(m)).collect();
        let prefix = format!("{}/", key.namespace);
        let request_views: Vec<plan::Request<'_>> =
            requests.iter().map(|r| request_view(r, &prefix)).collect();
        let node_views: BTreeMap<&str, NodeSeen> =
            nodes.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        let steps = plan::plan(
            &seen,
            &machine_views,
            &request_views,
            &node_views,
            Timestamp::now(),
            self.timeout,
        );
        let by_name: BTreeMap<&str, &NodeRequest> =
            requests.iter().map(|r| (r.name_any_str(), *r)).collect();
        let machines_by_name: BTreeMap<&str, &Machine> = machines
            .iter()
            .map(|m| (m.name_any_str(), m.as_ref()))
            .collect();
        let ctx = Look {
            key,
            deployment: &deployment,
            requests: &by_name,
            machines: &machines_by_name,
            classes,
            nodes: &node_views,
            versions: Versions::default(),
        };
        for step in steps {
            let action = step_action(&step);
            if let Err(error) = self.take(&ctx, step).await {
                self.metrics.node_request_error(action);
                return Err(error);
            }
        }
        Ok(())
    }

    /// Sets the classes' `Available` condition when it changes, with a Warning Event when false.
    async fn say_available(
        &self,
        class: &NodeClass,
        key: &NamespacedName,
        unavailable: Option<&plan::Unavailable>,
    ) {
        let previous = class.status.as_ref().map_or(&[][..], |s| &s.conditions);
        let Some(condition) = plan::available_condition(
            previous,
            key,
            unavailable,
            class.metadata.generation,
            &Time(Timestamp::now()),
        ) else {
            return;
        };
        // The other conditions (what the class delivers) are kept, as read: guarded.
        let mut conditions: Vec<&Condition> = previous
            .iter()
            .filter(|c| c.type_ != AVAILABLE_CONDITION)
            .collect();
        conditions.push(&condition);
        let api: Api<NodeClass> = Api::all(self.client.clone());
        let written = match Merge::guarded(class.metadata.resource_version.as_deref())
            .status(&ClassConditions { conditions })
        {
            Ok(patch) => {
                api.patch_status(
                    class.name_any_str(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            }
            Err(error) => Err(kube::Error::SerdeError(error)),
        };
        if let Err(error) = written {
            tracing::info!(class = class.name_any_str(), %error, "could not write the class's condition");
            return;
        }
        if let Some(why) = unavailable {
            let occurrence = Occurrence {
                type_: EventType::Warning,
                reason: why.why.reason(),
                action: "Provision",
                note: why.message.clone(),
            };
            EventPublisher::publish_or_log(self.events.as_ref(), occurrence, class.object_ref(&()))
                .await;
        }
    }

    /// Requests of an unusable class not yet taken up fail with the reason.
    async fn fail_untaken(&self, requests: &[&NodeRequest], why: &str) -> Result<(), kube::Error> {
        for request in requests {
            let untaken = request.phase() == NodeRequestPhase::Pending
                && request.metadata.deletion_timestamp.is_none();
            if untaken {
                let versions = Versions::default();
                let write = StatusWrite::failed(why.to_owned());
                self.status((&versions, Guard::Read), request, write)
                    .await?;
            }
        }
        Ok(())
    }

    async fn take(&self, look: &Look<'_>, step: Step) -> Result<(), kube::Error> {
        let machines: Api<Machine> = Api::namespaced(self.client.clone(), &look.key.namespace);
        let versions = &look.versions;
        match step {
            Step::Adopt { request } => {
                let Some(found) = look.requests.get(request.as_str()) else {
                    return Ok(());
                };
                if !found.finalizers().iter().any(|f| f == FINALIZER) {
                    let finalizers = found.finalizers().iter().map(String::as_str);
                    self.finalizers(versions, found, finalizers.chain([FINALIZER]))
                        .await?;
                }
                if found.phase() == NodeRequestPhase::Pending {
                    let message = format!("asking MachineDeployment {} for a machine", look.key);
                    let write = StatusWrite {
                        phase: Some(NodeRequestPhase::Provisioning),
                        message: Some(message),
                        ..StatusWrite::default()
                    };
                    self.status((versions, Guard::Read), found, write).await?;
                }
            }
            Step::Intend {
                request,
                generation,
            } => {
                let Some(found) = look.requests.get(request.as_str()) else {
                    return Ok(());
                };
                let write = StatusWrite {
                    scale_generation: Some(generation),
                    machine_deployment: Some(look.key.to_string()),
                    ..StatusWrite::default()
                };
                // Guarded like every request write: an intent decided from a request the cache
                // shows late is refused, and no raise follows it.
                self.status((versions, Guard::Read), found, write).await?;
            }
            Step::Scale { from, to } => {
                let api: Api<MachineDeployment> =
                    Api::namespaced(self.client.clone(), &look.key.namespace);
                // Replicas and the record of them in one write (the scale subresource carries
                // no annotation), guarded by the deployment's version read.
                let intended = to.to_string();
                let patch = Merge::guarded(look.deployment.metadata.resource_version.as_deref())
                    .annotation(INTENDED_REPLICAS_ANNOTATION, &intended)
                    .spec(&ReplicasSpec { replicas: to })
                    .map_err(kube::Error::SerdeError)?;
                api.patch(
                    &look.key.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
                tracing::info!(deployment = %look.key, from, to, "cluster-api provisioner: replicas set");
            }
            Step::Claim {
                machine,
                request,
                give_back,
            } => {
                let Some(found) = look.machines.get(machine.as_str()) else {
                    return Ok(());
                };
                let mut patch = Merge::guarded(found.meta().resource_version.as_deref())
                    .annotation(CLAIM_ANNOTATION, &request);
                if give_back {
                    patch = patch.annotation(DELETE_MACHINE_ANNOTATION, "");
                }
                machines
                    .patch(&machine, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                self.record(look, &request, &machine).await?;
            }
            Step::Record { request, machine } => self.record(look, &request, &machine).await?,
            Step::Repair {
                machine,
                request,
                found,
            } => {
                let Some(claimed) = look.machines.get(machine.as_str()) else {
                    return Ok(());
                };
                let patch = Merge::guarded(claimed.meta().resource_version.as_deref())
                    .annotation(CLAIM_ANNOTATION, &request);
                machines
                    .patch(&machine, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                let note = format!(
                    "Machine {machine}'s {CLAIM_ANNOTATION} annotation said {}, but NodeRequest \
                     {request} records it as its machine: the annotation is written back",
                    found.as_deref().unwrap_or("nothing")
                );
                tracing::warn!(%machine, %request, "a Machine's claim disagreed with the record; repaired");
                let occurrence = Occurrence {
                    type_: EventType::Warning,
                    reason: "ClaimRepaired",
                    action: "Provision",
                    note,
                };
                EventPublisher::publish_or_log(
                    self.events.as_ref(),
                    occurrence,
                    claimed.object_ref(&()),
                )
                .await;
            }
            Step::MakeNode {
                request,
                machine,
                node,
            } => self.make_node(look, &request, &machine, &node).await?,
            Step::Ready { request } => {
                let Some(found) = look.requests.get(request.as_str()) else {
                    return Ok(());
                };
                let message = format!("Node {request} is up");
                let write = StatusWrite::ready(&request, message);
                self.status((versions, Guard::Recording), found, write)
                    .await?;
            }
            Step::Fail { request, message } => {
                let Some(found) = look.requests.get(request.as_str()) else {
                    return Ok(());
                };
                self.status((versions, Guard::Read), found, StatusWrite::failed(message))
                    .await?;
            }
            Step::DeleteNode { request } => {
                let nodes: Api<Node> = Api::all(self.client.clone());
                match nodes.delete(&request, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(error) if is_not_found(&error) => self.shown(&request),
                    Err(error) => return Err(error),
                }
            }
            Step::Mark { machine } => {
                let Some(found) = look.machines.get(machine.as_str()) else {
                    return Ok(());
                };
                let patch = Merge::guarded(found.meta().resource_version.as_deref())
                    .annotation(DELETE_MACHINE_ANNOTATION, "");
                machines
                    .patch(&machine, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            Step::Release { request } => {
                let Some(found) = look.requests.get(request.as_str()) else {
                    return Ok(());
                };
                let finalizers = found
                    .finalizers()
                    .iter()
                    .map(String::as_str)
                    .filter(|f| *f != FINALIZER);
                match self.finalizers(versions, found, finalizers).await {
                    Ok(()) => {}
                    Err(error) if is_not_found(&error) => {}
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(())
    }

    /// The placement Node for a running Machine: the class's capacity, or the core Node's
    /// allocatable where smaller (with a Warning Event on the request).
    async fn make_node(
        &self,
        look: &Look<'_>,
        request: &str,
        machine: &str,
        core: &str,
    ) -> Result<(), kube::Error> {
        let Some(found) = look.requests.get(request) else {
            return Ok(());
        };
        let class = look
            .classes
            .iter()
            .copied()
            .find(|c| c.name_any_str() == found.spec.node_class);
        let mut node = found.node(class);
        let offered = Api::<CoreNode>::all(self.client.clone())
            .get_opt(core)
            .await?
            .and_then(|n| n.status?.allocatable)
            .map(|a| allocatable_capacity(&a));
        let offered = match offered {
            Some(Ok(offered)) => Some(offered),
            Some(Err(error)) => {
                tracing::info!(node = core, %error, "cluster-api provisioner: the class's capacity is used");
                None
            }
            None => None,
        };
        let delivery = plan::delivery(found.spec.capacity, offered, machine, core);
        if let Some(note) = delivery.short {
            let occurrence = Occurrence {
                type_: EventType::Warning,
                reason: "MachineShort",
                action: "Provision",
                note,
            };
            EventPublisher::publish_or_log(self.events.as_ref(), occurrence, found.object_ref(&()))
                .await;
        }
        node.spec.capacity = delivery.capacity;
        node.metadata.annotations = Some(BTreeMap::from([(
            MACHINE_ANNOTATION.to_owned(),
            format!("{}/{machine}", look.key.namespace),
        )]));
        let nodes: Api<Node> = Api::all(self.client.clone());
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {
                self.made
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(request.to_owned());
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(error) => return Err(error),
        }
        let message = format!("Node {request} is up (Machine {machine}, core Node {core})");
        let write = StatusWrite::ready(request, message);
        self.status((&look.versions, Guard::Recording), found, write)
            .await
    }

    /// A Node this loop made is gone before its cache showed it: no longer counted as there.
    fn shown(&self, node: &str) {
        self.made
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(node);
    }

    /// Records the request's Machine; a Node made for it already (its Machine was replaced)
    /// records the replacement first.
    async fn record(
        &self,
        look: &Look<'_>,
        request: &str,
        machine: &str,
    ) -> Result<(), kube::Error> {
        let Some(found) = look.requests.get(request) else {
            return Ok(());
        };
        let key = format!("{}/{machine}", look.key.namespace);
        if look.nodes.contains_key(request) {
            self.record_on_node(request, &key).await?;
        }
        let message = format!("Machine {key} is being made for it");
        let write = StatusWrite {
            machine: Some(&key),
            message: Some(message),
            ..StatusWrite::default()
        };
        self.status((&look.versions, Guard::Recording), found, write)
            .await
    }

    /// Hands back the requests [`plan::untaken`] finds: back to `Pending` (unless being deleted)
    /// with a note, then without this provisioner's finalizer, each guarded by what was read.
    /// A refused write is logged and tried again at the next look.
    async fn hand_back_untaken(&self, requests: &[Arc<NodeRequest>], classes: &BTreeSet<&str>) {
        let seen = requests.iter().map(|r| plan::Seen {
            name: r.name_any_str(),
            adopted: r.finalizers().iter().any(|f| f == FINALIZER),
            deleting: r.metadata.deletion_timestamp.is_some(),
            class_known: classes.contains(r.spec.node_class.as_str()),
            deployment_recorded: r
                .status
                .as_ref()
                .is_some_and(|s| !s.machine_deployment.is_empty()),
        });
        let versions = Versions::default();
        for (name, deleting) in plan::untaken(seen) {
            let Some(found) = requests.iter().find(|r| r.name_any_str() == name) else {
                continue;
            };
            let mut written = Ok(());
            if !deleting {
                let message = format!(
                    "NodeClass {} was deleted before a Machine was asked for: not taken up",
                    found.spec.node_class
                );
                let pending = StatusWrite {
                    phase: Some(NodeRequestPhase::Pending),
                    message: Some(message),
                    ..StatusWrite::default()
                };
                written = self.status((&versions, Guard::Read), found, pending).await;
            }
            if written.is_ok() {
                let kept = found.finalizers().iter().filter(|f| *f != FINALIZER);
                written = self
                    .finalizers(&versions, found, kept.map(String::as_str))
                    .await;
            }
            match written {
                Ok(()) => {}
                Err(error) if is_not_found(&error) => {}
                Err(error) => {
                    tracing::info!(request = name, %error, "cluster-api provisioner: could not hand back an untaken request; will look again")
                }
            }
        }
    }

    /// Records `machine` (`namespace/name`) on the placement Node `node`, being deleted or not
    /// (its finalizer may keep it while tenants leave; it still says which Machine it is).
    async fn record_on_node(&self, node: &str, machine: &str) -> Result<(), kube::Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let patch = Merge::new().annotation(MACHINE_ANNOTATION, machine);
        match nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if is_not_found(&error) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Writes these fields of the request's status, guarded as `guard` says by the version this
    /// look last saw of it.
    async fn status(
        &self,
        (versions, guard): (&Versions, Guard),
        request: &NodeRequest,
        write: StatusWrite<'_>,
    ) -> Result<(), kube::Error> {
        let api: Api<NodeRequest> = Api::all(self.client.clone());
        let version = versions.of(request);
        let patch = match guard {
            Guard::Read => Merge::guarded(version.as_deref()),
            Guard::Recording => Merge::new(),
        }
        .status(&write)
        .map_err(kube::Error::SerdeError)?;
        let written = api
            .patch_status(
                request.name_any_str(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
        versions.wrote(written)
    }

    /// Sets the request's finalizers, guarded by the version this look last saw of it.
    async fn finalizers<'f>(
        &self,
        versions: &Versions,
        request: &NodeRequest,
        finalizers: impl IntoIterator<Item = &'f str>,
    ) -> Result<(), kube::Error> {
        let api: Api<NodeRequest> = Api::all(self.client.clone());
        let version = versions.of(request);
        let finalizers: Vec<&str> = finalizers.into_iter().collect();
        let patch = Merge::guarded(version.as_deref()).finalizers(finalizers.iter().copied());
        let written = api
            .patch(
                request.name_any_str(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
        versions.wrote(written)
    }
}

/// The deployments to look at, each with its classes (`ours`: served here) and requests. A
/// request is ours when its class is, or when its class is gone (of `all`, none) and its status
/// names a deployment; it goes where its status says it was raised for (its class may name
/// another since), else where its class says.
fn by_deployment<'a>(
    ours: &[&'a NodeClass],
    all: &BTreeSet<&str>,
    requests: impl IntoIterator<Item = &'a NodeRequest>,
) -> BTreeMap<NamespacedName, (Vec<&'a NodeClass>, Vec<&'a NodeRequest>)> {
    let mut groups: BTreeMap<NamespacedName, (Vec<&NodeClass>, Vec<&NodeRequest>)> =
        BTreeMap::new();
    let mut class_deployment: BTreeMap<&str, &NamespacedName> = BTreeMap::new();
    for class in ours {
        if let Some(source) = &class.spec.cluster_api {
            class_deployment.insert(class.name_any_str(), &source.machine_deployment);
            let group = groups.entry(source.machine_deployment.clone()).or_default();
            group.0.push(class);
        }
    }
    for request in requests {
        let class = request.spec.node_class.as_str();
        if !class_deployment.contains_key(class) && all.contains(class) {
            continue; // another provisioner's class, or another pool's
        }
        let recorded = request
            .status
            .as_ref()
            .and_then(|s| NamespacedName::parse(&s.machine_deployment));
        let key = recorded.or_else(|| {
            class_deployment
                .get(request.spec.node_class.as_str())
                .map(|k| (*k).clone())
        });
        if let Some(key) = key {
            groups.entry(key).or_default().1.push(request);
        }
    }
    groups
}

/// The fields of a request's status the provisioner writes; what is `None` is left as it is.
#[derive(Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusWrite<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<NodeRequestPhase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    machine_deployment: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    machine: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scale_generation: Option<i64>,
}

impl<'a> StatusWrite<'a> {
    /// `Ready`, its Node named after the request.
    fn ready(request: &'a str, message: String) -> Self {
        StatusWrite {
            phase: Some(NodeRequestPhase::Ready),
            node_name: Some(request),
            message: Some(message),
            ..StatusWrite::default()
        }
    }

    fn failed(message: String) -> Self {
        StatusWrite {
            phase: Some(NodeRequestPhase::Failed),
            message: Some(message),
            ..StatusWrite::default()
        }
    }
}

/// A MachineDeployment's replicas, as its spec is patched.
#[derive(serde::Serialize)]
struct ReplicasSpec {
    replicas: i32,
}

/// A class's conditions, as its status is patched.
#[derive(serde::Serialize)]
struct ClassConditions<'a> {
    conditions: Vec<&'a Condition>,
}

/// Whether a request's status write is guarded by the version read.
#[derive(Clone, Copy, Debug)]
enum Guard {
    /// Decided from the request as cached: refused when it changed since (the cache may show
    /// it late), and decided again at the next look.
    Read,
    /// Records what a write just made (a claim, a Node): a refusal would leave that unrecorded.
    Recording,
}

/// The resourceVersion each request was left at by this look's writes: the cache shows none
/// of them yet, and each write is guarded by the version the one before it left.
#[derive(Debug, Default)]
struct Versions(Mutex<BTreeMap<String, String>>);

impl Versions {
    /// The version to guard a write of `request` by: the last written, else the one read.
    fn of(&self, request: &NodeRequest) -> Option<String> {
        let written = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        written
            .get(request.name_any_str())
            .cloned()
            .or_else(|| request.metadata.resource_version.clone())
    }

    /// Notes the version a write left, and answers how it went.
    fn wrote(&self, written: Result<NodeRequest, kube::Error>) -> Result<(), kube::Error> {
        let written = written?;
        if let Some(version) = written.metadata.resource_version.clone() {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(written.name_any_str().to_owned(), version);
        }
        Ok(())
    }
}

/// What one deployment's steps read.
struct Look<'a> {
    key: &'a NamespacedName,
    deployment: &'a MachineDeployment,
    requests: &'a BTreeMap<&'a str, &'a NodeRequest>,
    machines: &'a BTreeMap<&'a str, &'a Machine>,
    classes: &'a [&'a NodeClass],
    /// The placement Nodes made for requests.
    nodes: &'a BTreeMap<&'a str, NodeSeen>,
    versions: Versions,
}

fn deployment_view(deployment: &MachineDeployment) -> plan::Deployment {
    plan::Deployment {
        replicas: deployment.replicas(),
        generation: deployment.metadata.generation.unwrap_or_default(),
        max_size: deployment.max_size(),
        intended: deployment.intended_replicas(),
    }
}

fn machine_view(machine: &Machine) -> plan::Machine<'_> {
    plan::Machine {
        name: machine.name_any_str(),
        created: created(&machine.metadata),
        claim: machine.claim(),
        marked: machine.marked_for_deletion(),
        deleting: machine.metadata.deletion_timestamp.is_some(),
        running_node: machine.running_node(),
        failure: machine.failure().map(|f| f.into_owned()),
    }
}

fn request_view<'a>(request: &'a NodeRequest, prefix: &str) -> plan::Request<'a> {
    let status = request.status.as_ref();
    let machine = status.map_or("", |s| s.machine.as_str());
    plan::Request {
        name: request.name_any_str(),
        created: created(&request.metadata),
        phase: request.phase(),
        deleted: request.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        adopted: request.finalizers().iter().any(|f| f == FINALIZER),
        scale_generation: status.and_then(|s| s.scale_generation),
        machine: machine.strip_prefix(prefix).unwrap_or(machine),
    }
}

fn created(meta: &ObjectMeta) -> Timestamp {
    meta.creation_timestamp
        .as_ref()
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
}

/// The action a refused step is counted under in `tenant_placer_node_request_errors_total`.
fn step_action(step: &Step) -> &'static str {
    match step {
        Step::Adopt { .. } | Step::Release { .. } => "finalizer",
        Step::Intend { .. } | Step::Record { .. } | Step::Ready { .. } | Step::Fail { .. } => {
            "status"
        }
        Step::Scale { .. } => "scale",
        Step::Claim { .. } | Step::Mark { .. } | Step::Repair { .. } => "claim",
        Step::MakeNode { .. } | Step::DeleteNode { .. } => "node",
    }
}

/// A name borrowed from an object's metadata.
trait NameStr {
    fn name_any_str(&self) -> &str;
}

impl<K: Resource> NameStr for K {
    fn name_any_str(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::{
        ClusterApiSource, NodeClassSpec, NodeRequestSpec, NodeRequestStatus, ResourceAmounts,
    };

    fn class(name: &str, deployment: Option<&str>) -> NodeClass {
        NodeClass::new(
            name,
            NodeClassSpec {
                capacity: ResourceAmounts::new(8, 32, 100),
                provider: "p".into(),
                monthly_cost: None,
                limit: None,
                labels: Default::default(),
                cluster_api: deployment.map(|d| ClusterApiSource {
                    machine_deployment: NamespacedName::parse(d).unwrap(),
                }),
            },
        )
    }

    fn request(name: &str, class: &str, recorded: &str) -> NodeRequest {
        let mut request = NodeRequest::new(
            name,
            NodeRequestSpec {
                node_class: class.into(),
                capacity: ResourceAmounts::new(8, 32, 100),
                tenants: vec![],
            },
        );
        request.status = Some(NodeRequestStatus {
            machine_deployment: recorded.into(),
            ..NodeRequestStatus::default()
        });
        request
    }

    #[test]
    fn a_request_goes_to_the_deployment_it_was_raised_for_and_only_ours_are_taken() {
        let classes = [
            class("a", Some("fleet/md-a")),
            class("moved", Some("fleet/md-new")),
            class("theirs", None),
            class("other-pool", Some("fleet/md-x")),
        ];
        let ours: Vec<&NodeClass> = classes[..2].iter().collect();
        let all: BTreeSet<&str> = classes.iter().map(|c| c.name_any_str()).collect();
        let requests = [
            request("r-a", "a", ""),
            request("r-moved", "moved", "fleet/md-old"),
            request("r-new", "moved", ""),
            request("r-theirs", "theirs", ""),
            request("r-pool", "other-pool", "fleet/md-x"),
            request("r-orphan", "deleted-class", "fleet/md-a"),
            request("r-unknown", "deleted-class", ""),
        ];
        let groups = by_deployment(&ours, &all, &requests);
        let seen: Vec<(String, Vec<&str>, Vec<&str>)> = groups
            .iter()
            .map(|(key, (classes, requests))| {
                (
                    key.to_string(),
                    classes.iter().map(|c| c.name_any_str()).collect(),
                    requests.iter().map(|r| r.name_any_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("fleet/md-a".to_owned(), vec!["a"], vec!["r-a", "r-orphan"]),
                ("fleet/md-new".to_owned(), vec!["moved"], vec!["r-new"]),
                ("fleet/md-old".to_owned(), vec![], vec!["r-moved"]),
            ]
        );
    }
}
