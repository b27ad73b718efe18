//! String formats of CRD schemas: `date-time` as kube-openapi checks it (`strfmt.IsDateTime`), on
//! create, update and status writes, ratcheted on update like every other check.

use serde_json::{Value, json};

use crate::*;

const PROBES: &str = "/apis/example.dev/v1/probes";

/// A cluster-scoped kind with a status subresource, a `date-time` in its spec and in each
/// condition of its status (a map list keyed by `type`, as Kubernetes conditions are).
fn probe_crd() -> Value {
    let time = json!({"type": "string", "format": "date-time"});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "probes.example.dev"},
        "spec": {
            "group": "example.dev",
            "names": {"plural": "probes", "singular": "probe", "kind": "Probe"},
            "scope": "Cluster",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {
                            "at": time, "note": {"type": "string"}}},
                        "status": {"type": "object", "properties": {"conditions": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["type"],
                            "items": {"type": "object", "required": ["type"], "properties": {
                                "type": {"type": "string"},
                                "lastTransitionTime": time}}}}}
                    }
                }}
            }]
        }
    })
}

fn probe(name: &str, at: &str) -> Value {
    json!({"apiVersion": "example.dev/v1", "kind": "Probe", "metadata": {"name": name},
           "spec": {"at": at}})
}

fn conditions(times: &[(&str, &str)]) -> Value {
    let items: Vec<Value> = times
        .iter()
        .map(|(t, at)| json!({"type": t, "lastTransitionTime": at}))
        .collect();
    json!({"conditions": items})
}

fn served() -> ApiServer {
    let api = ApiServer::new();
    api.install_crd(probe_crd()).unwrap();
    api
}

async fn put(api: &ApiServer, uri: &str, body: Value) -> (u16, Value) {
    call(api, "PUT", uri, "application/json", body).await
}

#[tokio::test]
async fn a_malformed_date_time_is_refused_on_create_with_the_apiservers_message() {
    let api = served();
    let (code, body) = post(&api, PROBES, probe("p", "not-a-time")).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        r#"Probe.example.dev "p" is invalid: spec.at: Invalid value: "not-a-time": spec.at in body must be of type date-time: "not-a-time""#
    );
    let cause = &body["details"]["causes"][0];
    assert_eq!(cause["reason"], "FieldValueTypeInvalid");
    assert_eq!(cause["field"], "spec.at");
    assert!(api.get("example.dev", "probes", None, "p").is_none());
}

#[tokio::test]
async fn date_times_at_the_edges_of_the_format_are_told_apart_as_kube_openapi_does() {
    let api = served();
    // (value, accepted)
    let cases = [
        ("2026-12-02T14:33:13Z", true),
        ("2026-12-02T14:33:13.5+01:00", true),
        ("2026-12-02t14:33:13.123456789z", true),
        ("2026-12-02T23:59:59-12:00", true),
        // 2024 is a leap year, 2100 is not.
        ("2024-02-29T00:00:00Z", true),
        ("2100-02-29T00:00:00Z", false),
        // The last day of a 30-day month, and of February in a common year.
        ("2026-04-30T00:00:00Z", true),
        ("2026-02-28T00:00:00Z", true),
        ("2026-04-31T00:00:00Z", false),
        ("2026-13-01T00:00:00Z", false),
        ("2026-12-02T24:00:00Z", false),
        ("2026-12-02T14:60:00Z", false),
        ("2026-12-02T14:33:60Z", false),
        // No zone, a zone without a colon, a date alone, a space for the T.
        ("2026-12-02T14:33:13", false),
        ("2026-12-02T14:33:13+0100", false),
        ("2026-12-02", false),
        ("2026-12-02 14:33:13Z", false),
        ("", false),
        ("not-a-time", false),
        // A zone of the right length but no sign, a short one, and a fraction without digits.
        ("2026-12-02T14:33:13x01:00", false),
        ("2026-12-02T14:33:13+01:0", false),
        ("2026-12-02T14:33:13.Z", false),
    ];
    for (i, (at, accepted)) in cases.into_iter().enumerate() {
        let (code, body) = post(&api, PROBES, probe(&format!("p{i}"), at)).await;
        assert_eq!(code == 201, accepted, "{at:?}: {code} {body}");
    }
}

