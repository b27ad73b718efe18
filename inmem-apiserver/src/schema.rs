//! A custom resource against its structural `openAPIV3Schema`, in the
//! apiserver's order: prune unknown fields (unless
//! `x-kubernetes-preserve-unknown-fields`), drop nulls of non-nullable fields
//! and apply `default`s, then validate with kube-openapi's messages
//! (`spec.replicas in body should be greater than or equal to 0`). The
//! `x-kubernetes-validations` (CEL) rules are evaluated after, by the `rules`
//! module, unless an error here blocks them as it does in the apiserver.
//!
//! Numbers are what the apiserver decodes: an integer literal that fits
//! int64 is an int64, any other number a float64 (so 2^63 is a float, which
//! an `integer` field refuses; a whole float such as `3.0` is an integer).
//!
//! Validated: `type` (and `x-kubernetes-int-or-string`), `nullable`, `enum`,
//! `required`, `minimum`/`maximum` (and exclusive), `multipleOf`, the numeric
//! formats (`int32` and `int64` ranges, `float`; kube-openapi's
//! `Checked value must be of type integer with format int32 in spec.x`, which
//! the apiserver reports on the object, `<nil>`, and `must be of type int32:
//! "float64"` for a value of another type), `minLength`/`maxLength`,
//! `minItems`/`maxItems`, `allOf`/`anyOf`/`oneOf`/`not`, and the string format
//! `date-time` (kube-openapi's `IsDateTime`: `2006-01-02T15:04:05[.frac](Z|±hh:mm)`,
//! `spec.at in body must be of type date-time: "not-a-time"`). On an update, errors
//! of values that did not change are ratcheted away, as the apiserver does;
//! on the status subresource only `status` is validated, from its own root.
//! Not validated: `pattern`, other string formats (`uuid`, `email`, ...),
//! `uniqueItems`, list-type/map-type invariants, min/maxProperties.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::status::{BadValue, FieldError, FieldErrorKind, go_float, go_quote};

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
    collect_unknown(schema, obj, true, &mut String::new(), &mut found);
    found.sort();
    found
}

/// `path` is the value's, extended and cut back in place while descending: a path is only
/// copied for a field that is found.
fn collect_unknown(
    schema: &Value,
    value: &Value,
    embedded: bool,
    path: &mut String,
    found: &mut Vec<String>,
) {
    let len = path.len();
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
                let known = properties
                    .and_then(|p| p.get(key))
                    .or(additional.filter(|a| a.is_object()));
                if known.is_none() && keep_unknown {
                    continue;
                }
                if len > 0 {
                    path.push('.');
                }
                path.push_str(key);
                match known {
                    Some(s) => collect_unknown(s, child, false, path, found),
                    None => found.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    let _ = write!(path, "[{i}]");
                    collect_unknown(s, item, false, path, found);
                    path.truncate(len);
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
/// (`spec.items[0].name`, `spec.labels.key`) and messages. An error kube-openapi
/// reports without a field (the range of a `format`) is on `<nil>`, the path
/// the custom resource validator passes.
///
/// On an update (`old`), errors are ratcheted as the apiserver does: those of
/// a value equal to the old value it correlates with (the same property, map
/// key, or item of a `x-kubernetes-list-type: map` list with the same keys)
/// are dropped, so that an object stored before its schema tightened can
/// still be updated where it does not change.
pub(crate) fn validate(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check(schema, obj, old, String::new, &mut errors);
    for e in &mut errors {
        if e.field.is_empty() {
            e.field = NIL_PATH.into();
        }
    }
    errors
}

/// A write to the status subresource: only `status` is validated, against
/// its own schema, as the status validator does: fields are under `status`,
/// while kube-openapi's messages name them from the status root
/// (`status.phase: ... phase in body should be ...`).
pub(crate) fn validate_status(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let (Some(status_schema), Some(status)) =
        (schema.pointer("/properties/status"), obj.get("status"))
    else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    check(
        status_schema,
        status,
        old.and_then(|o| o.get("status")),
        String::new,
        &mut errors,
    );
    for e in &mut errors {
        // What has no field is on the validator's path, `status`.
        e.field = if e.field.is_empty() {
            "status".into()
        } else {
            child_path("status", &e.field)
        };
    }
    errors
}

/// How `field.Path` prints a nil path: the field of an error about the
/// object as a whole.
pub(crate) const NIL_PATH: &str = "<nil>";

/// A JSON number as the apiserver decodes it: an integer literal that fits
/// int64 is an `int64`, anything else a `float64`.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn of(n: &serde_json::Number) -> Self {
        match n.as_i64() {
            Some(i) => Self::Int(i),
            None => Self::Float(n.as_f64().unwrap_or(f64::NAN)),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Self::Int(i) => i as f64,
            Self::Float(f) => f,
        }
    }
}

