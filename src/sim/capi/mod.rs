//! A simulated Cluster API: MachineDeployments, MachineSets and Machines (`cluster.x-k8s.io`,
//! v1beta2) that behave as Cluster API's controllers and an infrastructure provider make them
//! behave, against any API, so that `--provisioner cluster-api` can be tested and watched in the
//! sandbox without a cluster.
//!
//! ```text
//!   MachineDeployment ──owns──▶ MachineSet ──owns──▶ Machines ──each becomes──▶ core v1 Node
//!   spec.replicas ──copied──▶ spec.replicas ──▶ Machines created, or deleted in CAPI's order
//!
//!   Machine   Pending ─▶ Provisioning ─▶ Provisioned ─▶ Running      (each phase lasts `step`)
//!                          │             providerID     Node created, then nodeRef
//!                          ├ failing: ─▶ Failed (failureReason, failureMessage), no Node
//!                          └ stalled: stays Provisioning
//!   deleted   Deleting ─(step)─▶ its Node deleted ─▶ finalizer removed ─▶ gone
//! ```
//!
//! Which parts it plays, and the rules it keeps:
//! - **the MachineDeployment controller**: one MachineSet per MachineDeployment (controller
//!   ownerReference; labels `cluster.x-k8s.io/cluster-name` and `cluster.x-k8s.io/deployment-name`
//!   plus the template's), named `<md>-<5 random characters>` (the MachineDeployment's name cut to
//!   57 characters, so the name is a label value), with the selector and template copied once;
//!   its `spec.replicas` follows the MachineDeployment's (absent reads as 1, what Cluster API's
//!   webhook defaults) and so does `spec.deletion.order` (v1beta1's
//!   `spec.strategy.rollingUpdate.deletePolicy` when `deletion.order` is not set). There are no
//!   rollouts: a template change is not copied, and a second MachineSet (a create whose answer was
//!   lost) is scaled to 0.
//! - **the MachineSet controller**: Machines it owns (controller ownerReference) are counted,
//!   including those being deleted, as Cluster API counts them; too few: Machines are created
//!   (`<ms>-<5 random characters>`, the template's labels plus `cluster.x-k8s.io/set-name`,
//!   `cluster.x-k8s.io/deployment-name` and `cluster.x-k8s.io/cluster-name`, the template's
//!   annotations, the finalizer `machine.cluster.x-k8s.io`, `spec.clusterName`, and the
//!   template's `bootstrap` and `infrastructureRef` pointing at an object of the machine's name
//!   whose kind drops the `Template` suffix, as Cluster API's clones are named; the referenced
//!   objects themselves are not created); too many: Machines are deleted in Cluster API's
//!   order: those already being deleted, then those annotated `cluster.x-k8s.io/delete-machine`,
//!   then unhealthy ones (no `status.nodeRef`, or `NodeHealthy` / `HealthCheckSucceeded` False),
//!   then by `spec.deletion.order`: `Oldest` first, or `Newest` first. Cluster API's default,
//!   `Random`, is taken as `Oldest` here, deterministic and unlike the Machine the controller
//!   bought last: a lowering the controller forgot to mark takes someone else's Machine, and
//!   tests see it; equal ranks go by name, as in Cluster API.
//! - **status**: a MachineDeployment's and a MachineSet's status (through `/status`) says
//!   `replicas` (its Machines not being deleted), `readyReplicas` and `availableReplicas`
//!   (those `Running`), `upToDateReplicas` (as `replicas`: no rollouts), `selector` as a string
//!   (`k=v,...`, what the scale subresource reads), `observedGeneration`, the conditions
//!   `Available`, `ScalingUp` and `ScalingDown`, and for a MachineDeployment `phase`
//!   (`ScalingUp`, `ScalingDown` or `Running`). A status that would not change is not written.
//! - **the Machine controller and an infrastructure provider**: each phase lasts
//!   [`CapiSimConfig::step`] from when the simulator first saw it: `Pending`, `Provisioning`
//!   (bootstrap data ready), `Provisioned` (`spec.providerID: sim://<machine>`, infrastructure
//!   ready), then `Running`: a core v1 Node named after the Machine is created (the kubelet's
//!   part: `spec.providerID`, `Ready`, allocatable and capacity, `nodeInfo`; Cluster API's
//!   labels of the `node-role.kubernetes.io`, `node-restriction.kubernetes.io` and
//!   `node.cluster.x-k8s.io` domains and its annotations `cluster.x-k8s.io/cluster-name`,
//!   `cluster-namespace`, `machine`, `owner-kind`, `owner-name`), then `status.nodeRef` and the
//!   v1beta2 conditions (`BootstrapConfigReady`, `InfrastructureReady`, `NodeReady`,
//!   `NodeHealthy`, `Ready`, `Available`, `UpToDate`, `Deleting`). A Node that already exists
//!   under that name is taken as made.
//! - **allocatable**: [`CapiSimConfig::allocatable`] for the MachineDeployment, as given; else the
//!   NodeClass whose `spec.clusterAPI.machineDeployment` names it (`cpu` = threads,
//!   `memory` = `<memoryGb>Gi`, `ephemeral-storage` = `<storageGb>Gi`, `pods` = 110); else only
//!   `pods`.
//! - **failures**: a Machine of a MachineDeployment in [`CapiSimConfig::failing`] (or named by
//!   a NodeClass in [`CapiSimConfig::failing_classes`]) ends
//!   `Failed` after its `Provisioning` step, with `status.deprecated.v1beta1.failureReason`
//!   `CreateError`, a `failureMessage` ending in `(simulated failure)`, and `InfrastructureReady`
//!   and `Ready` False; no Node is made. (Cluster API v1beta2 no longer sets the deprecated
//!   `Failed` phase itself; the simulator does, as providers' v1beta1 contract did.) One in
//!   [`CapiSimConfig::stalled`] stays `Provisioning`.
//! - **deletion**: a Machine being deleted shows `Deleting` for one step, then its core Node is
//!   deleted (only a Node whose `spec.providerID` is this Machine's), and once that Node is gone
//!   the finalizer is removed (a merge patch guarded by resourceVersion). A MachineSet whose
//!   MachineDeployment is gone, and a Machine whose MachineSet is gone, are deleted, as the
//!   garbage collector would (the owner is read again first).
//! - every write is one a controller makes: creates, merge patches of `spec` and of `/status`,
//!   deletes with a uid precondition; a refused write is logged at debug and tried again at the
//!   next look, and never stops the others.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Node as CoreNode, NodeAddress, NodeCondition, NodeSpec as CoreNodeSpec,
    NodeStatus as CoreNodeStatus, NodeSystemInfo,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions,
};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};

use crate::api::{Condition, NodeClass};

/// The CustomResourceDefinitions of MachineDeployment, MachineSet and Machine (YAML, three
/// documents): see `crds.yaml` for what they type.
pub const CRDS: &str = include_str!("crds.yaml");

