//! A custom resource against its structural `openAPIV3Schema`, in the
//! apiserver's order: prune unknown fields (unless
//! `x-kubernetes-preserve-unknown-fields`), drop nulls of non-nullable fields
//! and apply `default`s, then validate with kube-openapi's messages
//! (`spec.replicas in body should be greater than or equal to 0`).
//!
//! Validated: `type` (and `x-kubernetes-int-or-string`), `nullable`, `enum`,
//! `required`, `minimum`/`maximum` (and exclusive), `multipleOf`,
//! `minLength`/`maxLength`, `minItems`/`maxItems`, `allOf`/`anyOf`/`oneOf`/`not`.
//! Not validated: `pattern`, `format`, `uniqueItems`, list-type/map-type
//! invariants, `x-kubernetes-validations` (CEL), min/maxProperties.

use serde_json::{Map, Value};

use crate::status::{BadValue, FieldError, FieldErrorKind, go_quote};

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Prunes and defaults `obj` in place, as the apiserver does when it decodes a
/// custom resource.
pub(crate) fn normalize(schema: &Value, obj: &mut Value) {
    prune(schema, obj, true);
    default(schema, obj);
}

/// The paths of the fields pruning would drop (`spec.foo`,
/// `spec.items[0].bar`), sorted: what `fieldValidation` reports.
pub(crate) fn unknown_fields(schema: &Value, obj: &Value) -> Vec<String> {
    let mut found = Vec::new();
    collect_unknown(schema, obj, true, "", &mut found);
    found.sort();
    found
}

fn collect_unknown(
    schema: &Value,
    value: &Value,
    embedded: bool,
    path: &str,
    found: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keep_unknown = flag(schema, "x-kubernetes-preserve-unknown-fields")
                || additional == Some(&Value::Bool(true));
            let embedded = embedded || flag(schema, "x-kubernetes-embedded-resource");
            for (key, child) in map {
                if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                match properties
                    .and_then(|p| p.get(key))
                    .or(additional.filter(|a| a.is_object()))
                {
                    Some(s) => collect_unknown(s, child, false, &child_path(path, key), found),
                    None if keep_unknown => {}
                    None => found.push(child_path(path, key)),
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    collect_unknown(s, item, false, &format!("{path}[{i}]"), found);
                }
            }
        }
        _ => {}
    }
}

/// Drops the fields the schema does not know. `apiVersion`, `kind` and
/// `metadata` survive at the root and in embedded resources.
fn prune(schema: &Value, value: &mut Value, embedded: bool) {
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keep_unknown = flag(schema, "x-kubernetes-preserve-unknown-fields")
                || additional == Some(&Value::Bool(true));
            let embedded = embedded || flag(schema, "x-kubernetes-embedded-resource");
            map.retain(|key, child| {
                if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    return true;
                }
                match properties
                    .and_then(|p| p.get(key))
                    .or(additional.filter(|a| a.is_object()))
                {
                    Some(s) => {
                        prune(s, child, false);
                        true
                    }
                    None => keep_unknown,
                }
            });
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                items.iter_mut().for_each(|item| prune(s, item, false));
            }
        }
        _ => {}
    }
}

/// Applies `default`s top-down; a null in a non-nullable field is replaced by
/// its default or removed.
fn default(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, s) in properties {
                    let missing = match map.get(key) {
                        None => true,
                        Some(Value::Null) => !flag(s, "nullable"),
                        Some(_) => false,
                    };
                    if missing {
                        match s.get("default") {
                            Some(d) => map.insert(key.clone(), d.clone()),
                            None => map.remove(key),
                        };
                    }
                }
                for (key, child) in map.iter_mut() {
                    if let Some(s) = properties.get(key) {
                        default(s, child);
                    }
                }
            }
            if let Some(s) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                map.values_mut().for_each(|child| default(s, child));
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                items.iter_mut().for_each(|item| default(s, item));
            }
        }
        _ => {}
    }
}