/// The JSON type and the go-openapi format kube-openapi infers from a
/// decoded value (`schemaInfoForType`).
fn json_type(v: &Value) -> (&'static str, &'static str) {
    match v {
        Value::Null => ("null", ""),
        Value::Bool(_) => ("boolean", ""),
        Value::Number(n) => match Num::of(n) {
            Num::Int(_) => ("integer", "int64"),
            Num::Float(_) => ("number", "float64"),
        },
        Value::String(_) => ("string", ""),
        Value::Array(_) => ("array", ""),
        Value::Object(_) => ("object", ""),
    }
}

/// The formats kube-openapi validates: what the CRD's schema keeps once
/// `StripUnsupportedFormatsPostProcessorForVersion` has dropped the others.
const STRING_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "quantity",
    "k8sshortname",
    "k8slongname",
];

fn schema_type(schema: &Value) -> &str {
    schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The schema's `format` as the validator sees it (unsupported ones are
/// stripped, and only `int32`/`int64` and `float`/`double` are kept for
/// numbers).
fn kept_format(schema: &Value) -> &str {
    let format = schema
        .get("format")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kept = match schema_type(schema) {
        "" | "string" => STRING_FORMATS.contains(&format.replace('-', "").as_str()),
        "integer" => matches!(format, "int32" | "int64"),
        "number" => matches!(format, "float" | "double"),
        _ => false,
    };
    if kept { format } else { "" }
}

/// kube-openapi's `strfmt.IsDateTime`: lower-cased and split at each `t`, the first part a
/// date (Go's `time.Parse("2006-01-02")`: the day within its month) and the second
/// `hh:mm:ss`, an optional fraction (any one character, then digits) and `z` or `±hh:mm`, with
/// hh <= 23, mm <= 59 and ss <= 59. Parts after a second `t` are not looked at, as there.
fn is_date_time(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let mut parts = lower.split('t');
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else {
        return false;
    };
    s.len() >= 4 && is_date(date) && is_time(time)
}

/// `2006-01-02`, the day within its month (29 February in leap years only).
fn is_date(date: &str) -> bool {
    let field = |range: std::ops::Range<usize>| {
        date.get(range)
            .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))?
            .parse::<u32>()
            .ok()
    };
    let (Some(year), Some(month), Some(day)) = (field(0..4), field(5..7), field(8..10)) else {
        return false;
    };
    let leap = year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    date.len() == 10
        && date.get(4..5) == Some("-")
        && date.get(7..8) == Some("-")
        && (1..=days).contains(&day)
}

/// `^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$` (lower case),
/// hours at most 23, minutes and seconds at most 59.
fn is_time(time: &str) -> bool {
    let two = |at: usize, max: u32| {
        time.get(at..at.saturating_add(2))
            .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse::<u32>().ok())
            .is_some_and(|n| n <= max)
    };
    let clock = two(0, 23)
        && time.get(2..3) == Some(":")
        && two(3, 59)
        && time.get(5..6) == Some(":")
        && two(6, 59);
    let Some(rest) = time.get(8..).filter(|_| clock) else {
        return false;
    };
    let zone = |z: &str| {
        z == "z"
            || (z.len() == 6
                && (z.starts_with('+') || z.starts_with('-'))
                && z[1..].bytes().enumerate().all(|(i, b)| match i {
                    2 => b == b':',
                    _ => b.is_ascii_digit(),
                }))
    };
    // The fraction's `.` is any one character but a newline, as in kube-openapi's pattern.
    let fraction = rest.chars().next().filter(|c| *c != '\n').is_some_and(|c| {
        let after = &rest[c.len_utf8()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && zone(&after[digits..])
    });
    zone(rest) || fraction
}

/// `swag.IsFloat64AJSONInteger`: whole (to a relative 1e-9) and within
/// ±(2^53 - 1).
fn is_json_integer(f: f64) -> bool {
    const MAX: f64 = 9_007_199_254_740_991.0;
    if !f.is_finite() || !(-MAX..=MAX).contains(&f) {
        return false;
    }
    let whole = f.trunc();
    if whole == f {
        return true;
    }
    let diff = (f - whole).abs();
    diff / (f.abs() + whole.abs()).min(f64::MAX) < 1e-9
}