/// Cluster API's group.
pub const GROUP: &str = "cluster.x-k8s.io";
/// The version the simulator reads and writes (stored); v1beta1 is served too.
pub const VERSION: &str = "v1beta2";
/// On MachineSets and Machines: the Cluster's name.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// On MachineSets and Machines: the MachineDeployment's name.
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// On Machines: the MachineSet's name.
pub const SET_NAME_LABEL: &str = "cluster.x-k8s.io/set-name";
/// On a Machine: delete this one first when scaling down (any value).
pub const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";
/// The finalizer on every Machine, removed once its Node is gone.
pub const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";
/// A simulated machine's `spec.providerID` (and its Node's) is this plus the Machine's name.
pub const PROVIDER_ID_PREFIX: &str = "sim://";

const FIELD_MANAGER: &str = "capi-sim";
/// How long [`install_crds`] waits for the kinds to be served.
const SERVED_WITHIN: Duration = Duration::from_secs(30);
/// The characters of a generated name suffix (the apiserver's and Cluster API's: no vowels).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const SUFFIX_LEN: usize = 5;
/// A MachineDeployment name longer than this is cut in its MachineSet's name.
const SET_PREFIX_MAX: usize = 57;
/// A Node's kubelet version when the Machine names no `spec.version`.
const DEFAULT_KUBELET_VERSION: &str = "v1.34.0";
const PODS_PER_NODE: &str = "110";

/// One of the three kinds the simulator plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapiKind {
    MachineDeployment,
    MachineSet,
    Machine,
}

impl CapiKind {
    /// The three kinds, owners first.
    pub const ALL: [CapiKind; 3] = [
        CapiKind::MachineDeployment,
        CapiKind::MachineSet,
        CapiKind::Machine,
    ];

    /// The kind's name.
    pub fn kind(self) -> &'static str {
        match self {
            CapiKind::MachineDeployment => "MachineDeployment",
            CapiKind::MachineSet => "MachineSet",
            CapiKind::Machine => "Machine",
        }
    }

    /// The resource (plural) name.
    pub fn plural(self) -> &'static str {
        match self {
            CapiKind::MachineDeployment => "machinedeployments",
            CapiKind::MachineSet => "machinesets",
            CapiKind::Machine => "machines",
        }
    }

    /// The resource at `version` (`v1beta2` or `v1beta1`), for a dynamic [`Api`].
    pub fn api_resource_at(self, version: &str) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, version, self.kind()),
            self.plural(),
        )
    }

    /// The resource at [`VERSION`].
    pub fn api_resource(self) -> ApiResource {
        self.api_resource_at(VERSION)
    }

    fn api(self, client: &Client, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), namespace, &self.api_resource())
    }
}

/// How the simulated Cluster API behaves. Keys of the sets and map are `namespace/name` of a
/// MachineDeployment.
#[derive(Clone, Debug, Default)]
pub struct CapiSimConfig {
    /// How long each Machine phase lasts (Pending, Provisioning, Provisioned, Deleting).
    pub step: Duration,
    /// How often it looks (no more often than every 10 ms).
    pub every: Duration,
    /// MachineDeployments whose new Machines fail (phase `Failed` after `Provisioning`).
    pub failing: HashSet<String>,
    /// NodeClasses (by name) whose MachineDeployment's new Machines fail, as `failing` does.
    pub failing_classes: HashSet<String>,
    /// MachineDeployments whose Machines never reach `Running` (they stay `Provisioning`).
    pub stalled: HashSet<String>,
    /// The core Node allocatable (and capacity) a MachineDeployment's machines report, in place
    /// of its NodeClass's (e.g. to deliver less than the class promises).
    pub allocatable: HashMap<String, BTreeMap<String, String>>,
}

