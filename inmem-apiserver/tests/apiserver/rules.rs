//! `x-kubernetes-validations` (CEL) and integer formats, answered as
//! apiextensions-apiserver answers them: `Invalid value: "{schema type}"`,
//! the rule's message (or messageExpression, or `failed rule: ...`) on the
//! node's path with `fieldPath` appended, reasons, transition rules and
//! ratcheting, and kube-openapi's range check of `format: int32`.

use serde_json::{Value, json};

use crate::*;

const GADGETS: &str = "/apis/rules.example.dev/v1/namespaces/default/gadgets";

fn rules_crd(extra_spec_rules: &[Value]) -> Value {
    let mut spec_rules = vec![
        json!({"rule": "!has(self.min) || !has(self.max) || self.min <= self.max", "message": "min must not exceed max", "fieldPath": ".min"}),
        json!({"rule": "!has(self.size) || self.size != 13", "messageExpression": "'size ' + string(self.size) + ' is unlucky'"}),
        json!({"rule": "self.tier == oldSelf.tier", "message": "tier is immutable", "reason": "FieldValueForbidden", "fieldPath": ".tier"}),
        json!({"rule": "has(self.tier)", "message": "tier is required", "reason": "FieldValueRequired", "fieldPath": ".tier"}),
    ];
    spec_rules.extend(extra_spec_rules.iter().cloned());
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.rules.example.dev"},
        "spec": {
            "group": "rules.example.dev",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-validations": [
                        {"rule": "self.metadata.name != 'reserved'", "message": "this name is reserved"}
                    ],
                    "properties": {
                        "spec": {
                            "type": "object",
                            "x-kubernetes-validations": spec_rules,
                            "properties": {
                                "tier": {"type": "string"},
                                "min": {"type": "integer", "format": "int64"},
                                "max": {"type": "integer", "format": "int64"},
                                "size": {"type": "integer", "format": "int32"},
                                "owner": {"type": "string", "x-kubernetes-validations": [
                                    {"rule": "!oldSelf.hasValue() || self == oldSelf.value()", "optionalOldSelf": true, "message": "owner is immutable once set"}
                                ]},
                                "ports": {
                                    "type": "array",
                                    "x-kubernetes-validations": [
                                        {"rule": "self.all(p, self.exists_one(q, q.name == p.name))", "reason": "FieldValueDuplicate"}
                                    ],
                                    "items": {
                                        "type": "object",
                                        "properties": {"name": {"type": "string"}, "port": {"type": "integer", "format": "int32"}},
                                        "x-kubernetes-validations": [
                                            {"rule": "self.port > 1024 || self.name.startsWith('sys-')", "message": "a privileged port needs a sys- name"}
                                        ]
                                    }
                                },
                                "labels": {
                                    "type": "object",
                                    "additionalProperties": {"type": "string", "x-kubernetes-validations": [{"rule": "size(self) <= 5"}]}
                                },
                                "limits": {
                                    "type": "object",
                                    "additionalProperties": {"type": "integer"},
                                    "x-kubernetes-validations": [{"rule": "self['cpu'] > 0", "message": "cpu must be positive"}]
                                }
                            }
                        },
                        "status": {
                            "type": "object",
                            "x-kubernetes-validations": [{"rule": "!has(self.phase) || self.phase != 'Broken'"}],
                            "properties": {"phase": {"type": "string"}, "count": {"type": "integer", "minimum": 0}}
                        }
                    }
                }}
            }]
        }
    })
}

fn setup_rules() -> ApiServer {
    let api = ApiServer::new();
    api.install_crd(rules_crd(&[])).unwrap();
    api
}

fn gadget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "rules.example.dev/v1", "kind": "Gadget", "metadata": {"name": name}, "spec": spec})
}

/// (reason, field, message) of each cause.
fn causes(body: &Value) -> Vec<(String, String, String)> {
    body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (text("reason"), text("field"), text("message"))
        })
        .collect()
}

