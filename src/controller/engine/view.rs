//! The nodes as the engine sees them for one batch, converted for the placement crate.
//!
//! Rules enforced here (docs/design.md, "The placement engine"):
//! - the view is rebuilt for every batch from objects the server confirmed (the watch cache
//!   overlaid with what the engine wrote or re-read), never ahead of the server;
//! - a node whose allocations cannot be read is [`Unreadable`]: it has no ledger, so nothing can
//!   be written to it, and a tenant it names is not decided elsewhere (that could reserve twice);
//! - the UID index follows every edit applied to the view, so a decision finds its tenant's
//!   entries without scanning the fleet; a hash collision only adds a position the plan checks.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use placement::{Edit, NodeLedger};

use crate::api::Node;
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

/// The nodes of one batch, their ledgers (with the batch's edits and holds applied) and indexes.
#[derive(Debug)]
pub(super) struct View {
    /// The node objects, and their positions by name.
    nodes: Vec<Arc<Node>>,
    node_position: HashIndex,
    pub(super) ledgers: Vec<NodeLedger>,
    /// Positions in `ledgers` by node name.
    position: HashIndex,
    /// Positions in `ledgers` holding an entry of each UID.
    holders: HashIndex,
    unreadable: Vec<Unreadable>,
}

impl View {
    pub(super) fn build(nodes: Vec<Arc<Node>>) -> View {
        let mut ledgers = Vec::with_capacity(nodes.len());
        let mut unreadable = Vec::new();
        for node in &nodes {
            match node.ledger() {
                Ok(ledger) => ledgers.push(ledger),
                Err(reason) => unreadable.push(Unreadable {
                    node: node.name_any(),
                    reason,
                    uids: node.allocations().iter().map(|a| a.uid.clone()).collect(),
                }),
            }
        }
        let node_position = HashIndex::build(
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (HashIndex::hash(name_of(n)), i)),
        );
        let position = HashIndex::build(
            ledgers
                .iter()
                .enumerate()
                .map(|(i, l)| (HashIndex::hash(l.name()), i)),
        );
        let holders = HashIndex::build(ledgers.iter().enumerate().flat_map(|(i, l)| {
            l.entries()
                .iter()
                .map(move |e| (HashIndex::hash(&e.uid), i))
        }));
        View {
            nodes,
            node_position,
            ledgers,
            position,
            holders,
            unreadable,
        }
    }

    /// Positions that may hold this UID (a hash collision adds a position that does not; the
    /// plan checks each).
    pub(super) fn holders_of(&self, uid: &str) -> Vec<usize> {
        self.holders.positions(HashIndex::hash(uid)).collect()
    }

    /// The position of the ledger holding this UID's entry, if any.
    pub(super) fn held_at(&self, uid: &str) -> Option<usize> {
        self.holders.positions(HashIndex::hash(uid)).find(|&i| {
            self.ledgers
                .get(i)
                .is_some_and(|l| l.entry_of(uid).is_some())
        })
    }

    /// How many tenants are held on two nodes or more: moves in flight (and the rare duplicate).
    /// A gate on starting moves, not a safety rule, so a hash collision may miscount by one.
    pub(super) fn moves_in_flight(&self) -> usize {
        self.holders
            .0
            .chunk_by(|a, b| a.0 == b.0)
            .filter(|group| group.len() > 1)
            .count()
    }

    /// The name of the node at a ledger position.
    pub(super) fn name_at(&self, position: usize) -> Option<&str> {
        self.ledgers.get(position).map(NodeLedger::name)
    }

    pub(super) fn node(&self, name: &str) -> Option<&Arc<Node>> {
        self.node_position
            .positions(HashIndex::hash(name))
            .filter_map(|i| self.nodes.get(i))
            .find(|n| name_of(n) == name)
    }

    fn position_of(&self, node: &str) -> Option<usize> {
        self.position
            .positions(HashIndex::hash(node))
            .find(|&i| self.ledgers.get(i).is_some_and(|l| l.name() == node))
    }

    pub(super) fn ledger(&self, node: &str) -> Option<&NodeLedger> {
        self.position_of(node).and_then(|i| self.ledgers.get(i))
    }

    /// Fails when a node we cannot read holds this UID: acting elsewhere could reserve twice.
    pub(super) fn check_readable(&self, uid: &str) -> Result<(), Error> {
        match self
            .unreadable
            .iter()
            .find(|u| u.uids.iter().any(|held| held == uid))
        {
            Some(unreadable) => Err(unreadable.error()),
            None => Ok(()),
        }
    }

    /// Fails when this node cannot be read.
    pub(super) fn check_node_readable(&self, node: &str) -> Result<(), Error> {
        match self.unreadable.iter().find(|u| u.node == node) {
            Some(unreadable) => Err(unreadable.error()),
            None => Ok(()),
        }
    }

    /// Applies one edit to its node's ledger (holds kept), and the UID index with it.
    pub(super) fn apply(&mut self, edit: &Edit) -> Result<(), Error> {
        let position = self
            .position_of(&edit.node)
            .ok_or_else(|| Error::UnreadableNode {
                node: edit.node.clone(),
                reason: "not in the node cache".into(),
            })?;
        let edited = self.ledgers[position]
            .edited(edit)
            .map_err(|e| Error::UnreadableNode {
                node: edit.node.clone(),
                reason: e.to_string(),
            })?;
        self.ledgers[position] = edited;
        let uid = HashIndex::hash(&edit.uid);
        self.holders.remove(uid, position);
        // NB: another UID with the same hash may still be on this node: the index keeps the
        // position while any entry there hashes alike, so no UID's entry is ever lost to it.
        let still_hashed_here = || {
            self.ledgers[position]
                .entries()
                .iter()
                .any(|e| HashIndex::hash(&e.uid) == uid)
        };
        if edit.entry.is_some() || still_hashed_here() {
            self.holders.insert(uid, position);
        }
        Ok(())
    }

    /// The node as it is to be written: its status recomputed from the ledger's entries (holds
    /// are not entries, so they are never written). `None` for a node without a readable ledger.
    pub(super) fn to_write(&self, name: &str, now: &Time) -> Option<Node> {
        let (object, ledger) = (self.node(name)?, self.ledger(name)?);
        let mut updated = Node::clone(object);
        updated.status = Some(object.status_for(ledger.entries(), ledger.view().capacity, now));
        updated.metadata.managed_fields = None;
        Some(updated)
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

/// Positions by a hash of a key, sorted: one allocation however many keys, since the view is
/// rebuilt for every batch. Equal hashes of different keys are possible; callers check.
#[derive(Debug)]
struct HashIndex(Vec<(u64, usize)>);

impl HashIndex {
    fn hash(key: &str) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        hasher.finish()
    }

    fn build(pairs: impl Iterator<Item = (u64, usize)>) -> HashIndex {
        let mut pairs: Vec<(u64, usize)> = pairs.collect();
        pairs.sort_unstable();
        // One pair per (key, position), as `insert` keeps it: a node listing a UID twice holds
        // it at one position, not two (else it would count as a move in flight).
        pairs.dedup();
        HashIndex(pairs)
    }

    fn positions(&self, hash: u64) -> impl Iterator<Item = usize> + '_ {
        let start = self.0.partition_point(|&(h, _)| h < hash);
        self.0
            .get(start..)
            .unwrap_or_default()
            .iter()
            .take_while(move |&&(h, _)| h == hash)
            .map(|&(_, i)| i)
    }

    fn insert(&mut self, hash: u64, position: usize) {
        if let Err(at) = self.0.binary_search(&(hash, position)) {
            self.0.insert(at, (hash, position));
        }
    }

    fn remove(&mut self, hash: u64, position: usize) {
        if let Ok(at) = self.0.binary_search(&(hash, position)) {
            self.0.remove(at);
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

    #[test]
    fn the_hash_index_finds_every_position_of_a_key_and_follows_edits() {
        let (a, b) = (HashIndex::hash("a"), HashIndex::hash("b"));
        let mut index = HashIndex::build([(a, 3), (b, 1), (a, 0)].into_iter());
        assert_eq!(index.positions(a).collect::<Vec<_>>(), [0, 3]);
        index.remove(a, 0);
        index.insert(b, 7);
        index.insert(b, 7);
        assert_eq!(index.positions(a).collect::<Vec<_>>(), [3]);
        assert_eq!(index.positions(b).collect::<Vec<_>>(), [1, 7]);
        assert_eq!(index.positions(HashIndex::hash("c")).count(), 0);
    }

    #[test]
    fn a_node_listing_a_uid_twice_holds_it_once_and_moves_nothing() {
        let (a, b) = (HashIndex::hash("a"), HashIndex::hash("b"));
        let index = HashIndex::build([(a, 2), (a, 2), (b, 1)].into_iter());
        assert_eq!(index.positions(a).collect::<Vec<_>>(), [2]);
        let view = View::build(vec![Arc::new(
            crate::testing::node("n1")
                .capacity(8, 8, 8)
                .holding("acme", (1, 1, 1))
                .holding("acme", (1, 1, 1))
                .build(),
        )]);
        assert_eq!(view.moves_in_flight(), 0);
    }
}