/// Creates the CRDs of [`CRDS`] (one that exists is left as it is) and waits until each is
/// `Established` and its served versions answer a list: up to 30 s, then the last error.
pub async fn install_crds(client: &Client) -> Result<(), kube::Error> {
    let crds = parse_crds()?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in &crds {
        match api.create(&PostParams::default(), crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(error) => return Err(error),
        }
    }
    let deadline = Instant::now().checked_add(SERVED_WITHIN);
    for crd in &crds {
        loop {
            let error = match served(client, &api, crd).await {
                Ok(true) => break,
                Ok(false) => kube::Error::Api(
                    kube::core::Status::failure(
                        &format!("CRD {} is not established", crd.name_any()),
                        "Timeout",
                    )
                    .with_code(504)
                    .boxed(),
                ),
                Err(error) => error,
            };
            if deadline.is_none_or(|d| Instant::now() >= d) {
                return Err(error);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// The three CRDs of [`CRDS`].
fn parse_crds() -> Result<Vec<CustomResourceDefinition>, kube::Error> {
    use serde::de::Error as _;
    let documents: Vec<Value> = serde_saphyr::from_multiple(CRDS)
        .map_err(|e| kube::Error::SerdeError(serde_json::Error::custom(e.to_string())))?;
    documents
        .into_iter()
        .filter(|d| !d.is_null())
        .map(|d| serde_json::from_value(d).map_err(kube::Error::SerdeError))
        .collect()
}

/// Whether `crd` is Established and every served version of it answers a list.
async fn served(
    client: &Client,
    api: &Api<CustomResourceDefinition>,
    crd: &CustomResourceDefinition,
) -> Result<bool, kube::Error> {
    let current = api.get(&crd.name_any()).await?;
    let established = current
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
    if !established {
        return Ok(false);
    }
    for version in crd.spec.versions.iter().filter(|v| v.served) {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind),
            &crd.spec.names.plural,
        );
        Api::<DynamicObject>::all_with(client.clone(), &resource)
            .list(&ListParams::default().limit(1))
            .await?;
    }
    Ok(true)
}

/// Runs until the task is dropped. Errors are logged at debug and retried at the next look.
pub async fn run(client: Client, config: CapiSimConfig) {
    let mut clocks = Clocks::default();
    let mut rng = fastrand::Rng::new();
    let every = config.every.max(Duration::from_millis(10));
    loop {
        if let Err(error) = look(&client, &config, &mut clocks, &mut rng).await {
            tracing::debug!(%error, "simulated Cluster API: will look again");
        }
        tokio::time::sleep(every).await;
    }
}

/// What one look reads.
struct World {
    deployments: Vec<DynamicObject>,
    sets: Vec<DynamicObject>,
    machines: Vec<DynamicObject>,
    /// Read only when a Machine is about to fail or become a Node.
    classes: Vec<NodeClass>,
}

/// One look: read everything, decide every write, then make them.
async fn look(
    client: &Client,
    config: &CapiSimConfig,
    clocks: &mut Clocks,
    rng: &mut fastrand::Rng,
) -> Result<(), kube::Error> {
    let list = |kind: CapiKind| async move {
        Api::<DynamicObject>::all_with(client.clone(), &kind.api_resource())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
    };
    // Owners first: an object listed later was made after its owner was listed.
    let deployments = list(CapiKind::MachineDeployment).await?;
    let sets = list(CapiKind::MachineSet).await?;
    let machines = list(CapiKind::Machine).await?;
    // Classes say what a machine becomes (its allocatable) and whether it fails.
    let becoming_nodes = machines.iter().any(|m| {
        !deleting(m)
            && matches!(
                phase(m),
                Some(MachinePhase::Provisioning | MachinePhase::Provisioned)
            )
    });
    let classes = if becoming_nodes {
        node_classes(client).await?
    } else {
        Vec::new()
    };
    let now = Instant::now();
    clocks.observe(&machines, now);
    let world = World {
        deployments,
        sets,
        machines,
        classes,
    };
    let time = Time(Timestamp::now());
    for write in plan(&world, config, clocks, now, rng, &time) {
        let what = write.describe();
        if let Err(error) = perform(client, write, clocks).await {
            tracing::debug!(%error, write = %what, "simulated Cluster API: will try again");
        }
    }
    Ok(())
}

/// The NodeClasses; none when their CRD is not installed.
async fn node_classes(client: &Client) -> Result<Vec<NodeClass>, kube::Error> {
    match Api::<NodeClass>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(Vec::new()),
        Err(error) => Err(error),
    }
}

/// When the simulator first saw each Machine (by uid) in its current phase.
#[derive(Debug, Default)]
struct Clocks(HashMap<String, (Option<MachinePhase>, Instant)>);

impl Clocks {
    /// Starts the clock of every Machine seen in a new phase; forgets Machines that are gone.
    fn observe(&mut self, machines: &[DynamicObject], now: Instant) {
        let mut seen = HashSet::new();
        for machine in machines {
            let uid = uid(machine);
            seen.insert(uid);
            let phase = phase(machine);
            match self.0.get(uid) {
                Some((p, _)) if *p == phase => {}
                _ => {
                    self.0.insert(uid.to_owned(), (phase, now));
                }
            }
        }
        self.0.retain(|uid, _| seen.contains(uid.as_str()));
    }

    fn start(&mut self, uid: &str, phase: MachinePhase, now: Instant) {
        self.0.insert(uid.to_owned(), (Some(phase), now));
    }

    /// How long the Machine has been in its phase (zero if never seen).
    fn since(&self, uid: &str, now: Instant) -> Duration {
        self.0
            .get(uid)
            .map(|(_, at)| now.saturating_duration_since(*at))
            .unwrap_or_default()
    }
}

/// Every write of one look, in the order it is made: owners before what they own.
fn plan(
    world: &World,
    config: &CapiSimConfig,
    clocks: &Clocks,
    now: Instant,
    rng: &mut fastrand::Rng,
    time: &Time,
) -> Vec<Write> {
    let mut writes = Vec::new();
    for md in &world.deployments {
        let sets: Vec<&DynamicObject> =
            world.sets.iter().filter(|s| controlled_by(s, md)).collect();
        let machines: Vec<&DynamicObject> = world
            .machines
            .iter()
            .filter(|m| sets.iter().any(|s| controlled_by(m, s)))
            .collect();
        writes.extend(plan_deployment(md, &sets, &machines, rng, time));
    }
    for ms in &world.sets {
        let machines: Vec<&DynamicObject> = world
            .machines
            .iter()
            .filter(|m| controlled_by(m, ms))
            .collect();
        writes.extend(plan_set(ms, &machines, rng, time));
    }
    writes.extend(orphans(world));
    for machine in &world.machines {
        writes.extend(plan_machine(
            machine,
            config,
            clocks.since(uid(machine), now),
            &world.classes,
            time,
        ));
    }
    writes
}

/// One write, decided by [`plan`] and made by [`perform`].
#[derive(Debug)]
enum Write {
    /// Create a MachineSet or a Machine.
    Create { kind: CapiKind, object: Value },
    /// A merge patch of the main resource.
    Spec {
        kind: CapiKind,
        namespace: String,
        name: String,
        patch: Value,
    },
    /// A merge patch of `/status`; a Machine's new phase starts its clock.
    Status {
        kind: CapiKind,
        namespace: String,
        name: String,
        status: Value,
        phase: Option<(String, MachinePhase)>,
    },
    /// Delete (uid precondition).
    Delete {
        kind: CapiKind,
        namespace: String,
        name: String,
        uid: String,
    },
    /// Delete an object whose controller `owner` (same namespace) is gone, once that is read
    /// again.
    Collect {
        kind: CapiKind,
        namespace: String,
        name: String,
        uid: String,
        owner_kind: CapiKind,
        owner: OwnerReference,
    },
    /// Set a Machine's `spec.providerID`, then its status (`Provisioned`).
    Provision {
        namespace: String,
        name: String,
        uid: String,
        provider_id: String,
        status: Value,
    },
    /// Create a Machine's core Node, then its status (`Running`, `nodeRef`).
    Register {
        namespace: String,
        name: String,
        uid: String,
        node: Box<CoreNode>,
        status: Value,
    },
    /// Delete a deleted Machine's core Node, and once it is gone remove the finalizer.
    Release {
        namespace: String,
        name: String,
        node: String,
        provider_id: String,
        resource_version: String,
        finalizers: Vec<String>,
    },
}

impl Write {
    fn describe(&self) -> String {
        match self {
            Write::Create { kind, object } => format!(
                "create {} {}/{}",
                kind.kind(),
                object["metadata"]["namespace"].as_str().unwrap_or_default(),
                object["metadata"]["name"].as_str().unwrap_or_default()
            ),
            Write::Spec {
                kind,
                namespace,
                name,
                ..
            } => format!("patch {} {namespace}/{name}", kind.kind()),
            Write::Status {
                kind,
                namespace,
                name,
                ..
            } => format!("status of {} {namespace}/{name}", kind.kind()),
            Write::Delete {
                kind,
                namespace,
                name,
                ..
            }
            | Write::Collect {
                kind,
                namespace,
                name,
                ..
            } => format!("delete {} {namespace}/{name}", kind.kind()),
            Write::Provision {
                namespace, name, ..
            } => format!("provision Machine {namespace}/{name}"),
            Write::Register {
                namespace, name, ..
            } => format!("register the Node of Machine {namespace}/{name}"),
            Write::Release {
                namespace, name, ..
            } => format!("release Machine {namespace}/{name}"),
        }
    }
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

/// Makes one write.
async fn perform(client: &Client, write: Write, clocks: &mut Clocks) -> Result<(), kube::Error> {
    match write {
        Write::Create { kind, object } => {
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            let object: DynamicObject =
                serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
            kind.api(client, &namespace)
                .create(&post_params(), &object)
                .await?;
        }
        Write::Spec {
            kind,
            namespace,
            name,
            patch,
        } => {
            kind.api(client, &namespace)
                .patch(&name, &patch_params(), &Patch::Merge(&patch))
                .await?;
        }
        Write::Status {
            kind,
            namespace,
            name,
            status,
            phase,
        } => {
            write_status(client, kind, &namespace, &name, status).await?;
            if let Some((uid, phase)) = phase {
                clocks.start(&uid, phase, Instant::now());
            }
        }
        Write::Delete {
            kind,
            namespace,
            name,
            uid,
        } => delete(&kind.api(client, &namespace), &name, &uid).await?,
        Write::Collect {
            kind,
            namespace,
            name,
            uid,
            owner_kind,
            owner,
        } => {
            let current = owner_kind
                .api(client, &namespace)
                .get_opt(&owner.name)
                .await?;
            if current.is_none_or(|o| o.metadata.uid.as_deref() != Some(owner.uid.as_str())) {
                delete(&kind.api(client, &namespace), &name, &uid).await?;
                let kind = kind.kind();
                tracing::info!(kind, %namespace, %name, "simulated Cluster API: owner gone");
            }
        }
        Write::Provision {
            namespace,
            name,
            uid,
            provider_id,
            status,
        } => {
            let patch = json!({"spec": {"providerID": provider_id}});
            CapiKind::Machine
                .api(client, &namespace)
                .patch(&name, &patch_params(), &Patch::Merge(&patch))
                .await?;
            write_status(client, CapiKind::Machine, &namespace, &name, status).await?;
            clocks.start(&uid, MachinePhase::Provisioned, Instant::now());
        }
        Write::Register {
            namespace,
            name,
            uid,
            node,
            status,
        } => {
            let nodes: Api<CoreNode> = Api::all(client.clone());
            match nodes.create(&post_params(), &node).await {
                Ok(_) => {}
                // Made at an earlier look whose status write failed.
                Err(kube::Error::Api(status)) if status.is_already_exists() => {}
                Err(error) => return Err(error),
            }
            write_status(client, CapiKind::Machine, &namespace, &name, status).await?;
            clocks.start(&uid, MachinePhase::Running, Instant::now());
            tracing::info!(%namespace, %name, "simulated Cluster API: machine running");
        }
        Write::Release {
            namespace,
            name,
            node,
            provider_id,
            resource_version,
            finalizers,
        } => {
            let nodes: Api<CoreNode> = Api::all(client.clone());
            let ours = |n: &CoreNode| {
                n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id.as_str())
            };
            if let Some(current) = nodes.get_opt(&node).await?.filter(|n| ours(n)) {
                if current.metadata.deletion_timestamp.is_none() {
                    match nodes.delete(&node, &DeleteParams::default()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.is_not_found() => {}
                        Err(error) => return Err(error),
                    }
                }
                if nodes.get_opt(&node).await?.is_some_and(|n| ours(&n)) {
                    return Ok(()); // Its finalizers hold it: look again later.
                }
            }
            let patch = json!({"metadata": {
                "resourceVersion": resource_version,
                "finalizers": finalizers,
            }});
            CapiKind::Machine
                .api(client, &namespace)
                .patch(&name, &patch_params(), &Patch::Merge(&patch))
                .await?;
            tracing::info!(%namespace, %name, "simulated Cluster API: machine released");
        }
    }
    Ok(())
}

async fn write_status(
    client: &Client,
    kind: CapiKind,
    namespace: &str,
    name: &str,
    status: Value,
) -> Result<(), kube::Error> {
    kind.api(client, namespace)
        .patch_status(
            name,
            &patch_params(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .map(drop)
}

async fn delete(api: &Api<DynamicObject>, name: &str, uid: &str) -> Result<(), kube::Error> {
    let params = DeleteParams::default().preconditions(Preconditions {
        uid: Some(uid.to_owned()),
        resource_version: None,
    });
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(error) => Err(error),
    }
}

// ---------------------------------------------------------------------------------------------
// MachineDeployment

/// The MachineSet of a MachineDeployment and the MachineDeployment's status.
fn plan_deployment(
    md: &DynamicObject,
    sets: &[&DynamicObject],
    machines: &[&DynamicObject],
    rng: &mut fastrand::Rng,
    time: &Time,
) -> Vec<Write> {
    if deleting(md) {
        return Vec::new();
    }
    let desired = replicas(md);
    let order = deletion_order_of_deployment(md);
    let mut writes = Vec::new();
    let mut current: Vec<&DynamicObject> = sets.iter().copied().filter(|s| !deleting(s)).collect();
    current.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
            .then_with(|| name(a).cmp(name(b)))
    });
    match current.split_first() {
        None => writes.push(Write::Create {
            kind: CapiKind::MachineSet,
            object: machine_set_for(md, desired, order, rng),
        }),
        Some((first, rest)) => {
            let mut spec = Map::new();
            if first.data["spec"]["replicas"].as_i64() != Some(i64::from(desired)) {
                spec.insert("replicas".into(), desired.into());
            }
            if first.data["spec"]["deletion"]["order"].as_str() != order {
                spec.insert(
                    "deletion".into(),
                    order.map_or(Value::Null, |o| json!({ "order": o })),
                );
            }
            if !spec.is_empty() {
                writes.push(spec_write(
                    CapiKind::MachineSet,
                    first,
                    json!({ "spec": spec }),
                ));
            }
            for extra in rest {
                if extra.data["spec"]["replicas"].as_i64() != Some(0) {
                    writes.push(spec_write(
                        CapiKind::MachineSet,
                        extra,
                        json!({"spec": {"replicas": 0}}),
                    ));
                }
            }
        }
    }
    let status = replica_status(md, desired, Counts::of(machines), true, time);
    writes.extend(status_write(CapiKind::MachineDeployment, md, status));
    writes
}

