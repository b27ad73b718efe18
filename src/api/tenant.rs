use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::amounts::ResourceAmounts;
use super::condition::Condition;

/// The type of the condition that says whether the tenant holds its reservation.
pub const PLACED_CONDITION: &str = "Placed";

/// The finalizer every Tenant carries until its reservation is released.
pub const TENANT_FINALIZER: &str = "placement.tenant-placer.dev/reservation";

/// The reason of a Tenant's `Placed` condition: the one word for what its status says. The
/// status carries [`PlacedReason::as_str`]; code compares these values, never the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlacedReason {
    /// Holds its reservation.
    Reserved,
    /// Suspended, keeping its reservation or holding none.
    Suspended,
    /// Holds its reservation; a larger footprint does not fit on its node yet.
    ResizeBlocked,
    /// Waits for room: no node has it.
    NoCapacity,
    /// Reserved on two nodes while it moves off a draining one.
    Migrating,
    /// On a draining node that no other node can take now: it waits for room, holding its
    /// reservation.
    MigrationBlocked,
    /// On a draining node, waiting for a move in flight to complete (`--max-migrations`).
    MigrationWaiting,
    /// Holds its reservation on a node outside this controller's pool.
    OutsidePool,
    /// Its reservation was lost and could not be restored.
    ReservationLost,
    /// Waits behind an older tenant that fits nowhere (StrictFIFO): room may be free, and it is
    /// not placed.
    QueuedBehindOlder,
    /// A decision is being carried out.
    InProgress,
    /// No decision could be made now (an unreadable node, conflicts, a failed write).
    Undecided,
    /// Its spec cannot be placed as written.
    InvalidSpec,
    /// Deleting: releasing the reservation failed; it is retried.
    ReleaseFailed,
}

