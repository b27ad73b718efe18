//! The `scale` subresource of custom resources, as apiextensions-apiserver's `ScaleREST` serves
//! it: an `autoscaling/v1` `Scale` read from, and written to, the JSON paths that a CRD version
//! names in `subresources.scale`.
//!
//! Rules, as the real registry applies them:
//! - a GET answers the object's Scale: `metadata` name, namespace, uid, resourceVersion and
//!   creationTimestamp of the object; `spec.replicas` at `specReplicasPath`; `status.replicas` at
//!   `statusReplicasPath` (0 when absent); `status.selector` at `labelSelectorPath` when one is
//!   set. An object without spec replicas is a 500 (`the spec replicas field ".spec.replicas"
//!   does not exist`); a value of the wrong type is a 500 that carries the accessor error.
//! - a write (PUT of a Scale; JSON, merge or apply patch of the current Scale) changes only
//!   `specReplicasPath`, through the update of the object itself: a `resourceVersion` in the
//!   Scale is a precondition (`409`), so is a PUT's `uid`; generation moves, watchers see
//!   `MODIFIED`, and the object is validated as any update of it is. A Scale whose object has no
//!   spec replicas is patched from `-2147483648`, and a Scale that still says so is a 400 (`the
//!   spec replicas field ".spec.replicas" cannot be empty`).
//! - every write of an object whose version has a scale subresource checks what the paths hold
//!   ([`validate`]): replicas are non-negative int32 integers, a selector is a string.
//! - a CRD's paths are simple JSON paths, specReplicasPath under `.spec.`, statusReplicasPath
//!   under `.status.`, labelSelectorPath under either ([`crd_errors`]).

use serde_json::{Map, Value, json};

use crate::meta;
use crate::status::{FieldError, Status, go_float, go_quote};

/// What a PATCH starts from when the object has no spec replicas (Go's smallest int32): a Scale
/// that still holds it after the patch cannot be written.
const NO_SPEC_REPLICAS: i64 = -2_147_483_648;

/// The paths of one CRD version's `subresources.scale`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    /// None when unset or empty.
    pub label_selector: Option<String>,
}

impl ScalePaths {
    /// The scale subresource of a CRD version (`spec.versions[i]`), if it has one.
    pub fn of_version(version: &Value) -> Option<Self> {
        let scale = version.pointer("/subresources/scale")?;
        let text = |key: &str| scale[key].as_str().unwrap_or_default().to_owned();
        Some(Self {
            spec_replicas: text("specReplicasPath"),
            status_replicas: text("statusReplicasPath"),
            label_selector: Some(text("labelSelectorPath")).filter(|p| !p.is_empty()),
        })
    }
}

/// `ValidateCustomResourceDefinitionSubresources` for the scale of a CRD version, whose field
/// path is `at` (`spec.versions[0].subresources`).
pub(crate) fn crd_errors(version: &Value, at: &str) -> Vec<FieldError> {
    let Some(scale) = version.pointer("/subresources/scale") else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    let mut check = |key: &str, prefixes: &[&str], under: &str, required: bool| {
        let field = format!("{at}.scale.{key}");
        let path = scale[key].as_str().unwrap_or_default();
        if path.is_empty() {
            if required {
                errors.push(FieldError::required(field, ""));
            }
            return;
        }
        if !path.starts_with('.') {
            errors.push(FieldError::invalid(
                field,
                path.into(),
                "must be a simple json path starting with .",
            ));
        } else if !prefixes.iter().any(|p| path.starts_with(p)) {
            errors.push(FieldError::invalid(
                field,
                path.into(),
                format!("should be a json path under {under}"),
            ));
        }
    };
    check("specReplicasPath", &[".spec."], ".spec", true);
    check("statusReplicasPath", &[".status."], ".status", true);
    check(
        "labelSelectorPath",
        &[".spec.", ".status."],
        "either .spec or .status",
        false,
    );
    errors
}

/// The field names of a path: `.spec.replicas` is `["spec", "replicas"]`.
fn fields(path: &str) -> Vec<&str> {
    path.strip_prefix('.').unwrap_or(path).split('.').collect()
}

/// `jsonPath` of the unstructured helpers: the fields joined after a dot.
fn json_path(fields: &[&str]) -> String {
    format!(".{}", fields.join("."))
}

