use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::*;

#[tokio::test]
async fn a_created_tenant_reads_back_with_the_metadata_the_server_sets() {
    let (_api, client) = setup();
    let created = create(&client, "acme", 2).await;
    let uid = created.uid().unwrap();
    assert_eq!(uid.len(), 36, "{uid}");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.creation_timestamp.is_some());
    let read = tenants(&client).get("acme").await.unwrap();
    assert_eq!(read, created);
    assert_eq!(read.namespace().as_deref(), Some("default"));
}

#[tokio::test]
async fn a_finalizer_admitted_on_create_is_added_once_and_kept_beside_others() {
    let (api, client) = setup();
    api.add_finalizer_on_create("placement.tenant-placer.dev", "tenants", "example.dev/keep");
    let plain = create(&client, "plain", 1).await;
    assert_eq!(plain.finalizers(), ["example.dev/keep"]);
    let mut own = tenant("own", 1);
    own.metadata.finalizers = Some(vec!["other.dev/x".into(), "example.dev/keep".into()]);
    let own = tenants(&client)
        .create(&PostParams::default(), &own)
        .await
        .unwrap();
    assert_eq!(own.finalizers(), ["other.dev/x", "example.dev/keep"]);
    // Updates are not admitted: a finalizer removed later stays removed.
    let patch = json!({"metadata": {"finalizers": null}});
    let patched = tenants(&client)
        .patch("plain", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert!(patched.finalizers().is_empty());
}

#[tokio::test]
async fn every_write_moves_one_store_wide_resource_version() {
    let (api, client) = setup();
    let before = api.resource_version();
    let a = create(&client, "a", 1).await;
    let b = create(&client, "b", 1).await;
    let rv = |t: &Tenant| t.resource_version().unwrap().parse::<u64>().unwrap();
    assert_eq!((rv(&a), rv(&b)), (before + 1, before + 2));
}

#[tokio::test]
async fn creating_a_taken_name_is_an_already_exists_conflict() {
    let (_api, client) = setup();
    create(&client, "acme", 1).await;
    let status = status_of(
        tenants(&client)
            .create(&PostParams::default(), &tenant("acme", 1))
            .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists")
    );
    assert_eq!(
        status.message,
        r#"tenants.placement.tenant-placer.dev "acme" already exists"#
    );
}

#[tokio::test]
async fn getting_a_missing_tenant_is_not_found_with_the_apiservers_message() {
    let (_api, client) = setup();
    let status = status_of(tenants(&client).get("nope").await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(
        status.message,
        r#"tenants.placement.tenant-placer.dev "nope" not found"#
    );
}

#[tokio::test]
async fn replacing_with_a_stale_resource_version_is_a_conflict() {
    let (_api, client) = setup();
    let first = create(&client, "acme", 1).await;
    let mut newer = first.clone();
    newer.spec.replicas = 2;
    tenants(&client)
        .replace("acme", &PostParams::default(), &newer)
        .await
        .unwrap();
    let mut stale = first;
    stale.spec.replicas = 3;
    let status = status_of(
        tenants(&client)
            .replace("acme", &PostParams::default(), &stale)
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        r#"Operation cannot be fulfilled on tenants.placement.tenant-placer.dev "acme": the object has been modified; please apply your changes to the latest version and try again"#
    );
}

#[tokio::test]
async fn replacing_without_a_resource_version_is_invalid() {
    let (_api, client) = setup();
    create(&client, "acme", 1).await;
    let status = status_of(
        tenants(&client)
            .replace("acme", &PostParams::default(), &tenant("acme", 5))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        r#"tenants.placement.tenant-placer.dev "acme" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"#
    );
}

#[tokio::test]
async fn replacing_a_missing_tenant_does_not_create_it() {
    let (_api, client) = setup();
    let mut t = tenant("ghost", 1);
    t.metadata.resource_version = Some("1".into());
    let status = status_of(
        tenants(&client)
            .replace("ghost", &PostParams::default(), &t)
            .await,
    );
    assert_eq!(status.code, 404);
}

#[tokio::test]
async fn generate_name_gives_each_create_a_fresh_name() {
    let (_api, client) = setup();
    let mut t = tenant("", 1);
    t.metadata.name = None;
    t.metadata.generate_name = Some("acme-".into());
    let a = tenants(&client)
        .create(&PostParams::default(), &t)
        .await
        .unwrap();
    let b = tenants(&client)
        .create(&PostParams::default(), &t)
        .await
        .unwrap();
    assert!(
        a.name_any().starts_with("acme-") && a.name_any().len() == 10,
        "{}",
        a.name_any()
    );
    assert_ne!(a.name_any(), b.name_any());
}

#[tokio::test]
async fn lists_filter_by_labels_and_fields_and_page_with_continue_tokens() {
    let (_api, client) = setup();
    for (name, team) in [("a", "red"), ("b", "blue"), ("c", "red"), ("d", "red")] {
        let mut t = tenant(name, 1);
        t.labels_mut().insert("team".into(), team.into());
        tenants(&client)
            .create(&PostParams::default(), &t)
            .await
            .unwrap();
    }
    let names = |l: &kube::api::ObjectList<Tenant>| {
        l.items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>()
    };
    let red = tenants(&client)
        .list(&ListParams::default().labels("team=red"))
        .await
        .unwrap();
    assert_eq!(names(&red), ["a", "c", "d"]);
    let not_red = tenants(&client)
        .list(&ListParams::default().labels("team!=red"))
        .await
        .unwrap();
    assert_eq!(names(&not_red), ["b"]);
    let by_name = tenants(&client)
        .list(&ListParams::default().fields("metadata.name=c"))
        .await
        .unwrap();
    assert_eq!(names(&by_name), ["c"]);

    let first = tenants(&client)
        .list(&ListParams::default().limit(3))
        .await
        .unwrap();
    assert_eq!(names(&first), ["a", "b", "c"]);
    assert_eq!(first.metadata.remaining_item_count, Some(1));
    let token = first.metadata.continue_.clone().unwrap();
    let rest = tenants(&client)
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&rest), ["d"]);
    assert_eq!(rest.metadata.continue_, None);
    assert_eq!(
        rest.metadata.resource_version,
        first.metadata.resource_version
    );
}

