//! `--consolidation WhenUnderutilized`: bought nodes the rebalance plan can empty are drained on
//! their own, make-before-break, within the disruption budget and windows, never while
//! `do-not-disrupt` keeps them; the record (the consolidating mark on a Draining Node) carries
//! the count across a restart.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use tenant_placer::api::{CONSOLIDATING_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION, NODE_REQUEST_LABEL};
use tenant_placer::controller::disruption::{Budget, ConsolidationPolicy, Window};

use kube::ResourceExt;
use tenant_placer::sim::Simulated;
use tenant_placer::sim::provisioner::ProvisionerConfig;

use crate::guards::events_with_reason;
use crate::requests::requests;
use crate::*;

/// Bought nodes, each holding one tenant it could give to `big`.
const BOUGHT: usize = 10;

fn consolidating(budget: u32, schedule: &[&str]) -> Settings {
    Settings {
        request_after: Some(Duration::ZERO),
        request_check: Duration::from_millis(20),
        consolidation: ConsolidationPolicy::WhenUnderutilized,
        consolidate_after: Duration::ZERO,
        disruption_budget: Budget::Nodes(budget),
        disruption_schedule: schedule
            .iter()
            .map(|w| w.parse::<Window>().unwrap())
            .collect(),
        ..settings()
    }
}

fn bought(i: usize) -> String {
    format!("b{i}")
}

/// `big` (64 threads) holds `tb`; ten bought nodes of 8 threads hold one 5-thread tenant each
/// (placed while `big` was cordoned), `t_i` annotated `do-not-disrupt` for each i in `kept`.
/// Then `big` comes back Online: each bought node's tenant fits there.
async fn fleet(settings: Settings, kept: &[usize]) -> Harness {
    let h = big_cordoned(settings).await;
    for i in 0..BOUGHT {
        // A machine is bought when a live request's record names it, not for its label alone.
        h.apply(&[
            node(&bought(i))
                .capacity(8, 32, 100)
                .label(NODE_REQUEST_LABEL, &format!("r{i}"))
                .manifest(),
            json!({"apiVersion": VERSION, "kind": "NodeRequest", "metadata": {"name": format!("r{i}")},
                   "spec": {"nodeClass": "box", "capacity": {"threads": 8, "memoryGb": 32, "storageGb": 100}},
                   "status": {"phase": "Ready", "nodeName": bought(i)}}),
        ]);
    }
    h.settle().await;
    for i in 0..BOUGHT {
        let mut t = tenant(&format!("t{i}")).resources(5, 1, 1).manifest();
        if kept.contains(&i) {
            t["metadata"]["annotations"] = json!({DO_NOT_DISRUPT_ANNOTATION: "true"});
        }
        h.apply(&[t]);
        h.settle().await;
    }
    for i in 0..BOUGHT {
        assert_eq!(h.allocated_threads(&bought(i)), 5, "t{i} on b{i}");
    }
    h
}

/// `big` (64 threads) holding `tb` (so that it may receive), cordoned: what comes next is
/// placed elsewhere until it is uncordoned.
async fn big_cordoned(settings: Settings) -> Harness {
    let h = Harness::start_on(
        ApiServer::new(),
        &[node("big").capacity(64, 256, 8000).manifest()],
        settings,
    )
    .await;
    h.apply(&[tenant("tb").resources(1, 1, 1).manifest()]);
    h.settle().await;
    h.apply(&[node_spec("big", json!({"state": "Cordoned"}))]);
    h
}

/// The class `box` (`threads`, 100 a month) and a provisioner that delivers at once.
pub(crate) async fn buy_boxes(h: &Harness, threads: i64) {
    h.apply(&[
        json!({"apiVersion": VERSION, "kind": "NodeClass", "metadata": {"name": "box"},
                     "spec": {"capacity": {"threads": threads, "memoryGb": 256, "storageGb": 8000},
                              "provider": "lab/simulated", "monthlyCost": 100}}),
    ]);
    h.fleet
        .start_provisioner(Simulated::Contract(ProvisionerConfig {
            delay: Duration::ZERO,
            failing: Default::default(),
            every: Duration::from_millis(20),
            short: Default::default(),
        }))
        .await
        .unwrap();
}

/// Nodes being emptied by consolidation at once, at most, over every committed write.
fn watch_emptying(h: &Harness) -> Arc<AtomicUsize> {
    let most = Arc::new(AtomicUsize::new(0));
    let seen = most.clone();
    h.fleet.api.on_commit(move |commit| {
        if commit.group != GROUP || commit.resource != "nodes" {
            return;
        }
        let emptying = commit
            .list(GROUP, "nodes")
            .iter()
            .filter(|n| {
                n["metadata"]["annotations"][CONSOLIDATING_ANNOTATION].is_string()
                    && n["spec"]["state"] == "Draining"
                    && n["status"]["allocations"]
                        .as_array()
                        .is_some_and(|a| !a.is_empty())
            })
            .count();
        seen.fetch_max(emptying, Ordering::SeqCst);
    });
    most
}

