//! Cluster API's `MachineDeployment` and `Machine` (cluster.x-k8s.io/v1beta2), as far as the
//! cluster-api provisioner reads them, in minimal types of our own: only the fields read here
//! are declared, everything else in the objects is ignored when reading and never written (the
//! provisioner writes Machines by merge patches of annotations, and MachineDeployments only by
//! merge patches of `spec.replicas` with [`INTENDED_REPLICAS_ANNOTATION`]).
//!
//! The shapes follow Cluster API's v1beta2 types: `spec.replicas` (absent: Cluster API defaults
//! it to 1), `status.phase`, `status.nodeRef.name`, `status.deprecated.v1beta1.failureReason`
//! and `failureMessage`, and the v1beta1 conditions kept there (a `False` one of severity
//! `Error` is a failure).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// Cluster API's group and the version read.
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";
pub const CAPI_VERSION: &str = "v1beta2";

/// The label Cluster API puts on a MachineDeployment's Machines: the deployment's name.
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";

/// The annotation that makes a MachineSet delete this Machine first when replicas go down.
pub const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";

/// cluster-autoscaler's most replicas for a MachineDeployment; never scaled past.
pub const MAX_SIZE_ANNOTATION: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";

/// On a MachineDeployment: the replicas the cluster-api provisioner last set, written in the same
/// patch as `spec.replicas`. Replicas that say otherwise were changed by someone else since.
pub const INTENDED_REPLICAS_ANNOTATION: &str = "placement.tenant-placer.dev/intended-replicas";

/// The annotation that claims a Machine for a NodeRequest (its name). A Machine claimed once is
/// never claimed again.
pub const CLAIM_ANNOTATION: &str = super::NODE_REQUEST_LABEL;

/// The annotation on a placement Node made from a Machine: `<namespace>/<name>` (an
/// annotation, since a label value cannot hold the `/`).
pub const MACHINE_ANNOTATION: &str = "placement.tenant-placer.dev/machine";

/// A MachineDeployment: a set of alike Machines whose count is `spec.replicas`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineDeployment {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MachineDeploymentSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineDeploymentSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

impl MachineDeployment {
    /// The replicas asked for: `spec.replicas`, 1 when unset (Cluster API's default).
    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }

    /// cluster-autoscaler's max size annotation, when it reads as a number.
    pub fn max_size(&self) -> Option<i32> {
        self.number_annotation(MAX_SIZE_ANNOTATION)
    }

    /// The replicas the cluster-api provisioner last set ([`INTENDED_REPLICAS_ANNOTATION`]),
    /// when it reads as a number; `None`: never scaled by it (or by a version that did not say).
    pub fn intended_replicas(&self) -> Option<i32> {
        self.number_annotation(INTENDED_REPLICAS_ANNOTATION)
    }

    /// An annotation that reads as a number.
    fn number_annotation(&self, key: &str) -> Option<i32> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)?
            .trim()
            .parse()
            .ok()
    }
}

/// A Machine: one host Cluster API makes, and the core Node it becomes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: MachineStatus,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Absent until Cluster API's Machine controller first sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachinePhase>,
    #[serde(default)]
    pub node_ref: Option<NodeReference>,
    #[serde(default)]
    pub deprecated: Option<Deprecated>,
}

