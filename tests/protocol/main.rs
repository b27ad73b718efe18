//! The controller's real run loop against the in-memory API: seed scenarios, races, crashes,
//! faults, watch breaks and a seeded soak. Every test checks the invariants of
//! `tenant_placer::sim::invariants`, and every committed Node write is checked as it happens.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

mod capi;
mod consolidation;
mod crash;
mod drain;
mod fifo;
mod guards;
mod leader;
mod make_room;
mod money;
mod money_model;
mod policy;
mod pools;
mod promise;
mod purchase_soak;
mod quiet;
mod race;
mod rbac;
mod register;
mod requests;
mod seed;
mod selectors;
mod soak;
mod spread;
mod telemetry;
mod unreadable;
mod watch;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inmem_apiserver::ApiServer;
use serde_json::{Value, json};
use tenant_placer::api::{GROUP, Node, Tenant};
use tenant_placer::controller::{Handles, RetryPolicy, Settings};
use tenant_placer::sim::Fleet;
use tenant_placer::sim::invariants::{self, Quiescence};
/// Nodes and tenants are the crate's fixtures, sent as the manifests a client applies.
pub use tenant_placer::testing::{entry, node, tenant};

pub const VERSION: &str = "placement.tenant-placer.dev/v1alpha1";

/// Settings for tests: real defaults, with short pauses so failures retry quickly.
pub fn settings() -> Settings {
    Settings {
        concurrency: 8,
        error_backoff: Duration::from_millis(20),
        // Below the harness's quiet period (80 ms): a failed reconcile retries before the
        // harness could take the pause for quiescence.
        error_backoff_max: Duration::from_millis(50),
        retry: RetryPolicy {
            jitter: Duration::from_millis(2),
            ..RetryPolicy::default()
        },
        // Shorter than the harness's quiet period, so a due wake-up pass is never mistaken for
        // quiescence.
        requeue_window: Duration::from_millis(20),
        ..Settings::default()
    }
}

