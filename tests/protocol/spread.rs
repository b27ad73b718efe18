//! Spread tenants (`spec.spread`): replicas on different nodes or balanced across zones, placed
//! all or none, on the in-memory API with the controller's real loops.

use serde_json::json;
use tenant_placer::api::{GROUP, TenantMode, TenantPhase, TenantSpread, ZONE_LABEL};

use crate::*;

/// Six nodes of 8 threads in three zones: fsn1 (a1, a2), hel1 (c1, c2), nbg1 (b1, b2).
pub fn zoned_nodes() -> Vec<Value> {
    [
        ("a1", "fsn1"),
        ("a2", "fsn1"),
        ("b1", "nbg1"),
        ("b2", "nbg1"),
        ("c1", "hel1"),
        ("c2", "hel1"),
    ]
    .into_iter()
    .map(|(name, zone)| {
        node(name)
            .capacity(8, 32, 400)
            .label(ZONE_LABEL, zone)
            .manifest()
    })
    .collect()
}

/// Where a tenant's replicas are, by node name, as its status lists them.
fn placements(h: &Harness, name: &str) -> Vec<(String, String)> {
    h.tenant(name)
        .and_then(|t| t.status)
        .map(|s| s.placements.into_iter().map(|p| (p.node, p.zone)).collect())
        .unwrap_or_default()
}

fn phase(h: &Harness, name: &str) -> Option<TenantPhase> {
    h.tenant(name).and_then(|t| t.status).map(|s| s.phase)
}

/// The nodes holding an entry of the tenant, by name, with each entry's replicas.
fn held(h: &Harness, name: &str) -> Vec<(String, i64, Option<u32>)> {
    let key = format!("default/{name}");
    let mut held: Vec<_> = h
        .fleet
        .nodes()
        .iter()
        .flat_map(|n| {
            let node = n.metadata.name.clone().unwrap();
            n.allocations()
                .iter()
                .filter(|a| *a.tenant == *key)
                .map(|a| (node.clone(), a.resources.threads, a.replicas))
                .collect::<Vec<_>>()
        })
        .collect();
    held.sort();
    held
}

/// What `held` reads of a spread tenant with one replica of `threads` threads on each node.
fn one_replica_each(nodes: &[&str], threads: i64) -> Vec<(String, i64, Option<u32>)> {
    nodes
        .iter()
        .map(|n| ((*n).to_owned(), threads, Some(1)))
        .collect()
}