/// `spec.replicas`, or 1 (Cluster API's webhook default) when absent.
fn replicas(object: &DynamicObject) -> i32 {
    object.data["spec"]["replicas"]
        .as_i64()
        .and_then(|r| i32::try_from(r).ok())
        .unwrap_or(1)
}

/// `spec.deletion.order`, or v1beta1's `spec.strategy.rollingUpdate.deletePolicy`.
fn deletion_order_of_deployment(md: &DynamicObject) -> Option<&str> {
    md.data["spec"]["deletion"]["order"]
        .as_str()
        .or_else(|| md.data["spec"]["strategy"]["rollingUpdate"]["deletePolicy"].as_str())
}

/// The MachineSet a MachineDeployment keeps.
fn machine_set_for(
    md: &DynamicObject,
    desired: i32,
    order: Option<&str>,
    rng: &mut fastrand::Rng,
) -> Value {
    let md_name = name(md);
    let prefix: String = md_name.chars().take(SET_PREFIX_MAX).collect();
    let set_name = format!("{prefix}-{}", suffix(rng));
    let cluster = md.data["spec"]["clusterName"].clone();
    let mut template = md.data["spec"]["template"].clone();
    let mut labels = string_map(&md.data["spec"]["template"]["metadata"]["labels"]);
    labels.insert(DEPLOYMENT_NAME_LABEL.into(), md_name.into());
    if let Some(cluster) = cluster.as_str() {
        labels.insert(CLUSTER_NAME_LABEL.into(), cluster.into());
    }
    if let Some(template) = template.as_object_mut() {
        template.remove("status");
    }
    let mut spec = Map::new();
    spec.insert("clusterName".into(), cluster);
    spec.insert("replicas".into(), desired.into());
    spec.insert("selector".into(), md.data["spec"]["selector"].clone());
    spec.insert("template".into(), template);
    if let Some(order) = order {
        spec.insert("deletion".into(), json!({ "order": order }));
    }
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": CapiKind::MachineSet.kind(),
        "metadata": {
            "name": set_name,
            "namespace": namespace(md),
            "labels": labels,
            "ownerReferences": [controller_reference(CapiKind::MachineDeployment, md)],
        },
        "spec": spec,
    })
}

