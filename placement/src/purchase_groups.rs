//! Purchases for tenants with node selectors: each tenant is planned only on the classes whose
//! nodes it may go on.
//!
//! ```text
//!   waiting (queue order, each with its selector) ─┐
//!   classes, each with the labels its nodes carry ─┼─ purchase_by_labels ─▶ Purchase
//!   requests in flight, with their nodes' labels ──┘   (one [`purchase`] per group)
//! ```
//!
//! Rules enforced here:
//! - a tenant is planned only on the classes, and counted only in the requests in flight, whose
//!   nodes carry every label of its node selector (no selector: every class and request);
//!   a machine is never bought for a tenant that could not be placed on it;
//! - tenants that may go on the same classes and requests form a group; groups are planned in
//!   the queue order of their oldest tenant, each by [`purchase`] with its tenants in
//!   queue order;
//! - a request in flight whose room a group's plan uses is not offered to a later group, and a
//!   class's new nodes count against its limit for every later group: nothing is promised
//!   twice, no limit is passed;
//! - a tenant whose selector no class's labels match is left out with [`NoClass::NoneLabelled`];
//! - the answer lists requests by group, and what is left out in queue order.

use std::collections::{HashMap, HashSet};

use crate::policy::Policy;
use crate::purchase::{
    InFlightAssignment, InFlightRequest, NoClass, NodeClassOffer, Purchase, Unplaceable,
    WaitingTenant, purchase,
};
use crate::selector::{Labels, matches};

/// The positions of the classes and of the requests in flight a tenant may go on.
type Allowed = (Vec<usize>, Vec<usize>);

/// A waiting tenant and its node selector (`None` or empty: any node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectiveTenant {
    pub waiting: WaitingTenant,
    pub selector: Option<Labels>,
}

