//! Malformed Tenants and Nodes, sent through the in-memory API with the real
//! generated CRDs, are refused as a Kubernetes apiserver refuses them: `422
//! Invalid`, with a message that names the field (schema bounds, enums,
//! integer formats and the CRD's `x-kubernetes-validations` rules).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use http_body_util::BodyExt;
use inmem_apiserver::ApiServer;
use kube::CustomResourceExt;
use serde_json::Value;
use tenant_placer::api::{Node, NodeClass, Tenant};

/// One malformed manifest: what it is (a sentence), the manifest, the field
/// the refusal must name, and a fragment of the message.
struct Row {
    what: &'static str,
    manifest: &'static str,
    field: &'static str,
    fragment: &'static str,
}

const ROWS: &[Row] = &[
    Row {
        what: "a nodeSelector value longer than a label value may be is refused",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  resources: {threads: 2, memoryGb: 4, storageGb: 20}
  nodeSelector: {region: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx}
",
        field: "spec.nodeSelector.region",
        fragment: "may not be more than 63 bytes",
    },
    Row {
        what: "a Standalone tenant with 2 replicas breaks the Standalone rule",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  mode: Standalone
  replicas: 2
  resources: {threads: 2, memoryGb: 4, storageGb: 20}
",
        field: "spec.replicas",
        fragment: r#"spec.replicas: Invalid value: "object": a Standalone tenant has exactly 1 replica: remove spec.replicas or set it to 1, or set spec.mode to Cluster"#,
    },
    Row {
        what: "a Cluster tenant with 1 replica breaks the Cluster rule",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  mode: Cluster
  replicas: 1
  resources: {threads: 2, memoryGb: 4, storageGb: 20}
",
        field: "spec.replicas",
        fragment: r#"spec.replicas: Invalid value: "object": a Cluster tenant has at least 2 replicas: set spec.replicas to 2 or more, or remove it (Cluster means 2)"#,
    },
    Row {
        what: "a tenant left Standalone by default with 2 replicas breaks the Standalone rule",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  replicas: 2
  resources: {threads: 2, memoryGb: 4, storageGb: 20}
",
        field: "spec.replicas",
        fragment: "a Standalone tenant has exactly 1 replica",
    },
    Row {
        what: "2147483648 replicas do not fit the int32 format",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  mode: Cluster
  replicas: 2147483648
  resources: {threads: 2, memoryGb: 4, storageGb: 20}
",
        field: "spec.replicas",
        fragment: r#"<nil>: Invalid value: "": Checked value must be of type integer with format int32 in spec.replicas"#,
    },
    Row {
        what: "1001 replicas are over the maximum",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  mode: Cluster
  replicas: 1001
  resources: {threads: 2, memoryGb: 4, storageGb: 20}
",
        field: "spec.replicas",
        fragment: "spec.replicas: Invalid value: 1001: spec.replicas in body should be less than or equal to 1000",
    },
    Row {
        what: "0 replicas are under the minimum",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  mode: Cluster
  replicas: 0
  resources: {threads: 2, memoryGb: 4, storageGb: 20}
",
        field: "spec.replicas",
        fragment: "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1",
    },
    Row {
        what: "0 threads are under the minimum",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  resources: {threads: 0, memoryGb: 4, storageGb: 20}
",
        field: "spec.resources.threads",
        fragment: "spec.resources.threads: Invalid value: 0: spec.resources.threads in body should be greater than or equal to 1",
    },
    Row {
        what: "0 GB of memory is under the minimum",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  resources: {threads: 2, memoryGb: 0, storageGb: 20}
",
        field: "spec.resources.memoryGb",
        fragment: "spec.resources.memoryGb: Invalid value: 0: spec.resources.memoryGb in body should be greater than or equal to 1",
    },
    Row {
        what: "-1 threads are under the minimum",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  resources: {threads: -1, memoryGb: 4, storageGb: 20}
",
        field: "spec.resources.threads",
        fragment: "spec.resources.threads: Invalid value: -1: spec.resources.threads in body should be greater than or equal to 1",
    },
    Row {
        what: "2^53 GB of storage is over the maximum",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  resources: {threads: 2, memoryGb: 4, storageGb: 9007199254740992}
",
        field: "spec.resources.storageGb",
        fragment: "spec.resources.storageGb: Invalid value: 9007199254740992: spec.resources.storageGb in body should be less than or equal to 9007199254740991",
    },
    Row {
        what: "a thread count of 1.5 is not an integer",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  resources: {threads: 1.5, memoryGb: 4, storageGb: 20}
",
        field: "spec.resources.threads",
        fragment: r#"spec.resources.threads: Invalid value: "float64": spec.resources.threads in body must be of type int64: "float64""#,
    },
    Row {
        what: "an unknown mode is not one of the supported values",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  mode: Replicated
  resources: {threads: 2, memoryGb: 4, storageGb: 20}
",
        field: "spec.mode",
        fragment: r#"spec.mode: Unsupported value: "Replicated": supported values: "Standalone", "Cluster""#,
    },
    Row {
        what: "a tenant without resources misses a required field",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Tenant
metadata: {name: bad, namespace: default}
spec:
  mode: Standalone
",
        field: "spec.resources",
        fragment: "spec.resources: Required value",
    },
    Row {
        what: "a node overcommitting threads by 0.0001 is under the minimum ratio",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Node
metadata: {name: bad}
spec:
  capacity: {threads: 64, memoryGb: 256, storageGb: 8000}
  overcommit: {threads: 0.0001}
",
        field: "spec.overcommit.threads",
        fragment: "spec.overcommit.threads: Invalid value: 0.0001: spec.overcommit.threads in body should be greater than or equal to 0.001",
    },
    Row {
        what: "a node overcommitting threads 17 times is over the maximum ratio",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Node
metadata: {name: bad}
spec:
  capacity: {threads: 64, memoryGb: 256, storageGb: 8000}
  overcommit: {threads: 17}
",
        field: "spec.overcommit.threads",
        fragment: "spec.overcommit.threads: Invalid value: 17: spec.overcommit.threads in body should be less than or equal to 16",
    },
    Row {
        what: "a node with negative capacity is under the minimum",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Node
metadata: {name: bad}
spec:
  capacity: {threads: -8, memoryGb: 256, storageGb: 8000}
",
        field: "spec.capacity.threads",
        fragment: "spec.capacity.threads: Invalid value: -8: spec.capacity.threads in body should be greater than or equal to 0",
    },
    Row {
        what: "an unknown node state is not one of the supported values",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: Node
metadata: {name: bad}
spec:
  capacity: {threads: 64, memoryGb: 256, storageGb: 8000}
  state: Retired
",
        field: "spec.state",
        fragment: r#"spec.state: Unsupported value: "Retired": supported values: "Online", "Cordoned", "Offline", "Draining""#,
    },
    Row {
        what: "a NodeClass label key with a space and a '!' is not a label key",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: NodeClass
metadata: {name: bad}
spec:
  capacity: {threads: 32, memoryGb: 128, storageGb: 2000}
  provider: hetzner/AX102
  labels: {'bad key!': fsn1}
",
        field: "spec.labels",
        fragment: r#"spec.labels: Invalid value: "object": a label key must be a name of at most 63 characters"#,
    },
    Row {
        what: "a NodeClass label key with a prefix of 254 characters is not a label key",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: NodeClass
metadata: {name: bad}
spec:
  capacity: {threads: 32, memoryGb: 128, storageGb: 2000}
  provider: hetzner/AX102
  labels: {aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/zone: fsn1}
",
        field: "spec.labels",
        fragment: "a label key must be a name of at most 63 characters, optionally prefixed by a DNS subdomain of at most 253 characters",
    },
    Row {
        what: "a NodeClass label value of 64 characters is longer than a label value may be",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: NodeClass
metadata: {name: bad}
spec:
  capacity: {threads: 32, memoryGb: 128, storageGb: 2000}
  provider: hetzner/AX102
  labels: {topology.kubernetes.io/zone: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx}
",
        // As on a real server: a value over `maxLength` stops the CEL rules from being run.
        field: "spec.labels.topology.kubernetes.io/zone",
        fragment: "spec.labels.topology.kubernetes.io/zone: Too long: may not be more than 63 bytes",
    },
    Row {
        what: "a NodeClass label value ending in '-' is not a label value",
        manifest: "
apiVersion: placement.tenant-placer.dev/v1alpha1
kind: NodeClass
metadata: {name: bad}
spec:
  capacity: {threads: 32, memoryGb: 128, storageGb: 2000}
  provider: hetzner/AX102
  labels: {topology.kubernetes.io/zone: fsn1-}
",
        field: "spec.labels",
        fragment: "a valid label value must be an empty string or consist of alphanumeric characters",
    },
];

