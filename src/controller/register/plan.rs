//! What the registration decides, as data: for each name the core Nodes and the placement Nodes
//! hold, one [`Action`] (create, patch, delete, report) or none; and whether the watch shows a
//! write of ours yet ([`Wrote`]). Pure: no API, no clock; `mod.rs` makes the writes.
//!
//! Rules enforced here (the decision order of [`decide`], for one name):
//! - a core Node gone, being deleted or no longer taken by the selector deletes a registered,
//!   readable placement Node of its name that is not being deleted already, guarded by its UID
//!   and the resourceVersion read, and leaves any other;
//! - a placement Node without the `registered` label is a clash: reported, never written,
//!   whatever the core Node says;
//! - an allocatable that cannot be read is reported, and the placement Node left as it is;
//! - otherwise the placement Node is created, left to go (being deleted), left as it is (the
//!   types cannot hold it), or patched where its capacity, state or labels differ from what the
//!   core Node gives ([`Change`]: only those fields, a drain someone started stays), guarded by
//!   the resourceVersion read;
//! - names are decided in name order, each once ([`plan`]);
//! - a write of ours is shown once the cache holds its version or a later one (numbers, as the
//!   API server's revisions are), or for a delete, the Node gone or going.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node as CoreNode;
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::api::{BadQuantity, LabelSelector, Node, NodeState, Registration, ResourceAmounts};

/// What to do about one name: the outcome of [`decide`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the placement Node of a core Node that has none.
    Create {
        name: String,
        registration: Registration,
    },
    /// Patch the owned fields that differ, guarded by the resourceVersion read.
    Update {
        name: String,
        resource_version: String,
        change: Change,
    },
    /// Delete a registered placement Node whose core Node is gone (once a read confirms it),
    /// guarded by the UID and resourceVersion read.
    Delete {
        name: String,
        uid: Option<String>,
        resource_version: String,
    },
    /// Report a problem with the core Node of this name and leave both Nodes as they are.
    Report { name: String, problem: Problem },
}

impl Action {
    /// The name of the core Node and placement Node it is about.
    pub fn name(&self) -> &str {
        match self {
            Action::Create { name, .. }
            | Action::Update { name, .. }
            | Action::Delete { name, .. }
            | Action::Report { name, .. } => name,
        }
    }
}

/// The owned fields of a placement Node that differ from what its core Node gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Change {
    pub capacity: Option<ResourceAmounts>,
    pub state: Option<NodeState>,
    /// Labels to set (`Some`) or remove (`None`).
    pub labels: BTreeMap<String, Option<String>>,
}

impl Change {
    /// The change from `node` to what `wanted` gives, `None` when there is none.
    fn between(node: &Node, wanted: &Registration) -> Option<Change> {
        let state = wanted.state_over(node.spec.state);
        let mut labels: BTreeMap<String, Option<String>> = wanted
            .labels
            .iter()
            .filter(|(key, value)| node.labels().get(*key) != Some(*value))
            .map(|(key, value)| (key.clone(), Some(value.clone())))
            .collect();
        labels.extend(
            node.labels()
                .keys()
                .filter(|key| !wanted.labels.contains_key(*key))
                .map(|key| (key.clone(), None)),
        );
        let change = Change {
            capacity: (node.spec.capacity != wanted.capacity).then_some(wanted.capacity),
            state: (node.spec.state != state).then_some(state),
            labels,
        };
        (change != Change::default()).then_some(change)
    }

    /// The JSON merge patch that makes the change, failing (409) unless the Node is still at
    /// `resource_version`.
    pub fn patch(&self, resource_version: &str) -> Value {
        let mut metadata = json!({"resourceVersion": resource_version});
        if !self.labels.is_empty() {
            metadata["labels"] = json!(self.labels);
        }
        let mut patch = json!({"metadata": metadata});
        let mut spec = serde_json::Map::new();
        if let Some(capacity) = self.capacity {
            spec.insert("capacity".into(), json!(capacity));
        }
        if let Some(state) = self.state {
            spec.insert("state".into(), json!(state));
        }
        if !spec.is_empty() {
            patch["spec"] = Value::Object(spec);
        }
        patch
    }
}

/// Why a core Node is reported and left as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A placement Node of its name that the registration did not make (that Node's UID).
    Clash { uid: Option<String> },
    /// Its allocatable cannot be read.
    UnreadableAllocatable(BadQuantity),
}

