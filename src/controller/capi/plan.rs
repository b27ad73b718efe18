//! What the cluster-api provisioner does next for one MachineDeployment: pure, from what it
//! sees (the deployment, its Machines, the NodeRequests of the classes that name it, and the
//! placement Nodes made for them), so a restart or a new leader decides the same.
//!
//! Rules enforced here:
//! - **The record is in the objects.** A Machine is ours when a request's `status.machine` names
//!   it (the record, which wins over an annotation anyone can edit: a claim that disagrees is
//!   repaired from it), or when it carries the claim annotation naming a request that records no
//!   other live Machine (a claim not yet recorded); a request's raise is made once the deployment's generation has moved past
//!   the `scaleGeneration` written before it. Nothing is remembered between looks.
//! - **Never raise twice.** A request that was raised for waits while a Machine is coming
//!   (replicas above the Machines there) or takes an unclaimed new one; only when neither is
//!   there (someone lowered replicas meanwhile) is it raised again. An intent is written only for
//!   a raise made in the same look.
//! - **A Machine is claimed once**, by one request, and only a Machine made after the request
//!   (never one that was there before: it is someone else's). A claimed Machine whose request is
//!   gone is given back, never claimed again.
//! - **Give back exactly ours.** A Machine is given back by marking it `delete-machine` and
//!   lowering replicas by one, in the same look (so that a Machine someone else deletes after
//!   the mark was already lowered for); a lowering already under way (replicas below the Machines there)
//!   counts, since Cluster API deletes marked Machines first. Its placement Node goes first (its
//!   finalizer drains it); the request's finalizer goes in the look that marks its Machine, after
//!   the lowering (the mark and the claim are the record from then on), or once its Machine is
//!   being deleted or gone; so a deleted request still there was never lowered for. No
//!   lowering eats into the Machines a request waits for (replicas above the Machines there,
//!   marked ones counted): the marked one is lowered for once they are made, else Cluster API
//!   would keep it as the replica and make nothing for the request.
//! - **A Machine someone else deletes is replaced**, by its MachineSet (as a MachineHealthCheck
//!   remediates): the request claims the replacement and keeps its Node; it fails only when
//!   nothing replaces it (replicas lowered too).
//! - **A deleted request is settled last.** One owed a Machine (raised for, its Machine not made
//!   yet; or its Machine being deleted by someone else, so replaced) takes one only beyond what
//!   the live requests wait for, and gives it straight back; one whose Machine someone else is
//!   deleting lowers replicas while that Machine is still there, so that no replacement is made
//!   that nothing would claim; with none there or coming, it is released.
//! - **Replicas as we wrote them tell a replacement from a person's Machine.** Every scale writes
//!   the replicas intended with it; while the deployment still says those, nobody raised them
//!   since. A deleted request whose recorded Machine is gone altogether is then owed its
//!   replacement: one made after the request was deleted is claimed and given back, one coming
//!   is lowered for. (Had our own give-back taken the Machine, the request was released in the
//!   look that lowered replicas for it.) Replicas above what we wrote are a person's raise,
//!   below it a person's lowering: their Machines are left alone, as without the record.
//! - **Lower before raising.** No raise while a Machine of ours going back is not yet being
//!   deleted: replicas raised back to the Machines there would leave it in place.
//! - **Never past the limit**: cluster-autoscaler's max size on the deployment caps raises.
//!
//! And for what a look says and makes ([`unavailable`], [`available_condition`], [`delivery`]):
//! - **A class says whether it can be bought.** A deployment that is not served, missing,
//!   forbidden, at its max size or named by another class too makes its classes
//!   `Available=False` with why (a shared one first: it is wrong whatever the deployment says);
//!   otherwise `True`. The condition is written only when it says something else, and keeps its
//!   transition time while its status stays.
//! - **A Node gets what its Machine offers**: the class's capacity, or the core Node's
//!   allocatable where smaller, field by field (with a note saying so); never more than promised.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::api::capi::MAX_SIZE_ANNOTATION;
use crate::api::{
    AVAILABLE_CONDITION, Condition, NamespacedName, NodeRequestPhase, ResourceAmounts,
};

/// The deployment as seen.
#[derive(Clone, Debug)]
pub struct Deployment {
    pub replicas: i32,
    pub generation: i64,
    pub max_size: Option<i32>,
    /// The replicas this provisioner last set (`INTENDED_REPLICAS_ANNOTATION`); `None`: never
    /// said. Replicas that differ were changed by someone else since.
    pub intended: Option<i32>,
}

/// One of its Machines as seen.
#[derive(Clone, Debug)]
pub struct Machine<'a> {
    pub name: &'a str,
    pub created: Timestamp,
    pub claim: Option<&'a str>,
    pub marked: bool,
    pub deleting: bool,
    pub running_node: Option<&'a str>,
    pub failure: Option<String>,
}

/// A request of a class that names the deployment, as seen.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    pub name: &'a str,
    pub created: Timestamp,
    pub phase: NodeRequestPhase,
    /// When it was deleted (`metadata.deletionTimestamp`), if it is being deleted.
    pub deleted: Option<Timestamp>,
    /// It carries the provisioner's finalizer.
    pub adopted: bool,
    pub scale_generation: Option<i64>,
    /// `status.machine`: the Machine it was claimed with, once recorded.
    pub machine: &'a str,
}

impl Request<'_> {
    /// It is being deleted.
    pub fn deleting(&self) -> bool {
        self.deleted.is_some()
    }
}

/// The placement Node named after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeSeen {
    Present,
    Deleting,
}

/// One thing to do. The I/O carries them out in order; each is guarded and idempotent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Add the finalizer, and take the request up (`Provisioning`).
    Adopt {
        request: String,
    },
    /// Write `scaleGeneration` before the raise of this look.
    Intend {
        request: String,
        generation: i64,
    },
    /// Set replicas, guarded by the deployment's resourceVersion: after every `Intend`.
    Scale {
        from: i32,
        to: i32,
    },
    /// Annotate the Machine with the claim (and `delete-machine` when it goes straight back),
    /// then record it in the request's status.
    Claim {
        machine: String,
        request: String,
        give_back: bool,
    },
    /// Record a claimed Machine in its request's status (`status.machine`).
    Record {
        request: String,
        machine: String,
    },
    /// Create the placement Node for the request from the running Machine.
    MakeNode {
        request: String,
        machine: String,
        node: String,
    },
    /// `Ready`, with `status.nodeName` the request's name.
    Ready {
        request: String,
    },
    Fail {
        request: String,
        message: String,
    },
    /// Delete the placement Node made for a request that is gone (its finalizer drains it).
    DeleteNode {
        request: String,
    },
    /// Annotate `delete-machine`: the next lowering takes it.
    Mark {
        machine: String,
    },
    /// Remove the finalizer: nothing of the request is left to give back.
    Release {
        request: String,
    },
    /// Write the claim annotation back to what the record says (someone edited it).
    Repair {
        machine: String,
        request: String,
        /// What the annotation said.
        found: Option<String>,
    },
}

