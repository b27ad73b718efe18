//! The scale subresource of a custom kind shaped like Cluster API's MachineDeployment, driven
//! as `kubectl scale` and kube-rs's `get_scale`/`patch_scale`/`replace_scale` drive it.

use futures::StreamExt;
use inmem_apiserver::{ApiServer, RequestKey, Verb};
use k8s_openapi::api::autoscaling::v1::{Scale, ScaleSpec};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::ObjectMeta;
use serde_json::{Value, json};

use crate::watches::next;
use crate::*;

const MACHINE_DEPLOYMENTS: &str =
    "/apis/cluster.x-k8s.io/v1beta1/namespaces/default/machinedeployments";

/// The MachineDeployment CRD, cut to what the scale subresource reads: Cluster API's paths
/// (`.spec.replicas`, `.status.replicas`, `.status.selector`).
fn machine_deployment_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "machinedeployments.cluster.x-k8s.io"},
        "spec": {
            "group": "cluster.x-k8s.io",
            "names": {"plural": "machinedeployments", "singular": "machinedeployment",
                      "kind": "MachineDeployment", "listKind": "MachineDeploymentList",
                      "shortNames": ["md"], "categories": ["cluster-api"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas",
                              "statusReplicasPath": ".status.replicas",
                              "labelSelectorPath": ".status.selector"},
                },
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "required": ["clusterName"], "properties": {
                            "clusterName": {"type": "string"},
                            "replicas": {"type": "integer", "format": "int32"},
                            "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        }},
                        "status": {"type": "object", "properties": {
                            "replicas": {"type": "integer", "format": "int32"},
                            "selector": {"type": "string"},
                            "phase": {"type": "string"},
                        }},
                    },
                }},
            }],
        },
    })
}

fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "MachineDeployment"),
        "machinedeployments",
    )
}

/// A server with the Tenant and MachineDeployment CRDs, and the MachineDeployments of
/// `default`.
fn setup_md() -> (ApiServer, Api<DynamicObject>) {
    let (api, client) = setup();
    api.install_crd(machine_deployment_crd()).unwrap();
    (api, Api::namespaced_with(client, "default", &resource()))
}

/// Creates MachineDeployment `name` with `spec` (plus its cluster), then writes its status as
/// the controller would: `replicas` ready, selected by `app=<name>`.
async fn machine_deployment(mds: &Api<DynamicObject>, name: &str, spec: Value, replicas: i64) {
    let mut spec = spec;
    spec["clusterName"] = "c1".into();
    let md = DynamicObject::new(name, &resource()).data(json!({"spec": spec}));
    mds.create(&PostParams::default(), &md).await.unwrap();
    let status = json!({"status": {"replicas": replicas, "selector": format!("app={name}")}});
    mds.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

#[tokio::test]
async fn get_scale_reads_the_replicas_and_selector_paths_of_the_object() {
    let (_api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 3}), 2).await;
    let md = mds.get("md").await.unwrap();
    let scale = mds.get_scale("md").await.unwrap();
    assert_eq!(scale.metadata.name.as_deref(), Some("md"));
    assert_eq!(scale.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(scale.metadata.uid, md.metadata.uid);
    assert_eq!(
        scale.metadata.resource_version,
        md.metadata.resource_version
    );
    assert_eq!(
        scale.metadata.creation_timestamp,
        md.metadata.creation_timestamp
    );
    assert_eq!(scale.metadata.generation, None, "only the five fields");
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    let status = scale.status.unwrap();
    assert_eq!(
        (status.replicas, status.selector.as_deref()),
        (2, Some("app=md"))
    );
}

#[tokio::test]
async fn the_scale_on_the_wire_omits_zero_spec_replicas_as_the_apiserver_does() {
    let (api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 0}), 0).await;
    let (code, scale) = get(&api, &format!("{MACHINE_DEPLOYMENTS}/md/scale")).await;
    assert_eq!(code, 200);
    assert_eq!(
        (&scale["kind"], &scale["apiVersion"]),
        (&json!("Scale"), &json!("autoscaling/v1"))
    );
    assert_eq!(scale["spec"], json!({}));
    assert_eq!(
        scale["status"],
        json!({"replicas": 0, "selector": "app=md"})
    );
}

