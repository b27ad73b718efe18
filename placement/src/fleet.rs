//! The nodes a decision reads and holds room on: a plain slice of ledgers, where every policy
//! scans, or an [`IndexedFleet`], where first fit is answered by [`FirstFitIndex`]es kept
//! current as the ledgers change.
//!
//! ```text
//!   plan_tenant_held_by / FifoQueue ──place, find, position, most_free, (un)hold──▶ impl Fleet
//!        [NodeLedger]   scans every node (tests, tools, small fleets)
//!        IndexedFleet   ledgers in name order + FirstFitIndex over all + one per node selector
//! ```
//!
//! Rules enforced here:
//! - a scan places by the policy over the ledgers' views, each node weighed by its own
//!   overcommit ([`place_ledgers`]); a tenant's node selector keeps the nodes carrying its
//!   labels, and the no-fit answer then names the selector and how many nodes carry them
//!   ([`place_ledgers_matching`]);
//! - both answer every question alike: an [`IndexedFleet`] gives the choice, the no-fit answer
//!   and the lookups the scan over its ledgers gives (a property test checks it after any
//!   sequence of holds and replaced ledgers);
//! - an [`IndexedFleet`] keeps its ledgers in name order (positions stay put until a node is
//!   added or removed) and updates each index on every change it makes: a replaced ledger, a
//!   hold. The positions it changed are kept until [`IndexedFleet::take_changed`];
//! - a node selector gets its own index once [`IndexedFleet::index_selector`] is called for it
//!   (at most [`IndexedFleet::MAX_SELECTORS`]); a selector without one is answered by a scan.
//!   Only first fit uses the indexes; the other policies score every candidate, so they scan.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use crate::fit::{Choice, NodeView};
use crate::hash::NameHasher;
use crate::index::FirstFitIndex;
use crate::ledger::{Edit, Entry, LedgerError, NodeLedger};
use crate::policy::{Policy, place_by};
use crate::resources::Resources;
use crate::selector::Labels;

/// What planning reads of the nodes. The provided methods scan [`ledgers`](Fleet::ledgers); an
/// indexed fleet answers them faster, never differently.
pub trait Fleet {
    /// Every node's ledger, in the fleet's order (positions index into it).
    fn ledgers(&self) -> &[NodeLedger];

    /// The position of the node of this name.
    fn position(&self, name: &str) -> Option<usize> {
        self.ledgers().iter().position(|l| l.name() == name)
    }

    /// The ledger of the node of this name.
    fn find(&self, name: &str) -> Option<&NodeLedger> {
        self.position(name).and_then(|i| self.ledgers().get(i))
    }

    /// The node `policy` picks for `request` among those carrying `selector`'s labels (see
    /// [`place_ledgers_matching`]).
    fn place(
        &self,
        policy: Policy,
        selector: Option<&Labels>,
        request: &Resources,
        turn: u64,
    ) -> Choice<'_> {
        place_ledgers_matching(policy, self.ledgers(), selector, request, turn)
    }

    /// The most free room per dimension over the nodes that take new tenants.
    fn most_free(&self) -> Resources {
        self.ledgers()
            .iter()
            .map(NodeLedger::view)
            .filter(|view| view.takes_new_tenants())
            .fold(Resources::ZERO, |most, view| {
                let free = view.free();
                Resources::from_fn(|d| most.get(d).max(free.get(d)))
            })
    }
}

/// A fleet that room can be held on.
pub trait FleetMut: Fleet {
    /// Holds `hold` on the node of this name (see [`NodeLedger::hold`]); a node not in the
    /// fleet holds nothing.
    fn hold(&mut self, node: &str, hold: Entry) -> Result<(), LedgerError>;

    /// Drops the room held for `uid` on the node of this name (see [`NodeLedger::unhold`]).
    /// False when none was held there.
    fn unhold(&mut self, node: &str, uid: &str) -> bool;
}

impl Fleet for [NodeLedger] {
    fn ledgers(&self) -> &[NodeLedger] {
        self
    }
}

impl FleetMut for [NodeLedger] {
    fn hold(&mut self, node: &str, hold: Entry) -> Result<(), LedgerError> {
        match self.iter_mut().find(|l| l.name() == node) {
            Some(ledger) => ledger.hold(hold),
            None => Ok(()),
        }
    }

