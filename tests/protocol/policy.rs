//! Policies and overcommit through the run loop.

use serde_json::json;

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overcommitted_node_places_against_capacity_times_ratio_and_reports_free_that_way() {
    let mut a = node("a", 8, 64, 1000);
    a["spec"]["overcommit"] = json!({"threads": 2.0});
    let h = Harness::start(&[a, node("b", 64, 64, 1000)]).await;
    // 8 threads x 2.0 = 16 effective: a 10-thread tenant fits on a (first by name).
    h.apply(&[tenant("big-cpu", 10, 1, 1)]);
    h.settle().await;
    assert_eq!(h.tenant("big-cpu").unwrap().status.unwrap().node_name, "a");
    let status = h.node("a").status.unwrap();
    assert_eq!(
        (status.allocated.threads, status.free.threads),
        (10, 6),
        "free = 16 - 10"
    );
    assert_eq!(
        status.conditions[0].status, "False",
        "within its effective capacity"
    );
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn best_fit_packs_onto_the_tightest_node_where_first_fit_takes_the_first() {
    let nodes = [node("a", 64, 256, 8000), node("b", 8, 32, 1000)];
    for (policy, expected) in [
        (placement::Policy::FirstFit, "a"),
        (placement::Policy::BestFit, "b"),
    ] {
        let h = Harness::start_on(
            inmem_apiserver::ApiServer::new(),
            &nodes,
            Settings {
                policy,
                ..settings()
            },
        )
        .await;
        h.apply(&[tenant("small", 6, 24, 800)]);
        h.settle().await;
        assert_eq!(
            h.tenant("small").unwrap().status.unwrap().node_name,
            expected,
            "{policy}"
        );
        h.assert_invariants();
    }
}
