//! `/metrics` read back through a small parser of the Prometheus text format (0.0.4): every family
//! with its type and help, every sample with its labels and value, after known calls.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeMap;
use std::time::Duration;

use http_body_util::BodyExt;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;

use super::*;
use crate::api::{
    AllocationEntry, Node, NodeClass, NodeRequest, NodeSpec, NodeState, NodeStatus,
    ResourceAmounts, Tenant, TenantMode, TenantPhase, TenantSpec, TenantStatus,
};

/// What a scrape said, parsed.
#[derive(Debug, Default)]
struct Exposition {
    /// family -> (type, help), in the order declared.
    families: Vec<(String, String, String)>,
    /// name{labels} -> value.
    samples: BTreeMap<(String, Vec<(String, String)>), f64>,
}

impl Exposition {
    /// Parses the text format; panics on anything it does not allow.
    fn parse(text: &str) -> Exposition {
        let mut parsed = Exposition::default();
        let mut help: Option<(String, String)> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, text) = rest.split_once(' ').unwrap();
                help = Some((name.to_owned(), unescape(text)));
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                let (help_name, help) = help.take().expect("# TYPE without # HELP before it");
                assert_eq!(help_name, name, "# HELP and # TYPE name one family");
                assert!(
                    parsed.families.iter().all(|(n, _, _)| n != name),
                    "{name} declared twice"
                );
                parsed
                    .families
                    .push((name.to_owned(), kind.to_owned(), help));
            } else if line.is_empty() || line.starts_with('#') {
                panic!("an unexpected line: {line:?}");
            } else {
                let (name, labels, value) = sample(line);
                let (family, kind, _) = parsed
                    .families
                    .last()
                    .unwrap_or_else(|| panic!("a sample before any # TYPE: {line}"));
                let belongs = match kind.as_str() {
                    "histogram" => ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|suffix| name.strip_suffix(suffix) == Some(family)),
                    _ => &name == family,
                };
                assert!(belongs, "{line} follows the # TYPE of {family}");
                let key = (name, labels);
                assert!(
                    parsed.samples.insert(key.clone(), value).is_none(),
                    "{key:?} twice"
                );
            }
        }
        parsed
    }

    /// The value of the sample with exactly these labels.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut labels: Vec<_> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        labels.sort();
        self.samples.get(&(name.to_owned(), labels)).copied()
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in {self:#?}"))
    }

    /// The samples of `name`, with their labels.
    fn all(&self, name: &str) -> Vec<(&Vec<(String, String)>, f64)> {
        self.samples
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|((_, labels), value)| (labels, *value))
            .collect()
    }
}

/// `name{a="x",b="y"} value`: the name, the labels (sorted), the value.
fn sample(line: &str) -> (String, Vec<(String, String)>, f64) {
    let name_end = line.find(['{', ' ']).unwrap();
    let name = &line[..name_end];
    assert!(
        name.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
        "{name}"
    );
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = rest.split_once("=\"").unwrap();
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next().unwrap() {
                    (_, '\\') => match chars.next().unwrap().1 {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        other => panic!("a bad escape \\{other} in {line}"),
                    },
                    (i, '"') => break i,
                    (_, c) => value.push(c),
                }
            };
            labels.push((key.to_owned(), value));
            rest = &after[end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
    let value = rest.strip_prefix(' ').unwrap();
    assert!(
        !value.contains(' '),
        "a timestamp or junk after the value: {line}"
    );
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        number => number
            .parse()
            .unwrap_or_else(|_| panic!("not a number: {line}")),
    };
    labels.sort();
    (name.to_owned(), labels, value)
}

fn unescape(help: &str) -> String {
    help.replace("\\n", "\n").replace("\\\\", "\\")
}

async fn scrape(state: &State) -> (http::HeaderMap, Exposition) {
    let response = respond_with("/metrics", state);
    assert_eq!(response.status(), StatusCode::OK);
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(body.to_vec()).unwrap();
    (headers, Exposition::parse(&text))
}