/// A three-replica Zones tenant: one replica in each zone, the first node by name in each.
async fn three_zones(h: &Harness) {
    h.apply(&[tenant("db")
        .resources(2, 4, 20)
        .spread(TenantSpread::Zones, 3)
        .manifest()]);
    h.until("db Active", || phase(h, "db") == Some(TenantPhase::Active))
        .await;
    h.settle().await;
    assert_eq!(
        placements(h, "db"),
        [
            ("a1".to_owned(), "fsn1".to_owned()),
            ("b1".to_owned(), "nbg1".to_owned()),
            ("c1".to_owned(), "hel1".to_owned()),
        ]
    );
    assert_eq!(held(h, "db"), one_replica_each(&["a1", "b1", "c1"], 2));
    let status = h.tenant("db").unwrap().status.unwrap();
    assert_eq!(
        (status.node_name.as_str(), status.reserved.threads),
        ("a1", 6)
    );
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_replica_zones_tenant_lands_in_three_zones() {
    let h = Harness::start(&zoned_nodes()).await;
    three_zones(&h).await;
    // Deleted: every replica goes.
    h.delete_tenant("db");
    h.until("db gone", || h.tenant("db").is_none()).await;
    assert!(held(&h, "db").is_empty());
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_that_cannot_be_spread_holds_nothing_and_says_why_until_room_appears() {
    // nbg1 is full: no third zone has room.
    let mut nodes = zoned_nodes();
    nodes.retain(|n| n["metadata"]["name"] != "b2");
    let h = Harness::start(&nodes).await;
    h.apply(&[tenant("filler")
        .resources(7, 1, 1)
        .node_selector(&[(ZONE_LABEL, "nbg1")])
        .manifest()]);
    h.until("filler Active", || {
        phase(&h, "filler") == Some(TenantPhase::Active)
    })
    .await;
    h.apply(&[tenant("db")
        .resources(2, 4, 20)
        .spread(TenantSpread::Zones, 3)
        .manifest()]);
    h.until("db waits", || {
        phase(&h, "db") == Some(TenantPhase::PendingCapacity)
    })
    .await;
    h.settle().await;
    assert!(
        held(&h, "db").is_empty(),
        "all or none: {:?}",
        held(&h, "db")
    );
    let message = h.tenant("db").unwrap().status.unwrap().message;
    assert!(
        message.contains("needs 3 zones with room for 1 replica(s) each (2 threads, 4 GB, 20 GB)")
            && message.contains("zones with room: fsn1, hel1"),
        "{message}"
    );
    h.assert_invariants();
    // Room in nbg1: placed whole.
    h.apply(&[node("b2")
        .capacity(8, 32, 400)
        .label(ZONE_LABEL, "nbg1")
        .manifest()]);
    h.until("db Active", || phase(&h, "db") == Some(TenantPhase::Active))
        .await;
    h.settle().await;
    assert_eq!(held(&h, "db").len(), 3);
    assert!(held(&h, "db").iter().any(|(n, _, _)| n == "b2"));
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_other_than_none_needs_cluster_mode() {
    let h = Harness::start(&zoned_nodes()).await;
    let mut manifest = tenant("solo").resources(1, 1, 1).manifest();
    manifest["spec"]["spread"] = json!("Nodes");
    let refused = h.fleet.api.apply(manifest).unwrap_err().to_string();
    assert!(
        refused.contains("spec.spread other than None needs spec.mode Cluster"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_on_a_draining_node_moves_within_its_zone_and_the_rest_stay() {
    let h = Harness::start(&zoned_nodes()).await;
    three_zones(&h).await;
    h.apply(&[node_spec("b1", json!({"state": "Draining"}))]);
    h.until("b1 drained", || h.allocated_threads("b1") == 0)
        .await;
    h.settle().await;
    let nodes: Vec<String> = held(&h, "db").into_iter().map(|(n, _, _)| n).collect();
    assert_eq!(nodes, ["a1", "b2", "c1"]);
    assert_eq!(phase(&h, "db"), Some(TenantPhase::Active));
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_that_does_not_fit_on_every_node_keeps_every_old_entry() {
    let h = Harness::start(&zoned_nodes()).await;
    three_zones(&h).await;
    // Each replica grows to 5 threads: hel1's nodes have 4.
    for name in ["c1", "c2"] {
        h.apply(&[node(name)
            .capacity(4, 32, 400)
            .label(ZONE_LABEL, "hel1")
            .manifest()]);
    }
    h.settle().await;
    h.apply(&[tenant_spec(
        "db",
        json!({"resources": {"threads": 5, "memoryGb": 4, "storageGb": 20}}),
    )]);
    h.until("db Resizing", || {
        phase(&h, "db") == Some(TenantPhase::Resizing)
    })
    .await;
    h.settle().await;
    assert_eq!(
        held(&h, "db"),
        one_replica_each(&["a1", "b1", "c1"], 2),
        "every old entry, as it was"
    );
    h.assert_invariants();
    // Back to a size that fits: Active again, where it was.
    h.apply(&[tenant_spec(
        "db",
        json!({"resources": {"threads": 3, "memoryGb": 4, "storageGb": 20}}),
    )]);
    h.until("db Active", || phase(&h, "db") == Some(TenantPhase::Active))
        .await;
    h.settle().await;
    assert_eq!(held(&h, "db"), one_replica_each(&["a1", "b1", "c1"], 3));
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_replicas_go_where_the_zones_stay_balanced_and_fewer_leave_the_fullest_zone() {
    let h = Harness::start(&zoned_nodes()).await;
    three_zones(&h).await;
    h.apply(&[tenant_spec("db", json!({"replicas": 5}))]);
    h.until("db holds 5", || {
        held(&h, "db").len() == 5 && phase(&h, "db") == Some(TenantPhase::Active)
    })
    .await;
    h.settle().await;
    let nodes: Vec<String> = held(&h, "db").into_iter().map(|(n, _, _)| n).collect();
    // Two zones get a second replica: the first by name (fsn1, hel1).
    assert_eq!(nodes, ["a1", "a2", "b1", "c1", "c2"]);
    h.assert_invariants();
    h.apply(&[tenant_spec("db", json!({"replicas": 3}))]);
    h.until("db holds 3", || held(&h, "db").len() == 3).await;
    h.settle().await;
    assert_eq!(phase(&h, "db"), Some(TenantPhase::Active));
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_controllers_placing_spread_tenants_at_once_place_each_all_or_none() {
    let h = Harness::start(&zoned_nodes()).await;
    let other = tokio::spawn(tenant_placer::controller::run(
        h.fleet.client.clone(),
        settings(),
    ));
    // 48 threads in all; ten tenants of three 2-thread replicas ask 60: some must wait.
    let tenants: Vec<Value> = (0..10)
        .map(|i| {
            tenant(&format!("db-{i}"))
                .resources(2, 1, 1)
                .spread(TenantSpread::Zones, 3)
                .manifest()
        })
        .collect();
    h.apply(&tenants);
    h.until("every tenant decided", || {
        (0..10).all(|i| {
            matches!(
                phase(&h, &format!("db-{i}")),
                Some(TenantPhase::Active | TenantPhase::PendingCapacity)
            )
        })
    })
    .await;
    h.settle().await;
    other.abort();
    h.settle().await;
    h.assert_invariants();
    let placed = (0..10)
        .filter(|i| phase(&h, &format!("db-{i}")) == Some(TenantPhase::Active))
        .count();
    // Each zone has 16 threads: eight replicas of 2 in each, so eight tenants whole.
    assert_eq!(placed, 8);
    for i in 0..10 {
        let name = format!("db-{i}");
        let held = held(&h, &name).len();
        assert!(held == 0 || held == 3, "{name} holds {held} replicas");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spread_tenant_on_several_nodes_is_not_a_move_in_flight() {
    // One move at a time: were db counted as a move, the drain below would wait for it forever.
    let h = Harness::start_on(
        inmem_apiserver::ApiServer::new(),
        &zoned_nodes(),
        Settings {
            max_migrations: 1,
            ..settings()
        },
    )
    .await;
    three_zones(&h).await;
    h.apply(&[tenant("web").resources(1, 1, 1).manifest()]);
    h.until("web Active", || {
        phase(&h, "web") == Some(TenantPhase::Active)
    })
    .await;
    let on = h.tenant("web").unwrap().status.unwrap().node_name;
    assert_eq!(on, "a1");
    h.apply(&[node_spec("a1", json!({"state": "Cordoned"}))]);
    h.apply(&[node_spec("a1", json!({"state": "Draining"}))]);
    h.until("web moved", || {
        h.tenant("web")
            .and_then(|t| t.status)
            .is_some_and(|s| s.node_name != "a1" && s.phase == TenantPhase::Active)
    })
    .await;
    h.settle().await;
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_cannot_go_back_to_none_but_may_change_between_nodes_and_zones() {
    let h = Harness::start(&zoned_nodes()).await;
    three_zones(&h).await;
    let refused = h
        .fleet
        .api
        .apply(tenant_spec("db", json!({"spread": "None"})))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("spec.spread cannot go back to None"),
        "{refused}"
    );
    // Nodes: the replicas it holds are on three nodes already; nothing moves.
    h.apply(&[tenant_spec("db", json!({"spread": "Nodes"}))]);
    h.settle().await;
    let nodes: Vec<String> = held(&h, "db").into_iter().map(|(n, _, _)| n).collect();
    assert_eq!(nodes, ["a1", "b1", "c1"]);
    assert_eq!(phase(&h, "db"), Some(TenantPhase::Active));
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_tenant_on_one_node_spreads_when_asked_keeping_one_replica_where_it_was() {
    let h = Harness::start(&zoned_nodes()).await;
    h.apply(&[tenant("db")
        .resources(2, 4, 20)
        .mode(tenant_placer::api::TenantMode::Cluster)
        .replicas(3)
        .manifest()]);
    h.until("db Active", || phase(&h, "db") == Some(TenantPhase::Active))
        .await;
    assert_eq!(held(&h, "db"), [("a1".to_owned(), 6, None)]);
    h.apply(&[tenant_spec("db", json!({"spread": "Zones"}))]);
    h.until("db spread", || held(&h, "db").len() == 3).await;
    h.settle().await;
    assert_eq!(held(&h, "db"), one_replica_each(&["a1", "b1", "c1"], 2));
    assert_eq!(placements(&h, "db").len(), 3);
    h.assert_invariants();
}

/// One case of the spread soak: six nodes in three zones (one may lose its zone label), spread
/// and plain tenants created, resized, given more or fewer replicas, switched between `Nodes`
/// and `Zones` (a plain Cluster tenant spread), suspended and deleted; nodes resized, cordoned,
/// drained, wiped, deleted, moved to another zone or out of every zone; restarts and a second
/// controller; API faults. Every invariant,
/// spread's all or none among them, is checked once the controllers are quiet.
async fn spread_soak_case(seed: u64) {
    const NAMES: [(&str, &str); 6] = [
        ("a1", "fsn1"),
        ("a2", "fsn1"),
        ("b1", "nbg1"),
        ("b2", "nbg1"),
        ("c1", "hel1"),
        ("c2", "hel1"),
    ];
    let mut rng = fastrand::Rng::with_seed(seed);
    let zoned = |name: &str, zone: &str, threads: i64| {
        node(name)
            .capacity(threads, 64, 1000)
            .label(ZONE_LABEL, zone)
            .manifest()
    };
    let nodes: Vec<Value> = NAMES
        .iter()
        .map(|(name, zone)| zoned(name, zone, rng.i64(4..=16)))
        .collect();
    let mut h = Harness::start(&nodes).await;
    let mut tenants: Vec<String> = Vec::new();
    let mut second: Option<tokio::task::JoinHandle<()>> = None;
    let mut next = 0;
    for _ in 0..rng.usize(10..30) {
        if rng.u8(0..5) == 0 {
            h.fleet.api.inject(super::soak::random_fault(&mut rng));
        }
        let pick = |rng: &mut fastrand::Rng, tenants: &[String]| {
            tenants[rng.usize(0..tenants.len())].clone()
        };
        match rng.u8(0..15) {
            0..=3 => {
                let name = format!("t{next}");
                next += 1;
                let mut t =
                    tenant(&name).resources(rng.i64(1..=4), rng.i64(1..=8), rng.i64(1..=100));
                t = match rng.u8(0..4) {
                    0 => t,
                    1 => t.mode(TenantMode::Cluster).replicas(rng.i32(2..=3)),
                    2 => t.spread(TenantSpread::Nodes, rng.i32(2..=4)),
                    _ => t.spread(TenantSpread::Zones, rng.i32(2..=5)),
                };
                h.apply(&[t.manifest()]);
                tenants.push(name);
            }
            4 if !tenants.is_empty() => {
                let name = pick(&mut rng, &tenants);
                let r = json!({"threads": rng.i64(1..=6), "memoryGb": rng.i64(1..=8), "storageGb": rng.i64(1..=100)});
                h.apply(&[tenant_spec(&name, json!({"resources": r}))]);
            }
            5 if !tenants.is_empty() => {
                // More or fewer replicas (refused by CEL on a Standalone tenant: ignored).
                let name = pick(&mut rng, &tenants);
                let _ = h
                    .fleet
                    .api
                    .apply(tenant_spec(&name, json!({"replicas": rng.i64(2..=5)})));
            }
            6 if !tenants.is_empty() => {
                // Between Nodes and Zones, or a plain Cluster tenant spread (refused on a
                // Standalone one: ignored).
                let name = pick(&mut rng, &tenants);
                let spread = ["Nodes", "Zones"][rng.usize(0..2)];
                let _ = h
                    .fleet
                    .api
                    .apply(tenant_spec(&name, json!({"spread": spread})));
            }
            7 if !tenants.is_empty() => {
                let name = pick(&mut rng, &tenants);
                h.apply(&[tenant_spec(&name, json!({"suspend": rng.bool()}))]);
            }
            8 if !tenants.is_empty() => {
                let name = tenants.swap_remove(rng.usize(0..tenants.len()));
                h.delete_tenant(&name);
            }
            9 => {
                let (name, zone) = NAMES[rng.usize(0..NAMES.len())];
                let threads = rng.i64(4..=16);
                if h.fleet.api.get(GROUP, "nodes", None, name).is_some() {
                    // A raise only: a lowering would exempt it from the capacity check.
                    let now = h.node(name).spec.capacity.threads;
                    h.apply(&[node_spec(
                        name,
                        json!({"capacity": {"threads": threads.max(now)}}),
                    )]);
                } else {
                    h.apply(&[zoned(name, zone, threads)]);
                }
            }
            10 => {
                let (name, _) = NAMES[rng.usize(0..NAMES.len())];
                let state = ["Online", "Cordoned", "Offline", "Draining"][rng.usize(0..4)];
                if h.fleet.api.get(GROUP, "nodes", None, name).is_some() {
                    h.apply(&[node_spec(name, json!({"state": state}))]);
                }
            }
            11 => {
                let (name, _) = NAMES[rng.usize(0..NAMES.len())];
                if h.fleet.api.get(GROUP, "nodes", None, name).is_some() {
                    if rng.bool() {
                        super::guards::wipe_allocations(&h, name);
                    } else {
                        let _ = h.fleet.api.delete(GROUP, "nodes", None, name);
                    }
                }
            }
            12 => {
                h.fleet.stop();
                h.fleet.start(h.settings.clone());
            }
            14 => {
                // A person moves a node to another zone, or takes its zone label away.
                let (name, _) = NAMES[rng.usize(0..NAMES.len())];
                if h.fleet.api.get(GROUP, "nodes", None, name).is_some() {
                    let zone = ["fsn1", "nbg1", "hel1"][rng.usize(0..3)];
                    let labels = if rng.u8(0..4) == 0 {
                        json!({ZONE_LABEL: null})
                    } else {
                        json!({ZONE_LABEL: zone})
                    };
                    h.apply(&[json!({"apiVersion": VERSION, "kind": "Node",
                        "metadata": {"name": name, "labels": labels}})]);
                }
            }
            13 => match second.take() {
                Some(other) => other.abort(),
                None => {
                    second = Some(tokio::spawn(tenant_placer::controller::run(
                        h.fleet.client.clone(),
                        settings(),
                    )));
                }
            },
            _ => {}
        }
        if rng.u8(0..3) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(rng.u64(0..20))).await;
        }
    }
    if let Some(other) = second {
        other.abort();
    }
    h.fleet.api.clear_faults();
    // Every node Online again, so that a tenant left waiting has no room anywhere.
    for (name, _) in NAMES {
        if h.fleet.api.get(GROUP, "nodes", None, name).is_some() {
            h.apply(&[node_spec(name, json!({"state": "Online"}))]);
        }
    }
    h.lowered.clear();
    h.settle().await;
    if std::env::var("TP_SOAK_DESCRIBE").is_ok() {
        eprintln!("{}", h.describe());
    }
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_random_spread_soak_keeps_every_invariant() {
    super::soak::seeded("spread soak", spread_soak_case).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_spread_tenant_is_not_placed_and_keeps_what_it_holds() {
    let h = Harness::start(&zoned_nodes()).await;
    h.apply(&[tenant("later")
        .resources(2, 4, 20)
        .spread(TenantSpread::Zones, 3)
        .suspended()
        .manifest()]);
    h.until("later Suspended", || {
        phase(&h, "later") == Some(TenantPhase::Suspended)
    })
    .await;
    h.settle().await;
    assert!(held(&h, "later").is_empty());
    three_zones(&h).await;
    // Suspended, then grown: it keeps its three replicas as they are.
    h.apply(&[tenant_spec("db", json!({"suspend": true}))]);
    h.apply(&[tenant_spec(
        "db",
        json!({"resources": {"threads": 3, "memoryGb": 4, "storageGb": 20}}),
    )]);
    h.until("db Suspended", || {
        phase(&h, "db") == Some(TenantPhase::Suspended)
    })
    .await;
    h.settle().await;
    assert_eq!(held(&h, "db"), one_replica_each(&["a1", "b1", "c1"], 2));
    assert_eq!(placements(&h, "db").len(), 3);
    h.assert_invariants();
    // Resumed: both get what they ask.
    h.apply(&[tenant_spec("db", json!({"suspend": false}))]);
    h.apply(&[tenant_spec("later", json!({"suspend": false}))]);
    h.until("both Active", || {
        phase(&h, "db") == Some(TenantPhase::Active)
            && phase(&h, "later") == Some(TenantPhase::Active)
    })
    .await;
    h.settle().await;
    assert!(held(&h, "db").iter().all(|(_, threads, _)| *threads == 3));
    assert_eq!(held(&h, "later").len(), 3);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_strict_fifo_a_spread_tenant_waits_behind_an_older_head() {
    let h = Harness::start_on(
        inmem_apiserver::ApiServer::new(),
        &zoned_nodes(),
        Settings {
            queue: placement::QueueMode::StrictFifo,
            ..settings()
        },
    )
    .await;
    // Older in the queue whatever the clock: created first, and first by name.
    h.apply(&[tenant("big").resources(9, 1, 1).manifest()]);
    h.until("big waits", || {
        phase(&h, "big") == Some(TenantPhase::PendingCapacity)
    })
    .await;
    h.apply(&[tenant("db")
        .resources(2, 4, 20)
        .spread(TenantSpread::Zones, 3)
        .manifest()]);
    wait_until_or(
        "db waits",
        || phase(&h, "db") == Some(TenantPhase::PendingCapacity),
        || {
            format!(
                "{:?} {:?}",
                h.tenant("db").and_then(|t| t.status),
                held(&h, "db")
            )
        },
    )
    .await;
    h.settle().await;
    let message = h.tenant("db").unwrap().status.unwrap().message;
    assert!(message.contains("big"), "{message}");
    assert!(held(&h, "db").is_empty());
    // The head goes: db is placed whole.
    h.delete_tenant("big");
    h.until("db Active", || phase(&h, "db") == Some(TenantPhase::Active))
        .await;
    h.settle().await;
    assert_eq!(held(&h, "db").len(), 3);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_moved_to_another_zone_has_its_replica_moved_where_the_zones_stay_balanced() {
    let h = Harness::start(&zoned_nodes()).await;
    three_zones(&h).await;
    // c1 now says fsn1, where a1 holds a replica already: hel1 has none.
    h.apply(&[json!({"apiVersion": VERSION, "kind": "Node",
        "metadata": {"name": "c1", "labels": {ZONE_LABEL: "fsn1"}}})]);
    wait_until_or(
        "db back in three zones",
        || {
            held(&h, "db")
                .into_iter()
                .map(|(n, _, _)| n)
                .collect::<Vec<_>>()
                == ["a1", "b1", "c2"]
        },
        || format!("{:?}", held(&h, "db")),
    )
    .await;
    h.settle().await;
    assert_eq!(phase(&h, "db"), Some(TenantPhase::Active));
    h.assert_invariants();
}
