use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::*;

/// A JSON patch, as kube-rs' finalizer helper sends them.
pub fn ops(value: serde_json::Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(value).unwrap())
}

#[tokio::test]
async fn a_write_to_the_main_resource_keeps_the_old_status() {
    let (_api, client) = setup();
    let mut t = tenant("acme", 1);
    t.status = Some(TenantStatus {
        phase: Some("Ignored".into()),
    });
    let created = tenants(&client)
        .create(&PostParams::default(), &t)
        .await
        .unwrap();
    assert_eq!(created.status, None, "create drops the status");

    let status = Patch::Merge(json!({"status": {"phase": "Ready"}}));
    let with_status = tenants(&client)
        .patch_status("acme", &PatchParams::default(), &status)
        .await
        .unwrap();
    assert_eq!(with_status.status.unwrap().phase.as_deref(), Some("Ready"));

    let mut replaced = tenants(&client).get("acme").await.unwrap();
    replaced.spec.replicas = 4;
    replaced.status = Some(TenantStatus {
        phase: Some("Hacked".into()),
    });
    let replaced = tenants(&client)
        .replace("acme", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(replaced.spec.replicas, 4);
    assert_eq!(replaced.status.unwrap().phase.as_deref(), Some("Ready"));
}

#[tokio::test]
async fn a_write_to_status_changes_nothing_but_the_status() {
    let (_api, client) = setup();
    create(&client, "acme", 1).await;
    let mut t = tenants(&client).get("acme").await.unwrap();
    t.spec.replicas = 9;
    t.labels_mut().insert("sneaky".into(), "yes".into());
    t.status = Some(TenantStatus {
        phase: Some("Ready".into()),
    });
    let after = tenants(&client)
        .replace_status("acme", &PostParams::default(), &t)
        .await
        .unwrap();
    assert_eq!(after.spec.replicas, 1);
    assert!(after.labels().is_empty());
    assert_eq!(after.status.unwrap().phase.as_deref(), Some("Ready"));
}

#[tokio::test]
async fn generation_moves_only_when_the_spec_changes() {
    let (_api, client) = setup();
    create(&client, "acme", 1).await;
    let api = tenants(&client);
    let pp = PatchParams::default();
    let labelled = api
        .patch(
            "acme",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(1));
    let status = api
        .patch_status(
            "acme",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert_eq!(status.metadata.generation, Some(1));
    let spec = api
        .patch("acme", &pp, &Patch::Merge(json!({"spec": {"replicas": 2}})))
        .await
        .unwrap();
    assert_eq!(spec.metadata.generation, Some(2));
}

#[tokio::test]
async fn a_merge_patch_changes_only_what_it_names() {
    let (_api, client) = setup();
    create(&client, "acme", 1).await;
    let patch =
        Patch::Merge(json!({"spec": {"tier": "Gold"}, "metadata": {"annotations": {"note": "x"}}}));
    let patched = tenants(&client)
        .patch("acme", &PatchParams::default(), &patch)
        .await
        .unwrap();
    assert_eq!(
        (patched.spec.replicas, patched.spec.tier),
        (1, Some(Tier::Gold))
    );
    assert_eq!(
        patched.annotations().get("note").map(String::as_str),
        Some("x")
    );
}

#[tokio::test]
async fn a_json_patch_adds_a_first_finalizer_after_testing_for_null() {
    let (_api, client) = setup();
    create(&client, "acme", 1).await;
    let add = ops(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["tenant-placer.dev/cleanup"]}
    ]));
    let patched = tenants(&client)
        .patch("acme", &PatchParams::default(), &add)
        .await
        .unwrap();
    assert_eq!(patched.finalizers(), ["tenant-placer.dev/cleanup"]);
}

#[tokio::test]
async fn a_json_patch_whose_test_fails_is_rejected_with_the_generic_422() {
    let (api, client) = setup();
    create(&client, "acme", 1).await;
    let before = api.resource_version();
    let patch = ops(json!([
        {"op": "test", "path": "/spec/replicas", "value": 7},
        {"op": "replace", "path": "/spec/replicas", "value": 8}
    ]));
    let status = status_of(
        tenants(&client)
            .patch("acme", &PatchParams::default(), &patch)
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "the server rejected our request due to an error in our request"
    );
    assert_eq!(api.resource_version(), before);
}

#[tokio::test]
async fn a_patch_carrying_a_stale_resource_version_is_a_conflict() {
    let (_api, client) = setup();
    let created = create(&client, "acme", 1).await;
    let pp = PatchParams::default();
    tenants(&client)
        .patch("acme", &pp, &Patch::Merge(json!({"spec": {"replicas": 2}})))
        .await
        .unwrap();
    let stale = json!({"metadata": {"resourceVersion": created.resource_version()}, "spec": {"replicas": 3}});
    let status = status_of(
        tenants(&client)
            .patch("acme", &pp, &Patch::Merge(stale))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
}

/// How tenant-placer writes Node status: a JSON patch of the status subresource whose first
/// operation sets the resourceVersion read, as controller-runtime's optimistic lock does.
#[tokio::test]
async fn a_json_patch_of_status_setting_a_stale_resource_version_is_a_conflict() {
    let (_api, client) = setup();
    let created = create(&client, "acme", 1).await;
    let read = created.resource_version().unwrap();
    let guarded = |rv: &str, phase: &str| {
        ops(json!([
            {"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/status", "value": {"phase": phase}},
        ]))
    };
    let written = tenants(&client)
        .patch_status("acme", &PatchParams::default(), &guarded(&read, "Ready"))
        .await
        .unwrap();
    assert_eq!(written.status.unwrap().phase.as_deref(), Some("Ready"));
    assert_ne!(
        written.metadata.resource_version.as_deref(),
        Some(read.as_str())
    );
    let status = status_of(
        tenants(&client)
            .patch_status("acme", &PatchParams::default(), &guarded(&read, "Lost"))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    let now = tenants(&client).get("acme").await.unwrap();
    assert_eq!(now.status.unwrap().phase.as_deref(), Some("Ready"));
}

#[tokio::test]
async fn server_side_apply_creates_then_merges_and_needs_a_field_manager() {
    let (_api, client) = setup();
    let api = tenants(&client);
    let applied = api
        .patch(
            "acme",
            &PatchParams::apply("test"),
            &Patch::Apply(tenant("acme", 3)),
        )
        .await
        .unwrap();
    assert_eq!(applied.spec.replicas, 3);
    let tier = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Tenant", "spec": {"replicas": 3, "tier": "Silver"}});
    let merged = api
        .patch("acme", &PatchParams::apply("test"), &Patch::Apply(tier))
        .await
        .unwrap();
    assert_eq!(merged.spec.tier, Some(Tier::Silver));
    assert_eq!(merged.metadata.generation, Some(2));

    let status = status_of(
        api.patch(
            "acme",
            &PatchParams::default(),
            &Patch::Apply(tenant("acme", 1)),
        )
        .await,
    );
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        r#"PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch"#
    );
}

#[tokio::test]
async fn a_strategic_merge_patch_is_unsupported_for_custom_resources() {
    let (_api, client) = setup();
    create(&client, "acme", 1).await;
    let patch = Patch::Strategic(json!({"spec": {"replicas": 2}}));
    let status = status_of(
        tenants(&client)
            .patch("acme", &PatchParams::default(), &patch)
            .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (415, "UnsupportedMediaType")
    );
}
