//! What stands in for the world in `sandbox`, `simulate` and the tests: the actors a cluster
//! would run beside the controller, and the checks that judge what the controller left.
//!
//! ```text
//!   fleet        the in-memory API + the real controller, in process; starts one stand-in:
//!     ├ provisioner  the provisioner contract, played directly (NodeRequests become Nodes)
//!     └ capi         Cluster API, simulated (MachineDeployments, MachineSets, Machines)
//!   invariants   the protocol's invariants, checked over the API objects
//! ```
//!
//! Rules this module keeps:
//! - it is never imported by production code (the controller, the server, the API types,
//!   metrics, leader election, ...): only `sandbox`, the binary's `simulate` and `plan`, the
//!   tests and benches name it (`tests/layers.rs` refuses any other importer);
//! - the provisioner and Cluster API stand-ins talk to the controller through the API only, as
//!   the real actors do: they name the CRD types, never the controller, so what they exercise is
//!   its contract; only `fleet` starts the controller (whole, through its public entry).

pub mod capi;
mod fleet;
pub mod invariants;
pub mod provisioner;

pub use fleet::{Fleet, FleetError, Simulated};
