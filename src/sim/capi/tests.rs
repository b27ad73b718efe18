#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeSet;
use std::future::Future;

use futures::{StreamExt, TryStreamExt};
use inmem_apiserver::ApiServer;
use kube::CustomResourceExt;
use kube::api::{WatchEvent, WatchParams};

use super::*;
use crate::api::{
    ClusterApiSource, NamespacedName, NodeClassSpec, ResourceAmounts, allocatable_capacity,
};

const NS: &str = "capi-hetzner";
const MD: &str = "bm-ax102";
const CLUSTER: &str = "hetzner-prod";
/// Every async test's budget: a regression fails here instead of hanging.
const LIMIT: Duration = Duration::from_secs(20);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Runs `test` under [`LIMIT`].
async fn within<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, test)
        .await
        .expect("the test did not finish in time")
}

/// Polls `probe` until it answers `Some` (the caller's timeout bounds it).
async fn until<T, F, Fut>(mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        tokio::time::sleep(ms(5)).await;
    }
}

/// A fast configuration: 20 ms a phase, a look every 5 ms.
fn fast() -> CapiSimConfig {
    CapiSimConfig {
        step: ms(20),
        every: ms(5),
        ..CapiSimConfig::default()
    }
}

/// The in-memory API with Cluster API's CRDs and NodeClass, and (once started) the simulator.
struct Sim {
    api: ApiServer,
    client: Client,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Sim {
    async fn new() -> Sim {
        let api = ApiServer::new();
        let client = Client::new(api.clone(), "default");
        install_crds(&client).await.unwrap();
        api.install_crd(serde_json::to_value(NodeClass::crd()).unwrap())
            .unwrap();
        Sim {
            api,
            client,
            task: None,
        }
    }

    async fn running(config: CapiSimConfig) -> Sim {
        let mut sim = Sim::new().await;
        sim.task = Some(tokio::spawn(run(sim.client.clone(), config)));
        sim
    }

    fn api(&self, kind: CapiKind) -> Api<DynamicObject> {
        kind.api(&self.client, NS)
    }

    fn nodes(&self) -> Api<CoreNode> {
        Api::all(self.client.clone())
    }

    async fn create_deployment(&self, md: Value) -> DynamicObject {
        let md: DynamicObject = serde_json::from_value(md).unwrap();
        self.api(CapiKind::MachineDeployment)
            .create(&PostParams::default(), &md)
            .await
            .unwrap()
    }

    async fn create_class(&self, md: &str) {
        let class = NodeClass::new(
            "hetzner-ax102",
            NodeClassSpec {
                capacity: ResourceAmounts::new(32, 128, 4000),
                provider: "hetzner/AX102".into(),
                monthly_cost: Some(119),
                limit: None,
                labels: BTreeMap::new(),
                cluster_api: Some(ClusterApiSource {
                    machine_deployment: NamespacedName {
                        namespace: NS.into(),
                        name: md.into(),
                    },
                }),
            },
        );
        Api::<NodeClass>::all(self.client.clone())
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
    }

    async fn scale(&self, md: &str, replicas: i32) {
        self.api(CapiKind::MachineDeployment)
            .patch_scale(
                md,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
    }

    async fn machines(&self) -> Vec<DynamicObject> {
        self.api(CapiKind::Machine)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    /// Waits until `md`'s status says `ready` of `replicas` and the phase `Running`, for its
    /// current generation.
    async fn settled(&self, md: &str, replicas: i64, ready: i64) -> DynamicObject {
        let mds = &self.api(CapiKind::MachineDeployment);
        until(move || async move {
            let md = mds.get(md).await.unwrap();
            let status = &md.data["status"];
            (status["replicas"] == replicas
                && status["readyReplicas"] == ready
                && status["phase"] == "Running"
                && status["observedGeneration"].as_i64() == md.metadata.generation)
                .then_some(md)
        })
        .await
    }

    /// Waits until `name`'s phase is `phase`.
    async fn machine_in(&self, name: &str, phase: &str) -> DynamicObject {
        let machines = &self.api(CapiKind::Machine);
        until(move || async move {
            machines
                .get_opt(name)
                .await
                .unwrap()
                .filter(|m| m.data["status"]["phase"] == phase)
        })
        .await
    }

    /// Waits until `md` has a Machine, and answers its name.
    async fn machine_of(&self, md: &str) -> String {
        until(move || async move {
            self.machines()
                .await
                .into_iter()
                .find(|m| m.labels().get(DEPLOYMENT_NAME_LABEL).map(String::as_str) == Some(md))
                .map(|m| name(&m).to_owned())
        })
        .await
    }

    /// Waits until there is a MachineSet, and answers it.
    async fn machine_set(&self) -> DynamicObject {
        let sets = &self.api(CapiKind::MachineSet);
        until(move || async move {
            let list = sets.list(&ListParams::default()).await.unwrap();
            list.items.into_iter().next()
        })
        .await
    }

    /// Waits until no MachineSet, Machine or core Node is left.
    async fn all_gone(&self) {
        until(move || async move {
            let sets = self
                .api(CapiKind::MachineSet)
                .list(&ListParams::default())
                .await
                .unwrap();
            let nodes = self.nodes().list(&ListParams::default()).await.unwrap();
            (sets.items.is_empty() && self.machines().await.is_empty() && nodes.items.is_empty())
                .then_some(())
        })
        .await
    }
}

/// A MachineDeployment shaped as Cluster API's book and CAPH's templates write one: bare-metal
/// machines from a HetznerBareMetalMachineTemplate, bootstrapped by kubeadm.
fn caph_deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": NS, "labels": {"nodepool": name}},
        "spec": {
            "clusterName": CLUSTER,
            "replicas": replicas,
            "selector": {"matchLabels": {
                "cluster.x-k8s.io/cluster-name": CLUSTER,
                "nodepool": name,
            }},
            "template": {
                "metadata": {"labels": {
                    "cluster.x-k8s.io/cluster-name": CLUSTER,
                    "nodepool": name,
                    "node.cluster.x-k8s.io/pool": name,
                }},
                "spec": {
                    "clusterName": CLUSTER,
                    "version": "v1.33.4",
                    "failureDomain": "fsn1",
                    "bootstrap": {"configRef": {
                        "apiGroup": "bootstrap.cluster.x-k8s.io",
                        "kind": "KubeadmConfigTemplate",
                        "name": name,
                    }},
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "HetznerBareMetalMachineTemplate",
                        "name": name,
                    },
                    "deletion": {"nodeDrainTimeoutSeconds": 300},
                },
            },
            "rollout": {"strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            }},
        },
    })
}

