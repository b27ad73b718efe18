//! Scenario tests of the tenant and node reconciles against a scripted mock API (tower-test), the
//! kube-rs way: each test states the exact requests the controller must send (method, path,
//! resourceVersion in the body) and answers them as the apiserver would. A missing or extra
//! request fails the test. Node status writes are JSON patches: the harness applies each to the
//! node as the mock last served it (seeded, read, or written), so a test reads the object the
//! patch gives.
//!
//! ```text
//!   main.rs    the harness: context over the mock, expect / answer helpers, the seed's fixtures
//!   tenant.rs  tenant scenarios: place, conflict, pending, resize, suspend, delete, bad input
//!   node.rs    node scenarios: orphaned entries confirmed by a direct read, the node finalizer
//! ```
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

mod node;
mod tenant;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tenant_placer::api::TENANT_FINALIZER;
use tenant_placer::api::{AllocationEntry, Node, ResourceAmounts, Tenant, TenantStatus};
use tenant_placer::controller::{
    Engine, EngineConfig, NodeLoop, RetryPolicy, Settings, Synced, TenantCache, TenantLoop,
    WaitingRoom,
};
use tenant_placer::testing::{self, NodeBuilder, TenantBuilder};

pub type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

pub const NODES: &str = "/apis/placement.tenant-placer.dev/v1alpha1/nodes";
pub const TENANTS: &str = "/apis/placement.tenant-placer.dev/v1alpha1/namespaces/default/tenants";

pub const fn amounts(threads: i64, memory_gb: i64, storage_gb: i64) -> ResourceAmounts {
    ResourceAmounts::new(threads, memory_gb, storage_gb)
}

/// The seed's node-eu-1 (64 threads, 256 GB, 8000 GB) as read at `rv`.
pub fn eu1(rv: u64) -> NodeBuilder {
    testing::node("node-eu-1")
        .capacity(64, 256, 8000)
        .resource_version(rv)
}

/// The seed's node-eu-2 (32 threads, 128 GB, 4000 GB) as read at `rv`.
pub fn eu2(rv: u64) -> NodeBuilder {
    testing::node("node-eu-2")
        .capacity(32, 128, 4000)
        .resource_version(rv)
}

/// A tenant as the mock's cache holds it: resourceVersion 100, with the finalizer.
pub fn tenant(name: &str) -> TenantBuilder {
    testing::tenant(name)
        .resource_version(100)
        .finalizer(TENANT_FINALIZER)
}

/// The seed's acme: 2 threads, 4 GB, 20 GB, Standalone.
pub fn acme() -> TenantBuilder {
    tenant("acme").resources(2, 4, 20)
}

/// The seed's big, which fits on no node: 256 threads, 1024 GB, 100000 GB.
pub fn big() -> TenantBuilder {
    tenant("big").resources(256, 1024, 100_000)
}

/// What a loop runs over: a mock client, an engine whose node cache is already synced with
/// `nodes`, an empty, synced tenant cache (every entry's tenant must be confirmed by a direct
/// read), a waiting room and settings with short retries.
struct Parts {
    client: Client,
    engine: Arc<Engine>,
    tenants: TenantCache,
    waiting: Arc<WaitingRoom>,
    settings: Settings,
}

thread_local! {
    /// Each node as the mock last served it, by name: what a node status patch applies to. The
    /// tests run on one thread each (current-thread runtimes).
    static SERVED: RefCell<HashMap<String, Value>> = RefCell::new(HashMap::new());
}

/// Remembers a node object the mock served (seeded, read or written).
fn served(node: &Value) {
    if let Some(name) = node["metadata"]["name"].as_str() {
        SERVED.with(|s| s.borrow_mut().insert(name.to_owned(), node.clone()));
    }
}

