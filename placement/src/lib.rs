//! Pure placement rules for tenant-placer: no Kubernetes, no async, no I/O.
//!
//! The modules, bottom first. Outside its unit tests, each names (in code and in doc links) only
//! modules listed before it, so the files form no import circle: a type a lower module needs
//! lives in that lower module (`TenantWants` and `Plan` in ledger, where migration reads them),
//! and a function that combines two modules lives in the higher one (`place_ledgers` in fleet,
//! over policy and ledger). Inside the crate an item is named by its module's path
//! (`crate::ledger::NodeLedger`), not by the re-exports below, so every edge shows.
//!
//! ```text
//!   resources        Resources, Dimension: checked int64-bounded arithmetic
//!   hash             uid_hash, NameHasher: fast hashes of UIDs and node names for lookup indexes
//!   selector         Labels: a node's labels include every pair of a tenant's nodeSelector
//!   fit              NodeView ─first_fit─▶ Choice: Place(node) | NoFit(shortfall per dimension)
//!   index            FirstFitIndex: first fit in O(log n) per decision and per update
//!   overcommit       Overcommit (ratio per dimension, in thousandths) ─effective─▶ capacity
//!   spread           ZonedNodes + Spread (Nodes | Zones) ─place_spread─▶ a node per replica,
//!                    all or none (one per node; zones balanced, skew at most one)
//!   policy           Policy (FirstFit | BestFit | LeastLoaded | RoundRobin) ─place─▶ Choice
//!   best_fit         BestFitIndex: BestFit among changing nodes without a scan, per shape
//!   ledger           NodeLedger ─apply(Edit)─▶ NodeLedger; TenantWants, Plan: a plan's words
//!   fleet            Fleet: what planning reads (a slice scans, place_ledgers; IndexedFleet
//!                    keeps first-fit indexes)
//!   migration        plan_move, plan_in_flight: a move off a draining node, make-before-break
//!   spread_plan      SpreadWants + ZonedNodes ─plan_spread─▶ SpreadPlan: one edit at a time
//!                    toward every replica placed, or back to none (or to what it held)
//!   plan             TenantWants + Fleet ─plan_tenant(_with)─▶ Plan (one node edit at a time)
//!   queue            FifoQueue: a batch decided oldest first, room held for older waiting tenants
//!   rebalance        NodeLedgers ─consolidate─▶ Consolidation: the Moves that empty whole nodes
//!   make_room        NodeLedgers + a waiter ─make_room─▶ Room: the fewest Moves that let it fit
//!   purchase         waiting tenants + NodeClassOffers ─purchase─▶ Purchase: new nodes to request
//!   purchase_groups  tenants with node selectors ─purchase_by_labels─▶ one purchase per group
//!   testing          test fixtures: one builder for ledgers and views (tests only, `testing`)
//! ```
//!
//! Cargo keeps this crate pure: it depends on nothing but std. The controller turns API objects
//! into these types, asks for a plan, and performs the one write a plan names.

// Unsafe code is denied across the workspace; a library never needs it.
#![forbid(unsafe_code)]

pub mod best_fit;
pub mod fit;
pub mod fleet;
pub mod hash;
pub mod index;
pub mod ledger;
pub mod make_room;
pub mod migration;
pub mod overcommit;
pub mod plan;
pub mod policy;
pub mod purchase;
mod purchase_fill;
pub mod purchase_groups;
pub mod queue;
pub mod rebalance;
pub mod resources;
pub mod selector;
pub mod spread;
pub mod spread_plan;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use fit::{Choice, NoFit, NodeState, NodeView, Shortfall, first_fit, no_fit};
pub use fleet::{Fleet, FleetMut, IndexedFleet, place_ledgers, place_ledgers_matching};
pub use hash::{NameHasher, uid_hash};
pub use index::{FirstFitIndex, UnknownNode};
pub use ledger::{
    Edit, EditKind, Entry, LedgerError, Migration, MoveBlock, NodeLedger, Plan, SpreadPlaced,
    TenantWants,
};
pub use make_room::{Mover, Room, make_room};
pub use overcommit::{Overcommit, OvercommitError};
pub use plan::{
    holders_of, plan_release, plan_restore, plan_tenant, plan_tenant_held_by, plan_tenant_with,
};
pub use policy::{Policy, Slack, UnknownPolicy, best_fit_among, place, place_with, weighted_slack};
pub use purchase::{
    Cost, InFlightAssignment, InFlightRequest, NewNode, NoClass, NodeClassOffer, Purchase,
    Unplaceable, WaitingTenant, packing_order, purchase,
};
pub use purchase_groups::{SelectiveTenant, purchase_by_labels};
pub use queue::{FifoQueue, QueueMode, UnknownQueueMode};
pub use rebalance::{
    Consolidation, Move, consolidate, consolidate_by_scan, consolidate_for, consolidate_sources,
};
pub use resources::{Dimension, Resources};
pub use selector::{Labels, Pairs};
pub use spread::{Replica, Spread, SpreadNoFit, ZonedNode, place_spread};
pub use spread_plan::{SpreadPlan, SpreadWants, plan_spread};
