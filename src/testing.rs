//! Test fixtures: one builder per kind, so that a test node or tenant is one expression.
//!
//! ```text
//!   node("node-eu-1").capacity(64, 256, 8000).holding("acme", (2, 4, 20)).resource_version(10)
//!   tenant("acme").resources(2, 4, 20).mode(TenantMode::Cluster).phase(TenantPhase::Active).on("node-eu-1")
//!   tenant("acme").migrating("node-eu-1", "node-eu-2").placed("Migrating")   a move in flight
//!   node("eu-1").label("region", "eu")    tenant("acme").node_selector(&[("region", "eu")])
//!   entry("acme", (2, 4, 20))       acme's AllocationEntry: tenant default/acme, UID uid-acme
//!   core_node("eu-1").label("pool", "eu").allocatable("32", "128Gi", "4000Gi").cordoned()
//!                                   a core v1 Node as a kubelet reports it (Ready unless said)
//!        .build()                   the typed object (Node, Tenant; also `Node::from(builder)`)
//!        .manifest()                the JSON a client creates: without uid, resourceVersion,
//!                                   generation and creationTimestamp, which the server sets
//! ```
//!
//! Conventions, so that fixtures agree without saying so: a tenant named `x` lives in namespace
//! `default` with UID `uid-x`, and an entry held for `x` (`holding("x", ..)`, `entry("x", ..)`)
//! names that tenant and that UID. Objects are as stored, at generation 1. A node's status holds
//! its entries with zero totals unless `settled()` derives them as the controller writes them.
//!
//! Why a feature and not an always-compiled module: the fixtures are compiled for this crate's
//! unit tests (`cfg(test)`) and, through the `testing` feature that the crate's dev-dependency on
//! itself turns on, for its integration tests and benches; a plain `cargo build` of the operator
//! leaves them out, so they never ship and never become API anyone leans on.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node as CoreNode, NodeCondition, NodeSpec as CoreNodeSpec, NodeStatus as CoreNodeStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde_json::Value;

use crate::api::{
    AllocationEntry, Condition, MigrationStatus, Node, NodeSpec, NodeState, NodeStatus,
    OvercommitRatios, PLACED_CONDITION, ResourceAmounts, Tenant, TenantMode, TenantPhase,
    TenantSpec, TenantStatus,
};

/// Amounts in the three dimensions (threads, memory GB, storage GB): a tuple or a value.
pub trait Amounts {
    fn amounts(self) -> ResourceAmounts;
}

impl Amounts for (i64, i64, i64) {
    fn amounts(self) -> ResourceAmounts {
        ResourceAmounts::new(self.0, self.1, self.2)
    }
}

impl Amounts for ResourceAmounts {
    fn amounts(self) -> ResourceAmounts {
        self
    }
}

/// The entry a node holds for tenant `default/{name}` (UID `uid-{name}`).
pub fn entry(name: &str, amounts: impl Amounts) -> AllocationEntry {
    AllocationEntry {
        tenant: format!("default/{name}").into(),
        uid: format!("uid-{name}").into(),
        resources: amounts.amounts(),
        replicas: None,
    }
}

