use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::wait::{await_condition, conditions};

use crate::*;

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            ..LeaseSpec::default()
        }),
    }
}

#[tokio::test]
async fn leases_are_stored_generically_and_need_a_resource_version_to_update() {
    let (_api, client) = setup();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let created = leases
        .create(&PostParams::default(), &lease("leader", "me"))
        .await
        .unwrap();
    assert_eq!(
        created.metadata.generation, None,
        "built-in kinds without generation"
    );
    let status = status_of(
        leases
            .replace("leader", &PostParams::default(), &lease("leader", "you"))
            .await,
    );
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status
            .message
            .starts_with(r#"leases.coordination.k8s.io "leader" is invalid"#),
        "{}",
        status.message
    );
    let mut next = created.clone();
    next.spec.as_mut().unwrap().holder_identity = Some("you".into());
    let taken = leases
        .replace("leader", &PostParams::default(), &next)
        .await
        .unwrap();
    assert_eq!(taken.spec.unwrap().holder_identity.as_deref(), Some("you"));
    // Leases allow create-on-update.
    let made = leases
        .replace("other", &PostParams::default(), &lease("other", "me"))
        .await
        .unwrap();
    assert!(made.metadata.uid.is_some());
}

#[tokio::test]
async fn events_published_by_the_kube_recorder_are_created_then_patched() {
    let (api, client) = setup();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "tenant-placer".into(),
            instance: None,
        },
    );
    let regarding = ObjectReference {
        api_version: Some(format!("{GROUP}/v1")),
        kind: Some("Tenant".into()),
        name: Some("acme".into()),
        namespace: Some("default".into()),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: EventType::Normal,
        reason: "Placed".into(),
        note: Some("on node-1".into()),
        action: "Place".into(),
        secondary: None,
    };
    recorder.publish(&event, &regarding).await.unwrap();
    recorder.publish(&event, &regarding).await.unwrap();
    let events: Api<K8sEvent> = Api::namespaced(client, "default");
    let listed = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(api.list("events.k8s.io", "events").len(), 1);
}

#[tokio::test]
async fn namespaces_are_storable_and_active() {
    let (_api, client) = setup();
    let namespaces: Api<Namespace> = Api::all(client);
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("team-a".into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    let deleted = namespaces
        .delete("team-a", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deleted.is_left(), "namespaces answer the deleted object");
}

#[tokio::test]
async fn a_crd_posted_through_kube_is_established_and_served() {
    let api = ApiServer::new();
    let client = kube::Client::new(api.clone(), "default");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Tenant::crd())
        .await
        .unwrap();
    let established = await_condition(
        crds.clone(),
        "tenants.placement.tenant-placer.dev",
        conditions::is_crd_established(),
    );
    tokio::time::timeout(std::time::Duration::from_secs(2), established)
        .await
        .unwrap()
        .unwrap();
    create(&client, "acme", 1).await;
    crds.delete(
        "tenants.placement.tenant-placer.dev",
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        status_of(tenants(&client).get("acme").await).code,
        404,
        "the kind is gone"
    );
}
