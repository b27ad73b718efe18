//! `placement-bench`: decision latency per policy, the fragmentation study, the time a
//! consolidation takes, a purchase plan's time and cost, and what weeks of churn cost against a
//! lower bound, as tables.
//!
//! ```text
//! cargo run --release -p placement --bin placement-bench                 # latency (default)
//! cargo run --release -p placement --bin placement-bench -- latency --budget-ms 300
//! cargo run --release -p placement --bin placement-bench -- fragmentation --svg frag.svg
//! cargo run --release -p placement --bin placement-bench -- consolidation --sizes 100,1000
//! cargo run --release -p placement --bin placement-bench -- purchase --runs 11
//! cargo run --release -p placement --bin placement-bench -- make-room --sizes 1000,10000 --json
//! cargo run --release -p placement --bin placement-bench -- churn --weeks 4 --seed 7
//! ```
//!
//! Std only, like the library. Run it in `--release`: debug timings mean nothing.

mod churn;
mod fleet;
mod fragmentation;
mod latency;
mod make_room;
mod purchase;
mod svg;

use std::process::ExitCode;
use std::time::Duration;

use placement::Policy;

const USAGE: &str = "\
usage: placement-bench [latency] [--budget-ms MS] [--sizes N,N,...]
       placement-bench fragmentation [--svg PATH] [--seed N] [--arrivals N]
       placement-bench consolidation [--budget-ms MS] [--sizes N,N,...] [--json]
       placement-bench purchase [--runs N] [--sizes N,N,...] [--json]
       placement-bench make-room [--budget-ms MS] [--sizes N,N,...] [--json]
       placement-bench churn [--weeks N] [--seed N] [--json]

latency        median and p99 ns per decision for every policy at 100, 1k, 10k and 100k nodes,
               the first-fit index against the scan, and the target case (10,000 nodes, the
               first 9,000 by name full). --budget-ms is the time spent per case (default 400).
fragmentation  one seeded trace (the seed's four-host example, then a random mix of arrivals
               and departures) replayed under each policy; prints Markdown tables and, with
               --svg, writes a picture.
consolidation  the time to plan a consolidation (rebalance::consolidate) of a seeded fleet of
               10 tenants per node, each node filled to a random level; --sizes are node
               counts (default 1000).
purchase       the time to plan a purchase (purchase::purchase) for seeded waiting tenants of
               mixed sizes and five classes, under each policy, and its cost against a lower
               bound; --sizes are tenant counts (default 1000), --runs the plans timed per
               policy (default 11).
make-room      the time to make room (make_room::make_room) for one waiting tenant on seeded
               fleets of 10 tenants per node where 1 to 4 movers are needed, and one where 5
               are (none found: 4 allowed); --sizes are node counts (default 1000,10000).
churn          seeded weeks (default 4) of tenants arriving and leaving, hour by hour, with
               purchases, hand-backs and consolidation on: each day's monthly cost of the
               bought nodes against a lower bound (the cheapest whole machines covering the
               demand), machines bought and handed back, tenants moved, and a summary.
--json         one JSON object per row, a line each, instead of the table.";

struct Args {
    command: String,
    budget_ms: u64,
    /// Node counts; `None`: each command's default.
    sizes: Option<Vec<usize>>,
    svg: Option<String>,
    seed: u64,
    arrivals: usize,
    runs: usize,
    weeks: u32,
    json: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        command: "latency".to_owned(),
        budget_ms: 400,
        sizes: None,
        svg: None,
        seed: 0x00C0_FFEE,
        arrivals: 3000,
        runs: 11,
        weeks: 4,
        json: false,
    };
    let mut first = true;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "latency" | "fragmentation" | "consolidation" | "purchase" | "make-room" | "churn"
                if first =>
            {
                parsed.command = arg
            }
            "--budget-ms" => parsed.budget_ms = number(&value("--budget-ms")?)?,
            "--sizes" => {
                parsed.sizes = Some(
                    value("--sizes")?
                        .split(',')
                        .map(number)
                        .collect::<Result<_, _>>()?,
                )
            }
            "--svg" => parsed.svg = Some(value("--svg")?),
            "--seed" => parsed.seed = number(&value("--seed")?)?,
            "--arrivals" => parsed.arrivals = number(&value("--arrivals")?)?,
            "--runs" => parsed.runs = number(&value("--runs")?)?,
            "--weeks" => parsed.weeks = number(&value("--weeks")?)?,
            "--json" => parsed.json = true,
            "-h" | "--help" => parsed.command = "help".to_owned(),
            other => return Err(format!("unexpected argument {other:?}")),
        }
        first = false;
    }
    Ok(parsed)
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    let digits = text.replace('_', "");
    let parsed = match digits.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16)
            .ok()
            .and_then(|n| n.to_string().parse().ok()),
        None => digits.parse().ok(),
    };
    parsed.ok_or_else(|| format!("{text:?} is not a number"))
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("placement-bench: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match args.command.as_str() {
        "help" => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        "fragmentation" => fragmentation_study(&args),
        "consolidation" => consolidation_table(&args),
        "purchase" => purchase_table(&args),
        "make-room" => make_room_table(&args),
        "churn" => churn_study(&args),
        _ => latency_table(&args),
    }
}

