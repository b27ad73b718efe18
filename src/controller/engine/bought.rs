//! Machines bought and the tenants each was bought for, as the request watch shows them: the
//! engine holds a delivered machine's room for those tenants while they wait
//! (`placement::FifoQueue::hold_bought`).
//!
//! Rules enforced here:
//! - a machine is the Node a request's `status.nodeName` names, else the Node named as the
//!   request, and only while that Node carries the request's label
//!   (`placement.tenant-placer.dev/node-request`): a Node the provisioner made for it;
//! - a Failed or deleted request holds nothing; a relist replaces everything at its end, so a
//!   request deleted while the watch was down is forgotten.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::ResourceExt;
use kube::runtime::watcher;

use crate::api::{NODE_REQUEST_LABEL, NodeRequest, NodeRequestPhase};

/// The requests seen, by name.
#[derive(Debug, Default)]
pub struct Bought(Mutex<Seen>);

#[derive(Debug, Default)]
struct Seen {
    live: HashMap<String, Machine>,
    /// Filled during a relist; replaces `live` at its end.
    relisted: Option<HashMap<String, Machine>>,
}

/// One request's machine: its Node's name and the tenants (namespace/name) it was bought for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub node: String,
    pub tenants: Arc<[String]>,
}

impl Bought {
    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called with every event of the request watch.
    pub fn observe(&self, event: &watcher::Event<NodeRequest>) {
        let mut seen = self.lock();
        match event {
            watcher::Event::Init => seen.relisted = Some(HashMap::new()),
            watcher::Event::InitApply(request) => {
                let relisted = seen.relisted.get_or_insert_with(HashMap::new);
                if let Some(machine) = machine_of(request) {
                    relisted.insert(request.name_any(), machine);
                }
            }
            watcher::Event::InitDone => {
                if let Some(relisted) = seen.relisted.take() {
                    seen.live = relisted;
                }
            }
            watcher::Event::Apply(request) => match machine_of(request) {
                Some(machine) => {
                    seen.live.insert(request.name_any(), machine);
                }
                None => {
                    seen.live.remove(&request.name_any());
                }
            },
            watcher::Event::Delete(request) => {
                seen.live.remove(&request.name_any());
            }
        }
    }

    /// Each live request's name and machine.
    pub fn machines(&self) -> Vec<(String, Machine)> {
        let seen = self.lock();
        seen.live
            .iter()
            .map(|(name, machine)| (name.clone(), machine.clone()))
            .collect()
    }

    /// Whether no request is live (nothing to hold).
    pub fn is_empty(&self) -> bool {
        self.lock().live.is_empty()
    }
}

/// The machine of a request that may hold room, `None` for a Failed one or one for nobody.
fn machine_of(request: &NodeRequest) -> Option<Machine> {
    if request.phase() == NodeRequestPhase::Failed || request.spec.tenants.is_empty() {
        return None;
    }
    let named = request
        .status
        .as_ref()
        .map(|s| s.node_name.as_str())
        .filter(|n| !n.is_empty());
    Some(Machine {
        node: named.map_or_else(|| request.name_any(), str::to_owned),
        tenants: request.spec.tenants.clone().into(),
    })
}

/// Whether a Node with these labels was made for this request.
pub fn made_for(labels: &placement::Labels, request: &str) -> bool {
    labels.get(NODE_REQUEST_LABEL).map(String::as_str) == Some(request)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::{NodeRequestSpec, NodeRequestStatus, ResourceAmounts};

    fn request(name: &str, phase: Option<&str>, node: &str, tenants: &[&str]) -> NodeRequest {
        let mut request = NodeRequest::new(
            name,
            NodeRequestSpec {
                node_class: "box".into(),
                capacity: ResourceAmounts::default(),
                tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
            },
        );
        request.status = phase.map(|phase| {
            serde_json::from_value::<NodeRequestStatus>(serde_json::json!({
                "phase": phase, "nodeName": node, "message": ""
            }))
            .unwrap()
        });
        request
    }

    #[test]
    fn a_machine_is_the_node_its_request_names_until_the_request_fails_or_goes() {
        let bought = Bought::default();
        bought.observe(&watcher::Event::Apply(request("r1", None, "", &["t/a"])));
        bought.observe(&watcher::Event::Apply(request(
            "r2",
            Some("Ready"),
            "m-2",
            &["t/b", "t/c"],
        )));
        assert!(!bought.is_empty());
        let mut machines = bought.machines();
        machines.sort_by(|a, b| a.0.cmp(&b.0));
        let nodes: Vec<(&str, &str, usize)> = machines
            .iter()
            .map(|(r, m)| (r.as_str(), m.node.as_str(), m.tenants.len()))
            .collect();
        assert_eq!(nodes, [("r1", "r1", 1), ("r2", "m-2", 2)]);
        bought.observe(&watcher::Event::Apply(request(
            "r1",
            Some("Failed"),
            "",
            &["t/a"],
        )));
        bought.observe(&watcher::Event::Delete(request("r2", None, "", &["t/b"])));
        assert!(bought.is_empty());
    }

    #[test]
    fn a_relist_forgets_requests_deleted_while_the_watch_was_down() {
        let bought = Bought::default();
        bought.observe(&watcher::Event::Apply(request("gone", None, "", &["t/a"])));
        bought.observe(&watcher::Event::Init);
        bought.observe(&watcher::Event::InitApply(request(
            "kept",
            None,
            "",
            &["t/b"],
        )));
        // Until the relist ends, what was seen stays.
        assert_eq!(bought.machines()[0].0, "gone");
        bought.observe(&watcher::Event::InitDone);
        let names: Vec<String> = bought.machines().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["kept"]);
        let labels = placement::Labels::from([(NODE_REQUEST_LABEL.to_owned(), "kept".to_owned())]);
        assert!(made_for(&labels, "kept") && !made_for(&labels, "gone"));
    }
}