fn parts(nodes: impl IntoIterator<Item = impl Into<Node>>) -> (Parts, Handle, Writer<Node>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (cache, mut writer) = reflector::store::<Node>();
    writer.apply_watcher_event(&watcher::Event::Init);
    SERVED.with(|s| s.borrow_mut().clear());
    for node in nodes {
        let node: Node = node.into();
        served(&serde_json::to_value(&node).unwrap());
        writer.apply_watcher_event(&watcher::Event::InitApply(node));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let retry = RetryPolicy {
        jitter: Duration::from_millis(1),
        ..RetryPolicy::default()
    };
    let engine = Engine::start(
        Api::all(client.clone()),
        cache,
        Synced::already(),
        EngineConfig {
            retry,
            ..EngineConfig::default()
        },
    );
    let parts = Parts {
        client,
        engine: Arc::new(engine),
        tenants: TenantCache::default(),
        waiting: Arc::new(WaitingRoom::new().0),
        settings: Settings {
            retry,
            ..Settings::default()
        },
    };
    (parts, handle, writer)
}

/// The tenant loop over a mock client, with the node cache already synced with `nodes`.
pub fn context(
    nodes: impl IntoIterator<Item = impl Into<Node>>,
) -> (Arc<TenantLoop>, Handle, Writer<Node>) {
    let (p, handle, writer) = parts(nodes);
    let ctx = TenantLoop::new(
        p.client,
        p.engine,
        p.tenants,
        p.waiting,
        (&p.settings).into(),
    );
    (Arc::new(ctx), handle, writer)
}

/// The node loop over a mock client, with the node cache already synced with `nodes`.
pub fn node_context(
    nodes: impl IntoIterator<Item = impl Into<Node>>,
) -> (Arc<NodeLoop>, Handle, Writer<Node>) {
    let (p, handle, writer) = parts(nodes);
    let tenants = (p.tenants, Synced::already());
    let ctx = NodeLoop::new(p.client, p.engine, tenants, p.waiting, (&p.settings).into());
    (Arc::new(ctx), handle, writer)
}

/// One expected request, answered by `respond` from the request body.
pub async fn expect(
    handle: &mut Handle,
    method: Method,
    path: &str,
    respond: impl FnOnce(&Value) -> (StatusCode, Value),
) -> Value {
    let (request, send) = tokio::time::timeout(Duration::from_secs(1), handle.next_request())
        .await
        .unwrap_or_else(|_| panic!("expected {method} {path}, but no request came"))
        .expect("the client is gone");
    assert_eq!(
        request.method(),
        method,
        "method of the request to {}",
        request.uri()
    );
    assert_eq!(request.uri().path(), path, "path of the {method} request");
    let node_status_patch =
        method == Method::PATCH && path.starts_with(NODES) && path.ends_with("/status");
    if node_status_patch {
        assert_eq!(
            request.headers()[http::header::CONTENT_TYPE],
            "application/json-patch+json",
            "a node status write is a JSON patch"
        );
    }
    let body = request.into_body().collect_bytes().await.unwrap();
    let mut body: Value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap()
    };
    if node_status_patch {
        // What the patch gives, applied to the node as served: a patch computed from any other
        // copy fails here.
        let name = path.trim_end_matches("/status").rsplit('/').next().unwrap();
        let mut node = SERVED.with(|s| s.borrow().get(name).cloned()).unwrap();
        let patch: json_patch::Patch = serde_json::from_value(body).unwrap();
        json_patch::patch(&mut node, &patch).unwrap();
        body = node;
    }
    let (status, answer) = respond(&body);
    if status == StatusCode::OK && path.starts_with(NODES) {
        served(&answer);
    }
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&answer).unwrap()))
            .unwrap(),
    );
    body
}

/// Answers a node status write as the apiserver does when the resourceVersion matches: the
/// object written, at rv + 1.
pub fn accept_write(body: &Value) -> (StatusCode, Value) {
    let mut written = body.clone();
    let rv: u64 = body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    written["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
    (StatusCode::OK, written)
}

pub fn conflict(name: &str) -> (StatusCode, Value) {
    (
        StatusCode::CONFLICT,
        json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
            "message": format!("Operation cannot be fulfilled on nodes.placement.tenant-placer.dev \"{name}\": the object has been modified; please apply your changes to the latest version and try again"),
        }),
    )
}

/// Answers a status merge patch by applying it to `tenant`.
pub fn patched(tenant: &Tenant) -> impl FnOnce(&Value) -> (StatusCode, Value) + '_ {
    move |patch| {
        let mut object = serde_json::to_value(tenant).unwrap();
        json_patch::merge(&mut object, patch);
        (StatusCode::OK, object)
    }
}

/// The tenant's status merge patch, answered by applying it.
pub async fn expect_status(handle: &mut Handle, name: &str, tenant: &Tenant) -> TenantStatus {
    let patch = expect(
        handle,
        Method::PATCH,
        &format!("{TENANTS}/{name}/status"),
        patched(tenant),
    )
    .await;
    status_of(&patch)
}

/// Nothing more was sent: drops `held` (what still holds a client: the context, the engine)
/// and waits for the positive signal that every client is gone (the mock's channel closes),
/// failing on any request found before it. A client still held after 5 s fails too: something
/// the scenario started is still running.
pub async fn expect_no_more_requests<T>(mut handle: Handle, held: T) {
    drop(held);
    match tokio::time::timeout(Duration::from_secs(5), handle.next_request()).await {
        Ok(None) => {}
        Ok(Some((request, _))) => {
            panic!("unexpected request {} {}", request.method(), request.uri())
        }
        Err(_) => panic!("a client is still held 5 s after the scenario ended"),
    }
}

/// Runs a scenario with a deadline: a regression that leaves the reconcile waiting fails the
/// test instead of hanging it.
pub async fn within<F: std::future::Future>(scenario: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), scenario)
        .await
        .expect("the scenario did not finish within 10 s")
}

pub fn status_of(patch: &Value) -> TenantStatus {
    serde_json::from_value(patch["status"].clone()).unwrap()
}

pub fn allocations(written: &Value) -> Vec<AllocationEntry> {
    serde_json::from_value(written["status"]["allocations"].clone()).unwrap()
}

/// Applies a tenant status patch to the tenant, as the next reconcile would see it.
pub fn with_status(mut tenant: Tenant, patch: &Value) -> Tenant {
    tenant.status = Some(status_of(patch));
    tenant
}

#[test]
fn the_kind_names_match_the_design() {
    assert_eq!(Tenant::group(&()), "placement.tenant-placer.dev");
    assert_eq!(Tenant::plural(&()), "tenants");
    assert_eq!(Node::plural(&()), "nodes");
    assert_eq!(acme().build().name_any(), "acme");
}