fn node(name: &str, capacity: [i64; 3], held: &[[i64; 3]]) -> Node {
    let [t, m, s] = capacity;
    let mut node = Node::new(
        name,
        NodeSpec {
            capacity: ResourceAmounts::new(t, m, s),
            state: NodeState::Online,
            overcommit: None,
        },
    );
    node.status = Some(NodeStatus {
        allocations: held
            .iter()
            .enumerate()
            .map(|(i, [t, m, s])| AllocationEntry {
                tenant: format!("default/t{i}").into(),
                uid: format!("uid-{name}-{i}").into(),
                resources: ResourceAmounts::new(*t, *m, *s),
                replicas: None,
            })
            .collect(),
        ..NodeStatus::default()
    });
    node
}

fn tenant(name: &str, phase: Option<TenantPhase>) -> Tenant {
    let mut tenant = Tenant::new(
        name,
        TenantSpec {
            resources: ResourceAmounts::new(1, 1, 1),
            mode: TenantMode::Standalone,
            replicas: None,
            suspend: false,
            node_selector: Default::default(),
            spread: Default::default(),
        },
    );
    tenant.metadata.namespace = Some("default".to_owned());
    tenant.status = phase.map(|phase| TenantStatus {
        phase,
        ..TenantStatus::default()
    });
    tenant
}

