//! The allocation ledger of each node, the one edit of it a plan names, and the words planning
//! speaks in: what a tenant wants, and the next step toward it (plans are made in plan.rs).
//!
//! ```text
//!   NodeLedger: name, state, capacity, overcommit, labels, entries (one per tenant UID), holds
//!        ─▶ written (the entries), allocated (entries + holds), both recomputed, checked
//!   Edit(node, uid → entry | none) ─apply─▶ the same node with that UID's entry set or removed
//!   TenantWants (uid, footprint, suspend, status node, recorded move, node selector)
//!        ─planning─▶ Plan: Edit | Holding | ResizeBlocked | Pending | Migrating | MoveBlocked …
//! ```
//!
//! Rules enforced here (docs/design.md, "The allocation protocol"):
//! - a node's entries are the only record of reservations, keyed by tenant UID; `allocated` is
//!   always recomputed from them (checked), never kept as a running counter;
//! - an entry sum past the largest integer the API can store is an error, never a wrap: such a
//!   ledger is not built, and an edit or hold that would reach it changes nothing;
//! - room held for older waiting tenants (holds) counts as taken, and is kept apart from the
//!   entries, so it can never be written;
//! - placement sees a node through its view, whose capacity is the effective capacity
//!   (capacity × its overcommit ratio, 1.0 unless [`NodeLedger::with_overcommit`] says
//!   otherwise), so the view's free room and eligibility use it;
//! - an edit of a UID replaces, adds or removes its entries in place, and leaves the others
//!   untouched;
//! - an entry's names are shared (`Arc<str>`): [`NodeLedger::share_names`] swaps an entry's
//!   strings only for equal texts, so it changes which allocation holds them and nothing else.

use std::sync::Arc;

use crate::fit::{NoFit, NodeState, NodeView, Shortfall};
use crate::hash::uid_hash;
use crate::overcommit::Overcommit;
use crate::resources::Resources;
use crate::selector::{self, Labels};
use crate::spread::SpreadNoFit;

/// One reservation on a node.
///
/// Its strings are shared (`Arc<str>`): a ledger built from a Node's allocations points at the
/// Node's own strings rather than copying them (at 100,000 tenants the copies were a tenth of
/// the controller's heap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The tenant's UID: a tenant re-created under the same name is a new tenant.
    pub uid: Arc<str>,
    /// `namespace/name`, for people reading the node.
    pub tenant: Arc<str>,
    pub resources: Resources,
    /// How many of a spread tenant's replicas this entry holds; `None` for a tenant not spread
    /// (its one entry holds every replica).
    pub replicas: Option<u32>,
}

/// A node's reservations, checked: the sum of its entries fits the integer range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLedger {
    name: String,
    state: NodeState,
    /// The physical capacity, as the Node's spec gives it.
    capacity: Resources,
    overcommit: Overcommit,
    /// The node's labels, which a tenant's node selector is matched against (shared: ledgers
    /// are cloned per batch).
    labels: Arc<Labels>,
    /// `capacity` × `overcommit`: what placement may fill.
    effective: Resources,
    /// The reservations, as written on the node.
    entries: Vec<Entry>,
    /// [`uid_hash`] of each entry's UID, in the same order: a lookup by UID compares these
    /// first (a node holds tens of entries; a decision looks a UID up several times).
    uid_hashes: Vec<u64>,
    /// Room held for older waiting tenants while a batch is decided (by the queue, queue.rs):
    /// counted as taken, kept apart from `entries`, so it can never be written.
    holds: Vec<Entry>,
    /// The sum of `entries`.
    written: Resources,
    /// The sum of `entries` and `holds`.
    allocated: Resources,
    /// The smallest and the largest entry per dimension (each from any entry; zero with none):
    /// what one entry moved frees at least and at most, so make-room passes over a node
    /// without reading its entries.
    smallest: Resources,
    largest: Resources,
}

/// Why a node's recorded reservations cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerError {
    /// The entries (and holds) sum past the largest integer the API can store.
    TotalOverflows { node: String },
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerError::TotalOverflows { node } => write!(
                f,
                "the allocations recorded on node {node} add up past the largest storable integer"
            ),
        }
    }
}

impl std::error::Error for LedgerError {}

