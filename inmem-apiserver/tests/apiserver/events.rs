//! Core `v1` and `events.k8s.io/v1` Events are one resource: what either API
//! writes, both serve, converted.

use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::*;

const CORE: &str = "/api/v1/namespaces/default/events";
const EVENTS_V1: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

#[tokio::test]
async fn recorder_events_are_listed_as_core_events_with_the_kubectl_describe_selector() {
    let (api, client) = setup();
    let acme = create(&client, "acme", 1).await;
    let uid = acme.uid().unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "tenant-placer".into(),
            instance: Some("pod-1".into()),
        },
    );
    let regarding = ObjectReference {
        api_version: Some(format!("{GROUP}/v1")),
        kind: Some("Tenant".into()),
        name: Some("acme".into()),
        namespace: Some("default".into()),
        uid: Some(uid.clone()),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: EventType::Warning,
        reason: "Pending".into(),
        note: Some("short by 2 threads".into()),
        action: "Place".into(),
        secondary: None,
    };
    // A create, then a merge patch of its series.
    recorder.publish(&event, &regarding).await.unwrap();
    recorder.publish(&event, &regarding).await.unwrap();

    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let describe = format!(
        "involvedObject.name=acme,involvedObject.namespace=default,involvedObject.kind=Tenant,involvedObject.uid={uid}"
    );
    let listed = core
        .list(&ListParams::default().fields(&describe))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let e = &listed.items[0];
    assert_eq!(e.message.as_deref(), Some("short by 2 threads"));
    assert_eq!(e.involved_object.name.as_deref(), Some("acme"));
    assert_eq!(e.involved_object.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(e.reason.as_deref(), Some("Pending"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.action.as_deref(), Some("Place"));
    assert_eq!(e.reporting_component.as_deref(), Some("tenant-placer"));
    assert_eq!(e.reporting_instance.as_deref(), Some("pod-1"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
    assert!(e.event_time.is_some());

    // The other core field labels select it too; others do not.
    for (selector, found) in [
        ("reason=Pending,type=Warning", 1),
        ("reportingComponent=tenant-placer", 1),
        ("involvedObject.name=other", 0),
    ] {
        let n = core
            .list(&ListParams::default().fields(selector))
            .await
            .unwrap()
            .items
            .len();
        assert_eq!(n, found, "{selector}");
    }

    // One object, one resourceVersion, through both APIs.
    let v1: Api<K8sEvent> = Api::namespaced(client, "default");
    let through_v1 = v1.get(&e.name_any()).await.unwrap();
    assert_eq!(through_v1.resource_version(), e.resource_version());
    assert_eq!(through_v1.note.as_deref(), Some("short by 2 threads"));
    assert_eq!(api.list("", "events").len(), 1);
    assert_eq!(api.list("", "events")[0]["message"], "short by 2 threads");
    assert_eq!(
        api.list("events.k8s.io", "events")[0]["note"],
        "short by 2 threads"
    );
}

#[tokio::test]
async fn core_events_are_served_converted_through_events_k8s_io() {
    let (api, _client) = setup();
    let (code, created) = post(
        &api,
        CORE,
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "acme.1"},
            "involvedObject": {"kind": "Tenant", "name": "acme", "namespace": "default"},
            "reason": "Placed", "message": "on node-1", "type": "Normal",
            "source": {"component": "tenant-placer", "host": "node-1"},
            "count": 3,
            "firstTimestamp": "2024-01-01T00:00:00Z",
            "lastTimestamp": "2024-01-01T00:05:00Z",
        }),
    )
    .await;
    assert_eq!(code, 201, "{created}");

    let (code, got) = get(&api, &format!("{EVENTS_V1}/acme.1")).await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["apiVersion"], "events.k8s.io/v1");
    assert_eq!(got["regarding"]["name"], "acme");
    assert_eq!(got["note"], "on node-1");
    assert_eq!(got["deprecatedSource"]["component"], "tenant-placer");
    assert_eq!(got["deprecatedSource"]["host"], "node-1");
    assert_eq!(got["deprecatedCount"], 3);
    assert_eq!(got["deprecatedFirstTimestamp"], "2024-01-01T00:00:00Z");
    assert_eq!(got["deprecatedLastTimestamp"], "2024-01-01T00:05:00Z");
    for core_only in [
        "involvedObject",
        "message",
        "source",
        "count",
        "firstTimestamp",
    ] {
        assert!(got.get(core_only).is_none(), "{core_only} in {got}");
    }
    assert_eq!(
        got["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );

    // The events.k8s.io field labels select it.
    let (_, listed) = get(
        &api,
        &format!("{EVENTS_V1}?fieldSelector=regarding.name%3Dacme"),
    )
    .await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["items"][0]["note"], "on node-1");

    // A merge patch through events.k8s.io is seen through core.
    let (code, patched) = call(
        &api,
        "PATCH",
        &format!("{EVENTS_V1}/acme.1"),
        "application/merge-patch+json",
        json!({"note": "moved to node-2"}),
    )
    .await;
    assert_eq!(code, 200, "{patched}");
    let (_, core) = get(&api, &format!("{CORE}/acme.1")).await;
    assert_eq!(core["message"], "moved to node-2");
    assert_eq!(core["count"], 3);
    assert_eq!(
        core["metadata"]["resourceVersion"],
        patched["metadata"]["resourceVersion"]
    );

    // One storage: the name is taken through the other API.
    let (code, _) = post(
        &api,
        EVENTS_V1,
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "acme.1"}}),
    )
    .await;
    assert_eq!(code, 409);
}