/// Every family `/metrics` shows, with its type and help: the names Prometheus rules and the
/// docs use.
const FAMILIES: [(&str, &str, &str); 34] = [
    (
        "tenant_placer_reconciles_total",
        "counter",
        "Reconciles by kind and result (ok, or the error label).",
    ),
    (
        "tenant_placer_reconcile_duration_seconds",
        "histogram",
        "Time spent in one reconcile.",
    ),
    (
        "tenant_placer_placement_conflicts_total",
        "counter",
        "Node status writes refused with 409 Conflict and retried from fresh data.",
    ),
    (
        "tenant_placer_placement_retries_exhausted_total",
        "counter",
        "Placements that used up their conflict retries and were requeued.",
    ),
    (
        "tenant_placer_orphaned_entries_released_total",
        "counter",
        "Entries released because their tenant was gone without the controller seeing it go.",
    ),
    (
        "tenant_placer_outside_pool_total",
        "counter",
        "Entries on this pool's nodes of tenants outside the tenant selector, and tenants whose labels left it, found and left alone (another pool's business, or a misconfiguration).",
    ),
    (
        "tenant_placer_migrations_total",
        "counter",
        "Moves off draining nodes that ended: done (the source released) or cancelled (the target released).",
    ),
    (
        "tenant_placer_node_requests_failed_total",
        "counter",
        "NodeRequests the provisioner reported Failed (their class rests, its tenants are planned again).",
    ),
    (
        "tenant_placer_nodes_handed_back_total",
        "counter",
        "Machines handed back (their NodeRequest deleted) after holding nothing for --empty-node-seconds.",
    ),
    (
        "tenant_placer_node_request_errors_total",
        "counter",
        "NodeRequest writes the API refused, by action (create, retire a Failed one, withdraw one whose class is gone, hand_back); each is retried at the next look and never stops the others.",
    ),
    (
        "tenant_placer_consolidation_actions_total",
        "counter",
        "What consolidation (--consolidation WhenUnderutilized) did, by action: drain (a node its tenants can leave), cancel (a drain of a node that became do-not-disrupt), hand_back (a drained bought node's request deleted).",
    ),
    (
        "tenant_placer_disruption_blocked_total",
        "counter",
        "Nodes consolidation could free and did not drain, and waiting tenants room could be made for by moves and was not, by reason (DoNotDisrupt, TenantsWaiting, OutsideWindow, BudgetExhausted), once per node (or waiter) and reason.",
    ),
    (
        "tenant_placer_make_room_moves_total",
        "counter",
        "Moves asked of smaller tenants to make room for a waiting tenant that fits nowhere (--make-room-moves), before any machine is bought for it.",
    ),
    (
        "tenant_placer_registration_errors_total",
        "counter",
        "Writes and reads of registered Nodes (--register-nodes) the API refused, by action (create, update, delete, read); each is tried again and never stops the others.",
    ),
    (
        "tenant_placer_registration_problems_total",
        "counter",
        "Core Nodes the registration reported and left alone, by problem (clash: a placement Node of that name it did not register; unreadable_allocatable), once per change.",
    ),
    (
        "tenant_placer_placements_total",
        "counter",
        "Tenants placed: given a reservation on a node while they held none (moves are counted in tenant_placer_migrations_total).",
    ),
    (
        "tenant_placer_node_status_writes_total",
        "counter",
        "Node status writes by result (ok, conflict: 409 and decided again, error).",
    ),
    (
        "tenant_placer_reservation_events_total",
        "counter",
        "Reservations a Node's status no longer held, by event: lost (the tenant left Active) or restored (written back).",
    ),
    (
        "tenant_placer_money_decisions_total",
        "counter",
        "The capacity tick's decisions that spend or save money, by action (buy, hand_back, retire, withdraw, keep) and reason.",
    ),
    (
        "tenant_placer_machines_idle",
        "gauge",
        "Machines bought that hold nothing and no waiting tenant could use (handed back after the delay), by NodeClass.",
    ),
    (
        "tenant_placer_undecodable_objects_total",
        "counter",
        "Object versions the controller could not decode and skipped (see the error log).",
    ),
    (
        "tenant_placer_pending_oldest_seconds",
        "gauge",
        "How long the tenant longest in PendingCapacity has waited (since its Placed condition turned False, else since it was created), 0 when none waits.",
    ),
    (
        "tenant_placer_node_request_oldest_in_flight_seconds",
        "gauge",
        "How long the oldest NodeRequest still Pending or Provisioning has been asked for, 0 when none is.",
    ),
    (
        "tenant_placer_registered_nodes",
        "gauge",
        "Placement Nodes registered from core Nodes (--register-nodes), whether or not this controller's pool places on them.",
    ),
    ("tenant_placer_tenants", "gauge", "Tenants by phase."),
    (
        "tenant_placer_node_requests",
        "gauge",
        "NodeRequests by phase.",
    ),
    (
        "tenant_placer_node_requests_capacity",
        "gauge",
        "Capacity asked for in NodeRequests not delivered yet (Pending or Provisioning), per dimension.",
    ),
    (
        "tenant_placer_node_requests_monthly_cost",
        "gauge",
        "What the machines asked for (not Failed) cost a month, by their NodeClass's monthlyCost.",
    ),
    (
        "tenant_placer_pending_tenants",
        "gauge",
        "Tenants waiting for room (PendingCapacity or Resizing).",
    ),
    (
        "tenant_placer_migrations_in_flight",
        "gauge",
        "Tenants reserved on two nodes while they move off a draining node.",
    ),
    (
        "tenant_placer_migrations_blocked",
        "gauge",
        "Tenants on a draining node that no other node can take now (MigrationBlocked).",
    ),
    (
        "tenant_placer_node_capacity",
        "gauge",
        "Node capacity per dimension.",
    ),
    (
        "tenant_placer_node_allocated",
        "gauge",
        "Reserved per node and dimension, summed from its allocations.",
    ),
    (
        "tenant_placer_leader",
        "gauge",
        "1 while this replica leads (and reconciles), else 0.",
    ),
];

