//! Metrics in the Prometheus text format, and the small HTTP server for `/healthz`, `/readyz`
//! and `/metrics`, which also serves the read-only fleet page (`/`, `/api/fleet`; see
//! [`crate::page`]) unless it is switched off.
//!
//! Rules enforced here:
//! - counters only go up; gauges of tenants and nodes are read from the watch caches at scrape
//!   time, so a scrape costs the API server nothing and never shows a stale count as current;
//! - `/readyz` answers 200 when this replica leads with synced caches, or (with leader election)
//!   follows as a standby, and says which in its body; 503 while starting. Leadership is also the
//!   `tenant_placer_leader` gauge;
//! - label values are escaped as the exposition format requires.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use kube::ResourceExt;
use kube::runtime::reflector::Store;

use crate::api::{Node, Tenant, TenantPhase};
use crate::controller::{Health, Role, Telemetry};
use crate::page;

/// Upper bounds of the reconcile duration histogram, in seconds.
const DURATION_BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

#[derive(Debug, Default)]
struct Histogram {
    buckets: [u64; DURATION_BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Debug, Default)]
struct Counters {
    /// (kind, result) -> reconciles; result is "ok" or the error label.
    reconciles: BTreeMap<(&'static str, &'static str), u64>,
    durations: BTreeMap<&'static str, Histogram>,
    conflicts: u64,
    retries_exhausted: u64,
    /// Entries released because their tenant was gone without the controller seeing it go.
    orphans_released: u64,
    /// kind -> objects (versions) the controller could not decode and skipped.
    undecodable: BTreeMap<&'static str, u64>,
}

/// The controller's metrics. Shared by the reconcilers, the writer and the HTTP server.
#[derive(Default)]
pub struct Metrics {
    counters: Mutex<Counters>,
    caches: Mutex<Option<(Store<Node>, Store<Tenant>)>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    fn counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one reconcile of `kind` with its result label and duration.
    pub fn reconciled(&self, kind: &'static str, result: &'static str, took: Duration) {
        let mut counters = self.counters();
        let n = counters.reconciles.entry((kind, result)).or_insert(0);
        *n = n.saturating_add(1);
        let histogram = counters.durations.entry(kind).or_default();
        let seconds = took.as_secs_f64();
        for (bucket, bound) in histogram.buckets.iter_mut().zip(DURATION_BUCKETS) {
            if seconds <= bound {
                *bucket = bucket.saturating_add(1);
            }
        }
        histogram.count = histogram.count.saturating_add(1);
        histogram.sum += seconds;
    }

    /// A Node status write answered 409 Conflict (it is retried from fresh data).
    pub fn conflict(&self) {
        let mut counters = self.counters();
        counters.conflicts = counters.conflicts.saturating_add(1);
    }

    /// A placement gave up after its conflict budget (the reconcile is requeued).
    pub fn retries_exhausted(&self) {
        let mut counters = self.counters();
        counters.retries_exhausted = counters.retries_exhausted.saturating_add(1);
    }

    /// An entry was released as an orphan: its tenant went without the controller seeing it.
    pub fn orphan_released(&self) {
        let mut counters = self.counters();
        counters.orphans_released = counters.orphans_released.saturating_add(1);
    }

    /// How many orphaned entries were released.
    pub fn orphans_released(&self) -> u64 {
        self.counters().orphans_released
    }

    /// An object of `kind` could not be decoded and was skipped (each version once).
    pub fn undecodable(&self, kind: &'static str) {
        let mut counters = self.counters();
        let n = counters.undecodable.entry(kind).or_insert(0);
        *n = n.saturating_add(1);
    }

    /// The caches the gauges are read from (replaced at each leadership term).
    pub fn watch_caches(&self, nodes: Store<Node>, tenants: Store<Tenant>) {
        *self.caches.lock().unwrap_or_else(PoisonError::into_inner) = Some((nodes, tenants));
    }