/// `typeValidator`: the value's JSON type (and, where the schema has a
/// format, its go-openapi format) against the schema's.
fn type_error(schema: &Value, value: &Value, path: &str) -> Option<FieldError> {
    let (actual, actual_format) = json_type(value);
    let invalid = |expected: &str, found: &str| {
        FieldError::new(
            FieldErrorKind::TypeInvalid,
            path,
            BadValue::Json(found.into()),
            format!(
                "{path} in body must be of type {expected}: {}",
                go_quote(found)
            ),
        )
    };
    if flag(schema, "x-kubernetes-int-or-string") {
        return (!matches!(actual, "integer" | "string"))
            .then(|| invalid("integer,string", actual));
    }
    let expected = schema_type(schema);
    if expected.is_empty() {
        return None;
    }
    if value.is_null() {
        return (!flag(schema, "nullable")).then(|| invalid(expected, "null"));
    }
    let format = kept_format(schema);
    let float_int =
        actual == "number" && expected == "integer" && value.as_f64().is_some_and(is_json_integer);
    let int_float = actual == "integer" && expected == "number";
    let compatible = expected == actual || float_int || int_float;
    let (string, slice) = (value.is_string(), value.is_array());
    // A value that is neither a string nor an array is checked against the
    // format first.
    let skip_format = string || slice || format.is_empty();
    if !(skip_format || compatible || actual_format == format) {
        return Some(invalid(format, actual_format));
    }
    if !matches!(expected, "number" | "integer") && !format.is_empty() && (string || slice) {
        return None;
    }
    (!compatible).then(|| invalid(expected, actual))
}

/// Validates one value, `old` being the old value it correlates with on an
/// update: if they are equal, its errors are ratcheted away, so none are looked for (nor its
/// path written).
fn check(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: impl FnOnce() -> String,
    errors: &mut Vec<FieldError>,
) {
    if old != Some(value) {
        validate_node(schema, value, old, &path(), errors);
    }
}

/// The old item that an item of a `x-kubernetes-list-type: map` list
/// correlates with: the one with the same keys. Items of other lists do not
/// correlate.
pub(crate) fn old_item<'a>(
    schema: &Value,
    old: Option<&'a Value>,
    item: &Value,
) -> Option<&'a Value> {
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
        return None;
    }
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|ks| ks.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    old?.as_array()?
        .iter()
        .find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k)))
}