impl PlacedReason {
    pub const ALL: [PlacedReason; 14] = [
        Self::Reserved,
        Self::Suspended,
        Self::ResizeBlocked,
        Self::NoCapacity,
        Self::Migrating,
        Self::MigrationBlocked,
        Self::MigrationWaiting,
        Self::OutsidePool,
        Self::ReservationLost,
        Self::QueuedBehindOlder,
        Self::InProgress,
        Self::Undecided,
        Self::InvalidSpec,
        Self::ReleaseFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reserved => "Reserved",
            Self::Suspended => "Suspended",
            Self::ResizeBlocked => "ResizeBlocked",
            Self::NoCapacity => "NoCapacity",
            Self::Migrating => "Migrating",
            Self::MigrationBlocked => "MigrationBlocked",
            Self::MigrationWaiting => "MigrationWaiting",
            Self::OutsidePool => "OutsidePool",
            Self::ReservationLost => "ReservationLost",
            Self::QueuedBehindOlder => "QueuedBehindOlder",
            Self::InProgress => "InProgress",
            Self::Undecided => "Undecided",
            Self::InvalidSpec => "InvalidSpec",
            Self::ReleaseFailed => "ReleaseFailed",
        }
    }

    /// The reason a condition's text names; `None` for a text this controller does not write.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl fmt::Display for PlacedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tenant to place on one node: resources per replica, a mode, and a replica count.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "placement.tenant-placer.dev",
    version = "v1alpha1",
    kind = "Tenant",
    namespaced,
    shortname = "tn",
    category = "placement",
    status = "TenantStatus",
    doc = "A tenant that tenant-placer places on one Node by first fit, reserving its resources \
           (per replica x replicas) in that Node's status.",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Where the tenant is in its lifecycle"
    ),
    printcolumn(
        name = "Node",
        type_ = "string",
        json_path = ".status.nodeName",
        description = "The node holding the reservation"
    ),
    printcolumn(
        name = "Placements",
        type_ = "string",
        json_path = ".status.placedOn",
        description = "A spread tenant's nodes, one replica on each"
    ),
    printcolumn(
        name = "Threads",
        type_ = "integer",
        json_path = ".status.reserved.threads",
        description = "Threads reserved (per replica x replicas)"
    ),
    printcolumn(
        name = "Memory-GB",
        type_ = "integer",
        json_path = ".status.reserved.memoryGb",
        description = "Memory reserved, GB"
    ),
    printcolumn(
        name = "Storage-GB",
        type_ = "integer",
        json_path = ".status.reserved.storageGb",
        description = "Storage reserved, GB"
    ),
    printcolumn(
        name = "Mode",
        type_ = "string",
        json_path = ".spec.mode",
        priority = "1",
        description = "Standalone or Cluster"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = "1",
        description = "Why the tenant is in this phase"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self.mode != 'Standalone' || !has(self.replicas) || self.replicas == 1").message("a Standalone tenant has exactly 1 replica: remove spec.replicas or set it to 1, or set spec.mode to Cluster").field_path(".replicas"))]
#[x_kube(validation = Rule::new("self.mode != 'Cluster' || !has(self.replicas) || self.replicas >= 2").message("a Cluster tenant has at least 2 replicas: set spec.replicas to 2 or more, or remove it (Cluster means 2)").field_path(".replicas"))]
#[x_kube(validation = Rule::new("!has(oldSelf.spread) || oldSelf.spread == 'None' || (has(self.spread) && self.spread != 'None')").message("spec.spread cannot go back to None once the replicas are spread (they would have to gather on one node): keep Nodes or Zones, or re-create the tenant").field_path(".spread"))]
#[x_kube(validation = Rule::new("!has(self.spread) || self.spread == 'None' || self.mode == 'Cluster'").message("spec.spread other than None needs spec.mode Cluster: a Standalone tenant has one replica").field_path(".spread"))]
#[serde(rename_all = "camelCase")]
pub struct TenantSpec {
    /// Resources of one replica (at least 1 thread and 1 GB of memory). The footprint reserved
    /// on the node is this times replicas.
    #[schemars(transform = at_least_one_thread_and_gigabyte)]
    pub resources: ResourceAmounts,
    /// Standalone runs 1 replica; Cluster runs 2 or more (2 when replicas is not set).
    #[serde(default)]
    pub mode: TenantMode,
    /// Number of replicas. Optional: Standalone means 1 and Cluster means 2 when unset, so that
    /// switching mode alone is enough.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_REPLICAS))]
    pub replicas: Option<i32>,
    /// A suspended tenant keeps its reservation; one without a node is not placed until resumed.
    #[serde(default)]
    pub suspend: bool,
    /// Only Nodes whose labels include every one of these pairs may take the tenant (region,
    /// provider, confidential-computing hardware). Empty or unset: any Node. A tenant keeps its
    /// reservation when its Node's labels change later; it is placed again only if it loses it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = label_map)]
    pub node_selector: BTreeMap<String, String>,
    /// Where a Cluster tenant's replicas go: None (all on one node), Nodes (each on a different
    /// node) or Zones (balanced across zones, at most one more in any zone than in another,
    /// never two on one node). Placed all or none.
    #[serde(default, skip_serializing_if = "TenantSpread::is_none")]
    pub spread: TenantSpread,
}

/// The Node label naming its zone, as Kubernetes writes it (`--zone-label` names another).
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// How a Cluster tenant's replicas are spread over nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TenantSpread {
    /// Every replica on one node (the footprint is per replica x replicas there).
    #[default]
    None,
    /// Each replica on a different node.
    Nodes,
    /// Replicas as evenly as possible across zones (a Node's zone label), never two on one node.
    Zones,
}

impl TenantSpread {
    pub fn is_none(&self) -> bool {
        *self == TenantSpread::None
    }

    /// As placement reads it.
    pub fn as_placement(self) -> placement::Spread {
        match self {
            TenantSpread::None => placement::Spread::None,
            TenantSpread::Nodes => placement::Spread::Nodes,
            TenantSpread::Zones => placement::Spread::Zones,
        }
    }
}

/// The most replicas a tenant may ask for; all of them are reserved on one node.
pub const MAX_REPLICAS: i32 = 1000;