// ---------------------------------------------------------------------------------------------
// MachineSet

/// A MachineSet's Machines (created or deleted to match `spec.replicas`) and its status.
fn plan_set(
    ms: &DynamicObject,
    machines: &[&DynamicObject],
    rng: &mut fastrand::Rng,
    time: &Time,
) -> Vec<Write> {
    if deleting(ms) {
        return Vec::new();
    }
    let desired = replicas(ms);
    let wanted = usize::try_from(desired).unwrap_or(0);
    let mut writes = Vec::new();
    if let Some(missing) = wanted.checked_sub(machines.len()) {
        for _ in 0..missing {
            writes.push(Write::Create {
                kind: CapiKind::Machine,
                object: machine_for(ms, rng),
            });
        }
    } else if let Some(excess) = machines.len().checked_sub(wanted) {
        let order = DeletionOrder::of(ms.data["spec"]["deletion"]["order"].as_str());
        let candidates = machines.iter().map(|m| Candidate::of(m)).collect();
        for chosen in to_delete(candidates, order, excess) {
            let found = machines.iter().find(|m| name(m) == chosen);
            // One already being deleted is counted, and waited for.
            if let Some(machine) = found.filter(|m| !deleting(m)) {
                writes.push(Write::Delete {
                    kind: CapiKind::Machine,
                    namespace: namespace(machine).to_owned(),
                    name: chosen.to_owned(),
                    uid: uid(machine).to_owned(),
                });
            }
        }
    }
    let status = replica_status(ms, desired, Counts::of(machines), false, time);
    writes.extend(status_write(CapiKind::MachineSet, ms, status));
    writes
}

/// A new Machine of a MachineSet, as Cluster API's MachineSet controller makes it.
fn machine_for(ms: &DynamicObject, rng: &mut fastrand::Rng) -> Value {
    let set_name = name(ms);
    let machine_name = format!("{set_name}-{}", suffix(rng));
    let template = &ms.data["spec"]["template"];
    let mut labels = string_map(&template["metadata"]["labels"]);
    labels.insert(SET_NAME_LABEL.into(), set_name.into());
    if let Some(md) = ms.labels().get(DEPLOYMENT_NAME_LABEL) {
        labels.insert(DEPLOYMENT_NAME_LABEL.into(), md.clone());
    }
    let cluster = ms.data["spec"]["clusterName"].clone();
    if let Some(cluster) = cluster.as_str() {
        labels.insert(CLUSTER_NAME_LABEL.into(), cluster.into());
    }
    let mut spec = template["spec"].as_object().cloned().unwrap_or_default();
    spec.insert("clusterName".into(), cluster);
    if let Some(reference) = spec.get_mut("infrastructureRef") {
        point_at_clone(reference, &machine_name);
    }
    if let Some(reference) = spec
        .get_mut("bootstrap")
        .and_then(Value::as_object_mut)
        .and_then(|b| b.get_mut("configRef"))
    {
        point_at_clone(reference, &machine_name);
    }
    let mut metadata = json!({
        "name": machine_name,
        "namespace": namespace(ms),
        "labels": labels,
        "finalizers": [MACHINE_FINALIZER],
        "ownerReferences": [controller_reference(CapiKind::MachineSet, ms)],
    });
    let annotations = string_map(&template["metadata"]["annotations"]);
    if !annotations.is_empty() {
        metadata["annotations"] = json!(annotations);
    }
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": CapiKind::Machine.kind(),
        "metadata": metadata,
        "spec": spec,
    })
}

/// A template reference made to point at the machine's own clone: same group, the kind without
/// `Template`, the machine's name.
fn point_at_clone(reference: &mut Value, machine: &str) {
    let Some(reference) = reference.as_object_mut() else {
        return;
    };
    if let Some(kind) = reference.get("kind").and_then(Value::as_str) {
        let kind = kind.strip_suffix("Template").unwrap_or(kind).to_owned();
        reference.insert("kind".into(), kind.into());
    }
    reference.insert("name".into(), machine.into());
}

/// The order among Machines that are neither being deleted, annotated, nor unhealthy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DeletionOrder {
    /// Also for `Random` (Cluster API's default) and an unset order: deterministic, and the
    /// Machine least likely to be the one a missing mark meant.
    Oldest,
    Newest,
}

impl DeletionOrder {
    fn of(order: Option<&str>) -> Self {
        match order {
            Some("Newest") => DeletionOrder::Newest,
            _ => DeletionOrder::Oldest,
        }
    }
}

/// Which Machines go first when a MachineSet scales down: lower goes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum DeleteRank {
    /// Already being deleted: counted, never deleted twice.
    Deleting,
    /// Annotated `cluster.x-k8s.io/delete-machine`.
    Annotated,
    /// No Node yet, or its Node is not healthy.
    Unhealthy,
    Healthy,
}

/// A Machine as the scale-down order reads it.
#[derive(Clone, Debug, PartialEq)]
struct Candidate<'a> {
    name: &'a str,
    rank: DeleteRank,
    created: Option<Timestamp>,
}

impl<'a> Candidate<'a> {
    fn of(machine: &'a DynamicObject) -> Self {
        let rank = if deleting(machine) {
            DeleteRank::Deleting
        } else if machine
            .annotations()
            .contains_key(DELETE_MACHINE_ANNOTATION)
        {
            DeleteRank::Annotated
        } else if !healthy(machine) {
            DeleteRank::Unhealthy
        } else {
            DeleteRank::Healthy
        };
        Candidate {
            name: name(machine),
            rank,
            created: machine.metadata.creation_timestamp.as_ref().map(|t| t.0),
        }
    }
}

/// The names of the `count` Machines to delete first (some may be being deleted already).
fn to_delete<'a>(
    mut candidates: Vec<Candidate<'a>>,
    order: DeletionOrder,
    count: usize,
) -> Vec<&'a str> {
    candidates.sort_by(|a, b| {
        let by_age = || {
            if a.rank != DeleteRank::Healthy {
                return std::cmp::Ordering::Equal;
            }
            // A Machine without a creation time goes last, as in Cluster API.
            let unknown = a.created.is_none().cmp(&b.created.is_none());
            unknown.then_with(|| match order {
                DeletionOrder::Newest => b.created.cmp(&a.created),
                DeletionOrder::Oldest => a.created.cmp(&b.created),
            })
        };
        a.rank
            .cmp(&b.rank)
            .then_with(by_age)
            .then_with(|| a.name.cmp(b.name))
    });
    candidates.into_iter().take(count).map(|c| c.name).collect()
}

/// Cluster API's `isMachineHealthy`: a Node, and neither `NodeHealthy` nor
/// `HealthCheckSucceeded` False.
fn healthy(machine: &DynamicObject) -> bool {
    let status = &machine.data["status"];
    let has_node = status["nodeRef"]["name"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let is_false = |type_: &str| {
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == type_ && c["status"] == "False")
    };
    has_node && !is_false("NodeHealthy") && !is_false("HealthCheckSucceeded")
}

// ---------------------------------------------------------------------------------------------
// Status of MachineDeployments and MachineSets

