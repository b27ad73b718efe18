//! Per-object decoding: one object the controller cannot read never stops a list or a watch.
//!
//! ```text
//!   LIST / WATCH ──▶ Decoded<K> per object ──┬─ Readable(K) ──▶ reflector, controller
//!                                            ├─ Salvaged(K, why) ──▶ reported; kept, unreadable
//!                                            └─ Undecodable{metadata, error} ──▶ reported, skipped
//!                                               (a delete: by key, from its metadata)
//! ```
//!
//! Rules enforced here:
//! - decoding is per object: a list whose items include one the types cannot hold (an int32
//!   overflow an old API server let in, a field an older schema allowed) still yields every other
//!   item, and the watch goes on;
//! - what cannot be decoded is reported once per resourceVersion (error log naming the object and
//!   the field, the `tenant_placer_undecodable_objects_total` metric, a Warning Event on the
//!   object);
//! - unreadable never means gone: a kind that can be kept present while unreadable is
//!   ([`Lenient::salvage`]: a Node, with the UIDs its allocations name, so its reservations are
//!   neither released nor placed again elsewhere); otherwise the object is skipped and the cache
//!   keeps the last version it could read, so a reservation is neither dropped nor changed
//!   because of an unreadable edit;
//! - deletes are handled by key, whatever the body: the delete of an object the types cannot hold
//!   still reaches the caches as its metadata names it ([`Lenient::gone`]), and so does a Tenant
//!   being deleted (its finalizer is released by key);
//! - each object is decoded from its own JSON text (a scan takes it whole, then the type is read
//!   from it), never through a `serde_json::Value` tree: a watch line must name its `type`
//!   before its `object`, as the API server writes it.

use std::borrow::Cow;
use std::collections::HashSet;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;
use serde::de::{Deserialize, DeserializeOwned, Deserializer};
use serde_json::value::RawValue;

use crate::api::{Node, NodeClass, NodeRequest, Tenant};

/// One object of a list or watch: readable as `K`, or not (with what made it unreadable).
#[derive(Clone, Debug)]
pub enum Decoded<K> {
    Readable(K),
    /// Unreadable, but kept present as far as it could be read ([`Lenient::salvage`]).
    Salvaged(K, Box<Undecodable>),
    Undecodable(Box<Undecodable>),
}

/// What a watch makes of an object of this kind that the types cannot hold.
pub trait Lenient: Sized {
    /// The object as far as its `json` can be read, kept present while it stays unreadable;
    /// `None` (the default) skips it, and the cache keeps its last readable version.
    fn salvage(_json: &str, _bad: &Undecodable) -> Option<Self> {
        None
    }

    /// A body for the delete of an object the types cannot hold, from its metadata alone (a
    /// delete is handled by key); `None` (the default) drops the event.
    fn gone(_metadata: &ObjectMeta) -> Option<Self> {
        None
    }
}

impl Lenient for Node {
    fn salvage(json: &str, bad: &Undecodable) -> Option<Node> {
        bad.metadata.name.as_ref()?;
        Some(Node::unreadable(
            bad.metadata.clone(),
            json,
            bad.error.clone(),
        ))
    }
}

impl Lenient for Tenant {
    /// Only a tenant being deleted: its reservation is released by its UID and its finalizer
    /// by its name. Any other edit leaves the last readable version in the cache.
    fn salvage(json: &str, bad: &Undecodable) -> Option<Tenant> {
        bad.metadata.deletion_timestamp.as_ref()?;
        bad.metadata.name.as_ref()?;
        Some(Tenant::unreadable(bad.metadata.clone(), json))
    }

    fn gone(metadata: &ObjectMeta) -> Option<Tenant> {
        metadata.name.as_ref()?;
        Some(Tenant::unreadable(metadata.clone(), "{}"))
    }
}

/// A core Node the types cannot read (registration) is skipped: the cache keeps its last
/// readable version, so its placement Node is left as it is; its delete removes it by name.
impl Lenient for k8s_openapi::api::core::v1::Node {
    fn gone(metadata: &ObjectMeta) -> Option<Self> {
        metadata.name.as_ref()?;
        Some(k8s_openapi::api::core::v1::Node {
            metadata: metadata.clone(),
            ..Default::default()
        })
    }
}

/// A class or request the types cannot read is skipped (the cache keeps its last readable
/// version); its delete still removes it by name, from a body of its metadata alone.
impl Lenient for NodeClass {
    fn gone(metadata: &ObjectMeta) -> Option<NodeClass> {
        metadata.name.as_ref()?;
        let spec = crate::api::NodeClassSpec {
            capacity: crate::api::ResourceAmounts::default(),
            provider: String::new(),
            monthly_cost: None,
            limit: None,
            labels: Default::default(),
            cluster_api: None,
        };
        Some(NodeClass {
            metadata: metadata.clone(),
            spec,
            status: None,
        })
    }
}

