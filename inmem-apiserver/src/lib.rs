//! A stateful, in-memory Kubernetes API server for tests without a cluster.
//!
//! [`ApiServer`] is a `tower::Service<http::Request<B>>`, so
//! `kube::Client::new(api.clone(), "default")` talks to it in-process; its
//! [`ApiServer::handle`] serves one `http::Request<Bytes>`, and [`server::serve`]
//! serves it over plain HTTP/1.1 on a TCP listener, for real clients such as
//! `kubectl` (what `tenant-placer sandbox` does). The crate does not depend on kube: it learns
//! custom kinds from `apiextensions.k8s.io/v1` CustomResourceDefinitions
//! (POSTed, or given to [`ApiServer::install_crd`]), and stores a few
//! built-in kinds generically: core `namespaces`, `configmaps`, `nodes`,
//! `events`, `events.k8s.io` `events`, `coordination.k8s.io` `leases`, and the
//! CRDs themselves ([`ApiServer::register_kind`] adds more). A custom kind may
//! share a built-in kind's name and plural (tenant-placer's `Node`): both are
//! served, each under its group, and kubectl's `nodes` is the core one, as
//! the core group comes first in discovery.
//!
//! Over HTTP it answers only a `Host` naming this server
//! ([`host_check::check_host`], the same rule as the controller's own server:
//! `localhost`, loopback addresses, the bound address; bound to every address,
//! also any IP and `*.svc` names); any other, such as a DNS-rebinding page's
//! name, is `403 Forbidden`: a guard a real apiserver, behind TLS and
//! authentication, does not need.
//!
//! # Rules it enforces, as the apiserver does
//!
//! - **Paths**: `/api/v1/...` and `/apis/{group}/{version}/...`, namespaced
//!   `/namespaces/{ns}/{resource}[/{name}[/status|/scale]]`, cluster-scoped
//!   `/{resource}[/{name}[/status|/scale]]`, and lists/watches across namespaces.
//!   Unknown paths, kinds, versions and subresources are `404` with a Status
//!   (a subresource a custom kind does not serve: the object's `NotFound`, as
//!   the CRD handler answers; a verb other than get, update and patch of one
//!   it serves: `405` `MethodNotSupported`);
//!   discovery (`/api`, `/apis`, `/api/v1`, `/apis/{g}/{v}`, `/version`) is
//!   served, aggregated (`apidiscovery.k8s.io/v2`) when `Accept` asks for it,
//!   with short names and categories; so are OpenAPI v3 documents built from
//!   the CRD schemas (`/openapi/v3`, `/openapi/v3/apis/{g}/{v}`), for
//!   `kubectl explain`.
//! - **Reads** answer the object, or what `Accept` asks for: a `meta.k8s.io`
//!   `Table` of the printer columns (`kubectl get`, including watches) or
//!   `PartialObjectMetadata(List)`; `406` when nothing it names is served.
//! - **Writes**: JSON bodies only (`415` otherwise, e.g. protobuf);
//!   `fieldValidation` `Strict` refuses unknown fields (`400`), `Warn` (the
//!   default) answers a `Warning` header per field, `Ignore` drops them.
//! - **resourceVersion**: one counter for the whole store, moved by every
//!   write. `metadata.uid`, `creationTimestamp` and (for custom kinds and
//!   CRDs) `generation: 1` are set on create; `generation` then moves only
//!   when something other than `metadata` changes. An update that changes
//!   nothing is not written (no new resourceVersion, no event).
//! - **Create** (`201`): `409 AlreadyExists`; `generateName`; a set
//!   `resourceVersion` is refused (500, as etcd3's store does); names must be
//!   DNS subdomains (labels for namespaces); namespaces need not exist.
//! - **Update** (PUT): `404` for a missing object unless the kind allows
//!   create-on-update (leases, events); a stale resourceVersion is `409
//!   Conflict` ("the object has been modified; ..."); a missing one is `422`
//!   (`metadata.resourceVersion: Invalid value: 0x0: must be specified for an
//!   update`) for kinds without unconditional update (custom kinds, CRDs,
//!   leases); a different `metadata.uid` is a `409` precondition failure.
//! - **Patch**: JSON patch (RFC 6902, with the apiserver's `test` semantics:
//!   a missing path tests equal to `null`; a failed op is the generic `422`),
//!   merge patch (RFC 7386), strategic merge patch for built-in kinds (as a
//!   merge patch; `415` for custom kinds), server-side apply (JSON body,
//!   `fieldManager` required, creates when missing). A resourceVersion in the
//!   patch must match (`409`).
//! - **Status subresource**: a write to the main resource keeps the old
//!   status (and create drops it, but for nodes); a write to `/status`
//!   changes only status (for nodes: all but the spec, as their status
//!   strategy says).
//! - **Scale subresource** of custom kinds whose CRD version declares
//!   `subresources.scale` (see the `scale` module): an `autoscaling/v1`
//!   `Scale` read from the version's replicas and selector paths; PUT and
//!   PATCH (JSON, merge, apply) set only the spec replicas, as an update of
//!   the object (generation, validation, `MODIFIED`), a `resourceVersion` in
//!   the Scale being a precondition (`409`). Discovery and OpenAPI list
//!   `{plural}/scale`.
//! - **Delete**: with finalizers, the object gets `deletionTimestamp`,
//!   `deletionGracePeriodSeconds: 0` and a generation bump, and is answered
//!   (`MODIFIED`); the update that empties its finalizers removes it
//!   (`DELETED`). While it terminates no finalizer may be added (`422`), and
//!   deleting again changes nothing. Without finalizers it is removed and a
//!   `Status` Success is answered (the object, for namespaces).
//!   `preconditions` (uid, resourceVersion) are checked (`409`).
//! - **List**: `labelSelector` (`=`, `==`, `!=`, exists, `!`, `in`, `notin`),
//!   `fieldSelector` (`metadata.name`, `metadata.namespace` for namespaced
//!   kinds, and the field labels of events such as `involvedObject.name` and
//!   nodes' `spec.unschedulable`), `limit` and
//!   `continue`, `resourceVersion`/`resourceVersionMatch`.
//! - **Watch**: newline-delimited events, `{"type":…,"object":…}` in the
//!   apiserver's field order; lines queued together go out in one chunk
//!   (each whole on its line). From resourceVersion `0` or none,
//!   `ADDED` for the current objects first; from another, a replay of the
//!   resource's event history after it, or — if older than the history (see
//!   [`Config::history_size`], [`ApiServer::compact_history`]) — HTTP 200 and an
//!   `ERROR` event `410 Expired` "too old resource version: X (Y)".
//!   Selectors apply, and crossing one turns `MODIFIED` into `ADDED` or
//!   `DELETED`. `allowWatchBookmarks` gets periodic `BOOKMARK`s;
//!   `sendInitialEvents=true` ends the initial events with a bookmark
//!   annotated `k8s.io/initial-events-end`; `timeoutSeconds` ends the stream.
//! - **Events**: core `v1` and `events.k8s.io/v1` Events are one resource
//!   (one object, one resourceVersion, one watch history), stored in the
//!   core form: what either API writes, both list, get and watch, converted
//!   field by field as the apiserver's conversion does (`regarding` ↔
//!   `involvedObject`, `note` ↔ `message`, `reportingController` ↔
//!   `reportingComponent`, `deprecatedSource` ↔ `source`, ...), so core
//!   field selectors such as `involvedObject.name` (`kubectl describe`) see
//!   events published through `events.k8s.io`.
//! - **Custom resources** are pruned of unknown fields, defaulted and
//!   validated against the version's `openAPIV3Schema` (see the `schema`
//!   module for what is checked, integer formats and `date-time` included), then against its
//!   `x-kubernetes-validations` CEL rules, evaluated with the `cel` crate
//!   (cel-rust; see the `rules` module): `self`, `oldSelf` transition rules
//!   (and `optionalOldSelf`), `message`, `messageExpression`, `fieldPath` and
//!   `reason`, on nested nodes, array items and map values, on create,
//!   update, patch and apply, and on the status subresource (whose writes
//!   are validated by the schema for `status` only and by the rules as a
//!   whole object). They answer `422 Invalid` with the apiserver's messages
//!   and `details.causes` (`spec.replicas: Invalid value: "object": a
//!   Standalone tenant has exactly 1 replica`); on an update, what did not
//!   change is ratcheted (a failing rule becomes a `Warning` header). A CRD
//!   whose rules do not parse, or whose `fieldPath` names no field, is
//!   refused as the apiserver refuses it.
//! - **managedFields**, when [`Config::managed_fields`] is on (off by default): an entry per
//!   manager (`fieldManager`, else the User-Agent), operation (`Apply`, `Update`) and
//!   subresource, listing the fields it set (see the `managed` module), as a client of a real
//!   server receives them in every answer, list and watch event.
//!
//! # Not implemented, deliberately
//!
//! CEL type checking and cost limits, the Kubernetes CEL libraries
//! (`quantity`, `url`, `ip`, `cidr`, `sets`, `isSorted`, ...: a rule calling
//! one fails), `pattern` and string formats other than `date-time`,
//! conversion webhooks (versions differ only in `apiVersion`), field
//! ownership (apply is a merge; managedFields are only recorded), YAML and protobuf bodies, OpenAPI
//! v2, garbage collection (`ownerReferences`, `propagationPolicy` are stored but not acted
//! on), the namespace lifecycle (deleting a namespace removes only it),
//! consistent snapshots for paginated or `Exact` lists (later pages show the
//! current state), authentication and authorization, admission, and
//! subresources other than `/status` and `/scale`.
//!
//! # For tests
//!
//! Direct access without HTTP ([`ApiServer::get`], [`ApiServer::list`],
//! [`ApiServer::create`], [`ApiServer::apply`], [`ApiServer::delete`]), a hook
//! on every committed write ([`ApiServer::on_commit`]), request, write and byte
//! counters ([`ApiServer::stats`], [`ByteCounts`]: the bytes writes handle), fault injection
//! ([`ApiServer::inject`], [`ApiServer::break_watches`], [`ApiServer::compact_history`]), and a
//! cost model that makes every write cost server time, by the write and by its bytes, under a
//! cap on writes per second or on CPU cores, as a real control plane's CPU does
//! ([`ApiServer::set_cost_model`], [`CostModel`]).

