//! The capacity tick's pure parts, table-tested.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_imports)]
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::accounts::{Accounts, Use};
use super::decide::*;
use super::memory::*;
use super::snapshot::*;
use crate::controller::make_room;

use crate::api::{AllocationEntry, NodeRequestStatus, NodeSpec, NodeStatus};
use crate::api::{
    CONSOLIDATING_ANNOTATION, NODE_CLASS_LABEL, NODE_REQUEST_LABEL, Node, NodeClass, NodeRequest,
    NodeRequestPhase, NodeRequestSpec, NodeState, ResourceAmounts, Tenant, TenantPhase,
};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::watcher;
use placement::{
    InFlightRequest, Labels, NodeClassOffer, Policy, QueueMode, Resources, SelectiveTenant,
    WaitingTenant,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether `name` is a DNS-1123 label, as a Node name and a label value must be.
fn is_dns_label(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&name.len())
        && name.chars().all(|c| alnum(c) || c == '-')
        && name.starts_with(alnum)
        && name.ends_with(alnum)
}

#[test]
fn a_request_nobody_took_up_is_withdrawn_once_its_class_is_gone() {
    let mut going = box_request("going", NodeRequestPhase::Pending);
    going.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    let mut other = box_request("other-class", NodeRequestPhase::Pending);
    other.spec.node_class = "kept".into();
    let requests: Vec<Arc<NodeRequest>> = [
        box_request("fresh", NodeRequestPhase::Pending),
        box_request("taken-up", NodeRequestPhase::Provisioning),
        box_request("ready", NodeRequestPhase::Ready),
        going,
        other,
    ]
    .into_iter()
    .map(Arc::new)
    .collect();
    let names = |classes: &[&str]| {
        let classes = classes.iter().map(|c| (*c).to_owned()).collect();
        classless(&requests, &classes)
            .map(|r| r.name_any())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&["kept"]), ["fresh"]);
    assert!(names(&["kept", "box"]).is_empty());
}

#[test]
fn a_purchase_has_the_same_name_whoever_computes_it_and_a_different_one_for_other_tenants() {
    let tenants = vec!["default/a".to_owned(), "default/b".to_owned()];
    let name = request_name("hetzner-ax162", &tenants, 0);
    assert_eq!(name, request_name("hetzner-ax162", &tenants, 0));
    assert!(name.starts_with("hetzner-ax162-") && name.len() == "hetzner-ax162-".len() + 8);
    assert_ne!(name, request_name("hetzner-ax162", &tenants[..1], 0));
    assert_ne!(name, request_name("ovh-adv", &tenants, 0));
    // Each next attempt (the stable name taken by another request) is another name.
    let attempts: HashSet<String> = (0..NAME_ATTEMPTS)
        .map(|attempt| request_name("hetzner-ax162", &tenants, attempt))
        .collect();
    assert_eq!(attempts.len(), NAME_ATTEMPTS as usize);
    // And the same in every release: a controller upgraded between a create and the watch
    // event of it finds its purchase by name (AlreadyExists) instead of buying it again. A
    // toolchain whose DefaultHasher hashes otherwise fails here.
    assert_eq!(name, "hetzner-ax162-3ea8961e");
    // A long class name is cut so that the name stays a DNS label (63 characters).
    let long = "c".repeat(80);
    assert_eq!(request_name(&long, &tenants, 0).len(), 63);
}

#[test]
fn a_request_name_is_a_dns_label_for_every_valid_class_name() {
    // Valid NodeClass names (DNS-1123 subdomains, up to 253): a dot or a dash where the cut
    // falls (the 55-character name of the issue: a dot at 54), dots anywhere, the longest.
    let dot_at_cut = format!("{}.b", "a".repeat(53));
    let dash_at_cut = format!("{}-bc", "a".repeat(53));
    let dotted = "hetzner.ax102.eu".to_owned();
    let longest = format!("{}.{}", "a".repeat(63), "b".repeat(189));
    let tenants = vec!["default/a".to_owned()];
    for class in [&dot_at_cut, &dash_at_cut, &dotted, &longest] {
        for attempt in 0..NAME_ATTEMPTS {
            let name = request_name(class, &tenants, attempt);
            assert!(is_dns_label(&name), "{class}: {name}");
        }
    }
    // Two classes that share their first 54 characters still get different names.
    assert_ne!(
        request_name(&format!("{}x", "a".repeat(60)), &tenants, 0),
        request_name(&format!("{}y", "a".repeat(60)), &tenants, 0)
    );
}

#[test]
fn a_waiting_tenants_note_names_its_request_and_phase() {
    let mut request = NodeRequest::new(
        "box-0000abcd",
        NodeRequestSpec {
            node_class: "box".into(),
            capacity: ResourceAmounts::new(64, 256, 8000),
            tenants: vec!["default/big".into()],
        },
    );
    request.status = Some(NodeRequestStatus {
        phase: NodeRequestPhase::Provisioning,
        ..NodeRequestStatus::default()
    });
    let notes = request_notes(&[Arc::new(request.clone())]);
    assert_eq!(
        notes["default/big"],
        "node request box-0000abcd (box) is Provisioning for it"
    );
    assert_eq!(notes.len(), 1);
    // A Ready request counts the Node its status names, else the one named after it.
    assert_eq!(request.made_node(), "box-0000abcd");
    request.status = Some(NodeRequestStatus {
        phase: NodeRequestPhase::Ready,
        node_name: "lab-17".into(),
        ..NodeRequestStatus::default()
    });
    assert_eq!(request.made_node(), "lab-17");
}

