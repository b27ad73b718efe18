//! The churn study: simulated weeks of tenants arriving and leaving, with purchases, hand-backs
//! and consolidation on, and the fleet's monthly cost against a lower bound at every point.
//!
//! ```text
//!   every hour (a tick), in this order:
//!   1. departures     plan_release; a waiting tenant that leaves just leaves the queue
//!   2. deliveries     a request due arrives as an Online node; the tenants it was last
//!                     planned for are placed on it first (plan_tenant on that node alone)
//!   3. arrivals       join the queue; the queue is placed oldest first by plan_tenant
//!                     (FirstFit over owned nodes, then bought ones, by name); who fits
//!                     nowhere waits
//!   4. purchase       one purchase::purchase for everyone waiting, the requests in flight
//!                     counted first; its new nodes arrive PROVISIONING ticks later
//!   5. consolidation  while nobody waits: rebalance::consolidate_sources over the fleet,
//!                     bought nodes the sources (the most expensive first), owned ones kept;
//!                     the first node it frees is drained (its moves made) and handed back:
//!                     one node per tick at most
//!   6. hand-back      a bought node empty for HAND_BACK ticks is handed back
//!   7. the point      cost of the bought nodes delivered, and the lower bound for the
//!                     tenants placed
//! ```
//!
//! The fleet starts with [`OWNED`] nodes that cost nothing, and may buy three of the purchase
//! case's classes ([`classes`]: medium, xlarge, storage), without limits. Arrivals per hour are
//! the successes of [`DRAWS`] draws of 1 in [`ODDS`] (binomial, mean 3: Poisson-ish with
//! integer draws only, the same on every machine); footprints are the purchase case's mix
//! ([`crate::fleet::footprint`]); a tenant stays 1 to [`LONGEST_STAY`] hours (uniform, mean
//! 96), so about 300 are present once the first week has passed. Everything comes from the
//! seed.
//!
//! The cost at a point is what the bought nodes delivered then cost per month; requests in
//! flight are not counted (they are shown beside it). The bound is [`lower_bound`] for the
//! tenants placed then, so that a fleet holding them is one of the fleets it bounds: cost >=
//! bound at every point, which the tests check at every tick.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use placement::{
    Dimension, Edit, EditKind, Entry, InFlightRequest, NodeClassOffer, NodeLedger, NodeState, Plan,
    Policy, Resources, TenantWants, WaitingTenant, consolidate_sources, plan_release, plan_tenant,
    purchase,
};

use crate::fleet::{Rng, footprint, node_classes};

/// Ticks per simulated day (a tick is an hour).
pub const TICKS_PER_DAY: u32 = 24;
/// Ticks between a request and its node's arrival.
pub const PROVISIONING: u32 = 3;
/// Ticks a bought node stays empty before it is handed back.
pub const HAND_BACK: u32 = 2;
/// Nodes consolidation drains per tick at most.
pub const CONSOLIDATION_BUDGET: usize = 1;
/// Arrivals per tick: the successes of `DRAWS` draws of 1 in `ODDS` (mean 3).
pub const DRAWS: u32 = 24;
pub const ODDS: u64 = 8;
/// A tenant stays 1 to `LONGEST_STAY` ticks, uniformly.
pub const LONGEST_STAY: u32 = 191;
/// The owned nodes: how many, and each one's capacity (threads, GB memory, GB storage).
pub const OWNED: (usize, Resources) = (4, Resources::new(64, 256, 8_000));

/// The classes that may be bought: medium, xlarge and storage of [`node_classes`].
pub fn classes() -> Vec<NodeClassOffer> {
    node_classes()
        .into_iter()
        .filter(|c| ["medium", "xlarge", "storage"].contains(&c.name.as_str()))
        .collect()
}