/// The field errors of `obj` against `schema`, with the apiserver's paths
/// (`spec.items[0].name`, `spec.labels.key`) and messages.
pub(crate) fn validate(schema: &Value, obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_node(schema, obj, "", &mut errors);
    errors
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Go's `%v` of a float64: integral values without a fraction.
fn go_float(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{f:.0}")
    } else {
        f.to_string()
    }
}

fn type_matches(schema: &Value, actual: &str) -> Result<(), String> {
    if flag(schema, "x-kubernetes-int-or-string") {
        return if matches!(actual, "integer" | "string") {
            Ok(())
        } else {
            Err("integer,string".into())
        };
    }
    match schema.get("type").and_then(Value::as_str) {
        None => Ok(()),
        Some("number") if actual == "integer" => Ok(()),
        Some(t) if t == actual => Ok(()),
        Some(t) => Err(t.to_owned()),
    }
}

fn validate_node(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let invalid = |value: &Value, detail: String| FieldError::invalid(path, value.clone(), detail);
    if value.is_null() && flag(schema, "nullable") {
        return;
    }
    let actual = json_type(value);
    if let Err(expected) = type_matches(schema, actual) {
        errors.push(FieldError::new(
            FieldErrorKind::TypeInvalid,
            path,
            BadValue::Json(actual.into()),
            format!(
                "{path} in body must be of type {expected}: {}",
                go_quote(actual)
            ),
        ));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let quoted: Vec<String> = allowed
            .iter()
            .map(|a| {
                go_quote(
                    a.as_str()
                        .map_or_else(|| a.to_string(), str::to_owned)
                        .as_str(),
                )
            })
            .collect();
        errors.push(FieldError::new(
            FieldErrorKind::NotSupported,
            path,
            BadValue::Json(value.clone()),
            format!("supported values: {}", quoted.join(", ")),
        ));
    }
    match value {
        Value::Number(n) => {
            validate_number(schema, n.as_f64().unwrap_or_default(), value, path, errors)
        }
        Value::String(s) => {
            let chars = s.chars().count();
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && chars as u64 > max
            {
                errors.push(FieldError::new(
                    FieldErrorKind::TooLong,
                    path,
                    BadValue::Omit,
                    format!("must have at most {max} bytes"),
                ));
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && (chars as u64) < min
            {
                errors.push(invalid(
                    value,
                    format!("{path} in body should be at least {min} chars long"),
                ));
            }
        }
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && len > max
            {
                errors.push(FieldError::new(
                    FieldErrorKind::TooMany,
                    path,
                    BadValue::Json(len.into()),
                    format!("must have at most {max} items"),
                ));
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && len < min
            {
                errors.push(invalid(
                    value,
                    format!("{path} in body should have at least {min} items"),
                ));
            }
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate_node(s, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        Value::Object(map) => validate_object(schema, map, path, errors),
        _ => {}
    }
    validate_compositions(schema, value, path, errors);
}

fn validate_number(
    schema: &Value,
    n: f64,
    value: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let exclusive = |name| flag(schema, name);
    let bound = |name| schema.get(name).and_then(Value::as_f64);
    let mut fail = |detail: String| errors.push(FieldError::invalid(path, value.clone(), detail));
    if let Some(min) = bound("minimum") {
        if exclusive("exclusiveMinimum") && n <= min {
            fail(format!(
                "{path} in body should be greater than {}",
                go_float(min)
            ));
        } else if n < min {
            fail(format!(
                "{path} in body should be greater than or equal to {}",
                go_float(min)
            ));
        }
    }
    if let Some(max) = bound("maximum") {
        if exclusive("exclusiveMaximum") && n >= max {
            fail(format!(
                "{path} in body should be less than {}",
                go_float(max)
            ));
        } else if n > max {
            fail(format!(
                "{path} in body should be less than or equal to {}",
                go_float(max)
            ));
        }
    }
    if let Some(m) = bound("multipleOf").filter(|m| *m > 0.0)
        && (n / m).fract() != 0.0
    {
        fail(format!(
            "{path} in body should be a multiple of {}",
            go_float(m)
        ));
    }
}

fn validate_object(
    schema: &Value,
    map: &Map<String, Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(name) {
            errors.push(FieldError::required(child_path(path, name), ""));
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    // In key order, whatever order the body had.
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for key in keys {
        if let (Some(s), Some(child)) = (
            properties.and_then(|p| p.get(key)).or(additional),
            map.get(key),
        ) {
            validate_node(s, child, &child_path(path, key), errors);
        }
    }
}

fn validate_compositions(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let passes = |s: &Value| {
        let mut errs = Vec::new();
        validate_node(s, value, path, &mut errs);
        errs.is_empty()
    };
    let list = |name| {
        schema
            .get(name)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    for s in list("allOf") {
        validate_node(s, value, path, errors);
    }
    let mut fail = |what: &str| {
        errors.push(FieldError::invalid(
            path,
            "".into(),
            format!("{path} in body {what}"),
        ))
    };
    if !list("anyOf").is_empty() && !list("anyOf").iter().any(passes) {
        fail("must validate at least one schema (anyOf)");
    }
    if !list("oneOf").is_empty() && list("oneOf").iter().filter(|s| passes(s)).count() != 1 {
        fail("must validate one and only one schema (oneOf)");
    }
    if schema.get("not").is_some_and(passes) {
        fail("must not validate the schema (not)");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["replicas"],
                    "properties": {
                        "replicas": {"type": "integer", "minimum": 0},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "note": {"type": "string", "nullable": true}
                    }
                }
            }
        })
    }

    #[test]
    fn unknown_fields_are_named_with_their_paths_as_pruning_would_drop_them() {
        let obj = json!({
            "apiVersion": "g/v1", "kind": "K", "metadata": {"name": "a"}, "junk": 1,
            "spec": {"replicas": 1, "extra": true, "tags": [{"k": "x"}, {"k": "y", "y": 2}], "free": {"any": {"thing": 1}}}
        });
        assert_eq!(
            unknown_fields(&schema(), &obj),
            ["junk", "spec.extra", "spec.tags[1].y"]
        );
    }

    #[test]
    fn unknown_fields_are_pruned_but_metadata_and_preserved_subtrees_survive() {
        let mut obj = json!({
            "apiVersion": "g/v1", "kind": "K", "metadata": {"name": "a"}, "junk": 1,
            "spec": {"replicas": 1, "extra": true, "tags": [{"k": "x", "y": 2}], "free": {"any": {"thing": 1}}}
        });
        normalize(&schema(), &mut obj);
        assert_eq!(
            obj,
            json!({
                "apiVersion": "g/v1", "kind": "K", "metadata": {"name": "a"},
                "spec": {"replicas": 1, "mode": "a", "tags": [{"k": "x"}], "free": {"any": {"thing": 1}}}
            })
        );
    }

    #[test]
    fn nulls_are_defaulted_or_dropped_unless_nullable() {
        let mut obj = json!({"spec": {"replicas": 1, "mode": null, "tags": null, "note": null}});
        normalize(&schema(), &mut obj);
        assert_eq!(
            obj,
            json!({"spec": {"replicas": 1, "mode": "a", "note": null}})
        );
    }

    #[test]
    fn violations_read_like_the_apiservers() {
        let obj = json!({"spec": {"replicas": -1, "mode": "c", "tags": [{"k": 5}]}});
        let messages: Vec<String> = validate(&schema(), &obj)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            messages,
            [
                r#"spec.mode: Unsupported value: "c": supported values: "a", "b""#,
                "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
                r#"spec.tags[0].k: Invalid value: "integer": spec.tags[0].k in body must be of type string: "integer""#,
            ]
        );
        let missing = validate(&schema(), &json!({"spec": {}}));
        assert_eq!(missing[0].to_string(), "spec.replicas: Required value");
    }
}
