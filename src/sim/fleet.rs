//! An in-process fleet: the in-memory API with both CRDs installed, the real controller running
//! against it through a real `kube::Client`, and helpers to apply manifests, wait until the
//! controller is quiet, and read the objects back. `simulate` and the integration tests use it.
//!
//! Rules enforced here:
//! - manifests go through the API as a client's requests would (POST, or a merge patch of `spec`
//!   when the object exists), so the server validates them as a real one does;
//! - "quiet" means: no write of a Tenant or Node for the idle window, every Tenant's status describes its current
//!   generation, no Tenant is terminating, and every Node has a status; of a pooled controller
//!   (`--node-selector`, `--tenant-selector`), only the pool's Tenants and Nodes are waited for.
//!   With `--register-nodes`, also every core Node it takes whose allocatable can be read has a
//!   placement Node of its name, registered ones in step with its capacity and state;
//! - a core `v1` Node (`apiVersion: v1`, `kind: Node`) is applied as a kubelet would report it:
//!   created with its status, or its labels, spec and status patched when it exists.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use inmem_apiserver::ApiServer;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::Value;
use tokio::task::JoinHandle;

use k8s_openapi::api::core::v1::Node as CoreNode;

use super::capi;
use crate::api::{
    GROUP, LabelSelector, Node, NodeClass, NodeRequest, NodeRequestPhase, Registration, Tenant,
};
use crate::controller::{self, Settings};

/// `namespace/name`, or `name` for a cluster-scoped object.
fn name_of(object: &Value) -> String {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

/// Who turns NodeRequests into Nodes in-process, in the controller's place as a cluster's
/// provisioner would.
#[derive(Clone, Debug)]
pub enum Simulated {
    /// The provisioner contract, played directly (`--provisioner simulated`).
    Contract(super::provisioner::ProvisionerConfig),
    /// Cluster API, simulated, for the controller's `--provisioner cluster-api`.
    ClusterApi(capi::CapiSimConfig),
}

/// Why a fleet could not be set up, fed or settled.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("installing the {crd} CRD: {message}")]
    InstallCrd { crd: String, message: String },
    #[error("{kind} {name}: the API refused it: {source}")]
    Apply {
        kind: String,
        name: String,
        source: kube::Error,
    },
    #[error(
        "{kind} {name}: simulate knows Node (placement and core v1), Tenant, NodeClass, Namespace and Cluster API's MachineDeployment objects only"
    )]
    UnknownKind { kind: String, name: String },
    #[error("the controller did not go quiet within {0:?}; the last writes: {1}")]
    NotQuiet(Duration, String),
}

/// How many of the last placement writes a fleet keeps to say what keeps writing.
const LAST_WRITES_KEPT: usize = 24;

/// The in-memory API plus (when started) the controller running against it.
pub struct Fleet {
    pub api: ApiServer,
    pub client: Client,
    /// The running controller and what cuts its connection to the API.
    controller: Mutex<Option<(JoinHandle<()>, inmem_apiserver::Cut)>>,
    /// The simulated provisioner, when one runs.
    provisioner: Mutex<Option<JoinHandle<()>>>,
    /// Committed writes of Tenants and Nodes (not Leases or Events, which move on their own).
    placement_writes: Arc<AtomicU64>,
    /// The last of those writes (`resource/name`), so that a fleet that does not go quiet says
    /// what keeps writing.
    last_writes: Arc<Mutex<std::collections::VecDeque<String>>>,
    /// The pool of the controller last started (its node and tenant selectors): what it is
    /// expected to catch up with.
    pool: Mutex<(Option<LabelSelector>, Option<LabelSelector>)>,
    /// The core Nodes the controller last started registers (`--register-nodes`).
    registers: Mutex<Option<LabelSelector>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").finish_non_exhaustive()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop();
        let provisioner = self
            .provisioner
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(task) = provisioner.take() {
            task.abort();
        }
    }
}

/// Kills a controller: its connection cut first, so that nothing it has under way lands.
fn stop((task, cut): (JoinHandle<()>, inmem_apiserver::Cut)) {
    cut.cut();
    task.abort();
}