#[test]
fn the_crds_name_the_three_kinds_with_cluster_apis_names_versions_and_subresources() {
    let crds = parse_crds().unwrap();
    let names: Vec<_> = crds.iter().map(|c| c.spec.names.clone()).collect();
    assert_eq!(
        names
            .iter()
            .map(|n| (n.kind.as_str(), n.short_names.clone().unwrap()))
            .collect::<Vec<_>>(),
        [
            ("MachineDeployment", vec!["md".to_owned()]),
            ("MachineSet", vec!["ms".to_owned()]),
            ("Machine", vec!["ma".to_owned()]),
        ]
    );
    for crd in &crds {
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["cluster-api".to_owned()][..])
        );
        let versions: Vec<_> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        assert_eq!(
            versions,
            [("v1beta2", true, true), ("v1beta1", true, false)]
        );
        for version in &crd.spec.versions {
            let subresources = version.subresources.as_ref().unwrap();
            assert!(subresources.status.is_some());
            let scale = subresources.scale.as_ref();
            if crd.spec.names.kind == "Machine" {
                assert!(scale.is_none());
            } else {
                let scale = scale.unwrap();
                assert_eq!(
                    (
                        scale.spec_replicas_path.as_str(),
                        scale.status_replicas_path.as_str(),
                        scale.label_selector_path.as_deref()
                    ),
                    (
                        ".spec.replicas",
                        ".status.replicas",
                        Some(".status.selector")
                    )
                );
            }
        }
    }
}