/// Go's `%T` of a decoded JSON value.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Go's `%v` of a decoded JSON value (maps print with sorted keys, as `fmt` does).
fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.as_i64().map_or_else(
            || go_float(n.as_f64().unwrap_or(f64::NAN)),
            |i| i.to_string(),
        ),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            format!("[{}]", items.iter().map(go_v).collect::<Vec<_>>().join(" "))
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let entries: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{k}:{}", go_v(v)))
                .collect();
            format!("map[{}]", entries.join(" "))
        }
    }
}

/// `NestedFieldNoCopy`: the value at `fields`, None when a field is missing (or a parent is
/// null), an error when a parent is not a map.
fn nested<'a>(obj: &'a Value, fields: &[&str]) -> Result<Option<&'a Value>, String> {
    let mut val = obj;
    for (i, field) in fields.iter().enumerate() {
        if val.is_null() {
            return Ok(None);
        }
        let Some(map) = val.as_object() else {
            let upto = fields.get(..=i).unwrap_or(fields);
            return Err(format!(
                "{} accessor error: {} is of the type {}, expected map[string]interface{{}}",
                json_path(upto),
                go_v(val),
                go_type(val)
            ));
        };
        match map.get(*field) {
            Some(child) => val = child,
            None => return Ok(None),
        }
    }
    Ok(Some(val))
}

fn wrong_type(fields: &[&str], val: &Value, expected: &str) -> String {
    format!(
        "{} accessor error: {} is of the type {}, expected {expected}",
        json_path(fields),
        go_v(val),
        go_type(val)
    )
}

/// `NestedInt64`: an integer that JSON decoding makes an int64 (not a float, not a string).
fn nested_i64(obj: &Value, path: &str) -> Result<Option<i64>, String> {
    let fields = fields(path);
    match nested(obj, &fields)? {
        None => Ok(None),
        Some(val) => val
            .as_i64()
            .map(Some)
            .ok_or_else(|| wrong_type(&fields, val, "int64")),
    }
}

/// `NestedString`.
fn nested_string(obj: &Value, path: &str) -> Result<Option<String>, String> {
    let fields = fields(path);
    match nested(obj, &fields)? {
        None => Ok(None),
        Some(val) => val
            .as_str()
            .map(|s| Some(s.to_owned()))
            .ok_or_else(|| wrong_type(&fields, val, "string")),
    }
}

/// `SetNestedField`: missing maps on the way are created; a parent that is not a map is an
/// error.
fn set_nested(obj: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let fields = fields(path);
    let Some((last, parents)) = fields.split_last() else {
        return Ok(());
    };
    let mut current = obj;
    for (i, field) in parents.iter().enumerate() {
        let Some(map) = current.as_object_mut() else {
            return Err(not_a_map(&fields, i));
        };
        let child = map
            .entry(*field)
            .or_insert_with(|| Value::Object(Map::new()));
        if !child.is_object() {
            return Err(not_a_map(&fields, i));
        }
        current = child;
    }
    if let Some(map) = current.as_object_mut() {
        map.insert((*last).to_owned(), value);
    }
    Ok(())
}

fn not_a_map(fields: &[&str], i: usize) -> String {
    format!(
        "value cannot be set because {} is not a map[string]interface{{}}",
        json_path(fields.get(..=i).unwrap_or(fields))
    )
}

/// `scaleFromCustomResource`: the Scale of an object, and whether its spec replicas were
/// found (0 when not). Errors are the accessor errors of a path whose value has another type.
pub(crate) fn scale_of(obj: &Value, paths: &ScalePaths) -> Result<(Value, bool), String> {
    let spec = nested_i64(obj, &paths.spec_replicas)?;
    let status = nested_i64(obj, &paths.status_replicas)?.unwrap_or(0);
    let selector = match &paths.label_selector {
        Some(path) => nested_string(obj, path)?.unwrap_or_default(),
        None => String::new(),
    };
    Ok((
        scale_json(obj, spec.unwrap_or(0), status, &selector),
        spec.is_some(),
    ))
}

