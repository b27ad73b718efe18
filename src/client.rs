//! The controller's client for the API server: kube's, with at most so many requests in flight.
//!
//! kube speaks HTTP/1.1, one request per connection at a time, and keeps every connection it
//! opened: with a reconcile per tenant, the Node writes and the watches all writing at once, the
//! controller held a connection (and its buffers, and with TLS its session) for each of ~100
//! requests. At 1,000 nodes that was about 2 MB of the controller's peak of 41; against a real
//! API server the writes take milliseconds each, so more than a few in flight buy nothing the
//! server could serve sooner.
//!
//! Rules enforced here:
//! - at most `requests_in_flight` requests wait on the server at once; the others queue in the
//!   client, in order, and are sent as answers come back. A request counts until its response's
//!   head arrives: a watch, or a list's body still being read, holds no place;
//! - everything else is kube's default stack (kubeconfig or in-cluster auth, TLS, timeouts).

use kube::client::ClientBuilder;
use tower::limit::ConcurrencyLimitLayer;

/// The client for `config`, sending at most `requests_in_flight` (at least 1) requests at once.
pub fn client(config: kube::Config, requests_in_flight: usize) -> kube::Result<kube::Client> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&ConcurrencyLimitLayer::new(requests_in_flight.max(1)))
        .build())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::arithmetic_side_effects)]
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use hyper::body::Bytes;

    use super::*;

    type Frames = futures::stream::BoxStream<
        'static,
        Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
    >;

    /// A client sending at most `requests_in_flight` to a server on loopback where `/watch`
    /// answers its head at once and a body that never ends (a watch with nothing to say), and
    /// anything else `{}` after 20 ms; and the most requests (watches aside) it held at once.
    async fn slow_server(requests_in_flight: usize) -> (kube::Client, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let seen = most.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (now, most) = (now.clone(), most.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let (now, most) = (now.clone(), most.clone());
                        async move {
                            use futures::StreamExt;
                            let first = futures::stream::once(async {
                                Ok(hyper::body::Frame::data(Bytes::from_static(b"{}")))
                            });
                            let body: Frames = if request.uri().path() == "/watch" {
                                first.chain(futures::stream::pending()).boxed()
                            } else {
                                let held = now.fetch_add(1, Ordering::SeqCst) + 1;
                                most.fetch_max(held, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                now.fetch_sub(1, Ordering::SeqCst);
                                first.boxed()
                            };
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::StreamBody::new(body),
                            ))
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        (client(config, requests_in_flight).unwrap(), seen)
    }

    /// The most requests the server held at once when 40 were sent together.
    async fn most_in_flight(requests_in_flight: usize) -> usize {
        let (client, most) = slow_server(requests_in_flight).await;
        let answers = futures::future::join_all((0..40).map(|_| {
            let client = client.clone();
            async move {
                let request = http::Request::get("/version").body(Vec::new()).unwrap();
                client.request_text(request).await
            }
        }))
        .await;
        assert!(answers.iter().all(Result::is_ok), "{answers:?}");
        most.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn a_watch_holds_no_place_once_its_head_is_in() {
        let (client, _) = slow_server(1).await;
        let watch = http::Request::get("/watch").body(kube::client::Body::empty());
        let watch = client.send(watch.unwrap()).await.unwrap();
        // The watch's body is still open: were it holding the one place, this would wait.
        let request = http::Request::get("/version").body(Vec::new()).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), client.request_text(request));
        assert_eq!(answer.await.unwrap().unwrap(), "{}");
        drop(watch);
    }

    #[tokio::test]
    async fn no_more_requests_than_allowed_wait_on_the_server_and_the_rest_are_sent_after() {
        assert_eq!(most_in_flight(4).await, 4);
        assert_eq!(most_in_flight(1).await, 1);
        // Zero would send nothing: it is taken as one.
        assert_eq!(most_in_flight(0).await, 1);
        // Unbounded enough, the 40 do wait at once: the bound above is the client's.
        assert!(most_in_flight(64).await > 4);
    }
}
