//! Fault injection and request accounting.
//!
//! A [`Fault`] matches requests by verb, group, resource, subresource and name, and
//! acts on the next `times` of them: it answers an error without touching the
//! store, delays the request, lets a write commit and then loses the answer
//! (a 500, or a dropped connection), or answers a watch with `410 Gone`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// The Kubernetes verb of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH (any patch type, server-side apply included).
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

impl Verb {
    /// Whether the verb writes.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Self::Create | Self::Update | Self::Patch | Self::Delete | Self::DeleteCollection
        )
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
        };
        f.write_str(s)
    }
}

/// What a request was: its verb, API group, resource (plural) and subresource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// The verb.
    pub verb: Verb,
    /// The API group, empty for core (core `nodes` and a custom kind's `nodes` differ here).
    pub group: String,
    /// The resource, e.g. `tenants`.
    pub resource: String,
    /// The subresource, e.g. `status`.
    pub subresource: Option<String>,
}

/// Counters of requests served and writes committed, since creation or the
/// last [`crate::ApiServer::reset_stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests by verb, resource and subresource (failed and faulted ones too).
    pub requests: BTreeMap<RequestKey, u64>,
    /// Committed writes (creates, updates, deletes; no-op updates excluded).
    pub writes: u64,
    /// Requests a fault rule acted on (not those it let through first): a test that injects
    /// a fault checks here that it fired.
    pub faults_fired: u64,
    /// Bytes handled by write requests (served by [`crate::ApiServer::handle`]; the direct
    /// methods such as [`crate::ApiServer::create`] count none): see [`ByteCounts`].
    pub bytes: ByteCounts,
    /// [`Stats::bytes`] by verb, resource and subresource.
    pub bytes_by_request: BTreeMap<RequestKey, ByteCounts>,
}

/// What write requests handled, in bytes: what a real API server's CPU goes into is decoding,
/// encoding and collecting these (see [`crate::CostModel`]).
///
/// - `request`: the request bodies, as received (every write request, failed ones too);
/// - `stored_before`, `stored_after`: the object each commit replaced and the one it stored,
///   as compact JSON of the stored value (storage version, `managedFields` when recorded), 0
///   for none (before a create, after a delete); a request that commits nothing (409, 422, no-op,
///   dry run) counts neither;
/// - `watch`: the watch lines the commits queued for open watches, each line's length once per
///   watch it went to (what the server writes on the wire: lines queued together are sent in one
///   chunk, with the same bytes). A watch's initial events and bookmarks are not counted: they
///   are reads, served from the watch cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByteCounts {
    /// Request bodies.
    pub request: u64,
    /// Stored objects replaced (or deleted) by the commits.
    pub stored_before: u64,
    /// Stored objects written by the commits.
    pub stored_after: u64,
    /// Watch lines sent for the commits, once per watch.
    pub watch: u64,
}

impl ByteCounts {
    /// All of them: request + stored before + stored after + watch.
    pub fn total(&self) -> u64 {
        self.request
            .saturating_add(self.stored_before)
            .saturating_add(self.stored_after)
            .saturating_add(self.watch)
    }

    /// Stored before and after.
    pub fn stored(&self) -> u64 {
        self.stored_before.saturating_add(self.stored_after)
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &ByteCounts) {
        self.request = self.request.saturating_add(other.request);
        self.stored_before = self.stored_before.saturating_add(other.stored_before);
        self.stored_after = self.stored_after.saturating_add(other.stored_after);
        self.watch = self.watch.saturating_add(other.watch);
    }
}

impl Stats {
    /// Requests with this verb on this resource, any group and subresource.
    pub fn count(&self, verb: Verb, resource: &str) -> u64 {
        self.requests
            .iter()
            .filter(|(k, _)| k.verb == verb && k.resource == resource)
            .fold(0, |sum, (_, n)| sum.saturating_add(*n))
    }

    /// Requests with a writing verb, on any resource.
    pub fn write_requests(&self) -> u64 {
        self.requests
            .iter()
            .filter(|(k, _)| k.verb.is_write())
            .fold(0, |sum, (_, n)| sum.saturating_add(*n))
    }

    /// The bytes of write requests on this resource, any verb, group and subresource.
    pub fn bytes_of(&self, resource: &str) -> ByteCounts {
        let mut sum = ByteCounts::default();
        for (_, counts) in self
            .bytes_by_request
            .iter()
            .filter(|(k, _)| k.resource == resource)
        {
            sum.add(counts);
        }
        sum
    }

