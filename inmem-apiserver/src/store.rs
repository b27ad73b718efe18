//! The state behind the server: objects, the resourceVersion counter, the
//! per-resource event history, open watches, and the create/update/delete
//! pipelines of the generic registry store.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::events;
use crate::faults::{ByteCounts, Fault, Stats};
use crate::kinds::{CRD_GROUP, CRD_PLURAL, Kind, StatusWrite, established_crd_status};
use crate::meta;
use crate::node;
use crate::rules;
use crate::scale::{self, ScalePaths, ScaleWrite};
use crate::schema;
use crate::selector::Selector;
use crate::status::{BadValue, FieldError, FieldErrorKind, Status, go_quote};
use crate::table::Render;

/// (group, resource): one kind's objects, history and watches.
pub(crate) type ResKey = (String, String);
/// (namespace, name), namespace empty for cluster-scoped kinds.
pub(crate) use crate::managed::Writer;

pub(crate) type ObjKey = (String, String);
/// All objects, as stored (at their kind's storage version), in key order.
/// `events.k8s.io` `events` are stored with the core ones (see [`events`]).
/// An object is shared by the store, the history and the answers that serve it as stored: a
/// write replaces it, nothing changes it in place.
pub(crate) type Objects = BTreeMap<ResKey, BTreeMap<ObjKey, Arc<Value>>>;

/// A function called for every committed write; see [`crate::ApiServer::on_commit`].
pub type CommitHook = Arc<dyn Fn(&CommitEvent<'_>) + Send + Sync>;

/// Tunables of the server.
#[derive(Debug, Clone)]
pub struct Config {
    /// Events kept per resource for watches resuming from a resourceVersion;
    /// an older resourceVersion gets `410 Expired`.
    pub history_size: usize,
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK
    /// (the apiserver's cacher sends one about every minute).
    pub bookmark_interval: Duration,
    /// Whether writes record `metadata.managedFields` (see [`crate::managed`]); off by default.
    pub managed_fields: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            history_size: 10_000,
            bookmark_interval: Duration::from_secs(60),
            managed_fields: false,
        }
    }
}

/// What a committed write did, as a watch reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// A create.
    Added,
    /// An update, or the start of a deletion held by finalizers.
    Modified,
    /// A removal.
    Deleted,
}

impl EventType {
    fn wire(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed write, handed to the commit hooks while the store is locked
/// (so hooks must not call back into the server). `object` is the state after
/// the write (for a delete, the last state); everything is at the storage
/// version (writes of `events.k8s.io` events are core `events` writes).
#[derive(Debug)]
pub struct CommitEvent<'a> {
    /// What happened.
    pub event: EventType,
    /// The API group, empty for core.
    pub group: &'a str,
    /// The resource (plural).
    pub resource: &'a str,
    /// The namespace, empty for cluster-scoped kinds.
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The resourceVersion of this write.
    pub resource_version: u64,
    /// The object after the write.
    pub object: &'a Value,
    /// The object before the write (None for a create).
    pub old: Option<&'a Value>,
    objects: &'a Objects,
}

impl<'a> CommitEvent<'a> {
    /// Every object of a resource after this write, in (namespace, name) order.
    pub fn list(&self, group: &str, resource: &str) -> Vec<&'a Value> {
        self.objects
            .get(&(group.to_owned(), resource.to_owned()))
            .map(|m| m.values().map(|o| &**o).collect())
            .unwrap_or_default()
    }

    /// One object after this write.
    pub fn get(
        &self,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<&'a Value> {
        self.objects
            .get(&(group.to_owned(), resource.to_owned()))?
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|o| &**o)
    }
}

struct HistoryEvent {
    rv: u64,
    kind: EventType,
    object: Arc<Value>,
    old: Option<Arc<Value>>,
}

/// The events of one resource kept for resuming watches. A watch from `rv`
/// is served iff `rv >= floor`: the events after `floor` are all retained.
#[derive(Default)]
struct History {
    events: VecDeque<Arc<HistoryEvent>>,
    floor: u64,
}

struct Watcher {
    id: u64,
    res: ResKey,
    /// The (group, resource) watched, which the objects are served as.
    asked: ResKey,
    namespace: Option<String>,
    selector: Selector,
    api_version: String,
    kind: String,
    render: Render,
    tx: mpsc::UnboundedSender<Bytes>,
}

impl Watcher {
    fn sees(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| meta::namespace(obj) == ns)
            && self.selector.matches(obj)
    }

    /// The line this watcher gets for an event, if any. Crossing the selector
    /// turns a MODIFIED into an ADDED, or into a DELETED of the previous state
    /// at the event's resourceVersion, as the cacher does.
    fn line(&self, ev: &HistoryEvent) -> Option<Bytes> {
        let (ty, obj) = match ev.kind {
            EventType::Modified => match (
                ev.old.as_ref().filter(|o| self.sees(o)),
                self.sees(&ev.object),
            ) {
                (Some(_), true) => (EventType::Modified, Cow::Borrowed(&*ev.object)),
                (None, true) => (EventType::Added, Cow::Borrowed(&*ev.object)),
                (Some(old), false) => {
                    let mut old = Value::clone(old);
                    meta::set(&mut old, "resourceVersion", ev.rv.to_string());
                    (EventType::Deleted, Cow::Owned(old))
                }
                (None, false) => return None,
            },
            kind => (
                kind,
                self.sees(&ev.object)
                    .then_some(Cow::Borrowed(&*ev.object))?,
            ),
        };
        let served = served_from(&self.asked, obj, &self.api_version);
        if matches!(self.render, Render::Object) {
            return Some(event_line(ty.wire(), &served));
        }
        Some(event_line(ty.wire(), &self.render.one(served.into_owned())))
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        event_line(
            "BOOKMARK",
            &json!({"kind": self.kind, "apiVersion": self.api_version, "metadata": metadata}),
        )
    }
}