/// What to do for one deployment at `now`.
pub fn plan<'a>(
    deployment: &Deployment,
    machines: &[Machine<'a>],
    requests: &[Request<'a>],
    nodes: &BTreeMap<&str, NodeSeen>,
    now: Timestamp,
    timeout: Duration,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let by_name: BTreeMap<&str, &Request<'_>> = requests.iter().map(|r| (r.name, r)).collect();
    let gone = |name: &str| by_name.get(name).is_none_or(|r| r.deleting());
    let live: Vec<&Machine<'_>> = machines.iter().filter(|m| !m.deleting).collect();
    let live_count = i32::try_from(live.len()).unwrap_or(i32::MAX);
    let mut coming = deployment.replicas.saturating_sub(live_count).max(0);
    let coming_at_start = coming;
    let mut claimed: BTreeMap<&str, &Machine<'_>> = BTreeMap::new();
    let mut marked_ours = 0i32;
    // Deleted requests whose Machine goes back in this look (marked, or its replacement lowered
    // for): released after the lowering, so that a deleted request still there was never
    // lowered for (see `vanished`).
    let mut given_back: BTreeSet<&str> = BTreeSet::new();
    // Whose each live Machine is: the request whose record names it, else the one its claim
    // names unless that request records another live Machine (the claim was edited).
    let live_names: BTreeSet<&str> = live.iter().map(|m| m.name).collect();
    let recorded: BTreeMap<&'a str, &'a str> = requests
        .iter()
        .filter(|r| live_names.contains(r.machine))
        .map(|r| (r.machine, r.name))
        .collect();
    let owner = |machine: &Machine<'a>| -> Option<&'a str> {
        if let Some(request) = recorded.get(machine.name) {
            return Some(request);
        }
        let claim = machine.claim?;
        let records_another = by_name
            .get(claim)
            .is_some_and(|r| r.machine != machine.name && live_names.contains(r.machine));
        (!records_another).then_some(claim)
    };

    // Machines whose request is gone go back: their placement Node first.
    for machine in &live {
        let Some(claim) = owner(machine) else {
            continue;
        };
        if machine.claim != Some(claim) {
            steps.push(Step::Repair {
                machine: machine.name.to_owned(),
                request: claim.to_owned(),
                found: machine.claim.map(str::to_owned),
            });
        }
        if !gone(claim) {
            claimed.entry(claim).or_insert(machine);
            continue;
        }
        match nodes.get(claim) {
            Some(NodeSeen::Present) => steps.push(Step::DeleteNode {
                request: claim.to_owned(),
            }),
            Some(NodeSeen::Deleting) => {}
            None => {
                // Marked and lowered in one look: the lowering follows the mark at once. The
                // mark and the claim are the record from then on: the request is released.
                if !machine.marked {
                    steps.push(Step::Mark {
                        machine: machine.name.to_owned(),
                    });
                }
                marked_ours = marked_ours.saturating_add(1);
                if by_name.get(claim).is_some_and(|r| r.adopted) {
                    given_back.insert(claim);
                }
            }
        }
    }

    let mut ordered: Vec<&Request<'_>> = requests.iter().collect();
    ordered.sort_by_key(|r| (r.created, r.name));
    let claimed_names: BTreeSet<&str> = live.iter().filter_map(|m| owner(m)).collect();
    // Unclaimed, unmarked Machines, oldest first; each is taken by one request made before it.
    // A claim naming a request that records another Machine names nothing: that Machine is
    // unclaimed (the request raised for it takes it, and the claim is written anew).
    let mut candidates: Vec<&Machine<'_>> = live
        .iter()
        .filter(|m| owner(m).is_none() && !m.marked)
        .copied()
        .collect();
    candidates.sort_by_key(|m| (m.created, m.name));
    // The oldest candidate made at `since` or later.
    let mut take = |since: Timestamp| -> Option<String> {
        let at = candidates.iter().position(|m| m.created >= since)?;
        Some(candidates.remove(at).name.to_owned())
    };
    let raised = |r: &Request<'_>| {
        r.scale_generation
            .is_some_and(|g| deployment.generation > g)
    };
    // The request's recorded Machine is being deleted by someone else (no mark): its
    // MachineSet makes a replacement once it is gone.
    let replaced = |r: &Request<'_>| {
        machines
            .iter()
            .any(|m| m.name == r.machine && m.deleting && !m.marked)
    };
    // The request's recorded Machine is gone altogether, and replicas are what this provisioner
    // last wrote: a person neither raised nor lowered them since, so a Machine made after the
    // request was deleted, or one coming, can only be that Machine's replacement (had our own
    // give-back taken it, the request was released with the lowering). Without the record
    // (never scaled here), or with replicas changed by hand, it cannot be told from a Machine a
    // person added: docs/node-requests.md, "What it cannot tell apart".
    let as_written = deployment.intended == Some(deployment.replicas);
    let vanished = |r: &Request<'_>| {
        as_written && !r.machine.is_empty() && machines.iter().all(|m| m.name != r.machine)
    };
    // A deleted request is owed a Machine when it was raised for and its Machine has not come
    // yet, or when its Machine is being replaced or has vanished.
    let owed = |r: &Request<'_>| {
        if r.machine.is_empty() {
            raised(r)
        } else {
            replaced(r) || vanished(r)
        }
    };
    let mut raises: Vec<&Request<'_>> = Vec::new();
    // Deleted requests owed a Machine: settled after the live ones.
    let mut settling: Vec<&Request<'_>> = Vec::new();
    // Replicas lowered for replacements nobody will claim.
    let mut cancelled = 0i32;

    for request in ordered {
        let name = request.name.to_owned();
        let own_machine = claimed.get(request.name).copied();
        if request.deleting() {
            if !request.adopted || claimed_names.contains(request.name) {
                continue; // not ours, or its Machine goes back above
            }
            if nodes.contains_key(request.name) {
                if nodes.get(request.name) == Some(&NodeSeen::Present) {
                    steps.push(Step::DeleteNode { request: name });
                }
                // Its Machine is being deleted by someone else while its Node drains: lower
                // replicas now, before the MachineSet replaces it. Once the Machine is gone,
                // a replacement cannot be told from a Machine a person added.
                if replaced(request) && coming > 0 {
                    coming = coming.saturating_sub(1);
                    cancelled = cancelled.saturating_add(1);
                    given_back.insert(request.name);
                }
            } else if owed(request) {
                settling.push(request);
            } else {
                // Never raised for, or its Machine is going back or gone.
                steps.push(Step::Release { request: name });
            }
            continue;
        }
        if request.phase == NodeRequestPhase::Failed {
            continue; // the controller deletes it; its Machine then goes back
        }
        if !request.adopted || request.phase == NodeRequestPhase::Pending {
            steps.push(Step::Adopt {
                request: name.clone(),
            });
        }
        // A replacement Machine's time runs from when it was made.
        let since = own_machine.map_or(request.created, |m| m.created.max(request.created));
        let late = now
            .duration_since(since)
            .try_into()
            .is_ok_and(|waited: Duration| waited > timeout);
        if let Some(machine) = own_machine {
            if request.machine != machine.name {
                steps.push(Step::Record {
                    request: name.clone(),
                    machine: machine.name.to_owned(),
                });
            }
            if let Some(failure) = &machine.failure {
                steps.push(Step::Fail {
                    request: name,
                    message: format!("Machine {} failed: {failure}", machine.name),
                });
            } else if let Some(node) = machine.running_node {
                if !nodes.contains_key(request.name) {
                    steps.push(Step::MakeNode {
                        request: name,
                        machine: machine.name.to_owned(),
                        node: node.to_owned(),
                    });
                } else if request.phase != NodeRequestPhase::Ready {
                    steps.push(Step::Ready { request: name });
                }
            } else if late {
                steps.push(Step::Fail {
                    request: name,
                    message: format!(
                        "Machine {} is not Running after {} s",
                        machine.name,
                        timeout.as_secs()
                    ),
                });
            }
            continue;
        }
        if !request.machine.is_empty() {
            // Deleted by someone else (a MachineHealthCheck's remediation, a person): its
            // MachineSet replaces it, and the replacement is the request's.
            if let Some(machine) = take(request.created) {
                steps.push(Step::Claim {
                    machine,
                    request: name,
                    give_back: false,
                });
            } else if coming > 0 {
                coming = coming.saturating_sub(1);
            } else {
                steps.push(Step::Fail {
                    request: name,
                    message: format!(
                        "Machine {} was deleted by someone else, and nothing replaces it",
                        request.machine
                    ),
                });
            }
            continue;
        }
        if late {
            steps.push(Step::Fail {
                request: name,
                message: format!("no Machine was made for it within {} s", timeout.as_secs()),
            });
            continue;
        }
        if raised(request) {
            if let Some(machine) = take(request.created) {
                steps.push(Step::Claim {
                    machine,
                    request: name,
                    give_back: false,
                });
                continue;
            }
            if coming > 0 {
                coming = coming.saturating_sub(1);
                continue;
            }
            // Raised, yet nothing is there or coming: someone lowered replicas. Raise again.
        }
        raises.push(request);
    }

    // A deleted request owed a Machine takes one only beyond what the live requests wait for,
    // and gives it straight back; with none there or coming, it is released. One whose Machine
    // someone else is deleting lowers replicas instead while that Machine is still there (Cluster
    // API deletes a Machine already being deleted first): no replacement is made, so none is
    // left that nobody claims once the request is gone.
    for request in settling {
        let name = request.name.to_owned();
        // A vanished Machine's replacement is made after the request was deleted; one made
        // before is left (a look while the request was live would have claimed it for it).
        let since = match request.deleted {
            Some(deleted) if vanished(request) => deleted,
            _ => request.created,
        };
        if let Some(machine) = take(since) {
            steps.push(Step::Claim {
                machine,
                request: name,
                give_back: true,
            });
            marked_ours = marked_ours.saturating_add(1);
            given_back.insert(request.name);
        } else if coming > 0 {
            coming = coming.saturating_sub(1);
            if replaced(request) || vanished(request) {
                cancelled = cancelled.saturating_add(1);
                given_back.insert(request.name);
            } // else: made soon, then given back
        } else {
            steps.push(Step::Release { request: name });
        }
    }

    let surplus = live_count.saturating_sub(deployment.replicas).max(0);
    let lower = marked_ours.saturating_sub(surplus).max(0);
    // Machines a request waits for are made only while replicas exceed the Machines there,
    // marked ones included: no lowering eats into them (a marked one goes once they are made).
    let waited_for = coming_at_start
        .saturating_sub(coming)
        .saturating_sub(cancelled);
    let floor = if waited_for > 0 {
        live_count
            .saturating_add(waited_for)
            .min(deployment.replicas)
    } else {
        0
    };
    let base = deployment
        .replicas
        .saturating_sub(lower)
        .saturating_sub(cancelled)
        .max(floor);
    let room = deployment
        .max_size
        .map_or(i32::MAX, |max| max.saturating_sub(base).max(0));
    raises.truncate(usize::try_from(room).unwrap_or(0));
    if marked_ours > 0 {
        // A raise now could leave as many replicas as Machines, and Cluster API would keep a
        // marked one: raise once our Machines going back are being deleted.
        raises.clear();
    }
    let up = i32::try_from(raises.len()).unwrap_or(i32::MAX);
    for request in &raises {
        if request.scale_generation != Some(deployment.generation) {
            steps.push(Step::Intend {
                request: request.name.to_owned(),
                generation: deployment.generation,
            });
        }
    }
    let to = base.saturating_add(up);
    if to != deployment.replicas {
        steps.push(Step::Scale {
            from: deployment.replicas,
            to,
        });
    }
    steps.extend(given_back.into_iter().map(|request| Step::Release {
        request: request.to_owned(),
    }));
    steps
}