#[tokio::test]
async fn patch_scale_sets_only_spec_replicas_moves_generation_and_is_watched_as_modified() {
    let (_api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 3, "template": {"x": 1}}), 3).await;
    let before = mds.get("md").await.unwrap();
    let from = before.metadata.resource_version.clone().unwrap();
    let mut watch = mds
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    // What `kubectl scale --replicas=5` sends.
    let scale = mds
        .patch_scale(
            "md",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(5));
    assert_eq!(scale.status.unwrap().replicas, 3, "status is the object's");
    let after = mds.get("md").await.unwrap();
    assert_eq!(
        scale.metadata.resource_version,
        after.metadata.resource_version
    );
    assert_ne!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(
        after.data["spec"],
        json!({"clusterName": "c1", "replicas": 5, "template": {"x": 1}})
    );
    assert_eq!(after.data["status"], before.data["status"]);
    // A spec change: generation 1 -> 2 (the status write did not move it).
    assert_eq!(
        (before.metadata.generation, after.metadata.generation),
        (Some(1), Some(2))
    );
    match next(&mut watch).await.unwrap() {
        WatchEvent::Modified(md) => {
            assert_eq!(md.data["spec"]["replicas"], 5);
            assert_eq!(
                md.metadata.resource_version,
                after.metadata.resource_version
            );
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }
}

#[tokio::test]
async fn a_json_patch_of_the_scale_replaces_the_replicas() {
    let (_api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 1}), 1).await;
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/replicas", "value": 1},
        {"op": "replace", "path": "/spec/replicas", "value": 4},
    ]))
    .unwrap();
    let scale = mds
        .patch_scale("md", &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(4));
    assert_eq!(mds.get("md").await.unwrap().data["spec"]["replicas"], 4);
}

#[tokio::test]
async fn replace_scale_with_a_stale_resource_version_is_a_conflict() {
    let (api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 1}), 1).await;
    let mut scale = mds.get_scale("md").await.unwrap();
    // Someone else scales first.
    mds.patch_scale(
        "md",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    scale.spec = Some(ScaleSpec { replicas: Some(7) });
    let writes = api.stats().writes;
    let status = status_of(
        mds.replace_scale("md", &PostParams::default(), &scale)
            .await,
    );
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        "Operation cannot be fulfilled on machinedeployments.cluster.x-k8s.io \"md\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(api.stats().writes, writes, "nothing written");
    // The same through `kubectl scale --resource-version`: a merge patch that names one.
    let stale = scale.metadata.resource_version.clone().unwrap();
    let patch = json!({"metadata": {"resourceVersion": stale}, "spec": {"replicas": 7}});
    let status = status_of(
        mds.patch_scale("md", &PatchParams::default(), &Patch::Merge(patch))
            .await,
    );
    assert_eq!(status.code, 409);
    // With the current resourceVersion, or none (the Scale is then unconditional), it is written.
    let mut fresh = mds.get_scale("md").await.unwrap();
    fresh.spec = Some(ScaleSpec { replicas: Some(7) });
    let written = mds
        .replace_scale("md", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_eq!(written.spec.unwrap().replicas, Some(7));
    fresh.metadata.resource_version = None;
    fresh.spec = Some(ScaleSpec { replicas: Some(8) });
    let written = mds
        .replace_scale("md", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_eq!(written.spec.unwrap().replicas, Some(8));
}

#[tokio::test]
async fn a_scale_whose_uid_is_not_the_objects_is_a_precondition_failure() {
    let (_api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 1}), 1).await;
    let mut scale = mds.get_scale("md").await.unwrap();
    let uid = scale.metadata.uid.clone().unwrap();
    scale.metadata.uid = Some("00000000-0000-4000-8000-000000000000".into());
    let status = status_of(
        mds.replace_scale("md", &PostParams::default(), &scale)
            .await,
    );
    assert_eq!(status.code, 409);
    assert_eq!(
        status.message,
        format!(
            "Operation cannot be fulfilled on machinedeployments.cluster.x-k8s.io \"md\": Precondition failed: UID in precondition: 00000000-0000-4000-8000-000000000000, UID in object meta: {uid}"
        )
    );
}