#[tokio::test]
async fn the_crds_install_twice_and_take_a_machine_deployment_shaped_as_cluster_api_writes_it() {
    within(async {
        let sim = Sim::new().await;
        install_crds(&sim.client).await.unwrap();

        let created = sim.create_deployment(caph_deployment(MD, 2)).await;
        let spec = &created.data["spec"];
        assert_eq!(spec["replicas"], 2);
        assert_eq!(
            spec["template"]["spec"]["infrastructureRef"]["kind"],
            "HetznerBareMetalMachineTemplate",
            "kept by the template's preserved fields"
        );
        assert_eq!(
            spec["rollout"]["strategy"]["rollingUpdate"]["maxSurge"], 1,
            "kept by the spec's preserved fields"
        );
        assert_eq!(
            spec["template"]["spec"]["deletion"]["nodeDrainTimeoutSeconds"],
            300
        );

        // The scale subresource reads the paths Cluster API declares.
        let scale = sim
            .api(CapiKind::MachineDeployment)
            .get_scale(MD)
            .await
            .unwrap();
        assert_eq!(scale.spec.unwrap().replicas, Some(2));

        // v1beta1 is served too, the same object.
        let v1beta1 = Api::<DynamicObject>::namespaced_with(
            sim.client.clone(),
            NS,
            &CapiKind::MachineDeployment.api_resource_at("v1beta1"),
        );
        let old = v1beta1.get(MD).await.unwrap();
        assert_eq!(old.types.unwrap().api_version, "cluster.x-k8s.io/v1beta1");
        assert_eq!(old.data["spec"]["clusterName"], CLUSTER);

        // The typed fields are checked.
        let mut bad = caph_deployment("bad", 1);
        bad["spec"]["replicas"] = "two".into();
        let refused = sim
            .api(CapiKind::MachineDeployment)
            .create(
                &PostParams::default(),
                &serde_json::from_value(bad).unwrap(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, kube::Error::Api(s) if s.is_invalid()),
            "{refused}"
        );
    })
    .await;
}

