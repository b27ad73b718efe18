//! `metadata.managedFields`, as the apiserver records them, when [`crate::Config::managed_fields`]
//! is on (off by default: most tests compare objects without them).
//!
//! Rules enforced here:
//! - one entry per manager, operation and subresource, with the kind's `apiVersion`, the time
//!   of its last write, `fieldsType: FieldsV1` and the fields it set in `fieldsV1`;
//! - an `Apply` owns every field of the applied object but its status and the system metadata
//!   (what `kubectl apply --server-side` of a whole manifest sets); an `Update` owns the fields
//!   it changed, added to those it owned before; a write to `/status` is recorded as its own
//!   entry with `subresource: status`;
//! - lists are atomic (a CRD's default): a list is one field, not one per item.
//!
//! Not modelled: ownership taken from other managers, apply conflicts, and removal of the
//! fields an applier no longer sets. The point is the size and shape a client receives.

use serde_json::{Map, Value, json};

/// Who is writing, as the request names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Writer {
    /// `fieldManager`, else the User-Agent's product, else empty (as the API server records a
    /// request with neither).
    pub manager: String,
    /// A server-side apply (`Apply`), or any other write (`Update`).
    pub apply: bool,
}

impl Writer {
    /// The writer of a request: its `fieldManager`, else its User-Agent up to the first `/`,
    /// printable characters only (a space but no other), at most 128 bytes (the apiserver's `managerOrUserAgent`); a
    /// request with neither writes under the empty name.
    pub fn of_request(field_manager: Option<&str>, user_agent: Option<&str>, apply: bool) -> Self {
        let manager = match field_manager.filter(|m| !m.is_empty()) {
            Some(manager) => manager.to_owned(),
            None => product_of(user_agent.unwrap_or("")),
        };
        Writer { manager, apply }
    }
}

/// The longest field manager name the apiserver accepts (`FieldManagerMaxLength`).
const MANAGER_MAX_BYTES: usize = 128;

fn product_of(user_agent: &str) -> String {
    let mut product = String::new();
    let first = user_agent.split('/').next().unwrap_or("");
    // Go's `unicode.IsPrint` as far as std can tell: no controls, no spaces but ' '.
    let printable = |c: &char| *c == ' ' || !(c.is_control() || c.is_whitespace());
    for c in first.chars().filter(printable) {
        if product.len().saturating_add(c.len_utf8()) > MANAGER_MAX_BYTES {
            break;
        }
        product.push(c);
    }
    product
}

/// What a write to the main resource sets: everything but the status and the system metadata.
fn main_part(obj: &Value) -> Value {
    let mut part = Map::new();
    for (key, value) in obj.as_object().into_iter().flatten() {
        match key.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                let meta: Map<String, Value> = ["labels", "annotations", "finalizers"]
                    .into_iter()
                    .filter_map(|k| Some((k.to_owned(), value.get(k)?.clone())))
                    .collect();
                if !meta.is_empty() {
                    part.insert(key.clone(), Value::Object(meta));
                }
            }
            _ => {
                part.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(part)
}

/// What a write to `/status` sets.
fn status_part(obj: &Value) -> Value {
    let mut part = Map::new();
    if let Some(status) = obj.get("status") {
        part.insert("status".into(), status.clone());
    }
    Value::Object(part)
}

/// The FieldsV1 set of every field of `value`: `{"f:a": {".": {}, "f:b": {}}}`.
fn every_field(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut set = Map::new();
            set.insert(".".into(), json!({}));
            for (key, child) in map {
                set.insert(format!("f:{key}"), every_field(child));
            }
            Value::Object(set)
        }
        _ => json!({}),
    }
}

/// The FieldsV1 set of what differs from `old` in `new` (None: nothing).
fn changed_fields(old: Option<&Value>, new: &Value) -> Option<Value> {
    match (old, new) {
        (Some(old), new) if old == new => None,
        (Some(Value::Object(old)), Value::Object(new)) => {
            let set: Map<String, Value> = new
                .iter()
                .filter_map(|(key, child)| {
                    Some((format!("f:{key}"), changed_fields(old.get(key), child)?))
                })
                .collect();
            (!set.is_empty()).then_some(Value::Object(set))
        }
        (_, new) => Some(every_field(new)),
    }
}

/// `into` with every field of `more` added.
fn union(into: &mut Value, more: Value) {
    if let (Value::Object(into), Value::Object(more)) = (into, more) {
        for (key, child) in more {
            match into.get_mut(&key) {
                Some(existing) => union(existing, child),
                None => {
                    into.insert(key, child);
                }
            }
        }
    }
}

