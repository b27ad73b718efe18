//! The kinds that turn waiting into a purchase: `NodeClass` (a machine that can be bought) and
//! `NodeRequest` (one machine asked for, for named tenants), both cluster-scoped.
//!
//! Rules enforced here (docs/design.md, "Node requests"):
//! - a class offers at least 1 thread and 1 GB of memory (a node that holds nothing is no use);
//!   its limit is at least 1 when set, its monthly cost at least 0;
//! - a request's spec is written once by the controller (class, capacity, the tenants it is for)
//!   and never changed: the CEL rule refuses an update of it;
//! - a request's status is written by a provisioner (`Pending`, `Provisioning`, `Ready` with the
//!   Node's name, or `Failed` with why); the Node it makes carries the label
//!   [`NODE_REQUEST_LABEL`] naming the request.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::amounts::{MAX_AMOUNT, NegativeAmount, ResourceAmounts};

/// The label a provisioner puts on the Node it makes for a request: the request's name.
pub const NODE_REQUEST_LABEL: &str = "placement.tenant-placer.dev/node-request";

/// The label a provisioner puts on the Node it makes for a request: the class's name.
pub const NODE_CLASS_LABEL: &str = "placement.tenant-placer.dev/node-class";

/// A kind of bare-metal machine that can be bought, and how many of it at most.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "placement.tenant-placer.dev",
    version = "v1alpha1",
    kind = "NodeClass",
    status = "NodeClassStatus",
    shortname = "nclass",
    category = "placement",
    doc = "A kind of bare-metal machine a provisioner can buy (e.g. an OVH or Hetzner model). \
           tenant-placer requests one of these when tenants wait for capacity.",
    printcolumn(
        name = "Provider",
        type_ = "string",
        json_path = ".spec.provider",
        description = "Who sells it, for the provisioner"
    ),
    printcolumn(
        name = "Threads",
        type_ = "integer",
        json_path = ".spec.capacity.threads",
        description = "Thread capacity of one machine"
    ),
    printcolumn(
        name = "Memory-GB",
        type_ = "integer",
        json_path = ".spec.capacity.memoryGb",
        description = "Memory of one machine, GB"
    ),
    printcolumn(
        name = "Storage-GB",
        type_ = "integer",
        json_path = ".spec.capacity.storageGb",
        description = "Storage of one machine, GB"
    ),
    printcolumn(
        name = "Monthly-Cost",
        type_ = "integer",
        json_path = ".spec.monthlyCost",
        description = "What one machine costs a month"
    ),
    printcolumn(
        name = "Limit",
        type_ = "integer",
        json_path = ".spec.limit",
        description = "Most machines of this class at once"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassSpec {
    /// What one machine offers in each dimension (at least 1 thread and 1 GB of memory).
    #[schemars(transform = super::tenant::at_least_one_thread_and_gigabyte)]
    pub capacity: ResourceAmounts,
    /// Free text for the provisioner: who sells it, and which model (e.g. "hetzner/AX102").
    pub provider: String,
    /// What one machine costs a month, in whole units of the fleet's currency. The planner buys
    /// the cheapest set of machines; a class without a cost is bought only when no priced class
    /// can hold a tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_AMOUNT))]
    pub monthly_cost: Option<i64>,
    /// The most machines of this class at once (requested and not handed back). Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit: Option<i32>,
    /// Labels the provisioner gives each Node of this class: at most 64, each key and value
    /// as Kubernetes labels are (a key is a name of at most 63 characters, optionally after a
    /// DNS-subdomain prefix of at most 253 and `/`; a value at most 63 characters, or empty).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = bounded_label_map)]
    #[x_kube(validation = Rule::new(LABEL_KEYS_RULE).message(LABEL_KEYS_MESSAGE))]
    #[x_kube(validation = Rule::new(LABEL_VALUES_RULE).message(LABEL_VALUES_MESSAGE))]
    pub labels: BTreeMap<String, String>,
    /// Machines of this class come from a Cluster API MachineDeployment: the controller's
    /// `--provisioner cluster-api` scales it and claims its Machines. Unset: another provisioner
    /// serves this class.
    #[serde(
        default,
        rename = "clusterAPI",
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_api: Option<ClusterApiSource>,
}

/// The most labels a class may give its Nodes.
pub const MAX_CLASS_LABELS: u64 = 64;

/// Every key is a Kubernetes label key: a name of 1 to 63 characters (alphanumerics, with `-`,
/// `_` and `.` inside), optionally after a lowercase RFC 1123 subdomain of at most 253
/// characters and `/` (apimachinery's `IsQualifiedName`). A real server stores the class with
/// any key and then refuses every Node made from it.
// NB: a 1.36 API server refuses a CRD whose rules it estimates over its cost limit, and it
// estimates from the schema's bounds (`bounded_label_map`). With 64 pairs and values of at most
// 63 characters the values' rule costs about 64 x (ceil(63 x 0.1) x ceil(49 x 0.25)) = 64 x 91,
// ~6,000 (keys are estimated at no length); without the bounds a map is taken to fill the 3 MB
// request (~390,000 pairs of 3 MB strings) and the CRD is refused.
const LABEL_KEYS_RULE: &str = r"self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && k.matches('^([^/]{1,253}/)?[^/]+$'))";

/// The refusal of a bad key, in the words apimachinery uses for a bad label key.
const LABEL_KEYS_MESSAGE: &str = "a label key must be a name of at most 63 characters, optionally prefixed by a DNS subdomain of at most 253 characters and '/': the name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'); the prefix part must be a lowercase RFC 1123 subdomain (e.g. 'topology.kubernetes.io')";

/// Every value is a Kubernetes label value: empty, or 1 to 63 characters as a name is.
const LABEL_VALUES_RULE: &str =
    r"self.all(k, self[k].matches('^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$'))";

/// The refusal of a bad value, in the words apimachinery uses for a bad label value.
const LABEL_VALUES_MESSAGE: &str = "a label value must be no more than 63 characters, and a valid label value must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue', or 'my_value', or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// A class's label map, bounded so that a real API server can bound the cost of its CEL rules:
/// at most [`MAX_CLASS_LABELS`] pairs, values of at most 63 characters.
fn bounded_label_map(schema: &mut schemars::Schema) {
    schema.insert("maxProperties".into(), MAX_CLASS_LABELS.into());
    schema.insert(
        "additionalProperties".into(),
        serde_json::json!({"type": "string", "maxLength": 63}),
    );
}

/// Where a class's machines come from in Cluster API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterApiSource {
    /// The MachineDeployment (cluster.x-k8s.io) that makes machines of this class.
    pub machine_deployment: NamespacedName,
}

