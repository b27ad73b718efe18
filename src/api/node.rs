use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

use super::amounts::ResourceAmounts;
use super::condition::Condition;

/// The condition a Node carries when it holds more than its capacity (capacity was lowered).
pub const OVER_CAPACITY_CONDITION: &str = "OverCapacity";

/// The condition a Node being deleted carries: `True` once it holds nothing, else `False`,
/// naming the tenants it waits for.
pub const DRAINED_CONDITION: &str = "Drained";

/// The finalizer a Node holding reservations carries, so that it is not deleted from under them.
pub const NODE_FINALIZER: &str = "placement.tenant-placer.dev/reservations";

/// A bare-metal node that tenant-placer places tenants on. (Not the core v1 Node: `kubectl get pnodes`.)
#[derive(CustomResource, JsonSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "placement.tenant-placer.dev",
    version = "v1alpha1",
    kind = "Node",
    shortname = "pnode",
    shortname = "pnodes",
    category = "placement",
    status = "NodeStatus",
    doc = "A bare-metal node with a capacity in threads, memory and storage. tenant-placer records \
           every tenant reservation in its status.allocations.",
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".spec.state",
        description = "Online, Cordoned, Offline or Draining"
    ),
    printcolumn(
        name = "Free-Threads",
        type_ = "integer",
        json_path = ".status.free.threads",
        description = "Threads not reserved"
    ),
    printcolumn(
        name = "Free-Memory-GB",
        type_ = "integer",
        json_path = ".status.free.memoryGb",
        description = "Memory not reserved, GB"
    ),
    printcolumn(
        name = "Free-Storage-GB",
        type_ = "integer",
        json_path = ".status.free.storageGb",
        description = "Storage not reserved, GB"
    ),
    printcolumn(
        name = "Tenants",
        type_ = "integer",
        json_path = ".status.tenants",
        description = "Reservations held"
    ),
    printcolumn(
        name = "Threads",
        type_ = "integer",
        json_path = ".spec.capacity.threads",
        priority = "1",
        description = "Thread capacity"
    ),
    printcolumn(
        name = "Allocated-Threads",
        type_ = "integer",
        json_path = ".status.allocated.threads",
        priority = "1",
        description = "Threads reserved"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    /// What the node offers in each dimension.
    pub capacity: ResourceAmounts,
    /// Online takes tenants; Cordoned keeps its tenants and takes no new ones; Offline likewise;
    /// Draining takes no new ones and moves its tenants to other nodes, make-before-break.
    #[serde(default)]
    pub state: NodeState,
    /// How far each dimension may be overcommitted: placement counts capacity x ratio, rounded
    /// down. Unset means 1.0 (no overcommit) in every dimension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overcommit: Option<OvercommitRatios>,
}

fn no_overcommit() -> f64 {
    1.0
}

/// The bounds of an overcommit ratio, placement's own ([`placement::Overcommit`]).
const MIN_OVERCOMMIT: f64 = placement::Overcommit::MIN_RATIO;
const MAX_OVERCOMMIT: f64 = placement::Overcommit::MAX_RATIO;

/// Overcommit ratios: at least 0.001 and at most 16 (kept to thousandths). CPU time is commonly
/// shared 2-4x; memory is kept near 1.0-1.2; thin-provisioned disk can go further.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OvercommitRatios {
    /// Ratio for threads.
    #[serde(default = "no_overcommit")]
    #[schemars(range(min = MIN_OVERCOMMIT, max = MAX_OVERCOMMIT))]
    pub threads: f64,
    /// Ratio for memory.
    #[serde(default = "no_overcommit")]
    #[schemars(range(min = MIN_OVERCOMMIT, max = MAX_OVERCOMMIT))]
    pub memory_gb: f64,
    /// Ratio for storage.
    #[serde(default = "no_overcommit")]
    #[schemars(range(min = MIN_OVERCOMMIT, max = MAX_OVERCOMMIT))]
    pub storage_gb: f64,
}

impl NodeSpec {
    /// The overcommit to place with, checked (a ratio an old schema let in is an error).
    pub fn overcommit(&self) -> Result<placement::Overcommit, placement::OvercommitError> {
        match self.overcommit {
            None => Ok(placement::Overcommit::NONE),
            Some(r) => placement::Overcommit::from_ratios(r.threads, r.memory_gb, r.storage_gb),
        }
    }
}

/// Whether a node takes tenants (see `NodeSpec::state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum NodeState {
    #[default]
    Online,
    Cordoned,
    Offline,
    Draining,
}

