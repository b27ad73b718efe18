//! BestFit over many nodes without scanning them: the node [`best_fit_among`] would choose,
//! found per node shape as the first node that fits in that shape's order of room left.
//!
//! ```text
//!   shape = (effective capacity, overcommit)     within a shape, the slack after placing r is
//!   shape A: blocks of nodes, least room first    Σ (free_d − r_d)·w_d = room − Σ r_d·w_d,
//!   [n7 n2 n9 … | most free]  [n4 … | most free]  w_d = 1 / (capacity_d · overcommit_d): one
//!   a block whose most free per dimension does    order for every r. The first node in room
//!   not hold r is skipped whole                   order that fits is the shape's best; the
//!                                                 shapes' bests compete on slack after r.
//! ```
//!
//! Rules enforced here:
//! - **the same answer as [`best_fit_among`]** over the active nodes: the least weighted slack
//!   after placing the request (exact, [`Slack`]'s order), ties by the smaller name; a node is
//!   active when the caller says so and it takes new tenants;
//! - each shape keeps its active nodes **in (room, name) order, exactly**, in blocks of at most
//!   `2 ×` [`BLOCK`] nodes, each block knowing the most free per dimension among its nodes. A
//!   block holds each node's room as a float, its position and its free room; two rooms closer
//!   than float error are compared exactly from the nodes' views, as [`Slack`] compares;
//! - a node with less room than the request takes up (`Σ r_d·w_d`) cannot fit it: the search
//!   starts past those (a binary search; compared with a margin far above float error);
//! - a change to a node (what it holds, whether it is active) takes it out and puts it back
//!   where its new room belongs;
//! - a caller may promise a **floor** ([`BestFitIndex::raise_floor`]): no request from then on
//!   is smaller in any dimension. A node with less free than the floor in some dimension fits
//!   none of them, so it leaves the blocks (and is not put back while it stays that small);
//!   the answer for a request at or above the floor is unchanged. Floors only rise.
//!
//! Cost: a decision checks the most free of each block from its start (shape nodes /
//! [`BLOCK`]) and scans the blocks that might hold a fit until one does; a change is two
//! binary searches and one block's rewrite, O(log n + [`BLOCK`]). A fleet of many shapes pays
//! per shape (one shape per node at worst: a scan). On `placement-bench consolidation`'s
//! fleets of random fill a decision at 10,000 nodes tested about 1,500 nodes without a floor:
//! many with room enough in sum lack it in one dimension (targets filled until one dimension
//! is nearly full), and most blocks hold one of those. With the consolidation's floor (its
//! smallest entry yet to come, per dimension) those nodes leave, and a decision tests about 15
//! (9 at 1,000 nodes). Raising a floor reads every node: O(n).
//!
//! [`best_fit_among`]: crate::policy::best_fit_among
//! [`Slack`]: crate::policy::Slack

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::fit::NodeView;
use crate::overcommit::Overcommit;
use crate::policy::weighted_slack;
use crate::resources::{Dimension, Resources};

/// Nodes per block, half the most a block holds before it is split.
pub const BLOCK: usize = 32;

/// BestFit among nodes that change as a plan goes (see the module rules). Nodes are named by
/// their position in the list the index was built from.
#[derive(Debug)]
pub struct BestFitIndex<'a> {
    shapes: Vec<Shape>,
    /// Each node's shape.
    shape_of: Vec<usize>,
    views: Vec<NodeView<'a>>,
    overcommits: Vec<Overcommit>,
    active: Vec<bool>,
    /// Each node's room as its shape's blocks hold it, while they do.
    held: Vec<Option<f64>>,
    /// No request asked of the index is smaller in any dimension (the caller's promise): a
    /// node with less free than this in a dimension can fit none, and is left out.
    floor: Resources,
}

/// One shape's active nodes, in order: room left (slack with nothing placed, exact), then name,
/// then position (so a name given twice still names one node).
#[derive(Debug, Default)]
struct Shape {
    blocks: Vec<Block>,
    /// Each block's last node `(room, position)` and its most free, beside `blocks`: finding a
    /// block reads these short columns, not the blocks themselves.
    lasts: Vec<(f64, usize)>,
    mosts: Vec<Resources>,
    /// Room per unit free, per dimension: `1000 / (capacity × overcommit)`, 0 for a dimension
    /// with no capacity (as [`weighted_slack`] counts it).
    weights: [f64; 3],
}