fn drained(h: &Harness, name: &str) -> bool {
    let node = h.node(name);
    node.spec.state == tenant_placer::api::NodeState::Draining && node.allocations().is_empty()
}

fn uncordon(h: &Harness) {
    h.apply(&[node_spec("big", json!({"state": "Online"}))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_freeable_nodes_are_emptied_two_at_a_time_under_a_budget_of_two() {
    let h = fleet(consolidating(2, &[]), &[]).await;
    let most = watch_emptying(&h);
    uncordon(&h);
    h.until("every bought node emptied", || {
        (0..BOUGHT).all(|i| drained(&h, &bought(i)))
    })
    .await;
    h.settle().await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "never more than the budget, and used"
    );
    assert_eq!(h.allocated_threads("big"), 1 + 5 * BOUGHT as i64);
    let metrics = &h.handles.metrics;
    assert_eq!(metrics.consolidation_actions("drain"), BOUGHT as u64);
    assert!(metrics.disruptions_blocked("BudgetExhausted") > 0);
    assert!(!events_with_reason(&h, "DisruptionBlocked").is_empty());
    assert!(!events_with_reason(&h, "Consolidating").is_empty());
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn do_not_disrupt_keeps_a_tenants_node_and_a_node() {
    let h = fleet(consolidating(BOUGHT as u32, &[]), &[0]).await;
    h.apply(&[json!({"apiVersion": VERSION, "kind": "Node",
                     "metadata": {"name": bought(1),
                                  "annotations": {DO_NOT_DISRUPT_ANNOTATION: "true"}}})]);
    uncordon(&h);
    h.until("the others emptied", || {
        (2..BOUGHT).all(|i| drained(&h, &bought(i)))
    })
    .await;
    h.settle().await;
    for kept in [bought(0), bought(1)] {
        let node = h.node(&kept);
        assert_eq!(
            node.spec.state,
            tenant_placer::api::NodeState::Online,
            "{kept}"
        );
        assert_eq!(h.allocated_threads(&kept), 5, "{kept}");
    }
    assert!(h.handles.metrics.disruptions_blocked("DoNotDisrupt") >= 2);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_drained_outside_the_window_and_a_restart_counts_what_is_under_way() {
    // A window of one minute a year, at New Year: closed now (unless run then).
    let closed = "0 0 1 1 * 1m";
    let h = fleet(consolidating(2, &[closed]), &[]).await;
    let most = watch_emptying(&h);
    uncordon(&h);
    h.until("the window reported closed", || {
        h.handles.metrics.disruptions_blocked("OutsideWindow") > 0
    })
    .await;
    h.settle().await;
    assert!(
        (0..BOUGHT).all(|i| h.node(&bought(i)).spec.state == tenant_placer::api::NodeState::Online)
    );
    // The window opens (no schedule: always); the controller restarts mid-consolidation, and
    // the drains under way, read from the Nodes, still count against the budget.
    h.fleet.stop();
    h.fleet.start(consolidating(2, &[]));
    h.until("two drains under way", || {
        (0..BOUGHT)
            .filter(|i| h.node(&bought(*i)).spec.state == tenant_placer::api::NodeState::Draining)
            .count()
            >= 2
    })
    .await;
    h.fleet.stop();
    h.fleet.start(consolidating(2, &[]));
    h.until("every bought node emptied", || {
        (0..BOUGHT).all(|i| drained(&h, &bought(i)))
    })
    .await;
    h.settle().await;
    assert!(most.load(Ordering::SeqCst) <= 2);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bought_machines_the_plan_can_empty_are_drained_then_handed_back_at_once() {
    // An hour of idleness before a plain hand-back: each one here is consolidation's.
    let settings = Settings {
        empty_node_after: Duration::from_secs(3600),
        ..consolidating(2, &[])
    };
    let h = big_cordoned(settings).await;
    buy_boxes(&h, 8).await;
    // Six tenants of 5 threads: a box each, bought while big is cordoned.
    for i in 0..6 {
        h.apply(&[tenant(&format!("t{i}")).resources(5, 1, 1).manifest()]);
    }
    let boxes = |h: &Harness| {
        h.fleet
            .nodes()
            .into_iter()
            .filter(|n| n.labels().contains_key(NODE_REQUEST_LABEL))
            .count()
    };
    h.until("a box bought for each tenant, each placed", || {
        boxes(&h) == 6
            && (0..6).all(|i| {
                h.tenant(&format!("t{i}"))
                    .and_then(|t| t.status)
                    .is_some_and(|s| s.node_name.starts_with("box-"))
            })
    })
    .await;
    let most = watch_emptying(&h);
    uncordon(&h);
    h.until("every box drained and handed back", || {
        boxes(&h) == 0 && requests(&h).is_empty()
    })
    .await;
    h.settle().await;
    assert!((1..=2).contains(&most.load(Ordering::SeqCst)));
    assert_eq!(h.allocated_threads("big"), 1 + 5 * 6);
    let metrics = &h.handles.metrics;
    assert_eq!(metrics.consolidation_actions("drain"), 6);
    assert_eq!(metrics.consolidation_actions("hand_back"), 6);
    h.assert_invariants();
}

/// An owned node of 64 threads holding `t1` (40), and `t2` (40) on a box of 64 bought for it
/// (named), under consolidation with an hour before a plain hand-back.
async fn t2_on_a_box() -> (Harness, String) {
    let settings = Settings {
        empty_node_after: Duration::from_secs(3600),
        ..consolidating(1, &[])
    };
    let h = Harness::start_on(
        ApiServer::new(),
        &[node("owned").capacity(64, 256, 8000).manifest()],
        settings,
    )
    .await;
    buy_boxes(&h, 64).await;
    h.apply(&[tenant("t1").resources(40, 1, 1).manifest()]);
    h.settle().await;
    h.apply(&[tenant("t2").resources(40, 1, 1).manifest()]);
    h.until("t2 placed on a box bought for it", || {
        h.tenant("t2")
            .and_then(|t| t.status)
            .is_some_and(|s| s.node_name.starts_with("box-"))
    })
    .await;
    let the_box = h.tenant("t2").unwrap().status.unwrap().node_name;
    (h, the_box)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bought_machines_tenant_moves_onto_an_owned_node_that_emptied_and_the_machine_goes_back()
{
    let (h, _) = t2_on_a_box().await;
    // t1 goes: the owned node is empty, and t2 fits there.
    h.delete_tenant("t1");
    h.until(
        "t2 moved onto the owned node and the box handed back",
        || h.allocated_threads("owned") == 40 && requests(&h).is_empty(),
    )
    .await;
    h.settle().await;
    assert_eq!(h.handles.metrics.consolidation_actions("hand_back"), 1);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_controllers_racing_to_consolidate_empty_every_node_once_and_never_over_commit() {
    let h = fleet(consolidating(2, &[]), &[]).await;
    let most = watch_emptying(&h);
    let other = tokio::spawn(tenant_placer::controller::run(
        h.fleet.client.clone(),
        consolidating(2, &[]),
    ));
    uncordon(&h);
    h.until("every bought node emptied", || {
        (0..BOUGHT).all(|i| drained(&h, &bought(i)))
    })
    .await;
    h.settle().await;
    other.abort();
    assert_eq!(h.allocated_threads("big"), 1 + 5 * BOUGHT as i64);
    // Without leader election each counts only the drains it sees: at most each its budget.
    assert!(most.load(Ordering::SeqCst) <= 4, "{most:?}");
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_resizing_in_place_holds_consolidation_back_as_a_waiting_one_does() {
    let h = fleet(consolidating(BOUGHT as u32, &[]), &[]).await;
    // t0 grows past its node (8 threads): Resizing, its old entry kept, waiting for room.
    h.apply(&[tenant_spec(
        "t0",
        json!({"resources": {"threads": 9, "memoryGb": 1, "storageGb": 1}}),
    )]);
    h.until("t0 Resizing", || {
        h.tenant("t0")
            .and_then(|t| t.status)
            .is_some_and(|s| s.phase == tenant_placer::api::TenantPhase::Resizing)
    })
    .await;
    uncordon(&h);
    h.until("consolidation held back for the waiting tenant", || {
        h.handles.metrics.disruptions_blocked("TenantsWaiting") > 0
    })
    .await;
    h.settle().await;
    for i in 0..BOUGHT {
        assert_eq!(
            h.node(&bought(i)).spec.state,
            tenant_placer::api::NodeState::Online,
            "{}",
            bought(i)
        );
    }
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_consolidation_emptied_is_taken_back_into_service_for_a_new_waiter_not_bought_again()
 {
    let (h, the_box) = t2_on_a_box().await;
    // The box's hand-back is refused while it is empty and drained: a new waiter that fits only
    // there arrives in that moment.
    h.fleet.api.inject(
        inmem_apiserver::Fault::on(inmem_apiserver::Verb::Delete)
            .resource("noderequests")
            .always()
            .internal_error(),
    );
    h.delete_tenant("t1");
    h.until(
        "t2 moved onto the owned node, the box drained empty",
        || h.allocated_threads("owned") == 40 && drained(&h, &the_box),
    )
    .await;
    h.apply(&[tenant("t3").resources(40, 1, 1).manifest()]);
    h.until("t3 placed on the box, taken back into service", || {
        h.tenant("t3")
            .and_then(|t| t.status)
            .is_some_and(|s| s.node_name == the_box)
    })
    .await;
    h.fleet.api.clear_faults();
    crate::requests::more_looks(&h, 40).await;
    h.settle().await;
    assert_eq!(
        h.node(&the_box).spec.state,
        tenant_placer::api::NodeState::Online
    );
    assert_eq!(requests(&h).len(), 1, "the box kept for t3");
    assert_eq!(
        h.fleet
            .api
            .stats()
            .count(inmem_apiserver::Verb::Create, "noderequests"),
        1,
        "nothing bought again for t3"
    );
    h.assert_invariants();
}
