//! What a read answers besides the object itself, chosen by the `Accept`
//! header as the apiserver negotiates it: a `meta.k8s.io` `Table` (what
//! `kubectl get` asks for: `application/json;as=Table;v=v1;g=meta.k8s.io`),
//! or `PartialObjectMetadata(List)` (metadata-only clients).
//!
//! Table rules, as the apiserver's table convertors apply them:
//! - the first column is `Name` (format `name`); then the kind's printer
//!   columns (a CRD's `additionalPrinterColumns`, `Age` when it declares none;
//!   for a built-in printer such as `printNode`, its columns, wide ones
//!   included, as the server prints them, with cells it computes);
//! - a cell is the value at the column's JSONPath (simple paths: `.a.b`,
//!   `.a[0].b`, `.a['b.c']`), `null` when missing; `integer` and `number`
//!   cells are numbers, `boolean` booleans, `string` cells the value printed
//!   (objects as JSON), `date` cells the age as kubectl prints it (`5m2s`:
//!   the server renders it, the client prints cells as they come; only the
//!   default `Created At` column shows the RFC 3339 timestamp), or `<invalid>`;
//! - `includeObject` is `Metadata` by default (rows carry a
//!   `PartialObjectMetadata`), or `Object` (the whole object), or `None`;
//! - a list's Table carries the list's `resourceVersion` and `continue`, and a
//!   watch's events carry one-row Tables.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use crate::kinds::{Kind, Printer, PrinterColumn};
use crate::node;
use crate::status::Status;

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// The content type of a Table answer.
pub(crate) const TABLE_CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// What `rows[].object` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Include {
    None,
    Metadata,
    Object,
}

/// How objects are rendered for one read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Render {
    /// As stored (the default).
    Object,
    /// As a `meta.k8s.io` Table at this version (`v1` or `v1beta1`).
    Table {
        api_version: String,
        columns: Vec<PrinterColumn>,
        include: Include,
    },
    /// As `PartialObjectMetadata` at this version.
    Metadata { api_version: String },
}

/// One media type of an `Accept` header, with its parameters.
struct MediaType<'a> {
    essence: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

impl<'a> MediaType<'a> {
    fn parse(text: &'a str) -> Self {
        let mut parts = text.split(';').map(str::trim);
        let essence = parts.next().unwrap_or_default();
        let params = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim().trim_matches('"')))
            .collect();
        Self { essence, params }
    }

    fn param(&self, name: &str) -> Option<&'a str> {
        self.params
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
    }

    fn is_json(&self) -> bool {
        matches!(self.essence, "application/json" | "application/*" | "*/*")
    }
}

