//! Placement policies as data: which eligible node takes a request.
//!
//! Every policy chooses among the same candidates, the eligible nodes (Online, not over their
//! capacity) whose free room covers the whole request, and gives the same answer when there are
//! none: `Choice::NoFit` built by [`no_fit`]. So a request fits under one policy exactly when
//! it fits under all of them; the policies differ only in which candidate wins. No policy
//! depends on the order the nodes are given in. [`best_fit_among`] is BestFit's rule over
//! candidates the caller chooses (the consolidation, rebalance.rs, leaves some out). Policies
//! know nodes only as views: over a fleet of ledgers (fleet.rs) each node is weighed by its own
//! overcommit, and a tenant's node selector narrows the candidates to the nodes carrying its
//! labels.
//!
//! | policy        | winner among the candidates                                        | ties        |
//! |---------------|--------------------------------------------------------------------|-------------|
//! | `FirstFit`    | the first by name ([`first_fit`], unchanged)                       | -           |
//! | `BestFit`     | the smallest weighted slack `S` (packs: the tightest node)          | first name  |
//! | `LeastLoaded` | the largest weighted slack `S` (spreads: the emptiest node)         | first name  |
//! | `RoundRobin`  | eligible nodes in name order, start at position `turn % count`,    | -           |
//! |               | wrap around, the first that fits (never one that does not fit)     |             |
//!
//! ## Weighted, normalised slack
//!
//! For a candidate node and a request, per dimension `d` (threads, memory, storage):
//!
//! ```text
//!   S = Σ_d  w_d × (free_d − request_d) / capacity_d        w_d = 1 / ratio_d
//! ```
//!
//! - `capacity_d` is the effective capacity (physical × overcommit ratio, see
//!   [`crate::overcommit`]) and `free_d = capacity_d − allocated_d`, so each fraction is the share
//!   of the node left over in that dimension after the placement, between 0 and 1: dividing by
//!   the capacity makes threads, GB of memory and GB of storage comparable (the seed's
//!   normalisation);
//! - `ratio_d` is the node's overcommit ratio in that dimension. A dimension that is overcommitted
//!   more (CPU at 4x) is a looser constraint, so its leftover counts less: weight `1 / 4`. A
//!   dimension held at 1x counts fully. With no overcommit every weight is 1 and `S` is the plain
//!   sum of the three normalised leftovers;
//! - a dimension with capacity 0 contributes 0 (nothing is left over; only a request of 0 fits).
//!
//! `LeastLoaded` aggregates the dimensions the same way: "most normalised free room" is the
//! largest `S`, the room left after placing, in the same weighted units. Using one score for both
//! makes them exact opposites on the same data.
//!
//! ## Exactness
//!
//! `S` is a sum of three fractions `slack / (ratio_per_mille × capacity)` (times 1000), which
//! integer arithmetic compares exactly: cross-multiplied, the two sides need up to ~460 bits, so
//! [`Slack`] compares them with a small fixed 512-bit integer. To keep the common case fast, each
//! score also carries an `f64` approximation whose error is bounded: every term takes at most
//! five roundings (two integer-to-float conversions, two products, one division; the per-mille
//! ratio converts exactly), the sum two more, so the approximation is within a relative 1e-15
//! of the exact value. When two
//! approximations differ by more than a relative 1e-12 the float comparison is the exact
//! comparison; otherwise the 512-bit comparison decides. The order is therefore the exact
//! rational order on every machine: equal scores (`1/3 + 2/3` against `1/2 + 1/2`) tie, and ties
//! go to the first name.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use crate::fit::{Choice, NodeView, first_fit, no_fit};
use crate::overcommit::Overcommit;
use crate::resources::{Dimension, Resources};

/// How a node is chosen for a new reservation. The default is `FirstFit`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Policy {
    /// The first eligible fitting node by name.
    #[default]
    FirstFit,
    /// The eligible fitting node with the least weighted, normalised slack after placement.
    BestFit,
    /// The eligible fitting node with the most weighted, normalised slack after placement.
    LeastLoaded,
    /// Eligible nodes in name order from position `turn % count`, the first that fits.
    RoundRobin,
}

