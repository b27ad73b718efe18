//! tenant-placer: a Kubernetes operator that places tenants on bare-metal nodes by first fit.
//!
//! ```text
//!   api         Tenant, Node, NodeClass, NodeRequest (CRD types): checked conversions only
//!   controller  reconcile Tenants and Nodes      compute a plan (placement crate), then write it
//!     └ engine  the single Node-status writer    every write guarded by resourceVersion
//!   error       the one error type
//!   leader      leader election on a Lease, guarded by resourceVersion
//!   metrics     the counters the controller reports into (prometheus-client)
//!   serve       the HTTP side: /healthz, /readyz, /metrics (gauges read from the watch caches)
//!     └ page    the read-only fleet page and /api/fleet
//!   sandbox     the in-memory API over HTTP for the real kubectl, with the controller running
//!   sim         the stand-ins for the world (simulate, sandbox, tests; never production):
//!     ├ fleet   in-process: in-memory API + the real controller
//!     ├ provisioner, capi   a simulated provisioner and a simulated Cluster API
//!     └ invariants  the protocol's invariants, checked over API objects
//!   telemetry   traces over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set
//!   testing     test fixtures: one builder for Nodes and Tenants (tests only, feature `testing`)
//! ```

// Unsafe code is denied across the workspace; a library never needs it.
#![forbid(unsafe_code)]

pub mod api;
pub mod client;
pub mod controller;
pub mod disruption_plan;
pub mod error;
pub mod leader;
pub mod manifests;
pub mod metrics;
pub mod report;
pub mod sandbox;
pub mod serve;
pub mod sim;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use error::Error;