    fn unhold(&mut self, node: &str, uid: &str) -> bool {
        self.iter_mut()
            .find(|l| l.name() == node)
            .is_some_and(|ledger| ledger.unhold(uid))
    }
}

impl Fleet for Vec<NodeLedger> {
    fn ledgers(&self) -> &[NodeLedger] {
        self
    }
}

impl FleetMut for Vec<NodeLedger> {
    fn hold(&mut self, node: &str, hold: Entry) -> Result<(), LedgerError> {
        self.as_mut_slice().hold(node, hold)
    }

    fn unhold(&mut self, node: &str, uid: &str) -> bool {
        self.as_mut_slice().unhold(node, uid)
    }
}

impl<const N: usize> Fleet for [NodeLedger; N] {
    fn ledgers(&self) -> &[NodeLedger] {
        self
    }
}

/// [`place`](crate::policy::place) over ledgers, by a scan: each node's effective capacity and
/// overcommit weights are its own.
pub fn place_ledgers<'a>(
    policy: Policy,
    nodes: &'a [NodeLedger],
    request: &Resources,
    turn: u64,
) -> Choice<'a> {
    let views: Vec<NodeView<'a>> = nodes.iter().map(NodeLedger::view).collect();
    place_by(policy, &views, request, turn, |i| {
        nodes.get(i).map(NodeLedger::overcommit).unwrap_or_default()
    })
}

/// [`place_ledgers`] among the nodes whose labels include every pair of `selector` (see
/// [`crate::selector::matches`]); `None` or an empty selector is [`place_ledgers`]. The
/// candidates are found by a scan. A no-fit answer names the selector and how many nodes carry
/// its labels.
pub fn place_ledgers_matching<'a>(
    policy: Policy,
    nodes: &'a [NodeLedger],
    selector: Option<&Labels>,
    request: &Resources,
    turn: u64,
) -> Choice<'a> {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return place_ledgers(policy, nodes, request, turn);
    };
    let labelled: Vec<&'a NodeLedger> = nodes
        .iter()
        .filter(|node| node.matches(Some(selector)))
        .collect();
    let views: Vec<NodeView<'a>> = labelled.iter().map(|node| node.view()).collect();
    let choice = place_by(policy, &views, request, turn, |i| {
        labelled
            .get(i)
            .map(|node| node.overcommit())
            .unwrap_or_default()
    });
    match choice {
        Choice::NoFit(no_fit) => Choice::NoFit(no_fit.for_selector(selector, labelled.len())),
        place => place,
    }
}

/// Ledgers in name order with first-fit indexes kept current (module doc).
#[derive(Clone, Debug, Default)]
pub struct IndexedFleet {
    /// In name order; names are unique (Kubernetes names are).
    ledgers: Vec<NodeLedger>,
    /// Every node.
    all: FirstFitIndex,
    /// The nodes carrying each indexed selector's labels.
    by_selector: HashMap<Labels, FirstFitIndex>,
    /// Positions changed (replaced or held on) since the last [`take_changed`](Self::take_changed).
    changed: Vec<usize>,
    /// Position by a hash of the name: one probe finds a node, then its name is compared. Two
    /// names of one hash map to [`AMBIGUOUS`] and are found by a binary search over the names.
    by_name_hash: HashMap<u64, usize, BuildHasherDefault<NameHasher>>,
}

/// The ledgers in name order, each name once (the first of a name kept): the order an
/// [`IndexedFleet`] holds them in, for a caller that needs no index.
pub fn in_name_order(mut ledgers: Vec<NodeLedger>) -> Vec<NodeLedger> {
    ledgers.sort_by(|a, b| a.name().cmp(b.name()));
    ledgers.dedup_by(|later, earlier| later.name() == earlier.name());
    ledgers
}

impl IndexedFleet {
    /// Selector indexes kept at most: past this many distinct selectors, the others scan.
    pub const MAX_SELECTORS: usize = 64;

    /// Indexes these ledgers (any order; a later ledger of a name already seen is dropped).
    pub fn new(ledgers: Vec<NodeLedger>) -> Self {
        let ledgers = in_name_order(ledgers);
        let views: Vec<_> = ledgers.iter().map(NodeLedger::view).collect();
        let all = FirstFitIndex::new(&views);
        let mut by_name_hash = HashMap::with_capacity_and_hasher(ledgers.len(), Default::default());
        for (position, ledger) in ledgers.iter().enumerate() {
            by_name_hash
                .entry(name_hash(ledger.name()))
                .and_modify(|at| *at = AMBIGUOUS)
                .or_insert(position);
        }
        IndexedFleet {
            ledgers,
            all,
            by_selector: HashMap::new(),
            changed: Vec::new(),
            by_name_hash,
        }
    }

