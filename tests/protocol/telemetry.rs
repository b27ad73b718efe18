//! What /metrics and /readyz show of a running controller.

use std::time::Duration;

use http_body_util::BodyExt;
use tenant_placer::controller::{self, EventLevel};
use tenant_placer::serve::{self, State};

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_reconciles_tenants_by_phase_and_node_allocation_and_readyz_turns_ready() {
    let fleet = Fleet::new().unwrap();
    for object in seed_nodes().into_iter().chain([
        tenant("acme").resources(2, 4, 20).manifest(),
        tenant("big").resources(256, 1024, 100_000).manifest(),
    ]) {
        fleet.api.apply(object).unwrap();
    }
    let state = State::default();
    assert_eq!(
        serve::respond_with("/readyz", &state).status(),
        503,
        "not ready before the caches sync"
    );
    let running = tokio::spawn(controller::run_with(
        fleet.client.clone(),
        Settings {
            events: EventLevel::All,
            ..settings()
        },
        state.handles(),
    ));
    fleet
        .settle(Duration::from_millis(100), Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(serve::respond_with("/readyz", &state).status(), 200);

    let metrics = serve::respond_with("/metrics", &state);
    let body = metrics.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(body.to_vec()).unwrap();
    for line in [
        "tenant_placer_tenants{phase=\"Active\"} 1\n",
        "tenant_placer_tenants{phase=\"PendingCapacity\"} 1\n",
        "tenant_placer_pending_tenants 1\n",
        "tenant_placer_node_allocated{node=\"node-eu-1\",dimension=\"threads\"} 2\n",
        "tenant_placer_node_capacity{node=\"node-eu-1\",dimension=\"threads\"} 64\n",
        "tenant_placer_placement_conflicts_total 0\n",
        "tenant_placer_undecodable_objects_total{kind=\"node\"} 0\n",
        "tenant_placer_leader 1\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(
        text.contains("tenant_placer_reconciles_total{kind=\"tenant\",result=\"ok\"}"),
        "{text}"
    );
    assert!(
        text.contains("tenant_placer_reconcile_duration_seconds_count{kind=\"node\"}"),
        "{text}"
    );

    // Events were published for the placement and for the wait.
    let events = fleet.api.list("events.k8s.io", "events");
    let reasons: Vec<_> = events.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert!(
        reasons.contains(&"Placed") && reasons.contains(&"Pending"),
        "{reasons:?}"
    );
    let pending = events.iter().find(|e| e["reason"] == "Pending").unwrap();
    assert!(
        pending["note"].as_str().unwrap().contains("short by"),
        "{pending}"
    );
    assert_at_rest(&fleet, &HashSet::new());
    running.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_node_class_or_node_request_is_counted_under_its_own_kind() {
    use kube::CustomResourceExt;
    use tenant_placer::api::{NodeClass, NodeRequest};
    let fleet = Fleet::new().unwrap();
    // Older schemas that let in what the types cannot hold: a limit past int32, an unknown phase.
    let mut classes = serde_json::to_value(NodeClass::crd()).unwrap();
    let limit = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/limit";
    let limit = classes.pointer_mut(limit).unwrap().as_object_mut().unwrap();
    limit.remove("format");
    let mut requests = serde_json::to_value(NodeRequest::crd()).unwrap();
    let phase = "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/phase";
    let phase = requests
        .pointer_mut(phase)
        .unwrap()
        .as_object_mut()
        .unwrap();
    phase.remove("enum");
    fleet.api.install_crd(classes).unwrap();
    fleet.api.install_crd(requests).unwrap();
    let amounts = json!({"threads": 8, "memoryGb": 8, "storageGb": 8});
    for object in [
        json!({"apiVersion": VERSION, "kind": "NodeClass", "metadata": {"name": "past-int32"},
               "spec": {"capacity": amounts, "provider": "x", "limit": 2_147_483_648_i64}}),
        json!({"apiVersion": VERSION, "kind": "NodeRequest", "metadata": {"name": "lost"},
               "spec": {"nodeClass": "past-int32", "capacity": amounts},
               "status": {"phase": "Lost"}}),
    ] {
        fleet.api.apply(object).unwrap();
    }
    let state = State::default();
    let running = tokio::spawn(controller::run_with(
        fleet.client.clone(),
        settings(),
        state.handles(),
    ));
    let counted = |text: &str, kind: &str| {
        text.contains(&format!(
            "tenant_placer_undecodable_objects_total{{kind=\"{kind}\"}} 1\n"
        ))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let text = loop {
        let metrics = serve::respond_with("/metrics", &state);
        let body = metrics.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(body.to_vec()).unwrap();
        if (counted(&text, "nodeclass") && counted(&text, "noderequest"))
            || tokio::time::Instant::now() > deadline
        {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    fleet
        .settle(Duration::from_millis(100), Duration::from_secs(20))
        .await
        .unwrap();
    assert_at_rest(&fleet, &HashSet::new());
    running.abort();
    for line in [
        "tenant_placer_undecodable_objects_total{kind=\"nodeclass\"} 1\n",
        "tenant_placer_undecodable_objects_total{kind=\"noderequest\"} 1\n",
        "tenant_placer_undecodable_objects_total{kind=\"tenant\"} 0\n",
        "tenant_placer_undecodable_objects_total{kind=\"node\"} 0\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}
