//! A seeded random soak of purchases: tenants applied, resized, deleted while their machine is on
//! the way; classes added, changed and deleted; a provisioner with random delays and failing
//! classes; drains during purchases; restarts mid-look; StrictFIFO heads no class can hold.
//! After quiescence, besides every reservation invariant: no tenant waits naming a request that
//! does not exist; no tenant is in two requests in flight; nothing stays in flight once the
//! provisioner is done; every delivered machine is used, handed back, or fits a waiting tenant.
//!
//! It runs twice: with the provisioner contract played directly, and with `--provisioner
//! cluster-api` against the simulated Cluster API (each class its own MachineDeployment), whose
//! faults add Machines that fail, and Machines deleted by hand (their MachineSet replaces them).
//! There, at rest, also: each MachineDeployment has as many Machines as replicas, every Machine
//! is claimed by a request that exists (none leaked), no request claims two, and every `Ready`
//! request's placement Node records its Machine.
//! Half the cases run `--consolidation WhenUnderutilized` (a budget of 1 or 2, some tenants
//! `do-not-disrupt`): at every Node write, no more nodes are being emptied by consolidation than
//! the budget, and none is marked while it holds a `do-not-disrupt` tenant. Every case makes room
//! by moves with a random `--make-room-moves` (0 to 4): at every Tenant write, no tenant is moved
//! off a node that is not draining (a move to make room) while it is `do-not-disrupt`. And no
//! loop: no tenant is moved for room back to a node it was moved off for room, and no node is
//! marked for consolidation again unless a person changed its state in between.
//! People attack the money path too: a live request deleted by hand, a bought Node's manifest
//! copied (an Offline, empty Node labelled for a live request), and with Cluster API a Machine's
//! claim re-pointed at another live request. At rest, also: every Ready request's Node is there
//! and labelled for it (none orphaned), and a Node only labelled for a request is never taken
//! for its machine.
//! At every step the money model (`money_model.rs`) is checked: nothing bought that no waiting
//! tenant needs, nothing bought twice for one need, no request left without a machine, no
//! machine idle past the hand-back delay; people also delete bought Nodes, run a second
//! controller for a while, change a MachineDeployment's replicas, and a class's machines may
//! deliver less than it promises.
//! With Cluster API, `TP_SOAK_ALL=1` adds the events that found the last open case (a claim
//! edited, a second controller at once, replicas changed by hand, a request or a bought Node
//! deleted by hand: docs/testing.md); with the provisioner contract every event always runs.
//! `TP_SOAK_CASES` sets the number of cases (default 6, for CI); `TP_SOAK_SEED` the first seed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::ResourceExt;
use serde_json::json;
use tenant_placer::api::capi::{CLAIM_ANNOTATION, MACHINE_ANNOTATION};
use tenant_placer::api::{CONSOLIDATING_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION};
use tenant_placer::api::{
    GROUP, NODE_REQUEST_LABEL, NodeRequest, NodeRequestPhase, ResourceAmounts, TenantPhase,
};
use tenant_placer::controller::disruption::{Budget, ConsolidationPolicy};
use tenant_placer::sim::Simulated;
use tenant_placer::sim::capi::{self, CapiSimConfig};
use tenant_placer::sim::provisioner::ProvisionerConfig;

use tenant_placer::controller::Handles;

use crate::money_model::MoneyModel;
use crate::*;

/// Whether every event runs (`TP_SOAK_ALL=1`), not only those CI holds to.
fn all_events() -> bool {
    std::env::var("TP_SOAK_ALL").is_ok_and(|v| v == "1")
}

/// The classes, with their threads.
const CLASSES: [(&str, i64); 3] = [("small", 16), ("large", 64), ("flaky", 32)];

/// Who buys: the provisioner contract played directly, or Cluster API (simulated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Buyer {
    Contract,
    ClusterApi,
}

/// The namespace of the MachineDeployments, one per class (`md-<class>`).
const CAPI_NS: &str = "fleet";