/// The length of `value` as compact JSON, without writing it anywhere.
pub(crate) fn json_len(value: &Value) -> u64 {
    /// Counts what is written to it.
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self
                .0
                .saturating_add(u64::try_from(buf.len()).unwrap_or(u64::MAX));
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

pub(crate) fn event_line(ty: &str, object: &Value) -> Bytes {
    /// `{"type": …, "object": …}`: the apiserver's field order (`pkg/watch/json`'s
    /// `WatchEvent`), which lets a client learn the type before it decodes the object. Written
    /// from the object itself, not a copy.
    #[derive(serde::Serialize)]
    struct Line<'a> {
        #[serde(rename = "type")]
        ty: &'a str,
        object: &'a Value,
    }
    let mut line = serde_json::to_vec(&Line { ty, object }).unwrap_or_default();
    line.push(b'\n');
    line.into()
}

/// A stored object as (group, resource) serves it at `api_version`: the object itself when it
/// is served as stored (at its stored apiVersion, not as an `events.k8s.io` Event), so that
/// an answer or a watch line is written from it and not from a copy.
fn served_from<'v>(asked: &ResKey, obj: Cow<'v, Value>, api_version: &str) -> Cow<'v, Value> {
    let as_stored = !events::is_events_v1(&asked.0, &asked.1)
        && obj.get("apiVersion").and_then(Value::as_str) == Some(api_version);
    if as_stored {
        obj
    } else {
        Cow::Owned(serve_as(asked, obj.into_owned(), api_version))
    }
}

/// A stored object as (group, resource) serves it at `api_version`.
pub(crate) fn serve_as(asked: &ResKey, obj: Value, api_version: &str) -> Value {
    if events::is_events_v1(&asked.0, &asked.1) {
        events::to_events_v1(obj)
    } else {
        with_api_version(obj, api_version)
    }
}

fn with_api_version(mut obj: Value, api_version: &str) -> Value {
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), api_version.into());
    }
    obj
}

/// The kind, version, namespace and subresource a request addresses.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub kind: Arc<Kind>,
    pub version: String,
    /// The namespace of the URL; None for cluster-scoped kinds and for lists
    /// across all namespaces.
    pub namespace: Option<String>,
    pub subresource: Option<String>,
}

impl Target {
    /// The key its objects, history and watches are stored under.
    fn res(&self) -> ResKey {
        events::storage_key(&self.kind.group, &self.kind.plural)
    }

    fn is_events_v1(&self) -> bool {
        events::is_events_v1(&self.kind.group, &self.kind.plural)
    }

    fn key(&self, name: &str) -> ObjKey {
        (self.namespace.clone().unwrap_or_default(), name.to_owned())
    }

    /// A stored object as served at the requested version.
    pub fn served(&self, obj: &Value) -> Value {
        self.served_ref(obj).into_owned()
    }

    /// A stored object as served at the requested version: itself when it is served as stored.
    fn served_ref<'v>(&self, obj: &'v Value) -> Cow<'v, Value> {
        served_from(
            &(self.kind.group.clone(), self.kind.plural.clone()),
            Cow::Borrowed(obj),
            &self.kind.api_version(&self.version),
        )
    }

    /// A stored object as served at the requested version, shared when it is served as stored.
    pub fn served_shared(&self, obj: &Arc<Value>) -> Arc<Value> {
        match self.served_ref(obj) {
            Cow::Borrowed(_) => Arc::clone(obj),
            Cow::Owned(converted) => Arc::new(converted),
        }
    }

    fn schema(&self) -> Option<&Value> {
        self.kind
            .version(&self.version)
            .and_then(|v| v.schema.as_ref())
    }

    fn rules(&self) -> Option<&rules::RuleTree> {
        self.kind
            .version(&self.version)
            .and_then(|v| v.rules.as_ref())
    }

    pub fn status_enabled(&self) -> bool {
        self.kind.version(&self.version).is_some_and(|v| v.status)
    }

    /// The scale subresource of the requested version, when it has one.
    pub fn scale(&self) -> Option<&ScalePaths> {
        self.kind
            .version(&self.version)
            .and_then(|v| v.scale.as_ref())
    }

    fn on_status(&self) -> bool {
        self.subresource.as_deref() == Some("status")
    }

    pub fn on_scale(&self) -> bool {
        self.subresource.as_deref() == Some("scale")
    }

    /// The kind and version a request body is decoded as: the kind's, or `autoscaling/v1`
    /// `Scale` for `/scale`.
    pub fn body_kind(&self) -> (&str, &str) {
        if self.on_scale() {
            ("Scale", "v1")
        } else {
            (&self.kind.kind, &self.version)
        }
    }

    fn is_crd(&self) -> bool {
        self.kind.group == CRD_GROUP && self.kind.plural == CRD_PLURAL
    }

    /// The fields of a written object that decoding would drop: unknown
    /// `metadata` keys, and (custom kinds) what the schema does not know.
    pub fn unknown_fields(&self, obj: &Value) -> Vec<String> {
        if self.on_scale() {
            return scale::unknown_fields(obj);
        }
        let mut unknown: Vec<String> = meta::unknown_keys(obj)
            .into_iter()
            .map(|k| format!("metadata.{k}"))
            .collect();
        if let Some(schema) = self.schema() {
            unknown.extend(schema::unknown_fields(schema, obj));
        }
        if self.res() == events::storage_key(events::GROUP, "events") {
            unknown.extend(events::foreign_fields(obj, self.is_events_v1()));
        }
        unknown
    }

    fn invalid(&self, name: &str, errors: &[FieldError]) -> Status {
        Status::invalid(&self.kind.group, &self.kind.kind, name, errors)
    }
}