impl Fleet {
    /// An empty API with the CRDs installed.
    pub fn new() -> Result<Fleet, FleetError> {
        Fleet::with_api(ApiServer::new())
    }

    /// Installs the CRDs into a given API (e.g. one with a custom history size).
    pub fn with_api(api: ApiServer) -> Result<Fleet, FleetError> {
        for crd in [
            Tenant::crd(),
            Node::crd(),
            NodeClass::crd(),
            NodeRequest::crd(),
        ] {
            let name = crd.name_any();
            let json = serde_json::to_value(&crd).map_err(|e| FleetError::InstallCrd {
                crd: name.clone(),
                message: e.to_string(),
            })?;
            api.install_crd(json)
                .map_err(|status| FleetError::InstallCrd {
                    crd: name,
                    message: status.message.clone(),
                })?;
        }
        let placement_writes = Arc::new(AtomicU64::new(0));
        let counter = placement_writes.clone();
        let last_writes: Arc<Mutex<std::collections::VecDeque<String>>> = Arc::default();
        let last = last_writes.clone();
        api.on_commit(move |commit| {
            if commit.group == GROUP {
                counter.fetch_add(1, Ordering::SeqCst);
                let mut last = last.lock().unwrap_or_else(PoisonError::into_inner);
                if last.len() >= LAST_WRITES_KEPT {
                    last.pop_front();
                }
                last.push_back(format!(
                    "{} {}/{}",
                    commit.resource_version, commit.resource, commit.name
                ));
            }
        });
        let client = Client::new(api.clone(), "default");
        Ok(Fleet {
            api,
            client,
            controller: Mutex::default(),
            provisioner: Mutex::default(),
            placement_writes,
            last_writes,
            pool: Mutex::default(),
            registers: Mutex::default(),
        })
    }

    /// Does what the chart's MutatingAdmissionPolicies do on a cluster of Kubernetes 1.36 or
    /// later: the API server puts the Node finalizer, and (when the controller uses one) the
    /// Tenant finalizer, on every object it creates, so the controller spends no write on them.
    pub fn admit_finalizers(&self, tenants: bool) {
        self.api
            .add_finalizer_on_create(GROUP, "nodes", crate::api::NODE_FINALIZER);
        if tenants {
            self.api
                .add_finalizer_on_create(GROUP, "tenants", crate::api::TENANT_FINALIZER);
        }
    }

    /// Starts the real controller run loop; a running one is stopped first (a restart).
    pub fn start(&self, settings: Settings) {
        self.start_with(settings, controller::Handles::default());
    }

    /// [`Fleet::start`], reporting readiness, metrics and its caches into `handles`.
    pub fn start_with(&self, settings: Settings, handles: controller::Handles) {
        *self.pool.lock().unwrap_or_else(PoisonError::into_inner) =
            (settings.pool_nodes.clone(), settings.pool_tenants.clone());
        *self
            .registers
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = settings.register_nodes.clone();
        // A connection of its own, cut when it stops: a killed process's requests never land
        // after its successor started, whatever its tasks were doing.
        let (connection, cut) = self.api.connection();
        let client = Client::new(connection, "default");
        let task = tokio::spawn(controller::run_with(client, settings, handles));
        let mut slot = self
            .controller
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(previous) = slot.replace((task, cut)) {
            stop(previous);
        }
    }

    /// Starts a simulated provisioner (another actor than the controller); a running one is
    /// replaced. Cluster API's CRDs are installed first when it plays Cluster API.
    pub async fn start_provisioner(&self, provisioner: Simulated) -> Result<(), FleetError> {
        let task = match provisioner {
            Simulated::Contract(config) => {
                tokio::spawn(super::provisioner::run(self.client.clone(), config))
            }
            Simulated::ClusterApi(config) => {
                capi::install_crds(&self.client)
                    .await
                    .map_err(|e| FleetError::InstallCrd {
                        crd: format!("Cluster API ({})", capi::GROUP),
                        message: e.to_string(),
                    })?;
                tokio::spawn(capi::run(self.client.clone(), config))
            }
        };
        let mut slot = self
            .provisioner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(previous) = slot.replace(task) {
            previous.abort();
        }
        Ok(())
    }