fn class(buyer: Buyer, name: &str, threads: i64, cost: i64, limit: i64) -> Value {
    let mut class = json!({"apiVersion": VERSION, "kind": "NodeClass", "metadata": {"name": name},
           "spec": {"capacity": {"threads": threads, "memoryGb": 256, "storageGb": 8000},
                    "provider": "lab/simulated", "monthlyCost": cost, "limit": limit}});
    if buyer == Buyer::ClusterApi {
        class["spec"]["clusterAPI"] =
            json!({"machineDeployment": {"namespace": CAPI_NS, "name": format!("md-{name}")}});
    }
    class
}

fn machine_deployment(class: &str) -> Value {
    let name = format!("md-{class}");
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
           "metadata": {"name": name, "namespace": CAPI_NS},
           "spec": {"clusterName": "soak", "replicas": 0,
                    "selector": {"matchLabels": {"pool": name}},
                    "template": {"metadata": {"labels": {"pool": name}},
                                 "spec": {"clusterName": "soak",
                                          "bootstrap": {"dataSecretName": "b"},
                                          "infrastructureRef": {
                                              "apiGroup": "infrastructure.cluster.x-k8s.io",
                                              "kind": "HetznerBareMetalMachineTemplate",
                                              "name": name}}}}})
}

/// The objects of a Cluster API kind, as stored.
fn capi_objects(h: &Harness, kind: capi::CapiKind) -> Vec<Value> {
    h.fleet.api.list(capi::GROUP, kind.plural())
}

fn requests(h: &Harness) -> Vec<NodeRequest> {
    h.fleet
        .api
        .list(GROUP, "noderequests")
        .into_iter()
        .filter_map(|r| serde_json::from_value(r).ok())
        .collect()
}