/// Columns, in the shape's order. Small on purpose: a change shifts a block's tail, and a
/// decision reads `rooms` and `frees` only.
#[derive(Debug, Default)]
struct Block {
    /// Each node's room as a float ([`Slack::as_f64`](crate::policy::Slack::as_f64)); the exact room is asked of its view
    /// on a near tie.
    rooms: Vec<f64>,
    /// Each node's position.
    nodes: Vec<usize>,
    /// Each node's free room.
    frees: Vec<Resources>,
    /// The most free per dimension over the block (each from any of its nodes).
    most_free: Resources,
}

/// A node as a block holds it.
#[derive(Clone, Copy, Debug)]
struct Item {
    room: f64,
    node: usize,
    free: Resources,
}

/// The shape order, exact: what a float room cannot settle is asked of the nodes' views.
struct Order<'x, 'a> {
    views: &'x [NodeView<'a>],
    overcommits: &'x [Overcommit],
}

impl Order<'_, '_> {
    /// `(room, position)` against another, in the shape order.
    #[inline]
    fn cmp(&self, a: (f64, usize), b: (f64, usize)) -> Ordering {
        if a.1 == b.1 {
            return Ordering::Equal;
        }
        // The test Slack's own order makes first (a float gap far above rounding), inlined:
        // most comparisons end here.
        let margin = (a.0 + b.0) * 1e-12;
        if a.0 - b.0 > margin {
            return Ordering::Greater;
        }
        if b.0 - a.0 > margin {
            return Ordering::Less;
        }
        self.near_tie(a, b)
    }

    /// [`Order::cmp`] for rooms closer than float error: exactly, from the views.
    #[cold]
    fn near_tie(&self, a: (f64, usize), b: (f64, usize)) -> Ordering {
        let exact = |node: usize| {
            weighted_slack(
                self.views.get(node)?,
                &Resources::ZERO,
                self.overcommits.get(node)?,
            )
        };
        let name = |node: usize| self.views.get(node).map(|view| view.name);
        let room = match (exact(a.1), exact(b.1)) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => Ordering::Equal,
        };
        room.then_with(|| name(a.1).cmp(&name(b.1)))
            .then(a.1.cmp(&b.1))
    }
}

impl<'a> BestFitIndex<'a> {
    /// An index over `nodes` (with each one's overcommit), `active` saying which may be chosen.
    pub fn new(
        nodes: Vec<(NodeView<'a>, Overcommit)>,
        active: impl Fn(usize) -> bool,
    ) -> BestFitIndex<'a> {
        let (views, overcommits): (Vec<NodeView<'a>>, Vec<Overcommit>) = nodes.into_iter().unzip();
        let mut by_shape: HashMap<(Resources, [u32; 3]), usize> = HashMap::new();
        let shape_of: Vec<usize> = views
            .iter()
            .zip(&overcommits)
            .map(|(view, overcommit)| {
                let key = (
                    view.capacity,
                    Dimension::ALL.map(|d| overcommit.per_mille(d)),
                );
                let next = by_shape.len();
                *by_shape.entry(key).or_insert(next)
            })
            .collect();
        let count = views.len();
        let mut index = BestFitIndex {
            shapes: (0..by_shape.len()).map(|_| Shape::default()).collect(),
            shape_of,
            active: (0..count).map(active).collect(),
            held: vec![None; count],
            views,
            overcommits,
            floor: Resources::ZERO,
        };
        let mut weights = vec![[0.0; 3]; index.shapes.len()];
        for (node, &s) in index.shape_of.iter().enumerate() {
            let (Some(view), Some(overcommit)) =
                (index.views.get(node), index.overcommits.get(node))
            else {
                continue;
            };
            if let Some(w) = weights.get_mut(s) {
                *w = Dimension::ALL.map(|d| {
                    let capacity = view.capacity.get(d);
                    if capacity == 0 {
                        0.0
                    } else {
                        1000.0 / (capacity as f64 * f64::from(overcommit.per_mille(d).max(1)))
                    }
                });
            }
        }
        for (shape, weights) in index.shapes.iter_mut().zip(weights) {
            shape.weights = weights;
        }
        // Rooms are read with the shapes' weights: after them.
        let mut members: Vec<Vec<Item>> = (0..index.shapes.len()).map(|_| Vec::new()).collect();
        for node in 0..count {
            let (Some(item), Some(&s)) = (index.item(node), index.shape_of.get(node)) else {
                continue;
            };
            if let Some(list) = members.get_mut(s) {
                list.push(item);
            }
            if let Some(held) = index.held.get_mut(node) {
                *held = Some(item.room);
            }
        }
        let order = Order {
            views: &index.views,
            overcommits: &index.overcommits,
        };
        for (shape, mut items) in index.shapes.iter_mut().zip(members) {
            items.sort_by(|a, b| order.cmp((a.room, a.node), (b.room, b.node)));
            shape.rebuild(&items);
        }
        index
    }

    /// The node at `position` as the index counts it.
    pub fn view(&self, position: usize) -> Option<&NodeView<'a>> {
        self.views.get(position)
    }