/// Cluster API's `MachinePhase` (v1beta2): a summary Cluster API writes, read here only to tell
/// `Running` (with a `nodeRef`: delivered) and `Failed` (a failure, as v1beta1 objects convert).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MachinePhase {
    Pending,
    Provisioning,
    Provisioned,
    Running,
    Updating,
    Deleting,
    Deleted,
    /// Deprecated in v1beta2 (kept for objects converted from v1beta1).
    Failed,
    Unknown,
    /// A phase this version does not know: read as none of the above, never an error.
    #[serde(other)]
    Other,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeReference {
    #[serde(default)]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Deprecated {
    #[serde(default)]
    pub v1beta1: Option<V1Beta1Status>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct V1Beta1Status {
    #[serde(default)]
    pub failure_reason: Option<String>,
    #[serde(default)]
    pub failure_message: Option<String>,
    #[serde(default)]
    pub conditions: Vec<V1Beta1Condition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct V1Beta1Condition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub severity: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

impl Machine {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    /// The NodeRequest this Machine is claimed for.
    pub fn claim(&self) -> Option<&str> {
        self.annotation(CLAIM_ANNOTATION)
    }

    /// Marked to go first when replicas are lowered.
    pub fn marked_for_deletion(&self) -> bool {
        self.annotation(DELETE_MACHINE_ANNOTATION).is_some()
    }

    /// The core Node it runs as, once `Running` with a `nodeRef`.
    pub fn running_node(&self) -> Option<&str> {
        let node = self.status.node_ref.as_ref()?.name.as_str();
        (self.status.phase == Some(MachinePhase::Running) && !node.is_empty()).then_some(node)
    }

    /// Why it failed, in Cluster API's own words: phase `Failed`, a failure reason or message,
    /// or a v1beta1 condition `False` of severity `Error`.
    pub fn failure(&self) -> Option<Cow<'_, str>> {
        let old = self
            .status
            .deprecated
            .as_ref()
            .and_then(|d| d.v1beta1.as_ref());
        if let Some(old) = old {
            match (&old.failure_reason, &old.failure_message) {
                (Some(reason), Some(message)) => {
                    return Some(format!("{reason}: {message}").into());
                }
                (None, Some(text)) | (Some(text), None) => return Some(text.as_str().into()),
                (None, None) => {}
            }
            let failed = old
                .conditions
                .iter()
                .find(|c| c.status == "False" && c.severity == "Error");
            if let Some(c) = failed {
                return Some(format!("{} is False ({}): {}", c.type_, c.reason, c.message).into());
            }
        }
        (self.status.phase == Some(MachinePhase::Failed)).then_some(Cow::Borrowed("phase Failed"))
    }
}

macro_rules! capi_resource {
    ($type:ty, $kind:literal, $plural:literal) => {
        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(CAPI_GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(CAPI_VERSION)
            }
            fn api_version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("cluster.x-k8s.io/v1beta2")
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

capi_resource!(MachineDeployment, "MachineDeployment", "machinedeployments");
capi_resource!(Machine, "Machine", "machines");

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn machine(status: serde_json::Value) -> Machine {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Machine",
            "metadata": {"name": "md-a-x7k2p", "namespace": "fleet",
                         "labels": {DEPLOYMENT_NAME_LABEL: "md-a"}},
            "spec": {"clusterName": "c", "bootstrap": {"dataSecretName": "s"},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "HetznerBareMetalMachine", "name": "x"}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_machine_is_read_as_cluster_api_writes_it() {
        let running = machine(json!({
            "phase": "Running",
            "nodeRef": {"name": "worker-1"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                            "lastTransitionTime": "2026-12-01T00:00:00Z", "message": ""}],
            "initialization": {"infrastructureProvisioned": true},
        }));
        assert_eq!(running.running_node(), Some("worker-1"));
        assert_eq!(running.failure(), None);
        let provisioned = machine(json!({"phase": "Provisioned", "nodeRef": {"name": "w"}}));
        assert_eq!(provisioned.running_node(), None);
        assert_eq!(machine(json!({})).running_node(), None);
        // A phase a later Cluster API adds is read, as none of ours.
        let later = machine(json!({"phase": "Hibernating", "nodeRef": {"name": "w"}}));
        assert_eq!(later.status.phase, Some(MachinePhase::Other));
        assert_eq!(later.running_node(), None);
    }

    #[test]
    fn a_failure_is_told_in_cluster_apis_own_words() {
        let cases = [
            (
                json!({"phase": "Failed", "deprecated": {"v1beta1": {
                    "failureReason": "CreateError", "failureMessage": "no server in stock"}}}),
                Some("CreateError: no server in stock"),
            ),
            (
                json!({"deprecated": {"v1beta1": {"failureMessage": "rescue failed"}}}),
                Some("rescue failed"),
            ),
            (
                json!({"deprecated": {"v1beta1": {"conditions": [
                    {"type": "InfrastructureReady", "status": "False", "severity": "Error",
                     "reason": "ProvisioningFailed", "message": "bad image"},
                    {"type": "Ready", "status": "False", "severity": "Info", "reason": "Waiting"}]}}}),
                Some("InfrastructureReady is False (ProvisioningFailed): bad image"),
            ),
            (
                json!({"deprecated": {"v1beta1": {"conditions": [
                    {"type": "Ready", "status": "False", "severity": "Warning"}]}}}),
                None,
            ),
            (json!({"phase": "Failed"}), Some("phase Failed")),
            (json!({"phase": "Provisioning"}), None),
        ];
        for (status, want) in cases {
            assert_eq!(
                machine(status.clone()).failure().as_deref(),
                want,
                "{status}"
            );
        }
    }

    #[test]
    fn a_deployment_defaults_to_one_replica_and_reads_its_max_size_and_intended_replicas() {
        let md: MachineDeployment = serde_json::from_value(json!({
            "metadata": {"name": "md", "namespace": "fleet",
                         "annotations": {MAX_SIZE_ANNOTATION: "5",
                                         INTENDED_REPLICAS_ANNOTATION: "3"}},
            "spec": {"clusterName": "c", "template": {"spec": {}}},
        }))
        .unwrap();
        assert_eq!(
            (md.replicas(), md.max_size(), md.intended_replicas()),
            (1, Some(5), Some(3))
        );
        let md: MachineDeployment =
            serde_json::from_value(json!({"spec": {"replicas": 0}})).unwrap();
        assert_eq!(
            (md.replicas(), md.max_size(), md.intended_replicas()),
            (0, None, None)
        );
        // Edited by hand into something else: as if never written.
        let md: MachineDeployment = serde_json::from_value(json!({
            "metadata": {"annotations": {INTENDED_REPLICAS_ANNOTATION: "two"}},
        }))
        .unwrap();
        assert_eq!(md.intended_replicas(), None);
    }
}