// Unsafe code is denied across the workspace; a library never needs it.
#![forbid(unsafe_code)]

mod body;
mod cost;
mod discovery;
mod events;
mod faults;
mod handler;
mod kinds;
mod managed;
mod meta;
mod node;
mod openapi;
mod patch;
mod rules;
mod scale;
mod schema;
mod selector;
pub mod server;
mod status;
mod store;
mod table;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use serde_json::Value;

pub use body::ResponseBody;
pub use cost::CostModel;
pub use faults::{ByteCounts, Fault, FaultAction, Gate, RequestKey, Stall, Stats, Verb};
pub use status::{Status, StatusCause, StatusDetails};
pub use store::{CommitEvent, CommitHook, Config, EventType};

use kinds::{CRD_GROUP, CRD_PLURAL, Kind};
use store::{Shared, State, Target, UpdateMode};

/// A boxed error, as tower and kube use.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The in-memory API server. Cheap to clone; clones share the store.
#[derive(Clone)]
pub struct ApiServer {
    shared: Arc<Shared>,
    /// Set on a [`ApiServer::connection`]: once cut, its requests fail.
    cut: Option<Arc<std::sync::atomic::AtomicBool>>,
}

/// Cuts the connection [`ApiServer::connection`] gave.
#[derive(Clone, Debug)]
pub struct Cut(Arc<std::sync::atomic::AtomicBool>);

