//! Policies and overcommit through the run loop.

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overcommitted_node_places_against_capacity_times_ratio_and_reports_free_that_way() {
    let a = node("a")
        .capacity(8, 64, 1000)
        .overcommit(2.0, 1.0, 1.0)
        .manifest();
    let h = Harness::start(&[a, node("b").capacity(64, 64, 1000).manifest()]).await;
    // 8 threads x 2.0 = 16 effective: a 10-thread tenant fits on a (first by name).
    h.apply(&[tenant("big-cpu").resources(10, 1, 1).manifest()]);
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
    let nodes = [
        node("a").capacity(64, 256, 8000).manifest(),
        node("b").capacity(8, 32, 1000).manifest(),
    ];
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
        h.apply(&[tenant("small").resources(6, 24, 800).manifest()]);
        h.settle().await;
        assert_eq!(
            h.tenant("small").unwrap().status.unwrap().node_name,
            expected,
            "{policy}"
        );
        h.assert_invariants();
    }
}