/// A group of Machines as a status counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    /// Not being deleted.
    replicas: i32,
    /// Running (and not being deleted).
    ready: i32,
}

impl Counts {
    fn of(machines: &[&DynamicObject]) -> Self {
        let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        let live = machines.iter().filter(|m| !deleting(m));
        Counts {
            replicas: count(live.clone().count()),
            ready: count(
                live.filter(|m| phase(m) == Some(MachinePhase::Running))
                    .count(),
            ),
        }
    }
}

/// The status of a MachineDeployment (`with_phase`) or MachineSet that wants `desired`.
fn replica_status(
    object: &DynamicObject,
    desired: i32,
    counts: Counts,
    with_phase: bool,
    time: &Time,
) -> Value {
    let generation = object.metadata.generation;
    let condition = |type_: &str, status: bool, reason: &str, message: String| {
        (type_.to_owned(), status, reason.to_owned(), message)
    };
    let (replicas, available) = (counts.replicas, counts.ready);
    let ours = [
        if available >= desired {
            condition("Available", true, "Available", String::new())
        } else {
            condition(
                "Available",
                false,
                "NotAvailable",
                format!("{available} available replicas, {desired} wanted"),
            )
        },
        if replicas < desired {
            condition(
                "ScalingUp",
                true,
                "ScalingUp",
                format!("Scaling up from {replicas} to {desired} replicas"),
            )
        } else {
            condition("ScalingUp", false, "NotScalingUp", String::new())
        },
        if replicas > desired {
            condition(
                "ScalingDown",
                true,
                "ScalingDown",
                format!("Scaling down from {replicas} to {desired} replicas"),
            )
        } else {
            condition("ScalingDown", false, "NotScalingDown", String::new())
        },
    ];
    let conditions = merge_conditions(object, &ours, generation, time);
    let mut status = json!({
        "replicas": replicas,
        "readyReplicas": counts.ready,
        "availableReplicas": available,
        "upToDateReplicas": replicas,
        "conditions": conditions,
    });
    let selector = selector_string(&object.data["spec"]["selector"]);
    if !selector.is_empty() {
        status["selector"] = selector.into();
    }
    if let Some(generation) = generation {
        status["observedGeneration"] = generation.into();
    }
    if with_phase {
        status["phase"] = match replicas.cmp(&desired) {
            std::cmp::Ordering::Less => "ScalingUp",
            std::cmp::Ordering::Equal => "Running",
            std::cmp::Ordering::Greater => "ScalingDown",
        }
        .into();
    }
    status
}

/// A label selector in the query-parameter form (`k=v,k2 in (a,b),!k3`), requirements sorted by
/// key, as `metav1.LabelSelectorAsSelector(...).String()` writes it.
fn selector_string(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = string_map(&selector["matchLabels"])
        .into_iter()
        .map(|(k, v)| (k.clone(), format!("{k}={v}")))
        .collect();
    for expression in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = expression["key"].as_str().unwrap_or_default();
        let mut values: Vec<&str> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let values = values.join(",");
        let text = match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        requirements.push((key.to_owned(), text));
    }
    requirements.sort();
    requirements
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join(",")
}

// ---------------------------------------------------------------------------------------------
// Machine

/// The phases the simulator writes (Cluster API's `MachinePhase`s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MachinePhase {
    Pending,
    Provisioning,
    Provisioned,
    Running,
    Deleting,
    Failed,
}

impl MachinePhase {
    fn as_str(self) -> &'static str {
        match self {
            MachinePhase::Pending => "Pending",
            MachinePhase::Provisioning => "Provisioning",
            MachinePhase::Provisioned => "Provisioned",
            MachinePhase::Running => "Running",
            MachinePhase::Deleting => "Deleting",
            MachinePhase::Failed => "Failed",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [
            MachinePhase::Pending,
            MachinePhase::Provisioning,
            MachinePhase::Provisioned,
            MachinePhase::Running,
            MachinePhase::Deleting,
            MachinePhase::Failed,
        ]
        .into_iter()
        .find(|p| p.as_str() == text)
    }
}

/// The next step of one Machine, if it is due (`in_phase`: how long it has been in its phase).
fn plan_machine(
    machine: &DynamicObject,
    config: &CapiSimConfig,
    in_phase: Duration,
    classes: &[NodeClass],
    time: &Time,
) -> Option<Write> {
    let due = in_phase >= config.step;
    let phase = phase(machine);
    let (machine_ns, machine_name) = (namespace(machine), name(machine));
    if deleting(machine) {
        let finalizers = machine.finalizers();
        if !finalizers.iter().any(|f| f == MACHINE_FINALIZER) {
            return None;
        }
        if phase != Some(MachinePhase::Deleting) {
            return Some(machine_status_write(
                machine,
                MachinePhase::Deleting,
                json!({}),
                time,
            ));
        }
        if !due {
            return None;
        }
        let node = machine.data["status"]["nodeRef"]["name"]
            .as_str()
            .unwrap_or(machine_name);
        return Some(Write::Release {
            namespace: machine_ns.to_owned(),
            name: machine_name.to_owned(),
            node: node.to_owned(),
            provider_id: provider_id(machine_name),
            resource_version: machine.resource_version().unwrap_or_default(),
            finalizers: finalizers
                .iter()
                .filter(|f| *f != MACHINE_FINALIZER)
                .cloned()
                .collect(),
        });
    }
    let deployment = deployment_key(machine);
    let in_set = |set: &HashSet<String>| deployment.as_ref().is_some_and(|d| set.contains(d));
    let failing = in_set(&config.failing)
        || class_of(machine, classes)
            .is_some_and(|c| config.failing_classes.contains(&c.name_any()));
    match phase {
        None if machine.data["status"]["phase"].is_null() => Some(machine_status_write(
            machine,
            MachinePhase::Pending,
            json!({}),
            time,
        )),
        Some(MachinePhase::Pending) if due => Some(machine_status_write(
            machine,
            MachinePhase::Provisioning,
            json!({"initialization": {"bootstrapDataSecretCreated": true}}),
            time,
        )),
        Some(MachinePhase::Provisioning) if due && in_set(&config.stalled) => None,
        Some(MachinePhase::Provisioning) if due && failing => {
            let message = format!(
                "the provider could not deliver a machine for MachineDeployment {} \
                 (simulated failure)",
                deployment.as_deref().unwrap_or_default()
            );
            Some(machine_status_write_failed(machine, &message, time))
        }
        Some(MachinePhase::Provisioning) if due => Some(Write::Provision {
            namespace: machine_ns.to_owned(),
            name: machine_name.to_owned(),
            uid: uid(machine).to_owned(),
            provider_id: provider_id(machine_name),
            status: machine_status(
                machine,
                MachinePhase::Provisioned,
                None,
                json!({"initialization": {"infrastructureProvisioned": true}}),
                time,
            ),
        }),
        Some(MachinePhase::Provisioned) if due => {
            let allocatable = allocatable_for(machine, config, classes);
            let node = node_for(machine, allocatable, time);
            let node_info = node
                .status
                .as_ref()
                .and_then(|s| s.node_info.as_ref())
                .and_then(|i| serde_json::to_value(i).ok())
                .unwrap_or(Value::Null);
            let status = machine_status(
                machine,
                MachinePhase::Running,
                None,
                json!({"nodeRef": {"name": machine_name}, "nodeInfo": node_info}),
                time,
            );
            Some(Write::Register {
                namespace: machine_ns.to_owned(),
                name: machine_name.to_owned(),
                uid: uid(machine).to_owned(),
                node: Box::new(node),
                status,
            })
        }
        _ => None,
    }
}

