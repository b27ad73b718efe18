//! `--provisioner cluster-api`: a waiting tenant gets a Machine through a MachineDeployment and
//! lands on its Node; an idle machine goes back through `delete-machine`; lost answers after
//! each write (the scale, the claim, the Node, the hand-back), a failing Machine, a person's
//! hand on replicas and a class whose MachineDeployment is missing never scale twice nor give
//! back what is not ours. Cluster API's MachineSet and Machine controllers are played here by
//! hand (see [`play`]), so each step is the test's to hold or fail.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inmem_apiserver::{ApiServer, Fault, Gate, Verb};
use serde_json::{Value, json};
use tenant_placer::api::capi::{
    CLAIM_ANNOTATION, DELETE_MACHINE_ANNOTATION, INTENDED_REPLICAS_ANNOTATION, MACHINE_ANNOTATION,
};
use tenant_placer::api::{GROUP, NodeClass, NodeRequest, TenantPhase};

use crate::requests::requests;
use crate::*;

const CAPI: &str = "cluster.x-k8s.io";
const NS: &str = "fleet";
const MD: &str = "md-ax";

fn settings_capi() -> Settings {
    Settings {
        request_after: Some(Duration::ZERO),
        request_check: Duration::from_millis(20),
        empty_node_after: Duration::from_millis(300),
        cluster_api: true,
        ..settings()
    }
}

fn class(deployment: &str) -> Value {
    json!({"apiVersion": VERSION, "kind": "NodeClass", "metadata": {"name": "ax"},
           "spec": {"capacity": {"threads": 32, "memoryGb": 128, "storageGb": 1000},
                    "provider": "hetzner/AX102", "monthlyCost": 100,
                    "clusterAPI": {"machineDeployment": {"namespace": NS, "name": deployment}}}})
}

fn deployment(replicas: i64) -> Value {
    let template = json!({"spec": {"clusterName": "c", "bootstrap": {"dataSecretName": "b"},
        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                              "kind": "HetznerBareMetalMachineTemplate", "name": "ax"}}});
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
           "metadata": {"name": MD, "namespace": NS},
           "spec": {"clusterName": "c", "replicas": replicas,
                    "selector": {"matchLabels": {"pool": "ax"}}, "template": template}})
}

/// Cluster API's part, played by hand: how Machines behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delivery {
    /// A new Machine is Running at once, with a core Node offering `threads`.
    Running { threads: i64 },
    /// A new Machine fails.
    Failing,
    /// A new Machine stays without a phase (Cluster API still making it).
    Stalled,
}

/// A harness on an API that serves Cluster API's kinds, with the MachineDeployment (0
/// replicas), the class, a small node, and every replicas value the deployment took.
pub struct Capi {
    pub h: Harness,
    replicas: Arc<Mutex<Vec<i64>>>,
    delivery: Arc<Mutex<Delivery>>,
    playing: Arc<AtomicBool>,
    /// Machines made so far (their names' numbers).
    made: Arc<Mutex<u32>>,
}

pub async fn start() -> Capi {
    start_with(true).await
}

async fn start_with(deployment_exists: bool) -> Capi {
    let api = ApiServer::new();
    let crds = tenant_placer::manifests::parse_manifests(
        Path::new("crds.yaml"),
        tenant_placer::sim::capi::CRDS,
    )
    .unwrap();
    for crd in crds {
        api.install_crd(crd.object).unwrap();
    }
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
        .unwrap();
    if deployment_exists {
        api.apply(deployment(0)).unwrap();
    }
    let replicas = Arc::new(Mutex::new(Vec::new()));
    let seen = replicas.clone();
    api.on_commit(move |commit| {
        if commit.group == CAPI && commit.resource == "machinedeployments" {
            let now = commit.object["spec"]["replicas"].as_i64().unwrap_or(1);
            let before = commit
                .old
                .map(|o| o["spec"]["replicas"].as_i64().unwrap_or(1));
            if before != Some(now) {
                seen.lock().unwrap().push(now);
            }
        }
    });
    let nodes = [node("small").capacity(4, 16, 100).manifest()];
    let h = Harness::start_on(api, &nodes, settings_capi()).await;
    h.apply(&[class(MD)]);
    let capi = Capi {
        h,
        replicas,
        delivery: Arc::new(Mutex::new(Delivery::Running { threads: 32 })),
        playing: Arc::new(AtomicBool::new(true)),
        made: Arc::default(),
    };
    capi.play();
    capi
}

