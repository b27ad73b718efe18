//! The patch types of PATCH requests, applied to the current object.

use json_patch::PatchOperation;
use serde_json::Value;

use crate::status::Status;

/// A patch type, from the request's `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    /// RFC 6902.
    Json,
    /// RFC 7386.
    Merge,
    /// Built-in kinds only; treated as a merge patch (no patch strategies).
    Strategic,
    /// Server-side apply; the applied configuration is merged into the object
    /// (no field ownership). JSON only, as kube-rs sends it.
    Apply,
}

impl PatchType {
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/json-patch+json" => Some(Self::Json),
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(Self::Apply),
            _ => None,
        }
    }

    /// The 415 for a type the kind does not accept.
    pub fn unsupported(custom: bool) -> Status {
        let accepted = if custom {
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        } else {
            "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
        };
        Status::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: {accepted}"
        ))
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Status> {
    serde_json::from_slice(body).map_err(|e| Status::bad_request(e.to_string()))
}

/// The patched object. `current` is None for an apply that creates.
pub(crate) fn apply(
    kind: PatchType,
    current: Option<&Value>,
    body: &[u8],
) -> Result<Value, Status> {
    let mut doc = current.cloned().unwrap_or(Value::Null);
    match kind {
        PatchType::Json => {
            let ops: Vec<PatchOperation> = parse(body)?;
            json_patch(&mut doc, &ops)?;
        }
        PatchType::Merge | PatchType::Strategic | PatchType::Apply => merge(&mut doc, parse(body)?),
    }
    Ok(doc)
}

/// RFC 7386, as `json_patch::merge` does it, but moving the patch's values into `doc` instead
/// of copying them (the patch is parsed for this one use).
fn merge(doc: &mut Value, patch: Value) {
    let Value::Object(patch) = patch else {
        *doc = patch;
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(map) = doc {
        for (key, value) in patch {
            if value.is_null() {
                map.remove(&key);
            } else {
                merge(map.entry(key).or_insert(Value::Null), value);
            }
        }
    }
}

/// RFC 6902 with the `test` semantics of the apiserver's library
/// (evanphx/json-patch): testing a missing path against `null` passes, which
/// is how kube-rs checks "no finalizers yet". A failure is the apiserver's
/// generic 422, whose message does not name the path.
///
/// `doc` is the caller's own copy, dropped on an error: a failed patch changes nothing stored.
fn json_patch(doc: &mut Value, ops: &[PatchOperation]) -> Result<(), Status> {
    for op in ops {
        let ok = match op {
            PatchOperation::Test(test) => match doc.pointer(test.path.as_str()) {
                Some(found) => *found == test.value,
                None => test.value.is_null(),
            },
            other => json_patch::patch(doc, std::slice::from_ref(other)).is_ok(),
        };
        if !ok {
            return Err(Status::generic(422));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn a_test_of_a_missing_path_against_null_passes() {
        let doc = json!({"metadata": {"name": "a"}});
        let body = br#"[{"op":"test","path":"/metadata/finalizers","value":null},
                        {"op":"add","path":"/metadata/finalizers","value":["f"]}]"#;
        let out = apply(PatchType::Json, Some(&doc), body).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f"]));
    }

    #[test]
    fn a_failed_test_is_the_generic_422() {
        let doc = json!({"metadata": {"finalizers": ["f"]}});
        let body = br#"[{"op":"test","path":"/metadata/finalizers/0","value":"g"}]"#;
        let err = apply(PatchType::Json, Some(&doc), body).unwrap_err();
        assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            err.message,
            "the server rejected our request due to an error in our request"
        );
    }

    #[test]
    fn a_merge_patch_is_merged_as_json_patch_merges_it() {
        let docs = [
            json!(null),
            json!(3),
            json!(["a"]),
            json!({"a": {"b": 1, "c": [1, 2]}, "d": "e"}),
        ];
        let patches = [
            json!(null),
            json!("x"),
            json!([{"a": null}]),
            json!({}),
            json!({"a": null}),
            json!({"a": {"b": null, "c": {"f": null, "g": 1}}, "h": [null]}),
            json!({"d": {"e": {"f": null}}, "i": null}),
        ];
        for doc in &docs {
            for patch in &patches {
                let (mut ours, mut theirs) = (doc.clone(), doc.clone());
                merge(&mut ours, patch.clone());
                json_patch::merge(&mut theirs, patch);
                assert_eq!(ours, theirs, "{doc} merged with {patch}");
            }
        }
    }

    #[test]
    fn a_merge_patch_removes_nulls() {
        let doc = json!({"spec": {"a": 1, "b": 2}});
        let out = apply(
            PatchType::Merge,
            Some(&doc),
            br#"{"spec":{"a":null,"c":3}}"#,
        )
        .unwrap();
        assert_eq!(out, json!({"spec": {"b": 2, "c": 3}}));
    }
}
