//! The watch caches a look reads, as the other loops read theirs: no look lists anything.
//!
//! ```text
//!   NodeClasses, NodeRequests ─▶ the capacity tick's caches (node requests on), else its own
//!   placement Nodes with NODE_REQUEST_LABEL (metadata) ─▶ Store ──────────────┐
//!   per deployment looked at: its Machines (namespace, deployment-name=) ─▶ Store ─┴─▶ look
//! ```
//!
//! Rules enforced here:
//! - each watch is scoped as the list it replaces was: placement Nodes by the request label,
//!   metadata only; a deployment's Machines by its namespace and `cluster.x-k8s.io/deployment-name`
//!   label. A deployment's Machine watch runs while the deployment is looked at and Cluster API
//!   is served (never against a cluster without its kinds), and goes with it;
//! - a look starts once the class, request and Node caches hold their first list; a deployment's
//!   steps wait for its Machines' first list (its classes' condition is said meanwhile);
//! - the caches keep only what a look reads: of a Machine its name, times, status and the claim
//!   and `delete-machine` annotations; of a placement Node its name, deletion and the Machine it
//!   records. The MachineDeployment stays a direct read: its resourceVersion guards the scale, and
//!   its replicas and generation are what a raise is decided and recorded from.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};

use super::super::state::{Synced, strip};
use crate::api::capi::{
    CLAIM_ANNOTATION, DELETE_MACHINE_ANNOTATION, DEPLOYMENT_NAME_LABEL, MACHINE_ANNOTATION, Machine,
};
use crate::api::{NODE_REQUEST_LABEL, NamespacedName, Node, NodeClass, NodeRequest};
use crate::leader::AbortOnDrop;

/// A watch cache and whether it holds its first list.
pub type Cached<K> = (Store<K>, Synced);

/// The NodeClass and NodeRequest caches a look reads.
pub type ClassesAndRequests = (Cached<NodeClass>, Cached<NodeRequest>);

/// A placement Node as the look keeps it: metadata only.
pub type NodeMeta = PartialObjectMeta<Node>;

/// What the looks read from, and the watches the loop runs itself.
pub struct Reads {
    pub classes: Cached<NodeClass>,
    pub requests: Cached<NodeRequest>,
    /// The placement Nodes made for requests.
    pub nodes: Cached<NodeMeta>,
    /// Each deployment's Machines, while it is looked at.
    machines: BTreeMap<NamespacedName, (Cached<Machine>, AbortOnDrop)>,
    client: Client,
    _watches: Vec<AbortOnDrop>,
}

impl std::fmt::Debug for Reads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reads")
            .field("machines", &self.machines.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Reads {
    /// The class and request caches handed over (`purchases`), or watches of its own; and the
    /// placement Node watch.
    pub fn start(client: &Client, purchases: Option<ClassesAndRequests>) -> Reads {
        let mut watches = Vec::new();
        let (classes, requests) = purchases.unwrap_or_else(|| {
            let (classes, class_watch) = every(client);
            let (requests, request_watch) = every(client);
            watches.extend([class_watch, request_watch]);
            (classes, requests)
        });
        let (node_cache, feed) = reflector::store::<NodeMeta>();
        let (raise, synced) = Synced::flag();
        let config = watcher::Config::default()
            .any_semantic()
            .labels(NODE_REQUEST_LABEL);
        let stream = watcher::watcher(Api::<NodeMeta>::all(client.clone()), config)
            .default_backoff()
            .modify(|node| keep(node.meta_mut(), &[MACHINE_ANNOTATION]));
        watches.push(fed(stream, feed, raise));
        Reads {
            classes,
            requests,
            nodes: (node_cache, synced),
            machines: BTreeMap::new(),
            client: client.clone(),
            _watches: watches,
        }
    }

    /// Whether the class, request and Node caches hold their first list, waiting until they do;
    /// false when one never will (its watch is gone).
    pub async fn synced(&self) -> bool {
        for synced in [&self.classes.1, &self.requests.1, &self.nodes.1] {
            if synced.wait().await.is_err() {
                return false;
            }
        }
        true
    }

    /// Watches the Machines of exactly these deployments (none when Cluster API is not served).
    pub fn watch_machines<'a>(
        &mut self,
        deployments: impl IntoIterator<Item = &'a NamespacedName>,
    ) {
        let mut kept = BTreeMap::new();
        for key in deployments {
            let watch = self.machines.remove(key).unwrap_or_else(|| {
                let (cache, feed) = reflector::store::<Machine>();
                let (raise, synced) = Synced::flag();
                let config = watcher::Config::default()
                    .any_semantic()
                    .labels(&format!("{DEPLOYMENT_NAME_LABEL}={}", key.name));
                let api = Api::<Machine>::namespaced(self.client.clone(), &key.namespace);
                let stream = watcher::watcher(api, config)
                    .default_backoff()
                    .modify(|machine| {
                        keep(
                            &mut machine.metadata,
                            &[CLAIM_ANNOTATION, DELETE_MACHINE_ANNOTATION],
                        );
                    });
                ((cache, synced), fed(stream, feed, raise))
            });
            kept.insert(key.clone(), watch);
        }
        self.machines = kept;
    }

    /// The deployment's Machines, once its watch holds its first list.
    pub fn machines(&self, key: &NamespacedName) -> Option<Vec<Arc<Machine>>> {
        let ((cache, synced), _) = self.machines.get(key)?;
        synced.is_synced().then(|| cache.state())
    }
}