    /// The ledgers, giving up the indexes.
    pub fn into_ledgers(self) -> Vec<NodeLedger> {
        self.ledgers
    }

    /// Builds the index of this selector's nodes, if it has none and there is room for one.
    /// An empty selector matches every node: it needs none.
    pub fn index_selector(&mut self, selector: &Labels) {
        if selector.is_empty()
            || self.by_selector.contains_key(selector)
            || self.by_selector.len() >= Self::MAX_SELECTORS
        {
            return;
        }
        let views: Vec<_> = self
            .ledgers
            .iter()
            .filter(|l| l.matches(Some(selector)))
            .map(NodeLedger::view)
            .collect();
        self.by_selector
            .insert(selector.clone(), FirstFitIndex::new(&views));
    }

    /// The first `count` nodes by name carrying `selector`'s labels (any node when `None` or
    /// empty) that take new tenants and have room for `request`, from the selector's index;
    /// `None` when that selector has no index (see [`index_selector`](Self::index_selector)).
    pub fn first_fits(
        &self,
        selector: Option<&Labels>,
        request: &Resources,
        count: usize,
    ) -> Option<Vec<&str>> {
        match selector.filter(|s| !s.is_empty()) {
            None => Some(self.all.first_fits(request, count)),
            Some(selector) => Some(self.by_selector.get(selector)?.first_fits(request, count)),
        }
    }

    /// Replaces the ledger at `position` with one of the same node (its entries, state,
    /// capacity or labels changed), and every index with it. False when `position` is out of
    /// range or names another node (nothing changes then).
    pub fn replace(&mut self, position: usize, ledger: NodeLedger) -> bool {
        let Some(slot) = self.ledgers.get_mut(position) else {
            return false;
        };
        if slot.name() != ledger.name() {
            return false;
        }
        *slot = ledger;
        self.reindex(position);
        true
    }

    /// Applies an edit to the ledger at `position` in place (see [`NodeLedger::apply`]), and
    /// every index with it. False when `position` is out of range or names another node.
    pub fn apply(&mut self, position: usize, edit: &Edit) -> Result<bool, LedgerError> {
        match self.ledgers.get_mut(position) {
            Some(ledger) if ledger.name() == edit.node => ledger.apply(edit)?,
            _ => return Ok(false),
        }
        self.reindex(position);
        Ok(true)
    }

    /// Drops the room held on the node at `position` (see [`NodeLedger::clear_holds`]).
    pub fn clear_holds(&mut self, position: usize) {
        if let Some(ledger) = self.ledgers.get_mut(position)
            && !ledger.holds().is_empty()
        {
            ledger.clear_holds();
            self.reindex(position);
        }
    }

    /// Gives back the spare room of the ledger at `position` (see [`NodeLedger::shrink_to_fit`]).
    pub fn shrink_to_fit(&mut self, position: usize) {
        if let Some(ledger) = self.ledgers.get_mut(position) {
            ledger.shrink_to_fit();
        }
    }

    /// Shares the names of the ledger at `position` with `names` (see
    /// [`NodeLedger::share_names`]); no index reads them.
    pub fn share_names<'a>(
        &mut self,
        position: usize,
        names: impl IntoIterator<Item = (&'a Arc<str>, &'a Arc<str>)>,
    ) {
        if let Some(ledger) = self.ledgers.get_mut(position) {
            ledger.share_names(names);
        }
    }

    /// The positions changed since the last call, each once, in order.
    pub fn take_changed(&mut self) -> Vec<usize> {
        let mut changed = std::mem::take(&mut self.changed);
        changed.sort_unstable();
        changed.dedup();
        changed
    }

    /// Brings every index up to date with the ledger at `position`.
    fn reindex(&mut self, position: usize) {
        let Some(ledger) = self.ledgers.get(position) else {
            return;
        };
        self.changed.push(position);
        let view = ledger.view();
        // The index over every node holds them in the same name order as the ledgers.
        self.all.set_at(position, view);
        for (selector, index) in &mut self.by_selector {
            if ledger.matches(Some(selector)) {
                index.set(view);
            } else {
                index.remove(view.name);
            }
        }
    }
}

