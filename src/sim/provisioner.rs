//! A simulated provisioner: it plays the part of the provisioner contract
//! (docs/node-requests.md) for `simulate` and `sandbox` (`--provisioner simulated`), against any API.
//!
//! ```text
//!   NodeRequest (no status) ──▶ Provisioning ──after the delay──▶ Node created ──▶ Ready (nodeName)
//!                                            └─ class in `failing` ──────────▶ Failed (message)
//!   NodeRequest deleted ──▶ its Node deleted (the Node's finalizer keeps it while it holds
//!                           reservations: its tenants are moved off first)
//! ```
//!
//! Rules it keeps, as a real provisioner must:
//! - the Node it makes is named after the request, has the class's capacity and labels, and the
//!   labels [`NODE_REQUEST_LABEL`] and [`crate::api::NODE_CLASS_LABEL`];
//! - it only writes a request's status (never its spec), and creates a Node at most once per
//!   request (an existing Node of that name is taken as made);
//! - a request that is gone (deleted by the controller to hand the machine back) has its Node
//!   deleted; the Node goes once its finalizer is removed, i.e. once it holds nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::api::{NODE_REQUEST_LABEL, Node, NodeClass, NodeRequest, NodeRequestPhase};

/// How the simulated provisioner behaves.
#[derive(Clone, Debug, Default)]
pub struct ProvisionerConfig {
    /// From taking a request up to its Node existing.
    pub delay: Duration,
    /// Classes whose requests fail (to try the controller's retry).
    pub failing: HashSet<String>,
    /// How often it looks at the requests.
    pub every: Duration,
    /// Classes whose machines come up with less than the class promises, and what they have:
    /// the Node reports that capacity (as a kubelet's allocatable is less than the hardware).
    pub short: HashMap<String, crate::api::ResourceAmounts>,
}

/// Runs until the task is dropped. Errors are logged and retried at the next look.
pub async fn run(client: Client, config: ProvisionerConfig) {
    let mut started: HashMap<String, Instant> = HashMap::new();
    let every = config.every.max(Duration::from_millis(10));
    loop {
        if let Err(error) = look(&client, &config, &mut started).await {
            tracing::debug!(%error, "simulated provisioner: will look again");
        }
        tokio::time::sleep(every).await;
    }
}

/// One look at every request and every Node made for one.
async fn look(
    client: &Client,
    config: &ProvisionerConfig,
    started: &mut HashMap<String, Instant>,
) -> Result<(), kube::Error> {
    let requests_api: Api<NodeRequest> = Api::all(client.clone());
    let nodes_api: Api<Node> = Api::all(client.clone());
    let classes: BTreeMap<String, NodeClass> = Api::<NodeClass>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .into_iter()
        .map(|c| (c.name_any(), c))
        .collect();
    let requests = requests_api.list(&ListParams::default()).await?.items;
    let live: HashSet<String> = requests
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .map(ResourceExt::name_any)
        .collect();
    started.retain(|name, _| live.contains(name));
    for request in &requests {
        let name = request.name_any();
        if !live.contains(&name) {
            continue;
        }
        match request.phase() {
            NodeRequestPhase::Pending => {
                let class = classes.get(&request.spec.node_class);
                let provider = class.map(|c| c.spec.provider.as_str()).unwrap_or("?");
                let message = format!(
                    "buying a {} from {provider} (simulated, {} ms)",
                    request.spec.node_class,
                    config.delay.as_millis()
                );
                set_status(&requests_api, &name, "Provisioning", "", &message).await?;
                started.insert(name, Instant::now());
            }
            NodeRequestPhase::Provisioning => {
                let since = *started.entry(name.clone()).or_insert_with(Instant::now);
                if since.elapsed() < config.delay {
                    continue;
                }
                if config.failing.contains(&request.spec.node_class) {
                    let message = format!(
                        "the provider could not deliver a {} (simulated failure)",
                        request.spec.node_class
                    );
                    set_status(&requests_api, &name, "Failed", "", &message).await?;
                    continue;
                }
                let mut node = request.node(classes.get(&request.spec.node_class));
                if let Some(short) = config.short.get(&request.spec.node_class) {
                    node.spec.capacity = *short;
                }
                match nodes_api.create(&PostParams::default(), &node).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.is_already_exists() => {}
                    Err(error) => return Err(error),
                }
                let message = format!("Node {name} is up");
                set_status(&requests_api, &name, "Ready", &name, &message).await?;
            }
            NodeRequestPhase::Ready | NodeRequestPhase::Failed => {}
        }
    }
    // Machines handed back: their request is gone (or going).
    let made = nodes_api
        .list(&ListParams::default().labels(NODE_REQUEST_LABEL))
        .await?;
    for node in made {
        let request = node.labels().get(NODE_REQUEST_LABEL).cloned();
        let handed_back = request.is_some_and(|r| !live.contains(&r));
        if handed_back && node.metadata.deletion_timestamp.is_none() {
            match nodes_api
                .delete(&node.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {
                    tracing::info!(node = %node.name_any(), "simulated provisioner: machine handed back")
                }
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(error) => return Err(error),
            }
        }
    }
    Ok(())
}

async fn set_status(
    api: &Api<NodeRequest>,
    name: &str,
    phase: &str,
    node: &str,
    message: &str,
) -> Result<(), kube::Error> {
    let patch = json!({"status": {"phase": phase, "nodeName": node, "message": message}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
}
