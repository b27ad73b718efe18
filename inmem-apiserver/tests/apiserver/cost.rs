use std::time::{Duration, Instant};

use inmem_apiserver::CostModel;

use crate::*;

#[tokio::test]
async fn concurrent_writes_queue_for_the_capped_rate_and_reads_stay_free() {
    let (api, client) = setup();
    api.set_cost_model(Some(CostModel {
        per_write: Duration::from_millis(10),
        writes_per_second: 100,
    }));
    let started = Instant::now();
    let creates = (0..10).map(|i| {
        let client = client.clone();
        async move {
            tenants(&client)
                .create(&PostParams::default(), &tenant(&format!("t{i}"), 1))
                .await
        }
    });
    for created in futures::future::join_all(creates).await {
        created.unwrap();
    }
    // Ten writes at 100/s take slots 0, 10, ..., 90 ms, the last served 10 ms into its slot.
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(100), "took {took:?}");
    assert_eq!(api.list(GROUP, "tenants").len(), 10);

    // Reads take no slot: at 10 writes/s, a hundred reads holding slots would push the next
    // write ten seconds out.
    api.set_cost_model(Some(CostModel {
        per_write: Duration::from_millis(1),
        writes_per_second: 10,
    }));
    tenants(&client)
        .create(&PostParams::default(), &tenant("first", 1))
        .await
        .unwrap();
    for _ in 0..100 {
        tenants(&client).get("t0").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let write_started = Instant::now();
    tenants(&client)
        .create(&PostParams::default(), &tenant("late", 1))
        .await
        .unwrap();
    let waited = write_started.elapsed();
    assert!(
        waited >= Duration::from_millis(1) && waited < Duration::from_secs(5),
        "waited {waited:?}"
    );

    api.set_cost_model(None);
    assert_eq!(api.cost_model(), None);
}

#[tokio::test]
async fn a_conflicting_write_costs_a_slot_too() {
    let (api, client) = setup();
    let created = tenants(&client)
        .create(&PostParams::default(), &tenant("acme", 1))
        .await
        .unwrap();
    api.set_cost_model(Some(CostModel {
        per_write: Duration::from_millis(20),
        writes_per_second: 0,
    }));
    let mut stale = created.clone();
    stale.metadata.resource_version = Some("1".into());
    let started = Instant::now();
    let refused = tenants(&client)
        .replace("acme", &PostParams::default(), &stale)
        .await;
    assert!(
        matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 409),
        "{refused:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(20));
}
