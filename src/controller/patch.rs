//! Patches the loops send. JSON patches are guarded by a `test` operation (a list changed since
//! it was read fails the patch, 422) or by the resourceVersion read ([`status_ops`]); merge
//! patches ([`Merge`]) by the resourceVersion read, when they carry one (409 when the object
//! changed since). Either way the next reconcile or look reads again and retries.

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

/// A merge patch (RFC 7386) of an object's metadata (finalizers, annotations), spec and status,
/// typed: what is not set is not sent. Guarded when it carries the resourceVersion read ([`Merge::guarded`]).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Merge<'a> {
    #[serde(skip_serializing_if = "MergeMeta::is_empty")]
    metadata: MergeMeta<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct MergeMeta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_version: Option<&'a str>,
    /// The whole list: a merge patch replaces a list.
    #[serde(skip_serializing_if = "Option::is_none")]
    finalizers: Option<Vec<&'a str>>,
    /// Each one set; the others are left as they are.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    annotations: std::collections::BTreeMap<&'a str, &'a str>,
}

impl MergeMeta<'_> {
    fn is_empty(&self) -> bool {
        self.resource_version.is_none() && self.finalizers.is_none() && self.annotations.is_empty()
    }
}

impl<'a> Merge<'a> {
    /// Unguarded: applied whatever the object's version.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applied only to the version read (`None`: the object read had none, so unguarded).
    pub fn guarded(resource_version: Option<&'a str>) -> Self {
        Merge {
            metadata: MergeMeta {
                resource_version,
                ..MergeMeta::default()
            },
            ..Merge::default()
        }
    }

    /// Sets the finalizers to exactly these.
    pub fn finalizers(mut self, finalizers: impl IntoIterator<Item = &'a str>) -> Self {
        self.metadata.finalizers = Some(finalizers.into_iter().collect());
        self
    }

    /// Sets one annotation.
    pub fn annotation(mut self, key: &'a str, value: &'a str) -> Self {
        self.metadata.annotations.insert(key, value);
        self
    }

    /// Sets these spec fields (what `spec` serializes to; its absent fields are left).
    pub fn spec(mut self, spec: &impl serde::Serialize) -> Result<Self, serde_json::Error> {
        self.spec = Some(serde_json::to_value(spec)?);
        Ok(self)
    }

    /// Sets these status fields (what `status` serializes to; its absent fields are left).
    pub fn status(mut self, status: &impl serde::Serialize) -> Result<Self, serde_json::Error> {
        self.status = Some(serde_json::to_value(status)?);
        Ok(self)
    }
}

/// A JSON patch from literal, well-formed operations (an empty patch, were they not, is a no-op).
pub fn json_patch(ops: serde_json::Value) -> json_patch::Patch {
    serde_json::from_value(ops).unwrap_or_default()
}

/// A status as [`status_ops`] reads it: its other top-level fields as a JSON object, and its
/// list of entries keyed by UID typed, so that only the entries written are encoded (a Node
/// holds tens; encoding all of them twice per write was most of a write's cost).
#[derive(Clone, Copy, Debug)]
pub struct Status<'a, T> {
    /// Every top-level field but the keyed list.
    pub fields: &'a serde_json::Value,
    /// The keyed list's entries.
    pub entries: &'a [T],
}