impl NodeLedger {
    pub fn new(
        name: impl Into<String>,
        state: NodeState,
        capacity: Resources,
        entries: Vec<Entry>,
    ) -> Result<Self, LedgerError> {
        let name = name.into();
        let Some(allocated) = Resources::checked_sum(entries.iter().map(|e| &e.resources)) else {
            return Err(LedgerError::TotalOverflows { node: name });
        };
        Ok(NodeLedger {
            name,
            state,
            capacity,
            overcommit: Overcommit::NONE,
            labels: Arc::default(),
            effective: capacity,
            uid_hashes: entries.iter().map(|e| uid_hash(&e.uid)).collect(),
            smallest: least(&entries),
            largest: most_of(&entries),
            entries,
            holds: Vec::new(),
            written: allocated,
            allocated,
        })
    }

    /// The same ledger under an overcommit profile: its view's capacity, its free room, its
    /// eligibility and its resize room all use `capacity × ratio` from then on.
    #[must_use]
    pub fn with_overcommit(mut self, overcommit: Overcommit) -> Self {
        self.overcommit = overcommit;
        self.effective = overcommit.effective(self.capacity);
        self
    }

    /// The same ledger with these labels (none unless set).
    #[must_use]
    pub fn with_labels(mut self, labels: Arc<Labels>) -> Self {
        self.labels = labels;
        self
    }

    /// The node's labels (none unless set by [`NodeLedger::with_labels`]).
    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    /// Whether the node's labels include every pair of `selector` (`None` matches any node).
    pub fn matches(&self, selector: Option<&Labels>) -> bool {
        selector::matches(selector, &self.labels)
    }

    /// The overcommit profile (1.0 everywhere unless set by [`NodeLedger::with_overcommit`]).
    pub fn overcommit(&self) -> Overcommit {
        self.overcommit
    }

    /// The physical capacity, as given to [`NodeLedger::new`].
    pub fn capacity(&self) -> Resources {
        self.capacity
    }

    /// What placement may fill: the capacity × the overcommit ratio, rounded down.
    pub fn effective_capacity(&self) -> Resources {
        self.effective
    }