    /// Whether the node at `position` may be chosen (as the caller set it; it may still be full).
    pub fn is_active(&self, position: usize) -> bool {
        self.active.get(position) == Some(&true)
    }

    /// Changes what the node at `position` holds.
    pub fn set_allocated(&mut self, position: usize, allocated: Resources) {
        self.take_out(position);
        if let Some(view) = self.views.get_mut(position) {
            view.allocated = allocated;
        }
        self.put_in(position);
    }

    /// Lets the node at `position` be chosen, or not.
    pub fn set_active(&mut self, position: usize, active: bool) {
        self.take_out(position);
        if let Some(slot) = self.active.get_mut(position) {
            *slot = active;
        }
        self.put_in(position);
    }

    /// The position of the node [`best_fit_among`] would choose for `request` among the active
    /// nodes; `None` when none fits. `request` is at or above the floor (see the module rules).
    ///
    /// [`best_fit_among`]: crate::policy::best_fit_among
    pub fn best_fit(&self, request: &Resources) -> Option<usize> {
        // Each shape's first fit, with its slack after placing as a float: `(slack, position)`.
        let mut best: Option<(f64, usize)> = None;
        for shape in &self.shapes {
            let Some((node, free)) = shape.first_fit(request) else {
                continue;
            };
            let candidate = (shape.room(&free.saturating_sub(*request)), node);
            let better = best
                .is_none_or(|best| self.after_placing(candidate, best, request) == Ordering::Less);
            if better {
                best = Some(candidate);
            }
        }
        best.map(|(_, node)| node)
    }

    /// Two nodes by their slack after placing `request` (as [`Slack`](crate::policy::Slack) orders it: exactly, from
    /// the views on a near tie), then by name.
    fn after_placing(&self, a: (f64, usize), b: (f64, usize), request: &Resources) -> Ordering {
        let name = |node: usize| self.views.get(node).map(|view| view.name);
        let margin = (a.0 + b.0) * 1e-12;
        let slack = if a.0 - b.0 > margin {
            Ordering::Greater
        } else if b.0 - a.0 > margin {
            Ordering::Less
        } else {
            let exact = |node: usize| {
                weighted_slack(self.views.get(node)?, request, self.overcommits.get(node)?)
            };
            match (exact(a.1), exact(b.1)) {
                (Some(x), Some(y)) => x.cmp(&y),
                _ => Ordering::Equal,
            }
        };
        slack.then_with(|| name(a.1).cmp(&name(b.1)))
    }

