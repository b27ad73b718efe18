//! The money path attacked as a person would: a request deleted by hand, a bought Node's
//! manifest copied, a class whose machines deliver less than it promises. Each case once
//! bought a machine nobody needed, or kept one nobody used.

use std::collections::HashMap;
use std::time::Duration;

use inmem_apiserver::Verb;
use tenant_placer::api::{
    DELIVERS_CONDITION, GROUP, NODE_REQUEST_LABEL, NodeClass, NodeState, ResourceAmounts,
    TenantPhase,
};
use tenant_placer::sim::Simulated;
use tenant_placer::sim::provisioner::ProvisionerConfig;

use crate::guards::events_with_reason;
use crate::requests::{class, more_looks, placed, provisioner, requests, small_fleet, until};
use crate::*;

/// Waits until `tenant` is Active on a bought machine (not the fleet's `small`), and names it.
async fn placed_on_a_machine(h: &Harness, tenant: &str, not: &str) -> String {
    until(
        h,
        &format!("{tenant} Active on a machine other than {not}"),
        |h| {
            placed(h, tenant).is_some_and(|(phase, node)| {
                phase == TenantPhase::Active && node != "small" && node != not
            })
        },
    )
    .await;
    placed(h, tenant).map(|(_, node)| node).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_deleted_by_hand_is_bought_again_under_another_name_and_none_outlives_its_node() {
    let h = small_fleet(provisioner(100, &[]), &[class("m16", 16, 100, None)]).await;
    h.apply(&[tenant("paying").resources(10, 8, 100).manifest()]);
    let first = placed_on_a_machine(&h, "paying", "").await;
    assert_eq!(requests(&h).len(), 1);
    // A person deletes the request: the provisioner hands the machine back, its Node drains;
    // the tenant (fitting nowhere else) is bought another machine, under another name: a new
    // request under the old name would be given the old Node, still there (a zombie).
    h.fleet
        .api
        .delete(GROUP, "noderequests", None, &first)
        .unwrap();
    let second = placed_on_a_machine(&h, "paying", &first).await;
    until(&h, "the first machine gone", |h| {
        h.fleet
            .nodes()
            .iter()
            .all(|n| n.metadata.name.as_deref() != Some(&first))
    })
    .await;
    // Past the hand-back delay (300 ms; 40 looks at 20 ms at least).
    more_looks(&h, 40).await;
    let live = requests(&h);
    assert_eq!(live.len(), 1, "one machine for one tenant: {live:#?}");
    assert_eq!(live[0].metadata.name.as_deref(), Some(second.as_str()));
    assert_eq!(
        h.fleet.api.stats().count(Verb::Create, "noderequests"),
        2,
        "bought once again, not twice"
    );
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_carrying_a_copied_request_label_is_reported_and_its_request_keeps_its_machine() {
    let h = small_fleet(provisioner(100, &[]), &[class("m16", 16, 100, None)]).await;
    h.apply(&[tenant("paying").resources(10, 8, 100).manifest()]);
    let bought = placed_on_a_machine(&h, "paying", "").await;
    // Someone copied the bought Node's manifest: Offline, empty, labelled for the live request.
    h.apply(&[node("copy")
        .capacity(16, 64, 1000)
        .state(NodeState::Offline)
        .label(NODE_REQUEST_LABEL, &bought)
        .manifest()]);
    until(&h, "the copy reported", |h| {
        !events_with_reason(h, "NotRequestsNode").is_empty()
    })
    .await;
    // Well past the hand-back delay: the copy never counts as the request's idle machine.
    more_looks(&h, 40).await;
    let live = requests(&h);
    assert_eq!(live.len(), 1, "{live:#?}");
    assert_eq!(live[0].metadata.name.as_deref(), Some(bought.as_str()));
    assert_eq!(
        placed(&h, "paying"),
        Some((TenantPhase::Active, bought.clone()))
    );
    assert_eq!(h.handles.metrics.nodes_handed_back(), 0);
    assert_eq!(h.fleet.api.stats().count(Verb::Create, "noderequests"), 1);
    let reported = events_with_reason(&h, "NotRequestsNode");
    assert_eq!(reported.len(), 1, "reported once");
    assert_eq!(reported[0]["regarding"]["name"], "copy");
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_whose_machines_deliver_less_is_planned_with_what_they_deliver_and_bought_once() {
    // b-big promises 64 threads; its machines come up with 32 (as a-small's do).
    let provisioner = Simulated::Contract(ProvisionerConfig {
        delay: Duration::from_millis(50),
        failing: Default::default(),
        every: Duration::from_millis(20),
        short: HashMap::from([("b-big".to_owned(), ResourceAmounts::new(32, 256, 8000))]),
    });
    let h = small_fleet(
        provisioner,
        &[
            class("a-small", 32, 100, None),
            class("b-big", 64, 200, None),
        ],
    )
    .await;
    h.apply(&[tenant("wide").resources(40, 8, 100).manifest()]);
    until(&h, "the b-big's short Node", |h| {
        h.fleet.nodes().iter().any(|n| {
            n.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(NODE_REQUEST_LABEL))
        })
    })
    .await;
    until(&h, "the class says what it delivers", |h| {
        class_status(h, "b-big").is_some_and(|c| c.delivered().is_some())
    })
    .await;
    // Many looks and past the hand-back delay: the short machine goes back, none is bought again.
    more_looks(&h, 60).await;
    until(&h, "the short machine handed back", |h| {
        requests(h).is_empty()
    })
    .await;
    more_looks(&h, 20).await;
    assert_eq!(
        h.fleet.api.stats().count(Verb::Create, "noderequests"),
        1,
        "one machine bought to learn, none after"
    );
    let class = class_status(&h, "b-big").unwrap();
    assert_eq!(class.delivered(), Some(ResourceAmounts::new(32, 256, 8000)));
    let delivers = class
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == DELIVERS_CONDITION)
        .unwrap();
    assert_eq!(
        (delivers.status.as_str(), delivers.reason.as_str()),
        ("False", "DeliversLess")
    );
    assert_eq!(events_with_reason(&h, "DeliversLess").len(), 1);
    let status = h.tenant("wide").unwrap().status.unwrap();
    assert_eq!(status.phase, TenantPhase::PendingCapacity);
    assert!(
        status.message.contains("NodeClass b-big promises")
            && status.message.contains("its Nodes deliver 32 threads"),
        "{}",
        status.message
    );
    h.assert_invariants();
}

fn class_status(h: &Harness, name: &str) -> Option<NodeClass> {
    let found = h.fleet.api.get(GROUP, "nodeclasses", None, name)?;
    serde_json::from_value(found).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_answered_already_exists_by_another_purchase_is_not_taken_as_made() {
    use std::hash::{Hash, Hasher};
    // No provisioner: the requests stay as made. The controller's first create is held 1.5 s.
    let h = crate::requests::unprovisioned(&[class("box", 64, 100, None)]).await;
    h.fleet.api.inject(
        inmem_apiserver::Fault::on(Verb::Create)
            .resource("noderequests")
            .times(1)
            .delay(Duration::from_millis(1500)),
    );
    h.apply(&[tenant("big").resources(32, 64, 100).manifest()]);
    h.until("the controller's create sent", || {
        h.fleet.api.stats().count(Verb::Create, "noderequests") == 1
    })
    .await;
    // Meanwhile another purchase (of another tenant, too small for big: it is no room for it)
    // takes the name the controller asked for:
    // `<class>-<8 hex digits of the hash of the class and its tenants>`.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    ("box", &["default/big".to_owned()][..]).hash(&mut hasher);
    let name = format!("box-{:08x}", hasher.finish() & 0xffff_ffff);
    h.apply(&[serde_json::json!({
        "apiVersion": VERSION, "kind": "NodeRequest", "metadata": {"name": name},
        "spec": {"nodeClass": "box", "capacity": {"threads": 8, "memoryGb": 8, "storageGb": 8},
                 "tenants": ["other/someone"]}})]);
    // Every status big is given from now on: none may name the other purchase as its own.
    let said: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let heard = said.clone();
    h.fleet.api.on_commit(move |commit| {
        if commit.resource == "tenants" && commit.name == "big" {
            let message = commit.object["status"]["message"]
                .as_str()
                .unwrap_or_default();
            heard.lock().unwrap().push(message.to_owned());
        }
    });
    // Its create answered AlreadyExists, the controller reads what is there: not its purchase.
    // It buys for big under the next name, well before a created request would be forgotten
    // (60 s).
    until(&h, "a request for big under another name", |h| {
        requests(h)
            .iter()
            .any(|r| r.spec.tenants == ["default/big"] && r.metadata.name.as_deref() != Some(&name))
    })
    .await;
    until(&h, "big told of its own request", |_| {
        said.lock()
            .unwrap()
            .iter()
            .any(|m| m.contains("node request box-"))
    })
    .await;
    let told = said.lock().unwrap().clone();
    assert!(
        told.iter().all(|m| !m.contains(&name)),
        "big was told another purchase ({name}) is its own: {told:#?}"
    );
    assert_eq!(h.handles.metrics.node_request_errors("create"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_placed_while_its_machine_is_being_handed_back_keeps_it() {
    let h = small_fleet(provisioner(100, &[]), &[class("box", 64, 100, None)]).await;
    h.apply(&[tenant("first").resources(32, 64, 100).manifest()]);
    let machine = placed_on_a_machine(&h, "first", "").await;
    // The hand-back's cordon (the Node's own resource, not its status) is held in flight: the
    // machine was judged empty, and a tenant is placed on it in that moment.
    let gate = inmem_apiserver::Gate::default();
    h.fleet.api.inject(
        inmem_apiserver::Fault::on(Verb::Patch)
            .resource("nodes")
            .main_resource()
            .name(&machine)
            .hold(&gate),
    );
    h.delete_tenant("first");
    gate.arrived().await;
    h.apply(&[tenant("second").resources(32, 64, 100).manifest()]);
    until(&h, "second Active on the machine being handed back", |h| {
        placed(h, "second") == Some((TenantPhase::Active, machine.clone()))
    })
    .await;
    gate.open();
    // Past the hand-back delay (300 ms; 40 looks at 20 ms at least): the machine is in use.
    more_looks(&h, 40).await;
    let live = requests(&h);
    assert_eq!(live.len(), 1, "the machine kept for second: {live:#?}");
    assert_eq!(
        placed(&h, "second"),
        Some((TenantPhase::Active, machine.clone()))
    );
    let node = h.node(&machine);
    assert_eq!(node.spec.state, NodeState::Online, "the cordon was refused");
    assert_eq!(h.handles.metrics.nodes_handed_back(), 0);
    assert_eq!(h.fleet.api.stats().faults_fired, 1);
    h.assert_invariants();
}
