use std::time::{Duration, Instant};

use inmem_apiserver::CostModel;

use crate::*;

#[tokio::test]
async fn concurrent_writes_queue_for_the_capped_rate_and_reads_stay_free() {
    let (api, client) = setup();
    api.set_cost_model(Some(CostModel::per_write(Duration::from_millis(10), 100)));
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
    api.set_cost_model(Some(CostModel::per_write(Duration::from_millis(1), 10)));
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
    api.set_cost_model(Some(CostModel::per_write(Duration::from_millis(20), 0)));
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

#[tokio::test]
async fn a_write_costs_its_bytes_and_the_cores_space_the_slots() {
    let (api, client) = setup();
    let per_kib = Duration::from_millis(40);
    api.set_cost_model(Some(CostModel {
        per_write: Duration::ZERO,
        writes_per_second: 0,
        per_kib,
        cores: 1.0,
    }));
    // A create of about 200 bytes is expected to handle its body twice (stored after as large
    // as the body): at 40 ms per KiB, at least 15 ms.
    let body = serde_json::to_vec(&tenant("acme", 1)).unwrap();
    let expected = per_kib.mul_f64(2.0 * body.len() as f64 / 1024.0);
    let started = Instant::now();
    tenants(&client)
        .create(&PostParams::default(), &tenant("acme", 1))
        .await
        .unwrap();
    let first = started.elapsed();
    assert!(first >= expected, "took {first:?}, expected {expected:?}");
    // On one core, two writes arriving together are served one after the other.
    let started = Instant::now();
    let (api_b, api_c, pp) = (tenants(&client), tenants(&client), PostParams::default());
    let (tb, tc) = (tenant("b", 1), tenant("c", 1));
    let (a, b) = futures::join!(api_b.create(&pp, &tb), api_c.create(&pp, &tc));
    a.unwrap();
    b.unwrap();
    let both = started.elapsed();
    assert!(both >= expected.saturating_mul(2), "took {both:?}");
    assert!(api.stats().bytes.total() > 0);
}
