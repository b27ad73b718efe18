use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use inmem_apiserver::Config;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use crate::*;

/// The next item of a stream, failing the test after two seconds.
pub async fn next<S: Stream + Unpin>(stream: &mut S) -> S::Item {
    tokio::time::timeout(Duration::from_secs(2), stream.next())
        .await
        .expect("no event within 2s")
        .expect("stream ended")
}

fn describe(event: &Event<Tenant>) -> String {
    match event {
        Event::Init => "Init".into(),
        Event::InitApply(t) => format!("InitApply {}", t.name_any()),
        Event::InitDone => "InitDone".into(),
        Event::Apply(t) => format!("Apply {} {}", t.name_any(), t.spec.replicas),
        Event::Delete(t) => format!("Delete {}", t.name_any()),
    }
}

/// Describes events until one equals `until`, returning them all.
pub async fn events_until<S>(stream: &mut S, until: &str) -> Vec<String>
where
    S: Stream<Item = Result<Event<Tenant>, watcher::Error>> + Unpin,
{
    let mut seen = Vec::new();
    loop {
        let described = match next(stream).await {
            Ok(event) => describe(&event),
            Err(err) => format!("Err {err}"),
        };
        seen.push(described.clone());
        if described == until {
            return seen;
        }
    }
}

#[tokio::test]
async fn the_kube_watcher_sees_the_initial_list_then_creates_updates_and_deletes() {
    let (_api, client) = setup();
    create(&client, "a", 1).await;
    let mut events = watcher::watcher(tenants(&client), watcher::Config::default()).boxed();
    assert_eq!(
        events_until(&mut events, "InitDone").await,
        ["Init", "InitApply a", "InitDone"]
    );
    create(&client, "b", 1).await;
    tenants(&client)
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    tenants(&client)
        .delete("b", &Default::default())
        .await
        .unwrap();
    assert_eq!(
        events_until(&mut events, "Delete b").await,
        ["Apply b 1", "Apply b 5", "Delete b"]
    );
}

#[tokio::test]
async fn a_watch_from_a_compacted_resource_version_is_an_expired_error_event() {
    let (api, client) = setup();
    create(&client, "a", 1).await;
    let old = api.resource_version();
    create(&client, "b", 1).await;
    api.compact_history();
    let floor = api.resource_version();
    let (code, body) = get(&api, &format!("{TENANTS}?watch=true&resourceVersion={old}")).await;
    assert_eq!(code, 200);
    assert_eq!(body["type"], "ERROR");
    assert_eq!(
        body["object"],
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {old} ({floor})"), "reason": "Expired", "code": 410
        })
    );
}

#[tokio::test]
async fn an_event_history_overflow_expires_the_oldest_resource_versions() {
    let api = ApiServer::with_config(Config {
        history_size: 2,
        ..Config::default()
    });
    let (api, client) = setup_on(api);
    let start = api.resource_version();
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        create(&client, name, i64::try_from(i).unwrap()).await;
    }
    let (_, gone) = get(
        &api,
        &format!("{TENANTS}?watch=true&resourceVersion={start}"),
    )
    .await;
    assert_eq!(gone["object"]["code"], 410, "{gone}");
    let events = tenants(&client)
        .watch(&WatchParams::default().timeout(1), &(start + 1).to_string())
        .await
        .unwrap();
    let names: Vec<String> = events
        .try_filter_map(|e| async move {
            Ok(if let WatchEvent::Added(t) = e {
                Some(t.name_any())
            } else {
                None
            })
        })
        .try_collect()
        .await
        .unwrap();
    assert_eq!(names, ["b", "c"]);
}

#[tokio::test]
async fn the_kube_watcher_relists_after_its_watch_breaks_on_a_compacted_history() {
    let (api, client) = setup();
    create(&client, "a", 1).await;
    let mut events = watcher::watcher(tenants(&client), watcher::Config::default()).boxed();
    events_until(&mut events, "InitDone").await;
    api.reset_stats();
    api.compact_history();
    api.break_watches();
    let seen = events_until(&mut events, "InitDone").await;
    assert!(
        seen[0].starts_with("Err") && seen[0].contains("too old resource version"),
        "{seen:?}"
    );
    assert_eq!(seen[1..], ["Init", "InitApply a", "InitDone"]);
    assert_eq!(api.stats().count(inmem_apiserver::Verb::List, "tenants"), 1);
    create(&client, "b", 1).await;
    assert_eq!(events_until(&mut events, "Apply b 1").await, ["Apply b 1"]);
}