/// The Scale as the apiserver serializes it: Go's `int32` conversions, and the fields whose
/// zero value is omitted (`spec.replicas`, `status.selector`, empty metadata) left out.
fn scale_json(obj: &Value, spec_replicas: i64, status_replicas: i64, selector: &str) -> Value {
    let mut metadata = Map::new();
    for field in ["name", "namespace", "uid", "resourceVersion"] {
        let value = meta::str_field(obj, field);
        if !value.is_empty() {
            metadata.insert(field.into(), value.into());
        }
    }
    metadata.insert(
        "creationTimestamp".into(),
        obj["metadata"]["creationTimestamp"].clone(),
    );
    // `int32(n)`: Go's conversion keeps the low 32 bits.
    let (spec_replicas, status_replicas) = (spec_replicas as i32, status_replicas as i32);
    let mut spec = Map::new();
    if spec_replicas != 0 {
        spec.insert("replicas".into(), spec_replicas.into());
    }
    let mut status = json!({"replicas": status_replicas});
    if !selector.is_empty() {
        status["selector"] = selector.into();
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    })
}

/// The Scale a write starts from: the object's, with `-2147483648` spec replicas when it has
/// none, so that a write that sets none can be told apart.
pub(crate) fn current_scale(obj: &Value, paths: &ScalePaths) -> Result<Value, String> {
    let (mut scale, found) = scale_of(obj, paths)?;
    if !found {
        scale["spec"]["replicas"] = NO_SPEC_REPLICAS.into();
    }
    Ok(scale)
}

/// What a written Scale says, once decoded as an `autoscaling/v1` `Scale`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ScaleWrite {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub resource_version: String,
    pub replicas: i64,
}

/// Decodes a Scale as Go's JSON decoder fills an `autoscaling/v1` `Scale`: a field of the wrong
/// type is the decoder's `json: cannot unmarshal ...` error (the first one, in field order).
pub(crate) fn decode(body: &Value) -> Result<ScaleWrite, String> {
    /// (JSON path from the root, Go struct holding the field, Go type)
    type Field = (&'static [&'static str], &'static str, &'static str);
    const STRUCTS: [Field; 3] = [
        (&["metadata"], "Scale", "v1.ObjectMeta"),
        (&["spec"], "Scale", "v1.ScaleSpec"),
        (&["status"], "Scale", "v1.ScaleStatus"),
    ];
    const SCALARS: [Field; 7] = [
        (&["metadata", "name"], "ObjectMeta", "string"),
        (&["metadata", "namespace"], "ObjectMeta", "string"),
        (&["metadata", "uid"], "ObjectMeta", "types.UID"),
        (&["metadata", "resourceVersion"], "ObjectMeta", "string"),
        (&["spec", "replicas"], "ScaleSpec", "int32"),
        (&["status", "replicas"], "ScaleStatus", "int32"),
        (&["status", "selector"], "ScaleStatus", "string"),
    ];
    let at = |path: &[&str]| {
        path.iter()
            .try_fold(body, |v, key| v.get(*key))
            .filter(|v| !v.is_null())
    };
    let error = |value: &str, (path, holder, go_type): Field| {
        format!(
            "json: cannot unmarshal {value} into Go struct field {holder}.{} of type {go_type}",
            path.join(".")
        )
    };
    for field in STRUCTS {
        match at(field.0) {
            None | Some(Value::Object(_)) => {}
            Some(other) => return Err(error(json_kind(other), field)),
        }
    }
    for field in SCALARS {
        let Some(value) = at(field.0) else { continue };
        let ok = match (field.2, value) {
            ("int32", Value::Number(n)) => n.as_i64().and_then(|i| i32::try_from(i).ok()).is_some(),
            ("int32", _) => false,
            (_, v) => v.is_string(),
        };
        if !ok {
            let kind = match value {
                Value::Number(n) if field.2 == "int32" => format!("number {n}"),
                other => json_kind(other).to_owned(),
            };
            return Err(error(&kind, field));
        }
    }
    let text = |path: &[&str]| {
        at(path)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Ok(ScaleWrite {
        name: text(&["metadata", "name"]),
        namespace: text(&["metadata", "namespace"]),
        uid: text(&["metadata", "uid"]),
        resource_version: text(&["metadata", "resourceVersion"]),
        replicas: at(&["spec", "replicas"])
            .and_then(Value::as_i64)
            .unwrap_or(0),
    })
}

/// What Go's decoder calls a JSON value it cannot store.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The 400 of a PUT whose body does not decode as a Scale.
pub(crate) fn put_decode_error(err: &str) -> Status {
    Status::bad_request(format!(
        "Scale in version \"v1\" cannot be handled as a Scale: {err}"
    ))
}

