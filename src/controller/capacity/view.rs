//! What the tick publishes for readers (`state::tick`), built from its snapshot, its accounts
//! and what consolidation and make-room remember. Pure, table-tested.
//!
//! Rules enforced here:
//! - every class of the pool has its line, zeros included (a reader sees a class with nothing
//!   bought); a request of a class the cache no longer holds counts under its class's name;
//! - a request counts once, by the use it was judged; a request not judged (none is) counts
//!   nowhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;

use super::accounts::{Accounts, Use, delivers_less};
use crate::api::{NodeClass, NodeRequest};
use crate::controller::consolidation;
use crate::controller::state::orders::Order;
use crate::controller::state::tick::{ClassMachines, KeptNode, StrayNode, TickView};

/// The view of one tick: `in_pool` says which classes are the pool's.
pub(super) fn view(
    classes: &[Arc<NodeClass>],
    in_pool: impl Fn(&str) -> bool,
    live: &[Arc<NodeRequest>],
    accounts: &Accounts,
    consolidation: consolidation::Snapshot,
    orders: Vec<Order>,
) -> TickView {
    let mut machines: BTreeMap<String, ClassMachines> = classes
        .iter()
        .filter(|c| in_pool(&c.name_any()))
        .map(|c| {
            let line = ClassMachines {
                class: c.name_any(),
                delivers_less: delivers_less(c, accounts),
                ..ClassMachines::default()
            };
            (c.name_any(), line)
        })
        .collect();
    for request in live {
        let Some((use_, _)) = accounts.of(request) else {
            continue;
        };
        let class = &request.spec.node_class;
        let line = machines
            .entry(class.clone())
            .or_insert_with(|| ClassMachines {
                class: class.clone(),
                ..ClassMachines::default()
            });
        let count = match use_ {
            Use::Awaited => &mut line.awaited,
            Use::InUse => &mut line.in_use,
            Use::Idle => &mut line.idle,
            Use::Orphaned => &mut line.orphaned,
        };
        *count = count.saturating_add(1);
    }
    TickView {
        machines: machines.into_values().collect(),
        strays: accounts
            .strays
            .iter()
            .map(|s| StrayNode {
                node: s.node.clone(),
                labelled_for: s.labelled_for.clone(),
            })
            .collect(),
        kept: consolidation
            .kept
            .into_iter()
            .map(|(node, why, freeable_seconds)| KeptNode {
                node,
                reason: why.reason(),
                why: why.words(),
                freeable_seconds,
            })
            .collect(),
        saved_monthly: consolidation.saved,
        orders,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::controller::capacity::accounts::Stray;
    use crate::controller::consolidation::Blocked;
    use placement::Resources;

    fn class(name: &str, threads: u32) -> Arc<NodeClass> {
        Arc::new(crate::testing::node_class(name, threads, None))
    }

    fn request(name: &str, class: &str) -> Arc<NodeRequest> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "placement.tenant-placer.dev/v1alpha1", "kind": "NodeRequest",
                "metadata": {"name": name},
                "spec": {"nodeClass": class, "tenants": ["d/t"],
                         "capacity": {"threads": 16, "memoryGb": 64, "storageGb": 100}}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn each_class_counts_its_machines_by_use_and_says_what_it_delivers_when_less() {
        let classes = [class("m16", 16), class("m32", 32), class("other", 8)];
        let live = [
            request("m16-a", "m16"),
            request("m16-b", "m16"),
            request("m16-c", "m16"),
            request("m16-d", "m16"),
            request("m16-e", "m16"),
            // Its class was deleted: it still counts, under its class's name.
            request("gone-a", "gone"),
            // Not judged (none is): counts nowhere.
            request("m32-x", "m32"),
        ];
        let mut accounts = Accounts::default();
        for (name, use_) in [
            ("m16-a", Use::InUse),
            ("m16-b", Use::InUse),
            ("m16-c", Use::Idle),
            ("m16-d", Use::Awaited),
            ("m16-e", Use::Orphaned),
            ("gone-a", Use::Idle),
        ] {
            accounts.uses.insert(name.into(), (use_, None));
        }
        accounts
            .delivered
            .insert("m16".into(), Resources::new(15, 64, 100));
        accounts.strays.push(Stray {
            node: "copy".into(),
            labelled_for: "m16-a".into(),
            owned: Some("m16-a".into()),
        });
        let kept = consolidation::Snapshot {
            kept: vec![("m16-a".into(), Blocked::Budget, 40)],
            saved: 300,
        };
        let got = view(&classes, |c| c != "other", &live, &accounts, kept, vec![]);
        let line = |class: &str, [awaited, in_use, idle, orphaned]: [u32; 4], less| ClassMachines {
            class: class.into(),
            awaited,
            in_use,
            idle,
            orphaned,
            delivers_less: less,
        };
        assert_eq!(
            got.machines,
            [
                line("gone", [0, 0, 1, 0], None),
                line("m16", [1, 2, 1, 1], Some(Resources::new(15, 64, 100))),
                line("m32", [0, 0, 0, 0], None),
            ]
        );
        assert_eq!(
            got.strays,
            [StrayNode {
                node: "copy".into(),
                labelled_for: "m16-a".into()
            }]
        );
        assert_eq!(
            got.kept,
            [KeptNode {
                node: "m16-a".into(),
                reason: Blocked::Budget.reason(),
                why: Blocked::Budget.words(),
                freeable_seconds: 40,
            }]
        );
        assert_eq!(got.saved_monthly, 300);
    }
}