/// The lower bound, in cents per month, on what the machines bought to hold tenants asking
/// `demand` in all (the sum of their footprints) cost, beside owned nodes of `owned` capacity in
/// all that cost nothing: the cheapest multiset of whole machines of the priced `classes` whose
/// capacity, added to `owned`, is at least `demand` in every dimension. `None` when no such
/// multiset exists (a dimension needed that no priced class offers).
///
/// Why it is a lower bound: any fleet that holds the tenants has, per dimension, at least their
/// total demand in capacity (each tenant sits whole on one node, within that node's capacity),
/// so its bought machines are such a multiset and cost at least the cheapest one. It ignores
/// how the tenants divide among the nodes (the bin packing), which only adds machines, so it
/// never exceeds the true optimum. It is tighter than the per-dimension price-per-unit bound of
/// `placement-bench purchase` because machines are whole: 17 threads more than the owned nodes
/// hold cost 2 medium (128.00), not 17 x 2.18 (the xlarge's price per thread).
///
/// Found by enumerating how many of each class but the last (up to the count that alone covers
/// every dimension it offers), the last class's count being the fewest that cover the rest,
/// pruned by the per-dimension price-per-unit bound of what is left: a few thousand steps for
/// three classes and a fleet of hundreds of tenants.
pub fn lower_bound(
    classes: &[NodeClassOffer],
    owned: Resources,
    demand: Resources,
) -> Option<u128> {
    let priced: Vec<(Resources, u64)> = classes
        .iter()
        .filter_map(|c| Some((c.capacity, c.monthly_cost?)))
        .collect();
    let mut best = None;
    cover(&priced, demand.saturating_sub(owned), 0, &mut best);
    best
}

/// The cheapest way to add whole machines of `classes` to a purchase costing `spent` so that
/// it covers `need`, into `best` when cheaper (see [`lower_bound`]).
fn cover(classes: &[(Resources, u64)], need: Resources, spent: u128, best: &mut Option<u128>) {
    if need == Resources::ZERO {
        *best = Some(best.map_or(spent, |b| b.min(spent)));
        return;
    }
    let Some((&(capacity, price), rest)) = classes.split_first() else {
        return;
    };
    if let Some(b) = *best {
        // Pruned only when even the fluid bound of what is left (shaved by a relative 1e-9
        // against rounding) cannot beat `best`.
        if spent as f64 + per_unit_bound(classes, need) * (1.0 - 1e-9) >= b as f64 {
            return;
        }
    }
    // The fewest of this class that cover every needed dimension it offers.
    let enough = Dimension::ALL
        .into_iter()
        .filter(|&d| need.get(d) > 0 && capacity.get(d) > 0)
        .map(|d| need.get(d).div_ceil(capacity.get(d)))
        .max()
        .unwrap_or(0);
    let counts: Box<dyn Iterator<Item = u64>> = if rest.is_empty() {
        // The last class: only the fewest that cover everything is worth trying.
        Box::new(std::iter::once(enough))
    } else {
        Box::new(0..=enough)
    };
    for count in counts {
        // Saturating: a sum past the range covers at least as much, never less.
        let added = Resources::from_fn(|d| capacity.get(d).saturating_mul(count));
        let cost = u128::from(price).saturating_mul(u128::from(count));
        cover(
            rest,
            need.saturating_sub(added),
            spent.saturating_add(cost),
            best,
        );
    }
}

/// Per dimension, what is needed times the lowest price per unit among `classes`; the largest.
fn per_unit_bound(classes: &[(Resources, u64)], need: Resources) -> f64 {
    Dimension::ALL
        .into_iter()
        .filter(|&d| need.get(d) > 0)
        .map(|d| {
            let cheapest_unit = classes
                .iter()
                .filter(|(capacity, _)| capacity.get(d) > 0)
                .map(|(capacity, price)| *price as f64 / capacity.get(d) as f64)
                .fold(f64::INFINITY, f64::min);
            need.get(d) as f64 * cheapest_unit
        })
        .fold(0.0, f64::max)
}

/// What a run simulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub seed: u64,
    pub weeks: u32,
}

/// The fleet at the end of one tick, and the counts since the start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Point {
    /// Ticks since the start, this one counted (hours).
    pub hour: u32,
    /// Tenants present: placed or waiting.
    pub present: usize,
    pub placed: usize,
    pub waiting: usize,
    /// Bought nodes delivered and not handed back.
    pub bought_nodes: usize,
    /// Requests not delivered yet.
    pub in_flight: usize,
    /// What the bought nodes delivered cost, cents per month.
    pub cost: u128,
    /// [`lower_bound`] for the tenants placed, cents per month (0 where none exists).
    pub bound: u128,
    /// Machines requested, handed back (empty or drained) and tenants moved, since the start.
    pub bought: usize,
    pub handed_back: usize,
    pub moved: usize,
}

impl Point {
    /// Cost over bound; `None` while the owned nodes hold everyone (a bound of 0).
    pub fn ratio(&self) -> Option<f64> {
        (self.bound > 0).then(|| self.cost as f64 / self.bound as f64)
    }

