use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;

use crate::patches::ops;
use crate::*;

const FINALIZER: &str = "tenant-placer.dev/cleanup";

async fn create_with_finalizer(client: &kube::Client) -> Tenant {
    create(client, "acme", 1).await;
    let add = Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER]}}));
    tenants(client)
        .patch("acme", &PatchParams::default(), &add)
        .await
        .unwrap()
}

#[tokio::test]
async fn deleting_a_tenant_with_a_finalizer_only_marks_it_until_the_finalizer_is_removed() {
    let (api, client) = setup();
    let before = create_with_finalizer(&client).await;
    let marked = tenants(&client)
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(
        marked.metadata.generation,
        Some(before.metadata.generation.unwrap() + 1)
    );
    assert!(
        tenants(&client).get("acme").await.is_ok(),
        "still there while the finalizer is"
    );

    let again = tenants(&client)
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        again.resource_version(),
        marked.resource_version(),
        "deleting again writes nothing"
    );

    // Exactly what kube-rs' finalizer helper sends to remove its finalizer.
    let remove = ops(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/0"}
    ]));
    let last = tenants(&client)
        .patch("acme", &PatchParams::default(), &remove)
        .await
        .unwrap();
    assert!(last.finalizers().is_empty());
    assert_eq!(status_of(tenants(&client).get("acme").await).code, 404);
    assert_eq!(api.get(GROUP, "tenants", Some("default"), "acme"), None);
}

#[tokio::test]
async fn no_finalizer_can_be_added_while_a_tenant_terminates() {
    let (_api, client) = setup();
    create_with_finalizer(&client).await;
    tenants(&client)
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    let add = Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER, "late"]}}));
    let status = status_of(
        tenants(&client)
            .patch("acme", &PatchParams::default(), &add)
            .await,
    );
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        r#"Tenant.placement.tenant-placer.dev "acme" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{"late"}"#
    );
}

#[tokio::test]
async fn deleting_a_tenant_without_finalizers_answers_a_success_status() {
    let (_api, client) = setup();
    let created = create(&client, "acme", 1).await;
    let status = tenants(&client)
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .unwrap();
    assert!(status.is_success());
    let details = status.details.unwrap();
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("acme", "tenants")
    );
    assert_eq!(Some(details.uid), created.uid());
    assert_eq!(status_of(tenants(&client).get("acme").await).code, 404);
}

#[tokio::test]
async fn delete_preconditions_that_do_not_hold_are_a_conflict() {
    let (_api, client) = setup();
    let created = create(&client, "acme", 1).await;
    let wrong_uid = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("other".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let status = status_of(tenants(&client).delete("acme", &wrong_uid).await);
    assert_eq!(status.code, 409);
    assert_eq!(
        status.message,
        format!(
            r#"Operation cannot be fulfilled on tenants.placement.tenant-placer.dev "acme": Precondition failed: UID in precondition: other, UID in object meta: {}"#,
            created.uid().unwrap()
        )
    );
    let right = DeleteParams {
        preconditions: Some(Preconditions {
            uid: created.uid(),
            resource_version: created.resource_version(),
        }),
        ..DeleteParams::default()
    };
    tenants(&client).delete("acme", &right).await.unwrap();
}

#[tokio::test]
async fn delete_collection_removes_what_the_selector_matches_and_answers_it() {
    let (_api, client) = setup();
    for (name, team) in [("a", "red"), ("b", "blue"), ("c", "red")] {
        let mut t = tenant(name, 1);
        t.labels_mut().insert("team".into(), team.into());
        tenants(&client)
            .create(&Default::default(), &t)
            .await
            .unwrap();
    }
    let lp = kube::api::ListParams::default().labels("team=red");
    let deleted = tenants(&client)
        .delete_collection(&DeleteParams::default(), &lp)
        .await
        .unwrap();
    let names: Vec<String> = deleted
        .left()
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(names, ["a", "c"]);
    let left = tenants(&client).list(&Default::default()).await.unwrap();
    assert_eq!(
        left.items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>(),
        ["b"]
    );
}