async fn purchase_case(buyer: Buyer, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let class = |name, threads, cost, limit| class(buyer, name, threads, cost, limit);
    let queue = if rng.bool() {
        placement::QueueMode::StrictFifo
    } else {
        placement::QueueMode::BestEffortFifo
    };
    let settings = Settings {
        queue,
        request_after: Some(Duration::ZERO),
        request_check: Duration::from_millis(rng.u64(10..=60)),
        empty_node_after: Duration::from_millis(200),
        cluster_api: buyer == Buyer::ClusterApi,
        consolidation: if rng.bool() {
            ConsolidationPolicy::WhenUnderutilized
        } else {
            ConsolidationPolicy::WhenEmpty
        },
        consolidate_after: Duration::from_millis(rng.u64(0..=100)),
        disruption_budget: Budget::Nodes(rng.u32(1..=2)),
        make_room_moves: rng.u16(0..=4),
        ..settings()
    };
    let api = ApiServer::new();
    let mut model = MoneyModel::watch(&api);
    let disruptions = watch_disruptions(&api, settings.disruption_budget);
    let touched: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let loops = watch_loops(&api, touched.clone());
    let history = Arc::new(Mutex::new(Vec::new()));
    let sink = history.clone();
    api.on_commit(move |c| {
        if c.group == capi::GROUP || c.resource == "noderequests" {
            let o = c.object;
            sink.lock().unwrap().push(format!(
                "rv {} {:?} {} {} replicas {} phase {} annotations {} finalizers {} deleting {} status.machine {} status.phase {} message {}",
                c.resource_version, c.event, c.resource, c.name, o["spec"]["replicas"],
                o["status"]["phase"], o["metadata"]["annotations"], o["metadata"]["finalizers"],
                !o["metadata"]["deletionTimestamp"].is_null(), o["status"]["machine"], o["status"]["phase"],
                o["status"]["message"]
            ));
        }
    });
    let mut h = Harness::start_on(
        api,
        &[node("n1").capacity(16, 64, 1000).manifest()],
        settings,
    )
    .await;
    h.apply(&[
        class("small", 16, 100, 3),
        class("large", 64, 300, 2),
        class("flaky", 32, 50, 2),
    ]);
    let provisioner = match buyer {
        Buyer::Contract => Simulated::Contract(ProvisionerConfig {
            delay: Duration::from_millis(rng.u64(0..=150)),
            failing: ["flaky".to_owned()].into(),
            every: Duration::from_millis(20),
            // Now and then `large` machines come up with less than the class promises.
            short: if rng.u8(0..3) == 0 {
                [("large".to_owned(), ResourceAmounts::new(48, 256, 8000))].into()
            } else {
                Default::default()
            },
        }),
        // Each phase lasts two looks at least, as a real Machine's deletion (its Node drained,
        // its server released) does: a Machine deleted by hand between two looks, its request
        // deleted and its replacement made, is the documented limit.
        Buyer::ClusterApi => Simulated::ClusterApi(CapiSimConfig {
            step: h.settings.request_check * 2 + Duration::from_millis(rng.u64(0..=50)),
            every: Duration::from_millis(20),
            failing_classes: ["flaky".to_owned()].into(),
            ..CapiSimConfig::default()
        }),
    };
    h.fleet.start_provisioner(provisioner).await.unwrap();
    if buyer == Buyer::ClusterApi {
        h.apply(&[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CAPI_NS}})]);
        for (name, _) in CLASSES {
            h.apply(&[machine_deployment(name)]);
        }
    }
    // What the running controller reports into (a restart starts afresh).
    let mut handles = h.handles.clone();
    let mut tenants: Vec<String> = Vec::new();
    let mut next = 0;
    let mut copies = 0;
    let mut other: Option<tokio::task::JoinHandle<()>> = None;
    // Machines people asked for by raising a MachineDeployment's replicas: nobody claims them.
    let mut by_hand: HashMap<String, i64> = HashMap::new();
    for _ in 0..rng.usize(8..20) {
        // With Cluster API, events 12 to 14 (a claim edited, a second controller, replicas
        // changed by hand) and a request (10) or a bought Node (15) deleted by hand found the
        // last open case with Machines deleted by hand (9): a Machine deleted, its request
        // deleted and its replacement made between two looks left the replacement unclaimed,
        // now told apart by the intended-replicas record (docs/testing.md); on demand still,
        // with TP_SOAK_ALL=1. With the provisioner contract every event runs (90 cases clean
        // after the last fix).
        let event = rng.u8(0..16);
        let open_case =
            buyer == Buyer::ClusterApi && ((12..=14).contains(&event) || matches!(event, 10 | 15));
        let event = if open_case && !all_events() {
            u8::MAX
        } else {
            event
        };
        eprintln!("seed {seed}: event {event}");
        match event {
            0..=3 => {
                let name = format!("t{next}");
                next += 1;
                // Now and then a head no class can hold (100 threads).
                let threads = if rng.u8(0..6) == 0 {
                    100
                } else {
                    rng.i64(1..=40)
                };
                let mut t = tenant(&name).resources(threads, 1, 1).manifest();
                if rng.u8(0..4) == 0 {
                    t["metadata"]["annotations"] = json!({DO_NOT_DISRUPT_ANNOTATION: "true"});
                }
                h.apply(&[t]);
                tenants.push(name);
            }
            4 if !tenants.is_empty() => {
                let name = &tenants[rng.usize(0..tenants.len())];
                let r = json!({"threads": rng.i64(1..=40), "memoryGb": 1, "storageGb": 1});
                h.apply(&[tenant_spec(name, json!({"resources": r}))]);
            }
            5 if !tenants.is_empty() => {
                // Deleted, maybe while its machine is on the way.
                let name = tenants.swap_remove(rng.usize(0..tenants.len()));
                h.delete_tenant(&name);
            }
            6 => {
                // A class changed (limit, price) or deleted and brought back.
                let (name, threads) = CLASSES[rng.usize(0..CLASSES.len())];
                if rng.bool() {
                    let _ = h.fleet.api.delete(GROUP, "nodeclasses", None, name);
                } else {
                    h.apply(&[class(name, threads, rng.i64(10..=400), rng.i64(1..=3))]);
                }
            }
            7 => {
                // A drain (of n1 or of a bought node) during purchases, or its cancel.
                let nodes = h.fleet.nodes();
                let node = &nodes[rng.usize(0..nodes.len())];
                let name = node.metadata.name.clone().unwrap_or_default();
                let state = ["Online", "Draining"][rng.usize(0..2)];
                // The node may be gone since the list (handed back): the apply would create
                // it, and the server refuses a Node without capacity. Nothing to drain then.
                let _ = h.fleet.api.apply(node_spec(&name, json!({"state": state})));
                *touched.lock().unwrap().entry(name).or_default() += 1;
            }
            8 => {
                // A restart mid-look.
                h.fleet.stop();
                handles = Handles::default();
                h.fleet.start_with(h.settings.clone(), handles.clone());
                model.restarted();
            }
            9 if buyer == Buyer::ClusterApi => {
                // A person deletes a Machine (its MachineSet replaces it).
                let machines = capi_objects(&h, capi::CapiKind::Machine);
                if !machines.is_empty() {
                    let machine = &machines[rng.usize(0..machines.len())];
                    let _ = h.fleet.api.delete(
                        capi::GROUP,
                        "machines",
                        Some(CAPI_NS),
                        machine["metadata"]["name"].as_str().unwrap(),
                    );
                }
            }
            10 => {
                // A person deletes a live request: its machine goes back, its tenants wait. Not
                // one whose Machine is going or gone: deleted with it in the same second, its
                // replacement cannot be told from ours (docs/node-requests.md).
                let machines = capi_objects(&h, capi::CapiKind::Machine);
                let steady = |r: &NodeRequest| {
                    let recorded = r.status.as_ref().map(|s| s.machine.as_str()).unwrap_or("");
                    recorded.is_empty()
                        || machines.iter().any(|m| {
                            format!("{CAPI_NS}/{}", m["metadata"]["name"].as_str().unwrap_or(""))
                                == recorded
                                && m["metadata"]["deletionTimestamp"].is_null()
                        })
                };
                let live: Vec<NodeRequest> = requests(&h).into_iter().filter(steady).collect();
                if !live.is_empty() {
                    let name = live[rng.usize(0..live.len())].name_any();
                    let _ = h.fleet.api.delete(GROUP, "noderequests", None, &name);
                }
            }
            11 => {
                // A person copies a bought Node's manifest: Offline, empty, labelled for a live
                // request. It must never be taken for that request's machine.
                let live = requests(&h);
                if !live.is_empty() {
                    let name = live[rng.usize(0..live.len())].name_any();
                    copies += 1;
                    h.apply(&[node(&format!("copy-{copies}"))
                        .capacity(8, 32, 100)
                        .state(tenant_placer::api::NodeState::Offline)
                        .label(NODE_REQUEST_LABEL, &name)
                        .manifest()]);
                }
            }
            12 if buyer == Buyer::ClusterApi => {
                // A person re-points a claimed Machine at another live request.
                let machines = capi_objects(&h, capi::CapiKind::Machine);
                let live = requests(&h);
                let claimed: Vec<&Value> = machines
                    .iter()
                    .filter(|m| m["metadata"]["annotations"][CLAIM_ANNOTATION].is_string())
                    .collect();
                if !claimed.is_empty() && !live.is_empty() {
                    let machine = claimed[rng.usize(0..claimed.len())];
                    let other = live[rng.usize(0..live.len())].name_any();
                    let _ = h.fleet.api.apply(json!({
                        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                        "metadata": {"name": machine["metadata"]["name"], "namespace": CAPI_NS,
                                     "annotations": {CLAIM_ANNOTATION: other}}}));
                }
            }
            13 => {
                // A second controller for a while (no leader election: both act).
                match other.take() {
                    Some(running) => {
                        model.concurrent(&h);
                        running.abort();
                    }
                    None => {
                        other = Some(tokio::spawn(tenant_placer::controller::run_with(
                            h.fleet.client.clone(),
                            h.settings.clone(),
                            Handles::default(),
                        )));
                    }
                }
                model.restarted();
            }
            14 if buyer == Buyer::ClusterApi => {
                // A person changes a MachineDeployment's replicas by hand.
                let (class, _) = CLASSES[rng.usize(0..CLASSES.len())];
                let name = format!("md-{class}");
                if let Some(md) =
                    h.fleet
                        .api
                        .get(capi::GROUP, "machinedeployments", Some(CAPI_NS), &name)
                {
                    let replicas = md["spec"]["replicas"].as_i64().unwrap_or(0);
                    let to = if rng.bool() {
                        replicas + 1
                    } else {
                        (replicas - 1).max(0)
                    };
                    // A lowering takes whichever Machine Cluster API picks (ours, often): only
                    // raises add Machines nobody claims.
                    *by_hand.entry(name.clone()).or_default() += (to - replicas).max(0);
                    let _ = h.fleet.api.apply(json!({
                        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
                        "metadata": {"name": name, "namespace": CAPI_NS},
                        "spec": {"replicas": to}}));
                }
            }
            15 => {
                // A person deletes a bought Node: it drains, and goes once empty.
                let bought: Vec<String> = h
                    .fleet
                    .nodes()
                    .iter()
                    .filter(|n| n.labels().contains_key(NODE_REQUEST_LABEL))
                    .map(|n| n.name_any())
                    .collect();
                if !bought.is_empty() {
                    let name = &bought[rng.usize(0..bought.len())];
                    let _ = h.fleet.api.delete(GROUP, "nodes", None, name);
                }
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(0..80))).await;
        if other.is_some() {
            model.concurrent(&h);
        }
        // A positive sign that the running controller looked since: two more ticks.
        let from = handles.metrics.request_looks_done();
        h.until("two more ticks", || {
            handles.metrics.request_looks_done() >= from + 2
        })
        .await;
        if other.is_some() {
            model.concurrent(&h);
        }
        model.step(&h, h.settings.empty_node_after);
    }
    if let Some(running) = other.take() {
        model.concurrent(&h);
        running.abort();
        model.restarted();
    }
    // Classes as they were, so that every waiting tenant some class holds can be bought for.
    h.apply(&[class("small", 16, 100, 3), class("large", 64, 300, 2)]);
    let _ = h.fleet.api.delete(GROUP, "nodeclasses", None, "flaky");
    // Quiet: nothing in flight, no empty bought node left to hand back, the writes settled.
    for _ in 0..200 {
        h.settle().await;
        let in_flight = requests(&h).iter().any(|r| {
            matches!(
                r.phase(),
                NodeRequestPhase::Pending | NodeRequestPhase::Provisioning
            )
        });
        if !in_flight {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Looks spanning twice the empty-node period (each at least `request_check` after the
    // last): an empty bought node has been seen empty long enough and handed back.
    let period = h.settings.empty_node_after.as_millis() * 2;
    let looks = u64::try_from(period / h.settings.request_check.as_millis()).unwrap() + 2;
    let from = handles.metrics.request_looks_done();
    h.until("looks spanning twice the empty-node period", || {
        handles.metrics.request_looks_done() >= from + looks
    })
    .await;
    h.settle().await;
    if buyer == Buyer::ClusterApi {
        // Cluster API at rest too: Machines match replicas, none being deleted.
        h.until("Cluster API at rest", || capi_at_rest(&h)).await;
        h.settle().await;
        let check = || check_machines(&h, seed, &by_hand);
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)).is_err() {
            for line in history.lock().unwrap().iter() {
                eprintln!("{line}");
            }
            panic!("seed {seed}");
        }
    }
    h.lowered.clear();
    h.assert_invariants();
    check_purchases(&h, seed);
    model.step(&h, h.settings.empty_node_after);
    let findings = model.findings();
    assert!(
        findings.violations.is_empty(),
        "seed {seed}: the money model: {:#?}",
        findings.violations
    );
    eprintln!("seed {seed}: money rules reached {:?}", findings.reached);
    let disruptions = disruptions.lock().unwrap();
    assert!(disruptions.is_empty(), "seed {seed}: {disruptions:?}");
    let loops = loops.lock().unwrap();
    assert!(loops.is_empty(), "seed {seed}: {loops:?}");
}