/// The JSON patch that turns a status read at `resource_version` (`from`; `None` when the object
/// has none) into `to`, sending only what changed. Its first operation sets
/// `metadata.resourceVersion` to the version read: the API server then answers 409 Conflict when
/// the object changed since, exactly as a PUT carrying that version does, and every index the
/// patch names is an index of the status it was computed from.
///
/// The list of entries keyed by `key` (a UID; the field `keyed`: Node allocations) is edited in
/// place when the entries kept stay in order: the ones gone removed, the ones changed or new
/// written at their index; otherwise it is set whole. Other top-level fields that changed are
/// set whole (`add`, which replaces a member that exists); the ones gone are removed.
pub fn status_ops<T: serde::Serialize + PartialEq>(
    resource_version: &str,
    from: Option<Status<'_, T>>,
    to: Status<'_, T>,
    keyed: &str,
    key: impl Fn(&T) -> Option<&str>,
) -> Result<json_patch::Patch, serde_json::Error> {
    use json_patch::jsonptr::PointerBuf;
    let mut ops = vec![replace(
        PointerBuf::from_tokens(["metadata", "resourceVersion"]),
        resource_version.into(),
    )];
    let (Some(from), Some(fields)) = (from, to.fields.as_object()) else {
        let mut whole = to.fields.clone();
        if let Some(fields) = whole.as_object_mut() {
            fields.insert(keyed.to_owned(), serde_json::to_value(to.entries)?);
        }
        ops.push(add(PointerBuf::from_tokens(["status"]), whole));
        return Ok(json_patch::Patch(ops));
    };
    if from.entries != to.entries {
        let path = PointerBuf::from_tokens(["status", keyed]);
        match keyed_list_ops(&path, from.entries, to.entries, key)? {
            Some(edits) => ops.extend(edits),
            None => ops.push(add(path, serde_json::to_value(to.entries)?)),
        }
    }
    let had = from.fields.as_object();
    for (field, wanted) in fields.iter().filter(|(field, _)| *field != keyed) {
        if had.and_then(|h| h.get(field)) != Some(wanted) {
            ops.push(add(
                PointerBuf::from_tokens(["status", field.as_str()]),
                wanted.clone(),
            ));
        }
    }
    for field in had
        .into_iter()
        .flat_map(|h| h.keys())
        .filter(|f| *f != keyed && !fields.contains_key(*f))
    {
        let path = PointerBuf::from_tokens(["status", field.as_str()]);
        ops.push(json_patch::PatchOperation::Remove(
            json_patch::RemoveOperation { path },
        ));
    }
    Ok(json_patch::Patch(ops))
}

fn add(
    path: json_patch::jsonptr::PointerBuf,
    value: serde_json::Value,
) -> json_patch::PatchOperation {
    json_patch::PatchOperation::Add(json_patch::AddOperation { path, value })
}

fn replace(
    path: json_patch::jsonptr::PointerBuf,
    value: serde_json::Value,
) -> json_patch::PatchOperation {
    json_patch::PatchOperation::Replace(json_patch::ReplaceOperation { path, value })
}