impl Lenient for NodeRequest {
    fn gone(metadata: &ObjectMeta) -> Option<NodeRequest> {
        metadata.name.as_ref()?;
        let spec = crate::api::NodeRequestSpec {
            node_class: String::new(),
            capacity: crate::api::ResourceAmounts::default(),
            tenants: Vec::new(),
        };
        Some(NodeRequest {
            metadata: metadata.clone(),
            spec,
            status: None,
        })
    }
}

/// An object the types cannot hold: its metadata (to name it) and the failing field.
#[derive(Clone, Debug, PartialEq)]
pub struct Undecodable {
    pub metadata: ObjectMeta,
    /// `spec.replicas: invalid value: integer `2147483648`, expected i32`
    pub error: String,
}

impl<'de, K: DeserializeOwned + Lenient> Deserialize<'de> for Decoded<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // NB: the object's JSON text is taken whole first, so that a failure inside K leaves the
        // rest of the list (and this object's metadata) readable. Taking the text is a scan, not
        // a tree of values: through a `serde_json::Value`, a Node of 64 entries took 2.4 times as
        // long (benches/decode.rs). serde_json hands the text over wherever it reads the object
        // directly: list items, `serde_json::Value`s, and watch lines whose `type` comes before
        // their `object`, as the API server writes them (Go's `WatchEvent` declares `Type`
        // first); an `object` before its `type` would be buffered by serde and refused here.
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        let trimmed = without_managed_fields(raw.get());
        let json = trimmed.as_deref().unwrap_or(raw.get());
        // The usual case is read without tracking the path (a String per field); only a
        // failure is read again to name the failing field.
        if let Ok(object) = serde_json::from_str::<K>(json) {
            return Ok(Decoded::Readable(object));
        }
        let mut reader = serde_json::Deserializer::from_str(json);
        match serde_path_to_error::deserialize::<_, K>(&mut reader) {
            Ok(object) => Ok(Decoded::Readable(object)),
            Err(failure) => {
                let bad = Box::new(Undecodable {
                    metadata: metadata_of(json),
                    error: format!("{}: {}", failure.path(), failure.inner()),
                });
                Ok(match K::salvage(json, &bad) {
                    Some(kept) => Decoded::Salvaged(kept, bad),
                    None => Decoded::Undecodable(bad),
                })
            }
        }
    }
}

/// The members of a JSON object, each value as its text, borrowed from the object's text.
struct Members<'a>(Vec<(&'a str, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// `members` written back as a JSON object, but for `skip`; `value_of` may replace a value.
fn write_members<'a>(
    out: &mut String,
    members: &[(&'a str, &'a RawValue)],
    skip: &str,
    mut value_of: impl FnMut(&str, &'a RawValue) -> Option<String>,
) -> Option<()> {
    out.push('{');
    let mut first = true;
    for (key, value) in members.iter().filter(|(key, _)| *key != skip) {
        if !first {
            out.push(',');
        }
        first = false;
        // A borrowed key had no escapes in the text: it is written back as it was.
        out.push('"');
        out.push_str(key);
        out.push_str("\":");
        match value_of(key, value) {
            Some(replaced) => out.push_str(&replaced),
            None => out.push_str(value.get()),
        }
    }
    out.push('}');
    Some(())
}

/// The object's text without `metadata.managedFields`, which the controller never reads (`None`
/// when it has none, or the text is not as expected: then it is decoded as it is).
///
/// A server-side applied object's managedFields name every field it has, each a map of maps:
/// decoded, they were most of the allocations of a list page or a watch event, all freed again
/// by `strip`. Cutting them out of the text is two scans and a copy, without them.
pub(crate) fn without_managed_fields(json: &str) -> Option<String> {
    const MANAGED: &str = "managedFields";
    if !json.contains(MANAGED) {
        return None;
    }
    let top: Members<'_> = serde_json::from_str(json).ok()?;
    let mut out = String::with_capacity(json.len());
    let mut cut = false;
    write_members(&mut out, &top.0, "", |key, value| {
        if key != "metadata" {
            return None;
        }
        let meta: Members<'_> = serde_json::from_str(value.get()).ok()?;
        let mut trimmed = String::with_capacity(value.get().len());
        write_members(&mut trimmed, &meta.0, MANAGED, |_, _| None)?;
        cut = meta.0.iter().any(|(k, _)| *k == MANAGED);
        Some(trimmed)
    })?;
    cut.then_some(out)
}

