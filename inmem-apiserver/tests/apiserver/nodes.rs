//! The core `v1` Node, served beside a custom kind of the same name and plural (tenant-placer's
//! own `nodes.placement.tenant-placer.dev`), as a real apiserver serves both.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use inmem_apiserver::{ApiServer, Fault, RequestKey, Verb};
use k8s_openapi::api::core::v1::{
    Node as CoreNode, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo,
};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::ObjectMeta;
use serde_json::{Value, json};

use crate::watches::next;
use crate::*;

const NODES: &str = "/api/v1/nodes";

/// tenant-placer's own Node kind, as its CRD names it (cut to what these tests need).
fn placement_node_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "nodes.placement.tenant-placer.dev"},
        "spec": {
            "group": "placement.tenant-placer.dev",
            "names": {"plural": "nodes", "singular": "node", "kind": "Node",
                      "shortNames": ["pnode", "pnodes"], "categories": ["placement"]},
            "scope": "Cluster",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
            }],
        },
    })
}

fn placement_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", "Node"), "nodes")
}

fn placement_nodes(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &placement_resource())
}

/// A placement Node with this spec.
fn placement_node(name: &str, spec: Value) -> DynamicObject {
    DynamicObject::new(name, &placement_resource()).data(json!({"spec": spec}))
}

/// A server with the Tenant CRD and tenant-placer's Node CRD, and the core Nodes.
fn setup_nodes() -> (ApiServer, kube::Client, Api<CoreNode>) {
    let (api, client) = setup();
    api.install_crd(placement_node_crd()).unwrap();
    let nodes = Api::all(client.clone());
    (api, client, nodes)
}

/// A kubelet's Node: ready, labelled, with its version and internal address.
fn node(name: &str, labels: &[(&str, &str)]) -> CoreNode {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    CoreNode {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some("10.244.0.0/24".into()),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..NodeCondition::default()
            }]),
            node_info: Some(NodeSystemInfo {
                kubelet_version: "v1.36.0".into(),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
    }
}

fn ready(node: &CoreNode) -> Option<&str> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

#[tokio::test]
async fn a_node_is_created_with_its_status_and_without_generation() {
    let (api, _client, nodes) = setup_nodes();
    let created = nodes
        .create(&PostParams::default(), &node("n1", &[]))
        .await
        .unwrap();
    // The node strategy keeps the status of a create, unlike the status subresource of others.
    assert_eq!(ready(&created), Some("True"));
    assert_eq!(
        created.metadata.generation, None,
        "nodes track no generation"
    );
    assert!(created.metadata.uid.is_some());
    let got = nodes.get("n1").await.unwrap();
    assert_eq!(got, created);
    assert_eq!(
        api.get("", "nodes", None, "n1").unwrap()["apiVersion"],
        "v1"
    );
    let status = status_of(nodes.create(&PostParams::default(), &node("n1", &[])).await);
    assert_eq!(
        (status.code, status.message.as_str()),
        (409, "nodes \"n1\" already exists")
    );
}

