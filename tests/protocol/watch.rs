//! Watches break and resourceVersions expire; the controller recovers and converges.

use inmem_apiserver::{ApiServer, Config, Fault, Verb};
use serde_json::json;

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_watches_mid_scenario_are_re_established_and_the_controller_converges() {
    let h = Harness::start(&seed_nodes()).await;
    h.apply(&[tenant("acme").resources(2, 4, 20).manifest()]);
    h.fleet.api.break_watches();
    h.settle().await;
    h.fleet.api.break_watches();
    h.apply(&[tenant_spec("acme", json!({"mode": "Cluster"}))]);
    h.settle().await;
    assert_eq!(h.allocated_threads("node-eu-1"), 4);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_gone_on_re_watch_makes_the_controller_relist_and_converge() {
    // A short history, so that what happened while the watches were down is compacted away.
    let api = ApiServer::with_config(Config {
        history_size: 4,
        ..Config::default()
    });
    let h = Harness::start_on(api, &seed_nodes(), settings()).await;
    h.fleet
        .api
        .inject(Fault::on(Verb::Watch).watch_gone().times(4));
    h.fleet.api.break_watches();
    for i in 0..10 {
        h.apply(&[tenant(&format!("t{i}")).resources(1, 1, 1).manifest()]);
    }
    h.fleet.api.compact_history();
    h.settle().await;
    h.delete_tenant("t0");
    h.fleet.api.break_watches();
    h.fleet.api.compact_history();
    h.settle().await;
    assert_eq!(h.fleet.tenants().len(), 9);
    assert_eq!(h.allocated_threads("node-eu-1"), 9);
    h.assert_invariants();
}