fn box_request(name: &str, phase: NodeRequestPhase) -> NodeRequest {
    let mut request = NodeRequest::new(
        name,
        NodeRequestSpec {
            node_class: "box".into(),
            capacity: ResourceAmounts::new(16, 64, 100),
            tenants: vec![format!("default/for-{name}")],
        },
    );
    request.status = Some(NodeRequestStatus {
        phase,
        ..NodeRequestStatus::default()
    });
    request
}

#[test]
fn purchases_remember_what_the_watch_showed_and_what_this_process_created() {
    let purchases = Memory::default();
    // The watch shows a Failed request and a Provisioning one; list markers are no news.
    let failed = box_request("failed", NodeRequestPhase::Failed);
    let provisioning = box_request("shown", NodeRequestPhase::Provisioning);
    purchases.observe(&watcher::Event::Init);
    purchases.observe(&watcher::Event::Apply(failed.clone()));
    purchases.observe(&watcher::Event::InitApply(provisioning.clone()));
    purchases.observe(&watcher::Event::InitDone);
    {
        let remembered = purchases.lock();
        assert_eq!(remembered.failed.keys().collect::<Vec<_>>(), ["failed"]);
        let mut shown: Vec<_> = remembered.shown.iter().map(String::as_str).collect();
        shown.sort_unstable();
        assert_eq!(shown, ["failed", "shown"]);
    }

    // Created here: "shown" (the watch has shown it), "fresh" (not yet), "refused" (not
    // shown for longer than it is kept: the create was refused).
    {
        let mut remembered = purchases.lock();
        let now = Instant::now();
        let spec = provisioning.spec.clone();
        remembered
            .created
            .insert("shown".into(), (spec.clone(), now));
        // Created here and listed before the watch's event for it arrived: counted once.
        remembered
            .created
            .insert("ready".into(), (spec.clone(), now));
        remembered
            .created
            .insert("fresh".into(), (spec.clone(), now));
        let long_ago = now
            .checked_sub(CREATED_KEPT + Duration::from_secs(1))
            .expect("the monotonic clock has run longer than a request is kept");
        remembered
            .created
            .insert("refused".into(), (spec, long_ago));
    }
    let ready = box_request("ready", NodeRequestPhase::Ready);
    let live = [Arc::new(ready), Arc::new(provisioning)];
    let requested = purchases.requested(&live);
    let seen: Vec<(&str, Option<&str>)> = requested
        .iter()
        .map(|r| (r.name.as_str(), r.node.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [("ready", Some("ready")), ("shown", None), ("fresh", None)]
    );
    let mut kept: Vec<_> = purchases.lock().created.keys().cloned().collect();
    kept.sort_unstable();
    // Until the watch shows them: "ready" is counted from the list meanwhile.
    assert_eq!(kept, ["fresh", "ready"]);
    assert!(purchases.lock().shown.is_empty(), "taken by the look");
}

#[test]
fn a_pool_has_the_classes_its_selector_takes_and_the_requests_of_those() {
    let every = Pool(None);
    let ours = Pool(Some(HashSet::from(["box".to_owned()])));
    assert!(every.has_class("box") && every.has_class("other"));
    assert!(ours.has_class("box") && !ours.has_class("other"));
    let mut request = box_request("r", NodeRequestPhase::Pending);
    assert!(ours.owns(&request) && every.owns(&request));
    request.spec.node_class = "other".into();
    assert!(!ours.owns(&request) && every.owns(&request));
}

/// What the planner reads: any one field changed gives another fingerprint.
#[test]
fn the_plan_input_fingerprint_tells_every_field_apart() {
    type Input = (
        Vec<SelectiveTenant>,
        Vec<(NodeClassOffer, Labels)>,
        Vec<(InFlightRequest, Labels)>,
    );
    let labels = |v: &str| Labels::from([("zone".to_owned(), v.to_owned())]);
    let base: Input = (
        vec![SelectiveTenant {
            waiting: WaitingTenant {
                tenant: "default/a".into(),
                footprint: Resources::new(2, 1, 1),
            },
            selector: None,
        }],
        vec![(
            NodeClassOffer {
                name: "box".into(),
                capacity: Resources::new(16, 8, 8),
                monthly_cost: Some(100),
                limit: Some(3),
                in_use: 1,
            },
            labels("a"),
        )],
        vec![(
            InFlightRequest {
                name: "r1".into(),
                capacity: Resources::new(16, 8, 8),
            },
            labels("a"),
        )],
    );
    let edits: [fn(&mut Input); 14] = [
        |i| i.0[0].waiting.tenant = "default/b".into(),
        |i| i.0[0].waiting.footprint.threads = 3,
        |i| i.0[0].selector = Some(Labels::new()),
        |i| i.0.clear(),
        |i| i.1[0].0.name = "big".into(),
        |i| i.1[0].0.capacity.memory_gb = 9,
        |i| i.1[0].0.monthly_cost = None,
        |i| i.1[0].0.limit = Some(4),
        |i| i.1[0].0.in_use = 2,
        |i| i.1[0].1.clear(),
        |i| i.2[0].0.name = "r2".into(),
        |i| i.2[0].0.capacity.storage_gb = 9,
        |i| i.2[0].1.clear(),
        |i| i.2.clear(),
    ];
    let print = |(planned, offers, in_flight): &Input| fingerprint(planned, offers, in_flight);
    let mut prints = vec![print(&base)];
    for edit in edits {
        let mut input = base.clone();
        edit(&mut input);
        prints.push(print(&input));
    }
    let distinct: HashSet<u64> = prints.iter().copied().collect();
    assert_eq!(distinct.len(), prints.len(), "{prints:?}");
    assert_eq!(
        print(&base.clone()),
        prints[0],
        "the same input, the same print"
    );
}

#[test]
fn a_class_rests_after_a_failure_and_is_forgotten_a_longest_rest_later() {
    let now = Instant::now() + LONGEST_REST * 2;
    let mut remembered = Remembered::default();
    let rest = |until: Instant, failures| (until, failures);
    remembered.resting.extend([
        ("resting".to_owned(), rest(now + FIRST_REST, 1)),
        ("rested".to_owned(), rest(now - FIRST_REST, 2)),
        ("ends-now".to_owned(), rest(now, 1)),
        ("long-ago".to_owned(), rest(now - LONGEST_REST, 3)),
        ("no-failure".to_owned(), rest(now + FIRST_REST, 0)),
    ]);
    let resting = remembered.resting_classes(now);
    assert_eq!(resting, HashSet::from(["resting".to_owned()]));
    // A rest over is kept (the next failure doubles it) until a longest rest has passed.
    let mut kept: Vec<_> = remembered.resting.keys().map(String::as_str).collect();
    kept.sort_unstable();
    assert_eq!(kept, ["ends-now", "rested", "resting"]);
}

/// A NodeClass of `capacity` at 1 a month, no limit, no labels.
fn class_of(name: &str, capacity: ResourceAmounts) -> NodeClass {
    NodeClass::new(
        name,
        crate::api::NodeClassSpec {
            capacity,
            provider: "test".into(),
            monthly_cost: Some(1),
            limit: None,
            labels: Default::default(),
            cluster_api: None,
        },
    )
}

#[test]
fn offers_are_the_pools_classes_not_resting_by_name_with_their_machines_in_use() {
    let class =
        |name: &str, threads| Arc::new(class_of(name, ResourceAmounts::new(threads, 64, 1000)));
    let classes = [
        class("c", 16),
        class("a", 16),
        class("resting", 16),
        class("elsewhere", 16),
        class("broken", -1),
        unavailable(class("down", 16)),
    ];
    let requested = |class: &str| Requested {
        name: format!("r-{class}"),
        spec: NodeRequestSpec {
            node_class: class.into(),
            capacity: ResourceAmounts::new(16, 64, 1000),
            tenants: vec![],
        },
        node: None,
    };
    let pool = Pool(Some(HashSet::from(
        ["a", "c", "resting", "broken", "down"].map(str::to_owned),
    )));
    let offers = offers(
        &classes,
        &HashSet::from(["resting".to_owned()]),
        &[requested("a"), requested("a"), requested("c")],
        &pool,
        &Accounts::default(),
    );
    let seen: Vec<(&str, u32)> = offers
        .iter()
        .map(|(o, _)| (o.name.as_str(), o.in_use))
        .collect();
    assert_eq!(seen, [("a", 2), ("c", 1)]);
    assert_eq!(offers[0].1[NODE_CLASS_LABEL], "a");
}

/// The class with its `Available` condition False, as the cluster-api provisioner writes it.
fn unavailable(class: Arc<NodeClass>) -> Arc<NodeClass> {
    let mut class = (*class).clone();
    class.status = Some(crate::api::NodeClassStatus {
        conditions: vec![crate::api::Condition {
            type_: crate::api::AVAILABLE_CONDITION.into(),
            status: "False".into(),
            reason: "MachineDeploymentNotFound".into(),
            message: "MachineDeployment fleet/md does not exist".into(),
            last_transition_time: crate::api::Condition::UNREADABLE_TIME,
            observed_generation: None,
        }],
        delivered: None,
    });
    Arc::new(class)
}

#[test]
fn why_nothing_is_bought_names_the_pools_classes_that_cannot_be_bought_now() {
    let class = |name: &str| Arc::new(class_of(name, ResourceAmounts::new(16, 64, 1000)));
    let classes = [
        class("up"),
        unavailable(class("down")),
        unavailable(class("elsewhere")),
    ];
    let pool = Pool(Some(HashSet::from(["up", "down"].map(str::to_owned))));
    let notes = |classes: &[Arc<NodeClass>]| {
        let unplaceable = HashMap::from([("d/t".to_owned(), "no class holds it".to_owned())]);
        with_unavailable(unplaceable, classes, &pool)["d/t"].clone()
    };
    assert_eq!(
        notes(&classes),
        "no class holds it (NodeClass down cannot be bought now: \
         MachineDeployment fleet/md does not exist)"
    );
    assert_eq!(notes(&classes[..1]), "no class holds it");
}

#[test]
fn a_waiting_tenants_note_names_a_request_created_here_and_why_nothing_is_bought() {
    let spec = |tenants: &[&str]| NodeRequestSpec {
        node_class: "box".into(),
        capacity: ResourceAmounts::new(16, 64, 1000),
        tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
    };
    let live = [Arc::new(NodeRequest::new("listed", spec(&["d/a"])))];
    let created = HashMap::from([("fresh".to_owned(), (spec(&["d/a", "d/b"]), Instant::now()))]);
    let unplaceable = HashMap::from([("d/c".to_owned(), "no node can be requested".to_owned())]);
    let notes = notes(&created, &live, unplaceable);
    assert_eq!(
        notes,
        HashMap::from([
            (
                "d/a".to_owned(),
                "node request listed (box) is Pending for it".to_owned()
            ),
            (
                "d/b".to_owned(),
                "node request fresh (box) is Pending for it".to_owned()
            ),
            ("d/c".to_owned(), "no node can be requested".to_owned()),
        ])
    );
}

fn box_spec(tenants: &[&str]) -> NodeRequestSpec {
    NodeRequestSpec {
        node_class: "box".into(),
        capacity: ResourceAmounts::new(64, 256, 8000),
        tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
    }
}

#[test]
fn a_request_found_under_a_purchases_name_is_that_purchase_only_while_it_is_in_flight() {
    let spec = box_spec(&["default/big"]);
    let with = |change: &dyn Fn(&mut NodeRequest)| {
        let mut found = NodeRequest::new("box-0000abcd", spec.clone());
        change(&mut found);
        is_in_flight_for(&found, &spec)
    };
    let phase = |phase| {
        move |r: &mut NodeRequest| {
            r.status = Some(NodeRequestStatus {
                phase,
                ..NodeRequestStatus::default()
            })
        }
    };
    assert!(with(&|_| {}), "made, no status yet");
    assert!(with(&phase(NodeRequestPhase::Provisioning)));
    assert!(with(&phase(NodeRequestPhase::Ready)));
    assert!(!with(&phase(NodeRequestPhase::Failed)), "Failed");
    assert!(
        !with(&|r| r.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH))),
        "going"
    );
    assert!(
        !with(&|r| r.spec.tenants = vec!["default/other".into()]),
        "for other tenants"
    );
    assert!(
        !with(&|r| r.spec.node_class = "ovh".into()),
        "of another class"
    );
}

