//! A first-fit index: the same answer as [`first_fit`], kept current as reservations change,
//! without scanning every node per decision.
//!
//! ```text
//!                      [max free 7·32·100]                 each inner slot: per dimension, the
//!                 /                        \               largest free amount among ELIGIBLE
//!        [3·32·100]                         [7·32·100]      leaves below it (None: no eligible
//!        /        \                         /        \      leaf below)
//!   a 0·0·0   b 3·32·100            c None (cordoned)  d 7·32·100      leaves in name order
//!
//!   request 4·1·1: root covers → left covers? 3 < 4, prune → right covers → c None, prune → d
//! ```
//!
//! Rules enforced here:
//! - leaves are the nodes in name order (byte order), so the leftmost fitting leaf is the first
//!   fit by name;
//! - a leaf holds the node's free room only when the node takes new tenants (Online, not over
//!   capacity); otherwise it holds nothing, and a subtree without an eligible leaf holds nothing,
//!   so a request of 0 in some (or every) dimension never matches an ineligible node;
//! - the search prunes every subtree whose per-dimension maxima cannot cover the request, and
//!   backtracks when they can but no single leaf does (each maximum from a different leaf). With
//!   the fleet's free room concentrated in few nodes (the common case: full nodes first by
//!   name) a decision visits O(log n) slots; adversarial fleets can make it visit more, never
//!   answering differently from the scan;
//! - `no_fit` is the root's maxima and the eligible count, which is exactly what `no_fit` over
//!   a scan reports ([`crate::fit::no_fit`]); an update (a reservation, a state or capacity change) costs O(log n), adding
//!   or removing a node O(n).
//!
//! The index knows no labels: an `IndexedFleet` (fleet.rs) keeps one per node selector, over the
//! nodes carrying its labels.
//!
//! Node names are expected to be unique, as Kubernetes names are. With duplicates, decisions
//! still agree with the scan, and updates by name change one of the nodes of that name.

use std::fmt;

use crate::fit::{Choice, NoFit, NodeState, NodeView, Shortfall, first_fit};
use crate::resources::{Dimension, Resources};

/// One node as the index keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Leaf {
    name: String,
    state: NodeState,
    capacity: Resources,
    allocated: Resources,
}

impl Leaf {
    fn from_view(view: &NodeView<'_>) -> Self {
        Leaf {
            name: view.name.to_owned(),
            state: view.state,
            capacity: view.capacity,
            allocated: view.allocated,
        }
    }

    fn view(&self) -> NodeView<'_> {
        NodeView {
            name: &self.name,
            state: self.state,
            capacity: self.capacity,
            allocated: self.allocated,
        }
    }

    /// What the leaf offers to a search: its free room when it takes new tenants.
    fn room(&self) -> Option<Resources> {
        let view = self.view();
        view.takes_new_tenants().then(|| view.free())
    }
}

/// An update named a node the index does not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownNode(pub String);

impl fmt::Display for UnknownNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} is not in the first-fit index", self.0)
    }
}

impl std::error::Error for UnknownNode {}

/// First fit over name-ordered nodes in a segment tree of per-dimension maxima (module doc).
#[derive(Clone, Debug)]
pub struct FirstFitIndex {
    /// The nodes in name order; leaf `i` is slot `width + i`.
    leaves: Vec<Leaf>,
    /// Slot 1 is the root, slot `s` has children `2s` and `2s + 1`; slot 0 is unused.
    slots: Vec<Option<Resources>>,
    /// A power of two, at least the number of leaves (and at least 1).
    width: usize,
    /// How many leaves take new tenants.
    eligible: usize,
}

impl Default for FirstFitIndex {
    fn default() -> Self {
        FirstFitIndex::new(&[])
    }
}

/// Per dimension, the larger of two maxima; `None` (no eligible leaf) is absorbed.
fn combine(a: Option<Resources>, b: Option<Resources>) -> Option<Resources> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Resources::from_fn(|d: Dimension| a.get(d).max(b.get(d)))),
        (one, None) | (None, one) => one,
    }
}

/// The left child of slot `s`; slots stay below `2 × width`, far from `usize::MAX`.
fn left_child(slot: usize) -> usize {
    slot.wrapping_mul(2)
}