/// Make-room's and consolidation's rules over time, checked at every committed write: no
/// `do-not-disrupt` tenant moved off a node that is not draining (a move to make room), no
/// tenant moved for room back to a node it was moved off for room, and no node marked for
/// consolidation again unless a person changed its state since (`touched` counts those).
fn watch_loops(
    api: &ApiServer,
    touched: Arc<Mutex<HashMap<String, usize>>>,
) -> Arc<Mutex<Vec<String>>> {
    let found = Arc::new(Mutex::new(Vec::new()));
    let sink = found.clone();
    // (tenant, from, to) of each move to make room; marks per node.
    let moves: Arc<Mutex<Vec<(String, String, String)>>> = Arc::default();
    let marks: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    api.on_commit(move |c| {
        if c.group != GROUP {
            return;
        }
        if c.resource == "tenants" {
            let migration = &c.object["status"]["migration"];
            let recorded_before = c.old.is_some_and(|o| !o["status"]["migration"].is_null());
            let (Some(from), Some(to)) = (migration["from"].as_str(), migration["to"].as_str())
            else {
                return;
            };
            if recorded_before {
                return;
            }
            let draining = c.list(GROUP, "nodes").iter().any(|n| {
                n["metadata"]["name"] == from
                    && (n["spec"]["state"] == "Draining"
                        || !n["metadata"]["deletionTimestamp"].is_null())
            });
            if draining {
                return;
            }
            let tenant = c.name.to_owned();
            if c.object["metadata"]["annotations"][DO_NOT_DISRUPT_ANNOTATION] == "true" {
                sink.lock().unwrap().push(format!(
                    "rv {}: do-not-disrupt {tenant} moved {from} -> {to} to make room",
                    c.resource_version
                ));
            }
            let mut moves = moves.lock().unwrap();
            if moves
                .iter()
                .any(|(t, f, d)| *t == tenant && f == to && d == from)
            {
                sink.lock().unwrap().push(format!(
                    "rv {}: {tenant} moved back {from} -> {to} for room",
                    c.resource_version
                ));
            }
            moves.push((tenant, from.to_owned(), to.to_owned()));
        } else if c.resource == "nodes" {
            let marked =
                |n: &Value| n["metadata"]["annotations"][CONSOLIDATING_ANNOTATION].is_string();
            if !marked(c.object) || c.old.is_some_and(marked) {
                return;
            }
            let mut marks = marks.lock().unwrap();
            let count = marks.entry(c.name.to_owned()).or_default();
            *count += 1;
            let allowed = 1 + touched.lock().unwrap().get(c.name).copied().unwrap_or(0);
            if *count > allowed {
                sink.lock().unwrap().push(format!(
                    "rv {}: {} marked for consolidation {} times, changed by a person {} times",
                    c.resource_version,
                    c.name,
                    count,
                    allowed - 1
                ));
            }
        }
    });
    found
}