#[test]
fn a_bought_machine_is_idle_only_when_it_holds_nothing_stays_and_no_waiter_could_use_it() {
    let online = |state| {
        let mut node = Node::new(
            "box-0000abcd",
            NodeSpec {
                capacity: ResourceAmounts::new(16, 64, 1000),
                state,
                overcommit: None,
            },
        );
        node.metadata.labels =
            Some([(NODE_REQUEST_LABEL.to_owned(), "box-0000abcd".to_owned())].into());
        node
    };
    let now = at(100);
    let nobody = Demand::of(&[], QueueMode::BestEffortFifo, Duration::ZERO, now);
    let fits = Demand::of(
        &[first("d/t", 10, 8, 10)],
        QueueMode::BestEffortFifo,
        Duration::ZERO,
        now,
    );
    let too_big = Demand::of(
        &[first("d/t", 10, 32, 10)],
        QueueMode::BestEffortFifo,
        Duration::ZERO,
        now,
    );
    let empty = online(NodeState::Online);
    let mut holding = empty.clone();
    holding.status = Some(NodeStatus {
        allocations: vec![AllocationEntry {
            tenant: "d/a".into(),
            uid: "uid-a".into(),
            resources: ResourceAmounts::new(1, 1, 1),
            replicas: None,
        }],
        ..NodeStatus::default()
    });
    let unreadable = Node::unreadable(empty.metadata.clone(), "{}", "bad".into());
    let mut going = empty.clone();
    going.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    let cordoned = online(NodeState::Cordoned);
    let mut drained = online(NodeState::Draining);
    drained.metadata.annotations =
        Some([(CONSOLIDATING_ANNOTATION.to_owned(), "true".to_owned())].into());
    let mut request = box_request("box-0000abcd", NodeRequestPhase::Ready);
    request.metadata.uid = Some("uid-r".into());
    let live = [Arc::new(request)];
    // (the node's newest copy, or none, demand, its request's use)
    let table: [(Option<&Node>, &Demand, Use); 11] = [
        (Some(&empty), &nobody, Use::Idle),
        (Some(&empty), &too_big, Use::Idle),
        (Some(&empty), &fits, Use::Awaited),
        (Some(&holding), &nobody, Use::InUse),
        (Some(&unreadable), &nobody, Use::InUse),
        // No Node behind a Ready request: a machine paid for that serves nothing.
        (None, &nobody, Use::Orphaned),
        (Some(&going), &nobody, Use::InUse),
        // A node that takes nobody now is idle though a waiter would fit there.
        (Some(&cordoned), &fits, Use::Idle),
        (Some(&cordoned), &nobody, Use::Idle),
        // One consolidation drained is taken back for a waiter that fits, else handed back.
        (Some(&drained), &fits, Use::Awaited),
        (Some(&drained), &nobody, Use::Idle),
    ];
    for (i, (node, demand, wanted)) in table.into_iter().enumerate() {
        let nodes: HashMap<String, Arc<Node>> = node
            .map(|n| ("box-0000abcd".to_owned(), Arc::new(n.clone())))
            .into_iter()
            .collect();
        let accounts = account(&live, &nodes, demand);
        assert_eq!(accounts.uses["box-0000abcd"].0, wanted, "case {i}");
    }
}