#[tokio::test]
async fn scaling_up_makes_a_machine_that_runs_with_a_node_of_the_class_allocatable() {
    within(async {
        let sim = Sim::running(fast()).await;
        sim.create_class(MD).await;
        sim.create_deployment(caph_deployment(MD, 0)).await;
        sim.settled(MD, 0, 0).await;
        let set = sim.machine_set().await;
        assert_eq!(set.labels()[DEPLOYMENT_NAME_LABEL], MD);
        assert_eq!(set.labels()[CLUSTER_NAME_LABEL], CLUSTER);
        assert_eq!(
            set.metadata.owner_references.as_ref().unwrap()[0].kind,
            "MachineDeployment"
        );

        let events = sim
            .api(CapiKind::Machine)
            .watch(&WatchParams::default(), "0")
            .await
            .unwrap()
            .boxed();
        sim.scale(MD, 1).await;

        // Every phase is written, in order.
        let mut phases: Vec<String> = Vec::new();
        let mut events = events;
        let machine = loop {
            let Some(WatchEvent::Added(m) | WatchEvent::Modified(m)) =
                events.try_next().await.unwrap()
            else {
                continue;
            };
            if let Some(phase) = m.data["status"]["phase"].as_str() {
                if phases.last().map(String::as_str) != Some(phase) {
                    phases.push(phase.to_owned());
                }
                if phase == "Running" {
                    break m;
                }
            }
        };
        assert_eq!(
            phases,
            ["Pending", "Provisioning", "Provisioned", "Running"]
        );

        // The Machine, as Cluster API's MachineSet controller makes it.
        let machine_name = name(&machine).to_owned();
        let suffix = machine_name
            .strip_prefix(&format!("{}-", name(&set)))
            .unwrap();
        assert!(suffix.len() == 5 && suffix.bytes().all(|b| NAME_ALPHABET.contains(&b)));
        let labels = machine.labels();
        assert_eq!(labels[SET_NAME_LABEL], name(&set));
        assert_eq!(labels[DEPLOYMENT_NAME_LABEL], MD);
        assert_eq!(labels[CLUSTER_NAME_LABEL], CLUSTER);
        assert_eq!(labels["nodepool"], MD);
        assert_eq!(machine.finalizers(), [MACHINE_FINALIZER]);
        let owner = controller_of(&machine).unwrap();
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("MachineSet", uid(&set))
        );
        let spec = &machine.data["spec"];
        assert_eq!(spec["clusterName"], CLUSTER);
        assert_eq!(spec["providerID"], format!("sim://{machine_name}"));
        assert_eq!(
            spec["infrastructureRef"],
            json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
                   "kind": "HetznerBareMetalMachine", "name": machine_name})
        );
        assert_eq!(spec["bootstrap"]["configRef"]["kind"], "KubeadmConfig");
        let status = &machine.data["status"];
        assert_eq!(status["nodeRef"]["name"], machine_name.as_str());
        assert_eq!(status["nodeInfo"]["kubeletVersion"], "v1.33.4");
        let condition = |type_: &str| {
            status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == type_)
                .map(|c| c["status"].as_str().unwrap().to_owned())
        };
        for type_ in [
            "BootstrapConfigReady",
            "InfrastructureReady",
            "NodeReady",
            "NodeHealthy",
            "Ready",
            "Available",
            "UpToDate",
        ] {
            assert_eq!(condition(type_).as_deref(), Some("True"), "{type_}");
        }
        assert_eq!(condition("Deleting").as_deref(), Some("False"));

        // Its core Node, with the class's capacity.
        let node = sim.nodes().get(&machine_name).await.unwrap();
        assert_eq!(
            node.spec.as_ref().unwrap().provider_id.as_deref(),
            Some(format!("sim://{machine_name}").as_str())
        );
        let node_status = node.status.as_ref().unwrap();
        let allocatable = node_status.allocatable.clone().unwrap();
        let text: BTreeMap<&str, &str> = allocatable
            .iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str()))
            .collect();
        assert_eq!(
            text,
            BTreeMap::from([
                ("cpu", "32"),
                ("ephemeral-storage", "4000Gi"),
                ("memory", "128Gi"),
                ("pods", "110"),
            ])
        );
        assert_eq!(
            allocatable_capacity(&allocatable).unwrap(),
            ResourceAmounts::new(32, 128, 4000),
            "what --register-nodes reads: the class's capacity"
        );
        let ready = node_status.conditions.as_ref().unwrap();
        assert!(
            ready
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        );
        assert_eq!(node.labels()["node.cluster.x-k8s.io/pool"], MD);
        assert!(
            !node.labels().contains_key("nodepool"),
            "only Cluster API's domains"
        );
        assert_eq!(node.annotations()["cluster.x-k8s.io/cluster-name"], CLUSTER);
        assert_eq!(
            node.annotations()["cluster.x-k8s.io/owner-kind"],
            "MachineSet"
        );

        // The MachineDeployment's status.
        let md = sim.settled(MD, 1, 1).await;
        let status = &md.data["status"];
        assert_eq!(status["availableReplicas"], 1);
        assert_eq!(
            status["selector"],
            "cluster.x-k8s.io/cluster-name=hetzner-prod,nodepool=bm-ax102"
        );
        let scale = sim
            .api(CapiKind::MachineDeployment)
            .get_scale(MD)
            .await
            .unwrap();
        assert_eq!(scale.status.unwrap().replicas, 1);
    })
    .await;
}

