//! Traces over OTLP/HTTP (protobuf), the OpenTelemetry way: with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! set, the controller's spans are exported to `<endpoint>/v1/traces`; unset, no layer is
//! installed and nothing is recorded beyond the logs.
//!
//! ```text
//!   tracing spans ──▶ tracing-opentelemetry layer ──▶ batch processor (its own thread)
//!   (reconcile, engine_batch, purchase_look)              └─▶ OTLP/HTTP exporter (blocking reqwest)
//! ```
//!
//! Rules enforced here:
//! - only the spans named in [`SPANS`], of this crate, are exported, with their fields as
//!   attributes (docs/operating.md, "Traces"): never kube's or hyper's, never log events;
//! - the export runs on the batch processor's thread: a slow or absent collector never holds a
//!   reconcile back (spans beyond its queue are dropped);
//! - plain HTTP only (no TLS stack is linked): the collector is expected beside the controller,
//!   in the cluster.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{ExporterBuildError, Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;

/// The OpenTelemetry variable naming the collector (the `/v1/traces` path is added).
pub const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// The OpenTelemetry variable naming the service; `tenant-placer` when unset.
pub const SERVICE_NAME_VAR: &str = "OTEL_SERVICE_NAME";

/// The spans exported: one per reconcile (`kind`, `namespace`, `name`, `tenant`, `node`,
/// `outcome`), per engine batch (`batch_size`, `nodes_written`, `retried`, `outcome`) and per
/// purchase look (`waiting`, `requested`, `outcome`).
pub const SPANS: [&str; 3] = ["reconcile", "engine_batch", "purchase_look"];

/// Why no pipeline could be made.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    /// An `https://` endpoint: no TLS stack is linked, so every export would fail.
    #[error(
        "{ENDPOINT_VAR}={0}: traces are sent over plain HTTP only (no TLS is linked); name an \
         http:// collector, e.g. one in the cluster"
    )]
    Tls(String),
    /// The exporter refused its configuration (e.g. an endpoint that is not a URL).
    #[error("{ENDPOINT_VAR}: {0}")]
    Build(#[from] ExporterBuildError),
}

/// The exporting pipeline; dropping it flushes what is queued and stops it.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// The collector endpoint from [`ENDPOINT_VAR`], when set and not blank.
    pub fn endpoint_from_env() -> Option<String> {
        std::env::var(ENDPOINT_VAR)
            .ok()
            .filter(|endpoint| !endpoint.trim().is_empty())
    }

    /// A pipeline exporting to `endpoint` (e.g. `http://otel-collector:4318`) over OTLP/HTTP.
    pub fn to(endpoint: &str) -> Result<Traces, TracesError> {
        if endpoint.trim_start().starts_with("https://") {
            return Err(TracesError::Tls(endpoint.to_owned()));
        }
        let exporter = SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .build()?;
        let service = std::env::var(SERVICE_NAME_VAR)
            .ok()
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "tenant-placer".to_owned());
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(service).build())
            .build();
        Ok(Traces { provider })
    }

    /// The layer that turns [`SPANS`] into exported spans.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        let tracer = self.provider.tracer("tenant-placer");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(filter_fn(|meta| {
                meta.is_span()
                    && meta.target().starts_with("tenant_placer")
                    && SPANS.contains(&meta.name())
            }))
    }

    /// Sends what is queued now (tests; a stop does it by dropping).
    pub fn flush(&self) {
        if let Err(error) = self.provider.force_flush() {
            tracing::warn!(%error, "flushing traces failed");
        }
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::debug!(%error, "stopping the trace export");
        }
    }
}