#[test]
fn a_class_rests_longer_with_each_failure_in_a_row_up_to_the_longest() {
    let secs = |failures| rest_after(failures).as_secs();
    let table = [
        (0, 30),
        (1, 30),
        (2, 60),
        (3, 120),
        (6, 960),
        (7, 1800),
        (17, 1800),
    ];
    for (failures, rest) in table {
        assert_eq!(secs(failures), rest, "{failures} failures");
    }
    assert_eq!(rest_after(u32::MAX), LONGEST_REST);
}

#[test]
fn a_machine_can_take_a_first_placement_waiting_or_a_blocked_move_and_nothing_else() {
    use crate::testing::tenant;
    let pending = || {
        tenant("t")
            .resources(4, 8, 10)
            .phase(TenantPhase::PendingCapacity)
    };
    let blocked = || {
        tenant("t")
            .resources(4, 8, 10)
            .phase(TenantPhase::Active)
            .on("old")
            .reserved(2, 4, 5)
            .placed(crate::api::PlacedReason::MigrationBlocked.as_str())
    };
    let wait = |t: Tenant| waiter_of(&t).map(|(w, leaving)| (w.wait, w.footprint, w.uid, leaving));
    let (first, uid) = (wait(pending().build()), "uid-t".to_owned());
    assert!(
        matches!(first, Some((Wait::First { .. }, f, ref u, None)) if f == Resources::new(4, 8, 10) && *u == uid),
        "{first:?}"
    );
    // A move needs the room it holds, and leaves its node.
    assert_eq!(
        wait(blocked().build()),
        Some((
            Wait::Move,
            Resources::new(2, 4, 5),
            uid,
            Some("old".to_owned())
        ))
    );
    for (what, t) in [
        ("deleting", pending().deleting().build()),
        ("suspended", pending().suspended().build()),
        ("a suspended blocked move", blocked().suspended().build()),
        (
            "placed",
            tenant("t").phase(TenantPhase::Active).on("n1").build(),
        ),
        (
            "resizing in place",
            tenant("t").phase(TenantPhase::Resizing).on("n1").build(),
        ),
        ("no status", tenant("t").build()),
        ("an unusable spec", pending().replicas(0).build()),
    ] {
        assert!(waiter_of(&t).is_none(), "{what}");
    }
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).unwrap()
}