/// A namespaced object's name.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub struct NamespacedName {
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

impl NamespacedName {
    /// `namespace/name`, as written in a status; None for other text.
    pub fn parse(text: &str) -> Option<NamespacedName> {
        let (namespace, name) = text.split_once('/')?;
        (!namespace.is_empty() && !name.is_empty() && !name.contains('/')).then(|| NamespacedName {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }
}

impl std::fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What a provisioner says of a class: whether it can buy it now, and why not.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassStatus {
    /// `Available`: True while the provisioner can buy this class; False says why not (say,
    /// its MachineDeployment does not exist), and no machine of it is requested meanwhile.
    /// `Delivers`: False when the Nodes of this class report less than `spec.capacity` (the
    /// message says what), True once they report what it promises.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<super::Condition>,
    /// The smallest capacity, per dimension, that a Node bought of this class has reported, when
    /// that is less than `spec.capacity`: machines of this class are planned with it while the
    /// `Delivers` condition's observedGeneration is the class's generation (editing the class
    /// starts learning afresh). Written by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered: Option<ResourceAmounts>,
}

/// The condition on a NodeClass that says whether its machines can be bought now.
pub const AVAILABLE_CONDITION: &str = "Available";

/// The condition on a NodeClass that says whether its Nodes report the capacity it promises.
pub const DELIVERS_CONDITION: &str = "Delivers";

impl NodeClass {
    /// Why this class cannot be bought now, when its `Available` condition is False.
    pub fn unavailable(&self) -> Option<&str> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == AVAILABLE_CONDITION && c.status == "False")
            .map(|c| c.message.as_str())
    }
}

