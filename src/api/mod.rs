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

mod claim;
mod ledger;
mod node;
mod provision;
mod selector;
mod tenant;

pub use claim::Claim;
pub use node::{
    AllocationEntry, DRAINED_CONDITION, NODE_FINALIZER, Node, NodeSpec, NodeState, NodeStatus,
    OVER_CAPACITY_CONDITION, OvercommitRatios,
};
pub use provision::{
    NODE_CLASS_LABEL, NODE_REQUEST_LABEL, NodeClass, NodeClassSpec, NodeRequest, NodeRequestPhase,
    NodeRequestSpec, NodeRequestStatus,
};
pub use selector::{LabelSelector, SelectorError};
pub use tenant::{
    MAX_REPLICAS, MigrationStatus, PLACED_CONDITION, PlacedReason, TENANT_FINALIZER, Tenant,
    TenantMode, TenantPhase, TenantSpec, TenantStatus,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of both kinds.
pub const GROUP: &str = "placement.tenant-placer.dev";

/// The largest amount the API accepts, 2^53 - 1: JSON clients that read numbers as doubles
/// (kubectl's JSONPath, JavaScript) keep every amount up to it exact.
pub const MAX_AMOUNT: i64 = 9_007_199_254_740_991;

/// An amount in each of the three dimensions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAmounts {
    /// CPU threads.
    #[schemars(range(min = 0, max = MAX_AMOUNT))]
    pub threads: i64,
    /// Memory, in whole gigabytes.
    #[schemars(range(min = 0, max = MAX_AMOUNT))]
    pub memory_gb: i64,
    /// Storage, in whole gigabytes.
    #[schemars(range(min = 0, max = MAX_AMOUNT))]
    pub storage_gb: i64,
}

/// A condition in the usual Kubernetes shape: Tenants (Placed) and Nodes (OverCapacity, Drained)
/// carry the same kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition type: Placed (Tenant), OverCapacity or Drained (Node).
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// A CamelCase reason.
    pub reason: String,
    /// A human sentence.
    pub message: String,
    /// When the status last changed.
    #[serde(deserialize_with = "lenient_time")]
    pub last_transition_time: Time,
    /// The metadata.generation this condition describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A transition time, or [`Condition::UNREADABLE_TIME`] when its text is not one.
fn lenient_time<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Time, D::Error> {
    let text = String::deserialize(deserializer)?;
    Ok(text.parse().map_or(Condition::UNREADABLE_TIME, Time))
}

impl Condition {
    /// What an unparsable transition time reads as: the Unix epoch, which no controller writes.
    pub const UNREADABLE_TIME: Time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);

    /// A condition of `type_`, keeping the transition time of the one in `previous` while its
    /// status stays the same (the one rule for transition times); an unreadable time is not kept.
    pub fn keeping_time(
        previous: &[Condition],
        type_: &str,
        status: &str,
        reason: &str,
        message: String,
        observed_generation: Option<i64>,
        now: &Time,
    ) -> Condition {
        let last_transition_time = match previous.iter().find(|c| c.type_ == type_) {
            Some(p) if p.status == status && p.last_transition_time != Self::UNREADABLE_TIME => {
                p.last_transition_time.clone()
            }
            _ => now.clone(),
        };
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            last_transition_time,
            observed_generation,
        }
    }
}

/// An amount that cannot be used: negative, which only a hand edit or an old schema lets in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} is {value}; amounts must be whole numbers of at least 0")]
pub struct NegativeAmount {
    pub field: &'static str,
    pub value: i64,
}

impl ResourceAmounts {
    pub const fn new(threads: i64, memory_gb: i64, storage_gb: i64) -> Self {
        ResourceAmounts {
            threads,
            memory_gb,
            storage_gb,
        }
    }

    /// Checked conversion into placement's unsigned amounts.
    pub fn to_resources(&self) -> Result<placement::Resources, NegativeAmount> {
        let amount = |field: &'static str, value: i64| {
            u64::try_from(value).map_err(|_| NegativeAmount { field, value })
        };
        Ok(placement::Resources::new(
            amount("threads", self.threads)?,
            amount("memoryGb", self.memory_gb)?,
            amount("storageGb", self.storage_gb)?,
        ))
    }
}

impl From<placement::Resources> for ResourceAmounts {
    /// Placement amounts never exceed `i64::MAX` ([`placement::Resources::LIMIT`]).
    fn from(resources: placement::Resources) -> Self {
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        ResourceAmounts {
            threads: clamp(resources.threads),
            memory_gb: clamp(resources.memory_gb),
            storage_gb: clamp(resources.storage_gb),
        }
    }
}

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

    #[test]
    fn a_condition_time_that_cannot_be_parsed_reads_as_unreadable_and_is_not_kept() {
        let read: Condition = serde_json::from_value(serde_json::json!({
            "type": "OverCapacity", "status": "False", "reason": "WithinCapacity",
            "message": "", "lastTransitionTime": "not-a-time",
        }))
        .unwrap();
        assert_eq!(read.last_transition_time, Condition::UNREADABLE_TIME);
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let next = Condition::keeping_time(
            &[read],
            "OverCapacity",
            "False",
            "WithinCapacity",
            String::new(),
            None,
            &now,
        );
        assert_eq!(
            next.last_transition_time, now,
            "rewritten at the next write"
        );
    }
}