/// The query parameters of a request (the last value of each).
#[derive(Debug, Clone, Default)]
pub(crate) struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(query: Option<&str>) -> Self {
        Self(
            form_urlencoded::parse(query.unwrap_or_default().as_bytes())
                .into_owned()
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    pub fn is_true(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }

    pub fn dry_run(&self) -> bool {
        self.get("dryRun") == Some("All")
    }
}

/// How a watch starts: at once with `410`, or as a stream.
pub(crate) enum WatchStart {
    Gone(Status),
    Stream {
        id: u64,
        rx: mpsc::UnboundedReceiver<Bytes>,
        bookmarks: bool,
        timeout: Option<Duration>,
    },
}

/// How an update is asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UpdateMode {
    /// A PUT: `metadata.resourceVersion` is required unless the kind allows
    /// unconditional updates. (A patch is applied to the current object, so
    /// it carries the current resourceVersion unless it sets one.)
    pub put: bool,
    /// Create the object when it is missing (create-on-update, apply).
    pub create_if_missing: bool,
    pub dry_run: bool,
}

fn bad_list_options(field: &str, detail: &str) -> Status {
    Status::invalid(
        "meta.k8s.io",
        "ListOptions",
        "",
        &[FieldError::forbidden(field, detail)],
    )
}

fn parse_rv(rv: &str) -> Result<u64, Status> {
    rv.parse()
        .map_err(|_| Status::bad_request(format!("invalid resource version: {rv}")))
}

/// Continue tokens: the list's resourceVersion and the last key returned,
/// hex-encoded so that clients treat them as opaque.
fn encode_continue(rv: u64, key: &ObjKey) -> String {
    format!("{rv}/{}/{}", key.0, key.1)
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_continue(token: &str) -> Option<(u64, ObjKey)> {
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i.checked_add(2)?)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let mut parts = text.splitn(3, '/');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, (parts.next()?.to_owned(), parts.next()?.to_owned())))
}

pub(crate) struct State {
    pub rv: u64,
    /// Watches from below this resourceVersion are expired (compaction).
    compacted: u64,
    pub kinds: BTreeMap<ResKey, Arc<Kind>>,
    pub objects: Objects,
    histories: HashMap<ResKey, History>,
    watchers: Vec<Watcher>,
    next_watcher: u64,
    pub hooks: Vec<CommitHook>,
    pub hook_failures: Vec<String>,
    pub stats: Stats,
    pub faults: Vec<Fault>,
    pub config: Config,
    /// The warnings of the write being served (ratcheted validation rules),
    /// for its `Warning` headers.
    pub warnings: Vec<String>,
    /// Mutating admission on create: (group, plural, finalizer) added when missing.
    pub finalizers_on_create: Vec<(String, String, String)>,
    /// The manager of the write being served, for its managedFields entry.
    pub writer: Option<Writer>,
    /// The bytes the commits of the write request being served handled (stored objects,
    /// watch lines); `None` outside a write request, so direct writes count none.
    pub served_bytes: Option<ByteCounts>,
}

/// The state behind a lock shared by the server handles and open watches.
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Write slots of the cost model; outside the state lock, so waiting writes hold no lock.
    pub schedule: crate::cost::WriteSchedule,
}

impl Shared {
    pub fn new(config: Config) -> Self {
        let kinds = Kind::builtins()
            .into_iter()
            .map(|k| ((k.group.clone(), k.plural.clone()), Arc::new(k)))
            .collect();
        Self {
            state: Mutex::new(State {
                rv: 0,
                compacted: 0,
                kinds,
                objects: Objects::new(),
                histories: HashMap::new(),
                watchers: Vec::new(),
                next_watcher: 0,
                hooks: Vec::new(),
                hook_failures: Vec::new(),
                stats: Stats::default(),
                faults: Vec::new(),
                config,
                warnings: Vec::new(),
                finalizers_on_create: Vec::new(),
                writer: None,
                served_bytes: None,
            }),
            schedule: crate::cost::WriteSchedule::default(),
        }
    }