/// A tenant created at `created` s, waiting for its first placement since `since` s.
fn first(key: &str, created: i64, threads: u64, since: i64) -> Waiter {
    Waiter {
        key: key.into(),
        uid: format!("uid-{key}"),
        created: Some(at(created)),
        footprint: Resources::new(threads, 1, 1),
        selector: None,
        wait: Wait::First {
            since: Some(at(since)),
        },
    }
}

fn moving(key: &str, created: i64, threads: u64) -> Waiter {
    Waiter {
        wait: Wait::Move,
        ..first(key, created, threads, 0)
    }
}

fn planned(demand: &Demand) -> Vec<&str> {
    demand
        .planned
        .iter()
        .map(|t| t.waiting.tenant.as_str())
        .collect()
}

fn box_class(threads: u64) -> (NodeClassOffer, Labels) {
    let offer = NodeClassOffer {
        name: "box".into(),
        capacity: Resources::new(threads, 64, 1000),
        monthly_cost: Some(100),
        limit: None,
        in_use: 0,
    };
    (offer, Labels::new())
}

#[test]
fn what_is_planned_for_is_what_the_queue_will_place_on_a_new_machine() {
    // now = 100 s, request_after = 60 s: waiting since 30 s is long enough, since 50 s not.
    let (now, after) = (at(100), Duration::from_secs(60));
    let waiters = [
        first("d/young", 20, 4, 30),
        first("d/head", 10, 100, 30),
        moving("d/mover", 5, 60),
        first("d/new", 30, 4, 50),
    ];
    // BestEffortFIFO: every move, and every first placement that waited long enough,
    // oldest first.
    let best = Demand::of(&waiters, QueueMode::BestEffortFifo, after, now);
    assert_eq!(planned(&best), ["d/mover", "d/head", "d/young"]);
    assert_eq!(best.head, None);
    // StrictFIFO: the same, with head (the oldest first placement) known, and who is behind.
    let strict = Demand::of(&waiters, QueueMode::StrictFifo, after, now);
    assert_eq!(planned(&strict), ["d/mover", "d/head", "d/young"]);
    let head = strict.head.as_ref().unwrap();
    assert_eq!((head.tenant.as_str(), head.planned), ("d/head", true));
    assert_eq!(head.behind, ["d/young", "d/new"]);
    // A head that has not waited long enough: nothing behind it is planned either; a move
    // is not behind it.
    let waiters = [
        first("d/head", 10, 4, 90),
        first("d/young", 20, 4, 30),
        moving("d/mover", 30, 4),
    ];
    let strict = Demand::of(&waiters, QueueMode::StrictFifo, after, now);
    assert_eq!(planned(&strict), ["d/mover"]);
    // What is planned for is told apart by its fingerprint.
    assert_ne!(strict.fingerprint(), best.fingerprint());
    assert_eq!(
        strict.fingerprint(),
        Demand::of(&waiters, QueueMode::StrictFifo, after, now).fingerprint()
    );
}

