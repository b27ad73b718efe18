//! Deterministic fleets for latency measurements, shared by `placement-bench` and the criterion
//! benches (`benches/placement.rs` includes this file). Std only.

use placement::{Entry, NodeClassOffer, NodeLedger, NodeState, NodeView, Resources, WaitingTenant};

/// SplitMix64: a tiny seeded generator, the same sequence on every machine.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ z.wrapping_shr(30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ z.wrapping_shr(27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ z.wrapping_shr(31)
    }

    /// Uniform in `0..bound` (0 when `bound` is 0); the modulo bias is irrelevant here.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64().checked_rem(bound).unwrap_or(0)
    }
}

/// A node the fleet owns; [`Fleet::views`] lends it to placement.
#[derive(Clone, Debug)]
pub struct OwnedNode {
    pub name: String,
    pub state: NodeState,
    pub capacity: Resources,
    pub allocated: Resources,
}

#[derive(Clone, Debug)]
pub struct Fleet {
    pub nodes: Vec<OwnedNode>,
}

/// The request the latency cases place: a mid-sized tenant.
pub const REQUEST: Resources = Resources::new(4, 16, 200);

/// Node shapes of a mixed fleet: threads, GB memory, GB storage.
const SHAPES: [Resources; 4] = [
    Resources::new(32, 128, 4000),
    Resources::new(64, 256, 8000),
    Resources::new(96, 384, 16_000),
    Resources::new(128, 512, 16_000),
];

/// Zero-padded so that name order is creation order: `node-000042`.
pub fn node_name(i: usize) -> String {
    format!("node-{i:06}")
}

impl Fleet {
    /// `n` nodes of mixed shapes, each loaded to a random level (per dimension 0–100% around a
    /// node-wide level), 5% Cordoned and 2% Offline, listed in a shuffled order (placement must
    /// not depend on it).
    pub fn mixed(n: usize, seed: u64) -> Fleet {
        let mut rng = Rng::new(seed);
        let mut nodes: Vec<OwnedNode> = (0..n)
            .map(|i| {
                let shape_index = usize::try_from(rng.below(4)).unwrap_or(0);
                let capacity = SHAPES.get(shape_index).copied().unwrap_or(SHAPES[0]);
                let level = rng.below(101);
                let allocated = Resources::from_fn(|d| {
                    let jitter = rng.below(21);
                    let percent = level.saturating_add(jitter).saturating_sub(10).min(100);
                    capacity.get(d).saturating_mul(percent) / 100
                });
                let state = match rng.below(100) {
                    0..=4 => NodeState::Cordoned,
                    5..=6 => NodeState::Offline,
                    _ => NodeState::Online,
                };
                OwnedNode {
                    name: node_name(i),
                    state,
                    capacity,
                    allocated,
                }
            })
            .collect();
        for i in (1..nodes.len()).rev() {
            let j = usize::try_from(rng.below(u64::try_from(i).unwrap_or(0).saturating_add(1)))
                .unwrap_or(0);
            nodes.swap(i, j);
        }
        Fleet { nodes }
    }

    /// `n` identical Online nodes (64 threads, 256 GB, 8000 GB) where the first `full` by name
    /// are full: the shape of the index's target case (10,000 nodes, 9,000 full).
    pub fn first_full(n: usize, full: usize) -> Fleet {
        let capacity = SHAPES[1];
        let nodes = (0..n)
            .map(|i| OwnedNode {
                name: node_name(i),
                state: NodeState::Online,
                capacity,
                allocated: if i < full { capacity } else { Resources::ZERO },
            })
            .collect();
        Fleet { nodes }
    }

    pub fn views(&self) -> Vec<NodeView<'_>> {
        self.nodes
            .iter()
            .map(|node| NodeView {
                name: &node.name,
                state: node.state,
                capacity: node.capacity,
                allocated: node.allocated,
            })
            .collect()
    }
}

