//! Pools: controllers limited by `--node-selector` / `--tenant-selector` run side by side on one
//! API, each placing its own tenants on its own nodes and never writing the other's objects.
//!
//! The API cannot tell two controllers' writes apart, so the tests check what each writes while
//! it runs alone (every committed Node or Tenant update is of its pool), and what both leave at
//! rest (a pool's tenants only on that pool's nodes, each node's entries of its own pool only).

use tenant_placer::api::TenantPhase;
use tenant_placer::controller::{self, Handles};

use crate::*;

/// Settings of the controller of one pool: `pool=<name>` on both nodes and tenants.
fn pool(name: &str) -> Settings {
    let selector = format!("pool={name}");
    Settings {
        pool_nodes: Some(selector.parse().unwrap()),
        pool_tenants: Some(selector.parse().unwrap()),
        ..settings()
    }
}

/// Pool a: two nodes, the first large enough for every tenant of both pools (so a controller
/// that ignored the pools would put pool b's tenants there under first fit). Pool b: one node.
fn pool_nodes() -> Vec<Value> {
    vec![
        node("a-n1")
            .label("pool", "a")
            .capacity(64, 256, 8000)
            .manifest(),
        node("a-n2")
            .label("pool", "a")
            .capacity(8, 32, 800)
            .manifest(),
        node("b-n1")
            .label("pool", "b")
            .capacity(32, 128, 4000)
            .manifest(),
    ]
}

/// Four tenants of 2 threads in each pool, named after it.
fn pool_tenants() -> Vec<Value> {
    ["a", "b"]
        .iter()
        .flat_map(|p| {
            (0..4).map(move |i| {
                tenant(&format!("{p}-t{i}"))
                    .label("pool", p)
                    .resources(2, 4, 20)
                    .manifest()
            })
        })
        .collect()
}

/// The pool an object belongs to, by its name (`a-…`, `b-…`; anything else is in none).
fn pool_of(name: &str) -> &str {
    name.split_once('-').map_or("", |(p, _)| p)
}

/// A fleet whose commit hook records every update of a Node or Tenant of a pool not in
/// `running` (creates are the test's own applies).
fn watched_fleet(running: Arc<Mutex<Vec<&'static str>>>) -> (Arc<Fleet>, Arc<Mutex<Vec<String>>>) {
    let fleet = Arc::new(Fleet::new().unwrap());
    let foreign = Arc::new(Mutex::new(Vec::new()));
    let sink = foreign.clone();
    fleet.api.on_commit(move |commit| {
        let kind_ok = commit.resource == "nodes" || commit.resource == "tenants";
        if commit.group != GROUP || !kind_ok || commit.old.is_none() {
            return;
        }
        let name = commit.object["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        if !running.lock().unwrap().contains(&pool_of(name)) {
            sink.lock().unwrap().push(format!(
                "{} {name} at rv {}",
                commit.resource, commit.resource_version
            ));
        }
    });
    (fleet, foreign)
}