#[tokio::test]
async fn lowering_replicas_after_annotating_a_machine_deletes_exactly_that_machine_and_its_node() {
    within(async {
        let sim = Sim::running(fast()).await;
        sim.create_class(MD).await;
        sim.create_deployment(caph_deployment(MD, 3)).await;
        sim.settled(MD, 3, 3).await;
        let mut machines = sim.machines().await;
        // Without the annotation the oldest goes first (then by name): annotate the one that
        // order would take last.
        machines.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
                .then_with(|| name(a).cmp(name(b)))
        });
        let doomed = name(&machines[2]).to_owned();
        let kept: BTreeSet<String> = machines[..2].iter().map(|m| name(m).to_owned()).collect();
        sim.api(CapiKind::Machine)
            .patch(
                &doomed,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: ""}}}),
                ),
            )
            .await
            .unwrap();
        let mut events = sim
            .api(CapiKind::Machine)
            .watch(&WatchParams::default(), "0")
            .await
            .unwrap()
            .boxed();
        sim.scale(MD, 2).await;

        // The annotated Machine shows Deleting, then goes.
        let mut seen_deleting = false;
        loop {
            match events.try_next().await.unwrap() {
                Some(WatchEvent::Modified(m)) if name(&m) == doomed => {
                    seen_deleting |= m.data["status"]["phase"] == "Deleting";
                }
                Some(WatchEvent::Deleted(m)) => {
                    assert_eq!(name(&m), doomed, "only the annotated Machine goes");
                    break;
                }
                _ => {}
            }
        }
        assert!(seen_deleting);
        assert!(
            sim.nodes().get_opt(&doomed).await.unwrap().is_none(),
            "its Node went first"
        );

        sim.settled(MD, 2, 2).await;
        let left: BTreeSet<String> = sim
            .machines()
            .await
            .iter()
            .map(|m| name(m).to_owned())
            .collect();
        assert_eq!(left, kept);
        for machine in &kept {
            assert!(sim.nodes().get_opt(machine).await.unwrap().is_some());
        }
        assert!(
            sim.machines().await.iter().all(|m| !deleting(m)),
            "no second Machine is deleted"
        );
    })
    .await;
}

#[tokio::test]
async fn a_machine_of_a_failing_deployment_ends_failed_with_the_failure_fields_and_no_node() {
    fails(CapiSimConfig {
        failing: HashSet::from([format!("{NS}/{MD}")]),
        ..fast()
    })
    .await;
}

#[tokio::test]
async fn a_machine_of_a_failing_class_ends_failed_as_one_of_a_failing_deployment() {
    fails(CapiSimConfig {
        failing_classes: HashSet::from(["hetzner-ax102".to_owned()]),
        ..fast()
    })
    .await;
}