/// The hash a node name is found by (names are unique; equal hashes are told apart by name).
fn name_hash(name: &str) -> u64 {
    crate::hash::uid_hash(name)
}

/// In [`IndexedFleet::by_name_hash`]: more than one name has this hash.
const AMBIGUOUS: usize = usize::MAX;

impl Fleet for IndexedFleet {
    fn ledgers(&self) -> &[NodeLedger] {
        &self.ledgers
    }

    fn position(&self, name: &str) -> Option<usize> {
        match *self.by_name_hash.get(&name_hash(name))? {
            AMBIGUOUS => self.ledgers.binary_search_by(|l| l.name().cmp(name)).ok(),
            position => {
                Some(position).filter(|&p| self.ledgers.get(p).is_some_and(|l| l.name() == name))
            }
        }
    }

    fn place(
        &self,
        policy: Policy,
        selector: Option<&Labels>,
        request: &Resources,
        turn: u64,
    ) -> Choice<'_> {
        let selector = selector.filter(|s| !s.is_empty());
        if policy != Policy::FirstFit {
            return place_ledgers_matching(policy, &self.ledgers, selector, request, turn);
        }
        let Some(selector) = selector else {
            return self.all.decide(request);
        };
        let Some(index) = self.by_selector.get(selector) else {
            return place_ledgers_matching(policy, &self.ledgers, Some(selector), request, turn);
        };
        match index.decide(request) {
            Choice::NoFit(no_fit) => Choice::NoFit(no_fit.for_selector(selector, index.len())),
            place => place,
        }
    }

    fn most_free(&self) -> Resources {
        self.all.most_free()
    }
}

impl FleetMut for IndexedFleet {
    fn hold(&mut self, node: &str, hold: Entry) -> Result<(), LedgerError> {
        let Some(position) = self.position(node) else {
            return Ok(());
        };
        if let Some(ledger) = self.ledgers.get_mut(position) {
            ledger.hold(hold)?;
        }
        self.reindex(position);
        Ok(())
    }

