//! The core `v1` `Node`, as its registry strategy (`pkg/registry/core/node`) and its printer
//! (`printNode`) treat it. The generic store does the rest: cluster-scoped, no generation,
//! unconditional updates, no create-on-update, a `Status` answered on delete.
//!
//! Rules, as the real strategy applies them:
//! - a create keeps the status it is given ("Nodes allow *all* fields, including status, to be
//!   set on create"), but not `spec.configSource` nor `status.config`;
//! - an update keeps the stored status; a write to `/status` keeps the stored spec only (its
//!   labels and annotations are written), and drops a `status.config` the node did not have;
//! - `spec.configSource` (unless the node had one) is dropped on update;
//! - writes warn of `spec.externalID` (and of a kept `spec.configSource`);
//! - the field selector `spec.unschedulable` reads `false` when the field is absent.
//!
//! Not done: `ValidateNode` and `ValidateNodeUpdate` (taints, pod CIDRs, resource quantities,
//! ...), and the `proxy` subresource.

use serde_json::Value;

use crate::kinds::Kind;

/// Whether a kind is the core Node.
pub(crate) fn is_node(kind: &Kind) -> bool {
    kind.group.is_empty() && kind.plural == "nodes"
}

fn remove(obj: &mut Value, parent: &str, field: &str) {
    if let Some(map) = obj.get_mut(parent).and_then(Value::as_object_mut) {
        map.remove(field);
    }
}

fn has(obj: &Value, parent: &str, field: &str) -> bool {
    obj.get(parent)
        .and_then(|p| p.get(field))
        .is_some_and(|v| !v.is_null())
}

/// `PrepareForCreate`: the removed dynamic kubelet configuration goes.
pub(crate) fn prepare_for_create(obj: &mut Value) {
    remove(obj, "spec", "configSource");
    remove(obj, "status", "config");
}

/// `PrepareForUpdate` of the main resource (`on_status` false) or of `/status`, for what the
/// generic handling of the status subresource leaves.
pub(crate) fn prepare_for_update(new: &mut Value, old: &Value, on_status: bool) {
    if on_status {
        if !has(old, "status", "config") {
            remove(new, "status", "config");
        }
    } else if !has(old, "spec", "configSource") {
        remove(new, "spec", "configSource");
    }
}

/// `WarningsOnCreate` and `WarningsOnUpdate` of the main resource.
pub(crate) fn warnings(obj: &Value) -> Vec<String> {
    let mut warnings = Vec::new();
    if has(obj, "spec", "configSource") {
        warnings.push("spec.configSource: the feature is removed".to_owned());
    }
    if obj["spec"]["externalID"]
        .as_str()
        .is_some_and(|id| !id.is_empty())
    {
        warnings.push(
            "spec.externalID: this field is deprecated, and is unused by Kubernetes".to_owned(),
        );
    }
    warnings
}

/// The Status column: `Ready` or `NotReady` from the last `Ready` condition (`Unknown` without
/// one), then `SchedulingDisabled` for an unschedulable node.
pub(crate) fn status_cell(node: &Value) -> String {
    let ready = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .rfind(|c| c["type"] == "Ready");
    let mut status = vec![match ready {
        Some(c) if c["status"] == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if node["spec"]["unschedulable"] == true {
        status.push("SchedulingDisabled");
    }
    status.join(",")
}

/// The Roles column: from `node-role.kubernetes.io/<role>` keys and `kubernetes.io/role`
/// values, sorted, or `<none>`.
pub(crate) fn roles_cell(node: &Value) -> String {
    let mut roles: Vec<&str> = node["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) => Some(role).filter(|r| !r.is_empty()),
            None if k == "kubernetes.io/role" => v.as_str().filter(|r| !r.is_empty()),
            None => None,
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.join(",")
    }
}

/// The first address of a type (`InternalIP`, `ExternalIP`), or `<none>`.
pub(crate) fn address_cell(node: &Value, type_: &str) -> String {
    node["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["type"] == type_)
        .and_then(|a| a["address"].as_str())
        .unwrap_or("<none>")
        .to_owned()
}

/// A `status.nodeInfo` field, or `empty` when it is empty.
pub(crate) fn info_cell(node: &Value, field: &str, empty: &str) -> String {
    node["status"]["nodeInfo"][field]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or(empty)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_status_cell_reads_the_ready_condition_and_unschedulable() {
        let node = |conditions: Value, unschedulable: bool| json!({"spec": {"unschedulable": unschedulable}, "status": {"conditions": conditions}});
        let ready = |s: &str| json!([{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": s}]);
        // (node, cell): any status but True is NotReady, Unknown included.
        let cases = [
            (node(ready("True"), false), "Ready"),
            (node(ready("False"), false), "NotReady"),
            (node(ready("Unknown"), false), "NotReady"),
            (node(json!([]), false), "Unknown"),
            (node(ready("True"), true), "Ready,SchedulingDisabled"),
            (json!({}), "Unknown"),
        ];
        for (node, cell) in cases {
            assert_eq!(status_cell(&node), cell, "{node}");
        }
    }

    #[test]
    fn the_roles_cell_reads_node_role_labels() {
        let node = |labels: Value| json!({"metadata": {"labels": labels}});
        // (labels, cell): sorted and deduplicated; an empty role is no role.
        let cases = [
            (json!({}), "<none>"),
            (
                json!({"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": ""}),
                "control-plane,worker",
            ),
            (
                json!({"kubernetes.io/role": "worker", "node-role.kubernetes.io/worker": ""}),
                "worker",
            ),
            (
                json!({"node-role.kubernetes.io/": "", "kubernetes.io/role": ""}),
                "<none>",
            ),
        ];
        for (labels, cell) in cases {
            assert_eq!(roles_cell(&node(labels.clone())), cell, "{labels}");
        }
    }

    #[test]
    fn the_wide_cells_read_addresses_and_node_info() {
        let node = json!({"status": {
            "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.36.0", "osImage": ""},
        }});
        assert_eq!(address_cell(&node, "InternalIP"), "10.0.0.1");
        assert_eq!(address_cell(&node, "ExternalIP"), "<none>");
        assert_eq!(info_cell(&node, "kubeletVersion", ""), "v1.36.0");
        assert_eq!(info_cell(&node, "osImage", "<unknown>"), "<unknown>");
        assert_eq!(info_cell(&json!({}), "kubeletVersion", ""), "");
    }

    #[test]
    fn the_removed_kubelet_configuration_is_dropped_and_external_ids_warned_of() {
        let mut node = json!({"spec": {"configSource": {"configMap": {}}, "externalID": "x"},
                              "status": {"config": {}, "phase": "Running"}});
        assert_eq!(warnings(&node).len(), 2);
        prepare_for_create(&mut node);
        assert_eq!(
            node,
            json!({"spec": {"externalID": "x"}, "status": {"phase": "Running"}})
        );
        assert_eq!(
            warnings(&node),
            ["spec.externalID: this field is deprecated, and is unused by Kubernetes"]
        );
        let old = json!({"spec": {}, "status": {}});
        let mut new = json!({"spec": {"configSource": {}}, "status": {"config": {}}});
        prepare_for_update(&mut new, &old, false);
        assert_eq!(new, json!({"spec": {}, "status": {"config": {}}}));
        prepare_for_update(&mut new, &old, true);
        assert_eq!(new, json!({"spec": {}, "status": {}}));
    }
}