    /// Stops the controller at once, wherever it is (as a crash would).
    pub fn stop(&self) {
        let mut slot = self
            .controller
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = slot.take() {
            stop(running);
        }
    }

    /// Creates each object, or merge-patches the `spec` of one that exists.
    pub async fn apply(&self, objects: &[Value]) -> Result<(), FleetError> {
        for object in objects {
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default");
            if kind == "Node" && object["apiVersion"] == "v1" {
                self.apply_core_node(object).await?;
                continue;
            }
            let machine_deployment = object["apiVersion"]
                .as_str()
                .and_then(|v| v.strip_prefix(capi::GROUP)?.strip_prefix('/'))
                .filter(|_| kind == capi::CapiKind::MachineDeployment.kind());
            let (resource, namespaced) = match (kind.as_str(), machine_deployment) {
                (_, Some(version)) => (
                    capi::CapiKind::MachineDeployment.api_resource_at(version),
                    true,
                ),
                ("Tenant", _) => (ApiResource::erase::<Tenant>(&()), true),
                ("Node", _) => (ApiResource::erase::<Node>(&()), false),
                ("NodeClass", _) => (ApiResource::erase::<NodeClass>(&()), false),
                ("Namespace", _) => (
                    ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
                    false,
                ),
                _ => return Err(FleetError::UnknownKind { kind, name }),
            };
            let api: Api<DynamicObject> = if namespaced {
                Api::namespaced_with(self.client.clone(), namespace, &resource)
            } else {
                Api::all_with(self.client.clone(), &resource)
            };
            let refused = |source| FleetError::Apply {
                kind: kind.clone(),
                name: name.clone(),
                source,
            };
            let typed: DynamicObject = serde_json::from_value(object.clone())
                .map_err(|e| refused(kube::Error::SerdeError(e)))?;
            match api.create(&PostParams::default(), &typed).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.is_already_exists() => {
                    let spec = serde_json::json!({"spec": object.get("spec").cloned().unwrap_or(Value::Null)});
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&spec))
                        .await
                        .map_err(refused)?;
                }
                Err(source) => return Err(refused(source)),
            }
        }
        Ok(())
    }

    /// Creates a core Node with its status, as a kubelet registers one, or patches the labels,
    /// spec and status of the one that exists.
    async fn apply_core_node(&self, object: &Value) -> Result<(), FleetError> {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let refused = |source| FleetError::Apply {
            kind: "Node".into(),
            name: name.clone(),
            source,
        };
        let api: Api<CoreNode> = Api::all(self.client.clone());
        let node: CoreNode = serde_json::from_value(object.clone())
            .map_err(|e| refused(kube::Error::SerdeError(e)))?;
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(source) => return Err(refused(source)),
        }
        let main = serde_json::json!({
            "metadata": {"labels": object["metadata"].get("labels").cloned().unwrap_or(Value::Null)},
            "spec": object.get("spec").cloned().unwrap_or(Value::Null),
        });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&main))
            .await
            .map_err(refused)?;
        if let Some(status) = object.get("status") {
            let status = serde_json::json!({"status": status});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .map_err(refused)?;
        }
        Ok(())
    }

    /// The core Nodes, as stored.
    pub fn core_nodes(&self) -> Vec<CoreNode> {
        self.typed(&self.api.list("", "nodes"))
    }

    /// The Nodes, as stored.
    pub fn nodes(&self) -> Vec<Node> {
        self.typed(&self.api.list(GROUP, "nodes"))
    }

    /// The Tenants, as stored.
    pub fn tenants(&self) -> Vec<Tenant> {
        self.typed(&self.api.list(GROUP, "tenants"))
    }

    /// The objects of either kind the types cannot hold, as `Tenant default/bad: spec.replicas: …`.
    pub fn undecodable(&self) -> Vec<String> {
        let mut found = self.undecodable_of::<Tenant>("tenants");
        found.extend(self.undecodable_of::<Node>("nodes"));
        found
    }

    fn undecodable_of<K>(&self, plural: &str) -> Vec<String>
    where
        K: serde::de::DeserializeOwned + kube::Resource<DynamicType = ()>,
    {
        self.api
            .list(GROUP, plural)
            .iter()
            .filter_map(|value| {
                let error = serde_path_to_error::deserialize::<_, K>(value).err()?;
                Some(format!(
                    "{} {}: {}: {}",
                    K::kind(&()),
                    name_of(value),
                    error.path(),
                    error.inner()
                ))
            })
            .collect()
    }

    /// The objects the types can hold; [`Fleet::undecodable`] names the others.
    fn typed<K: serde::de::DeserializeOwned>(&self, values: &[Value]) -> Vec<K> {
        values
            .iter()
            .filter_map(|v| serde_json::from_value(v.clone()).ok())
            .collect()
    }

    /// True when the controller has caught up with every object (see the module rules).
    pub fn caught_up(&self) -> bool {
        let (node_pool, tenant_pool) = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let within = |pool: &Option<LabelSelector>,
                      labels: &std::collections::BTreeMap<String, String>| {
            pool.as_ref().is_none_or(|p| p.matches(labels))
        };
        let tenants_done = self
            .tenants()
            .iter()
            .filter(|t| within(&tenant_pool, t.labels()))
            .all(|t| {
                t.metadata.deletion_timestamp.is_none()
                    && t.status
                        .as_ref()
                        .is_some_and(|s| s.observed_generation == t.metadata.generation)
            });
        tenants_done
            && self
                .nodes()
                .iter()
                .filter(|n| within(&node_pool, n.labels()))
                .all(|n| n.status.is_some())
            && self.machines_delivered()
            && self.registered()
    }

    /// With registration on, every core Node it takes whose allocatable can be read has a
    /// placement Node of its name (one it did not register is a clash, reported and left), a
    /// registered one with the capacity and state the core Node gives.
    fn registered(&self) -> bool {
        let Some(selector) = self
            .registers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return true;
        };
        let nodes = self.nodes();
        self.core_nodes()
            .iter()
            .filter(|core| {
                core.metadata.deletion_timestamp.is_none() && selector.matches(core.labels())
            })
            .all(|core| {
                let Ok(wanted) = Registration::of(core) else {
                    return true;
                };
                let name = core.name_any();
                nodes
                    .iter()
                    .find(|n| n.name_any() == name)
                    .is_some_and(|n| {
                        !n.is_registered()
                            || (n.spec.capacity == wanted.capacity
                                && n.spec.state == wanted.state_over(n.spec.state))
                    })
            })
    }

    /// With a simulated provisioner running, no machine is still coming (a request Pending or
    /// Provisioning): its delay writes nothing, and is not quiet.
    fn machines_delivered(&self) -> bool {
        let provisioning = self
            .provisioner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        !provisioning
            || self
                .typed::<NodeRequest>(&self.api.list(GROUP, "noderequests"))
                .iter()
                .all(|r| {
                    matches!(
                        r.phase(),
                        NodeRequestPhase::Ready | NodeRequestPhase::Failed
                    )
                })
    }

    /// Waits until nothing was written for `idle` and the controller has caught up.
    pub async fn settle(&self, idle: Duration, timeout: Duration) -> Result<(), FleetError> {
        let started = Instant::now();
        let writes = || self.placement_writes.load(Ordering::SeqCst);
        let mut last = writes();
        let mut unchanged_since = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = writes();
            if now != last {
                last = now;
                unchanged_since = Instant::now();
            } else if unchanged_since.elapsed() >= idle && self.caught_up() {
                return Ok(());
            }
            if started.elapsed() > timeout {
                let last = self
                    .last_writes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(FleetError::NotQuiet(timeout, last));
            }
        }
    }
}