#[tokio::test]
async fn a_status_patch_writes_status_and_labels_but_never_the_spec() {
    let (_api, _client, nodes) = setup_nodes();
    let created = nodes
        .create(&PostParams::default(), &node("n1", &[]))
        .await
        .unwrap();
    // What a kubelet's status update looks like, with a spec change /status must not take.
    let patch = json!({
        "metadata": {"labels": {"topology.kubernetes.io/zone": "eu-1"}},
        "spec": {"unschedulable": true},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    });
    let patched = nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    assert_eq!(ready(&patched), Some("False"));
    assert_eq!(
        patched.spec, created.spec,
        "the status strategy keeps the spec"
    );
    assert_eq!(
        patched.metadata.labels.unwrap()["topology.kubernetes.io/zone"],
        "eu-1",
        "labels written through /status are kept"
    );
    assert_ne!(
        patched.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(patched.metadata.generation, None);
    // And the main resource keeps the status: `kubectl cordon`.
    let cordon = json!({"spec": {"unschedulable": true}, "status": {"conditions": []}});
    let cordoned = nodes
        .patch("n1", &PatchParams::default(), &Patch::Strategic(cordon))
        .await
        .unwrap();
    assert_eq!(cordoned.spec.as_ref().unwrap().unschedulable, Some(true));
    assert_eq!(ready(&cordoned), Some("False"));
    assert_eq!(cordoned.metadata.generation, None);
}

#[tokio::test]
async fn a_node_is_replaced_without_a_resource_version() {
    let (_api, _client, nodes) = setup_nodes();
    nodes
        .create(&PostParams::default(), &node("n1", &[]))
        .await
        .unwrap();
    // AllowUnconditionalUpdate: a PUT may omit the resourceVersion.
    let replaced = nodes
        .replace(
            "n1",
            &PostParams::default(),
            &node("n1", &[("node-role.kubernetes.io/worker", "")]),
        )
        .await
        .unwrap();
    assert!(
        replaced
            .metadata
            .labels
            .unwrap()
            .contains_key("node-role.kubernetes.io/worker")
    );
}

#[tokio::test]
async fn nodes_are_listed_by_label_and_by_spec_unschedulable() {
    let (api, _client, nodes) = setup_nodes();
    for (name, zone) in [("n1", "eu-1"), ("n2", "eu-2"), ("n3", "eu-1")] {
        nodes
            .create(
                &PostParams::default(),
                &node(name, &[("topology.kubernetes.io/zone", zone)]),
            )
            .await
            .unwrap();
    }
    nodes
        .patch(
            "n3",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let names = |list: kube::core::ObjectList<CoreNode>| -> Vec<String> {
        list.items
            .into_iter()
            .map(|n| n.metadata.name.unwrap())
            .collect()
    };
    let all = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(all), ["n1", "n2", "n3"]);
    let eu1 = nodes
        .list(&ListParams::default().labels("topology.kubernetes.io/zone=eu-1"))
        .await
        .unwrap();
    assert_eq!(names(eu1), ["n1", "n3"]);
    // A node without the field is schedulable: `spec.unschedulable` reads `false`.
    let schedulable = nodes
        .list(&ListParams::default().fields("spec.unschedulable=false"))
        .await
        .unwrap();
    assert_eq!(names(schedulable), ["n1", "n2"]);
    // Nodes have no namespace to select on.
    let (code, body) = get(
        &api,
        &format!("{NODES}?fieldSelector=metadata.namespace%3Ddefault"),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        body["message"],
        "field label not supported: metadata.namespace"
    );
}

#[tokio::test]
async fn a_watch_of_nodes_sees_them_added_modified_and_deleted() {
    let (api, client, nodes) = setup_nodes();
    let from = api.resource_version().to_string();
    let mut events = nodes
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    nodes
        .create(&PostParams::default(), &node("n1", &[]))
        .await
        .unwrap();
    // A placement Node of the same name is not a core Node's event.
    placement_nodes(&client)
        .create(&PostParams::default(), &placement_node("n1", json!({})))
        .await
        .unwrap();
    nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            ),
        )
        .await
        .unwrap();
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(match next(&mut events).await.unwrap() {
            WatchEvent::Added(n) => format!("ADDED {}", ready(&n).unwrap_or("-")),
            WatchEvent::Modified(n) => format!("MODIFIED {}", ready(&n).unwrap_or("-")),
            WatchEvent::Deleted(n) => format!("DELETED {}", n.metadata.name.unwrap()),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(seen, ["ADDED True", "MODIFIED False", "DELETED n1"]);
}

#[tokio::test]
async fn a_deleted_node_answers_a_success_status_then_is_not_found() {
    let (_api, _client, nodes) = setup_nodes();
    let created = nodes
        .create(&PostParams::default(), &node("n1", &[]))
        .await
        .unwrap();
    let deleted = nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    let status = deleted.right().expect("a Status, not the node");
    let details = status.details.unwrap();
    assert_eq!(
        (
            details.name.as_str(),
            details.kind.as_str(),
            details.group.as_str()
        ),
        ("n1", "nodes", "")
    );
    assert_eq!(Some(details.uid), created.metadata.uid);
    let status = status_of(nodes.get("n1").await);
    assert_eq!(
        (status.code, status.message.as_str()),
        (404, "nodes \"n1\" not found")
    );
}

#[tokio::test]
async fn a_placement_node_of_the_same_name_is_another_object() {
    let (api, client, nodes) = setup_nodes();
    let pnodes = placement_nodes(&client);
    let core = nodes
        .create(&PostParams::default(), &node("n1", &[]))
        .await
        .unwrap();
    let placement = pnodes
        .create(
            &PostParams::default(),
            &placement_node("n1", json!({"capacity": {"threads": 8}})),
        )
        .await
        .unwrap();
    assert_ne!(core.metadata.uid, placement.metadata.uid);
    assert_eq!(
        placement.metadata.generation,
        Some(1),
        "a custom kind's generation"
    );
    assert_eq!(
        placement.types.as_ref().unwrap().api_version,
        format!("{GROUP}/v1")
    );
    assert_eq!(api.list("", "nodes").len(), 1);
    assert_eq!(api.list(GROUP, "nodes").len(), 1);
    // Deleting one leaves the other.
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    assert!(nodes.get_opt("n1").await.unwrap().is_none());
    assert_eq!(
        pnodes.get("n1").await.unwrap().metadata.uid,
        placement.metadata.uid
    );
    // The requests are told apart by group, for RBAC checks and faults.
    let keys: Vec<RequestKey> = api.stats().requests.into_keys().collect();
    let deletes: Vec<&str> = keys
        .iter()
        .filter(|k| k.verb == Verb::Delete)
        .map(|k| k.group.as_str())
        .collect();
    assert_eq!(deletes, [""]);
    api.inject(
        Fault::on(Verb::Get)
            .group(GROUP)
            .resource("nodes")
            .internal_error(),
    );
    assert!(
        nodes.get_opt("n1").await.unwrap().is_none(),
        "the core get is not faulted"
    );
    assert_eq!(status_of(pnodes.get("n1").await).code, 500);
}

#[tokio::test]
async fn discovery_serves_core_nodes_first_and_placement_nodes_by_their_group() {
    let (api, _client, _nodes) = setup_nodes();
    let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let (_, _, core) = request(&api, "GET", "/api", &[("accept", aggregated)], Value::Null).await;
    let nodes = core["items"][0]["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "nodes")
        .expect("core nodes");
    assert_eq!(nodes["scope"], "Cluster");
    assert_eq!(nodes["shortNames"], json!(["no"]));
    assert_eq!(
        nodes["responseKind"],
        json!({"group": "", "version": "v1", "kind": "Node"})
    );
    assert_eq!(nodes["subresources"][0]["subresource"], "status");
    let (_, _, groups) =
        request(&api, "GET", "/apis", &[("accept", aggregated)], Value::Null).await;
    let placement = groups["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == GROUP)
        .unwrap();
    let pnodes = placement["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "nodes")
        .expect("placement nodes");
    assert_eq!(pnodes["shortNames"], json!(["pnode", "pnodes"]));
    let (_, legacy) = get(&api, "/api/v1").await;
    let names: Vec<&str> = legacy["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .filter(|n| n.starts_with("nodes"))
        .collect();
    assert_eq!(names, ["nodes", "nodes/status"]);
}

#[tokio::test]
async fn kubectl_get_nodes_is_a_table_of_the_node_printer_columns() {
    let (api, _client, nodes) = setup_nodes();
    nodes
        .create(
            &PostParams::default(),
            &node("n1", &[("node-role.kubernetes.io/control-plane", "")]),
        )
        .await
        .unwrap();
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let (code, headers, table) = request(
        &api,
        "GET",
        NODES,
        &[("accept", KUBECTL_TABLE)],
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        headers["content-type"],
        "application/json;as=Table;v=v1;g=meta.k8s.io"
    );
    let columns: Vec<(&str, &str, i64)> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["type"].as_str().unwrap(),
                c["priority"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        columns,
        [
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
            ("Internal-IP", "string", 1),
            ("External-IP", "string", 1),
            ("OS-Image", "string", 1),
            ("Kernel-Version", "string", 1),
            ("Container-Runtime", "string", 1),
        ]
    );
    let cells = table["rows"][0]["cells"].as_array().unwrap();
    let age = cells[3].as_str().unwrap();
    assert!(age.ends_with('s'), "{age}");
    assert_eq!(
        *cells,
        [
            json!("n1"),
            json!("Ready,SchedulingDisabled"),
            json!("control-plane"),
            json!(age),
            json!("v1.36.0"),
            json!("<none>"),
            json!("<none>"),
            json!("<unknown>"),
            json!("<unknown>"),
            json!("<unknown>"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_resolves_nodes_to_the_core_kind_and_pnodes_to_tenant_placers() {
    let (api, client, nodes) = setup_nodes();
    nodes
        .create(&PostParams::default(), &node("n1", &[]))
        .await
        .unwrap();
    let pnodes = placement_nodes(&client);
    pnodes
        .create(&PostParams::default(), &placement_node("p1", json!({})))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(inmem_apiserver::server::serve(api.clone(), listener));
    let run = |args: &'static [&'static str]| {
        tokio::time::timeout(
            Duration::from_secs(30),
            tokio::task::spawn_blocking(move || kubectl(addr, args)),
        )
    };
    // (arguments, output): the core group comes first in discovery, so `nodes` is core.
    let cases: [(&'static [&'static str], &str); 5] = [
        (&["get", "nodes", "-o", "name"], "node/n1\n"),
        (&["get", "no", "-o", "name"], "node/n1\n"),
        (
            &["get", "pnodes", "-o", "name"],
            "node.placement.tenant-placer.dev/p1\n",
        ),
        (
            &["get", "nodes.placement.tenant-placer.dev", "-o", "name"],
            "node.placement.tenant-placer.dev/p1\n",
        ),
        (&["get", "nodes.v1.", "-o", "name"], "node/n1\n"),
    ];
    for (args, expected) in cases {
        let out = run(args).await.expect("kubectl within 30s").unwrap();
        assert_eq!(out, expected, "kubectl {args:?}");
    }
    let table = run(&["get", "nodes"]).await.unwrap().unwrap();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    server.abort();
}

#[tokio::test]
async fn a_node_with_an_external_id_is_warned_of_and_loses_its_kubelet_config_source() {
    let (api, _client, _nodes) = setup_nodes();
    let body = json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "spec": {"externalID": "i-123", "configSource": {"configMap": {"name": "kubelet"}}},
    });
    let (code, headers, created) = request(
        &api,
        "POST",
        NODES,
        &[("content-type", "application/json")],
        body,
    )
    .await;
    assert_eq!(code, 201);
    let warnings: Vec<&str> = headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        warnings,
        ["299 - \"spec.externalID: this field is deprecated, and is unused by Kubernetes\""]
    );
    assert_eq!(created["spec"], json!({"externalID": "i-123"}));
}
