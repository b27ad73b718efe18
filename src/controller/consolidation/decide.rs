//! What consolidation does next: pure, from the pool's nodes as placement sees them, which of
//! them may be emptied, how long each has been freeable, and the disruption controls.
//!
//! Rules enforced here:
//! - only under `WhenUnderutilized`; a node may be emptied when the controller bought it (or
//!   registered it, with `--consolidate-registered`), nothing on it is `do-not-disrupt` (the node
//!   or a tenant it holds), and it is not being drained already;
//! - the nodes freed are those of the rebalance plan over the pool (`placement::consolidate_for`:
//!   whole nodes only, no over-commit, the most expensive first, each tenant only onto a node
//!   carrying its node selector's labels);
//! - a freed node is drained once it has been freeable for `--consolidate-after-seconds`, while no
//!   tenant of the pool waits for room (the room the moves take could be its), inside a
//!   disruption window, and while the nodes being emptied stay within the budget (counted over
//!   the pool's nodes; a person's drain is not counted, nor ever stopped);
//! - each freed node not drained says why ([`Blocked`]): a node a `do-not-disrupt` keeps is found
//!   by the plan made as if it were not kept;
//! - a node being emptied by consolidation that becomes `do-not-disrupt` is given back to
//!   service (`Online`): its drain is cancelled.

use std::collections::BTreeMap;
use std::time::Duration;

use placement::{Entry, Labels, NodeLedger};

pub use crate::controller::disruption::ConsolidationPolicy;

/// One of the pool's nodes, as consolidation sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Candidate {
    /// Bought by the controller (a NodeRequest's node).
    pub bought: bool,
    /// Registered from a core Node.
    pub registered: bool,
    /// The node, or a tenant it holds, is annotated `do-not-disrupt`.
    pub kept: bool,
    /// Being emptied by consolidation (Draining, with the controller's mark).
    pub consolidating: bool,
    /// Its class's monthly cost (0 when unknown).
    pub monthly_cost: u64,
}

/// The disruption controls in force at this look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Controls {
    pub mode: ConsolidationPolicy,
    pub registered: bool,
    pub after: Duration,
    /// Nodes that may be emptied at once (the budget over the pool's nodes).
    pub allowed: usize,
    pub window_open: bool,
    /// A tenant of the pool waits for room.
    pub waiting: bool,
}

/// Why a node consolidation could free is not drained now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Blocked {
    /// Freeable for less than `--consolidate-after-seconds` (said on the page, not as an Event).
    Young,
    /// The node, or a tenant on it, is `do-not-disrupt`.
    DoNotDisrupt,
    /// A tenant waits for room.
    TenantsWaiting,
    /// Outside every `--disruption-schedule` window.
    Window,
    /// As many nodes as the budget allows are being emptied.
    Budget,
}

impl Blocked {
    /// The reason as Events and the metric name it.
    pub fn reason(self) -> &'static str {
        match self {
            Blocked::Young => "NotYetDue",
            Blocked::DoNotDisrupt => "DoNotDisrupt",
            Blocked::TenantsWaiting => "TenantsWaiting",
            Blocked::Window => "OutsideWindow",
            Blocked::Budget => "BudgetExhausted",
        }
    }

    /// Why, in words (Events and the page).
    pub fn words(self) -> &'static str {
        match self {
            Blocked::Young => "freeable for less than --consolidate-after-seconds",
            Blocked::DoNotDisrupt => "it, or a tenant on it, is do-not-disrupt",
            Blocked::TenantsWaiting => "tenants wait for room",
            Blocked::Window => "outside every --disruption-schedule window",
            Blocked::Budget => "the disruption budget is in use",
        }
    }
}

/// What to do at this look.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Nodes the plan frees now (their freeable clocks run; others stop).
    pub freeable: Vec<String>,
    /// Nodes to drain now, the most expensive first.
    pub drain: Vec<String>,
    /// Drains by consolidation to cancel (the node became `do-not-disrupt`).
    pub cancel: Vec<String>,
    /// Freeable nodes not drained, and why.
    pub blocked: Vec<(String, Blocked)>,
}