fn active_on(fleet: &Fleet, tenant: &str) -> Option<String> {
    let found = fleet
        .tenants()
        .into_iter()
        .find(|t| t.metadata.name.as_deref() == Some(tenant))?;
    let status = found.status?;
    (status.phase == TenantPhase::Active).then_some(status.node_name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pools_side_by_side_place_each_pools_tenants_only_on_its_own_nodes() {
    let running = Arc::new(Mutex::new(vec!["a"]));
    let (fleet, foreign) = watched_fleet(running.clone());
    for object in pool_nodes().into_iter().chain(pool_tenants()) {
        fleet.api.apply(object).unwrap();
    }
    // Pool a alone: its tenants are placed, pool b's are left without a status and b's node
    // is never written.
    fleet.start(pool("a"));
    fleet
        .settle(Duration::from_millis(80), Duration::from_secs(60))
        .await
        .unwrap();
    for i in 0..4 {
        let node = active_on(&fleet, &format!("a-t{i}"));
        assert_eq!(
            node.as_deref().map(pool_of),
            Some("a"),
            "a-t{i} on {node:?}"
        );
        let b = fleet
            .tenants()
            .into_iter()
            .find(|t| t.metadata.name.as_deref() == Some(&format!("b-t{i}")));
        assert!(b.unwrap().status.is_none(), "pool a wrote b-t{i}'s status");
    }
    let b_node = fleet
        .nodes()
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some("b-n1"));
    assert!(b_node.unwrap().status.is_none(), "pool a wrote b-n1");
    assert_eq!(
        *foreign.lock().unwrap(),
        Vec::<String>::new(),
        "pool a alone wrote pool b's objects"
    );

    // Pool b beside it, with its own controller: its tenants land on its node only.
    running.lock().unwrap().push("b");
    let _b = tokio::spawn(controller::run(fleet.client.clone(), pool("b")));
    wait_until("pool b's tenants are placed", || {
        (0..4).all(|i| active_on(&fleet, &format!("b-t{i}")).is_some())
    })
    .await;
    for i in 0..4 {
        assert_eq!(
            active_on(&fleet, &format!("b-t{i}")).as_deref(),
            Some("b-n1")
        );
        assert_eq!(
            active_on(&fleet, &format!("a-t{i}"))
                .as_deref()
                .map(pool_of),
            Some("a")
        );
    }
    for node in fleet.nodes() {
        let name = node.metadata.name.clone().unwrap();
        for entry in node.status.map(|s| s.allocations).unwrap_or_default() {
            let tenant = entry.tenant.trim_start_matches("default/");
            assert_eq!(pool_of(tenant), pool_of(&name), "{name} holds {tenant}");
        }
    }
    assert_pool_invariants(&fleet, Quiescence::Settled);
}

/// The invariants over the nodes and tenants of pools a and b (a tenant of no pool, or one
/// that left them, is nobody's to place); at rest, or only those that hold at any moment (a
/// pool that keeps another pool's entry, or a tenant relabelled away, breaks the rules at rest
/// on purpose).
fn assert_pool_invariants(fleet: &Fleet, quiescence: Quiescence) {
    let pooled = |name: Option<&String>| name.is_some_and(|n| matches!(pool_of(n), "a" | "b"));
    let nodes: Vec<_> = fleet
        .nodes()
        .into_iter()
        .filter(|n| pooled(n.metadata.name.as_ref()))
        .collect();
    let tenants: Vec<_> = fleet
        .tenants()
        .into_iter()
        .filter(|t| quiescence == Quiescence::AnyMoment || pooled(t.metadata.name.as_ref()))
        .collect();
    if let Err(found) = invariants::check(&nodes, &tenants, &HashSet::new(), quiescence) {
        panic!("invariants violated ({quiescence:?}): {found:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_outside_every_pool_is_left_alone_by_all_of_them() {
    let (fleet, _) = watched_fleet(Arc::default());
    for object in pool_nodes() {
        fleet.api.apply(object).unwrap();
    }
    fleet
        .api
        .apply(tenant("stray").resources(1, 1, 1).manifest())
        .unwrap();
    fleet
        .api
        .apply(
            tenant("c-t0")
                .label("pool", "c")
                .resources(1, 1, 1)
                .manifest(),
        )
        .unwrap();
    fleet
        .api
        .apply(
            tenant("a-t0")
                .label("pool", "a")
                .resources(1, 1, 1)
                .manifest(),
        )
        .unwrap();
    fleet.start(pool("a"));
    let _b = tokio::spawn(controller::run(fleet.client.clone(), pool("b")));
    wait_until("pool a's tenant is placed", || {
        active_on(&fleet, "a-t0").is_some()
    })
    .await;
    fleet
        .settle(Duration::from_millis(200), Duration::from_secs(60))
        .await
        .unwrap();
    for name in ["stray", "c-t0"] {
        let found = fleet
            .tenants()
            .into_iter()
            .find(|t| t.metadata.name.as_deref() == Some(name))
            .unwrap();
        assert!(found.status.is_none(), "{name} got a status");
        assert!(
            found.metadata.finalizers.is_none(),
            "{name} got a finalizer"
        );
        for node in fleet.nodes() {
            let held = node.status.map(|s| s.allocations).unwrap_or_default();
            assert!(
                held.iter().all(|e| !e.tenant.ends_with(name)),
                "{name} placed"
            );
        }
    }
    assert_pool_invariants(&fleet, Quiescence::Settled);
}

/// Waits until the controller has found something outside its pool this many times.
async fn found_outside(metrics: &tenant_placer::metrics::Metrics, at_least: u64) {
    wait_until("the controller reports what is outside its pool", || {
        metrics.outside_pool_found() >= at_least
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_of_another_pools_tenant_is_reported_and_never_released_as_an_orphan() {
    let fleet = Arc::new(Fleet::new().unwrap());
    fleet
        .api
        .apply(
            tenant("b-t0")
                .label("pool", "b")
                .resources(2, 4, 20)
                .manifest(),
        )
        .unwrap();
    let uid = fleet.tenants()[0].metadata.uid.clone().unwrap();
    // A node of pool a holding b-t0's entry: another pool's business, or a misconfiguration.
    let mut held = node("a-n1")
        .label("pool", "a")
        .capacity(64, 256, 8000)
        .manifest();
    held["status"] = json!({"allocations": [{"tenant": "default/b-t0", "uid": uid,
        "resources": {"threads": 2, "memoryGb": 4, "storageGb": 20}}]});
    fleet.api.apply(held).unwrap();
    let handles = Handles::default();
    fleet.start_with(
        Settings {
            orphan_sweep: Duration::from_millis(50),
            ..pool("a")
        },
        handles.clone(),
    );
    found_outside(&handles.metrics, 3).await;
    let node = fleet.nodes().pop().unwrap();
    let entries = node.status.unwrap().allocations;
    assert_eq!(entries.len(), 1, "the entry of b-t0 was released");
    assert_eq!(handles.metrics.orphans_released(), 0);
    assert_pool_invariants(&fleet, Quiescence::AnyMoment);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_labels_leave_the_pool_keeps_its_reservation() {
    let fleet = Arc::new(Fleet::new().unwrap());
    fleet
        .api
        .apply(
            node("a-n1")
                .label("pool", "a")
                .capacity(64, 256, 8000)
                .manifest(),
        )
        .unwrap();
    fleet
        .api
        .apply(
            tenant("a-t0")
                .label("pool", "a")
                .resources(2, 4, 20)
                .manifest(),
        )
        .unwrap();
    let handles = Handles::default();
    fleet.start_with(
        Settings {
            orphan_sweep: Duration::from_millis(50),
            ..pool("a")
        },
        handles.clone(),
    );
    wait_until("a-t0 is placed", || active_on(&fleet, "a-t0").is_some()).await;
    // The watch reports it deleted; a direct read shows it is not.
    fleet
        .api
        .apply(json!({"apiVersion": VERSION, "kind": "Tenant",
                      "metadata": {"name": "a-t0", "namespace": "default", "labels": {"pool": "c"}}}))
        .unwrap();
    // Seen outside the pool by the delete event, then twice more by the node's sweep (each a
    // chance to release the entry as an orphan): only then is its being kept worth checking.
    found_outside(&handles.metrics, 3).await;
    let entries = fleet.nodes().pop().unwrap().status.unwrap().allocations;
    assert_eq!(entries.len(), 1, "the reservation of a-t0 was released");
    assert_pool_invariants(&fleet, Quiescence::AnyMoment);
}

fn class(name: &str, pool: &str) -> Value {
    json!({"apiVersion": VERSION, "kind": "NodeClass", "metadata": {"name": name},
           "spec": {"capacity": {"threads": 64, "memoryGb": 256, "storageGb": 8000},
                    "provider": "lab/simulated", "monthlyCost": 100, "labels": {"pool": pool}}})
}

fn request_names(fleet: &Fleet) -> Vec<String> {
    let mut names: Vec<String> = fleet
        .api
        .list(GROUP, "noderequests")
        .into_iter()
        .filter_map(|r| r["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_buys_only_classes_whose_nodes_land_in_it_and_leaves_other_pools_requests_alone() {
    let fleet = Arc::new(Fleet::new().unwrap());
    fleet.api.apply(class("a-metal", "a")).unwrap();
    fleet.api.apply(class("b-metal", "b")).unwrap();
    // Pool b's request, failed: only pool b's controller may retire it.
    fleet
        .api
        .apply(json!({"apiVersion": VERSION, "kind": "NodeRequest", "metadata": {"name": "b-metal-failed"},
                      "spec": {"nodeClass": "b-metal", "tenants": ["default/b-t0"],
                               "capacity": {"threads": 64, "memoryGb": 256, "storageGb": 8000}},
                      "status": {"phase": "Failed", "message": "out of stock"}}))
        .unwrap();
    fleet
        .api
        .apply(
            tenant("a-t0")
                .label("pool", "a")
                .resources(2, 4, 20)
                .manifest(),
        )
        .unwrap();
    let handles = Handles::default();
    fleet.start_with(
        Settings {
            request_after: Some(Duration::ZERO),
            request_check: Duration::from_millis(20),
            ..pool("a")
        },
        handles.clone(),
    );
    wait_until("pool a asks for a machine", || {
        request_names(&fleet).len() == 2
    })
    .await;
    // Five more looks, each of which could retire pool b's failed request or buy again.
    let looks = handles.metrics.request_looks_done();
    wait_until("pool a looks five more times", || {
        handles.metrics.request_looks_done() >= looks + 5
    })
    .await;
    let names = request_names(&fleet);
    assert!(names[0].starts_with("a-metal-"), "{names:?}");
    assert_eq!(
        names[1], "b-metal-failed",
        "pool a bought or retired pool b's: {names:?}"
    );
    assert_pool_invariants(&fleet, Quiescence::AnyMoment);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_relabelled_into_another_pool_stays_where_it_is_and_says_why() {
    // a-t0 is placed in pool a, then labelled into pool b: pool b must not place it on b-n1
    // (it would be held on both), and pool a keeps its entry.
    let fleet = Arc::new(Fleet::new().unwrap());
    for object in [
        node("a-n1")
            .label("pool", "a")
            .capacity(64, 256, 8000)
            .manifest(),
        node("b-n1")
            .label("pool", "b")
            .capacity(64, 256, 8000)
            .manifest(),
        tenant("a-t0")
            .label("pool", "a")
            .resources(2, 4, 20)
            .manifest(),
    ] {
        fleet.api.apply(object).unwrap();
    }
    fleet.start(pool("a"));
    let b_handles = Handles::default();
    let b = tokio::spawn(controller::run_with(
        fleet.client.clone(),
        pool("b"),
        b_handles.clone(),
    ));
    wait_until("a-t0 is placed on a-n1", || {
        active_on(&fleet, "a-t0").as_deref() == Some("a-n1")
    })
    .await;
    // Pool b's decisions from here on: the one after the relabel must place nothing.
    let passes = b_handles.metrics.reconciles("tenant", "ok");
    fleet
        .api
        .apply(json!({"apiVersion": VERSION, "kind": "Tenant",
                      "metadata": {"name": "a-t0", "namespace": "default", "labels": {"pool": "b"}}}))
        .unwrap();
    wait_until("a-t0 says it is outside pool b's nodes", || {
        fleet
            .tenants()
            .into_iter()
            .find(|t| t.metadata.name.as_deref() == Some("a-t0"))
            .and_then(|t| t.status)
            .is_some_and(|s| s.message.contains("a node outside this pool"))
    })
    .await;
    // The decision that said why has ended (a reconcile counted since the relabel); a status
    // write does not wake a tenant again, so that was the one that could have placed it.
    wait_until("pool b's decision of a-t0 ends", || {
        b_handles.metrics.reconciles("tenant", "ok") > passes
    })
    .await;
    fleet
        .settle(Duration::from_millis(80), Duration::from_secs(60))
        .await
        .unwrap();
    b.abort();
    let held: Vec<(String, usize)> = fleet
        .nodes()
        .into_iter()
        .map(|n| {
            let entries = n.status.map_or(0, |s| s.allocations.len());
            (n.metadata.name.unwrap(), entries)
        })
        .collect();
    assert_eq!(held, [("a-n1".to_owned(), 1), ("b-n1".to_owned(), 0)]);
    assert_eq!(active_on(&fleet, "a-t0").as_deref(), Some("a-n1"));
    assert_pool_invariants(&fleet, Quiescence::Settled);
}
