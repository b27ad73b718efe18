//! Tenant scenarios: placing under a guarded node status patch, conflicts, waiting for capacity, resizing,
//! suspending, deleting, and input that cannot be used.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{Value, json};
use tenant_placer::api::TENANT_FINALIZER;
use tenant_placer::api::{TenantMode, TenantPhase};
use tenant_placer::controller::tenant::reconcile;
use tenant_placer::controller::{Engine, EngineConfig, Synced};
use tenant_placer::testing::entry;

use crate::*;

#[tokio::test]
async fn placing_acme_patches_node_eu_1_status_with_the_read_resource_version_then_writes_the_tenant_status()
 {
    within(async move {
        let (ctx, mut api, _cache) = context([eu1(10), eu2(11)]);
        let acme = acme().build();
        let run = tokio::spawn(reconcile(Arc::new(acme.clone()), ctx));

        let written = expect(
            &mut api,
            Method::PATCH,
            &format!("{NODES}/node-eu-1/status"),
            accept_write,
        )
        .await;
        assert_eq!(
            written["metadata"]["resourceVersion"], "10",
            "the patch carries the version that was read"
        );
        assert_eq!(allocations(&written), vec![entry("acme", (2, 4, 20))]);
        assert_eq!(
            written["status"]["allocated"],
            json!({"threads": 2, "memoryGb": 4, "storageGb": 20})
        );
        // free = 64-2, 256-4, 8000-20
        assert_eq!(
            written["status"]["free"],
            json!({"threads": 62, "memoryGb": 252, "storageGb": 7980})
        );
        assert_eq!(written["status"]["tenants"], 1);

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
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn a_conflict_leads_to_a_fresh_get_and_when_node_eu_1_is_now_full_acme_goes_to_node_eu_2() {
    within(async move {
        let (ctx, mut api, _cache) = context([eu1(10), eu2(11)]);
        let acme = acme().build();
        let run = tokio::spawn(reconcile(Arc::new(acme.clone()), ctx));

        let first = expect(
            &mut api,
            Method::PATCH,
            &format!("{NODES}/node-eu-1/status"),
            |_| conflict("node-eu-1"),
        )
        .await;
        assert_eq!(first["metadata"]["resourceVersion"], "10");
        // Meanwhile another tenant took 63 of node-eu-1's 64 threads: 1 free < 2 asked.
        let full = eu1(12).holding("other", (63, 1, 1)).build();
        expect(&mut api, Method::GET, &format!("{NODES}/node-eu-1"), |_| {
            (StatusCode::OK, serde_json::to_value(&full).unwrap())
        })
        .await;
        let written = expect(
            &mut api,
            Method::PATCH,
            &format!("{NODES}/node-eu-2/status"),
            accept_write,
        )
        .await;
        assert_eq!(written["metadata"]["resourceVersion"], "11");
        assert_eq!(allocations(&written), vec![entry("acme", (2, 4, 20))]);
        let patch = expect(
            &mut api,
            Method::PATCH,
            &format!("{TENANTS}/acme/status"),
            patched(&acme),
        )
        .await;
        assert_eq!(status_of(&patch).node_name, "node-eu-2");

        run.await.unwrap().unwrap();
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn conflicts_past_the_retry_budget_fail_the_reconcile_so_it_is_requeued_with_backoff() {
    within(async move {
        let (ctx, mut api, _cache) = context([eu1(10)]);
        let max = RetryPolicy::default().max_conflicts;
        let run = tokio::spawn(reconcile(Arc::new(acme().build()), ctx));
        for attempt in 0..=max {
            expect(
                &mut api,
                Method::PATCH,
                &format!("{NODES}/node-eu-1/status"),
                |_| conflict("node-eu-1"),
            )
            .await;
            if attempt < max {
                let fresh = eu1(20 + u64::from(attempt)).build();
                expect(&mut api, Method::GET, &format!("{NODES}/node-eu-1"), |_| {
                    (StatusCode::OK, serde_json::to_value(&fresh).unwrap())
                })
                .await;
            }
        }
        // The status says why nothing moved; the error requeues the tenant with backoff.
        let status = expect_status(&mut api, "acme", &acme().build()).await;
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
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn big_ends_pending_capacity_with_an_empty_node_a_message_naming_the_shortfall_and_no_node_write()
 {
    within(async move {
        let (ctx, mut api, _cache) = context([eu1(10), eu2(11)]);
        let big = big().build();
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
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn re_evaluating_a_pending_tenant_with_nothing_changed_sends_no_request() {
    within(async move {
        let (ctx, mut api, _cache) = context([eu1(10), eu2(11)]);
        let big = big().build();
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
        expect_no_more_requests(api, ()).await;
        // The fallback re-check backs off: 60 s, then 120 s.
        assert_eq!(
            first,
            tenant_placer::controller::runner::Action::requeue(Duration::from_secs(60))
        );
        assert_eq!(
            again,
            tenant_placer::controller::runner::Action::requeue(Duration::from_secs(120))
        );
    })
    .await;
}

#[tokio::test]
async fn the_seed_trace_allocates_2_then_4_after_switching_to_cluster_then_0_after_delete() {
    within(async move {
        let (ctx, mut api, _cache) = context([eu1(10), eu2(11)]);
        let threads = |written: &Value| written["status"]["allocated"]["threads"].as_i64().unwrap();

        // provision
        let acme = acme().build();
        let run = tokio::spawn(reconcile(Arc::new(acme.clone()), ctx.clone()));
        let written = expect(
            &mut api,
            Method::PATCH,
            &format!("{NODES}/node-eu-1/status"),
            accept_write,
        )
        .await;
        assert_eq!(threads(&written), 2); // 2 threads x 1 replica
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
        let written = expect(
            &mut api,
            Method::PATCH,
            &format!("{NODES}/node-eu-1/status"),
            accept_write,
        )
        .await;
        assert_eq!(
            written["metadata"]["resourceVersion"], "11",
            "the version our own write returned"
        );
        assert_eq!(threads(&written), 4); // 2 threads x 2 replicas
        assert_eq!(allocations(&written), vec![entry("acme", (4, 8, 40))]);
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
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        let run = tokio::spawn(reconcile(Arc::new(deleting.clone()), ctx.clone()));
        let written = expect(
            &mut api,
            Method::PATCH,
            &format!("{NODES}/node-eu-1/status"),
            accept_write,
        )
        .await;
        assert_eq!(threads(&written), 0);
        assert_eq!(allocations(&written), vec![]);
        assert_eq!(written["status"]["free"]["threads"], 64);
        let ops = expect(&mut api, Method::PATCH, &format!("{TENANTS}/acme"), |_| {
            (StatusCode::OK, serde_json::to_value(&deleting).unwrap())
        })
        .await;
        assert_eq!(
            ops,
            json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": TENANT_FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ])
        );
        run.await.unwrap().unwrap();
        expect_no_more_requests(api, ctx).await;
    })
    .await;
}

#[tokio::test]
async fn a_second_delete_run_releases_nothing_more_and_only_removes_the_finalizer() {
    within(async move {
        // The entry is already gone (the first run crashed after releasing, before the finalizer).
        let (ctx, mut api, _cache) = context([eu1(10).holding("other", (1, 1, 1))]);
        let deleting = acme().deleting().build();
        let run = tokio::spawn(reconcile(Arc::new(deleting.clone()), ctx));
        expect(&mut api, Method::PATCH, &format!("{TENANTS}/acme"), |_| {
            (StatusCode::OK, serde_json::to_value(&deleting).unwrap())
        })
        .await;
        run.await.unwrap().unwrap();
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn a_resize_that_does_not_fit_keeps_the_old_reservation_in_phase_resizing() {
    within(async move {
        // node-eu-1 holds acme (2 threads) and another tenant with 61: room for acme = 64 - 61 = 3.
        let crowded = eu1(10)
            .holding("acme", (2, 4, 20))
            .holding("other", (61, 1, 1));
        let (ctx, mut api, _cache) = context([crowded]);
        let cluster = acme().mode(TenantMode::Cluster).build(); // needs 2 x 2 = 4 threads > 3
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
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn a_rerun_after_a_crash_between_the_node_write_and_the_tenant_write_adopts_the_entry() {
    within(async move {
        // The node already holds acme's entry; acme's status was never written.
        let (ctx, mut api, _cache) = context([eu1(11).holding("acme", (2, 4, 20)), eu2(12)]);
        let acme = acme().build();
        let run = tokio::spawn(reconcile(Arc::new(acme.clone()), ctx));
        // No node write: straight to the tenant status.
        let status = expect_status(&mut api, "acme", &acme).await;
        assert_eq!(
            (status.phase, status.node_name.as_str()),
            (TenantPhase::Active, "node-eu-1")
        );
        assert_eq!(status.reserved, amounts(2, 4, 20));
        run.await.unwrap().unwrap();
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn overflowing_replicas_times_memory_gives_a_clear_status_message_and_no_panic() {
    within(async move {
        let (ctx, mut api, _cache) = context([eu1(10)]);
        // i64::MAX / 2 + 1 GB per replica x 2 replicas is past int64.
        let huge = tenant("huge")
            .resources(1, i64::MAX / 2 + 1, 1)
            .mode(TenantMode::Cluster)
            .replicas(2)
            .build();
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
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn a_tenant_without_the_finalizer_gets_it_by_a_guarded_json_patch_before_anything_is_reserved()
 {
    within(async move {
        let (ctx, mut api, _cache) = context([eu1(10)]);
        let mut fresh = acme().build();
        fresh.metadata.finalizers = None;
        let run = tokio::spawn(reconcile(Arc::new(fresh.clone()), ctx));
        let with_finalizer = acme().build();
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
                {"op": "add", "path": "/metadata/finalizers", "value": [TENANT_FINALIZER]},
            ])
        );
        expect(
            &mut api,
            Method::PATCH,
            &format!("{NODES}/node-eu-1/status"),
            accept_write,
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
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn suspend_keeps_the_reservation_and_resume_without_a_node_goes_pending_capacity() {
    within(async move {
        let (ctx, mut api, _cache) = context([eu1(10).holding("acme", (2, 4, 20))]);
        let suspended = acme().suspended().build();
        let run = tokio::spawn(reconcile(Arc::new(suspended.clone()), ctx.clone()));
        let status = expect_status(&mut api, "acme", &suspended).await;
        assert_eq!(
            (status.phase, status.node_name.as_str()),
            (TenantPhase::Suspended, "node-eu-1")
        );
        run.await.unwrap().unwrap();

        // big, suspended with no node, is not placed; resumed it goes PendingCapacity.
        let big = big().suspended().build();
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
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn a_node_status_with_a_negative_amount_is_never_written_and_its_tenant_is_told_why() {
    within(async move {
        let bad = eu1(10).holding("acme", (-3, 4, 20));
        let (ctx, mut api, _cache) = context([bad, eu2(11)]);
        let run = tokio::spawn(reconcile(Arc::new(acme().build()), ctx));
        let status = expect_status(&mut api, "acme", &acme().build()).await;
        assert_eq!(
            (status.phase, status.conditions[0].reason.as_str()),
            (TenantPhase::Pending, "Undecided")
        );
        assert!(status.message.contains("node-eu-1"), "{}", status.message);
        let error = run.await.unwrap().unwrap_err();
        assert_eq!(error.label(), "unreadable_node");
        assert_eq!(
            error.to_string(),
            "node node-eu-1 cannot be read: \
             status.allocations[0].resources.threads is -3; amounts must be whole numbers of at least 0; \
             its reservations are kept until it is fixed"
        );
        // Not placed on node-eu-2 either: that would reserve it twice.
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn a_tenant_released_in_the_same_batch_that_would_place_it_is_not_placed() {
    within(async move {
        let (service, api) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let (cache, mut feed) = reflector::store::<Node>();
        feed.apply_watcher_event(&watcher::Event::Init);
        feed.apply_watcher_event(&watcher::Event::InitApply(eu1(64).build()));
        feed.apply_watcher_event(&watcher::Event::InitDone);
        // The engine decides nothing before this flag: both jobs wait in its queue, one batch.
        let (raise, synced) = Synced::flag();
        let writer = Arc::new(Engine::start(
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
            migration: None,
            asked: None,
            node_selector: None,
        };
        let mut settle = Box::pin(writer.decide(&wants));
        let mut release = Box::pin(writer.release("uid-acme", "default/acme"));
        // One poll each hands its job to the engine and waits for the answer: both are in its
        // queue before it may decide anything, so they share one batch.
        assert!(futures::poll!(&mut settle).is_pending());
        assert!(futures::poll!(&mut release).is_pending());
        raise.send(true).unwrap();
        assert!(release.await.unwrap().is_empty());
        assert!(matches!(
            settle.await,
            Err(tenant_placer::error::Error::TenantReleased { .. })
        ));
        // Once released, never placed again.
        assert!(matches!(
            writer.decide(&wants).await,
            Err(tenant_placer::error::Error::TenantReleased { .. })
        ));
        expect_no_more_requests(api, writer).await;
    })
    .await;
}