impl NodeClass {
    /// What a machine of this class has been seen to deliver, when less than it promises and
    /// learned for the class as it is now (the `Delivers` condition's observedGeneration is its
    /// generation): what planning counts on instead of `spec.capacity`.
    pub fn delivered(&self) -> Option<ResourceAmounts> {
        let status = self.status.as_ref()?;
        let learned = status
            .conditions
            .iter()
            .find(|c| c.type_ == DELIVERS_CONDITION && c.status == "False")?;
        (learned.observed_generation == self.metadata.generation)
            .then_some(status.delivered)
            .flatten()
    }

    /// The labels a Node of this class carries: the class's own, and its name under
    /// [`NODE_CLASS_LABEL`] (a provisioner adds [`NODE_REQUEST_LABEL`] too).
    pub fn node_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.spec.labels.clone();
        labels.insert(
            NODE_CLASS_LABEL.to_owned(),
            self.metadata.name.clone().unwrap_or_default(),
        );
        labels
    }

    /// The class as purchase planning reads it, with `in_use` of its machines existing or
    /// requested. Prices are whole units here and whole cents for the planner (the schema's
    /// largest price fits); an error when the capacity cannot be read.
    /// What it offers is what its machines deliver when that was seen to be less
    /// ([`NodeClass::delivered`]): a tenant that fits only the promise is not bought for.
    pub fn offer(&self, in_use: usize) -> Result<placement::NodeClassOffer, NegativeAmount> {
        let promised = self.spec.capacity.to_resources()?;
        let capacity = match self.delivered().map(|d| d.to_resources()) {
            Some(Ok(delivered)) => promised.min_each(delivered),
            _ => promised,
        };
        Ok(placement::NodeClassOffer {
            name: self.metadata.name.clone().unwrap_or_default(),
            capacity,
            monthly_cost: self
                .spec
                .monthly_cost
                .and_then(|c| u64::try_from(c).ok())
                .and_then(|c| c.checked_mul(100)),
            limit: self.spec.limit.and_then(|l| u32::try_from(l).ok()),
            in_use: u32::try_from(in_use).unwrap_or(u32::MAX),
        })
    }
}

/// Where a request is: written by the provisioner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum NodeRequestPhase {
    /// Created, not yet taken up by a provisioner.
    #[default]
    Pending,
    /// A provisioner is buying and installing the machine.
    Provisioning,
    /// The Node exists (`status.nodeName`) and takes tenants.
    Ready,
    /// The provisioner gave up (`status.message` says why): the controller plans again.
    Failed,
}

impl NodeRequestPhase {
    /// Every phase, in lifecycle order.
    pub const ALL: [NodeRequestPhase; 4] = [
        NodeRequestPhase::Pending,
        NodeRequestPhase::Provisioning,
        NodeRequestPhase::Ready,
        NodeRequestPhase::Failed,
    ];
}

impl std::fmt::Display for NodeRequestPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(&format!("{self:?}"))
    }
}

/// One machine asked for, for the tenants that wait for it.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "placement.tenant-placer.dev",
    version = "v1alpha1",
    kind = "NodeRequest",
    shortname = "nreq",
    category = "placement",
    status = "NodeRequestStatus",
    doc = "A machine of a NodeClass that tenant-placer asks a provisioner for, because the named \
           tenants wait for capacity. The provisioner creates the Node (labelled with this \
           request's name) and sets the phase.",
    printcolumn(
        name = "Class",
        type_ = "string",
        json_path = ".spec.nodeClass",
        description = "The NodeClass asked for"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Pending, Provisioning, Ready or Failed"
    ),
    printcolumn(
        name = "Node",
        type_ = "string",
        json_path = ".status.nodeName",
        description = "The Node made for it, once Ready"
    ),
    printcolumn(
        name = "Use",
        type_ = "string",
        json_path = ".status.use",
        description = "What the purchase is used for: Awaited, InUse, Idle or Orphaned"
    ),
    printcolumn(
        name = "Tenants",
        type_ = "string",
        json_path = ".spec.tenants",
        description = "The tenants it is for"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf").message("a NodeRequest's spec is fixed once created: delete it and create another"))]
#[serde(rename_all = "camelCase")]
pub struct NodeRequestSpec {
    /// The NodeClass asked for.
    pub node_class: String,
    /// The class's capacity when it was asked for.
    pub capacity: ResourceAmounts,
    /// The tenants (namespace/name) it is for, oldest first.
    #[serde(default)]
    pub tenants: Vec<String>,
}

/// What the provisioner says of a request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeRequestStatus {
    #[serde(default)]
    pub phase: NodeRequestPhase,
    /// The Node made for it, once Ready.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// One sentence: what the provisioner is doing, or why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Cluster API: the MachineDeployment it is bought from (`namespace/name`), written with
    /// `scaleGeneration`: its machine is given back there even if its class is gone or changed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub machine_deployment: String,
    /// Cluster API: the Machine claimed for it (`namespace/name`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub machine: String,
    /// Cluster API: its MachineDeployment's `metadata.generation` when the provisioner set out to
    /// raise replicas for it, written before the raise; a later generation means the raise was
    /// made, so a restart never raises twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_generation: Option<i64>,
    /// What the purchase is used for, as the controller's capacity tick last judged it (the
    /// controller writes this field and `useSince` only; the rest is the provisioner's).
    #[serde(default, rename = "use", skip_serializing_if = "Option::is_none")]
    pub use_: Option<NodeRequestUse>,
    /// Since when it has been so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_since: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// What a purchase is used for (`status.use`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum NodeRequestUse {
    /// Bought for the waiting tenants it names; its machine does not hold them yet.
    Awaited,
    /// Its Node holds tenants.
    InUse,
    /// Its Node holds nothing and no waiting tenant could use it: handed back after the delay.
    Idle,
    /// Ready or Provisioning with no Node or Machine behind it: reported and retired.
    Orphaned,
}