#[tokio::test]
async fn metrics_after_known_calls_show_every_family_with_its_labels_and_values() {
    let state = State::default();
    let metrics = state.metrics();
    metrics.reconciled("tenant", "ok", Duration::from_millis(3));
    metrics.reconciled("tenant", "ok", Duration::from_millis(30));
    metrics.reconciled("node", "conflict_retries_exhausted", Duration::from_secs(2));
    metrics.conflict();
    metrics.conflict();
    metrics.retries_exhausted();
    metrics.orphan_released();
    metrics.undecodable("Node");
    metrics.undecodable("NodeClass");
    metrics.undecodable("NodeRequest");
    metrics.undecodable("NodeRequest");
    metrics.migration_ended(true);
    metrics.migration_ended(true);
    metrics.migration_ended(false);
    metrics.node_request_failed();
    metrics.node_handed_back();
    metrics.node_handed_back();
    metrics.node_request_error("create");
    metrics.consolidation_action("drain");
    metrics.consolidation_action("drain");
    metrics.consolidation_action("hand_back");
    metrics.disruption_blocked("BudgetExhausted");
    metrics.make_room_moved(2);
    metrics.register_error("update");
    metrics.register_problem("clash");
    metrics.placed();
    metrics.node_status_written("ok");
    metrics.node_status_written("ok");
    metrics.node_status_written("conflict");
    metrics.reservation_event("lost");
    metrics.money_decision("hand_back", "idle");
    metrics.set_machines_idle([("m16", 2)]);
    let (nodes, mut node_feed) = reflector::store::<Node>();
    let tenants = crate::controller::TenantCache::default();
    node_feed.apply_watcher_event(&Event::Apply(node("n1", [64, 256, 8000], &[[2, 4, 20]])));
    node_feed.apply_watcher_event(&Event::Apply(node("n2", [32, 128, 4000], &[])));
    for (name, phase) in [
        ("new", None),
        ("acme", Some(TenantPhase::Active)),
        ("big", Some(TenantPhase::PendingCapacity)),
        ("grow", Some(TenantPhase::Resizing)),
        ("nap", Some(TenantPhase::Suspended)),
    ] {
        tenants.insert(tenant(name, phase));
    }
    state.handles().caches.set(nodes, tenants);
    // A class at 299 a month; one request Provisioning, one Ready, one Failed.
    let (classes, mut class_feed) = reflector::store::<NodeClass>();
    let (requests, mut request_feed) = reflector::store::<NodeRequest>();
    let class: NodeClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "placement.tenant-placer.dev/v1alpha1", "kind": "NodeClass",
        "metadata": {"name": "box"},
        "spec": {"capacity": {"threads": 64, "memoryGb": 256, "storageGb": 8000},
                 "provider": "lab", "monthlyCost": 299}}))
    .unwrap();
    class_feed.apply_watcher_event(&Event::Apply(class));
    for (name, phase) in [("r1", "Provisioning"), ("r2", "Ready"), ("r3", "Failed")] {
        let request: NodeRequest = serde_json::from_value(serde_json::json!({
            "apiVersion": "placement.tenant-placer.dev/v1alpha1", "kind": "NodeRequest",
            "metadata": {"name": name},
            "spec": {"nodeClass": "box", "capacity": {"threads": 64, "memoryGb": 256, "storageGb": 8000},
                     "tenants": ["default/big"]},
            "status": {"phase": phase}}))
        .unwrap();
        request_feed.apply_watcher_event(&Event::Apply(request));
    }
    state.handles().caches.set_purchases(classes, requests);
    // The registration's store: one registered node, one made by hand.
    let (registered, mut registered_feed) = reflector::store::<Node>();
    let mut made = node("r1", [8, 8, 8], &[]);
    kube::ResourceExt::labels_mut(&mut made)
        .insert(crate::api::REGISTERED_LABEL.into(), "true".into());
    registered_feed.apply_watcher_event(&Event::Apply(made));
    registered_feed.apply_watcher_event(&Event::Apply(node("hand", [8, 8, 8], &[])));
    state.handles().caches.set_registered(registered);

    let (headers, scraped) = scrape(&state).await;
    assert_eq!(
        headers[http::header::CONTENT_TYPE],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let declared: Vec<_> = scraped
        .families
        .iter()
        .map(|(n, t, h)| (n.as_str(), t.as_str(), h.as_str()))
        .collect();
    let mut expected = FAMILIES.to_vec();
    let mut found = declared;
    expected.sort();
    found.sort();
    assert_eq!(found, expected);

    // Counters: what was counted, labelled as it was counted.
    let reconciles = "tenant_placer_reconciles_total";
    assert_eq!(scraped.all(reconciles).len(), 2);
    assert_eq!(
        scraped.get(reconciles, &[("kind", "tenant"), ("result", "ok")]),
        2.0
    );
    assert_eq!(
        scraped.get(
            reconciles,
            &[("kind", "node"), ("result", "conflict_retries_exhausted")]
        ),
        1.0
    );
    assert_eq!(
        scraped.get("tenant_placer_placement_conflicts_total", &[]),
        2.0
    );
    assert_eq!(
        scraped.get("tenant_placer_placement_retries_exhausted_total", &[]),
        1.0
    );
    assert_eq!(
        scraped.get("tenant_placer_orphaned_entries_released_total", &[]),
        1.0
    );
    // Every kind under its own label, the one never counted at 0.
    let undecodable = "tenant_placer_undecodable_objects_total";
    assert_eq!(scraped.all(undecodable).len(), 4);
    assert_eq!(scraped.get(undecodable, &[("kind", "node")]), 1.0);
    assert_eq!(scraped.get(undecodable, &[("kind", "nodeclass")]), 1.0);
    assert_eq!(scraped.get(undecodable, &[("kind", "noderequest")]), 2.0);
    assert_eq!(scraped.get(undecodable, &[("kind", "tenant")]), 0.0);

    // The histogram, cumulative: 3 ms falls in the 0.005 bucket and above, 30 ms from 0.05 on.
    let bucket = "tenant_placer_reconcile_duration_seconds_bucket";
    for (le, n) in [
        ("0.001", 0.0),
        ("0.0025", 0.0),
        ("0.005", 1.0),
        ("0.01", 1.0),
        ("0.025", 1.0),
        ("0.05", 2.0),
        ("0.1", 2.0),
        ("0.25", 2.0),
        ("1", 2.0),
        ("5", 2.0),
        ("+Inf", 2.0),
    ] {
        assert_eq!(
            scraped.get(bucket, &[("kind", "tenant"), ("le", le)]),
            n,
            "le {le}"
        );
    }
    // 2 s: only in 5 and +Inf.
    assert_eq!(scraped.get(bucket, &[("kind", "node"), ("le", "1")]), 0.0);
    assert_eq!(scraped.get(bucket, &[("kind", "node"), ("le", "5")]), 1.0);
    assert_eq!(scraped.all(bucket).len(), 2 * 11);
    let count = "tenant_placer_reconcile_duration_seconds_count";
    assert_eq!(scraped.get(count, &[("kind", "tenant")]), 2.0);
    let sum = scraped.get(
        "tenant_placer_reconcile_duration_seconds_sum",
        &[("kind", "tenant")],
    );
    // 0.003 + 0.030 = 0.033.
    assert!((sum - 0.033).abs() < 1e-9, "{sum}");

    // Gauges, from the caches: every phase shown, 0 where none is in it; a tenant without a
    // status is Pending.
    let phases = "tenant_placer_tenants";
    assert_eq!(scraped.all(phases).len(), TenantPhase::ALL.len());
    for (phase, n) in [
        ("Pending", 1.0),
        ("Active", 1.0),
        ("PendingCapacity", 1.0),
        ("Resizing", 1.0),
        ("Suspended", 1.0),
        ("Terminating", 0.0),
        ("Migrating", 0.0),
    ] {
        assert_eq!(scraped.get(phases, &[("phase", phase)]), n, "{phase}");
    }
    // PendingCapacity + Resizing = 2.
    assert_eq!(scraped.get("tenant_placer_pending_tenants", &[]), 2.0);
    // Requests: one in each phase but Pending; only the Provisioning one is capacity coming;
    // the Ready and Provisioning ones cost 2 x 299.
    for (phase, n) in [
        ("Pending", 0.0),
        ("Provisioning", 1.0),
        ("Ready", 1.0),
        ("Failed", 1.0),
    ] {
        assert_eq!(
            scraped.get("tenant_placer_node_requests", &[("phase", phase)]),
            n,
            "{phase}"
        );
    }
    let coming = "tenant_placer_node_requests_capacity";
    assert_eq!(scraped.get(coming, &[("dimension", "threads")]), 64.0);
    assert_eq!(scraped.get(coming, &[("dimension", "storageGb")]), 8000.0);
    assert_eq!(
        scraped.get("tenant_placer_node_requests_monthly_cost", &[]),
        598.0
    );
    assert_eq!(
        scraped.get("tenant_placer_node_requests_failed_total", &[]),
        1.0
    );
    assert_eq!(
        scraped.get("tenant_placer_nodes_handed_back_total", &[]),
        2.0
    );
    assert_eq!(scraped.get("tenant_placer_registered_nodes", &[]), 1.0);
    let errors = "tenant_placer_registration_errors_total";
    assert_eq!(scraped.all(errors).len(), 4);
    assert_eq!(scraped.get(errors, &[("action", "update")]), 1.0);
    assert_eq!(scraped.get(errors, &[("action", "create")]), 0.0);
    let problems = "tenant_placer_registration_problems_total";
    assert_eq!(scraped.get(problems, &[("problem", "clash")]), 1.0);
    assert_eq!(
        scraped.get(problems, &[("problem", "unreadable_allocatable")]),
        0.0
    );
    let actions = "tenant_placer_consolidation_actions_total";
    assert_eq!(scraped.all(actions).len(), 3);
    assert_eq!(scraped.get(actions, &[("action", "drain")]), 2.0);
    assert_eq!(scraped.get(actions, &[("action", "cancel")]), 0.0);
    assert_eq!(scraped.get(actions, &[("action", "hand_back")]), 1.0);
    let blocked = "tenant_placer_disruption_blocked_total";
    assert_eq!(scraped.all(blocked).len(), 4);
    assert_eq!(scraped.get(blocked, &[("reason", "BudgetExhausted")]), 1.0);
    assert_eq!(scraped.get(blocked, &[("reason", "DoNotDisrupt")]), 0.0);
    assert_eq!(scraped.get("tenant_placer_make_room_moves_total", &[]), 2.0);
    let errors = "tenant_placer_node_request_errors_total";
    assert_eq!(scraped.all(errors).len(), 5);
    assert_eq!(scraped.get(errors, &[("action", "create")]), 1.0);
    assert_eq!(scraped.get(errors, &[("action", "hand_back")]), 0.0);
    // Two moves done, one cancelled; none in flight or blocked among these tenants.
    let moves = "tenant_placer_migrations_total";
    assert_eq!(scraped.get(moves, &[("result", "done")]), 2.0);
    assert_eq!(scraped.get(moves, &[("result", "cancelled")]), 1.0);
    assert_eq!(scraped.get("tenant_placer_migrations_in_flight", &[]), 0.0);
    assert_eq!(scraped.get("tenant_placer_migrations_blocked", &[]), 0.0);
    for (name, node, dimension, n) in [
        ("tenant_placer_node_capacity", "n1", "threads", 64.0),
        ("tenant_placer_node_capacity", "n1", "memoryGb", 256.0),
        ("tenant_placer_node_capacity", "n1", "storageGb", 8000.0),
        ("tenant_placer_node_capacity", "n2", "threads", 32.0),
        ("tenant_placer_node_allocated", "n1", "threads", 2.0),
        ("tenant_placer_node_allocated", "n1", "memoryGb", 4.0),
        ("tenant_placer_node_allocated", "n1", "storageGb", 20.0),
        ("tenant_placer_node_allocated", "n2", "threads", 0.0),
    ] {
        assert_eq!(
            scraped.get(name, &[("node", node), ("dimension", dimension)]),
            n,
            "{name} {node} {dimension}"
        );
    }
    // 2 nodes x 3 dimensions.
    assert_eq!(scraped.all("tenant_placer_node_capacity").len(), 6);
    assert_eq!(scraped.all("tenant_placer_node_allocated").len(), 6);
    // Starting: not the leader.
    assert_eq!(scraped.get("tenant_placer_leader", &[]), 0.0);

    // Read at scrape time: a change to the cache shows at the next scrape.
    node_feed.apply_watcher_event(&Event::Apply(node(
        "n1",
        [64, 256, 8000],
        &[[2, 4, 20], [8, 16, 100]],
    )));
    let (_, again) = scrape(&state).await;
    // 2 + 8 = 10 threads.
    assert_eq!(
        again.get(
            "tenant_placer_node_allocated",
            &[("node", "n1"), ("dimension", "threads")]
        ),
        10.0
    );
}

