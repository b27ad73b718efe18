//! The FIFO pending queue and the finalizer-less option, through the run loop.

use std::time::Duration;

use tenant_placer::api::TenantPhase;
use tenant_placer::controller::Settings;

use crate::*;

/// creationTimestamp has one-second resolution: wait so the next tenant is strictly younger.
async fn next_second() {
    tokio::time::sleep(Duration::from_millis(1100)).await;
}

fn phase_and_node(h: &Harness, name: &str) -> (TenantPhase, String) {
    let status = h.tenant(name).unwrap().status.unwrap();
    (status.phase, status.node_name)
}

async fn harness_with(queue: placement::QueueMode, nodes: &[Value]) -> Harness {
    Harness::start_on(
        inmem_apiserver::ApiServer::new(),
        nodes,
        Settings {
            queue,
            ..settings()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_larger_pending_tenant_gets_freed_room_before_a_younger_smaller_one() {
    for queue in placement::QueueMode::ALL {
        let h = harness_with(queue, &[node("n1").capacity(8, 64, 1000).manifest()]).await;
        h.apply(&[tenant("filler").resources(8, 1, 1).manifest()]);
        h.settle().await;
        // The older one sorts last by name, so name order alone would favour the younger one.
        h.apply(&[tenant("zz-older-large").resources(6, 1, 1).manifest()]);
        next_second().await;
        h.apply(&[tenant("aa-younger-small").resources(4, 1, 1).manifest()]);
        h.settle().await;
        for name in ["zz-older-large", "aa-younger-small"] {
            assert_eq!(
                phase_and_node(&h, name).0,
                TenantPhase::PendingCapacity,
                "{queue}: {name}"
            );
        }
        // 8 threads free: oldest first, the large one takes 6 and the small one (4) waits.
        h.delete_tenant("filler");
        h.settle().await;
        assert_eq!(
            phase_and_node(&h, "zz-older-large"),
            (TenantPhase::Active, "n1".into()),
            "{queue}"
        );
        assert_eq!(
            phase_and_node(&h, "aa-younger-small").0,
            TenantPhase::PendingCapacity,
            "{queue}"
        );
        assert_eq!(h.allocated_threads("n1"), 6);
        h.assert_invariants();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn best_effort_lets_a_younger_tenant_pass_one_that_fits_nowhere_and_strict_does_not() {
    for queue in placement::QueueMode::ALL {
        let h = harness_with(queue, &[node("n1").capacity(8, 64, 1000).manifest()]).await;
        h.apply(&[tenant("filler").resources(4, 1, 1).manifest()]);
        h.settle().await;
        h.apply(&[tenant("huge-older").resources(6, 1, 1).manifest()]);
        h.settle().await;
        next_second().await;
        h.apply(&[tenant("small-younger").resources(2, 1, 1).manifest()]);
        h.settle().await;
        let small = h.tenant("small-younger").unwrap().status.unwrap();
        match queue {
            placement::QueueMode::BestEffortFifo => {
                assert_eq!(
                    (small.phase, small.node_name.as_str()),
                    (TenantPhase::Active, "n1")
                );
            }
            placement::QueueMode::StrictFifo => {
                assert_eq!(small.phase, TenantPhase::PendingCapacity);
                assert_eq!(small.conditions[0].reason, "QueuedBehindOlder");
                assert!(
                    small.message.contains("default/huge-older"),
                    "{}",
                    small.message
                );
            }
        }
        // Room for both: the head goes first, then the one behind it.
        h.delete_tenant("filler");
        h.settle().await;
        assert_eq!(
            phase_and_node(&h, "huge-older"),
            (TenantPhase::Active, "n1".into()),
            "{queue}"
        );
        assert_eq!(
            phase_and_node(&h, "small-younger"),
            (TenantPhase::Active, "n1".into()),
            "{queue}"
        );
        assert_eq!(h.allocated_threads("n1"), 8);
        h.assert_invariants();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_finalizer_a_delete_is_released_from_its_event_and_a_missed_one_at_start_up() {
    let no_finalizer = Settings {
        finalizer: false,
        ..settings()
    };
    let h = Harness::start_on(
        inmem_apiserver::ApiServer::new(),
        &seed_nodes(),
        no_finalizer.clone(),
    )
    .await;
    h.apply(&[
        tenant("acme").resources(2, 4, 20).manifest(),
        tenant("beta").resources(3, 4, 20).manifest(),
    ]);
    h.settle().await;
    assert!(
        h.tenant("acme").unwrap().metadata.finalizers.is_none(),
        "no finalizer was added"
    );
    assert_eq!(h.allocated_threads("node-eu-1"), 5);
    // Deleted at once (nothing holds it); the delete event releases the entry.
    h.delete_tenant("acme");
    assert!(h.tenant("acme").is_none());
    h.settle().await;
    assert_eq!(h.allocated_threads("node-eu-1"), 3);

    // A delete while no controller runs: found and released when it starts again.
    h.fleet.stop();
    h.delete_tenant("beta");
    h.fleet.start(no_finalizer);
    h.settle().await;
    assert_eq!(h.allocated_threads("node-eu-1"), 0);
    h.assert_invariants();
}