#[tokio::test]
async fn a_list_across_namespaces_sees_every_namespace() {
    let (_api, client) = setup();
    for ns in ["one", "two"] {
        let mut t = tenant("acme", 1);
        t.metadata.namespace = Some(ns.into());
        Api::<Tenant>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &t)
            .await
            .unwrap();
    }
    let all = Api::<Tenant>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let namespaces: Vec<_> = all.items.iter().map(|t| t.namespace().unwrap()).collect();
    assert_eq!(namespaces, ["one", "two"]);
}

#[tokio::test]
async fn an_update_that_changes_nothing_is_not_written() {
    let (api, client) = setup();
    let created = create(&client, "acme", 1).await;
    api.reset_stats();
    let patch = Patch::Merge(json!({"spec": {"replicas": 1}}));
    let patched = tenants(&client)
        .patch("acme", &PatchParams::default(), &patch)
        .await
        .unwrap();
    tenants(&client)
        .replace("acme", &PostParams::default(), &created)
        .await
        .unwrap();
    assert_eq!(patched.resource_version(), created.resource_version());
    assert_eq!(api.stats().writes, 0);
    assert_eq!(api.stats().write_requests(), 2);
}

#[tokio::test]
async fn deleting_a_missing_tenant_is_not_found() {
    let (_api, client) = setup();
    let status = status_of(
        tenants(&client)
            .delete("nope", &DeleteParams::default())
            .await,
    );
    assert_eq!(status.code, 404);
}

#[tokio::test]
async fn an_unknown_resource_is_a_404_status() {
    let (api, _client) = setup();
    let (code, body) = get(
        &api,
        "/apis/placement.tenant-placer.dev/v1/namespaces/default/widgets",
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "NotFound");
    assert_eq!(
        body["message"],
        "the server could not find the requested resource"
    );
    let (code, _) = get(
        &api,
        "/apis/placement.tenant-placer.dev/v2/namespaces/default/tenants",
    )
    .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn discovery_lists_the_custom_kind_and_its_status_subresource() {
    let (api, _client) = setup();
    let (code, body) = get(&api, "/apis/placement.tenant-placer.dev/v1").await;
    assert_eq!(code, 200);
    let names: Vec<&str> = body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tenants", "tenants/status"]);
    let (_, groups) = get(&api, "/apis").await;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == GROUP)
    );
}

#[tokio::test]
async fn a_status_write_changes_only_the_status_and_a_main_write_never_the_status() {
    let (_api, client) = setup();
    let created = create(&client, "acme", 2).await;
    // The status subresource drops what the patch says of spec, labels and new fields.
    let patch = json!({
        "metadata": {"labels": {"team": "a"}},
        "spec": {"replicas": 5},
        "status": {"phase": "Active"},
    });
    let patched = tenants(&client)
        .patch_status("acme", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(patched.spec, created.spec);
    assert!(patched.labels().is_empty(), "{:?}", patched.labels());
    assert_eq!(patched.metadata.generation, Some(1));
    assert_eq!(
        patched.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Active")
    );
    // The main resource keeps the status, and a new spec moves the generation.
    let patch = json!({"spec": {"replicas": 3}, "status": {"phase": "Gone"}});
    let patched = tenants(&client)
        .patch("acme", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(patched.spec.replicas, 3);
    assert_eq!(patched.metadata.generation, Some(2));
    assert_eq!(
        patched.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Active")
    );
    // A status patch that changes nothing is no write: the same resourceVersion.
    let same = json!({"status": {"phase": "Active"}});
    let unchanged = tenants(&client)
        .patch_status("acme", &PatchParams::default(), &Patch::Merge(&same))
        .await
        .unwrap();
    assert_eq!(unchanged.resource_version(), patched.resource_version());
    // Removing the status through /status removes it.
    let none = json!({"status": null});
    let cleared = tenants(&client)
        .patch_status("acme", &PatchParams::default(), &Patch::Merge(&none))
        .await
        .unwrap();
    assert_eq!(cleared.status, None);
    assert_eq!(cleared.spec.replicas, 3);
}
