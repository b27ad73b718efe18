//! `--make-room-moves`: a waiting tenant that fits nowhere, but would on a node if a few smaller
//! tenants there moved, gets those moves (make-before-break) instead of a machine; one that
//! would need more moves than allowed gets a machine.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::ResourceExt;
use serde_json::json;
use tenant_placer::api::{DO_NOT_DISRUPT_ANNOTATION, NODE_REQUEST_LABEL};

use crate::consolidation::buy_boxes;
use crate::guards::events_with_reason;
use crate::requests::requests;
use crate::*;

fn buying(make_room_moves: u16) -> Settings {
    Settings {
        request_after: Some(Duration::ZERO),
        request_check: Duration::from_millis(20),
        make_room_moves,
        ..settings()
    }
}

/// NodeRequests created, over every committed write.
fn count_requests(h: &Harness) -> Arc<AtomicUsize> {
    let created = Arc::new(AtomicUsize::new(0));
    let seen = created.clone();
    h.fleet.api.on_commit(move |commit| {
        if commit.resource == "noderequests" {
            seen.fetch_max(commit.list(GROUP, "noderequests").len(), Ordering::SeqCst);
        }
    });
    created
}

fn node_of(h: &Harness, tenant: &str) -> String {
    h.tenant(tenant)
        .and_then(|t| t.status)
        .map(|s| s.node_name)
        .unwrap_or_default()
}

/// Every status message a tenant's writes carried, by tenant name.
fn messages(h: &Harness) -> Arc<std::sync::Mutex<Vec<(String, String)>>> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    h.fleet.api.on_commit(move |commit| {
        if commit.resource != "tenants" {
            return;
        }
        let mut kept = kept.lock().unwrap();
        for t in commit.list(GROUP, "tenants") {
            let name = t["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let message = t["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if !kept.contains(&(name.clone(), message.clone())) {
                kept.push((name, message));
            }
        }
    });
    seen
}

/// At rest after `w` (7 threads) came to [`two_hosts_and_pinned`]: w on a, t1 and t2 moved to
/// c, nothing else moved, nothing bought, every invariant kept.
async fn room_made_on_a(h: &Harness, created: &AtomicUsize) {
    h.until("w placed", || !node_of(h, "w").is_empty()).await;
    h.settle().await;
    assert_eq!(
        ["w", "t1", "t2", "t3", "t4", "pinned"].map(|t| node_of(h, t)),
        ["a", "c", "c", "b", "b", "c"],
        "w, t1, t2, t3, t4, pinned"
    );
    assert_eq!(created.load(Ordering::SeqCst), 0, "nothing bought");
    h.assert_invariants();
}

/// At rest after `w` came to [`two_hosts_and_pinned`] and the controller restarted mid-way: a
/// restart rolls back the moves in flight (nobody asks for them any more), and the next plan
/// works from what is left; a mover still rolling back cannot move, so the room may be made on
/// b (t3 and t4 to wherever there is room). Either way w is placed on a or b, pinned stays,
/// nothing is bought, and at most three tenants ended away from where they were (a move that
/// finished before the restart, then two for the new plan).
async fn room_made_after_a_restart(h: &Harness, created: &AtomicUsize, what: &str) {
    h.until("w placed on a or b", || {
        ["a", "b"].contains(&node_of(h, "w").as_str())
    })
    .await;
    h.settle().await;
    let moved = ["t1", "t2", "t3", "t4"]
        .iter()
        .zip(["a", "a", "b", "b"])
        .filter(|(t, start)| node_of(h, t) != *start)
        .count();
    assert!(
        (1..=3).contains(&moved),
        "{moved} tenants moved, {what}: {:?}",
        ["t1", "t2", "t3", "t4"].map(|t| node_of(h, t))
    );
    assert_eq!(node_of(h, "pinned"), "c", "{what}");
    assert_eq!(created.load(Ordering::SeqCst), 0, "nothing bought, {what}");
    h.assert_invariants();
}