    pub fn state(&self) -> NodeState {
        self.state
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The reservations as written on the node (never the holds).
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Room held for older waiting tenants, each under the waiting tenant's UID.
    pub fn holds(&self) -> &[Entry] {
        &self.holds
    }

    /// The sum of the entries and the holds: what placement counts as taken.
    pub fn allocated(&self) -> Resources {
        self.allocated
    }

    /// The sum of the entries alone: what the node's status says is reserved.
    pub fn written(&self) -> Resources {
        self.written
    }

    /// The smallest entry per dimension, each from any entry (zero with none).
    pub fn smallest_entry(&self) -> Resources {
        self.smallest
    }

    /// The largest entry per dimension, each from any entry (zero with none).
    pub fn largest_entry(&self) -> Resources {
        self.largest
    }

    /// The ledger with room held for a waiting tenant. Fails when the sum would overflow.
    pub fn hold(&mut self, hold: Entry) -> Result<(), LedgerError> {
        self.allocated = self.allocated.checked_add(hold.resources).ok_or_else(|| {
            LedgerError::TotalOverflows {
                node: self.name.clone(),
            }
        })?;
        self.holds.push(hold);
        Ok(())
    }

    /// Drops the room held for this tenant UID. False when none was held for it.
    pub fn unhold(&mut self, uid: &str) -> bool {
        let before = self.holds.len();
        self.holds.retain(|h| *h.uid != *uid);
        if self.holds.len() == before {
            return false;
        }
        // Less than before, which was in range.
        self.allocated = Resources::checked_sum(
            std::iter::once(&self.written).chain(self.holds.iter().map(|h| &h.resources)),
        )
        .unwrap_or(self.allocated);
        true
    }

    /// The ledger after an edit of its entries; holds, overcommit and labels are kept. Fails when the
    /// sum would overflow.
    pub fn edited(&self, edit: &Edit) -> Result<NodeLedger, LedgerError> {
        let mut edited = self.clone();
        edited.apply(edit)?;
        Ok(edited)
    }

    /// Applies an edit of its entries in place, as [`edited`](Self::edited) does (holds,
    /// overcommit and labels kept), without copying the other entries. Fails, changing
    /// nothing, when the sum would overflow.
    pub fn apply(&mut self, edit: &Edit) -> Result<(), LedgerError> {
        let overflow = || LedgerError::TotalOverflows {
            node: self.name.clone(),
        };
        // Where the UID's first entry is, whether it has more (a node may list a UID twice; all
        // of them go), and what they sum to: the other entries sum to `written` less that, so
        // the pass compares hashes and adds nothing else up.
        let (mut first, mut more) = (None, false);
        let mut matched = Resources::ZERO;
        let hash = uid_hash(&edit.uid);
        for (i, &entry_hash) in self.uid_hashes.iter().enumerate() {
            if entry_hash != hash {
                continue;
            }
            let Some(entry) = self.entries.get(i).filter(|e| *e.uid == *edit.uid) else {
                continue;
            };
            more |= first.is_some();
            first.get_or_insert(i);
            // Part of `written`, which fits: never past the limit.
            matched = matched.checked_add(entry.resources).ok_or_else(overflow)?;
        }
        let others = self.written.saturating_sub(matched);
        let written = match &edit.entry {
            Some(new) => others.checked_add(new.resources).ok_or_else(overflow)?,
            None => others,
        };
        let allocated = Resources::checked_sum(
            std::iter::once(&written).chain(self.holds.iter().map(|h| &h.resources)),
        )
        .ok_or_else(overflow)?;
        match (first, &edit.entry) {
            // The usual cases: replaced in place, or added at the end.
            (Some(at), Some(new)) if !more => {
                if let Some(slot) = self.entries.get_mut(at) {
                    slot.clone_from(new);
                }
            }
            (None, Some(new)) => {
                self.entries.push(new.clone());
                self.uid_hashes.push(hash);
            }
            _ => {
                edit_entries(&mut self.entries, edit);
                self.uid_hashes = self.entries.iter().map(|e| uid_hash(&e.uid)).collect();
            }
        }
        // A node holds tens of entries: a pass is cheaper than keeping the order.
        self.smallest = least(&self.entries);
        self.largest = most_of(&self.entries);
        self.written = written;
        self.allocated = allocated;
        Ok(())
    }

    /// Gives back the room its vectors grew into beyond what they hold: they grow by doubling
    /// as a batch adds entries, and a settled fleet keeps its ledgers for long (at 10,000 nodes
    /// that room was a third of them).
    pub fn shrink_to_fit(&mut self) {
        self.entries.shrink_to_fit();
        self.uid_hashes.shrink_to_fit();
        self.holds.shrink_to_fit();
    }

    /// Takes the strings of equal entries from `names` (UID and tenant of each entry in the
    /// same order, as a Node's allocations written from this ledger list them), so that the
    /// ledger and the Node it was written to hold each name once. An entry whose UID or tenant
    /// differs keeps its own: nothing changes but which allocation holds the text.
    pub fn share_names<'a>(
        &mut self,
        names: impl IntoIterator<Item = (&'a Arc<str>, &'a Arc<str>)>,
    ) {
        for (entry, (uid, tenant)) in self.entries.iter_mut().zip(names) {
            if entry.uid == *uid && entry.tenant == *tenant {
                entry.uid = Arc::clone(uid);
                entry.tenant = Arc::clone(tenant);
            }
        }
    }

    /// Drops the room held for waiting tenants.
    pub fn clear_holds(&mut self) {
        self.holds.clear();
        self.allocated = self.written;
    }

    /// What placement sees: the capacity in the view is the effective capacity.
    pub fn view(&self) -> NodeView<'_> {
        NodeView {
            name: &self.name,
            state: self.state,
            capacity: self.effective,
            allocated: self.allocated,
        }
    }

    /// Whether an entry's UID has this [`uid_hash`] (another UID may share it).
    pub fn holds_uid_hash(&self, hash: u64) -> bool {
        self.uid_hashes.contains(&hash)
    }

    /// The entry held by this tenant UID, if any.
    pub fn entry_of(&self, uid: &str) -> Option<&Entry> {
        let hash = uid_hash(uid);
        self.entries
            .iter()
            .zip(&self.uid_hashes)
            .find(|(entry, entry_hash)| **entry_hash == hash && *entry.uid == *uid)
            .map(|(entry, _)| entry)
    }

    /// The entries after an edit: the UID's entry replaced, added or removed, others untouched.
    pub fn edited_entries(&self, edit: &Edit) -> Vec<Entry> {
        let mut entries = self.entries.clone();
        edit_entries(&mut entries, edit);
        entries
    }
}

