//! The money model: what the capacity tick must keep true at every step of a random sequence of
//! events, whatever people do (the purchase soak drives the events, `purchase_soak.rs`).
//!
//! - **Nothing is bought that no waiting tenant needs**: a request, when created, names at
//!   least one tenant seen waiting (PendingCapacity, or a blocked move) within [`RECENT`].
//! - **Nothing is bought twice for one need**: no tenant is named by two requests in flight
//!   (Pending or Provisioning) once the controller has ticked twice since. The known limit: two
//!   controllers running at once without leader election decide from their own memories (a
//!   class one of them rests after a failure, say) and may both buy for one need; the later of
//!   two purchases for the same tenants is withdrawn, other pairs go back idle once delivered.
//!   Pairs both made while two controllers ran are counted as reached, not as violations; so
//!   is a pair whose earlier request can no longer hold the tenant (it grew: bought again), and
//!   one for a tenant queued behind a StrictFIFO head (the head takes the room bought for those
//!   behind it, and they are bought for again: two needs, two machines), and one for a tenant
//!   deleted since (whatever it was bought, the idle rule sees it go back).
//! - **No request is left without a machine**: a Ready request whose Node is not there (or not
//!   labelled for it) is gone within the hand-back delay plus [`SLACK`].
//! - **No machine stays idle**: a Node a Ready request owns that holds nothing, while no tenant
//!   waits at all, goes back within the hand-back delay plus [`SLACK`] (a restart starts the
//!   clock again: the controller forgets since when, and waits again, later, never sooner).
//!
//! The model counts how often each rule was exercised, so a run that never reached one says so.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inmem_apiserver::ApiServer;
use kube::ResourceExt;
use serde_json::Value;
use tenant_placer::api::{GROUP, NODE_REQUEST_LABEL, NodeRequestPhase};

use crate::Harness;

/// A tenant seen waiting this recently still counts as waiting when a request is made for it:
/// the tick plans from a snapshot, and the create follows.
const RECENT: Duration = Duration::from_secs(2);
/// What a tick may take beyond the hand-back delay on a loaded machine.
const SLACK: Duration = Duration::from_secs(5);

/// What the model found and how often it checked each rule.
#[derive(Debug, Default)]
pub struct Findings {
    pub violations: Vec<String>,
    pub reached: BTreeMap<&'static str, u64>,
}

impl Findings {
    fn reach(&mut self, rule: &'static str) {
        *self.reached.entry(rule).or_default() += 1;
    }
}

/// The model's clocks, checked at each step.
#[derive(Debug, Default)]
pub struct MoneyModel {
    findings: Arc<Mutex<Findings>>,
    /// Requests seen while two controllers ran at once.
    concurrent: HashSet<String>,
    orphaned_since: HashMap<String, Instant>,
    idle_since: HashMap<String, Instant>,
}

