//! The committed CRD YAML must be exactly what the Rust types generate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use tenant_placer::api::{Node, NodeClass, NodeRequest, Tenant, crd_yaml};

const REGENERATE: &str = "regenerate with: cargo run -- crd --out-dir crds";

#[test]
fn committed_crds_match_the_rust_types() {
    for (file, generated) in crd_yaml().unwrap() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crds")
            .join(file);
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} is missing ({e}); {REGENERATE}", path.display()));
        assert!(
            committed == generated,
            "{} differs from the Rust types; {REGENERATE}",
            path.display()
        );
    }
}

#[test]
fn committed_crds_parse_back_into_the_same_definitions() {
    for (file, crd) in [
        ("tenant.yaml", Tenant::crd()),
        ("node.yaml", Node::crd()),
        ("nodeclass.yaml", NodeClass::crd()),
        ("noderequest.yaml", NodeRequest::crd()),
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crds")
            .join(file);
        let parsed: CustomResourceDefinition =
            serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(parsed, crd, "{file}");
    }
}

#[test]
fn the_crds_carry_the_names_subresource_columns_and_rules_of_the_design() {
    let tenant = Tenant::crd();
    assert_eq!(tenant.spec.group, "placement.tenant-placer.dev");
    assert_eq!(tenant.spec.scope, "Namespaced");
    assert_eq!(tenant.spec.names.short_names, Some(vec!["tn".into()]));
    assert_eq!(tenant.spec.names.categories, Some(vec!["placement".into()]));
    let version = &tenant.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<_> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Phase",
            "Node",
            "Placements",
            "Threads",
            "Memory-GB",
            "Storage-GB",
            "Mode",
            "Message",
            "Age"
        ]
    );
    let schema = serde_json::to_value(&version.schema).unwrap();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
    let rules = spec["x-kubernetes-validations"].as_array().unwrap();
    assert_eq!(rules.len(), 4);
    let fields: Vec<_> = rules.iter().map(|r| r["fieldPath"].clone()).collect();
    assert_eq!(
        fields,
        [".replicas", ".replicas", ".spread", ".spread"],
        "every CEL rule names its field: {rules:?}"
    );
    assert_eq!(
        spec["properties"]["spread"]["enum"],
        serde_json::json!(["None", "Nodes", "Zones"])
    );
    assert_eq!(
        spec["properties"]["mode"]["enum"],
        serde_json::json!(["Standalone", "Cluster"])
    );
    // A tenant asks at least 1 thread and 1 GB; every amount stays exact in a double.
    let request = &spec["properties"]["resources"]["properties"];
    assert_eq!(request["threads"]["minimum"], 1.0);
    assert_eq!(request["memoryGb"]["minimum"], 1.0);
    assert_eq!(request["storageGb"]["minimum"], 0.0);
    assert_eq!(request["threads"]["maximum"], 9_007_199_254_740_991.0);
    assert_eq!(spec["properties"]["replicas"]["maximum"], 1000.0);
    // spec.nodeSelector: an optional label map, values shaped as Kubernetes label values.
    let selector = &spec["properties"]["nodeSelector"];
    assert_eq!(selector["type"], "object");
    assert_eq!(selector["additionalProperties"]["type"], "string");
    assert_eq!(selector["additionalProperties"]["maxLength"], 63);
    assert!(
        !spec["required"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("nodeSelector"))
    );
    assert!(
        spec["properties"]["resources"]["description"]
            .as_str()
            .unwrap()
            .contains("per replica")
            || spec["properties"]["resources"]["description"]
                .as_str()
                .unwrap()
                .contains("one replica")
    );

    let node = Node::crd();
    assert_eq!(node.spec.scope, "Cluster");
    assert_eq!(
        node.spec.names.short_names,
        Some(vec!["pnode".into(), "pnodes".into()])
    );
    assert_eq!(node.spec.names.categories, Some(vec!["placement".into()]));
    let schema = serde_json::to_value(&node.spec.versions[0].schema).unwrap();
    let state = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["state"];
    assert_eq!(
        state["enum"],
        serde_json::json!(["Online", "Cordoned", "Offline", "Draining"])
    );
    // The controller's own overcommit bounds (placement::Overcommit), so nothing the API
    // accepts is refused later.
    let ratio = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["overcommit"]["properties"]
        ["threads"];
    assert_eq!(ratio["minimum"], placement::Overcommit::MIN_RATIO);
    assert_eq!(ratio["maximum"], placement::Overcommit::MAX_RATIO);
}

