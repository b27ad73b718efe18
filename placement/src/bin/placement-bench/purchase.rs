//! The purchase case: waiting tenants of mixed sizes and five classes
//! ([`crate::fleet::waiting_tenants`], [`crate::fleet::node_classes`]), planned under each
//! policy with nothing in flight: the time one plan takes, and its cost against a lower bound.
//!
//! The lower bound: per dimension, the total demand (the sum of the footprints) times the
//! lowest price per unit of that dimension among the classes (`monthly_cost / capacity`); the
//! largest of the three. Any purchase that holds the demand pays at least that in every
//! dimension; whole nodes, limits and the policy's placement only add to it.

use std::hint::black_box;
use std::time::Instant;

use placement::{Cost, Dimension, NodeClassOffer, Policy, Resources, WaitingTenant, purchase};

use crate::fleet::{node_classes, waiting_tenants};

/// One policy's purchase, timed.
#[derive(Clone, Debug)]
pub struct PurchaseRow {
    pub policy: Policy,
    pub tenants: usize,
    pub nodes: usize,
    /// New nodes per class, in the classes' order.
    pub per_class: Vec<(String, usize)>,
    pub unplaceable: usize,
    pub cost: Cost,
    /// Cents per month.
    pub lower_bound: f64,
    /// The dimension that sets the bound.
    pub bound_by: Dimension,
    pub median_ms: f64,
    /// The 99th percentile of the runs (the slowest below 100 runs).
    pub p99_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub runs: usize,
}

/// The lower bound (see the module doc), in cents per month, and the dimension that sets it.
pub fn lower_bound(classes: &[NodeClassOffer], waiting: &[WaitingTenant]) -> (f64, Dimension) {
    let demand = waiting.iter().fold(Resources::ZERO, |sum, w| {
        sum.checked_add(w.footprint).unwrap_or(sum)
    });
    let per_dimension = |d: Dimension| {
        let cheapest_unit = classes
            .iter()
            .filter_map(|c| {
                let capacity = c.capacity.get(d);
                let cents = c.monthly_cost?;
                (capacity > 0).then(|| cents as f64 / capacity as f64)
            })
            .fold(f64::INFINITY, f64::min);
        demand.get(d) as f64 * cheapest_unit
    };
    Dimension::ALL
        .into_iter()
        .map(|d| (per_dimension(d), d))
        .fold((0.0, Dimension::Threads), |best, next| {
            if next.0 > best.0 { next } else { best }
        })
}

/// Each policy's purchase for `tenants` waiting tenants, each timed over `runs` plans.
pub fn purchase_rows(tenants: usize, runs: usize) -> Vec<PurchaseRow> {
    let classes = node_classes();
    let waiting = waiting_tenants(tenants, 0x5EED_0003);
    let (lower_bound, bound_by) = lower_bound(&classes, &waiting);
    Policy::ALL
        .into_iter()
        .map(|policy| {
            let bought = purchase(policy, &classes, &[], &waiting);
            let mut times: Vec<f64> = (0..runs.max(1))
                .map(|_| {
                    let start = Instant::now();
                    black_box(purchase(
                        policy,
                        black_box(&classes),
                        &[],
                        black_box(&waiting),
                    ));
                    start.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let per_class = classes
                .iter()
                .map(|c| {
                    let count = bought.requests.iter().filter(|n| n.class == c.name).count();
                    (c.name.clone(), count)
                })
                .collect();
            PurchaseRow {
                policy,
                tenants,
                nodes: bought.requests.len(),
                per_class,
                unplaceable: bought.unplaceable.len(),
                cost: bought.cost,
                lower_bound,
                bound_by,
                median_ms: times.get(times.len() / 2).copied().unwrap_or(f64::NAN),
                p99_ms: times
                    .get(
                        times
                            .len()
                            .saturating_mul(99)
                            .div_ceil(100)
                            .saturating_sub(1),
                    )
                    .copied()
                    .unwrap_or(f64::NAN),
                min_ms: times.first().copied().unwrap_or(f64::NAN),
                max_ms: times.last().copied().unwrap_or(f64::NAN),
                runs: times.len(),
            }
        })
        .collect()
}

/// The table, in Markdown.
pub fn render_purchase(rows: &[PurchaseRow]) -> String {
    let mut out = String::new();
    if let Some(first) = rows.first() {
        out.push_str(&format!(
            "Purchase planning: {} waiting tenants of mixed sizes, five classes, nothing in \
             flight\nlower bound {:.2} per month (set by {}: total demand x the lowest price \
             per unit among the classes)\n\n",
            first.tenants,
            first.lower_bound / 100.0,
            first.bound_by
        ));
    }
    out.push_str(
        "| policy | median ms | min-max ms | runs | nodes | per class | cost per month | \
         cost / bound | left out |\n|---|---:|---:|---:|---:|---|---:|---:|---:|\n",
    );
    for row in rows {
        let classes: Vec<String> = row
            .per_class
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| format!("{n} {name}"))
            .collect();
        let ratio = row.cost.monthly as f64 / row.lower_bound;
        // The goal: 10 ms per 1,000 waiting tenants (10 ms at 1,000, 100 ms at 10,000).
        let goal_ms = row.tenants as f64 / 100.0;
        let goal = if row.median_ms <= goal_ms {
            String::new()
        } else {
            format!(" (> {goal_ms} ms)")
        };
        out.push_str(&format!(
            "| {} | {:.2}{goal} | {:.2}-{:.2} | {} | {} | {} | {:.2} | {:.3} | {} |\n",
            row.policy,
            row.median_ms,
            row.min_ms,
            row.max_ms,
            row.runs,
            row.nodes,
            classes.join(", "),
            row.cost.monthly as f64 / 100.0,
            ratio,
            row.unplaceable
        ));
    }
    out
}

/// One JSON object per row (policy), a line each.
pub fn json(rows: &[PurchaseRow]) -> String {
    rows.iter()
        .map(|row| {
            format!(
                "{{\"tenants\":{},\"policy\":\"{}\",\"nodes\":{},\"left_out\":{},\"median_ms\":{:.4},\"p99_ms\":{:.4},\"runs\":{},\"cost_cents\":{},\"lower_bound_cents\":{:.2},\"cost_over_bound\":{:.4}}}\n",
                row.tenants,
                row.policy,
                row.nodes,
                row.unplaceable,
                row.median_ms,
                row.p99_ms,
                row.runs,
                row.cost.monthly,
                row.lower_bound,
                row.cost.monthly as f64 / row.lower_bound
            )
        })
        .collect()
}
