//! JSON patches the loops send: guarded by a `test` operation, so a list changed since it was
//! read fails the patch (422) and the next reconcile retries.

/// JSON-patch operations adding `finalizer` to a list last seen as `current`: the `test` makes
/// the patch fail (422) when the list changed since, and the next reconcile retries.
pub fn add_finalizer_ops(current: Option<&Vec<String>>, finalizer: &str) -> serde_json::Value {
    match current {
        None => serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
        ]),
        Some(current) => serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
        ]),
    }
}

/// A JSON patch from literal, well-formed operations (an empty patch, were they not, is a no-op).
pub fn json_patch(ops: serde_json::Value) -> json_patch::Patch {
    serde_json::from_value(ops).unwrap_or_default()
}
