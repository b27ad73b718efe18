//! Pure placement rules for tenant-placer: no Kubernetes, no async, no I/O.
//!
//! ```text
//!   resources  Resources, Dimension           checked int64-bounded arithmetic
//!   fit        NodeView ─first_fit─▶ Decision  Place(node) | NoFit(shortfall per dimension)
//!   ledger     NodeLedger + TenantWants ─plan_tenant─▶ Plan (at most one node edit at a time)
//! ```
//!
//! Cargo keeps this crate pure: it depends on nothing but std. The controller turns API objects
//! into these types, asks for a plan, and performs the one write a plan names.

pub mod fit;
pub mod ledger;
pub mod resources;

pub use fit::{Decision, NoFit, NodeState, NodeView, Shortfall, first_fit};
pub use ledger::{
    Edit, EditKind, Entry, LedgerError, NodeLedger, Plan, TenantWants, plan_release, plan_tenant,
};
pub use resources::{Dimension, Resources};