fn cause(reason: &str, field: &str, message: &str) -> (String, String, String) {
    (reason.into(), field.into(), message.into())
}

async fn put(api: &ApiServer, uri: &str, body: Value) -> (u16, Value) {
    call(api, "PUT", uri, "application/json", body).await
}

async fn merge_patch(api: &ApiServer, uri: &str, patch: Value) -> (u16, http::HeaderMap, Value) {
    request(
        api,
        "PATCH",
        uri,
        &[("content-type", "application/merge-patch+json")],
        patch,
    )
    .await
}

#[tokio::test]
async fn a_failing_rule_is_invalid_on_its_field_path_with_the_schema_type_as_value() {
    let api = setup_rules();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "min": 5, "max": 1})),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "g" is invalid: spec.min: Invalid value: "object": min must not exceed max"#
    );
    assert_eq!(
        (
            &body["details"]["kind"],
            &body["details"]["group"],
            &body["details"]["name"]
        ),
        (&json!("Gadget"), &json!("rules.example.dev"), &json!("g"))
    );
    assert_eq!(
        causes(&body),
        [cause(
            "FieldValueInvalid",
            "spec.min",
            r#"Invalid value: "object": min must not exceed max"#
        )]
    );
}

#[tokio::test]
async fn a_passing_rule_lets_the_object_in() {
    let api = setup_rules();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "min": 1, "max": 5, "size": 12})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn a_message_expression_is_evaluated_into_the_message() {
    let api = setup_rules();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "size": 13})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "g" is invalid: spec: Invalid value: "object": size 13 is unlucky"#
    );
}

#[tokio::test]
async fn a_rule_without_a_message_fails_with_the_rule_itself() {
    let api = setup_rules();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "labels": {"team": "platform"}})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        causes(&body),
        [cause(
            "FieldValueInvalid",
            "spec.labels[team]",
            r#"Invalid value: "string": failed rule: size(self) <= 5"#
        )]
    );
}

#[tokio::test]
async fn rules_on_array_items_are_evaluated_per_item_with_the_index_in_the_path() {
    let api = setup_rules();
    let ports = json!([{"name": "sys-ssh", "port": 22}, {"name": "http", "port": 80}, {"name": "app", "port": 8080}]);
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "ports": ports})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "g" is invalid: spec.ports[1]: Invalid value: "object": a privileged port needs a sys- name"#
    );
}

#[tokio::test]
async fn a_rule_on_the_root_is_reported_on_the_nil_path() {
    let api = setup_rules();
    let (code, body) = post(&api, GADGETS, gadget("reserved", json!({"tier": "gold"}))).await;
    assert_eq!(code, 422);
    assert_eq!(
        causes(&body),
        [cause(
            "FieldValueInvalid",
            "<nil>",
            r#"Invalid value: "object": this name is reserved"#
        )]
    );
}

#[tokio::test]
async fn reasons_give_the_field_error_type() {
    let api = setup_rules();
    let ports = json!([{"name": "sys-a", "port": 1}, {"name": "sys-a", "port": 2}]);
    let (code, body) = post(&api, GADGETS, gadget("g", json!({"ports": ports}))).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "g" is invalid: [spec.tier: Required value: tier is required, spec.ports: Duplicate value: "array"]"#
    );
    assert_eq!(
        causes(&body),
        [
            cause(
                "FieldValueRequired",
                "spec.tier",
                "Required value: tier is required"
            ),
            cause(
                "FieldValueDuplicate",
                "spec.ports",
                r#"Duplicate value: "array""#
            ),
        ]
    );
}