#[tokio::test]
async fn before_the_controller_sets_its_caches_only_the_counters_and_the_leader_show() {
    let (_, scraped) = scrape(&State::default()).await;
    let names: Vec<_> = scraped
        .families
        .iter()
        .map(|(n, _, _)| n.as_str())
        .collect();
    // Families without samples yet (reconciles, durations) are left out by the encoder.
    assert_eq!(
        names,
        [
            "tenant_placer_placement_conflicts_total",
            "tenant_placer_placement_retries_exhausted_total",
            "tenant_placer_orphaned_entries_released_total",
            "tenant_placer_outside_pool_total",
            "tenant_placer_migrations_total",
            "tenant_placer_node_requests_failed_total",
            "tenant_placer_nodes_handed_back_total",
            "tenant_placer_node_request_errors_total",
            "tenant_placer_consolidation_actions_total",
            "tenant_placer_disruption_blocked_total",
            "tenant_placer_make_room_moves_total",
            "tenant_placer_registration_errors_total",
            "tenant_placer_registration_problems_total",
            "tenant_placer_placements_total",
            "tenant_placer_node_status_writes_total",
            "tenant_placer_reservation_events_total",
            "tenant_placer_money_decisions_total",
            "tenant_placer_undecodable_objects_total",
            "tenant_placer_leader",
        ]
    );
    assert_eq!(
        scraped.get("tenant_placer_placement_conflicts_total", &[]),
        0.0
    );
    for kind in ["tenant", "node", "nodeclass", "noderequest"] {
        assert_eq!(
            scraped.get("tenant_placer_undecodable_objects_total", &[("kind", kind)]),
            0.0,
            "{kind}"
        );
    }
    // Each action a NodeRequest write can fail in shows from the start.
    for action in ["create", "retire", "withdraw", "hand_back", "use"] {
        assert_eq!(
            scraped.get(
                "tenant_placer_node_request_errors_total",
                &[("action", action)]
            ),
            0.0
        );
    }
    assert_eq!(scraped.get("tenant_placer_leader", &[]), 0.0);
}

