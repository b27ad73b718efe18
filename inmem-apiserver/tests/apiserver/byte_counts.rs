//! The bytes write requests handle ([`inmem_apiserver::ByteCounts`]), pinned to the lengths of
//! the bodies, stored objects and watch lines of small known objects.
#![allow(clippy::arithmetic_side_effects)]

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use inmem_apiserver::{ApiServer, ByteCounts, RequestKey, Verb};
use serde_json::{Value, json};

use crate::*;

fn len(value: &Value) -> u64 {
    serde_json::to_vec(value).unwrap().len() as u64
}

/// The stored object, as the server stores it.
fn stored(api: &ApiServer, name: &str) -> Value {
    api.get(GROUP, "tenants", Some("default"), name).unwrap()
}

/// A watch line's length: `{"type":…,"object":…}` and a newline.
fn line_len(ty: &str, object: &Value) -> u64 {
    len(&json!({"type": ty, "object": object})) + 1
}

async fn send(api: &ApiServer, method: &str, uri: &str, content_type: &str, body: &[u8]) -> u16 {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(Bytes::copy_from_slice(body))
        .unwrap();
    api.handle(req).await.status().as_u16()
}

/// Opens a watch from the current resourceVersion (nothing replayed) that ends after a second.
async fn watch(api: &ApiServer, query: &str) -> inmem_apiserver::ResponseBody {
    let rv = api.resource_version();
    let req = http::Request::builder()
        .uri(format!(
            "{TENANTS}?watch=1&timeoutSeconds=1&resourceVersion={rv}{query}"
        ))
        .body(Bytes::new())
        .unwrap();
    api.handle(req).await.into_body()
}

fn key(verb: Verb, subresource: Option<&str>) -> RequestKey {
    RequestKey {
        verb,
        group: GROUP.into(),
        resource: "tenants".into(),
        subresource: subresource.map(Into::into),
    }
}

#[tokio::test]
async fn writes_count_their_body_the_stored_object_before_and_after_and_the_watch_lines() {
    let (api, _client) = setup();
    api.set_managed_fields(true);
    // Not counted: a direct write, and what came before the reset.
    api.create(raw_tenant("direct", json!({"replicas": 1})))
        .unwrap();
    api.reset_stats();

    // A create: its body, nothing before, the stored object (with its managedFields) after.
    let create = serde_json::to_vec(&raw_tenant("acme", json!({"replicas": 2}))).unwrap();
    let code = send(
        &api,
        "POST",
        &format!("{TENANTS}?fieldManager=test"),
        "application/json",
        &create,
    )
    .await;
    assert_eq!(code, 201);
    let created = stored(&api, "acme");
    assert!(created["metadata"]["managedFields"].is_array());
    let created_counts = ByteCounts {
        request: create.len() as u64,
        stored_before: 0,
        stored_after: len(&created),
        watch: 0,
    };
    assert_eq!(api.stats().bytes, created_counts, "no watch open yet");

    // Three watches: two see the tenant, the third's selector does not.
    let seen = watch(&api, "").await;
    let seen_too = watch(&api, "&fieldSelector=metadata.name%3Dacme").await;
    let unseen = watch(&api, "&labelSelector=tier%3Dgold").await;
    let patch = br#"{"status":{"phase":"Ready"}}"#;
    let code = send(
        &api,
        "PATCH",
        &format!("{TENANTS}/acme/status?fieldManager=test"),
        "application/merge-patch+json",
        patch,
    )
    .await;
    assert_eq!(code, 200);
    let patched = stored(&api, "acme");
    assert_eq!(patched["status"]["phase"], "Ready");
    let patch_counts = ByteCounts {
        request: patch.len() as u64,
        stored_before: len(&created),
        stored_after: len(&patched),
        watch: 2 * line_len("MODIFIED", &patched),
    };
    assert_ne!(len(&created), len(&patched));
    let stats = api.stats();
    assert_eq!(
        stats.bytes_by_request[&key(Verb::Patch, Some("status"))],
        patch_counts
    );

    // A stale update (409) counts its body, nothing stored, nothing sent.
    let mut stale = created.clone();
    stale["spec"]["replicas"] = json!(3);
    let stale = serde_json::to_vec(&stale).unwrap();
    let code = send(
        &api,
        "PUT",
        &format!("{TENANTS}/acme"),
        "application/json",
        &stale,
    )
    .await;
    assert_eq!(code, 409);
    let stale_counts = ByteCounts {
        request: stale.len() as u64,
        ..ByteCounts::default()
    };

    // A delete (no finalizers): the object before, nothing after, the DELETED line to each.
    let code = send(&api, "DELETE", &format!("{TENANTS}/acme"), "", b"").await;
    assert_eq!(code, 200);
    let delete_counts = ByteCounts {
        request: 0,
        stored_before: len(&patched),
        stored_after: 0,
        watch: 2 * line_len("DELETED", &patched),
    };

    let stats = api.stats();
    let expected = [
        (key(Verb::Create, None), created_counts),
        (key(Verb::Patch, Some("status")), patch_counts),
        (key(Verb::Update, None), stale_counts),
        (key(Verb::Delete, None), delete_counts),
    ];
    assert_eq!(stats.bytes_by_request, expected.iter().cloned().collect());
    let mut total = ByteCounts::default();
    for (_, counts) in &expected {
        total.add(counts);
    }
    assert_eq!(stats.bytes, total);
    assert_eq!(
        total.total(),
        total.request + total.stored_before + total.stored_after + total.watch
    );
    assert_eq!(stats.bytes_of("tenants"), total);
    assert_eq!(stats.bytes_of("nodes"), ByteCounts::default());

    // What the watches received is what was counted: each seeing one both lines, the other none.
    let received = |body: inmem_apiserver::ResponseBody| async move {
        let collected = tokio::time::timeout(Duration::from_secs(5), body.collect())
            .await
            .unwrap()
            .unwrap()
            .to_bytes();
        collected.len() as u64
    };
    // Read together: a watch's queued lines not read by its timeout are not sent.
    let (both, both_too, none) =
        futures::join!(received(seen), received(seen_too), received(unseen));
    assert_eq!(both, both_too);
    assert_eq!(2 * both, patch_counts.watch + delete_counts.watch);
    assert_eq!(none, 0);

    api.reset_stats();
    assert_eq!(api.stats().bytes, ByteCounts::default());
    assert!(api.stats().bytes_by_request.is_empty());
}

#[tokio::test]
async fn a_watch_replay_and_reads_count_no_bytes() {
    let (api, client) = setup();
    create(&client, "a", 1).await;
    api.reset_stats();
    // The initial ADDED events of a new watch, a get and a list are reads.
    let body = watch(&api, "").await;
    drop(body);
    let req = http::Request::builder()
        .uri(format!("{TENANTS}?watch=1&timeoutSeconds=1"))
        .body(Bytes::new())
        .unwrap();
    drop(api.handle(req).await);
    tenants(&client).get("a").await.unwrap();
    assert_eq!(api.stats().bytes, ByteCounts::default());
    assert_eq!(api.stats().count(Verb::Watch, "tenants"), 2);
}