/// `nodes` ledgers of mixed shapes holding `per_node` entries each, for the consolidation: each
/// node is filled to its own random level (5–85% of its capacity in every dimension, with
/// jitter), split into entries of random sizes; 5% Cordoned and 2% Offline, as in
/// [`Fleet::mixed`].
pub fn consolidation_ledgers(nodes: usize, per_node: usize, seed: u64) -> Vec<NodeLedger> {
    let mut rng = Rng::new(seed);
    let per_node_u64 = u64::try_from(per_node).unwrap_or(u64::MAX).max(1);
    (0..nodes)
        .filter_map(|i| {
            let shape_index = usize::try_from(rng.below(4)).unwrap_or(0);
            let capacity = SHAPES.get(shape_index).copied().unwrap_or(SHAPES[0]);
            let level = rng.below(81).saturating_add(5);
            let entries = (0..per_node)
                .map(|j| {
                    // Each entry takes 0.5x to 1.5x of an even share of the node's level.
                    let resources = Resources::from_fn(|d| {
                        let share = (capacity.get(d).saturating_mul(level) / 100)
                            .checked_div(per_node_u64)
                            .unwrap_or(0);
                        let scale = rng.below(101).saturating_add(50);
                        (share.saturating_mul(scale) / 100).max(1)
                    });
                    Entry {
                        uid: format!("t-{i:06}-{j:03}").into(),
                        tenant: format!("bench/t-{i:06}-{j:03}").into(),
                        resources,
                        replicas: None,
                    }
                })
                .collect();
            let state = match rng.below(100) {
                0..=4 => NodeState::Cordoned,
                5..=6 => NodeState::Offline,
                _ => NodeState::Online,
            };
            NodeLedger::new(node_name(i), state, capacity, entries).ok()
        })
        .collect()
}

/// The purchase case's five classes (whole cents per month): general-purpose machines whose
/// price per thread falls as they grow, and one storage machine.
pub fn node_classes() -> Vec<NodeClassOffer> {
    let class = |name: &str, capacity: Resources, cents: u64| NodeClassOffer {
        name: name.to_owned(),
        capacity,
        monthly_cost: Some(cents),
        limit: None,
        in_use: 0,
    };
    vec![
        class("small", Resources::new(12, 48, 1_000), 4_400),
        class("medium", Resources::new(16, 64, 2_000), 6_400),
        class("large", Resources::new(32, 128, 4_000), 10_900),
        class("xlarge", Resources::new(96, 384, 8_000), 20_900),
        class("storage", Resources::new(16, 64, 24_000), 10_400),
    ]
}

/// `n` waiting tenants of mixed sizes ([`footprint`]), in queue order.
pub fn waiting_tenants(n: usize, seed: u64) -> Vec<WaitingTenant> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| WaitingTenant {
            tenant: format!("bench/w-{i:04}"),
            footprint: footprint(&mut rng),
        })
        .collect()
}

/// A tenant of the mix: 60% small (1–4 threads), 30% medium (4–16), 8% large (16–48), about
/// 4 GB of memory per thread, and 2% storage-heavy (5–15 TB).
pub fn footprint(rng: &mut Rng) -> Resources {
    let mut between = |low: u64, high: u64| {
        low.saturating_add(rng.below(high.saturating_sub(low).saturating_add(1)))
    };
    match between(0, 99) {
        0..=59 => {
            let threads = between(1, 4);
            Resources::new(
                threads,
                threads.saturating_mul(between(2, 4)),
                between(20, 200),
            )
        }
        60..=89 => {
            let threads = between(4, 16);
            Resources::new(
                threads,
                threads.saturating_mul(between(3, 5)),
                between(100, 1_000),
            )
        }
        90..=97 => {
            let threads = between(16, 48);
            Resources::new(threads, threads.saturating_mul(4), between(500, 4_000))
        }
        _ => Resources::new(between(2, 4), between(8, 32), between(5_000, 15_000)),
    }
}