/// A tenant's per-replica request: nothing runs on zero threads or zero memory (storage may be 0).
pub(super) fn at_least_one_thread_and_gigabyte(schema: &mut schemars::Schema) {
    for field in ["threads", "memoryGb"] {
        if let Some(property) = schema
            .get_mut("properties")
            .and_then(|p| p.get_mut(field))
            .and_then(|p| p.as_object_mut())
        {
            property.insert("minimum".into(), 1.into());
        }
    }
}

/// The most pairs a node selector may hold.
pub const MAX_SELECTOR_PAIRS: u64 = 32;

/// A label map as Kubernetes writes labels: values of at most 63 characters, alphanumerics
/// with `-`, `_` and `.` inside; at most [`MAX_SELECTOR_PAIRS`] pairs. (Keys are checked by
/// the API server when they are labels; a key no Node can carry simply matches no Node.)
fn label_map(schema: &mut schemars::Schema) {
    schema.insert("maxProperties".into(), MAX_SELECTOR_PAIRS.into());
    schema.insert(
        "additionalProperties".into(),
        serde_json::json!({
            "type": "string",
            "maxLength": 63,
            "pattern": "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
        }),
    );
}

/// How a tenant runs: one replica, or a cluster of replicas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TenantMode {
    #[default]
    Standalone,
    Cluster,
}

impl TenantMode {
    /// Replicas when `spec.replicas` is not set.
    pub fn default_replicas(self) -> i32 {
        match self {
            TenantMode::Standalone => 1,
            TenantMode::Cluster => 2,
        }
    }
}

/// Where a tenant is in its lifecycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TenantPhase {
    /// Seen, not yet decided (also: a spec that cannot be used and no reservation to keep).
    #[default]
    Pending,
    /// Holds its full footprint on a node.
    Active,
    /// Fits on no node; waits for room.
    PendingCapacity,
    /// Holds its old footprint; the new one does not fit on its node yet.
    Resizing,
    /// Suspended; keeps its reservation if it has one.
    Suspended,
    /// Being deleted; its reservation is being released.
    Terminating,
    /// Moving off a draining node: reserved on both nodes (`status.migration`) until the move
    /// completes.
    Migrating,
}

impl TenantPhase {
    /// Every phase, in lifecycle order.
    pub const ALL: [TenantPhase; 7] = [
        TenantPhase::Pending,
        TenantPhase::Active,
        TenantPhase::PendingCapacity,
        TenantPhase::Resizing,
        TenantPhase::Suspended,
        TenantPhase::Terminating,
        TenantPhase::Migrating,
    ];
}

impl fmt::Display for TenantPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // pad, so that table columns line up
        f.pad(&format!("{self:?}"))
    }
}

/// What the controller last saw and decided. The Node's allocations are the truth; this is a view.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    /// Where the tenant is in its lifecycle.
    #[serde(default)]
    pub phase: TenantPhase,
    /// The node holding the reservation; empty when it holds none.
    #[serde(default)]
    pub node_name: String,
    /// The footprint held on the node (per replica x replicas).
    #[serde(default)]
    pub reserved: ResourceAmounts,
    /// One sentence: why the tenant is in this phase.
    #[serde(default)]
    pub message: String,
    /// The metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The Placed condition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The move in flight: the tenant is reserved on both nodes until it completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationStatus>,
    /// A spread tenant's replicas, one item per node, by node name (`nodeName` is the first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_REPLICAS))]
    pub placements: Vec<SpreadPlacement>,
    /// A spread tenant's nodes, comma-separated, as its placements list them: what `kubectl get`
    /// shows (a printer column shows one value, the first of a list).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub placed_on: String,
}

/// Where some of a spread tenant's replicas are held.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SpreadPlacement {
    pub node: String,
    /// The node's zone label; empty when it has none (`spread: Nodes`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub zone: String,
    #[schemars(with = "i32", range(min = 1, max = MAX_REPLICAS))]
    pub replicas: u32,
}

/// A move off a draining node, make-before-break: the target entry is written first, then the
/// source entry is released and `nodeName` names the target.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MigrationStatus {
    /// The node it leaves (draining).
    pub from: String,
    /// The node it goes to.
    pub to: String,
}