#[tokio::test]
async fn watches_through_either_api_see_writes_through_both() {
    let (api, _client) = setup();
    let from = api.resource_version();
    let (code, _) = post(
        &api,
        EVENTS_V1,
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "a"},
            "regarding": {"kind": "Tenant", "name": "acme"},
            "note": "through events.k8s.io", "reason": "Placed", "type": "Normal",
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingController": "tenant-placer", "reportingInstance": "pod-1", "action": "Place",
        }),
    )
    .await;
    assert_eq!(code, 201);
    let (code, _) = post(
        &api,
        CORE,
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "b"},
            "involvedObject": {"kind": "Tenant", "name": "other"},
            "message": "through core", "reason": "Placed", "type": "Normal",
        }),
    )
    .await;
    assert_eq!(code, 201);

    let (_, core) = get(
        &api,
        &format!("{CORE}?watch=true&resourceVersion={from}&timeoutSeconds=1"),
    )
    .await;
    let core = core.as_array().unwrap();
    assert_eq!(core.len(), 2, "{core:?}");
    assert_eq!(core[0]["type"], "ADDED");
    assert_eq!(core[0]["object"]["apiVersion"], "v1");
    assert_eq!(core[0]["object"]["message"], "through events.k8s.io");
    assert_eq!(core[0]["object"]["involvedObject"]["name"], "acme");
    assert_eq!(core[1]["object"]["message"], "through core");

    let (_, v1) = get(
        &api,
        &format!("{EVENTS_V1}?watch=true&resourceVersion={from}&timeoutSeconds=1"),
    )
    .await;
    let v1 = v1.as_array().unwrap();
    assert_eq!(v1.len(), 2, "{v1:?}");
    assert_eq!(v1[1]["object"]["apiVersion"], "events.k8s.io/v1");
    assert_eq!(v1[1]["object"]["note"], "through core");
    assert_eq!(v1[1]["object"]["regarding"]["name"], "other");

    // A selected watch of the core field label sees the events.k8s.io write.
    let (_, selected) = get(
        &api,
        &format!("{CORE}?watch=true&fieldSelector=involvedObject.name%3Dacme&timeoutSeconds=1"),
    )
    .await;
    // (One line is answered as the one object.)
    assert_eq!(selected["type"], "ADDED", "{selected}");
    assert_eq!(selected["object"]["metadata"]["name"], "a");
}