/// Drops from `meta` what a look never reads: every annotation but `annotations`, labels,
/// managed fields, owners.
fn keep(
    meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    annotations: &[&str],
) {
    meta.annotations = meta.annotations.take().and_then(|mut kept| {
        kept.retain(|key, _| annotations.contains(&key.as_str()));
        (!kept.is_empty()).then_some(kept)
    });
    meta.labels = None;
    meta.managed_fields = None;
    meta.owner_references = None;
}

/// A reflector feeding `feed` from `stream`, raising `synced` at each full list, as a task.
fn fed<K>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    feed: reflector::store::Writer<K>,
    synced: tokio::sync::watch::Sender<bool>,
) -> AbortOnDrop
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    AbortOnDrop(tokio::spawn(stream.reflect(feed).for_each(move |event| {
        match event {
            Ok(watcher::Event::InitDone) => {
                let _ = synced.send(true);
            }
            Ok(_) => {}
            // The watcher retries with its backoff; the cache keeps what it last held.
            Err(error) => tracing::debug!(%error, "cluster-api provisioner: a watch failed"),
        }
        std::future::ready(())
    })))
}

/// A cache of every `K`, stripped as the controller's other caches are, as a task. An object
/// that cannot be decoded fails its list (retried with the watch's backoff), as the list a look
/// read once did: with node requests on, the capacity tick's caches, which skip and report it,
/// are read instead.
fn every<K>(client: &Client) -> (Cached<K>, AbortOnDrop)
where
    K: strip::Cached<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (cache, feed) = reflector::store::<K>();
    let (raise, synced) = Synced::flag();
    let stream = watcher::watcher(
        Api::<K>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .modify(strip::strip);
    ((cache, synced), fed(stream, feed, raise))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cached_machine_keeps_only_what_a_look_reads() {
        let mut machine: Machine = serde_json::from_value(json!({
            "metadata": {"name": "md-1", "namespace": "fleet",
                         "creationTimestamp": "2026-12-01T00:00:00Z",
                         "labels": {DEPLOYMENT_NAME_LABEL: "md"},
                         "annotations": {CLAIM_ANNOTATION: "r1", DELETE_MACHINE_ANNOTATION: "",
                                         "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2",
                                              "kind": "MachineSet", "name": "ms", "uid": "u"}]},
            "status": {"phase": "Running", "nodeRef": {"name": "w1"}},
        }))
        .unwrap();
        keep(
            &mut machine.metadata,
            &[CLAIM_ANNOTATION, DELETE_MACHINE_ANNOTATION],
        );
        assert_eq!(machine.claim(), Some("r1"));
        assert!(machine.marked_for_deletion());
        assert_eq!(machine.running_node(), Some("w1"));
        assert_eq!(machine.metadata.annotations.as_ref().unwrap().len(), 2);
        assert!(machine.metadata.creation_timestamp.is_some());
        assert!(machine.metadata.labels.is_none());
        assert!(machine.metadata.owner_references.is_none());
        // None kept of the annotations: none at all.
        keep(&mut machine.metadata, &[]);
        assert_eq!(machine.metadata.annotations, None);
    }
}