#[tokio::test]
async fn a_transition_rule_is_evaluated_only_on_update() {
    let api = setup_rules();
    let (code, body) = post(&api, GADGETS, gadget("g", json!({"tier": "gold"}))).await;
    assert_eq!(code, 201, "{body}");
    let uri = format!("{GADGETS}/g");
    let (code, _, body) = merge_patch(&api, &uri, json!({"spec": {"tier": "silver"}})).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "g" is invalid: spec.tier: Forbidden: tier is immutable"#
    );
    assert_eq!(
        causes(&body),
        [cause(
            "FieldValueForbidden",
            "spec.tier",
            "Forbidden: tier is immutable"
        )]
    );
    // The same through PUT.
    let (_, current) = get(&api, &uri).await;
    let mut changed = current.clone();
    changed["spec"]["tier"] = json!("bronze");
    let (code, body) = put(&api, &uri, changed).await;
    assert_eq!(code, 422, "{body}");
    let (code, _, body) = merge_patch(&api, &uri, json!({"spec": {"min": 1}})).await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test]
async fn an_optional_old_self_rule_is_evaluated_on_create_with_no_old_value() {
    let api = setup_rules();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "owner": "alice"})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let uri = format!("{GADGETS}/g");
    let (code, _, body) = merge_patch(&api, &uri, json!({"spec": {"owner": "bob"}})).await;
    assert_eq!(code, 422);
    assert_eq!(
        causes(&body),
        [cause(
            "FieldValueInvalid",
            "spec.owner",
            r#"Invalid value: "string": owner is immutable once set"#
        )]
    );
}

#[tokio::test]
async fn a_rule_that_fails_to_evaluate_names_the_error_and_the_rule() {
    let api = setup_rules();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "limits": {"memory": 4}})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "g" is invalid: spec.limits: Invalid value: "object": no such key: cpu evaluating rule: cpu must be positive"#
    );
}

#[tokio::test]
async fn several_failures_are_listed_in_one_message_and_as_causes() {
    let api = setup_rules();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget(
            "reserved",
            json!({"tier": "gold", "min": 9, "max": 1, "size": 13}),
        ),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "reserved" is invalid: [<nil>: Invalid value: "object": this name is reserved, spec.min: Invalid value: "object": min must not exceed max, spec: Invalid value: "object": size 13 is unlucky]"#
    );
    let fields: Vec<String> = causes(&body).into_iter().map(|(_, f, _)| f).collect();
    assert_eq!(fields, ["<nil>", "spec.min", "spec"]);
}

#[tokio::test]
async fn an_int32_out_of_range_is_refused_with_kube_openapis_range_message() {
    let api = setup_rules();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "size": 2_147_483_648_i64})),
    )
    .await;
    assert_eq!(code, 422);
    // kube-openapi returns a plain error, which the apiserver puts on the
    // custom resource validator's nil path.
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "g" is invalid: <nil>: Invalid value: "": Checked value must be of type integer with format int32 in spec.size"#
    );
    assert_eq!(
        causes(&body),
        [cause(
            "FieldValueInvalid",
            "<nil>",
            r#"Invalid value: "": Checked value must be of type integer with format int32 in spec.size"#
        )]
    );
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "size": 2_147_483_647})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn an_int64_out_of_range_is_a_float_and_a_type_error_that_blocks_the_rules() {
    let api = setup_rules();
    // 2^63 does not fit int64: the apiserver decodes it as a float64.
    let (code, body) = post(
        &api,
        GADGETS,
        gadget(
            "g",
            json!({"tier": "gold", "max": 9_223_372_036_854_775_808_u64}),
        ),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        causes(&body),
        [
            cause(
                "FieldValueTypeInvalid",
                "spec.max",
                r#"Invalid value: "float64": spec.max in body must be of type int64: "float64""#
            ),
            cause(
                "FieldValueInvalid",
                "<nil>",
                r#"Invalid value: "": Checked value must be of type integer with format int64 in spec.max"#
            ),
            cause(
                "FieldValueInvalid",
                "<nil>",
                "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
            ),
        ]
    );
}