impl FirstFitIndex {
    /// Indexes the nodes, whatever order they are given in.
    pub fn new(nodes: &[NodeView<'_>]) -> Self {
        let mut leaves: Vec<Leaf> = nodes.iter().map(Leaf::from_view).collect();
        leaves.sort_by(|a, b| a.name.cmp(&b.name));
        Self::from_sorted(leaves)
    }

    fn from_sorted(leaves: Vec<Leaf>) -> Self {
        let width = leaves
            .len()
            .max(1)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX);
        let mut slots = vec![None; width.saturating_mul(2)];
        let mut eligible = 0usize;
        for (slot, leaf) in slots.iter_mut().skip(width).zip(&leaves) {
            *slot = leaf.room();
            if slot.is_some() {
                eligible = eligible.saturating_add(1);
            }
        }
        let mut index = FirstFitIndex {
            leaves,
            slots,
            width,
            eligible,
        };
        for slot in (1..width).rev() {
            index.recompute(slot);
        }
        index
    }

    /// Sets slot `s` from its two children.
    fn recompute(&mut self, slot: usize) {
        let left = left_child(slot);
        let value = combine(
            self.slots.get(left).copied().flatten(),
            self.slots.get(left.wrapping_add(1)).copied().flatten(),
        );
        if let Some(target) = self.slots.get_mut(slot) {
            *target = value;
        }
    }

    /// Re-reads leaf `position` and fixes the maxima on its path to the root: O(log n).
    fn refresh(&mut self, position: usize) {
        let Some(room) = self.leaves.get(position).map(Leaf::room) else {
            return;
        };
        let mut slot = self.width.saturating_add(position);
        if let Some(target) = self.slots.get_mut(slot) {
            match (target.is_some(), room.is_some()) {
                (false, true) => self.eligible = self.eligible.saturating_add(1),
                (true, false) => self.eligible = self.eligible.saturating_sub(1),
                _ => {}
            }
            *target = room;
        }
        while slot > 1 {
            slot = slot.wrapping_shr(1);
            self.recompute(slot);
        }
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.leaves
            .binary_search_by(|leaf| leaf.name.as_str().cmp(name))
            .ok()
    }

    /// How many nodes the index holds.
    pub fn len(&self) -> usize {
        self.leaves.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }

    /// How many nodes take new tenants.
    pub fn eligible_nodes(&self) -> usize {
        self.eligible
    }