/// One round of the MachineSet and Machine controllers: Machines follow replicas (a Machine
/// marked `delete-machine` goes first, then the oldest: a lowering the controller forgot to
/// mark takes a Machine that is not the one it bought last), and a new Machine is delivered.
fn play(api: &ApiServer, delivery: Delivery, made: &mut u32) {
    let Some(md) = api.get(CAPI, "machinedeployments", Some(NS), MD) else {
        return;
    };
    let replicas = md["spec"]["replicas"].as_i64().unwrap_or(1);
    let mut present: Vec<Value> = machines(api);
    let live = i64::try_from(present.len()).unwrap();
    if live < replicas {
        *made += 1;
        api.create(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": format!("{MD}-{made}"), "namespace": NS,
                         "labels": {"cluster.x-k8s.io/deployment-name": MD, "pool": "ax"}},
            "spec": {"clusterName": "c", "bootstrap": {"dataSecretName": "b"},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "HetznerBareMetalMachine", "name": "x"}}}),
        )
        .unwrap();
    } else if live > replicas {
        present.sort_by_key(|m| {
            let marked = m["metadata"]["annotations"][DELETE_MACHINE_ANNOTATION].is_string();
            let made: u32 = m["metadata"]["name"]
                .as_str()
                .and_then(|n| n.rsplit('-').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            (!marked, made)
        });
        let name = present[0]["metadata"]["name"].as_str().unwrap();
        api.delete(CAPI, "machines", Some(NS), name).unwrap();
        let _ = api.delete("", "nodes", None, name);
    }
    for machine in machines(api) {
        if machine["status"]["phase"].is_string() || delivery == Delivery::Stalled {
            continue;
        }
        let name = machine["metadata"]["name"].as_str().unwrap();
        let status = match delivery {
            Delivery::Running { threads } => {
                api.apply(
                    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                    "status": {"allocatable": {"cpu": threads.to_string(), "memory": "128Gi",
                                               "ephemeral-storage": "1000Gi", "pods": "110"},
                               "conditions": [{"type": "Ready", "status": "True"}]}}),
                )
                .unwrap();
                json!({"phase": "Running", "nodeRef": {"name": name}})
            }
            Delivery::Failing => json!({"phase": "Failed", "deprecated": {"v1beta1": {
                "failureReason": "CreateError", "failureMessage": "no AX102 in stock"}}}),
            Delivery::Stalled => unreachable!(),
        };
        let mut patch = machine.clone();
        patch["status"] = status;
        api.apply(patch).unwrap();
    }
}

