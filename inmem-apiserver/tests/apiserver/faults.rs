use std::time::{Duration, Instant};

use futures::StreamExt;
use inmem_apiserver::{Fault, Verb};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::watches::events_until;
use crate::*;

fn replicas(n: i64) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"spec": {"replicas": n}}))
}

#[tokio::test]
async fn an_injected_conflict_is_answered_without_writing() {
    let (api, client) = setup();
    create(&client, "acme", 1).await;
    api.inject(Fault::on(Verb::Patch).resource("tenants").conflict());
    let before = api.resource_version();
    let status = status_of(
        tenants(&client)
            .patch("acme", &PatchParams::default(), &replicas(2))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("the object has been modified"),
        "{}",
        status.message
    );
    assert_eq!(api.resource_version(), before);
    let retried = tenants(&client)
        .patch("acme", &PatchParams::default(), &replicas(2))
        .await
        .unwrap();
    assert_eq!(retried.spec.replicas, 2, "the fault acted once");
}

#[tokio::test]
async fn injected_errors_carry_the_apiservers_codes_and_retry_after() {
    let (api, client) = setup();
    create(&client, "acme", 1).await;
    api.inject(Fault::on(Verb::Get).too_many_requests(3));
    api.inject(Fault::on(Verb::Get).internal_error());
    api.inject(Fault::on(Verb::Get).invalid());
    let (code, body) = get(&api, &format!("{TENANTS}/acme")).await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (429, Some("TooManyRequests"))
    );
    assert_eq!(body["details"]["retryAfterSeconds"], 3);
    let req = http::Request::get(format!("{TENANTS}/acme"))
        .body(bytes::Bytes::new())
        .unwrap();
    let _ = api.handle(req).await; // the 500
    let status = status_of(tenants(&client).get("acme").await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    tenants(&client).get("acme").await.unwrap();
}

#[tokio::test]
async fn a_429_answer_has_a_retry_after_header() {
    let (api, _client) = setup();
    api.inject(Fault::on(Verb::List).too_many_requests(7));
    let req = http::Request::get(TENANTS)
        .body(bytes::Bytes::new())
        .unwrap();
    let resp = api.handle(req).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
}

#[tokio::test]
async fn an_injected_delay_holds_the_request_then_serves_it() {
    let (api, client) = setup();
    create(&client, "acme", 1).await;
    api.inject(Fault::on(Verb::Get).delay(Duration::from_millis(200)));
    let started = Instant::now();
    tenants(&client).get("acme").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn commit_then_fail_writes_but_answers_500() {
    let (api, client) = setup();
    create(&client, "acme", 1).await;
    api.inject(Fault::on(Verb::Patch).commit_then_fail());
    let status = status_of(
        tenants(&client)
            .patch("acme", &PatchParams::default(), &replicas(4))
            .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (500, "InternalError")
    );
    assert_eq!(
        tenants(&client).get("acme").await.unwrap().spec.replicas,
        4,
        "the write happened"
    );
}

#[tokio::test]
async fn commit_then_disconnect_writes_but_the_client_sees_a_transport_error() {
    let (api, client) = setup();
    api.inject(Fault::on(Verb::Create).commit_then_disconnect());
    let err = tenants(&client)
        .create(&PostParams::default(), &tenant("acme", 1))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Service(_)), "{err:?}");
    assert!(
        tenants(&client).get("acme").await.is_ok(),
        "the create happened"
    );
}

#[tokio::test]
async fn a_disconnect_fault_does_not_serve_the_request() {
    let (api, client) = setup();
    api.inject(Fault::on(Verb::Create).disconnect());
    let err = tenants(&client)
        .create(&PostParams::default(), &tenant("acme", 1))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Service(_)), "{err:?}");
    assert_eq!(status_of(tenants(&client).get("acme").await).code, 404);
}

