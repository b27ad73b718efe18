use std::sync::{Arc, Mutex};

use inmem_apiserver::{EventType, Verb};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::*;

#[tokio::test]
async fn every_commit_is_seen_in_order_with_the_whole_store() {
    let (api, client) = setup();
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    api.on_commit(move |c| {
        // An invariant over all tenants, checked after every single write.
        let total: i64 = c
            .list(GROUP, "tenants")
            .iter()
            .map(|t| t["spec"]["replicas"].as_i64().unwrap())
            .sum();
        sink.lock()
            .unwrap()
            .push((c.resource_version, c.event, c.name.to_owned(), total));
    });
    let start = api.resource_version();
    create(&client, "a", 1).await;
    create(&client, "b", 2).await;
    tenants(&client)
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    tenants(&client)
        .delete("b", &DeleteParams::default())
        .await
        .unwrap();
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            (start + 1, EventType::Added, "a".to_owned(), 1),
            (start + 2, EventType::Added, "b".to_owned(), 3),
            (start + 3, EventType::Modified, "a".to_owned(), 7),
            (start + 4, EventType::Deleted, "b".to_owned(), 5),
        ]
    );
}

#[tokio::test]
async fn a_panicking_commit_hook_is_recorded_and_the_write_stands() {
    let (api, client) = setup();
    api.on_commit(|c| assert!(c.name != "bad", "no tenant may be called bad"));
    create(&client, "bad", 1).await;
    create(&client, "good", 1).await;
    let failures = api.hook_failures();
    assert_eq!(failures.len(), 1);
    assert!(
        failures[0].contains("ADDED of tenants bad: no tenant may be called bad"),
        "{failures:?}"
    );
}

#[tokio::test]
async fn stats_count_requests_by_verb_and_resource_and_reset() {
    let (api, client) = setup();
    create(&client, "a", 1).await;
    tenants(&client).get("a").await.unwrap();
    tenants(&client).list(&ListParams::default()).await.unwrap();
    tenants(&client)
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    let stats = api.stats();
    assert_eq!(stats.count(Verb::Create, "tenants"), 1);
    assert_eq!(stats.count(Verb::Get, "tenants"), 1);
    assert_eq!(stats.count(Verb::List, "tenants"), 1);
    let status_patches = stats
        .requests
        .iter()
        .find(|(k, _)| k.subresource.as_deref() == Some("status"))
        .unwrap();
    assert_eq!((status_patches.0.verb, *status_patches.1), (Verb::Patch, 1));
    assert_eq!(stats.writes, 3, "the CRD, the create and the status patch");
    api.reset_stats();
    assert_eq!(api.stats(), Default::default());
}

#[tokio::test]
async fn direct_helpers_write_without_http_including_status() {
    let (api, client) = setup();
    let mut seeded = raw_tenant("seeded", json!({"replicas": 2}));
    seeded["metadata"]["namespace"] = json!("default");
    seeded["status"] = json!({"phase": "Ready"});
    api.create(seeded).unwrap();
    let read = tenants(&client).get("seeded").await.unwrap();
    assert_eq!(read.status.unwrap().phase.as_deref(), Some("Ready"));
    assert_eq!(
        api.stats().count(Verb::Create, "tenants"),
        0,
        "no request was made"
    );

    api.apply(raw_tenant("seeded", json!({"replicas": 3})))
        .unwrap();
    let stored = api
        .get(GROUP, "tenants", Some("default"), "seeded")
        .unwrap();
    assert_eq!(
        (
            stored["spec"]["replicas"].as_i64(),
            stored["metadata"]["generation"].as_i64()
        ),
        (Some(3), Some(2))
    );
    assert_eq!(api.list(GROUP, "tenants").len(), 1);
    api.delete(GROUP, "tenants", Some("default"), "seeded")
        .unwrap();
    assert!(api.list(GROUP, "tenants").is_empty());
}