    /// The end of a simulated day.
    pub fn ends_a_day(&self) -> bool {
        self.hour.is_multiple_of(TICKS_PER_DAY)
    }
}

/// A run: every tick's point.
#[derive(Clone, Debug)]
pub struct Run {
    pub settings: Settings,
    pub points: Vec<Point>,
    /// Wall time of the whole run, milliseconds.
    pub elapsed_ms: f64,
}

impl Run {
    /// The points at the end of each day.
    pub fn days(&self) -> impl Iterator<Item = &Point> {
        self.points.iter().filter(|p| p.ends_a_day())
    }

    /// The end-of-day ratios sorted, the days with a bound of 0 left out.
    fn daily_ratios(&self) -> Vec<f64> {
        let mut ratios: Vec<f64> = self.days().filter_map(Point::ratio).collect();
        ratios.sort_by(f64::total_cmp);
        ratios
    }

    /// The median of the end-of-day ratios, with the lowest and the highest.
    pub fn median_ratio(&self) -> Option<(f64, f64, f64)> {
        let ratios = self.daily_ratios();
        Some((
            *ratios.get(ratios.len() / 2)?,
            *ratios.first()?,
            *ratios.last()?,
        ))
    }

    /// What was paid over what the bound would have paid, over every tick: the sum of the
    /// costs over the sum of the bounds.
    pub fn paid_ratio(&self) -> Option<f64> {
        let sum =
            |f: fn(&Point) -> u128| self.points.iter().map(f).fold(0u128, u128::saturating_add);
        let bound = sum(|p| p.bound);
        (bound > 0).then(|| sum(|p| p.cost) as f64 / bound as f64)
    }
}

/// A bought node in the fleet.
#[derive(Clone, Debug)]
struct Bought {
    class: String,
    price: u64,
    /// The tick since which it holds nothing.
    empty_since: Option<u32>,
}

/// A request in flight.
#[derive(Clone, Debug)]
struct Request {
    name: String,
    class: String,
    capacity: Resources,
    price: u64,
    /// The tick its node arrives.
    due: u32,
    /// The tenants the last purchase planned on it, placed there first when it arrives.
    planned_for: Vec<String>,
}

/// The simulated world (see the module doc).
#[derive(Debug)]
struct World {
    rng: Rng,
    classes: Vec<NodeClassOffer>,
    owned_capacity: Resources,
    /// Owned nodes, then bought ones, in name order.
    ledgers: Vec<NodeLedger>,
    bought: BTreeMap<String, Bought>,
    in_flight: Vec<Request>,
    /// The tenants present, by name (also their UID), and their footprints.
    tenants: BTreeMap<String, Resources>,
    /// Waiting tenants, oldest first.
    queue: Vec<String>,
    /// Tenants leaving, by the tick they leave.
    leaving: BTreeMap<u32, Vec<String>>,
    arrived: u64,
    requested: u64,
    handed_back: usize,
    moved: usize,
}

/// Runs the study (see the module doc).
pub fn run(settings: Settings) -> Run {
    let start = std::time::Instant::now();
    let mut world = World::new(settings.seed);
    let ticks = settings
        .weeks
        .saturating_mul(7)
        .saturating_mul(TICKS_PER_DAY);
    let points = (0..ticks).map(|now| world.tick(now)).collect();
    Run {
        settings,
        points,
        elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
    }
}

impl World {
    fn new(seed: u64) -> World {
        let (count, capacity) = OWNED;
        let ledgers = (0..count)
            .filter_map(|i| {
                NodeLedger::new(format!("owned-{i:02}"), NodeState::Online, capacity, vec![]).ok()
            })
            .collect();
        World {
            rng: Rng::new(seed),
            classes: classes(),
            owned_capacity: capacity
                .checked_mul(u64::try_from(count).unwrap_or(0))
                .unwrap_or(Resources::ZERO),
            ledgers,
            bought: BTreeMap::new(),
            in_flight: Vec::new(),
            tenants: BTreeMap::new(),
            queue: Vec::new(),
            leaving: BTreeMap::new(),
            arrived: 0,
            requested: 0,
            handed_back: 0,
            moved: 0,
        }
    }

    /// One tick, in the module doc's order; the point at its end.
    fn tick(&mut self, now: u32) -> Point {
        self.depart(now);
        self.deliver(now);
        self.arrive(now);
        self.place_waiting();
        self.buy(now);
        self.consolidate();
        self.hand_back(now);
        self.point(now)
    }