#[tokio::test]
async fn label_values_are_escaped() {
    let state = State::default();
    let (nodes, mut node_feed) = reflector::store::<Node>();
    node_feed.apply_watcher_event(&Event::Apply(node("a\"b\\c\nd", [1, 1, 1], &[])));
    state
        .handles()
        .caches
        .set(nodes, crate::controller::TenantCache::default());
    let text = state.encode_metrics().unwrap();
    assert!(
        text.contains(r#"tenant_placer_node_capacity{node="a\"b\\c\nd",dimension="threads"} 1"#),
        "{text}"
    );
    let (_, scraped) = scrape(&state).await;
    assert_eq!(
        scraped.get(
            "tenant_placer_node_capacity",
            &[("node", "a\"b\\c\nd"), ("dimension", "threads")]
        ),
        1.0
    );
}

#[test]
fn readyz_is_503_until_ready_healthz_is_200_and_unknown_paths_are_404() {
    let state = State::default();
    assert_eq!(respond_with("/healthz", &state).status(), StatusCode::OK);
    let readyz = respond_with("/readyz", &state);
    assert_eq!(readyz.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(readyz.headers()[http::header::CONTENT_TYPE], "text/plain");
    assert_eq!(
        respond_with("/nope", &state).status(),
        StatusCode::NOT_FOUND
    );
}

/// One GET of `path` over HTTP/1.1 naming `host`: the status line and the body.
async fn get_naming(addr: std::net::SocketAddr, host: &str, path: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

#[tokio::test]
async fn the_page_and_metrics_answer_only_hosts_that_name_this_server() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_on(listener, State::default()));
    for path in ["/metrics", "/", "/api/fleet", "/healthz"] {
        let (status, body) = get_naming(addr, "attacker.example", path).await;
        assert_eq!(status, "HTTP/1.1 403 Forbidden", "{path}");
        assert_eq!(
            body,
            "Host \"attacker.example\" is not this server: only localhost, loopback addresses and \
             127.0.0.1 are answered (DNS rebinding guard)\n"
        );
    }
    for host in [addr.to_string(), format!("localhost:{}", addr.port())] {
        let (status, _) = get_naming(addr, &host, "/metrics").await;
        assert_eq!(status, "HTTP/1.1 200 OK", "{host}");
    }
    server.abort();
}