    /// Adds a write request's bytes to the totals and to its key's.
    pub(crate) fn record_bytes(&mut self, key: &RequestKey, counts: &ByteCounts) {
        self.bytes.add(counts);
        if let Some(by_key) = self.bytes_by_request.get_mut(key) {
            by_key.add(counts);
        } else {
            self.bytes_by_request.insert(key.clone(), *counts);
        }
    }

    pub(crate) fn record(&mut self, key: RequestKey) {
        let n = self.requests.entry(key).or_insert(0);
        *n = n.saturating_add(1);
    }
}

/// What a fault does to a matching request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultAction {
    /// Answer with this HTTP code and the apiserver's Status for it, without
    /// touching the store: 409 is the optimistic-lock conflict on the named
    /// object, 429 carries `Retry-After`, 500 is an internal error, other codes
    /// get the apiserver's generic message.
    Respond {
        /// The HTTP status code.
        code: u16,
        /// `Retry-After` seconds (429 only).
        retry_after_seconds: u32,
    },
    /// Wait, then serve the request normally.
    Delay(Duration),
    /// Serve the request (a write commits), then answer 500 instead.
    CommitThenFail,
    /// Serve the request (a write commits), then drop the connection: the
    /// `Service` returns an error, as a broken connection would.
    CommitThenDisconnect,
    /// Drop the connection without serving the request.
    Disconnect,
    /// Answer a watch with HTTP 200 and an `ERROR` event `410 Expired`, as for
    /// a too old resourceVersion.
    WatchGone,
    /// Serve the request (a write commits), tell the test through the
    /// [`Stall`], then never answer: the client is left waiting, as when its
    /// process dies right after the write (the test then aborts it).
    CommitThenStall(Stall),
    /// Tell the test through the [`Gate`] that the request arrived, wait until the test opens
    /// it, then serve the request normally: the test acts while the request is in flight, as
    /// another actor would in that moment.
    Hold(Gate),
}

/// The signal of a [`FaultAction::CommitThenStall`]: notified once the write
/// has committed. Two stalls are equal when they are the same signal.
#[derive(Debug, Clone, Default)]
pub struct Stall(pub std::sync::Arc<tokio::sync::Notify>);

impl PartialEq for Stall {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Stall {}

/// The gate of a [`FaultAction::Hold`]. Two gates are equal when they are the same gate.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    arrived: std::sync::Arc<tokio::sync::Notify>,
    open: std::sync::Arc<tokio::sync::Notify>,
}

impl Gate {
    /// Waits until the held request has arrived (at once if it already has).
    pub async fn arrived(&self) {
        self.arrived.notified().await;
    }

    /// Lets the held request through (now, or as soon as it arrives).
    pub fn open(&self) {
        self.open.notify_one();
    }

    /// The handler's side: says it arrived, then waits to be let through.
    pub(crate) async fn pass(&self) {
        self.arrived.notify_one();
        self.open.notified().await;
    }
}

impl PartialEq for Gate {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.arrived, &other.arrived)
    }
}

impl Eq for Gate {}

/// Which subresource a fault matches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SubresourceMatch {
    Any,
    Main,
    Named(String),
}

/// A fault-injection rule; build with [`Fault::on`] or [`Fault::any`], then
/// add it with [`crate::ApiServer::inject`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    verb: Option<Verb>,
    /// Match only writes (create, update, patch, delete, delete collection).
    writes_only: bool,
    /// Matching requests to let through before acting.
    skip: u32,
    group: Option<String>,
    resource: Option<String>,
    subresource: SubresourceMatch,
    name: Option<String>,
    /// `None` for every matching request.
    times: Option<u32>,
    action: FaultAction,
}

impl Fault {
    /// A rule for requests of one verb; by default it matches any resource,
    /// acts once and answers 500.
    pub fn on(verb: Verb) -> Self {
        Self {
            verb: Some(verb),
            ..Self::any()
        }
    }

    /// A rule for requests of any verb.
    pub fn any() -> Self {
        Self {
            verb: None,
            writes_only: false,
            skip: 0,
            group: None,
            resource: None,
            subresource: SubresourceMatch::Any,
            name: None,
            times: Some(1),
            action: FaultAction::Respond {
                code: 500,
                retry_after_seconds: 0,
            },
        }
    }

    /// Only requests on this resource (plural), of any group unless [`Fault::group`] says.
    #[must_use]
    pub fn resource(mut self, plural: &str) -> Self {
        self.resource = Some(plural.into());
        self
    }

    /// Only requests on this API group (empty for core).
    #[must_use]
    pub fn group(mut self, group: &str) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Only requests on this subresource, e.g. `status`.
    #[must_use]
    pub fn subresource(mut self, subresource: &str) -> Self {
        self.subresource = SubresourceMatch::Named(subresource.into());
        self
    }