/// The value at each limit the rows above go past, which must be accepted: a bound compared off
/// by one refuses it. (What each is, the kind, and its spec.)
const AT_THE_LIMIT: &[(&str, &str, &str)] = &[
    (
        "a nodeSelector value of exactly 63 bytes",
        "Tenant",
        "{resources: {threads: 2, memoryGb: 4, storageGb: 20}, \
         nodeSelector: {region: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx}}",
    ),
    (
        "1000 replicas, the maximum",
        "Tenant",
        "{mode: Cluster, replicas: 1000, resources: {threads: 2, memoryGb: 4, storageGb: 20}}",
    ),
    (
        "1 replica, the minimum",
        "Tenant",
        "{mode: Standalone, replicas: 1, resources: {threads: 2, memoryGb: 4, storageGb: 20}}",
    ),
    (
        "2 replicas, the least for a Cluster",
        "Tenant",
        "{mode: Cluster, replicas: 2, resources: {threads: 2, memoryGb: 4, storageGb: 20}}",
    ),
    (
        "1 thread, 1 GB of memory and 1 GB of storage, the minimums",
        "Tenant",
        "{resources: {threads: 1, memoryGb: 1, storageGb: 1}}",
    ),
    (
        "2^53-1 threads, GB of memory and GB of storage, the maximums",
        "Tenant",
        "{resources: {threads: 9007199254740991, memoryGb: 9007199254740991, \
         storageGb: 9007199254740991}}",
    ),
    (
        "overcommit ratios of 0.001 and 16, the bounds",
        "Node",
        "{capacity: {threads: 64, memoryGb: 256, storageGb: 8000}, \
         overcommit: {threads: 0.001, memoryGb: 16, storageGb: 16}}",
    ),
    (
        "a node with capacity 0 and 2^53-1, the bounds",
        "Node",
        "{capacity: {threads: 0, memoryGb: 9007199254740991, storageGb: 9007199254740991}}",
    ),
    (
        "a NodeClass labelled as a real zone, with an empty value, and at the length limits",
        "NodeClass",
        "{capacity: {threads: 32, memoryGb: 128, storageGb: 2000}, provider: hetzner/AX102, \
         labels: {topology.kubernetes.io/zone: fsn1, example.com/empty: '', \
         xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx: \
         xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx, \
         aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.\
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.\
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.\
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/Zone_1.a: x}}",
    ),
];

