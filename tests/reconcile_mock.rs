//! Scenario tests of the tenant reconcile against a scripted mock API (tower-test), the kube-rs way:
//! each test states the exact requests the controller must send (method, path, resourceVersion in
//! the body) and answers them as the apiserver would. A missing or extra request fails the test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tenant_placer::api::{
    AllocationEntry, NODE_FINALIZER, Node, NodeSpec, NodeState, NodeStatus, ResourceAmounts,
    Tenant, TenantMode, TenantPhase, TenantSpec,
};
use tenant_placer::controller::tenant::{FINALIZER, reconcile};
use tenant_placer::controller::{Context, EngineConfig, NodeWriter, RetryPolicy, Settings, Synced};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

const NODES: &str = "/apis/placement.tenant-placer.dev/v1alpha1/nodes";
const TENANTS: &str = "/apis/placement.tenant-placer.dev/v1alpha1/namespaces/default/tenants";

const fn amounts(threads: i64, memory_gb: i64, storage_gb: i64) -> ResourceAmounts {
    ResourceAmounts::new(threads, memory_gb, storage_gb)
}

fn node(name: &str, capacity: ResourceAmounts, rv: u64, allocations: Vec<AllocationEntry>) -> Node {
    let mut node = Node::new(
        name,
        NodeSpec {
            capacity,
            state: NodeState::Online,
            overcommit: None,
        },
    );
    node.metadata.resource_version = Some(rv.to_string());
    node.metadata.generation = Some(1);
    node.status = Some(NodeStatus {
        allocations,
        ..NodeStatus::default()
    });
    node
}

fn eu1(rv: u64, allocations: Vec<AllocationEntry>) -> Node {
    node("node-eu-1", amounts(64, 256, 8000), rv, allocations)
}

fn eu2(rv: u64) -> Node {
    node("node-eu-2", amounts(32, 128, 4000), rv, vec![])
}

fn tenant(name: &str, resources: ResourceAmounts, mode: TenantMode) -> Tenant {
    let mut tenant = Tenant::new(
        name,
        TenantSpec {
            resources,
            mode,
            replicas: None,
            suspend: false,
        },
    );
    tenant.metadata.namespace = Some("default".into());
    tenant.metadata.uid = Some(format!("uid-{name}"));
    tenant.metadata.generation = Some(1);
    tenant.metadata.resource_version = Some("100".into());
    tenant.metadata.finalizers = Some(vec![FINALIZER.into()]);
    tenant
}

fn acme() -> Tenant {
    tenant("acme", amounts(2, 4, 20), TenantMode::Standalone)
}

fn entry(name: &str, resources: ResourceAmounts) -> AllocationEntry {
    AllocationEntry {
        tenant: format!("default/{name}"),
        uid: format!("uid-{name}"),
        resources,
    }
}

/// A context over a mock client, with the node cache already synced with `nodes`.
fn context(nodes: Vec<Node>) -> (Arc<Context>, Handle, Writer<Node>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (cache, mut writer) = reflector::store::<Node>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for node in nodes {
        writer.apply_watcher_event(&watcher::Event::InitApply(node));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let retry = RetryPolicy {
        jitter: Duration::from_millis(1),
        ..RetryPolicy::default()
    };
    let node_writer = NodeWriter::start(
        Api::all(client.clone()),
        cache,
        Synced::already(),
        EngineConfig {
            retry,
            ..EngineConfig::default()
        },
    );
    let (tenants, mut tenant_cache) = reflector::store::<Tenant>();
    // An empty, synced tenant cache: every entry's tenant must be confirmed by a direct read.
    tenant_cache.apply_watcher_event(&watcher::Event::InitDone);
    let ctx = Arc::new(Context::new(
        client,
        node_writer,
        tenants,
        Synced::already(),
        std::sync::Arc::new(tenant_placer::controller::WaitingRoom::new().0),
        Settings {
            retry,
            ..Settings::default()
        },
    ));
    (ctx, handle, writer)
}

/// One expected request, answered by `respond` from the request body.
async fn expect(
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
    let body = request.into_body().collect_bytes().await.unwrap();
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap()
    };
    let (status, answer) = respond(&body);
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&answer).unwrap()))
            .unwrap(),
    );
    body
}

