//! Traces reach an OTLP/HTTP collector: a loopback receiver takes `POST /v1/traces` (protobuf),
//! decodes each export, and the test checks that reconciles, engine batches and purchase looks
//! arrive as spans with their names and attributes after the real controller placed a tenant
//! against the in-memory API (docs/operating.md, "Traces").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use serde_json::json;
use tenant_placer::controller::Settings;
use tenant_placer::sim::Fleet;
use tenant_placer::telemetry::{SPANS, Traces};
use tokio::sync::mpsc;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// A span as received: its name, its attributes as text, and the service that sent it.
#[derive(Debug, Clone)]
struct Received {
    name: String,
    attributes: HashMap<String, String>,
    service: String,
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// A loopback OTLP/HTTP receiver: every span of every export goes to the channel; a request to
/// another path, or not protobuf, fails the test.
async fn receiver() -> (SocketAddr, mpsc::UnboundedReceiver<Received>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let tx = tx.clone();
                    async move {
                        assert_eq!(request.method(), hyper::Method::POST);
                        assert_eq!(request.uri().path(), "/v1/traces");
                        assert_eq!(request.headers()["content-type"], "application/x-protobuf");
                        let body = request.into_body().collect().await?.to_bytes();
                        let export = ExportTraceServiceRequest::decode(body).unwrap();
                        for resource_spans in export.resource_spans {
                            let service = resource_spans
                                .resource
                                .iter()
                                .flat_map(|r| &r.attributes)
                                .find(|a| a.key == "service.name")
                                .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
                                .unwrap_or_default();
                            for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans)
                            {
                                let attributes = span
                                    .attributes
                                    .iter()
                                    .map(|a| {
                                        let value = a.value.as_ref().and_then(|v| v.value.as_ref());
                                        (a.key.clone(), text(value))
                                    })
                                    .collect();
                                let _ = tx.send(Received {
                                    name: span.name,
                                    attributes,
                                    service: service.clone(),
                                });
                            }
                        }
                        let mut answer = Response::new(Full::new(Bytes::new()));
                        answer.headers_mut().insert(
                            "content-type",
                            hyper::header::HeaderValue::from_static("application/x-protobuf"),
                        );
                        Ok::<_, hyper::Error>(answer)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, rx)
}

fn node(name: &str, threads: u32) -> serde_json::Value {
    json!({"apiVersion": "placement.tenant-placer.dev/v1alpha1", "kind": "Node",
           "metadata": {"name": name},
           "spec": {"capacity": {"threads": threads, "memoryGb": 64, "storageGb": 1000},
                    "state": "Online"}})
}

fn tenant(name: &str, threads: u32) -> serde_json::Value {
    json!({"apiVersion": "placement.tenant-placer.dev/v1alpha1", "kind": "Tenant",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"resources": {"threads": threads, "memoryGb": 4, "storageGb": 20}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_engine_batches_and_purchase_looks_reach_a_loopback_otlp_receiver_as_spans() {
    let (addr, mut received) = receiver().await;
    let traces = Arc::new(Traces::to(&format!("http://{addr}")).unwrap());
    tracing_subscriber::registry().with(traces.layer()).init();

    let fleet = Fleet::new().unwrap();
    fleet
        .apply(&[node("node-a", 8), tenant("acme", 2), tenant("big", 64)])
        .await
        .unwrap();
    fleet.start(Settings::default());
    fleet
        .settle(Duration::from_millis(300), Duration::from_secs(20))
        .await
        .unwrap();

    // The batch processor sends on its own schedule: flush until every kind has come.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut spans: Vec<Received> = Vec::new();
    let has = |spans: &[Received], name: &str, check: &dyn Fn(&Received) -> bool| {
        spans.iter().any(|s| s.name == name && check(s))
    };
    let acme_placed = |s: &Received| {
        s.attributes.get("tenant").map(String::as_str) == Some("default/acme")
            && s.attributes.get("node").map(String::as_str) == Some("node-a")
            && s.attributes.get("kind").map(String::as_str) == Some("tenant")
            && s.attributes.get("outcome").map(String::as_str) == Some("ok")
    };
    let a_batch = |s: &Received| {
        s.attributes
            .get("batch_size")
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n >= 1)
            && s.attributes.contains_key("nodes_written")
            && s.attributes.get("outcome").map(String::as_str) == Some("ok")
    };
    let a_look =
        |s: &Received| s.attributes.contains_key("waiting") && s.attributes.contains_key("outcome");
    loop {
        let flusher = traces.clone();
        tokio::task::spawn_blocking(move || flusher.flush())
            .await
            .unwrap();
        while let Ok(span) = received.try_recv() {
            spans.push(span);
        }
        let done = has(&spans, "reconcile", &acme_placed)
            && has(&spans, "engine_batch", &a_batch)
            && has(&spans, "purchase_look", &a_look);
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every kind of span arrived with its attributes: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    fleet.stop();

    assert!(
        spans.iter().all(|s| SPANS.contains(&s.name.as_str())),
        "{spans:#?}"
    );
    assert!(
        spans.iter().all(|s| s.service == "tenant-placer"),
        "{spans:#?}"
    );
    // big fits nowhere: its reconcile says so, with no node.
    assert!(
        spans.iter().any(|s| s.name == "reconcile"
            && s.attributes.get("tenant").map(String::as_str) == Some("default/big")
            && !s.attributes.contains_key("node")),
        "{spans:#?}"
    );
}

#[test]
fn an_https_endpoint_is_refused_at_start_as_no_tls_is_linked() {
    let error = Traces::to("https://collector:4318").unwrap_err();
    assert!(error.to_string().contains("plain HTTP only"), "{error}");
}