    fn depart(&mut self, now: u32) {
        for name in self.leaving.remove(&now).unwrap_or_default() {
            self.tenants.remove(&name);
            if let Some(at) = self.queue.iter().position(|w| *w == name) {
                self.queue.remove(at);
            } else if let Some(edit) = plan_release(&name, &self.ledgers) {
                self.apply(&edit);
            }
        }
    }

    fn deliver(&mut self, now: u32) {
        let (due, later) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|r| r.due == now);
        self.in_flight = later;
        for request in due {
            let Ok(ledger) =
                NodeLedger::new(&request.name, NodeState::Online, request.capacity, vec![])
            else {
                continue;
            };
            self.bought.insert(
                request.name.clone(),
                Bought {
                    class: request.class.clone(),
                    price: request.price,
                    empty_since: None,
                },
            );
            // Bought names sort after owned ones and in request order: pushed in place.
            self.ledgers.push(ledger);
            for tenant in &request.planned_for {
                let node = self.ledgers.last().map(std::slice::from_ref).unwrap_or(&[]);
                if self.queue.contains(tenant)
                    && let Some(edit) = self.placement(tenant, node)
                {
                    self.apply(&edit);
                    self.queue.retain(|w| w != tenant);
                }
            }
        }
    }

    fn arrive(&mut self, now: u32) {
        let count = (0..DRAWS).filter(|_| self.rng.below(ODDS) == 0).count();
        for _ in 0..count {
            self.arrived = self.arrived.saturating_add(1);
            let name = format!("churn/t-{:06}", self.arrived);
            let stays = u32::try_from(self.rng.below(u64::from(LONGEST_STAY)))
                .unwrap_or(0)
                .saturating_add(1);
            self.tenants.insert(name.clone(), footprint(&mut self.rng));
            self.leaving
                .entry(now.saturating_add(stays))
                .or_default()
                .push(name.clone());
            self.queue.push(name);
        }
    }

    /// The queue, oldest first, each placed by FirstFit where it fits.
    fn place_waiting(&mut self) {
        for name in std::mem::take(&mut self.queue) {
            match self.placement(&name, &self.ledgers) {
                Some(edit) => {
                    self.apply(&edit);
                }
                None => self.queue.push(name),
            }
        }
    }

    /// The reservation `plan_tenant` makes for a waiting tenant among `nodes`, if any.
    fn placement(&self, name: &str, nodes: &[NodeLedger]) -> Option<Edit> {
        let wants = TenantWants {
            uid: name,
            tenant: name,
            footprint: *self.tenants.get(name)?,
            suspend: false,
            status_node: None,
            migration: None,
            asked: None,
            node_selector: None,
        };
        match plan_tenant(&wants, nodes) {
            Plan::Edit(edit) if edit.kind == EditKind::Reserve => Some(edit),
            _ => None,
        }
    }

    /// One purchase for everyone waiting, the requests in flight counted first.
    fn buy(&mut self, now: u32) {
        if self.queue.is_empty() {
            return;
        }
        let waiting: Vec<WaitingTenant> = self
            .queue
            .iter()
            .filter_map(|name| {
                Some(WaitingTenant {
                    tenant: name.clone(),
                    footprint: *self.tenants.get(name)?,
                })
            })
            .collect();
        let in_flight: Vec<InFlightRequest> = self
            .in_flight
            .iter()
            .map(|r| InFlightRequest {
                name: r.name.clone(),
                capacity: r.capacity,
            })
            .collect();
        let offers: Vec<NodeClassOffer> = self
            .classes
            .iter()
            .map(|c| NodeClassOffer {
                in_use: u32::try_from(self.in_use(&c.name)).unwrap_or(u32::MAX),
                ..c.clone()
            })
            .collect();
        let planned = purchase(Policy::FirstFit, &offers, &in_flight, &waiting);
        for assignment in planned.in_flight_assignments {
            if let Some(r) = self
                .in_flight
                .iter_mut()
                .find(|r| r.name == assignment.request)
            {
                r.planned_for = assignment.tenants;
            }
        }
        for new in planned.requests {
            self.requested = self.requested.saturating_add(1);
            self.in_flight.push(Request {
                name: format!("req-{:06}", self.requested),
                class: new.class,
                capacity: new.capacity,
                price: new.monthly_cost.unwrap_or(0),
                due: now.saturating_add(PROVISIONING),
                planned_for: new.tenants,
            });
        }
    }

    /// Nodes of `class` delivered or requested.
    fn in_use(&self, class: &str) -> usize {
        let delivered = self.bought.values().filter(|b| b.class == class).count();
        let requested = self.in_flight.iter().filter(|r| r.class == class).count();
        delivered.saturating_add(requested)
    }

    /// While nobody waits: drain and hand back the first [`CONSOLIDATION_BUDGET`] bought
    /// nodes the consolidation frees.
    fn consolidate(&mut self) {
        if !self.queue.is_empty() {
            return;
        }
        let plan = consolidate_sources(&self.ledgers, |l| {
            self.bought.get(l.name()).map(|b| b.price)
        });
        for node in plan.freed.iter().take(CONSOLIDATION_BUDGET) {
            // A source's moves were planned after those of the sources freed before it only:
            // made in the plan's order, each finds its room.
            for m in plan.moves.iter().filter(|m| m.from == *node) {
                let entry = Entry {
                    uid: m.uid.as_str().into(),
                    tenant: m.tenant.as_str().into(),
                    resources: m.resources,
                    replicas: None,
                };
                self.apply(&Edit {
                    kind: EditKind::Migrate,
                    node: m.to.clone(),
                    uid: m.uid.clone(),
                    entry: Some(entry),
                });
                self.apply(&Edit {
                    kind: EditKind::FinishMigration,
                    node: m.from.clone(),
                    uid: m.uid.clone(),
                    entry: None,
                });
                self.moved = self.moved.saturating_add(1);
            }
            self.remove(node);
        }
    }

    /// Bought nodes empty for [`HAND_BACK`] ticks go back.
    fn hand_back(&mut self, now: u32) {
        let mut going = Vec::new();
        for ledger in &self.ledgers {
            let Some(bought) = self.bought.get_mut(ledger.name()) else {
                continue;
            };
            if !ledger.entries().is_empty() {
                bought.empty_since = None;
                continue;
            }
            let since = *bought.empty_since.get_or_insert(now);
            if now.saturating_sub(since) >= HAND_BACK {
                going.push(ledger.name().to_owned());
            }
        }
        for name in going {
            self.remove(&name);
        }
    }

    /// Hands a bought node back.
    fn remove(&mut self, name: &str) {
        if self.bought.remove(name).is_some() {
            self.ledgers.retain(|l| l.name() != name);
            self.handed_back = self.handed_back.saturating_add(1);
        }
    }

    fn apply(&mut self, edit: &Edit) {
        if let Some(ledger) = self.ledgers.iter_mut().find(|l| l.name() == edit.node) {
            // NB: entries here sum far below the integer range; an overflow changes nothing.
            let _ = ledger.apply(edit);
        }
    }

    fn point(&self, now: u32) -> Point {
        let demand = self.ledgers.iter().fold(Resources::ZERO, |sum, l| {
            sum.checked_add(l.allocated()).unwrap_or(sum)
        });
        let placed = self.ledgers.iter().map(|l| l.entries().len()).sum();
        Point {
            hour: now.saturating_add(1),
            present: self.tenants.len(),
            placed,
            waiting: self.queue.len(),
            bought_nodes: self.bought.len(),
            in_flight: self.in_flight.len(),
            cost: self
                .bought
                .values()
                .map(|b| u128::from(b.price))
                .fold(0, u128::saturating_add),
            bound: lower_bound(&self.classes, self.owned_capacity, demand).unwrap_or(0),
            bought: usize::try_from(self.requested).unwrap_or(usize::MAX),
            handed_back: self.handed_back,
            moved: self.moved,
        }
    }
}