/// A NodeClass named `name` of provider `lab/x`: `threads` threads, 64 GB memory, 100 GB
/// storage, costing `monthly_cost` when given.
pub fn node_class(name: &str, threads: u32, monthly_cost: Option<i64>) -> crate::api::NodeClass {
    let mut spec = serde_json::json!({
        "capacity": {"threads": threads, "memoryGb": 64, "storageGb": 100},
        "provider": "lab/x"
    });
    if let Some(cost) = monthly_cost {
        spec["monthlyCost"] = cost.into();
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "placement.tenant-placer.dev/v1alpha1", "kind": "NodeClass",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap_or_else(|e| panic!("a NodeClass fixture that does not decode: {e}"))
}

/// A Node named `name`: Online, capacity 0 until `capacity` says otherwise, holding nothing.
pub fn node(name: &str) -> NodeBuilder {
    let mut node = Node::new(
        name,
        NodeSpec {
            capacity: ResourceAmounts::default(),
            state: NodeState::Online,
            overcommit: None,
        },
    );
    node.metadata.generation = Some(1);
    NodeBuilder {
        node,
        settled: false,
    }
}

/// A Tenant `default/{name}` (UID `uid-{name}`): Standalone, 1 thread, 1 GB, 1 GB per replica,
/// no status.
pub fn tenant(name: &str) -> TenantBuilder {
    let mut tenant = Tenant::new(
        name,
        TenantSpec {
            resources: ResourceAmounts::new(1, 1, 1),
            mode: TenantMode::Standalone,
            replicas: None,
            suspend: false,
            node_selector: Default::default(),
            spread: Default::default(),
        },
    );
    tenant.metadata.namespace = Some("default".into());
    tenant.metadata.uid = Some(format!("uid-{name}"));
    tenant.metadata.generation = Some(1);
    TenantBuilder { tenant }
}

/// Builds a [`Node`]; see the module doc.
#[derive(Clone, Debug)]
#[must_use]
pub struct NodeBuilder {
    node: Node,
    settled: bool,
}

impl NodeBuilder {
    pub fn capacity(mut self, threads: i64, memory_gb: i64, storage_gb: i64) -> Self {
        self.node.spec.capacity = ResourceAmounts::new(threads, memory_gb, storage_gb);
        self
    }

    pub fn state(mut self, state: NodeState) -> Self {
        self.node.spec.state = state;
        self
    }

    /// Adds a label (metadata.labels): a pool's, for `--node-selector`, or one tenants' node
    /// selectors match.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.node.labels_mut().insert(key.into(), value.into());
        self
    }

    pub fn overcommit(mut self, threads: f64, memory_gb: f64, storage_gb: f64) -> Self {
        self.node.spec.overcommit = Some(OvercommitRatios {
            threads,
            memory_gb,
            storage_gb,
        });
        self
    }

    /// One more entry, held for tenant `default/{tenant}` (UID `uid-{tenant}`).
    pub fn holding(self, tenant: &str, amounts: impl Amounts) -> Self {
        self.entry(entry(tenant, amounts))
    }

    /// One more entry, held for `replicas` of spread tenant `default/{tenant}`'s replicas
    /// (`amounts` is what they hold together).
    pub fn holding_replicas(self, tenant: &str, amounts: impl Amounts, replicas: u32) -> Self {
        self.entry(AllocationEntry {
            replicas: Some(replicas),
            ..entry(tenant, amounts)
        })
    }

    /// One more entry of any shape (another UID, another namespace).
    pub fn entry(mut self, entry: AllocationEntry) -> Self {
        self.node
            .status
            .get_or_insert_with(NodeStatus::default)
            .allocations
            .push(entry);
        self
    }

    /// The status the controller would write for these entries (totals and conditions).
    pub fn settled(mut self) -> Self {
        self.settled = true;
        self
    }

    pub fn resource_version(mut self, rv: u64) -> Self {
        self.node.metadata.resource_version = Some(rv.to_string());
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.node.metadata.uid = Some(uid.into());
        self
    }

    /// Being deleted (since now): placement sees it as draining.
    pub fn deleting(mut self) -> Self {
        self.node.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        self
    }

    pub fn finalizer(mut self, finalizer: &str) -> Self {
        self.node
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(finalizer.into());
        self
    }

    pub fn build(self) -> Node {
        let mut node = self.node;
        if self.settled {
            let ledger = node
                .ledger()
                .unwrap_or_else(|e| panic!("a settled fixture needs readable amounts: {e}"));
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            node.status = Some(node.status_for(ledger.entries(), ledger.view().capacity, &now));
        }
        node
    }

    /// The JSON a client creates (see the module doc).
    pub fn manifest(self) -> Value {
        manifest(&self.build())
    }
}

impl From<NodeBuilder> for Node {
    fn from(builder: NodeBuilder) -> Node {
        builder.build()
    }
}

/// Builds a [`Tenant`]; see the module doc.
#[derive(Clone, Debug)]
#[must_use]
pub struct TenantBuilder {
    tenant: Tenant,
}

impl TenantBuilder {
    /// Resources of one replica.
    pub fn resources(mut self, threads: i64, memory_gb: i64, storage_gb: i64) -> Self {
        self.tenant.spec.resources = ResourceAmounts::new(threads, memory_gb, storage_gb);
        self
    }