#[test]
fn behind_a_strict_fifo_head_no_class_holds_nothing_is_bought() {
    // The issue's case: one 16-thread class; head asks 100 threads, young 12. Under
    // BestEffortFIFO young gets a box; under StrictFIFO young would never be placed on it
    // before head, which no box holds: nothing is bought, and both say why.
    let (now, after) = (at(100), Duration::ZERO);
    let waiters = [first("d/head", 10, 100, 10), first("d/young", 20, 12, 20)];
    let classes = [box_class(16)];
    let best = Demand::of(&waiters, QueueMode::BestEffortFifo, after, now);
    let (purchase, _) = best.plan(Policy::FirstFit, &classes, &[]);
    assert_eq!(purchase.requests.len(), 1);
    assert_eq!(purchase.requests[0].tenants, ["d/young"]);
    let strict = Demand::of(&waiters, QueueMode::StrictFifo, after, now);
    let (purchase, why) = strict.plan(Policy::FirstFit, &classes, &[]);
    assert!(purchase.requests.is_empty(), "{purchase:?}");
    assert!(
        why["d/head"].starts_with("no node can be requested for it: larger than every"),
        "{}",
        why["d/head"]
    );
    assert_eq!(
        why["d/young"],
        "it waits behind d/head (StrictFIFO), for which no machine can be bought: nothing is \
         bought for it before"
    );
    // Nor is a machine kept for young: it could not be placed there.
    assert!(!strict.could_use(&Labels::new(), Resources::new(16, 64, 1000)));
    assert!(best.could_use(&Labels::new(), Resources::new(16, 64, 1000)));
    // A head whose selector no class's labels match is no different.
    let mut lost = first("d/head", 10, 1, 10);
    lost.selector = Some(Labels::from([("region".to_owned(), "mars".to_owned())]));
    let strict = Demand::of(
        &[lost, waiters[1].clone()],
        QueueMode::StrictFifo,
        after,
        now,
    );
    let (purchase, why) = strict.plan(Policy::FirstFit, &classes, &[]);
    assert!(purchase.requests.is_empty(), "{purchase:?}");
    assert_eq!(
        why["d/head"],
        "no node can be requested for it: no node class makes nodes labelled region=mars"
    );
    // A move is not behind the head: it still gets its box.
    let with_move = [
        waiters[0].clone(),
        waiters[1].clone(),
        moving("d/mover", 30, 8),
    ];
    let strict = Demand::of(&with_move, QueueMode::StrictFifo, after, now);
    let (purchase, _) = strict.plan(Policy::FirstFit, &classes, &[]);
    assert_eq!(purchase.requests.len(), 1, "{purchase:?}");
    assert_eq!(purchase.requests[0].tenants, ["d/mover"]);
    // A head that has not waited long enough: the ones behind it say so.
    let recent = [first("d/head", 10, 100, 50), waiters[1].clone()];
    let strict = Demand::of(&recent, QueueMode::StrictFifo, Duration::from_secs(60), now);
    let (purchase, why) = strict.plan(Policy::FirstFit, &classes, &[]);
    assert!(purchase.requests.is_empty(), "{purchase:?}");
    assert_eq!(
        why["d/young"],
        "it waits behind d/head (StrictFIFO), which has not waited long enough for a machine \
         yet: nothing is bought for it before"
    );
}

#[test]
fn an_older_blocked_move_takes_the_room_on_the_way_and_the_younger_tenant_gets_its_own() {
    // The issue's case: a 64-thread box is on the way for waiter (60); then mover (60, older)
    // is blocked off a draining node. The queue will give the box to mover first, so a second
    // box is bought for waiter.
    let (now, after) = (at(100), Duration::ZERO);
    let waiters = [first("d/waiter", 20, 60, 20), moving("d/mover", 10, 60)];
    let demand = Demand::of(&waiters, QueueMode::BestEffortFifo, after, now);
    let on_the_way = [(
        InFlightRequest {
            name: "box-1".into(),
            capacity: Resources::new(64, 64, 1000),
        },
        Labels::new(),
    )];
    let (purchase, _) = demand.plan(Policy::FirstFit, &[box_class(64)], &on_the_way);
    assert_eq!(purchase.in_flight_assignments[0].tenants, ["d/mover"]);
    assert_eq!(purchase.requests.len(), 1);
    assert_eq!(purchase.requests[0].tenants, ["d/waiter"]);
}

