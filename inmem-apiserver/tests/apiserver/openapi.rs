//! OpenAPI v3 documents, as `kubectl explain` and kubectl's field-validation
//! check read them.

use serde_json::Value;

use crate::tables::setup_with_columns;
use crate::*;

const DOC: &str = "apis/placement.tenant-placer.dev/v1";

#[tokio::test]
async fn the_index_lists_one_document_per_group_version() {
    let api = setup_with_columns();
    let (code, index) = get(&api, "/openapi/v3").await;
    assert_eq!(code, 200);
    for path in [
        DOC,
        "api/v1",
        "apis/apiextensions.k8s.io/v1",
        "apis/coordination.k8s.io/v1",
    ] {
        let url = index["paths"][path]["serverRelativeURL"]
            .as_str()
            .unwrap_or_else(|| panic!("{path} is not in {index}"));
        assert!(
            url.starts_with(&format!("/openapi/v3/{path}?hash=")),
            "{url}"
        );
        let (code, doc) = get(&api, url).await;
        assert_eq!(code, 200, "{url}");
        assert_eq!(doc["openapi"], "3.0.0");
    }
    let (code, _) = get(&api, "/openapi/v3/apis/placement.tenant-placer.dev/v9").await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn a_custom_kind_is_documented_from_its_crd_schema() {
    let api = setup_with_columns();
    let (code, doc) = get(&api, &format!("/openapi/v3/{DOC}")).await;
    assert_eq!(code, 200);
    let schemas = &doc["components"]["schemas"];
    let tenant = &schemas["dev.tenant-placer.placement.v1.Tenant"];
    assert_eq!(
        tenant["x-kubernetes-group-version-kind"],
        serde_json::json!([{"group": GROUP, "version": "v1", "kind": "Tenant"}])
    );
    assert_eq!(
        tenant["properties"]["spec"]["properties"]["replicas"]["type"],
        "integer"
    );
    assert!(
        tenant["properties"]["apiVersion"]["description"]
            .as_str()
            .unwrap()
            .starts_with("APIVersion defines")
    );
    let meta_ref = &tenant["properties"]["metadata"]["allOf"][0]["$ref"];
    assert_eq!(
        meta_ref,
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    // Every reference resolves within the document.
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(!refs.is_empty());
    for r in refs {
        let name = r.trim_start_matches("#/components/schemas/");
        assert!(schemas.get(name).is_some(), "{r} does not resolve");
    }
    assert_eq!(
        schemas["dev.tenant-placer.placement.v1.TenantList"]["properties"]["items"]["items"]["$ref"],
        "#/components/schemas/dev.tenant-placer.placement.v1.Tenant"
    );
}

fn collect_refs(value: &Value, refs: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get("$ref") {
                refs.push(r.clone());
            }
            map.values().for_each(|v| collect_refs(v, refs));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, refs)),
        _ => {}
    }
}

#[tokio::test]
async fn patch_operations_declare_field_validation_for_kubectl() {
    let api = setup_with_columns();
    let (_, doc) = get(&api, &format!("/openapi/v3/{DOC}")).await;
    let paths = &doc["paths"];
    let item = &paths["/apis/placement.tenant-placer.dev/v1/namespaces/{namespace}/tenants/{name}"];
    let patch = &item["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        serde_json::json!({"group": GROUP, "version": "v1", "kind": "Tenant"})
    );
    assert_eq!(patch["x-kubernetes-action"], "patch");
    let params: Vec<&str> = patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(params.contains(&"fieldValidation"), "{params:?}");
    assert!(item["get"].is_object() && item["put"].is_object() && item["delete"].is_object());
    // The list across namespaces and the status subresource are there too.
    assert!(paths["/apis/placement.tenant-placer.dev/v1/tenants"]["get"].is_object());
    assert!(
        paths["/apis/placement.tenant-placer.dev/v1/namespaces/{namespace}/tenants/{name}/status"]
            ["patch"]
            .is_object()
    );
}