/// The metadata of an object the types cannot hold, as far as it can be read (to name it).
fn metadata_of(json: &str) -> ObjectMeta {
    #[derive(serde::Deserialize)]
    struct Named {
        metadata: ObjectMeta,
    }
    serde_json::from_str::<Named>(json)
        .map(|named| named.metadata)
        .unwrap_or_default()
}

impl<K: Resource<DynamicType = ()>> Resource for Decoded<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Decoded::Readable(object) | Decoded::Salvaged(object, _) => object.meta(),
            Decoded::Undecodable(bad) => &bad.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Decoded::Readable(object) | Decoded::Salvaged(object, _) => object.meta_mut(),
            Decoded::Undecodable(bad) => &mut bad.metadata,
        }
    }
}

/// The readable part of a watch event: what cannot be decoded is handed to `skipped`, and the
/// event keeps what was salvaged of it; a delete whose body cannot be read is kept by its key.
pub fn readable<K: Lenient>(
    event: watcher::Event<Decoded<K>>,
    skipped: &mut impl FnMut(Box<Undecodable>),
) -> Option<watcher::Event<K>> {
    let mut keep = |decoded: Decoded<K>, deleted: bool| match decoded {
        Decoded::Readable(object) => Some(object),
        Decoded::Salvaged(object, bad) => {
            skipped(bad);
            Some(object)
        }
        Decoded::Undecodable(bad) => {
            let gone = if deleted {
                K::gone(&bad.metadata)
            } else {
                None
            };
            skipped(bad);
            gone
        }
    };
    match event {
        watcher::Event::Apply(d) => keep(d, false).map(watcher::Event::Apply),
        watcher::Event::Delete(d) => keep(d, true).map(watcher::Event::Delete),
        watcher::Event::InitApply(d) => keep(d, false).map(watcher::Event::InitApply),
        watcher::Event::Init => Some(watcher::Event::Init),
        watcher::Event::InitDone => Some(watcher::Event::InitDone),
    }
}

/// An object skipped because it could not be decoded, as it is reported.
#[derive(Clone, Debug, PartialEq)]
pub struct Skipped {
    /// The object (kind, name, namespace, uid, resourceVersion), for logs and its Event.
    pub object: ObjectReference,
    pub error: String,
}

impl Skipped {
    /// Names a `K` that could not be decoded.
    pub fn of<K: Resource<DynamicType = ()>>(bad: Box<Undecodable>) -> Skipped {
        let Undecodable { metadata, error } = *bad;
        Skipped {
            object: ObjectReference {
                api_version: Some(K::api_version(&()).into_owned()),
                kind: Some(K::kind(&()).into_owned()),
                name: metadata.name,
                namespace: metadata.namespace,
                uid: metadata.uid,
                resource_version: metadata.resource_version,
                ..ObjectReference::default()
            },
            error,
        }
    }

    /// `Tenant default/big` or `Node node-eu-1`.
    pub fn describe(&self) -> String {
        let o = &self.object;
        let name = match &o.namespace {
            Some(namespace) => format!("{namespace}/{}", o.name.as_deref().unwrap_or_default()),
            None => o.name.clone().unwrap_or_default(),
        };
        format!("{} {name}", o.kind.as_deref().unwrap_or_default())
    }
}

/// Remembers which versions were reported, so a relist or a repeated event reports nothing twice.
#[derive(Debug, Default)]
pub struct Reported(HashSet<(Option<String>, Option<String>)>);