/// The smallest entry per dimension (zero with none).
fn least(entries: &[Entry]) -> Resources {
    per_dimension(entries, u64::min)
}

/// The largest entry per dimension (zero with none).
fn most_of(entries: &[Entry]) -> Resources {
    per_dimension(entries, u64::max)
}

/// The entries' amounts of each dimension folded by `pick` (zero with none).
fn per_dimension(entries: &[Entry], pick: fn(u64, u64) -> u64) -> Resources {
    Resources::from_fn(|d| {
        entries
            .iter()
            .map(|e| e.resources.get(d))
            .reduce(pick)
            .unwrap_or(0)
    })
}

/// Replaces, adds or removes the edited UID's entries in place, the others untouched.
fn edit_entries(entries: &mut Vec<Entry>, edit: &Edit) {
    let at = entries.iter().position(|e| *e.uid == *edit.uid);
    entries.retain(|e| *e.uid != *edit.uid);
    if let Some(new) = &edit.entry {
        // Keep the entry where it was, so a resize does not reorder the node's list.
        let at = at.unwrap_or(entries.len()).min(entries.len());
        entries.insert(at, new.clone());
    }
}

/// What a tenant asks for, as planning needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TenantWants<'a> {
    pub uid: &'a str,
    /// `namespace/name`
    pub tenant: &'a str,
    /// Per-replica resources × replicas, already checked.
    pub footprint: Resources,
    pub suspend: bool,
    /// The node the tenant's status names, which wins when duplicates are found.
    pub status_node: Option<&'a str>,
    /// The move its status records, if any.
    pub migration: Option<Migration<'a>>,
    /// A move asked of it to make room for a waiting tenant (`placement::make_room`): off `from`
    /// (which stays Online) to `to`. While asked, the move is made and finished as a move off a
    /// draining node is; once no longer asked, a move in flight is aborted.
    pub asked: Option<Migration<'a>>,
    /// Its node selector: only nodes carrying all these labels may take it (`None` or empty:
    /// any node). An entry it already holds stays whatever its node's labels become.
    pub node_selector: Option<&'a Labels>,
}

/// A move a tenant's status records: from the node it leaves to the node it goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration<'a> {
    pub from: &'a str,
    pub to: &'a str,
}

/// Why an edit is made; it names the event and the log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EditKind {
    Reserve,
    /// The entry a tenant's status names was missing from its node and is written back there.
    Restore,
    Resize,
    DropDuplicate,
    Release,
    /// The target entry of a move off a draining node, or of one asked to make room (make).
    Migrate,
    /// The source entry of a recorded move, released once the target holds the tenant (break).
    FinishMigration,
    /// The target entry of a recorded move that cannot finish (the drain was cancelled, or the
    /// target stopped taking tenants): the tenant stays on its source.
    AbortMigration,
}

/// One change to one node's entries: set (or remove, with `entry: None`) the UID's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    pub kind: EditKind,
    pub node: String,
    pub uid: String,
    pub entry: Option<Entry>,
}