/// A request as the search for untaken ones reads it.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    pub name: &'a str,
    /// It carries this provisioner's finalizer.
    pub adopted: bool,
    pub deleting: bool,
    /// Its NodeClass exists (any provisioner's, in any pool).
    pub class_known: bool,
    /// Its status records the MachineDeployment it was raised for.
    pub deployment_recorded: bool,
}

/// Requests this provisioner adopted whose NodeClass is gone before it asked any
/// MachineDeployment for them (none recorded): no deployment's look reaches them, so they are
/// handed back untaken, each with whether it is being deleted (then only its finalizer goes;
/// else it goes back to `Pending` too, and the capacity tick withdraws a Pending request of a
/// deleted class). Pure.
pub fn untaken<'a>(requests: impl IntoIterator<Item = Seen<'a>>) -> Vec<(&'a str, bool)> {
    requests
        .into_iter()
        .filter(|r| r.adopted && !r.class_known && !r.deployment_recorded)
        .map(|r| (r.name, r.deleting))
        .collect()
}

/// Placement Nodes whose recorded Machine (`MACHINE_ANNOTATION`) is not the one their request
/// records (`status.machine`): the Machine was replaced while the Node could not be written (it
/// was being deleted), or the Node was made from an older look. Each with the Machine to record,
/// by Node name. A request that records no Machine, or whose Node is not there, asks nothing.
/// Pure.
pub fn stale_records<'a>(
    requests: impl IntoIterator<Item = (&'a str, &'a str)>,
    recorded: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut stale: Vec<(String, String)> = requests
        .into_iter()
        .filter(|(_, machine)| !machine.is_empty())
        .filter_map(|(node, machine)| {
            let found = recorded.get(node)?;
            (found != machine).then(|| (node.to_owned(), machine.to_owned()))
        })
        .collect();
    stale.sort();
    stale
}

/// Why a class's MachineDeployment cannot be used now: the `Available=False` reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unusable {
    /// The cluster serves no Cluster API MachineDeployments.
    ClusterApiMissing,
    NotFound,
    /// The controller may not read it.
    Forbidden,
    /// At cluster-autoscaler's max size.
    MaxSize,
    /// Named by more than one class.
    Shared,
}

impl Unusable {
    /// The condition's and the Event's reason.
    pub fn reason(self) -> &'static str {
        match self {
            Unusable::ClusterApiMissing => "ClusterAPIMissing",
            Unusable::NotFound => "MachineDeploymentNotFound",
            Unusable::Forbidden => "Forbidden",
            Unusable::MaxSize => "MaxSize",
            Unusable::Shared => "MachineDeploymentShared",
        }
    }
}

/// Why a class's MachineDeployment cannot be used now, in a sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable {
    pub why: Unusable,
    pub message: String,
}

/// What reading a deployment answered.
#[derive(Clone, Debug)]
pub enum Found {
    /// Cluster API's kinds are not served.
    NotServed,
    Present(Deployment),
    Missing,
    /// Forbidden, with the API server's message.
    Forbidden(String),
    /// Another error: nothing is said (the look ends, and reads again).
    Unknown,
}

/// Why the deployment `key`, named by the classes `classes`, cannot be used now; `None` when it
/// can (or when the read failed otherwise: nothing is said then).
pub fn unavailable(key: &NamespacedName, classes: &[&str], found: &Found) -> Option<Unavailable> {
    // Two classes naming one deployment: its machines cannot be told apart, and what one
    // delivers would be bought as the other (a small machine bought for a large tenant).
    if classes.len() > 1 {
        return Some(Unavailable {
            why: Unusable::Shared,
            message: format!(
                "MachineDeployment {key} is named by NodeClasses {}: each class needs a \
                 MachineDeployment of its own (their machines cannot be told apart)",
                classes.join(", ")
            ),
        });
    }
    let (why, message) = match found {
        Found::NotServed => (
            Unusable::ClusterApiMissing,
            format!(
                "the cluster serves no cluster.x-k8s.io/v1beta2 MachineDeployments: \
                 MachineDeployment {key} cannot be scaled"
            ),
        ),
        Found::Present(deployment) => {
            let max = deployment.max_size?;
            if deployment.replicas < max {
                return None;
            }
            (
                Unusable::MaxSize,
                format!(
                    "MachineDeployment {key} is at its max size, {max} replicas \
                     ({MAX_SIZE_ANNOTATION})"
                ),
            )
        }
        Found::Missing => (
            Unusable::NotFound,
            format!("MachineDeployment {key} does not exist"),
        ),
        Found::Forbidden(status) => (
            Unusable::Forbidden,
            format!("the controller may not read MachineDeployment {key}: {status}"),
        ),
        Found::Unknown => return None,
    };
    Some(Unavailable { why, message })
}