/// Under `config`, the Machine of [`MD`] (its class created first) ends `Failed`, as Cluster API
/// shows a failure, and no Node is made.
async fn fails(config: CapiSimConfig) {
    within(async {
        let sim = Sim::running(config).await;
        sim.create_class(MD).await;
        sim.create_deployment(caph_deployment(MD, 1)).await;
        let failed = sim.machine_of(MD).await;
        let machine = sim.machine_in(&failed, "Failed").await;

        let status = &machine.data["status"];
        let failure = &status["deprecated"]["v1beta1"];
        assert_eq!(failure["failureReason"], "CreateError");
        let message = failure["failureMessage"].as_str().unwrap();
        assert!(message.ends_with("(simulated failure)"), "{message}");
        let infrastructure = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "InfrastructureReady")
            .unwrap();
        assert_eq!(
            (&infrastructure["status"], &infrastructure["message"]),
            (&json!("False"), &json!(message))
        );
        assert!(status["nodeRef"].is_null());
        assert!(machine.data["spec"]["providerID"].is_null());
        assert!(
            sim.nodes()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
        );

        let mds = &sim.api(CapiKind::MachineDeployment);
        until(move || async move {
            let status = mds.get(MD).await.unwrap().data["status"].clone();
            (status["replicas"] == 1 && status["readyReplicas"] == 0).then_some(())
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_stalled_deployment_keeps_its_machine_provisioning_while_another_runs() {
    within(async {
        let config = CapiSimConfig {
            stalled: HashSet::from([format!("{NS}/stuck")]),
            ..fast()
        };
        let sim = Sim::running(config).await;
        sim.create_deployment(caph_deployment("stuck", 1)).await;
        sim.create_deployment(caph_deployment(MD, 1)).await;
        // The stalled Machine was made no later than the other (its MachineDeployment came
        // first): once the other has run through every phase, it has had as long.
        let (stuck, other) = (sim.machine_of("stuck").await, sim.machine_of(MD).await);
        sim.machine_in(&other, "Running").await;
        let stuck = sim.api(CapiKind::Machine).get(&stuck).await.unwrap();
        assert_eq!(stuck.data["status"]["phase"], "Provisioning");
        assert!(stuck.data["status"]["nodeRef"].is_null());
        assert!(sim.nodes().get_opt(name(&stuck)).await.unwrap().is_none());
    })
    .await;
}

#[tokio::test]
async fn the_allocatable_override_is_what_the_node_reports_in_place_of_the_class() {
    within(async {
        let less = BTreeMap::from([
            ("cpu".to_owned(), "16".to_owned()),
            ("memory".to_owned(), "60Gi".to_owned()),
            ("ephemeral-storage".to_owned(), "1800Gi".to_owned()),
            ("pods".to_owned(), "110".to_owned()),
        ]);
        let config = CapiSimConfig {
            allocatable: HashMap::from([(format!("{NS}/{MD}"), less.clone())]),
            ..fast()
        };
        let sim = Sim::running(config).await;
        sim.create_class(MD).await;
        sim.create_deployment(caph_deployment(MD, 1)).await;
        sim.settled(MD, 1, 1).await;
        let machine = sim.machines().await.remove(0);
        let node = sim.nodes().get(name(&machine)).await.unwrap();
        let allocatable = node.status.unwrap().allocatable.unwrap();
        let text: BTreeMap<String, String> = allocatable
            .iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        assert_eq!(text, less);
        assert_eq!(
            allocatable_capacity(&allocatable).unwrap(),
            ResourceAmounts::new(16, 60, 1800),
            "less than the class's 32 threads, 128 GB and 4000 GB"
        );
    })
    .await;
}

#[tokio::test]
async fn deleting_a_machine_deployment_removes_its_machine_set_machines_and_nodes() {
    within(async {
        let sim = Sim::running(fast()).await;
        sim.create_deployment(caph_deployment(MD, 2)).await;
        sim.settled(MD, 2, 2).await;
        assert_eq!(
            sim.nodes()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len(),
            2
        );
        sim.api(CapiKind::MachineDeployment)
            .delete(MD, &DeleteParams::default())
            .await
            .unwrap();
        sim.all_gone().await;
        assert!(sim.api.hook_failures().is_empty());
    })
    .await;
}

#[test]
fn the_scale_down_order_is_deleting_then_annotated_then_unhealthy_then_by_age() {
    let at = |s: i64| Some(Timestamp::from_second(1_800_000_000 + s).unwrap());
    let candidate = |name, rank, created| Candidate {
        name,
        rank,
        created,
    };
    use DeleteRank::*;
    let machines = vec![
        candidate("a-old", Healthy, at(0)),
        candidate("b-new", Healthy, at(100)),
        candidate("c-mid", Healthy, at(50)),
        candidate("d-sick", Unhealthy, at(0)),
        candidate("e-marked", Annotated, at(0)),
        candidate("f-going", Deleting, at(0)),
        candidate("g-new-twin", Healthy, at(100)),
    ];
    let cases = [
        // Newest: going, marked, sick, then healthy by creation descending (b and g tie at
        // 100 s: by name), then c (50 s), then a (0 s).
        (
            DeletionOrder::Newest,
            7,
            vec![
                "f-going",
                "e-marked",
                "d-sick",
                "b-new",
                "g-new-twin",
                "c-mid",
                "a-old",
            ],
        ),
        // Oldest: the same three first, then a (0 s), c (50 s), b and g (100 s, by name).
        (
            DeletionOrder::Oldest,
            7,
            vec![
                "f-going",
                "e-marked",
                "d-sick",
                "a-old",
                "c-mid",
                "b-new",
                "g-new-twin",
            ],
        ),
        // Scaling down by 2 takes the one already going and the marked one: nothing healthy.
        (DeletionOrder::Newest, 2, vec!["f-going", "e-marked"]),
    ];
    for (order, count, expected) in cases {
        assert_eq!(
            to_delete(machines.clone(), order, count),
            expected,
            "{order:?} {count}"
        );
    }
    // Random (Cluster API's default) and an unset order read as Oldest.
    assert_eq!(DeletionOrder::of(Some("Random")), DeletionOrder::Oldest);
    assert_eq!(DeletionOrder::of(None), DeletionOrder::Oldest);
    assert_eq!(DeletionOrder::of(Some("Newest")), DeletionOrder::Newest);
}

#[test]
fn a_selector_is_written_as_the_query_parameter_string_sorted_by_key() {
    let cases = [
        (json!({"matchLabels": {"b": "2", "a": "1"}}), "a=1,b=2"),
        (
            json!({"matchLabels": {"pool": "x"}, "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["fsn1", "ash"]},
                {"key": "gpu", "operator": "DoesNotExist"},
                {"key": "arch", "operator": "NotIn", "values": ["arm64"]},
                {"key": "ready", "operator": "Exists"},
            ]}),
            "arch notin (arm64),!gpu,pool=x,ready,zone in (ash,fsn1)",
        ),
        (json!({}), ""),
    ];
    for (selector, expected) in cases {
        assert_eq!(selector_string(&selector), expected, "{selector}");
    }
}

#[test]
fn a_template_reference_points_at_the_machines_own_clone() {
    let mut reference = json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
                               "kind": "HetznerBareMetalMachineTemplate", "name": "tpl"});
    point_at_clone(&mut reference, "md-abcde-fghjk");
    assert_eq!(
        reference,
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io",
               "kind": "HetznerBareMetalMachine", "name": "md-abcde-fghjk"})
    );
}