    /// The watch caches the gauges (and the fleet page) read, once the controller has set them.
    pub fn caches(&self) -> Option<(Store<Node>, Store<Tenant>)> {
        self.caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        {
            let counters = self.counters();
            family(
                &mut out,
                "tenant_placer_reconciles_total",
                "counter",
                "Reconciles by kind and result (ok, or the error label).",
            );
            for ((kind, result), n) in &counters.reconciles {
                sample(
                    &mut out,
                    "tenant_placer_reconciles_total",
                    &[("kind", kind), ("result", result)],
                    *n as f64,
                );
            }
            family(
                &mut out,
                "tenant_placer_reconcile_duration_seconds",
                "histogram",
                "Time spent in one reconcile.",
            );
            for (kind, histogram) in &counters.durations {
                for (bound, n) in DURATION_BUCKETS.iter().zip(histogram.buckets) {
                    let le = bound.to_string();
                    sample(
                        &mut out,
                        "tenant_placer_reconcile_duration_seconds_bucket",
                        &[("kind", kind), ("le", &le)],
                        n as f64,
                    );
                }
                let count = histogram.count as f64;
                sample(
                    &mut out,
                    "tenant_placer_reconcile_duration_seconds_bucket",
                    &[("kind", kind), ("le", "+Inf")],
                    count,
                );
                sample(
                    &mut out,
                    "tenant_placer_reconcile_duration_seconds_sum",
                    &[("kind", kind)],
                    histogram.sum,
                );
                sample(
                    &mut out,
                    "tenant_placer_reconcile_duration_seconds_count",
                    &[("kind", kind)],
                    count,
                );
            }
            family(
                &mut out,
                "tenant_placer_placement_conflicts_total",
                "counter",
                "Node status writes refused with 409 Conflict and retried from fresh data.",
            );
            sample(
                &mut out,
                "tenant_placer_placement_conflicts_total",
                &[],
                counters.conflicts as f64,
            );
            family(
                &mut out,
                "tenant_placer_placement_retries_exhausted_total",
                "counter",
                "Placements that used up their conflict retries and were requeued.",
            );
            sample(
                &mut out,
                "tenant_placer_placement_retries_exhausted_total",
                &[],
                counters.retries_exhausted as f64,
            );
            family(
                &mut out,
                "tenant_placer_orphaned_entries_released_total",
                "counter",
                "Entries released because their tenant was gone without the controller seeing it go.",
            );
            sample(
                &mut out,
                "tenant_placer_orphaned_entries_released_total",
                &[],
                counters.orphans_released as f64,
            );
            family(
                &mut out,
                "tenant_placer_undecodable_objects_total",
                "counter",
                "Object versions the controller could not decode and skipped (see the error log).",
            );
            for kind in ["tenant", "node"] {
                let count = counters.undecodable.get(kind).copied().unwrap_or(0);
                sample(
                    &mut out,
                    "tenant_placer_undecodable_objects_total",
                    &[("kind", kind)],
                    count as f64,
                );
            }
        }
        let caches = self
            .caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some((nodes, tenants)) = caches {
            render_tenants(&mut out, &tenants.state());
            render_nodes(&mut out, &nodes.state());
        }
        out
    }
}

fn render_tenants(out: &mut String, tenants: &[Arc<Tenant>]) {
    let phase_of = |t: &Tenant| t.status.as_ref().map(|s| s.phase).unwrap_or_default();
    family(out, "tenant_placer_tenants", "gauge", "Tenants by phase.");
    for phase in TenantPhase::ALL {
        let n = tenants.iter().filter(|t| phase_of(t) == phase).count();
        sample(
            out,
            "tenant_placer_tenants",
            &[("phase", &phase.to_string())],
            n as f64,
        );
    }
    family(
        out,
        "tenant_placer_pending_tenants",
        "gauge",
        "Tenants waiting for room (PendingCapacity or Resizing).",
    );
    let waiting = tenants
        .iter()
        .filter(|t| {
            matches!(
                phase_of(t),
                TenantPhase::PendingCapacity | TenantPhase::Resizing
            )
        })
        .count();
    sample(out, "tenant_placer_pending_tenants", &[], waiting as f64);
}