/// A spec change as a merge patch of one object (applied directly, as a user's edit).
pub fn tenant_spec(name: &str, spec: Value) -> Value {
    json!({"apiVersion": VERSION, "kind": "Tenant", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

pub fn node_spec(name: &str, spec: Value) -> Value {
    json!({"apiVersion": VERSION, "kind": "Node", "metadata": {"name": name}, "spec": spec})
}

/// The seed's two nodes.
pub fn seed_nodes() -> Vec<Value> {
    vec![
        node("node-eu-1").capacity(64, 256, 8000).manifest(),
        node("node-eu-2").capacity(32, 128, 4000).manifest(),
    ]
}

/// A fleet with the controller running, every Node write checked as it commits.
pub struct Harness {
    pub fleet: Arc<Fleet>,
    /// Committed Node writes, counted by the commit hook.
    pub node_commits: Arc<std::sync::atomic::AtomicU64>,
    pub write_violations: Arc<Mutex<Vec<String>>>,
    /// Nodes whose capacity a test lowered (they may hold more than their capacity).
    pub lowered: HashSet<String>,
    pub settings: Settings,
    /// What the first controller reports into (its metrics: signs that a pass ran).
    pub handles: Handles,
}

impl Harness {
    pub async fn start(nodes: &[Value]) -> Harness {
        Harness::start_on(ApiServer::new(), nodes, settings()).await
    }

    pub async fn start_on(api: ApiServer, nodes: &[Value], settings: Settings) -> Harness {
        let fleet = Arc::new(Fleet::with_api(api).unwrap());
        let write_violations = Arc::new(Mutex::new(Vec::new()));
        let sink = write_violations.clone();
        let node_commits = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = node_commits.clone();
        fleet.api.on_commit(move |commit| {
            if commit.group != GROUP || commit.resource != "nodes" {
                return;
            }
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // An object an older schema let in that the types cannot hold is checked by the
            // tests that store it (`unreadable.rs`).
            let Ok(after) = serde_json::from_value::<Node>(commit.object.clone()) else {
                return;
            };
            // Before a fix, the entries as far as they can be read: growth is judged from them.
            let before: Option<Node> = commit.old.map(|old| {
                serde_json::from_value(old.clone()).unwrap_or_else(|e| {
                    Node::unreadable(Default::default(), &old.to_string(), e.to_string())
                })
            });
            if let Err(found) = invariants::check_node_write(before.as_ref(), &after) {
                sink.lock().unwrap().extend(
                    found
                        .into_iter()
                        .map(|v| format!("at rv {}: {v}", commit.resource_version)),
                );
            }
        });
        let harness = Harness {
            fleet,
            node_commits,
            write_violations,
            lowered: HashSet::new(),
            settings,
            handles: Handles::default(),
        };
        harness.apply(nodes);
        harness
            .fleet
            .start_with(harness.settings.clone(), harness.handles.clone());
        harness.settle().await;
        harness
    }

    /// Applies objects directly (not through HTTP: no request counted, no fault applies).
    pub fn apply(&self, objects: &[Value]) {
        for object in objects {
            self.fleet.api.apply(object.clone()).unwrap();
        }
    }

    pub fn delete_tenant(&self, name: &str) {
        self.fleet
            .api
            .delete(GROUP, "tenants", Some("default"), name)
            .unwrap();
    }

    /// Kills the controller right after write `after` (counted from the last stats reset;
    /// committed, its response never sent) and starts a new one with the same settings. The
    /// handle finishes once the new one is started.
    pub fn restart_after_write(&self, after: u32) -> tokio::task::JoinHandle<()> {
        let stall = inmem_apiserver::Stall::default();
        self.fleet.api.inject(
            inmem_apiserver::Fault::writes()
                .after(after)
                .commit_then_stall(&stall),
        );
        let (fleet, settings) = (self.fleet.clone(), self.settings.clone());
        tokio::spawn(async move {
            stall.0.notified().await;
            fleet.start(settings);
        })
    }

    /// Waits (up to 60 s) until `done` holds: a positive sign that something ran, before a test
    /// asserts that nothing else happened.
    pub async fn until(&self, what: &str, done: impl Fn() -> bool) {
        wait_until_or(what, done, || self.describe()).await;
    }

    /// Each tenant's status and each node's entries, for a failure message.
    pub fn describe(&self) -> String {
        use kube::ResourceExt;
        let mut out = String::from("tenants:\n");
        for t in self.fleet.tenants() {
            let s = t.status.clone().unwrap_or_default();
            out += &format!(
                "  {} {} on '{}' {:?}: {}\n",
                t.name_any(),
                s.phase,
                s.node_name,
                s.migration.map(|m| (m.from, m.to)),
                s.message
            );
        }
        out += "nodes:\n";
        for n in self.fleet.nodes() {
            let entries: Vec<_> = n
                .status
                .as_ref()
                .map(|s| {
                    s.allocations
                        .iter()
                        .map(|a| format!("{} {}", a.tenant, a.resources.threads))
                        .collect()
                })
                .unwrap_or_default();
            out += &format!("  {}: {entries:?}\n", n.name_any());
        }
        out
    }

    pub async fn settle(&self) {
        self.fleet
            .settle(Duration::from_millis(80), Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{e}: tenants {:#?}",
                    self.fleet
                        .tenants()
                        .iter()
                        .map(|t| (t.metadata.name.clone(), t.status.clone()))
                        .collect::<Vec<_>>()
                )
            });
    }

    pub fn node(&self, name: &str) -> Node {
        self.fleet
            .nodes()
            .into_iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .unwrap()
    }

    pub fn tenant(&self, name: &str) -> Option<Tenant> {
        self.fleet
            .tenants()
            .into_iter()
            .find(|t| t.metadata.name.as_deref() == Some(name))
    }

    pub fn allocated_threads(&self, node: &str) -> i64 {
        self.node(node).status.unwrap().allocated.threads
    }

    /// Every invariant at rest, plus every per-write check so far.
    pub fn assert_invariants(&self) {
        let writes = self.write_violations.lock().unwrap().clone();
        assert!(
            writes.is_empty(),
            "node writes broke the invariants: {writes:#?}"
        );
        assert_at_rest(&self.fleet, &self.lowered);
    }

    /// Placements as names and amounts (UIDs differ between runs): what two runs must agree on.
    pub fn placements(&self) -> Placements {
        let nodes = self
            .fleet
            .nodes()
            .iter()
            .map(|n| {
                let status = n.status.clone().unwrap_or_default();
                let mut entries: Vec<_> = status
                    .allocations
                    .iter()
                    .map(|a| (a.tenant.clone(), a.resources))
                    .collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                (
                    n.metadata.name.clone().unwrap(),
                    (format!("{:?}", status.allocated), format!("{entries:?}")),
                )
            })
            .collect();
        let tenants = self
            .fleet
            .tenants()
            .iter()
            .map(|t| {
                let s = t.status.clone().unwrap_or_default();
                let spread: Vec<_> = s.placements.iter().map(|p| p.node.as_str()).collect();
                (
                    t.metadata.name.clone().unwrap(),
                    format!("{} {} {:?} {spread:?}", s.phase, s.node_name, s.reserved),
                )
            })
            .collect();
        Placements { nodes, tenants }
    }
}

/// Waits (up to 60 s) until `done` holds.
pub async fn wait_until(what: &str, done: impl Fn() -> bool) {
    wait_until_or(what, done, String::new).await;
}

/// [`wait_until`], saying what `explain` gives when it times out.
pub async fn wait_until_or(what: &str, done: impl Fn() -> bool, explain: impl Fn() -> String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}\n{}",
            explain()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every invariant at rest over a fleet's nodes and tenants (`lowered`: nodes whose capacity a
/// test lowered), for the tests that run a fleet without a [`Harness`].
pub fn assert_at_rest(fleet: &Fleet, lowered: &HashSet<String>) {
    if let Err(found) = invariants::check(
        &fleet.nodes(),
        &fleet.tenants(),
        lowered,
        Quiescence::Settled,
    ) {
        panic!("invariants violated at rest: {found:#?}");
    }
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("lowered", &self.lowered)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Placements {
    pub nodes: BTreeMap<String, (String, String)>,
    pub tenants: BTreeMap<String, String>,
}
