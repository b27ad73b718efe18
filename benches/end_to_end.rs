//! End to end: the real controller binary, in its own process, against the in-memory API served
//! over loopback HTTP. Prints placements per second, apply-to-Placed latency, API writes and
//! conflicts per placement, CPU time per placement of each process, the controller's peak RSS,
//! and the writes and controller CPU while pending tenants idle.
//!
//! `cargo bench --bench end_to_end -- [--nodes N] [--tenants N] [--pending N] [--quiet-seconds S]
//! [--concurrency N] [--backlog] [--server-side-apply] [--cost-ms MS --writes-per-second N
//! --cost-per-kib-us US --cores N | --real-cost] [--controller-args "ARGS"]
//! [--controller-bin PATH] [--label TEXT] [--spread PCT [--zones N]]`
//! (defaults: 1000 nodes, 10000 tenants, 1000 pending, 60 s, concurrency 96 as the controller).
//!
//! - `--backlog`: the tenants are created while no controller runs (after a first run has
//!   written every node's status), then the controller starts; rates count from its start.
//! - `--server-side-apply`: Nodes and Tenants are created as `kubectl apply --server-side`
//!   creates them, and every write records its managedFields (kubectl's `Apply` entry, the
//!   controller's status `Update` entries), as a real API server serves them in lists and watches.
//! - `--cost-ms` / `--writes-per-second` / `--cost-per-kib-us` / `--cores`: the in-memory API's
//!   cost model (`CostModel`: a fixed time per write, at most so many writes a second, a time per
//!   KiB the write handles, the cores serving writes; any of them turns it on). `--real-cost`:
//!   `CostModel::REAL_1_36_TWO_CORE`, calibrated on this bench's backlog of 5,000 tenants on
//!   500 nodes to reproduce a real kube-apiserver 1.36 on 2 cores. Bytes per placement are
//!   printed in any case (`Stats::bytes`: request bodies, stored objects before and after, watch
//!   lines sent, of the write requests; the bench's own direct creates count none).
//! - `--controller-args`: more `tenant-placer run` arguments, e.g. `"--no-finalizer --events problems"`.
//! - `--no-admission`: no MutatingAdmissionPolicy emulation (a cluster before 1.36): the
//!   controller adds the Tenant and Node finalizers with its own writes.
//! - `--controller-bin`: another build of the controller (e.g. an older commit), same flags.
//! - `--spread PCT`: that share of the fitting tenants (by a seeded draw) are three-replica
//!   `Zones` tenants, over nodes labelled with `--zones` zones (default 3) in turn; a placement
//!   is a tenant placed whole.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]
#![allow(clippy::cast_precision_loss)]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inmem_apiserver::Verb;
use tenant_placer::api::{GROUP, Node, Tenant};
use tenant_placer::sim::Fleet;
use tenant_placer::sim::invariants::{self, Quiescence};
use tenant_placer::testing;

mod common;
use common::{arg, arg_str, flag};

/// The controller's process, killed when the bench lets go of it: a bench that stops on a failed
/// assertion leaves no controller running.
struct Controller(std::process::Child);