#[test]
fn a_requests_room_goes_first_to_the_tenants_it_was_bought_for() {
    let (now, after) = (at(100), Duration::ZERO);
    let mut mars = first("d/mars", 4, 2, 0);
    mars.selector = Some(Labels::from([("region".to_owned(), "mars".to_owned())]));
    let waiters = [
        first("d/older", 1, 12, 0),
        first("d/mine", 5, 12, 0),
        first("d/small", 9, 4, 0),
        first("d/grown", 3, 20, 0),
        mars,
    ];
    let demand = Demand::of(&waiters, QueueMode::BestEffortFifo, after, now);
    fn incoming<'a>(name: &str, threads: u64, bought_for: &'a [String]) -> Incoming<'a> {
        Incoming {
            request: InFlightRequest {
                name: name.into(),
                capacity: Resources::new(threads, 64, 1000),
            },
            labels: Labels::new(),
            bought_for,
        }
    }
    let r1 = ["d/mine", "d/mars", "d/grown"].map(String::from);
    let r2 = ["d/gone".to_owned()];
    let (demand, in_flight) =
        demand.promise(vec![incoming("r1", 16, &r1), incoming("r2", 16, &r2)]);
    // mine is r1's (4 threads left). mars's selector is not r1's labels, and grown (bought
    // for when it was smaller) no longer fits: both are planned as usual, with older and
    // small, on what is left.
    assert_eq!(
        planned(&demand),
        ["d/older", "d/grown", "d/mars", "d/small"]
    );
    let left: Vec<(&str, u64)> = in_flight
        .iter()
        .map(|(r, _)| (r.name.as_str(), r.capacity.threads))
        .collect();
    assert_eq!(left, [("r1", 4), ("r2", 16)]);
    // So older is planned on r2, not on the room r1 brings for mine.
    let (purchase, _) = demand.plan(Policy::FirstFit, &[box_class(16)], &in_flight);
    let assigned: Vec<(&str, Vec<&str>)> = purchase
        .in_flight_assignments
        .iter()
        .map(|a| {
            (
                a.request.as_str(),
                a.tenants.iter().map(|t| t.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(assigned, [("r1", vec!["d/small"]), ("r2", vec!["d/older"])]);
    // Behind a StrictFIFO head, mine's room is not promised: the head comes first.
    let waiters = [first("d/head", 1, 10, 0), first("d/mine", 5, 12, 0)];
    let strict = Demand::of(&waiters, QueueMode::StrictFifo, after, now);
    let (strict, in_flight) = strict.promise(vec![incoming("r1", 16, &r1)]);
    assert_eq!(in_flight[0].0.capacity.threads, 16);
    assert_eq!(planned(&strict), ["d/head", "d/mine"]);
}

/// What goes back: by each purchase's use, since when it has been idle, and whether
/// consolidation drained its node.
#[test]
fn an_idle_machine_goes_back_after_the_delay_a_drained_one_at_once_an_orphan_is_retired() {
    let delay = Duration::from_secs(10);
    let t0 = Instant::now();
    let request = |name: &str| {
        let mut r = box_request(name, NodeRequestPhase::Ready);
        r.metadata.uid = Some(format!("uid-{name}"));
        Arc::new(r)
    };
    let node = |name: &str, consolidated: bool| {
        let mut n = Node::new(
            name,
            NodeSpec {
                capacity: ResourceAmounts::new(16, 64, 1000),
                state: if consolidated {
                    NodeState::Draining
                } else {
                    NodeState::Online
                },
                overcommit: None,
            },
        );
        if consolidated {
            n.metadata.annotations =
                Some([(CONSOLIDATING_ANNOTATION.to_owned(), "true".to_owned())].into());
        }
        Arc::new(n)
    };
    let live = [
        request("idle"),
        request("drained"),
        request("orphan"),
        request("used"),
        request("wanted"),
    ];
    let bought: HashMap<String, Arc<Node>> = [
        ("idle", node("idle", false)),
        ("drained", node("drained", true)),
        ("used", node("used", false)),
        ("wanted", node("wanted", true)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let owned = |n: &str| Some(n.to_owned());
    let accounts = Accounts {
        uses: [
            ("idle", (Use::Idle, owned("idle"))),
            ("drained", (Use::Idle, owned("drained"))),
            ("orphan", (Use::Orphaned, None)),
            ("used", (Use::InUse, owned("used"))),
            ("wanted", (Use::Awaited, owned("wanted"))),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
        ..Accounts::default()
    };
    let names = |r: &Returns<'_>| -> Vec<(String, GoesBack)> {
        r.give_back
            .iter()
            .map(|(req, _, why)| (req.name_any(), *why))
            .collect()
    };
    let mut since = HashMap::from([("uid-used".to_owned(), t0)]);
    // At first sight: the drained node goes at once; the idle one and the orphan wait; the one
    // a waiter can use is taken back; one in use is forgotten as idle.
    let first = returns(&live, &accounts, &bought, &mut since, (t0, delay));
    assert_eq!(
        names(&first),
        [("drained".to_owned(), GoesBack::Consolidated)]
    );
    assert_eq!(first.take_back.len(), 1);
    assert_eq!(first.take_back[0].name_any(), "wanted");
    assert_eq!(first.idle_by_class, BTreeMap::from([("box", 2)]));
    assert!(!since.contains_key("uid-used"));
    // 9 s later: still waiting; 10 s later (the delay): both go.
    let later = t0 + Duration::from_secs(9);
    assert_eq!(
        names(&returns(
            &live,
            &accounts,
            &bought,
            &mut since,
            (later, delay)
        )),
        [("drained".to_owned(), GoesBack::Consolidated)]
    );
    let due = t0 + delay;
    assert_eq!(
        names(&returns(
            &live,
            &accounts,
            &bought,
            &mut since,
            (due, delay)
        )),
        [
            ("idle".to_owned(), GoesBack::Idle),
            ("drained".to_owned(), GoesBack::Consolidated),
            ("orphan".to_owned(), GoesBack::Orphaned),
        ]
    );
    // Each reason is counted as its own money decision.
    assert_eq!(GoesBack::Orphaned.decision(), ("retire", "orphaned"));
    // An orphan whose provisioner records its Machine (Cluster API) is left to it: its Machine
    // may be being replaced.
    let mut recorded = (*live[2]).clone();
    recorded.status.as_mut().unwrap().machine = "fleet/m1".into();
    let live = [Arc::new(recorded)];
    let mut since = HashMap::new();
    assert!(
        returns(&live, &accounts, &bought, &mut since, (due, delay))
            .give_back
            .is_empty()
    );
    let later = due + delay + delay;
    assert!(
        returns(&live, &accounts, &bought, &mut since, (later, delay))
            .give_back
            .is_empty()
    );
}

#[test]
fn the_later_of_two_requests_in_flight_for_the_same_tenants_is_a_duplicate_unless_they_outgrew_the_earlier()
 {
    // (name, created at, class threads, tenants, phase)
    let request = |name: &str, at_s: i64, threads: i64, tenants: &[&str], phase| {
        let mut r = box_request(name, phase);
        r.metadata.creation_timestamp = Some(Time(at(at_s)));
        r.spec.capacity = ResourceAmounts::new(threads, 64, 100);
        r.spec.tenants = tenants.iter().map(|t| (*t).to_owned()).collect();
        Arc::new(r)
    };
    use NodeRequestPhase::*;
    let waiters = [
        first("d/a", 1, 10, 1),
        first("d/b", 2, 10, 1),
        first("d/big", 3, 40, 1),
    ];
    let names = |live: &[Arc<NodeRequest>]| -> Vec<String> {
        duplicates(live, &waiters)
            .iter()
            .map(|r| r.name_any())
            .collect()
    };
    // Two controllers bought for a at once, of two classes: the later goes (by creation, then
    // by name at the same second).
    assert_eq!(
        names(&[
            request("large-1", 10, 64, &["d/a"], Pending),
            request("flaky-1", 11, 32, &["d/a"], Provisioning),
        ]),
        ["flaky-1"]
    );
    assert_eq!(
        names(&[
            request("b-same", 10, 32, &["d/a"], Pending),
            request("a-same", 10, 32, &["d/a"], Pending),
        ]),
        ["b-same"]
    );
    // Together a and b need 20 threads: the 16-thread earlier one cannot hold them, so the
    // later one is no duplicate (a tenant that grew is bought for again).
    assert!(
        names(&[
            request("small", 10, 16, &["d/a", "d/b"], Pending),
            request("bigger", 11, 32, &["d/b", "d/a"], Pending),
        ])
        .is_empty()
    );
    // Other tenants, a Ready earlier one (its Node counts as room elsewhere), a tenant no
    // longer waiting: none is a duplicate.
    assert!(
        names(&[
            request("one", 10, 64, &["d/a"], Pending),
            request("two", 11, 64, &["d/b"], Pending),
            request("ready", 9, 64, &["d/big"], Ready),
            request("again", 12, 64, &["d/big"], Pending),
            request("gone-1", 13, 64, &["d/gone"], Pending),
            request("gone-2", 14, 64, &["d/gone"], Pending),
        ])
        .is_empty()
    );
    // Three at once: the two later ones go, each against the first.
    assert_eq!(
        names(&[
            request("x", 10, 64, &["d/a"], Pending),
            request("y", 11, 64, &["d/a"], Pending),
            request("z", 12, 64, &["d/a"], Pending),
        ]),
        ["y", "z"]
    );
}

#[test]
fn a_tenant_that_fits_a_class_as_promised_but_not_as_delivered_is_told_so() {
    // b-big promises 64 threads and delivers 32 (its Delivers condition for its generation 1);
    // a-small promises and delivers 32.
    let class = |name: &str, threads: i64, delivered: Option<i64>| {
        let mut class = class_of(name, ResourceAmounts::new(threads, 256, 8000));
        class.metadata.generation = Some(1);
        class.status = delivered.map(|t| crate::api::NodeClassStatus {
            conditions: vec![crate::api::Condition {
                type_: crate::api::DELIVERS_CONDITION.into(),
                status: "False".into(),
                reason: "DeliversLess".into(),
                message: String::new(),
                last_transition_time: crate::api::Condition::UNREADABLE_TIME,
                observed_generation: Some(1),
            }],
            delivered: Some(ResourceAmounts::new(t, 256, 8000)),
        });
        Arc::new(class)
    };
    let classes = [class("a-small", 32, None), class("b-big", 64, Some(32))];
    // wide (40) fits b-big's promise only; huge (100) fits none; fine (8) fits both delivered.
    let demand = Demand::of(
        &[
            first("d/wide", 1, 40, 1),
            first("d/huge", 2, 100, 1),
            first("d/fine", 3, 8, 1),
        ],
        QueueMode::BestEffortFifo,
        Duration::ZERO,
        at(100),
    );
    let unplaceable: HashMap<String, String> = ["d/wide", "d/huge", "d/other"]
        .iter()
        .map(|t| {
            (
                (*t).to_owned(),
                "no node can be requested for it".to_owned(),
            )
        })
        .collect();
    let notes = with_short_classes(unplaceable, &classes, &demand, &Pool(None));
    assert_eq!(
        notes["d/wide"],
        "no node can be requested for it (NodeClass b-big promises 64 threads, 256 GB memory, \
         8000 GB storage but its Nodes deliver 32 threads, 256 GB memory, 8000 GB storage: none \
         is bought for it)"
    );
    assert_eq!(notes["d/huge"], "no node can be requested for it");
    assert_eq!(notes["d/other"], "no node can be requested for it");
    assert_eq!(notes.len(), 3);
    // Outside the pool, b-big says nothing.
    let pool = Pool(Some(HashSet::from(["a-small".to_owned()])));
    let unplaceable = HashMap::from([("d/wide".to_owned(), "x".to_owned())]);
    assert_eq!(
        with_short_classes(unplaceable, &classes, &demand, &pool)["d/wide"],
        "x"
    );
}

#[test]
fn make_room_takes_the_first_placements_it_serves_out_of_the_purchase_and_never_a_move() {
    let waiters = [
        first("d/held", 1, 8, 1),
        first("d/fits", 2, 8, 1),
        first("d/buy", 3, 8, 1),
        moving("d/move", 4, 8),
    ];
    let keys = |w: Vec<Waiter>| w.into_iter().map(|w| w.key).collect::<Vec<_>>();
    let made = make_room::Made {
        held: HashSet::from(["d/held".to_owned(), "d/move".to_owned()]),
        fits: HashSet::from(["d/fits".to_owned()]),
        ..make_room::Made::default()
    };
    // held and fits are served by room: only buy is bought for; a move always is.
    assert_eq!(keys(still_waiting(&waiters, &made)), ["d/buy", "d/move"]);
    // A move to make room in flight: no first placement is bought for this look.
    let moving_now = make_room::Made {
        moving: true,
        ..make_room::Made::default()
    };
    assert_eq!(keys(still_waiting(&waiters, &moving_now)), ["d/move"]);
    // Nothing made: everyone waits.
    assert_eq!(
        keys(still_waiting(&waiters, &make_room::Made::default())),
        ["d/held", "d/fits", "d/buy", "d/move"]
    );
}