fn render_nodes(out: &mut String, nodes: &[Arc<Node>]) {
    let mut capacity = String::new();
    let mut allocated = String::new();
    for node in nodes {
        let name = node.name_any();
        let cap = node.spec.capacity.to_resources().unwrap_or_default();
        let held = node.ledger().map(|l| l.allocated()).unwrap_or_default();
        for dimension in placement::Dimension::ALL {
            let labels = [
                ("node", name.as_str()),
                ("dimension", dimension.field_name()),
            ];
            sample(
                &mut capacity,
                "tenant_placer_node_capacity",
                &labels,
                cap.get(dimension) as f64,
            );
            sample(
                &mut allocated,
                "tenant_placer_node_allocated",
                &labels,
                held.get(dimension) as f64,
            );
        }
    }
    // Each family's samples follow its own HELP and TYPE lines.
    family(
        out,
        "tenant_placer_node_capacity",
        "gauge",
        "Node capacity per dimension.",
    );
    out.push_str(&capacity);
    family(
        out,
        "tenant_placer_node_allocated",
        "gauge",
        "Reserved per node and dimension, summed from its allocations.",
    );
    out.push_str(&allocated);
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        let rendered: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let _ = write!(out, "{{{}}}", rendered.join(","));
    }
    let _ = writeln!(out, " {value}");
}

/// Escapes a label value: backslash, double quote and newline.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Serves `/healthz`, `/readyz`, `/metrics` and (unless `telemetry.page` is off) the fleet page
/// on `addr` until the task is dropped.
pub async fn serve(addr: SocketAddr, telemetry: Telemetry) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    serve_on(listener, telemetry).await
}

/// [`serve`] on a bound listener. Dropping the task ends every connection it serves.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    telemetry: Telemetry,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    if telemetry.page {
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
        let telemetry = telemetry.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let response = respond_to(request.method(), request.uri().path(), &telemetry);
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

/// The answer for one request: the fleet page's paths when it is on, then [`respond`]'s.
pub fn respond_to(
    method: &http::Method,
    path: &str,
    telemetry: &Telemetry,
) -> Response<page::Body> {
    if telemetry.page
        && let Some(response) = page::respond(method, path, telemetry)
    {
        return response;
    }
    respond(path, &telemetry.metrics, &telemetry.health).map(BodyExt::boxed_unsync)
}

/// [`respond_to`] for a GET of `path`.
pub fn respond_with(path: &str, telemetry: &Telemetry) -> Response<page::Body> {
    respond_to(&http::Method::GET, path, telemetry)
}

/// The answer for one path.
pub fn respond(path: &str, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/readyz" => match health.role() {
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
        "/metrics" => {
            let mut text = metrics.render();
            family(
                &mut text,
                "tenant_placer_leader",
                "gauge",
                "1 while this replica leads (and reconciles), else 0.",
            );
            let leading = f64::from(u8::from(health.role() == Role::Leading));
            sample(&mut text, "tenant_placer_leader", &[], leading);
            (
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                text,
            )
        }
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
    };
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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn counters_and_the_histogram_render_in_the_text_format() {
        let metrics = Metrics::default();
        metrics.reconciled("tenant", "ok", Duration::from_millis(3));
        metrics.reconciled("tenant", "ok", Duration::from_millis(30));
        metrics.conflict();
        let text = metrics.render();
        assert!(
            text.contains("tenant_placer_reconciles_total{kind=\"tenant\",result=\"ok\"} 2\n"),
            "{text}"
        );
        // 3 ms falls in the 0.005 bucket and above; 30 ms from 0.05 on.
        assert!(
            text.contains(
                "tenant_placer_reconcile_duration_seconds_bucket{kind=\"tenant\",le=\"0.005\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "tenant_placer_reconcile_duration_seconds_bucket{kind=\"tenant\",le=\"0.05\"} 2\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("tenant_placer_reconcile_duration_seconds_count{kind=\"tenant\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("tenant_placer_placement_conflicts_total 1\n"),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        sample(&mut out, "m", &[("node", "a\"b\\c")], 1.0);
        assert_eq!(out, "m{node=\"a\\\"b\\\\c\"} 1\n");
    }

    #[test]
    fn readyz_is_503_until_ready_and_unknown_paths_are_404() {
        let (metrics, health) = (Metrics::default(), Health::default());
        assert_eq!(
            respond("/healthz", &metrics, &health).status(),
            StatusCode::OK
        );
        assert_eq!(
            respond("/readyz", &metrics, &health).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            respond("/nope", &metrics, &health).status(),
            StatusCode::NOT_FOUND
        );
    }
}
