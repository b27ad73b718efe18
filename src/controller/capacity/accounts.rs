//! What each purchase is used for, judged from one look's snapshot: pure, table-tested.
//!
//! Rules enforced here:
//! - **the record owns the machine**: a request's Node is the one its status names once Ready
//!   (else the one named after it), and only while that Node's label names the request back. A
//!   Node whose label names a live request that does not name it (a copied manifest) is
//!   [`Stray`]: reported, never handed back for that request, never counted as its room;
//! - a Ready request whose Node is not there is [`Use::Orphaned`] (paid for, serving nothing);
//!   one whose Node holds something is [`Use::InUse`]; one whose Node holds nothing is
//!   [`Use::Idle`] unless a waiting tenant could be placed there ([`Use::Awaited`]); a request
//!   in flight is [`Use::Awaited`];
//! - what a class delivers is the smallest capacity, per dimension, of the Nodes its Ready
//!   requests own, when less than the class promises.

use std::collections::{BTreeMap, HashMap};

use placement::Resources;

use crate::api::NodeClass;
pub use crate::api::NodeRequestUse as Use;

/// A live request as the look sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSeen<'a> {
    pub name: &'a str,
    pub class: &'a str,
    /// The Node its status names when Ready (else its own name); `None` while in flight.
    pub node: Option<&'a str>,
}

/// A placement Node as the look sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSeen<'a> {
    /// The request its label names, if any.
    pub labelled_for: Option<&'a str>,
    /// It holds an entry, or cannot be read (then it is never judged empty).
    pub holds: bool,
    /// It is being deleted.
    pub going: bool,
    /// A waiting tenant the queue would place there could use it.
    pub awaited: bool,
    pub capacity: Option<Resources>,
}

/// A Node whose label names a live request that does not own it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stray {
    pub node: String,
    pub labelled_for: String,
    /// The Node the request does own, if any.
    pub owned: Option<String>,
}

/// The accounts of one look.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Accounts {
    /// Each live request's use, and the Node it owns (when it owns one), by request name.
    pub uses: BTreeMap<String, (Use, Option<String>)>,
    pub strays: Vec<Stray>,
    /// Per class, the smallest capacity its owned Nodes report, per dimension.
    pub delivered: BTreeMap<String, Resources>,
}

impl Accounts {
    /// A request's use and the Node it owns, as judged.
    pub fn of(&self, request: &crate::api::NodeRequest) -> Option<&(Use, Option<String>)> {
        self.uses.get(request.metadata.name.as_deref()?)
    }

    /// Whether `node` is owned by a live request (so consolidation may hand it back).
    pub fn owns(&self, node: &str) -> bool {
        self.uses
            .values()
            .any(|(_, owned)| owned.as_deref() == Some(node))
    }
}