impl std::ops::Deref for Controller {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Controller {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// Starts the controller (in its own process) against the bench's API.
fn spawn_controller(kubeconfig: &std::path::Path, concurrency: u64) -> Controller {
    let binary =
        arg_str("--controller-bin").unwrap_or_else(|| env!("CARGO_BIN_EXE_tenant-placer").into());
    let extra = arg_str("--controller-args").unwrap_or_default();
    std::process::Command::new(binary)
        .args([
            "run",
            "--metrics-addr",
            "127.0.0.1:0",
            "--concurrency",
            &concurrency.to_string(),
        ])
        .args(extra.split_whitespace())
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "error")
        // The binary holds itself to one malloc arena (src/main.rs); what is measured is that,
        // not a variable a shell may or may not set.
        .env_remove("MALLOC_ARENA_MAX")
        .spawn()
        .map(Controller)
        .unwrap()
}

/// Waits until every node has a status (the controller is up and synced).
async fn until_every_node_has_a_status(api: &inmem_apiserver::ApiServer) {
    let started = Instant::now();
    while api
        .list(GROUP, "nodes")
        .iter()
        .any(|n| n.get("status").is_none())
    {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the controller never wrote node status"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Apply and decision times per tenant, filled by the commit hook.
#[derive(Default)]
struct Clock {
    applied: HashMap<String, Instant>,
    decided: HashMap<String, (Instant, String)>,
    node_commits: u64,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

/// A process's memory figure from /proc (Linux): `VmHWM` (peak resident set) or `VmRSS`.
fn proc_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    proc_kib(pid, "VmHWM:")
}

/// CPU time a process has used so far (user + system), from `/proc/PID/stat` (Linux; fields 14
/// and 15, in clock ticks of 1/100 s, the USER_HZ Linux reports on every architecture it runs).
/// CPU per placement moves much less than the rate when the machine's speed swings with its
/// neighbours' load.
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after it start past its ')'.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// CPU seconds of the controller and of this process (the in-memory API and the bench) at once.
fn cpu_now(controller: &Controller) -> (f64, f64) {
    (
        cpu_seconds(&controller.id().to_string()).unwrap_or(0.0),
        cpu_seconds("self").unwrap_or(0.0),
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let (nodes, tenants, pending, quiet) = (
        arg("--nodes", 1000),
        arg("--tenants", 10_000),
        arg("--pending", 1000),
        arg("--quiet-seconds", 60),
    );
    let concurrency = arg("--concurrency", 96);
    let backlog = flag("--backlog");
    let spread_percent: u64 = arg("--spread", 0);
    let zones: usize = arg("--zones", if spread_percent > 0 { 3 } else { 0 });
    let cost_flags = [
        "--cost-ms",
        "--writes-per-second",
        "--cost-per-kib-us",
        "--cores",
    ];
    let cost = if flag("--real-cost") {
        Some(inmem_apiserver::CostModel::REAL_1_36_TWO_CORE)
    } else if cost_flags.iter().any(|f| arg_str(f).is_some()) {
        Some(inmem_apiserver::CostModel {
            per_write: Duration::from_secs_f64(arg("--cost-ms", 0.0) / 1e3),
            writes_per_second: arg("--writes-per-second", 0),
            per_kib: Duration::from_secs_f64(arg("--cost-per-kib-us", 0.0) / 1e6),
            cores: arg("--cores", 0.0),
        })
    } else {
        None
    };
    let fleet = Fleet::new().unwrap();
    // The chart's MutatingAdmissionPolicies (Kubernetes 1.36+) put the finalizers on at create;
    // `--no-admission` measures a cluster without them, where the controller adds them itself.
    let admission = !flag("--no-admission");
    if admission {
        let extra = arg_str("--controller-args").unwrap_or_default();
        fleet.admit_finalizers(!extra.contains("--no-finalizer"));
    }
    let api = fleet.api.clone();
    // Objects as a real server serves them after `kubectl apply --server-side`.
    let server_side_apply = flag("--server-side-apply");
    api.set_managed_fields(server_side_apply);
    let put = |object: serde_json::Value| {
        if server_side_apply {
            api.apply_by("kubectl", object)
        } else {
            api.create(object)
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(inmem_apiserver::server::serve(api.clone(), listener));
    let kubeconfig =
        std::env::temp_dir().join(format!("tp-bench-{}.kubeconfig", std::process::id()));
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: bench, cluster: {{server: 'http://{addr}'}}}}]\n\
             users: [{{name: bench, user: {{}}}}]\ncontexts: [{{name: bench, context: {{cluster: bench, user: bench}}}}]\n\
             current-context: bench\n"
        ),
    )
    .unwrap();

    let clock = Arc::new(Mutex::new(Clock::default()));
    let hook_clock = clock.clone();
    api.on_commit(move |commit| {
        if commit.group != GROUP {
            return;
        }
        let mut clock = hook_clock.lock().unwrap();
        if commit.resource == "nodes" && commit.old.is_some() {
            clock.node_commits += 1;
        }
        if commit.resource == "tenants" {
            let phase = commit.object["status"]["phase"]
                .as_str()
                .unwrap_or_default();
            if matches!(phase, "Active" | "PendingCapacity")
                && !clock.decided.contains_key(commit.name)
            {
                clock
                    .decided
                    .insert(commit.name.to_owned(), (Instant::now(), phase.to_owned()));
            }
        }
    });

    let mut rng = fastrand::Rng::with_seed(42);
    for i in 0..nodes {
        let mut node = testing::node(&format!("node-{i:05}")).capacity(64, 256, 8000);
        if zones > 0 {
            node = node.label(
                tenant_placer::api::ZONE_LABEL,
                &format!("zone-{}", i % zones),
            );
        }
        put(node.manifest()).unwrap();
    }
    api.set_cost_model(cost);
    let mut child = spawn_controller(&kubeconfig, concurrency);
    until_every_node_has_a_status(&api).await;
    if backlog {
        // The backlog is created while no controller runs.
        child.kill().ok();
        child.wait().ok();
    }

    // Apply the tenants: small ones that all fit, then `pending` that fit nowhere.
    api.reset_stats();
    let node_commits_before = clock.lock().unwrap().node_commits;
    let mut cpu_begin = cpu_now(&child);
    let mut begin = Instant::now();
    let total = tenants + pending;
    for i in 0..total {
        let name = format!("t{i:06}");
        let (threads, memory, storage) = if i < tenants {
            (rng.i64(1..=4), rng.i64(1..=16), rng.i64(1..=400))
        } else {
            (1000, 1, 1)
        };
        let mut tenant = testing::tenant(&name).resources(threads, memory, storage);
        if spread_percent > 0 && i < tenants && rng.u64(0..100) < spread_percent {
            tenant = tenant.spread(tenant_placer::api::TenantSpread::Zones, 3);
        }
        clock.lock().unwrap().applied.insert(name, Instant::now());
        put(tenant.manifest()).unwrap();
    }
    let applied_in = begin.elapsed();
    if backlog {
        api.reset_stats();
        begin = Instant::now();
        child = spawn_controller(&kubeconfig, concurrency);
        cpu_begin = (0.0, cpu_now(&child).1);
    }
    loop {
        let decided = clock.lock().unwrap().decided.len() as u64;
        if decided >= total {
            break;
        }
        assert!(
            begin.elapsed() < Duration::from_secs(1800),
            "only {decided} of {total} decided"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu_end = cpu_now(&child);
    // Let trailing writes (node reconciles) finish before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (latencies, placed, last_decision, first_decision) = {
        let clock = clock.lock().unwrap();
        let mut latencies: Vec<Duration> = clock
            .decided
            .iter()
            .filter(|(_, (_, phase))| phase == "Active")
            // With a backlog, from the controller's start (every tenant existed before).
            .map(|(name, (at, _))| at.duration_since(clock.applied[name].max(begin)))
            .collect();
        latencies.sort();
        let last = clock.decided.values().map(|(at, _)| *at).max().unwrap();
        let first = clock.decided.values().map(|(at, _)| *at).min().unwrap();
        let placed = latencies.len() as u64;
        (latencies, placed, last, first)
    };
    let elapsed = last_decision.duration_since(begin);
    let stats = api.stats();
    let node_puts = stats.count(Verb::Update, "nodes");
    let node_commits = clock.lock().unwrap().node_commits - node_commits_before;
    let writes = stats.write_requests();
    let rss = peak_rss_kib(child.id()).unwrap_or(0);

    let nodes_now: Vec<Node> = api
        .list(GROUP, "nodes")
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let tenants_now: Vec<Tenant> = api
        .list(GROUP, "tenants")
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let checked = invariants::check(
        &nodes_now,
        &tenants_now,
        &HashSet::new(),
        Quiescence::Settled,
    );

    api.reset_stats();
    let idle_cpu_begin = cpu_now(&child).0;
    tokio::time::sleep(Duration::from_secs(quiet)).await;
    let idle_writes = api.stats().write_requests();
    // What waiting tenants cost while nothing changes: the looks over the fleet, not the writes.
    let idle_cpu = (cpu_now(&child).0 - idle_cpu_begin) / quiet.max(1) as f64;
    let rss_after_idle = peak_rss_kib(child.id()).unwrap_or(0);
    let rss_now = proc_kib(child.id(), "VmRSS:").unwrap_or(0);
    child.kill().ok();
    child.wait().ok();
    let _ = std::fs::remove_file(&kubeconfig);

    let label = arg_str("--label").unwrap_or_default();
    let controller_args = arg_str("--controller-args").unwrap_or_default();
    let cost_text = match cost {
        Some(c) => format!(
            "cost model {:.3} ms per write + {:.1} µs per KiB, at most {} writes/s, {} cores",
            c.per_write.as_secs_f64() * 1e3,
            c.per_kib.as_secs_f64() * 1e6,
            c.writes_per_second,
            c.cores,
        ),
        None => "no cost model".to_owned(),
    };
    println!(
        "end to end{}: {nodes} nodes, {tenants} fitting tenants + {pending} that fit nowhere, {}{}, controller in its own process (--concurrency {concurrency} {controller_args}), {cost_text}, {}",
        if label.is_empty() {
            String::new()
        } else {
            format!(" [{label}]")
        },
        if backlog {
            "created before the controller starts (backlog)"
        } else {
            "created while it runs"
        },
        if server_side_apply {
            ", server-side applied (managedFields)"
        } else {
            ""
        },
        if admission {
            "finalizers added by admission"
        } else {
            "no admission policies"
        },
    );
    println!("| measure | value |\n|---|---|");
    println!(
        "| tenants applied (direct to the store) in | {:.2} s |",
        applied_in.as_secs_f64()
    );
    println!(
        "| all {total} decided after{} | {:.2} s |",
        if backlog {
            " the controller started"
        } else {
            " the first apply"
        },
        elapsed.as_secs_f64()
    );
    println!("| placed | {placed} |");
    println!(
        "| first decision after | {:.2} s |",
        first_decision.duration_since(begin).as_secs_f64()
    );
    // The rate while placing: from the first decision to the last (start-up and list excluded).
    let window = last_decision.duration_since(first_decision).as_secs_f64();
    let placing_rate = placed.saturating_sub(1) as f64 / window.max(1e-9);
    println!("| placed per second, first to last decision | {placing_rate:.0} |");
    println!(
        "| placed per second | {:.0} |",
        placed as f64 / elapsed.as_secs_f64()
    );
    println!(
        "| apply to Placed, p50 | {:.1} ms |",
        percentile(&latencies, 0.5).as_secs_f64() * 1e3
    );
    println!(
        "| apply to Placed, p99 | {:.1} ms |",
        percentile(&latencies, 0.99).as_secs_f64() * 1e3
    );
    println!(
        "| API write requests per placement | {:.2} |",
        writes as f64 / placed.max(1) as f64
    );
    let node_status_writes = stats.count(Verb::Patch, "nodes") + stats.count(Verb::Update, "nodes");
    println!(
        "| Node writes per placement ({spread_percent} % spread over {zones} zones) | {:.2} |",
        node_status_writes as f64 / placed.max(1) as f64
    );
    for key in stats.requests.keys().filter(|k| k.verb.is_write()) {
        let path = match &key.subresource {
            Some(sub) => format!("{}/{sub}", key.resource),
            None => key.resource.clone(),
        };
        println!(
            "| of which {:?} {path} | {} |",
            key.verb, stats.requests[key]
        );
    }
    // Bytes the API handled for the writes, per placement: what a real server's CPU goes into.
    let per_placement = |bytes: u64| bytes as f64 / placed.max(1) as f64;
    let b = stats.bytes;
    println!(
        "| API bytes per placement: request + stored (before + after) + watch | {:.0} = {:.0} + {:.0} ({:.0} + {:.0}) + {:.0} |",
        per_placement(b.total()),
        per_placement(b.request),
        per_placement(b.stored()),
        per_placement(b.stored_before),
        per_placement(b.stored_after),
        per_placement(b.watch),
    );
    for (key, counts) in stats
        .bytes_by_request
        .iter()
        .filter(|(k, _)| k.verb.is_write())
    {
        let path = match &key.subresource {
            Some(sub) => format!("{}/{sub}", key.resource),
            None => key.resource.clone(),
        };
        let n = stats.requests.get(key).copied().unwrap_or(0).max(1) as f64;
        println!(
            "| of which {:?} {path}: per placement, request + stored + watch (per request: request + before + after + watch) | {:.0} = {:.0} + {:.0} + {:.0} ({:.0} = {:.0} + {:.0} + {:.0} + {:.0}) |",
            key.verb,
            per_placement(counts.total()),
            per_placement(counts.request),
            per_placement(counts.stored()),
            per_placement(counts.watch),
            counts.total() as f64 / n,
            counts.request as f64 / n,
            counts.stored_before as f64 / n,
            counts.stored_after as f64 / n,
            counts.watch as f64 / n,
        );
    }
    println!(
        "| API bytes per write request | {:.0} |",
        b.total() as f64 / writes.max(1) as f64
    );
    println!(
        "| node status conflicts (409) per placement | {:.3} |",
        (node_puts - node_commits.min(node_puts)) as f64 / placed.max(1) as f64
    );
    println!(
        "| Tenant reads (GET) per placement | {:.3} |",
        stats.count(Verb::Get, "tenants") as f64 / placed.max(1) as f64
    );
    let per_placement_us = |seconds: f64| seconds * 1e6 / placed.max(1) as f64;
    let controller_cpu = per_placement_us(cpu_end.0 - cpu_begin.0);
    let api_cpu = per_placement_us(cpu_end.1 - cpu_begin.1);
    println!("| controller CPU per placement | {controller_cpu:.0} µs |");
    println!(
        "| in-memory API and bench CPU per placement (this process; without --backlog, creating the tenants too) | {api_cpu:.0} µs |"
    );
    println!("| controller peak RSS | {:.1} MB |", rss as f64 / 1024.0);
    println!(
        "| write requests during {quiet} s with {pending} pending and nothing changing | {idle_writes} |"
    );
    println!(
        "| controller CPU during those {quiet} s | {:.1} % of a core |",
        idle_cpu * 100.0
    );
    println!(
        "| controller peak RSS after the idle period | {:.1} MB |",
        rss_after_idle as f64 / 1024.0
    );
    println!(
        "| controller RSS at the end (caches held) | {:.1} MB |",
        rss_now as f64 / 1024.0
    );
    let invariants = match &checked {
        Ok(()) => "ok".to_owned(),
        Err(violations) => format!("VIOLATED: {violations:?}"),
    };
    println!("| invariants at the end | {invariants} |");
    println!(
        "summary | {label} | {:.0} placed/s ({placing_rate:.0}/s first to last) | {:.2} writes/placement | {:.0} bytes/placement ({:.0} request, {:.0} stored, {:.0} watch) | {:.3} conflicts/placement | {:.1} MB | CPU per placement: controller {controller_cpu:.0} µs, API {api_cpu:.0} µs | {invariants}",
        placed as f64 / elapsed.as_secs_f64(),
        writes as f64 / placed.max(1) as f64,
        per_placement(b.total()),
        per_placement(b.request),
        per_placement(b.stored()),
        per_placement(b.watch),
        (node_puts - node_commits.min(node_puts)) as f64 / placed.max(1) as f64,
        rss as f64 / 1024.0,
    );
}