fn ratio_text(ratio: Option<f64>) -> String {
    ratio.map_or("-".to_owned(), |r| format!("{r:.3}"))
}

fn euros(cents: u128) -> String {
    format!("{:.2}", cents as f64 / 100.0)
}

/// A day's row, in the table's order: each column's JSON key, JSON value and table cell (money
/// in cents in JSON, in whole units with cents in the table).
fn day_row(p: &Point) -> [(&'static str, String, String); 11] {
    let same = |key, value: String| (key, value.clone(), value);
    let money = |key, cents: u128| (key, cents.to_string(), euros(cents));
    [
        same("day", (p.hour / TICKS_PER_DAY).to_string()),
        same("tenants", p.present.to_string()),
        same("waiting", p.waiting.to_string()),
        same("bought_nodes", p.bought_nodes.to_string()),
        same("in_flight", p.in_flight.to_string()),
        money("cost_cents", p.cost),
        money("lower_bound_cents", p.bound),
        (
            "cost_over_bound",
            json_number(p.ratio()),
            ratio_text(p.ratio()),
        ),
        same("bought", p.bought.to_string()),
        same("handed_back", p.handed_back.to_string()),
        same("moved", p.moved.to_string()),
    ]
}

fn json_number(ratio: Option<f64>) -> String {
    ratio.map_or("null".to_owned(), |r| format!("{r:.4}"))
}

/// The table, in Markdown: the study's settings, a row per day, then the summary line.
pub fn render(run: &Run) -> String {
    let mut out = String::new();
    let classes: Vec<String> = classes()
        .iter()
        .map(|c| {
            let cents = u128::from(c.monthly_cost.unwrap_or(0));
            format!("{} ({}) {}", c.name, c.capacity, euros(cents))
        })
        .collect();
    let _ = writeln!(
        out,
        "Churn: weeks {}, seed {:#x}; {} owned nodes of {} (free)\n\
         classes (per month): {}\n\
         about {:.0} arrivals per hour, each staying 1-{LONGEST_STAY} hours; hourly ticks: a \
         request arrives after {PROVISIONING} ticks, a bought node empty for {HAND_BACK} ticks is \
         handed back, consolidation drains {CONSOLIDATION_BUDGET} bought node per tick while \
         nobody waits\n\
         bound: the cheapest whole machines whose capacity, with the owned nodes', covers the \
         placed tenants' total demand in every dimension\n",
        run.settings.weeks,
        run.settings.seed,
        OWNED.0,
        OWNED.1,
        classes.join("; "),
        f64::from(DRAWS) / ODDS as f64,
    );
    let _ = writeln!(
        out,
        "| day | tenants | waiting | bought nodes | in flight | cost per month | bound | \
         cost / bound | bought | handed back | moved |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for p in run.days() {
        let cells: Vec<String> = day_row(p).into_iter().map(|(_, _, cell)| cell).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    let _ = writeln!(out, "\n{}", summary(run));
    out
}

/// The summary line.
pub fn summary(run: &Run) -> String {
    let last = run.points.last();
    let median = run
        .median_ratio()
        .map_or("-".to_owned(), |(median, low, high)| {
            format!("{median:.3} x ({low:.3}-{high:.3})")
        });
    format!(
        "final {} x; median of the days {median}; paid over the bound's pay {} x; {} bought, \
         {} handed back, {} tenants moved; {:.0} ms",
        ratio_text(last.and_then(Point::ratio)),
        ratio_text(run.paid_ratio()),
        last.map_or(0, |p| p.bought),
        last.map_or(0, |p| p.handed_back),
        last.map_or(0, |p| p.moved),
        run.elapsed_ms
    )
}

/// One JSON object per day, a line each, then the summary's.
pub fn json(run: &Run) -> String {
    let seed = run.settings.seed;
    let mut out = String::new();
    for p in run.days() {
        let fields: Vec<String> = day_row(p)
            .into_iter()
            .map(|(key, value, _)| format!("\"{key}\":{value}"))
            .collect();
        let _ = writeln!(out, "{{\"seed\":{seed},{}}}", fields.join(","));
    }
    let last = run.points.last();
    let (median, low, high) = run
        .median_ratio()
        .map_or((None, None, None), |(m, l, h)| (Some(m), Some(l), Some(h)));
    let _ = writeln!(
        out,
        "{{\"seed\":{seed},\"weeks\":{},\"final_cost_over_bound\":{},\"median_cost_over_bound\":{},\"min_cost_over_bound\":{},\"max_cost_over_bound\":{},\"paid_over_bound\":{},\"bought\":{},\"handed_back\":{},\"moved\":{},\"elapsed_ms\":{:.1}}}",
        run.settings.weeks,
        json_number(last.and_then(Point::ratio)),
        json_number(median),
        json_number(low),
        json_number(high),
        json_number(run.paid_ratio()),
        last.map_or(0, |p| p.bought),
        last.map_or(0, |p| p.handed_back),
        last.map_or(0, |p| p.moved),
        run.elapsed_ms
    );
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_bound_is_the_cheapest_set_of_whole_machines_that_covers_the_demand() {
        // medium (16 threads, 64 GB, 2,000 GB) 64.00; xlarge (96, 384, 8,000) 209.00;
        // storage (16, 64, 24,000) 104.00.
        let none = Resources::ZERO;
        let cases = [
            // | owned | demand | bound (cents) |
            // Nothing asked: nothing to buy.
            (none, Resources::new(0, 0, 0), Some(0)),
            // All within the owned nodes: nothing to buy.
            (OWNED.1, Resources::new(64, 256, 8_000), Some(0)),
            // One thread: the cheapest machine with one, a medium (the storage 104.00, the
            // xlarge 209.00).
            (none, Resources::new(1, 0, 0), Some(6_400)),
            // 17 threads: 2 medium = 128.00 (medium + storage 168.00, xlarge 209.00); the
            // price-per-unit bound says only 17 x 209.00 / 96 = 37.01.
            (none, Resources::new(17, 0, 0), Some(12_800)),
            // 96 threads and 384 GB: 1 xlarge = 209.00 (6 medium 384.00).
            (none, Resources::new(96, 384, 0), Some(20_900)),
            // 100 threads: xlarge + medium = 273.00 (xlarge + storage 313.00, 2 xlarge 418.00,
            // 7 medium 448.00).
            (none, Resources::new(100, 0, 0), Some(27_300)),
            // 30,000 GB of storage: 2 storage = 208.00 (storage + 3 medium 296.00, 15 medium
            // 960.00).
            (none, Resources::new(16, 64, 30_000), Some(20_800)),
            // Owned nodes first: 160 - 64 = 96 threads, 640 - 256 = 384 GB, 8,000 - 8,000 = 0
            // GB of storage beyond them: 1 xlarge.
            (OWNED.1, Resources::new(160, 640, 8_000), Some(20_900)),
            // 4 owned nodes (256 threads): 256 + 96 x 3 = 544 threads need 3 xlarge = 627.00
            // (18 medium 1,152.00; 2 xlarge + 6 medium 802.00).
            (
                OWNED.1.checked_mul(4).unwrap(),
                Resources::new(544, 0, 0),
                Some(62_700),
            ),
        ];
        for (owned, demand, want) in cases {
            assert_eq!(lower_bound(&classes(), owned, demand), want, "{demand}");
        }
        // No priced class, or none with storage: no machine set covers it.
        let unpriced: Vec<NodeClassOffer> = classes()
            .into_iter()
            .map(|c| NodeClassOffer {
                monthly_cost: None,
                ..c
            })
            .collect();
        assert_eq!(lower_bound(&unpriced, none, Resources::new(1, 0, 0)), None);
        let diskless: Vec<NodeClassOffer> = classes()
            .into_iter()
            .map(|c| NodeClassOffer {
                capacity: Resources::new(c.capacity.threads, c.capacity.memory_gb, 0),
                ..c
            })
            .collect();
        assert_eq!(lower_bound(&diskless, none, Resources::new(0, 0, 1)), None);
    }

    #[test]
    fn a_run_is_the_same_for_every_run_of_a_seed() {
        let week = |seed| run(Settings { seed, weeks: 1 }).points;
        let a = week(7);
        assert_eq!(a.len(), 7 * 24);
        assert_eq!(a, week(7));
        assert_ne!(a, week(8));
    }

    #[test]
    fn the_fleet_costs_at_least_the_bound_at_every_tick_and_loses_no_tenant() {
        let run = run(Settings { seed: 3, weeks: 2 });
        for p in &run.points {
            assert!(p.cost >= p.bound, "{p:?}");
            assert_eq!(p.present, p.placed + p.waiting, "{p:?}");
        }
        let last = run.points.last().unwrap();
        // The money path ran: machines bought and handed back, tenants moved.
        assert!(
            last.bought > 0 && last.handed_back > 0 && last.moved > 0,
            "{last:?}"
        );
        assert_eq!(run.days().count(), 14);
        let (median, low, high) = run.median_ratio().unwrap();
        assert!(
            1.0 <= low && low <= median && median <= high,
            "{median} {low} {high}"
        );
        assert_eq!(
            render(&run).lines().filter(|l| l.starts_with("| ")).count(),
            15
        );
        let json = json(&run);
        assert_eq!(json.lines().count(), 15);
        assert!(
            json.lines()
                .last()
                .unwrap()
                .contains("\"median_cost_over_bound\":")
        );
    }
}