/// Records `writer`'s write of `obj` (the new object; `old`, the stored one, carries the entries
/// so far) in `obj`'s `metadata.managedFields`.
pub(crate) fn record(
    obj: &mut Value,
    old: Option<&Value>,
    writer: &Writer,
    on_status: bool,
    api_version: &str,
    now: &str,
) {
    let part = if on_status { status_part } else { main_part };
    let (new_part, old_part) = (part(obj), old.map(part));
    let fields = if writer.apply {
        // The whole applied object; the root has no "." of its own.
        let mut all = every_field(&new_part);
        if let Some(map) = all.as_object_mut() {
            map.remove(".");
        }
        Some(all)
    } else {
        changed_fields(old_part.as_ref(), &new_part)
    };
    let mut entries: Vec<Value> = old
        .and_then(|o| o["metadata"]["managedFields"].as_array().cloned())
        .unwrap_or_default();
    let operation = if writer.apply { "Apply" } else { "Update" };
    let subresource = on_status.then_some("status");
    let same = |entry: &Value| {
        entry["manager"] == writer.manager.as_str()
            && entry["operation"] == operation
            && entry.get("subresource").and_then(Value::as_str) == subresource
    };
    match (entries.iter_mut().find(|e| same(e)), fields) {
        (Some(entry), Some(fields)) => {
            if writer.apply {
                entry["fieldsV1"] = fields;
            } else {
                union(&mut entry["fieldsV1"], fields);
            }
            entry["time"] = now.into();
            entry["apiVersion"] = api_version.into();
        }
        (None, Some(fields)) => {
            let mut entry = json!({
                "apiVersion": api_version,
                "fieldsType": "FieldsV1",
                "fieldsV1": fields,
                "manager": writer.manager,
                "operation": operation,
                "time": now,
            });
            if let Some(subresource) = subresource {
                entry["subresource"] = subresource.into();
            }
            entries.push(entry);
        }
        (_, None) => {}
    }
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn kubectl() -> Writer {
        Writer {
            manager: "kubectl".into(),
            apply: true,
        }
    }

    #[test]
    fn an_apply_owns_every_field_it_set_and_a_status_update_its_changes() {
        let mut applied = json!({
            "apiVersion": "g/v1", "kind": "T",
            "metadata": {"name": "a", "uid": "u", "labels": {"team": "x"}},
            "spec": {"resources": {"threads": 1}, "nodes": ["a", "b"]},
        });
        record(&mut applied, None, &kubectl(), false, "g/v1", "t0");
        assert_eq!(
            applied["metadata"]["managedFields"],
            json!([{
                "apiVersion": "g/v1", "fieldsType": "FieldsV1", "manager": "kubectl",
                "operation": "Apply", "time": "t0",
                "fieldsV1": {
                    "f:metadata": {".": {}, "f:labels": {".": {}, "f:team": {}}},
                    "f:spec": {".": {}, "f:resources": {".": {}, "f:threads": {}}, "f:nodes": {}},
                },
            }])
        );
        let mut placed = applied.clone();
        placed["status"] = json!({"phase": "Active", "nodeName": "n"});
        let controller = Writer::of_request(None, Some("tenant-placer/0.1"), false);
        record(&mut placed, Some(&applied), &controller, true, "g/v1", "t1");
        let mut moved = placed.clone();
        moved["status"]["nodeName"] = "m".into();
        moved["status"]["since"] = "t2".into();
        record(&mut moved, Some(&placed), &controller, true, "g/v1", "t2");
        let entries = moved["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert_eq!(entries[1]["manager"], "tenant-placer");
        assert_eq!(entries[1]["subresource"], "status");
        assert_eq!(entries[1]["time"], "t2");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:status": {".": {}, "f:phase": {}, "f:nodeName": {}, "f:since": {}}})
        );
    }

    #[test]
    fn a_writer_without_field_manager_is_named_by_its_user_agent_product() {
        fn named(manager: Option<&str>, agent: Option<&str>) -> String {
            Writer::of_request(manager, agent, false).manager
        }
        assert_eq!(named(Some("m"), Some("kubectl/v1.36")), "m");
        assert_eq!(named(Some(""), Some("kubectl/v1.36 (linux)")), "kubectl");
        assert_eq!(named(None, Some("tenant-placer/0.1.0")), "tenant-placer");
        assert_eq!(named(None, Some("a\tb\u{a0}c d/1")), "abc d");
        assert_eq!(named(None, Some(&"x".repeat(200))), "x".repeat(128));
        assert_eq!(
            named(None, Some(&format!("{}é", "x".repeat(127)))),
            "x".repeat(127)
        );
        assert_eq!(named(None, None), "");
    }

    #[test]
    fn a_write_that_changes_nothing_it_owns_adds_no_entry() {
        let mut obj = json!({"metadata": {"name": "a"}, "spec": {"x": 1}});
        let old = obj.clone();
        let writer = Writer::of_request(Some("m"), None, false);
        record(&mut obj, Some(&old), &writer, false, "v1", "t");
        assert!(obj["metadata"].get("managedFields").is_none());
    }
}