/// The decision over `nodes` (the pool's, as placement sees them); `candidates` by node name
/// (a node missing there is neither emptied nor counted as being emptied); `freeable_for` how
/// long each node has been freeable before this look.
pub fn decide<'s>(
    nodes: &[NodeLedger],
    candidates: &BTreeMap<String, Candidate>,
    freeable_for: impl Fn(&str) -> Duration,
    controls: &Controls,
    selector: impl Fn(&Entry) -> Option<&'s Labels> + Copy,
) -> Decision {
    let mut decision = Decision::default();
    if controls.mode != ConsolidationPolicy::WhenUnderutilized {
        return decision;
    }
    let ours = |c: &Candidate| c.bought || (controls.registered && c.registered);
    decision.cancel = candidates
        .iter()
        .filter(|(_, c)| c.consolidating && c.kept)
        .map(|(name, _)| name.clone())
        .collect();
    let source = |kept_too: bool| {
        move |node: &NodeLedger| {
            let c = candidates.get(node.name())?;
            (ours(c) && !c.consolidating && (kept_too || !c.kept)).then_some(c.monthly_cost)
        }
    };
    let plan = placement::consolidate_for(nodes, source(false), selector);
    // A kept node is reported when it would have been freed were it not kept.
    let kept: Vec<String> = placement::consolidate_for(nodes, source(true), selector)
        .freed
        .into_iter()
        .filter(|name| candidates.get(name).is_some_and(|c| c.kept))
        .collect();
    decision
        .blocked
        .extend(kept.into_iter().map(|name| (name, Blocked::DoNotDisrupt)));
    let emptying = candidates.values().filter(|c| c.consolidating).count();
    let mut room = controls.allowed.saturating_sub(emptying);
    for name in plan.freed {
        let why = if freeable_for(&name) < controls.after {
            Some(Blocked::Young)
        } else if controls.waiting {
            Some(Blocked::TenantsWaiting)
        } else if !controls.window_open {
            Some(Blocked::Window)
        } else if room == 0 {
            Some(Blocked::Budget)
        } else {
            room = room.saturating_sub(1);
            None
        };
        match why {
            Some(why) => decision.blocked.push((name.clone(), why)),
            None => decision.drain.push(name.clone()),
        }
        decision.freeable.push(name);
    }
    decision
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// No tenant has a node selector.
    fn any(_: &Entry) -> Option<&'static Labels> {
        None
    }
    use placement::testing::ledger;

    const AFTER: Duration = Duration::from_secs(300);

    /// Ten bought nodes of 8 threads holding 1 thread each, and `big` (not bought) holding 6:
    /// every bought node can be emptied into another, but not all of them at once.
    fn fleet(count: usize) -> (Vec<NodeLedger>, BTreeMap<String, Candidate>) {
        let mut nodes = vec![
            ledger("big")
                .capacity(8, 32, 100)
                .holding("tb", (6, 0, 0))
                .build(),
        ];
        let mut candidates = BTreeMap::new();
        for i in 0..count {
            let name = format!("n{i:02}");
            let tenant = format!("t{i:02}");
            nodes.push(
                ledger(&name)
                    .capacity(8, 32, 100)
                    .holding(&tenant, (1, 0, 0))
                    .build(),
            );
            candidates.insert(
                name,
                Candidate {
                    bought: true,
                    monthly_cost: 100,
                    ..Candidate::default()
                },
            );
        }
        (nodes, candidates)
    }

    fn controls() -> Controls {
        Controls {
            mode: ConsolidationPolicy::WhenUnderutilized,
            registered: false,
            after: AFTER,
            allowed: 2,
            window_open: true,
            waiting: false,
        }
    }

    fn due(_: &str) -> Duration {
        AFTER
    }

    fn reasons(d: &Decision) -> Vec<Blocked> {
        d.blocked.iter().map(|(_, why)| *why).collect()
    }

    #[test]
    fn the_budget_holds_however_many_nodes_are_freeable() {
        let (nodes, candidates) = fleet(10);
        let d = decide(&nodes, &candidates, due, &controls(), any);
        assert_eq!(d.drain, ["n00", "n01"]);
        assert!(d.freeable.len() > 2, "{d:?}");
        assert!(reasons(&d).iter().all(|r| *r == Blocked::Budget), "{d:?}");
        // Two being emptied already: none more.
        let mut busy = candidates.clone();
        for name in ["n08", "n09"] {
            busy.get_mut(name).unwrap().consolidating = true;
        }
        let d = decide(&nodes, &busy, due, &controls(), any);
        assert!(d.drain.is_empty(), "{d:?}");
        assert!(d.cancel.is_empty(), "drains under way go on: {d:?}");
        assert!(
            !d.freeable.contains(&"n08".to_owned()),
            "being emptied: not planned again"
        );
    }

    #[test]
    fn each_control_in_turn_stops_a_drain_and_says_why() {
        let (nodes, candidates) = fleet(1);
        type Age = fn(&str) -> Duration;
        let cases: [(&str, Controls, Age, Option<Blocked>); 5] = [
            ("due", controls(), due, None),
            (
                "young",
                controls(),
                |_| AFTER - Duration::from_secs(1),
                Some(Blocked::Young),
            ),
            (
                "waiting",
                Controls {
                    waiting: true,
                    ..controls()
                },
                due,
                Some(Blocked::TenantsWaiting),
            ),
            (
                "window",
                Controls {
                    window_open: false,
                    ..controls()
                },
                due,
                Some(Blocked::Window),
            ),
            (
                "budget 0",
                Controls {
                    allowed: 0,
                    ..controls()
                },
                due,
                Some(Blocked::Budget),
            ),
        ];
        for (what, controls, age, blocked) in cases {
            let d = decide(&nodes, &candidates, age, &controls, any);
            assert_eq!(d.freeable, ["n00"], "{what}");
            match blocked {
                None => assert_eq!(d.drain, ["n00"], "{what}"),
                Some(why) => {
                    assert!(d.drain.is_empty(), "{what}");
                    assert_eq!(d.blocked, [("n00".to_owned(), why)], "{what}");
                }
            }
        }
    }

    #[test]
    fn only_ours_are_emptied_the_most_expensive_first_and_kept_ones_say_so() {
        let (nodes, mut candidates) = fleet(3);
        candidates.get_mut("n00").unwrap().kept = true;
        candidates.get_mut("n02").unwrap().monthly_cost = 300;
        let d = decide(&nodes, &candidates, due, &controls(), any);
        assert_eq!(d.drain.first().map(String::as_str), Some("n02"));
        assert!(!d.drain.contains(&"n00".to_owned()));
        assert!(
            d.blocked
                .contains(&("n00".to_owned(), Blocked::DoNotDisrupt))
        );
        assert!(d.cancel.is_empty(), "kept, but no drain to cancel: {d:?}");
        // Registered nodes only with --consolidate-registered; other nodes never.
        for c in candidates.values_mut() {
            *c = Candidate {
                registered: true,
                ..Candidate::default()
            };
        }
        assert_eq!(
            decide(&nodes, &candidates, due, &controls(), any),
            Decision::default()
        );
        let with = Controls {
            registered: true,
            ..controls()
        };
        assert_eq!(decide(&nodes, &candidates, due, &with, any).drain.len(), 2);
        candidates.clear();
        assert_eq!(
            decide(&nodes, &candidates, due, &with, any),
            Decision::default()
        );
    }

    #[test]
    fn each_reason_has_the_name_events_and_the_metric_give_it() {
        let names: Vec<&str> = [
            Blocked::Young,
            Blocked::DoNotDisrupt,
            Blocked::TenantsWaiting,
            Blocked::Window,
            Blocked::Budget,
        ]
        .map(Blocked::reason)
        .to_vec();
        assert_eq!(
            names,
            [
                "NotYetDue",
                "DoNotDisrupt",
                "TenantsWaiting",
                "OutsideWindow",
                "BudgetExhausted"
            ]
        );
    }

    #[test]
    fn a_drain_of_a_node_that_became_kept_is_cancelled_and_other_modes_do_nothing() {
        let (nodes, mut candidates) = fleet(2);
        let n01 = candidates.get_mut("n01").unwrap();
        n01.consolidating = true;
        n01.kept = true;
        let d = decide(&nodes, &candidates, due, &controls(), any);
        assert_eq!(d.cancel, ["n01"]);
        for mode in [ConsolidationPolicy::Never, ConsolidationPolicy::WhenEmpty] {
            let controls = Controls { mode, ..controls() };
            assert_eq!(
                decide(&nodes, &candidates, due, &controls, any),
                Decision::default()
            );
        }
        assert!(!ConsolidationPolicy::Never.hands_back());
        assert!(ConsolidationPolicy::WhenEmpty.hands_back());
    }
}