#[tokio::test]
async fn a_malformed_date_time_is_refused_on_update_and_on_a_status_write() {
    let api = served();
    let (code, created) = post(&api, PROBES, probe("p", "2026-12-02T14:33:13Z")).await;
    assert_eq!(code, 201, "{created}");

    let mut update = created.clone();
    update["spec"]["at"] = json!("yesterday");
    let (code, body) = put(&api, &format!("{PROBES}/p"), update).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        r#"Probe.example.dev "p" is invalid: spec.at: Invalid value: "yesterday": spec.at in body must be of type date-time: "yesterday""#
    );

    // The status validator names fields from the status root in its messages.
    let mut status = created.clone();
    status["status"] = conditions(&[("Ready", "not-a-time")]);
    let (code, body) = put(&api, &format!("{PROBES}/p/status"), status).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        r#"Probe.example.dev "p" is invalid: status.conditions[0].lastTransitionTime: Invalid value: "not-a-time": conditions[0].lastTransitionTime in body must be of type date-time: "not-a-time""#
    );
    let stored = api.get("example.dev", "probes", None, "p").unwrap();
    assert_eq!(stored["spec"]["at"], "2026-12-02T14:33:13Z");
    assert_eq!(stored.get("status"), None);
}

#[tokio::test]
async fn a_malformed_date_time_stored_before_is_ratcheted_while_it_does_not_change() {
    let api = served();
    // Stored as by an older schema without the format.
    let mut loose = probe_crd();
    let spec = "/spec/versions/0/schema/openAPIV3Schema/properties";
    loose
        .pointer_mut(&format!("{spec}/spec/properties/at"))
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove("format");
    loose
        .pointer_mut(&format!(
            "{spec}/status/properties/conditions/items/properties/lastTransitionTime"
        ))
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove("format");
    api.install_crd(loose).unwrap();
    let mut old = probe("p", "not-a-time");
    old["status"] = conditions(&[("Ready", "not-a-time")]);
    api.create(old).unwrap();
    api.install_crd(probe_crd()).unwrap();
    let stored = api.get("example.dev", "probes", None, "p").unwrap();

    // An unrelated change to the spec, and another condition added to the status, go through.
    let mut update = stored.clone();
    update["spec"]["note"] = json!("unrelated");
    let (code, updated) = put(&api, &format!("{PROBES}/p"), update).await;
    assert_eq!(code, 200, "{updated}");
    let mut status = updated.clone();
    status["status"] = conditions(&[
        ("Ready", "not-a-time"),
        ("Synced", "2026-12-02T14:33:13.5+01:00"),
    ]);
    let (code, body) = put(&api, &format!("{PROBES}/p/status"), status).await;
    assert_eq!(code, 200, "{body}");

    // Changed to another malformed value, it is refused.
    let mut status = body.clone();
    status["status"] = conditions(&[("Ready", "still-not-a-time")]);
    let (code, body) = put(&api, &format!("{PROBES}/p/status"), status).await;
    assert_eq!(code, 422, "{body}");
}

/// kube-openapi's type validator passes a string or an array in a field of a non-numeric type
/// that has a format, and its format validator looks at strings only: an array in a `date-time`
/// field is let through, where in a plain string field it is of the wrong type.
#[tokio::test]
async fn an_array_passes_the_type_check_of_a_field_with_a_format_only() {
    let api = served();
    // A probe named after the field that holds an array.
    let probe_with = |field: &str| {
        let mut p = probe(field, "2026-12-02T14:33:13Z");
        p["spec"][field] = json!(["2026-12-02T14:33:13Z"]);
        p
    };
    let (code, body) = post(&api, PROBES, probe_with("at")).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["spec"]["at"], json!(["2026-12-02T14:33:13Z"]));
    let (code, body) = post(&api, PROBES, probe_with("note")).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        r#"Probe.example.dev "note" is invalid: spec.note: Invalid value: "array": spec.note in body must be of type string: "array""#
    );
}