#[tokio::test]
async fn once_settled_the_simulator_looks_without_writing() {
    within(async {
        let sim = Sim::running(fast()).await;
        sim.create_class(MD).await;
        sim.create_deployment(caph_deployment(MD, 2)).await;
        sim.settled(MD, 2, 2).await;
        // Each look lists the Machines once: let a few looks pass, then count over a few more.
        let looks = |n: u64| {
            let api = &sim.api;
            let start = api.stats().count(inmem_apiserver::Verb::List, "machines");
            until(move || async move {
                let now = api.stats().count(inmem_apiserver::Verb::List, "machines");
                (now >= start + n).then_some(())
            })
        };
        looks(3).await;
        sim.api.reset_stats();
        looks(5).await;
        let stats = sim.api.stats();
        assert_eq!(stats.write_requests(), 0, "{:?}", stats.requests);
    })
    .await;
}

#[tokio::test]
async fn replicas_patched_with_an_annotation_are_followed_and_the_annotation_kept() {
    within(async {
        let sim = Sim::running(fast()).await;
        sim.create_class(MD).await;
        sim.create_deployment(caph_deployment(MD, 0)).await;
        sim.settled(MD, 0, 0).await;
        // As the cluster-api provisioner scales: replicas and its record of them, one patch.
        let key = "placement.tenant-placer.dev/intended-replicas";
        sim.api(CapiKind::MachineDeployment)
            .patch(
                MD,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: "2"}},
                                     "spec": {"replicas": 2}})),
            )
            .await
            .unwrap();
        let md = sim.settled(MD, 2, 2).await;
        assert_eq!(md.annotations()[key], "2");
        assert_eq!(sim.machines().await.len(), 2);
    })
    .await;
}
