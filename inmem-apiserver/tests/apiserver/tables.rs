//! Server-side Tables (what `kubectl get` asks for) and metadata-only answers.

use inmem_apiserver::ApiServer;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::*;

/// The test CRD with printer columns, short names and a category, as
/// `kubectl get` uses them.
pub fn crd_with_columns() -> Value {
    let mut crd = serde_json::to_value(Tenant::crd()).unwrap();
    crd["spec"]["names"]["shortNames"] = json!(["tn"]);
    crd["spec"]["names"]["categories"] = json!(["placement"]);
    crd["spec"]["versions"][0]["additionalPrinterColumns"] = json!([
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "description": "How many"},
        {"name": "Tier", "type": "string", "jsonPath": ".spec.tier"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]);
    crd
}

pub fn setup_with_columns() -> ApiServer {
    let api = ApiServer::new();
    api.install_crd(crd_with_columns()).unwrap();
    api
}

fn seed(api: &ApiServer) {
    for (name, spec) in [
        ("a", json!({"replicas": 1, "tier": "Gold"})),
        ("b", json!({"replicas": 3})),
    ] {
        let mut obj = raw_tenant(name, spec);
        obj["metadata"]["namespace"] = json!("default");
        api.create(obj).unwrap();
    }
}

async fn table(api: &ApiServer, uri: &str) -> (u16, http::HeaderMap, Value) {
    request(api, "GET", uri, &[("accept", KUBECTL_TABLE)], Value::Null).await
}