/// The 422 of a PATCH whose result does not decode as a Scale: an `Invalid` of no kind and no
/// name, whose field is `patch` and whose value is the patched document.
pub(crate) fn patch_decode_error(patched: &Value, err: &str) -> Status {
    Status::invalid(
        "",
        "",
        "",
        &[FieldError::invalid(
            "patch",
            patched.to_string().into(),
            err,
        )],
    )
}

/// The fields of a written Scale that its decoding drops, as `fieldValidation` reports them.
pub(crate) fn unknown_fields(obj: &Value) -> Vec<String> {
    let mut unknown: Vec<String> = meta::unknown_keys(obj)
        .into_iter()
        .map(|k| format!("metadata.{k}"))
        .collect();
    let known: [(&str, &[&str]); 3] = [
        ("", &["apiVersion", "kind", "metadata", "spec", "status"]),
        ("spec", &["replicas"]),
        ("status", &["replicas", "selector"]),
    ];
    for (at, keys) in known {
        let map = if at.is_empty() {
            Some(obj)
        } else {
            obj.get(at)
        };
        for key in map
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(Map::keys)
        {
            if !keys.contains(&key.as_str()) {
                unknown.push(if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                });
            }
        }
    }
    unknown.sort();
    unknown
}

/// The apiVersion and kind of a PUT's Scale, when set, are `autoscaling/v1` `Scale` (in the
/// words the store uses for every kind).
pub(crate) fn check_type(body: &Value) -> Result<(), Status> {
    for (field, what, expected) in [
        ("apiVersion", "API version", "autoscaling/v1"),
        ("kind", "kind", "Scale"),
    ] {
        if let Some(found) = body[field]
            .as_str()
            .filter(|f| !f.is_empty() && *f != expected)
        {
            return Err(Status::bad_request(format!(
                "the {what} in the data ({found}) does not match the expected {what} ({expected})"
            )));
        }
    }
    Ok(())
}