    pub fn mode(mut self, mode: TenantMode) -> Self {
        self.tenant.spec.mode = mode;
        self
    }

    pub fn replicas(mut self, replicas: i32) -> Self {
        self.tenant.spec.replicas = Some(replicas);
        self
    }

    /// A Cluster tenant of `replicas`, spread as `spread` says.
    pub fn spread(mut self, spread: crate::api::TenantSpread, replicas: i32) -> Self {
        self.tenant.spec.mode = TenantMode::Cluster;
        self.tenant.spec.replicas = Some(replicas);
        self.tenant.spec.spread = spread;
        self
    }

    /// spec.nodeSelector: only Nodes with all these labels may take it.
    pub fn node_selector(mut self, pairs: &[(&str, &str)]) -> Self {
        self.tenant.spec.node_selector = pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        self
    }

    pub fn suspended(mut self) -> Self {
        self.tenant.spec.suspend = true;
        self
    }

    /// Adds a label (a pool's, for `--tenant-selector`).
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.tenant.labels_mut().insert(key.into(), value.into());
        self
    }

    /// Moves the tenant to another namespace (its entries then name `{namespace}/{name}`).
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.tenant.metadata.namespace = Some(namespace.into());
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.tenant.metadata.uid = Some(uid.into());
        self
    }

    pub fn generation(mut self, generation: i64) -> Self {
        self.tenant.metadata.generation = Some(generation);
        self
    }

    pub fn resource_version(mut self, rv: u64) -> Self {
        self.tenant.metadata.resource_version = Some(rv.to_string());
        self
    }

    pub fn finalizer(mut self, finalizer: &str) -> Self {
        self.tenant
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(finalizer.into());
        self
    }

    /// Created at an RFC 3339 time, e.g. `2026-01-01T00:00:00Z`.
    pub fn created(mut self, at: &str) -> Self {
        let at = at
            .parse()
            .unwrap_or_else(|e| panic!("{at:?} is not an RFC 3339 time: {e}"));
        self.tenant.metadata.creation_timestamp = Some(Time(at));
        self
    }

    /// Being deleted (since now).
    pub fn deleting(mut self) -> Self {
        self.tenant.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        self
    }

    /// Status: the phase.
    pub fn phase(mut self, phase: TenantPhase) -> Self {
        self.status().phase = phase;
        self
    }

    /// Status: the node it names.
    pub fn on(mut self, node: &str) -> Self {
        self.status().node_name = node.into();
        self
    }

    /// Status: what it says it holds.
    pub fn reserved(mut self, threads: i64, memory_gb: i64, storage_gb: i64) -> Self {
        self.status().reserved = ResourceAmounts::new(threads, memory_gb, storage_gb);
        self
    }

    /// Status: the message.
    pub fn message(mut self, message: &str) -> Self {
        self.status().message = message.into();
        self
    }

    /// Status: a spread tenant's placements, `(node, zone, replicas)` each (zone empty: none).
    pub fn placements(mut self, placements: &[(&str, &str, u32)]) -> Self {
        self.status().placements = placements
            .iter()
            .map(|&(node, zone, replicas)| crate::api::SpreadPlacement {
                node: node.into(),
                zone: zone.into(),
                replicas,
            })
            .collect();
        self
    }

    /// Status: a move in flight from `from` to `to` (phase Migrating, on `from`).
    pub fn migrating(mut self, from: &str, to: &str) -> Self {
        let status = self.status();
        status.phase = TenantPhase::Migrating;
        status.node_name = from.into();
        status.migration = Some(MigrationStatus {
            from: from.into(),
            to: to.into(),
        });
        self
    }

    /// Status: the Placed condition with this reason, True when the status names a node.
    pub fn placed(mut self, reason: &str) -> Self {
        let status = self.status();
        let placed = if status.node_name.is_empty() {
            "False"
        } else {
            "True"
        };
        status.conditions = vec![Condition {
            type_: PLACED_CONDITION.into(),
            status: placed.into(),
            reason: reason.into(),
            message: status.message.clone(),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
            observed_generation: None,
        }];
        self
    }

    fn status(&mut self) -> &mut TenantStatus {
        self.tenant.status.get_or_insert_with(TenantStatus::default)
    }

    pub fn build(self) -> Tenant {
        self.tenant
    }

    /// The JSON a client creates (see the module doc).
    pub fn manifest(self) -> Value {
        manifest(&self.build())
    }
}

