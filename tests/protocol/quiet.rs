//! Tenants that cannot be placed must not spin: no writes while nothing changes.

use std::time::Duration;

use tenant_placer::api::TenantPhase;

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_pending_tenants_cause_zero_api_writes_while_nothing_changes() {
    // Re-check waiting tenants every 1 to 2 s, and look for machines to ask for every 100 ms
    // after 0.5 s of waiting (with no NodeClass: node requests are not in use); the quiet
    // window below lasts until two rounds of re-checks have run. NB: re-checks faster than the controller
    // can run them (1,000 tenants every 200 ms is 5,000 reconciles a second) keep every
    // reconcile slot busy, and kube's scheduler then takes new tenants from the watch late.
    let quick = Settings {
        pending_recheck: Duration::from_secs(1),
        pending_recheck_max: Duration::from_secs(2),
        request_after: Some(Duration::from_millis(500)),
        request_check: Duration::from_millis(100),
        ..settings()
    };
    let h = Harness::start_on(inmem_apiserver::ApiServer::new(), &seed_nodes(), quick).await;
    let crowd: Vec<_> = (0..1000)
        .map(|i| {
            tenant(&format!("big{i:04}"))
                .resources(100 + i, 1, 1)
                .manifest()
        })
        .collect();
    h.apply(&crowd);
    h.settle().await;
    assert!(
        h.fleet
            .tenants()
            .iter()
            .all(|t| t.status.as_ref().unwrap().phase == TenantPhase::PendingCapacity)
    );

    h.fleet.api.reset_stats();
    let rv = h.fleet.api.resource_version();
    // The sign that the re-checks ran: two rounds of them, every waiting tenant reconciled at
    // least twice more (each round within 2 s); then no write may have happened meanwhile.
    let metrics = h.handles.metrics.clone();
    let before = metrics.reconciles("tenant", "ok");
    h.until("every waiting tenant was re-checked twice", || {
        metrics.reconciles("tenant", "ok") >= before + 2000
    })
    .await;
    let stats = h.fleet.api.stats();
    assert_eq!(
        stats.write_requests(),
        0,
        "write requests while nothing changed: {stats:?}"
    );
    assert_eq!(h.fleet.api.resource_version(), rv, "nothing was committed");
    h.assert_invariants();
}
