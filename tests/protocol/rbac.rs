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

/// The `rules:` of a chart template (they are plain YAML; only metadata is templated).
fn rules_of(template: &str) -> Vec<Rule> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/tenant-placer/templates/"
    )
    .to_owned()
        + template;
    let text = std::fs::read_to_string(&path).unwrap();
    let rules = text
        .split("\nrules:\n")
        .nth(1)
        .unwrap()
        .split("{{-")
        .next()
        .unwrap();
    serde_saphyr::from_str(rules).unwrap()
}

/// (apiGroup, resource[/subresource], verb) for each request the API saw.
fn calls(api: &ApiServer) -> BTreeSet<(String, String, String)> {
    api.stats()
        .requests
        .keys()
        .map(|key| {
            let group = match key.resource.as_str() {
                "tenants" | "nodes" | "nodeclasses" | "noderequests" => {
                    "placement.tenant-placer.dev"
                }
                "events" => "events.k8s.io",
                "leases" => "coordination.k8s.io",
                other => panic!("the controller called an unexpected resource: {other}"),
            };
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
        .inject(Fault::on(Verb::Update).resource("nodes").conflict());
    crate::seed::seed_scenario(&h).await;
    for suspend in [true, false, true, false] {
        h.apply(&[tenant("waits").resources(1000, 1, 1).manifest()]);
        h.apply(&[tenant_spec("waits", json!({"suspend": suspend}))]);
        h.settle().await;
    }
    // A machine asked for the tenant that waits (create), reported Failed by a provisioner
    // (played here by hand), and deleted by the controller (delete).
    h.apply(&[
        json!({"apiVersion": VERSION, "kind": "NodeClass", "metadata": {"name": "box"},
                     "spec": {"capacity": {"threads": 1024, "memoryGb": 64, "storageGb": 100},
                              "provider": "lab"}}),
    ]);
    let requests = || h.fleet.api.list(GROUP, "noderequests");
    for _ in 0..100 {
        if !requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let request = requests()
        .first()
        .cloned()
        .expect("a request for the tenant that waits");
    let name = request["metadata"]["name"].as_str().unwrap().to_owned();
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
    let ghost = entry("ghost", (1, 1, 1));
    h.apply(&[json!({"apiVersion": VERSION, "kind": "Node", "metadata": {"name": "node-eu-2"}, "status": {"allocations": [ghost]}})]);
    h.settle().await;

    let rules: Vec<Rule> = rules_of("clusterrole.yaml")
        .into_iter()
        .chain(rules_of("role.yaml"))
        .collect();
    let mut granted = BTreeSet::new();
    for rule in &rules {
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
        for group in &rule.api_groups {
            for resource in &rule.resources {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
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