fn machines(api: &ApiServer) -> Vec<Value> {
    api.list(CAPI, "machines")
        .into_iter()
        .filter(|m| m["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

fn big(name: &str) -> Value {
    tenant(name).resources(16, 64, 500).manifest()
}

fn placed_on(h: &Harness, name: &str) -> Option<String> {
    let status = h.tenant(name)?.status?;
    (status.phase == TenantPhase::Active).then_some(status.node_name)
}

impl Capi {
    fn replicas(&self) -> Vec<i64> {
        self.replicas.lock().unwrap().clone()
    }

    /// The tenant lands on the Node made for its request; returns the request's name.
    async fn bought_and_placed(&self, tenant: &str) -> String {
        let h = &self.h;
        h.until("placed on a bought node", || {
            placed_on(h, tenant).is_some_and(|n| n != "small")
        })
        .await;
        placed_on(h, tenant).unwrap()
    }

    /// Every request gone and every Machine with it.
    pub async fn all_given_back(&self) {
        let h = &self.h;
        h.until("every request and machine gone", || {
            requests(h).is_empty() && machines(&h.fleet.api).is_empty()
        })
        .await;
    }

    pub fn stop(&self) {
        self.playing.store(false, Ordering::SeqCst);
    }

    /// Plays Cluster API's part until [`Capi::stop`]; Machine names go on from `made`.
    fn play(&self) {
        self.playing.store(true, Ordering::SeqCst);
        let (api, delivery, playing) = (
            self.h.fleet.api.clone(),
            self.delivery.clone(),
            self.playing.clone(),
        );
        let made = self.made.clone();
        tokio::spawn(async move {
            while playing.load(Ordering::SeqCst) {
                let delivery = *delivery.lock().unwrap();
                play(&api, delivery, &mut made.lock().unwrap());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }

    /// A tenant too big for the small node lands on a machine bought for it.
    pub async fn bought_and_placed_big(&self, tenant: &str) -> String {
        self.h.apply(&[big(tenant)]);
        self.bought_and_placed(tenant).await
    }
}

#[tokio::test]
async fn a_waiting_tenant_gets_a_machine_and_it_goes_back_through_delete_machine() {
    let capi = start().await;
    let h = &capi.h;
    h.apply(&[big("t")]);
    let request = capi.bought_and_placed("t").await;
    let node = h.node(&request);
    let machine = node.metadata.annotations.as_ref().unwrap()[MACHINE_ANNOTATION].clone();
    assert_eq!(machine, format!("{NS}/{MD}-1"));
    assert_eq!(node.spec.capacity.threads, 32);
    let found = h
        .fleet
        .api
        .get(CAPI, "machines", Some(NS), &format!("{MD}-1"))
        .unwrap();
    assert_eq!(found["metadata"]["annotations"][CLAIM_ANNOTATION], request);
    let ready: NodeRequest = serde_json::from_value(
        h.fleet
            .api
            .get(GROUP, "noderequests", None, &request)
            .unwrap(),
    )
    .unwrap();
    let status = ready.status.unwrap();
    assert_eq!(
        (status.node_name.as_str(), status.machine.as_str()),
        (request.as_str(), machine.as_str())
    );
    assert_eq!(capi.replicas(), [1]);
    h.assert_invariants();

    h.delete_tenant("t");
    capi.all_given_back().await;
    assert_eq!(capi.replicas(), [1, 0], "raised once, lowered once");
    assert!(
        h.fleet
            .nodes()
            .iter()
            .all(|n| n.metadata.name.as_deref() != Some(&request))
    );
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn answers_lost_after_each_write_never_scale_twice_nor_give_back_twice() {
    let capi = start().await;
    let h = &capi.h;
    let api = &h.fleet.api;
    // The answer to each first write is lost after it committed: as if the controller died there.
    for fault in [
        Fault::on(Verb::Patch)
            .group(CAPI)
            .resource("machinedeployments")
            .main_resource(),
        Fault::on(Verb::Patch).group(CAPI).resource("machines"),
        Fault::on(Verb::Create).group(GROUP).resource("nodes"),
        // The finalizer, then the first status write (Provisioning, the intent, the claim).
        Fault::on(Verb::Patch)
            .group(GROUP)
            .resource("noderequests")
            .main_resource(),
        Fault::on(Verb::Patch)
            .group(GROUP)
            .resource("noderequests")
            .subresource("status"),
    ] {
        api.inject(fault.times(1).commit_then_fail());
    }
    h.apply(&[big("t")]);
    capi.bought_and_placed("t").await;
    assert_eq!(capi.replicas(), [1]);
    for fault in [
        Fault::on(Verb::Patch)
            .group(CAPI)
            .resource("machinedeployments")
            .main_resource(),
        Fault::on(Verb::Patch).group(CAPI).resource("machines"),
        Fault::on(Verb::Patch).group(GROUP).resource("noderequests"),
    ] {
        api.inject(fault.times(1).commit_then_fail());
    }
    h.delete_tenant("t");
    capi.all_given_back().await;
    assert_eq!(capi.replicas(), [1, 0]);
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn a_restarted_controller_takes_up_where_the_objects_say() {
    let capi = start().await;
    let h = &capi.h;
    capi.stop(); // hold Cluster API: the raise is made, no Machine yet
    h.apply(&[big("t")]);
    h.until("replicas raised", || capi.replicas() == [1]).await;
    h.fleet.stop();
    h.fleet.start(settings_capi());
    // The new controller sees the raise in scaleGeneration: it waits for the Machine coming.
    assert_eq!(requests(h).len(), 1);
    // Cluster API resumes and delivers.
    capi.play();
    capi.bought_and_placed("t").await;
    assert_eq!(capi.replicas(), [1], "the restart raised nothing again");
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn a_failing_machine_fails_its_request_and_goes_back() {
    let capi = start().await;
    let h = &capi.h;
    *capi.delivery.lock().unwrap() = Delivery::Failing;
    h.apply(&[big("t")]);
    h.until("the failure reported", || {
        !crate::guards::events_with_reason(h, "ProvisioningFailed").is_empty()
    })
    .await;
    let event = &crate::guards::events_with_reason(h, "ProvisioningFailed")[0];
    let note = event["note"]
        .as_str()
        .or(event["message"].as_str())
        .unwrap_or_default();
    assert!(note.contains("CreateError: no AX102 in stock"), "{event}");
    // The failed Machine goes back; the class rests, so nothing is bought meanwhile.
    h.until("the failed machine given back", || {
        machines(&h.fleet.api).is_empty() && capi.replicas().ends_with(&[0])
    })
    .await;
    assert_eq!(capi.replicas()[..2], [1, 0]);
    assert_eq!(
        h.tenant("t").unwrap().status.unwrap().phase,
        TenantPhase::PendingCapacity
    );
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn a_machine_a_person_added_is_neither_claimed_nor_given_back() {
    let capi = start().await;
    let h = &capi.h;
    h.apply(&[big("t")]);
    capi.bought_and_placed("t").await;
    // A person raises replicas by hand: their Machine is made, and stays theirs.
    let api = &h.fleet.api;
    api.apply(
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
                     "metadata": {"name": MD, "namespace": NS}, "spec": {"replicas": 2}}),
    )
    .unwrap();
    h.until("their machine made", || machines(api).len() == 2)
        .await;
    h.delete_tenant("t");
    h.until("ours given back", || {
        requests(h).is_empty() && machines(api).len() == 1
    })
    .await;
    let theirs = &machines(api)[0];
    assert_eq!(theirs["metadata"]["name"], format!("{MD}-2"));
    assert!(theirs["metadata"]["annotations"][CLAIM_ANNOTATION].is_null());
    assert_eq!(capi.replicas(), [1, 2, 1]);
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn a_class_whose_machine_deployment_is_missing_says_so_and_buys_nothing() {
    let capi = start_with(false).await;
    let h = &capi.h;
    h.until("the class says why", || {
        h.fleet
            .api
            .get(GROUP, "nodeclasses", None, "ax")
            .and_then(|c| serde_json::from_value::<NodeClass>(c).ok())
            .is_some_and(|c| c.unavailable().is_some())
    })
    .await;
    h.apply(&[big("t")]);
    h.until("the tenant says why", || {
        h.tenant("t").and_then(|t| t.status).is_some_and(|s| {
            s.message
                .contains("MachineDeployment fleet/md-ax does not exist")
        })
    })
    .await;
    // A request the request loop made before its watch showed the condition fails at once.
    assert!(
        requests(h)
            .iter()
            .all(|r| r.phase() == tenant_placer::api::NodeRequestPhase::Failed),
        "{:#?}",
        requests(h)
    );
    assert!(machines(&h.fleet.api).is_empty());
    // Once it exists, the class is bought.
    h.fleet.api.apply(deployment(0)).unwrap();
    capi.bought_and_placed("t").await;
    assert_eq!(capi.replicas(), [0, 1], "made with 0, raised once");
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn a_machine_goes_back_where_it_came_from_when_its_class_is_gone() {
    let capi = start().await;
    let h = &capi.h;
    capi.bought_and_placed_big("t").await;
    h.fleet
        .api
        .delete(GROUP, "nodeclasses", None, "ax")
        .unwrap();
    h.delete_tenant("t");
    capi.all_given_back().await;
    assert_eq!(capi.replicas(), [1, 0]);
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn a_machine_a_person_takes_by_lowering_replicas_fails_its_request_and_is_not_raised_twice() {
    let capi = start().await;
    let h = &capi.h;
    *capi.delivery.lock().unwrap() = Delivery::Stalled;
    h.apply(&[big("t")]);
    h.until("our machine claimed", || {
        machines(&h.fleet.api)
            .iter()
            .any(|m| m["metadata"]["annotations"][CLAIM_ANNOTATION].is_string())
    })
    .await;
    // A person lowers replicas by hand: Cluster API deletes the oldest Machine, ours (the only one).
    h.fleet
        .api
        .apply(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
                      "metadata": {"name": MD, "namespace": NS}, "spec": {"replicas": 0}}),
        )
        .unwrap();
    h.until("the request failed and went", || {
        !crate::guards::events_with_reason(h, "ProvisioningFailed").is_empty()
            && requests(h).is_empty()
    })
    .await;
    let event = &crate::guards::events_with_reason(h, "ProvisioningFailed")[0];
    assert!(
        event.to_string().contains("was deleted by someone else"),
        "{event}"
    );
    // The class rests after a failure: nothing is raised again meanwhile, nothing lowered twice.
    assert_eq!(capi.replicas(), [1, 0]);
    assert!(machines(&h.fleet.api).is_empty());
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn two_controllers_at_once_raise_once_claim_once_and_give_back_once() {
    let capi = start().await;
    let h = &capi.h;
    // No leader election: both provisioners act on every look (worse than a leader handover).
    let other = tokio::spawn(tenant_placer::controller::run_with(
        h.fleet.client.clone(),
        settings_capi(),
        tenant_placer::controller::Handles::default(),
    ));
    h.apply(&[big("t")]);
    let request = capi.bought_and_placed("t").await;
    assert_eq!(capi.replicas(), [1]);
    let claimed: Vec<Value> = machines(&h.fleet.api)
        .into_iter()
        .filter(|m| m["metadata"]["annotations"][CLAIM_ANNOTATION] == request.as_str())
        .collect();
    assert_eq!(claimed.len(), 1);
    h.delete_tenant("t");
    capi.all_given_back().await;
    assert_eq!(capi.replicas(), [1, 0]);
    other.abort();
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn a_machine_deleted_by_hand_is_replaced_and_its_request_keeps_its_node() {
    let capi = start().await;
    let h = &capi.h;
    let request = capi.bought_and_placed_big("t").await;
    // A person (or a MachineHealthCheck) deletes the Machine; its MachineSet replaces it.
    h.fleet
        .api
        .delete(CAPI, "machines", Some(NS), &format!("{MD}-1"))
        .unwrap();
    let replacement = format!("{NS}/{MD}-2");
    h.until(
        "the replacement recorded on the request and its Node",
        || {
            let node = h.node(&request);
            let recorded: Option<NodeRequest> = h
                .fleet
                .api
                .get(GROUP, "noderequests", None, &request)
                .and_then(|r| serde_json::from_value(r).ok());
            node.metadata.annotations.as_ref().unwrap()[MACHINE_ANNOTATION] == replacement
                && recorded.is_some_and(|r| r.status.is_some_and(|s| s.machine == replacement))
        },
    )
    .await;
    let claim = h
        .fleet
        .api
        .get(CAPI, "machines", Some(NS), &format!("{MD}-2"))
        .unwrap();
    assert_eq!(claim["metadata"]["annotations"][CLAIM_ANNOTATION], request);
    assert_eq!(placed_on(h, "t").as_deref(), Some(request.as_str()));
    assert_eq!(capi.replicas(), [1], "nothing raised for the replacement");
    h.assert_invariants();

    h.delete_tenant("t");
    capi.all_given_back().await;
    assert_eq!(capi.replicas(), [1, 0]);
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn a_node_being_deleted_by_hand_records_the_machine_that_replaces_its_own() {
    let capi = start().await;
    let h = &capi.h;
    let request = capi.bought_and_placed_big("t").await;
    // A person deletes the placement Node: its finalizer keeps it while `t` holds it (once the
    // node loop has put it there), and the machine bought for `t`'s move never comes (Cluster
    // API stalls from now on).
    h.until("the Node's finalizer", || {
        h.node(&request)
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == tenant_placer::api::NODE_FINALIZER))
    })
    .await;
    *capi.delivery.lock().unwrap() = Delivery::Stalled;
    h.fleet.api.delete(GROUP, "nodes", None, &request).unwrap();
    h.until("the Node being deleted", || {
        h.node(&request).metadata.deletion_timestamp.is_some()
    })
    .await;
    // Then its Machine is deleted by hand too: the MachineSet's replacement is the request's,
    // and the Node, still there, must say so.
    h.fleet
        .api
        .delete(CAPI, "machines", Some(NS), &format!("{MD}-1"))
        .unwrap();
    let original = format!("{NS}/{MD}-1");
    h.until(
        "the replacement recorded on the request and on its Node being deleted",
        || {
            let recorded: Option<NodeRequest> = h
                .fleet
                .api
                .get(GROUP, "noderequests", None, &request)
                .and_then(|r| serde_json::from_value(r).ok());
            let Some(machine) = recorded.and_then(|r| r.status).map(|s| s.machine) else {
                return false;
            };
            let node = h.node(&request);
            machine != original
                && !machine.is_empty()
                && node.metadata.deletion_timestamp.is_some()
                && node.metadata.annotations.as_ref().unwrap()[MACHINE_ANNOTATION] == machine
        },
    )
    .await;
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn a_request_taken_up_whose_class_went_before_any_machine_was_asked_is_withdrawn() {
    let capi = start().await;
    let h = &capi.h;
    // As left by a class deleted between the take-up and the raise: Provisioning, this
    // provisioner's finalizer, no MachineDeployment recorded, its class gone.
    h.apply(&[json!({"apiVersion": VERSION, "kind": "NodeRequest",
        "metadata": {"name": "gone-1", "finalizers": [tenant_placer::controller::capi::FINALIZER]},
        "spec": {"nodeClass": "gone", "tenants": ["default/t"],
                 "capacity": {"threads": 32, "memoryGb": 128, "storageGb": 1000}},
        "status": {"phase": "Provisioning", "message": "asking MachineDeployment fleet/md-gone for a machine"}})]);
    h.until("the untaken request withdrawn", || requests(h).is_empty())
        .await;
    // As left by a crash between the hand-back's two writes: back to Pending, the finalizer
    // still there. Withdrawn all the same.
    h.apply(&[json!({"apiVersion": VERSION, "kind": "NodeRequest",
        "metadata": {"name": "gone-2", "finalizers": [tenant_placer::controller::capi::FINALIZER]},
        "spec": {"nodeClass": "gone", "tenants": ["default/t"],
                 "capacity": {"threads": 32, "memoryGb": 128, "storageGb": 1000}},
        "status": {"phase": "Pending", "message": "NodeClass gone was deleted before a Machine was asked for: not taken up"}})]);
    h.until("the half handed-back request withdrawn", || {
        requests(h).is_empty()
    })
    .await;
    assert!(machines(&h.fleet.api).is_empty());
    assert!(
        capi.replicas().is_empty(),
        "nothing raised: {:?}",
        capi.replicas()
    );
    capi.stop();
    h.assert_invariants();
}

#[tokio::test]
async fn a_machine_and_its_request_gone_between_two_looks_leave_no_replacement_unclaimed() {
    let capi = start().await;
    let h = &capi.h;
    let api = &h.fleet.api;
    let request = capi.bought_and_placed_big("t").await;
    assert_eq!(capi.replicas(), [1]);
    assert_eq!(
        intended_replicas(h).as_deref(),
        Some("1"),
        "recorded with the raise"
    );
    // Cluster API held, and the provisioner's next look held at its read of the deployment.
    capi.stop();
    let gate = Gate::default();
    api.inject(
        Fault::on(Verb::Get)
            .group(CAPI)
            .resource("machinedeployments")
            .hold(&gate),
    );
    tokio::time::timeout(Duration::from_secs(10), gate.arrived())
        .await
        .expect("a look reads the MachineDeployment");
    // Between that look and the next: the tenant leaves, its request is deleted and its Node
    // drained away, a person deletes the Machine and its MachineSet replaces it.
    h.delete_tenant("t");
    api.delete(GROUP, "noderequests", None, &request).unwrap();
    api.delete(GROUP, "nodes", None, &request).unwrap();
    h.until("the request's Node gone", || {
        h.fleet
            .nodes()
            .iter()
            .all(|n| n.metadata.name.as_deref() != Some(&request))
    })
    .await;
    api.delete(CAPI, "machines", Some(NS), &format!("{MD}-1"))
        .unwrap();
    let delivery = *capi.delivery.lock().unwrap();
    play(api, delivery, &mut capi.made.lock().unwrap());
    let replacement = machines(api);
    assert_eq!(replacement.len(), 1);
    assert_eq!(replacement[0]["metadata"]["name"], format!("{MD}-2"));
    // Replicas still say what the provisioner wrote: the replacement is the request's, and goes
    // back with it (a person's Machine would have come with a raise).
    api.clear_faults();
    gate.open();
    capi.play();
    capi.all_given_back().await;
    assert_eq!(capi.replicas(), [1, 0]);
    assert_eq!(
        intended_replicas(h).as_deref(),
        Some("0"),
        "recorded with the lowering"
    );
    capi.stop();
    h.assert_invariants();
}

/// The MachineDeployment's record of the replicas the provisioner set.
fn intended_replicas(h: &Harness) -> Option<String> {
    let md = h.fleet.api.get(CAPI, "machinedeployments", Some(NS), MD)?;
    let found = &md["metadata"]["annotations"][INTENDED_REPLICAS_ANNOTATION];
    found.as_str().map(str::to_owned)
}
