//! Serving the API over plain HTTP/1.1 (hyper), so that real clients such as
//! `kubectl` can talk to it.
//!
//! Each connection is served on its own task; watch bodies are written as
//! their events arrive (hyper flushes whenever the body has nothing more for
//! now). A response carrying [`DroppedConnection`] closes the connection
//! without an answer, as a broken connection would.
//!
//! Only `Host`s naming this server are answered ([`host_check::check_host`]: localhost,
//! loopback, the bound address); any other is a `403` Status saying why, and nothing is done (a
//! DNS-rebinding page could otherwise write objects).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use host_check::check_host;

use crate::{ApiServer, DroppedConnection, ResponseBody, ServiceError, Status};

/// Serves `api` on `listener` until the returned future is dropped (which
/// stops accepting; connections already open are served to their end).
/// Failures to accept (e.g. too many open files) are retried after a pause.
pub async fn serve(api: ApiServer, listener: TcpListener) {
    // Should the listener not know its address, only localhost and loopback are answered.
    let bound = listener
        .local_addr()
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _peer)) => stream,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let api = api.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| serve_one(api.clone(), bound, req));
            // A connection that breaks, or that a fault drops, just ends.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn serve_one(
    api: ApiServer,
    bound: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, ServiceError> {
    if let Err(foreign) = check_host(req.headers().get(HOST), bound) {
        return Ok(plain_status(&Status::forbidden(foreign.to_string())));
    }
    let (parts, body) = req.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return Ok(plain_status(&Status::bad_request(format!(
                "failed to read the request body: {e}"
            ))));
        }
    };
    let response = api.handle(Request::from_parts(parts, bytes)).await;
    if response.extensions().get::<DroppedConnection>().is_some() {
        return Err(ServiceError::ConnectionDropped);
    }
    Ok(response)
}

fn plain_status(status: &Status) -> Response<ResponseBody> {
    let body = serde_json::to_vec(&status.to_json()).unwrap_or_default();
    let mut response = Response::new(ResponseBody::full(Bytes::from(body)));
    *response.status_mut() = status.http_code();
    if response.status() == StatusCode::OK {
        *response.status_mut() = StatusCode::BAD_REQUEST;
    }
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
