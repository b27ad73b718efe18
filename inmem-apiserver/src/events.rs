//! Core `v1` Events and `events.k8s.io/v1` Events are one resource, as in
//! the apiserver: both APIs read and write the same objects, stored in the
//! core form (under the core resource key), and `events.k8s.io/v1` serves
//! them converted field by field as `pkg/apis/events/v1/conversion.go` does
//! (`regarding` ↔ `involvedObject`, `note` ↔ `message`,
//! `reportingController` ↔ `reportingComponent`, `deprecatedSource` ↔
//! `source`, `deprecatedFirstTimestamp`/`deprecatedLastTimestamp`/
//! `deprecatedCount` ↔ `firstTimestamp`/`lastTimestamp`/`count`; the other
//! fields — `eventTime`, `series`, `action`, `reason`, `type`, `related`,
//! `reportingInstance` — share their names).

use serde_json::{Map, Value};

pub(crate) const GROUP: &str = "events.k8s.io";
const RESOURCE: &str = "events";

/// `(events.k8s.io/v1 name, core v1 name)` of the fields the conversion renames.
const RENAMED: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Whether (group, resource) is `events.k8s.io` `events`.
pub(crate) fn is_events_v1(group: &str, resource: &str) -> bool {
    group == GROUP && resource == RESOURCE
}

/// The (group, resource) the objects of (group, resource) are stored under.
pub(crate) fn storage_key(group: &str, resource: &str) -> (String, String) {
    if is_events_v1(group, resource) {
        (String::new(), RESOURCE.to_owned())
    } else {
        (group.to_owned(), resource.to_owned())
    }
}

/// The top-level fields of an `events.k8s.io/v1` Event (true) or a core one
/// (false) that the other version does not have: decoding drops them.
pub(crate) fn foreign_fields(obj: &Value, events_v1: bool) -> Vec<String> {
    let Some(map) = obj.as_object() else {
        return Vec::new();
    };
    RENAMED
        .iter()
        .map(|&(ev1, core)| if events_v1 { core } else { ev1 })
        .filter(|f| map.contains_key(*f))
        .map(str::to_owned)
        .collect()
}

fn convert(obj: Value, to_core: bool) -> Value {
    let Value::Object(map) = obj else {
        return obj;
    };
    let mut out = Map::new();
    for (key, value) in map {
        let renamed = RENAMED.iter().find_map(|&(ev1, core)| {
            let (from, to) = if to_core { (ev1, core) } else { (core, ev1) };
            (key == from).then_some(to)
        });
        let foreign = RENAMED
            .iter()
            .any(|&(ev1, core)| key == if to_core { core } else { ev1 });
        match renamed {
            Some(to) => {
                out.insert(to.to_owned(), value);
            }
            // A field of the target version only: the source has no such field.
            None if foreign => {}
            None => {
                out.insert(key, value);
            }
        }
    }
    let api_version = if to_core { "v1" } else { "events.k8s.io/v1" };
    out.insert("apiVersion".into(), api_version.into());
    out.insert("kind".into(), "Event".into());
    Value::Object(out)
}

/// `Convert_v1_Event_To_core_Event`: an `events.k8s.io/v1` Event as stored.
pub(crate) fn to_core(obj: Value) -> Value {
    convert(obj, true)
}

/// `Convert_core_Event_To_v1_Event`: a stored Event as `events.k8s.io/v1` serves it.
pub(crate) fn to_events_v1(obj: Value) -> Value {
    convert(obj, false)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn conversion_renames_fields_both_ways_and_round_trips() {
        let ev1 = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "regarding": {"kind": "Tenant", "name": "acme"},
            "note": "short", "reason": "Pending", "type": "Warning", "action": "Place",
            "reportingController": "tenant-placer", "reportingInstance": "pod-1",
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "series": {"count": 2, "lastObservedTime": "2024-01-01T00:01:00.000000Z"},
            "deprecatedSource": {"component": "c", "host": "h"},
            "deprecatedCount": 3,
            "deprecatedFirstTimestamp": "2024-01-01T00:00:00Z",
            "deprecatedLastTimestamp": "2024-01-01T00:01:00Z",
        });
        let core = to_core(ev1.clone());
        assert_eq!(
            core,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "e", "namespace": "default"},
                "involvedObject": {"kind": "Tenant", "name": "acme"},
                "message": "short", "reason": "Pending", "type": "Warning", "action": "Place",
                "reportingComponent": "tenant-placer", "reportingInstance": "pod-1",
                "eventTime": "2024-01-01T00:00:00.000000Z",
                "series": {"count": 2, "lastObservedTime": "2024-01-01T00:01:00.000000Z"},
                "source": {"component": "c", "host": "h"},
                "count": 3,
                "firstTimestamp": "2024-01-01T00:00:00Z",
                "lastTimestamp": "2024-01-01T00:01:00Z",
            })
        );
        assert_eq!(to_events_v1(core), ev1);
        // A field the source version does not have is not carried over.
        assert_eq!(to_core(json!({"message": "m"}))["message"], Value::Null);
        assert_eq!(
            foreign_fields(&json!({"message": "m", "note": "n"}), true),
            ["message"]
        );
    }
}
