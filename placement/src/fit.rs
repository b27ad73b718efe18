//! First fit, and the shape of a "does not fit" answer.
//!
//! Rules enforced here (docs/design.md, "The parts"; docs/placement.md, "Placement policies"):
//! - nodes are considered in name order (byte order), whatever order they are given in;
//! - only nodes that take new tenants are eligible: state `Online`, and not holding more than
//!   their capacity in any dimension (a node whose capacity was lowered below what it holds);
//! - free = capacity - allocated per dimension, saturating at 0;
//! - the first eligible node whose free covers all three requested dimensions wins;
//! - no fit is data, not an error: per dimension, the largest free amount among eligible nodes
//!   and how far the request exceeds it; for a tenant with a node selector, among the nodes
//!   carrying its labels, and saying so when no node carries them at all.
//!
//! ```text
//!   request 2 thr · 4 GB · 20 GB
//!   node-eu-1  Online  free 64 · 256 · 8000   fits all three  -> Place(node-eu-1)
//!   node-eu-2  Online  (not reached: first fit already won)
//! ```

use std::fmt;
use std::sync::Arc;

use crate::resources::{Dimension, Resources};
use crate::selector::{Labels, Pairs};

/// Whether a node takes tenants. Cordoned and Offline nodes keep the tenants they hold; a
/// Draining node (being deleted, or drained) keeps them until they go and takes nothing back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NodeState {
    #[default]
    Online,
    Cordoned,
    Offline,
    Draining,
}

/// What placement needs to know of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeView<'a> {
    pub name: &'a str,
    pub state: NodeState,
    pub capacity: Resources,
    pub allocated: Resources,
}

impl NodeView<'_> {
    /// Capacity minus allocated, per dimension, never below 0.
    pub fn free(&self) -> Resources {
        self.capacity.saturating_sub(self.allocated)
    }

    /// True when the node holds more than its capacity in some dimension (capacity was lowered).
    pub fn over_capacity(&self) -> bool {
        !self.allocated.fits_within(&self.capacity)
    }

    /// Online and not over capacity: the only nodes placement may choose for a new reservation.
    pub fn takes_new_tenants(&self) -> bool {
        self.state == NodeState::Online && !self.over_capacity()
    }
}

/// A request measured against the room it was offered: what a "does not fit" message reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub requested: Resources,
    /// The room that was available: per dimension, the largest free amount considered.
    pub available: Resources,
}

impl Shortfall {
    /// How far the request exceeds the room, per dimension (0 where it fits).
    pub fn short_by(&self) -> Resources {
        self.requested.saturating_sub(self.available)
    }

    /// The dimensions in which the request exceeds the room.
    pub fn short_dimensions(&self) -> impl Iterator<Item = Dimension> + '_ {
        let short = self.short_by();
        Dimension::ALL
            .into_iter()
            .filter(move |d| short.get(*d) > 0)
    }
}

impl fmt::Display for Shortfall {
    /// `threads: needs 256, at most 64 free (short by 192); memoryGb: …`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = self.short_by();
        let mut first = true;
        for dimension in self.short_dimensions() {
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(
                f,
                "{dimension}: needs {}, at most {} free (short by {})",
                self.requested.get(dimension),
                self.available.get(dimension),
                short.get(dimension)
            )?;
        }
        Ok(())
    }
}

/// The answer when no eligible node can take a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoFit {
    /// How many nodes were eligible (Online, not over capacity, carrying the selector's labels).
    pub eligible_nodes: usize,
    /// The request against the largest free amount per dimension among eligible nodes.
    pub shortfall: Shortfall,
    /// The tenant's node selector, when it has a non-empty one: only nodes carrying all its
    /// labels were considered.
    pub selector: Option<Arc<Labels>>,
    /// How many nodes carry the selector's labels, whatever their state (0 without a selector).
    pub labelled_nodes: usize,
}

impl NoFit {
    /// The same answer for a tenant whose selector `selector` (non-empty) `labelled` nodes carry.
    #[must_use]
    pub fn for_selector(self, selector: &Labels, labelled: usize) -> NoFit {
        NoFit {
            selector: Some(Arc::new(selector.clone())),
            labelled_nodes: labelled,
            ..self
        }
    }
}