#[tokio::test]
async fn negative_replicas_are_invalid_as_the_crd_strategy_says() {
    let (api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 1}), 1).await;
    let scale = Scale {
        metadata: ObjectMeta {
            name: Some("md".into()),
            ..ObjectMeta::default()
        },
        spec: Some(ScaleSpec { replicas: Some(-1) }),
        status: None,
    };
    let status = status_of(
        mds.replace_scale("md", &PostParams::default(), &scale)
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "MachineDeployment.cluster.x-k8s.io \"md\" is invalid: .spec.replicas: Invalid value: -1: should be a non-negative integer"
    );
    let details = status.details.unwrap();
    assert_eq!(
        (
            details.group.as_str(),
            details.kind.as_str(),
            details.name.as_str()
        ),
        ("cluster.x-k8s.io", "MachineDeployment", "md")
    );
    assert_eq!(details.causes[0].field, ".spec.replicas");
    // The object's own writes are held to the same rule.
    let (code, body) = call(
        &api,
        "PATCH",
        &format!("{MACHINE_DEPLOYMENTS}/md"),
        "application/merge-patch+json",
        json!({"spec": {"replicas": -2}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "MachineDeployment.cluster.x-k8s.io \"md\" is invalid: .spec.replicas: Invalid value: -2: should be a non-negative integer"
    );
}

#[tokio::test]
async fn an_object_without_spec_replicas_has_no_scale_to_read_but_can_be_scaled() {
    let (api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({}), 0).await;
    let status = status_of(mds.get_scale("md").await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (500, "InternalError")
    );
    assert_eq!(
        status.message,
        "Internal error occurred: the spec replicas field \".spec.replicas\" does not exist"
    );
    // A patch that sets no replicas leaves the marker of "none": refused.
    let (code, body) = call(
        &api,
        "PATCH",
        &format!("{MACHINE_DEPLOYMENTS}/md/scale"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"a": "b"}}}),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        body["message"],
        "the spec replicas field \".spec.replicas\" cannot be empty"
    );
    let scale = mds
        .patch_scale(
            "md",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(2));
}

#[tokio::test]
async fn a_kind_without_scale_or_a_missing_object_is_the_objects_not_found() {
    let (api, mds) = setup_md();
    let client = kube::Client::new(api.clone(), "default");
    create(&client, "acme", 1).await;
    let status = status_of(tenants(&client).get_scale("acme").await);
    assert_eq!(status.code, 404);
    assert_eq!(
        status.message,
        "tenants.placement.tenant-placer.dev \"acme\" not found"
    );
    let status = status_of(mds.get_scale("nope").await);
    assert_eq!(status.code, 404);
    assert_eq!(
        status.message,
        "machinedeployments.cluster.x-k8s.io \"nope\" not found"
    );
    // Any other subresource of a custom kind too.
    let (code, body) = get(&api, &format!("{TENANTS}/acme/logs")).await;
    assert_eq!(code, 404);
    assert_eq!(
        body["message"],
        "tenants.placement.tenant-placer.dev \"acme\" not found"
    );
}

#[tokio::test]
async fn the_scale_serves_get_update_and_patch_only() {
    let (api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 1}), 1).await;
    let (code, body) = call(
        &api,
        "DELETE",
        &format!("{MACHINE_DEPLOYMENTS}/md/scale"),
        "application/json",
        Value::Null,
    )
    .await;
    assert_eq!(code, 405);
    assert_eq!(body["reason"], "MethodNotAllowed");
    assert_eq!(
        body["message"],
        "delete is not supported on resources of kind \"machinedeployments.cluster.x-k8s.io\""
    );
    assert_eq!(
        body["details"],
        json!({"group": "cluster.x-k8s.io", "kind": "machinedeployments"})
    );
    // A custom kind takes no strategic merge patch, on /scale either.
    let (code, _) = call(
        &api,
        "PATCH",
        &format!("{MACHINE_DEPLOYMENTS}/md/scale"),
        "application/strategic-merge-patch+json",
        json!({"spec": {"replicas": 2}}),
    )
    .await;
    assert_eq!(code, 415);
}