    /// The state; a panic in a commit hook does not poison it for good.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    fn object(&self, t: &Target, name: &str) -> Option<&Arc<Value>> {
        self.objects.get(&t.res())?.get(&t.key(name))
    }

    /// The stored size of an object (0 when missing), as [`ByteCounts`] counts it.
    pub fn stored_len(&self, t: &Target, name: &str) -> u64 {
        self.object(t, name).map_or(0, |o| json_len(o))
    }

    /// How many open watches watch `t`'s resource (any namespace or selector).
    pub fn watches_of(&self, t: &Target) -> u64 {
        let res = t.res();
        let n = self.watchers.iter().filter(|w| w.res == res).count();
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    pub fn get(&self, t: &Target, name: &str) -> Result<Value, Status> {
        if t.on_scale() {
            return self.get_scale(t, name);
        }
        self.object(t, name)
            .map(|o| t.served(o))
            .ok_or_else(|| Status::not_found(t.kind.gr(), name))
    }

    /// `ScaleREST.Get`: the Scale of an object, which must have spec replicas.
    fn get_scale(&self, t: &Target, name: &str) -> Result<Value, Status> {
        let not_found = || Status::not_found(t.kind.gr(), name);
        let paths = t.scale().ok_or_else(not_found)?;
        let obj = self.object(t, name).ok_or_else(not_found)?;
        let (scale, found) = scale::scale_of(obj, paths).map_err(Status::unknown)?;
        if !found {
            return Err(Status::internal(&format!(
                "the spec replicas field {} does not exist",
                go_quote(&paths.spec_replicas)
            )));
        }
        Ok(scale)
    }

    /// `ScaleREST.Update` (a PUT or PATCH of `/scale`): `write` gets the current Scale and
    /// answers the Scale to write; the object's spec replicas are set through the update of the
    /// object itself (its strategy, its validation, its watch event). `uid` is a PUT's
    /// precondition (empty for none). Answers the Scale of the object as written.
    pub fn update_scale(
        &mut self,
        t: &Target,
        name: &str,
        dry_run: bool,
        uid: &str,
        write: impl FnOnce(Value) -> Result<ScaleWrite, Status>,
    ) -> Result<Value, Status> {
        let not_found = || Status::not_found(t.kind.gr(), name);
        let paths = t.scale().cloned().ok_or_else(not_found)?;
        let current = self.object(t, name).ok_or_else(not_found)?;
        // The storage checks preconditions before it computes the update.
        let current_uid = meta::uid(current);
        if !uid.is_empty() && uid != current_uid {
            return Err(Status::conflict(
                t.kind.gr(),
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {current_uid}"
                ),
            ));
        }
        let object = Target {
            subresource: None,
            ..t.clone()
        };
        let mode = UpdateMode {
            put: false,
            create_if_missing: false,
            dry_run,
        };
        let (written, _) = self.update(&object, name, mode, |current| {
            let current = current.ok_or_else(not_found)?;
            let old = scale::current_scale(current, &paths).map_err(Status::unknown)?;
            scale::apply_to(current, &paths, &write(old)?)
        })?;
        let (scale, _) = scale::scale_of(&written, &paths).map_err(Status::bad_request)?;
        Ok(scale)
    }

    /// The objects a list or watch of `t` sees, in key order, after `after`.
    fn visible<'a>(
        &'a self,
        t: &'a Target,
        selector: &'a Selector,
        after: Option<&'a ObjKey>,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Value)> + 'a {
        self.objects
            .get(&t.res())
            .into_iter()
            .flatten()
            .map(|(k, o)| (k, &**o))
            .filter(move |(k, _)| {
                t.namespace.as_ref().is_none_or(|ns| *ns == k.0) && after.is_none_or(|a| *k > a)
            })
            .filter(move |(_, o)| selector.matches(o))
    }

    pub fn list(&self, t: &Target, q: &Query) -> Result<Value, Status> {
        let selector = Selector::parse_for(
            q.get("labelSelector"),
            q.get("fieldSelector"),
            &t.kind.field_labels,
            t.kind.namespaced,
        )?;
        let (rv, after) = match q.get("continue") {
            Some(token) => {
                let (rv, key) = decode_continue(token)
                    .ok_or_else(|| Status::bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
                (rv, Some(key))
            }
            None => (self.list_rv(q)?, None),
        };
        let limit = q
            .get("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|l| *l > 0)
            .unwrap_or(usize::MAX);
        let mut matching = self.visible(t, &selector, after.as_ref());
        let items: Vec<(&ObjKey, &Value)> = matching.by_ref().take(limit).collect();
        let remaining = matching.count();
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if let Some((last, _)) = items.last().filter(|_| remaining > 0) {
            metadata["continue"] = encode_continue(rv, last).into();
            if selector == Selector::default() {
                metadata["remainingItemCount"] = remaining.into();
            }
        }
        Ok(json!({
            "kind": t.kind.list_kind,
            "apiVersion": t.kind.api_version(&t.version),
            "metadata": metadata,
            "items": items.into_iter().map(|(_, o)| t.served(o)).collect::<Vec<_>>(),
        }))
    }

    /// The resourceVersion a list is served at: always the current one, which
    /// satisfies "any" and `NotOlderThan`; `Exact` of an older one is expired
    /// (no snapshots are kept).
    fn list_rv(&self, q: &Query) -> Result<u64, Status> {
        let matching = q.get("resourceVersionMatch");
        let Some(rv) = q.get("resourceVersion") else {
            return match matching {
                Some(_) => Err(bad_list_options(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )),
                None => Ok(self.rv),
            };
        };
        let wanted = parse_rv(rv)?;
        if wanted > self.rv {
            return Err(Status::timeout(format!(
                "Too large resource version: {wanted}, current: {}",
                self.rv
            )));
        }
        if matching == Some("Exact") && wanted < self.rv {
            return Err(Status::expired(format!(
                "too old resource version: {wanted} ({})",
                self.rv
            )));
        }
        Ok(self.rv)
    }

    pub fn watch(&mut self, t: &Target, q: &Query, render: Render) -> Result<WatchStart, Status> {
        let selector = Selector::parse_for(
            q.get("labelSelector"),
            q.get("fieldSelector"),
            &t.kind.field_labels,
            t.kind.namespaced,
        )?;
        let send_initial = q.get("sendInitialEvents").map(|v| v == "true");
        if send_initial.is_some() && q.get("resourceVersionMatch") != Some("NotOlderThan") {
            return Err(bad_list_options(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        let from = q
            .get("resourceVersion")
            .map(parse_rv)
            .transpose()?
            .unwrap_or(0);
        let bookmarks = q.is_true("allowWatchBookmarks");
        let id = self.next_watcher;
        self.next_watcher = id.wrapping_add(1);
        let (tx, rx) = mpsc::unbounded_channel();
        let watcher = Watcher {
            id,
            res: t.res(),
            asked: (t.kind.group.clone(), t.kind.plural.clone()),
            namespace: t.namespace.clone(),
            selector: selector.clone(),
            api_version: t.kind.api_version(&t.version),
            kind: t.kind.kind.clone(),
            render,
            tx,
        };
        // Everything below happens under the lock, so no write slips between
        // the replayed state and the live events.
        if from == 0 || send_initial == Some(true) {
            if send_initial != Some(false) {
                for (_, obj) in self.visible(t, &selector, None) {
                    let line = event_line("ADDED", &watcher.render.one(t.served(obj)));
                    let _ = watcher.tx.send(line);
                }
            }
            if send_initial == Some(true) && bookmarks {
                let _ = watcher.tx.send(watcher.bookmark(self.rv, true));
            }
        } else {
            let history = self.histories.get(&t.res());
            let floor = history.map_or(0, |h| h.floor).max(self.compacted);
            if from < floor {
                return Ok(WatchStart::Gone(Status::expired(format!(
                    "too old resource version: {from} ({floor})"
                ))));
            }
            for ev in history
                .into_iter()
                .flat_map(|h| h.events.iter())
                .filter(|e| e.rv > from)
            {
                if let Some(line) = watcher.line(ev) {
                    let _ = watcher.tx.send(line);
                }
            }
        }
        self.watchers.push(watcher);
        let timeout = q
            .get("timeoutSeconds")
            .and_then(|s| s.parse().ok())
            .filter(|s| *s > 0)
            .map(Duration::from_secs);
        Ok(WatchStart::Stream {
            id,
            rx,
            bookmarks,
            timeout,
        })
    }

    /// Sends a BOOKMARK at the current resourceVersion to one watch. Under the
    /// lock, every event up to it is already queued ahead of it.
    pub fn bookmark(&mut self, id: u64) {
        let rv = self.rv;
        if let Some(w) = self.watchers.iter().find(|w| w.id == id) {
            let _ = w.tx.send(w.bookmark(rv, false));
        }
    }

    /// Ends every open watch (after the events already queued).
    pub fn break_watches(&mut self) {
        self.watchers.clear();
    }

    /// Forgets all history: a watch from any resourceVersion before now gets
    /// `410`. The counter moves on by one without a write, as etcd's revision
    /// does on writes to other keys, so that the current resourceVersion is
    /// the first valid one.
    pub fn compact(&mut self) {
        self.rv = self.rv.saturating_add(1);
        self.compacted = self.rv;
        for h in self.histories.values_mut() {
            h.events.clear();
            h.floor = self.rv;
        }
    }

    /// Checks the apiVersion/kind of a request body, fills the namespace and
    /// name from the URL, and decodes it as the apiserver does: unknown
    /// metadata dropped, custom resources pruned and defaulted, stored at the
    /// storage version.
    fn decode(&self, t: &Target, mut obj: Value, url_name: Option<&str>) -> Result<Value, Status> {
        if !obj.is_object() {
            return Err(Status::bad_request(
                "the body of the request is not a JSON object",
            ));
        }
        for (field, expected) in [
            ("apiVersion", t.kind.api_version(&t.version)),
            ("kind", t.kind.kind.clone()),
        ] {
            if let Some(found) = obj
                .get(field)
                .and_then(Value::as_str)
                .filter(|f| !f.is_empty() && *f != expected)
            {
                let what = if field == "kind" {
                    "kind"
                } else {
                    "API version"
                };
                return Err(Status::bad_request(format!(
                    "the {what} in the data ({found}) does not match the expected {what} ({expected})"
                )));
            }
        }
        match (&t.namespace, t.kind.namespaced) {
            (Some(url_ns), true) => match meta::namespace(&obj) {
                "" => meta::set(&mut obj, "namespace", url_ns.as_str()),
                ns if ns != url_ns => {
                    return Err(Status::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {}
            },
            (None, true) => return Err(Status::generic(405)),
            (_, false) => meta::remove(&mut obj, "namespace"),
        }
        if let Some(url_name) = url_name {
            match meta::name(&obj) {
                "" => meta::set(&mut obj, "name", url_name),
                n if n != url_name => {
                    return Err(Status::bad_request(format!(
                        "the name of the object ({n}) does not match the name on the URL ({url_name})"
                    )));
                }
                _ => {}
            }
        }
        meta::sanitize(&mut obj);
        if let Some(schema) = t.schema() {
            schema::normalize(schema, &mut obj);
        }
        if let Some(map) = obj.as_object_mut() {
            map.insert(
                "apiVersion".into(),
                t.kind.api_version(&t.kind.storage_version).into(),
            );
            map.insert("kind".into(), t.kind.kind.clone().into());
        }
        if t.is_events_v1() {
            obj = events::to_core(obj);
        }
        Ok(obj)
    }

    /// Validation shared by create and update: the schema, its
    /// `x-kubernetes-validations`, and what ObjectMeta and CRD validation say.
    /// Rule failures that ratcheting makes warnings go to `self.warnings`.
    fn validate(&mut self, t: &Target, obj: &Value, old: Option<&Value>) -> Result<(), Status> {
        let name = meta::name(obj);
        let mut errors = Vec::new();
        if old.is_none() {
            errors.extend(meta::validate_name(
                name,
                t.kind.group.is_empty() && t.kind.plural == "namespaces",
            ));
        }
        if let Some(schema) = t.schema() {
            // The status strategy validates only status against the schema,
            // but the rules against the whole object.
            errors.extend(if t.on_status() {
                schema::validate_status(schema, obj, old)
            } else {
                schema::validate(schema, obj, old)
            });
        }
        // What the scale paths hold (not ratcheted); the status strategy checks status only.
        if let Some(paths) = t.scale() {
            errors.extend(scale::validate(obj, paths, t.on_status()));
        }
        if let Some(schema) = t.schema() {
            // Errors of these types keep the rules, if the schema has any, from
            // being evaluated (`hasBlockingErr`).
            let blocking = errors.iter().any(|e| {
                matches!(
                    e.kind,
                    FieldErrorKind::NotSupported
                        | FieldErrorKind::Required
                        | FieldErrorKind::TooLong
                        | FieldErrorKind::TooMany
                        | FieldErrorKind::TypeInvalid
                )
            });
            if blocking && rules::has_rules(schema) {
                errors.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    schema::NIL_PATH,
                    BadValue::Json(Value::Null),
                    "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
                ));
            } else if !blocking && let Some(rules) = t.rules() {
                let outcome = rules.validate(schema, obj, old);
                errors.extend(outcome.errors);
                self.warnings.extend(outcome.warnings);
            }
        }
        if let Some(old) = old.filter(|o| meta::is_terminating(o)) {
            let before = meta::finalizers(old);
            let added: Vec<&str> = meta::finalizers(obj)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                let go_list = added
                    .iter()
                    .map(|f| format!("{f:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                errors.push(FieldError::forbidden(
                    "metadata.finalizers",
                    format!("no new finalizers can be added if the object is being deleted, found new finalizers []string{{{go_list}}}"),
                ));
            }
        }
        if t.is_crd()
            && let Err(crd_errors) = Kind::from_crd(obj)
        {
            errors.extend(crd_errors);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(t.invalid(name, &errors))
        }
    }

    /// A create (POST; or PUT/apply of a missing object, then with the URL's name).
    pub fn create(
        &mut self,
        t: &Target,
        body: Value,
        url_name: Option<&str>,
        dry_run: bool,
    ) -> Result<Arc<Value>, Status> {
        let mut obj = self.decode(t, body, url_name)?;
        if !meta::resource_version(&obj).is_empty() {
            return Err(Status::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let prefix = meta::str_field(&obj, "generateName").to_owned();
        let generate = meta::name(&obj).is_empty() && !prefix.is_empty();
        if meta::name(&obj).is_empty() && !generate {
            let missing = FieldError::required("metadata.name", "name or generateName is required");
            return Err(t.invalid("", &[missing]));
        }
        // PrepareForCreate: the system fields are the server's.
        if t.status_enabled()
            && !t.kind.keeps_status_on_create
            && let Some(map) = obj.as_object_mut()
        {
            map.remove("status");
        }
        if node::is_node(&t.kind) {
            node::prepare_for_create(&mut obj);
        }
        for field in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            meta::remove(&mut obj, field);
        }
        if t.kind.tracks_generation {
            meta::set(&mut obj, "generation", 1);
        }
        self.admit_on_create(t, &mut obj);
        meta::set(&mut obj, "uid", meta::new_uid());
        meta::set(&mut obj, "creationTimestamp", meta::now());
        if t.is_crd() {
            obj["status"] = established_crd_status(&obj, &meta::now());
        } else if t.kind.group.is_empty() && t.kind.plural == "namespaces" {
            obj["status"] = json!({"phase": "Active"});
        }
        let mut warnings = node::is_node(&t.kind).then(|| node::warnings(&obj));
        self.record_manager(t, &mut obj, None);
        // A generated name that is taken is retried with a new one.
        for _ in 0..8 {
            if generate {
                meta::set(&mut obj, "name", meta::generate_name(&prefix));
            }
            self.validate(t, &obj, None)?;
            self.warnings.extend(warnings.take().into_iter().flatten());
            let name = meta::name(&obj).to_owned();
            if self.object(t, &name).is_some() {
                if generate {
                    continue;
                }
                return Err(Status::already_exists(t.kind.gr(), &name));
            }
            if dry_run {
                return Ok(Arc::new(t.served(&obj)));
            }
            let stored = self.commit(&t.kind, EventType::Added, obj, None);
            self.after_commit(t, &stored, EventType::Added);
            return Ok(t.served_shared(&stored));
        }
        Err(Status::already_exists(t.kind.gr(), meta::name(&obj)))
    }

    /// The writer's managedFields entry on `obj`, when the server records them.
    fn record_manager(&self, t: &Target, obj: &mut Value, old: Option<&Value>) {
        if let Some(writer) = self.writer.as_ref().filter(|_| self.config.managed_fields) {
            let api_version = t.kind.api_version(&t.version);
            crate::managed::record(obj, old, writer, t.on_status(), &api_version, &meta::now());
        }
    }

    /// Mutating admission, as a MutatingAdmissionPolicy adding a finalizer on CREATE does: after
    /// decoding, before validation.
    fn admit_on_create(&self, t: &Target, obj: &mut Value) {
        for (group, plural, finalizer) in &self.finalizers_on_create {
            if *group != t.kind.group || *plural != t.kind.plural {
                continue;
            }
            let Some(metadata) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
                continue;
            };
            let list = metadata
                .entry("finalizers")
                .or_insert_with(|| Value::Array(Vec::new()));
            if list.is_null() {
                *list = Value::Array(Vec::new());
            }
            if let Some(list) = list.as_array_mut()
                && !list.iter().any(|f| f == finalizer.as_str())
            {
                list.push(Value::String(finalizer.clone()));
            }
        }
    }

    /// The update pipeline of the generic store (PUT, every patch, apply):
    /// `mutate` gets the current object as served (None when missing) and
    /// returns the desired one. Answers the object and whether it was created.
    pub fn update(
        &mut self,
        t: &Target,
        name: &str,
        mode: UpdateMode,
        mutate: impl FnOnce(Option<&Value>) -> Result<Value, Status>,
    ) -> Result<(Arc<Value>, bool), Status> {
        let Some(current) = self.object(t, name).map(Arc::clone) else {
            if !mode.create_if_missing {
                return Err(Status::not_found(t.kind.gr(), name));
            }
            let mut body = mutate(None)?;
            // Created through an update: the resourceVersion is the server's.
            meta::remove(&mut body, "resourceVersion");
            return self
                .create(t, body, Some(name), mode.dry_run)
                .map(|o| (o, true));
        };
        let desired = mutate(Some(&t.served_ref(&current)))?;
        let new = self.decode(t, desired, Some(name))?;
        match meta::resource_version(&new) {
            "" if mode.put && !t.kind.unconditional_update => {
                let err = FieldError::new(
                    FieldErrorKind::Invalid,
                    "metadata.resourceVersion",
                    BadValue::Raw("0x0".into()),
                    "must be specified for an update",
                );
                // The generic store names the resource here, not the kind.
                return Err(Status::invalid(&t.kind.group, &t.kind.plural, name, &[err]));
            }
            "" => {}
            rv if rv != meta::resource_version(&current) => {
                return Err(Status::stale(t.kind.gr(), name));
            }
            _ => {}
        }
        let (uid, current_uid) = (meta::uid(&new), meta::uid(&current));
        if !uid.is_empty() && uid != current_uid {
            return Err(Status::conflict(
                t.kind.gr(),
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {current_uid}"
                ),
            ));
        }
        let mut new_obj = prepare_update(t, &current, new);
        if self.config.managed_fields {
            meta::copy(&current, &mut new_obj, "managedFields");
        }
        self.validate(t, &new_obj, Some(&current))?;
        if node::is_node(&t.kind) && !t.on_status() {
            self.warnings.extend(node::warnings(&new_obj));
        }
        // The last finalizer gone from an object being deleted: it goes now.
        if meta::finalizers(&new_obj).is_empty()
            && !meta::finalizers(&current).is_empty()
            && meta::is_terminating(&current)
        {
            if !mode.dry_run {
                let gone = Value::clone(&current);
                let gone = self.commit(&t.kind, EventType::Deleted, gone, Some(current));
                self.after_commit(t, &gone, EventType::Deleted);
            }
            return Ok((Arc::new(t.served(&new_obj)), false));
        }
        if new_obj == *current {
            // A no-op update is not written: no new resourceVersion, no event.
            return Ok((t.served_shared(&current), false));
        }
        self.record_manager(t, &mut new_obj, Some(&current));
        if mode.dry_run {
            return Ok((Arc::new(t.served(&new_obj)), false));
        }
        let stored = self.commit(&t.kind, EventType::Modified, new_obj, Some(current));
        self.after_commit(t, &stored, EventType::Modified);
        Ok((t.served_shared(&stored), false))
    }

    /// A delete: with finalizers, the object is only marked (deletionTimestamp,
    /// deletionGracePeriodSeconds 0, generation bumped) and answered; without,
    /// it is removed and a Status (or, for some kinds, the object) answered.
    pub fn delete(
        &mut self,
        t: &Target,
        name: &str,
        options: &Value,
        dry_run: bool,
    ) -> Result<Value, Status> {
        let current = self
            .object(t, name)
            .map(Arc::clone)
            .ok_or_else(|| Status::not_found(t.kind.gr(), name))?;
        for (field, actual) in [
            ("uid", meta::uid(&current)),
            ("resourceVersion", meta::resource_version(&current)),
        ] {
            if let Some(wanted) = options["preconditions"][field]
                .as_str()
                .filter(|w| *w != actual)
            {
                let label = if field == "uid" {
                    "UID"
                } else {
                    "ResourceVersion"
                };
                let why = format!(
                    "Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {actual}"
                );
                return Err(Status::conflict(t.kind.gr(), name, &why));
            }
        }
        if !meta::finalizers(&current).is_empty() {
            if meta::is_terminating(&current) || dry_run {
                return Ok(t.served(&current));
            }
            let mut marked = Value::clone(&current);
            let generation = meta::generation(&marked);
            if generation > 0 {
                meta::set(&mut marked, "generation", generation.saturating_add(1));
            }
            meta::set(&mut marked, "deletionTimestamp", meta::now());
            meta::set(&mut marked, "deletionGracePeriodSeconds", 0);
            let stored = self.commit(&t.kind, EventType::Modified, marked, Some(current));
            return Ok(t.served(&stored));
        }
        let gone = if dry_run {
            current
        } else {
            let gone = Value::clone(&current);
            let gone = self.commit(&t.kind, EventType::Deleted, gone, Some(current));
            self.after_commit(t, &gone, EventType::Deleted);
            gone
        };
        if t.kind.returns_deleted_object {
            Ok(t.served(&gone))
        } else {
            Ok(Status::deleted(t.kind.gr(), name, meta::uid(&gone)).to_json())
        }
    }

    /// Deletes every object a list would return; answers them as listed
    /// before the deletes, as the generic store does.
    pub fn delete_collection(
        &mut self,
        t: &Target,
        q: &Query,
        options: &Value,
    ) -> Result<Value, Status> {
        let selector = Selector::parse_for(
            q.get("labelSelector"),
            q.get("fieldSelector"),
            &t.kind.field_labels,
            t.kind.namespaced,
        )?;
        let listed: Vec<(ObjKey, Value)> = self
            .visible(t, &selector, None)
            .map(|(k, o)| (k.clone(), t.served(o)))
            .collect();
        let mut items = Vec::new();
        for ((ns, name), obj) in listed {
            let one = Target {
                namespace: t.kind.namespaced.then_some(ns),
                ..t.clone()
            };
            self.delete(&one, &name, options, q.dry_run())?;
            items.push(obj);
        }
        Ok(json!({
            "kind": t.kind.list_kind,
            "apiVersion": t.kind.api_version(&t.version),
            "metadata": {"resourceVersion": self.rv.to_string()},
            "items": items,
        }))
    }

    /// Keeps the kinds in step with their CustomResourceDefinitions.
    fn after_commit(&mut self, t: &Target, obj: &Value, event: EventType) {
        if !t.is_crd() {
            return;
        }
        let Ok(kind) = Kind::from_crd(obj) else {
            return;
        };
        let key = (kind.group.clone(), kind.plural.clone());
        if event == EventType::Deleted {
            self.kinds.remove(&key);
            self.objects.remove(&key);
            self.histories.remove(&key);
            self.watchers.retain(|w| w.res != key);
        } else {
            self.kinds.insert(key, Arc::new(kind));
        }
    }

    /// Writes a change: the next resourceVersion, the object map, the history,
    /// the open watches, the counters and the commit hooks, in that order.
    fn commit(
        &mut self,
        kind: &Kind,
        event: EventType,
        mut obj: Value,
        old: Option<Arc<Value>>,
    ) -> Arc<Value> {
        self.rv = self.rv.saturating_add(1);
        let rv = self.rv;
        meta::set(&mut obj, "resourceVersion", rv.to_string());
        let res: ResKey = events::storage_key(&kind.group, &kind.plural);
        let key: ObjKey = (
            meta::namespace(&obj).to_owned(),
            meta::name(&obj).to_owned(),
        );
        let obj = Arc::new(obj);
        let objects = self.objects.entry(res.clone()).or_default();
        if event == EventType::Deleted {
            objects.remove(&key);
        } else {
            objects.insert(key.clone(), Arc::clone(&obj));
        }
        let ev = Arc::new(HistoryEvent {
            rv,
            kind: event,
            object: obj,
            old,
        });
        let history = self.histories.entry(res.clone()).or_default();
        history.events.push_back(Arc::clone(&ev));
        let mut evicted = false;
        while history.events.len() > self.config.history_size {
            history.events.pop_front();
            evicted = true;
        }
        if evicted {
            history.floor = history
                .events
                .front()
                .map_or(rv, |e| e.rv.saturating_sub(1));
        }
        let mut watch_bytes: u64 = 0;
        self.watchers.retain(|w| {
            if w.res != res {
                return !w.tx.is_closed();
            }
            w.line(&ev).is_none_or(|line| {
                let len = u64::try_from(line.len()).unwrap_or(u64::MAX);
                let sent = w.tx.send(line).is_ok();
                if sent {
                    watch_bytes = watch_bytes.saturating_add(len);
                }
                sent
            })
        });
        self.stats.writes = self.stats.writes.saturating_add(1);
        if let Some(served) = self.served_bytes.as_mut() {
            // Sized only within a write request: direct writes count no bytes.
            served.stored_before = served
                .stored_before
                .saturating_add(ev.old.as_deref().map_or(0, json_len));
            if event != EventType::Deleted {
                served.stored_after = served.stored_after.saturating_add(json_len(&ev.object));
            }
            served.watch = served.watch.saturating_add(watch_bytes);
        }
        let commit = CommitEvent {
            event,
            group: &res.0,
            resource: &res.1,
            namespace: &key.0,
            name: &key.1,
            resource_version: rv,
            object: &ev.object,
            old: ev.old.as_deref(),
            objects: &self.objects,
        };
        for hook in &self.hooks {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| hook(&commit))) {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "commit hook panicked".into());
                self.hook_failures.push(format!(
                    "after {} of {} {}: {message}",
                    event.wire(),
                    res.1,
                    key.1
                ));
            }
        }
        Arc::clone(&ev.object)
    }
}