impl Render {
    /// The rendering the `Accept` header asks for, taking its media types in
    /// order (the first one served wins). `columns` are the kind's printer
    /// columns at the requested version; `include_object` the query parameter.
    /// No `Accept` is plain JSON; one that names nothing served is `406`.
    pub fn negotiate(
        accept: Option<&str>,
        columns: &[PrinterColumn],
        include_object: Option<&str>,
    ) -> Result<Self, Status> {
        let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
            return Ok(Self::Object);
        };
        for text in accept.split(',') {
            let media = MediaType::parse(text);
            if !media.is_json() {
                continue;
            }
            let group = media.param("g");
            let version = media.param("v");
            let meta_version = (group == Some("meta.k8s.io")
                && matches!(version, Some("v1" | "v1beta1")))
            .then(|| format!("meta.k8s.io/{}", version.unwrap_or("v1")));
            match (media.param("as"), meta_version) {
                (None, _) => return Ok(Self::Object),
                (Some("Table"), Some(api_version)) => {
                    let include = match include_object {
                        None | Some("" | "Metadata") => Include::Metadata,
                        Some("Object") => Include::Object,
                        Some("None") => Include::None,
                        Some(other) => {
                            return Err(Status::bad_request(format!(
                                "includeObject: Unsupported value: {other:?}: supported values: \"None\", \"Metadata\", \"Object\""
                            )));
                        }
                    };
                    return Ok(Self::Table {
                        api_version,
                        columns: columns.to_vec(),
                        include,
                    });
                }
                (
                    Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
                    Some(api_version),
                ) => {
                    return Ok(Self::Metadata { api_version });
                }
                _ => continue,
            }
        }
        Err(Status::not_acceptable())
    }

    /// The content type of a get or list answer.
    pub fn content_type(&self) -> &'static str {
        match self {
            Self::Object => "application/json",
            Self::Table { api_version, .. } if api_version.ends_with("v1beta1") => {
                "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
            }
            Self::Table { .. } => TABLE_CONTENT_TYPE,
            Self::Metadata { api_version } if api_version.ends_with("v1beta1") => {
                "application/json;as=PartialObjectMetadata;v=v1beta1;g=meta.k8s.io"
            }
            Self::Metadata { .. } => "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
        }
    }

    /// One object (a get, or a watch event's object).
    pub fn one(&self, obj: Value) -> Value {
        match self {
            Self::Object => obj,
            Self::Table { .. } => {
                let rv = obj["metadata"]["resourceVersion"].clone();
                let mut metadata = Map::new();
                if !rv.is_null() {
                    metadata.insert("resourceVersion".into(), rv);
                }
                self.table(Value::Object(metadata), std::slice::from_ref(&obj))
            }
            Self::Metadata { api_version } => partial(api_version, &obj),
        }
    }

    /// A list answer (`items`, `metadata`).
    pub fn list(&self, list: Value) -> Value {
        match self {
            Self::Object => list,
            Self::Table { .. } => {
                let items = list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
                self.table(list["metadata"].clone(), items)
            }
            Self::Metadata { api_version } => {
                let items: Vec<Value> = list["items"]
                    .as_array()
                    .map(|items| items.iter().map(|o| partial(api_version, o)).collect())
                    .unwrap_or_default();
                json!({
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": api_version,
                    "metadata": list["metadata"].clone(),
                    "items": items,
                })
            }
        }
    }

    fn table(&self, metadata: Value, objects: &[Value]) -> Value {
        let Self::Table {
            api_version,
            columns,
            include,
        } = self
        else {
            return Value::Null;
        };
        let mut definitions = vec![json!({
            "name": "Name", "type": "string", "format": "name", "description": NAME_DOC, "priority": 0,
        })];
        definitions.extend(columns.iter().map(|c| {
            json!({
                "name": c.name, "type": c.type_, "format": c.format,
                "description": c.description, "priority": c.priority,
            })
        }));
        let rows: Vec<Value> = objects
            .iter()
            .map(|obj| {
                let mut cells = vec![obj["metadata"]["name"].clone()];
                cells.extend(columns.iter().map(|c| cell(c, obj)));
                let mut row = json!({"cells": cells});
                match include {
                    Include::None => {}
                    Include::Metadata => row["object"] = partial(api_version, obj),
                    Include::Object => row["object"] = obj.clone(),
                }
                row
            })
            .collect();
        json!({
            "kind": "Table",
            "apiVersion": api_version,
            "metadata": metadata,
            "columnDefinitions": definitions,
            "rows": rows,
        })
    }
}

impl Printer {
    fn cell(self, obj: &Value) -> Value {
        Value::from(match self {
            Self::Age => match obj["metadata"]["creationTimestamp"].as_str() {
                Some(text) => DateTime::parse_from_rfc3339(text).map_or_else(
                    |_| "<invalid>".to_owned(),
                    |t| human_duration(Utc::now().signed_duration_since(t.with_timezone(&Utc))),
                ),
                None => "<unknown>".to_owned(),
            },
            Self::NodeStatus => node::status_cell(obj),
            Self::NodeRoles => node::roles_cell(obj),
            Self::NodeAddress(type_) => node::address_cell(obj, type_),
            Self::NodeInfo { field, empty } => node::info_cell(obj, field, empty),
        })
    }
}