fn api_with_crds() -> ApiServer {
    let api = ApiServer::new();
    for crd in [
        serde_json::to_value(Tenant::crd()).unwrap(),
        serde_json::to_value(Node::crd()).unwrap(),
        serde_json::to_value(NodeClass::crd()).unwrap(),
    ] {
        api.install_crd(crd).unwrap();
    }
    api
}

/// POSTs a manifest as kubectl create does; the status code and the answer.
async fn create(api: &ApiServer, manifest: &str) -> (u16, Value) {
    let object: Value = serde_saphyr::from_str(manifest).unwrap();
    let uri = match object["kind"].as_str() {
        Some("Tenant") => "/apis/placement.tenant-placer.dev/v1alpha1/namespaces/default/tenants",
        Some("NodeClass") => "/apis/placement.tenant-placer.dev/v1alpha1/nodeclasses",
        _ => "/apis/placement.tenant-placer.dev/v1alpha1/nodes",
    };
    let request = http::Request::builder()
        .method("POST")
        .uri(uri)
        .header("content-type", "application/json")
        .body(Bytes::from(serde_json::to_vec(&object).unwrap()))
        .unwrap();
    let response = api.handle(request).await;
    let code = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn every_malformed_manifest_is_refused_with_a_message_naming_its_field() {
    let mut failures = Vec::new();
    for row in ROWS {
        let api = api_with_crds();
        let (code, body) = create(&api, row.manifest).await;
        let message = body["message"].as_str().unwrap_or_default();
        let fields: Vec<&str> = body["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["field"].as_str())
            .collect();
        let kind = body["details"]["kind"].as_str().unwrap_or_default();
        let refused = code == 422
            && body["reason"] == "Invalid"
            && message.starts_with(&format!(
                r#"{kind}.placement.tenant-placer.dev "bad" is invalid: "#
            ))
            && message.contains(row.field)
            && message.contains(row.fragment)
            && fields.contains(&row.field);
        if !refused {
            failures.push(format!(
                "{}: expected 422 naming {} with {:?}; got {code}: {message} (causes on {fields:?})",
                row.what, row.field, row.fragment
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn the_well_formed_examples_are_accepted() {
    let api = api_with_crds();
    for file in ["nodes.yaml", "tenants.yaml"] {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("examples")
                .join(file),
        )
        .unwrap();
        for manifest in text.split("\n---\n") {
            let (code, body) = create(&api, manifest).await;
            assert_eq!(code, 201, "{file}: {body}");
        }
    }
}

#[tokio::test]
async fn the_value_at_each_limit_is_accepted() {
    let mut failures = Vec::new();
    for (what, kind, spec) in AT_THE_LIMIT {
        let metadata = match *kind {
            "Tenant" => "{name: good, namespace: default}",
            _ => "{name: good}",
        };
        let manifest = format!(
            "apiVersion: placement.tenant-placer.dev/v1alpha1\nkind: {kind}\nmetadata: {metadata}\nspec: {spec}\n"
        );
        let (code, body) = create(&api_with_crds(), &manifest).await;
        if code != 201 {
            failures.push(format!("{what}: {code} {}", body["message"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
