//! Discovery as kubectl reads it: aggregated first, legacy otherwise; short
//! names and categories included.

use serde_json::Value;

use crate::tables::setup_with_columns;
use crate::*;

const KUBECTL_DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

#[tokio::test]
async fn kubectl_gets_aggregated_discovery_of_the_groups() {
    let api = setup_with_columns();
    let (code, headers, body) = request(
        &api,
        "GET",
        "/apis",
        &[("accept", KUBECTL_DISCOVERY)],
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        headers["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(body["kind"], "APIGroupDiscoveryList");
    assert_eq!(body["apiVersion"], "apidiscovery.k8s.io/v2");
    let group = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == GROUP)
        .expect("the custom group");
    let version = &group["versions"][0];
    assert_eq!(version["version"], "v1");
    assert_eq!(version["freshness"], "Current");
    let tenants = &version["resources"][0];
    assert_eq!(tenants["resource"], "tenants");
    assert_eq!(tenants["singularResource"], "tenant");
    assert_eq!(tenants["scope"], "Namespaced");
    assert_eq!(tenants["responseKind"]["kind"], "Tenant");
    assert_eq!(tenants["shortNames"], serde_json::json!(["tn"]));
    assert_eq!(tenants["categories"], serde_json::json!(["placement"]));
    assert!(
        tenants["verbs"]
            .as_array()
            .unwrap()
            .contains(&"watch".into())
    );
    assert_eq!(tenants["subresources"][0]["subresource"], "status");
}

#[tokio::test]
async fn aggregated_discovery_of_the_core_group_has_one_unnamed_group() {
    let api = setup_with_columns();
    let (code, _, body) = request(
        &api,
        "GET",
        "/api",
        &[("accept", KUBECTL_DISCOVERY)],
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    let items = body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert!(items[0]["metadata"].get("name").is_none());
    let resources: Vec<&str> = items[0]["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["resource"].as_str().unwrap())
        .collect();
    assert!(resources.contains(&"namespaces"), "{resources:?}");
    assert!(resources.contains(&"events"), "{resources:?}");
}

#[tokio::test]
async fn legacy_discovery_carries_short_names_and_categories() {
    let api = setup_with_columns();
    let (code, headers, body) = request(
        &api,
        "GET",
        "/apis/placement.tenant-placer.dev/v1",
        &[("accept", "application/json, */*")],
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(headers["content-type"], "application/json");
    let tenants = &body["resources"][0];
    assert_eq!(tenants["shortNames"], serde_json::json!(["tn"]));
    assert_eq!(tenants["categories"], serde_json::json!(["placement"]));
    // Without the aggregated type in Accept, `/apis` is an APIGroupList.
    let (_, _, groups) = request(
        &api,
        "GET",
        "/apis",
        &[("accept", "application/json")],
        Value::Null,
    )
    .await;
    assert_eq!(groups["kind"], "APIGroupList");
    let (_, versions) = get(&api, "/api").await;
    assert_eq!(versions["kind"], "APIVersions");
}