#[test]
fn node_classes_and_node_requests_are_cluster_scoped_with_the_designs_names_and_rules() {
    let class = NodeClass::crd();
    assert_eq!(class.spec.scope, "Cluster");
    assert_eq!(class.spec.names.short_names, Some(vec!["nclass".into()]));
    assert_eq!(class.spec.names.categories, Some(vec!["placement".into()]));
    let schema = serde_json::to_value(&class.spec.versions[0].schema).unwrap();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
    // A class that offers nothing is no use; a limit of 0 would buy nothing.
    assert_eq!(
        spec["properties"]["capacity"]["properties"]["threads"]["minimum"].as_f64(),
        Some(1.0)
    );
    assert_eq!(
        spec["properties"]["capacity"]["properties"]["memoryGb"]["minimum"].as_f64(),
        Some(1.0)
    );
    assert_eq!(spec["properties"]["limit"]["minimum"].as_f64(), Some(1.0));
    assert_eq!(
        spec["required"],
        serde_json::json!(["capacity", "provider"])
    );

    let request = NodeRequest::crd();
    assert_eq!(request.spec.scope, "Cluster");
    assert_eq!(request.spec.names.short_names, Some(vec!["nreq".into()]));
    let version = &request.spec.versions[0];
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    let schema = serde_json::to_value(&version.schema).unwrap();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(
        spec["x-kubernetes-validations"][0]["rule"],
        "self == oldSelf"
    );
    let phase = &schema["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"];
    assert_eq!(
        phase["enum"],
        serde_json::json!(["Pending", "Provisioning", "Ready", "Failed"])
    );
    let columns: Vec<&str> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(columns, ["Class", "Phase", "Node", "Use", "Tenants", "Age"]);
}

/// A real API server estimates the cost of each CEL rule from the bounds of what it reads, and
/// refuses the CRD when the estimate is over its limit: a map a rule iterates must have
/// `maxProperties`, and its string values `maxLength`.
#[test]
fn every_map_a_cel_rule_reads_is_bounded_so_a_real_server_can_cost_it() {
    fn walk(at: &str, schema: &serde_json::Value, unbounded: &mut Vec<String>) {
        let Some(object) = schema.as_object() else {
            return;
        };
        if object.contains_key("x-kubernetes-validations")
            && let Some(values) = object.get("additionalProperties")
        {
            if !object.contains_key("maxProperties") {
                unbounded.push(format!("{at}: no maxProperties"));
            }
            if values["type"] == "string" && values.get("maxLength").is_none() {
                unbounded.push(format!("{at}: values without maxLength"));
            }
        }
        for (key, child) in object {
            match child {
                serde_json::Value::Object(_) => walk(&format!("{at}.{key}"), child, unbounded),
                serde_json::Value::Array(items) => {
                    for item in items {
                        walk(&format!("{at}.{key}[]"), item, unbounded);
                    }
                }
                _ => {}
            }
        }
    }
    let mut unbounded = Vec::new();
    for crd in [
        Tenant::crd(),
        Node::crd(),
        NodeClass::crd(),
        NodeRequest::crd(),
    ] {
        for version in &crd.spec.versions {
            let schema = serde_json::to_value(&version.schema).unwrap();
            walk(&crd.spec.names.kind, &schema, &mut unbounded);
        }
    }
    assert!(unbounded.is_empty(), "{unbounded:#?}");

    // The class's labels: keys and values as Kubernetes labels, checked by CEL on a bounded map.
    let schema = serde_json::to_value(&NodeClass::crd().spec.versions[0].schema).unwrap();
    let labels = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["labels"];
    assert_eq!(labels["maxProperties"], 64);
    assert_eq!(labels["additionalProperties"]["maxLength"], 63);
    let rules = labels["x-kubernetes-validations"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "{rules:?}");
}