fn tenant_key(t: &Value) -> String {
    format!(
        "{}/{}",
        t["metadata"]["namespace"].as_str().unwrap_or_default(),
        t["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Whether a tenant's status says it waits for room a machine could give.
fn waits(t: &Value) -> bool {
    let status = &t["status"];
    status["phase"] == "PendingCapacity"
        || status["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["reason"] == "MigrationBlocked"))
}

impl MoneyModel {
    /// Watches every committed write of `api` for the rules checked at commits.
    pub fn watch(api: &ApiServer) -> MoneyModel {
        let model = MoneyModel::default();
        let findings = model.findings.clone();
        let last_waiting: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        api.on_commit(move |c| {
            if c.group != GROUP {
                return;
            }
            if c.resource == "tenants" {
                if waits(c.object) {
                    last_waiting
                        .lock()
                        .unwrap()
                        .insert(tenant_key(c.object), Instant::now());
                }
                return;
            }
            if c.resource != "noderequests" {
                return;
            }
            let mut findings = findings.lock().unwrap();
            if c.old.is_none() {
                findings.reach("bought for a waiting tenant");
                let named: Vec<&str> = c.object["spec"]["tenants"]
                    .as_array()
                    .map(|t| t.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let waiting = last_waiting.lock().unwrap();
                let anyone = named
                    .iter()
                    .any(|t| waiting.get(*t).is_some_and(|at| at.elapsed() <= RECENT));
                if !anyone {
                    findings.violations.push(format!(
                        "request {} bought for {named:?}, none of whom waited",
                        c.name
                    ));
                }
            }
        });
        model
    }

    /// Two controllers run at once now: what is in flight meanwhile may have been bought twice.
    pub fn concurrent(&mut self, h: &Harness) {
        self.concurrent
            .extend(crate::requests::requests(h).iter().map(|r| r.name_any()));
    }

    /// The controller restarted: it forgets since when, and waits again.
    pub fn restarted(&mut self) {
        self.idle_since.clear();
        self.orphaned_since.clear();
    }

    /// Checks the clocked rules now, with `delay` the hand-back delay.
    pub fn step(&mut self, h: &Harness, delay: Duration) {
        let now = Instant::now();
        let requests = crate::requests::requests(h);
        let nodes = h.fleet.nodes();
        let tenants = h.fleet.api.list(GROUP, "tenants");
        let anyone_waits = tenants.iter().any(waits);
        let mut orphans = HashSet::new();
        let mut idle = HashSet::new();
        let mut findings = self.findings.lock().unwrap();
        let mut in_flight: HashMap<String, String> = HashMap::new();
        for r in &requests {
            let going = r.metadata.deletion_timestamp.is_some();
            if going
                || !matches!(
                    r.phase(),
                    NodeRequestPhase::Pending | NodeRequestPhase::Provisioning
                )
            {
                continue;
            }
            findings.reach("bought once per need");
            for t in &r.spec.tenants {
                let Some(other) = in_flight.insert(t.clone(), r.name_any()) else {
                    continue;
                };
                if self.concurrent.contains(&other) && self.concurrent.contains(&r.name_any()) {
                    findings.reach("bought twice while two controllers ran");
                    continue;
                }
                let tenant = tenants.iter().find(|x| tenant_key(x) == *t);
                if tenant.is_none() {
                    // Deleted since: both go back idle once delivered (the idle rule's).
                    findings.reach("bought for a tenant deleted since");
                    continue;
                }
                let outgrown = |name: &str| {
                    let Some(earlier) = requests.iter().find(|r| r.name_any() == name) else {
                        return false;
                    };
                    let capacity = serde_json::to_value(earlier.spec.capacity).unwrap_or_default();
                    tenant.is_some_and(|x| {
                        let replicas = x["spec"]["replicas"].as_i64().unwrap_or(1);
                        ["threads", "memoryGb", "storageGb"].iter().any(|d| {
                            x["spec"]["resources"][d].as_i64().unwrap_or(0) * replicas
                                > capacity[d].as_i64().unwrap_or(0)
                        })
                    })
                };
                if outgrown(&other) || outgrown(&r.name_any()) {
                    findings.reach("bought again for a tenant that grew");
                    continue;
                }
                let behind_head = tenant.is_some_and(|x| {
                    x["status"]["conditions"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["reason"] == "QueuedBehindOlder"))
                });
                if behind_head {
                    findings.reach("bought again behind a StrictFIFO head");
                    continue;
                }
                {
                    let said = |name: &str| {
                        requests
                            .iter()
                            .find(|r| r.name_any() == name)
                            .map(|r| {
                                format!(
                                    "{name} ({:?} for {:?}, created {:?})",
                                    r.phase(),
                                    r.spec.tenants,
                                    r.metadata.creation_timestamp
                                )
                            })
                            .unwrap_or_default()
                    };
                    let status = tenants
                        .iter()
                        .find(|x| tenant_key(x) == *t)
                        .map(|x| x["status"].to_string())
                        .unwrap_or_default();
                    findings.violations.push(format!(
                        "{t} is in two requests in flight: {} and {}; its status {status}",
                        said(&other),
                        said(&r.name_any())
                    ));
                }
            }
        }
        for r in &requests {
            if r.phase() != NodeRequestPhase::Ready || r.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = r.name_any();
            let named = r
                .status
                .as_ref()
                .map(|s| s.node_name.clone())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| name.clone());
            let node = nodes.iter().find(|n| {
                n.name_any() == named
                    && n.labels().get(NODE_REQUEST_LABEL).map(String::as_str) == Some(&name)
            });
            let Some(node) = node else {
                findings.reach("no request without a machine");
                let since = *self.orphaned_since.entry(name.clone()).or_insert(now);
                if now.duration_since(since) > delay + SLACK {
                    findings
                        .violations
                        .push(format!("request {name} Ready without its Node {named}"));
                }
                orphans.insert(name);
                continue;
            };
            if anyone_waits
                || node.metadata.deletion_timestamp.is_some()
                || !node.allocations().is_empty()
            {
                continue;
            }
            findings.reach("no machine idle");
            let since = *self.idle_since.entry(name.clone()).or_insert(now);
            if now.duration_since(since) > delay + SLACK {
                findings.violations.push(format!(
                    "request {name}'s Node {named} idle for {:?} with nobody waiting",
                    now.duration_since(since)
                ));
            }
            idle.insert(name);
        }
        self.orphaned_since.retain(|name, _| orphans.contains(name));
        self.idle_since.retain(|name, _| idle.contains(name));
    }

    /// What the model found.
    pub fn findings(&self) -> std::sync::MutexGuard<'_, Findings> {
        self.findings.lock().unwrap()
    }
}