/// At rest after `w` came to [`two_hosts_and_pinned`] while two controllers made room, neither
/// knowing the other's orders: each may make room on its own host (a or b), and a move one asks
/// the other rolls back, so how many tenants move is not fixed; what is: w placed on a or b
/// (with nothing beside it there, as the invariants check), pinned where it was, nothing bought.
async fn room_made_by_two(h: &Harness, created: &AtomicUsize) {
    h.until("w placed on a or b", || {
        ["a", "b"].contains(&node_of(h, "w").as_str())
    })
    .await;
    h.settle().await;
    assert_eq!(node_of(h, "pinned"), "c");
    assert_eq!(created.load(Ordering::SeqCst), 0, "nothing bought");
    h.assert_invariants();
}

/// The movers' (t1, t2) first status writes wait 300 ms: each move stays in flight (its target
/// written, its status not) a while.
fn movers_status_held_back(h: &Harness) {
    for mover in ["t1", "t2"] {
        h.fleet.api.inject(
            inmem_apiserver::Fault::on(inmem_apiserver::Verb::Patch)
                .resource("tenants")
                .subresource("status")
                .name(mover)
                .delay(Duration::from_millis(300)),
        );
    }
}

/// Boxes to buy, then `w` (7 threads): it is placed on a box bought for it, and no tenant moved
/// to make room.
async fn w_gets_a_machine(h: &Harness) {
    buy_boxes(h, 8).await;
    h.apply(&[tenant("w").resources(7, 1, 1).manifest()]);
    h.until("w placed on a machine bought for it", || {
        node_of(h, "w").starts_with("box-")
    })
    .await;
    h.settle().await;
    assert_eq!(h.handles.metrics.make_room_moves(), 0);
}

/// Places `tenants` (name, threads) one at a time, each settled, so first fit puts them in order.
async fn place(h: &Harness, tenants: &[(&str, i64)]) {
    for (name, threads) in tenants {
        h.apply(&[tenant(name).resources(*threads, 1, 1).manifest()]);
        h.settle().await;
    }
}

/// a and b (8 threads) each hold two 3-thread tenants (t1, t2 on a; t3, t4 on b); c (8) holds
/// `pinned` (2 threads, do-not-disrupt, no node selector: placed while a and b were cordoned). A
/// 7-thread waiter fits nowhere. The least-moving room would be on c, pinned moving alone to a or
/// b; only its annotation keeps it, so the room is made on a by moving t1 and t2 to c (b's would
/// do too; a comes first by name).
async fn two_hosts_and_pinned() -> Harness {
    two_hosts_and_on_c("true").await
}