/// The default columns of kinds that declare none: Name, then `Created At`.
pub(crate) fn default_columns(kind: &Kind, version: &str) -> Vec<PrinterColumn> {
    match kind.version(version) {
        Some(v) if !v.columns.is_empty() => v.columns.clone(),
        _ => vec![PrinterColumn::created_at()],
    }
}

fn partial(api_version: &str, obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": api_version,
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// The cell of one column for one object.
fn cell(column: &PrinterColumn, obj: &Value) -> Value {
    if let Some(printer) = column.printer {
        return printer.cell(obj);
    }
    let Some(value) = json_path(obj, &column.json_path).filter(|v| !v.is_null()) else {
        return Value::Null;
    };
    match column.type_.as_str() {
        "integer" => match value {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.is_finite() && f.abs() < 9.2e18)
                        .map(|f| f.trunc() as i64)
                })
                .map_or(Value::Null, Value::from),
            _ => Value::Null,
        },
        "number" => value.as_f64().map_or(Value::Null, Value::from),
        "boolean" => value.as_bool().map_or(Value::Null, Value::from),
        "date" => match value.as_str() {
            Some(text) => match DateTime::parse_from_rfc3339(text) {
                Ok(t) if column.timestamp => Value::from(
                    t.with_timezone(&Utc)
                        .to_rfc3339_opts(SecondsFormat::Secs, true),
                ),
                Ok(t) => Value::from(human_duration(
                    Utc::now().signed_duration_since(t.with_timezone(&Utc)),
                )),
                Err(_) => Value::from("<invalid>"),
            },
            None => Value::Null,
        },
        // `string`, and any other type: the value as JSONPath prints it.
        _ => Value::from(match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }),
    }
}

