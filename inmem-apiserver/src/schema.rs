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

/// Where a value being validated is: written out only when an error names it, since most
/// values validated have none.
#[derive(Debug, Clone, Copy)]
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn is_root(&self) -> bool {
        matches!(self, Path::Root)
    }
}

impl std::fmt::Display for Path<'_> {
    /// As kube-openapi writes it: `spec.items[0].name`, from the root given.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(parent, key) => f.write_str(&child_path(&parent.to_string(), key)),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

impl From<&Path<'_>> for String {
    fn from(path: &Path<'_>) -> String {
        path.to_string()
    }
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
    check(schema, obj, old, &Path::Root, &mut errors);
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
        &Path::Root,
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

/// Whether `format` names `name` once its dashes are dropped (`date-time` is `datetime`), as
/// go-openapi's format registry normalizes names; without allocating, since every string
/// validated asks.
fn is_format(format: &str, name: &str) -> bool {
    format.bytes().filter(|b| *b != b'-').eq(name.bytes())
}

/// The keywords of one schema node that validation reads, found in one pass over its entries:
/// looked up one by one, they were about fifteen searches of the node's map for every value
/// validated.
#[derive(Debug, Default)]
struct Keywords<'s> {
    ty: &'s str,
    format: &'s str,
    nullable: bool,
    int_or_string: bool,
    max_length: Option<u64>,
    min_length: Option<u64>,
    max_items: Option<u64>,
    min_items: Option<u64>,
    items: Option<&'s Value>,
    enumeration: Option<&'s Vec<Value>>,
    properties: Option<&'s Map<String, Value>>,
    /// Only a schema (an object): `additionalProperties: true` validates nothing.
    additional: Option<&'s Value>,
    required: &'s [Value],
    all_of: &'s [Value],
    any_of: &'s [Value],
    one_of: &'s [Value],
    not: Option<&'s Value>,
    multiple_of: Option<f64>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    exclusive_minimum: bool,
    exclusive_maximum: bool,
}

impl<'s> Keywords<'s> {
    fn of(schema: &'s Value) -> Self {
        let mut k = Keywords::default();
        let list = |v: &'s Value| v.as_array().map(Vec::as_slice).unwrap_or_default();
        // The value of a boolean keyword (`flag` reads one by name).
        let boolean = |v: &Value| v.as_bool().unwrap_or(false);
        for (name, v) in schema.as_object().into_iter().flatten() {
            match name.as_str() {
                "type" => k.ty = v.as_str().unwrap_or_default(),
                "format" => k.format = v.as_str().unwrap_or_default(),
                "nullable" => k.nullable = boolean(v),
                "x-kubernetes-int-or-string" => k.int_or_string = boolean(v),
                "maxLength" => k.max_length = v.as_u64(),
                "minLength" => k.min_length = v.as_u64(),
                "maxItems" => k.max_items = v.as_u64(),
                "minItems" => k.min_items = v.as_u64(),
                "items" => k.items = Some(v),
                "enum" => k.enumeration = v.as_array(),
                "properties" => k.properties = v.as_object(),
                "additionalProperties" => k.additional = Some(v).filter(|a| a.is_object()),
                "required" => k.required = list(v),
                "allOf" => k.all_of = list(v),
                "anyOf" => k.any_of = list(v),
                "oneOf" => k.one_of = list(v),
                "not" => k.not = Some(v),
                "multipleOf" => k.multiple_of = v.as_f64(),
                "minimum" => k.minimum = v.as_f64(),
                "maximum" => k.maximum = v.as_f64(),
                "exclusiveMinimum" => k.exclusive_minimum = boolean(v),
                "exclusiveMaximum" => k.exclusive_maximum = boolean(v),
                _ => {}
            }
        }
        k
    }