fn provider_id(machine: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{machine}")
}

/// `namespace/name` of the Machine's MachineDeployment, from its label.
fn deployment_key(machine: &DynamicObject) -> Option<String> {
    machine
        .labels()
        .get(DEPLOYMENT_NAME_LABEL)
        .map(|md| format!("{}/{md}", namespace(machine)))
}

fn machine_status_write(
    machine: &DynamicObject,
    phase: MachinePhase,
    extra: Value,
    time: &Time,
) -> Write {
    Write::Status {
        kind: CapiKind::Machine,
        namespace: namespace(machine).to_owned(),
        name: name(machine).to_owned(),
        status: machine_status(machine, phase, None, extra, time),
        phase: Some((uid(machine).to_owned(), phase)),
    }
}

fn machine_status_write_failed(machine: &DynamicObject, message: &str, time: &Time) -> Write {
    let extra = json!({"deprecated": {"v1beta1": {
        "failureReason": "CreateError",
        "failureMessage": message,
    }}});
    Write::Status {
        kind: CapiKind::Machine,
        namespace: namespace(machine).to_owned(),
        name: name(machine).to_owned(),
        status: machine_status(machine, MachinePhase::Failed, Some(message), extra, time),
        phase: Some((uid(machine).to_owned(), MachinePhase::Failed)),
    }
}

/// A Machine's status in `phase`: the phase, `lastUpdated`, `observedGeneration`, the v1beta2
/// conditions of that phase, and `extra` merged in.
fn machine_status(
    machine: &DynamicObject,
    phase: MachinePhase,
    failure: Option<&str>,
    extra: Value,
    time: &Time,
) -> Value {
    let generation = machine.metadata.generation;
    let ours = machine_conditions(phase, failure, name(machine));
    let conditions = merge_conditions(machine, &ours, generation, time);
    let mut status = json!({
        "phase": phase.as_str(),
        "lastUpdated": time,
        "conditions": conditions,
    });
    if let Some(generation) = generation {
        status["observedGeneration"] = generation.into();
    }
    if let (Some(status), Value::Object(extra)) = (status.as_object_mut(), extra) {
        status.extend(extra);
    }
    status
}

/// A condition to set: type, status (`Some(true)` True, `Some(false)` False, `None` Unknown),
/// reason, message.
type Ours = (String, Option<bool>, String, String);

/// The conditions the simulator sets on a Machine in `phase` (a Deleting Machine keeps the
/// others it had).
fn machine_conditions(phase: MachinePhase, failure: Option<&str>, machine: &str) -> Vec<Ours> {
    let c = |type_: &str, status: Option<bool>, reason: &str, message: &str| -> Ours {
        (type_.into(), status, reason.into(), message.into())
    };
    let failure = failure.unwrap_or_default();
    if phase == MachinePhase::Deleting {
        return vec![
            c("Ready", Some(false), "NotReady", "Machine is being deleted"),
            c("Available", Some(false), "NotReady", ""),
            c(
                "Deleting",
                Some(true),
                "Deleting",
                "Machine is being deleted (simulated)",
            ),
        ];
    }
    let running = phase == MachinePhase::Running;
    let waiting_for_node =
        format!("Waiting for a Node with spec.providerID {PROVIDER_ID_PREFIX}{machine}");
    let node = |type_: &str, reason: &str| {
        if running {
            c(type_, Some(true), reason, "")
        } else {
            c(type_, None, "NodeDoesNotExist", &waiting_for_node)
        }
    };
    vec![
        if phase == MachinePhase::Pending {
            c(
                "BootstrapConfigReady",
                Some(false),
                "NotReady",
                "Waiting for the bootstrap data (simulated)",
            )
        } else {
            c("BootstrapConfigReady", Some(true), "Ready", "")
        },
        match phase {
            MachinePhase::Provisioned | MachinePhase::Running => {
                c("InfrastructureReady", Some(true), "Ready", "")
            }
            MachinePhase::Failed => c("InfrastructureReady", Some(false), "NotReady", failure),
            _ => c(
                "InfrastructureReady",
                Some(false),
                "NotReady",
                "Waiting for the machine to be provisioned (simulated)",
            ),
        },
        node("NodeReady", "NodeReady"),
        node("NodeHealthy", "NodeHealthy"),
        if running {
            c("Ready", Some(true), "Ready", "")
        } else {
            c("Ready", Some(false), "NotReady", failure)
        },
        if running {
            c("Available", Some(true), "Available", "")
        } else {
            c("Available", Some(false), "NotReady", "")
        },
        c("UpToDate", Some(true), "UpToDate", ""),
        c("Deleting", Some(false), "NotDeleting", ""),
    ]
}

/// The object's conditions with `ours` set (each keeping its transition time while its status
/// stays), others kept in place.
fn merge_conditions<T: Into<Option<bool>> + Clone>(
    object: &DynamicObject,
    ours: &[(String, T, String, String)],
    generation: Option<i64>,
    time: &Time,
) -> Vec<Condition> {
    let mut conditions: Vec<Condition> =
        serde_json::from_value(object.data["status"]["conditions"].clone()).unwrap_or_default();
    for (type_, status, reason, message) in ours {
        let status = match status.clone().into() {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        };
        let condition = Condition::keeping_time(
            &conditions,
            type_,
            status,
            reason,
            message.clone(),
            generation,
            time,
        );
        match conditions.iter_mut().find(|c| c.type_ == *type_) {
            Some(existing) => *existing = condition,
            None => conditions.push(condition),
        }
    }
    conditions
}

/// What the Machine's Node offers: the override, else its class's capacity, else pods only.
fn allocatable_for(
    machine: &DynamicObject,
    config: &CapiSimConfig,
    classes: &[NodeClass],
) -> BTreeMap<String, Quantity> {
    let deployment = deployment_key(machine);
    if let Some(given) = deployment.as_ref().and_then(|d| config.allocatable.get(d)) {
        return given
            .iter()
            .map(|(k, v)| (k.clone(), Quantity(v.clone())))
            .collect();
    }
    let class = class_of(machine, classes);
    let mut allocatable = BTreeMap::from([("pods".to_owned(), Quantity(PODS_PER_NODE.into()))]);
    if let Some(class) = class {
        let capacity = &class.spec.capacity;
        allocatable.insert("cpu".into(), Quantity(capacity.threads.to_string()));
        allocatable.insert(
            "memory".into(),
            Quantity(format!("{}Gi", capacity.memory_gb)),
        );
        allocatable.insert(
            "ephemeral-storage".into(),
            Quantity(format!("{}Gi", capacity.storage_gb)),
        );
    }
    allocatable
}