#[tokio::test]
async fn a_float_in_an_int32_field_is_of_the_wrong_format() {
    let api = setup_rules();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "size": 1.5})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        causes(&body)[..2],
        [
            cause(
                "FieldValueTypeInvalid",
                "spec.size",
                r#"Invalid value: "float64": spec.size in body must be of type int32: "float64""#
            ),
            cause(
                "FieldValueInvalid",
                "<nil>",
                r#"Invalid value: "": Checked value must be of type integer with format int32 in spec.size"#
            ),
        ]
    );
    // A whole float is an integer (to the schema: not to CEL, where the
    // apiserver sees a float64, so a rule reading it would fail).
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "max": 7.0})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn the_status_subresource_validates_status_by_schema_and_the_whole_object_by_rules() {
    let api = setup_rules();
    let (code, body) = post(&api, GADGETS, gadget("g", json!({"tier": "gold"}))).await;
    assert_eq!(code, 201, "{body}");
    let status = format!("{GADGETS}/g/status");
    let (code, _, body) = merge_patch(&api, &status, json!({"status": {"phase": "Broken"}})).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "g" is invalid: status: Invalid value: "object": failed rule: !has(self.phase) || self.phase != 'Broken'"#
    );
    // The status schema is validated from its own root: the message names
    // the field without `status.`.
    let (code, _, body) = merge_patch(&api, &status, json!({"status": {"count": -1}})).await;
    assert_eq!(code, 422);
    assert_eq!(
        causes(&body),
        [cause(
            "FieldValueInvalid",
            "status.count",
            "Invalid value: -1: count in body should be greater than or equal to 0"
        )]
    );
    let (code, _, body) = merge_patch(&api, &status, json!({"status": {"phase": "Ready"}})).await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test]