    /// The schema's `format` as the validator sees it (unsupported ones are
    /// stripped, and only `int32`/`int64` and `float`/`double` are kept for
    /// numbers).
    fn kept_format(&self) -> &'s str {
        let format = self.format;
        let kept = !format.is_empty()
            && match self.ty {
                "" | "string" => STRING_FORMATS.iter().any(|f| is_format(format, f)),
                "integer" => matches!(format, "int32" | "int64"),
                "number" => matches!(format, "float" | "double"),
                _ => false,
            };
        if kept { format } else { "" }
    }

    /// The type and format `numberValidator` checks a number's range against:
    /// the format only where it fits the type.
    fn number_type(&self) -> (&'static str, &'static str) {
        match self.ty {
            "integer" => (
                "integer",
                match self.format {
                    "int32" => "int32",
                    "int64" => "int64",
                    _ => "",
                },
            ),
            "number" => (
                "number",
                match self.format {
                    "float" => "float",
                    "double" => "double",
                    _ => "",
                },
            ),
            _ => ("", ""),
        }
    }
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
fn type_error(k: &Keywords<'_>, value: &Value, path: &Path<'_>) -> Option<FieldError> {
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
    if k.int_or_string {
        return (!matches!(actual, "integer" | "string"))
            .then(|| invalid("integer,string", actual));
    }
    let expected = k.ty;
    if expected.is_empty() {
        return None;
    }
    if value.is_null() {
        return (!k.nullable).then(|| invalid(expected, "null"));
    }
    let format = k.kept_format();
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
/// update: if they are equal, its errors are ratcheted away, so none are looked for.
fn check(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &Path<'_>,
    errors: &mut Vec<FieldError>,
) {
    if old != Some(value) {
        validate_node(schema, value, old, path, errors);
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
    path: &Path<'_>,
    errors: &mut Vec<FieldError>,
) {
    let k = Keywords::of(schema);
    let invalid = |value: &Value, detail: String| FieldError::invalid(path, value.clone(), detail);
    if value.is_null() && k.nullable {
        return;
    }
    // kube-openapi's validators, in their order: type, the compositions,
    // string, number, slice, enum, object.
    errors.extend(type_error(&k, value, path));
    validate_compositions(&k, value, path, errors);
    match value {
        Value::String(s) => {
            let chars = s.chars().count();
            if let Some(max) = k.max_length
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
            if let Some(min) = k.min_length
                && (chars as u64) < min
            {
                errors.push(invalid(
                    value,
                    format!("{path} in body should be at least {min} chars long"),
                ));
            }
            // kube-openapi's formatValidator, after the string's; the format named as written.
            let format = k.kept_format();
            if is_format(format, "datetime") && !is_date_time(s) {
                errors.push(FieldError::new(
                    FieldErrorKind::TypeInvalid,
                    path,
                    BadValue::Json(value.clone()),
                    format!("{path} in body must be of type {format}: {}", go_quote(s)),
                ));
            }
        }
        Value::Number(n) => validate_number(&k, Num::of(n), value, path, errors),
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(max) = k.max_items
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
            if let Some(min) = k.min_items
                && len < min
            {
                errors.push(invalid(
                    value,
                    format!("{path} in body should have at least {min} items"),
                ));
            }
            if let Some(s) = k.items {
                for (i, item) in items.iter().enumerate() {
                    let old = old_item(schema, old, item);
                    check(s, item, old, &Path::Index(path, i), errors);
                }
            }
        }
        _ => {}
    }
    if let Some(allowed) = k.enumeration
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
        validate_object(&k, map, old, path, errors);
    }
}

