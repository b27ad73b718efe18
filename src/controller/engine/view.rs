//! The nodes as the engine sees them, converted for the placement crate and kept between
//! batches: each batch rebuilds only the nodes that changed.
//!
//! ```text
//!   snapshot (watch cache + our writes and re-reads) ──sync──▶ View ──decide_batch──▶ edits, holds
//!        node with a new resourceVersion, or changed by the last batch: its ledger rebuilt
//!        node added, removed, or turned (un)readable: everything rebuilt (positions move)
//!   View = IndexedFleet (ledgers in name order, first-fit indexes) + UID index + unreadable nodes
//! ```
//!
//! Rules enforced here (docs/design.md, "The placement engine"):
//! - at the start of every batch the view equals one built from scratch from objects the server
//!   confirmed (the watch cache overlaid with what the engine wrote or re-read), never ahead of
//!   the server: a node is kept only while its resourceVersion is the one it was built from and
//!   no batch has edited or held room on it since ([`View::end_batch`]). A property test checks
//!   it against a full rebuild after any sequence of node events;
//! - a node whose allocations cannot be read is [`Unreadable`]: it has no ledger, so nothing can
//!   be written to it, and a tenant it names is not decided elsewhere (that could reserve twice);
//! - the UID index follows every edit applied to the view, so a decision finds its tenant's
//!   entries without scanning the fleet; a hash collision only adds a position the plan checks;
//! - a ledger shares its names with the node object the view keeps for it (the cache's copy once
//!   it has the same version), so a reservation's names are held once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use placement::{Edit, Fleet, IndexedFleet, NodeLedger};

use crate::api::{Node, NodeStatus};
use crate::controller::patch;
use crate::error::Error;

/// A node whose recorded allocations cannot be used: never written, and the tenants it names are
/// not decided while it stays so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Unreadable {
    pub node: String,
    pub reason: String,
    /// The UIDs its allocations name.
    pub uids: Vec<String>,
}

