use kube::api::PostParams;
use serde_json::json;

use crate::*;

#[tokio::test]
async fn a_value_below_the_schema_minimum_is_invalid_with_the_apiservers_message() {
    let (_api, client) = setup();
    let status = status_of(
        tenants(&client)
            .create(&PostParams::default(), &tenant("acme", -1))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        r#"Tenant.placement.tenant-placer.dev "acme" is invalid: spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"#
    );
    let details = status.details.unwrap();
    assert_eq!(
        (
            details.kind.as_str(),
            details.group.as_str(),
            details.name.as_str()
        ),
        ("Tenant", GROUP, "acme")
    );
    let cause = &details.causes[0];
    assert_eq!(
        (cause.reason.as_str(), cause.field.as_str()),
        ("FieldValueInvalid", "spec.replicas")
    );
    assert_eq!(
        cause.message,
        "Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
    );
}

/// kube-derive lists `null` among the values of an optional enum; the
/// apiserver prints it as it marshals: `"null"`.
#[tokio::test]
async fn several_violations_are_reported_together() {
    let (api, _client) = setup();
    let (code, body) = post(
        &api,
        TENANTS,
        raw_tenant("acme", json!({"replicas": "two", "tier": "Bronze"})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Tenant.placement.tenant-placer.dev "acme" is invalid: [spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string", spec.tier: Unsupported value: "Bronze": supported values: "Gold", "Silver", "null"]"#
    );
    let reasons: Vec<&str> = body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["FieldValueTypeInvalid", "FieldValueNotSupported"]);
}

#[tokio::test]
async fn a_missing_required_field_is_required() {
    let (api, _client) = setup();
    let (code, body) = post(&api, TENANTS, raw_tenant("acme", json!({}))).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Tenant.placement.tenant-placer.dev "acme" is invalid: spec.replicas: Required value"#
    );
}

#[tokio::test]
async fn a_name_that_is_not_a_dns_subdomain_is_invalid() {
    let (api, _client) = setup();
    let (code, body) = post(
        &api,
        TENANTS,
        raw_tenant("Not_Valid", json!({"replicas": 1})),
    )
    .await;
    assert_eq!(code, 422);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(
            r#"metadata.name: Invalid value: "Not_Valid": a lowercase RFC 1123 subdomain"#
        ),
        "{message}"
    );
}

/// A CRD written by hand, with defaults and a preserved subtree.
fn widget_crd() -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.dev"},
        "spec": {
            "group": "example.dev",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "scope": "Cluster",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "properties": {
                            "size": {"type": "integer", "default": 3, "maximum": 10},
                            "opaque": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                        }
                    }}
                }}
            }]
        }
    })
}

#[tokio::test]
async fn unknown_fields_are_pruned_and_defaults_applied_on_create() {
    let api = ApiServer::new();
    let (code, crd) = post(
        &api,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        widget_crd(),
    )
    .await;
    assert_eq!(code, 201, "{crd}");
    let widget = json!({
        "apiVersion": "example.dev/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ignored", "bogus": 1},
        "spec": {"extra": true, "opaque": {"anything": {"goes": 1}}},
        "junk": "x"
    });
    let (code, body) = post(&api, "/apis/example.dev/v1/widgets", widget).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        body["spec"],
        json!({"size": 3, "opaque": {"anything": {"goes": 1}}})
    );
    assert_eq!(body.get("junk"), None);
    assert_eq!(body["metadata"].get("bogus"), None);
    assert_eq!(body["metadata"].get("namespace"), None, "cluster-scoped");

    let too_big = json!({"apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {"name": "big"}, "spec": {"size": 11}});
    let (code, body) = post(&api, "/apis/example.dev/v1/widgets", too_big).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Widget.example.dev "big" is invalid: spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"#
    );
}

#[tokio::test]
async fn a_crd_whose_name_does_not_match_its_names_is_invalid() {
    let api = ApiServer::new();
    let mut crd = widget_crd();
    crd["metadata"]["name"] = json!("gadgets.example.dev");
    let err = api.install_crd(crd).unwrap_err();
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        r#"CustomResourceDefinition.apiextensions.k8s.io "gadgets.example.dev" is invalid: metadata.name: Invalid value: "gadgets.example.dev": must be spec.names.plural+"."+spec.group"#
    );
}