impl Reported {
    /// True the first time this object version is seen.
    pub fn first_time(&mut self, skipped: &Skipped) -> bool {
        self.0.insert((
            skipped.object.uid.clone(),
            skipped.object.resource_version.clone(),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::api::TenantMode;
    use crate::testing;
    use kube::core::ObjectList;
    use serde_json::json;

    /// A Cluster tenant as the API serves it, with `replicas` as given (maybe past what the
    /// types hold).
    fn tenant(name: &str, replicas: serde_json::Value) -> serde_json::Value {
        let tenant = testing::tenant(name)
            .resources(1, 1, 0)
            .mode(TenantMode::Cluster);
        let mut json = serde_json::to_value(tenant.resource_version(7).build()).unwrap();
        json["spec"]["replicas"] = replicas;
        json
    }

    #[test]
    fn a_list_with_one_undecodable_tenant_yields_every_other_tenant() {
        let list = json!({
            "apiVersion": "placement.tenant-placer.dev/v1alpha1", "kind": "TenantList",
            "metadata": {"resourceVersion": "9"},
            "items": [tenant("a", json!(2)), tenant("bad", json!(2_147_483_648_i64)), tenant("c", json!(3))]
        });
        let list: ObjectList<Decoded<Tenant>> =
            serde_json::from_str(&list.to_string()).expect("the list itself always decodes");
        let names: Vec<String> = list
            .items
            .iter()
            .filter_map(|d| match d {
                Decoded::Readable(t) => t.metadata.name.clone(),
                Decoded::Salvaged(..) | Decoded::Undecodable(_) => None,
            })
            .collect();
        assert_eq!(names, ["a", "c"]);
        let Decoded::Undecodable(bad) = &list.items[1] else {
            panic!("the int32 overflow is undecodable")
        };
        assert_eq!(bad.metadata.name.as_deref(), Some("bad"));
        assert!(
            bad.error.starts_with("spec.replicas: "),
            "names the field: {}",
            bad.error
        );
    }

    #[test]
    fn watch_lines_decode_one_object_at_a_time_as_the_api_server_orders_them() {
        use kube::core::WatchEvent;
        // `type` before `object`, as the API server (and the in-memory API) writes a line.
        let line = |kind: &str, object: serde_json::Value| {
            format!(r#"{{"type":"{kind}","object":{object}}}"#)
        };
        let decode = |text: &str| {
            serde_json::from_str::<WatchEvent<Decoded<Tenant>>>(text)
                .expect("a line always decodes")
        };
        let WatchEvent::Added(Decoded::Readable(a)) = decode(&line("ADDED", tenant("a", json!(2))))
        else {
            panic!("a readable tenant")
        };
        assert_eq!(a.metadata.name.as_deref(), Some("a"));
        assert_eq!(a.spec.replicas, Some(2));
        let WatchEvent::Modified(Decoded::Undecodable(bad)) =
            decode(&line("MODIFIED", tenant("bad", json!(2_147_483_648_i64))))
        else {
            panic!("an undecodable tenant, named")
        };
        assert_eq!(bad.metadata.name.as_deref(), Some("bad"));
        assert_eq!(bad.metadata.resource_version.as_deref(), Some("7"));
        assert!(bad.error.starts_with("spec.replicas: "), "{}", bad.error);
        // An object whose metadata cannot be read either is still reported, unnamed.
        let WatchEvent::Added(Decoded::Undecodable(unnamed)) =
            decode(&line("ADDED", json!({"metadata": {"name": 7}, "spec": {}})))
        else {
            panic!("undecodable")
        };
        assert_eq!(unnamed.metadata, ObjectMeta::default());
        assert!(
            unnamed.error.starts_with("metadata.name: "),
            "{}",
            unnamed.error
        );
    }

    #[test]
    fn an_undecodable_version_is_reported_once_and_its_event_dropped() {
        let bad: Decoded<Tenant> =
            serde_json::from_value(tenant("bad", json!("two"))).expect("decodes as Undecodable");
        let mut reported = Reported::default();
        let mut seen = Vec::new();
        for _ in 0..2 {
            let event = readable(watcher::Event::Apply(bad.clone()), &mut |b| {
                let skipped = Skipped::of::<Tenant>(b);
                if reported.first_time(&skipped) {
                    seen.push(skipped);
                }
            });
            assert!(event.is_none());
        }
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].describe(), "Tenant default/bad");
        assert!(
            seen[0].error.starts_with("spec.replicas: "),
            "{}",
            seen[0].error
        );
        let good: Decoded<Tenant> = serde_json::from_value(tenant("a", json!(2))).unwrap();
        assert!(matches!(
            readable(watcher::Event::Apply(good), &mut |_| panic!("readable")),
            Some(watcher::Event::Apply(t)) if t.metadata.name.as_deref() == Some("a")
        ));
    }

    #[test]
    fn a_node_the_types_cannot_hold_is_kept_present_with_the_uids_it_holds_and_no_ledger() {
        let node = testing::node("n1")
            .capacity(8, 8, 8)
            .holding("acme", (2, 1, 1))
            .settled()
            .build();
        let mut json = serde_json::to_value(node).unwrap();
        json["spec"]["capacity"]["threads"] = json!("8");
        json["status"]["allocations"][0]["resources"]["memoryGb"] = json!("one");
        let event = watcher::Event::Apply(serde_json::from_value::<Decoded<Node>>(json).unwrap());
        let mut skipped = Vec::new();
        let Some(watcher::Event::Apply(kept)) = readable(event, &mut |bad| skipped.push(bad))
        else {
            panic!("kept, not dropped")
        };
        assert_eq!(kept.metadata.name.as_deref(), Some("n1"));
        let uids: Vec<&str> = kept.allocations().iter().map(|a| &*a.uid).collect();
        assert_eq!(
            uids,
            ["uid-acme"],
            "its entry is seen, so acme is placed nowhere else"
        );
        let why = kept.ledger().unwrap_err();
        assert!(why.starts_with("spec.capacity.threads: "), "{why}");
        assert_eq!(skipped.len(), 1, "and reported");
    }

    #[test]
    fn the_delete_of_a_tenant_the_types_cannot_hold_keeps_its_key_and_uid() {
        let bad: Decoded<Tenant> =
            serde_json::from_value(tenant("bad", json!("two"))).expect("decodes as Undecodable");
        let gone = readable(watcher::Event::Delete(bad.clone()), &mut |_| {});
        let Some(watcher::Event::Delete(gone)) = gone else {
            panic!("a delete is kept by its key")
        };
        assert_eq!(gone.key(), "default/bad");
        assert_eq!(gone.metadata.uid, bad.meta().uid);
        // Any other edit is skipped: the cache keeps the last readable version.
        assert!(readable(watcher::Event::Apply(bad), &mut |_| {}).is_none());
    }

    #[test]
    fn the_delete_of_a_class_or_request_the_types_cannot_hold_removes_it_by_name() {
        use kube::ResourceExt;
        let class: Decoded<NodeClass> = serde_json::from_value(json!({
            "apiVersion": "placement.tenant-placer.dev/v1alpha1", "kind": "NodeClass",
            "metadata": {"name": "box", "uid": "c-1"},
            "spec": {"capacity": {"threads": "many", "memoryGb": 1, "storageGb": 1},
                     "provider": "lab"}
        }))
        .expect("decodes as Undecodable");
        assert!(matches!(class, Decoded::Undecodable(_)));
        let Some(watcher::Event::Delete(gone)) =
            readable(watcher::Event::Delete(class.clone()), &mut |_| {})
        else {
            panic!("a class delete is kept by its name")
        };
        assert_eq!(gone.name_any(), "box");
        assert!(readable(watcher::Event::Apply(class), &mut |_| {}).is_none());
        let request: Decoded<NodeRequest> = serde_json::from_value(json!({
            "apiVersion": "placement.tenant-placer.dev/v1alpha1", "kind": "NodeRequest",
            "metadata": {"name": "box-1", "uid": "r-1"},
            "spec": {"nodeClass": "box", "capacity": {"threads": 1, "memoryGb": 1, "storageGb": 1},
                     "tenants": "not-a-list"}
        }))
        .expect("decodes as Undecodable");
        let Some(watcher::Event::Delete(gone)) =
            readable(watcher::Event::Delete(request.clone()), &mut |_| {})
        else {
            panic!("a request delete is kept by its name")
        };
        assert_eq!(
            (gone.name_any(), gone.metadata.uid),
            ("box-1".into(), Some("r-1".into()))
        );
        assert!(readable(watcher::Event::Apply(request), &mut |_| {}).is_none());
    }

    #[test]
    fn managed_fields_are_cut_from_the_text_and_everything_else_decodes_as_before() {
        let plain = tenant("acme", json!(1));
        let mut applied = plain.clone();
        applied["metadata"]["managedFields"] = json!([{
            "apiVersion": "placement.tenant-placer.dev/v1alpha1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {".": {}, "f:resources": {".": {}, "f:threads": {}}}},
            "manager": "kubectl", "operation": "Apply", "time": "2026-12-03T10:00:00Z",
        }]);
        let text = serde_json::to_string(&applied).unwrap();
        let cut = without_managed_fields(&text).expect("cut");
        assert!(!cut.contains("managedFields"), "{cut}");
        let as_cut: serde_json::Value = serde_json::from_str(&cut).unwrap();
        assert_eq!(as_cut, plain);
        let decoded: Decoded<Tenant> = serde_json::from_str(&text).unwrap();
        let Decoded::Readable(decoded) = decoded else {
            panic!("readable")
        };
        assert_eq!(decoded.metadata.managed_fields, None);
        // Told back as JSON, the object decoded as it would have been without them.
        let plain_tenant: Tenant = serde_json::from_value(plain.clone()).unwrap();
        assert_eq!(
            serde_json::to_value(&decoded).unwrap(),
            serde_json::to_value(&plain_tenant).unwrap()
        );
        // Nothing to cut: decoded from the text as it is.
        assert_eq!(without_managed_fields(&plain.to_string()), None);
        let mut named = plain;
        named["metadata"]["labels"] = json!({"managedFields": "a label, not metadata's"});
        assert_eq!(without_managed_fields(&named.to_string()), None);
    }
}