impl fmt::Display for NoFit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(selector) = self.selector.as_deref() else {
            return self.fmt_among(f, "no node", "no single node");
        };
        let pairs = Pairs(selector);
        if self.labelled_nodes == 0 {
            return write!(f, "no node has the labels {pairs} (nodeSelector)");
        }
        let among = format!("no node with the labels {pairs} (nodeSelector)");
        let single = format!("no single node with the labels {pairs} (nodeSelector)");
        self.fmt_among(f, &among, &single)
    }
}

impl NoFit {
    /// The message with `none` ("no node …") and `single` ("no single node …") as subjects.
    fn fmt_among(&self, f: &mut fmt::Formatter<'_>, none: &str, single: &str) -> fmt::Result {
        if self.eligible_nodes == 0 {
            return write!(f, "{none} is Online with room to take new tenants");
        }
        if self.shortfall.short_dimensions().next().is_none() {
            // Every dimension fits somewhere, but never all three on one node.
            return write!(f, "{single} has {} free at once", self.shortfall.requested);
        }
        write!(f, "{none} has room: {}", self.shortfall)
    }
}

/// The node a policy picks for a tenant that holds nothing, or why none fits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice<'a> {
    /// Reserve on this node.
    Place(&'a str),
    /// Nothing fits; the tenant waits in PendingCapacity.
    NoFit(NoFit),
}

/// First fit: the eligible node first by name whose free headroom covers the whole request.
pub fn first_fit<'a>(nodes: &[NodeView<'a>], request: &Resources) -> Choice<'a> {
    let eligible = nodes.iter().filter(|node| node.takes_new_tenants());
    // The minimum name among fitting nodes is the first in name order, without sorting.
    let chosen = eligible
        .clone()
        .filter(|node| request.fits_within(&node.free()))
        .min_by(|a, b| a.name.cmp(b.name));
    match chosen {
        Some(node) => Choice::Place(node.name),
        None => Choice::NoFit(no_fit(eligible, request)),
    }
}