impl Problem {
    /// The metric label.
    pub(super) fn label(&self) -> &'static str {
        match self {
            Problem::Clash { .. } => "clash",
            Problem::UnreadableAllocatable(_) => "unreadable_allocatable",
        }
    }

    /// The Event's reason.
    pub(super) fn reason(&self) -> &'static str {
        match self {
            Problem::Clash { .. } => "RegistrationClash",
            Problem::UnreadableAllocatable(_) => "UnreadableAllocatable",
        }
    }

    /// The Event's note, about the core Node `name`.
    pub(super) fn note(&self, name: &str) -> String {
        match self {
            Problem::Clash { .. } => format!(
                "tenant-placer cannot register this node: the placement Node {name} exists and was \
                 not registered by it (it lacks the label {}: \"true\"); both are left as they \
                 are. Delete that placement Node to have this one registered, or label it to hand \
                 it over",
                crate::api::REGISTERED_LABEL
            ),
            Problem::UnreadableAllocatable(why) => format!(
                "tenant-placer cannot read this node's capacity ({why}); its placement Node {name} \
                 is left as it is until it can be read"
            ),
        }
    }
}

/// What to do about the name `name`: its core Node as the core cache holds it (`None` when it
/// holds none) and its placement Node (`None` when there is none). Pure; see the module rules.
pub fn decide(
    selector: &LabelSelector,
    name: &str,
    core: Option<&CoreNode>,
    node: Option<&Node>,
) -> Option<Action> {
    let name = name.to_owned();
    // Gone, going, or no longer taken by the selector: the same for its placement Node.
    let core = core
        .filter(|core| core.metadata.deletion_timestamp.is_none())
        .filter(|core| selector.matches(core.labels()));
    let Some(core) = core else {
        let node = node?;
        let ours = node.is_registered()
            && node.metadata.deletion_timestamp.is_none()
            && node.unreadable_reason().is_none();
        // NB: a Node the API served has a resourceVersion: without one, nothing is guarded.
        let resource_version = node.metadata.resource_version.clone()?;
        return ours.then(|| Action::Delete {
            name,
            uid: node.metadata.uid.clone(),
            resource_version,
        });
    };
    if let Some(node) = node.filter(|node| !node.is_registered()) {
        let problem = Problem::Clash {
            uid: node.metadata.uid.clone(),
        };
        return Some(Action::Report { name, problem });
    }
    let registration = match Registration::of(core) {
        Ok(registration) => registration,
        Err(why) => {
            let problem = Problem::UnreadableAllocatable(why);
            return Some(Action::Report { name, problem });
        }
    };
    let Some(node) = node else {
        return Some(Action::Create { name, registration });
    };
    if node.metadata.deletion_timestamp.is_some() || node.unreadable_reason().is_some() {
        return None;
    }
    let resource_version = node.metadata.resource_version.clone()?;
    Change::between(node, &registration).map(|change| Action::Update {
        name,
        resource_version,
        change,
    })
}

/// What to do about every name the core Nodes and the placement Nodes hold, in name order.
/// Pure.
pub fn plan(selector: &LabelSelector, cores: &[Arc<CoreNode>], nodes: &[Arc<Node>]) -> Vec<Action> {
    let cores: HashMap<String, &CoreNode> =
        cores.iter().map(|c| (c.name_any(), c.as_ref())).collect();
    let nodes: HashMap<String, &Node> = nodes.iter().map(|n| (n.name_any(), n.as_ref())).collect();
    let names: BTreeSet<&String> = cores.keys().chain(nodes.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            decide(
                selector,
                name,
                cores.get(name).copied(),
                nodes.get(name).copied(),
            )
        })
        .collect()
}

/// What one of our writes left, for the watch to show before the registration decides about
/// that Node again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrote {
    /// Created or patched: this resourceVersion.
    Version(u64),
    /// Deleted: gone, or being deleted.
    Deleted,
}

impl Wrote {
    /// What a create or patch returned, when its resourceVersion can be compared.
    pub(super) fn version_of(node: &Node) -> Option<Wrote> {
        node.resource_version()?.parse().ok().map(Wrote::Version)
    }

