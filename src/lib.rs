//! tenant-placer: a Kubernetes operator that places tenants on bare-metal nodes by first fit.
//!
//! ```text
//!   api            Tenant, Node, NodeClass, NodeRequest (CRD types), the words every module uses,
//!                  checked conversions to and from placement
//!   controller     the loops: compute a decision (placement crate), then write it
//!     ├ state      caches, decoding, claims, the waiting room: no loop, no engine
//!     ├ engine     the single Node-status writer: decide, write (guarded), resolve
//!     ├ tenant     a Tenant's reconcile (mod.rs) and its status view (status.rs, pure)
//!     ├ node       a Node's reconcile: its derived status, wakes waiters when room appears
//!     ├ wake       the wake loop: the waiting room's passes wake who a changed node could take
//!     ├ capacity   the capacity tick: snapshot, decide (make room, buy, consolidate), write,
//!     │            publish a view for the page
//!     ├ consolidation, make_room   the tick's steps: nodes drained and handed back, tenants
//!     │            moved to make room for a waiter (decide.rs pure in each)
//!     ├ disruption the disruption controls (the consolidation policy, the budget, windows)
//!     ├ register   nodes registered from core Nodes (plan.rs pure, mod.rs the writes)
//!     ├ capi       the Cluster API provisioner (plan.rs pure, mod.rs the writes)
//!     └ runner, settings, publisher, patch   the tenant runner, the tunables, Events, and
//!                  guarded JSON patches; mod.rs wires the loops
//!   client         the API client: kube's, with a bound on the requests in flight
//!   error          the one error type
//!   leader         leader election on a Lease, guarded by resourceVersion
//!   metrics        the counters the controller reports into (prometheus-client)
//!   manifests      reading YAML manifests
//!   report         the fleet report and the rebalance report (simulate, plan)
//!   forecast       what consolidation and make-room would do now (plan)
//!   serve          the HTTP side: /healthz, /readyz, /metrics (gauges read from the watch caches)
//!     └ page       the read-only fleet page and /api/fleet (capacity.rs: the tick's view)
//!   sim            the stand-ins for the world (sandbox, simulate, plan, tests; never production)
//!     ├ fleet      in-process: the in-memory API + the real controller
//!     ├ provisioner  a simulated provisioner: NodeRequests become Nodes
//!     ├ capi       a simulated Cluster API: MachineDeployments, MachineSets, Machines
//!     └ invariants the protocol's invariants, checked over API objects
//!   sandbox        the in-memory API over HTTP for the real kubectl, with the controller running
//!   telemetry      traces over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set
//!   testing        test fixtures: one builder for Nodes and Tenants (feature `testing`)
//! ```

// Unsafe code is denied across the workspace; a library never needs it.
#![forbid(unsafe_code)]

pub mod api;
pub mod client;
pub mod controller;
pub mod error;
pub mod forecast;
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