impl Policy {
    /// Every policy, in the order they are documented.
    pub const ALL: [Policy; 4] = [
        Policy::FirstFit,
        Policy::BestFit,
        Policy::LeastLoaded,
        Policy::RoundRobin,
    ];

    /// The name used in configuration: `FirstFit`, `BestFit`, `LeastLoaded`, `RoundRobin`.
    pub fn name(self) -> &'static str {
        match self {
            Policy::FirstFit => "FirstFit",
            Policy::BestFit => "BestFit",
            Policy::LeastLoaded => "LeastLoaded",
            Policy::RoundRobin => "RoundRobin",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy name that is not one of [`Policy::ALL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownPolicy(pub String);

impl fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown placement policy {:?}: expected one of FirstFit, BestFit, LeastLoaded, \
             RoundRobin",
            self.0
        )
    }
}

impl std::error::Error for UnknownPolicy {}

impl FromStr for Policy {
    type Err = UnknownPolicy;

    /// Exactly the names [`Policy::name`] gives.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|policy| policy.name() == s)
            .ok_or_else(|| UnknownPolicy(s.to_owned()))
    }
}

/// Chooses a node for `request` by `policy`, with no overcommit weighting (every weight 1).
/// `turn` only matters to `RoundRobin` (the controller's count of decisions made, say).
pub fn place<'a>(
    policy: Policy,
    nodes: &[NodeView<'a>],
    request: &Resources,
    turn: u64,
) -> Choice<'a> {
    place_by(policy, nodes, request, turn, |_| Overcommit::NONE)
}

/// [`place`] on a fleet with one overcommit profile: it weighs `BestFit` and `LeastLoaded`
/// scores. The views' capacities must already be effective (see [`Overcommit::effective`]); a
/// `NodeLedger`'s view is.
pub fn place_with<'a>(
    policy: Policy,
    nodes: &[NodeView<'a>],
    request: &Resources,
    turn: u64,
    overcommit: &Overcommit,
) -> Choice<'a> {
    place_by(policy, nodes, request, turn, |_| *overcommit)
}

/// The one place every policy goes through: the same candidates, the same no-fit answer.
/// `weights(i)` is the overcommit of `nodes[i]` (a fleet of ledgers gives each its own).
pub(crate) fn place_by<'a>(
    policy: Policy,
    nodes: &[NodeView<'a>],
    request: &Resources,
    turn: u64,
    weights: impl Fn(usize) -> Overcommit,
) -> Choice<'a> {
    let chosen = match policy {
        Policy::FirstFit => return first_fit(nodes, request),
        Policy::BestFit => by_slack(weighted(nodes, &weights), request, Ordering::Less),
        Policy::LeastLoaded => by_slack(weighted(nodes, &weights), request, Ordering::Greater),
        Policy::RoundRobin => round_robin(nodes, request, turn),
    };
    match chosen {
        Some(name) => Choice::Place(name),
        None => Choice::NoFit(no_fit(
            nodes.iter().filter(|node| node.takes_new_tenants()),
            request,
        )),
    }
}

/// Each view with its overcommit weights.
fn weighted<'v, 'a>(
    nodes: &'v [NodeView<'a>],
    weights: &'v impl Fn(usize) -> Overcommit,
) -> impl Iterator<Item = (&'v NodeView<'a>, Overcommit)> {
    nodes.iter().enumerate().map(|(i, node)| (node, weights(i)))
}

/// BestFit among some nodes of a fleet, each with its own overcommit weights: the node whose
/// weighted slack after taking `request` is the smallest, ties by name; nodes that are not
/// eligible or lack room are skipped. The rule of `place(Policy::BestFit, ..)`, for a caller that
/// chooses the candidates itself (the consolidation, rebalance.rs, leaves out the nodes it
/// empties). `None` when none fits.
pub fn best_fit_among<'v, 'a: 'v>(
    candidates: impl IntoIterator<Item = (&'v NodeView<'a>, Overcommit)>,
    request: &Resources,
) -> Option<&'a str> {
    by_slack(candidates, request, Ordering::Less)
}

/// The candidate whose slack compares as `want` against every other (`Less`: smallest), ties by
/// name.
fn by_slack<'v, 'a: 'v>(
    candidates: impl IntoIterator<Item = (&'v NodeView<'a>, Overcommit)>,
    request: &Resources,
    want: Ordering,
) -> Option<&'a str> {
    let mut best: Option<(Slack, &'a str)> = None;
    for (node, overcommit) in candidates {
        let Some(slack) = weighted_slack(node, request, &overcommit) else {
            continue;
        };
        let better = match &best {
            None => true,
            Some((best_slack, best_name)) => match slack.cmp(best_slack) {
                Ordering::Equal => node.name < *best_name,
                order => order == want,
            },
        };
        if better {
            best = Some((slack, node.name));
        }
    }
    best.map(|(_, name)| name)
}

/// Eligible nodes in name order, from position `turn % count`, wrapping: the first that fits.
/// Linear time: the start is found by selection, not by sorting.
fn round_robin<'a>(nodes: &[NodeView<'a>], request: &Resources, turn: u64) -> Option<&'a str> {
    let mut eligible: Vec<&'a str> = nodes
        .iter()
        .filter(|node| node.takes_new_tenants())
        .map(|node| node.name)
        .collect();
    let count = u64::try_from(eligible.len()).ok()?;
    let start = usize::try_from(turn.checked_rem(count)?).ok()?;
    if start >= eligible.len() {
        return None;
    }
    let (_, start_name, _) = eligible.select_nth_unstable(start);
    let start_name: &str = start_name;
    // The first fitting name at or after the start, else (wrapping) the first fitting name.
    let mut from_start: Option<&'a str> = None;
    let mut wrapped: Option<&'a str> = None;
    for node in nodes {
        if !node.takes_new_tenants() || !request.fits_within(&node.free()) {
            continue;
        }
        let slot = if node.name >= start_name {
            &mut from_start
        } else {
            &mut wrapped
        };
        if slot.is_none_or(|current| node.name < current) {
            *slot = Some(node.name);
        }
    }
    from_start.or(wrapped)
}

/// The weighted, normalised slack `S` a node would have after taking `request` (see the module
/// doc), or `None` when the node is not eligible or the request does not fit. The weights are
/// `1 / ratio` of `overcommit`; the node's capacity must already be the effective one.
pub fn weighted_slack(
    node: &NodeView<'_>,
    request: &Resources,
    overcommit: &Overcommit,
) -> Option<Slack> {
    if !node.takes_new_tenants() {
        return None;
    }
    let free = node.free();
    if !request.fits_within(&free) {
        return None;
    }
    let leftover = free.saturating_sub(*request);
    let term = |d: Dimension| {
        let capacity = node.capacity.get(d);
        Term {
            // A dimension with no capacity has nothing left over.
            slack: if capacity == 0 { 0 } else { leftover.get(d) },
            capacity,
            per_mille: overcommit.per_mille(d).max(1),
        }
    };
    let terms = Dimension::ALL.map(term);
    let approx = terms.iter().map(Term::approx).sum();
    Some(Slack { terms, approx })
}

/// One dimension of a slack score: `slack / capacity × 1000 / per_mille`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Term {
    slack: u64,
    capacity: u64,
    per_mille: u32,
}

impl Term {
    fn approx(&self) -> f64 {
        if self.capacity == 0 {
            return 0.0;
        }
        (self.slack as f64 * 1000.0) / (self.capacity as f64 * f64::from(self.per_mille))
    }

    /// The term's exact denominator, up to the common factor 1000: `per_mille × capacity`
    /// (below 2^14 × 2^64 = 2^78), or 1 for a dimension with no capacity.
    fn denominator(&self) -> u128 {
        if self.capacity == 0 {
            return 1;
        }
        u128::from(self.per_mille).saturating_mul(u128::from(self.capacity))
    }
}

/// A weighted, normalised slack score (see the module doc). Ordered by its exact rational
/// value; equality is equality of that value.
#[derive(Clone, Copy, Debug)]
pub struct Slack {
    terms: [Term; 3],
    approx: f64,
}

impl Slack {
    /// The score as a float, for people and plots; comparisons use the exact value.
    pub fn as_f64(&self) -> f64 {
        self.approx
    }

    /// The exact value as a fraction `numerator / denominator` of 512-bit integers (the common
    /// factor 1000 of every term left out).
    fn fraction(&self) -> (Wide, Wide) {
        let [a, b, c] = self.terms;
        let (da, db, dc) = (
            Wide::from_u128(a.denominator()),
            Wide::from_u128(b.denominator()),
            Wide::from_u128(c.denominator()),
        );
        let slack = |t: Term| Wide::from_u128(u128::from(t.slack));
        // a/da + b/db + c/dc = (a·db·dc + b·da·dc + c·da·db) / (da·db·dc)
        let numerator = slack(a)
            .mul(&db)
            .mul(&dc)
            .add(&slack(b).mul(&da).mul(&dc))
            .add(&slack(c).mul(&da).mul(&db));
        (numerator, da.mul(&db).mul(&dc))
    }

    fn cmp_exact(&self, other: &Slack) -> Ordering {
        // Identical nodes (the usual tie) need no arithmetic.
        if self.terms == other.terms {
            return Ordering::Equal;
        }
        let (n1, d1) = self.fraction();
        let (n2, d2) = other.fraction();
        // Both denominators are positive: n1/d1 ? n2/d2  ⇔  n1·d2 ? n2·d1. Each numerator is
        // below 3 × 2^64 × 2^156 < 2^222 and each denominator below 2^234, so the products stay
        // below 2^456: 512 bits never wrap.
        n1.mul(&d2).cmp_value(&n2.mul(&d1))
    }
}

impl Ord for Slack {
    fn cmp(&self, other: &Self) -> Ordering {
        let (x, y) = (self.approx, other.approx);
        // Each approximation is within a relative 1e-15 of its exact value (module doc), so a
        // gap wider than 1e-12 of their sum has the sign of the exact gap.
        let margin = (x + y) * 1e-12;
        if x - y > margin {
            Ordering::Greater
        } else if y - x > margin {
            Ordering::Less
        } else {
            self.cmp_exact(other)
        }
    }
}

impl PartialOrd for Slack {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Slack {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Slack {}

/// An unsigned 512-bit integer, little-endian 64-bit limbs; only what the exact comparison needs.
/// Operations keep the low 512 bits, and the callers' bounds keep every value below that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Wide([u64; 8]);

impl Wide {
    fn from_u128(value: u128) -> Self {
        let mut limbs = [0u64; 8];
        limbs[0] = value as u64;
        limbs[1] = value.wrapping_shr(64) as u64;
        Wide(limbs)
    }

    fn add(&self, other: &Wide) -> Wide {
        let mut out = [0u64; 8];
        let mut carry = false;
        for ((slot, a), b) in out.iter_mut().zip(self.0).zip(other.0) {
            let (sum, over1) = a.overflowing_add(b);
            let (sum, over2) = sum.overflowing_add(u64::from(carry));
            *slot = sum;
            carry = over1 || over2;
        }
        Wide(out)
    }

    /// How many limbs are in use (the rest are 0).
    fn len(&self) -> usize {
        self.0
            .iter()
            .rposition(|limb| *limb != 0)
            .map_or(0, |top| top.saturating_add(1))
    }

    fn mul(&self, other: &Wide) -> Wide {
        let mut out = [0u64; 8];
        let used = other.len();
        for (i, a) in self.0.into_iter().enumerate().take(self.len()) {
            if a == 0 {
                continue;
            }
            let mut carry: u128 = 0;
            // Row `i` writes limbs `i ..= i + used`; `i + used` was never written by an earlier
            // row (they stop below it), so storing the final carry there cannot carry further.
            for (j, b) in other.0.into_iter().enumerate().take(used.saturating_add(1)) {
                let Some(slot) = i.checked_add(j).and_then(|k| out.get_mut(k)) else {
                    break;
                };
                // (2^64−1)² + 2·(2^64−1) = 2^128 − 1: the wrapping forms never wrap here.
                let t = u128::from(a)
                    .wrapping_mul(u128::from(b))
                    .wrapping_add(u128::from(*slot))
                    .wrapping_add(carry);
                *slot = t as u64;
                carry = t.wrapping_shr(64);
            }
        }
        Wide(out)
    }

    fn cmp_value(&self, other: &Wide) -> Ordering {
        self.0.iter().rev().cmp(other.0.iter().rev())
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::arithmetic_side_effects
    )]
    use super::*;
    use crate::fit::{NoFit, NodeState, Shortfall};
    use crate::testing::ledger;

    fn r(t: u64, m: u64, s: u64) -> Resources {
        Resources::new(t, m, s)
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for policy in Policy::ALL {
            assert_eq!(policy.to_string().parse::<Policy>(), Ok(policy));
        }
        assert_eq!(Policy::default(), Policy::FirstFit);
        assert_eq!(
            "bestfit".parse::<Policy>().unwrap_err().to_string(),
            "unknown placement policy \"bestfit\": expected one of FirstFit, BestFit, \
             LeastLoaded, RoundRobin"
        );
    }

    /// The seed's four hosts of 8 cores: three with 3 free, one with 7 (memory and storage as
    /// plentiful as each other, so threads decide).
    fn four_hosts() -> Vec<NodeView<'static>> {
        vec![
            ledger("h1").capacity(8, 32, 100).allocated(5, 0, 0).view(),
            ledger("h2").capacity(8, 32, 100).allocated(5, 0, 0).view(),
            ledger("h3").capacity(8, 32, 100).allocated(5, 0, 0).view(),
            ledger("h4").capacity(8, 32, 100).allocated(1, 0, 0).view(),
        ]
    }

    #[test]
    fn policy_table() {
        struct Case {
            name: &'static str,
            nodes: Vec<NodeView<'static>>,
            request: Resources,
            turn: u64,
            want: [&'static str; 4], // FirstFit, BestFit, LeastLoaded, RoundRobin
        }
        let cases = [
            Case {
                // S after placing 1·1·1 (weights 1):
                //   h1..h3: (3−1)/8 + (32−1)/32 + (100−1)/100 = 0.25 + 0.96875 + 0.99 = 2.20875
                //   h4:     (7−1)/8 + 31/32 + 99/100          = 0.75 + 0.96875 + 0.99 = 2.70875
                // BestFit: smallest, h1..h3 tie → h1. LeastLoaded: largest → h4.
                // RoundRobin turn 6: 6 % 4 = 2 → starts at h3, which fits.
                name: "a 1-core request on the seed's four hosts",
                nodes: four_hosts(),
                request: r(1, 1, 1),
                turn: 6,
                want: ["h1", "h1", "h4", "h3"],
            },
            Case {
                // Only h4 (7 free) covers 6 cores: every policy agrees. RoundRobin turn 1 starts
                // at h2 (3 free < 6), then h3 (no), then h4.
                name: "the seed's 6-core request fits only the host with 7",
                nodes: four_hosts(),
                request: r(6, 1, 1),
                turn: 1,
                want: ["h4", "h4", "h4", "h4"],
            },
            Case {
                // h1..h3 have 3 threads free, h4 has 8 − 7 = 1. RoundRobin turn 3 starts at
                // position 3, h4: 1 < 2, so it wraps to h1 (3 ≥ 2).
                // S for 2·0·0 on h1..h3: (3−2)/8 + 32/32 + 100/100 = 2.125 each, a tie, so
                // BestFit and LeastLoaded both take h1.
                name: "round robin wraps past the end of the name order",
                nodes: vec![
                    ledger("h1").capacity(8, 32, 100).allocated(5, 0, 0).view(),
                    ledger("h2").capacity(8, 32, 100).allocated(5, 0, 0).view(),
                    ledger("h3").capacity(8, 32, 100).allocated(5, 0, 0).view(),
                    ledger("h4").capacity(8, 32, 100).allocated(7, 0, 0).view(),
                ],
                request: r(2, 0, 0),
                turn: 3,
                want: ["h1", "h1", "h1", "h1"],
            },
            Case {
                // Request 2·4·0. a (64 thr, 256 GB, half used) keeps
                // (32−2)/64 + (128−4)/256 + 10/10 = 0.46875 + 0.484375 + 1 = 1.953125;
                // b (8 thr, 16 GB) keeps (2−2)/8 + (4−4)/16 + 10/10 = 1. In raw units a would
                // leave 30 threads + 124 GB against b's 0 + 0; normalised, the comparison is the
                // same here but no longer dominated by GB. BestFit b, LeastLoaded a.
                name: "dimensions are normalised by capacity",
                nodes: vec![
                    ledger("a")
                        .capacity(64, 256, 10)
                        .allocated(32, 128, 0)
                        .view(),
                    ledger("b").capacity(8, 16, 10).allocated(6, 12, 0).view(),
                ],
                request: r(2, 4, 0),
                turn: 1,
                // RoundRobin turn 1 starts at b, which fits.
                want: ["a", "b", "a", "b"],
            },
            Case {
                // Exact ties: x leaves 1/3 of threads and 2/3 of memory, y leaves 1/2 and 1/2,
                // storage full on both: 1/3 + 2/3 = 1 = 1/2 + 1/2. In floats 1/3 + 2/3 may not
                // equal 1/2 + 1/2 bit for bit; exactly they tie, and the first name wins both ways.
                name: "equal sums of different fractions tie and go to the first name",
                nodes: vec![
                    ledger("y").capacity(2, 2, 1).allocated(1, 1, 1).view(),
                    ledger("x").capacity(3, 3, 1).allocated(2, 1, 1).view(),
                ],
                request: r(0, 0, 0),
                turn: 0,
                want: ["x", "x", "x", "x"],
            },
        ];
        for case in cases {
            for (policy, want) in Policy::ALL.into_iter().zip(case.want) {
                assert_eq!(
                    place(policy, &case.nodes, &case.request, case.turn),
                    Choice::Place(want),
                    "{}: {policy}",
                    case.name
                );
            }
        }
    }

    #[test]
    fn overcommit_weights_change_which_node_is_the_best_fit() {
        // Two nodes, request 1·1·0, storage left whole on both (10/10 = 1, weight 1).
        //   p: threads (4−1)/4 = 0.75 left, memory (2−1)/4 = 0.25 left
        //   q: threads (2−1)/4 = 0.25 left, memory (4−1)/4 = 0.75 left
        // Weights 1: p = 0.75 + 0.25 + 1 = 2 = q → tie, BestFit p (first name).
        // CPU 4x (weight 1/4) — capacities given as already effective (4 threads each):
        //   p = 0.75/4 + 0.25 + 1 = 1.4375,  q = 0.25/4 + 0.75 + 1 = 1.8125 → BestFit p
        // Memory 4x instead (weight 1/4 on memory):
        //   p = 0.75 + 0.25/4 + 1 = 1.8125,  q = 0.25 + 0.75/4 + 1 = 1.4375 → BestFit q
        // The loose dimension's leftover matters less, so the node tight in the strict dimension
        // is the better fit. LeastLoaded picks the other one each time.
        let nodes = vec![
            ledger("p").capacity(4, 4, 10).allocated(0, 2, 0).view(),
            ledger("q").capacity(4, 4, 10).allocated(2, 0, 0).view(),
        ];
        let request = r(1, 1, 0);
        let cpu4 = Overcommit::from_ratios(4.0, 1.0, 1.0).unwrap();
        let mem4 = Overcommit::from_ratios(1.0, 4.0, 1.0).unwrap();
        let best = |o: &Overcommit| place_with(Policy::BestFit, &nodes, &request, 0, o);
        let least = |o: &Overcommit| place_with(Policy::LeastLoaded, &nodes, &request, 0, o);
        assert_eq!(best(&Overcommit::NONE), Choice::Place("p"));
        assert_eq!(least(&Overcommit::NONE), Choice::Place("p"));
        assert_eq!(best(&cpu4), Choice::Place("p"));
        assert_eq!(least(&cpu4), Choice::Place("q"));
        assert_eq!(best(&mem4), Choice::Place("q"));
        assert_eq!(least(&mem4), Choice::Place("p"));
        let p = weighted_slack(&nodes[0], &request, &cpu4).unwrap();
        let q = weighted_slack(&nodes[1], &request, &cpu4).unwrap();
        assert_eq!((p.as_f64(), q.as_f64()), (1.4375, 1.8125));
    }

    #[test]
    fn no_policy_picks_an_ineligible_node_and_all_agree_on_no_fit() {
        let nodes = vec![
            ledger("a")
                .state(NodeState::Cordoned)
                .capacity(64, 64, 64)
                .view(),
            // Over capacity (4 threads held on 2): not eligible even though memory is free.
            ledger("b").capacity(2, 64, 64).allocated(4, 0, 0).view(),
            ledger("c").capacity(8, 8, 8).view(),
        ];
        for policy in Policy::ALL {
            for turn in 0..3 {
                assert_eq!(place(policy, &nodes, &r(0, 1, 1), turn), Choice::Place("c"));
                // 9 threads: only c is eligible and it has 8 free → no fit, short by 1.
                assert_eq!(
                    place(policy, &nodes, &r(9, 1, 1), turn),
                    Choice::NoFit(NoFit {
                        eligible_nodes: 1,
                        shortfall: Shortfall {
                            requested: r(9, 1, 1),
                            available: r(8, 8, 8),
                        },
                        selector: None,
                        labelled_nodes: 0,
                    }),
                    "{policy}"
                );
            }
        }
    }

    #[test]
    fn a_request_of_zero_in_a_dimension_with_zero_capacity_fits_and_scores_zero_there() {
        // Storage capacity 0: only storage 0 fits; the term counts 0, not 0/0.
        let nodes = [ledger("a").capacity(4, 4, 0).view()];
        let slack = weighted_slack(&nodes[0], &r(2, 1, 0), &Overcommit::NONE).unwrap();
        // (4−2)/4 + (4−1)/4 + 0 = 0.5 + 0.75 = 1.25
        assert_eq!(slack.as_f64(), 1.25);
        assert!(weighted_slack(&nodes[0], &r(2, 1, 1), &Overcommit::NONE).is_none());
    }

    #[test]
    fn round_robin_turns_walk_the_name_order() {
        // Given out of order; name order a, b, c, d; c is cordoned so positions are a=0, b=1,
        // d=2. b is too small for 5. Turns 0..6: start a, b→(b short)→d, d, a, b→d, d.
        let nodes = vec![
            ledger("d").capacity(8, 8, 8).view(),
            ledger("c")
                .state(NodeState::Cordoned)
                .capacity(8, 8, 8)
                .view(),
            ledger("b").capacity(4, 8, 8).view(),
            ledger("a").capacity(8, 8, 8).view(),
        ];
        let picks: Vec<_> = (0..6)
            .map(|turn| place(Policy::RoundRobin, &nodes, &r(5, 1, 1), turn))
            .collect();
        let want: Vec<_> = ["a", "d", "d", "a", "d", "d"]
            .into_iter()
            .map(Choice::Place)
            .collect();
        assert_eq!(picks, want);
        // u64::MAX % 3 = 0 → a.
        assert_eq!(
            place(Policy::RoundRobin, &nodes, &r(5, 1, 1), u64::MAX),
            Choice::Place("a")
        );
    }

    #[test]
    fn wide_arithmetic_is_exact() {
        let a = Wide::from_u128(u128::MAX);
        // (2^128 − 1)² = 2^256 − 2^129 + 1
        let sq = a.mul(&a);
        assert_eq!(sq.0, [1, 0, u64::MAX - 1, u64::MAX, 0, 0, 0, 0]);
        assert_eq!(
            Wide::from_u128(5).add(&Wide::from_u128(7)),
            Wide::from_u128(12)
        );
        // A carry crosses limbs: (2^128 − 1) + 1 = 2^128.
        let carried = a.add(&Wide::from_u128(1));
        assert_eq!(carried.0, [0, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(
            (carried.len(), sq.len(), Wide::from_u128(0).len()),
            (3, 4, 0)
        );
        assert_eq!(sq.cmp_value(&a), Ordering::Greater);
    }

    #[test]
    fn wide_products_match_u128_and_each_other() {
        let mut state = 0x1234_5678_9ABC_DEF1u64;
        for _ in 0..10_000 {
            let (a, b) = (xorshift(&mut state), xorshift(&mut state) >> (state % 64));
            let product = u128::from(a) * u128::from(b);
            let wa = Wide::from_u128(u128::from(a));
            let wb = Wide::from_u128(u128::from(b));
            assert_eq!(wa.mul(&wb), Wide::from_u128(product));
            // (a·b)·(a·b) computed two ways.
            let square = Wide::from_u128(product).mul(&Wide::from_u128(product));
            assert_eq!(square, wa.mul(&wa).mul(&wb).mul(&wb));
            assert_eq!(square, wb.mul(&wa).mul(&wb.mul(&wa)));
        }
    }

    /// A small deterministic generator for the fast-path check below.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn the_float_shortcut_never_disagrees_with_the_exact_order() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut bounded = |max: u64| xorshift(&mut state) % max.max(1);
        let mut exact_decisions = 0;
        for round in 0..20_000 {
            // Small values with few ratios tie often (the exact path); huge ones take the
            // float path unless they are within 1e-12 of each other.
            let small = round % 2 == 0;
            let mut score = || {
                let scale = if small { 8 } else { Resources::LIMIT };
                let capacity = Resources::from_fn(|_| bounded(scale) + 1);
                let allocated = Resources::from_fn(|d| bounded(capacity.get(d) + 1));
                let n = ledger("n")
                    .capacity_of(capacity)
                    .allocated_of(allocated)
                    .view();
                let ratio = |bounded: &mut dyn FnMut(u64) -> u64| {
                    if small {
                        [1000, 2000, 4000][bounded(3) as usize]
                    } else {
                        bounded(16_000) as u32 + 1
                    }
                };
                let o = Overcommit::from_per_mille(
                    ratio(&mut bounded),
                    ratio(&mut bounded),
                    ratio(&mut bounded),
                )
                .unwrap();
                weighted_slack(&n, &Resources::ZERO, &o).unwrap()
            };
            let (x, y) = (score(), score());
            assert_eq!(x.cmp(&y), x.cmp_exact(&y), "{x:?} vs {y:?}");
            assert_eq!(x.cmp(&x), Ordering::Equal);
            if x.cmp_exact(&y) == Ordering::Equal {
                exact_decisions += 1;
            }
        }
        assert!(exact_decisions > 0, "small values must produce exact ties");
    }

    #[test]
    fn scores_too_close_for_floats_are_ordered_exactly() {
        // L = 2^63 − 1. x keeps (L−1)/L = 1 − 1/L threads, y keeps (L−2)/(L−1) = 1 − 1/(L−1);
        // both round to 1.0 in f64, but 1/L < 1/(L−1), so x keeps more. Memory and storage:
        // capacity 1, nothing left.
        let l = Resources::LIMIT;
        let x = ledger("x").capacity(l, 1, 1).allocated(1, 1, 1).view();
        let y = ledger("y").capacity(l - 1, 1, 1).allocated(1, 1, 1).view();
        let sx = weighted_slack(&x, &Resources::ZERO, &Overcommit::NONE).unwrap();
        let sy = weighted_slack(&y, &Resources::ZERO, &Overcommit::NONE).unwrap();
        assert_eq!(sx.as_f64(), sy.as_f64());
        assert_eq!(sx.cmp(&sy), Ordering::Greater);
        let nodes = [x, y];
        assert_eq!(
            place(Policy::BestFit, &nodes, &Resources::ZERO, 0),
            Choice::Place("y")
        );
        assert_eq!(
            place(Policy::LeastLoaded, &nodes, &Resources::ZERO, 0),
            Choice::Place("x")
        );
    }
}