/// Builds the no-fit answer from the nodes that were eligible.
pub fn no_fit<'n, 'a: 'n>(
    eligible: impl Iterator<Item = &'n NodeView<'a>>,
    request: &Resources,
) -> NoFit {
    let mut eligible_nodes = 0usize;
    let mut largest_free = Resources::ZERO;
    for node in eligible {
        eligible_nodes = eligible_nodes.saturating_add(1);
        let free = node.free();
        largest_free = Resources::from_fn(|d| largest_free.get(d).max(free.get(d)));
    }
    NoFit {
        eligible_nodes,
        shortfall: Shortfall {
            requested: *request,
            available: largest_free,
        },
        selector: None,
        labelled_nodes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ledger;

    fn seed_nodes() -> Vec<NodeView<'static>> {
        vec![
            ledger("node-eu-2").capacity(32, 128, 4000).view(),
            ledger("node-eu-1").capacity(64, 256, 8000).view(),
        ]
    }

    struct Case {
        name: &'static str,
        nodes: Vec<NodeView<'static>>,
        request: Resources,
        want: Choice<'static>,
    }

    #[test]
    fn first_fit_table() {
        let cases = vec![
            Case {
                // The seed's acme: 2·4·20 fits node-eu-1 (free 64·256·8000), which sorts first.
                name: "acme goes to node-eu-1, first by name",
                nodes: seed_nodes(),
                request: Resources::new(2, 4, 20),
                want: Choice::Place("node-eu-1"),
            },
            Case {
                // node-eu-1 free threads = 64 - 63 = 1 < 2, so node-eu-2 (free 32) wins.
                name: "a node short in one dimension is skipped",
                nodes: vec![
                    ledger("node-eu-1")
                        .capacity(64, 256, 8000)
                        .allocated(63, 0, 0)
                        .view(),
                    ledger("node-eu-2").capacity(32, 128, 4000).view(),
                ],
                request: Resources::new(2, 4, 20),
                want: Choice::Place("node-eu-2"),
            },
            Case {
                // Exactly full after placing: 64 - 62 = 2 free threads covers 2.
                name: "free equal to the request fits",
                nodes: vec![
                    ledger("a")
                        .capacity(64, 256, 8000)
                        .allocated(62, 252, 7980)
                        .view(),
                ],
                request: Resources::new(2, 4, 20),
                want: Choice::Place("a"),
            },
            Case {
                name: "cordoned and offline nodes are never chosen",
                nodes: vec![
                    ledger("a")
                        .state(NodeState::Cordoned)
                        .capacity(64, 256, 8000)
                        .view(),
                    ledger("b")
                        .state(NodeState::Offline)
                        .capacity(64, 256, 8000)
                        .view(),
                    ledger("c").capacity(8, 8, 8).view(),
                ],
                request: Resources::new(2, 4, 4),
                want: Choice::Place("c"),
            },
            Case {
                // Capacity cut to 4 threads while holding 6: memory is free but the node is over.
                name: "a node over capacity takes no new tenants even where a dimension is free",
                nodes: vec![ledger("a").capacity(4, 100, 100).allocated(6, 0, 0).view()],
                request: Resources::new(0, 1, 1),
                want: Choice::NoFit(NoFit {
                    eligible_nodes: 0,
                    shortfall: Shortfall {
                        requested: Resources::new(0, 1, 1),
                        available: Resources::ZERO,
                    },
                    selector: None,
                    labelled_nodes: 0,
                }),
            },
            Case {
                // The seed's big: 256·1024·100000 against largest free 64·256·8000
                // short by 256-64=192 threads, 1024-256=768 GB, 100000-8000=92000 GB.
                name: "big fits nowhere and the answer names every shortfall",
                nodes: seed_nodes(),
                request: Resources::new(256, 1024, 100_000),
                want: Choice::NoFit(NoFit {
                    eligible_nodes: 2,
                    shortfall: Shortfall {
                        requested: Resources::new(256, 1024, 100_000),
                        available: Resources::new(64, 256, 8000),
                    },
                    selector: None,
                    labelled_nodes: 0,
                }),
            },
            Case {
                // Largest free per dimension is taken across nodes: threads 10 (a), memory 10 (b).
                name: "each dimension fits somewhere but no node has all three",
                nodes: vec![
                    ledger("a").capacity(10, 1, 10).view(),
                    ledger("b").capacity(1, 10, 10).view(),
                ],
                request: Resources::new(5, 5, 5),
                want: Choice::NoFit(NoFit {
                    eligible_nodes: 2,
                    shortfall: Shortfall {
                        requested: Resources::new(5, 5, 5),
                        available: Resources::new(10, 10, 10),
                    },
                    selector: None,
                    labelled_nodes: 0,
                }),
            },
        ];
        for case in cases {
            assert_eq!(
                first_fit(&case.nodes, &case.request),
                case.want,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn no_fit_messages_say_what_no_node_has() {
        let Choice::NoFit(big) = first_fit(&seed_nodes(), &Resources::new(256, 1024, 100_000))
        else {
            panic!("big must not fit");
        };
        assert_eq!(
            big.to_string(),
            "no node has room: threads: needs 256, at most 64 free (short by 192); \
             memoryGb: needs 1024, at most 256 free (short by 768); \
             storageGb: needs 100000, at most 8000 free (short by 92000)"
        );
        let Choice::NoFit(empty) = first_fit(&[], &Resources::new(1, 1, 1)) else {
            panic!("nothing fits on no nodes");
        };
        assert_eq!(
            empty.to_string(),
            "no node is Online with room to take new tenants"
        );
        let split = vec![
            ledger("a").capacity(10, 1, 10).view(),
            ledger("b").capacity(1, 10, 10).view(),
        ];
        let Choice::NoFit(split) = first_fit(&split, &Resources::new(5, 5, 5)) else {
            panic!("5·5·5 must not fit");
        };
        assert_eq!(
            split.to_string(),
            "no single node has 5 threads, 5 GB memory, 5 GB storage free at once"
        );
    }
}
