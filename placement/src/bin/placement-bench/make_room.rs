//! The time `make_room` takes for one waiting tenant, on seeded fleets where room can be made
//! with 1 to 4 moves and on ones where it cannot (5 would be needed, 4 are allowed).
//!
//! ```text
//!   full nodes: 64 threads, ten 6-thread tenants (4 free)
//!   every 50th: one tenant of 65 - w threads and 2 GB (w - 1 free: room for k movers, not the
//!               waiter; never smaller than the waiter, so it never moves itself)
//!   the waiter: w = 4 + 6k threads (k movers of 6 make room on any full node)
//! ```

use std::hint::black_box;
use std::time::Duration;

use placement::{Entry, NodeLedger, NodeState, Resources, make_room};

use crate::latency::{ENTRIES_PER_NODE, Row, measure};

/// The moves allowed, as `--make-room-moves` defaults.
pub const MAX_MOVES: usize = 4;

/// One case measured: the fleet, the moves needed, what the plan found, the time per plan.
#[derive(Clone, Debug)]
pub struct MakeRoomRow {
    pub nodes: usize,
    pub tenants: usize,
    /// Movers of 6 threads needed (5: more than allowed, so no room).
    pub needed: usize,
    /// The moves of the room found; `None` when none was.
    pub moves: Option<usize>,
    pub timing: Row,
}

/// A fleet of `nodes` where a waiter of [`waiter`]`(needed)` threads needs `needed` movers.
pub fn fleet(nodes: usize, needed: usize) -> Vec<NodeLedger> {
    let w = waiter(needed).threads;
    let entry = |uid: String, resources: Resources| Entry {
        tenant: format!("bench/{uid}").into(),
        uid: uid.into(),
        resources,
        replicas: None,
    };
    (0..nodes)
        .filter_map(|i| {
            let name = format!("n{i:06}");
            let entries: Vec<Entry> = if i % 50 == 49 {
                // 2 GB: never smaller than the waiter, so never a mover itself.
                let spare = Resources::new(65u64.saturating_sub(w), 2, 1);
                vec![entry(format!("{name}-spare"), spare)]
            } else {
                (0..ENTRIES_PER_NODE)
                    .map(|j| entry(format!("{name}-t{j}"), Resources::new(6, 1, 1)))
                    .collect()
            };
            let capacity = Resources::new(64, 256, 2000);
            NodeLedger::new(&name, NodeState::Online, capacity, entries).ok()
        })
        .collect()
}

/// The waiter that needs `needed` movers of 6 threads on a full node (4 free).
pub fn waiter(needed: usize) -> Resources {
    let movers = u64::try_from(needed).unwrap_or(u64::MAX);
    Resources::new(movers.saturating_mul(6).saturating_add(4), 1, 1)
}

/// Each size, each number of movers needed from 1 to [`MAX_MOVES`] + 1.
pub fn rows(sizes: &[usize], budget: Duration) -> Vec<MakeRoomRow> {
    let mut rows = Vec::new();
    for &n in sizes {
        for needed in 1..=MAX_MOVES + 1 {
            let nodes = fleet(n, needed);
            let w = waiter(needed);
            let any = |_: &placement::Entry| Some(None);
            let found = make_room(&nodes, &w, None, MAX_MOVES, any);
            let (median_ns, p99_ns, samples, batch) = measure(budget, || {
                black_box(make_room(black_box(&nodes), &w, None, MAX_MOVES, any));
            });
            rows.push(MakeRoomRow {
                nodes: n,
                tenants: nodes.iter().map(|l| l.entries().len()).sum(),
                needed,
                moves: found.map(|r| r.moves.len()),
                timing: Row {
                    case: format!("{needed} needed"),
                    nodes: n,
                    median_ns,
                    p99_ns,
                    samples,
                    batch,
                },
            });
        }
    }
    rows
}

/// The table, in Markdown.
pub fn render(rows: &[MakeRoomRow]) -> String {
    let mut out = format!(
        "Make room (at most {MAX_MOVES} moves) for one waiting tenant: full nodes of ten 6-thread \
         tenants, every 50th with room for the movers only\n\n\
         | nodes | tenants | movers needed | moves found | median ms | p99 ms | samples x batch |\n\
         |---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for row in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.3} | {:.3} | {} x {} |\n",
            row.nodes,
            row.tenants,
            row.needed,
            row.moves.map_or("none".to_owned(), |m| m.to_string()),
            row.timing.median_ns / 1e6,
            row.timing.p99_ns / 1e6,
            row.timing.samples,
            row.timing.batch
        ));
    }
    out
}

/// One JSON object per row, a line each.
pub fn json(rows: &[MakeRoomRow]) -> String {
    rows.iter()
        .map(|row| {
            let moves = row.moves.map_or("null".to_owned(), |m| m.to_string());
            format!(
                "{{\"nodes\":{},\"tenants\":{},\"needed\":{},\"moves\":{},\"median_ms\":{:.4},\"p99_ms\":{:.4}}}\n",
                row.nodes,
                row.tenants,
                row.needed,
                moves,
                row.timing.median_ns / 1e6,
                row.timing.p99_ns / 1e6
            )
        })
        .collect()
}