#[tokio::test]
async fn a_list_for_kubectl_get_is_a_table_of_the_printer_columns() {
    let api = setup_with_columns();
    seed(&api);
    let (code, headers, body) = table(&api, TENANTS).await;
    assert_eq!(code, 200);
    assert_eq!(
        headers["content-type"],
        "application/json;as=Table;v=v1;g=meta.k8s.io"
    );
    assert_eq!(
        (body["kind"].as_str(), body["apiVersion"].as_str()),
        (Some("Table"), Some("meta.k8s.io/v1"))
    );
    assert_eq!(
        body["metadata"]["resourceVersion"],
        json!(api.resource_version().to_string())
    );
    let columns: Vec<(&str, &str, i64)> = body["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["type"].as_str().unwrap(),
                c["priority"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        columns,
        [
            ("Name", "string", 0),
            ("Replicas", "integer", 0),
            ("Tier", "string", 0),
            ("Phase", "string", 1),
            ("Age", "date", 0),
        ]
    );
    assert_eq!(body["columnDefinitions"][0]["format"], "name");
    assert_eq!(body["columnDefinitions"][1]["description"], "How many");
    let rows = body["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let cells = rows[0]["cells"].as_array().unwrap();
    assert_eq!(
        &cells[..4],
        &[json!("a"), json!(1), json!("Gold"), Value::Null]
    );
    // The age is rendered by the server, as kubectl prints cells as they come.
    let age = cells[4].as_str().unwrap();
    assert!(age.ends_with('s') && age.len() <= 4, "{age}");
    assert_eq!(rows[1]["cells"][2], Value::Null, "a missing field is null");
    // Rows carry the object's metadata by default (kubectl reads the
    // namespace of `-A` from it).
    assert_eq!(rows[0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(rows[0]["object"]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(rows[0]["object"]["metadata"]["namespace"], "default");
    assert!(rows[0]["object"].get("spec").is_none());
}

#[tokio::test]
async fn include_object_chooses_what_rows_carry() {
    let api = setup_with_columns();
    seed(&api);
    let (_, _, full) = table(&api, &format!("{TENANTS}?includeObject=Object")).await;
    assert_eq!(full["rows"][0]["object"]["kind"], "Tenant");
    assert_eq!(full["rows"][0]["object"]["spec"]["replicas"], 1);
    let (_, _, none) = table(&api, &format!("{TENANTS}?includeObject=None")).await;
    assert!(none["rows"][0].get("object").is_none());
    let (code, _, bad) = table(&api, &format!("{TENANTS}?includeObject=All")).await;
    assert_eq!(code, 400, "{bad}");
}

#[tokio::test]
async fn a_get_is_a_one_row_table_and_a_missing_object_is_404() {
    let api = setup_with_columns();
    seed(&api);
    let (code, _, body) = table(&api, &format!("{TENANTS}/b")).await;
    assert_eq!(code, 200);
    assert_eq!(body["kind"], "Table");
    assert_eq!(body["rows"].as_array().unwrap().len(), 1);
    assert_eq!(body["rows"][0]["cells"][1], 3);
    let (code, _, body) = table(&api, &format!("{TENANTS}/missing")).await;
    assert_eq!((code, body["reason"].as_str()), (404, Some("NotFound")));
}

#[tokio::test]
async fn a_list_across_namespaces_and_a_paged_list_are_tables_too() {
    let api = setup_with_columns();
    seed(&api);
    let all = "/apis/placement.tenant-placer.dev/v1/tenants?limit=1";
    let (code, _, body) = table(&api, all).await;
    assert_eq!(code, 200);
    assert_eq!(body["rows"].as_array().unwrap().len(), 1);
    let token = body["metadata"]["continue"].as_str().unwrap();
    let (_, _, next) = table(&api, &format!("{all}&continue={token}")).await;
    assert_eq!(next["rows"][0]["cells"][0], "b");
}

#[tokio::test]
async fn a_watch_for_kubectl_get_w_sends_one_row_tables() {
    let api = setup_with_columns();
    seed(&api);
    let uri = format!("{TENANTS}?watch=true&resourceVersion=0&timeoutSeconds=1");
    let (code, _, events) = table(&api, &uri).await;
    assert_eq!(code, 200);
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 2);
    for (event, name) in events.iter().zip(["a", "b"]) {
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["kind"], "Table");
        assert_eq!(event["object"]["rows"][0]["cells"][0], name);
        assert_eq!(event["object"]["columnDefinitions"][1]["name"], "Replicas");
    }
}

#[tokio::test]
async fn metadata_only_clients_get_partial_object_metadata() {
    let api = setup_with_columns();
    seed(&api);
    let list_accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let (code, headers, list) = request(
        &api,
        "GET",
        TENANTS,
        &[("accept", list_accept)],
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .contains("as=PartialObjectMetadata")
    );
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["items"][1]["metadata"]["name"], "b");
    assert!(list["items"][1].get("spec").is_none());
    let one_accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let (_, _, one) = request(
        &api,
        "GET",
        &format!("{TENANTS}/a"),
        &[("accept", one_accept)],
        Value::Null,
    )
    .await;
    assert_eq!(one["kind"], "PartialObjectMetadata");
}

#[tokio::test]
async fn an_accept_header_naming_nothing_served_is_406_and_protobuf_falls_back_to_json() {
    let api = setup_with_columns();
    seed(&api);
    let (code, _, body) = request(
        &api,
        "GET",
        TENANTS,
        &[("accept", "application/vnd.kubernetes.protobuf")],
        Value::Null,
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (406, Some("NotAcceptable"))
    );
    let (code, _, body) = request(
        &api,
        "GET",
        TENANTS,
        &[(
            "accept",
            "application/vnd.kubernetes.protobuf,application/json",
        )],
        Value::Null,
    )
    .await;
    assert_eq!((code, body["kind"].as_str()), (200, Some("TenantList")));
}

#[tokio::test]
async fn built_in_kinds_have_their_own_columns() {
    let api = setup_with_columns();
    let (_, _, crds) = table(
        &api,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    )
    .await;
    assert_eq!(crds["columnDefinitions"][1]["name"], "Created At");
    // The default convertor's `Created At` is the timestamp itself.
    let created = crds["rows"][0]["cells"][1].as_str().unwrap();
    assert!(created.ends_with('Z') && created.contains('T'), "{created}");
    api.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}))
        .unwrap();
    let (_, _, namespaces) = table(&api, "/api/v1/namespaces").await;
    let names: Vec<&str> = namespaces["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Status", "Age"]);
    assert_eq!(namespaces["rows"][0]["cells"][1], "Active");
}