fn put_status(obj: &mut Value, status: Option<Value>) {
    if let Some(map) = obj.as_object_mut() {
        match status {
            Some(s) => map.insert("status".into(), s),
            None => map.remove("status"),
        };
    }
}

/// Makes `new` the `current` object with `new`'s status: what a write to `/status` may change.
/// Copies only the fields that differ (a patch of the status leaves the others equal).
fn keep_all_but_status(current: &Value, new: &mut Value) {
    let (Some(from), Some(to)) = (current.as_object(), new.as_object_mut()) else {
        let status = new.get("status").cloned();
        *new = current.clone();
        put_status(new, status);
        return;
    };
    to.retain(|key, _| key == "status" || from.contains_key(key));
    for (key, value) in from {
        if key != "status" && to.get(key) != Some(value) {
            to.insert(key.clone(), value.clone());
        }
    }
}

/// Makes `new`'s spec the `current` one's: what a node's `/status` may not change.
fn keep_spec(current: &Value, new: &mut Value) {
    if let Some(map) = new.as_object_mut() {
        match current.get("spec") {
            Some(spec) => map.insert("spec".into(), spec.clone()),
            None => map.remove("spec"),
        };
    }
}

/// `PrepareForUpdate` and `BeforeUpdate`: what an update may not change.
/// With a status subresource, the main resource keeps the old status and
/// `/status` changes what the kind's status strategy lets it (the status; for
/// nodes, all but the spec). System metadata is kept.
fn prepare_update(t: &Target, current: &Value, mut new: Value) -> Value {
    if t.status_enabled() {
        match (t.on_status(), t.kind.status_write) {
            (true, StatusWrite::OnlyStatus) => keep_all_but_status(current, &mut new),
            (true, StatusWrite::AllButSpec) => keep_spec(current, &mut new),
            (false, _) => put_status(&mut new, current.get("status").cloned()),
        }
    }
    if node::is_node(&t.kind) {
        node::prepare_for_update(&mut new, current, t.on_status());
    }
    // The uid was checked; the rest only the server sets. (resourceVersion
    // too, so that a no-op update compares equal.)
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        meta::copy(current, &mut new, field);
    }
    // The status strategy never moves generation; the main one compares all
    // but metadata (with the status subresource, the status is the old one).
    if t.kind.tracks_generation && !t.on_status() && !meta::same_but_metadata(&new, current) {
        meta::set(
            &mut new,
            "generation",
            meta::generation(current).saturating_add(1),
        );
    }
    new
}