impl Unreadable {
    fn error(&self) -> Error {
        Error::UnreadableNode {
            node: self.node.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// The nodes, their ledgers (with the current batch's edits and holds applied) and indexes.
#[derive(Debug, Default)]
pub(super) struct View {
    /// The node objects the ledgers were built from, by name.
    nodes: HashMap<String, Arc<Node>>,
    pub(super) fleet: IndexedFleet,
    /// Positions in the fleet holding an entry of each UID.
    holders: UidIndex,
    /// The same, for spread replicas' entries only: a spread tenant on several nodes is not a
    /// move in flight.
    spread: UidIndex,
    /// By node name.
    unreadable: BTreeMap<String, Unreadable>,
    /// Positions of the nodes the current batch edited (a position may repeat).
    edited: Vec<usize>,
    /// Nodes a batch edited whose write is not confirmed: rebuilt at the next sync.
    dirty: HashSet<String>,
    /// The zones of the nodes under a zone label, by name, as last read: read again once a
    /// node's labels change (an edit never changes them).
    zones: Option<(String, Arc<[String]>)>,
    /// Spread tenants (`namespace/name`) with a replica on a node whose labels changed since
    /// they were last taken: the zone their replica is in may have changed.
    relabelled: Vec<Arc<str>>,
}

impl View {
    pub(super) fn build(nodes: Vec<Arc<Node>>) -> View {
        let mut ledgers = Vec::with_capacity(nodes.len());
        let mut unreadable = BTreeMap::new();
        for node in &nodes {
            match node.ledger() {
                Ok(ledger) => ledgers.push(ledger),
                Err(reason) => {
                    unreadable.insert(node.name_any(), unreadable_node(node, reason));
                }
            }
        }
        let fleet = IndexedFleet::new(ledgers);
        let (mut holders, mut spread) = (UidIndex::default(), UidIndex::default());
        for (position, ledger) in fleet.ledgers().iter().enumerate() {
            for entry in ledger.entries() {
                holders.insert(UidIndex::hash(&entry.uid), position);
                if entry.replicas.is_some() {
                    spread.insert(UidIndex::hash(&entry.uid), position);
                }
            }
        }
        View {
            nodes: nodes
                .into_iter()
                .map(|node| (name_of(&node).to_owned(), node))
                .collect(),
            fleet,
            holders,
            spread,
            unreadable,
            edited: Vec::new(),
            dirty: HashSet::new(),
            zones: None,
            relabelled: Vec::new(),
        }
    }

    /// Takes the spread tenants with a replica on a node whose labels changed (see
    /// [`View::relabelled`]): each is to be decided again.
    pub(super) fn take_relabelled(&mut self) -> Vec<Arc<str>> {
        std::mem::take(&mut self.relabelled)
    }

    /// The values of `label` on the nodes, by name: the zones spread tenants are placed over.
    pub(super) fn zones(&mut self, label: &str) -> Arc<[String]> {
        if self.zones.as_ref().is_none_or(|(read, _)| read != label) {
            let zones: std::collections::BTreeSet<&String> = self
                .fleet
                .ledgers()
                .iter()
                .filter_map(|l| l.labels().get(label))
                .collect();
            let zones: Arc<[String]> = zones.into_iter().cloned().collect();
            self.zones = Some((label.to_owned(), zones.clone()));
            return zones;
        }
        self.zones
            .as_ref()
            .map_or_else(|| Arc::from([]), |(_, zones)| zones.clone())
    }

    /// The ledgers, giving up the indexes.
    pub(super) fn into_ledgers(self) -> Vec<NodeLedger> {
        self.fleet.into_ledgers()
    }

    /// Brings the view to `nodes` (every node the engine knows, freshest copies): the same view
    /// [`build`](Self::build) would give, rebuilding only the nodes that changed.
    pub(super) fn sync(&mut self, nodes: Vec<Arc<Node>>) {
        let (mut changed, mut kept) = (Vec::new(), Vec::new());
        let mut same_names = nodes.len() == self.nodes.len();
        for node in &nodes {
            let name = name_of(node);
            match self.nodes.get(name) {
                None => {
                    same_names = false;
                    break;
                }
                Some(old) if !self.dirty.contains(name) && same_version(old, node) => {
                    if !Arc::ptr_eq(old, node) {
                        // The same version: keep the cache's copy, let ours go.
                        kept.push(Arc::clone(node));
                    }
                }
                Some(_) => changed.push(Arc::clone(node)),
            }
        }
        // Equal counts and every name known: the same set of names (names are unique).
        if !same_names || !changed.into_iter().all(|node| self.rebuild(node)) {
            *self = View::build(nodes);
            return;
        }
        for node in kept {
            self.keep(node);
        }
        self.dirty.clear();
        self.fleet.take_changed();
    }

    /// [`sync`](Self::sync) for a caller that knows which nodes may have changed since the last
    /// sync: each with its freshest copy (`None`: gone). It must name every node whose copy
    /// changed and every node [`dirty`](Self::dirty) names. False when a node was added or
    /// removed, or turned (un)readable: the caller syncs with every node then.
    pub(super) fn sync_changed(
        &mut self,
        changed: impl IntoIterator<Item = (String, Option<Arc<Node>>)>,
    ) -> bool {
        for (name, node) in changed {
            let rebuilt = match (self.nodes.get(&name), node) {
                (None, None) => true,
                (Some(old), Some(node))
                    if !self.dirty.contains(&name) && same_version(old, &node) =>
                {
                    self.keep(node);
                    true
                }
                (Some(_), Some(node)) => self.rebuild(node),
                _ => false,
            };
            if !rebuilt {
                return false;
            }
        }
        self.dirty.clear();
        self.fleet.take_changed();
        true
    }

    /// The nodes the next sync must rebuild whatever their version: the last batch changed them.
    pub(super) fn dirty(&self) -> impl Iterator<Item = &String> {
        self.dirty.iter()
    }

    /// Ends a batch: the room it held goes, and the nodes it edited are rebuilt at the next sync
    /// from what the server has, unless their writes are [confirmed](Self::confirm).
    pub(super) fn end_batch(&mut self) {
        for position in self.fleet.take_changed() {
            self.fleet.clear_holds(position);
        }
        self.fleet.take_changed();
        for position in std::mem::take(&mut self.edited) {
            // The batch's additions grew its vectors by doubling; the ledger may be kept.
            self.fleet.shrink_to_fit(position);
            if let Some(name) = self.name_at(position) {
                self.dirty.insert(name.to_owned());
            }
        }
    }

    /// Keeps the cache's copy of a node whose version the view already has, and lets ours go:
    /// its ledger takes the copy's strings (a ledger the engine edited holds the decisions' own
    /// strings, and the copy it was confirmed with goes), so each name is held once.
    fn keep(&mut self, node: Arc<Node>) {
        let name = name_of(&node);
        if let Some(position) = self.fleet.position(name) {
            self.fleet.share_names(
                position,
                node.allocations().iter().map(|a| (&a.uid, &a.tenant)),
            );
        }
        self.nodes.insert(name.to_owned(), node);
    }

    /// The server took a write of this node, made from the view's ledger after
    /// [`end_batch`](Self::end_batch): the ledger is what the server has now, so it need not be
    /// rebuilt, and `written` is its object.
    pub(super) fn confirm(&mut self, written: Arc<Node>) {
        let name = name_of(&written);
        if self.nodes.contains_key(name) {
            self.dirty.remove(name);
            self.nodes.insert(name.to_owned(), written);
        }
    }

    /// Rebuilds one known node in place. False when its position would change (it turned
    /// readable or unreadable): the caller rebuilds everything.
    fn rebuild(&mut self, node: Arc<Node>) -> bool {
        let name = name_of(&node);
        match (node.ledger(), self.fleet.position(name)) {
            (Ok(ledger), Some(position)) => {
                if let Some(old) = self.fleet.ledgers().get(position) {
                    for entry in old.entries() {
                        self.holders.remove(UidIndex::hash(&entry.uid), position);
                        self.spread.remove(UidIndex::hash(&entry.uid), position);
                    }
                    if old.labels() != ledger.labels() {
                        self.zones = None;
                        self.relabelled.extend(
                            ledger
                                .entries()
                                .iter()
                                .filter(|e| e.replicas.is_some())
                                .map(|e| e.tenant.clone()),
                        );
                    }
                }
                for entry in ledger.entries() {
                    self.holders.insert(UidIndex::hash(&entry.uid), position);
                    if entry.replicas.is_some() {
                        self.spread.insert(UidIndex::hash(&entry.uid), position);
                    }
                }
                if !self.fleet.replace(position, ledger) {
                    return false;
                }
            }
            (Err(reason), None) if self.unreadable.contains_key(name) => {
                self.unreadable
                    .insert(name.to_owned(), unreadable_node(&node, reason));
            }
            _ => return false,
        }
        self.nodes.insert(name.to_owned(), node);
        true
    }

    /// Positions that may hold this UID (a hash collision adds a position that does not; the
    /// plan checks each).
    #[cfg(test)]
    fn holders_of(&self, uid: &str) -> Vec<usize> {
        self.holders.positions(UidIndex::hash(uid)).to_vec()
    }

    /// The fleet to plan on, and the positions that may hold this UID (a hash collision adds a
    /// position that does not; the plan checks each).
    pub(super) fn fleet_and_holders(&mut self, uid: &str) -> (&mut IndexedFleet, &[usize]) {
        (&mut self.fleet, self.holders.positions(UidIndex::hash(uid)))
    }

    /// The position of the ledger holding this UID's entry, if any.
    pub(super) fn held_at(&self, uid: &str) -> Option<usize> {
        self.holders
            .positions(UidIndex::hash(uid))
            .iter()
            .copied()
            .find(|&i| {
                self.fleet
                    .ledgers()
                    .get(i)
                    .is_some_and(|l| l.entry_of(uid).is_some())
            })
    }

    /// The ledgers that may hold this UID (as [`holders_of`](Self::holders_of)).
    pub(super) fn ledgers_holding(&self, uid: &str) -> impl Iterator<Item = &NodeLedger> {
        self.holders
            .positions(UidIndex::hash(uid))
            .iter()
            .filter_map(|&i| self.fleet.ledgers().get(i))
    }

    /// How many tenants are held on two nodes or more, spread tenants aside: moves in flight
    /// (and the rare duplicate). A gate on starting moves, not a safety rule, so a hash
    /// collision may miscount by one.
    pub(super) fn moves_in_flight(&self) -> usize {
        self.holders.shared().saturating_sub(self.spread.shared())
    }

    /// The name of the node at a ledger position.
    pub(super) fn name_at(&self, position: usize) -> Option<&str> {
        self.fleet.ledgers().get(position).map(NodeLedger::name)
    }

    pub(super) fn node(&self, name: &str) -> Option<&Arc<Node>> {
        self.nodes.get(name)
    }

    pub(super) fn ledger(&self, node: &str) -> Option<&NodeLedger> {
        self.fleet.find(node)
    }

    /// Fails when a node we cannot read holds this UID: acting elsewhere could reserve twice.
    pub(super) fn check_readable(&self, uid: &str) -> Result<(), Error> {
        match self
            .unreadable
            .values()
            .find(|u| u.uids.iter().any(|held| held == uid))
        {
            Some(unreadable) => Err(unreadable.error()),
            None => Ok(()),
        }
    }

    /// Fails when this node cannot be read.
    pub(super) fn check_node_readable(&self, node: &str) -> Result<(), Error> {
        match self.unreadable.get(node) {
            Some(unreadable) => Err(unreadable.error()),
            None => Ok(()),
        }
    }

    /// Applies one edit to its node's ledger (holds kept), and the UID index with it.
    pub(super) fn apply(&mut self, edit: &Edit) -> Result<(), Error> {
        let unknown = || Error::UnreadableNode {
            node: edit.node.clone(),
            reason: "not in the node cache".into(),
        };
        let position = self.fleet.position(&edit.node).ok_or_else(unknown)?;
        let applied = self
            .fleet
            .apply(position, edit)
            .map_err(|e| Error::UnreadableNode {
                node: edit.node.clone(),
                reason: e.to_string(),
            })?;
        if !applied {
            return Err(unknown());
        }
        if self.edited.last() != Some(&position) {
            self.edited.push(position);
        }
        let uid = UidIndex::hash(&edit.uid);
        // NB: another UID with the same hash may still be on this node: the index keeps the
        // position while any entry there hashes alike, so no UID's entry is ever lost to it.
        let still_hashed_here = || {
            self.fleet
                .ledgers()
                .get(position)
                .is_some_and(|ledger| ledger.holds_uid_hash(uid))
        };
        if edit.entry.is_some() || still_hashed_here() {
            self.holders.insert(uid, position);
        } else {
            self.holders.remove(uid, position);
        }
        match &edit.entry {
            Some(entry) if entry.replicas.is_some() => self.spread.insert(uid, position),
            _ => self.spread.remove(uid, position),
        }
        Ok(())
    }

    /// The node as it is to be written: its status recomputed from the ledger's entries (holds
    /// are not entries, so they are never written). `None` for a node without a readable ledger.
    /// (The engine sends [`Self::to_patch`]; the in-process bench and tests take the node whole.)
    #[cfg(any(test, feature = "testing"))]
    pub(super) fn to_write(&self, name: &str, now: &Time) -> Option<Node> {
        let (object, ledger) = (self.node(name)?, self.ledger(name)?);
        // Not a clone of the whole object: its old status would be dropped at once.
        let mut updated = Node {
            metadata: object.metadata.clone(),
            spec: object.spec.clone(),
            status: Some(object.status_for(ledger.entries(), ledger.view().capacity, now)),
        };
        updated.metadata.managed_fields = None;
        Some(updated)
    }

    /// The node's status write: a JSON patch against the copy the batch was decided from, only
    /// what changed, guarded by that copy's resourceVersion ([`patch::status_ops`]). `None` for
    /// a node without a readable ledger; an error for a copy without a resourceVersion (never
    /// one the API served), which is never written unguarded.
    pub(super) fn to_patch(
        &self,
        name: &str,
        now: &Time,
    ) -> Option<Result<json_patch::Patch, String>> {
        let (object, ledger) = (self.node(name)?, self.ledger(name)?);
        let Some(version) = object.metadata.resource_version.as_deref() else {
            return Some(Err(format!(
                "node {name} has no resourceVersion to guard its write"
            )));
        };
        let to = object.status_for(ledger.entries(), ledger.view().capacity, now);
        // The entries stay typed: only the ones written are encoded. The other fields are named
        // (a field added to NodeStatus fails to compile here) so the entries are not copied.
        let fields = |status: &NodeStatus| {
            let NodeStatus {
                allocations: _,
                allocated,
                free,
                tenants,
                conditions,
                unreadable,
            } = status;
            serde_json::to_value(NodeStatus {
                allocations: Vec::new(),
                allocated: *allocated,
                free: *free,
                tenants: *tenants,
                conditions: conditions.clone(),
                unreadable: unreadable.clone(),
            })
        };
        let ops = (|| {
            let from_fields = object.status.as_ref().map(fields).transpose()?;
            let from = object
                .status
                .as_ref()
                .zip(from_fields.as_ref())
                .map(|(status, fields)| patch::Status {
                    fields,
                    entries: &status.allocations,
                });
            let to_fields = fields(&to)?;
            let to = patch::Status {
                fields: &to_fields,
                entries: &to.allocations,
            };
            patch::status_ops(version, from, to, "allocations", |e| Some(&*e.uid))
        })()
        .map_err(|e: serde_json::Error| e.to_string());
        Some(ops)
    }

    /// Whether this node's written status differs from what its entries say.
    pub(super) fn is_stale(&self, name: &str, now: &Time) -> bool {
        match (self.node(name), self.ledger(name)) {
            (Some(object), Some(ledger)) => {
                let wanted = object.status_for(ledger.entries(), ledger.view().capacity, now);
                object.status.as_ref() != Some(&wanted)
            }
            _ => false,
        }
    }
}

fn unreadable_node(node: &Node, reason: String) -> Unreadable {
    Unreadable {
        node: node.name_any(),
        reason,
        uids: node
            .allocations()
            .iter()
            .map(|a| a.uid.to_string())
            .collect(),
    }
}

/// Whether two copies of a node are the same version: the same object, or the same
/// resourceVersion (a copy without one is never taken for the same).
fn same_version(old: &Arc<Node>, new: &Arc<Node>) -> bool {
    Arc::ptr_eq(old, new)
        || new.metadata.resource_version.is_some()
            && old.metadata.resource_version == new.metadata.resource_version
}

/// Positions by a hash of a UID: one position for almost every UID, two while it moves.
/// Equal hashes of different UIDs are possible; callers check.
///
/// A hash held at one position is in `one`, at two or more in `many`, never in both: the
/// usual entry is 16 bytes (at 100,000 tenants the table is half the size of one holding a
/// position list per hash).
#[derive(Debug, Default)]
struct UidIndex {
    /// Keyed by the hash itself, mixed once more by the fleet's fast hasher (no SipHash).
    one: HashMap<u64, usize, BuildHasherDefault<placement::NameHasher>>,
    /// Hashes held at two positions or more: their positions, sorted, each once.
    many: HashMap<u64, Vec<usize>, BuildHasherDefault<placement::NameHasher>>,
}

impl UidIndex {
    /// See [`placement::uid_hash`]: a collision only adds a position to check.
    fn hash(key: &str) -> u64 {
        placement::uid_hash(key)
    }

    fn positions(&self, hash: u64) -> &[usize] {
        match self.one.get(&hash) {
            Some(one) => std::slice::from_ref(one),
            None => self.many.get(&hash).map_or(&[], Vec::as_slice),
        }
    }

    /// Hashes held at two positions or more.
    fn shared(&self) -> usize {
        self.many.len()
    }

    /// Adds a position (once). Nothing is allocated unless the hash is held at two or more.
    fn insert(&mut self, hash: u64, position: usize) {
        if let Some(many) = self.many.get_mut(&hash) {
            if let Err(index) = many.binary_search(&position) {
                many.insert(index, position);
            }
            return;
        }
        match self.one.get(&hash).copied() {
            None => {
                self.one.insert(hash, position);
            }
            Some(only) if only == position => {}
            Some(only) => {
                self.one.remove(&hash);
                self.many
                    .insert(hash, vec![only.min(position), only.max(position)]);
            }
        }
    }

    fn remove(&mut self, hash: u64, position: usize) {
        if self.one.get(&hash) == Some(&position) {
            self.one.remove(&hash);
            return;
        }
        let Some(many) = self.many.get_mut(&hash) else {
            return;
        };
        if let Ok(index) = many.binary_search(&position) {
            many.remove(index);
        }
        if let [only] = many.as_slice() {
            let only = *only;
            self.many.remove(&hash);
            self.one.insert(hash, only);
        }
    }
}

fn name_of(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::api::NodeState;
    use crate::testing::node;
    use proptest::prelude::*;

    #[test]
    fn the_uid_index_finds_every_position_of_a_key_and_counts_shared_keys() {
        let (a, b) = (UidIndex::hash("a"), UidIndex::hash("b"));
        let mut index = UidIndex::default();
        for (hash, position) in [(a, 3), (b, 1), (a, 0), (a, 0)] {
            index.insert(hash, position);
        }
        assert_eq!(index.positions(a), [0, 3]);
        assert_eq!(index.shared(), 1);
        index.remove(a, 0);
        index.insert(b, 7);
        index.insert(b, 7);
        assert_eq!(index.positions(a), [3]);
        assert_eq!(index.positions(b), [1, 7]);
        assert_eq!(index.shared(), 1);
        index.remove(b, 1);
        index.remove(b, 9);
        assert_eq!(index.shared(), 0);
        assert!(index.positions(UidIndex::hash("c")).is_empty());
    }

    #[test]
    fn a_node_listing_a_uid_twice_holds_it_once_and_moves_nothing() {
        let view = View::build(vec![Arc::new(
            node("n1")
                .capacity(8, 8, 8)
                .holding("acme", (1, 1, 1))
                .holding("acme", (1, 1, 1))
                .build(),
        )]);
        assert_eq!(view.holders_of("uid-acme"), [0]);
        assert_eq!(view.moves_in_flight(), 0);
    }

    /// What a view says, by name: equal for two views exactly when every answer they give is.
    type Summary = (
        Vec<NodeLedger>,
        BTreeMap<String, Unreadable>,
        BTreeMap<String, Option<String>>,
        BTreeMap<String, Vec<String>>,
        usize,
    );

    fn summary(view: &View) -> Summary {
        let nodes = view
            .nodes
            .iter()
            .map(|(name, node)| (name.clone(), node.metadata.resource_version.clone()))
            .collect();
        let holders = UIDS
            .iter()
            .map(|uid| {
                let mut at: Vec<String> = view
                    .holders_of(uid)
                    .into_iter()
                    .filter_map(|i| view.name_at(i).map(str::to_owned))
                    .collect();
                at.sort();
                ((*uid).to_owned(), at)
            })
            .collect();
        (
            view.fleet.ledgers().to_vec(),
            view.unreadable.clone(),
            nodes,
            holders,
            view.moves_in_flight(),
        )
    }

    const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];
    /// Tenants, as the node fixture names them (its UIDs are `uid-` and the name).
    const TENANTS: [&str; 4] = ["u0", "u1", "u2", "u3"];
    const UIDS: [&str; 4] = ["uid-u0", "uid-u1", "uid-u2", "uid-u3"];

    /// A node event, or a batch that edits and holds room and whose writes all fail.
    #[derive(Clone, Debug)]
    enum Event {
        /// The node (created or changed): state, capacity, entries (UID index, amount); an
        /// amount of -1 makes it unreadable.
        Put(usize, u8, i64, Vec<(usize, i64)>),
        Delete(usize),
        /// A batch: reserve a UID on a node, hold room on another; its write fails or is
        /// confirmed.
        Batch(usize, usize, usize, bool),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            4 => (0..NAMES.len(), 0u8..4, 0i64..16, proptest::collection::vec((0..UIDS.len(), -1i64..4), 0..4))
                .prop_map(|(n, s, c, e)| Event::Put(n, s, c, e)),
            1 => (0..NAMES.len()).prop_map(Event::Delete),
            3 => (0..NAMES.len(), 0..NAMES.len(), 0..UIDS.len(), any::<bool>())
                .prop_map(|(n, h, u, ok)| Event::Batch(n, h, u, ok)),
        ]
    }

    proptest! {
        /// After any sequence of node events (created, changed, turned unreadable and back,
        /// deleted) and of batches whose writes failed, a view kept up to date by `sync` (every
        /// node) or by `sync_changed` (the nodes named changed) is the view a full rebuild gives.
        #[test]
        fn an_incremental_view_equals_a_full_rebuild(events in proptest::collection::vec(event(), 1..40)) {
            let mut store: BTreeMap<&str, Arc<Node>> = BTreeMap::new();
            let mut version = 0u64;
            let mut view = View::default();
            let mut by_names = View::default();
            for event in events {
                let mut changed: Vec<&str> = Vec::new();
                match event {
                    Event::Put(n, state, capacity, entries) => {
                        version = version.wrapping_add(1);
                        let state = [NodeState::Online, NodeState::Cordoned, NodeState::Offline, NodeState::Draining][usize::from(state)];
                        let built = entries.into_iter().fold(
                            node(NAMES[n]).capacity(capacity, capacity, capacity).state(state),
                            |b, (tenant, amount)| b.holding(TENANTS[tenant], (amount, 1, 1)),
                        );
                        store.insert(NAMES[n], Arc::new(built.resource_version(version).build()));
                        changed.push(NAMES[n]);
                    }
                    Event::Delete(n) => {
                        store.remove(NAMES[n]);
                        changed.push(NAMES[n]);
                    }
                    Event::Batch(n, h, u, write_ok) => {
                        let edit = Edit {
                            kind: placement::EditKind::Reserve,
                            node: NAMES[n].to_owned(),
                            uid: UIDS[u].to_owned(),
                            entry: Some(placement::Entry {
                                uid: UIDS[u].into(),
                                tenant: UIDS[u].into(),
                                resources: placement::Resources::new(1, 1, 1),
                                // Odd UIDs as spread replicas: not moves in flight.
                                replicas: (u % 2 == 1).then_some(1),
                            }),
                        };
                        for view in [&mut view, &mut by_names] {
                            let _ = view.apply(&edit);
                            let hold = placement::Entry { uid: "w".into(), tenant: "w".into(), resources: placement::Resources::new(1, 0, 0), replicas: None };
                            let _ = placement::FleetMut::hold(&mut view.fleet, NAMES[h], hold);
                            view.end_batch();
                        }
                        let now = Time(k8s_openapi::jiff::Timestamp::now());
                        // The patch sent turns the copy decided from into the node written.
                        if let (Some(Ok(patch)), Some(from), Some(whole)) = (
                            view.to_patch(NAMES[n], &now),
                            view.node(NAMES[n]),
                            view.to_write(NAMES[n], &now),
                        ) {
                            let mut object = serde_json::to_value(from.as_ref()).unwrap();
                            json_patch::patch(&mut object, &patch).unwrap();
                            prop_assert_eq!(&object["status"], &serde_json::to_value(&whole).unwrap()["status"]);
                        }
                        if write_ok && let Some(mut written) = view.to_write(NAMES[n], &now) {
                            version = version.wrapping_add(1);
                            written.metadata.resource_version = Some(version.to_string());
                            let written = Arc::new(written);
                            store.insert(NAMES[n], written.clone());
                            changed.push(NAMES[n]);
                            view.confirm(written.clone());
                            by_names.confirm(written);
                        }
                    }
                }
                let snapshot: Vec<Arc<Node>> = store.values().cloned().collect();
                view.sync(snapshot.clone());
                let rebuilt = summary(&View::build(snapshot.clone()));
                prop_assert_eq!(summary(&view), rebuilt.clone());
                let names: Vec<String> = changed
                    .into_iter()
                    .map(str::to_owned)
                    .chain(by_names.dirty().cloned())
                    .collect();
                let named = names.into_iter().map(|name| {
                    let node = store.get(name.as_str()).cloned();
                    (name, node)
                });
                if !by_names.sync_changed(named) {
                    by_names.sync(snapshot);
                }
                prop_assert_eq!(summary(&by_names), rebuilt);
            }
        }
    }
}