/// The next step for a tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Write this edit (guarded by the node's resourceVersion), then plan again.
    Edit(Edit),
    /// The tenant holds exactly its footprint on this node.
    Holding { node: String, reserved: Resources },
    /// The tenant holds `reserved` on `node`; its new footprint does not fit there.
    ResizeBlocked {
        node: String,
        reserved: Resources,
        shortfall: Shortfall,
        node_offline: bool,
    },
    /// The tenant holds nothing and no node can take it.
    Pending(NoFit),
    /// The tenant holds nothing and is suspended, so it is not placed.
    SuspendedUnplaced,
    /// The tenant holds nothing and waits its turn behind an older tenant that fits nowhere
    /// (StrictFIFO; only the queue, queue.rs, answers this).
    Queued { behind: String },
    /// The tenant holds `reserved` on both nodes: the target entry of its move is written, and
    /// its status must record the move before the source is released. Only the engine answers
    /// this, right after writing the target entry.
    Migrating {
        from: String,
        to: String,
        reserved: Resources,
    },
    /// The tenant holds `reserved` on `node`, which is draining, and does not move now.
    MoveBlocked {
        node: String,
        reserved: Resources,
        why: MoveBlock,
    },
    /// A spread tenant holds one replica on each of these nodes (by name), `reserved` in all.
    Spread {
        placed: Vec<SpreadPlaced>,
        reserved: Resources,
    },
    /// A spread tenant holds nothing, and no placement keeps its spread rule.
    SpreadPending(SpreadNoFit),
    /// A spread tenant holds what it held when last placed whole (`reserved` in all); what it
    /// asks now (a replicas change, a resize, a way off a draining node) keeps no spread rule.
    SpreadBlocked {
        placed: Vec<SpreadPlaced>,
        reserved: Resources,
        why: SpreadNoFit,
    },
}

/// Where a spread tenant holds replicas: a node, its zone (if it has one), and what it holds
/// there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpreadPlaced {
    pub node: String,
    pub zone: Option<String>,
    /// What its entry says (`None`: an entry of the tenant from before it was spread, holding
    /// every replica it had).
    pub replicas: Option<u32>,
    pub resources: Resources,
}