    /// Promises that no request asked from now on is smaller than `floor` in any dimension
    /// (nor than an earlier floor): the nodes too small for it in a dimension leave the blocks.
    pub fn raise_floor(&mut self, floor: Resources) {
        let floor = Resources::from_fn(|d| floor.get(d).max(self.floor.get(d)));
        if floor == self.floor {
            return;
        }
        self.floor = floor;
        for shape in &mut self.shapes {
            if shape.mosts.iter().all(|most| floor.fits_within(most))
                && shape
                    .blocks
                    .iter()
                    .all(|block| block.frees.iter().all(|free| floor.fits_within(free)))
            {
                // Nothing leaves this shape: its blocks stay as they are.
                continue;
            }
            let mut kept: Vec<Item> = Vec::new();
            for block in &shape.blocks {
                for ((&room, &node), &free) in
                    block.rooms.iter().zip(&block.nodes).zip(&block.frees)
                {
                    if floor.fits_within(&free) {
                        kept.push(Item { room, node, free });
                    } else if let Some(held) = self.held.get_mut(node) {
                        *held = None;
                    }
                }
            }
            shape.rebuild(&kept);
        }
    }

    /// The node as its shape holds it; `None` when it may not be chosen.
    fn item(&self, node: usize) -> Option<Item> {
        if !self.is_active(node) {
            return None;
        }
        let view = self.views.get(node)?;
        let free = view.free();
        if !view.takes_new_tenants() || !self.floor.fits_within(&free) {
            return None;
        }
        let shape = self.shapes.get(*self.shape_of.get(node)?)?;
        Some(Item {
            room: shape.room(&free),
            node,
            free,
        })
    }

    fn take_out(&mut self, node: usize) {
        let Some(room) = self.held.get_mut(node).and_then(Option::take) else {
            return;
        };
        let order = Order {
            views: &self.views,
            overcommits: &self.overcommits,
        };
        if let Some(shape) = self
            .shape_of
            .get(node)
            .and_then(|&s| self.shapes.get_mut(s))
        {
            shape.remove((room, node), &order);
        }
    }

    fn put_in(&mut self, node: usize) {
        let Some(item) = self.item(node) else {
            return;
        };
        let order = Order {
            views: &self.views,
            overcommits: &self.overcommits,
        };
        if let Some(shape) = self
            .shape_of
            .get(node)
            .and_then(|&s| self.shapes.get_mut(s))
        {
            shape.insert(item, &order);
        }
        if let Some(held) = self.held.get_mut(node) {
            *held = Some(item.room);
        }
    }
}

impl Shape {
    /// The room `free` leaves, as a float: within a relative 1e-15 of [`weighted_slack`]'s
    /// exact value, as [`Slack::as_f64`](crate::policy::Slack::as_f64) is.
    fn room(&self, free: &Resources) -> f64 {
        Dimension::ALL
            .iter()
            .zip(self.weights)
            .map(|(&d, w)| free.get(d) as f64 * w)
            .sum()
    }

    /// The position (and free room) of the first node in the shape's order that `request`
    /// fits. A node with less room than the request would take up cannot fit it: the scan
    /// starts past them (by a margin far above float error, so none that could fit is passed).
    fn first_fit(&self, request: &Resources) -> Option<(usize, Resources)> {
        let needed = self.room(request);
        let below = |room: &f64| *room < needed * (1.0 - 1e-9) - 1e-9;
        let start = self.lasts.partition_point(|(room, _)| below(room));
        let candidates = self
            .mosts
            .get(start..)?
            .iter()
            .zip(self.blocks.get(start..)?);
        candidates
            .enumerate()
            .filter(|(_, (most, _))| request.fits_within(most))
            .find_map(|(b, (_, block))| {
                let from = if b == 0 {
                    block.rooms.partition_point(below)
                } else {
                    0
                };
                let at = from.saturating_add(first_fitting(block.frees.get(from..)?, request)?);
                Some((*block.nodes.get(at)?, *block.frees.get(at)?))
            })
    }

    /// The blocks cut from `items` (in order), and their summaries.
    fn rebuild(&mut self, items: &[Item]) {
        self.blocks = items.chunks(BLOCK).map(Block::of).collect();
        self.lasts = self.blocks.iter().filter_map(Block::last).collect();
        self.mosts = self.blocks.iter().map(|block| block.most_free).collect();
    }

    /// Block `at`'s summary, after a change to it.
    fn summarize(&mut self, at: usize) {
        let Some(block) = self.blocks.get(at) else {
            return;
        };
        if let (Some(last), Some(summary)) = (block.last(), self.lasts.get_mut(at)) {
            *summary = last;
        }
        if let Some(most) = self.mosts.get_mut(at) {
            *most = block.most_free;
        }
    }