    fn unhold(&mut self, node: &str, uid: &str) -> bool {
        let Some(position) = self.position(node) else {
            return false;
        };
        let dropped = self
            .ledgers
            .get_mut(position)
            .is_some_and(|ledger| ledger.unhold(uid));
        if dropped {
            self.reindex(position);
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::fit::NodeState;
    use crate::testing::{labels, ledger};

    #[test]
    fn ledgers_in_name_order_keep_the_first_of_each_name() {
        let ordered = in_name_order(vec![
            ledger("b").capacity(1, 1, 1).build(),
            ledger("a").capacity(2, 2, 2).build(),
            ledger("b").capacity(3, 3, 3).build(),
        ]);
        let seen: Vec<(&str, u64)> = ordered
            .iter()
            .map(|l| (l.name(), l.capacity().get(crate::Dimension::Threads)))
            .collect();
        assert_eq!(seen, [("a", 2), ("b", 1)]);
    }

    #[test]
    fn a_selector_index_follows_label_changes_and_names_the_selector_when_nothing_fits() {
        let eu = labels(&[("region", "eu")]);
        let mut fleet = IndexedFleet::new(vec![
            ledger("b").capacity(4, 4, 4).build(),
            ledger("a").capacity(8, 8, 8).build(),
        ]);
        fleet.index_selector(&eu);
        let request = Resources::new(2, 2, 2);
        let Choice::NoFit(no_fit) = fleet.place(Policy::FirstFit, Some(&eu), &request, 0) else {
            panic!("no node carries region=eu yet");
        };
        assert_eq!(no_fit.labelled_nodes, 0);
        let b = fleet.position("b").unwrap();
        let labelled = ledger("b")
            .capacity(4, 4, 4)
            .build()
            .with_labels(std::sync::Arc::new(eu.clone()));
        assert!(fleet.replace(b, labelled));
        assert_eq!(
            fleet.place(Policy::FirstFit, Some(&eu), &request, 0),
            Choice::Place("b")
        );
        assert_eq!(
            fleet.place(Policy::FirstFit, None, &request, 0),
            Choice::Place("a")
        );
        // Holding b's room leaves nothing labelled with room.
        fleet
            .hold(
                "b",
                Entry {
                    uid: "w".into(),
                    tenant: "ns/w".into(),
                    resources: Resources::new(3, 3, 3),
                    replicas: None,
                },
            )
            .unwrap();
        assert!(matches!(
            fleet.place(Policy::FirstFit, Some(&eu), &request, 0),
            Choice::NoFit(no_fit) if no_fit.labelled_nodes == 1
        ));
        assert_eq!(fleet.take_changed(), [b]);
        assert!(fleet.take_changed().is_empty());
    }

    #[test]
    fn replace_refuses_another_node() {
        let mut fleet = IndexedFleet::new(vec![ledger("a").capacity(1, 1, 1).build()]);
        assert!(!fleet.replace(0, ledger("z").build()));
        assert!(!fleet.replace(1, ledger("a").build()));
        assert!(fleet.replace(0, ledger("a").state(NodeState::Cordoned).build()));
        assert!(matches!(
            fleet.place(Policy::FirstFit, None, &Resources::ZERO, 0),
            Choice::NoFit(_)
        ));
    }

    #[test]
    fn an_edit_applies_to_its_own_node_only_and_the_index_follows() {
        let mut fleet = IndexedFleet::new(vec![
            ledger("n1").capacity(8, 8, 8).build(),
            ledger("n2").capacity(8, 8, 8).build(),
        ]);
        let edit = Edit {
            kind: crate::ledger::EditKind::Reserve,
            node: "n1".into(),
            uid: "a".into(),
            entry: Some(crate::testing::entry("a", (6, 6, 6))),
        };
        let before = fleet.ledgers().to_vec();
        // At another node's position, or past the end: nothing changes.
        assert_eq!(fleet.apply(1, &edit), Ok(false));
        assert_eq!(fleet.apply(2, &edit), Ok(false));
        assert_eq!(fleet.ledgers(), &before[..]);
        assert!(fleet.take_changed().is_empty());
        assert_eq!(fleet.apply(0, &edit), Ok(true));
        assert_eq!(fleet.ledgers()[0].entries().len(), 1);
        assert_eq!(fleet.take_changed(), [0]);
        // n1 has 2 left: first fit now answers n2 for 4.
        let four = Resources::new(4, 4, 4);
        assert_eq!(
            fleet.place(Policy::FirstFit, None, &four, 0),
            Choice::Place("n2")
        );
        assert_eq!(fleet.clone().into_ledgers(), fleet.ledgers());
    }

    #[test]
    fn selector_indexes_are_kept_for_at_most_max_selectors_and_none_for_the_empty_one() {
        let mut fleet = IndexedFleet::new(vec![ledger("n1").capacity(8, 8, 8).build()]);
        fleet.index_selector(&Labels::new());
        assert!(
            fleet.by_selector.is_empty(),
            "the empty selector matches every node"
        );
        for i in 0..=IndexedFleet::MAX_SELECTORS {
            fleet.index_selector(&labels(&[("rack", &i.to_string())]));
        }
        assert_eq!(fleet.by_selector.len(), IndexedFleet::MAX_SELECTORS);
        // Asking again for one indexed keeps it as it is.
        let first = labels(&[("rack", "0")]);
        fleet.index_selector(&first);
        assert!(fleet.by_selector.contains_key(&first));
        assert_eq!(fleet.by_selector.len(), IndexedFleet::MAX_SELECTORS);
    }

    #[test]
    fn cleared_holds_free_their_room_in_the_index_and_names_are_found_by_distinct_hashes() {
        let mut fleet = IndexedFleet::new(vec![
            ledger("n1").capacity(8, 8, 8).build(),
            ledger("n2").capacity(8, 8, 8).build(),
        ]);
        fleet
            .hold("n1", crate::testing::entry("w", (6, 6, 6)))
            .unwrap();
        fleet.take_changed();
        let four = Resources::new(4, 4, 4);
        assert_eq!(
            fleet.place(Policy::FirstFit, None, &four, 0),
            Choice::Place("n2")
        );
        // Nothing held on n2: nothing to clear, nothing changed.
        fleet.clear_holds(1);
        assert!(fleet.take_changed().is_empty());
        fleet.clear_holds(0);
        assert!(fleet.ledgers()[0].holds().is_empty());
        assert_eq!(fleet.take_changed(), [0]);
        assert_eq!(
            fleet.place(Policy::FirstFit, None, &four, 0),
            Choice::Place("n1")
        );
        assert_ne!(name_hash("n1"), name_hash("n2"));
    }
}