impl Cut {
    /// From now on every request of the connection fails as a dropped connection, including
    /// one sent but not yet served: as when the process that holds it is killed.
    pub fn cut(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("ApiServer")
            .field("resource_version", &state.rv)
            .field("kinds", &state.kinds.len())
            .finish_non_exhaustive()
    }
}

impl Default for ApiServer {
    fn default() -> Self {
        Self::new()
    }
}

/// The response extension marking a connection dropped by an injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DroppedConnection;

/// Why the `Service` failed a request: it does so only when the request body
/// cannot be read, or when a fault drops the connection.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The request body could not be read.
    #[error("failed to read the request body: {0}")]
    Body(#[source] BoxError),
    /// An injected fault dropped the connection, or it was cut ([`ApiServer::connection`]).
    #[error("connection dropped (injected fault)")]
    ConnectionDropped,
}

impl ApiServer {
    /// A server with the built-in kinds and the default [`Config`].
    pub fn new() -> Self {
        Self::with_config(Config::default())
    }

    /// A server with the built-in kinds.
    pub fn with_config(config: Config) -> Self {
        Self {
            shared: Arc::new(Shared::new(config)),
            cut: None,
        }
    }

    /// Creates (or replaces the spec of) a CustomResourceDefinition, as a
    /// POST or PUT would; its kind is served at once. Answers the stored CRD.
    pub fn install_crd(&self, crd: Value) -> Result<Value, Status> {
        let mut state = self.shared.lock();
        state.writer = None;
        let t = Self::target_of(&state, CRD_GROUP, CRD_PLURAL, None)?;
        let name = meta::name(&crd).to_owned();
        let mode = UpdateMode {
            put: true,
            create_if_missing: true,
            dry_run: false,
        };
        state
            .update(&t, &name, mode, |current| {
                let mut crd = crd;
                if let Some(current) = current {
                    meta::set(&mut crd, "resourceVersion", meta::resource_version(current));
                }
                Ok(crd)
            })
            .map(|(obj, _)| Arc::unwrap_or_clone(obj))
    }