impl From<TenantBuilder> for Tenant {
    fn from(builder: TenantBuilder) -> Tenant {
        builder.build()
    }
}

/// A core `v1/Node` named `name` (UID `uid-core-{name}`) as a kubelet reports it: Ready,
/// schedulable, allocatable `cpu: 64`, `memory: 256Gi`, `ephemeral-storage: 8000Gi` (node-eu-1's
/// capacity) until said otherwise.
pub fn core_node(name: &str) -> CoreNodeBuilder {
    let allocatable = BTreeMap::from([
        ("cpu".to_owned(), Quantity("64".into())),
        ("memory".to_owned(), Quantity("256Gi".into())),
        ("ephemeral-storage".to_owned(), Quantity("8000Gi".into())),
        ("pods".to_owned(), Quantity("110".into())),
    ]);
    let mut node = CoreNode {
        spec: Some(CoreNodeSpec::default()),
        status: Some(CoreNodeStatus {
            allocatable: Some(allocatable),
            ..CoreNodeStatus::default()
        }),
        ..CoreNode::default()
    };
    node.metadata.name = Some(name.into());
    node.metadata.uid = Some(format!("uid-core-{name}"));
    CoreNodeBuilder { node }.ready("True")
}

/// Builds a core `v1/Node`; see [`core_node`].
#[derive(Clone, Debug)]
#[must_use]
pub struct CoreNodeBuilder {
    node: CoreNode,
}

impl CoreNodeBuilder {
    /// `status.allocatable`'s cpu, memory and ephemeral-storage, as the kubelet writes them.
    pub fn allocatable(mut self, cpu: &str, memory: &str, storage: &str) -> Self {
        let allocatable = self.status().allocatable.get_or_insert_with(BTreeMap::new);
        for (resource, value) in [
            ("cpu", cpu),
            ("memory", memory),
            ("ephemeral-storage", storage),
        ] {
            allocatable.insert(resource.into(), Quantity(value.into()));
        }
        self
    }

    /// No `status.allocatable` at all (a kubelet that has not reported yet).
    pub fn no_allocatable(mut self) -> Self {
        self.status().allocatable = None;
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.node.labels_mut().insert(key.into(), value.into());
        self
    }

    /// `spec.unschedulable: true`, as `kubectl cordon` sets it.
    pub fn cordoned(mut self) -> Self {
        self.node
            .spec
            .get_or_insert_with(CoreNodeSpec::default)
            .unschedulable = Some(true);
        self
    }

    /// The Ready condition's status: `True`, `False` or `Unknown`.
    pub fn ready(mut self, status: &str) -> Self {
        let condition = NodeCondition {
            type_: "Ready".into(),
            status: status.into(),
            reason: Some("KubeletReady".into()),
            ..NodeCondition::default()
        };
        self.status().conditions = Some(vec![condition]);
        self
    }

    /// No conditions at all (a kubelet that has not reported yet).
    pub fn no_conditions(mut self) -> Self {
        self.status().conditions = None;
        self
    }

    pub fn resource_version(mut self, rv: u64) -> Self {
        self.node.metadata.resource_version = Some(rv.to_string());
        self
    }

    /// Being deleted (since now).
    pub fn deleting(mut self) -> Self {
        self.node.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        self
    }

    fn status(&mut self) -> &mut CoreNodeStatus {
        self.node.status.get_or_insert_with(CoreNodeStatus::default)
    }

    pub fn build(self) -> CoreNode {
        self.node
    }

    /// The JSON a client (a kubelet) creates (see the module doc).
    pub fn manifest(self) -> Value {
        manifest(&self.build())
    }
}

/// The object as JSON without the metadata the server sets.
fn manifest(object: &impl serde::Serialize) -> Value {
    let mut json =
        serde_json::to_value(object).unwrap_or_else(|e| panic!("a fixture always serializes: {e}"));
    if let Some(metadata) = json.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["uid", "resourceVersion", "generation", "creationTimestamp"] {
            metadata.remove(field);
        }
    }
    json
}