    /// Whether the cached Node (`None`: none cached) shows this write, or a later version.
    /// NB: resourceVersions are compared as numbers, as `state::newest` does: both come from the
    /// same API server; a cached one that cannot be read counts as caught up.
    pub(super) fn shown_by(self, cached: Option<&Node>) -> bool {
        match self {
            Wrote::Version(ours) => cached
                .and_then(|node| node.resource_version())
                .is_some_and(|cached| cached.parse::<u64>().map_or(true, |cached| cached >= ours)),
            Wrote::Deleted => cached.is_none_or(|node| node.metadata.deletion_timestamp.is_some()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::api::REGISTERED_LABEL;
    use crate::testing::{NodeBuilder, core_node, node};

    fn selector() -> LabelSelector {
        "pool=eu".parse().unwrap()
    }

    /// A placement Node as the registration keeps node-eu-1's core Node (pool=eu, Ready, 64
    /// cores, 256Gi, 8000Gi): in step with it.
    fn registered() -> NodeBuilder {
        node("n")
            .capacity(64, 256, 8000)
            .label("pool", "eu")
            .label(REGISTERED_LABEL, "true")
            .uid("uid-n")
            .resource_version(7)
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn create(
        capacity: (i64, i64, i64),
        state: NodeState,
        pairs: &[(&str, &str)],
    ) -> Option<Action> {
        Some(Action::Create {
            name: "n".into(),
            registration: Registration {
                capacity: ResourceAmounts::new(capacity.0, capacity.1, capacity.2),
                state,
                labels: labels(pairs),
            },
        })
    }

    fn update(change: Change) -> Option<Action> {
        Some(Action::Update {
            name: "n".into(),
            resource_version: "7".into(),
            change,
        })
    }

    fn report(problem: Problem) -> Option<Action> {
        Some(Action::Report {
            name: "n".into(),
            problem,
        })
    }

    const REGISTERED: (&str, &str) = (REGISTERED_LABEL, "true");

    /// The decision order, for one name: the core Node gone (or going, or no longer selected)
    /// deletes a registered, readable placement Node that is not going already, and leaves any
    /// other; a placement Node without the label is a clash (reported, whatever the core Node
    /// says); an allocatable that cannot be read is reported; then the placement Node is
    /// created, left to go, left unreadable, or patched where its capacity, state or labels
    /// differ (a drain stays).
    #[test]
    fn each_core_node_and_placement_node_gives_one_action() {
        let eu = || core_node("n").label("pool", "eu");
        // What, the core Node, the placement Node, what to do.
        type Row = (&'static str, Option<CoreNode>, Option<Node>, Option<Action>);
        let cases: Vec<Row> = vec![
            // 64 cores -> 64 threads; 256Gi, 8000Gi -> 256, 8000 GB.
            (
                "a Ready, schedulable core Node gets an Online placement Node",
                Some(eu().build()),
                None,
                create(
                    (64, 256, 8000),
                    NodeState::Online,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "a cordoned one, Cordoned",
                Some(eu().cordoned().build()),
                None,
                create(
                    (64, 256, 8000),
                    NodeState::Cordoned,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "a NotReady one, Offline",
                Some(eu().ready("False").build()),
                None,
                create(
                    (64, 256, 8000),
                    NodeState::Offline,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "NotReady wins over cordoned: Offline",
                Some(eu().ready("False").cordoned().build()),
                None,
                create(
                    (64, 256, 8000),
                    NodeState::Offline,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "Ready Unknown (the kubelet stopped posting) is not Ready: Offline",
                Some(eu().ready("Unknown").build()),
                None,
                create(
                    (64, 256, 8000),
                    NodeState::Offline,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "a kubelet that reported nothing yet: Offline, no capacity",
                Some(eu().no_conditions().no_allocatable().build()),
                None,
                create((0, 0, 0), NodeState::Offline, &[("pool", "eu"), REGISTERED]),
            ),
            (
                // 31500m -> 31 threads; 127Gi + 1023Mi -> 127 GB; 3999.9Gi -> 3999 GB.
                "allocatable rounds down to whole cores and GiB",
                Some(eu().allocatable("31500m", "131071Mi", "3999.9Gi").build()),
                None,
                create(
                    (31, 127, 3999),
                    NodeState::Online,
                    &[("pool", "eu"), REGISTERED],
                ),
            ),
            (
                "in step: nothing to do",
                Some(eu().build()),
                Some(registered().build()),
                None,
            ),
            (
                "overcommit and the finalizer are not the registration's: nothing to do",
                Some(eu().build()),
                Some(
                    registered()
                        .overcommit(2.0, 1.0, 1.0)
                        .finalizer(crate::api::NODE_FINALIZER)
                        .build(),
                ),
                None,
            ),
            (
                "cordoned: Online -> Cordoned",
                Some(eu().cordoned().build()),
                Some(registered().build()),
                update(Change {
                    state: Some(NodeState::Cordoned),
                    ..Change::default()
                }),
            ),
            (
                "NotReady: Cordoned -> Offline",
                Some(eu().cordoned().ready("False").build()),
                Some(registered().state(NodeState::Cordoned).build()),
                update(Change {
                    state: Some(NodeState::Offline),
                    ..Change::default()
                }),
            ),
            (
                "Ready and uncordoned again: Offline -> Online",
                Some(eu().build()),
                Some(registered().state(NodeState::Offline).build()),
                update(Change {
                    state: Some(NodeState::Online),
                    ..Change::default()
                }),
            ),
            (
                // 32 cores, 128Gi, 4000Gi -> (32, 128, 4000).
                "allocatable lowered: the capacity follows",
                Some(eu().allocatable("32", "128Gi", "4000Gi").build()),
                Some(registered().build()),
                update(Change {
                    capacity: Some(ResourceAmounts::new(32, 128, 4000)),
                    ..Change::default()
                }),
            ),
            (
                "a drain someone started stays, whatever the core Node says",
                Some(eu().cordoned().build()),
                Some(registered().state(NodeState::Draining).build()),
                None,
            ),
            (
                "a draining node's capacity still follows",
                Some(eu().allocatable("32", "256Gi", "8000Gi").build()),
                Some(registered().state(NodeState::Draining).build()),
                update(Change {
                    capacity: Some(ResourceAmounts::new(32, 256, 8000)),
                    ..Change::default()
                }),
            ),
            (
                "labels follow the core Node's: one added, one gone",
                Some(eu().label("zone", "eu-1a").build()),
                Some(registered().label("rack", "r7").build()),
                update(Change {
                    labels: BTreeMap::from([
                        ("rack".to_owned(), None),
                        ("zone".to_owned(), Some("eu-1a".to_owned())),
                    ]),
                    ..Change::default()
                }),
            ),
            (
                "the core Node gone: the registered placement Node is deleted",
                None,
                Some(registered().build()),
                Some(Action::Delete {
                    name: "n".into(),
                    uid: Some("uid-n".into()),
                    resource_version: "7".into(),
                }),
            ),
            (
                "the core Node being deleted: the same",
                Some(eu().deleting().build()),
                Some(registered().build()),
                Some(Action::Delete {
                    name: "n".into(),
                    uid: Some("uid-n".into()),
                    resource_version: "7".into(),
                }),
            ),
            (
                "the core Node no longer selected (its pool label changed): the same",
                Some(core_node("n").label("pool", "us").build()),
                Some(registered().build()),
                Some(Action::Delete {
                    name: "n".into(),
                    uid: Some("uid-n".into()),
                    resource_version: "7".into(),
                }),
            ),
            (
                "the core Node gone, its placement Node already going: left to go",
                None,
                Some(registered().deleting().build()),
                None,
            ),
            (
                "a core Node back while its old placement Node goes: it waits until it is gone",
                Some(eu().build()),
                Some(registered().deleting().state(NodeState::Cordoned).build()),
                None,
            ),
            (
                "no core Node, a placement Node made by hand: never touched",
                None,
                Some(node("n").capacity(8, 8, 8).uid("uid-hand").build()),
                None,
            ),
            (
                "a placement Node of the core Node's name made by hand: a clash, reported",
                Some(eu().build()),
                Some(node("n").capacity(8, 8, 8).uid("uid-hand").build()),
                report(Problem::Clash {
                    uid: Some("uid-hand".into()),
                }),
            ),
            (
                "registered: \"false\" is not registered: a clash",
                Some(eu().build()),
                Some(
                    node("n")
                        .label(REGISTERED_LABEL, "false")
                        .uid("uid-hand")
                        .build(),
                ),
                report(Problem::Clash {
                    uid: Some("uid-hand".into()),
                }),
            ),
            (
                "a clash is reported before an unreadable allocatable",
                Some(eu().allocatable("-1", "1Gi", "1Gi").build()),
                Some(node("n").uid("uid-hand").build()),
                report(Problem::Clash {
                    uid: Some("uid-hand".into()),
                }),
            ),
            (
                "an allocatable that cannot be read: reported, nothing created",
                Some(eu().allocatable("8", "12Xi", "1Gi").build()),
                None,
                report(Problem::UnreadableAllocatable(BadQuantity {
                    resource: "memory",
                    value: "12Xi".into(),
                    why: "unknown suffix",
                })),
            ),
            (
                "an allocatable that cannot be read: reported, the placement Node left as it is",
                Some(eu().allocatable("-1", "1Gi", "1Gi").build()),
                Some(registered().build()),
                report(Problem::UnreadableAllocatable(BadQuantity {
                    resource: "cpu",
                    value: "-1".into(),
                    why: "negative",
                })),
            ),
            (
                "a registered placement Node the types cannot hold: left as it is",
                Some(eu().cordoned().build()),
                Some(unreadable(registered().build())),
                None,
            ),
            (
                "... even when its core Node is gone",
                None,
                Some(unreadable(registered().build())),
                None,
            ),
        ];
        for (what, core, placement, expected) in cases {
            let got = decide(&selector(), "n", core.as_ref(), placement.as_ref());
            assert_eq!(got, expected, "{what}");
        }
    }

    /// A Node as the watch keeps one the types cannot hold.
    fn unreadable(node: Node) -> Node {
        Node::unreadable(node.metadata, "{}", "spec.capacity.threads: invalid".into())
    }

    #[test]
    fn the_plan_decides_every_name_either_cache_holds_in_name_order() {
        let cores: Vec<Arc<CoreNode>> = ["c", "a", "b"]
            .iter()
            .map(|n| Arc::new(core_node(n).label("pool", "eu").build()))
            .collect();
        let in_step = |name: &str| {
            node(name)
                .capacity(64, 256, 8000)
                .label("pool", "eu")
                .label(REGISTERED_LABEL, "true")
                .resource_version(3)
                .build()
        };
        let nodes: Vec<Arc<Node>> = vec![
            Arc::new(in_step("b")),
            Arc::new(in_step("d")),
            Arc::new(node("e").build()),
            Arc::new(node("c").build()),
        ];
        let got: Vec<(String, &str)> = plan(&selector(), &cores, &nodes)
            .iter()
            .map(|action| {
                let what = match action {
                    Action::Create { .. } => "create",
                    Action::Update { .. } => "update",
                    Action::Delete { .. } => "delete",
                    Action::Report { .. } => "report",
                };
                (action.name().to_owned(), what)
            })
            .collect();
        // a: no placement Node; b: in step; c: made by hand; d: its core Node gone; e: by
        // hand, no core Node.
        assert_eq!(
            got,
            [
                ("a".to_owned(), "create"),
                ("c".to_owned(), "report"),
                ("d".to_owned(), "delete")
            ]
        );
    }

    #[test]
    fn a_change_is_a_merge_patch_of_what_differs_guarded_by_the_version_read() {
        let change = Change {
            capacity: Some(ResourceAmounts::new(32, 128, 4000)),
            state: None,
            labels: BTreeMap::from([
                ("rack".to_owned(), None),
                ("zone".to_owned(), Some("a".to_owned())),
            ]),
        };
        assert_eq!(
            change.patch("7"),
            json!({
                "metadata": {"resourceVersion": "7", "labels": {"rack": null, "zone": "a"}},
                "spec": {"capacity": {"threads": 32, "memoryGb": 128, "storageGb": 4000}},
            })
        );
        let state = Change {
            state: Some(NodeState::Offline),
            ..Change::default()
        };
        assert_eq!(
            state.patch("8"),
            json!({"metadata": {"resourceVersion": "8"}, "spec": {"state": "Offline"}})
        );
    }

    /// Whether the cache shows our own last write: a version at least ours (numbers, as the API
    /// server's etcd revisions are), or for a delete, the Node gone or going.
    #[test]
    fn a_write_of_ours_is_shown_once_the_cache_holds_it_or_a_later_version() {
        let at = |rv: u64| node("n").resource_version(rv).build();
        let unparsable = {
            let mut node = at(1);
            node.metadata.resource_version = Some("not-a-number".into());
            node
        };
        let cases: Vec<(&str, Wrote, Option<Node>, bool)> = vec![
            (
                "created, not in the cache yet",
                Wrote::Version(9),
                None,
                false,
            ),
            (
                "the cache one version behind",
                Wrote::Version(9),
                Some(at(8)),
                false,
            ),
            (
                "the cache at our write",
                Wrote::Version(9),
                Some(at(9)),
                true,
            ),
            ("the cache past it", Wrote::Version(9), Some(at(12)), true),
            (
                "a version that cannot be compared: caught up",
                Wrote::Version(9),
                Some(unparsable),
                true,
            ),
            (
                "deleted, still cached as it was",
                Wrote::Deleted,
                Some(at(9)),
                false,
            ),
            (
                "deleted, cached as going",
                Wrote::Deleted,
                Some(node("n").deleting().build()),
                true,
            ),
            ("deleted, gone from the cache", Wrote::Deleted, None, true),
        ];
        for (what, wrote, cached, shown) in cases {
            assert_eq!(wrote.shown_by(cached.as_ref()), shown, "{what}");
        }
    }
}