#[tokio::test]
async fn an_idle_watch_with_bookmarks_gets_them_at_the_current_resource_version() {
    let config = Config {
        bookmark_interval: Duration::from_millis(20),
        ..Config::default()
    };
    let (api, client) = setup_on(ApiServer::with_config(config));
    create(&client, "a", 1).await;
    let mut events = tenants(&client)
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(
        matches!(next(&mut events).await.unwrap(), WatchEvent::Added(t) if t.name_any() == "a")
    );
    let WatchEvent::Bookmark(bookmark) = next(&mut events).await.unwrap() else {
        panic!("not a bookmark")
    };
    assert_eq!(
        bookmark.metadata.resource_version,
        api.resource_version().to_string()
    );
    assert_eq!(bookmark.types.kind, "Tenant");
}

#[tokio::test]
async fn a_streaming_list_ends_its_initial_events_with_an_annotated_bookmark() {
    let (api, client) = setup();
    create(&client, "a", 1).await;
    let query = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1";
    let (code, lines) = get(&api, &format!("{TENANTS}?{query}")).await;
    assert_eq!(code, 200);
    let types: Vec<&str> = lines
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["ADDED", "BOOKMARK"],
        "the stream ends on timeoutSeconds"
    );
    assert_eq!(
        lines[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    let mut events = watcher::watcher(
        tenants(&client),
        watcher::Config::default().streaming_lists(),
    )
    .boxed();
    assert_eq!(
        events_until(&mut events, "InitDone").await,
        ["Init", "InitApply a", "InitDone"]
    );
    create(&client, "b", 2).await;
    assert_eq!(events_until(&mut events, "Apply b 2").await, ["Apply b 2"]);
}

#[tokio::test]
async fn send_initial_events_without_not_older_than_is_invalid() {
    let (api, _client) = setup();
    let (code, body) = get(&api, &format!("{TENANTS}?watch=1&sendInitialEvents=true")).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"#
    );
}

#[tokio::test]
async fn a_label_selected_watch_sees_objects_enter_and_leave_the_selection() {
    let (api, client) = setup();
    let from = api.resource_version().to_string();
    let mut events = tenants(&client)
        .watch(&WatchParams::default().labels("team=red"), &from)
        .await
        .unwrap()
        .boxed();
    let label = |team: &str| Patch::Merge(json!({"metadata": {"labels": {"team": team}}}));
    let pp = PatchParams::default();
    create(&client, "blue-first", 1).await;
    create(&client, "a", 1).await;
    tenants(&client)
        .patch("a", &pp, &label("red"))
        .await
        .unwrap();
    tenants(&client)
        .patch("a", &pp, &label("blue"))
        .await
        .unwrap();
    tenants(&client)
        .patch("a", &pp, &label("red"))
        .await
        .unwrap();
    tenants(&client)
        .patch("a", &pp, &Patch::Merge(json!({"spec": {"replicas": 2}})))
        .await
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(match next(&mut events).await.unwrap() {
            WatchEvent::Added(t) => format!("ADDED {} {:?}", t.name_any(), t.labels().get("team")),
            WatchEvent::Modified(t) => format!("MODIFIED {} {}", t.name_any(), t.spec.replicas),
            WatchEvent::Deleted(t) => {
                format!("DELETED {} {:?}", t.name_any(), t.labels().get("team"))
            }
            other => format!("{other:?}"),
        });
    }
    assert_eq!(
        seen,
        [
            r#"ADDED a Some("red")"#,
            r#"DELETED a Some("red")"#,
            r#"ADDED a Some("red")"#,
            "MODIFIED a 2"
        ]
    );
}

#[tokio::test]
async fn breaking_watches_ends_every_open_stream() {
    let (api, client) = setup();
    let mut a = tenants(&client)
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let mut b = tenants(&client)
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    api.break_watches();
    for stream in [&mut a, &mut b] {
        let end = tokio::time::timeout(Duration::from_secs(2), stream.next())
            .await
            .unwrap();
        assert!(end.is_none());
    }
}

#[tokio::test]
async fn watch_lines_name_their_type_first_and_queued_ones_share_a_chunk() {
    let (api, client) = setup();
    for name in ["a", "b", "c"] {
        create(&client, name, 1).await;
    }
    let req = http::Request::builder()
        .uri(format!("{TENANTS}?watch=1&timeoutSeconds=1"))
        .body(bytes::Bytes::new())
        .unwrap();
    let mut body = api.handle(req).await.into_body();
    // The three ADDED lines are queued together, so they travel in the body's first chunk,
    // each whole on its own line.
    let first = http_body_util::BodyExt::frame(&mut body)
        .await
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    let text = String::from_utf8(first.to_vec()).unwrap();
    let names: Vec<String> = text
        .lines()
        .map(|line| {
            assert!(line.starts_with(r#"{"type":"ADDED","object":{"#), "{line}");
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            event["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
}
