//! The HTTP side of a running controller: `/healthz`, `/readyz`, `/metrics` and, unless it is
//! switched off, the read-only fleet page ([`page`]: `/`, `/api/fleet`, `/api/fleet/events`), on
//! one address.
//!
//! ```text
//!   controller::run_with ──writes──▶ Handles { Health, Metrics, Caches } ◀──reads── State
//!     GET /healthz, /readyz                 ◀── Health
//!     GET /metrics                          ◀── Registry: the Metrics' counters, and Gauges
//!                                               read from the Caches and Health at scrape time
//!     GET /, /api/fleet, /api/fleet/events  ◀── Page (Health, Caches, the policy's name)
//! ```
//!
//! Rules enforced here:
//! - this is the one seam between the controller and the web: the controller is handed
//!   [`Handles`] and never names this module or its page (docs/design.md, "The parts";
//!   `tests/layers.rs` fails on a back edge);
//! - counters only go up; gauges of tenants and nodes are read from the watch caches at scrape
//!   time (see `gauges`), so a scrape costs the API server nothing;
//! - `/readyz` answers 200 when this replica leads with synced caches, or (with leader election)
//!   follows as a standby, and says which in its body; 503 while starting. Leadership is also the
//!   `tenant_placer_leader` gauge;
//! - `/metrics` is the Prometheus text format, version 0.0.4 (what every Prometheus scrapes), with
//!   label values escaped as the format requires;
//! - with the page off, its paths answer 404 like any unknown path;
//! - only `Host`s naming this server are answered (`host_check::check_host`: localhost,
//!   loopback, the bound address; bound to every address, as in a Pod, also any IP, which
//!   Prometheus and the kubelet use, and cluster Service names); another name is 403, saying why
//!   (a DNS-rebinding page could otherwise read the fleet page and the metrics).

mod gauges;
pub mod page;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use host_check::{ForeignHost, check_host};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;

use crate::controller::{Handles, Health, Role};
use crate::metrics::Metrics;
pub use page::{Body, Page};

/// What the server shows besides what the controller reports.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Serve the read-only fleet page (`/`, `/api/fleet`, `/api/fleet/events`) beside the
    /// metrics; `run --no-page` turns it off (those paths then answer 404). Default on.
    pub page: bool,
    /// The placement policy in force: the fleet page states its rule. Default `FirstFit`.
    pub policy: placement::Policy,
    /// What moves a placed tenant besides a drain: the fleet page's rule says so.
    pub moves: page::view::Moves,
    /// The Node label naming zones, as the controller reads it: the page shows each node's zone.
    pub zone_label: Arc<str>,
}

impl Settings {
    /// The page on, stating the policy and the moves of a controller run with `controller`.
    pub fn of(controller: &crate::controller::Settings) -> Settings {
        Settings {
            page: true,
            policy: controller.policy,
            moves: page::view::Moves {
                make_room: controller.make_room_moves_in_force(),
                consolidation: controller.consolidates_underused(),
            },
            zone_label: controller
                .zone_label
                .clone()
                .unwrap_or_else(|| crate::api::ZONE_LABEL.into()),
        }
    }
}

impl Default for Settings {
    /// As for a controller with the default settings.
    fn default() -> Self {
        Settings::of(&crate::controller::Settings::default())
    }
}

/// What every request reads: the controller's [`Handles`], the metrics registry built over
/// them, and the page when it is on. Cheap to clone; clones share everything.
#[derive(Clone, Debug)]
pub struct State {
    handles: Handles,
    registry: Arc<Registry>,
    page: Option<Page>,
}

impl Default for State {
    /// A server over fresh handles, with the page on: hand [`State::handles`] to the controller.
    fn default() -> Self {
        State::new(Handles::default(), Settings::default())
    }
}

impl State {
    /// The server's state over what a controller reports into.
    pub fn new(handles: Handles, settings: Settings) -> State {
        let mut registry = Registry::default();
        handles.metrics.register(&mut registry);
        registry.register_collector(Box::new(gauges::Gauges {
            health: handles.health.clone(),
            caches: handles.caches.clone(),
        }));
        let page = settings.page.then(|| {
            Page::new(
                handles.health.clone(),
                handles.caches.clone(),
                settings.policy,
                settings.moves,
                settings.zone_label,
            )
        });
        State {
            handles,
            registry: Arc::new(registry),
            page,
        }
    }

    /// What the controller is to report into for this server to show it.
    pub fn handles(&self) -> Handles {
        self.handles.clone()
    }

    pub fn health(&self) -> &Health {
        &self.handles.health
    }

    pub fn metrics(&self) -> &Metrics {
        &self.handles.metrics
    }

    /// The fleet page, None when it is off.
    pub fn page(&self) -> Option<&Page> {
        self.page.as_ref()
    }

    /// Every metric in the Prometheus text format (version 0.0.4), the gauges read now.
    pub fn encode_metrics(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// Serves `/healthz`, `/readyz`, `/metrics` and (unless it is off) the fleet page on `addr` until
/// the task is dropped.
pub async fn serve(addr: SocketAddr, state: State) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    serve_on(listener, state).await
}

/// [`serve`] on a bound listener. Dropping the task ends every connection it serves.
pub async fn serve_on(listener: tokio::net::TcpListener, state: State) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    if state.page.is_some() {
        tracing::info!(%addr, "serving /healthz, /readyz, /metrics and the fleet page at /");
    } else {
        tracing::info!(%addr, "serving /healthz, /readyz and /metrics (fleet page off)");
    }
    // NB: the fleet page's event streams last as long as their browser tab: the connections are
    // held here so that dropping the server ends them too.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            Some(_) = connections.join_next() => continue,
        };
        let state = state.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let response = match check_host(request.headers().get(http::header::HOST), addr) {
                    Ok(()) => respond_to(request.method(), request.uri().path(), &state),
                    Err(foreign) => refuse(&foreign),
                };
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(%error, "metrics connection ended");
            }
        });
    }
}

/// The answer for one request: the fleet page's paths when it is on, then the probes' and
/// `/metrics`.
pub fn respond_to(method: &http::Method, path: &str, state: &State) -> Response<Body> {
    if let Some(response) = state
        .page
        .as_ref()
        .and_then(|page| page.respond(method, path))
    {
        return response;
    }
    respond(path, state).map(BodyExt::boxed_unsync)
}

/// [`respond_to`] for a GET of `path`.
pub fn respond_with(path: &str, state: &State) -> Response<Body> {
    respond_to(&http::Method::GET, path, state)
}

/// 403 for a request to a `Host` that is not this server.
fn refuse(foreign: &ForeignHost) -> Response<Body> {
    plain(StatusCode::FORBIDDEN, "text/plain", format!("{foreign}\n")).map(BodyExt::boxed_unsync)
}

/// The answer for `/healthz`, `/readyz`, `/metrics`, or 404.
fn respond(path: &str, state: &State) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/readyz" => match state.health().role() {
            Role::Leading => (
                StatusCode::OK,
                "text/plain",
                "ready: leading, caches synced\n".to_owned(),
            ),
            Role::Standby => (
                StatusCode::OK,
                "text/plain",
                "ready: standby, another replica leads\n".to_owned(),
            ),
            Role::Starting => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "not ready: caches syncing or leader election starting\n".to_owned(),
            ),
        },
        "/metrics" => match state.encode_metrics() {
            Ok(text) => (StatusCode::OK, prometheus_text::CONTENT_TYPE, text),
            Err(error) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                format!("could not encode the metrics: {error}\n"),
            ),
        },
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
    };
    plain(status, content_type, body)
}

fn plain(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = http::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests;