#[tokio::test]
async fn faults_match_only_their_subresource_and_name_and_count_down() {
    let (api, client) = setup();
    create(&client, "a", 1).await;
    create(&client, "b", 1).await;
    api.inject(
        Fault::on(Verb::Patch)
            .subresource("status")
            .name("b")
            .times(2)
            .internal_error(),
    );
    let pp = PatchParams::default();
    let status = Patch::Merge(json!({"status": {"phase": "Ready"}}));
    tenants(&client)
        .patch("b", &pp, &replicas(2))
        .await
        .unwrap();
    tenants(&client)
        .patch_status("a", &pp, &status)
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            status_of(tenants(&client).patch_status("b", &pp, &status).await).code,
            500
        );
    }
    tenants(&client)
        .patch_status("b", &pp, &status)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_fault_marked_always_acts_until_cleared() {
    let (api, client) = setup();
    api.inject(
        Fault::on(Verb::List)
            .resource("tenants")
            .always()
            .internal_error(),
    );
    for _ in 0..3 {
        assert_eq!(
            status_of(tenants(&client).list(&Default::default()).await).code,
            500
        );
    }
    api.clear_faults();
    tenants(&client).list(&Default::default()).await.unwrap();
}

#[tokio::test]
async fn a_watch_gone_fault_makes_the_kube_watcher_relist() {
    let (api, client) = setup();
    create(&client, "a", 1).await;
    api.inject(Fault::on(Verb::Watch).watch_gone());
    let mut events = watcher::watcher(tenants(&client), watcher::Config::default()).boxed();
    assert_eq!(
        events_until(&mut events, "InitDone").await,
        ["Init", "InitApply a", "InitDone"]
    );
    let seen = events_until(&mut events, "InitDone").await;
    assert!(seen[0].contains("too old resource version"), "{seen:?}");
    assert_eq!(seen[1..], ["Init", "InitApply a", "InitDone"]);
}

#[tokio::test]
async fn a_writes_fault_after_n_lets_n_writes_through_then_acts_on_the_next_write_only() {
    let (api, client) = setup();
    create(&client, "acme", 1).await;
    api.inject(Fault::writes().after(2).conflict());
    // Reads never count toward the rule.
    tenants(&client).get("acme").await.unwrap();
    for n in [2, 3] {
        tenants(&client)
            .patch("acme", &PatchParams::default(), &replicas(n))
            .await
            .unwrap();
    }
    assert_eq!(
        api.stats().faults_fired,
        0,
        "the writes let through do not count"
    );
    let status = status_of(
        tenants(&client)
            .patch("acme", &PatchParams::default(), &replicas(4))
            .await,
    );
    assert_eq!(status.code, 409, "the third write is the one that fails");
    assert_eq!(api.stats().faults_fired, 1, "the fault fired once");
    tenants(&client)
        .patch("acme", &PatchParams::default(), &replicas(5))
        .await
        .unwrap();
    assert_eq!(api.stats().faults_fired, 1, "and only once");
}

#[tokio::test]
async fn commit_then_stall_writes_signals_and_never_answers() {
    let (api, client) = setup();
    create(&client, "acme", 1).await;
    let stall = inmem_apiserver::Stall::default();
    api.inject(Fault::on(Verb::Patch).commit_then_stall(&stall));
    let writer = tenants(&client);
    let pending = tokio::spawn(async move {
        writer
            .patch("acme", &PatchParams::default(), &replicas(7))
            .await
    });
    tokio::time::timeout(Duration::from_secs(1), stall.0.notified())
        .await
        .unwrap();
    assert_eq!(
        tenants(&client).get("acme").await.unwrap().spec.replicas,
        7,
        "the write committed"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!pending.is_finished(), "no answer ever comes");
    pending.abort();
}

#[tokio::test]
async fn a_cut_connection_serves_nothing_more_not_even_a_request_already_waiting() {
    let (api, client) = setup();
    let (connection, cut) = api.connection();
    let killed = kube::Client::new(connection, "default");
    create(&killed, "acme", 1).await;
    // A write held by a delay when the connection is cut never reaches the store.
    api.inject(Fault::on(Verb::Patch).delay(Duration::from_millis(200)));
    let waiting = tokio::spawn(async move {
        tenants(&killed)
            .patch("acme", &PatchParams::default(), &replicas(4))
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    cut.cut();
    let err = waiting.await.unwrap().unwrap_err();
    assert!(matches!(err, kube::Error::Service(_)), "{err:?}");
    assert_eq!(tenants(&client).get("acme").await.unwrap().spec.replicas, 1);
    // Other connections are served as before.
    tenants(&client)
        .patch("acme", &PatchParams::default(), &replicas(5))
        .await
        .unwrap();
    assert_eq!(tenants(&client).get("acme").await.unwrap().spec.replicas, 5);
}