    /// The block a node belongs in: the first whose last node is not before it (else the last).
    fn block_for(&self, key: (f64, usize), order: &Order<'_, '_>) -> usize {
        let after = self
            .lasts
            .partition_point(|&last| order.cmp(last, key) == Ordering::Less);
        after.min(self.blocks.len().saturating_sub(1))
    }

    fn insert(&mut self, item: Item, order: &Order<'_, '_>) {
        let key = (item.room, item.node);
        if self.blocks.is_empty() {
            self.blocks.push(Block::with_room());
            self.lasts.push(key);
            self.mosts.push(Resources::ZERO);
        }
        let at = self.block_for(key, order);
        let Some(block) = self.blocks.get_mut(at) else {
            return;
        };
        let slot = block.slot(key, order);
        block.rooms.insert(slot, item.room);
        block.nodes.insert(slot, item.node);
        block.frees.insert(slot, item.free);
        if block.rooms.len() > BLOCK.saturating_mul(2) {
            let mut upper = Block::with_room();
            upper.rooms.extend(block.rooms.drain(BLOCK..));
            upper.nodes.extend(block.nodes.drain(BLOCK..));
            upper.frees.extend(block.frees.drain(BLOCK..));
            block.refresh();
            let next = at.saturating_add(1);
            self.blocks.insert(next, upper.refreshed());
            self.lasts.insert(next, key);
            self.mosts.insert(next, Resources::ZERO);
            self.summarize(next);
        } else {
            block.most_free = Resources::from_fn(|d| block.most_free.get(d).max(item.free.get(d)));
        }
        self.summarize(at);
    }

    fn remove(&mut self, key: (f64, usize), order: &Order<'_, '_>) {
        let at = self.block_for(key, order);
        let Some(block) = self.blocks.get_mut(at) else {
            return;
        };
        let slot = block.slot(key, order);
        if block.nodes.get(slot) != Some(&key.1) {
            return;
        }
        block.rooms.remove(slot);
        block.nodes.remove(slot);
        let free = block.frees.remove(slot);
        if block.rooms.is_empty() {
            self.blocks.remove(at);
            self.lasts.remove(at);
            self.mosts.remove(at);
            return;
        }
        if Dimension::ALL
            .iter()
            .any(|&d| free.get(d) >= block.most_free.get(d))
        {
            // Only a node holding a most free can lower it.
            block.refresh();
        }
        self.summarize(at);
    }
}

impl Block {
    fn of(items: &[Item]) -> Block {
        let mut block = Block::with_room();
        for item in items {
            block.rooms.push(item.room);
            block.nodes.push(item.node);
            block.frees.push(item.free);
        }
        block.refreshed()
    }

    /// An empty block with room for as many nodes as it holds before it splits: its columns
    /// never grow.
    fn with_room() -> Block {
        let most = BLOCK.saturating_mul(2).saturating_add(1);
        Block {
            rooms: Vec::with_capacity(most),
            nodes: Vec::with_capacity(most),
            frees: Vec::with_capacity(most),
            most_free: Resources::ZERO,
        }
    }

    /// The last node's `(room, position)`.
    fn last(&self) -> Option<(f64, usize)> {
        Some((*self.rooms.last()?, *self.nodes.last()?))
    }

    /// Where `key` is or belongs: the number of nodes before it.
    fn slot(&self, key: (f64, usize), order: &Order<'_, '_>) -> usize {
        // A partition point over two columns.
        let (mut low, mut high) = (0usize, self.rooms.len());
        while low < high {
            let mid = low.saturating_add(high.saturating_sub(low) / 2);
            let (Some(&room), Some(&node)) = (self.rooms.get(mid), self.nodes.get(mid)) else {
                break;
            };
            if order.cmp((room, node), key) == Ordering::Less {
                low = mid.saturating_add(1);
            } else {
                high = mid;
            }
        }
        low
    }

    fn refreshed(mut self) -> Block {
        self.refresh();
        self
    }

    fn refresh(&mut self) {
        self.most_free = self.frees.iter().fold(Resources::ZERO, |most, free| {
            Resources::from_fn(|d| most.get(d).max(free.get(d)))
        });
    }
}