/// An age as kubectl shows it (apimachinery's `HumanDuration`): about two
/// significant figures, `<invalid>` for more than a second in the future.
pub(crate) fn human_duration(age: chrono::TimeDelta) -> String {
    let seconds = age.num_seconds();
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let with = |whole: i64, unit: &str, part: i64, part_unit: &str| {
        if part == 0 {
            format!("{whole}{unit}")
        } else {
            format!("{whole}{unit}{part}{part_unit}")
        }
    };
    let minutes = seconds / 60;
    if minutes < 10 {
        return with(minutes, "m", seconds % 60, "s");
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return with(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return with(days, "d", hours % 24, "h");
    }
    if days < 365 * 2 {
        return format!("{days}d");
    }
    if days < 365 * 8 {
        return with(days / 365, "y", days % 365, "d");
    }
    format!("{}y", days / 365)
}

/// Evaluates a simple JSONPath (`.a.b`, `.a[0]`, `.a['b.c']`, optionally in
/// `{}`); None when it cannot be followed.
pub(crate) fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path)
        .trim();
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut current = obj;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let (key, tail) = after.split_at(end);
            if !key.is_empty() {
                current = current.get(key)?;
            }
            rest = tail;
        } else if let Some(after) = rest.strip_prefix('[') {
            let close = after.find(']')?;
            let (inside, tail) = after.split_at(close);
            rest = tail.get(1..)?;
            let inside = inside.trim();
            if inside == "*" {
                // As the API server's table convertor: the first result of the whole path.
                let rest = rest.to_owned();
                return current
                    .as_array()?
                    .iter()
                    .find_map(|item| json_path(item, &rest).filter(|v| !v.is_null()));
            }
            let quoted = inside
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .or_else(|| inside.strip_prefix('"').and_then(|s| s.strip_suffix('"')));
            current = match quoted {
                Some(key) => current.get(key)?,
                None => {
                    let items = current.as_array()?;
                    let index: i64 = inside.parse().ok()?;
                    let index = if index < 0 {
                        items.len().checked_sub(index.unsigned_abs() as usize)?
                    } else {
                        usize::try_from(index).ok()?
                    };
                    items.get(index)?
                }
            };
        } else {
            return None;
        }
    }
    Some(current)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn simple_json_paths_are_followed() {
        let obj = json!({"status": {"phase": "Active", "list": [{"a": 1}, {"a": 2}]}, "metadata": {"labels": {"x.io/y": "z"}}});
        assert_eq!(json_path(&obj, ".status.phase"), Some(&json!("Active")));
        assert_eq!(json_path(&obj, "{.status.list[1].a}"), Some(&json!(2)));
        // A wildcard gives the first result, as the API server's table convertor does.
        assert_eq!(json_path(&obj, ".status.list[*].a"), Some(&json!(1)));
        assert_eq!(json_path(&obj, ".status.list[-1].a"), Some(&json!(2)));
        assert_eq!(
            json_path(&obj, ".metadata.labels['x.io/y']"),
            Some(&json!("z"))
        );
        assert_eq!(json_path(&obj, ".status.missing"), None);
        assert_eq!(json_path(&obj, ".status.list[5]"), None);
        assert_eq!(json_path(&obj, "status"), None);
    }

    #[test]
    fn cells_follow_the_column_type() {
        let obj = json!({"a": 3.0, "b": "text", "c": {"d": 1}, "t": "2000-01-02T03:04:05+01:00", "bad": "yesterday"});
        let col = |t: &str, p: &str| PrinterColumn::new("x", t, p, "");
        assert_eq!(cell(&col("integer", ".a"), &obj), json!(3));
        assert_eq!(cell(&col("integer", ".b"), &obj), Value::Null);
        assert_eq!(cell(&col("string", ".c"), &obj), json!("{\"d\":1}"));
        assert_eq!(cell(&col("string", ".missing"), &obj), Value::Null);
        let created_at = PrinterColumn {
            json_path: ".t".into(),
            ..PrinterColumn::created_at()
        };
        assert_eq!(cell(&created_at, &obj), json!("2000-01-02T02:04:05Z"));
        let age = cell(&col("date", ".t"), &obj);
        assert!(age.as_str().unwrap().ends_with('y'), "{age}");
        assert_eq!(cell(&col("date", ".bad"), &obj), json!("<invalid>"));
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let age = |s: i64| human_duration(chrono::TimeDelta::seconds(s));
        assert_eq!(age(-5), "<invalid>");
        assert_eq!(age(-1), "0s");
        assert_eq!(age(5), "5s");
        assert_eq!(age(119), "119s");
        assert_eq!(age(125), "2m5s");
        assert_eq!(age(600), "10m");
        assert_eq!(age(3 * 3600 + 60), "3h1m");
        assert_eq!(age(30 * 3600), "30h");
        assert_eq!(age(3 * 86400 + 3600), "3d1h");
        assert_eq!(age(30 * 86400), "30d");
        assert_eq!(age(3 * 365 * 86400 + 86400), "3y1d");
        assert_eq!(age(10 * 365 * 86400), "10y");
    }

    #[test]
    fn accept_headers_are_taken_in_order() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert!(matches!(
            Render::negotiate(Some(kubectl), &[], None).unwrap(),
            Render::Table {
                include: Include::Metadata,
                ..
            }
        ));
        assert_eq!(
            Render::negotiate(
                Some("application/vnd.kubernetes.protobuf,application/json"),
                &[],
                None
            )
            .unwrap(),
            Render::Object
        );
        assert_eq!(Render::negotiate(None, &[], None).unwrap(), Render::Object);
        let err =
            Render::negotiate(Some("application/vnd.kubernetes.protobuf"), &[], None).unwrap_err();
        assert_eq!(err.code, 406);
        // A Table of another group is not served: the next type is taken.
        assert_eq!(
            Render::negotiate(Some("application/json;as=Table;g=x;v=v1, */*"), &[], None).unwrap(),
            Render::Object
        );
    }
}
