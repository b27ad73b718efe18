//! The in-memory apiserver, driven through kube-rs as a controller would, and
//! through raw requests where the exact answer matters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod builtins;
mod byte_counts;
mod cost;
mod crud;
mod deletes;
mod discovery;
mod events;
mod faults;
mod field_validation;
mod formats;
mod managed_fields;
mod nodes;
mod observation;
mod openapi;
mod patches;
mod rules;
mod scale;
mod serving;
mod tables;
mod validation;
mod watches;

use bytes::Bytes;
use inmem_apiserver::ApiServer;
use kube::api::{Api, PostParams};
use kube::{Client, CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub const GROUP: &str = "placement.tenant-placer.dev";

/// The test kind: a namespaced custom resource with a status subresource.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "placement.tenant-placer.dev",
    version = "v1",
    kind = "Tenant",
    namespaced
)]
#[kube(status = "TenantStatus", derive = "PartialEq")]
pub struct TenantSpec {
    #[schemars(range(min = 0))]
    pub replicas: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Tier {
    Gold,
    Silver,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

/// A server with the Tenant CRD installed, and a kube client on it.
pub fn setup() -> (ApiServer, Client) {
    let api = ApiServer::new();
    setup_on(api)
}

pub fn setup_on(api: ApiServer) -> (ApiServer, Client) {
    api.install_crd(serde_json::to_value(Tenant::crd()).unwrap())
        .unwrap();
    let client = Client::new(api.clone(), "default");
    (api, client)
}

pub fn tenants(client: &Client) -> Api<Tenant> {
    Api::namespaced(client.clone(), "default")
}

pub fn tenant(name: &str, replicas: i64) -> Tenant {
    Tenant::new(
        name,
        TenantSpec {
            replicas,
            tier: None,
        },
    )
}

pub async fn create(client: &Client, name: &str, replicas: i64) -> Tenant {
    tenants(client)
        .create(&PostParams::default(), &tenant(name, replicas))
        .await
        .unwrap()
}

/// The apiserver's Status of a failed kube call.
pub fn status_of<T: std::fmt::Debug>(result: kube::Result<T>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub const TENANTS: &str = "/apis/placement.tenant-placer.dev/v1/namespaces/default/tenants";

/// One raw request; the status code and the JSON (or, for a watch, the
/// newline-delimited JSON as an array) answer.
pub async fn call(
    api: &ApiServer,
    method: &str,
    uri: &str,
    content_type: &str,
    body: Value,
) -> (u16, Value) {
    let body = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(serde_json::to_vec(&body).unwrap())
    };
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(body)
        .unwrap();
    let resp = api.handle(req).await;
    let code = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|_| {
        Value::Array(
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
        )
    });
    (code, value)
}

/// What kubectl sends as `Accept` for `kubectl get`.
pub const KUBECTL_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// One raw request with headers; the status code, the response headers and
/// the JSON (or, for a watch, the events as an array) answer.
pub async fn request(
    api: &ApiServer,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (u16, http::HeaderMap, Value) {
    let mut req = http::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let body = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(serde_json::to_vec(&body).unwrap())
    };
    let resp = api.handle(req.body(body).unwrap()).await;
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|_| {
        Value::Array(
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
        )
    });
    (code, headers, value)
}

pub async fn get(api: &ApiServer, uri: &str) -> (u16, Value) {
    call(api, "GET", uri, "application/json", Value::Null).await
}

pub async fn post(api: &ApiServer, uri: &str, body: Value) -> (u16, Value) {
    call(api, "POST", uri, "application/json", body).await
}

pub fn raw_tenant(name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Tenant", "metadata": {"name": name}, "spec": spec})
}

/// A cluster-scoped kind `kind` of group `example.dev`, served at `v1`, whose spec has these
/// properties (a CRD as a test writes one by hand).
pub fn cluster_crd(plural: &str, kind: &str, spec_properties: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.dev")},
        "spec": {
            "group": "example.dev",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "scope": "Cluster",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": spec_properties}}
                }}
            }]
        }
    })
}

/// Runs kubectl against `addr` with a fresh kubeconfig and discovery cache; its stdout.
pub fn kubectl(addr: std::net::SocketAddr, args: &[&str]) -> String {
    let dir = std::env::temp_dir().join(format!(
        "inmem-kubectl-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("config");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: inmem\n  cluster:\n    server: http://{addr}\nusers:\n- name: test\n  user: {{}}\ncontexts:\n- name: inmem\n  context:\n    cluster: inmem\n    user: test\ncurrent-context: inmem\n"
        ),
    )
    .unwrap();
    let output = std::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--cache-dir={}", dir.join("cache").display()))
        .arg("--request-timeout=10s")
        .args(args)
        .output()
        .expect("kubectl must be on PATH for this test");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}
