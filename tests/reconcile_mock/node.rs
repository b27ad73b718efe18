//! Node scenarios: entries whose tenant is gone (confirmed by a direct read) are released, and a
//! node holding entries gets the reservations finalizer.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::json;
use tenant_placer::api::NODE_FINALIZER;
use tenant_placer::controller::node::reconcile;

use crate::*;

#[tokio::test]
async fn an_entry_whose_tenant_is_confirmed_gone_by_a_direct_read_is_released() {
    within(async move {
        let node = eu1(10).holding("ghost", (2, 4, 20)).settled().build();
        let (ctx, mut api, _cache) = node_context([node.clone()]);
        let run = tokio::spawn(reconcile(Arc::new(node), ctx));
        let not_found = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
            "message": "tenants.placement.tenant-placer.dev \"ghost\" not found"});
        expect(&mut api, Method::GET, &format!("{TENANTS}/ghost"), |_| {
            (StatusCode::NOT_FOUND, not_found)
    })
    .await;
    let written = expect(
        &mut api,
        Method::PATCH,
        &format!("{NODES}/node-eu-1/status"),
        accept_write,
    )
    .await;
    assert_eq!(allocations(&written), vec![]);
    run.await.unwrap().unwrap();
    expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn an_entry_missing_only_from_the_tenant_cache_is_kept() {
    within(async move {
        let node = eu1(10).holding("acme", (2, 4, 20)).settled().build();
        let (ctx, mut api, _cache) = node_context([node.clone()]);
        let run = tokio::spawn(reconcile(Arc::new(node), ctx));
        let alive = acme().build();
        expect(&mut api, Method::GET, &format!("{TENANTS}/acme"), |_| {
            (StatusCode::OK, serde_json::to_value(&alive).unwrap())
        })
        .await;
        // The node holds an entry and lacks the reservations finalizer: a guarded JSON patch adds it.
        let guarded = eu1(10)
            .holding("acme", (2, 4, 20))
            .settled()
            .finalizer(NODE_FINALIZER)
            .build();
        let patch = expect(
            &mut api,
            Method::PATCH,
            &format!("{NODES}/node-eu-1"),
            |_| (StatusCode::OK, serde_json::to_value(&guarded).unwrap()),
        )
        .await;
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [NODE_FINALIZER]},
            ])
        );
        run.await.unwrap().unwrap();
        expect_no_more_requests(api, ()).await;
    })
    .await;
}

#[tokio::test]
async fn an_entry_of_a_tenant_re_created_under_the_same_name_is_released() {
    within(async move {
        let node = eu1(10).holding("acme", (2, 4, 20)).settled().build();
        let (ctx, mut api, _cache) = node_context([node.clone()]);
        let run = tokio::spawn(reconcile(Arc::new(node), ctx));
        let reborn = acme().uid("uid-acme-2").build();
        expect(&mut api, Method::GET, &format!("{TENANTS}/acme"), |_| {
            (StatusCode::OK, serde_json::to_value(&reborn).unwrap())
        })
        .await;
        let written = expect(
            &mut api,
            Method::PATCH,
            &format!("{NODES}/node-eu-1/status"),
            accept_write,
        )
        .await;
        assert_eq!(allocations(&written), vec![]);
        run.await.unwrap().unwrap();
        expect_no_more_requests(api, ()).await;
    })
    .await;
}