/// [`purchase`] over classes and requests whose nodes carry `labels` (parallel to each
/// slice), for tenants with node selectors. See the module doc.
pub fn purchase_by_labels(
    policy: Policy,
    classes: &[(NodeClassOffer, Labels)],
    in_flight: &[(InFlightRequest, Labels)],
    waiting: &[SelectiveTenant],
) -> Purchase {
    // Per tenant: the classes and requests its selector allows, as positions.
    let allowed = |selector: Option<&Labels>| -> Allowed {
        let classes = (0..classes.len())
            .filter(|&i| classes.get(i).is_some_and(|(_, l)| matches(selector, l)))
            .collect();
        let requests = (0..in_flight.len())
            .filter(|&i| in_flight.get(i).is_some_and(|(_, l)| matches(selector, l)))
            .collect();
        (classes, requests)
    };
    let mut groups: Vec<(Allowed, Vec<usize>)> = Vec::new();
    let mut group_of: HashMap<Allowed, usize> = HashMap::new();
    let mut outcome = Purchase::default();
    let mut unplaceable: Vec<(usize, Unplaceable)> = Vec::new();
    for (position, tenant) in waiting.iter().enumerate() {
        let selector = tenant.selector.as_ref().filter(|s| !s.is_empty());
        let key = allowed(selector);
        if key.0.is_empty()
            && let Some(selector) = selector
            && !classes.is_empty()
        {
            unplaceable.push((
                position,
                Unplaceable {
                    tenant: tenant.waiting.tenant.clone(),
                    footprint: tenant.waiting.footprint,
                    why: NoClass::NoneLabelled {
                        selector: selector.clone(),
                    },
                },
            ));
            continue;
        }
        let group = *group_of.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len().saturating_sub(1)
        });
        if let Some((_, members)) = groups.get_mut(group) {
            members.push(position);
        }
    }
    let mut used: HashSet<usize> = HashSet::new();
    let mut opened: HashMap<String, u32> = HashMap::new();
    let position_of: HashMap<&str, usize> = waiting
        .iter()
        .enumerate()
        .map(|(i, t)| (t.waiting.tenant.as_str(), i))
        .collect();
    for ((class_positions, request_positions), members) in groups {
        let offers: Vec<NodeClassOffer> = class_positions
            .iter()
            .filter_map(|&i| classes.get(i))
            .map(|(offer, _)| NodeClassOffer {
                in_use: offer
                    .in_use
                    .saturating_add(opened.get(&offer.name).copied().unwrap_or(0)),
                ..offer.clone()
            })
            .collect();
        let requests: Vec<(usize, InFlightRequest)> = request_positions
            .iter()
            .filter(|i| !used.contains(i))
            .filter_map(|&i| in_flight.get(i).map(|(r, _)| (i, r.clone())))
            .collect();
        let tenants: Vec<WaitingTenant> = members
            .iter()
            .filter_map(|&i| waiting.get(i))
            .map(|t| t.waiting.clone())
            .collect();
        let coming: Vec<InFlightRequest> = requests.iter().map(|(_, r)| r.clone()).collect();
        let planned = purchase(policy, &offers, &coming, &tenants);
        for assignment in &planned.in_flight_assignments {
            if assignment.tenants.is_empty() {
                continue;
            }
            if let Some((i, _)) = requests.iter().find(|(_, r)| r.name == assignment.request) {
                used.insert(*i);
            }
        }
        for new in &planned.requests {
            let count = opened.entry(new.class.clone()).or_insert(0);
            *count = count.saturating_add(1);
        }
        outcome.cost.unpriced_nodes = outcome
            .cost
            .unpriced_nodes
            .saturating_add(planned.cost.unpriced_nodes);
        outcome.cost.monthly = outcome.cost.monthly.saturating_add(planned.cost.monthly);
        outcome.requests.extend(planned.requests);
        outcome.in_flight_assignments.extend(
            planned
                .in_flight_assignments
                .into_iter()
                .filter(|a| !a.tenants.is_empty()),
        );
        unplaceable.extend(planned.unplaceable.into_iter().map(|u| {
            let position = position_of.get(&*u.tenant).copied();
            (position.unwrap_or(usize::MAX), u)
        }));
    }
    // Requests in flight no group used: assigned nobody, as `purchase` reports them.
    for (i, (request, _)) in in_flight.iter().enumerate() {
        if !used.contains(&i) {
            outcome.in_flight_assignments.push(InFlightAssignment {
                request: request.name.clone(),
                tenants: Vec::new(),
            });
        }
    }
    unplaceable.sort_by_key(|(position, _)| *position);
    outcome.unplaceable = unplaceable.into_iter().map(|(_, u)| u).collect();
    outcome
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Resources;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn class(
        name: &str,
        threads: u64,
        cents: u64,
        pairs: &[(&str, &str)],
    ) -> (NodeClassOffer, Labels) {
        (
            NodeClassOffer {
                name: name.into(),
                capacity: Resources::new(threads, 64, 1000),
                monthly_cost: Some(cents),
                limit: None,
                in_use: 0,
            },
            labels(pairs),
        )
    }

    fn tenant(name: &str, threads: u64, selector: &[(&str, &str)]) -> SelectiveTenant {
        SelectiveTenant {
            waiting: WaitingTenant {
                tenant: format!("default/{name}"),
                footprint: Resources::new(threads, 1, 1),
            },
            selector: (!selector.is_empty()).then(|| labels(selector)),
        }
    }

    fn bought(purchase: &Purchase) -> Vec<(String, Vec<String>)> {
        purchase
            .requests
            .iter()
            .map(|r| (r.class.clone(), r.tenants.clone()))
            .collect()
    }

    #[test]
    fn a_tenant_with_a_selector_is_planned_only_on_classes_whose_nodes_carry_its_labels() {
        // cheap (16 threads, 100) is in us, eu-box (16, 300) in eu. plain (4) takes the cheaper
        // cheap; in-eu (4, region=eu) only eu-box; in-mars (region=mars) nothing: no class has
        // its label.
        let classes = [
            class("cheap", 16, 100, &[("region", "us")]),
            class("eu-box", 16, 300, &[("region", "eu")]),
        ];
        let waiting = [
            tenant("plain", 4, &[]),
            tenant("in-eu", 4, &[("region", "eu")]),
            tenant("in-mars", 4, &[("region", "mars")]),
        ];
        let purchase = purchase_by_labels(Policy::FirstFit, &classes, &[], &waiting);
        assert_eq!(
            bought(&purchase),
            [
                ("cheap".to_owned(), vec!["default/plain".to_owned()]),
                ("eu-box".to_owned(), vec!["default/in-eu".to_owned()]),
            ]
        );
        assert_eq!(purchase.unplaceable.len(), 1);
        assert_eq!(purchase.unplaceable[0].tenant, "default/in-mars");
        assert_eq!(
            purchase.unplaceable[0].why.to_string(),
            "no node class makes nodes labelled region=mars"
        );
        // 100 + 300 cents.
        assert_eq!(purchase.cost.monthly, 400);
    }

    #[test]
    fn a_request_in_flight_is_promised_once_and_new_nodes_count_against_a_limit_for_later_groups() {
        // Three groups, each allowed other classes: a (region=eu: eu-box, eu-plain), b (cc=sev:
        // eu-box, sev-box), c (both: eu-box only); all may use the eu-box request in flight
        // (16 threads). a, first, takes it (room first). b gets a new eu-box (sev-box is at its
        // limit of 0): eu-box now 1 in use + 1 new = its limit 2. c is left out at the limit,
        // though the request in flight had room for it alone.
        let (mut eu, eu_labels) = class("eu-box", 16, 300, &[("region", "eu"), ("cc", "sev")]);
        eu.limit = Some(2);
        eu.in_use = 1;
        let (mut sev, sev_labels) = class("sev-box", 16, 500, &[("cc", "sev")]);
        sev.limit = Some(0);
        let classes = [
            (eu, eu_labels.clone()),
            (sev, sev_labels),
            class("eu-plain", 16, 200, &[("region", "eu")]),
        ];
        let in_flight = [(
            InFlightRequest {
                name: "eu-box-1".into(),
                capacity: Resources::new(16, 64, 1000),
            },
            eu_labels,
        )];
        let waiting = [
            tenant("a", 12, &[("region", "eu")]),
            tenant("b", 12, &[("cc", "sev")]),
            tenant("c", 12, &[("region", "eu"), ("cc", "sev")]),
        ];
        let purchase = purchase_by_labels(Policy::FirstFit, &classes, &in_flight, &waiting);
        assert_eq!(
            purchase.in_flight_assignments,
            [InFlightAssignment {
                request: "eu-box-1".into(),
                tenants: vec!["default/a".into()]
            }]
        );
        assert_eq!(
            bought(&purchase),
            [("eu-box".to_owned(), vec!["default/b".to_owned()])]
        );
        assert_eq!(purchase.unplaceable.len(), 1);
        assert_eq!(purchase.unplaceable[0].tenant, "default/c");
        assert!(
            matches!(purchase.unplaceable[0].why, NoClass::AtLimit { .. }),
            "{:?}",
            purchase.unplaceable[0].why
        );
    }

    #[test]
    fn without_selectors_it_is_the_plain_purchase() {
        let classes = [
            class("small", 8, 100, &[("region", "eu")]),
            class("large", 32, 250, &[]),
        ];
        let waiting = [
            tenant("a", 6, &[]),
            tenant("b", 6, &[]),
            tenant("c", 30, &[]),
        ];
        let offers: Vec<NodeClassOffer> = classes.iter().map(|(o, _)| o.clone()).collect();
        let plain: Vec<WaitingTenant> = waiting.iter().map(|t| t.waiting.clone()).collect();
        for policy in Policy::ALL {
            assert_eq!(
                purchase_by_labels(policy, &classes, &[], &waiting),
                purchase(policy, &offers, &[], &plain),
                "{policy}"
            );
        }
    }
}
