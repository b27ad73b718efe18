//! Test fixtures: one builder for a node, as a ledger or as the view placement decides on, so
//! that a test node is one expression.
//!
//! ```text
//!   ledger("a").capacity(32, 256, 2000).holding("t1", (2, 4, 10))  .build() → NodeLedger
//!                                                                    .view()  → NodeView
//!   ledger("h1").capacity(8, 32, 100).allocated(5, 0, 0)            room taken, whoever holds it
//!   entry("t1", (2, 4, 10))         one reservation
//!   ledger("a").label("region", "eu")                               a labelled node
//!   wants("t1", (2, 4, 10))         what tenant t1 asks (not suspended, no status node)
//!   labels(&[("region", "eu")])     a label map: a node's labels or a tenant's node selector
//!   zoned("a", Some("fsn1"), 6, Some(2))   a node of 8 threads, 6 free, in a zone, holding
//!                                   the spread tenant's 2 threads (counted in what is taken)
//! ```
//!
//! Conventions: a node is Online with capacity 0 until told otherwise; a tenant is named by one
//! string, its UID and its `tenant` key alike, so `holding("t1", ..)`, `entry("t1", ..)` and
//! `wants("t1", ..)` are the same tenant. `allocated` is one entry held by `held-{node}`.
//! `_of` methods take a [`Resources`] instead of three amounts.
//!
//! Why a feature and not an always-compiled module: the fixtures are compiled for this crate's
//! unit tests (`cfg(test)`) and, through the `testing` feature that the crate's dev-dependency on
//! itself turns on, for its integration tests and benches; builds of the crate for the controller
//! leave them out, so they never ship.

use std::sync::Arc;

use crate::fit::{NodeState, NodeView};
use crate::ledger::{Entry, NodeLedger, TenantWants};
use crate::overcommit::Overcommit;
use crate::resources::Resources;
use crate::selector::Labels;

/// Amounts in the three dimensions (threads, memory GB, storage GB): a tuple or a value.
pub trait Amounts {
    fn resources(self) -> Resources;
}

impl Amounts for (u64, u64, u64) {
    fn resources(self) -> Resources {
        Resources::new(self.0, self.1, self.2)
    }
}

impl Amounts for Resources {
    fn resources(self) -> Resources {
        self
    }
}

/// The reservation of tenant `tenant` (its UID and its key).
pub fn entry(tenant: &str, amounts: impl Amounts) -> Entry {
    Entry {
        uid: tenant.into(),
        tenant: tenant.into(),
        resources: amounts.resources(),
        replicas: None,
    }
}

/// What tenant `tenant` (its UID and its key) asks for: `footprint`, not suspended, with no node
/// named by its status. Other fields by struct update: `TenantWants { suspend, ..wants(..) }`.
pub fn wants(tenant: &str, footprint: impl Amounts) -> TenantWants<'_> {
    TenantWants {
        uid: tenant,
        tenant,
        footprint: footprint.resources(),
        suspend: false,
        status_node: None,
        migration: None,
        asked: None,
        node_selector: None,
    }
}

/// A label map (a node's labels, or a tenant's node selector) from `(key, value)` pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect()
}

/// A node named `name`: Online, capacity 0, no overcommit, no labels, holding nothing.
pub fn ledger(name: &str) -> LedgerBuilder<'_> {
    LedgerBuilder {
        name,
        state: NodeState::Online,
        capacity: Resources::ZERO,
        overcommit: Overcommit::NONE,
        labels: Labels::new(),
        entries: Vec::new(),
    }
}

/// Builds a [`NodeLedger`] or a [`NodeView`]; see the module doc.
#[derive(Clone, Debug)]
#[must_use]
pub struct LedgerBuilder<'a> {
    name: &'a str,
    state: NodeState,
    capacity: Resources,
    overcommit: Overcommit,
    labels: Labels,
    entries: Vec<Entry>,
}

impl<'a> LedgerBuilder<'a> {
    /// The physical capacity.
    pub fn capacity(self, threads: u64, memory_gb: u64, storage_gb: u64) -> Self {
        self.capacity_of(Resources::new(threads, memory_gb, storage_gb))
    }

    pub fn capacity_of(mut self, capacity: Resources) -> Self {
        self.capacity = capacity;
        self
    }

    pub fn state(mut self, state: NodeState) -> Self {
        self.state = state;
        self
    }

    pub fn overcommit(mut self, overcommit: Overcommit) -> Self {
        self.overcommit = overcommit;
        self
    }

    /// One more label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// One more entry, held by tenant `tenant`.
    pub fn holding(self, tenant: &str, amounts: impl Amounts) -> Self {
        self.entry(entry(tenant, amounts))
    }

    /// One more entry, held by `held-{node}`: room taken, whoever holds it.
    pub fn allocated(self, threads: u64, memory_gb: u64, storage_gb: u64) -> Self {
        self.allocated_of(Resources::new(threads, memory_gb, storage_gb))
    }

    pub fn allocated_of(self, allocated: Resources) -> Self {
        let holder = format!("held-{}", self.name);
        self.holding(&holder, allocated)
    }

    /// One more entry of any shape.
    pub fn entry(mut self, entry: Entry) -> Self {
        self.entries.push(entry);
        self
    }

    /// More entries of any shape.
    pub fn entries(mut self, entries: impl IntoIterator<Item = Entry>) -> Self {
        self.entries.extend(entries);
        self
    }

    pub fn build(self) -> NodeLedger {
        NodeLedger::new(self.name, self.state, self.capacity, self.entries)
            .unwrap_or_else(|e| panic!("a fixture's entries must add up: {e}"))
            .with_overcommit(self.overcommit)
            .with_labels(Arc::new(self.labels))
    }

    /// What placement sees: the effective capacity and the sum of the entries.
    pub fn view(self) -> NodeView<'a> {
        let allocated = Resources::checked_sum(self.entries.iter().map(|e| &e.resources))
            .unwrap_or_else(|| panic!("the entries of fixture {} add up past int64", self.name));
        NodeView {
            name: self.name,
            state: self.state,
            capacity: self.overcommit.effective(self.capacity),
            allocated,
        }
    }
}

/// A node of 8 threads, 8 GB and 8 GB for spreading: Online, `free` threads free (what the
/// tenant holds, `held` threads, counted as taken), in `zone`.
pub fn zoned(
    name: &'static str,
    zone: Option<&'static str>,
    free: u64,
    held: Option<u64>,
) -> crate::spread::ZonedNode<'static> {
    crate::spread::ZonedNode {
        view: NodeView {
            name,
            state: NodeState::Online,
            capacity: Resources::new(8, 8, 8),
            allocated: Resources::new(8u64.saturating_sub(free), 0, 0),
        },
        zone,
        held: held.map(|threads| Resources::new(threads, 0, 0)),
    }
}
