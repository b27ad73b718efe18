//! Nodes registered from the cluster (`--register-nodes`): what a core `v1/Node` makes of the
//! placement Node of its name.
//!
//! ```text
//!   core Node ──▶ capacity   status.allocatable (allocatable_capacity: whole cores, whole GiB)
//!             ──▶ state      Offline when Ready is not True, else Cordoned when
//!                            spec.unschedulable, else Online
//!             ──▶ labels     its own, plus placement.tenant-placer.dev/registered: "true"
//! ```
//!
//! Rules enforced here:
//! - a placement Node is registered when it carries [`REGISTERED_LABEL`] with the value `"true"`,
//!   and only then: any other Node of the same name is someone else's;
//! - NotReady wins over unschedulable: a node whose Ready condition is not `True` (`False`,
//!   `Unknown`, or none reported yet) is `Offline` even when cordoned, since Offline is the
//!   stricter of the two (both keep their tenants and take no new ones; an Offline node also
//!   lets no tenant grow in place);
//! - a registered Node set to `Draining` stays `Draining`: a drain someone started (a person, or
//!   consolidation) is not undone by the registration;
//! - an allocatable that cannot be read is an error naming the resource ([`BadQuantity`]), never a
//!   guess.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node as CoreNode;
use kube::ResourceExt;

use super::allocatable::{BadQuantity, allocatable_capacity};
use super::amounts::ResourceAmounts;
use super::node::{Node, NodeState};

/// The label a placement Node registered from a core Node carries (value `"true"`).
pub const REGISTERED_LABEL: &str = "placement.tenant-placer.dev/registered";

/// What a core Node makes of its placement Node: the fields the registration owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub capacity: ResourceAmounts,
    /// The state the core Node's readiness and schedulability give (see the module rules).
    pub state: NodeState,
    /// The core Node's labels and [`REGISTERED_LABEL`].
    pub labels: BTreeMap<String, String>,
}

impl Registration {
    /// What `core` makes of its placement Node, or why its allocatable cannot be read.
    pub fn of(core: &CoreNode) -> Result<Registration, BadQuantity> {
        let empty = BTreeMap::new();
        let allocatable = core
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .unwrap_or(&empty);
        let capacity = allocatable_capacity(allocatable)?;
        let mut labels = core.labels().clone();
        labels.insert(REGISTERED_LABEL.to_owned(), "true".to_owned());
        Ok(Registration {
            capacity,
            state: core_state(core),
            labels,
        })
    }

    /// The state to keep on a placement Node now in `current`: a drain stays (see the rules).
    pub fn state_over(&self, current: NodeState) -> NodeState {
        if current == NodeState::Draining {
            NodeState::Draining
        } else {
            self.state
        }
    }
}

/// The placement state a core Node's readiness and schedulability give: `Offline` when its Ready
/// condition is not `True`, else `Cordoned` when it is unschedulable, else `Online`.
pub fn core_state(core: &CoreNode) -> NodeState {
    let ready = core
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let unschedulable = core
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    if !ready {
        NodeState::Offline
    } else if unschedulable {
        NodeState::Cordoned
    } else {
        NodeState::Online
    }
}

impl Node {
    /// Whether this Node was registered from a core Node (it carries [`REGISTERED_LABEL`]:
    /// `"true"`).
    pub fn is_registered(&self) -> bool {
        self.labels().get(REGISTERED_LABEL).map(String::as_str) == Some("true")
    }
}