/// Judges every live request (pure).
pub fn judge(requests: &[RequestSeen<'_>], nodes: &HashMap<&str, NodeSeen<'_>>) -> Accounts {
    let mut accounts = Accounts::default();
    let mut owned_by: HashMap<&str, &str> = HashMap::new();
    for request in requests {
        let Some(name) = request.node else {
            accounts
                .uses
                .insert(request.name.to_owned(), (Use::Awaited, None));
            continue;
        };
        let node = nodes
            .get(name)
            .filter(|n| n.labelled_for == Some(request.name));
        let Some(node) = node else {
            accounts
                .uses
                .insert(request.name.to_owned(), (Use::Orphaned, None));
            continue;
        };
        owned_by.insert(name, request.name);
        let use_ = if node.holds || node.going {
            // A Node going (its finalizer drains it) is not idle: it is already on its way back.
            Use::InUse
        } else if node.awaited {
            Use::Awaited
        } else {
            Use::Idle
        };
        if let Some(capacity) = node.capacity {
            accounts
                .delivered
                .entry(request.class.to_owned())
                .and_modify(|d| *d = d.min_each(capacity))
                .or_insert(capacity);
        }
        accounts
            .uses
            .insert(request.name.to_owned(), (use_, Some(name.to_owned())));
    }
    let live: HashMap<&str, &RequestSeen<'_>> = requests.iter().map(|r| (r.name, r)).collect();
    let mut strays: Vec<Stray> = nodes
        .iter()
        .filter_map(|(node, seen)| {
            let labelled_for = seen.labelled_for?;
            let request = live.get(labelled_for)?;
            // A request in flight owns no Node yet: the one labelled for it is its coming
            // machine (made before the request is Ready), not a stray.
            request.node?;
            (owned_by.get(node) != Some(&labelled_for)).then(|| Stray {
                node: (*node).to_owned(),
                labelled_for: labelled_for.to_owned(),
                owned: accounts
                    .uses
                    .get(request.name)
                    .and_then(|(_, owned)| owned.clone()),
            })
        })
        .collect();
    strays.sort_by(|a, b| a.node.cmp(&b.node));
    accounts.strays = strays;
    accounts
}

/// What a class is known to deliver when less than it promises: the smallest of what its Nodes
/// report now and what its status learned for the class as it is.
pub fn delivers_less(class: &NodeClass, accounts: &Accounts) -> Option<Resources> {
    let promised = class.spec.capacity.to_resources().ok()?;
    let stored = class.delivered().and_then(|d| d.to_resources().ok());
    let seen = class
        .metadata
        .name
        .as_ref()
        .and_then(|name| accounts.delivered.get(name))
        .copied();
    let known = [stored, seen]
        .into_iter()
        .flatten()
        .fold(promised, Resources::min_each);
    (known != promised).then_some(known)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node<'a>(labelled_for: &'a str, holds: bool) -> NodeSeen<'a> {
        NodeSeen {
            labelled_for: Some(labelled_for),
            holds,
            going: false,
            awaited: false,
            capacity: Some(Resources::new(16, 64, 100)),
        }
    }

    fn ready<'a>(name: &'a str, node: &'a str) -> RequestSeen<'a> {
        RequestSeen {
            name,
            class: "m16",
            node: Some(node),
        }
    }

    #[test]
    fn each_request_is_judged_by_the_node_its_record_names() {
        let mut awaited = node("r-awaited", false);
        awaited.awaited = true;
        let mut going = node("r-going", false);
        going.going = true;
        let nodes = HashMap::from([
            ("r-used", node("r-used", true)),
            ("r-empty", node("r-empty", false)),
            ("r-awaited", awaited),
            ("r-going", going),
            // Named by r-elsewhere's record, labelled for it: a provisioner may name Nodes.
            ("lab-7", node("r-elsewhere", true)),
        ]);
        let requests = [
            RequestSeen {
                name: "r-flight",
                class: "m16",
                node: None,
            },
            ready("r-used", "r-used"),
            ready("r-empty", "r-empty"),
            ready("r-awaited", "r-awaited"),
            ready("r-going", "r-going"),
            ready("r-elsewhere", "lab-7"),
            // Ready, naming a Node that is not there: paid for, serving nothing.
            ready("r-zombie", "r-zombie"),
        ];
        let accounts = judge(&requests, &nodes);
        let uses: Vec<(&str, Use)> = accounts
            .uses
            .iter()
            .map(|(name, (u, _))| (name.as_str(), *u))
            .collect();
        assert_eq!(
            uses,
            [
                ("r-awaited", Use::Awaited),
                ("r-elsewhere", Use::InUse),
                ("r-empty", Use::Idle),
                ("r-flight", Use::Awaited),
                ("r-going", Use::InUse),
                ("r-used", Use::InUse),
                ("r-zombie", Use::Orphaned),
            ]
        );
        assert!(accounts.strays.is_empty());
        assert!(accounts.owns("lab-7") && !accounts.owns("r-zombie"));
    }

    #[test]
    fn a_node_whose_copied_label_names_a_live_request_is_a_stray_never_its_machine() {
        // r-live owns r-live (holding a tenant); "copy" is a hand-made, empty Node carrying
        // r-live's label; "old" names a request that is gone (handed back: not a stray).
        let nodes = HashMap::from([
            ("r-live", node("r-live", true)),
            ("copy", node("r-live", false)),
            ("old", node("r-gone", false)),
        ]);
        let accounts = judge(&[ready("r-live", "r-live")], &nodes);
        assert_eq!(accounts.uses["r-live"], (Use::InUse, Some("r-live".into())));
        assert_eq!(
            accounts.strays,
            [Stray {
                node: "copy".into(),
                labelled_for: "r-live".into(),
                owned: Some("r-live".into()),
            }]
        );
        // A request in flight owns no Node yet: the one labelled for it is coming, no stray.
        let coming = judge(
            &[RequestSeen {
                name: "r-flight",
                class: "m16",
                node: None,
            }],
            &HashMap::from([("r-flight", node("r-flight", false))]),
        );
        assert!(coming.strays.is_empty());
        // A request whose record names a Node labelled for another owns nothing: orphaned.
        let accounts = judge(
            &[ready("r-live", "copy2")],
            &HashMap::from([("copy2", node("r-other", false))]),
        );
        assert_eq!(accounts.uses["r-live"], (Use::Orphaned, None));
    }

    #[test]
    fn a_class_delivers_the_smallest_capacity_its_owned_nodes_report_in_each_dimension() {
        let mut a = node("a", true);
        a.capacity = Some(Resources::new(32, 256, 8000));
        let mut b = node("b", false);
        b.capacity = Some(Resources::new(64, 128, 8000));
        // A copy with a tiny capacity owned by nobody teaches nothing.
        let mut copy = node("a", false);
        copy.capacity = Some(Resources::new(1, 1, 1));
        let nodes = HashMap::from([("a", a), ("b", b), ("copy", copy)]);
        let requests = [
            RequestSeen {
                name: "a",
                class: "big",
                node: Some("a"),
            },
            RequestSeen {
                name: "b",
                class: "big",
                node: Some("b"),
            },
        ];
        let accounts = judge(&requests, &nodes);
        // min(32, 64) threads, min(256, 128) GB memory, 8000 GB storage.
        assert_eq!(
            accounts.delivered,
            BTreeMap::from([("big".to_owned(), Resources::new(32, 128, 8000))])
        );
    }
}