/// One edit of a keyed list, before it is encoded.
enum Edit<'a, T> {
    Remove(usize),
    Replace(usize, &'a T),
    /// At an index, or at the end (`None`: `-`).
    Add(Option<usize>, &'a T),
}

impl<T: serde::Serialize> Edit<'_, T> {
    /// Its length as compact JSON under `path` (`path_len` bytes), counted without encoding it:
    /// `{"op":"remove","path":"P/I"}`, `{"op":"replace","path":"P/I","value":V}`,
    /// `{"op":"add","path":"P/I","value":V}`.
    fn json_len(&self, path_len: usize) -> usize {
        let digits = |i: usize| {
            i.checked_ilog10()
                .map_or(1, |d| usize::try_from(d).unwrap_or(0).saturating_add(1))
        };
        let (skeleton, at, value) = match self {
            Edit::Remove(i) => (r#"{"op":"remove","path":"/"}"#.len(), digits(*i), 0),
            Edit::Replace(i, entry) => (
                r#"{"op":"replace","path":"/","value":}"#.len(),
                digits(*i),
                json_len(entry),
            ),
            Edit::Add(at, entry) => (
                r#"{"op":"add","path":"/","value":}"#.len(),
                at.map_or(1, digits),
                json_len(entry),
            ),
        };
        skeleton
            .saturating_add(path_len)
            .saturating_add(at)
            .saturating_add(value)
    }

    fn encode(
        &self,
        path: &json_patch::jsonptr::PointerBuf,
    ) -> Result<json_patch::PatchOperation, serde_json::Error> {
        let at = |index: &str| {
            let mut at = path.clone();
            at.push_back(index);
            at
        };
        Ok(match self {
            Edit::Remove(i) => json_patch::PatchOperation::Remove(json_patch::RemoveOperation {
                path: at(&i.to_string()),
            }),
            Edit::Replace(i, entry) => replace(at(&i.to_string()), serde_json::to_value(entry)?),
            Edit::Add(index, entry) => {
                let index = index.map_or_else(|| "-".to_owned(), |i| i.to_string());
                add(at(&index), serde_json::to_value(entry)?)
            }
        })
    }
}

/// The operations turning list `from` into `to`, entries keyed by `key`; `None` when the
/// entries both hold are not in the same order (or a key is missing or repeats), or when setting
/// the list whole is no longer than editing it. The lengths are counted, and only the entries
/// written are encoded.
fn keyed_list_ops<T: serde::Serialize + PartialEq>(
    path: &json_patch::jsonptr::PointerBuf,
    from: &[T],
    to: &[T],
    key: impl Fn(&T) -> Option<&str>,
) -> Result<Option<Vec<json_patch::PatchOperation>>, serde_json::Error> {
    use std::collections::HashSet;
    let from_keys: Option<Vec<&str>> = from.iter().map(&key).collect();
    let to_keys: Option<Vec<&str>> = to.iter().map(&key).collect();
    let (Some(from_keys), Some(to_keys)) = (from_keys, to_keys) else {
        return Ok(None);
    };
    let wanted: HashSet<&str> = to_keys.iter().copied().collect();
    let had: HashSet<&str> = from_keys.iter().copied().collect();
    if wanted.len() != to_keys.len() || had.len() != from_keys.len() {
        return Ok(None);
    }
    let mut edits = Vec::new();
    // Removals last index first, so that each index still names the entry it read.
    let mut kept: Vec<(&T, &str)> = Vec::with_capacity(from.len());
    for (i, (entry, key)) in from.iter().zip(&from_keys).enumerate().rev() {
        if wanted.contains(key) {
            kept.push((entry, key));
        } else {
            edits.push(Edit::Remove(i));
        }
    }
    kept.reverse();
    // Then walk `to`: a kept entry must come next in order; a new one is inserted where it goes.
    let mut next = 0usize;
    for (i, (entry, key)) in to.iter().zip(&to_keys).enumerate() {
        if had.contains(key) {
            let Some((old, old_key)) = kept.get(next) else {
                return Ok(None);
            };
            if old_key != key {
                return Ok(None);
            }
            if *old != entry {
                edits.push(Edit::Replace(i, entry));
            }
            next = next.saturating_add(1);
        } else {
            // Past every kept entry it goes at the end.
            edits.push(Edit::Add((next != kept.len()).then_some(i), entry));
        }
    }
    let path_len = path.as_str().len();
    let edits_len = edits
        .iter()
        .map(|edit| edit.json_len(path_len))
        .fold(0, usize::saturating_add);
    if edits_len >= json_len(&to) {
        return Ok(None);
    }
    edits
        .iter()
        .map(|edit| edit.encode(path))
        .collect::<Result<_, _>>()
        .map(Some)
}

/// The length of `value` as compact JSON, counted without writing it out.
fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(bytes.len());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value into a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn entry(uid: &str, threads: u64) -> Value {
        json!({"tenant": format!("ns/{uid}"), "uid": uid, "resources": {"threads": threads, "memoryGb": 1, "storageGb": 0}})
    }

    fn status(entries: &[(&str, u64)]) -> Value {
        let allocations: Vec<Value> = entries.iter().map(|(u, t)| entry(u, *t)).collect();
        json!({"allocations": allocations, "tenants": entries.len(), "free": {"threads": 64}})
    }

    /// [`status_ops`] over statuses written as JSON, their allocations split off.
    fn status_ops(version: &str, from: Option<&Value>, to: &Value) -> Vec<Value> {
        fn split(status: &Value) -> (Value, Vec<Value>) {
            let mut fields = status.clone();
            let entries = fields
                .as_object_mut()
                .and_then(|f| f.remove("allocations"))
                .and_then(|a| a.as_array().cloned())
                .unwrap_or_default();
            (fields, entries)
        }
        let (from, to) = (from.map(split), split(to));
        fn status((fields, entries): &(Value, Vec<Value>)) -> Status<'_, Value> {
            Status { fields, entries }
        }
        let patch = super::status_ops(
            version,
            from.as_ref().map(status),
            status(&to),
            "allocations",
            |e| e.get("uid").and_then(Value::as_str),
        )
        .unwrap();
        serde_json::from_value(serde_json::to_value(patch).unwrap()).unwrap()
    }

    #[test]
    fn a_merge_patch_sends_only_what_is_set_and_the_version_it_is_guarded_by() {
        #[derive(serde::Serialize)]
        struct Phase {
            phase: &'static str,
        }
        #[derive(serde::Serialize)]
        struct Replicas {
            replicas: i32,
        }
        let cases = [
            (
                Merge::guarded(Some("7")).finalizers(["a", "b"]),
                json!({"metadata": {"resourceVersion": "7", "finalizers": ["a", "b"]}}),
            ),
            (
                Merge::guarded(Some("7"))
                    .annotation("k", "v")
                    .annotation("d", ""),
                json!({"metadata": {"resourceVersion": "7", "annotations": {"d": "", "k": "v"}}}),
            ),
            (
                Merge::new().status(&Phase { phase: "Ready" }).unwrap(),
                json!({"status": {"phase": "Ready"}}),
            ),
            (
                Merge::guarded(None).finalizers([]),
                json!({"metadata": {"finalizers": []}}),
            ),
            (
                Merge::guarded(Some("7"))
                    .annotation("k", "2")
                    .spec(&Replicas { replicas: 2 })
                    .unwrap(),
                json!({"metadata": {"resourceVersion": "7", "annotations": {"k": "2"}},
                       "spec": {"replicas": 2}}),
            ),
        ];
        for (patch, want) in cases {
            assert_eq!(serde_json::to_value(&patch).unwrap(), want);
        }
    }

    #[test]
    fn an_edit_is_counted_as_long_as_it_is_written() {
        let path = json_patch::jsonptr::PointerBuf::from_tokens(["status", "allocations"]);
        let entry = entry("a", 2);
        for i in [0, 7, 10, 123, 4096] {
            for edit in [
                Edit::Remove(i),
                Edit::Replace(i, &entry),
                Edit::Add(Some(i), &entry),
                Edit::Add(None, &entry),
            ] {
                let written = serde_json::to_string(&edit.encode(&path).unwrap()).unwrap();
                assert_eq!(
                    edit.json_len(path.as_str().len()),
                    written.len(),
                    "{written}"
                );
            }
        }
    }

    /// The object the server holds, with `status`, patched by `ops` as the server would.
    fn patched(status: Option<&Value>, ops: &[Value]) -> Result<Value, json_patch::PatchError> {
        let mut object = json!({"metadata": {"name": "n", "resourceVersion": "7"}});
        if let Some(status) = status {
            object["status"] = status.clone();
        }
        let patch: json_patch::Patch = serde_json::from_value(Value::from(ops.to_vec())).unwrap();
        json_patch::patch(&mut object, &patch)?;
        Ok(object)
    }

    #[test]
    fn a_new_entry_is_appended_and_only_the_totals_that_changed_are_sent() {
        let from = status(&[("a", 2), ("b", 3)]);
        let mut to = status(&[("a", 2), ("b", 3), ("c", 1)]);
        to["free"] = from["free"].clone();
        let ops = status_ops("7", Some(&from), &to);
        assert_eq!(
            ops,
            [
                json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "7"}),
                json!({"op": "add", "path": "/status/allocations/-", "value": entry("c", 1)}),
                json!({"op": "add", "path": "/status/tenants", "value": 3}),
            ]
        );
    }

    #[test]
    fn released_entries_are_removed_last_index_first_and_a_resize_replaced_in_place() {
        let from = status(&[("a", 2), ("b", 3), ("c", 1), ("d", 1), ("e", 1), ("f", 1)]);
        let to = status(&[("b", 5), ("d", 1), ("e", 1), ("f", 1)]);
        let ops = status_ops("7", Some(&from), &to);
        assert_eq!(
            ops[1..4],
            [
                json!({"op": "remove", "path": "/status/allocations/2"}),
                json!({"op": "remove", "path": "/status/allocations/0"}),
                json!({"op": "replace", "path": "/status/allocations/0", "value": entry("b", 5)}),
            ]
        );
        assert_eq!(patched(Some(&from), &ops).unwrap()["status"], to);
    }

    #[test]
    fn a_list_whose_edits_would_be_longer_is_written_whole() {
        let from = status(&[("a", 2), ("b", 3)]);
        let to = status(&[("c", 1)]);
        let ops = status_ops("7", Some(&from), &to);
        assert_eq!(
            ops[1],
            json!({"op": "add", "path": "/status/allocations", "value": to["allocations"]})
        );
    }

    #[test]
    fn entries_kept_in_another_order_or_a_status_missing_are_written_whole() {
        let from = status(&[("a", 2), ("b", 3)]);
        let to = status(&[("b", 3), ("a", 2)]);
        let ops = status_ops("7", Some(&from), &to);
        assert_eq!(
            ops[1],
            json!({"op": "add", "path": "/status/allocations", "value": to["allocations"]})
        );
        let ops = status_ops("7", None, &to);
        assert_eq!(
            ops[1..],
            [json!({"op": "add", "path": "/status", "value": to})]
        );
        assert_eq!(patched(None, &ops).unwrap()["status"], to);
    }

    #[test]
    fn the_patch_carries_the_version_read_so_a_changed_object_is_a_conflict_not_a_merge() {
        let from = status(&[("a", 2)]);
        let to = status(&[("a", 2), ("b", 1)]);
        let ops = status_ops("6", Some(&from), &to);
        // The server answers 409 when the version a patch sets differs from the stored one.
        let object = patched(Some(&from), &ops).unwrap();
        assert_eq!(object["metadata"]["resourceVersion"], "6");
    }

    #[test]
    fn a_field_no_longer_written_is_removed() {
        let mut from = status(&[("a", 2)]);
        from["allocated"] = json!({"threads": 2});
        let to = status(&[("a", 2)]);
        let ops = status_ops("7", Some(&from), &to);
        assert_eq!(
            ops[1..],
            [json!({"op": "remove", "path": "/status/allocated"})]
        );
    }

    proptest! {
        /// Whatever the two lists, the patch applied to the status read gives the status wanted.
        #[test]
        fn the_patch_turns_the_status_read_into_the_status_wanted(
            from in proptest::collection::vec((0u8..12, 1u64..4), 0..10),
            to in proptest::collection::vec((0u8..12, 1u64..4), 0..10),
        ) {
            let unique = |list: Vec<(u8, u64)>| {
                let mut seen = std::collections::HashSet::new();
                list.into_iter().filter(|(u, _)| seen.insert(*u)).map(|(u, t)| (format!("u{u}"), t)).collect::<Vec<_>>()
            };
            let (from, to) = (unique(from), unique(to));
            fn borrow(l: &[(String, u64)]) -> Vec<(&str, u64)> {
                l.iter().map(|(u, t)| (u.as_str(), *t)).collect()
            }
            let (from, to) = (status(&borrow(&from)), status(&borrow(&to)));
            let ops = status_ops("7", Some(&from), &to);
            prop_assert_eq!(&patched(Some(&from), &ops).unwrap()["status"], &to);
        }
    }
}