    /// The node as the index holds it.
    pub fn view(&self, name: &str) -> Option<NodeView<'_>> {
        self.position(name)
            .and_then(|p| self.leaves.get(p))
            .map(Leaf::view)
    }

    /// Every node, in name order.
    pub fn views(&self) -> impl Iterator<Item = NodeView<'_>> + '_ {
        self.leaves.iter().map(Leaf::view)
    }

    /// A reservation changed on `name`: its allocated total is now `allocated`. O(log n).
    pub fn update(&mut self, name: &str, allocated: Resources) -> Result<(), UnknownNode> {
        let position = self
            .position(name)
            .ok_or_else(|| UnknownNode(name.to_owned()))?;
        if let Some(leaf) = self.leaves.get_mut(position) {
            leaf.allocated = allocated;
        }
        self.refresh(position);
        Ok(())
    }

    /// Sets everything about a node (state, capacity, allocated): O(log n) for a node the index
    /// holds; a new node is added, O(n). True when the node was new.
    pub fn set(&mut self, node: NodeView<'_>) -> bool {
        match self.position(node.name) {
            Some(position) => self.set_at(position, node),
            None => {
                let mut leaves = std::mem::take(&mut self.leaves);
                let at = leaves.partition_point(|leaf| leaf.name.as_str() < node.name);
                leaves.insert(at, Leaf::from_view(&node));
                *self = Self::from_sorted(leaves);
                true
            }
        }
    }

    /// [`set`](Self::set) for a node known to be the `position`-th by name (as in a fleet kept
    /// in name order), without looking it up: O(log n). Falls back to `set` otherwise.
    pub fn set_at(&mut self, position: usize, node: NodeView<'_>) -> bool {
        match self.leaves.get_mut(position) {
            Some(leaf) if leaf.name == node.name => {
                leaf.state = node.state;
                leaf.capacity = node.capacity;
                leaf.allocated = node.allocated;
                self.refresh(position);
                false
            }
            _ => self.set(node),
        }
    }

    /// Removes a node, O(n). True when it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        let Some(position) = self.position(name) else {
            return false;
        };
        let mut leaves = std::mem::take(&mut self.leaves);
        leaves.remove(position);
        *self = Self::from_sorted(leaves);
        true
    }

    /// The first eligible node by name whose free room covers the whole request: the same
    /// answer as [`first_fit`] over the same nodes.
    pub fn first_fit(&self, request: &Resources) -> Option<&str> {
        let position = self.leftmost_fit(1, request)?;
        self.leaves.get(position).map(|leaf| leaf.name.as_str())
    }

    /// The first `count` eligible nodes by name whose free room covers the whole request (fewer
    /// when fewer do): the first fit, then the next, as a scan would find them.
    pub fn first_fits(&self, request: &Resources, count: usize) -> Vec<&str> {
        let mut found = Vec::with_capacity(count.min(self.leaves.len()));
        self.collect_fits(1, request, count, &mut found);
        found
            .into_iter()
            .filter_map(|position| self.leaves.get(position).map(|leaf| leaf.name.as_str()))
            .collect()
    }

    /// Appends the leftmost leaves under `slot` whose room covers `request`, until `found` holds
    /// `count`.
    fn collect_fits(&self, slot: usize, request: &Resources, count: usize, found: &mut Vec<usize>) {
        if found.len() >= count {
            return;
        }
        let Some(max) = self.slots.get(slot).copied().flatten() else {
            return;
        };
        if !request.fits_within(&max) {
            return;
        }
        if slot >= self.width {
            if let Some(position) = slot.checked_sub(self.width) {
                found.push(position);
            }
            return;
        }
        let left = left_child(slot);
        self.collect_fits(left, request, count, found);
        self.collect_fits(left.wrapping_add(1), request, count, found);
    }

    /// The leftmost leaf under `slot` whose room covers `request`.
    fn leftmost_fit(&self, slot: usize, request: &Resources) -> Option<usize> {
        let max = self.slots.get(slot).copied().flatten()?;
        if !request.fits_within(&max) {
            return None;
        }
        if slot >= self.width {
            // A leaf whose room covers the request: that is a fit.
            return slot.checked_sub(self.width);
        }
        let left = left_child(slot);
        self.leftmost_fit(left, request)
            .or_else(|| self.leftmost_fit(left.wrapping_add(1), request))
    }

    /// The most free room per dimension among the eligible nodes (each maximum may come from a
    /// different node); zero when none is eligible.
    pub fn most_free(&self) -> Resources {
        self.slots.get(1).copied().flatten().unwrap_or_default()
    }

    /// The no-fit answer over the indexed nodes, equal to [`crate::fit::no_fit`] over the
    /// eligible ones.
    pub fn no_fit(&self, request: &Resources) -> NoFit {
        NoFit {
            eligible_nodes: self.eligible,
            shortfall: Shortfall {
                requested: *request,
                available: self.most_free(),
            },
            selector: None,
            labelled_nodes: 0,
        }
    }

    /// [`first_fit`]'s decision, from the index.
    pub fn decide(&self, request: &Resources) -> Choice<'_> {
        match self.first_fit(request) {
            Some(name) => Choice::Place(name),
            None => Choice::NoFit(self.no_fit(request)),
        }
    }

    /// The scan the index replaces, over the indexed nodes: for checking and benchmarking.
    pub fn scan(&self, request: &Resources) -> Choice<'_> {
        let views: Vec<NodeView<'_>> = self.views().collect();
        first_fit(&views, request)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::testing::ledger;

    #[test]
    fn the_picture_in_the_module_doc() {
        let cap = Resources::new(8, 32, 100);
        let nodes = [
            ledger("d").capacity_of(cap).allocated(1, 0, 0).view(),
            ledger("c")
                .state(NodeState::Cordoned)
                .capacity_of(cap)
                .view(),
            ledger("b").capacity_of(cap).allocated(5, 0, 0).view(),
            ledger("a").capacity_of(cap).allocated_of(cap).view(),
        ];
        let index = FirstFitIndex::new(&nodes);
        // 4 threads: a has 0, b 3, c is cordoned (8 free but not eligible), d 7.
        assert_eq!(index.first_fit(&Resources::new(4, 1, 1)), Some("d"));
        assert_eq!(index.first_fit(&Resources::new(3, 1, 1)), Some("b"));
        // A request of 0 everywhere still goes to an eligible node: a (full but Online).
        assert_eq!(index.first_fit(&Resources::ZERO), Some("a"));
        assert_eq!(index.eligible_nodes(), 3);
        assert_eq!(
            index.decide(&Resources::new(8, 1, 1)),
            Choice::NoFit(NoFit {
                eligible_nodes: 3,
                shortfall: Shortfall {
                    requested: Resources::new(8, 1, 1),
                    available: Resources::new(7, 32, 100),
                },
                selector: None,
                labelled_nodes: 0,
            })
        );
    }

    #[test]
    fn a_zero_request_never_matches_an_ineligible_node() {
        let cap = Resources::new(8, 8, 8);
        let mut index = FirstFitIndex::new(&[
            ledger("a")
                .state(NodeState::Offline)
                .capacity_of(cap)
                .view(),
            // Over capacity: holds 9 threads on 8.
            ledger("b").capacity_of(cap).allocated(9, 0, 0).view(),
        ]);
        assert_eq!(index.first_fit(&Resources::ZERO), None);
        assert_eq!(index.no_fit(&Resources::ZERO).eligible_nodes, 0);
        // b gives back 1 thread: now at capacity, eligible, 0 free threads.
        index.update("b", Resources::new(8, 0, 0)).unwrap();
        assert_eq!(index.first_fit(&Resources::ZERO), Some("b"));
        assert_eq!(index.first_fit(&Resources::new(1, 0, 0)), None);
    }

    #[test]
    fn backtracks_when_the_maxima_come_from_different_leaves() {
        // a: 10 threads 1 GB, b: 1 thread 10 GB, c: 5·5. The left pair's maxima are 10·10,
        // which covers 5·5, but neither a nor b does: the search must come back and try c.
        let nodes = [
            ledger("a").capacity(10, 1, 9).view(),
            ledger("b").capacity(1, 10, 9).view(),
            ledger("c").capacity(5, 5, 9).view(),
        ];
        let index = FirstFitIndex::new(&nodes);
        assert_eq!(index.first_fit(&Resources::new(5, 5, 5)), Some("c"));
    }

    #[test]
    fn updates_set_and_remove_keep_it_current() {
        let cap = Resources::new(4, 4, 4);
        let mut index = FirstFitIndex::new(&[]);
        assert!(index.is_empty());
        assert_eq!(index.first_fit(&Resources::ZERO), None);
        assert!(index.set(ledger("m").capacity_of(cap).view()));
        assert!(!index.is_empty());
        assert_eq!(index.view("m").map(|v| v.capacity), Some(cap));
        assert!(index.view("z").is_none());
        assert!(index.set(ledger("k").capacity_of(cap).allocated_of(cap).view()));
        // Set at a position another node holds: added by name, the other left as it was.
        assert!(index.set_at(0, ledger("l").capacity_of(cap).view()));
        assert_eq!(
            index.views().map(|v| v.name).collect::<Vec<_>>(),
            ["k", "l", "m"]
        );
        assert!(index.remove("l"));
        assert_eq!(index.first_fit(&Resources::new(1, 1, 1)), Some("m"));
        index.update("k", Resources::new(3, 3, 3)).unwrap();
        assert_eq!(index.first_fit(&Resources::new(1, 1, 1)), Some("k"));
        assert!(
            !index.set(
                ledger("k")
                    .state(NodeState::Cordoned)
                    .capacity_of(cap)
                    .view()
            )
        );
        assert_eq!(index.first_fit(&Resources::new(1, 1, 1)), Some("m"));
        assert!(index.remove("m"));
        assert!(!index.remove("m"));
        assert_eq!(index.first_fit(&Resources::ZERO), None);
        assert_eq!(
            index.update("m", Resources::ZERO),
            Err(UnknownNode("m".into()))
        );
        assert_eq!(
            UnknownNode("m".into()).to_string(),
            "node m is not in the first-fit index"
        );
        assert_eq!(index.len(), 1);
    }
}
