//! The chart's RBAC rules against the API calls the controller really makes: every call is
//! allowed, every granted verb is used, and nothing is a wildcard.

use std::collections::BTreeSet;
use std::time::Duration;

use inmem_apiserver::{ApiServer, Fault, Verb};
use serde::Deserialize;
use serde_json::json;
use tenant_placer::api::GROUP;
use tenant_placer::leader::LeaseConfig;

use crate::*;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    api_groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
}

fn template(name: &str) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/tenant-placer/templates/"
    )
    .to_owned()
        + name;
    std::fs::read_to_string(&path).unwrap()
}

/// The `rules:` of a chart template that are always granted (they are plain YAML; only
/// metadata and optional rules are templated).
fn rules_of(name: &str) -> Vec<Rule> {
    let text = template(name);
    let rules = text
        .split("\nrules:\n")
        .nth(1)
        .unwrap()
        .split("{{-")
        .next()
        .unwrap();
    serde_saphyr::from_str(rules).unwrap()
}

/// The `rules:` a chart switch adds (the block after `{{- if <switch> }}`).
fn switched_rules_of(name: &str, switch: &str) -> Vec<Rule> {
    let text = template(name);
    let block = text
        .split(&format!("{{{{- if {switch} }}}}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("{name} has no rules under the switch {switch:?}"))
        .split("{{-")
        .next()
        .unwrap();
    serde_saphyr::from_str(block).unwrap()
}

/// The switch of the rules the registration and the cluster-api provisioner share (core Nodes
/// read; placement Nodes created and deleted).
const NODES_SWITCH: &str =
    "or .Values.controller.registerNodes .Values.provisioner.clusterAPI.enabled";

/// No rule names a wildcard or secrets.
fn assert_no_wildcards(rules: &[Rule]) {
    for rule in rules {
        for field in [&rule.api_groups, &rule.resources, &rule.verbs] {
            assert!(
                !field.iter().any(|v| v.contains('*')),
                "wildcard in {rule:?}"
            );
        }
        assert!(
            !rule.resources.iter().any(|r| r.starts_with("secrets")),
            "{rule:?}"
        );
    }
}

/// (group, resource, verb) for each rule's every combination.
fn granted(rules: &[Rule]) -> BTreeSet<(String, String, String)> {
    let mut granted = BTreeSet::new();
    for rule in rules {
        for group in &rule.api_groups {
            for resource in &rule.resources {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    granted
}

/// (apiGroup, resource[/subresource], verb) for each request the API saw.
fn calls(api: &ApiServer) -> BTreeSet<(String, String, String)> {
    api.stats()
        .requests
        .keys()
        .map(|key| {
            let known = [
                "placement.tenant-placer.dev",
                "events.k8s.io",
                "coordination.k8s.io",
                "cluster.x-k8s.io",
                "",
            ];
            assert!(
                known.contains(&key.group.as_str()),
                "the controller called an unexpected group: {key:?}"
            );
            let group = key.group.as_str();
            let resource = match &key.subresource {
                Some(sub) => format!("{}/{sub}", key.resource),
                None => key.resource.clone(),
            };
            let verb = match key.verb {
                Verb::Get => "get",
                Verb::List => "list",
                Verb::Watch => "watch",
                Verb::Create => "create",
                Verb::Update => "update",
                Verb::Patch => "patch",
                Verb::Delete => "delete",
                Verb::DeleteCollection => "deletecollection",
            };
            (group.to_owned(), resource, verb.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_rbac_allows_exactly_the_calls_the_controller_makes_and_no_wildcards() {
    let lease = LeaseConfig {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_secs(1),
        retry_period: Duration::from_millis(100),
        ..LeaseConfig::new("tenant-placer", "default", "rbac-test")
    };
    let settings = Settings {
        leader_election: Some(lease),
        request_after: Some(Duration::ZERO),
        request_check: Duration::from_millis(20),
        ..settings()
    };
    let h = Harness::start_on(ApiServer::new(), &seed_nodes(), settings).await;
    // Every path: a conflict (re-read), the seed scenario (finalizers, status, events), a
    // repeated event (patched as a series), and an orphan (a direct read of its tenant).
    h.fleet
        .api
        .inject(Fault::on(Verb::Patch).resource("nodes").conflict());
    crate::seed::seed_scenario(&h).await;
    for suspend in [true, false, true, false] {
        h.apply(&[tenant("waits").resources(1000, 1, 1).manifest()]);
        h.apply(&[tenant_spec("waits", json!({"suspend": suspend}))]);
        h.settle().await;
    }
    // A machine asked for the tenant that waits (create), reported Failed by a provisioner
    // (played here by hand), and deleted by the controller (delete).
    let requests = || h.fleet.api.list(GROUP, "noderequests");
    // A class of 1024 threads applied, and the name of the request the controller then makes.
    let bought = |class: &'static str| {
        h.apply(&[
            json!({"apiVersion": VERSION, "kind": "NodeClass", "metadata": {"name": class},
                         "spec": {"capacity": {"threads": 1024, "memoryGb": 64, "storageGb": 100},
                                  "provider": "lab"}}),
        ]);
        async move {
            for _ in 0..100 {
                if let Some(request) = requests().first() {
                    return request["metadata"]["name"].as_str().unwrap().to_owned();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("no request of {class} for the tenant that waits");
        }
    };
    let name = bought("box").await;
    h.apply(&[
        json!({"apiVersion": VERSION, "kind": "NodeRequest", "metadata": {"name": name},
                     "status": {"phase": "Failed", "message": "out of stock"}}),
    ]);
    for _ in 0..100 {
        if requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(requests().is_empty(), "the failed request is deleted");
    // While box rests, a `short` is bought; its Node (played here by hand) reports half what the
    // class promises: the controller writes what the class delivers (nodeclasses/status).
    let name = bought("short").await;
    h.apply(&[node(&name)
        .capacity(512, 64, 100)
        .label("placement.tenant-placer.dev/node-request", &name)
        .manifest()]);
    h.apply(&[
        json!({"apiVersion": VERSION, "kind": "NodeRequest", "metadata": {"name": name},
                     "status": {"phase": "Ready", "nodeName": name}}),
    ]);
    let learned = || {
        h.fleet
            .api
            .get(GROUP, "nodeclasses", None, "short")
            .is_some_and(|c| c["status"]["delivered"]["threads"] == 512)
    };
    for _ in 0..100 {
        if learned() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(learned(), "what short delivers is written");
    let ghost = entry("ghost", (1, 1, 1));
    h.apply(&[json!({"apiVersion": VERSION, "kind": "Node", "metadata": {"name": "node-eu-2"}, "status": {"allocations": [ghost]}})]);
    h.settle().await;

    let rules: Vec<Rule> = rules_of("clusterrole.yaml")
        .into_iter()
        .chain(rules_of("role.yaml"))
        .collect();
    assert_no_wildcards(&rules);
    let granted = granted(&rules);
    let made = calls(&h.fleet.api);
    let missing: Vec<_> = made.difference(&granted).collect();
    assert!(
        missing.is_empty(),
        "calls the chart does not allow: {missing:?}"
    );
    let unused: Vec<_> = granted.difference(&made).collect();
    assert!(
        unused.is_empty(),
        "verbs the chart grants but the controller never used: {unused:?}"
    );
    h.assert_invariants();
}

/// With `controller.registerNodes` set, the chart grants the registration's calls and only then:
/// core Nodes read (get, list, watch) and placement Nodes created and deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_rbac_for_registered_nodes_allows_exactly_the_registrations_calls() {
    use tenant_placer::testing::core_node;
    let settings = Settings {
        register_nodes: Some("pool=metal".parse().unwrap()),
        register_resync: Duration::from_millis(100),
        request_after: None,
        ..settings()
    };
    let h = Harness::start_on(ApiServer::new(), &[], settings).await;
    let reads = h.handles.metrics.clone();
    // A node joins (create), a tenant lands on it, the node leaves (a direct read confirms it,
    // then delete).
    h.apply(&[core_node("m1").label("pool", "metal").manifest()]);
    h.until("m1 registered", || {
        h.fleet.api.get(GROUP, "nodes", None, "m1").is_some()
    })
    .await;
    h.apply(&[tenant("acme").manifest()]);
    h.settle().await;
    h.fleet.api.delete("", "nodes", None, "m1").unwrap();
    h.until("m1's placement Node deleted", || {
        h.fleet
            .api
            .get(GROUP, "nodes", None, "m1")
            .is_none_or(|n| n["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    h.settle().await;
    assert_eq!(reads.register_errors("read"), 0);

    let always = granted(&rules_of("clusterrole.yaml"));
    let switched = switched_rules_of("clusterrole.yaml", NODES_SWITCH);
    assert_no_wildcards(&switched);
    let registration = granted(&switched);
    let made = calls(&h.fleet.api);
    let allowed: BTreeSet<_> = always.union(&registration).cloned().collect();
    let missing: Vec<_> = made.difference(&allowed).collect();
    assert!(
        missing.is_empty(),
        "calls the chart does not allow with registration on: {missing:?}"
    );
    let unused: Vec<_> = registration.difference(&made).collect();
    assert!(
        unused.is_empty(),
        "verbs the chart grants for registration but it never used: {unused:?}"
    );
    assert!(
        registration.is_disjoint(&always),
        "the registration's verbs are granted only when it is on"
    );
    h.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_cluster_api_rules_allow_every_call_the_cluster_api_provisioner_makes() {
    let capi = crate::capi::start().await;
    let h = &capi.h;
    capi.bought_and_placed_big("t").await;
    h.delete_tenant("t");
    capi.all_given_back().await;
    capi.stop();
    let base = rules_of("clusterrole.yaml");
    // Its own rules, and those it shares with the registration (core Nodes, placement Nodes).
    let switched: Vec<Rule> =
        switched_rules_of("clusterrole.yaml", ".Values.provisioner.clusterAPI.enabled")
            .into_iter()
            .chain(switched_rules_of("clusterrole.yaml", NODES_SWITCH))
            .collect();
    assert_no_wildcards(&switched);
    let allowed = granted(&base).union(&granted(&switched)).cloned().collect();
    let made = calls(&h.fleet.api);
    let missing: Vec<_> = made.difference(&allowed).collect();
    assert!(
        missing.is_empty(),
        "calls the chart does not allow: {missing:?}"
    );
    // Granted for Cluster API's usual clients (a watch, the scale subresource) though this
    // provisioner reads the MachineDeployment afresh each look and patches its replicas with
    // the intended-replicas annotation (the scale carries no annotation): the fixed list.
    let spare = BTreeSet::from(
        [
            ("cluster.x-k8s.io", "machinedeployments", "watch"),
            ("cluster.x-k8s.io", "machinedeployments/scale", "get"),
            ("cluster.x-k8s.io", "machinedeployments/scale", "update"),
            ("cluster.x-k8s.io", "machinedeployments/scale", "patch"),
            ("cluster.x-k8s.io", "machines", "get"),
            ("cluster.x-k8s.io", "machines", "watch"),
            ("", "nodes", "list"),
            ("", "nodes", "watch"),
        ]
        .map(|(g, r, v)| (g.to_owned(), r.to_owned(), v.to_owned())),
    );
    let unused: Vec<_> = granted(&switched)
        .difference(&made)
        .filter(|c| !spare.contains(c))
        .cloned()
        .collect();
    assert!(
        unused.is_empty(),
        "Cluster API verbs granted and never used: {unused:?}"
    );
    h.assert_invariants();
}