impl From<NodeState> for placement::NodeState {
    fn from(state: NodeState) -> Self {
        match state {
            NodeState::Online => placement::NodeState::Online,
            NodeState::Cordoned => placement::NodeState::Cordoned,
            NodeState::Offline => placement::NodeState::Offline,
            NodeState::Draining => placement::NodeState::Draining,
        }
    }
}

/// Written only by tenant-placer. `allocations` is the record; the totals are derived from it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// One entry per tenant UID holding a reservation here: the only record of reservations.
    #[serde(default)]
    pub allocations: Vec<AllocationEntry>,
    /// The sum of allocations, recomputed on every write.
    #[serde(default)]
    pub allocated: ResourceAmounts,
    /// Capacity minus allocated per dimension, never below 0.
    #[serde(default)]
    pub free: ResourceAmounts,
    /// The number of allocations.
    #[serde(default)]
    pub tenants: i64,
    /// OverCapacity (capacity lowered below what the node holds) and, while it is being
    /// deleted, Drained.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Why the types could not read this Node, on a copy kept present by [`Node::unreadable`]
    /// (never serialized): such a node has no ledger and is never written.
    #[serde(skip)]
    pub unreadable: Option<String>,
}

impl Node {
    /// A Node the types cannot hold (`why`: the field and what is wrong with it), kept present
    /// from what can be read of its `json`: its metadata and the UIDs its allocations name (an
    /// entry whose amounts cannot be read shows zero). Its spec is a placeholder; it has no
    /// ledger ([`Node::ledger`] answers `why`), so it is never written and no tenant it names is
    /// decided elsewhere while it stays so.
    pub fn unreadable(metadata: ObjectMeta, json: &str, why: String) -> Node {
        let object: Value = serde_json::from_str(json).unwrap_or_default();
        let allocations = object
            .pointer("/status/allocations")
            .and_then(Value::as_array)
            .map(|entries| entries.iter().filter_map(lenient_entry).collect())
            .unwrap_or_default();
        Node {
            metadata,
            spec: NodeSpec {
                capacity: ResourceAmounts::default(),
                state: NodeState::default(),
                overcommit: None,
            },
            status: Some(NodeStatus {
                allocations,
                unreadable: Some(why),
                ..NodeStatus::default()
            }),
        }
    }

    /// Why the types could not read this node, for a copy kept by [`Node::unreadable`].
    pub fn unreadable_reason(&self) -> Option<&str> {
        self.status.as_ref()?.unreadable.as_deref()
    }
}

/// An allocation entry as far as it can be read: `None` without a readable UID.
fn lenient_entry(entry: &Value) -> Option<AllocationEntry> {
    if let Ok(whole) = serde_json::from_value::<AllocationEntry>(entry.clone()) {
        return Some(whole);
    }
    Some(AllocationEntry {
        tenant: entry["tenant"].as_str().unwrap_or_default().into(),
        uid: entry["uid"].as_str()?.into(),
        resources: ResourceAmounts::default(),
        replicas: None,
    })
}

// NB: its strings are shared (`Arc<str>`) with the placement ledger built from the node
// (`Node::ledger`) and with the reflector's clone of the node, so that a reservation's names are
// held once however many copies of the node the controller keeps (not a doc comment: the CRD's
// description comes from those).
/// One tenant's reservation on this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllocationEntry {
    /// The tenant, as namespace/name.
    #[serde(with = "shared_str")]
    #[schemars(with = "String")]
    pub tenant: Arc<str>,
    /// The tenant's metadata.uid: the key of the reservation.
    #[serde(with = "shared_str")]
    #[schemars(with = "String")]
    pub uid: Arc<str>,
    /// The footprint reserved (per replica x replicas).
    pub resources: ResourceAmounts,
    /// How many of a spread tenant's replicas this node holds; unset for a tenant not spread
    /// (all its replicas are here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i32>", range(min = 1, max = super::MAX_REPLICAS))]
    pub replicas: Option<u32>,
}

/// A shared string as JSON text: written as the string, read from borrowed or owned text
/// straight into its `Arc` (no intermediate `String`).
mod shared_str {
    use std::sync::Arc;

    use serde::{Deserializer, Serializer, de};

    pub fn serialize<S: Serializer>(text: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Arc<str>, D::Error> {
        struct Text;
        impl de::Visitor<'_> for Text {
            type Value = Arc<str>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Arc<str>, E> {
                Ok(Arc::from(text))
            }
        }
        deserializer.deserialize_str(Text)
    }
}