async fn an_unchanged_invalid_value_is_ratcheted_into_a_warning() {
    let api = ApiServer::new();
    // The rule arrives after the object.
    let mut crd = rules_crd(&[]);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
        json!([]);
    api.install_crd(crd).unwrap();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "min": 5, "max": 1})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    api.install_crd(rules_crd(&[])).unwrap();

    let uri = format!("{GADGETS}/g");
    let (code, headers, body) =
        merge_patch(&api, &uri, json!({"metadata": {"labels": {"a": "b"}}})).await;
    assert_eq!(code, 200, "{body}");
    let warnings: Vec<&str> = headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        warnings,
        [r#"299 - "spec.min: Invalid value: \"object\": min must not exceed max""#]
    );
    // The status subresource keeps spec as it was: ratcheted too.
    let (code, _, body) = merge_patch(
        &api,
        &format!("{uri}/status"),
        json!({"status": {"phase": "Ready"}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    // Changing spec makes it an error again.
    let (code, _, body) = merge_patch(&api, &uri, json!({"spec": {"max": 2}})).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "g" is invalid: spec.min: Invalid value: "object": min must not exceed max"#
    );
}

#[tokio::test]
async fn a_type_error_keeps_the_rules_from_being_evaluated() {
    let api = setup_rules();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("reserved", json!({"tier": "gold", "min": "five"})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "reserved" is invalid: [spec.min: Invalid value: "string": spec.min in body must be of type integer: "string", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"#
    );
}

#[tokio::test]
async fn a_crd_with_a_rule_that_does_not_compile_is_refused() {
    let api = ApiServer::new();
    let err = api
        .install_crd(rules_crd(&[json!({"rule": "self.min <"})]))
        .unwrap_err();
    assert_eq!(err.code, 422);
    let prefix = r#"CustomResourceDefinition.apiextensions.k8s.io "gadgets.rules.example.dev" is invalid: spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[4].rule: Invalid value: {"Rule":"self.min \u003c","Message":"","MessageExpression":"","Reason":null,"FieldPath":"","OptionalOldSelf":null}: compilation failed: ERROR: <input>:1:11: Syntax error: mismatched input '<EOF>' expecting"#;
    assert!(err.message.starts_with(prefix), "{}", err.message);
    // Under it, the source and where the error is, as cel-go prints them.
    assert!(
        err.message.ends_with("\n | self.min <\n | ..........^"),
        "{}",
        err.message
    );
    let cause = &err.details.unwrap().causes[0];
    assert_eq!(
        cause.field,
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[4].rule"
    );
}

#[tokio::test]
async fn a_crd_with_a_field_path_that_names_no_field_is_refused() {
    let api = ApiServer::new();
    let err = api
        .install_crd(rules_crd(&[json!({"rule": "true", "fieldPath": ".nope"})]))
        .unwrap_err();
    assert_eq!(
        err.message,
        r#"CustomResourceDefinition.apiextensions.k8s.io "gadgets.rules.example.dev" is invalid: spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[4].fieldPath: Invalid value: ".nope": must be a valid path"#
    );
}

#[tokio::test]
async fn a_value_that_breaks_a_tightened_schema_may_stay_while_it_does_not_change() {
    let api = setup_rules();
    let (code, body) = post(
        &api,
        GADGETS,
        gadget("g", json!({"tier": "gold", "max": 50})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let mut tightened = rules_crd(&[]);
    tightened["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["max"]["maximum"] = json!(10);
    api.install_crd(tightened).unwrap();

    let uri = format!("{GADGETS}/g");
    let (code, _, body) = merge_patch(&api, &uri, json!({"spec": {"min": 1}})).await;
    assert_eq!(code, 200, "{body}");
    let (code, _, body) = merge_patch(&api, &uri, json!({"spec": {"max": 40}})).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"Gadget.rules.example.dev "g" is invalid: spec.max: Invalid value: 40: spec.max in body should be less than or equal to 10"#
    );
}

/// Installs a cluster-scoped kind of `example.dev` (see `cluster_crd`) with `root_rules` on
/// its root; the path its objects are posted to.
fn install_example(
    api: &ApiServer,
    kind: &str,
    root_rules: Value,
    spec_properties: Value,
) -> String {
    let plural = format!("{}s", kind.to_lowercase());
    let mut crd = cluster_crd(&plural, kind, spec_properties);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] =
        root_rules;
    api.install_crd(crd).unwrap();
    format!("/apis/example.dev/v1/{plural}")
}

fn example(kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.dev/v1", "kind": kind, "metadata": {"name": name}, "spec": spec})
}

/// A rule whose failure is `Forbidden: {message}`: a message without the value shown, which
/// reads the same whichever way the apiserver shows the value of a failed rule.
fn forbidding(rule: &str, message: &str) -> Value {
    json!({"rule": rule, "message": message, "reason": "FieldValueForbidden"})
}

/// The causes of a 422, sorted: the apiserver walks properties in Go's map order.
fn sorted_causes(code: u16, body: &Value) -> Vec<(String, String, String)> {
    assert_eq!(code, 422, "{body}");
    let mut causes = causes(body);
    causes.sort();
    causes
}

/// The apiserver has a rule validator for a kind only if its schema has rules somewhere
/// (`hasXValidations`: on a node, or below its properties, items or additionalProperties), and
/// only then does an error that blocks the rules add that they were not checked.
#[tokio::test]
async fn rules_blocked_by_a_type_error_are_reported_unchecked_only_where_the_schema_has_rules() {
    let api = ApiServer::new();
    let properties = |extra: Value| {
        let mut p = json!({
            "size": {"type": "integer"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}}
        });
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    let rule = json!([{"rule": "true"}]);
    let type_error = cause(
        "FieldValueTypeInvalid",
        "spec.size",
        r#"Invalid value: "string": spec.size in body must be of type integer: "string""#,
    );
    let not_checked = cause(
        "FieldValueInvalid",
        "<nil>",
        "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
    );
    let kinds = [
        // A rule on the root alone.
        ("Rooted", rule.clone(), properties(json!({})), true),
        // A rule on a property alone.
        (
            "Nested",
            json!([]),
            properties(json!({"named": {"type": "string", "x-kubernetes-validations": rule}})),
            true,
        ),
        // A rule on the items of a list alone.
        (
            "Listed",
            json!([]),
            properties(json!({"tags": {"type": "array",
                "items": {"type": "string", "x-kubernetes-validations": rule}}})),
            true,
        ),
        // No rule, but a map (additionalProperties), which has none either.
        ("Plain", json!([]), properties(json!({})), false),
    ];
    for (kind, root_rules, spec_properties, has_rules) in kinds {
        let uri = install_example(&api, kind, root_rules, spec_properties);
        let spec = json!({"size": "big", "labels": {"a": "b"}});
        let (code, body) = post(&api, &uri, example(kind, "x", spec)).await;
        let mut expected = vec![type_error.clone()];
        if has_rules {
            expected.push(not_checked.clone());
        }
        assert_eq!(code, 422, "{kind}: {body}");
        assert_eq!(causes(&body), expected, "{kind}");
    }
}

/// `self` is typed by the schema (`UnstructuredToVal`): `date-time` and `date` strings are
/// timestamps (in arrays too), a `number` is a double even when written as an integer, and a
/// null field of an object is absent.
#[tokio::test]
async fn self_is_typed_by_the_schema_the_rule_sits_on() {
    let api = ApiServer::new();
    let after_2020 = "self > timestamp('2020-01-01T00:00:00Z')";
    let uri = install_example(
        &api,
        "Typed",
        json!([]),
        json!({
            "at": {"type": "string", "format": "date-time",
                   "x-kubernetes-validations": [forbidding(after_2020, "at must be after 2020")]},
            "day": {"type": "string", "format": "date",
                    "x-kubernetes-validations": [forbidding(after_2020, "day must be after 2020")]},
            "times": {"type": "array", "items": {"type": "string", "format": "date-time"},
                      "x-kubernetes-validations": [forbidding(
                          "self.all(t, t > timestamp('2020-01-01T00:00:00Z'))",
                          "times must be after 2020")]},
            "ratio": {"type": "number",
                      "x-kubernetes-validations": [forbidding("self / 2.0 >= 1.0", "ratio must be at least 2")]},
            "holder": {"type": "object", "properties": {"note": {"type": "string", "nullable": true}},
                       "x-kubernetes-validations": [forbidding(
                           "!has(self.note) || size(self.note) > 0", "note must not be empty")]}
        }),
    );
    let spec = json!({
        "at": "2025-06-01T12:00:00Z", "day": "2025-06-01", "times": ["2025-06-01T12:00:00Z"],
        "ratio": 3, "holder": {"note": null}
    });
    let (code, body) = post(&api, &uri, example("Typed", "ok", spec)).await;
    assert_eq!(code, 201, "{body}");
    // The same rules do fail: they were evaluated, not skipped.
    let spec = json!({
        "at": "2019-06-01T12:00:00Z", "day": "2019-06-01", "times": ["2019-06-01T12:00:00Z"],
        "ratio": 1, "holder": {"note": ""}
    });
    let (code, body) = post(&api, &uri, example("Typed", "bad", spec)).await;
    assert_eq!(
        sorted_causes(code, &body),
        [
            cause(
                "FieldValueForbidden",
                "spec.at",
                "Forbidden: at must be after 2020"
            ),
            cause(
                "FieldValueForbidden",
                "spec.day",
                "Forbidden: day must be after 2020"
            ),
            cause(
                "FieldValueForbidden",
                "spec.holder",
                "Forbidden: note must not be empty"
            ),
            cause(
                "FieldValueForbidden",
                "spec.ratio",
                "Forbidden: ratio must be at least 2"
            ),
            cause(
                "FieldValueForbidden",
                "spec.times",
                "Forbidden: times must be after 2020"
            ),
        ]
    );
}

/// At the root and in an embedded resource, `apiVersion`, `kind` and `metadata.name` are
/// visible whether or not the schema declares them (`WithTypeAndObjectMeta`), and no other
/// metadata: the apiserver types `metadata` with only `name` and `generateName`, so cel-go
/// refuses a rule reading `uid` or labels when the CRD is written; here, without a type check,
/// they read as absent.
#[tokio::test]
async fn a_resource_root_shows_its_type_and_name_and_no_other_metadata() {
    let api = ApiServer::new();
    let root_rules = json!([
        forbidding(
            "self.apiVersion == 'example.dev/v1' && self.kind == 'Wrapper' && self.metadata.name.startsWith('w-')",
            "must be a w- Wrapper",
        ),
        forbidding(
            "!has(self.metadata.uid) && !has(self.metadata.labels)",
            "metadata beyond the name is visible",
        ),
    ]);
    let uri = install_example(
        &api,
        "Wrapper",
        root_rules,
        json!({
            "template": {
                "type": "object",
                "x-kubernetes-embedded-resource": true,
                "properties": {"data": {"type": "object", "additionalProperties": {"type": "string"}}},
                "x-kubernetes-validations": [forbidding(
                    "self.apiVersion == 'v1' && self.kind == 'ConfigMap' && self.metadata.name == 'settings'",
                    "template must be the settings ConfigMap")]
            }
        }),
    );
    let wrapper = |name: &str, template_kind: &str| {
        let mut w = example(
            "Wrapper",
            name,
            json!({"template": {
                "apiVersion": "v1", "kind": template_kind,
                "metadata": {"name": "settings"},
                "data": {"k": "v"}
            }}),
        );
        w["metadata"]["labels"] = json!({"team": "a"});
        w
    };
    let (code, body) = post(&api, &uri, wrapper("w-1", "ConfigMap")).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = post(&api, &uri, wrapper("x-1", "Secret")).await;
    assert_eq!(
        sorted_causes(code, &body),
        [
            cause(
                "FieldValueForbidden",
                "<nil>",
                "Forbidden: must be a w- Wrapper"
            ),
            cause(
                "FieldValueForbidden",
                "spec.template",
                "Forbidden: template must be the settings ConfigMap"
            ),
        ]
    );
}

/// A `messageExpression` gives the message only if it evaluates to a string that, trimmed, is
/// non-empty, at most 5 KiB (`MaxEvaluatedMessageExpressionSizeBytes`) and on one line; else
/// the apiserver logs why and uses the rule's message.
#[tokio::test]
async fn a_message_expression_too_long_empty_or_multiline_falls_back_to_the_message() {
    let api = ApiServer::new();
    let uri = install_example(
        &api,
        "Noted",
        json!([]),
        json!({"note": {"type": "string", "x-kubernetes-validations": [{
            "rule": "self.startsWith('ok')", "message": "note must start with ok",
            "messageExpression": "self", "reason": "FieldValueForbidden"
        }]}}),
    );
    let fallback = "note must start with ok".to_owned();
    let longest = "x".repeat(5 * 1024);
    let cases = [
        (longest.clone(), longest.clone()),
        (format!("{longest}x"), fallback.clone()),
        (format!("  {longest}  "), longest),
        ("   ".to_owned(), fallback.clone()),
        ("two\nlines".to_owned(), fallback),
    ];
    for (i, (note, message)) in cases.into_iter().enumerate() {
        let (code, body) = post(
            &api,
            &uri,
            example("Noted", &format!("n{i}"), json!({"note": note})),
        )
        .await;
        assert_eq!(
            sorted_causes(code, &body),
            [cause(
                "FieldValueForbidden",
                "spec.note",
                &format!("Forbidden: {message}")
            )],
            "case {i}"
        );
    }
}