/// Answers a status PUT as the apiserver does when the resourceVersion matches: rv + 1.
fn accept_put(body: &Value) -> (StatusCode, Value) {
    let mut written = body.clone();
    let rv: u64 = body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    written["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
    (StatusCode::OK, written)
}

fn conflict(name: &str) -> (StatusCode, Value) {
    (
        StatusCode::CONFLICT,
        json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
            "message": format!("Operation cannot be fulfilled on nodes.placement.tenant-placer.dev \"{name}\": the object has been modified; please apply your changes to the latest version and try again"),
        }),
    )
}

/// Answers a status merge patch by applying it to `tenant`.
fn patched(tenant: &Tenant) -> impl FnOnce(&Value) -> (StatusCode, Value) + '_ {
    move |patch| {
        let mut object = serde_json::to_value(tenant).unwrap();
        json_patch::merge(&mut object, patch);
        (StatusCode::OK, object)
    }
}

/// The tenant's status merge patch, answered by applying it.
async fn expect_status(
    handle: &mut Handle,
    name: &str,
    tenant: &Tenant,
) -> tenant_placer::api::TenantStatus {
    let patch = expect(
        handle,
        Method::PATCH,
        &format!("{TENANTS}/{name}/status"),
        patched(tenant),
    )
    .await;
    status_of(&patch)
}

async fn expect_no_more_requests(handle: &mut Handle) {
    if let Ok(Some((request, _))) =
        tokio::time::timeout(Duration::from_millis(100), handle.next_request()).await
    {
        panic!("unexpected request {} {}", request.method(), request.uri());
    }
}

fn status_of(patch: &Value) -> tenant_placer::api::TenantStatus {
    serde_json::from_value(patch["status"].clone()).unwrap()
}

fn allocations(put: &Value) -> Vec<AllocationEntry> {
    serde_json::from_value(put["status"]["allocations"].clone()).unwrap()
}

/// Applies a tenant status patch to the tenant, as the next reconcile would see it.
fn with_status(mut tenant: Tenant, patch: &Value) -> Tenant {
    tenant.status = Some(status_of(patch));
    tenant
}