fn latency_table(args: &Args) -> ExitCode {
    if cfg!(debug_assertions) {
        eprintln!("placement-bench: a debug build; run with --release for meaningful figures");
    }
    let budget = Duration::from_millis(args.budget_ms);
    let sizes = args
        .sizes
        .clone()
        .unwrap_or_else(|| vec![100, 1_000, 10_000, 100_000]);
    let rows = latency::policy_rows(&sizes, budget);
    let target = latency::target(budget);
    print!("{}", latency::render(&rows, &target));
    ExitCode::SUCCESS
}

fn consolidation_table(args: &Args) -> ExitCode {
    if cfg!(debug_assertions) {
        eprintln!("placement-bench: a debug build; run with --release for meaningful figures");
    }
    let budget = Duration::from_millis(args.budget_ms);
    let sizes = args.sizes.clone().unwrap_or_else(|| vec![1_000]);
    let rows = latency::consolidation_rows(&sizes, budget);
    if args.json {
        print!("{}", latency::consolidation_json(&rows));
    } else {
        print!("{}", latency::render_consolidation(&rows));
    }
    ExitCode::SUCCESS
}

fn make_room_table(args: &Args) -> ExitCode {
    if cfg!(debug_assertions) {
        eprintln!("placement-bench: a debug build; run with --release for meaningful figures");
    }
    let budget = Duration::from_millis(args.budget_ms);
    let sizes = args.sizes.clone().unwrap_or_else(|| vec![1_000, 10_000]);
    let rows = make_room::rows(&sizes, budget);
    if args.json {
        print!("{}", make_room::json(&rows));
    } else {
        print!("{}", make_room::render(&rows));
    }
    ExitCode::SUCCESS
}

fn purchase_table(args: &Args) -> ExitCode {
    if cfg!(debug_assertions) {
        eprintln!("placement-bench: a debug build; run with --release for meaningful figures");
    }
    let sizes = args.sizes.clone().unwrap_or_else(|| vec![1_000]);
    for (i, &tenants) in sizes.iter().enumerate() {
        let rows = purchase::purchase_rows(tenants, args.runs);
        if args.json {
            print!("{}", purchase::json(&rows));
            continue;
        }
        if i > 0 {
            println!();
        }
        print!("{}", purchase::render_purchase(&rows));
    }
    ExitCode::SUCCESS
}

fn churn_study(args: &Args) -> ExitCode {
    let run = churn::run(churn::Settings {
        seed: args.seed,
        weeks: args.weeks,
    });
    if args.json {
        print!("{}", churn::json(&run));
    } else {
        print!("{}", churn::render(&run));
    }
    ExitCode::SUCCESS
}