/// Why a tenant on a draining node is not moving now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MoveBlock {
    /// No other node that takes new tenants has room for its entry.
    NoRoom(NoFit),
    /// As many moves as allowed are in flight; it moves when one finishes.
    Turn { in_flight: usize },
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_smallest_and_largest_entry_follow_every_edit() {
        let mut node = crate::testing::ledger("n").capacity(99, 99, 99).build();
        assert_eq!(
            (node.smallest_entry(), node.largest_entry()),
            (Resources::ZERO, Resources::ZERO)
        );
        // (uid, entry or release): adds, an in-place shrink of the largest, a growth, a
        // release of the smallest, a UID listed twice.
        type Step = (&'static str, Option<(u64, u64, u64)>);
        let steps: [Step; 8] = [
            ("a", Some((5, 1, 9))),
            ("b", Some((2, 7, 3))),
            ("c", Some((4, 4, 4))),
            ("a", Some((1, 1, 1))),
            ("b", Some((8, 8, 2))),
            ("a", None),
            ("c", Some((3, 9, 1))),
            ("b", None),
        ];
        for (uid, entry) in steps {
            let edit = Edit {
                kind: EditKind::Reserve,
                node: "n".to_owned(),
                uid: uid.to_owned(),
                entry: entry.map(|(t, m, s)| Entry {
                    uid: uid.into(),
                    tenant: format!("default/{uid}").into(),
                    resources: Resources::new(t, m, s),
                    replicas: None,
                }),
            };
            node.apply(&edit).unwrap();
            let recomputed =
                NodeLedger::new("n", node.state(), node.capacity(), node.entries().to_vec())
                    .unwrap();
            assert_eq!(
                (node.smallest_entry(), node.largest_entry()),
                (recomputed.smallest_entry(), recomputed.largest_entry()),
                "after {uid}: {entry:?}"
            );
        }
        assert_eq!(node.largest_entry(), Resources::new(3, 9, 1));
    }

    #[test]
    fn written_is_the_entries_and_allocated_adds_the_holds_until_they_are_dropped() {
        let mut node = crate::testing::ledger("n")
            .capacity(8, 8, 8)
            .holding("a", (1, 1, 1))
            .holding("b", (2, 2, 2))
            .build()
            .with_labels(std::sync::Arc::new(crate::testing::labels(&[(
                "rack", "r1",
            )])));
        assert_eq!(node.written(), Resources::new(3, 3, 3));
        assert_eq!(node.labels(), &crate::testing::labels(&[("rack", "r1")]));
        assert!(node.holds_uid_hash(uid_hash("a")) && !node.holds_uid_hash(uid_hash("w")));
        node.hold(crate::testing::entry("w", (2, 1, 1))).unwrap();
        node.hold(crate::testing::entry("v", (1, 1, 1))).unwrap();
        assert_eq!(node.allocated(), Resources::new(6, 5, 5));
        assert_eq!(node.written(), Resources::new(3, 3, 3));
        // A hold is not an entry.
        assert!(!node.holds_uid_hash(uid_hash("w")) && node.entry_of("w").is_none());
        assert!(node.unhold("w"));
        assert!(!node.unhold("w"), "dropped once");
        assert_eq!(node.allocated(), Resources::new(4, 4, 4));
        node.clear_holds();
        assert!(node.holds().is_empty());
        assert_eq!(node.allocated(), node.written());
        let overflow = LedgerError::TotalOverflows { node: "n".into() };
        assert_eq!(
            overflow.to_string(),
            "the allocations recorded on node n add up past the largest storable integer"
        );
    }

    #[test]
    fn apply_in_place_matches_a_rebuild_and_changes_nothing_when_the_sum_overflows() {
        let edit = |uid: &str, entry: Option<Entry>| Edit {
            kind: EditKind::Reserve,
            node: "n".into(),
            uid: uid.into(),
            entry,
        };
        let node = crate::testing::ledger("n")
            .capacity(8, 8, 8)
            .holding("a", (1, 1, 1))
            .holding("b", (2, 2, 2))
            .holding("a", (3, 3, 3))
            .build();
        for change in [
            edit("a", Some(crate::testing::entry("a", (4, 4, 4)))),
            edit("b", None),
            edit("c", Some(crate::testing::entry("c", (1, 1, 1)))),
        ] {
            let mut applied = node.clone();
            applied.apply(&change).unwrap();
            let rebuilt = NodeLedger::new(
                "n",
                node.state(),
                node.capacity(),
                node.edited_entries(&change),
            )
            .unwrap();
            assert_eq!(applied.entries(), rebuilt.entries());
            assert_eq!(applied.written(), rebuilt.written());
            assert_eq!(applied.entry_of(&change.uid), rebuilt.entry_of(&change.uid));
        }
        let huge = Resources::new(Resources::LIMIT, 0, 0);
        let mut full = node.clone();
        let overflowing = edit("z", Some(crate::testing::entry("z", huge)));
        assert!(full.apply(&overflowing).is_err());
        assert_eq!(full, node);
    }

    #[test]
    fn allocated_is_the_sum_of_entries() {
        // 2+4 threads, 4+8 GB, 20+40 GB
        let node = crate::testing::ledger("n")
            .capacity(64, 256, 8000)
            .holding("a", (2, 4, 20))
            .holding("b", (4, 8, 40))
            .build();
        assert_eq!(node.allocated(), Resources::new(6, 12, 60));
    }

    #[test]
    fn entries_that_overflow_make_the_ledger_invalid() {
        let huge = Resources::new(Resources::LIMIT, 0, 0);
        let entries = vec![
            Entry {
                uid: "a".into(),
                tenant: "d/a".into(),
                resources: huge,
                replicas: None,
            },
            Entry {
                uid: "b".into(),
                tenant: "d/b".into(),
                resources: Resources::new(1, 0, 0),
                replicas: None,
            },
        ];
        assert_eq!(
            NodeLedger::new(
                "n",
                NodeState::Online,
                Resources::new(64, 256, 8000),
                entries
            ),
            Err(LedgerError::TotalOverflows { node: "n".into() })
        );
    }

    #[test]
    fn shared_names_are_the_same_text_held_once() {
        let mut node = crate::testing::ledger("n")
            .capacity(64, 256, 8000)
            .holding("a", (2, 4, 20))
            .holding("b", (4, 8, 40))
            .build();
        let before = node.clone();
        // As a Node written from the ledger lists them: "a" equal, "b" under another tenant name.
        let names: Vec<(Arc<str>, Arc<str>)> =
            vec![("a".into(), "a".into()), ("b".into(), "other/b".into())];
        node.share_names(names.iter().map(|(uid, tenant)| (uid, tenant)));
        assert_eq!(node, before, "the same texts");
        let (a, b) = (&node.entries()[0], &node.entries()[1]);
        assert!(Arc::ptr_eq(&a.uid, &names[0].0) && Arc::ptr_eq(&a.tenant, &names[0].1));
        assert!(
            !Arc::ptr_eq(&b.uid, &names[1].0),
            "an entry that differs keeps its own"
        );
    }
}