    /// Only requests on the main resource, not a subresource.
    #[must_use]
    pub fn main_resource(mut self) -> Self {
        self.subresource = SubresourceMatch::Main;
        self
    }

    /// Only requests on the object with this name.
    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Act on the next `n` matching requests (the default is 1).
    #[must_use]
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }

    /// Act on every matching request until the faults are cleared.
    #[must_use]
    pub fn always(mut self) -> Self {
        self.times = None;
        self
    }

    /// Do this to matching requests.
    #[must_use]
    pub fn then(mut self, action: FaultAction) -> Self {
        self.action = action;
        self
    }

    /// Answer `409 Conflict` (the stale-resourceVersion message).
    #[must_use]
    pub fn conflict(self) -> Self {
        self.then(FaultAction::Respond {
            code: 409,
            retry_after_seconds: 0,
        })
    }

    /// Answer `422 Invalid`.
    #[must_use]
    pub fn invalid(self) -> Self {
        self.then(FaultAction::Respond {
            code: 422,
            retry_after_seconds: 0,
        })
    }

    /// Answer `429 TooManyRequests` with `Retry-After`.
    #[must_use]
    pub fn too_many_requests(self, retry_after_seconds: u32) -> Self {
        self.then(FaultAction::Respond {
            code: 429,
            retry_after_seconds,
        })
    }

    /// Answer `500 InternalError`.
    #[must_use]
    pub fn internal_error(self) -> Self {
        self.then(FaultAction::Respond {
            code: 500,
            retry_after_seconds: 0,
        })
    }

    /// Delay, then serve normally.
    #[must_use]
    pub fn delay(self, by: Duration) -> Self {
        self.then(FaultAction::Delay(by))
    }

    /// Hold the request at `gate` until the test opens it, then serve normally.
    #[must_use]
    pub fn hold(self, gate: &Gate) -> Self {
        self.then(FaultAction::Hold(gate.clone()))
    }

    /// Commit the write, then answer 500.
    #[must_use]
    pub fn commit_then_fail(self) -> Self {
        self.then(FaultAction::CommitThenFail)
    }

    /// Commit the write, then drop the connection.
    #[must_use]
    pub fn commit_then_disconnect(self) -> Self {
        self.then(FaultAction::CommitThenDisconnect)
    }

    /// Drop the connection without serving.
    #[must_use]
    pub fn disconnect(self) -> Self {
        self.then(FaultAction::Disconnect)
    }

    /// Answer a watch with `410 Gone`.
    #[must_use]
    pub fn watch_gone(self) -> Self {
        self.then(FaultAction::WatchGone)
    }

    /// A rule for write requests of any verb (create, update, patch, delete).
    pub fn writes() -> Self {
        Self {
            writes_only: true,
            ..Self::any()
        }
    }

    /// Lets the first `n` matching requests through untouched, then acts.
    pub fn after(mut self, n: u32) -> Self {
        self.skip = n;
        self
    }

    /// Commits the write, signals `stall`, and never answers.
    pub fn commit_then_stall(self, stall: &Stall) -> Self {
        self.then(FaultAction::CommitThenStall(stall.clone()))
    }

    fn matches(&self, key: &RequestKey, name: Option<&str>) -> bool {
        (!self.writes_only || key.verb.is_write())
            && self.verb.is_none_or(|v| v == key.verb)
            && self.group.as_ref().is_none_or(|g| *g == key.group)
            && self.resource.as_ref().is_none_or(|r| *r == key.resource)
            && match &self.subresource {
                SubresourceMatch::Any => true,
                SubresourceMatch::Main => key.subresource.is_none(),
                SubresourceMatch::Named(s) => key.subresource.as_ref() == Some(s),
            }
            && self.name.as_deref().is_none_or(|n| Some(n) == name)
    }
}

/// Takes the action of the first rule matching the request, using one of
/// its `times` (and dropping the rule once they are used up).
pub(crate) fn take(
    rules: &mut Vec<Fault>,
    key: &RequestKey,
    name: Option<&str>,
) -> Option<FaultAction> {
    let i = rules
        .iter()
        .position(|r| r.times != Some(0) && r.matches(key, name))?;
    let rule = rules.get_mut(i)?;
    if rule.skip > 0 {
        rule.skip = rule.skip.saturating_sub(1);
        return None;
    }
    let action = rule.action.clone();
    rule.times = rule.times.map(|t| t.saturating_sub(1));
    if rule.times == Some(0) {
        rules.remove(i);
    }
    Some(action)
}