fn fragmentation_study(args: &Args) -> ExitCode {
    let trace = fragmentation::trace(args.seed, args.arrivals);
    let outcomes: Vec<_> = Policy::ALL
        .into_iter()
        .map(|policy| fragmentation::replay(policy, &trace))
        .collect();
    print!("{}", fragmentation::render(&trace, &outcomes));
    if let Some(path) = &args.svg {
        let picture = svg::render(&outcomes, trace.seed);
        if let Err(error) = std::fs::write(path, picture) {
            eprintln!("placement-bench: cannot write {path}: {error}");
            return ExitCode::FAILURE;
        }
        println!("\nwrote {path}");
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn args(line: &str) -> Result<Args, String> {
        parse(line.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn arguments() {
        let a = args("fragmentation --svg out.svg --seed 0x10 --arrivals 1_000").unwrap();
        assert_eq!(
            (a.command.as_str(), a.svg.as_deref(), a.seed, a.arrivals),
            ("fragmentation", Some("out.svg"), 16, 1000)
        );
        let a = args("--sizes 10,20 --budget-ms 5").unwrap();
        assert_eq!(
            (a.command.as_str(), a.sizes, a.budget_ms),
            ("latency", Some(vec![10, 20]), 5)
        );
        let a = args("churn --weeks 2 --seed 9 --json").unwrap();
        assert_eq!(
            (a.command.as_str(), a.weeks, a.seed, a.json),
            ("churn", 2, 9, true)
        );
        assert!(args("--svg").is_err());
        assert!(args("latency latency").is_err());
    }

    #[test]
    fn the_study_renders_a_table_and_a_picture() {
        let trace = fragmentation::trace(3, 200);
        let outcomes: Vec<_> = Policy::ALL
            .into_iter()
            .map(|p| fragmentation::replay(p, &trace))
            .collect();
        let table = fragmentation::render(&trace, &outcomes);
        assert!(
            table.contains("| LeastLoaded | 2 | 2 | 3 | 1 | no fit |"),
            "{table}"
        );
        let picture = svg::render(&outcomes, trace.seed);
        assert!(picture.starts_with("<svg") && picture.trim_end().ends_with("</svg>"));
        assert_eq!(
            picture.matches("<text").count(),
            picture.matches("</text>").count()
        );
    }

    #[test]
    fn the_make_room_cases_need_one_to_four_moves_and_then_find_none() {
        let a = args("make-room --sizes 100 --json").unwrap();
        assert_eq!(
            (a.command.as_str(), a.sizes.clone(), a.json),
            ("make-room", Some(vec![100]), true)
        );
        let rows = make_room::rows(&[100], Duration::from_millis(2));
        let found: Vec<(usize, Option<usize>)> = rows.iter().map(|r| (r.needed, r.moves)).collect();
        assert_eq!(
            found,
            [
                (1, Some(1)),
                (2, Some(2)),
                (3, Some(3)),
                (4, Some(4)),
                (5, None)
            ]
        );
        let json = make_room::json(&rows);
        assert_eq!(json.lines().count(), 5);
        assert!(
            json.lines()
                .all(|l| l.starts_with("{\"nodes\":100,\"tenants\":")
                    && l.contains("\"median_ms\":"))
        );
        assert!(json.contains("\"needed\":5,\"moves\":null"));
    }

    #[test]
    fn the_consolidation_case_frees_nodes_and_is_timed() {
        let a = args("consolidation --sizes 40").unwrap();
        assert_eq!(
            (a.command.as_str(), a.sizes),
            ("consolidation", Some(vec![40]))
        );
        let rows = latency::consolidation_rows(&[40], Duration::from_millis(2));
        let row = &rows[0];
        assert_eq!(row.entries, 400);
        assert!(row.freed > 0 && row.moves >= row.freed, "{row:?}");
        assert!(latency::render_consolidation(&rows).contains("| 40 | 400 |"));
    }

    #[test]
    fn the_purchase_case_buys_for_everyone_above_the_bound() {
        let a = args("purchase --runs 3 --sizes 60").unwrap();
        assert_eq!(
            (a.command.as_str(), a.runs, a.sizes),
            ("purchase", 3, Some(vec![60]))
        );
        let rows = purchase::purchase_rows(60, 1);
        assert_eq!(rows.len(), 4);
        for row in &rows {
            assert!(row.nodes > 0 && row.unplaceable == 0, "{row:?}");
            assert!(row.cost.monthly as f64 >= row.lower_bound, "{row:?}");
        }
        assert!(purchase::render_purchase(&rows).contains("| FirstFit |"));
        let json = purchase::json(&rows);
        assert_eq!(json.lines().count(), 4);
        assert!(json.lines().all(|l| l.starts_with("{\"tenants\":60,")
            && l.contains("\"p99_ms\":")
            && l.contains("\"cost_over_bound\":")));
    }

    /// Issue #31's goal on the benchmark's mix of 1,000 (1.061 packed largest first; the fill
    /// buys 73 xlarge and 8 storage nodes, 1.045).
    #[test]
    fn the_purchase_of_1000_costs_at_most_1_05_times_the_bound() {
        for row in purchase::purchase_rows(1000, 1) {
            let ratio = row.cost.monthly as f64 / row.lower_bound;
            assert!(row.unplaceable == 0 && ratio <= 1.05, "{ratio} {row:?}");
        }
    }

    #[test]
    fn latency_rows_measure_something() {
        let rows = latency::policy_rows(&[50], Duration::from_millis(2));
        assert_eq!(rows.len(), 5);
        assert!(rows.iter().all(|r| r.median_ns > 0.0 && r.samples >= 31));
    }
}