/// The NodeClass whose `spec.clusterAPI.machineDeployment` is the Machine's.
fn class_of<'a>(machine: &DynamicObject, classes: &'a [NodeClass]) -> Option<&'a NodeClass> {
    let md_name = machine.labels().get(DEPLOYMENT_NAME_LABEL);
    classes.iter().find(|c| {
        c.spec.cluster_api.as_ref().is_some_and(|source| {
            let md = &source.machine_deployment;
            md.namespace == namespace(machine) && Some(&md.name) == md_name
        })
    })
}

/// The core Node a Running Machine becomes: what the kubelet registers, with what Cluster API
/// puts on it.
fn node_for(
    machine: &DynamicObject,
    allocatable: BTreeMap<String, Quantity>,
    time: &Time,
) -> CoreNode {
    let machine_name = name(machine);
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), machine_name.to_owned()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
    ]);
    labels.extend(
        machine
            .labels()
            .iter()
            .filter(|(k, _)| managed_label(k))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let cluster = machine.data["spec"]["clusterName"]
        .as_str()
        .unwrap_or_default();
    let mut annotations = BTreeMap::from([
        (
            "cluster.x-k8s.io/cluster-name".to_owned(),
            cluster.to_owned(),
        ),
        (
            "cluster.x-k8s.io/cluster-namespace".to_owned(),
            namespace(machine).to_owned(),
        ),
        (
            "cluster.x-k8s.io/machine".to_owned(),
            machine_name.to_owned(),
        ),
    ]);
    if let Some(owner) = controller_of(machine) {
        annotations.insert("cluster.x-k8s.io/owner-kind".into(), owner.kind.clone());
        annotations.insert("cluster.x-k8s.io/owner-name".into(), owner.name.clone());
    }
    let kubelet_version = machine.data["spec"]["version"]
        .as_str()
        .unwrap_or(DEFAULT_KUBELET_VERSION);
    CoreNode {
        metadata: ObjectMeta {
            name: Some(machine_name.to_owned()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(CoreNodeSpec {
            provider_id: Some(provider_id(machine_name)),
            ..CoreNodeSpec::default()
        }),
        status: Some(CoreNodeStatus {
            capacity: Some(allocatable.clone()),
            allocatable: Some(allocatable),
            addresses: Some(vec![NodeAddress {
                type_: "Hostname".into(),
                address: machine_name.to_owned(),
            }]),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                message: Some("kubelet is posting ready status (simulated)".into()),
                last_heartbeat_time: Some(time.clone()),
                last_transition_time: Some(time.clone()),
            }]),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".into(),
                container_runtime_version: "containerd://2.1.0".into(),
                kernel_version: "6.8.0-simulated".into(),
                kubelet_version: kubelet_version.into(),
                operating_system: "linux".into(),
                os_image: "Ubuntu 24.04 LTS (simulated)".into(),
                machine_id: machine_name.into(),
                system_uuid: uid(machine).into(),
                boot_id: uid(machine).into(),
                ..NodeSystemInfo::default()
            }),
            ..CoreNodeStatus::default()
        }),
    }
}

/// Whether Cluster API copies a Machine label to its Node: the `node-role.kubernetes.io`
/// prefix, and the `node-restriction.kubernetes.io` and `node.cluster.x-k8s.io` domains.
fn managed_label(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    let in_domain = |d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    domain == "node-role.kubernetes.io"
        || in_domain("node-restriction.kubernetes.io")
        || in_domain("node.cluster.x-k8s.io")
}

// ---------------------------------------------------------------------------------------------
// Garbage collection

/// MachineSets whose MachineDeployment, and Machines whose MachineSet, is not listed.
fn orphans(world: &World) -> Vec<Write> {
    let mut writes = Vec::new();
    let mut collect = |kind: CapiKind,
                       objects: &[DynamicObject],
                       owner_kind: CapiKind,
                       owners: &[DynamicObject]| {
        for object in objects.iter().filter(|o| !deleting(o)) {
            let Some(owner) = controller_of(object).filter(|o| o.kind == owner_kind.kind()) else {
                continue;
            };
            if owners.iter().any(|o| uid(o) == owner.uid) {
                continue;
            }
            writes.push(Write::Collect {
                kind,
                namespace: namespace(object).to_owned(),
                name: name(object).to_owned(),
                uid: uid(object).to_owned(),
                owner_kind,
                owner: owner.clone(),
            });
        }
    };
    collect(
        CapiKind::MachineSet,
        &world.sets,
        CapiKind::MachineDeployment,
        &world.deployments,
    );
    collect(
        CapiKind::Machine,
        &world.machines,
        CapiKind::MachineSet,
        &world.sets,
    );
    writes
}

// ---------------------------------------------------------------------------------------------
// Reading objects

fn name(object: &DynamicObject) -> &str {
    object.metadata.name.as_deref().unwrap_or_default()
}

fn namespace(object: &DynamicObject) -> &str {
    object.metadata.namespace.as_deref().unwrap_or("default")
}

fn uid(object: &DynamicObject) -> &str {
    object.metadata.uid.as_deref().unwrap_or_default()
}

fn deleting(object: &DynamicObject) -> bool {
    object.metadata.deletion_timestamp.is_some()
}

fn phase(machine: &DynamicObject) -> Option<MachinePhase> {
    machine.data["status"]["phase"]
        .as_str()
        .and_then(MachinePhase::parse)
}

fn controller_of(object: &DynamicObject) -> Option<&OwnerReference> {
    object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// Whether `owner` is `object`'s controller (by uid, as `metav1.IsControlledBy`).
fn controlled_by(object: &DynamicObject, owner: &DynamicObject) -> bool {
    controller_of(object).is_some_and(|r| !r.uid.is_empty() && r.uid == uid(owner))
}

fn controller_reference(kind: CapiKind, owner: &DynamicObject) -> OwnerReference {
    OwnerReference {
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.kind().to_owned(),
        name: name(owner).to_owned(),
        uid: uid(owner).to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A JSON object of strings (labels, annotations) as a sorted map; anything else is empty.
fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

/// A merge patch of `object`'s main resource.
fn spec_write(kind: CapiKind, object: &DynamicObject, patch: Value) -> Write {
    Write::Spec {
        kind,
        namespace: namespace(object).to_owned(),
        name: name(object).to_owned(),
        patch,
    }
}

/// `status` written to `object` unless every field of it already holds that value.
fn status_write(kind: CapiKind, object: &DynamicObject, status: Value) -> Option<Write> {
    let current = &object.data["status"];
    let unchanged = status
        .as_object()
        .is_some_and(|s| s.iter().all(|(k, v)| current.get(k) == Some(v)));
    (!unchanged).then(|| Write::Status {
        kind,
        namespace: namespace(object).to_owned(),
        name: name(object).to_owned(),
        status,
        phase: None,
    })
}

/// Five characters of a generated name, as the apiserver's `generateName` makes them.
fn suffix(rng: &mut fastrand::Rng) -> String {
    (0..SUFFIX_LEN)
        .filter_map(|_| NAME_ALPHABET.get(rng.usize(..NAME_ALPHABET.len())))
        .map(|b| char::from(*b))
        .collect()
}

#[cfg(test)]
mod tests;