/// The first of `frees` that `request` fits. Eight at a time without a branch per dimension:
/// random rooms make a short-circuiting test mispredict about every other node.
fn first_fitting(frees: &[Resources], request: &Resources) -> Option<usize> {
    let (t, m, s) = (request.threads, request.memory_gb, request.storage_gb);
    for (c, chunk) in frees.chunks(8).enumerate() {
        let mut mask = 0u32;
        for (j, f) in chunk.iter().enumerate() {
            let fits = (f.threads >= t) & (f.memory_gb >= m) & (f.storage_gb >= s);
            mask |= u32::from(fits) << j;
        }
        if mask != 0 {
            let at = usize::try_from(mask.trailing_zeros()).unwrap_or(0);
            return Some(c.saturating_mul(8).saturating_add(at));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::arithmetic_side_effects)]
    use super::*;
    use crate::fit::NodeState;
    use crate::policy::best_fit_among;

    /// [`best_fit_among`] over the same nodes, for the tests that hold the index to it.
    fn scan<'a>(
        nodes: &[(NodeView<'a>, Overcommit)],
        active: impl Fn(usize) -> bool,
        request: &Resources,
    ) -> Option<&'a str> {
        best_fit_among(
            nodes
                .iter()
                .enumerate()
                .filter(|(i, _)| active(*i))
                .map(|(_, (view, overcommit))| (view, *overcommit)),
            request,
        )
    }

    /// A small random generator (xorshift), enough for shuffled cases.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n.max(1)
        }
    }

    /// The node shapes the index tests draw from (one overcommitted, one without memory).
    fn shapes() -> [(Resources, Overcommit); 4] {
        [
            (Resources::new(8, 32, 100), Overcommit::NONE),
            (Resources::new(16, 64, 100), Overcommit::NONE),
            (
                Resources::new(8, 32, 100),
                Overcommit::from_per_mille(2000, 1000, 1000).unwrap(),
            ),
            (Resources::new(8, 0, 100), Overcommit::NONE),
        ]
    }

    #[test]
    fn the_index_chooses_what_best_fit_among_chooses_as_nodes_fill_and_leave() {
        // Up to 400 nodes of 4 shapes: blocks fill, split and empty.
        let names: Vec<String> = (0..400).map(|i| format!("n{i:03}")).collect();
        for seed in 1..=100u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let shapes = shapes();
            let count = usize::try_from(rng.below(400) + 1).unwrap();
            let mut nodes: Vec<(NodeView<'_>, Overcommit)> = (0..count)
                .map(|i| {
                    let (capacity, overcommit) = shapes[usize::try_from(rng.below(4)).unwrap()];
                    let state = if rng.below(10) == 0 {
                        NodeState::Cordoned
                    } else {
                        NodeState::Online
                    };
                    let allocated = Resources::from_fn(|d| rng.below(capacity.get(d) + 2));
                    let view = NodeView {
                        name: &names[i],
                        state,
                        capacity,
                        allocated,
                    };
                    (view, overcommit)
                })
                .collect();
            let mut active: Vec<bool> = (0..count).map(|_| rng.below(5) != 0).collect();
            let mut index = BestFitIndex::new(nodes.clone(), |i| active[i]);
            for step in 0..300 {
                let request = Resources::new(rng.below(9), rng.below(33), rng.below(60));
                let want = scan(&nodes, |i| active[i], &request);
                let got = index.best_fit(&request).map(|i| nodes[i].0.name);
                assert_eq!(got, want, "seed {seed}, step {step}, {request:?}");
                // Change one node: what it holds, or whether it may be chosen.
                let i = usize::try_from(rng.below(u64::try_from(count).unwrap())).unwrap();
                if rng.below(3) == 0 {
                    active[i] = !active[i];
                    index.set_active(i, active[i]);
                } else {
                    let capacity = nodes[i].0.capacity;
                    let allocated = Resources::from_fn(|d| rng.below(capacity.get(d) + 2));
                    nodes[i].0.allocated = allocated;
                    index.set_allocated(i, allocated);
                }
                assert_eq!(index.view(i), Some(&nodes[i].0));
            }
            well_formed(&index);
        }
    }

    #[test]
    fn above_a_rising_floor_the_index_still_chooses_what_best_fit_among_chooses() {
        // Requests never below the floor; the floor rises now and then, and nodes left out for
        // it never come back although they change (they only fill here, as in a plan).
        let names: Vec<String> = (0..300).map(|i| format!("n{i:03}")).collect();
        for seed in 1..=100u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            // The first three: no shape without memory.
            let shapes = &shapes()[..3];
            let count = usize::try_from(rng.below(300) + 1).unwrap();
            let mut nodes: Vec<(NodeView<'_>, Overcommit)> = (0..count)
                .map(|i| {
                    let (capacity, overcommit) = shapes[usize::try_from(rng.below(3)).unwrap()];
                    let allocated = Resources::from_fn(|d| rng.below(capacity.get(d) + 1));
                    let view = NodeView {
                        name: &names[i],
                        state: NodeState::Online,
                        capacity,
                        allocated,
                    };
                    (view, overcommit)
                })
                .collect();
            let mut index = BestFitIndex::new(nodes.clone(), |_| true);
            let mut floor = Resources::ZERO;
            for step in 0..300 {
                if rng.below(20) == 0 {
                    floor = Resources::from_fn(|d| floor.get(d) + rng.below(3));
                    index.raise_floor(floor);
                    well_formed(&index);
                }
                let request = Resources::from_fn(|d| floor.get(d) + rng.below(6));
                let want = scan(&nodes, |_| true, &request);
                let got = index.best_fit(&request).map(|i| nodes[i].0.name);
                assert_eq!(got, want, "seed {seed}, step {step}, {request:?}");
                let i = usize::try_from(rng.below(u64::try_from(count).unwrap())).unwrap();
                let allocated = nodes[i].0.allocated.checked_add(request).unwrap();
                if allocated.fits_within(&nodes[i].0.capacity) {
                    nodes[i].0.allocated = allocated;
                    index.set_allocated(i, allocated);
                }
            }
            well_formed(&index);
        }
    }

    /// Each shape's blocks: none empty, none over twice [`BLOCK`], keys in order across them,
    /// each block's most free exact, the summaries beside them current, every active node that takes tenants and is not below the
    /// floor held once, with its key.
    fn well_formed(index: &BestFitIndex<'_>) {
        // The order the blocks keep, from the views alone: exact room, name, position.
        let key = |node: usize| {
            let view = &index.views[node];
            let room = weighted_slack(view, &Resources::ZERO, &index.overcommits[node]).unwrap();
            (room, view.name, node)
        };
        let mut held = 0;
        for shape in &index.shapes {
            let lasts: Vec<(f64, usize)> = shape.blocks.iter().map(|b| b.last().unwrap()).collect();
            let mosts: Vec<Resources> = shape.blocks.iter().map(|b| b.most_free).collect();
            assert_eq!((&shape.lasts, &shape.mosts), (&lasts, &mosts));
            let mut nodes: Vec<usize> = Vec::new();
            for block in &shape.blocks {
                assert!((1..=2 * BLOCK).contains(&block.rooms.len()));
                assert_eq!(block.nodes.len(), block.rooms.len());
                assert_eq!(block.frees.len(), block.rooms.len());
                for ((&room, &node), &free) in
                    block.rooms.iter().zip(&block.nodes).zip(&block.frees)
                {
                    let item = index.item(node).unwrap();
                    assert_eq!((room, free), (item.room, item.free));
                    assert_eq!(index.held[node], Some(room));
                    nodes.push(node);
                }
                let most =
                    Resources::from_fn(|d| block.frees.iter().map(|f| f.get(d)).max().unwrap());
                assert_eq!(block.most_free, most);
            }
            held += nodes.len();
            assert!(nodes.windows(2).all(|w| {
                let (a, b) = (key(w[0]), key(w[1]));
                a.0.cmp(&b.0).then(a.1.cmp(b.1)).then(a.2.cmp(&b.2)) == Ordering::Less
            }));
        }
        let active = (0..index.views.len())
            .filter(|&i| index.item(i).is_some())
            .count();
        assert_eq!(held, active);
        assert_eq!(index.held.iter().flatten().count(), held);
    }
}
