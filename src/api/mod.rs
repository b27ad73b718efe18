//! The custom resources, `Tenant`, `Node`, `NodeClass` and `NodeRequest`, in group
//! `placement.tenant-placer.dev/v1alpha1`.
//!
//! Rules enforced here:
//! - the Rust types are the single source of the CRD schemas (`tenant-placer crd` prints them,
//!   `crds/` holds them, a test fails when they drift);
//! - quantities are `int64` in the API between 0 and 2^53-1 (a tenant asks at least 1 thread and
//!   1 GB of memory), replicas at most [`MAX_REPLICAS`], overcommit ratios within placement's
//!   bounds: the schema refuses what the controller cannot hold; conversion into the pure
//!   [`placement::Resources`] is checked and a negative or oversized amount is an error that
//!   names the field, never a panic;
//! - our `Node` shares its kind name with core `v1/Node`: import the core one under an alias;
//! - what the controller rewrites anyway is read leniently: a condition's unparsable transition
//!   time (an older schema let in `not-a-time`) reads as [`Condition::UNREADABLE_TIME`] and is
//!   never kept, so the next status write replaces it.

mod allocatable;
mod amounts;
pub mod capi;
mod claim;
mod condition;
mod ledger;
mod marks;
mod node;
mod node_request;
mod registration;
mod selector;
mod tenant;
mod wants;

pub use allocatable::{BadQuantity, allocatable_capacity};
pub use amounts::{MAX_AMOUNT, NegativeAmount, ResourceAmounts};
pub use claim::{Claim, spread_to};
pub use condition::Condition;
pub use marks::{CONSOLIDATING_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION, DoNotDisrupt, Resting};
pub use node::{
    AllocationEntry, DRAINED_CONDITION, NODE_FINALIZER, Node, NodeSpec, NodeState, NodeStatus,
    OVER_CAPACITY_CONDITION, OvercommitRatios,
};
pub use node_request::{
    AVAILABLE_CONDITION, ClusterApiSource, DELIVERS_CONDITION, NODE_CLASS_LABEL,
    NODE_REQUEST_LABEL, NamespacedName, NodeClass, NodeClassSpec, NodeClassStatus, NodeRequest,
    NodeRequestPhase, NodeRequestSpec, NodeRequestStatus, NodeRequestUse,
};
pub use registration::{REGISTERED_LABEL, Registration, core_state};
pub use selector::{LabelKey, LabelSelector, SelectorError};
pub use tenant::{
    MAX_REPLICAS, MigrationStatus, PLACED_CONDITION, PlacedReason, SpreadPlacement,
    TENANT_FINALIZER, Tenant, TenantMode, TenantPhase, TenantSpec, TenantSpread, TenantStatus,
    ZONE_LABEL, selectors_by_uid,
};
pub use wants::{SpreadAsk, Wants};

use kube::CustomResourceExt;
use serde::Serialize;

/// The API group of both kinds.
pub const GROUP: &str = "placement.tenant-placer.dev";

/// Every CRD as a YAML document, Tenant first, as `tenant-placer crd` prints them.
pub fn crd_yaml() -> Result<Vec<(&'static str, String)>, serde_saphyr::SerializeError> {
    Ok(vec![
        ("tenant.yaml", to_yaml(&Tenant::crd())?),
        ("node.yaml", to_yaml(&Node::crd())?),
        ("nodeclass.yaml", to_yaml(&NodeClass::crd())?),
        ("noderequest.yaml", to_yaml(&NodeRequest::crd())?),
    ])
}

fn to_yaml<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(value)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_tenant_key_names_its_tenant_and_other_text_names_none() {
        let tenant = crate::testing::tenant("acme").namespace("team-a").build();
        let reference = Tenant::reference(&tenant.key()).unwrap();
        assert_eq!(
            reference,
            kube::runtime::reflector::ObjectRef::from_obj(&tenant)
        );
        assert_eq!(Tenant::reference("no-slash"), None);
    }
}