#[tokio::test]
async fn a_put_scale_is_decoded_as_an_autoscaling_v1_scale() {
    let (api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 1}), 1).await;
    let uri = format!("{MACHINE_DEPLOYMENTS}/md/scale");
    let put = |body: Value| call(&api, "PUT", &uri, "application/json", body);
    // (body, status code, message)
    let cases = [
        (
            json!({"metadata": {"name": "md"}, "spec": {"replicas": "3"}}),
            400,
            "Scale in version \"v1\" cannot be handled as a Scale: json: cannot unmarshal string into Go struct field ScaleSpec.spec.replicas of type int32",
        ),
        (
            json!({"metadata": {"name": "other"}, "spec": {"replicas": 3}}),
            400,
            "the name of the object (other) does not match the name on the URL (md)",
        ),
        // Unlike a PUT of the object, a Scale must name it.
        (
            json!({"spec": {"replicas": 3}}),
            400,
            "the name of the object () does not match the name on the URL (md)",
        ),
        (
            json!({"metadata": {"name": "md", "namespace": "elsewhere"}, "spec": {"replicas": 3}}),
            400,
            "the namespace of the provided object does not match the namespace sent on the request",
        ),
    ];
    for (body, code, message) in cases {
        let (got, answer) = put(body.clone()).await;
        assert_eq!(
            (got, answer["message"].as_str()),
            (code, Some(message)),
            "{body}"
        );
    }
    let (code, answer) = call(
        &api,
        "PUT",
        &format!("{uri}?fieldValidation=Strict"),
        "application/json",
        json!({"metadata": {"name": "md"}, "spec": {"replicas": 3, "paused": true}}),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        answer["message"],
        "Scale in version \"v1\" cannot be handled as a Scale: strict decoding error: unknown field \"spec.paused\""
    );
    let (code, answer) = put(json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                                    "metadata": {"name": "md"}, "spec": {"replicas": 3}}))
    .await;
    assert_eq!(code, 200);
    assert_eq!(answer["spec"]["replicas"], 3);
}

#[tokio::test]
async fn discovery_lists_the_scale_subresource_as_autoscaling_v1_scale() {
    let (api, _mds) = setup_md();
    let (code, body) = get(&api, "/apis/cluster.x-k8s.io/v1beta1").await;
    assert_eq!(code, 200);
    let scale = body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "machinedeployments/scale")
        .expect("machinedeployments/scale");
    assert_eq!(
        *scale,
        json!({"name": "machinedeployments/scale", "singularName": "", "namespaced": true,
               "group": "autoscaling", "version": "v1", "kind": "Scale",
               "verbs": ["get", "patch", "update"]})
    );
    let (_, _, aggregated) = request(
        &api,
        "GET",
        "/apis",
        &[(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )],
        Value::Null,
    )
    .await;
    let group = aggregated["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "cluster.x-k8s.io")
        .expect("the cluster API group");
    assert_eq!(
        group["versions"][0]["resources"][0]["subresources"],
        json!([
            {"subresource": "status", "verbs": ["get", "patch", "update"],
             "responseKind": {"group": "cluster.x-k8s.io", "version": "v1beta1", "kind": "MachineDeployment"}},
            {"subresource": "scale", "verbs": ["get", "patch", "update"],
             "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}},
        ])
    );
    let (_, openapi) = get(&api, "/openapi/v3/apis/cluster.x-k8s.io/v1beta1").await;
    let path = &openapi["paths"]["/apis/cluster.x-k8s.io/v1beta1/namespaces/{namespace}/machinedeployments/{name}/scale"];
    assert_eq!(
        path["put"]["operationId"],
        "replaceClusterXK8sIoV1beta1NamespacedMachineDeploymentScale"
    );
    assert!(openapi["components"]["schemas"]["io.k8s.api.autoscaling.v1.Scale"].is_object());
}

#[tokio::test]
async fn scale_requests_are_counted_as_their_own_subresource() {
    let (api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 1}), 1).await;
    api.reset_stats();
    mds.get_scale("md").await.unwrap();
    mds.patch_scale(
        "md",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    let keys: Vec<RequestKey> = api.stats().requests.into_keys().collect();
    let scale = |verb| RequestKey {
        verb,
        group: "cluster.x-k8s.io".into(),
        resource: "machinedeployments".into(),
        subresource: Some("scale".into()),
    };
    assert_eq!(keys, [scale(Verb::Get), scale(Verb::Patch)]);
}

