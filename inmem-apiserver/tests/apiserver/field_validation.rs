//! `fieldValidation`: unknown fields refused (Strict, what kubectl sends),
//! warned about (Warn, the default) or dropped silently (Ignore); and the
//! field selectors of events, which `kubectl describe` lists.

use serde_json::{Value, json};

use crate::*;

fn with_typos() -> Value {
    let mut obj = raw_tenant(
        "typo",
        json!({"replicas": 1, "replica": 2, "extra": {"a": 1}}),
    );
    obj["metadata"]["colour"] = json!("red");
    obj
}

#[tokio::test]
async fn strict_validation_refuses_unknown_fields_naming_each() {
    let (api, _client) = setup();
    let (code, _, body) = request(
        &api,
        "POST",
        &format!("{TENANTS}?fieldManager=kubectl-client-side-apply&fieldValidation=Strict"),
        &[("content-type", "application/json")],
        with_typos(),
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")));
    assert_eq!(
        body["message"],
        r#"Tenant in version "v1" cannot be handled as a Tenant: strict decoding error: unknown field "metadata.colour", unknown field "spec.extra", unknown field "spec.replica""#
    );
    assert!(api.get(GROUP, "tenants", Some("default"), "typo").is_none());
}

#[tokio::test]
async fn by_default_unknown_fields_are_dropped_with_a_warning() {
    let (api, _client) = setup();
    let (code, headers, body) = request(
        &api,
        "POST",
        TENANTS,
        &[("content-type", "application/json")],
        with_typos(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let warnings: Vec<&str> = headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        warnings,
        [
            r#"299 - "unknown field \"metadata.colour\"""#,
            r#"299 - "unknown field \"spec.extra\"""#,
            r#"299 - "unknown field \"spec.replica\"""#,
        ]
    );
    assert!(body["spec"].get("replica").is_none());
    let (_, headers, _) = request(
        &api,
        "PATCH",
        &format!("{TENANTS}/typo?fieldValidation=Ignore"),
        &[("content-type", "application/merge-patch+json")],
        json!({"spec": {"replicaz": 3}}),
    )
    .await;
    assert!(headers.get("warning").is_none());
}

#[tokio::test]
async fn a_strict_patch_with_an_unknown_field_is_refused_without_writing() {
    let (api, client) = setup();
    create(&client, "acme", 1).await;
    let before = api.resource_version();
    let (code, _, body) = request(
        &api,
        "PATCH",
        &format!("{TENANTS}/acme?fieldManager=kubectl-edit&fieldValidation=Strict"),
        &[("content-type", "application/merge-patch+json")],
        json!({"spec": {"replicas": 2, "replicaz": 3}}),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        body["message"],
        r#"strict decoding error: unknown field "spec.replicaz""#
    );
    assert_eq!(api.resource_version(), before);
    let (code, _, body) = request(
        &api,
        "PATCH",
        &format!("{TENANTS}/acme?fieldValidation=Loose"),
        &[("content-type", "application/merge-patch+json")],
        json!({"spec": {"replicas": 2}}),
    )
    .await;
    assert_eq!(code, 400, "{body}");
}

#[tokio::test]
async fn events_are_selected_by_the_object_they_involve() {
    let (api, _client) = setup();
    for (name, involved) in [("e1", "acme"), ("e2", "big")] {
        api.create(json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Tenant", "name": involved, "namespace": "default", "uid": "u-1"},
            "reason": "Placed", "type": "Normal",
        }))
        .unwrap();
    }
    // What `kubectl describe tn acme` asks for.
    let selector = "involvedObject.name%3Dacme%2CinvolvedObject.namespace%3Ddefault%2CinvolvedObject.kind%3DTenant%2CinvolvedObject.uid%3Du-1";
    let (code, list) = get(
        &api,
        &format!("/api/v1/namespaces/default/events?fieldSelector={selector}&limit=500"),
    )
    .await;
    assert_eq!(code, 200, "{list}");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["e1"]);
    let (code, body) = get(
        &api,
        "/api/v1/namespaces/default/events?fieldSelector=spec.nodeName%3Dx",
    )
    .await;
    assert_eq!(
        (code, body["message"].as_str()),
        (400, Some("field label not supported: spec.nodeName"))
    );
}

#[tokio::test]
async fn a_body_that_is_not_json_is_415() {
    let (api, _client) = setup();
    // What kubectl sends for built-in kinds, e.g. `kubectl create namespace`.
    let (code, _, body) = request(
        &api,
        "POST",
        "/api/v1/namespaces",
        &[("content-type", "application/vnd.kubernetes.protobuf")],
        json!({"metadata": {"name": "team-a"}}),
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with("accepted media types include: application/json")
    );
}