impl NodeRequest {
    /// The Node a Ready request made: the one its status names (a provisioner may name it
    /// otherwise), else the one named after it.
    pub fn made_node(&self) -> &str {
        self.status
            .as_ref()
            .map(|s| s.node_name.as_str())
            .filter(|n| !n.is_empty())
            .or(self.metadata.name.as_deref())
            .unwrap_or_default()
    }

    /// The phase its status says (Pending without a status: no provisioner has seen it yet).
    pub fn phase(&self) -> NodeRequestPhase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }

    /// The Node a provisioner makes for it (the contract): named after it, with its capacity,
    /// its class's labels (when the class is still there), and [`NODE_REQUEST_LABEL`] and
    /// [`NODE_CLASS_LABEL`] (the class the request names, also when it was deleted meanwhile).
    pub fn node(&self, class: Option<&NodeClass>) -> super::Node {
        let name = self.metadata.name.clone().unwrap_or_default();
        let mut node = super::Node::new(
            &name,
            super::NodeSpec {
                capacity: self.spec.capacity,
                state: Default::default(),
                overcommit: None,
            },
        );
        let mut labels = class.map(NodeClass::node_labels).unwrap_or_default();
        labels.insert(NODE_REQUEST_LABEL.to_owned(), name);
        labels.insert(NODE_CLASS_LABEL.to_owned(), self.spec.node_class.clone());
        node.metadata.labels = Some(labels);
        node
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn class(monthly_cost: Option<i64>, limit: Option<i32>, threads: i64) -> NodeClass {
        NodeClass::new(
            "ax102",
            NodeClassSpec {
                capacity: ResourceAmounts::new(threads, 128, 1000),
                provider: "hetzner/AX102".into(),
                monthly_cost,
                limit,
                labels: BTreeMap::from([("zone".to_owned(), "fsn1".to_owned())]),
                cluster_api: None,
            },
        )
    }

    #[test]
    fn a_class_offers_its_capacity_price_in_cents_and_limit_and_labels_its_nodes() {
        let offer = class(Some(105), Some(4), 32).offer(2).unwrap();
        assert_eq!(
            offer,
            placement::NodeClassOffer {
                name: "ax102".into(),
                capacity: placement::Resources::new(32, 128, 1000),
                monthly_cost: Some(10_500),
                limit: Some(4),
                in_use: 2,
            }
        );
        let unpriced = class(None, None, 32).offer(0).unwrap();
        assert_eq!((unpriced.monthly_cost, unpriced.limit), (None, None));
        assert_eq!(
            class(None, None, -1).offer(0).unwrap_err(),
            crate::api::NegativeAmount {
                field: "threads",
                value: -1
            }
        );
        assert_eq!(
            class(None, None, 32).node_labels(),
            BTreeMap::from([
                ("zone".to_owned(), "fsn1".to_owned()),
                (NODE_CLASS_LABEL.to_owned(), "ax102".to_owned()),
            ])
        );
    }
}