/// `EnsureObjectNamespaceMatchesRequestNamespace` and `checkName` of a PUT.
pub(crate) fn check_put(
    scale: &ScaleWrite,
    url_namespace: Option<&str>,
    url_name: &str,
) -> Result<(), Status> {
    if let Some(ns) = url_namespace
        && !scale.namespace.is_empty()
        && scale.namespace != ns
    {
        return Err(Status::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    check_name(scale, url_name)
}

/// `checkName` of a patched Scale.
pub(crate) fn check_patch(
    scale: &ScaleWrite,
    url_namespace: Option<&str>,
    url_name: &str,
) -> Result<(), Status> {
    check_name(scale, url_name)?;
    match url_namespace {
        Some(ns) if !scale.namespace.is_empty() && scale.namespace != ns => {
            Err(Status::bad_request(format!(
                "the namespace of the object ({}) does not match the namespace on the request ({ns})",
                scale.namespace
            )))
        }
        _ => Ok(()),
    }
}

fn check_name(scale: &ScaleWrite, url_name: &str) -> Result<(), Status> {
    if scale.name == url_name {
        return Ok(());
    }
    Err(Status::bad_request(format!(
        "the name of the object ({}) does not match the name on the URL ({url_name})",
        scale.name
    )))
}

/// The object with the written Scale's replicas at `specReplicasPath` and, when the Scale has
/// one, its resourceVersion (the update's precondition): `scaleUpdatedObjectInfo`.
pub(crate) fn apply_to(
    obj: &Value,
    paths: &ScalePaths,
    scale: &ScaleWrite,
) -> Result<Value, Status> {
    if scale.replicas == NO_SPEC_REPLICAS {
        return Err(Status::bad_request(format!(
            "the spec replicas field {} cannot be empty",
            go_quote(&paths.spec_replicas)
        )));
    }
    let mut obj = obj.clone();
    set_nested(&mut obj, &paths.spec_replicas, scale.replicas.into()).map_err(Status::unknown)?;
    if !scale.resource_version.is_empty() {
        meta::set(&mut obj, "resourceVersion", scale.resource_version.as_str());
    }
    Ok(obj)
}

/// `ValidateScaleSpec` (unless `status_only`, as for a write to `/status`) and
/// `ValidateScaleStatus` of a custom resource: what its paths hold.
pub(crate) fn validate(obj: &Value, paths: &ScalePaths, status_only: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut replicas = |path: &str| match nested_i64(obj, path) {
        Err(e) => errors.push(FieldError::invalid(path, 0.into(), e)),
        Ok(Some(n)) if n < 0 => errors.push(FieldError::invalid(
            path,
            n.into(),
            "should be a non-negative integer",
        )),
        Ok(Some(n)) if n > i64::from(i32::MAX) => errors.push(FieldError::invalid(
            path,
            n.into(),
            format!("should be less than or equal to {}", i32::MAX),
        )),
        Ok(_) => {}
    };
    if !status_only {
        replicas(&paths.spec_replicas);
    }
    replicas(&paths.status_replicas);
    if let Some(path) = &paths.label_selector
        && let Err(e) = nested_string(obj, path)
    {
        errors.push(FieldError::invalid(path.as_str(), "".into(), e));
    }
    errors
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn paths() -> ScalePaths {
        ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".status.selector".into()),
        }
    }

    fn machine_deployment(spec: Value, status: Value) -> Value {
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
            "metadata": {"name": "md", "namespace": "default", "uid": "u-1", "resourceVersion": "7",
                         "creationTimestamp": "2026-01-02T03:04:05Z", "generation": 2},
            "spec": spec, "status": status,
        })
    }

    #[test]
    fn the_scale_of_an_object_reads_its_paths_and_omits_zero_values() {
        let md = machine_deployment(
            json!({"replicas": 3}),
            json!({"replicas": 2, "selector": "app=web"}),
        );
        let (scale, found) = scale_of(&md, &paths()).unwrap();
        assert!(found);
        assert_eq!(
            scale,
            json!({
                "kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "md", "namespace": "default", "uid": "u-1", "resourceVersion": "7",
                             "creationTimestamp": "2026-01-02T03:04:05Z"},
                "spec": {"replicas": 3},
                "status": {"replicas": 2, "selector": "app=web"},
            })
        );
        // Zero replicas and an empty selector are omitted, as Go's omitempty does; status
        // replicas are not omitempty.
        let (scale, found) = scale_of(&machine_deployment(json!({}), json!({})), &paths()).unwrap();
        assert!(!found);
        assert_eq!(scale["spec"], json!({}));
        assert_eq!(scale["status"], json!({"replicas": 0}));
    }

    #[test]
    fn values_of_another_type_are_the_accessor_errors_of_go() {
        // (value at .spec.replicas, error)
        let cases = [
            (
                json!("3"),
                ".spec.replicas accessor error: 3 is of the type string, expected int64",
            ),
            (
                json!(2.5),
                ".spec.replicas accessor error: 2.5 is of the type float64, expected int64",
            ),
            (
                json!({"b": 1, "a": [true, null]}),
                ".spec.replicas accessor error: map[a:[true <nil>] b:1] is of the type map[string]interface {}, expected int64",
            ),
        ];
        for (value, expected) in cases {
            let md = machine_deployment(json!({"replicas": value}), json!({}));
            assert_eq!(scale_of(&md, &paths()).unwrap_err(), expected);
        }
        // A parent that is not a map is named with the field looked up in it.
        let md = machine_deployment(json!("flat"), json!({}));
        assert_eq!(
            scale_of(&md, &paths()).unwrap_err(),
            ".spec.replicas accessor error: flat is of the type string, expected map[string]interface{}"
        );
    }

    #[test]
    fn a_scale_decodes_as_go_fills_an_autoscaling_v1_scale() {
        let ok = decode(
            &json!({"metadata": {"name": "md", "resourceVersion": "7"}, "spec": {"replicas": 4}}),
        )
        .unwrap();
        assert_eq!(
            ok,
            ScaleWrite {
                name: "md".into(),
                resource_version: "7".into(),
                replicas: 4,
                ..ScaleWrite::default()
            }
        );
        // (body, error): the first field of the wrong type, in the decoder's words.
        let cases = [
            (
                json!({"spec": {"replicas": "4"}}),
                "json: cannot unmarshal string into Go struct field ScaleSpec.spec.replicas of type int32",
            ),
            (
                json!({"spec": {"replicas": 2.5}}),
                "json: cannot unmarshal number 2.5 into Go struct field ScaleSpec.spec.replicas of type int32",
            ),
            (
                json!({"spec": {"replicas": 3_000_000_000_i64}}),
                "json: cannot unmarshal number 3000000000 into Go struct field ScaleSpec.spec.replicas of type int32",
            ),
            (
                json!({"spec": 4}),
                "json: cannot unmarshal number into Go struct field Scale.spec of type v1.ScaleSpec",
            ),
            (
                json!({"status": {"selector": 1}}),
                "json: cannot unmarshal number into Go struct field ScaleStatus.status.selector of type string",
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(decode(&body).unwrap_err(), expected, "{body}");
        }
        // null is Go's zero value.
        assert_eq!(
            decode(&json!({"spec": {"replicas": null}}))
                .unwrap()
                .replicas,
            0
        );
    }

    #[test]
    fn a_write_sets_only_the_spec_path_creating_maps_on_the_way() {
        let md = machine_deployment(json!({"template": {}}), json!({"replicas": 1}));
        let write = ScaleWrite {
            replicas: 5,
            ..ScaleWrite::default()
        };
        let out = apply_to(&md, &paths(), &write).unwrap();
        assert_eq!(out["spec"], json!({"template": {}, "replicas": 5}));
        assert_eq!(out["metadata"]["resourceVersion"], "7", "no precondition");
        let nested = ScalePaths {
            spec_replicas: ".spec.scaling.count".into(),
            ..paths()
        };
        let out = apply_to(&md, &nested, &write).unwrap();
        assert_eq!(out["spec"]["scaling"], json!({"count": 5}));
        let flat = machine_deployment(json!("flat"), json!({}));
        let err = apply_to(&flat, &paths(), &write).unwrap_err();
        assert_eq!(
            (err.code, err.reason.as_str(), err.message.as_str()),
            (
                500,
                "",
                "value cannot be set because .spec is not a map[string]interface{}"
            )
        );
        let unset = ScaleWrite {
            replicas: NO_SPEC_REPLICAS,
            ..ScaleWrite::default()
        };
        let err = apply_to(&md, &paths(), &unset).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                400,
                "the spec replicas field \".spec.replicas\" cannot be empty"
            )
        );
    }

    #[test]
    fn the_paths_hold_non_negative_int32_replicas_and_a_string_selector() {
        let render = |errors: Vec<FieldError>| -> Vec<String> {
            errors.iter().map(ToString::to_string).collect()
        };
        let md = machine_deployment(
            json!({"replicas": -1}),
            json!({"replicas": 2_147_483_648_i64, "selector": 3}),
        );
        assert_eq!(
            render(validate(&md, &paths(), false)),
            [
                ".spec.replicas: Invalid value: -1: should be a non-negative integer",
                ".status.replicas: Invalid value: 2147483648: should be less than or equal to 2147483647",
                ".status.selector: Invalid value: \"\": .status.selector accessor error: 3 is of the type int64, expected string",
            ]
        );
        // A write to /status checks only the status paths.
        assert_eq!(render(validate(&md, &paths(), true)).len(), 2);
    }

    #[test]
    fn crd_scale_paths_are_simple_paths_under_spec_and_status() {
        let version = |scale: Value| json!({"subresources": {"scale": scale}});
        let render = |v: Value| -> Vec<String> {
            crd_errors(&v, "spec.versions[0].subresources")
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert!(
            render(version(json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"})))
                .is_empty()
        );
        assert_eq!(
            render(version(
                json!({"specReplicasPath": "spec.replicas", "labelSelectorPath": ".metadata.labels"})
            )),
            [
                "spec.versions[0].subresources.scale.specReplicasPath: Invalid value: \"spec.replicas\": must be a simple json path starting with .",
                "spec.versions[0].subresources.scale.statusReplicasPath: Required value",
                "spec.versions[0].subresources.scale.labelSelectorPath: Invalid value: \".metadata.labels\": should be a json path under either .spec or .status",
            ]
        );
        assert_eq!(
            render(version(
                json!({"specReplicasPath": ".spec", "statusReplicasPath": ".spec.replicas"})
            )),
            [
                "spec.versions[0].subresources.scale.specReplicasPath: Invalid value: \".spec\": should be a json path under .spec",
                "spec.versions[0].subresources.scale.statusReplicasPath: Invalid value: \".spec.replicas\": should be a json path under .status",
            ]
        );
    }

    #[test]
    fn unknown_fields_of_a_scale_are_named_by_path() {
        let body = json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "extra": 1,
                          "metadata": {"name": "md", "bogus": 1},
                          "spec": {"replicas": 2, "paused": true}, "status": {"replicas": 1}});
        assert_eq!(
            unknown_fields(&body),
            ["extra", "metadata.bogus", "spec.paused"]
        );
    }
}