#[tokio::test]
async fn a_crd_whose_scale_paths_are_not_under_spec_and_status_is_refused() {
    let api = ApiServer::new();
    let mut crd = machine_deployment_crd();
    crd["spec"]["versions"][0]["subresources"]["scale"] =
        json!({"specReplicasPath": ".status.replicas", "statusReplicasPath": "status.replicas"});
    let err = api.install_crd(crd).unwrap_err();
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        "CustomResourceDefinition.apiextensions.k8s.io \"machinedeployments.cluster.x-k8s.io\" is invalid: [spec.versions[0].subresources.scale.specReplicasPath: Invalid value: \".status.replicas\": should be a json path under .spec, spec.versions[0].subresources.scale.statusReplicasPath: Invalid value: \"status.replicas\": must be a simple json path starting with .]"
    );
}

#[tokio::test]
async fn a_dry_run_scale_answers_the_scale_and_writes_nothing() {
    let (api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 1}), 1).await;
    let rv = api.resource_version();
    let scale = mds
        .patch_scale(
            "md",
            &PatchParams::default().dry_run(),
            &Patch::Merge(json!({"spec": {"replicas": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(9));
    assert_eq!(api.resource_version(), rv);
    let listed: Vec<DynamicObject> = mds
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .collect();
    assert_eq!(listed[0].data["spec"]["replicas"], 1);
}

#[tokio::test]
async fn a_delete_of_a_subresource_is_refused_and_deletes_nothing() {
    let (api, client) = setup();
    create(&client, "acme", 1).await;
    let (code, body) = call(
        &api,
        "DELETE",
        &format!("{TENANTS}/acme/status"),
        "application/json",
        Value::Null,
    )
    .await;
    assert_eq!(code, 405);
    assert_eq!(
        body["message"],
        "delete is not supported on resources of kind \"tenants.placement.tenant-placer.dev\""
    );
    // A built-in kind (CRDs have /status) has no such route: the generic 405.
    let crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/tenants.placement.tenant-placer.dev";
    let (code, body) = call(
        &api,
        "DELETE",
        &format!("{crd}/status"),
        "application/json",
        Value::Null,
    )
    .await;
    assert_eq!(code, 405);
    assert_eq!(
        body["message"],
        "the server does not allow this method on the requested resource"
    );
    assert_eq!(get(&api, crd).await.0, 200);
    assert_eq!(get(&api, &format!("{TENANTS}/acme")).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_finds_the_subresource_in_discovery_and_scales_the_object() {
    let (api, mds) = setup_md();
    machine_deployment(&mds, "md", json!({"replicas": 1}), 1).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(inmem_apiserver::server::serve(api.clone(), listener));
    let run = |args: &'static [&'static str]| {
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            tokio::task::spawn_blocking(move || kubectl(addr, args)),
        )
    };
    let out = run(&["scale", "machinedeployment", "md", "--replicas=4"])
        .await
        .expect("kubectl within 30s")
        .unwrap();
    assert_eq!(out, "machinedeployment.cluster.x-k8s.io/md scaled\n");
    assert_eq!(mds.get("md").await.unwrap().data["spec"]["replicas"], 4);
    // With a precondition on the current replicas, as `kubectl scale --current-replicas` says.
    let out = run(&["scale", "md", "md", "--current-replicas=4", "--replicas=2"])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out, "machinedeployment.cluster.x-k8s.io/md scaled\n");
    assert_eq!(
        mds.get_scale("md").await.unwrap().spec.unwrap().replicas,
        Some(2)
    );
    server.abort();
}
