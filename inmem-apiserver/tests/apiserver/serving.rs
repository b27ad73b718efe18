//! The API served over real HTTP/1.1 with [`inmem_apiserver::server::serve`]: kube-rs
//! as a client, watch events flushed as they happen, and a fault that drops
//! the connection dropping it; a request to a foreign `Host` refused.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use inmem_apiserver::{ApiServer, Fault, Verb};
use kube::Client;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::*;

async fn served(api: &ApiServer) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (
        addr,
        tokio::spawn(inmem_apiserver::server::serve(api.clone(), listener)),
    )
}

fn http_client(addr: SocketAddr) -> Client {
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    Client::try_from(config).unwrap()
}

#[tokio::test]
async fn kube_rs_talks_to_the_served_api_over_http() {
    let (api, _) = setup();
    let (addr, server) = served(&api).await;
    let client = http_client(addr);
    create(&client, "acme", 2).await;
    let list = tenants(&client).list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].spec.replicas, 2);
    assert!(api.get(GROUP, "tenants", Some("default"), "acme").is_some());
    server.abort();
}

#[tokio::test]
async fn watch_events_arrive_as_they_happen() {
    let (api, _) = setup();
    let (addr, server) = served(&api).await;
    let client = http_client(addr);
    let watched: Api<Tenant> = tenants(&client);
    let rv = api.resource_version().to_string();
    let mut stream = watched
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .unwrap()
        .boxed();
    // Written after the watch started: it must come through while the
    // response is still open.
    create(&http_client(addr), "late", 1).await;
    let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the event was not flushed")
        .unwrap()
        .unwrap();
    match event {
        WatchEvent::Added(t) => assert_eq!(t.metadata.name.as_deref(), Some("late")),
        other => panic!("expected ADDED, got {other:?}"),
    }
    server.abort();
}

/// One raw HTTP/1.1 exchange: `request` as written (saying `Connection: close`), the whole answer.
async fn exchange(addr: SocketAddr, request: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    Ok(answer)
}

async fn raw_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    exchange(addr, &request).await
}

#[tokio::test]
async fn a_dropped_connection_fault_closes_the_connection_without_an_answer() {
    let (api, _) = setup();
    let (addr, server) = served(&api).await;
    api.inject(Fault::on(Verb::List).resource("tenants").disconnect());
    let answer = tokio::time::timeout(Duration::from_secs(5), raw_get(addr, TENANTS))
        .await
        .unwrap();
    // Closed (or reset) with nothing written back.
    assert!(answer.map_or(true, |a| a.is_empty()), "got an answer");
    // The next request is served.
    let answer = raw_get(addr, TENANTS).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(
        answer.contains("content-type: application/json"),
        "{answer}"
    );
    server.abort();
}

#[tokio::test]
async fn a_request_naming_a_foreign_host_is_refused_and_writes_nothing() {
    let (api, _) = setup();
    let (addr, server) = served(&api).await;
    let body = serde_json::to_string(&tenant("rebound", 1)).unwrap();
    let post = |host: String| {
        format!(
            "POST {TENANTS} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    // A DNS-rebinding page: its name resolved to 127.0.0.1, the browser names it in the Host.
    let refused = exchange(addr, &post(format!("attacker.example:{}", addr.port())))
        .await
        .unwrap();
    assert!(refused.starts_with("HTTP/1.1 403 Forbidden"), "{refused}");
    let status: serde_json::Value =
        serde_json::from_str(refused.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        format!(
            "Host \"attacker.example:{}\" is not this server: only localhost, loopback addresses \
             and 127.0.0.1 are answered (DNS rebinding guard)",
            addr.port()
        )
    );
    assert!(
        api.get(GROUP, "tenants", Some("default"), "rebound")
            .is_none()
    );
    // The same request naming the server's address (as kube-rs and kubectl do) is served.
    let created = exchange(addr, &post(addr.to_string())).await.unwrap();
    assert!(created.starts_with("HTTP/1.1 201"), "{created}");
    server.abort();
}