impl MigrationStatus {
    /// The move as placement reads it.
    pub fn as_placement(&self) -> placement::Migration<'_> {
        placement::Migration {
            from: &self.from,
            to: &self.to,
        }
    }
}

/// Why a spec cannot be turned into a footprint. Only an old schema or overflow lets these in.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("spec.resources.{0}")]
    Negative(#[from] super::amounts::NegativeAmount),
    #[error("spec.replicas is {replicas}, but a {mode:?} tenant needs {needs}")]
    ReplicasForMode {
        mode: TenantMode,
        replicas: i32,
        needs: &'static str,
    },
    #[error(
        "spec.resources x spec.replicas ({resources} x {replicas}) is past the largest integer the API stores"
    )]
    FootprintOverflows {
        resources: placement::Resources,
        replicas: i32,
    },
}

impl Tenant {
    /// The reason of the status's `Placed` condition, if it has one this controller writes.
    pub fn placed_reason(&self) -> Option<PlacedReason> {
        let status = self.status.as_ref()?;
        let placed = status
            .conditions
            .iter()
            .find(|c| c.type_ == PLACED_CONDITION)?;
        PlacedReason::parse(&placed.reason)
    }

    /// A Tenant the types cannot hold, as far as its delete needs it: its metadata (its key, UID
    /// and finalizers) and the status that can be read from its `json`. Its spec is a
    /// placeholder that asks for nothing: only a tenant being deleted is kept so.
    pub fn unreadable(metadata: ObjectMeta, json: &str) -> Tenant {
        let object: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
        let status = object
            .get("status")
            .and_then(|status| serde_json::from_value(status.clone()).ok());
        Tenant {
            metadata,
            spec: TenantSpec {
                resources: ResourceAmounts::default(),
                mode: TenantMode::default(),
                replicas: None,
                suspend: true,
                node_selector: BTreeMap::new(),
                spread: TenantSpread::None,
            },
            status,
        }
    }

    /// `namespace/name`, the key people read (and allocation entries carry).
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }

    /// The tenant a [`Tenant::key`] names; `None` for text that is not `namespace/name`.
    pub fn reference(key: &str) -> Option<kube::runtime::reflector::ObjectRef<Tenant>> {
        let (namespace, name) = key.split_once('/')?;
        Some(kube::runtime::reflector::ObjectRef::new(name).within(namespace))
    }
}

/// Each tenant's node selector, by UID; tenants without one (or without a UID) are left out.
pub fn selectors_by_uid<'a>(
    tenants: impl IntoIterator<Item = &'a Tenant>,
) -> std::collections::HashMap<&'a str, &'a placement::Labels> {
    tenants
        .into_iter()
        .filter_map(|t| Some((t.metadata.uid.as_deref()?, t.spec.selector()?)))
        .collect()
}

impl TenantSpec {
    /// Replicas after applying the mode's default.
    pub fn effective_replicas(&self) -> i32 {
        self.replicas.unwrap_or(self.mode.default_replicas())
    }

    /// Its node selector as placement reads it: `None` when empty (any node).
    pub fn selector(&self) -> Option<&placement::Labels> {
        Some(&self.node_selector).filter(|s| !s.is_empty())
    }

    /// Per-replica resources x replicas, checked: what the tenant reserves on its node.
    pub fn footprint(&self) -> Result<placement::Resources, SpecError> {
        let replicas = self.effective_replicas();
        let needs = match self.mode {
            TenantMode::Standalone if replicas != 1 => Some("exactly 1"),
            TenantMode::Cluster if replicas < 2 => Some("at least 2"),
            _ => None,
        };
        if let Some(needs) = needs {
            return Err(SpecError::ReplicasForMode {
                mode: self.mode,
                replicas,
                needs,
            });
        }
        let resources = self.resources.to_resources()?;
        u64::try_from(replicas)
            .ok()
            .and_then(|factor| resources.checked_mul(factor))
            .ok_or(SpecError::FootprintOverflows {
                resources,
                replicas,
            })
    }
}