/// [`two_hosts_and_pinned`] with `pinned`'s do-not-disrupt annotation set to `do_not_disrupt`.
async fn two_hosts_and_on_c(do_not_disrupt: &str) -> Harness {
    let h = Harness::start_on(
        ApiServer::new(),
        &[
            node("a").capacity(8, 256, 8000).manifest(),
            node("b").capacity(8, 256, 8000).manifest(),
        ],
        buying(4),
    )
    .await;
    place(&h, &[("t1", 3), ("t2", 3), ("t3", 3), ("t4", 3)]).await;
    h.apply(&[node("c").capacity(8, 256, 8000).manifest()]);
    let states = |state: &str| ["a", "b"].map(|n| node_spec(n, json!({"state": state})));
    h.apply(&states("Cordoned"));
    let mut pinned = tenant("pinned").resources(2, 1, 1).manifest();
    pinned["metadata"]["annotations"] = json!({DO_NOT_DISRUPT_ANNOTATION: do_not_disrupt});
    h.apply(&[pinned]);
    h.settle().await;
    h.apply(&states("Online"));
    h.settle().await;
    assert_eq!(
        ["t1", "t2", "t3", "t4", "pinned"].map(|t| node_of(&h, t)),
        ["a", "a", "b", "b", "c"]
    );
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_room_by_two_moves_and_nothing_is_bought() {
    let h = two_hosts_and_pinned().await;
    buy_boxes(&h, 8).await;
    let created = count_requests(&h);
    let said = messages(&h);
    // The movers' first status writes wait a little, so that the waiter, woken with them, is
    // told who moves for it before its room is made (under load it could come after).
    movers_status_held_back(&h);
    h.apply(&[tenant("w").resources(7, 1, 1).manifest()]);
    room_made_on_a(&h, &created).await;
    assert!(requests(&h).is_empty());
    assert_eq!(h.handles.metrics.make_room_moves(), 2);
    let said = said.lock().unwrap().clone();
    let says = |tenant: &str, part: &str| said.iter().any(|(t, m)| t == tenant && m.contains(part));
    assert!(
        says(
            "w",
            "room is being made for it on a: default/t1 moves to c, default/t2 moves to c"
        ),
        "{said:?}"
    );
    assert!(
        says("t1", "moving from a to c to make room for default/w"),
        "{said:?}"
    );
    let making = events_with_reason(&h, "MakingRoom");
    assert_eq!(making.len(), 1, "{making:?}");
    let note = making[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("default/t1 moves to c") && note.contains("default/t2 moves to c"),
        "{note}"
    );
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn do_not_disrupt_alone_keeps_a_tenant_from_moving_alone_for_room() {
    // Kept: pinned stays on c, and room is made on a by two moves.
    let h = two_hosts_and_pinned().await;
    buy_boxes(&h, 8).await;
    let created = count_requests(&h);
    h.apply(&[tenant("w").resources(7, 1, 1).manifest()]);
    room_made_on_a(&h, &created).await;
    assert_eq!(h.handles.metrics.make_room_moves(), 2);
    // Not kept (nothing else differs): pinned moves alone and w takes c, one move.
    let h = two_hosts_and_on_c("false").await;
    buy_boxes(&h, 8).await;
    let created = count_requests(&h);
    h.apply(&[tenant("w").resources(7, 1, 1).manifest()]);
    h.until("w placed on c", || node_of(&h, "w") == "c").await;
    h.settle().await;
    assert_eq!(
        ["t1", "t2", "t3", "t4"].map(|t| node_of(&h, t)),
        ["a", "a", "b", "b"]
    );
    assert!(["a", "b"].contains(&node_of(&h, "pinned").as_str()));
    assert_eq!(h.handles.metrics.make_room_moves(), 1);
    assert_eq!(created.load(Ordering::SeqCst), 0, "nothing bought");
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_would_need_five_moves_with_a_limit_of_four_gets_a_machine() {
    // a (8) holds six 1-thread tenants; c (6 threads) is empty. w (7) fits on neither: on a it
    // needs five of them gone (4 allowed), and c is too small whatever moves.
    let h = Harness::start_on(
        ApiServer::new(),
        &[node("a").capacity(8, 256, 8000).manifest()],
        buying(4),
    )
    .await;
    place(
        &h,
        &[
            ("t1", 1),
            ("t2", 1),
            ("t3", 1),
            ("t4", 1),
            ("t5", 1),
            ("t6", 1),
        ],
    )
    .await;
    h.apply(&[node("c").capacity(6, 256, 8000).manifest()]);
    h.settle().await;
    w_gets_a_machine(&h).await;
    assert!((1..=6).all(|i| node_of(&h, &format!("t{i}")) == "a"));
    let boxes = h
        .fleet
        .nodes()
        .into_iter()
        .filter(|n| n.labels().contains_key(NODE_REQUEST_LABEL))
        .count();
    assert_eq!(boxes, 1);
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_room_is_made_rolls_back_what_is_in_flight_and_makes_it_again() {
    let h = two_hosts_and_pinned().await;
    buy_boxes(&h, 8).await;
    let created = count_requests(&h);
    h.apply(&[tenant("w").resources(7, 1, 1).manifest()]);
    h.until("a move under way", || h.allocated_threads("c") > 2)
        .await;
    h.fleet.stop();
    h.fleet.start(buying(4));
    room_made_after_a_restart(&h, &created, "restarted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_controllers_racing_to_make_room_place_the_waiter_and_buy_nothing() {
    let h = two_hosts_and_pinned().await;
    buy_boxes(&h, 8).await;
    let created = count_requests(&h);
    let other = tokio::spawn(tenant_placer::controller::run(
        h.fleet.client.clone(),
        buying(4),
    ));
    h.apply(&[tenant("w").resources(7, 1, 1).manifest()]);
    // Every committed Node write is checked: none over-committed.
    room_made_by_two(&h, &created).await;
    other.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_every_window_no_tenant_moves_the_waiter_says_why_and_gets_a_machine() {
    use tenant_placer::controller::disruption::Window;
    // One minute a year, at New Year: closed now (unless run then).
    let closed: Window = "0 0 1 1 * 1m".parse().unwrap();
    let settings = Settings {
        disruption_schedule: vec![closed],
        ..buying(4)
    };
    let h = Harness::start_on(
        ApiServer::new(),
        &[
            node("a").capacity(8, 256, 8000).manifest(),
            node("b").capacity(8, 256, 8000).manifest(),
            // Room for a's two tenants, not for w.
            node("c").capacity(6, 256, 8000).manifest(),
        ],
        settings,
    )
    .await;
    place(&h, &[("t1", 3), ("t2", 3), ("t3", 3), ("t4", 3)]).await;
    w_gets_a_machine(&h).await;
    assert!(h.handles.metrics.disruptions_blocked("OutsideWindow") >= 1);
    let blocked = events_with_reason(&h, "DisruptionBlocked");
    assert!(
        blocked.iter().any(|e| e["regarding"]["name"] == "w"
            && e["note"]
                .as_str()
                .is_some_and(|n| n.contains("outside every --disruption-schedule window"))),
        "{blocked:?}"
    );
    assert_eq!(
        ["t1", "t2", "t3", "t4"].map(|t| node_of(&h, t)),
        ["a", "a", "b", "b"]
    );
    h.assert_invariants();
}

/// [`two_hosts_and_pinned`] given `w`, the controller killed right after write `at` (counted
/// from `w`'s apply; committed, unanswered) and started again; ends with room made (see
/// [`room_made_after_a_restart`]). Answers the writes the run made.
async fn room_made_killed_at(at: Option<u64>) -> u64 {
    let h = two_hosts_and_pinned().await;
    buy_boxes(&h, 8).await;
    let created = count_requests(&h);
    h.fleet.api.reset_stats();
    let restarter = at.map(|at| h.restart_after_write(u32::try_from(at).unwrap()));
    h.apply(&[tenant("w").resources(7, 1, 1).manifest()]);
    room_made_after_a_restart(&h, &created, &format!("killed at {at:?}")).await;
    let writes = h.fleet.api.stats().write_requests();
    if let (Some(at), Some(restarter)) = (at, restarter) {
        assert!(
            restarter.is_finished() || writes <= at,
            "at write {at}: the fault never fired in a run of {writes} writes"
        );
        restarter.abort();
    }
    writes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_at_any_write_of_making_room_ends_with_room_made_and_nothing_bought() {
    use futures::StreamExt;
    // Each move writes its target, the tenant's Migrating status, its source and its Active
    // status; then w is placed: a kill can land between any two.
    let writes = room_made_killed_at(None).await;
    assert!(writes >= 9, "making room makes {writes} writes");
    let runs: Vec<u64> = futures::stream::iter(0..writes)
        .map(|at| async move { room_made_killed_at(Some(at)).await })
        .buffer_unordered(4)
        .collect()
        .await;
    eprintln!(
        "make-room: killed at each of {writes} writes ({runs:?} writes each run), room made \
         and nothing bought every time"
    );
}

/// [`two_hosts_and_pinned`] given `w`; as soon as a mover's entry is written on c (its status
/// held back, so the move is in flight), a person sets c to `state`. Room can no
/// longer be made as ordered: the order is dropped at once (the move rolled back, or not asked),
/// and w is placed within 10 s, on a if the moves finished first, else on a machine.
async fn target_set_to_while_room_is_made(state: &str) {
    let h = two_hosts_and_pinned().await;
    buy_boxes(&h, 8).await;
    movers_status_held_back(&h);
    h.apply(&[tenant("w").resources(7, 1, 1).manifest()]);
    h.until("a move to c under way", || h.allocated_threads("c") > 2)
        .await;
    h.apply(&[node_spec("c", json!({"state": state}))]);
    let served = h.until("w placed", || !node_of(&h, "w").is_empty());
    if tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .is_err()
    {
        panic!("c {state}: w not placed within 10 s\n{}", h.describe());
    }
    h.settle().await;
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_cordoned_offline_or_draining_while_room_is_made_drops_the_order_at_once() {
    for state in ["Cordoned", "Offline", "Draining"] {
        target_set_to_while_room_is_made(state).await;
    }
}
