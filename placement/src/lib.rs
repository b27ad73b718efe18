//! Pure placement rules for tenant-placer: no Kubernetes, no async, no I/O.
//!
//! ```text
//!   resources  Resources, Dimension           checked int64-bounded arithmetic
//!   fit        NodeView ─first_fit─▶ Choice  Place(node) | NoFit(shortfall per dimension)
//!   policy     Policy (FirstFit | BestFit | LeastLoaded | RoundRobin) ─place─▶ Choice
//!   overcommit Overcommit (ratio per dimension, in thousandths) ─effective─▶ capacity
//!   index      FirstFitIndex: first fit in O(log n) per decision and per update
//!   fleet      Fleet: what planning reads (a slice scans; IndexedFleet keeps first-fit indexes)
//!   hash       uid_hash, NameHasher: fast hashes of UIDs and node names for the lookup indexes
//!   selector   Labels: a node's labels include every pair of a tenant's nodeSelector
//!   ledger     NodeLedger + TenantWants ─plan_tenant(_with)─▶ Plan (one node edit at a time)
//!   queue      FifoQueue: a batch decided oldest first, room held for older waiting tenants
//!   rebalance  NodeLedgers ─consolidate─▶ Consolidation: the Moves that empty whole nodes (BestFit)
//!   provision  waiting tenants + NodeClassOffers ─purchase─▶ Purchase: the new nodes to request
//!   testing    test fixtures: one builder for ledgers and views (tests only, feature `testing`)
//! ```
//!
//! Cargo keeps this crate pure: it depends on nothing but std. The controller turns API objects
//! into these types, asks for a plan, and performs the one write a plan names.

pub mod fit;
pub mod fleet;
pub mod hash;
pub mod index;
pub mod ledger;
pub mod migration;
pub mod overcommit;
pub mod plan;
pub mod policy;
pub mod provision;
pub mod purchase_groups;
pub mod queue;
pub mod rebalance;
pub mod resources;
pub mod selector;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use fit::{Choice, NoFit, NodeState, NodeView, Shortfall, first_fit, no_fit};
pub use fleet::{Fleet, FleetMut, IndexedFleet, place_ledgers, place_ledgers_matching};
pub use hash::{NameHasher, uid_hash};
pub use index::{FirstFitIndex, UnknownNode};
pub use ledger::{
    Edit, EditKind, Entry, LedgerError, Migration, MoveBlock, NodeLedger, Plan, TenantWants,
};
pub use overcommit::{Overcommit, OvercommitError};
pub use plan::{
    holders_of, plan_release, plan_restore, plan_tenant, plan_tenant_held_by, plan_tenant_with,
};
pub use policy::{Policy, Slack, UnknownPolicy, best_fit_among, place, place_with, weighted_slack};
pub use provision::{
    Cost, InFlightAssignment, InFlightRequest, NewNode, NoClass, NodeClassOffer, Purchase,
    Unplaceable, WaitingTenant, purchase,
};
pub use purchase_groups::{SelectiveTenant, purchase_by_labels};
pub use queue::{FifoQueue, QueueMode, UnknownQueueMode};
pub use rebalance::{Consolidation, Move, consolidate};
pub use resources::{Dimension, Resources};
pub use selector::{Labels, Pairs};