/// `IsValueValidAgainstRange`: whether `n` fits the type and format; the
/// error kube-openapi returns (a plain error, so the apiserver reports it on
/// the object, `<nil>`, with `Invalid value: ""`) when it does not.
fn range_error(
    n: Num,
    (type_name, format): (&str, &str),
    prefix: &str,
    path: &Path<'_>,
) -> Option<FieldError> {
    let repr = || match n {
        Num::Int(i) => i.to_string(),
        // strconv.FormatFloat(f, 'f', -1, 64): no exponent.
        Num::Float(f) => f.to_string(),
    };
    // A float fits an integer type when it is written without a fraction or an exponent
    // (`repr`'s form) and parses into it: when it is whole and within the type's range.
    let whole_in = |f: f64, range: std::ops::Range<f64>| f.fract() == 0.0 && range.contains(&f);
    let fits = match (n, type_name, format) {
        (Num::Int(i), "integer", "int32") => i32::try_from(i).is_ok(),
        (Num::Int(_), "integer", _) => true,
        (Num::Float(f), "integer", "int32") => {
            whole_in(f, f64::from(i32::MIN)..f64::from(i32::MAX) + 1.0)
        }
        // -2^63 is written rounded to 16 digits, -9223372036854776000: not an i64.
        (Num::Float(f), "integer", _) => {
            f != -(2f64.powi(63)) && whole_in(f, -(2f64.powi(63))..2f64.powi(63))
        }
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
    k: &Keywords<'_>,
    n: Num,
    value: &Value,
    path: &Path<'_>,
    errors: &mut Vec<FieldError>,
) {
    let kind = k.number_type();
    let invalid = |detail: String| FieldError::invalid(path, value.clone(), detail);
    errors.extend(range_error(n, kind, "Checked", path));
    if let Some(factor) = k.multiple_of {
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
    for (limit, exclusive, below) in [
        (k.minimum, k.exclusive_minimum, true),
        (k.maximum, k.exclusive_maximum, false),
    ] {
        let Some(limit) = limit else { continue };
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
        let (fails, shown) = match native {
            Num::Int(i) => {
                let l = limit as i64;
                let fails = match (below, exclusive) {
                    (true, false) => i < l,
                    (true, true) => i <= l,
                    (false, false) => i > l,
                    (false, true) => i >= l,
                };
                (fails, Num::Int(l))
            }
            Num::Float(x) => {
                let fails = match (below, exclusive) {
                    (true, false) => x < limit,
                    (true, true) => x <= limit,
                    (false, false) => x > limit,
                    (false, true) => x >= limit,
                };
                (fails, Num::Float(limit))
            }
        };
        if fails {
            let shown = match shown {
                Num::Int(l) => l.to_string(),
                Num::Float(limit) => go_float(limit),
            };
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
    k: &Keywords<'_>,
    map: &Map<String, Value>,
    old: Option<&Value>,
    path: &Path<'_>,
    errors: &mut Vec<FieldError>,
) {
    let (properties, additional) = (k.properties, k.additional);
    // In key order, whatever order the body had.
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by_key(|(key, _)| *key);
    for (key, child) in entries {
        if let Some(s) = properties.and_then(|p| p.get(key)).or(additional) {
            // apiVersion and kind of the root do not correlate.
            let type_meta = path.is_root() && matches!(key.as_str(), "apiVersion" | "kind");
            let old = old.and_then(|o| o.get(key)).filter(|_| !type_meta);
            check(s, child, old, &Path::Key(path, key), errors);
        }
    }
    // After the properties, as kube-openapi's object validator checks them.
    for name in k.required.iter().filter_map(Value::as_str) {
        if !map.contains_key(name) {
            errors.push(FieldError::required(Path::Key(path, name).to_string(), ""));
        }
    }
}

fn validate_compositions(
    k: &Keywords<'_>,
    value: &Value,
    path: &Path<'_>,
    errors: &mut Vec<FieldError>,
) {
    let passes = |s: &Value| {
        let mut errs = Vec::new();
        validate_node(s, value, None, path, &mut errs);
        errs.is_empty()
    };
    for s in k.all_of {
        validate_node(s, value, None, path, errors);
    }
    let mut fail = |what: &str| {
        errors.push(FieldError::invalid(
            path,
            "".into(),
            format!("{path} in body {what}"),
        ))
    };
    if !k.any_of.is_empty() && !k.any_of.iter().any(passes) {
        fail("must validate at least one schema (anyOf)");
    }
    if !k.one_of.is_empty() && k.one_of.iter().filter(|s| passes(s)).count() != 1 {
        fail("must validate one and only one schema (oneOf)");
    }
    if k.not.is_some_and(passes) {
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
    fn a_float_fits_an_integer_type_as_its_written_form_parses_into_it() {
        let floats = [
            0.0,
            -0.0,
            1.5,
            -7.0,
            2_147_483_647.0,
            2_147_483_648.0,
            -2_147_483_648.0,
            -2_147_483_649.0,
            9.2e18,
            2f64.powi(63),
            2f64.powi(63) - 1024.0,
            -(2f64.powi(63)),
            -(2f64.powi(63)) - 2048.0,
            1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        for f in floats {
            let written = f.to_string();
            for (format, parses) in [
                ("int32", written.parse::<i32>().is_ok()),
                ("int64", written.parse::<i64>().is_ok()),
                ("", written.parse::<i64>().is_ok()),
            ] {
                let fits = range_error(Num::Float(f), ("integer", format), "Checked", &Path::Root)
                    .is_none();
                assert_eq!(fits, parses, "{f} ({written}) as integer {format:?}");
            }
        }
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
