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
    cluster_crd(
        "widgets",
        "Widget",
        json!({
            "size": {"type": "integer", "default": 3, "maximum": 10},
            "opaque": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }),
    )
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

/// A CRD with one field per kind of bound the schema validator enforces.
fn bounds_crd() -> serde_json::Value {
    cluster_crd(
        "bounds",
        "Bound",
        json!({
            "int": {"type": "integer", "minimum": 1, "maximum": 1000},
            "big": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 9_007_199_254_740_991_i64},
            "open": {"type": "integer", "minimum": 0, "exclusiveMinimum": true,
                     "maximum": 10, "exclusiveMaximum": true},
            "ratio": {"type": "number", "format": "double", "minimum": 0.001, "maximum": 16.0},
            "span": {"type": "number", "minimum": 1.5, "exclusiveMinimum": true,
                     "maximum": 2.5, "exclusiveMaximum": true},
            "int32": {"type": "integer", "format": "int32"},
            "float": {"type": "number", "format": "float"},
            "step": {"type": "integer", "multipleOf": 5},
            "text": {"type": "string", "minLength": 2, "maxLength": 63},
            "list": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3}
        }),
    )
}

/// Every bound of the schema, on each side: the value at the limit (or just inside an exclusive
/// one) is accepted, the value one step past it refused with the apiserver's message. A
/// comparison off by one either way fails one of the two.
#[tokio::test]
async fn each_schema_limit_accepts_the_value_at_it_and_refuses_the_one_past_it() {
    let api = ApiServer::new();
    api.install_crd(bounds_crd()).unwrap();
    let x63 = "x".repeat(63);
    let x64 = "x".repeat(64);
    // (field, at the limit, one past it, the refusal's detail).
    let cases: &[(&str, Value, Value, &str)] = &[
        (
            "int",
            json!(1),
            json!(0),
            "Invalid value: 0: spec.int in body should be greater than or equal to 1",
        ),
        (
            "int",
            json!(1000),
            json!(1001),
            "Invalid value: 1001: spec.int in body should be less than or equal to 1000",
        ),
        (
            "big",
            json!(0),
            json!(-1),
            "Invalid value: -1: spec.big in body should be greater than or equal to 0",
        ),
        (
            "big",
            json!(9_007_199_254_740_991_i64),
            json!(9_007_199_254_740_992_i64),
            "Invalid value: 9007199254740992: spec.big in body should be less than or equal to 9007199254740991",
        ),
        // Exclusive: 1 and 9 are just inside, 0 and 10 are the limits themselves.
        (
            "open",
            json!(1),
            json!(0),
            "Invalid value: 0: spec.open in body should be greater than 0",
        ),
        (
            "open",
            json!(9),
            json!(10),
            "Invalid value: 10: spec.open in body should be less than 10",
        ),
        (
            "ratio",
            json!(0.001),
            json!(0.0009),
            "Invalid value: 0.0009: spec.ratio in body should be greater than or equal to 0.001",
        ),
        (
            "ratio",
            json!(16.0),
            json!(16.001),
            "Invalid value: 16.001: spec.ratio in body should be less than or equal to 16",
        ),
        // Exclusive, of a number: 1.5 and 2.5 are the limits themselves.
        (
            "span",
            json!(1.6),
            json!(1.5),
            "Invalid value: 1.5: spec.span in body should be greater than 1.5",
        ),
        (
            "span",
            json!(2.4),
            json!(2.5),
            "Invalid value: 2.5: spec.span in body should be less than 2.5",
        ),
        (
            "int32",
            json!(2_147_483_647_i64),
            json!(2_147_483_648_i64),
            r#"Invalid value: "": Checked value must be of type integer with format int32 in spec.int32"#,
        ),
        (
            "int32",
            json!(-2_147_483_648_i64),
            json!(-2_147_483_649_i64),
            r#"Invalid value: "": Checked value must be of type integer with format int32 in spec.int32"#,
        ),
        // The largest float32, and a value that rounds to infinity as one.
        (
            "float",
            json!(f64::from(f32::MAX)),
            json!(3.5e38),
            r#"Invalid value: "": Checked value must be of type number with format float in spec.float"#,
        ),
        (
            "step",
            json!(10),
            json!(11),
            "Invalid value: 11: spec.step in body should be a multiple of 5",
        ),
        (
            "text",
            json!("ab"),
            json!("a"),
            r#"Invalid value: "a": spec.text in body should be at least 2 chars long"#,
        ),
        (
            "text",
            json!(x63),
            json!(x64),
            "spec.text: Too long: may not be more than 63 bytes",
        ),
        (
            "list",
            json!(["a"]),
            json!([]),
            "Invalid value: []: spec.list in body should have at least 1 items",
        ),
        (
            "list",
            json!(["a", "b", "c"]),
            json!(["a", "b", "c", "d"]),
            "spec.list: Too many: 4: must have at most 3 items",
        ),
    ];
    let mut failures = Vec::new();
    for (n, (field, at, past, detail)) in cases.iter().enumerate() {
        let bound = |name: String, value: &Value| {
            json!({"apiVersion": "example.dev/v1", "kind": "Bound", "metadata": {"name": name},
                   "spec": {*field: value}})
        };
        let (code, body) = post(
            &api,
            "/apis/example.dev/v1/bounds",
            bound(format!("at-{n}"), at),
        )
        .await;
        if code != 201 {
            failures.push(format!(
                "{field} = {at} (at the limit): {code} {}",
                body["message"]
            ));
        }
        let (code, body) = post(
            &api,
            "/apis/example.dev/v1/bounds",
            bound(format!("past-{n}"), past),
        )
        .await;
        let message = body["message"].as_str().unwrap_or_default();
        if code != 422 || !message.contains(detail) {
            failures.push(format!(
                "{field} = {past} (past the limit): {code} {message}, wanted {detail:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Installs `kind` of `example.dev` with these spec properties, posts one object per case with
/// `{field: value}` as its spec, and lists the cases answered otherwise than the case says:
/// created if it names no errors, else refused with them (as the apiserver's message lists them).
async fn mismatches(
    kind: &str,
    spec_properties: Value,
    cases: &[(&str, Value, &[&str])],
) -> Vec<String> {
    let api = ApiServer::new();
    let plural = format!("{}s", kind.to_lowercase());
    api.install_crd(cluster_crd(&plural, kind, spec_properties))
        .unwrap();
    let mut failures = Vec::new();
    for (i, (field, value, errors)) in cases.iter().enumerate() {
        let name = format!("c{i}");
        let object = json!({"apiVersion": "example.dev/v1", "kind": kind,
                            "metadata": {"name": name}, "spec": {*field: value}});
        let (code, body) = post(&api, &format!("/apis/example.dev/v1/{plural}"), object).await;
        let wanted = match errors {
            [] => None,
            [one] => Some(format!(r#"{kind}.example.dev "{name}" is invalid: {one}"#)),
            many => Some(format!(
                r#"{kind}.example.dev "{name}" is invalid: [{}]"#,
                many.join(", ")
            )),
        };
        let got = (code != 201).then(|| body["message"].as_str().unwrap_or_default().to_owned());
        if got != wanted {
            failures.push(format!(
                "{field} = {value}: got {code} {got:?}, wanted {wanted:?}"
            ));
        }
    }
    failures
}

/// Each value against its field's type as kube-openapi's type validator checks it: an integer
/// is a number; a float is an integer if whole to a relative 1e-9 (`IsFloat64AJSONInteger`, the
/// bound excluded), its range checked after as a float's text; int-or-string takes either; a
/// null list item that is not nullable is of type null; and a value of another type in a number
/// with a format (kept for numbers: `float`, `double`) is checked against the format first.
#[tokio::test]
async fn values_are_checked_against_the_field_type_as_kube_openapi_does() {
    let not_whole = r#"spec.whole: Invalid value: "number": spec.whole in body must be of type integer: "number""#;
    let unchecked = r#"<nil>: Invalid value: "": Checked value must be of type integer (default format) in spec.whole"#;
    // (field, value, the errors: none when accepted).
    let cases: &[(&str, Value, &[&str])] = &[
        ("ratio", json!(3), &[]),
        (
            "ratio",
            json!(true),
            &[r#"spec.ratio: Invalid value: "": spec.ratio in body must be of type double: """#],
        ),
        ("port", json!(8080), &[]),
        ("port", json!("http"), &[]),
        (
            "port",
            json!(true),
            &[
                r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#,
            ],
        ),
        (
            "list",
            json!(["a", null]),
            &[
                r#"spec.list[1]: Invalid value: "null": spec.list[1] in body must be of type string: "null""#,
            ],
        ),
        // Whole to a relative 1.7e-11, 5e-11, and just under 1e-9.
        ("whole", json!(3.000_000_000_1), &[unchecked]),
        ("whole", json!(1_000_000.000_1), &[unchecked]),
        ("whole", json!(251_182_541.502_365_05), &[unchecked]),
        // Off by exactly 1e-9 (relative), by 5e-9, and 0.5, whose whole part is 0.
        (
            "whole",
            json!(251_182_541.502_365_08),
            &[not_whole, unchecked],
        ),
        ("whole", json!(1_000.000_01), &[not_whole, unchecked]),
        ("whole", json!(0.5), &[not_whole, unchecked]),
    ];
    let properties = json!({
        "ratio": {"type": "number", "format": "double"},
        "whole": {"type": "integer"},
        "port": {"x-kubernetes-int-or-string": true},
        "list": {"type": "array", "items": {"type": "string"}}
    });
    let failures = mismatches("Check", properties, cases).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A float is a multiple of a factor if the quotient is a JSON integer, computed as
/// kube-openapi's `MultipleOf` does: `1 / factor * value` for a factor below 1, else
/// `value / factor`. The order shows at the edge: 1 / 0.09 * 810647932926689.2 is 2^53 - 1, the
/// largest integer a float64 holds exactly, where 810647932926689.2 / 0.09 is 2^53.
#[tokio::test]
async fn a_float_is_a_multiple_as_kube_openapi_computes_the_quotient() {
    let cases: &[(&str, Value, &[&str])] = &[
        ("half", json!(1.5), &[]),
        (
            "half",
            json!(1.25),
            &["spec.half: Invalid value: 1.25: spec.half in body should be a multiple of 0.5"],
        ),
        ("even", json!(4.0), &[]),
        (
            "even",
            json!(3.0),
            &["spec.even: Invalid value: 3: spec.even in body should be a multiple of 2"],
        ),
        ("ninth", json!(2.7), &[]),
        ("hundredths", json!(810_647_932_926_689.2), &[]),
    ];
    let properties = json!({
        "half": {"type": "number", "multipleOf": 0.5},
        "even": {"type": "number", "multipleOf": 2},
        "ninth": {"type": "number", "multipleOf": 0.9},
        "hundredths": {"type": "number", "multipleOf": 0.09}
    });
    let failures = mismatches("Multiple", properties, cases).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A bound that does not fit its field's type (a fractional maximum on an integer, or one of a
/// uint32 on an int32) is reported whatever the value, on the object as kube-openapi's plain
/// errors are, and still applied: to the value as a float (`numberValidator`).
#[tokio::test]
async fn a_bound_that_does_not_fit_the_type_is_reported_and_still_applied_as_a_float() {
    let count = r#"<nil>: Invalid value: "": Maximum boundary value must be of type integer (default format) in spec.count"#;
    let cases: &[(&str, Value, &[&str])] = &[
        ("count", json!(2), &[count]),
        (
            "count",
            json!(3),
            &[
                count,
                "spec.count: Invalid value: 3: spec.count in body should be less than or equal to 2.5",
            ],
        ),
        (
            "asn",
            json!(1),
            &[
                r#"<nil>: Invalid value: "": Maximum boundary value must be of type integer with format int32 in spec.asn"#,
            ],
        ),
    ];
    let properties = json!({
        "count": {"type": "integer", "maximum": 2.5},
        "asn": {"type": "integer", "format": "int32", "maximum": 4_294_967_295_u32}
    });
    let failures = mismatches("Cap", properties, cases).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `anyOf`, `oneOf`, `allOf` and `not` hold a value to their schemas: a value that passes is
/// created, one that does not is refused naming the construct (or, for `allOf`, the error of the
/// schema it fails). Only those phrases are checked: the apiserver puts the construct's error on
/// the object (`<nil>: Invalid value: "": "spec.any" must validate at least one schema (anyOf)`,
/// followed by the errors of the closest alternative), which this server words otherwise.
#[tokio::test]
async fn compositions_hold_a_value_to_their_schemas() {
    let api = ApiServer::new();
    api.install_crd(cluster_crd(
        "combos",
        "Combo",
        json!({
            "any": {"type": "integer", "anyOf": [{"maximum": 5}, {"minimum": 10}]},
            "one": {"type": "integer", "oneOf": [{"maximum": 5}, {"minimum": 3}]},
            "all": {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]},
            "not": {"type": "integer", "not": {"minimum": 100}}
        }),
    ))
    .unwrap();
    // (field, a value that passes, one that does not, what its refusal says).
    let cases = [
        ("any", 3, 7, "must validate at least one schema (anyOf)"),
        ("one", 1, 4, "must validate one and only one schema (oneOf)"),
        (
            "all",
            3,
            7,
            "spec.all in body should be less than or equal to 5",
        ),
        ("not", 1, 100, "must not validate the schema (not)"),
    ];
    for (field, passes, fails, refusal) in cases {
        let combo = |value: i64| {
            json!({"apiVersion": "example.dev/v1", "kind": "Combo",
                   "metadata": {"name": format!("{field}-{value}")}, "spec": {field: value}})
        };
        let (code, body) = post(&api, "/apis/example.dev/v1/combos", combo(passes)).await;
        assert_eq!(code, 201, "{field} = {passes}: {body}");
        let (code, body) = post(&api, "/apis/example.dev/v1/combos", combo(fails)).await;
        assert_eq!(code, 422, "{field} = {fails}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(refusal), "{field} = {fails}: {message}");
    }
}

/// Defaults apply inside each item of a list, as the apiserver's structural defaulting descends
/// into `items`.
#[tokio::test]
async fn defaults_apply_to_each_item_of_a_list() {
    let api = ApiServer::new();
    api.install_crd(cluster_crd(
        "pools",
        "Pool",
        json!({"members": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"},
            "weight": {"type": "integer", "default": 1}
        }}}}),
    ))
    .unwrap();
    let pool = json!({"apiVersion": "example.dev/v1", "kind": "Pool", "metadata": {"name": "p"},
                      "spec": {"members": [{"name": "a"}, {"name": "b", "weight": 5}]}});
    let (code, body) = post(&api, "/apis/example.dev/v1/pools", pool).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        body["spec"]["members"],
        json!([{"name": "a", "weight": 1}, {"name": "b", "weight": 5}])
    );
}