fn validate_node(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let invalid = |value: &Value, detail: String| FieldError::invalid(path, value.clone(), detail);
    if value.is_null() && flag(schema, "nullable") {
        return;
    }
    // kube-openapi's validators, in their order: type, the compositions,
    // string, number, slice, enum, object.
    errors.extend(type_error(schema, value, path));
    validate_compositions(schema, value, path, errors);
    match value {
        Value::String(s) => {
            let chars = s.chars().count();
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && chars as u64 > max
            {
                errors.push(FieldError::new(
                    FieldErrorKind::TooLong,
                    path,
                    BadValue::Omit,
                    format!(
                        "may not be more than {max} {}",
                        if max == 1 { "byte" } else { "bytes" }
                    ),
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
            // kube-openapi's formatValidator, after the string's; the format named as written.
            let format = kept_format(schema);
            if format.replace('-', "") == "datetime" && !is_date_time(s) {
                errors.push(FieldError::new(
                    FieldErrorKind::TypeInvalid,
                    path,
                    BadValue::Json(value.clone()),
                    format!("{path} in body must be of type {format}: {}", go_quote(s)),
                ));
            }
        }
        Value::Number(n) => validate_number(schema, Num::of(n), value, path, errors),
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && len > max
            {
                errors.push(FieldError::new(
                    FieldErrorKind::TooMany,
                    path,
                    BadValue::Json(len.into()),
                    format!(
                        "must have at most {max} {}",
                        if max == 1 { "item" } else { "items" }
                    ),
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
                    let old = old_item(schema, old, item);
                    check(s, item, old, || format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
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
    if let Value::Object(map) = value {
        validate_object(schema, map, old, path, errors);
    }
}

/// The type and format `numberValidator` checks a number's range against:
/// the format only where it fits the type.
fn number_type(schema: &Value) -> (&'static str, &'static str) {
    let format = schema
        .get("format")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match schema_type(schema) {
        "integer" => (
            "integer",
            match format {
                "int32" => "int32",
                "int64" => "int64",
                _ => "",
            },
        ),
        "number" => (
            "number",
            match format {
                "float" => "float",
                "double" => "double",
                _ => "",
            },
        ),
        _ => ("", ""),
    }
}

/// `IsValueValidAgainstRange`: whether `n` fits the type and format; the
/// error kube-openapi returns (a plain error, so the apiserver reports it on
/// the object, `<nil>`, with `Invalid value: ""`) when it does not.
fn range_error(
    n: Num,
    (type_name, format): (&str, &str),
    prefix: &str,
    path: &str,
) -> Option<FieldError> {
    let repr = || match n {
        Num::Int(i) => i.to_string(),
        // strconv.FormatFloat(f, 'f', -1, 64): no exponent.
        Num::Float(f) => f.to_string(),
    };
    let fits = match (n, type_name, format) {
        (Num::Int(i), "integer", "int32") => i32::try_from(i).is_ok(),
        (Num::Int(_), "integer", _) => true,
        (_, "integer", "int32") => repr().parse::<i32>().is_ok(),
        (_, "integer", _) => repr().parse::<i64>().is_ok(),
        (_, _, "float") => repr().parse::<f32>().is_ok_and(f32::is_finite),
        _ => true,
    };
    if fits {
        return None;
    }
    let detail = if format.is_empty() {
        format!("{prefix} value must be of type {type_name} (default format) in {path}")
    } else {
        format!("{prefix} value must be of type {type_name} with format {format} in {path}")
    };
    Some(FieldError::invalid("", "".into(), detail))
}

/// `numberValidator`: the value's range for its format, then `multipleOf`,
/// `minimum` and `maximum`, compared as int64 when the value is an integer
/// (the bound truncated, as Go's `int64(bound)` does) and as float64 otherwise.
#[allow(clippy::cast_possible_truncation)]
fn validate_number(
    schema: &Value,
    n: Num,
    value: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let kind = number_type(schema);
    let bound = |name| schema.get(name).and_then(Value::as_f64);
    let invalid = |detail: String| FieldError::invalid(path, value.clone(), detail);
    errors.extend(range_error(n, kind, "Checked", path));
    if let Some(factor) = bound("multipleOf") {
        let boundary = range_error(Num::Float(factor), kind, "MultipleOf", path);
        let native = if boundary.is_none() {
            n
        } else {
            Num::Float(n.as_f64())
        };
        errors.extend(boundary);
        let positive = |shown: String| {
            FieldError::invalid(
                path,
                value.clone(),
                format!("factor MultipleOf declared for {path} must be positive: {shown}"),
            )
        };
        match native {
            Num::Int(i) => {
                let f = factor as i64;
                if f <= 0 {
                    errors.push(positive(f.to_string()));
                } else if i.checked_rem(f).is_some_and(|r| r != 0) {
                    errors.push(invalid(format!(
                        "{path} in body should be a multiple of {f}"
                    )));
                }
            }
            Num::Float(x) => {
                if factor <= 0.0 {
                    errors.push(positive(go_float(factor)));
                } else {
                    let mult = if factor < 1.0 {
                        1.0 / factor * x
                    } else {
                        x / factor
                    };
                    if !is_json_integer(mult) {
                        errors.push(invalid(format!(
                            "{path} in body should be a multiple of {}",
                            go_float(factor)
                        )));
                    }
                }
            }
        }
    }
    for (name, exclusive, below) in [
        ("minimum", "exclusiveMinimum", true),
        ("maximum", "exclusiveMaximum", false),
    ] {
        let Some(limit) = bound(name) else { continue };
        let prefix = if below {
            "Minimum boundary"
        } else {
            "Maximum boundary"
        };
        let boundary = range_error(Num::Float(limit), kind, prefix, path);
        let native = if boundary.is_none() {
            n
        } else {
            Num::Float(n.as_f64())
        };
        errors.extend(boundary);
        let exclusive = flag(schema, exclusive);
        let (fails, shown) = match native {
            Num::Int(i) => {
                let l = limit as i64;
                let fails = match (below, exclusive) {
                    (true, false) => i < l,
                    (true, true) => i <= l,
                    (false, false) => i > l,
                    (false, true) => i >= l,
                };
                (fails, l.to_string())
            }
            Num::Float(x) => {
                let fails = match (below, exclusive) {
                    (true, false) => x < limit,
                    (true, true) => x <= limit,
                    (false, false) => x > limit,
                    (false, true) => x >= limit,
                };
                (fails, go_float(limit))
            }
        };
        if fails {
            let relation = match (below, exclusive) {
                (true, false) => "greater than or equal to",
                (true, true) => "greater than",
                (false, false) => "less than or equal to",
                (false, true) => "less than",
            };
            errors.push(invalid(format!(
                "{path} in body should be {relation} {shown}"
            )));
        }
    }
}

fn validate_object(
    schema: &Value,
    map: &Map<String, Value>,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
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
            // apiVersion and kind of the root do not correlate.
            let type_meta = path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind");
            let old = old.and_then(|o| o.get(key)).filter(|_| !type_meta);
            check(s, child, old, || child_path(path, key), errors);
        }
    }
    // After the properties, as kube-openapi's object validator checks them.
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
}

fn validate_compositions(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let passes = |s: &Value| {
        let mut errs = Vec::new();
        validate_node(s, value, None, path, &mut errs);
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
        validate_node(s, value, None, path, errors);
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
        let messages: Vec<String> = validate(&schema(), &obj, None)
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
        let missing = validate(&schema(), &json!({"spec": {}}), None);
        assert_eq!(missing[0].to_string(), "spec.replicas: Required value");
    }
}