/// The `Available` condition a class whose deployment is `key` carries, when the one it has
/// (among `previous`) says something else; `None` when it already says this.
pub fn available_condition(
    previous: &[Condition],
    key: &NamespacedName,
    unavailable: Option<&Unavailable>,
    generation: Option<i64>,
    now: &Time,
) -> Option<Condition> {
    let (status, reason, message) = match unavailable {
        Some(why) => ("False", why.why.reason(), why.message.clone()),
        None => (
            "True",
            "MachineDeploymentReady",
            format!("machines of this class come from MachineDeployment {key}"),
        ),
    };
    let current = previous.iter().find(|c| c.type_ == AVAILABLE_CONDITION);
    if current.is_some_and(|c| c.status == status && c.reason == reason && c.message == message) {
        return None;
    }
    Some(Condition::keeping_time(
        previous,
        AVAILABLE_CONDITION,
        status,
        reason,
        message,
        generation,
        now,
    ))
}

/// What a running Machine's placement Node gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub capacity: ResourceAmounts,
    /// Set when the Machine offers less than its class promises: the Warning's note.
    pub short: Option<String>,
}

/// The placement Node's capacity for Machine `machine` (core Node `core`): what the class
/// `promised`, or what the core Node `offered` where smaller (`None`: not known, the promise).
pub fn delivery(
    promised: ResourceAmounts,
    offered: Option<ResourceAmounts>,
    machine: &str,
    core: &str,
) -> Delivery {
    let capacity = offered.map_or(promised, |o| {
        ResourceAmounts::new(
            promised.threads.min(o.threads),
            promised.memory_gb.min(o.memory_gb),
            promised.storage_gb.min(o.storage_gb),
        )
    });
    let short = (capacity != promised).then(|| {
        format!(
            "Machine {machine} (Node {core}) offers {} threads, {} GB memory, {} GB storage, \
             less than its class promises ({} threads, {} GB memory, {} GB storage): the \
             placement Node gets what it offers",
            capacity.threads,
            capacity.memory_gb,
            capacity.storage_gb,
            promised.threads,
            promised.memory_gb,
            promised.storage_gb
        )
    });
    Delivery { capacity, short }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use NodeRequestPhase::*;

    const TIMEOUT: Duration = Duration::from_secs(1800);

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    fn now() -> Timestamp {
        at(1000)
    }

    /// A deployment this provisioner never scaled (no intended replicas recorded).
    fn md(replicas: i32, generation: i64) -> Deployment {
        Deployment {
            replicas,
            generation,
            max_size: None,
            intended: None,
        }
    }

    /// A deployment whose replicas record says `intended`.
    fn intending(intended: i32, deployment: Deployment) -> Deployment {
        Deployment {
            intended: Some(intended),
            ..deployment
        }
    }

    /// A request made at 100 s, taken up, nothing raised yet.
    fn request(name: &'static str) -> Request<'static> {
        Request {
            name,
            created: at(100),
            phase: Provisioning,
            deleted: None,
            adopted: true,
            scale_generation: None,
            machine: "",
        }
    }

    fn raised(mut r: Request<'static>, generation: i64) -> Request<'static> {
        r.scale_generation = Some(generation);
        r
    }

    /// A Machine made at 200 s, unclaimed, Provisioning.
    fn machine(name: &'static str) -> Machine<'static> {
        Machine {
            name,
            created: at(200),
            claim: None,
            marked: false,
            deleting: false,
            running_node: None,
            failure: None,
        }
    }

    fn claimed(mut m: Machine<'static>, request: &'static str) -> Machine<'static> {
        m.claim = Some(request);
        m
    }

    fn s(text: &str) -> String {
        text.to_owned()
    }

    fn run(
        deployment: Deployment,
        machines: &[Machine<'static>],
        requests: &[Request<'static>],
        nodes: &[(&'static str, NodeSeen)],
    ) -> Vec<Step> {
        let nodes = nodes.iter().copied().collect();
        plan(&deployment, machines, requests, &nodes, now(), TIMEOUT)
    }

    #[test]
    fn a_new_request_is_taken_up_then_raised_for_once() {
        let pending = Request {
            phase: Pending,
            adopted: false,
            ..request("r1")
        };
        assert_eq!(
            run(
                md(2, 7),
                &[machine("old-a"), machine("old-b")],
                &[pending],
                &[]
            ),
            vec![
                Step::Adopt { request: s("r1") },
                Step::Intend {
                    request: s("r1"),
                    generation: 7
                },
                Step::Scale { from: 2, to: 3 },
            ]
        );
        // Intent written, the raise refused (generation unchanged): raise again, no new intent.
        assert_eq!(
            run(md(2, 7), &[], &[raised(request("r1"), 7)], &[]),
            vec![Step::Scale { from: 2, to: 3 }]
        );
        // The raise made (generation moved), the Machine not there yet: wait.
        let mut before = machine("old");
        before.created = at(50);
        assert_eq!(
            run(
                md(3, 8),
                &[before.clone(), before],
                &[raised(request("r1"), 7)],
                &[]
            ),
            vec![]
        );
    }

    #[test]
    fn a_request_is_taken_up_again_until_both_its_finalizer_and_phase_say_so() {
        // The finalizer made, the status write lost; or the other way round.
        for (adopted, phase) in [(true, Pending), (false, Provisioning)] {
            let r = Request {
                adopted,
                phase,
                ..raised(request("r1"), 7)
            };
            assert_eq!(
                run(md(1, 8), &[], &[r], &[]).first(),
                Some(&Step::Adopt { request: s("r1") }),
                "{adopted} {phase:?}"
            );
        }
    }

    #[test]
    fn a_request_is_late_only_past_the_timeout() {
        // Raised for, nothing made, exactly the timeout waited: it still waits.
        let mut r = raised(request("r1"), 7);
        r.created = at(1000 - 1800);
        assert_eq!(run(md(1, 8), &[], std::slice::from_ref(&r), &[]), vec![]);
        r.created = at(1000 - 1801);
        assert_eq!(
            run(md(1, 8), &[], &[r], &[]),
            vec![Step::Fail {
                request: s("r1"),
                message: s("no Machine was made for it within 1800 s"),
            }]
        );
    }

    #[test]
    fn several_requests_are_raised_for_in_one_write_in_age_order() {
        let mut younger = request("r2");
        younger.created = at(150);
        assert_eq!(
            run(md(0, 1), &[], &[younger, request("r1")], &[]),
            vec![
                Step::Intend {
                    request: s("r1"),
                    generation: 1
                },
                Step::Intend {
                    request: s("r2"),
                    generation: 1
                },
                Step::Scale { from: 0, to: 2 },
            ]
        );
    }

    #[test]
    fn a_raised_request_claims_a_new_machine_never_an_older_one() {
        let mut older = machine("before-it");
        older.created = at(50);
        assert_eq!(
            run(
                md(2, 8),
                &[older.clone(), machine("new")],
                &[raised(request("r1"), 7)],
                &[]
            ),
            vec![Step::Claim {
                machine: s("new"),
                request: s("r1"),
                give_back: false
            }]
        );
        // Only the older Machine, nothing coming: someone lowered replicas; raise again.
        assert_eq!(
            run(md(1, 9), &[older], &[raised(request("r1"), 7)], &[]),
            vec![
                Step::Intend {
                    request: s("r1"),
                    generation: 9
                },
                Step::Scale { from: 1, to: 2 },
            ]
        );
    }

    #[test]
    fn a_claim_edited_by_hand_is_repaired_from_the_record_and_fails_nothing() {
        // Requests a and b, each Ready with its Machine recorded and its Node made; someone
        // re-points b's Machine's claim at a.
        let ready = |name: &'static str, machine: &'static str| Request {
            phase: Ready,
            machine,
            ..raised(request(name), 7)
        };
        let running = |name: &'static str, claim: &'static str, node: &'static str| Machine {
            running_node: Some(node),
            ..claimed(machine(name), claim)
        };
        let requests = [ready("a", "ma"), ready("b", "mb")];
        let machines = [running("ma", "a", "w1"), running("mb", "a", "w2")];
        let nodes = [("a", NodeSeen::Present), ("b", NodeSeen::Present)];
        // b keeps its Machine (nothing fails, nothing is raised); the claim is written back.
        assert_eq!(
            run(md(2, 8), &machines, &requests, &nodes),
            vec![Step::Repair {
                machine: s("mb"),
                request: s("b"),
                found: Some(s("a")),
            }]
        );
        // A claim naming a request that records another live Machine names nothing: that
        // Machine is not given back for it, and a request raised for a Machine takes it.
        let stray = running("mx", "a", "w3");
        assert_eq!(
            run(
                md(2, 8),
                &[machines[0].clone(), stray.clone()],
                &requests[..1],
                &nodes[..1]
            ),
            vec![]
        );
        let waiting = Request {
            created: at(150),
            ..raised(request("c"), 7)
        };
        assert_eq!(
            run(
                md(2, 8),
                &[machines[0].clone(), stray],
                &[requests[0].clone(), waiting],
                &nodes[..1]
            ),
            vec![Step::Claim {
                machine: s("mx"),
                request: s("c"),
                give_back: false
            }]
        );
        // A claim not yet recorded (the replacement of a Machine someone deleted) still counts.
        let deleting = Machine {
            deleting: true,
            ..running("ma", "a", "w1")
        };
        let replacement = claimed(machine("ma2"), "a");
        assert_eq!(
            run(
                md(1, 8),
                &[deleting, replacement],
                &requests[..1],
                &nodes[..1]
            ),
            vec![Step::Record {
                request: s("a"),
                machine: s("ma2")
            }]
        );
    }

    #[test]
    fn a_claimed_machine_is_recorded_then_made_a_node_then_ready() {
        let r = raised(request("r1"), 7);
        let mut m = claimed(machine("m1"), "r1");
        assert_eq!(
            run(md(1, 8), &[m.clone()], std::slice::from_ref(&r), &[]),
            vec![Step::Record {
                request: s("r1"),
                machine: s("m1")
            }]
        );
        let r = Request { machine: "m1", ..r };
        assert_eq!(
            run(md(1, 8), &[m.clone()], std::slice::from_ref(&r), &[]),
            vec![]
        );
        m.running_node = Some("worker-9");
        assert_eq!(
            run(md(1, 8), &[m.clone()], std::slice::from_ref(&r), &[]),
            vec![Step::MakeNode {
                request: s("r1"),
                machine: s("m1"),
                node: s("worker-9")
            }]
        );
        assert_eq!(
            run(
                md(1, 8),
                &[m.clone()],
                std::slice::from_ref(&r),
                &[("r1", NodeSeen::Present)]
            ),
            vec![Step::Ready { request: s("r1") }]
        );
        let ready = Request { phase: Ready, ..r };
        assert_eq!(
            run(md(1, 8), &[m], &[ready], &[("r1", NodeSeen::Present)]),
            vec![]
        );
    }

    #[test]
    fn a_failed_late_or_vanished_machine_fails_its_request() {
        let r = Request {
            machine: "m1",
            ..raised(request("r1"), 7)
        };
        let mut failed = claimed(machine("m1"), "r1");
        failed.failure = Some(s("CreateError: no stock"));
        assert_eq!(
            run(md(1, 8), &[failed], std::slice::from_ref(&r), &[]),
            vec![Step::Fail {
                request: s("r1"),
                message: s("Machine m1 failed: CreateError: no stock"),
            }]
        );
        let mut late = r.clone();
        late.created = at(-1000);
        let mut slow = claimed(machine("m1"), "r1");
        slow.created = at(-900);
        assert_eq!(
            run(md(1, 8), &[slow], &[late.clone()], &[]),
            vec![Step::Fail {
                request: s("r1"),
                message: s("Machine m1 is not Running after 1800 s"),
            }]
        );
        // A Machine made later (a replacement) has its own time.
        assert_eq!(
            run(
                md(1, 8),
                &[claimed(machine("m1"), "r1")],
                &[late.clone()],
                &[]
            ),
            vec![]
        );
        // Deleted by someone else and replicas lowered: nothing replaces it.
        let mut before = machine("other");
        before.created = at(50);
        assert_eq!(
            run(md(1, 8), &[before], &[r], &[]),
            vec![Step::Fail {
                request: s("r1"),
                message: s("Machine m1 was deleted by someone else, and nothing replaces it"),
            }]
        );
        let unclaimed_late = Request {
            machine: "",
            ..late
        };
        assert_eq!(
            run(md(1, 8), &[], &[unclaimed_late], &[]),
            vec![Step::Fail {
                request: s("r1"),
                message: s("no Machine was made for it within 1800 s"),
            }]
        );
    }

    #[test]
    fn a_failed_request_waits_for_the_controller_to_delete_it() {
        let failed = Request {
            phase: Failed,
            machine: "m1",
            ..raised(request("r1"), 7)
        };
        let mut m = claimed(machine("m1"), "r1");
        m.failure = Some(s("x"));
        assert_eq!(run(md(1, 8), &[m], &[failed], &[]), vec![]);
    }

    #[test]
    fn a_hand_back_drains_the_node_then_marks_then_lowers_then_releases() {
        let going = Request {
            deleted: Some(at(500)),
            phase: Ready,
            machine: "m1",
            ..raised(request("r1"), 7)
        };
        let mut m = claimed(machine("m1"), "r1");
        m.running_node = Some("w");
        // Someone else's, there before the request.
        let mut other = machine("theirs");
        other.created = at(50);
        let steps =
            |machines: &[Machine<'static>], replicas, nodes: &[(&'static str, NodeSeen)]| {
                run(
                    md(replicas, 9),
                    machines,
                    std::slice::from_ref(&going),
                    nodes,
                )
            };
        assert_eq!(
            steps(&[m.clone(), other.clone()], 2, &[("r1", NodeSeen::Present)]),
            vec![Step::DeleteNode { request: s("r1") }]
        );
        assert_eq!(
            steps(
                &[m.clone(), other.clone()],
                2,
                &[("r1", NodeSeen::Deleting)]
            ),
            vec![]
        );
        // Marked and lowered in one look, then released: the mark and the claim are the record.
        assert_eq!(
            steps(&[m.clone(), other.clone()], 2, &[]),
            vec![
                Step::Mark { machine: s("m1") },
                Step::Scale { from: 2, to: 1 },
                Step::Release { request: s("r1") }
            ]
        );
        // The mark made, the lowering refused: lower.
        m.marked = true;
        assert_eq!(
            steps(&[m.clone(), other.clone()], 2, &[]),
            vec![
                Step::Scale { from: 2, to: 1 },
                Step::Release { request: s("r1") }
            ]
        );
        // Lowered, the release refused, Cluster API not yet deleting it: the lowering under way
        // counts; nothing twice.
        assert_eq!(
            steps(&[m.clone(), other.clone()], 1, &[]),
            vec![Step::Release { request: s("r1") }]
        );
        m.deleting = true;
        assert_eq!(
            steps(&[m, other.clone()], 1, &[]),
            vec![Step::Release { request: s("r1") }]
        );
        // Gone altogether: the record in the request's status says it was claimed.
        assert_eq!(
            steps(&[other.clone()], 1, &[]),
            vec![Step::Release { request: s("r1") }]
        );
        // Nor is it owed one for someone else's Machine, new or deleted by hand meanwhile.
        let mut newer = machine("theirs-new");
        newer.created = at(300);
        assert_eq!(
            steps(&[other.clone(), newer], 2, &[]),
            vec![Step::Release { request: s("r1") }]
        );
        let mut going_by_hand = machine("theirs-going");
        going_by_hand.deleting = true;
        assert_eq!(
            steps(&[other, going_by_hand], 2, &[]),
            vec![Step::Release { request: s("r1") }]
        );
        // Its Node first, whatever became of its Machine: deleted once, then waited for.
        assert_eq!(
            steps(&[], 0, &[("r1", NodeSeen::Present)]),
            vec![Step::DeleteNode { request: s("r1") }]
        );
        assert_eq!(steps(&[], 0, &[("r1", NodeSeen::Deleting)]), vec![]);
    }

    #[test]
    fn a_machine_someone_else_deleted_is_replaced_and_the_request_takes_the_replacement() {
        // r1 is Ready on m1; m1 is deleted by hand (no mark, replicas kept).
        let ready = Request {
            phase: Ready,
            machine: "m1",
            ..raised(request("r1"), 7)
        };
        let mut lost = claimed(machine("m1"), "r1");
        lost.deleting = true;
        let node = [("r1", NodeSeen::Present)];
        // The replacement is coming: wait; once made, claim it (its Node stays).
        assert_eq!(
            run(
                md(1, 8),
                std::slice::from_ref(&lost),
                std::slice::from_ref(&ready),
                &node
            ),
            vec![]
        );
        assert_eq!(
            run(
                md(1, 8),
                &[lost.clone(), machine("m2")],
                std::slice::from_ref(&ready),
                &node
            ),
            vec![Step::Claim {
                machine: s("m2"),
                request: s("r1"),
                give_back: false
            }]
        );
        // A deleted request whose Machine is being deleted by hand lowers replicas while it is
        // still there (no replacement made), or gives back a replacement already made.
        let going = Request {
            deleted: Some(at(500)),
            ..ready.clone()
        };
        // While its Node still drains, too: the Node is deleted and replicas lowered in the
        // same look, before the Machine is gone (then a replacement could not be told from a
        // Machine a person added).
        // Nothing of it is left to give back then: released in the same look.
        assert_eq!(
            run(
                md(1, 8),
                std::slice::from_ref(&lost),
                std::slice::from_ref(&going),
                &node
            ),
            vec![
                Step::DeleteNode { request: s("r1") },
                Step::Scale { from: 1, to: 0 },
                Step::Release { request: s("r1") }
            ]
        );
        let steps = |machines: &[Machine<'static>], replicas| {
            run(md(replicas, 8), machines, std::slice::from_ref(&going), &[])
        };
        assert_eq!(
            steps(std::slice::from_ref(&lost), 1),
            vec![
                Step::Scale { from: 1, to: 0 },
                Step::Release { request: s("r1") }
            ]
        );
        assert_eq!(
            steps(&[lost.clone(), machine("m2")], 1),
            vec![
                Step::Claim {
                    machine: s("m2"),
                    request: s("r1"),
                    give_back: true
                },
                Step::Scale { from: 1, to: 0 },
                Step::Release { request: s("r1") }
            ]
        );
        // Replicas lowered with the deletion: nothing replaces it, nothing to give back.
        assert_eq!(
            steps(std::slice::from_ref(&lost), 0),
            vec![Step::Release { request: s("r1") }]
        );
        // Marked by us and lowered for: our own hand-back under way.
        lost.marked = true;
        assert_eq!(steps(&[lost], 0), vec![Step::Release { request: s("r1") }]);
        // (Marked, then deleted by someone else before our lowering was made, it looks the
        // same: its replacement is not given back. docs/node-requests.md says so.)
    }

    #[test]
    fn a_marked_machine_is_lowered_for_only_once_the_replacement_a_request_waits_for_is_made() {
        // r1's Machine m1 failed and r1 is being deleted: m1 is marked, to go back. r2's m2 was
        // deleted by hand: its replacement is coming (replicas 2, one Machine). Lowering now
        // would leave replicas at the one marked Machine: nothing made for r2, and a leak once
        // r2 gives up. So: mark, no lowering; once the replacement m3 is made, r2 claims it and
        // replicas go down for m1.
        let mut failed = claimed(machine("m1"), "r1");
        failed.failure = Some(s("boom"));
        let going = Request {
            phase: Failed,
            deleted: Some(at(500)),
            machine: "m1",
            ..raised(request("r1"), 7)
        };
        let waiting = Request {
            machine: "m2",
            ..raised(request("r2"), 8)
        };
        let requests = [going, waiting];
        // r1 is released with the mark: the mark and the claim are the record.
        assert_eq!(
            run(md(2, 9), std::slice::from_ref(&failed), &requests, &[]),
            vec![
                Step::Mark { machine: s("m1") },
                Step::Release { request: s("r1") }
            ]
        );
        failed.marked = true;
        let mut replacement = machine("m3");
        replacement.created = at(300);
        assert_eq!(
            run(md(2, 9), &[failed, replacement], &requests, &[]),
            vec![
                Step::Claim {
                    machine: s("m3"),
                    request: s("r2"),
                    give_back: false
                },
                Step::Scale { from: 2, to: 1 },
                Step::Release { request: s("r1") }
            ]
        );
    }

    #[test]
    fn a_machine_whose_request_vanished_goes_back_and_is_never_claimed_again() {
        let mut orphan = claimed(machine("m1"), "gone");
        assert_eq!(
            run(
                md(1, 9),
                &[orphan.clone()],
                &[raised(request("r2"), 8)],
                &[]
            ),
            vec![
                Step::Mark { machine: s("m1") },
                Step::Scale { from: 1, to: 0 },
            ]
        );
        // r2 is raised for once m1 is being deleted: a raise before would leave it in place.
        orphan.marked = true;
        assert_eq!(
            run(
                md(0, 10),
                &[orphan.clone()],
                &[raised(request("r2"), 8)],
                &[]
            ),
            vec![]
        );
        orphan.deleting = true;
        assert_eq!(
            run(
                md(0, 10),
                &[orphan.clone()],
                &[raised(request("r2"), 8)],
                &[]
            ),
            vec![
                Step::Intend {
                    request: s("r2"),
                    generation: 10
                },
                Step::Scale { from: 0, to: 1 },
            ]
        );
        orphan.deleting = false;
        assert_eq!(
            run(md(1, 9), &[orphan], &[], &[("gone", NodeSeen::Present)]),
            vec![Step::DeleteNode { request: s("gone") }]
        );
    }

    #[test]
    fn a_request_deleted_before_its_machine_came_gives_that_machine_back() {
        let going = Request {
            deleted: Some(at(500)),
            ..raised(request("r1"), 7)
        };
        // Coming: wait for it.
        assert_eq!(
            run(md(1, 8), &[], std::slice::from_ref(&going), &[]),
            vec![]
        );
        // Made: claim it and mark it in one write.
        assert_eq!(
            run(
                md(1, 8),
                &[machine("m1")],
                std::slice::from_ref(&going),
                &[]
            ),
            vec![
                Step::Claim {
                    machine: s("m1"),
                    request: s("r1"),
                    give_back: true
                },
                Step::Scale { from: 1, to: 0 },
                Step::Release { request: s("r1") }
            ]
        );
        // Never raised for, or nothing made nor coming: nothing to give back.
        let never = Request {
            scale_generation: Some(8),
            ..going.clone()
        };
        assert_eq!(
            run(md(0, 8), &[], &[never], &[]),
            vec![Step::Release { request: s("r1") }]
        );
        assert_eq!(
            run(md(0, 8), &[], &[going], &[]),
            vec![Step::Release { request: s("r1") }]
        );
        // Not ours (no finalizer): left alone.
        let foreign = Request {
            deleted: Some(at(500)),
            adopted: false,
            ..request("x")
        };
        assert_eq!(run(md(0, 8), &[], &[foreign], &[]), vec![]);
    }

    #[test]
    fn a_deleted_request_whose_machine_someone_is_deleting_lowers_replicas_instead_of_a_replacement()
     {
        // r1 is being deleted (Failed, say) while a person deletes its Machine m1 (no mark);
        // replicas say 1: once m1 is gone its MachineSet would make a replacement nobody
        // claims. While m1 is still there, replicas go to 0 (Cluster API deletes m1, already
        // going, first), and nothing is made.
        let going = Request {
            deleted: Some(at(500)),
            phase: Failed,
            machine: "m1",
            ..raised(request("r1"), 7)
        };
        let deleting = Machine {
            deleting: true,
            ..claimed(machine("m1"), "r1")
        };
        assert_eq!(
            run(
                md(1, 8),
                std::slice::from_ref(&deleting),
                std::slice::from_ref(&going),
                &[]
            ),
            vec![
                Step::Scale { from: 1, to: 0 },
                Step::Release { request: s("r1") }
            ]
        );
        // Lowered (nothing comes): released, while m1 is still going or once it is gone.
        assert_eq!(
            run(md(0, 9), &[deleting], std::slice::from_ref(&going), &[]),
            vec![Step::Release { request: s("r1") }]
        );
        assert_eq!(
            run(md(0, 9), &[], &[going], &[]),
            vec![Step::Release { request: s("r1") }]
        );
    }

    #[test]
    fn a_deleted_requests_vanished_machine_is_replaced_only_while_replicas_are_as_we_wrote_them() {
        // r1 (made at 100, Ready on m1) was deleted at 500 and its Node is gone; m1 is gone
        // altogether, unseen while going: our own give-back (marked, lowered), or deleted by
        // someone else (its MachineSet replaces it). Replicas as we last wrote them tell which.
        let going = Request {
            deleted: Some(at(500)),
            phase: Ready,
            machine: "m1",
            ..raised(request("r1"), 7)
        };
        let made = |name: &'static str, seconds: i64| Machine {
            created: at(seconds),
            ..machine(name)
        };
        let given_back = vec![
            Step::Claim {
                machine: s("m2"),
                request: s("r1"),
                give_back: true,
            },
            Step::Scale { from: 1, to: 0 },
            Step::Release { request: s("r1") },
        ];
        let released = vec![Step::Release { request: s("r1") }];
        /// (case, deployment, its Machines, the placement Nodes, the steps)
        type Case<'a> = (
            &'a str,
            Deployment,
            Vec<Machine<'static>>,
            Vec<(&'static str, NodeSeen)>,
            Vec<Step>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                // 1 replica, 1 intended: nobody changed them, so m2 (made at 600, after r1 was
                // deleted) is m1's replacement: claimed and given back, 1 - 1 = 0.
                "a replacement made",
                intending(1, md(1, 8)),
                vec![made("m2", 600)],
                vec![],
                given_back.clone(),
            ),
            (
                // 1 replica, 0 Machines: the replacement is coming; lowered so none is made.
                "a replacement coming",
                intending(1, md(1, 8)),
                vec![],
                vec![],
                vec![
                    Step::Scale { from: 1, to: 0 },
                    Step::Release { request: s("r1") },
                ],
            ),
            (
                // Our give-back lowered replicas with its mark (0 intended, 0 there; its
                // release refused, say): nothing comes, nothing to take.
                "our own give-back",
                intending(0, md(0, 9)),
                vec![],
                vec![],
                released.clone(),
            ),
            (
                // No record (never scaled here, or an older version): as before, released.
                "no record",
                md(1, 8),
                vec![made("m2", 600)],
                vec![],
                released.clone(),
            ),
            (
                // 2 replicas, 1 intended: a person raised them; m2 is theirs.
                "a person's raise",
                intending(1, md(2, 9)),
                vec![made("m2", 600)],
                vec![],
                released.clone(),
            ),
            (
                // 1 replica, 2 intended: a person lowered them; nothing of ours comes.
                "a person's lowering",
                intending(2, md(1, 9)),
                vec![made("m2", 600)],
                vec![],
                released.clone(),
            ),
            (
                // Made at 400, while r1 was live: not its replacement (a look would have
                // claimed it for r1 then).
                "a Machine made before the deletion",
                intending(1, md(1, 8)),
                vec![made("m0", 400)],
                vec![],
                released.clone(),
            ),
            (
                // Its Node still drains: deleted first; the replacement is settled once it is
                // gone.
                "its Node still there",
                intending(1, md(1, 8)),
                vec![made("m2", 600)],
                vec![("r1", NodeSeen::Present)],
                vec![Step::DeleteNode { request: s("r1") }],
            ),
        ];
        for (case, deployment, machines, nodes, want) in cases {
            assert_eq!(
                run(deployment, &machines, std::slice::from_ref(&going), &nodes),
                want,
                "{case}"
            );
        }
        // A live request waiting for its raise is served first: r2 (made at 550) takes m2, and
        // r1's replacement, still coming, is lowered for: 2 - 1 = 1.
        let waiting = Request {
            created: at(550),
            ..raised(request("r2"), 8)
        };
        assert_eq!(
            run(
                intending(2, md(2, 9)),
                &[made("m2", 600)],
                &[going, waiting],
                &[]
            ),
            vec![
                Step::Claim {
                    machine: s("m2"),
                    request: s("r2"),
                    give_back: false
                },
                Step::Scale { from: 2, to: 1 },
                Step::Release { request: s("r1") }
            ]
        );
    }

    #[test]
    fn raises_stop_at_the_autoscalers_max_size_oldest_first() {
        let mut younger = request("r2");
        younger.created = at(150);
        let capped = Deployment {
            max_size: Some(3),
            ..md(2, 4)
        };
        assert_eq!(
            run(
                capped,
                &[machine("a"), machine("b")],
                &[younger, request("r1")],
                &[]
            ),
            vec![
                Step::Intend {
                    request: s("r1"),
                    generation: 4
                },
                Step::Scale { from: 2, to: 3 },
            ]
        );
    }

    #[test]
    fn a_deleted_request_is_settled_after_the_live_ones_and_takes_nothing_they_wait_for() {
        // Both raised for; r1 was deleted before its Machine came. The first Machine made is
        // the live r2's; r1 waits for the other, then gives it back.
        let going = Request {
            deleted: Some(at(500)),
            ..raised(request("r1"), 7)
        };
        let mut younger = raised(request("r2"), 8);
        younger.created = at(150);
        assert_eq!(
            run(
                md(2, 9),
                &[machine("m2")],
                &[going.clone(), younger.clone()],
                &[]
            ),
            vec![Step::Claim {
                machine: s("m2"),
                request: s("r2"),
                give_back: false
            }]
        );
        let mut third = machine("m3");
        third.created = at(300);
        assert_eq!(
            run(
                md(2, 9),
                &[claimed(machine("m2"), "r2"), third],
                &[going, younger],
                &[]
            ),
            vec![
                Step::Record {
                    request: s("r2"),
                    machine: s("m2")
                },
                Step::Claim {
                    machine: s("m3"),
                    request: s("r1"),
                    give_back: true
                },
                Step::Scale { from: 2, to: 1 },
                Step::Release { request: s("r1") }
            ]
        );
    }

    #[test]
    fn a_machine_coming_for_one_request_is_not_taken_by_another() {
        let mut younger = raised(request("r2"), 7);
        younger.created = at(150);
        // Two raised for, one made and one coming: the older claims, the younger waits.
        assert_eq!(
            run(
                md(2, 8),
                &[machine("m1")],
                &[younger, raised(request("r1"), 7)],
                &[]
            ),
            vec![Step::Claim {
                machine: s("m1"),
                request: s("r1"),
                give_back: false
            }]
        );
    }

    #[test]
    fn a_node_recording_another_machine_than_its_request_is_told_the_requests() {
        let recorded = BTreeMap::from([
            ("agrees".to_owned(), "fleet/m1".to_owned()),
            ("stale".to_owned(), "fleet/m-old".to_owned()),
            ("unrecorded-request".to_owned(), "fleet/m3".to_owned()),
        ]);
        let requests = [
            ("agrees", "fleet/m1"),
            ("stale", "fleet/m2"),
            // The request records no Machine yet: nothing to say.
            ("unrecorded-request", ""),
            // No Node: nothing to write.
            ("no-node", "fleet/m4"),
        ];
        assert_eq!(
            stale_records(requests, &recorded),
            [("stale".to_owned(), "fleet/m2".to_owned())]
        );
    }

    #[test]
    fn an_adopted_request_whose_class_went_before_any_raise_is_handed_back_untaken() {
        let seen = |name, adopted, deleting, class_known, deployment_recorded| Seen {
            name,
            adopted,
            deleting,
            class_known,
            deployment_recorded,
        };
        let requests = [
            seen("untaken", true, false, false, false),
            seen("untaken-deleting", true, true, false, false),
            // Raised for: its deployment's look settles it.
            seen("raised", true, false, false, true),
            // Its class is there: its deployment's look (or another provisioner) has it.
            seen("classed", true, false, true, false),
            // Never adopted: the capacity tick withdraws it.
            seen("not-ours", false, false, false, false),
        ];
        assert_eq!(
            untaken(requests),
            [("untaken", false), ("untaken-deleting", true)]
        );
    }

    fn key() -> NamespacedName {
        NamespacedName::parse("fleet/md").unwrap()
    }

    #[test]
    fn a_deployment_is_unusable_when_shared_unserved_missing_forbidden_or_full() {
        let capped = |replicas| {
            Found::Present(Deployment {
                max_size: Some(3),
                ..md(replicas, 1)
            })
        };
        let cases = [
            // Shared wins whatever the deployment says.
            (vec!["a-small", "b-big"], capped(0), Some(Unusable::Shared)),
            (
                vec!["a"],
                Found::NotServed,
                Some(Unusable::ClusterApiMissing),
            ),
            (vec!["a"], Found::Missing, Some(Unusable::NotFound)),
            (
                vec!["a"],
                Found::Forbidden("no".into()),
                Some(Unusable::Forbidden),
            ),
            // 3 replicas of at most 3: full; 2 of 3: one more fits.
            (vec!["a"], capped(3), Some(Unusable::MaxSize)),
            (vec!["a"], capped(2), None),
            (vec!["a"], Found::Present(md(9, 1)), None),
            // Another error says nothing (read again at the next look).
            (vec!["a"], Found::Unknown, None),
        ];
        for (classes, found, want) in cases {
            let got = unavailable(&key(), &classes, &found).map(|u| u.why);
            assert_eq!(got, want, "{classes:?} {found:?}");
        }
        let shared = unavailable(&key(), &["a-small", "b-big"], &Found::Missing).unwrap();
        assert_eq!(
            shared.message,
            "MachineDeployment fleet/md is named by NodeClasses a-small, b-big: each class needs \
             a MachineDeployment of its own (their machines cannot be told apart)"
        );
        let full = unavailable(&key(), &["a"], &capped(3)).unwrap();
        assert_eq!(
            full.message,
            "MachineDeployment fleet/md is at its max size, 3 replicas \
             (cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size)"
        );
    }

    #[test]
    fn the_available_condition_is_written_only_when_it_says_something_else() {
        let then = Time(at(10));
        let now = Time(at(20));
        let missing = unavailable(&key(), &["a"], &Found::Missing);
        let full = unavailable(
            &key(),
            &["a"],
            &Found::Present(Deployment {
                max_size: Some(1),
                ..md(1, 1)
            }),
        );
        let said = |unusable: Option<&Unavailable>| {
            available_condition(&[], &key(), unusable, Some(4), &then).unwrap()
        };
        let other = Condition {
            type_: "DeliversAsPromised".into(),
            ..said(None)
        };
        /// (case, the conditions it has, what the look found, what is written: status,
        /// reason, transition time)
        type Case<'a> = (
            &'a str,
            Vec<Condition>,
            Option<&'a Unavailable>,
            Option<(&'a str, &'a str, Time)>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "none yet: True",
                vec![other.clone()],
                None,
                Some(("True", "MachineDeploymentReady", now.clone())),
            ),
            (
                "True, still True: nothing written",
                vec![said(None)],
                None,
                None,
            ),
            (
                "True, now missing: False from now",
                vec![said(None)],
                missing.as_ref(),
                Some(("False", "MachineDeploymentNotFound", now.clone())),
            ),
            (
                "missing, still missing: nothing written",
                vec![said(missing.as_ref())],
                missing.as_ref(),
                None,
            ),
            // Still False, for another reason: the transition time is kept.
            (
                "missing, now full",
                vec![said(missing.as_ref())],
                full.as_ref(),
                Some(("False", "MaxSize", then.clone())),
            ),
            (
                "full, now usable",
                vec![said(full.as_ref())],
                None,
                Some(("True", "MachineDeploymentReady", now.clone())),
            ),
        ];
        for (case, previous, unusable, want) in cases {
            let got = available_condition(&previous, &key(), unusable, Some(4), &now);
            let got = got.map(|c| {
                assert_eq!(c.type_, AVAILABLE_CONDITION, "{case}");
                assert_eq!(c.observed_generation, Some(4), "{case}");
                (c.status, c.reason, c.last_transition_time)
            });
            let want = want.map(|(s, r, t)| (s.to_owned(), r.to_owned(), t));
            assert_eq!(got, want, "{case}");
        }
        assert_eq!(
            said(None).message,
            "machines of this class come from MachineDeployment fleet/md"
        );
    }

    #[test]
    fn a_node_gets_what_its_machine_offers_where_less_than_promised() {
        let promised = ResourceAmounts::new(32, 128, 1000);
        let cases = [
            // Unknown: the promise.
            (None, (32, 128, 1000), false),
            // More than promised: the promise, never more.
            (
                Some(ResourceAmounts::new(48, 256, 2000)),
                (32, 128, 1000),
                false,
            ),
            (Some(promised), (32, 128, 1000), false),
            // 24 threads < 32, 256 GB > 128, 900 GB < 1000: the smaller of each.
            (
                Some(ResourceAmounts::new(24, 256, 900)),
                (24, 128, 900),
                true,
            ),
        ];
        for (offered, (threads, memory, storage), short) in cases {
            let got = delivery(promised, offered, "m1", "w1");
            assert_eq!(
                got.capacity,
                ResourceAmounts::new(threads, memory, storage),
                "{offered:?}"
            );
            assert_eq!(got.short.is_some(), short, "{offered:?}");
        }
        assert_eq!(
            delivery(
                promised,
                Some(ResourceAmounts::new(24, 256, 900)),
                "m1",
                "w1"
            )
            .short,
            Some(
                "Machine m1 (Node w1) offers 24 threads, 128 GB memory, 900 GB storage, less \
                 than its class promises (32 threads, 128 GB memory, 1000 GB storage): the \
                 placement Node gets what it offers"
                    .to_owned()
            )
        );
    }
}