    /// Mutating admission: every object of `group`/`plural` created from now on gets
    /// `finalizer` (when it lacks it), as a MutatingAdmissionPolicy with a JSON patch on CREATE
    /// does (tenant-placer's chart ships two). Applied after decoding, before validation.
    pub fn add_finalizer_on_create(&self, group: &str, plural: &str, finalizer: &str) {
        self.shared.lock().finalizers_on_create.push((
            group.to_owned(),
            plural.to_owned(),
            finalizer.to_owned(),
        ));
    }

    /// Serves another built-in kind, stored generically (unconditional
    /// updates allowed, no create-on-update, no status subresource).
    pub fn register_kind(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
    ) {
        let kind = Kind::builtin(group, version, plural, kind, namespaced);
        self.shared
            .lock()
            .kinds
            .insert((group.into(), plural.into()), Arc::new(kind));
    }

    fn target_of(
        state: &State,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> Result<Target, Status> {
        let kind = state
            .kinds
            .get(&(group.to_owned(), resource.to_owned()))
            .ok_or_else(|| {
                Status::bad_request(format!("no resource {resource:?} in group {group:?}"))
            })?;
        Ok(Target {
            kind: kind.clone(),
            version: kind.storage_version.clone(),
            namespace: kind
                .namespaced
                .then(|| namespace.unwrap_or("default").to_owned()),
            subresource: None,
        })
    }

    /// The target of a direct write: the kind its apiVersion and kind name.
    fn target_for(state: &State, obj: &Value) -> Result<Target, Status> {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default();
        let kind_name = obj["kind"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let kind = state
            .kinds
            .values()
            .find(|k| k.group == group && k.kind == kind_name && k.version(version).is_some())
            .ok_or_else(|| {
                Status::bad_request(format!(
                    "no kind {kind_name:?} is served at {api_version:?}"
                ))
            })?;
        let namespace = Some(meta::namespace(obj)).filter(|ns| !ns.is_empty());
        Ok(Target {
            version: version.to_owned(),
            ..Self::target_of(state, group, &kind.plural, namespace)?
        })
    }

    /// One object as stored (at its kind's storage version; `events.k8s.io`
    /// events converted from the core Events they are stored as).
    pub fn get(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let state = self.shared.lock();
        let key = (namespace.unwrap_or_default().to_owned(), name.to_owned());
        let obj = state
            .objects
            .get(&events::storage_key(group, resource))?
            .get(&key)
            .map(|o| Value::clone(o))?;
        Some(Self::as_stored(group, resource, obj))
    }

    /// A stored object as (group, resource) stores it.
    fn as_stored(group: &str, resource: &str, obj: Value) -> Value {
        if events::is_events_v1(group, resource) {
            events::to_events_v1(obj)
        } else {
            obj
        }
    }

    /// All objects of a resource, in (namespace, name) order.
    pub fn list(&self, group: &str, resource: &str) -> Vec<Value> {
        let state = self.shared.lock();
        state
            .objects
            .get(&events::storage_key(group, resource))
            .map(|m| {
                m.values()
                    .map(|o| Self::as_stored(group, resource, Value::clone(o)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Creates an object as a POST would (namespace `default` if it has none),
    /// then writes its `status` too when the kind has a status subresource.
    /// No request is counted and no fault applies.
    pub fn create(&self, obj: Value) -> Result<Value, Status> {
        let mut state = self.shared.lock();
        state.writer = None;
        let t = Self::target_for(&state, &obj)?;
        let created = state.create(&t, obj.clone(), None, false)?;
        Self::write_status(&mut state, &t, &created, &obj)
    }

    /// Merges `obj` into the object of its name, creating it if missing (a
    /// server-side apply without field ownership), then writes its `status`
    /// too when the kind has a status subresource.
    pub fn apply(&self, obj: Value) -> Result<Value, Status> {
        self.apply_as(obj, None)
    }

    /// [`ApiServer::apply`] as a server-side apply by `manager` (`kubectl apply --server-side`
    /// is `kubectl`): with [`Config::managed_fields`] on, the object records its entry.
    pub fn apply_by(&self, manager: &str, obj: Value) -> Result<Value, Status> {
        let writer = store::Writer {
            manager: manager.to_owned(),
            apply: true,
        };
        self.apply_as(obj, Some(writer))
    }

    /// Whether writes record `metadata.managedFields` ([`Config::managed_fields`]).
    pub fn set_managed_fields(&self, on: bool) {
        self.shared.lock().config.managed_fields = on;
    }

    fn apply_as(&self, obj: Value, writer: Option<store::Writer>) -> Result<Value, Status> {
        let mut state = self.shared.lock();
        state.writer = writer;
        let t = Self::target_for(&state, &obj)?;
        let name = meta::name(&obj).to_owned();
        let mode = UpdateMode {
            put: false,
            create_if_missing: true,
            dry_run: false,
        };
        let (applied, _) = state.update(&t, &name, mode, |current| {
            let mut doc = current.cloned().unwrap_or(Value::Null);
            json_patch::merge(&mut doc, &obj);
            Ok(doc)
        })?;
        Self::write_status(&mut state, &t, &applied, &obj)
    }

    fn write_status(
        state: &mut State,
        t: &Target,
        written: &Value,
        obj: &Value,
    ) -> Result<Value, Status> {
        let Some(status) = obj.get("status").filter(|_| t.status_enabled()) else {
            return Ok(written.clone());
        };
        let t = Target {
            subresource: Some("status".into()),
            ..t.clone()
        };
        let mode = UpdateMode {
            put: false,
            create_if_missing: false,
            dry_run: false,
        };
        state
            .update(&t, meta::name(written), mode, |current| {
                let mut doc = current.cloned().unwrap_or(Value::Null);
                doc["status"] = status.clone();
                Ok(doc)
            })
            .map(|(obj, _)| Arc::unwrap_or_clone(obj))
    }

    /// Deletes an object as a DELETE would; answers the response body.
    pub fn delete(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, Status> {
        let mut state = self.shared.lock();
        state.writer = None;
        let t = Self::target_of(&state, group, resource, namespace)?;
        state.delete(&t, name, &Value::Null, false)
    }

    /// Adds a fault rule; rules are tried in the order added.
    pub fn inject(&self, fault: Fault) {
        self.shared.lock().faults.push(fault);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// Ends every open watch now, after the events already sent to it.
    pub fn break_watches(&self) {
        self.shared.lock().break_watches();
    }

    /// Forgets the event history: a watch resuming from any resourceVersion
    /// before now is answered `410 Expired`, as after an etcd compaction.
    pub fn compact_history(&self) {
        self.shared.lock().compact();
    }

    /// Calls `hook` after every committed write, in commit order, while the
    /// store is locked (the hook must not call back into the server). A hook
    /// that panics does not break the server: see [`ApiServer::hook_failures`].
    pub fn on_commit(&self, hook: impl Fn(&CommitEvent<'_>) + Send + Sync + 'static) {
        self.shared.lock().hooks.push(Arc::new(hook));
    }

    /// The panic messages of commit hooks so far, with the write they followed.
    pub fn hook_failures(&self) -> Vec<String> {
        self.shared.lock().hook_failures.clone()
    }

    /// The request, write and byte counters.
    pub fn stats(&self) -> Stats {
        self.shared.lock().stats.clone()
    }

    /// Makes every write cost the server time, by the write and by its bytes, capped at a rate
    /// or on cores (see [`CostModel`]); `None`
    /// makes writes free again. Applies to requests served by [`ApiServer::handle`] (HTTP and
    /// the `Service`), not to the direct methods such as [`ApiServer::create`].
    pub fn set_cost_model(&self, model: Option<CostModel>) {
        self.shared.schedule.set(model);
    }

    /// The cost model in force.
    pub fn cost_model(&self) -> Option<CostModel> {
        self.shared.schedule.model()
    }

    /// Zeroes the request, write and byte counters.
    pub fn reset_stats(&self) {
        self.shared.lock().stats = Stats::default();
    }

    /// A clone served as one client's connection, and what cuts it: a test kills the process
    /// that uses it (its requests, even one already sent, no longer reach the store).
    pub fn connection(&self) -> (ApiServer, Cut) {
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let connection = ApiServer {
            shared: self.shared.clone(),
            cut: Some(cut.clone()),
        };
        (connection, Cut(cut))
    }

    fn is_cut(&self) -> bool {
        self.cut
            .as_ref()
            .is_some_and(|cut| cut.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().rv
    }
}

impl<B> tower_service::Service<Request<B>> for ApiServer
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = ServiceError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ServiceError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ServiceError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let server = self.clone();
        Box::pin(async move {
            if server.is_cut() {
                return Err(ServiceError::ConnectionDropped);
            }
            let (parts, body) = req.into_parts();
            let bytes = body
                .collect()
                .await
                .map_err(|e| ServiceError::Body(e.into()))?
                .to_bytes();
            let response = server.handle(Request::from_parts(parts, bytes)).await;
            if response.extensions().get::<DroppedConnection>().is_some() {
                return Err(ServiceError::ConnectionDropped);
            }
            Ok(response)
        })
    }
}