/// Consolidation's rules, checked at every committed Node write: no more nodes being emptied by
/// it than the budget, and none marked while it holds a `do-not-disrupt` tenant.
fn watch_disruptions(api: &ApiServer, budget: Budget) -> Arc<Mutex<Vec<String>>> {
    let found = Arc::new(Mutex::new(Vec::new()));
    let sink = found.clone();
    let allowed = budget.allowed(0);
    api.on_commit(move |c| {
        if c.group != GROUP || c.resource != "nodes" {
            return;
        }
        let marked = |n: &Value| n["metadata"]["annotations"][CONSOLIDATING_ANNOTATION].is_string();
        let holds = |n: &Value| {
            n["status"]["allocations"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        };
        let emptying = c
            .list(GROUP, "nodes")
            .iter()
            .filter(|n| marked(n) && n["spec"]["state"] == "Draining" && holds(n))
            .count();
        if emptying > allowed {
            sink.lock().unwrap().push(format!(
                "rv {}: {emptying} nodes emptied at once, budget {allowed}",
                c.resource_version
            ));
        }
        if marked(c.object) && !c.old.is_some_and(marked) {
            let kept: Vec<&str> = c
                .list(GROUP, "tenants")
                .iter()
                .filter(|t| t["metadata"]["annotations"][DO_NOT_DISRUPT_ANNOTATION] == "true")
                .filter_map(|t| t["metadata"]["uid"].as_str())
                .collect();
            let held = c.object["status"]["allocations"]
                .as_array()
                .into_iter()
                .flatten();
            for entry in held {
                if entry["uid"].as_str().is_some_and(|uid| kept.contains(&uid)) {
                    sink.lock().unwrap().push(format!(
                        "rv {}: {} marked for consolidation holding do-not-disrupt {}",
                        c.resource_version, c.name, entry["tenant"]
                    ));
                }
            }
        }
    });
    found
}

/// Every MachineDeployment has as many Machines as replicas, and none is being deleted.
fn capi_at_rest(h: &Harness) -> bool {
    let machines = capi_objects(h, capi::CapiKind::Machine);
    let being_deleted = machines
        .iter()
        .any(|m| !m["metadata"]["deletionTimestamp"].is_null());
    !being_deleted
        && capi_objects(h, capi::CapiKind::MachineDeployment)
            .iter()
            .all(|md| {
                let name = md["metadata"]["name"].as_str().unwrap();
                let replicas = md["spec"]["replicas"].as_i64().unwrap_or(1);
                let of_it = machines
                    .iter()
                    .filter(|m| m["metadata"]["labels"][capi::DEPLOYMENT_NAME_LABEL] == name)
                    .count();
                i64::try_from(of_it).unwrap() == replicas
            })
}

/// What the deployments, Machines and requests say, for a failure's message.
fn capi_state(h: &Harness) -> String {
    let mut lines = Vec::new();
    for md in capi_objects(h, capi::CapiKind::MachineDeployment) {
        lines.push(format!(
            "MachineDeployment {} replicas {}",
            md["metadata"]["name"], md["spec"]["replicas"]
        ));
    }
    for m in capi_objects(h, capi::CapiKind::Machine) {
        lines.push(format!(
            "Machine {} created {} phase {} claim {} annotations {}",
            m["metadata"]["name"],
            m["metadata"]["creationTimestamp"],
            m["status"]["phase"],
            m["metadata"]["annotations"][CLAIM_ANNOTATION],
            m["metadata"]["annotations"]
        ));
    }
    for n in h.fleet.nodes() {
        lines.push(format!(
            "Node {} deleting {} state {:?} allocations {:?}",
            n.metadata.name.as_deref().unwrap_or_default(),
            n.metadata.deletion_timestamp.is_some(),
            n.spec.state,
            n.allocations().len()
        ));
    }
    for r in requests(h) {
        lines.push(format!(
            "NodeRequest {} class {} created {:?} deleting {} status {}",
            r.metadata.name.as_deref().unwrap_or_default(),
            r.spec.node_class,
            r.metadata.creation_timestamp,
            r.metadata.deletion_timestamp.is_some(),
            serde_json::to_string(&r.status).unwrap()
        ));
    }
    lines.join("\n")
}

/// The Cluster API invariants at rest (module doc).
/// `by_hand`: by MachineDeployment, how many replicas people added (their Machines are theirs,
/// claimed by no request, up to that many).
fn check_machines(h: &Harness, seed: u64, by_hand: &HashMap<String, i64>) {
    let state = capi_state(h);
    let requests = requests(h);
    let mut claims: HashMap<String, String> = HashMap::new();
    let mut unclaimed: HashMap<String, i64> = HashMap::new();
    for machine in capi_objects(h, capi::CapiKind::Machine) {
        let name = machine["metadata"]["name"].as_str().unwrap().to_owned();
        let Some(claim) = machine["metadata"]["annotations"][CLAIM_ANNOTATION].as_str() else {
            let md = machine["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let count = unclaimed.entry(md.clone()).or_default();
            *count += 1;
            assert!(
                *count <= by_hand.get(&md).copied().unwrap_or(0),
                "seed {seed}: Machine {name} is claimed by no request: a leaked machine\n{state}"
            );
            continue;
        };
        // A request deleted by hand keeps its Machine while its Node still holds a tenant that
        // cannot leave (MigrationBlocked): the reservation is never lost for the money.
        let draining = |r: &NodeRequest| {
            h.fleet.nodes().iter().any(|n| {
                n.metadata.name.as_deref() == Some(r.made_node()) && !n.allocations().is_empty()
            })
        };
        assert!(
            requests
                .iter()
                .any(|r| r.metadata.name.as_deref() == Some(claim)
                    && (r.metadata.deletion_timestamp.is_none() || draining(r))),
            "seed {seed}: Machine {name} is claimed by {claim}, which is gone: a leaked machine\n{state}"
        );
        if let Some(other) = claims.insert(claim.to_owned(), name.clone()) {
            panic!("seed {seed}: {claim} claims two Machines: {other} and {name}");
        }
    }
    for r in &requests {
        if r.phase() != NodeRequestPhase::Ready {
            continue;
        }
        let name = r.metadata.name.as_deref().unwrap_or_default();
        let node = h
            .fleet
            .nodes()
            .into_iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("seed {seed}: Ready request {name} has no Node"));
        let machine = claims
            .get(name)
            .unwrap_or_else(|| panic!("seed {seed}: Ready request {name} has no Machine"));
        assert_eq!(
            node.annotations().get(MACHINE_ANNOTATION),
            Some(&format!("{CAPI_NS}/{machine}")),
            "seed {seed}: Node {name} does not record its Machine"
        );
    }
}

/// The purchase invariants at rest (module doc).
fn check_purchases(h: &Harness, seed: u64) {
    let requests = requests(h);
    let names: Vec<String> = requests
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .collect();
    let tenants = h.fleet.tenants();
    // No tenant waits naming a request that does not exist.
    for t in &tenants {
        let Some(status) = &t.status else { continue };
        if status.phase != TenantPhase::PendingCapacity {
            continue;
        }
        if let Some(rest) = status.message.split("node request ").nth(1) {
            let named = rest.split_whitespace().next().unwrap_or_default();
            assert!(
                names.iter().any(|n| n == named),
                "seed {seed}: {} names {named}, which does not exist: {}",
                t.key(),
                status.message
            );
        }
    }
    // Nothing in flight once the provisioner is done, and no tenant in two of them.
    let mut in_flight: HashMap<&str, &str> = HashMap::new();
    for r in &requests {
        if matches!(
            r.phase(),
            NodeRequestPhase::Pending | NodeRequestPhase::Provisioning
        ) {
            for t in &r.spec.tenants {
                let name = r.metadata.name.as_deref().unwrap_or_default();
                if let Some(other) = in_flight.insert(t, name) {
                    panic!("seed {seed}: {t} is in two requests in flight: {other} and {name}");
                }
            }
        }
    }
    assert!(
        in_flight.is_empty(),
        "seed {seed}: requests still in flight at rest: {in_flight:?}"
    );
    // Every delivered machine holds someone, or is handed back, or fits a waiting tenant.
    let waiting: Vec<placement::Resources> = tenants
        .iter()
        .filter(|t| {
            t.status
                .as_ref()
                .is_some_and(|s| s.phase == TenantPhase::PendingCapacity)
                && !t.spec.suspend
        })
        .filter_map(|t| t.spec.footprint().ok())
        .collect();
    let nodes = h.fleet.nodes();
    // Every Ready request's Node is there and labelled for it: none is orphaned at rest.
    let owned: Vec<&str> = requests
        .iter()
        .filter(|r| r.phase() == NodeRequestPhase::Ready)
        .map(|r| {
            let name = r.metadata.name.as_deref().unwrap_or_default();
            let node = r
                .status
                .as_ref()
                .map(|s| s.node_name.as_str())
                .filter(|n| !n.is_empty())
                .unwrap_or(name);
            assert!(
                nodes
                    .iter()
                    .any(|n| n.metadata.name.as_deref() == Some(node)
                        && n.labels().get(NODE_REQUEST_LABEL).map(String::as_str) == Some(name)),
                "seed {seed}: request {name} is Ready, but its Node {node} is not there"
            );
            node
        })
        .collect();
    for node in nodes.iter() {
        // Only a machine a request owns is judged: a copy is only labelled.
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if !owned.contains(&name)
            || node.metadata.deletion_timestamp.is_some()
            || !node.allocations().is_empty()
        {
            continue;
        }
        let capacity = node.spec.capacity.to_resources().unwrap();
        assert!(
            waiting.iter().any(|f| f.fits_within(&capacity)),
            "seed {seed}: {} holds nothing, no waiting tenant fits it, and it was not handed back",
            node.metadata.name.as_deref().unwrap_or_default()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_random_purchase_soak_keeps_every_invariant() {
    super::soak::seeded("purchase soak", |seed| purchase_case(Buyer::Contract, seed)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_random_cluster_api_soak_keeps_every_invariant() {
    super::soak::seeded("cluster-api soak", |seed| {
        purchase_case(Buyer::ClusterApi, seed)
    })
    .await;
}