#[tokio::test]
async fn placing_acme_puts_node_eu_1_status_with_the_read_resource_version_then_writes_the_tenant_status()
 {
    let (ctx, mut api, _cache) = context(vec![eu1(10, vec![]), eu2(11)]);
    let acme = acme();
    let run = tokio::spawn(reconcile(Arc::new(acme.clone()), ctx));

    let put = expect(
        &mut api,
        Method::PUT,
        &format!("{NODES}/node-eu-1/status"),
        accept_put,
    )
    .await;
    assert_eq!(
        put["metadata"]["resourceVersion"], "10",
        "the PUT carries the version that was read"
    );
    assert_eq!(allocations(&put), vec![entry("acme", amounts(2, 4, 20))]);
    assert_eq!(
        put["status"]["allocated"],
        json!({"threads": 2, "memoryGb": 4, "storageGb": 20})
    );
    // free = 64-2, 256-4, 8000-20
    assert_eq!(
        put["status"]["free"],
        json!({"threads": 62, "memoryGb": 252, "storageGb": 7980})
    );
    assert_eq!(put["status"]["tenants"], 1);

    let status = expect_status(&mut api, "acme", &acme).await;
    assert_eq!(
        (status.phase, status.node_name.as_str()),
        (TenantPhase::Active, "node-eu-1")
    );
    assert_eq!(status.reserved, amounts(2, 4, 20));
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(status.conditions[0].type_, "Placed");
    assert_eq!(status.conditions[0].status, "True");

    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn a_conflict_leads_to_a_fresh_get_and_when_node_eu_1_is_now_full_acme_goes_to_node_eu_2() {
    let (ctx, mut api, _cache) = context(vec![eu1(10, vec![]), eu2(11)]);
    let acme = acme();
    let run = tokio::spawn(reconcile(Arc::new(acme.clone()), ctx));

    let first = expect(
        &mut api,
        Method::PUT,
        &format!("{NODES}/node-eu-1/status"),
        |_| conflict("node-eu-1"),
    )
    .await;
    assert_eq!(first["metadata"]["resourceVersion"], "10");
    // Meanwhile another tenant took 63 of node-eu-1's 64 threads: 1 free < 2 asked.
    let full = eu1(12, vec![entry("other", amounts(63, 1, 1))]);
    expect(&mut api, Method::GET, &format!("{NODES}/node-eu-1"), |_| {
        (StatusCode::OK, serde_json::to_value(&full).unwrap())
    })
    .await;
    let put = expect(
        &mut api,
        Method::PUT,
        &format!("{NODES}/node-eu-2/status"),
        accept_put,
    )
    .await;
    assert_eq!(put["metadata"]["resourceVersion"], "11");
    assert_eq!(allocations(&put), vec![entry("acme", amounts(2, 4, 20))]);
    let patch = expect(
        &mut api,
        Method::PATCH,
        &format!("{TENANTS}/acme/status"),
        patched(&acme),
    )
    .await;
    assert_eq!(status_of(&patch).node_name, "node-eu-2");

    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn conflicts_past_the_retry_budget_fail_the_reconcile_so_it_is_requeued_with_backoff() {
    let (ctx, mut api, _cache) = context(vec![eu1(10, vec![])]);
    let max = ctx.settings.retry.max_conflicts;
    let run = tokio::spawn(reconcile(Arc::new(acme()), ctx));
    for attempt in 0..=max {
        expect(
            &mut api,
            Method::PUT,
            &format!("{NODES}/node-eu-1/status"),
            |_| conflict("node-eu-1"),
        )
        .await;
        if attempt < max {
            let fresh = eu1(20 + u64::from(attempt), vec![]);
            expect(&mut api, Method::GET, &format!("{NODES}/node-eu-1"), |_| {
                (StatusCode::OK, serde_json::to_value(&fresh).unwrap())
            })
            .await;
        }
    }
    // The status says why nothing moved; the error requeues the tenant with backoff.
    let status = expect_status(&mut api, "acme", &acme()).await;
    assert_eq!(status.conditions[0].reason, "Undecided");
    assert!(
        status
            .message
            .starts_with("cannot be decided now, will retry: node node-eu-1 kept changing"),
        "{}",
        status.message
    );
    let error = run.await.unwrap().unwrap_err();
    assert_eq!(error.label(), "conflict_retries_exhausted");
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn big_ends_pending_capacity_with_an_empty_node_a_message_naming_the_shortfall_and_no_node_write()
 {
    let (ctx, mut api, _cache) = context(vec![eu1(10, vec![]), eu2(11)]);
    let big = tenant("big", amounts(256, 1024, 100_000), TenantMode::Standalone);
    let run = tokio::spawn(reconcile(Arc::new(big.clone()), ctx));

    let status = expect_status(&mut api, "big", &big).await;
    assert_eq!(status.phase, TenantPhase::PendingCapacity);
    assert_eq!(status.node_name, "");
    assert_eq!(status.reserved, amounts(0, 0, 0));
    // Largest free: 64 threads, 256 GB, 8000 GB (node-eu-1).
    assert_eq!(
        status.message,
        "waiting for capacity for 256 threads, 1024 GB memory, 100000 GB storage: no node has room: \
         threads: needs 256, at most 64 free (short by 192); memoryGb: needs 1024, at most 256 free (short by 768); \
         storageGb: needs 100000, at most 8000 free (short by 92000)"
    );
    assert_eq!(status.conditions[0].status, "False");
    assert_eq!(status.conditions[0].reason, "NoCapacity");

    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn re_evaluating_a_pending_tenant_with_nothing_changed_sends_no_request() {
    let (ctx, mut api, _cache) = context(vec![eu1(10, vec![]), eu2(11)]);
    let big = tenant("big", amounts(256, 1024, 100_000), TenantMode::Standalone);
    let run = tokio::spawn(reconcile(Arc::new(big.clone()), ctx.clone()));
    let patch = expect(
        &mut api,
        Method::PATCH,
        &format!("{TENANTS}/big/status"),
        patched(&big),
    )
    .await;
    let first = run.await.unwrap().unwrap();

    let big = with_status(big, &patch);
    let again = reconcile(Arc::new(big), ctx).await.unwrap();
    expect_no_more_requests(&mut api).await;
    // The fallback re-check backs off: 60 s, then 120 s.
    assert_eq!(
        first,
        kube::runtime::controller::Action::requeue(Duration::from_secs(60))
    );
    assert_eq!(
        again,
        kube::runtime::controller::Action::requeue(Duration::from_secs(120))
    );
}

#[tokio::test]
async fn the_seed_trace_allocates_2_then_4_after_switching_to_cluster_then_0_after_delete() {
    let (ctx, mut api, _cache) = context(vec![eu1(10, vec![]), eu2(11)]);
    let threads = |put: &Value| put["status"]["allocated"]["threads"].as_i64().unwrap();

    // provision
    let acme = acme();
    let run = tokio::spawn(reconcile(Arc::new(acme.clone()), ctx.clone()));
    let put = expect(
        &mut api,
        Method::PUT,
        &format!("{NODES}/node-eu-1/status"),
        accept_put,
    )
    .await;
    assert_eq!(threads(&put), 2); // 2 threads x 1 replica
    let patch = expect(
        &mut api,
        Method::PATCH,
        &format!("{TENANTS}/acme/status"),
        patched(&acme),
    )
    .await;
    run.await.unwrap().unwrap();

    // switch_mode to Cluster: replicas default to 2
    let mut cluster = with_status(acme.clone(), &patch);
    cluster.spec.mode = TenantMode::Cluster;
    cluster.metadata.generation = Some(2);
    let run = tokio::spawn(reconcile(Arc::new(cluster.clone()), ctx.clone()));
    let put = expect(
        &mut api,
        Method::PUT,
        &format!("{NODES}/node-eu-1/status"),
        accept_put,
    )
    .await;
    assert_eq!(
        put["metadata"]["resourceVersion"], "11",
        "the version our own write returned"
    );
    assert_eq!(threads(&put), 4); // 2 threads x 2 replicas
    assert_eq!(allocations(&put), vec![entry("acme", amounts(4, 8, 40))]);
    let patch = expect(
        &mut api,
        Method::PATCH,
        &format!("{TENANTS}/acme/status"),
        patched(&cluster),
    )
    .await;
    assert_eq!(status_of(&patch).reserved, amounts(4, 8, 40));
    assert_eq!(status_of(&patch).observed_generation, Some(2));
    run.await.unwrap().unwrap();

    // terminate: the entry goes first, the finalizer second
    let mut deleting = with_status(cluster, &patch);
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let run = tokio::spawn(reconcile(Arc::new(deleting.clone()), ctx.clone()));
    let put = expect(
        &mut api,
        Method::PUT,
        &format!("{NODES}/node-eu-1/status"),
        accept_put,
    )
    .await;
    assert_eq!(threads(&put), 0);
    assert_eq!(allocations(&put), vec![]);
    assert_eq!(put["status"]["free"]["threads"], 64);
    let ops = expect(&mut api, Method::PATCH, &format!("{TENANTS}/acme"), |_| {
        (StatusCode::OK, serde_json::to_value(&deleting).unwrap())
    })
    .await;
    assert_eq!(
        ops,
        json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ])
    );
    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn a_second_delete_run_releases_nothing_more_and_only_removes_the_finalizer() {
    // The entry is already gone (the first run crashed after releasing, before the finalizer).
    let (ctx, mut api, _cache) = context(vec![eu1(10, vec![entry("other", amounts(1, 1, 1))])]);
    let mut deleting = acme();
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let run = tokio::spawn(reconcile(Arc::new(deleting.clone()), ctx));
    expect(&mut api, Method::PATCH, &format!("{TENANTS}/acme"), |_| {
        (StatusCode::OK, serde_json::to_value(&deleting).unwrap())
    })
    .await;
    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn a_resize_that_does_not_fit_keeps_the_old_reservation_in_phase_resizing() {
    // node-eu-1 holds acme (2 threads) and another tenant with 61: room for acme = 64 - 61 = 3.
    let (ctx, mut api, _cache) = context(vec![eu1(
        10,
        vec![
            entry("acme", amounts(2, 4, 20)),
            entry("other", amounts(61, 1, 1)),
        ],
    )]);
    let mut cluster = acme();
    cluster.spec.mode = TenantMode::Cluster; // needs 2 x 2 = 4 threads > 3
    let run = tokio::spawn(reconcile(Arc::new(cluster.clone()), ctx));
    let status = expect_status(&mut api, "acme", &cluster).await;
    assert_eq!(status.phase, TenantPhase::Resizing);
    assert_eq!(status.node_name, "node-eu-1");
    assert_eq!(
        status.reserved,
        amounts(2, 4, 20),
        "the old reservation stays"
    );
    assert!(
        status
            .message
            .contains("threads: needs 4, at most 3 free (short by 1)"),
        "{}",
        status.message
    );
    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn a_rerun_after_a_crash_between_the_node_write_and_the_tenant_write_adopts_the_entry() {
    // The node already holds acme's entry; acme's status was never written.
    let (ctx, mut api, _cache) = context(vec![
        eu1(11, vec![entry("acme", amounts(2, 4, 20))]),
        eu2(12),
    ]);
    let acme = acme();
    let run = tokio::spawn(reconcile(Arc::new(acme.clone()), ctx));
    // No PUT: straight to the tenant status.
    let status = expect_status(&mut api, "acme", &acme).await;
    assert_eq!(
        (status.phase, status.node_name.as_str()),
        (TenantPhase::Active, "node-eu-1")
    );
    assert_eq!(status.reserved, amounts(2, 4, 20));
    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn overflowing_replicas_times_memory_gives_a_clear_status_message_and_no_panic() {
    let (ctx, mut api, _cache) = context(vec![eu1(10, vec![])]);
    // i64::MAX / 2 + 1 GB per replica x 2 replicas is past int64.
    let mut huge = tenant("huge", amounts(1, i64::MAX / 2 + 1, 1), TenantMode::Cluster);
    huge.spec.replicas = Some(2);
    let run = tokio::spawn(reconcile(Arc::new(huge.clone()), ctx));
    let status = expect_status(&mut api, "huge", &huge).await;
    assert_eq!(status.phase, TenantPhase::Pending);
    assert_eq!(status.conditions[0].reason, "InvalidSpec");
    assert_eq!(
        status.message,
        "spec cannot be used, nothing changed: spec.resources x spec.replicas \
         (1 threads, 4611686018427387904 GB memory, 1 GB storage x 2) is past the largest integer the API stores"
    );
    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn a_tenant_without_the_finalizer_gets_it_by_a_guarded_json_patch_before_anything_is_reserved()
 {
    let (ctx, mut api, _cache) = context(vec![eu1(10, vec![])]);
    let mut fresh = acme();
    fresh.metadata.finalizers = None;
    let run = tokio::spawn(reconcile(Arc::new(fresh.clone()), ctx));
    let with_finalizer = acme();
    let ops = expect(&mut api, Method::PATCH, &format!("{TENANTS}/acme"), |_| {
        (
            StatusCode::OK,
            serde_json::to_value(&with_finalizer).unwrap(),
        )
    })
    .await;
    assert_eq!(
        ops,
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ])
    );
    expect(
        &mut api,
        Method::PUT,
        &format!("{NODES}/node-eu-1/status"),
        accept_put,
    )
    .await;
    expect(
        &mut api,
        Method::PATCH,
        &format!("{TENANTS}/acme/status"),
        patched(&with_finalizer),
    )
    .await;
    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn suspend_keeps_the_reservation_and_resume_without_a_node_goes_pending_capacity() {
    let (ctx, mut api, _cache) = context(vec![eu1(10, vec![entry("acme", amounts(2, 4, 20))])]);
    let mut suspended = acme();
    suspended.spec.suspend = true;
    let run = tokio::spawn(reconcile(Arc::new(suspended.clone()), ctx.clone()));
    let status = expect_status(&mut api, "acme", &suspended).await;
    assert_eq!(
        (status.phase, status.node_name.as_str()),
        (TenantPhase::Suspended, "node-eu-1")
    );
    run.await.unwrap().unwrap();

    // big, suspended with no node, is not placed; resumed it goes PendingCapacity.
    let mut big = tenant("big", amounts(256, 1024, 100_000), TenantMode::Standalone);
    big.spec.suspend = true;
    let run = tokio::spawn(reconcile(Arc::new(big.clone()), ctx.clone()));
    let patch = expect(
        &mut api,
        Method::PATCH,
        &format!("{TENANTS}/big/status"),
        patched(&big),
    )
    .await;
    assert_eq!(status_of(&patch).phase, TenantPhase::Suspended);
    assert_eq!(status_of(&patch).node_name, "");
    run.await.unwrap().unwrap();
    let mut resumed = with_status(big, &patch);
    resumed.spec.suspend = false;
    let run = tokio::spawn(reconcile(Arc::new(resumed.clone()), ctx));
    let patch = expect(
        &mut api,
        Method::PATCH,
        &format!("{TENANTS}/big/status"),
        patched(&resumed),
    )
    .await;
    assert_eq!(status_of(&patch).phase, TenantPhase::PendingCapacity);
    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn a_node_status_with_a_negative_amount_is_never_written_and_its_tenant_is_told_why() {
    let mut bad = eu1(10, vec![entry("acme", amounts(-3, 4, 20))]);
    bad.metadata.name = Some("node-eu-1".into());
    let (ctx, mut api, _cache) = context(vec![bad, eu2(11)]);
    let run = tokio::spawn(reconcile(Arc::new(acme()), ctx));
    let status = expect_status(&mut api, "acme", &acme()).await;
    assert_eq!(
        (status.phase, status.conditions[0].reason.as_str()),
        (TenantPhase::Pending, "Undecided")
    );
    assert!(status.message.contains("node-eu-1"), "{}", status.message);
    let error = run.await.unwrap().unwrap_err();
    assert_eq!(error.label(), "unreadable_node");
    assert_eq!(
        error.to_string(),
        "node node-eu-1 has allocations that cannot be read: \
         status.allocations[0].resources.threads is -3; amounts must be whole numbers of at least 0"
    );
    // Not placed on node-eu-2 either: that would reserve it twice.
    expect_no_more_requests(&mut api).await;
}

#[test]
fn the_kind_names_match_the_design() {
    assert_eq!(Tenant::group(&()), "placement.tenant-placer.dev");
    assert_eq!(Tenant::plural(&()), "tenants");
    assert_eq!(Node::plural(&()), "nodes");
    assert_eq!(acme().name_any(), "acme");
}

/// A node whose derived status already matches its allocations, so refresh writes nothing.
fn settled_node(allocations: Vec<AllocationEntry>) -> Node {
    let mut node = eu1(10, allocations.clone());
    let entries: Vec<placement::Entry> = allocations
        .iter()
        .map(|a| placement::Entry {
            uid: a.uid.clone(),
            tenant: a.tenant.clone(),
            resources: a.resources.to_resources().unwrap(),
        })
        .collect();
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let capacity = node.spec.capacity.to_resources().unwrap();
    node.status = Some(node.status_for(&entries, capacity, &now));
    node
}

#[tokio::test]
async fn an_entry_whose_tenant_is_confirmed_gone_by_a_direct_read_is_released() {
    let node = settled_node(vec![entry("ghost", amounts(2, 4, 20))]);
    let (ctx, mut api, _cache) = context(vec![node.clone()]);
    let run = tokio::spawn(tenant_placer::controller::node::reconcile(
        Arc::new(node),
        ctx,
    ));
    let not_found = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
        "message": "tenants.placement.tenant-placer.dev \"ghost\" not found"});
    expect(&mut api, Method::GET, &format!("{TENANTS}/ghost"), |_| {
        (StatusCode::NOT_FOUND, not_found)
    })
    .await;
    let put = expect(
        &mut api,
        Method::PUT,
        &format!("{NODES}/node-eu-1/status"),
        accept_put,
    )
    .await;
    assert_eq!(allocations(&put), vec![]);
    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn an_entry_missing_only_from_the_tenant_cache_is_kept() {
    let node = settled_node(vec![entry("acme", amounts(2, 4, 20))]);
    let (ctx, mut api, _cache) = context(vec![node.clone()]);
    let run = tokio::spawn(tenant_placer::controller::node::reconcile(
        Arc::new(node),
        ctx,
    ));
    let alive = acme();
    expect(&mut api, Method::GET, &format!("{TENANTS}/acme"), |_| {
        (StatusCode::OK, serde_json::to_value(&alive).unwrap())
    })
    .await;
    // The node holds an entry and lacks the reservations finalizer: a guarded JSON patch adds it.
    let mut guarded = settled_node(vec![entry("acme", amounts(2, 4, 20))]);
    guarded.metadata.finalizers = Some(vec![NODE_FINALIZER.to_owned()]);
    let patch = expect(
        &mut api,
        Method::PATCH,
        &format!("{NODES}/node-eu-1"),
        |_| (StatusCode::OK, serde_json::to_value(&guarded).unwrap()),
    )
    .await;
    assert_eq!(
        patch,
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [NODE_FINALIZER]},
        ])
    );
    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn an_entry_of_a_tenant_re_created_under_the_same_name_is_released() {
    let node = settled_node(vec![entry("acme", amounts(2, 4, 20))]);
    let (ctx, mut api, _cache) = context(vec![node.clone()]);
    let run = tokio::spawn(tenant_placer::controller::node::reconcile(
        Arc::new(node),
        ctx,
    ));
    let mut reborn = acme();
    reborn.metadata.uid = Some("uid-acme-2".into());
    expect(&mut api, Method::GET, &format!("{TENANTS}/acme"), |_| {
        (StatusCode::OK, serde_json::to_value(&reborn).unwrap())
    })
    .await;
    let put = expect(
        &mut api,
        Method::PUT,
        &format!("{NODES}/node-eu-1/status"),
        accept_put,
    )
    .await;
    assert_eq!(allocations(&put), vec![]);
    run.await.unwrap().unwrap();
    expect_no_more_requests(&mut api).await;
}

#[tokio::test]
async fn a_tenant_released_in_the_same_batch_that_would_place_it_is_not_placed() {
    let (service, mut api) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (cache, mut feed) = reflector::store::<Node>();
    feed.apply_watcher_event(&watcher::Event::Init);
    feed.apply_watcher_event(&watcher::Event::InitApply(eu1(64, vec![])));
    feed.apply_watcher_event(&watcher::Event::InitDone);
    // The engine decides nothing before this flag: both jobs wait in its queue, one batch.
    let (raise, synced) = Synced::flag();
    let writer = Arc::new(NodeWriter::start(
        Api::all(client),
        cache,
        synced,
        EngineConfig::default(),
    ));
    let wants = placement::TenantWants {
        uid: "uid-acme",
        tenant: "default/acme",
        footprint: placement::Resources::new(2, 4, 20),
        suspend: false,
        status_node: None,
    };
    let (settle, release) = {
        let (w1, w2) = (writer.clone(), writer.clone());
        (
            tokio::spawn(async move { w1.decide(&wants).await }),
            tokio::spawn(async move { w2.release("uid-acme", "default/acme").await }),
        )
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    raise.send(true).unwrap();
    assert!(release.await.unwrap().unwrap().is_empty());
    assert!(matches!(
        settle.await.unwrap(),
        Err(tenant_placer::error::Error::TenantReleased { .. })
    ));
    expect_no_more_requests(&mut api).await;
    // Once released, never placed again.
    assert!(matches!(
        writer.decide(&wants).await,
        Err(tenant_placer::error::Error::TenantReleased { .. })
    ));
}
